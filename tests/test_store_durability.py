"""Durability: an ingest killed with SIGKILL loses nothing it committed and resumes cleanly."""

import json
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import racer_support

from probembed.store import Database, ingest
from probembed.store.readers import Record

#: Documents of the killed ingest: its hold comes at a fifth of them, and the resumed run
#: writes the rest in two batches (of at most 500).
N_DOCS = 1000
BATCH = 20
#: The child holds still after committing this many rows, so the kill always lands mid-ingest.
HOLD_AT = 10 * BATCH
#: Only a guard against a hung child (the test never waits on a timer otherwise).
HANG_GUARD_SECONDS = 300

CHILD = textwrap.dedent(
    """
    import sys
    from probembed.pipeline import Pipeline
    from probembed.store import Database, ingest

    def committed(added):
        print(f"committed {added}", flush=True)
        if added >= int(sys.argv[5]):
            sys.stdin.readline()  # wait, mid-ingest, for the parent's SIGKILL

    pipe = Pipeline.load(sys.argv[2], cache=False)
    collection = Database(sys.argv[1], create=True).collection("docs")
    ingest(sys.argv[3], collection, pipe, batch_size=int(sys.argv[4]), on_commit=committed)
    print("finished", flush=True)
    """
)


def synthetic_docs(n: int) -> list[dict]:
    """Distinct documents of a few random words each, reproducibly."""
    rng = np.random.default_rng(7)
    words = [
        "cell",
        "gene",
        "protein",
        "tumour",
        "dose",
        "trial",
        "mouse",
        "risk",
        "brain",
        "virus",
        "lung",
        "heart",
    ]
    return [
        {"id": f"doc-{i}", "text": f"{i} " + " ".join(rng.choice(words, size=8)), "n": i}
        for i in range(n)
    ]


