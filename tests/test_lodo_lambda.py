"""λ tuned on dev: Laplace members re-made at another prior precision, and the LODO family."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.encoders import get_encoder
from probembed.evaluation.datasets import StsDataset, load_dataset
from probembed.evaluation.harness import embed
from probembed.evaluation.lodo import (
    RememberedActivations,
    Scores,
    Split,
    prior_precision_variants,
    tune_prior_precision,
)
from probembed.evaluation.tuning import uec_methods
from probembed.pipeline import FusionConfig, Pipeline
from probembed.uncertainty import LaplaceEstimator
from probembed.uncertainty.base import split_holdout


@pytest.fixture(scope="module")
def hash_laplace(toy_pairs) -> LaplaceEstimator:
    """A calibrated Laplace estimator on the hashing encoder at the shipped λ = 1."""
    return LaplaceEstimator(get_encoder("hash"), calibrate=True).fit(toy_pairs)


def test_another_prior_precision_equals_a_fit_at_that_precision(hash_laplace, toy_pairs) -> None:
    """F does not depend on λ, so re-making at λ = 0.1 is a fit at 0.1: same state, same scale."""
    remade = hash_laplace.with_prior_precision(0.1, toy_pairs)
    fitted = LaplaceEstimator(get_encoder("hash"), calibrate=True, prior_precision=0.1)
    fitted.fit(toy_pairs)
    assert remade.fingerprint == fitted.fingerprint  # hashes params, Fisher and scale
    assert remade.scale != hash_laplace.scale  # the scale is refitted, not carried over
    np.testing.assert_array_equal(
        remade.encode(["a new text"]).var, fitted.encode(["a new text"]).var
    )


@settings(max_examples=15, deadline=None)
@given(lam=st.floats(min_value=1e-3, max_value=1e3))
def test_the_refitted_scale_calibrates_the_held_out_pairs(hash_laplace, toy_pairs, lam) -> None:
    """At any λ the held-out residuals have mean r² / (var(x) + var(x+)) = 1, as at fit time."""
    remade = hash_laplace.with_prior_precision(lam, toy_pairs)
    _, cal = split_holdout(len(toy_pairs), remade.params["holdout"], remade.params["seed"])
    a = remade.encode([toy_pairs[i][0] for i in cal])
    b = remade.encode([toy_pairs[i][1] for i in cal])
    ratio = np.square(a.mean.astype(np.float64) - b.mean) / (a.var.astype(np.float64) + b.var)
    # the Gaussian stores float32 variances: a relative error of ~1e-7 per entry, so 1e-5
    assert np.mean(ratio) == pytest.approx(1.0, rel=1e-5)


def test_remaking_needs_a_fitted_estimator_and_a_positive_precision(toy_pairs) -> None:
    """An unfitted estimator, or λ <= 0, is refused with the problem named."""
    with pytest.raises(RuntimeError, match="not fitted"):
        LaplaceEstimator(get_encoder("hash")).with_prior_precision(0.1, toy_pairs)
    fitted = LaplaceEstimator(get_encoder("hash")).fit(toy_pairs[:40])
    with pytest.raises(ValueError, match="prior_precision must be a finite number > 0"):
        fitted.with_prior_precision(0.0, toy_pairs[:40])


@pytest.fixture(scope="module")
def minilm_laplace(toy_pairs) -> LaplaceEstimator:
    """minilm's last-layer Laplace on a few pairs: the member whose λ the LODO family varies."""
    return LaplaceEstimator(get_encoder("minilm"), calibrate=True).fit(toy_pairs[:24])


def test_remembered_activations_return_what_the_encoder_returns(minilm_laplace) -> None:
    """Rows come back in the order asked, equal to a fresh pass; seen texts are not re-run."""
    texts = ["a cat sits on the mat", "stock prices fell sharply", "a dog runs"]
    remembered = RememberedActivations(minilm_laplace.encoder)
    means, acts = remembered.encode_with_activations(texts)
    direct_means, direct_acts = minilm_laplace.encoder.encode_with_activations(texts)
    np.testing.assert_array_equal(means, direct_means)  # same batch, same kernels
    np.testing.assert_array_equal(acts, direct_acts)
    again, _ = remembered.encode_with_activations([texts[2], texts[0], texts[2]])
    np.testing.assert_array_equal(again, means[[2, 0, 2]])
    assert len(remembered._memo) == 3
    assert remembered.fingerprint == minilm_laplace.encoder.fingerprint


def test_variants_remake_only_the_last_layer_member(
    minilm_laplace, hash_laplace, toy_pairs
) -> None:
    """The shipped λ keeps the pipeline; another λ re-makes minilm and keeps the adapter member."""
    pipe = Pipeline([minilm_laplace, hash_laplace], FusionConfig("uec"), cache=False)
    variants = prior_precision_variants(pipe, toy_pairs[:24], (1.0, 0.05))
    assert variants[1.0].fingerprint == pipe.fingerprint
    remade, kept = variants[0.05].members
    assert kept is hash_laplace
    direct = minilm_laplace.with_prior_precision(0.05, toy_pairs[:24])
    assert remade.fingerprint == direct.fingerprint
    texts = ["a new sentence about cooking"]
    np.testing.assert_array_equal(remade.encode(texts).var, direct.encode(texts).var)
    assert not np.array_equal(remade.encode(texts).var, minilm_laplace.encode(texts).var)


def _sts(datasets, name: str, n: int) -> StsDataset:
    """The first n dev pairs of an STS dataset."""
    dev = load_dataset(datasets / "sts" / name, "dev")
    return StsDataset(name, "dev", dev.sentence1[:n], dev.sentence2[:n], dev.scores[:n])


def test_lambda_is_tuned_without_the_left_out_dataset(datasets, toy_pairs) -> None:
    """The choice maximises the others' mean figure and ignores the left-out tuning split."""
    members = [
        LaplaceEstimator(get_encoder("hash", dim=d), calibrate=True).fit(toy_pairs)
        for d in (64, 48)
    ]
    tuned = {"stsb": _sts(datasets, "stsb", 120), "sick": _sts(datasets, "sick", 120)}
    variants = {}
    for lam in (1.0, 0.01):
        pipe = Pipeline(
            [m.with_prior_precision(lam, toy_pairs) for m in members],
            FusionConfig("uec"),
            cache=False,
        )
        variants[lam] = Scores(
            {(n, "tune"): Split(d, embed(pipe, d), np.zeros(2)) for n, d in tuned.items()}
        )
    prior = (0.5, 0.5)
    lam, method = tune_prior_precision(variants, prior, left_out="sick")
    best = max(
        variants[x].figure("stsb", "tune", lambda _, m=m: m)
        for x in variants
        for m in uec_methods(prior)
    )
    assert variants[lam].figure("stsb", "tune", lambda _: method) == best
    assert method.name == "uec+lambda"
    # scramble the left-out dataset's gold scores: the choice must not move
    noisy = {}
    for x, scores in variants.items():
        splits = dict(scores.splits)
        sick = splits["sick", "tune"]
        gold = np.random.default_rng(0).permutation(sick.dataset.scores)
        data = StsDataset("sick", "dev", sick.dataset.sentence1, sick.dataset.sentence2, gold)
        splits["sick", "tune"] = Split(data, sick.embedded, sick.agreement)
        noisy[x] = Scores(splits)
    assert tune_prior_precision(noisy, prior, left_out="sick") == (lam, method)
