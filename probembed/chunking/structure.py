"""Where a document may be cut: sections (Markdown headings), paragraphs, sentences, words.

Every piece is a (start, end) span of character offsets into the source text, with the
whitespace around it left out, so a chunk is always an exact slice of its document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from probembed.encoders.base import is_blank, is_invisible

Span = tuple[int, int]

#: An ATX heading; a closing run of # counts only after a space (CommonMark: `## C#` is "C#").
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
#: A code fence: three or more backticks or tildes; it is closed only by a fence of the same
#: character at least as long, with nothing after it (CommonMark).
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
#: A blank line, with LF or CRLF line ends.
_PARAGRAPH_BREAK = re.compile(r"\r?\n[ \t\r]*\n")
#: A sentence ends at . ! ? (optionally closed by quotes or brackets) before whitespace, or
#: at a CJK full stop, ! or ?, which need no space after them. The closers belong to the
#: sentence; only the whitespace (group 1) lies between sentences.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])[\"'”’)\]]*(?=\s)|(?<=[。！？])[」』”’)\]]*)(\s*)")
#: A line break (LF, CRLF or CR).
_LINE_BREAK = re.compile(r"\r\n|[\n\r]")
#: A byte order mark before the first line, which a heading or fence test must look past.
_BOM = "\ufeff"
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path (outermost heading first)."""

    headings: tuple[str, ...]
    start: int
    end: int


def plain_sections(text: str) -> list[Section]:
    """The whole text as one section without headings."""
    return [Section((), 0, len(text))]


class HeadingTracker:
    """Markdown heading paths, line by line, outside fenced code: what `markdown_sections`
    and a document read as a stream share."""

    def __init__(self) -> None:
        self.path: list[tuple[int, str]] = []
        #: The fence that opened the code block the lines are in ("" outside one).
        self.fence = ""

    def feed(self, line: str) -> tuple[str, ...] | None:
        """The heading path this line opens, if it is an ATX heading (`#` … `######`)."""
        line = line.rstrip("\r\n").lstrip(_BOM)
        fence = _FENCE.match(line)
        if fence and not self.fence:
            self.fence = fence.group(1)
            return None
        if self.fence:
            closing = fence and fence.group(1)[0] == self.fence[0] and not fence.group(2).strip()
            if closing and len(fence.group(1)) >= len(self.fence):
                self.fence = ""
            return None
        match = _HEADING.match(line)
        if match is None or not match.group(2).strip():  # "#" and blanks: no title to show
            return None
        level = len(match.group(1))
        self.path = [(lvl, title) for lvl, title in self.path if lvl < level]
        self.path.append((level, match.group(2)))
        return tuple(title for _, title in self.path)


def joins_next(headings: tuple[str, ...], bare: bool) -> bool:
    """Whether the open section (under `headings`, `bare` when nothing but blank lines follows
    its heading line) joins the section the next heading starts, whatever its level: so no
    chunk is a bare heading but one that ends the document, and a subsection's text carries
    its parent's title."""
    return bare and bool(headings)


def markdown_sections(text: str) -> list[Section]:
    """One section per ATX heading (`#` … `######`), outside fenced code; the heading line is
    part of its section, and text before the first heading is a section without headings.

    A heading with nothing under it before the next heading (`# Big cats` then `## Jaguar`,
    or `## Install` then `## Usage`) opens no section of its own (see `joins_next`).
    """
    sections: list[Section] = []
    tracker = HeadingTracker()
    start, headings = 0, ()
    offset, body = 0, 0  # body: where the open section's text after its heading line starts
    for line in text.splitlines(keepends=True):
        opened = tracker.feed(line)
        if opened is not None:
            joins = joins_next(headings, not text[body:offset].strip())
            if offset > start and not joins:
                sections.append(Section(headings, start, offset))
            start, headings = (start if joins else offset), opened
            body = offset + len(line)
        offset += len(line)
    if offset > start or not sections:
        sections.append(Section(headings, start, len(text)))
    return sections


def last_paragraph_break(text: str) -> int | None:
    """Where the last paragraph break of a text ends (as `paragraphs` finds them), if any:
    cutting there leaves every paragraph, sentence and word of the text as it was."""
    end = None
    for match in _PARAGRAPH_BREAK.finditer(text):
        end = match.end()
    return end


def trimmed(text: str, start: int, end: int) -> Span | None:
    """The span without what the encoders read as blank at its ends (white space, byte order
    marks, zero-width characters), or None if nothing (or only combining marks) is left: a
    piece of zero-width spaces alone became a chunk that ingest refused as empty, with its
    whole document."""
    while start < end and is_invisible(text[start]):
        start += 1
    while end > start and is_invisible(text[end - 1]):
        end -= 1
    if is_blank(text[start:end]):  # lone combining marks: nothing to embed either
        return None
    return start, end


def split_span(text: str, span: Span, separator: re.Pattern[str]) -> list[Span]:
    """The non-blank pieces of a span between matches of a separator (between its group 1,
    when it has one: what the match holds before it ends the piece before)."""
    start, end = span
    pieces, at = [], start
    for match in separator.finditer(text, start, end):
        piece = trimmed(text, at, match.start(1) if separator.groups else match.start())
        if piece:
            pieces.append(piece)
        at = match.end()
    last = trimmed(text, at, end)
    if last:
        pieces.append(last)
    return pieces


def paragraphs(text: str, span: Span) -> list[Span]:
    """Blank-line separated paragraphs."""
    return split_span(text, span, _PARAGRAPH_BREAK)


def sentences(text: str, span: Span) -> list[Span]:
    """Sentences, cut after . ! ? followed by whitespace."""
    return split_span(text, span, _SENTENCE_END)


def lines(text: str, span: Span) -> list[Span]:
    """Lines: a sentence over the budget that holds line breaks (a log, a list, a poem) is cut
    there before it is cut between words."""
    return split_span(text, span, _LINE_BREAK)


def words(text: str, span: Span) -> list[Span]:
    """Whitespace-separated words (a run of combining marks alone is none)."""
    return [m.span() for m in _WORD.finditer(text, *span) if not is_blank(m.group())]
