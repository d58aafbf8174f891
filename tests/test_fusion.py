"""Fusion weights follow the softmax rule and its limits; fused Gaussians its two modes."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from probembed.fusion import (
    Fused,
    Fusion,
    FusionMode,
    fuse,
    fusion_weights,
    member_blocks,
    parse_fusion,
    parse_mode,
    single_model,
    uncertainty,
)
from probembed.gaussian import Gaussian

FAST = settings(max_examples=40, deadline=None)
MODELS = ("minilm", "use", "wordllama")
_VARIANCES = st.one_of(st.just(0.0), st.floats(1e-6, 1.0))  # no float32 subnormals


def _floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Finite float64 values in [lo, hi]."""
    return st.floats(lo, hi, allow_nan=False, allow_subnormal=False)


def _uncertainties(lo: float = 0.0) -> st.SearchStrategy[np.ndarray]:
    """(n, K) uncertainty tables, K between 1 and 4."""
    shapes = st.tuples(st.integers(1, 5), st.integers(1, 4))
    return shapes.flatmap(lambda s: arrays(np.float64, s, elements=_floats(lo, 10.0)))


@st.composite
def model_parts(draw: st.DrawFn, equal_dims: bool = False) -> list[Gaussian]:
    """K in 1..3 Gaussians of the same n texts, with means away from zero and dims 1..5."""
    n, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    dims = (
        [draw(st.integers(1, 5))] * k
        if equal_dims
        else draw(st.lists(st.integers(1, 5), min_size=k, max_size=k))
    )
    parts = []
    for d in dims:
        mean = draw(arrays(np.float64, (n, d), elements=_floats(-2.0, 2.0)))
        mean[:, 0] += np.where(mean[:, 0] >= 0, 0.5, -0.5)  # keep every norm >= 0.5
        var = draw(arrays(np.float64, (n, d), elements=_VARIANCES))
        parts.append(Gaussian(mean, var))
    return parts


def _like(parts: list[Gaussian]) -> st.SearchStrategy[list[Gaussian]]:
    """Other texts embedded by the same models: same n and dims, new values."""
    n = len(parts[0])
    return st.tuples(
        *[
            st.tuples(
                arrays(np.float64, (n, p.dim), elements=_floats(0.5, 2.0)),
                arrays(np.float64, (n, p.dim), elements=_VARIANCES),
            ).map(lambda mv: Gaussian(*mv))
            for p in parts
        ]
    ).map(list)


def _cosines(q: Gaussian, d: Gaussian) -> np.ndarray:
    """Row-wise cosine between the means of two aligned batches."""
    qn, dn = q.normalize().mean.astype(np.float64), d.normalize().mean.astype(np.float64)
    return np.einsum("nd,nd->n", qn, dn)


@FAST
@given(
    _uncertainties(),
    st.one_of(_floats(0.0, 100.0), st.just(np.inf)),
    st.one_of(st.none(), arrays(np.float64, 4, elements=_floats(0.01, 5.0))),
)
def test_weights_are_a_distribution(u, temperature, prior):
    prior = None if prior is None else prior[: u.shape[1]]
    w = fusion_weights(u, temperature, prior)
    assert w.shape == u.shape
    assert np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)


@FAST
@given(_uncertainties())
def test_infinite_temperature_gives_the_prior(u):
    k = u.shape[1]
    np.testing.assert_allclose(fusion_weights(u, np.inf), np.full(u.shape, 1 / k))
    np.testing.assert_allclose(fusion_weights(u, 1e12), np.full(u.shape, 1 / k), rtol=1e-9)
    prior = np.arange(1.0, k + 1)
    expected = np.broadcast_to(prior / prior.sum(), u.shape)
    np.testing.assert_allclose(fusion_weights(u, np.inf, prior), expected)


@FAST
@given(_uncertainties(lo=1e-3))
def test_zero_temperature_picks_the_least_uncertain_model(u):
    w = fusion_weights(u, 0.0)
    least = u == u.min(axis=1, keepdims=True)
    np.testing.assert_allclose(w, least / least.sum(axis=1, keepdims=True))
    ordered = np.sort(u, axis=1)
    runner_up = ordered[:, 1] if u.shape[1] > 1 else np.inf
    clear = runner_up > ordered[:, 0] * (1 + 1e-6)
    np.testing.assert_allclose(fusion_weights(u[clear], 1e-9), w[clear], atol=1e-9)


