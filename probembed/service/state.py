"""What the routes share: the database, the served pipelines, their batchers, the locks.

Loading (models, database, warm searchers) runs in a thread after start-up, so /healthz
answers at once and /readyz says when the service can take work. Every LanceDB operation on a
collection holds that collection's lock (searches and writes alike), so a searcher never
refreshes while a write commits; encoding happens outside it, in the batchers (a plain
write reads the collection, then encodes its documents unlocked, then commits; a chunked
write, which replaces a document's chunks as a whole, holds the collection's write lock
throughout, so no other chunked write or drop comes between its steps, and lets the
collection's lock go while each batch encodes). Disk upkeep runs in the background: every
UPKEEP_CHECK_S a pass compacts each collection written enough since its last one where that
pays, and prunes its old versions (`upkeep`), in a writer's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from probembed.pipeline import Pipeline, pipeline_name
from probembed.service.batching import Batcher, StoppingError
from probembed.service.metrics import Metrics
from probembed.service.settings import ServiceSettings
from probembed.service.storage import hidden, operator_places
from probembed.service.worker import ChildLoadError, EncodeProcess, child_threads
from probembed.store import (
    Collection,
    CollectionNotFoundError,
    Database,
    NoDatabaseError,
    StorageUnavailableError,
    StoreError,
)
from probembed.store.errors import quoted
from probembed.store.upkeep import Compaction
from probembed.variance_basis import pipeline_basis

T = TypeVar("T")
#: Seconds /readyz answers 503 after the database's object storage failed a request: long
#: enough for a balancer's probe to see it, short enough that a recovered storage is served
#: again without a restart (no probe of the storage itself: that would cost a call per probe).
STORAGE_HOLD = 10.0
#: Seconds between the background passes that look for collections due for upkeep (each look
#: is one read of a collection's version).
UPKEEP_CHECK_S = 60.0
log = logging.getLogger("probembed.service")


class NotReadyError(Exception):
    """A request arrived before the pipelines were loaded (or loading failed)."""

    def __init__(self, message: str, failed: bool = False) -> None:
        super().__init__(message)
        #: Loading failed: retrying will not help, so no Retry-After is sent.
        self.failed = failed


class UnknownModelError(LookupError):
    """An embedding request for a pipeline this server does not serve."""


class UnservableError(Exception):
    """A collection whose pipeline this server cannot load: it alone is refused, not the
    whole service (its encoder registered in a user's script only, its model folder gone)."""


@dataclass
class _Held:
    """A collection's locks and the requests holding or waiting for them."""

    #: Held by every LanceDB operation on the collection.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Held through a chunked write, which lets `lock` go while it encodes, and by a drop.
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Service:
    """The service's shared state; `start` on the event loop, `stop` at shutdown."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.db: Database | None = None
        #: Served pipelines by the name clients use as `model`.
        self.pipelines: dict[str, Pipeline] = {}
        self.failure: str | None = None
        #: The last failure of the database's object storage, and when (`time.monotonic`):
        #: /readyz says so for STORAGE_HOLD seconds, so a balancer routes away meanwhile.
        self.storage_failure: tuple[str, float] | None = None
        self._ready = asyncio.Event()
        self._batchers: dict[str, Batcher] = {}
        #: Per collection: its lock and how many requests hold or wait for it (then dropped).
        self._locks: dict[str, _Held] = {}
        self._guard = threading.Lock()
        #: Held while a pipeline's children start (`_spawn`), one pipeline at a time.
        self._spawning = threading.Lock()
        self._dims: dict[str, int] = {}
        #: Served pipeline name -> what it was loaded from (a built-in name or a directory).
        self._sources: dict[str, str] = {}
        #: Pipeline fingerprint -> its encoding child processes.
        self._workers: dict[str, list[EncodeProcess]] = {}
        #: Collection work running in threads (`run`) and children retiring, which `stop`
        #: waits for.
        self._running: set[asyncio.Future[Any]] = set()
        #: Set by `stop`: no new collection work, children or batchers (StoppingError, 503).
        self.stopping = False
        #: Threads of `writer` work, apart from the loop's default pool: a chunked write
        #: waiting to take its collection's lock back holds its thread, and in the default
        #: pool enough of them left none for the searches holding those locks (a deadlock).
        self._writers = ThreadPoolExecutor(thread_name_prefix="chunked-write")
        #: Per collection, its version after this service's last upkeep of it (none: 0).
        self._upkept: dict[str, int] = {}
        #: Per collection, the earliest a prune of its versions may be due, as its last
        #: listing said (`Collection.prune_due_at`): no listing before then.
        self._prune_at: dict[str, datetime] = {}
        #: The loop of background upkeep passes, while it runs.
        self._upkeeping: asyncio.Task[None] | None = None
        #: Collections whose pipeline did not load here, and why, as a client reads it
        #: (/readyz, the listing); cleared when it loads again, its children too (`prepare`).
        self.unservable: dict[str, str] = {}
        self._places = operator_places(settings.db, settings.storage_options)

    @property
    def ready(self) -> bool:
        """Pipelines loaded and database open."""
        return self._ready.is_set()

    def storage_failed(self, message: str) -> None:
        """Note a failure of the database's object storage (what /readyz reports)."""
        self.storage_failure = (message, time.monotonic())

    def storage_trouble(self) -> str | None:
        """The storage's last failure if it is under STORAGE_HOLD seconds old, else None."""
        if self.storage_failure is None:
            return None
        message, when = self.storage_failure
        return message if time.monotonic() - when < STORAGE_HOLD else None

    async def start(self) -> None:
        """Load in a thread while every served pipeline's encoding children load it in
        theirs (they waited for this process's load, and each pipeline's for the one before:
        a built-in's children took as long again), start one batcher per served pipeline,
        then freeze what loading made out of the garbage collector's reach (`gc.freeze`): a
        full collection, which a large search's allocations set off in any thread, traversed
        the loaded models and modules with the GIL held, and the event loop, /healthz
        included, waited for it."""
        children = {
            source: asyncio.ensure_future(asyncio.to_thread(self._start_served, source))
            for source in map(str, self.settings.pipelines)
        }
        try:
            await asyncio.to_thread(self._load)
            started = [await children[source] for source in self._sources.values()]
        except Exception as exc:  # reported by /readyz and the log; the server stays up
            self.failure = f"{type(exc).__name__}: {exc}"
            log.error("service failed to load: %s", self.failure)
            await _close_started(children.values())
            return
        for pipeline, workers in zip(self.pipelines.values(), started, strict=True):
            self._workers[pipeline.fingerprint] = workers
        gc.freeze()  # live for the server's life: reference counts still free what is dropped
        self._ready.set()
        if self.settings.upkeep.every:  # `stop` cancels it and waits, as for all `_running`
            self._upkeeping = asyncio.create_task(self._upkeep_loop())
            self._running.add(self._upkeeping)
            self._upkeeping.add_done_callback(self._running.discard)
        log.info(
            "ready on %s: pipelines %s, database %s",
            *(self.settings.url, list(self.pipelines), self.settings.db),
        )

    async def stop(self) -> None:
        """Refuse new work and fail the encodes not answered yet in every batcher at once (a
        write whose encode failed undoes itself), end the encoding children busy with a batch
        (nobody waits for it now), wait for collection work still running (a commit, an undo,
        an upkeep's compaction: the store's work, each whole or not at all), then close the
        idle children; the database closes with the process."""
        self.stopping = True
        if self._upkeeping is not None:  # a pass's compaction in a thread is waited for below
            self._upkeeping.cancel()
        batchers = list(self._batchers.values())
        for batcher in batchers:  # all before any waits: a second pipeline's write is told too
            batcher.refuse()
        workers = [w for each in self._workers.values() for w in each]
        ended = sum(worker.abandon() for worker in workers)  # their batches answer nobody now
        if ended:
            log.warning("shutdown: stopped %s in the middle of a batch", _children(ended))
        await asyncio.gather(*(batcher.stop() for batcher in batchers))
        if self._running:
            await asyncio.wait(list(self._running))
        for worker in [w for each in self._workers.values() for w in each]:  # none retiring
            await asyncio.to_thread(worker.close)
        self._writers.shutdown(wait=False)  # its work is done: `_running` was waited for
        self.db = None

    def _load(self) -> None:
        """Open the database, load the pipelines, and warm every collection's searcher."""
        settings = self.settings
        for name in self.settings.pipelines:
            pipeline = Pipeline.load(name)
            if pipeline.name in self.pipelines:
                raise ValueError(f"two pipelines are named {pipeline.name!r}; serve one of them")
            self.pipelines[pipeline.name] = pipeline
            self._sources[pipeline.name] = str(name)
            self._dims[pipeline.name] = pipeline.empty().gaussian.dim
            pipeline_basis(pipeline)  # a pipeline that ships none is fitted now, not in a request
        # Only once every pipeline loaded: a server that cannot start creates no database.
        try:
            db = Database(
                settings.db, create=settings.create_db, storage_options=settings.storage_options
            )
        except NoDatabaseError as exc:  # it named `Database(..., create=True)`
            raise StoreError(exc.told("`ServiceSettings(create_db=True)`")) from exc
        self.db = db
        names = db.collections()
        if not names:
            log.warning(
                "database %s holds no collections yet; create one with POST /v1/collections",
                settings.db,
            )
        for name in names:
            collection = self._share_pipeline(db.open(name))  # no request runs before ready
            self.metrics.items.labels(name).set(collection.count())
            try:
                self.own_pipeline(collection)
            except UnservableError:  # logged; its routes alone are refused
                continue
            collection.searcher().warm()

    def require_ready(self) -> Database:
        """The database, or NotReadyError while loading."""
        if not self.ready or self.db is None:
            if self.failure:
                raise NotReadyError(self.failure, failed=True)
            raise NotReadyError("the service is still loading its pipelines")
        return self.db

    def pipeline(self, name: str | None, field: str = "model") -> Pipeline:
        """A served pipeline by name (None: the first), or an error listing the served ones,
        called by the request's own `field` (OpenAI's `model`, a collection's `pipeline`)."""
        self.require_ready()
        if name is None:
            return next(iter(self.pipelines.values()))
        if name not in self.pipelines:
            raise UnknownModelError(
                f"{field} {quoted(name)} is not served here; {field}s: {', '.join(self.pipelines)}"
            )
        return self.pipelines[name]

    def dim(self, name: str) -> int:
        """The dimension of a served pipeline's fused vectors."""
        return self._dims[self.pipeline(name).name]

    def _spawn(self, pipeline: Pipeline, source: str) -> None:
        """Start (once) the children that encode for a pipeline, kept once they have loaded
        it; where they cannot (ChildLoadError), none is kept: the next request starts them
        again, where a child that never loaded was kept and every request answered 500."""
        with self._spawning:  # a second request for the pipeline waits for these children
            if pipeline.fingerprint in self._workers:
                return
            workers = self._start_children(source, self.label(pipeline))
            with self._guard:
                self._workers[pipeline.fingerprint] = workers

    def _start_served(self, source: str) -> list[EncodeProcess]:
        """The encoding children of a served pipeline, counted in metrics under the name it
        is served by (read from its directory: this process may not have loaded it yet)."""
        return self._start_children(source, pipeline_name(source))

    def _start_children(self, source: str, label: str) -> list[EncodeProcess]:
        """`batching.workers` children, each once it has loaded the pipeline at `source`;
        where any cannot (ChildLoadError), all are closed and it is raised."""
        count = self.settings.batching.workers
        respawns = self.metrics.respawned.labels(label)
        threads = child_threads(count)
        logs = self.settings.logs
        workers = [EncodeProcess(source, threads, respawns.inc, logs) for _ in range(count)]
        try:
            with ThreadPoolExecutor(count) as loading:  # the children load side by side
                list(loading.map(EncodeProcess.warm, workers))
        except BaseException:
            for worker in workers:
                worker.close()
            raise
        return workers

    def source_of(self, collection: Collection) -> str:
        """Where a collection's pipeline loads from: a served one, or the collection's copy."""
        fingerprint = collection.pipeline.fingerprint
        for name, pipeline in self.pipelines.items():
            if pipeline.fingerprint == fingerprint:
                return self._sources[name]
        return str(collection.pipeline_dir)

    def refuse_if_stopping(self) -> None:
        """StoppingError once `stop` has begun: a request the shutdown cancelled answers with
        what its thread did, and must not start more (a child, a batcher `stop` never sees)."""
        if self.stopping:
            raise StoppingError

    def batcher(self, pipeline: Pipeline) -> Batcher:
        """The batcher of a pipeline whose child process runs (`start` or `prepare`)."""
        self.refuse_if_stopping()
        key = pipeline.fingerprint
        if key not in self._batchers:
            workers = self._workers[key]
            batcher = Batcher(workers, self.settings.batching, self.metrics, self.label(pipeline))
            batcher.start()
            self._batchers[key] = batcher
        return self._batchers[key]

    def label(self, pipeline: Pipeline) -> str:
        """A pipeline's name in metrics: a collection's own pipeline may share a served one's
        name, so it gets its own series (`name@fingerprint`)."""
        served = self.pipelines.get(pipeline.name)
        if served is not None and served.fingerprint == pipeline.fingerprint:
            return pipeline.name
        return f"{pipeline.name}@{pipeline.fingerprint[:8]}"

    async def prepare(self, collection: Collection) -> Pipeline:
        """A collection's pipeline, with its encoding children running, or UnservableError
        where this process or its children cannot load it (cleared once both do)."""
        self.refuse_if_stopping()

        def load() -> Pipeline:  # a collection dropped meanwhile: children none would retire
            return self.own_pipeline(self.still(collection))

        pipeline = await asyncio.to_thread(load)
        if pipeline.fingerprint not in self._workers:
            try:
                await asyncio.to_thread(self._spawn, pipeline, self.source_of(collection))
            except ChildLoadError as exc:
                raise self._unservable(collection.name, exc) from exc
        self.unservable.pop(collection.name, None)
        return pipeline

    def own_pipeline(self, collection: Collection) -> Pipeline:
        """The collection's pipeline, or UnservableError naming the collection and why: one
        collection this process could not load made the whole service `failed`. A storage
        failure is the database's, told as such."""
        try:
            return collection.load_pipeline()
        except StorageUnavailableError:
            raise
        except Exception as exc:
            raise self._unservable(collection.name, exc) from exc

    def _unservable(self, name: str, exc: Exception) -> UnservableError:
        """The refusal of a collection whose pipeline does not load, here or in its encoding
        children, kept for /readyz and the listing and logged once per cause."""
        cause = f"{type(exc).__name__}: {exc}"
        told = hidden(cause, self._places)
        if self.unservable.get(name) != told:
            log.error("collection %r is not served: its pipeline does not load: %s", name, cause)
        self.unservable[name] = told
        return UnservableError(
            f"collection {name!r} cannot be served: its pipeline does not load in this server "
            f"({told}); it is refused until what it needs is installed or restored here"
        )

    def collection(self, name: str) -> Collection:
        """An existing collection, or CollectionNotFoundError listing the ones there are (its
        item count then leaves the metrics: another process may have dropped it)."""
        try:
            return self._share_pipeline(self.require_ready().open(name))
        except CollectionNotFoundError:
            self.forget(name)
            raise

    def still(self, collection: Collection) -> Collection:
        """The collection a request began with, if it is still the one under its name: a drop
        (and a make again) between a request's steps closed it, and its work would fail."""
        try:
            current = self.collection(collection.name)
        except CollectionNotFoundError:
            current = None
        if current is not collection:
            raise CollectionNotFoundError(
                f"collection {collection.name!r} was dropped while this request ran"
            )
        return collection

    def _share_pipeline(self, collection: Collection) -> Collection:
        """Search a collection with the served pipeline that made it, not a second copy."""
        fingerprint = collection.pipeline.fingerprint
        for pipeline in self.pipelines.values():
            if pipeline.fingerprint == fingerprint:
                collection.use_pipeline(pipeline)
                break
        return collection

    async def run(self, name: str, work: Callable[[], T], writer: bool = False) -> T:
        """Run blocking work on a collection in a thread, holding the collection's lock (a
        `writer` holds the collection's write lock around it, so its work may let the
        collection's lock go for a while: `unlocked`).

        The lock is waited for on the event loop, not in a thread: requests queued behind a
        long chunked write held every thread of the loop's pool, and stalled every other
        collection's requests. A cancelled request (uvicorn cancels those still running when
        its shutdown grace ends) keeps the lock until its thread ends, and answers with what
        the thread did: its result, or its error (once the service stops, the encoders refuse
        more work, and a chunked write part-way undoes itself).
        """
        self.refuse_if_stopping()
        held = self._locks.setdefault(name, _Held())
        held.users += 1
        try:
            async with held.writing if writer else contextlib.nullcontext(), held.lock:
                pool = self._writers if writer else None
                task = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(pool, work))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
                try:
                    return await asyncio.shield(task)
                except asyncio.CancelledError:
                    await asyncio.wait([task])  # a thread cannot be stopped: wait for it
                    current = asyncio.current_task()
                    if current is not None:  # answered as the thread ended, not cancelled
                        current.uncancel()
                    return task.result()
        finally:
            held.users -= 1
            if not held.users:
                del self._locks[name]

    @contextlib.contextmanager
    def unlocked(self, name: str, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """In the thread of a `writer`'s work: let the collection's lock go (its searches
        and other work run meanwhile; other writers and a drop still wait), then take it
        back. A chunked write encodes so: holding the lock, it held up the collection's
        searches for as long as its documents took to encode."""
        lock = self._locks[name].lock
        loop.call_soon_threadsafe(lock.release)
        try:
            yield
        finally:
            asyncio.run_coroutine_threadsafe(lock.acquire(), loop).result()

    def count_items(self, collection: Collection) -> int:
        """The collection's item count, exported as a metric."""
        count = collection.count()
        self.metrics.items.labels(collection.name).set(count)
        return count

    def forget(self, name: str) -> None:
        """Drop a deleted collection's metrics, upkeep mark and load failure."""
        self.unservable.pop(name, None)
        self._upkept.pop(name, None)
        self._prune_at.pop(name, None)
        for metric, labels in (
            (self.metrics.items, [(name,)]),
            (self.metrics.freed_bytes, [(name,)]),
            (self.metrics.compactions, [(name, "done"), (name, "failed")]),
        ):
            for label in labels:
                with contextlib.suppress(KeyError):
                    metric.remove(*label)

    async def _upkeep_loop(self) -> None:
        """Run an upkeep pass every UPKEEP_CHECK_S until the service stops."""
        while not self.stopping:
            await asyncio.sleep(UPKEEP_CHECK_S)
            try:
                await self.upkeep()
            except Exception as exc:  # the database's listing: the next pass tries again
                log.error("upkeep pass failed: %r", exc)

    async def upkeep(self) -> list[Compaction]:
        """One pass: compact each collection with `--compact-every` commits since its last
        upkeep where that pays (`Collection.compaction_due`) or where `PRUNE_VERSIONS` of its
        versions were replaced `--compact-keep` ago, and prune those, each in a writer's turn
        (`run(..., writer=True)`: no write or drop of this service beside it; other
        processes' writes wait for the collection's write lock, which
        `Collection.upkeep_if_due` holds). Without it a collection's disk grew by every
        commit's version, never pruned; compacting every collection rewrote one of a few
        large fragments whole; and a collection only deleted from never had a compaction due,
        so its versions were never pruned. A failure is logged and counted and the pass goes
        on; returns what it did."""
        db = self.require_ready()
        done = []
        for name in await asyncio.to_thread(db.collections):
            try:
                if not await self.run(name, partial(self._upkeep_due, name)):
                    continue
                compacted = await self.run(name, partial(self._compact, name), writer=True)
            except CollectionNotFoundError:  # dropped since it was listed
                continue
            except StoppingError:
                break
            except Exception as exc:  # the next pass tries again; requests are not touched
                log.error("upkeep of collection %s failed: %r", name, exc)
                self.metrics.compactions.labels(name, "failed").inc()
                continue
            if compacted is not None:
                done.append(compacted)
        return done

    def _upkeep_due(self, name: str) -> bool:
        """Whether a collection took `--compact-every` commits since its last upkeep here and
        compacting it pays or enough of its versions can be pruned, read in a reader's turn:
        the pass takes a writer's turn (and the write lock) only then."""
        collection = self.collection(name)
        written = collection.version - self._upkept.get(name, 0) >= self.settings.upkeep.every
        return written and (collection.compaction_due() or self._prune_due(collection))

    def _prune_due(self, collection: Collection) -> bool:
        """Whether `PRUNE_VERSIONS` of the collection's versions are past `--compact-keep`,
        listed (a read of every version's manifest, on object storage a request each) only
        once the last listing's `prune_due_at` has come."""
        now = datetime.now(UTC)
        if self._prune_at.get(collection.name, now) > now:
            return False
        self._prune_at[collection.name] = collection.prune_due_at(self.settings.upkeep.keep)
        return self._prune_at[collection.name] <= now

    def _compact(self, name: str) -> Compaction | None:
        """Compact and prune one collection if that is still due under its write lock
        (another process may have compacted it since `_upkeep_due`), then log and count what
        it freed."""
        done = self.collection(name).upkeep_if_due(self.settings.upkeep.keep)
        if done is None:
            return None
        self._upkept[name] = done.version
        self.metrics.compactions.labels(name, "done").inc()
        self.metrics.freed_bytes.labels(name).inc(done.bytes_freed)
        log.info("upkeep of collection %s", done)
        return done

    def forget_all_but(self, names: list[str]) -> None:
        """Drop the metric and load failure of every collection a listing no longer holds: one
        dropped by another process (the CLI) kept its last count, and /readyz its failure, for
        as long as this server ran."""
        listed = set(names)
        for name in set(self.unservable) - listed:  # one a request found so has no count
            self.forget(name)
        for metric in self.metrics.items.collect():
            for sample in metric.samples:
                if sample.labels["collection"] not in listed:
                    self.forget(sample.labels["collection"])

    def retire(self, fingerprint: str) -> None:
        """Stop, in the background, the encoding children of a pipeline that no served name
        and no collection uses any more: a dropped collection's own pipeline kept its
        children (each a loaded copy of its models) until shutdown. A later collection of
        that pipeline spawns them again (`prepare`); `stop` waits for the retiring."""
        task = asyncio.ensure_future(self._retire(fingerprint))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(_log_failure)

    async def _retire(self, fingerprint: str) -> None:
        """`retire`'s work, on the loop."""
        served = {pipeline.fingerprint for pipeline in self.pipelines.values()}
        if fingerprint in served or fingerprint not in self._workers or self.db is None:
            return
        if fingerprint in await asyncio.to_thread(self._fingerprints_in_use, self.db):
            return
        # taken off the loop's tables at once: `prepare` then `batcher` has no await between
        # them, so no request gets a batcher whose children are closing
        with self._guard:
            workers = self._workers.pop(fingerprint, [])
        batcher = self._batchers.pop(fingerprint, None)
        if batcher is not None:
            await batcher.close()
        for worker in workers:
            await asyncio.to_thread(worker.close)
        log.info(
            "pipeline %s is used by no collection: stopped its %s",
            *(fingerprint[:8], _children(len(workers))),
        )

    @staticmethod
    def _fingerprints_in_use(db: Database) -> set[str]:
        """The pipelines of the database's collections."""
        found = set()
        for name in db.collections():
            with contextlib.suppress(CollectionNotFoundError):  # dropped since it was listed
                found.add(db.open(name).pipeline.fingerprint)
        return found


def _children(count: int) -> str:
    """How many encoding children, in the number the count takes: the log said "stopped 1
    encoding children"."""
    return f"{count} encoding {'child' if count == 1 else 'children'}"


async def _close_started(starting: Iterable[asyncio.Future[list[EncodeProcess]]]) -> None:
    """Close the encoding children of a start that failed, once each pipeline's have loaded
    (or failed to, and closed themselves)."""
    for started in await asyncio.gather(*starting, return_exceptions=True):
        for worker in started if isinstance(started, list) else []:
            await asyncio.to_thread(worker.close)


def _log_failure(task: asyncio.Future[Any]) -> None:
    """Log what a background task raised; nobody awaits it to see."""
    if not task.cancelled() and task.exception() is not None:
        log.error("retiring encoding children failed: %r", task.exception())
