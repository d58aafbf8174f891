"""`--compare`: every method in one table, uncertainty quality, per-model diagnostics, plots.

Rows are tidy, one figure each: {"dataset", "split", "method", "metric", "value"}, so any tool
can read them; the run's exact configuration and seed travel with them in the JSON file.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from probembed import atomic
from probembed.caller import warn_caller
from probembed.evaluation.datasets import Dataset, Evaluable, RetrievalDataset, StsDataset
from probembed.evaluation.harness import (
    COSINE,
    DECILE_METRIC,
    DEFAULT_JUDGED,
    Embedded,
    Method,
    Outcome,
    baseline_methods,
    embed,
    evaluate,
    judged_metrics,
    primary_metric,
    reported_metrics,
    searched_as,
)
from probembed.evaluation.metrics import spearman
from probembed.evaluation.plots import plot_binned, plot_risk_coverage
from probembed.evaluation.tuning import Tuned, tune
from probembed.evaluation.uncertainty import (
    NDCG_BELOW_MEDIAN,
    RECALL10_ZERO,
    abs_rank_error,
    auroc,
    binned_quality,
    confidence_signals,
    failed_queries,
    quality_at_coverage,
    risk_coverage,
    top_quartile,
)
from probembed.fusion import single_model, uncertainty
from probembed.fusion.weights import normalized_prior
from probembed.pipeline import Pipeline

COVERAGE = 0.8
#: Uncertainty bins for the per-bin quality figures: deciles, or one per item when fewer.
BINS = 10
#: The binned plot's x-axis: each signal's own quantile, so signals of any scale compare.
QUANTILE_AXIS = "quantile of each signal (bin mean; 0 = least uncertain, 1 = most)"
#: The key `earlier_rows` reads off a row (a dataset's name, an (estimator, dataset) pair).
K = TypeVar("K", bound=Hashable)


@dataclass
class Comparison:
    """Everything one `--compare` run produced on one dataset."""

    rows: list[dict] = field(default_factory=list)
    #: The figure each tuned row reached on the split it was tuned on (`tuning_rows`): kept
    #: out of `rows`, the reported split's, so a reader keyed by method and metric meets
    #: only held-out figures there.
    tuning: list[dict] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    methods: dict[str, Method] = field(default_factory=dict)
    curves: dict[str, dict] = field(default_factory=dict)
    #: The metrics reported (`reported_metrics`), so the diagnostics and plots judge by them.
    metrics: tuple[str, ...] = ()


def compare(
    pipeline: Pipeline,
    test: Evaluable,
    dev: Evaluable | None,
    progress: bool = False,
    tuned: Tuned | None = None,
    metrics: Sequence[str] = (),
) -> Comparison:
    """Singles, mean, concat, tuned weighted and tuned uec on the same cached embeddings, each
    in `metrics` (`harness.reported_metrics`: by default the dataset kind's), which the
    uncertainty diagnostics judge by too.

    With a tuning split, `weighted` and `uec` are tuned afresh on it (by its primary metric),
    and the pipeline as shipped (what `probembed eval` without --compare reports) is a row of
    its own, `shipped_label(pipeline.name)`; without one, `uec` is the pipeline as shipped."""
    embedded = embed(pipeline, test, progress)
    methods = baseline_methods(pipeline.models)
    if tuned is None and dev is not None:
        tuned = tune([(embed(pipeline, dev, progress), dev)], progress=progress)
    own = default_baseline(pipeline, tuned is not None)  # the pipeline as its search runs
    if tuned is not None:  # and the pipeline as shipped, which a run without --compare scores
        methods += [tuned.weighted, tuned.uec, searched_as(pipeline, embedded, test, own)]
    else:  # no dev split: the pipeline's own method, as its search runs it, stands in
        methods.append(searched_as(pipeline, embedded, test, own))
    result = Comparison(
        methods={m.name: m for m in methods}, metrics=reported_metrics(test, metrics)
    )
    scored: dict[Hashable, Outcome] = {}  # rows the same by construction are scored once
    for method in methods:
        key = construction(method, pipeline.models)
        if key not in scored:
            scored[key] = evaluate(embedded, test, method, result.metrics)
        result.outcomes[method.name] = scored[key]
        result.rows += _rows(test, method.name, scored[key].metrics)
    if tuned is not None and dev is not None:
        result.tuning = tuning_rows(dev, tuned)
    if own != "uec":  # the uec tuned afresh, whose signals no search of the pipeline reports
        result.rows += uncertainty_quality(test, result, "uec")
    learned = learned_confidence(pipeline, embedded, test, result.outcomes[own].ids)
    result.rows += uncertainty_quality(test, result, own, learned)
    result.rows += model_diagnostics(embedded, test, result.outcomes, result.metrics)
    return result


def pipeline_quality(
    pipeline: Pipeline,
    test: Evaluable,
    embedded: Embedded,
    outcome: Outcome,
    name: str,
    metrics: Sequence[str] = (),
) -> Comparison:
    """The pipeline alone (`eval --plots` without --compare) as a comparison of one row, its
    uncertainty signals ready to plot, judged by `metrics` as `compare` judges, the learned
    confidence its searches report among them."""
    result = Comparison(outcomes={name: outcome}, metrics=reported_metrics(test, metrics))
    learned = learned_confidence(pipeline, embedded, test, outcome.ids)
    result.rows += uncertainty_quality(test, result, name, learned)
    return result


#: The signal of the learned query confidence a search reports, oriented as the others are.
LEARNED_CONFIDENCE = "1-confidence"


def learned_confidence(
    pipeline: Pipeline, embedded: Embedded, test: Evaluable, ids: Sequence[str]
) -> dict[str, np.ndarray]:
    """1 − the learned `confidence` a search of a collection of the corpus reports, per query of
    `ids` (higher = less sure, as every signal); none where the pipeline has no query
    calibrator or the split is no corpus."""
    calibrator = pipeline.calibrator
    if not isinstance(test, RetrievalDataset) or calibrator is None:
        return {}
    if calibrator.confidence is None:
        return {}
    from probembed.calibration.training import rank_split, search_confidence

    split = rank_split(pipeline, test, embedded=embedded)
    by_id = dict(zip(split.query_ids, search_confidence(calibrator, split, test), strict=True))
    return {LEARNED_CONFIDENCE: 1 - np.array([by_id[q] for q in ids], dtype=np.float64)}


def construction(method: Method, models: Sequence[str]) -> Hashable:
    """What a row computes, so rows alike by construction are one: `mean` and `concat` are both
    uniform weights in concat mode; uec at T = ∞ gives every text its prior (`weighted` with
    the prior as weights), the uec score at β = 0 is the dot product (cosine), and
    `single:<model>` is that model's one-hot weights (the others' blocks are zeros, which add
    nothing to a dot product or a probe: the same figures bit for bit, per item too)."""
    fusion, score = method.fusion, method.score
    members = len(models)
    weights: tuple[float, ...] | None = None
    alone = single_model(fusion.method)
    if alone is not None:
        weights = tuple(float(model == alone) for model in models)
    elif fusion.mode == "concat" and fusion.method in ("mean", "concat"):
        weights = tuple(normalized_prior(None, members))
    elif fusion.method == "weighted" or (fusion.method == "uec" and fusion.temperature == math.inf):
        given = fusion.weights if fusion.method == "weighted" else fusion.prior
        weights = tuple(normalized_prior(given, members))
    if score.name == "uec" and score.beta == 0:
        score = COSINE
    if weights is None:
        return (fusion, score)
    return ("static", fusion.mode, weights, score)


def same_rows(result: Comparison) -> list[tuple[str, ...]]:
    """The names of rows alike by construction (scored once: one outcome), two or more each."""
    groups: dict[int, list[str]] = {}
    for name, outcome in result.outcomes.items():
        groups.setdefault(id(outcome), []).append(name)
    return [tuple(names) for names in groups.values() if len(names) > 1]


#: The rows of a comparison tuned afresh on its tuning split.
TUNED_ROWS = ("weighted", "uec")


def tuned_settings(result: Comparison, models: Sequence[str]) -> dict[str, dict[str, object]]:
    """What each tuned row chose (`fusion_settings`), so it can be rebuilt or saved."""
    return {name: fusion_settings(result.methods[name], models) for name in TUNED_ROWS}


def row_names(pipeline: Pipeline, tuned: bool) -> list[str]:
    """The rows `compare` makes, known before any encoding (so a --baseline can be checked):
    with a tuning split the tuned rows and the pipeline as shipped, else `uec` as shipped."""
    tuned_rows = [*TUNED_ROWS, shipped_label(pipeline.name)] if tuned else ["uec"]
    return [m.name for m in baseline_methods(pipeline.models)] + tuned_rows


def default_baseline(pipeline: Pipeline, tuned: bool) -> str:
    """The row every other is compared with: the pipeline as given, as eval without --compare
    scores it."""
    return shipped_label(pipeline.name) if tuned else "uec"


def shipped_label(pipeline_name: str) -> str:
    """The compare row of the pipeline as shipped, beside the `uec` tuned on the dev split."""
    return f"{pipeline_name} as shipped"


def fusion_settings(method: Method, models: Sequence[str]) -> dict[str, object]:
    """A tuned method's chosen settings, by name, so a reader can rebuild the pipeline: its
    static weights or uec prior per member, and uec's T and β."""
    fusion = method.fusion
    settings: dict[str, object] = {}
    if fusion.weights is not None:
        settings["weights"] = dict(zip(models, fusion.weights, strict=True))
    if fusion.method == "uec":
        if fusion.prior is not None:
            settings["prior"] = dict(zip(models, fusion.prior, strict=True))
        settings["temperature"] = fusion.temperature
        settings["beta"] = method.score.beta
    return settings


