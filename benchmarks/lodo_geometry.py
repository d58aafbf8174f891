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

Also each single member plain and centred (no tuning), which says whether a gain is the
ensemble's or every member's. Every tuned family gets the paired bootstrap 95% interval of its
difference from `static` (2,000 resamples of test items, seeded).
Writes benchmarks/results/lodo_geometry.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from probembed.evaluation.harness import Method, baseline_methods, evaluate
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    Scores,
    Setting,
    Split,
    centred_split,
    cosine_spread,
    embed_split,
    fold_choice,
    load_tasks,
    paired_difference,
    static_methods,
    tilted_settings,
)
from probembed.evaluation.recipes import candidate_pipeline, sample_pairs
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Spread tilts: members' σ differ by up to ×1.3 on a collection, so γ = 2 moves a weight by
#: up to ×1.7; γ = 1 z-scores each member's cosines.
SPREAD_GAMMAS = (0.0, 0.5, 1.0, 1.5, 2.0)


def tuned(
    variants: Mapping[str, Scores], settings: Sequence[Setting], left_out: str
) -> tuple[str, Setting]:
    """The (variant, setting) with the best mean tuning figure over the datasets but left_out."""
    names = sorted({n for s in variants.values() for n, _ in s.splits} - {left_out})
    dev = {
        n: [scores.figure(n, "tune", s) for scores in variants.values() for s in settings]
        for n in names
    }
    j = fold_choice(dev, left_out)
    return list(variants)[j // len(settings)], settings[j % len(settings)]


def main() -> None:
    """Embed every split, centre it, measure its spreads, run every fold, write the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_geometry.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data = datasets_dir()
    pipe = candidate_pipeline("default", sample_pairs(data / "pairs"))
    tasks = load_tasks(data, list(LODO_DATASETS))  # every fold tunes on all the others
    splits: dict[tuple[str, str], Split] = {
        (name, role): embed_split(pipe, dataset, progress=True)
        for name, task in tasks.items()
        for role, dataset in (("tune", task.tune), ("test", task.test))
    }
    plain = Scores(splits)
    centred = Scores({key: centred_split(split) for key, split in splits.items()})
    spreads = {key: cosine_spread(split) for key, split in splits.items()}
    by_split = {id(split): spreads[key] for key, split in splits.items()}

    def narrow(split: Split, prior: Sequence[float]) -> np.ndarray:
        """−log σ_k of the split: a tilt towards the members that spread its texts least."""
        return -np.log(by_split[id(split)])

    k = len(pipe.models)
    grid = [lambda _, m=m: m for m in static_methods(k, args.step)]
    uniform = Method("mean", FusionConfig("weighted", weights=(1.0 / k,) * k))
    singles = baseline_methods(pipe.models)[:-2]
    rows: list[dict] = []
    for name in args.datasets:
        _, static = tuned({"plain": plain}, grid, name)
        base = static(splits[name, "test"])
        families: dict[str, tuple[Scores, Setting]] = {
            "static": (plain, static),
            "centred": (centred, tuned({"centred": centred}, grid, name)[1]),
        }
        either, setting = tuned({"plain": plain, "centred": centred}, grid, name)
        families["centred or not"] = ({"plain": plain, "centred": centred}[either], setting)
        for label, around in (("static", base), ("mean", uniform)):
            tilts = tilted_settings(around, narrow, SPREAD_GAMMAS, f"{label}+spread")
            families[f"{label}+spread"] = (plain, tuned({"plain": plain}, tilts, name)[1])
        reference = evaluate(splits[name, "test"].embedded, tasks[name].test, base)
        for family, (scores, setting) in families.items():
            split = scores.splits[name, "test"]
            method = setting(split)
            row = {
                "left_out": name,
                "method": family,
                "value": scores.figure(name, "test", setting),
            }
            row["fusion"] = method.fusion
            if family != "static":
                outcome = evaluate(split.embedded, split.dataset, method)
                row["vs_static"] = paired_difference(split.dataset, reference, outcome)
            rows.append(row)
        for member in singles:
            for label, scores in (("plain", plain), ("centred", centred)):
                value = scores.figure(name, "test", lambda _, m=member: m)
                rows.append({"left_out": name, "method": f"{member.name} {label}", "value": value})
        shown = ", ".join(
            f"{r['method']} {100 * r['value']:.2f}" for r in rows if r["left_out"] == name
        )
        print(f"{name}: {shown}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "spread_gammas": list(SPREAD_GAMMAS),
        "spread": {f"{n}/{r}": [round(float(v), 4) for v in s] for (n, r), s in spreads.items()},
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": {"resamples": 2000, "interval": 0.95, "method": "percentile", "seed": 0},
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
