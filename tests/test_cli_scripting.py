"""The CLI as a script or a cron job runs it: results a program reads, exit codes, no TTY."""

import fcntl
import json
import os
import pty
import re
import socket
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.interfaces.console import PIPED_WIDTH
from probembed.interfaces.store_options import BUSY_EXIT
from probembed.service.schemas import DeleteReport, WriteReport

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
#: The real entry point, as a shell script runs it.
PROBEMBED = [sys.executable, "-m", "probembed"]


@pytest.fixture(scope="module")
def saved_pipeline(hash_pipeline, tmp_path_factory) -> Path:
    return hash_pipeline.save(tmp_path_factory.mktemp("pipelines") / "hash")


def _rows(path: Path, n: int, bad: bool = False) -> Path:
    """A JSONL file of `n` records (and one without a text, with `bad`)."""
    lines = [
        json.dumps({"id": f"d{i}", "text": f"document {i} is about topic {i}"}) for i in range(n)
    ]
    path.write_text("\n".join(lines + (['{"id": "nothing"}'] if bad else [])) + "\n")
    return path


def _ran(*args: str) -> tuple[int, dict, str]:
    """Exit code, the one JSON object on stdout, and stderr of a command run with --json."""
    result = runner.invoke(app, [*args, "--json"])
    assert result.stdout.count("\n") == 1, (result.stdout, result.stderr)
    return result.exit_code, json.loads(result.stdout), result.stderr


def test_ingest_json_is_the_report_under_the_names_the_service_answers_with(
    tmp_path, saved_pipeline
):
    """A cron job had only prose on stderr ("added 0, updated 3, ...") to tell a no-op run
    from one that did work."""
    db = ["--db", str(tmp_path / "db"), "-c", "c"]
    source = _rows(tmp_path / "rows.jsonl", 5)
    code, made, said = _ran("ingest", str(source), *db, "--pipeline", str(saved_pipeline))
    assert code == 0 and made["added"] == 5 and made["count"] == 5 and made["collection"] == "c"
    assert "added 5" not in said  # the summary is the JSON now, not said twice
    _rows(source, 3)
    code, synced, _ = _ran("ingest", str(source), *db, "--sync")
    assert code == 0 and (synced["added"], synced["unchanged"], synced["removed"]) == (0, 3, 2)
    assert synced["count"] == 3 and synced["skipped"] == [] and synced["source"] == str(source)
    # every key is the service's write answer's, but the source, which it does not echo
    assert set(synced) - {"source"} <= set(WriteReport.model_fields)
    code, chunked, _ = _ran(
        "ingest", str(source), "--db", str(tmp_path / "db"), "-c", "k", "--chunk"
    )
    assert code == 0 and chunked["added"] == 3 and chunked["chunks_written"] == 3
    assert set(chunked) - {"source", "relocated"} <= set(WriteReport.model_fields)


def test_quiet_ingest_says_only_warnings(tmp_path, saved_pipeline):
    """`ingest --sync` mailed two lines from cron on every run that changed nothing."""
    db = ["--db", str(tmp_path / "db"), "-c", "c", "--pipeline", str(saved_pipeline)]
    source = _rows(tmp_path / "rows.jsonl", 4)
    assert runner.invoke(app, ["ingest", str(source), *db]).exit_code == 0
    again = runner.invoke(app, ["ingest", str(source), *db, "--sync", "-q"])
    assert again.exit_code == 0 and again.stderr == "" and again.stdout == ""
    loud = runner.invoke(app, ["ingest", str(source), *db, "--sync"])
    assert "unchanged 4" in loud.stderr  # what -q leaves out
    _rows(source, 4, bad=True)
    skipping = runner.invoke(app, ["ingest", str(source), *db, "--on-error", "skip", "--quiet"])
    assert skipping.exit_code == 0 and skipping.stdout == ""
    assert skipping.stderr.startswith("skipped: ") and skipping.stderr.count("\n") == 1


