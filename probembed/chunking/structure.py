"""Where a document may be cut: sections (Markdown headings), paragraphs, sentences, words.

Every piece is a (start, end) span of character offsets into the source text, with the
whitespace around it left out, so a chunk is always an exact slice of its document.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from probembed.chunking.graphemes import is_boundary, last_boundary
from probembed.encoders.base import is_blank, is_invisible

Span = tuple[int, int]

#: An ATX heading; a closing run of # counts only after a space (CommonMark: `## C#` is "C#").
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
#: A code fence: three or more backticks or tildes; it is closed only by a fence of the same
#: character at least as long, with nothing after it; no backtick follows a backtick fence
#: (CommonMark: "```x``` …" is inline code).
_FENCE = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})(.*)$")
#: A block quote marker at a line's start: `>` and the space after it.
_QUOTE = re.compile(r" {0,3}> ?")
#: List item markers at a line's start (`- `, `1. `, `2) `, several for items nested on one
#: line), each with the one to four spaces after it that set its content's column.
_LIST_MARKERS = re.compile(r"(?: {0,3}(?:[-+*]|\d{1,9}[.)]) {1,4}(?! ))*")
#: A thematic break (`* * *`, `- - -`), which is no list item.
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
#: An ATX heading with no title (`#`, `## `), which ends a paragraph as any heading does.
_EMPTY_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]*$")
#: A setext heading's underline: `===` (level 1) or `---` (level 2) under a line of text.
_SETEXT = re.compile(r"^ {0,3}(?:(=+)|-+)[ \t]*$")
#: A line an underline cannot make a heading of (CommonMark): a list item, a quote, a table
#: row, an HTML block, indented code.
_NOT_PARAGRAPH = re.compile(r"^(?: {0,3}(?:[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|[>|<])| {4}|\t)")
#: YAML front matter: a first line `---`, the YAML (starting with a `key:` line, as Pandoc
#: and MkDocs require: a page opening with a rule over a paragraph is not front matter), a
#: closing `---` or `...`.
_FRONT_MATTER = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(?:[A-Za-z_][\w .-]*:(?:[ \t].*?)?\r?\n)??"
    r"(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)",
    re.S,
)
#: Front matter spans at most this many lines and characters (a stream holds no more).
FRONT_MATTER_LINES = 256
FRONT_MATTER_CHARS = 2**16
#: Its title: `title: Text`, the value quoted or not.
_FRONT_TITLE = re.compile(
    r"""^title:[ \t]*
    (?: "((?:[^"\\]|\\.)*)"         # "double quoted", with backslash escapes
      | '((?:[^']|'')*)'            # 'single quoted', '' for '
      | ([^\s|>'"\#][^\r\n]*?) )     # plain (not a | or > block)
    (?:[ \t]+\#[^\r\n]*)?[ \t]*\r?$""",  # a comment starts at " #"
    re.M | re.X,
)
#: A folded title (`title: >`, YAML's folded block scalar, with its chomping and indentation
#: indicators): the lines after it that are indented or blank.
_FOLDED_TITLE = re.compile(
    r"^title:[ \t]*>[-+]?[1-9]?[-+]?(?:[ \t]+\#[^\r\n]*)?[ \t]*\r?\n"
    r"((?:(?: +\S[^\r\n]*)?[ \t]*\r?\n)*)",
    re.M,
)
#: A blank line, with LF or CRLF line ends.
_PARAGRAPH_BREAK = re.compile(r"\r?\n[ \t\r]*\n")
#: The characters a paragraph break is made of.
_BREAK_SPACE = " \t\r\n"
#: A sentence ends at . ! ? ‼ ⁇ ⁈ ⁉, or a `;` after a Greek letter (the Greek question
#: mark, which NFC writes as `;`), optionally closed by quotes or brackets, before whitespace;
#: or at a mark that ends nothing but a sentence and needs no space after it: the CJK full
#: stop, ! and ? (fullwidth, halfwidth, vertical), the Devanagari danda and double danda, the
#: Arabic question mark, the Urdu full stop, the Greek question mark U+037E itself, the
#: Armenian, Ethiopic, Myanmar and Khmer full stops. The closers belong to the sentence; only
#: the whitespace (group 1) lies between sentences.
_SENTENCE_END = re.compile(
    r"(?:(?:(?<=[.!?\u203c\u2047-\u2049])|(?<=[\u0370-\u03ff\u1f00-\u1fff];))"
    r"[\"'”’)\]»]*(?=\s)"
    r"|(?<=[。！？｡\ufe12\ufe15\ufe16\u0964\u0965\u061f\u06d4\u037e\u0589\u1362\u104b\u17d4])"
    r"[」』”’)\]»]*)(\s*)"
)
#: A line break (LF, CRLF or CR).
_LINE_BREAK = re.compile(r"\r\n|[\n\r]")
#: What ends a line for str.splitlines (a stream's lines end so, and keep it).
_LINE_ENDS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"
#: A line's end as str.splitlines finds it.
_LINE_END = re.compile(f"\r\n|[{_LINE_ENDS}]")
#: Characters of a line before it is cut as a blank line would cut it (`line_cuts`): so a
#: file read as a stream never holds a line whole, however long (20 MB of French on one line
#: peaked at 1.39 times the memory of the same sentences in paragraphs).
LINE_CHARS = 2**20
#: Characters of a fenced code block read as one paragraph: a line starting this far past its
#: opening fence ends the paragraph, and what follows splits at blank lines as text does. A
#: fence left unclosed by mistake made the rest of a file one block, which a stream held whole
#: (a 100 MB file's 100 MB); the block's lines are still no headings.
CODE_CHARS = 2**20
#: The last white space of a run of text (`line_cut`).
_LAST_SPACE = re.compile(r"(?s:.*)\s")
#: A byte order mark before the first line, which a heading or fence test must look past.
_BOM = "\ufeff"
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path (outermost heading first)."""

    headings: tuple[str, ...]
    start: int
    end: int
    #: Its Markdown fenced code blocks, in order (`HeadingTracker.blocks`): each is one
    #: paragraph whatever blank lines it holds, and is cut at lines, not sentences.
    code: tuple[Span, ...] = ()


def plain_sections(text: str) -> list[Section]:
    """The whole text as one section without headings."""
    return [Section((), 0, len(text))]


@dataclass(frozen=True)
class FrontMatter:
    """A Markdown file's YAML front matter: where it ends, and the title it gives."""

    end: int
    title: str | None


def front_matter(text: str) -> FrontMatter | None:
    """The YAML block a static-site page starts with (`---` … `---`), within its first
    `FRONT_MATTER_LINES` lines, else None: its `title` is the page's, and it is not chunked
    (its closing `---` would read as a heading's underline) unless nothing follows it."""
    match = _FRONT_MATTER.match(text)
    if match is None or len(match.group()) > FRONT_MATTER_CHARS:
        return None
    if match.group().count("\n") > FRONT_MATTER_LINES:
        return None
    found = _FRONT_TITLE.search(match.group())
    folded = _FOLDED_TITLE.search(match.group())
    title = None
    if found:
        double, single, bare = found.groups()
        if double is not None:
            title = re.sub(r"\\(.)", r"\1", double)
        else:
            title = single.replace("''", "'") if single is not None else bare
    elif folded:
        title = _folded(folded.group(1))
    return FrontMatter(match.end(), title.strip() or None if title else None)


def _folded(block: str) -> str:
    """A folded block scalar's text as YAML reads `>`: the lines of a paragraph joined by
    spaces, and each blank line between paragraphs one line break."""
    text, breaks = "", 0
    for line in block.splitlines():
        if not line.strip():
            breaks += 1
            continue
        text += ("\n" * breaks or " ") + line.strip() if text else line.strip()
        breaks = 0
    return text


class HeadingTracker:
    """Markdown heading paths, line by line, outside fenced code: what `markdown_sections`
    and a document read as a stream share.

    A fence opens a code block at a line's start (three spaces in at most), after quote and
    list markers (`> ```py`, `- ```sh`, `1. - ````), or three columns at most past the
    content column of a list item it is four or more spaces into (`_items`), and the block
    lasts to a fence of its character at least as long inside the same markers and
    indentation, or to the first line that leaves them (fewer `>`, text left of the content
    column). This is CommonMark's rule without lazy lines or quotes inside list items: an
    unclosed fence runs to the end of the document only from a line's start, as before, and
    a line four spaces in outside a list item is indented code, whatever it holds."""

    def __init__(self, notes_code: bool = False) -> None:
        """`notes_code`: keep the fenced code blocks fed (`blocks`), which chunking needs and
        a search for a title does not (it would keep every block of a file without one)."""
        self._notes_code = notes_code
        self.path: list[tuple[int, str]] = []
        #: The fence that opened the code block the lines are in ("" outside one).
        self.fence = ""
        #: The last line, if it is a one-line paragraph an underline would make a heading of.
        self.title_line: str | None = None
        #: Whether the heading `feed` last returned began on the line before (setext).
        self.setext = False
        self._after_break = True  # the last line ended a block: blank, a heading, a fence
        #: Where the open fence's line starts (meaningful while `fence` is set).
        self._code_start = 0
        #: The fenced code blocks closed since `forget` (`blocks`).
        self._code: list[Span] = []
        #: Whether the open fence's block was ended at CODE_CHARS (noted in `_code` then).
        self._code_ended = False
        #: The open fence's container: the `>` markers and the columns its lines start with.
        self._quotes = self._indent = 0
        #: The content columns of the list items the last line is in, outermost first.
        self._items: list[int] = []

    def feed(self, line: str, whole: bool = True, at: int = 0) -> tuple[str, ...] | None:
        """The heading path this line opens: an ATX heading (`#` … `######`), or the
        underline (`===`, `---`) of a setext heading, which opens it at the line before
        (`setext` is then set). A line over LINE_CHARS, or the first piece of one (`whole`
        False: a stream gives such a line in the pieces `line_cuts` makes), is text: no heading,
        fence or underline, nor a title an underline makes a heading of. `at`: the line's
        offset in its document, where a fenced code block it opens or closes is noted."""
        line = line.rstrip(_LINE_ENDS)
        stop = at + len(line)
        if self.fence and not self._code_ended and at - self._code_start >= CODE_CHARS:
            self._end_code(at)
        title_line, self.title_line, self.setext = self.title_line, None, False
        after_break, self._after_break = self._after_break, False
        if not whole or len(line) > LINE_CHARS:
            return None
        line = line.lstrip(_BOM)
        if self.fence:
            inside = _within(line, self._quotes, self._indent)
            if inside is not None:
                if self._closes(inside):
                    self._end_fence(stop)
                    self._after_break = True
                return None
            self._end_fence(at)  # its list item or quote ended, and the block with it
            after_break = True
        opening = self._opening(line)
        self._note_items(line)
        if opening:
            self.fence, self._quotes, self._indent = opening
            self._after_break, self._code_start, self._code_ended = True, at, False
            return None
        underline = _SETEXT.match(line)
        if underline and title_line is not None:
            self.setext, self._after_break = True, True
            return self._open(1 if underline.group(1) else 2, title_line.strip())
        if underline:  # `---` alone is a thematic break; `===` alone is text, no title
            self._after_break = underline.group(1) is None
            return None
        match = _HEADING.match(line)
        if match is None or not match.group(2).strip():  # "#" and blanks: no title to show
            if not line.strip() or _EMPTY_HEADING.match(line):
                self._after_break = True
            elif after_break and not _NOT_PARAGRAPH.match(line) and match is None:
                self.title_line = line  # a paragraph's first line: a title if underlined
            return None
        self._after_break = True
        return self._open(len(match.group(1)), match.group(2))

    def _opening(self, line: str) -> tuple[str, int, int] | None:
        """The fence a line opens, with the `>` markers and the content column of its
        container (see the class): None if it opens none."""
        quotes, rest = _quoted(line)
        columns = _columns(rest)
        inside = not quotes and columns >= 4  # only a list item's content is indented so
        base = max((c for c in self._items if c <= columns), default=0) if inside else 0
        content = " " * (columns - base) + rest.lstrip(" \t")
        marked = _marked(content)
        fence = _FENCE.match(content[marked:])
        return (fence.group(1), quotes, base + marked) if fence else None

    def _closes(self, inside: str) -> bool:
        """Whether a line of the open block (its container's markers left out) closes it."""
        fence = _FENCE.match(inside)
        return bool(
            fence
            and fence.group(1)[0] == self.fence[0]
            and len(fence.group(1)) >= len(self.fence)
            and not fence.group(2).strip()
        )

    def _end_fence(self, end: int) -> None:
        """Leave the open block, which ends at `end` unless CODE_CHARS ended it before."""
        self.fence = ""
        if not self._code_ended:
            self._end_code(end)

    def _note_items(self, line: str) -> None:
        """Keep `_items` for a line outside fenced code: a line less indented than an item's
        content ends it (a lazy line too: a fence after one is no longer seen as the item's),
        and list markers three spaces at most past the innermost content open one."""
        columns, text = _columns(line), line.lstrip(" \t")
        if not text:
            return
        self._items = [c for c in self._items if c <= columns]
        base = self._items[-1] if self._items else 0
        marked = _marked(" " * (columns - base) + text)
        if columns - base <= 3 and marked and not _RULE.match(text):
            self._items.append(base + marked)

    def blocks(self, end: int) -> list[Span]:
        """The fenced code blocks fed since `forget`, from the opening fence line's start to
        the closing fence's end, or to the start of the line that left its list item or quote,
        or CODE_CHARS ended it at; one still open runs to `end`, the end of the text fed so
        far. CommonMark runs an unclosed fence to the end of its container, the document for
        one at a line's start; no heading is seen inside a fence, so a block ends no later
        than its section."""
        open_block = self.fence and not self._code_ended
        return [*self._code, *([(self._code_start, end)] if open_block else [])]

    def _end_code(self, end: int) -> None:
        """Note the open fence's block as ending at `end` (its closing fence's end, or a line
        start CODE_CHARS past its opening); its later lines are text to chunking."""
        self._code_ended = True
        if self._notes_code:
            self._code.append((self._code_start, end))

    def forget(self, before: int) -> None:
        """Forget the blocks closed by `before`: a stream keeps only its current segment's."""
        self._code = [block for block in self._code if block[1] > before]

    def _open(self, level: int, title: str) -> tuple[str, ...]:
        """The heading path once a heading of this level opens."""
        self.path = [(lvl, kept) for lvl, kept in self.path if lvl < level]
        self.path.append((level, title))
        return tuple(kept for _, kept in self.path)


def _quoted(line: str, most: int | None = None) -> tuple[int, str]:
    """How many block quote markers (at most `most`) a line starts with, and its rest."""
    quotes = at = 0
    while (most is None or quotes < most) and (marker := _QUOTE.match(line, at)):
        quotes, at = quotes + 1, marker.end()
    return quotes, line[at:]


def _marked(text: str) -> int:
    """The characters of list markers a text starts with (`_LIST_MARKERS`), 0 for none."""
    found = _LIST_MARKERS.match(text)
    return found.end() if found else 0


def _columns(text: str) -> int:
    """The columns of white space a text starts with, a tab to the next multiple of 4."""
    return len(text[: len(text) - len(text.lstrip(" \t"))].expandtabs(4))


def _within(line: str, quotes: int, indent: int) -> str | None:
    """A line as a fenced block's container holds it, `quotes` `>` markers and `indent`
    columns left out, or None if it ends the container (fewer markers, or text less indented;
    a blank line goes on)."""
    found, rest = _quoted(line, quotes)
    columns, text = _columns(rest), rest.lstrip(" \t")
    if found < quotes or (text and columns < indent):
        return None
    return " " * max(columns - indent, 0) + text


def joins_next(headings: tuple[str, ...], bare: bool) -> bool:
    """Whether the open section (under `headings`, `bare` when nothing but blank lines follows
    its heading line) joins the section the next heading starts, whatever its level: so no
    chunk is a bare heading but one that ends the document, and a subsection's text carries
    its parent's title."""
    return bare and bool(headings)


def markdown_sections(text: str) -> list[Section]:
    """One section per heading (ATX `#` … `######`, or setext: a line underlined with `===`
    or `---`), outside fenced code; the heading's lines are part of its section, and text
    before the first heading is a section without headings. YAML front matter is in none.

    A heading with nothing under it before the next heading (`# Big cats` then `## Jaguar`,
    or `## Install` then `## Usage`) opens no section of its own (see `joins_next`).
    """
    sections: list[Section] = []
    tracker = HeadingTracker(notes_code=True)
    front = front_matter(text)
    if front and is_blank(text[front.end :]):  # a page of front matter alone: its text
        return plain_sections(text)
    start = offset = body = front.end if front else 0  # body: the open section's text after
    headings: tuple[str, ...] = ()  # its heading's lines
    previous = ""
    for line in text[offset:].splitlines(keepends=True):
        opened = tracker.feed(line, at=offset)
        if opened is not None:
            at = offset - len(previous) if tracker.setext else offset
            joins = joins_next(headings, not text[body:at].strip())
            if at > start and not joins:
                sections.append(Section(headings, start, at))
            start, headings = (start if joins else at), opened
            body = offset + len(line)
        previous = line
        offset += len(line)
    if offset > start or not sections:
        sections.append(Section(headings, start, len(text)))
    return _with_code(sections, tracker.blocks(len(text)))


def _with_code(sections: list[Section], code: list[Span]) -> list[Section]:
    """The sections, each with the fenced code blocks that start in it (a block lies in one
    section: no heading is seen inside a fence)."""
    starts = [start for start, _ in code]
    found = []
    for section in sections:
        first, last = (bisect.bisect_left(starts, at) for at in (section.start, section.end))
        found.append(replace(section, code=tuple(code[first:last])))
    return found


def in_code(code: Sequence[Span], span: Span) -> bool:
    """Whether a span overlaps a fenced code block of `code` (sorted, none overlapping)."""
    i = bisect.bisect_left(code, (span[1],))  # the first block starting at or after its end
    return i > 0 and code[i - 1][1] > span[0]


def last_paragraph_break(text: str, code: Sequence[Span] = (), since: int = 0) -> int | None:
    """Where the last paragraph break of a text ends (as `paragraphs` finds them, so none in
    a fenced code block of `code`, offsets into the text), if any: cutting there leaves every
    paragraph, sentence and word of the text as it was. `since`: search from there, where a
    stream that found none in the text before (`settled`) takes it up again."""
    end = None
    for match in _PARAGRAPH_BREAK.finditer(text, since):
        if not in_code(code, match.span()):
            end = match.end()
    return end


def trimmed(text: str, start: int, end: int) -> Span | None:
    """The span without what the encoders read as blank at its ends (white space, byte order
    marks, zero-width characters), or None if nothing (or only combining marks) is left: a
    piece of zero-width spaces alone became a chunk that ingest refused as empty, with its
    whole document. An invisible character joined to another (the tags of Scotland's flag, a
    ZWJ, an Arabic number sign before its digits) stays with it: trimmed, the tags left a
    black flag."""
    while start < end and _droppable(text, start, start + 1, start):
        start += 1
    while end > start and _droppable(text, end - 1, end - 1, start):
        end -= 1
    if is_blank(text[start:end]):  # lone combining marks: nothing to embed either
        return None
    return start, end


def _droppable(text: str, i: int, cut: int, floor: int) -> bool:
    """Whether text[i] may be trimmed off an edge, which `cut` leaves it beside: white space,
    or an invisible character that is a grapheme cluster of its own there."""
    char = text[i]
    return is_invisible(char) and (char.isspace() or is_boundary(text, cut, floor))


def _regions(text: str, span: Span, separator: re.Pattern[str]) -> list[Span]:
    """The runs of a span between matches of a separator (up to its group 1, when it has
    one: what the match holds before it ends the run before), untrimmed; a match of nothing
    (a CJK full stop) cuts nowhere a grapheme cluster would be split."""
    start, end = span
    runs, at = [], start
    for match in separator.finditer(text, start, end):
        stop = match.start(1) if separator.groups else match.start()
        if stop == match.end() and not is_boundary(text, stop, at):
            continue
        runs.append((at, stop))
        at = match.end()
    return [*runs, (at, end)]


def settled(text: str, since: int = 0) -> int:
    """Where the white space that ends a text starts (not before `since`): a paragraph break
    more text could still complete starts there, none that it cannot, so a search for one
    in the longer text need not look before it."""
    end = len(text)
    while end > since and text[end - 1] in _BREAK_SPACE:
        end -= 1
    return end


def split_span(text: str, span: Span, separator: re.Pattern[str]) -> list[Span]:
    """The non-blank pieces of a span between matches of a separator (`_regions`)."""
    return [piece for run in _regions(text, span, separator) if (piece := trimmed(text, *run))]


def paragraphs(text: str, span: Span, code: Sequence[Span] = ()) -> list[Span]:
    """Blank-line separated paragraphs, a fenced code block of `code` (Markdown's, sorted)
    one of its own whatever blank lines it holds, a line longer than LINE_CHARS also cut where
    `line_cuts` cuts it (a file read as a stream is cut there too, so both give one chunking);
    the span starts where a line does, or at such a cut."""
    pieces = []
    for start, end in _blocks(text, span, code):
        for run in itertools.pairwise([start, *line_cuts(text, start, end), end]):
            piece = trimmed(text, *run)
            if piece:
                pieces.append(piece)
    return pieces


def _blocks(text: str, span: Span, code: Sequence[Span]) -> list[Span]:
    """The runs of a span between its paragraph breaks outside fenced code and at the edges
    of its code blocks, untrimmed."""
    start, end = span
    cuts = [m.span() for m in _PARAGRAPH_BREAK.finditer(text, start, end)]
    cuts = [cut for cut in cuts if not in_code(code, cut)]
    cuts += [(edge, edge) for block in code for edge in block if start < edge < end]
    bounds = [start, *itertools.chain.from_iterable(sorted(cuts)), end]
    return list(zip(bounds[::2], bounds[1::2], strict=True))


def line_cuts(text: str, start: int, end: int) -> list[int]:
    """Where the lines of text[start:end] longer than LINE_CHARS are cut (`line_cut`): the
    same for a line read whole and for a stream that knows its first LINE_CHARS + 1
    characters; `start` is a line's start or such a cut."""
    if end - start <= LINE_CHARS:
        return []
    cuts, at = [], start
    ends = ((m.start(), m.end()) for m in _LINE_END.finditer(text, start, end))
    for stop, next_line in itertools.chain(ends, [(end, end)]):
        while stop - at > LINE_CHARS:
            at = line_cut(text, at)
            cuts.append(at)
        at = next_line
    return cuts


def line_cut(text: str, start: int) -> int:
    """Where a line running on past LINE_CHARS from `start` is cut: before its last white
    space in the second half of those characters, else at the last grapheme boundary."""
    stop = start + LINE_CHARS
    space = _LAST_SPACE.match(text, start + LINE_CHARS // 2, stop + 1)
    return last_boundary(text, start, space.end() - 1 if space else stop)


def sentences(text: str, span: Span) -> list[Span]:
    """Sentences, cut after . ! ? followed by whitespace, or after a full stop that needs
    none (`_SENTENCE_END`)."""
    return split_span(text, span, _SENTENCE_END)


def lines(text: str, span: Span) -> list[Span]:
    """Lines: a sentence over the budget that holds line breaks (a log, a list, a poem) is cut
    there before it is cut between words."""
    return split_span(text, span, _LINE_BREAK)


def words(text: str, span: Span) -> list[Span]:
    """Whitespace-separated words (a run of combining marks alone is none)."""
    return [m.span() for m in _WORD.finditer(text, *span) if not is_blank(m.group())]
