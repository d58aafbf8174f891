"""What the learned query confidence costs a search, reading the hits' texts included.

    python benchmarks/confidence_cost.py [--pipeline retrieval] [--rounds 7]

The SciFact corpus (5,183 abstracts) goes into a temporary collection of the pipeline; its
1,109 queries are embedded once, so only search is timed. Every query is searched (k = 10,
one batched `search_fused` call) dense and hybrid, by three searchers over the same
collection that differ only in the calibrator: the shipped one (its dense searches read the
first ten hits' texts for `coverage_features`, its hybrid ones BM25's features and the same
coverage, and its hybrid p_relevant BM25's hit features), the same calibrator without its
text- and BM25-reading models (margin and entropy features only), and none (no p_relevant,
the outrank confidence). Calls are interleaved, each keeps its best of --rounds rounds, so a
ratio is not skewed by the machine's load changing between them. Writes
benchmarks/results/confidence_cost.json: ms per query and the ratio to the searcher without
a calibrator, and for scale what encoding the queries costs (one batched call, no cache).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from probembed.calibration import RelevanceCalibrator
from probembed.evaluation.datasets import load_retrieval
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.store import Database, Searcher, ingest

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "confidence_cost.json"
K = 10


def without_text(calibrator: RelevanceCalibrator) -> RelevanceCalibrator:
    """The calibrator with a query confidence that reads no hit text and no BM25 feature, and
    no hybrid calibrator (which reads BM25's hit features)."""
    assert calibrator.confidence is not None
    confidence = replace(calibrator.confidence, text_model=None, hybrid_model=None)
    return replace(calibrator, confidence=confidence, hybrid=None)


def variants(pipe: Pipeline) -> dict[str, Pipeline]:
    """The pipeline under each calibrator compared (same members, fusion and score)."""
    if pipe.calibrator is None or pipe.calibrator.confidence is None:
        raise SystemExit(f"pipeline {pipe.name!r} has no learned query confidence to time")

    def under(calibrator: RelevanceCalibrator | None) -> Pipeline:
        """This pipeline with another calibrator."""
        return Pipeline(
            pipe.members, pipe.fusion, pipe.score, pipe.name, False, calibrator, pipe.adapt
        )

    return {
        "shipped (reads hit texts)": under(pipe.calibrator),
        "margins only": under(without_text(pipe.calibrator)),
        "no calibrator": under(None),
    }


def main() -> None:
    """Ingest SciFact once, then time every searcher's dense and hybrid searches side by side."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline", default="retrieval")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    directory = datasets_dir() / "retrieval" / "scifact"
    queries = list(load_retrieval(directory, "train").queries.values())
    queries += list(load_retrieval(directory, "test").queries.values())
    pipe = Pipeline.load(args.pipeline)
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(tmp, create=True).collection("scifact")
        ingest(directory / "corpus.jsonl", collection, pipe, progress=True)
        start = time.perf_counter()
        fused = Pipeline.load(args.pipeline, cache=False).encode(queries)
        encode_ms = 1000 * (time.perf_counter() - start) / len(queries)
        searchers = {name: Searcher(collection, p) for name, p in variants(pipe).items()}
        best: dict[tuple[str, bool], float] = {}
        for _ in range(args.rounds):
            for hybrid in (False, True):
                for name, searcher in searchers.items():
                    start = time.perf_counter()
                    searcher.search_fused(fused, k=K, hybrid=hybrid, texts=queries)
                    took = time.perf_counter() - start
                    best[name, hybrid] = min(best.get((name, hybrid), took), took)
    rows = []
    for (name, hybrid), seconds in best.items():
        base = best["no calibrator", hybrid]
        rows.append(
            {
                "search": "hybrid" if hybrid else "dense",
                "calibrator": name,
                "ms_per_query": 1000 * seconds / len(queries),
                "ratio_to_no_calibrator": seconds / base,
            }
        )
        print(f"{rows[-1]['search']:6} {name:26} {rows[-1]['ms_per_query']:.3f} ms/query, "
              f"x{rows[-1]['ratio_to_no_calibrator']:.2f}")  # fmt: skip
    print(f"encoding the queries (one batched call, no cache): {encode_ms:.2f} ms/query")
    config = {"pipeline": pipe.name, "queries": len(queries), "k": K, "rounds": args.rounds}
    config["encode_ms_per_query"] = encode_ms
    write_json(args.out, rows, config)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
