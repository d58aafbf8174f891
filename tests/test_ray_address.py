"""A Ray address where Ray does not answer is refused at once, naming it.

Apart from test_ray_ingest, whose module-wide Ray instance would be found running and
joined instead: here no Ray is started at all.
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from probembed.store import Database

ray = pytest.importorskip("ray")

from probembed.interfaces.cli import app  # noqa: E402
from probembed.interfaces.store_options import check_run_options  # noqa: E402
from probembed.store import ray_ingest  # noqa: E402
from probembed.store.ray_ingest import (  # noqa: E402
    AnsweredAddress,
    check_reachable,
    joined_address,
    ray_session,
)


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released (connecting is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_no_ray_answers_is_refused_at_once(tmp_path, hash_pipeline, monkeypatch):
    """ray.init retried such an address for minutes (over 200 s measured), saying nothing a
    user could act on; the CLI now names it and exits 2, before any collection is made."""
    assert not ray.is_initialized()  # else ray_session joins the running one, as documented
    address = f"127.0.0.1:{closed_port()}"
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"_id": "d0", "text": "one document"}) + "\n")
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    db = tmp_path / "db"
    args = ["ingest", str(source), "--db", str(db), "--pipeline", str(pipeline_dir), "--ray"]
    result = CliRunner().invoke(app, [*args, "--address", address])
    assert result.exit_code == 2, result.output
    assert f"Ray address '{address}': nothing answers there" in " ".join(result.output.split())
    assert "Traceback" not in result.output and not ray.is_initialized()
    assert Database(db, create=True).collections() == []
    monkeypatch.setenv("RAY_ADDRESS", address)  # as `ray job submit` would set it
    refused = f"Ray RAY_ADDRESS '{address}': nothing answers"
    with pytest.raises(ValueError, match=refused), ray_session():
        pass
    with (
        pytest.raises(ValueError, match="is not host:port, ray://host:port or auto"),
        ray_session("headnode"),
    ):
        pass
    with pytest.raises(ValueError, match="is not host:port, ray://host:port or auto"):
        check_reachable("http://127.0.0.1:8265")  # the dashboard's jobs address: not Ray's


@pytest.mark.parametrize("command", ["ingest", "embed"])
def test_the_address_is_checked_before_the_input_is_read_or_a_model_loads(
    tmp_path, monkeypatch, command
):
    """It was probed when the Ray session began: after the input was read and the pipeline
    loaded (seconds with a built-in). A loader that breaks if called, and an input that
    would be refused, show that the address comes first."""
    from probembed.pipeline import Pipeline

    def broken(*args, **kwargs):
        raise RuntimeError("the pipeline was loaded")

    monkeypatch.setattr(Pipeline, "load", broken)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"id": "a"\n')
    address = f"127.0.0.1:{closed_port()}"
    where = ["--db", "made.db"] if command == "ingest" else ["--out", "parts"]
    result = CliRunner().invoke(app, [command, "bad.jsonl", *where, "--ray", "--address", address])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"Ray address '{address}': nothing answers there" in said and "bad input" not in said
    assert not (tmp_path / "made.db").exists() and not (tmp_path / "parts").exists()


def test_a_local_ray_session_starts_without_lancedb_fork_warnings(tmp_path, hash_pipeline):
    """Ray forks its service processes with lancedb already imported: lancedb warned five
    times that a fork reset its runtime, though each process execs at once."""
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n" for i in range(20))
    )
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    args = ["ingest", str(source), "--db", str(tmp_path / "db"), "--pipeline", str(pipeline_dir)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
    done = subprocess.run(
        [sys.executable, "-m", "probembed", *args, "--ray", "--workers", "1"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "added 20" in done.stderr and "fork support is experimental" not in done.stderr


@pytest.fixture
def http_port():
    """A port on 127.0.0.1 where an HTTP/1.1 server (not Ray) answers, for the test's life."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_port_where_something_else_answers_is_refused_at_once(tmp_path, http_port):
    """TCP connected, so the reachability check passed, and ray.init then retried the port
    for as long as one waited ("Failed to get cluster ID from GCS server"), deaf to SIGTERM
    and SIGINT. A Ray GCS speaks gRPC: an HTTP/2 preface that is not answered with a SETTINGS
    frame is refused, naming the address and what came back. In a child process with a
    timeout: the old code never returned."""
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"_id": "d0", "text": "one document"}) + "\n")
    address = f"127.0.0.1:{http_port}"
    args = ["ingest", str(source), "--db", str(tmp_path / "db"), "-c", "c", "--ray"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "probembed", *args, "--address", address],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert f"Ray address '{address}': something there takes connections but is not Ray" in said
    assert "it answered b'" in said and "Traceback" not in said
    assert not (tmp_path / "db").exists()


def test_a_port_that_accepts_and_says_nothing_is_refused_within_the_timeout(monkeypatch):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setattr(ray_ingest, "RAY_CONNECT_SECONDS", 0.5)
        with pytest.raises(ValueError, match="no answer to an HTTP/2 preface within 0.5 s"):
            check_reachable(address)


@pytest.mark.skipif(importlib.util.find_spec("grpc") is not None, reason="Ray Client installed")
def test_a_ray_client_address_without_ray_client_is_refused_before_any_wait(tmp_path):
    """The `ray` extra installs ray[data], not Ray Client's grpc: a ray:// address docs/cli.md
    documents failed only after the reachability wait, inside ray.init ("Ray Client requires
    pip package ray[client]"). It is refused first, naming the install."""
    assert not ray.is_initialized()
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"_id": "d0", "text": "one document"}) + "\n")
    address = f"ray://127.0.0.1:{closed_port()}"  # not even probed
    args = ["ingest", str(source), "--db", str(tmp_path / "db"), "--ray", "--address", address]
    result = CliRunner().invoke(app, args)
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"Ray address '{address}' needs Ray Client" in said
    assert "pip install 'ray[client]'" in said and not ray.is_initialized()


def test_an_address_is_probed_once_per_run(monkeypatch):
    """The CLI probed the address before reading the input, and the Ray session probed it
    again: the CLI now hands the session the address as answered, which it joins as it is."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    address = f"127.0.0.1:{closed_port()}"  # a probe would refuse it
    answered = AnsweredAddress(address)
    assert joined_address(answered) is answered
    with pytest.raises(ValueError, match="nothing answers there"):
        joined_address(address)
    # `auto` is checked up front too: with RAY_ADDRESS=local it names Ray started here, so
    # the check passes whether or not a Ray runs on this machine
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert check_run_options("stop", True, "auto", 1, 1.0, 0.0) == "auto"
    assert isinstance(check_run_options("stop", True, "auto", 1, 1.0, 0.0), AnsweredAddress)
    monkeypatch.delenv("RAY_ADDRESS")
    assert check_run_options("stop", True, None, 1, 1.0, 0.0) is None


def test_auto_takes_ray_address_from_the_environment_as_ray_init_does(monkeypatch):
    """A review: with RAY_ADDRESS=local, ray.init("auto") starts Ray here, but the up-front
    check of `auto` looked for a running Ray and refused; an address there is checked as any
    address given."""
    from probembed.store.ray_ingest import check_reachable

    monkeypatch.setenv("RAY_ADDRESS", "local")
    check_reachable("auto")  # no Ray running is needed: Ray starts one here
    monkeypatch.setenv("RAY_ADDRESS", "not an address")
    with pytest.raises(ValueError, match="is not host:port, ray://host:port or auto"):
        check_reachable("auto")
