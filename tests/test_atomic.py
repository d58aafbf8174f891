"""Atomic writes: unique temporary names, nothing half-written, compressed .npz."""

import os
import re
import shutil
import stat
import threading
import time
from pathlib import Path

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


def _blocked_on(inode: int, seconds: float = 30.0) -> bool:
    """Whether a flock waiter blocks on the file of `inode` (Linux's /proc/locks lists it with
    "->"), looked for until it does or `seconds` pass: ordering, not timing, is asserted."""
    entry = re.compile(rf"->\s+FLOCK\s.*:{inode}\s")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(entry.search(line) for line in Path("/proc/locks").read_text().splitlines()):
            return True
        time.sleep(0.01)
    return False


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads Linux's /proc/locks")
def test_a_waiter_on_a_lock_file_its_holder_removed_waits_for_the_new_ones_holder(tmp_path):
    """A collection's drop removes its folder, write.lock in it, while it holds that lock: a
    writer waiting on the old file got its lock, a newcomer locked the new file, and both
    ran. The waiter now finds its file gone and waits for the new file's holder."""
    lock = tmp_path / "own" / "c" / "write.lock"
    log: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def waiter() -> None:
        with atomic.locked(lock):
            log.append("waiter in")

    def newcomer() -> None:
        with atomic.locked(lock):
            log.append("newcomer in")
            holding.set()
            release.wait(30)
            log.append("newcomer out")

    first, second = threading.Thread(target=waiter), threading.Thread(target=newcomer)
    with atomic.locked(lock):
        first.start()
        assert _blocked_on(os.stat(lock).st_ino)
        shutil.rmtree(lock.parent)  # what a drop does under the lock
        second.start()
        assert holding.wait(30)
        new = os.stat(lock).st_ino
    waits = _blocked_on(new)  # the waiter woke on the removed file and locks the new one
    release.set()
    first.join(30)
    second.join(30)
    assert waits and log == ["newcomer in", "newcomer out", "waiter in"], log


def test_a_waiter_is_told_who_holds_the_lock_and_gives_up_at_its_limit(tmp_path):
    """A second writer waited without a word for as long as the first ran. It is now told
    what the holder wrote of itself, once, and with a limit it gives up naming the holder;
    the note goes when its holder lets go."""
    lock = tmp_path / "plan.lock"
    told: list[str] = []
    with (
        atomic.locked(lock, "chunked sync of docs (pid 1)"),
        pytest.raises(atomic.LockBusy) as busy,
        atomic.locked(lock, "a sync", wait=0.05, waiting=told.append),  # another open file
    ):
        pass
    assert told == ["chunked sync of docs (pid 1)"]
    assert busy.value.holder == "chunked sync of docs (pid 1)"
    assert lock.read_text() == ""
    with atomic.locked(lock, "a sync", wait=0, waiting=told.append):
        assert lock.read_text() == "a sync"
    assert told == ["chunked sync of docs (pid 1)"]  # free: nothing to wait for


def test_a_waiter_with_a_limit_tries_the_lock_every_twentieth_of_a_second(tmp_path, monkeypatch):
    """flock has no time limit, so a waiter with one (or with progress lines: every CLI write
    that plans) tries the lock again and again; it paused 0.5 s between tries and went on up
    to half a second after its holder let go. Read from the pauses it asks for: none is
    longer than 0.05 s."""
    lock = tmp_path / "plan.lock"
    pauses: list[float] = []
    sleep = time.sleep

    def paused(seconds: float) -> None:
        pauses.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(atomic.time, "sleep", paused)
    with (
        atomic.locked(lock, "chunked sync of docs (pid 1)"),
        pytest.raises(atomic.LockBusy),
        atomic.locked(lock, "a sync", wait=0.3),  # another open file: it waits, then gives up
    ):
        pass
    assert pauses and max(pauses) <= 0.05, pauses


def test_a_link_has_its_target_replaced_and_stays_a_link(tmp_path):
    """The rename replaced the link with a file and left its target as it was."""
    (tmp_path / "target.json").write_bytes(b"old")
    link = tmp_path / "link.json"
    link.symlink_to("target.json")
    atomic.write_bytes(link, b"new")
    assert link.is_symlink() and os.readlink(link) == "target.json"
    assert (tmp_path / "target.json").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "target.json"]


def test_a_named_pipe_is_refused_not_replaced_by_a_file(tmp_path):
    """A rename over a named pipe (or /dev/stdout's device) put a regular file in its place."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=f"{re.escape(str(fifo))} is a named pipe, not a file"):
        atomic.write_bytes(fifo, b"x")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]
