"""Quality table: does uncertainty-driven fusion beat the best model and a tuned static ensemble?

    python benchmarks/quality.py [--estimators laplace head perturb] [--datasets stsb sick scifact]
                                 [--resume]

For each estimator of the built-ins (default = laplace, default-head, default-perturb) and each
dataset, every candidate model of the built-ins (fitted as `scripts/build_pipelines.py` fits
them, including members the shipped pipelines dropped after tuning), mean, concat, tuned
weighted and tuned uec are scored on the test split from the same cached embeddings. Static
weights, T and beta are tuned on STS-B dev, SICK dev and SciFact train qrels only. Also reports
uncertainty quality (AUROC of failure prediction, nDCG@10 at 80% coverage, Recall@1 per decile)
and per-model diagnostics (CV of u_k, and its Spearman with the model's own error). Writes
benchmarks/results/quality.json and PNG plots under benchmarks/results/plots/;
`python benchmarks/readme_tables.py` puts them in docs/results.md. Rows of estimators and datasets
not asked for stay in the file; those asked for are run again, unless `--resume` finds them
made by the same pipeline (each row carries its pipeline's fingerprint).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from probembed.evaluation.datasets import load_evaluable
from probembed.evaluation.recipes import fit_candidates, sample_pairs
from probembed.evaluation.report import (
    compare,
    earlier_rows,
    markdown_table,
    write_json,
    write_plots,
)
from probembed.paths import datasets_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = datasets_dir()
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = {
    "stsb": (DATA / "sts" / "stsb", "test", "dev"),
    "sick": (DATA / "sts" / "sick", "test", "dev"),
    "scifact": (DATA / "retrieval" / "scifact", "test", "train"),
}
PIPELINES = {"laplace": "default", "head": "default-head", "perturb": "default-perturb"}
HEADLINE = ("spearman", "ndcg@10")


def main() -> None:
    """Run every (estimator, dataset) comparison and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--estimators", nargs="+", default=list(PIPELINES), choices=list(PIPELINES))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--out", type=Path, default=RESULTS / "quality.json")
    parser.add_argument(
        "--resume", action="store_true", help="keep --out's rows made by today's pipelines"
    )
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = [PIPELINES[e] for e in args.estimators]
    candidates = fit_candidates(names, sample_pairs(DATA / "pairs"), progress=True)
    fingerprints = {e: candidates[PIPELINES[e]].fingerprint for e in args.estimators}
    to_run = {(e, d): fingerprints[e] for e in args.estimators for d in args.datasets}
    # rows of other estimators and datasets stay; stale ones of those asked for are run again
    rows, config, done = earlier_rows(
        args.out, lambda r: (r.get("estimator"), r["dataset"]), to_run, args.resume
    )
    config = {"seed": 0, "pipelines": {}, "tuned_on": {}, "datasets": {}} | config
    ran = 0
    for estimator, name in to_run:
        if (estimator, name) in done:
            continue
        pipe = candidates[PIPELINES[estimator]]
        config["pipelines"][estimator] = {"name": pipe.name, "fingerprint": pipe.fingerprint}
        path, test_split, dev_split = DATASETS[name]
        start = time.perf_counter()
        test, dev = load_evaluable(path, test_split), load_evaluable(path, dev_split)
        result = compare(pipe, test, dev, progress=True)
        for row in result.rows:
            row["estimator"], row["fingerprint"] = estimator, pipe.fingerprint
        rows += result.rows
        ran += 1
        config["tuned_on"][name] = dev_split
        config["datasets"][name] = path.relative_to(DATA).as_posix()
        config[f"methods:{estimator}:{name}"] = {
            m.name: {"fusion": m.fusion, "score": m.score} for m in result.methods.values()
        }
        write_plots(result, test, RESULTS / "plots" / estimator)
        print(f"\n## {name} ({estimator}) in {time.perf_counter() - start:.0f}s")
        print(markdown_table(result.rows, HEADLINE))
        write_json(args.out, rows, config)  # after every dataset: a long run keeps its part
    if ran == 0:
        print(f"nothing to run: {args.out} holds every row asked for, made by these pipelines")
    else:
        print(f"\nran {ran} (estimator, dataset) pairs; {args.out} holds {len(rows)} rows")


if __name__ == "__main__":
    main()
