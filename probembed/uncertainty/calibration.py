"""Scale calibration: make variances of different models comparable by fitting one scale each."""

from __future__ import annotations

import numpy as np

from probembed.gaussian import Gaussian


def calibration_scale(a: Gaussian, b: Gaussian) -> float:
    """ML scale s of r = mu(x) - mu(x+) ~ N(0, s (var(x) + var(x+))) on held-out positive pairs."""
    if len(a) != len(b) or a.dim != b.dim:
        raise ValueError(
            f"calibration needs aligned pairs, got {len(a)}x{a.dim} and {len(b)}x{b.dim}"
        )
    residual_sq = np.square(a.mean.astype(np.float64) - b.mean)
    total_var = a.var.astype(np.float64) + b.var
    keep = total_var > 0
    if not keep.any():
        raise ValueError("calibration needs some non-zero variance; every variance is zero")
    return float(np.mean(residual_sq[keep] / total_var[keep]))
