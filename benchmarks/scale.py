"""Scale: ingest, index build, query latency, memory and disk of the store from 10^4 to 10^6 items.

    python benchmarks/scale.py [--sizes 10000,100000,1000000] [--real] [--keep]

A run with other --sizes is a quick check: it writes no results file unless --out is given.

The data is about the store, not the models: a two-member hashing pipeline (dims 129 and 127,
256 fused; member names must differ, so the dims do), fitted once on the bundled Python docs
as tests/conftest.py does, encodes real texts (every distinct text of ../shared/datasets, as
benchmarks/search.py reads them) cycled with a numeric suffix up to n, ids unique; 200 held-out
texts are the queries. Per size, each stage runs in a fresh process (`--worker`), so its
resident memory is its own:

- ingest: `probembed.store.ingest` in batches of --batch; items/s and the worker's peak RSS
  (VmHWM). At the largest size the ingest is killed (SIGKILL) once half its commits are
  announced and run again: `resume_ok` says whether it then holds exactly n rows with unique
  ids; its throughput is then the resumed run's (about n/2 rows, with the resume's own cost).
- disk: bytes per item of the table directory as ingest leaves it (`du`: LanceDB keeps the
  pre-compaction files of `optimize` for 7 days), of the live version (`stats()`), and of the
  derived files (the search graph); the old versions are then pruned so 10^6 fits the disk.
- search: `Searcher.warm("dot")` (build and save the graph), RSS and peak RSS from there on
  (VmHWM reset), p50/p99 latency one query at a time and batched QPS for `dot` and `uec`,
  Recall@10 against `exact=True` on RECALL_QUERIES queries.
- FAISS IndexHNSWFlat (M=32, efConstruction 80, inner product) on the same stored means, in
  the same worker after probembed's memory was read: Recall@10 against its own exact ranking
  (`faiss.knn`) per efSearch, then p50/p99 and QPS at the smallest efSearch whose recall is at
  least probembed's, per score.

`--real` adds the 10^5 point of the real default pipeline: the collection benchmarks/search.py
writes (cache dir/bench-search/<fingerprint>, "all-100000"), searched with its held-out queries
(there the searcher tilts the stored rows by the collection's agreement, FAISS indexes them as
stored). It is reused, never written or pruned; without it the point is skipped (encoding
10^5 texts with the default pipeline takes about an hour: run benchmarks/search.py first).

Before each size the disk it needs is estimated and printed (rows twice over while `optimize`
compacts them, then rows + graph: 10^6 items about 8.7 GB), and the workers' peak RSS is
projected linearly from the two sizes before it; a size that would not fit (disk, or 80% of
MemAvailable) and all larger ones are skipped, and so is the rest after a worker fails.

Cost, measured by the committed run (benchmarks/results/scale.json, 2 cores, a quiet
machine): the three sizes and the real point took about 10 minutes; at 10^6, ingest ran at
about 5,500 items/s and the graph build took 163 s (FAISS's 125 s); the search worker peaked
at 3.53 GiB and the ingest worker at 1.9 GiB.

Writes tidy rows (n, data, engine, score, metric, value) to benchmarks/results/scale.json and
one panel per figure against n to benchmarks/results/plots/scale.png.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from rich.console import Console
from rich.table import Table
from search import LIMIT, all_texts, datasets, hit_ids, recall, timed

from probembed.cache import default_cache_dir
from probembed.documents import Record
from probembed.evaluation.recipes import hashing_pipeline
from probembed.fusion import Fused
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.store import Collection, Database, IndexSettings, Searcher, ingest

ROOT = Path(__file__).resolve().parents[1]
DATA = datasets_dir()
OUT = ROOT / "benchmarks" / "results" / "scale.json"
SIZES = (10_000, 100_000, 1_000_000)
#: Two hashing members; 256 fused dimensions (the disk here holds 10^6 rows of that, with
#: the search state's mapped means and variances, but not of 512).
DIMS = (129, 127)
SEED = 0
K = 10
#: Queries timed one at a time and batched.
QUERIES = 200
#: Queries whose exact top 10 is computed (an exact scan of 10^6 rows is slow).
RECALL_QUERIES = 50
#: Passes over the queries timed one at a time; each query keeps its best.
REPEATS = 3
#: Untimed queries before the latency loop (first LanceDB reads, lazy imports).
WARMUP = 5
#: Rows per ingest commit: 200 commits at 10^6.
BATCH = 5000
SCORES = ("dot", "uec")
#: The smallest size measured: more items than the latency loop has queries.
MIN_SIZE = 1000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EFS = (16, 32, 64, 128, 256, 512, 1024)
#: The issue's targets at 10^6: RSS during search, p99 growth 10^4 -> 10^6, p99 against FAISS.
TARGET_RSS = 4 * 1024**3
TARGET_GROWTH = 3.0
TARGET_FAISS = 1.5
#: Disk per item beyond the vectors: id, text, metadata and Arrow offsets, rounded up.
ROW_OVERHEAD = 160
#: Disk per item of an HNSW graph beyond its vectors: level-0 links (2M ids of 4 bytes) and
#: the upper levels (about 1/M of the rows again), rounded up.
GRAPH_LINKS = 2 * HNSW_M * 4 + 64
#: Share of MemAvailable a projected peak may use: a line through two sizes misses the
#: allocator's slack, and the machine's other processes grow meanwhile.
MEMORY_SHARE = 0.8
RESULT = "RESULT "


def log(message: str) -> None:
    """Progress on stderr, so a worker's stdout carries only its protocol lines."""
    Console(stderr=True).print(message)


