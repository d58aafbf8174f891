"""The names of the fusion methods and modes, and strict parsing of them."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

SINGLE_PREFIX = "single:"

_E = TypeVar("_E", bound=StrEnum)


class Fusion(StrEnum):
    """How per-model weights are chosen; "single:<model>" (not a member) keeps one model."""

    #: Per-text weights from each model's uncertainty (uncertainty-driven embedding convolution).
    UEC = "uec"
    #: Uniform weights: the plain average ensemble.
    MEAN = "mean"
    #: Fixed per-model weights given by the caller, e.g. tuned on validation data.
    WEIGHTED = "weighted"
    #: Plain concatenation of the normalised models (uniform weights, always concat mode).
    CONCAT = "concat"
    #: The published UEC (MLAI-Yonsei/UEC): softmax(Σ_d 1/ṽ_d / T), ṽ = σ²/‖σ²‖², T = 2.
    UEC_PAPER = "uec-paper"


class FusionMode(StrEnum):
    """How weighted per-model Gaussians are combined into one."""

    #: Weighted sum of means; needs models of equal dimension.
    SUM = "sum"
    #: Concatenation of √π-scaled means; any dimensions, unit-norm in, unit-norm out.
    CONCAT = "concat"


def _parse(kind: type[_E], value: object, what: str, valid: list[str]) -> _E:
    """Look a name up in a str enum, raising a ValueError that lists the valid names."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value.strip().lower())
        except ValueError:
            pass
    raise ValueError(f"unknown fusion {what} {value!r}; valid {what}s are: {', '.join(valid)}")


def single_model(method: Fusion | str) -> str | None:
    """The model name of a "single:<model>" method, or None for any other method."""
    if not isinstance(method, str) or isinstance(method, Fusion):
        return None
    if not method.startswith(SINGLE_PREFIX):
        return None
    model = method[len(SINGLE_PREFIX) :].strip()
    if not model:
        raise ValueError(f"{method!r} names no model; write it as '{SINGLE_PREFIX}<model>'")
    return model


def parse_fusion(method: Fusion | str) -> Fusion:
    """Turn a method name into a Fusion, failing with the valid names on a typo."""
    valid = [f.value for f in Fusion] + [f"{SINGLE_PREFIX}<model>"]
    return _parse(Fusion, method, "method", valid)


def parse_mode(mode: FusionMode | str) -> FusionMode:
    """Turn a mode name into a FusionMode, failing with the valid names on a typo."""
    return _parse(FusionMode, mode, "mode", [m.value for m in FusionMode])
