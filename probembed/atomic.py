"""Atomic file writes: a crash leaves either the old file or the new one, never half of one.

Each write goes to a uniquely named temporary file in the target's directory (so two writers
never share one and the rename stays on one file system), is fsynced, renamed over the target,
and the directory is fsynced so the rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary path to write; on success it atomically replaces `path`."""
    path = Path(path)
    tmp = _create_unique(path)
    try:
        yield tmp
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` with `data` atomically."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def save_npz(path: str | os.PathLike, **arrays: np.ndarray) -> None:
    """Replace `path` with a compressed .npz of the arrays atomically (loads with np.load)."""
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def _create_unique(path: Path) -> Path:
    """An empty new file beside `path` with a random name; umask-honouring mode, unlike mkstemp."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:  # 2**-64 per try: another writer drew the same name
            continue
        return tmp


def fsync_file(path: Path) -> None:
    """Flush the file's data to disk before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str | os.PathLike) -> None:
    """Flush the directory entry of a rename; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows, which has no directory file descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory; the rename still happened
        pass
    finally:
        os.close(fd)


def sibling_dir(target: str | os.PathLike, tag: str) -> Path:
    """A new empty directory beside target with a unique name, so two writers never collide."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.{tag}-{secrets.token_hex(6)}")
    staged.mkdir()
    return staged


def replace_dir(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Swap a fully written directory in for target; the old one is removed afterwards.

    On Linux the two are exchanged in one atomic rename (renameat2 RENAME_EXCHANGE), so a
    reader or a crash at any moment finds the old directory or the new one at `target`. Where
    that call is missing, the old directory is renamed aside first, which leaves a moment
    without `target` (both copies survive it as hidden siblings).
    """
    staged, target = Path(staged), Path(target)
    for path in sorted(staged.rglob("*"), reverse=True):
        if path.is_dir():
            fsync_dir(path)
    fsync_dir(staged)
    if target.is_dir() and _exchange(staged, target):
        fsync_dir(target.parent)
        shutil.rmtree(staged, ignore_errors=True)  # it now holds the old directory
        return
    retired = []
    while True:
        try:
            os.rename(staged, target)  # atomic when target is absent or an empty directory
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        aside = target.with_name(f".{target.name}.old-{secrets.token_hex(6)}")
        try:
            os.rename(target, aside)
        except FileNotFoundError:  # another writer moved it first: try again
            continue
        retired.append(aside)
    fsync_dir(target.parent)
    for old in retired:
        shutil.rmtree(old, ignore_errors=True)


#: renameat2(2) arguments: paths relative to the working directory, swap the two names.
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """libc's renameat2, where the C library has it (glibc >= 2.28), else None."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths; False where the system or file system cannot."""
    call = _renameat2()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOENT, errno.EPERM):
        return False  # no RENAME_EXCHANGE here, or b vanished: the rename path handles it
    raise OSError(code, os.strerror(code), str(b))
