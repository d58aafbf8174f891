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
from numpy.typing import ArrayLike

from probembed.fusion.combine import Fused
from probembed.fusion.weights import normalized_prior
from probembed.gaussian import Gaussian, unit_rows

#: Texts the agreement is measured on: the K (n, n) cosine tables stay ~40 MB in float64.
SAMPLE = 1000
NEIGHBOURS = 10
#: Neighbour-list lengths a text's disagreement averages over, from near duplicates to a
#: topic: which scale tells depends on the task, and the average was the best choice on the
#: tuning splits (`benchmarks/error_signals.py`).
SCALES = (5, 10, 20, 50, 100, 200)
SEED = 0
#: A text's score against itself: finite (sums and differences of tables stay exact) and
#: far below any standardised cosine, so it is never its own neighbour.
_SELF = -1e9
#: Floor on a weight read back from a fused row, so a zero-weight block divides safely.
_TINY = 1e-30


def _z_scored(cos: np.ndarray, self_table: bool) -> np.ndarray:
    """Cosines standardised over the pairs of two different texts; a text never its own
    neighbour.

    Members' cosines live on different scales (a static model's sit higher), so the
    consensus averages standardised ones.
    """
    if not self_table:
        return (cos - cos.mean()) / max(float(cos.std()), 1e-12)
    off = ~np.eye(len(cos), dtype=bool)
    cos = (cos - cos[off].mean()) / max(float(cos[off].std()), 1e-12)
    np.fill_diagonal(cos, _SELF)
    return cos


def _neighbours(table: np.ndarray, n: int) -> np.ndarray:
    """(rows, n) column indices of each row's n highest entries (order within is irrelevant)."""
    return np.argpartition(-table, n - 1, axis=1)[:, :n]


def _shared(tables: Sequence[np.ndarray], n: int) -> np.ndarray:
    """(rows, K) how many of member k's n nearest columns the others' consensus also lists.

    The consensus sums the others' tables, not the total less its own: with two members each
    is then exactly the other's table and their agreements are equal, as they must be (the
    subtraction's rounding flipped tied neighbours and made a tilt of noise)."""
    out = np.empty((len(tables[0]), len(tables)))
    for k, own in enumerate(tables):
        mine = np.zeros(own.shape, dtype=bool)
        theirs = np.zeros(own.shape, dtype=bool)
        consensus = np.sum([t for j, t in enumerate(tables) if j != k], axis=0)
        np.put_along_axis(mine, _neighbours(own, n), True, axis=1)
        np.put_along_axis(theirs, _neighbours(consensus, n), True, axis=1)
        out[:, k] = np.count_nonzero(mine & theirs, axis=1)
    return out


def _check_members(parts: Sequence[Gaussian]) -> None:
    """At least two members, each embedding the same texts."""
    if len(parts) < 2:
        raise ValueError(f"member agreement needs at least 2 members, got {len(parts)}")
    if any(len(p) != len(parts[0]) for p in parts):
        raise ValueError("every member must embed the same texts")


def _tables(parts: Sequence[Gaussian], reference: Sequence[Gaussian] | None) -> list[np.ndarray]:
    """Per member, the z-scored cosines of every text to every reference text (or to each
    other, when there is no reference)."""
    _check_members(parts)
    texts = [unit_rows(p.mean)[0] for p in parts]
    if reference is None:
        return [_z_scored(m @ m.T, self_table=True) for m in texts]
    if len(reference) != len(parts) or any(len(r) != len(reference[0]) for r in reference):
        raise ValueError("the reference needs every member's embedding of the same texts")
    refs = [unit_rows(r.mean)[0] for r in reference]
    return [_z_scored(m @ r.T, False) for m, r in zip(texts, refs, strict=True)]


def sampled(rows: int, sample: int = SAMPLE, seed: int = SEED) -> np.ndarray:
    """The sorted rows agreement compares: a seeded sample, so a caller can read only those."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(rows, min(sample, rows), replace=False))


def agreement(
    parts: Sequence[Gaussian], sample: int = SAMPLE, neighbours: int = NEIGHBOURS, seed: int = SEED
) -> np.ndarray:
    """(K,) share of each member's nearest neighbours that the other members' consensus shares."""
    _check_members(parts)
    rows = len(parts[0])
    if rows <= neighbours:
        raise ValueError(
            f"agreement needs more than {neighbours} texts to compare neighbour lists, got {rows}"
        )
    picked = sampled(rows, sample, seed)
    tables = _tables([part[picked] for part in parts], None)
    return _shared(tables, neighbours).mean(axis=0) / neighbours


def neighbour_disagreement(
    parts: Sequence[Gaussian],
    reference: Sequence[Gaussian] | None = None,
    scales: Sequence[int] = SCALES,
) -> np.ndarray:
    """(n, K) per text, the share of member k's nearest reference texts that the other
    members' consensus does not list, averaged over the neighbour-list lengths `scales`.

    The per-text reading of `agreement`, usable as an uncertainty u_k(x) that no single
    model's estimator can see: a member whose neighbours for a text depart from what the others
    say together is more likely wrong about that text. `reference` None compares the texts
    with each other (a collection); else each text is compared with the reference texts (a
    query with a corpus). Costs K (n, m) float64 tables for m reference texts.
    """
    tables = _tables(parts, reference)
    width = tables[0].shape[1] - (reference is None)
    if not scales or any(not 0 < int(s) <= width for s in scales):
        raise ValueError(f"scales must be neighbour counts in 1..{width}, got {list(scales)}")
    return 1.0 - np.mean([_shared(tables, int(s)) / int(s) for s in scales], axis=0)


def adapted_weights(agreements: np.ndarray, prior: ArrayLike | None, gamma: float) -> np.ndarray:
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


def collection_tilt(
    agreements: np.ndarray, prior: ArrayLike | None, k: int, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """(w, t) of K members: a collection's weights w = `adapted_weights` on the prior p
    (uniform for None) and the factors t = w/p (0 where p is) that `retilt` applies."""
    a = np.asarray(agreements)
    if a.shape != (k,):
        raise ValueError(f"agreements must be one per member, shape ({k},), got {a.shape}")
    p = normalized_prior(None if prior is None else np.asarray(prior), k)
    w = adapted_weights(a, p, gamma)
    return w, np.divide(w, p, out=np.zeros_like(w), where=p > 0)


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
