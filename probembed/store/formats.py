"""Files as documents: plain text, Markdown, HTML (a real parser) and PDF (its text layer).

Each reader gives a `SourceDocument`, whose `text` is what chunk offsets point into (the file
itself for text and Markdown, the extracted text for HTML and PDF), or a `Problem` naming the
file and what is wrong with it: not UTF-8, binary, empty, encrypted or damaged PDF. HTML needs
beautifulsoup4 and PDF pypdf (the `documents` extra); a missing one is a problem per file that
names the extra. A reader is given the file opened (`open_document`, which every read of a
file a folder's walk found goes through: it must still be the file the walk found).
"""

from __future__ import annotations

import bisect
import codecs
import errno
import hashlib
import logging
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, NamedTuple

from probembed.chunking import (
    HeadingTracker,
    Section,
    front_matter,
    markdown_sections,
    plain_sections,
)
from probembed.decoding import conversion_advice, wide_refusal
from probembed.documents import Problem
from probembed.encoders.base import is_blank
from probembed.extras import MissingExtraError, require

#: Elements whose text is page furniture, not content: form controls, not the form itself
#: (ASP.NET and many CMS pages wrap the whole body in one), and inline graphics (an icon's
#: <title> is not the page's).
_DROPPED = (
    "script", "style", "noscript", "nav", "template", "svg",
    "input", "select", "option", "button", "textarea",
)  # fmt: skip
#: Furniture of the page, but content inside an article, section or main (HTML5 puts an
#: article's headline and byline in its own <header>).
_PAGE_PARTS = ("header", "footer", "aside")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
#: Elements that end the paragraph before them and start a new one.
_HTML_BREAKS = frozenset(
    (*_HEADINGS, "p", "li", "pre", "blockquote", "td", "th", "dt", "dd", "figcaption", "div",
     "section", "article", "main", "body", "table", "tr", "ul", "ol", "dl", "br", "hr",
     "details", "summary", "figure", "address", "fieldset", "caption", *_PAGE_PARTS,
     "hgroup", "legend", "menu", "dialog", "center")
)  # fmt: skip
#: A paragraph start Markdown reads as a heading or a code fence.
_MARKDOWN_SYNTAX = re.compile(r"#|```|~~~")
#: Bytes inspected for NUL to tell a binary file from text.
SNIFF = 8192
NO_TEXT = "no text in it (empty file, or nothing but markup)"
NO_TEXT_LAYER = "no text layer (a scanned PDF?): run OCR on it first, e.g. `ocrmypdf`"
BINARY = "binary file, not text"
#: U+00AD, where a word may be hyphenated: shown only at a line break, so no part of the text.
SOFT_HYPHEN = "\u00ad"
#: A soft hyphen a PDF broke a line at, and the break.
_SOFT_BREAK = re.compile("\u00ad[ \t]*\n[ \t]*")
#: A word broken by a hyphen at a line's end: its letters before the hyphen, and after.
_HYPHEN_BREAK = re.compile(r"([^\W\d_]+)[-\u2010][ \t]*\n[ \t]*([^\W\d_]+)")
#: A word, as `pdf_text` looks for a broken one whole: letters only.
_WORD = re.compile(r"[^\W\d_]+")
#: A page's declared encoding, `<meta charset="...">` or `content="...; charset=..."`.
_META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9._:-]+)", re.I)
#: Bytes of a page a browser looks through for its declared encoding.
_PRESCAN_BYTES = 1024


class Found(NamedTuple):
    """What a folder's walk found at a file's name, which each open of it compares."""

    #: The file's device and inode: the same through every path to it, another file's else.
    device: int
    inode: int
    #: Whether the name was a link (else an open refuses one there: it was put there since).
    link: bool


