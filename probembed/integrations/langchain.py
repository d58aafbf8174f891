"""LangChain: probembed as an `Embeddings` and a `VectorStore` backed by a probembed collection.

    from probembed.integrations.langchain import ProbembedEmbeddings, ProbembedVectorStore

    store = ProbembedVectorStore(Database("my.db", create=True).collection("docs"),
                                 ProbembedEmbeddings("retrieval"))
    store.add_texts(["..."], metadatas=[{"source": "a.md"}])
    store.as_retriever(search_kwargs={"k": 4, "filter": {"source": "a.md"}}).invoke("question")

A new collection needs the embeddings; over one written before, `ProbembedVectorStore(collection)`
takes the pipeline that wrote it (another one is refused: PipelineMismatchError).

Every returned Document carries its id and, under metadata["probembed"], the hit's score, std,
p_relevant, per-model weights and the query's confidence (see `probembed.store.results.Hit`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from probembed.extras import require

require("langchain", "probembed.integrations.langchain")

import langchain_core
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from probembed.caller import warn_caller
from probembed.integrations import common
from probembed.pipeline import as_pipeline
from probembed.store import Collection, Database, Hit, remove
from probembed.store.ingest import DEFAULT_BATCH

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline
    from probembed.scoring import Score

#: LangChain's package: its search methods and retrievers call this store for the user.
_LANGCHAIN_DIR = os.path.dirname(langchain_core.__file__)
#: Search options passed through to `Collection.search` (see `Searcher.search`).
_SEARCH_OPTIONS = ("score", "exact", "hybrid", "beta", "min_p_relevant")


class ProbembedEmbeddings(Embeddings):
    """A probembed pipeline as LangChain embeddings: each vector is the fused mean.

    The variance and fusion weights are dropped here; `ProbembedVectorStore` keeps them.
    """

    def __init__(self, pipeline: Pipeline | str | os.PathLike) -> None:
        self.pipeline = as_pipeline(pipeline)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The fused means of the texts, one list of floats each."""
        if not texts:
            return []
        return self.pipeline.encode(texts).gaussian.mean.tolist()

    def embed_query(self, text: str) -> list[float]:
        """The fused mean of one query."""
        return self.embed_documents([text])[0]


#: Why a search takes the query's text.
_BY_TEXT = (
    "probembed searches by a query's text: it scores with the query's variance and per-model "
    "weights, which a bare vector does not carry; use similarity_search(query) (or "
    "max_marginal_relevance_search) with the text"
)


