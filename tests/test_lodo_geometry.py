"""Label-free geometric adaptations measured by benchmarks/lodo_geometry.py: a member's
collection centring, its cosine spread, the one-factor weights of the members' cosines, and
the tilt of weights by a per-member statistic."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.evaluation.datasets import RetrievalDataset, StsDataset
from probembed.evaluation.harness import Embedded, Method
from probembed.evaluation.lodo import (
    Scores,
    Split,
    centred_split,
    choose_across,
    cosine_spread,
    factor_weights,
    tilted_settings,
)
from probembed.gaussian import Gaussian
from probembed.pipeline import FusionConfig, ScoreConfig


def gaussians(rng: np.random.Generator, n: int, dim: int, offset: float) -> Gaussian:
    """n random Gaussians around a shared direction (a narrow cone, as embeddings are)."""
    mean = rng.normal(size=(n, dim)) + offset
    return Gaussian(mean.astype(np.float32), rng.random((n, dim)).astype(np.float32) * 1e-3)


def sts_split(seed: int, n: int = 40) -> Split:
    """Two members (dims 6 and 4) on n pairs of an STS split."""
    rng = np.random.default_rng(seed)
    parts = {role: [gaussians(rng, n, 6, 3.0), gaussians(rng, n, 4, 1.0)] for role in "ab"}
    dataset = StsDataset("toy", "test", [f"a{i}" for i in range(n)], [""] * n, rng.random(n))
    return Split(dataset, Embedded(("m1", "m2"), parts), np.array([0.3, 0.4]))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_centring_removes_each_members_mean_over_its_collection(seed: int) -> None:
    split = sts_split(seed)
    centred = centred_split(split)
    assert centred.dataset is split.dataset and centred.agreement is split.agreement
    for k in range(2):
        unit = [split.embedded.parts[r][k].normalize() for r in "ab"]
        moved = [centred.embedded.parts[r][k] for r in "ab"]
        both = np.vstack([m.mean for m in moved]).astype(np.float64)
        # float32 rows of norm <= 1 averaged over 80: the mean is 0 to a few float32 ulps
        np.testing.assert_allclose(both.mean(axis=0), 0.0, atol=1e-6)
        centre = np.vstack([u.mean for u in unit]).mean(axis=0, dtype=np.float64)
        np.testing.assert_allclose(moved[0].mean, unit[0].mean - centre, atol=1e-6)
        np.testing.assert_array_equal(moved[1].var, unit[1].var)  # fusion rescales it later


def test_a_retrieval_split_is_centred_on_its_corpus_alone() -> None:
    rng = np.random.default_rng(0)
    docs, queries = gaussians(rng, 30, 5, 2.0), gaussians(rng, 7, 5, -4.0)
    dataset = RetrievalDataset("toy", "test", {f"d{i}": "" for i in range(30)}, {}, {})
    embedded = Embedded(("m",), {"docs": [docs], "queries": [queries]})
    centred = centred_split(Split(dataset, embedded, np.zeros(1)))
    centre = docs.normalize().mean.mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(
        centred.embedded.parts["queries"][0].mean, queries.normalize().mean - centre, atol=1e-6
    )
    np.testing.assert_allclose(centred.embedded.parts["docs"][0].mean.mean(axis=0), 0, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.01, 100.0))
def test_cosine_spread_is_seeded_scale_free_and_zero_for_a_collapsed_member(
    seed: int, scale: float
) -> None:
    split = sts_split(seed)
    spread = cosine_spread(split, pairs=500, seed=seed)
    assert spread.shape == (2,)
    np.testing.assert_array_equal(cosine_spread(split, pairs=500, seed=seed), spread)
    rescaled = {
        r: [Gaussian(g.mean * np.float32(scale), g.var) for g in gs]
        for r, gs in split.embedded.parts.items()
    }
    scaled = Split(split.dataset, Embedded(("m1", "m2"), rescaled), split.agreement)
    # the cosines of float32 unit rows move by float32 rounding only
    np.testing.assert_allclose(cosine_spread(scaled, pairs=500, seed=seed), spread, atol=1e-6)
    one = np.ones((40, 4), dtype=np.float32)
    collapsed = {r: [gs[0], Gaussian(one, one * 0)] for r, gs in split.embedded.parts.items()}
    flat = cosine_spread(
        Split(split.dataset, Embedded(("m1", "m2"), collapsed), split.agreement),
        pairs=500,
        seed=seed,
    )
    assert flat[1] == 0.0 and flat[0] == spread[0]  # every cosine 1; the same pairs drawn


def test_a_retrieval_spread_is_its_corpus_alone_and_its_pairs_distinct() -> None:
    rng = np.random.default_rng(1)
    # queries in a narrow cone (their cosines near 1) would shrink the spread if read
    docs, queries = gaussians(rng, 3, 5, 0.0), gaussians(rng, 50, 5, 10.0)
    dataset = RetrievalDataset("toy", "test", {f"d{i}": "" for i in range(3)}, {}, {})
    split = Split(dataset, Embedded(("m",), {"queries": [queries], "docs": [docs]}), np.zeros(1))
    unit = docs.normalize().mean.astype(np.float64)
    cosines = unit @ unit.T
    # three documents: every pair drawn is one of their three distinct pairs, never a text
    # with itself (cosine 1), whatever the queries
    distinct = cosines[np.triu_indices(3, 1)]
    spread = cosine_spread(split, pairs=2000, seed=3)[0]
    assert distinct.std() * 0.9 < spread < distinct.std() * 1.1  # 3 values drawn ~445 times each


def noisy_views(seed: int, noise: list[float], n: int = 150) -> Split:
    """Members that each read one shared 12-d latent of every text in their own rotated
    coordinates (cosines kept), plus their own noise of the given size: the measurement model
    factor_weights fits."""
    rng = np.random.default_rng(seed)
    latent = {role: rng.normal(size=(n, 12)) for role in "ab"}
    maps = [np.linalg.qr(rng.normal(size=(12, 12)))[0] for _ in noise]
    parts = {
        role: [
            Gaussian((z @ m + s * rng.normal(size=(n, 12))).astype(np.float32), np.zeros((n, 12)))
            for m, s in zip(maps, noise, strict=True)
        ]
        for role, z in latent.items()
    }
    dataset = StsDataset("toy", "test", [f"a{i}" for i in range(n)], [""] * n, rng.random(n))
    names = tuple(f"m{k}" for k in range(len(noise)))
    return Split(dataset, Embedded(names, parts), np.zeros(len(noise)))


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_factor_weights_favour_the_member_with_least_noise_of_its_own(seed: int) -> None:
    split = noisy_views(seed, [0.1, 0.6, 2.0])
    weights = factor_weights(split, pairs=3000, seed=seed)
    assert weights.shape == (3,) and abs(weights.sum() - 1.0) < 1e-12
    # weights apply to raw cosines, and noise shrinks a member's cosines towards 0: what each
    # member contributes to the fused cosine's standardised reading is w_k·σ_k. Noise variances
    # 0.01, 0.36 and 4 against a signal of variance ~1 per coordinate: the loadings differ by
    # far more than 3,000 pairs' sampling error
    share = weights * cosine_spread(split, pairs=3000, seed=seed)
    assert share[0] > share[1] > share[2] > 0
    np.testing.assert_array_equal(factor_weights(split, pairs=3000, seed=seed), weights)
    # the model reads members, not their order
    order = [2, 0, 1]
    swapped = Split(
        split.dataset,
        Embedded(
            tuple(split.embedded.models[k] for k in order),
            {r: [gs[k] for k in order] for r, gs in split.embedded.parts.items()},
        ),
        split.agreement,
    )
    np.testing.assert_allclose(factor_weights(swapped, pairs=3000, seed=seed), weights[order])


def test_near_duplicate_members_do_not_take_all_the_factor_weight() -> None:
    split = noisy_views(0, [0.1, 0.1, 0.6])
    parts = {r: [gs[0], gs[0], gs[2]] for r, gs in split.embedded.parts.items()}  # a copy
    twins = Split(split.dataset, Embedded(split.embedded.models, parts), split.agreement)
    weights = factor_weights(twins, pairs=3000)
    assert weights[0] == pytest.approx(weights[1], rel=1e-6)  # one reading, twice
    # the copies' noise is floored at MIN_NOISE, not ~1e-12: the third keeps a share
    assert weights[2] > 1e-3


def test_factor_weights_need_three_members_that_spread_the_collection() -> None:
    # two readings of one factor cannot tell their noises apart: no tilt (uniform)
    np.testing.assert_array_equal(factor_weights(noisy_views(0, [0.1, 2.0])), [0.5, 0.5])
    split = noisy_views(0, [0.1, 0.6, 2.0])
    one = np.ones((150, 12), dtype=np.float32)
    collapsed = {r: [*gs[:2], Gaussian(one, one * 0)] for r, gs in split.embedded.parts.items()}
    flat = Split(split.dataset, Embedded(split.embedded.models, collapsed), split.agreement)
    np.testing.assert_array_equal(factor_weights(flat), [1 / 3] * 3)  # every cosine 1


def test_a_tilt_moves_the_prior_by_the_statistic_and_keeps_zero_weights() -> None:
    split = sts_split(0)  # only handed to the statistic, which reads nothing of it here
    base = Method("static", FusionConfig("weighted", weights=(0.5, 0.3, 0.2, 0.0)))
    statistic = np.array([0.0, 1.0, 0.0, 5.0])
    tilts = tilted_settings(base, lambda s, prior: statistic, (0.0, 1.0), "static+x")
    kept, moved = (t(split) for t in tilts)
    assert kept.name == moved.name == "static+x" and kept.score == base.score
    np.testing.assert_allclose(kept.fusion.weights, base.fusion.weights, rtol=1e-12)  # exp∘log
    want = np.array([0.5, 0.3 * np.e, 0.2, 0.0]) / (0.7 + 0.3 * np.e)
    np.testing.assert_allclose(moved.fusion.weights, want, rtol=1e-12)
    uec = Method("uec", FusionConfig("uec", prior=(0.5, 0.3, 0.2, 0.0)), ScoreConfig("uec", 4.0))
    tilted = tilted_settings(uec, lambda s, prior: statistic, (1.0,), "uec+x")[0](split)
    assert tilted.fusion.weights is None
    np.testing.assert_allclose(tilted.fusion.prior, want, rtol=1e-12)


class Tabled(Scores):
    """Tuning figures from a table: dataset -> one figure per setting (a setting returns its
    index when called)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        super().__init__({(name, "tune"): None for name in table})
        self.table = table

    def figure(self, name, role, setting):
        """The tabled figure of the setting."""
        return self.table[name][setting(None)]


def test_choose_across_tunes_the_variant_with_the_setting_on_the_others_alone() -> None:
    settings = [lambda _: 0, lambda _: 1, lambda _: 2]
    plain = Tabled({"a": [0.5, 0.6, 0.1], "b": [0.5, 0.6, 0.1], "c": [0.0, 0.0, 0.0]})
    other = Tabled({"a": [0.7, 0.5, 0.1], "b": [0.1, 0.5, 0.9], "c": [9.0, 9.0, 9.0]})
    variants = {"plain": plain, "other": other}
    # without c, plain's setting 1 (mean 0.6) beats other's best (0.5, settings 1 and 2)
    assert choose_across(variants, settings, "c") == ("plain", 1)
    assert choose_across(variants, settings, "a") == ("other", 2)  # b alone: 0.9
    # c's figures decide nothing when c is left out, nearly everything when it is not: other's
    # settings 1 and 2 tie at 10 / 3 and the first is kept
    assert choose_across(variants, settings, None) == ("other", 1)
    same = {"first": plain, "second": Tabled(plain.table)}
    assert choose_across(same, settings, "c") == ("first", 1)  # ties keep the first variant
