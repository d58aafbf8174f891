"""Rows of a collection as Arrow: the schema, its pipeline header, and metadata columns.

Scalar metadata fields with simple names get columns of their own (up to
MAX_METADATA_COLUMNS per collection), so `where` filters such as "year > 2015" work; every
other field stays in the JSON `metadata` column only.
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from probembed.encoders.base import is_blank, lone_surrogate
from probembed.fusion import Fused
from probembed.store.errors import StoreError
from probembed.variance_basis import VarianceBasis, pipeline_basis

#: Schema-metadata key under which the collection's pipeline is recorded.
SCHEMA_KEY = b"probembed"
#: 2 stores each variance as coefficients on the header's basis (`var_coef`); 1, the whole
#: variance (`var`), is written where a basis would not fit (probembed.variance_basis).
FORMAT_VERSION = 2
#: Columns every collection has; metadata fields with these names stay in the JSON only.
CORE_COLUMNS = ("id", "text", "metadata", "mean", "var", "var_coef", "weights", "written")
#: A random tag per written batch: an (id, tag) pair names one version of a row, so search
#: can tell rows it holds from rewritten ones even after a compaction moved every row id.
WRITE_TAG = "written"
#: The field metadata that makes `id` the table's unenforced primary key: with it, Lance
#: checks the ids that concurrent merges inserted against each other (`store.shared_writes`).
PRIMARY_KEY = {"lance-schema:unenforced-primary-key:position": "1"}
#: Field metadata of `id` that changes (a commit) whenever the kept pipeline copy is replaced
#: (`Collection.record_pipeline(replace=True)`): every process holding the collection sees a
#: new version, finds a new mark and searches with the copy's new settings.
SETTINGS_MARK = "probembed:settings"
#: The id field's metadata key that marks the collection's last erasure (`erasure_mark`).
ERASURE_MARK = "probembed:erased"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_METADATA_COLUMN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
#: Metadata columns a collection gets at most; later fields stay in the JSON only, so items
#: with free-form keys cannot grow a table thousands of columns wide.
MAX_METADATA_COLUMNS = 128
_ARROW_TYPES: dict[type, pa.DataType] = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
}


@dataclass(frozen=True)
class PipelineInfo:
    """What the store knows of a pipeline: enough to refuse vectors made by another one."""

    name: str
    fingerprint: str
    models: tuple[str, ...]
    #: Width of each member's block of the fused vectors (empty: one block, or unknown); it
    #: shapes the stored variance basis, and is not part of the pipeline's identity.
    blocks: tuple[int, ...] = field(default=(), compare=False)
    #: The pipeline object itself, which a new collection's variance basis is fitted with
    #: (None: read from a stored header, which holds its basis already).
    source: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, pipeline: Any) -> PipelineInfo:
        """Read name, fingerprint, models and block widths off a pipeline object."""
        blocks = tuple(getattr(pipeline, "blocks", ()))
        return cls(
            str(pipeline.name), str(pipeline.fingerprint), tuple(pipeline.models), blocks, pipeline
        )

    def made(self, fingerprint: str) -> bool:
        """Whether vectors recorded under `fingerprint` are this pipeline's: its own, or an
        older release's fingerprint of the same models (`Pipeline.made`)."""
        if fingerprint == self.fingerprint:
            return True
        return self.source is not None and bool(self.source.made(fingerprint))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, as stored in the schema metadata."""
        return {"name": self.name, "fingerprint": self.fingerprint, "models": list(self.models)}


def new_tag() -> int:
    """A random write tag (`WRITE_TAG`): another write's rows carry another."""
    return secrets.randbits(63)


