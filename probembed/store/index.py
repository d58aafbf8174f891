"""Candidate generation: which stored items a query's exact rescoring should look at.

Small collections (and filters that leave few rows) are scanned exactly. Larger ones get a
FAISS HNSW graph, built over the means for dot/uec/mls/bhattacharyya and over the exact
inner-product form of the score for csd/w2/kl (docs/architecture.md, scores), so the graph
ranks by the score itself; its candidates are then rescored exactly: 2k of them where the
graph ranks by the score (only float32 rounding to undo), max(100, 10k) where it ranks by the
means and the score reorders them (uec, mls, bhattacharyya).

The graph searches inner products through an exact reduction to Euclidean distance: documents
are centred (x - c) and given one extra coordinate sqrt(R² - |x - c|²), queries get a 0, so
|q - x'|² = |q|² + R² - 2 q·x + 2 q·c ranks documents exactly as q·x does. On 20,000 MiniLM
sentence vectors (300 held-out queries) this graph holds 99.2-99.4% of the true top 10 of
dot, uec, csd and w2 among its 100 candidates. It cannot navigate the kl form: its 1/σ² block
is large and varies with each document's variance, unrelated to which documents a query
prefers, so the graph found 7-17% of the top 10 (95% with query-scaled coordinates and a
1,024-wide beam), and the kl top 10 is not near the dot top 10 either (60% within the 1,000
best means). kl candidates therefore come from an exact float32 inner-product scan of the
form (FAISS IndexFlatIP: 100% of the top 10, ~3x faster than the float64 exact scan).

Why FAISS HNSW and not LanceDB's own ANN index, measured on 39,700 real sentence vectors
(all-MiniLM-L6-v2, 384-d, 300 held-out queries, 2 shared cores): LanceDB without an index
answered 13 queries/s; IVF_HNSW_SQ 183/s at Recall@10 0.993 (146/s at 0.9997 with
refine_factor 5); IVF_PQ 131/s at 0.989 (with refine). FAISS HNSW (M=32, ef=128) answered
4,600/s batched (2,100/s one at a time) at 0.996, M=16 5,200/s at 0.998: 15-30x faster,
because every LanceDB query pays its own planning and I/O round trip. So LanceDB stays the
source of truth, and the graph is a derived file beside the table, keyed by table version,
rebuilt when the table changes and never needed for correctness.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
import numpy as np

from probembed import atomic
from probembed.gaussian import Gaussian
from probembed.scoring import Score, inner_product_form, parse_score

#: Scores whose candidates come from their exact inner-product form, not from the means.
FORM_SPACES = (Score.CSD, Score.W2, Score.KL)
#: Spaces a graph cannot navigate (measured above): their candidates come from a flat scan.
FLAT_SPACES = (Score.KL.value,)
MEAN_SPACE = "mean"


@dataclass(frozen=True)
class IndexSettings:
    """When to scan, how to build the graph, and how many candidates to rescore exactly."""

    #: Collections (or filtered subsets) with fewer rows than this are scanned exactly: on
    #: MiniLM vectors an exact dot scan of 5,183 rows ran at 1,800 queries/s, about what graph
    #: search plus per-query rescoring costs there, and at 20,000 rows at 380/s against 1,060/s.
    scan_below: int = 10_000
    #: HNSW graph degree.
    m: int = 32
    #: HNSW build beam width.
    ef_construction: int = 80
    #: OpenMP threads for the graph build. FAISS inserts rows in parallel in an unspecified
    #: order, so with more than one thread the graph (and which candidates its search finds)
    #: may depend on thread timing; with one it is a function of the vectors alone (FAISS
    #: wiki, "Threads and asynchronous calls"). The cost is the build's parallelism: on idle
    #: cores a build with two threads can be up to twice as fast (not measured here by a
    #: benchmark; one by-hand timing on busy cores found one thread no slower). None: FAISS's
    #: default (every core).
    build_threads: int | None = 1
    #: HNSW search beam width (raised to the pool size when that is larger). On 100,000 real
    #: texts (1,536-d fused means, 500 held-out queries) 128 found 97.9% of the exact uec and
    #: dot top 10, 256 found 99.1% at 0.68x the speed of 128, 512 99.5% at 0.40x.
    ef_search: int = 256
    #: Minimum number of candidates rescored exactly per query, where the graph ranks by
    #: the means and the score reorders them (uec, mls, bhattacharyya).
    pool: int = 100
    #: Candidates per requested hit there: pool = max(pool, pool_factor * k).
    pool_factor: int = 10
    #: Candidates per requested hit where the graph ranks by the score itself (dot, csd, w2,
    #: kl): rescoring only undoes float32 rounding, so a few more than k suffice.
    refine_factor: int = 2

    def pool_size(self, k: int) -> int:
        """How many candidates a ranking that the score reorders needs for k hits."""
        return max(self.pool, self.pool_factor * k, k)

    def candidates(self, k: int, score: Score) -> int:
        """How many ANN candidates to rescore for k hits of this score."""
        return max(self.refine_factor * k, k) if ranks_exactly(score) else self.pool_size(k)


def ranks_exactly(score: Score | str) -> bool:
    """Whether the candidate index ranks by this score itself (up to float32 rounding)."""
    kind = parse_score(score)
    return kind is Score.DOT or kind in FORM_SPACES


def ann_space(score: Score | str) -> str:
    """Which vectors the graph for this score is built over."""
    kind = parse_score(score)
    return kind.value if kind in FORM_SPACES else MEAN_SPACE


def ann_vectors(g: Gaussian, space: str, side: str) -> np.ndarray:
    """The float32 vectors of a space: means, or a score's query- or doc-side form."""
    if space == MEAN_SPACE:
        return np.ascontiguousarray(g.mean, dtype=np.float32)
    return np.ascontiguousarray(inner_product_form(g, space, side), dtype=np.float32)


