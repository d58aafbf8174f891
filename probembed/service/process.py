"""`probembed serve` in a subprocess, for tests and benchmarks that need the real server.

Started on a free loopback port, ready once /readyz answers 200, stopped with SIGTERM (graceful)
or SIGKILL; its output goes to a log file that errors quote.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

#: Start-up is imports plus loading the pipeline's models: seconds to a minute on 2 cores.
READY_TIMEOUT = 180.0
#: `readiness` of a server whose loading failed (its /readyz is a 503 with status "failed").
FAILED = -503


def free_port() -> int:
    """A loopback port nothing listens on now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerProcess:
    """A server subprocess; `with ServerProcess(...) as s:` waits until /readyz is 200."""

    def __init__(
        self,
        db: Path | str,
        pipeline: str | Path,
        *args: str,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        create_db: bool = True,
        wrapper: Sequence[str] = (),
    ) -> None:
        from probembed.store.location import database_target

        #: A directory (a `file:` URI is one), or an object-store URI kept as it is.
        self.db: Path | str = database_target(db)
        remote = isinstance(self.db, str)
        if remote and log is None:
            raise ValueError(f"a server on {db} needs log=PATH: there is no directory beside it")
        self.pipeline, self.args = str(pipeline), list(args)
        #: Pass --create-db: a test's or benchmark's database is usually made by its server.
        self.create_db = create_db
        #: A command the server runs under (`prlimit --nofile=...`), its words before Python.
        self.wrapper = list(wrapper)
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log or Path(self.db).parent / f"server-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ServerProcess:
        """Launch and wait for readiness (`wait_ready`)."""
        self.launch()
        return self.wait_ready()

    def wait_ready(self) -> ServerProcess:
        """Wait for a launched server's readiness; fail with its log if it never comes, or as
        soon as it reports that loading failed (the server then stopped)."""
        assert self.process is not None, "launch() the server first"
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.output}")
            status, _ = self.readiness()
            if status == 200:
                return self
            if status == FAILED:
                self.stop()
                raise RuntimeError(f"server failed to load:\n{self.output}")
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server not ready after {READY_TIMEOUT} s:\n{self.output}")

    def launch(self) -> None:
        """Start the server process without waiting for it."""
        command = [*self.wrapper, sys.executable, "-m", "probembed", "serve", "--db", str(self.db)]
        command += ["--pipeline", self.pipeline, "--port", str(self.port), *self.args]
        command += ["--create-db"] if self.create_db else []
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, env=self.env)

    def readiness(self) -> tuple[int | None, dict[str, str]]:
        """/readyz now: 200, 503 while loading, FAILED once loading failed, or None while
        nothing answers; with the answer's headers."""
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as answer:
                return answer.status, dict(answer.headers)
        except urllib.error.HTTPError as refused:
            try:
                failed = json.loads(refused.read()).get("status") == "failed"
            except (ValueError, AttributeError):  # not the service's JSON body
                failed = False
            return (FAILED if failed else refused.code), dict(refused.headers)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None, {}

    @property
    def output(self) -> str:
        """What the server wrote to stdout and stderr."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float = 60) -> int | None:
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

    def children(self) -> list[int]:
        """Process ids the server started (its encoders), from Linux's /proc; [] elsewhere."""
        if self.process is None or not Path("/proc/self/task").exists():
            return []
        found: list[int] = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that ended since listed
                found.extend(int(pid) for pid in (task / "children").read_text().split())
        return found
