"""No traceback reaches a CLI user: one line that names the command and input; --debug shows it."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.pipeline import Pipeline

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def saved_pipeline(hash_pipeline, tmp_path_factory):
    return hash_pipeline.save(tmp_path_factory.mktemp("pipelines") / "hash")


@pytest.fixture(scope="module")
def damaged_pipeline(saved_pipeline, tmp_path_factory):
    """A pipeline whose encoder takes an argument it does not know: a TypeError on load."""
    directory = tmp_path_factory.mktemp("damaged") / "pipe"
    shutil.copytree(saved_pipeline, directory)
    config = json.loads((directory / "pipeline.json").read_text())
    config["models"][0]["encoder_params"] = {"bogus": 1}
    (directory / "pipeline.json").write_text(json.dumps(config))
    return directory


#: The real entry point in a child process whose pipeline loader fails as a bug would.
BROKEN_ENTRY = """
import sys
import probembed.pipeline

def broken(*args, **kwargs):
    raise RuntimeError("the encoder broke")

probembed.pipeline.Pipeline.load = broken
from probembed.interfaces import main
sys.argv = ["probembed", *sys.argv[1:]]
main()
"""


def _cli(*args, cache):
    """The real entry point in a child process, as a user runs it (with a broken loader)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROBEMBED_CACHE_DIR": str(cache)}
    command = [sys.executable, "-c", BROKEN_ENTRY, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_known_failure_is_one_line_naming_command_and_input(saved_pipeline, tmp_path):
    out = "/dev/full"  # a device written as it is: fails only when written, disk full
    args = ["encode", "--pipeline", str(saved_pipeline), "--out", out, "a big cat"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: probembed encode failed on --pipeline")
    assert out in lines[0] and "No space left on device" in lines[0]
    too_long = tmp_path / ("g" * 300 + ".npz")  # refused before any encoding, by the option
    args = ["encode", "--pipeline", str(saved_pipeline), "--out", str(too_long), "a big cat"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2
    assert refused.output.strip() == f"error: --out {too_long}: File name too long"


def test_an_unknown_encoder_parameter_names_the_file_and_model(damaged_pipeline):
    result = runner.invoke(app, ["encode", "--pipeline", str(damaged_pipeline), "a big cat"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"{damaged_pipeline / 'pipeline.json'}: models[0]:" in message and "bogus" in message


def test_an_unexpected_failure_is_one_line_with_the_exception(saved_pipeline, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the encoder broke")  # no known failure: a bug, as a user meets it

    monkeypatch.setattr("probembed.pipeline.Pipeline.load", broken)
    result = runner.invoke(app, ["encode", "--pipeline", str(saved_pipeline), "a big cat"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(
        f"error: probembed encode failed on --pipeline {saved_pipeline} 'a big cat': RuntimeError:"
    )
    assert "the encoder broke" in lines[0] and "--debug" in lines[0]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["ingest", "docs"], "probembed ingest interrupted: nothing was written"),
        (["embed", "docs", "--out", "vectors"], "probembed embed interrupted: the Parquet files "
                                                "written so far stay in --out; the same command "
                                                "resumes"),
        (["encode", "a big cat"], "probembed encode interrupted"),
    ],
)  # fmt: skip
def test_ctrl_c_is_one_line_exit_130_saying_what_is_kept(
    saved_pipeline, tmp_path, monkeypatch, command, says
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("probembed.pipeline.Pipeline.load", interrupted)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("a big cat", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    options = ["--pipeline", str(saved_pipeline)]
    if command[0] == "ingest":
        options += ["--db", str(tmp_path / "db")]
    result = runner.invoke(app, [*command, *options])
    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines() == [f"error: {says}"]


def stored(db: Path) -> int:
    """Rows committed to collection c of the database at db so far (0 before it exists)."""
    from probembed.store import Database, StoreError

    try:
        collection = Database(db).collection("c")
        return collection.count() if collection.exists else 0
    except StoreError:
        return 0


def terminated_after_a_commit(args: list[str], db: Path) -> tuple[int, str]:
    """Run `probembed ARGS` and send it SIGTERM once it has committed rows to collection c
    (more than it held): its exit status and stderr."""
    import signal
    import time

    before = stored(db)
    job = subprocess.Popen(
        [sys.executable, "-m", "probembed", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # only a guard against a hang
        while stored(db) <= before and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=120)
    finally:
        job.kill()
    return job.returncode, err


def test_sigterm_during_an_ingest_says_what_is_kept_and_ends_by_the_signal(
    saved_pipeline, tmp_path
):
    """SIGTERM ended an ingest with status 143 and not a word, where Ctrl-C says what is kept:
    now it says so too, and still ends by the signal; the batches committed stay."""
    import signal

    n = 3000  # one commit each: the signal lands long before the last (asserted below)
    source = tmp_path / "docs.jsonl"
    lines = [json.dumps({"id": f"d{i}", "text": f"document {i} of the pile"}) for i in range(n)]
    source.write_text("\n".join(lines) + "\n")
    db = tmp_path / "db"
    args = ["ingest", str(source), "--db", str(db), "-c", "c", "--pipeline", str(saved_pipeline)]

    code, err = terminated_after_a_commit([*args, "--batch-size", "1"], db)

    assert code == -signal.SIGTERM, err  # 143 in a shell
    assert 0 < stored(db) < n
    said = re.fullmatch(  # a batch a row; one LanceDB was committing may land after the count
        r"error: probembed ingest terminated \(SIGTERM\): (\d+) committed batch\(es\) are "
        r"kept(, and one it was committing may land)?; the same command resumes",
        err.strip().splitlines()[-1],
    )
    assert said is not None, err
    kept = int(said.group(1))
    assert stored(db) in ({kept, kept + 1} if said.group(2) else {kept}), err
    assert "Traceback" not in err, err


#: The real entry point in a child process whose pipeline, at the step named by its first
#: argument (`load`: the model loads; `encode`: it encodes the first batch), says "stalled"
#: and waits there: a stop then comes before the first commit.
STALLED_ENTRY = """
import sys, time
import probembed.pipeline

def stalled(*args, **kwargs):
    print("stalled", file=sys.stderr, flush=True)
    time.sleep(600)

setattr(probembed.pipeline.Pipeline, sys.argv[1], stalled)
from probembed.interfaces import main
sys.argv = ["probembed", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("step", ["load", "encode"])
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"], ids=["ctrl-c", "sigterm"])
def test_an_ingest_stopped_before_its_first_commit_says_nothing_was_written(
    saved_pipeline, tmp_path, step, signum
):
    """Ctrl-C or SIGTERM while the model loaded or the first batch was read ended with
    "committed batches are kept; the same command resumes", of batches never written (and
    SIGTERM left the new database folder behind). Now the line says nothing was written,
    and nothing of the run is left."""
    import signal

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("a big cat", encoding="utf-8")
    db = tmp_path / "db"
    args = ["ingest", tmp_path / "docs", "--db", db, "--pipeline", saved_pipeline]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROBEMBED_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-c", STALLED_ENTRY, step, *map(str, args)]
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert job.stderr is not None
        first = job.stderr.readline()  # once it waits at `step`, its handlers long set
        assert first == "stalled\n", first + job.stderr.read()
        job.send_signal(getattr(signal, signum))
        _, err = job.communicate(timeout=120)
    finally:
        job.kill()
    how = "interrupted" if signum == "SIGINT" else "terminated (SIGTERM)"
    assert job.returncode == (130 if signum == "SIGINT" else -signal.SIGTERM), err
    assert err.strip().splitlines() == [f"error: probembed ingest {how}: nothing was written"]
    assert not db.exists()  # not even its pipeline copy


def test_sigterm_during_a_chunked_sync_removes_its_undo_pin(saved_pipeline, tmp_path):
    """SIGTERM ended a chunked ingest by the signal's default action at once, so its undo pin
    (a `probembed-undo-...` tag, which holds its start version and every later one from
    every prune) stayed for a week; Ctrl-C removed it. SIGTERM now unwinds as Ctrl-C does."""
    import signal

    from probembed.store import Database

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "first.md").write_text("# First\n\nStored before the sync.\n")
    db = tmp_path / "db"
    args = ["ingest", str(docs), "--chunk", "--db", str(db), "-c", "c"]
    args += ["--pipeline", str(saved_pipeline), "--batch-size", "1"]
    assert runner.invoke(app, args).exit_code == 0  # the version the sync pins
    for i in range(400):  # a commit a chunk: the signal lands long before the last
        (docs / f"doc{i:03d}.md").write_text(f"# Doc {i}\n\nThe text of document {i}.\n")

    code, err = terminated_after_a_commit([*args, "--sync"], db)

    assert code == -signal.SIGTERM, err
    assert "error: probembed ingest terminated (SIGTERM)" in err and "Traceback" not in err
    assert 1 < stored(db) < 401
    assert Database(db).open("c")._require().tags.list() == {}


def test_ctrl_c_before_a_first_commit_leaves_nothing_but_what_another_run_wrote(
    saved_pipeline, hash_pipeline, tmp_path, monkeypatch
):
    """A first ingest stopped while the built-in pipeline loads leaves no database directory;
    one stopped while another run is writing its first batch into the same new database takes
    away only its own pipeline copy, not the other run's."""
    from probembed.interfaces import ingest_commands
    from probembed.store import DEFAULT_COLLECTION, Database

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "a big cat"}\n')
    with monkeypatch.context() as patched:
        patched.setattr(ingest_commands, "load_pipeline", interrupted)
        loading = runner.invoke(app, ["ingest", str(tmp_path / "a.jsonl"), "--db", "one"])
    assert loading.exit_code == 130 and not (tmp_path / "one").exists()

    def another_run_starts(source, target, pipe, *args, **kwargs):
        target.record_pipeline(pipe)  # as ingest does before its first commit
        Database(tmp_path / "two").collection("theirs").record_pipeline(hash_pipeline)
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest_commands, "ingest_and_report", another_run_starts)
    args = ["ingest", str(tmp_path / "a.jsonl"), "--db", "two", "--pipeline", str(saved_pipeline)]
    assert runner.invoke(app, args).exit_code == 130
    database = Database(tmp_path / "two")
    assert (database.collection("theirs").pipeline_dir / "pipeline.json").is_file()
    assert not database.collection(DEFAULT_COLLECTION).pipeline_dir.exists()


def test_a_failure_message_never_shows_a_storage_option_value(tmp_path, monkeypatch):
    """Storage options carry credentials: the command line a failure repeats hides them."""

    def broken(*args, **kwargs):
        raise ConnectionError("could not reach the cluster")

    monkeypatch.setattr("probembed.interfaces.collection_commands.open_database", broken)
    result = runner.invoke(
        app,
        ["collections", "--db", "s3://bucket/db", "--storage-option",
         "aws_secret_access_key=SUPERSECRET123", "--storage-option=aws_session_token=TOKEN456"],
    )  # fmt: skip
    assert result.exit_code in (1, 2) and "could not reach the cluster" in result.output
    assert "SUPERSECRET123" not in result.output and "TOKEN456" not in result.output
    assert "aws_secret_access_key=***" in result.output


def test_a_failing_subcommand_of_a_group_is_named_in_full(monkeypatch):
    monkeypatch.setenv("PROBEMBED_CACHE_MAX_BYTES", "-5")
    result = runner.invoke(app, ["cache", "info"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: probembed cache info failed: $PROBEMBED_CACHE_MAX")


def test_the_entry_point_prints_no_traceback_and_debug_shows_it(saved_pipeline, tmp_path):
    plain = _cli("encode", "--pipeline", saved_pipeline, "a big cat", cache=tmp_path)
    assert plain.returncode == 1
    assert "Traceback" not in plain.stderr
    assert [line for line in plain.stderr.splitlines() if line.startswith("error:")] == [
        plain.stderr.strip().splitlines()[-1]
    ]
    debug = _cli("--debug", "encode", "--pipeline", saved_pipeline, "a big cat", cache=tmp_path)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "RuntimeError: the encoder broke" in debug.stderr


def test_error_messages_keep_brackets_in_paths_literal(tmp_path):
    missing = tmp_path / "[test]" / "db"  # rich would read "[test]" as a style and drop it
    result = runner.invoke(app, ["search", "a question", "--db", str(missing)])
    assert result.exit_code == 2
    assert f"no database at {missing}" in "".join(result.output.split("\n"))
    said = " ".join(result.output.split())  # the Python API's fix is no command's
    assert "(`probembed ingest PATH --db DIR` makes one)" in said and "create=True" not in said


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["absent.jsonl"], "no documents at absent.jsonl"),
        (["docs.jsonl", "--pipeline", "no-such-pipeline"], "no pipeline 'no-such-pipeline'"),
        (["docs.jsonl", "--sync", "--upsert"], "--upsert is implied by --sync"),
        (["docs.jsonl", "--batch-size", "0"], "--batch-size"),
        (["docs.jsonl", "--chunk", "--overlap", "-1"], "--overlap must be in [0,"),
        (["docs.jsonl", "--collection", "bad name"], "invalid collection name 'bad name'"),
    ],
)
def test_a_refused_ingest_creates_no_database(tmp_path, monkeypatch, args, says):
    """A run refused for its input or options leaves no empty database behind."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "some text"}\n')
    result = runner.invoke(app, ["ingest", *args, "--db", "made.db"])
    assert result.exit_code == 2 and says in result.output, result.output
    assert not (tmp_path / "made.db").exists()


@pytest.mark.parametrize("command", [["ingest", "docs.jsonl"], ["collections"], ["serve"]])
def test_a_db_uri_of_no_store_is_refused_by_the_option(tmp_path, monkeypatch, command):
    """`--db s3a://b/x` made ./s3a:/b/x before LanceDB's raw "No object store provider"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "some text"}\n')
    result = runner.invoke(app, [*command, "--db", "s3a://b/x"])
    assert result.exit_code == 2 and "--db: database URI 's3a://b/x'" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]


@pytest.mark.parametrize("command", [["ingest", "docs.jsonl"], ["collections"], ["serve"]])
def test_an_empty_db_is_refused_not_taken_for_the_current_directory(tmp_path, monkeypatch, command):
    """`--db "$DB"` with DB unset wrote default.lance/ and .probembed/ into the working
    directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "some text"}\n')
    result = runner.invoke(app, [*command, "--db", ""])
    assert result.exit_code == 2 and "--db is empty (an unset variable?)" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]


def test_an_ingest_whose_input_fails_the_checks_leaves_no_empty_database(
    tmp_path, monkeypatch, saved_pipeline
):
    """Bad lines stop the run before any write: the database it made for them goes too; one
    that was there before stays."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "text": "fine"}\n{"id": "b"}\n')
    args = ["ingest", "bad.jsonl", "--pipeline", str(saved_pipeline), "--db", "made.db"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "bad input item" in result.output, result.output
    assert not (tmp_path / "made.db").exists()
    (tmp_path / "made.db").mkdir()
    assert runner.invoke(app, args).exit_code == 2 and (tmp_path / "made.db").is_dir()


@pytest.mark.parametrize(
    "command",
    [
        ["ingest", "bad.jsonl", "--db", "made.db"],
        ["ingest", "bad.jsonl", "--db", "made.db", "--pipeline", "default"],
        ["embed", "bad.jsonl", "--out", "parts"],
    ],
)
def test_bad_input_is_refused_before_a_model_loads(tmp_path, monkeypatch, command):
    """Loading a built-in takes seconds: a malformed line was reported only after it. A loader
    that breaks if called shows that the input is checked first."""

    def broken(*args, **kwargs):
        raise RuntimeError("the pipeline was loaded")

    monkeypatch.setattr(Pipeline, "load", broken)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "text": "fine"}\n{"id": "b"\n')
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "1 bad input item(s); nothing was written" in said
    assert "(fix them, or pass --on-error skip to skip them)" in said  # not on_error='skip'
    assert "bad.jsonl:2: malformed JSON" in said
    assert not (tmp_path / "made.db").exists() and not (tmp_path / "parts").exists()


@pytest.mark.parametrize(
    ("command", "source", "said"),
    [
        (["ingest", "--db", "made.db"], "empty.jsonl", "empty.jsonl holds no records: it is empty"),
        (["ingest", "--db", "made.db", "--chunk"], "empty.jsonl", "empty.jsonl holds no records"),
        (["embed", "--out", "made.db"], "empty.jsonl", "empty.jsonl holds no records: it is empty"),
        (["embed", "--out", "made.db", "--chunk"], "empty.jsonl", "empty.jsonl holds no records"),
        (["ingest", "--db", "made.db", "--chunk"], "blank.md", "blank.md holds no text to index"),
        (["ingest", "--db", "made.db", "--chunk"], "blanks", "blanks holds no text to index"),
    ],
)
def test_an_empty_input_is_refused_naming_it(
    tmp_path, monkeypatch, saved_pipeline, command, source, said
):
    """An empty file (a failed export, a wrong name) is most often a mistake: ingest exited 0
    saying "nothing stored", embed left an empty --out folder, and chunked ingest of a file
    or folder of no text did the same. Each is refused naming it, exit 2, nothing left."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    (tmp_path / "blank.md").write_text(" \u200b\n")
    (tmp_path / "blanks").mkdir()
    (tmp_path / "blanks" / "a.md").write_text("")
    (tmp_path / "blanks" / "b.txt").write_text("\n\n")
    args = [command[0], source, *command[1:], "--pipeline", str(saved_pipeline)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()).startswith(f"error: {said}"), result.output
    assert not (tmp_path / "made.db").exists()  # no database, collection or --out folder


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["ingest"], "[default: the one that made the"),
        (["ingest"], "[default: env PROBEMBED_DB"),
        (["ingest"], "Tokens per chunk, at most [default: 256]"),
        (["ingest"], "[default: 32, or the most under half a smaller size]"),
        (["embed"], "Tokens per chunk, at most [default: 256]"),
        (["serve"], "File of 'KEY [read,write,metrics]' lines [default: env"),
        (["serve"], "[default: one per core, at most 4]"),
    ],
)
def test_help_shows_the_bracketed_defaults_rich_would_take_for_markup(command, says):
    """rich reads "[default: ...]" as a markup tag and drops it unless escaped."""
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
    assert shown.exit_code == 0 and says in " ".join(shown.stdout.split()), shown.stdout


@pytest.mark.parametrize("command", ["ingest", "embed"])
@pytest.mark.parametrize(
    "option", [["--workers", "3"], ["--cpus-per-worker", "2"], ["--address", "x:1"]]
)
def test_a_ray_option_without_ray_is_refused_before_anything_is_read(tmp_path, command, option):
    """`--workers 3` without `--ray` was ignored without a word."""
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "some text"}\n')
    out = ["--db", str(tmp_path / "db")] if command == "ingest" else ["--out", str(tmp_path / "o")]
    result = runner.invoke(app, [command, str(source), *out, *option])
    assert result.exit_code == 2 and f"{option[0]} needs --ray" in result.output, result.output
    assert not (tmp_path / "db").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--on-error", "maybe"], "--on-error must be skip or stop, got 'maybe'"),
        (["--chunk", "--chunk-tokens", "4"], "--chunk-tokens must be at least 8, got 4"),
        (["--chunk", "--overlap", "500"], "--overlap must be in [0, --chunk-tokens / 2), got 500"),
        (["--ray", "--workers", "0"], "--workers must be a positive integer, got 0"),
        (["--chunk-tokens", "64"], "--chunk-tokens and --overlap need --chunk"),  # were ignored
        (["--overlap", "8"], "--chunk-tokens and --overlap need --chunk"),
    ],
)
def test_ingest_options_are_named_in_their_refusals(tmp_path, options, said):
    """They named the library's parameters (on_error, max_tokens), not the options."""
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "some text"}\n')
    result = runner.invoke(app, ["ingest", str(source), "--db", str(tmp_path / "db"), *options])
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    assert not (tmp_path / "db").exists()


def test_search_refusals_name_the_options_not_the_librarys_parameters(tmp_path, saved_pipeline):
    """They said `group_by_doc needs chunked documents` and `invalid filter where=...`; the
    first names the CLI's way to chunk, not the Python API's. A value the shell took the
    single quotes of was only `no field soon`."""
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "some text", "year": 2020}\n')
    db = ["--db", str(tmp_path / "db")]
    assert runner.invoke(app, ["ingest", str(source), *db, "--pipeline", str(saved_pipeline)])
    for option, said in [
        (["--group-by-doc"], "--group-by-doc needs chunked documents"),
        (
            ["--group-by-doc"],
            "(`probembed ingest --chunk`) into another collection, or search without "
            "--group-by-doc",
        ),
        (["--where", "year >"], "invalid filter --where 'year >'"),
        (["--where", "year > 'a'"], "year holds int64, and 'a' is a string: compare it with"),
        (  # a field's name is the user's: kept as typed, in the quote and after it
            ["--where", "group_by_doc = 1"],
            "invalid filter --where 'group_by_doc = 1': no field group_by_doc; filters can name id",
        ),
        (  # `--where year=Soon` as the shell passes `--where year='Soon'`: a bare word
            ["--where", "year=Soon"],
            'no field "Soon"; filters can name id, text, year and metadata (each item\'s '
            "metadata as JSON text); a string takes single quotes in SQL: 'Soon'",
        ),
    ]:
        result = runner.invoke(app, ["search", "text", *db, *option])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


def test_a_refused_filter_lists_metadata_and_refuses_lancedbs_row_ids(tmp_path, saved_pipeline):
    """`--where "nosuch > 3"` listed `id, text, year` though `metadata LIKE` works, and
    `--where "_rowid > 3"` searched, deleted and erased by LanceDB's row ids."""
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(f'{{"id": "d{i}", "text": "text {i}", "year": {i}}}\n' for i in range(5))
    )
    db = ["--db", str(tmp_path / "db")]
    assert runner.invoke(app, ["ingest", str(source), *db, "--pipeline", str(saved_pipeline)])
    result = runner.invoke(app, ["search", "text", *db, "--where", "nosuch > 3"])
    said = "no field nosuch; filters can name id, text, year and metadata (each item's metadata"
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    for command in (["search", "text"], ["delete"], ["erase", "--yes"]):
        result = runner.invoke(app, [*command, *db, "--where", "_rowid > 3"])
        said = "invalid filter --where '_rowid > 3': no field _rowid: it is one of LanceDB's"
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
    listed = runner.invoke(app, ["search", "text", *db, "-k", "10", "--json"])
    assert len(json.loads(listed.stdout)[0]["hits"]) == 5  # nothing was deleted


def test_a_blank_text_or_a_port_out_of_range_is_named_by_its_option():
    """inspect said `argument 1 ('') is blank` of `--text ""`; serve `port must be in ...`."""
    result = runner.invoke(app, ["inspect", "--text", "a cat", "--text", " "])
    assert result.exit_code == 2 and "--text 2 (' ') is blank" in result.output, result.output
    result = runner.invoke(app, ["serve", "--port", "99999"])
    assert result.exit_code == 2 and "'--port'" in result.output, result.output


def test_embed_checks_its_input_and_out_before_loading_a_pipeline(tmp_path):
    """Both were refused only after the pipeline had loaded (about 9 s for the built-in); so
    are its chunk options, as ingest's are."""
    used = tmp_path / "used"
    used.mkdir()
    (used / "part.parquet").write_text("x")
    source = tmp_path / "docs.jsonl"
    source.write_text('{"_id": "a", "text": "some text"}\n')
    unloadable = ["--pipeline", str(tmp_path / "no-such-pipeline")]
    out = ["--out", str(tmp_path / "o")]
    for args, said in (
        ([str(tmp_path / "nosuch.jsonl"), *out], "no documents at"),
        ([str(source), "--out", str(used)], "holds 'part.parquet', which probembed embed does not"),
        ([str(source), *out, "--chunk-tokens", "64"], "--chunk-tokens and --overlap need --chunk"),
        ([str(source), *out, "--chunk", "--overlap", "500"], "--overlap must be in [0, "),
    ):
        result = runner.invoke(app, ["embed", *args, *unloadable])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


def test_a_library_warning_is_one_plain_line_and_numbas_compile_note_is_not_shown(capsys):
    """A first `eval` on a machine printed numba's note on compiling ranx's metrics, with its
    colour codes shown as text: `warning: \\x1b[1m\\x1b[1munsafe cast from uint64 to int64`."""
    import warnings

    from probembed.interfaces.console import warnings_as_lines

    bold, plain = "\x1b[1m", "\x1b[0m"
    with warnings_as_lines():
        note = f"{bold}{bold}unsafe cast from uint64 to int64. Precision may be lost."
        warnings.warn(note, stacklevel=1)
        warnings.warn(f"{bold}a library's own warning{plain}", stacklevel=1)
    said = capsys.readouterr().err
    assert said.strip() == "warning: a library's own warning"


def test_a_threshold_without_a_calibrator_is_told_in_options(tmp_path, saved_pipeline):
    """The refusal ended "search without min_p_relevant", a Python parameter."""
    records = tmp_path / "r.jsonl"
    records.write_text('{"id": "a", "text": "a text about rivers"}\n')
    db = ["--db", str(tmp_path / "db")]
    made = runner.invoke(app, ["ingest", str(records), *db, "--pipeline", str(saved_pipeline)])
    assert made.exit_code == 0, made.output
    refused = runner.invoke(app, ["search", "rivers", *db, "--min-p-relevant", "0.5"])
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2 and said.startswith("error: --min-p-relevant needs p_relevant")
    assert said.endswith("search without --min-p-relevant"), said


def test_a_sync_that_would_empty_the_collection_is_told_in_commands(tmp_path, saved_pipeline):
    """The refusal the library gives (and the service sends) names the CLI's own way out
    here only: --sync, --prefix, delete --doc and drop."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nRivers run.")
    (docs / "sub" / "b.md").write_text("# B\n\nHills stand.")
    db = ["--db", str(tmp_path / "db"), "--pipeline", str(saved_pipeline), "--chunk"]
    made = runner.invoke(app, ["ingest", str(docs), *db])
    assert made.exit_code == 0, made.output
    (docs / "sub" / "b.md").unlink()
    (docs / "sub" / "c.md").write_text("# C\n\nLakes lie.")
    refused = runner.invoke(app, ["ingest", str(docs / "sub"), *db, "--sync"])
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2 and "sync would remove all 2 document(s)" in said, said
    assert "Leave out --sync" in said
    assert "or sync this folder under a prefix of its own (--prefix NAME/)" in said
    assert "(probembed delete --doc ID, or probembed drop)" in said


def test_a_chunk_id_given_as_a_document_is_told_its_stored_document(tmp_path, saved_pipeline):
    """A corpus exported as chunks names its documents in doc_id, not in its ids: the hint
    said "its document is ''" for an id without '#'."""
    records = tmp_path / "r.jsonl"
    rows = [{"id": f"p{i}", "text": f"passage {i} on rivers", "doc_id": "d1"} for i in range(3)]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = ["--db", str(tmp_path / "db")]
    made = runner.invoke(app, ["ingest", str(records), *db, "--pipeline", str(saved_pipeline)])
    assert made.exit_code == 0, made.output
    told = runner.invoke(app, ["delete", "--doc", "p1", *db])
    said = " ".join(told.output.split())
    assert told.exit_code == 1 and "e.g. 'p1': without --doc it deletes that chunk" in said
    assert "its document is 'd1')" in said, said


def test_a_text_file_of_no_suffix_is_refused_as_no_json_lines(tmp_path, saved_pipeline):
    """A file of no suffix is read as JSON lines: `ingest README` gave one "malformed JSON
    (Expecting value at character 1)" per line of the text. It is refused naming what the
    file would need; records of no suffix are still read."""
    (tmp_path / "README").write_text("This is my readme.\nIt has lines.\n\nMore here.\n")
    (tmp_path / "RECORDS").write_text('{"id": "a", "text": "a text about rivers"}\n')
    db = ["--db", str(tmp_path / "db"), "--pipeline", str(saved_pipeline)]
    refused = runner.invoke(app, ["ingest", str(tmp_path / "README"), *db])
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2, refused.output
    assert said.startswith(f"error: {tmp_path / 'README'} has no suffix, so it is read as JSON")
    assert "a text document needs a .txt or .md name" in said and "malformed" not in said
    assert runner.invoke(app, ["ingest", str(tmp_path / "RECORDS"), *db]).exit_code == 0


@pytest.mark.parametrize(
    "command",
    [["ingest", "--db", "made"], ["ingest", "--db", "made", "--chunk"], ["embed", "--out", "made"]],
)
def test_a_run_whose_every_item_is_skipped_fails_and_leaves_nothing(
    tmp_path, monkeypatch, saved_pipeline, command
):
    """With --on-error skip and no good item, ingest exited 0 ("nothing stored") and embed
    left an empty --out folder, exit 0: a cron job saw success. Each now fails (as `demo`
    does), after naming each skipped item, and leaves no database or folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n{"id": "b", "txt": "typo"}\n')
    args = [command[0], "bad.jsonl", *command[1:], "--on-error", "skip"]
    result = runner.invoke(app, [*args, "--pipeline", str(saved_pipeline)])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "skipped: bad.jsonl:2: document 'b' has no 'text' field" in said
    verb = "written" if command[0] == "embed" else "stored"
    assert f"error: nothing {verb} from bad.jsonl:" in said, said
    assert not (tmp_path / "made").exists()


@pytest.mark.parametrize("chunk", [[], ["--chunk"]], ids=["records", "chunked"])
def test_a_run_whose_every_item_is_skipped_fails_into_a_collection_that_exists(
    tmp_path, monkeypatch, saved_pipeline, chunk
):
    """Into a collection that already held items, a run of only bad items under --on-error
    skip exited 0 (only a run that would have made the collection failed): it now fails the
    same way, and the collection keeps what it held."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.jsonl").write_text('{"id": "g", "text": "a good text"}\n')
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n{"id": "b", "txt": "typo"}\n')
    given = [*chunk, "--pipeline", str(saved_pipeline), "--db", "db"]
    assert runner.invoke(app, ["ingest", "good.jsonl", *given]).exit_code == 0
    result = runner.invoke(app, ["ingest", "bad.jsonl", *given, "--on-error", "skip"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "error: nothing stored from bad.jsonl: no item was fit to store" in said, said
    assert "is as it was (1 item(s))" in said, said
    again = runner.invoke(app, ["ingest", "good.jsonl", *given, "--on-error", "skip"])
    assert again.exit_code == 0, again.output  # nothing new, nothing bad: no failure
