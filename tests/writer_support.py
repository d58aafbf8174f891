"""A writer in a process of its own, as on another machine: its own cache directory, so its
own write lock, and its own LanceDB connection (test_s3_store's concurrent-writer tests).

`pause_in` names the `Collection` method at whose first call the writer waits for the other
writer at a barrier: `_arrow` comes after the writer read which ids are stored and before it
commits, `_create` after it found no collection and before it makes one. Both writers are
then inside the window between their look and their commit at once, whatever the timing.
"""

from __future__ import annotations

import os
import traceback
from typing import Any


def ingest_as_another_machine(
    uri: str,
    options: dict[str, str],
    pipeline_dir: str,
    cache_dir: str,
    items: list[tuple[str, str]],
    batch_size: int,
    pause_in: str,
    barrier: Any,
    results: Any,
) -> None:
    """Ingest `items` (id, text) into collection "c" at `uri`; put (added, already stored)
    or the error's traceback on `results`."""
    os.environ["PROBEMBED_CACHE_DIR"] = cache_dir  # this "machine's" lock and mirror
    try:
        from probembed.pipeline import Pipeline
        from probembed.store import Database, Record, ingest
        from probembed.store.collection import Collection

        paused = False
        original = getattr(Collection, pause_in)

        def pausing(self: Collection, *args: Any, **kwargs: Any) -> Any:
            nonlocal paused
            if not paused:
                paused = True
                barrier.wait()
            return original(self, *args, **kwargs)

        setattr(Collection, pause_in, pausing)
        pipeline = Pipeline.load(pipeline_dir, cache=False)
        collection = Database(uri, create=True, storage_options=options).collection("c")
        records = [Record(doc_id, text) for doc_id, text in items]
        report = ingest(records, collection, pipeline, batch_size=batch_size)
        results.put((report.added, report.already_stored))
    except BaseException:  # the test reads it; a broken barrier frees the other writer
        barrier.abort()
        results.put(traceback.format_exc())
