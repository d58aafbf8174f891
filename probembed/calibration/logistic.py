"""A standardised logistic regression as plain numbers: fitted with scikit-learn, run in numpy.

The one model behind both the per-hit relevance calibrator and the learned query confidence.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class Logistic:
    """P(y = 1 | x) = σ(((x − mean) / scale) · coef + intercept)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float

    def __post_init__(self) -> None:
        """One mean, positive scale and coefficient per feature, all finite."""
        width = np.shape(self.coef)
        for name in ("mean", "scale", "coef"):
            values = getattr(self, name)
            if np.ndim(values) != 1 or np.shape(values) != width:
                raise ValueError(
                    f'"{name}" must hold one number per feature ({width}), got {np.shape(values)}'
                )
        if (self.scale <= 0).any():
            raise ValueError('"scale" must be positive')

    @property
    def width(self) -> int:
        """Number of features."""
        return len(self.coef)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """P(y = 1) per row of an (n, width) matrix; a NaN feature counts as its training mean."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.width:
            raise ValueError(f"features must be (n, {self.width}), got shape {x.shape}")
        z = np.nan_to_num((x - self.mean) / self.scale, nan=0.0)
        # summed column by column, not `z @ coef`: a matrix-vector product rounds one row alone
        # differently from a batch, and a hit's p_relevant must not depend on its neighbours
        logit = np.full(len(z), self.intercept)
        for column, weight in zip(z.T, self.coef, strict=True):
            logit = logit + column * weight
        return 0.5 * (1.0 + np.tanh(0.5 * logit))  # σ, no overflow

    def to_json(self) -> dict[str, Any]:
        """The four parameters as plain lists and a float."""
        return {
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": float(self.intercept),
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> Logistic:
        """The model from its JSON form, every field checked; errors name `where`."""
        keys = ("mean", "scale", "coef", "intercept")
        if not isinstance(data, dict) or set(data) != set(keys):
            raise ValueError(f"{where} must be a JSON object with exactly the keys {list(keys)}")
        try:
            mean, scale, coef = (floats(data[k], f"{where}.{k}") for k in keys[:3])
            intercept = float(floats([data["intercept"]], f"{where}.intercept")[0])
            return cls(mean, scale, coef, intercept)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc

    @classmethod
    def fit(cls, features: np.ndarray, labels: np.ndarray, seed: int) -> Logistic:
        """Standardise, then fit scikit-learn's L2-regularised logistic regression (C = 1).

        A NaN feature (a member weighted 0) counts as its mean, as in `predict`.
        """
        from sklearn.linear_model import LogisticRegression

        x = np.asarray(features, dtype=np.float64)
        with warnings.catch_warnings():  # a column of NaN only: mean 0, scale 1 below
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, scale = np.nan_to_num(np.nanmean(x, axis=0)), np.nanstd(x, axis=0)
        scale = np.where(scale > 0, scale, 1.0)  # a constant feature: centred, left unscaled
        model = LogisticRegression(max_iter=1000, random_state=seed)
        model.fit(np.nan_to_num((x - mean) / scale, nan=0.0), labels)
        return cls(mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0]))


def floats(values: object, name: str) -> np.ndarray:
    """A finite float64 vector from a JSON list, or a ValueError naming the field."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f'"{name}" must be a list of numbers, got {values!r:.60}') from None
    if arr.ndim != 1 or not np.isfinite(arr).all():
        raise ValueError(f'"{name}" must be a flat list of finite numbers, got {values!r:.60}')
    return arr
