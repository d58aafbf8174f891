"""What `serve --max-piece` costs a large write and buys the searches sent beside it.

    nice -n 10 python benchmarks/pieces.py [--rounds 4]

A request of more than `--max-batch` texts is encoded in pieces of at most `--max-piece` texts
(at least one per encoding child), and a request that arrives meanwhile waits for the pieces
being encoded, not the whole write; each piece is an encode call with a fixed cost. Measured
through the real `probembed serve` (the built-in `default` pipeline, 127.0.0.1, `--workers 2`,
the other flags at their defaults) for `--max-piece` 64, 128, 256 (the default) and 1024 (one
piece per child: the behaviour before pieces):

- *stream*: one `/v1/embeddings` request of 1,024 distinct texts (base64), and beside it
  single-text `/v1/embeddings` requests, one at a time, each sent once the last is answered,
  from the moment the server's queue holds the write's texts until the write is answered:
  the write's wall time, the encoding children's CPU seconds and encode calls meanwhile, and
  the single requests' latencies (the first's, which waits for a piece, p50, p95, max,
  count);
- *alone*: the same size of write with nothing beside it, at 256 and 1024.

One server per setting, each started with its own empty embedding cache and kept for every
round, all four running at once (some 1.5 GB each): a server per setting and round would add
twelve start-ups of 45 s each on this machine, load for the other users of its two cores that
nothing measures. Start-up is not measured, and each server's children are warmed by a write of
128 texts first, as a running service's are. Each round draws fresh texts no server
has seen, the same for every setting: a write for *alone*, one for *stream* (the two halves of
2,048 texts paired by length, so they hold the same characters to 0.1%), and the single
texts. The six scenarios run in a fixed order in even rounds and reversed in odd ones, so a
slow spell of the shared machine does not fall on one setting. Reported: each setting's
median over the rounds, and the median of its per-round ratios to 256 (same round, same
texts). Texts are distinct STS-B train sentences in serve.py's seeded shuffle; without them the
benchmark is skipped. Writes benchmarks/results/pieces.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import numpy as np
from serve import STSB, batch_totals, cpu_split, metric_sum, sentences, slices

from probembed.evaluation.report import write_json
from probembed.service.process import ServerProcess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "pieces.json"
PIPELINE = "default"
WORKERS = 2
#: The --max-piece settings; REFERENCE is the default, the ratios' denominator.
SETTINGS = (64, 128, 256, 1024)
REFERENCE = 256
#: Settings also measured with nothing beside the write.
ALONE = (256, 1024)
#: Texts of the large write.
LARGE = 1024
#: Single texts on hand per round: the stream fails rather than run out (a trial round sent
#: 29 at --max-piece 64, the most).
STREAM_TEXTS = 200
#: A write over --max-batch (64) that gives each child a piece before anything is measured.
WARMUP = 128
#: Seeds the pairing of the two writes' texts.
SEED = 0
#: How often the stream's start looks for the write's texts in the server's queue.
POLL_SECONDS = 0.01


@dataclass
class Measure:
    """One scenario of one round."""

    round: int
    #: Its place in the round's order.
    position: int
    max_piece: int
    stream: bool
    write_s: float
    #: Encode calls during the scenario (the write's pieces, with the singles' batches).
    batches: int
    #: CPU seconds of the encoding children during the scenario.
    encoder_cpu_s: float
    searches: int
    #: The first single request's latency: sent once the write's first pieces are queued, it
    #: waits for one of them to be encoded.
    search_first_ms: float | None
    search_p50_ms: float | None
    search_p95_ms: float | None
    search_max_ms: float | None
    #: Single requests answered with another status than 200.
    search_errors: int
    load_1min: float


@dataclass
class Setting:
    """One setting's medians over the rounds, and its per-round ratios' medians against 256."""

    max_piece: int
    stream: bool
    rounds: int
    write_s: float
    write_vs_256: float | None
    encoder_cpu_s: float
    encoder_cpu_vs_256: float | None
    batches: float
    searches: float | None
    search_first_ms: float | None
    search_p50_ms: float | None
    search_p95_ms: float | None
    search_max_ms: float | None
    search_first_vs_256: float | None
    search_p50_vs_256: float | None
    search_p95_vs_256: float | None


def matched_halves(texts: list[str], seed: int) -> tuple[list[str], list[str]]:
    """Two halves whose lengths match text for text (neighbours by length split at random),
    each shuffled, so writes of either cost the same to encode."""
    rng = random.Random(seed)
    ranked = sorted(texts, key=lambda t: (len(t), t))
    first: list[str] = []
    second: list[str] = []
    for pair in zip(ranked[::2], ranked[1::2], strict=True):
        a, b = rng.sample(pair, 2)
        first.append(a)
        second.append(b)
    rng.shuffle(first)
    rng.shuffle(second)
    return first, second


def body(texts: list[str] | str) -> dict:
    """An embeddings request body, base64 as the `openai` client asks."""
    return {"model": PIPELINE, "input": texts, "encoding_format": "base64"}


async def post(http: aiohttp.ClientSession, texts: list[str] | str) -> tuple[int, float]:
    """Status and seconds of one embeddings request, its answer read whole."""
    started = time.perf_counter()
    async with http.post("/v1/embeddings", json=body(texts)) as answer:
        await answer.read()
        return answer.status, time.perf_counter() - started


async def until_queued(http: aiohttp.ClientSession, write: asyncio.Future) -> None:
    """Return once the server's encode queue holds texts (the write's) or the write is done."""
    while not write.done():
        async with http.get("/metrics") as answer:
            if metric_sum(await answer.text(), "probembed_encode_queue_texts") > 0:
                return
        await asyncio.sleep(POLL_SECONDS)


async def scenario(
    url: str, large: list[str], singles: Iterator[str] | None
) -> tuple[float, list[float], int]:
    """The write's seconds, and the single requests' seconds and failures sent beside it."""
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=600)) as http:
        write = asyncio.ensure_future(post(http, large))
        if singles is not None:
            await until_queued(http, write)
            while not write.done():
                text = next(singles, None)
                if text is None:
                    write.cancel()
                    raise SystemExit(
                        f"the stream used all {STREAM_TEXTS} texts: raise STREAM_TEXTS"
                    )
                status, seconds = await post(http, text)
                latencies.append(seconds)
                errors += status != 200
        status, seconds = await write
    if status != 200:
        raise SystemExit(f"the write of {len(large)} texts was answered {status}")
    return seconds, latencies, errors


def latency_figures(seconds: list[float]) -> dict[str, float | None]:
    """The first, p50, p95 and max of request latencies in milliseconds (None without
    requests)."""
    if not seconds:
        names = ("search_first_ms", "search_p50_ms", "search_p95_ms", "search_max_ms")
        return dict.fromkeys(names)
    ms = np.array(seconds, dtype=np.float64) * 1000
    return {
        "search_first_ms": round(float(ms[0]), 1),
        "search_p50_ms": round(float(np.median(ms)), 1),
        "search_p95_ms": round(float(np.percentile(ms, 95)), 1),
        "search_max_ms": round(float(ms.max()), 1),
    }


def measure(
    server: ServerProcess, piece: int, large: list[str], singles: list[str] | None,
    where: tuple[int, int],
) -> Measure:  # fmt: skip
    """One scenario against a running server, with its encode calls and children's CPU."""
    load = os.getloadavg()[0]
    (_, batches_before), cpu_before = batch_totals(server.url), cpu_split(server)
    stream = None if singles is None else iter(singles)
    write_s, latencies, errors = asyncio.run(scenario(server.url, large, stream))
    (_, batches_after), cpu_after = batch_totals(server.url), cpu_split(server)
    return Measure(
        round=where[0],
        position=where[1],
        max_piece=piece,
        stream=singles is not None,
        write_s=round(write_s, 3),
        batches=int(batches_after - batches_before),
        encoder_cpu_s=round(cpu_after["encoders"] - cpu_before["encoders"], 2),
        searches=len(latencies),
        **latency_figures(latencies),
        search_errors=errors,
        load_1min=round(load, 2),
    )