def settings_text(settings: Mapping[str, object]) -> str:
    """Chosen settings on one line: `prior minilm 0.6, wordllama 0.4; T inf; β 64; γ 0`."""
    short = {"temperature": "T", "beta": "β", "gamma": "γ"}
    parts = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            shown = ", ".join(f"{m} {w:.3g}" for m, w in value.items())
        else:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{short.get(key, key)} {shown}")
    return "; ".join(parts)


def tuning_rows(dev: Evaluable, tuned: Tuned) -> list[dict]:
    """The figure each tuned row reached on the split it was tuned on, tagged with that split
    and the metric tuning chose by (its primary one): they were rows of the reported split,
    under a metric named "dev", and read as held-out figures."""
    metric = primary_metric(dev)
    return [row for method in TUNED_ROWS for row in _rows(dev, method, {metric: tuned.dev[method]})]


def _rows(dataset: Evaluable, method: str, metrics: dict[str, float]) -> list[dict]:
    """Tidy rows for one method's figures."""
    return [
        {"dataset": dataset.name, "split": dataset.split, "method": method, "metric": k, "value": v}
        for k, v in metrics.items()
    ]


def uncertainty_quality(
    dataset: Dataset,
    result: Comparison,
    method: str,
    more: Mapping[str, np.ndarray] | None = None,
) -> list[dict]:
    """Does the method's uncertainty predict its failures? AUROC, risk-coverage, binned recall
    (`more`: query signals besides the harness's, such as the learned confidence)."""
    per_item = result.outcomes[method].per_item
    if len(per_item.get("uncertainty", ())) < 2:
        return []  # classification, or one item: nothing to rank its failure against
    if isinstance(dataset, RetrievalDataset):
        judged = judged_metrics(reported_metrics(dataset, result.metrics))
        figures, curves = _retrieval_uncertainty(per_item, more or {}, judged)
    elif isinstance(dataset, StsDataset):
        figures, curves = _sts_uncertainty(per_item, dataset)
    else:
        return []
    result.curves[method] = curves
    return _rows(dataset, method, figures)


