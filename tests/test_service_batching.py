"""The batcher on the event loop, with real pipelines behind it: several encoders at once."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import numpy as np
import pytest

from probembed.service.batching import Batcher, QueueFullError, StoppingError
from probembed.service.metrics import Metrics
from probembed.service.settings import BatchSettings, Limits, ServiceSettings
from probembed.service.worker import EncoderLost


def meeting(pipeline, parties: int, timeout: float):
    """An encoder that finishes only once `parties` batches are being encoded at the same time."""
    barrier = threading.Barrier(parties, timeout=timeout)

    def encode(texts: list[str]):
        barrier.wait()  # BrokenBarrierError after `timeout` if the batches ran one at a time
        return pipeline.encode(texts)

    return encode


async def encode_each(batcher: Batcher, texts: list[str]):
    """Each text as its own concurrent request."""
    batcher.start()
    try:
        return await asyncio.gather(*(batcher.encode([t]) for t in texts))
    finally:
        await batcher.stop()


def test_two_encoders_encode_two_batches_at_once(pydoc_pipeline):
    encode = meeting(pydoc_pipeline, 2, timeout=30)  # 30 s: only ever waited out on failure
    settings = BatchSettings(max_batch=1, max_wait_ms=0, workers=2)
    batcher = Batcher([encode, encode], settings, Metrics(), "hash")
    texts = ["alpha", "beta", "gamma", "delta"]
    results = asyncio.run(encode_each(batcher, texts))
    expected = pydoc_pipeline.encode(texts)
    for i, fused in enumerate(results):  # each request gets its own text's row back
        np.testing.assert_array_equal(fused.gaussian.mean, expected.gaussian.mean[i : i + 1])


def test_one_encoder_encodes_one_batch_at_a_time(pydoc_pipeline):
    # the second batch can only start after the first has finished, so they never meet
    encode = meeting(pydoc_pipeline, 2, timeout=1)
    settings = BatchSettings(max_batch=1, max_wait_ms=0, workers=1)
    batcher = Batcher([encode], settings, Metrics(), "hash")
    with pytest.raises(threading.BrokenBarrierError):
        asyncio.run(encode_each(batcher, ["alpha", "beta"]))


def test_close_answers_every_queued_request_before_it_stops(pydoc_pipeline):
    """`stop` fails what is queued (shutdown); `close`, for a batcher whose pipeline no
    collection uses any more, lets the requests already queued finish first."""
    settings = BatchSettings(max_batch=1, max_wait_ms=0, workers=1)
    texts = ["alpha", "beta", "gamma"]

    async def queue_then(end: str) -> list:
        batcher = Batcher([pydoc_pipeline.encode], settings, Metrics(), "hash")
        batcher.start()
        requests = [asyncio.ensure_future(batcher.encode([t])) for t in texts]
        await asyncio.sleep(0)  # every request queued, the first batch not yet answered
        await (batcher.close() if end == "close" else batcher.stop())
        return await asyncio.gather(*requests, return_exceptions=True)

    closed = asyncio.run(queue_then("close"))
    expected = pydoc_pipeline.encode(texts).gaussian.mean
    for i, fused in enumerate(closed):
        np.testing.assert_array_equal(fused.gaussian.mean, expected[i : i + 1])
    stopped = asyncio.run(queue_then("stop"))
    assert any(isinstance(answer, StoppingError) for answer in stopped)


def test_a_full_queue_refuses_a_new_request_but_a_running_write_waits_for_room(pydoc_pipeline):
    """A chunked write's batches (`encode_blocking`) were refused with a 429 when the queue
    was full, and the write was undone part-way: they wait for room instead, the room is
    held for them (new requests that would take it are refused), and a shutdown wakes them.
    A new request is still refused, told what it brings."""
    settings = BatchSettings(max_batch=2, max_wait_ms=0, workers=1, max_queue=3)

    async def full_then(end: str) -> tuple[object, str, str]:
        gate = threading.Event()

        def held(texts: list[str]):
            gate.wait(30)  # 30 s: only ever waited out on failure
            return pydoc_pipeline.encode(texts)

        batcher = Batcher([held], settings, Metrics(), "hash")
        batcher.start()
        first = asyncio.ensure_future(batcher.encode(["alpha", "beta"]))
        await asyncio.sleep(0)  # queued: 2 of 3
        with pytest.raises(QueueFullError) as refused:
            await batcher.encode(["gamma", "delta"])
        loop = asyncio.get_running_loop()
        write = loop.run_in_executor(None, batcher.encode_blocking, ["delta", "eps"])
        deadline = time.monotonic() + 30  # until the write waits (its room held for it)
        while batcher._reserved == 0 and not write.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not write.done()  # waiting, not refused: the encoder has not moved
        with pytest.raises(QueueFullError) as held_for_write:  # 2 + 1 fits, 2 + 2 + 1 not
            await batcher.encode(["zeta"])
        if end == "stop":
            batcher.refuse()
            answer = await asyncio.wait_for(asyncio.gather(write, return_exceptions=True), 5)
            gate.set()  # the write learnt of the stop while the encoder was still held
        else:
            gate.set()
            answer = await asyncio.gather(write, return_exceptions=True)
        await asyncio.gather(first, return_exceptions=True)
        await batcher.stop()
        return answer[0], str(refused.value), str(held_for_write.value)

    waited, told, held_told = asyncio.run(full_then("room"))
    assert "holds 2 texts and this request brings 2, over the limit of 3" in told
    assert "holds 4 texts and this request brings 1" in held_told
    expected = pydoc_pipeline.encode(["delta", "eps"]).gaussian.mean
    np.testing.assert_array_equal(waited.gaussian.mean, expected)
    stopped, _, _ = asyncio.run(full_then("stop"))
    assert isinstance(stopped, StoppingError)


def test_a_max_hits_below_max_k_is_refused_at_start():
    """A single query at --max-k would be refused by every search."""
    with pytest.raises(
        ValueError, match=r"--max-hits \(max_hits\) must be at least --max-k \(1000\)"
    ):
        Limits(max_hits=999)
    assert Limits(max_k=50, max_hits=50).max_hits == 50


def test_a_max_k_below_the_default_k_is_refused_at_start():
    """A search that gives no k asks for 10 hits: a lower --max-k would refuse every one."""
    with pytest.raises(ValueError, match=r"--max-k \(max_k\) must be at least 10"):
        Limits(max_k=5)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"workers": 0}, r"--workers \(workers\) must be a positive integer, got 0"),
        ({"workers": 2.5}, r"--workers \(workers\) must be a positive integer, got 2.5"),
        ({"max_batch": 0.25}, r"--max-batch \(max_batch\) must be a positive integer"),
        ({"max_wait_ms": float("inf")}, r"--max-wait-ms \(max_wait_ms\) must be a finite"),
        ({"max_wait_ms": 1e9}, r"--max-wait-ms \(max_wait_ms\) must be at most 60000"),
    ],
)
def test_batch_settings_refuse_what_would_hang_or_starve(kwargs, says):
    """No worker, half a worker, or a wait without end (requests and SIGTERM would hang),
    fails at start."""
    with pytest.raises(ValueError, match=says):
        BatchSettings(**kwargs)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Limits(max_inputs=0.5), r"--max-inputs \(max_inputs\) must be a positive integer"),
        (lambda: Limits(max_k=True), r"--max-k \(max_k\) must be a positive integer"),
        (lambda: ServiceSettings("db", port=True), "port must be an integer"),
        (lambda: ServiceSettings("db", grace_seconds=float("nan")), r"--graceful-timeout \(grace"),
        (lambda: ServiceSettings("db", grace_seconds=-5), r"\(grace_seconds\) must be a number"),
        (lambda: ServiceSettings("db", grace_seconds=math.inf), r"seconds\) must be finite"),
        (lambda: Limits(body_timeout=-1), r"--body-timeout \(body_timeout\) must be a finite"),
        (lambda: Limits(body_timeout=1e-9), r"--body-timeout .* at least 1 s, or 0 for no"),
        (lambda: Limits(body_timeout=math.inf), r"--body-timeout \(body_timeout\) must be a fin"),
        (lambda: ServiceSettings("db", limit_concurrency=0), r"--limit-concurrency .* positive"),
        (lambda: ServiceSettings("db", allowed_hosts=("http://a",)), "without a port, got 'h"),
        (lambda: ServiceSettings("db", allowed_hosts=("proxy:8080",)), "--allowed-host must be"),
        (
            lambda: ServiceSettings("db", forwarded_allow_ips="10.0.0.1, proxy"),
            r"--forwarded-allow-ips .* or '\*'; 'proxy' is none",
        ),
        (  # ignored beside a directory: the server took them and failed only once loading
            lambda: ServiceSettings("db", storage_options={"region": "eu"}),
            r"storage options \['region'\] apply to object storage .* not to the directory db",
        ),
    ],
)
def test_service_settings_made_in_python_refuse_what_the_cli_would(make, says):
    """The CLI passes whole numbers; the Python API took half a text or NaN seconds."""
    with pytest.raises(ValueError, match=says):
        make()


def test_a_batcher_needs_an_encoder():
    with pytest.raises(ValueError, match="at least one encoder"):
        Batcher([], BatchSettings(), Metrics(), "hash")


def test_encoders_free_together_split_the_queue_and_run_at_once(pydoc_pipeline):
    # four requests fill a batch of 4; two idle encoders take two each (the second after its
    # own 200 ms wait for more), and meet
    sizes: list[int] = []
    meet = meeting(pydoc_pipeline, 2, timeout=30)

    def encode(texts: list[str]):
        sizes.append(len(texts))
        return meet(texts)

    settings = BatchSettings(max_batch=4, max_wait_ms=200, workers=2)
    batcher = Batcher([encode, encode], settings, Metrics(), "hash")
    asyncio.run(asyncio.wait_for(encode_each(batcher, ["a", "b", "c", "d"]), 20))
    assert sizes == [2, 2]


def test_a_request_over_max_batch_is_cut_one_piece_per_encoder_and_joined(pydoc_pipeline):
    """One large request was encoded whole by one encoder while the others idled."""
    sizes: list[int] = []
    meet = meeting(pydoc_pipeline, 2, timeout=30)  # the two pieces must run at once

    def encode(texts: list[str]):
        sizes.append(len(texts))
        return meet(texts)

    texts = [f"text number {i}" for i in range(9)]

    async def run(batcher: Batcher):
        batcher.start()
        try:
            return await batcher.encode(texts)
        finally:
            await batcher.stop()

    settings = BatchSettings(max_batch=5, max_wait_ms=0, workers=2)
    batcher = Batcher([encode, encode], settings, Metrics(), "hash")
    fused = asyncio.run(asyncio.wait_for(run(batcher), 20))
    assert sorted(sizes) == [4, 5]
    expected = pydoc_pipeline.encode(texts)  # rows back in request order
    np.testing.assert_array_equal(fused.gaussian.mean, expected.gaussian.mean)
    np.testing.assert_array_equal(fused.weights, expected.weights)
    # pieces of at most max_piece (or max_batch, if larger), at least one per encoder;
    # within max_batch: whole
    for encoders, max_batch, max_piece, pieces in (
        (1, 4, 4, [3, 3, 3]),
        (2, 4, 4, [3, 3, 3]),
        (2, 4, 256, [4, 5]),  # the default piece: one per encoder, as before
        (1, 4, 256, [9]),
        (2, 4, 2, [3, 3, 3]),  # max_batch over max_piece: pieces of max_batch
        (2, 9, 4, [9]),
    ):
        sizes.clear()

        def counted(texts: list[str]):
            sizes.append(len(texts))
            return pydoc_pipeline.encode(texts)

        plain = Batcher(
            [counted] * encoders,
            BatchSettings(
                max_batch=max_batch, max_wait_ms=0, workers=encoders, max_piece=max_piece
            ),
            Metrics(),
            "hash",
        )
        joined = asyncio.run(run(plain))
        np.testing.assert_array_equal(joined.gaussian.mean, expected.gaussian.mean)
        np.testing.assert_array_equal(joined.weights, expected.weights)
        assert sorted(sizes) == pieces


@pytest.mark.parametrize("workers", [1, 2])
def test_a_search_arriving_during_a_large_write_waits_for_one_piece_not_the_write(
    pydoc_pipeline, workers
):
    """A write larger than max_batch was cut into one piece per encoder, each holding its
    encoder until the whole write was encoded: a search sent meanwhile waited for all of it
    (17.5 s behind a 150-document write in a walkthrough)."""
    calls: list[list[str]] = []
    busy = threading.Barrier(workers + 1, timeout=30)  # every encoder holds a piece
    go = threading.Event()

    def encode(texts: list[str]):
        calls.append(texts)
        if len(calls) <= workers:
            busy.wait()
            assert go.wait(30)
        return pydoc_pipeline.encode(texts)

    write = [f"document {i}" for i in range(12)]

    async def run(batcher: Batcher):
        batcher.start()
        try:
            writing = asyncio.create_task(batcher.encode(write))
            await asyncio.to_thread(busy.wait)  # the write's first pieces are being encoded
            searching = asyncio.create_task(batcher.encode(["a question"]))
            await asyncio.sleep(0)  # queued before any encoder is free
            go.set()
            return await writing, await searching
        finally:
            await batcher.stop()

    settings = BatchSettings(max_batch=2, max_wait_ms=0, workers=workers, max_piece=2)
    batcher = Batcher([encode] * workers, settings, Metrics(), "hash")
    written, found = asyncio.run(asyncio.wait_for(run(batcher), 60))
    # the first free encoder takes the search before the write's other pieces (another free
    # encoder's thread may start a piece of the write beside it: at most workers - 1)
    assert calls.index(["a question"]) < 2 * workers
    assert sorted(len(c) for c in calls) == [1] + [2] * 6
    expected = pydoc_pipeline.encode(write)  # the write's rows still come back in order
    np.testing.assert_array_equal(written.gaussian.mean, expected.gaussian.mean)
    np.testing.assert_array_equal(
        found.gaussian.mean, pydoc_pipeline.encode(["a question"]).gaussian.mean
    )


def test_a_large_write_advances_under_a_steady_stream_of_searches(pydoc_pipeline):
    """Pieces kept aside for when no search waited starved under steady search load: a
    review's scratch run encoded 2 of a write's 6 pieces in 3 s beside 1,083 search batches.
    Here every encode call queues one more search before it returns (40 in all)."""
    calls: list[list[str]] = []
    queued = threading.Event()
    searches = 40

    async def ask(n: int):
        asked = asyncio.ensure_future(batcher.encode([f"question {n}"]))
        await asyncio.sleep(0)  # encode() has queued it
        queued.set()
        return await asked

    def encode(texts: list[str]):
        calls.append(texts)
        if len(calls) <= searches:  # a search arrives before this batch is answered
            queued.clear()
            asyncio.run_coroutine_threadsafe(ask(len(calls)), loop)
            assert queued.wait(30)
        return pydoc_pipeline.encode(texts)

    write = [f"document {i}" for i in range(12)]

    async def run():
        nonlocal loop
        loop = asyncio.get_running_loop()
        batcher.start()
        try:
            written = await batcher.encode(write)
            while len(calls) < searches + 6:  # the searches still queued drain
                await asyncio.sleep(0.01)
            return written
        finally:
            await batcher.stop()

    loop: asyncio.AbstractEventLoop | None = None
    settings = BatchSettings(max_batch=1, max_wait_ms=0, workers=1, max_piece=2)
    batcher = Batcher([encode], settings, Metrics(), "hash")
    written = asyncio.run(asyncio.wait_for(run(), 120))
    pieces = [i for i, c in enumerate(calls) if c[0].startswith("document")]
    assert [len(calls[i]) for i in pieces] == [2] * 6
    # each piece waits behind the searches queued before it (the queue grows by one a call,
    # so the k-th behind k: calls 0, 2, 5, 9, 14, 20), not until all 40 are answered
    assert pieces[-1] < searches
    expected = pydoc_pipeline.encode(write)
    np.testing.assert_array_equal(written.gaussian.mean, expected.gaussian.mean)


def test_a_batch_an_encoder_lost_goes_to_the_free_one_while_it_recovers(pydoc_pipeline):
    """A child that died was replaced and its batch sent to the replacement, which held it
    for the whole load of the pipeline while the other child idled. The lost batch goes
    back to the head of the queue: here the second encoder answers it while the first is
    still recovering, and the first takes work again once it has."""
    calls: list[str] = []
    recovered = threading.Event()

    def lost_once(texts: list[str]):
        calls.append("first")
        if calls.count("first") == 1:
            raise EncoderLost("died", lambda: (calls.append("recovering"), recovered.wait(30)))
        return pydoc_pipeline.encode(texts)

    def other(texts: list[str]):
        calls.append("second")
        return pydoc_pipeline.encode(texts)

    async def run(batcher: Batcher):
        batcher.start()
        try:
            found = await asyncio.wait_for(batcher.encode(["a question"]), 30)
            answered_while_recovering = not recovered.is_set()
            recovered.set()
            deadline = time.monotonic() + 30  # only ever waited out on failure
            while batcher._free is not None and batcher._free.qsize() < 2:  # the first is back
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            both = await asyncio.gather(*(batcher.encode([t]) for t in ("x", "y")))
            return found, answered_while_recovering, both, batcher._pending
        finally:
            await batcher.stop()

    settings = BatchSettings(max_batch=1, max_wait_ms=0, workers=2)
    batcher = Batcher([lost_once, other], settings, Metrics(), "hash")
    found, while_recovering, both, pending = asyncio.run(run(batcher))
    assert while_recovering and calls[:3] in (
        ["first", "recovering", "second"],
        ["first", "second", "recovering"],  # the two threads race; neither order waits
    )
    assert sorted(calls[3:]) == ["first", "second"]  # the recovered encoder works again
    expected = pydoc_pipeline.encode(["a question"]).gaussian.mean
    np.testing.assert_array_equal(found.gaussian.mean, expected)
    np.testing.assert_array_equal(both[1].gaussian.mean, pydoc_pipeline.encode(["y"]).gaussian.mean)
    assert pending == 0


def test_a_lone_encoder_encodes_its_lost_batch_once_recovered_and_a_batch_lost_twice_fails(
    pydoc_pipeline,
):
    """With one encoder the lost batch waits for its recovery (as the replacement child used
    to be sent it); a request in two lost batches fails with the loss, rather than go round
    killing children for ever, and its texts leave the queue's count."""
    calls: list[str] = []

    def lost_once(texts: list[str]):
        calls.append("encode")
        if len(calls) == 1:
            raise EncoderLost("died", lambda: calls.append("recovered"))
        return pydoc_pipeline.encode(texts)

    def always_lost(texts: list[str]):
        raise EncoderLost("died twice with this request", lambda: None)

    async def run(encoder):
        batcher = Batcher([encoder], BatchSettings(max_batch=4, max_wait_ms=0), Metrics(), "h")
        batcher.start()
        try:
            answer = await asyncio.gather(batcher.encode(["a", "b"]), return_exceptions=True)
            return answer[0], batcher._pending
        finally:
            await batcher.stop()

    found, pending = asyncio.run(run(lost_once))
    assert calls == ["encode", "recovered", "encode"] and pending == 0
    np.testing.assert_array_equal(
        found.gaussian.mean, pydoc_pipeline.encode(["a", "b"]).gaussian.mean
    )
    failed, pending = asyncio.run(run(always_lost))
    assert isinstance(failed, EncoderLost) and str(failed) == "died twice with this request"
    assert pending == 0


