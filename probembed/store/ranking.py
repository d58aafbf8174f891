"""Turning candidate rows into ranked hits: exact scans, exact rescoring, rank fusion.

Every score here comes from `probembed.scoring.score_matrix`, so a hit's score is exactly the
score a brute-force scan gives it, whichever way its candidates were found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from probembed.gaussian import Gaussian
from probembed.scoring import Score, dot_variance, score_matrix

#: Reciprocal-rank-fusion constant (Cormack, Clarke and Büttcher 2009).
RRF_K = 60
#: Documents per block of the exact scan, to bound the score-matrix temporaries.
SCAN_BLOCK = 4096


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


def with_moments(
    queries: Gaussian, docs: Gaussian, positions: np.ndarray, scores: np.ndarray
) -> list[Ranked]:
    """Attach each hit's dot product and its variance (the std reported beside every score).

    `positions` is (nq, k) with -1 where a query has fewer hits; those are dropped.
    """
    found = positions >= 0
    rows = np.where(found, positions, 0)
    dots = score_matrix(queries, docs, Score.DOT, candidates=rows)
    variances = dot_variance(queries, docs, candidates=rows)
    return [
        Ranked(p[f], s[f], d[f], v[f])
        for p, s, d, v, f in zip(positions, scores, dots, variances, found, strict=True)
    ]


def scan(
    queries: Gaussian, docs: Gaussian, rows: np.ndarray, k: int, score: Score, beta: float
) -> list[Ranked]:
    """Exact top-k of every query over the given rows, scoring blocks of rows at a time."""
    keep_pos = np.empty((len(queries), 0), dtype=np.int64)
    keep = np.empty((len(queries), 0))
    for start in range(0, len(rows), SCAN_BLOCK):
        block = rows[start : start + SCAN_BLOCK]
        scores = np.hstack([keep, score_matrix(queries, docs[block], score, beta)])
        positions = np.hstack([keep_pos, np.broadcast_to(block, (len(queries), len(block)))])
        if scores.shape[1] > k:
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            scores = np.take_along_axis(scores, top, axis=1)
            positions = np.take_along_axis(positions, top, axis=1)
        keep, keep_pos = scores, positions
    return with_moments(queries, docs, *best(keep_pos, keep, k))


def rescore(
    queries: Gaussian, docs: Gaussian, candidates: np.ndarray, k: int, score: Score, beta: float
) -> list[Ranked]:
    """Exact scores of each query's (nq, p) candidate rows (-1 = none), k best kept."""
    found = candidates >= 0
    rows = np.where(found, candidates, 0)
    scores = np.where(found, score_matrix(queries, docs, score, beta, candidates=rows), -np.inf)
    positions, scores = best(np.where(found, candidates, -1), scores, k)
    return with_moments(queries, docs, positions, scores)


def reciprocal_rank_fusion(rankings: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions ordered by Σ 1/(RRF_K + rank) over the rankings, with those fused scores."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, p in enumerate(ranking, start=1):
            fused[int(p)] = fused.get(int(p), 0.0) + 1.0 / (RRF_K + rank)
    order = sorted(fused, key=lambda p: (-fused[p], p))[:k]
    return np.array(order, dtype=np.int64), np.array([fused[p] for p in order])
