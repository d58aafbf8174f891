"""What the framework adapters share: pipelines by name, writing texts, hits' uncertainty, filters.

Plain calls into `Pipeline`, `ingest` and `Collection`; the framework modules only translate
their own types to and from these.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from probembed.caller import called_through, warn_caller
from probembed.documents import stored_text
from probembed.encoders.base import is_blank
from probembed.scoring import Score, parse_score
from probembed.store import Collection, Database, Hit, QueryResult, Record, ingest
from probembed.store.errors import CollectionNotFoundError
from probembed.store.filters import sql_list
from probembed.store.ingest import DEFAULT_BATCH, IngestError, validate_options
from probembed.store.ranking import RRF_K
from probembed.store.rows import RESERVED_KEY, column_name, plain, plain_value, reserved_key

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: The fields of what the adapters put under RESERVED_KEY (`uncertainty`): a value of exactly
#: this shape is the search output of a document or node being added again, and is dropped.
RESULT_FIELDS = frozenset({"id", "score", "std", "p_relevant", "weights", "confidence"})
#: Scores that lie in [-1, 1] for probembed's unit-norm fused means.
_COSINE_RANGE = frozenset({"dot", "uec", "uec-mteb"})
#: Scores that are a distance negated: at most 0, for identical Gaussians (csd: their variance).
_DISTANCES = frozenset({"csd", "w2", "kl", "bhattacharyya"})
#: One lock per collection handle, for every adapter over it.
_LOCKS: weakref.WeakKeyDictionary[Collection, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()

F = TypeVar("F", bound=Callable[..., Any])


def collection_lock(collection: Collection) -> threading.RLock:
    """The lock of a collection handle: LangChain's and LlamaIndex's async methods run the
    sync ones in executor threads, and a handle is not safe to use from several at once (a
    table created twice, a snapshot written through a file another thread closed)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(collection)
        if lock is None:
            lock = _LOCKS[collection] = threading.RLock()
        return lock


def serialised(attribute: str) -> Callable[[F], F]:
    """A method that holds the lock of the collection in `self.<attribute>` while it runs."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
            with collection_lock(getattr(self, attribute)):
                return method(self, *args, **kwargs)

        return locked  # type: ignore[return-value]

    return wrap


def id_list(ids: Iterable[Any], what: str) -> list[Any]:
    """Ids given as a list; a lone string is refused, not read as one id per character."""
    if isinstance(ids, str):
        raise TypeError(f"{what} takes a list of ids, got the string {ids!r}: pass [{ids!r}]")
    return list(ids)


def checked_collection(collection: Any, store: str) -> Collection:
    """The collection a store is built over; a Database or a path is refused naming the fix
    (they failed later as "'Database' object has no attribute 'exists'")."""
    if isinstance(collection, Collection):
        return collection
    if isinstance(collection, Database):
        given = f"a Database ({collection.path})"
        fix = "its collection: database.collection('docs')"
    else:
        given = f"{type(collection).__name__} {collection!r}"
        fix = "Database(path, create=True).collection('docs')"
    raise TypeError(f"{store} takes a probembed Collection, got {given}: pass {fix}")


def own_pipeline(collection: Collection, argument: str) -> Pipeline:
    """The pipeline a collection keeps; a collection with none yet is an error naming the
    store's argument that gives one."""
    try:
        return collection.load_pipeline()
    except CollectionNotFoundError as exc:
        raise CollectionNotFoundError(
            f"collection {collection.name!r} in {collection.db.path} holds nothing yet, so it "
            f"has no pipeline of its own to write and search with: pass {argument}"
        ) from exc


def item_list(items: Any, what: str, kind: type | tuple[type, ...] | None = None) -> list[Any]:
    """Items given as a list (of `kind`, when given); a lone string, dict or item is refused,
    not iterated (a string gave one document per character)."""
    lone = isinstance(items, (str, Mapping)) or (kind is not None and isinstance(items, kind))
    if lone or not isinstance(items, Iterable):
        raise TypeError(
            f"{what} takes a list, got one {type(items).__name__}: pass [{_short(items)}]"
        )
    listed = list(items)
    for i, item in enumerate(listed):
        if kind is not None and not isinstance(item, kind):
            raise TypeError(
                f"{what}[{i}] is {type(item).__name__} {_short(item)}; {what} takes "
                f"{_names(kind)} items"
            )
    return listed


#: Names for the types a message lists, as a user writes them.
_TYPE_NAMES: dict[type, str] = {Mapping: "dict", type(None): "None"}


