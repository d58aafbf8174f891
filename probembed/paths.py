"""Where the benchmark data lives: one rule for the CLI, the tests, the benchmarks and scripts;
and a user's `~` read as a shell would.

Dependency-free on purpose, so that tests/conftest.py and every script can import it cheaply.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable that points at the benchmark data (sts/, retrieval/, pairs/, ...).
DATASETS_ENV = "PROBEMBED_DATASETS"
#: The folder holding the probembed package: the repository root in a source checkout
#: (it holds pyproject.toml), site-packages in an installed wheel (it does not).
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def datasets_dir() -> Path:
    """$PROBEMBED_DATASETS if set, else shared/datasets beside the checkout (or the CWD).

    In a source checkout the data sits beside the repository (../shared/datasets from its
    root), wherever the command runs from. An installed package has no checkout to stand
    beside, so there it is ../shared/datasets from the working directory, which is what the
    Makefile always used. The directory may be absent: callers check and fall back or skip.
    """
    override = os.environ.get(DATASETS_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    if (_PACKAGE_PARENT / "pyproject.toml").is_file():
        return _PACKAGE_PARENT.parent / "shared" / "datasets"
    return Path("..", "shared", "datasets")


def home_expanded(value: str | os.PathLike, what: str) -> Path:
    """`value` with a leading `~` expanded as a shell would: a name from a config file, a
    quoted `'~/p'` or Python reached no shell, and was looked for under a folder named `~`."""
    try:
        return Path(value).expanduser()
    except RuntimeError as exc:  # no home directory to expand to, or ~user unknown
        raise ValueError(f"{what} {str(value)!r}: {exc}") from None
