"""The undo of a write stopped part-way: its ids put back as they were at the version it
started from, in one commit, every other row (another writer's since) left as it is; a table
the write made, dropped again when that leaves it empty. `Collection.undo` (`probembed undo`)
undoes a collection's last write, or every write after a version, the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from probembed.documents import OwnNote
from probembed.store import shared_writes
from probembed.store.errors import (
    StoreError,
    UndoConflictError,
    WriteConflictError,
    disk_refusals,
)
from probembed.store.filters import id_conditions, sql_list
from probembed.store.handle import CollectionHandle, scan
from probembed.store.pins import lock_dir, pinned
from probembed.store.reads import StoredDocument
from probembed.store.rows import WRITE_TAG
from probembed.store.threads import one_at_a_time

#: What an undo that failed leaves of the write it undid, stopped part-way (a failed chunked
#: ingest): its earlier batches, which the undo did not take out.
UNDO_LEFT = (
    "the batches that write committed before it stopped are still stored (the undo stored "
    "nothing), beside what was stored before: run the write again to complete it (a document "
    "stored in part is written again whole), or upsert its items"
)
#: What a conflict met by `Collection.revert` leaves.
UNDO_CONFLICT = f"this undid a write that stopped part-way, and {UNDO_LEFT}"
#: A collection's own file naming the versions its last chunked ingest committed
#: (`CollectionUndo.record_span`), which `undo` takes back together.
SPAN_FILE = "write-span.json"


def _tags(rows: pa.Table) -> dict[str, int | None]:
    """The write tag of each id these rows hold."""
    ids, tags = rows.column("id").to_pylist(), rows.column(WRITE_TAG).to_pylist()
    return dict(zip(ids, tags, strict=True))


def _undoable(
    then: pa.Table | None, now: pa.Table, ids: Sequence[str], ours: Collection[int] | None
) -> list[str]:
    """The ids to put back: those whose row changed since the write began (told by its write
    tag, new at every write; None: absent then), but those another writer wrote last (a tag
    not among `ours`, the tags of the write's rows, when known): put back, their commit, made
    on another machine under no lock of ours, was lost without a word."""
    before, current = ({} if then is None else _tags(then)), _tags(now)
    gone = object()  # an id's tag where no row of it is
    return [
        i
        for i in ids
        if before.get(i, gone) != current.get(i, gone)
        and (ours is None or i not in current or current[i] in ours)
    ]


def rows_of(table: Any, columns: Sequence[str], ids: Sequence[str], column: str = "id") -> pa.Table:
    """These columns of the rows of these ids (or of another column's values), read
    `IDS_PER_CONDITION` at a time; none given, none read."""
    conditions = id_conditions(ids, column) or ["false"]
    return pa.concat_tables([scan(table, columns, where) for where in conditions])


def _documents(rows: pa.Table, ids: Collection[str]) -> set[str]:
    """The documents the rows of these ids are chunks of (none: whole records)."""
    if "doc_id" not in rows.column_names:
        return set()
    pairs = zip(rows.column("id").to_pylist(), rows.column("doc_id").to_pylist(), strict=True)
    return {doc for i, doc in pairs if i in ids and doc is not None}


@contextlib.contextmanager
def undoing(stopped_by: BaseException | None) -> Iterator[None]:
    """An undo's failure told after what stopped the write (`stopped_by`), which its error
    alone hid (a full disk failed the write, then its undo, and only the undo's error was
    shown): a conflict as an `UndoConflictError` naming both, any other failure as what
    stopped the write, noted with the undo's failure and what the write left (`UNDO_LEFT`)."""
    try:
        yield
    except WriteConflictError as conflict:
        if stopped_by is None:
            raise
        raise UndoConflictError(stopped_by, conflict) from conflict
    except Exception as failure:
        if stopped_by is None:
            raise
        stopped_by.add_note(f"undoing it failed too ({type(failure).__name__}: {failure})")
        stopped_by.add_note(OwnNote(f"so {UNDO_LEFT}"))
        raise stopped_by from None


def _in_schema(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read at an earlier version in the table's schema now: metadata columns added
    since are null in them."""
    missing = [f for f in schema if f.name not in data.column_names]
    for field in missing:
        data = data.append_column(field, pa.nulls(data.num_rows, field.type))
    return data.select(schema.names).cast(schema)


@dataclass(frozen=True)
class Undone:
    """What `Collection.undo` did, for the CLI and a caller: the versions whose row changes
    it undid, the version it put their ids back as at, and what became of each id."""

    collection: str
    #: The versions undone, oldest first: their commits' rows are put back as at `to`.
    undone: tuple[int, ...]
    to: int
    #: Ids those commits added, taken out again.
    removed: tuple[str, ...]
    #: Ids those commits replaced or deleted, back as they were at `to`.
    restored: tuple[str, ...]
    #: Ids they changed that another writer has changed since: left as that writer left them.
    left: tuple[str, ...]
    #: The version the undo committed (None: nothing to put back).
    version: int | None

    def to_json(self) -> dict[str, Any]:
        """As `probembed undo --json` prints it."""
        return asdict(self)

    def __str__(self) -> str:
        span = (
            f" {self.undone[0]}"
            if len(self.undone) == 1
            else f"s {self.undone[0]}-{self.undone[-1]}"
        )
        said = f"{self.collection}: undid version{span}, its items put back as at version {self.to}"
        if self.version is None:
            return f"{said}: none to put back (another writer changed each of them since)"
        said += (
            f", in version {self.version}: {len(self.restored)} item(s) it replaced or deleted "
            f"back as they were, {len(self.removed)} it added taken out"
        )
        if self.left:
            named = ", ".join(map(repr, self.left[:5])) + (", ..." if len(self.left) > 5 else "")
            said += f"; {len(self.left)} left as another writer changed them since: {named}"
        return said


def _changed(then: pa.Table, now: pa.Table) -> tuple[list[str], set[int]]:
    """The ids whose row differs between two versions' (id, write tag) columns (written,
    replaced, deleted), and the write tags of those rows in the later one: the commits
    between them wrote those rows (a tag new to the later version missed the rows an undo
    put back, which carry the tags they had, as other rows of their write do)."""
    before, after = _tags(then), _tags(now)
    gone = object()
    ids = sorted(
        i for i in before.keys() | after.keys() if before.get(i, gone) != after.get(i, gone)
    )
    ours = {tag for i in ids if (tag := after.get(i)) is not None}
    return ids, ours


class CollectionUndo(CollectionHandle):
    """A collection's undo of a stopped write, which leaves other writers' commits as they
    are."""

    @one_at_a_time
    def revert(
        self,
        version: int | None,
        ids: Iterable[str],
        stopped_by: BaseException | None = None,
        ours: Collection[int] | None = None,
    ) -> None:
        """Put these ids back as they were at `version` (None: not there), in one commit, and
        leave every other row as it is: undoes a write stopped part-way without undoing what
        another writer (the service beside a CLI ingest) committed since, as a rollback of the
        whole table did. `version` None (no collection before the write) means the version
        this handle's creation found when another writer's table stood instead (`_found`):
        undoing to "absent" deleted that writer's rows of the same ids, and dropped the
        collection when they were all it held. Only a collection this handle made is dropped,
        when it holds nothing afterwards. Ids whose rows did not change since are left as
        they are, and given the write tags of the stopped write's rows (`ours`), so are those
        another writer wrote last (on object storage, another machine, which takes no lock
        of ours): putting them back lost its commit. No commit when that leaves none. A
        commit LanceDB cannot reconcile with another writer's is a `WriteConflictError`, as
        for every write: the ids are then left as the stopped write left them, and its
        message says so (`UNDO_CONFLICT`: a run of it again writes them whole). Given what
        stopped the write (`stopped_by`), that error is an `UndoConflictError` naming it too:
        raised in its place, the conflict hid it."""
        with undoing(stopped_by):
            self._revert(version, ids, ours)

    @one_at_a_time
    def undo(self, to: int | None = None) -> Undone:
        """Undo the collection's last write, or every write after version `to`, as `revert`
        undoes a stopped write: the ids those commits changed put back as they were before
        them, in one commit, every other row left as it is (a rollback of the table undid
        other writers' commits too), and an id another writer changed meanwhile left as it
        left it. The last write is the latest commit that changed rows (a batch of an
        ingest, a delete, an undo), and in a collection of chunked documents every commit
        back to where each document they touched was whole (`_whole_start`): a chunked
        ingest is many commits, and undoing its last alone left documents of two versions.
        The undo is a write too: undone, it puts the write back. Refused (`StoreError`) for
        a collection made before write tags, for its first write (drop the collection
        instead), and where the version to put back was pruned."""
        self.db.require_writable()
        with self._writing():
            table = self._require()
            if WRITE_TAG not in table.schema.names:
                raise StoreError(
                    f"collection {self.name!r} was made by an earlier release, whose rows carry "
                    "no write tag: an undo cannot tell one write's rows from another's"
                )
            versions = sorted(int(v["version"]) for v in table.list_versions())
            now = self._id_tags(versions[-1])
            to = self._last_write(versions, now) if to is None else self._checked(versions, to)
            then = self._id_tags(to)
            ids, ours = _changed(then, now)
            put = set(self._put_back(table, to, ids, ours)) if ids else set()
            absent = set(ids) - set(then.column("id").to_pylist())
            return Undone(
                self.name,
                tuple(v for v in versions if v > to),
                to,
                tuple(i for i in ids if i in put and i in absent),
                tuple(i for i in ids if i in put and i not in absent),
                tuple(i for i in ids if i not in put),
                int(table.version) if put else None,
            )

    def _checked(self, versions: Sequence[int], to: int) -> int:
        """`to`, where it is a version an undo can put rows back as at: one of the
        collection's, before its latest."""
        first, latest = versions[0], versions[-1]
        if not first <= to < latest:
            pruned = f"; versions before {first} were pruned" if first > 1 else ""
            raise StoreError(
                f"cannot undo to version {to}: collection {self.name!r} holds versions "
                f"{first} to {latest}{pruned}, and an undo puts rows back as at one before "
                "the latest"
            )
        return to

    def _last_write(self, versions: Sequence[int], now: pa.Table) -> int:
        """The version before the collection's last write: the one before the latest commit
        that changed rows, and further back where chunked documents need it (`_whole_start`);
        refused where none is left to undo to."""
        later = now
        for version in reversed(versions[:-1]):
            earlier = self._id_tags(version)
            if _changed(earlier, later)[0]:
                return self._whole_start(versions, self._span_start(versions, version), now)
            later = earlier
        if versions[0] == 1:
            raise StoreError(
                f"collection {self.name!r} holds only what its first write made: an undo "
                "would leave nothing; drop the collection instead (probembed drop)"
            )
        raise StoreError(
            f"no write to undo in collection {self.name!r}: its versions {versions[0]} to "
            f"{versions[-1]} hold the same rows, and those before were pruned by a compaction"
        )

    def record_span(self, start: int | None) -> None:
        """Keep the versions a write of several commits made, from after `start` (None: the
        write made the collection) to the latest, so `undo` takes them back together: a
        chunked sync's last commits (its removal) may touch only documents whole before
        them, and undoing those alone left the rest of the run in place."""
        end = self.version if self.exists else start  # a run that wrote nothing made none
        if end != start:
            record = {"created": self.created, "start": start, "end": end}
            self.db.location.write_bytes(self.name, SPAN_FILE, json.dumps(record).encode())

    def _recorded_span(self) -> tuple[int | None, int] | None:
        """The (start, end) `record_span` kept, where it is this collection's (a file left
        by a collection of this name dropped since, or not a record, is none)."""
        data = self.db.location.read_bytes(self.name, SPAN_FILE)
        try:
            record = json.loads(data) if data is not None else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(record, dict) or record.get("created") != self.created:
            return None
        return record.get("start"), int(record.get("end", 0))

    def _span_start(self, versions: Sequence[int], version: int) -> int:
        """`version`, or the version the recorded write whose commit follows it started from
        (`record_span`); refused where that write made the collection (nothing is left to
        undo to) or its start was pruned (taking back its last commits alone undid it in
        part)."""
        span = self._recorded_span()
        commit = min(v for v in versions if v > version)
        if span is None or not (span[0] or 0) < commit <= span[1]:
            return version
        start, end = span
        if start is None:
            raise StoreError(
                f"collection {self.name!r} holds only what its first write made (a chunked "
                f"ingest, versions 1 to {end}): an undo would leave nothing; drop the "
                "collection instead (probembed drop)"
            )
        if start < versions[0]:
            raise StoreError(
                f"cannot undo the last write of collection {self.name!r}, a chunked ingest of "
                f"versions {start + 1} to {end}: version {start}, which it started from, was "
                "pruned by a compaction"
            )
        return min(start, version)

    def _whole_start(self, versions: Sequence[int], start: int, now: pa.Table) -> int:
        """`start`, or an earlier version, where every document the commits after it touched
        is stored whole or not at all: a chunked write commits a document's chunks in batches,
        its chunks 0 last. Rows that name no document (whole records) need no more."""
        while start > versions[0]:
            then = self._id_tags(start)
            ids = set(_changed(then, now)[0])
            docs = _documents(then, ids) | _documents(now, ids)
            if not docs or self._documents_whole(start, docs):
                break
            start = max(v for v in versions if v < start)
        return start

    def _documents_whole(self, version: int, docs: set[str]) -> bool:
        """Whether each of these chunked documents is whole at `version` (chunked ingest's
        `unchanged`: one content hash, chunk 0 there with every chunk it counts), or absent."""
        from probembed.store.chunked import unchanged  # it builds on Collection, this on its parts

        columns = ["id", "doc_id", "doc_hash"]
        rows = rows_of(self._undo_source(version), columns, sorted(docs), "doc_id")
        stored: dict[str, StoredDocument] = {}
        for row in rows.to_pylist():
            doc = stored.setdefault(row["doc_id"], StoredDocument(set(), []))
            doc.hashes.add(row["doc_hash"])
            doc.ids.append(row["id"])
        for doc_id, doc in stored.items():
            digests = {str(h).partition("+")[0] for h in doc.hashes}
            if len(digests) != 1 or not unchanged(doc_id, digests.pop(), doc):
                return False
        return True

    def _id_tags(self, version: int) -> pa.Table:
        """The id, write tag and document (a chunk's) of every row at `version`."""
        table = self._undo_source(version)
        return scan(table, [c for c in ("id", WRITE_TAG, "doc_id") if c in table.schema.names])

    @contextlib.contextmanager
    def pinned(self, version: int | None) -> Iterator[None]:
        """Keep `version` from every prune while the block runs: the version a write's undo
        puts its ids back to, which its first commit replaces (`pins`); None (no collection
        yet): nothing to keep. A pin the file system refuses is said as a write's refusal."""
        table = None if version is None else self._open()
        locks = lock_dir(self.db.location.own_dir(self.name))
        with (
            disk_refusals(self.name, self.db.location.table_folder(self.name)),
            pinned(table, version, locks),
        ):
            yield

    def _revert(
        self, version: int | None, ids: Iterable[str], ours: Collection[int] | None
    ) -> None:
        """`revert`'s undo."""
        self.db.require_writable()
        ids = sorted(set(ids))
        with self._writing():
            table = self._open()
            if table is None or not ids:
                return
            version = self._found_version() if version is None else version
            self._put_back(table, version, ids, ours)
            made = self._made is not None and self._made == self.created
            if version is None and made and not table.count_rows():
                self.db.drop(self.name, locked=True)  # still the handle for this name
                self._table, self._pipeline = None, None
                self._shares = None
                self._seen, self._header_at = None, None

    def _put_back(
        self, table: Any, version: int | None, ids: Sequence[str], ours: Collection[int] | None
    ) -> list[str]:
        """`revert`'s one commit, the write lock held: these ids as they were at `version`
        (None: absent), those the write did not change (`_undoable`, given its rows' tags
        `ours`) left as they are, and no commit when that is all of them. Its reads name the
        ids a few thousand at a time (`id_conditions`); its commit names only those absent
        at `version`, which it deletes. The ids it put back."""
        old = None
        if version is not None:
            then = self._undo_source(version)
            old = _in_schema(rows_of(then, then.schema.names, ids), table.schema)
        if WRITE_TAG in table.schema.names:
            ids = _undoable(old, rows_of(table, ["id", WRITE_TAG], ids), ids, ours)
            if not ids:
                return []  # none of these ids was written since by this write
            if old is not None:
                old = old.filter(pc.is_in(old.column("id"), value_set=pa.array(ids, pa.string())))
        if old is None or not old.num_rows:
            condition = f"id IN ({sql_list(ids)})"
            shared_writes.committed(partial(table.delete, condition), UNDO_CONFLICT)
            return list(ids)
        merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
        fresh = sorted(set(ids) - set(old.column("id").to_pylist()))
        if fresh:  # written since `version`, absent then
            merge = merge.when_not_matched_by_source_delete(f"id IN ({sql_list(fresh)})")
        shared_writes.committed(partial(merge.execute, old), UNDO_CONFLICT)
        return list(ids)

    def _undo_source(self, version: int) -> Any:
        """The table at the version an undo puts ids back to; pruned (`compact`: the write ran
        longer than the retention after its first commit), a `WriteConflictError` saying so
        and what the stopped write left, where LanceDB's ValueError named neither."""
        try:
            return self._at_version(version)
        except ValueError as exc:
            if "no longer exists" not in str(exc):
                raise
            raise WriteConflictError(
                f"version {version}, which the undo puts them back to, was pruned by a "
                "compaction (an ingest's after a day, `probembed compact --keep`, a "
                "service's --compact-keep; a write's tag keeps it for a week at most); "
                f"{UNDO_CONFLICT}"
            ) from exc

    def _found_version(self) -> int | None:
        """The version to undo this handle's writes to when the collection was not there
        before them: the one its creation found (`_found`), while the table is still that
        one; else None (rows of the ids are deleted, and a table this handle made is dropped
        when left empty)."""
        if self._found is None or self._found[0] != self.created:
            return None
        return self._found[1]
