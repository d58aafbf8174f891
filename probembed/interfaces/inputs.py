"""What commands read besides options: texts given as arguments, in a file or on stdin."""

from __future__ import annotations

import sys
from pathlib import Path

from probembed.encoders.base import is_blank
from probembed.interfaces.console import fail


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
    texts: list[str] | None, file: Path | None, kind: str = "texts", given: str = "argument"
) -> list[str]:
    """Texts from arguments (or an option, `given`), else one per line of a file, else one
    per line of stdin (also for a lone `-` argument); blank lines of a file are passed over,
    a blank argument refused."""
    if texts == ["-"]:
        texts = None
    if texts and file is not None:
        raise fail(f"give the {kind} as arguments or with --file, not both")
    if texts:
        for i, text in enumerate(texts, 1):
            if is_blank(text):
                raise fail(f"{given} {i} ({text!r:.40}) is blank: it holds no text")
        return texts
    if file is not None:
        raw, where = _utf8_file(file), f"--file {file}"
    elif sys.stdin is not None and not sys.stdin.isatty():  # None: stdin closed (`<&-`)
        stream = getattr(sys.stdin, "buffer", None)  # bytes: its text decoder hid bad ones
        raw = sys.stdin.read() if stream is None else _utf8(stream.read(), "stdin")
        where = "stdin"
    else:
        raise fail(f"no {kind}: pass them as arguments, with --file, or on stdin")
    raw = raw.removeprefix("\ufeff")  # a Windows editor's byte order mark is no text
    if not raw:  # e.g. `probembed encode` with no arguments, run from a script
        raise fail(
            f"no {kind}: {where} was empty; pass them as arguments, with --file, or on stdin"
        )
    lines = [line for line in _lines(raw) if not is_blank(line)]
    if not lines:
        raise fail(f"no {kind}: {where} holds only blank lines")
    return lines


def _lines(text: str) -> list[str]:
    """Lines ended by \n (or \r\n) only: str.splitlines also cuts at form feeds, U+2028 and
    other separators inside a line, and the vectors no longer lined up with the input lines."""
    return [line.removesuffix("\r") for line in text.split("\n")]
