"""Documents from JSON lines: the one reader that ingest, evaluation and benchmarks share.

A line is an object with an id (`id` or BEIR's `_id`), a `text`, an optional `title` (absent,
null, empty or blank all mean none, and a record's metadata then holds none, as chunked
ingest's chunks hold none) and free-form metadata. The text embedded is title and text,
each stripped, joined by one space, so a stored document and an evaluated one are the same
string. The reader yields a `Record` per good line and a `Problem` per bad one, tagged with
file:line, so the caller decides whether to skip or stop. Depends on the standard library
only: the evaluation reads BEIR data without the store's dependencies.
"""

from __future__ import annotations

import codecs
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from probembed.decoding import HEAD_BYTES, wide_file_refusal

#: Keys a JSONL line may use for its id, in order of preference (BEIR uses `_id`).
ID_KEYS = ("id", "_id")
#: JSON keys that are not metadata; a `metadata` object is merged into the other fields.
_CORE_KEYS = frozenset({*ID_KEYS, "text", "metadata"})
#: What JSON allows between values.
_JSON_BLANKS = re.compile(r"[ \t\n\r]*")
#: Reads one JSON value at a position (`raw_decode`).
_DECODER = json.JSONDecoder()
#: Why a JSON value deeper than Python's recursion limit is not read (`RecursionError`).
TOO_DEEP = "nested too deeply"


@dataclass(frozen=True)
class Record:
    """One document to store: id, the text to embed, free-form metadata, and its source.

    The text is kept without its surrounding whitespace, whichever front door made the record
    (a JSONL line, a service document, an adapter's text, a `Record` given in Python): one
    record sent through two of them is then the same text, not a change to re-embed, and no
    member embeds a line's indent or trailing newline (`wordllama` does)."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        """The one place every front door passes (the class says why); a text that is no str
        is left for ingest's check to name."""
        if isinstance(self.text, str):
            object.__setattr__(self, "text", stored_text(self.text))


def stored_text(text: str) -> str:
    """What a `Record` keeps of the text it is given (the class says why): what is stored,
    hashed and embedded, so what a limit on a document's length measures (the service's)."""
    return text.strip()


@dataclass(frozen=True)
class Problem:
    """An input item that could not become a record, with file:line and what was wrong."""

    source: str
    message: str
    #: The document it is about, when known (a file that exists but cannot be read): a sync
    #: keeps that document's stored version rather than taking it for gone.
    doc_id: str | None = None

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"


class OwnNote(str):
    """A note probembed adds to an error (PEP 678) for whoever made the request, a service's
    client too; notes other code adds may name what a server keeps to itself."""


def with_notes(message: str, exc: BaseException, own_only: bool = False) -> str:
    """A message told in an error's place, then the error's notes (PEP 678), which str() of
    it leaves out: a run stopped part-way notes there the problems it had skipped, which its
    report would have listed (`store.chunked`), for every front door to tell; `own_only`
    (a service's answer): probembed's own notes alone (`OwnNote`)."""
    notes = getattr(exc, "__notes__", ())
    return "\n".join([message, *(n for n in notes if isinstance(n, OwnNote) or not own_only)])


def read_jsonl(path: Path, allow_empty: bool = False) -> Iterator[Record | Problem]:
    """One record per non-blank line: `id` (or `_id`), `text`, optional `title`, metadata.

    A document with no text at all is a problem unless `allow_empty` (evaluation keeps such BEIR
    documents, as BEIR does; a store has nothing to embed for them). Each line is decoded on its
    own, so a line that is not UTF-8 is a problem of that line (naming its document when the rest of
    it is readable) and the lines after it are still read; a byte order mark at a line's start is
    skipped (before the first line, or where files were joined). A file that is one JSON array of
    such objects (a `.json` export) is read whole, each element `path[i]`; so are objects spread
    over lines (pretty-printed, one after another), each named by the line it starts on, when the
    whole file reads as such or its first object spans lines; there an object that does not parse is
    one problem naming no document, and reading goes on at the next line that starts with `{`. Else
    the file is read line by line, each bad line its own problem. A file in UTF-16 or UTF-32
    (PowerShell 5.1's `Out-File`) is one problem saying so: it was "not UTF-8" for its first line
    and malformed JSON for each after.
    """
    wide = wide_file_refusal(path)
    if wide is not None:
        yield Problem(str(path), wide)
        return
    if _is_array(path):
        yield from _read_array(path, allow_empty)
        return
    spread = _spread_objects(path)
    if spread is not None:
        for item in spread:
            if isinstance(item, Problem):
                yield item
            else:
                yield _record(item[1], f"{path}:{item[0]}", allow_empty)
        return
    with path.open("rb") as lines:
        for lineno, raw in enumerate(lines, 1):
            source = f"{path}:{lineno}"
            # a mark on any line (files joined with `cat`, one saved by a Windows tool) is
            # no text: offsets of a bad byte count from after it, as the line is read
            raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                line = raw.decode()
            except UnicodeDecodeError as exc:
                yield _undecodable(raw, source, exc)
                continue
            if line.strip():
                yield _parse_line(line, source, allow_empty)


