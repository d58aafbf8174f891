"""The chance that one uncertain score truly exceeds another: query confidence, margin signals.

Two scores s₁, s₂ with variances v₁, v₂, taken as independent Gaussians, differ by a Gaussian
of mean s₁ − s₂ and variance v₁ + v₂, so P(s₁ truly > s₂) = Φ((s₁ − s₂)/√(v₁ + v₂)). Search
reports it for its first two hits; the evaluation uses its complement as an uncertainty signal.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

#: Φ(z) = erfc(−z/√2)/2, elementwise: erfc keeps full precision in both tails, where 1 − erf
#: would round a tiny probability to 0. numpy has no erfc, and the core imports no scipy.
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def outrank_probability(
    first: ArrayLike, second: ArrayLike, first_var: ArrayLike, second_var: ArrayLike
) -> np.ndarray:
    """P(first truly outranks second) = Φ((s₁ − s₂)/√(v₁ + v₂)), elementwise, in float64.

    With zero total variance the order is certain: 1 for a lead, 0 for a deficit, 0.5 for a tie.
    """
    gap = np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64)
    variances = [np.asarray(v, dtype=np.float64) for v in (first_var, second_var)]
    if np.isnan(gap).any() or not all((v >= 0).all() for v in variances):
        raise ValueError(
            "outrank_probability needs scores that are not NaN and variances >= 0, got "
            f"gap {gap!r:.60}, variances {variances[0]!r:.60} and {variances[1]!r:.60}"
        )
    spread = np.sqrt(variances[0] + variances[1])
    certain = np.where(gap > 0, np.inf, np.where(gap < 0, -np.inf, 0.0))
    z = np.where(spread > 0, gap / np.where(spread > 0, spread, 1.0), certain)
    return 0.5 * _erfc(-z / math.sqrt(2.0))
