"""The published UEC (uec-paper) beside the uniform mean of the same members, on three test sets.

    python benchmarks/paper.py [--datasets stsb sick scifact] [--sets sum concat]
                               [--fitted DIR] [--refit] [--resume]

Member sets, each member a Laplace estimator fitted as the built-ins' candidates are (seed 0,
the seeded pair sample): `sum`, the 384-d minilm, paraphrase-l3, e5-small and minilm-int8,
fused in sum mode as the paper does; `concat`, the default members minilm, paraphrase-l3 and
wordllama, in the concat analogue; only when asked, `sum-fast` (without the slow e5-small,
~0.5 s per SciFact abstract on two cores) and `sum-two` (minilm and paraphrase-l3). Rows:
uec-paper scored by its uec.py similarity, by its MTEB script's and by plain dot, the uniform
mean (dot) and each single model; Spearman on STS, nDCG@10 on SciFact, plus each model's mean
uec-paper weight and the mean over texts of the largest weight (1 = one model per text).
Members the shipped `default` pipeline carries are taken from it: `scripts/build_pipelines.py`
fitted them by the same recipe, so they have the same fingerprints (and cached embeddings) a
refit gives; `--refit` fits them anyway. `--fitted DIR` keeps the other fitted members there
(e5-small's fit encodes 16,000 texts) and reuses them. Writes benchmarks/results/paper.json
after every (dataset, set); rows of datasets and sets not asked for stay, those asked for are
run again unless `--resume` finds them made by the same members (each row carries the set's
fingerprint).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from probembed.evaluation.datasets import load_evaluable
from probembed.evaluation.harness import Embedded, Method, embed, evaluate
from probembed.evaluation.paper import PAPER_BETA, paper_methods
from probembed.evaluation.recipes import SEED, recipe_members, sample_pairs
from probembed.evaluation.report import earlier_rows, markdown_table, write_json
from probembed.fusion.weights import PAPER_TEMPERATURE
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig, Pipeline

ROOT = Path(__file__).resolve().parents[1]
DATA = datasets_dir()
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = {
    "stsb": (DATA / "sts" / "stsb", "test"),
    "sick": (DATA / "sts" / "sick", "test"),
    "scifact": (DATA / "retrieval" / "scifact", "test"),
}
SETS = {
    "sum": ("sum", ("minilm", "paraphrase-l3", "e5-small", "minilm-int8")),
    "concat": ("concat", ("minilm", "paraphrase-l3", "wordllama")),
    "sum-fast": ("sum", ("minilm", "paraphrase-l3", "minilm-int8")),
    "sum-two": ("sum", ("minilm", "paraphrase-l3")),
}
ESTIMATOR = "laplace"
#: The shipped pipeline whose members (fitted by recipes, estimator ESTIMATOR) are reused.
BUILTIN = "default"
HEADLINE = ("spearman", "ndcg@10")


def methods_for(models: Sequence[str], mode: str) -> list[Method]:
    """uec-paper with both its similarities and dot, the uniform mean, and each single model."""
    singles = [Method(f"single:{m}", FusionConfig(f"single:{m}")) for m in models]
    return [*paper_methods(models, mode), Method("mean", FusionConfig("mean", mode)), *singles]


def mean_weights(embedded: Embedded, fusion: FusionConfig) -> dict[str, float]:
    """Each model's uec-paper weight averaged over every text, and the mean largest weight."""
    weights = np.concatenate([embedded.fused(role, fusion).weights for role in embedded.parts])
    average = weights.mean(axis=0)
    shares = {f"weight:{m}": float(w) for m, w in zip(embedded.models, average, strict=True)}
    return {**shares, "max_weight": float(weights.max(axis=1).mean())}


def run_set(pipe: Pipeline, name: str, set_name: str, mode: str) -> list[dict]:
    """Every method of one member set on one test set, as tidy rows."""
    path, split = DATASETS[name]
    dataset = load_evaluable(path, split)
    embedded = embed(pipe, dataset, progress=True)
    rows = []
    for method in methods_for(pipe.models, mode):
        metrics = evaluate(embedded, dataset, method).metrics
        if method.name == "uec-paper":
            metrics.update(mean_weights(embedded, method.fusion))
        rows += [
            {
                "dataset": dataset.name,
                "split": dataset.split,
                "members": set_name,
                "method": method.name,
                "metric": metric,
                "value": value,
            }
            for metric, value in metrics.items()
        ]
    return rows


def main() -> None:
    """Fit the members once, then score every (dataset, member set) and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--sets", nargs="+", default=["sum", "concat"], choices=list(SETS))
    parser.add_argument("--fitted", type=Path, default=None, help="keep fitted members here")
    parser.add_argument("--refit", action="store_true", help=f"refit {BUILTIN}'s members too")
    parser.add_argument("--out", type=Path, default=RESULTS / "paper.json")
    parser.add_argument(
        "--resume", action="store_true", help="keep --out's rows made by today's members"
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = list(dict.fromkeys(m for s in args.sets for m in SETS[s][1]))
    pairs = sample_pairs(DATA / "pairs")
    members = recipe_members(names, ESTIMATOR, pairs, args.refit, args.fitted)
    pipes = {
        s: Pipeline([members[m] for m in SETS[s][1]], FusionConfig("mean"), name=s)
        for s in args.sets
    }
    to_run = {(DATASETS[d][0].name, s): pipes[s].fingerprint for d in args.datasets for s in pipes}
    # rows of other datasets and sets stay; stale ones of those asked for are run again
    rows, previous, done = earlier_rows(
        args.out, lambda r: (r["dataset"], r["members"]), to_run, args.resume
    )
    config = {
        "seed": SEED,
        "estimator": ESTIMATOR,
        "temperature": PAPER_TEMPERATURE,
        "beta": PAPER_BETA,
        "sets": {s: {"mode": SETS[s][0], "models": list(SETS[s][1])} for s in SETS},
        "fingerprints": previous.get("fingerprints", {})
        | {m: e.fingerprint for m, e in members.items()},
        "reused": "refit" if args.refit else f"the shipped {BUILTIN} pipeline's members",
        "note": 'e5-small embeds every text (queries, documents, both STS sides) with its "query: "'
        " prefix: a pipeline has one encoder per member, not one per role",
    }
    ran = 0
    for name in args.datasets:
        for set_name, pipe in pipes.items():
            if (DATASETS[name][0].name, set_name) in done:
                continue
            start = time.perf_counter()
            new = run_set(pipe, name, set_name, SETS[set_name][0])
            for row in new:
                row["fingerprint"] = pipe.fingerprint
            rows += new
            ran += 1
            seconds = time.perf_counter() - start
            print(f"\n## {name}, {set_name} ({SETS[set_name][0]}) in {seconds:.0f}s")
            print(markdown_table(new, HEADLINE))
            write_json(args.out, rows, config)
    if ran == 0:
        print(f"nothing to run: {args.out} holds every row asked for, made by these members")
    else:
        print(f"\nran {ran} (dataset, set) pairs; {args.out} holds {len(rows)} rows")


if __name__ == "__main__":
    main()
