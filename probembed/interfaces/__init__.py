"""The command line (`probembed`); its entry point reports a missing extra in one line."""

from __future__ import annotations

import sys

from probembed.extras import MissingExtraError, require


def main() -> None:
    """The `probembed` console script: a one-line install hint instead of an import traceback."""
    try:
        require("cli", "the probembed command")
        from probembed.interfaces.cli import app
    except MissingExtraError as exc:
        sys.exit(f"probembed: {exc}")
    app()
