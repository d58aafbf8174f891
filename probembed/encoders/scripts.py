"""Which writing system a text is in: a model trained on English text reads Latin letters only.

MiniLM's WordPiece vocabulary splits Arabic and Hebrew into single letters that unrelated texts
share (they score ~0.7 against each other) and reads Thai as one unknown token, so on such text
a pipeline of English models ranks by chance while its scores and p_relevant look sure.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from itertools import islice
from typing import cast

#: What the English models read: letters whose Unicode names begin with LATIN.
LATIN = frozenset({"LATIN"})
#: Letters of a text read to tell its script: the start is as telling as the whole.
SAMPLE_LETTERS = 200
#: Name words that say how a letter is drawn, not which script it belongs to.
_FORMS = frozenset({"FULLWIDTH", "HALFWIDTH"})
#: Name words of a script's letters (ideographs are named IDEOGRAPH-4E00).
_SCRIPT_LETTER = frozenset({"LETTER", "SYLLABLE", "CHARACTER", "LIGATURE"})
#: Scripts written together in one language, counted as one.
_SAME = {"HIRAGANA": "CJK", "KATAKANA": "CJK"}
#: Scripts whose names read better otherwise than title-cased.
_LABELS = {
    "CJK": "Chinese/Japanese (CJK)",
    "HANGUL": "Korean (Hangul)",
}


class UnreadScriptWarning(UserWarning):
    """Texts in a script none of the models a pipeline weighs was trained on."""


def script_of(text: str) -> str | None:
    """The script of most of a text's first letters (the first word of their Unicode names:
    LATIN, CJK, ARABIC, ...); None for a text without letters or with no script holding
    more than half of them. ASCII text is LATIN at once."""
    if text.isascii():
        return "LATIN" if any(char.isalpha() for char in text) else None
    letters = islice((char for char in text if char.isalpha()), SAMPLE_LETTERS)
    counts = Counter(_script(char) for char in letters)
    counts.pop(None, None)
    if not counts:
        return None
    script, count = counts.most_common(1)[0]
    return script if count > counts.total() / 2 else None


def scripts_in(texts: Iterable[str]) -> set[str]:
    """The scripts the texts are mostly in, each text read once."""
    found = {script_of(text) for text in texts}
    found.discard(None)
    return cast(set[str], found)


def label(script: str) -> str:
    """A script's name for a person: Arabic, Thai, Chinese/Japanese (CJK)."""
    return _LABELS.get(script, script.title())


@lru_cache(maxsize=8192)
def _script(char: str) -> str | None:
    """The script of one letter, from its Unicode name (FULLWIDTH LATIN ... is LATIN, kana
    are CJK); None for a letter-like sign of no script (MICRO SIGN, MATHEMATICAL ITALIC
    SMALL X, DOUBLE-STRUCK CAPITAL R), which says nothing of the text's language."""
    words = unicodedata.name(char, "").split()
    if not _SCRIPT_LETTER & set(words) and not any(w.startswith("IDEOGRAPH") for w in words):
        return None
    while len(words) > 1 and words[0] in _FORMS:
        words = words[1:]
    return _SAME.get(words[0], words[0])