def test_sigkill_mid_ingest_keeps_committed_rows_and_resumes(tmp_path, hash_pipeline):
    docs = synthetic_docs(N_DOCS)
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    pipe_dir = hash_pipeline.save(tmp_path / "pipe")
    db_path = tmp_path / "db"
    args = [sys.executable, "-c", CHILD, str(db_path), str(pipe_dir), str(source), str(BATCH)]
    errors = tmp_path / "child.stderr"
    with errors.open("w") as stderr:  # a file, so a chatty child never blocks on a full pipe
        child = subprocess.Popen(
            [*args, str(HOLD_AT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    committed = _wait_for_commit_marker(child, HOLD_AT, errors)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    collection = Database(db_path).open("docs")
    ids = collection.ids()
    # Every committed row survived, and nothing beyond them was written.
    assert ids == {d["id"] for d in docs[:committed]}
    assert collection.count() == len(ids)  # no duplicates, no torn rows
    by_id = {d["id"]: d for d in docs}
    rows = collection.rows(sorted(ids), ("text", "mean"))
    sample = sorted(ids)[:: max(1, len(ids) // 50)]
    fused = hash_pipeline.encode([by_id[i]["text"] for i in sample])
    for j, doc_id in enumerate(sample):
        assert rows[doc_id]["text"] == by_id[doc_id]["text"]
        # Re-encoded in another batch split: the hash pipeline is batch-invariant up to one
        # float32 rounding of its float64 maths (tests/test_builtin_pipelines.py), so 1 ulp.
        np.testing.assert_array_max_ulp(rows[doc_id]["mean"], fused.gaussian.mean[j], maxulp=1)
    probe = by_id[sample[-1]]["text"]
    assert collection.search(probe, k=1, exact=True)["hits"][0]["id"] == sample[-1]

    report = ingest(source, collection, hash_pipeline, batch_size=500)
    assert report.already_stored == len(ids)
    assert report.added == N_DOCS - len(ids)
    assert collection.count() == N_DOCS == len(collection.ids())


def _wait_for_commit_marker(child: subprocess.Popen, at_least: int, errors: Path) -> int:
    """Read the child's commit markers until it reports `at_least` rows; return its count."""
    guard = threading.Timer(HANG_GUARD_SECONDS, child.kill)
    guard.start()
    try:
        for line in child.stdout:
            if line.startswith("committed ") and int(line.split()[1]) >= at_least:
                return int(line.split()[1])
    finally:
        guard.cancel()
    child.wait(timeout=30)
    raise AssertionError(f"child ended before {at_least} rows: {errors.read_text()[-2000:]}")


#: A removal in parts of 2 ids (`filters.IDS_PER_CONDITION`) that holds still after its
#: first part commits, for the parent's SIGKILL: a delete of b..g, or a sync keeping only a.
REMOVAL_CHILD = textwrap.dedent(
    """
    import sys
    import lancedb.table
    from probembed.store import Database, Record, filters, ingest

    filters.IDS_PER_CONDITION = 2
    delete = lancedb.table.LanceTable.delete

    def deleted_then_held(self, where):
        done = delete(self, where)
        print("removed a part", flush=True)
        sys.stdin.readline()  # wait, between the parts, for the parent's SIGKILL
        return done

    lancedb.table.LanceTable.delete = deleted_then_held
    collection = Database(sys.argv[1]).open("docs")
    if sys.argv[2] == "delete":
        collection.delete(list("bcdefg"))
    else:
        ingest([Record("a", "a again")], collection, sync=True)
    """
)


@pytest.mark.parametrize("kind", ["delete", "sync"])
def test_a_removal_killed_between_its_parts_leaves_a_prefix_its_run_again_completes(
    tmp_path, hash_pipeline, kind
):
    """A removal takes a commit per `IDS_PER_CONDITION` ids: an exception between them puts
    the step back, a SIGKILL cannot. What it leaves is a prefix (a sync's write and its
    removal's first parts, a delete's first parts: what a reader sees between the commits
    too), and the same delete or sync run again completes it."""
    db = tmp_path / "db"
    collection = Database(db, create=True).collection("docs")
    ingest([Record(i, f"document {i}") for i in "abcdefgh"], collection, hash_pipeline)
    errors = tmp_path / "child.stderr"
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", REMOVAL_CHILD, str(db), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    guard = threading.Timer(HANG_GUARD_SECONDS, child.kill)
    guard.start()
    try:
        said = child.stdout.readline()
    finally:
        guard.cancel()
    assert said == "removed a part\n", errors.read_text()[-2000:]
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    after = Database(db).open("docs")
    removing = set("bcdefg" if kind == "delete" else "bcdefgh")
    assert len(removing - after.ids()) == 2  # one part of 2 ids, the rest still stored
    assert after.ids() | removing == set("abcdefgh")
    if kind == "delete":
        assert after.delete(list("bcdefg")) == 4
        assert after.ids() == {"a", "h"}
    else:
        assert after.rows(["a"], ["text"])["a"]["text"] == "a again"  # its write is in
        report = ingest([Record("a", "a again")], after, sync=True)
        assert (report.removed, report.updated, after.ids()) == (5, 0, {"a"})


@pytest.mark.parametrize("mode", ["add", "upsert", "ingest"])
def test_two_processes_writing_the_same_ids_store_each_id_once(tmp_path, hash_pipeline, mode):
    """Both passed the 'already stored?' check before either committed: 340 of 400 ids were
    stored twice, and search returned the same id twice. Two ingests of the same records
    then failed, one of them, on "ids are already in collection" instead of counting them.
    One writer is this process, the other a process of its own (`racer_support`)."""
    root = tmp_path / "db"
    ingest([Record("seed", "seed text", {})], Database(root, create=True).collection("c"),
           hash_pipeline)  # fmt: skip
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    go = tmp_path / "go"
    args = [sys.executable, racer_support.__file__, str(root), str(pipeline_dir), str(go), mode]
    other = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        mine = racer_support.prepared(str(root), str(pipeline_dir))
        assert other.stdout.readline().strip() == "ready"  # loaded and waiting: go together
        go.touch()
        said = [racer_support.race(*mine, mode).split()]
        assert other.wait(timeout=300) == 0
        said.append(other.stdout.read().split())
    finally:
        other.kill()
    ids = Database(root).collection("c").vectors().ids.tolist()
    assert len(ids) == len(set(ids)) == 201
    if mode == "ingest":  # between them every id added once, each run accounting for all 200
        assert sum(int(s[0]) for s in said) == 200
        assert all(int(s[0]) + int(s[1]) == 200 for s in said)


#: A streamed re-write of one file (`ingest_documents` with `stream_bytes=0`, its chunks in
#: batches of 4) that holds still after its first batch commits, for the parent's SIGKILL.
STREAM_CHILD = textwrap.dedent(
    """
    import sys
    from probembed.pipeline import Pipeline
    from probembed.store import Database, chunked, ingest_documents

    commit = chunked.commit

    def committed_then_held(*args, **kwargs):
        done = commit(*args, **kwargs)
        print("committed 1", flush=True)
        sys.stdin.readline()  # wait, mid-stream, for the parent's SIGKILL
        return done

    chunked.commit = committed_then_held
    pipe = Pipeline.load(sys.argv[2], cache=False)
    collection = Database(sys.argv[1]).open("docs")
    ingest_documents(sys.argv[3], collection, pipe, batch_size=4, stream_bytes=0)
    """
)


def _stream_killed_after_one_batch(db: Path, pipeline_dir: Path, docs: Path, errors: Path) -> None:
    """A streamed chunked ingest of `docs` (STREAM_CHILD) SIGKILLed once its first batch is
    committed: a hard stop mid-stream, after one write and before the rest."""
    args = [sys.executable, "-c", STREAM_CHILD, str(db), str(pipeline_dir), str(docs)]
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    _wait_for_commit_marker(child, 1, errors)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


def test_a_stream_killed_mid_rewrite_keeps_chunk_0_and_its_settings(
    tmp_path, pydoc_pipeline, pydoc_pipeline_dir
):
    """A streamed re-write deleted the stored chunks, chunk 0 too, before writing: a SIGKILL
    mid-stream left no chunk 0, and the next run given no settings re-cut the file at the
    default 256 tokens, not the 48 it was cut at. Chunk 0 now stays until the new one's
    upsert replaces it."""
    from probembed.chunking import ChunkSettings
    from probembed.store import ingest_documents
    from probembed.store.chunked import cut_at

    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "page.md"
    steps = [f"Step {i} of the routine: turn the {i}th valve slowly." for i in range(60)]
    page.write_text("# Routine\n\n" + "\n\n".join(steps) + "\n")
    db = tmp_path / "db"
    collection = Database(db, create=True).collection("docs")
    at_48 = ChunkSettings(48, 8)
    ingest_documents(docs, collection, pydoc_pipeline, at_48, stream_bytes=0)
    page.write_text(page.read_text() + "\nA last step, added.\n")  # changed: re-written
    _stream_killed_after_one_batch(db, pydoc_pipeline_dir, docs, tmp_path / "child.stderr")

    after = Database(db).open("docs")
    stored = after.document_index()["page.md"]
    assert "page.md#0" in stored.ids and cut_at(stored) == at_48
    again = ingest_documents(docs, after, pydoc_pipeline, stream_bytes=0)  # no settings
    assert (again.updated, again.rechunked) == (1, 0)
    assert cut_at(after.document_index()["page.md"]) == at_48


def test_a_new_file_killed_before_its_chunk_0_is_cut_next_at_its_folders_settings(
    tmp_path, pydoc_pipeline, pydoc_pipeline_dir
):
    """A new file whose first streamed write was killed before its chunk 0 landed was stored
    in part, so the next run given no settings took it for a stored document recording none
    and cut it at the default 256 tokens, not the 128:16 its folder shares."""
    from probembed.chunking import ChunkSettings
    from probembed.store import ingest_documents
    from probembed.store.chunked import cut_at

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "intro.md").write_text("# Intro\n\nThe valves are turned by hand.\n")
    db = tmp_path / "db"
    collection = Database(db, create=True).collection("docs")
    at_128 = ChunkSettings(128, 16)
    ingest_documents(docs, collection, pydoc_pipeline, at_128, stream_bytes=0)
    steps = [f"Step {i} of the routine: turn the {i}th valve slowly." for i in range(120)]
    (docs / "page.md").write_text("# Routine\n\n" + "\n\n".join(steps) + "\n")
    _stream_killed_after_one_batch(db, pydoc_pipeline_dir, docs, tmp_path / "child.stderr")

    after = Database(db).open("docs")
    partial = after.document_index()["page.md"]
    assert partial.ids and "page.md#0" not in partial.ids  # killed before its chunk 0
    again = ingest_documents(docs, after, pydoc_pipeline, stream_bytes=0)  # no settings
    assert (again.added, again.unchanged) == (1, 1)
    assert cut_at(after.document_index()["page.md"]) == at_128
