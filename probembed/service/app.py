"""The FastAPI application: the routers (operations, embeddings, collections) behind the gate,
each refusal's handler, and the server's limits in its OpenAPI schema. The routes validate,
hand work to the store and the batchers, and answer; the maths stays in the pipeline and the
store."""

from __future__ import annotations

import asyncio
import functools
import logging
import pathlib
import re
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from probembed import __version__
from probembed.cache import default_cache_dir
from probembed.documents import with_notes
from probembed.encoders.base import is_blank
from probembed.pipeline import pipeline_name
from probembed.service.batching import QueueFullError, StoppingError
from probembed.service.collections import PLAN_RETRY_S, _collections
from probembed.service.embeddings import _embeddings
from probembed.service.errors import _INTERNAL, _STATUS, ApiError, refusal
from probembed.service.gate import PROBES, Gate
from probembed.service.hosts import Hosts
from probembed.service.operations import _operations
from probembed.service.scopes import _lacking_scope, _may_list, _scope_refusal
from probembed.service.settings import Limits, ServiceSettings
from probembed.service.state import NotReadyError, Service
from probembed.service.storage import hidden, operator_places, timed_out
from probembed.service.validation import (
    _PROBLEMS_TOLD,
    UNPARSABLE,
    _echoed,
    _kept,
    _not_json,
    _problems,
    _reads_as_json,
    _unreadable,
)
from probembed.store import (
    CollectionNotFoundError,
    IngestError,
    NotChunkedError,
    StorageUnavailableError,
    StoreStateError,
    UndoConflictError,
)
from probembed.store.errors import (
    CollectionBusyError,
    EveryItemError,
    StorageCredentialsError,
    credentials_refusal,
    disk_refusal,
    storage_failure,
)
from probembed.store.location import database_target, with_timeouts

log = logging.getLogger("probembed.service")
#: The interactive page of the schema (Swagger UI), served by fastapi-offline. No ReDoc page:
#: its script draws a logo from cdn.redoc.ly, a request to the internet whenever it is opened.
DOCS = ("/docs",)
#: Where their scripts, styles and icon are served from: fastapi-offline's copies.
ASSETS = "/docs-assets"


def create_app(settings: ServiceSettings) -> FastAPI:
    """The service as an ASGI app (start it with `probembed serve` or any ASGI server)."""
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(service.start())
        try:
            yield
        finally:
            loading.cancel()
            await service.stop()

    app = FastAPIOffline(  # /docs from ASSETS: a CDN's left it blank offline
        title="probembed",
        version=__version__,
        summary="Probabilistic embeddings and search: every vector and hit says how sure it is.",
        lifespan=lifespan,
        static_url=ASSETS,
        redoc_url=None,
    )
    app.state.service = service
    _handle_errors(app, service)
    routers = (_operations(service), _embeddings(service), _collections(service))
    for router in routers:
        app.include_router(router)
    pages = frozenset(p for p in (app.openapi_url, app.swagger_ui_oauth2_redirect_url, *DOCS) if p)
    app.add_middleware(
        Gate,
        metrics=service.metrics,
        max_body_bytes=settings.limits.max_body_bytes,
        pages=pages,
        keys=settings.keys,
        open_paths=pages | PROBES,
        open_prefix=f"{ASSETS}/",
        refused=_scope_refusal([r for router in routers for r in router.routes], settings.keys),
        hosts=Hosts.served(settings.host, settings.allowed_hosts, settings.keys is not None),
        body_seconds=settings.limits.body_timeout,
        limit=settings.limit_concurrency,
    )
    _publish_limits(app, settings.limits, [pipeline_name(p) for p in settings.pipelines])
    return app


#: (schema, property) -> which limits bind it: texts (characters, non-blank), lists (count).
_TEXTS = {("EmbeddingRequest", "input"), ("SearchRequest", "query")}
_TEXTS |= {("SearchRequest", "queries"), ("SimilarityInputs", "source_sentence")}
_TEXTS |= {("SimilarityInputs", "sentences")}
_LISTS = {("EmbeddingRequest", "input"), ("DocumentsWrite", "documents")}
_LISTS |= {("SimilarityInputs", "sentences")}
_LISTS |= {("DeleteDocuments", "ids"), ("SearchRequest", "queries")}


