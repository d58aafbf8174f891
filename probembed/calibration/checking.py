"""How a pipeline's calibration holds on a judged split of the user's: p_relevant of each
query's top hits against the judgements, and the query `confidence` against its failures.

Every judged query is ranked as a search of a collection of the corpus ranks it
(`training.rank_split`), and p_relevant and confidence are computed by the calls a search
makes (`predict_ranked`, `training.search_confidence`), so the figures are those a search of
the corpus would show. `probembed eval --calibration` and `benchmarks/calibration.py` read
them here. Needs the `eval` and `store` extras, as `training` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probembed.calibration.calibrator import RelevanceCalibrator
from probembed.calibration.training import (
    TOP,
    RankedSplit,
    rank_split,
    search_confidence,
)
from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import Embedded
from probembed.evaluation.plots import plot_reliability, plot_risk_coverage
from probembed.evaluation.uncertainty import auroc, expected_calibration_error, risk_coverage
from probembed.pipeline import Pipeline

#: Equal-width bins of the calibration error and the reliability diagram (docs/results.md's figure).
BINS = 15
#: `min_p_relevant` values whose kept and dropped shares are reported.
THRESHOLDS = (0.1, 0.25, 0.5, 0.75)


@dataclass(frozen=True)
class CalibrationCheck:
    """The figures of one split, its reliability bins and the confidence's risk-coverage."""

    figures: dict[str, float]
    reliability: dict[str, list[float]]
    risk_coverage: tuple[np.ndarray, np.ndarray]
    #: Whether `confidence` is the calibrator's learned one (else the outrank probability).
    learned: bool


def hit_probabilities(calibrator: RelevanceCalibrator, split: RankedSplit) -> np.ndarray:
    """p_relevant of every query's top-TOP hits, by the searcher's own call."""
    cosines = split.cosines if split.cosines is not None else [None] * len(split.ranked)
    return np.concatenate(
        [
            calibrator.predict_ranked(r.dots, r.variances, TOP, c)
            for r, c in zip(split.ranked, cosines, strict=True)
        ]
    )


def reliability(p: np.ndarray, relevant: np.ndarray) -> dict[str, list[float]]:
    """Per non-empty equal-width bin: mean prediction, observed rate and count."""
    which = np.minimum((p * BINS).astype(np.int64), BINS - 1)
    bins = [b for b in range(BINS) if (which == b).any()]
    return {
        "mean_predicted": [float(p[which == b].mean()) for b in bins],
        "observed": [float(relevant[which == b].mean()) for b in bins],
        "count": [int((which == b).sum()) for b in bins],
    }


def check_calibration(
    pipeline: Pipeline, dataset: RetrievalDataset, embedded: Embedded | None = None
) -> CalibrationCheck:
    """ECE of p_relevant over every judged query's top-10 hits, the relevant hits kept and the
    irrelevant dropped at each of THRESHOLDS, and the AUROC of the query confidence for
    "nDCG@10 below the split's median" (higher confidence, fewer failures: 1 is perfect)."""
    calibrator = pipeline.calibrator
    if calibrator is None:
        raise ValueError(
            f"{pipeline.name} has no relevance calibrator (calibration.json), so no p_relevant "
            "to check; probembed tune fits one on a judged split"
        )
    split = rank_split(pipeline, dataset, embedded=embedded)
    relevant = split.table(TOP, calibrator.uses_disagreement)[1].astype(bool)
    p = hit_probabilities(calibrator, split)
    figures = {
        "ece15": expected_calibration_error(p, relevant, BINS),
        "hits": float(len(p)),
        "relevant_share": float(relevant.mean()),
        "mean_p_relevant": float(p.mean()),
    }
    for threshold in THRESHOLDS:
        figures[f"kept_relevant@{threshold:g}"] = _share(p[relevant] >= threshold)
        figures[f"dropped_irrelevant@{threshold:g}"] = _share(p[~relevant] < threshold)
    sure = search_confidence(calibrator, split, dataset)
    ndcg = split.per_query(dataset)["ndcg@10"]
    figures["confidence_auroc"] = auroc(1 - sure, split.failed(dataset))
    curve = risk_coverage(1 - sure, np.array([ndcg[q] for q in split.query_ids]))
    learned = calibrator.confidence is not None and split.cosines is not None
    return CalibrationCheck(figures, reliability(p, relevant), curve, learned)


def _share(flags: np.ndarray) -> float:
    """The share of True, NaN for none (a split with no relevant, or no irrelevant, hit)."""
    return float(flags.mean()) if len(flags) else float("nan")


def plot_check(check: CalibrationCheck, directory: Path, stem: str, title: str) -> list[Path]:
    """The reliability diagram of p_relevant and the risk-coverage of the query confidence."""
    curve = check.reliability
    which = "learned confidence" if check.learned else "outrank confidence"
    return [
        plot_reliability(
            {"p_relevant": (curve["mean_predicted"], curve["observed"])},
            directory / f"{stem}-reliability.png",
            f"{title}: p_relevant of the top-{TOP} hits",
            counts=curve["count"],
        ),
        plot_risk_coverage(
            {which: check.risk_coverage},
            directory / f"{stem}-confidence-risk-coverage.png",
            f"{title}: nDCG@10 of the most confident queries",
        ),
    ]
