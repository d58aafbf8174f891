"""A collection: one LanceDB table of probabilistic embeddings in a `Database`.

A row holds id, text, metadata (JSON), the fused mean and variance, and the per-model fusion
weights. Which pipeline made the vectors is kept in the table's schema metadata, written in the
same commit as the first rows, so a collection can refuse vectors from any other pipeline, and a
copy of that pipeline is kept beside the table (see `probembed.store.provenance`), so
`collection.search(...)` needs no pipeline argument. Every write is one LanceDB commit: an
interrupted write leaves the last committed version. Its `Database` is in
`probembed.store.database`, its filters' checks in `probembed.store.filters`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import pyarrow as pa
import pyarrow.compute as pc

from probembed.store import shared_writes
from probembed.store.agreement import CollectionAgreement
from probembed.store.errors import (
    CollectionDroppedError,
    CollectionExistsError,
    StoreError,
    WriteConflictError,
)
from probembed.store.filters import sql_list
from probembed.store.handle import scan
from probembed.store.provenance import CollectionPipeline
from probembed.store.reads import CHUNK_COLUMNS, FILE_FIELD
from probembed.store.rows import (
    CORE_COLUMNS,
    WRITE_TAG,
    Batch,
    PipelineInfo,
    metadata_json,
    metadata_types,
    read_header,
    table_schema,
    to_arrow,
    write_tags,
)
from probembed.store.search import QueryResult, Searcher, check_arguments
from probembed.store.threads import one_at_a_time
from probembed.store.undo import CollectionUndo
from probembed.store.upkeep import CollectionUpkeep
from probembed.store.variance import pipeline_basis

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline
    from probembed.scoring import Score

#: How many times `Collection._keep_overwritten` runs its merge again when another commit
#: beat it (each attempt is one merge on the latest version).
OVERWRITE_REPAIRS = 5


class Upserted(NamedTuple):
    """What one upsert commit did: rows inserted, replaced, and deleted (its `remove`)."""

    inserted: int
    updated: int
    removed: int


@dataclass(frozen=True)
class CollectionStats:
    """Size and provenance of a collection."""

    name: str
    count: int
    dim: int
    #: The latest version's data files over its live items: rows deleted or replaced (an
    #: upsert, a re-chunk) still count until a compaction rewrites them, older versions (until
    #: `compact` prunes them) do not. None when it holds no item.
    bytes_per_item: float | None
    total_bytes: int
    version: int
    pipeline: PipelineInfo
    #: The fusion weights this collection adapted its prior to (None: the prior as shipped).
    adapted_weights: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict for the CLI and the service."""
        return {
            "name": self.name,
            "count": self.count,
            "dim": self.dim,
            "bytes_per_item": None
            if self.bytes_per_item is None
            else round(self.bytes_per_item, 1),
            "total_bytes": self.total_bytes,
            "version": self.version,
            "pipeline": self.pipeline.to_json(),
            "adapted_weights": self.adapted_weights,
        }


