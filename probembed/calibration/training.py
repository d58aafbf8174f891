"""Training data for a calibrator: a pipeline's ranked top hits on a judged retrieval split.

Hits are ranked exactly as a search of a collection of the corpus ranks them (the pipeline's
fusion, tilted by the corpus's member agreement, and score, then `store.ranking.best` and
`with_moments`), so the features a calibrator is fitted on are the
features a search computes; hybrid rankings fuse BM25 in as a hybrid search does (and give
`probembed eval --hybrid` its figures: `hybrid_metrics`). Needs the `eval` extra (dataset
readers) and `store` (LanceDB, for BM25).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from probembed.calibration.calibrator import (
    HOLDOUT,
    MIN_ISOTONIC_HOLDOUT,
    RelevanceCalibrator,
)
from probembed.calibration.confidence import (
    CONFIDENCE_DEPTH,
    COVERAGE_HITS,
    QueryConfidence,
    coverage_features,
    query_features,
)
from probembed.calibration.features import (
    BASE_FEATURES,
    BM25_HIT_FEATURES,
    bm25_hit_features,
    cosine_spread,
    hit_features,
)
from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import (
    RETRIEVAL_DEPTH,
    Embedded,
    corpus_agreement,
    embed,
    exclude_self_matches,
    reported_metrics,
)
from probembed.evaluation.metrics import (
    per_query_metrics,
    retrieval_metrics,
    run_from_rankings,
)
from probembed.evaluation.uncertainty import NDCG_BELOW_MEDIAN, failed_queries
from probembed.fusion import Fused
from probembed.fusion.adapt import retilt
from probembed.pipeline import Pipeline
from probembed.scoring import score_matrix
from probembed.scoring.ensemble import hit_variance, member_cosines
from probembed.store import Database, ingest
from probembed.store.ranking import (
    Hybrid,
    Ranked,
    best,
    hybrid_depth,
    hybrid_ranked,
    with_moments,
)
from probembed.store.results import confidence

#: Hits per query the calibrator is fitted and evaluated on.
TOP = 10
#: Judged queries (with a relevant document) a calibrator needs: a fifth are held out to
#: judge its isotonic step, and the query confidence needs failed and good queries alike.
MIN_QUERIES = 20
#: Judged queries below which p_relevant is rough (`probembed tune` warns): fewer hold out
#: fewer than MIN_ISOTONIC_HOLDOUT queries, too few to judge the isotonic step, and fit the
#: logistic on under 1,000 hits.
ROUGH_QUERIES = round(MIN_ISOTONIC_HOLDOUT / HOLDOUT)
#: BM25 over a corpus: (query text, depth) -> (document id, score) pairs, best first, as
#: `Collection.text_search` gives them.
TextSearch = Callable[[str, int], Sequence[tuple[str, float]]]


@dataclass
class RankedSplit:
    """Every judged query's ranked hits (one more than TOP), their member cosines and labels."""

    query_ids: list[str]
    doc_ids: list[str]
    ranked: list[Ranked]
    #: (nq, depth, K) member cosines of each ranked hit (nan: a member with weight 0).
    cosines: np.ndarray | None
    #: (nq, depth) whether each ranked hit is judged relevant.
    relevant: np.ndarray
    #: (nq, depth, 2) each ranked hit's `bm25_hit_features` (hybrid rankings), or None.
    bm25_hits: np.ndarray | None = None

    def table(
        self, k: int = TOP, with_disagreement: bool = False, with_bm25: bool = False
    ) -> tuple[np.ndarray, ...]:
        """(X, y, query index) over the first k hits of every query."""
        if with_bm25 and self.bm25_hits is None:
            raise ValueError("BM25 hit features exist only for hybrid rankings (hybrid_split)")
        cosines = self.cosines if with_disagreement else None
        if with_disagreement and cosines is None:
            raise ValueError(
                "member disagreement needs member cosines, i.e. a concat-fused pipeline"
            )
        rows, labels, owner = [], [], []
        for i, r in enumerate(self.ranked):
            spread = None if cosines is None else cosine_spread(cosines[i])
            found = self.bm25_hits[i] if with_bm25 and self.bm25_hits is not None else None
            features = hit_features(r.dots, r.variances, k, spread, found)
            rows.append(features)
            labels.append(self.relevant[i, : len(features)])
            owner.append(np.full(len(features), i))
        return np.concatenate(rows), np.concatenate(labels), np.concatenate(owner)

    def query_table(self) -> np.ndarray:
        """(nq, F) query-confidence features of every query (needs member cosines)."""
        if self.cosines is None:
            raise ValueError("query features need member cosines, i.e. a concat-fused pipeline")
        return np.stack(
            [query_features(r.dots, c) for r, c in zip(self.ranked, self.cosines, strict=True)]
        )

    def coverage_table(self, dataset: RetrievalDataset) -> np.ndarray:
        """(nq, 2) `coverage_features` of every query's first hits' texts, as a search reads
        them (the store keeps the reader's text, as the dataset does)."""
        return np.stack(
            [
                coverage_features(
                    dataset.queries[q],
                    [dataset.corpus[self.doc_ids[p]] for p in r.positions[:COVERAGE_HITS]],
                )
                for q, r in zip(self.query_ids, self.ranked, strict=True)
            ]
        )

    def per_query(self, dataset: RetrievalDataset, k: int = TOP) -> dict[str, dict[str, float]]:
        """nDCG@10 and Recall@10 per query of the top k in the order a search shows them: keyed
        by rank, since the metric would order tied scores (RRF's are often tied) by id."""
        rankings = [[self.doc_ids[p] for p in r.positions] for r in self.ranked]
        # every hit the split holds, as before: its ranking chose them (self-matches too)
        run = run_from_rankings(self.query_ids, rankings, k, keep_self_matches=True)
        return per_query_metrics(dataset.qrels, run, ("ndcg@10", "recall@10"))

    def failed(self, dataset: RetrievalDataset) -> np.ndarray:
        """Per query, whether its nDCG@10 is below the median (at the lowest value where none
        is, `failed_queries`): the query-confidence target."""
        metrics = self.per_query(dataset)
        labels = failed_queries(metrics["ndcg@10"], metrics["recall@10"], self.query_ids)
        return labels[NDCG_BELOW_MEDIAN]


