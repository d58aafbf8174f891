"""Fusion and score settings are checked when made, so no saved pipeline can fail to encode."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from probembed.evaluation.harness import Embedded
from probembed.interfaces.cli import app
from probembed.pipeline import AdaptConfig, FusionConfig, Pipeline, ScoreConfig, find_pipeline

runner = CliRunner()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "uecc"}, r"unknown fusion method 'uecc'; valid methods are: uec, mean"),
        ({"mode": "product"}, r"unknown fusion mode 'product'; valid modes are: sum, concat"),
        ({"method": "weighted"}, r"'weighted' needs weights"),
        ({"method": "mean", "temperature": 2.0}, r"temperature not used by fusion method 'mean'"),
        ({"method": "mean", "prior": (1.0, 1.0)}, r"prior not used by fusion method 'mean'"),
        ({"method": "uec", "weights": (1.0, 1.0)}, r"weights not used by fusion method 'uec'"),
        ({"method": "single:minilm", "temperature": 0.5}, r"temperature not used"),
        ({"method": "single:"}, r"names no model"),
        ({"method": "concat", "mode": "sum"}, r"'concat' always concatenates"),
        ({"temperature": -1.0}, r"temperature must be >= 0 \(or inf\)"),
        ({"temperature": float("nan")}, r"temperature must be >= 0"),
        ({"prior": (0.5, -0.5)}, r"prior must be finite, >= 0"),
        ({"method": "weighted", "weights": (0.0, 0.0)}, r"weights must be finite, >= 0"),
        ({"temperature": True}, r"fusion temperature must be a number, got True"),
        ({"prior": [True, 1.0]}, r"fusion prior must be numbers, one per model, got \[True"),
        ({"prior": np.array([True, False])}, r"fusion prior must be numbers"),
    ],
)
def test_bad_fusion_settings_fail_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FusionConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"method": "uec", "temperature": float("inf"), "prior": (0.5, 0.5)},
        {"method": "uec", "temperature": 0.0},
        {"method": "weighted", "weights": (0.2, 0.8), "mode": "sum"},
        {"method": "mean"},
        {"method": "concat"},
        {"method": "single:minilm"},
    ],
)
def test_good_fusion_settings_are_accepted(kwargs):
    assert FusionConfig(**kwargs).method == kwargs["method"]


def test_fusion_names_are_stored_canonically():
    config = FusionConfig(" UEC ", "Concat", prior=np.array([1, 3]))
    assert (config.method, config.mode, config.prior) == ("uec", "concat", (1.0, 3.0))
    json.dumps(config.__dict__)  # a numpy prior would not serialise into pipeline.json


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "cosin"}, r"unknown score 'cosin'; valid scores are: dot, uec"),
        ({"beta": -1.0}, r"beta must be a finite number >= 0"),
        ({"beta": float("inf")}, r"beta must be a finite number >= 0"),
    ],
)
def test_bad_score_settings_fail_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScoreConfig(**kwargs)


def test_settings_that_need_the_model_count_fail_at_pipeline_construction(hash_pipeline):
    members = hash_pipeline.members  # two models
    with pytest.raises(ValueError, match=r"prior must have shape \(2,\)"):
        Pipeline(members, FusionConfig("uec", prior=(1.0, 1.0, 1.0)), cache=False)
    with pytest.raises(ValueError, match=r"weights must have shape \(2,\)"):
        Pipeline(members, FusionConfig("weighted", weights=(1.0,)), cache=False)
    with pytest.raises(ValueError, match=r"unknown model 'minilm'"):
        hash_pipeline.with_fusion(FusionConfig("single:minilm"))


def test_pipeline_and_harness_fuse_through_one_path(hash_pipeline):
    texts = ["a cat sat", "the stock market fell", ""]
    parts = hash_pipeline.encode_members(texts)
    embedded = Embedded(hash_pipeline.models, {"t": parts})
    configs = [
        FusionConfig("uec", temperature=0.5, prior=(0.3, 0.7)),
        FusionConfig("weighted", weights=(0.2, 0.8)),
        FusionConfig(f"single:{hash_pipeline.models[1]}"),
        FusionConfig("mean"),
    ]
    for config in configs:
        piped = hash_pipeline.with_fusion(config).fuse(parts)
        harnessed = embedded.fused("t", config)
        assert np.array_equal(piped.gaussian.mean, harnessed.gaussian.mean), config
        assert np.array_equal(piped.weights, harnessed.weights), config


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory, toy_pairs):
    path = tmp_path_factory.mktemp("pairs") / "pairs.tsv"
    path.write_text("text_a\ttext_b\n" + "\n".join(f"{a}\t{b}" for a, b in toy_pairs) + "\n")
    return path


def _fit(pairs_file, out, *options):
    args = ["fit", "--pairs", str(pairs_file), "--model", "hash", "--model", "wordllama"]
    return runner.invoke(app, [*args, "--out", str(out), *options])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--fusion", "weighted"], "'weighted' needs --weights"),
        (["--fusion", "mean", "--temperature", "2"], "--temperature not used by --fusion"),
        (["--fusion", "uec", "--weights", "1,2"], "--weights not used by --fusion 'uec'"),
        (["--fusion", "weighted", "--weights", "1,2,3"], "--weights must have shape (2,)"),
        (["--fusion", "weighted", "--weights", "1,x"], "--weights"),
        (["--fusion", "sideways"], "valid methods are"),
    ],
)
def test_fit_refuses_settings_that_could_never_encode(pairs_file, tmp_path, options, message):
    out = tmp_path / "p"
    result = _fit(pairs_file, out, *options)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not out.exists()


def test_fit_with_weights_saves_a_pipeline_that_encodes(pairs_file, tmp_path):
    out = tmp_path / "p"
    result = _fit(pairs_file, out, "--fusion", "weighted", "--weights", "1,3")
    assert result.exit_code == 0, result.output
    fused = Pipeline.load(out, cache=False).encode(["a big cat"])
    np.testing.assert_allclose(fused.weights, [[0.25, 0.75]])  # 1:3 normalised, exact in float


@pytest.mark.parametrize(
    ("where", "allowed"),
    [
        ((), "format, name, models, fusion, score"),
        (("fusion",), "method, mode, temperature, prior, weights"),
        (("score",), "name, beta"),
        (("models", 0), "encoder, encoder_params, estimator, dir"),
    ],
)
def test_unknown_key_in_pipeline_json_names_file_key_and_allowed(
    hash_pipeline, tmp_path, where, allowed
):
    directory = hash_pipeline.save(tmp_path / "pipe")
    path = directory / "pipeline.json"
    config = json.loads(path.read_text())
    node = config
    for step in where:
        node = node[step]
    node["temprature"] = 2.0
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError) as caught:
        Pipeline.load(directory, cache=False)
    message = str(caught.value)
    assert str(path) in message
    assert "unknown key 'temprature'" in message
    assert f"allowed keys: {allowed}" in message


def test_bad_fusion_value_in_pipeline_json_names_the_file(hash_pipeline, tmp_path):
    directory = hash_pipeline.save(tmp_path / "pipe")
    path = directory / "pipeline.json"
    config = json.loads(path.read_text())
    config["fusion"]["prior"] = [1.0, 1.0, 1.0]
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"pipeline.json: prior must have shape \(2,\)"):
        Pipeline.load(directory, cache=False)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda c: c["score"].update(beta=float("nan")), "beta must be a finite number"),
        (lambda c: c["fusion"].update(temperature="abc"), "temperature"),
        (lambda c: c["models"][0].update(estimator=["laplace"]), "models[0].estimator must be a"),
        (lambda c: c["models"][0].update(estimator="bayes"), "unknown estimator 'bayes'"),
        (lambda c: c.update(name=123), "name must be a string, got 123"),
        (lambda c: c.update(format=True), "has format True"),
    ],
)
def test_find_pipeline_checks_the_values_a_server_checks_before_it_starts(
    hash_pipeline, tmp_path, edit, says
):
    """Only keys were checked: `serve` started on a NaN beta and answered 503 "failed" for
    good; a list as estimator was a TypeError."""
    directory = hash_pipeline.save(tmp_path / "pipe")
    path = directory / "pipeline.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError) as caught:
        find_pipeline(directory)
    assert str(caught.value).startswith(str(path)) and says in str(caught.value)


def test_a_json_true_is_not_a_number_for_any_setting():
    """float(True) is 1.0: a pipeline.json that says `"beta": true` is refused, not read as 1."""
    with pytest.raises(ValueError, match="score beta must be a number, got False"):
        ScoreConfig("uec", beta=False)
    with pytest.raises(ValueError, match="adapt gamma must be a number, got True"):
        AdaptConfig(gamma=True)
    assert ScoreConfig("uec", beta=np.float32(2)).beta == 2.0  # numpy numbers still are


@pytest.mark.parametrize(
    "kind, params, message",
    [
        ("laplace", {"prior_precision": 0}, "laplace prior_precision must be a finite number > 0"),
        ("laplace", {"prior_precision": "1"}, "laplace prior_precision must be a finite number"),
        ("laplace", {"prior_precision": float("nan")}, "prior_precision must be a finite"),
        ("laplace", {"temperature": -1.0}, "laplace temperature must be a finite number > 0"),
        ("laplace", {"batch_size": 0}, "laplace batch_size must be a whole number > 0"),
        ("laplace", {"batch_size": True}, "laplace batch_size must be a whole number > 0"),
        ("laplace", {"holdout": 1.0}, r"laplace holdout must be a number in \(0, 1\)"),
        ("laplace", {"seed": 1.5}, "laplace seed must be a whole number"),
        ("laplace", {"seed": -1}, "laplace seed must be a whole number >= 0, got -1"),
        ("laplace", {"calibrate": "yes"}, "laplace calibrate must be true or false"),
        ("head", {"hidden": 0}, "head hidden must be a whole number > 0"),
        ("head", {"lr": -0.1}, "head lr must be a finite number >= 0"),
        ("perturb", {"views": 1}, "perturb views must be a whole number >= 2"),
        ("perturb", {"rate": 1.0}, r"perturb rate must be a number in \[0, 1\), got 1.0"),
    ],
)
def test_bad_estimator_settings_fail_when_it_is_made(kind, params, message):
    """Not minutes into a Fisher pass (λ = 0 failed only in the calibration after it, and
    λ = "1" with a TypeError comparing str and int)."""
    from probembed.encoders import get_encoder
    from probembed.uncertainty import make_estimator

    with pytest.raises(ValueError, match=message):
        make_estimator(kind, get_encoder("hash", dim=16), **params)