class ProbembedVectorStore(VectorStore):
    """A LangChain vector store over a probembed collection, searched with its uncertainty.

    Queries are encoded by the collection's own pipeline (the embedding's, when given), as
    text: a query's variance comes from its text, so there is no search by bare vector.
    `relevance_score_fn` (as LangChain's own stores take it) maps a hit's raw score to the
    relevance in [0, 1] instead of the default, p_relevant (see `common.relevance`).
    """

    def __init__(
        self,
        collection: Collection,
        embedding: ProbembedEmbeddings | None = None,
        relevance_score_fn: Callable[[float], float] | None = None,
    ) -> None:
        if embedding is not None and not isinstance(embedding, ProbembedEmbeddings):
            raise TypeError(
                f"embedding must be a ProbembedEmbeddings (its pipeline makes the stored "
                f"Gaussians), got {type(embedding).__name__}"
            )
        if relevance_score_fn is not None and not callable(relevance_score_fn):
            raise TypeError(
                "relevance_score_fn must be a function of a hit's score to [0, 1], got "
                f"{type(relevance_score_fn).__name__}"
            )
        self.collection = common.checked_collection(collection, "ProbembedVectorStore")
        if embedding is None:
            pipeline = common.own_pipeline(collection, "embedding=ProbembedEmbeddings('retrieval')")
            embedding = ProbembedEmbeddings(pipeline)
        elif collection.exists:
            collection.use_pipeline(embedding.pipeline)
        self._embedding = embedding
        self.override_relevance_score_fn = relevance_score_fn
        self._told_uncalibrated = False

    @property
    def embeddings(self) -> ProbembedEmbeddings:
        """The embeddings of the collection's pipeline."""
        return self._embedding

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
        batch_size: int = DEFAULT_BATCH,
        **kwargs: Any,
    ) -> list[str]:
        """Upsert texts in one validated write; absent ids are derived from text and metadata.
        `batch_size` texts are embedded per commit (LangChain's `index()` passes it)."""
        _no_options(kwargs, "add_texts")
        return self._add(texts, metadatas, ids, batch_size, "texts")

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """LangChain's `add_documents` (the documents' own ids where one has an id and `ids`
        is not passed, as LangChain's), a lone string or Document refused rather than iterated
        (a string was stored one character per document), a bad one named as `documents[i]`
        (it was `texts[i]`, of an argument this call has not)."""
        listed = common.item_list(documents, "documents", Document)
        ids = [doc.id for doc in listed] if any(doc.id for doc in listed) else None
        ids = kwargs.pop("ids", ids)
        batch_size = kwargs.pop("batch_size", DEFAULT_BATCH)
        _no_options(kwargs, "add_documents")
        texts, metadatas = [d.page_content for d in listed], [d.metadata for d in listed]
        return self._add(texts, metadatas, ids, batch_size, "documents")

    @common.serialised("collection")
    def _add(
        self,
        texts: Iterable[str],
        metadatas: Sequence[dict[str, Any]] | None,
        ids: Sequence[str | None] | None,
        batch_size: int,
        argument: str,
    ) -> list[str]:
        """One validated write of texts, a bad one named by its position in `argument`."""
        pipeline = self._embedding.pipeline
        return common.store_texts(
            self.collection, pipeline, texts, metadatas, ids, batch_size, argument=argument
        )

    @common.serialised("collection")
    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete these ids (None: every item) in one commit; True when any was there."""
        _no_options(kwargs, "delete")
        if not common.holds_rows(self.collection):
            return False
        targets = sorted(self.collection.ids()) if ids is None else common.id_list(ids, "delete")
        return remove(self.collection, targets, self._embedding.pipeline) > 0

    @common.serialised("collection")
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents with these ids (missing ones are left out), each once: both
        Unicode spellings of one stored id find its row, and LangChain's contract returns a
        document once however often it was asked for."""
        if not common.holds_rows(self.collection):
            return []
        rows = self.collection.rows(common.id_list(ids, "get_by_ids"), ["text", "metadata"])
        unique = {row["id"]: row for row in rows.values()}
        return [_stored_document(row) for row in unique.values()]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The k best documents, each with probembed's numbers in metadata["probembed"]."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(document, score) pairs, best first; the score is probembed's (higher is closer).

        Options: `filter` (a dict of field -> value, a list meaning one of them, or a SQL
        string), `where` (SQL on id, text and metadata columns), and `score`, `exact`,
        `hybrid`, `beta`, `min_p_relevant` as in `Collection.search`.
        """
        return [(doc, hit["score"]) for doc, hit in self._search(query, k, kwargs)]

    @common.serialised("collection")
    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(document, relevance in [0, 1]) pairs: `relevance_score_fn` of the hit's score when
        given, else the hit's p_relevant when the pipeline has a calibrator, else the monotone
        map of `common.relevance` ((1 + s)/2 for dot, uec and uec-mteb; 1 for identical texts
        under the distances; hybrid RRF over its most; said in a warning once per store)."""
        if self.override_relevance_score_fn is not None:
            chosen = self.override_relevance_score_fn
            return [(doc, chosen(hit["score"])) for doc, hit in self._search(query, k, kwargs)]
        score: Score | str | None
        if kwargs.get("hybrid"):
            score = None  # reciprocal-rank fusion, not a similarity
        elif kwargs.get("score"):
            score = kwargs["score"]
        elif self.collection.exists:  # the score it searches with: its kept copy's
            score = self.collection.load_pipeline().score.name
        else:
            score = self._embedding.pipeline.score.name
        found = self._search(query, k, kwargs)
        if any(hit["p_relevant"] is None for _, hit in found):
            self._tell_uncalibrated(score)
        return [(doc, common.relevance(hit, score)) for doc, hit in found]

    def _tell_uncalibrated(self, score: Score | str | None) -> None:
        """Warn once per store that its relevance is a map of the score, not P(relevant): a
        `score_threshold` of 0.3 kept every hit without a word, where the store's own
        min_p_relevant (the CLI's --min-p-relevant, the service's) is refused."""
        if self._told_uncalibrated:
            return
        self._told_uncalibrated = True
        _, formula = common.score_relevance(score)
        warn_caller(
            f"pipeline {self.collection.load_pipeline().name!r} of collection "
            f"{self.collection.name!r} has no relevance calibrator, so a hit's relevance "
            f"score (and a score_threshold over it) is {formula}: a monotone map for ranking "
            "one query's hits, not P(relevant); pass relevance_score_fn to choose the map, or "
            "search a collection made with a calibrated pipeline ('retrieval' has one)",
            outside=(_LANGCHAIN_DIR,),  # its search or retriever, which called this store
        )

    async def _asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The same pairs as the synchronous search, computed in an executor thread."""
        return await run_in_executor(
            None, self._similarity_search_with_relevance_scores, query, k, **kwargs
        )

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """The `relevance_score_fn` given; without one the default relevance is not a function
        of the score alone (p_relevant reads the hit's rank and gaps too)."""
        if self.override_relevance_score_fn is None:
            raise NotImplementedError(
                "without relevance_score_fn the relevance is the hit's p_relevant (or a map of "
                "the score the collection searches with): use "
                "similarity_search_with_relevance_scores"
            )
        return self.override_relevance_score_fn

    @common.serialised("collection")
    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """k documents chosen among the fetch_k best for relevance and diversity at once.

        LangChain's own `maximal_marginal_relevance` picks them by the cosines (float64) of
        the fused means the search compared (the collection's adaptation applied) to the
        query's and to each other; the candidates come from the ordinary search, so
        `filter`, `where` and the search options apply as there.
        """
        if not 0.0 <= lambda_mult <= 1.0:
            raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult!r}")
        candidates = self._search(query, max(k, fetch_k), kwargs)
        if not candidates:
            return []
        ids = [hit["id"] for _, hit in candidates]
        query_mean, means = self.collection.searcher().vectors(query, ids)
        candidates = [c for c, i in zip(candidates, ids, strict=True) if i in means]
        listed = [means[hit["id"]] for _, hit in candidates]  # a row deleted since: left out
        # typed list[list[float]], it takes any rows np.array stacks
        chosen = maximal_marginal_relevance(query_mean, listed, lambda_mult=lambda_mult, k=k)  # type: ignore[arg-type]
        return [candidates[i][0] for i in chosen]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """Refused with the reason (LangChain's default raised NotImplementedError, no words)."""
        raise NotImplementedError(_BY_TEXT)

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        """Refused with the reason, as `similarity_search_by_vector`."""
        raise NotImplementedError(_BY_TEXT)

    @common.serialised("collection")
    def _search(self, query: str, k: int, kwargs: dict[str, Any]) -> list[tuple[Document, Hit]]:
        """Run one search, returning each hit as a Document beside the hit itself."""
        options = dict(kwargs)
        where = self._where(options.pop("filter", None), options.pop("where", None))
        unknown = set(options) - set(_SEARCH_OPTIONS)
        if unknown:
            raise TypeError(
                f"unknown search option(s) {sorted(unknown)}; probembed takes filter, where, "
                f"{', '.join(_SEARCH_OPTIONS)}"
            )
        framework = (_LANGCHAIN_DIR,)
        result = common.search(self.collection, query, k, framework, where=where, **options)
        return [(_hit_document(hit, result["confidence"]), hit) for hit in result["hits"]]

    def _where(self, filter: Any, where: str | None) -> str | None:
        """The SQL filter of a `filter` (dict or SQL) and a `where` together."""
        if filter is None or isinstance(filter, str):
            return common.both(filter, where)
        if not isinstance(filter, dict):
            raise TypeError(f"filter must be a dict of field -> value or SQL, got {filter!r}")
        return common.both(common.equality_filter(self.collection, filter), where)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        collection: Collection | None = None,
        db: str | os.PathLike | None = None,
        collection_name: str = "default",
        relevance_score_fn: Callable[[float], float] | None = None,
        **kwargs: Any,
    ) -> ProbembedVectorStore:
        """A store over `collection` (or `collection_name` in database directory `db`), with
        these texts added."""
        _no_options(kwargs, "from_texts")
        if collection is None:
            if db is None:
                raise ValueError("from_texts needs collection=Collection or db=DIRECTORY")
            collection = Database(db, create=True).collection(collection_name)
        store = cls(collection, embedding, relevance_score_fn)  # type: ignore[arg-type]
        store.add_texts(texts, metadatas, ids=ids)
        return store


def _hit_document(hit: Hit, confidence: float | None) -> Document:
    """A search hit as a LangChain Document, its numbers under metadata["probembed"]."""
    metadata = {**hit["metadata"], common.RESERVED_KEY: common.uncertainty(hit, confidence)}
    return Document(page_content=hit["text"] or "", metadata=metadata, id=hit["id"])


def _stored_document(row: dict[str, Any]) -> Document:
    """A stored row as a LangChain Document."""
    import json

    return Document(page_content=row["text"], metadata=json.loads(row["metadata"]), id=row["id"])


def _no_options(kwargs: dict[str, Any], method: str) -> None:
    """Refuse keyword arguments the store does not use rather than ignore them."""
    if kwargs:
        raise TypeError(f"ProbembedVectorStore.{method} got unknown option(s) {sorted(kwargs)}")
