"""What a collection holds, read: ids, rows, vectors, listings and takes at a version, the
metadata columns and fields a filter can name, chunked ingest's documents, BM25 text search.

`CollectionReads` builds on the table handle (`probembed.store.handle`); every read looks at
the latest version first, and one made in several steps holds the handle's lock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from probembed.store import shared_writes
from probembed.store.errors import ReadOnlyError
from probembed.store.filters import filtered, id_list, sql_list
from probembed.store.handle import CollectionHandle, scan
from probembed.store.kinds import CHUNK_COLUMNS
from probembed.store.readers import spelled_alike, stored_spelling
from probembed.store.rows import (
    CORE_COLUMNS,
    MAX_METADATA_COLUMNS,
    NOT_A_COLUMN,
    WRITE_TAG,
    fresh_scalar_fields,
    metadata_types,
    to_matrix,
)
from probembed.store.threads import one_at_a_time

#: The kinds of LanceDB index (`IndexConfig.index_type`) `built` makes, by the name of their
#: configuration in `lancedb.index`: the text index probembed makes (with its defaults) and
#: scalar indices, whose settings are their kind's alone.
REBUILT_KINDS = ("FTS", "BTree", "Bitmap", "LabelList")

#: Where chunked ingest records the file a document was read from (its absolute path, as
#: LlamaIndex's file readers name it).
FILE_FIELD = "file_path"


@dataclass(frozen=True)
class Vectors:
    """A collection's vectors at one version, in memory, for search."""

    ids: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    weights: np.ndarray
    version: int
    #: LanceDB row ids at this version: reading hits' text by row id is a direct take.
    row_ids: np.ndarray
    #: Each row's document (chunked collections), else None.
    doc_ids: np.ndarray | None = None


@dataclass
class StoredDocument:
    """A document as chunked ingest stored it: its chunks' content hashes (one, when written
    whole), their ids, and the file it was read from when written (None: a record, or
    written before chunks named their file)."""

    hashes: set[str]
    ids: list[str]
    file_path: str | None = None


def built(table: Any, column: str, kind: str, name: str | None = None) -> None:
    """Build an index of `kind` (one of `REBUILT_KINDS`) over `column` from the rows the
    table holds now, replacing the index of that name (None: LanceDB's default name)."""
    import lancedb.index

    config = getattr(lancedb.index, kind)()
    shared_writes.committed(
        lambda: table.create_index(column, config=config, replace=True, name=name)
    )