def test_a_lost_batch_drops_a_request_whose_client_went(pydoc_pipeline):
    """A cancelled request (its client gone) in a lost batch was put back and encoded again:
    if its text killed the child, it would kill another. It is dropped, its texts leave the
    queue's count, and the rest of the batch is encoded."""
    calls: list[list[str]] = []

    async def run():
        batcher = Batcher([lambda texts: encode(texts)], BatchSettings(max_batch=8), Metrics(), "h")

        def encode(texts: list[str]):
            calls.append(texts)
            if len(calls) == 1:
                loop.call_soon_threadsafe(gone.cancel)  # the client leaves while it encodes
                raise EncoderLost("died", lambda: None)
            return pydoc_pipeline.encode(texts)

        loop = asyncio.get_running_loop()
        batcher.start()
        try:
            gone = asyncio.ensure_future(batcher.encode(["gone"]))
            kept = asyncio.ensure_future(batcher.encode(["kept"]))
            found = await kept
            return found, gone.cancelled(), batcher._pending
        finally:
            await batcher.stop()

    found, cancelled, pending = asyncio.run(asyncio.wait_for(run(), 60))
    assert cancelled and calls == [["gone", "kept"], ["kept"]] and pending == 0
    np.testing.assert_array_equal(
        found.gaussian.mean, pydoc_pipeline.encode(["kept"]).gaussian.mean
    )


