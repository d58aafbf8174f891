"""Dynamic batching: concurrent requests' texts coalesced into one encode call, off the loop.

Each request puts its texts on a bounded queue and awaits its share of the result. One task
waits for a free encoder (a pipeline has one or more, each encoding one batch at a time),
takes the first waiting request, lets others join it for at most `max_wait_ms` or until
`max_batch` texts, and hands that batch, or its share of the queue when other encoders are
free too, to the encoder in a worker thread. Encoders free at once split the queue (so a
light load runs on every core), and the next one waits out its own gathering, which keeps
them out of step: under load each finds the queue refilled by the time it is free. While every
encoder is busy, requests gather in the queue, so batches grow with the load. A request
larger than `max_batch` is cut into near-equal pieces of at most `max_piece` texts (or
`max_batch`, if larger), at least one per encoder, queued in as many lanes as encoders: each
lane queues its next piece once its last is encoded, behind whatever arrived meanwhile, so
free encoders take the first pieces at once (a large request kept one encoder busy while the
others idled), a search that arrives during a large write waits for the pieces being
encoded, not the whole write (its pieces, one per encoder, held every encoder until all of it
was encoded), and the write still advances under a steady stream of searches. When the
queue holds
`max_queue` texts, new requests are refused with a retry estimate from the recent
throughput; a chunked write once accepted (`encode_blocking`, each of its batches) waits for
room instead, so a moment's spike does not undo it, and the room it waits for is held for it:
new requests are refused meanwhile. An encoder that loses a batch through no fault of the
batch (`EncoderLost`: its process died) puts it back at the head of the queue for the next free
encoder and takes no more work until it has recovered (a replacement child held the batch for
its whole load while a sibling idled); a request lost twice fails.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from probembed.fusion import Fused
from probembed.service.metrics import Metrics
from probembed.service.settings import BatchSettings
from probembed.service.worker import EncoderLost

#: Weight of the newest batch in the throughput estimate behind Retry-After.
_RATE_SMOOTHING = 0.2


class StoppingError(Exception):
    """The service is shutting down: its encoders take no more work (a write in progress
    fails at its next batch, and a chunked one is undone)."""

    def __init__(self) -> None:
        super().__init__("the service is shutting down and takes no more work; retry later")


class QueueFullError(Exception):
    """The encode queue is full: try again after `retry_after` seconds."""

    def __init__(self, pending: int, asked: int, limit: int, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(
            f"the encode queue holds {pending} texts and this request brings {asked}, over "
            f"the limit of {limit} (--max-queue); retry in {retry_after} s"
        )


@dataclass
class _Request:
    texts: list[str]
    future: asyncio.Future[Fused]
    #: Already in a batch an encoder lost: lost once more, it fails rather than go round again.
    lost: bool = False


class Batcher:
    """Coalesces the encode requests of one pipeline; start() on the loop that will await it."""

    def __init__(
        self,
        encoders: Sequence[Callable[[list[str]], Fused]],
        settings: BatchSettings,
        metrics: Metrics,
        label: str,
    ) -> None:
        if not encoders:
            raise ValueError("a batcher needs at least one encoder")
        self._encoders = list(encoders)
        self.settings = settings
        self._metrics = metrics
        self.label = label
        self._queue: deque[_Request] = deque()
        self._pending = 0
        self._texts_per_second = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._free: asyncio.Queue[Callable[[list[str]], Fused]] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._executor = ThreadPoolExecutor(len(encoders), thread_name_prefix=f"encode-{label}")
        #: Set by `stop`: new texts are refused, so a write still running learns it at once
        #: instead of waiting for an encoder that will never answer.
        self._stopping = False
        #: Requests not answered yet, queued or being encoded.
        self._waiting: set[asyncio.Future[Fused]] = set()
        #: Set (and replaced) whenever the queue shrinks: writes waiting for room look again.
        self._room: asyncio.Event | None = None
        #: Texts of the writes waiting for room: held for them, so new requests do not take
        #: the room as it frees (searches kept a write of 512 texts waiting for ever).
        self._reserved = 0

    def start(self) -> None:
        """Begin serving on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._free = asyncio.Queue()
        for encoder in self._encoders:
            self._free.put_nowait(encoder)
        self._task = self._loop.create_task(self._serve(), name=f"batcher-{self.label}")

    def refuse(self) -> None:
        """Refuse new texts and fail those not answered yet. By now uvicorn has answered or
        cancelled every request, so only a write running in a thread still waits for an
        encode: told at once, it undoes itself now, not after an encode it cannot use."""
        self._stopping = True
        if self._room is not None:  # writes waiting for room learn it too
            self._room.set()
        for future in list(self._waiting):
            if not future.done():
                future.set_exception(StoppingError())
        self._set_pending(self._pending - sum(len(request.texts) for request in self._queue))
        self._queue.clear()

    async def stop(self) -> None:
        """`refuse`, then stop the workers once the batches being encoded are done."""
        self.refuse()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*self._running, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def close(self) -> None:
        """`stop` once every request already queued is answered: for a batcher no new request
        can reach (its pipeline's last collection was dropped), whose callers still wait."""
        while self._waiting:
            await asyncio.wait(list(self._waiting))  # not gather: a cancelled close cancels none
        await self.stop()

    async def encode(self, texts: Sequence[str], wait: bool = False) -> Fused:
        """The pipeline's Fused for these texts, encoded with whatever else is waiting; over
        `max_queue` refused, or with `wait` queued once there is room."""
        if self._arrived is None or self._room is None:
            raise RuntimeError("Batcher.encode before start()")
        if self._stopping:
            raise StoppingError()
        texts = list(texts)
        limit = self.settings.max_queue
        queued = self._pending + self._reserved  # a new request leaves waiting writes their room
        if not wait and self._pending and queued + len(texts) > limit:
            self._metrics.rejected.labels(self.label).inc()
            raise QueueFullError(queued, len(texts), limit, self._retry_after())
        if wait:
            await self._wait_for_room(len(texts))
            if self._stopping:  # it stopped while the write waited
                raise StoppingError()
        settings = self.settings
        piece = max(settings.max_batch, settings.max_piece)
        pieces = _pieces(texts, settings.max_batch, piece, len(self._encoders))
        if len(pieces) == 1:
            return await self._enqueue(pieces[0])
        lanes = min(len(pieces), len(self._encoders))
        tasks = [asyncio.ensure_future(self._lane(pieces[i::lanes])) for i in range(lanes)]
        try:
            done = await asyncio.gather(*tasks)
        except BaseException:  # a piece failed, or the request was cancelled: stop the rest
            for task in tasks:
                task.cancel()
            raise
        return Fused.concat([done[i % lanes][i // lanes] for i in range(len(pieces))])

    async def _lane(self, pieces: list[list[str]]) -> list[Fused]:
        """Queue a large request's pieces one at a time, each once the last is encoded: at
        most one piece per lane waits, so requests that arrive meanwhile go before the next."""
        out = []
        for piece in pieces:
            if self._stopping:
                raise StoppingError()
            out.append(await self._enqueue(piece))
        return out

    async def _wait_for_room(self, size: int) -> None:
        """Hold `size` texts' room for a write until the queue has it (or the batcher stops)."""
        assert self._room is not None
        self._reserved += size
        try:
            while (
                not self._stopping
                and self._pending
                and self._pending + size > self.settings.max_queue
            ):
                await self._room.wait()
        finally:
            self._reserved -= size

    def _enqueue(self, texts: list[str]) -> asyncio.Future[Fused]:
        """Queue texts as one request; the future its batch answers."""
        assert self._arrived is not None
        future: asyncio.Future[Fused] = asyncio.get_running_loop().create_future()
        self._waiting.add(future)
        future.add_done_callback(self._waiting.discard)
        self._queue.append(_Request(texts, future))
        self._set_pending(self._pending + len(texts))
        self._arrived.set()
        return future

    def encode_blocking(self, texts: Sequence[str], wait: bool = True) -> Fused:
        """`encode` from a worker thread (a write already running), waiting in that thread
        for room in the queue (`wait`; else refused as `encode` refuses) and for the result."""
        if self._loop is None:
            raise RuntimeError("Batcher.encode_blocking before start()")
        return asyncio.run_coroutine_threadsafe(self.encode(texts, wait=wait), self._loop).result()

    async def _serve(self) -> None:
        """Whenever an encoder is free and texts wait, give it the next batch, forever."""
        assert self._arrived is not None and self._free is not None
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            encoder = await self._free.get()
            await self._gather()
            if not self._queue:  # refused while it waited for the encoder
                self._free.put_nowait(encoder)
                continue
            task = asyncio.create_task(self._encode_batch(encoder, self._take()))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _encode_batch(
        self, encoder: Callable[[list[str]], Fused], batch: list[_Request]
    ) -> None:
        """Encode one batch in a worker thread, answer its requests, and free the encoder."""
        assert self._loop is not None and self._free is not None
        texts = [t for request in batch for t in request.texts]
        started = time.perf_counter()
        answered = batch  # their texts leave the queue's count once this batch is done
        try:
            fused = await self._loop.run_in_executor(self._executor, encoder, texts)
        except EncoderLost as lost:
            answered = []
            self._requeue(batch, lost)
            await self._loop.run_in_executor(self._executor, lost.recover)  # then freed
            return
        except Exception as exc:  # every waiter learns what went wrong
            _fail(batch, exc)
        else:
            _deliver(batch, fused)
        finally:
            self._set_pending(self._pending - sum(len(request.texts) for request in answered))
            self._free.put_nowait(encoder)
        self._observe(len(texts), time.perf_counter() - started)

    def _requeue(self, batch: list[_Request], lost: EncoderLost) -> None:
        """Put a lost batch's requests back at the head of the queue, in order, for the next
        free encoder; fail those lost before (or all, once stopping), and drop those whose
        client went (encoded again, the text that killed a child could kill another)."""
        assert self._arrived is not None
        back, ended = [], []
        for request in batch:
            if request.future.done():
                ended.append(request)
            elif request.lost or self._stopping:
                request.future.set_exception(StoppingError() if self._stopping else lost)
                ended.append(request)
            else:
                request.lost = True
                back.append(request)
        self._set_pending(self._pending - sum(len(request.texts) for request in ended))
        self._queue.extendleft(reversed(back))
        self._arrived.set()

    async def _gather(self) -> None:
        """Let requests join the first one for at most max_wait_ms or until the batch is full."""
        assert self._arrived is not None
        deadline = time.perf_counter() + self.settings.max_wait_ms / 1000
        while sum(len(r.texts) for r in self._queue) < self.settings.max_batch:
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                return

    def _take(self) -> list[_Request]:
        """Requests for one batch: at least one, then up to max_batch texts or this encoder's
        share of the queue, so encoders that are free together split it and run at once."""
        assert self._free is not None
        queued = sum(len(request.texts) for request in self._queue)
        share = math.ceil(queued / (1 + self._free.qsize()))
        limit = min(self.settings.max_batch, share)
        batch = [self._queue.popleft()]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= limit:
            request = self._queue.popleft()
            batch.append(request)
            size += len(request.texts)
        return batch

    def _set_pending(self, pending: int) -> None:
        """Texts queued or being encoded, exported as the queue depth; a shrink wakes the
        writes waiting for room."""
        if pending < self._pending and self._room is not None:
            self._room.set()
            self._room = asyncio.Event()
        self._pending = pending
        self._metrics.queue_depth.labels(self.label).set(pending)

    def _observe(self, size: int, seconds: float) -> None:
        """Record a batch's size and time, and update one encoder's throughput estimate."""
        self._metrics.batch_size.labels(self.label).observe(size)
        self._metrics.batch_seconds.labels(self.label).observe(seconds)
        rate = size / max(seconds, 1e-6)
        old = self._texts_per_second
        self._texts_per_second = rate if old == 0 else old + _RATE_SMOOTHING * (rate - old)

    def _retry_after(self) -> int:
        """Whole seconds until the queue has drained at the recent rate (at least 1)."""
        if self._texts_per_second <= 0:
            return 1
        rate = self._texts_per_second * len(self._encoders)
        return max(1, math.ceil(self._pending / rate))


def _pieces(texts: list[str], max_batch: int, piece: int, encoders: int) -> list[list[str]]:
    """A request as queued: whole up to max_batch texts, else near-equal pieces of at most
    `piece` texts, at least one per encoder."""
    if len(texts) <= max_batch:
        return [texts]
    n = len(texts)
    count = min(n, max(encoders, math.ceil(n / piece)))
    return [texts[i * n // count : (i + 1) * n // count] for i in range(count)]


def _fail(requests: list[_Request], exc: BaseException) -> None:
    """Tell each request still waiting what went wrong."""
    for request in requests:
        if not request.future.done():
            request.future.set_exception(exc)


def _deliver(batch: list[_Request], fused: Fused) -> None:
    """Give each request its own rows of the batch's result."""
    start = 0
    for request in batch:
        stop = start + len(request.texts)
        part = fused.rows(slice(start, stop))
        if not request.future.done():  # a client that went away cancelled its future
            request.future.set_result(part)
        start = stop
