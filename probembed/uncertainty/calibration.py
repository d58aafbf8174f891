"""Scale calibration: make variances of different models comparable by fitting one scale each."""

from __future__ import annotations

import numpy as np

from probembed.gaussian import Gaussian
from probembed.uncertainty.moments import Moments


def calibration_scale(a: Gaussian | Moments, b: Gaussian | Moments) -> float:
    """ML scale s of r = mu(x) - mu(x+) ~ N(0, s (var(x) + var(x+))) on held-out positive pairs."""
    if a.mean.shape != b.mean.shape:
        raise ValueError(
            f"calibration needs aligned pairs, got {a.mean.shape} and {b.mean.shape} means"
        )
    residual_sq = np.square(np.asarray(a.mean, np.float64) - b.mean)
    total_var = np.asarray(a.var, np.float64) + b.var
    keep = total_var > 0
    if not keep.any():
        raise ValueError("calibration needs some non-zero variance; every variance is zero")
    scale = float(np.mean(residual_sq[keep] / total_var[keep]))
    if scale == 0:
        raise ValueError(
            "calibration needs pairs of two different texts: every held-out pair embeds to "
            "one point (identical texts?), which would scale every variance to zero"
        )
    return scale
