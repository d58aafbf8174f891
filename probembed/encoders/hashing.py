"""A dependency-free encoder: signed feature hashing of character n-grams, for tests."""

from __future__ import annotations

import re
import zlib
from functools import lru_cache

import numpy as np

from probembed.encoders.base import Encoder

NGRAM_SIZES = (3, 4, 5)
EMPTY_WORD = "<>"
WORD = re.compile(r"\w+")
ALGORITHM = "char3-5-crc32-v1"


class HashingEncoder(Encoder):
    """Counts of the 3- to 5-grams of each lower-cased `<word>`, hashed into `dim` slots.

    Each feature lands in slot crc32(gram) mod dim with a sign from the next bit of the same
    hash, so collisions cancel on average. crc32 (not Python's salted `hash`) makes the vectors
    identical across processes and machines. A text with no word characters (`""`, `"!?"`) is
    counted as the single feature `<>`: a fixed non-zero vector. There is no truncation: the
    cost is linear in the text's length and each distinct word is hashed once per process.
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
        features = [word_features(word, self.dim) for word in words]
        slots = np.concatenate([slot for slot, _ in features])
        signs = np.concatenate([sign for _, sign in features])
        return np.bincount(slots, weights=signs, minlength=self.dim).astype(np.float32)


@lru_cache(maxsize=65_536)
def word_features(word: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(slots, signs) of the n-grams of `<word>`, or of `<>` alone for the empty word."""
    padded = f"<{word}>"
    grams = [padded[i : i + n] for n in NGRAM_SIZES for i in range(len(padded) - n + 1)]
    hashes = np.array([zlib.crc32(gram.encode()) for gram in grams or [EMPTY_WORD]], dtype=np.int64)
    return hashes % dim, np.where((hashes // dim) % 2 == 0, 1.0, -1.0)
