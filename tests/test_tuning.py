"""Tuning drops the members its weights ignore, and that changes no fused vector or score."""

import json

import numpy as np
import pytest

from probembed.evaluation.tuning import without_unweighted
from probembed.pipeline import CONFIG_FILE, FusionConfig, ModelSpec, Pipeline, builtin_dir
from probembed.scoring import score_matrix

WORDS = ["cell", "gene", "protein", "heart", "risk", "drug", "trial", "dose", "bone", "virus"]
#: Paraphrase-like pairs (one word swapped), made here so the test needs no data set.
PAIRS = [
    (f"the {a} and the {b} in study {i}", f"the {a} and a {c} in study {i}")
    for i, (a, b, c) in enumerate(
        zip(WORDS * 4, WORDS[3:] * 4 + WORDS[:3] * 4, WORDS[5:] * 8, strict=True)
    )
]
TEXTS = ["the gene and the drug", "blood risk", "a trial of the dose in the liver", "virus"]
DIMS = (64, 48, 32)


@pytest.fixture(scope="module")
def members():
    """Three calibrated hashing models of different dimensions (real fitted estimators)."""
    specs = [ModelSpec("hash", "laplace", encoder_params={"dim": d}) for d in DIMS]
    return Pipeline.fit(specs, PAIRS, cache=False).members


@pytest.mark.parametrize("temperature", [0.5, 1.0, float("inf")])
def test_a_zero_prior_member_is_dropped_and_nothing_else_moves(members, temperature):
    full = Pipeline(
        members,
        cache=False,
        fusion=FusionConfig("uec", temperature=temperature, prior=(0.6, 0, 0.2)),
    )
    pruned = without_unweighted(full)
    assert pruned.models == (full.models[0], full.models[2])
    assert pruned.fusion.prior == pytest.approx((0.75, 0.25), abs=1e-15)  # 0.6/0.8, 0.2/0.8
    before, after = full.encode(TEXTS), pruned.encode(TEXTS)
    assert np.all(before.weights[:, 1] == 0)
    kept = np.r_[0 : DIMS[0], DIMS[0] + DIMS[1] : sum(DIMS)]  # the dropped block removed
    # The prior is rescaled by 1/0.8 before fusion normalises it again: weights may move by an
    # ulp or two of float64, far below the float32 the fused moments are stored in.
    np.testing.assert_allclose(after.weights, before.weights[:, [0, 2]], rtol=1e-14)
    np.testing.assert_allclose(after.gaussian.mean, before.gaussian.mean[:, kept], rtol=1e-6)
    np.testing.assert_allclose(after.gaussian.var, before.gaussian.var[:, kept], rtol=1e-6)
    for score in ("uec", "dot", "csd"):  # the dropped block is 0 in mean and variance
        old = score_matrix(before.gaussian, before.gaussian, score, beta=4.0)
        new = score_matrix(after.gaussian, after.gaussian, score, beta=4.0)
        np.testing.assert_allclose(new, old, rtol=1e-6, atol=1e-7)  # float32 inputs


def test_zero_static_weights_drop_members(members):
    weighted = Pipeline(members, cache=False, fusion=FusionConfig("weighted", weights=(0, 3, 1)))
    pruned = without_unweighted(weighted)
    assert pruned.models == weighted.models[1:]
    assert pruned.fusion.weights == (0.75, 0.25)


@pytest.mark.parametrize(
    "fusion",
    [
        FusionConfig("uec"),
        FusionConfig("mean"),
        FusionConfig("uec", prior=(1, 2, 3)),
        FusionConfig("single:hash(dim=48)"),
    ],
)
def test_fusions_that_weight_every_member_keep_them_all(members, fusion):
    pipeline = Pipeline(members, fusion, cache=False)
    assert without_unweighted(pipeline) is pipeline


@pytest.mark.parametrize(
    "name", sorted(p.parent.name for p in builtin_dir().glob("*/" + CONFIG_FILE))
)
def test_no_builtin_ships_a_member_it_never_weights(name):
    config = json.loads((builtin_dir() / name / CONFIG_FILE).read_text())
    fusion = config["fusion"]
    for key in ("prior", "weights"):
        if fusion[key] is not None:
            assert len(fusion[key]) == len(config["models"])
            assert min(fusion[key]) > 0, f"{name}: {key} {fusion[key]} weights a member 0"
