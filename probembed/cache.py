"""On-disk embedding cache, so repeated runs over the same texts never re-encode them.

One SQLite file holds every model's Gaussians, keyed by (estimator fingerprint, SHA-256 of the
text). The fingerprint covers the model, its package version and the fitted estimator state, so
a refit or an upgrade never serves stale vectors. SQLite makes concurrent readers and an
interrupted writer safe; a lock makes one cache object safe to share between threads.

The file is made on first use, never on construction. It is capped in size: past
`max_bytes` the least recently used entries go. Where the directory cannot be written the
cache turns itself off with a warning and encoding goes on without it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import os
import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from probembed.gaussian import Gaussian

CACHE_ENV = "PROBEMBED_CACHE_DIR"
MAX_BYTES_ENV = "PROBEMBED_CACHE_MAX_BYTES"
#: 2 GiB: about 250,000 texts of the default pipeline's three models (8 kB of mean and variance).
DEFAULT_MAX_BYTES = 2 * 1024**3
FILE_NAME = "embeddings.sqlite"
#: Eviction goes down to this share of the cap, so not every insert past the cap evicts again.
_EVICT_TO = 0.9
#: The write-ahead log is cut back to this size whenever SQLite resets it: without a limit it
#: keeps the largest size it ever reached, which processes sharing the cache (a service's
#: encoding children) drive far past the cap.
_WAL_LIMIT = 4 * 1024**2
#: Bytes of vectors a connection inserts between its checkpoints: each checkpoint syncs the
#: file, so a service putting one short request at a time pays it once per many requests.
_CHECKPOINT_BYTES = 1024**2
_CHUNK = 500
R = TypeVar("R")


def default_cache_dir() -> Path:
    """$PROBEMBED_CACHE_DIR if set, else the platform's user cache directory."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs  # the [models] extra; imported here so the pipeline module loads without

    return Path(platformdirs.user_cache_dir("probembed"))


def default_max_bytes() -> int:
    """$PROBEMBED_CACHE_MAX_BYTES if set, else DEFAULT_MAX_BYTES."""
    value = os.environ.get(MAX_BYTES_ENV)
    if value is None:
        return DEFAULT_MAX_BYTES
    try:
        return validate_max_bytes(int(value))
    except ValueError:
        raise ValueError(
            f"${MAX_BYTES_ENV} must be a whole number of bytes > 0, got {value!r}"
        ) from None


def validate_max_bytes(max_bytes: object) -> int:
    """A positive int, or a ValueError that quotes the bad value."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    return max_bytes


def text_key(text: str) -> bytes:
    """A fixed-size digest of the text, so the cache never stores the text itself."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()  # lone surrogates too


@dataclass(frozen=True)
class ModelEntries:
    """What one model (estimator fingerprint) holds in the cache."""

    model: str
    label: str | None
    entries: int
    vector_bytes: int


@dataclass(frozen=True)
class CacheStats:
    """Texts one cache object found, missed and stored since it was made (per model key, so a
    text of a three-model pipeline counts three times): how much encoding it saved."""

    hits: int = 0
    misses: int = 0
    stored: int = 0


@dataclass(frozen=True)
class CacheInfo:
    """Where the cache lives, how full it is and what each model holds."""

    path: Path
    entries: int
    bytes: int
    max_bytes: int
    models: list[ModelEntries]


#: What SQLite says of a file that is not (or no longer) a database.
_DAMAGED = re.compile(r"file is not a database|database disk image is malformed")
#: The files SQLite keeps beside a database in WAL mode.
_LOGS = ("-wal", "-shm")


