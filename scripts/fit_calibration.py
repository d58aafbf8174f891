"""Fit a built-in pipeline's relevance calibrator on SciFact TRAIN qrels and ship it with it.

    python scripts/fit_calibration.py [--pipeline default] [--seed 0]

The top-10 hits of each of the 809 judged train queries, ranked by the pipeline's own fusion
and score, are the training data (label: judged relevant); the same queries train the learned
query confidence (label: nDCG@10 at least the train median), which searches then report
instead of the outrank probability (it measured better on SciFact test: see
benchmarks/calibration.py). Its text model, for dense searches, adds the coverage of the
query's words by the first hits' texts (same queries and labels). Its hybrid model, for hybrid
searches, reads BM25's two features and the coverage of the hybrid hits, fitted on the same
queries ranked as a hybrid search ranks them, with BM25 from a temporary LanceDB collection of
the SciFact corpus (label: the hybrid ranking's nDCG@10 at
least its train median). Hybrid searches read p_relevant from a second calibrator fitted on
those hybrid rankings' top-10 hits, with each hit's BM25 rank and relative score as well
(`features.BM25_HIT_FEATURES`). Writes
probembed/pipelines/<name>/calibration.json; rerun it whenever the pipeline's fusion or score
changes (tests/test_calibration.py checks the recorded fingerprint). Seeded and deterministic.
"""

from __future__ import annotations

import argparse
import os

from probembed.calibration import CALIBRATION_FILE, RelevanceCalibrator
from probembed.calibration.training import fit_calibrator
from probembed.evaluation.datasets import load_retrieval
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline, builtin_dir, read_tuning, write_tuning

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SCIFACT = datasets_dir() / "retrieval" / "scifact"
SPLIT = "train"


def fit(name: str, seed: int) -> RelevanceCalibrator:
    """The calibrator of a built-in, fitted on its ranked SciFact train hits."""
    pipeline = Pipeline.load(name)
    calibrator = fit_calibrator(pipeline, load_retrieval(SCIFACT, SPLIT), SCIFACT, seed)
    if calibrator is None:  # its warning says why
        raise SystemExit(f"{SCIFACT} {SPLIT}: no calibrator could be fitted for {name}")
    return calibrator


def main() -> None:
    """Fit and write probembed/pipelines/<name>/calibration.json."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline", default="default", help="a built-in pipeline name")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    calibrator = fit(args.pipeline, args.seed)
    directory = builtin_dir() / args.pipeline
    path = calibrator.save(directory / CALIBRATION_FILE)
    write_tuning(directory, [*read_tuning(directory), "retrieval/scifact:train"])  # its qrels
    print(f"wrote {path}: {calibrator.fit_info}")


if __name__ == "__main__":
    main()
