"""Where a text may be cut without splitting what a reader sees as one character.

A cut falls only between grapheme clusters (Unicode's extended grapheme clusters, UAX #29):
never between a letter and its accents, inside an emoji sequence joined by ZWJ or a flag (a
pair of regional indicators, or a tag sequence such as Scotland's), a Hangul syllable written
as jamo, an Indic conjunct, a CRLF or a surrogate pair. The rules are read from `unicodedata`
alone and look back a few characters from the cut, so a cut costs nothing that grows with
the text and gives the same chunks whether or not `regex` is installed. They err one way: a
place they call a boundary is one for `regex`'s `\\X` (the tests check it), while a few
boundaries `\\X` finds they do not (after a ZWJ or a virama before any letter, next to an
unassigned code point), which only moves a cut a character earlier.
"""

from __future__ import annotations

import unicodedata

ZWJ = "\u200d"
#: Joined to what comes before them though no mark: ZWNJ, the emoji skin tones, halfwidth
#: katakana sound marks, Thai and Lao SARA AM, and the tags of an emoji tag sequence.
_EXTENDING = frozenset(
    [0x200C, 0xFF9E, 0xFF9F, 0x0E33, 0x0EB3, *range(0x1F3FB, 0x1F400), *range(0xE0020, 0xE0080)]
)
#: Joined to what comes after them (Grapheme_Cluster_Break=Prepend): Arabic and Syriac
#: number signs, repha forms.
_PREPEND = frozenset(
    [
        *range(0x0600, 0x0606),
        0x06DD,
        0x070F,
        0x0890,
        0x0891,
        0x08E2,
        0x0D4E,
        0x110BD,
        0x110CD,
        0x111C2,
        0x111C3,
        0x1193F,
        0x11941,
        0x11A3A,
        *range(0x11A84, 0x11A8A),
        0x11D46,
    ]
)
#: Formatting characters that are not controls for cluster breaking (they join).
_NOT_CONTROL = frozenset([0x200C, 0x200D]) | _PREPEND
#: Regional indicators, two of which make a flag.
_RI = range(0x1F1E6, 0x1F200)
#: Marks looked back over for a virama before a cut: more than any real text stacks (the
#: Stream-Safe Text Format, UAX #15, allows 30 in a row); past it, no cut.
_MARKS_SEEN = 32


def last_boundary(text: str, start: int, stop: int) -> int:
    """The last place in (start, stop] that splits no grapheme cluster, `start` read as the
    start of one; one cluster longer than the whole range (hundreds of marks on one letter,
    which no text has) is cut at `stop` anyway, but never inside a surrogate pair or CRLF,
    so a bound on length always holds."""
    cut = stop
    while cut > start and not is_boundary(text, cut, start):
        cut -= 1
    if cut > start or not _pair(text, stop):
        return cut if cut > start else stop
    return stop - 1 if stop - 1 > start else stop + 1


def is_boundary(text: str, i: int, floor: int = 0) -> bool:
    """Whether a cut before text[i] splits no grapheme cluster; `floor`, a known boundary at
    or before i, bounds how far back the rules look (a run of flags is paired from it)."""
    if i <= floor or i >= len(text):
        return True
    before, after = text[i - 1], text[i]
    if _pair(text, i):
        return False
    if _control(before) or _control(after):
        return True
    if _unassigned(before) or _unassigned(after) or _hangul_joins(before, after):
        return False
    if _extends(after) or before == ZWJ or ord(before) in _PREPEND:
        return False
    if unicodedata.category(after)[0] == "L" and _after_virama(text, i, floor):
        return False
    if ord(before) in _RI and ord(after) in _RI:
        run = i
        while run > floor and ord(text[run - 1]) in _RI:
            run -= 1
        return (i - run) % 2 == 0
    return True


def _pair(text: str, i: int) -> bool:
    """Whether text[i - 1] and text[i] are one unit: a CRLF, or a surrogate pair."""
    if not 0 < i < len(text):
        return False
    before, after = text[i - 1], text[i]
    return (before, after) == ("\r", "\n") or (
        "\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff"
    )


def _control(char: str) -> bool:
    """A control, line or paragraph separator, or format character that no cluster spans."""
    category = unicodedata.category(char)
    if category in ("Cc", "Zl", "Zp"):
        return True
    return category == "Cf" and ord(char) not in _NOT_CONTROL and ord(char) not in _EXTENDING


def _unassigned(char: str) -> bool:
    """Unassigned in this Python's Unicode: it may be a mark a newer version added."""
    return unicodedata.category(char) == "Cn"


def _extends(char: str) -> bool:
    """Whether the character joins the one before it: a mark (an accent, a vowel sign, a
    variation selector), a joiner, or one of `_EXTENDING`."""
    return unicodedata.category(char)[0] == "M" or char == ZWJ or ord(char) in _EXTENDING


def _after_virama(text: str, i: int, floor: int) -> bool:
    """Whether a virama (canonical combining class 9) is among the marks just before i: a
    consonant after it may form a conjunct (UAX #29's GB9c, read for every script)."""
    j = i
    while j > floor and i - j < _MARKS_SEEN and _extends(text[j - 1]):
        if unicodedata.combining(text[j - 1]) == 9:
            return True
        j -= 1
    return i - j >= _MARKS_SEEN


def _hangul_joins(before: str, after: str) -> bool:
    """Whether two Hangul jamo or syllables are one syllable (UAX #29's GB6 to GB8)."""
    a, b = _jamo(before), _jamo(after)
    return (
        (a == "L" and b in ("L", "V", "LV", "LVT"))
        or (a in ("LV", "V") and b in ("V", "T"))
        or (a in ("LVT", "T") and b == "T")
    )


def _jamo(char: str) -> str:
    """The Hangul syllable type of a character: L, V, T, LV, LVT, or "" for none."""
    code = ord(char)
    if 0x1100 <= code <= 0x115F or 0xA960 <= code <= 0xA97C:
        return "L"
    if 0x1160 <= code <= 0x11A7 or 0xD7B0 <= code <= 0xD7C6:
        return "V"
    if 0x11A8 <= code <= 0x11FF or 0xD7CB <= code <= 0xD7FB:
        return "T"
    if 0xAC00 <= code <= 0xD7A3:
        return "LV" if (code - 0xAC00) % 28 == 0 else "LVT"
    return ""
