"""A backup: each collection copied at one version into a database of its own, while it is
served and written, that opens as any database does (`Database.backup`, `probembed backup`).

A plain copy of the files taken while a service wrote (`cp -a`) broke 3 times in 12: it read
`data/` before `_versions/`, and a manifest committed in between named data files it had
not copied, so the copy listed the collection and failed its first search. Here a collection
is read at one version, which a pin (`pins`, the tag a running write keeps its undo's version
with) keeps from every prune while it is read, and its rows are written, in the order the
source scans them, into a new table made in one commit: the copy holds that version's live
rows and nothing else (no other version, no deleted row still in a data file, no tag), and
a search ranks them, ties too, as the source did at that version. Then the collection's own
state: its pipeline copy (score, calibrator, tuning), read whole (`_tree_copied`), and its
members' agreement, whose row-id mark is moved to the copy's row ids (`_moved_agreement`);
never its locks, pins or search graphs (a lock names this machine's host and pid, a graph is
rebuilt from the rows). A text index the version had is built again over the copy.

The rows are rewritten rather than their files copied: which files a version needs is in
LanceDB's manifest, which no API here lists, and copying every file held other versions'
rows too (an erased one among them). It costs more time than `cp -a` and less disk (one version,
not every version kept; docs/cli.md, Backup and restore).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from probembed import atomic
from probembed.pipeline import CONFIG_FILE
from probembed.store.agreement import AGREEMENT_FILE, CollectionAgreement
from probembed.store.errors import StoreError, disk_refusals
from probembed.store.filters import id_list
from probembed.store.handle import PIPELINE_DIR, _files_gone
from probembed.store.location import Location
from probembed.store.provenance import has_copy
from probembed.store.undo import CollectionUndo

if TYPE_CHECKING:
    from probembed.store.database import Database

#: Rows read and written at a time: a collection is never held in memory whole.
BATCH_ROWS = 4096
#: Reads of a pipeline copy that another process replaced meanwhile, before giving up.
COPY_TRIES = 3


@dataclass(frozen=True)
class Backup:
    """One collection's copy: the version it was read at and the items it holds."""

    collection: str
    version: int
    items: int

    def to_json(self) -> dict[str, Any]:
        """As `probembed backup --json` prints it."""
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.collection}: version {self.version}, {self.items} item(s)"


def _tree_copied(source: Path, target: Path) -> None:
    """Copy a directory another process replaces only whole (`atomic.replace_dir`, which
    swaps a new one in), as it was at one moment: read again where it was swapped meanwhile
    (a new inode at its name) or its old files went from under the read."""
    for _ in range(COPY_TRIES):
        before = os.stat(source).st_ino
        shutil.rmtree(target, ignore_errors=True)
        try:
            shutil.copytree(source, target)
        except FileNotFoundError:
            continue
        if os.stat(source).st_ino == before:
            return
    raise StoreError(f"{source} was replaced {COPY_TRIES} times while it was copied: run it again")


def _moved_agreement(record: Mapping[str, Any], leading: int, table: Any) -> dict[str, Any]:
    """The agreement record for the copy: its row-id mark (rows above it were written since
    it was measured, `agreement_due`) moved to the copy's row ids, below which lie the
    `leading` rows the copy begins with that the source held below its own mark; any later
    row counts as written since, so the copy measures again no later than the source would."""
    if "last_rowid" not in record:
        return dict(record)
    mark = -1
    if leading:
        last = table.search().select(["id"]).with_row_id(True).offset(leading - 1).limit(1)
        mark = int(last.to_arrow().column("_rowid")[0].as_py())
    return {**record, "version": int(table.version), "last_rowid": mark}


