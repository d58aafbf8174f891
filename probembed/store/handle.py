"""A collection's handle on its LanceDB table: opened at the latest version, its header read
once per version, a table dropped and made again elsewhere followed, the write lock.

`CollectionHandle` holds every piece of state a `Collection` keeps; the parts of a collection
(`reads`, `provenance`, `agreement`, `creation`, `writes`, `undo`, `upkeep`) build on it, and
`probembed.store.collection.Collection` puts them together. Its `_`-named members (`_open`,
`_require`, `_header`, `_writing`, the state) are for those parts alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from probembed import atomic
from probembed.caller import warn_caller
from probembed.progress import WaitLines
from probembed.signals import Kept, Terminated
from probembed.store.errors import (
    CollectionBusyError,
    StoreError,
    StoreStateError,
    disk_refusals,
)
from probembed.store.rows import (
    PipelineInfo,
    erasure_mark,
    read_header,
    settings_mark,
    variance_basis,
)
from probembed.store.threads import one_at_a_time
from probembed.variance_basis import VarianceBasis

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline
    from probembed.store.database import Database
    from probembed.store.search import Searcher

#: Held (flock) by every write of the collection on this machine: see `Collection._writing`.
WRITE_LOCK = "write.lock"

#: Name of the kept pipeline copy in a collection's own directory (`provenance`).
PIPELINE_DIR = "pipeline"

#: Held (flock) by every write that plans over the collection's documents, from its first
#: look at what is stored to its last commit: see `CollectionHandle.planning`.
PLAN_LOCK = "plan.lock"

#: The plan locks this thread holds (their paths): a planning write inside another (a part of
#: a larger write) holds it already, where a second flock of the file would wait for itself.
_PLANNING = threading.local()

#: At most this often (seconds) a handle reopens its table at an unchanged version number, to
#: see whether another process dropped the collection and made it again under the same name
#: (a re-ingest of the same corpus reaches the same version number).
RECREATION_RECHECK_S = 1.0


class _PlanWait:
    """What a planning write says of its wait for another's: a warning as it begins, naming
    the holder and how long this one waits (none where it waits not at all: its refusal
    says it), then, with `progress`, a line every `LINE_SECONDS` while it lasts and one as it
    ends (`progress.WaitLines`); a stop while it waits notes that nothing was written."""

    def __init__(self, name: str, what: str, wait: float | None, progress: bool) -> None:
        self.name, self.what, self.wait, self.progress = name, what, wait, progress
        self.holder: str | None = None  # set once it waits
        self.start = 0.0
        self.lines: WaitLines | None = None

    def began(self, holder: str) -> None:
        """The lock is held by `holder` (what it wrote of itself): say so, once."""
        self.holder, self.start = holder or "another write", time.monotonic()
        if self.wait == 0:
            return
        limit = "" if self.wait is None else f", {self.wait:g} s at most,"
        warn_caller(
            f"collection {self.name!r} is being changed by {self.holder}: this {self.what} "
            f"waits for it to end{limit} before it reads what is stored"
        )
        if self.progress:
            self.lines = WaitLines(f"waiting for {self.holder}", self.wait)

    def still(self, seconds: float) -> None:
        """Seconds waited so far."""
        if self.lines is not None:
            self.lines.still(seconds)

    def stopped(self, stop: BaseException) -> None:
        """Ctrl-C or SIGTERM came while it waited: note that nothing was read or written
        (`signals.Kept`), which a front door says in place of what a write keeps."""
        if self.holder is not None:
            said = f"this {self.what} was waiting for {self.holder}, and had read and written "
            stop.add_note(Kept(said + "nothing"))

    def ended(self) -> None:
        """The lock is this write's: say after how long, where it waited."""
        if self.lines is not None:
            self.lines.ended(time.monotonic() - self.start, f"this {self.what} goes on")


def _files_gone(exc: BaseException) -> bool:
    """Whether a LanceDB error says files of the table are missing (dropped under a handle)."""
    return "Not found" in str(exc)


def scan(
    table: Any, columns: Sequence[str], where: str | None = None, row_ids: bool = False
) -> pa.Table:
    """Selected columns of every row (optionally filtered, with `_rowid`), as one Arrow table."""
    builder = table.search().select(list(columns)).with_row_id(row_ids).limit(None)
    if where:
        builder = builder.where(where)
    return builder.to_arrow()


