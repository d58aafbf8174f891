"""A collection's creation: its table made with its first rows and its header (a new
creation token, `created`) in one commit; on object storage, a creation LanceDB committed over
another machine's new table repaired into one table that keeps both writers' rows; and the
refusal of a write whose table was dropped (or made again) since its first commit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from probembed.store import shared_writes
from probembed.store.errors import CollectionDroppedError, StoreError, WriteConflictError
from probembed.store.handle import scan
from probembed.store.provenance import CollectionPipeline
from probembed.store.reads import CollectionReads
from probembed.store.rows import CORE_COLUMNS, WRITE_TAG, Batch, read_header, table_schema, to_arrow

#: How many times `Collection._keep_overwritten` runs its merge again when another commit
#: beat it (each attempt is one merge on the latest version).
OVERWRITE_REPAIRS = 5


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


class CollectionCreation(CollectionPipeline, CollectionReads):
    """A collection's creation, and the check that a write's table is still the one it made."""

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