class Collection(CollectionAgreement, CollectionPipeline, CollectionUndo, CollectionUpkeep):
    """One LanceDB table of items with their fused Gaussians, searchable with its own pipeline."""

    def create(self, pipeline: Pipeline) -> None:
        """Create the collection with no items, for this pipeline's vectors (one commit)."""
        if self.exists:
            raise CollectionExistsError(
                f"collection {self.name!r} already exists in {self.db.path}"
            )
        self.record_pipeline(pipeline)
        self.add(Batch([], [], [], pipeline.empty(), PipelineInfo.of(pipeline)))

    def close(self) -> None:
        """Release the warm searcher's files (its snapshot's unlinked temporary files hold
        their disk space until closed); the next search loads the rows again."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None

    def searcher(self) -> Searcher:
        """This collection's searcher with its pipeline, kept warm across calls.

        When the collection moves to a new version it takes in only the rows that changed.
        For other `IndexSettings`, build a `Searcher(collection, collection.load_pipeline(), s)`.
        The latest version is looked for first: a pipeline copy replaced by another process
        (`record_pipeline(replace=True)`) is searched with from the next search on.
        """
        self.version  # noqa: B018  reads the header of a newer version, and its settings mark
        pipeline = self.load_pipeline()
        if self._searcher is None or self._searcher.pipeline is not pipeline:
            if self._searcher is not None:
                self._searcher.close()
            self._searcher = Searcher(self, pipeline)
        return self._searcher

    @overload
    def search(  # type: ignore[overload-overlap]  # a str, a Sequence too, matches here first
        self,
        queries: str,
        k: int = ...,
        score: Score | str | None = ...,
        exact: bool = ...,
        where: str | None = ...,
        hybrid: bool = ...,
        beta: float | None = ...,
        min_p_relevant: float | None = ...,
        group_by_doc: bool = ...,
    ) -> QueryResult: ...

    @overload
    def search(
        self,
        queries: Sequence[str],
        k: int = ...,
        score: Score | str | None = ...,
        exact: bool = ...,
        where: str | None = ...,
        hybrid: bool = ...,
        beta: float | None = ...,
        min_p_relevant: float | None = ...,
        group_by_doc: bool = ...,
    ) -> list[QueryResult]: ...

    def search(
        self,
        queries: str | Sequence[str],
        k: int = 10,
        score: Score | str | None = None,
        exact: bool = False,
        where: str | None = None,
        hybrid: bool = False,
        beta: float | None = None,
        min_p_relevant: float | None = None,
        group_by_doc: bool = False,
    ) -> QueryResult | list[QueryResult]:
        """The k best items for one query (-> one result) or several (-> one result each).

        Queries are encoded by the collection's own pipeline (`load_pipeline`); see
        `Searcher.search` for `score`, `exact`, `where`, `hybrid`, `beta`, `min_p_relevant`
        and `group_by_doc`.
        """
        batch = [queries] if isinstance(queries, str) else queries
        check_arguments(batch, k, score, min_p_relevant)  # before the pipeline loads
        searcher = self.searcher()
        results = searcher.search(
            batch, k, score, exact, where, hybrid, beta, min_p_relevant, group_by_doc
        )
        return results[0] if isinstance(queries, str) else results

    def stats(self) -> CollectionStats:
        """Count, the latest version's bytes per item, and the pipeline."""
        table = self._require()
        raw = table.stats()
        count = int(raw["num_rows"])
        total = int(raw["total_bytes"])
        record = self._agreement_record() or {}
        weights = record.get("weights")
        adapted = None if weights is None else dict(zip(self.pipeline.models, weights, strict=True))
        return CollectionStats(
            self.name,
            count,
            self.dim,
            total / count if count else None,
            total,
            self.version,
            self.pipeline,
            adapted,
        )

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

    @one_at_a_time
    def _add(self, batch: Batch, skip_stored: bool, created: str | None) -> int:
        """`add` once the basis is fitted."""
        self.db.require_writable()
        self.check_pipeline(batch.pipeline)
        with self._writing():
            table = self._open()
            self._still_made(table, created)
            self._refuse_whole(batch.metadata, table)
            if table is None:
                table = self._create(batch)
                if table is None:
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
        """Insert new ids and replace stored ones, and delete the stored ids of `remove` that
        the batch does not hold (a sync's last write: its removal lands with it or not at
        all), in one commit. `created` as for `add`."""
        self._basis_fitted(batch)
        return self._upsert(batch, remove, created)

    @one_at_a_time
    def _upsert(self, batch: Batch, remove: Sequence[str], created: str | None) -> Upserted:
        """`upsert` once the basis is fitted."""
        self.db.require_writable()
        self.check_pipeline(batch.pipeline)
        with self._writing():
            table = self._open()
            self._still_made(table, created)
            self._refuse_whole(batch.metadata, table)
            if table is None:
                table = self._create(batch)
                if table is None:
                    return Upserted(len(batch.ids), 0, 0)
            if self._shared:  # two machines inserting one new id: Lance merges again
                shared_writes.keyed(table)
            data = self._arrow(batch, table)
            merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
            if remove:
                merge = merge.when_not_matched_by_source_delete(f"id IN ({sql_list(remove)})")
            result = shared_writes.committed(partial(merge.execute, data))
        inserted, updated = int(result.num_inserted_rows), int(result.num_updated_rows)
        return Upserted(inserted, updated, int(result.num_deleted_rows))

    @one_at_a_time
    def delete(self, ids: Sequence[str], created: str | None = None) -> int:
        """Delete items by id in one commit; returns how many were there. Under the write
        lock, as every write: a delete from another handle landing between another writer's
        look at the table and its commit made that commit fail (a new metadata column's
        `add_columns` after a delete is a conflict to Lance), and two deletes of one id both
        counted it. `created` as for `add`: a write's delete (a sync's removal, a document's
        stale chunks) found a collection dropped and made again since deleted its ids."""
        self.db.require_writable()
        if isinstance(ids, str):
            raise StoreError(f"ids must be a list of strings, not one string; wrap it: [{ids!r}]")
        if created is None:
            self._require()  # a missing collection is refused before its lock file is made
        with self._writing():
            table = self._open() if created is not None else self._require()  # looked at again
            self._still_made(table, created)  # once no other writer can move it
            if not ids:
                return 0
            condition = f"id IN ({sql_list(ids)})"
            found = table.count_rows(condition)
            if found:
                shared_writes.committed(partial(table.delete, condition))
        return int(found)

    @one_at_a_time
    def delete_documents(self, doc_ids: Sequence[str]) -> tuple[int, list[str]]:
        """Delete every chunk of these documents, in one commit by their doc_id (a chunk a
        re-chunk writes meanwhile goes too); returns the chunks deleted and the documents
        that had none. Under the write lock, as `delete`."""
        self.db.require_writable()
        if isinstance(doc_ids, str):
            raise StoreError(f"doc_ids must be a list of strings, not one string: [{doc_ids!r}]")
        self._require()
        with self._writing():
            table = self._require()
            if not self.chunked and table.count_rows():  # an empty one holds none of them
                raise StoreError(f"collection {self.name!r} holds no chunked documents (no doc_id)")
            if not doc_ids or not self.chunked:
                return 0, list(dict.fromkeys(doc_ids))
            condition = f"doc_id IN ({sql_list(doc_ids)})"
            present = scan(table, ["doc_id"], condition).column("doc_id").to_pylist()
            if present:
                shared_writes.committed(partial(table.delete, condition))
        return len(present), [d for d in dict.fromkeys(doc_ids) if d not in set(present)]

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

    def _still_made(self, table: Any, created: str | None) -> None:
        """Refuse a write's next commit when the table of its earlier ones (`created`, its
        creation token) is gone: its commit would make a new collection of the rest."""
        if created is None:
            return
        header = None if table is None else read_header(table.schema)
        if header is None or (header.get("created") != created and not self._absorbed(created)):
            raise CollectionDroppedError(self.name)

    def _absorbed(self, created: str) -> bool:
        """Whether the table of `created` was overwritten by another machine's creation and
        repaired into one table (`_keep_overwritten` keeps the later token): an earlier
        version of this table bears `created`. A table dropped and made again starts its
        versions afresh, without it. Only on object storage, where such overwrites happen;
        read only when the token differs, version by version from the newest."""
        if not self._shared:
            return False
        history = self.db.table(self.name)
        for version in sorted((v["version"] for v in history.list_versions()), reverse=True):
            history.checkout(version)
            if (read_header(history.schema) or {}).get("created") == created:
                return True
        return False

    def refuse_whole_records(self, metadata: Sequence[Mapping[str, Any]]) -> None:
        """Refuse items that are not chunks (metadata without doc_id, chunk and doc_hash) into
        a collection of chunks, or beside chunks in one write: they name no document, so a
        sync of the documents kept them and a search by document ranked them first as
        documents of their own. Checked again by every commit (`add`, `upsert`)."""
        self._refuse_whole(metadata, self._open())

    def _refuse_whole(self, metadata: Sequence[Mapping[str, Any]], table: Any) -> None:
        """`refuse_whole_records` against `table` as opened (None: not made yet)."""
        whole = sum(not m.keys() >= CHUNK_COLUMNS for m in metadata)
        chunked = table is not None and set(table.schema.names) >= CHUNK_COLUMNS
        if not whole or (whole == len(metadata) and not chunked):
            return
        held = "holds documents as chunks" if chunked else "is given chunks in this write"
        raise StoreError(
            f"collection {self.name!r} {held}: {whole} of these "
            f"{len(metadata)} items are whole records (no doc_id, chunk and doc_hash), which a "
            "sync of the documents would keep and a search by document would rank as "
            "documents of their own; write them with chunking (probembed ingest --chunk, "
            'ingest_documents in Python, the service\'s "chunk"), or into another collection'
        )

    def _create(self, batch: Batch) -> Any:
        """Create the table with its first rows and its pipeline header in one commit; None
        once done. On object storage another machine may create it meanwhile: then nothing
        is created and the table it made is returned, for the batch to go into as into any.

        LanceDB refuses a creation that finds the table there, but one whose table appeared
        between its look and its commit is committed as an overwrite of it (seen on moto's
        S3 and on disk): the rows the other writer had stored are then not in the latest
        version. `_keep_overwritten` puts them back and takes this creation's rows out, and
        the batch is then written as into a table that was there. A local collection's
        creation is held by the write lock, so only a shared one can land as an overwrite.
        """
        token = uuid.uuid4().hex
        schema = table_schema(batch, created=token)
        data = to_arrow(batch, schema)
        self._seen, self._header_at = None, None  # a new table: its own versions and header
        self._found = None
        try:
            self._table = self.db.create_table(self.name, data, schema)
        except ValueError as exc:
            if not self._shared or "already exists" not in str(exc):
                raise
        else:
            version = int(self._table.version)
            if version == 1 or not self._shared:
                self._made = token
                return None
            try:
                self._keep_overwritten(version, data)
            finally:  # given up too: what this write's undo puts back is that table's
                self._seen, self._header_at = None, None
                self._found = (self.created, self._seen_version())
        table = self._require()
        if self._found is None:
            self._found = (self.created, self._seen_version())
        self.check_pipeline(batch.pipeline)  # the other writer's may be another pipeline
        return table

    def _keep_overwritten(self, version: int, ours: pa.Table) -> None:
        """Undo a creation LanceDB committed as `version`, an overwrite of the table another
        writer had just made (version - 1), without losing a commit made since.

        Restoring version - 1 alone drops every commit that landed on the overwrite before
        the restore, such as the first creator's next batch: LanceDB's restore commits the
        old version whole on top of whatever is latest. So first, in one merge on the latest
        version, the other writer's rows of version - 1 go back where their id is absent or
        still holds this creation's row (told by its write tag, `WRITE_TAG`, new per write),
        and this creation's rows no commit has replaced since are deleted. A row another
        writer wrote after the overwrite carries its own tag and stays as it is. What either
        writer committed is then in the table once, and the caller writes its batch into it
        like any write (an id the other writer stored first counts as already stored). The
        merge is re-run from the latest version if another commit beats it (it only adds back
        and takes out rows by id and tag, so running it again changes nothing done). An id
        the other writer deleted between the overwrite and this merge comes back from
        version - 1.

        The schema's header stays this creation's (its token, `created`, is new to the other
        writer, whose handles then read the pipeline copy again): the pipelines agree on
        their fingerprint, dimension and variance format, or the rows could not share a
        table. When every merge is beaten, or a metadata field of both first batches has
        another type in each (a price of 9.99 against one of 10: LanceDB cannot change a
        column's type, so the other writer's rows would not fit this table), the other
        writer's table, its header with it, is put back by a restore and what the restore
        dropped is merged back into it (`_restore_keeping`). When the pipelines differ,
        version - 1 is restored and nothing more: a commit on the overwrite meanwhile holds
        this pipeline's vectors, which the other writer's table refuses. The batch is then
        written into it or refused as into any table (`check_pipeline`, `_arrow`).
        """
        theirs = self.db.table(self.name)
        if theirs is None:  # dropped since: nothing of the other writer's is left to keep
            return
        theirs.checkout(version - 1)
        header, mine = read_header(theirs.schema), read_header(ours.schema) or {}
        same = ("format", "dim", "variance")
        if (
            header is None
            or header["pipeline"]["fingerprint"] != mine["pipeline"]["fingerprint"]
            or any(header.get(key) != mine.get(key) for key in same)
        ):
            shared_writes.committed(lambda: self._require().restore(version - 1))
            return
        rows = scan(theirs, theirs.schema.names)
        tag = int(ours.column(WRITE_TAG)[0].as_py())
        merge = partial(_put_back_over, tag=tag)
        try:
            given_up = self._merged_back(rows, merge) is not None
        except StoreError:  # a field of both first batches is typed otherwise in each
            given_up = True
        if given_up:
            self._restore_keeping(version, rows, tag)

    def _merged_back(self, rows: pa.Table, merge: Callable[[Any], Any]) -> str | None:
        """Merge rows read at an earlier version into the latest one (`merge`: the table's
        merge builder), adding the metadata columns they hold values in that it lacks, again
        from the latest version when another commit beats it (`OVERWRITE_REPAIRS` attempts):
        None once merged, else why it could not be (a field they hold a value in has another
        type there, or the last conflict's words), for the message of whoever gives up.
        Their metadata columns are made again from their JSON in the table's types
        (`_refitted`); a value no column of it can hold is a `StoreError` naming the field."""
        why = ""
        for _ in range(OVERWRITE_REPAIRS):
            self._seen, self._header_at = None, None
            data, new = self._refitted(rows)  # a look at the latest version
            table = self._as_seen()
            try:
                if new:  # metadata columns only these rows brought
                    shared_writes.committed(partial(table.add_columns, new))
                shared_writes.committed(partial(merge(table).execute, data))
                return None
            except WriteConflictError as conflict:
                cause = conflict.__cause__
                said = str(cause).splitlines()[0] if cause is not None and str(cause) else ""
                why = f"each of {OVERWRITE_REPAIRS} merges met another commit: {said}"
        return why

    def _restore_keeping(self, version: int, before: pa.Table, tag: int) -> None:
        """Put the other writer's table (`version` - 1, whose rows are `before`) back by a
        restore, which no commit beats, then merge back what that restore dropped: the rows
        of the version it replaced that neither this creation (`tag`) nor that table wrote,
        i.e. what other writers committed on the overwrite meanwhile, where the id is absent
        or still holds that table's row. Restoring alone lost them (the first creator's next
        batch, reported added). An id deleted on the overwrite meanwhile comes back, as on
        the merge path: the restore brings that table back whole. When they cannot go back
        either, the write is a `WriteConflictError` naming them and the version that holds
        them (a `StoreError` naming the field, when a value they hold fits no column)."""
        table = self._require()
        not_back = (
            f"the table another writer made at the same moment (version {version - 1}) is "
            "not put back, so its rows are not in the latest version; nothing of this one was "
            "stored"
        )
        shared_writes.committed(partial(table.restore, version - 1), not_back)
        held = int(table.version) - 1  # what the restore committed over
        replaced = self.db.table(self.name)
        replaced.checkout(held)
        self._seen, self._header_at = None, None
        written = scan(replaced, replaced.schema.names)
        tags = {tag, *before.column(WRITE_TAG).to_pylist()} - {None}
        known = pc.is_in(written.column(WRITE_TAG), value_set=pa.array(sorted(tags), pa.int64()))
        meanwhile = written.filter(pc.invert(known))
        if not meanwhile.num_rows:
            return
        olds = sorted(tags - {tag})
        merge = partial(_newer_over, tags=olds)
        ids = sorted(meanwhile.column("id").to_pylist())
        try:
            why = self._merged_back(meanwhile, merge)
        except StoreError as clash:
            raise StoreError(self._not_back(ids, held, str(clash))) from clash
        if why is not None:
            raise WriteConflictError(self._not_back(ids, held, why))

    def _not_back(self, ids: Sequence[str], held: int, why: str) -> str:
        """Why a write is refused when rows other writers committed on its overwrite could
        not go back into the table its repair restored, and what to do."""
        return (
            f"this write's creation of collection {self.name!r} replaced the table another "
            "writer made at the same moment; that table is restored, but the "
            f"{len(ids)} rows other writers committed on the replaced table meanwhile (e.g. "
            f"{list(ids[:5])}) could not go back into it ({why}): they are not stored now "
            f"(version {held} of the table holds them), and nothing of this write was "
            "stored. Run this write again, and the writes that stored those rows (an ingest "
            "run again stores what is missing)"
        )

    def _refitted(self, rows: pa.Table) -> tuple[pa.Table, list[pa.Field]]:
        """Rows read at another version in the table's latest schema, with the columns to add
        for fields new to it: their metadata columns made from their JSON as a write of them
        would make them (`_widened`: the column cap, fields held in the JSON only), so a
        field typed otherwise there (an int64 price written on an overwrite, a double one
        here) or kept in the JSON there comes back as this table holds it."""
        ids = rows.column("id").to_pylist()
        metadata = [json.loads(text) for text in rows.column("metadata").to_pylist()]
        schema, new = self._widened(ids, metadata)
        columns = {
            f.name: rows.column(f.name).cast(f.type)
            if f.name in CORE_COLUMNS
            else pa.array([m.get(f.name) for m in metadata], f.type)
            for f in schema
        }
        return pa.Table.from_pydict(columns, schema=schema), new

    def _widened(
        self,
        ids: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
        planned: Mapping[str, pa.DataType] | None = None,
    ) -> tuple[pa.Schema, list[pa.Field]]:
        """The table's schema at the latest version (`column_types` looks) with the metadata
        columns these items bring, and those new columns (`rows.metadata_types`): a value a
        column cannot hold is a `StoreError` naming the item and the field."""
        known = self.column_types(metadata)
        types = metadata_types(ids, metadata, known, planned)
        new = [pa.field(k, t) for k, t in types.items() if k not in known]
        schema = self._as_seen().schema
        for field in new:
            schema = schema.append(field)
        return schema, new

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


def _put_back_over(table: Any, tag: int) -> Any:
    """The merge that puts the overwritten table's rows back over the creation written with
    `tag`: where the id is absent or holds that creation's row, whose rows left are deleted."""
    return (
        table.merge_insert("id")
        .when_matched_update_all(where=f"target.{WRITE_TAG} = {tag}")
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete(f"{WRITE_TAG} = {tag}")
    )


def _newer_over(table: Any, tags: Sequence[int]) -> Any:
    """The merge that puts rows written after a restored version back: where the id is
    absent or still holds a row of that version (written with one of `tags`)."""
    merge = table.merge_insert("id")
    if tags:
        olds = ", ".join(map(str, tags))
        merge = merge.when_matched_update_all(where=f"target.{WRITE_TAG} IN ({olds})")
    return merge.when_not_matched_insert_all()
