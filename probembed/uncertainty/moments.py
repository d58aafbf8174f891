"""Float64 moments before the Gaussian boundary, so float32 enters once, at the very end.

The encoders' float32 outputs already depend (by ~1e-7) on how many texts share a batch; an
estimator that did its own sums in float32 (an sgemm for the Laplace variance, the head's MLP)
would add rounding that also depends on the batch. Estimators therefore compute in float64
from the encoder outputs and cast to float32 only when the Gaussian is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from probembed.gaussian import Gaussian


@dataclass(frozen=True, eq=False)
class Moments:
    """Unit-norm means and (uncalibrated) variances of a batch of texts, in float64."""

    mean: np.ndarray
    var: np.ndarray

    @staticmethod
    def concat(parts: Sequence[Moments]) -> Moments:
        """Stack the moments of consecutive chunks of texts."""
        return Moments(
            np.concatenate([p.mean for p in parts]), np.concatenate([p.var for p in parts])
        )

    def gaussian(self, scale: float = 1.0) -> Gaussian:
        """The float32 Gaussian with variances times the calibration scale: the one cast."""
        return Gaussian(self.mean, self.var * float(scale))
