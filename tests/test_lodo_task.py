"""Tuning when the task a collection serves is known (benchmarks/lodo_task.py) or how alike
its texts are (benchmarks/lodo_similar.py): each other dataset's share of a fold's tuning
mean, and tuning by those shares."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from probembed.evaluation.lodo import (
    Scores,
    collection_similarity,
    fold_choice,
    same_task,
    similar_static,
    similarity_shares,
    task_shares,
    tune_similarity_tau,
)

TASKS = {
    "stsb": "sts",
    "sick": "sts",
    "scifact": "retrieval",
    "mr": "classification",
    "cr": "classification",
    "sst2": "classification",
}


def test_by_task_tunes_on_the_same_task_alone() -> None:
    assert task_shares(TASKS, "stsb", 1.0) == {
        "sick": 1.0,
        "scifact": 0.0,
        "mr": 0.0,
        "cr": 0.0,
        "sst2": 0.0,
    }
    shares = task_shares(TASKS, "mr", 1.0)
    assert shares["cr"] == shares["sst2"] == 0.5 and shares["stsb"] == shares["sick"] == 0.0
    assert same_task(TASKS, "mr") == ["cr", "sst2"]


def test_a_task_of_one_dataset_falls_back_to_all_the_others() -> None:
    assert same_task(TASKS, "scifact") == []
    for share in (1.0, 0.5, 0.0):
        assert task_shares(TASKS, "scifact", share) == {n: 0.2 for n in TASKS if n != "scifact"}


def test_pooled_is_the_two_tuning_means_half_and_half() -> None:
    rng = np.random.default_rng(0)
    figures = {n: rng.random() for n in TASKS}
    pooled = task_shares(TASKS, "cr", 0.5)
    assert sum(pooled.values()) == pytest.approx(1.0, abs=1e-12)
    same = np.mean([figures["mr"], figures["sst2"]])
    everything = np.mean([figures[n] for n in TASKS if n != "cr"])
    got = sum(share * figures[n] for n, share in pooled.items())
    assert got == pytest.approx(0.5 * same + 0.5 * everything, abs=1e-12)
    assert task_shares(TASKS, "cr", 0.0) == {n: 0.2 for n in TASKS if n != "cr"}


def test_bad_shares_and_datasets_are_named() -> None:
    with pytest.raises(ValueError, match=r"same_share must be a share in \[0, 1\], got 1.5"):
        task_shares(TASKS, "stsb", 1.5)
    with pytest.raises(ValueError, match="'nli' is not one of the datasets: stsb, sick"):
        task_shares(TASKS, "nli", 1.0)
    with pytest.raises(ValueError, match="leaving out 'stsb' leaves no dataset"):
        task_shares({"stsb": "sts"}, "stsb", 1.0)
    with pytest.raises(ValueError, match="no tuning share given for b, c"):
        fold_choice({"a": [1.0], "b": [1.0], "c": [1.0]}, None, {"a": 1.0})


class Tabled(Scores):
    """Tuning figures from a table: dataset -> one figure per setting (a setting returns its
    index when called); every dataset read is recorded."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        super().__init__({(name, "tune"): None for name in table})
        self.table = table
        self.read: set[str] = set()

    def figure(self, name, role, setting):
        """The tabled figure of the setting."""
        self.read.add(name)
        return self.table[name][setting(None)]


def test_tuning_by_shares_weights_the_figures_and_reads_no_dataset_of_share_zero() -> None:
    settings = [lambda _: 0, lambda _: 1]
    scores = Tabled({"a": [0.9, 0.1], "b": [0.1, 0.5], "c": [0.2, 0.6], "d": [5.0, -5.0]})
    # all alike (without d): means 0.4 against 0.4, the first kept; b and c alone: setting 1
    assert scores.choose(settings, "d") == 0
    scores.read.clear()
    by_task = {"a": 0.0, "b": 0.5, "c": 0.5}
    assert scores.choose(settings, "d", shares=by_task) == 1
    assert scores.read == {"b", "c"}
    assert scores.tuning_mean(settings[1], "d", by_task) == pytest.approx(0.55, abs=1e-12)
    # a share of a over the half makes it decide
    assert scores.choose(settings, "d", shares={"a": 0.6, "b": 0.2, "c": 0.2}) == 0
    # with no shares the tuning mean is the plain mean over every dataset but the left-out
    assert scores.tuning_mean(settings[0], "d") == np.mean([0.9, 0.1, 0.2])


NEARNESS = st.dictionaries(
    st.sampled_from(["stsb", "sick", "scifact", "mr", "cr", "sst2", "banking77"]),
    st.floats(-1.0, 1.0),
    min_size=2,
)


