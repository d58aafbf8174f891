"""The command line (`probembed`); its entry point reports a missing extra in one line."""

from __future__ import annotations

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
    app()
