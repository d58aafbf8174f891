"""SIGTERM as a stop the work unwinds from, as Ctrl-C's KeyboardInterrupt is: the `finally`
blocks of a write (its undo pin removed, a stopped streamed file put back) run before the
process ends. Ended by the signal's default action instead, a chunked ingest left its
`probembed-undo-...` tag, which held every later version from every prune for a week."""

from __future__ import annotations

import signal
from typing import Any, NoReturn


class Terminated(BaseException):
    """SIGTERM, raised in the main thread by `raise_terminated`: `except Exception` lets it
    pass, as it lets KeyboardInterrupt pass."""


class Kept(str):
    """A note (PEP 678) on a stop (Ctrl-C, SIGTERM) saying what the write it stopped keeps:
    nothing, where it came before the write wrote anything (it waited for another's lock,
    a model loaded, the input was read), else how much. Said in place of a front door's
    general line, where "committed batches are kept" told of batches never written."""


def kept_note(stop: BaseException) -> str | None:
    """What a stop's first `Kept` note says (the one nearest the stop), or None: none told."""
    return next((n for n in getattr(stop, "__notes__", ()) if isinstance(n, Kept)), None)


def raise_terminated(signum: int, frame: Any) -> None:
    """The SIGTERM handler that unwinds the work; SIGTERM's default action is back at once,
    so a second SIGTERM ends the process without waiting for the unwinding."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


def end_by_sigterm() -> NoReturn:
    """End the process as SIGTERM's default action does (status 143), once the work has
    unwound: a parent reads it as ended by the signal, as before."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)
    raise SystemExit(128 + signal.SIGTERM)  # SIGTERM blocked in this thread (Ray's)