def _retrieval_uncertainty(
    per_item: dict[str, np.ndarray], more: Mapping[str, np.ndarray], judged: tuple[str, str]
) -> tuple[dict, dict]:
    """Per query-level signal: AUROC for both failure definitions (`judged`: the metric below
    its median, `failed_queries`, and no relevant document within its cutoff), coverage and
    decile figures."""
    signals = confidence_signals(
        per_item["top_scores"], per_item["top_vars"], per_item["uncertainty"], per_item["top_dots"]
    )
    signals.update(more)
    metric, miss = judged
    quality = per_item[metric]
    labels = _failure_labels(quality, per_item[miss], judged)
    figures: dict[str, float] = {}
    curves: dict[str, dict] = {"risk_coverage": {}, "binned": {}}
    for name, signal in signals.items():
        for suffix, failed in labels.items():
            figures[f"auroc:{name}{suffix}"] = math.nan if failed is None else auroc(signal, failed)
        figures[f"{metric}@coverage80:{name}"] = quality_at_coverage(signal, quality, COVERAGE)
        _, per_bin, rho = binned_quality(signal, per_item[DECILE_METRIC], _bins(signal))
        figures[f"{DECILE_METRIC}_decile_spearman:{name}"] = rho
        curves["risk_coverage"][name] = risk_coverage(signal, quality)
        curves["binned"][name] = (bin_quantiles(len(signal), _bins(signal)), per_bin)
    figures[f"{metric}@coverage100"] = float(np.mean(quality))
    return figures, curves