def search_confidence(
    calibrator: RelevanceCalibrator | None, split: RankedSplit, dataset: RetrievalDataset
) -> np.ndarray:
    """Each query's `confidence` as a dense search of a collection of the corpus reports it:
    the calibrator's learned one (its text model reading the coverage of the first hits'
    texts, where it has one), else the outrank probability of the first two hits."""
    dots = np.stack([r.dots for r in split.ranked])
    if calibrator is None or calibrator.confidence is None or split.cosines is None:
        variances = np.stack([r.variances for r in split.ranked])
        return np.asarray(confidence(dots, variances), dtype=np.float64)
    learned = calibrator.confidence
    coverage = None if learned.text_model is None else split.coverage_table(dataset)
    return np.asarray(learned.predict(dots, split.cosines, None, coverage), dtype=np.float64)


def rank_split(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    depth: int = CONFIDENCE_DEPTH,
    embedded: Embedded | None = None,
) -> RankedSplit:
    """Rank the corpus for every judged query with the pipeline's own fusion and score."""
    embedded = embedded or embed(pipeline, dataset)
    queries, docs, positions, top = _dense(pipeline, dataset, embedded, depth)
    return _split(pipeline, dataset, embedded, queries, docs, positions, top)


def hybrid_split(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    bm25: TextSearch,
    embedded: Embedded | None = None,
) -> tuple[RankedSplit, np.ndarray]:
    """Every judged query ranked as a hybrid search ranks it, with its lexical features.

    The dense ranking and BM25's (`bm25(text, depth)`: a collection's `text_search` over the
    same corpus) each to the depth a search takes (`store.ranking.hybrid_depth`), fused by
    reciprocal rank to CONFIDENCE_DEPTH hits (`store.ranking.hybrid_ranked`, as a search
    does), with each hit's `bm25_hit_features`; (nq, 2) `lexical_features` per query. A
    query's own document is in neither list unless the dataset keeps self-matches.
    """
    embedded = embedded or embed(pipeline, dataset)
    queries, docs, hybrid = _hybrid(pipeline, dataset, bm25, embedded, CONFIDENCE_DEPTH)
    if len({len(h.positions) for h in hybrid}) != 1:
        raise ValueError(f"hybrid training needs at least {CONFIDENCE_DEPTH} documents")
    positions = np.stack([h.positions for h in hybrid])
    fused = np.stack([h.scores for h in hybrid])
    split = _split(pipeline, dataset, embedded, queries, docs, positions, fused)
    hits = [bm25_hit_features(h.positions, h.bm25_positions, h.bm25_scores) for h in hybrid]
    return replace(split, bm25_hits=np.stack(hits)), np.stack([h.lexical for h in hybrid])


