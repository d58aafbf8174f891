"""The LODO headroom measurement: which static weights each kind of data picks, and the paired
bootstrap interval that says how large a test-split difference is resolved."""

import numpy as np
import pytest

from probembed.evaluation.datasets import ClassificationDataset, StsDataset
from probembed.evaluation.harness import Outcome
from probembed.evaluation.lodo import Scores, static_headroom, static_methods
from probembed.evaluation.metrics import probe_accuracy, probe_correct, spearman
from probembed.evaluation.paired import paired_difference


def classification(n: int) -> ClassificationDataset:
    """A test split of n texts (the labels are not read by paired_difference)."""
    texts = [f"t{i}" for i in range(n)]
    return ClassificationDataset("toy", "test", texts, ["x"] * n, texts, ["x"] * n)


def test_a_classification_difference_is_the_mean_gain_in_a_seeded_interval() -> None:
    rng = np.random.default_rng(1)
    base = rng.random(400) < 0.7
    other = base.copy()
    other[np.flatnonzero(~base)[:20]] = True  # 20 more right of 400: +0.05
    dataset = classification(400)
    a, b = (Outcome({}, {"correct": x.astype(float)}) for x in (base, other))
    got = paired_difference(dataset, a, b)
    assert got["difference"] == pytest.approx(20 / 400, abs=1e-15)  # a mean of 400 0/1 values
    assert 0 < got["low"] <= got["difference"] <= got["high"]  # only gains: never below 0
    assert paired_difference(dataset, a, b) == got  # seeded
    same = paired_difference(dataset, a, a)
    assert same == {"difference": 0.0, "low": 0.0, "high": 0.0}


def test_an_sts_difference_recomputes_both_spearmans_on_resampled_pairs() -> None:
    rng = np.random.default_rng(2)
    gold = rng.random(300)
    noisy, better = gold + rng.normal(0, 0.5, 300), gold + rng.normal(0, 0.1, 300)
    dataset = StsDataset("toy", "test", [""] * 300, [""] * 300, gold)
    a, b = Outcome({}, {"pred": noisy}), Outcome({}, {"pred": better})
    got = paired_difference(dataset, a, b, resamples=500)
    assert got["difference"] == pytest.approx(spearman(better, gold) - spearman(noisy, gold))
    assert 0 < got["low"] < got["difference"] < got["high"]
    reverse = paired_difference(dataset, b, a, resamples=500)
    assert reverse["difference"] == pytest.approx(-got["difference"])


class TableScores(Scores):
    """Scores read from a table (dataset, role) -> one figure per grid setting, in grid order."""

    def __init__(self, table: dict[tuple[str, str], list[float]], step: float) -> None:
        super().__init__({key: None for key in table})
        self.index = {m.fusion.weights: i for i, m in enumerate(static_methods(2, step))}
        self.table = table

    def figure(self, name, role, setting):
        """The tabled figure of the setting's weights."""
        return self.table[name, role][self.index[setting(None).fusion.weights]]


def test_headroom_chooses_on_the_others_on_its_own_tuning_split_and_on_its_test() -> None:
    # grid (step 0.5, two members): (0, 1), (0.5, 0.5), (1, 0)
    table = {
        ("a", "tune"): [0.1, 0.2, 0.9],
        ("a", "test"): [0.8, 0.3, 0.2],
        ("b", "tune"): [0.5, 0.9, 0.1],
        ("b", "test"): [0.0, 0.0, 0.0],
        ("c", "tune"): [0.5, 0.8, 0.4],
        ("c", "test"): [0.0, 0.0, 0.0],
    }
    chosen = static_headroom(TableScores(table, 0.5), "a", 2, 0.5)
    weights = {how: m.fusion.weights for how, m in chosen.items()}
    assert weights == {"lodo": (0.5, 0.5), "in domain": (1.0, 0.0), "test oracle": (0.0, 1.0)}


def test_probe_correct_is_what_probe_accuracy_averages() -> None:
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(3, 8))
    labels = rng.integers(0, 3, 300)
    x = centers[labels] + rng.normal(0, 1.5, (300, 8))
    correct = probe_correct(x[:200], labels[:200], x[200:], labels[200:])
    assert correct.dtype == bool and correct.shape == (100,)
    assert 0 < correct.mean() < 1  # overlapping classes: some right, some wrong
    assert probe_accuracy(x[:200], labels[:200], x[200:], labels[200:]) == correct.mean()


def test_a_weaker_probe_penalty_fits_what_the_default_one_under_fits() -> None:
    # half the texts in class 0, five in each of ten others, on features of norm ~0.05: C = 1
    # shrinks the weights until the (unpenalised) intercept labels every text 0; C = 1000 all
    # but removes the penalty and fits them all
    rng = np.random.default_rng(4)
    labels = np.concatenate([np.zeros(50, dtype=int), np.repeat(np.arange(1, 11), 5)])
    x = (np.eye(11)[labels] + rng.normal(0, 0.05, (100, 11))) * 0.05
    strict = probe_correct(x, labels, x, labels)
    assert np.array_equal(strict, labels == 0)
    assert probe_correct(x, labels, x, labels, inverse_penalty=1000.0).all()
