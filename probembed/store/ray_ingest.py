"""Ingest as a Ray Data job: the same collection and checks as local ingest, the encoding spread.

The driver reads and checks the whole input with local ingest's own readers and checks
(`probembed.store.ingest.prepare`: same validation, same pipeline identity check, same error
report), and keeps the collection's pipeline copy. The texts still to write are cut into
batches, and the driver looks each batch up in the pipeline's embedding cache (the one local
ingest reads, `Pipeline.lookup`): a batch the cache holds whole is fused and committed at
once, and each other batch becomes one row of a Ray Dataset holding only the texts some
member's cache lacks and no earlier batch sends (a text repeated across batches goes out
once, and its Gaussians are shared on the driver: `probembed.store.repeats`). `map_batches`
runs `Embedder`, a stateful class that loads the pipeline once per actor (an actor pool of
`workers` actors, or as many as there are batches to send) and encodes each member's missing
texts of the batch, as local ingest's cache misses are encoded; the driver, which kept only
which texts each batch lacked, reads the cached rest again, stores what came back in the
cache, fuses the two (`Pipeline.encode_members(encoded=..., looked_up=...)`), and commits
the batch, one LanceDB commit per batch, through `Collection.add` / `upsert`: `ingest_ray`
is local ingest's own `ingest` given `OnRay` to embed with, so a killed job leaves whole
batches, a re-run skips the ids already committed, and a sync removes, pins and undoes,
exactly as local ingest does; a run after any other (local or Ray) encodes nothing the cache
holds, and fills it.

The pipeline reaches the actors (`probembed.actors`) as the files of `Pipeline.save` (a few
MB: configs and fitted states; the encoders' weights come with their packages on every
node), so a cluster needs probembed and the models installed on its nodes, nothing else.
Actors load the pipeline without a cache of their own: the driver's is the one every run
shares.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import pyarrow as pa

from probembed.actors.encoding import Embedder, pipeline_files
from probembed.actors.progress import BatchTally, counted
from probembed.extras import require
from probembed.fusion import Fused
from probembed.gaussian import Gaussian
from probembed.signals import end_by_sigterm, raise_terminated
from probembed.store.collection import Collection
from probembed.store.ingest import DEFAULT_BATCH, IngestReport, OnError, ingest
from probembed.store.ray_fate import Watcher, watched_ray
from probembed.store.readers import Problem, Record
from probembed.store.repeats import RepeatedTexts

if TYPE_CHECKING:
    from probembed.pipeline import Encoded, Pipeline

#: Seconds a Ray address gets to accept a connection and answer as Ray (`check_reachable`).
RAY_CONNECT_SECONDS = 10.0
#: The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113, 3.4): a gRPC
#: server's first frame in reply is a SETTINGS frame (type 0x4) of its own, on stream 0.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 0x4, 0, 0, 0, 0, 0])
_FRAME_HEADER = 9
_SETTINGS = 0x4


class AnsweredAddress(str):
    """A Ray address that answered the probe (`joined_address`): a session given one joins it
    without probing it again (the CLI probes before the input is read, the session after)."""


@contextlib.contextmanager
def ray_session(address: str | None = None) -> Iterator[None]:
    """Ray as found (already initialised), or joined at `address`, or started on this machine.

    A session this call started or joined is shut down when it ends; one found running is
    left to whoever started it; a Ray started here is killed with this process however the
    process ends, SIGKILL included (`ray_fate.Watcher`). ray.init replaces the process's
    SIGTERM handler (Ray's core worker then dumped a C++ stack and aborted): within the
    session SIGTERM does what it did before, the default (end the process, status 143) once
    the job's frames have unwound, or the CLI's `signals.raise_terminated`, whose
    `Terminated` unwinds on to the CLI's end.
    """
    require("ray", "probembed.store.ray_ingest")
    import ray

    if ray.is_initialized():
        yield
        return
    address = joined_address(address)
    before = signal.getsignal(signal.SIGTERM)
    with warnings.catch_warnings():
        # Ray forks its service processes, which exec at once: lancedb's warning that a fork
        # reset its runtime was printed once per process (five times) and concerns none of them
        warnings.filterwarnings("ignore", "lancedb fork support is experimental", RuntimeWarning)
        # logging_level is typed int; Ray hands it to logging, which takes level names too
        if address:
            ray.init(address=str(address), logging_level="WARNING")  # type: ignore[arg-type]
        else:
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING")  # type: ignore[arg-type]
    fired: list[int] = []  # SIGTERMs the session's handler turned into Terminated
    watcher: Watcher | None = None
    try:
        # a Ray started here ends with this process however it ends; a joined one is the
        # cluster's
        watcher = None if address else watched_ray()
        with _sigterm_as(before, fired):
            yield
    finally:
        # Whether Terminated reaches here or a caller's generator holding the session is
        # closed on its way out (probembed embed), end as the default action would: exit
        # status 143, here or at the CLI's end once its Terminated has unwound there. Not
        # through ray.shutdown(): Ray Data's threads, still fetching, then met a shut-down
        # core worker, which ended the process with status 1 (half the runs measured). A Ray
        # started here goes with the process (ray.init's fate-sharing, and the watcher for
        # the rest: `ray_fate`), a cluster drops the job's actors.
        if not fired:
            ray.shutdown()
            if watcher is not None:
                watcher.close()
        elif before is not raise_terminated:
            end_by_sigterm()


@contextlib.contextmanager
def _sigterm_as(before: Any, fired: list[int]) -> Iterator[None]:
    """SIGTERM handled as `before` (the handler ray.init replaced), the default and the CLI's
    `raise_terminated` turned into `Terminated`, each one counted in `fired`; the handler
    before is restored afterwards. Only the main thread can."""
    if before is None or threading.current_thread() is not threading.main_thread():
        yield  # a handler not set from Python (None): nothing to restore it to
        return

    def terminate(signum: int, frame: Any) -> None:
        fired.append(signum)
        raise_terminated(signum, frame)

    unwinds = before == signal.SIG_DFL or before is raise_terminated
    signal.signal(signal.SIGTERM, terminate if unwinds else before)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def joined_address(address: str | None) -> str | None:
    """The Ray address a session joins: the one given, else RAY_ADDRESS (`ray job submit`
    sets it), checked to answer as Ray (`check_reachable`) unless it already did
    (`AnsweredAddress`); None starts Ray on this machine."""
    if isinstance(address, AnsweredAddress):
        return address
    given = "address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        return None
    check_reachable(address, given)
    return AnsweredAddress(address)


def check_reachable(address: str, given: str = "address") -> None:
    """Refuse a Ray address (host:port, ray://host:port) where Ray does not answer, within
    RAY_CONNECT_SECONDS: ray.init retried such an address for minutes without a word, and
    could be stopped by SIGKILL only.

    Both a Ray GCS (host:port) and a Ray Client server (ray://) speak gRPC, so HTTP/2: sent
    the HTTP/2 client preface, they answer with a SETTINGS frame, and anything else there (an
    HTTP/1.1 server, a port that takes connections and says nothing) is refused. A ray://
    address is refused at once when Ray Client's own dependency (grpc) is not installed.
    """
    if address == "local":
        return
    if address == "auto":  # resolved as ray.init resolves it, then checked as any address
        check_reachable(_found_cluster(given), given)
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or "://" in host:  # http://: the dashboard's, not Ray's
        raise ValueError(f"Ray {given} {address!r} is not host:port, ray://host:port or auto")
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ValueError(
            f"Ray {given} {address!r} needs Ray Client, whose dependencies the `ray` extra "
            "does not install: pip install 'ray[client]' (or run on the head node with "
            "--address auto)"
        )
    deadline = time.monotonic() + RAY_CONNECT_SECONDS
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), RAY_CONNECT_SECONDS)
    except OSError as exc:
        raise ValueError(
            f"Ray {given} {address!r}: nothing answers there ({exc.strerror or exc}); start "
            "Ray there (`ray start --head`), or give no address (--address, RAY_ADDRESS) to "
            "run Ray on this machine"
        ) from exc
    with sock:
        answer = _http2_answer(sock, deadline)
    if answer is not None:
        raise ValueError(
            f"Ray {given} {address!r}: something there takes connections but is not Ray "
            f"({answer}, where Ray answers gRPC); give the address `ray start --head` prints, "
            "or ray://HEAD:10001 for Ray Client"
        )


def _found_cluster(given: str) -> str:
    """The host:port `auto` names (RAY_ADDRESS, the last `ray start` of this machine, else a
    running Ray of it), as Ray finds it; refused where there is none: ray.init found out only
    after the input was read and the models loaded (29 s)."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    given_env = os.environ.get("RAY_ADDRESS", "")
    if given_env and given_env != "auto":  # ray.init("auto") takes it as given ("local" too)
        return given_env
    try:
        return canonicalize_bootstrap_address_or_die("auto")
    except ConnectionError as exc:
        raise ValueError(
            f"Ray {given} 'auto' finds no running Ray on this machine ({exc}); start one "
            "(`ray start --head`), join one elsewhere (--address ray://HEAD:10001), or give no "
            "address to run Ray here"
        ) from exc


def _http2_answer(sock: socket.socket, deadline: float) -> str | None:
    """None if the server at `sock` answers the HTTP/2 client preface with a SETTINGS frame
    (as every gRPC server must) before `deadline`, else what it did instead."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None  # the preface would have to go through TLS: the connection must do
    got = b""
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(_HTTP2_PREFACE)
        while len(got) < _FRAME_HEADER:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = sock.recv(_FRAME_HEADER - len(got))
            if not chunk:
                return f"it closed the connection after {got!r}" if got else "it hung up"
            got += chunk
    except TimeoutError:
        return f"no answer to an HTTP/2 preface within {RAY_CONNECT_SECONDS:g} s"
    except OSError as exc:
        return f"the connection failed: {exc.strerror or exc}"
    if got[3] != _SETTINGS or got[5:9] != bytes(4):
        return f"it answered {got!r}"
    return None


def embed_on_ray(
    texts: Sequence[str],
    pipeline: Any,
    batch_size: int = DEFAULT_BATCH,
    workers: int = 1,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    starts: Sequence[int] | None = None,
    advance: Callable[[int], None] | None = None,
) -> Iterator[tuple[np.ndarray, Fused]]:
    """(positions in `texts`, their Gaussians) per batch of `batch_size`: first the batches the
    pipeline's embedding cache holds whole, then the others in order.
    `advance` is told the whole texts done as the actors encode each piece of a batch
    (member-texts / members, as `Pipeline.encode` tells it), and, as each batch is yielded,
    those the cache or an earlier batch gave it.

    Needs a Ray session (`ray_session`). Actors get only what the cache lacks, one batch per
    call, and the driver stores what they return in the cache; a text several batches lack
    goes out once, with the first, and the later ones borrow its rows (`RepeatedTexts`), so
    the batches sent out are fused in the order they were sent (`preserve_order`). `starts`:
    the batches to embed, by their first position (a resumed `embed_job` has written the
    others).
    """
    import ray.data

    from probembed.pipeline import WholeTexts

    starts = range(0, len(texts), batch_size) if starts is None else starts
    if not starts:
        return
    check_fits(cpus_per_worker, gpus_per_worker)
    batches = {start: list(texts[start : start + batch_size]) for start in starts}
    members = len(pipeline.members)
    told = WholeTexts(advance or (lambda whole: None), members)  # takes member-texts
    # batch start -> (texts, members): what the cache lacks; of what it holds the driver
    # keeps nothing (10 KB a text for the default pipeline) and reads it again at the answer
    lacking: dict[int, np.ndarray] = {}
    for start, chunk in batches.items():
        lookups = pipeline.lookup(chunk)
        marks = np.stack([~found for found, _ in lookups], axis=1)
        if marks.any():
            lacking[start] = marks
        else:  # every member's Gaussians cached: fused here, as encode would fuse them
            told(len(chunk) * members)
            yield np.arange(start, start + len(chunk)), pipeline.fuse([g for _, g in lookups])
    if not lacking:
        return
    # a text lacking in several batches goes out with the first; the others borrow its rows
    repeats, sent = RepeatedTexts.planned(members, batches, lacking)
    tally = BatchTally(told, {start: int(marks.sum()) for start, marks in sent.items()})
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the caller shows one bar for the whole job
    context.print_on_execution_start = False
    context.execution_options.preserve_order = True  # each sender answered before its borrowers
    work = [_work(start, batches[start], marks) for start, marks in sent.items() if marks.any()]
    with counted(None if advance is None else tally) as counter:
        # one block per batch; from_items, unlike from_arrow, reads no block metadata in a
        # Ray task (a worker started for it: some 1.5 s of every run)
        dataset = ray.data.from_items(work, override_num_blocks=len(work)).map_batches(
            Embedder,
            fn_constructor_kwargs={
                "files": pipeline_files(pipeline),
                "fingerprint": pipeline.fingerprint,
                "counter": counter,
            },
            batch_size=1,  # one ingest batch per call: its texts encoded together, as locally
            batch_format="pyarrow",
            # an actor more than the batches to send would only load the pipeline (Ray
            # warns of it too)
            compute=ray.data.ActorPoolStrategy(size=min(workers, len(work))),
            num_cpus=cpus_per_worker,
            num_gpus=gpus_per_worker or None,
        )
        answers = _answers(dataset, pipeline, batches, sent)
        for start, received in _in_plan_order(answers, sent, members):
            chunk = batches[start]
            # read again, uncounted (the statistics counted the first look): what the cache
            # let go since is encoded here (`Encoded.take`), but for borrowed rows, kept
            looked_up = pipeline.lookup(chunk, counted=False)
            lookups = repeats.lend(start, chunk, looked_up, received)
            parts = pipeline.encode_members(chunk, encoded=received, looked_up=lookups)
            tally.fused(start, len(chunk) * members)
            yield np.arange(start, start + len(chunk)), pipeline.fuse(parts)


def _in_plan_order(
    answers: Iterator[tuple[int, list[Encoded | None]]],
    sent: Mapping[int, np.ndarray],
    members: int,
) -> Iterator[tuple[int, list[Encoded | None]]]:
    """Each planned batch with its actors' answer (none for one sending nothing), in plan
    order, which Ray Data keeps: a batch whose answer does not come next is an error, not a
    batch left out of the run."""
    for start, marks in sent.items():
        if not marks.any():
            yield start, [None] * members
            continue
        got, received = next(answers, (None, []))
        if got != start:
            came = "no more answers" if got is None else f"the batch at text {got}"
            raise RuntimeError(
                f"Ray returned {came} where the batch at text {start} was due: its answer was "
                "lost (a DataContext.max_errored_blocks above 0 lets a failed batch go); the "
                "batches before it are written, a re-run embeds the rest"
            )
        yield start, received


def _answers(
    dataset: Any,
    pipeline: Pipeline,
    batches: Mapping[int, list[str]],
    sent: Mapping[int, np.ndarray],
) -> Iterator[tuple[int, list[Encoded | None]]]:
    """Each batch the actors answer, by its start, with each member's Gaussians of the texts
    it sent for that member, in the order Ray finishes them."""
    for out in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
        done = cast(pa.Table, out)
        for start, means, variances in zip(
            done.column("start").to_pylist(),
            done.column("mean").to_pylist(),
            done.column("var").to_pylist(),
            strict=True,
        ):
            yield (
                start,
                [
                    _received(_marked(batches[start], column), mean, var, member.encoder.dim)
                    for member, column, mean, var in zip(
                        pipeline.members, sent[start].T, means, variances, strict=True
                    )
                ],
            )


def _marked(texts: Sequence[str], marks: np.ndarray) -> list[str]:
    """The texts whose mark is set, in order."""
    return [t for t, mark in zip(texts, marks.tolist(), strict=True) if mark]


def _work(start: int, texts: list[str], lacking: np.ndarray) -> dict[str, Any]:
    """One batch as the one row an actor gets: the texts some member's cache lacks, and which
    members lack each (row-major (texts, members) marks)."""
    sent = np.asarray(lacking.any(axis=1), dtype=bool)
    return {
        "start": start,
        "texts": _marked(texts, sent),
        "lacking": lacking[sent].ravel().tolist(),
    }


def _received(texts: list[str], mean: bytes, var: bytes, dim: int) -> Encoded | None:
    """A member's Gaussians an actor sent for the texts marked for it (None: none marked)."""
    from probembed.pipeline import Encoded

    if not texts:
        return None
    shape = (len(texts), dim)
    return Encoded(
        texts,
        Gaussian(
            np.frombuffer(mean, np.float32).reshape(shape),
            np.frombuffer(var, np.float32).reshape(shape),
        ),
    )


@dataclass(frozen=True)
class OnRay:
    """The `Embedding` of `workers` Ray actors, each asking for `cpus_per_worker` CPUs and
    `gpus_per_worker` GPUs (checked when made), in a Ray session at `address`
    (`ray_session`: as found, joined, or started here) that ends with the last batch."""

    address: str | None = None
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    #: Where the texts are embedded, as a progress bar names it (`ingest.bar_label`).
    where: ClassVar[str] = "ray"

    def __post_init__(self) -> None:
        """Refuse a bad request before anything is read or written."""
        validate_workers(self.workers, self.cpus_per_worker, self.gpus_per_worker)

    def __call__(
        self,
        texts: Sequence[str],
        pipeline: Pipeline,
        batch_size: int,
        starts: Sequence[int] | None = None,
        advance: Callable[[int], None] | None = None,
    ) -> Iterator[tuple[np.ndarray, Fused]]:
        """`embed_on_ray` in its session: closing the iteration ends the session."""
        resources = (self.workers, self.cpus_per_worker, self.gpus_per_worker)
        with ray_session(self.address):
            yield from embed_on_ray(texts, pipeline, batch_size, *resources, starts, advance)


def ingest_ray(
    source: str | Path | Iterable[Record | Problem | Mapping[str, Any]],
    collection: Collection,
    pipeline: Pipeline | str | os.PathLike | None = None,
    batch_size: int = DEFAULT_BATCH,
    on_error: OnError = "stop",
    upsert: bool = False,
    progress: bool = False,
    on_commit: Callable[[int], None] | None = None,
    *,
    workers: int = 1,
    address: str | None = None,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    prefix: str = "",
    columns: Mapping[str, pa.DataType] | None = None,
    advance: Callable[[int], None] | None = None,
    sync: bool = False,
    created: str | None = None,
    follow_links: bool = False,
    wait: float | None = None,
) -> IngestReport:
    """`probembed.store.ingest` with the embedding done by `workers` Ray actors (`OnRay`):
    the same checks, commits, report and, with `sync`, the same removal, pin and undo.

    Its first eight arguments, `columns`, `advance`, `sync`, `created`, `follow_links` and
    `wait` are ingest's, so it can stand in for it
    (chunked ingest's `ingest_with`); `advance` (else this call's bar) is told the texts
    encoded as the actors encode them, or found in the cache (`embed_on_ray`).

    Joins the cluster at `address`, else starts Ray on this machine (all its cores) and stops
    it afterwards, only once there is something to embed; a session already initialised is
    used as it is. Each actor asks for `cpus_per_worker` CPUs and `gpus_per_worker` GPUs.
    """
    on_actors = OnRay(address, workers, cpus_per_worker, gpus_per_worker)
    return ingest(
        source,
        collection,
        pipeline,
        batch_size,
        on_error,
        upsert,
        progress,
        on_commit,
        prefix=prefix,
        columns=columns,
        advance=advance,
        sync=sync,
        created=created,
        follow_links=follow_links,
        embed_with=on_actors,
        wait=wait,
    )


def validate_workers(
    workers: int, cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0
) -> None:
    """Reject a worker count that is not a positive integer, or a resource request that is not
    a finite number (CPUs > 0, GPUs >= 0): before anything is read or written."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    for name, value, zero_ok in (("cpus", cpus_per_worker, False), ("gpus", gpus_per_worker, True)):
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if not (number and math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
            kind = "a non-negative" if zero_ok else "a positive"
            raise ValueError(f"{name}_per_worker must be {kind} number, got {value!r}")


def check_fits(cpus_per_worker: float, gpus_per_worker: float) -> None:
    """Refuse a per-worker request no node of the Ray cluster can meet: Ray would wait for
    such a node forever (a cluster that adds nodes on demand must have them up first)."""
    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if not nodes or any(
        r.get("CPU", 0) >= cpus_per_worker and r.get("GPU", 0) >= gpus_per_worker for r in nodes
    ):
        return
    most_cpus = max(r.get("CPU", 0) for r in nodes)
    most_gpus = max(r.get("GPU", 0) for r in nodes)
    raise ValueError(
        f"each Ray worker asks for {cpus_per_worker:g} CPU(s) and {gpus_per_worker:g} GPU(s), "
        f"but no node of the cluster has that many (at most {most_cpus:g} CPUs and "
        f"{most_gpus:g} GPUs); lower cpus_per_worker or gpus_per_worker "
        "(--cpus-per-worker, --gpus-per-worker)"
    )
