"""Encoding in a child process, so the event loop and the encoders never share a GIL.

With a busy Python thread beside it (an event loop serving many clients), every step of the
encoders' Python glue waits for the interpreter lock, and encoding slows several-fold. A spawned
process (never forked: torch and its threads do not survive a fork) loads the pipeline once
and encodes whatever the batcher sends it; Fused results come back pickled.

A service runs several such children per pipeline (`BatchSettings.workers`), each encoding
its own batch. A small batch gains little from a second torch thread (its matrix products are
too thin to split well), so two single-threaded children encoding two batches at once use two
cores better than one child with two threads. The cores left over are shared out among the
children, one kept back for the event loop, and their OpenMP threads sleep rather than spin
when idle (an explicit OMP_NUM_THREADS or OMP_WAIT_POLICY in the environment wins): with a
core busy beside it, torch's spinning threads fight the event loop for it.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from threadpoolctl import threadpool_limits

from probembed.encoders.base import thread_limit
from probembed.fusion import Fused
from probembed.service.logs import DEFAULT_LOGS, LogSettings, configure_logging

_PIPELINE = None
#: In a child whose pipeline did not load: why, raised to each batch it is sent.
_UNLOADED: str | None = None
log = logging.getLogger("probembed.service")


class EncoderLost(Exception):
    """An encoder lost a batch (its process died): the batch can go to another encoder, and
    this one takes work again once `recover` (blocking; it does not raise: a recovery that
    failed is told by the encoder's next batch) has returned."""

    def __init__(self, message: str, recover: Callable[[], None]) -> None:
        super().__init__(message)
        self.recover = recover


class ChildLoadError(Exception):
    """An encoding child could not load the pipeline the server loaded: it is a process of its
    own, which sees only the encoders an installed package names (not one registered by the
    script that started the server), and reads a model folder again."""


def _load(source: str, threads: int, logs: LogSettings) -> None:
    """In the child: log as the server does, follow it out, set its thread use, then load the
    pipeline once; one that does not load is told to every batch (a failed initializer made
    the pool broken, its cause left in the child's stderr, and the server took it for a
    crash)."""
    global _PIPELINE, _UNLOADED
    configure_logging(logs)  # a library's warning in a child was a bare line among JSON ones
    _exit_with_parent()
    _leave_signals_to_the_server()
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # numpy's BLAS was loaded with this module, before the variables above were set
    threadpool_limits(thread_limit() or threads)
    from probembed.encoders import USER_CODE_ERRORS
    from probembed.pipeline import Pipeline

    try:
        _PIPELINE = Pipeline.load(source)
    except USER_CODE_ERRORS as exc:
        _UNLOADED = (
            f"pipeline {source} does not load in the server's encoding child, a process of "
            f"its own: {type(exc).__name__}: {exc}"
        )
    atexit.register(_leave)  # registered last, so it runs first


def _leave() -> None:
    """In the child at exit (its pool was shut down, every result sent): close the embedding
    cache, flush, and end without the interpreter unloading the models object by object,
    which took 1.5 s per child with the built-ins and held up the server's SIGTERM."""
    if _PIPELINE is not None and _PIPELINE.cache is not None:
        _PIPELINE.cache.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _exit_with_parent() -> None:
    """End this process when the server that spawned it dies, even by SIGKILL.

    Its work queue never reports a dead parent (the child holds both ends of its pipe), so
    without this a killed server would leave its children, models loaded, running forever.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _leave_signals_to_the_server() -> None:
    """Ignore SIGTERM and SIGINT: the server ends its children itself (`close`, `abandon`).
    Sent to the whole process group (Ctrl-C, systemd's default stop), they killed a child
    in the middle of a batch, and the server, still in its grace, took that for a crash: it
    started another child and sent it the batch again."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _encode(texts: list[str]) -> Fused:
    """In the child: the pipeline's Fused for a batch."""
    if _PIPELINE is None:
        raise ChildLoadError(_UNLOADED)
    return _PIPELINE.encode(texts)


def _ready() -> None:
    """In a replacement child: encode once, so that it is ready (or has failed to load) before
    it is given a batch to hold."""
    _encode(["warm up"])


class EncodeProcess:
    """A pipeline (by built-in name or directory) encoding in its own process."""

    def __init__(
        self,
        source: str,
        threads: int,
        respawned: Callable[[], None] = lambda: None,
        logs: LogSettings = DEFAULT_LOGS,
    ) -> None:
        self.source, self.threads, self.logs = source, threads, logs
        #: Called each time a dead child is replaced (the service counts it).
        self.respawned = respawned
        #: A batch is in the child now (set by the thread that waits for it).
        self._encoding = False
        #: Set by `abandon`: a child that dies is the shutdown's doing, not replaced.
        self._abandoned = False
        self._pool = self._spawn()
        #: A replacement child's first encode: done once it has loaded the pipeline (or not).
        self._loading: Future[None] | None = None

    def _spawn(self) -> ProcessPoolExecutor:
        """A new child, loading the pipeline."""
        context = multiprocessing.get_context("spawn")
        loading = (self.source, self.threads, self.logs)
        return ProcessPoolExecutor(1, mp_context=context, initializer=_load, initargs=loading)

    def __call__(self, texts: list[str]) -> Fused:
        """Encode in the child and wait for it. A child that died (the OOM killer, a crash in
        a native encoder) is replaced, else every later batch of the service failed with it,
        and EncoderLost raised: the batcher gives the batch to the next free child, and this
        one no more until the replacement has loaded (`_recover`), where the batch waited for
        that whole load while a sibling idled. A child that
        did not load the pipeline is replaced too, ChildLoadError raised: the next batch's
        child loads it again."""
        self._encoding = True
        try:
            return self._pool.submit(_encode, list(texts)).result()
        except BrokenProcessPool as exc:
            if self._abandoned:
                raise
            log.warning(
                "an encoding child of %s died (killed, or crashed in a native encoder): "
                "started another; its batch of %d texts goes to the next free child",
                *(self.source, len(texts)),
            )
            self._replace()
            self._loading = self._pool.submit(_ready)
            self.respawned()
            lost = f"an encoding child of {self.source} died twice with this request in its batch"
            raise EncoderLost(lost, self._recover) from exc
        except ChildLoadError:
            self._replace()  # started with the next batch: no child kept that never loaded
            raise
        finally:
            self._encoding = False

    def warm(self) -> None:
        """Encode once, so the child has loaded the pipeline before a batcher counts on it; a
        child that dies meanwhile is replaced, and the replacement waited for; one that dies
        too is a ChildLoadError (the third child it started is ended, not waited for)."""
        try:
            self(["warm up"])
        except EncoderLost as lost:
            lost.recover()
            try:
                self(["warm up"])
            except EncoderLost as again:
                self.abandon()
                died = f"encoding children of {self.source} died twice while they loaded it"
                raise ChildLoadError(died) from again

    def _recover(self) -> None:
        """Until the replacement child has loaded the pipeline or failed to (the next batch
        sent to it meets the same and is told); a shutdown meanwhile ends it (`abandon`)."""
        if self._loading is None:
            return
        self._encoding = True
        if self._abandoned:  # the shutdown came before this flag was up: end it here
            self._kill()
        try:
            self._loading.result()
        except (ChildLoadError, BrokenProcessPool):
            pass  # told to the next batch sent to it, which the batcher answers with it
        finally:
            self._encoding = False

    def _replace(self) -> None:
        """End the child (after what it was given) and make the pool of the next one."""
        self._pool.shutdown(wait=False)
        self._pool = self._spawn()

    def abandon(self) -> bool:
        """At shutdown, once nobody waits for its batch: end the child now if it is encoding
        one (a large chunked write's batch held the exit 22 s after the grace with the
        built-in `retrieval`, as long as a batch can take), rather than wait for it; an idle
        child is left to `close`. The embedding cache is SQLite, whose commits a killed
        process leaves whole. Says whether a child was ended."""
        self._abandoned = True
        loading = self._loading is not None and not self._loading.done()
        if not (self._encoding or loading):
            return False
        self._kill()
        return True

    def _kill(self) -> None:
        """End the child now (it ignores SIGTERM: `_leave_signals_to_the_server`)."""
        for process in list((self._pool._processes or {}).values()):
            process.kill()

    def close(self) -> None:
        """Stop the child after what it was given."""
        self._pool.shutdown(wait=True)


def child_threads(workers: int) -> int:
    """Torch threads per encoding child: the cores but one, shared out, at least one each."""
    return max(1, ((os.cpu_count() or 1) - 1) // workers)
