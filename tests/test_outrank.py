"""P(one uncertain score outranks another): its properties, and one implementation for both
search confidence and the evaluation's margin signal."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from probembed.evaluation.uncertainty import confidence_signals
from probembed.scoring import outrank_probability
from probembed.store import confidence

FAST = settings(max_examples=100, deadline=None)
scores = st.floats(-10.0, 10.0, allow_nan=False)
variances = st.floats(0.0, 4.0, allow_nan=False)


@FAST
@given(scores, scores, variances, variances)
def test_swapping_the_two_scores_gives_the_complement(s1, s2, v1, v2):
    forward = float(outrank_probability(s1, s2, v1, v2))
    backward = float(outrank_probability(s2, s1, v2, v1))
    assert 0.0 <= forward <= 1.0
    # each side is one erfc evaluation (relative error ~1e-16), so the sum is 1 to rounding
    assert forward + backward == pytest.approx(1.0, abs=1e-12)


@FAST
@given(scores, variances, variances)
def test_a_tie_is_a_coin_flip(s, v1, v2):
    assert float(outrank_probability(s, s, v1, v2)) == 0.5


@FAST
@given(scores, st.floats(0.0, 5.0), st.floats(1e-3, 5.0), variances, st.floats(1e-6, 4.0))
def test_monotone_in_the_gap_and_equal_to_the_normal_cdf(s2, gap, more, v1, v2):
    near = float(outrank_probability(s2 + gap, s2, v1, v2))
    far = float(outrank_probability(s2 + gap + more, s2, v1, v2))
    assert far >= near
    # scipy's ndtr is an independent implementation of Φ; both are accurate to ~1e-15
    z = ((s2 + gap) - s2) / math.sqrt(v1 + v2)
    assert near == pytest.approx(norm.cdf(z), rel=1e-12, abs=1e-300)


def test_zero_variance_makes_the_order_certain_and_bad_input_is_refused():
    got = outrank_probability([0.8, 0.6, 0.7], [0.7, 0.6, 0.8], [0.0] * 3, [0.0] * 3)
    np.testing.assert_array_equal(got, [1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="variances >= 0"):
        outrank_probability(0.3, 0.1, -0.5, 0.6)
    with pytest.raises(ValueError, match="not NaN"):
        outrank_probability(math.nan, 0.1, 0.1, 0.1)


@FAST
@given(scores, st.floats(0.0, 5.0), variances, variances)
def test_search_confidence_and_the_margin_signal_are_complements(s2, gap, v1, v2):
    dots, var = np.array([s2 + gap, s2]), np.array([v1, v2])
    signal = confidence_signals(dots[None], var[None], [0.0])["margin_prob"][0]
    assert signal == pytest.approx(1.0 - confidence(dots, var), abs=1e-12)  # as the swap test
