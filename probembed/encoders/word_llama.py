"""WordLlama (wordllama): static 256-d token vectors from an LLM's embedding table, averaged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from probembed.encoders.base import Encoder, package_versions
from probembed.encoders.scripts import LATIN

PACKAGE = "wordllama"
MAX_TOKENS = 2048


class WordLlamaEncoder(Encoder):
    """Mean of the text's token vectors (config l2_supercat, 256-d), loaded from the wheel only.

    Cost and memory grow with the longest text in a batch, so texts are cut at 2,048 tokens
    (a bag of tokens barely changes past that). A text with no tokens at all (`""`) would
    average nothing and give zeros; it gets the mean of the whole token table instead, the
    vector of a text about nothing in particular.
    """

    name = "wordllama"
    dim = 256
    scripts = LATIN  # trained on English text

    def __init__(self) -> None:
        with root_logging_kept():
            import wordllama

        folder = Path(wordllama.__file__).parent
        # The wheel keeps its tokenizer in `tokenizers/`, which `load` only finds via cache_dir.
        self.model = wordllama.WordLlama.load(cache_dir=folder, disable_download=True)
        self.model.tokenizer.enable_truncation(MAX_TOKENS)
        self.empty = self.model.embedding.mean(axis=0).astype(np.float32)

    @property
    def fingerprint(self) -> str:
        """Package version plus the token cut."""
        return f"{self.name}:{self.dim}:max{MAX_TOKENS}:{package_versions(PACKAGE)}"

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """Pooled token vectors; token-less texts get the table's mean vector."""
        vectors = self.model.embed(texts, batch_size=len(texts))
        vectors[~vectors.any(axis=1)] = self.empty
        return vectors


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """Undo the `logging.basicConfig(level=INFO)` that importing wordllama runs."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers
