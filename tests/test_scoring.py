"""Each score must equal its textbook formula pair by pair, and its ANN reduction rank alike."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from probembed.gaussian import Gaussian
from probembed.scoring import (
    VAR_FLOOR,
    Score,
    dot_moments,
    dot_variance,
    inner_product_form,
    inner_product_offset,
    pair_variance,
    pairwise,
    parse_score,
    score_matrix,
    score_pairs,
)

FAST = settings(max_examples=40, deadline=None)
MAX_MEAN, MAX_VAR = 2.0, 2.0
FLOORED = (Score.KL, Score.MLS, Score.BHATTACHARYYA)
IP_SCORES = (Score.DOT, Score.CSD, Score.W2, Score.KL)


def _matrix(n: int, d: int, lo: float, hi: float) -> st.SearchStrategy[np.ndarray]:
    """float32 (n, d) arrays with entries in [lo, hi]."""
    return arrays(np.float32, (n, d), elements=st.floats(lo, hi, width=32, allow_subnormal=False))


@st.composite
def gaussians(draw: st.DrawFn, n: int, d: int, unit: bool = False) -> Gaussian:
    """A small batch of Gaussians; variances include exact zeros (hypothesis favours them)."""
    mean = draw(_matrix(n, d, -MAX_MEAN, MAX_MEAN))
    if unit:
        mean = mean.astype(np.float64)
        mean[np.linalg.norm(mean, axis=1) < 1e-3, 0] = 1.0
        mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    return Gaussian(mean, draw(_matrix(n, d, 0.0, MAX_VAR)))


@st.composite
def pairs(draw: st.DrawFn, unit: bool = False) -> tuple[Gaussian, Gaussian]:
    """A query batch and a document batch of one dimension."""
    d = draw(st.integers(1, 5))
    q = draw(gaussians(draw(st.integers(1, 4)), d, unit))
    return q, draw(gaussians(draw(st.integers(1, 5)), d, unit))


def _naive(score: Score, mq, vq, md, vd, beta: float = 1.0) -> float:
    """The architecture table's formula for one pair, written out in float64 without expansions."""
    mq, vq, md, vd = (np.asarray(x, dtype=np.float64) for x in (mq, vq, md, vd))
    fq, fd = np.maximum(vq, VAR_FLOOR), np.maximum(vd, VAR_FLOOR)
    diff2 = (mq - md) ** 2
    if score is Score.DOT:
        return float(mq @ md)
    if score is Score.UEC:
        v = np.sum(mq**2 * vd + vq * md**2 + vq * vd)
        return float(mq @ md / math.sqrt(1 + math.pi / 8 * beta * v))
    if score is Score.UEC_MTEB:
        v = np.sum(mq**2 * vd + vq * md**2 + vq * vd)
        norms = max(np.linalg.norm(mq), 1e-12) * max(np.linalg.norm(md), 1e-12)
        return float(mq @ md / norms / (1 + beta / math.pi * v))
    if score is Score.CSD:
        return float(-(diff2.sum() + vq.sum() + vd.sum()))
    if score is Score.W2:
        return float(-(diff2.sum() + np.sum((np.sqrt(vq) - np.sqrt(vd)) ** 2)))
    if score is Score.KL:
        return float(-0.5 * np.sum(fq / fd + diff2 / fd - 1 + np.log(fd) - np.log(fq)))
    if score is Score.MLS:
        s = fq + fd
        return float(-0.5 * np.sum(diff2 / s + np.log(s)))
    mid = (fq + fd) / 2
    return float(-(np.sum(diff2 / mid) / 8 + 0.5 * np.sum(np.log(mid / np.sqrt(fq * fd)))))


def _naive_matrix(q: Gaussian, d: Gaussian, score: Score, beta: float = 1.0) -> np.ndarray:
    """Loop over every (query, document) pair."""
    return np.array(
        [
            [_naive(score, q.mean[i], q.var[i], d.mean[j], d.var[j], beta) for j in range(len(d))]
            for i in range(len(q))
        ]
    )


def _atol(score: Score, q: Gaussian, d: Gaussian) -> float:
    """Float64 rounding bound of the matmul expansions, given the sizes of their terms."""
    terms = q.dim * (1 + 4 * MAX_MEAN**2 + 2 * MAX_VAR) ** 2
    if score in FLOORED:
        least = max(float(min(q.var.min(), d.var.min())), VAR_FLOOR)
        terms = terms / least + q.dim * abs(math.log(least))
    return 1e-13 * terms


