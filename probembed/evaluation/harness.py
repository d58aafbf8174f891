"""Methods side by side on one dataset, all from the same cached per-model embeddings.

A method is a fusion setting plus a score. Every dataset is embedded once per model (through
the pipeline's cache); each method then only fuses and scores, so `--compare` costs little
more than one method.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from probembed.evaluation.datasets import (
    ClassificationDataset,
    Dataset,
    Evaluable,
    RetrievalDataset,
    StsDataset,
    dataset_kind,
)
from probembed.evaluation.metrics import (
    DEFAULT_RETRIEVAL_METRICS as REPORTED,
)
from probembed.evaluation.metrics import (
    per_query_metrics,
    probe_correct,
    run_from_scores,
    spearman,
    validate_metric_names,
)
from probembed.fusion import Fused, member_blocks
from probembed.fusion.adapt import NEIGHBOURS, agreement, members_of
from probembed.gaussian import Gaussian
from probembed.pipeline import FusionConfig, Pipeline, ScoreConfig
from probembed.scoring import dot_variance, score_matrix, similarity
from probembed.scoring.ensemble import hit_variance

RETRIEVAL_DEPTH = 100
COSINE = ScoreConfig("dot", 0.0)
#: The metric of each kind that has only one (STS, classification).
SINGLE_METRICS = ("spearman", "accuracy")
#: A retrieval metric a report may name: ranx's name of nDCG, recall or MRR at a cutoff.
RETRIEVAL_METRIC = re.compile(r"(ndcg|recall|mrr)@([0-9]+)", re.ASCII)
#: What a report may name, for messages.
KNOWN_METRICS = (
    f"ndcg@K, recall@K, mrr@K (retrieval, K from 1 to {RETRIEVAL_DEPTH}), spearman (STS), "
    "accuracy (classification)"
)
#: The uncertainty report's per-decile figure whatever a report names: Recall@1, the
#: quality ProbVLM's binned check is defined on (`uncertainty.binned_quality`).
DECILE_METRIC = "recall@1"


@dataclass(frozen=True)
class Method:
    """A named way to turn per-model Gaussians into similarities: a fusion and a score."""

    name: str
    fusion: FusionConfig
    score: ScoreConfig = COSINE


def baseline_methods(models: Sequence[str]) -> list[Method]:
    """Each single model, the uniform mean and plain concatenation, all scored by cosine."""
    singles = [Method(f"single:{m}", FusionConfig(f"single:{m}")) for m in models]
    return [
        *singles,
        Method("mean", FusionConfig("mean")),
        Method("concat", FusionConfig("concat")),
    ]


@dataclass
class Embedded:
    """Per-model Gaussians of every text a dataset needs, by role (a/b, queries/docs, ...)."""

    models: tuple[str, ...]
    parts: dict[str, list[Gaussian]]
    ids: dict[str, list[str]] = field(default_factory=dict)

    def fused(self, role: str, fusion: FusionConfig) -> Fused:
        """Fuse one role's per-model Gaussians under a fusion setting."""
        return fusion.fuse(self.parts[role], self.models)

    def blocks(self, fusion: FusionConfig) -> tuple[int, ...]:
        """The members' widths in rows fused under `fusion`, as `Pipeline.blocks` has them for
        a pipeline of these members."""
        dims = [p.dim for p in next(iter(self.parts.values()))]
        return member_blocks(fusion.method, fusion.mode, dims)


def dataset_roles(dataset: Dataset) -> dict[str, Sequence[str] | dict[str, str]]:
    """The texts a dataset needs, by role (a dict of id -> text where items have ids)."""
    if isinstance(dataset, StsDataset):
        return {"a": dataset.sentence1, "b": dataset.sentence2}
    if isinstance(dataset, RetrievalDataset):
        return {"queries": dataset.queries, "docs": dataset.corpus}
    if isinstance(dataset, ClassificationDataset):
        return {"train": dataset.train_texts, "test": dataset.test_texts}
    raise TypeError(_not_evaluable(dataset))