def _publish_limits(app: FastAPI, limits: Limits, pipelines: Sequence[str]) -> None:
    """State this server's limits and pipelines in its OpenAPI schema, so clients and fuzzers
    see them (a collection naming another pipeline is a 422, as a value over a limit is)."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            components = schema["components"]["schemas"]
            for name, prop in _TEXTS | _LISTS:
                node = components[name]["properties"][prop]
                _constrain(node, limits, (name, prop) in _TEXTS, (name, prop) in _LISTS)
            components["SearchRequest"]["properties"]["k"]["maximum"] = limits.max_k
            named = components["CollectionCreate"]["properties"]["pipeline"]
            for option in named.get("anyOf", [named]):
                if option.get("type") == "string":
                    option["enum"] = list(pipelines)
            components["Document"]["properties"]["text"]["description"] = (
                f"At most {limits.max_chars} characters (--max-chars) without its surrounding "
                "whitespace, as it is stored and embedded, unless the write chunks its "
                "documents: then only the body's size bounds it."
            )
            # no JSON Schema keyword bounds a whole body: said in words and as an extension
            info = schema["info"]
            info["x-max-body-bytes"] = limits.max_body_bytes
            info["x-max-hits"] = limits.max_hits
            body = (
                f"Request bodies up to {limits.max_body_bytes} bytes (413 beyond); a search "
                f"up to {limits.max_hits} hits, queries × k (422 beyond)."
            )
            info["description"] = f"{info.get('description', '')}\n\n{body}".strip()
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _constrain(node: dict[str, Any], limits: Limits, text: bool, listed: bool) -> None:
    """Add maxLength and a non-blank pattern to strings, maxItems to arrays, in anyOf too."""
    for option in node.get("anyOf", []):
        _constrain(option, limits, text, listed)
    if node.get("type") == "string" and text:
        node["maxLength"] = limits.max_chars
        node["pattern"] = _non_blank()
    if node.get("type") == "array":
        if listed:
            node["minItems"], node["maxItems"] = 1, limits.max_inputs
        _constrain(node.get("items", {}), limits, text, False)


@functools.cache
def _non_blank() -> str:
    """The pattern of a text with something to embed: one character `is_blank` does not
    pass over (white space, control and format characters, combining marks), as the routes
    check it; `\\S` let a fuzzer send "\\x01" as valid and count its 422 a failure. The
    Basic Multilingual Plane only, as \\uXXXX escapes that every JSON Schema validator reads
    (a text of astral marks alone passes it and is refused), built in some 50 ms."""
    ranges: list[list[int]] = []
    for code in range(0x10000):
        if is_blank(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    parts = (f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)
    return f"[^{''.join(parts)}]"


def _handle_errors(app: FastAPI, service: Service) -> None:
    """Each refusal as JSON {"detail": ...} with its status; Retry-After where it helps."""
    db, keys = service.settings.db, service.settings.keys
    roots = operator_places(db, service.settings.storage_options)
    remote = isinstance(database_target(db), str)
    options = with_timeouts(db, service.settings.storage_options)

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return refusal(request, exc.status, exc.detail, exc.headers)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        lacking = _lacking_scope(request, keys)  # FastAPI reads the body before the scope
        if lacking is not None:
            return refusal(request, 403, lacking)
        kept = _kept(exc.errors())
        content_type = request.headers.get("content-type", "")
        if not _reads_as_json(content_type) and any(not where for where, _ in kept):
            return refusal(
                request, 415, _not_json(content_type)
            )  # pydantic's words named no header
        problems = _problems(kept)
        more = len(problems) - _PROBLEMS_TOLD
        told = "; ".join(problems[:_PROBLEMS_TOLD]) + (f"; and {more} more" if more > 0 else "")
        return refusal(request, 422, told, raw=_echoed(kept))

    async def known(request: Request, exc: Exception) -> Response:
        status = next(code for kind, code in _STATUS if isinstance(exc, kind))
        if isinstance(exc, StoreStateError):  # the operator's to mend, so it goes in the log
            log.error("%s: %s", _named(request), exc, exc_info=exc)
        headers = {}
        if isinstance(exc, StorageUnavailableError):
            return storage_down(request, str(exc), exc)
        if isinstance(exc, StorageCredentialsError):  # /readyz: this server cannot serve
            service.storage_failed(_hidden(str(exc), roots))
        if isinstance(exc, QueueFullError):
            headers["Retry-After"] = str(exc.retry_after)
        elif isinstance(exc, StoppingError) or (isinstance(exc, NotReadyError) and not exc.failed):
            headers["Retry-After"] = "1"  # loading, or stopping (another replica may serve it)
        elif isinstance(exc, CollectionBusyError):  # another process's planning write
            headers["Retry-After"] = str(PLAN_RETRY_S)
        if isinstance(exc, IngestError):
            message = exc.told('send "on_error": "skip"')
            return refusal(request, status, message, headers, raw=[str(p) for p in exc.problems])
        if isinstance(exc, EveryItemError):
            return refusal(request, status, exc.told('"all": true'), headers)
        if isinstance(exc, NotChunkedError):
            return refusal(
                request, status, exc.told('"chunk": true in the documents write'), headers
            )
        message = str(exc)
        if isinstance(exc, CollectionNotFoundError) and not _may_list(request, keys):
            message = exc.unlisted  # the names of the collections are not this key's to read
        if isinstance(exc, UndoConflictError):  # what stopped the write, as it would be told
            stop = exc.stopped_by
            known_stop = isinstance(stop, tuple(kind for kind, _ in _STATUS))
            message = exc.told(str(stop) if known_stop else _INTERNAL)
        local = _local_places() if isinstance(exc, StoreStateError) else []
        return refusal(request, status, _told(message, exc, [*roots, *local]), headers)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        message = str(exc.detail)
        if exc.status_code == 400 and message == UNPARSABLE:  # FastAPI's, for any read failure
            lacking = _lacking_scope(request, keys)
            if lacking is not None:
                return refusal(request, 403, lacking)
            message = _unreadable(await request.body())
        return refusal(request, exc.status_code, message, exc.headers)

    def storage_down(request: Request, said: str, exc: Exception) -> Response:
        """503 with Retry-After for a failure of the database's object storage, which the
        same request may not meet later; logged in a line whole, and /readyz says so a while
        with where the database lives hidden, as every answer hides it."""
        log.warning("%s: storage failed: %s", _named(request), said)
        why = timed_out(said, options)
        said = _hidden(said if why is None else f"{said} ({why})", roots)
        service.storage_failed(said)
        told = _told(f"the database's storage failed: {said}", exc, roots)
        return refusal(request, 503, told, {"Retry-After": "5"})

    async def internal(request: Request, exc: Exception) -> Response:
        """Any other exception is the server's fault, never the client's (a numpy ValueError
        deep in search was a 422 "invalid input" and left no trace): 500 in the error body
        every route answers, while the server logs the traceback; probembed's notes on it (what
        a write stopped part-way had skipped) are the client's, other code's are not. The
        server logs the traceback after this handler, so a line before it names the request."""
        log.error("%s: internal error, its traceback follows", _named(request))
        return internal_refusal(request, exc)

    def internal_refusal(request: Request, exc: Exception) -> Response:
        """The 500 of an exception that is the server's fault."""
        return refusal(request, 500, _told(_INTERNAL, exc, roots))

    async def engine_error(request: Request, exc: Exception) -> Response:
        """LanceDB's I/O failure of object storage is the storage's (`storage_failure`): a
        503 (it was a 500 and a trace), but a refusal of the credentials
        (`credentials_refusal`) a 500 whose cause is logged (retrying gets nowhere); a write
        the file system refused for want of permission or space is told as the store tells
        it (`disk_refusal`: 503, 507); any other such error is `internal`, its traceback
        logged here (a handler for its own class is not re-raised to the server's log)."""
        said = storage_failure(exc) if remote else None
        denied = None if said is None else credentials_refusal(said)
        if denied is not None:  # the operator's to mend: 500, logged, as probembed's own
            denied.__cause__ = exc
            return await known(request, denied)
        if said is not None:
            return storage_down(request, said, exc)
        refused = disk_refusal(exc)  # one a store's write did not say already
        if refused is not None:
            refused.__cause__ = exc  # the log's traceback shows LanceDB's own words
            return await known(request, refused)
        log.error("%s: internal error", _named(request), exc_info=exc)
        return internal_refusal(request, exc)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)  # unparsable body, no route
    for kind, _ in _STATUS:
        app.add_exception_handler(kind, known)
    app.add_exception_handler(RuntimeError, engine_error)
    app.add_exception_handler(OSError, engine_error)
    app.add_exception_handler(Exception, internal)


def _named(request: Request) -> str:
    """A request as a log line names it: method, path and its id (the access line's)."""
    return f"{request.method} {request.url.path} (request {request.state.request_id})"


def _told(message: str, exc: BaseException, places: Sequence[tuple[str, str]]) -> str:
    """A message and the notes probembed added to the error (what a write stopped part-way
    had skipped), `_hidden` alike: notes other code adds to an error are not the client's."""
    return _hidden(with_notes(message, exc, own_only=True), places)


def _hidden(told: str, places: Sequence[tuple[str, str]]) -> str:
    """A text with each of `places` (pattern, shown) as the client reads it: where the
    server keeps things is the operator's."""
    return hidden(told, list(places))


def _local_places() -> list[tuple[str, str]]:
    """(pattern, shown) of the temp dir and the local cache, longest first."""
    places = {}
    for shown, where in (("<tmp>", tempfile.gettempdir()), ("<cache>", str(default_cache_dir()))):
        for path in (pathlib.Path(where).absolute(), pathlib.Path(where).resolve()):
            places[str(path)] = shown
    ordered = sorted(places.items(), key=lambda place: len(place[0]), reverse=True)
    return [(re.escape(spelling), shown) for spelling, shown in ordered]
