"""Durability: an ingest killed with SIGKILL loses nothing it committed and resumes cleanly."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from probembed.store import Database, ingest

N_DOCS = 4000
BATCH = 20

CHILD = textwrap.dedent(
    """
    import sys
    from probembed.pipeline import Pipeline
    from probembed.store import Database, ingest
    pipe = Pipeline.load(sys.argv[2], cache=False)
    collection = Database(sys.argv[1], create=True).collection("docs")
    ingest(sys.argv[3], collection, pipe, batch_size=int(sys.argv[4]))
    print("finished")
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
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    committed = _wait_for_rows(child, db_path, at_least=10 * BATCH)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, "the child finished before it could be killed"

    collection = Database(db_path).open("docs")
    ids = collection.ids()
    assert committed <= len(ids) < N_DOCS
    assert collection.count() == len(ids)  # no duplicates, no torn rows
    by_id = {d["id"]: d for d in docs}
    rows = collection.rows(sorted(ids), ("text", "mean"))
    sample = sorted(ids)[:: max(1, len(ids) // 50)]
    fused = hash_pipeline.encode([by_id[i]["text"] for i in sample])
    for j, doc_id in enumerate(sample):
        assert rows[doc_id]["text"] == by_id[doc_id]["text"]
        np.testing.assert_allclose(rows[doc_id]["mean"], fused.gaussian.mean[j], rtol=1e-6)
    probe = by_id[sample[-1]]["text"]
    assert collection.search(probe, k=1, exact=True)["hits"][0]["id"] == sample[-1]

    report = ingest(source, collection, hash_pipeline, batch_size=500)
    assert report.already_stored == len(ids)
    assert report.added == N_DOCS - len(ids)
    assert collection.count() == N_DOCS == len(collection.ids())


def _wait_for_rows(child: subprocess.Popen, db_path, at_least: int, timeout: float = 60) -> int:
    """Poll the collection until the child has committed enough rows; return the count seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
        if db_path.is_dir():
            db = Database(db_path)
            if "docs" in db.collections():
                count = db.open("docs").count()
                if count >= at_least:
                    return count
        time.sleep(0.02)
    child.kill()
    pytest.fail("the child committed too few rows in time")