def texts_held(pipeline: Pipeline, dataset: Dataset) -> tuple[int, int | None]:
    """(texts `embed` encodes for a dataset, how many of them the pipeline's cache holds for
    every member): a rerun said it embedded every text again, read from the cache. None for
    the second where there is no cache to read (none, or one that could not open its file,
    found by the look itself): "0 from the cache" spoke of a cache that was off."""
    texts = [
        list(t.values()) if isinstance(t, dict) else list(t)
        for t in dataset_roles(dataset).values()
    ]
    held = sum(int(pipeline.held(t).sum()) for t in texts)
    caching = pipeline.cache is not None and pipeline.cache.enabled
    return sum(map(len, texts)), held if caching else None


def _not_evaluable(dataset: object) -> str:
    """Why a dataset (a pairs file) cannot be scored, and what can."""
    return f"cannot evaluate a {type(dataset).__name__}; give STS, retrieval or classification"


def embed(pipeline: Pipeline, dataset: Dataset, progress: bool = False) -> Embedded:
    """Embed every text of the dataset once per model (cached) and keep them by role."""
    parts, ids = {}, {}
    for role, texts in dataset_roles(dataset).items():
        if isinstance(texts, dict):
            ids[role] = list(texts)
            texts = list(texts.values())
        parts[role] = pipeline.encode_members(list(texts), progress)
    return Embedded(pipeline.models, parts, ids)


def corpus_agreement(pipeline: Pipeline, embedded: Embedded) -> np.ndarray | None:
    """The members' agreement on a retrieval corpus as a collection of it measures it: over
    the documents in id order (the collection's sample is drawn in that order), from the
    fused rows as stored (weights in float32: an ulp flips a tied neighbour, and the tilt
    would not be the collection's); None for too few documents or fewer than two member
    blocks (one member agrees with no other: nothing to tilt)."""
    ids = np.asarray(embedded.ids["docs"], dtype=str)
    if len(ids) <= NEIGHBOURS or len(pipeline.blocks) < 2:
        return None
    order = np.argsort(ids, kind="stable")
    fused = pipeline.fuse([part[order] for part in embedded.parts["docs"]])
    stored = Fused(fused.gaussian, fused.weights.astype(np.float32), fused.models)
    return agreement(members_of(stored, pipeline.blocks))


def searched_as(pipeline: Pipeline, embedded: Embedded, dataset: Dataset, name: str) -> Method:
    """The pipeline's own method as a search of it runs: on a retrieval corpus (a collection)
    with the weights tilted by the corpus's member agreement, as the collection's would be;
    on pairs and labelled texts, which `Pipeline.encode` fuses on the prior, the prior."""
    fusion = pipeline.fusion
    adapted = None
    if isinstance(dataset, RetrievalDataset) and pipeline.adapt.gamma > 0:
        adapted = pipeline.adapted(corpus_agreement(pipeline, embedded))
    if adapted is not None:
        tilted = tuple(float(w) for w in adapted[0])
        key = "prior" if fusion.method == "uec" else "weights"
        fusion = replace(fusion, **{key: tilted})  # type: ignore[arg-type]  # a field by name
    return Method(name, fusion, pipeline.score)


@dataclass
class Outcome:
    """A method's metrics on a dataset, plus the per-item arrays uncertainty analysis and paired
    comparisons need, and the items' ids (query ids; an STS pair's or a test text's position in
    its split, from 0), aligned with them."""

    metrics: dict[str, float]
    per_item: dict[str, np.ndarray] = field(default_factory=dict)
    ids: tuple[str, ...] = ()


