"""Member cosines come back out of concat-fused means; their spread is the law of total variance."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from probembed.fusion import fuse
from probembed.gaussian import Gaussian
from probembed.scoring.ensemble import (
    disagreement_variance,
    hit_variance,
    member_cosines,
    pair_weights,
)

FAST = settings(max_examples=40, deadline=None)


def _parts(rng: np.random.Generator, n: int, dims: list[int]) -> list[Gaussian]:
    """Random Gaussians (means away from zero) of the same n texts, one per member."""
    return [
        Gaussian(rng.normal(size=(n, d)) + 0.1, rng.uniform(1e-4, 1e-2, size=(n, d))) for d in dims
    ]


@FAST
@given(st.integers(0, 2**32 - 1), st.lists(st.integers(1, 6), min_size=1, max_size=4))
@example(3880, [6, 1]).via("a document weight of 1e-20")
@example(7342, [1, 1, 6, 6]).via("a weight of 1e-27")
def test_member_cosines_recover_each_models_cosine(seed: int, dims: list[int]) -> None:
    """Whatever the per-text weights, cos_k from the fused rows equals the member's own cosine;
    where a member's weight underflows on a side (√(π_q·π_d) ≤ 1e-12), its block holds no
    direction and the cosine is NaN."""
    rng = np.random.default_rng(seed)
    models = [f"m{k}" for k in range(len(dims))]
    queries, docs = _parts(rng, 3, dims), _parts(rng, 5, dims)
    prior = rng.uniform(0.1, 1.0, size=len(dims))
    fq = fuse(queries, models, temperature=0.5, prior=prior)
    fd = fuse(docs, models, temperature=0.5, prior=prior)
    candidates = np.tile(np.arange(5), (3, 1))
    got = member_cosines(
        fq.gaussian.mean, fq.weights, fd.gaussian.mean, fd.weights, dims, candidates
    )
    for k in range(len(dims)):
        q = queries[k].normalize().mean.astype(np.float64)
        d = docs[k].normalize().mean.astype(np.float64)
        weighted = np.sqrt(np.outer(fq.weights[:, k], fd.weights[:, k])) > 1e-12
        # float32 storage of √π·μ: relative error ~1e-7 per coordinate, so 1e-5 on a cosine
        np.testing.assert_allclose(got[..., k], np.where(weighted, q @ d.T, np.nan), atol=1e-5)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_disagreement_is_the_weighted_spread_of_the_cosines(seed: int, k: int) -> None:
    """(Σω)²·Var_ω(cos) against numpy's weighted variance; zero when all members agree."""
    rng = np.random.default_rng(seed)
    cos = rng.uniform(-1, 1, size=(2, 3, k))
    omega = rng.uniform(0.0, 1.0, size=(2, 3, k))
    total = omega.sum(-1)
    share = omega / total[..., None]
    mean = (share * cos).sum(-1)
    expected = total**2 * (share * (cos - mean[..., None]) ** 2).sum(-1)
    np.testing.assert_allclose(disagreement_variance(cos, omega), expected, rtol=1e-12)
    same = np.repeat(cos[..., :1], k, axis=-1)
    np.testing.assert_allclose(disagreement_variance(same, omega), 0.0, atol=1e-15)


def test_a_member_weighted_next_to_nothing_counts_for_nothing_not_nan() -> None:
    """A query weight of 1e-28 (a sharp member at a low temperature) leaves that member no
    direction to compare (NaN cosine): the spread is the other members' alone, finite."""
    rng = np.random.default_rng(0)
    dims, models = [4, 3, 5], ["a", "b", "c"]
    fq = fuse(_parts(rng, 1, dims), models, temperature=1.0)
    weights = np.array([[1e-28, 0.6, 0.4]], dtype=np.float32)
    fd = fuse(_parts(rng, 3, dims), models, temperature=1.0)
    cand = np.array([[0, 1, 2]])
    cos = member_cosines(fq.gaussian.mean, weights, fd.gaussian.mean, fd.weights, dims, cand)
    assert np.isnan(cos[..., 0]).all() and np.isfinite(cos[..., 1:]).all()
    omega = pair_weights(weights, fd.weights, cand)
    assert (omega[..., 0] > 0).all()  # tiny, but not 0
    got = disagreement_variance(cos, omega)
    np.testing.assert_array_equal(got, disagreement_variance(cos[..., 1:], omega[..., 1:]))
    assert np.isfinite(got).all() and (got > 0).all()


