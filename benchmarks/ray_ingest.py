"""Ingest throughput: local ingest against Ray ingest with 1 and 2 workers, on one corpus.

    python benchmarks/ray_ingest.py [--texts 2000] [--batch-size 256] [--rounds 2]

The corpus is the first `--texts` distinct sentences of STS-B train (short texts, as most
ingest is), under ../shared/datasets (`probembed.paths.datasets_dir()`); the pipeline is the
default one, uncached, so every run really encodes. Each run writes a fresh collection with
the same batch size. Ray starts once (`ray.init(num_cpus=os.cpu_count())`, timed on its own
as `ray_start_s`) and serves every Ray run; a Ray run's time includes starting its actors
and loading the pipeline in each (`first_commit_s` is the time to the first committed batch,
which holds that load). The three are run in `--rounds` interleaved rounds and the fastest
of each is reported beside every round (the machine may be shared). 2,000 texts keep the
whole run within a few minutes on 2 cores: about 7 s of encoding per run, six runs, plus
Ray's start-up.
Writes benchmarks/results/ray_ingest.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.store import Database, Record, ingest
from probembed.store.ray_ingest import ingest_ray

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ray_ingest.json"
STSB = datasets_dir() / "sts" / "stsb" / "train.tsv"


def corpus(n: int) -> list[Record]:
    """The first n distinct sentences of STS-B train as records."""
    lines = STSB.read_text(encoding="utf-8").splitlines()[1:]
    texts = dict.fromkeys(t for line in lines for t in line.split("\t")[:2] if t.strip())
    chosen = list(texts)[:n]
    if len(chosen) < n:
        raise SystemExit(f"{STSB} holds only {len(chosen)} distinct sentences, not {n}")
    return [Record(f"s{i}", t, {}) for i, t in enumerate(chosen)]


def timed(run: Callable[..., object], records: list[Record], **options: object) -> dict:
    """Docs/s of one ingest into a fresh collection, and the time to its first commit."""
    first: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(Path(tmp) / "db", create=True).collection("bench")
        started = time.perf_counter()

        def note(_added: int) -> None:
            if not first:
                first.append(time.perf_counter() - started)

        run(records, collection, on_commit=note, **options)
        seconds = time.perf_counter() - started
        count = collection.count()
    assert count == len(records), (count, len(records))
    return {
        "seconds": round(seconds, 2),
        "docs_per_s": round(len(records) / seconds, 1),
        "first_commit_s": round(first[0], 2),
    }


def main() -> None:
    """Run local, then Ray with 1 and 2 workers, on the same corpus; write the results."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import ray

    records = corpus(args.texts)
    pipeline = Pipeline.load("default", cache=False)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    ray_start = time.perf_counter() - started
    runs: dict[str, list[dict]] = {"local": [], "ray_1_worker": [], "ray_2_workers": []}
    try:
        for _ in range(args.rounds):  # interleaved, so a busy spell on the machine hits all
            runs["local"].append(
                timed(ingest, records, pipeline=pipeline, batch_size=args.batch_size)
            )
            for workers, name in ((1, "ray_1_worker"), (2, "ray_2_workers")):
                runs[name].append(
                    timed(
                        ingest_ray,
                        records,
                        pipeline=pipeline,
                        batch_size=args.batch_size,
                        workers=workers,
                    )
                )
    finally:
        ray.shutdown()
    rows = {name: min(tries, key=lambda r: r["seconds"]) for name, tries in runs.items()}
    result = {
        "corpus": f"STS-B train, first {args.texts} distinct sentences",
        "pipeline": "default (uncached)",
        "batch_size": args.batch_size,
        "cpus_per_worker": 1,
        "ray_start_s": round(ray_start, 2),
        "rounds": args.rounds,
        "best_of_rounds": rows,
        "every_round": runs,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "ray": ray.__version__,
            # the machine is shared: a load average near the core count means others ran too
            "load_average_1min_before": round(load_before, 2),
        },
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
