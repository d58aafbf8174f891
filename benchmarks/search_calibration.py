"""How well p_relevant is calibrated in each kind of search a collection serves.

A built-in's calibrator is fitted on dense rankings of SciFact train (whole abstracts, the
pipeline's own score), and its hybrid calibrator on hybrid (dense + BM25) rankings of the same
queries with each hit's BM25 rank and score. This benchmark indexes the SciFact corpus with a
built-in (`retrieval` unless --pipeline says) as `probembed ingest` does and runs the 300 test
queries (k = 10) through a searcher of the shipped pipeline: dense; hybrid with the hybrid
calibrator (what a hybrid search reports); hybrid with the dense calibrator read along the
fused list (what a calibrator without a hybrid one gives, and what hybrid searches reported
before it); over a second collection of the corpus cut into chunks of CHUNK_TOKENS tokens
(`probembed ingest --chunk`), dense and hybrid with `group_by_doc` (a document's best chunk,
read with chunk-level features); dense and hybrid filtered by `where` to half the corpus and
to a tenth of it;
and dense and hybrid under each other score a search can
ask for. It scores every hit's p_relevant against the test qrels (a chunk by its document):
ECE (15 bins), Brier score, AUROC, and what thresholds keep and drop; and a paired bootstrap
of the two hybrid readings.

    python benchmarks/search_calibration.py [--pipeline retrieval|default] [--db DIR] [--out FILE]

`--db` keeps the collections between runs (default: a folder in the system's temporary
directory, made on the first run); the calibrators are the installed package's, whatever
copy the collections kept. Another probembed tree can be scored on the same collections with
PYTHONPATH=<tree> and another `--out`: that is how the reading tried before (values from the
dense ranking, commit 69c35dd; `search_calibration-dense-reading.json`, written by this script
under its earlier name, hybrid_calibration.py) was compared.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.metrics import brier_score_loss, roc_auc_score

import probembed
from probembed.chunking import ChunkSettings
from probembed.evaluation import expected_calibration_error
from probembed.evaluation.datasets import load_retrieval
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.scoring import Score
from probembed.store import Collection, Database, Hit, Searcher, ingest, ingest_documents

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
K = 10
THRESHOLDS = (0.03, 0.5)
#: Resamples of the test queries for the paired intervals (seeded).
RESAMPLES = 2000
#: The hybrid search that reads the dense calibrator along its fused list.
FALLBACK = "hybrid, dense calibrator along the fused list"
#: A filter that keeps half the corpus whatever a query asks (ids are numbers): a filtered
#: search ranks, and BM25 ranks, among the rows it keeps, which training never saw.
WHERE = "CAST(id AS BIGINT) % 2 = 0"
#: A filter to a tenth of the corpus (a tenant's share): most of what it keeps for a query
#: ranks past the unfiltered search's CONTEXT_DEPTH, where each hit reads its own value.
NARROW = "CAST(id AS BIGINT) % 10 = 0"
#: Chunk size of the chunked collection: SciFact abstracts average ~300 tokens, so most are
#: cut into two to four chunks and `group_by_doc` has something to group.
CHUNK_TOKENS = 128


def scored(p: np.ndarray, relevant: np.ndarray) -> dict[str, float | dict[str, float]]:
    """Calibration and ranking figures of hit probabilities against their labels."""
    figures: dict[str, float | dict[str, float]] = {
        "hits": len(p),
        "relevant_hits": int(relevant.sum()),
        "ece15": expected_calibration_error(p, relevant, 15),
        "brier": float(brier_score_loss(relevant, p)),
        "auroc": float(roc_auc_score(relevant, p)),
        "mean_p_relevant": float(p.mean()),
        "relevant_rate": float(relevant.mean()),
    }
    for threshold in THRESHOLDS:
        figures[f"at_{threshold}"] = {
            "relevant_kept": float((p[relevant] >= threshold).mean()),
            "irrelevant_dropped": float((p[~relevant] < threshold).mean()),
        }
    return figures


def document(hit: Hit) -> str:
    """The judged document a hit is: its own id, or a chunk's document."""
    return hit["metadata"].get("doc_id") or hit["id"]


def paired_interval(
    a: list[np.ndarray], b: list[np.ndarray], relevant: list[np.ndarray]
) -> dict[str, list[float]]:
    """95% intervals of the ECE, Brier and AUROC differences a − b over one query's hits each,
    by a paired bootstrap of queries (both readings score the same hits)."""
    rng = np.random.default_rng(0)
    measures = {
        "ece15": lambda y, p: expected_calibration_error(p, y, 15),
        "brier": brier_score_loss,
        "auroc": roc_auc_score,
    }
    diffs: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(RESAMPLES):
        pick = rng.integers(0, len(a), len(a))
        y = np.concatenate([relevant[i] for i in pick])
        pa, pb = (np.concatenate([p[i] for i in pick]) for p in (a, b))
        for name, measure in measures.items():
            diffs[name].append(measure(y, pa) - measure(y, pb))
    return {name: np.percentile(d, [2.5, 97.5]).tolist() for name, d in diffs.items()}


