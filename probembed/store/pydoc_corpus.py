"""The Python documentation that ships with CPython as a corpus: `make run` with no data.

`pydoc_data.topics` (what `help("try")` prints) holds about 80 topics of the language
reference, some 465 kB of real text, on every machine with Python and no download. Each topic
is cut into passages of whole paragraphs; each passage keeps its topic and section.

Paragraph packing is a stand-in: when probembed gains real chunking, this corpus moves onto it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator

from probembed.store.readers import Record

#: Passage budget in characters, about the 256-token window of minilm and paraphrase-l3, so
#: little text is cut off; it gives about 590 passages (a few minutes to encode on 2 cores).
PASSAGE_CHARS = 1000
#: Characters that underline a reStructuredText heading in the rendered topics.
_UNDERLINE = frozenset("*=-~^")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def read_pydoc_topics(
    topics: Collection[str] | None = None, max_chars: int = PASSAGE_CHARS
) -> list[Record]:
    """Passages of the bundled Python docs (all topics, or the named ones), ids `topic#n`.

    Consecutive paragraphs of one section are packed up to `max_chars`; a paragraph longer than
    that stays whole (the encoders truncate it). Metadata: `topic`, `title`, `section`.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be a positive number of characters, got {max_chars}")
    source = _topics()
    names = list(source) if topics is None else list(topics)
    unknown = [name for name in names if name not in source]
    if unknown:
        raise ValueError(f"unknown pydoc topic(s) {unknown}; known: {', '.join(sorted(source))}")
    return [record for name in names for record in _passages(name, source[name], max_chars)]


def _topics() -> dict[str, str]:
    """The topic texts of this Python, or an error saying they are not installed."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:
        raise ImportError(
            "this Python has no pydoc_data.topics (some distributions split it off); "
            "install the full standard library, or give the demo a corpus with --data"
        ) from exc
    return topics


def _passages(topic: str, text: str, max_chars: int) -> Iterator[Record]:
    """One topic's passages: paragraphs packed per section, headed by title and section."""
    title: str | None = None
    section, packed, size, n = "", [], 0, 0
    for paragraph, heading in _paragraphs(text):
        if packed and (heading is not None or size + len(paragraph) > max_chars):
            yield _record(topic, n, title or topic, section, packed)
            n, packed, size = n + 1, [], 0
        if heading is None:
            packed.append(paragraph)
            size += len(paragraph) + 2
        elif title is None:
            title = heading
        else:
            section = heading
    if packed:
        yield _record(topic, n, title or topic, section, packed)


def _paragraphs(text: str) -> Iterator[tuple[str, str | None]]:
    """(paragraph, None) for text, ("", heading) for an underlined heading."""
    for block in _BLANK_LINE.split(text.strip()):
        block = block.strip("\n")
        if not block.strip():
            continue
        lines = block.split("\n")
        if len(lines) == 2 and len(lines[1]) >= 3 and set(lines[1]) <= _UNDERLINE:
            yield "", lines[0].strip()
        else:
            yield block, None


def _record(topic: str, n: int, title: str, section: str, packed: list[str]) -> Record:
    """A passage whose text starts with where it stands, as a BEIR title would."""
    where = f"{title}: {section}" if section else title
    body = "\n\n".join(packed)
    metadata = {"topic": topic, "title": title, "section": section}
    return Record(f"{topic}#{n}", f"{where}\n\n{body}", metadata, f"pydoc_data.topics[{topic!r}]")
