"""The published UEC reproduced: its weights, fused moments and both similarities, as written."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from probembed.evaluation.paper import PAPER_BETA, paper_methods
from probembed.fusion import Fusion, FusionMode, fuse
from probembed.fusion.weights import paper_logits, paper_weights, shape_variance
from probembed.gaussian import Gaussian
from probembed.pipeline import FusionConfig
from probembed.scoring import Score, inner_product_form, score_matrix, score_pairs

FAST = settings(max_examples=40, deadline=None)
PAPER = Fusion.UEC_PAPER
NAMES = ("a", "b", "c")


def _floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Finite float32 values in [lo, hi] (bounds rounded to float32), no subnormals."""
    lo32, hi32 = float(np.float32(lo)), float(np.float32(hi))
    return st.floats(lo32, hi32, allow_nan=False, allow_subnormal=False, width=32)


@st.composite
def model_parts(draw: st.DrawFn, equal_dims: bool = True, zero_var: bool = True) -> list:
    """K in 1..3 float32 Gaussians of the same n texts; means away from zero."""
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    dims = (
        [draw(st.integers(1, 6))] * k if equal_dims else [draw(st.integers(1, 6)) for _ in range(k)]
    )
    low = st.one_of(st.just(0.0), _floats(1e-6, 1.0)) if zero_var else _floats(1e-6, 1.0)
    parts = []
    for d in dims:
        mean = draw(arrays(np.float32, (n, d), elements=_floats(-2.0, 2.0)))
        mean[:, 0] += np.where(mean[:, 0] >= 0, 0.5, -0.5)  # every norm >= 0.5
        parts.append(Gaussian(mean, draw(arrays(np.float32, (n, d), elements=low))))
    return parts


def _temperatures() -> st.SearchStrategy[float]:
    """T from 0 (argmax) through moderate values to inf (uniform)."""
    return st.one_of(st.just(0.0), st.floats(0.01, 100.0), st.just(math.inf))


@FAST
@given(st.booleans().flatmap(lambda eq: model_parts(equal_dims=eq)), _temperatures())
def test_weights_are_a_distribution_per_text(parts, temperature):
    mode = "sum" if len({p.dim for p in parts}) == 1 else "concat"
    fused = fuse(parts, NAMES[: len(parts)], PAPER, mode, temperature=temperature)
    assert fused.weights.shape == (len(parts[0]), len(parts))
    assert np.all(fused.weights >= 0)
    # softmax divides by its own float64 sum of K <= 3 terms: a few ulp from 1.
    np.testing.assert_allclose(fused.weights.sum(axis=1), 1.0, rtol=1e-14)


@FAST
@given(model_parts())
def test_infinite_temperature_is_uniform(parts):
    k = len(parts)
    fused = fuse(parts, NAMES[:k], PAPER, "sum", temperature=math.inf)
    np.testing.assert_array_equal(fused.weights, np.full((len(parts[0]), k), 1.0 / k))


@FAST
@given(model_parts(zero_var=False), st.integers(-3, 3), st.floats(0.1, 10.0))
def test_scaling_every_variance_by_c_is_dividing_the_temperature_by_c(parts, e, temperature):
    # Σ_d 1/ṽ_d = ‖σ²‖² Σ_d 1/σ²_d is homogeneous of degree 1 in σ², so softmax(logit(cσ²)/T)
    # = softmax(logit(σ²)/(T/c)); c a power of two scales every float step exactly: bit-equal.
    c = 2.0**e
    scaled = [Gaussian(p.mean, p.var * np.float32(c)) for p in parts]
    np.testing.assert_array_equal(paper_logits(scaled[0]), c * paper_logits(parts[0]))
    names = NAMES[: len(parts)]
    got = fuse(scaled, names, PAPER, "sum", temperature=temperature).weights
    expected = fuse(parts, names, PAPER, "sum", temperature=temperature / c).weights
    np.testing.assert_array_equal(got, expected)