@dataclass(frozen=True, eq=False)
class Batch:
    """Rows to write: ids, texts, metadata, and the fused Gaussians the pipeline made of them."""

    ids: Sequence[str]
    texts: Sequence[str]
    metadata: Sequence[Mapping[str, Any]]
    fused: Fused
    pipeline: PipelineInfo
    #: Column types the whole write decided (`ingest.Checked.columns`): a field whose first
    #: batch holds whole numbers and a later one fractions is a float column from the start.
    columns: Mapping[str, pa.DataType] = field(default_factory=dict)
    #: The write tag its rows get (`WRITE_TAG`), decided before it is written: an undo of a
    #: write that failed before returning tells the write's rows from another writer's by it.
    tag: int = field(default_factory=new_tag)

    def __post_init__(self) -> None:
        n = len(self.ids)
        sizes = {"texts": len(self.texts), "metadata": len(self.metadata)}
        sizes["vectors"] = len(self.fused.gaussian)
        wrong = {k: v for k, v in sizes.items() if v != n}
        if wrong:
            raise StoreError(f"batch has {n} ids but {wrong}; give one of each per id")
        for i in self.ids:  # as ingest checks them: a Batch made directly reaches no check
            unusable = unusable_id(i)
            if unusable is not None:
                raise StoreError(unusable)
        rows = zip(self.ids, self.texts, self.metadata, strict=True)
        for row, (i, text, meta) in enumerate(rows):  # as every front door does
            unencodable = not_unicode(i, text, meta)
            if unencodable is not None:  # it failed in Arrow or LanceDB, a bare codec error
                raise StoreError(f"batch row {row} (id {i!r}): {unencodable}")
            reserved = reserved_key(meta)
            if reserved is not None:
                raise StoreError(f"item {i!r}: {reserved}")
        if len(set(self.ids)) != n:
            raise StoreError(f"batch repeats ids: {_duplicates(self.ids)[:10]}")
        if tuple(self.fused.models) != self.pipeline.models:
            raise StoreError(
                f"vectors fuse models {self.fused.models} but the batch says pipeline "
                f"{self.pipeline.name!r} has {self.pipeline.models}"
            )

    def without(self, ids: set[str]) -> Batch:
        """The batch less the rows of these ids."""
        keep = [i for i, item in enumerate(self.ids) if item not in ids]
        return Batch(
            [self.ids[i] for i in keep],
            [self.texts[i] for i in keep],
            [self.metadata[i] for i in keep],
            self.fused.rows(keep),
            self.pipeline,
            self.columns,
            self.tag,
        )


def not_unicode(doc_id: str, text: str, metadata: Mapping[str, Any]) -> str | None:
    """What of a document cannot be stored as UTF-8 (a lone surrogate), or None: Arrow (or
    the content hash) would fail on it mid-write with a bare `UnicodeEncodeError`."""
    fields = {"id": doc_id, "text": text, "metadata": metadata}
    for name, value in fields.items():
        raw = (
            value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
        )
        surrogate = lone_surrogate(raw)
        if surrogate is not None:
            return f"its {name} is not valid Unicode ({surrogate})"
    return None


def unusable_id(doc_id: object) -> str | None:
    """Why an id cannot name a stored row, or None: blank ids (spaces, invisible characters)
    name nothing a reader or a user could give back, and a reader refuses them."""
    if not isinstance(doc_id, str) or is_blank(doc_id):
        return f"ids must be strings with a visible character, got {doc_id!r}"
    return None


#: The metadata key under which the LangChain and LlamaIndex adapters give each hit's numbers
#: (score, std, p_relevant, weights, confidence): no stored item may use it, or its value would
#: read one way through the adapters and another through the CLI, the service and Python.
RESERVED_KEY = "probembed"


def reserved_key(metadata: Mapping[str, Any]) -> str | None:
    """What is wrong with metadata that uses RESERVED_KEY, or None: one check for every
    front door that writes (ingest, chunked ingest, the service, the adapters)."""
    if RESERVED_KEY not in metadata:
        return None
    return (
        f"metadata uses the key {RESERVED_KEY!r}, which probembed reserves for the scores "
        "the LangChain and LlamaIndex adapters return with each hit; rename that field"
    )


