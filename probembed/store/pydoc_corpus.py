"""The Python documentation that ships with CPython as a corpus: `make run` with no data.

`pydoc_data.topics` (what `help("try")` prints) holds about 80 topics of the language
reference, some 465 kB of real text, on every machine with Python and no download. Each topic
is one document, cut by `probembed.chunking` like any other (store/chunked.py): its
underlined headings are its sections (the first is the topic's title), so every passage keeps
its topic (`doc_id`), its offsets into the topic's text and its heading path.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from probembed import pydoc_text
from probembed.chunking import ChunkSettings, Section
from probembed.store.formats import SourceDocument
from probembed.store.readers import Problem, Record

#: Characters that underline a reStructuredText heading in the rendered topics.
_UNDERLINE = frozenset("*=-~^")


def read_pydoc_topics(
    topics: Collection[str] | None = None,
    pipeline: Any | None = None,
    chunking: ChunkSettings | None = None,
) -> list[Record]:
    """Passages of the bundled Python docs (all topics, or the named ones), ids `topic#n`.

    Chunks fit `chunking` (default 256 tokens, 32 of overlap) counted with the pipeline's
    tokenizers and capped at its shortest member's limit; without a pipeline, tokens are
    words, as a model without a tokenizer counts them (the hashing models). Metadata: `topic`
    and chunked ingest's (`doc_id`, `chunk`, `start`, `end`, `title`, `heading`, `doc_hash`).
    A passage whose text an earlier topic already gave is left out.
    """
    from probembed.store.chunked import chunk_records  # pyarrow, FAISS: a topic alone needs none

    source = pydoc_text.topics()
    names = list(source) if topics is None else list(topics)
    unknown = [name for name in names if name not in source]
    if unknown:
        raise ValueError(f"unknown pydoc topic(s) {unknown}; known: {', '.join(sorted(source))}")
    settings = chunking or ChunkSettings()
    count = _words
    if pipeline is not None:
        settings, count = settings.capped(pipeline.max_tokens), pipeline.count_tokens
    records: list[Record] = []
    seen: set[str] = set()
    for name in names:
        chunks = chunk_records(topic_document(name, source[name]), count, settings)
        if isinstance(chunks, Problem):  # a topic with no text: this Python's docs are broken
            raise ValueError(str(chunks))
        # topics repeat each other's sections (`compound` holds `try`): a passage read twice
        # would fill two places of every answer and halve its confidence
        records += [chunk for chunk in chunks if chunk.text not in seen]
        seen.update(chunk.text for chunk in chunks)
    return records


def _words(texts: Sequence[str]) -> list[int]:
    """Whitespace-separated words per text: the tokens of a model without a tokenizer."""
    return [len(text.split()) for text in texts]


def topic_document(topic: str, raw: str) -> SourceDocument:
    """One topic as a document: its paragraphs, each underlined heading kept as one line
    (the underline dropped) that opens a section; the first heading is the title."""
    parts: list[str] = []
    starts: list[tuple[int, str]] = []
    at = 0
    for block in pydoc_text.BLANK_LINE.split(raw.strip()):
        block = block.strip("\n")
        if not block.strip():
            continue
        lines = block.split("\n")
        if len(lines) == 2 and len(lines[1]) >= 3 and set(lines[1]) <= _UNDERLINE:
            block = lines[0].strip()
            starts.append((at, block))
        parts.append(block)
        at += len(block) + 2
    text = "\n\n".join(parts)
    title = starts[0][1] if starts else topic
    outline = _outline(starts, len(text))
    return SourceDocument(
        topic,
        text,
        f"pydoc_data.topics[{topic!r}]",
        "pydoc",
        title=title,
        metadata={"topic": topic},
        outline=tuple(outline),
    )


def _outline(starts: list[tuple[int, str]], end: int) -> list[Section]:
    """Sections from heading offsets: the title's, then (title, heading) for each other."""
    sections: list[Section] = []
    if not starts or starts[0][0] > 0:
        sections.append(Section((), 0, starts[0][0] if starts else end))
    title = starts[0][1] if starts else ""
    bounds = [*(s for s, _ in starts[1:]), end]
    for (start, heading), stop in zip(starts, bounds, strict=True):
        path = (title,) if start == starts[0][0] else (title, heading)
        sections.append(Section(path, start, stop))
    return sections
