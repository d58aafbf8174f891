"""What shipping the variance basis with a pipeline saves a fresh process that creates its
first collection: `retrieval` as shipped against a copy of its directory without the file.

    python benchmarks/first_collection.py [--rounds 3]

Each run is a fresh process with an empty embedding cache (PROBEMBED_CACHE_DIR a new folder)
and a new database: it loads the pipeline (`Pipeline.load`) and creates an empty collection
with it (`Collection.create`, what `POST /v1/collections` and a first ingest's header do).
"shipped" loads the built-in by name, whose `variance_basis.json` the collection's header
takes; "fitted" loads a copy of the built-in's directory without that file (the same
fingerprint: a directory saved before the file existed), so the create first fits the basis
by encoding 2 x REFERENCE_ROWS reference texts, loading the models to do so. "derived" loads
the built-in and creates the collection with a pipeline made from its members under another
score and collection adaptation (the same fingerprint, as tuning code and a collection's kept
copy make one), which takes the verdict the loaded built-in kept. The variants run
alternately, `--rounds` times each. Reported per variant: the medians of the load's and the
create's wall seconds (timed inside the child), of the child's CPU seconds (user + system,
its rusage: the machine may be shared), the texts the embedding cache missed (what was
encoded) and whether the variants' headers held the same basis widths; then the ratios
(shipped / fitted). Writes benchmarks/results/first_collection.json.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cli_exit import child_env, parsed_options, run_config

from probembed.evaluation.report import write_json
from probembed.pipeline import builtin_dir
from probembed.variance_basis import BASIS_FILE

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "first_collection.json"
PIPELINE = "retrieval"
#: One run: load the pipeline, create an empty collection, say the times and what was encoded.
CHILD = """
import json, sys, time
from probembed.pipeline import AdaptConfig, Pipeline, ScoreConfig
from probembed.store import Database
start = time.perf_counter()
pipe = Pipeline.load(sys.argv[1])
if sys.argv[3] == "derived":
    score, adapt = ScoreConfig("uec", 4.0), AdaptConfig(gamma=5.0)
    pipe = Pipeline(pipe.members, pipe.fusion, score, "derived", pipe.cache, adapt=adapt)
loaded = time.perf_counter()
collection = Database(sys.argv[2], create=True).collection("first")
collection.create(pipe)
created = time.perf_counter()
basis = collection.variance_basis
print(json.dumps({"load_s": loaded - start, "create_s": created - loaded,
                  "encoded": pipe.cache.stats.misses, "blocks": basis and basis.blocks}))
"""
VARIANTS = ("shipped", "fitted", "derived")


def run(variant: str, source: str, tmp: Path, i: int) -> dict:
    """One fresh process's times, CPU seconds and encoded texts."""
    env = child_env(tmp / f"run{i}")  # an empty embedding cache of its own
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, source, str(tmp / f"db{i}"), variant],
        capture_output=True,
        text=True,
        env=env,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{source}:\n{done.stderr}")
    told = json.loads(done.stdout.splitlines()[-1])
    told["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return told


def main() -> None:
    """Run both variants alternately in fresh processes; write the medians and ratios."""
    args = parsed_options(__doc__, OUT)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        copy = Path(shutil.copytree(builtin_dir() / PIPELINE, tmp / PIPELINE))
        (copy / BASIS_FILE).unlink()
        sources = {"shipped": PIPELINE, "fitted": str(copy), "derived": PIPELINE}
        for i in range(args.rounds):
            for variant in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
                made = sum(len(r) for r in runs.values())  # a folder and database per run
                runs[variant].append(run(variant, sources[variant], tmp, made))
                print(variant, runs[variant][-1], flush=True)
    medians = {
        v: {k: statistics.median(r[k] for r in runs[v]) for k in ("load_s", "create_s", "cpu_s")}
        for v in VARIANTS
    }
    shipped, fitted = medians["shipped"], medians["fitted"]
    row = {
        "pipeline": PIPELINE,
        "median": medians,
        "ratio_load_and_create": (shipped["load_s"] + shipped["create_s"])
        / (fitted["load_s"] + fitted["create_s"]),
        "ratio_cpu": shipped["cpu_s"] / fitted["cpu_s"],
        "encoded": {v: sorted({r["encoded"] for r in runs[v]}) for v in VARIANTS},
        "same_widths": len({tuple(r["blocks"]) for v in VARIANTS for r in runs[v]}) == 1,
        "runs": runs,
    }
    print(json.dumps({k: row[k] for k in row if k != "runs"}, indent=1))
    write_json(args.out, [row], run_config(args.rounds, load_before))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
