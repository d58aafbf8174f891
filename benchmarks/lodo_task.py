"""Does knowing the task a collection serves pick better static weights for it?

    nice python benchmarks/lodo_task.py [--datasets stsb sick ...] [--step 0.2]

A collection's use is known at run time: it is searched with queries (retrieval), its pairs
are scored (STS) or its texts are fed to a classifier (classification). Under the
leave-one-dataset-out protocol of `benchmarks/lodo.py`, with the same members, weight grid,
tuning splits and embeddings (the pipeline's cache), each fold's settings are tuned on:

- static, uec: the other six tuning splits alike (the LODO baselines);
- static by task, uec by task: the other tuning splits of the left-out dataset's task only
  (STS-B <- SICK-R; SICK-R <- STS-B; MR <- CR, SST-2, Banking77; ...); SciFact, the one
  retrieval dataset, falls back to all six (`fallback` in the output);
- static by task, pooled and uec by task, pooled: the mean of the two tuning means, the
  same-task one and the all-six one, half and half (SAME_TASK_SHARE, fixed in advance).

uec tunes (T, β) around its family's static weights with the same tuning mean. Each single
member is scored too (no tuning). Every tuned family gets the paired bootstrap 95% interval
of its difference from `static` (2,000 resamples of test items, seeded). Writes
benchmarks/results/lodo_task.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from probembed.evaluation.datasets import dataset_kind
from probembed.evaluation.harness import Method, baseline_methods, evaluate
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    Scores,
    Shares,
    candidate_splits,
    fixed,
    same_task,
    task_shares,
    tune_static_uec,
)
from probembed.evaluation.paired import BOOTSTRAP, paired_difference
from probembed.evaluation.report import write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: The same-task tuning mean's share in the pooled family: half, written down before any run.
SAME_TASK_SHARE = 0.5


def fold_shares(tasks: dict[str, str], left_out: str) -> dict[str, Shares]:
    """Each family's weighting of the other datasets' tuning figures in this fold."""
    return {
        "": None,
        " by task": task_shares(tasks, left_out, 1.0),
        " by task, pooled": task_shares(tasks, left_out, SAME_TASK_SHARE),
    }


def chosen(method: Method) -> str:
    """A tuned method's settings on one line, so a fold's choices can be read as it runs."""
    fusion = method.fusion
    if fusion.method != "uec":
        return f"weights {fusion.weights}"
    return f"prior {fusion.prior}, T {fusion.temperature:g}, beta {method.score.beta:g}"


def family_rows(
    scores: Scores,
    name: str,
    families: Mapping[str, tuple[Method, Shares]],
    singles: Sequence[Method],
) -> list[dict]:
    """Each family's row for left-out `name` (test figure, settings, tuning mean and, but for
    `static`'s own, the paired interval of its difference from `static`), then each single
    member's test figure: the rows every fold of a static-weight family writes."""
    test = scores.splits[name, "test"]
    reference = evaluate(test.embedded, test.dataset, families["static"][0])
    rows = []
    for family, (method, shares) in families.items():
        row = {
            "left_out": name,
            "method": family,
            "value": scores.figure(name, "test", fixed(method)),
            "fusion": method.fusion,
            "score": method.score,
            "tuning_shares": shares,
            "tuning_mean": scores.tuning_mean(fixed(method), name, shares),
        }
        if family != "static":
            outcome = evaluate(test.embedded, test.dataset, method)
            row["vs_static"] = paired_difference(test.dataset, reference, outcome)
        rows.append(row)
    for member in singles:
        value = scores.figure(name, "test", fixed(member))
        rows.append({"left_out": name, "method": member.name, "value": value})
    return rows


def main() -> None:
    """Embed every split, tune every family per fold, score it on the left-out test split."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_task.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pipe, tasks, splits = candidate_splits()  # every fold tunes on all the others
    kinds = {name: dataset_kind(task.test) for name, task in tasks.items()}
    scores = Scores(splits)
    singles = [m for m in baseline_methods(pipe.models) if m.fusion.method.startswith("single:")]
    rows: list[dict] = []
    fallback = []
    for name in args.datasets:
        if not same_task(kinds, name):
            fallback.append(name)
            print(f"{name}: no other {kinds[name]} dataset; 'by task' tunes on all six")
        families: dict[str, tuple[Method, Shares]] = {}
        for label, shares in fold_shares(kinds, name).items():
            static, uec = tune_static_uec(scores, len(pipe.models), args.step, name, shares)
            families[f"static{label}"] = (static, shares)
            families[f"uec{label}"] = (uec, shares)
        rows += family_rows(scores, name, families, singles)
        shown = "; ".join(
            f"{family} {100 * scores.figure(name, 'test', fixed(m)):.2f} {chosen(m)}"
            for family, (m, _) in families.items()
        )
        print(f"{name}: {shown}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "tasks": kinds,
        "same_task_share": SAME_TASK_SHARE,
        "fallback_to_all": fallback,
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": BOOTSTRAP,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