def evaluate(
    embedded: Embedded, dataset: Evaluable, method: Method, metrics: Sequence[str] = ()
) -> Outcome:
    """Score one method on one dataset, in `metrics` (`reported_metrics`: by default its kind's)."""
    names = reported_metrics(dataset, metrics)
    if isinstance(dataset, StsDataset):
        return _evaluate_sts(embedded, dataset, method)
    if isinstance(dataset, RetrievalDataset):
        return _evaluate_retrieval(embedded, dataset, method, names)
    if isinstance(dataset, ClassificationDataset):
        return _evaluate_classification(embedded, dataset, method)
    raise TypeError(_not_evaluable(dataset))  # a pairs file met the probe's KeyError 'train'


def primary_metric(dataset: Evaluable) -> str:
    """The figure a dataset is ranked by."""
    if isinstance(dataset, StsDataset):
        return "spearman"
    if isinstance(dataset, RetrievalDataset):
        return "ndcg@10"
    return "accuracy"


def reported_metrics(dataset: Evaluable, names: Sequence[str] = ()) -> tuple[str, ...]:
    """The metrics a report of the dataset gives: `names`, checked (`checked_metric`) and
    each once, or by default its kind's (nDCG@10, Recall@100 and MRR@10 of a retrieval
    split; an STS or classification split has one, its primary metric)."""
    if not names:
        return REPORTED if isinstance(dataset, RetrievalDataset) else (primary_metric(dataset),)
    checked = (checked_metric(dataset, name) for name in validate_metric_names(names))
    return tuple(dict.fromkeys(checked))


def checked_metric(dataset: Evaluable, name: str) -> str:
    """`name` as reports write it (`Recall@05` is `recall@5`), refused with the known names when
    unknown, or with the dataset's own when it is another kind's: a name the report cannot
    give would be dropped, or fail in ranx, after the whole encoding."""
    metric = name.strip().lower()
    retrieval = RETRIEVAL_METRIC.fullmatch(metric)
    if metric not in SINGLE_METRICS and retrieval is None:
        raise ValueError(f"unknown metric {name!r}; known: {KNOWN_METRICS}")
    if isinstance(dataset, RetrievalDataset):
        if retrieval is not None:
            return _cutoff_metric(retrieval, name)
        has = "is scored by ndcg@K, recall@K or mrr@K"
    else:
        if metric == primary_metric(dataset):
            return metric
        has = f"has one metric, {primary_metric(dataset)}"
    raise ValueError(
        f"metric {name!r} does not apply to {dataset.name} ({dataset_kind(dataset)}): a split "
        f"of its kind {has}"
    )


def judged_metrics(names: Sequence[str]) -> tuple[str, str]:
    """What a retrieval report's uncertainty diagnostics judge a query by, so they read the
    metric its user chose: the first of `names` (`reported_metrics`: nDCG@10 by default),
    and recall at that metric's cutoff, whose 0 is a complete miss (no relevant document)."""
    first = names[0]
    return first, f"recall@{first.partition('@')[2]}"


#: What the uncertainty diagnostics judge by without --metric: their figures' names predate
#: --metric and say no metric (`auroc:<signal>`), as readme_tables.py and stored JSONs read them.
DEFAULT_JUDGED = judged_metrics(REPORTED)[0]


def _cutoff_metric(match: re.Match[str], name: str) -> str:
    """A retrieval metric's name with its cutoff as a plain number, refused past the depth
    every query is ranked to (a deeper cutoff would read a run cut short)."""
    cutoff = int(match[2])
    if not 1 <= cutoff <= RETRIEVAL_DEPTH:
        raise ValueError(
            f"metric {name!r}: the cutoff must be from 1 to {RETRIEVAL_DEPTH}, the depth every "
            "query is ranked to"
        )
    return f"{match[1]}@{cutoff}"


