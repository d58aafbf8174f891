"""Leave-one-dataset-out: tune on the others' dev splits, report on the left-out test split.

A new domain is the test an adaptive ensemble has to pass. Every dataset gives a tuning split
(STS dev, SciFact train qrels, a seeded fifth of a classification train split) and a test split;
a method's setting for fold D is chosen by the mean primary metric over the tuning splits of
every dataset but D, so nothing of D is seen by any tuning step.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
from scipy.stats import rankdata

from probembed.evaluation.datasets import (
    ClassificationDataset,
    Evaluable,
    RetrievalDataset,
    StsDataset,
    load_evaluable,
)
from probembed.evaluation.harness import (
    Embedded,
    Method,
    dataset_roles,
    embed,
    evaluate,
    primary_metric,
)
from probembed.evaluation.metrics import probe_losses, spearman
from probembed.evaluation.paired import paired_difference
from probembed.evaluation.tuning import TIE, simplex_grid, uec_methods
from probembed.fusion.adapt import adapted_weights, agreement
from probembed.fusion.router import (
    Router,
    anchor_rows,
    fit_router,
    relative_errors,
    text_features,
)
from probembed.gaussian import Gaussian, squared_norms
from probembed.pipeline import FusionConfig, Pipeline
from probembed.progress import progress_bar
from probembed.uncertainty import Estimator, LaplaceEstimator

#: Classification texts per probe split (fit and test; half that held out): enough for a
#: stable linear probe, few enough that seven datasets times four models encode in minutes on
#: two cores (SST-2 alone has 67,349 train phrases).
MAX_PROBE_TEXTS = 1000
#: Share of a classification train split held out as its tuning split.
TUNE_FRACTION = 0.2
SEED = 0
#: How far a collection's agreement may tilt the prior (0 keeps it): agreements differ by
#: ~0.02-0.1 between members, so γ = 10 moves a weight by a factor of e^0.2 to e^1.
GAMMAS = (0.0, 5.0, 10.0, 20.0, 40.0, 80.0)
#: Prior precisions λ tried for the last-layer Laplace member (minilm; the others are adapters),
#: the shipped 1 first (ties keep it). minilm's Fisher has quantiles 0.027 (1%), 0.058 (10%),
#: 0.13 (median), 0.37 (90%), 1.1 (99%): at λ = 1 most of V = 1/(F + λ) is the prior, so the
#: variance is nearly ‖a‖²/λ; λ = 0.3 and 0.1 sit at its upper decile and median, 0.03 near its
#: 1st percentile, and at 0.01 V ≈ 1/F everywhere: a smaller λ only rescales V, which the
#: refitted calibration scale absorbs. Half-decade steps span that range.
PRIOR_PRECISIONS = (1.0, 0.3, 0.1, 0.03, 0.01)

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
    tune: Evaluable
    test: Evaluable


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
        test = load_evaluable(path, test_split)
        tune: Evaluable
        if isinstance(test, ClassificationDataset):
            tune, test = classification_splits(test)
        else:
            tune = load_evaluable(path, tune_split)
        tasks[name] = Task(name, tune, test)
    return tasks


#: Each dataset's share of a fold's tuning mean (None: every dataset but the left-out alike).
Shares = Mapping[str, float] | None


def fold_means(
    dev: Mapping[str, Sequence[float]], left_out: str | None, shares: Shares = None
) -> np.ndarray:
    """Each setting's tuning mean over every dataset but left_out, each weighted by its share
    (what tuning compares); a NaN figure is refused, since max() would choose no setting."""
    others = {k: np.asarray(v, dtype=np.float64) for k, v in dev.items() if k != left_out}
    if not others:
        raise ValueError(f"leaving out {left_out!r} leaves no dataset to tune on")
    for name, figures in others.items():
        if np.isnan(figures).any():
            bad = int(np.flatnonzero(np.isnan(figures))[0])
            raise ValueError(f"setting {bad} scores NaN on {name}'s tuning split")
    if shares is None:
        return np.mean(list(others.values()), axis=0)
    missing = sorted(set(others) - set(shares))
    if missing:
        raise ValueError(f"no tuning share given for {', '.join(missing)}")
    weights = np.array([shares[n] for n in others], dtype=np.float64)
    return np.average(list(others.values()), axis=0, weights=weights)


def fold_choice(
    dev: Mapping[str, Sequence[float]], left_out: str | None, shares: Shares = None
) -> int:
    """Index of the setting with the best tuning mean over every dataset but left_out.

    `dev[name][i]` is setting i's primary metric on that dataset's tuning split; the first
    setting wins ties, so grids should list simpler settings first.
    """
    mean = fold_means(dev, left_out, shares)
    return int(np.flatnonzero(mean >= mean.max() - TIE)[0])


def same_task(tasks: Mapping[str, str], left_out: str) -> list[str]:
    """The other datasets of left_out's task (`tasks`: dataset -> sts, retrieval,
    classification): what a collection whose use is known may tune on."""
    if left_out not in tasks:
        raise ValueError(f"{left_out!r} is not one of the datasets: {', '.join(tasks)}")
    return [n for n in tasks if n != left_out and tasks[n] == tasks[left_out]]


def task_shares(tasks: Mapping[str, str], left_out: str, same_share: float) -> dict[str, float]:
    """Each other dataset's share of left_out's tuning mean when its task is known:
    `same_share` of it spread evenly over the datasets of that task (`same_task`), the rest
    over all of them; with none of that task, every one alike.

    same_share = 1 tunes on the same task alone, 0 on all (plain LODO), between a shrinkage.
    """
    if not 0.0 <= same_share <= 1.0:
        raise ValueError(f"same_share must be a share in [0, 1], got {same_share}")
    others = [n for n in tasks if n != left_out]
    alike = same_task(tasks, left_out) or others
    if not others:
        raise ValueError(f"leaving out {left_out!r} leaves no dataset to tune on")
    return {
        n: (1.0 - same_share) / len(others) + (same_share / len(alike) if n in alike else 0.0)
        for n in others
    }


def similarity_shares(
    similarity: Mapping[str, float], left_out: str, tau: float
) -> dict[str, float]:
    """Each other dataset's share of left_out's tuning mean: softmax over them of their
    similarity to left_out's collection (`collection_similarity`) over tau, so the datasets
    whose texts look like the left-out one's count for more; left_out's own entry gets none.

    tau = inf weights every dataset alike (plain LODO); tau -> 0 the most similar alone.
    """
    if not tau > 0.0:
        raise ValueError(f"tau must be a temperature above 0 (inf: every dataset alike), got {tau}")
    others = {n: float(s) for n, s in similarity.items() if n != left_out}
    if not others:
        raise ValueError(f"leaving out {left_out!r} leaves no dataset to tune on")
    for name, value in others.items():
        if not np.isfinite(value):
            raise ValueError(f"the similarity of {name!r} to {left_out!r} is {value}, not finite")
    if np.isinf(tau):
        return {n: 1.0 / len(others) for n in others}
    values = np.fromiter(others.values(), dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        weights = np.exp((values - values.max()) / tau)
    return dict(zip(others, (weights / weights.sum()).tolist(), strict=True))


def single_margins(
    dev: Mapping[str, Sequence[float]], best_single: Mapping[str, float], left_out: str | None
) -> dict[str, np.ndarray]:
    """Each setting's tuning figure minus the best single member's on each dataset but
    left_out: how far an ensemble stays above the model a user would otherwise pick."""
    fold_means(dev, left_out)  # refuses a fold with no dataset or a NaN figure, naming it
    margins = {}
    for name, figures in dev.items():
        if name == left_out:
            continue
        if name not in best_single:
            raise ValueError(f"no best single member's figure given for {name}")
        if not np.isfinite(best_single[name]):
            raise ValueError(f"the best single member's figure on {name} is {best_single[name]}")
        margins[name] = np.asarray(figures, dtype=np.float64) - float(best_single[name])
    return margins


def minimax_choice(
    dev: Mapping[str, Sequence[float]], best_single: Mapping[str, float], left_out: str | None
) -> int:
    """Index of the setting whose smallest margin over the best single member (`single_margins`)
    is largest, the least regret on the worst dataset; ties go to the best tuning mean, then
    the first setting."""
    worst = np.min(list(single_margins(dev, best_single, left_out).values()), axis=0)
    return _best_mean_among(worst >= worst.max() - TIE, dev, left_out)


def constrained_choice(
    dev: Mapping[str, Sequence[float]], best_single: Mapping[str, float], left_out: str | None
) -> tuple[int, bool]:
    """(index, fell back): the setting of the best tuning mean among those at or above the best
    single member on every dataset but left_out; where none is, `minimax_choice`'s (True)."""
    worst = np.min(list(single_margins(dev, best_single, left_out).values()), axis=0)
    clear = worst >= -TIE
    if not clear.any():
        return minimax_choice(dev, best_single, left_out), True
    return _best_mean_among(clear, dev, left_out), False