def _failure_labels(
    quality: np.ndarray, recall: np.ndarray, judged: tuple[str, str]
) -> dict[str, np.ndarray | None]:
    """Each failure label (`failed_queries`) by its AUROC key's suffix, which names the metric
    unless it is the default's nDCG@10 (`auroc:<signal>`, as readme_tables.py and stored JSONs
    read it); None, with one warning saying what happened, for a label of one class: auroc's
    own ("all N items succeeded", per signal) named neither the metric nor the cause, and the
    key alone (`auroc:<signal>=0 is nan`) named no figure `eval --compare` prints."""
    metric, miss = judged
    failed = failed_queries(dict(enumerate(quality)), dict(enumerate(recall)))
    n, cutoff = len(quality), miss.partition("@")[2]
    low, zero = "" if metric == DEFAULT_JUDGED else f":{metric}<median", f":{miss}=0"
    labels = {low: failed[NDCG_BELOW_MEDIAN], zero: failed[RECALL10_ZERO]}
    reach = f"a relevant document in its top {cutoff}"
    spotted = {low: f"queries below the median {metric}", zero: f"queries with {miss} = 0"}
    why = {
        low: f"every one of the {n} queries scores {metric} {quality[0]:g}, so none falls "
        "below another",
        zero: f"all {n} queries have {miss} = 0, none finds {reach}"
        if failed[RECALL10_ZERO].all()
        else f"none of the {n} queries has {miss} = 0, each finds {reach}",
    }
    one_class = [suffix for suffix, label in labels.items() if label.all() or not label.any()]
    for suffix in one_class:
        warn_caller(
            f"the uncertainty signals' AUROC for spotting {spotted[suffix]} (--json: "
            f"auroc:<signal>{suffix}) is nan: {why[suffix]}",
            RuntimeWarning,
        )
    return {suffix: None if suffix in one_class else label for suffix, label in labels.items()}


def _sts_uncertainty(per_item: dict[str, np.ndarray], dataset: StsDataset) -> tuple[dict, dict]:
    """Does pair uncertainty flag the pairs whose rank is furthest from gold?"""
    error = abs_rank_error(per_item["pred"], dataset.scores)
    worst = top_quartile(error)
    figures: dict[str, float] = {}
    curves: dict[str, dict] = {"risk_coverage": {}, "binned": {}}
    for name in ("uncertainty", "std"):
        signal = per_item[name]
        figures[f"auroc:{name}"] = auroc(signal, worst)
        rho = spearman(signal, error, diagnostic=f"{name} with rank error")
        figures[f"abs_rank_error_spearman:{name}"] = rho
        curves["risk_coverage"][name] = risk_coverage(signal, 1 - error)
        _, quality, _ = binned_quality(signal, 1 - error, _bins(signal))
        curves["binned"][name] = (bin_quantiles(len(signal), _bins(signal)), quality)
    return figures, curves


def bin_quantiles(n: int, n_bins: int) -> np.ndarray:
    """Where each `binned_quality` bin of n items sits among them: the mean of its items'
    mid-rank quantiles, (rank + 0.5) / n, 0 = least uncertain. Signals on different scales
    (a score, a variance) share this axis; their own bin means would not."""
    quantiles = (np.arange(n) + 0.5) / n
    return np.array([part.mean() for part in np.array_split(quantiles, n_bins)])


