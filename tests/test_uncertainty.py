"""Estimators: variances behave as a posterior should, calibration works, state round-trips."""

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.encoders import available_encoders, get_encoder
from probembed.encoders.base import EncoderOutputError
from probembed.encoders.hashing import HashingEncoder
from probembed.gaussian import Gaussian
from probembed.uncertainty import (
    HeadEstimator,
    LaplaceEstimator,
    PerturbEstimator,
    make_estimator,
)
from probembed.uncertainty.calibration import calibration_scale
from probembed.uncertainty.head import LOG_VAR_MAX, LOG_VAR_MIN, head_network
from probembed.uncertainty.perturb import dropout_views

PROBE = [
    "jaguar",
    "A jaguar is a large cat native to the Americas.",
    "The quarterly report shows revenue grew by four percent.",
    "",
]


def fit_laplace(pairs, **params):
    params.setdefault("calibrate", False)
    return LaplaceEstimator(get_encoder("hash"), **params).fit(pairs)


def test_laplace_variance_equals_the_linearised_posterior_formula(toy_pairs):
    estimator = fit_laplace(toy_pairs, calibrate=True)
    g = estimator.encode(PROBE)
    y = estimator.encoder.encode(PROBE).astype(np.float64)  # the adapter: a = y
    weight_var = 1.0 / (estimator.state["fisher"].astype(np.float64) + 1.0)
    sq_norm = np.sum(y * y, axis=1, keepdims=True)
    expected = estimator.scale * np.einsum("nh,dh->nd", y * y, weight_var) / sq_norm
    # Both are float64 from the same encoder output; the result is one float32 rounding of it.
    np.testing.assert_allclose(g.var, expected, rtol=2**-23)
    np.testing.assert_allclose(g.mean, y / np.sqrt(sq_norm), rtol=2**-23, atol=1e-12)


def test_laplace_variance_shrinks_as_prior_precision_grows(toy_pairs):
    variances = [
        fit_laplace(toy_pairs, prior_precision=lam).encode(PROBE).var for lam in (0.1, 1, 10)
    ]
    assert (variances[1] <= variances[0]).all() and (variances[2] <= variances[1]).all()
    assert variances[2].sum() < variances[0].sum()


def test_laplace_variance_shrinks_with_more_fitting_data(toy_pairs):
    small = fit_laplace(toy_pairs[:40], prior_precision=0.01).encode(PROBE).var
    large = fit_laplace(toy_pairs, prior_precision=0.01).encode(PROBE).var
    assert large.sum() < small.sum()


def test_laplace_on_minilm_uses_the_transformer_last_layer(toy_pairs):
    if not {i.name: i for i in available_encoders()}["minilm"].installed:
        pytest.skip("optional encoder 'minilm' is not installed")
    estimator = LaplaceEstimator(get_encoder("minilm"), calibrate=False).fit(toy_pairs[:24])
    assert estimator.uses_last_layer
    assert estimator.state["fisher"].shape == (384, 1536)
    g = estimator.encode(PROBE)
    assert (g.var > 0).all()  # every text has non-zero activations, so a variance


class LastLayerHash(HashingEncoder):
    """A custom encoder exposing a last layer: activations are the vector's squares, or what
    `bad` gives in their place (a model with a bug)."""

    def __init__(self, bad=None):
        super().__init__(dim=32)
        self.bad = bad

    def encode_with_activations(self, texts):
        y = self.encode(texts)
        return (y, y**2) if self.bad is None else self.bad(y)


def test_a_custom_last_layer_is_used_and_keeps_its_width_from_fit_to_encode(toy_pairs):
    estimator = LaplaceEstimator(LastLayerHash(), calibrate=False).fit(toy_pairs)
    assert estimator.uses_last_layer and estimator.state["fisher"].shape == (32, 32)
    assert (estimator.encode(PROBE).var > 0).all()
    estimator.encoder.bad = lambda y: (y, np.hstack([y, y]))
    with pytest.raises(
        EncoderOutputError, match=r"last-layer inputs of shape \(4, 64\) for 4 texts, not \(4, 32\)"
    ):
        estimator.encode(PROBE)


