"""Atomic file writes: a crash leaves either the old file or the new one, never half of one.

Each write goes to a uniquely named temporary file in the target's directory (so two writers
never share one and the rename stays on one file system), is fsynced, renamed over the target,
and the directory is fsynced so the rename itself survives a power cut. A target that is a
symbolic link has its target replaced (the link stays), and one that is no regular file (a
named pipe, a device such as /dev/stdout's) is refused: a rename would put a file in its place.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import math
import os
import re
import secrets
import shutil
import stat
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

#: What `file_kind` calls each kind of file that is not a regular one, by the test that finds it.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_kind(mode: int) -> str:
    """The words for a file that is not a regular one, by its mode (`os.stat`'s st_mode), for
    messages that say why a path is not read or not written."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def replaced_path(path: str | os.PathLike) -> Path:
    """The file a write to `path` replaces: a symbolic link's target (replacing the link cut
    it, and left its target as it was), else `path`; one that is there and no regular file
    is an OSError naming it (replaced, /dev/stdout became a file in /dev)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # through links
    except (FileNotFoundError, NotADirectoryError):  # not there yet (a link's target too)
        return Path(os.path.realpath(path))
    if not stat.S_ISREG(mode):
        raise OSError(f"{path} is {file_kind(mode)}, not a file to replace")
    return Path(os.path.realpath(path))


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary path to write; on success it atomically replaces `path` (a
    link's target: `replaced_path`)."""
    path = replaced_path(path)
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
        # a **dict may reach the stub's `allow_pickle: bool`; every value here is an array
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]


