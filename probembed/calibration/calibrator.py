"""P(relevant) per hit: a logistic regression on standardised hit features, optionally isotonic.

Fitting needs scikit-learn; predicting, saving and loading need numpy only, so a pipeline that
ships a calibrator loads and searches without scikit-learn. A calibrator may also carry a
learned query confidence (`confidence.QueryConfidence`), fitted on the same training queries,
and a second calibrator for hybrid searches, fitted on hybrid rankings of those queries with
each hit's BM25 features (`features.BM25_HIT_FEATURES`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from probembed import atomic
from probembed.calibration.confidence import QueryConfidence
from probembed.calibration.features import (
    BASE_FEATURES,
    BM25_HIT_FEATURES,
    DISAGREEMENT,
    cosine_spread,
    hit_features,
)
from probembed.calibration.logistic import Logistic, floats

CALIBRATION_FILE = "calibration.json"
#: Formats this version reads: 2 adds a query confidence's hybrid and text models, 3 the
#: "hybrid" calibrator; each is written only when the file holds what it adds, so that a file
#: without them stays readable by earlier versions.
READABLE_FORMATS = (1, 2, 3)
_KIND = "relevance-calibrator"
_KEYS = ("format", "kind", "features", "model", "isotonic", "query_confidence", "fit")
#: Keys only some files hold (format 3).
_OPTIONAL_KEYS = ("hybrid",)
#: Share of training queries held out to decide whether the isotonic step improves calibration.
HOLDOUT = 0.2
#: Held-out queries the isotonic step needs before it may be kept (the hold-out of 100 judged
#: queries): 200 held-out hits, about 13 in each of the ECE's 15 bins. On fewer the held-out
#: comparison is noise that the step's end blocks win, mapping the surest hits to exactly 1.0
#: (a review's case: fitted on 20 LIMIT dev queries, 4 held out, 208 top-10 hits of 500 test
#: queries read 1.0, 62.5% of them relevant; test ECE 0.068, against 0.009 fitted on 500).
MIN_ISOTONIC_HOLDOUT = 20


@dataclass(frozen=True, eq=False)
class RelevanceCalibrator:
    """Hit features (see `features.hit_features`) -> P(the hit is relevant)."""

    features: tuple[str, ...]
    logistic: Logistic
    #: Isotonic knots (x = logistic output, y = calibrated probability), or None.
    isotonic: tuple[np.ndarray, np.ndarray] | None = None
    #: A learned query confidence to report instead of the outrank probability, or None.
    confidence: QueryConfidence | None = None
    #: How it was fitted (data, sizes, the isotonic decision): shown, never used to predict.
    fit_info: dict[str, Any] | None = None
    #: For hybrid searches: a calibrator fitted on hybrid rankings that also reads each hit's
    #: BM25 features, or None (hybrid searches then read this one along the fused list).
    hybrid: RelevanceCalibrator | None = None

    def __post_init__(self) -> None:
        """Known feature names, one coefficient each, monotone knots: predict can trust them."""
        _check_features(self.features, self.logistic)
        if self.isotonic is not None:
            _check_knots(*self.isotonic)
        if self.hybrid is not None and (
            not self.hybrid.uses_bm25
            or self.hybrid.hybrid is not None
            or self.hybrid.confidence is not None
        ):
            raise ValueError(
                "a hybrid calibrator reads the BM25 hit features and holds no query confidence "
                "or hybrid calibrator of its own"
            )

    @property
    def uses_disagreement(self) -> bool:
        """Whether predictions need each hit's member disagreement as a feature."""
        return DISAGREEMENT in self.features

    @property
    def uses_bm25(self) -> bool:
        """Whether predictions need each hit's BM25 features (a hybrid search's calibrator)."""
        return BM25_HIT_FEATURES[0] in self.features

    def for_search(self, *, hybrid: bool) -> RelevanceCalibrator:
        """The calibrator a search of this kind reads: the hybrid one where there is one."""
        return self.hybrid if hybrid and self.hybrid is not None else self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """P(relevant) in [0, 1] for each row of an (..., F) float64 feature array."""
        features = np.asarray(features, dtype=np.float64)
        p = self.logistic.predict(features.reshape(-1, features.shape[-1]))
        if self.isotonic is not None:
            p = np.interp(p, *self.isotonic)
        return np.clip(p, 0.0, 1.0).reshape(features.shape[:-1])

    def predict_ranked(
        self,
        dots: np.ndarray,
        variances: np.ndarray,
        k: int,
        cosines: np.ndarray | None = None,
        bm25: np.ndarray | None = None,
    ) -> np.ndarray:
        """P(relevant) of the first k ranked hits, from the ranked dots and variances: (n,) for
        one query or (..., n) for queries ranked to one depth, giving (..., min(k, n)), never
        rising down a query's list (see `non_increasing`).

        `cosines` ((..., n, K) member cosines of the ranked hits, see
        `scoring.ensemble.member_cosines`) is needed only by a calibrator that uses member
        disagreement, `bm25` ((..., n, 2)
        `features.bm25_hit_features`) only by a hybrid search's.
        """
        if self.uses_disagreement and cosines is None:
            raise ValueError("this calibrator uses member disagreement: pass the member cosines")
        if self.uses_bm25 and bm25 is None:
            raise ValueError("this calibrator reads BM25's hit features: pass them (`bm25`)")
        spread = cosine_spread(cosines) if self.uses_disagreement and cosines is not None else None
        found = bm25 if self.uses_bm25 else None
        p = self.predict(hit_features(dots, variances, k, spread, found))
        return non_increasing(_ties_alike(p, np.asarray(dots), np.asarray(variances)))

    def __eq__(self, other: object) -> bool:
        """Equal when both compute the same predictions (`computed`), however each was fitted:
        a collection's check of its kept copy compares calibrators this way."""
        return isinstance(other, RelevanceCalibrator) and self.computed() == other.computed()

    def computed(self) -> dict[str, Any]:
        """The JSON form without its fit records (its own, its query confidence's, its hybrid
        one's): what it computes, which a tuning saved under another pipeline name shares."""
        data = {**self.to_json(), "fit": None}
        if self.confidence is not None:
            data["query_confidence"] = {**data["query_confidence"], "fit": None}
        if self.hybrid is not None:
            data["hybrid"] = self.hybrid.computed()
        return data

    def to_json(self) -> dict[str, Any]:
        """The calibrator as plain JSON: coefficients, scaler and knots, with a format version."""
        knots = self.isotonic
        data = {
            "format": self._format,
            "kind": _KIND,
            "features": list(self.features),
            "model": self.logistic.to_json(),
            "isotonic": None if knots is None else {"x": knots[0].tolist(), "y": knots[1].tolist()},
            "query_confidence": None if self.confidence is None else self.confidence.to_json(),
            "fit": self.fit_info,
        }
        if self.hybrid is not None:
            data["hybrid"] = self.hybrid.to_json()
        return data

    @property
    def _format(self) -> int:
        """The earliest format that holds this calibrator: 3 with a hybrid calibrator, 2 with a
        query confidence's hybrid or text model, else 1."""
        c = self.confidence
        if self.hybrid is not None:
            return 3
        extra = c is not None and (c.hybrid_model is not None or c.text_model is not None)
        return 2 if extra else 1

    def save(self, path: str | os.PathLike) -> Path:
        """Write the JSON atomically: a crash leaves the old file or the new one; only a
        calibrator `load` would read back (a hybrid one is saved within its dense one's)."""
        path = Path(path)
        text = json.dumps(require_dense(self).to_json(), indent=1, allow_nan=False)
        atomic.write_bytes(path, (text + "\n").encode())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> RelevanceCalibrator:
        """Read a saved calibrator; a malformed file is a ValueError naming it and the problem."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # not JSON, or not UTF-8
            raise ValueError(f"{path} is not valid JSON: {exc}") from exc
        try:
            return cls.from_json(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc

    @classmethod
    def from_json(cls, data: object) -> RelevanceCalibrator:
        """A calibrator from its JSON form, every field checked."""
        return require_dense(cls._parsed(data))

    @classmethod
    def _parsed(cls, data: object) -> RelevanceCalibrator:
        """A calibrator of either kind from its JSON form (the nested "hybrid" one reads the
        BM25 hit features), every field checked."""
        if not isinstance(data, dict):
            raise ValueError(f"a calibrator must be a JSON object, got {type(data).__name__}")
        unknown = [key for key in data if key not in _KEYS + _OPTIONAL_KEYS]
        missing = [key for key in _KEYS if key not in data]
        if unknown or missing:
            raise ValueError(
                f"unknown keys {unknown}, missing keys {missing}; a calibrator has "
                f"{list(_KEYS)}, and optionally {list(_OPTIONAL_KEYS)}"
            )
        if data["format"] not in READABLE_FORMATS or data["kind"] != _KIND:
            raise ValueError(
                f"format {data['format']!r} of kind {data['kind']!r}: expected a format in "
                f"{READABLE_FORMATS} of kind {_KIND!r}; refit with scripts/fit_calibration.py "
                "or upgrade probembed"
            )
        if not isinstance(data["features"], list):
            raise ValueError('"features" must be a list of feature names')
        knots, confidence, hybrid = data["isotonic"], data["query_confidence"], data.get("hybrid")
        if knots is not None and (not isinstance(knots, dict) or set(knots) != {"x", "y"}):
            raise ValueError('"isotonic" must be null or {"x": [...], "y": [...]}')
        if hybrid is not None:
            try:
                hybrid = cls._parsed(hybrid)
            except ValueError as exc:
                raise ValueError(f'"hybrid": {exc}') from exc
        calibrator = cls(
            features=tuple(data["features"]),
            logistic=Logistic.from_json(data["model"], '"model"'),
            isotonic=None
            if knots is None
            else (floats(knots["x"], "isotonic.x"), floats(knots["y"], "isotonic.y")),
            confidence=None
            if confidence is None
            else QueryConfidence.from_json(confidence, '"query_confidence"'),
            fit_info=data["fit"],
            hybrid=hybrid,
        )
        if data["format"] < calibrator._format:  # what earlier versions would read wrongly
            raise ValueError(
                f"format {data['format']} cannot hold what this file holds: its "
                + ("hybrid calibrator" if hybrid is not None else "query confidence's models")
                + f" came with format {calibrator._format}"
            )
        return calibrator

    @classmethod
    def fit(
        cls,
        features: np.ndarray,
        relevant: np.ndarray,
        groups: np.ndarray,
        names: Sequence[str] = BASE_FEATURES,
        seed: int = 0,
        isotonic: bool | None = None,
    ) -> RelevanceCalibrator:
        """Fit on hits grouped by query; keep the isotonic step only if held-out ECE improves.

        A seeded HOLDOUT share of the queries (a query's hits never split) decides the
        isotonic step (unless `isotonic` forces it on or off; off with fewer than
        MIN_ISOTONIC_HOLDOUT held-out queries, or where the other queries hold hits of one
        class only); the chosen model is then refitted on every hit. `fit_info` says why.
        """
        x, y, groups = _validate_training(features, relevant, groups, names)
        queries = np.unique(groups)
        count = max(1, round(HOLDOUT * len(queries)))
        held = np.isin(groups, np.random.default_rng(seed).permutation(queries)[:count])
        held_ece: dict[str, float] | None = None
        if len(np.unique(y[~held])) == 2:  # else the held-out queries hold a whole class
            plain = _fit(x[~held], y[~held], names, seed, isotonic=False)
            stepped = _fit(x[~held], y[~held], names, seed, isotonic=True)
            held_ece = {
                "logistic": _ece(plain.predict(x[held]), y[held]),
                "logistic+isotonic": _ece(stepped.predict(x[held]), y[held]),
            }
        use_isotonic, why = _isotonic_choice(count, held_ece, isotonic)
        info = {
            "hits": len(y),
            "queries": len(queries),
            "relevant": int(y.sum()),
            "seed": seed,
            "holdout_queries": count,
            "holdout_ece": held_ece,
        }
        final = _fit(x, y, names, seed, isotonic=use_isotonic)
        if use_isotonic and final.isotonic is None:
            why = "the logistic gives every hit one value: no map to fit"
        kept = final.isotonic is not None
        return replace(final, fit_info={**info, "isotonic": kept, "isotonic_why": why})


def _isotonic_choice(
    held: int, held_ece: dict[str, float] | None, forced: bool | None
) -> tuple[bool, str]:
    """Whether to fit the isotonic step, and why: the step can overfit, so it is kept only
    where enough held-out queries show it lowers the calibration error."""
    if forced is not None:
        return forced, f"forced {'on' if forced else 'off'}"
    if held < MIN_ISOTONIC_HOLDOUT:
        return False, f"{held} held-out queries; judging it needs {MIN_ISOTONIC_HOLDOUT}"
    if held_ece is None:
        return False, "the other queries hold hits of one class only: nothing to judge it on"
    if held_ece["logistic+isotonic"] < held_ece["logistic"]:
        return True, "it lowers the held-out calibration error"
    return False, "it does not lower the held-out calibration error"


def require_dense(calibrator: RelevanceCalibrator) -> RelevanceCalibrator:
    """The calibrator, if it can serve dense searches: one that reads BM25 hit features would
    fail every dense search, and belongs as another calibrator's `hybrid`."""
    if calibrator.uses_bm25:
        raise ValueError(
            f"a pipeline's calibrator serves dense searches, which have no BM25 hit features "
            f'{list(BM25_HIT_FEATURES)}: a calibrator reading them belongs under "hybrid"'
        )
    return calibrator


def _ties_alike(p: np.ndarray, dots: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """A hit that ties the one above it (the same dot and variance: a duplicate passage) gets
    its probability, not a lower one for its rank alone."""
    n = p.shape[-1]
    tied = (dots[..., 1:n] == dots[..., : n - 1]) & (variances[..., 1:n] == variances[..., : n - 1])
    if not tied.any():
        return p
    p = np.array(p, dtype=np.float64)
    for i in range(1, n):  # a run of ties takes its first hit's value
        p[..., i] = np.where(tied[..., i - 1], p[..., i - 1], p[..., i])
    return p


def non_increasing(p: np.ndarray) -> np.ndarray:
    """Each query's hit probabilities (last axis) capped by every one ranked above them.

    The calibrator reads each hit's own features, so a hit can come out a little more likely
    relevant than one ranked above it; a list whose p_relevant rises would make
    `min_p_relevant` drop a hit and keep one below it. A running minimum keeps what a hit
    shows independent of the hits below it, so asking for more hits never changes the
    p_relevant of those already returned (pooling adjacent violators would not).
    """
    return np.minimum.accumulate(np.asarray(p, dtype=np.float64), axis=-1)


def _fit(
    x: np.ndarray, y: np.ndarray, names: Sequence[str], seed: int, isotonic: bool
) -> RelevanceCalibrator:
    """A logistic regression, optionally followed by an isotonic map of its output (not where
    that output is one value: a map of one point is the logistic's constant again)."""
    from sklearn.isotonic import IsotonicRegression

    plain = RelevanceCalibrator(tuple(names), Logistic.fit(x, y, seed))
    if not isotonic:
        return plain
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(plain.predict(x), y)
    knots = (iso.X_thresholds_.astype(np.float64), iso.y_thresholds_.astype(np.float64))
    if len(knots[0]) < 2:
        return plain
    return replace(plain, isotonic=knots)


def _ece(prob: np.ndarray, outcome: np.ndarray) -> float:
    """Expected calibration error, with the evaluation package's definition."""
    from probembed.evaluation.uncertainty import expected_calibration_error

    return expected_calibration_error(prob, outcome)


def _validate_training(
    features: np.ndarray, relevant: np.ndarray, groups: np.ndarray, names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Aligned finite features, 0/1 labels with both classes, and a query id per hit."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(relevant)
    groups = np.asarray(groups)
    if x.ndim != 2 or x.shape[1] != len(names):
        raise ValueError(f"features must be (n, {len(names)}) for {list(names)}, got {x.shape}")
    if y.shape != (len(x),) or groups.shape != (len(x),):
        raise ValueError(
            f"relevant {y.shape} and groups {groups.shape} must have one entry per hit ({len(x)})"
        )
    if not np.isfinite(x).all():
        raise ValueError(f"features hold {int((~np.isfinite(x)).sum())} non-finite values")
    if not np.isin(y, (0, 1)).all() or len(np.unique(y)) < 2:
        raise ValueError(
            "relevant must be 0/1 (or booleans) with both relevant and irrelevant hits"
        )
    if len(np.unique(groups)) < 2:
        raise ValueError("hits must come from at least two queries, to hold some out")
    return x, y.astype(np.int64), groups


def _check_features(names: tuple[str, ...], logistic: Logistic) -> None:
    """The base features in order, optionally then disagreement, optionally then the BM25 hit
    features; one coefficient each."""
    allowed = [
        (*BASE_FEATURES, *spread, *words)
        for spread in ((), (DISAGREEMENT,))
        for words in ((), BM25_HIT_FEATURES)
    ]
    if names not in allowed:
        raise ValueError(
            f"calibrator features must be {list(BASE_FEATURES)}, optionally followed by "
            f"{DISAGREEMENT!r}, optionally followed by {list(BM25_HIT_FEATURES)}; "
            f"got {list(names)}"
        )
    if logistic.width != len(names):
        raise ValueError(f"{len(names)} features but {logistic.width} coefficients")


def _check_knots(x: np.ndarray, y: np.ndarray) -> None:
    """Isotonic knots: two aligned lists, non-decreasing, y in [0, 1]."""
    if x.shape != y.shape or len(x) < 2:
        raise ValueError("isotonic x and y must be two lists of one length >= 2")
    if (np.diff(x) < 0).any() or (np.diff(y) < 0).any():
        raise ValueError("isotonic knots must be non-decreasing in x and in y")
    if y.min() < 0 or y.max() > 1:
        raise ValueError("isotonic y must be probabilities in [0, 1]")
