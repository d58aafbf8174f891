"""The learned reliability router: its maths, and how LODO runs it through the ordinary fusion."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.evaluation.datasets import StsDataset
from probembed.evaluation.harness import Embedded
from probembed.evaluation.lodo import Split, routed, router_method
from probembed.evaluation.metrics import probe_losses
from probembed.fusion.router import (
    FEATURES,
    Router,
    anchor_disagreement,
    anchor_rows,
    fit_router,
    relative_errors,
    text_features,
)
from probembed.gaussian import Gaussian

FAST = settings(max_examples=40, deadline=None)


def routed_weights(prior, logits) -> np.ndarray:
    """The router's weights as its module defines them: (n, K) softmax(log p + g), float64."""
    with np.errstate(divide="ignore"):
        z = np.log(np.asarray(prior) / np.sum(prior)) + logits
    w = np.exp(z - z.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def test_ridge_recovers_a_linear_relation() -> None:
    """Targets that are a known linear map of the features are predicted back."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2, 3))
    true = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    y = np.einsum("nkf,kf->nk", x, true) + np.array([0.2, -0.1])
    router = fit_router(x, y, ridge=1e-6)
    # noiseless data, tiny ridge: only float64 solve rounding remains
    np.testing.assert_allclose(router.predict(x), y, atol=1e-6)
    np.testing.assert_allclose(router.coef, true * x.std(axis=0), rtol=1e-6, atol=1e-8)


@FAST
@given(alpha=st.floats(0, 20), seed=st.integers(0, 10_000))
def test_logits_are_centred_and_vanish_at_alpha_zero(alpha, seed) -> None:
    """g is centred per text; α = 0 gives g = 0 (the prior); a negative α is refused."""
    rng = np.random.default_rng(seed)
    router = fit_router(rng.normal(size=(50, 3, 2)), rng.normal(size=(50, 3)))
    g = router.logits(rng.normal(size=(7, 3, 2)), alpha)
    np.testing.assert_allclose(g.mean(axis=1), 0.0, atol=1e-9 * (1 + abs(g).max()))
    assert not router.logits(rng.normal(size=(7, 3, 2)), 0.0).any()
    with pytest.raises(ValueError, match="alpha"):
        router.logits(rng.normal(size=(7, 3, 2)), -1.0)


@FAST
@given(scale=st.floats(0.01, 100), seed=st.integers(0, 10_000))
def test_relative_errors_are_centred_per_item_and_scale_free(scale, seed) -> None:
    """Each item's relative errors sum to 0, and do not change with the errors' unit."""
    e = np.random.default_rng(seed).uniform(size=(30, 4))
    r = relative_errors(e)
    np.testing.assert_allclose(r.sum(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(relative_errors(scale * e), r, rtol=1e-9)


def _latent_members(seed: int, noise=(0.05, 0.05, 1.5), n: int = 300) -> list[Gaussian]:
    """Members that see one latent point per text through their own noise level."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=(n, 16))
    return [Gaussian(truth + s * rng.normal(size=truth.shape), np.ones_like(truth)) for s in noise]


def test_the_noisy_member_disagrees_most_and_copies_not_at_all() -> None:
    """A far-off member's profile departs from the others'; identical members agree exactly."""
    parts = _latent_members(0)
    d = anchor_disagreement(parts, anchor_rows(len(parts[0]), 64))
    assert np.all(d[:, 2] > d[:, :2].max(axis=1))
    same = [parts[0]] * 3
    # identical profiles correlate to 1 up to float64 rounding of a 64-term mean
    np.testing.assert_allclose(anchor_disagreement(same, anchor_rows(300, 64)), 0.0, atol=1e-9)


def test_features_have_one_column_per_name_and_shared_length() -> None:
    """(n, K, F) in FEATURES order; length features are the same for every member."""
    parts = _latent_members(1, n=40)
    texts = [" ".join(["w"] * (i + 1)) for i in range(40)]
    f = text_features(parts, texts, anchor_rows(40, 16))
    assert f.shape == (40, 3, len(FEATURES))
    col = FEATURES.index("log_words")
    np.testing.assert_array_equal(f[:, 0, col], np.log1p(np.arange(1, 41)))
    np.testing.assert_array_equal(f[:, 0, col], f[:, 2, col])


@pytest.mark.parametrize("prior", [(0.5, 0.3, 0.2), (0.5, 0.5, 0.0)])
def test_routed_split_fuses_to_exactly_the_router_weights(prior) -> None:
    """The carrier variance e^{-g} through uec at T = 1 gives softmax(log p + g) per text; a
    member tuning gave weight 0 stays at 0 whatever its logit (log 0 = -inf)."""
    rng = np.random.default_rng(2)
    parts = {role: _latent_members(3, n=20) for role in ("a", "b")}
    router = Router(np.zeros((3, 2)), np.ones((3, 2)), rng.normal(size=(3, 2)), np.zeros(3))
    features = {role: rng.normal(size=(20, 3, 2)) for role in parts}
    data = StsDataset("toy", "dev", ["x"] * 20, ["y"] * 20, np.arange(20.0))
    split = Split(data, Embedded(("m0", "m1", "m2"), parts), np.zeros(3))
    out = routed(split, features, router, alpha=3.0)
    fused = router_method(prior).fusion.fuse(out.embedded.parts["a"], out.embedded.models)
    expected = routed_weights(prior, router.logits(features["a"], 3.0))
    # the carrier is stored in float32: e^{-g} to ~1e-7 relative, so the weights to ~1e-6
    np.testing.assert_allclose(fused.weights, expected, rtol=1e-5)
    assert prior[2] > 0 or not fused.weights[:, 2].any()
    np.testing.assert_array_equal(out.embedded.parts["a"][0].mean, parts["a"][0].mean)


def test_probe_losses_are_small_where_the_probe_is_right() -> None:
    """Separable classes give losses below log 2; a label never trained on is capped."""
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(-3, 1, (50, 2)), rng.normal(3, 1, (50, 2))])
    y = ["neg"] * 50 + ["pos"] * 50
    losses = probe_losses(x, y, x, y)
    assert np.mean(losses < np.log(2)) > 0.95
    unseen = probe_losses(x, y, x[:2], ["other", "neg"])
    assert unseen[0] == pytest.approx(-np.log(1e-12))