def hybrid_metrics(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    corpus: Path,
    embedded: Embedded | None = None,
    metrics: Sequence[str] = (),
) -> dict[str, float]:
    """The reported metrics (`harness.reported_metrics`: `metrics`, by default nDCG@10,
    Recall@100 and MRR@10) of the split as a hybrid search of a collection of the corpus
    (`corpus`: the BEIR folder) ranks it, so `probembed eval --hybrid` reports what
    `Collection.search(hybrid=True)` finds.

    Each query is ranked as the collection ranks it (its own document included), then that
    document is left out of the run, as BEIR leaves it out of any run (unless the dataset
    keeps self-matches); one hit more than the run keeps is ranked to fill its place.
    """
    names = reported_metrics(dataset, metrics)  # refused before any encoding
    embedded = embedded or embed(pipeline, dataset)
    as_stored = replace(dataset, keep_self_matches=True)
    with corpus_text_search(pipeline, corpus) as bm25:
        _, _, hybrid = _hybrid(pipeline, as_stored, bm25, embedded, RETRIEVAL_DEPTH + 1)
    ids = embedded.ids["docs"]
    rankings = [[ids[p] for p in h.positions] for h in hybrid]
    run = run_from_rankings(
        embedded.ids["queries"], rankings, RETRIEVAL_DEPTH, dataset.keep_self_matches
    )
    return retrieval_metrics(dataset.qrels, run, names)


def _hybrid(
    pipeline: Pipeline, dataset: RetrievalDataset, bm25: TextSearch, embedded: Embedded, k: int
) -> tuple[Fused, Fused, list[Hybrid]]:
    """Fused queries and documents, and each query's k best by reciprocal-rank fusion of the
    dense ranking and BM25's, each to the depth a search takes (`hybrid_depth`)."""
    depth = hybrid_depth(k)
    queries, docs, dense, _ = _dense(pipeline, dataset, embedded, depth)
    where = {doc_id: p for p, doc_id in enumerate(embedded.ids["docs"])}
    hybrid = []
    for row, query_id in zip(dense, embedded.ids["queries"], strict=True):
        found = [(where.get(d), s) for d, s in _lexical(bm25, dataset, query_id, depth)]
        hybrid.append(hybrid_ranked(row, found, k))
    return queries, docs, hybrid


def _lexical(
    bm25: TextSearch, dataset: RetrievalDataset, query_id: str, depth: int
) -> list[tuple[str, float]]:
    """BM25's `depth` best for a query, less its own document unless the dataset keeps
    self-matches (one hit more asked for fills its place): the dense list leaves it out
    alike, so neither list, nor their fusion, trains on a query finding itself."""
    hits = bm25(dataset.queries[query_id], depth + 1)
    return [(d, s) for d, s in hits if dataset.keep_self_matches or d != query_id][:depth]


def _dense(
    pipeline: Pipeline, dataset: RetrievalDataset, embedded: Embedded, depth: int
) -> tuple[Fused, Fused, np.ndarray, np.ndarray]:
    """Fused queries and documents, and each query's `depth` best positions and scores."""
    queries = pipeline.fuse(embedded.parts["queries"])
    docs = pipeline.fuse(embedded.parts["docs"])
    adapted = pipeline.adapted(corpus_agreement(pipeline, embedded))
    if adapted is not None:  # as a collection of the corpus serves it: tilted by its agreement
        queries, docs = (retilt(f, pipeline.blocks, adapted[1]) for f in (queries, docs))
    scores = score_matrix(queries.gaussian, docs.gaussian, pipeline.score.name, pipeline.score.beta)
    qids, dids = embedded.ids["queries"], embedded.ids["docs"]
    if not dataset.keep_self_matches:
        exclude_self_matches(scores, qids, dids)
    every = np.broadcast_to(np.arange(len(dids)), scores.shape)
    positions, top = best(every, scores, depth)
    return queries, docs, positions, top


