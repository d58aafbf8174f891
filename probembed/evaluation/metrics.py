"""Task metrics: Spearman for STS, ranx retrieval metrics, a logistic-regression probe.

ranx and scikit-learn are imported inside the functions that need them: ranx alone costs
seconds (numba) and most callers of this package never score a run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import spearmanr

if TYPE_CHECKING:
    from sklearn.linear_model import LogisticRegression

DEFAULT_RETRIEVAL_METRICS = ("ndcg@10", "recall@100", "mrr@10")
#: The lowest grade that makes a document relevant, as ranx and trec_eval count it.
RELEVANT = 1
#: Query ids a warning names at most.
SHOWN = 5

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]


def spearman(pred: ArrayLike, gold: ArrayLike, *, diagnostic: str | None = None) -> float:
    """Rank correlation in [-1, 1] (scipy's `spearmanr`); the caller says what a side that is
    all one value means.

    As the STS metric (tables show it times 100), gold scores all equal are an error and
    predictions all equal give NaN (they rank nothing). As a `diagnostic`, which names what is
    correlated ("a model's uncertainty with its error"), either side all equal gives NaN with
    a RuntimeWarning naming it (scipy's own warning named neither).
    """
    if diagnostic is not None:
        pred, gold = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
        if any(len(v) and np.all(v == v[0]) for v in (pred, gold)):
            warnings.warn(
                f"Spearman ρ of {diagnostic} is undefined: one of them is the same for every "
                "item; returning nan",
                RuntimeWarning,
                stacklevel=2,
            )
            return math.nan
    else:
        pred, gold = paired_arrays(pred, gold, "pred", "gold")
        if np.all(gold == gold[0]):
            raise ValueError(
                f"gold scores are all equal ({gold[0]:g}): no ranking to correlate with"
            )
    return float(spearmanr(pred, gold).statistic)


def retrieval_metrics(
    qrels: Qrels, run: Run, metrics: Sequence[str] = DEFAULT_RETRIEVAL_METRICS
) -> dict[str, float]:
    """Mean of each metric over every judged query with a relevant document (a query missing
    from the run scores 0; one with no relevant document is left out, with a warning)."""
    per_query = per_query_metrics(qrels, run, metrics)
    return {name: float(np.mean(list(scores.values()))) for name, scores in per_query.items()}


def without_relevant(qrels: Qrels) -> list[str]:
    """The judged queries no document is relevant to: every grade below RELEVANT (0, say).

    nDCG (its ideal DCG is 0), recall (of no relevant document) and MRR are undefined for
    them; ranx and trec_eval score them 0, which pulls every mean down by their share.
    """
    return [q for q, docs in qrels.items() if not any(g >= RELEVANT for g in docs.values())]


def left_out_queries(qrels: Qrels, source: str) -> list[str]:
    """The judged queries to leave out of every mean (`without_relevant`), warned about with
    a few of their ids (to the caller's caller); refused when that is every query: no metric
    is defined for any, where the CLI and the Python API must say the same."""
    left_out = without_relevant(qrels)
    if len(left_out) == len(qrels):
        raise ValueError(
            f"{source}: none of the {len(qrels)} judged queries has a document judged "
            f"relevant (grade >= {RELEVANT}), so no metric is defined; judge at least one "
            f"relevant document, e.g. for {left_out[0]!r}"
        )
    if left_out:
        shown = ", ".join(map(repr, left_out[:SHOWN])) + (", ..." if len(left_out) > SHOWN else "")
        note = (
            f"{source}: {len(left_out)} of {len(qrels)} judged queries have no document judged "
            f"relevant (grade >= {RELEVANT}): left out of every mean, as TREC leaves out topics "
            f"without a relevant document (nDCG, recall and MRR are undefined for them; scored "
            f"0 they would pull each mean down by their share): {shown}"
        )
        warnings.warn(note, UserWarning, stacklevel=3)
    return left_out


def per_query_metrics(
    qrels: Qrels, run: Run, metrics: Sequence[str] = DEFAULT_RETRIEVAL_METRICS
) -> dict[str, dict[str, float]]:
    """Each metric for each judged query, the input to failure prediction.

    Metric names are ranx's ("ndcg@10", "recall@100", "mrr@10"); nDCG uses linear gains like
    trec_eval, and MRR@k is 0 when no relevant document is in the top k. Queries in the run
    but not in the qrels are ignored; judged queries the run lacks count as complete misses.
    Judged queries no document is relevant to (`without_relevant`) have no figure: they are
    left out, with a UserWarning naming how many and which.
    """
    from ranx import evaluate

    metrics = validate_metric_names(metrics)
    if not qrels:
        raise ValueError("qrels is empty: pass {query id: {doc id: relevance}} for >= 1 query")
    left_out = left_out_queries(qrels, "qrels")
    skipped = set(left_out)
    query_ids = sorted(q for q in qrels if q not in skipped)
    numbers: dict[str, int] = {}
    judged = _numbered([{d: int(r) for d, r in qrels[q].items()} for q in query_ids], numbers)
    ranked = _numbered([_ranked(run.get(q, {})) for q in query_ids], numbers)
    # a lone metric ranx looks up under its name cut at "@" (a KeyError) unless `run` is its
    # Run; named twice, it is returned in the dictionary several are
    asked = [*metrics, metrics[0]] if len(metrics) == 1 else list(metrics)
    scores = evaluate(judged, ranked, asked, return_mean=False)
    return {name: dict(zip(query_ids, map(float, scores[name]), strict=True)) for name in metrics}


def _numbered(queries: Sequence[Mapping[str, float]], numbers: dict[str, int]) -> Any:
    """Each query's (document number, score) rows, best first, as the numba typed list ranx's
    metrics read: its `Qrels` and `Run` compiled their string dictionaries once for each
    longest id length (10-40 s each, so a dataset with longer ids compiled anew); a number
    per document id (`numbers`, shared by qrels and run) leaves one signature for all."""
    from numba.typed import List as TypedList

    rows = []
    for docs in queries:
        ids = [numbers.setdefault(doc, len(numbers)) for doc in docs]
        pairs = np.array([ids, list(docs.values())], dtype=np.float64).T.reshape(-1, 2)
        rows.append(np.ascontiguousarray(pairs[np.argsort(-pairs[:, 1], kind="stable")]))
    return TypedList(rows)


def _ranked(docs: Mapping[str, float]) -> dict[str, float]:
    """A query's run as strictly falling scores in the order trec_eval ranks it (score, then
    doc id, descending): ranx sorts a run with an unstable quicksort, so ten or more tied
    documents (identical texts embed alike) came out in any order."""
    order = sorted(((float(s), d) for d, s in docs.items()), reverse=True)
    return {d: float(len(order) - rank) for rank, (_, d) in enumerate(order)}


def run_from_scores(
    query_ids: Sequence[str], doc_ids: Sequence[str], scores: ArrayLike, k: int = 100
) -> dict[str, dict[str, float]]:
    """Keep each query's k best-scoring documents, the run format the metrics read.

    A score of -inf marks a document the query may not retrieve: it never enters the run.
    Tied scores rank as trec_eval ranks them, by document id descending, both for which
    enter the k and in what order (`per_query_metrics` scores them in that order), so no
    figure depends on the order of the corpus.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(query_ids), len(doc_ids)):
        raise ValueError(
            f"scores has shape {scores.shape}; expected (len(query_ids), len(doc_ids)) = "
            f"({len(query_ids)}, {len(doc_ids)})"
        )
    if k < 1:
        raise ValueError(f"k={k} must be >= 1")
    if np.isnan(scores).any():
        raise ValueError(f"scores holds {int(np.isnan(scores).sum())} NaN values")
    k = min(k, len(doc_ids))
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
    id_rank = np.argsort(np.argsort(np.asarray(doc_ids, dtype=str), kind="stable"))
    run = {}
    for query_id, row, floor in zip(query_ids, scores, kth, strict=True):
        tied_in = np.flatnonzero(row >= floor)  # every document tied with the k-th one too
        best = tied_in[np.lexsort((-id_rank[tied_in], -row[tied_in]))][:k]
        run[query_id] = {doc_ids[j]: float(row[j]) for j in best if row[j] > -np.inf}
    return run


def run_from_results(
    query_ids: Sequence[str], results: Sequence[Mapping], k: int = 10
) -> dict[str, dict[str, float]]:
    """The top k hits of search results as the run the metrics read (rank order kept).

    A hit with the query's own id is left out, as BEIR and `probembed eval` do.
    """
    return run_from_rankings(query_ids, [[h["id"] for h in r["hits"]] for r in results], k)


def run_from_rankings(
    query_ids: Sequence[str],
    rankings: Sequence[Sequence[str]],
    k: int = 10,
    keep_self_matches: bool = False,
) -> dict[str, dict[str, float]]:
    """Each query's ranked document ids, best first, as the run the metrics read: scores by
    rank, so ranx keeps the ranking's own order of tied scores (a score tie there would rank
    by id). The query's own id is left out unless `keep_self_matches`, as BEIR does."""
    run = {}
    for q, ranking in zip(query_ids, rankings, strict=True):
        ids = [d for d in ranking if keep_self_matches or d != q][:k]
        run[q] = {doc_id: float(len(ids) - rank) for rank, doc_id in enumerate(ids)}
    return run


def probe_accuracy(
    train_X: ArrayLike, train_y: ArrayLike, test_X: ArrayLike, test_y: ArrayLike, seed: int = 0
) -> float:
    """Accuracy of a logistic regression fitted on frozen embeddings, as MTEB classification."""
    return float(np.mean(probe_correct(train_X, train_y, test_X, test_y, seed)))


def probe_correct(
    train_X: ArrayLike,
    train_y: ArrayLike,
    test_X: ArrayLike,
    test_y: ArrayLike,
    seed: int = 0,
    inverse_penalty: float = 1.0,
) -> np.ndarray:
    """Per test text, whether the `probe_accuracy` probe labels it right: paired comparisons.

    `inverse_penalty` is the probe's C (MTEB's 1 unless a diagnostic asks how much a figure
    owes to the probe's L2 penalty)."""
    train_X, train_y = paired_arrays(train_X, train_y, "train_X", "train_y", vectors=True)
    test_X, test_y = paired_arrays(test_X, test_y, "test_X", "test_y", vectors=True)
    if train_X.shape[1] != test_X.shape[1]:
        raise ValueError(f"train_X has {train_X.shape[1]} columns but test_X {test_X.shape[1]}")
    return _probe(train_X, train_y, seed, inverse_penalty).predict(test_X) == test_y


def probe_losses(
    train_X: ArrayLike, train_y: ArrayLike, test_X: ArrayLike, test_y: ArrayLike, seed: int = 0
) -> np.ndarray:
    """Per test text, -log p(true label) under the probe `probe_accuracy` scores (its error)."""
    train_X, train_y = paired_arrays(train_X, train_y, "train_X", "train_y", vectors=True)
    test_X, test_y = paired_arrays(test_X, test_y, "test_X", "test_y", vectors=True)
    probe = _probe(train_X, train_y, seed)
    proba = probe.predict_proba(test_X)
    column = {label: j for j, label in enumerate(probe.classes_)}
    # a label never seen in training has probability 0: its loss is capped, not infinite
    p_true = np.array([proba[i, column[y]] if y in column else 0.0 for i, y in enumerate(test_y)])
    return -np.log(np.maximum(p_true, 1e-12))


def _probe(
    train_X: np.ndarray, train_y: np.ndarray, seed: int, inverse_penalty: float = 1.0
) -> LogisticRegression:
    """The logistic-regression probe of MTEB classification, fitted."""
    from sklearn.linear_model import LogisticRegression

    probe = LogisticRegression(C=inverse_penalty, max_iter=1000, random_state=seed)
    return probe.fit(train_X, train_y)


def validate_metric_names(metrics: Sequence[str]) -> tuple[str, ...]:
    """Catch a bare string or an empty list before ranx gives a less helpful error."""
    if isinstance(metrics, str):
        raise TypeError(f"metrics must be a sequence of names; wrap it: [{metrics!r}]")
    if not metrics:
        raise ValueError('metrics is empty; pass names such as ("ndcg@10", "recall@100")')
    return tuple(metrics)


def paired_arrays(
    x: ArrayLike, y: ArrayLike, x_name: str, y_name: str, vectors: bool = False, least: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """Two aligned inputs as arrays, checked once for every metric and diagnostic: the same
    length, at least `least` rows, 1-D (x 2-D when `vectors`); an error names them."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != (2 if vectors else 1) or y.ndim != 1:
        expected = "(n, dim) and (n,)" if vectors else "(n,) and (n,)"
        raise ValueError(f"{x_name}, {y_name} have shapes {x.shape}, {y.shape}; need {expected}")
    if len(x) != len(y) or len(x) < least:
        raise ValueError(
            f"{x_name} and {y_name} need the same length >= {least}, got {len(x)}, {len(y)}"
        )
    return x, y
