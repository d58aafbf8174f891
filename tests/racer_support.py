"""One of two writers storing the same 200 ids in collection "c" at once
(test_store_durability): run as a script it is a process of its own that says "ready" and
starts once the go file exists; imported, the test's own process is the other writer."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

#: The ids d0 ... d199 each writer stores, with these texts.
TEXTS = [f"racing text number {i}" for i in range(200)]


def prepared(db: str, pipeline_dir: str) -> tuple[Any, Any, list[Any]]:
    """The collection (opened), the pipeline and the 20 batches of 10 an add or an upsert
    writes, encoded before the race: (collection, pipeline, batches)."""
    from probembed.pipeline import Pipeline
    from probembed.store import Database
    from probembed.store.rows import Batch, PipelineInfo

    pipe = Pipeline.load(pipeline_dir, cache=False)
    collection = Database(db).collection("c")
    batches = [
        Batch(
            [f"d{i}" for i in range(b, b + 10)],
            TEXTS[b : b + 10],
            [{}] * 10,
            pipe.encode(TEXTS[b : b + 10]),
            PipelineInfo.of(pipe),
        )
        for b in range(0, 200, 10)
    ]
    collection.count()
    return collection, pipe, batches


def race(collection: Any, pipe: Any, batches: list[Any], mode: str) -> str:
    """Write the 200 ids by `mode` (add, upsert or ingest); an ingest's "added stored"
    counts (every id lost to the other writer counts as already stored), else ""."""
    from probembed.store import Record, ingest

    if mode == "ingest":
        records = [Record(f"d{i}", t) for i, t in enumerate(TEXTS)]
        report = ingest(records, collection, pipe, batch_size=10)
        return f"{report.added} {report.already_stored}"
    for batch in batches:
        # an id the other writer stored first: refused, as it should be
        with contextlib.suppress(Exception):
            collection.upsert(batch) if mode == "upsert" else collection.add(batch)
    return ""


def main(db: str, pipeline_dir: str, go: str, mode: str) -> None:
    """Prepare, say "ready", wait for the go file, race, and print what `race` says."""
    ready = prepared(db, pipeline_dir)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    print(race(*ready, mode), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