@FAST
@given(pairs(), st.sampled_from(list(Score)), st.floats(0.0, 4.0))
def test_score_matrix_equals_per_pair_formula(qd, score, beta):
    q, d = qd
    got = score_matrix(q, d, score, beta=beta)
    assert got.shape == (len(q), len(d))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(
        got, _naive_matrix(q, d, score, beta), rtol=1e-9, atol=_atol(score, q, d)
    )


@FAST
@given(pairs())
def test_dot_variance_is_nonnegative_and_matches_formula(qd):
    q, d = qd
    v = dot_variance(q, d)
    assert v.shape == (len(q), len(d))
    assert np.all(v >= 0)
    expected = [
        [
            np.sum(q.mean[i] ** 2 * d.var[j] + q.var[i] * d.mean[j] ** 2 + q.var[i] * d.var[j])
            for j in range(len(d))
        ]
        for i in range(len(q))
    ]
    np.testing.assert_allclose(v, expected, rtol=1e-5, atol=1e-6)


def test_dot_variance_matches_monte_carlo():
    rng = np.random.default_rng(0)
    q = Gaussian(np.array([[0.5, -1.0, 2.0]]), np.array([[0.3, 0.1, 0.5]]))
    d = Gaussian(np.array([[1.0, 0.2, -0.5]]), np.array([[0.2, 0.4, 0.05]]))
    draws = 200_000
    xq = q.mean + np.sqrt(q.var) * rng.standard_normal((draws, 3))
    xd = d.mean + np.sqrt(d.var) * rng.standard_normal((draws, 3))
    sampled = np.einsum("nd,nd->n", xq, xd).var()
    assert dot_variance(q, d)[0, 0] == pytest.approx(sampled, rel=0.03)


@FAST
@given(pairs(), st.floats(0.0, 4.0))
def test_uec_is_dot_without_variance_or_beta(qd, beta):
    q, d = qd
    dot = score_matrix(q, d, "dot")
    np.testing.assert_allclose(score_matrix(q, d, "uec", beta=0.0), dot)
    q0, d0 = Gaussian.deterministic(q.mean), Gaussian.deterministic(d.mean)
    np.testing.assert_allclose(score_matrix(q0, d0, "uec", beta=beta), dot)


@FAST
@given(pairs(), st.sampled_from([Score.CSD, Score.W2]), st.sampled_from([1e-2, 1e-4, 1e-6, 0]))
def test_csd_and_w2_tend_to_squared_distance(qd, score, t):
    q, d = qd
    q_t, d_t = Gaussian(q.mean, t * q.var), Gaussian(d.mean, t * d.var)
    sq_dist = ((q.mean[:, None, :].astype(float) - d.mean[None, :, :]) ** 2).sum(axis=2)
    gap = np.abs(score_matrix(q_t, d_t, score) + sq_dist)
    assert np.all(gap <= 2 * MAX_VAR * q.dim * t + 1e-9)


@FAST
@given(pairs(unit=True), st.sampled_from([0.0, 1e-6, 1e-4, 1e-2]))
def test_log_scores_with_equal_isotropic_variance_rank_as_distance(qd, s):
    q, d = qd
    s_eff = max(float(np.float32(s)), VAR_FLOOR)
    iso_q = Gaussian(q.mean, np.full(q.mean.shape, s, np.float32))
    iso_d = Gaussian(d.mean, np.full(d.mean.shape, s, np.float32))
    neg_dist = -((q.mean[:, None, :].astype(float) - d.mean[None, :, :]) ** 2).sum(axis=2)
    affine = {  # score = a * (-|μq-μd|²) + b, with a > 0
        Score.KL: (1 / (2 * s_eff), 0.0),
        Score.MLS: (1 / (4 * s_eff), -0.5 * q.dim * math.log(2 * s_eff)),
        Score.BHATTACHARYYA: (1 / (8 * s_eff), 0.0),
    }
    for score, (a, b) in affine.items():
        got = score_matrix(iso_q, iso_d, score)
        np.testing.assert_allclose((got - b) / a, neg_dist, atol=1e-7 * q.dim)
        by_dot = np.argsort(-score_matrix(q, d, "dot"), axis=1, kind="stable")
        ranked = np.take_along_axis((got - b) / a, by_dot, axis=1)
        assert np.all(np.diff(ranked, axis=1) <= 1e-6)


