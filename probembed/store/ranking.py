"""Turning candidate rows into ranked hits: exact scans, exact rescoring, rank fusion.

Every score here comes from `probembed.scoring.score_matrix`, so a hit's score is exactly the
score a brute-force scan gives it, whichever way its candidates were found. Rows are read
through a `Rows` function (positions -> their stored Gaussians), so the collection's rows
need not all be in memory.

The exact scan of dot and uec is a float32 pre-selection with a proven error bound, then
float64 rescoring: per query it keeps the SELECT_MARGIN + k rows of highest float32 upper
bound, rescores them in float64, and accepts the result when the k-th exact score beats the
upper bound of every row it dropped; otherwise (many near-ties) that query is scanned again
in float64. The bound: a float32 dot product of length n, of inputs exact in float32 (the
stored rows are float32; casting the query adds one rounding), errs by at most
γ(n+2)·‖q‖·‖d‖ with γ(m) = m·u/(1 - m·u), u = 2⁻²⁴, in any summation order (Higham,
Accuracy and Stability of Numerical Algorithms, §3.1); uec's variance is a sum of
non-negative terms, so its float32 value is within a relative γ(n+4) of the true one, and
uec = dot/√(1 + a·v) moves by at most (a/2)·|dot|·|Δv| with it. The result is therefore
identical to the float64 scan, ties included (broken towards the lower position by both).
A tie here is two equal float64 scores: two identical rows can score a few ulps apart when
BLAS sums their products in different orders (rows in different blocks, another kernel), and
then the higher one ranks first on either path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import numpy as np

from probembed.calibration.confidence import lexical_features
from probembed.gaussian import Gaussian
from probembed.scoring import Score, dot_moments, score_matrix

#: Reciprocal-rank-fusion constant (Cormack, Clarke and Büttcher 2009).
RRF_K = 60
#: Documents per block of the exact scan, to bound the score-matrix temporaries.
SCAN_BLOCK = 4096
#: Rows beyond k the float32 pre-selection keeps per query for float64 rescoring.
SELECT_MARGIN = 16
#: Unit roundoff of float32.
_U32 = 2.0**-24

#: The rows to rank: in memory, or positions -> the stored Gaussians of those rows.
Rows = Gaussian | Callable[[np.ndarray], Gaussian]
#: Rows per FAISS call of the exact dot scan: large blocks keep FAISS's matrix products large.
DOT_BLOCK = 65_536


class Means(Protocol):
    """Rows' float32 means alone by position, (p, d): all the exact dot scan reads; with an
    upper bound of each row's norm, which its error bound needs and which is cheaper kept
    than recomputed over every row scanned."""

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        """(p, d) float32 means of the rows at these positions."""
        ...

    def norm_bounds(self, positions: np.ndarray) -> np.ndarray:
        """(p,) float32 upper bounds of those rows' norms (`float32_norm_bounds`)."""
        ...


class Ranked(NamedTuple):
    """One query's hits, best first: row positions, scores, dot products and their variances."""

    positions: np.ndarray
    scores: np.ndarray
    dots: np.ndarray
    variances: np.ndarray


