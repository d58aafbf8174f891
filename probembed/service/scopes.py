"""Scopes on routes: the dependency that lets a request through only with a key granting the
route's scope, the schema's security scheme of each scope and the route that documents its
401 and 403 by it, and the 403 a key earns on a route for refusals made before that check."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from fastapi import Request, Security
from fastapi.params import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import BaseRoute, Match

from probembed.service import schemas
from probembed.service.auth import (
    GRANTED,
    READ,
    SCOPES,
    ApiKeys,
    bearer_key,
    grants,
    scope_authorization,
)
from probembed.service.errors import ApiError
from probembed.service.state import Service
from probembed.service.validation import Utf8Route

#: The schema's security scheme of each scope, named for it: an operation's `security` names
#: the key it takes (one anonymous scheme on every route told a client nothing).
_BEARERS = {
    scope: HTTPBearer(
        auto_error=False,
        scheme_name=scope,
        description=f"An API key with the `{scope}` scope (sent as `Authorization: Bearer "
        f"KEY`) grants {GRANTED[scope]}. A server started without keys asks for none.",
    )
    for scope in SCOPES
}


def _scope(service: Service, needed: str) -> Callable[..., None]:
    """A dependency that lets a request through only with a key granting `needed`."""
    bearer = _BEARERS[needed]

    def check(request: Request, _: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
        # the key as the gate reads it: HTTPBearer (there for the schema) splits at a space
        # alone, and refused `Bearer<TAB>KEY` that the gate let through
        key = bearer_key(scope_authorization(request.scope))
        lacking = _refused_scope(service.settings.keys, key, needed)
        if lacking is not None:
            raise ApiError(403, lacking)

    check.needed_scope = needed  # type: ignore[attr-defined]  # read by _needed_scopes
    return check


def _needed_scopes(dependencies: Sequence[Depends]) -> list[str]:
    """The scopes a route's dependencies need, each `_scope`'s, in order."""
    found = (getattr(dependency.dependency, "needed_scope", None) for dependency in dependencies)
    return [needed for needed in found if needed is not None]


def _granting_scopes(needed: str) -> list[str]:
    """The scopes whose keys may use a route needing `needed`: `needed` first, then any
    wider one (a read key reads /metrics too)."""
    wider = (scope for scope in SCOPES if scope != needed and grants(frozenset({scope}), needed))
    return [needed, *wider]


def _granting(needed: str) -> str:
    """The scopes whose keys may use a route needing `needed`, as a refusal names them."""
    return " or ".join(repr(scope) for scope in _granting_scopes(needed))


def _refusals(needed: Sequence[str]) -> dict[int | str, dict[str, Any]]:
    """The 401 and 403 a route needing these scopes may answer, each naming them."""
    if not needed:
        return {}
    keys = " and ".join(_granting(scope) for scope in needed)
    told = {
        401: f"No API key, not one sent as `Authorization: Bearer KEY`, or one this server "
        f"does not hold: send a key granting {keys}",
        403: f"The key does not grant {keys}, which this route needs",
    }
    return {
        status: {"model": schemas.ErrorBody, "description": text} for status, text in told.items()
    }


def _wider_schemes(needed: Sequence[str]) -> list[Depends]:
    """The security schemes of the scopes that grant what a route needs besides its own
    (each `_scope` check declares its own): OpenAPI reads an operation's `security` entries
    as alternatives, so a client sees that a read key opens /metrics too."""
    wider = (scope for each in needed for scope in _granting_scopes(each)[1:])
    return [Security(_BEARERS[scope]) for scope in dict.fromkeys(wider)]


class ScopedRoute(Utf8Route):
    """A route (UTF-8 bodies alone, `Utf8Route`) whose schema documents the scopes whose
    keys get in and the 401 and 403 of the scopes its dependencies need, from those
    dependencies: a route cannot name one scope in its check and another in its
    documentation."""

    def __init__(
        self,
        path: str,
        endpoint: Callable[..., Any],
        *,
        dependencies: Sequence[Depends] | None = None,
        responses: dict[int | str, dict[str, Any]] | None = None,
        **options: Any,
    ) -> None:
        needed = _needed_scopes(dependencies or ())
        super().__init__(
            path,
            endpoint,
            dependencies=[*(dependencies or ()), *_wider_schemes(needed)],
            responses={**(responses or {}), **_refusals(needed)},
            **options,
        )


def _refused_scope(keys: ApiKeys | None, key: str | None, needed: str) -> str | None:
    """Why this key may not use a route needing `needed`, or None (no keys: anyone may).
    The gate answered 401 to a missing or unknown key before the body was read."""
    if keys is None:
        return None
    granted = (keys.granted(key) if key else None) or frozenset()
    if grants(granted, needed):
        return None
    return f"this key grants {sorted(granted)}; this route needs {needed!r}"


def _may_list(request: Request, keys: ApiKeys | None) -> bool:
    """Whether the request's key may list the collections (the read scope): a 404 names the
    collections there are only to a caller who could list them, keys being no narrower."""
    key = bearer_key(scope_authorization(request.scope))
    return _refused_scope(keys, key, READ) is None


def _lacking_scope(request: Request, keys: ApiKeys | None) -> str | None:
    """The 403 a request's key earns on its route, for refusals FastAPI makes before the
    route's scope is checked (a body that is not UTF-8 or not JSON): a read-only key's garbled
    write got the parser's 400 or 422."""
    header = request.headers.get("authorization", "")
    return _route_refusal(request.scope.get("route"), header, keys)


def _scope_refusal(
    routes: Sequence[BaseRoute], keys: ApiKeys | None
) -> Callable[[MutableMapping[str, Any]], str | None]:
    """For the gate, which refuses before routing: the 403 a request's key earns on the route
    its method and path match, or None. A read-only key's write over the body limit got 413,
    where a write in the limit got 403."""

    def refusal(scope: MutableMapping[str, Any]) -> str | None:
        if keys is None:
            return None
        route = next((r for r in routes if r.matches(scope)[0] == Match.FULL), None)
        return _route_refusal(route, scope_authorization(scope), keys)

    return refusal


def _route_refusal(route: object, authorization: str, keys: ApiKeys | None) -> str | None:
    """Why the key of this Authorization header may not use this route (its first scope
    dependency the key lacks), or None."""
    key = bearer_key(authorization)
    for needed in _needed_scopes(getattr(route, "dependencies", ())):
        lacking = _refused_scope(keys, key, needed)
        if lacking is not None:
            return lacking
    return None
