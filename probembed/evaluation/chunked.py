"""Retrieval over chunked documents: each document scored by its best chunk (max pooling).

Documents longer than the shortest member's token limit lose their tail when embedded whole;
chunked, every part of them is embedded, and a document ranks by the best of its chunks. Both
ways are scored here from the same pipeline and score, so the difference is the chunking alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probembed.chunking import ChunkSettings, chunk_text, plain_sections
from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import exclude_self_matches
from probembed.evaluation.metrics import retrieval_metrics, run_from_scores
from probembed.pipeline import Pipeline
from probembed.scoring import score_matrix


@dataclass(frozen=True)
class ChunkedCorpus:
    """Every document's chunks, in corpus order, and the document each chunk belongs to."""

    doc_ids: list[str]
    texts: list[str]
    owner: np.ndarray
    long_docs: int


def chunk_corpus(
    corpus: dict[str, str], pipeline: Pipeline, settings: ChunkSettings
) -> ChunkedCorpus:
    """Chunks of each document (a document that fits is one chunk: its whole text)."""
    settings = settings.capped(pipeline.max_tokens)
    doc_ids = list(corpus)
    lengths = pipeline.count_tokens([corpus[d] for d in doc_ids])
    texts: list[str] = []
    owner: list[int] = []
    for position, (doc_id, tokens) in enumerate(zip(doc_ids, lengths, strict=True)):
        text = corpus[doc_id]
        if tokens <= settings.max_tokens or not text.strip():
            parts = [text]
        else:
            chunks = chunk_text(text, plain_sections(text), pipeline.count_tokens, settings)
            parts = [c.text for c in chunks] or [text]  # long, yet all blank: kept as it is
        texts += parts
        owner += [position] * len(parts)
    long_docs = int((lengths > settings.max_tokens).sum())
    return ChunkedCorpus(doc_ids, texts, np.asarray(owner, dtype=np.int64), long_docs)


def max_pooled(scores: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """(queries, documents): each document's best chunk score; `owner` is non-decreasing."""
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    return np.maximum.reduceat(scores, starts, axis=1)


def chunked_vs_truncated(
    pipeline: Pipeline, dataset: RetrievalDataset, settings: ChunkSettings, scores: list[str]
) -> list[dict]:
    """nDCG@10 per score, documents embedded whole (cut by the models) and as chunks."""
    chunked = chunk_corpus(dataset.corpus, pipeline, settings)
    query_ids = list(dataset.queries)
    queries = pipeline.encode([dataset.queries[q] for q in query_ids], progress=True).gaussian
    whole = pipeline.encode([dataset.corpus[d] for d in chunked.doc_ids], progress=True).gaussian
    parts = pipeline.encode(chunked.texts, progress=True).gaussian
    rows = []
    for name in scores:
        beta = pipeline.score.beta
        for mode, matrix in (
            ("truncated", score_matrix(queries, whole, name, beta)),
            ("chunked", max_pooled(score_matrix(queries, parts, name, beta), chunked.owner)),
        ):
            if not dataset.keep_self_matches:  # a fresh matrix: marked in place
                exclude_self_matches(matrix, query_ids, chunked.doc_ids)
            run = run_from_scores(query_ids, chunked.doc_ids, matrix)
            ndcg = retrieval_metrics(dataset.qrels, run, ("ndcg@10",))["ndcg@10"]
            rows.append(
                {
                    "dataset": dataset.name,
                    "score": name,
                    "mode": mode,
                    "ndcg@10": ndcg,
                    "docs": len(chunked.doc_ids),
                    "texts_embedded": len(chunked.doc_ids)
                    if mode == "truncated"
                    else len(chunked.texts),
                    "long_docs": chunked.long_docs,
                    "max_tokens": settings.capped(pipeline.max_tokens).max_tokens,
                }
            )
    return rows
