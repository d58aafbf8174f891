"""A learned query confidence: P(the query is answered well) from its ranked list and members.

Features are read off the first CONFIDENCE_DEPTH ranked hits: the margin and the spread
(softmax entropy) of the fused dot products, and the same two for each member model's own
cosines of those hits, so members that disagree about the top hit lower the confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from probembed.calibration.logistic import Logistic

#: Ranked hits the features read: the top 10 and the 11th, which the 10th's margin needs.
CONFIDENCE_DEPTH = 11
#: Hits the entropies are taken over.
ENTROPY_HITS = 10
#: Softmax temperature of the entropies, in cosine units (top-10 cosines span ~0.05–0.2).
TEMPERATURE = 0.02


def query_features(dots: np.ndarray, cosines: np.ndarray) -> np.ndarray:
    """(..., 2 + 2K) features: dot margin, dot entropy, then each member's margin and entropy.

    `dots` is (n,) for one query or (..., n) for queries ranked to one depth; `cosines` is
    (..., n, K): each ranked hit's member cosines (see `features.member_cosines`), NaN for a
    member with weight 0 (its features are NaN, which the model reads as average).
    """
    dots = np.asarray(dots, dtype=np.float64)[..., :CONFIDENCE_DEPTH]
    cosines = np.asarray(cosines, dtype=np.float64)[..., :CONFIDENCE_DEPTH, :]
    if dots.ndim < 1 or dots.shape[-1] < 2 or cosines.shape[:-1] != dots.shape:
        raise ValueError(
            f"need >= 2 ranked dots and one row of member cosines per hit, got {dots.shape} "
            f"and {cosines.shape}"
        )
    scores = np.concatenate([dots[..., None], cosines], axis=-1)
    margins = scores[..., 0, :] - scores[..., 1:, :].max(axis=-2)
    entropies = _entropy(scores[..., :ENTROPY_HITS, :])
    return np.concatenate(
        [margins[..., :1], entropies[..., :1], margins[..., 1:], entropies[..., 1:]], axis=-1
    )


def feature_names(members: int) -> tuple[str, ...]:
    """Names of the query features of an ensemble of `members` models, in column order."""
    per_member = [
        f"{kind}:{k}" for kind in ("member_margin", "member_entropy") for k in range(members)
    ]
    return ("dot_margin", "dot_entropy", *per_member)


def _entropy(scores: np.ndarray) -> np.ndarray:
    """Per column of (..., n, c) scores, the entropy of softmax(scores / TEMPERATURE) over the
    n hits: high when no hit stands out."""
    z = scores / TEMPERATURE
    z = z - z.max(axis=-2, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-2, keepdims=True)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-2)


@dataclass(frozen=True, eq=False)
class QueryConfidence:
    """Query features -> P(the query's nDCG@10 is at least the training queries' median)."""

    members: int
    logistic: Logistic
    fit_info: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """One coefficient per feature of this many members."""
        if isinstance(self.members, bool) or not isinstance(self.members, int) or self.members < 1:
            raise ValueError(f'"members" must be a positive integer, got {self.members!r}')
        if self.logistic.width != len(feature_names(self.members)):
            raise ValueError(
                f"a query confidence for {self.members} members has "
                f"{len(feature_names(self.members))} features, got {self.logistic.width}"
            )

    def predict(self, dots: np.ndarray, cosines: np.ndarray) -> float | np.ndarray:
        """P(answered well) from ranked dots and member cosines: a float for one query ((n,)
        dots), an array for queries ranked to one depth ((..., n) dots)."""
        if np.shape(cosines)[-1] != self.members:
            raise ValueError(
                f"this confidence needs the cosines of {self.members} members, got "
                f"{np.shape(cosines)[-1]}"
            )
        features = query_features(dots, cosines)
        p = self.logistic.predict(features.reshape(-1, features.shape[-1]))
        return float(p[0]) if features.ndim == 1 else p.reshape(features.shape[:-1])

    @classmethod
    def fit(
        cls, features: np.ndarray, failed: np.ndarray, members: int, seed: int = 0
    ) -> QueryConfidence:
        """Fit on (nq, F) query features with a failure flag per query (needs scikit-learn)."""
        failed = np.asarray(failed)
        if failed.shape != (len(features),) or len(np.unique(failed)) != 2:
            raise ValueError("failed must flag each query, with both failed and good queries")
        logistic = Logistic.fit(features, ~failed.astype(bool), seed)
        info = {"queries": len(failed), "failed": int(failed.sum()), "seed": seed}
        return cls(members, logistic, info)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: the member count, the feature names and the logistic model."""
        return {
            "members": self.members,
            "features": list(feature_names(self.members)),
            "model": self.logistic.to_json(),
            "fit": self.fit_info,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> QueryConfidence:
        """The model from its JSON form, every field checked; errors name `where`."""
        keys = {"members", "features", "model", "fit"}
        if not isinstance(data, dict) or set(data) != keys:
            raise ValueError(f"{where} must be a JSON object with exactly the keys {sorted(keys)}")
        members = data["members"]
        if isinstance(members, int) and data["features"] != list(feature_names(members)):
            raise ValueError(f"{where}.features must be {list(feature_names(members))}")
        return cls(members, Logistic.from_json(data["model"], f"{where}.model"), data["fit"])
