"""The undo of a write stopped part-way: its ids put back as they were at the version it
started from, in one commit, every other row (another writer's since) left as it is; a table
the write made, dropped again when that leaves it empty.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from probembed.documents import OwnNote
from probembed.store import shared_writes
from probembed.store.errors import UndoConflictError, WriteConflictError, disk_refusals
from probembed.store.filters import id_conditions, sql_list
from probembed.store.handle import CollectionHandle, scan
from probembed.store.pins import lock_dir, pinned
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


def _rows_of(table: Any, columns: Sequence[str], ids: Sequence[str]) -> pa.Table:
    """These columns of the rows of these ids, read `IDS_PER_CONDITION` ids at a time."""
    return pa.concat_tables([scan(table, columns, where) for where in id_conditions(ids)])


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

    @contextlib.contextmanager
    def pinned(self, version: int | None) -> Iterator[None]:
        """Keep `version` from every prune while the block runs: the version a write's undo
        puts its ids back to, which its first commit replaces (`pins`); None (no collection
        yet): nothing to keep. A pin the file system refuses is said as a write's refusal."""
        table = None if version is None else self._open()
        locks = lock_dir(self.db.location.own_dir(self.name))
        with disk_refusals(self.name, self.db.path), pinned(table, version, locks):
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
    ) -> None:
        """`revert`'s one commit, the write lock held: these ids as they were at `version`
        (None: absent), those the write did not change (`_undoable`, given its rows' tags
        `ours`) left as they are, and no commit when that is all of them. Its reads name the
        ids a few thousand at a time (`id_conditions`); its commit names only those absent
        at `version`, which it deletes."""
        old = None
        if version is not None:
            then = self._undo_source(version)
            old = _in_schema(_rows_of(then, then.schema.names, ids), table.schema)
        if WRITE_TAG in table.schema.names:
            ids = _undoable(old, _rows_of(table, ["id", WRITE_TAG], ids), ids, ours)
            if not ids:
                return  # none of these ids was written since by this write
            if old is not None:
                old = old.filter(pc.is_in(old.column("id"), value_set=pa.array(ids, pa.string())))
        if old is None or not old.num_rows:
            condition = f"id IN ({sql_list(ids)})"
            shared_writes.committed(partial(table.delete, condition), UNDO_CONFLICT)
            return
        merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
        fresh = sorted(set(ids) - set(old.column("id").to_pylist()))
        if fresh:  # written since `version`, absent then
            merge = merge.when_not_matched_by_source_delete(f"id IN ({sql_list(fresh)})")
        shared_writes.committed(partial(merge.execute, old), UNDO_CONFLICT)

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
