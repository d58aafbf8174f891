"""A writer as on another machine: its own cache directory, so its own write lock, and its
own LanceDB connection (test_s3_store's concurrent-writer tests). One writer of a race is a
process of its own (`ingest_as_another_machine`), the other the test's own process
(`paused_ingest` under `pausing_at`).

`pause_in` names the `Collection` method at whose first call the writer waits for the other
writer at a barrier: `_arrow` comes after the writer read which ids are stored and before it
commits, `_create` after it found no collection and before it makes one. Both writers are
then inside the window between their look and their commit at once, whatever the timing.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def pausing_at(pause_in: str, barrier: Any) -> Iterator[None]:
    """While inside, the first call of `Collection.<pause_in>` waits at `barrier`; a writer
    that fails before it breaks the barrier, so the other one is not left waiting."""
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
    try:
        yield
    except BaseException:
        barrier.abort()
        raise
    finally:
        setattr(Collection, pause_in, original)


def paused_ingest(
    uri: str,
    options: dict[str, str],
    pipeline_dir: str,
    items: list[tuple[str, str]],
    batch_size: int,
) -> tuple[int, int]:
    """Ingest `items` (id, text) into collection "c" at `uri` (in `pausing_at`, it pauses
    there); its (added, already stored)."""
    from probembed.pipeline import Pipeline
    from probembed.store import Database, Record, ingest

    pipeline = Pipeline.load(pipeline_dir, cache=False)
    collection = Database(uri, create=True, storage_options=options).collection("c")
    records = [Record(doc_id, text) for doc_id, text in items]
    report = ingest(records, collection, pipeline, batch_size=batch_size)
    return report.added, report.already_stored


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
    """`paused_ingest` in a process of its own (`cache_dir` its machine's cache), paused at
    `pause_in`; put (added, already stored) or the error's traceback on `results`."""
    os.environ["PROBEMBED_CACHE_DIR"] = cache_dir  # this "machine's" lock and mirror
    try:
        with pausing_at(pause_in, barrier):
            results.put(paused_ingest(uri, options, pipeline_dir, items, batch_size))
    except BaseException:  # the test reads it
        results.put(traceback.format_exc())
