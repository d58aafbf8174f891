"""Per-hit features of a ranked list, computed from what a search already has (numpy only).

Scores are dot products: the score whose variance is known, in the same units whatever
similarity ranked the hits, so one calibrator serves every score a collection is searched with.
"""

from __future__ import annotations

import math

import numpy as np

from probembed.scoring import outrank_probability

#: Feature names, in column order. `disagreement` is present only for calibrators that use it.
BASE_FEATURES = ("dot", "std", "log_rank", "gap_next", "gap_top", "query_margin")
DISAGREEMENT = "disagreement"
#: What a hybrid search's calibrator reads of each hit beyond those: its BM25 rank (log) and
#: its BM25 score over the query's best (0 when BM25 did not find it). BM25's evidence is what
#: moves a hit up a hybrid list, and the dense features alone cannot see it.
BM25_HIT_FEATURES = ("bm25_log_rank", "bm25_relative")
#: BM25 ranks past this read as not found. Training and every hybrid search ask BM25 for
#: `store.ranking.HYBRID_DEPTH` (≥ this) hits or more, so the features are the same to here.
BM25_RANK_CAP = 100


def hit_features(
    dots: np.ndarray,
    variances: np.ndarray,
    k: int,
    disagreement: np.ndarray | None = None,
    bm25: np.ndarray | None = None,
) -> np.ndarray:
    """(..., min(k, n), F) float64 features of the first k of n ≥ k ranked hits per query.

    `dots` and `variances` are (n,) for one query or (..., n) for a batch of queries ranked
    to the same depth: a search computes every query's features in one pass. Ranking one hit
    more than is returned gives the k-th its gap to the next; the last item of a whole
    collection has no rival below and gets a gap of 0, and a lone hit a NaN margin (which
    the model reads as its training mean). `disagreement` ((..., n)) and `bm25`
    ((..., n, 2) `bm25_hit_features`) add their columns, in that order.
    """
    dots = np.asarray(dots, dtype=np.float64)
    variances = np.asarray(variances, dtype=np.float64)
    if dots.ndim < 1 or variances.shape != dots.shape:
        raise ValueError(
            f"dots and variances must be (..., n) of one shape, got {dots.shape}, {variances.shape}"
        )
    n = min(k, dots.shape[-1])
    width = (
        len(BASE_FEATURES)
        + (disagreement is not None)
        + (len(BM25_HIT_FEATURES) if bm25 is not None else 0)
    )
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
    if bm25 is not None:
        found = np.asarray(bm25, dtype=np.float64)[..., :n, :]
        columns += [found[..., j] for j in range(len(BM25_HIT_FEATURES))]
    return np.stack(columns, axis=-1)


def bm25_hit_features(
    positions: np.ndarray, bm25_positions: np.ndarray, bm25_scores: np.ndarray
) -> np.ndarray:
    """(n, 2) `BM25_HIT_FEATURES` of one query's ranked hits (row positions), from BM25's
    hits for it (positions and scores, best first): log of the hit's BM25 rank, capped at
    BM25_RANK_CAP + 1 for a hit BM25 did not find that deep, and its score over BM25's best
    (0 if not found, or if the best score is not positive)."""
    rank: dict[int, int] = {}
    for r, p in enumerate(np.asarray(bm25_positions)[:BM25_RANK_CAP].tolist(), start=1):
        rank.setdefault(int(p), r)  # a row listed twice keeps its better rank
    scores = np.asarray(bm25_scores, dtype=np.float64)
    best = float(scores[0]) if len(scores) else 0.0
    found = [rank.get(int(p)) for p in np.asarray(positions).tolist()]
    log_rank = [math.log(r if r is not None else BM25_RANK_CAP + 1) for r in found]
    relative = [float(scores[r - 1]) / best if r is not None and best > 0 else 0.0 for r in found]
    return np.array([log_rank, relative], dtype=np.float64).T.reshape(len(found), 2)


def cosine_spread(cosines: np.ndarray) -> np.ndarray:
    """(..., n) per hit the spread (std) of the member cosines it has, from (..., n, K); 0 with
    fewer than two members. A calibrator's `DISAGREEMENT` feature; unweighted, unlike the
    between-member variance in a hit's std (`scoring.ensemble.disagreement_variance`)."""
    have = ~np.isnan(cosines)
    count = have.sum(axis=-1)
    filled = np.where(have, cosines, 0.0)
    mean = filled.sum(axis=-1) / np.maximum(count, 1)
    spread = np.where(have, (filled - mean[..., None]) ** 2, 0.0).sum(axis=-1)
    return np.where(count > 1, np.sqrt(spread / np.maximum(count, 1)), 0.0)
