"""Writes that plan over a collection's documents (chunked ingest and sync, a whole-record
sync, a delete by document) never interleave on one collection: the second waits for the
first, saying so, and the collection ends as after one of them and then the other.

Each test runs real `probembed` processes. The first writer holds still after a commit
(`HELD`: its `Collection.upsert` waits on stdin), so the second starts while it is part-way,
whatever the timing; the test reads the second's stderr until it says it waits (or it ends,
as each did before the plan lock: two chunked syncs left documents in part, a delete by
document left 902 of a document's 1,670 chunks, two record syncs left only their overlap).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

from probembed.chunking import ChunkSettings
from probembed.store import Database, ingest, ingest_documents

ROOT = Path(__file__).resolve().parents[1]
#: Only a guard against a hung child: no test waits on a timer otherwise.
HANG_GUARD_SECONDS = 300
#: Chunk size and batch size of every chunked write here: several chunks a document, several
#: commits a write.
CHUNK_TOKENS, BATCH = 24, 8
VOCABULARY = ("cell", "gene", "dose", "trial", "brain", "virus", "lung", "heart", "risk", "mouse")
#: What the second writer says while it waits (`CollectionHandle.planning`).
WAITS = "waits for it to end"

#: `probembed` with a hook after the N-th commit (`Collection.upsert`) of the process:
#: `hold` prints "held" and waits for a line on stdin; `fill:PATH` fills the disk PATH is on.
HELD = textwrap.dedent(
    """
    import errno, os, sys
    from probembed.store.collection import Collection

    action, after = sys.argv[1], int(sys.argv[2])
    commits = 0
    upsert = Collection.upsert

    def fill(path):
        filler = os.open(path, os.O_WRONLY | os.O_CREAT)
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(filler, bytes(size))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        os.close(filler)

    def hooked(self, *args, **kwargs):
        global commits
        done = upsert(self, *args, **kwargs)
        commits += 1
        if commits == after and action == "hold":
            print("held", flush=True)
            sys.stdin.readline()
        elif commits == after:
            fill(action.removeprefix("fill:"))
        return done

    Collection.upsert = hooked
    sys.argv = ["probembed", *sys.argv[3:]]
    from probembed.interfaces import main
    main()
    """
)


def _env() -> dict[str, str]:
    """The children's environment: this checkout first on the path."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _words(rng: np.random.Generator, n: int) -> str:
    """n seeded words."""
    return " ".join(rng.choice(VOCABULARY, size=n))


def write_docs(folder: Path, numbers: range, version: str) -> Path:
    """Markdown documents doc{i}.md of four sections each, their text set by the version."""
    folder.mkdir(parents=True)
    for i in numbers:
        rng = np.random.default_rng([i, sum(map(ord, version))])
        parts = [f"## Part {j} {version}\n\n{_words(rng, 40)}" for j in range(4)]
        (folder / f"doc{i:03d}.md").write_text(f"# Doc {i} {version}\n\n" + "\n\n".join(parts))
    return folder


def write_records(path: Path, numbers: range, version: str) -> Path:
    """JSON lines r{i} whose texts name the version."""
    lines = [json.dumps({"id": f"r{i}", "text": f"record {i} of {version}"}) for i in numbers]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def chunked(db: Path, source: Path, pipeline: Path, *more: str) -> list[str]:
    """The arguments of a chunked ingest of `source` into collection "c"."""
    return [
        "ingest", str(source), "--db", str(db), "-c", "c", "--pipeline", str(pipeline),
        "--chunk", "--chunk-tokens", str(CHUNK_TOKENS), "--batch-size", str(BATCH), *more,
    ]  # fmt: skip


