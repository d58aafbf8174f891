"""The command line (`probembed`); its entry point reports a missing extra in one line."""

from __future__ import annotations

import gc
import sys

from probembed.extras import MissingExtraError, require


def main() -> None:
    """The `probembed` console script: a one-line install hint instead of an import traceback,
    exit 2 as a command's own missing extra (sys.exit of a message gave 1, a crash's status)."""
    try:
        require("cli", "the probembed command")
        from probembed.interfaces.cli import app
    except MissingExtraError as exc:
        print(f"probembed: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        app()
    finally:
        freeze_for_exit()


def freeze_for_exit() -> None:
    """Collect a finished command's garbage (its finalisers run), then freeze what is left
    (`gc.freeze`, as the server does once loaded): the interpreter's shutdown collections
    then skip the loaded libraries' objects, which they traversed several times over:
    0.16-0.27 s of a light command's exit, 0.72 s of one that loaded the default pipeline
    (`benchmarks/cli_exit.py`). What is left is still freed by reference counts at
    shutdown; only objects in reference cycles are no longer collected then, whose
    finalisers Python never promised to run at exit (every file we write is closed by a
    `with`, every temporary folder by its atexit hook)."""
    gc.collect()
    gc.freeze()