def _evaluate_sts(embedded: Embedded, dataset: StsDataset, method: Method) -> Outcome:
    """Spearman of the pair scores against gold; per pair: prediction, std, uncertainty."""
    a = embedded.fused("a", method.fusion)
    b = embedded.fused("b", method.fusion)
    pairs = similarity(  # each pair's std as a search hit's: `Pipeline.similarity_pairwise`
        a.gaussian,
        b.gaussian,
        method.score.name,
        method.score.beta,
        a.weights,
        b.weights,
        embedded.blocks(method.fusion),
        pairwise=True,
    )
    pred = pairs.score
    per_item = {
        "pred": pred,
        "std": pairs.std,
        "uncertainty": a.gaussian.total_variance() + b.gaussian.total_variance(),
        "weights_a": a.weights,
    }
    return Outcome({"spearman": spearman(pred, dataset.scores)}, per_item, _positions(len(pred)))


def _positions(n: int) -> tuple[str, ...]:
    """Ids of items that have none but their place in the split: "0", "1", ..."""
    return tuple(map(str, range(n)))


def _evaluate_retrieval(
    embedded: Embedded, dataset: RetrievalDataset, method: Method, names: Sequence[str]
) -> Outcome:
    """The `names` metrics of a full scan; per query: those, what the uncertainty report
    reads (`judged_metrics`, DECILE_METRIC) and top-hit statistics.

    Judged queries no document is relevant to are left out of both, with a warning."""
    fused_queries = embedded.fused("queries", method.fusion)
    fused_docs = embedded.fused("docs", method.fusion)
    queries, docs = fused_queries.gaussian, fused_docs.gaussian
    scores = score_matrix(queries, docs, method.score.name, method.score.beta)
    qids, dids = embedded.ids["queries"], embedded.ids["docs"]
    if not dataset.keep_self_matches:
        exclude_self_matches(scores, qids, dids)
    run = run_from_scores(qids, dids, scores, k=RETRIEVAL_DEPTH)
    computed = tuple(dict.fromkeys((*names, *judged_metrics(names), DECILE_METRIC)))
    per_query = per_query_metrics(dataset.qrels, run, computed)
    metrics = {name: float(np.mean(list(per_query[name].values()))) for name in names}
    top = np.argsort(-scores, axis=1)[:, :2]
    top_scores = np.take_along_axis(scores, top, axis=1)
    top_dots = np.einsum(  # what the variances are of, whatever score ranked the hits
        "qd,qkd->qk", queries.mean.astype(np.float64), docs.mean[top].astype(np.float64)
    )
    top_vars = hit_variance(
        dot_variance(queries, docs, candidates=top),
        queries.mean,
        fused_queries.weights,
        docs.mean,
        fused_docs.weights,
        embedded.blocks(method.fusion),
        top,
    )
    # a query no document is relevant to has no figure (`per_query_metrics` warned): the
    # per-query arrays hold the queries scored, as the means do
    scored = np.array([q in per_query[computed[0]] for q in qids], dtype=bool)
    per_item = {
        name: np.array([values[q] for q in qids if q in values])
        for name, values in per_query.items()
    }
    per_item.update(
        top_scores=top_scores[scored],
        top_dots=top_dots[scored],
        top_vars=top_vars[scored],
        uncertainty=queries.total_variance()[scored],
    )
    return Outcome(
        metrics, per_item, tuple(q for q, kept in zip(qids, scored, strict=True) if kept)
    )


def exclude_self_matches(
    scores: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str]
) -> None:
    """Score -inf (never retrieved) the document that shares each query's id, as BEIR does."""
    position = {doc_id: j for j, doc_id in enumerate(doc_ids)}
    for i, query_id in enumerate(query_ids):
        j = position.get(query_id)
        if j is not None:
            scores[i, j] = -np.inf


def _evaluate_classification(
    embedded: Embedded, dataset: ClassificationDataset, method: Method
) -> Outcome:
    """Accuracy of a logistic-regression probe on the fused means, as MTEB does."""
    train = embedded.fused("train", method.fusion).gaussian.mean
    test = embedded.fused("test", method.fusion).gaussian.mean
    correct = probe_correct(train, dataset.train_labels, test, dataset.test_labels)
    per_item = {"correct": correct.astype(np.float64)}
    return Outcome({"accuracy": float(correct.mean())}, per_item, _positions(len(correct)))
