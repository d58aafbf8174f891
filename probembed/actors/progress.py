"""A Ray job's progress in texts: its actors count what they encode, the driver tells its bar.

Ray Data answers a batch only once it is whole, so a bar moved by the answers stood still
through each batch. Each actor instead adds every piece it encodes to `EncodedCount`, one
small actor per job, without waiting for it; a driver thread takes what was added and tells
the bar, through `BatchTally`, which holds each batch to its own size. A bar never fails a
job: if the count is lost the bar stops moving until each batch is fused.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any


class EncodedCount:
    """The member-texts a job's actors have encoded, per batch, as a Ray actor of no CPUs on
    the driver's node: each actor adds a piece as it encodes it, the driver's watcher takes
    what was added."""

    def __init__(self) -> None:
        self.added: Counter[int] = Counter()
        self.over = False
        self._moved = asyncio.Event()

    async def add(self, start: int, units: int) -> None:
        """Count `units` more member-texts encoded of the batch at `start`."""
        self.added[start] += units
        self._moved.set()

    async def taken(self) -> tuple[dict[int, int], bool]:
        """What was added since the last take, by batch, once there is some or the job is
        over; and whether it is."""
        while not self.added and not self.over:
            self._moved.clear()
            await self._moved.wait()
        added, self.added = dict(self.added), Counter()
        return added, self.over

    async def close(self) -> None:
        """The job is over: the watcher gets the last count and stops."""
        self.over = True
        self._moved.set()


class BatchTally:
    """Member-texts told a bar per batch, never more than the batch holds: Ray retries the
    batch of an actor that died, whose pieces are then counted again. The actors' count of a
    batch stops at what it sends; the rest (cached, borrowed, or not yet counted) is told
    when the batch is fused, so the bar ends at every text, once."""

    def __init__(self, tell: Callable[[int], None], sends: Mapping[int, int]) -> None:
        self._tell, self._sends = tell, sends
        self._told: Counter[int] = Counter()
        self._fused: set[int] = set()
        self._lock = threading.Lock()  # the watcher and the driver both tell

    def encoded(self, start: int, units: int) -> None:
        """The batch's actors encoded `units` more member-texts: told up to what it sends."""
        with self._lock:
            more = min(units, self._sends.get(start, 0) - self._told[start])
            if start not in self._fused and more > 0:
                self._told[start] += more
                self._tell(more)

    def fused(self, start: int, units: int) -> None:
        """The batch, of `units` member-texts, is fused: tell what was not told of it."""
        with self._lock:
            self._fused.add(start)
            self._tell(units - self._told.pop(start, 0))


@contextlib.contextmanager
def counted(tally: BatchTally | None) -> Iterator[Any]:
    """An `EncodedCount` for the job's actors (None without `tally`) and a thread telling
    `tally` what they add, until the job is over or the count is lost."""
    if tally is None:
        yield None
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # on the driver's node: it goes only with the driver (whose bar it feeds)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    count = ray.remote(EncodedCount).options(num_cpus=0, scheduling_strategy=here)
    counter: Any = count.remote()  # typed as the class

    def watch() -> None:
        over = False
        while not over:
            try:
                added, over = ray.get(counter.taken.remote())
            except ray.exceptions.RayError:  # the counter went: only the bar stops
                return
            for start, units in added.items():
                tally.encoded(start, units)

    watcher = threading.Thread(target=watch, name="probembed-ray-progress", daemon=True)
    watcher.start()
    try:
        yield counter
    finally:
        counter.close.remote()
        watcher.join()