@given(NEARNESS, st.floats(1e-3, 1e3) | st.just(math.inf))
def test_similarity_shares_sum_to_one_over_the_others(similarity, tau) -> None:
    left_out = next(iter(similarity))
    shares = similarity_shares(similarity, left_out, tau)
    assert left_out not in shares and set(shares) == set(similarity) - {left_out}
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(share >= 0.0 for share in shares.values())
    # more alike never counts for less
    ranked = sorted(shares, key=lambda n: similarity[n])
    assert all(shares[a] <= shares[b] for a, b in itertools.pairwise(ranked))


@given(NEARNESS)
def test_similarity_shares_at_tau_inf_are_all_alike(similarity) -> None:
    left_out = next(iter(similarity))
    shares = similarity_shares(similarity, left_out, math.inf)
    assert set(shares.values()) == {1.0 / (len(similarity) - 1)}


@given(NEARNESS)
def test_a_small_tau_puts_every_share_on_the_most_similar(similarity) -> None:
    left_out = next(iter(similarity))
    others = {n: s for n, s in similarity.items() if n != left_out}
    top = max(others.values())
    assume(all(s == top or s < top - 0.01 for s in others.values()))  # no near-tie
    shares = similarity_shares(similarity, left_out, 1e-4)
    nearest = [n for n, s in others.items() if s == top]
    for name, share in shares.items():
        expected = 1.0 / len(nearest) if name in nearest else 0.0
        assert share == pytest.approx(expected, abs=1e-9)


def test_the_left_out_one_gets_no_share_however_similar() -> None:
    shares = similarity_shares({"stsb": 1.0, "sick": 0.9, "mr": 0.2}, "stsb", 0.1)
    assert shares == pytest.approx({"sick": 1 / (1 + math.exp(-7)), "mr": 1 / (1 + math.exp(7))})


def test_bad_tau_and_similarities_are_named() -> None:
    for tau in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match=f"tau must be a temperature above 0 .*, got {tau}"):
            similarity_shares({"a": 0.5, "b": 0.4}, "a", tau)
    with pytest.raises(ValueError, match="the similarity of 'b' to 'a' is nan, not finite"):
        similarity_shares({"a": 0.5, "b": math.nan}, "a", 1.0)
    with pytest.raises(ValueError, match="leaving out 'a' leaves no dataset"):
        similarity_shares({"a": 0.5}, "a", 1.0)


def test_collection_similarity_is_the_members_mean_centre_cosine() -> None:
    first = [np.array([1.0, 0.0]), np.array([0.0, 2.0, 0.0])]
    second = [np.array([1.0, 1.0]), np.array([0.0, -3.0, 0.0])]
    assert collection_similarity(first, second) == pytest.approx((math.sqrt(0.5) - 1.0) / 2)
    with pytest.raises(ValueError, match="member 1's centre is zero"):
        collection_similarity(first, [second[0], np.zeros(3)])
    with pytest.raises(ValueError, match="centres of 2 and 1 members"):
        collection_similarity(first, second[:1])


class Weighted(Tabled):
    """Tuning figures by the static weights a setting gives: dataset -> {weights: figure}."""

    def figure(self, name, role, setting):
        """The tabled figure of the setting's weights (the tuning role alone exists)."""
        assert role == "tune"
        self.read.add(name)
        return self.table[name][setting(None).fusion.weights]


def test_tau_is_tuned_by_nested_lodo_without_reading_the_left_out_dataset() -> None:
    # two members, grid step 1: (0, 1) or (1, 0); "out" is left out and would decide alone
    first, second = (0.0, 1.0), (1.0, 0.0)
    figures = {"a": (0.5, 0.9), "b": (0.2, 0.9), "c": (0.9, 0.0), "out": (9.0, -9.0)}
    scores = Weighted({n: {first: f[0], second: f[1]} for n, f in figures.items()})
    # a and b look alike; c looks like neither; every tuning collection looks like "out"'s
    similarity = {
        "a": {"a": 1.0, "b": 0.9, "c": 0.1, "out": 0.9},
        "b": {"a": 0.9, "b": 1.0, "c": 0.1, "out": 0.9},
        "c": {"a": 0.1, "b": 0.1, "c": 1.0, "out": 0.9},
    }
    tau, curve = tune_similarity_tau(scores, 2, 1.0, "out", similarity, (math.inf, 0.01))
    # all alike: a <- b, c picks the first weights (0.55 > 0.45), b <- a, c too, c <- a, b the
    # second (0.9 > 0.35); nearest alone: a <- b and b <- a pick the second, c keeps it
    assert curve == {"a": [0.5, 0.9], "b": [0.2, 0.9], "c": [0.0, 0.0]}
    assert tau == 0.01
    assert "out" not in scores.read
    # the fold's own weights, with the tuned tau, follow the collection nearest "out"'s
    near_c = {"a": 0.0, "b": 0.0, "c": 1.0}
    assert similar_static(scores, 2, 1.0, "out", near_c, 0.01).fusion.weights == first
    assert similar_static(scores, 2, 1.0, "out", near_c, math.inf).fusion.weights == second