def drifting():
    """Activations one width on the first call, twice as wide after."""
    calls = itertools.count()
    return lambda y: (y, y if next(calls) == 0 else np.hstack([y, y]))


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (lambda y: y, "encode_with_activations gave ndarray, not the pair"),
        (drifting(), r"widths \[32, 64\] in one fit, not one width"),
        (
            lambda y: (y, y[:-1]),
            r"last-layer inputs of shape \(\d+, 32\) for (\d+) texts, not \(\1, h\)",
        ),
        (lambda y: (y, y.ravel()), r"last-layer inputs of shape \(\d+,\) for \d+ texts"),
        (lambda y: (y[:, :8], y), r"vectors of shape \(\d+, 8\) for (\d+) texts, not \(\1, 32\)"),
        (lambda y: (y, np.where(y != 0, np.nan, y)), "a last-layer input with a NaN"),
    ],
)
def test_a_custom_last_layer_s_bad_output_is_named_not_met_inside_the_fisher(bad, said, toy_pairs):
    with pytest.raises(EncoderOutputError, match=said) as caught:
        LaplaceEstimator(LastLayerHash(bad), calibrate=False).fit(toy_pairs)
    assert "'hash(dim=32)'" in str(caught.value)


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.05, 20.0), seed=st.integers(0, 2**16))
def test_calibration_recovers_a_known_scale(scale, seed):
    rng = np.random.default_rng(seed)
    var_a = rng.uniform(0.01, 1.0, size=(4000, 8)).astype(np.float32)
    var_b = rng.uniform(0.01, 1.0, size=(4000, 8)).astype(np.float32)
    mean_b = rng.normal(size=(4000, 8)).astype(np.float32)
    residual = rng.normal(size=(4000, 8)) * np.sqrt(scale * (var_a + var_b))
    a, b = Gaussian(mean_b + residual, var_a), Gaussian(mean_b, var_b)
    assert calibration_scale(a, b) == pytest.approx(scale, rel=0.05)


@pytest.mark.parametrize("kind", [LaplaceEstimator, HeadEstimator])
def test_pairs_of_a_text_and_itself_are_refused_not_scaled_to_zero_variance(kind, toy_pairs):
    """Every residual is zero: the scale came out 0 and every variance with it (the head's
    state also held -inf), silently."""
    same = [(a, a) for a, _ in toy_pairs]
    params = {"epochs": 2} if kind is HeadEstimator else {}
    with pytest.raises(ValueError, match="pairs of two different texts"):
        kind(get_encoder("hash", dim=64), **params).fit(same)


def test_calibration_scale_is_applied_to_encoded_variances(toy_pairs):
    raw = fit_laplace(toy_pairs)
    calibrated = fit_laplace(toy_pairs, calibrate=True)
    assert calibrated.scale != 1.0
    np.testing.assert_allclose(
        calibrated.encode(PROBE).var, raw.encode(PROBE).var * calibrated.scale, rtol=1e-5
    )


def test_the_fingerprint_is_the_digest_stored_collections_and_caches_were_keyed_by(toy_pairs):
    # collections record their pipeline's fingerprint and refuse another: the digest's
    # formula must not change with how it is computed (it is memoised, not redefined)
    import hashlib
    import json

    estimator = fit_laplace(toy_pairs, calibrate=True)
    digest = hashlib.sha256(estimator.encoder.fingerprint.encode())
    params = [estimator.kind, estimator.params, estimator.scale]
    digest.update(json.dumps(params, sort_keys=True).encode())
    for key in sorted(estimator.state):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(estimator.state[key]).tobytes())
    assert estimator.fingerprint == digest.hexdigest()[:16]
    assert estimator.fingerprint == estimator.fingerprint  # the memoised value, again


def test_fitted_state_is_read_only_and_what_is_derived_from_it_follows_it(toy_pairs):
    # the fingerprint and the posterior are computed once per state and prior, not per encode
    estimator = fit_laplace(toy_pairs)
    fingerprint, var = estimator.fingerprint, estimator.encode(PROBE).var
    with pytest.raises(ValueError, match="read-only"):
        estimator.state["fisher"][0, 0] = 1.0
    assert estimator.fingerprint == fingerprint
    estimator.params["prior_precision"] = 10.0
    stronger = estimator.encode(PROBE).var
    assert estimator.fingerprint != fingerprint and np.all(stronger < var)
    estimator.params["prior_precision"] = 1.0
    estimator.state = {"fisher": estimator.state["fisher"] * 4}  # a new state, as a refit gives
    sharper = estimator.encode(PROBE).var
    assert estimator.fingerprint != fingerprint
    assert np.all(sharper <= var) and np.any(sharper < var)


@pytest.mark.parametrize("kind", ["laplace", "perturb"])
def test_save_load_round_trips_bit_exactly(kind, toy_pairs, tmp_path):
    encoder = get_encoder("hash")
    fitted = make_estimator(kind, encoder, seed=3).fit(toy_pairs)
    fitted.save(tmp_path / "est")
    loaded = type(fitted).load(tmp_path / "est", encoder)
    before, after = fitted.encode(PROBE), loaded.encode(PROBE)
    assert np.array_equal(before.mean, after.mean) and np.array_equal(before.var, after.var)
    assert loaded.fingerprint == fitted.fingerprint


def test_perturb_is_deterministic_and_independent_of_batch(toy_pairs):
    estimator = PerturbEstimator(get_encoder("hash"), views=6).fit(toy_pairs)
    together = estimator.encode(PROBE)
    alone = estimator.encode(PROBE[1:2])
    np.testing.assert_array_equal(together.var[1:2], alone.var)
    np.testing.assert_array_equal(estimator.encode(PROBE).var, together.var)
    assert together.var[1].sum() > 0