def median(values: list[float | None]) -> float | None:
    """The median of the values present (None: a setting with no single request), or None."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def paired_ratios(own: list[Measure], ref: list[Measure], field: str) -> float | None:
    """Median over rounds of a figure over the reference's in the same round (same texts)."""
    ratios = []
    for mine, theirs in zip(own, ref, strict=True):
        a, b = getattr(mine, field), getattr(theirs, field)
        if a is not None and b:
            ratios.append(a / b)
    return median(ratios)


def setting(measures: list[Measure], piece: int, stream: bool) -> Setting:
    """One setting's medians over the rounds and its ratios to 256's (same kind)."""
    own = [m for m in measures if m.max_piece == piece and m.stream == stream]
    base = {m.round: m for m in measures if m.max_piece == REFERENCE and m.stream == stream}
    ref = [base[m.round] for m in own]
    return Setting(
        max_piece=piece,
        stream=stream,
        rounds=len(own),
        write_s=statistics.median(m.write_s for m in own),
        write_vs_256=paired_ratios(own, ref, "write_s"),
        encoder_cpu_s=statistics.median(m.encoder_cpu_s for m in own),
        encoder_cpu_vs_256=paired_ratios(own, ref, "encoder_cpu_s"),
        batches=statistics.median(m.batches for m in own),
        searches=median([m.searches for m in own]) if stream else None,
        search_first_ms=median([m.search_first_ms for m in own]),
        search_p50_ms=median([m.search_p50_ms for m in own]),
        search_p95_ms=median([m.search_p95_ms for m in own]),
        search_max_ms=median([m.search_max_ms for m in own]),
        search_first_vs_256=paired_ratios(own, ref, "search_first_ms"),
        search_p50_vs_256=paired_ratios(own, ref, "search_p50_ms"),
        search_p95_vs_256=paired_ratios(own, ref, "search_p95_ms"),
    )


