"""How well an uncertainty predicts failure: AUROC, risk–coverage, binned quality, signals.

Convention throughout: an uncertainty or signal is higher when the model is LESS sure, and a
quality is higher when the answer is better (nDCG, Recall@1, 1 − rank error, ...).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import rankdata

from probembed.evaluation.metrics import paired_arrays, spearman
from probembed.scoring import outrank_probability

#: A query's key: its id, or its position.
Q = TypeVar("Q", bound=Hashable)

NDCG_BELOW_MEDIAN = "ndcg_below_median"
RECALL10_ZERO = "recall10_zero"


def auroc(signal: ArrayLike, failed: ArrayLike) -> float:
    """Chance that a failed item is more uncertain than a successful one (0.5 = no use).

    Returns nan, with a RuntimeWarning saying why, when every item failed or none did.
    """
    from sklearn.metrics import roc_auc_score

    signal, failed = _validate_pair(signal, failed, "signal", "failed")
    if not np.isin(failed, (0, 1)).all():
        raise ValueError("failed must hold booleans (or 0/1), one per item")
    failed = failed.astype(bool)
    n_failed = int(failed.sum())
    if n_failed in (0, len(failed)):
        outcome = "failed" if n_failed else "succeeded"
        warnings.warn(
            f"AUROC is undefined when all {len(failed)} items {outcome}; returning nan",
            RuntimeWarning,
            stacklevel=2,
        )
        return math.nan
    return float(roc_auc_score(failed, signal))


def risk_coverage(uncertainty: ArrayLike, quality: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Mean quality of the most confident fraction c of items, for every c = 1/n, ..., 1.

    Items with tied uncertainty are credited their mean quality (the expectation over
    tie orders), so the curve does not depend on input order.
    """
    _, quality_sorted = _sort_by_uncertainty(uncertainty, quality)
    answered = np.arange(1, len(quality_sorted) + 1)
    return answered / len(quality_sorted), np.cumsum(quality_sorted) / answered


def quality_at_coverage(uncertainty: ArrayLike, quality: ArrayLike, coverage: float = 0.8) -> float:
    """Mean quality when only the ceil(coverage · n) most confident items are answered."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage={coverage} must be in (0, 1]")
    _, mean_quality = risk_coverage(uncertainty, quality)
    answered = math.ceil(round(coverage * len(mean_quality), 9))
    return float(mean_quality[answered - 1])


def binned_quality(
    uncertainty: ArrayLike, quality: ArrayLike, n_bins: int = 10
) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean quality per equal-count uncertainty bin, and Spearman of bin index vs quality.

    A useful uncertainty gives quality falling bin by bin: rho near −1 (ProbVLM's check).
    Returns (mean uncertainty per bin, mean quality per bin, rho).
    """
    uncertainty_sorted, quality_sorted = _sort_by_uncertainty(uncertainty, quality)
    if not 2 <= n_bins <= len(quality_sorted):
        raise ValueError(f"n_bins={n_bins} must be between 2 and the item count")
    bins = np.array_split(np.arange(len(quality_sorted)), n_bins)
    centers = np.array([uncertainty_sorted[b].mean() for b in bins])
    mean_quality = np.array([quality_sorted[b].mean() for b in bins])
    rho = spearman(np.arange(n_bins), mean_quality, diagnostic="bin index with mean quality")
    return centers, mean_quality, rho


def failed_queries(
    per_query_ndcg: Mapping[Q, float],
    per_query_recall10: Mapping[Q, float],
    query_ids: Sequence[Q] | None = None,
) -> dict[str, np.ndarray]:
    """The two failure labels, as boolean arrays in `query_ids` order (default: nDCG's keys).

    `ndcg_below_median`: nDCG@10 strictly below the median over these queries; where none is
    (the median is the lowest value, as for a 0/1 metric such as Recall@5 at 0 for half the
    queries or more), those at the lowest value, the most even split such ties allow; none
    only where every query scores alike. (`_below_median`)
    `recall10_zero`: no relevant document in the top 10.
    A report judging by another metric passes it and the recall at its cutoff
    (`harness.judged_metrics`): the labels keep their names.
    """
    if set(per_query_ndcg) != set(per_query_recall10):
        raise ValueError("per_query_ndcg and per_query_recall10 must cover the same query ids")
    query_ids = list(per_query_ndcg) if query_ids is None else list(query_ids)
    missing = [q for q in query_ids if q not in per_query_ndcg]
    if missing:
        raise ValueError(f"{len(missing)} query ids have no metric, e.g. {missing[:3]}")
    ndcg = np.array([per_query_ndcg[q] for q in query_ids], dtype=np.float64)
    recall10 = np.array([per_query_recall10[q] for q in query_ids], dtype=np.float64)
    return {NDCG_BELOW_MEDIAN: _below_median(ndcg), RECALL10_ZERO: recall10 == 0}


def _below_median(quality: np.ndarray) -> np.ndarray:
    """The queries below the median, or at the lowest value where none is below: strictly
    below alone labels no query failed whenever ties at the lowest value hold the median."""
    below = quality < np.median(quality)
    if below.any():
        return below
    return (quality == quality.min()) & (quality < quality.max())


def abs_rank_error(pred: ArrayLike, gold: ArrayLike) -> np.ndarray:
    """Per STS pair, |rank(pred) − rank(gold)| / n: how far the pair sits from its gold place."""
    pred, gold = _validate_pair(pred, gold, "pred", "gold")
    return np.abs(rankdata(pred) - rankdata(gold)) / len(pred)


