"""The Python documentation's topics (`pydoc_data.topics`) as text: what every machine with
Python has, read without the store, so the pipeline layer can fit its variance basis on it
(`variance_basis.reference_texts`) and the store can make its demo corpus of it
(`store.pydoc_corpus`)."""

from __future__ import annotations

import re
from collections.abc import Iterator

#: A blank line: what separates the rendered topics' paragraphs.
BLANK_LINE = re.compile(r"\n[ \t]*\n")


def topics() -> dict[str, str]:
    """The topic texts of this Python, or an error saying they are not installed."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:
        raise ImportError(
            "this Python has no pydoc_data.topics (some distributions split it off); "
            "install the full standard library, or give the demo a corpus with --data"
        ) from exc
    return topics


def paragraphs() -> Iterator[str]:
    """Every paragraph of the topics, topics in name order: text any machine with Python has."""
    source = topics()
    for name in sorted(source):
        yield from (p for p in BLANK_LINE.split(source[name]) if p.strip())
