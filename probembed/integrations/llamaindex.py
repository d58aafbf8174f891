"""LlamaIndex: probembed as a `BaseEmbedding` and a vector store backed by a probembed collection.

    from llama_index.core import VectorStoreIndex
    from probembed.integrations.llamaindex import ProbembedEmbedding, ProbembedVectorStore

    store = ProbembedVectorStore(Database("my.db", create=True).collection("docs"), "retrieval")
    store.add(nodes)
    index = VectorStoreIndex.from_vector_store(store, embed_model=ProbembedEmbedding("retrieval"))
    index.as_retriever(similarity_top_k=4).retrieve("question")

A new collection needs the pipeline; over one written before, `ProbembedVectorStore(collection)`
takes the pipeline that wrote it (another one is refused: PipelineMismatchError), as
`ProbembedEmbedding(collection.load_pipeline())` does.

Nodes are stored with LlamaIndex's own node serialisation (`node_to_metadata_dict`), so they
come back whole, text and relationships included; each returned node's metadata carries probembed's
numbers under "probembed" (excluded from what LLMs and embedders see).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from probembed.extras import require

require("llamaindex", "probembed.integrations.llamaindex")

import llama_index.core
import pyarrow as pa
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.instrumentation import Dispatcher
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from pydantic import PrivateAttr

from probembed.integrations import common
from probembed.pipeline import as_pipeline
from probembed.store import Collection, Hit, StoreError, remove
from probembed.store.rows import metadata_json

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: LlamaIndex's core package and its instrumentation's (a package of its own since 0.14), whose
#: retrievers and query engines call this store for the user.
_LLAMA_INDEX_DIRS = (
    os.path.dirname(llama_index.core.__file__),
    os.path.dirname(inspect.getfile(Dispatcher)),
)
#: LlamaIndex filter operators -> SQL.
_OPERATORS = {
    FilterOperator.EQ: "=",
    FilterOperator.NE: "!=",
    FilterOperator.GT: ">",
    FilterOperator.GTE: ">=",
    FilterOperator.LT: "<",
    FilterOperator.LTE: "<=",
    FilterOperator.IN: "IN",
    FilterOperator.NIN: "NOT IN",
}
#: Operators on a string field's text, as LlamaIndex's own stores evaluate them: the filter
#: value (every one of a list for ALL, any one for ANY) is a substring of the field's value.
_SUBSTRING = {
    FilterOperator.TEXT_MATCH: False,
    FilterOperator.CONTAINS: False,
    FilterOperator.TEXT_MATCH_INSENSITIVE: True,
}
_LISTED = {FilterOperator.ANY: " OR ", FilterOperator.ALL: " AND "}
#: The operators a node without the field matches (LlamaIndex's `build_metadata_filter_fn`).
_MISSING_MATCHES = frozenset({FilterOperator.NE, FilterOperator.NIN, FilterOperator.IS_EMPTY})
#: `Collection.search` options a query takes from a retriever's `vector_store_kwargs` (the
#: mode gives `hybrid`, the filters `where`).
QUERY_OPTIONS = ("min_p_relevant", "score", "exact", "beta")
#: The metadata field node_to_metadata_dict keeps the source document's id in.
_REF_DOC = "ref_doc_id"
#: The metadata field node_to_metadata_dict keeps the whole node in, as JSON.
_NODE_CONTENT = "_node_content"
#: Why a bare query embedding is refused.
_BY_TEXT = (
    "probembed searches by a query's text (its variance and per-model weights come from the "
    "text, which a bare vector does not carry): retrieve through an index whose embed_model is "
    "ProbembedEmbedding (it passes the texts along, custom_embedding_strs such as HyDE's "
    "too) and give no precomputed QueryBundle.embedding"
)


class QueryEmbedding(list):  # type: ignore[type-arg]
    """A query's fused mean that also carries the texts it was made from, so that the store
    searches by those texts (LlamaIndex passes a store only the query's embedding and
    query_str; HyDE's `custom_embedding_strs` reach it only inside the embedding)."""

    def __init__(self, mean: Sequence[float], texts: Sequence[str]) -> None:
        super().__init__(mean)
        self.texts = list(texts)


class ProbembedEmbedding(BaseEmbedding):
    """A probembed pipeline as a LlamaIndex embedding model: each vector is the fused mean."""

    _pipeline: Any = PrivateAttr()

    def __init__(self, pipeline: Pipeline | str | os.PathLike, **kwargs: Any) -> None:
        resolved = as_pipeline(pipeline)
        super().__init__(model_name=f"probembed:{resolved.name}", **kwargs)
        self._pipeline = resolved

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this component."""
        return "ProbembedEmbedding"

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline that makes the vectors."""
        return self._pipeline

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        """The fused means of a batch of texts."""
        return self._pipeline.encode(texts).gaussian.mean.tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        """The fused mean of one text."""
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        """The fused mean of one query (queries and documents are encoded alike)."""
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        """As `_get_query_embedding`, in a worker thread: encoding is CPU-bound."""
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        """As `_get_text_embedding`, in a worker thread."""
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        """As `_get_text_embeddings`, in a worker thread: LlamaIndex's default encoded one
        text per call (100 calls for 100 texts, 13x slower than a batch with `default`)."""
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    def get_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., list[float]] | None = None
    ) -> list[float]:
        """LlamaIndex's aggregate of the queries' means, carrying the query texts along
        (`QueryEmbedding`): the retriever's way to hand a store `custom_embedding_strs`."""
        return QueryEmbedding(super().get_agg_embedding_from_queries(queries, agg_fn), queries)

    async def aget_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., list[float]] | None = None
    ) -> list[float]:
        """As `get_agg_embedding_from_queries`, each mean made in a worker thread."""
        mean = await super().aget_agg_embedding_from_queries(queries, agg_fn)
        return QueryEmbedding(mean, queries)


class ProbembedVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store over a probembed collection, searched with its uncertainty.

    Searches are by text, since a query's variance comes from its text, not its mean: the
    retriever asks `ProbembedEmbedding` for the query's embedding (`is_embedding_query`), which
    carries the texts embedded (`custom_embedding_strs` when set, as HyDE sets them, else
    query_str), and the collection's pipeline encodes those. Nodes given with embeddings are
    encoded again from their text for the same reason (a lookup when the pipeline's embedding
    cache already holds them).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    _collection: Collection = PrivateAttr()
    _pipeline: Any = PrivateAttr()

    def __init__(
        self, collection: Collection, pipeline: Pipeline | str | os.PathLike | None = None
    ) -> None:
        super().__init__()  # type: ignore[call-arg]  # stores_text has its default above
        self._collection = common.checked_collection(collection, "ProbembedVectorStore")
        if pipeline is None:
            self._pipeline = common.own_pipeline(collection, "pipeline='retrieval' (any name)")
        else:
            self._pipeline = as_pipeline(pipeline)
            if collection.exists:
                collection.use_pipeline(self._pipeline)

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for this component."""
        return "ProbembedVectorStore"

    @property
    def client(self) -> Collection:
        """The probembed collection underneath."""
        return self._collection

    @common.serialised("_collection")
    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Upsert nodes by node id in one validated write; returns their ids.

        What is encoded (and kept as the row's text, for BM25) is what LlamaIndex embeds,
        `get_content(MetadataMode.EMBED)`: the text with the metadata not excluded from
        embedding; the node itself, text included, is kept whole in the row's metadata.
        """
        _no_options(kwargs, "add")
        nodes = [_without_result(n) for n in common.item_list(nodes, "nodes", BaseNode)]
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        for node in nodes:  # node_to_metadata_dict writes inf and nan as null: refused first
            metadata_json(node.node_id, node.metadata)
        metadatas = [node_to_metadata_dict(n) for n in nodes]
        ids = [n.node_id for n in nodes]
        return common.store_texts(
            self._collection, self._pipeline, texts, metadatas, ids, argument="nodes"
        )

    @common.serialised("_collection")
    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """The stored nodes with these ids and/or matching these filters (all: neither)."""
        collection = self._collection
        if not common.holds_rows(collection) or (node_ids is not None and not node_ids):
            return []  # an empty id list selects no node
        ids_where = None if node_ids is None else _ids_condition(collection, "id", node_ids)
        ids = collection.matching_ids(common.both(ids_where, self._filters(filters)) or "true")
        rows = collection.rows(ids, ["metadata"])
        name = collection.name
        return [_stored_node(name, i, json.loads(rows[i]["metadata"])) for i in ids if i in rows]

    @common.serialised("_collection")
    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of one source document, in one commit."""
        _no_options(delete_kwargs, "delete")
        collection = self._collection
        if not common.holds_rows(collection) or _REF_DOC not in collection.metadata_columns():
            return
        where = common.sql_condition(collection, _REF_DOC, "=", ref_doc_id)
        remove(collection, collection.matching_ids(where), self._pipeline)

    @common.serialised("_collection")
    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes with these ids and/or matching these filters, in one commit."""
        _no_options(delete_kwargs, "delete_nodes")
        collection = self._collection
        if not common.holds_rows(collection) or (node_ids is None and filters is None):
            return
        if node_ids is not None and not node_ids:
            return  # an empty id list selects no node, as in LlamaIndex's own stores
        ids_where = None if node_ids is None else _ids_condition(collection, "id", node_ids)
        where = common.both(ids_where, self._filters(filters)) or "true"
        remove(collection, collection.matching_ids(where), self._pipeline)

    @common.serialised("_collection")
    def clear(self) -> None:
        """Delete every node, in one commit."""
        if common.holds_rows(self._collection):
            remove(self._collection, sorted(self._collection.ids()), self._pipeline)

    @common.serialised("_collection")
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The top-k nodes for the query's text, with probembed's score as their similarity.

        Modes: default (dense) and hybrid (dense fused with BM25 by reciprocal rank, giving
        `hybrid_top_k` nodes where it is set; `alpha` is not used). `filters`, `doc_ids` and
        `node_ids` restrict the rows searched. A retriever's `vector_store_kwargs` may pass
        `Collection.search`'s `min_p_relevant`, `score`, `exact` and `beta` (QUERY_OPTIONS).
        """
        options = {k: v for k, v in kwargs.items() if k in QUERY_OPTIONS}
        _no_options({k: v for k, v in kwargs.items() if k not in QUERY_OPTIONS}, "query")
        mode = VectorStoreQueryMode(query.mode)  # a plain string names a mode too
        if mode not in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.HYBRID):
            raise NotImplementedError(f"probembed has no {mode.value!r} query mode")
        hybrid = mode == VectorStoreQueryMode.HYBRID
        texts = _query_texts(query)
        if not common.holds_rows(self._collection):  # before the filters, which read its columns
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        k = (query.hybrid_top_k or query.similarity_top_k) if hybrid else query.similarity_top_k
        where = self._where(query)
        found = [
            common.search(
                self._collection, t, k, _LLAMA_INDEX_DIRS, where=where, hybrid=hybrid, **options
            )
            for t in texts
        ]
        hits = _best_hits(found, k)
        nodes = [_hit_node(self._collection.name, hit, confidence) for hit, confidence in hits]
        return VectorStoreQueryResult(
            nodes=nodes,
            similarities=[h["score"] for h, _ in hits],
            ids=[h["id"] for h, _ in hits],
        )

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """As `add`, in a worker thread: LlamaIndex's default ran it on the event loop."""
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """As `get_nodes`, in a worker thread."""
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """As `delete`, in a worker thread."""
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """As `delete_nodes`, in a worker thread (LlamaIndex's default dropped delete_kwargs)."""
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aclear(self) -> None:
        """As `clear`, in a worker thread."""
        await asyncio.to_thread(self.clear)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """As `query`, in a worker thread: encoding and search are CPU-bound."""
        return await asyncio.to_thread(self.query, query, **kwargs)

    def _where(self, query: VectorStoreQuery) -> str | None:
        """The SQL filter of a query's filters, doc_ids and node_ids.

        An empty id list restricts nothing, as in LlamaIndex's own stores (an index over a
        store that keeps text passes `node_ids=[]`).
        """
        collection = self._collection
        docs = _ids_condition(collection, _REF_DOC, query.doc_ids) if query.doc_ids else None
        nodes = _ids_condition(collection, "id", query.node_ids) if query.node_ids else None
        return common.both(self._filters(query.filters), docs, nodes)

    def _filters(self, filters: MetadataFilters | None) -> str | None:
        """LlamaIndex metadata filters (nested, and/or/not) as SQL."""
        if filters is None or not filters.filters:
            return None
        found = (
            self._filters(f) if isinstance(f, MetadataFilters) else self._filter(f)
            for f in filters.filters
        )
        parts = [part for part in found if part is not None]  # an empty group restricts nothing
        if not parts:
            return None
        condition = filters.condition or FilterCondition.AND
        if condition == FilterCondition.NOT:  # none of them, as LlamaIndex's own stores read it
            # IS TRUE: a comparison with a missing (null) field is unknown in SQL, not false
            return "NOT (" + " OR ".join(f"(({p}) IS TRUE)" for p in parts) + ")"
        joiner = " OR " if condition == FilterCondition.OR else " AND "
        return joiner.join(f"({p})" for p in parts)

    def _filter(self, item: MetadataFilter) -> str:
        """One LlamaIndex metadata filter as SQL on the metadata columns.

        A missing (null) field matches only != and not-in, and `is_empty` (null or ""), as in
        LlamaIndex's own stores, also where no node has the field at all. List-valued metadata
        is not a column, so it cannot be filtered.
        """
        operator = getattr(item, "operator", FilterOperator.EQ)
        collection, key = self._collection, item.key
        if collection.exists and common.missing_field(collection, key):  # all miss it
            return "true" if operator in _MISSING_MATCHES else "false"
        if operator == FilterOperator.IS_EMPTY:
            return _is_empty(collection, key)
        if operator in _SUBSTRING:
            return _substring(collection, key, operator, item.value)
        if operator in _LISTED:
            values = _string_list(key, operator, item.value)
            found = (_substring(collection, key, operator, v) for v in values)
            return _LISTED[operator].join(f"({f})" for f in found)
        condition = common.sql_condition(collection, key, _OPERATORS[operator], item.value)
        if operator in (FilterOperator.NE, FilterOperator.NIN):
            return f"{common.sql_field(collection, key)} IS NULL OR {condition}"
        return condition