def table_schema(batch: Batch, compact: bool = True, created: str | None = None) -> pa.Schema:
    """The schema of a new collection, with its pipeline header, made for a first batch.

    `compact=False` keeps whole variances (files for other stores, which have no basis); else
    the pipeline's own basis (`variance_basis.pipeline_basis`) decides, whatever the batch holds.
    `created` marks one creation of a collection: a reader that held the collection tells it
    from one dropped and made again under its name, even at the same version number.
    """
    dim, models = batch.fused.gaussian.dim, batch.pipeline.models
    source = batch.pipeline.source
    basis = pipeline_basis(source) if compact and source is not None else None
    header: dict[str, Any] = {"format": 1, "pipeline": batch.pipeline.to_json(), "dim": dim}
    if created is not None:
        header["created"] = created
    variance = pa.field("var", pa.list_(pa.float32(), dim))
    if basis is not None:
        header |= {"format": FORMAT_VERSION, "variance": basis.to_json()}
        variance = pa.field("var_coef", pa.list_(pa.float32(), basis.width))
    fields = [
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY),
        pa.field("text", pa.string()),
        pa.field("metadata", pa.string()),
        pa.field("mean", pa.list_(pa.float32(), dim)),
        variance,
        pa.field("weights", pa.list_(pa.float32(), len(models))),
        pa.field(WRITE_TAG, pa.int64()),
    ]
    types = metadata_types(batch.ids, batch.metadata, {}, batch.columns)
    extra = [pa.field(k, t) for k, t in types.items()]
    return pa.schema(fields + extra, metadata={SCHEMA_KEY: json.dumps(header).encode()})


def read_header(schema: pa.Schema) -> dict[str, Any] | None:
    """The probembed header of a table's schema, or None for a foreign table."""
    raw = (schema.metadata or {}).get(SCHEMA_KEY)
    return None if raw is None else json.loads(raw)


def settings_mark(schema: pa.Schema) -> str | None:
    """The mark of the kept pipeline copy's last replacement; None if it was never replaced."""
    raw = (schema.field("id").metadata or {}).get(SETTINGS_MARK.encode())
    return None if raw is None else raw.decode()


def erasure_mark(schema: pa.Schema) -> str | None:
    """The mark of the collection's last erasure (`Collection.erase`); None if never erased."""
    raw = (schema.field("id").metadata or {}).get(ERASURE_MARK.encode())
    return None if raw is None else raw.decode()


def variance_basis(header: dict[str, Any]) -> VarianceBasis | None:
    """The header's variance basis, or None where full variances are stored (format 1)."""
    form = header.get("variance")
    return None if form is None else VarianceBasis.from_json(form)


#: The type `promote_metadata` gives a field whose first value is a list or a dict (or that
#: came past MAX_METADATA_COLUMNS): it stays in the metadata JSON only, whatever later items
#: hold, in this write and in later ones (`Collection.column_types` finds it in stored rows).
NOT_A_COLUMN = pa.null()


def metadata_types(
    ids: Sequence[str],
    metadata: Sequence[Mapping[str, Any]],
    known: Mapping[str, pa.DataType],
    planned: Mapping[str, pa.DataType] | None = None,
) -> dict[str, pa.DataType]:
    """Arrow type of every promotable metadata field, checking values against known columns
    (and, for fields with no column yet, starting from what the whole write decided:
    `planned`, a batch's `columns`)."""
    types = {**(planned or {}), **known}
    for doc_id, meta in zip(ids, metadata, strict=True):
        promote_metadata(doc_id, meta, types, known)
    return {k: t for k, t in types.items() if t != NOT_A_COLUMN}


def fresh_scalar_fields(
    metadata: Iterable[Mapping[str, Any]], known: Mapping[str, pa.DataType]
) -> set[str]:
    """Fields these items hold a scalar of that would be columns but are not in `known`: the
    only ones whose place (a column, or the JSON only) a write may still have to decide."""
    return {
        key
        for meta in metadata
        for key, value in meta.items()
        if type(value) in _ARROW_TYPES and key not in known and column_name(key)
    }


def column_name(key: object) -> bool:
    """Whether a metadata field may get a column by its name (lower-case snake_case, not one
    of the core columns); other fields stay in the JSON only."""
    return isinstance(key, str) and key not in CORE_COLUMNS and bool(_METADATA_COLUMN.match(key))


#: Per metadata field kept out of the columns for a clash (`promote_metadata(clashes=)`): the
#: type the field had and the one that clashed with it, as words ("int64", "string", "list").
Clashes = dict[str, tuple[str, str]]


