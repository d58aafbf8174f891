"""The operations routes: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Security
from fastapi.responses import JSONResponse, Response

from probembed.service import schemas
from probembed.service.auth import METRICS
from probembed.service.scopes import ScopedRoute, _scope
from probembed.service.state import Service
from probembed.service.storage import hidden, hidden_places

#: The probes' 503s, as they answer them: their own bodies (status and error), not ErrorBody.
_NOT_ALIVE = {
    "model": schemas.Health,
    "description": 'Loading failed (status "failed", error: why); no wait mends it',
}
_NOT_READY = {
    "model": schemas.Readiness,
    "description": 'Not ready: status "loading" (Retry-After: 1), "failed" (error: why; no '
    'Retry-After) or "storage" (the object storage failed a request; Retry-After: 5)',
    "headers": {
        "Retry-After": {
            "description": "Seconds until asking again (loading, storage)",
            "schema": {"type": "integer"},
        }
    },
}


def _operations(service: Service) -> APIRouter:
    """Liveness, readiness, metrics."""
    router = APIRouter(tags=["operations"], route_class=ScopedRoute)
    scraper = _scope(service, METRICS)  # read grants it too
    places = hidden_places(service.settings.db, service.settings.storage_options)

    def failure() -> str | None:
        """Why loading failed, where an object-storage database lives hidden (the log has it)."""
        return None if service.failure is None else hidden(service.failure, places)

    @router.get("/healthz", response_model=schemas.Health, responses={503: _NOT_ALIVE})
    @router.get("/healthz/", response_model=schemas.Health, include_in_schema=False)
    async def healthz() -> Response:
        """Alive: the process answers (it may still be loading: the pipelines loaded so far);
        503 once loading failed, which no wait mends, so a liveness probe restarts it (it
        answered 200 for ever while /readyz said failed)."""
        if service.failure:
            body = schemas.Health(status="failed", error=failure())
            return JSONResponse(body.model_dump(), 503)
        return JSONResponse(
            schemas.Health(status="ok", pipelines=list(service.pipelines)).model_dump()
        )

    @router.get("/readyz", response_model=schemas.Readiness, responses={503: _NOT_READY})
    @router.get("/readyz/", response_model=schemas.Readiness, include_in_schema=False)
    async def readyz() -> Response:
        """Ready: pipelines loaded and database open; 503 while loading, after a failure, and
        for STORAGE_HOLD seconds after the database's object storage failed a request. A
        collection whose pipeline does not load here is listed in `unservable`, still 200: the
        others are served, and a balancer routing away would mend nothing."""
        if not service.ready:
            status = "failed" if service.failure else "loading"  # both are "not yet": 503
            body = schemas.Readiness(status=status, error=failure())
            retry = {} if service.failure else {"Retry-After": "1"}  # a failure stays failed
            return JSONResponse(body.model_dump(), 503, headers=retry)
        trouble = service.storage_trouble()
        if trouble is not None:
            body = schemas.Readiness(
                status="storage", pipelines=list(service.pipelines), error=trouble
            )
            return JSONResponse(body.model_dump(), 503, headers={"Retry-After": "5"})
        body = schemas.Readiness(
            status="ready", pipelines=list(service.pipelines), unservable=service.unservable
        )
        return JSONResponse(body.model_dump())

    @router.get(
        "/metrics",
        response_class=Response,
        dependencies=[Security(scraper)],
        responses={200: {"content": {"text/plain": {}}}},
    )
    async def metrics() -> Response:
        """Prometheus text format."""
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")

    return router