class UnreadableError(Exception):
    """A file that cannot be read as UTF-8 text, or that changed since it was found or
    between two reads of it: its `problem` names it."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


@dataclass(frozen=True)
class NoText(Problem):
    """A file with no text to index (empty, or nothing but markup): not unreadable, so
    chunked ingest counts it as empty rather than as bad input, and a sync removes its stored
    version as it would a file gone (`chunked._plan`); other readers take it as a problem."""


def changed(path: Path | str, when: str) -> UnreadableError:
    """The one refusal of a file that is no longer what was read of it (`when` it changed)."""
    return UnreadableError(Problem(str(path), f"the file changed {when}; ingest it again"))


#: When a walked file changed, when an open finds another at its name.
SINCE_WALK = "since its folder was listed (another file or a link is at its name now)"


def open_document(path: Path, found: Found | None = None) -> BinaryIO:
    """The file opened to read. Given what a walk `found` at its name, it must still be that
    file (`UnreadableError` else, before a byte is read): the walk decides which links to
    follow, and a name swapped for a link between the walk and the read (`b.md ->
    ~/.ssh/id_rsa` in a shared folder) was read and stored. A named pipe put there meanwhile
    is refused too, not waited on (the file found was a regular one, which never waits)."""
    flags = os.O_RDONLY
    if found is not None:
        flags |= os.O_NONBLOCK | (0 if found.link else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        if found is not None and exc.errno == errno.ELOOP:  # a link where the walk saw none
            raise changed(path, SINCE_WALK) from exc
        raise
    handle = os.fdopen(descriptor, "rb")
    now = os.fstat(descriptor)
    if found is not None and (now.st_dev, now.st_ino) != (found.device, found.inode):
        handle.close()
        raise changed(path, SINCE_WALK)
    return handle


@dataclass(frozen=True)
class SourceDocument:
    """One file's text, ready to chunk; `markdown` says whether `#` headings structure it."""

    id: str
    text: str
    source: str
    kind: str
    title: str | None = None
    markdown: bool = False
    #: Character offset where each PDF page starts (page n starts at page_starts[n - 1]).
    page_starts: tuple[int, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Sections found by the reader itself (e.g. the Python docs' underlined headings).
    outline: tuple[Section, ...] = ()

    def sections(self) -> list[Section]:
        """Where chunks may not cross: the reader's outline, Markdown sections, PDF pages, else
        the whole text."""
        if self.outline:
            return list(self.outline)
        if self.markdown:
            return markdown_sections(self.text)
        if self.page_starts:
            ends = [*self.page_starts[1:], len(self.text)]
            return [Section((), s, e) for s, e in zip(self.page_starts, ends, strict=True) if e > s]
        return plain_sections(self.text)

    def page_of(self, offset: int) -> int | None:
        """The 1-based PDF page holding a character offset (None for other kinds)."""
        if not self.page_starts:
            return None
        return bisect.bisect_right(self.page_starts, offset)


def read_file(path: Path, doc_id: str, found: Found | None = None) -> SourceDocument | Problem:
    """The document in a file, chosen by suffix, or the problem with it, naming the document
    (the file exists: a sync keeps its stored version rather than taking it for gone);
    `found`: what a walk found there, which it must still be (`open_document`)."""
    item = _read_file(path, doc_id, found)
    return replace(item, doc_id=doc_id) if isinstance(item, Problem) else item


def _read_file(path: Path, doc_id: str, found: Found | None) -> SourceDocument | Problem:
    """`read_file` but for the problem's document."""
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        return Problem(
            str(path), f"unsupported file type {path.suffix!r}; use {', '.join(READERS)}"
        )
    try:
        with open_document(path, found) as handle:
            document = reader(path, doc_id, handle)
    except UnreadableError as exc:
        return exc.problem
    except MissingExtraError as exc:
        return Problem(str(path), str(exc))
    except OSError as exc:
        return Problem(str(path), f"cannot read: {exc.strerror or exc}")
    if isinstance(document, SourceDocument) and is_blank(document.text):
        if document.kind == "pdf":  # its text is in images: OCR gives it one
            return Problem(str(path), NO_TEXT_LAYER)
        return NoText(str(path), NO_TEXT)
    return document


def _utf8(path: Path, handle: BinaryIO) -> str | Problem:
    """The file as UTF-8 text, or a problem: binary, or another encoding (with the byte)."""
    return _decoded(path, handle.read())


def _decoded(path: Path, data: bytes, charset: str = "utf-8") -> str | Problem:
    """A file's bytes as text in `charset` (UTF-8 but for a page that declares another), or
    a problem: UTF-16 or binary, or bytes that are not in it (the first with its offset)."""
    refused = not_text(data)
    if refused is not None:
        return Problem(str(path), refused)
    try:
        return data.decode(charset)
    except UnicodeDecodeError as exc:
        if charset == "utf-8":
            return not_utf8(path, exc.start, data, exc.start)
        where = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        return Problem(str(path), f"not {charset} as the page declares: {where}")


def not_text(data: bytes, offset: int = 0) -> str | None:
    """Why these bytes of a file, from `offset` on, are not UTF-8 text worth decoding: UTF-16
    or UTF-32 at its start (Windows Notepad's "Unicode", with or without a byte order mark),
    which has NUL bytes too but wants converting (`decoding.wide_refusal`), or a NUL byte
    anywhere (binary; one past the first block was stored as text); else None."""
    wide = wide_refusal(data) if offset == 0 else None
    if wide is not None:
        return wide
    nul = data.find(b"\x00")
    return None if nul < 0 else f"{BINARY}: a NUL byte at offset {offset + nul}"


def not_utf8(path: Path, offset: int, data: bytes, at: int = 0) -> Problem:
    """The problem of a file that is not UTF-8, naming its first bad byte (`data[at]`, at
    `offset` in the file) and how to convert it as the bytes read (`data`) suggest
    (`decoding.conversion_advice`): advice of Latin-1 for every file garbled a UTF-8 file's
    accents and a Windows-1252 file's quotes."""
    return Problem(
        str(path),
        f"not UTF-8: byte 0x{data[at]:02x} at offset {offset}; {conversion_advice(data)}",
    )


def content_digest(parts: Iterable[bytes], metadata: dict[str, Any]) -> str:
    """What decides whether a document changed: its text's UTF-8 bytes and its metadata."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    digest.update(repr(sorted(_key_ordered(metadata).items())).encode("utf-8"))
    return digest.hexdigest()[:32]


def _key_ordered(value: Any) -> Any:
    """Mappings at every depth with their keys in order, since a JSON writer may reorder an
    object's keys without changing it; a mapping already in order keeps its repr, so stored
    digests stay valid."""
    if isinstance(value, dict):
        return {k: _key_ordered(value[k]) for k in sorted(value, key=lambda k: (str(type(k)), k))}
    if isinstance(value, list | tuple):
        return type(value)(_key_ordered(v) for v in value)
    return value


def read_plain(path: Path, doc_id: str, handle: BinaryIO) -> SourceDocument | Problem:
    """A .txt file as it is."""
    text = _utf8(path, handle)
    if isinstance(text, Problem):
        return text
    return SourceDocument(doc_id, text, str(path), "text", title=path.stem)


def read_markdown(path: Path, doc_id: str, handle: BinaryIO) -> SourceDocument | Problem:
    """A .md file as it is; its title is its front matter's, else the first heading, else
    the file name."""
    text = _utf8(path, handle)
    if isinstance(text, Problem):
        return text
    title = markdown_title(text) or path.stem
    return SourceDocument(doc_id, text, str(path), "markdown", title, markdown=True)


def markdown_title(text: str) -> str | None:
    """A Markdown page's own title: its front matter's, else its first heading (one rule for
    a file and for a service's document of the same text)."""
    front = front_matter(text)
    body = text[front.end :] if front else text
    return (front.title if front else None) or first_heading(body.splitlines())


def names_markdown(name: str) -> bool:
    """Whether a document's id (a file name) has a suffix `probembed ingest` reads as Markdown."""
    return READERS.get(PurePosixPath(name).suffix.lower()) is read_markdown


def first_heading(lines: Iterable[str], tracker: HeadingTracker | None = None) -> str | None:
    """A Markdown file's title: the first heading among these lines, outside fenced code
    (`tracker` keeps the fences of the lines before, when they come one at a time)."""
    tracker = tracker or HeadingTracker()
    for line in lines:
        opened = tracker.feed(line)
        if opened is not None:
            return opened[-1]
    return None


def read_html(path: Path, doc_id: str, handle: BinaryIO) -> SourceDocument | Problem:
    """Visible text, one paragraph per block of the page, headings written as Markdown
    headings so sections follow them; scripts, styles and navigation dropped, and soft
    hyphens (`&shy;`, a hint where a line may break, which splits a word for `use`)."""
    text = _page_text(path, handle.read())
    if isinstance(text, Problem):
        return text
    require("documents", "reading HTML")
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    title_tag = next((t for t in soup.find_all("title") if t.find_parent("svg") is None), None)
    title = title_tag.get_text(strip=True) if title_tag else None
    for element in soup.find_all([*_DROPPED, "head"]):
        element.decompose()
    if title_tag:  # read; in a fragment with no <head> it would be body text too
        title_tag.decompose()
    for element in soup.find_all(_PAGE_PARTS):
        if element.find_parent(("article", "section", "main")) is None:
            element.decompose()
    lines: list[str] = []
    pieces: list[str] = []
    _html_blocks(soup, lines, pieces)
    _flush(lines, pieces)  # text after the last block, or a fragment with no block at all
    lines = [line.replace(SOFT_HYPHEN, "") for line in lines]
    title = title.replace(SOFT_HYPHEN, "") if title else title
    heading = first_heading(lines)
    return SourceDocument(
        doc_id, "\n\n".join(lines), str(path), "html", title or heading or path.stem, markdown=True
    )


def _page_text(path: Path, data: bytes) -> str | Problem:
    """A page's bytes as text: UTF-8 when they are, else in the charset the page declares
    (`declared_charset`), else the problem of a file not UTF-8. UTF-8 first, though a browser
    takes the declaration: a `charset=iso-8859-1` left in a template over a page saved as
    UTF-8 is common, and a Windows-1252 page that reads as UTF-8 is not (its letters would
    have to come in pairs such as `Ã©`)."""
    text = _decoded(path, data)
    charset = declared_charset(data) if isinstance(text, Problem) else None
    return text if charset is None or charset == "utf-8" else _decoded(path, data, charset)


def declared_charset(data: bytes) -> str | None:
    """The codec of the encoding a page declares (`<meta charset>`, or http-equiv's
    `content="text/html; charset=..."`) in its first bytes, read as a browser reads the label
    (WHATWG: ISO-8859-1 and ASCII mean Windows-1252; UTF-16 in a page read so far as ASCII
    means UTF-8), or None: none declared, or a label that names no text encoding."""
    found = _META_CHARSET.search(data[:_PRESCAN_BYTES])
    if found is None:
        return None
    try:
        codec = codecs.lookup(found[1].decode("ascii")).name
        b"".decode(codec)  # `base64` is a codec, but of bytes to bytes
    except LookupError:
        return None
    if codec in ("iso8859-1", "ascii"):
        return "cp1252"
    return "utf-8" if codec.startswith(("utf-16", "utf-32")) else codec


def _html_blocks(node: Any, lines: list[str], pieces: list[str]) -> None:
    """Append the paragraphs below `node` to `lines`: text between block boundaries is one
    paragraph, whatever element holds it (text straight in a div or the body too)."""
    from bs4 import NavigableString, Tag

    for child in node.children:
        if isinstance(child, NavigableString):
            if type(child) is NavigableString:  # not a comment, doctype or CDATA
                pieces.append(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        if child.name not in _HTML_BREAKS:
            _html_blocks(child, lines, pieces)  # inline: part of the paragraph around it
            continue
        _flush(lines, pieces)
        if child.name in _HEADINGS:
            heading = " ".join(child.get_text(" ", strip=True).split())
            if heading:
                lines.append("#" * int(child.name[1]) + " " + heading)
            continue
        cells = child.find_all(("td", "th"), recursive=False) if child.name == "tr" else []
        if cells:  # a row is one paragraph, its cells side by side: a chunk cut kept a key
            # from its value when each cell was a paragraph of its own
            pieces.append(" | ".join(" ".join(c.get_text(" ", strip=True).split()) for c in cells))
            _flush(lines, pieces)
            continue
        if child.name == "pre":
            for br in child.find_all("br"):  # a line break in code written as markup
                br.replace_with("\n")
            _code_block(child.get_text(), lines)
            continue
        _html_blocks(child, lines, pieces)
        _flush(lines, pieces)


def _code_block(code: str, lines: list[str]) -> None:
    """Preformatted text as a fenced Markdown code block, so its line breaks survive and a
    `#` line in it is not read as a heading; the fence is longer than any backtick run inside."""
    code = "\n".join(line.rstrip() for line in code.strip("\n").splitlines())
    if code.strip():
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", code)), default=0))
        lines.append(f"{fence}\n{code}\n{fence}")


def _flush(lines: list[str], pieces: list[str]) -> None:
    """End the paragraph being gathered; one that Markdown would read as a heading or a code
    fence is escaped, since the page's text is structured by its tags alone."""
    line = " ".join("".join(pieces).split())  # inline tags join their text as a browser shows it
    if line:
        lines.append("\\" + line if _MARKDOWN_SYNTAX.match(line) else line)
    pieces.clear()


class _QuietLogger:
    """A library's warnings held back while any thread is inside: for pypdf, whose "EOF marker
    not found" on stderr would break the progress bar while the file's problem says it all."""

    def __init__(self, name: str) -> None:
        self.log = logging.getLogger(name)
        self.lock = threading.Lock()
        self.inside = 0
        self.level = logging.NOTSET

    def __enter__(self) -> None:
        with self.lock:
            if self.inside == 0:
                self.level = self.log.level
                self.log.setLevel(logging.ERROR)
            self.inside += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.inside -= 1
            if self.inside == 0:
                self.log.setLevel(self.level)


_PYPDF_QUIET = _QuietLogger("pypdf")


def read_pdf(path: Path, doc_id: str, handle: BinaryIO) -> SourceDocument | Problem:
    """The text layer of every page, pages separated by a blank line; page starts kept."""
    require("documents", "reading PDF")
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        with _PYPDF_QUIET:
            reader = PdfReader(handle)
            if reader.is_encrypted and not reader.decrypt(""):
                return Problem(str(path), "encrypted PDF: decrypt it first (e.g. `qpdf --decrypt`)")
            pages = [page.extract_text() or "" for page in reader.pages]
            title = (reader.metadata.title if reader.metadata else None) or path.stem
    except DependencyError as exc:  # AES without the `cryptography` package
        return Problem(str(path), f"encrypted PDF that pypdf cannot open here: {exc}")
    except Exception as exc:  # a parser on any file it is given: a bad one is that file's problem
        return Problem(str(path), f"damaged or truncated PDF: {type(exc).__name__}: {exc}")
    starts, at = [], 0
    parts = pdf_text(pages)
    for page in parts:
        starts.append(at)
        at += len(page) + 2
    title = unicodedata.normalize("NFKC", str(title))
    return SourceDocument(
        doc_id, "\n\n".join(parts), str(path), "pdf", title, page_starts=tuple(starts)
    )


def pdf_text(pages: list[str]) -> list[str]:
    """Pages' text as pypdf extracts it, made the text a reader sees: NFKC (a font's
    ligatures, `eﬃcient`, and full-width letters, which a tokenizer reads as other words:
    `retrieval` scored a page 0.16 for the query "efficient office files workflow", 0.61
    once normalised), soft hyphens dropped and a word broken at one joined, and a word
    hyphenated across lines joined where the document spells it whole elsewhere. No other
    break is joined: a compound's own hyphen (`well-known`) ends lines too, and joining it
    cost as much as leaving a break (the default pipeline's similarity to the clean text:
    0.76 for `wellknown`, 0.65 for `justi- fied`)."""
    pages = [_SOFT_BREAK.sub("", unicodedata.normalize("NFKC", page)) for page in pages]
    pages = [page.replace(SOFT_HYPHEN, "") for page in pages]
    words = {word.casefold() for page in pages for word in _WORD.findall(page)}

    def joined(broken: re.Match[str]) -> str:
        whole = broken[1] + broken[2]
        return whole if broken[2][0].islower() and whole.casefold() in words else broken[0]

    return [_HYPHEN_BREAK.sub(joined, page) for page in pages]


#: The reader of each suffix: a file's path (to name it) and id, and the file opened
#: (`open_document`: no reader opens a file itself).
READERS: dict[str, Callable[[Path, str, BinaryIO], SourceDocument | Problem]] = {
    ".txt": read_plain,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".html": read_html,
    ".htm": read_html,
    ".pdf": read_pdf,
}