@FAST
@given(model_parts(), st.floats(0.1, 10.0), _floats(0.1, 10.0))
def test_weights_ignore_the_means_and_shape_variance_its_scale(parts, temperature, c):
    moved = [Gaussian(-c * p.mean, p.var) for p in parts]
    names = NAMES[: len(parts)]
    np.testing.assert_array_equal(
        fuse(moved, names, PAPER, "sum", temperature=temperature).weights,
        fuse(parts, names, PAPER, "sum", temperature=temperature).weights,
    )
    v = shape_variance(parts[0])
    sq = np.einsum("nd,nd->n", v, v)
    nonzero = parts[0].var.astype(np.float64).any(axis=1)
    # ṽ·‖σ²‖² = σ², so ‖ṽ‖²·‖σ²‖² = 1: float64 rounding of a d <= 6 term sum, ~1e-15.
    norms = np.einsum("nd,nd->n", parts[0].var.astype(np.float64), parts[0].var)
    np.testing.assert_allclose(sq[nonzero] * norms[nonzero], 1.0, rtol=1e-12)


@FAST
@given(model_parts(zero_var=False), st.floats(0.1, 10.0), st.permutations(range(3)))
def test_permuting_the_models_permutes_the_weights(parts, temperature, order):
    order = [i for i in order if i < len(parts)]
    names = NAMES[: len(parts)]
    w = fuse(parts, names, PAPER, "sum", temperature=temperature).weights
    permuted = fuse(
        [parts[i] for i in order], [names[i] for i in order], PAPER, "sum", temperature=temperature
    ).weights
    # The softmax sums K <= 3 exponentials in another order: ~2 ulp of a sum <= K.
    np.testing.assert_allclose(permuted, w[:, order], rtol=0, atol=1e-15)


