"""Refit the built-in pipelines that ship inside the package (seeded; reads ../shared only).

    python scripts/build_pipelines.py [--max-pairs 8000] [--only NAME]

Every built-in is fitted on the same seeded sample of positive pairs from
../shared/datasets/pairs/*.tsv, so a user anywhere gets the fitted state with no data and no
waiting. Fusion settings of `default` come from tuning on dev splits (see probembed.evaluation).
"""

from __future__ import annotations

import argparse
import os

from probembed.evaluation.datasets import load_dataset
from probembed.evaluation.harness import embed
from probembed.evaluation.recipes import BUILTIN_ESTIMATORS, MAX_PAIRS, fit_candidates, sample_pairs
from probembed.evaluation.tuning import tune, without_unweighted
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline, builtin_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = datasets_dir()
DEV_SPLITS = (  # tuning data only: never a split the README reports
    (DATA / "sts" / "stsb", "dev"),
    (DATA / "sts" / "sick", "dev"),
    (DATA / "retrieval" / "scifact", "train"),
)


def tune_fusion(name: str) -> None:
    """Set a built-in's UEC prior, T and beta by the mean dev metric; drop members weighted 0."""
    pipe = Pipeline.load(name)
    if len(pipe.members) < 2:
        return
    splits = []
    for path, split in DEV_SPLITS:
        dev = load_dataset(path, split)
        splits.append((embed(pipe, dev, progress=True), dev))
    tuned = tune(splits, progress=True)
    tuned_pipe = Pipeline(pipe.members, tuned.uec.fusion, tuned.uec.score, name, cache=False)
    kept = without_unweighted(tuned_pipe)
    kept.save(builtin_dir() / name)
    print(f"{name}: {kept.models} {kept.fusion} {kept.score} (mean dev {tuned.dev['uec']:.4f})")


def main() -> None:
    """Fit and write each built-in into probembed/pipelines/<name>."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-pairs", type=int, default=MAX_PAIRS)
    parser.add_argument("--only", action="append", help="build only these built-ins")
    parser.add_argument("--tune-only", action="store_true", help="keep members, retune fusion")
    args = parser.parse_args()
    names = [n for n in BUILTIN_ESTIMATORS if not args.only or n in args.only]
    if args.tune_only:
        for name in names:
            tune_fusion(name)
        return
    pairs = sample_pairs(DATA / "pairs", args.max_pairs)
    print(f"fitting on {len(pairs)} pairs from {DATA / 'pairs'}")
    for name, pipe in fit_candidates(names, pairs, cache=False, progress=True).items():
        out = pipe.save(builtin_dir() / name)
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{name}: {', '.join(pipe.models)} -> {out} ({size / 1e6:.1f} MB)")
        tune_fusion(name)


if __name__ == "__main__":
    main()