def _string_field(collection: Collection, key: str, operator: FilterOperator) -> None:
    """Refuse a text operator on a field that is not stored as a string column."""
    kind = common.field_type(collection, key)
    if not pa.types.is_string(kind):
        raise ValueError(
            f"filter {key!r} {operator.value}: {key!r} is stored as {kind}, and "
            f"{operator.value} compares text; use ==, !=, <, >, in or nin on it"
        )


def _substring(collection: Collection, key: str, operator: FilterOperator, value: Any) -> str:
    """The value is a substring of the field's text (case-blind for text_match_insensitive)."""
    if not isinstance(value, str):
        raise ValueError(f"filter {key!r} {operator.value} needs a string value, got {value!r}")
    _string_field(collection, key, operator)
    name, literal = common.sql_field(collection, key), common.sql_literal(value)
    if _SUBSTRING.get(operator, False):
        return f"strpos(lower({name}), lower({literal})) > 0"
    return f"strpos({name}, {literal}) > 0"


def _string_list(key: str, operator: FilterOperator, value: Any) -> list[str]:
    """The non-empty list of strings that any / all need."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"filter {key!r} {operator.value} needs a non-empty list of strings, got {value!r}"
        )
    return value


def _is_empty(collection: Collection, key: str) -> str:
    """The field is missing (null) or, for a string field, the empty string."""
    name = common.sql_field(collection, key)
    if pa.types.is_string(common.field_type(collection, key)):
        return f"{name} IS NULL OR {name} = ''"
    return f"{name} IS NULL"


def _ids_condition(collection: Collection, field: str, ids: Sequence[str]) -> str:
    """A field equal to one of these ids."""
    ids = common.id_list(ids, f"{field} filter")
    if field not in common.filter_columns(collection):
        return "false"  # no node was stored with that field, so none matches
    return common.sql_condition(collection, field, "IN", ids)


def _query_texts(query: VectorStoreQuery) -> list[str]:
    """The texts to search by: those a `ProbembedEmbedding` query embedding carries (HyDE's
    custom_embedding_strs among them), else query_str; a bare vector is refused."""
    if query.query_embedding is not None:
        texts = getattr(query.query_embedding, "texts", None)
        if texts is None:
            raise ValueError(f"the query came with a bare embedding: {_BY_TEXT}")
    else:
        texts = [] if query.query_str is None else [query.query_str]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"the query has no text to search by: {_BY_TEXT}")
    return texts


def _best_hits(results: list[Any], k: int) -> list[tuple[Hit, float | None]]:
    """The k best hits over the results of several query texts, each node with its best score
    (and its query's confidence): a node is as close as the closest text (one text: its hits)."""
    if len(results) == 1:
        return [(hit, results[0]["confidence"]) for hit in results[0]["hits"]]
    best: dict[str, tuple[Hit, float | None]] = {}
    for result in results:
        for hit in result["hits"]:
            kept = best.get(hit["id"])
            if kept is None or hit["score"] > kept[0]["score"]:
                best[hit["id"]] = (hit, result["confidence"])
    ranked = sorted(best.values(), key=lambda pair: pair[0]["score"], reverse=True)
    return ranked[:k]


def _without_result(node: BaseNode) -> BaseNode:
    """The node without the search output a retrieved node carries (`common.without_result`):
    a copy, the caller's node left as it is."""
    if not common.is_result(node.metadata.get(common.RESERVED_KEY)):
        return node
    copy = node.model_copy(deep=True)
    del copy.metadata[common.RESERVED_KEY]
    for excluded in (copy.excluded_llm_metadata_keys, copy.excluded_embed_metadata_keys):
        if common.RESERVED_KEY in excluded:
            excluded.remove(common.RESERVED_KEY)
    return copy


def _stored_node(collection: str, row_id: str, metadata: dict[str, Any]) -> BaseNode:
    """The node a row keeps (`node_to_metadata_dict`). A row another front door wrote
    (`probembed ingest`, LangChain, the service) keeps none, and node_to_metadata_dict would
    overwrite its `doc_id` if it were re-added as a node made up from it: refused naming the
    collection and what reads it, not as LlamaIndex's bare "Node content not found"."""
    if _NODE_CONTENT not in metadata:
        raise StoreError(
            f"collection {collection!r} holds rows ProbembedVectorStore did not write (row "
            f"{row_id!r} keeps no LlamaIndex node): the LlamaIndex store reads only nodes it "
            f"wrote; search it with Database(path).collection({collection!r}).search(...) or "
            "LangChain's ProbembedVectorStore(collection), or add the nodes through this store "
            "to a collection of their own"
        )
    return metadata_dict_to_node(metadata)


def _hit_node(collection: str, hit: Any, confidence: float | None) -> BaseNode:
    """A search hit as the node that was stored, probembed's numbers in its metadata."""
    node = _stored_node(collection, hit["id"], hit["metadata"])
    node.metadata[common.RESERVED_KEY] = common.uncertainty(hit, confidence)
    for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        if common.RESERVED_KEY not in excluded:
            excluded.append(common.RESERVED_KEY)
    return node


def _no_options(kwargs: dict[str, Any], method: str) -> None:
    """Refuse keyword arguments the store does not use rather than ignore them."""
    if kwargs:
        takes = f"; it takes {', '.join(QUERY_OPTIONS)}" if method == "query" else ""
        raise TypeError(
            f"ProbembedVectorStore.{method} got unknown option(s) {sorted(kwargs)}{takes}"
        )