def _best_mean_among(
    allowed: np.ndarray, dev: Mapping[str, Sequence[float]], left_out: str | None
) -> int:
    """Index of the allowed setting of the best tuning mean (the first on ties)."""
    mean = fold_means(dev, left_out)
    return int(np.flatnonzero(allowed & (mean >= mean[allowed].max() - TIE))[0])


#: The objectives a least-regret choice may use (`regret_choice`), written down before a run.
REGRET_OBJECTIVES = ("minimax", "constrained")


def regret_choice(
    dev: Mapping[str, Sequence[float]],
    best_single: Mapping[str, float],
    left_out: str | None,
    objective: str,
) -> tuple[int, bool]:
    """(index, fell back to minimax) of the setting `objective` chooses: one call for both."""
    if objective == "minimax":
        return minimax_choice(dev, best_single, left_out), False
    if objective == "constrained":
        return constrained_choice(dev, best_single, left_out)
    raise ValueError(f"objective must be one of {', '.join(REGRET_OBJECTIVES)}, got {objective!r}")


@dataclass(frozen=True)
class Split:
    """One split embedded once, with the label-free agreement of its members on its texts."""

    dataset: Evaluable
    embedded: Embedded
    agreement: np.ndarray
    #: Agreement among subsets of the members, by the subset's indices, measured once each.
    among: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, compare=False)

    def agreement_among(self, prior: Sequence[float]) -> np.ndarray:
        """(K,) each member's agreement with the others that `prior` gives weight, as a
        collection of just those members measures it (0 for the rest; all K: `agreement`)."""
        keep = tuple(k for k, p in enumerate(prior) if p > 0)
        if len(keep) == len(prior) or len(keep) < 2:  # one member: no tilt to measure
            return self.agreement
        if keep not in self.among:
            parts = collection_parts(self.embedded)
            out = np.zeros(len(prior))
            out[list(keep)] = agreement([parts[k] for k in keep])
            self.among[keep] = out
        return self.among[keep]


def collection_roles(roles: Container[str]) -> list[str]:
    """The roles whose texts make a split's "collection", what adaptation may look at: a
    retrieval collection is its corpus, any other split every text it has."""
    if "docs" in roles:
        return ["docs"]
    return [r for r in ("a", "b", "train", "test") if r in roles]


