"""Saving a pipeline is all or nothing: a failed or concurrent save never leaves half of one."""

import threading

import numpy as np
import pytest

from probembed.pipeline import FusionConfig, Pipeline

TEXTS = ["A man plays a guitar.", "The stock market fell.", ""]


def _encode(directory):
    return Pipeline.load(directory, cache=False).encode(TEXTS)


def test_a_save_that_fails_midway_leaves_the_old_pipeline_loadable(
    hash_pipeline, tmp_path, monkeypatch
):
    directory = hash_pipeline.save(tmp_path / "pipe")
    before = _encode(directory)
    other = hash_pipeline.with_fusion(FusionConfig("mean"))

    def crash(target):
        """Write part of the state, then fail as a full disk would."""
        target.mkdir(parents=True)
        (target / "state.npz").write_bytes(b"\x00" * 10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(other.members[1], "save", crash)
    with pytest.raises(OSError, match="No space left"):
        other.save(directory)
    after = _encode(directory)
    assert np.array_equal(after.gaussian.mean, before.gaussian.mean)
    assert np.array_equal(after.gaussian.var, before.gaussian.var)
    assert Pipeline.load(directory, cache=False).fusion.method == "uec"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no staging left behind


def test_saving_over_a_pipeline_replaces_it_whole(hash_pipeline, tmp_path):
    directory = hash_pipeline.save(tmp_path / "pipe")
    (directory / "models" / "9-stale").mkdir()
    hash_pipeline.with_fusion(FusionConfig("mean")).save(directory)
    assert Pipeline.load(directory, cache=False).fusion.method == "mean"
    assert sorted(p.name for p in (directory / "models").iterdir()) == ["0-hash", "1-hash"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_two_writers_to_one_directory_both_finish_and_one_wins(hash_pipeline, tmp_path):
    directory = tmp_path / "pipe"
    configs = {"uec": FusionConfig("uec"), "mean": FusionConfig("mean")}
    errors = []

    def writer(config):
        try:
            for _ in range(8):
                hash_pipeline.with_fusion(config).save(directory)
        except Exception as exc:  # collected: an exception in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(c,)) for c in configs.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    loaded = Pipeline.load(directory, cache=False)
    assert loaded.fusion in configs.values()
    reference = hash_pipeline.with_fusion(loaded.fusion).encode(TEXTS)
    assert np.array_equal(loaded.encode(TEXTS).gaussian.mean, reference.gaussian.mean)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_save_refuses_a_directory_that_is_not_a_pipeline(hash_pipeline, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no pipeline.json"):
        hash_pipeline.save(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_swap_never_leaves_the_target_missing(hash_pipeline, tmp_path, monkeypatch):
    from probembed import atomic

    target = hash_pipeline.save(tmp_path / "pipe")
    if atomic._renameat2() is None:
        pytest.skip("no renameat2 in this C library: the fallback swap has a gap, documented")
    moved_away = []
    real_rename = atomic.os.rename

    def rename(src, dst):
        moved_away.append(src)  # the fallback renames the old target aside: a moment without it
        real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", rename)
    hash_pipeline.save(target)
    assert moved_away == []  # one atomic exchange instead
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]
    assert Pipeline.load(target, cache=False).fingerprint == hash_pipeline.fingerprint


STAGE_AND_WAIT = """
import sys, time
from probembed import atomic
with atomic.staging_dir(sys.argv[1], "saving") as staged:
    (staged / "weights.bin").write_bytes(b"\\x00" * 4096)
    print(staged, flush=True)
    time.sleep(600)  # the test kills the process here, mid-save
"""


def test_a_killed_save_leaves_staging_that_the_next_save_removes_once_nobody_holds_it(
    hash_pipeline, tmp_path
):
    import os
    import subprocess
    import sys

    from probembed import atomic

    if atomic.hold(tmp_path) is None:
        pytest.skip("no directory locks on this system or file system: nothing is swept")
    target = tmp_path / "pipe"
    script = tmp_path.parent / f"{tmp_path.name}-stage.py"
    script.write_text(STAGE_AND_WAIT)
    writer = subprocess.Popen(
        [sys.executable, str(script), str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        staged = type(target)(writer.stdout.readline().strip())
        assert staged.parent == tmp_path and (staged / "weights.bin").is_file()
        old = staged.stat().st_mtime - 3600  # past the grace a just-made directory gets
        os.utime(staged, (old, old))
        hash_pipeline.save(target)
        assert staged.is_dir()  # its writer is alive and holds it: left alone
    finally:
        writer.kill()
        writer.wait()
    assert staged.is_dir()  # a killed writer cleans nothing up
    hash_pipeline.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_saving_through_a_symbolic_link_keeps_the_link_and_replaces_what_it_points_to(
    hash_pipeline, tmp_path
):
    real = hash_pipeline.save(tmp_path / "real")
    link = tmp_path / "link"
    link.symlink_to(real)
    hash_pipeline.with_fusion(FusionConfig("mean")).save(link)
    assert link.is_symlink() and link.resolve() == real
    assert Pipeline.load(real, cache=False).fusion.method == "mean"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_a_pipeline_directory_named_from_home_saves_and_loads_there(
    hash_pipeline, tmp_path, monkeypatch
):
    """`Pipeline.save("~/p")` made a folder named `~` in the working directory, and
    `Pipeline.load("~/p")` (a quoted `--pipeline '~/p'`, a config file) said no such pipeline."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    saved = hash_pipeline.save("~/pipes/hash")
    assert saved == tmp_path / "home" / "pipes" / "hash" and not (tmp_path / "~").exists()
    assert Pipeline.load("~/pipes/hash", cache=False).fingerprint == hash_pipeline.fingerprint
    with pytest.raises(ValueError, match="pipeline directory '~no-such-user-x/p': "):
        Pipeline.load("~no-such-user-x/p")
