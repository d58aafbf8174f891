"""Running a command without root's right to write or read any file, and folders that belong
to another user: what the permission tests need where they run as root (chmod alone does not
bind root)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

#: A user id that owns nothing of the tests' (nobody, on most systems).
ANOTHER_UID = 65534


def unprivileged() -> list[str]:
    """What runs a command as root runs it without root's right to read or write any file
    (nothing for another user): a file of mode 000 is then unreadable to it, a folder of
    another user's unwritable."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: every file is readable and writable")
    command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    tried = subprocess.run([*command, "true"], capture_output=True, text=True, timeout=60)
    if tried.returncode != 0:
        pytest.skip(f"cannot drop root's rights to files here: {tried.stderr.strip()[:200]}")
    return command


@contextlib.contextmanager
def owned_by_another(folder: Path) -> Iterator[None]:
    """The folder and everything in it another user's (as root) or unwritable (otherwise),
    for the block: a command run `unprivileged` cannot write there."""
    paths = [folder, *folder.rglob("*")]
    root = os.geteuid() == 0
    modes = {path: path.stat().st_mode for path in paths}
    try:
        for path in paths:
            if root:
                os.chown(path, ANOTHER_UID, ANOTHER_UID)
            elif path.is_dir():
                path.chmod(0o555)
        yield
    finally:
        for path in paths:
            if root:
                os.chown(path, 0, 0)
            path.chmod(modes[path] & 0o7777)
