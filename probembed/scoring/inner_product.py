"""Exact reductions of scores to inner products, so an ANN index can rank by them.

For a score with a reduction, ``inner_product_form(q, s, "query") @ inner_product_form(d, s,
"doc").T == score_matrix(q, d, s) + inner_product_offset(q, s)[:, None]``: a per-query constant
shift, so every query ranks documents exactly as the score does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from probembed.gaussian import Gaussian
from probembed.scoring.names import Score, parse_score
from probembed.scoring.pairwise import floored_var

Side = Literal["query", "doc"]
_SIDES = ("query", "doc")


def _ones(n: int) -> np.ndarray:
    """A (n, 1) column of ones, the query's partner of a document-only term."""
    return np.ones((n, 1), dtype=np.float64)


def _sq_norm(x: np.ndarray) -> np.ndarray:
    """Row-wise squared norms as a (n, 1) column."""
    return np.einsum("nd,nd->n", x, x)[:, None]


def _dot_form(g: Gaussian, side: Side) -> np.ndarray:
    """dot: query μq, doc μd; offset 0."""
    return g.mean.astype(np.float64)


def _csd_form(g: Gaussian, side: Side) -> np.ndarray:
    """csd: query [2μq, 1], doc [μd, -(|μd|² + Σσd²)]; offset |μq|² + Σσq²."""
    m, v = g.mean.astype(np.float64), g.var.astype(np.float64)
    if side == "query":
        return np.hstack([2.0 * m, _ones(len(g))])
    return np.hstack([m, -(_sq_norm(m) + v.sum(axis=1)[:, None])])


def _w2_form(g: Gaussian, side: Side) -> np.ndarray:
    """w2: query [2μq, 2σq, 1], doc [μd, σd, -(|μd|² + Σσd²)]; offset |μq|² + Σσq²."""
    m, v = g.mean.astype(np.float64), g.var.astype(np.float64)
    if side == "query":
        return np.hstack([2.0 * m, 2.0 * np.sqrt(v), _ones(len(g))])
    return np.hstack([m, np.sqrt(v), -(_sq_norm(m) + v.sum(axis=1)[:, None])])


def _kl_form(g: Gaussian, side: Side) -> np.ndarray:
    """kl: query [-½(σq²+μq²), μq, -½], doc [1/σd², μd/σd², Σ(log σd² + μd²/σd²)].

    Offset -½(d + Σ log σq²); variances floored as in score_matrix.
    """
    m, v = g.mean.astype(np.float64), floored_var(g)
    if side == "query":
        return np.hstack([-0.5 * (v + m * m), m, -0.5 * _ones(len(g))])
    inv_v = 1.0 / v
    return np.hstack([inv_v, m * inv_v, (np.log(v) + m * m * inv_v).sum(axis=1)[:, None]])


_FORMS: dict[Score, Callable[[Gaussian, Side], np.ndarray]] = {
    Score.DOT: _dot_form,
    Score.CSD: _csd_form,
    Score.W2: _w2_form,
    Score.KL: _kl_form,
}


def _validate_form_args(g: Gaussian, score: Score | str) -> Score:
    """Check the Gaussian and that the score has a reduction, listing those that do."""
    if not isinstance(g, Gaussian):
        raise TypeError(f"expected a Gaussian, got {type(g).__name__}")
    kind = parse_score(score)
    if kind not in _FORMS:
        valid = ", ".join(s.value for s in _FORMS)
        raise ValueError(
            f"score {kind.value!r} has no exact inner-product form; use one of {valid}, "
            "or search on the means and rescore candidates with score_matrix"
        )
    return kind


def inner_product_form(g: Gaussian, score: Score | str, side: Side) -> np.ndarray:
    """Float32 (n, D) vectors whose query·doc products rank exactly as `score` does."""
    kind = _validate_form_args(g, score)
    if side not in _SIDES:
        raise ValueError(f"side must be one of {_SIDES}, got {side!r}")
    return _FORMS[kind](g, side).astype(np.float32)


def inner_product_offset(q: Gaussian, score: Score | str) -> np.ndarray:
    """Per-query constant c with query·doc = score + c, to turn ANN products back into scores."""
    kind = _validate_form_args(q, score)
    m, v = q.mean.astype(np.float64), q.var.astype(np.float64)
    if kind is Score.DOT:
        return np.zeros(len(q))
    if kind is Score.KL:
        return -0.5 * (q.dim + np.log(floored_var(q)).sum(axis=1))
    return np.einsum("nd,nd->n", m, m) + v.sum(axis=1)
