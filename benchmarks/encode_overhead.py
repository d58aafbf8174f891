"""What does the probabilistic path cost? Plain SentenceTransformer.encode vs Laplace encode.

    python benchmarks/encode_overhead.py [--rounds 5] [--n 2000]

Both run on the same 2,000 STS-B test sentences with the same model object and batch size,
alternated round by round in one process so machine noise hits both alike. The figure is the
ratio of median times; UEC reports about 0.6% overhead, the target here is at most 5%.
Writes benchmarks/results/encode_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from probembed.encoders.sentence_transformer import SentenceTransformerEncoder
from probembed.evaluation.datasets import load_sts
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
STSB = datasets_dir() / "sts" / "stsb" / "test.tsv"
OUT = ROOT / "benchmarks" / "results" / "encode_overhead.json"


def sentences(n: int) -> list[str]:
    """The first n distinct sentences of STS-B test, in file order."""
    data = load_sts(STSB)
    unique = list(dict.fromkeys(data.sentence1 + data.sentence2))
    return unique[:n]


def timed(fn) -> float:
    """Wall time of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    """Alternate the two paths for several rounds and report the ratio of medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    texts = sentences(args.n)
    estimator = Pipeline.load("default", cache=False).members[0]  # minilm, Laplace
    encoder = estimator.encoder
    assert isinstance(encoder, SentenceTransformerEncoder)  # the plain path is its model's
    encoder.batch_size = args.batch_size
    model = encoder.model

    def plain() -> None:
        model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)

    def probabilistic() -> None:
        estimator.encode(texts)

    plain()  # warm-up: first calls pay for allocation and thread start-up
    probabilistic()
    times: dict[str, list[float]] = {"plain": [], "laplace": []}
    for round_ in range(args.rounds):
        order = [("plain", plain), ("laplace", probabilistic)]
        for name, fn in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(timed(fn))
        print(
            f"round {round_ + 1}/{args.rounds}: "
            + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items())
        )
    plain_s, laplace_s = statistics.median(times["plain"]), statistics.median(times["laplace"])
    result = {
        "benchmark": "encode_overhead",
        "model": "minilm",
        "sentences": len(texts),
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "seconds": times,
        "median_plain_s": plain_s,
        "median_laplace_s": laplace_s,
        "overhead_pct": 100 * (laplace_s / plain_s - 1),
        "target_pct": 5.0,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"overhead of the Laplace path: {result['overhead_pct']:+.2f}% (target <= 5%) -> {OUT}")


if __name__ == "__main__":
    main()
