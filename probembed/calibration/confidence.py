"""A learned query confidence: P(the query is answered well) from its ranked list and members.

Features are read off the first CONFIDENCE_DEPTH ranked hits: the margin and the spread
(softmax entropy) of the fused dot products, and the same two for each member model's own
cosines of those hits, so members that disagree about the top hit lower the confidence.

The hits' texts say more: a query whose words the first hit contains, where the other hits
do not, is more often answered well. A search reads two coverage features of the first
COVERAGE_HITS hits' texts (`coverage_features`) through a text model, where the calibrator has
one.

A hybrid search has a second, independent ranker at hand: BM25. Where it is sure (a wide
margin between its first two hits) and agrees with the dense ranking (the dense top hit is
among its first LEXICAL_DEPTH), the query is more likely answered well; a hybrid search reads
these two lexical features and the coverage of its own hits (HYBRID_FEATURES) through a third
model, fitted on hybrid rankings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from probembed.calibration.logistic import Logistic

#: Ranked hits the features read: the top 10 and the 11th, which the 10th's margin needs.
CONFIDENCE_DEPTH = 11
#: Hits the entropies are taken over.
ENTROPY_HITS = 10
#: Softmax temperature of the entropies, in cosine units (top-10 cosines span ~0.05–0.2).
TEMPERATURE = 0.02
#: BM25 hits the dense top hit is looked for among.
LEXICAL_DEPTH = 10
LEXICAL_FEATURES = ("dense_top_in_bm25", "bm25_margin")
#: Hits whose texts the coverage features read.
COVERAGE_HITS = 10
TEXT_FEATURES = ("top_hit_coverage", "mean_coverage")
#: What the hybrid searches' model reads beyond the query features.
HYBRID_FEATURES = LEXICAL_FEATURES + TEXT_FEATURES
_WORD = re.compile(r"\w+")


def query_features(dots: np.ndarray, cosines: np.ndarray) -> np.ndarray:
    """(..., 2 + 2K) features: dot margin, dot entropy, then each member's margin and entropy.

    `dots` is (n,) for one query or (..., n) for queries ranked to one depth; `cosines` is
    (..., n, K): each ranked hit's member cosines (see `scoring.ensemble.member_cosines`), NaN for a
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


def lexical_features(
    dense_top: int | None, bm25: np.ndarray, bm25_scores: np.ndarray
) -> np.ndarray:
    """(2,) what BM25 says of a query: 1 if the dense top hit is among its first LEXICAL_DEPTH
    hits, else 0; and its relative margin (s₁ − s₂)/s₁ (0 with fewer than two hits, or s₁ ≤ 0).

    `bm25` are BM25's hits (positions) and `bm25_scores` their scores, both best first.
    """
    found = dense_top is not None and bool(np.isin(dense_top, bm25[:LEXICAL_DEPTH]))
    scores = np.asarray(bm25_scores, dtype=np.float64)
    margin = (scores[0] - scores[1]) / scores[0] if len(scores) >= 2 and scores[0] > 0 else 0.0
    return np.array([float(found), margin])