def test_log_scores_rank_exactly_as_dot_for_unit_means():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(4, 16)).astype(np.float32)
    d = rng.normal(size=(60, 16)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    dot_order = np.argsort(-(q @ d.T), axis=1)
    for s in (0.0, 1e-4):
        gq, gd = Gaussian(q, np.full_like(q, s)), Gaussian(d, np.full_like(d, s))
        for score in FLOORED:
            order = np.argsort(-score_matrix(gq, gd, score), axis=1)
            np.testing.assert_array_equal(order, dot_order)


@FAST
@given(pairs(), st.sampled_from([Score.CSD, Score.W2, Score.MLS, Score.BHATTACHARYYA]))
def test_symmetric_scores(qd, score):
    q, d = qd
    np.testing.assert_allclose(
        score_matrix(q, d, score), score_matrix(d, q, score).T, rtol=1e-12, atol=1e-9
    )


@FAST
@given(st.integers(1, 5).flatmap(lambda d: gaussians(4, d)))
def test_kl_of_a_gaussian_with_itself_is_zero(g):
    diagonal = np.diag(score_matrix(g, g, "kl"))
    np.testing.assert_allclose(diagonal, 0.0, atol=_atol(Score.KL, g, g))
    assert np.all(score_matrix(g, g, "kl") <= 0)


def test_zero_variance_gives_finite_scores():
    rng = np.random.default_rng(2)
    q = Gaussian.deterministic(rng.normal(size=(3, 8)))
    d = Gaussian.deterministic(rng.normal(size=(5, 8)))
    for score in Score:
        assert np.all(np.isfinite(score_matrix(q, d, score))), score


def test_blocked_pairwise_scores_equal_one_block(monkeypatch):
    rng = np.random.default_rng(3)
    q = Gaussian(rng.normal(size=(7, 5)), rng.random((7, 5)))
    d = Gaussian(rng.normal(size=(9, 5)), rng.random((9, 5)))
    whole = {s: score_matrix(q, d, s) for s in (Score.MLS, Score.BHATTACHARYYA)}
    monkeypatch.setattr(pairwise, "_BLOCK_BYTES", 8 * 2 * 12)  # 12 elements: 1 query x 2 docs
    for score, expected in whole.items():
        np.testing.assert_allclose(score_matrix(q, d, score), expected, rtol=1e-12)


@FAST
@given(pairs(), st.sampled_from(IP_SCORES))
def test_inner_product_form_is_score_plus_query_constant(qd, score):
    q, d = qd
    qv, dv = inner_product_form(q, score, "query"), inner_product_form(d, score, "doc")
    assert qv.dtype == dv.dtype == np.float32
    width = {Score.DOT: q.dim, Score.CSD: q.dim + 1}.get(score, 2 * q.dim + 1)
    assert qv.shape == (len(q), width) and dv.shape == (len(d), width)
    qv, dv = qv.astype(np.float64), dv.astype(np.float64)
    shift = qv @ dv.T - score_matrix(q, d, score)
    # float32 vectors: each product is exact to ~1e-7 of the sum of its terms' magnitudes
    tol = 1e-6 * (np.abs(qv) @ np.abs(dv).T) + _atol(score, q, d)
    assert np.all(np.abs(shift - inner_product_offset(q, score)[:, None]) <= tol)


def test_inner_product_form_ranks_exactly_as_score():
    rng = np.random.default_rng(4)
    q = Gaussian(rng.normal(size=(5, 16)), rng.uniform(0.01, 0.1, size=(5, 16)))
    d = Gaussian(rng.normal(size=(80, 16)), rng.uniform(0.01, 0.1, size=(80, 16)))
    for score in IP_SCORES:
        products = inner_product_form(q, score, "query") @ inner_product_form(d, score, "doc").T
        np.testing.assert_array_equal(
            np.argsort(-products, axis=1), np.argsort(-score_matrix(q, d, score), axis=1)
        )


def test_parse_score_accepts_names_and_members():
    assert parse_score("KL") is Score.KL
    assert parse_score(Score.W2) is Score.W2
    assert parse_score("cosine") is Score.DOT
    with pytest.raises(ValueError, match=r"unknown score 'kll'.*bhattacharyya"):
        parse_score("kll")


def test_bad_inputs_raise_clear_errors():
    q = Gaussian(np.ones((2, 3)), np.ones((2, 3)))
    d = Gaussian(np.ones((2, 4)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="same dimension, got 3 and 4"):
        score_matrix(q, d, "csd")
    with pytest.raises(ValueError, match="same dimension"):
        dot_variance(q, d)
    with pytest.raises(ValueError, match="valid scores are"):
        score_matrix(q, q, "cosin")
    with pytest.raises(ValueError, match="beta"):
        score_matrix(q, q, "uec", beta=-1.0)
    with pytest.raises(ValueError, match="no exact inner-product form"):
        inner_product_form(q, "mls", "doc")
    with pytest.raises(ValueError, match="side must be"):
        inner_product_form(q, "csd", "document")
    with pytest.raises(TypeError, match="Gaussian"):
        score_matrix(q.mean, q, "dot")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 9), score=st.sampled_from(list(Score)))
