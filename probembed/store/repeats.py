"""Texts repeated across the batches of one Ray run: encoded by one actor, shared on the driver.

A text that several batches lack (some member's cache does not hold it) is sent to the actors
with the first of them, its sender; each later batch, a borrower, does not send it again. The
batches are fused in plan order (Ray Data keeps it: `preserve_order`), so a sender has always
been answered before its borrowers are fused; the driver keeps the sender's rows of such texts
until the last borrower is fused and lends them as if looked up (where the cache, which the
sender filled, still holds them, it gives the same rows). So a text is encoded once per run,
as local ingest's cache gives it once the first batch stored it; copies within one batch are
encoded as local ingest encodes them, each. The driver decides all this before any batch goes
out, from the texts alone; the actors never wait for one another.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
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

    def __init__(self, members: int) -> None:
        #: batch start -> per member, the texts (one per row) it borrows
        self._borrowed: dict[int, list[list[str]]] = {}
        #: per member, text -> rows of borrowers not fused yet that borrow it
        self._wanted: list[Counter[str]] = [Counter() for _ in range(members)]
        #: per member, text -> (mean, var) from its sender's answer, kept for its borrowers
        self._kept: list[dict[str, tuple[np.ndarray, np.ndarray]]] = [{} for _ in range(members)]

    @classmethod
    def planned(
        cls, members: int, batches: Mapping[int, Sequence[str]], lacking: Mapping[int, np.ndarray]
    ) -> tuple[RepeatedTexts, dict[int, np.ndarray]]:
        """The ledger of the batches `lacking` marks ((texts, members) each), in the order
        they are sent and fused, and what each sends itself: its marks less the texts an
        earlier batch sends."""
        ledger = cls(members)
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
                if first.setdefault(texts[row], start) != start:
                    sent[row, member] = False
                    borrowed[member].append(texts[row])
                    self._wanted[member][texts[row]] += 1
        if any(borrowed):
            self._borrowed[start] = borrowed
        return sent

    def lend(
        self, start: int, texts: Sequence[str], lookups: Sequence[Lookup], received: Received
    ) -> list[Lookup]:
        """The batch's lookups with what it borrows filled in (as found), for the batches in
        plan order, each with its actors' answer: the rows of it later batches borrow are
        kept, and let go with their last borrower, whatever the cache does meanwhile."""
        self._keep(received)
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

    def _keep(self, received: Received) -> None:
        """Keep the rows of an answer that later batches borrow."""
        for wanted, kept, made in zip(self._wanted, self._kept, received, strict=True):
            if made is None:
                continue
            for row, text in enumerate(made.texts):
                if wanted[text] and text not in kept:
                    kept[text] = (made.gaussian.mean[row].copy(), made.gaussian.var[row].copy())


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
