"""The real server for tests: `ServerProcess` plus an HTTP client bound to it."""

from __future__ import annotations

import httpx2

from probembed.service.process import ServerProcess


class Server(ServerProcess):
    """A `probembed serve` subprocess on a loopback port, with a client factory."""

    def client(self, key: str | None = None) -> httpx2.Client:
        """An HTTP client for this server, with a bearer key if given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=60)