@FAST
@given(model_parts(zero_var=False))
def test_zero_temperature_puts_all_weight_on_the_largest_logit(parts):
    logits = np.stack([paper_logits(p) for p in parts], axis=1)
    w = fuse(parts, NAMES[: len(parts)], PAPER, "sum", temperature=0.0).weights
    top = logits == logits.max(axis=1, keepdims=True)
    np.testing.assert_array_equal(w, top / top.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("a,d", [(1e-4, 384), (0.5, 3), (2.0, 1)])
def test_isotropic_variance_has_logit_d_squared_times_a(a, d):
    # σ² = a·1: ‖σ²‖² = d·a², ṽ = 1/(d·a), Σ_d 1/ṽ = d²·a; a few float64 roundings.
    g = Gaussian(np.ones((1, d)), np.full((1, d), a))
    np.testing.assert_allclose(paper_logits(g), [d * d * float(np.float32(a))], rtol=1e-12)


def _two_models() -> list[Gaussian]:
    """Model A: mean (3, 0), var (1, 1); model B: mean (0, 2), var (1, 3); one text."""
    return [Gaussian([[3.0, 0.0]], [[1.0, 1.0]]), Gaussian([[0.0, 2.0]], [[1.0, 3.0]])]


def _hand_weights() -> tuple[float, float]:
    """By hand: ṽ_A = (1,1)/2, logit 4; ṽ_B = (1,3)/10, logit 10 + 10/3; T = 2."""
    pi_b = 1.0 / (1.0 + math.exp(-((10 + 10 / 3) - 4) / 2))
    return 1.0 - pi_b, pi_b


def test_two_models_by_hand_in_sum_mode():
    pi_a, pi_b = _hand_weights()
    fused = fuse(_two_models(), ("A", "B"), PAPER, "sum")  # T = 2 unless told otherwise
    # stored as float32: 6e-8 relative rounding per value.
    np.testing.assert_allclose(fused.weights, [[pi_a, pi_b]], rtol=1e-12)
    np.testing.assert_allclose(fused.gaussian.mean, [[pi_a, pi_b]], rtol=1e-6)
    expected_var = [[pi_a**2 * 0.5 + pi_b**2 * 0.1, pi_a**2 * 0.5 + pi_b**2 * 0.3]]
    np.testing.assert_allclose(fused.gaussian.var, expected_var, rtol=1e-6)


def test_two_models_by_hand_in_concat_mode():
    pi_a, pi_b = _hand_weights()
    fused = fuse(_two_models(), ("A", "B"), PAPER, "concat")
    root = [math.sqrt(pi_a), 0.0, 0.0, math.sqrt(pi_b)]
    # float32 storage: 6e-8 relative; the zeros are exact.
    np.testing.assert_allclose(fused.gaussian.mean, [root], rtol=1e-6, atol=0)
    var = [pi_a * 0.5, pi_a * 0.5, pi_b * 0.1, pi_b * 0.3]
    np.testing.assert_allclose(fused.gaussian.var, [var], rtol=1e-6)


def test_the_default_temperature_is_two_and_configs_agree():
    parts = _two_models()
    assert FusionConfig("uec-paper", "sum").temperature == 2.0
    assert FusionConfig("uec").temperature == 1.0  # the others keep theirs
    by_config = FusionConfig("uec-paper", "sum").fuse(parts, ("A", "B"))
    explicit = fuse(parts, ("A", "B"), PAPER, "sum", temperature=2.0)
    np.testing.assert_array_equal(by_config.weights, explicit.weights)
    other = fuse(parts, ("A", "B"), PAPER, "sum", temperature=1.0)
    assert not np.array_equal(other.weights, explicit.weights)


def test_zero_variance_model_takes_all_the_weight():
    # ‖σ²‖ = 0: their code divides by 1, ṽ = 0 is floored at 1e-30: logit 2e30 dwarfs 4.
    parts = [Gaussian([[1.0, 0.0]], [[1.0, 1.0]]), Gaussian.deterministic([[0.0, 1.0]])]
    np.testing.assert_array_equal(fuse(parts, ("A", "B"), PAPER, "sum").weights, [[0.0, 1.0]])


def _direct(q: Gaussian, d: Gaussian, score: str, beta: float) -> np.ndarray:
    """Both published similarities over the full (nq, nd, dim) tensors, in float64."""
    mq, vq = q.mean.astype(np.float64)[:, None], q.var.astype(np.float64)[:, None]
    md, vd = d.mean.astype(np.float64)[None], d.var.astype(np.float64)[None]
    var = (mq**2 * vd + vq * md**2 + vq * vd).sum(axis=-1)
    dot = (mq * md).sum(axis=-1)
    if score == "uec":
        return dot / np.sqrt(1 + np.pi / 8 * beta * var)
    norms = np.linalg.norm(mq, axis=-1) * np.linalg.norm(md, axis=-1)
    return dot / norms / (1 + beta / np.pi * var)


@pytest.mark.parametrize("score", ["uec", "uec-mteb"])
@pytest.mark.parametrize("beta", [0.0, PAPER_BETA, 3.0])
def test_scores_equal_a_direct_numpy_evaluation(score, beta):
    rng = np.random.default_rng(7)
    q = Gaussian(rng.normal(size=(4, 6)), rng.uniform(0, 0.5, size=(4, 6)))
    d = Gaussian(rng.normal(size=(9, 6)), rng.uniform(0, 0.5, size=(9, 6)))
    expected = _direct(q, d, score, beta)
    # float64 sums of 6 terms of size <= ~10 in another order: ~1e-15 relative.
    np.testing.assert_allclose(score_matrix(q, d, score, beta), expected, rtol=1e-12)
    candidates = rng.integers(0, 9, size=(4, 5))
    picked = score_matrix(q, d, score, beta, candidates=candidates)
    assert picked.dtype == np.float64
    np.testing.assert_allclose(picked, np.take_along_axis(expected, candidates, 1), rtol=1e-12)
    pairs = score_pairs(q, d[:4], score, beta)
    np.testing.assert_allclose(pairs, np.diagonal(expected[:, :4]), rtol=1e-12)


@FAST
@given(model_parts(), st.floats(0.0, 5.0))
def test_mteb_score_is_the_cosine_shrunk_toward_zero(parts, beta):
    g = parts[0]
    unit = g.mean.astype(np.float64) / np.linalg.norm(g.mean.astype(np.float64), axis=1)[:, None]
    cos = unit @ unit.T
    s = score_matrix(g, g, "uec-mteb", beta)
    # float64 cosines of <= 6 terms computed two ways: ~1e-15 apart.
    assert np.all(np.abs(s) <= np.abs(cos) + 1e-12)  # the denominator is >= 1
    assert np.all((s > 1e-12) <= (cos > 0)) and np.all((s < -1e-12) <= (cos < 0))
    np.testing.assert_allclose(score_matrix(g, g, "uec-mteb", 0.0), cos, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"prior": [0.5, 0.5]}, r"prior not used by fusion method 'uec-paper'"),
        ({"weights": [0.5, 0.5]}, r"weights not used by fusion method 'uec-paper'"),
        ({"temperature": -1.0}, r"temperature must be >= 0"),
        ({"temperature": float("nan")}, r"temperature must be >= 0"),
    ],
)
def test_bad_fusion_options_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fuse(_two_models(), ("A", "B"), PAPER, "sum", **kwargs)
    with pytest.raises(ValueError, match=match):
        FusionConfig("uec-paper", "sum", **kwargs)


