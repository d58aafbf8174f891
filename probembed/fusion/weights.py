"""Per-text model weights from per-model uncertainty: π = softmax(-log u / T + log p).

Also the published UEC weighting (MLAI-Yonsei/UEC, its MTEB script), reproduced as a variant:
π = softmax(Σ_d 1/ṽ_d / T) with ṽ = σ²/‖σ²‖², see docs/architecture.md.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from probembed.gaussian import Gaussian, squared_norms

#: Smallest positive uncertainty fusion sees, so log u stays finite.
U_FLOOR = 1e-30

#: T = 1 with a uniform prior is inverse-variance weighting, the Bayes-optimal combination.
DEFAULT_TEMPERATURE = 1.0

#: The published UEC's temperature (its MTEB README runs run_uec.py with --temperature 2.0).
PAPER_TEMPERATURE = 2.0


def uncertainty(g: Gaussian) -> np.ndarray:
    """Total variance of the unit-norm embedding, (n,): dimension-free, comparable across models.

    Σ_d σ²_d / |μ|², in float64 straight from the float32 moments (no float32 rounding of the
    normalised variances in between), so the weights add no rounding of their own.
    """
    return g.total_variance() / squared_norms(g.mean)[:, 0]


def _validate_uncertainties(uncertainties: np.ndarray, what: str = "uncertainties") -> np.ndarray:
    """Float64 (n, K) array of finite values >= 0, or a ValueError saying what is wrong."""
    u = np.asarray(uncertainties, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] == 0:
        raise ValueError(f"{what} must be an (n, K) array with K >= 1, got shape {u.shape}")
    if not np.all(np.isfinite(u)) or (u.size and u.min() < 0):
        raise ValueError(f"{what} must be finite and >= 0")
    return u


def _validate_temperature(temperature: float) -> float:
    """A temperature in [0, inf]; inf is allowed and means "ignore the uncertainties"."""
    t = float(temperature)
    if not t >= 0:  # also catches NaN
        raise ValueError(f"temperature must be >= 0 (or inf), got {temperature!r}")
    return t


def normalized_prior(prior: ArrayLike | None, k: int, what: str = "prior") -> np.ndarray:
    """A (K,) probability vector from non-negative weights summing to > 0; uniform for None."""
    if prior is None:
        return np.full(k, 1.0 / k)
    p = np.asarray(prior, dtype=np.float64)
    if p.shape != (k,):
        raise ValueError(f"{what} must have shape ({k},), one value per model, got {p.shape}")
    if not np.all(np.isfinite(p)) or p.min() < 0 or p.sum() <= 0:
        raise ValueError(f"{what} must be finite, >= 0 and not all zero, got {p.tolist()}")
    return p / p.sum()


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax via log-sum-exp; -inf logits get weight 0."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    w = np.exp(shifted)
    return w / w.sum(axis=1, keepdims=True)


def _argmax_weights(logits: np.ndarray) -> np.ndarray:
    """The T -> 0 limit of softmax(logits / T): the largest logits share all the weight."""
    tied = logits == logits.max(axis=1, keepdims=True)
    return tied / tied.sum(axis=1, keepdims=True)


def _argmin_weights(u: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The T -> 0 limit: all weight on the least uncertain models, shared in proportion to p."""
    masked = np.where(p > 0, u, np.inf)
    tied = masked == masked.min(axis=1, keepdims=True)
    w = tied * p
    return w / w.sum(axis=1, keepdims=True)


def _zero_as_unknown(u: np.ndarray, p: np.ndarray) -> np.ndarray:
    """u = 0 means the estimator saw no spread at all (a deterministic model, or dropout views
    of a one- or two-word text that all came out the same), not that the model is certain:
    such a member gets the geometric mean of the row's other uncertainties, so it weighs as
    an average member of its prior share, instead of taking every weight (a row of zeros
    gets the prior). Members of prior 0 are left out of the mean, so dropping them (as a
    saved pipeline does) leaves every weight as it was."""
    zero = u <= 0
    if not zero.any():
        return u
    measured = ~zero & (p > 0)
    known = measured.sum(axis=1, keepdims=True)
    logs = np.log(np.where(measured, u, 1.0)).sum(axis=1, keepdims=True)
    neutral = np.exp(np.divide(logs, known, out=np.zeros_like(logs), where=known > 0))
    # within the measured values, as a geometric mean is: exp(log a) is not a to the last
    # bit, and at T = 0 that bit gave the unknown member every weight or none
    low = np.where(measured, u, np.inf).min(axis=1, keepdims=True)
    high = np.where(measured, u, -np.inf).max(axis=1, keepdims=True)
    neutral = np.where(known > 0, np.clip(neutral, low, high), neutral)
    return np.where(zero, neutral, u)


def fusion_weights(
    uncertainties: np.ndarray,
    temperature: float = DEFAULT_TEMPERATURE,
    prior: ArrayLike | None = None,
) -> np.ndarray:
    """(n, K) weights summing to 1 per text: T=1 is inverse-variance, inf the prior, 0 argmin."""
    u = _validate_uncertainties(uncertainties)
    t = _validate_temperature(temperature)
    p = normalized_prior(prior, u.shape[1])
    u = np.maximum(_zero_as_unknown(u, p), U_FLOOR)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scaled = -np.log(u) / t
        log_p = np.log(p)
    if not np.all(np.isfinite(scaled)):  # T = 0, or so small that -log u / T overflows
        return _argmin_weights(u, p)
    return _softmax(scaled + log_p)


def shape_variance(g: Gaussian) -> np.ndarray:
    """ṽ = σ²/‖σ²‖² per text, (n, d) float64: the published UEC's variance, scale divided out.

    ‖σ²‖ is the L2 norm of the variance vector itself over the dimensions; an all-zero row stays
    zero, as their code divides it by 1.
    """
    var = g.var.astype(np.float64)
    sq_norm = np.einsum("nd,nd->n", var, var)[:, None]
    return var / np.where(sq_norm > 0, sq_norm, 1.0)


def paper_logits(g: Gaussian) -> np.ndarray:
    """Σ_d 1/ṽ_d per text, (n,): the published UEC's logit (ṽ floored at U_FLOOR; they add 1e-30).

    Equal to ‖σ²‖² Σ_d 1/σ²_d, so it grows linearly with the size of the variance: σ² -> cσ²
    multiplies the logit by c.
    """
    return (1.0 / np.maximum(shape_variance(g), U_FLOOR)).sum(axis=1)


def paper_weights(logits: np.ndarray, temperature: float = PAPER_TEMPERATURE) -> np.ndarray:
    """(n, K) weights softmax(logit / T) from (n, K) paper logits: inf uniform, 0 the argmax."""
    z = _validate_uncertainties(logits, "paper logits")
    t = _validate_temperature(temperature)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scaled = z / t
    if not np.all(np.isfinite(scaled)):  # T = 0, or so small that logit / T overflows
        return _argmax_weights(z)
    return _softmax(scaled)
