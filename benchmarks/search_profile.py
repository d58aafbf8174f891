"""Where a search's time and a snapshot's memory go: the figures docs/results.md's Search and Scale
sections explain their ratios to FAISS with.

    python benchmarks/search_profile.py [--n 1000000] [--db DIR]

Three parts, each in a fresh process so memory and caches are its own:

- load: `Snapshot.load` of the hashing collection of n items (benchmarks/scale.py's pipeline
  and corpus, collection `scale-<n>`; ingested into --db on first use and kept): resident
  memory (VmRSS, RssAnon) before and after, and the peak (VmHWM), in this fresh process.
- single: 200 single `dot` queries on that collection (graph built and saved on first use),
  after 5 untimed: mean ms per query without a profiler, then under cProfile the cumulative
  ms per query of the graph search, the version check, the exact rescoring and the hits.
- exact: the 500 held-out queries of benchmarks/search.py in one batched exact `dot` search
  of its 100,000 real texts (skipped unless search.py has written that collection): best of
  3 seconds, FAISS IndexFlatIP on the same means beside it, then cProfile's cumulative ms of
  FAISS's products, the float64 rescoring with moments, and the hits.

Also the hashing pipeline's variance-basis error on held-out reference texts
(`variance_basis.reference_fit`) against MAX_STD_ERROR: whether its collections store coefficients.
Writes benchmarks/results/search_profile.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from scale import SEED, corpus, fitted_pipeline, memory, name_of, one, split_texts
from search import DATA, LIMIT, datasets

from probembed.cache import default_cache_dir
from probembed.pipeline import Pipeline
from probembed.store import Collection, Database, IndexSettings, Searcher, ingest
from probembed.store.snapshot import Snapshot
from probembed.variance_basis import MAX_STD_ERROR, reference_fit

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "search_profile.json"
K = 10
SINGLE = 200
WARMUP = 5
#: Functions whose cumulative time each part reports, by the name the results give them.
SINGLE_PARTS = {
    "total": "search_fused",
    "graph_search": "IndexHNSW_search",
    "version_check": "latest_version",
    "rescoring": "rescore",
    "hits": "_results",
}
EXACT_PARTS = {
    "total": "search_fused",
    "faiss_products": "knn",  # faiss.knn, the scan's pre-selection
    "rescoring_with_moments": "_certified",
    "hits": "_results",
}


def hash_collection(db_path: Path, n: int) -> tuple[Collection, Pipeline]:
    """The hashing collection of n items, ingested on first use (resumable), and its pipeline."""
    pipe = fitted_pipeline()
    collection = Database(db_path, create=True).collection(name_of(n))
    if collection.count() < n:
        ingest(corpus(split_texts(DATA)[0], n), collection, pipe, batch_size=5000, progress=True)
    return collection, pipe


def cumulative_ms(profile: cProfile.Profile, parts: dict[str, str], calls: int) -> dict:
    """Per part, the cumulative milliseconds per call of the function named for it."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = {}
    for part, name in parts.items():
        # a Python function by its name, a C one (FAISS's) as "<built-in method ....name>"
        total = sum(
            v[3] for (_, _, fn), v in stats.items() if fn == name or fn.endswith(f".{name}>")
        )
        out[part] = 1000 * total / calls
    return out


def part_load(db_path: Path, n: int) -> dict[str, Any]:
    """Resident memory before and after loading the snapshot of n rows, and the peak."""
    collection, _ = hash_collection(db_path, n)
    before = memory()
    snapshot = Snapshot.load(collection)
    after = memory()
    snapshot.close()
    return {"before": before, "after": after, "rows": n}


