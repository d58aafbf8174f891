"""Static weights chosen to stay above the best single member, not for the best mean.

    nice python benchmarks/lodo_regret.py [--datasets stsb sick ...] [--step 0.2]

A user who adopts an ensemble wants it never to be worse than the single model they would
otherwise pick; the mean tuning figure that every other LODO family maximises does not say
that. Under the leave-one-dataset-out protocol of `benchmarks/lodo.py`, with the same members,
0.2 simplex grid, tuning splits and embeddings (the pipeline's cache), `static, least regret`
chooses a fold's static weights by one of two objectives. Both definitions were written down
here before any test figure was seen, and were not changed after:

- margin_j(w) = (the ensemble of grid weights w on dataset j's tuning split) − (the best
  single member's figure on j's tuning split: the highest of the four members' own figures
  there, each scored alone by cosine, as `static` is), for each of the six tuning datasets j
  other than the left-out one (`lodo.single_margins`). Nothing of the left-out dataset is read.
- `minimax`: the grid weights that maximise min_j margin_j(w); ties broken by the mean tuning
  figure over the six, then by the grid's order (`lodo.minimax_choice`).
- `constrained`: among the grid weights with margin_j(w) >= 0 on every one of the six, the one
  with the best mean tuning figure (then the grid's order); if no grid weights clear every
  best single member, `minimax`'s choice, and the fold is recorded as having fallen back
  (`fell_back` in the output; `lodo.constrained_choice`).

Ties are figures within `tuning.TIE` (1e-12) of each other, as `fold_choice` reads them. Each
objective's `uec` row tunes uec's (T, β) around its static weights by the same objective
(`lodo.least_regret_static_uec`), as `benchmarks/lodo_task.py` does for its families; `static`
and `uec` are the plain LODO rows (mean tuning figure). Each row gets the paired bootstrap
95% interval of its difference from `static` (`paired.BOOTSTRAP`), its margin over the best
single member on each tuning split, and the best single member on the left-out test split
with whether the row is below it. Each single member is scored too. Writes
benchmarks/results/lodo_regret.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from lodo_task import chosen, family_rows

from probembed.evaluation.harness import Method, baseline_methods
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    REGRET_OBJECTIVES,
    Scores,
    Shares,
    best_singles,
    candidate_splits,
    fixed,
    least_regret_static_uec,
    single_margins,
    tune_static_uec,
)
from probembed.evaluation.paired import BOOTSTRAP
from probembed.evaluation.report import write_json
from probembed.evaluation.tuning import TIE

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def family_label(family: str, objective: str) -> str:
    """A least-regret row's name: its family (static or uec) and its objective."""
    return f"{family}, least regret ({objective})"


def tuning_margins(
    scores: Scores, method: Method, left_out: str, best_single: Mapping[str, float]
) -> dict[str, float]:
    """The method's margin over the best single member on each tuning split of the fold."""
    dev = scores.tuning_figures([fixed(method)], left_out)
    return {n: float(m[0]) for n, m in single_margins(dev, best_single, left_out).items()}


def fold_families(
    scores: Scores, k: int, step: float, name: str, best_single: Mapping[str, float]
) -> tuple[dict[str, tuple[Method, Shares]], dict[str, bool]]:
    """Every family's method in one fold (the plain LODO pair first), and which least-regret
    family fell back from `constrained` to `minimax`."""
    static, uec = tune_static_uec(scores, k, step, name)
    families: dict[str, tuple[Method, Shares]] = {"static": (static, None), "uec": (uec, None)}
    fell_back = {}
    for objective in REGRET_OBJECTIVES:
        least = least_regret_static_uec(scores, k, step, name, best_single, objective)
        for family, method in zip(("static", "uec"), least[:2], strict=True):
            families[family_label(family, objective)] = (method, None)
            fell_back[family_label(family, objective)] = least[2][family]
    return families, fell_back


def annotated(
    rows: list[dict],
    scores: Scores,
    families: Mapping[str, tuple[Method, Shares]],
    fell_back: Mapping[str, bool],
    best_single: Mapping[str, float],
    singles: Sequence[Method],
) -> list[dict]:
    """A fold's rows, each family's with its tuning margins, whether `constrained` fell back,
    and the best single member on the left-out test split with whether the row is below it."""
    by_name = {r["method"]: r for r in rows}
    best = max(singles, key=lambda m: by_name[m.name]["value"])
    top = {"member": best.name.removeprefix("single:"), "value": by_name[best.name]["value"]}
    for family, (method, _) in families.items():
        row = by_name[family]
        row["tuning_margins"] = tuning_margins(scores, method, row["left_out"], best_single)
        row["worst_tuning_margin"] = min(row["tuning_margins"].values())
        if family in fell_back:
            row["fell_back"] = fell_back[family]
        row["best_single_test"] = top
        row["below_best_single"] = bool(row["value"] < top["value"] - TIE)
    return rows


def main() -> None:
    """Embed every split, choose each family's weights per fold, score it on the left-out test."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_regret.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pipe, _, splits = candidate_splits()  # every fold tunes on all the others
    scores = Scores(splits)
    k = len(pipe.models)
    singles = [m for m in baseline_methods(pipe.models) if m.fusion.method.startswith("single:")]
    single_tuning = scores.tuning_figures([fixed(m) for m in singles], None)
    rows: list[dict] = []
    fell_back_folds: dict[str, list[str]] = {}
    for name in args.datasets:
        best_single = best_singles(scores, singles, name)
        families, fell_back = fold_families(scores, k, args.step, name, best_single)
        for family, fell in fell_back.items():
            fell_back_folds.setdefault(family, []).extend([name] if fell else [])
        fold = family_rows(scores, name, families, singles)
        rows += annotated(fold, scores, families, fell_back, best_single, singles)
        shown = "; ".join(
            f"{family} {100 * scores.figure(name, 'test', fixed(m)):.2f} {chosen(m)}"
            for family, (m, _) in families.items()
        )
        print(f"{name}: {shown}; fell back: {[f for f, b in fell_back.items() if b]}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "objectives": list(REGRET_OBJECTIVES),
        "tie": TIE,
        "fell_back_to_minimax": fell_back_folds,
        "single_tuning_figures": {
            n: dict(zip(pipe.models, figures, strict=True)) for n, figures in single_tuning.items()
        },
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": BOOTSTRAP,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