def _names(kind: type | tuple[type, ...]) -> str:
    """Type names for a message: `dict or NoneType`."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


def _short(value: Any) -> str:
    """A value quoted for a message, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def metadata_list(metadatas: Any, count: int) -> list[dict[str, Any]]:
    """One plain metadata dict per text (None: empty), the adapter's own search output under
    RESERVED_KEY dropped; anything else under that key, or not a dict, is refused by position."""
    if metadatas is None:
        return [{} for _ in range(count)]
    given = item_list(metadatas, "metadatas", (Mapping, type(None)))
    metas = [without_result(plain(m or {})) for m in given]
    for i, meta in enumerate(metas):  # by position: ingest's message names a derived id
        reserved = reserved_key(meta)
        if reserved is not None:
            raise ValueError(f"metadatas[{i}]: {reserved}")
    return metas


def is_result(value: Any) -> bool:
    """Whether a value under RESERVED_KEY is an adapter's own search output (`uncertainty`)."""
    return isinstance(value, Mapping) and set(value) == RESULT_FIELDS


def without_result(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata without the search output a retrieved document carries: it describes one past
    query, and re-adding what was retrieved was refused for a key the adapter put there."""
    if is_result(metadata.get(RESERVED_KEY)):
        return {k: v for k, v in metadata.items() if k != RESERVED_KEY}
    return metadata


def text_id(text: str, metadata: Mapping[str, Any]) -> str:
    """A deterministic id for a text and its metadata: the same item always gets the same id,
    the text hashed as stored (`stored_text`: "x" and " x\n" are one record, one id, not two
    rows), a lone surrogate too (ingest refuses it by name rather than this hash failing)."""
    key = json.dumps(
        [stored_text(text), dict(metadata)], sort_keys=True, ensure_ascii=False, default=repr
    )
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def store_texts(
    collection: Collection,
    pipeline: Pipeline,
    texts: Iterable[str],
    metadatas: Sequence[Mapping[str, Any]] | None,
    ids: Sequence[str | None] | None,
    batch_size: int = DEFAULT_BATCH,
    *,
    argument: str,
) -> list[str]:
    """Upsert texts with their metadata in one validated ingest; returns their ids.

    Absent ids (None, or no list at all) are derived from text and metadata (`text_id`);
    `batch_size` texts are embedded per commit. A refusal names a text by its position in
    the framework method's `argument` (`texts`, `documents`, `nodes`), as the caller gave it.
    """
    validate_options(batch_size, "stop")  # before anything is embedded
    texts = item_list(texts, argument)
    metas = metadata_list(metadatas, len(texts))
    given = id_list(ids, "ids") if ids is not None else [None] * len(texts)
    passed = {"metadatas": metadatas, "ids": ids}  # counted as given, not as filled in
    odd = [
        f"{len(v)} {name}" for name, v in passed.items() if v is not None and len(v) != len(texts)
    ]
    if odd:
        told = " and ".join([f"{len(texts)} {argument}", *odd])
        raise ValueError(f"got {told}: give one of each per item of {argument}")
    for i, text in enumerate(texts):  # by position: the store's message names a derived id
        _check_text(f"{argument}[{i}]", text)
    if not texts:
        return []
    triples = zip(given, texts, metas, strict=True)
    final = [i if i is not None else text_id(t, m) for i, t, m in triples]
    try:
        records = _records(given, final, texts, metas, argument)
        ingest(records, collection, pipeline, batch_size, upsert=True)
    except IngestError as exc:  # its message says on_error='skip', which adapters do not take
        raise retold(exc, "leave those items out of the call") from None
    return final


def _records(
    given: Sequence[str | None],
    final: Sequence[str],
    texts: Sequence[str],
    metas: Sequence[Any],
    argument: str,
) -> list[Record]:
    """One record per text, named by its position in `argument`, so an id given twice is
    refused by the store's own check, as every other write refuses it (`ingest.check_records`);
    the same text and metadata twice without ids is one record, their one derived id (nothing
    is lost). A derived id that is also given says it was derived, or the refusal of the two
    named an id the user never gave as if given twice."""
    chosen = {id_ for id_ in given if id_ is not None}
    records: list[Record] = []
    derived: set[str] = set()
    for i, (gave, id_, text, meta) in enumerate(zip(given, final, texts, metas, strict=True)):
        where = f"{argument}[{i}]"
        if gave is None:
            if id_ in derived:
                continue
            derived.add(id_)
            if id_ in chosen:
                where += ", whose id is derived from its text and metadata"
        records.append(Record(id_, text, meta, source=where))
    return records


def _check_text(where: str, text: Any) -> None:
    """A text to embed: a str that is not blank, refused by its position `where` otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"{where} is {type(text).__name__} {_short(text)}: texts are strings")
    if is_blank(text):
        raise ValueError(
            f"{where} is blank: there is nothing to embed; drop such documents (a loader's "
            "blank pages) before adding them (nothing was written)"
        )


