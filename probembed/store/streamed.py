"""Text and Markdown files too large to hold: checked in one streaming pass, chunked in another.

A file over `STREAM_BYTES` is never read whole. The first pass (`scan_file`) reads it block by
block, hashes its bytes (the hash it would get read whole, so switching paths re-embeds
nothing), decodes it with an incremental UTF-8 decoder (a bad byte is reported with its
offset, as for a file read whole), checks that it holds text and finds a Markdown file's
title. The second (`StreamedFile.segments`) reads it again as `Segment`s for
`probembed.chunking.stream_chunks`: whole lines (a line over `LINE_CHARS` in the pieces
`line_cuts` makes, which chunking reads as paragraph breaks whether it streams or not), cut
where a section starts and, once a segment passes `SEGMENT_CHARS`, after its last paragraph
break outside fenced code (each segment carries the code blocks that reach into it) or line
cut, so the chunks are exactly those of the file read whole. Memory holds a block, a segment
and the chunk being filled; only a single paragraph of lines, none over `LINE_CHARS`, that is
longer than a segment is held whole, and so is a fenced code block up to `CODE_CHARS`.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probembed.chunking import (
    FRONT_MATTER_CHARS,
    FRONT_MATTER_LINES,
    HeadingTracker,
    Segment,
    front_matter,
    joins_next,
    last_paragraph_break,
    line_cuts,
)
from probembed.chunking.structure import Span, settled
from probembed.documents import Problem
from probembed.encoders.base import is_blank
from probembed.store.formats import (
    NO_TEXT,
    SNIFF,
    Found,
    NoText,
    UnreadableError,
    changed,
    not_text,
    not_utf8,
    open_document,
)

#: Files larger than this (bytes) are read as a stream; smaller ones are read whole.
STREAM_BYTES = 16 * 2**20
#: Bytes read at a time.
BLOCK_BYTES = 2**20
#: Characters a segment grows to before it is cut at its last paragraph break.
SEGMENT_CHARS = 2**20
#: Suffixes read as a stream (the formats whose text is the file itself), and which are Markdown.
STREAMED = {".txt": False, ".md": True, ".markdown": True}
#: What ends a line for str.splitlines, which `markdown_sections` splits with.
_LINE_ENDS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


@dataclass(frozen=True)
class StreamedFile:
    """A large text or Markdown file, checked and hashed: its chunks come from `segments`."""

    id: str
    path: Path
    source: str
    title: str
    markdown: bool
    #: The content hash, as `chunked.content_hash` gives for the file read whole.
    digest: str
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Characters of front matter before the text to chunk (`chunking.front_matter`).
    skip: int = 0
    #: What the folder's walk found at its name, which the second pass must find too.
    found: Found | None = None

    def page_of(self, offset: int) -> None:
        """No pages: the file is text."""
        return None

    def segments(self) -> Iterator[Segment]:
        """The file's text as segments, in order; UnreadableError if it changed since found
        or scanned."""
        digest = hashlib.sha256()
        tracker = HeadingTracker(notes_code=True) if self.markdown else None
        start = offset = 0
        headings: tuple[str, ...] = ()
        bare = was_bare = False  # nothing but blank lines since the last heading's lines
        parts: list[str] = []
        previous = ""
        size, opens, limit = 0, True, SEGMENT_CHARS
        cut_line = None  # where the segment's last line cut (`line_cuts`) falls in it
        searched = 0  # how far into the segment a look found no break that can still end later
        starts = True  # whether the next piece starts a line
        for line, goes_on in _lines(self.path, digest, self.found):
            if offset < self.skip:  # front matter: in no chunk
                offset = start = offset + len(line)
                continue
            opened = (
                tracker.feed(line, not goes_on, offset) if tracker is not None and starts else None
            )
            starts = not goes_on
            if opened is not None:
                # a setext heading began on the line before, which ends the parts
                held = len(previous) if tracker is not None and tracker.setext else 0
                text = "".join(parts)
                joins = joins_next(headings, was_bare if held else bare)
                if len(text) > held and not joins:
                    code = _code(tracker, start, offset - held)
                    yield Segment(start, text[: len(text) - held], headings, opens, code)
                if not joins:
                    start, parts, size = offset - held, [text[len(text) - held :]], held
                    opens, limit, cut_line, searched = True, SEGMENT_CHARS, None, 0
                headings = opened
            was_bare, bare = bare, opened is not None or (bare and not line.strip())
            parts.append(line)
            previous = line
            size += len(line)
            offset += len(line)
            cut_line = size if goes_on else cut_line
            # a heading over blank lines waits for its section, also when the line after them
            # may be a setext title: its underline would join the heading to that section
            waits = was_bare and tracker is not None and tracker.title_line is not None
            if size >= limit and not bare and not waits:
                text = "".join(parts)
                local = [(s - start, e - start) for s, e in _code(tracker, start, offset)]
                cut = max(last_paragraph_break(text, local, searched) or 0, cut_line or 0)
                if not cut:  # one long paragraph or code block so far: look a segment later
                    parts, limit, searched = [text], size + SEGMENT_CHARS, settled(text, searched)
                    continue
                code = _code(tracker, start, start + cut)
                yield Segment(start, text[:cut], headings, opens, code)
                start, parts, size, opens = start + cut, [text[cut:]], len(text) - cut, False
                limit, cut_line, searched = SEGMENT_CHARS, None, 0
        if parts:
            yield Segment(start, "".join(parts), headings, opens, _code(tracker, start, offset))
        digest.update(repr([]).encode("utf-8"))
        if digest.hexdigest()[:32] != self.digest:
            raise changed(self.source, "while it was read")


def _code(tracker: HeadingTracker | None, start: int, end: int) -> tuple[Span, ...]:
    """The fenced code blocks of a stream that reach into [start, end), one still open
    running to `end`; those closed by `start` are forgotten, so memory holds only these."""
    if tracker is None:
        return ()
    tracker.forget(start)
    return tuple(block for block in tracker.blocks(end) if block[0] < end)


def scan_file(path: Path, doc_id: str, found: Found | None = None) -> StreamedFile | Problem:
    """The first pass over a large file: hash, UTF-8, some text, the Markdown title; `found`:
    what a walk found at its name, which each pass must find (`formats.open_document`)."""
    markdown = STREAMED[path.suffix.lower()]
    digest = hashlib.sha256()
    headings = HeadingTracker()
    blank = body_blank = True  # the whole file; what follows its front matter
    try:
        with open_document(path, found) as handle:
            refused = not_text(handle.read(SNIFF))
            if refused is not None:
                return Problem(str(path), refused)
        lines = _lines(path, digest, found)
        head = _leading(lines) if markdown else []
        front = front_matter("".join(line for line, _ in head)) if head else None
        skip = front.end if front else 0
        title = front.title if front else None
        offset, starts = 0, True
        for line, goes_on in itertools.chain(head, lines):
            blank = blank and is_blank(line)  # as a file read whole: a BOM is not text
            if offset >= skip:
                body_blank = body_blank and is_blank(line)
                if markdown and title is None and starts:  # `formats.first_heading`, a piece
                    opened = headings.feed(line, not goes_on)  # of a long line at a time
                    title = opened[-1] if opened else None
            starts = not goes_on
            offset += len(line)
    except UnreadableError as exc:
        return exc.problem
    except OSError as exc:
        return Problem(str(path), f"cannot read: {exc.strerror or exc}")
    if blank:
        return NoText(str(path), NO_TEXT)
    digest.update(repr([]).encode("utf-8"))  # a file's document has no metadata of its own
    alone = front is not None and body_blank  # front matter alone is the text, headingless
    return StreamedFile(
        doc_id,
        path,
        str(path),
        title or path.stem,
        markdown and not alone,
        digest.hexdigest()[:32],
        skip=0 if alone else skip,
        found=found,
    )


def _leading(lines: Iterator[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The first lines, as many as front matter may span (`chunking.front_matter`)."""
    head, size = [], 0
    for line in lines:
        head.append(line)
        size += len(line[0])
        if len(head) > FRONT_MATTER_LINES or size > FRONT_MATTER_CHARS:
            break
    return head


