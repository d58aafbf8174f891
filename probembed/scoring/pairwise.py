"""Score matrices between a batch of query Gaussians and a batch of document Gaussians.

Each score is written once, over float64 moment arrays, and evaluated in one of two shapes:
against every document (document arrays (nd, d), sums over d as matmuls) or against each
query's own candidate documents (arrays gathered to (nq, p, d), sums over d as einsums), which
is how search rescores its ANN candidates and how STS scores aligned pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from probembed.gaussian import Gaussian
from probembed.scoring.names import Score, parse_score

#: Smallest variance the log/ratio scores (kl, mls, bhattacharyya) see, per dimension.
#: Calibrated per-dimension variances of unit-norm embeddings are ~1e-5..1e-3 (residual²/d),
#: so a floor of 1e-8 (std 1e-4) never moves a real score; yet 1/floor = 1e8 and log(floor)
#: = -18.4 keep scores and the kl inner-product vectors far inside float32 range, and a
#: zero-variance input behaves as a near-deterministic Gaussian whose score is an affine
#: function of the squared mean distance, so the Euclidean ranking survives.
VAR_FLOOR = 1e-8

#: Memory bound for the (queries, documents, dim) float64 temporaries.
_BLOCK_BYTES = 256 * 2**20
#: float64 arrays of one block alive at once.
_BLOCK_TEMPORARIES = 2
#: Bound for the candidates gathered per block: blocks that stay in cache scored 300
#: queries × 100 candidates of 1,536-d 2.3x faster at 4 MiB than at 256 MiB.
_GATHER_BYTES = 4 * 2**20

#: Smallest mean norm cosine divides by: the eps of torch.nn.functional.normalize, which the
#: published UEC's MTEB script normalises with; an all-zero mean gets cosine 0, not NaN.
_NORM_EPS = 1e-12

#: A score over float64 moments (mq, vq, md, vd): queries (nq, d), documents (nd, d) or
#: gathered per query (nq, p, d); returns (nq, nd) or (nq, p).
_Formula = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _validate_pair(q: Gaussian, d: Gaussian) -> None:
    """Reject anything but two Gaussians of one dimension, naming both dimensions."""
    for name, g in (("query", q), ("document", d)):
        if not isinstance(g, Gaussian):
            raise TypeError(f"{name} must be a Gaussian, got {type(g).__name__}")
    if q.dim != d.dim:
        raise ValueError(
            f"query and document Gaussians must have the same dimension, got {q.dim} and {d.dim}"
        )


def _validate_candidates(candidates: np.ndarray, nq: int, nd: int) -> np.ndarray:
    """An (nq, p) integer array of row indices into the documents."""
    cand = np.asarray(candidates)
    if cand.ndim != 2 or cand.shape[0] != nq or not np.issubdtype(cand.dtype, np.integer):
        raise ValueError(
            f"candidates must be an integer (n_queries={nq}, p) array of document rows, "
            f"got {cand.dtype} {cand.shape}"
        )
    if cand.size and (cand.min() < 0 or cand.max() >= nd):
        raise ValueError(f"candidates must index the {nd} documents, got rows outside 0..{nd - 1}")
    return cand


def _floored(var: np.ndarray) -> np.ndarray:
    """Variances raised to VAR_FLOOR, so logs and divisions stay finite."""
    return np.maximum(var, VAR_FLOOR)


def floored_var(g: Gaussian) -> np.ndarray:
    """A Gaussian's variance in float64, floored (for the inner-product forms)."""
    return _floored(g.var.astype(np.float64))


def _contract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_k a[i, k]·b[.., k]: against every document (b is 2-D) or each query's own (3-D)."""
    return a @ b.T if b.ndim == 2 else np.einsum("qk,qpk->qp", a, b)


