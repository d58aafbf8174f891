"""A collection's rows as search needs them, kept current by applying what changed.

Search holds in memory only what is small per row: ids, LanceDB row ids, document ids,
fusion weights and the variance coefficients (format 2; a few floats per row). The float32
means, the one large part, go to a memory-mapped file: the exact scan streams through it and
rescoring reads its candidates' rows from it, so resident memory does not grow with the
collection's float32 size (the operating system pages the file in and out). Each row's text
and metadata go to files of their own beside it, so a hit's text is a file read rather than a
LanceDB take (which costs milliseconds per query). The files are derived from LanceDB, which
stays the source of truth, and live only as long as the process.

A collection that adapts its fusion (a tilt of the members' weights, fusion/adapt.py) has the
tilt applied to each mean as it enters the file, so no search re-weights every row it scans;
the weights and variances, small or decoded on read anyway, are tilted as they are read.

When the table moves to a new version, the rows written since are listed first (row ids
above every one held); when the table's count shows that nothing else changed, they are all
that is read. Otherwise its whole listing (ids, write tags and row ids) is read: a row is
known by its id and the random tag of the batch that wrote it, so a compaction (which moves
every row id) changes nothing and an upsert shows as a new row and a dead one. Rows that
are new are taken by row id and appended, rows that are gone are marked dead; tables written
before write tags are known by row id instead. Dead rows keep
their position (so the candidate index need not be rebuilt); once more than
REBUILD_DEAD_FRACTION of the positions are dead, the next refresh loads everything afresh.
"""

from __future__ import annotations

import errno
import os
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from probembed.fusion.adapt import scaled_blocks, tilted_weights
from probembed.gaussian import Gaussian
from probembed.store.errors import StoreStateError
from probembed.store.ranking import float32_norm_bounds
from probembed.store.rows import WRITE_TAG, to_matrix

if TYPE_CHECKING:
    from probembed.store.collection import Collection
    from probembed.variance_basis import VarianceBasis

#: A snapshot with more dead positions than this fraction is loaded afresh at the next
#: refresh (and its candidate index rebuilt): past it, dead rows cost more scan and graph
#: work than the rebuild saves.
REBUILD_DEAD_FRACTION = 0.2
#: Rows fetched from LanceDB per take or per streamed batch, to bound the Arrow temporaries.
FETCH_ROWS = 8192
#: Up to this many positions the variances are also kept decoded (and tilted) in memory: a
#: collection this small is scanned whole for every query (`IndexSettings.scan_below`), and
#: decoding every row's variance each time cost more than the scan. 10,000 rows of the
#: 1,280-d default take 51 MB; larger collections keep only the coefficients.
DECODED_ROWS = 10_000
#: The stored columns a hit shows besides its vectors, kept by the snapshot for every row.
HIT_COLUMNS = ("text", "metadata")


def _unlinked_file(prefix: str, directory: str | None) -> int:
    """A descriptor of a new temporary file already unlinked: the open descriptor keeps it,
    and nothing is left behind on exit."""
    handle, path = tempfile.mkstemp(prefix=prefix, dir=directory)
    os.unlink(path)
    return handle


def _write_all(fd: int, data: memoryview, offset: int, directory: str) -> None:
    """Write every byte at `offset` (pwrite may write fewer; one call takes at most ~2 GB); a
    full disk is named with its directory, where search failed with a bare Errno 28."""
    try:
        while data:
            written = os.pwrite(fd, data, offset)
            data, offset = data[written:], offset + written
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise StoreStateError(
            f"cannot write the search snapshot in {directory}: {exc.strerror} ({len(data)} "
            "bytes still to write); free space on that disk"
        ) from exc