@contextmanager
def omp_threads(threads: int | None) -> Iterator[None]:
    """Run the block with FAISS limited to that many OpenMP threads (None: leave it alone)."""
    if threads is None:
        yield
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"build_threads must be a positive integer or None, got {threads!r}")
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


class FlatIndex:
    """Exact float32 inner products over every row (FAISS IndexFlatIP), addressed by position."""

    def __init__(self, vectors: np.ndarray) -> None:
        self._index = faiss.IndexFlatIP(vectors.shape[1])
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(
        self, queries: np.ndarray, n: int, ef: int, allowed: np.ndarray | None = None
    ) -> np.ndarray:
        """(nq, n) row positions by inner product, best first; `ef` is unused (exact)."""
        selector = None if allowed is None else faiss.IDSelectorBatch(allowed.astype(np.int64))
        params = faiss.SearchParameters(sel=selector)
        _, positions = self._index.search(
            np.ascontiguousarray(queries, dtype=np.float32), n, params=params
        )
        return positions


class HnswIndex:
    """A FAISS HNSW graph that finds the largest inner products, addressed by row position."""

    def __init__(self, index: faiss.Index) -> None:
        self._index = index

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @classmethod
    def build(cls, vectors: np.ndarray, settings: IndexSettings) -> HnswIndex:
        """Insert every (centred, lifted) row into a new Euclidean graph."""
        centred = vectors.astype(np.float64) - vectors.mean(axis=0, dtype=np.float64)
        sq_norm = np.einsum("nd,nd->n", centred, centred)
        lift = np.sqrt(np.maximum(sq_norm.max(initial=0.0) - sq_norm, 0.0))[:, None]
        index = faiss.IndexHNSWFlat(vectors.shape[1] + 1, settings.m, faiss.METRIC_L2)
        index.hnsw.efConstruction = settings.ef_construction
        rows = np.ascontiguousarray(np.hstack([centred, lift]), dtype=np.float32)
        with omp_threads(settings.build_threads):
            index.add(rows)
        return cls(index)

    def search(
        self,
        queries: np.ndarray,
        n: int,
        ef: int,
        allowed: np.ndarray | None = None,
    ) -> np.ndarray:
        """(nq, n) row positions by inner product, best first, -1 where fewer exist.

        `allowed` restricts the search to those row positions (a filter).
        """
        selector = None if allowed is None else faiss.IDSelectorBatch(allowed.astype(np.int64))
        params = faiss.SearchParametersHNSW(efSearch=max(ef, n), sel=selector)
        lifted = np.hstack([queries, np.zeros((len(queries), 1))]).astype(np.float32)
        _, positions = self._index.search(lifted, n, params=params)
        return positions

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically, so a reader never sees half a graph."""
        with atomic.replacing(path) as tmp:
            faiss.write_index(self._index, str(tmp))

    @classmethod
    def load(cls, path: str | os.PathLike) -> HnswIndex:
        """Read a graph written by `save`."""
        return cls(faiss.read_index(str(path)))
