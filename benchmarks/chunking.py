"""Chunked documents against truncation on SciFact, and what chunked ingest costs.

    python benchmarks/chunking.py [--part quality|throughput|all]

quality: SciFact test, the default pipeline; every document embedded whole (each member cuts
it at its token limit) against every document cut into chunks that every member reads whole
(`probembed.chunking`, 256 tokens, 32 overlap) and scored by its best chunk; nDCG@10 under
`uec` and `dot`, side by side from the same pipeline.
throughput: chunked ingest (`ingest_documents`) of the first 300 SciFact documents into a
fresh collection with an uncached pipeline: chunks per second end to end (chunking, encoding,
LanceDB commits), chunking alone, and bytes per stored chunk.
Writes (and merges into) benchmarks/results/chunking.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from probembed.chunking import ChunkSettings
from probembed.evaluation.chunked import chunk_corpus, chunked_vs_truncated
from probembed.evaluation.datasets import load_retrieval
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.store import Database, Problem, Record, ingest_documents, read_records

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "chunking.json"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
THROUGHPUT_DOCS = 300


def quality() -> list[dict]:
    """nDCG@10 truncated vs chunked, under uec and dot."""
    pipeline = Pipeline.load("default")
    dataset = load_retrieval(SCIFACT, "test")
    return chunked_vs_truncated(pipeline, dataset, ChunkSettings(), ["uec", "dot"])


def first_records(n: int) -> list[Record]:
    """The first n SciFact documents; a line that is no document stops the benchmark rather
    than shrink its corpus."""
    records = []
    for item in itertools.islice(read_records(SCIFACT), n):
        if isinstance(item, Problem):
            raise SystemExit(str(item))
        records.append(item)
    return records


def throughput() -> dict:
    """Chunks/s of chunked ingest end to end and of chunking alone; bytes per chunk."""
    pipeline = Pipeline.load("default", cache=False)
    records = first_records(THROUGHPUT_DOCS)
    corpus = {r.id: r.text for r in records}
    started = time.perf_counter()
    chunked = chunk_corpus(corpus, pipeline, ChunkSettings())
    chunking = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(Path(tmp) / "db", create=True).collection("scifact")
        jsonl = Path(tmp) / "docs.jsonl"
        jsonl.write_text("".join(json.dumps({"id": r.id, "text": r.text}) + "\n" for r in records))
        started = time.perf_counter()
        report = ingest_documents(jsonl, collection, pipeline, ChunkSettings(), progress=True)
        seconds = time.perf_counter() - started
        stats = collection.stats()
    assert stats.bytes_per_item is not None  # None only for an empty collection
    return {
        "docs": len(records),
        "chunks": report.chunks_written,
        "chunks_per_s": round(report.chunks_written / seconds, 1),
        "chunking_only_chunks_per_s": round(len(chunked.texts) / chunking, 1),
        "bytes_per_chunk": round(stats.bytes_per_item, 1),
        "dim": stats.dim,
    }


def main() -> None:
    """Run the asked parts and merge them into the results file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--part", choices=("quality", "throughput", "all"), default="all")
    args = parser.parse_args()
    result = json.loads(OUT.read_text()) if OUT.is_file() else {}
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if args.part in ("quality", "all"):
        result["rows"] = quality()
    if args.part in ("throughput", "all"):
        result["throughput"] = throughput()
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
