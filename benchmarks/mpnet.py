"""The model a user would pick instead: all-mpnet-base-v2 beside the ensemble, quality and time.

    python benchmarks/mpnet.py quality [--datasets stsb sick scifact] [--fit-pairs 256]
    python benchmarks/mpnet.py timing [--rounds 3]
    python benchmarks/mpnet.py default [--datasets stsb sick scifact]
    python benchmarks/mpnet.py lodo [--fit-pairs 256] [--step 0.2]

`quality` scores mpnet alone (cosine of its means, `single:mpnet`) on the test splits of STS-B,
SICK-R and SciFact through the evaluation harness. The cosine of the means does not depend on
the Laplace fit the pipeline needs, so it is fitted on the first 256 pairs of the built-ins'
seeded sample only (the full 8,000 take mpnet an hour on a shared 2-core machine), saved under
the probembed cache and reloaded by later runs; the embeddings go to the shared cache as usual.

`timing` encodes the same texts, 2,000 distinct STS-B test sentences and the first 300 SciFact
abstracts, with mpnet alone, the shipped `default` pipeline (cache off, Laplace variances
included), each candidate member of the built-ins alone (minilm, paraphrase-l3, use,
wordllama: the encoder, no variance) and e5-small alone (its C engine, "query: " prefix),
alternating the order round by round in one process so machine noise hits all alike; it
reports median seconds and each one's ratio to mpnet.

`default` scores the shipped `default` pipeline on the same test splits through the harness,
with its own fusion and score and with dot on the same fused means (no collection: a search of
a collection also tilts the prior by the collection's agreement, as `make run` shows).

`lodo` adds mpnet (fitted as for `quality`) to the four candidate members of the
leave-one-dataset-out study (`benchmarks/lodo.py`'s seven datasets and splits) and asks what
`benchmarks/lodo_headroom.py` asks of the four: on each left-out test split, the static weights
(0.2 grid) chosen on the other six tuning splits, on its own tuning split and on the test split
itself, with the paired bootstrap interval of each difference, and each member alone. Does a
stronger member, unlike the others, leave more for adapting to a domain to gain?

Each part updates its own key of benchmarks/results/mpnet.json, so the parts can run at once.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from probembed.cache import default_cache_dir
from probembed.encoders import get_encoder
from probembed.evaluation.datasets import load_evaluable, load_retrieval, load_sts
from probembed.evaluation.harness import (
    Method,
    baseline_methods,
    embed,
    evaluate,
    primary_metric,
)
from probembed.evaluation.lodo import (
    LODO_DATASETS,
    Scores,
    candidate_splits,
    fixed,
    headroom_rows,
)
from probembed.evaluation.recipes import CANDIDATE_MODELS, SEED, sample_pairs
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline, ScoreConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
DATA = datasets_dir()
OUT = ROOT / "benchmarks" / "results" / "mpnet.json"
DATASETS = {
    "stsb": DATA / "sts" / "stsb",
    "sick": DATA / "sts" / "sick",
    "scifact": DATA / "retrieval" / "scifact",
}
SINGLE = Method("single:mpnet", FusionConfig("single:mpnet"))
#: Published cosine Spearman x 100 of all-mpnet-base-v2 (MTEB), for comparison.
EXPECTED = {"stsb": 83.42, "sick": 80.48}


def fitted_mpnet(n_pairs: int) -> Pipeline:
    """mpnet with Laplace fitted on the first n pairs of the built-ins' seeded sample, once.

    The cosine of the means scored here does not depend on the fit, so a small sample serves;
    the fitted pipeline is saved under the probembed cache and reloaded by later runs.
    """
    directory = default_cache_dir() / "benchmarks" / f"mpnet-laplace-{n_pairs}"
    if directory.is_dir():
        return Pipeline.load(directory)
    spec = ModelSpec("mpnet", "laplace", {"seed": SEED})
    pairs = sample_pairs(DATA / "pairs")[:n_pairs]
    pipeline = Pipeline.fit([spec], pairs, SINGLE.fusion, name="mpnet", progress=True)
    pipeline.save(directory)
    return pipeline


def quality(names: list[str], n_pairs: int) -> None:
    """Single-model mpnet on each test split, one dataset at a time, saved after each."""
    pipeline = fitted_mpnet(n_pairs)
    for name in names:
        start = time.perf_counter()
        dataset = load_evaluable(DATASETS[name], "test")
        outcome = evaluate(embed(pipeline, dataset, progress=True), dataset, SINGLE)
        row = {
            "method": SINGLE.name,
            "split": dataset.split,
            "primary": primary_metric(dataset),
            "metrics": outcome.metrics,
            "published": EXPECTED.get(name),
            "seconds": time.perf_counter() - start,
            "laplace_fit_pairs": n_pairs,
            "fingerprint": pipeline.fingerprint,
        }
        update(["quality", name], row)
        print(f"{name}: {outcome.metrics}")


def ensemble_quality(names: list[str]) -> None:
    """The shipped default on each test split, with its own fusion and score and with dot."""
    pipeline = Pipeline.load("default")
    for name in names:
        dataset = load_evaluable(DATASETS[name], "test")
        embedded = embed(pipeline, dataset, progress=True)
        row: dict[str, object] = {"fingerprint": pipeline.fingerprint, "split": dataset.split}
        for label, score in (("score", pipeline.score), ("dot", ScoreConfig("dot", 0.0))):
            method = Method(f"default:{label}", pipeline.fusion, score)
            row[label] = evaluate(embedded, dataset, method).metrics
        update(["default_quality", name], row)
        print(f"{name}: {row}")


def lodo(n_pairs: int, step: float) -> None:
    """The LODO headroom of the static ensemble with mpnet as a fifth candidate member."""
    pipe, _, splits = candidate_splits(extra=fitted_mpnet(n_pairs).members)
    scores, names = Scores(splits), list(LODO_DATASETS)
    rows = headroom_rows(scores, len(pipe.models), names, step)
    singles = [m for m in baseline_methods(pipe.models) if m.fusion.method.startswith("single:")]
    alone = {
        n: {m.name.removeprefix("single:"): scores.figure(n, "test", fixed(m)) for m in singles}
        for n in names
    }
    for row in rows:
        print(f"{row['left_out']} {row['chosen_on']}: {row['weights']} {100 * row['value']:.2f}")
    result = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "laplace_fit_pairs": n_pairs,
        "static_step": step,
        "rows": rows,
        "single_test": alone,
    }
    update(["lodo"], result)


def timing_texts() -> dict[str, list[str]]:
    """The two text sets every encoder is timed on."""
    sts = load_sts(DATASETS["stsb"] / "test.tsv")
    scifact = load_retrieval(DATASETS["scifact"], "test")
    return {
        "stsb_sentences": list(dict.fromkeys(sts.sentence1 + sts.sentence2))[:2000],
        "scifact_abstracts": list(scifact.corpus.values())[:300],
    }


def timing(rounds: int) -> None:
    """Median encode seconds of mpnet, the default pipeline, each candidate member and
    e5-small on the same texts."""
    torch.set_num_threads(os.cpu_count() or 1)
    load_at_start = os.getloadavg()
    default = Pipeline.load("default", cache=False)
    encoders: dict[str, Callable[[list[str]], object]] = {
        "mpnet": get_encoder("mpnet").encode,
        "default": default.encode,
        **{name: get_encoder(name).encode for name in CANDIDATE_MODELS},
        "e5-small": get_encoder("e5-small").encode,
    }
    sets = timing_texts()
    for encode in encoders.values():  # warm-up: first calls pay for allocation and threads
        encode(sets["scifact_abstracts"][:32])
    seconds: dict[str, dict[str, list[float]]] = {s: {e: [] for e in encoders} for s in sets}
    for round_ in range(rounds):
        order = list(encoders)
        order = order[round_ % len(order) :] + order[: round_ % len(order)]
        for text_set, texts in sets.items():
            for name in order:
                start = time.perf_counter()
                encoders[name](texts)
                seconds[text_set][name].append(time.perf_counter() - start)
            print(f"round {round_ + 1}/{rounds} {text_set}: " + summary(seconds[text_set]))
            context = {
                "rounds": rounds,
                "rounds_done": min(len(t["mpnet"]) for t in seconds.values()),
                "texts": {s: len(t) for s, t in sets.items()},
                "default_members": list(default.models),
                "threads": torch.get_num_threads(),
                "machine": f"{platform.machine()} {os.cpu_count()} cores",
                "load_average": {"start": load_at_start, "end": os.getloadavg()},
            }
            timed = {s: t for s, t in seconds.items() if t["mpnet"]}  # a cut run keeps its part
            update(["timing"], {**context, **medians_and_ratios(timed)})


def medians_and_ratios(seconds: dict[str, dict[str, list[float]]]) -> dict:
    """Per text set: every round's seconds, the median per encoder, and its ratio to mpnet's."""
    medians = {s: {e: statistics.median(t) for e, t in ts.items()} for s, ts in seconds.items()}
    ratios = {
        s: {e: m / per_set["mpnet"] for e, m in per_set.items()} for s, per_set in medians.items()
    }
    return {"seconds": seconds, "median_s": medians, "ratio_to_mpnet": ratios}


def summary(times: dict[str, list[float]]) -> str:
    """The latest time of each encoder, for the progress line."""
    return ", ".join(f"{name} {values[-1]:.1f}s" for name, values in times.items())


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One writer of the results file at a time, so the two parts can run at once."""
    with open(Path(tempfile.gettempdir()) / "probembed-mpnet-bench.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def update(keys: list[str], value: object) -> None:
    """Set one nested key of the results file, keeping everything else in it."""
    with locked():
        results = json.loads(OUT.read_text()) if OUT.is_file() else {"benchmark": "mpnet"}
        node = results
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=2) + "\n")


def main() -> None:
    """Run the part asked for."""
    parser = argparse.ArgumentParser(description=__doc__)
    parts = parser.add_subparsers(dest="part", required=True)
    quality_part = parts.add_parser("quality")
    quality_part.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    quality_part.add_argument("--fit-pairs", type=int, default=256)
    timing_part = parts.add_parser("timing")
    timing_part.add_argument("--rounds", type=int, default=3)
    default_part = parts.add_parser("default")
    default_part.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    lodo_part = parts.add_parser("lodo")
    lodo_part.add_argument("--fit-pairs", type=int, default=256)
    lodo_part.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    args = parser.parse_args()
    if args.part == "quality":
        quality(args.datasets, args.fit_pairs)
    elif args.part == "default":
        ensemble_quality(args.datasets)
    elif args.part == "lodo":
        lodo(args.fit_pairs, args.step)
    else:
        timing(args.rounds)


if __name__ == "__main__":
    main()
