"""Progress bars for long work, written to stderr so stdout stays clean for data: a live
bar where stderr is a terminal, plain lines elsewhere.

rich is imported only when a bar is shown, so encoding with progress off needs only the core.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

T = TypeVar("T")
R = TypeVar("R")


#: Seconds between the lines progress writes where stderr is not a terminal.
LINE_SECONDS = 30.0


class _Lines:
    """Progress where stderr is not a terminal (a log file, a container's log): a plain line
    every LINE_SECONDS and one at the end, where a live bar shows only its final state."""

    def __init__(self, description: str, total: int) -> None:
        self._description, self._total, self._done, self._shown = description, total, 0, -1
        self._start = self._last = time.monotonic()

    def advance(self, amount: int) -> None:
        """Count `amount` more items; write a line when LINE_SECONDS have passed."""
        self._done += amount
        now = time.monotonic()
        if now - self._last >= LINE_SECONDS:
            self._write(now)

    def finish(self) -> None:
        """The last line: everything counted (unless the last interval's line said it)."""
        if self._done != self._shown:
            self._write(time.monotonic())

    def _write(self, now: float) -> None:
        """One line: done of total, elapsed and the time left at the rate so far."""
        self._last, self._shown, elapsed = now, self._done, now - self._start
        left = elapsed * (self._total - self._done) / self._done if self._done else None
        eta = "?" if left is None else _clock(left)
        _line(
            f"{self._description}: {self._done:,}/{self._total:,} "
            f"elapsed {_clock(elapsed)} eta {eta}"
        )


class WaitLines:
    """A wait for another's lock, where progress is shown (a terminal or a log alike): a line
    every LINE_SECONDS while it lasts, so a command that waits is not taken for a hung one,
    and one as it ends, saying how long it took."""

    def __init__(self, description: str, limit: float | None) -> None:
        self._description, self._limit, self._shown = description, limit, 0.0

    def still(self, seconds: float) -> None:
        """Seconds waited so far: a line when LINE_SECONDS have passed since the last."""
        if seconds - self._shown >= LINE_SECONDS:
            self._shown = seconds
            limit = "" if self._limit is None else f" of at most {_clock(self._limit)}"
            _line(f"still {self._description}: {_clock(seconds)}{limit}")

    def ended(self, seconds: float, then: str) -> None:
        """The wait ended after `seconds`: say so, and what comes next."""
        _line(f"done {self._description} after {_clock(seconds)}: {then}")


def _line(text: str) -> None:
    """One plain line on stderr, written at once."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _clock(seconds: float) -> str:
    """Seconds as h:mm:ss."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal, where a live display redraws itself: its descriptor
    asked, not rich's `is_terminal`, which FORCE_COLOR or TTY_COMPATIBLE (set in CI for
    colour) turn on for a log file, and 1,000 rows' bar wrote 72 KB of redraws there."""
    try:
        return os.isatty(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture), closed
        return False


class _Bar:
    """A handle that advances one task, or does nothing when progress is off."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress, self._task = progress, task

    def advance(self, amount: int) -> None:
        """Move the bar forward by `amount` items."""
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)


@contextmanager
def progress_bar(description: str, total: int, enabled: bool = True) -> Iterator[_Bar | _Lines]:
    """A counting bar with ETA on stderr (lines every LINE_SECONDS where stderr is not a
    terminal); a no-op when disabled."""
    if not enabled:
        yield _Bar(None, None)
        return
    if not stderr_is_terminal():
        lines = _Lines(description, total)
        yield lines
        lines.finish()
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
    console = Console(stderr=True)
    with Progress(*columns, console=console, transient=False) as progress:
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