def test_an_encoding_child_killed_is_replaced_and_ready_once_recovered(pydoc_pipeline_dir):
    """The real child: killed (as the OOM killer kills it), its batch is given back as lost
    (the log says where it goes), the replacement has loaded once `recover` returns, and the
    same texts encode to the same rows."""
    import multiprocessing
    import os
    import signal

    from probembed.service.worker import EncodeProcess

    respawns: list[int] = []
    before = set(multiprocessing.active_children())
    child = EncodeProcess(str(pydoc_pipeline_dir), threads=1, respawned=lambda: respawns.append(1))
    try:
        child.warm()
        first = child(["hello"])
        (process,) = [c for c in multiprocessing.active_children() if c not in before]
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        with pytest.raises(EncoderLost) as lost:
            child(["hello"])
        lost.value.recover()
        assert respawns == [1] and child._loading is not None and child._loading.done()
        again = child(["hello"])
    finally:
        child.close()
    np.testing.assert_array_equal(again.gaussian.mean, first.gaussian.mean)


def test_an_encoding_child_leaves_the_cache_it_wrote_whole(
    tmp_path, monkeypatch, pydoc_pipeline_dir
):
    """The child ends by os._exit, without unloading its models (1.5 s each with the
    built-ins): it closes its cache first, so the write-ahead log is folded into the database
    (a child that skipped the close left the -wal and -shm files), exits 0, and the next
    process reads every entry back."""
    import multiprocessing

    from probembed.cache import FILE_NAME, EmbeddingCache
    from probembed.pipeline import Pipeline
    from probembed.service.worker import EncodeProcess

    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "cache"))  # the child inherits it
    texts = [f"passage {i} about sockets" for i in range(40)]
    before = set(multiprocessing.active_children())  # another test's, if any: not this one's
    child = EncodeProcess(str(pydoc_pipeline_dir), threads=1)
    child(texts)
    children = [c for c in multiprocessing.active_children() if c not in before]
    child.close()
    assert children and [c.exitcode for c in children] == [0] * len(children)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [FILE_NAME]
    cache = EmbeddingCache()
    for member in Pipeline.load(pydoc_pipeline_dir, cache=False).members:
        found, cached = cache.get(member.fingerprint, texts)
        assert found.all() and cached is not None and len(cached) == len(texts)
    cache.close()