def test_delete_and_drop_json_are_the_services_delete_answers(tmp_path, saved_pipeline):
    db = ["--db", str(tmp_path / "db")]
    source = _rows(tmp_path / "rows.jsonl", 4)
    made = runner.invoke(
        app, ["ingest", str(source), *db, "-c", "c", "--pipeline", str(saved_pipeline)]
    )
    assert made.exit_code == 0, made.output
    code, deleted, said = _ran("delete", "d1", "d2", "gone", *db, "-c", "c")
    assert code == 1 and said == ""  # some ids were not there: exit 1 as without --json
    assert deleted == {
        "collection": "c",
        "deleted": 2,
        "count": 2,
        "not_found": 1,
        "not_found_ids": ["gone"],
    }
    assert set(deleted) - {"not_found_ids"} <= set(DeleteReport.model_fields)
    code, dropped, _ = _ran("drop", "c", *db, "--yes")
    assert code == 0 and dropped == {"collection": "c", "deleted": 2, "count": 0}


def _collections(db: Path) -> list[str]:
    """The collections `db` holds, read by another process's CLI as a script would."""
    listed = subprocess.run(
        [*PROBEMBED, "collections", "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [c["name"] for c in json.loads(listed.stdout)]


def test_drop_without_yes_reads_nothing_from_a_pipe_and_refuses(tmp_path, saved_pipeline):
    """`probembed drop x` in a `while read` loop took the loop's next line as its answer (a
    "y" dropped the collection), and `sleep 30 | probembed drop x` waited at the prompt."""
    db = tmp_path / "db"
    source = _rows(tmp_path / "rows.jsonl", 2)
    made = runner.invoke(
        app, ["ingest", str(source), "--db", str(db), "-c", "c", "--pipeline", str(saved_pipeline)]
    )
    assert made.exit_code == 0, made.output
    script = f'{" ".join(PROBEMBED)} drop c --db {db}; echo "exit $?"; cat'
    loop = subprocess.run(
        ["sh", "-c", script], input="y\nnext\n", capture_output=True, text=True, timeout=300
    )
    assert loop.stdout == "exit 1\ny\nnext\n", loop.stderr  # the pipe's lines left unread
    assert "no (stdin is not a terminal" in loop.stderr and "nothing dropped" in loop.stderr
    assert _collections(db) == ["c"]


def test_drop_without_yes_asks_on_a_terminal(tmp_path, saved_pipeline):
    db = tmp_path / "db"
    source = _rows(tmp_path / "rows.jsonl", 2)
    made = runner.invoke(
        app, ["ingest", str(source), "--db", str(db), "-c", "c", "--pipeline", str(saved_pipeline)]
    )
    assert made.exit_code == 0, made.output
    terminal, stdin = pty.openpty()
    os.write(terminal, b"y\n")  # typed ahead: the terminal holds it until the prompt reads
    try:
        asked = subprocess.run(
            [*PROBEMBED, "drop", "c", "--db", str(db)],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        os.close(stdin)
        os.close(terminal)
    assert asked.returncode == 0 and "item(s)? [y/N]: dropped collection 'c'" in asked.stderr
    assert _collections(db) == []


@pytest.mark.parametrize("command", [["ingest", "docs.jsonl"], ["collections"]])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_probembed_db_is_refused_naming_the_variable(
    tmp_path, monkeypatch, command, value
):
    """`PROBEMBED_DB=` (set, empty: click reads it as unset) used the default database, where
    `--db ""` was refused. (`serve` reads it by the same `resolve_db`; before this, it served
    the default database, a test that never ended.)"""
    monkeypatch.chdir(tmp_path)
    _rows(tmp_path / "docs.jsonl", 1)
    home = tmp_path / "data"  # where the default database would be made
    result = runner.invoke(app, command, env={"PROBEMBED_DB": value, "XDG_DATA_HOME": str(home)})
    said = "PROBEMBED_DB is set but empty (an unset variable?)"
    assert result.exit_code == 2 and said in result.stderr, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]
    option = runner.invoke(app, [*command, "--db", ""], env={"PROBEMBED_DB": "elsewhere"})
    assert option.exit_code == 2 and "--db is empty (an unset variable?)" in option.stderr


def test_object_storage_that_does_not_answer_exits_75_try_again_later():
    """A cron job could not tell storage that failed for now (a retry may get through) from a
    refusal to mend: both exited 2."""
    with socket.socket() as held:  # bound, never listening: every connection is refused
        held.bind(("127.0.0.1", 0))
        options = {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
            "aws_endpoint": f"http://127.0.0.1:{held.getsockname()[1]}",
            "allow_http": "true",
        }
        flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
        result = runner.invoke(app, ["collections", "--db", "s3://bucket/db", *flags])
    assert result.exit_code == BUSY_EXIT == 75, result.output
    assert "cannot reach bucket" in result.stderr


def _commands() -> list[list[str]]:
    """Every command's path, subcommands of a group too (`cache info`)."""
    root = typer.main.get_command(app)
    paths = []
    for name, command in root.commands.items():
        paths.append([name])
        paths += [[name, sub] for sub in getattr(command, "commands", {})]
    return paths


NOT_SET = {"COLUMNS": None, "TERMINAL_WIDTH": None}


@pytest.mark.parametrize("command", [[], *_commands()])
def test_help_to_a_pipe_is_whole(command):
    """`serve --help | less` showed `--limit-concurren…` and `PROBEMBED_API_KEY…`: rich takes
    80 columns where stdout is no terminal, and cut what did not fit."""
    shown = runner.invoke(app, [*command, "--help"], env=NOT_SET)
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.stdout
    assert max(map(len, shown.stdout.splitlines())) == PIPED_WIDTH


def test_the_command_list_gives_each_summary_as_one_text():
    """The root's list kept each docstring's line breaks: `models` read "then installed
    packages'" / "(the probembed.encoders entry points)" on two lines at any width."""
    shown = runner.invoke(app, ["--help"], env={"COLUMNS": "400"})
    lines = [" ".join(line.strip("│ ").split()) for line in shown.stdout.splitlines()]
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        first = " ".join((command.help or "").split("\n\n")[0].split())
        assert f"{name} {first}" in lines, name


def test_help_on_a_terminal_keeps_its_width():
    """On a terminal help is as wide as the terminal, as before: only a pipe's is widened."""
    terminal, tty = pty.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in NOT_SET}
    printed = b""
    try:
        shown = subprocess.Popen([*PROBEMBED, "serve", "--help"], stdout=tty, env=env)
        os.close(tty)  # the child's copy alone: its end is the terminal's end
        while chunk := _read(terminal):  # read as it prints: a full terminal would hold it
            printed += chunk
        assert shown.wait(timeout=300) == 0
    finally:
        os.close(terminal)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", printed.decode())  # a terminal's help has colours
    widths = {len(line) for line in plain.splitlines() if line.startswith("╭")}
    assert widths == {100}


def _read(fd: int) -> bytes:
    """What is left to read of a pty's terminal side; b"" at its end (EIO once closed)."""
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def _section(heading: str) -> str:
    """The text under a `#`-heading of that name, in the README or a page under docs/, up to
    the next heading of its level or above."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found = re.search(rf"^(#+) {re.escape(heading)}\n", page.read_text(), re.MULTILINE)
        if found:
            rest = page.read_text()[found.end() :]
            end = re.search(rf"^#{{1,{len(found.group(1))}}} ", rest, re.MULTILINE)
            return rest[: end.start() if end else None]
    raise AssertionError(f"no section {heading!r} in the README or docs/")


#: How the code reads a variable by name: a literal `PROBEMBED_*` anywhere (constants too),
#: and `os.environ.get("X")`, `.setdefault("X", ...)`, `os.environ["X"]`.
_READ = (
    r'"(PROBEMBED_[A-Z_]+)"',
    r'environ(?:\.get|\.setdefault)\(\s*"([A-Z_]+)"',
    r'environ\[\s*"([A-Z_]+)"\s*\]',
)


def test_every_environment_variable_the_code_reads_or_sets_is_in_the_table():
    """They were told only in scattered places (PROBEMBED_CACHE_MAX_BYTES under How it
    works, PROBEMBED_API_KEYS under Service, RAY_ADDRESS nowhere)."""
    names = set()
    for path in (ROOT / "probembed").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names |= {name for pattern in _READ for name in re.findall(pattern, text)}
    table = _section("Environment variables")
    assert {"PROBEMBED_DB", "HF_HUB_OFFLINE", "RAY_ADDRESS"} <= names  # the patterns find them
    assert sorted(n for n in names if f"`{n}`" not in table) == []