def part_single(db_path: Path, n: int) -> dict[str, Any]:
    """Mean ms of single dot queries, and where they go under cProfile."""
    collection, pipe = hash_collection(db_path, n)
    queries = pipe.encode(split_texts(DATA)[1][:SINGLE])
    # every core for the build, as benchmarks/scale.py builds it
    searcher = Searcher(collection, pipe, replace(IndexSettings(), build_threads=None))
    searcher.warm("dot")
    for i in range(WARMUP):
        searcher.search_fused(one(queries, i), K, "dot")
    start = time.perf_counter()
    for i in range(SINGLE):
        searcher.search_fused(one(queries, i), K, "dot")
    mean = 1000 * (time.perf_counter() - start) / SINGLE
    profile = cProfile.Profile()
    profile.enable()
    for i in range(SINGLE):
        searcher.search_fused(one(queries, i), K, "dot")
    profile.disable()
    profiled = cumulative_ms(profile, SINGLE_PARTS, SINGLE)
    return {"mean_ms": mean, **{f"profiled_{k}_ms": v for k, v in profiled.items()}}


def part_exact() -> dict[str, Any]:
    """Batched exact dot search of the real 100,000 against IndexFlatIP, and where it goes."""
    pipe = Pipeline.load("default")
    db_path = default_cache_dir() / "bench-search" / pipe.fingerprint
    collection = Database(db_path).collection(f"all-{LIMIT}") if db_path.is_dir() else None
    if collection is None or not collection.exists:
        return {"skipped": f"no collection all-{LIMIT} at {db_path}: run search.py first"}
    queries = pipe.encode(datasets(DATA, LIMIT, 500)["all"][1])
    searcher = Searcher(collection, pipe)
    means = np.ascontiguousarray(collection.vectors().mean, dtype=np.float32)
    flat = faiss.IndexFlatIP(means.shape[1])
    flat.add(means)
    q32 = np.ascontiguousarray(queries.gaussian.mean, dtype=np.float32)
    searcher.search_fused(queries, K, "dot", exact=True)
    ours, theirs = [], []
    for _ in range(3):  # side by side, each keeping its best
        start = time.perf_counter()
        searcher.search_fused(queries, K, "dot", exact=True)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        flat.search(q32, K)
        theirs.append(time.perf_counter() - start)
    profile = cProfile.Profile()
    profile.enable()
    searcher.search_fused(queries, K, "dot", exact=True)
    profile.disable()
    return {
        "queries": len(q32),
        "ours_ms": 1000 * min(ours),
        "faiss_flat_ms": 1000 * min(theirs),
        "ratio": min(theirs) / min(ours),
        **{f"profiled_{k}_ms": v for k, v in cumulative_ms(profile, EXACT_PARTS, 1).items()},
    }


def basis_error() -> dict[str, float]:
    """The hashing pipeline's variance-basis error on held-out reference texts."""
    _, error = reference_fit(fitted_pipeline())
    return {"std_error": error, "allowed": MAX_STD_ERROR}


def in_child(part: str, db_path: Path, n: int) -> Any:
    """Run one part in a fresh process and return what it printed last (JSON)."""
    args = [sys.executable, __file__, "--part", part, "--db", str(db_path), "--n", str(n)]
    done = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Run every part in its own process; print and write the results."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="hashing items [1000000]")
    parser.add_argument(
        "--db",
        type=Path,
        default=default_cache_dir() / "bench-profile",
        help="database of the hashing collection [cache dir/bench-profile]",
    )
    parser.add_argument("--part", choices=("load", "single", "exact", "basis"))
    args = parser.parse_args()
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "load": partial(part_load, args.db, args.n),
        "single": partial(part_single, args.db, args.n),
        "exact": part_exact,
        "basis": basis_error,
    }
    if args.part:
        print(json.dumps(parts[args.part]()))
        return
    hash_collection(args.db, args.n)  # ingest once, before any part measures
    results = {"n": args.n, "seed": SEED}
    for part in ("load", "single", "exact", "basis"):
        results[part] = in_child(part, args.db, args.n)
        print(part, json.dumps(results[part], indent=1), flush=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
