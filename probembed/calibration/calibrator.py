"""P(relevant) per hit: a logistic regression on standardised hit features, optionally isotonic.

Fitting needs scikit-learn; predicting, saving and loading need numpy only, so a pipeline that
ships a calibrator loads and searches without scikit-learn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from probembed import atomic
from probembed.calibration.features import (
    BASE_FEATURES,
    DISAGREEMENT,
    disagreement,
    hit_features,
)

CALIBRATION_FILE = "calibration.json"
FORMAT_VERSION = 1
_KIND = "relevance-calibrator"
_KEYS = ("format", "kind", "features", "mean", "scale", "coef", "intercept", "isotonic", "fit")
#: Share of training queries held out to decide whether the isotonic step improves calibration.
HOLDOUT = 0.2


@dataclass(frozen=True, eq=False)
class RelevanceCalibrator:
    """Hit features (see `features.hit_features`) -> P(the hit is relevant)."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    #: Isotonic knots (x = logistic output, y = calibrated probability), or None.
    isotonic: tuple[np.ndarray, np.ndarray] | None = None
    #: How it was fitted (data, sizes, the isotonic decision): shown, never used to predict.
    fit_info: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Check names and shapes once, so predict and save can trust them."""
        _check_model(self, "calibrator")

    @property
    def uses_disagreement(self) -> bool:
        """Whether predictions need each hit's member disagreement as the last feature."""
        return DISAGREEMENT in self.features

    def predict(self, features: np.ndarray) -> np.ndarray:
        """P(relevant) in [0, 1] for each row of an (n, F) float64 feature matrix."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(
                f"features must be (n, {len(self.features)}) for {list(self.features)}, "
                f"got shape {x.shape}"
            )
        logit = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        p = 0.5 * (1.0 + np.tanh(0.5 * logit))  # the logistic function, without overflow
        if self.isotonic is not None:
            p = np.interp(p, *self.isotonic)
        return np.clip(p, 0.0, 1.0)

    def predict_ranked(
        self, dots: np.ndarray, variances: np.ndarray, k: int, cosines: np.ndarray | None = None
    ) -> np.ndarray:
        """P(relevant) of a query's first k ranked hits, from its ranked dots and variances.

        `cosines` (ranked hits x member models, see `features.member_cosines`) is needed only
        by a calibrator that uses member disagreement.
        """
        if self.uses_disagreement and cosines is None:
            raise ValueError("this calibrator uses member disagreement: pass the member cosines")
        spread = disagreement(cosines) if self.uses_disagreement else None
        return self.predict(hit_features(dots, variances, k, spread))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RelevanceCalibrator) and self.to_json() == other.to_json()

    def to_json(self) -> dict[str, Any]:
        """The calibrator as plain JSON: coefficients, scaler and knots, with a format version."""
        knots = None if self.isotonic is None else [v.tolist() for v in self.isotonic]
        return {
            "format": FORMAT_VERSION,
            "kind": _KIND,
            "features": list(self.features),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": float(self.intercept),
            "isotonic": None if knots is None else {"x": knots[0], "y": knots[1]},
            "fit": self.fit_info,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the JSON atomically: a crash leaves the old file or the new one."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=1, allow_nan=False)
        atomic.write_bytes(path, (text + "\n").encode())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> RelevanceCalibrator:
        """Read a saved calibrator; a malformed file is a ValueError naming it and the problem."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from exc
        try:
            return cls.from_json(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc

    @classmethod
    def from_json(cls, data: object) -> RelevanceCalibrator:
        """A calibrator from its JSON form, every field checked."""
        if not isinstance(data, dict):
            raise ValueError(f"a calibrator must be a JSON object, got {type(data).__name__}")
        unknown = [key for key in data if key not in _KEYS]
        missing = [key for key in _KEYS[:-2] if key not in data]
        if unknown or missing:
            raise ValueError(
                f"unknown keys {unknown} / missing keys {missing}; a calibrator has {list(_KEYS)}"
            )
        if data["format"] != FORMAT_VERSION or data["kind"] != _KIND:
            raise ValueError(
                f"format {data['format']!r}, kind {data['kind']!r}: expected format "
                f"{FORMAT_VERSION} of kind {_KIND!r}"
            )
        knots = data.get("isotonic")
        if knots is not None and (not isinstance(knots, dict) or set(knots) != {"x", "y"}):
            raise ValueError('"isotonic" must be null or {"x": [...], "y": [...]}')
        if not isinstance(data["features"], list):
            raise ValueError('"features" must be a list of feature names')
        return cls(
            features=tuple(data["features"]),
            mean=_floats(data["mean"], "mean"),
            scale=_floats(data["scale"], "scale"),
            coef=_floats(data["coef"], "coef"),
            intercept=float(_floats([data["intercept"]], "intercept")[0]),
            isotonic=None
            if knots is None
            else (_floats(knots["x"], "isotonic.x"), _floats(knots["y"], "isotonic.y")),
            fit_info=data.get("fit"),
        )

    @classmethod
    def fit(
        cls,
        features: np.ndarray,
        relevant: np.ndarray,
        groups: np.ndarray,
        names: Sequence[str] = BASE_FEATURES,
        seed: int = 0,
    ) -> RelevanceCalibrator:
        """Fit on hits grouped by query; keep the isotonic step only if held-out ECE improves.

        A seeded HOLDOUT share of the queries (never split across parts) decides the isotonic
        step; the chosen model is then refitted on every hit.
        """
        x, y, groups = _validate_training(features, relevant, groups, names)
        rng = np.random.default_rng(seed)
        queries = np.unique(groups)
        held = np.isin(groups, rng.permutation(queries)[: max(1, round(HOLDOUT * len(queries)))])
        plain = _fit_logistic(x[~held], y[~held], names, seed, isotonic=False)
        stepped = _fit_logistic(x[~held], y[~held], names, seed, isotonic=True)
        held_ece = {
            "logistic": _ece(plain.predict(x[held]), y[held]),
            "logistic+isotonic": _ece(stepped.predict(x[held]), y[held]),
        }
        use_isotonic = held_ece["logistic+isotonic"] < held_ece["logistic"]
        final = _fit_logistic(x, y, names, seed, isotonic=use_isotonic)
        info = {
            "hits": len(y),
            "queries": len(queries),
            "relevant": int(y.sum()),
            "seed": seed,
            "holdout_queries": len(np.unique(groups[held])),
            "holdout_ece": held_ece,
            "isotonic": bool(use_isotonic),
        }
        return cls(
            final.features,
            final.mean,
            final.scale,
            final.coef,
            final.intercept,
            final.isotonic,
            info,
        )


def _fit_logistic(
    x: np.ndarray, y: np.ndarray, names: Sequence[str], seed: int, isotonic: bool
) -> RelevanceCalibrator:
    """Standardise, fit a logistic regression, and optionally an isotonic map of its output."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)  # a constant feature: centred, left unscaled
    model = LogisticRegression(max_iter=1000, random_state=seed).fit((x - mean) / scale, y)
    plain = RelevanceCalibrator(
        tuple(names), mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0])
    )
    if not isotonic:
        return plain
    raw = plain.predict(x)
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(raw, y)
    knots = (iso.X_thresholds_.astype(np.float64), iso.y_thresholds_.astype(np.float64))
    return RelevanceCalibrator(plain.features, mean, scale, plain.coef, plain.intercept, knots)


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


def _floats(values: object, name: str) -> np.ndarray:
    """A finite float64 vector from a JSON list, or a ValueError naming the field."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f'"{name}" must be a list of numbers, got {values!r:.60}') from None
    if arr.ndim != 1 or not np.isfinite(arr).all():
        raise ValueError(f'"{name}" must be a flat list of finite numbers, got {values!r:.60}')
    return arr


def _check_model(model: RelevanceCalibrator, what: str) -> None:
    """Known feature names in order, one mean/scale/coef per feature, monotone isotonic knots."""
    known = (*BASE_FEATURES, DISAGREEMENT)
    if model.features not in (BASE_FEATURES, known):
        raise ValueError(
            f"{what} features must be {list(BASE_FEATURES)}, optionally followed by "
            f"{DISAGREEMENT!r}; got {list(model.features)}"
        )
    width = len(model.features)
    for name in ("mean", "scale", "coef"):
        if np.shape(getattr(model, name)) != (width,):
            raise ValueError(
                f'"{name}" must hold {width} numbers, one per feature, got '
                f"{np.shape(getattr(model, name))}"
            )
    if (model.scale <= 0).any():
        raise ValueError('"scale" must be positive')
    if model.isotonic is not None:
        x, y = model.isotonic
        if x.shape != y.shape or len(x) < 2:
            raise ValueError("isotonic x and y must be two lists of one length >= 2")
        if (np.diff(x) < 0).any() or (np.diff(y) < 0).any():
            raise ValueError("isotonic knots must be non-decreasing in x and in y")
        if y.min() < 0 or y.max() > 1:
            raise ValueError("isotonic y must be probabilities in [0, 1]")