def read_texts(path: Path, item_name: str = "document") -> dict[str, str]:
    """{id: text} of a JSONL file that must be clean: the first bad or repeated line raises,
    naming its record an `item_name` (a BEIR queries file's are queries, not documents).

    Records with an empty text are kept (BEIR keeps them), with one warning that counts them.
    """
    texts: dict[str, str] = {}
    first_seen: dict[str, str] = {}
    for item in read_jsonl(path, allow_empty=True):
        if isinstance(item, Problem):
            said = f"document {item.doc_id!r}"
            raise ValueError(str(item).replace(said, f"{item_name} {item.doc_id!r}", 1))
        if item.id in first_seen:
            raise ValueError(
                f"{item.source}: duplicate id {item.id!r} (first at {first_seen[item.id]})"
            )
        first_seen[item.id] = item.source
        texts[item.id] = item.text
    empty = [doc_id for doc_id, text in texts.items() if not text]
    if empty:
        warnings.warn(
            f"{path}: {len(empty)} {item_name}(s) with an empty text (e.g. {empty[0]!r}), "
            "kept and embedded as empty strings",
            stacklevel=2,
        )
    return texts


def _undecodable(raw: bytes, source: str, exc: UnicodeDecodeError) -> Problem:
    """The problem of a line that is not UTF-8, naming its document if the id can be read."""
    message = f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} of the line"
    read = _parse_line(raw.decode(errors="replace"), source)
    doc_id = read.id if isinstance(read, Record) else read.doc_id
    return Problem(source, message if doc_id is None else f"document {doc_id!r}: {message}", doc_id)


def _is_array(path: Path) -> bool:
    """Whether the file's first character (after a byte order mark and blanks) opens an array."""
    with path.open("rb") as file:
        head = file.read(HEAD_BYTES).removeprefix(codecs.BOM_UTF8).lstrip()
    return head.startswith(b"[")


def _spread_objects(path: Path) -> list[tuple[int, Any] | Problem] | None:
    """(starting line, object) of each JSON object of a file whose first line opens an object
    it does not close (pretty-printed), and a problem for each stretch that does not parse
    (`_objects`); or None when that is not what the file holds: read as lines, every line of
    one such object was a problem of its own. A bad stretch no longer sends the whole file to
    the line reader (one bogus problem per line, the good objects lost), so the file is taken
    for pretty-printed when it reads whole as objects, or when its first object spans lines
    (`_first_spans_lines`); JSON lines whose first line is bad stay with the line reader."""
    with path.open("rb") as file:
        lines = (raw.removeprefix(codecs.BOM_UTF8) if i == 0 else raw for i, raw in enumerate(file))
        shown = (line.strip() for line in lines if line.strip())
        first, second = next(shown, b""), next(shown, b"")  # the first two that are not blank
    if not first.startswith(b"{"):
        return None
    try:
        json.loads(first)
        return None  # an object per line: JSON lines
    except (ValueError, RecursionError):
        pass
    try:
        text = path.read_bytes().removeprefix(codecs.BOM_UTF8).decode()
    except UnicodeDecodeError:
        return None
    found = list(_objects(text, str(path)))
    if any(isinstance(item, Problem) for item in found) and not _first_spans_lines(text, second):
        return None
    return found