def split_texts(data: Path) -> tuple[list[str], list[str]]:
    """(corpus base texts, held-out query texts): a seeded permutation of every distinct text."""
    texts = all_texts(data)
    order = np.random.default_rng(SEED).permutation(len(texts))
    return [texts[i] for i in order[QUERIES:]], [texts[i] for i in order[:QUERIES]]


def corpus(base: Sequence[str], n: int) -> list[Record]:
    """n records, ids "0".."n-1": the base texts, then again with the cycle number appended."""
    m = len(base)
    return [
        Record(str(i), base[i] if i < m else f"{base[i % m]} {i // m}", {}, "") for i in range(n)
    ]


def work_dir() -> Path:
    """Where the harness keeps its pipeline and databases (the cache dir as it is now)."""
    return default_cache_dir() / "bench-scale"


def fitted_pipeline() -> Pipeline:
    """The hashing pipeline, fitted once on halves of the Python docs passages and kept."""
    path = work_dir() / "pipeline"
    if not path.is_dir():
        hashing_pipeline(DIMS).save(path)
    return Pipeline.load(path, cache=False)


#: /proc/self/status fields read, by the name the results give them: the resident set now
#: and at its peak, and now its anonymous part (what only swap could free) and its
#: file-backed part (mapped files' pages, which the kernel reclaims under pressure).
MEMORY_FIELDS = {
    "VmRSS": "rss_bytes",
    "VmHWM": "peak_rss_bytes",
    "RssAnon": "rss_anon_bytes",
    "RssFile": "rss_file_bytes",
}