def promote_metadata(
    doc_id: str,
    metadata: Mapping[str, Any],
    types: dict[str, pa.DataType],
    stored: Container[str],
    clashes: Clashes | None = None,
) -> None:
    """Add the column types this item's scalar fields need to `types`, or fail on a clash
    (with the collection's, for a field in `stored`; else with an earlier item's). A field
    earlier items of the write gave whole numbers becomes a float column at a fraction (10
    then 9.99, as a price); a stored integer column cannot widen, so there it is refused.
    Given `clashes` (a job that writes files, not a collection: `embed_job`), a field not in
    `stored` that clashes is kept out of the columns instead, in the metadata JSON only, as
    a field whose first value is a list is, and named in `clashes` with its two types."""
    columns = sum(t != NOT_A_COLUMN for t in types.values())

    def json_only(key: str, have: pa.DataType, kind: str) -> bool:
        """Whether a clash is taken by keeping the field out of the columns (not raised)."""
        if clashes is None or key in stored:
            return False
        types[key] = NOT_A_COLUMN
        clashes.setdefault(key, (str(have), kind))
        return True

    for key, value in metadata.items():
        if value is None or not column_name(key):
            continue
        kind = _ARROW_TYPES.get(type(value))
        if kind is None:  # a list or a dict: JSON only, unless the field is a column already
            have = types.setdefault(key, NOT_A_COLUMN)
            if have != NOT_A_COLUMN and not json_only(key, have, type(value).__name__):
                raise _clash(doc_id, key, value, have, key in stored)
            continue
        if types.get(key) == NOT_A_COLUMN:
            continue
        new = key not in types
        if new and columns >= MAX_METADATA_COLUMNS:
            types[key] = NOT_A_COLUMN
            continue
        if kind == pa.int64() and not _INT64_MIN <= value <= _INT64_MAX:
            if json_only(key, types.get(key, kind), "an integer over 64 bits"):
                continue  # not a column: counts nothing toward MAX_METADATA_COLUMNS
            raise StoreError(
                f"item {doc_id!r}: metadata field {key!r} = {value} does not fit a 64-bit "
                "integer column; store it as a string"
            )
        columns += new
        have = types.setdefault(key, kind)
        if (have, kind) == (pa.int64(), pa.float64()) and key not in stored:
            types[key] = kind
        elif have != kind and not (have == pa.float64() and kind == pa.int64()):
            if json_only(key, have, str(kind)):
                continue
            hint = (
                f" (a stored column of whole numbers cannot widen: write {key!r} as a float, "
                "e.g. 4.0, from a collection's first write where it can hold fractions)"
                if (have, kind) == (pa.int64(), pa.float64())
                else ""
            )
            raise _clash(doc_id, key, value, have, key in stored, hint)


def _clash(
    doc_id: str, key: str, value: Any, have: pa.DataType, stored: bool, hint: str = ""
) -> StoreError:
    """A field's value of another type than its column's: the collection's column, or the
    one earlier items of the same write set (before anything is stored, so not the
    collection's)."""
    where = "the collection stores" if stored else "earlier items of this input give"
    return StoreError(
        f"item {doc_id!r}: metadata field {key!r} = {value!r:.40} is a "
        f"{type(value).__name__}, but {where} {key!r} as {have}{hint}"
    )


def to_arrow(batch: Batch, schema: pa.Schema) -> pa.Table:
    """Build the Arrow rows for a batch in the given schema (absent metadata fields are null)."""
    g, ids = batch.fused.gaussian, list(batch.ids)
    columns: dict[str, pa.Array] = {
        "id": pa.array(ids, pa.string()),
        "text": pa.array(list(batch.texts), pa.string()),
        "metadata": pa.array(
            [metadata_json(i, m) for i, m in zip(batch.ids, batch.metadata, strict=True)]
        ),
        "mean": _fixed_list(g.mean),
        "weights": _fixed_list(np.asarray(batch.fused.weights, dtype=np.float32)),
    }
    if WRITE_TAG in schema.names:
        columns[WRITE_TAG] = write_tags(len(ids), batch.tag)
    basis = variance_basis(read_header(schema) or {})
    if basis is None:
        columns["var"] = _fixed_list(g.var)
    else:
        columns["var_coef"] = _fixed_list(basis.encode(g.var))
    for f in schema:
        if f.name not in columns:
            columns[f.name] = pa.array([m.get(f.name) for m in batch.metadata], f.type)
    return pa.Table.from_pydict(columns, schema=schema)


