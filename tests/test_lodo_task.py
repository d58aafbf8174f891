"""Tuning when the task a collection serves is known (benchmarks/lodo_task.py) or how alike
its texts are (benchmarks/lodo_similar.py): each other dataset's share of a fold's tuning
mean, and tuning by those shares; and static weights chosen to stay above the best single
member (benchmarks/lodo_regret.py)."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from probembed.evaluation.harness import Method
from probembed.evaluation.lodo import (
    Scores,
    best_singles,
    collection_similarity,
    constrained_choice,
    fold_choice,
    fold_means,
    least_regret_static_uec,
    minimax_choice,
    regret_choice,
    same_task,
    similar_static,
    similarity_shares,
    single_margins,
    task_shares,
    tune_similarity_tau,
)
from probembed.pipeline import FusionConfig

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


#: Tuning figures of a few settings on a few datasets (tenths, so ties happen), each dataset's
#: best single member's figure, and one of the datasets to leave out (or None).
FOLDS = st.integers(1, 6).flatmap(
    lambda settings: st.tuples(
        st.dictionaries(
            st.sampled_from(["a", "b", "c", "d"]),
            st.lists(
                st.integers(0, 10).map(lambda x: x / 10), min_size=settings, max_size=settings
            ),
            min_size=2,
        ),
        st.lists(st.integers(0, 10).map(lambda x: x / 10), min_size=4, max_size=4),
    )
)


def fold_of(drawn) -> tuple[dict[str, list[float]], dict[str, float], str]:
    """(figures, best single member per dataset, the dataset left out) from a FOLDS draw."""
    dev, singles = drawn
    best = {name: singles[i] for i, name in enumerate(sorted(dev))}
    return dev, best, sorted(dev)[0]


def worst(dev, best, left_out) -> np.ndarray:
    """Each setting's smallest margin over the best single member: its regret, negated."""
    return np.min(list(single_margins(dev, best, left_out).values()), axis=0)


@given(FOLDS)
def test_minimax_never_chooses_a_lower_worst_margin_than_another_setting(drawn) -> None:
    dev, best, left_out = fold_of(drawn)
    margins = worst(dev, best, left_out)
    j = minimax_choice(dev, best, left_out)
    assert margins[j] >= margins.max() - 1e-12
    # among the settings of that worst margin, the best tuning mean; then the first
    mean = fold_means(dev, left_out)
    tied = np.flatnonzero(margins >= margins.max() - 1e-12)
    assert mean[j] >= mean[tied].max() - 1e-12
    assert j == min(i for i in tied if mean[i] >= mean[tied].max() - 1e-12)


@given(FOLDS)
def test_constrained_is_the_mean_choice_where_that_clears_every_best_single(drawn) -> None:
    dev, best, left_out = fold_of(drawn)
    plain = fold_choice(dev, left_out)
    assume(worst(dev, best, left_out)[plain] >= 0.0)
    assert constrained_choice(dev, best, left_out) == (plain, False)


@given(FOLDS)
def test_constrained_keeps_to_the_settings_that_clear_every_best_single(drawn) -> None:
    dev, best, left_out = fold_of(drawn)
    margins, mean = worst(dev, best, left_out), fold_means(dev, left_out)
    j, fell_back = constrained_choice(dev, best, left_out)
    clear = margins >= -1e-12
    if not clear.any():
        assert fell_back and j == minimax_choice(dev, best, left_out)
        return
    assert not fell_back and clear[j]
    assert mean[j] >= mean[clear].max() - 1e-12


def test_the_two_objectives_against_the_mean_on_a_worked_fold() -> None:
    # settings x, y, z on a, b, c; "out" is left out (read, it would pick z)
    dev = {"a": [0.80, 0.95, 0.85], "b": [0.60, 0.80, 0.71], "c": [0.90, 0.59, 0.60]}
    dev["out"] = [0.0, 0.0, 9.0]
    best = {"a": 0.8, "b": 0.7, "c": 0.6, "out": 9.0}
    # means 0.767, 0.780, 0.720; worst margins -0.10, -0.01, 0.00: z alone clears all three
    assert fold_choice(dev, "out") == 1
    assert minimax_choice(dev, best, "out") == 2
    assert constrained_choice(dev, best, "out") == (2, False)
    # c's best single at 0.55: y and z clear all three, y by more and with the better mean
    best["c"] = 0.55
    assert constrained_choice(dev, best, "out") == (1, False)
    assert regret_choice(dev, best, "out", "minimax") == (1, False)
    # c's best single at 0.95: nothing clears it; x is 0.10 below on b, y and z 0.35-0.36 on c
    best["c"] = 0.95
    assert constrained_choice(dev, best, "out") == (0, True)
    assert regret_choice(dev, best, "out", "constrained") == (0, True)


def test_bad_regret_inputs_are_named() -> None:
    dev = {"a": [0.5, 0.6], "b": [0.4, 0.3]}
    with pytest.raises(ValueError, match="no best single member's figure given for b"):
        minimax_choice(dev, {"a": 0.5}, None)
    with pytest.raises(ValueError, match="the best single member's figure on a is nan"):
        constrained_choice(dev, {"a": math.nan, "b": 0.4}, None)
    with pytest.raises(ValueError, match="setting 1 scores NaN on b's tuning split"):
        minimax_choice({"a": [0.5, 0.6], "b": [0.4, math.nan]}, {"a": 0.5, "b": 0.4}, None)
    with pytest.raises(
        ValueError, match="objective must be one of minimax, constrained, got 'mean'"
    ):
        regret_choice(dev, {"a": 0.5, "b": 0.4}, None, "mean")


class Fused(Tabled):
    """Tuning figures by a setting's weights, or by uec's prior (every (T, β) alike)."""

    def figure(self, name, role, setting):
        """The tabled figure of the setting's weights or prior (the tuning role alone)."""
        assert role == "tune"
        self.read.add(name)
        fusion = setting(None).fusion
        return self.table[name][fusion.weights or fusion.prior]


def test_least_regret_weights_never_read_the_left_out_dataset() -> None:
    # two members, grid step 0.5: (0, 1), (0.5, 0.5), (1, 0); each member alone is a vertex
    grid = [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)]
    figures = {
        "a": (0.70, 0.90, 0.80),
        "b": (0.66, 0.62, 0.60),
        "c": (0.50, 0.80, 0.90),
        # read, "out" would decide: its best single (9) puts the others 9 to 18 below it
        "out": (9.0, 0.0, -9.0),
    }
    scores = Fused({n: dict(zip(grid, f, strict=True)) for n, f in figures.items()})
    singles = [Method(f"single:{w}", FusionConfig("weighted", weights=w)) for w in grid[::2]]
    best = best_singles(scores, singles, "out")
    assert best == {"a": 0.80, "b": 0.66, "c": 0.90}
    # worst margins: (0, 1) -0.40, (0.5, 0.5) -0.10, (1, 0) -0.06; means 0.62, 0.773, 0.767
    static, uec, fell_back = least_regret_static_uec(scores, 2, 0.5, "out", best, "minimax")
    assert static.fusion.weights == (1.0, 0.0)
    assert uec.fusion.prior == (1.0, 0.0) and uec.fusion.method == "uec"
    assert fell_back == {"static": False, "uec": False}
    static, _, fell_back = least_regret_static_uec(scores, 2, 0.5, "out", best, "constrained")
    assert static.fusion.weights == (1.0, 0.0)
    assert fell_back == {"static": True, "uec": True}
    assert "out" not in scores.read
