"""Choosing fusion settings on dev data only: static weights, then UEC's temperature and beta.

UEC is tuned with the tuned static weights as its prior p_k, and its grid contains T = inf,
beta = 0, which is exactly the static ensemble. So on the dev split UEC can only match or beat
`weighted`; whether per-text weighting then holds up on test is what the report measures.

A member the tuned weights give 0 gets weight 0 on every text at every T (its log-prior is
-inf), so `without_unweighted` drops it before a pipeline is saved: it is never encoded or
stored, and the other members' weights, hence every fused vector and score, are unchanged.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from probembed.evaluation.datasets import Evaluable
from probembed.evaluation.harness import Embedded, Method, evaluate, primary_metric
from probembed.fusion import Fusion, parse_fusion, single_model
from probembed.pipeline import FusionConfig, Pipeline, ScoreConfig
from probembed.progress import progress_bar

TEMPERATURES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))
BETAS = (0.0, 1.0, 4.0, 16.0, 64.0)
#: Two tuning figures this close are tied (the first setting kept): float64 rounding of one
#: figure reached two ways, not a difference between settings.
TIE = 1e-12


@dataclass(frozen=True)
class Tuned:
    """The chosen methods and the dev figure each reached."""

    weighted: Method
    uec: Method
    dev: dict[str, float]


def simplex_grid(k: int, step: float) -> list[tuple[float, ...]]:
    """Every weight vector on the K-simplex with coordinates in multiples of step."""
    units = round(1 / step) if 0 < step <= 1 else 0
    if units == 0 or not math.isclose(units * step, 1.0, rel_tol=1e-9):
        raise ValueError(f"step must be 1/n for a whole n (0.5, 0.25, 0.1, ...), got {step}")
    points = [c for c in itertools.product(range(units + 1), repeat=k - 1) if sum(c) <= units]
    return [tuple(x / units for x in (*c, units - sum(c))) for c in points]


def uec_methods(prior: Sequence[float]) -> list[Method]:
    """Per-text uncertainty weights around a prior, and the uec score's beta: the (T, β) grid."""
    return [
        Method("uec", FusionConfig("uec", temperature=t, prior=tuple(prior)), ScoreConfig("uec", b))
        for t, b in itertools.product(TEMPERATURES, BETAS)
    ]


def _best(
    candidates: Sequence[Method], objective: Callable[[Method], float], label: str, progress: bool
) -> tuple[Method, float]:
    """The candidate with the highest objective (first wins ties, so simpler grids win).

    Ties are judged along the way: a candidate replaces the best so far only where it beats
    it by more than TIE. `lodo.fold_choice` (through `lodo._best`) judges them against the
    maximum instead, taking the first setting within TIE of it. The two agree unless figures
    lie between TIE and 2·TIE of each other: values x, x + 0.9·TIE, x + 1.8·TIE give the
    third here and the second there. Kept apart so that no chosen setting changes.
    """
    best, best_value = candidates[0], -np.inf
    with progress_bar(label, len(candidates), progress) as bar:
        for method in candidates:
            value = objective(method)
            if math.isnan(value):  # would lose every comparison, and tuning would pass it by
                raise ValueError(f"{label}: {method} scores NaN on the tuning data")
            if value > best_value + TIE:
                best, best_value = method, value
            bar.advance(1)
    return best, best_value


def tune(
    splits: Sequence[tuple[Embedded, Evaluable]], step: float = 0.1, progress: bool = False
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
    assert weighted.fusion.weights is not None  # every method of the grid has weights
    uec, uec_dev = _best(
        uec_methods(weighted.fusion.weights), objective, "tune uec (T, beta)", progress
    )
    return Tuned(weighted, uec, {"weighted": weighted_dev, "uec": uec_dev})


def without_unweighted(pipeline: Pipeline) -> Pipeline:
    """The pipeline minus the members its prior or static weights give 0, weights renormalised."""
    fusion = pipeline.fusion
    method = single_model(fusion.method) or parse_fusion(fusion.method)
    slots: dict[str, str] = {Fusion.UEC: "prior", Fusion.WEIGHTED: "weights"}
    field = slots.get(method)
    weights = getattr(fusion, field) if field else None
    if weights is None or min(weights) > 0:  # every member can receive weight
        return pipeline
    keep = [w > 0 for w in weights]
    # the field is named at run time: mypy matches the ** against every field's type
    fusion = replace(fusion, **{field: _renormalised(weights, keep)})  # type: ignore[arg-type]
    members = [m for m, kept in zip(pipeline.members, keep, strict=True) if kept]
    return Pipeline(
        members,
        fusion,
        pipeline.score,
        pipeline.name,
        pipeline.cache or False,
        adapt=pipeline.adapt,
    )


def _renormalised(weights: Sequence[float], keep: Sequence[bool]) -> tuple[float, ...]:
    """The kept weights, rescaled to sum to 1 (the fused vectors keep unit norm)."""
    kept = [float(w) for w, k in zip(weights, keep, strict=True) if k]
    total = sum(kept)
    return tuple(w / total for w in kept)