def runs_of(
    pipeline: Pipeline, whole: Collection, chunked: Collection
) -> list[tuple[str, str, Collection, Pipeline, dict]]:
    """(kind, name, collection, pipeline, search options) of every search measured."""
    assert pipeline.calibrator is not None
    fallback = copy.copy(pipeline)  # the same models, the calibrator without its hybrid one
    fallback.calibrator = replace(pipeline.calibrator, hybrid=None)
    cut, grouped = f"{CHUNK_TOKENS}-token chunks", {"group_by_doc": True}
    runs: list[tuple[str, str, Collection, Pipeline, dict]] = [
        ("main", "dense", whole, pipeline, {}),
        ("main", "hybrid", whole, pipeline, {"hybrid": True}),
        ("main", FALLBACK, whole, fallback, {"hybrid": True}),
        ("main", f"dense, group_by_doc ({cut})", chunked, pipeline, grouped),
        ("main", f"hybrid, group_by_doc ({cut})", chunked, pipeline, grouped | {"hybrid": True}),
    ]
    for share, where in (("half the corpus", WHERE), ("a tenth of the corpus", NARROW)):
        for kind, hybrid in (("dense", False), ("hybrid", True)):
            options = {"where": where, "hybrid": hybrid}
            runs.append(("main", f"{kind}, where ({share})", whole, pipeline, options))
    for score in (s for s in Score if s != pipeline.score.name):
        for kind, hybrid in (("dense", False), ("hybrid", True)):
            options = {"score": score, "hybrid": hybrid}
            runs.append(("score", f"{kind}, score={score}", whole, pipeline, options))
    return runs


def arguments(description: str) -> argparse.ArgumentParser:
    """The options of a benchmark on this script's collections: which built-in, which --db
    (kept between runs, so another benchmark on SciFact reuses what this one indexed)."""
    parser = argparse.ArgumentParser(description=description)
    default_db = Path(tempfile.gettempdir()) / "probembed-search-calibration-db"
    parser.add_argument("--pipeline", default="retrieval", help="a built-in with a calibrator")
    parser.add_argument("--db", type=Path, default=default_db)
    return parser


def suffix_of(pipeline: str) -> str:
    """What a built-in other than `retrieval` adds to its collections' and results' names."""
    return "" if pipeline == "retrieval" else f"-{pipeline}"


def whole_collection(db: Database, pipeline: Pipeline, suffix: str) -> Collection:
    """The SciFact corpus as `probembed ingest` stores it, indexed on first use."""
    whole = db.collection(f"scifact{suffix}")
    if not whole.exists:
        ingest(SCIFACT, whole, pipeline, progress=True)
    return whole


def main() -> None:
    """Index (once), run every search, score p_relevant, write the JSON."""
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="default: results/search_calibration[-NAME].json")
    args = parser.parse_args()
    suffix = suffix_of(args.pipeline)
    out = args.out or RESULTS / f"search_calibration{suffix}.json"
    dataset = load_retrieval(SCIFACT, "test")
    shipped = probembed.load(args.pipeline)
    if shipped.calibrator is None or shipped.calibrator.hybrid is None:
        raise SystemExit(f"the installed {args.pipeline} pipeline has no hybrid calibrator")
    db = Database(args.db, create=True)
    whole = whole_collection(db, shipped, suffix)
    chunked = db.collection(f"scifact-chunks-{CHUNK_TOKENS}{suffix}")
    if not chunked.exists:
        ingest_documents(
            SCIFACT, chunked, shipped, ChunkSettings.sized(CHUNK_TOKENS), progress=True
        )
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    rows: list[dict] = []
    per_query = {}
    for kind, name, collection, pipeline, options in runs_of(shipped, whole, chunked):
        results = Searcher(collection, pipeline).search(texts, k=K, **options)
        p = np.array([h["p_relevant"] for r in results for h in r["hits"]], dtype=np.float64)
        judged = zip(qids, results, strict=True)
        relevant = np.array(
            [dataset.qrels[q].get(document(h), 0) > 0 for q, r in judged for h in r["hits"]]
        )
        rows.append({"table": kind, "search": name, **scored(p, relevant)})
        print(rows[-1])
        cuts = np.cumsum([len(r["hits"]) for r in results])[:-1]
        per_query[name] = (np.split(p, cuts), np.split(relevant, cuts))
    (ours, labels), (theirs, same) = per_query["hybrid"], per_query[FALLBACK]
    assert all(np.array_equal(x, y) for x, y in zip(labels, same, strict=True))  # same hits
    interval = paired_interval(ours, theirs, labels)
    rows.append({"table": "interval", "search": f"hybrid − ({FALLBACK})", **interval})
    print(rows[-1])
    config = {"tree": str(Path(probembed.__file__).parent), "k": K, "pipeline": args.pipeline}
    write_json(out, rows, config | {"dataset": "scifact test", "queries": len(qids)})


if __name__ == "__main__":
    main()
