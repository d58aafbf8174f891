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
