"""A search's results: each query's hits, best first, and what is said of them.

The result types are JSON-ready dicts; a hit is made from its stored row, a query's confidence
is the outrank probability of its first two hits, and a filtered search's hits read their
p_relevant off the same search's unfiltered ranking.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypedDict, cast

import numpy as np

from probembed.scoring import outrank_probability


class Hit(TypedDict):
    """One ranked item, as a JSON-ready dict (so `hit["id"]` and `json.dumps` both work)."""

    id: str
    #: Exact score under the similarity searched with (with `hybrid`, the fused RRF score).
    score: float
    #: Standard deviation of the query-document dot product: the members' own variance plus
    #: the spread of their cosines (law of total variance).
    std: float
    #: The stored item's fusion weight per model.
    weights: dict[str, float]
    #: P(the hit is relevant) from the pipeline's calibrator; None when it has none.
    p_relevant: float | None
    text: str | None
    metadata: dict[str, Any]


class GroupedHit(Hit, total=False):
    """A hit of a `group_by_doc` search: how many of its document's other chunks were among
    the candidates."""

    other_chunks: int


class QueryResult(TypedDict):
    """One query's answer: its text, its confidence, and its hits, best first."""

    query: str | None
    #: With a pipeline calibrator's learned query confidence: P(the query is answered well,
    #: nDCG@10 at least the median of its training queries). Otherwise P(the first hit truly
    #: outranks the second). Read from the ranking before `min_p_relevant` drops hits, so it
    #: may stand beside none; None when that ranking has fewer than two hits.
    confidence: float | None
    hits: list[Hit]


def confidence(dots: np.ndarray, variances: np.ndarray) -> float | np.ndarray | None:
    """P(first hit truly outranks the second) = Φ((s₁ − s₂)/√(v₁ + v₂)) on dot-product scores.

    The dot product is the score whose variance is known, so s and v are in the same units
    whatever similarity ranked the hits. For one query's (n,) ranked dots and variances a float,
    or None below two hits (no rival to outrank: a filter that leaves one hit says nothing of
    it, and 1.0 would read as certainty); for (nq, n) an array, one per query (NaN below two).
    """
    dots, variances = np.asarray(dots), np.asarray(variances)
    if dots.ndim == 1:
        value = float(cast(np.ndarray, confidence(dots[None], variances[None]))[0])
        return None if math.isnan(value) else value
    if dots.shape[1] < 2:
        return np.full(len(dots), np.nan)
    return outrank_probability(dots[:, 0], dots[:, 1], variances[:, 0], variances[:, 1])


def _read_unfiltered(
    hits: list[Hit],
    keys: Sequence[Hashable],
    unfiltered: Sequence[Hashable],
    values: list,
    past: Mapping[int, float],
) -> None:
    """Give a filtered search's hits (`keys`: each one's row, or document when grouped) the
    p_relevant they have in the same search without the filter (`values` along its ranking,
    `unfiltered`): read along the filtered list, a hit's rank and gaps were counted among the
    rows kept, and a chunk filtered to its own document went from 0.10 to 0.82. A hit the
    unfiltered ranking did not reach takes its own value past it (`past`, by hit index), at
    most the last one's, and each is capped by the one above it, as along any list (a hybrid
    list filtered can order hits otherwise)."""
    if not values:
        return
    found = dict(zip(unfiltered, values, strict=True))
    cap = math.inf
    for j, (hit, key) in enumerate(zip(hits, keys, strict=True)):
        cap = min(cap, found.get(key, min(values[-1], past.get(j, values[-1]))))
        hit["p_relevant"] = cap


def _hit(
    doc_id: str,
    score: float,
    std: float,
    models: Sequence[str],
    weights: Sequence[float],
    p_relevant: float | None,
    row: dict[str, Any],
) -> Hit:
    """One hit as the public typed dict."""
    return Hit(
        id=doc_id,
        score=score,
        std=std,
        weights=dict(zip(models, weights, strict=True)),
        p_relevant=p_relevant,
        text=row.get("text"),
        metadata=_metadata(row.get("metadata")),
    )


def _metadata(raw: str | None) -> dict[str, Any]:
    """Parse a stored metadata JSON string (skipping the common empty case)."""
    return json.loads(raw) if raw and raw != "{}" else {}
