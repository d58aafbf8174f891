"""Where a document may be cut: sections (Markdown headings), paragraphs, sentences, words.

Every piece is a (start, end) span of character offsets into the source text, with the
whitespace around it left out, so a chunk is always an exact slice of its document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Span = tuple[int, int]

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
#: A sentence ends at . ! ? (optionally closed by quotes or brackets) before whitespace.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+")
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


def markdown_sections(text: str) -> list[Section]:
    """One section per ATX heading (`#` … `######`), outside fenced code; the heading line is
    part of its section, and text before the first heading is a section without headings."""
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    start, headings = 0, ()
    fenced = False
    offset = 0
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line.rstrip("\r\n"))
        if match:
            if offset > start:
                sections.append(Section(headings, start, offset))
            level = len(match.group(1))
            path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, match.group(2))]
            start, headings = offset, tuple(title for _, title in path)
        offset += len(line)
    if offset > start or not sections:
        sections.append(Section(headings, start, len(text)))
    return sections


def trimmed(text: str, start: int, end: int) -> Span | None:
    """The span without the whitespace at its ends, or None if nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def split_span(text: str, span: Span, separator: re.Pattern[str]) -> list[Span]:
    """The non-blank pieces of a span between matches of a separator."""
    start, end = span
    pieces, at = [], start
    for match in separator.finditer(text, start, end):
        piece = trimmed(text, at, match.start())
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


def words(text: str, span: Span) -> list[Span]:
    """Whitespace-separated words."""
    return [m.span() for m in _WORD.finditer(text, *span)]
