"""Tuning when the task a collection serves is known (benchmarks/lodo_task.py): each other
dataset's share of a fold's tuning mean, and tuning by those shares."""

import numpy as np
import pytest

from probembed.evaluation.lodo import Scores, fold_choice, same_task, task_shares

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