def _lines(path: Path, digest: Any, found: Found | None) -> Iterator[tuple[str, bool]]:
    """The lines of the file's text (`splitlines(keepends=True)` of it read whole), decoded
    block by block, each with whether its line goes on after it: a line over LINE_CHARS comes
    in the pieces `line_cuts` makes, as soon as the text read shows where, so no more than a
    block and LINE_CHARS of a line is held. Every byte read goes into `digest`."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    consumed, carry = 0, ""
    with open_document(path, found) as handle:
        while True:
            data = handle.read(BLOCK_BYTES)
            digest.update(data)
            refused = not_text(data, consumed)
            if refused is not None:
                raise UnreadableError(Problem(str(path), refused))
            held = decoder.getstate()[0]  # bytes of a character the last block cut in two
            try:
                text = decoder.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                raw = held + data
                where = consumed - len(held) + exc.start
                raise UnreadableError(
                    not_utf8(path, where, raw[exc.start : exc.start + 1])
                ) from exc
            consumed += len(data)
            lines = (carry + text).splitlines(keepends=True)
            carry = ""
            if data and lines and (lines[-1][-1] not in _LINE_ENDS or lines[-1][-1] == "\r"):
                carry = lines.pop()  # unfinished, or a \r that a \n may follow
            for line in lines:
                pieces, rest = _pieces(line)
                yield from pieces
                yield rest, False
            if carry:
                pieces, carry = _pieces(carry)
                yield from pieces
            if not data:
                return


def _pieces(line: str) -> tuple[list[tuple[str, bool]], str]:
    """The pieces `line_cuts` cuts off a line, finished or not (a cut needs only the
    LINE_CHARS + 1 characters after the one before), and the rest of it."""
    content = len(line.rstrip(_LINE_ENDS))
    cuts = line_cuts(line, 0, content)
    pieces = [(line[a:b], True) for a, b in itertools.pairwise([0, *cuts])]
    return pieces, line[cuts[-1] if cuts else 0 :]