class EmbeddingCache:
    """Gaussians by (model key, text); lookups and inserts are batched and thread-safe."""

    def __init__(
        self, directory: str | os.PathLike | None = None, max_bytes: int | None = None
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.path = self.directory / FILE_NAME
        self.max_bytes = default_max_bytes() if max_bytes is None else validate_max_bytes(max_bytes)
        self._db: sqlite3.Connection | None = None
        self._disabled = False
        self._why = ""
        self._lock = threading.Lock()
        #: Bytes inserted since the last checkpoint that copied the whole log.
        self._unchecked = 0
        self._stats = CacheStats()

    @property
    def enabled(self) -> bool:
        """False once the cache found it cannot write its directory."""
        return not self._disabled

    @property
    def stats(self) -> CacheStats:
        """Texts found, missed and stored by this object so far (a disabled cache misses all)."""
        return self._stats

    def get(
        self, model: str, texts: Sequence[str], counted: bool = True
    ) -> tuple[np.ndarray, Gaussian | None]:
        """Which texts are cached (bool mask) and their Gaussians in input order (None if none).
        `counted=False`: a second read of texts looked up before, left out of `stats`."""
        keys = [text_key(t) for t in texts]
        rows = _whole(self._run(lambda db: _select(db, model, keys), {}))
        found = np.array([k in rows for k in keys], dtype=bool)
        gaussian = None
        if found.any():
            hits = [rows[k] for k in keys if k in rows]
            dim = hits[0][0]
            mean = np.frombuffer(b"".join(h[1] for h in hits), dtype=np.float32).reshape(-1, dim)
            var = np.frombuffer(b"".join(h[2] for h in hits), dtype=np.float32).reshape(-1, dim)
            sound = np.isfinite(mean).all(axis=1) & np.isfinite(var).all(axis=1) & (var >= 0).all(1)
            if not sound.all():  # damaged on disk: a miss, encoded again and overwritten
                found[np.flatnonzero(found)[~sound]] = False
                mean, var = mean[sound], var[sound]
            if found.any():
                gaussian = Gaussian(mean, var)
        if counted:
            self._count(hits=int(found.sum()), misses=int((~found).sum()))
        return found, gaussian

    def held(self, model: str, texts: Sequence[str]) -> np.ndarray:
        """Which texts the cache holds for a model (a bool mask), from their keys alone: no
        vector read, no use marked, nothing counted in `stats`, so a command can say before
        encoding how much it will read rather than encode (a row damaged on disk, which `get`
        reads as a miss, counts as held)."""
        keys = [text_key(t) for t in texts]
        nothing: set[bytes] = set()  # where the cache cannot be read
        found = self._run(lambda db: _keys_held(db, model, keys), nothing)
        return np.array([k in found for k in keys], dtype=bool)

    def put(
        self, model: str, texts: Sequence[str], gaussian: Gaussian, label: str | None = None
    ) -> None:
        """Store one Gaussian per text in a single transaction, then evict past the cap."""
        now = time.time()
        rows = [
            (model, text_key(t), gaussian.dim, mean.tobytes(), var.tobytes(), now, label)
            for t, mean, var in zip(texts, gaussian.mean, gaussian.var, strict=True)
        ]

        def insert(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT OR REPLACE INTO gaussians (model, text, dim, mean, var, used, label)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            _evict(db, self.max_bytes)

        self._run(insert, None)
        if self.enabled:
            self._count(stored=len(rows))
        self._checkpoint(sum(len(row[3]) + len(row[4]) for row in rows))

    def info(self) -> CacheInfo:
        """Path, entries, bytes counted against the cap, and entries per model."""
        empty = CacheInfo(self.path, 0, 0, self.max_bytes, [])
        if not self.path.is_file():  # asking must not create the file
            return empty
        try:  # read-only: asking neither migrates an old file nor needs a writable one
            db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
            try:
                return self._summary(db)
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise OSError(f"cannot read the embedding cache at {self.path}: {exc}") from exc

    def clear(self) -> int | None:
        """Remove every entry and shrink the file; returns how many entries went, or None
        where the file was damaged (not a database, or malformed) and was deleted whole:
        otherwise every later run would warn until the user found and deleted it by hand."""
        if not self.path.is_file():
            return 0
        removed = self._run(lambda db: db.execute("DELETE FROM gaussians").rowcount, 0)
        if self._disabled and _DAMAGED.search(self._why):
            for path in (self.path, *(self.path.with_name(self.path.name + s) for s in _LOGS)):
                path.unlink(missing_ok=True)
            self._disabled, self._why = False, ""
            return None
        if self._disabled:
            raise OSError(f"cannot clear the embedding cache at {self.path}: {self._why}")
        self._rewritten()
        return removed

    def forget(self, texts: Iterable[str]) -> int:
        """Remove every model's entry for these texts, and every byte of them the file and its
        write-ahead log still hold: an erasure (`Collection.erase`) must reach the cache, where
        a delete leaves the rows in freed pages (an entry evicted earlier too) and in the log.
        How many entries went (a text of a three-model pipeline counts three). An OSError
        where the cache cannot be written or its log not emptied (another process reading it
        for a minute): the entries may then still be on disk."""
        keys = list(dict.fromkeys(text_key(t) for t in texts))
        if not keys or not self.path.is_file():
            return 0
        removed = self._run(lambda db: _deleted(db, keys), 0)
        if self._disabled:
            why = self._why
            raise OSError(f"cannot forget entries of the embedding cache at {self.path}: {why}")
        self._rewritten()
        return removed

    def _rewritten(self) -> None:
        """Rewrite the file without its free pages (VACUUM: what a delete freed stays there
        until reused) and empty the write-ahead log into it (a TRUNCATE checkpoint, which
        waits for other connections' reads as long as the busy timeout), so no removed entry
        is left in either."""
        with self._lock:
            db = self._connect()
            if db is None:
                raise OSError(f"cannot rewrite the embedding cache at {self.path}: {self._why}")
            db.execute("VACUUM")  # outside any transaction, as SQLite requires
            busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise OSError(
                f"the write-ahead log of the embedding cache at {self.path} could not be "
                "emptied: another process kept reading the cache (a service's encoding "
                "children); removed entries may stay in it until the next checkpoint, so "
                "run this again once it is idle"
            )

    def _count(self, hits: int = 0, misses: int = 0, stored: int = 0) -> None:
        """Add to the statistics, under the lock (one cache serves several threads)."""
        with self._lock:
            now = self._stats
            self._stats = CacheStats(now.hits + hits, now.misses + misses, now.stored + stored)

    def close(self) -> None:
        """Release the database handle (a later use opens it again)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _summary(self, db: sqlite3.Connection) -> CacheInfo:
        """Entries and vector bytes per model, and the bytes in use, in one read."""
        columns = {row[1] for row in db.execute("PRAGMA table_info(gaussians)")}
        label = "MAX(label)" if "label" in columns else "NULL"  # a file of an older release
        query = (
            f"SELECT model, {label}, COUNT(*), SUM(LENGTH(mean) + LENGTH(var))"
            " FROM gaussians GROUP BY model ORDER BY model"
        )
        models = [ModelEntries(*row) for row in db.execute(query)]
        entries = sum(m.entries for m in models)
        return CacheInfo(self.path, entries, _live_bytes(db), self.max_bytes, models)

    def _run(self, work: Callable[[sqlite3.Connection], R], default: R) -> R:
        """Work in one transaction under the lock; where the cache cannot be used, the default."""
        with self._lock:
            db = self._connect()
            if db is None:
                return default
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = work(db)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.DatabaseError as exc:  # read-only, full disk, locked, or corrupted
                self._disable(exc)
                return default
            return result

    def _checkpoint(self, written: int) -> None:
        """Copy the log into the file as far as no other connection reads it, without waiting,
        once _CHECKPOINT_BYTES were inserted since the last whole copy.

        SQLite's own checkpoint runs only in the commit that crosses 1,000 pages, which
        another process's open transaction often blocks; trying again after each insert until
        one copies the whole log lets the log be reset (and cut to _WAL_LIMIT) at the next
        write. A failure costs nothing.
        """
        with self._lock:
            self._unchecked += written
            if self._db is None or self._unchecked < _CHECKPOINT_BYTES:
                return
            with contextlib.suppress(sqlite3.Error):
                _, log, copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if log == copied:  # all of it: the next write starts the log again
                    self._unchecked = 0

    def _connect(self) -> sqlite3.Connection | None:
        """Open, create or migrate the database on first use; None where it cannot be written."""
        if self._db is None and not self._disabled:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(
                    self.path, timeout=60, check_same_thread=False, isolation_level=None
                )
                db.execute("PRAGMA journal_mode=WAL")
                # Commits reach the OS, not the disk: a killed process loses nothing, a power
                # cut at most the last entries, which are re-encoded on the next miss; each
                # encode call then costs no fsync per member (SQLite's advice for WAL).
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
                _migrate(db)
            except (OSError, sqlite3.Error) as exc:
                self._disable(exc)
            else:
                self._db = db
        return self._db

    def _disable(self, exc: Exception) -> None:
        """Stop using the cache for the rest of the process, saying where and why once."""
        self._disabled, self._why = True, str(exc)
        if self._db is not None:
            self._db.close()
            self._db = None
        warnings.warn(
            f"embedding cache at {self.directory} disabled ({exc}); encoding without a cache. "
            f"{disabled_advice(exc)}",
            RuntimeWarning,
            stacklevel=2,
        )


def disabled_advice(exc: Exception) -> str:
    """What brings a disabled cache back: a full disk wants space, not another directory
    that is writable (the one it has is)."""
    full = (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        isinstance(exc, sqlite3.Error)
        and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    )
    if full:
        return (
            f"Its disk is full: free space there, lower ${MAX_BYTES_ENV} (the cache's cap), or "
            f"set ${CACHE_ENV} to a directory on another disk."
        )
    return f"Set ${CACHE_ENV} to a writable directory to cache embeddings."


def _migrate(db: sqlite3.Connection) -> None:
    """Create the table, or add the columns a cache from an older release lacks."""
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "CREATE TABLE IF NOT EXISTS gaussians (model TEXT, text BLOB, dim INTEGER,"
        " mean BLOB, var BLOB, PRIMARY KEY (model, text))"
    )
    columns = {row[1] for row in db.execute("PRAGMA table_info(gaussians)")}
    if "used" not in columns:  # old entries count as the least recently used
        db.execute("ALTER TABLE gaussians ADD COLUMN used REAL NOT NULL DEFAULT 0")
    if "label" not in columns:
        db.execute("ALTER TABLE gaussians ADD COLUMN label TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS gaussians_by_use ON gaussians (used)")
    db.execute("COMMIT")


def _select(db: sqlite3.Connection, model: str, keys: list[bytes]) -> dict:
    """Rows of the keys found, by key; marks them as just used."""
    rows: dict[bytes, tuple[int, bytes, bytes]] = {}
    now = time.time()
    for keys_in, chunk in _in_chunks(keys):
        where = f"model=? AND {keys_in}"
        query = f"SELECT text, dim, mean, var FROM gaussians WHERE {where}"
        for key, dim, mean, var in db.execute(query, [model, *chunk]):
            rows[key] = (dim, mean, var)
        db.execute(f"UPDATE gaussians SET used=? WHERE {where}", [now, model, *chunk])
    return rows


def _in_chunks(keys: list[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """`text IN (?, ...)` and its keys, `_CHUNK` keys at a time: SQLite bounds the parameters
    of one statement."""
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        yield f"text IN ({','.join('?' * len(chunk))})", chunk


def _keys_held(db: sqlite3.Connection, model: str, keys: list[bytes]) -> set[bytes]:
    """The keys a model has a row of, its vectors left unread."""
    held: set[bytes] = set()
    for keys_in, chunk in _in_chunks(keys):
        query = f"SELECT text FROM gaussians WHERE model=? AND {keys_in}"
        held.update(key for (key,) in db.execute(query, [model, *chunk]))
    return held


def _whole(rows: dict[bytes, tuple[int, bytes, bytes]]) -> dict:
    """The rows whose vectors are as long as their dim says, all of the most common dim.

    A row damaged on disk, or written by a model key that changed width, is a miss: it is
    encoded again and overwritten, rather than failing every encode that reads it.
    """
    whole = {k: r for k, r in rows.items() if len(r[1]) == len(r[2]) == 4 * r[0] > 0}
    if not whole:
        return whole
    dims, counts = np.unique([r[0] for r in whole.values()], return_counts=True)
    dim = dims[np.argmax(counts)]
    return {k: r for k, r in whole.items() if r[0] == dim}


def _deleted(db: sqlite3.Connection, keys: list[bytes]) -> int:
    """Delete every model's rows of these text keys; how many went."""
    removed = 0
    for keys_in, chunk in _in_chunks(keys):
        removed += db.execute(f"DELETE FROM gaussians WHERE {keys_in}", chunk).rowcount
    return removed


def _live_bytes(db: sqlite3.Connection) -> int:
    """Bytes of the pages in use: what the cap limits (freed pages are reused, not counted)."""
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return page_size * (pages - free)


def _evict(db: sqlite3.Connection, max_bytes: int) -> None:
    """Delete least recently used entries until the pages in use fit the cap again."""
    while (used := _live_bytes(db)) > max_bytes:
        rows = db.execute("SELECT COUNT(*) FROM gaussians").fetchone()[0]
        if rows == 0:
            return
        share = (used - _EVICT_TO * max_bytes) / used
        db.execute(
            "DELETE FROM gaussians WHERE rowid IN"
            " (SELECT rowid FROM gaussians ORDER BY used LIMIT ?)",
            (max(1, math.ceil(rows * share)),),
        )
