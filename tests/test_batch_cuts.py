"""Cutting length-sorted texts into model calls: the cheapest cut, and every text once."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.encoders.base import cheapest_cuts, length_sorted_batches


def cost(groups: list[tuple[int, int]], lengths: list[int], call_cost: float) -> float:
    """What the cut costs: a call per group plus each group's size times its longest text."""
    return sum(call_cost + (stop - start) * lengths[start] for start, stop in groups)


def every_cut(n: int, size: int):
    """All cuts of n items into consecutive groups of at most `size` (brute force)."""
    for bars in itertools.product((False, True), repeat=max(n - 1, 0)):
        edges = [0, *(i + 1 for i, bar in enumerate(bars) if bar), n]
        groups = list(itertools.pairwise(edges))
        if all(stop - start <= size for start, stop in groups):
            yield groups


lengths_strategy = st.lists(st.integers(1, 400), min_size=1, max_size=9).map(
    lambda xs: sorted(xs, reverse=True)
)


@settings(max_examples=200, deadline=None)
@given(lengths_strategy, st.integers(1, 9), st.sampled_from([0.0, 1.0, 50.0, 300.0, 5000.0]))
def test_the_cut_is_the_cheapest_of_all_cuts(lengths, size, call_cost):
    groups = cheapest_cuts(lengths, size, call_cost)
    assert groups[0][0] == 0 and groups[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
    assert all(0 < stop - start <= size for start, stop in groups)
    if call_cost > 0:
        best = min(cost(g, lengths, call_cost) for g in every_cut(len(lengths), size))
        # integer lengths and costs: sums of a few hundred terms are exact in float64
        assert cost(groups, lengths, call_cost) == best
    else:  # no call cost: full batches, as before
        assert [stop - start for start, stop in groups[:-1]] == [size] * (len(groups) - 1)


def test_equal_lengths_keep_full_batches_and_a_jump_is_cut():
    assert len(cheapest_cuts([10] * 70, 32, 300.0)) == 3  # no padding to save: fewest calls
    # one long text among short ones: padding 9 texts to 1,000 costs more than a call
    assert cheapest_cuts([1000] + [20] * 9, 32, 300.0) == [(0, 1), (1, 10)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=60), st.integers(1, 16))
def test_every_text_comes_once_at_its_own_position(texts, size):
    seen = []
    for positions, chunk in length_sorted_batches(texts, size, 300.0):
        assert len(chunk) <= size
        assert chunk == [texts[i] for i in positions]
        seen.extend(positions.tolist())
    assert sorted(seen) == list(range(len(texts)))
    assert np.all(np.diff([len(texts[i]) for i in seen]) <= 0)  # longest first