def test_score_pairs_is_the_diagonal_of_the_score_matrix(seed, n, score):
    rng = np.random.default_rng(seed)
    a = Gaussian(rng.normal(size=(n, 5)), rng.uniform(0, 0.1, size=(n, 5)))
    b = Gaussian(rng.normal(size=(n, 5)), rng.uniform(0, 0.1, size=(n, 5)))
    paired = score_pairs(a, b, score, beta=2.0)
    np.testing.assert_allclose(paired, np.diagonal(score_matrix(a, b, score, beta=2.0)), rtol=1e-10)
    np.testing.assert_allclose(pair_variance(a, b), np.diagonal(dot_variance(a, b)), rtol=1e-10)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    shape=st.tuples(st.integers(1, 6), st.integers(1, 12), st.integers(1, 5)),
    score=st.sampled_from(list(Score)),
)
def test_scoring_candidates_equals_picking_from_the_full_matrix(seed, shape, score):
    nq, nd, p = shape
    rng = np.random.default_rng(seed)
    q = Gaussian(rng.normal(size=(nq, 7)), rng.uniform(0, 0.1, size=(nq, 7)))
    d = Gaussian(rng.normal(size=(nd, 7)), rng.uniform(0, 0.1, size=(nd, 7)))
    candidates = rng.integers(0, nd, size=(nq, p))
    full = np.take_along_axis(score_matrix(q, d, score, beta=3.0), candidates, axis=1)
    picked = score_matrix(q, d, score, beta=3.0, candidates=candidates)
    np.testing.assert_allclose(picked, full, rtol=1e-10, atol=1e-10)
    variances = np.take_along_axis(dot_variance(q, d), candidates, axis=1)
    np.testing.assert_allclose(dot_variance(q, d, candidates), variances, rtol=1e-10)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    shape=st.tuples(st.integers(1, 6), st.integers(1, 12), st.integers(1, 5)),
)
def test_dot_moments_are_the_dot_scores_and_their_variances_bit_for_bit(seed, shape):
    nq, nd, p = shape
    rng = np.random.default_rng(seed)
    q = Gaussian(rng.normal(size=(nq, 7)), rng.uniform(0, 0.1, size=(nq, 7)))
    d = Gaussian(rng.normal(size=(nd, 7)), rng.uniform(0, 0.1, size=(nd, 7)))
    candidates = rng.integers(0, nd, size=(nq, p))
    for cand in (None, candidates):  # against every document, and per query's candidates
        dots, variances = dot_moments(q, d, cand)
        np.testing.assert_array_equal(dots, score_matrix(q, d, Score.DOT, candidates=cand))
        np.testing.assert_array_equal(variances, dot_variance(q, d, cand))


def test_candidates_outside_the_documents_are_a_clear_error():
    g = Gaussian(np.ones((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="must index the 2 documents"):
        score_matrix(g, g, "dot", candidates=np.array([[0], [2]]))
    with pytest.raises(ValueError, match=r"integer \(n_queries=2, p\)"):
        score_matrix(g, g, "dot", candidates=np.array([0, 1]))


@pytest.mark.parametrize("beta", ["1", None, True])
def test_a_beta_that_is_not_a_number_is_named(beta):
    g = Gaussian(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(TypeError, match="beta must be a number"):
        score_matrix(g, g, "uec", beta)