class CollectionBackup(CollectionAgreement, CollectionUndo):
    """A collection's copy into another database, at one version, while others write it."""

    def copy_to(self, target: Database) -> Backup:
        """Copy this collection into `target` (holding no collection of its name) at its
        latest version, with its pipeline copy and agreement; what was copied."""
        record = self._agreement_record()  # before the version: measured on no later one
        version = int(self._require().version)
        items, leading, indexed = self._version_copied(version, target, record)
        copy = target.collection(self.name)
        self.db.location.fetch(self.name, PIPELINE_DIR)  # object storage: this machine's mirror
        with self._writing_to(target):
            if has_copy(self.pipeline_dir):
                _tree_copied(self.pipeline_dir, copy.pipeline_dir)
                target.location.publish(self.name, PIPELINE_DIR, CONFIG_FILE)
            if record is not None:
                moved = _moved_agreement(record, leading, copy._require())
                data = json.dumps(moved).encode()
                target.location.write_bytes(self.name, AGREEMENT_FILE, data)
            if indexed:
                copy.index_text()
        return Backup(self.name, version, items)

    def _writing_to(self, target: Database) -> contextlib.AbstractContextManager[None]:
        """The copy's writes refused by its file system (a full disk) said as the copy's, not
        as the source's: inside the source's pin, which says its own."""
        return disk_refusals(self.name, target.location.table_folder(self.name))

    def _version_copied(
        self, version: int, target: Database, record: Mapping[str, Any] | None
    ) -> tuple[int, int, bool]:
        """`_rows_copied` of `version`, pinned while it is read (where this database can be
        written: a pin is a tag), on a handle of its own (another thread moves this one's);
        and whether that version had a text index."""
        pin = version if self.db.writable else None
        with self.pinned(pin):
            at = self.db.table(self.name)
            if at is None:
                raise self.db.not_found(self.name)
            at.checkout(version)
            try:
                with self._writing_to(target):
                    items, leading = self._rows_copied(at, target, record)
            except (RuntimeError, OSError, ValueError) as exc:
                if not _files_gone(exc):
                    raise
                why = "" if pin is not None else f", or pruned: {self.db.path} is read-only here"
                raise StoreError(
                    f"version {version} of collection {self.name!r} went while the backup read "
                    f"it (dropped{why}); run the backup again"
                ) from exc
            return items, leading, any(i.index_type == "FTS" for i in at.list_indices())

    def _rows_copied(
        self, at: Any, target: Database, record: Mapping[str, Any] | None
    ) -> tuple[int, int]:
        """Write the rows of `at` (the table at one version) into a new table of `target` in
        one commit, in the order they are read, with its schema (the header, the key); how
        many, and how many of the first lie below the agreement record's row-id mark."""
        schema = at.schema
        mark = None if record is None else record.get("last_rowid")
        reader = at.search().select(schema.names).with_row_id(True).limit(None)
        items = leading = 0

        def batches() -> Iterator[pa.RecordBatch]:
            """The batches read, without their row ids, counted as they go."""
            nonlocal items, leading
            for batch in reader.to_batches(BATCH_ROWS):
                row_ids = batch.column("_rowid").to_pylist()
                if mark is not None and leading == items:
                    leading += next((i for i, r in enumerate(row_ids) if r > mark), len(row_ids))
                items += len(row_ids)
                yield pa.RecordBatch.from_arrays(batch.select(schema.names).columns, schema=schema)

        target.create_table(self.name, pa.RecordBatchReader.from_batches(schema, batches()), schema)
        return items, leading


def refuse_filled(location: Location) -> None:
    """Refuse a backup into a folder (or prefix) that holds anything: it would mix two
    databases, or overwrite one."""
    if location.holds_anything():
        raise StoreError(
            f"cannot back up into {location.path}: something is there already (a file, or "
            "a folder or prefix that holds files); give a new or empty folder or prefix"
        )


def backed_up(
    source: Database,
    to: str | os.PathLike,
    names: Sequence[str] | None,
    options: Mapping[str, str] | None,
) -> list[Backup]:
    """`Database.backup`'s work: the collections named (all by default, each refused before
    anything is written where it is not there) copied into a new database at `to`. A folder
    is written beside its place and renamed into it once whole; a prefix on object storage,
    which has no rename, is emptied again should the backup fail."""
    from probembed.store.database import Database

    named = source.collections() if names is None else id_list(names, "collections")
    handles = [source.open(name) for name in named]  # a lone name was read a letter each
    if not handles:
        raise StoreError(f"no collections in {source.path}: nothing to back up")
    location = Location(to, options)
    refuse_filled(location)
    if location.remote:
        try:
            target = Database(to, create=True, storage_options=options)
            return [handle.copy_to(target) for handle in handles]
        except BaseException:
            location.clear()
            raise
    folder = atomic.resolved(location.path)  # a link to an empty folder: that folder
    with atomic.staging_dir(folder, "backup") as staged:
        target = Database(staged, create=True)
        done = [handle.copy_to(target) for handle in handles]
        atomic.fsync_tree(staged)
        try:
            os.rename(staged, folder)  # refused where the folder was filled meanwhile
        except OSError as exc:
            raise StoreError(f"cannot back up into {folder}: {exc.strerror}") from exc
        atomic.fsync_dir(folder.parent)
    return done
