"""What a pipeline is made of, as settings: its members before fitting, its fusion, its
default score and its collection adaptation, each checked when made by the rules that will
apply it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from probembed.fusion import Fused, fuse, parse_fusion, parse_mode, single_model
from probembed.fusion.combine import default_temperature
from probembed.fusion.names import SINGLE_PREFIX
from probembed.gaussian import Gaussian
from probembed.scoring import parse_score, score_matrix


@dataclass(frozen=True)
class FusionConfig:
    """How the K per-model Gaussians of a text become one (see probembed.fusion.fuse).

    Checked when made, by the rules `fuse` applies: a config that is accepted always encodes
    (the model count, once known, is checked again by `Pipeline`).
    """

    method: str = "uec"
    mode: str = "concat"
    temperature: float | None = None  # None: the method's default (see default_temperature)
    prior: tuple[float, ...] | None = None
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        """Names in canonical form, numbers as floats, then fuse's own checks on a probe."""
        model = single_model(self.method)
        method = f"{SINGLE_PREFIX}{model}" if model else str(parse_fusion(self.method))
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "mode", str(parse_mode(self.mode)))
        temperature = default_temperature(method) if self.temperature is None else self.temperature
        object.__setattr__(self, "temperature", _number(temperature, "fusion temperature"))
        object.__setattr__(self, "prior", _vector(self.prior, "fusion prior"))
        object.__setattr__(self, "weights", _vector(self.weights, "fusion weights"))
        self.check(None)

    def check(self, models: Sequence[str] | None) -> None:
        """Fuse a one-text probe per model, so this config meets exactly the rules of `fuse`."""
        names = tuple(models) if models is not None else self._probe_models()
        self.fuse([_probe()] * len(names), names)

    def fuse(self, parts: Sequence[Gaussian], models: Sequence[str]) -> Fused:
        """Combine per-model Gaussians with these settings: the one way a config is applied."""
        return fuse(
            parts,
            models,
            method=self.method,
            mode=self.mode,
            temperature=self.temperature,
            prior=self.prior,
            weights=self.weights,
        )

    def shares(self, models: Sequence[str]) -> tuple[float, ...]:
        """Each model's share of a fused text before any per-text tilt: the one of a
        single-model method, the static weights or the prior normalised (a zero prior stays
        zero under any uec temperature), else equal."""
        model = single_model(self.method)
        if model is not None:
            return tuple(float(name == model) for name in models)
        given = self.weights if self.weights is not None else self.prior
        if given is None:
            return (1.0 / len(models),) * len(models)
        return tuple(w / sum(given) for w in given)

    def _probe_models(self) -> tuple[str, ...]:
        """Stand-in model names before the pipeline is known: as many as prior/weights give."""
        model = single_model(self.method)
        if model:
            return (model,)
        given = self.weights if self.weights is not None else self.prior
        return tuple(f"model-{k}" for k in range(len(given) if given else 1))


@dataclass(frozen=True)
class ScoreConfig:
    """The similarity a pipeline's searches use unless told otherwise; checked when made."""

    name: str = "uec"
    beta: float = 1.0

    def __post_init__(self) -> None:
        """The score's canonical name, then the scoring module's own checks on a probe."""
        object.__setattr__(self, "name", str(parse_score(self.name)))
        object.__setattr__(self, "beta", _number(self.beta, "score beta"))
        score_matrix(_probe(), _probe(), self.name, self.beta)


@dataclass(frozen=True)
class AdaptConfig:
    """How far a collection's own member agreement tilts the fusion prior (0 keeps the prior).

    Not part of the fingerprint: stored rows are fused with the prior and tilted at search
    time (probembed.fusion.adapt), so no vector depends on it.
    """

    gamma: float = 0.0

    def __post_init__(self) -> None:
        """gamma as a finite float >= 0."""
        gamma = _number(self.gamma, "adapt gamma")
        if not (math.isfinite(gamma) and gamma >= 0):
            raise ValueError(f"adapt gamma must be a finite number >= 0, got {self.gamma!r}")
        object.__setattr__(self, "gamma", gamma)


def _probe() -> Gaussian:
    """One text in one dimension: enough to run fuse's or score's checks on a config."""
    return Gaussian(np.ones((1, 1)), np.ones((1, 1)))


def _number(value: object, what: str) -> float:
    """A float from a number (or "inf"), or a ValueError naming the setting."""
    if isinstance(value, bool | np.bool_):  # float(True) is 1.0: a JSON true is not a number
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None


def _vector(value: object, what: str) -> tuple[float, ...] | None:
    """A tuple of floats (JSON- and hash-friendly) from any flat sequence, or None."""
    if value is None:
        return None
    if any(isinstance(v, bool | np.bool_) for v in np.asarray(value, dtype=object).ravel()):
        raise ValueError(f"{what} must be numbers, one per model, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers, one per model, got {value!r}") from None
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat list, one number per model, got shape {arr.shape}")
    return tuple(float(v) for v in arr)


@dataclass(frozen=True)
class ModelSpec:
    """One member of the ensemble before fitting: an encoder and how to make it probabilistic."""

    encoder: str
    estimator: str = "laplace"
    params: dict[str, Any] = field(default_factory=dict)
    encoder_params: dict[str, Any] = field(default_factory=dict)