def _bins(signal: np.ndarray) -> int:
    """Deciles, or one bin per item on a dataset of fewer than ten."""
    return min(BINS, len(signal))


def model_diagnostics(
    embedded: Embedded,
    dataset: Evaluable,
    outcomes: dict[str, Outcome],
    metrics: Sequence[str] = (),
) -> list[dict]:
    """Per model: how much u_k varies across texts (CV) and whether it tracks its own errors
    (on a retrieval split, in the metric `judged_metrics` reads of `metrics`)."""
    rows: list[dict] = []
    for k, model in enumerate(embedded.models):
        u = {role: uncertainty(parts[k]) for role, parts in embedded.parts.items()}
        every = np.concatenate(list(u.values()))
        figures = {
            "u_mean": float(every.mean()),
            "u_cv": float(every.std() / every.mean()) if every.mean() > 0 else float("nan"),
        }
        single = outcomes.get(f"single:{model}")
        if single is not None:
            figures.update(_own_error_tracking(dataset, u, single, metrics))
        rows += _rows(dataset, f"single:{model}", figures)
    return rows


def _own_error_tracking(
    dataset: Dataset, u: dict[str, np.ndarray], single: Outcome, metrics: Sequence[str]
) -> dict:
    """Spearman of a model's per-item uncertainty with its own per-item error."""
    if isinstance(dataset, StsDataset):
        error = abs_rank_error(single.per_item["pred"], dataset.scores)
        signal = u["a"] + u["b"]
    elif isinstance(dataset, RetrievalDataset):
        metric, _ = judged_metrics(reported_metrics(dataset, metrics))
        error = 1 - single.per_item[metric]
        signal = u["queries"]
    else:
        return {}
    return {
        "u_error_spearman": spearman(
            signal, error, diagnostic="a model's uncertainty with its error"
        )
    }