def collection_parts(embedded: Embedded) -> list[Gaussian]:
    """Per member, every text of the split (its "collection"): what adaptation may look at."""
    roles = [embedded.parts[r] for r in collection_roles(embedded.parts)]
    return [Gaussian.concat([role[k] for role in roles]) for k in range(len(embedded.models))]


#: Random pairs of a collection's texts whose cosines measure each member's spread there.
SPREAD_PAIRS = 5000
#: Floor on a member's noise variance in the one-factor model (of its standardised cosines):
#: a member the fit reads with no noise of its own (a Heywood case, e.g. two near-duplicate
#: members) took all the weight (1e-12 against ~0.3 for the others). The four candidates' lowest on
#: the benchmark's collections is 0.12, so the floor changes none of their weights.
MIN_NOISE = 0.01


def collection_centres(split: Split) -> list[np.ndarray]:
    """Per member, the float64 mean of the unit vectors of the split's collection: where that
    domain's texts sit in the member's space (what centring removes, what similarity compares)."""
    return [
        part.normalize().mean.mean(axis=0, dtype=np.float64)
        for part in collection_parts(split.embedded)
    ]


def collection_similarity(first: Sequence[np.ndarray], second: Sequence[np.ndarray]) -> float:
    """The cosine between two collections' centres (`collection_centres`) in each member's
    space, averaged over the members: how alike two domains' texts look, read without labels."""
    if len(first) != len(second):
        raise ValueError(f"centres of {len(first)} and {len(second)} members: not one pipeline's")
    cosines = []
    for k, (a, b) in enumerate(zip(first, second, strict=True)):
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        if not norms > 0.0:
            raise ValueError(f"member {k}'s centre is zero: its texts' directions cancel")
        cosines.append(float(np.dot(a, b)) / norms)
    return float(np.mean(cosines))


def centred_split(split: Split) -> Split:
    """The split with every member's unit vectors moved by minus that member's mean over the
    collection (fusion normalises them again): a label-free adaptation of each member's
    geometry to the domain (its common direction removed), for `benchmarks/lodo_geometry.py`.
    Its agreement is the plain split's (measured before centring), and `agreement_among`
    measures the centred members afresh: tilt a centred split by neither."""
    centres = collection_centres(split)
    parts = {}
    for role, members in split.embedded.parts.items():
        unit = [member.normalize() for member in members]
        parts[role] = [
            Gaussian((u.mean - c).astype(np.float32), u.var)
            for u, c in zip(unit, centres, strict=True)
        ]
    return Split(split.dataset, replace(split.embedded, parts=parts), split.agreement)


def pair_cosines(split: Split, pairs: int = SPREAD_PAIRS, seed: int = SEED) -> np.ndarray:
    """(pairs drawn, K) each member's cosines over the same seeded random pairs of two distinct
    texts of the collection (no labels): what the label-free geometry statistics read."""
    parts = collection_parts(split.embedded)
    first, second = np.random.default_rng(seed).integers(0, len(parts[0]), (2, pairs))
    distinct = first != second
    first, second = first[distinct], second[distinct]
    cosines = []
    for part in parts:
        unit = part.normalize().mean.astype(np.float64)
        cosines.append(np.einsum("nd,nd->n", unit[first], unit[second]))
    return np.stack(cosines, axis=1)


def cosine_spread(split: Split, pairs: int = SPREAD_PAIRS, seed: int = SEED) -> np.ndarray:
    """(K,) the standard deviation of each member's cosines over seeded random pairs of the
    collection's texts (no labels): how widely the member spreads that domain's texts."""
    return pair_cosines(split, pairs, seed).std(axis=0)


def factor_weights(split: Split, pairs: int = SPREAD_PAIRS, seed: int = SEED) -> np.ndarray:
    """(K,) weights summing to 1 that a one-factor measurement model of the collection gives
    each member's cosines: every member reads one shared similarity plus its own noise, and
    the least-noise linear reading weights member k by ℓ_k / (ψ_k σ_k) (loading ℓ_k and
    noise variance ψ_k of its standardised cosines, σ_k their spread). No labels: a member
    that tracks what the others share, scaled for its spread, counts for more."""
    from sklearn.decomposition import FactorAnalysis

    cosines = pair_cosines(split, pairs, seed)
    spread = cosines.std(axis=0)
    # one factor is identified from three readings; a member whose cosines vary by no more
    # than float32 unit rows round (~1e-7) reads nothing to standardise
    if len(spread) < 3 or spread.min() < 1e-6:
        return np.full(len(spread), 1.0 / len(spread))
    model = FactorAnalysis(n_components=1, svd_method="lapack")
    model.fit((cosines - cosines.mean(axis=0)) / spread)
    loading = np.abs(model.components_[0])
    noise = np.maximum(model.noise_variance_, MIN_NOISE)
    weights = loading / (noise * spread)
    return weights / weights.sum()


def embed_split(pipeline: Pipeline, dataset: Evaluable, progress: bool = False) -> Split:
    """Embed a split once per member and measure its members' agreement."""
    return embedded_split(dataset, embed(pipeline, dataset, progress))


def embedded_split(dataset: Evaluable, embedded: Embedded) -> Split:
    """A split already embedded, with its members' agreement measured (two or more members)."""
    return Split(dataset, embedded, agreement(collection_parts(embedded)))


def embed_tasks(
    pipeline: Pipeline, tasks: Mapping[str, Task], progress: bool = False
) -> dict[tuple[str, str], Split]:
    """Every task's tuning and test split embedded once, by (name, "tune" | "test"): what
    every fold of every LODO benchmark reads."""
    return {
        (name, role): embed_split(pipeline, dataset, progress)
        for name, task in tasks.items()
        for role, dataset in (("tune", task.tune), ("test", task.test))
    }


