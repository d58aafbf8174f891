"""Static weights chosen with a label-free task made of the left-out collection's own texts.

    nice python benchmarks/lodo_halves.py [--datasets stsb sick ...] [--step 0.2]

Under the leave-one-dataset-out protocol of `benchmarks/lodo.py`, with the same members,
weight grid, tuning splits and embeddings (the pipeline's cache). Every label-free family
measured so far read how much the members *resemble* each other on a collection; this one
reads how well each *does* there, on a task that needs no label (`lodo.halves_task`, an
inverse-cloze task): 1,000 seeded texts of the collection of six words or more
(`lodo.collection_parts`' texts: an STS split's sentences, SciFact's corpus, a classification
split's probe texts), each cut in two at its middle word; a text's first half is a query
whose one relevant document is its own second half, among every sampled text's second half;
nDCG@10 of a weighting there is its "halves figure". Families, per fold:

- `static by halves`: the grid weights of the best halves figure on the left-out test
  collection, no tuning split read (what a collection could pick for itself at ingest);
- `static + halves`: the weights of the best standardised tuning mean over the other six plus
  gamma times the standardised halves figure on the left-out collection (each standardised
  over the grid: `lodo.halves_choice`), gamma in GAMMAS chosen by nested LODO
  (`lodo.tune_halves_gamma`: each of the six tuning datasets plays the left-out one, with its
  own tuning collection's halves task); every fixed gamma is reported too, not tuned.

Written down after a scratch run of the same definitions printed every test figure (the same
as here): GAMMAS and the 1,000 texts were not changed after it. Each family gets the paired
bootstrap 95% interval of its difference from `static` (2,000 resamples of test items,
seeded); each single member is scored too, on the test split and on the halves tasks.
Writes benchmarks/results/lodo_halves.json.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from probembed.evaluation.harness import Method, baseline_methods, evaluate
from probembed.evaluation.lodo import (
    HALVES_MIN_WORDS,
    HALVES_TEXTS,
    LODO_DATASETS,
    Scores,
    candidate_splits,
    embed_split,
    fixed,
    halves_static,
    halves_task,
    tune_halves_gamma,
    tune_static_uec,
)
from probembed.evaluation.paired import BOOTSTRAP, paired_difference
from probembed.evaluation.report import write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Weights of the standardised halves figure against the standardised tuning mean (0 is
#: `static`; inf, the halves figure alone, is its own family): from "a tie-break" to "twice
#: the tuning mean's say".
GAMMAS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def main() -> None:
    """Embed every split and its halves tasks, tune gamma and the weights per fold, score."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_halves.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = list(LODO_DATASETS)
    pipe, tasks, splits = candidate_splits(names)  # every fold tunes on all the others
    halves = {
        (name, role): halves_task(name, dataset)
        for name, task in tasks.items()
        for role, dataset in (("halves-tune", task.tune), ("halves-test", task.test))
    }
    for key, task in halves.items():
        splits[key] = embed_split(pipe, task, progress=True)
    scores = Scores(splits)
    k = len(pipe.models)
    singles = [m for m in baseline_methods(pipe.models) if m.fusion.method.startswith("single:")]
    rows: list[dict] = []
    for name in args.datasets:
        gamma, curve = tune_halves_gamma(scores, k, args.step, name, GAMMAS)
        static, _ = tune_static_uec(scores, k, args.step, name)
        families: dict[str, tuple[Method, float]] = {
            "static": (static, 0.0),
            "static by halves": (
                halves_static(scores, k, args.step, name, "halves-test", float("inf")),
                float("inf"),
            ),
            "static + halves": (
                halves_static(scores, k, args.step, name, "halves-test", gamma),
                gamma,
            ),
        }
        for g in GAMMAS[1:]:
            method = halves_static(scores, k, args.step, name, "halves-test", g)
            families[f"static + halves, gamma {g:g} (not tuned)"] = (method, g)
        test = scores.splits[name, "test"]
        reference = evaluate(test.embedded, test.dataset, static)
        for family, (method, used) in families.items():
            row = {
                "left_out": name,
                "method": family,
                "value": scores.figure(name, "test", fixed(method)),
                "fusion": method.fusion,
                "gamma": used,
                "halves_figure": scores.figure(name, "halves-test", fixed(method)),
                "tuning_mean": scores.tuning_mean(fixed(method), name),
            }
            if family == "static + halves":
                row["nested_tuning"] = {"gammas": list(GAMMAS), "figures": curve}
            if family != "static":
                outcome = evaluate(test.embedded, test.dataset, method)
                row["vs_static"] = paired_difference(test.dataset, reference, outcome)
            rows.append(row)
        for member in singles:
            rows.append(
                {
                    "left_out": name,
                    "method": member.name,
                    "value": scores.figure(name, "test", fixed(member)),
                    "halves_figure": scores.figure(name, "halves-test", fixed(member)),
                    "halves_tuning_figure": scores.figure(name, "halves-tune", fixed(member)),
                }
            )
        shown = "; ".join(
            f"{family} {100 * scores.figure(name, 'test', fixed(m)):.2f} {m.fusion.weights}"
            for family, (m, _) in families.items()
        )
        print(f"{name}: gamma {gamma:g}; {shown}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "gammas": list(GAMMAS),
        "halves_texts": HALVES_TEXTS,
        "halves_min_words": HALVES_MIN_WORDS,
        "halves_queries": {f"{n} {role}": len(t.queries) for (n, role), t in halves.items()},
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": BOOTSTRAP,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