def test_zero_temperature_ties_split_evenly_then_by_prior():
    u = np.array([[0.2, 0.1, 0.1], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(fusion_weights(u, 0.0), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    prior = np.array([1.0, 3.0, 1.0])
    np.testing.assert_allclose(fusion_weights(u, 0.0, prior), [[0, 0.75, 0.25], [0.2, 0.6, 0.2]])
    np.testing.assert_allclose(fusion_weights(u, 0.0, [1.0, 0.0, 1.0]), [[0, 0, 1], [0.5, 0, 0.5]])


@FAST
@given(_uncertainties(lo=1e-3))
def test_unit_temperature_is_inverse_variance_weighting(u):
    inverse = 1 / u
    np.testing.assert_allclose(
        fusion_weights(u, 1.0), inverse / inverse.sum(axis=1, keepdims=True), rtol=1e-10
    )


def test_zero_uncertainty_is_unknown_not_certain():
    """u = 0 (no spread seen) weighs as the geometric mean of the row's other members."""
    w = fusion_weights(np.array([[0.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_allclose(w, [[0.5, 0.5], [0.5, 0.5]], rtol=1e-12)
    w3 = fusion_weights(np.array([[0.0, 0.01, 1.0]]), 1.0, prior=np.array([0.2, 0.4, 0.4]))
    expected = fusion_weights(np.array([[0.1, 0.01, 1.0]]), 1.0, prior=np.array([0.2, 0.4, 0.4]))
    np.testing.assert_allclose(w3, expected, rtol=1e-12)  # √(0.01·1) = 0.1
    # a tiny but positive u is a measurement: floored at U_FLOOR = 1e-30, it takes the weight
    np.testing.assert_allclose(fusion_weights(np.array([[1e-40, 1.0]]))[0], [1.0, 1e-30],
                               rtol=1e-12)  # fmt: skip


@FAST
@given(_uncertainties(lo=1e-3), st.integers(0, 3), _floats(0.1, 10.0))
def test_a_zero_uncertainty_never_takes_more_than_an_average_members_weight(u, k, t):
    """Replacing u_k by 0 gives member k the weight the geometric mean of the others gives."""
    k = k % u.shape[1]
    zeroed = u.copy()
    zeroed[:, k] = 0.0
    others = np.delete(u, k, axis=1)
    neutral = u.copy()
    neutral[:, k] = np.exp(np.log(others).mean(axis=1)) if others.size else 1.0
    np.testing.assert_allclose(fusion_weights(zeroed, t), fusion_weights(neutral, t), rtol=1e-9)


@FAST
@given(_floats(1e-6, 1e3), st.integers(1, 3))
def test_at_zero_temperature_an_unknown_member_ties_with_equal_measured_ones(a, others):
    """The stand-in for u = 0 was exp(log a), one ulp off a: at T = 0 the unknown member took
    every weight or none, as the rounding fell (in about two rows of three)."""
    w = fusion_weights(np.array([[0.0] + [a] * others]), 0.0)
    np.testing.assert_array_equal(w, np.full((1, others + 1), 1 / (others + 1)))


@FAST
@given(_uncertainties(), st.integers(0, 3), _floats(0.1, 10.0))
def test_a_member_of_prior_zero_changes_no_weight_when_dropped(u, k, t):
    """A saved pipeline drops the members its prior gives 0; with a u = 0 elsewhere in the row
    the dropped member's u entered the stand-in for it and moved every weight."""
    assume(u.shape[1] > 1)
    k = k % u.shape[1]
    prior = np.ones(u.shape[1])
    prior[k] = 0.0
    full = fusion_weights(u, t, prior=prior)
    dropped = fusion_weights(np.delete(u, k, axis=1), t, prior=np.delete(prior, k))
    assert np.all(full[:, k] == 0.0)
    # the same float64 operations on the same numbers (the dropped column adds exp(-inf) = 0)
    np.testing.assert_allclose(np.delete(full, k, axis=1), dropped, rtol=1e-12)


@FAST
@given(model_parts(), _floats(0.1, 10.0))
def test_uncertainty_is_scale_free(parts, c):
    g = parts[0]
    scaled = Gaussian(c * g.mean, c**2 * g.var)
    # c·μ and c²·σ² are float32 roundings (~6e-8 each) of the scaled values: 1e-5 is ample.
    np.testing.assert_allclose(uncertainty(scaled), uncertainty(g), rtol=1e-5)
    # normalize() rounds each σ²/|μ|² to float32 (≤ 2^-24 relative) before the float64 sum.
    np.testing.assert_allclose(uncertainty(g), g.normalize().total_variance(), rtol=2**-23)


@FAST
@given(model_parts(), st.sampled_from(["uec", "mean", "concat", "weighted"]))
def test_concat_fusion_of_unit_means_is_unit_norm(parts, method):
    weights = np.arange(1.0, len(parts) + 1) if method == "weighted" else None
    fused = fuse(parts, MODELS[: len(parts)], method, weights=weights)
    assert fused.gaussian.dim == sum(p.dim for p in parts)
    np.testing.assert_allclose(np.linalg.norm(fused.gaussian.mean, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(fused.weights.sum(axis=1), 1.0)


@FAST
@given(model_parts().flatmap(lambda q: st.tuples(st.just(q), _like(q))))
def test_concat_dot_is_weighted_mean_of_cosines(qd):
    q_parts, d_parts = qd
    names = MODELS[: len(q_parts)]
    fq, fd = fuse(q_parts, names), fuse(d_parts, names)
    dot = np.einsum("nd,nd->n", fq.gaussian.mean, fd.gaussian.mean)
    cos = np.stack([_cosines(q, d) for q, d in zip(q_parts, d_parts, strict=True)], axis=1)
    expected = (np.sqrt(fq.weights * fd.weights) * cos).sum(axis=1)
    np.testing.assert_allclose(dot, expected, rtol=1e-4, atol=1e-5)


@FAST
@given(model_parts(equal_dims=True), st.sampled_from(["uec", "mean"]))
def test_sum_mode_formula(parts, method):
    fused = fuse(parts, MODELS[: len(parts)], method, mode="sum")
    normed = [p.normalize() for p in parts]
    w = fused.weights
    mean = sum(w[:, [k]] * p.mean.astype(np.float64) for k, p in enumerate(normed))
    var = sum(w[:, [k]] ** 2 * p.var.astype(np.float64) for k, p in enumerate(normed))
    np.testing.assert_allclose(fused.gaussian.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused.gaussian.var, var, rtol=1e-5, atol=1e-7)


def test_uec_weights_trust_the_less_uncertain_model():
    mean = np.ones((2, 4))
    sure = Gaussian(mean, np.full((2, 4), 0.01))
    unsure = Gaussian(mean, np.array([[0.03] * 4, [0.001] * 4]))
    fused = fuse([sure, unsure], ["sure", "unsure"], "uec")
    np.testing.assert_allclose(fused.weights, [[0.75, 0.25], [1 / 11, 10 / 11]])
    assert fused.explain(0) == pytest.approx({"sure": 0.75, "unsure": 0.25})
    assert fused.explain(-1)["unsure"] == pytest.approx(10 / 11)


def test_weighted_uses_the_given_weights_normalised():
    parts = [
        Gaussian(np.eye(3), np.full((3, 3), 0.1)),
        Gaussian(np.eye(3)[:, :2] + 1, np.ones((3, 2))),
    ]
    fused = fuse(parts, ["a", "b"], "weighted", weights=np.array([3.0, 1.0]))
    np.testing.assert_allclose(fused.weights, np.tile([0.75, 0.25], (3, 1)))
    normed = [p.normalize() for p in parts]
    np.testing.assert_allclose(
        fused.gaussian.mean,
        np.hstack([np.sqrt(0.75) * normed[0].mean, np.sqrt(0.25) * normed[1].mean]),
    )
    np.testing.assert_allclose(
        fused.gaussian.var, np.hstack([0.75 * normed[0].var, 0.25 * normed[1].var])
    )


def test_mean_and_plain_concat_are_uniform():
    parts = [
        Gaussian(np.ones((2, 3)), np.ones((2, 3))),
        Gaussian(np.ones((2, 2)), np.zeros((2, 2))),
    ]
    for method in (Fusion.MEAN, "concat"):
        fused = fuse(parts, ["a", "b"], method)
        np.testing.assert_allclose(fused.weights, 0.5)
        np.testing.assert_allclose(fused.gaussian.var[:, :3], 0.5 / 3)


@FAST
@given(model_parts(), st.data())
def test_single_picks_the_model(parts, data):
    names = MODELS[: len(parts)]
    k = data.draw(st.integers(0, len(parts) - 1))
    fused = fuse(parts, names, f"single:{names[k]}")
    expected = parts[k].normalize()
    np.testing.assert_array_equal(fused.gaussian.mean, expected.mean)
    np.testing.assert_array_equal(fused.gaussian.var, expected.var)
    np.testing.assert_array_equal(fused.weights, np.eye(len(parts))[[k] * len(parts[0])])
    assert fused.explain(0)[names[k]] == 1.0


def test_names_parse():
    assert parse_fusion("UEC") is Fusion.UEC
    assert parse_mode("sum") is FusionMode.SUM
    assert single_model("single:use") == "use"
    assert single_model("mean") is None
    assert single_model(Fusion.MEAN) is None
    valid = r"valid methods are: uec, mean, weighted, concat, uec-paper, single"
    with pytest.raises(ValueError, match=valid):
        parse_fusion("meen")
    with pytest.raises(ValueError, match="valid modes are: sum, concat"):
        parse_mode("add")
    with pytest.raises(ValueError, match="names no model"):
        single_model("single:")


@pytest.mark.parametrize(
    ("method", "mode", "blocks"),
    [
        ("uec", "concat", (4, 3)),
        ("concat", "concat", (4, 3)),
        ("uec-paper", "concat", (4, 3)),
        ("uec", "sum", ()),
        ("mean", "sum", ()),
        ("single:use", "concat", ()),
        ("single:use", "sum", ()),
    ],
)
def test_member_blocks_are_the_concat_layout_of_every_member(method, mode, blocks):
    """One block per member, in order, exactly where fuse lays the rows out so."""
    assert member_blocks(method, mode, [4, 3]) == blocks
    if blocks:
        parts = [Gaussian(np.ones((2, d)), np.ones((2, d))) for d in blocks]
        assert fuse(parts, ("minilm", "use"), method, mode).gaussian.dim == sum(blocks)


def _two_parts(n_b: int = 2, dim_b: int = 3) -> list[Gaussian]:
    """Two small parts; change n_b or dim_b to make them disagree."""
    return [
        Gaussian(np.ones((2, 3)), np.ones((2, 3))),
        Gaussian(np.ones((n_b, dim_b)), np.ones((n_b, dim_b))),
    ]


@pytest.mark.parametrize(
    ("kwargs", "parts", "message"),
    [
        ({}, _two_parts(n_b=3), "same texts, got row counts a: 2, b: 3"),
        (
            {"method": "mean", "mode": "sum"},
            _two_parts(dim_b=4),
            "equal dimensions, got a: 3, b: 4",
        ),
        ({"method": "avg"}, _two_parts(), "valid methods are"),
        ({"mode": "stack"}, _two_parts(), "valid modes are"),
        ({"method": "weighted"}, _two_parts(), "needs weights"),
        ({"method": "weighted", "weights": [1.0]}, _two_parts(), r"weights must have shape \(2,\)"),
        ({"method": "weighted", "weights": [0.0, 0.0]}, _two_parts(), "not all zero"),
        (
            {"method": "mean", "prior": [1.0, 1.0]},
            _two_parts(),
            "prior not used by fusion method 'mean'",
        ),
        ({"method": "mean", "temperature": 2.0}, _two_parts(), "temperature not used"),
        ({"weights": [1.0, 1.0]}, _two_parts(), "weights not used by fusion method 'uec'"),
        ({"temperature": -1.0}, _two_parts(), "temperature must be >= 0"),
        ({"prior": [1.0, -1.0]}, _two_parts(), "prior must be finite, >= 0"),
        ({"method": "concat", "mode": "sum"}, _two_parts(), "always concatenates"),
        ({"method": "single:e5"}, _two_parts(), r"unknown model 'e5'; models are \['a', 'b'\]"),
    ],
)
def test_bad_fuse_arguments_raise_clear_errors(kwargs, parts, message):
    with pytest.raises(ValueError, match=message):
        fuse(parts, ["a", "b"], **kwargs)


def test_model_names_must_match_parts():
    with pytest.raises(ValueError, match=r"got 2 parts but 3 model names"):
        fuse(_two_parts(), ["a", "b", "c"])
    with pytest.raises(ValueError, match="unique"):
        fuse(_two_parts(), ["a", "a"])
    with pytest.raises(ValueError, match="at least one"):
        fuse([], [])


def test_bad_weight_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"\(n, K\) array"):
        fusion_weights(np.ones(3))
    with pytest.raises(ValueError, match="finite and >= 0"):
        fusion_weights(np.array([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="temperature"):
        fusion_weights(np.ones((1, 2)), float("nan"))


def test_fused_checks_its_weights_and_index():
    g = Gaussian(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"weights must have shape \(2, 2\)"):
        Fused(g, np.ones((2, 3)), ("a", "b"))
    with pytest.raises(IndexError, match="out of range"):
        Fused(g, np.full((2, 2), 0.5), ("a", "b")).explain(2)
    for index in (True, 1.0, "0"):  # numpy's and Python's words about formats and indexing
        with pytest.raises(TypeError, match=f"text index must be an integer, got {index!r}"):
            Fused(g, np.full((2, 2), 0.5), ("a", "b")).explain(index)
    assert Fused(g, np.full((2, 2), 0.5), ("a", "b")).explain(np.int64(1)) == {"a": 0.5, "b": 0.5}
