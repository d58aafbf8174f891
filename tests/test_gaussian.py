"""The Gaussian batch type: validation, normalisation, slicing, concatenation, persistence."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.fusion import Fused
from probembed.gaussian import Gaussian, decimals


def random_gaussian(seed: int, n: int = 5, d: int = 7) -> Gaussian:
    rng = np.random.default_rng(seed)
    return Gaussian(rng.normal(size=(n, d)), rng.uniform(0, 2, size=(n, d)))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(1e-3, 1e3))
def test_normalize_gives_unit_means_and_rescales_variance(seed, scale):
    g = random_gaussian(seed)
    scaled = Gaussian(g.mean * scale, g.var)
    unit = scaled.normalize()
    norms = np.linalg.norm(scaled.mean.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(np.linalg.norm(unit.mean, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(unit.var, scaled.var / norms**2, rtol=1e-4)
    assert (unit.var >= 0).all()


def test_values_are_validated_with_the_offending_input_named():
    with pytest.raises(ValueError, match="var must be >= 0"):
        Gaussian(np.zeros((2, 3)), -np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"same shape, got \(2, 3\) and \(2, 4\)"):
        Gaussian(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="mean has a non-finite value"):
        Gaussian(np.array([[0.0, np.nan]]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="2-D"):
        Gaussian(np.zeros(3), np.zeros(3))


def test_arrays_are_float32_and_contiguous():
    g = Gaussian(np.ones((2, 3), dtype=np.float64), np.ones((2, 3), dtype=np.float64))
    assert g.mean.dtype == g.var.dtype == np.float32
    assert g.mean.flags.c_contiguous


def test_slicing_keeps_the_batch_axis():
    g = random_gaussian(0)
    assert len(g[1]) == 1 and len(g[-1]) == 1 and len(g[1:4]) == 3
    np.testing.assert_array_equal(g[[0, 2]].var, g.var[[0, 2]])
    np.testing.assert_array_equal(g[-1].mean, g.mean[-1:])


def test_concat_stacks_rows_or_joins_dimensions():
    a, b = random_gaussian(1), random_gaussian(2, n=5, d=3)
    rows = Gaussian.concat([a, a[:2]])
    assert (len(rows), rows.dim) == (7, 7)
    dims = Gaussian.concat([a, b], axis=1)
    assert (len(dims), dims.dim) == (5, 10)
    np.testing.assert_array_equal(dims.var[:, 7:], b.var)
    with pytest.raises(ValueError, match="at least one"):
        Gaussian.concat([])


def test_total_variance_and_deterministic():
    g = Gaussian.deterministic(np.ones((3, 4)))
    assert (g.var == 0).all() and (g.total_variance() == 0).all()


def test_save_load_round_trips_bit_exactly(tmp_path):
    g = random_gaussian(3)
    g.save(tmp_path / "g.npz")
    loaded = Gaussian.load(tmp_path / "g.npz")
    assert np.array_equal(loaded.mean, g.mean) and np.array_equal(loaded.var, g.var)
    assert not list(tmp_path.glob("*.tmp"))


def test_loading_something_else_is_a_clear_error(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="is not a saved Gaussian"):
        Gaussian.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="is not a saved Gaussian"):
        Gaussian.load(tmp_path / "other.npz")


@pytest.mark.parametrize("row", [3, 5, -4])
def test_a_row_index_out_of_range_is_an_index_error(row):
    g = Gaussian(np.ones((3, 4)), np.ones((3, 4)))
    with pytest.raises(IndexError, match=f"row {row} is out of range for 3 Gaussians"):
        g[row]
    assert len(g[-3]) == len(g[2]) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1))
def test_decimals_read_back_as_the_same_float32_in_no_more_digits(values):
    """Each float32 comes back as a Python float that is the same float32 and whose repr is
    no longer than the float64 widening's (0.6, not 0.6000000238418579)."""
    stored = np.asarray(values, dtype=np.float32)
    shown = decimals(stored)
    assert np.array_equal(np.asarray(shown, dtype=np.float32), stored)
    widened = stored.astype(np.float64).tolist()
    assert all(len(repr(a)) <= len(repr(b)) for a, b in zip(shown, widened, strict=True))


def test_decimals_keep_the_shape_of_what_they_are_given():
    assert decimals(np.float32([[0.6], [0.1]])) == [[0.6], [0.1]]
    assert decimals(np.float32(0.3)) == 0.3


def test_a_texts_weights_read_as_the_prior_says_them():
    """explain() showed a prior's 0.6, normalised in float64, as 0.5999999999999999."""
    g = Gaussian(np.ones((1, 3)), np.ones((1, 3)))
    # the default pipeline's weights for any text (prior 0.6, 0.2, 0.2), as its fusion gave
    # them before explain() read them to 15 digits
    weights = np.array([[0.5999999999999999, 0.19999999999999998, 0.19999999999999998]])
    fused = Fused(g, weights, ("a", "b", "c"))
    assert fused.explain(0) == {"a": 0.6, "b": 0.2, "c": 0.2}
