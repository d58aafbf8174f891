"""Combining the K Gaussians of each text into one, with weights a user can inspect."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from probembed.fusion.names import Fusion, FusionMode, parse_fusion, parse_mode, single_model
from probembed.fusion.weights import (
    DEFAULT_TEMPERATURE,
    PAPER_TEMPERATURE,
    fusion_weights,
    normalized_prior,
    paper_logits,
    paper_weights,
    shape_variance,
    uncertainty,
)
from probembed.gaussian import Gaussian

#: The options each method reads; any other option given is an error, not silently ignored.
_USED_OPTIONS: dict[str, frozenset[str]] = {
    Fusion.UEC: frozenset({"temperature", "prior"}),
    Fusion.WEIGHTED: frozenset({"weights"}),
    Fusion.UEC_PAPER: frozenset({"temperature"}),
}

#: The temperature of a method when none is given; DEFAULT_TEMPERATURE for the others.
_DEFAULT_TEMPERATURES: dict[str, float] = {Fusion.UEC_PAPER: PAPER_TEMPERATURE}


@dataclass(frozen=True, eq=False)
class Fused:
    """One fused Gaussian per text, with the per-text weight each model received."""

    gaussian: Gaussian
    weights: np.ndarray
    models: tuple[str, ...]

    def __post_init__(self) -> None:
        expected = (len(self.gaussian), len(self.models))
        if np.shape(self.weights) != expected:
            raise ValueError(
                f"weights must have shape {expected} (texts, models), got {np.shape(self.weights)}"
            )

    @staticmethod
    def concat(parts: Sequence[Fused]) -> Fused:
        """The texts of several results of one pipeline, in order (a request encoded in
        pieces)."""
        models = parts[0].models
        if any(part.models != models for part in parts):
            raise ValueError(
                f"cannot join results of different models: {[p.models for p in parts]}"
            )
        gaussian = Gaussian.concat([part.gaussian for part in parts])
        return Fused(gaussian, np.concatenate([part.weights for part in parts]), models)

    def rows(self, index: slice | np.ndarray | Sequence[int]) -> Fused:
        """These texts' fused Gaussians and weights (a slice, or row positions)."""
        positions = np.arange(len(self.gaussian))[index]
        return Fused(self.gaussian[positions], self.weights[positions], self.models)

    def explain(self, i: int) -> dict[str, float]:
        """Model -> weight for text i, to see which model was trusted and how much; to 15
        significant digits, as float64 arithmetic leaves 0.5999999999999999 for a prior's 0.6."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"text index must be an integer, got {i!r:.40}")
        n = len(self.gaussian)
        if not -n <= i < n:
            raise IndexError(f"text index {i} out of range for {n} fused texts")
        return {m: float(f"{w:.15g}") for m, w in zip(self.models, self.weights[i], strict=True)}


def member_blocks(
    method: Fusion | str, mode: FusionMode | str, dims: Sequence[int]
) -> tuple[int, ...]:
    """The members' widths (`dims`, in fusion order) in rows fused by `method` and `mode` when
    those hold one block per member (concat fusion of every member), else (): sum mode and
    `single:<model>` have no such layout, so nothing that reads members back out of fused rows
    applies to them. The one rule, for a pipeline and for the harness's methods alike."""
    if parse_mode(mode) is not FusionMode.CONCAT or single_model(method) is not None:
        return ()
    return tuple(int(d) for d in dims)


def _validate_parts(parts: Sequence[Gaussian], models: Sequence[str]) -> tuple[str, ...]:
    """Same number of texts in every part, one unique name per part; returns the names."""
    if len(parts) == 0:
        raise ValueError("fuse needs at least one Gaussian part")
    for k, part in enumerate(parts):
        if not isinstance(part, Gaussian):
            raise TypeError(f"parts[{k}] must be a Gaussian, got {type(part).__name__}")
    names = tuple(models) if not isinstance(models, str) else (models,)
    if len(names) != len(parts):
        raise ValueError(f"got {len(parts)} parts but {len(names)} model names: {list(names)}")
    if len(set(names)) != len(names):
        raise ValueError(f"model names must be unique, got {list(names)}")
    rows = [len(p) for p in parts]
    if len(set(rows)) != 1:
        counts = ", ".join(f"{m}: {r}" for m, r in zip(names, rows, strict=True))
        raise ValueError(f"every part must embed the same texts, got row counts {counts}")
    return names


def default_temperature(method: Fusion | str) -> float:
    """The temperature a method runs at unless told otherwise: 2 for uec-paper, as published."""
    return _DEFAULT_TEMPERATURES.get(str(method), DEFAULT_TEMPERATURE)


def _reject_unused(
    method: str,
    temperature: float,
    prior: ArrayLike | None,
    weights: ArrayLike | None,
) -> None:
    """Fail on options the chosen method would silently ignore."""
    given = {
        "temperature": temperature != default_temperature(method),
        "prior": prior is not None,
        "weights": weights is not None,
    }
    used = _USED_OPTIONS.get(method, frozenset())
    unused = [name for name, is_given in given.items() if is_given and name not in used]
    if unused:
        raise ValueError(f"{', '.join(unused)} not used by fusion method {method!r}; drop it")


