"""On-disk embedding cache, so repeated runs over the same texts never re-encode them.

One SQLite file holds every model's Gaussians, keyed by (estimator fingerprint, SHA-256 of the
text). The fingerprint covers the model, its package version and the fitted estimator state, so
a refit or an upgrade never serves stale vectors. SQLite makes concurrent readers and an
interrupted writer safe.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import platformdirs

from probembed.gaussian import Gaussian

CACHE_ENV = "PROBEMBED_CACHE_DIR"
_CHUNK = 500


def default_cache_dir() -> Path:
    """$PROBEMBED_CACHE_DIR if set, else the platform's user cache directory."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("probembed"))


def text_key(text: str) -> bytes:
    """A fixed-size digest of the text, so the cache never stores the text itself."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    """Gaussians by (model key, text); lookups and inserts are batched."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "embeddings.sqlite"
        self._db = sqlite3.connect(self.path, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS gaussians (model TEXT, text BLOB, dim INTEGER,"
            " mean BLOB, var BLOB, PRIMARY KEY (model, text))"
        )

    def get(self, model: str, texts: Sequence[str]) -> tuple[np.ndarray, Gaussian | None]:
        """Which texts are cached (bool mask) and their Gaussians in input order (None if none)."""
        keys = [text_key(t) for t in texts]
        rows: dict[bytes, tuple[int, bytes, bytes]] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            query = (
                f"SELECT text, dim, mean, var FROM gaussians WHERE model=? AND text IN ({marks})"
            )
            for key, dim, mean, var in self._db.execute(query, [model, *chunk]):
                rows[key] = (dim, mean, var)
        found = np.array([k in rows for k in keys], dtype=bool)
        if not found.any():
            return found, None
        hits = [rows[k] for k in keys if k in rows]
        dim = hits[0][0]
        mean = np.frombuffer(b"".join(h[1] for h in hits), dtype=np.float32).reshape(-1, dim)
        var = np.frombuffer(b"".join(h[2] for h in hits), dtype=np.float32).reshape(-1, dim)
        return found, Gaussian(mean, var)

    def put(self, model: str, texts: Sequence[str], gaussian: Gaussian) -> None:
        """Store one Gaussian per text in a single transaction."""
        rows = (
            (
                model,
                text_key(t),
                gaussian.dim,
                gaussian.mean[i].tobytes(),
                gaussian.var[i].tobytes(),
            )
            for i, t in enumerate(texts)
        )
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO gaussians VALUES (?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        """Release the database handle."""
        self._db.close()
