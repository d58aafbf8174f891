"""Texts repeated across the batches of one Ray run: encoded by one actor, shared on the driver.

A text that several batches lack (some member's cache does not hold it) is sent to the actors
with the first of them, its sender; each later batch, a borrower, does not send it again but
waits for the sender to be answered and fused, and reads its rows of that text from the cache
the sender filled, or, where there is no cache, from the driver, which keeps them until the last
borrower is fused. So a text is encoded once per run, as local ingest's cache gives it once the
first batch stored it; copies within one batch are encoded as local ingest encodes them, each.
The driver decides all this before any batch goes out, from the texts alone: the workers run as
before, and only a borrower's fusion waits.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from probembed.gaussian import Gaussian

if TYPE_CHECKING:
    from probembed.pipeline import Encoded

#: One member's cache lookup of a batch: which texts it holds, and their Gaussians.
Lookup = tuple[np.ndarray, Gaussian | None]
#: What a batch's actors sent back: per member its Gaussians of the texts sent (None: none).
Received = Sequence["Encoded | None"]


class RepeatedTexts:
    """Which earlier batch each batch borrows a text from, and the rows kept for borrowers."""

    def __init__(self, members: int, keep: bool = True) -> None:
        #: whether the driver keeps a sender's rows for its borrowers: not where they read
        #: them from the cache the sender fills
        self._keep = keep
        #: batch start -> per member, the texts (one per row) it borrows
        self._borrowed: dict[int, list[list[str]]] = {}
        #: borrower -> the senders it borrows from that have not been fused yet
        self._waits: dict[int, set[int]] = {}
        #: sender -> the batches that borrow from it
        self._borrowers: dict[int, set[int]] = {}
        #: per member, text -> rows of borrowers not fused yet that borrow it
        self._wanted: list[Counter[str]] = [Counter() for _ in range(members)]
        #: per member, text -> (mean, var) from its sender's answer, kept for its borrowers
        self._kept: list[dict[str, tuple[np.ndarray, np.ndarray]]] = [{} for _ in range(members)]

    @classmethod
    def planned(
        cls,
        members: int,
        batches: Mapping[int, Sequence[str]],
        lacking: Mapping[int, np.ndarray],
        keep: bool = True,
    ) -> tuple[RepeatedTexts, dict[int, np.ndarray]]:
        """The ledger of the batches `lacking` marks ((texts, members) each, in batch order),
        and what each sends itself: its marks less the texts an earlier batch sends. `keep`
        False: the borrowers read the rows from the cache (their senders stored them)."""
        ledger = cls(members, keep)
        senders: list[dict[str, int]] = [{} for _ in range(members)]  # text -> first lacking
        sent = {
            start: ledger._plan(start, batches[start], marks, senders)
            for start, marks in lacking.items()
        }
        return ledger, sent

    def _plan(
        self, start: int, texts: Sequence[str], marks: np.ndarray, senders: list[dict[str, int]]
    ) -> np.ndarray:
        """One batch's marks less what an earlier batch sends, which it borrows instead."""
        sent = marks.copy()
        borrowed: list[list[str]] = [[] for _ in senders]
        for member, first in enumerate(senders):
            for row in np.flatnonzero(marks[:, member]).tolist():
                sender = first.setdefault(texts[row], start)
                if sender != start:
                    sent[row, member] = False
                    borrowed[member].append(texts[row])
                    self._wanted[member][texts[row]] += 1
                    self._waits.setdefault(start, set()).add(sender)
                    self._borrowers.setdefault(sender, set()).add(start)
        if any(borrowed):
            self._borrowed[start] = borrowed
        return sent

    def in_order(
        self, answers: Iterable[tuple[int, Received]], silent: Iterable[int]
    ) -> Iterator[tuple[int, Received]]:
        """The batches, each with what its actors sent back, in an order they can be fused in:
        each after every batch it borrows from has been fused (and, with a cache, stored
        what it lends), so the caller fuses each before it takes the next. `answers`: the
        batches as the actors answer them; `silent`: those that send nothing."""
        waiting: dict[int, Received] = {start: [None] * len(self._kept) for start in silent}
        for start, received in answers:
            waiting[start] = received
            ready = deque([start])
            while ready:
                batch = ready.popleft()
                if batch in waiting and batch not in self._waits:
                    received = waiting.pop(batch)
                    yield batch, received
                    ready.extend(self._fused(batch, received))

    def _fused(self, start: int, encoded: Received) -> list[int]:
        """Keep the rows of a fused batch's answer that later batches borrow; the borrowers
        that wait for no batch any more."""
        for wanted, kept, made in zip(self._wanted, self._kept, encoded, strict=True):
            if made is None or not self._keep:
                continue
            for row, text in enumerate(made.texts):
                if wanted[text] and text not in kept:
                    kept[text] = (made.gaussian.mean[row].copy(), made.gaussian.var[row].copy())
        ready = []
        for borrower in sorted(self._borrowers.pop(start, ())):
            senders = self._waits[borrower]
            senders.discard(start)
            if not senders:
                del self._waits[borrower]
                ready.append(borrower)
        return ready

    def lend(self, start: int, texts: Sequence[str], lookups: Sequence[Lookup]) -> list[Lookup]:
        """The batch's lookups with what it borrows filled in (as found); rows no later batch
        borrows are let go. For a batch `in_order` gave."""
        borrowed = self._borrowed.pop(start, None)
        if borrowed is None:
            return list(lookups)
        out = []
        for lookup, mine, wanted, kept in zip(
            lookups, borrowed, self._wanted, self._kept, strict=True
        ):
            out.append(_filled(texts, lookup, set(mine), kept))
            for text in mine:
                wanted[text] -= 1
                if not wanted[text]:
                    del wanted[text]
                    kept.pop(text, None)
        return out


def _filled(
    texts: Sequence[str], lookup: Lookup, borrowed: set[str], kept: Mapping[str, tuple]
) -> Lookup:
    """A lookup with the borrowed texts it lacks and `kept` holds marked found, their kept
    rows in place (one the batch sends itself stays a miss, which it stores)."""
    found, cached = lookup
    lent = np.array(
        [not f and t in borrowed and t in kept for t, f in zip(texts, found, strict=True)], bool
    )
    if not lent.any():
        return lookup
    holds = found | lent
    rows = [kept[t] for t, is_lent in zip(texts, lent, strict=True) if is_lent]
    from_cache = found[holds]
    mean = np.empty((len(from_cache), len(rows[0][0])), np.float32)
    var = np.empty_like(mean)
    mean[~from_cache] = np.stack([m for m, _ in rows])
    var[~from_cache] = np.stack([v for _, v in rows])
    if cached is not None:
        mean[from_cache], var[from_cache] = cached.mean, cached.var
    return holds, Gaussian(mean, var)
