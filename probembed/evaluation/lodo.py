"""Leave-one-dataset-out: tune on the others' dev splits, report on the left-out test split.

A new domain is the test an adaptive ensemble has to pass. Every dataset gives a tuning split
(STS dev, SciFact train qrels, a seeded fifth of a classification train split) and a test split;
a method's setting for fold D is chosen by the mean primary metric over the tuning splits of
every dataset but D, so nothing of D is seen by any tuning step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probembed.evaluation.datasets import ClassificationDataset, Dataset, load_dataset

#: Classification texts per probe split (fit, held-out, test; seeded subsamples): enough for a
#: stable linear probe, few enough that seven datasets times four models encode in minutes on
#: two cores (SST-2 alone has 67,349 train phrases).
MAX_PROBE_TEXTS = 2000
#: Share of a classification train split held out as its tuning split.
TUNE_FRACTION = 0.2
SEED = 0

#: name -> (path under the datasets dir, tuning split, test split); classification tunes on
#: part of train ("train" here) and tests on test.
LODO_DATASETS: dict[str, tuple[str, str, str]] = {
    "stsb": ("sts/stsb", "dev", "test"),
    "sick": ("sts/sick", "dev", "test"),
    "scifact": ("retrieval/scifact", "train", "test"),
    "mr": ("classification/mr", "train", "test"),
    "cr": ("classification/cr", "train", "test"),
    "sst2": ("classification/sst2", "train", "test"),
    "banking77": ("classification/banking77", "train", "test"),
}


@dataclass(frozen=True)
class Task:
    """One dataset's tuning split and test split."""

    name: str
    tune: Dataset
    test: Dataset


def _subsample(
    texts: Sequence[str], labels: Sequence[str], n: int, rng: np.random.Generator
) -> tuple[list[str], list[str]]:
    """At most n (text, label) rows, seeded, in their original order."""
    if len(texts) <= n:
        return list(texts), list(labels)
    keep = np.sort(rng.choice(len(texts), n, replace=False))
    return [texts[i] for i in keep], [labels[i] for i in keep]


def classification_splits(
    data: ClassificationDataset, max_texts: int = MAX_PROBE_TEXTS, seed: int = SEED
) -> tuple[ClassificationDataset, ClassificationDataset]:
    """(tuning, test): one probe-fitting sample of train; tuning scores it on a held-out fifth."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.train_texts))
    cut = round(len(order) * TUNE_FRACTION)
    held, fit = np.sort(order[:cut]), np.sort(order[cut:])
    fit_texts = [data.train_texts[i] for i in fit]
    fit_labels = [data.train_labels[i] for i in fit]
    tune_fit = _subsample(fit_texts, fit_labels, max_texts, rng)
    tune_eval = _subsample(
        [data.train_texts[i] for i in held],
        [data.train_labels[i] for i in held],
        max_texts // 2,
        rng,
    )
    tune = ClassificationDataset(data.name, "train-heldout", *tune_fit, *tune_eval)
    test_eval = _subsample(data.test_texts, data.test_labels, max_texts, rng)
    test = ClassificationDataset(data.name, data.split, *tune_fit, *test_eval)
    return tune, test


def load_tasks(data_dir: Path, names: Sequence[str] | None = None) -> dict[str, Task]:
    """The LODO tasks found under the datasets directory, in LODO_DATASETS order."""
    tasks = {}
    for name in names or LODO_DATASETS:
        relative, tune_split, test_split = LODO_DATASETS[name]
        path = data_dir / relative
        test = load_dataset(path, test_split)
        if isinstance(test, ClassificationDataset):
            tune, test = classification_splits(test)
        else:
            tune = load_dataset(path, tune_split)
        tasks[name] = Task(name, tune, test)
    return tasks


def fold_choice(dev: Mapping[str, Sequence[float]], left_out: str) -> int:
    """Index of the setting with the best mean tuning figure over every dataset but left_out.

    `dev[name][i]` is setting i's primary metric on that dataset's tuning split; the first
    setting wins ties, so grids should list simpler settings first.
    """
    others = [np.asarray(v, dtype=np.float64) for k, v in dev.items() if k != left_out]
    if not others:
        raise ValueError(f"leaving out {left_out!r} leaves no dataset to tune on")
    mean = np.mean(others, axis=0)
    return int(np.flatnonzero(mean >= mean.max() - 1e-12)[0])
