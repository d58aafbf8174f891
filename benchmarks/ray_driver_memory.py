"""The Ray driver's peak memory while actors embed: what it holds between a batch's lookup and
its answer.

    python benchmarks/ray_driver_memory.py [--texts 20000] [--batch-size 256]

Two hashing members (384 and 128 dimensions, Laplace, fitted in a second on 160 SICK pairs:
no model to load, so the actors' encoding is cheap and the driver's holding is what shows),
`embed_on_ray` with one actor over `--texts` distinct texts (STS-B train sentences, each
with its index appended), into a fresh embedding cache; each scenario consumes the batches
as `probembed embed` does, keeping none:

- `one_member_cached`: the 384-d member's Gaussians of every text are cached first (a
  pipeline sharing that member ran before), so every batch goes out partly cached;
- `a_third_met_twice`: the cache is empty and a third of the texts is met twice, first in
  the first third, then interleaved with new texts in the later batches, so each of those
  borrows half its texts from an earlier batch (`store.repeats`) and sends the other half;
  `a_third_met_twice_no_cache` the same without a cache. With a cache or without, the
  driver keeps the rows lent until their last borrower is fused.

For each: the peak of Python's traced allocations (tracemalloc, numpy's arrays included)
during the run (after a first small run that imports what Ray Data imports), beside the
bytes of the cached or repeated Gaussians, and the driver's peak resident memory (VmHWM,
reset before the run through /proc/self/clear_refs), which also holds Ray's and Arrow's
buffers and moves by tens of MB from run to run. Memory is counted, not time: the run is
bounded by the texts (about a minute on 2 busy cores, most of it Ray's start).
Writes benchmarks/results/ray_driver_memory.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from probembed.cache import EmbeddingCache
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline
from probembed.store.ray_ingest import embed_on_ray

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ray_driver_memory.json"
DIMS = (384, 128)


def sentences(n: int) -> list[str]:
    """n distinct texts: STS-B train sentences in turn, each with its index appended."""
    lines = (datasets_dir() / "sts" / "stsb" / "train.tsv").read_text("utf-8").splitlines()
    base = list(dict.fromkeys(t for line in lines[1:] for t in line.split("\t")[:2] if t))
    return [f"{base[i % len(base)]} {i}" for i in range(n)]


def hashing_pipeline(cache: Path | None) -> Pipeline:
    """Two calibrated hashing members fused by UEC, fitted on 160 SICK entailment pairs,
    with an embedding cache in `cache` (None: none)."""
    lines = (datasets_dir() / "pairs" / "sick-entailment.tsv").read_text("utf-8").splitlines()
    pairs = [(a, b) for a, b in (line.split("\t")[:2] for line in lines[1:161])]
    specs = [
        ModelSpec("hash", "laplace", {"calibrate": True}, encoder_params={"dim": d}) for d in DIMS
    ]
    store = EmbeddingCache(cache) if cache is not None else False
    return Pipeline.fit(specs, pairs, FusionConfig("uec"), name="hash", cache=store)


def peak_rss_reset() -> bool:
    """Reset this process's peak resident size (Linux); False where it cannot be."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_mb() -> float | None:
    """This process's peak resident size since the last reset, in MB (None off Linux)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return round(kib / 1024, 1)


def measured(texts: Sequence[str], pipeline: Pipeline, batch_size: int) -> dict:
    """Peak traced and resident memory of one `embed_on_ray` over the texts, each batch's
    Gaussians dropped as soon as it is counted."""
    rss = peak_rss_reset()
    tracemalloc.start()
    rows = 0
    for index, _fused in embed_on_ray(texts, pipeline, batch_size, workers=1):
        rows += len(index)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert rows == len(texts), (rows, len(texts))
    return {"peak_traced_mb": round(peak / 1e6, 1), "peak_rss_mb": peak_rss_mb() if rss else None}


def main() -> None:
    """Run both scenarios in one Ray session; write the results."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    import ray

    texts = sentences(args.texts + 10)
    texts, warm = texts[: args.texts], texts[args.texts :]
    row_bytes = {name: 8 * dim for name, dim in zip(("first", "second"), DIMS, strict=True)}
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pipeline = hashing_pipeline(Path(tmp) / "one")
            # once unmeasured: Ray Data's first job imports its modules (pandas among them),
            # some 40 MB of traced allocations that are no part of what a job holds
            measured(warm, pipeline, args.batch_size)
            Pipeline(pipeline.members[:1], cache=pipeline.cache or False).encode_members(texts)
            results["one_member_cached"] = {
                **measured(texts, pipeline, args.batch_size),
                "cached_gaussians_mb": round(len(texts) * row_bytes["first"] / 1e6, 1),
            }
            third = args.texts // 3
            again, new = texts[:third], texts[third : 2 * third]
            twice = again + [t for pair in zip(again, new, strict=True) for t in pair]
            for name, cache in (("", Path(tmp) / "twice"), ("_no_cache", None)):
                results["a_third_met_twice" + name] = {
                    **measured(twice, hashing_pipeline(cache), args.batch_size),
                    "repeated_gaussians_mb": round(third * sum(row_bytes.values()) / 1e6, 1),
                }
    finally:
        ray.shutdown()
    result = {
        "texts": args.texts,
        "batch_size": args.batch_size,
        "members": f"hash {DIMS[0]} + hash {DIMS[1]} (laplace)",
        "workers": 1,
        "scenarios": results,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "ray": ray.__version__,
            "load_average_1min": round(os.getloadavg()[0], 2),
        },
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
