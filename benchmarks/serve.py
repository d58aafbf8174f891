"""What the service sustains under concurrent clients, beside offline batched encoding.

    python benchmarks/serve.py [--pipeline default] [--scale 1.0]

In one run, on 127.0.0.1 only, with the real `probembed serve` in a subprocess:
- offline: `Pipeline.encode` of the texts of each 50-client round in one call, in this process
  (the server idle), so both sides encode the same texts;
- single-text `/v1/embeddings` requests from 1, 8 and 50 concurrent clients (base64, as the
  `openai` client asks), with dynamic batching on (the defaults);
- the two figures whose ratio is the target (offline and 50 clients) are timed in alternating
  rounds on each round's own texts, and the round with the median ratio is reported, so a
  slow spell of a shared machine does not fall on one side of the ratio only;
- the same 50 clients against a server started with `--max-batch 1` (batching off);
- 50 clients mixing searches (3 in 4) and ingests of 4 new documents (1 in 4) over a
  collection of 2,000 documents, after which every acknowledged write is looked for on disk.

Texts are distinct STS-B train sentences in a seeded shuffle (the file's order runs from
short captions to long forum posts, so slices in file order differ threefold in length), a
disjoint slice per scenario, so no embedding cache answers for any of them (each server also
starts with an empty cache; offline encoding uses none). Every scenario is
bounded by its request count. The load generator shares the two cores with the server, as a
client on the same machine would. Writes benchmarks/results/serve.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import httpx2

from probembed.evaluation.datasets import load_sts
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.progress import progress_bar
from probembed.service.process import ServerProcess
from probembed.store import Database

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "serve.json"
STSB = datasets_dir() / "sts" / "stsb" / "train.tsv"
COLLECTION = "bench"
#: Requests per scenario at --scale 1: each runs for tens of seconds on 2 cores.
REQUESTS = {"embed-1": 150, "embed-8": 600, "embed-50": 1500, "embed-50-unbatched": 400}
MIXED_REQUESTS = 800
#: Alternating rounds of offline encoding and embed-50 (its requests split among them).
ROUNDS = 3
SHUFFLE_SEED = 0
PREFILL = 2000
DOCS_PER_INGEST = 4


@dataclass
class Outcome:
    """One scenario's figures."""

    scenario: str
    batching: bool
    clients: int
    requests: int
    texts: int
    seconds: float
    requests_per_s: float
    texts_per_s: float
    p50_ms: float
    p99_ms: float
    mean_batch: float | None
    errors_5xx: int
    refused_4xx: int
    transport_errors: int
    lost_writes: int | None = None
    #: CPU seconds spent during the scenario: the server's event-loop process, its encoding
    #: children, and this load generator (Linux /proc; empty elsewhere).
    cpu_seconds: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def sentences() -> list[str]:
    """Distinct STS-B train sentences, in a seeded shuffle."""
    data = load_sts(STSB)
    texts = list(dict.fromkeys(t for t in data.sentence1 + data.sentence2 if t.strip()))
    random.Random(SHUFFLE_SEED).shuffle(texts)
    return texts


def slices(texts: list[str]) -> Callable[[int], list[str]]:
    """A taker of the next n unused texts: no two scenarios share a text."""
    state = {"at": 0}

    def take(n: int) -> list[str]:
        start = state["at"]
        if start + n > len(texts):
            raise SystemExit(f"need {start + n} distinct texts, STS-B train has {len(texts)}")
        state["at"] = start + n
        return texts[start : start + n]

    return take


def metric_sum(text: str, name: str) -> float:
    """One metric's value summed over its labelled series (every pipeline's), from /metrics
    text."""
    return sum(float(v) for v in re.findall(rf"{name}\{{[^}}]*\}} (\S+)", text))


def batch_totals(url: str) -> tuple[float, float]:
    """(texts, batches) encoded so far, summed over pipelines, from /metrics."""
    text = httpx2.get(f"{url}/metrics", timeout=30).text
    return (
        metric_sum(text, "probembed_encode_batch_texts_sum"),
        metric_sum(text, "probembed_encode_batch_texts_count"),
    )


