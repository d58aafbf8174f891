"""How similar two sets of texts are, and how sure that is: each pair's score with the std a
search hit reports for it.

The score is any of `score_matrix`'s. The std is √(v + v_b) on the dot product of the pair,
whatever score ranks: v its variance under the members' own variances (`dot_variance`, what
`store.ranking.with_moments` attaches to every hit) and, for a concat-fused ensemble, v_b the
spread of the members' cosines: the law of total variance, docs/architecture.md,
"Disagreement". `ensemble.hit_variance` puts the two together, for search as for this module,
so a search hit, an STS pair of the evaluation harness and `Pipeline.similarity` report one
number for one pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from probembed.gaussian import Gaussian
from probembed.scoring.ensemble import hit_variance
from probembed.scoring.names import Score
from probembed.scoring.pairwise import (
    dot_variance,
    pair_variance,
    score_matrix,
    score_pairs,
    tiles,
)


class Similarity(NamedTuple):
    """Float64 scores and the std of each: (len(a), len(b)) for a matrix, (n,) for pairs."""

    #: The similarity asked for (a pipeline's own score and beta, as its searches score).
    score: np.ndarray
    #: √(dot-product variance + the members' disagreement), as every search hit's `std`.
    std: np.ndarray


def similarity(
    a: Gaussian,
    b: Gaussian,
    score: Score | str = Score.UEC,
    beta: float = 1.0,
    a_weights: np.ndarray | None = None,
    b_weights: np.ndarray | None = None,
    dims: Sequence[int] = (),
    pairwise: bool = False,
) -> Similarity:
    """Every row of `a` against every row of `b`, or (`pairwise`) row i of each together.

    `a` is scored as the query, `b` as the document (only `kl` tells them apart). `dims` are
    the members' widths in concat-fused rows (`Pipeline.blocks`), read with both sides' (n, K)
    fusion weights: the std then carries the members' disagreement, as a hit's does. Empty
    `dims` (rows with no block per member: sum fusion, `single:<model>`, plain Gaussians)
    leave the weights unread and the std the dot product's own.
    """
    _validate_members(a_weights, b_weights, dims)
    if pairwise:
        scores = score_pairs(a, b, score, beta)  # checks the Gaussians and that rows align
        variance = pair_variance(a, b)
        if dims:
            aligned = np.arange(len(a))[:, None]
            own = variance[:, None]
            variance = _with_members(own, a, a_weights, b, b_weights, dims, aligned)[:, 0]
        return Similarity(scores, np.sqrt(variance))
    scores = score_matrix(a, b, score, beta)  # checks the Gaussians
    variance = dot_variance(a, b)
    if dims:
        for rows, cols in tiles(len(a), len(b), max(dims)):  # a bounded gather per tile
            own = variance[rows, cols]
            every = np.broadcast_to(np.arange(len(b))[cols], own.shape)
            variance[rows, cols] = _with_members(own, a, a_weights, b, b_weights, dims, every, rows)
    return Similarity(scores, np.sqrt(variance))


def _validate_members(
    a_weights: np.ndarray | None, b_weights: np.ndarray | None, dims: Sequence[int]
) -> None:
    """Member widths come with both sides' weights."""
    if dims and (a_weights is None or b_weights is None):
        raise ValueError(
            f"dims {list(dims)} needs the fusion weights of both sides (a_weights and b_weights)"
        )


def _with_members(
    own: np.ndarray,
    a: Gaussian,
    a_weights: np.ndarray | None,
    b: Gaussian,
    b_weights: np.ndarray | None,
    dims: Sequence[int],
    candidates: np.ndarray,
    rows: slice = slice(None),
) -> np.ndarray:
    """`hit_variance` of (row of a, candidate row of b) pairs, for `rows` of a: a search hit's."""
    assert a_weights is not None and b_weights is not None  # `_validate_members` saw to it
    a_rows = np.asarray(a_weights)[rows]
    return hit_variance(own, a.mean[rows], a_rows, b.mean, b_weights, dims, candidates)