class MeanFile:
    """A float32 (n, dim) matrix in an unlinked temporary file, mapped, growable by appending;
    with each row's norm bound in memory (`ranking.Means`)."""

    def __init__(self, dim: int, directory: str | None = None) -> None:
        self.dim = dim
        self._directory = directory or tempfile.gettempdir()
        self._file = os.fdopen(_unlinked_file("probembed-means-", directory), "r+b")
        # a searcher dropped unclosed still gives its descriptor back, without a ResourceWarning
        self._release = weakref.finalize(self, self._file.close)
        self._rows = 0
        self._capacity = 0
        self._map: np.ndarray = np.zeros((0, dim), dtype=np.float32)
        self._norms = np.zeros(0, dtype=np.float32)

    def __len__(self) -> int:
        return self._rows

    def append(self, rows: np.ndarray) -> None:
        """Add rows at the end, doubling the file when it is full.

        Written with `pwrite`, not through the mapping: the page cache takes them either way
        (a shared mapping sees them), but pages written through the mapping count in this
        process's resident set until reclaimed, and a column read only for a few hits (the
        whole variances of format 1) would hold its whole size there.
        """
        rows = np.ascontiguousarray(rows, dtype=np.float32).reshape(-1, self.dim)
        need = self._rows + len(rows)
        if need > self._capacity:
            self._capacity = max(need, 2 * self._capacity, 1024)
            self._file.truncate(self._capacity * self.dim * 4)
            self._map = np.memmap(self._file, np.float32, "r", shape=(self._capacity, self.dim))
        offset = self._rows * self.dim * 4
        # an ndarray is a buffer: numpy types its __buffer__ for Python 3.12 on only
        view = memoryview(rows).cast("B")  # type: ignore[arg-type]
        _write_all(self._file.fileno(), view, offset, self._directory)
        self._rows = need

    def norm_bounds(self, positions: np.ndarray | slice) -> np.ndarray:
        """Upper bounds of rows' norms by position, computed once per row on first use."""
        done = len(self._norms)
        if done < self._rows:
            fresh = float32_norm_bounds(self._map[done : self._rows])
            self._norms = np.concatenate([self._norms, fresh])
        return self._norms[positions]

    @property
    def resident_bytes(self) -> int:
        """Memory the norm bounds take (the rows themselves are mapped)."""
        return self._norms.nbytes

    def __getitem__(self, positions: np.ndarray | slice) -> np.ndarray:
        """Rows by position: a view of the mapped file for a slice or a run of consecutive
        positions (what scans read), a copy in memory for any other index array."""
        rows = self._map[: self._rows]
        if isinstance(positions, np.ndarray) and _consecutive(positions):
            return rows[int(positions[0]) : int(positions[-1]) + 1]
        return rows[positions]

    def close(self) -> None:
        """Release the mapping and the file."""
        self._map = np.zeros((0, self.dim), dtype=np.float32)
        self._release()


class TextFile:
    """Strings (or None) in an unlinked temporary file, appended in blocks, read by position.

    Only each row's end offset and null flag stay in memory (9 bytes); a hit's text is one
    `pread` away, where a LanceDB take of a query's hits costs milliseconds.
    """

    def __init__(self, directory: str | None = None) -> None:
        self._directory = directory or tempfile.gettempdir()
        self._fd = _unlinked_file("probembed-texts-", directory)
        #: Closes the descriptor when the file is dropped unclosed (a discarded searcher):
        #: an unlinked file's disk space is held until then.
        self._closer = weakref.finalize(self, os.close, self._fd)
        self._ends = np.zeros(0, dtype=np.int64)
        self._null = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def size(self) -> int:
        """Bytes in the file."""
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def resident_bytes(self) -> int:
        """Memory the offsets and null flags take (the strings are in the file)."""
        return self._ends.nbytes + self._null.nbytes

    def append(self, column: pa.Array | pa.ChunkedArray) -> None:
        """Add a string column's values at the end."""
        values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        values = values.cast(pa.large_string())
        n, first = len(values), values.offset
        _, offsets_buffer, data = values.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[first : first + n + 1]
        lo, hi = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
        base = self.size
        if hi > lo:
            _write_all(self._fd, memoryview(data)[lo:hi], base, self._directory)
        self._ends = np.concatenate([self._ends, base + offsets[1:] - lo])
        self._null = np.concatenate([self._null, values.is_null().to_numpy(zero_copy_only=False)])

    def __getitem__(self, positions: np.ndarray) -> list[str | None]:
        """The strings at these positions."""
        out: list[str | None] = []
        for position in np.asarray(positions, dtype=np.int64).tolist():
            if self._null[position]:
                out.append(None)
                continue
            start = int(self._ends[position - 1]) if position else 0
            end = int(self._ends[position])
            out.append(os.pread(self._fd, end - start, start).decode() if end > start else "")
        return out

    def close(self) -> None:
        """Release the file (once, however often asked)."""
        self._closer()