def _first_spans_lines(text: str, second: bytes) -> bool:
    """Whether the file's first object goes on past its first line: it parses and ends on a
    later line, or it does not parse and a next line is there and no object's start (each
    line of JSON lines starts one, so a bad first line there is followed by a `{`, or by
    nothing)."""
    start = _blanks_from(text, 0)
    try:
        end = _DECODER.raw_decode(text, start)[1]
    except (ValueError, RecursionError):
        return bool(second) and not second.startswith(b"{")
    return "\n" in text[start:end]


def _objects(text: str, path: str) -> Iterator[tuple[int, Any] | Problem]:
    """(starting line, object) of each JSON value of the text, one after another; a value that
    does not parse is one problem naming the line it starts on, and reading resumes at the next
    line that starts with `{` (where a pretty-printed export opens each of its objects; an
    object's own lines are indented), the stretch skipped told in the problem."""
    at, line, counted = 0, 1, 0
    while True:
        at = _blanks_from(text, at)
        if at == len(text):
            return
        line += text.count("\n", counted, at)
        counted = at
        try:
            obj, at = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError) as exc:
            resume = _next_object(text, at)
            last = line + text.count("\n", at, at + len(text[at:resume].rstrip()))
            lines = f"line {line}" if last == line else f"lines {line}-{last}"
            if not isinstance(exc, json.JSONDecodeError):  # a number of 5,000 digits too
                why = _beyond_limits(exc)
            elif exc.pos == len(text):  # "line 6 column 1" of a file of five lines
                why = f"{_at(exc.msg)} the end of the file"
            else:
                why = f"{_at(exc.msg)} line {exc.lineno} column {exc.colno}"
            yield Problem(f"{path}:{line}", f"malformed JSON ({why}); {lines} not read")
            at = resume
            continue
        yield line, obj


def _next_object(text: str, at: int) -> int:
    """Where reading resumes after a value that does not parse: the next line that starts
    with `{` and is not an element of an object or list around it (an export written with
    `indent=0` starts nested objects at a line start too: a reply in a thread was read as a
    record), i.e. whose object, when it parses, is followed by another object or the end."""
    while (found := text.find("\n{", at)) >= 0:
        at = found + 1
        try:
            end = _DECODER.raw_decode(text, at)[1]
        except (ValueError, RecursionError):
            return at  # bad too: its own problem, never a record
        after = _blanks_from(text, end)
        if after == len(text) or text[after] == "{":
            return at
    return len(text)


def _blanks_from(text: str, at: int) -> int:
    """Where the first character after the blanks JSON allows at `at` is."""
    return _JSON_BLANKS.match(text, at).end()  # type: ignore[union-attr]  # always matches


def _read_array(path: Path, allow_empty: bool) -> Iterator[Record | Problem]:
    """The records of a file that is one JSON array, or the one problem that it cannot be read."""
    try:
        items = json.loads(path.read_bytes().removeprefix(codecs.BOM_UTF8).decode())
    except UnicodeDecodeError as exc:
        yield Problem(str(path), f"not UTF-8: byte {exc.start} is {exc.object[exc.start]:#04x}")
        return
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        yield Problem(str(path), f"malformed JSON array ({_at(exc.msg)} {where})")
        return
    except (ValueError, RecursionError) as exc:  # a crash of the whole run, as `_parse_line`'s
        yield Problem(str(path), f"malformed JSON array ({_beyond_limits(exc)})")
        return
    for i, obj in enumerate(items):
        yield _record(obj, f"{path}[{i}]", allow_empty)


def _beyond_limits(exc: ValueError | RecursionError) -> str:
    """Why json did not read a value past its own limits, which it raises as no
    `JSONDecodeError`: nested deeper than the recursion limit, or a number of more digits
    than Python converts (`int_max_str_digits`, 4,300)."""
    return TOO_DEEP if isinstance(exc, RecursionError) else str(exc)


def _at(message: str) -> str:
    """json's message followed by "at": some end in it already ("...string starting at")."""
    return message if message.endswith(" at") else f"{message} at"


