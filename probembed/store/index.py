"""Candidate generation: which stored items a query's exact rescoring should look at.

Small collections (and filters that leave few rows) are scanned exactly. Larger ones get a
FAISS HNSW graph, built over the means for dot/uec/mls/bhattacharyya and over the exact
inner-product form of the score for csd/w2/kl (docs/architecture.md, scores), so the graph
ranks by the score itself; its candidates are then rescored exactly: 2k of them where a
float32 graph ranks by the score (only float32 rounding to undo), 4k for dot over quantised
codes (the default, `IndexSettings.codec`), max(100, 10k) for the other scores over codes
and where the graph ranks by the means and the score reorders them (uec, mls,
bhattacharyya). The measurements below were made with float32 graphs.

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
import numpy as np

from probembed import atomic
from probembed.gaussian import Gaussian
from probembed.scoring import Score, inner_product_form, parse_score
from probembed.scoring.inner_product import Side

#: Scores whose candidates come from their exact inner-product form, not from the means.
FORM_SPACES = (Score.CSD, Score.W2, Score.KL)
#: Spaces a graph cannot navigate (measured above): their candidates come from a flat scan.
FLAT_SPACES = (Score.KL.value,)
MEAN_SPACE = "mean"
#: Rows a graph's scalar quantiser is trained on (its per-dimension ranges).
TRAIN_ROWS = 50_000
#: The graph's codecs: None keeps float32 rows, else a FAISS scalar quantiser.
CODECS: dict[str, int | None] = {
    "flat": None,
    "sq8": faiss.ScalarQuantizer.QT_8bit,
    "sq4": faiss.ScalarQuantizer.QT_4bit,
}


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
    #: texts (1,280-d fused means, 4-bit graph, 500 held-out queries; search.json) 128 found
    #: 98.8% of the exact uec and dot top 10, 256 found 99.4%, 512 99.6% at 0.6-1.0x the
    #: speed of 256 (over the last two runs and both scores).
    ef_search: int = 256
    #: Minimum number of candidates rescored exactly per query, where the graph ranks by
    #: the means and the score reorders them (uec, mls, bhattacharyya).
    pool: int = 100
    #: Candidates per requested hit there: pool = max(pool, pool_factor * k).
    pool_factor: int = 10
    #: Candidates per requested hit where the graph ranks by the score itself (dot, csd, w2,
    #: kl): rescoring only undoes float32 rounding, so a few more than k suffice.
    refine_factor: int = 2
    #: Candidates per requested hit for `dot` over quantised codes: the graph ranks by the
    #: dot product up to the codes' error, and rescoring only restores the exact order. On
    #: 100,000 real texts (search.json, `probembed-poolN` rows) 22, 44 and 121 candidates
    #: for k = 10 (11 ranked) gave the same Recall@10 (0.9934, 0.9936, 0.9936) at the default beam,
    #: whose width sets what the graph finds.
    quantised_factor: int = 4
    #: How the graph stores its rows: "flat" (float32), "sq8" or "sq4" (FAISS scalar
    #: quantisers, 1 byte or half a byte per dimension); candidates are rescored exactly
    #: from the full-precision rows whatever the codec. On 100,000 real 1,280-d means
    #: (benchmarks/results/search.json) search held 1,123 bytes per item in memory over sq4
    #: (flat 5,655, sq8 1,771) with the same Recall@10 of dot and uec as both.
    codec: str = "sq4"

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {sorted(CODECS)}, got {self.codec!r}")

    def pool_size(self, k: int) -> int:
        """How many candidates a ranking that the score reorders needs for k hits."""
        return max(self.pool, self.pool_factor * k, k)

    def candidates(self, k: int, score: Score) -> int:
        """How many ANN candidates to rescore for k hits of this score.

        Only a float32 graph over a score's own form ranks by that score (a few more than k
        suffice); over quantised codes `dot` is ranked up to the codes' error
        (`quantised_factor`), and every other score is reordered by rescoring (the full pool).
        """
        if ranks_exactly(score) and self.codec == "flat":
            return max(self.refine_factor * k, k)
        if parse_score(score) is Score.DOT:
            return max(self.quantised_factor * k, k)
        return self.pool_size(k)


def ranks_exactly(score: Score | str) -> bool:
    """Whether the candidate index ranks by this score itself (up to float32 rounding)."""
    kind = parse_score(score)
    return kind is Score.DOT or kind in FORM_SPACES


def ann_space(score: Score | str) -> str:
    """Which vectors the graph for this score is built over."""
    kind = parse_score(score)
    return kind.value if kind in FORM_SPACES else MEAN_SPACE


def ann_vectors(g: Gaussian, space: str, side: Side) -> np.ndarray:
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


def selector(allowed: np.ndarray) -> tuple[faiss.IDSelector, np.ndarray]:
    """A FAISS selector of the True positions, and the bitmap it reads (keep it alive)."""
    bits = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
    return faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits)), bits


class FlatIndex:
    """Exact float32 inner products over every row (FAISS IndexFlatIP), addressed by position."""

    def __init__(self, dim: int) -> None:
        self._index = faiss.IndexFlatIP(dim)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        """Append rows; their positions follow the existing ones."""
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    @property
    def bytes(self) -> int:
        """Size of the stored rows."""
        return int(self._index.ntotal) * int(self._index.d) * 4

    def search(
        self, queries: np.ndarray, n: int, ef: int, allowed: np.ndarray | None = None
    ) -> np.ndarray:
        """(nq, n) row positions by inner product, best first; `ef` is unused (exact)."""
        sel, _bits = selector(allowed) if allowed is not None else (None, None)
        params = faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]  # SWIG keywords: unstubbed
        _, positions = self._index.search(
            np.ascontiguousarray(queries, dtype=np.float32), n, params=params
        )
        return positions


class HnswIndex:
    """A FAISS HNSW graph that finds the largest inner products, addressed by row position.

    The centre and radius of the reduction to Euclidean distance are fixed when the graph is
    made, so rows can be added later: a row farther from the centre than the radius gets a
    lift of 0 and is counted in `overflow`, a reason to rebuild (its candidates are still
    rescored exactly, but the graph ranks it slightly wrongly).
    """

    def __init__(self, index: faiss.Index, centre: np.ndarray, radius_sq: float) -> None:
        self._index = index
        self.centre = centre
        self.radius_sq = radius_sq
        self.overflow = 0

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @classmethod
    def create(cls, centre: np.ndarray, radius_sq: float, settings: IndexSettings) -> HnswIndex:
        """An empty float32 graph for rows around `centre` (compress it once it is built)."""
        index = faiss.IndexHNSWFlat(_padded(len(centre) + 1), settings.m, faiss.METRIC_L2)
        index.hnsw.efConstruction = settings.ef_construction
        return cls(index, np.asarray(centre, dtype=np.float64), float(radius_sq))

    def compressed(self, codec: str, blocks: Iterable[np.ndarray]) -> HnswIndex:
        """The same graph over scalar-quantised rows (`blocks`: the rows again, in order).

        The graph is built on float32 rows, where each insertion's distances are cheapest
        (inserting into a graph over 4-bit codes decodes them at every step), and only its
        storage is then swapped for codes, trained on the first TRAIN_ROWS rows.
        """
        kind = CODECS[codec]
        if kind is None:
            return self
        # faiss's stub misses the SWIG API: `kind` is a QuantizerType number, `hnsw` exists
        index = faiss.IndexHNSWSQ(
            self._index.d,
            kind,  # type: ignore[arg-type]
            self._index.hnsw.nb_neighbors(1),  # type: ignore[attr-defined]
            faiss.METRIC_L2,
        )
        rows = iter(blocks)
        first = [self._lifted(next(rows), count=False)]
        while sum(len(b) for b in first) < TRAIN_ROWS:
            block = next(rows, None)
            if block is None:
                break
            first.append(self._lifted(block, count=False))
        index.storage.train(np.vstack(first))
        for block in first:
            index.storage.add(block)
        for block in rows:
            index.storage.add(self._lifted(block, count=False))
        # a copy of the graph's links, over the new storage
        index.hnsw = self._index.hnsw  # type: ignore[attr-defined]
        index.ntotal = self._index.ntotal
        index.is_trained = True
        compact = HnswIndex(index, self.centre, self.radius_sq)
        compact.overflow = self.overflow
        return compact

    def _lifted(self, vectors: np.ndarray, count: bool = True) -> np.ndarray:
        """Rows centred, with the coordinate that turns inner product into distance."""
        centred = vectors.astype(np.float64) - self.centre
        sq_norm = np.einsum("nd,nd->n", centred, centred)
        if count:
            self.overflow += int((sq_norm > self.radius_sq).sum())
        lift = np.sqrt(np.maximum(self.radius_sq - sq_norm, 0.0))[:, None]
        return self._pad(np.hstack([centred, lift]))

    def _pad(self, rows: np.ndarray) -> np.ndarray:
        """Rows widened with zeros to the graph's dimension (distances do not change)."""
        out = np.zeros((len(rows), self._index.d), dtype=np.float32)
        out[:, : rows.shape[1]] = rows
        return out

    def add(self, vectors: np.ndarray, threads: int | None = 1) -> None:
        """Insert rows; their positions follow the existing ones."""
        with omp_threads(threads):
            self._index.add(self._lifted(vectors))

    def search(
        self,
        queries: np.ndarray,
        n: int,
        ef: int,
        allowed: np.ndarray | None = None,
    ) -> np.ndarray:
        """(nq, n) row positions by inner product, best first, -1 where fewer exist.

        `allowed` (a boolean mask over positions) restricts the search to those rows.
        """
        sel, _bits = selector(allowed) if allowed is not None else (None, None)
        params = faiss.SearchParametersHNSW(efSearch=max(ef, n), sel=sel)  # type: ignore[attr-defined]
        _, positions = self._index.search(self._pad(queries), n, params=params)
        return positions

    @property
    def bytes(self) -> int:
        """Size of the graph and its codes as FAISS serialises them."""
        return int(faiss.serialize_index(self._index).size)

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically, so a reader never sees half a graph: FAISS index, then centre."""
        with atomic.replacing(path) as tmp:
            faiss.write_index(self._index, str(tmp))
        with atomic.replacing(_frame_path(path)) as tmp, open(tmp, "wb") as handle:
            np.save(handle, np.append(self.centre, self.radius_sq))

    @classmethod
    def load(cls, path: str | os.PathLike) -> HnswIndex | None:
        """Read a graph written by `save` (None when half of it is missing)."""
        if not os.path.isfile(_frame_path(path)):
            return None
        frame = np.load(_frame_path(path))
        return cls(faiss.read_index(str(path)), frame[:-1], float(frame[-1]))


def _padded(dim: int) -> int:
    """A graph dimension FAISS's SIMD distance kernels take: a multiple of 16 (an odd one such
    as 1,281 sends 4-bit codes down FAISS's scalar path)."""
    return -(-dim // 16) * 16


def _frame_path(path: str | os.PathLike) -> str:
    """Where a graph's centre and radius are kept, beside it."""
    return f"{os.fspath(path)}.centre.npy"
