"""Score matrices between a batch of query Gaussians and a batch of document Gaussians."""

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

#: Memory bound for the (queries, documents, dim) temporaries of mls and bhattacharyya.
_BLOCK_BYTES = 256 * 2**20
#: float64 arrays of one block alive at once in `_pairwise_sum`.
_BLOCK_TEMPORARIES = 2


def _validate_pair(q: Gaussian, d: Gaussian) -> None:
    """Reject anything but two Gaussians of one dimension, naming both dimensions."""
    for name, g in (("query", q), ("document", d)):
        if not isinstance(g, Gaussian):
            raise TypeError(f"{name} must be a Gaussian, got {type(g).__name__}")
    if q.dim != d.dim:
        raise ValueError(
            f"query and document Gaussians must have the same dimension, got {q.dim} and {d.dim}"
        )


def _moments(g: Gaussian) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance in float64, so matmul expansions do not cancel away float32 digits."""
    return g.mean.astype(np.float64), g.var.astype(np.float64)


def floored_var(g: Gaussian) -> np.ndarray:
    """Variance in float64 raised to VAR_FLOOR, so logs and divisions stay finite."""
    return np.maximum(g.var.astype(np.float64), VAR_FLOOR)


def _sq_distance(mq: np.ndarray, md: np.ndarray) -> np.ndarray:
    """Pairwise squared Euclidean distances via |a|² + |b|² - 2a·b, clamped at 0."""
    sq = np.einsum("nd,nd->n", mq, mq)[:, None] + np.einsum("nd,nd->n", md, md)[None, :]
    return np.maximum(sq - 2.0 * (mq @ md.T), 0.0)


def dot_variance(q: Gaussian, d: Gaussian) -> np.ndarray:
    """Variance of μ·ν for independent q and d: Σ μq²σd² + σq²μd² + σq²σd², as two matmuls."""
    _validate_pair(q, d)
    mq, vq = _moments(q)
    md, vd = _moments(d)
    return (mq * mq) @ vd.T + vq @ (md * md + vd).T


def score_std(q: Gaussian, d: Gaussian) -> np.ndarray:
    """Standard deviation of each dot-product score, reported beside every hit."""
    return np.sqrt(dot_variance(q, d))


def _dot(q: Gaussian, d: Gaussian) -> np.ndarray:
    """μq·μd."""
    return _moments(q)[0] @ _moments(d)[0].T


def _csd(q: Gaussian, d: Gaussian) -> np.ndarray:
    """-(|μq-μd|² + Σσq² + Σσd²)."""
    mq, vq = _moments(q)
    md, vd = _moments(d)
    return -(_sq_distance(mq, md) + vq.sum(axis=1)[:, None] + vd.sum(axis=1)[None, :])


def _w2(q: Gaussian, d: Gaussian) -> np.ndarray:
    """-(|μq-μd|² + |σq-σd|²)."""
    mq, vq = _moments(q)
    md, vd = _moments(d)
    return -(_sq_distance(mq, md) + _sq_distance(np.sqrt(vq), np.sqrt(vd)))


def _kl(q: Gaussian, d: Gaussian) -> np.ndarray:
    """-KL(q||d) expanded into matmuls against 1/σd² and μd/σd²."""
    mq, md = _moments(q)[0], _moments(d)[0]
    vq, vd = floored_var(q), floored_var(d)
    inv_vd = 1.0 / vd
    doc_const = (np.log(vd) + md * md * inv_vd).sum(axis=1)
    query_const = q.dim + np.log(vq).sum(axis=1)
    two_kl = (
        (vq + mq * mq) @ inv_vd.T
        - 2.0 * (mq @ (md * inv_vd).T)
        + doc_const[None, :]
        - query_const[:, None]
    )
    return -0.5 * np.maximum(two_kl, 0.0)


def _blocks(nq: int, nd: int, dim: int) -> Iterator[tuple[slice, slice]]:
    """Tile (queries, documents) so each (bq, bd, dim) float64 temporary fits the budget."""
    elems = max(1, _BLOCK_BYTES // (8 * _BLOCK_TEMPORARIES))
    bd = max(1, min(nd, elems // max(dim, 1)))
    bq = max(1, elems // (bd * max(dim, 1)))
    for i in range(0, nq, bq):
        for j in range(0, nd, bd):
            yield slice(i, i + bq), slice(j, j + bd)


def _pairwise_sum(q: Gaussian, d: Gaussian, a: float) -> np.ndarray:
    """Σ_k [a·(μq-μd)²/s + log s] with s = σq² + σd² (floored), in memory-bounded blocks."""
    mq, md = _moments(q)[0], _moments(d)[0]
    vq, vd = floored_var(q), floored_var(d)
    out = np.empty((len(q), len(d)), dtype=np.float64)
    for rows, cols in _blocks(len(q), len(d), q.dim):
        s = vq[rows, None, :] + vd[None, cols, :]
        diff = mq[rows, None, :] - md[None, cols, :]
        np.square(diff, out=diff)
        diff /= s
        diff *= a
        np.log(s, out=s)
        diff += s
        out[rows, cols] = diff.sum(axis=2)
    return out


def _mls(q: Gaussian, d: Gaussian) -> np.ndarray:
    """-½ Σ [(μq-μd)²/(σq²+σd²) + log(σq²+σd²)]."""
    return -0.5 * _pairwise_sum(q, d, 1.0)


def _bhattacharyya(q: Gaussian, d: Gaussian) -> np.ndarray:
    """-D_B = -(Σ [(μq-μd)²/4s + ½ log(s/2)] - ¼ Σ log σq² - ¼ Σ log σd²), s = σq² + σd²."""
    log_vq = np.log(floored_var(q)).sum(axis=1)
    log_vd = np.log(floored_var(d)).sum(axis=1)
    d_b = (
        0.5 * _pairwise_sum(q, d, 0.5)
        - 0.5 * q.dim * np.log(2.0)
        - 0.25 * (log_vq[:, None] + log_vd[None, :])
    )
    return -np.maximum(d_b, 0.0)


_SCORES: dict[Score, Callable[[Gaussian, Gaussian], np.ndarray]] = {
    Score.DOT: _dot,
    Score.CSD: _csd,
    Score.W2: _w2,
    Score.KL: _kl,
    Score.MLS: _mls,
    Score.BHATTACHARYYA: _bhattacharyya,
}


def score_matrix(
    q: Gaussian, d: Gaussian, score: Score | str = Score.UEC, beta: float = 1.0
) -> np.ndarray:
    """Float64 (nq, nd) similarities, higher = more similar; beta scales uec's variance penalty."""
    kind = parse_score(score)
    _validate_pair(q, d)
    if not (np.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    if kind is Score.UEC:
        return _dot(q, d) / np.sqrt(1.0 + (np.pi / 8.0) * beta * dot_variance(q, d))
    return _SCORES[kind](q, d)


def score_pairs(
    a: Gaussian, b: Gaussian, score: Score | str = Score.UEC, beta: float = 1.0, chunk: int = 256
) -> np.ndarray:
    """Float64 (n,) similarity of each row of a with the same row of b (STS-style pairs)."""
    _validate_pair(a, b)
    if len(a) != len(b):
        raise ValueError(f"score_pairs needs aligned rows, got {len(a)} and {len(b)}")
    out = np.empty(len(a), dtype=np.float64)
    for start in range(0, len(a), chunk):
        rows = slice(start, start + chunk)
        out[rows] = np.diagonal(score_matrix(a[rows], b[rows], score, beta))
    return out


def pair_variance(a: Gaussian, b: Gaussian) -> np.ndarray:
    """Float64 (n,) variance of each row-aligned dot product: the std reported per STS pair."""
    _validate_pair(a, b)
    ma, va = _moments(a)
    mb, vb = _moments(b)
    return np.einsum("nd,nd->n", ma * ma, vb) + np.einsum("nd,nd->n", va, mb * mb + vb)
