"""Refit the built-in pipelines that ship inside the package (seeded; reads ../shared only).

    python scripts/build_pipelines.py [--max-pairs 8000] [--only NAME] [--basis-only]

Every built-in is fitted on the same seeded sample of positive pairs from
../shared/datasets/pairs/*.tsv, so a user anywhere gets the fitted state with no data and no
waiting. Fusion settings come from tuning on the tuning splits of the seven LODO datasets
(probembed.evaluation.lodo), `retrieval`'s on SciFact's alone (TUNED_ON): never a test split.
Rerun scripts/fit_calibration.py for `default` and `retrieval` afterwards.

Each built-in ships its variance basis (`variance_basis.BASIS_FILE`), which `Pipeline.save`
writes with the rest. `--basis-only` fits and writes that file alone, for the built-ins as
they are (no other file touched): how it was added to built-ins fitted before it existed.
"""

from __future__ import annotations

import argparse
import os

from probembed.evaluation.lodo import LODO_DATASETS, embed_split, load_tasks
from probembed.evaluation.pipeline_tuning import tune_fusion
from probembed.evaluation.recipes import (
    BUILTIN_ESTIMATORS,
    MAX_PAIRS,
    candidate_pipeline,
    fit_candidates,
    sample_pairs,
)
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline, builtin_dir
from probembed.variance_basis import fitted_verdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = datasets_dir()
#: Grid step of the static weights: 56 points over four candidates, for the built-ins tuned on
#: all seven datasets (each point is scored on seven splits).
STATIC_STEP = 0.2
#: Built-in -> (the LODO datasets whose tuning splits choose its fusion, grid step). `retrieval`
#: is tuned on the one retrieval tuning split (SciFact train qrels); with a single split to
#: score, a 0.1 grid (286 points) costs what the 0.2 grid costs over seven.
TUNED_ON: dict[str, tuple[tuple[str, ...], float]] = {"retrieval": (("scifact",), 0.1)}


def tune_builtin(name: str, pairs: list[tuple[str, str]]) -> None:
    """Tune a built-in on its LODO tuning splits (TUNED_ON, else all seven); drop 0-weight members.

    The same steps as each fold of benchmarks/lodo.py, with no dataset left out
    (`pipeline_tuning.tune_fusion`, as `probembed tune` runs them). No test split is read.
    """
    pipe = candidate_pipeline(name, pairs)
    if len(pipe.members) < 2:
        return
    datasets, step = TUNED_ON.get(name, (None, STATIC_STEP))
    tasks = load_tasks(DATA, datasets)
    splits = {n: embed_split(pipe, t.tune, progress=True) for n, t in tasks.items()}
    kept = tune_fusion(pipe, splits, step, progress=True).pipeline
    kept.tuned_on = tuple(f"{LODO_DATASETS[n][0]}:{LODO_DATASETS[n][1]}" for n in tasks)
    kept.save(builtin_dir() / name)
    print(f"{name}: {kept.models} {kept.fusion} {kept.score} {kept.adapt}")


def ship_basis(name: str) -> None:
    """Fit a built-in's variance basis on this machine and write its file alone."""
    pipe = Pipeline.load(name, cache=False)
    verdict = fitted_verdict(pipe)  # fitted anew, not the one it ships
    verdict.write(builtin_dir() / name)
    kept = "coefficients" if verdict.basis is not None else "whole variances"
    print(f"{name}: {kept}, reference std error {verdict.std_error:.4%}")


def main() -> None:
    """Fit and write each built-in into probembed/pipelines/<name>."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-pairs", type=int, default=MAX_PAIRS)
    parser.add_argument("--only", action="append", help="build only these built-ins")
    parser.add_argument("--tune-only", action="store_true", help="keep members, retune fusion")
    parser.add_argument("--basis-only", action="store_true", help="write the variance basis alone")
    args = parser.parse_args()
    names = [n for n in BUILTIN_ESTIMATORS if not args.only or n in args.only]
    if args.basis_only:
        for name in names:
            ship_basis(name)
        return
    pairs = sample_pairs(DATA / "pairs", args.max_pairs)
    if args.tune_only:
        for name in names:
            tune_builtin(name, pairs)
        return
    print(f"fitting on {len(pairs)} pairs from {DATA / 'pairs'}")
    for name, pipe in fit_candidates(names, pairs, cache=False, progress=True).items():
        out = pipe.save(builtin_dir() / name)
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{name}: {', '.join(pipe.models)} -> {out} ({size / 1e6:.1f} MB)")
        tune_builtin(name, pairs)


if __name__ == "__main__":
    main()