def coverage_features(query: str, hits: Sequence[str]) -> np.ndarray:
    """(2,) the share of the query's words the first hit's text contains, and the mean share
    over the first COVERAGE_HITS hits; NaN (read as average) without words or hits.

    Words are lower-cased runs of word characters. Each query word w weighs
    1 + log((n + 1)/(1 + n_w)), with n_w of the n hits containing it: a word every hit has says
    little about which hit is right, a word only the first hit has says most. No list of stop
    words and no collection statistics are needed.
    """
    words = sorted(set(_WORD.findall(query.lower())))  # sums in one order, whatever the hash seed
    texts = [set(_WORD.findall(t.lower())) for t in hits[:COVERAGE_HITS]]
    if not words or not texts:
        return np.full(len(TEXT_FEATURES), np.nan)
    counts = {w: sum(w in t for t in texts) for w in words}
    weight = {w: 1.0 + math.log((len(texts) + 1) / (1 + c)) for w, c in counts.items()}
    total = sum(weight.values())
    shares = [sum(weight[w] for w in words if w in t) / total for t in texts]
    return np.array([shares[0], float(np.mean(shares))])


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
    #: For hybrid searches: the query features and HYBRID_FEATURES -> P(the hybrid ranking
    #: answers the query well), or None (hybrid searches then use `logistic`).
    hybrid_model: Logistic | None = None
    #: For searches whose hits' texts are known (dense searches): the query features and
    #: TEXT_FEATURES -> P(answered well), or None (they then use `logistic`).
    text_model: Logistic | None = None

    def __post_init__(self) -> None:
        """One coefficient per feature of this many members (and each extra model's)."""
        if isinstance(self.members, bool) or not isinstance(self.members, int) or self.members < 1:
            raise ValueError(f'"members" must be a positive integer, got {self.members!r}')
        width = len(feature_names(self.members))
        if self.logistic.width != width:
            raise ValueError(
                f"a query confidence for {self.members} members has {width} features, got "
                f"{self.logistic.width}"
            )
        for model, extra in (
            (self.hybrid_model, HYBRID_FEATURES),
            (self.text_model, TEXT_FEATURES),
        ):
            if model is not None and model.width != width + len(extra):
                raise ValueError(
                    f"a query confidence for {self.members} members reading {extra} has "
                    f"{width + len(extra)} features, got {model.width}"
                )

    def predict(
        self,
        dots: np.ndarray,
        cosines: np.ndarray,
        lexical: np.ndarray | None = None,
        coverage: np.ndarray | None = None,
    ) -> float | np.ndarray:
        """P(answered well) from ranked dots and member cosines: a float for one query ((n,)
        dots), an array for queries ranked to one depth ((..., n) dots). With `lexical`
        (the (..., 2) `lexical_features` of a hybrid search) and a hybrid model, that model,
        reading `coverage` too (NaN, read as average, when None); else with `coverage` (the
        (..., 2) `coverage_features`) and a text model, that one."""
        if np.shape(cosines)[-1] != self.members:
            raise ValueError(
                f"this confidence needs the cosines of {self.members} members, got "
                f"{np.shape(cosines)[-1]}"
            )
        features = query_features(dots, cosines)
        model, extra = self.logistic, None
        if lexical is not None and self.hybrid_model is not None:
            lexical = np.asarray(lexical, dtype=np.float64)
            if coverage is None:
                coverage = np.full((*lexical.shape[:-1], len(TEXT_FEATURES)), np.nan)
            model = self.hybrid_model
            extra = np.concatenate([lexical, np.asarray(coverage, dtype=np.float64)], -1)
        elif coverage is not None and self.text_model is not None:
            model, extra = self.text_model, coverage
        if extra is not None:
            extra = np.asarray(extra, dtype=np.float64).reshape(*features.shape[:-1], -1)
            features = np.concatenate([features, extra], -1)
        p = model.predict(features.reshape(-1, features.shape[-1]))
        return float(p[0]) if features.ndim == 1 else p.reshape(features.shape[:-1])

    @classmethod
    def fit(
        cls, features: np.ndarray, failed: np.ndarray, members: int, seed: int = 0
    ) -> QueryConfidence:
        """Fit on (nq, F) query features with a failure flag per query (needs scikit-learn)."""
        flags = _flags(failed, len(features))
        logistic = Logistic.fit(features, ~flags, seed)
        info = {"queries": len(flags), "failed": int(flags.sum()), "seed": seed}
        return cls(members, logistic, info)

    def with_model(
        self,
        field: str,
        features: np.ndarray,
        extra: np.ndarray,
        failed: np.ndarray,
        seed: int = 0,
    ) -> QueryConfidence:
        """This confidence with its `hybrid_model` or `text_model`, fitted on (nq, F) query
        features, their (nq, 4) HYBRID_FEATURES or (nq, 2) TEXT_FEATURES and a failure flag per
        query."""
        if field not in ("hybrid_model", "text_model"):
            raise ValueError(f"field must be hybrid_model or text_model, got {field!r}")
        x = np.concatenate([features, extra], axis=1)
        flags = _flags(failed, len(x))
        logistic = Logistic.fit(x, ~flags, seed)
        kind = field.removesuffix("_model")
        info = {
            **(self.fit_info or {}),
            f"{kind}_queries": len(x),
            f"{kind}_failed": int(flags.sum()),
            f"{kind}_seed": seed,
        }
        # the field is named at run time: mypy matches the ** against every field's type
        return replace(self, **{field: logistic}, fit_info=info)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: the member count, the feature names and the logistic model(s)."""
        data = {
            "members": self.members,
            "features": list(feature_names(self.members)),
            "model": self.logistic.to_json(),
            "fit": self.fit_info,
        }
        for kind, model, names in self._extra_models():
            if model is not None:
                data[f"{kind}_features"] = list(names)
                data[f"{kind}_model"] = model.to_json()
        return data

    def _extra_models(self) -> list[tuple[str, Logistic | None, tuple[str, ...]]]:
        """(JSON prefix, model, its extra feature names) of the optional models."""
        return [
            ("hybrid", self.hybrid_model, HYBRID_FEATURES),
            ("text", self.text_model, TEXT_FEATURES),
        ]

    @classmethod
    def from_json(cls, data: object, where: str) -> QueryConfidence:
        """The model from its JSON form, every field checked; errors name `where`."""
        keys = {"members", "features", "model", "fit"}
        optional = {"hybrid", "text"}
        if not isinstance(data, dict) or not keys <= set(data):
            raise ValueError(f"{where} must be a JSON object with the keys {sorted(keys)}")
        extras = {k.removesuffix("_model") for k in data if k.endswith("_model")}
        allowed = keys | {f"{kind}_{part}" for kind in extras for part in ("features", "model")}
        if not extras <= optional or set(data) != allowed:
            raise ValueError(
                f"{where} must hold exactly the keys {sorted(keys)}, and for each optional "
                f"model in {sorted(optional)} its _features and _model; got {sorted(data)}"
            )
        members = data["members"]
        if isinstance(members, int) and data["features"] != list(feature_names(members)):
            raise ValueError(f"{where}.features must be {list(feature_names(members))}")
        models = {}
        for kind, names in (("hybrid", HYBRID_FEATURES), ("text", TEXT_FEATURES)):
            if kind in extras:
                if data[f"{kind}_features"] != list(names):
                    raise ValueError(f"{where}.{kind}_features must be {list(names)}")
                models[f"{kind}_model"] = Logistic.from_json(
                    data[f"{kind}_model"], f"{where}.{kind}_model"
                )
        model = Logistic.from_json(data["model"], f"{where}.model")
        return cls(members, model, data["fit"], **models)


def _flags(failed: np.ndarray, queries: int) -> np.ndarray:
    """A boolean failure flag per query, with both kinds present, or a ValueError."""
    failed = np.asarray(failed)
    if failed.shape != (queries,) or len(np.unique(failed)) != 2:
        raise ValueError("failed must flag each query, with both failed and good queries")
    return failed.astype(bool)
