"""A collection: one LanceDB table of probabilistic embeddings in a `Database`.

A row holds id, text, metadata (JSON), the fused mean and variance, and the per-model fusion
weights. Which pipeline made the vectors is kept in the table's schema metadata, written in the
same commit as the first rows, so a collection can refuse vectors from any other pipeline, and a
copy of that pipeline is kept beside the table (see `probembed.store.provenance`), so
`collection.search(...)` needs no pipeline argument. Every write is one LanceDB commit: an
interrupted write leaves the last committed version. Its `Database` is in
`probembed.store.database`, its filters' checks in `probembed.store.filters`.

`Collection` puts together the parts a collection is made of, each in a module of its own
built on the table handle (`handle.CollectionHandle`, which holds all of a handle's state):
`reads`, the pipeline copy (`provenance`), the members' `agreement`, `creation`, `writes`,
`undo`, `upkeep`, `backup` and `erasure`; what is here is its search and its stats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from probembed.store.backup import CollectionBackup
from probembed.store.erasure import CollectionErasure
from probembed.store.rows import PipelineInfo
from probembed.store.search import QueryResult, Searcher, check_arguments, warn_cut

if TYPE_CHECKING:
    from probembed.scoring import Score


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


class Collection(CollectionBackup, CollectionErasure):
    """One LanceDB table of items with their fused Gaussians, searchable with its own pipeline."""

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
        and `group_by_doc`. A query longer than a member model reads is embedded by its start
        alone (a hybrid search's BM25 reads all of it), with a `QueryCutWarning` saying so.
        """
        batch = [queries] if isinstance(queries, str) else queries
        options = (where, exact, hybrid, group_by_doc)
        check_arguments(batch, k, score, min_p_relevant, options)  # before the pipeline loads
        searcher = self.searcher()
        warn_cut(searcher.pipeline, batch, hybrid)  # before: `-W error` throws no search away
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
