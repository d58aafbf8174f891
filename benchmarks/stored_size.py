"""Bytes per stored item of the default pipeline, with and without its zero-weight member.

    python benchmarks/stored_size.py [--n 2000]

The first n SciFact documents are ingested into a fresh LanceDB collection twice: with the
shipped `default` (minilm, paraphrase-l3, wordllama) and with the four-member ensemble it was
tuned from, where `use` has prior 0 (p = (0.5, 0.4, 0, 0.1), T = inf): `use` then adds 512
zero dimensions to every mean and variance. The size of a stored row does not depend on the
values of that zero block, so `use` is fitted here on a small seeded pair sample only.
Writes benchmarks/results/stored_size.json (`collection.stats().bytes_per_item`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
from pathlib import Path

from probembed.encoders import get_encoder
from probembed.evaluation.recipes import sample_pairs
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig, Pipeline
from probembed.store import Database, ingest, read_records
from probembed.uncertainty import make_estimator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "stored_size.json"
SCIFACT = datasets_dir() / "retrieval" / "scifact"


def with_zero_weight_use(default: Pipeline) -> Pipeline:
    """The shipped default with `use` put back in third place at prior 0, as tuning left it."""
    use = make_estimator("laplace", get_encoder("use"), seed=0)
    use.fit(sample_pairs(datasets_dir() / "pairs", 400))
    members = [*default.members[:2], use, default.members[2]]
    fusion = FusionConfig("uec", "concat", float("inf"), prior=(0.5, 0.4, 0.0, 0.1))
    return Pipeline(members, fusion, default.score, "default+use", cache=default.cache or False)


def bytes_per_item(pipe: Pipeline, records: list) -> dict:
    """Ingest the records into a new collection and read its size back."""
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(tmp, create=True).collection("scifact")
        ingest(records, collection, pipe, progress=True)
        stats = collection.stats()
        return {"dim": stats.dim, "count": stats.count, "bytes_per_item": stats.bytes_per_item}


def main() -> None:
    """Measure both and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="SciFact documents to ingest")
    args = parser.parse_args()
    records = list(itertools.islice(read_records(SCIFACT), args.n))
    default = Pipeline.load("default")
    rows = {
        "default with use at prior 0": bytes_per_item(with_zero_weight_use(default), records),
        "default (zero-weight member dropped)": bytes_per_item(default, records),
    }
    OUT.write_text(json.dumps({"n": args.n, "dataset": "scifact", "rows": rows}, indent=1) + "\n")
    for label, row in rows.items():
        print(f"{label}: {row}")


if __name__ == "__main__":
    main()
