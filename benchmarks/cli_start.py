"""What the store's lazy import saves the commands that open no database: each command's CPU
time run as `probembed` runs it, against the same command after the store's old eager import.

    python benchmarks/cli_start.py [--rounds 8]

`probembed.store` imported every submodule, and so LanceDB, pyarrow and FAISS, at its own
import; now each public name is imported on first use and LanceDB when a database is opened.
The "eager" variant puts the old import back before the command runs: every public name
(`from probembed.store import *`, every submodule the package imported) and
`lancedb.background_loop`, which `store/upkeep.py` imported at its top: the same 1,130
modules the old `import probembed.store` loaded. The commands: `encode --file` and
`encode -` (stdin) with a saved two-model hashing pipeline (their input is read through
`probembed.store.formats`), `serve` refusing an option (it imported `store.errors` and
`store.upkeep` first) and `search` refusing a --db where there is none. Each imported the
whole store before the change, so the eager variant is what it cost then; a command that
imported no store module (`encode TEXT`) would only pay the forced import here, and is left
out. The variants run alternately, `--rounds` times each, in fresh processes; each run's CPU
time (user + system, the child's own rusage) is taken, not its wall time, since the machine
may be shared. Reported per command: the median of each variant, their ratio (lazy / eager)
and difference, every run's time, which of lancedb, pyarrow and faiss each variant had
loaded at its exit, and whether both variants printed the same output and exit status (the
change must not alter either).
Writes benchmarks/results/cli_start.json.
"""

from __future__ import annotations

import ast
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from cli_exit import child_env, parsed_options, run_config

from probembed.evaluation.recipes import hashing_pipeline
from probembed.evaluation.report import write_json

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cli_start.json"
#: The console script's own entry point; "eager" first imports the store as it used to be.
CHILD = """
import atexit, os, sys
LIBRARIES = ("lancedb", "pyarrow", "faiss")
atexit.register(lambda: os.write(2, f"\\n{[m for m in LIBRARIES if m in sys.modules]}".encode()))
if sys.argv[1] == "eager":
    import lancedb.background_loop
    from probembed.store import *
sys.argv = ["probembed", *sys.argv[2:]]
from probembed.interfaces import main
main()
"""
VARIANTS = ("lazy", "eager")


class Command(NamedTuple):
    """A benchmarked command: its arguments, its stdin and the exit status it ends with."""

    args: list[str]
    stdin: str = ""
    status: int = 0


class Run(NamedTuple):
    """One run's CPU seconds, what it printed and the store's libraries it had loaded."""

    cpu: float
    said: tuple[int, str, str]
    loaded: tuple[str, ...]


def run(variant: str, command: Command, env: dict[str, str]) -> Run:
    """One command in a fresh process: its CPU seconds (user + system) and its output; an
    unexpected exit status stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, variant, *command.args],
        input=command.stdin,
        capture_output=True,
        text=True,
        env=env,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != command.status:
        raise SystemExit(f"probembed {' '.join(command.args)} ({variant}):\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    stderr, _, loaded = done.stderr.rpartition("\n")  # CHILD's last line
    return Run(cpu, (done.returncode, done.stdout, stderr), tuple(ast.literal_eval(loaded)))


def commands(tmp: Path) -> dict[str, Command]:
    """The benchmarked commands, on a saved hashing pipeline and a small text file made here."""
    pipeline = str(hashing_pipeline((64, 48)).save(tmp / "hash"))
    lines = "".join(f"how do I sort list number {i}?\n" for i in range(20))
    texts = tmp / "texts.txt"
    texts.write_text(lines, encoding="utf-8")
    return {
        "encode --file": Command(["encode", "--file", str(texts), "--pipeline", pipeline]),
        "encode - (stdin)": Command(["encode", "-", "--pipeline", pipeline], stdin=lines),
        "serve --max-inputs 0": Command(["serve", "--max-inputs", "0"], status=2),
        "search --db (none there)": Command(
            ["search", "sort a list", "--db", str(tmp / "none")], status=2
        ),
    }


def measured(name: str, command: Command, rounds: int, env: dict[str, str]) -> dict:
    """A command's runs in both variants, alternated, and their medians."""
    run("lazy", command, env)  # warms the page cache and the embedding cache
    runs: dict[str, list[Run]] = {v: [] for v in VARIANTS}
    for i in range(rounds):
        for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
            runs[variant].append(run(variant, command, env))
    lazy, eager = (statistics.median(r.cpu for r in runs[v]) for v in VARIANTS)
    said = {r.said for v in VARIANTS for r in runs[v]}
    return {
        "command": name,
        "args": command.args,
        "median_lazy_cpu_s": lazy,
        "median_eager_cpu_s": eager,
        "saved_cpu_s": eager - lazy,
        "ratio": lazy / eager,
        "same_output": len(said) == 1,
        "loaded": {
            v: [list(seen) for seen in sorted({r.loaded for r in runs[v]})] for v in VARIANTS
        },
        "cpu_s": {v: [r.cpu for r in runs[v]] for v in VARIANTS},
    }


def main() -> None:
    """Make the pipeline, run each command alternately in both variants, write the medians."""
    args = parsed_options(__doc__, OUT)
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        env = child_env(tmp)
        for name, command in commands(tmp).items():
            row = measured(name, command, args.rounds, env)
            print(
                f"{name}: {row['median_eager_cpu_s']:.2f} s -> {row['median_lazy_cpu_s']:.2f} s"
                f" CPU ({row['ratio']:.2f}x), same output: {row['same_output']}",
                flush=True,
            )
            rows.append(row)
    write_json(args.out, rows, run_config(args.rounds, load_before))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