class CollectionReads(CollectionHandle):
    """A collection's reads, each from the latest version: what search, ingest and the
    front doors ask of what is stored."""

    def count(self, where: str | None = None) -> int:
        """Number of items, optionally only those matching a filter."""
        table = self._open()
        if table is None:
            return 0
        return int(filtered(lambda: table.count_rows(where), where, self))

    def ids(self) -> set[str]:
        """Every id in the collection."""
        table = self._open()
        if table is None:
            return set()
        return set(scan(table, ["id"]).column("id").to_pylist())

    def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of these ids are already stored."""
        table = self._open()
        if table is None or not ids:
            return set()
        rows = scan(table, ["id"], f"id IN ({sql_list(ids)})")
        return set(rows.column("id").to_pylist())

    def respelled(self, ids: Sequence[str]) -> dict[str, str]:
        """Each of these ids not stored as given but under another Unicode spelling of it
        (composed or decomposed: `readers.stored_spelling`, as `delete_documents` finds a
        document), mapped to that stored id: an id from a file name is stored composed and a
        name listed from a macOS folder is decomposed. `delete` and `rows` find an id so. An
        id of one spelling (ASCII) costs no read."""
        variants = {i: spelled_alike(i) for i in dict.fromkeys(ids)}
        variants = {i: forms for i, forms in variants.items() if len(forms) > 1}
        if not variants:
            return {}
        stored = self.existing(sorted({form for forms in variants.values() for form in forms}))
        found = {i: stored_spelling(i, stored) for i in variants}
        return {i: s for i, s in found.items() if s is not None and s != i}

    def batches_kept(self, tags: Sequence[int]) -> int | None:
        """How many of these batches (their write tags: `Batch.tag`, `batches_begun`) rows
        still carry: what an ingest stopped part-way keeps of those it began (one stopped
        before it landed, or put back, as a streamed file stopped part-way is, is not). None
        where rows carry no tag (a collection made before tags)."""
        table = self._open()
        if table is None or not tags:
            return 0
        if WRITE_TAG not in table.schema.names:
            return None
        where = f"{WRITE_TAG} IN ({', '.join(str(int(t)) for t in set(tags))})"
        return int(pc.count_distinct(scan(table, [WRITE_TAG], where).column(WRITE_TAG)).as_py())

    def absent(self, ids: Sequence[str]) -> list[str]:
        """These ids that name no stored item in any spelling (`respelled`), once each in the
        order given: what a delete of them says were not there."""
        present = self.existing(ids) | set(self.respelled(ids))
        return [i for i in dict.fromkeys(ids) if i not in present]

    @one_at_a_time
    def located(self, ids: Sequence[str]) -> tuple[int, dict[str, int]]:
        """The version read and the LanceDB row id of each of these ids stored at it (absent
        ones are left out): one read of the id column with row ids, filtered in Arrow, so
        `take` at that version reads the other columns of those rows only. For many ids,
        where `id IN` reads a part at a time scan the id column once per part."""
        table = self._open()
        if table is None or not ids:
            return 0, {}
        version = int(table.version)
        data = scan(table, ["id"], row_ids=True)
        wanted = pc.is_in(data.column("id"), value_set=pa.array(list(ids), pa.string()))
        found = data.filter(wanted)
        ids_found, rows = found.column("id").to_pylist(), found.column("_rowid").to_pylist()
        return version, dict(zip(ids_found, rows, strict=True))

    def rows(self, ids: Sequence[str], columns: Sequence[str] = ("text",)) -> dict[str, dict]:
        """The requested columns of these ids, keyed by the id given: each found as `delete`
        finds it, as given, else under its other Unicode spelling (its row's `id` says which),
        so a get by a name a delete finds does not miss it."""
        ids = id_list(ids, "ids")
        if not ids:
            return {}
        table = self._require()
        where = f"id IN ({sql_list(sorted({f for i in ids for f in spelled_alike(i)}))})"
        found = {row["id"]: row for row in scan(table, ["id", *columns], where).to_pylist()}
        stored = set(found)
        named = {i: stored_spelling(i, stored) for i in dict.fromkeys(ids)}
        return {i: found[s] for i, s in named.items() if s is not None}

    def batches(
        self, columns: Sequence[str], ids: Sequence[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The id and these columns of every row (or of these ids), a batch at a time, so a
        read of a whole large collection holds one batch in memory, not every text."""
        table = self._open()
        if table is None or (ids is not None and not ids):
            return
        builder = table.search().select(["id", *columns]).limit(None)
        if ids is not None:
            builder = builder.where(f"id IN ({sql_list(list(ids))})")
        yield from builder.to_batches()

    def matching_ids(self, where: str) -> list[str]:
        """Ids of the items a SQL filter on the columns selects."""
        table = self._require()
        found = filtered(lambda: scan(table, ["id"], where), where, self)
        return found.column("id").to_pylist()

    def vectors(self) -> Vectors:
        """All ids, means, variances and weights at the current version, as numpy arrays."""
        table = self._require()
        version = int(table.version)
        chunked = self.chunked
        column = self.variance_column
        columns = ["id", "mean", column, "weights", *(["doc_id"] if chunked else [])]
        data = scan(table, columns, row_ids=True)
        return Vectors(
            np.asarray(data.column("id").to_pylist(), dtype=object),
            to_matrix(data.column("mean")),
            self.decode_variances(to_matrix(data.column(column))),
            to_matrix(data.column("weights")),
            version,
            data.column("_rowid").to_numpy(),
            np.asarray(data.column("doc_id").to_pylist(), dtype=object) if chunked else None,
        )

    @one_at_a_time
    def listing(self, after_row_id: int | None = None) -> tuple[int, int, pa.Table]:
        """The version, its row count, and every row's id, `_rowid`, write tag (and doc_id):
        what changed. With `after_row_id`, only rows whose `_rowid` is above it (rows written
        since: LanceDB numbers new fragments, and so their rows, above every older one)."""
        table = self._require()  # version, count and rows all read from this one handle
        version = int(table.version)
        names = table.schema.names
        columns = ["id", *[c for c in (WRITE_TAG, "doc_id") if c in names]]
        where = None if after_row_id is None else f"_rowid > {int(after_row_id)}"
        return version, table.count_rows(), scan(table, columns, where, row_ids=True)

    @one_at_a_time
    def take(
        self, row_ids: Sequence[int], columns: Sequence[str], version: int | None = None
    ) -> pa.Table:
        """The columns of rows by LanceDB row id, in the order given; at `version` (the one a
        `listing` gave the row ids at, so a write in between cannot move them), else latest."""
        table = self._require() if version is None else self._at_version(version)
        taken = table.take_row_ids([int(r) for r in row_ids]).select(list(columns))
        data = taken.with_row_id().to_arrow()
        order = {int(r): i for i, r in enumerate(data.column("_rowid").to_pylist())}
        return data.take([order[int(r)] for r in row_ids])

    def metadata_columns(self) -> dict[str, pa.DataType]:
        """Metadata fields stored as columns of their own (filterable with `where`)."""
        table = self._open()
        if table is None:
            return {}
        return {f.name: f.type for f in table.schema if f.name not in CORE_COLUMNS}

    def column_types(self, metadata: Iterable[Mapping[str, Any]]) -> dict[str, pa.DataType]:
        """The metadata columns, and NOT_A_COLUMN for each scalar field of these items that
        stored rows hold in their JSON only (its first value was a list or a dict, or it came
        past the column cap): a column made by a later write would miss those rows' values,
        and a filter on it would silently pass them over."""
        known = self.metadata_columns()
        fresh = fresh_scalar_fields(metadata, known)
        # past the cap every new field stays in the JSON: nothing to look for
        held = fresh if len(known) >= MAX_METADATA_COLUMNS else self._held_in_json(fresh)
        return known | dict.fromkeys(held, NOT_A_COLUMN)

    def _held_in_json(self, fields: set[str]) -> set[str]:
        """Which of these fields some stored row holds a value (not null) of: one scan of the
        rows whose JSON names one of them, made only when a write brings a field new to the
        columns. Found fields are kept per creation of the table: a field once kept in the
        JSON stays there, even after a delete took the rows that held it."""
        if not fields:
            return set()
        table = self._open()
        if table is None:
            return set()
        created = self._header().get("created")
        if self._held[0] != created:
            self._held = (created, set())
        held = self._held[1]
        asked = fields - held
        if asked:
            where = " OR ".join(f"metadata LIKE '%\"{name}\": %'" for name in sorted(asked))
            rows = table.search().select(["metadata"]).where(where).limit(None)
            for batch in rows.to_batches():
                for text in batch.column("metadata").to_pylist():
                    stored = json.loads(text)
                    held |= {name for name in asked if stored.get(name) is not None}
                if asked <= held:
                    break
        return fields & held

    def holds_in_json(self, field: str) -> bool:
        """Whether some item's metadata JSON holds this field with a value (not null)."""
        table = self._open()
        if table is None:
            return False
        pattern = json.dumps(field, ensure_ascii=False)[1:-1].replace("'", "''")
        where = f"metadata LIKE '%\"{pattern}\": %'"
        rows = table.search().select(["metadata"]).where(where).limit(None)
        for batch in rows.to_batches():
            for text in batch.column("metadata").to_pylist():
                if json.loads(text).get(field) is not None:
                    return True
        return False

    def filter_fields(self) -> list[str]:
        """What a `where` filter can name: id, text and the metadata columns."""
        return ["id", "text", *self.metadata_columns()]

    def lacks_field(self, field: str) -> bool:
        """Whether no stored item has this metadata field, as a column or in its JSON (a
        filter on it then reads every item as missing it, as a framework's in-memory store
        does)."""
        return field not in self.filter_fields() and not self.holds_in_json(field)

    @property
    def chunked(self) -> bool:
        """Whether rows name the document they are part of (a doc_id column: chunked ingest's
        chunks, or a corpus exported as chunks), which grouping and deletes by document read."""
        return "doc_id" in self.metadata_columns()

    @property
    def holds_chunks(self) -> bool:
        """Whether rows are chunked ingest's chunks: only it writes doc_hash beside doc_id and
        chunk (a corpus exported as chunks has its own doc_id and chunk, and is whole records)."""
        return self.metadata_columns().keys() >= CHUNK_COLUMNS

    def document_index(self) -> dict[str, StoredDocument]:
        """doc_id -> what chunked ingest compares a document with: the content hashes its
        chunks carry, its chunk ids and the file it was read from (its chunks' `file_path`).

        Empty for a collection without chunked ingest's documents (`holds_chunks`).
        """
        table = self._open()
        if table is None or not self.holds_chunks:
            return {}
        named = self.metadata_columns().get(FILE_FIELD) == pa.string()
        columns = ["id", "doc_id", "doc_hash", *([FILE_FIELD] if named else [])]
        rows = scan(table, columns, "doc_id IS NOT NULL").to_pylist()
        index: dict[str, StoredDocument] = {}
        for row in rows:
            doc = index.setdefault(row["doc_id"], StoredDocument(set(), []))
            doc.hashes.add(row["doc_hash"])
            doc.ids.append(row["id"])
            if doc.file_path is None:  # any chunk's: a run stopped part-way lacks chunk 0
                doc.file_path = row.get(FILE_FIELD)
        return index

    def first_chunk_hashes(self) -> list[str]:
        """The doc_hash of every chunk 0 (`DIGEST+N@SIZE:OVERLAP`, where chunked ingest records
        the settings its document was cut at), read by a filter and a projection: a listing
        of the settings reads no other chunk, text or vector. Empty where `holds_chunks` is
        not so."""
        table = self._open()
        if table is None or not self.holds_chunks:
            return []
        return scan(table, ["doc_hash"], "chunk = 0").column("doc_hash").to_pylist()

    def stored_documents(self, doc_ids: Sequence[str]) -> set[str]:
        """Which of these ids are documents of rows that name theirs (`chunked`: what
        `delete_documents` deletes), found by a scan of those rows only."""
        table = self._open()
        if table is None or not doc_ids or not self.chunked:
            return set()
        rows = scan(table, ["doc_id"], f"doc_id IN ({sql_list(doc_ids)})")
        return set(rows.column("doc_id").to_pylist())

    def named_otherwise(self, gone: Sequence[str], documents: bool) -> dict[str, str]:
        """Of ids a delete found nothing for, those naming the other kind, each with its
        document: a chunk's id sent as a document's (`documents`; its row's `doc_id`), or a
        chunked document's id sent as an item's; a delete of either deleted nothing and said
        only "not found". Each found in either Unicode spelling, as both deletes find it."""
        if not gone or self._open() is None:  # an empty collection holds neither kind
            return {}
        if not documents:
            found = self.stored_documents([f for i in gone for f in spelled_alike(i)])
            named = {i: stored_spelling(i, found) for i in gone}
            return {i: d for i, d in named.items() if d is not None}
        if not self.chunked:
            return {}
        rows = self.rows(list(dict.fromkeys(gone)), ["doc_id"])
        return {i: rows[i]["doc_id"] for i in gone if i in rows}

    def documents_read_from(self, paths: Sequence[str]) -> dict[str, list[str]]:
        """Of these paths, those some stored chunks name as their `file_path` (where chunked
        ingest read their document), each with its documents' ids: a folder's document ids
        are relative to the folder given, so `delete --doc notes/cooking.md` after ingesting
        `notes/` names no document (it is `cooking.md`), and said only "not there"."""
        table = self._open()
        if table is None or not paths or not self.chunked:
            return {}
        if self.metadata_columns().get(FILE_FIELD) != pa.string():
            return {}
        where = f"doc_id IS NOT NULL AND {FILE_FIELD} IN ({sql_list(paths)})"
        found: dict[str, list[str]] = {}
        for row in scan(table, ["doc_id", FILE_FIELD], where).to_pylist():
            ids = found.setdefault(row[FILE_FIELD], [])
            if row["doc_id"] not in ids:
                ids.append(row["doc_id"])
        return {path: sorted(ids) for path, ids in found.items()}

    def text_search(
        self, query: str, limit: int, where: str | None = None
    ) -> list[tuple[str, float]]:
        """(id, BM25 score) ranked by BM25 over the text (LanceDB full-text search), best first,
        ties by id: LanceDB lists tied rows (those not in the text index yet, until a
        compaction) in an order that varies from call to call, and hybrid ranks by position.
        Twice the rows are read, so a tie across the cut rarely decides which rows make it.
        The query is words to match, never query syntax: as a string LanceDB parses it, and a
        question in double quotes ('"war"') was a phrase query the index cannot answer."""
        from lancedb.query import MatchQuery

        table = self._require()
        self._ensure_text_index(table)
        wanted = max(1, min(2 * limit, table.count_rows()))  # a k past 2^31 overflowed LanceDB
        words = MatchQuery(query, "text")  # type: ignore[call-arg]  # pydantic: has defaults
        builder = table.search(words, query_type="fts").select(["id", "_score"]).limit(wanted)
        if where:
            builder = builder.where(where, prefilter=True)
        found = filtered(builder.to_arrow, where, self)
        ids, scores = found.column("id").to_pylist(), found.column("_score").to_pylist()
        ranked = sorted(zip(ids, map(float, scores), strict=True), key=lambda h: (-h[1], h[0]))
        return ranked[:limit]

    def index_text(self) -> None:
        """(Re)build the full-text index over the text so BM25 search covers every row."""
        self.db.require_writable()
        built(self._require(), "text", "FTS")

    def _ensure_text_index(self, table: Any) -> None:
        """Build the full-text index on first use; rows added later are still searched."""
        if any(ix.index_type == "FTS" for ix in table.list_indices()):
            return
        if not self.db.writable:
            raise ReadOnlyError(
                f"collection {self.name!r} has no full-text index and {self.db.path} is "
                "read-only; run a hybrid search once where it is writable"
            )
        self.index_text()

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
