"""Atomic file writes: a crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

import numpy as np


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a sibling temporary file, then rename it over the target."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    """np.savez to a temporary file, then rename it over the target."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory's entries (names, renames) to disk, where the platform allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open a directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sibling_dir(target: str | os.PathLike, tag: str) -> Path:
    """A new empty directory beside target with a unique name, so two writers never collide."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.{tag}-{uuid.uuid4().hex[:12]}")
    staged.mkdir()
    return staged


def replace_dir(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Swap a fully written (and flushed) directory in for target by rename; old one removed.

    A crash before the rename keeps the old target whole; the old one is moved aside, never
    edited. Concurrent writers each win in turn: the last rename is what remains.
    """
    staged, target = Path(staged), Path(target)
    for path in sorted(staged.rglob("*"), reverse=True):
        if path.is_dir():
            fsync_dir(path)
    fsync_dir(staged)
    retired = []
    while True:
        try:
            os.rename(staged, target)  # atomic when target is absent or an empty directory
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        aside = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
        try:
            os.rename(target, aside)
        except FileNotFoundError:  # another writer moved it first: try again
            continue
        retired.append(aside)
    fsync_dir(target.parent)
    for old in retired:
        shutil.rmtree(old, ignore_errors=True)
