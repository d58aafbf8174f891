"""How well a collection's p_relevant is calibrated for hybrid searches, beside dense ones.

The calibrator is fitted on dense rankings of SciFact train; a hybrid search reads it along the
fused (dense + BM25) list it shows. This benchmark indexes the SciFact corpus with `retrieval`
as `probembed ingest` does, runs the 300 test queries (k = 10) dense and hybrid through
`Collection.search`, and scores every hit's p_relevant against the test qrels: ECE (15 bins),
Brier score, AUROC, and what thresholds keep and drop.

    python benchmarks/hybrid_calibration.py [--db DIR] [--out FILE]

`--db` keeps the collection between runs (default: a folder in the system's temporary
directory, made on the first run). Another probembed tree can be scored on the same collection with
PYTHONPATH=<tree> and another `--out`: that is how the reading tried in stop 34 (values from the
dense ranking, commit 69c35dd) was compared.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from sklearn.metrics import brier_score_loss, roc_auc_score

import probembed
from probembed.evaluation import expected_calibration_error, load_dataset
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.store import Database, ingest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
K = 10
THRESHOLDS = (0.03, 0.5)


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


def main() -> None:
    """Index (once), search dense and hybrid, score p_relevant, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_db = Path(tempfile.gettempdir()) / "probembed-hybrid-calibration-db"
    parser.add_argument("--db", type=Path, default=default_db)
    parser.add_argument("--out", type=Path, default=RESULTS / "hybrid_calibration.json")
    args = parser.parse_args()
    dataset = load_dataset(SCIFACT, "test")
    target = Database(args.db, create=True).collection("scifact")
    if not target.exists:
        ingest(SCIFACT, target, probembed.load("retrieval"), progress=True)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    rows = []
    for mode, hybrid in (("dense", False), ("hybrid", True)):
        results = target.search(texts, k=K, hybrid=hybrid)
        p = np.array([h["p_relevant"] for r in results for h in r["hits"]], dtype=np.float64)
        judged = zip(qids, results, strict=True)
        relevant = np.array(
            [dataset.qrels[q].get(h["id"], 0) > 0 for q, r in judged for h in r["hits"]]
        )
        rows.append({"search": mode, **scored(p, relevant)})
        print(rows[-1])
    config = {"tree": str(Path(probembed.__file__).parent), "k": K, "pipeline": "retrieval"}
    write_json(args.out, rows, config | {"dataset": "scifact test", "queries": len(qids)})


if __name__ == "__main__":
    main()
