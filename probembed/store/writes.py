"""A collection's writes: add, upsert (with a sync's removal in the same step), delete by
id, by filter or by document, relocate a document's file. Each is one LanceDB commit under the
collection's write lock on this machine (`CollectionHandle._writing`), but an upsert with a
removal and a removal of more than `IDS_PER_CONDITION` ids, which take a commit more per that
many ids, put back together on an error, while a kill between them leaves the first ones
(`_removed`); on object storage, where writers of other machines are not held back by the
lock, rows go in by `shared_writes`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import pyarrow as pa

from probembed.store import shared_writes
from probembed.store.creation import CollectionCreation
from probembed.store.errors import CollectionExistsError, EveryItemError, StoreError
from probembed.store.filters import id_conditions, id_list, sql_list
from probembed.store.handle import scan
from probembed.store.kinds import refuse_mixing
from probembed.store.readers import spelled_alike, stored_spelling
from probembed.store.reads import FILE_FIELD
from probembed.store.rows import (
    WRITE_TAG,
    Batch,
    PipelineInfo,
    metadata_json,
    to_arrow,
    write_tags,
)
from probembed.store.threads import one_at_a_time
from probembed.store.undo import CollectionUndo, undoing
from probembed.variance_basis import pipeline_basis

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline


class Upserted(NamedTuple):
    """What one upsert commit did: rows inserted, replaced, and deleted (its `remove`)."""

    inserted: int
    updated: int
    removed: int


def refuse_every_item(
    where: str, name: str, matched: int, everything: int, allow_all: bool, verb: str
) -> None:
    """Refuse a filter that selects every item of a collection, `matched` of `everything`
    (`verb`: delete or erase), unless allow_all: a blank or always-true filter (`1 = 1`) does
    so by mistake."""
    if not matched or matched != everything or allow_all:
        return
    raise EveryItemError(where, name, matched, verb)


class CollectionWrites(CollectionCreation, CollectionUndo):
    """A collection's writes, each one commit under the write lock (or a removal's few, put
    back together when one fails), so one stopped by an error leaves the last version it
    began from (a removal's killed between its commits, their first ones: `_removed`)."""

    def create(self, pipeline: Pipeline) -> None:
        """Create the collection with no items, for this pipeline's vectors (one commit)."""
        if self.exists:
            raise CollectionExistsError(
                f"collection {self.name!r} already exists in {self.db.path}"
            )
        self.record_pipeline(pipeline)
        self.add(Batch([], [], [], pipeline.empty(), PipelineInfo.of(pipeline)))

    def _basis_fitted(self, batch: Batch) -> None:
        """Fit the variance basis a first write stores in the header (`rows.table_schema`)
        before any lock is taken: the fit encodes 2 x REFERENCE_ROWS texts, seconds that
        every other writer of the collection (the write lock) and every user of this handle
        waited through when it was fitted in `_create`. Once per pipeline and process; a
        handle that holds its table writes no header and looks no further (a look at the
        latest version costs a round trip, on object storage a request)."""
        self.db.require_writable()
        if batch.pipeline.source is None or self._table is not None:
            return
        if not self.exists:
            pipeline_basis(batch.pipeline.source)

    def add(self, batch: Batch, skip_stored: bool = False, created: str | None = None) -> int:
        """Append new items in one commit; returns how many. Ids already stored are an error
        (use upsert), or with `skip_stored` left as they are: decided under the write lock,
        so a writer that lost the race for an id to another one counts it as stored. On
        object storage a writer on another machine may store some of the ids after this
        one looked: its rows stay, the rest of the batch is committed, and without
        `skip_stored` the add is then refused as above, saying how many went in.
        `created`: the creation token (`created`) of the table a write's earlier commits
        went to; dropped since, or made again, it is a `CollectionDroppedError`."""
        self._basis_fitted(batch)
        return self._add(batch, skip_stored, created)

    @contextlib.contextmanager
    def _write_of(self, batch: Batch, created: str | None) -> Iterator[Any]:
        """Under the write lock, the table a write of `batch` commits to, every check of a
        write passed (writable, its pipeline, its table not dropped or made again, its kind);
        None once the batch itself made the collection (its first commit, all of it)."""
        self.db.require_writable()
        self.check_pipeline(batch.pipeline)
        with self._writing():
            table = self._open()
            self._still_made(table, created)
            refuse_mixing(self, batch.metadata, table)
            if batch.ids:  # its rows carry its tag: `batches_kept` finds them
                self.batches_begun.append(batch.tag)
            yield table if table is not None else self._create(batch)

    @one_at_a_time
    def _add(self, batch: Batch, skip_stored: bool, created: str | None) -> int:
        """`add` once the basis is fitted."""
        with self._write_of(batch, created) as table:
            if table is None:  # the batch made the collection, its first commit
                return len(batch.ids)
            existing = self.existing(batch.ids)
            if existing and not skip_stored:
                raise StoreError(
                    f"{len(existing)} ids are already in collection {self.name!r} "
                    f"(e.g. {sorted(existing)[:5]}); use upsert to replace them"
                )
            batch = batch.without(existing) if existing else batch
            if not batch.ids:
                return 0
            if not self._shared:
                shared_writes.committed(partial(table.add, self._arrow(batch, table)))
                return len(batch.ids)
            # another machine may store some of these ids between the read above and this
            # commit: the merge inserts only those still absent then
            shared_writes.keyed(table)
            data = self._arrow(batch, table)
            added = shared_writes.insert_absent(table, data)
            if added < len(batch.ids) and not skip_stored:
                raise StoreError(self._stored_meanwhile(table, data, added))
            return added

    def _stored_meanwhile(self, table: Any, data: pa.Table, added: int) -> str:
        """Why an add without `skip_stored` is refused when another machine stored some of
        its ids between its look and its merge, which kept that writer's rows and committed
        the rest (`added`): the refusal it makes when it finds them stored, saying so."""
        ids = data.column("id").to_pylist()
        stored = len(ids) - added
        named = ""
        if WRITE_TAG in data.column_names:  # theirs: stored under another write's tag
            tag = int(data.column(WRITE_TAG)[0].as_py())
            where = f"id IN ({sql_list(ids)}) AND {WRITE_TAG} <> {tag}"
            found = scan(table, ["id"], where).column("id").to_pylist()
            named = f" (e.g. {sorted(found)[:5]})" if found else ""
        return (
            f"{stored} ids are already in collection {self.name!r}{named}: another writer "
            f"stored them after this write found them absent, and its rows stay; the other "
            f"{added} were added; use upsert to replace them"
        )

    def upsert(
        self, batch: Batch, remove: Sequence[str] = (), created: str | None = None
    ) -> Upserted:
        """Insert new ids and replace stored ones in one commit, then delete the stored ids of
        `remove` that the batch does not hold (a sync's last write), a commit per
        `IDS_PER_CONDITION` of them (`_removed`): against an error the removal lands with the
        write or neither does; a kill between the commits leaves the write and the first
        parts, which the same upsert again completes. It rode the write's merge as a
        by-source delete, which joins the whole table (a 200k-row collection: +163 MB for
        5,000 ids, and its 100k ids in one `IN` on top).
        `created` as for `add`."""
        self._basis_fitted(batch)
        return self._upsert(batch, remove, created)

    @one_at_a_time
    def _upsert(self, batch: Batch, remove: Sequence[str], created: str | None) -> Upserted:
        """`upsert` once the basis is fitted."""
        with self._write_of(batch, created) as table:
            if table is None:  # the batch made the collection, its first commit
                return Upserted(len(batch.ids), 0, 0)
            if self._shared:  # two machines inserting one new id: Lance merges again
                shared_writes.keyed(table)
            start, data = int(table.version), self._arrow(batch, table)
            merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
            result = shared_writes.committed(partial(merge.execute, data))
            written = set(batch.ids)
            removal = [i for i in remove if i not in written]
            step = sorted(written | set(removal))
            ours = {batch.tag}  # a row of the step carrying another tag is another writer's
            removed = self._removed(table, id_conditions(removal), start, step, ours, begun=True)
        return Upserted(int(result.num_inserted_rows), int(result.num_updated_rows), removed)

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        where: str | None = None,
        allow_all: bool = False,
    ) -> int:
        """Delete items by id in one commit (one per `IDS_PER_CONDITION` ids, put back together
        if one fails, the first ones left by a kill: `_removed`); returns how many were there.
        Each id is found as given, else under its composed or decomposed spelling
        (`respelled`, looked up under the write lock), as `delete_documents` finds a document:
        a file's id is composed (NFC) and a name listed from a macOS folder is not, so a
        delete by those names missed the ids ingest stored. An id stored as given is the one
        deleted, and an ASCII id costs no extra read. Under the write lock, as every write: a
        delete from another handle landing between another writer's look at the table and
        its commit made that commit fail (a new metadata column's `add_columns` after a
        delete is a conflict to Lance), and two deletes of one id both counted it. Given
        `where` instead of ids, the items that SQL filter selects (checked as a search's
        `where` is), in one commit (`_delete_where`)."""
        return self._delete(ids, None, respell=True, where=where, allow_all=allow_all)

    def delete_stored(self, ids: Sequence[str], created: str | None = None) -> int:
        """`delete` of ids exactly as given: a write's own removals (a sync's, a document's
        stale chunks), ids it read from the table, where another spelling of one is another
        item and looking each up would cost a read of 100k ids. `created` as for `add`: a
        write's delete found a collection dropped and made again since deleted its ids."""
        return self._delete(ids, created, respell=False)

    @one_at_a_time
    def _delete(
        self,
        ids: Sequence[str] | None,
        created: str | None,
        respell: bool,
        where: str | None = None,
        allow_all: bool = False,
    ) -> int:
        """`delete` (`respell`: each id as given, else its other spelling) and
        `delete_stored`."""
        self.db.require_writable()
        if ids is None or where is not None:
            if (ids is None) == (where is None):
                raise StoreError("give the ids to delete or a filter, where=: one of the two")
            return self._delete_where(cast(str, where), allow_all)
        ids = id_list(ids, "ids")
        if created is None:
            self._require()  # a missing collection is refused before its lock file is made
        with self._writing():
            table = self._open() if created is not None else self._require()  # looked at again
            self._still_made(table, created)  # once no other writer can move it
            stored = self.respelled(ids) if respell else {}
            ids = [stored.get(i, i) for i in ids]
            start = int(table.version)
            return self._removed(table, id_conditions(ids), start, sorted(set(ids)), set())

    def _delete_where(self, where: str, allow_all: bool) -> int:
        """`delete`'s removal of the items a filter selects, counted and deleted under the write
        lock. A filter that selects every item is refused unless `allow_all`: a blank one, or
        one true of every row (`1 = 1`, a field compared with itself), empties the collection,
        and finding ids by a search's `where` and `k` was the way before, which never did."""
        self._require()
        with self._writing():
            table = self._require()
            everything = table.count_rows()
            matched = len(self.matching_ids(where)) if where.strip() else everything
            refuse_every_item(where, self.name, matched, everything, allow_all, "delete")
            if matched:  # blank: every item, as no filter
                shared_writes.committed(partial(table.delete, where if where.strip() else "true"))
            return matched

    def _removed(
        self,
        table: Any,
        conditions: Sequence[str],
        start: int,
        step: list[str],
        ours: set[int],
        begun: bool = False,
    ) -> int:
        """Delete the rows of these `id IN` conditions (`id_conditions`), a commit each, the
        write lock held: one `id IN` of 100k ids held +277 MB. How many were there.
        A part that fails (a conflict, storage) once the step has
        committed something (`begun`: its first commit came before) puts the step's ids back
        as they were at `start`, the version it began from (`_put_back`; rows of the step
        another writer wrote since, tagged other than `ours`, stay theirs), then raises: against
        an error the step lands whole or not at all, as one commit did. A process killed
        between the parts puts nothing back: the parts committed stay (a prefix, as a reader
        between them sees), and the same delete or sync run again removes the rest."""
        removed = 0
        try:
            for condition in conditions:
                found = int(table.count_rows(condition))
                if found:
                    shared_writes.committed(partial(table.delete, condition))
                removed += found
        except BaseException as exc:
            if begun or removed:
                with undoing(exc):
                    self._put_back(self._open(), start, step, ours)
            raise
        return removed

    def delete_documents(
        self, doc_ids: Sequence[str], wait: float | None = None, progress: bool = False
    ) -> tuple[int, list[str]]:
        """Delete every chunk of these documents, in one commit by their doc_id; returns the
        chunks deleted and the documents that had none. A document is found by its id as
        given, else as its composed or decomposed spelling (`spelled_alike`): a file's id is
        composed (NFC) and a name pasted from macOS is not, or a document stored before ids
        were composed is not. Under the write lock, as `delete`, and once any chunked ingest
        or sync of the collection on this machine has ended (`planning`, waited for `wait`
        seconds at most; None: until it ends; said as it lasts with `progress`): deleted between
        the batches of its document's write, the document was left in part (768 of its 1,670
        chunks deleted, the rest written after). The wait holds no lock of this handle."""
        self.db.require_writable()
        doc_ids = id_list(doc_ids, "doc_ids")
        self._require()
        with self.planning(f"delete of {len(doc_ids)} document(s)", wait, progress):
            return self._delete_documents(doc_ids)

    @one_at_a_time
    def _delete_documents(self, doc_ids: Sequence[str]) -> tuple[int, list[str]]:
        """`delete_documents` once no other planning write runs."""
        with self._writing():
            table = self._require()
            found = self._documents_found(table, doc_ids)
            chosen = sorted({s for s in found.values() if s is not None})
            removed = 0
            if chosen:
                condition = f"doc_id IN ({sql_list(chosen)})"
                removed = int(table.count_rows(condition))
                shared_writes.committed(partial(table.delete, condition))
        return removed, [d for d, s in found.items() if s is None]

    def _documents_found(self, table: Any, doc_ids: Sequence[str]) -> dict[str, str | None]:
        """Each of these documents (once) with the spelling its chunks are stored under: as
        given, else its composed or decomposed form (`spelled_alike`); None where none is
        stored. Refused for a collection that holds rows but no chunked documents."""
        if not self.chunked and table.count_rows():  # an empty one holds none of them
            raise StoreError(f"collection {self.name!r} holds no chunked documents (no doc_id)")
        if not doc_ids or not self.chunked:
            return dict.fromkeys(doc_ids)
        spellings = [s for d in doc_ids for s in spelled_alike(d)]
        condition = f"doc_id IN ({sql_list(spellings)})"
        stored = set(scan(table, ["doc_id"], condition).column("doc_id").to_pylist())
        return {d: stored_spelling(d, stored) for d in dict.fromkeys(doc_ids)}

    @one_at_a_time
    def relocate(self, paths: Mapping[str, str]) -> int:
        """Point the `file_path` of these documents (doc_id -> path) at where they are now, in
        one commit that rewrites that field alone (nothing is embedded again): a folder moved
        and synced kept naming the old place, and a citation built from it led nowhere. The
        rows get a new write tag, so a searcher holding them reads them again. Returns the
        chunks changed. A commit LanceDB cannot reconcile with another writer's changes
        nothing and is a `WriteConflictError`, as for every write."""
        self.db.require_writable()
        self._require()
        if not paths or self.metadata_columns().get(FILE_FIELD) != pa.string():
            return 0
        with self._writing():
            table = self._require()  # looked at again once no other writer can move it
            where = f"doc_id IN ({sql_list(list(paths))})"
            chunks = scan(table, ["id", "doc_id", "metadata"], where).to_pylist()
            if not chunks:
                return 0
            named = [paths[row["doc_id"]] for row in chunks]
            metadata = [
                metadata_json(row["id"], {**json.loads(row["metadata"]), FILE_FIELD: path})
                for row, path in zip(chunks, named, strict=True)
            ]
            columns = {
                "id": pa.array([row["id"] for row in chunks], pa.string()),
                "metadata": pa.array(metadata, pa.string()),
                FILE_FIELD: pa.array(named, pa.string()),
            }
            if WRITE_TAG in table.schema.names:
                columns[WRITE_TAG] = write_tags(len(chunks))
            # in the table's own fields: a nullable id is refused as the primary key's
            fields = pa.schema([table.schema.field(name) for name in columns])
            data = pa.table(columns, schema=fields)
            merge = table.merge_insert("id").when_matched_update_all()
            result = shared_writes.committed(partial(merge.execute, data))
        return int(result.num_updated_rows)

    def _arrow(self, batch: Batch, table: Any) -> pa.Table:
        """The batch as an Arrow table in the table's schema, adding new metadata columns."""
        if batch.fused.gaussian.dim != self.dim:
            raise StoreError(
                f"vectors have dimension {batch.fused.gaussian.dim}; collection {self.name!r} "
                f"stores dimension {self.dim}"
            )
        schema, new = self._widened(batch.ids, batch.metadata, batch.columns)
        data = to_arrow(batch, schema)  # every value converts before a column is committed
        if new:
            shared_writes.committed(partial(table.add_columns, new))
        return data
