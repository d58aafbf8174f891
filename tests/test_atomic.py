"""Atomic writes: unique temporary names, nothing half-written, compressed .npz."""

import os

import numpy as np
import pytest

from probembed import atomic


def test_two_writers_get_different_temporary_files(tmp_path):
    target = tmp_path / "state.npz"
    with atomic.replacing(target) as first, atomic.replacing(target) as second:
        assert first != second
        assert first.parent == second.parent == tmp_path
        first.write_bytes(b"one")
        second.write_bytes(b"two")
    assert target.read_bytes() == b"one"  # the outer writer renamed last
    assert [p.name for p in tmp_path.iterdir()] == ["state.npz"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "pipeline.json"
    atomic.write_bytes(target, b"old")
    with pytest.raises(RuntimeError, match="disk on fire"), atomic.replacing(target) as tmp:
        tmp.write_bytes(b"half of the n")
        raise RuntimeError("disk on fire")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["pipeline.json"]


def test_written_files_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic.write_bytes(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644  # not mkstemp's private 0o600


def test_save_npz_round_trips_bit_exactly_and_compresses(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"zeros": np.zeros((256, 512), np.float32), "x": rng.normal(size=(8, 3))}
    atomic.save_npz(tmp_path / "a.npz", **arrays)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as data:
        assert sorted(data.files) == ["x", "zeros"]
        for key, value in arrays.items():
            assert data[key].dtype == value.dtype and np.array_equal(data[key], value)
    raw = sum(a.nbytes for a in arrays.values())
    assert (tmp_path / "a.npz").stat().st_size < raw / 10  # 512 kB of zeros deflate to ~1 kB


def test_a_directory_swapped_in_has_every_file_flushed_first(tmp_path, monkeypatch):
    """Files written plainly into a staging folder (a fetched mirror) were never flushed: a
    power cut after the swap could leave them empty."""
    flushed = []
    monkeypatch.setattr(atomic, "fsync_file", lambda path: flushed.append(path.name))
    with atomic.staging_dir(tmp_path / "mirror", "fetching") as staged:
        (staged / "a").write_bytes(b"1")
        (staged / "sub").mkdir()
        (staged / "sub" / "b").write_bytes(b"2")
        atomic.replace_dir(staged, tmp_path / "mirror")
    assert sorted(flushed) == ["a", "b"]
    assert (tmp_path / "mirror" / "sub" / "b").read_bytes() == b"2"