def _parse_line(line: str, source: str, allow_empty: bool = False) -> Record | Problem:
    """A JSON object with an id and a text, or the reason it is not one (naming the document,
    once its id is read: a sync keeps a document whose line is bad)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return Problem(source, f"malformed JSON ({_at(exc.msg)} character {exc.pos + 1})")
    except (ValueError, RecursionError) as exc:  # json's own limits: they stopped the run
        return Problem(source, f"malformed JSON ({_beyond_limits(exc)})")
    return _record(obj, source, allow_empty)


def record_from(obj: object, source: str) -> Record | Problem:
    """A dict given in Python read as a JSON line is (`id` or `_id`, `text`, optional
    `title`, the rest metadata), or the reason it cannot be one."""
    return _record(obj, source, allow_empty=False)


def _record(obj: object, source: str, allow_empty: bool) -> Record | Problem:
    """A parsed JSON object as a record, or the reason it is not one."""
    if not isinstance(obj, dict):
        return Problem(source, f"expected a JSON object, got {type(obj).__name__}")
    doc_id = _find_id(obj)
    if isinstance(doc_id, Problem):
        return Problem(source, doc_id.message + _wrapping(obj))
    if "text" not in obj:
        return Problem(source, f"document {doc_id!r} has no 'text' field", doc_id)
    text, title = obj["text"], obj.get("title")
    title = "" if title is None else title  # false or 0 is no string: refused below
    if not isinstance(text, str) or not isinstance(title, str):
        return Problem(source, f"document {doc_id!r}: 'text' and 'title' must be strings", doc_id)
    body = f"{title.strip()} {text.strip()}".strip()
    if not body and not allow_empty:
        return Problem(source, no_text(doc_id), doc_id)
    nested = obj.get("metadata")
    metadata = {k: v for k, v in obj.items() if k not in _CORE_KEYS}
    if isinstance(nested, dict):
        clash = sorted(k for k in nested.keys() & metadata.keys() if nested[k] != metadata[k])
        if clash:  # one of the two would be dropped without a word
            return Problem(
                source,
                f"document {doc_id!r}: field {clash[0]!r} is given twice, at the top "
                f"({metadata[clash[0]]!r:.40}) and in 'metadata' ({nested[clash[0]]!r:.40}); "
                "keep one",
                doc_id,
            )
        metadata.update(nested)
    elif nested is not None:
        return Problem(source, f"document {doc_id!r}: 'metadata' must be a JSON object", doc_id)
    if _no_title(metadata.get("title")):  # BEIR's "title": ""
        metadata.pop("title", None)
    return Record(doc_id, body, metadata, source)


def no_text(doc_id: str) -> str:
    """The problem of a record with nothing to embed, in the service's words for a blank
    text: "empty" alone hid that white space and invisible characters count as none."""
    blank = "only white space or invisible characters"
    return f"document {doc_id!r} has no text: empty or blank ({blank})"


def _wrapping(obj: dict[str, Any]) -> str:
    """What the problem of an object with no id adds when one of its fields is a list of
    objects, an export's `{"docs": [...]}`: those are the records ('' if none is). It was
    "no id field" alone."""
    key = next(
        (k for k, v in obj.items() if v and isinstance(v, list) and isinstance(v[0], dict)), None
    )
    if key is None:
        return ""
    return (
        f"; its {key!r} is a list of {len(obj[key])} objects: give those as the records, "
        "one per line or as the file's top-level array"
    )


def _no_title(title: object) -> bool:
    """Whether a title means none (null, empty or blank): left out of the metadata as chunked
    ingest leaves it out; `false` or `0` is a value, not an absence, and is never dropped."""
    return title is None or (isinstance(title, str) and not title.strip())


def _find_id(obj: dict[str, Any]) -> str | Problem:
    """The document id as a non-empty string; integer ids are accepted and stringified."""
    for key in ID_KEYS:
        if key in obj:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                return Problem("", f"'{key}' must be a string or an integer, got {value!r:.40}")
            if not str(value).strip():
                return Problem("", f"'{key}' is empty")
            return str(value)
    return Problem("", f"no id field (one of {', '.join(ID_KEYS)})")


def under_prefix(item: Any, prefix: str) -> Any:
    """The item (a Record, a document read for chunking, or a Problem) with its document id
    under `prefix`: two sources ingested into one collection (two folders' `README.md`) keep
    apart, and a sync of one leaves the other's documents."""
    if not prefix:
        return item
    if isinstance(item, Problem):
        return item if item.doc_id is None else replace(item, doc_id=prefix + item.doc_id)
    return replace(item, id=prefix + item.id)
