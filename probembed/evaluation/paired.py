"""Paired comparisons of methods scored on the same test items: each difference with a seeded
bootstrap interval over the items, and the per-item values it is computed from.

Both outcomes score the same items, so resampling items together cancels what they share (how
hard each item is). LODO's headroom, its geometry benchmark and `probembed eval --compare`
draw their intervals here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
from scipy.stats import ConstantInputWarning, DegenerateDataWarning, bootstrap

from probembed.evaluation.datasets import ClassificationDataset, Evaluable, StsDataset
from probembed.evaluation.harness import Outcome, primary_metric
from probembed.evaluation.metrics import DEFAULT_RETRIEVAL_METRICS, spearman

#: Bootstrap resamples of the items, the interval's confidence and the seed of its draws.
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0


def compared_metrics(dataset: Evaluable) -> tuple[str, ...]:
    """The metrics a paired comparison covers: every reported one with a per-item value (a
    Spearman is recomputed on each resample of pairs instead)."""
    if isinstance(dataset, (StsDataset, ClassificationDataset)):
        return (primary_metric(dataset),)
    return DEFAULT_RETRIEVAL_METRICS


def item_kind(dataset: Evaluable) -> str:
    """What a paired comparison resamples: queries, pairs or test texts."""
    if isinstance(dataset, StsDataset):
        return "pairs"
    if isinstance(dataset, ClassificationDataset):
        return "test texts"
    return "queries"


def paired_difference(
    dataset: Evaluable,
    base: Outcome,
    other: Outcome,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    metric: str | None = None,
) -> dict[str, float]:
    """other − base in `metric` (default: the primary one), with a paired bootstrap 95%
    percentile interval over the test items.

    STS resamples pairs and recomputes both Spearmans; the other metrics are means of per-item
    values (a query's nDCG@10, a text's 0/1 correctness), so their gain's mean is resampled.
    """
    metric = metric or primary_metric(dataset)
    rng = np.random.default_rng(seed)
    options = {
        "paired": True,
        "n_resamples": resamples,
        "confidence_level": CONFIDENCE,
        "method": "percentile",
        "rng": rng,
    }
    if isinstance(dataset, StsDataset):
        data = (base.per_item["pred"], other.per_item["pred"], dataset.scores)

        def statistic(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> float:
            """Spearman gain on one resample of pairs (NaN where its gold ranks nothing)."""
            if np.all(gold == gold[0]):
                return np.nan
            return spearman(b, gold) - spearman(a, gold)

        point = statistic(*data)
        with _quiet_degenerate():
            result = bootstrap(data, statistic, vectorized=False, **options)
    else:
        item = "correct" if isinstance(dataset, ClassificationDataset) else metric
        gain = np.asarray(other.per_item[item], np.float64) - np.asarray(
            base.per_item[item], np.float64
        )
        point = float(gain.mean())
        with _quiet_degenerate():
            result = bootstrap((gain,), np.mean, **options)
    low, high = result.confidence_interval
    return {"difference": float(point), "low": float(low), "high": float(high)}


@contextmanager
def _quiet_degenerate() -> Iterator[None]:
    """Silence scipy's words on degenerate resamples (a few items, all alike): the interval
    comes back NaN, which is what the caller shows, and its warning named BCa, not used here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        warnings.simplefilter("ignore", ConstantInputWarning)
        yield


def against_baseline(
    dataset: Evaluable, outcomes: Mapping[str, Outcome], baseline: str
) -> dict[str, dict[str, dict[str, float]]]:
    """method -> metric -> its paired difference from the `baseline` row (one computation per
    distinct outcome: rows that share one share the interval)."""
    if baseline not in outcomes:
        rows = ", ".join(outcomes)
        raise ValueError(f"baseline {baseline!r} is not a row of this comparison; rows: {rows}")
    check_same_items(dataset, outcomes, baseline)
    base = outcomes[baseline]
    done: dict[int, dict[str, dict[str, float]]] = {}
    out = {}
    for name, outcome in outcomes.items():
        if id(outcome) not in done:
            done[id(outcome)] = {
                metric: paired_difference(dataset, base, outcome, metric=metric)
                for metric in compared_metrics(dataset)
            }
        out[name] = done[id(outcome)]
    return out


def check_same_items(dataset: Evaluable, outcomes: Mapping[str, Outcome], baseline: str) -> None:
    """Refuse rows that score other items than the baseline row, or in another order: the
    bootstrap pairs values by position, so it would pair unrelated items without a word."""
    ids = tuple(outcomes[baseline].ids)
    differ = {name: tuple(o.ids) for name, o in outcomes.items() if tuple(o.ids) != ids}
    if not differ:
        return
    items = item_kind(dataset)
    first = ", ".join(f"{name!r} ({_first_difference(ids, got)})" for name, got in differ.items())
    raise ValueError(
        f"rows {first} do not score the {len(ids)} {items} the baseline {baseline!r} scores, "
        f"in its order; a paired comparison needs every row scored on the same {items}"
    )


def _first_difference(expected: tuple[str, ...], got: tuple[str, ...]) -> str:
    """Where a row's item ids part from the baseline's, in a few words."""
    for i, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            return f"item {i} is {have!r}, the baseline's {want!r}"
    return f"{len(got)} {'item' if len(got) == 1 else 'items'}, the baseline {len(expected)}"


def per_item_values(dataset: Evaluable, outcomes: Mapping[str, Outcome]) -> dict[str, Any]:
    """Each row's per-item values by item id, what a paired comparison resamples: per query
    its nDCG@10, Recall@100 and MRR@10; per STS pair its predicted score (and the gold score);
    per test text whether the probe labels it right (1) or not (0)."""
    first = next(iter(outcomes.values()))
    if isinstance(dataset, StsDataset):
        names = {"pred": "score"}
    elif isinstance(dataset, ClassificationDataset):
        names = {"correct": "correct"}
    else:
        names = {metric: metric for metric in DEFAULT_RETRIEVAL_METRICS}
    table: dict[str, Any] = {"items": item_kind(dataset), "ids": list(first.ids)}
    if isinstance(dataset, StsDataset):
        table["gold"] = np.asarray(dataset.scores, np.float64).tolist()
    table["values"] = {
        method: {
            shown: np.asarray(o.per_item[key], np.float64).tolist() for key, shown in names.items()
        }
        for method, o in outcomes.items()
    }
    return table
