"""Uncertainty estimators: each turns one deterministic encoder into a probabilistic one."""

from __future__ import annotations

from typing import Any

from probembed.encoders.base import Encoder
from probembed.uncertainty.base import Estimator
from probembed.uncertainty.head import HeadEstimator
from probembed.uncertainty.laplace import LaplaceEstimator
from probembed.uncertainty.perturb import PerturbEstimator

ESTIMATORS: dict[str, type[Estimator]] = {
    cls.kind: cls for cls in (LaplaceEstimator, PerturbEstimator, HeadEstimator)
}


def estimator_class(kind: str) -> type[Estimator]:
    """Look up an estimator by name, listing the valid names on a miss."""
    try:
        return ESTIMATORS[kind]
    except KeyError:
        raise ValueError(
            f"unknown estimator {kind!r}; choose one of {sorted(ESTIMATORS)}"
        ) from None


def make_estimator(kind: str, encoder: Encoder, **params: Any) -> Estimator:
    """Build an unfitted estimator of the named kind around an encoder."""
    return estimator_class(kind)(encoder, **params)


__all__ = [
    "ESTIMATORS",
    "Estimator",
    "HeadEstimator",
    "LaplaceEstimator",
    "PerturbEstimator",
    "estimator_class",
    "make_estimator",
]