class CollectionHandle:
    """A collection's LanceDB table as this process last opened it, and what it keeps of it."""

    def __init__(self, db: Database, name: str) -> None:
        self.db = db
        self.name = name
        self._table: Any = None
        #: The pipeline that made the vectors, once loaded or recorded, and its fingerprint.
        self._pipeline: tuple[Pipeline, str] | None = None
        #: The in-memory pipeline whose models `_pipeline` shares, if one was handed in.
        self._shares: Pipeline | None = None
        self._searcher: Searcher | None = None
        self._header_at: tuple[int, dict[str, Any]] | None = None
        #: The kept copy's replacement mark as last read (`rows.settings_mark`).
        self._settings_mark: str | None = None
        #: The last erasure's mark as last read (`rows.erasure_mark`).
        self._erasure_mark: str | None = None
        #: Fields stored rows hold in their JSON only, as found so far, for the creation of
        #: the table named by the header's "created" (`_held_in_json`).
        self._held: tuple[str | None, set[str]] = ("", set())
        #: When (time.monotonic) the header was last read.
        self._header_read = -float("inf")
        #: The version of `_table` as last opened (None until asked): one read per look.
        self._seen: int | None = None
        #: Held while the shared table handle is moved (opened at its latest version, written
        #: through) or read in several steps (a listing's version and rows, a take at that
        #: version): a search beside an upsert on one handle took row ids listed at one
        #: version from rows another thread had moved (KeyError).
        self._lock = threading.RLock()
        #: The creation token of the table this handle's first write made: an undo back to
        #: "not there" (`revert(None, ...)`) drops only that table, and only when empty.
        self._made: str | None = None
        #: (creation token, version) of the table this handle's creation found instead of
        #: making it (LanceDB refused it, or committed it over another writer's table and the
        #: repair undid it): an undo back to "not there" puts rows back as at that version.
        self._found: tuple[str | None, int] | None = None
        #: Writes this handle began (each once it held the write lock), and the write tags of
        #: the batches among them (`Batch.tag`, in `_write_of`): what an ingest stopped by
        #: Ctrl-C or SIGTERM says it kept, nothing or the batches stored still
        #: (`batches_kept`).
        self.writes_begun = 0
        self.batches_begun: list[int] = []

    def close(self) -> None:
        """Release the warm searcher's files (its snapshot's unlinked temporary files hold
        their disk space, and the rows, until closed); the next search loads the rows again."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None

    @property
    def derived_dir(self) -> Path:
        """Where files derived from the table (search graphs) live, on local disk always."""
        return self.db.location.derived_dir(self.name)

    @property
    def pipeline_dir(self) -> Path:
        """Where the copy of the collection's pipeline is kept (a local mirror, remotely)."""
        return self.db.location.own_dir(self.name) / PIPELINE_DIR

    @property
    def exists(self) -> bool:
        """Whether the table has been created (by a first write)."""
        return self._open() is not None

    @property
    def dropped(self) -> bool:
        """Whether the table this handle read is gone (dropped, here or by another process)
        and none was made again: a reader tells that apart from a collection not made yet."""
        return self._header_at is not None and not self.exists

    @one_at_a_time
    def _open(self) -> Any:
        """The LanceDB table at its latest version, or None before the first write.

        A table dropped and made again elsewhere at a lower version cannot be followed from
        the old table (its files are gone) nor reopened on the same connection (which keeps
        the old table's manifests by version number): that takes a new connection.
        """
        if self._table is not None:
            try:
                self._table.checkout_latest()
                behind = (self.db.latest_version(self.name) or 0) < int(self._table.version)
            except RuntimeError as exc:
                if not _files_gone(exc):
                    raise
                behind = True
            if behind:  # the latest version is older than this one: the table was made again
                self.db.reconnect()
                self._table = None
        if self._table is None:
            self._table = self.db.table(self.name)
        self._seen = None
        return self._table

    def _as_seen(self) -> Any:
        """The table as last opened, without looking for newer versions (each look costs a
        round trip to LanceDB's event loop); opened if it never was."""
        return self._require() if self._table is None else self._table

    def _seen_version(self) -> int:
        """The version of the table as last opened, read from LanceDB once per opening."""
        table = self._as_seen()
        if self._seen is None:
            self._seen = int(table.version)
        return self._seen

    def _require(self) -> Any:
        """The table, or a clear error when the collection has no rows yet."""
        table = self._open()
        if table is None:
            raise self.db.not_found(self.name)
        return table

    @property
    def pipeline(self) -> PipelineInfo:
        """The pipeline whose vectors this collection holds."""
        info = self._header()["pipeline"]
        return PipelineInfo(info["name"], info["fingerprint"], tuple(info["models"]))

    @property
    def dim(self) -> int:
        """Dimension of the stored means and variances."""
        return int(self._header()["dim"])

    @property
    def variance_basis(self) -> VarianceBasis | None:
        """The basis stored variances are coefficients on; None where they are stored whole."""
        return variance_basis(self._header())

    @property
    def variance_column(self) -> str:
        """The column that holds each row's variance: coefficients (format 2) or whole."""
        return "var" if self.variance_basis is None else "var_coef"

    @property
    def version(self) -> int:
        """The table's latest LanceDB version; every commit increments it.

        Asked of the database's watching handle first: when the table has not moved (what
        every search asks), that is the only round trip; when it has, or once a second to
        catch a collection made again under this name, the table is reopened.
        """
        if (
            not self._recheck_due()
            and self._seen is not None
            and self.db.latest_version(self.name) == self._seen
        ):
            return self._seen
        self._header(reopen=True)
        return self._seen_version()

    def _recheck_due(self) -> bool:
        """Whether the header should be read again from the latest version whatever its
        number (`RECREATION_RECHECK_S` after the last read)."""
        return time.monotonic() - self._header_read >= RECREATION_RECHECK_S

    @property
    def erasure(self) -> str | None:
        """The mark of the collection's last erasure (None: never erased), read with the
        header: a searcher holding rows from before it loads them afresh, so no process
        that searches keeps the erased rows in its snapshot past its next search."""
        self._header()
        return self._erasure_mark

    @property
    def created(self) -> str | None:
        """The token of this collection's creation (None for tables made before tokens)."""
        return self._header().get("created")

    @one_at_a_time
    def _header(self, reopen: bool = False) -> dict[str, Any]:
        """The probembed entry of the schema metadata, read once per table version.

        It is the header of the version last opened: `version` (and every read or write)
        looks for a newer one first (`reopen`). Once a second it is read again from the latest
        version even at the same number; a new creation token there means the collection was
        dropped and made again, and what was kept of the old one (its pipeline) is forgotten.
        """
        due = self._recheck_due()
        if due or reopen:
            self._require()
        version = self._seen_version()
        if due or self._header_at is None or self._header_at[0] != version:
            schema = self._as_seen().schema
            header = read_header(schema)
            if header is None:
                raise StoreStateError(
                    f"table {self.name!r} in {self.db.path} was not written by probembed"
                )
            held, mark = self._header_at, settings_mark(schema)
            if held is not None and (
                held[1].get("created") != header.get("created") or mark != self._settings_mark
            ):
                self._pipeline, self._shares = None, None
            self._settings_mark, self._erasure_mark = mark, erasure_mark(schema)
            self._header_at, self._header_read = (version, header), time.monotonic()
        return self._header_at[1]

    def decode_variances(self, stored: np.ndarray) -> np.ndarray:
        """Full (n, dim) variances from what the variance column holds."""
        basis = self.variance_basis
        return stored if basis is None else basis.decode(stored)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold this collection's write lock on this machine (other processes, other threads):
        "append unless stored" is a check and then a commit, and two writers passing the check
        together stored an id twice (search then showed it twice). Writers on other machines of
        one object store are not held back: there rows go in by `shared_writes` instead. A
        write the file system refuses (another user's files, a full disk) is said as such
        (`errors.disk_refusals`), not as LanceDB's raw error."""
        with (
            disk_refusals(self.name, self.db.location.table_folder(self.name)),
            atomic.locked(self.db.location.own_dir(self.name) / WRITE_LOCK),
        ):
            self.writes_begun += 1
            yield

    @contextlib.contextmanager
    def planning(
        self, what: str, wait: float | None = None, progress: bool = False
    ) -> Iterator[None]:
        """Hold the collection for a write that plans over its documents (chunked ingest, a
        sync, a delete by document), from its first look at what is stored to its last
        commit and undo, against every other such write on this machine: each decides which
        rows are stale or gone from what it read, and two at once removed each other's
        chunks and records (documents left in part). A wait is said (`_PlanWait`), naming
        the holder and what it does (`what`, as it names this one); `wait`: seconds to wait
        at most (None: until it ends), then `CollectionBusyError`; `progress`: say that it
        still waits, and when it ends. Ordinary writes (add, upsert, delete by id) take only
        the write lock, a commit at a time, and are not held up. Writers on other machines
        of one object store are not held either."""
        path = self.db.location.own_dir(self.name) / PLAN_LOCK
        held: set[Path] = _PLANNING.__dict__.setdefault("paths", set())
        if path in held:  # a part of a larger planning write of this thread
            yield
            return
        if wait is not None and not wait >= 0:  # NaN too: a deadline never reached
            raise StoreError(f"wait must be None (until it ends) or seconds >= 0, not {wait!r}")
        since = time.strftime("%H:%M:%S")
        holder = f"{what} (pid {os.getpid()} on {socket.gethostname()}, since {since})"
        told = _PlanWait(self.name, what, wait, progress)
        lock = contextlib.ExitStack()
        try:
            still = told.still if progress else None  # else flock waits, woken at the end
            lock.enter_context(atomic.locked(path, holder, wait, told.began, still))
        except atomic.LockBusy as busy:
            raise CollectionBusyError(self.name, what, busy.holder, busy.waited) from None
        except (KeyboardInterrupt, Terminated) as stop:
            told.stopped(stop)
            raise
        told.ended()
        with lock:
            held.add(path)
            try:
                yield
            finally:
                held.discard(path)

    @property
    def _shared(self) -> bool:
        """Whether writers this machine's lock does not hold may write at once: a database on
        object storage, which any machine with its URI writes."""
        return self.db.location.remote

    def _at_version(self, version: int) -> Any:
        """The table at `version`: the handle as last opened when it is there (a listing
        just opened it), else a handle of its own checked out at that version."""
        table = self._as_seen()
        if int(table.version) == version:
            return table
        pinned = self.db.table(self.name)
        pinned.checkout(version)
        return pinned