def _sum(parts: Sequence[Gaussian], w: np.ndarray, names: tuple[str, ...]) -> Gaussian:
    """μ = Σ π_k μ_k, σ² = Σ π_k² σ²_k; all parts must share one dimension."""
    dims = {p.dim for p in parts}
    if len(dims) != 1:
        listed = ", ".join(f"{m}: {p.dim}" for m, p in zip(names, parts, strict=True))
        raise ValueError(f"sum fusion needs equal dimensions, got {listed}; use mode='concat'")
    means = np.stack([p.mean for p in parts])
    variances = np.stack([p.var for p in parts])
    return Gaussian(np.einsum("nk,knd->nd", w, means), np.einsum("nk,knd->nd", w * w, variances))


def _concat(parts: Sequence[Gaussian], w: np.ndarray) -> Gaussian:
    """μ = concat_k(√π_k μ_k), σ² = concat_k(π_k σ²_k): unit-norm means stay unit-norm."""
    return Gaussian.concat(
        [
            Gaussian(np.sqrt(w[:, k, None]) * p.mean, w[:, k, None] * p.var)
            for k, p in enumerate(parts)
        ],
        axis=1,
    )


def _single(normed: Sequence[Gaussian], names: tuple[str, ...], model: str) -> Fused:
    """The chosen model's normalised Gaussian, with a one-hot weight on it."""
    if model not in names:
        raise ValueError(f"single fusion names unknown model {model!r}; models are {list(names)}")
    k = names.index(model)
    weights = np.zeros((len(normed[k]), len(names)))
    weights[:, k] = 1.0
    return Fused(normed[k], weights, names)


def _method_weights(
    parts: Sequence[Gaussian],
    method: Fusion,
    temperature: float,
    prior: ArrayLike | None,
    weights: ArrayLike | None,
) -> np.ndarray:
    """(n, K) weights of a method: uncertainty-driven, as published, static or uniform."""
    n, k = len(parts[0]), len(parts)
    if method is Fusion.UEC:
        u = np.stack([uncertainty(p) for p in parts], axis=1)
        return fusion_weights(u, temperature, prior)
    if method is Fusion.UEC_PAPER:
        return paper_weights(np.stack([paper_logits(p) for p in parts], axis=1), temperature)
    if method is Fusion.WEIGHTED:
        if weights is None:
            raise ValueError("fusion method 'weighted' needs weights=, one per model")
        return np.broadcast_to(normalized_prior(weights, k, "weights"), (n, k)).copy()
    return np.full((n, k), 1.0 / k)


def _paper_parts(parts: Sequence[Gaussian], normed: Sequence[Gaussian]) -> list[Gaussian]:
    """Unit-norm means with the published UEC's ṽ = σ²/‖σ²‖² (of the part as given) as variance."""
    return [Gaussian(n.mean, shape_variance(p)) for p, n in zip(parts, normed, strict=True)]


def fuse(
    parts: Sequence[Gaussian],
    models: Sequence[str],
    method: Fusion | str = Fusion.UEC,
    mode: FusionMode | str = FusionMode.CONCAT,
    temperature: float | None = None,
    prior: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> Fused:
    """Fuse K aligned Gaussians (one per model) of the same texts into one Gaussian per text.

    Parts are L2-normalised first. `temperature` (default: the method's, see
    `default_temperature`) and `prior` drive the uec weights, `weights` are the static
    per-model weights of method "weighted"; an option the method does not use is an error.
    "single:<model>" returns that model's normalised Gaussian, whatever the mode.

    "uec-paper" reproduces the published UEC: weights softmax(Σ_d 1/ṽ_kd / T) with
    ṽ_k = σ²_k/‖σ²_k‖² of each part as given, and ṽ in place of the normalised variance; sum
    mode gives μ = Σ π_k μ_k, σ² = Σ π_k² ṽ_k as published, concat mode its analogue
    μ = concat_k(√π_k μ_k), σ² = concat_k(π_k ṽ_k).
    """
    names = _validate_parts(parts, models)
    fusion_mode = parse_mode(mode)
    normed = [p.normalize() for p in parts]
    model = single_model(method)
    label = str(method) if model is not None else str(parse_fusion(method))
    t = default_temperature(label) if temperature is None else temperature
    _reject_unused(label, t, prior, weights)
    if model is not None:
        return _single(normed, names, model)
    kind = parse_fusion(method)
    if kind is Fusion.CONCAT and fusion_mode is not FusionMode.CONCAT:
        raise ValueError("method 'concat' always concatenates; for a uniform sum use 'mean'")
    w = _method_weights(parts, kind, t, prior, weights)
    if kind is Fusion.UEC_PAPER:
        normed = _paper_parts(parts, normed)
    if fusion_mode is FusionMode.SUM:
        return Fused(_sum(normed, w, names), w, names)
    return Fused(_concat(normed, w), w, names)