def test_a_chunked_write_running_when_the_service_stops_is_refused_and_undone(
    tmp_path, pydoc_pipeline
):
    """At shutdown the batcher stopped serving while a chunked write still ran in its thread:
    the write's next encode waited forever, the process died with half a document stored
    (chunks 1-512 of 1,500, searchable, no chunk 0) and the client got no answer. Now a
    stopping batcher refuses new texts, so the write fails at its next batch and undoes
    itself, told at once rather than after the batch being encoded; the second batch's
    encode is held until the stop has begun, so the order is fixed."""
    from probembed.chunking import ChunkSettings
    from probembed.service.batching import StoppingError
    from probembed.store import Database, Record
    from probembed.store.chunked import ingest_parsed, record_document

    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_parsed(
        [record_document(Record("kept", "A document stored before the write.", {}))],
        collection,
        pydoc_pipeline,
    )
    before = {i: r["text"] for i, r in collection.rows(sorted(collection.ids()), ["text"]).items()}
    stopping, calls = threading.Event(), []

    def encode(texts: list[str]):
        calls.append(len(texts))
        if len(calls) > 1:
            assert stopping.wait(30)  # 30 s: only ever waited out on failure
        return pydoc_pipeline.encode(texts)

    batcher = Batcher([encode], BatchSettings(max_wait_ms=0), Metrics(), "hash")
    words = " ".join(f"word{i}" for i in range(400))
    document = record_document(Record("long", words, {}))

    async def write_then_stop() -> None:
        batcher.start()
        write = asyncio.create_task(
            asyncio.to_thread(
                ingest_parsed,
                [document],
                collection,
                pydoc_pipeline,
                ChunkSettings(max_tokens=16, overlap_tokens=0),
                batch_size=4,
                encode=batcher.encode_blocking,
            )
        )
        while len(calls) < 2:  # the first batch is committed, the second being encoded
            assert not write.done(), write.exception()  # the write failed before its second
            await asyncio.sleep(0.01)
        stop = asyncio.create_task(batcher.stop())
        await asyncio.sleep(0)  # the stop has begun: the second batch's request is failed
        with pytest.raises(StoppingError, match="shutting down"):
            await write  # undone while the second batch is still being encoded
        stopping.set()
        await stop

    asyncio.run(write_then_stop())
    assert calls == [4, 4]  # one batch committed, then undone
    after = {i: r["text"] for i, r in collection.rows(sorted(collection.ids()), ["text"]).items()}
    assert after == before


