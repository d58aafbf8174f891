"""Weights a collection chooses for itself: each member's agreement with the others, no labels.

Which model is best differs from domain to domain, and a collection has no labels. It has
something as telling: K members that each rank its texts' neighbours. A member whose
neighbour lists agree with what the other members say together is, on this corpus, closer to
what they share; one that goes its own way is more likely wrong. Per member k, on a seeded
sample of the collection: a_k = mean over texts of |kNN_k ∩ kNN_{-k}| / n_neighbours, where
kNN_{-k} ranks by the mean of the other members' z-scored cosines (a leave-one-out consensus,
so no member votes for itself). The collection's weights are then

    w_k = softmax_k(log p_k + γ · a_k)

with p the pipeline's prior (γ = 0 keeps it) and γ tuned on dev data like any fusion setting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probembed.fusion.combine import Fused
from probembed.fusion.weights import normalized_prior
from probembed.gaussian import Gaussian, squared_norms

#: Texts the agreement is measured on: the K (n, n) cosine tables stay ~40 MB in float64.
SAMPLE = 1000
NEIGHBOURS = 10
SEED = 0
#: A text's score against itself: finite (sums and differences of tables stay exact) and
#: far below any standardised cosine, so it is never its own neighbour.
_SELF = -1e9
#: Floor on a weight read back from a fused row, so a zero-weight block divides safely.
_TINY = 1e-30


def _unit_means(parts: Sequence[Gaussian], rows: np.ndarray) -> list[np.ndarray]:
    """Float64 unit-norm means of the sampled rows, one (n, d_k) array per member."""
    out = []
    for part in parts:
        mean = part.mean[rows].astype(np.float64)
        out.append(mean / np.sqrt(squared_norms(mean)))
    return out


def _z_scored_cosines(mean: np.ndarray) -> np.ndarray:
    """(n, n) cosines standardised over the off-diagonal pairs; the diagonal never a neighbour.

    Members' cosines live on different scales (a static model's sit higher), so the
    consensus averages standardised ones.
    """
    cos = mean @ mean.T
    off = ~np.eye(len(cos), dtype=bool)
    cos = (cos - cos[off].mean()) / max(float(cos[off].std()), 1e-12)
    np.fill_diagonal(cos, _SELF)
    return cos


def _neighbours(table: np.ndarray, n: int) -> np.ndarray:
    """(rows, n) column indices of each row's n highest entries (order within is irrelevant)."""
    return np.argpartition(-table, n - 1, axis=1)[:, :n]


def sampled(rows: int, sample: int = SAMPLE, seed: int = SEED) -> np.ndarray:
    """The sorted rows agreement compares: a seeded sample, so a caller can read only those."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(rows, min(sample, rows), replace=False))


def agreement(
    parts: Sequence[Gaussian], sample: int = SAMPLE, neighbours: int = NEIGHBOURS, seed: int = SEED
) -> np.ndarray:
    """(K,) share of each member's nearest neighbours that the other members' consensus shares."""
    if len(parts) < 2:
        raise ValueError(f"agreement needs at least 2 members, got {len(parts)}")
    rows = len(parts[0])
    if any(len(p) != rows for p in parts):
        raise ValueError("every member must embed the same texts")
    if rows <= neighbours:
        raise ValueError(
            f"agreement needs more than {neighbours} texts to compare neighbour lists, got {rows}"
        )
    picked = sampled(rows, sample, seed)
    tables = [_z_scored_cosines(m) for m in _unit_means(parts, picked)]
    total = np.sum(tables, axis=0)
    out = np.empty(len(tables))
    for k, own in enumerate(tables):
        mine = _neighbours(own, neighbours)
        theirs = _neighbours((total - own) / (len(tables) - 1), neighbours)
        shared = (mine[:, :, None] == theirs[:, None, :]).any(axis=2).sum(axis=1)
        out[k] = shared.mean() / neighbours
    return out


def adapted_weights(
    agreements: np.ndarray, prior: Sequence[float] | None, gamma: float
) -> np.ndarray:
    """(K,) softmax(log p + γ·a): the prior tilted towards the members that agree most."""
    a = np.asarray(agreements, dtype=np.float64)
    if a.ndim != 1 or not np.all(np.isfinite(a)):
        raise ValueError(f"agreements must be a finite (K,) vector, got {a!r}")
    if not (np.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    p = normalized_prior(None if prior is None else np.asarray(prior), len(a))
    with np.errstate(divide="ignore"):
        logits = np.log(p) + gamma * a
    logits -= logits.max()
    w = np.exp(logits)
    return w / w.sum()


def members_of(fused: Fused, dims: Sequence[int]) -> list[Gaussian]:
    """Each member's unit-norm Gaussian, read back from concat-fused rows (block / √π_k)."""
    edges = np.cumsum([0, *dims])
    if edges[-1] != fused.gaussian.dim or len(dims) != len(fused.models):
        raise ValueError(
            f"member dims {list(dims)} do not lay out {len(fused.models)} members over "
            f"{fused.gaussian.dim} concat-fused dimensions"
        )
    weights = np.asarray(fused.weights, dtype=np.float64)
    parts = []
    for k in range(len(dims)):
        cols = slice(int(edges[k]), int(edges[k + 1]))
        w = np.maximum(weights[:, k, None], _TINY)
        mean = fused.gaussian.mean[:, cols].astype(np.float64) / np.sqrt(w)
        parts.append(Gaussian(mean, fused.gaussian.var[:, cols].astype(np.float64) / w))
    return parts


def retilt(fused: Fused, dims: Sequence[int], tilt: np.ndarray) -> Fused:
    """Concat-fused rows with every text's weights multiplied by `tilt` and renormalised.

    π'_k(x) ∝ π_k(x)·t_k is exactly softmax(-log u/T + log(p·t)): the fusion a prior p·t would
    have given, so stored rows adapt without re-encoding (block k scales by √(π'_k/π_k)).
    """
    new, ratio = tilted_weights(fused.weights, tilt)
    mean = scaled_blocks(fused.gaussian.mean, np.sqrt(ratio), dims)
    var = scaled_blocks(fused.gaussian.var, ratio, dims)
    return Fused(Gaussian(mean, var), new, fused.models)


def tilted_weights(weights: np.ndarray, tilt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per text, the tilted weights π' ∝ π·t (float64) and each member's π'/π (0 where π is)."""
    weights = np.asarray(weights, dtype=np.float64)
    new = weights * np.asarray(tilt, dtype=np.float64)
    new /= new.sum(axis=1, keepdims=True)
    return new, np.divide(new, weights, out=np.zeros_like(new), where=weights > 0)


def scaled_blocks(values: np.ndarray, factors: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """Rows in float64 with member k's block of columns times that row's factors[:, k]."""
    return values.astype(np.float64) * np.repeat(factors, np.asarray(dims), axis=1)
