"""Cutting a document into chunks that every member model reads whole.

Within each section, paragraphs are kept whole when they fit; a paragraph that does not is cut
into sentences, a sentence that does not into lines, a line that does not into runs of words.
Only what a decision needs is tokenized: a long span's start first (PROBE_CHARS), and at most
BATCH_CHARS of text per call of the counter. The pieces are then packed in
order into chunks of at most `max_tokens`, counted with the pipeline's own tokenizers (the
most any member makes of the text), and each chunk after the first of a section starts with
the previous chunk's last pieces up to `overlap_tokens`. The result depends only on the text,
the settings and the tokenizers: the same document always gives the same chunks.

`stream_chunks` gives the same chunks for a document read in segments (a file too large to
hold): packing is greedy, so a chunk is final once the next piece does not fit, and only the
pieces of the chunk being filled are kept.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from probembed.chunking.structure import Section, Span, lines, paragraphs, sentences, words

if TYPE_CHECKING:
    import numpy as np

#: Tokens per text, as the pipeline counts them (`Pipeline.count_tokens`).
Counter = Callable[[Sequence[str]], "Sequence[int] | np.ndarray"]
#: Characters of a long span counted first: far more than any budget's worth of text, so a
#: span whose start is already over the budget is cut without tokenizing the rest.
PROBE_CHARS = 2**14
#: Characters of text per call of the counter, so its encodings stay small.
BATCH_CHARS = 2**18


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
        if overlap_tokens is None and isinstance(max_tokens, int) and max_tokens >= 8:
            overlap_tokens = min(cls.overlap_tokens, max_tokens // 2 - 1)
        return cls(max_tokens, cls.overlap_tokens if overlap_tokens is None else overlap_tokens)

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

    def capped(self, limit: int | None) -> ChunkSettings:
        """These settings with the size at most `limit` (the shortest member's)."""
        if limit is None or limit >= self.max_tokens:
            return self
        return ChunkSettings(limit, min(self.overlap_tokens, limit // 2 - 1))


@dataclass(frozen=True)
class Chunk:
    """One passage: its position in the document, its exact character span, its headings."""

    index: int
    start: int
    end: int
    text: str
    headings: tuple[str, ...]
    tokens: int


@dataclass(frozen=True)
class Segment:
    """A run of a document read as a stream: whole lines at offset `start`, cut only where no
    chunk can differ for it (a section's start, or the end of a paragraph break)."""

    start: int
    text: str
    headings: tuple[str, ...]
    #: Whether a new section (with these headings) starts here.
    opens: bool


def chunk_text(
    text: str, sections: Sequence[Section], count: Counter, settings: ChunkSettings
) -> list[Chunk]:
    """The document's chunks, in order; each is `text[start:end]` and fits `max_tokens`."""
    overhead, budget = _budget(count, settings)
    chunks: list[Chunk] = []
    for section in sections:
        pieces = _fitting_pieces(text, (section.start, section.end), count, overhead, budget)
        for start, end, tokens in _pack(pieces, budget, settings.overlap_tokens, True)[0]:
            chunks.append(
                Chunk(len(chunks), start, end, text[start:end], section.headings, tokens + overhead)
            )
    return _verified(chunks, count, settings.max_tokens, text, 0, overhead, budget)


def stream_chunks(
    segments: Iterable[Segment], count: Counter, settings: ChunkSettings
) -> Iterator[Chunk]:
    """The chunks `chunk_text` gives for the whole document, from its segments in order,
    holding only the text of the chunk being filled and of the current segment."""
    overhead, budget = _budget(count, settings)
    index, buffer, base = 0, "", 0  # buffer: the document's text from offset base on
    pending: list[tuple[int, int, int]] = []  # pieces not yet in a finished chunk (offsets)
    headings: tuple[str, ...] = ()

    def drain(final: bool) -> list[Chunk]:
        nonlocal index, buffer, base, pending
        spans, rest = _pack(pending, budget, settings.overlap_tokens, final)
        pending = pending[rest:]
        local = [
            Chunk(0, s - base, e - base, buffer[s - base : e - base], headings, n + overhead)
            for s, e, n in spans
        ]
        done = _verified(local, count, settings.max_tokens, buffer, index, overhead, budget)
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
        pieces = _fitting_pieces(buffer, span, count, overhead, budget)
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


def _budget(count: Counter, settings: ChunkSettings) -> tuple[int, int]:
    """Tokens every text pays once ([CLS], [SEP]) and what is left of `max_tokens` for words."""
    overhead = int(count([""])[0])
    return overhead, settings.max_tokens - overhead


def _costs(text: str, spans: list[Span], count: Counter, overhead: int, budget: int) -> list[int]:
    """Tokens of each span without the per-text special tokens: exact up to the budget; a span
    over it may get any count over it (all a caller needs to know), so a long span is counted
    on its first PROBE_CHARS characters first and whole only if those fit. Counted in calls of
    at most BATCH_CHARS characters: a large file without blank lines was tokenized whole,
    then each of its sentences and words in one call, taking gigabytes."""
    probes = [_probe(text, s, e) for s, e in spans]
    costs = [max(n - overhead, 1) for n in _counted([text[s:e] for s, e in probes], count)]
    again = [i for i, (span, probe) in enumerate(zip(spans, probes, strict=True))
             if probe != span and costs[i] <= budget]  # fmt: skip
    whole = _counted([text[slice(*spans[i])] for i in again], count)
    for i, n in zip(again, whole, strict=True):
        costs[i] = max(n - overhead, 1)
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
    text: str, span: Span, count: Counter, overhead: int, budget: int
) -> list[tuple[int, int, int]]:
    """(start, end, tokens) pieces of a section, each within the budget: paragraphs, else
    sentences, else lines, else runs of words."""
    return _split(text, span, (paragraphs, sentences, lines), count, overhead, budget)


def _split(
    text: str,
    span: Span,
    levels: tuple[Callable[[str, Span], list[Span]], ...],
    count: Counter,
    overhead: int,
    budget: int,
) -> list[tuple[int, int, int]]:
    """A span cut at the first level into pieces; those over the budget cut at the next
    level, and past the last into runs of words."""
    out: list[tuple[int, int, int]] = []
    parts = levels[0](text, span)
    for (s, e), n in zip(parts, _costs(text, parts, count, overhead, budget), strict=True):
        if n <= budget:
            out.append((s, e, n))
        elif len(levels) > 1:
            out += _split(text, (s, e), levels[1:], count, overhead, budget)
        else:
            out += _word_runs(text, (s, e), count, overhead, budget)
    return out


def _word_runs(
    text: str, span: Span, count: Counter, overhead: int, budget: int
) -> list[tuple[int, int, int]]:
    """A too-long sentence as consecutive runs of whole words, each within the budget."""
    spans = words(text, span)
    costs = _costs(text, spans, count, overhead, budget)
    runs: list[tuple[int, int, int]] = []
    start, last, total = None, span[0], 0
    for (s, e), n in zip(spans, costs, strict=True):
        if start is not None and total + n > budget:
            runs.append((start, last, total))
            start, total = None, 0
        if n > budget:  # one word longer than the budget: cut within it
            runs.extend(_cut_word(text, (s, e), count, overhead, budget))
            continue
        if start is None:
            start = s
        last = e
        total += n
    if start is not None:
        runs.append((start, last, total))
    return runs


def _cut_word(
    text: str, span: Span, count: Counter, overhead: int, budget: int
) -> list[tuple[int, int, int]]:
    """A word over the budget (a long URL, unspaced CJK text) as the longest consecutive
    pieces that fit, found on the tokens of each prefix by doubling, then bisection: no prefix
    tried is over twice the piece it finds, so the time is linear in the word's length (a
    bisection over the whole rest of the word tokenized it again for every piece)."""

    def fits(stop: int) -> bool:
        return _costs(text, [(start, stop)], count, overhead, budget)[0] <= budget

    out: list[tuple[int, int, int]] = []
    start, end = span
    while start < end:
        low, high = start + 1, end  # text[start:low] fits (or is one character)
        while low < end:
            probe = min(end, start + 2 * (low - start))
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
        while low - start > 1 and low < end and _joins_previous(text, low):
            low -= 1  # an accent stays with its letter, in the next piece
        out.append((start, low, _costs(text, [(start, low)], count, overhead, budget)[0]))
        start = low
    return out


def _joins_previous(text: str, i: int) -> bool:
    """Whether text[i] is part of the character before it, so no cut falls between them: a
    mark (an accent, a Devanagari vowel sign, which `unicodedata.combining` calls 0), a
    variation selector or skin tone, a zero-width joiner, or whatever a joiner joins."""
    code = ord(text[i])
    return (
        unicodedata.category(text[i])[0] == "M"
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0100 <= code <= 0xE01EF
        or code == 0x200D
        or text[i - 1] == "\u200d"
    )


def _pack(
    pieces: list[tuple[int, int, int]], budget: int, overlap: int, final: bool
) -> tuple[list[tuple[int, int, int]], int]:
    """Consecutive pieces packed into (start, end, tokens) chunks, the sum of pieces within
    the budget; a new chunk repeats the last pieces of the previous up to `overlap` tokens.

    Also returns where the next chunk would start: unless `final`, a chunk that reaches the
    last piece is left unpacked there, since pieces still to come may join it.
    """
    chunks: list[tuple[int, int, int]] = []
    i = 0
    while i < len(pieces):
        j, total = i, 0
        while j < len(pieces) and (j == i or total + pieces[j][2] <= budget):
            total += pieces[j][2]
            j += 1
        if j == len(pieces) and not final:
            return chunks, i
        chunks.append((pieces[i][0], pieces[j - 1][1], total))
        if j == len(pieces):
            return chunks, j
        back, carried = j, 0
        while back - 1 > i and carried + pieces[back - 1][2] <= overlap:
            back -= 1
            carried += pieces[back][2]
        while back < j and carried + pieces[j][2] > budget:  # the next piece must fit beside
            carried -= pieces[back][2]  # what is repeated, or a chunk would repeat only that
            back += 1
        i = back
    return chunks, i


def _verified(
    chunks: list[Chunk],
    count: Counter,
    max_tokens: int,
    text: str,
    first: int,
    overhead: int,
    budget: int,
) -> list[Chunk]:
    """Chunks counted as a whole and numbered from `first`. WordPiece and word counts add up
    exactly over whitespace joins, so this only catches a tokenizer that merges across them:
    such a chunk is cut again into word runs."""
    if not chunks:
        return chunks
    actual = _counted([c.text for c in chunks], count)
    out: list[Chunk] = []
    for chunk, tokens in zip(chunks, actual, strict=True):
        if tokens <= max_tokens:
            out.append(replace(chunk, index=first + len(out), tokens=tokens))
            continue
        runs = _word_runs(text, (chunk.start, chunk.end), count, overhead, budget // 2)
        for s, e, n in runs:
            out.append(Chunk(first + len(out), s, e, text[s:e], chunk.headings, n + overhead))
    return out
