"""A collection's candidate graphs kept on disk, so the next process loads what this one built.

A cache: its files are named for everything a graph depends on, and a write that fails
leaves only no graph kept.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from probembed.store.index import HnswIndex, IndexSettings
from probembed.store.snapshot import Snapshot, Tilt

if TYPE_CHECKING:
    from probembed.store.collection import Collection

#: The files of saved graphs, their centres, and a killed writer's temporary copies
#: (`.hnsw-....faiss.<random>.tmp`, `atomic.replacing`), by name.
GRAPH_FILES = "*hnsw-*.faiss*"


def _graph_path(
    collection: Collection, space: str, snap: Snapshot, settings: IndexSettings, tilt: Tilt | None
) -> Path:
    """Where a collection's graph for one space, build settings, table version, adaptation and
    row order lives: a graph is built on the rows as tilted, and its nodes are positions, which
    only the same rows in the same order mean alike (a warm searcher keeps its positions as
    rows move, so its order need not be a fresh one's)."""
    tilted = "none" if tilt is None else hashlib.sha256(tilt.factors.tobytes()).hexdigest()[:12]
    order = hashlib.sha256(np.ascontiguousarray(snap.row_ids, np.int64).tobytes()).hexdigest()
    build = f"m{settings.m}-e{settings.ef_construction}"
    name = f"hnsw-{space}-{settings.codec}-{build}-v{snap.version}-t{tilted}-r{order[:12]}.faiss"
    return collection.derived_dir / name


def _save_graph(graph: HnswIndex, path: Path) -> None:
    """Keep a graph for the next process, dropping this space's older ones; it is a cache,
    so a directory that cannot be written (a read-only database, a full disk) only means no
    saving."""
    space_prefix = path.name.rsplit("-v", 1)[0]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob(f"{space_prefix}-v*.faiss*"):
            old.unlink(missing_ok=True)
        graph.save(path)
    except (OSError, RuntimeError):  # FAISS reports a failed write as RuntimeError
        return


def removed_graphs(folder: Path) -> int:
    """Remove every graph saved under `folder` (a collection's own folder: on object storage
    its graphs are in this machine's mirror of it, one folder per creation), however old:
    how many files. A graph's codes are its rows' vectors, quantised."""
    removed = 0
    for path in folder.rglob(GRAPH_FILES):
        path.unlink(missing_ok=True)
        removed += 1
    return removed
