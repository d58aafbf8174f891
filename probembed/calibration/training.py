"""Training data for a calibrator: a pipeline's ranked top hits on a judged retrieval split.

Hits are ranked exactly as a search ranks them (the pipeline's fusion and score, then
`store.ranking.best` and `with_moments`), so the features a calibrator is fitted on are the
features a search computes. Needs the `eval` extra (dataset readers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probembed.calibration.features import disagreement, hit_features, member_cosines
from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import Embedded, embed, exclude_self_matches
from probembed.pipeline import Pipeline
from probembed.scoring import score_matrix
from probembed.store.ranking import Ranked, best, with_moments

#: Hits per query the calibrator is fitted and evaluated on.
TOP = 10


@dataclass
class RankedSplit:
    """Every judged query's ranked hits (one more than TOP), their member cosines and labels."""

    query_ids: list[str]
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


def rank_split(
    pipeline: Pipeline,
    dataset: RetrievalDataset,
    depth: int = TOP + 1,
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
    judged = [dataset.qrels[q] for q in qids]
    relevant = np.array(
        [[j.get(dids[p], 0) > 0 for p in row] for j, row in zip(judged, positions, strict=True)]
    )
    return RankedSplit(qids, ranked, _cosines(pipeline, queries, docs, positions), relevant)


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
