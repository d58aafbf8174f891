"""Per-hit features of a ranked list, computed from what a search already has (numpy only).

Scores are dot products: the score whose variance is known, in the same units whatever
similarity ranked the hits, so one calibrator serves every score a collection is searched with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probembed.scoring import ensemble, outrank_probability

#: Feature names, in column order. `disagreement` is present only for calibrators that use it.
BASE_FEATURES = ("dot", "std", "log_rank", "gap_next", "gap_top", "query_margin")
DISAGREEMENT = "disagreement"


def hit_features(
    dots: np.ndarray,
    variances: np.ndarray,
    k: int,
    disagreement: np.ndarray | None = None,
) -> np.ndarray:
    """(..., min(k, n), F) float64 features of the first k of n ≥ k ranked hits per query.

    `dots` and `variances` are (n,) for one query or (..., n) for a batch of queries ranked
    to the same depth: a search computes every query's features in one pass. Ranking one hit
    more than is returned gives the k-th its gap to the next; the last item of a whole
    collection has no rival below and gets a gap of 0, and a lone hit a NaN margin (which
    the model reads as its training mean).
    """
    dots = np.asarray(dots, dtype=np.float64)
    variances = np.asarray(variances, dtype=np.float64)
    if dots.ndim < 1 or variances.shape != dots.shape:
        raise ValueError(
            f"dots and variances must be (..., n) of one shape, got {dots.shape}, {variances.shape}"
        )
    n = min(k, dots.shape[-1])
    width = len(BASE_FEATURES) + (disagreement is not None)
    if n == 0:
        return np.empty((*dots.shape[:-1], 0, width))
    following = np.concatenate([dots[..., 1:], dots[..., -1:]], axis=-1)
    if dots.shape[-1] == 1:  # no rival (a filter kept one row): unknown, read as average;
        margin = np.full(dots.shape[:-1], np.nan)  # 1.0 read as certainty, never trained on
    else:
        margin = outrank_probability(
            dots[..., 0], dots[..., 1], variances[..., 0], variances[..., 1]
        )
    top = dots[..., :n]
    columns = [
        top,
        np.sqrt(variances[..., :n]),
        np.broadcast_to(np.log(np.arange(1, n + 1, dtype=np.float64)), top.shape),
        (dots - following)[..., :n],
        dots[..., :1] - top,
        np.broadcast_to(np.asarray(margin, dtype=np.float64)[..., None], top.shape),
    ]
    if disagreement is not None:
        columns.append(np.asarray(disagreement, dtype=np.float64)[..., :n])
    return np.stack(columns, axis=-1)


def member_cosines(
    query_mean: np.ndarray,
    query_weights: np.ndarray,
    doc_means: np.ndarray,
    doc_weights: np.ndarray,
    dims: Sequence[int],
) -> np.ndarray:
    """(p, K) each member's cosine with one query, from concat-fused means; NaN at weight 0."""
    rows = np.arange(len(doc_means))[None, :]
    return ensemble.member_cosines(
        np.asarray(query_mean)[None, :],
        np.asarray(query_weights)[None, :],
        doc_means,
        doc_weights,
        dims,
        rows,
    )[0]


def disagreement(cosines: np.ndarray) -> np.ndarray:
    """(..., n) per hit the spread (std) of the member cosines it has, from (..., n, K); 0 with
    fewer than two members."""
    have = ~np.isnan(cosines)
    count = have.sum(axis=-1)
    filled = np.where(have, cosines, 0.0)
    mean = filled.sum(axis=-1) / np.maximum(count, 1)
    spread = np.where(have, (filled - mean[..., None]) ** 2, 0.0).sum(axis=-1)
    return np.where(count > 1, np.sqrt(spread / np.maximum(count, 1)), 0.0)