def memory() -> dict[str, int]:
    """This process's resident memory (MEMORY_FIELDS), in bytes."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in MEMORY_FIELDS:
            fields[MEMORY_FIELDS[key]] = int(value.split()[0]) * 1024
    return fields


def reset_peak() -> None:
    """Restart VmHWM from the current RSS, so a peak read later belongs to what came after."""
    Path("/proc/self/clear_refs").write_text("5")


def du(path: Path) -> int:
    """Bytes the files under path occupy on disk, as `du` counts them (allocated blocks)."""
    return sum(
        os.stat(os.path.join(root, name)).st_blocks * 512
        for root, _, names in os.walk(path)
        for name in names
    )


def estimate(n: int, dim: int, models: int, text_bytes: float) -> dict[str, float]:
    """Bytes per item on disk (row, graph) and the peak of the run: compaction doubles the rows."""
    row = 4 * (2 * dim + models) + text_bytes + ROW_OVERHEAD
    graph = 4 * (dim + 1) + GRAPH_LINKS
    return {"row": row, "graph": graph, "peak": n * max(2 * row, row + graph)}


def fits_disk(n: int, pipe: Pipeline, base: Sequence[str]) -> bool:
    """Print the disk estimate of n items before writing; False when it exceeds the free disk."""
    dim = sum(m.encoder.dim for m in pipe.members)
    text = float(np.mean([len(t.encode()) for t in base[:10_000]])) + len(str(n))
    guess = estimate(n, dim, len(pipe.members), text)
    free = shutil.disk_usage(work_dir()).free
    log(
        f"n={n}: about {guess['row']:.0f} B/item stored + {guess['graph']:.0f} B/item of graph; "
        f"peak {guess['peak'] / 1e9:.2f} GB on disk, {free / 1e9:.2f} GB free under {work_dir()}"
    )
    return guess["peak"] < free


# ---- workers: one process per stage, so RSS is the stage's own ----------------------------


def worker_ingest(db_path: Path, n: int, batch: int) -> dict[str, Any]:
    """Ingest n records (resuming what is stored), announcing each commit on stdout."""
    pipe = fitted_pipeline()
    records = corpus(split_texts(DATA)[0], n)
    collection = Database(db_path, create=True).collection(name_of(n))
    before = collection.count()
    start = time.perf_counter()
    commits: list[float] = []

    def committed(added: int) -> None:
        """Announce the commit to the parent (which may kill us now) and time it."""
        commits.append(time.perf_counter() - start)
        print(f"commit {added}")

    report = ingest(records, collection, pipe, batch_size=batch, progress=True, on_commit=committed)
    seconds = time.perf_counter() - start
    count = collection.count()
    return {
        "before": before,
        "added": report.added,
        "seconds": seconds,
        "first_commit_s": commits[0] if commits else None,
        "last_commit_s": commits[-1] if commits else None,
        "count": count,
        "unique": len(collection.ids()) == count,
        **memory(),
    }


def worker_search(db_path: Path, name: str, real: bool) -> list[dict]:
    """Disk figures, then probembed's search, then FAISS HNSW, on one collection."""
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    if real:
        pipe = Pipeline.load("default")
        query_texts = datasets(DATA, LIMIT, 500)["all"][1][:QUERIES]
    else:
        pipe = fitted_pipeline()
        query_texts = split_texts(DATA)[1]
    db = Database(db_path)
    collection = db.open(name)
    n = collection.count()
    data = "real" if real else "hash"
    rows = disk_rows(db, collection, prune=not real)
    queries = pipe.encode(query_texts)
    # every core for the build, as FAISS's own build below has (the default is one thread)
    searcher = Searcher(collection, pipe, replace(IndexSettings(), build_threads=None))
    rows += search_rows(searcher, queries)
    del searcher
    rows += faiss_rows(collection, queries, rows)
    return [{"n": n, "data": data, **r} for r in rows]


def disk_rows(db: Database, collection: Collection, prune: bool) -> list[dict]:
    """Bytes per item on disk as ingest left them and live; prune the old versions if asked."""
    n = collection.count()
    table_dir = Path(db.path) / f"{collection.name}.lance"  # a folder here, never a URI
    live = collection.stats().bytes_per_item
    assert live is not None  # None only for an empty collection
    rows = [
        metric("store", "disk_bytes_per_item", du(table_dir) / n),
        metric("store", "live_bytes_per_item", live),
    ]
    if prune:
        with warnings.catch_warnings():  # it warns of readers of old versions: there are none
            warnings.simplefilter("ignore", UserWarning)
            table = db.table(collection.name)
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
        rows.append(metric("store", "pruned_bytes_per_item", du(table_dir) / n))
    return rows


