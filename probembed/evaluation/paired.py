"""Paired comparisons of methods scored on the same test items: each difference with a seeded
bootstrap interval over the items, and the per-item values it is computed from.

Both outcomes score the same items, so resampling items together cancels what they share (how
hard each item is). LODO's headroom, its geometry benchmark and `probembed eval --compare`
draw their intervals here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from scipy.stats import ConstantInputWarning, DegenerateDataWarning, bootstrap

from probembed.evaluation.datasets import ClassificationDataset, Evaluable, StsDataset
from probembed.evaluation.harness import Outcome, primary_metric, reported_metrics

#: Bootstrap resamples of the items, the interval's confidence and the seed of its draws.
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0
#: How `paired_difference` draws its intervals, as a benchmark's result file records it.
BOOTSTRAP = {"resamples": RESAMPLES, "interval": CONFIDENCE, "method": "percentile", "seed": SEED}
#: Resamples of STS pairs ranked at once: memory grows as BATCH × pairs (a peak of 86 MB at
#: SICK-R's 4,906; 1.7 GB all at once), and the draws are the same in any batch.
BATCH = 100


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
        values = (base.per_item["pred"], other.per_item["pred"], dataset.scores)
        a, b, gold = (np.unique(np.asarray(v), return_inverse=True)[1] for v in values)
        point = float(spearman_gain(a, b, gold))
        with _quiet_degenerate():
            result = bootstrap((a, b, gold), spearman_gain, vectorized=True, batch=BATCH, **options)
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


def spearman_gain(a: np.ndarray, b: np.ndarray, gold: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman of `b` minus that of `a` with `gold`, each given by its values' codes (0 for
    the lowest, `np.unique`'s inverse: all a Spearman reads), one resample of pairs along the
    last axis (`axis`: scipy's keyword, always -1 here); NaN where gold or a prediction ranks
    nothing. scipy's `spearmanr` per resample to the last bit, since average ranks and their
    centred products are multiples of 1/4, summed exactly in any order, and the rest is
    `np.corrcoef`'s steps."""
    ranks = _average_ranks(np.stack(np.broadcast_arrays(a, b, gold)))
    return _rank_correlation(ranks[1], ranks[2]) - _rank_correlation(ranks[0], ranks[2])


def _average_ranks(codes: np.ndarray) -> np.ndarray:
    """Ranks from 1 along the last axis, tied values sharing the mean of theirs, of values
    given as codes below the axis's length: counted (linear time), as sorting costs 20 times
    more per resample."""
    n = codes.shape[-1]
    rows = codes.reshape(-1, n)
    shifted = rows + n * np.arange(len(rows))[:, None]
    counts = np.bincount(shifted.ravel(), minlength=rows.size).reshape(rows.shape)
    average = np.cumsum(counts, axis=1) - (counts - 1) / 2
    return np.take_along_axis(average, rows, axis=1).reshape(codes.shape)


def _rank_correlation(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of ranks along the last axis as `np.corrcoef` computes it (its covariance
    scaled by 1/(n-1), divided by y's deviation then x's, clipped): NaN for constant ranks."""
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    scale = np.true_divide(1, x.shape[-1] - 1)
    deviation_x = np.sqrt((x * x).sum(axis=-1) * scale)
    deviation_y = np.sqrt((y * y).sum(axis=-1) * scale)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip((x * y).sum(axis=-1) * scale / deviation_y / deviation_x, -1.0, 1.0)


@contextmanager
def _quiet_degenerate() -> Iterator[None]:
    """Silence scipy's words on degenerate resamples (a few items, all alike): the interval
    comes back NaN, which is what the caller shows, and its warning named BCa, not used here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        warnings.simplefilter("ignore", ConstantInputWarning)
        yield


def against_baseline(
    dataset: Evaluable,
    outcomes: Mapping[str, Outcome],
    baseline: str,
    metrics: Sequence[str] = (),
) -> dict[str, dict[str, dict[str, float]]]:
    """method -> metric -> its paired difference from the `baseline` row, in each reported
    metric (`reported_metrics`: `metrics`, else the dataset kind's), one computation per
    distinct outcome: rows that share one share the interval."""
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
                for metric in reported_metrics(dataset, metrics)
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


def per_item_values(
    dataset: Evaluable, outcomes: Mapping[str, Outcome], metrics: Sequence[str] = ()
) -> dict[str, Any]:
    """Each row's per-item values by item id, what a paired comparison resamples: per query
    each reported metric (`reported_metrics`: by default nDCG@10, Recall@100 and MRR@10); per
    STS pair its predicted score (and the gold score); per test text whether the probe labels
    it right (1) or not (0)."""
    first = next(iter(outcomes.values()))
    if isinstance(dataset, StsDataset):
        names = {"pred": "score"}
    elif isinstance(dataset, ClassificationDataset):
        names = {"correct": "correct"}
    else:
        names = {metric: metric for metric in reported_metrics(dataset, metrics)}
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