def load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of an .npz `save_npz` wrote; a file that is no zip archive (damaged,
    replaced) is a ValueError saying so, where numpy spoke of pickled data and allow_pickle."""
    damaged = f"{path} is not an .npz archive: the file is damaged or was replaced"
    with open(path, "rb") as fh:  # a missing or unreadable file is that OSError, not "damaged"
        if not zipfile.is_zipfile(fh):
            raise ValueError(damaged)
        fh.seek(0)
        try:
            with np.load(fh, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
        except (zipfile.BadZipFile, EOFError) as exc:  # a zip cut short
            raise ValueError(f"{damaged} ({exc})") from exc


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


#: A staging directory's name: `.<target>.<tag>-<12 hex>`, beside its target.
_STAGED = r"\.{name}\.[a-z]+-[0-9a-f]{{12}}"
#: A staging directory younger than this is never swept: its writer may not have locked it yet.
_SWEEP_AFTER_SECONDS = 60.0


@contextlib.contextmanager
def staging_dir(target: str | os.PathLike, tag: str) -> Iterator[Path]:
    """A new empty directory beside target (the real one, if target is a symbolic link), held
    for this writer and removed on exit unless renamed away; one a killed writer left (up to
    a whole model's size) is removed first."""
    target = resolved(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep(target)
    staged = target.with_name(f".{target.name}.{tag}-{secrets.token_hex(6)}")
    staged.mkdir()
    held = hold(staged)
    try:
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)
        if held is not None:
            os.close(held)


def resolved(target: str | os.PathLike) -> Path:
    """The directory a symbolic link points to (replacing the link itself would cut it), else
    target as an absolute path (`.` has no name to stage beside)."""
    target = Path(target)
    return target.resolve() if target.is_symlink() else target.absolute()


def _fcntl() -> Any:
    """The fcntl module, or None where the system has none (Windows): nothing is locked."""
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


class LockBusy(TimeoutError):
    """A lock its holder kept past the time a caller would wait (`locked`'s `wait`)."""

    def __init__(self, lock_file: Path, holder: str, waited: float) -> None:
        #: What the holder wrote of itself in the lock file ("" when it wrote nothing).
        self.holder, self.waited = holder, waited
        super().__init__(f"{lock_file} is held by {holder or 'another process'}")


#: Longest pause between two tries of a lock waited for with a time limit or progress lines
#: (flock itself has neither): a waiter goes on this soon after the holder lets go. At 0.5 s
#: every CLI write queued behind another's plan started up to half a second late; a try is
#: one system call.
_LOCK_POLL_SECONDS = 0.05


@contextlib.contextmanager
def locked(
    lock_file: Path,
    holder: str = "",
    wait: float | None = None,
    waiting: Callable[[str], None] | None = None,
    still: Callable[[float], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on lock_file (made if absent) while the block runs, against
    other processes and other threads of this one alike (flock locks an open file).

    A holder may remove the file (a collection's drop removes its folder): a waiter then got
    the lock of a file no longer there while a newcomer locked the new one, and both ran.
    Locked, the file is checked to be the one at the path still, else locked afresh.
    `holder`: what this holder says of itself, kept in the file while it holds it, so that
    one who finds it busy can say what it waits for: `waiting` is told it, once. `wait`: give
    up after this many seconds (None: never) with `LockBusy`. `still`: told the seconds waited
    so far at each try while it waits (the lock is then tried every `_LOCK_POLL_SECONDS`, with
    no time limit too), so a waiter can say that it still waits."""
    fcntl = _fcntl()
    told = False
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_file, "a+") as handle:
            if fcntl is not None:
                if not _tried(fcntl, handle):
                    if waiting is not None and not told:
                        waiting(_held_by(handle))
                        told = True
                    _wait_for(fcntl, handle, lock_file, deadline, wait, still)
                if not _still_there(handle.fileno(), lock_file):
                    continue
            if holder:
                _say_held(handle, holder)
            try:
                yield
            finally:
                if holder:
                    _say_held(handle, "")
            return


def _tried(fcntl: Any, handle: Any) -> bool:
    """Whether the lock was free, and is now this handle's."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _wait_for(
    fcntl: Any,
    handle: Any,
    lock_file: Path,
    deadline: float | None,
    wait: float | None,
    still: Callable[[float], None] | None,
) -> None:
    """Take the lock once its holder lets it go; with a `deadline` (time.monotonic), raise
    `LockBusy` once that passed with the lock still held (flock has no time limit: tried
    again at most every `_LOCK_POLL_SECONDS`); `still` is told the seconds waited at each
    try."""
    if deadline is None and still is None:
        fcntl.flock(handle, fcntl.LOCK_EX)
        return
    start = time.monotonic()
    while not _tried(fcntl, handle):
        now = time.monotonic()
        left = math.inf if deadline is None else deadline - now
        if left <= 0:
            raise LockBusy(lock_file, _held_by(handle), wait or 0.0)
        if still is not None:
            still(now - start)
        time.sleep(min(left, _LOCK_POLL_SECONDS))


def _held_by(handle: Any) -> str:
    """What the lock's holder wrote of itself ("" for nothing)."""
    handle.seek(0)
    return str(handle.read()).strip()


def _say_held(handle: Any, holder: str) -> None:
    """Put what the lock's holder says of itself in the file, in place of what was there."""
    handle.seek(0)
    handle.truncate()
    handle.write(holder)
    handle.flush()


def _still_there(descriptor: int, path: Path) -> bool:
    """Whether an open file is the file at `path` (not removed or replaced since it opened)."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def hold(path: Path) -> int | None:
    """An open descriptor holding an exclusive lock on a directory or file for the writer's
    lifetime (the kernel releases it when the process ends, killed too); None where another
    process holds it, or the system or file system has no such locks (nothing is swept
    there)."""
    fcntl = _fcntl()
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _sweep(target: Path) -> None:
    """Remove staging and retired directories beside target that no live writer holds."""
    pattern = re.compile(_STAGED.format(name=re.escape(target.name)))
    try:
        siblings = [p for p in target.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return
    for sibling in siblings:
        try:
            if time.time() - sibling.lstat().st_mtime < _SWEEP_AFTER_SECONDS:
                continue
            held = hold(sibling)
        except OSError:  # gone already, or not ours to open
            continue
        if held is None:  # a live writer holds it (or locks do not work here)
            continue
        try:
            shutil.rmtree(sibling, ignore_errors=True)
        finally:
            os.close(held)


def fsync_tree(root: Path) -> None:
    """Flush every file and directory below root, then root, so a rename of root that
    survives a power cut finds them whole (a fetched mirror's files were never flushed)."""
    for path in sorted(root.rglob("*"), reverse=True):
        (fsync_dir if path.is_dir() else fsync_file)(path)
    fsync_dir(root)


def replace_dir(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Swap a fully written directory in for target; the old one is removed afterwards.

    On Linux the two are exchanged in one atomic rename (renameat2 RENAME_EXCHANGE), so a
    reader or a crash at any moment finds the old directory or the new one at `target`. Where
    that call is missing, the old directory is renamed aside first, which leaves a moment
    without `target` (both copies survive it as hidden siblings).
    """
    staged, target = Path(staged), resolved(target)
    fsync_tree(staged)
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