def _doc_ids(listing: pa.Table) -> np.ndarray | None:
    """The listed rows' doc_id (None where a row has none), or None without the column: chunks
    can join a collection of plain records (and a reverted write leaves the column empty)."""
    if "doc_id" not in listing.column_names:
        return None
    return np.asarray(listing.column("doc_id").to_pylist(), dtype=object)


def _consecutive(positions: np.ndarray) -> bool:
    """Whether an index array is a run start, start + 1, ... (a slice in disguise)."""
    n = len(positions)
    return (
        n > 1
        and positions.ndim == 1
        and int(positions[-1]) - int(positions[0]) == n - 1
        and bool(np.all(np.diff(positions) == 1))
    )


@dataclass(frozen=True)
class Tilt:
    """A collection's adaptation as search applies it: member block widths and weight factors."""

    dims: tuple[int, ...]
    factors: np.ndarray


def same_tilt(a: Tilt | None, b: Tilt | None) -> bool:
    """Whether two adaptations (None: none) weight every row alike."""
    if a is None or b is None:
        return a is b
    return a.dims == b.dims and np.array_equal(a.factors, b.factors)


@dataclass
class Snapshot:
    """Rows of one collection version, by position; positions of deleted rows are dead."""

    version: int
    ids: np.ndarray
    row_ids: np.ndarray
    doc_ids: np.ndarray | None
    weights: np.ndarray
    #: Stored variance per row: coefficients on `basis`, or whole (format 1).
    stored_var: np.ndarray | MeanFile
    basis: VarianceBasis | None
    means: MeanFile
    alive: np.ndarray
    #: Each row's HIT_COLUMNS (text, metadata JSON), so hits need no LanceDB read.
    texts: dict[str, TextFile]
    #: Positions appended by the last refresh (the candidate index extends by these).
    added: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    positions: dict[str, int] = field(default_factory=dict)
    #: (id, write tag) of every live row -> its position.
    keys: dict[tuple[str, int], int] = field(default_factory=dict)
    _tags: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: The collection's adaptation, applied to every row search reads (None: not adapted).
    tilt: Tilt | None = None
    #: Every position's float32 variance as search scores it, while len(self) <= DECODED_ROWS.
    _decoded: np.ndarray | None = None
    #: The creation token of the collection the rows are from (`Collection.created`).
    created: str | None = None
    #: The mark of the collection's last erasure when the rows were loaded
    #: (`Collection.erasure`): a newer one loads them afresh, so the erased rows' texts and
    #: means leave this snapshot's files (a refresh would only mask them).
    erasure: str | None = None

    @classmethod
    def load(cls, collection: Collection, tilt: Tilt | None = None) -> Snapshot:
        """Every row of the collection's current version, streamed from LanceDB."""
        version, _, listing = collection.listing()
        snapshot = cls._empty(collection, version)
        snapshot.tilt, snapshot.created = tilt, collection.created
        snapshot.erasure = collection.erasure
        snapshot._append(collection, listing, version)
        snapshot.added = np.zeros(0, dtype=np.int64)
        return snapshot

    @classmethod
    def _empty(cls, collection: Collection, version: int) -> Snapshot:
        """A snapshot with no rows yet, shaped for the collection."""
        dim, basis = collection.dim, collection.variance_basis
        directory = _scratch_dir(collection)
        stored: np.ndarray | MeanFile = (
            MeanFile(dim, directory) if basis is None else np.zeros((0, basis.width), np.float32)
        )
        k = len(collection.pipeline.models)
        return cls(
            version,
            np.zeros(0, dtype=object),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=object) if collection.chunked else None,
            np.zeros((0, k), dtype=np.float32),
            stored,
            basis,
            MeanFile(dim, directory),
            np.zeros(0, dtype=bool),
            {name: TextFile(directory) for name in HIT_COLUMNS},
        )

    def __len__(self) -> int:
        """Positions, dead ones included."""
        return len(self.ids)

    @property
    def live(self) -> int:
        """Rows that exist at this version: one key per live row, so no pass over `alive`
        (every search asks)."""
        return len(self.keys)

    def refreshed(self, collection: Collection) -> Snapshot:
        """This snapshot moved to the collection's current version (itself if unchanged).

        First only the rows written since are listed: those with row ids above every one it
        holds (new fragments are numbered above the old). The table now holds the held rows
        still in place (A), those a compaction moved (M) and new ones (N), and the listed rows
        are M + N; the held live rows are A + M plus any deleted (D). A count of exactly
        `live` + listed, A + M + N = A + M + D + M + N, proves D = M = 0: nothing held was
        deleted, rewritten or moved, and the listed rows are all new. They are appended and
        nothing else is read, so a write of a few rows costs a few rows, not a listing of the
        whole collection. Otherwise the whole listing is compared. A collection made again
        under the same name, or erased from since, is loaded afresh.
        """
        if (collection.created, collection.erasure) != (self.created, self.erasure):
            self.close()  # made again (no row is the same), or erased from: not a row kept
            return Snapshot.load(collection, self.tilt)
        # a snapshot holding no row lists everything: LanceDB's row ids are unsigned
        after = int(self.row_ids.max()) if len(self.row_ids) else None
        version, count, fresh = collection.listing(after)
        if version == self.version:
            self.added = np.zeros(0, dtype=np.int64)
            return self
        if count == self.live + len(fresh):
            self.version = version
            self._append(collection, fresh, version)
            return self
        version, _, listing = collection.listing()
        keys = _keys(listing)
        known = np.array([self.keys.get(key, -1) for key in keys], dtype=np.int64)
        present = known >= 0
        gone = self.alive.copy()
        gone[known[present]] = False
        dead = (len(self) - self.live) + int(gone.sum())
        if dead > REBUILD_DEAD_FRACTION * (len(self) + int((~present).sum())):
            self.close()
            return Snapshot.load(collection, self.tilt)
        self.row_ids[known[present]] = listing.column("_rowid").to_numpy()[present]
        for position in np.flatnonzero(gone).tolist():
            self.alive[position] = False
            del self.keys[(self.ids[position], int(self._tags[position]))]
            if self.positions.get(self.ids[position]) == position:
                del self.positions[self.ids[position]]
        self.version = version
        self._append(collection, listing.filter(pa.array(~present)), version)
        return self

    def _append(self, collection: Collection, listing: pa.Table, version: int) -> None:
        """Take the listed rows' vectors from LanceDB, at the version they were listed at, and
        add them at the end."""
        start = len(self)
        row_ids = listing.column("_rowid").to_numpy().astype(np.int64)
        docs = _doc_ids(listing)
        column = collection.variance_column
        weights, coefs = [self.weights], []
        for lo in range(0, len(row_ids), FETCH_ROWS):
            columns = ["mean", column, "weights", *HIT_COLUMNS]
            data = collection.take(row_ids[lo : lo + FETCH_ROWS], columns, version)
            for name, texts in self.texts.items():
                texts.append(data.column(name))
            mean, block_weights = to_matrix(data.column("mean")), to_matrix(data.column("weights"))
            if self.tilt is not None:
                _, ratio = tilted_weights(block_weights, self.tilt.factors)
                mean = scaled_blocks(mean, np.sqrt(ratio), self.tilt.dims)
            self.means.append(mean)
            weights.append(block_weights)
            # a view of Arrow's buffer: whole variances (format 1) go to their file at once,
            # since kept to the end they would hold every batch's column in memory together
            stored = to_matrix(data.column(column))
            if isinstance(self.stored_var, MeanFile):
                self.stored_var.append(stored)
            else:
                coefs.append(stored)
        self.weights = np.vstack(weights)
        if not isinstance(self.stored_var, MeanFile):
            self.stored_var = np.vstack([self.stored_var, *coefs])
        ids = np.asarray(listing.column("id").to_pylist(), dtype=object)
        self.ids = np.concatenate([self.ids, ids])
        self.row_ids = np.concatenate([self.row_ids, row_ids])
        if self.doc_ids is not None or docs is not None:  # the column may come or go
            held = np.full(start, None, dtype=object) if self.doc_ids is None else self.doc_ids
            added = np.full(len(ids), None, dtype=object) if docs is None else docs
            self.doc_ids = np.concatenate([held, added])
        self.alive = np.concatenate([self.alive, np.ones(len(ids), dtype=bool)])
        keys = _keys(listing)
        self._tags = np.concatenate([self._tags, np.array([t for _, t in keys], dtype=np.int64)])
        self.positions.update({doc_id: start + i for i, doc_id in enumerate(ids.tolist())})
        self.keys.update({key: start + i for i, key in enumerate(keys)})
        self.added = np.arange(start, len(self), dtype=np.int64)
        _release_arrow_memory()

    def resident_bytes(self) -> int:
        """Memory the per-row arrays take (ids and id map by a typical 60 bytes per id)."""
        arrays = (self.row_ids, self.weights, self.alive)
        stored = 0 if isinstance(self.stored_var, MeanFile) else self.stored_var.nbytes
        stored += 0 if self._decoded is None else self._decoded.nbytes
        ids = (len(self.ids) + len(self.positions)) * (8 + 60)
        docs = 0 if self.doc_ids is None else len(self.doc_ids) * (8 + 60)
        held: list[MeanFile | TextFile] = [self.means, *self.texts.values()]
        files = sum(f.resident_bytes for f in held)
        return sum(a.nbytes for a in arrays) + stored + ids + docs + files

    def mapped_bytes(self) -> int:
        """Size of the rows kept in files (on disk; paged in as scans, rescoring and hits
        read)."""
        files = [self.means, *([self.stored_var] if isinstance(self.stored_var, MeanFile) else [])]
        texts = sum(t.size for t in self.texts.values())
        return sum(len(f) * f.dim * 4 for f in files) + texts

    def hit_rows(self, positions: np.ndarray) -> list[dict[str, str | None]]:
        """The HIT_COLUMNS of rows by position, as of this version."""
        columns = {name: texts[positions] for name, texts in self.texts.items()}
        rows = zip(*columns.values(), strict=True)
        return [dict(zip(columns, values, strict=True)) for values in rows]

    def variances(self, positions: np.ndarray | slice) -> np.ndarray:
        """Full float32 variances of rows by position."""
        stored = self.stored_var[positions]
        return stored if self.basis is None else self.basis.decode(stored)

    def gaussian(self, positions: np.ndarray | slice) -> Gaussian:
        """Rows' Gaussians by position, as search scores them (tilted where adapted)."""
        if len(self) > DECODED_ROWS:
            self._decoded = None
            var = self._scored_variances(positions)
        else:
            done = 0 if self._decoded is None else len(self._decoded)
            # none decoded yet (an empty snapshot too), or rows appended since: decode just those
            if self._decoded is None or done < len(self):
                fresh = self._scored_variances(np.arange(done, len(self)))
                self._decoded = (
                    fresh if self._decoded is None else np.vstack([self._decoded, fresh])
                )
            var = self._decoded[positions]
        # rows written from validated Gaussians, decoded (floored) and tilted (by factors >= 0)
        return Gaussian.unchecked(np.ascontiguousarray(self.means[positions]), var)

    def _scored_variances(self, positions: np.ndarray | slice) -> np.ndarray:
        """Rows' float32 variances decoded, and tilted where the collection is adapted."""
        var = self.variances(positions)
        if self.tilt is not None:
            _, ratio = tilted_weights(self.weights[positions], self.tilt.factors)
            var = scaled_blocks(var, ratio, self.tilt.dims).astype(np.float32)
        return np.ascontiguousarray(var, dtype=np.float32)

    def fusion_weights(self, positions: np.ndarray | slice) -> np.ndarray:
        """Rows' fusion weights by position, as search reports them (tilted where adapted)."""
        weights = self.weights[positions]
        return weights if self.tilt is None else tilted_weights(weights, self.tilt.factors)[0]

    def close(self) -> None:
        """Release the mapped files."""
        self.means.close()
        for texts in self.texts.values():
            texts.close()
        if isinstance(self.stored_var, MeanFile):
            self.stored_var.close()


def _release_arrow_memory() -> None:
    """Hand the buffers Arrow has freed back to the OS: its allocator (mimalloc) keeps them
    otherwise. With the batch-by-batch load, it took a fresh process's memory after loading
    10⁶ hashing rows from 1.93 to 0.85 GiB (benchmarks/search_profile.py, part `load`)."""
    pa.default_memory_pool().release_unused()


def _keys(listing: pa.Table) -> list[tuple[str, int]]:
    """Each listed row's (id, write tag), the row id standing in where tables have no tags."""
    tags = listing.column(WRITE_TAG if WRITE_TAG in listing.column_names else "_rowid")
    return list(zip(listing.column("id").to_pylist(), tags.to_pylist(), strict=True))


def _scratch_dir(collection: Collection) -> str | None:
    """The collection's local derived directory when it can be written, else the temp dir."""
    try:
        collection.derived_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return str(collection.derived_dir) if os.access(collection.derived_dir, os.W_OK) else None
