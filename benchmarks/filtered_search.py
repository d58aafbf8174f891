"""What a filter's unfiltered reading of p_relevant costs: filtered search side by side.

A `where` search gives each hit the p_relevant it has in the same search without the filter,
so a filtered search with a calibrator ranks twice. This benchmark times, on the SciFact
corpus indexed with a built-in (`retrieval` unless --pipeline says; the collection
`benchmarks/search_calibration.py` makes, reused from the same --db), the 300 test queries
(k = 10, already encoded, one batched call each) searched four ways with the same searcher
settings: unfiltered and filtered to half the corpus (even ids), each with the shipped
calibrator and without one (no p_relevant at all, so nothing ranked twice). What the filtered
search adds over its uncalibrated twin, beyond what the unfiltered one adds over its own, is
the unfiltered ranking it reads p_relevant from. Every call runs once per round for ROUNDS
rounds, each keeping its best, and the figures are ratios to the unfiltered calibrated
search, so the machine's load moves them little.

    python benchmarks/filtered_search.py [--pipeline retrieval] [--db DIR]

Writes benchmarks/results/filtered_search.json.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import probembed
from probembed.evaluation import load_dataset
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.store import Database, Searcher, ingest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
K = 10
ROUNDS = 7
#: The filter of search_calibration.py: half the corpus whatever the query asks.
WHERE = "CAST(id AS BIGINT) % 2 = 0"


def best_seconds(calls: dict[str, object], rounds: int) -> dict[str, float]:
    """Each call's best time over `rounds` rounds, the calls taken in turn within a round."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    """Index (once), time the four searches, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_db = Path(tempfile.gettempdir()) / "probembed-search-calibration-db"
    parser.add_argument("--pipeline", default="retrieval", help="a built-in with a calibrator")
    parser.add_argument("--db", type=Path, default=default_db)
    args = parser.parse_args()
    suffix = "" if args.pipeline == "retrieval" else f"-{args.pipeline}"
    shipped = probembed.load(args.pipeline)
    if shipped.calibrator is None:
        raise SystemExit(f"the installed {args.pipeline} pipeline has no calibrator")
    collection = Database(args.db, create=True).collection(f"scifact{suffix}")
    if not collection.exists:
        ingest(SCIFACT, collection, shipped, progress=True)
    bare = copy.copy(shipped)
    bare.calibrator = None
    dataset = load_dataset(SCIFACT, "test")
    texts = list(dataset.queries.values())
    fused = shipped.encode(texts)
    calibrated, uncalibrated = Searcher(collection, shipped), Searcher(collection, bare)

    def search(searcher: Searcher, **options: object):
        return lambda: searcher.search_fused(fused, K, texts=texts, **options)

    calls = {
        "unfiltered": search(calibrated),
        "unfiltered, no calibrator": search(uncalibrated),
        "filtered (p_relevant read unfiltered)": search(calibrated, where=WHERE),
        "filtered, no calibrator": search(uncalibrated, where=WHERE),
    }
    for call in calls.values():  # warm: graphs built, rows paged in
        call()
    seconds = best_seconds(calls, ROUNDS)
    base = seconds["unfiltered"]
    rows = [
        {"search": name, "queries_per_second": len(texts) / s, "time_over_unfiltered": s / base}
        for name, s in seconds.items()
    ]
    for row in rows:
        print(row)
    config = {"pipeline": args.pipeline, "k": K, "queries": len(texts), "rounds": ROUNDS}
    write_json(RESULTS / "filtered_search.json", rows, config | {"where": WHERE})


if __name__ == "__main__":
    main()
