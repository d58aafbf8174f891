"""The command line under a script's pipes: a reader of its logs or of its output that goes
away, a full disk for stdout, each command a process of its own; and `-` read from stdin,
in this process (`invoke`: nothing of a process's pipes is at stake there)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from typer.testing import CliRunner

from probembed.interfaces.cli import app

DATA = Path(__file__).parent / "data"

#: probembed's CLI with a progress line at every advance (LINE_SECONDS = 0), so a log reader
#: that takes one line and goes meets the next one mid-ingest.
CHATTY = (
    "import sys; from probembed import progress; progress.LINE_SECONDS = 0.0; "
    "from probembed.interfaces.cli import app; sys.argv[0] = 'probembed'; app()"
)


def environment(unbuffered: bool) -> dict[str, str]:
    """This environment with Python's output buffered (a script's default) or not
    (PYTHONUNBUFFERED=1, common in containers): a write fails at once, or at a flush."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return env | {"PYTHONUNBUFFERED": "1"} if unbuffered else env


def probembed(*args: str, unbuffered: bool = False, **options) -> subprocess.Popen:
    """The command started as a process of its own, stdout and stderr piped unless given."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    options["env"] = environment(unbuffered)
    return subprocess.Popen([sys.executable, "-m", "probembed", *args], **options)


def stored(db: Path, collection: str) -> int:
    """How many items a collection holds, as another process reads it."""
    from probembed.store import Database

    return Database(db).open(collection).count()


@pytest.fixture
def rows(tmp_path) -> Path:
    """2,000 records: ten batches of 200."""
    path = tmp_path / "rows.jsonl"
    with path.open("w") as handle:
        for i in range(2000):
            handle.write(json.dumps({"id": str(i), "text": f"row {i} on topic {i % 37}"}) + "\n")
    return path


@pytest.mark.parametrize("unbuffered", [True, False])
def test_an_ingest_whose_log_reader_goes_finishes_and_exits_by_its_outcome(
    rows, tmp_path, pydoc_pipeline_dir, unbuffered
):
    """`ingest ... 2>&1 | head -1` stopped at the next progress line with part of the rows
    stored, exit 0: the broken pipe was taken for a reader of its output that had enough
    (buffered, it exited 120 as it happened)."""
    db = tmp_path / "db"
    args = ["ingest", str(rows), "-c", "c", "--batch-size", "200", "--db", str(db)]
    child = subprocess.Popen(
        [sys.executable, "-c", CHATTY, *args, "--pipeline", str(pydoc_pipeline_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # 2>&1
        env=environment(unbuffered),
    )
    assert child.stdout.readline().startswith(b"ingest c: ")
    child.stdout.close()  # as `head -1` does
    assert child.wait(timeout=300) == 0
    assert stored(db, "c") == 2000


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_ingest_whose_log_is_on_a_full_disk_finishes(rows, tmp_path, pydoc_pipeline_dir):
    """Its first progress line's OSError (no space left) stopped it: a log that cannot be
    written is dropped as one whose reader went is."""
    db = tmp_path / "db"
    args = ["ingest", str(rows), "-c", "c", "--batch-size", "200", "--db", str(db)]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-c", CHATTY, *args, "--pipeline", str(pydoc_pipeline_dir)],
            stdout=subprocess.PIPE,
            stderr=full,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0
    assert stored(db, "c") == 2000


def test_an_ingest_whose_log_reader_goes_still_fails_by_its_outcome(tmp_path):
    """With its logs gone a failed write still exits non-zero (here: a source that is
    refused), saying nothing."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1"}\n')  # no text
    child = probembed("ingest", str(bad), "--db", str(tmp_path / "db"), stderr=subprocess.STDOUT)
    child.stdout.close()  # gone before a word is written
    assert child.wait(timeout=300) == 2


def test_eval_writes_its_json_though_the_reader_of_its_table_has_gone(tmp_path, pydoc_pipeline_dir):
    """`eval --json rows.json | head -3` ended at the table, exit 0, rows.json never written:
    its stdout was a report, the file its product."""
    out = tmp_path / "rows.json"
    args = ["eval", str(DATA / "sts" / "toy"), "--pipeline", str(pydoc_pipeline_dir)]
    child = probembed(*args, "--json", str(out))
    child.stdout.close()
    _, said = child.communicate(timeout=300)
    assert child.returncode == 0, said.decode()
    assert json.loads(out.read_text())["rows"][0]["metric"] == "spearman"


@pytest.mark.parametrize("unbuffered", [True, False])
@pytest.mark.parametrize("command", [["collections", "--json"], ["similarity", "a", "b", "--json"]])
def test_small_json_into_a_reader_that_has_gone_exits_0(
    command, unbuffered, tmp_path, pydoc_pipeline_dir
):
    """Written after the command returned, at the interpreter's exit: `Exception ignored ...
    BrokenPipeError` and status 120 for `probembed collections --json | true`."""
    if command[0] == "similarity":
        command = [*command, "--pipeline", str(pydoc_pipeline_dir)]
    else:
        command = [*command, "--db", str(tmp_path)]
    child = probembed(*command, unbuffered=unbuffered)
    child.stdout.close()  # gone before the JSON is written
    _, said = child.communicate(timeout=300)
    assert child.returncode == 0, said.decode()
    assert "Exception ignored" not in said.decode() and "Traceback" not in said.decode()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [True, False])
