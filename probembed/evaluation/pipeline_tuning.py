"""A pipeline's fusion tuned on labelled splits: the one recipe the built-ins and `probembed tune`
share.

Static weights on a simplex grid, uec's (T, β) around them, then the collection adaptation's γ
(`lodo.tune_families` with no dataset left out); members the weights give 0 are dropped, and γ
is chosen with the agreement among the members kept, as their collections measure it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probembed.evaluation.datasets import Evaluable, RetrievalDataset
from probembed.evaluation.harness import (
    Embedded,
    Method,
    Outcome,
    baseline_methods,
    dataset_roles,
    embed,
    evaluate,
    primary_metric,
    searched_as,
)
from probembed.evaluation.lodo import (
    GAMMAS,
    Scores,
    Split,
    collection_roles,
    embedded_split,
    tune_families,
)
from probembed.evaluation.paired import item_kind, paired_difference
from probembed.evaluation.report import fusion_settings
from probembed.evaluation.tuning import BETAS, TEMPERATURES, simplex_grid, without_unweighted
from probembed.fusion.adapt import NEIGHBOURS
from probembed.pipeline import AdaptConfig, Pipeline


def default_step(members: int) -> float:
    """The static weights' grid step for a pipeline of `members`: the grid grows as
    C(1/step + K - 1, K - 1), so 0.1 up to three members (66 points over three) and 0.2 from
    four (56 over four, `default`'s grid; 0.1 there is 286, 1,001 over five)."""
    return 0.1 if members <= 3 else 0.2


def grid_sizes(members: int, step: float) -> dict[str, int]:
    """The settings each stage of `tune_fusion` scores (static weights, then uec's (T, β)
    around them, then γ), so a user sees the cost before minutes of embedding; a step that
    tiles no simplex is refused here."""
    return {
        "weights": len(simplex_grid(members, step)),
        "(T, β)": len(TEMPERATURES) * len(BETAS),
        "γ": len(GAMMAS),
    }


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
    # one member kept: no agreement to measure, so no tilt (a γ chosen on ties would ask for it)
    gamma = choice.gamma["uec+adapted"] if len(kept.members) > 1 else 0.0
    kept = Pipeline(
        kept.members,
        kept.fusion,
        kept.score,
        kept.name,
        pipeline.cache or False,
        adapt=AdaptConfig(gamma),
    )
    weights = choice.static.fusion.weights or ()
    dropped = tuple(m for m, w in zip(pipeline.models, weights, strict=True) if w == 0)
    return TunedFusion(kept, choice.static, dropped)


@dataclass(frozen=True)
class TuneResult:
    """A pipeline tuned on one split, and that split's figures that justify it."""

    pipeline: Pipeline
    #: The primary metric on the tuning split: the starting pipeline, each member alone (two
    #: or more members), the tuned pipeline; each as `probembed eval` scores it.
    figures: dict[str, float]
    metric: str
    #: What tuning chose (`fusion_settings`, plus gamma); empty for one member.
    settings: dict[str, object]
    dropped: tuple[str, ...] = ()
    #: The tuned pipeline against its best member alone on the tuning split: that member's
    #: name, the items resampled, and `paired_difference`'s difference and interval; None
    #: where one member starts or is kept. A figure on the split tuned on flatters the tuned
    #: row, so an interval that reaches zero even here says the split cannot tell them apart.
    against_best: dict[str, Any] | None = None


def check_tunable(pipeline: Pipeline, dataset: Evaluable) -> None:
    """Refuse a split too small for the members' agreement (more than `NEIGHBOURS` texts)
    before it is embedded, naming the split and its size: the agreement's own refusal came
    after minutes and named neither."""
    if len(pipeline.members) < 2:
        return  # one member: nothing to fuse, no agreement measured
    roles = dataset_roles(dataset)
    texts = sum(len(roles[r]) for r in collection_roles(roles))
    if texts > NEIGHBOURS:
        return
    held = (
        f"{texts} documents in its corpus"
        if isinstance(dataset, RetrievalDataset)
        else f"{texts} texts"
    )
    raise ValueError(
        f"{dataset.name} {dataset.split}: {held}; tuning a fusion measures its members' "
        f"agreement on them, which needs at least {NEIGHBOURS + 1} (each text's "
        f"{NEIGHBOURS} nearest are compared): tune on a larger dataset"
    )


def tune_pipeline(
    pipeline: Pipeline, dataset: Evaluable, step: float, progress: bool = False
) -> TuneResult:
    """Tune a pipeline's fusion on one labelled split, as the built-ins are tuned, and score
    the starting pipeline, its members and the tuned one there (one member: kept as it is)."""
    check_tunable(pipeline, dataset)
    embedded = embed(pipeline, dataset, progress)
    metric = primary_metric(dataset)

    def scored(pipe: Pipeline, embedded: Embedded, label: str) -> Outcome:
        """The split scored for a pipeline as its search (or encode) runs it."""
        return evaluate(embedded, dataset, searched_as(pipe, embedded, dataset, label))

    start = f"{pipeline.name} (start)"
    figures = {start: scored(pipeline, embedded, start).metrics[metric]}
    if len(pipeline.members) < 2:
        return TuneResult(pipeline, figures, metric, {})
    singles = {
        single.name: evaluate(embedded, dataset, single)
        for single in baseline_methods(pipeline.models)[: len(pipeline.models)]
    }
    figures.update({name: outcome.metrics[metric] for name, outcome in singles.items()})
    split = embedded_split(dataset, embedded)
    tuned = tune_fusion(pipeline, {dataset.name: split}, step, progress)
    kept = tuned.pipeline
    outcome = scored(kept, embed(kept, dataset, progress), "tuned")
    figures["tuned"] = outcome.metrics[metric]
    best = max(singles, key=lambda name: figures[name])
    against = (
        {
            "member": best,
            "items": f"{len(outcome.ids)} {item_kind(dataset)}",
            **paired_difference(dataset, singles[best], outcome, metric=metric),
        }
        if len(kept.members) > 1  # else the tuned pipeline is one member: nothing to tell apart
        else None
    )
    settings = fusion_settings(Method("tuned", kept.fusion, kept.score), kept.models)
    settings["gamma"] = kept.adapt.gamma
    return TuneResult(kept, figures, metric, settings, tuned.dropped, against)


def tuned_and_calibrated(
    start: Pipeline,
    dataset: Evaluable,
    folder: Path,
    split: str,
    name: str,
    seed: int,
    step: float | None = None,
) -> TuneResult:
    """The pipeline `tune` saves, so a benchmark measures exactly what a user gets: fusion
    tuned on `dataset` (`split` of the dataset in `folder`), named, the split recorded in
    `tuned_on`, and on a retrieval split the calibrator refitted on its qrels; `step`: the
    weights' grid, by default `default_step` of its members."""
    from probembed.calibration.training import fit_calibrator
    from probembed.evaluation.datasets import dataset_kind

    step = default_step(len(start.members)) if step is None else step
    result = tune_pipeline(start, dataset, step, progress=True)
    tuned = result.pipeline
    tuned.name = name
    entry = f"{dataset_kind(dataset)}/{dataset.name}:{split}"
    kept = start.tuned_on if len(start.members) < 2 else ()
    tuned.tuned_on = (*kept, entry)
    tuned.calibrator = (
        fit_calibrator(tuned, dataset, folder, seed)
        if isinstance(dataset, RetrievalDataset)
        else None
    )
    return result