def test_fused_dot_is_the_omega_weighted_sum_of_member_cosines() -> None:
    """Σ_k ω_k cos_k is the fused dot product, so ω is what each member contributes."""
    rng = np.random.default_rng(0)
    dims, models = [4, 3], ["a", "b"]
    fq = fuse(_parts(rng, 2, dims), models, temperature=1.0)
    fd = fuse(_parts(rng, 4, dims), models, temperature=1.0)
    cand = np.array([[0, 1, 2], [3, 2, 1]])
    cos = member_cosines(fq.gaussian.mean, fq.weights, fd.gaussian.mean, fd.weights, dims, cand)
    omega = pair_weights(fq.weights, fd.weights, cand)
    dots = np.einsum(
        "qd,qpd->qp", fq.gaussian.mean.astype(np.float64), fd.gaussian.mean[cand].astype(float)
    )
    np.testing.assert_allclose((omega * cos).sum(-1), dots, atol=1e-6)


def test_member_cosines_reject_dims_that_do_not_match_the_fused_rows() -> None:
    """A wrong block layout is an error naming both sums, not silently wrong cosines."""
    g = Gaussian(np.ones((1, 5)), np.zeros((1, 5)))
    with pytest.raises(ValueError, match="sum to 4, not the fused 5"):
        member_cosines(
            g.mean, np.ones((1, 2)), g.mean, np.ones((1, 2)), [2, 2], np.zeros((1, 1), int)
        )
    with pytest.raises(ValueError, match="document weights must have shape"):
        member_cosines(
            g.mean, np.ones((1, 2)), g.mean, np.ones((2, 2)), [2, 3], np.zeros((1, 1), int)
        )


def _fused_pair(dims: list[int]) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Seeded concat-fused queries and documents as hit_variance reads them, and candidates."""
    rng = np.random.default_rng(0)
    models = [f"m{k}" for k in range(len(dims))]
    fq = fuse(_parts(rng, 2, dims), models, temperature=1.0)
    fd = fuse(_parts(rng, 4, dims), models, temperature=1.0)
    rows = (fq.gaussian.mean, fq.weights, fd.gaussian.mean, fd.weights)
    return rows, np.array([[0, 1, 2], [3, 2, 1]])


def test_a_hits_variance_is_its_own_plus_the_members_spread_bit_for_bit() -> None:
    """The one sum search, calibration training, the harness and `similarity` report; cosines
    a caller already has are the ones added (search's are not computed twice)."""
    dims = [4, 3, 5]
    (q_mean, q_w, d_mean, d_w), cand = _fused_pair(dims)
    own = np.random.default_rng(1).uniform(0.0, 1e-3, size=cand.shape)
    cos = member_cosines(q_mean, q_w, d_mean, d_w, dims, cand)
    spread = disagreement_variance(cos, pair_weights(q_w, d_w, cand))
    assert (spread > 0).all()
    got = hit_variance(own, q_mean, q_w, d_mean, d_w, dims, cand)
    np.testing.assert_array_equal(got, own + spread)
    agreeing = np.repeat(cos[..., :1], len(dims), axis=-1)  # given: read, not recomputed
    given_cos = hit_variance(own, q_mean, q_w, d_mean, d_w, dims, cand, agreeing)
    np.testing.assert_array_equal(given_cos, own)


@pytest.mark.parametrize("dims", [[], [6]])
def test_rows_without_two_member_blocks_report_their_own_variance(dims: list[int]) -> None:
    """Sum or single fusion (no blocks) and a lone member have no disagreement to add."""
    (q_mean, q_w, d_mean, d_w), cand = _fused_pair([6])
    own = np.random.default_rng(1).uniform(0.0, 1e-3, size=cand.shape)
    assert hit_variance(own, q_mean, q_w, d_mean, d_w, dims, cand) is own