def best(positions: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k highest scores and their positions, best first; ties to the lower position."""
    order = np.lexsort((positions, -scores), axis=-1)[:, :k]
    return np.take_along_axis(positions, order, axis=1), np.take_along_axis(scores, order, axis=1)


def _read(rows: Rows, positions: np.ndarray) -> Gaussian:
    """The Gaussians of rows by position, wherever the rows live."""
    return rows[positions] if isinstance(rows, Gaussian) else rows(positions)


def gathered(rows: Rows, candidates: np.ndarray) -> tuple[Gaussian, np.ndarray]:
    """The distinct candidate rows' Gaussians, and the (nq, p) candidates indexing into them."""
    wanted = np.where(candidates >= 0, candidates, 0)
    unique, local = np.unique(wanted, return_inverse=True)
    return _read(rows, unique), local.reshape(wanted.shape)


def with_moments(
    queries: Gaussian, rows: Rows, positions: np.ndarray, scores: np.ndarray
) -> list[Ranked]:
    """Attach each hit's dot product and its variance (the std reported beside every score).

    `positions` is (nq, k) with -1 where a query has fewer hits; those are dropped.
    """
    found = positions >= 0
    docs, local = gathered(rows, positions)
    dots, variances = dot_moments(queries, docs, candidates=local)
    return [
        Ranked(p[f], s[f], d[f], v[f])
        for p, s, d, v, f in zip(positions, scores, dots, variances, found, strict=True)
    ]


def scan(
    queries: Gaussian,
    rows: Rows,
    positions: np.ndarray,
    k: int,
    score: Score,
    beta: float,
    means: Means | None = None,
) -> list[Ranked]:
    """Exact top-k of every query over the given positions, a block of rows at a time.

    With `means` (the rows' means alone, cheaper to read than the Gaussians), a dot scan
    reads only them and pre-selects with FAISS's exact float32 inner-product search (same
    bound); the hits' moments are read from `rows`.
    """
    scored = _scored(rows, means, score)
    if score is Score.DOT and means is not None and len(positions):  # a filter may keep none
        return _certified_dot_scan(queries, rows, scored, means, positions, k)
    if score in (Score.DOT, Score.UEC):
        return _certified_scan(queries, rows, scored, positions, k, score, beta)
    return with_moments(queries, rows, *_float64_scan(queries, scored, positions, k, score, beta))


def _scored(rows: Rows, means: Means | None, score: Score) -> Rows:
    """What candidates are scored from: for dot (which reads no variances) the means alone
    where they are given, else the rows."""
    if score is Score.DOT and means is not None:
        return lambda positions: Gaussian.deterministic(means[positions])
    return rows


def _float64_scan(
    queries: Gaussian, rows: Rows, positions: np.ndarray, k: int, score: Score, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """(nq, k) positions and float64 scores of the best rows, by scoring every one."""
    keep_pos = np.empty((len(queries), 0), dtype=np.int64)
    keep = np.empty((len(queries), 0))
    for start in range(0, len(positions), SCAN_BLOCK):
        block = positions[start : start + SCAN_BLOCK]
        scores = np.hstack([keep, score_matrix(queries, _read(rows, block), score, beta)])
        keep, keep_pos = _top(scores, _beside(keep_pos, block, len(queries)), k)
    return best(keep_pos, keep, k)


def _beside(kept: np.ndarray, block: np.ndarray, nq: int) -> np.ndarray:
    """Positions kept so far, then this block's, per query."""
    return np.hstack([kept, np.broadcast_to(block, (nq, len(block)))])


def _top(scores: np.ndarray, positions: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row the k highest scores (unordered) and their positions."""
    if scores.shape[1] <= k:
        return scores, positions
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.take_along_axis(scores, top, axis=1), np.take_along_axis(positions, top, axis=1)


def _gamma(n: int) -> float:
    """Higham's γ(n): the relative error bound of n float32 roundings."""
    return n * _U32 / (1.0 - n * _U32)


def _norm_bounds(rows: np.ndarray) -> np.ndarray:
    """(n,) float64 upper bounds of float32 rows' norms, summed in float32 (several times
    faster than in float64): the computed sum of d squares is within a relative γ(d) of the
    true one (non-negative terms), so the true one is at most computed / (1 − γ(d)); the
    factor (1 + 4u) covers the float64 division and square root."""
    squares = np.einsum("nd,nd->n", rows, rows).astype(np.float64)
    return np.sqrt(squares / (1.0 - _gamma(rows.shape[1]))) * (1.0 + 4 * _U32)


def float32_norm_bounds(rows: np.ndarray) -> np.ndarray:
    """`_norm_bounds` kept in float32 (what `Means` hold per row), rounded up so that each
    is still an upper bound."""
    bounds = _norm_bounds(rows)
    kept = bounds.astype(np.float32)
    return np.where(kept < bounds, np.nextafter(kept, np.float32(np.inf)), kept)


def _float32_bounds(
    queries: Gaussian, docs: Gaussian, score: Score, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """(nq, nd) float32-computed scores and a proven bound on their distance to float64."""
    mq = queries.mean.astype(np.float32)
    md = docs.mean
    dim = md.shape[1]
    dots = (mq @ md.T).astype(np.float64)
    q_norm = np.sqrt(np.einsum("nd,nd->n", queries.mean, queries.mean, dtype=np.float64))
    d_norm = _norm_bounds(md)
    dot_err = _gamma(dim + 2) * q_norm[:, None] * d_norm[None, :]
    if score is Score.DOT:
        return dots, dot_err
    vq, vd = queries.var.astype(np.float32), docs.var
    var = ((mq * mq) @ vd.T + vq @ (md * md + vd).T).astype(np.float64)
    var_err = _gamma(dim + 4) / (1.0 - _gamma(dim + 4)) * var
    a = (np.pi / 8.0) * beta
    scores = dots / np.sqrt(1.0 + a * var)
    err = dot_err + (np.abs(dots) + dot_err) * (a / 2.0) * var_err + 1e-12 * np.abs(scores)
    return scores, err


def _certified_scan(
    queries: Gaussian,
    rows: Rows,
    scored: Rows,
    positions: np.ndarray,
    k: int,
    score: Score,
    beta: float,
) -> list[Ranked]:
    """Exact top-k by float32 pre-selection under a proven bound, float64 rescoring."""
    nq, keep_n = len(queries), k + SELECT_MARGIN
    keep_pos = np.empty((nq, 0), dtype=np.int64)
    keep_lower, keep_upper = np.empty((nq, 0)), np.empty((nq, 0))
    dropped = np.full(nq, -np.inf)  # highest upper bound among the rows not kept
    for start in range(0, len(positions), SCAN_BLOCK):
        block = positions[start : start + SCAN_BLOCK]
        approx, err = _float32_bounds(queries, _read(scored, block), score, beta)
        lower, upper = np.hstack([keep_lower, approx - err]), np.hstack([keep_upper, approx + err])
        candidates = _beside(keep_pos, block, nq)
        if upper.shape[1] > keep_n:
            order = np.argpartition(-upper, keep_n - 1, axis=1)
            rest = np.take_along_axis(upper, order[:, keep_n:], axis=1)
            dropped = np.maximum(dropped, rest.max(axis=1, initial=-np.inf))
            lower, upper, candidates = (
                np.take_along_axis(a, order[:, :keep_n], axis=1) for a in (lower, upper, candidates)
            )
        keep_lower, keep_upper, keep_pos = lower, upper, candidates
    keep_pos = within_reach(keep_pos, keep_lower, keep_upper, k)
    return _certified(queries, rows, scored, positions, keep_pos, dropped, k, score, beta)


def _certified_dot_scan(
    queries: Gaussian, rows: Rows, scored: Rows, means: Means, positions: np.ndarray, k: int
) -> list[Ranked]:
    """The certified dot scan with FAISS's float32 search (`faiss.knn`) as pre-selection.

    Per block, FAISS's k + SELECT_MARGIN + 1 best float32 products: the first k + margin are
    kept, the next one bounds every row dropped from the block (its upper bound uses the
    block's largest norm).
    """
    import faiss

    nq, keep_n = len(queries), k + SELECT_MARGIN
    q32 = np.ascontiguousarray(queries.mean, dtype=np.float32)
    q_norm = np.sqrt(np.einsum("nd,nd->n", queries.mean, queries.mean, dtype=np.float64))
    gamma = _gamma(queries.dim + 2)
    kept_pos, kept_lower, kept_upper = [], [], []
    dropped = np.full(nq, -np.inf)
    for start in range(0, len(positions), DOT_BLOCK):
        block = positions[start : start + DOT_BLOCK]
        x = np.ascontiguousarray(means[block], dtype=np.float32)
        width = min(keep_n + 1, len(block))
        found, index = faiss.knn(q32, x, width, metric=faiss.METRIC_INNER_PRODUCT)
        err = (gamma * q_norm * float(means.norm_bounds(block).max()))[:, None]
        approx = found.astype(np.float64)
        upper = approx + err
        if width > keep_n:
            dropped = np.maximum(dropped, upper[:, keep_n])
        kept_pos.append(block[index[:, :keep_n]])
        kept_lower.append(approx[:, :keep_n] - err)
        kept_upper.append(upper[:, :keep_n])
    keep_pos, lower, upper = (np.hstack(a) for a in (kept_pos, kept_lower, kept_upper))
    if upper.shape[1] > keep_n:
        order = np.argpartition(-upper, keep_n - 1, axis=1)
        rest = np.take_along_axis(upper, order[:, keep_n:], axis=1)
        dropped = np.maximum(dropped, rest.max(axis=1))
        keep_pos, lower, upper = (
            np.take_along_axis(a, order[:, :keep_n], axis=1) for a in (keep_pos, lower, upper)
        )
    keep_pos = within_reach(keep_pos, lower, upper, k)
    return _certified(queries, rows, scored, positions, keep_pos, dropped, k, Score.DOT, 0.0)


def within_reach(
    candidates: np.ndarray, lower: np.ndarray, upper: np.ndarray, k: int
) -> np.ndarray:
    """Per query the candidates (-1 = none) whose score bounds let them reach its top k.

    A row whose upper bound is below the k-th highest lower bound has k rows surely above
    it, so float64 rescoring need not see it: of the k + SELECT_MARGIN pre-selected rows
    usually little more than k remain. The float64 scores err too, by under 10⁻⁸ of the
    float32 bound (2⁻⁵³ against 2⁻²⁴ per rounding): a margin of 10⁻⁶ of the widest bound
    covers that. Columns are packed left, padded with -1.
    """
    if candidates.shape[1] <= k:
        return candidates
    found = candidates >= 0
    width = np.where(found, upper, 0.0) - np.where(found, lower, 0.0)  # no inf - inf for -1s
    lower = np.where(found, lower, -np.inf)
    slack = 1e-6 * width.max(axis=1, keepdims=True)
    kth = -np.partition(-lower, k - 1, axis=1)[:, k - 1 : k]
    reach = found & (upper >= kth - slack)
    order = np.argsort(~reach, axis=1, kind="stable")[:, : int(reach.sum(axis=1).max())]
    return np.take_along_axis(np.where(reach, candidates, -1), order, axis=1)


def _certified(
    queries: Gaussian,
    rows: Rows,
    scored: Rows,
    positions: np.ndarray,
    keep_pos: np.ndarray,
    dropped: np.ndarray,
    k: int,
    score: Score,
    beta: float,
) -> list[Ranked]:
    """Rescore the pre-selected rows in float64; scan again in float64 where not certain."""
    ranked = _rescored(queries, rows, keep_pos, k, score, beta, scored)
    unsure = [i for i, r in enumerate(ranked) if not _certain(r, k, dropped[i])]
    if unsure:
        again = _float64_scan(queries[unsure], scored, positions, k, score, beta)
        for i, fixed in zip(unsure, with_moments(queries[unsure], rows, *again), strict=True):
            ranked[i] = fixed
    return ranked


def _certain(ranked: Ranked, k: int, dropped: float) -> bool:
    """Whether no dropped row could have reached this query's top k."""
    if dropped == -np.inf:
        return True
    return len(ranked.scores) >= k and float(ranked.scores[k - 1]) > dropped


def rescore(
    queries: Gaussian,
    rows: Rows,
    candidates: np.ndarray,
    k: int,
    score: Score,
    beta: float,
    means: Means | None = None,
) -> list[Ranked]:
    """Exact scores of each query's (nq, p) candidate rows (-1 = none), k best kept.

    `means` as in `scan`. With them, dot candidates are pre-selected in float32 under the
    scan's proven bound and only the few that can reach the top k are scored in float64:
    the same hits and scores, at a fraction of the float64 work.
    """
    scored = _scored(rows, means, score)
    if score is Score.DOT and means is not None and candidates.shape[1] > k + SELECT_MARGIN:
        return _certified_rescore(queries, rows, scored, means, candidates, k)
    return _rescored(queries, rows, candidates, k, score, beta, scored)


def _certified_rescore(
    queries: Gaussian, rows: Rows, scored: Rows, means: Means, candidates: np.ndarray, k: int
) -> list[Ranked]:
    """Dot rescoring of many candidates: float32 products and their bound keep k + margin
    per query; a query whose k-th exact score does not beat every dropped bound is
    rescored over all its candidates in float64."""
    nq, keep_n = len(queries), k + SELECT_MARGIN
    found = candidates >= 0
    wanted = np.where(found, candidates, 0)
    q32 = np.asarray(queries.mean, dtype=np.float32)
    approx = np.empty(candidates.shape)
    for i in range(nq):  # one query's rows at a time: a small product, no gathered copy
        approx[i] = means[wanted[i]] @ q32[i]
    q_norm = np.sqrt(np.einsum("nd,nd->n", q32, q32, dtype=np.float64))
    err = _gamma(queries.dim + 2) * q_norm[:, None] * means.norm_bounds(wanted)
    upper = np.where(found, approx + err, -np.inf)
    order = np.argpartition(-upper, keep_n - 1, axis=1)
    dropped = np.take_along_axis(upper, order[:, keep_n:], axis=1).max(axis=1)
    kept = order[:, :keep_n]
    keep = within_reach(
        np.take_along_axis(np.where(found, candidates, -1), kept, axis=1),
        np.take_along_axis(approx - err, kept, axis=1),
        np.take_along_axis(upper, kept, axis=1),
        k,
    )
    ranked = _rescored(queries, rows, keep, k, Score.DOT, 0.0, scored)
    unsure = [i for i, r in enumerate(ranked) if not _certain(r, k, dropped[i])]
    if unsure:
        again = _rescored(queries[unsure], rows, candidates[unsure], k, Score.DOT, 0.0, scored)
        for i, fixed in zip(unsure, again, strict=True):
            ranked[i] = fixed
    return ranked


def _rescored(
    queries: Gaussian,
    rows: Rows,
    candidates: np.ndarray,
    k: int,
    score: Score,
    beta: float,
    scored: Rows,
) -> list[Ranked]:
    """Float64 scores of every candidate (read from `scored`), k best kept (what `rescore`
    guarantees); the hits' moments are read from `rows`."""
    found = candidates >= 0
    docs, local = gathered(scored, candidates)
    scores = np.where(found, score_matrix(queries, docs, score, beta, candidates=local), -np.inf)
    positions, scores = best(np.where(found, candidates, -1), scores, k)
    return with_moments(queries, rows, positions, scores)


#: Depth of the dense and BM25 lists a hybrid search fuses: fixed, not the index settings'
#: pool, so every search fuses the lists its calibrator and query confidence were fitted on,
#: and BM25's list reaches BM25_RANK_CAP for the hit features (the default pool's depth for
#: CONFIDENCE_DEPTH hits, which training used before this was fixed).
HYBRID_DEPTH = 110


class Hybrid(NamedTuple):
    """One query's hybrid ranking, with what BM25 said (for the calibrator's features)."""

    #: The k best row positions by reciprocal-rank fusion, and their fused scores.
    positions: np.ndarray
    scores: np.ndarray
    #: (2,) `lexical_features` of the query.
    lexical: np.ndarray
    #: BM25's own hits, best first: row positions and scores.
    bm25_positions: np.ndarray
    bm25_scores: np.ndarray


def hybrid_depth(k: int) -> int:
    """How deep a hybrid search ranks dense and asks BM25 for k hits: HYBRID_DEPTH, or k past
    it (a larger k never reorders what a smaller one showed; only a k beyond lengthens)."""
    return max(HYBRID_DEPTH, k)


def hybrid_ranked(dense: np.ndarray, bm25: Sequence[tuple[int | None, float]], k: int) -> Hybrid:
    """A hybrid search's k best for one query.

    `dense` are the dense ranking's positions, `bm25` BM25's (position, score) pairs best
    first, None for a hit the ranking does not know (it is dropped), each `hybrid_depth`
    deep. Training and search both call this, so a calibrator sees the features a search
    reads.
    """
    known = [(p, s) for p, s in bm25 if p is not None]
    bm25_positions = np.array([p for p, _ in known], dtype=np.int64)
    scores = np.array([s for _, s in known], dtype=np.float64)
    top = int(dense[0]) if len(dense) else None
    positions, fused = reciprocal_rank_fusion([dense, bm25_positions], k)
    words = lexical_features(top, bm25_positions, scores)
    return Hybrid(positions, fused, words, bm25_positions, scores)


def reciprocal_rank_fusion(rankings: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions ordered by Σ 1/(RRF_K + rank) over the rankings, with those fused scores."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, p in enumerate(ranking, start=1):
            fused[int(p)] = fused.get(int(p), 0.0) + 1.0 / (RRF_K + rank)
    order = sorted(fused, key=lambda p: (-fused[p], p))[:k]
    return np.array(order, dtype=np.int64), np.array([fused[p] for p in order])