def top_quartile(values: ArrayLike) -> np.ndarray:
    """Flag values at or above the 75th percentile, e.g. the worst quarter of rank errors."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0 or np.isnan(values).any():
        raise ValueError(f"values must be a non-empty 1-D array without NaN, got {values.shape}")
    return values >= np.quantile(values, 0.75)


def expected_calibration_error(prob: ArrayLike, outcome: ArrayLike, n_bins: int = 15) -> float:
    """Mean |observed rate − mean predicted probability| over equal-width bins, by bin share.

    Bins are [0, 1/n), ..., [(n−1)/n, 1] (a probability of exactly 1 falls in the last);
    empty bins count nothing. 0 is perfect calibration.
    """
    prob, outcome = _validate_pair(prob, outcome, "prob", "outcome")
    prob = prob.astype(np.float64)
    if (prob < 0).any() or (prob > 1).any():
        raise ValueError("prob must hold probabilities in [0, 1]")
    if not np.isin(outcome, (0, 1)).all():
        raise ValueError("outcome must hold booleans (or 0/1), one per prediction")
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    which = np.minimum((prob * n_bins).astype(np.int64), n_bins - 1)
    predicted = np.bincount(which, weights=prob, minlength=n_bins)
    observed = np.bincount(which, weights=outcome.astype(np.float64), minlength=n_bins)
    return float(np.abs(observed - predicted).sum() / len(prob))


def confidence_signals(
    top_scores: ArrayLike,
    top_vars: ArrayLike,
    query_uncertainty: ArrayLike,
    top_dots: ArrayLike | None = None,
) -> dict[str, np.ndarray]:
    """Per-query uncertainty signals from the ranked scores, all oriented higher = less sure.

    `top_vars` are the variances of the hits' dot products; `top_dots` those dot products,
    when another score ranked the hits (None: the scores are dot products).
    `margin_prob`: 1 − Φ((d1 − d2) / sqrt(v1 + v2)) on the dot products of the two best hits,
        the chance the runner-up truly beats the top hit if the two are independent
        Gaussians; 0.5 for a tie. A margin of another score over these variances would mix
        units (a KL score's margin is hundreds of times a dot product's).
    `query_var`: the query embedding's own uncertainty, as given.
    `neg_top1`: −s1, a weak best match.
    `neg_margin`: −(s1 − s2), a close call between the two best documents.
    `top1_std`: sqrt(v1), how unsure the best score itself is.
    """
    scores, variances, query_uncertainty = _validate_ranked(top_scores, top_vars, query_uncertainty)
    dots = scores if top_dots is None else np.asarray(top_dots, dtype=np.float64)
    if dots.shape != scores.shape or np.isnan(dots).any():
        raise ValueError(
            f"top_dots must be NaN-free and shaped like top_scores {scores.shape}, got {dots.shape}"
        )
    margin = scores[:, 0] - scores[:, 1]
    return {
        "margin_prob": outrank_probability(
            dots[:, 1], dots[:, 0], variances[:, 1], variances[:, 0]
        ),
        "query_var": query_uncertainty,
        "neg_top1": -scores[:, 0],
        "neg_margin": -margin,
        "top1_std": np.sqrt(variances[:, 0]),
    }


def _sort_by_uncertainty(
    uncertainty: ArrayLike, quality: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Sort by increasing uncertainty, tied items sharing their mean quality."""
    uncertainty, quality = _validate_pair(uncertainty, quality, "uncertainty", "quality")
    order = np.argsort(uncertainty, kind="stable")
    uncertainty, quality = uncertainty[order], quality[order].astype(np.float64)
    _, starts, counts = np.unique(uncertainty, return_index=True, return_counts=True)
    tie_means = np.add.reduceat(quality, starts) / counts
    return uncertainty, np.repeat(tie_means, counts)


def _validate_pair(
    x: ArrayLike, y: ArrayLike, x_name: str, y_name: str
) -> tuple[np.ndarray, np.ndarray]:
    """Two aligned, non-empty, NaN-free 1-D inputs (`paired_arrays`, then the NaN check)."""
    x, y = paired_arrays(x, y, x_name, y_name, least=1)
    for name, values in ((x_name, x), (y_name, y)):
        if values.dtype.kind == "f" and np.isnan(values).any():
            raise ValueError(f"{name} holds {int(np.isnan(values).sum())} NaN values")
    return x, y


def _validate_ranked(
    top_scores: ArrayLike, top_vars: ArrayLike, query_uncertainty: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check (nq, k >= 2) scores sorted descending, matching non-negative variances, (nq,)."""
    scores = np.asarray(top_scores, dtype=np.float64)
    variances = np.asarray(top_vars, dtype=np.float64)
    query_uncertainty = np.asarray(query_uncertainty, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[1] < 2 or variances.shape != scores.shape:
        raise ValueError(
            f"top_scores and top_vars must both be (nq, k >= 2), got {scores.shape} and "
            f"{variances.shape}"
        )
    if query_uncertainty.shape != (len(scores),):
        raise ValueError(
            f"query_uncertainty has shape {query_uncertainty.shape}; expected ({len(scores)},)"
        )
    if np.isnan(scores).any() or np.isnan(variances).any():
        raise ValueError("top_scores and top_vars must not hold NaN")
    if (np.diff(scores, axis=1) > 0).any():
        raise ValueError("top_scores rows must be sorted in descending order")
    if (variances < 0).any():
        raise ValueError("top_vars must be non-negative")
    return scores, variances, query_uncertainty