def write_plots(result: Comparison, dataset: Evaluable, directory: str | os.PathLike) -> list[Path]:
    """Risk-coverage and per-bin quality plots of each method's uncertainty signals, as PNG."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    quality = bin_label = "1 - abs rank error"
    if isinstance(dataset, RetrievalDataset):  # the figures `_retrieval_uncertainty` judged by
        judged, _ = judged_metrics(reported_metrics(dataset, result.metrics))
        quality, bin_label = metric_label(judged), metric_label(DECILE_METRIC)
    taken: set[str] = set()
    for method, curves in result.curves.items():
        stem = file_stem(f"{dataset.name}-{dataset.split}-{method}", taken)
        paths.append(
            plot_risk_coverage(
                curves["risk_coverage"],
                directory / f"{stem}-risk-coverage.png",
                f"{dataset.name} {dataset.split}: {quality} of the most confident ({method})",
            )
        )
        paths.append(
            plot_binned(
                curves["binned"],
                directory / f"{stem}-binned.png",
                f"{dataset.name} {dataset.split}: {bin_label} per uncertainty decile ({method})",
                xlabel=QUANTILE_AXIS,
                ylabel=f"mean {bin_label}",
            )
        )
    return paths


#: What a plot's file name keeps of a name; every other run of characters is one `_`.
_FILE_SAFE = re.compile(r"[^\w.:+@=-]+")


def file_stem(name: str, taken: set[str] | None = None) -> str:
    """`name` as a file name a shell takes as one word (`sf-test-retrieval as shipped` is
    `sf-test-retrieval_as_shipped`), made unique among `taken` by `-2`, `-3` ..., and taken."""
    stem = base = _FILE_SAFE.sub("_", name)
    taken = set() if taken is None else taken
    for n in itertools.count(2):
        if stem not in taken:
            break
        stem = f"{base}-{n}"
    taken.add(stem)
    return stem


#: How a plot writes a retrieval metric's name.
METRIC_LABELS = {"ndcg": "nDCG", "recall": "Recall", "mrr": "MRR"}


def metric_label(metric: str) -> str:
    """A retrieval metric as a reader knows it (`ndcg@10` is nDCG@10), for plot titles."""
    name, _, cutoff = metric.partition("@")
    return f"{METRIC_LABELS[name]}@{cutoff}"


def markdown_table(
    rows: Sequence[dict],
    metrics: Sequence[str],
    columns: Mapping[str, Mapping[str, str]] | None = None,
    same: Sequence[Sequence[str]] = (),
) -> str:
    """Methods as rows, chosen metrics as columns (x100), in the order methods first appear;
    `columns`: more columns, header -> text per method (what a tuned row chose, a difference);
    `same`: groups of rows alike by construction, shown once as `a = b` with a footnote."""
    methods = list(dict.fromkeys(r["method"] for r in rows if r["metric"] in metrics))
    value = {(r["method"], r["metric"]): r["value"] for r in rows}
    label = {names[0]: " = ".join(names) for names in same}
    hidden = {name for names in same for name in names[1:]}
    extra = dict(columns or {})
    header = "| method | " + " | ".join([*metrics, *extra]) + " |"
    lines = [header, "|---|" + "---:|" * len(metrics) + "---|" * len(extra)]
    group = {names[0]: names for names in same}
    for method in (m for m in methods if m not in hidden):
        cells = [f"{100 * value[(method, m)]:.2f}" if (method, m) in value else "" for m in metrics]
        named = group.get(method, (method,))  # a merged row: the first of its names with a text
        cells += [next(filter(None, map(texts.get, named)), "") for texts in extra.values()]
        lines.append(f"| {label.get(method, method)} | " + " | ".join(cells) + " |")
    if same:
        shown = "; ".join(f"`{label[names[0]]}`" for names in same)
        lines.append(
            f"\n{shown}: the same fusion and score by construction (uniform weights whether "
            "called mean or concat; uec at T = inf gives each text its prior, and its score at "
            "β = 0 is the cosine; a single model is weights of 1 on it and 0 on the others), "
            "scored once and shown once"
        )
    return "\n".join(lines)


def earlier_rows(
    path: Path, key: Callable[[dict], K], to_run: Mapping[K, str], resume: bool
) -> tuple[list[dict], dict, set[K]]:
    """A results file's rows worth keeping, its config, and the keys they already answer.

    `to_run` maps each key about to run to the fingerprint it would run with now. A key not
    to run keeps its rows as they are; with `resume`, a key whose rows carry that fingerprint
    keeps them and is done; any other rows of a key to run are dropped (run again): kept, they
    would stand beside the new ones, or under a fingerprint that did not make them.
    """
    if not path.is_file():
        return [], {}, set()
    previous = json.loads(path.read_text())
    kept: list[dict] = []
    done: set[K] = set()
    for row in previous["rows"]:
        name = key(row)
        if name not in to_run:
            kept.append(row)
        elif resume and row.get("fingerprint") == to_run[name]:
            kept.append(row)
            done.add(name)
    return kept, previous["config"], done


def write_json(
    path: str | os.PathLike,
    rows: Sequence[dict],
    config: dict,
    sections: Mapping[str, object] | None = None,
) -> None:
    """Rows plus the configuration that reproduces them (and `sections`), written atomically."""
    atomic.write_bytes(path, json_bytes(rows, config, sections))


def json_bytes(
    rows: Sequence[dict], config: dict, sections: Mapping[str, object] | None = None
) -> bytes:
    """Rows plus the configuration that reproduces them (and `sections`, more top-level keys
    such as per-item values) as a JSON document, for a file or a stream."""
    payload = _finite({"config": config, "rows": list(rows), **(sections or {})})
    text = json.dumps(payload, indent=1, default=_jsonable, allow_nan=False)
    return (text + "\n").encode()


def _finite(value: object) -> object:
    """inf and nan as the strings "inf"/"nan": strict JSON readers reject the bare tokens."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):  # a dataclass instance, as configs hold
        return _finite(asdict(value))  # type: ignore[call-overload]
    return value


def _jsonable(value: object) -> object:
    """Numpy scalars and dataclasses in configs, as plain JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "__dataclass_fields__"):  # a dataclass instance, as configs hold
        return asdict(value)  # type: ignore[call-overload]
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