def test_bad_inputs_are_clear_errors():
    unequal = [Gaussian([[1.0, 0.0]], [[1.0, 1.0]]), Gaussian([[1.0]], [[1.0]])]
    with pytest.raises(ValueError, match="sum fusion needs equal dimensions"):
        fuse(unequal, ("A", "B"), PAPER, "sum")
    with pytest.raises(ValueError, match="temperature not used by fusion method 'mean'"):
        fuse(_two_models(), ("A", "B"), "mean", "sum", temperature=2.0)
    with pytest.raises(ValueError, match=r"paper logits must be an \(n, K\) array"):
        paper_weights(np.ones(3))
    with pytest.raises(ValueError, match="paper logits must be finite and >= 0"):
        paper_weights(np.array([[1.0, -1.0]]))
    g = _two_models()[0]
    with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
        score_matrix(g, g, "uec-mteb", beta=-0.1)
    with pytest.raises(ValueError, match="'uec-mteb' has no exact inner-product form"):
        inner_product_form(g, "uec-mteb", "query")
    with pytest.raises(ValueError, match=r"\['nope'\] are not built-in encoders"):
        paper_methods(["minilm", "nope"])
    with pytest.raises(ValueError, match="at least one model"):
        paper_methods([])


def test_paper_methods_run_sum_on_one_dimension_and_concat_otherwise():
    same = paper_methods(["minilm", "paraphrase-l3", "e5-small", "minilm-int8"])
    mixed = paper_methods(["minilm", "paraphrase-l3", "wordllama"])
    assert {m.fusion.mode for m in same} == {FusionMode.SUM.value}
    assert {m.fusion.mode for m in mixed} == {FusionMode.CONCAT.value}
    assert paper_methods(["minilm", "wordllama"], mode="sum")[0].fusion.mode == "sum"
    for m in same:
        assert (m.fusion.method, m.fusion.temperature) == ("uec-paper", 2.0)
    scores = [(m.name, m.score.name, m.score.beta) for m in same]
    assert scores == [
        ("uec-paper", Score.UEC.value, PAPER_BETA),
        ("uec-paper:mteb", Score.UEC_MTEB.value, PAPER_BETA),
        ("uec-paper:dot", Score.DOT.value, 0.0),
    ]