def _row_sum(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis (dimensions): (nd,) or (nq, p) for documents, (nq,) for
    queries, which callers make (nq, 1) to broadcast against the documents'."""
    return x.sum(axis=-1)


def _sq_distance(mq: np.ndarray, md: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances via |a|² + |b|² - 2a·b, clamped at 0."""
    sq = _row_sum(mq * mq)[:, None] + _row_sum(md * md)
    return np.maximum(sq - 2.0 * _contract(mq, md), 0.0)


def _dot_variance(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """Var(μ·ν) for independent q and d: Σ μq²σd² + σq²μd² + σq²σd²."""
    return _contract(mq * mq, vd) + _contract(vq, md * md + vd)


def _dot(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """μq·μd."""
    return _contract(mq, md)


def _dot_moments(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """μq·μd and its variance, stacked on a last axis."""
    return np.stack([_dot(mq, vq, md, vd), _dot_variance(mq, vq, md, vd)], axis=-1)


def _csd(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """-(|μq-μd|² + Σσq² + Σσd²)."""
    return -(_sq_distance(mq, md) + _row_sum(vq)[:, None] + _row_sum(vd))


def _w2(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """-(|μq-μd|² + |σq-σd|²)."""
    return -(_sq_distance(mq, md) + _sq_distance(np.sqrt(vq), np.sqrt(vd)))


def _kl(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """-KL(q||d) expanded into contractions against 1/σd² and μd/σd²."""
    vq, vd = _floored(vq), _floored(vd)
    inv_vd = 1.0 / vd
    doc_const = _row_sum(np.log(vd) + md * md * inv_vd)
    query_const = mq.shape[-1] + _row_sum(np.log(vq))
    two_kl = (
        _contract(vq + mq * mq, inv_vd)
        - 2.0 * _contract(mq, md * inv_vd)
        + doc_const
        - query_const[:, None]
    )
    return -0.5 * np.maximum(two_kl, 0.0)


def tiles(nq: int, nd: int, dim: int) -> Iterator[tuple[slice, slice]]:
    """Tile (queries, documents) so each (bq, bd, dim) float64 temporary fits the budget (a
    tile's slices may reach past the end; indexing stops there)."""
    elems = max(1, _BLOCK_BYTES // (8 * _BLOCK_TEMPORARIES))
    bd = max(1, min(nd, elems // max(dim, 1)))
    bq = max(1, elems // (bd * max(dim, 1)))
    for i in range(0, nq, bq):
        for j in range(0, nd, bd):
            yield slice(i, i + bq), slice(j, j + bd)


def _pairwise_sum(
    mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray, a: float
) -> np.ndarray:
    """Σ_k [a·(μq-μd)²/s + log s] with s = σq² + σd² (floored), in memory-bounded blocks."""
    vq, vd = _floored(vq), _floored(vd)
    out = np.empty((len(mq), md.shape[-2]), dtype=np.float64)
    for rows, cols in tiles(*out.shape, mq.shape[-1]):
        block = (None, cols) if md.ndim == 2 else (rows, cols)
        s = vq[rows, None, :] + vd[block]
        diff = mq[rows, None, :] - md[block]
        np.square(diff, out=diff)
        diff /= s
        diff *= a
        np.log(s, out=s)
        diff += s
        out[rows, cols] = diff.sum(axis=2)
    return out


def _mls(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """-½ Σ [(μq-μd)²/(σq²+σd²) + log(σq²+σd²)]."""
    return -0.5 * _pairwise_sum(mq, vq, md, vd, 1.0)


def _bhattacharyya(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
    """-D_B = -(Σ [(μq-μd)²/4s + ½ log(s/2)] - ¼ Σ log σq² - ¼ Σ log σd²), s = σq² + σd²."""
    log_vq = _row_sum(np.log(_floored(vq)))
    log_vd = _row_sum(np.log(_floored(vd)))
    d_b = (
        0.5 * _pairwise_sum(mq, vq, md, vd, 0.5)
        - 0.5 * mq.shape[-1] * np.log(2.0)
        - 0.25 * (log_vq[:, None] + log_vd)
    )
    return -np.maximum(d_b, 0.0)


def _uec(beta: float) -> _Formula:
    """μq·μd / √(1 + (π/8)·β·Var(μq·μd)): the dot product discounted by its own variance."""

    def formula(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
        variance = _dot_variance(mq, vq, md, vd)
        return _dot(mq, vq, md, vd) / np.sqrt(1.0 + (np.pi / 8.0) * beta * variance)

    return formula


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows (last axis) divided by their L2 norm, at least _NORM_EPS."""
    return x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), _NORM_EPS)


def _uec_mteb(beta: float) -> _Formula:
    """cos(μq, μd) / (1 + (β/π)·Var(μq·μd)), the variance of the raw (unnormalised) means' dot.

    As the published UEC's MTEB script scores: its abs() of the variance and its 1e-20 added
    to the denominator change nothing here (the variance is >= 0, the denominator >= 1).
    """

    def formula(mq: np.ndarray, vq: np.ndarray, md: np.ndarray, vd: np.ndarray) -> np.ndarray:
        variance = _dot_variance(mq, vq, md, vd)
        return _contract(_unit(mq), _unit(md)) / (1.0 + (beta / np.pi) * variance)

    return formula


#: Scores with a variance penalty scaled by beta.
_PENALISED: dict[Score, Callable[[float], _Formula]] = {Score.UEC: _uec, Score.UEC_MTEB: _uec_mteb}

_SCORES: dict[Score, _Formula] = {
    Score.DOT: _dot,
    Score.CSD: _csd,
    Score.W2: _w2,
    Score.KL: _kl,
    Score.MLS: _mls,
    Score.BHATTACHARYYA: _bhattacharyya,
}


def _evaluate(
    formula: _Formula,
    q: Gaussian,
    d: Gaussian,
    candidates: np.ndarray | None,
    reads_var: bool = True,
    outputs: int | None = None,
) -> np.ndarray:
    """A formula against every document, or gathered per query in memory-bounded blocks.

    A formula that `reads_var` not (dot) gets zero-size variances: gathering and converting
    them would cost as much as the formula itself. One that gives several numbers per pair
    (`outputs`, stacked on a last axis) shares one gather of the rows between them.
    """
    _validate_pair(q, d)
    unread = np.zeros((0, 0))

    def variances(var: np.ndarray) -> np.ndarray:
        return var.astype(np.float64) if reads_var else unread

    mq, vq = q.mean.astype(np.float64), variances(q.var)
    if candidates is None:
        return formula(mq, vq, d.mean.astype(np.float64), variances(d.var))
    cand = _validate_candidates(candidates, len(q), len(d))
    out = np.empty(cand.shape + (() if outputs is None else (outputs,)), dtype=np.float64)
    step = max(1, _GATHER_BYTES // (8 * _BLOCK_TEMPORARIES * max(1, cand.shape[1] * q.dim)))
    for start in range(0, len(q), step):
        rows = slice(start, start + step)
        md = d.mean[cand[rows]].astype(np.float64)
        vd = d.var[cand[rows]].astype(np.float64) if reads_var else unread
        out[rows] = formula(mq[rows], vq[rows] if reads_var else unread, md, vd)
    return out


def dot_variance(q: Gaussian, d: Gaussian, candidates: np.ndarray | None = None) -> np.ndarray:
    """Variance of each query's dot product with every document, or with its (nq, p) candidates."""
    return _evaluate(_dot_variance, q, d, candidates)


def dot_moments(
    q: Gaussian, d: Gaussian, candidates: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each dot product and its variance (what every hit reports), from one gather of the rows:
    the same numbers as `score_matrix(..., DOT)` and `dot_variance`."""
    both = _evaluate(_dot_moments, q, d, candidates, outputs=2)
    return both[..., 0], both[..., 1]


def score_matrix(
    q: Gaussian,
    d: Gaussian,
    score: Score | str = Score.UEC,
    beta: float = 1.0,
    candidates: np.ndarray | None = None,
) -> np.ndarray:
    """Float64 similarities, higher = more similar; beta scales uec's and uec-mteb's penalty.

    (nq, nd) against every document, or (nq, p) against each query's own candidate rows of d
    when `candidates` (an (nq, p) integer array) is given: the same numbers, without scoring
    the documents a query does not need.
    """
    kind = parse_score(score)
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.number)):
        raise TypeError(f"beta must be a number, got {type(beta).__name__}: {beta!r}")
    if not (np.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    formula = _PENALISED[kind](beta) if kind in _PENALISED else _SCORES[kind]
    return _evaluate(formula, q, d, candidates, reads_var=kind is not Score.DOT)


def _aligned(a: Gaussian, b: Gaussian) -> np.ndarray:
    """Candidates pairing row i of a with row i of b, after checking the rows align."""
    _validate_pair(a, b)
    if len(a) != len(b):
        raise ValueError(f"paired scores need aligned rows, got {len(a)} and {len(b)}")
    return np.arange(len(a))[:, None]


def score_pairs(
    a: Gaussian, b: Gaussian, score: Score | str = Score.UEC, beta: float = 1.0
) -> np.ndarray:
    """Float64 (n,) similarity of each row of a with the same row of b (STS-style pairs)."""
    return score_matrix(a, b, score, beta, candidates=_aligned(a, b))[:, 0]


def pair_variance(a: Gaussian, b: Gaussian) -> np.ndarray:
    """Float64 (n,) variance of each row-aligned dot product: the std reported per STS pair."""
    return dot_variance(a, b, candidates=_aligned(a, b))[:, 0]