def test_perturb_gives_a_text_it_cannot_perturb_no_spread_and_fusion_weighs_it_by_the_prior():
    """A one-word text has eight identical views: its variance is exactly 0 (unknown), not
    the rounding residue of their mean (~1e-32 here), which at a finite temperature took
    every fusion weight and made calibration's scale explode."""
    from probembed.pipeline import FusionConfig, Pipeline

    estimators = [PerturbEstimator(get_encoder("hash", dim=d)) for d in (64, 48)]
    moments = estimators[0]._encode_raw(["Python", "car", "two words", PROBE[1]])
    assert np.all(moments.var[:2] == 0) and moments.var[3].sum() > 0
    fused = Pipeline(estimators, FusionConfig("uec", temperature=1.0, prior=(0.7, 0.3)))
    fused = fused.encode(["Python", PROBE[1]])
    np.testing.assert_allclose(fused.weights[0], [0.7, 0.3], rtol=1e-6)  # float32 weights


@pytest.fixture(scope="module")
def small_head(toy_pairs):
    """A head trained briefly on a hash encoder: real trained weights in a second."""
    pytest.importorskip("torch", reason="the head is trained with torch")
    return HeadEstimator(get_encoder("hash", dim=64), hidden=16, epochs=5, seed=1).fit(toy_pairs)


def torch_head(state, dtype):
    """The torch network the head was trained as, holding the trained weights."""
    import torch

    net = head_network(state["0.weight"].shape[1], state["0.weight"].shape[0]).to(dtype)
    net.load_state_dict({k: torch.tensor(v, dtype=dtype) for k, v in state.items()})  # copies
    return net


def test_head_numpy_inference_equals_its_torch_network(small_head):
    torch = pytest.importorskip("torch", reason="the head is trained with torch")
    encoded = small_head.encode(PROBE)
    mean, var = encoded.mean, encoded.var
    with torch.no_grad():
        exact = torch_head(small_head.state, torch.float64)(torch.from_numpy(mean).double())
        trained = torch_head(small_head.state, torch.float32)(torch.from_numpy(mean))
    expected = small_head.scale * np.exp(exact.clamp(LOG_VAR_MIN, LOG_VAR_MAX).numpy())
    # Same float64 maths in another summation order (~1e-15), then one float32 rounding.
    np.testing.assert_allclose(var, expected, rtol=2**-23)
    as_trained = small_head.scale * np.exp(trained.clamp(LOG_VAR_MIN, LOG_VAR_MAX).numpy())
    # The float32 network: sums of 64 and 16 products, each term off by ~6e-8 relative, move
    # log σ² (|log σ²| < 20) by < 1e-5 absolute, so σ² by < 1e-5 relative.
    np.testing.assert_allclose(var, as_trained, rtol=1e-5)
    assert var.std(axis=0).max() > 1e-3 * var.mean()  # trained: it varies with the text


def test_dropout_views_keep_a_word_and_leave_single_words_alone():
    views = dropout_views("a b c d e f", views=20, rate=0.9, seed=0)
    assert all(v.split() for v in views) and len(set(views)) > 1
    assert dropout_views("jaguar", 4, 0.5, 0) == ["jaguar"] * 4


def test_unknown_estimator_and_parameters_are_rejected():
    encoder = get_encoder("hash")
    with pytest.raises(ValueError, match="unknown estimator 'bayes'.*laplace"):
        make_estimator("bayes", encoder)
    with pytest.raises(TypeError, match="unknown parameter.*'lamda'.*prior_precision"):
        make_estimator("laplace", encoder, lamda=1.0)


def test_bad_pairs_and_unfitted_use_are_rejected():
    estimator = LaplaceEstimator(get_encoder("hash"))
    with pytest.raises(ValueError, match="non-empty"):
        estimator.fit([])
    with pytest.raises(ValueError, match=r"pairs\[1\]"):
        estimator.fit([("a", "b"), ("only one",)])
    with pytest.raises(TypeError, match=r"text_b\[0\] must be a str"):
        estimator.fit([("a", 3), ("b", "c")])
    with pytest.raises(RuntimeError, match="not fitted"):
        estimator.encode(["hello"])


def test_corrupted_estimator_state_is_rejected(toy_pairs, tmp_path):
    encoder = get_encoder("hash")
    fit_laplace(toy_pairs).save(tmp_path)
    # the hash encoder has no last layer to hand out: its posterior is over a (256, 256)
    # adapter, so a transformer layer's (256, 1024) Fisher failed only at the first encode
    for shape in ((3, 3), (256, 1024)):
        np.savez(tmp_path / "state.npz", fisher=np.ones(shape, dtype=np.float32))
        with pytest.raises(ValueError, match=re.escape(f"shape (256, 256), found {shape}")):
            LaplaceEstimator.load(tmp_path, encoder)
    (tmp_path / "state.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="cannot load estimator"):
        LaplaceEstimator.load(tmp_path, encoder)
