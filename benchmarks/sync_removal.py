"""What a sync's removal costs: the time and peak memory of removing many ids at once.

    python benchmarks/sync_removal.py --label after    # at the change, or any later commit
    # before: this script as of a5fdbd9 (today's imports recipes.hashing_pipeline, which
    # 0e0fe28 lacks) and its results file copied into a worktree of 0e0fe28, run there with
    # PYTHONPATH set to it (probembed then imports from that checkout)
    python benchmarks/sync_removal.py --label before

A collection of `--rows` records (short generated texts, a two-member hashing pipeline fitted
on the bundled Python docs, `recipes.hashing_pipeline`: no model to load, so the store's work
is what shows) is built
once; each scenario then runs on a copy of it, in a process of its own:

- `sync`: a plain `ingest(..., sync=True)` whose input holds every record but `--removed`
  of them (spread over the collection), and `EDITED` of the others with a new
  text: it writes the edits and removes the rest, as a sync of a corpus that lost documents;
- `delete`: `Collection.delete` of the same ids, the removal alone.

For each: the wall time of the call and the rise of the process's peak resident memory
during it (VmHWM, reset through /proc/self/clear_refs just before), which holds LanceDB's
and Arrow's buffers and moves by some MB between runs. Each `--label` is kept in
benchmarks/results/sync_removal.json, and with both there the ratios after/before.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "sync_removal.json"
#: Records of the sync's input given a new text (its last write, which the removal follows).
EDITED = 1_000
SCENARIOS = ("sync", "delete")


def text(i: int, edited: bool = False) -> str:
    """Record i's text."""
    said = f"record {i} on topic {i % 97}, kept in section {i % 13}"
    return f"{said} (edited)" if edited else said


def removed_ids(rows: int, removed: int) -> list[str]:
    """The ids a sync removes: spread over the collection, as a corpus loses documents."""
    step = rows // removed
    return [f"doc-{i:07d}" for i in range(0, step * removed, step)]


def build(db: Path, rows: int) -> None:
    """The collection: `rows` records in commits of 10,000."""
    from probembed.evaluation.recipes import hashing_pipeline
    from probembed.store import Database, Record, ingest

    pipeline = hashing_pipeline((64, 48))
    records = [Record(f"doc-{i:07d}", text(i)) for i in range(rows)]
    ingest(records, Database(db, create=True).collection("c"), pipeline, batch_size=10_000)


def peak_rss_mb() -> float:
    """This process's peak resident size since the last reset, in MB."""
    status = Path("/proc/self/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return kib / 1024


def run(scenario: str, db: Path, rows: int, removed: int) -> dict[str, Any]:
    """One scenario on the collection at `db` (a copy): its time and peak memory rise."""
    from probembed.store import Database, Record, ingest

    collection = Database(db).open("c")
    gone = removed_ids(rows, removed)
    pipeline = collection.load_pipeline()
    if scenario == "sync":
        dropped = set(gone)
        kept = [i for i in range(rows) if f"doc-{i:07d}" not in dropped]
        edited = set(kept[:: len(kept) // EDITED][:EDITED])
        records = [Record(f"doc-{i:07d}", text(i, i in edited)) for i in kept]
    Path("/proc/self/clear_refs").write_text("5")
    before, start = peak_rss_mb(), time.perf_counter()
    if scenario == "sync":
        report = ingest(records, collection, pipeline, sync=True)
        done = {"removed": report.removed, "updated": report.updated}
    else:
        done = {"removed": collection.delete_stored(gone)}  # a sync's removal alone
    seconds = time.perf_counter() - start
    assert done["removed"] == removed and collection.count() == rows - removed, done
    return {"seconds": round(seconds, 2), "peak_rss_rise_mb": round(peak_rss_mb() - before, 1)}


def ratios(runs: dict[str, Any]) -> dict[str, Any]:
    """after / before of each figure, where both labels were measured on the same sizes."""
    before, after = runs.get("before"), runs.get("after")
    if before is None or after is None or before["sizes"] != after["sizes"]:
        return {}
    return {
        scenario: {
            figure: round(after[scenario][figure] / before[scenario][figure], 3)
            for figure in ("seconds", "peak_rss_rise_mb")
        }
        for scenario in SCENARIOS
    }


def main() -> None:
    """Build once, run each scenario on a copy in its own process, keep the figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--removed", type=int, default=100_000)
    parser.add_argument("--label", choices=("before", "after"), required=True)
    parser.add_argument("--run", choices=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run is not None:  # a scenario's own process
        print(json.dumps(run(args.run, args.db, args.rows, args.removed)))
        return
    figures: dict[str, Any] = {"sizes": {"rows": args.rows, "removed": args.removed}}
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "built"
        build(built, args.rows)
        for scenario in SCENARIOS:
            copy = Path(tmp) / scenario
            shutil.copytree(built, copy)
            command = [sys.executable, __file__, "--label", args.label, "--run", scenario]
            sizes = ["--rows", str(args.rows), "--removed", str(args.removed)]
            out = subprocess.run(
                [*command, *sizes, "--db", str(copy)], check=True, text=True, capture_output=True
            ).stdout
            figures[scenario] = json.loads(out.splitlines()[-1])
            print(scenario, figures[scenario], flush=True)
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, text=True, capture_output=True
    ).stdout.strip()
    figures["commit"] = commit
    figures["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    runs = json.loads(OUT.read_text())["runs"] if OUT.exists() else {}
    runs[args.label] = figures
    OUT.write_text(json.dumps({"runs": runs, "ratios": ratios(runs)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