async def drive(
    url: str, clients: int, requests: list[tuple[str, dict]], label: str
) -> tuple[list[float], list[int], int, float]:
    """Send the requests from `clients` concurrent workers: latencies, statuses, errors, time.

    aiohttp, the lightest asyncio client here: the load generator shares the two cores with
    the server, and httpx's client took 1.0-1.3 ms of CPU per request against its 0.24.
    """
    latencies: list[float] = []
    statuses: list[int] = [0] * len(requests)  # by request; 0: no answer (transport error)
    failures = 0
    queue: Iterator[tuple[int, tuple[str, dict]]] = iter(enumerate(requests))
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as http:
        with progress_bar(label, len(requests), True) as bar:

            async def worker() -> None:
                nonlocal failures
                for i, (path, body) in queue:
                    started = time.perf_counter()
                    try:
                        async with http.post(path, json=body) as answer:
                            await answer.read()
                            statuses[i] = answer.status
                    except (aiohttp.ClientError, TimeoutError):
                        failures += 1
                    latencies.append(time.perf_counter() - started)
                    bar.advance(1)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(clients)))
            seconds = time.perf_counter() - started
    return latencies, statuses, failures, seconds


def _cpu_of(pid: int) -> float:
    """User plus system CPU seconds of one process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_split(server: ServerProcess) -> dict[str, float]:
    """CPU seconds so far of the server process, its encoding children and this process."""
    if server.process is None or not Path("/proc/self/stat").exists():
        return {}
    pid = server.process.pid
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "server": _cpu_of(pid),
        "encoders": sum(_cpu_of(c) for c in server.children()),
        "load_generator": usage.ru_utime + usage.ru_stime,
    }


def run(
    server: ServerProcess, scenario: str, clients: int, requests: list[tuple[str, dict]],
    texts: int, batching: bool,
) -> tuple[Outcome, list[int]]:  # fmt: skip
    """One scenario against a running server, and each request's status."""
    before, cpu_before = batch_totals(server.url), cpu_split(server)
    latencies, statuses, failures, seconds = asyncio.run(
        drive(server.url, clients, requests, scenario)
    )
    after, cpu_after = batch_totals(server.url), cpu_split(server)
    batches = after[1] - before[1]
    ms = sorted(1000 * x for x in latencies)
    outcome = Outcome(
        scenario=scenario,
        batching=batching,
        clients=clients,
        requests=len(requests),
        texts=texts,
        seconds=round(seconds, 2),
        requests_per_s=round(len(requests) / seconds, 1),
        texts_per_s=round(texts / seconds, 1),
        p50_ms=round(statistics.median(ms), 1),
        p99_ms=round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
        mean_batch=round((after[0] - before[0]) / batches, 2) if batches else None,
        errors_5xx=sum(s >= 500 for s in statuses),
        refused_4xx=sum(400 <= s < 500 for s in statuses),
        transport_errors=failures,
        cpu_seconds={k: round(cpu_after[k] - v, 2) for k, v in cpu_before.items()},
    )
    return outcome, statuses


def embed_requests(model: str, texts: list[str]) -> list[tuple[str, dict]]:
    """One single-text embedding request per text."""
    body = {"model": model, "encoding_format": "base64"}
    return [("/v1/embeddings", {**body, "input": t}) for t in texts]


def offline(pipeline: Pipeline, texts: list[str]) -> float:
    """Texts/s of one batched Pipeline.encode call of an uncached pipeline."""
    started = time.perf_counter()
    pipeline.encode(texts)
    return len(texts) / (time.perf_counter() - started)


def prefill(server: ServerProcess, texts: list[str]) -> float:
    """Ingest the collection's starting documents in requests of 100: documents/s."""
    documents = [{"id": f"p{i}", "text": t} for i, t in enumerate(texts)]
    started = time.perf_counter()
    with httpx2.Client(base_url=server.url, timeout=600) as http:
        http.post("/v1/collections", json={"name": COLLECTION}).raise_for_status()
        for start in range(0, len(documents), 100):
            body = {"documents": documents[start : start + 100]}
            http.post(f"/v1/collections/{COLLECTION}/documents", json=body).raise_for_status()
    return len(documents) / (time.perf_counter() - started)


