"""A benchmark asked for its help prints it and runs nothing (each takes minutes to hours)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_retrieval_help_prints_its_options_and_runs_nothing():
    """`python benchmarks/retrieval.py --help` read no arguments: it started scoring SciFact
    ("scifact: 300 queries, ...") and wrote benchmarks/results/retrieval.json at its end."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "retrieval.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,  # only a guard: the run it started took far longer
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: retrieval.py [-h] [--out OUT]"), done.stdout
    assert "Which built-in should index documents" in done.stdout
    assert "scifact:" not in done.stdout  # nothing scored


def test_make_bench_runs_every_benchmark_or_says_why_not():
    """`make bench` refreshes every result the docs quote: a script missing from its recipe
    (five were: cli_exit.py, first_collection.py and three LODO studies) kept figures no
    `make bench` re-measured. A script left out on purpose is named in a comment saying why."""
    makefile = (BENCHMARKS.parent / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    comments = "\n".join(line for line in makefile.splitlines() if line.startswith("#"))
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py"))
    run = [s for s in scripts if f"benchmarks/{s}" in recipe]
    unlisted = [s for s in scripts if s not in run and s not in comments]
    assert unlisted == [], f"benchmarks neither in `make bench` nor excused: {unlisted}"
    assert len(run) > 30  # the recipe was found and read
