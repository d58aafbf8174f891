"""Which per-text signal tracks a member's own errors? ρ(u_k(x), own error) on seven datasets.

    python benchmarks/error_signals.py [--datasets stsb sick ...]

For the four members of the built-ins (laplace estimators) on the tuning and test splits of
the seven leave-one-dataset-out datasets, the Spearman correlation of each per-text signal
u_k(x) with member k's own error on the item (`lodo.item_errors`: STS, the pair's absolute
rank error; SciFact, 1 − nDCG@10 of the query; classification, the probe's −log p(true
label)). A pair's signal is the mean of its two texts'. The signals:

- laplace: log of the member's own posterior variance (`uncertainty`);
- anchors: 1 − correlation of the member's cosine profile over 256 anchor texts with the
  other members' (relative representations, `router.anchor_disagreement`);
- neighbours@m: the share of the member's m nearest texts that the other members' consensus
  does not list (`adapt.neighbour_disagreement`): a query's nearest corpus documents, or a
  text's nearest among the other texts of its split (no labels);
- neighbours@5-20 and neighbours@5-200: the same averaged over m ∈ {5, 10, 20} and over
  m ∈ {5, 10, 20, 50, 100, 200} (the shipped `adapt.SCALES`).

Which neighbour scale is shipped is chosen on the tuning splits only: the candidate with the
highest mean ρ over the seven tuning splits and four members. Its test ρ gets a seeded
bootstrap 95% interval (1,000 resamples of test items). Writes
benchmarks/results/error_signals.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap, spearmanr

from probembed.evaluation.lodo import (
    LODO_DATASETS,
    Split,
    embed_split,
    item_errors,
    item_features,
    load_tasks,
    role_features,
)
from probembed.evaluation.recipes import candidate_pipeline, sample_pairs
from probembed.evaluation.report import write_json
from probembed.fusion.adapt import SCALES, neighbour_disagreement
from probembed.fusion.router import FEATURES
from probembed.paths import datasets_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Neighbour scales compared; the multi-scale averages are listed after the single ones.
CANDIDATES: dict[str, tuple[int, ...]] = {
    **{f"neighbours@{m}": (m,) for m in SCALES},
    "neighbours@5-20": (5, 10, 20),
    "neighbours@5-200": SCALES,
}
RESAMPLES = 1000


def neighbour_signal(split: Split, scales: Sequence[int]) -> np.ndarray:
    """(items, K) each member's neighbour disagreement on every item of the split."""
    parts = split.embedded.parts
    if "queries" in parts:  # a query's neighbours are the corpus documents
        return neighbour_disagreement(parts["queries"], parts["docs"], scales)
    roles = ("a", "b") if "a" in parts else ("test",)
    return np.mean([neighbour_disagreement(parts[r], None, scales) for r in roles], axis=0)


def signals(split: Split) -> dict[str, np.ndarray]:
    """Every signal, (items, K), on one split."""
    features = item_features(role_features(split))
    out = {
        "laplace": features[..., FEATURES.index("log_u")],
        "anchors": features[..., FEATURES.index("disagreement")],
    }
    out.update({name: neighbour_signal(split, scales) for name, scales in CANDIDATES.items()})
    return out


def rho(signal: np.ndarray, errors: np.ndarray) -> list[float]:
    """Per member, Spearman ρ of its signal with its own error."""
    return [float(spearmanr(signal[:, k], errors[:, k]).statistic) for k in range(errors.shape[1])]


def rho_interval(signal: np.ndarray, error: np.ndarray) -> list[float]:
    """Seeded percentile bootstrap 95% interval of ρ over resampled items."""

    def statistic(u: np.ndarray, e: np.ndarray) -> float:
        return spearmanr(u, e).statistic

    result = bootstrap(
        (signal, error),
        statistic,
        paired=True,
        vectorized=False,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]


def main() -> None:
    """Embed every split once, correlate every signal with each member's own error."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--out", type=Path, default=RESULTS / "error_signals.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    data = datasets_dir()
    pipe = candidate_pipeline("default", sample_pairs(data / "pairs"))
    tasks = load_tasks(data, args.datasets)
    rows: list[dict] = []
    kept: dict[str, tuple[dict[str, np.ndarray], np.ndarray]] = {}
    for name, task in tasks.items():
        for role, dataset in (("tune", task.tune), ("test", task.test)):
            split = embed_split(pipe, dataset, progress=True)
            errors, found = item_errors(split), signals(split)
            if role == "test":
                kept[name] = (found, errors)
            for signal, values in found.items():
                row = {"dataset": name, "split": role, "signal": signal, "items": len(errors)}
                rows.append(
                    {**row, "rho": dict(zip(pipe.models, rho(values, errors), strict=True))}
                )
            print(name, role, {r["signal"]: r["rho"] for r in rows[-len(found) :]}, flush=True)
    tuned = {
        c: float(
            np.mean(
                [list(r["rho"].values()) for r in rows if (r["split"], r["signal"]) == ("tune", c)]
            )
        )
        for c in CANDIDATES
    }
    chosen = max(CANDIDATES, key=lambda c: tuned[c])  # first listed wins a tie
    for r in rows:
        if r["split"] == "test" and r["signal"] == chosen:
            found, errors = kept[r["dataset"]]
            r["interval"] = {
                model: rho_interval(found[chosen][:, k], errors[:, k])
                for k, model in enumerate(pipe.models)
            }
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "candidates": {c: list(s) for c, s in CANDIDATES.items()},
        "tune_mean_rho": tuned,
        "chosen": chosen,
        "bootstrap": {"resamples": RESAMPLES, "interval": 0.95, "method": "percentile", "seed": 0},
    }
    write_json(args.out, rows, config)
    print(f"chosen on the tuning splits: {chosen}; wrote {args.out}")


if __name__ == "__main__":
    main()
