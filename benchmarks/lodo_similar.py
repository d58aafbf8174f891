"""Static weights tuned on the datasets whose texts look like the left-out collection's.

    nice python benchmarks/lodo_similar.py [--datasets stsb sick ...] [--step 0.2]

Under the leave-one-dataset-out protocol of `benchmarks/lodo.py`, with the same members,
weight grid, tuning splits and embeddings (the pipeline's cache), `static by similarity`
chooses a fold's static weights by a tuning mean in which each other dataset j has the share

    softmax_j( sim(left-out collection, j) / tau )

(`lodo.similarity_shares`). The definition, written down before any test figure was seen:

- sim(X, Y) is the cosine between the centroids of X's and Y's texts, each centroid the
  float64 mean of the texts' unit vectors in one member's space, averaged over the four
  members (`lodo.collection_centres`, `lodo.collection_similarity`). No labels are read.
- A split's texts are its "collection" as every `+adapted` row reads it
  (`lodo.collection_parts`): an STS split's two sentences of every pair; SciFact's corpus;
  a classification split's probe texts (the 1,000 probe-fitting train texts and the texts
  the probe is scored on). The left-out side is its test split's collection, each j's its
  tuning split's. SciFact is read by its corpus rather than its queries: the corpus is what a
  collection holds before any query arrives (what ingest sees and the agreement tilt reads),
  there are 5,183 documents against 300 test queries, and its tuning and test splits share
  it, so both sides of the comparison read the same kind of text.
- tau is chosen without the left-out dataset, by nested LODO (`lodo.tune_similarity_tau`):
  each of the six tuning datasets j in turn plays the left-out one, its static weights
  chosen on the other five weighted by their similarity to j's tuning collection with tau,
  scored on j's tuning split; the tau with the best mean over the six j wins (inf, the plain
  `static`, first: ties keep it). The grid, TAUS, was fixed from the spread of the
  similarities alone (config "similarity" in the output), before the test run.

Every fixed tau of the grid is reported too (`static by similarity, tau X (not tuned)`), so
the curve from "every dataset alike" to "the nearest alone" can be read; those rows are not
tuned and are not a method. Each family gets the paired bootstrap 95% interval of its
difference from `static` (2,000 resamples of test items, seeded); each single member is
scored too. Writes benchmarks/results/lodo_similar.json.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np

from probembed.evaluation.harness import Method, baseline_methods, evaluate
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    Scores,
    Split,
    candidate_splits,
    collection_centres,
    collection_similarity,
    fixed,
    similar_static,
    similarity_shares,
    tune_similarity_tau,
    tune_static_uec,
)
from probembed.evaluation.paired import BOOTSTRAP, paired_difference
from probembed.evaluation.report import write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Softmax temperatures on the cosine scale, "every dataset alike" (inf, plain `static`) first.
#: Fixed from the similarities alone, before the test run: a collection's similarities to the
#: other six tuning collections span -0.08 to 0.97 and its nearest is 0.04-0.48 above the next
#: (SciFact's corpus: every one within 0.05 of 0), so tau = 1 keeps every share within a factor
#: e of the others (all alike) and tau = 0.01 puts >= 98% on the nearest wherever it leads by
#: 0.04 or more (nearest alone); half-decade steps between.
TAUS: tuple[float, ...] = (math.inf, 1.0, 0.3, 0.1, 0.03, 0.01)


def similarity_tables(
    splits: dict[tuple[str, str], Split], names: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """sim of each dataset's test collection ("test") and tuning collection ("tune") to every
    dataset's tuning collection: what the shares and the nested tuning of tau read."""
    centres = {key: collection_centres(split) for key, split in splits.items()}
    return {
        role: {
            x: {j: collection_similarity(centres[x, role], centres[j, "tune"]) for j in names}
            for x in names
        }
        for role in ("test", "tune")
    }


def tau_label(tau: float) -> str:
    """The name of a fixed-tau row, which says it was not tuned."""
    return f"static by similarity, tau {tau:g} (not tuned)"


def main() -> None:
    """Embed every split, measure the similarities, tune tau and the weights per fold, score."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_similar.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = list(LODO_DATASETS)
    pipe, _, splits = candidate_splits(names)  # every fold tunes on all the others
    scores = Scores(splits)
    similarity = similarity_tables(dict(scores.splits), names)
    for role, table in similarity.items():
        print(f"sim({role} collection, tuning collection):")
        for x, near in table.items():
            print(f"  {x:>9} " + " ".join(f"{near[j]:.3f}" for j in names), flush=True)
    k = len(pipe.models)
    singles = [m for m in baseline_methods(pipe.models) if m.fusion.method.startswith("single:")]
    rows: list[dict] = []
    for name in args.datasets:
        tau, curve = tune_similarity_tau(scores, k, args.step, name, similarity["tune"], TAUS)
        static, _ = tune_static_uec(scores, k, args.step, name)
        row_sims = similarity["test"][name]
        families: dict[str, tuple[Method, float]] = {"static": (static, math.inf)}
        families["static by similarity"] = (
            similar_static(scores, k, args.step, name, row_sims, tau),
            tau,
        )
        for fixed_tau in TAUS:
            method = similar_static(scores, k, args.step, name, row_sims, fixed_tau)
            families[tau_label(fixed_tau)] = (method, fixed_tau)
        test = scores.splits[name, "test"]
        reference = evaluate(test.embedded, test.dataset, static)
        for family, (method, used) in families.items():
            shares = similarity_shares(row_sims, name, used)
            row = {
                "left_out": name,
                "method": family,
                "value": scores.figure(name, "test", fixed(method)),
                "fusion": method.fusion,
                "tau": used,
                "tuning_shares": shares,
                "tuning_mean": scores.tuning_mean(fixed(method), name, shares),
            }
            if family == "static by similarity":
                row["similarity"] = row_sims
                row["nested_tuning"] = {"taus": list(TAUS), "figures": curve}
                row["nested_means"] = np.mean(list(curve.values()), axis=0).tolist()
            if family != "static":
                outcome = evaluate(test.embedded, test.dataset, method)
                row["vs_static"] = paired_difference(test.dataset, reference, outcome)
            rows.append(row)
        for member in singles:
            value = scores.figure(name, "test", fixed(member))
            rows.append({"left_out": name, "method": member.name, "value": value})
        shown = "; ".join(
            f"{family} {100 * scores.figure(name, 'test', fixed(m)):.2f} {m.fusion.weights}"
            for family, (m, _) in families.items()
        )
        print(f"{name}: tau {tau:g}; {shown}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "taus": list(TAUS),
        "similarity": similarity,
        "similarity_definition": (
            "cosine between the centroids (float64 mean of unit vectors) of two collections "
            "in each member's space, averaged over the members; a split's collection is "
            "lodo.collection_parts (STS: both sentences, SciFact: the corpus, classification: "
            "the probe's texts); test = the dataset's test collection, tune = its tuning one"
        ),
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": BOOTSTRAP,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
