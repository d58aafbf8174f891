"""Refit the built-in pipelines that ship inside the package (seeded; reads ../shared only).

    python scripts/build_pipelines.py [--max-pairs 8000] [--only NAME]

Every built-in is fitted on the same seeded sample of positive pairs from
../shared/datasets/pairs/*.tsv, so a user anywhere gets the fitted state with no data and no
waiting. Fusion settings of `default` come from tuning on dev splits (see probembed.evaluation).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from probembed.encoders import get_encoder
from probembed.evaluation.datasets import load_dataset, load_pairs
from probembed.evaluation.harness import embed
from probembed.evaluation.tuning import tune, without_unweighted
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline, builtin_dir
from probembed.uncertainty import Estimator, make_estimator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DATA = datasets_dir()
PAIRS_DIR = DATA / "pairs"
DEV_SPLITS = (  # tuning data only: never a split the README reports
    (DATA / "sts" / "stsb", "dev"),
    (DATA / "sts" / "sick", "dev"),
    (DATA / "retrieval" / "scifact", "train"),
)
DEFAULT_MODELS = ("minilm", "paraphrase-l3", "use", "wordllama")
SEED = 0


def sample_pairs(max_pairs: int, seed: int) -> list[tuple[str, str]]:
    """A seeded sample from every pairs file, in file order so the sample is reproducible."""
    pairs: list[tuple[str, str]] = []
    for path in sorted(PAIRS_DIR.glob("*.tsv")):
        data = load_pairs(path)
        pairs.extend(zip(data.text_a, data.text_b, strict=True))
    if len(pairs) > max_pairs:
        keep = np.sort(np.random.default_rng(seed).choice(len(pairs), max_pairs, replace=False))
        pairs = [pairs[i] for i in keep]
    return pairs


def builtins() -> dict[str, tuple[list[ModelSpec], FusionConfig]]:
    """Name -> (members, fusion) of every pipeline that ships with the package."""
    laplace = [ModelSpec(m, "laplace", {"seed": SEED}) for m in DEFAULT_MODELS]
    perturb = [ModelSpec(m, "perturb", {"seed": SEED}) for m in DEFAULT_MODELS]
    head = [ModelSpec(m, "head", {"seed": SEED}) for m in DEFAULT_MODELS]
    return {
        "default": (laplace, FusionConfig("uec", "concat")),
        "default-head": (head, FusionConfig("uec", "concat")),
        "default-perturb": (perturb, FusionConfig("uec", "concat")),
    }


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
    parser.add_argument("--max-pairs", type=int, default=8000)
    parser.add_argument("--only", action="append", help="build only these built-ins")
    parser.add_argument("--tune-only", action="store_true", help="keep members, retune fusion")
    args = parser.parse_args()
    names = [n for n in builtins() if not args.only or n in args.only]
    if args.tune_only:
        for name in names:
            tune_fusion(name)
        return
    pairs = sample_pairs(args.max_pairs, SEED)
    print(f"fitting on {len(pairs)} pairs from {PAIRS_DIR}")
    fitted: dict[tuple[str, str], Estimator] = {}  # members shared by built-ins are fitted once
    for name in names:
        specs, fusion = builtins()[name]
        for spec in specs:
            if (spec.encoder, spec.estimator) not in fitted:
                member = make_estimator(spec.estimator, get_encoder(spec.encoder), **spec.params)
                fitted[spec.encoder, spec.estimator] = member.fit(pairs, progress=True)
        members = [fitted[s.encoder, s.estimator] for s in specs]
        pipe = Pipeline(members, fusion, name=name, cache=False)
        out = pipe.save(builtin_dir() / name)
        size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"{name}: {', '.join(pipe.models)} -> {out} ({size / 1e6:.1f} MB)")
        tune_fusion(name)


if __name__ == "__main__":
    main()
