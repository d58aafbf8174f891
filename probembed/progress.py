"""Progress bars for long work, written to stderr so stdout stays clean for data.

rich is imported only when a bar is shown, so encoding with progress off needs only the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.progress import Progress

T = TypeVar("T")
R = TypeVar("R")


class _Bar:
    """A handle that advances one task, or does nothing when progress is off."""

    def __init__(self, progress: Progress | None, task: int | None) -> None:
        self._progress, self._task = progress, task

    def advance(self, amount: int) -> None:
        """Move the bar forward by `amount` items."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)


@contextmanager
def progress_bar(description: str, total: int, enabled: bool = True) -> Iterator[_Bar]:
    """A counting bar with ETA on stderr; a no-op when disabled."""
    if not enabled:
        yield _Bar(None, None)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        yield _Bar(progress, progress.add_task(description, total=total))


def map_chunks(
    fn: Callable[[list[T]], R], items: Sequence[T], label: str, enabled: bool, chunk: int = 256
) -> list[R]:
    """Apply fn to consecutive chunks of items, with a bar when there is more than one chunk."""
    results = []
    with progress_bar(label, len(items), enabled and len(items) > chunk) as bar:
        for start in range(0, len(items), chunk):
            part = list(items[start : start + chunk])
            results.append(fn(part))
            bar.advance(len(part))
    return results
