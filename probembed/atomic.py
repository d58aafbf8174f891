"""Atomic file writes: a crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import os
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
