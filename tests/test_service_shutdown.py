"""SIGTERM during a burst of writes on a live server: the exit is bounded by the grace, not by
the batch an encoding child holds nor by the chunking of a large document, and every write is
stored whole or not at all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import numpy as np
import pytest
from service_support import Server

from probembed.store import Database

#: Seconds after SIGTERM within which the server must have exited: a hang fails here. The
#: server exits about a second after the 1 s grace (the undo of a write, the children's
#: close); the batch the giant request puts in a child takes minutes (some 180 s on two
#: cores), which the server used to wait out, so 60 s leaves a loaded machine room and still
#: tells the two apart. A write chunking a large document stopped 6.0 s after SIGTERM with
#: its 5 s grace; left to chunk, it ran past the bound.
EXIT_BOUND = 60
#: Texts of the request that keeps one child busy, each of WORDS distinct random words.
GIANT, WORDS = 4096, 300


@pytest.fixture(scope="module")
def slow_pipeline_dir(tmp_path_factory):
    """The hashing encoder under `perturb` with 64 views: each text costs 65 encodes of its
    words, so a request of many long texts holds its child for minutes; a real pipeline whose
    cost the request sets, nothing stands in for the encoder."""
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline
    from probembed.store.pydoc_corpus import read_pydoc_topics

    passages = [r.text for r in read_pydoc_topics()[:40]]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in passages]
    spec = ModelSpec("hash", "perturb", {"views": 64, "seed": 0}, encoder_params={"dim": 64})
    pipeline = Pipeline.fit([spec], pairs, FusionConfig("uec"), name="slow", cache=False)
    return pipeline.save(tmp_path_factory.mktemp("pipelines") / "slow")


@pytest.fixture(scope="module")
def wordpiece_pipeline_dir(tmp_path_factory):
    """The built-in `paraphrase-l3` alone under `perturb` (nothing to fit), saved: a real
    WordPiece tokenizer (MiniLM's), so chunking costs what it costs in use, in a model that
    loads in a second (`retrieval`'s three took some 15 s in the server and its child, and
    as long again in this process); skipped, naming it, where it is not installed."""
    from probembed.encoders import EncoderUnavailableError, get_encoder
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    try:
        encoder = get_encoder("paraphrase-l3")
    except EncoderUnavailableError as exc:
        pytest.skip(f"the paraphrase-l3 encoder is not installed: {exc}")
    pipeline = Pipeline([make_estimator("perturb", encoder)], name="wordpiece", cache=False)
    return pipeline.save(tmp_path_factory.mktemp("pipelines") / "wordpiece")


def terminated(server: Server, *others: int) -> int:
    """SIGTERM to the server, and to `others` as a signal to its whole process group reaches
    them; its exit code, or the test fails EXIT_BOUND seconds on (the server then killed:
    whatever it still does is minutes nobody needs to wait out)."""
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    for pid in others:
        os.kill(pid, signal.SIGTERM)
    try:
        return server.process.wait(EXIT_BOUND)
    except subprocess.TimeoutExpired:
        server.kill()
        pytest.fail(f"no exit {EXIT_BOUND} s after SIGTERM:\n{server.output[-3000:]}")


def random_texts(count: int, words: int, seed: int) -> list[str]:
    """Seeded texts of distinct 8-letter words (past the encoder's word cache: full cost)."""
    letters = np.random.default_rng(seed).integers(97, 123, size=(count * words, 8), dtype=np.uint8)
    flat = [row.tobytes().decode() for row in letters]
    return [" ".join(flat[i * words : (i + 1) * words]) for i in range(count)]


def wait_for_queue(http: httpx2.Client, texts: int) -> None:
    """Until `texts` texts are queued or encoding for the slow pipeline (60 s at most)."""
    deadline = time.monotonic() + 60
    gauge = f'probembed_encode_queue_texts{{pipeline="slow"}} {texts:.1f}'
    while gauge not in http.get("/metrics").text:
        assert time.monotonic() < deadline, f"{texts} texts never reached the queue"
        time.sleep(0.05)


def test_sigterm_during_a_burst_of_writes_exits_within_the_grace_and_stores_each_whole(
    tmp_path, slow_pipeline_dir
):
    """A SIGTERM while a child encoded a large batch took the grace plus that whole batch to
    exit (82 s in a walkthrough with the built-in `retrieval`: its writes were already
    answered 503 and undone at 30 s). The busy child is ended now once the grace is over;
    a chunked write part-way and plain writes are each stored whole or not at all."""
    flags = ["--workers", "2", "--graceful-timeout", "1", "--max-batch", str(GIANT)]
    flags += ["--max-inputs", str(GIANT), "--max-queue", "100000"]
    server = Server(
        tmp_path / "db", slow_pipeline_dir, *flags, env={"PROBEMBED_CACHE_DIR": str(tmp_path)}
    )
    first = [{"id": f"kept{i}", "text": f"an early document {i}"} for i in range(3)]
    plain = [
        [{"id": f"p{n}-{i}", "text": text} for i, text in enumerate(random_texts(4, 40, n))]
        for n in (1, 2)
    ]
    long_doc = {"id": "long.md", "text": "\n\n".join(random_texts(1500, 30, 3))}
    answers: dict[str, int | str] = {}

    def send(name: str, path: str, body: dict) -> None:
        with httpx2.Client(base_url=server.url, timeout=600) as http:
            try:
                answers[name] = http.post(path, json=body).status_code
            except httpx2.HTTPError as exc:  # recorded: the assertions say what was expected
                answers[name] = repr(exc)

    with server, server.client() as http:
        for name in ("c", "chunks"):  # a collection holds whole documents or chunks
            assert http.post("/v1/collections", json={"name": name}).status_code == 201
        written = http.post("/v1/collections/c/documents", json={"documents": first})
        assert written.status_code == 200, written.text
        giant = {"model": "slow", "input": random_texts(GIANT, WORDS, 0)}
        burst = [threading.Thread(target=send, args=("giant", "/v1/embeddings", giant))]
        burst[0].start()
        wait_for_queue(http, GIANT)  # taken whole by a free child at once
        chunked = {"documents": [long_doc], "chunk": {"max_tokens": 32}}
        burst.append(
            threading.Thread(
                target=send, args=("chunked", "/v1/collections/chunks/documents", chunked)
            )
        )
        for n, documents in enumerate(plain):
            body = {"documents": documents}
            burst.append(
                threading.Thread(
                    target=send, args=(f"plain{n}", "/v1/collections/c/documents", body)
                )
            )
        for thread in burst[1:]:
            thread.start()
        deadline = time.monotonic() + 120  # the chunked write's first batch committed
        while not http.get("/v1/collections/chunks").json()["count"]:
            assert time.monotonic() < deadline, "the chunked write never committed a batch"
            time.sleep(0.1)
        code = terminated(server)
    for thread in burst:
        thread.join(60)
    assert code in (0, -signal.SIGTERM), server.output
    assert "Traceback" not in server.output, server.output
    # the giant's child, and the other's if it was encoding a write's batch
    ended = re.search(
        r"stopped (1 encoding child|[2-9] encoding children) in the middle", server.output
    )
    assert ended is not None, server.output
    assert answers["giant"] == 503, answers
    stored = Database(tmp_path / "db").open("c").ids()
    assert {d["id"] for d in first} <= stored
    for n, documents in enumerate(plain):
        ids = {d["id"] for d in documents}
        assert (ids <= stored) if answers[f"plain{n}"] == 200 else not (ids & stored), answers
    chunks = Database(tmp_path / "db").open("chunks").ids()
    if answers["chunked"] == 200:  # it finished within the grace: every chunk is there
        assert len(chunks) > 512, len(chunks)
    else:
        assert answers["chunked"] == 503 and not chunks, (answers, len(chunks))
    # its undo pin went with it, however it ended (a killed CLI ingest's stayed a week)
    assert Database(tmp_path / "db").open("chunks")._require().tags.list() == {}


#: The chunked write's document: random 8-letter words (4-5 WordPiece tokens each), cut into
#: chunks of at most CUT tokens, so the chunker cuts every paragraph down to its words. Its
#: chunking by paraphrase-l3's tokenizer takes some 7 s per MB so cut on two loaded cores
#: (0.54 MB in 3.6 s; `retrieval`, which counts with three tokenizers, 6.7 s): this one's
#: 16 MB take about two minutes, far past EXIT_BOUND, as `retrieval`'s 8 MB did.
PARAGRAPHS, CUT = 60_000, 8


def test_sigterm_while_a_large_document_is_chunked_exits_without_chunking_the_rest(
    tmp_path, wordpiece_pipeline_dir
):
    """After the grace a chunked write went on cutting its document into chunks, minutes of
    it for a large one, before its first encode learnt of the shutdown and the server could
    exit. Chunking asks the service between its tokenizer calls now: the write ends there,
    nothing of the document stored. The pipeline's real tokenizer makes chunking cost what
    it costs in use (the hashing encoder counts words, ten times faster). The grace, 5 s,
    lets the write reach its chunking (it begins well within a second of the request being
    read) before the shutdown stops it."""
    flags = ["--workers", "1", "--graceful-timeout", "5", "--max-body-bytes", str(2**26)]
    server = Server(
        tmp_path / "db",
        wordpiece_pipeline_dir,
        *flags,
        env={"PROBEMBED_CACHE_DIR": str(tmp_path)},
    )
    text = "\n\n".join(random_texts(PARAGRAPHS, 30, 4))
    body = {"documents": [{"id": "large.md", "text": text}], "chunk": {"max_tokens": CUT}}
    answers: dict[str, int | str] = {}

    def send() -> None:
        with httpx2.Client(base_url=server.url, timeout=600) as http:
            try:
                answers["chunked"] = http.post("/v1/collections/c/documents", json=body).status_code
            except httpx2.HTTPError as exc:  # recorded: the assertions say what was expected
                answers["chunked"] = repr(exc)

    with server, server.client() as http:
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        writing = threading.Thread(target=send)
        writing.start()
        deadline = time.monotonic() + 60  # the write and this scrape of /metrics in flight
        while "probembed_requests_in_flight 2.0" not in http.get("/metrics").text:
            assert time.monotonic() < deadline, "the chunked write never arrived"
            time.sleep(0.05)
        code = terminated(server)
    writing.join(60)
    assert code in (0, -signal.SIGTERM), server.output
    assert "Traceback" not in server.output, server.output
    assert answers["chunked"] == 503, answers
    assert Database(tmp_path / "db").open("c").count() == 0


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid`, read from /proc (Linux, where the service runs)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_signal_to_the_whole_process_group_leaves_the_children_to_the_server(
    tmp_path, slow_pipeline_dir
):
    """Ctrl-C and systemd's default stop signal every process of the group: the encoding
    children died with the server's SIGTERM, and the server, in its grace, took the busy one
    for a crash, started another and sent it the batch again. The children ignore it now and
    the server ends them itself. The group is signalled process by process, the server and
    each child, as killpg would (the test's own group holds pytest)."""
    flags = ["--workers", "1", "--graceful-timeout", "1", "--max-batch", str(GIANT)]
    flags += ["--max-inputs", str(GIANT), "--max-queue", "100000"]
    server = Server(
        tmp_path / "db", slow_pipeline_dir, *flags, env={"PROBEMBED_CACHE_DIR": str(tmp_path)}
    )
    answers: dict[str, int | str] = {}

    def send() -> None:
        with httpx2.Client(base_url=server.url, timeout=600) as http:
            try:
                giant = {"model": "slow", "input": random_texts(GIANT, WORDS, 0)}
                answers["giant"] = http.post("/v1/embeddings", json=giant).status_code
            except httpx2.HTTPError as exc:
                answers["giant"] = repr(exc)

    with server, server.client() as http:
        sender = threading.Thread(target=send)
        sender.start()
        wait_for_queue(http, GIANT)
        assert server.process is not None
        children = children_of(server.process.pid)
        assert children, server.output  # its encoding child
        code = terminated(server, *children)
    sender.join(60)
    assert code in (0, -signal.SIGTERM), server.output
    assert "died" not in server.output and "started another" not in server.output, server.output
    assert "stopped 1 encoding child in the middle" in server.output, server.output
    assert answers["giant"] == 503, answers