def search_rows(searcher: Searcher, queries: Fused) -> list[dict]:
    """Build time, memory, latency, QPS and recall of probembed's search, per score."""
    reset_peak()
    before = memory()["rss_bytes"]
    log(f"{searcher.collection.name}: loading and building the candidate index")
    _, build = timed(lambda: searcher.warm("dot"), 1)
    rows = [
        metric("probembed", "build_s", build),
        metric("probembed", "rss_before_search_bytes", before),
        metric("probembed", "graph_bytes_per_item", graph_bytes(searcher.collection)),
    ]
    for score in SCORES:
        rows += score_rows(searcher, queries, score)
    rows += [metric("probembed", key, value) for key, value in memory().items()]
    return rows


def score_rows(searcher: Searcher, queries: Fused, score: str) -> list[dict]:
    """One score's latency, QPS and recall rows, and the QPS of its exact scan (the recall
    reference, over the first RECALL_QUERIES queries)."""
    log(f"{searcher.collection.name}: timing {score}, then its exact scan")
    subset = one(queries, slice(0, RECALL_QUERIES))
    single = latencies(lambda i: searcher.search_fused(one(queries, i), K, score))
    found, seconds = timed(lambda: searcher.search_fused(queries, K, score))
    exact, scan = timed(lambda: searcher.search_fused(subset, K, score, exact=True), 1)
    got = recall(hit_ids(found)[:RECALL_QUERIES], hit_ids(exact))
    rows = latency_rows("probembed", score, single, len(queries.gaussian) / seconds, got)
    rows.append(metric("probembed-exact", "qps", RECALL_QUERIES / scan, score))
    return rows


