"""The real server for tests: `ServerProcess` plus an HTTP client bound to it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import httpx2

from probembed.service.process import ServerProcess


class Server(ServerProcess):
    """A `probembed serve` subprocess on a loopback port, with a client factory."""

    def client(self, key: str | None = None) -> httpx2.Client:
        """An HTTP client for this server, with a bearer key if given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=60)

    def access_line(self, request_id: str) -> dict:
        """The access line of the request with this id (written once the answer went out)."""
        deadline = time.monotonic() + 30  # 30 s: only ever waited out on failure
        while True:
            for line in self.output.splitlines():
                if line.startswith("{") and json.loads(line).get("request_id") == request_id:
                    return json.loads(line)
            assert time.monotonic() < deadline, f"no access line has request_id {request_id!r}"
            time.sleep(0.05)


def encoding_children(running: ServerProcess) -> list[int]:
    """The server's encoding children (spawned), from Linux's /proc."""
    return [
        pid
        for pid in running.children()
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


def raw(server: ServerProcess, sent: bytes) -> socket.socket:
    """A connection to the server that has sent these bytes and no more."""
    connection = socket.create_connection(("127.0.0.1", server.port))
    connection.sendall(sent)
    return connection


def serve_on_a_held_port(command: list[str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run a `probembed serve` command on a loopback port this process holds (bound and
    listening): `serve` checks its database, then fails to bind, before any model loads; so
    a database it takes is told from one it refuses in a second, not a whole start. The run
    and the port."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [*command, "--port", str(port)], capture_output=True, text=True, timeout=120
        )
    return done, port
