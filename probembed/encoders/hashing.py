"""A dependency-free encoder: signed feature hashing of character n-grams, for tests."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from functools import lru_cache

import numpy as np

from probembed.encoders.base import Encoder

NGRAM_SIZES = (3, 4, 5)
EMPTY_WORD = "<>"
WORD = re.compile(r"\w+")
ALGORITHM = "char3-5-crc32-v1"
#: Longest word whose features are cached: a cap of 65,536 words of any length held one
#: 20 MB line of unspaced Chinese, one word, as a gigabyte of arrays for the process's life.
#: A longer word (a run of CJK text, a URL) is hashed each time it is met.
CACHED_CHARS = 24
#: Words cached at most, least recently used dropped: with `CACHED_CHARS`, about 48 MiB at
#: most (tracemalloc, distinct 24-character words; 26 MiB of 8-character ones).
CACHED_WORDS = 32_768


class HashingEncoder(Encoder):
    """Counts of the 3- to 5-grams of each lower-cased `<word>`, hashed into `dim` slots.

    Each feature lands in slot crc32(gram) mod dim with a sign from the next bit of the same
    hash, so collisions cancel on average. crc32 (not Python's salted `hash`) makes the vectors
    identical across processes and machines. A text with no word characters (`""`, `"!?"`) is
    counted as the single feature `<>`: a fixed non-zero vector. There is no truncation: the
    cost is linear in the text's length, and a word of up to `CACHED_CHARS` characters is
    hashed once while it stays among the `CACHED_WORDS` most recently met.
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise ValueError(f"hash encoder dim must be an int >= 2, got {dim!r}")
        self.name = "hash"
        self.dim = dim
        self.params = {"dim": dim}

    @property
    def fingerprint(self) -> str:
        """Depends only on the algorithm and dim, never on library versions."""
        return f"{self.name}:{self.dim}:{ALGORITHM}"

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """One bincount per text over the cached slots and signs of its words."""
        return np.stack([self._embed_one(text) for text in texts])

    def _embed_one(self, text: str) -> np.ndarray:
        """Signed counts of the text's n-gram features."""
        words = WORD.findall(text.lower()) or [""]
        features = [
            cached_features(word, self.dim)
            if len(word) <= CACHED_CHARS
            else word_features(word, self.dim)
            for word in words
        ]
        slots = np.concatenate([slot for slot, _ in features])
        signs = np.concatenate([sign for _, sign in features])
        return np.bincount(slots, weights=signs, minlength=self.dim).astype(np.float32)


def word_features(word: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(slots, signs) of the n-grams of `<word>`, or of `<>` alone for the empty word; the
    grams hashed one at a time, never held as strings (a 20 MB word's 60 million of them
    took gigabytes)."""
    padded = f"<{word}>"
    count = sum(max(len(padded) - n + 1, 0) for n in NGRAM_SIZES)
    grams: Iterator[str] = (
        padded[i : i + n] for n in NGRAM_SIZES for i in range(len(padded) - n + 1)
    )
    if not count:
        grams, count = iter([EMPTY_WORD]), 1
    hashes = np.fromiter((zlib.crc32(g.encode()) for g in grams), dtype=np.int64, count=count)
    return hashes % dim, np.where((hashes // dim) % 2 == 0, 1.0, -1.0)


#: `word_features` of the short words met (`HashingEncoder` asks it for those alone).
cached_features = lru_cache(maxsize=CACHED_WORDS)(word_features)
