"""The service's log lines: their format and level, the same in the server and its encoding
children (a real server on a loopback port)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
from service_support import Server, encoding_children

from probembed.service.logs import JsonFormatter, LogSettings


def unwritable_cache_server(tmp_path: Path, pipeline: Path, *args: str) -> Server:
    """A server whose embedding cache cannot be made (its folder is under a file): each of its
    processes warns, the encoding children too."""
    (tmp_path / "a-file").write_text("not a folder")
    cache = {"PROBEMBED_CACHE_DIR": str(tmp_path / "a-file" / "cache")}
    return Server(tmp_path / "db", pipeline, "--workers", "1", *args, env=cache)


def test_with_log_format_json_every_line_of_server_and_children_is_a_json_object(
    tmp_path, pydoc_pipeline_dir
):
    """An operator's log shipper read the access lines as JSON, but the server's own lines
    (time, logger, level prefix) and an encoding child's (a library's warning, bare) as
    text. With `--log-format json` every line is one JSON object: the start-up lines, the
    access lines, a child's warning (its embedding cache cannot be made: the folder is under
    a file) and the server's warning when a child dies."""
    server = unwritable_cache_server(tmp_path, pydoc_pipeline_dir, "--log-format", "json")
    with server, server.client() as http:
        body = {"model": "hash", "input": ["hello"]}
        assert http.post("/v1/embeddings", json=body).status_code == 200
        (child,) = encoding_children(server)
        os.kill(child, signal.SIGKILL)
        assert http.post("/v1/embeddings", json=body).status_code == 200
        answered = http.get("/healthz", headers={"X-Request-ID": "shipped"})
        assert answered.status_code == 200
        server.access_line("shipped")  # written once the answer went out
    lines = [json.loads(line) for line in server.output.splitlines() if line.strip()]
    assert all(isinstance(line, dict) for line in lines)
    events = [line for line in lines if "logger" in line]
    assert {"time", "level", "logger", "message"} <= set(events[0])
    said = [(line["logger"], line["level"], line["message"]) for line in events]
    assert any(logger == "probembed.service" and "listening on" in m for logger, _, m in said)
    died = [m for logger, level, m in said if level == "warning" and "child of" in m]
    assert died and "died" in died[0]
    # the cache's warning, from the children (a first one and its replacement) too
    cache_warnings = [m for logger, _, m in said if logger == "py.warnings" and "cache" in m]
    assert len(cache_warnings) >= 2, said
    assert any(line.get("request_id") == "shipped" for line in lines)  # the access line


@pytest.mark.parametrize("level", ["warning", "error"])
def test_log_level_above_info_drops_access_and_info_lines_and_keeps_warnings_one_line_each(
    tmp_path, pydoc_pipeline_dir, level
):
    """`--log-level warning` (a busy service's access lines are its log's bulk): no access
    line and no info line; Python's warnings still come (others' lines at warning or above,
    whatever the level), each distinct one once as one text line with time, logger and level,
    not Python's three (file:line, the source line, a blank one)."""
    server = unwritable_cache_server(tmp_path, pydoc_pipeline_dir, "--log-level", level)
    with server, server.client() as http:
        body = {"model": "hash", "input": ["hello"]}
        assert http.post("/v1/embeddings", json=body).status_code == 200
    lines = [line for line in server.output.splitlines() if line.strip()]
    assert not any(line.startswith("{") for line in lines), lines  # no access line
    assert not any(" INFO " in line for line in lines), lines
    assert not any(line.startswith(" ") for line in lines), lines  # no source excerpt
    cache = [line for line in lines if " py.warnings WARNING RuntimeWarning: " in line]
    assert cache and all("embedding cache at" in line for line in cache), lines
    # once, in its encoding child: the server encodes nothing, since the pipeline's variance
    # basis came with its directory (it fitted it at start, and warned there too)
    assert len(cache) == 1, cache


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"level": "verbose"}, "--log-level must be one of debug, info, warning, error"),
        ({"format": "logfmt"}, "--log-format must be one of text, json, got 'logfmt'"),
    ],
)
def test_log_settings_refuse_a_name_they_do_not_know(settings, says):
    with pytest.raises(ValueError, match=says):
        LogSettings(**settings)


def test_a_json_line_holds_the_traceback_and_any_text_in_one_line():
    """A traceback's lines and a message's newlines stay inside the one JSON object."""
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, "f.py", 1, "failed: %s", ("é\n",), None)
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "failed: é\n" and parsed["level"] == "error"
    assert "RuntimeError: boom\nsecond line" in parsed["exception"]
    assert parsed["time"].endswith("+00:00")