def candidate_splits(
    names: Sequence[str] | None = None, extra: Sequence[Estimator] = ()
) -> tuple[Pipeline, dict[str, Task], dict[tuple[str, str], Split]]:
    """The built-ins' candidate members (laplace, fitted on the pairs sample), then `extra`
    ones, the named tasks under the datasets directory and their splits embedded: where every
    LODO study starts."""
    from probembed.evaluation.recipes import candidate_pipeline, sample_pairs
    from probembed.paths import datasets_dir

    data = datasets_dir()
    pipe = candidate_pipeline("default", sample_pairs(data / "pairs"))
    if extra:
        pipe = Pipeline([*pipe.members, *extra], pipe.fusion, name=pipe.name)
    tasks = load_tasks(data, names)
    return pipe, tasks, embed_tasks(pipe, tasks, progress=True)


#: A tunable setting: given the split it is applied to, the method to evaluate there.
Setting = Callable[[Split], Method]


class Scores:
    """Each (split, method) evaluated once: folds share tuning splits, grids share settings."""

    def __init__(self, splits: Mapping[tuple[str, str], Split]) -> None:
        self.splits = splits
        self._memo: dict[tuple, float] = {}

    def figure(self, name: str, role: str, setting: Setting) -> float:
        """The primary metric of `setting` on dataset `name`'s "tune" or "test" split."""
        split = self.splits[name, role]
        method = setting(split)
        score = None if isinstance(split.dataset, ClassificationDataset) else method.score
        key = (name, role, method.fusion, score)
        if key not in self._memo:
            outcome = evaluate(split.embedded, split.dataset, method)
            self._memo[key] = outcome.metrics[primary_metric(split.dataset)]
        return self._memo[key]

    def _tuned_on(self, left_out: str | None, shares: Shares) -> list[str]:
        """The datasets a fold tunes on: every one but left_out whose share is not 0 (one with
        no share is kept, for `fold_means` to refuse by name)."""
        names = sorted({n for n, _ in self.splits} - {left_out})
        return [n for n in names if shares is None or shares.get(n) != 0.0]

    def choose(
        self,
        settings: Sequence[Setting],
        left_out: str | None = None,
        label: str | None = None,
        shares: Shares = None,
    ) -> int:
        """The setting with the best tuning mean over every dataset but `left_out`, weighted by
        `shares` (with a `label`, a bar over the settings: a fine grid is minutes of scoring)."""
        return fold_choice(self.tuning_figures(settings, left_out, label, shares), left_out, shares)

    def tuning_figures(
        self,
        settings: Sequence[Setting],
        left_out: str | None = None,
        label: str | None = None,
        shares: Shares = None,
    ) -> dict[str, list[float]]:
        """Each setting's figure on the tuning split of every dataset a fold tunes on (none of
        `left_out`): what every choice of a setting reads."""
        names = self._tuned_on(left_out, shares)
        dev: dict[str, list[float]] = {n: [] for n in names}
        with progress_bar(label or "", len(settings), label is not None) as bar:
            for setting in settings:
                for n in names:
                    dev[n].append(self.figure(n, "tune", setting))
                bar.advance(1)
        return dev

    def tuning_mean(self, setting: Setting, left_out: str | None, shares: Shares = None) -> float:
        """A setting's tuning mean, as `choose` compares it: how close a fold's call was."""
        dev = self.tuning_figures([setting], left_out, shares=shares)
        return float(fold_means(dev, left_out, shares)[0])


def fixed(method: Method) -> Setting:
    """A setting that is the same method on every split: an untuned row, scored as tuned ones."""
    return lambda split: method


def static_methods(k: int, step: float) -> list[Method]:
    """Static weights on the simplex grid, scored by cosine (the tuned static ensemble)."""
    return [Method("static", FusionConfig("weighted", weights=w)) for w in simplex_grid(k, step)]


def _best(
    scores: Scores,
    methods: Sequence[Method],
    left_out: str | None,
    label: str | None = None,
    shares: Shares = None,
) -> Method:
    """The method with the best tuning mean over the datasets but `left_out`: the first within
    TIE of the maximum (`fold_choice`). `tuning._best` keeps instead the first that beats the
    best so far by more than TIE; the two differ only for figures between TIE and 2·TIE of
    each other (x, x + 0.9·TIE, x + 1.8·TIE: the second here, the third there)."""
    return methods[scores.choose([fixed(m) for m in methods], left_out, label, shares)]


def tune_static_uec(
    scores: Scores,
    k: int,
    step: float,
    left_out: str | None = None,
    shares: Shares = None,
    bars: tuple[str | None, str | None] = (None, None),
) -> tuple[Method, Method]:
    """(static, uec): weights on the simplex grid, then uec's (T, β) around them, each by the
    tuning mean over the datasets but `left_out` weighted by `shares`."""
    static = _best(scores, static_methods(k, step), left_out, bars[0], shares)
    assert static.fusion.weights is not None
    return static, _best(scores, uec_methods(static.fusion.weights), left_out, bars[1], shares)


def similar_static(
    scores: Scores,
    k: int,
    step: float,
    left_out: str,
    similarity: Mapping[str, float],
    tau: float,
    unread: Sequence[str] = (),
) -> Method:
    """Static weights on the simplex grid chosen by the tuning mean over the datasets but
    left_out (and `unread`, given no share), each weighted by `similarity_shares` of its
    similarity to left_out's collection."""
    shares = similarity_shares(
        {n: s for n, s in similarity.items() if n not in unread}, left_out, tau
    )
    shares |= dict.fromkeys(unread, 0.0)
    return _best(scores, static_methods(k, step), left_out, shares=shares)


