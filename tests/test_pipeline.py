"""Pipelines: fit, save and load by path or built-in name, the cache, and damaged directories."""

import json

import numpy as np
import pytest

from probembed.cache import EmbeddingCache
from probembed.gaussian import Gaussian
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline, available_pipelines, builtin_dir
from probembed.pipeline_directory import resolve_pipeline

TEXTS = ["A man plays a guitar.", "Someone is playing an instrument.", "The stock market fell.", ""]


@pytest.fixture(scope="module")
def two_hash_pipeline(toy_pairs):
    """Two hash encoders of different dimension, each with its own Laplace, fused by UEC."""
    specs = [
        ModelSpec("hash", "laplace", encoder_params={"dim": 128}),
        ModelSpec("hash", "perturb", encoder_params={"dim": 96}),
    ]
    return Pipeline.fit(specs, toy_pairs, FusionConfig("uec"), name="toy", cache=False)


def test_pipeline_encodes_fused_unit_norm_gaussians_with_weights(two_hash_pipeline):
    fused = two_hash_pipeline.encode(TEXTS)
    assert fused.gaussian.dim == 128 + 96
    np.testing.assert_allclose(np.linalg.norm(fused.gaussian.mean, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(fused.weights.sum(axis=1), 1.0)
    assert set(fused.explain(0)) == set(two_hash_pipeline.models)


def test_save_load_round_trips_bit_exactly(two_hash_pipeline, tmp_path):
    two_hash_pipeline.save(tmp_path / "pipe")
    loaded = Pipeline.load(tmp_path / "pipe", cache=False)
    before, after = two_hash_pipeline.encode(TEXTS), loaded.encode(TEXTS)
    assert np.array_equal(before.gaussian.mean, after.gaussian.mean)
    assert np.array_equal(before.gaussian.var, after.gaussian.var)
    assert loaded.fingerprint == two_hash_pipeline.fingerprint
    assert loaded.fusion == two_hash_pipeline.fusion


def test_infinite_temperature_is_written_as_strict_json(two_hash_pipeline, tmp_path):
    flat = Pipeline(
        two_hash_pipeline.members, FusionConfig("uec", temperature=float("inf")), cache=False
    )
    flat.save(tmp_path / "pipe")
    text = (tmp_path / "pipe" / "pipeline.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    loaded = Pipeline.load(tmp_path / "pipe", cache=False)
    assert loaded.fusion.temperature == float("inf")
    assert loaded.fingerprint == flat.fingerprint
    weights = loaded.encode(TEXTS[:3]).weights
    np.testing.assert_allclose(weights, 0.5)  # T = inf: uniform weights, no prior


def test_builtin_pipeline_files_are_strict_json():
    for name in available_pipelines():
        text = (builtin_dir() / name / "pipeline.json").read_text()
        config = json.loads(text, parse_constant=lambda c, n=name: pytest.fail(f"{n}: {c}"))
        assert float(config["fusion"]["temperature"]) > 0


def test_cache_serves_repeated_texts_without_re_encoding(two_hash_pipeline, tmp_path, monkeypatch):
    cached = Pipeline(two_hash_pipeline.members, cache=EmbeddingCache(tmp_path))
    first = cached.encode(TEXTS)
    member = cached.members[0]
    monkeypatch.setattr(member, "encode", lambda texts: pytest.fail(f"re-encoded {texts}"))
    again = cached.encode(list(reversed(TEXTS)))
    assert np.array_equal(again.gaussian.mean, first.gaussian.mean[::-1])


def test_cache_mixes_hits_and_misses_in_input_order(tmp_path):
    cache = EmbeddingCache(tmp_path)
    g = Gaussian(np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((3, 2)))
    cache.put("m", ["a", "b", "c"], g)
    found, hits = cache.get("m", ["c", "x", "a"])
    assert found.tolist() == [True, False, True]
    assert hits.mean.tolist() == [[4, 5], [0, 1]]
    assert not cache.get("other-model", ["a"])[0].any()


def test_builtin_pipelines_ship_inside_the_package():
    assert {"default", "default-head", "default-perturb"} <= set(available_pipelines())


def test_unknown_pipeline_names_the_builtins(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="not a built-in.*default") as refused:
        Pipeline.load("no-such-pipeline")
    assert "did you mean" not in str(refused.value)  # nothing close: no guess
    for typo, meant in (("retreival", "retrieval"), ("defualt", "default")):
        with pytest.raises(ValueError, match=f"not a built-in; did you mean '{meant}'"):
            Pipeline.load(typo)  # a typo'd built-in was told only the list
    monkeypatch.chdir(tmp_path)  # "" was the working directory: ". is not a pipeline directory"
    with pytest.raises(ValueError, match=r"no pipeline '': give a built-in name \(\[.*default"):
        Pipeline.load("")


def test_corrupted_pipeline_directories_raise_clear_errors(two_hash_pipeline, tmp_path):
    directory = two_hash_pipeline.save(tmp_path / "pipe")
    config = directory / "pipeline.json"
    original = config.read_text()
    config.write_text("{ not json")
    with pytest.raises(ValueError, match="pipeline.json is corrupted"):
        Pipeline.load(directory)
    config.write_bytes(b"\xff\xfe{}")  # not UTF-8
    with pytest.raises(ValueError, match="pipeline.json is corrupted"):
        Pipeline.load(directory)
    config.write_text(json.dumps({**json.loads(original), "models": []}))
    with pytest.raises(ValueError, match="lists no models"):
        Pipeline.load(directory)
    for outside in ("../elsewhere", "/etc", ".", 3):
        config.write_text(original.replace('"models/0-hash"', json.dumps(outside)))
        with pytest.raises(ValueError, match=r"models\[0\]\.dir must name a sub-directory"):
            Pipeline.load(directory)
    config.write_text(original)
    (directory / "models" / "0-hash" / "state.npz").write_bytes(b"\x00" * 10)
    with pytest.raises(ValueError, match="cannot load estimator"):
        Pipeline.load(directory)
    config.unlink()
    with pytest.raises(ValueError, match="pipeline.json is missing"):
        Pipeline.load(directory)


def test_sum_fusion_of_members_of_different_widths_is_refused_when_made(hash_pipeline):
    widths = {m.encoder.dim for m in hash_pipeline.members}
    assert len(widths) == 2  # the fixture's members are 128 and 96 wide
    with pytest.raises(ValueError, match=r"sum fusion needs members of one dimension, got hash"):
        Pipeline(hash_pipeline.members, FusionConfig("mean", "sum"), cache=False)


def test_a_folder_named_like_a_built_in_without_a_pipeline_does_not_hide_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()  # e.g. a project's own folder, holding no pipeline.json
    assert resolve_pipeline("default") == builtin_dir() / "default"
    (tmp_path / "mine").mkdir()
    with pytest.raises(ValueError, match="mine is not a pipeline directory"):
        Pipeline.load("mine")  # no built-in of that name: the folder is what was meant


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda m: {**m, "scale": float("nan")}, "scale must be finite and >= 0, got nan"),
        (lambda m: {**m, "scale": -1.0}, "scale must be finite and >= 0, got -1.0"),
        (lambda m: {**m, "scale": None}, "scale must be a number, got None"),
        (lambda m: {k: v for k, v in m.items() if k != "params"}, "needs an object with kind"),
        (lambda m: [1], "needs an object with kind"),
        (lambda m: {**m, "params": {**m["params"], "unknown": 1}}, "unknown"),
    ],
)
def test_a_hand_edited_estimator_file_is_refused_naming_it(two_hash_pipeline, tmp_path, edit, says):
    directory = two_hash_pipeline.save(tmp_path / "pipe")
    meta_file = directory / "models" / "0-hash" / "estimator.json"
    meta_file.write_text(json.dumps(edit(json.loads(meta_file.read_text()))))
    with pytest.raises(ValueError, match=rf"0-hash/estimator.json: .*{says}"):
        Pipeline.load(directory)


def test_one_encoder_twice_with_the_same_params_is_refused_before_any_fit():
    """Two estimators of one hash(dim=32) would share a model label: refused before fitting
    (with no pairs, fitting the first member would fail with another error)."""
    specs = [
        ModelSpec("hash", "laplace", encoder_params={"dim": 32}),
        ModelSpec("hash", "head", encoder_params={"dim": 32}),
    ]
    with pytest.raises(ValueError, match=r"model names must be unique, got \['hash\(dim=32\)'"):
        Pipeline.fit(specs, [], cache=False)