def retold(exc: IngestError, skip: str) -> IngestError:
    """The same IngestError, its way out worded for the adapters (`IngestError.told`)."""
    again = IngestError(exc.problems)
    again.args = (exc.told(skip),)
    return again


def holds_rows(collection: Collection) -> bool:
    """Whether a read finds the collection: False before its first write (an empty store);
    one dropped since this store read it is an error, or an app would answer "nothing
    found" from a collection that is gone (`Collection.search` says so too)."""
    if collection.exists:
        return True
    if collection.dropped:
        raise CollectionNotFoundError(
            f"collection {collection.name!r} in {collection.db.path} was dropped after this "
            "store read it; make the store again over a collection that is there"
        )
    return False


def search(
    collection: Collection, query: str, k: int, framework: tuple[str, ...], **options: Any
) -> QueryResult:
    """The collection's answer to one query; no hits while the collection has no rows yet, or
    for k = 0 (the frameworks' own stores answer it with nothing, not an error). Its warnings
    (a query cut short) name the user's line, past the retriever in the `framework` folders."""
    if not holds_rows(collection) or (k == 0 and not isinstance(k, bool)):
        return QueryResult(query=query, confidence=None, hits=[])
    with called_through(framework):
        return collection.search(query, k=k, **options)


def uncertainty(hit: Hit, confidence: float | None) -> dict[str, Any]:
    """probembed's numbers for one hit, kept under RESERVED_KEY in a document's metadata."""
    return {
        "id": hit["id"],
        "score": hit["score"],
        "std": hit["std"],
        "p_relevant": hit["p_relevant"],
        "weights": hit["weights"],
        "confidence": confidence,
    }


def relevance(hit: Hit, score: Score | str | None) -> float:
    """A hit's relevance in [0, 1]: its p_relevant if calibrated, else `score_relevance`'s
    map of its score (the score it was searched with; None: hybrid)."""
    if hit["p_relevant"] is not None:
        return float(hit["p_relevant"])
    mapped, _ = score_relevance(score)
    return mapped(float(hit["score"]))


def score_relevance(score: Score | str | None) -> tuple[Callable[[float], float], str]:
    """The map of a score to [0, 1] that stands in for p_relevant without a calibrator, and
    its formula in words (a warning tells what a relevance threshold then compares with).

    The map is (1 + s) / 2 (clipped) for the scores that lie in [-1, 1] (`dot`, `uec`,
    `uec-mteb`); 1 / (1 - s) for the negated distances (`csd`, `w2`, `kl`, `bhattacharyya`:
    0 is identical, and a logistic made an exact duplicate 0.5 and every kl hit 0); the hybrid
    RRF score (given as None) over the most it can be, first in both lists; and
    1/2 + atan(s)/π for log-likelihoods (`mls`, hundreds: a logistic made them all 1).
    Order-preserving, so comparable between the hits of one query, not a probability.
    """
    if score is None:
        rrf = "its hybrid RRF score over the most it can be"
        return lambda s: min(1.0, max(0.0, s * (RRF_K + 1) / 2.0)), rrf
    name = str(parse_score(score))  # "cosine" is "dot"
    if name in _COSINE_RANGE:
        return lambda s: min(1.0, max(0.0, (1.0 + s) / 2.0)), f"(1 + s)/2 of its {name} score s"
    if name in _DISTANCES:
        return lambda s: 1.0 / (1.0 - min(s, 0.0)), f"1/(1 - s) of its {name} score s"
    return lambda s: 0.5 + math.atan(s) / math.pi, f"1/2 + atan(s)/pi of its {name} score s"


def filter_columns(collection: Collection) -> set[str]:
    """The fields a filter can name: id, text and the metadata promoted to columns."""
    return {"id", "text", *collection.metadata_columns()}


def field_type(collection: Collection, field: str) -> pa.DataType:
    """The stored type of a filterable field; an unknown one is an error listing the known."""
    types = {"id": pa.string(), "text": pa.string(), **collection.metadata_columns()}
    if field not in types:
        raise ValueError(
            f"cannot filter on {field!r}: collection {collection.name!r} can filter on "
            f"{', '.join(sorted(types))} (scalar metadata fields named in lower-case "
            "snake_case become columns; other fields stay in the metadata JSON only)"
        )
    return types[field]


def sql_field(collection: Collection, field: str) -> str:
    """A filterable field as a quoted SQL identifier: a metadata column may be named `null`,
    `select` or `current_date`, which SQL would read as a keyword or a value."""
    field_type(collection, field)
    return f"`{field}`"  # column names are [a-z][a-z0-9_]*: nothing inside needs escaping


