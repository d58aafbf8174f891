"""Every request passes here: how many run at once, its Host, id, API key, body-size limit
and body timeout, Prometheus counts and latency, access log; a HEAD request is answered as
its GET.

A pure ASGI middleware, so the limit holds before any route reads the body (a declared
Content-Length over it is refused unread; a chunked body is refused once it passes it; one
not whole within the timeout is refused then), and
the route label is the matched template (`/v1/collections/{name}`), never a raw path a client
chose (one label, "unmatched", for every path no route matched; one, `/docs-assets`, for the
docs pages' files). Each request gets an id: the
client's `X-Request-ID` where it is one (`request_id`), else a new one, sent back in that
header, written in its access line and in every error body, so a user's report finds its line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any

from probembed.service.auth import (
    ApiKeys,
    authorization_parts,
    bearer_key,
    scope_authorization,
)
from probembed.service.hosts import Hosts
from probembed.service.metrics import Metrics
from probembed.service.schemas import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("probembed.access")
#: An Authorization scheme worth naming back (`Basic`, `Token`): short letters, never a key.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z-]{0,19}")
#: Schemes named back when the header holds them alone (no credentials after).
_KNOWN_SCHEMES = frozenset({"basic", "digest", "negotiate", "ntlm", "token"})
#: Health probes: answered without a key and whatever their Host.
PROBES = frozenset({"/healthz", "/readyz"})
#: A client's request id taken as it is: printable ASCII without spaces, at most 128
#: characters (a UUID is 36); anything else is replaced, so a log line stays one short token.
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")


class Gate:
    """Wraps the app: refuses a request past the bound of requests at once, for another Host,
    without a valid API key or with a body over the limit or too slow to arrive before the app
    reads it, measures and logs every request."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        max_body_bytes: int,
        pages: frozenset[str],
        keys: ApiKeys | None,
        open_paths: frozenset[str],
        refused: Callable[[Scope], str | None] = lambda scope: None,
        open_prefix: str | None = None,
        hosts: Hosts | None = None,
        body_seconds: float = 60.0,
        limit: int | None = None,
    ) -> None:
        self.app = app
        #: Requests at once, the probes aside (None: no bound), and how many run now.
        self.limit, self.running = limit, 0
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        #: Seconds a request's whole body may take to arrive.
        self.body_seconds = body_seconds
        #: The Host names answered (None: any).
        self.hosts = hosts
        #: Paths with no route template that are still labelled by path: the schema and docs.
        self.pages = pages
        self.keys = keys
        #: Paths any client may ask without a key (health, readiness, the schema and docs).
        self.open_paths = open_paths
        #: Paths under it are open too (the docs pages' scripts and styles).
        self.open_prefix = open_prefix
        #: Why the request's key may not use the route it matches (the routes' 403), or None:
        #: asked before a 413, so a key that may not write learns that first.
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, answered = 500, False
        self.metrics.in_flight.inc()
        request_id = self._request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id  # the app's `request.state`
        # HEAD is the GET without its body, which the server leaves out (its scope says HEAD):
        # only /healthz and /readyz answered it, every other GET route 405
        routed = {**scope, "method": "GET"} if scope.get("method") == "HEAD" else scope

        async def sending(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"x-request-id" for name, _ in headers):
                    headers.append((b"x-request-id", request_id.encode()))
                    message = {**message, "headers": headers}
            await send(message)

        async def refuse(status: int, message: str, headers: list | None = None) -> None:
            await _refuse(sending, status, message, request_id, headers)

        admitted = self._admit(scope)
        try:
            if admitted is False:
                await refuse(503, self._busy(), [(b"retry-after", b"1")])
                return
            elsewhere = self._elsewhere(scope)
            if elsewhere is not None:  # a page that rebound its name to this machine
                await refuse(421, elsewhere)
                return
            unknown = self._unauthenticated(scope)
            if unknown is not None:  # before the body is read or parsed: a stranger's costs nothing
                await refuse(401, unknown, [(b"www-authenticate", b"Bearer")])
                return
            encoding = _content_encoding(scope)
            if encoding is not None:  # read as it came, a gzip body was "not UTF-8 (0x8b)"
                said = f"Content-Encoding {encoding!r} is not supported: send the body uncompressed"
                await refuse(415, said)
                return
            body = await self._read_body(scope, receive)
            if isinstance(body, bytes):
                await self.app(routed, _replay(body, receive), sending)
            else:
                lacking = self.refused(routed)
                await (refuse(403, lacking) if lacking is not None else refuse(*body))
        except asyncio.CancelledError:  # uvicorn's shutdown grace ran out: JSON, not a bare 500
            if answered:
                raise
            await refuse(503, "the service shut down before this request finished")
        finally:
            if admitted:
                self.running -= 1
            self.metrics.in_flight.dec()
            self._record(routed, scope.get("method", ""), status, started, request_id)

    def _admit(self, scope: Scope) -> bool | None:
        """Count a request in if it is under the bound (True), else refuse it (False); a
        probe is neither (None), so a balancer sees a busy server alive and ready. uvicorn's
        own bound answered in plain text without Retry-After, unlike every other refusal."""
        if self.limit is None or _path(scope) in PROBES:
            return None
        if self.running >= self.limit:
            return False
        self.running += 1
        return True

    def _busy(self) -> str:
        """Why a request past the bound is refused, and what to do."""
        return (
            f"the server is answering {self.limit} requests at once, its limit "
            "(--limit-concurrency): send it again after Retry-After seconds"
        )

    def _request_id(self, scope: Scope) -> str:
        """The client's X-Request-ID if it is printable, short and no API key of this server
        (a key sent in the wrong header must not reach the log), else a new random one."""
        given = (_header(scope, b"x-request-id") or "").strip()
        is_key = self.keys is not None and self.keys.granted(given) is not None
        if _REQUEST_ID.fullmatch(given) and not is_key:
            return given
        return uuid.uuid4().hex

    def _elsewhere(self, scope: Scope) -> str | None:
        """Why a request's Host names another server, or None. Health probes are answered
        whatever their Host: a load balancer's probe by the service's DNS name turned 421 on
        upgrading and took the instance out, and they tell a rebound page nothing worth taking."""
        if self.hosts is None or _path(scope) in PROBES:
            return None
        return self.hosts.refusal(_header(scope, b"host"))

    def _unauthenticated(self, scope: Scope) -> str | None:
        """Why a request needing a key has no valid one, or None (the routes check scopes)."""
        path = _path(scope)
        under = self.open_prefix is not None and path.startswith(self.open_prefix)
        if self.keys is None or path in self.open_paths or under:
            return None
        authorization = scope_authorization(scope)
        key = bearer_key(authorization)
        scheme, credentials = authorization_parts(authorization)
        # `Basic ...`, or a known scheme alone (`Negotiate`): a lone word may be a key
        named = scheme.lower() in _KNOWN_SCHEMES or (credentials and _SCHEME.fullmatch(scheme))
        if key is None and named:
            return f"expected 'Authorization: Bearer KEY', got the scheme {scheme!r}"
        if key is None and scheme and not credentials and scheme.lower() != "bearer":
            # a bare key: never echoed back
            return "the Authorization header has no scheme: send 'Authorization: Bearer KEY'"
        if key is None:
            return "missing API key: send 'Authorization: Bearer KEY'"
        if self.keys.granted(key) is None:
            return "unknown API key"
        return None

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | tuple[int, str]:
        """The whole body, or the status and message that refuse it as soon as it is known
        to exceed the limit or once it has taken longer than the body timeout."""
        over = (413, f"request body exceeds {self.max_body_bytes} bytes (--max-body-bytes)")
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return over
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_seconds or None):  # 0: none
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        break
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        return over
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            said = f"{size} bytes of the body came in {self.body_seconds:g} s (--body-timeout)"
            return 408, f"the request body did not arrive in time: {said}; send it whole"
        return b"".join(chunks)

    def _record(
        self, scope: Scope, method: str, status: int, started: float, request_id: str
    ) -> None:
        """Count, time and log one request (`scope` as routed: a HEAD's is its GET's)."""
        seconds = time.perf_counter() - started
        route = self._route(scope)
        self.metrics.requests.labels(method, route, str(status)).inc()
        self.metrics.latency.labels(method, route).observe(seconds)
        client = scope.get("client")
        access_log.info(
            json.dumps(
                {
                    "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    "method": method,
                    "path": scope.get("path"),
                    "route": route,
                    "status": status,
                    "ms": round(seconds * 1000, 2),
                    "client": f"{client[0]}:{client[1]}" if client else None,
                    "request_id": request_id,
                }
            )
        )

    def _route(self, scope: Scope) -> str:
        """The request's route label, one of a fixed few whatever path a client sends, or each
        made-up path would be a new metric series: the matched template; the schema and docs
        pages by path (no template); the docs' files by their folder, found or not (their
        mount sets no route: they were "unmatched"); any other path "unmatched" (a 404, a
        413 refused before routing, a redirect)."""
        route = getattr(scope.get("route"), "path", None)
        if route is not None:
            return str(route)
        path = scope.get("path", "")
        if path in self.pages:
            return str(path)
        if self.open_prefix is not None and path.startswith(self.open_prefix):
            return self.open_prefix.rstrip("/")
        return "unmatched"


def _path(scope: Scope) -> str:
    """The request's path without a trailing slash: a probe configured as /healthz/ was
    refused 401, not redirected."""
    return str(scope.get("path", "")).rstrip("/") or "/"


def _header(scope: Scope, name: bytes) -> str | None:
    """A request header's first value (`name` in lower case), or None."""
    value = next((v for n, v in scope.get("headers") or [] if n.lower() == name), None)
    return None if value is None else bytes(value).decode("latin-1")


def _content_encoding(scope: Scope) -> str | None:
    """The request's Content-Encoding if it is one the routes cannot read (any but identity)."""
    for name, value in scope.get("headers") or []:
        if name.lower() == b"content-encoding":
            encoding = value.decode("latin-1").strip()
            if encoding.lower() not in ("", "identity"):
                return encoding
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the buffered body once, then waits for the client as usual."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(
    send: Send, status: int, message: str, request_id: str, headers: list | None = None
) -> None:
    """A refusal made before the app ran, its body unread (so the connection closes)."""
    body = json.dumps(error_body(status, message, request_id)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
