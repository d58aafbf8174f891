"""Progress bars for long work, written to stderr so stdout stays clean for data."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


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
