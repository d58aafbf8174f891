"""How well a collection's p_relevant is calibrated for hybrid searches, beside dense ones.

A built-in's calibrator is fitted on dense rankings of SciFact train, and its hybrid calibrator
on hybrid (dense + BM25) rankings of the same queries with each hit's BM25 rank and score. This
benchmark indexes the SciFact corpus with `retrieval` as `probembed ingest` does, runs the 300
test queries (k = 10) through a searcher of the shipped pipeline: dense; hybrid with the hybrid
calibrator (what a hybrid search reports); and hybrid with the dense calibrator read along the
fused list (what a calibrator without a hybrid one gives, and what hybrid searches reported
before it); and dense under each other score a search can ask for (the calibrator was fitted
on the pipeline's own). It scores every hit's p_relevant against the test qrels: ECE (15 bins),
Brier score, AUROC, and what thresholds keep and drop.

    python benchmarks/hybrid_calibration.py [--db DIR] [--out FILE]

`--db` keeps the collection between runs (default: a folder in the system's temporary
directory, made on the first run); the calibrators are the installed package's, whatever
copy the collection kept. Another probembed tree can be scored on the same collection with
PYTHONPATH=<tree> and another `--out`: that is how the reading tried in stop 34 (values from the
dense ranking, commit 69c35dd) was compared.
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
from probembed.evaluation import expected_calibration_error, load_dataset
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.scoring import Score
from probembed.store import Database, Searcher, ingest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
K = 10
THRESHOLDS = (0.03, 0.5)
#: Resamples of the test queries for the paired intervals (seeded).
RESAMPLES = 2000


def scored(p: np.ndarray, relevant: np.ndarray) -> dict[str, float]:
    """Calibration and ranking figures of hit probabilities against their labels."""
    figures = {
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


def paired_interval(
    a: list[np.ndarray], b: list[np.ndarray], relevant: list[np.ndarray]
) -> dict[str, list[float]]:
    """95% intervals of the Brier and AUROC differences a − b over one query's hits each,
    by a paired bootstrap of queries (both readings score the same hits)."""
    rng = np.random.default_rng(0)
    diffs: dict[str, list[float]] = {"brier": [], "auroc": []}
    for _ in range(RESAMPLES):
        pick = rng.integers(0, len(a), len(a))
        y = np.concatenate([relevant[i] for i in pick])
        pa, pb = (np.concatenate([p[i] for i in pick]) for p in (a, b))
        diffs["brier"].append(brier_score_loss(y, pa) - brier_score_loss(y, pb))
        diffs["auroc"].append(roc_auc_score(y, pa) - roc_auc_score(y, pb))
    return {name: np.percentile(d, [2.5, 97.5]).tolist() for name, d in diffs.items()}


def main() -> None:
    """Index (once), search dense and hybrid, score p_relevant, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_db = Path(tempfile.gettempdir()) / "probembed-hybrid-calibration-db"
    parser.add_argument("--db", type=Path, default=default_db)
    parser.add_argument("--out", type=Path, default=RESULTS / "hybrid_calibration.json")
    args = parser.parse_args()
    dataset = load_dataset(SCIFACT, "test")
    target = Database(args.db, create=True).collection("scifact")
    shipped = probembed.load("retrieval")
    if not target.exists:
        ingest(SCIFACT, target, shipped, progress=True)
    if shipped.calibrator is None or shipped.calibrator.hybrid is None:
        raise SystemExit("the installed retrieval pipeline has no hybrid calibrator")
    fallback = copy.copy(shipped)  # the same models, the calibrator without its hybrid one
    fallback.calibrator = replace(shipped.calibrator, hybrid=None)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    rows, per_query = [], {}
    runs = [
        ("dense", shipped, False, None),
        ("hybrid", shipped, True, None),
        ("hybrid, dense calibrator along the fused list", fallback, True, None),
    ]
    own = shipped.score.name
    runs += [(f"dense, score={s}", shipped, False, s) for s in Score if s != own]
    for mode, pipeline, hybrid, score in runs:
        searcher = Searcher(target, pipeline)
        results = searcher.search(texts, k=K, hybrid=hybrid, score=score)
        p = np.array([h["p_relevant"] for r in results for h in r["hits"]], dtype=np.float64)
        judged = zip(qids, results, strict=True)
        relevant = np.array(
            [dataset.qrels[q].get(h["id"], 0) > 0 for q, r in judged for h in r["hits"]]
        )
        rows.append({"search": mode, **scored(p, relevant)})
        print(rows[-1])
        cuts = np.cumsum([len(r["hits"]) for r in results])[:-1]
        per_query[mode] = (np.split(p, cuts), np.split(relevant, cuts))
    (ours, labels), (theirs, same) = per_query["hybrid"], per_query[runs[2][0]]
    assert all(np.array_equal(x, y) for x, y in zip(labels, same, strict=True))  # same hits
    rows.append({"search": f"hybrid − ({runs[2][0]})", **paired_interval(ours, theirs, labels)})
    print(rows[-1])
    config = {"tree": str(Path(probembed.__file__).parent), "k": K, "pipeline": "retrieval"}
    write_json(args.out, rows, config | {"dataset": "scifact test", "queries": len(qids)})


if __name__ == "__main__":
    main()
