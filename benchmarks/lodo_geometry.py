"""Does adapting each member's geometry to a new domain, without labels, beat static weights?

    python benchmarks/lodo_geometry.py [--datasets stsb sick ...] [--step 0.2]

Two label-free adaptations beside the agreement tilt of `benchmarks/lodo.py`, under the same
leave-one-dataset-out protocol, members, weight grid and tuning splits:

- centred: each member's unit vectors minus that member's mean over the left-out collection
  (STS: both sentences of every pair; SciFact: the corpus; classification: the probe's train
  and test texts), normalised again by fusion; static weights tuned on the other six tuning
  splits centred the same way. `centred or not` tunes the choice itself with the weights.
- static+spread, mean+spread: the static (or uniform) weights tilted by
  softmax(log p − γ·log σ_k), σ_k the standard deviation of member k's cosines over 5,000
  seeded random pairs of the collection's texts; γ = 1 z-scores each member's cosines before
  they are summed, γ ∈ {0, 0.5, 1, 1.5, 2} tuned like every setting.
- static+factor, mean+factor: the same tilt by log w_k, the weights a one-factor measurement
  model of those cosines gives each member (`lodo.factor_weights`: a shared similarity plus
  each member's own noise; γ = 1 around the uniform mean is the model's least-noise reading),
  γ from the same grid.

Also each single member plain and centred (no tuning), which says whether a gain is the
ensemble's or every member's, and on classification its probe accuracy with a tenth of the
probe's L2 penalty (C = 10 against MTEB's 1), which says how much of a gain is the penalty's.
Every tuned family gets the paired bootstrap 95% interval of its difference from `static`
(2,000 resamples of test items, seeded); the mean tuning figure of the best plain and best
centred weights per fold (what `centred or not` compares) and each tuning split's best figure
either way are kept too. Writes benchmarks/results/lodo_geometry.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from probembed.evaluation.datasets import ClassificationDataset
from probembed.evaluation.harness import Method, baseline_methods, evaluate
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    Scores,
    Setting,
    Split,
    candidate_splits,
    centred_split,
    choose_across,
    cosine_spread,
    factor_weights,
    fixed,
    static_methods,
    tilted_settings,
)
from probembed.evaluation.metrics import probe_correct
from probembed.evaluation.paired import BOOTSTRAP, paired_difference
from probembed.evaluation.report import write_json
from probembed.pipeline import FusionConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Spread tilts: members' σ differ by up to ×1.3 on a collection, so γ = 2 moves a weight by
#: up to ×1.7; γ = 1 z-scores each member's cosines.
SPREAD_GAMMAS = (0.0, 0.5, 1.0, 1.5, 2.0)
#: The probe's C for the diagnostic beside MTEB's 1: a tenth of the L2 penalty.
WEAKER_PENALTY = 10.0


def probe_penalty(split: Split, member: Method) -> dict[str, float]:
    """A single member's probe accuracy at C = 1 and at WEAKER_PENALTY: how much of a figure
    is the probe's penalty."""
    dataset = split.dataset
    assert isinstance(dataset, ClassificationDataset)
    train = split.embedded.fused("train", member.fusion).gaussian.mean
    test = split.embedded.fused("test", member.fusion).gaussian.mean
    return {
        f"C={c:g}": float(
            probe_correct(train, dataset.train_labels, test, dataset.test_labels, 0, c).mean()
        )
        for c in (1.0, WEAKER_PENALTY)
    }


def main() -> None:
    """Embed every split, centre it, measure its spreads, run every fold, write the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_geometry.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pipe, tasks, splits = candidate_splits()  # every fold tunes on all the others
    plain = Scores(splits)
    centred = Scores({key: centred_split(split) for key, split in splits.items()})
    variants = {"plain": plain, "centred": centred}
    spreads = {key: cosine_spread(split) for key, split in splits.items()}
    factors = {key: factor_weights(split) for key, split in splits.items()}

    def key_of(split: Split) -> tuple[str, str]:
        """Which split of the benchmark's this is (the statistics are measured once each)."""
        return next(key for key, known in splits.items() if known is split)

    def narrow(split: Split, prior: Sequence[float]) -> np.ndarray:
        """−log σ_k of the split: a tilt towards the members that spread its texts least."""
        return -np.log(spreads[key_of(split)])

    def reliable(split: Split, prior: Sequence[float]) -> np.ndarray:
        """log w_k of the split's one-factor model: a tilt towards its least-noise reading."""
        return np.log(factors[key_of(split)])

    k = len(pipe.models)
    grid = [fixed(m) for m in static_methods(k, args.step)]
    uniform = Method("mean", FusionConfig("weighted", weights=(1.0 / k,) * k))
    singles = [m for m in baseline_methods(pipe.models) if m.fusion.method.startswith("single:")]
    rows: list[dict] = []
    tuning: dict[str, dict] = {}
    for name in args.datasets:
        static = grid[plain.choose(grid, name)]
        base = static(splits[name, "test"])
        chosen = {v: grid[scores.choose(grid, name)] for v, scores in variants.items()}
        tuning[name] = {v: variants[v].tuning_mean(s, name) for v, s in chosen.items()}
        either, j = choose_across(variants, grid, name)
        families: dict[str, tuple[Scores, Setting]] = {
            "static": (plain, static),
            "centred": (centred, chosen["centred"]),
            "centred or not": (variants[either], grid[j]),
        }
        for statistic, tilt in (("spread", narrow), ("factor", reliable)):
            for label, around in (("static", base), ("mean", uniform)):
                tilts = tilted_settings(around, tilt, SPREAD_GAMMAS, f"{label}+{statistic}")
                families[f"{label}+{statistic}"] = (plain, tilts[plain.choose(tilts, name)])
        reference = evaluate(splits[name, "test"].embedded, tasks[name].test, base)
        for family, (scores, setting) in families.items():
            split = scores.splits[name, "test"]
            method = setting(split)
            value = scores.figure(name, "test", setting)
            row = {"left_out": name, "method": family, "value": value, "fusion": method.fusion}
            if family != "static":
                outcome = evaluate(split.embedded, split.dataset, method)
                row["vs_static"] = paired_difference(split.dataset, reference, outcome)
            rows.append(row)
        for member in singles:
            for label, scores in variants.items():
                split = scores.splits[name, "test"]
                value = scores.figure(name, "test", fixed(member))
                row = {"left_out": name, "method": f"{member.name} {label}", "value": value}
                if isinstance(split.dataset, ClassificationDataset):
                    row["probe_penalty"] = probe_penalty(split, member)
                rows.append(row)
        ours = [r for r in rows if r["left_out"] == name]
        shown = ", ".join(f"{r['method']} {100 * r['value']:.2f}" for r in ours)
        print(f"{name}: {shown}", flush=True)
    best_tuning = {
        f"{n}/{v}": max(scores.figure(n, "tune", s) for s in grid)
        for n in LODO_DATASETS
        for v, scores in variants.items()
    }
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "spread_gammas": list(SPREAD_GAMMAS),
        "spread": {f"{n}/{r}": [round(float(v), 4) for v in s] for (n, r), s in spreads.items()},
        "factor_weights": {
            f"{n}/{r}": [round(float(v), 4) for v in w] for (n, r), w in factors.items()
        },
        "mean_tuning_figure": tuning,
        "best_tuning_figure": best_tuning,
        "weaker_penalty": WEAKER_PENALTY,
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": BOOTSTRAP,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