def _split(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    embedded: Embedded,
    queries: Fused,
    docs: Fused,
    positions: np.ndarray,
    scores: np.ndarray,
) -> RankedSplit:
    """The ranked hits as a search reports them: moments, the members' spread, labels."""
    ranked = with_moments(queries.gaussian, docs.gaussian, positions, scores)
    variances = hit_variance(  # what hits report: the members' own, plus their spread
        np.stack([r.variances for r in ranked]),
        queries.gaussian.mean,
        queries.weights,
        docs.gaussian.mean,
        docs.weights,
        pipeline.blocks,
        positions,
    )
    ranked = [r._replace(variances=v) for r, v in zip(ranked, variances, strict=True)]
    qids, dids = embedded.ids["queries"], embedded.ids["docs"]
    judged = [dataset.qrels[q] for q in qids]
    relevant = np.array(
        [[j.get(dids[p], 0) > 0 for p in row] for j, row in zip(judged, positions, strict=True)]
    )
    cosines = _cosines(pipeline, queries, docs, positions)
    return RankedSplit(qids, dids, ranked, cosines, relevant)


@contextmanager
def corpus_text_search(pipeline: Pipeline, corpus: Path) -> Iterator[TextSearch]:
    """BM25 over a BEIR corpus as a collection searches it: the corpus ingested by the
    pipeline into a temporary LanceDB collection, removed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(tmp, create=True).collection("corpus")
        ingest(corpus, collection, pipeline, progress=True)
        yield collection.text_search


def _cosines(pipeline: Pipeline, queries, docs, positions: np.ndarray) -> np.ndarray | None:
    """Member cosines of every ranked hit, or None for a pipeline without a block per member."""
    if not pipeline.blocks:
        return None
    mean_q, mean_d = queries.gaussian.mean, docs.gaussian.mean
    # a query at a time: the gathered (1, depth, width) rows stay small
    return np.stack(
        [
            member_cosines(
                mean_q[i : i + 1],
                queries.weights[i : i + 1],
                mean_d,
                docs.weights,
                pipeline.blocks,
                row[None, :],
            )[0]
            for i, row in enumerate(positions)
        ]
    )


def check_judged(dataset: RetrievalDataset) -> None:
    """Refuse a split with too few judged queries to fit a calibrator, before any encoding."""
    judged = len(dataset.qrels)
    if judged < MIN_QUERIES:
        raise ValueError(
            f"{dataset.name} {dataset.split}: {judged} judged queries with a relevant document; "
            f"fitting a relevance calibrator needs at least {MIN_QUERIES}"
        )


def fit_calibrator(
    pipeline: Pipeline, dataset: RetrievalDataset, corpus: Path, seed: int = 0
) -> RelevanceCalibrator | None:
    """A pipeline's calibrator, query confidence and hybrid calibrator, fitted on its ranked
    hits of one judged split (`corpus`: the BEIR folder, for BM25): fitted for the pipeline's
    fusion and score, so refitted whenever they change.

    The top-TOP hits of each judged query, ranked by the pipeline's own fusion and score, are
    the relevance data; the same queries train the query confidence (label: nDCG@10 below the
    split's median), its text model (adding the coverage of the query's words by the first
    hits' texts) and its hybrid model (on the queries ranked as a hybrid search ranks them, BM25
    from a temporary collection of the corpus); hybrid searches read p_relevant from a second
    calibrator fitted on those hybrid hits, with their BM25 hit features. Seeded.

    A part the split cannot teach (its hits all of one class, or no query below the median) is
    left out with a UserWarning naming the split and why; None when not even the calibrator
    can be fitted.
    """
    check_judged(dataset)
    where = f"{dataset.name} {dataset.split}"
    embedded = embed(pipeline, dataset, progress=True)
    ranked = rank_split(pipeline, dataset, embedded=embedded)
    features, relevant, groups = ranked.table(TOP)
    if not _both_classes(relevant, where, "dense", "no relevance calibrator (no p_relevant)"):
        return None
    calibrator = RelevanceCalibrator.fit(features, relevant, groups, seed=seed)
    confidence = None
    failed = _failure_labels(ranked, dataset, where, "dense")
    if failed is not None:
        confidence = QueryConfidence.fit(ranked.query_table(), failed, len(pipeline.members), seed)
        confidence = confidence.with_model(
            "text_model", ranked.query_table(), ranked.coverage_table(dataset), failed, seed
        )
    with corpus_text_search(pipeline, corpus) as bm25:
        hybrid, lexical = hybrid_split(pipeline, dataset, bm25, embedded)
    hybrid_failed = (
        None if confidence is None else _failure_labels(hybrid, dataset, where, "hybrid")
    )
    if confidence is not None and hybrid_failed is not None:
        hybrid_features = np.concatenate([lexical, hybrid.coverage_table(dataset)], axis=1)
        confidence = confidence.with_model(
            "hybrid_model", hybrid.query_table(), hybrid_features, hybrid_failed, seed
        )
    info: dict[str, Any] = {
        **(calibrator.fit_info or {}),
        "dataset": f"{dataset.name}/{dataset.split}",
        "top": TOP,
        "pipeline": pipeline.name,
        "pipeline_fingerprint": pipeline.fingerprint,
        "score": {"name": pipeline.score.name, "beta": pipeline.score.beta},
    }
    shared = {key: info[key] for key in ("dataset", "top", "pipeline_fingerprint", "score")}
    return replace(
        calibrator,
        confidence=confidence,
        fit_info=info,
        hybrid=_hybrid_calibrator(hybrid, where, seed, shared),
    )


def _hybrid_calibrator(
    hybrid: RankedSplit, where: str, seed: int, shared: dict[str, Any]
) -> RelevanceCalibrator | None:
    """The hybrid searches' calibrator, or None (with a warning) where their hits are of one
    class: hybrid searches then read the dense one along the fused list."""
    hits, relevant, groups = hybrid.table(TOP, with_bm25=True)
    if not _both_classes(
        relevant, where, "hybrid", "no hybrid calibrator (hybrid searches read the dense one)"
    ):
        return None
    names = (*BASE_FEATURES, *BM25_HIT_FEATURES)
    # No isotonic step: its end blocks map the surest hits to exactly 1.0 and the least sure
    # to 0.0 (its held-out gain was 0.001-0.002 ECE on 162 queries)
    fitted = RelevanceCalibrator.fit(hits, relevant, groups, names, seed=seed, isotonic=False)
    return replace(fitted, fit_info={**(fitted.fit_info or {}), **shared, "ranking": "hybrid"})


def _both_classes(relevant: np.ndarray, where: str, ranking: str, left_out: str) -> bool:
    """Whether the ranked hits hold relevant and irrelevant ones; else a warning naming what
    is left out, since a calibrator learns nothing from one class."""
    if 0 < relevant.sum() < len(relevant):
        return True
    kind = "relevant" if relevant.all() else "irrelevant"
    warnings.warn(
        f"{where}: every top-{TOP} hit of every query ({ranking} ranking) is {kind}: {left_out}",
        UserWarning,
        stacklevel=3,
    )
    return False


def _failure_labels(
    split: RankedSplit, dataset: RetrievalDataset, where: str, ranking: str
) -> np.ndarray | None:
    """Each query's failure label (nDCG@10 below the median, `failed_queries`), or None with a
    warning where none fails (every query scores alike): a query confidence needs failed and
    good queries alike."""
    failed = split.failed(dataset)
    if failed.any():
        return failed
    ndcg = next(iter(split.per_query(dataset)["ndcg@10"].values()))
    alike = f"every query scores nDCG@10 {ndcg:.3f}"
    left_out = "no query confidence (searches report the outrank probability)"
    if ranking == "hybrid":
        left_out = "no hybrid model of the query confidence (hybrid searches read the dense one)"
    warnings.warn(
        f"{where}: {alike} ({ranking} ranking), so no query falls below the median to learn "
        f"failure from: {left_out}",
        UserWarning,
        stacklevel=3,
    )
    return None
