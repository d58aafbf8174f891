"""A label-free task made of a collection's own texts (benchmarks/lodo_halves.py): each text's
first half retrieves its second; static weights chosen with it, and its weight by nested LODO."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from probembed.evaluation.datasets import ClassificationDataset, RetrievalDataset, StsDataset
from probembed.evaluation.lodo import (
    HALVES_MIN_WORDS,
    Scores,
    fold_choice,
    halves_choice,
    halves_static,
    halves_task,
    standardised,
    tune_halves_gamma,
)

LONG = [f"sentence {i} says something about the weather today" for i in range(12)]


def sts(first: list[str], second: list[str]) -> StsDataset:
    """Pairs with made-up scores (the task reads no score)."""
    return StsDataset("toy", "dev", first, second, np.zeros(len(first)))


def test_each_first_half_has_its_own_second_half_as_its_one_relevant_document() -> None:
    task = halves_task("toy", sts(LONG[:6], LONG[6:]))
    assert len(task.queries) == len(task.corpus) == 12
    texts = set()
    for query, judged in task.qrels.items():
        (document,) = judged
        assert judged[document] == 1
        first, second = task.queries[query].split(), task.corpus[document].split()
        assert len(second) - len(first) in (0, 1)  # cut at the middle word
        texts.add(" ".join(first + second))
    assert texts == set(LONG)  # every text once, cut at its middle word


def test_short_and_repeated_texts_give_no_query() -> None:
    short = "too short to cut"  # four words
    assert len(short.split()) < HALVES_MIN_WORDS
    task = halves_task("toy", sts([LONG[0], short, LONG[1]], [LONG[0], LONG[2], short]))
    assert len(task.queries) == 3  # LONG[0] twice, `short` twice: three distinct long texts


def test_a_retrieval_collection_is_its_corpus_and_a_classification_one_every_text() -> None:
    corpus = {"d1": LONG[0], "d2": LONG[1]}
    queries = {"q1": LONG[2]}
    retrieval = RetrievalDataset("toy", "test", corpus, queries, {"q1": {"d1": 1}})
    wholes = {q + " " + d for q, d in zip(*(t.values() for t in _halves(retrieval)), strict=True)}
    assert wholes == {LONG[0], LONG[1]}  # the queries are not the collection
    labelled = ClassificationDataset("toy", "test", LONG[:2], ["a", "b"], LONG[2:4], ["a", "b"])
    assert len(halves_task("toy", labelled).queries) == 4


def _halves(dataset) -> tuple[dict[str, str], dict[str, str]]:
    """(queries, corpus) of the dataset's halves task, in query order."""
    task = halves_task("toy", dataset)
    return task.queries, {q: task.corpus[next(iter(task.qrels[q]))] for q in task.queries}


def test_a_large_collection_is_sampled_the_same_way_every_time() -> None:
    many = [f"text number {i} is long enough to cut" for i in range(50)]
    first = halves_task("toy", sts(many[:25], many[25:]), texts=10, seed=3)
    again = halves_task("toy", sts(many[:25], many[25:]), texts=10, seed=3)
    other = halves_task("toy", sts(many[:25], many[25:]), texts=10, seed=4)
    assert len(first.queries) == 10 and first.queries == again.queries
    assert first.queries != other.queries


def test_a_collection_without_two_long_texts_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="toy: 1 texts of 6 words or more"):
        halves_task("toy", sts([LONG[0]], ["short one"]))


#: Figures in thousandths up to 1,000 (no subnormal spread: tuning figures are percentages).
FIGURES = st.lists(st.integers(-(10**6), 10**6).map(lambda x: x / 1000), min_size=2, max_size=30)


@given(FIGURES)
def test_standardised_values_have_mean_0_and_spread_1_or_are_all_0(values) -> None:
    out = standardised(values)
    if np.ptp(values) == 0.0:
        assert not out.any()
    else:
        # float64, steps of 1e-3 against a range of at most 2e3: exact to ~1e-12 relative
        assert abs(out.mean()) < 1e-6 and out.std() == pytest.approx(1.0, rel=1e-6)
        assert np.array_equal(np.argsort(out, kind="stable"), np.argsort(values, kind="stable"))


def test_gamma_0_is_the_tuning_mean_and_inf_the_halves_figure_alone() -> None:
    dev = {"a": [0.8, 0.7, 0.1], "b": [0.6, 0.6, 0.2], "out": [0.0, 0.0, 9.0]}
    halves = [0.10, 0.30, 0.20]
    assert halves_choice(dev, "out", halves, 0.0) == fold_choice(dev, "out") == 0
    assert halves_choice(dev, "out", halves, math.inf) == 1
    # means 0.70, 0.65, 0.15 standardise to about 0.80, 0.61, -1.41; halves to -1.22, 1.22, 0
    assert halves_choice(dev, "out", halves, 0.05) == 0
    assert halves_choice(dev, "out", halves, 1.0) == 1


class Tabled(Scores):
    """Figures by the static weights a setting gives: (dataset, role) -> {weights: figure};
    every (dataset, role) read is recorded."""

    def __init__(self, table: dict[tuple[str, str], dict[tuple[float, ...], float]]) -> None:
        super().__init__({key: None for key in table})
        self.table = table
        self.read: set[tuple[str, str]] = set()

    def figure(self, name, role, setting):
        """The tabled figure of the setting's weights."""
        self.read.add((name, role))
        return self.table[name, role][setting(None).fusion.weights]


def test_gamma_is_tuned_by_nested_lodo_without_reading_the_left_out_dataset() -> None:
    # two members, grid step 1: (0, 1) then (1, 0)
    first, second = (0.0, 1.0), (1.0, 0.0)
    tune = {"a": (0.6, 0.5), "b": (0.6, 0.5), "c": (0.1, 0.9), "out": (9.0, -9.0)}
    # each tuning collection's halves task points at the weights its own tuning split prefers
    halves = {"a": (0.9, 0.1), "b": (0.9, 0.1), "c": (0.1, 0.9), "out": (0.0, 1.0)}
    table = {(n, "tune"): {first: f[0], second: f[1]} for n, f in tune.items()}
    table |= {(n, "halves-tune"): {first: f[0], second: f[1]} for n, f in halves.items()}
    table[("out", "halves-test")] = {first: 0.2, second: 0.8}
    scores = Tabled(table)
    gamma, curve = tune_halves_gamma(scores, 2, 1.0, "out", (0.0, 4.0))
    # gamma 0: a <- b, c: means 0.35 / 0.7 pick second (0.5); b alike; c <- a, b: first (0.1)
    # gamma 4: each follows its own halves task: a, b first (0.6), c second (0.9)
    assert curve == {"a": [0.5, 0.6], "b": [0.5, 0.6], "c": [0.1, 0.9]}
    assert gamma == 4.0
    assert not {k for k in scores.read if k[0] == "out"}
    fold = halves_static(scores, 2, 1.0, "out", "halves-test", gamma)
    assert fold.fusion.weights == second  # "out"'s own halves task: 0.8 against 0.2
    assert ("out", "tune") not in scores.read
