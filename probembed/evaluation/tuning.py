"""Choosing fusion settings on dev data only: static weights, then UEC's temperature and beta.

UEC is tuned with the tuned static weights as its prior p_k, and its grid contains T = inf,
beta = 0, which is exactly the static ensemble. So on the dev split UEC can only match or beat
`weighted`; whether per-text weighting then holds up on test is what the report measures.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from probembed.evaluation.datasets import Dataset
from probembed.evaluation.harness import Embedded, Method, evaluate, primary_metric
from probembed.pipeline import FusionConfig, ScoreConfig
from probembed.progress import progress_bar

TEMPERATURES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))
BETAS = (0.0, 1.0, 4.0, 16.0, 64.0)


@dataclass(frozen=True)
class Tuned:
    """The chosen methods and the dev figure each reached."""

    weighted: Method
    uec: Method
    dev: dict[str, float]


def simplex_grid(k: int, step: float) -> list[tuple[float, ...]]:
    """Every weight vector on the K-simplex with coordinates in multiples of step."""
    units = round(1 / step)
    points = [c for c in itertools.product(range(units + 1), repeat=k - 1) if sum(c) <= units]
    return [tuple(x / units for x in (*c, units - sum(c))) for c in points]


def _best(
    candidates: Sequence[Method], objective: Callable[[Method], float], label: str, progress: bool
) -> tuple[Method, float]:
    """The candidate with the highest objective (first wins ties, so simpler grids win)."""
    best, best_value = candidates[0], -np.inf
    with progress_bar(label, len(candidates), progress) as bar:
        for method in candidates:
            value = objective(method)
            if value > best_value + 1e-12:
                best, best_value = method, value
            bar.advance(1)
    return best, best_value


def tune(
    splits: Sequence[tuple[Embedded, Dataset]], step: float = 0.1, progress: bool = False
) -> Tuned:
    """Static weights on the simplex grid, then (T, beta) for UEC with those weights as prior.

    With several dev splits the objective is the mean of their primary metrics, so one setting
    (the built-in pipeline's) serves every kind of task.
    """

    def objective(method: Method) -> float:
        return float(
            np.mean([evaluate(e, d, method).metrics[primary_metric(d)] for e, d in splits])
        )

    embedded = splits[0][0]
    k = len(embedded.models)
    weighted_grid = [
        Method("weighted", FusionConfig("weighted", weights=w)) for w in simplex_grid(k, step)
    ]
    weighted, weighted_dev = _best(weighted_grid, objective, "tune weights", progress)
    prior = weighted.fusion.weights
    uec_grid = [
        Method("uec", FusionConfig("uec", temperature=t, prior=prior), ScoreConfig("uec", beta))
        for t, beta in itertools.product(TEMPERATURES, BETAS)
    ]
    uec, uec_dev = _best(uec_grid, objective, "tune uec (T, beta)", progress)
    return Tuned(weighted, uec, {"weighted": weighted_dev, "uec": uec_dev})
