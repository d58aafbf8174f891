"""Tiny BEIR folders written by the tests themselves (never copied from the benchmark data)."""

import json
from pathlib import Path


def write_beir(
    directory: Path, corpus: list[dict], queries: list[dict], qrels: list[tuple]
) -> Path:
    """Write a BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv."""
    (directory / "qrels").mkdir(parents=True)
    for name, records in (("corpus", corpus), ("queries", queries)):
        lines = "".join(json.dumps(r) + "\n" for r in records)
        (directory / f"{name}.jsonl").write_text(lines, encoding="utf-8")
    rows = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    (directory / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return directory


def pairs_as_beir(toy_pairs, directory: Path, n: int = 80) -> Path:
    """A BEIR set of n distinct SICK sentences, each queried by its pair's other sentence."""
    first: dict[str, tuple[str, str]] = {}
    for a, b in toy_pairs:
        first.setdefault(b, (a, b))
    pairs = list(first.values())[:n]
    corpus = [{"_id": f"d{i}", "text": b} for i, (_, b) in enumerate(pairs)]
    queries = [{"_id": f"q{i}", "text": a} for i, (a, _) in enumerate(pairs)]
    return write_beir(directory, corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(n)])
