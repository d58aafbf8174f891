"""Similarities between diagonal Gaussians, their uncertainty, and reductions for ANN search."""

from probembed.scoring.inner_product import (
    inner_product_form,
    inner_product_offset,
)
from probembed.scoring.names import Score, parse_score
from probembed.scoring.outrank import outrank_probability
from probembed.scoring.pairwise import (
    VAR_FLOOR,
    dot_moments,
    dot_variance,
    pair_variance,
    score_matrix,
    score_pairs,
)
from probembed.scoring.similarity import Similarity, similarity

__all__ = [
    "VAR_FLOOR",
    "Score",
    "Similarity",
    "dot_moments",
    "dot_variance",
    "inner_product_form",
    "inner_product_offset",
    "outrank_probability",
    "pair_variance",
    "parse_score",
    "score_matrix",
    "score_pairs",
    "similarity",
]
