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
    """The k highest scores and their positions, best first; ties go to the lower position."""
    order = np.lexsort((positions, -scores))[:k]
    return positions[order], scores[order]


def with_moments(
    query: Gaussian, docs: Gaussian, positions: np.ndarray, scores: np.ndarray
) -> Ranked:
    """Attach each hit's dot product and its variance (the std reported beside every score)."""
    hits = docs[positions]
    dots = score_matrix(query, hits, Score.DOT)[0]
    return Ranked(positions, scores, dots, dot_variance(query, hits)[0])


def scan(
    queries: Sequence[Gaussian],
    docs: Gaussian,
    rows: np.ndarray,
    k: int,
    score: Score,
    beta: float,
) -> list[Ranked]:
    """Exact top-k of every query over the given rows, scoring blocks of rows at a time."""
    batch = Gaussian.concat(queries)
    keep_pos = np.empty((len(batch), 0), dtype=np.int64)
    keep = np.empty((len(batch), 0))
    for start in range(0, len(rows), SCAN_BLOCK):
        block = rows[start : start + SCAN_BLOCK]
        scores = np.hstack([keep, score_matrix(batch, docs[block], score, beta)])
        positions = np.hstack([keep_pos, np.broadcast_to(block, (len(queries), len(block)))])
        if scores.shape[1] > k:
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            scores = np.take_along_axis(scores, top, axis=1)
            positions = np.take_along_axis(positions, top, axis=1)
        keep, keep_pos = scores, positions
    return [
        with_moments(q, docs, *best(p, s, k))
        for q, p, s in zip(queries, keep_pos, keep, strict=True)
    ]


def rescore(
    query: Gaussian, docs: Gaussian, candidates: np.ndarray, k: int, score: Score, beta: float
) -> Ranked:
    """Exact scores of one query's candidate rows (-1 = none), k best kept."""
    candidates = candidates[candidates >= 0]
    pool = docs[candidates]
    scores = score_matrix(query, pool, score, beta)[0]
    order = np.lexsort((candidates, -scores))[:k]
    dots = scores if score is Score.DOT else score_matrix(query, pool, Score.DOT)[0]
    variances = dot_variance(query, pool)[0]
    return Ranked(candidates[order], scores[order], dots[order], variances[order])


def reciprocal_rank_fusion(rankings: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions ordered by Σ 1/(RRF_K + rank) over the rankings, with those fused scores."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, p in enumerate(ranking, start=1):
            fused[int(p)] = fused.get(int(p), 0.0) + 1.0 / (RRF_K + rank)
    order = sorted(fused, key=lambda p: (-fused[p], p))[:k]
    return np.array(order, dtype=np.int64), np.array([fused[p] for p in order])