def sql_condition(collection: Collection, field: str, op: str, value: Any) -> str:
    """One SQL comparison on a filterable field, each value a literal of the field's type.

    Python compares across number types (`4 > 3.5`, `True == 1`, as the frameworks' own
    in-memory stores do) where LanceDB refuses to turn 3.5 into an integer: an integer field
    compared with a fraction is compared as a float, 0 and 1 stand for a boolean's values.
    """
    kind = field_type(collection, field)
    value = plain_value(value)  # a numpy number or a date, as the stored value was made
    listed = op in ("IN", "NOT IN")
    if listed and not isinstance(value, (list, tuple)):
        raise ValueError(f"filter {field} {op} needs a list, got {value!r}")
    if listed and not value:  # one of no values: none matches (not in them: all do)
        return "false" if op == "IN" else "true"
    values = list(value) if listed else [value]
    literals = [sql_literal(v, kind, field) for v in values]
    name = sql_field(collection, field)
    if pa.types.is_integer(kind) and any(isinstance(v, float) for v in values):
        name = f"CAST({name} AS DOUBLE)"
    return f"{name} {op} ({', '.join(literals)})" if listed else f"{name} {op} {literals[0]}"


def sql_literal(value: Any, kind: pa.DataType | None = None, field: str = "") -> str:
    """A str, bool, int or finite float as a SQL literal that a field of this type compares
    with; anything else, or a text against a number, is refused naming the field's type."""
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # refused below
    if kind is not None and pa.types.is_boolean(kind) and value in (0, 1):
        value = bool(value)  # 0.0 and 1.0 too, as Python's True == 1.0
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is not None and value is not None and isinstance(value, (str, bool, int, float)):
        fits = (
            (pa.types.is_string(kind) and isinstance(value, str))
            or (pa.types.is_boolean(kind) and isinstance(value, bool))
            or ((pa.types.is_integer(kind) or pa.types.is_floating(kind)) and numeric)
        )
        if not fits:
            raise ValueError(
                f"filter value {value!r} ({type(value).__name__}) cannot be compared with "
                f"{field or 'the field'}, which holds {kind}"
            )
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError(
            f"filter value {value} on {field or 'the field'} does not fit a 64-bit integer, "
            "as every stored integer does"
        )
    if isinstance(value, str):
        return sql_list([value])
    if numeric:
        return repr(float(value)) if isinstance(value, float) else str(int(value))
    raise ValueError(f"filter values must be str, bool, int or finite float, got {value!r}")


def equality_filter(collection: Collection, fields: Mapping[str, Any]) -> str:
    """{"field": value, ...} as SQL: each field equal to its value (a list: one of them;
    None: missing, as SQL's IS NULL; an empty list: no item, as a UI with nothing selected
    expects). A field no item has is missing from every item, as in
    the frameworks' own stores and the LlamaIndex adapter: it matches None only (it was an
    error once the collection held anything, and no match while it was empty)."""
    return " AND ".join(_equal(collection, k, v) for k, v in fields.items())


def _equal(collection: Collection, field: str, value: Any) -> str:
    """One field of `equality_filter` as SQL. A key that can never be a column (`Author`,
    `id` aside) is refused at once, not only once some item holds it."""
    if field not in ("id", "text") and not column_name(field):
        field_type(collection, field)  # raises: it lists the fields there are
    if isinstance(value, Mapping):
        raise ValueError(
            f"filter {{{field!r}: {_short(value)}}}: operator dicts ($eq, $gte, $in, ...) are "
            f"not supported; a filter maps a field to a value or a list of values (equal to "
            f"one of them); for other comparisons pass SQL as where=, e.g. "
            f'where="{field} >= ..."'
        )
    if missing_field(collection, field):
        return "true" if value is None else "false"
    if value is None:
        return f"{sql_field(collection, field)} IS NULL"
    return sql_condition(
        collection, field, "IN" if isinstance(value, (list, tuple)) else "=", value
    )


def missing_field(collection: Collection, field: str) -> bool:
    """Whether no stored item has the field a filter names, warning if the collection holds
    items: the filter then reads every item as missing it, as the frameworks' stores do, and
    a misspelt field looked just like a filter nothing matched."""
    if not collection.lacks_field(field):
        return False
    if collection.exists:
        warn_caller(  # at the first line outside probembed: the user's, or the framework's
            f"filter field {field!r}: no item of collection {collection.name!r} has it, so "
            f"every item counts as missing it; its filterable columns: "
            f"{', '.join(sorted(collection.filter_fields()))}"
        )
    return True


def both(*conditions: str | None) -> str | None:
    """The SQL conjunction of the conditions given, or None if there are none."""
    present = [f"({c})" for c in conditions if c]
    return " AND ".join(present) or None