def mixed_requests(
    queries: list[str], new: list[str]
) -> tuple[list[tuple[str, dict]], dict[int, list[str]]]:
    """Searches and ingests interleaved 3:1, and the ids each ingest request writes."""
    requests: list[tuple[str, dict]] = []
    ids: dict[int, list[str]] = {}
    writes = iter(range(0, len(new), DOCS_PER_INGEST))
    for i, query in enumerate(queries):
        requests.append((f"/v1/collections/{COLLECTION}/search", {"query": query, "k": 10}))
        if i % 3 == 2:
            start = next(writes, None)
            if start is None:
                continue
            docs = [
                {"id": f"n{start + j}", "text": t}
                for j, t in enumerate(new[start : start + DOCS_PER_INGEST])
            ]
            ids[len(requests)] = [d["id"] for d in docs]
            requests.append((f"/v1/collections/{COLLECTION}/documents", {"documents": docs}))
    return requests, ids


def main() -> None:
    """Offline, then the batching server's scenarios, then the unbatched server's."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--pipeline", default="default")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every request count")
    args = parser.parse_args()
    count = {k: max(10, round(v * args.scale)) for k, v in REQUESTS.items()}
    take = slices(sentences())
    local = Pipeline.load(args.pipeline, cache=False)  # no cache: every round encodes
    model = local.name
    local.encode(take(32))  # warm-up
    rates: list[float] = []
    rows: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="probembed-serve-bench-") as tmp:
        work = Path(tmp)

        def server(name: str, *flags: str) -> ServerProcess:
            env = {"PROBEMBED_CACHE_DIR": str(work / f"cache-{name}")}
            return ServerProcess(work / f"db-{name}", args.pipeline, *flags, env=env)

        with server("batched") as batched:
            for clients in (1, 8):
                texts = take(count[f"embed-{clients}"])
                requests = embed_requests(model, texts)
                rows.append(
                    run(batched, f"embed-{clients}", clients, requests, len(texts), True)[0]
                )
            rounds = []
            for _ in range(ROUNDS):
                texts = take(count["embed-50"] // ROUNDS)
                rates.append(offline(local, texts))
                print(f"offline Pipeline.encode: {rates[-1]:.1f} texts/s")
                requests = embed_requests(model, texts)
                rounds.append(run(batched, "embed-50", 50, requests, len(texts), True)[0])
            ratios = [r.texts_per_s / rate for r, rate in zip(rounds, rates, strict=True)]
            middle = sorted(range(ROUNDS), key=ratios.__getitem__)[ROUNDS // 2]
            rows.append(rounds[middle])
            ingest_rate = prefill(batched, take(PREFILL))
            queries = take(max(10, round(MIXED_REQUESTS * 0.75 * args.scale)))
            new = take(len(queries) // 3 * DOCS_PER_INGEST + DOCS_PER_INGEST)
            requests, ids = mixed_requests(queries, new)
            written = sum(len(v) for v in ids.values())
            mixed, statuses = run(batched, "mixed-50", 50, requests, len(queries) + written, True)
            acknowledged = {d for i, docs in ids.items() if statuses[i] == 200 for d in docs}
            mixed.extra = {
                "searches": len(queries),
                "ingested_docs": written,
                "acknowledged_docs": len(acknowledged),
                "prefill_docs_per_s": round(ingest_rate, 1),
            }
            rows.append(mixed)
        stored = Database(work / "db-batched").open(COLLECTION).ids()  # after SIGTERM
        mixed.lost_writes = len(acknowledged - stored)
        mixed.extra["stored"] = len(stored)
        with server("unbatched", "--max-batch", "1") as unbatched:
            texts = take(count["embed-50-unbatched"])
            requests = embed_requests(model, texts)
            rows.append(run(unbatched, "embed-50", 50, requests, len(texts), False)[0])
    rate = rates[middle]
    rows.insert(0, Outcome("offline", True, 0, 0, rounds[middle].texts, 0.0, 0.0, round(rate, 1),
                           0.0, 0.0, None, 0, 0, 0))  # fmt: skip
    by = {(r.scenario, r.batching): r for r in rows}
    served = by[("embed-50", True)].texts_per_s
    summary = {
        "offline_texts_per_s": round(rate, 1),
        "offline_rounds_texts_per_s": [round(r, 1) for r in rates],
        "embed_50_rounds_texts_per_s": [r.texts_per_s for r in rounds],
        "embed_50_rounds_vs_offline": [round(r, 3) for r in ratios],
        "batched_50_vs_offline": round(ratios[middle], 3),
        "batched_50_vs_unbatched_50": round(served / by[("embed-50", False)].texts_per_s, 2),
    }
    result = {
        "pipeline": args.pipeline,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "summary": summary,
        "rows": [asdict(r) for r in rows],
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
