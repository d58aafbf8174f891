"""The fast exact scan: its float32 error bound holds, and its result is the float64 scan's."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.gaussian import Gaussian
from probembed.scoring import Score, score_matrix
from probembed.store import ranking
from probembed.store.ranking import _float32_bounds, _float64_scan, scan, with_moments
from probembed.store.snapshot import MeanFile


class MeanArray:
    """`ranking.Means` over a float32 (n, d) array in memory (the store reads a `MeanFile`)."""

    def __init__(self, means: np.ndarray) -> None:
        self.means = np.asarray(means, dtype=np.float32)
        self.norms = ranking.float32_norm_bounds(self.means)

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        """Rows by position."""
        return self.means[positions]

    def norm_bounds(self, positions: np.ndarray) -> np.ndarray:
        """Upper bounds of these rows' norms."""
        return self.norms[positions]


def unit_gaussians(rng: np.random.Generator, n: int, dim: int, var_scale: float) -> Gaussian:
    """Unit-norm means (as fused means are) with positive variances around var_scale."""
    mean = rng.normal(size=(n, dim))
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    var = var_scale * rng.uniform(0.1, 2.0, size=(n, dim))
    return Gaussian(mean.astype(np.float32), var.astype(np.float32))


def rows_of(docs: Gaussian):
    """The `Rows` function of an in-memory Gaussian."""
    return lambda positions: docs[positions]  # as a function, the way a snapshot is read


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    dim=st.integers(1, 700),
    var_scale=st.sampled_from([0.0, 1e-6, 1e-3, 0.1]),
    beta=st.sampled_from([0.0, 1.0, 40.0]),
    score=st.sampled_from([Score.DOT, Score.UEC]),
)
def test_float32_scores_lie_within_their_bound_of_float64(seed, dim, var_scale, beta, score):
    rng = np.random.default_rng(seed)
    queries, docs = unit_gaussians(rng, 5, dim, var_scale), unit_gaussians(rng, 40, dim, var_scale)
    approx, err = _float32_bounds(queries, docs, score, beta)
    exact = score_matrix(queries, docs, score, beta)
    assert np.all(np.abs(approx - exact) <= err)


def near_ties(rng: np.random.Generator) -> Gaussian:
    """Rows that tie exactly or within float32 rounding: the case the bound must catch."""
    base = unit_gaussians(rng, 300, 64, 1e-3)
    copies = base[np.repeat(np.arange(10), 30)]  # 30 exact copies of each of 10 rows
    nudged = Gaussian(copies.mean + rng.normal(scale=1e-7, size=copies.mean.shape), copies.var)
    return Gaussian.concat([base, nudged, copies], axis=0)


