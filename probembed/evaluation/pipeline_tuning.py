"""A pipeline's fusion tuned on labelled splits: the one recipe the built-ins and `probembed tune`
share.

Static weights on a simplex grid, uec's (T, β) around them, then the collection adaptation's γ
(`lodo.tune_families` with no dataset left out); members the weights give 0 are dropped, and γ
is chosen with the agreement among the members kept, as their collections measure it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from probembed.evaluation.harness import Method
from probembed.evaluation.lodo import Scores, Split, tune_families
from probembed.evaluation.tuning import without_unweighted
from probembed.pipeline import AdaptConfig, Pipeline


@dataclass(frozen=True)
class TunedFusion:
    """The tuned pipeline (kept members, untilted uec fusion, γ) and what tuning chose."""

    pipeline: Pipeline
    #: The static weights over every starting member, the prior uec was tuned around.
    static: Method
    #: The starting members tuning gave weight 0 (not in `pipeline`).
    dropped: tuple[str, ...]


def tune_fusion(
    pipeline: Pipeline, splits: Mapping[str, Split], step: float, progress: bool = False
) -> TunedFusion:
    """Tune a pipeline of two or more members on the named tuning splits (each scored by its
    primary metric, their mean the objective), never reading any other split.

    The pipeline keeps no calibrator (fitted for another fusion) and no `tuned_on`: the caller
    records the splits.
    """
    if len(pipeline.members) < 2:
        raise ValueError(f"{pipeline.name} has one member: no fusion weights to tune")
    scores = Scores({(name, "tune"): split for name, split in splits.items()})
    choice = tune_families(scores, len(pipeline.members), step, progress=progress)
    # ship the untilted uec fusion: each collection tilts it by its own agreement and gamma
    base = choice.settings["uec"](next(iter(splits.values())))
    tuned = Pipeline(pipeline.members, base.fusion, base.score, pipeline.name, cache=False)
    kept = without_unweighted(tuned)
    kept.cache = pipeline.cache
    kept.adapt = AdaptConfig(choice.gamma["uec+adapted"])
    weights = choice.static.fusion.weights or ()
    dropped = tuple(m for m, w in zip(pipeline.models, weights, strict=True) if w == 0)
    return TunedFusion(kept, choice.static, dropped)
