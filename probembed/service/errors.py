"""Refusals: `ApiError`, the status each failure of the layers below means, the statuses a
route declares, and the error body every refusal is sent in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from probembed.service import schemas
from probembed.service.batching import QueueFullError, StoppingError
from probembed.service.state import NotReadyError, UnknownModelError, UnservableError
from probembed.service.worker import ChildLoadError
from probembed.store import (
    CollectionExistsError,
    CollectionNotFoundError,
    PipelineMismatchError,
    ReadOnlyError,
    StorageFullError,
    StorageUnavailableError,
    StoreError,
    StoreStateError,
    WriteConflictError,
)


class ApiError(Exception):
    """A refusal with its status: auth, limits, and requests the store cannot serve."""

    def __init__(self, status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(str(detail))
        self.status, self.detail, self.headers = status, detail, headers or {}


#: What a client is told of a failure that is the server's own (a bug, an encoder's crash).
_INTERNAL = "internal error: the server's log holds the details"
#: Exceptions of the layers below and the status each one means.
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (NotReadyError, 503),
    (UnknownModelError, 404),
    (UnservableError, 503),
    (ChildLoadError, 503),  # a child replaced after a crash, of a pipeline it cannot load
    (CollectionNotFoundError, 404),
    (CollectionExistsError, 409),
    (PipelineMismatchError, 409),
    (QueueFullError, 429),
    (StoppingError, 503),
    (ReadOnlyError, 503),
    (StorageFullError, 507),
    (StorageUnavailableError, 503),
    (WriteConflictError, 409),
    (StoreStateError, 500),
    (StoreError, 422),
)
#: Statuses any route may answer besides its success, declared in the schema (a route's 401
#: and 403, which name its scope, its `scopes.ScopedRoute`).
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": schemas.ErrorBody, "description": text}
    for status, text in (
        (400, "Body not UTF-8, or nested too deeply to be read: the detail says where"),
        (404, "Unknown collection or model"),
        (
            409,
            "Collection exists, holds another pipeline's vectors, or another writer "
            "committed at the same time (the detail says what was stored; send it again), "
            "or another process's chunked write, sync, delete by document or erasure holds "
            "the collection (Retry-After: seconds until asking again, not an estimate), or a "
            "pin of a write that may still run holds a version an erasure must remove (send "
            '"force": true once it no longer runs)',
        ),
        (408, "The body did not arrive within --body-timeout: send it whole"),
        (413, "Body or input count over the limit"),
        (415, "Body not sent as JSON (Content-Type) or compressed (Content-Encoding)"),
        (
            421,
            "Sent to a Host name this server does not answer to (without API keys: localhost, "
            "its addresses and --allowed-host names)",
        ),
        (422, "Invalid input: the detail names it"),
        (429, "Encode queue full: retry after Retry-After seconds"),
        (500, "The server's own storage or state failed, or a bug: its log says why"),
        (
            503,
            "Still loading or shutting down (Retry-After: 1), --limit-concurrency requests "
            "already running (Retry-After), the database's storage failed (Retry-After: 5); "
            "with no Retry-After: loading failed, the database is read-only or not writable by "
            "the server's user, or the collection's pipeline does not load in this server",
        ),
        (507, "The database's disk is full (or its quota spent): the detail says where"),
    )
}


def _errors(but: int) -> dict[int | str, dict[str, Any]]:
    """`_ERRORS` without a status the route never answers, so its schema does not promise it."""
    return {status: response for status, response in _ERRORS.items() if status != but}


def refusal(
    request: Request,
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    raw: Any = None,
) -> JSONResponse:
    """An error body both FastAPI clients (`detail`) and OpenAI clients (`error`) can read,
    with the id `Gate` gave the request, in its header too (a 500 for an exception is sent
    from outside the gate)."""
    request_id = request.state.request_id
    body = schemas.error_body(status, message, request_id, raw)
    return JSONResponse(body, status, headers={**(headers or {}), "X-Request-ID": request_id})
