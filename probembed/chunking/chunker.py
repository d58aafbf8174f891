"""Cutting a document into chunks that every member model reads whole.

Within each section, paragraphs are kept whole when they fit; a paragraph that does not is cut
into sentences, a sentence that does not into lines, a line that does not into runs of words,
a word that does not between grapheme clusters (`graphemes`). A Markdown fenced code block
(`Section.code`) is one paragraph, blank lines and all, and one that does not fit is cut into
lines, never at a `. ` (a method call, a decimal). Only what a decision needs is
tokenized: a long span's start first (PROBE_CHARS), and at most BATCH_CHARS of text per call
of the counter. The pieces are then packed in order into chunks of at most `max_tokens`,
counted with the pipeline's own tokenizers (the most any member makes of the text), and of at
most `max_chars` characters (a text a tokenizer sees few tokens in, Thai or emoji to WordPiece,
unspaced Chinese to a word count, would otherwise make a chunk of any length); each chunk after
the first of a section starts with the previous chunk's last pieces up to `overlap_tokens`.
The result depends only on the text, the settings and the tokenizers: the same document
always gives the same chunks.

`stream_chunks` gives the same chunks for a document read in segments (a file too large to
hold): packing is greedy, so a chunk is final once the next piece does not fit, and only the
pieces of the chunk being filled are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from probembed.chunking.graphemes import last_boundary
from probembed.chunking.structure import (
    Section,
    Span,
    in_code,
    lines,
    paragraphs,
    sentences,
    words,
)

if TYPE_CHECKING:
    import numpy as np

#: Tokens per text, as the pipeline counts them (`Pipeline.count_tokens`).
Counter = Callable[[Sequence[str]], "Sequence[int] | np.ndarray"]
#: Characters of a long span counted first: far more than any budget's worth of text, so a
#: span whose start is already over the budget is cut without tokenizing the rest.
PROBE_CHARS = 2**14
#: Characters of text per call of the counter, so its encodings stay small.
BATCH_CHARS = 2**18
#: Characters a chunk may hold per token of its size (`ChunkSettings.max_chars`). On English
#: and European text (SciFact, the Python docs, Vim's tutors in 25 European languages) the
#: built-in pipelines' counts, whose WordPiece members count at least a token a word, give a
#: run of words at most 12.1 characters per token of any size from 8 tokens up (6.3 at 256):
#: the cap binds only on text they see few tokens in (`benchmarks/chunking.py --part chars`).
#: A word count alone (the `hash` test pipeline) reaches 18 on prose at 8 tokens and 36 on
#: the Python docs' tables padded with spaces, which it does cut.
CHARS_PER_TOKEN = 16


@dataclass(frozen=True)
class ChunkSettings:
    """Chunk size and overlap in tokens; the size is capped at the pipeline's limit."""

    max_tokens: int = 256
    overlap_tokens: int = 32

    @classmethod
    def sized(cls, max_tokens: int, overlap_tokens: int | None = None) -> ChunkSettings:
        """Settings of this size; without an overlap, the default 32 where it fits (under half
        the size), else the most that does: a size of 8 given alone was refused for an
        overlap the caller never chose."""
        return GivenChunking(max_tokens, overlap_tokens).over(cls())

    def over(self, base: ChunkSettings) -> ChunkSettings:
        """Whole settings given: every document at these, whatever `base` it was cut at."""
        return self

    def __post_init__(self) -> None:
        for name in ("max_tokens", "overlap_tokens"):  # 2.0 would key other digests than 2
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if self.max_tokens < 8:
            raise ValueError(f"max_tokens must be at least 8, got {self.max_tokens}")
        if not 0 <= self.overlap_tokens < self.max_tokens // 2:
            raise ValueError(
                f"overlap_tokens must be in [0, max_tokens / 2), got {self.overlap_tokens} "
                f"for max_tokens={self.max_tokens}"
            )

    @property
    def max_chars(self) -> int:
        """The most characters a chunk holds, whatever the tokenizers count in it: 400,000
        characters of Thai are one WordPiece token, and were one chunk."""
        return self.max_tokens * CHARS_PER_TOKEN

    def capped(self, limit: int | None) -> ChunkSettings:
        """These settings with the size at most `limit` (the shortest member's)."""
        if limit is None or limit >= self.max_tokens:
            return self
        return ChunkSettings(limit, min(self.overlap_tokens, limit // 2 - 1))


@dataclass(frozen=True)
class GivenChunking:
    """A chunk size, an overlap or both as a caller gave them (`--chunk-tokens`, `--overlap`,
    the service's `max_tokens`, `overlap_tokens`): the one not given comes from each
    document's own settings (`over`), where the defaults filled it, so `--overlap 8` alone
    re-cut a folder kept at 128 tokens at 256."""

    max_tokens: int | None = None
    overlap_tokens: int | None = None

    @classmethod
    def of(cls, max_tokens: int | None, overlap_tokens: int | None) -> GivenChunking | None:
        """What a caller gave, or None where it gave neither: chunked ingest then cuts each
        stored document at the settings it was cut at before, not at the defaults."""
        if max_tokens is None and overlap_tokens is None:
            return None
        return cls(max_tokens, overlap_tokens)

    def __post_init__(self) -> None:
        """Checked as `ChunkSettings` checks them, a size with the overlap it brings; an
        overlap alone as a count, since whether it fits is each document's size's to say."""
        if self.max_tokens is not None:
            self.over(ChunkSettings())
            return
        value = self.overlap_tokens
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise ValueError(f"overlap_tokens must be in [0, max_tokens / 2), got {value!r}")

    def over(self, base: ChunkSettings) -> ChunkSettings:
        """The settings a document cut at `base` is cut at: the values given, the others
        `base`'s, its overlap lowered under half of a smaller size given (as the default's
        is); an overlap given that is not under half of `base`'s size is a ValueError."""
        size = base.max_tokens if self.max_tokens is None else self.max_tokens
        overlap = self.overlap_tokens
        if overlap is None:
            fits = isinstance(size, int) and size >= 8  # else ChunkSettings names the size
            overlap = min(base.overlap_tokens, size // 2 - 1) if fits else base.overlap_tokens
        return ChunkSettings(size, overlap)


@dataclass(frozen=True)
class Chunk:
    """One passage: its position in the document, its exact character span, its headings."""

    index: int
    start: int
    end: int
    text: str
    headings: tuple[str, ...]
    tokens: int
    #: Whether the character cap (`ChunkSettings.max_chars`) ended it where the token budget
    #: would have let it run on (the ingest report counts these).
    by_chars: bool = False


@dataclass(frozen=True)
class Segment:
    """A run of a document read as a stream: whole lines at offset `start` (a line over
    `structure.LINE_CHARS` in the pieces `structure.line_cuts` makes), cut only where no chunk
    can differ for it (a section's start, the end of a paragraph break outside fenced code,
    such a line cut)."""

    start: int
    text: str
    headings: tuple[str, ...]
    #: Whether a new section (with these headings) starts here.
    opens: bool
    #: The fenced code blocks that reach into it, in document offsets (`Section.code`); a
    #: stream cuts no segment at a blank line inside one, and an open one runs to its end.
    code: tuple[Span, ...] = ()


def chunk_text(
    text: str, sections: Sequence[Section], count: Counter, settings: ChunkSettings
) -> list[Chunk]:
    """The document's chunks, in order; each is `text[start:end]` and fits `max_tokens` and
    `max_chars`."""
    fit = _fit(count, settings)
    chunks: list[Chunk] = []
    for section in sections:
        pieces = _fitting_pieces(text, (section.start, section.end), fit, section.code)
        for start, end, tokens, by_chars in _pack(pieces, fit, settings.overlap_tokens, True)[0]:
            chunks.append(
                Chunk(
                    len(chunks),
                    start,
                    end,
                    text[start:end],
                    section.headings,
                    tokens + fit.overhead,
                    by_chars,
                )
            )
    return _verified(chunks, fit, settings.max_tokens, text, 0)


def stream_chunks(
    segments: Iterable[Segment], count: Counter, settings: ChunkSettings
) -> Iterator[Chunk]:
    """The chunks `chunk_text` gives for the whole document, from its segments in order,
    holding only the text of the chunk being filled and of the current segment."""
    fit = _fit(count, settings)
    index, buffer, base = 0, "", 0  # buffer: the document's text from offset base on
    pending: list[tuple[int, int, int]] = []  # pieces not yet in a finished chunk (offsets)
    headings: tuple[str, ...] = ()

    def drain(final: bool) -> list[Chunk]:
        nonlocal index, buffer, base, pending
        spans, rest = _pack(pending, fit, settings.overlap_tokens, final)
        pending = pending[rest:]
        local = [
            Chunk(0, s - base, e - base, buffer[s - base : e - base], headings, n + fit.overhead, c)
            for s, e, n, c in spans
        ]
        done = _verified(local, fit, settings.max_tokens, buffer, index)
        index += len(done)
        shifted = [replace(c, start=c.start + base, end=c.end + base) for c in done]
        keep = pending[0][0] if pending else base + len(buffer)
        buffer, base = buffer[keep - base :], keep
        return shifted

    for segment in segments:
        if segment.opens:
            yield from drain(True)
            buffer, base, headings = "", segment.start, segment.headings
        if segment.start != base + len(buffer):
            raise ValueError(
                f"segment at {segment.start} does not follow offset {base + len(buffer)}"
            )
        buffer += segment.text
        span = (segment.start - base, len(buffer))
        code = [(s - base, e - base) for s, e in segment.code]
        pieces = _fitting_pieces(buffer, span, fit, code)
        pending += [(s + base, e + base, n) for s, e, n in pieces]
        yield from drain(False)
    yield from drain(True)


def stoppable(count: Counter, stop: Callable[[], None]) -> Counter:
    """`count` asking `stop` first, which raises to end the chunking: every loop of chunking
    counts (per section, per piece cut further, per BATCH_CHARS of text), so a stopped write
    (a service shutting down) ends within one call of the tokenizers, where chunking a large
    document went on for seconds (~10 s for 300,000 words with `retrieval`)."""

    def counted(texts: Sequence[str]) -> Sequence[int] | np.ndarray:
        stop()
        return count(texts)

    return counted


@dataclass(frozen=True)
class _Fit:
    """What every piece and chunk must fit, and the counter that measures them."""

    count: Counter
    #: Tokens every text pays once ([CLS], [SEP]).
    overhead: int
    #: What is left of `max_tokens` for the text.
    budget: int
    #: The most characters a chunk holds (`ChunkSettings.max_chars`).
    chars: int

    def within(self, span: Span, tokens: int) -> bool:
        """Whether a span of this many tokens fits both limits."""
        return tokens <= self.budget and span[1] - span[0] <= self.chars


def _fit(count: Counter, settings: ChunkSettings) -> _Fit:
    """The limits these settings set, with the tokens every text pays counted once."""
    overhead = int(count([""])[0])
    return _Fit(count, overhead, settings.max_tokens - overhead, settings.max_chars)


def _costs(text: str, spans: list[Span], fit: _Fit) -> list[int]:
    """Tokens of each span without the per-text special tokens: exact up to the budget; a span
    over it may get any count over it (all a caller needs to know), so a span over the
    character cap is not counted at all (it is cut whatever its tokens), and a long span is
    counted on its first PROBE_CHARS characters first and whole only if those fit. Counted in
    calls of at most BATCH_CHARS characters: a large file without blank lines was tokenized
    whole, then each of its sentences and words in one call, taking gigabytes."""
    counted = [i for i, (s, e) in enumerate(spans) if e - s <= fit.chars]
    costs = [fit.budget + 1] * len(spans)
    probes = {i: _probe(text, *spans[i]) for i in counted}
    first = _counted([text[slice(*probes[i])] for i in counted], fit.count)
    for i, n in zip(counted, first, strict=True):
        costs[i] = max(n - fit.overhead, 1)
    again = [i for i in counted if probes[i] != spans[i] and costs[i] <= fit.budget]
    whole = _counted([text[slice(*spans[i])] for i in again], fit.count)
    for i, n in zip(again, whole, strict=True):
        costs[i] = max(n - fit.overhead, 1)
    return costs


def _probe(text: str, start: int, end: int) -> Span:
    """The span, or for a long one its start up to white space near PROBE_CHARS: tokenizers
    count whitespace-separated words apart, so the start's count is a lower bound."""
    if end - start <= PROBE_CHARS:
        return start, end
    cut = start + PROBE_CHARS
    while cut > start + PROBE_CHARS // 2 and not text[cut].isspace():
        cut -= 1
    return start, cut if text[cut].isspace() else start + PROBE_CHARS


def _counted(texts: list[str], count: Counter) -> list[int]:
    """Tokens of each text, in calls of at most BATCH_CHARS characters (or one text)."""
    counts: list[int] = []
    batch: list[str] = []
    size = 0
    for text in texts:
        if batch and size + len(text) > BATCH_CHARS:
            counts += map(int, count(batch))
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    if batch:
        counts += map(int, count(batch))
    return counts


def _fitting_pieces(
    text: str, span: Span, fit: _Fit, code: Sequence[Span] = ()
) -> list[tuple[int, int, int]]:
    """(start, end, tokens) pieces of a section, each within the budget and the character
    cap: paragraphs (a fenced code block of `code` one), else sentences (lines in code: its
    `. ` is a method call or a decimal), else lines, else runs of words."""

    def statements(text: str, span: Span) -> list[Span]:
        """A paragraph's sentences, a code block's lines: what it is cut into first."""
        return lines(text, span) if in_code(code, span) else sentences(text, span)

    return _split(text, span, (partial(paragraphs, code=code), statements, lines), fit)


def _split(
    text: str, span: Span, levels: tuple[Callable[[str, Span], list[Span]], ...], fit: _Fit
) -> list[tuple[int, int, int]]:
    """A span cut at the first level into pieces; those over the budget or the character cap
    cut at the next level, and past the last into runs of words."""
    out: list[tuple[int, int, int]] = []
    parts = levels[0](text, span)
    for (s, e), n in zip(parts, _costs(text, parts, fit), strict=True):
        if fit.within((s, e), n):
            out.append((s, e, n))
        elif len(levels) > 1:
            out += _split(text, (s, e), levels[1:], fit)
        else:
            out += _word_runs(text, (s, e), fit)
    return out


def _word_runs(text: str, span: Span, fit: _Fit) -> list[tuple[int, int, int]]:
    """A too-long sentence as consecutive runs of whole words, each within both limits."""
    spans = words(text, span)
    costs = _costs(text, spans, fit)
    runs: list[tuple[int, int, int]] = []
    start, last, total = None, span[0], 0
    for (s, e), n in zip(spans, costs, strict=True):
        if start is not None and not fit.within((start, e), total + n):
            runs.append((start, last, total))
            start, total = None, 0
        if not fit.within((s, e), n):  # one word over a limit: cut within it
            runs.extend(_cut_word(text, (s, e), fit))
            continue
        if start is None:
            start = s
        last = e
        total += n
    if start is not None:
        runs.append((start, last, total))
    return runs


def _cut_word(text: str, span: Span, fit: _Fit) -> list[tuple[int, int, int]]:
    """A word over a limit (a long URL, unspaced CJK or Thai text) as the longest consecutive
    pieces that fit, ended at a grapheme cluster's end: found on the tokens of each prefix by
    doubling, then bisection: no prefix tried is over twice the piece it finds, so the time
    is linear in the word's length (a bisection over the whole rest of the word tokenized it
    again for every piece)."""

    def fits(stop: int) -> bool:
        return _costs(text, [(start, stop)], fit)[0] <= fit.budget

    out: list[tuple[int, int, int]] = []
    start, end = span
    while start < end:
        last = min(end, start + fit.chars)  # the character cap, then the tokens
        low, high = start + 1, last  # text[start:low] fits (or is one character)
        while low < last:
            probe = min(last, start + 2 * (low - start))
            if not fits(probe):
                high = probe - 1
                break
            low = probe
        while low < high:
            mid = (low + high + 1) // 2
            if fits(mid):
                low = mid
            else:
                high = mid - 1
        if low < end:  # an accent stays with its letter, a flag whole, in the next piece
            low = last_boundary(text, start, low)
        out.append((start, low, _costs(text, [(start, low)], fit)[0]))
        start = low
    return out


def _pack(
    pieces: list[tuple[int, int, int]], fit: _Fit, overlap: int, final: bool
) -> tuple[list[tuple[int, int, int, bool]], int]:
    """Consecutive pieces packed into (start, end, tokens, by_chars) chunks: the sum of
    pieces within the budget, their span within the character cap (`by_chars`: the cap, not
    the budget, kept the next piece out); a new chunk repeats the last pieces of the previous
    up to `overlap` tokens and CHARS_PER_TOKEN characters a token of it (32 tokens of Chinese
    sentences, one word each to a word count, repeated 2,500 characters of a 4,096 chunk).

    Also returns where the next chunk would start: unless `final`, a chunk that reaches the
    last piece is left unpacked there, since pieces still to come may join it.
    """
    chunks: list[tuple[int, int, int, bool]] = []
    i = 0
    while i < len(pieces):
        j, total = i, 0
        while j < len(pieces) and (
            j == i or fit.within((pieces[i][0], pieces[j][1]), total + pieces[j][2])
        ):
            total += pieces[j][2]
            j += 1
        if j == len(pieces) and not final:
            return chunks, i
        by_chars = j < len(pieces) and total + pieces[j][2] <= fit.budget
        chunks.append((pieces[i][0], pieces[j - 1][1], total, by_chars))
        if j == len(pieces):
            return chunks, j
        back, carried, end = j, 0, pieces[j - 1][1]
        while (
            back - 1 > i
            and carried + pieces[back - 1][2] <= overlap
            and end - pieces[back - 1][0] <= overlap * CHARS_PER_TOKEN
        ):
            back -= 1
            carried += pieces[back][2]
        # the next piece must fit beside what is repeated, or a chunk would repeat only that
        while back < j and not fit.within((pieces[back][0], pieces[j][1]), carried + pieces[j][2]):
            carried -= pieces[back][2]
            back += 1
        i = back
    return chunks, i


def _verified(
    chunks: list[Chunk], fit: _Fit, max_tokens: int, text: str, first: int
) -> list[Chunk]:
    """Chunks counted as a whole and numbered from `first`. WordPiece and word counts add up
    exactly over whitespace joins, so this only catches a tokenizer that merges across them:
    such a chunk is cut again into word runs."""
    if not chunks:
        return chunks
    actual = _counted([c.text for c in chunks], fit.count)
    out: list[Chunk] = []
    for chunk, tokens in zip(chunks, actual, strict=True):
        if tokens <= max_tokens:
            out.append(replace(chunk, index=first + len(out), tokens=tokens))
            continue
        runs = _word_runs(text, (chunk.start, chunk.end), replace(fit, budget=fit.budget // 2))
        for s, e, n in runs:
            out.append(Chunk(first + len(out), s, e, text[s:e], chunk.headings, n + fit.overhead))
    return out
