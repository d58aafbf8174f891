"""Collection-adapted weights: agreement finds the member that goes its own way, no labels."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.evaluation.lodo import fold_choice
from probembed.fusion.adapt import adapted_weights, agreement
from probembed.gaussian import Gaussian

FAST = settings(max_examples=30, deadline=None)


def _members(seed: int, n: int = 200, noise: tuple[float, ...] = (0.1, 0.1, 2.0)) -> list:
    """Members that see one shared latent point per text, each through its own noise level."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=(n, 8))
    return [
        Gaussian(truth + s * rng.normal(size=truth.shape), np.zeros_like(truth)) for s in noise
    ]


def test_the_noisy_member_agrees_least() -> None:
    """Two members near the truth and one far from it: the far one has the lowest agreement."""
    a = agreement(_members(0), sample=200, neighbours=5)
    assert a.argmin() == 2
    assert a[2] < 0.5 * min(a[0], a[1])  # 2.0 noise against 0.1: its lists are near random


def test_agreement_is_seeded_and_order_equivariant() -> None:
    """Same sample, same answer; permuting members permutes their agreements."""
    parts = _members(1)
    a = agreement(parts, sample=100)
    np.testing.assert_array_equal(a, agreement(parts, sample=100))
    np.testing.assert_allclose(agreement(parts[::-1], sample=100), a[::-1], rtol=1e-12)


@FAST
@given(
    st.lists(st.floats(0, 1), min_size=2, max_size=5),
    st.floats(0, 50),
)
def test_adapted_weights_tilt_the_prior_towards_agreement(a: list[float], gamma: float) -> None:
    """A probability vector; gamma 0 is the prior; more agreement never means less weight."""
    prior = np.linspace(1, 2, len(a))
    w = adapted_weights(np.array(a), prior, gamma)
    assert w.sum() == pytest.approx(1.0) and (w >= 0).all()
    np.testing.assert_allclose(adapted_weights(np.array(a), prior, 0.0), prior / prior.sum())
    ratio = w / (prior / prior.sum())
    order = np.argsort(a, kind="stable")
    assert np.all(np.diff(ratio[order]) >= -1e-9)


def test_a_zero_prior_stays_zero_and_bad_input_is_named() -> None:
    """A member the prior drops is never revived; bad gamma or too few texts are errors."""
    w = adapted_weights(np.array([0.9, 0.1]), [0.0, 1.0], 40.0)
    assert w[0] == 0.0 and w[1] == 1.0
    with pytest.raises(ValueError, match="gamma"):
        adapted_weights(np.array([0.5, 0.5]), None, -1.0)
    with pytest.raises(ValueError, match="more than 10 texts"):
        agreement(_members(0, n=5))


def test_fold_choice_never_looks_at_the_left_out_dataset() -> None:
    """The left-out dataset's figures do not move the choice, however extreme they are."""
    dev = {"a": [0.1, 0.9, 0.5], "b": [0.2, 0.8, 0.4], "c": [9.0, -9.0, 0.0]}
    assert fold_choice(dev, "c") == 1
    dev["c"] = [-9.0, -9.0, 9.0]
    assert fold_choice(dev, "c") == 1
    assert fold_choice(dev, "a") == 2  # b and c: means -4.4, -4.1, 4.7
