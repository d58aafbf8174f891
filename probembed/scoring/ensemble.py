"""What the members of a concat-fused ensemble say one by one: their cosines and their spread.

A concat-fused mean holds block k = √π_k(x)·μ_k(x) with μ_k unit-norm, so each member's own
cosine is recoverable from the stored fused means and weights alone:
cos_k = block_k(q)·block_k(d) / √(π_k(q)·π_k(d)). The fused dot product is
Σ_k ω_k cos_k with ω_k = √(π_k(q)·π_k(d)); read as a mixture over members (weights ω/Σω), its
variance by the law of total variance is a within-member part plus the spread of their cosines,
(Σω)²·Σ_k (ω_k/Σω)(cos_k − c̄)²: disagreement, which only an ensemble sees. `hit_variance`
adds this spread to the fused dot variance (members as an independent weighted sum, each own
variance weighted about ω_k²), not to the mixture's own within term (Σω)·Σ_k ω_k·v_k: see
docs/architecture.md, "Disagreement". Search, calibration training, the evaluation harness and
`similarity` all report that sum.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

#: Weights below this carry no member: its cosine is NaN and its share 0.
_WEIGHT_FLOOR = 1e-12


def _blocks(dims: Sequence[int], total: int) -> list[slice]:
    """Column slices of the members' blocks, checked against the fused dimension."""
    if not dims or any(int(d) <= 0 for d in dims):
        raise ValueError(f"member dims must be positive integers, got {list(dims)}")
    if sum(dims) != total:
        raise ValueError(f"member dims {list(dims)} sum to {sum(dims)}, not the fused {total}")
    edges = np.cumsum([0, *dims])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def _check_weights(weights: np.ndarray, rows: int, k: int, what: str) -> np.ndarray:
    """Float64 (rows, K) weights, or a ValueError naming which and why."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (rows, k):
        raise ValueError(f"{what} weights must have shape ({rows}, {k}), got {w.shape}")
    if not np.all(np.isfinite(w)) or (w.size and w.min() < 0):
        raise ValueError(f"{what} weights must be finite and >= 0")
    return w


def member_cosines(
    q_mean: np.ndarray,
    q_weights: np.ndarray,
    d_mean: np.ndarray,
    d_weights: np.ndarray,
    dims: Sequence[int],
    candidates: np.ndarray,
) -> np.ndarray:
    """Float64 (nq, p, K): each member's cosine of each query with its (nq, p) candidate rows.

    NaN where a member has weight 0 on either side: its block holds no direction to compare.
    """
    q_mean, d_mean = np.asarray(q_mean), np.asarray(d_mean)
    blocks = _blocks(dims, q_mean.shape[-1])
    if d_mean.shape[-1] != q_mean.shape[-1]:
        raise ValueError(
            f"query and document dims differ: {q_mean.shape[-1]} and {d_mean.shape[-1]}"
        )
    wq = _check_weights(q_weights, len(q_mean), len(blocks), "query")
    wd = _check_weights(d_weights, len(d_mean), len(blocks), "document")
    cand = np.asarray(candidates)
    if cand.ndim != 2 or cand.shape[0] != len(q_mean):
        raise ValueError(f"candidates must be an ({len(q_mean)}, p) array, got {cand.shape}")
    out = np.empty((*cand.shape, len(blocks)), dtype=np.float64)
    for k, cols in enumerate(blocks):
        mq = q_mean[:, cols].astype(np.float64)
        md = d_mean[cand, cols].astype(np.float64)
        scale = np.sqrt(wq[:, k, None] * wd[cand, k])
        raw = np.einsum("qd,qpd->qp", mq, md)
        out[..., k] = np.divide(
            raw, scale, out=np.full_like(raw, np.nan), where=scale > _WEIGHT_FLOOR
        )
    return out


def pair_weights(
    q_weights: np.ndarray, d_weights: np.ndarray, candidates: np.ndarray
) -> np.ndarray:
    """(nq, p, K) ω_k = √(π_k(q)·π_k(d)): what each member contributes to the fused dot."""
    wq = np.asarray(q_weights, dtype=np.float64)
    wd = np.asarray(d_weights, dtype=np.float64)
    return np.sqrt(wq[:, None, :] * wd[np.asarray(candidates)])


def disagreement_variance(cosines: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """(Σω)²·Σ_k (ω_k/Σω)(cos_k − c̄)²: the between-member part of the fused dot's variance.

    A member whose cosine is NaN (ω at most member_cosines' floor: a weight of 1e-30 is as
    good as 0) counts for nothing, in the sums and in the shares.
    """
    omega = np.where(np.isnan(cosines), 0.0, omega)
    total = omega.sum(axis=-1, keepdims=True)
    share = np.divide(omega, total, out=np.zeros_like(omega), where=total > _WEIGHT_FLOOR)
    cosines = np.where(share > 0, cosines, 0.0)
    mean = (share * cosines).sum(axis=-1, keepdims=True)
    spread = (share * (cosines - mean) ** 2).sum(axis=-1)
    return total[..., 0] ** 2 * spread


def carries_disagreement(dims: Sequence[int]) -> bool:
    """Whether rows laid out in these member blocks have a between-member variance: they hold
    a block per member (`dims` not empty) and two members or more (one agrees with itself)."""
    return len(dims) >= 2


def hit_variance(
    own: np.ndarray,
    q_mean: np.ndarray,
    q_weights: np.ndarray,
    d_mean: np.ndarray,
    d_weights: np.ndarray,
    dims: Sequence[int],
    candidates: np.ndarray,
    cosines: np.ndarray | None = None,
) -> np.ndarray:
    """(nq, p) the variance every hit and pair reports, so they all report one number: `own`,
    the dot's variance under the members' own (`dot_variance` of the same candidates), plus
    the members' disagreement where the rows carry one (law of total variance).

    `cosines`: the `member_cosines` of these pairs where the caller has them already (search
    reads them for its calibrator too), so they are not computed twice.
    """
    if not carries_disagreement(dims):
        return own
    if cosines is None:
        cosines = member_cosines(q_mean, q_weights, d_mean, d_weights, dims, candidates)
    return own + disagreement_variance(cosines, pair_weights(q_weights, d_weights, candidates))