def tune_similarity_tau(
    scores: Scores,
    k: int,
    step: float,
    left_out: str,
    similarity: Mapping[str, Mapping[str, float]],
    taus: Sequence[float],
) -> tuple[float, dict[str, list[float]]]:
    """(tau, each tuning dataset's figure per tau) for `similar_static`, by nested LODO: each
    dataset j but left_out plays the left-out one, its weights chosen on the others but j and
    left_out by their similarity to j's tuning collection (`similarity[j]`), scored on j's
    tuning split; the tau of the best mean over the j wins (the first on ties). Nothing of
    left_out is read."""
    names = sorted({n for n, _ in scores.splits} - {left_out})
    dev = {
        j: [
            scores.figure(
                j, "tune", fixed(similar_static(scores, k, step, j, similarity[j], tau, [left_out]))
            )
            for tau in taus
        ]
        for j in names
    }
    return taus[fold_choice(dev, None)], dev


#: Texts of a collection its halves pseudo-task reads (seeded sample), and the fewest words a
#: text needs to give two halves with something in each (three words a side).
HALVES_TEXTS = 1000
HALVES_MIN_WORDS = 6


def halves_task(
    name: str, dataset: Evaluable, texts: int = HALVES_TEXTS, seed: int = SEED
) -> RetrievalDataset:
    """A label-free retrieval task made of a collection's own texts (`collection_roles`): each
    sampled text's first half (by words) is a query whose one relevant document is its second
    half, among every sampled text's second half. Which members find a text's continuation
    reads how well they match that domain's texts, with no label (an inverse-cloze task)."""
    roles = dataset_roles(dataset)
    found: set[str] = set()
    for role in collection_roles(roles):
        held = roles[role]
        found.update(held.values() if isinstance(held, dict) else held)
    long = sorted(t for t in found if len(t.split()) >= HALVES_MIN_WORDS)
    if len(long) < 2:
        raise ValueError(f"{name}: {len(long)} texts of {HALVES_MIN_WORDS} words or more, no task")
    if len(long) > texts:
        pick = np.random.default_rng(seed).choice(len(long), texts, replace=False)
        long = [long[i] for i in np.sort(pick)]
    queries, corpus = {}, {}
    for i, text in enumerate(long):
        words = text.split()
        queries[f"q{i}"] = " ".join(words[: len(words) // 2])
        corpus[f"d{i}"] = " ".join(words[len(words) // 2 :])
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(len(long))}
    return RetrievalDataset(f"{name} halves", "pseudo", corpus, queries, qrels)


def standardised(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Values minus their mean over their spread (all 0 when they do not vary): two figures
    of other scales made one sum's terms."""
    array = np.asarray(values, dtype=np.float64)
    if array.max() == array.min():  # the mean of equal values can be an ulp off: no spread
        return np.zeros_like(array)
    return (array - array.mean()) / array.std()


def halves_choice(
    dev: Mapping[str, Sequence[float]], left_out: str | None, halves: Sequence[float], gamma: float
) -> int:
    """Index of the setting with the best standardised tuning mean over every dataset but
    left_out plus gamma times its standardised figure on left_out's halves task (gamma 0:
    `fold_choice`; inf: the halves figure alone). First setting on ties."""
    if gamma == 0.0:
        return fold_choice(dev, left_out)
    objective = (
        np.asarray(halves, dtype=np.float64)
        if gamma == float("inf")
        else standardised(fold_means(dev, left_out)) + gamma * standardised(halves)
    )
    return int(np.flatnonzero(objective >= objective.max() - TIE)[0])


def halves_static(
    scores: Scores,
    k: int,
    step: float,
    left_out: str,
    role: str,
    gamma: float,
    unread: Sequence[str] = (),
) -> Method:
    """Static weights on the simplex grid by `halves_choice`: the tuning splits of the
    datasets but left_out (and `unread`) and left_out's halves task split `role`."""
    methods = static_methods(k, step)
    settings = [fixed(m) for m in methods]
    shares = {n: float(n not in unread) for n, _ in scores.splits} if unread else None
    dev = scores.tuning_figures(settings, left_out, shares=shares)
    halves = [scores.figure(left_out, role, s) for s in settings]
    return methods[halves_choice(dev, left_out, halves, gamma)]


def tune_halves_gamma(
    scores: Scores, k: int, step: float, left_out: str, gammas: Sequence[float]
) -> tuple[float, dict[str, list[float]]]:
    """(gamma, each tuning dataset's figure per gamma) for `halves_static`, by nested LODO:
    each dataset j but left_out plays the left-out one, its weights chosen on the others but
    j and left_out and on j's tuning collection's halves task, scored on j's tuning split;
    the best mean over the j wins (the first gamma on ties). Nothing of left_out is read."""
    names = sorted({n for n, _ in scores.splits} - {left_out})
    dev = {
        j: [
            scores.figure(
                j, "tune", fixed(halves_static(scores, k, step, j, "halves-tune", g, [left_out]))
            )
            for g in gammas
        ]
        for j in names
    }
    return gammas[fold_choice(dev, None)], dev


def best_singles(
    scores: Scores, singles: Sequence[Method], left_out: str | None
) -> dict[str, float]:
    """The best single member's figure on each tuning split but left_out's (the highest of
    `singles`, each scored alone): what a least-regret choice must stay above."""
    dev = scores.tuning_figures([fixed(m) for m in singles], left_out)
    return {name: max(figures) for name, figures in dev.items()}


def _least_regret(
    scores: Scores,
    methods: Sequence[Method],
    left_out: str | None,
    best_single: Mapping[str, float],
    objective: str,
) -> tuple[Method, bool]:
    """The method `objective` chooses from the tuning figures, and whether it fell back."""
    dev = scores.tuning_figures([fixed(m) for m in methods], left_out)
    j, fell_back = regret_choice(dev, best_single, left_out, objective)
    return methods[j], fell_back


def least_regret_static_uec(
    scores: Scores,
    k: int,
    step: float,
    left_out: str | None,
    best_single: Mapping[str, float],
    objective: str,
) -> tuple[Method, Method, dict[str, bool]]:
    """(static, uec, fell back per family) as `tune_static_uec` tunes them, but each chosen by a
    regret objective against the best single member (`regret_choice`), not the tuning mean."""
    static, static_fell = _least_regret(
        scores, static_methods(k, step), left_out, best_single, objective
    )
    assert static.fusion.weights is not None
    uec, uec_fell = _least_regret(
        scores, uec_methods(static.fusion.weights), left_out, best_single, objective
    )
    return static, uec, {"static": static_fell, "uec": uec_fell}


#: What a label-free tilt reads from a split: (K,) one figure per member, given the prior
#: (whose members are the ones the tilt may move).
Statistic = Callable[[Split, Sequence[float]], np.ndarray]


def tilted_settings(
    base: Method, statistic: Statistic, gammas: Sequence[float], name: str
) -> list[Setting]:
    """A method's prior (uec) or weights (weighted) tilted by softmax(log p + γ·statistic) of
    each split, one setting per γ (what `adapted_weights` computes)."""
    slot = "prior" if base.fusion.method == "uec" else "weights"

    def setting(gamma: float) -> Setting:
        def method(split: Split) -> Method:
            prior = getattr(base.fusion, slot)
            w = adapted_weights(statistic(split, prior), prior, gamma)
            changed = replace(base.fusion, **{slot: tuple(w)})  # type: ignore[arg-type]  # by name
            return Method(name, changed, base.score)

        return method

    return [setting(g) for g in gammas]


def adapted_settings(base: Method) -> list[Setting]:
    """A method tilted by each split's member agreement, measured among the members it gives
    weight (as a collection of just those measures it)."""
    return tilted_settings(
        base, lambda split, prior: split.agreement_among(prior), GAMMAS, f"{base.name}+adapted"
    )


@dataclass(frozen=True)
class Choice:
    """What tuning chose for each family, and the method it gives on each split."""

    settings: dict[str, Setting]
    gamma: dict[str, float]
    static: Method


def tune_families(
    scores: Scores, k: int, step: float, left_out: str | None = None, progress: bool = False
) -> Choice:
    """static -> uec (T, beta) around it; each, and the uniform mean, tilted by gamma.

    Every choice reads only the tuning splits of the datasets other than `left_out`; with no
    dataset left out this is how the built-ins are tuned (`pipeline_tuning.tune_fusion`).
    """
    bars = ("tune static weights", "tune uec (T, beta)", "tune gamma") if progress else (None,) * 3
    static, uec = tune_static_uec(scores, k, step, left_out, bars=(bars[0], bars[1]))
    uniform = Method("mean", FusionConfig("weighted", weights=(1.0 / k,) * k))
    settings: dict[str, Setting] = {"static": fixed(static), "uec": fixed(uec)}
    gamma: dict[str, float] = {}
    for name, base in (("mean", uniform), ("static", static), ("uec", uec)):
        tilted = adapted_settings(base)
        j = scores.choose(tilted, left_out, bars[2] and f"{bars[2]} ({name})")
        settings[f"{name}+adapted"], gamma[f"{name}+adapted"] = tilted[j], GAMMAS[j]
    return Choice(settings, gamma, static)


def static_headroom(scores: Scores, name: str, k: int, step: float) -> dict[str, Method]:
    """The static grid's weights for dataset `name`, chosen on three kinds of data.

    "lodo": the other datasets' tuning splits (the `static` baseline); "in domain": the
    dataset's own tuning split, which the protocol forbids, so what knowing the domain's labels
    would give any domain-level adaptation; "test oracle": its test split itself, a ceiling
    that overfits the test, never a method. Ties keep the first (simplest) setting.
    """
    grid = static_methods(k, step)
    settings = [fixed(m) for m in grid]
    own = {name: [scores.figure(name, "tune", s) for s in settings]}
    test = {name: [scores.figure(name, "test", s) for s in settings]}
    return {
        "lodo": _best(scores, grid, name),
        "in domain": grid[fold_choice(own, None)],
        "test oracle": grid[fold_choice(test, None)],
    }


def headroom_rows(scores: Scores, k: int, names: Sequence[str], step: float) -> list[dict]:
    """Per dataset, the static weights `static_headroom` chooses three ways, each one's test
    figure and, beside "lodo", the paired bootstrap interval of its difference from it."""
    rows: list[dict] = []
    for name in names:
        test = scores.splits[name, "test"]
        chosen = static_headroom(scores, name, k, step)
        outcomes = {how: evaluate(test.embedded, test.dataset, m) for how, m in chosen.items()}
        for how, method in chosen.items():
            weights = method.fusion.weights
            assert weights is not None  # a point of the static grid is a weighting
            row: dict[str, Any] = {"left_out": name, "chosen_on": how, "weights": list(weights)}
            row["value"] = scores.figure(name, "test", fixed(method))
            if how != "lodo":
                row["vs_lodo"] = paired_difference(test.dataset, outcomes["lodo"], outcomes[how])
            rows.append(row)
    return rows


@dataclass(frozen=True)
class FoldResult:
    """One left-out dataset: each family's test figure, and the gamma and λ tuning chose."""

    left_out: str
    test: dict[str, float]
    gamma: dict[str, float]
    methods: dict[str, Method]
    prior_precision: float | None = None


def run_fold(
    scores: Scores,
    left_out: str,
    k: int,
    step: float,
    variants: Mapping[float, Scores] | None = None,
) -> FoldResult:
    """Tune every family on the other datasets' tuning splits; score it on left_out's test.

    With `variants` (the same splits embedded at each prior precision λ), `uec+lambda` tunes
    λ with uec's (T, β) around the same static choice.
    """
    choice = tune_families(scores, k, step, left_out)
    split = scores.splits[left_out, "test"]
    test = {f: scores.figure(left_out, "test", s) for f, s in choice.settings.items()}
    methods = {f: s(split) for f, s in choice.settings.items()}
    lam = None
    if variants:
        assert choice.static.fusion.weights is not None
        lam, method = tune_prior_precision(variants, choice.static.fusion.weights, left_out)
        test[method.name] = variants[lam].figure(left_out, "test", fixed(method))
        methods[method.name] = method
    return FoldResult(left_out, test, choice.gamma, methods, lam)


def choose_across(
    variants: Mapping[Any, Scores], settings: Sequence[Setting], left_out: str | None = None
) -> tuple[Any, int]:
    """The variant and the index of the setting with the best mean tuning figure over every
    dataset but `left_out`, each setting scored on each variant's splits (the same data
    embedded or adapted another way); ties keep the first variant, then the first setting."""
    names = sorted({n for s in variants.values() for n, _ in s.splits} - {left_out})
    dev = {n: [v.figure(n, "tune", s) for v in variants.values() for s in settings] for n in names}
    j = fold_choice(dev, left_out)
    return list(variants)[j // len(settings)], j % len(settings)


def tune_prior_precision(
    variants: Mapping[float, Scores], prior: Sequence[float], left_out: str | None = None
) -> tuple[float, Method]:
    """λ × (T, β) of uec around the static prior, chosen as every setting is (first λ on ties)."""
    methods = [replace(m, name="uec+lambda") for m in uec_methods(prior)]
    lam, j = choose_across(variants, [fixed(m) for m in methods], left_out)
    return lam, methods[j]


class RememberedActivations:
    """An encoder that keeps each text's last-layer pass: every λ of a member costs one pass.

    Everything but `encode_with_activations` (name, dim, fingerprint, ...) is the wrapped
    encoder's, so an estimator around it has the same fingerprint and cache entries.
    """

    def __init__(self, encoder: Any) -> None:
        self.inner = encoder
        self._memo: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode_with_activations(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(raw mean, last-layer input) per text; only texts never seen are encoded."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            means, acts = self.inner.encode_with_activations(missing)
            self._memo.update(zip(missing, zip(means, acts, strict=True), strict=True))
        rows = [self._memo[t] for t in texts]
        return np.stack([m for m, _ in rows]), np.stack([a for _, a in rows])


def varies_with_prior_precision(member: object) -> TypeGuard[LaplaceEstimator]:
    """A last-layer Laplace member: its variance follows the text beyond its norm.

    The adapter form's variance moves by about 1% across texts (docs/architecture.md), so λ
    would change little but its scale, which calibration absorbs; it is kept as it is.
    """
    return isinstance(member, LaplaceEstimator) and member.uses_last_layer


def prior_precision_variants(
    pipeline: Pipeline,
    pairs: Sequence[tuple[str, str]],
    lambdas: Sequence[float] = PRIOR_PRECISIONS,
    progress: bool = False,
) -> dict[float, Pipeline]:
    """The pipeline at each λ: last-layer Laplace members re-made (scale refitted), others kept.

    `pairs` are the pairs the members were fitted on. A λ equal to a member's own keeps that
    member; the re-made ones share one remembered encoder per member, so the transformer runs
    once per text whatever the number of λ.
    """
    shared = []
    for member in pipeline.members:
        if varies_with_prior_precision(member):
            member = copy.copy(member)
            # a duck-typed proxy: every attribute but the activations is the encoder's
            member.encoder = RememberedActivations(member.encoder)  # type: ignore[assignment]
        shared.append(member)
    out = {}
    for lam in lambdas:
        members = [
            m.with_prior_precision(lam, pairs, progress)
            if varies_with_prior_precision(m) and m.params["prior_precision"] != lam
            else original
            for m, original in zip(shared, pipeline.members, strict=True)
        ]
        out[lam] = Pipeline(
            members, pipeline.fusion, name=pipeline.name, cache=pipeline.cache or False
        )
    return out


def variant_splits(
    pipeline: Pipeline, base: Mapping[tuple[str, str], Split], progress: bool = False
) -> dict[tuple[str, str], Split]:
    """The base splits embedded by a λ variant; agreement is kept (means do not depend on λ)."""
    return {
        key: Split(split.dataset, embed(pipeline, split.dataset, progress), split.agreement)
        for key, split in base.items()
    }


#: Router strengths α tried, 0 (the static prior) first: r̂ is in units of a dataset's error
#: spread, so α = 1 moves a weight by e^r̂ and α = 16 lets a prediction of a tenth of a
#: spread move it by a factor of ~5.
ALPHAS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)
#: The role whose texts are not routed: a retrieval corpus has no per-item error to learn from.
UNROUTED = "docs"


def item_errors(split: Split) -> np.ndarray:
    """(items, K) each single member's own error per item: what the router learns to predict.

    STS: |rank of its cosine − rank of gold| / n per pair (Spearman is a rank statistic);
    retrieval: 1 − nDCG@10 per query; classification: the probe's −log p(true label).
    """
    dataset, embedded = split.dataset, split.embedded
    columns = []
    for k, model in enumerate(embedded.models):
        if isinstance(dataset, ClassificationDataset):
            train = embedded.parts["train"][k].normalize().mean
            test = embedded.parts["test"][k].normalize().mean
            columns.append(
                probe_losses(train, dataset.train_labels, test, dataset.test_labels, seed=SEED)
            )
            continue
        outcome = evaluate(embedded, dataset, Method(model, FusionConfig(f"single:{model}")))
        if isinstance(dataset, StsDataset):
            n = len(dataset.scores)
            columns.append(
                np.abs(rankdata(outcome.per_item["pred"]) - rankdata(dataset.scores)) / n
            )
        else:
            columns.append(1.0 - outcome.per_item["ndcg@10"])
    return np.stack(columns, axis=1)


def role_features(split: Split) -> dict[str, np.ndarray]:
    """Router features of every text of each routed role (anchors: that role's own texts)."""
    out = {}
    for role, texts in dataset_roles(split.dataset).items():
        if role == UNROUTED:
            continue
        texts = list(texts.values()) if isinstance(texts, dict) else list(texts)
        parts = split.embedded.parts[role]
        out[role] = text_features(parts, texts, anchor_rows(len(texts)))
    return out


def item_features(features: Mapping[str, np.ndarray]) -> np.ndarray:
    """(items, K, F): a pair's features are the mean of its two texts'; else the text's own."""
    if "a" in features:
        return 0.5 * (features["a"] + features["b"])
    return features["queries"] if "queries" in features else features["test"]


@dataclass(frozen=True)
class RouterData:
    """One tuning split's router training items: features (n, K, F), relative errors (n, K)."""

    features: np.ndarray
    targets: np.ndarray


def router_data(split: Split, features: Mapping[str, np.ndarray]) -> RouterData:
    """Features and relative errors (in this dataset's own error spread) of a tuning split."""
    return RouterData(item_features(features), relative_errors(item_errors(split)))


def fit_on(data: Mapping[str, RouterData], names: Sequence[str]) -> Router:
    """The router fitted on the items of the named datasets' tuning splits, pooled."""
    return fit_router(
        np.concatenate([data[n].features for n in names]),
        np.concatenate([data[n].targets for n in names]),
    )


def routed(split: Split, features: Mapping[str, np.ndarray], router: Router, alpha: float) -> Split:
    """The split with each routed text's member variances set to e^{-g}: a carrier, no more.

    uec weights are softmax(−log u/T + log p); at T = 1 a member whose uncertainty u is
    e^{−g_k(x)} gets softmax(log p + g)(x), the router's weight, so a routed split runs through
    the ordinary fusion, scored by cosine (which never reads the variance). A retrieval
    corpus has no per-item error to learn from and keeps g = 0 (the prior).
    """
    parts = {}
    for role, members in split.embedded.parts.items():
        n = len(members[0])
        g = (
            router.logits(features[role], alpha)
            if role in features
            else np.zeros((n, len(members)))
        )
        parts[role] = [
            Gaussian(
                m.mean, np.repeat(np.exp(-g[:, [k]]) / m.dim, m.dim, axis=1) * squared_norms(m.mean)
            )
            for k, m in enumerate(members)
        ]
    embedded = Embedded(split.embedded.models, parts, split.embedded.ids)
    return Split(split.dataset, embedded, split.agreement)


def router_method(prior: Sequence[float]) -> Method:
    """uec at T = 1 around the static prior, cosine score: the fusion a routed split needs."""
    return Method("router", FusionConfig("uec", temperature=1.0, prior=tuple(prior)))


def _routed_figure(split: Split, features, router: Router, alpha: float, prior) -> float:
    """The primary metric of the router at strength α on one split."""
    outcome = evaluate(
        routed(split, features, router, alpha).embedded, split.dataset, router_method(prior)
    )
    return outcome.metrics[primary_metric(split.dataset)]


def router_fold(
    splits: Mapping[tuple[str, str], Split],
    features: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    data: Mapping[str, RouterData],
    left_out: str,
    prior: Sequence[float],
    alphas: Sequence[float] = ALPHAS,
) -> tuple[float, float]:
    """(α chosen, left-out test figure) of the router around the fold's static prior.

    The router never sees the left-out dataset. α is chosen like every setting, by the mean
    tuning figure over the other datasets, each scored by a router fitted without it (so α is
    judged on domains the router did not learn from, as the test is); the test router is fitted
    on every other dataset.
    """
    names = sorted({n for n, _ in splits} - {left_out})
    dev = {}
    for n in names:
        router = fit_on(data, [m for m in names if m != n])
        tune = splits[n, "tune"]
        dev[n] = [_routed_figure(tune, features[n, "tune"], router, a, prior) for a in alphas]
    alpha = alphas[fold_choice(dev, None)]
    router = fit_on(data, names)
    test = splits[left_out, "test"]
    return alpha, _routed_figure(test, features[left_out, "test"], router, alpha, prior)


def router_transfer(data: Mapping[str, RouterData], name: str) -> float:
    """Spearman ρ of predicted against actual relative error on `name`, fitted on the others.

    The router's diagnostic: how well per-member error transfers to a domain it never saw.
    """
    router = fit_on(data, [n for n in data if n != name])
    predicted = router.predict(data[name].features).ravel()
    return float(spearman(predicted, data[name].targets.ravel()))
