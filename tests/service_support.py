"""A real `probembed serve` process on a loopback port, started and stopped by the test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2

#: Start-up is imports plus loading a saved hashing pipeline: seconds; a minute means broken.
READY_TIMEOUT = 60.0


def free_port() -> int:
    """A port nothing listens on now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """`probembed serve` in a subprocess; `with Server(...) as s:` waits until /readyz is 200."""

    def __init__(
        self, db: Path, pipeline: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.db, self.pipeline, self.args = db, pipeline, list(args)
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = db.parent / f"server-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Server:
        """Launch and wait for readiness, failing with the server's log if it never comes."""
        command = [
            sys.executable, "-m", "probembed", "serve", "--db", str(self.db),
            "--pipeline", str(self.pipeline), "--port", str(self.port), *self.args,
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, env=self.env)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.output}")
            try:
                if httpx2.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server not ready after {READY_TIMEOUT} s:\n{self.output}")

    @property
    def output(self) -> str:
        """What the server wrote to stdout and stderr."""
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM and wait (graceful shutdown); SIGKILL if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def client(self, key: str | None = None) -> httpx2.Client:
        """An HTTP client for this server, with a bearer key if given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=60)