class Held:
    """A `probembed` process held after its `after`-th commit until `release`."""

    def __init__(self, args: list[str], log: Path, after: int = 1) -> None:
        self.log = log
        with log.open("w") as stderr:  # a file: a chatty child never blocks on a full pipe
            self.process = subprocess.Popen(
                [sys.executable, "-c", HELD, "hold", str(after), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=_env(),
            )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "held":
                return
        self.process.wait()
        raise AssertionError(f"the first writer ended before its commit: {log.read_text()}")

    def release(self) -> str:
        """Let it go on, and return its stderr once it ended well."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait()
        said = self.log.read_text()
        assert self.process.returncode == 0, said
        return said


def _beside(
    held: Held, args: list[str], once_waiting: Callable[[subprocess.Popen[str]], object]
) -> tuple[int, bool, str]:
    """Run `probembed` with `args` while `held` holds still; once this one says it waits (or
    has ended: it did not wait), call `once_waiting` with it, then read it to its end. Its
    exit status, whether it waited, and its stderr."""
    second = subprocess.Popen(
        [sys.executable, "-m", "probembed", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    guard = threading.Timer(HANG_GUARD_SECONDS, lambda: [second.kill(), held.process.kill()])
    guard.start()
    try:
        assert second.stderr is not None
        lines: list[str] = []
        for line in second.stderr:
            lines.append(line)
            if WAITS in line:
                break
        waited = any(WAITS in line for line in lines)
        once_waiting(second)
        lines += second.stderr.readlines()
        second.wait()
    finally:
        guard.cancel()
    return second.returncode, waited, "".join(lines)


def beside(held: Held, args: list[str]) -> tuple[bool, str]:
    """`_beside`, letting `held` go once this one waits: whether it waited, and its stderr
    once it ended well."""
    code, waited, said = _beside(held, args, lambda _: held.release())
    assert code == 0, said
    return waited, said


def stopped_waiting(held: Held, args: list[str], signum: int) -> tuple[int, str]:
    """`_beside`, sending this one `signum` once it waits (`held` still holding): its exit
    status and stderr."""
    code, waited, said = _beside(held, args, lambda second: second.send_signal(signum))
    assert waited, said
    return code, said


def records_of(name: str) -> str:
    """The service's route that writes documents into a collection."""
    return f"/v1/collections/{name}/documents"


def documents(db: Path, name: str = "c") -> dict[str, list[tuple[str, str, str]]]:
    """Each stored document's chunks: (id, text, doc_hash), in id order."""
    collection = Database(db).open(name)
    rows = collection.rows(sorted(collection.ids()), ("text", "metadata"))
    found: dict[str, list[tuple[str, str, str]]] = {}
    for chunk_id, row in sorted(rows.items()):
        metadata = json.loads(row["metadata"])
        found.setdefault(metadata["doc_id"], []).append(
            (chunk_id, row["text"], metadata["doc_hash"])
        )
    return found


def chunks_of(source: Path, db: Path, pipeline) -> None:
    """Ingest `source` into collection "c" of `db` as `chunked` does, in this process."""
    target = Database(db, create=True).collection("c")
    ingest_documents(source, target, pipeline, ChunkSettings.sized(CHUNK_TOKENS), sync=True)


def alone(tmp_path: Path, source: Path, pipeline) -> dict[str, list[tuple[str, str, str]]]:
    """The documents a collection holds after a chunked ingest of `source` alone."""
    db = tmp_path / f"alone-{source.name}"
    chunks_of(source, db, pipeline)
    return documents(db)


def test_two_chunked_syncs_at_once_end_as_one_after_the_other(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline
):
    """Each sync planned its stale chunks and gone documents before writing, and removed
    them by id after the other had written: documents were left in part or mixed. Now the
    second waits for the first, and the collection holds exactly what the second syncs."""
    db = tmp_path / "db"
    first = write_docs(tmp_path / "A", range(12), "v1")
    again = write_docs(tmp_path / "A2", range(12), "v2")
    other = write_docs(tmp_path / "B", range(6, 18), "v3")
    chunks_of(first, db, pydoc_pipeline)

    held = Held(chunked(db, again, pydoc_pipeline_dir, "--sync"), tmp_path / "first.log")
    waited, said = beside(held, chunked(db, other, pydoc_pipeline_dir, "--sync"))

    assert documents(db) == alone(tmp_path, other, pydoc_pipeline)
    assert waited, said
    assert f"chunked sync of {again}" in said  # names what it waits for


def test_a_delete_by_document_waits_for_the_ingest_writing_it(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline
):
    """`delete --doc` between the batches of its document's write deleted the chunks
    committed so far, and the ingest wrote the rest: neither deleted nor whole. Now the
    delete waits, and deletes the whole document."""
    db = tmp_path / "db"
    kept = write_docs(tmp_path / "kept", range(2), "v1")
    chunks_of(kept, db, pydoc_pipeline)
    big = write_docs(tmp_path / "big", range(5, 6), "v1")
    with (big / "doc005.md").open("a") as more:  # many batches of chunks
        more.write("\n\n" + "\n\n".join(f"## More {j}\n\n{_words(np.random.default_rng(j), 40)}"
                                        for j in range(12)))  # fmt: skip

    held = Held(chunked(db, big, pydoc_pipeline_dir), tmp_path / "ingest.log")
    delete = ["delete", "doc005.md", "--doc", "--db", str(db), "-c", "c"]
    waited, said = beside(held, delete)

    assert set(documents(db)) == {"doc000.md", "doc001.md"}, said
    assert waited, said


def test_two_record_syncs_at_once_end_as_one_after_the_other(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline
):
    """Two whole-record syncs (r0-99 and r50-149 of 200 stored) at once left only the
    records both held (each removed what the other wrote); one after the other leave the
    second's 100. Now the second waits for the first."""
    db = tmp_path / "db"
    common = ["--db", str(db), "-c", "r", "--pipeline", str(pydoc_pipeline_dir), "--sync"]
    base = write_records(tmp_path / "base.jsonl", range(200), "base")
    ingest(base, Database(db, create=True).collection("r"), pydoc_pipeline)
    first = write_records(tmp_path / "a.jsonl", range(100), "a")
    second = write_records(tmp_path / "b.jsonl", range(50, 150), "b")

    held = Held(["ingest", str(first), *common, "--batch-size", "20"], tmp_path / "first.log")
    waited, said = beside(held, ["ingest", str(second), *common])

    collection = Database(db).open("r")
    texts = {i: row["text"] for i, row in collection.rows(sorted(collection.ids())).items()}
    assert texts == {f"r{i}": f"record {i} of b" for i in range(50, 150)}, said
    assert waited, said
    assert f"sync of {first}" in said


def test_the_service_answers_409_while_another_process_plans_and_takes_plain_writes(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline
):
    """A request that plans over the collection's documents (a chunked write, a sync, a
    delete by document) does not wait in its collection's turn for another process's: it is
    answered 409 naming that write, and nothing of it is written. A plain write is not held
    up."""
    from service_support import Server

    from probembed.service.collections import PLAN_RETRY_S

    db = tmp_path / "db"
    common = ["--db", str(db), "-c", "r", "--pipeline", str(pydoc_pipeline_dir)]
    base = write_records(tmp_path / "base.jsonl", range(40), "base")
    ingest(base, Database(db, create=True).collection("r"), pydoc_pipeline)
    chunks_of(write_docs(tmp_path / "docs", range(4), "v1"), db, pydoc_pipeline)
    records = write_records(tmp_path / "sync.jsonl", range(30), "cli")
    sync = ["ingest", str(records), *common, "--sync", "--batch-size", "10"]
    update = write_docs(tmp_path / "update", range(4), "v2")

    with Server(db, pydoc_pipeline_dir) as server, server.client() as http:
        held = Held(sync, tmp_path / "sync.log")
        plain = http.post(records_of("r"), json={"documents": [{"id": "new", "text": "plain"}]})
        one = {"documents": [{"id": "r0", "text": "x"}], "sync": True}
        resync = http.post(records_of("r"), json=one)
        held.release()
        held = Held(chunked(db, update, pydoc_pipeline_dir), tmp_path / "chunked.log")
        document = {"id": "doc000.md", "text": "# Doc 0\n\nanother text"}
        rechunk = http.post(records_of("c"), json={"documents": [document], "chunk": True})
        delete = http.post("/v1/collections/c/delete", json={"ids": ["doc001.md"], "doc": True})
        held.release()

    assert plain.status_code == 200, plain.text
    for refused in (resync, rechunk, delete):
        assert refused.status_code == 409, refused.text
        assert refused.headers["Retry-After"] == str(PLAN_RETRY_S), refused.headers
    said = resync.json()["detail"]  # the server names no path of its machine: <tmp>/...
    assert "is being changed by sync of " in said and "sync.jsonl (pid" in said, said
    said = delete.json()["detail"]
    assert "is being changed by chunked ingest of " in said and "update (pid" in said, said
    r = Database(db).open("r")
    assert r.ids() == {f"r{i}" for i in range(30)} | {"new"}  # the CLI's sync, then the POST
    assert documents(db) == alone(tmp_path, update, pydoc_pipeline)  # the CLI's ingest alone


@pytest.fixture
def small_disk(tmp_path) -> Iterator[list[str]]:
    """The command prefix that runs a child in a mount namespace of its own, where a 16 MB
    tmpfs is mounted at tmp_path/"disk" (gone with the child); skipped where the system lets
    no one make one (no `unshare`, user namespaces refused)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare: a small disk to fill needs a mount namespace")
    prefix = [unshare, "--user", "--map-root-user", "--mount"]
    (tmp_path / "disk").mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(tmp_path / "disk")]
    probe = subprocess.run([*prefix, *mount], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no tmpfs in a mount namespace here ({probe.stderr.strip()})")
    yield prefix


#: Inside the namespace: mount the small disk, sync docs v1, then v2 with the disk filled
#: after its first commit, then again with the filler gone; prints what each run said. The
#: runs before and after the full one are the CLI in this process (`here`), which reads the
#: collection at the end anyway: two process starts fewer.
FULL_DISK = textwrap.dedent(
    """
    import json, os, subprocess, sys
    disk, held, *args, docs = sys.argv[1:]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", disk], check=True)
    filler = os.path.join(disk, "filler")
    from typer.testing import CliRunner
    from probembed.interfaces.cli import app

    def given(source):
        return [source if a == "SOURCE" else a for a in args]

    def here(source):
        done = CliRunner().invoke(app, given(source))
        return done.exit_code, done.stderr

    def filled(source):
        command = [sys.executable, "-c", held, "fill:" + filler, "1", *given(source)]
        done = subprocess.run(command, capture_output=True, text=True)
        return done.returncode, done.stderr

    made = here(docs + "/v1")
    full = filled(docs + "/v2")
    os.remove(filler)
    again = here(docs + "/v2")
    from probembed.store import Database
    c = Database(os.path.join(disk, "db")).open("c")
    rows = c.rows(sorted(c.ids()), ("text", "metadata"))
    print(json.dumps({"runs": [made, full, again], "rows": {
        i: [r["text"], json.loads(r["metadata"])["doc_hash"]] for i, r in rows.items()}}))
    """
)


def test_a_full_disk_says_what_stopped_the_sync_what_it_left_and_what_to_do(
    tmp_path, small_disk, pydoc_pipeline_dir, pydoc_pipeline
):
    """A chunked sync whose disk filled after its first commit: its undo needs the disk too
    and failed, and only the undo's error was shown, saying neither what was left nor what to
    do. Now the write's own error comes first, then the undo's failure and what the
    collection holds, then "free space and run the same command again", which completes it."""
    write_docs(tmp_path / "docs" / "v1", range(12), "v1")
    v2 = write_docs(tmp_path / "docs" / "v2", range(12), "v2")
    disk = tmp_path / "disk"
    args = chunked(disk / "db", Path("SOURCE"), pydoc_pipeline_dir, "--sync")
    inside = [sys.executable, "-c", FULL_DISK, str(disk), HELD, *args, str(tmp_path / "docs")]
    done = subprocess.run(
        [*small_disk, *inside],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=HANG_GUARD_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    (made, _), (code, said), (again, said_again) = found["runs"]
    assert (made, again) == (0, 0), said_again
    assert code == 2, said  # the store's refusal: what to mend, not the engine's raw error
    error, *notes = said.strip().splitlines()[-3:]
    assert error.startswith("error: no space left on device for collection 'c'"), said
    assert error.endswith("free space on that file system (or raise the quota), then write again")
    assert notes[0].startswith("undoing it failed too ("), said
    assert "the batches that write committed before it stopped are still stored" in notes[1]
    whole = alone(tmp_path, v2, pydoc_pipeline)
    stored = {i: tuple(v) for i, v in found["rows"].items()}
    assert stored == {i: (text, digest) for chunks in whole.values() for i, text, digest in chunks}


def test_a_planning_write_inside_another_of_its_thread_passes_through(tmp_path, pydoc_pipeline):
    """A planning write that is part of a larger one of the same thread holds the lock
    already: a second flock of the file would wait for itself (here: refused at once)."""
    db = tmp_path / "db"
    chunks_of(write_docs(tmp_path / "docs", range(2), "v1"), db, pydoc_pipeline)
    collection = Database(db).open("c")
    with collection.planning("an outer write", wait=0):
        deleted, missing = collection.delete_documents(["doc000.md"], wait=0)
    assert deleted > 0 and not missing
    assert set(documents(db)) == {"doc001.md"}


def _run(held: Held, args: list[str]) -> Result:
    """`probembed ARGS` run to its end in this process while `held` holds still: a write
    that gives up by itself needs no process of its own (a start of some 4 s). A wait that
    is not given up ends when the guard kills `held`, and the test fails."""
    from typer.testing import CliRunner

    from probembed.interfaces.cli import app

    guarded = threading.Event()

    def guard() -> None:
        guarded.set()
        held.process.kill()

    timer = threading.Timer(HANG_GUARD_SECONDS, guard)
    timer.start()
    try:
        done = CliRunner().invoke(app, args)
    finally:
        timer.cancel()
    assert not guarded.is_set(), f"{args} waited {HANG_GUARD_SECONDS} s and did not give up"
    return done


def _sync_held_beside(tmp_path, pipeline_dir, pipeline) -> tuple[Path, Path, Path, Held]:
    """A chunked collection of docs 0-3 (tmp_path/db), a sync of new versions of them held at
    its first commit, and a folder of docs 4-7 for a second write: (db, the held sync's
    folder, that folder, held)."""
    db = tmp_path / "db"
    chunks_of(write_docs(tmp_path / "A", range(4), "v1"), db, pipeline)
    again = write_docs(tmp_path / "A2", range(4), "v2")
    other = write_docs(tmp_path / "B", range(4, 8), "v3")
    held = Held(chunked(db, again, pipeline_dir, "--sync"), tmp_path / "first.log")
    return db, again, other, held


def test_a_cli_write_given_a_wait_gives_up_naming_the_holder_and_exits_75(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline
):
    """`ingest --sync` and `delete --doc` waited as long as another process's planning write
    ran, with no way to give up but Ctrl-C. With `--wait SECONDS` each gives up after that
    long, naming the holder (what it does, its pid and host), exit 75 (try again later), and
    nothing of it is written; `--wait 0` does not say it waits."""
    from probembed.interfaces.store_options import BUSY_EXIT

    db, again, other, held = _sync_held_beside(tmp_path, pydoc_pipeline_dir, pydoc_pipeline)
    try:
        sync = _run(held, chunked(db, other, pydoc_pipeline_dir, "--sync", "--wait", "0.5"))
        by_doc = ["delete", "doc000.md", "--doc", "--db", str(db), "-c", "c", "--wait", "0"]
        delete = _run(held, by_doc)
    finally:
        held.release()

    for done in (sync, delete):
        assert done.exit_code == BUSY_EXIT, done.stderr
        error = done.stderr.strip().splitlines()[-1]
        assert error.startswith(
            f"error: collection 'c' is being changed by chunked sync of {again}"
        )
        assert f"(pid {held.process.pid} on " in error, error
    assert (
        "this chunked sync" in sync.stderr and "waits for it to end, 0.5 s at most," in sync.stderr
    )
    assert "stopped after waiting 0.5 s, before reading or writing anything" in sync.stderr
    assert WAITS not in delete.stderr and "stopped without waiting" in delete.stderr
    assert documents(db) == alone(tmp_path, again, pydoc_pipeline)  # the first writer's alone


def test_a_cli_write_given_a_wait_goes_on_once_the_holder_ends_saying_so(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline
):
    """Waiting within its `--wait`, a delete by document says what it waits for and how long
    at most, then that the wait is done, and deletes the whole document."""
    db = tmp_path / "db"
    chunks_of(write_docs(tmp_path / "A", range(4), "v1"), db, pydoc_pipeline)
    again = write_docs(tmp_path / "A2", range(4), "v2")
    held = Held(chunked(db, again, pydoc_pipeline_dir, "--sync"), tmp_path / "first.log")
    limit = str(HANG_GUARD_SECONDS)
    delete = ["delete", "doc001.md", "--doc", "--db", str(db), "-c", "c", "--wait", limit]
    waited, said = beside(held, delete)

    assert waited, said
    assert f"waits for it to end, {limit} s at most," in said
    done = rf"done waiting for chunked sync of {re.escape(str(again))} \(pid \d+ on .*\) after "
    assert re.search(done + r"\d:\d\d:\d\d: this delete of 1 document\(s\) goes on", said), said
    assert set(documents(db)) == {"doc000.md", "doc002.md", "doc003.md"}, said


def test_wait_is_refused_where_no_plan_lock_is_taken_or_no_number_of_seconds(
    tmp_path, pydoc_pipeline
):
    """`--wait` on a plain ingest or a delete by id would wait for nothing: refused naming
    what it needs. A wait that is no number of seconds (NaN: a deadline never reached, so
    no limit at all) is refused too."""
    from typer.testing import CliRunner

    from probembed.interfaces.cli import app
    from probembed.store import StoreError

    records = write_records(tmp_path / "r.jsonl", range(2), "a")
    runner = CliRunner()
    plain = runner.invoke(app, ["ingest", str(records), "--db", str(tmp_path), "--wait", "5"])
    by_id = runner.invoke(app, ["delete", "r0", "--db", str(tmp_path), "--wait", "5"])
    assert plain.exit_code == 2 and "--wait needs --sync or --chunk" in plain.output
    assert by_id.exit_code == 2 and "--wait needs --doc" in by_id.output
    chunks_of(write_docs(tmp_path / "docs", range(1), "v1"), tmp_path / "db", pydoc_pipeline)
    collection = Database(tmp_path / "db").open("c")
    with pytest.raises(StoreError, match="wait must be None"):
        collection.delete_documents(["doc000.md"], wait=float("nan"))
    assert set(documents(tmp_path / "db")) == {"doc000.md"}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_cli_write_stopped_while_it_waits_says_it_wrote_nothing(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline, signum
):
    """Ctrl-C or SIGTERM while an ingest waited for another process's planning write said
    "committed batches are kept", of batches never written; now it says what it waited for
    and that it read and wrote nothing (a delete by document alike), and nothing of it is."""
    db, again, other, held = _sync_held_beside(tmp_path, pydoc_pipeline_dir, pydoc_pipeline)
    try:
        sync = stopped_waiting(held, chunked(db, other, pydoc_pipeline_dir, "--sync"), signum)
        delete = ["delete", "doc000.md", "--doc", "--db", str(db), "-c", "c"]
        by_doc = stopped_waiting(held, delete, signum)
    finally:
        held.release()

    how = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    code = 130 if signum == signal.SIGINT else -signal.SIGTERM
    for (status, said), (command, what) in zip(
        (sync, by_doc),
        (("ingest", f"chunked sync of {other}"), ("delete", "delete of 1 document(s)")),
        strict=True,
    ):
        assert status == code, said
        last = said.strip().splitlines()[-1]
        told = f"error: probembed {command} {how}: this {what} was waiting for chunked sync of "
        assert last.startswith(told + str(again)), said
        assert last.endswith("), and had read and written nothing"), said
        assert "committed batches are kept" not in said and "Traceback" not in said
    assert documents(db) == alone(tmp_path, again, pydoc_pipeline)  # the first writer's alone
