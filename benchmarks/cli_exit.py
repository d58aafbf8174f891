"""What the console script's end-of-command freeze saves: each command's wall time, run as
`probembed` does, against the same command with `probembed.interfaces.freeze_for_exit` made a no-op.

    python benchmarks/cli_exit.py [--rounds 8]

Three commands a user runs often, none needing ../shared: `collections` (LanceDB, no
pipeline), `search` (a saved two-model hashing pipeline: LanceDB and the pipeline code) and
`encode` with the built-in `default` pipeline (torch and its three models). The two variants
run alternately, `--rounds` times each, in fresh processes, on one database and one
embedding cache made beforehand (so no run pays for a first write). Reported per command:
the median wall time of each variant, their ratio and difference, and every run's time (the
machine may be shared: read the ratio, not the seconds).
Writes benchmarks/results/cli_exit.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probembed.evaluation.recipes import hashing_pipeline
from probembed.evaluation.report import write_json

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cli_exit.json"
#: The console script's own entry point; "unfrozen" runs it without the freeze.
CHILD = """
import sys
import probembed.interfaces as interfaces
if sys.argv[1] == "unfrozen":
    interfaces.freeze_for_exit = lambda: None
sys.argv = ["probembed", *sys.argv[2:]]
interfaces.main()
"""
VARIANTS = ("frozen", "unfrozen")


def run(variant: str, args: list[str], env: dict[str, str]) -> float:
    """Seconds from start to exit of one command in a fresh process; a failure stops the run."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, variant, *args], capture_output=True, text=True, env=env
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"probembed {' '.join(args)} failed ({variant}):\n{done.stderr}")
    return took


def parsed_options(description: str | None, out: Path) -> argparse.Namespace:
    """The options of a command-line benchmark: --rounds (8) and --out (its result file)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path, default=out)
    return parser.parse_args()


def child_env(tmp: Path) -> dict[str, str]:
    """The commands' environment: offline, with an embedding cache of their own in `tmp`."""
    return {**os.environ, "PROBEMBED_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1"}


def run_config(rounds: int, load_before: tuple[float, float, float]) -> dict:
    """What a run was made on: rounds, Python, cores, and the load average before and after
    (the machine may be shared)."""
    return {
        "rounds": rounds,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before_after": [load_before, os.getloadavg()],
    }


def commands(tmp: Path) -> dict[str, list[str]]:
    """The benchmarked commands, on a database of a few hashed documents made here."""
    pipeline = hashing_pipeline((64, 48)).save(tmp / "hash")
    docs = tmp / "docs.jsonl"
    docs.write_text(
        "".join(f'{{"id": "d{i}", "text": "python list number {i}"}}\n' for i in range(20))
    )
    db = str(tmp / "db")
    return {
        "setup": ["ingest", str(docs), "--db", db, "--pipeline", str(pipeline)],
        "collections": ["collections", "--db", db],
        "search": ["search", "sort a list", "--db", db],
        "encode": ["encode", "how do I sort a list?", "--pipeline", "default"],
    }


def main() -> None:
    """Make the database, run each command alternately in both variants, write the medians."""
    args = parsed_options(__doc__, OUT)
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        env = child_env(tmp)
        named = commands(tmp)
        run("frozen", named.pop("setup"), env)
        for name, command in named.items():
            run("frozen", command, env)  # warms the page cache and the embedding cache
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for i in range(args.rounds):
                for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
                    times[variant].append(run(variant, command, env))
            frozen, unfrozen = (statistics.median(times[v]) for v in VARIANTS)
            row = {
                "command": name,
                "median_frozen_s": frozen,
                "median_unfrozen_s": unfrozen,
                "saved_s": unfrozen - frozen,
                "ratio": frozen / unfrozen,
                "runs": times,
            }
            print(f"{name}: {unfrozen:.2f} s -> {frozen:.2f} s ({row['ratio']:.2f}x)", flush=True)
            rows.append(row)
    write_json(args.out, rows, run_config(args.rounds, load_before))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
