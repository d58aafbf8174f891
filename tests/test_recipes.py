"""The built-ins' recipe: a reproducible pair sample and every candidate member."""

import pytest

from probembed.evaluation.recipes import (
    CANDIDATE_MODELS,
    fit_candidates,
    hashing_pipeline,
    sample_pairs,
)
from probembed.pipeline import Pipeline, available_pipelines


def test_pair_sample_is_seeded_sized_and_drawn_from_every_file(datasets):
    pairs_dir = datasets / "pairs"
    first, again = sample_pairs(pairs_dir, 500), sample_pairs(pairs_dir, 500)
    assert first == again and len(first) == 500
    assert sample_pairs(pairs_dir, 500, seed=1) != first
    every = sample_pairs(pairs_dir, 10**9)
    assert set(first) <= set(every)


def test_files_given_are_sampled_in_their_order_as_a_folder_is_in_name_order(tmp_path):
    """`probembed fit --pairs A --pairs B` samples as the built-ins' recipe samples a folder."""
    for name, n in (("a.tsv", 30), ("b.tsv", 20)):
        rows = [f"{name} first {i}\t{name} second {i}" for i in range(n)]
        (tmp_path / name).write_text("text_a\ttext_b\n" + "\n".join(rows) + "\n")
    files = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    assert sample_pairs(files, 25, seed=3) == sample_pairs(tmp_path, 25, seed=3)
    assert len(sample_pairs(files, 25)) == 25 and len(sample_pairs(files, 10**9)) == 50
    assert sample_pairs(files[::-1], 10**9)[0] == ("b.tsv first 0", "b.tsv second 0")


def test_an_empty_pairs_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no positive pairs in"):
        sample_pairs(tmp_path)


def test_candidates_hold_every_model_the_shipped_builtins_were_chosen_from(datasets):
    pairs = sample_pairs(datasets / "pairs", 40)
    fitted = fit_candidates(["default-perturb"], pairs, cache=False)["default-perturb"]
    assert fitted.models == CANDIDATE_MODELS
    for name in available_pipelines():
        assert set(Pipeline.load(name, cache=False).models) <= set(CANDIDATE_MODELS)


def test_the_hashing_pipeline_is_one_fit_wherever_it_is_built():
    """The tests' pydoc pipeline and the store benchmarks each fitted their own copy of this
    recipe: hashing members of the widths asked, each calibrated, fused by uec, and every call
    the same pipeline (a benchmark's processes, a fixture and a test hold one fingerprint)."""
    first, again = hashing_pipeline((64, 48)), hashing_pipeline((64, 48))
    assert first.fingerprint == again.fingerprint and first.name == "hash"
    assert [m.encoder.name for m in first.members] == ["hash", "hash"]
    assert [m.encoder.dim for m in first.members] == [64, 48]
    assert all(m.params["calibrate"] and m.scale not in (0.0, 1.0) for m in first.members)
    assert first.fusion.method == "uec"
    assert hashing_pipeline((64, 32), name="other").fingerprint != first.fingerprint