@pytest.mark.parametrize("command", [["collections", "--json"], ["similarity", "a", "b", "--json"]])
def test_output_to_a_full_disk_is_a_clear_error(command, unbuffered, tmp_path, pydoc_pipeline_dir):
    """`> /dev/full` was `Exception ignored ... OSError` and status 120, or the bare errno."""
    if command[0] == "similarity":
        command = [*command, "--pipeline", str(pydoc_pipeline_dir)]
    else:
        command = [*command, "--db", str(tmp_path)]
    with open("/dev/full", "w") as full:
        child = probembed(*command, unbuffered=unbuffered, stdout=full)
        _, said = child.communicate(timeout=300)
    message = said.decode()
    assert child.returncode == 2, message
    assert "cannot write to stdout: No space left on device" in message
    assert "Traceback" not in message and "Exception ignored" not in message


def test_a_broken_pipe_that_is_not_stdouts_is_a_failure(tmp_path, pydoc_pipeline_dir):
    """Every BrokenPipeError was `| head` having what it wanted, exit 0: one from a connection
    (an object store's, a Ray head's) too, with nothing said."""
    failing = (
        "import sys; from probembed import pipeline; "
        "pipeline.Pipeline.load = lambda *a, **k: (_ for _ in ()).throw("
        "BrokenPipeError(32, 'connection to the object store lost')); "
        "from probembed.interfaces.cli import app; sys.argv[0] = 'probembed'; app()"
    )
    done = subprocess.run(
        [sys.executable, "-c", failing, "encode", "one", "--pipeline", str(pydoc_pipeline_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "connection to the object store lost" in done.stderr


def invoke(*args: str, stdin: str = "") -> Result:
    """The command run to its end in this process, `stdin` as its standard input: it reads
    `sys.stdin` as it reads a pipe, and a process of its own cost 2-4 s of imports a test."""
    return CliRunner().invoke(app, list(args), input=stdin)


@pytest.mark.parametrize(
    "command", [["ingest", "-", "--db", "db"], ["embed", "-", "--out", "vectors"]]
)
def test_a_source_of_dash_is_told_that_stdin_is_not_read(command, tmp_path, monkeypatch):
    """`ingest -` said "no documents at -: no such file or folder"."""
    monkeypatch.chdir(tmp_path)
    done = invoke(*command, stdin='{"id": "1", "text": "one"}\n')
    assert done.exit_code == 2
    message = " ".join(done.stderr.split())
    assert "- (stdin) is not read as a source" in message
    assert "write the records to a file (`> rows.jsonl`) and give its path" in message
    assert list(tmp_path.iterdir()) == []


def test_encode_file_dash_reads_stdin_and_counts_the_blank_lines_it_skips(
    tmp_path, pydoc_pipeline_dir
):
    """`--file -` looked for a file named `-`; blank lines were dropped without a word."""
    out = tmp_path / "v.npz"
    args = ("encode", "--pipeline", str(pydoc_pipeline_dir), "--file", "-", "--out", str(out))
    done = invoke(*args, stdin="one\n\ntwo\n \t\nthree\n")
    assert done.exit_code == 0, done.stderr
    assert f"wrote 3 Gaussians of dimension 112 to {out} (2 blank line(s) skipped)" in " ".join(
        done.stderr.split()
    )
    with np.load(out) as data:
        assert data["texts"].tolist() == ["one", "two", "three"]


@pytest.fixture
def small_collection(tmp_path, pydoc_pipeline) -> Path:
    """A database with collection `c` of four items, one of them with the id `-`."""
    from probembed.store import Database, ingest

    db = tmp_path / "db"
    records = [{"id": i, "text": f"text {n}"} for n, i in enumerate(["a", "b", "c", "-"])]
    ingest(records, Database(db, create=True).collection("c"), pydoc_pipeline)
    return db


def test_search_file_dash_reads_the_questions_from_stdin(small_collection):
    """`search --file -` looked for a file named `-`."""
    args = ("search", "--db", str(small_collection), "-c", "c", "--file", "-", "--json")
    done = invoke(*args, stdin="text 1\n\ntext 2\n")
    assert done.exit_code == 0, done.stderr
    assert [result["query"] for result in json.loads(done.stdout)] == ["text 1", "text 2"]


def test_delete_dash_reads_the_ids_from_stdin(small_collection):
    """`delete -` deleted the id `-`, where encode and search read `-` as stdin; that id is
    deleted by giving it on stdin, beside others (blank lines skipped)."""
    from probembed.store import Database

    done = invoke("delete", "--db", str(small_collection), "-c", "c", "-", stdin="a\n\nb\n-\n")
    assert done.exit_code == 0, done.stderr
    assert "deleted 3 item(s)" in done.stderr
    collection = Database(small_collection).open("c")
    assert sorted(collection.existing(["a", "b", "c", "-"])) == ["c"]