def write_tags(n: int, tag: int | None = None) -> pa.Array:
    """One tag (given, else new) for n rows written together (`WRITE_TAG`)."""
    return pa.array(np.full(n, new_tag() if tag is None else tag, dtype=np.int64))


def _fixed_list(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """A float32 (n, d) array as an Arrow fixed-size-list column."""
    flat = pa.array(np.ascontiguousarray(matrix, dtype=np.float32).ravel())
    return pa.FixedSizeListArray.from_arrays(flat, matrix.shape[1])


#: How deep lists and objects may nest in an item's metadata: real metadata needs a few
#: levels, and a response serialiser gives up past a few hundred (the service answered every
#: search that returned such an item with a 500).
MAX_METADATA_DEPTH = 32


def nests_too_deep(metadata: Mapping[str, Any]) -> bool:
    """Whether a field's value nests lists and objects more than MAX_METADATA_DEPTH levels
    deep (walked without recursion, and only as far as the limit)."""
    stack = [(value, 1) for value in metadata.values()]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > MAX_METADATA_DEPTH:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def metadata_json(doc_id: str, metadata: Mapping[str, Any]) -> str:
    """Metadata as JSON, naming the item and the field when a value is not JSON-serialisable."""
    try:
        return json.dumps(dict(metadata), ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        for key, value in metadata.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise StoreError(
                    f"item {doc_id!r}: metadata field {key!r} = {value!r:.60} is not "
                    f"JSON-serialisable: {exc}"
                ) from exc
        raise StoreError(f"item {doc_id!r}: metadata is not JSON-serialisable: {exc}") from exc


def to_matrix(column: pa.ChunkedArray) -> np.ndarray:
    """A fixed-size-list column as a float32 (n, d) array."""
    width = column.type.list_size
    if column.num_chunks == 0:
        return np.zeros((0, width), dtype=np.float32)
    flat = pa.concat_arrays([chunk.flatten() for chunk in column.chunks])
    return flat.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, width)


def _duplicates(values: Sequence[str]) -> list[str]:
    """Values that occur more than once, in first-seen order."""
    return [value for value, count in Counter(values).items() if count > 1]


def plain(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as the store holds it: numpy scalars (pandas-made documents carry them) as
    Python numbers, which become filterable columns, and dates, times and datetimes as ISO
    8601 strings (they compare in order as strings; a datetime with a time zone is written
    in UTC, or two offsets would not); anything else as given, refused by name later if JSON
    cannot hold it. For what Python callers hand over: the adapters, `ingest`'s dicts."""
    return {key: plain_value(value) for key, value in metadata.items()}


def plain_value(value: Any) -> Any:
    """One metadata value (or a filter's) as `plain` makes it, lists and objects included.
    A missing value as pandas writes it (NaN, NaT) is None, as a missing one is."""
    if isinstance(value, np.datetime64):  # .item() gives nanoseconds as an int
        if np.isnat(value):
            return None
        unit = np.datetime_data(value.dtype)[0]
        value = value.astype("datetime64[D]" if unit in ("Y", "M", "W", "D") else "datetime64[us]")
        if not isinstance(value.item(), datetime.date):  # past year 9999 or before year 1
            return str(np.datetime_as_string(value))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float | datetime.date) and value != value:  # NaN, NaT
        return None
    if isinstance(value, datetime.datetime) and value.utcoffset() is not None:
        return value.astimezone(datetime.UTC).isoformat()
    if isinstance(value, datetime.date | datetime.time):  # a datetime is a date
        return value.isoformat()
    if isinstance(value, Mapping):
        return {key: plain_value(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    return value
