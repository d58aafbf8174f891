"""Training data for a calibrator: a pipeline's ranked top hits on a judged retrieval split.

Hits are ranked exactly as a search ranks them (the pipeline's fusion and score, then
`store.ranking.best` and `with_moments`), so the features a calibrator is fitted on are the
features a search computes. Needs the `eval` extra (dataset readers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from probembed.calibration.confidence import CONFIDENCE_DEPTH, lexical_features, query_features
from probembed.calibration.features import disagreement, hit_features, member_cosines
from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import Embedded, embed, exclude_self_matches
from probembed.evaluation.metrics import per_query_metrics
from probembed.evaluation.uncertainty import NDCG_BELOW_MEDIAN, failed_queries
from probembed.pipeline import Pipeline
from probembed.scoring import score_matrix
from probembed.scoring.ensemble import between_variance
from probembed.store.index import IndexSettings
from probembed.store.ranking import Ranked, best, reciprocal_rank_fusion, with_moments

#: Hits per query the calibrator is fitted and evaluated on.
TOP = 10


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

    def table(self, k: int = TOP, with_disagreement: bool = False) -> tuple[np.ndarray, ...]:
        """(X, y, query index) over the first k hits of every query."""
        rows, labels, owner = [], [], []
        for i, r in enumerate(self.ranked):
            spread = disagreement(self.cosines[i]) if with_disagreement else None
            features = hit_features(r.dots, r.variances, k, spread)
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

    def per_query(self, dataset: RetrievalDataset, k: int = TOP) -> dict[str, dict[str, float]]:
        """nDCG@10 and Recall@10 per query of the ranked top k, by the evaluation metrics."""
        run = {
            q: {
                self.doc_ids[p]: float(s)
                for p, s in zip(r.positions[:k], r.scores[:k], strict=True)
            }
            for q, r in zip(self.query_ids, self.ranked, strict=True)
        }
        return per_query_metrics(dataset.qrels, run, ("ndcg@10", "recall@10"))

    def failed(self, dataset: RetrievalDataset) -> np.ndarray:
        """Per query, whether its nDCG@10 is below the median: the query-confidence target."""
        metrics = self.per_query(dataset)
        labels = failed_queries(metrics["ndcg@10"], metrics["recall@10"], self.query_ids)
        return labels[NDCG_BELOW_MEDIAN]


def rank_split(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    depth: int = CONFIDENCE_DEPTH,
    embedded: Embedded | None = None,
) -> RankedSplit:
    """Rank the corpus for every judged query with the pipeline's own fusion and score."""
    embedded = embedded or embed(pipeline, dataset)
    queries = pipeline.fuse(embedded.parts["queries"])
    docs = pipeline.fuse(embedded.parts["docs"])
    scores = score_matrix(queries.gaussian, docs.gaussian, pipeline.score.name, pipeline.score.beta)
    qids, dids = embedded.ids["queries"], embedded.ids["docs"]
    if not dataset.keep_self_matches:
        exclude_self_matches(scores, qids, dids)
    every = np.broadcast_to(np.arange(len(dids)), scores.shape)
    positions, top = best(every, scores, depth)
    ranked = with_moments(queries.gaussian, docs.gaussian, positions, top)
    if pipeline.fusion.mode == "concat":  # the variance hits report: members' own plus spread
        dims = [m.encoder.dim for m in pipeline.members]
        between = between_variance(
            queries.gaussian.mean,
            queries.weights,
            docs.gaussian.mean,
            docs.weights,
            dims,
            positions,
        )
        ranked = [
            r._replace(variances=r.variances + b) for r, b in zip(ranked, between, strict=True)
        ]
    judged = [dataset.qrels[q] for q in qids]
    relevant = np.array(
        [[j.get(dids[p], 0) > 0 for p in row] for j, row in zip(judged, positions, strict=True)]
    )
    cosines = _cosines(pipeline, queries, docs, positions)
    return RankedSplit(qids, dids, ranked, cosines, relevant)


def hybrid_split(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    bm25: Callable[[str, int], Sequence[tuple[str, float]]],
    embedded: Embedded | None = None,
) -> tuple[RankedSplit, np.ndarray]:
    """Every judged query ranked as a hybrid search ranks it, with its lexical features.

    The dense ranking and BM25's (`bm25(text, depth)`: a collection's `text_search` over the
    same corpus) each to the depth a search takes, fused by reciprocal rank to
    CONFIDENCE_DEPTH hits; (nq, 2) `lexical_features` per query, as a hybrid search reads them.
    """
    embedded = embedded or embed(pipeline, dataset)
    depth = IndexSettings().pool_size(CONFIDENCE_DEPTH)
    dense = rank_split(pipeline, dataset, depth, embedded)
    queries = pipeline.fuse(embedded.parts["queries"])
    docs = pipeline.fuse(embedded.parts["docs"])
    where = {doc_id: p for p, doc_id in enumerate(dense.doc_ids)}
    ranked, lexical = [], []
    for i, query_id in enumerate(dense.query_ids):
        found = [(where[d], s) for d, s in bm25(dataset.queries[query_id], depth) if d in where]
        lexical_positions = np.array([p for p, _ in found], dtype=np.int64)
        scores = np.array([s for _, s in found], dtype=np.float64)
        top = dense.ranked[i].positions
        lexical.append(
            lexical_features(int(top[0]) if len(top) else None, lexical_positions, scores)
        )
        positions, rrf = reciprocal_rank_fusion([top, lexical_positions], CONFIDENCE_DEPTH)
        ranked += with_moments(queries.gaussian[i], docs.gaussian, positions[None], rrf[None])
    positions = np.stack([r.positions for r in ranked])
    judged = [dataset.qrels[q] for q in dense.query_ids]
    relevant = np.array(
        [
            [j.get(dense.doc_ids[p], 0) > 0 for p in row]
            for j, row in zip(judged, positions, strict=True)
        ]
    )
    cosines = _cosines(pipeline, queries, docs, positions)
    split = RankedSplit(dense.query_ids, dense.doc_ids, ranked, cosines, relevant)
    return split, np.stack(lexical)


def _cosines(pipeline: Pipeline, queries, docs, positions: np.ndarray) -> np.ndarray | None:
    """Member cosines of every ranked hit, or None for a pipeline that does not concatenate."""
    if pipeline.fusion.mode != "concat":
        return None
    dims = [m.encoder.dim for m in pipeline.members]
    mean_q, mean_d = queries.gaussian.mean, docs.gaussian.mean
    return np.stack(
        [
            member_cosines(mean_q[i], queries.weights[i], mean_d[row], docs.weights[row], dims)
            for i, row in enumerate(positions)
        ]
    )
