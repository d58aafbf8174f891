"""What commands read besides options: texts given as arguments, in a file or on stdin."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probembed.encoders.base import is_blank
from probembed.interfaces.console import fail, listed

#: The most places `Lines.places` names before it counts the rest.
PLACES_NAMED = 10


@dataclass(frozen=True)
class Lines:
    """Texts a command read, each with its place: a warning about some of them (a query
    cut short) names which, where `search --file` of 40 questions said only "a query"."""

    texts: list[str]
    #: Each text's 1-based line of the file or stdin, or its argument's position.
    numbers: list[int]
    #: Where they were read: `--file PATH` or `stdin`; None for arguments.
    source: str | None
    #: Blank lines of the file or stdin passed over.
    blank: int

    def places(self, positions: Sequence[int]) -> str:
        """Where the texts at these positions (of `texts`) were read, the first PLACES_NAMED
        named: 'lines 2, 5, 9 of --file q.txt', 'lines 1, 2, ..., 10 and 4 more of stdin',
        'argument 3'."""
        kind = "argument" if self.source is None else "line"
        shown = listed([str(self.numbers[i]) for i in positions], PLACES_NAMED)
        where = "" if self.source is None else f" of {self.source}"
        return f"{kind}{'s' if len(positions) > 1 else ''} {shown}{where}"


def _utf8_file(file: Path) -> str:
    """A file's text, or a refusal naming the file."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise fail(f"cannot read --file {file}: {exc.strerror}") from exc
    return _utf8(data, f"--file {file}")


def _utf8(data: bytes, where: str) -> str:
    """Bytes read as UTF-8 text, or a refusal that says what they are instead and how to
    convert them, as ingest says it of a document: UTF-16 or a NUL byte (binary) was embedded
    as text, and other encodings met on stdin read as lone surrogates."""
    from probembed.store.formats import not_text, not_utf8

    why = not_text(data)
    if why is None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            why = not_utf8(Path(where), exc.start, data, exc.start).message
    raise fail(f"cannot read {where}: {why}")


def read_texts(
    texts: list[str] | None,
    file: Path | None,
    kind: str = "texts",
    given: str = "argument",
    file_option: str | None = "--file",
) -> list[str]:
    """Texts from arguments (or an option, `given`), else one per line of a file, else one
    per line of stdin (for a lone `-` argument or `--file -` too); blank lines of a file or
    stdin are passed over, a blank argument refused. `file_option`: the command's option
    for a file (None: it has none), as refusals name it."""
    return read_lines(texts, file, kind, given, file_option).texts


def read_lines(
    texts: list[str] | None,
    file: Path | None,
    kind: str = "texts",
    given: str = "argument",
    file_option: str | None = "--file",
) -> Lines:
    """`read_texts`'s texts with their places and how many blank lines of the file or stdin
    were passed over, for a command that counts what it wrote (a vector per line, but not per
    blank one) or names the lines a warning is about."""
    if texts == ["-"]:
        texts = None
    if texts and file is not None:
        raise fail(f"give the {kind} as arguments or with --file, not both")
    if file is not None and str(file) == "-":
        file = None  # stdin, as a lone `-` argument reads it
    ways = "as arguments, with --file, or on stdin" if file_option else "as arguments or on stdin"
    if texts:
        for i, text in enumerate(texts, 1):
            if is_blank(text):
                raise fail(f"{given} {i} ({text!r:.40}) is blank: it holds no text")
        return Lines(texts, list(range(1, len(texts) + 1)), None, 0)
    if file is not None:
        raw, where = _utf8_file(file), f"{file_option} {file}"
    elif sys.stdin is not None and not sys.stdin.isatty():  # None: stdin closed (`<&-`)
        stream = getattr(sys.stdin, "buffer", None)  # bytes: its text decoder hid bad ones
        raw = sys.stdin.read() if stream is None else _utf8(stream.read(), "stdin")
        where = "stdin"
    else:
        raise fail(f"no {kind}: pass them {ways}")
    raw = raw.removeprefix("\ufeff")  # a Windows editor's byte order mark is no text
    if not raw:  # e.g. `probembed encode` with no arguments, run from a script
        raise fail(f"no {kind}: {where} was empty; pass them {ways}")
    every = _lines(raw.removesuffix("\n"))
    numbers = [n for n, line in enumerate(every, 1) if not is_blank(line)]
    if not numbers:
        raise fail(f"no {kind}: {where} holds only blank lines")
    return Lines([every[n - 1] for n in numbers], numbers, where, len(every) - len(numbers))


def _lines(text: str) -> list[str]:
    """Lines ended by \n (or \r\n) only: str.splitlines also cuts at form feeds, U+2028 and
    other separators inside a line, and the vectors no longer lined up with the input lines."""
    return [line.removesuffix("\r") for line in text.split("\n")]
