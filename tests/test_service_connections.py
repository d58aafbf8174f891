"""What a live server answers to: the Host names it serves (DNS rebinding), the proxies whose
X-Forwarded-For it believes, how many connections it holds, and how long a body may take.

Every server here is a subprocess on a loopback port, found by the tests at 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import time
from pathlib import Path

import pytest
from service_support import Server, raw

KEY = "connections-key-0123456789abcdef"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory, pydoc_pipeline_dir):
    """No keys, one name allowed besides its own, and a one-second body timeout."""
    root = tmp_path_factory.mktemp("open")
    options = ["--allowed-host", "Proxy.Internal", "--body-timeout", "1", "--workers", "1"]
    with Server(root / "db", pydoc_pipeline_dir, *options) as running:
        yield running


@pytest.fixture(scope="module")
def proxied(tmp_path_factory, pydoc_pipeline_dir):
    """Keys, behind a proxy on 127.0.0.1, and at most three connections at once."""
    root = tmp_path_factory.mktemp("proxied")
    keys = root / "keys.txt"
    keys.write_text(f"{KEY} read,write\n")
    options = ["--api-keys", str(keys), "--forwarded-allow-ips", "127.0.0.1", "--workers", "1"]
    with Server(root / "db", pydoc_pipeline_dir, *options, "--limit-concurrency", "3") as running:
        yield running


@pytest.fixture(scope="module")
def untimed(tmp_path_factory, pydoc_pipeline_dir):
    """At most two requests at once, and no body timeout (0 switches it off)."""
    root = tmp_path_factory.mktemp("untimed")
    options = ["--limit-concurrency", "2", "--body-timeout", "0", "--workers", "1"]
    with Server(root / "db", pydoc_pipeline_dir, *options) as running:
        yield running


def test_without_keys_a_host_that_names_another_server_is_refused(open_server):
    """DNS rebinding: a page whose name now resolved to 127.0.0.1 created and dropped
    collections of a server without keys, which never looked at the Host header."""
    port = open_server.port
    with open_server.client() as http:
        refused = ("evil.example", f"evil.example:{port}", "10.1.2.3", "[evil]", "a b")
        for host in (*refused, "localhost.evil.example", "[::ffff:10.1.2.3]"):
            made = http.post("/v1/collections", json={"name": "rebound"}, headers={"Host": host})
            assert made.status_code == 421, (host, made.text)
            said = made.json()["error"]["message"]
            assert "does not answer to the Host" in said and "--allowed-host NAME" in said
        assert http.get("/v1/collections/rebound").status_code == 404  # nothing was made
        declared = http.get("/openapi.json").json()["paths"]["/v1/collections"]["post"]
        assert "421" in declared["responses"]  # the schema said nothing of it
        # a load balancer's probe by the service's DNS name turned 421 on upgrading
        for probe in ("/healthz", "/readyz/"):
            answer = http.get(probe, headers={"Host": "search.internal"})
            assert answer.status_code == 200, (probe, answer.text)
        loopback = ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}")
        # an IPv4-mapped loopback address, and *.localhost (RFC 6761: browsers resolve it to
        # loopback themselves) got 421
        for host in (*loopback, "[::ffff:127.0.0.1]", f"app.localhost:{port}", "a.b.LOCALHOST."):
            assert http.get("/readyz", headers={"Host": host}).status_code == 200, host
        for host in ("proxy.internal", f"PROXY.internal.:{port}"):  # --allowed-host's name
            assert http.get("/v1/collections", headers={"Host": host}).status_code == 200, host


def test_x_forwarded_for_is_ignored_unless_its_proxy_is_named(open_server, proxied):
    """uvicorn believed X-Forwarded-For from 127.0.0.1: any local process put another
    client in the access log. Believed from --forwarded-allow-ips only."""
    forged = {"X-Forwarded-For": "203.0.113.7"}
    with open_server.client() as http:
        http.get("/healthz", headers={**forged, "X-Request-ID": "forged-1"})
    assert open_server.access_line("forged-1")["client"].startswith("127.0.0.1:")
    with proxied.client(KEY) as http:
        http.get("/healthz", headers={**forged, "X-Request-ID": "forwarded-1"})
    assert proxied.access_line("forwarded-1")["client"].startswith("203.0.113.7:")


def test_with_keys_any_host_is_answered_the_key_being_what_a_request_needs(proxied):
    with proxied.client(KEY) as http:
        assert http.get("/v1/collections", headers={"Host": "evil.example"}).status_code == 200
    with proxied.client() as http:
        assert http.get("/v1/collections", headers={"Host": "evil.example"}).status_code == 401


def test_a_body_that_stops_half_way_is_answered_408_once_the_body_timeout_passes(open_server):
    """A client that sent part of its body and stopped held its request for ever."""
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\n"
    head += b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    with contextlib.closing(raw(open_server, head + b'{"model": ')) as stalled:
        stalled.settimeout(60)  # the answer comes after --body-timeout, 1 s
        answer = b"".join(iter(lambda: stalled.recv(65536), b"")).decode()  # then it closes
    status, _, body = answer.partition("\r\n\r\n")
    assert status.startswith("HTTP/1.1 408"), answer
    said = json.loads(body)["error"]["message"]
    assert said.startswith("the request body did not arrive in time: 10 bytes of the body came")
    assert "(--body-timeout)" in said
    with open_server.client() as http:  # the schema said nothing of it
        declared = http.get("/openapi.json").json()["paths"]["/v1/embeddings"]["post"]
    assert "408" in declared["responses"]


def test_connections_past_the_concurrency_limit_are_answered_503_until_some_close(proxied):
    """100 connections with unfinished headers stayed open, each a file descriptor the
    database needs too; past twice --limit-concurrency, uvicorn answers 503 instead (no ASGI
    code sees a request before its headers end)."""

    def status() -> int:
        with proxied.client(KEY) as http:
            return http.get("/healthz").status_code

    def until(wanted: int) -> None:
        deadline = time.monotonic() + 30  # only ever waited out on failure
        while status() != wanted:
            assert time.monotonic() < deadline, f"never answered {wanted}"

    stalled = [raw(proxied, b"GET /healthz HTTP/1.1\r\nHost: loc") for _ in range(5)]
    try:
        until(503)  # five stalled and this one: six, twice the limit of three
    finally:
        for connection in stalled:
            connection.close()
    until(200)


def test_requests_past_the_concurrency_limit_get_the_service_s_503_and_probes_pass(untimed):
    """Past --limit-concurrency uvicorn answered 503 itself, in plain text without
    Retry-After, unlike every other refusal, and /healthz and /readyz with it (a balancer
    then took a busy server for a dead one). Two requests held open by their slow bodies (no
    body timeout ends them) fill a limit of two: the next is the service's JSON 503 with
    Retry-After; the probes pass."""
    body = b'{"model": "hash", "input": "a held request"}'
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\n"
    head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    busy = untimed
    with busy.client() as http:
        held = [raw(busy, head + body[:10]) for _ in range(2)]
        try:
            deadline = time.monotonic() + 30  # only ever waited out on failure
            while (refused := http.get("/v1/models")).status_code != 503:
                assert time.monotonic() < deadline, "the limit was never reached"
            assert refused.headers["content-type"] == "application/json"
            assert refused.headers["retry-after"] == "1"
            said = refused.json()["error"]["message"]
            assert "2 requests at once" in said and "--limit-concurrency" in said
            assert refused.json()["request_id"] == refused.headers["x-request-id"]
            for probe in ("/healthz", "/readyz"):
                assert http.get(probe).status_code == 200, probe
            for connection in held:  # their bodies end: they are answered and leave
                connection.sendall(body[10:])
                connection.settimeout(60)
                assert connection.recv(65536).startswith(b"HTTP/1.1 200"), "not answered"
        finally:
            for connection in held:
                connection.close()
        while (answer := http.get("/v1/models")).status_code != 200:
            assert time.monotonic() < deadline, answer.text
    assert busy.access_line(refused.headers["x-request-id"])["status"] == 503


def test_a_body_timeout_of_0_switches_it_off(untimed):
    """--body-timeout could not be switched off (0 was refused at start-up); under a second
    it is refused (`test_service_settings_made_in_python_refuse_what_the_cli_would`)."""
    with untimed.client() as http:
        made = http.post("/v1/collections", json={"name": "untimed"})
        assert made.status_code in (200, 201), made.text


def test_a_server_without_keys_on_a_network_address_says_what_hosts_it_answers():
    """An upgrade made a keyless --insecure server on 0.0.0.0 refuse clients that use its DNS
    name (421), and its start said nothing of it."""
    from probembed.service.server import keyless_hosts_warning
    from probembed.service.settings import ServiceSettings

    def said(**options) -> str | None:
        return keyless_hosts_warning(ServiceSettings(db="db", **options))

    exposed = said(host="0.0.0.0", insecure=True, allowed_hosts=("search.internal",))
    assert exposed is not None and "search.internal" in exposed and "--allowed-host" in exposed
    assert said(host="127.0.0.1") is None


def open_files(pid: int) -> tuple[str, str]:
    """A process's soft and hard limits on open files, as Linux reports them."""
    limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
    soft, hard = next(line for line in limits if line.startswith("Max open files")).split()[3:5]
    return soft, hard


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux's prlimit")
def test_the_server_raises_its_soft_open_files_limit_to_what_its_connections_need(
    tmp_path, pydoc_pipeline_dir
):
    """At systemd's default soft limit, 1,024, connections that never finish their headers
    took every descriptor at the default connection bound (1,024): no client was answered.
    The server raises its soft limit to its connections and OTHER_FILES, within the hard one;
    where the hard limit is lower it says so, naming both numbers and what to lower."""
    from probembed.service.server import OTHER_FILES

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1500:
        pytest.skip(f"this test's hard limit on open files, {hard}, is below 1,500")
    needed = str(2 * 8 + OTHER_FILES)
    soft_only = ["prlimit", "--nofile=256:", "--"]  # as systemd sets it: the hard one high
    options = ("--limit-concurrency", "8", "--workers", "1")
    with Server(tmp_path / "raised", pydoc_pipeline_dir, *options, wrapper=soft_only) as server:
        assert open_files(server.process.pid) == (needed, open_files(os.getpid())[1])
        assert {open_files(child)[0] for child in server.children()} == {needed}  # inherited
        assert "open files" not in server.output
    both = ["prlimit", "--nofile=256:1500", "--"]
    with Server(tmp_path / "capped", pydoc_pipeline_dir, "--workers", "1", wrapper=both) as capped:
        assert open_files(capped.process.pid) == ("1500", "1500")
        said = [line for line in capped.output.splitlines() if "open files" in line]
    assert len(said) == 1, capped.output
    assert f"needs {1024 + OTHER_FILES} file descriptors" in said[0]
    assert "the hard limit is 1500" in said[0]
    assert f"lower --limit-concurrency to {(1500 - OTHER_FILES) // 2}" in said[0]
