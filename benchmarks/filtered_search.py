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

import copy
import time
from collections.abc import Callable
from functools import partial

from search_calibration import RESULTS, SCIFACT, WHERE, arguments, suffix_of, whole_collection

import probembed
from probembed.evaluation.datasets import load_retrieval
from probembed.evaluation.report import write_json
from probembed.store import Database, Searcher

K = 10
ROUNDS = 7


def best_seconds(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
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
    args = arguments(__doc__.splitlines()[0]).parse_args()
    shipped = probembed.load(args.pipeline)
    if shipped.calibrator is None:
        raise SystemExit(f"the installed {args.pipeline} pipeline has no calibrator")
    db = Database(args.db, create=True)
    collection = whole_collection(db, shipped, suffix_of(args.pipeline))
    bare = copy.copy(shipped)
    bare.calibrator = None
    dataset = load_retrieval(SCIFACT, "test")
    texts = list(dataset.queries.values())
    fused = shipped.encode(texts)
    calibrated, uncalibrated = Searcher(collection, shipped), Searcher(collection, bare)

    def search(searcher: Searcher, where: str | None = None) -> Callable[[], object]:
        return partial(searcher.search_fused, fused, K, texts=texts, where=where)

    calls = {
        "unfiltered": search(calibrated),
        "unfiltered, no calibrator": search(uncalibrated),
        "filtered (p_relevant read unfiltered)": search(calibrated, WHERE),
        "filtered, no calibrator": search(uncalibrated, WHERE),
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