def test_a_request_cancelled_at_shutdown_answers_with_what_its_thread_did(tmp_path):
    """uvicorn cancels the requests still running when its grace ends; a thread cannot be
    stopped, so the request waited for it and then raised: the client got a bare 500 (or
    nothing) even when the work had been committed. It now answers with the thread's own
    result or error, and the service's stop waits for such work to end."""
    from probembed.service.batching import StoppingError
    from probembed.service.state import Service

    service = Service(ServiceSettings(db=tmp_path / "db"))
    began, release, ended = threading.Event(), threading.Event(), []

    def work() -> str:
        began.set()
        assert release.wait(30)  # 30 s: only ever waited out on failure
        ended.append(True)
        return "committed"

    def failing() -> str:
        raise RuntimeError("the write's own error")

    async def cancel_while_running() -> None:
        task = asyncio.create_task(service.run("docs", work))
        while not began.is_set():
            assert not task.done(), task.exception()
            await asyncio.sleep(0.01)
        task.cancel()
        stop = asyncio.create_task(service.stop())
        await asyncio.sleep(0.05)
        assert not stop.done()  # the stop waits for the work
        release.set()
        assert await task == "committed"
        await stop
        assert ended == [True]
        with pytest.raises(StoppingError):  # stopped: a cancelled handler starts nothing more
            await service.run("docs", work)
        running = Service(ServiceSettings(db=tmp_path / "db"))
        failed = asyncio.create_task(running.run("docs", failing))
        await asyncio.sleep(0)
        failed.cancel()
        with pytest.raises(RuntimeError, match="the write's own error"):
            await failed

    asyncio.run(cancel_while_running())