def faiss_rows(collection: Collection, queries: Fused, ours: list[dict]) -> list[dict]:
    """FAISS HNSW on the stored means, timed at the efSearch matching each score's recall."""
    vectors = collection.vectors()
    means = np.ascontiguousarray(vectors.mean, dtype=np.float32)
    del vectors
    qmeans = np.ascontiguousarray(queries.gaussian.mean, dtype=np.float32)
    _, truth = faiss.knn(qmeans[:RECALL_QUERIES], means, K, metric=faiss.METRIC_INNER_PRODUCT)
    hnsw = faiss.IndexHNSWFlat(means.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    log(f"{collection.name}: building and timing FAISS HNSW")
    _, build = timed(lambda: hnsw.add(means), 1)
    rows = [metric("faiss-hnsw", "build_s", build)]
    by_ef = {}
    for ef in HNSW_EFS:
        hnsw.hnsw.efSearch = ef
        by_ef[ef] = recall(hnsw.search(qmeans[:RECALL_QUERIES], K)[1], truth)
        rows.append(metric(f"faiss-hnsw-ef{ef}", "recall@10", by_ef[ef], "dot"))
    for score in SCORES:
        target = value_of(ours, "probembed", score, "recall@10")
        ef = next((e for e in HNSW_EFS if by_ef[e] >= target), HNSW_EFS[-1])
        hnsw.hnsw.efSearch = ef
        single = latencies(lambda i: hnsw.search(qmeans[i : i + 1], K))
        _, seconds = timed(lambda: hnsw.search(qmeans, K))
        got = by_ef[ef]
        rows += latency_rows("faiss-hnsw", score, single, len(qmeans) / seconds, got)
        rows.append(metric("faiss-hnsw", "ef_search", ef, score))
    return rows + [metric("faiss-hnsw", key, value) for key, value in memory().items()]


def graph_bytes(collection: Collection) -> float:
    """Bytes per item of the files derived from the table (the saved graph, pipeline copy)."""
    return du(collection.derived_dir) / max(collection.count(), 1)


def one(queries: Fused, index: int | slice) -> Fused:
    """Some queries of a batch, still a Fused."""
    rows = slice(index, index + 1) if isinstance(index, int) else index
    return Fused(queries.gaussian[rows], queries.weights[rows], queries.models)


def latencies(search: Callable[[int], Any]) -> np.ndarray:
    """Seconds of each of QUERIES searches one query at a time, after WARMUP untimed ones.

    Each query's time is its best of REPEATS passes over all queries, as `timed` takes the
    best of its calls: on shared cores a p99 of single passes measures the neighbours.
    """
    for i in range(WARMUP):
        search(i)
    out = np.full(QUERIES, np.inf)
    for _ in range(REPEATS):
        for i in range(QUERIES):
            start = time.perf_counter()
            search(i)
            out[i] = min(out[i], time.perf_counter() - start)
    return out


def latency_rows(engine: str, score: str, single: np.ndarray, qps: float, rec: float) -> list:
    """p50 and p99 of single-query latency (ms), batched QPS, and Recall@10."""
    return [
        metric(engine, "p50_ms", 1000 * float(np.percentile(single, 50)), score),
        metric(engine, "p99_ms", 1000 * float(np.percentile(single, 99)), score),
        metric(engine, "qps", qps, score),
        metric(engine, "recall@10", rec, score),
    ]


def metric(engine: str, name: str, value: float, score: str | None = None) -> dict:
    """One tidy row without its n and data (the caller adds them)."""
    return {"engine": engine, "score": score, "metric": name, "value": round(float(value), 4)}


def value_of(rows: list[dict], engine: str, score: str | None, name: str) -> float:
    """The value of the one row of these rows with this engine, score and metric."""
    found = [
        r["value"] for r in rows if (r["engine"], r["score"], r["metric"]) == (engine, score, name)
    ]
    if len(found) != 1:
        raise KeyError(f"expected one {engine}/{score}/{name} row, got {len(found)}")
    return found[0]


# ---- the parent: one size after the other --------------------------------------------------


def spawn(*args: str) -> subprocess.Popen:
    """This script as a worker process, its stdout a pipe of protocol lines."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1)


class WorkerError(RuntimeError):
    """A worker process ended without its result (an error, or killed: out of memory)."""


def finish(process: subprocess.Popen, what: str) -> Any:
    """Wait for a worker and return its RESULT, or raise naming the worker that failed."""
    result = None
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(RESULT):
            result = json.loads(line[len(RESULT) :])
    if process.wait() != 0 or result is None:
        raise WorkerError(f"{what} worker failed (exit code {process.returncode})")
    return result


def killed_after(process: subprocess.Popen, commits: int) -> None:
    """SIGKILL a worker once it has announced that many commits (or let it end first)."""
    assert process.stdout is not None
    seen = 0
    for line in process.stdout:
        seen += line.startswith("commit ")
        if seen >= commits:
            os.kill(process.pid, signal.SIGKILL)
            break
    process.wait()


def run_ingest(db_path: Path, n: int, batch: int, kill_after: int | None) -> list[dict]:
    """Ingest rows; with kill_after, kill the first run and check the re-run's count and ids."""
    args = ("ingest", "--db", str(db_path), "--n", str(n), "--batch", str(batch))
    if kill_after:
        killed_after(spawn(*args), kill_after)
    done = finish(spawn(*args), "ingest")
    rows = [
        metric("ingest", "rows", done["added"]),
        metric("ingest", "seconds", done["seconds"]),
        metric("ingest", "peak_rss_bytes", done["peak_rss_bytes"]),
    ]
    if done["added"]:  # before the first commit: reading and checking; after the last:
        rows += [  # optimize and the agreement measurement
            metric("ingest", "items_per_s", done["added"] / done["seconds"]),
            metric("ingest", "first_commit_s", done["first_commit_s"]),
            metric("ingest", "after_last_commit_s", done["seconds"] - done["last_commit_s"]),
        ]
    if kill_after:
        ok = done["count"] == n and done["unique"]
        rows += [
            metric("ingest", "rows_at_kill", done["before"]),
            metric("ingest", "whole_commits_at_kill", done["before"] % batch == 0),
            metric("ingest", "resume_ok", ok),
        ]
    return rows


def measure(n: int, batch: int, largest: bool, keep: bool) -> list[dict]:
    """Ingest, disk, search and FAISS rows for one size of the hashing data."""
    db_path = work_dir() / f"db-{n}"
    shutil.rmtree(db_path, ignore_errors=True)
    stages: dict[str, float] = {}
    try:
        start = time.perf_counter()
        rows = run_ingest(db_path, n, batch, max(1, n // (2 * batch)) if largest else None)
        stages["ingest"] = time.perf_counter() - start
        rows = [{"n": n, "data": "hash", **r} for r in rows]
        start = time.perf_counter()
        rows += finish(spawn("search", "--db", str(db_path), "--n", str(n)), "search")
        stages["search"] = time.perf_counter() - start
    finally:
        if not keep:
            shutil.rmtree(db_path, ignore_errors=True)
    log(f"n={n}: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items()))
    return rows + [
        {"n": n, "data": "hash", **metric("harness", f"{k}_stage_s", v)} for k, v in stages.items()
    ]


def worker_peak(rows: list[dict], n: int) -> float:
    """The larger whole-process peak RSS of the ingest and search workers at n items."""
    at = [r for r in rows if r["data"] == "hash" and r["n"] == n]
    search = value_of(at, "faiss-hnsw", None, "peak_rss_bytes")  # the last, since the reset
    return max(value_of(at, "ingest", None, "peak_rss_bytes"), search)


def projected_peak(rows: list[dict], n: int) -> float | None:
    """A worker's peak RSS at n items, linear through the two largest sizes measured so far."""
    sizes = sorted({r["n"] for r in rows if r["data"] == "hash"})
    if len(sizes) < 2:
        return None
    (m1, m2), (p1, p2) = sizes[-2:], [worker_peak(rows, m) for m in sizes[-2:]]
    return p2 + (p2 - p1) / (m2 - m1) * (n - m2)


def memory_available() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def fits_memory(rows: list[dict], n: int) -> bool:
    """Print the projected peak RSS of n items; False above MEMORY_SHARE of what is available."""
    peak = projected_peak(rows, n)
    if peak is None:
        return True
    free = memory_available()
    log(f"n={n}: projected worker peak RSS {peak / 1e9:.1f} GB, {free / 1e9:.1f} GB available")
    return peak < MEMORY_SHARE * free


def name_of(n: int) -> str:
    """The collection holding n hashing items."""
    return f"scale-{n}"


def real_rows() -> list[dict]:
    """Search rows of the real default pipeline's 10^5 collection, if search.py wrote it."""
    db_path = default_cache_dir() / "bench-search" / Pipeline.load("default").fingerprint
    name = f"all-{LIMIT}"
    collection = Database(db_path).collection(name) if db_path.is_dir() else None
    if collection is None or not collection.exists or collection.count() != LIMIT:
        log(f"--real: no collection {name} of {LIMIT} items at {db_path}; run search.py first")
        return []
    try:
        return finish(spawn("search", "--db", str(db_path), "--real"), "search")
    except WorkerError as exc:
        log(f"--real: {exc}")
        return []


def checks(rows: list[dict]) -> list[str]:
    """The issue's targets, each as a line saying met or missed, with the numbers."""
    hashed = [r for r in rows if r["data"] == "hash"]
    sizes = sorted({r["n"] for r in hashed})
    if not sizes:
        return []
    low, high = sizes[0], sizes[-1]
    at = {n: [r for r in hashed if r["n"] == n] for n in sizes}
    lines = []
    if any(r["metric"] == "resume_ok" for r in at[high]):
        ok = bool(value_of(at[high], "ingest", None, "resume_ok"))
        lines.append(f"n={high}: ingest killed and resumed: n rows, unique ids {verdict(ok)}")
    peak = value_of(at[high], "probembed", None, "peak_rss_bytes")
    lines.append(
        f"n={high}: peak RSS during search {peak / 1024**3:.2f} GiB "
        f"(target < {TARGET_RSS / 1024**3:.0f} GiB) {verdict(peak < TARGET_RSS)}"
    )
    for score in SCORES:
        first, last = (value_of(at[m], "probembed", score, "p99_ms") for m in (low, high))
        growth = last / first
        lines.append(
            f"{score}: p99 {first:.2f} ms at n={low} -> {last:.2f} ms at n={high}: "
            f"{growth:.2f}x (target <= {TARGET_GROWTH}x) {verdict(growth <= TARGET_GROWTH)}"
        )
        lines.append(against_faiss(at[high], "hash", high, score))
    real = [r for r in rows if r["data"] == "real"]
    lines += [against_faiss(real, "real", real[0]["n"], score) for score in SCORES if real]
    return lines


def against_faiss(rows: list[dict], data: str, n: int, score: str) -> str:
    """Our p99 against FAISS HNSW's at the efSearch chosen for our recall, as a check line."""
    ours, ref = (value_of(rows, e, score, "p99_ms") for e in ("probembed", "faiss-hnsw"))
    ratio = ours / ref
    return (
        f"{data} n={n} {score}: p99 {ours:.2f} ms at recall "
        f"{value_of(rows, 'probembed', score, 'recall@10'):.3f} vs FAISS HNSW {ref:.2f} ms at "
        f"efSearch {value_of(rows, 'faiss-hnsw', score, 'ef_search'):.0f}, recall "
        f"{value_of(rows, 'faiss-hnsw', score, 'recall@10'):.3f}: {ratio:.2f}x "
        f"(target <= {TARGET_FAISS}x) {verdict(ratio <= TARGET_FAISS)}"
    )


def verdict(ok: bool) -> str:
    """The word a check line ends with."""
    return "met" if ok else "MISSED"


def show(rows: list[dict]) -> None:
    """Print one table: a row per (data, engine, score, metric), a column per n."""
    sizes = sorted({r["n"] for r in rows})
    table = Table(title="scale: cost against collection size")
    for column in ("data", "engine", "score", "metric", *map(str, sizes)):
        table.add_column(column, justify="left" if not column.isdigit() else "right")
    keys = list(dict.fromkeys((r["data"], r["engine"], r["score"], r["metric"]) for r in rows))
    for key in keys:
        values = {
            r["n"]: r["value"]
            for r in rows
            if (r["data"], r["engine"], r["score"], r["metric"]) == key
        }
        table.add_row(
            *("" if k is None else str(k) for k in key),
            *(f"{values[n]:g}" if n in values else "" for n in sizes),
        )
    Console().print(table)


#: One plot panel: title, y unit, what the values are divided by, whether y is log, curves.
Panel = tuple[str, str, float, bool, tuple[tuple[str, str | None, str], ...]]
PANELS: tuple[Panel, ...] = (
    (
        "ingest (largest n: the resumed half)",
        "items/s",
        1,
        False,
        (("ingest", None, "items_per_s"),),
    ),
    (
        "index build",
        "s",
        1,
        True,
        (("probembed", None, "build_s"), ("faiss-hnsw", None, "build_s")),
    ),
    (
        "single-query latency (FAISS at the recall of our score)",
        "ms",
        1,
        True,
        tuple(
            (engine, score, stat)
            for engine in ("probembed", "faiss-hnsw")
            for score in SCORES
            for stat in ("p50_ms", "p99_ms")
        ),
    ),
    (
        "batched queries per second",
        "queries/s",
        1,
        True,
        tuple(
            (e, s, "qps") for e in ("probembed", "probembed-exact", "faiss-hnsw") for s in SCORES
        ),
    ),
    (
        "resident memory of the worker",
        "GiB",
        1024**3,
        False,
        (
            ("probembed", None, "peak_rss_bytes"),
            ("probembed", None, "rss_bytes"),
            ("ingest", None, "peak_rss_bytes"),
        ),
    ),
    (
        "bytes on disk per item",
        "bytes",
        1,
        False,
        (
            ("store", None, "disk_bytes_per_item"),
            ("store", None, "live_bytes_per_item"),
            ("probembed", None, "graph_bytes_per_item"),
        ),
    ),
)


def plot(rows: list[dict], path: Path) -> Path:
    """One panel per figure against n (log x), the hashing data's curves."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    hashed = [r for r in rows if r["data"] == "hash"]
    figure = Figure(figsize=(16, 9), layout="constrained")
    FigureCanvasAgg(figure)
    for axes, (title, unit, divisor, log_y, curves) in zip(
        figure.subplots(2, 3).ravel(), PANELS, strict=True
    ):
        for engine, score, name in curves:
            points = sorted(
                (r["n"], r["value"] / divisor)
                for r in hashed
                if (r["engine"], r["score"], r["metric"]) == (engine, score, name)
            )
            if points:
                label = " ".join(p for p in (engine, score, name) if p)
                axes.plot(*zip(*points, strict=True), marker="o", label=label)
        if unit == "GiB":
            axes.axhline(TARGET_RSS / divisor, color="grey", ls="--", label="target at 10^6")
        axes.set(title=title, xlabel="items", ylabel=unit, xscale="log")
        axes.set_yscale("log" if log_y else "linear")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=110)
    return path


def sizes_arg(text: str) -> tuple[int, ...]:
    """--sizes as sorted distinct item counts, each large enough to hold the queries' top k."""
    try:
        sizes = tuple(sorted({int(s) for s in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sizes {text!r}: give integers, e.g. 10000,20000"
        ) from None
    if sizes[0] < MIN_SIZE:
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: each size must be >= {MIN_SIZE}")
    return sizes


def run_worker(args: argparse.Namespace) -> None:
    """Run one stage in this process and print its RESULT line."""
    if args.worker == "ingest":
        result: Any = worker_ingest(args.db, args.n, args.batch)
    else:
        name = f"all-{LIMIT}" if args.real else name_of(args.n)
        result = worker_search(args.db, name, args.real)
    print(RESULT + json.dumps(result), flush=True)


def main() -> None:
    """Measure each size, print the table and the target checks, write the JSON and plot."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=sizes_arg, default=SIZES, help="comma-separated item counts"
    )
    parser.add_argument("--batch", type=int, default=BATCH, help=f"rows per commit [{BATCH}]")
    parser.add_argument("--real", action="store_true", help="add the real 10^5 point")
    parser.add_argument("--keep", action="store_true", help="keep each size's database")
    parser.add_argument("--out", type=Path, help=f"results JSON [{OUT} at the default sizes]")
    parser.add_argument("--worker", choices=("ingest", "search"), help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        assert isinstance(sys.stdout, io.TextIOWrapper)  # the worker's pipe to its parent
        sys.stdout.reconfigure(line_buffering=True)
        run_worker(args)
        return
    sizes = args.sizes
    work_dir().mkdir(parents=True, exist_ok=True)
    pipe = fitted_pipeline()
    base = split_texts(DATA)[0]
    rows: list[dict] = []
    for n in sizes:
        if not (fits_disk(n, pipe, base) and fits_memory(rows, n)):
            log(f"n={n} and larger skipped: they would not fit (free disk or memory first)")
            break
        try:
            rows += measure(n, args.batch, largest=n == sizes[-1], keep=args.keep)
        except WorkerError as exc:
            log(f"n={n}: {exc}; n={n} and larger not measured")
            break
    measured = tuple(sorted({r["n"] for r in rows}))
    if args.real:
        rows += real_rows()
    show(rows)
    for line in checks(rows):
        print(line)
    out = args.out or (OUT if measured == SIZES else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out} and {plot(rows, out.parent / 'plots' / (out.stem + '.png'))}")


if __name__ == "__main__":
    main()