@pytest.mark.parametrize("score", [Score.DOT, Score.UEC])
@pytest.mark.parametrize("block", [7, 4096])
def test_scan_is_identical_to_the_float64_scan_even_with_ties(monkeypatch, score, block):
    monkeypatch.setattr(ranking, "SCAN_BLOCK", block)  # several blocks, and one
    rng = np.random.default_rng(3)
    docs = near_ties(rng)
    queries = Gaussian.concat([docs[:10], unit_gaussians(rng, 20, 64, 1e-3)], axis=0)
    positions = np.arange(len(docs))
    got = scan(queries, rows_of(docs), positions, 10, score, 1.0)
    want = with_moments(
        queries, rows_of(docs), *_float64_scan(queries, rows_of(docs), positions, 10, score, 1.0)
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.positions, w.positions)
        # the float64 rescoring sums per candidate, the float64 scan by matrix product: the
        # same numbers up to float64 rounding of a 64-term sum (~1e-16 relative)
        np.testing.assert_allclose(g.scores, w.scores, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("block", [50, 65_536])
def test_the_faiss_dot_scan_is_identical_to_the_float64_scan(monkeypatch, block):
    monkeypatch.setattr(ranking, "DOT_BLOCK", block)
    rng = np.random.default_rng(5)
    docs = near_ties(rng)
    queries = Gaussian.concat([docs[:10], unit_gaussians(rng, 20, 64, 1e-3)], axis=0)
    positions = np.arange(len(docs))
    means = MeanArray(docs.mean)
    got = scan(queries, rows_of(docs), positions, 10, Score.DOT, 1.0, means=means)
    want = _float64_scan(queries, rows_of(docs), positions, 10, Score.DOT, 1.0)
    for g, w_pos in zip(got, want[0], strict=True):
        np.testing.assert_array_equal(g.positions, w_pos)


def test_scan_of_a_subset_returns_only_those_positions():
    rng = np.random.default_rng(4)
    docs = unit_gaussians(rng, 500, 32, 1e-3)
    allowed = np.arange(0, 500, 3)
    got = scan(docs[:5], rows_of(docs), allowed, 10, Score.UEC, 1.0)
    want = score_matrix(docs[:5], docs[allowed], Score.UEC, 1.0)
    for g, w in zip(got, want, strict=True):
        assert set(g.positions) <= set(allowed)
        np.testing.assert_array_equal(g.positions, allowed[np.argsort(-w, kind="stable")[:10]])


def test_norm_bounds_are_upper_bounds_of_the_float64_norms():
    rng = np.random.default_rng(6)
    rows = (rng.normal(size=(200, 1280)) * rng.uniform(1e-3, 10, size=(200, 1))).astype(np.float32)
    exact = np.linalg.norm(rows.astype(np.float64), axis=1)
    bound = ranking._norm_bounds(rows)
    assert np.all(bound >= exact)
    # and tight: within the γ(1280) the bound adds (~8e-5 relative), not a loose guess
    assert np.all(bound <= exact * (1 + 1e-4))
    # kept per row in float32 (rounded up), they still bound, in memory or in a mapped file
    kept = ranking.float32_norm_bounds(rows)
    assert kept.dtype == np.float32 and np.all(kept.astype(np.float64) >= bound)
    assert np.all(kept <= exact * (1 + 2e-4))
    file = MeanFile(rows.shape[1])
    try:
        file.append(rows[:50])
        first = file.norm_bounds(np.arange(50))
        file.append(rows[50:])  # rows appended after a first use get theirs too
        np.testing.assert_array_equal(file.norm_bounds(np.arange(200)), kept)
        np.testing.assert_array_equal(first, kept[:50])
    finally:
        file.close()


@pytest.mark.parametrize("pool", [30, 200])
def test_certified_dot_rescoring_equals_float64_rescoring_of_every_candidate(pool):
    """Many candidates per query, many of them near-ties that the float32 bound cannot order
    (so those queries take the float64 fallback): the result is that of scoring every
    candidate in float64 (pool 30: few rows dropped)."""
    rng = np.random.default_rng(7)
    docs = near_ties(rng)
    queries = Gaussian.concat([docs[:10], unit_gaussians(rng, 20, 64, 1e-3)], axis=0)
    candidates = np.stack([rng.permutation(len(docs))[:pool] for _ in range(len(queries))])
    for i in range(10):  # query i is row i: its 60 (nudged or exact) copies tie with it
        ties = np.r_[i, 300 + 30 * i + np.arange(30), 600 + 30 * i + np.arange(30)]
        candidates[i, : min(pool, 61)] = ties[:pool]
    candidates[3, -4:] = -1  # a query with fewer candidates than the pool
    rows = rows_of(docs)
    got = ranking.rescore(queries, rows, candidates, 10, Score.DOT, 0.0, means=MeanArray(docs.mean))
    want = ranking._rescored(queries, rows, candidates, 10, Score.DOT, 0.0, rows)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.positions, w.positions)
        # both float64 sums over one candidate's dimensions: equal up to their rounding
        np.testing.assert_allclose(g.scores, w.scores, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(g.variances, w.variances, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    nq=st.integers(1, 4),
    p=st.integers(1, 40),
    k=st.integers(1, 12),
    levels=st.integers(1, 50),
)
def test_within_reach_keeps_every_row_of_the_true_top_k(seed, nq, p, k, levels):
    """Bounds around the true scores (ties among few levels, some bounds of width 0, some
    candidates missing): every row of the true top k survives, and at least k rows where
    there are k."""
    rng = np.random.default_rng(seed)
    candidates = np.stack([rng.permutation(1000)[:p] for _ in range(nq)])
    candidates[rng.random(candidates.shape) < 0.2] = -1
    true = rng.integers(0, levels, size=(nq, p)) / levels
    width = rng.choice([0.0, 1e-3, 0.1], size=(nq, p)) * rng.random((nq, p))
    lower = true - width * rng.random((nq, p))
    upper = true + width * rng.random((nq, p))
    kept = ranking.within_reach(candidates, lower, upper, k)
    for i in range(nq):
        found = candidates[i] >= 0
        order = np.lexsort((candidates[i][found], -true[i][found]))[:k]
        assert set(candidates[i][found][order]) <= set(kept[i][kept[i] >= 0])
        assert (kept[i] >= 0).sum() >= min(k, found.sum())


def test_within_reach_leaves_only_the_top_k_when_the_bounds_separate_them():
    """What rescoring saves: well-separated scores leave k of the k + margin candidates."""
    true = np.arange(30, dtype=float)[None, ::-1] / 30
    candidates = np.arange(30)[None]
    kept = ranking.within_reach(candidates, true - 1e-4, true + 1e-4, 10)
    np.testing.assert_array_equal(kept, candidates[:, :10])


def test_within_reach_of_a_graph_that_found_fewer_candidates_warns_nothing():
    """Missing candidates (-1, bounds -inf) made `inf - inf` a RuntimeWarning on every such
    search (a filtered graph search with a narrow beam)."""
    true = np.arange(20, dtype=float)[None, ::-1] / 20
    candidates = np.where(np.arange(20) < 15, np.arange(20), -1)[None]
    lower = np.where(candidates >= 0, true - 1e-4, -np.inf)
    upper = np.where(candidates >= 0, true + 1e-4, -np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = ranking.within_reach(candidates, lower, upper, 10)
    np.testing.assert_array_equal(kept, candidates[:, :10])


def test_a_mean_file_dropped_unclosed_gives_its_descriptor_back_without_a_warning():
    import gc

    file = MeanFile(8)
    file.append(np.ones((3, 8), dtype=np.float32))
    handle = file._file  # the open file under it, watched past the MeanFile's end
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # an unclosed file warns (ResourceWarning) when collected
        del file
        gc.collect()
    assert [w.message for w in caught] == []
    assert handle.closed  # closed when the MeanFile went, not whenever the file object goes
    closed = MeanFile(8)
    closed.close()
    closed.close()  # twice is harmless, as for a file
