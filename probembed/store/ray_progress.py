"""A Ray job's progress in texts: its actors count what they encode, the driver tells its bar.

Ray Data answers a batch only once it is whole, so a bar moved by the answers stood still
through each batch. Each actor instead adds every piece it encodes to `EncodedCount`, one
small actor per job, and a driver thread waits on the count and tells the bar each rise.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class EncodedCount:
    """The member-texts a job's actors have encoded, as a Ray actor of no CPUs: each actor
    adds a piece as it encodes it, the driver's watcher waits for the count to move."""

    def __init__(self) -> None:
        self.total, self.over = 0, False
        self._moved = asyncio.Event()

    async def add(self, units: int) -> None:
        """Count `units` more member-texts encoded."""
        self.total += units
        self._moved.set()

    async def past(self, seen: int) -> tuple[int, bool]:
        """The count once it is past `seen`, or the job is over; and whether it is."""
        while self.total <= seen and not self.over:
            self._moved.clear()
            await self._moved.wait()
        return self.total, self.over

    async def close(self) -> None:
        """The job is over: the watcher gets the last count and stops."""
        self.over = True
        self._moved.set()


@contextlib.contextmanager
def counted(tell: Callable[[int], None] | None) -> Iterator[Any]:
    """An `EncodedCount` for the job's actors (None without `tell`) and a thread telling
    `tell` each rise of it, until the job is over (its last count told, whole, by then)."""
    if tell is None:
        yield None
        return
    import ray

    counter: Any = ray.remote(num_cpus=0)(EncodedCount).remote()  # typed as the class

    def watch() -> None:
        seen, over = 0, False
        while not over:
            try:
                total, over = ray.get(counter.past.remote(seen))
            except ray.exceptions.RayError:  # the counter's node went: only the bar stops
                return
            tell(total - seen)
            seen = total

    watcher = threading.Thread(target=watch, name="probembed-ray-progress", daemon=True)
    watcher.start()
    try:
        yield counter
    finally:
        counter.close.remote()
        watcher.join()