#: `Service.run` with as many chunked writes, on as many collections, as the loop's default
#: pool has threads, each leaving its `unlocked` block (encoding) only once a search of its
#: collection has run in the lock it let go; then those searches. Prints what answered.
_WRITES_AND_SEARCHES = """
import asyncio, os, sys, threading
from probembed.service.settings import ServiceSettings
from probembed.service.state import Service

service = Service(ServiceSettings(db=sys.argv[1]))
names = [f"c{i}" for i in range(min(32, (os.cpu_count() or 1) + 4))]  # the default pool's size
searched = {name: threading.Event() for name in names}


async def main():
    loop = asyncio.get_running_loop()

    def chunked_write(name):
        def work():
            with service.unlocked(name, loop):
                searched[name].wait()
            return "wrote"
        return work

    def search(name):
        def work():
            searched[name].set()
            return "searched"
        return work

    writes = [service.run(n, chunked_write(n), writer=True) for n in names]
    searches = [service.run(n, search(n)) for n in names]
    print(sorted(await asyncio.gather(*writes, *searches)).count("wrote"), len(names))


asyncio.run(main())
"""


def test_chunked_writes_waiting_for_their_locks_leave_threads_for_the_searches_holding_them(
    tmp_path,
):
    """A chunked write lets its collection's lock go while it encodes and blocks its thread
    to take it back. In the loop's default pool, as many such writes as the pool has
    threads, waiting for searches holding their locks, left those searches no thread: every
    request hung (found by a reviewer). Here each write waits, encoding, for a search of its
    collection to run. In a child process, which a hang cannot keep."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _WRITES_AND_SEARCHES, str(tmp_path / "db")],
        capture_output=True,
        text=True,
        timeout=120,  # a second or two when it works; only a hang waits it out
        check=False,
    )
    assert done.returncode == 0, done.stderr
    wrote, writes = map(int, done.stdout.split())
    assert wrote == writes >= 5


def test_a_request_cancelled_before_it_answered_gets_a_json_503():
    """The cancelled request reached uvicorn, which answered with a plain-text 500."""
    import json

    from probembed.service.gate import Gate

    entered = asyncio.Event()

    async def app(scope, receive, send) -> None:
        entered.set()
        await asyncio.Event().wait()  # a request still running

    gate = Gate(app, Metrics(), 1000, frozenset(), None, frozenset())
    scope = {"type": "http", "method": "POST", "path": "/v1/collections/docs/documents"}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message) -> None:
        sent.append(message)

    async def cancelled() -> None:
        task = asyncio.create_task(gate(scope, receive, send))
        await entered.wait()
        task.cancel()
        await task

    asyncio.run(cancelled())
    assert sent[0]["status"] == 503
    assert json.loads(sent[1]["body"])["detail"] == (
        "the service shut down before this request finished"
    )