def order(round_: int) -> list[tuple[int, bool]]:
    """The round's scenarios, (max_piece, stream): as listed in even rounds, reversed in odd."""
    listed = [(p, True) for p in SETTINGS] + [(p, False) for p in ALONE]
    return listed if round_ % 2 == 0 else listed[::-1]


def main() -> None:
    """Start a server per setting, warm each, run the rounds, write medians and ratios."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds of every scenario (>= 1)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if not STSB.is_file():
        print(f"pieces.py skipped: no {STSB} (set $PROBEMBED_DATASETS)", file=sys.stderr)
        return
    take = slices(sentences())
    load_start = os.getloadavg()
    warmup = take(WARMUP)
    texts = []
    for r in range(args.rounds):
        alone, stream = matched_halves(take(2 * LARGE), SEED + r)
        texts.append((alone, stream, take(STREAM_TEXTS)))
    measures: list[Measure] = []
    with (
        tempfile.TemporaryDirectory(prefix="probembed-pieces-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        servers = {}
        for piece in SETTINGS:
            env = {"PROBEMBED_CACHE_DIR": str(Path(tmp) / f"cache-{piece}")}
            flags = ("--workers", str(WORKERS), "--max-piece", str(piece))
            server = ServerProcess(Path(tmp) / f"db-{piece}", PIPELINE, *flags, env=env)
            servers[piece] = stack.enter_context(server)
            asyncio.run(scenario(server.url, warmup, None))
            print(f"--max-piece {piece}: ready and warm", flush=True)
        for r, (alone, stream, singles) in enumerate(texts):
            for position, (piece, beside) in enumerate(order(r)):
                large, stream_texts = (stream, singles) if beside else (alone, None)
                measures.append(measure(servers[piece], piece, large, stream_texts, (r, position)))
                print(asdict(measures[-1]), flush=True)
    rows = [setting(measures, p, True) for p in SETTINGS]
    rows += [setting(measures, p, False) for p in ALONE]
    config = {
        "pipeline": PIPELINE,
        "workers": WORKERS,
        "large_texts": LARGE,
        "settings": list(SETTINGS),
        "alone": list(ALONE),
        "rounds": args.rounds,
        "seed": SEED,
        "command": f"nice -n 10 python benchmarks/pieces.py --rounds {args.rounds}",
    }
    sections = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": {"start": load_start, "end": os.getloadavg()},
        },
        "characters": {
            "alone": [sum(map(len, alone)) for alone, _, _ in texts],
            "stream": [sum(map(len, stream)) for _, stream, _ in texts],
        },
        "measures": [asdict(m) for m in measures],
    }
    write_json(args.out, [asdict(s) for s in rows], config, sections)
    for s in rows:
        print(asdict(s))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
