"""Bytes that are not UTF-8 text: which encoding they look like, and advice that converts them
without garbling them. One judgement for every reader that refuses such bytes (a document, a
JSONL file, stdin); the standard library only, as `probembed.documents` needs.

Every file not UTF-8 was told to run `iconv -f latin1`: for a UTF-8 file with one bad byte
that turns each `é` into `Ã©`, and for a Windows-1252 file its quotes into C1 controls; and
UTF-16 without a byte order mark was called binary for its NUL bytes.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

#: Bytes of a file's start looked at to tell its encoding (and, for a reader, its form).
HEAD_BYTES = 4096
#: Byte order marks and the encoding each opens, the longest first (UTF-32LE's starts with
#: UTF-16LE's).
_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
#: Encodings with NUL bytes in plain text, tried on bytes without a mark, the widest first:
#: (codec, iconv's name, bytes a unit, which byte of a unit is the high one).
_UNMARKED = (
    ("utf-32-le", "UTF-32LE", 4, 3),
    ("utf-32-be", "UTF-32BE", 4, 0),
    ("utf-16-le", "UTF-16LE", 2, 1),
    ("utf-16-be", "UTF-16BE", 2, 0),
)
#: Share of a reading's characters that must be printable (or line and tab breaks) for bytes
#: to be taken for text in that encoding, not binary data that happens to decode.
_PRINTABLE_SHARE = 0.95
#: Share of the units whose high byte must be NUL: text mostly of Latin letters, whose
#: UTF-16 is every other byte NUL (bytes without NUL, or with few, are left for binary).
_NUL_HIGH_SHARE = 0.5
#: Characters a UTF-8 decode with "surrogateescape" makes of bytes that are not UTF-8.
_ESCAPED = re.compile("[\udc80-\udcff]")
#: Those of them from bytes 0x80-0x9F: Windows-1252's quotes and dashes, Latin-1's controls.
_C1_ESCAPED = re.compile("[\udc80-\udc9f]")
#: Characters outside ASCII that UTF-8 decoded (its multi-byte sequences).
_MULTIBYTE = re.compile("[^\x00-\x7f\udc80-\udcff]")


def wide_unicode(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 a file's first bytes are in, as iconv names it, or None: by its
    byte order mark (Notepad's "Unicode", PowerShell 5.1's `Out-File`), else the first
    encoding without a mark whose units' high bytes are mostly NUL (Latin text in UTF-16LE is
    every other byte NUL) and that reads the bytes as printable text with no NUL character."""
    for mark, name in _MARKS:
        if head.startswith(mark):
            return name
    if b"\x00" not in head:
        return None
    unmarked = (
        name
        for codec, name, unit, high in _UNMARKED
        if _high_bytes_nul(head, unit, high) and _is_text(head, codec)
    )
    return next(unmarked, None)


def _high_bytes_nul(head: bytes, unit: int, high: int) -> bool:
    """Whether most of the units of this width have their high byte (`high` within each) NUL."""
    column = head[high : len(head) - len(head) % unit : unit]
    return bool(column) and column.count(0) >= _NUL_HIGH_SHARE * len(column)


def _is_text(head: bytes, codec: str) -> bool:
    """Whether `codec` reads these bytes as text: each decodes, none to a NUL character, and
    nearly all to printable ones (or line and tab breaks)."""
    try:  # not final: the sample may end inside a character
        text = codecs.getincrementaldecoder(codec)("strict").decode(head)
    except UnicodeDecodeError:
        return False
    printable = sum(c.isprintable() or c in "\t\n\r\f\v" for c in text)
    return bool(text) and "\x00" not in text and printable >= _PRINTABLE_SHARE * len(text)


def wide_refusal(head: bytes) -> str | None:
    """Why a file starting with these bytes is not read as UTF-8, when it is UTF-16 or UTF-32
    (`wide_unicode`), with the iconv that converts it; None otherwise."""
    name = wide_unicode(head)
    if name is None:
        return None
    unmarked = name.endswith(("LE", "BE"))
    how = " without a byte order mark (NUL bytes between its letters)" if unmarked else ""
    return f"{name} text{how}, not UTF-8; convert it, e.g. `iconv -f {name} -t UTF-8`"


def wide_file_refusal(path: Path) -> str | None:
    """Why the file is not read, when it is UTF-16 or UTF-32 (`wide_refusal` of its start);
    None otherwise: a reader calls it before, or on, its first bad byte."""
    with path.open("rb") as file:
        return wide_refusal(file.read(HEAD_BYTES))


def conversion_advice(data: bytes) -> str:
    """How to make these bytes UTF-8, judged by what they hold: mostly UTF-8 with a few bad
    bytes (no whole-file conversion: it would garble the rest), Windows-1252 (bytes 0x80-0x9F,
    its quotes and dashes, which Latin-1 reads as control characters), else Latin-1."""
    text = data.decode("utf-8", "surrogateescape")
    bad = len(text) - len(_ESCAPED.sub("", text))
    decoded = len(text) - len(_MULTIBYTE.sub("", text))
    if decoded >= bad:
        return (
            f"{bad} byte(s) not UTF-8 in text otherwise UTF-8 ({decoded} characters beyond "
            "ASCII), which converting the whole file from another encoding would garble: "
            "mend those bytes, or drop them with `iconv -f UTF-8 -t UTF-8 -c`"
        )
    if _C1_ESCAPED.search(text):
        return (
            "it looks like Windows-1252 (bytes 0x80-0x9F are quotes and dashes there, control "
            "characters in Latin-1): convert it, e.g. `iconv -f CP1252 -t UTF-8`"
        )
    return (
        "it may be Latin-1 (ISO-8859-1): convert it, e.g. `iconv -f LATIN1 -t UTF-8` (after "
        "-f, name its encoding if it is another)"
    )
