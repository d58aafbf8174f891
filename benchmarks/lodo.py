"""Leave-one-dataset-out: does an adaptive ensemble beat a static one on a domain it never saw?

    python benchmarks/lodo.py [--datasets stsb sick scifact mr cr sst2 banking77] [--step 0.2]
                              [--refit]

Every candidate member of the built-ins (laplace estimators) embeds the tuning and test
splits of seven datasets once. For each left-out dataset, every family is tuned on the
tuning splits of the other six only (mean primary metric: Spearman, nDCG@10, probe accuracy)
and scored on the left-out test split:

- static: weights on the simplex grid, cosine score;
- uec: per-text weights softmax(-log u/T + log p) around the static choice, uec score (T, β);
- mean+adapted, static+adapted, uec+adapted: the uniform mean, static and uec, each tilted
  by the left-out collection's own member agreement (probembed.fusion.adapt, no labels), γ
  tuned like any setting. uec+adapted is how the
  built-ins are tuned (scripts/build_pipelines.py, on every tuning split);
- uec+lambda: uec with the prior precision λ of the last-layer Laplace member (minilm; the
  others are adapters, whose variance barely depends on the text) tuned with (T, β) around
  the same static choice; each λ re-makes minilm from its stored Fisher, refits its
  calibration scale on the fit's held-out pairs and embeds every split again (one
  transformer pass per text serves every λ);
- router: a learned reliability router (probembed.fusion.router) around the same static
  choice: per member, a ridge regression of its per-item error (relative to the other
  members') on cheap text features, fitted on the other datasets' tuning splits only; its
  strength α tuned on them, each scored by a router fitted without it.

Singles and the plain mean need no tuning. Writes benchmarks/results/lodo.json.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from probembed.evaluation.harness import Method, baseline_methods
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    PRIOR_PRECISIONS,
    Scores,
    embed_tasks,
    fixed,
    load_tasks,
    prior_precision_variants,
    role_features,
    router_data,
    router_fold,
    router_transfer,
    run_fold,
    variant_splits,
)
from probembed.evaluation.recipes import candidate_pipeline, sample_pairs
from probembed.evaluation.report import write_json
from probembed.fusion.router import FEATURES
from probembed.paths import datasets_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> None:
    """Embed every split, run every fold, write the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--refit", action="store_true", help="fit every member from scratch")
    parser.add_argument(
        "--lambdas",
        nargs="+",
        type=float,
        default=list(PRIOR_PRECISIONS),
        help="prior precisions for uec+lambda (the shipped 1 first; just 1 skips the family)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data = datasets_dir()
    pairs = sample_pairs(data / "pairs")
    pipe = candidate_pipeline("default", pairs, refit=args.refit)
    tasks = load_tasks(data, args.datasets)
    splits = {}
    for name, task in tasks.items():
        start = time.perf_counter()
        splits.update(embed_tasks(pipe, {name: task}, progress=True))
        print(f"{name}: embedded in {time.perf_counter() - start:.0f}s", flush=True)
    scores = Scores(splits)
    pipes = prior_precision_variants(pipe, pairs, args.lambdas, progress=True)
    variants = {}
    for lam, variant in pipes.items():
        start = time.perf_counter()
        same = variant.fingerprint == pipe.fingerprint
        variants[lam] = scores if same else Scores(variant_splits(variant, splits, progress=True))
        print(f"lambda {lam:g}: embedded in {time.perf_counter() - start:.0f}s", flush=True)
    features = {key: role_features(split) for key, split in splits.items()}
    routed = {n: router_data(splits[n, "tune"], features[n, "tune"]) for n in tasks}
    rows: list[dict] = []
    chosen: dict[str, dict] = {}
    for name in tasks:
        start = time.perf_counter()
        fold = run_fold(
            scores, name, len(pipe.models), args.step, variants if len(variants) > 1 else None
        )
        untuned: list[Method] = baseline_methods(pipe.models)[:-1]  # singles and the mean
        figures = {m.name: scores.figure(name, "test", fixed(m)) for m in untuned}
        figures.update(fold.test)
        prior = fold.methods["static"].fusion.weights
        assert prior is not None  # a point of the static grid is a weighting
        alpha, figures["router"] = router_fold(splits, features, routed, name, prior)
        rows += [{"left_out": name, "method": m, "value": v} for m, v in figures.items()]
        chosen[name] = {
            "gamma": fold.gamma,
            "prior_precision": fold.prior_precision,
            "alpha": alpha,
            "methods": {f: {"fusion": m.fusion, "score": m.score} for f, m in fold.methods.items()},
        }
        shown = ", ".join(f"{m} {100 * v:.2f}" for m, v in figures.items())
        print(f"{name} ({time.perf_counter() - start:.0f}s): {shown}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "datasets": {n: LODO_DATASETS[n] for n in tasks},
        "agreement": {f"{n}/{r}": s.agreement.tolist() for (n, r), s in splits.items()},
        "prior_precisions": {
            f"{lam:g}": {
                m.encoder.name: {"scale": m.scale, "fingerprint": m.fingerprint} for m in p.members
            }
            for lam, p in pipes.items()
        },
        "chosen": chosen,
        "router": {
            "features": list(FEATURES),
            "transfer_rho": {n: router_transfer(routed, n) for n in tasks},
        },
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
