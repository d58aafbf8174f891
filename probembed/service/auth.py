"""API keys with scopes: `read` (embed, search, list, metrics), `write` (create, ingest,
delete) and `metrics` (GET /metrics alone: a scraper's key, which reads no data).

Keys come from a file (`--api-keys FILE`) or the environment (`PROBEMBED_API_KEYS`), one
entry per line (or `;`-separated in the variable): `KEY [SCOPE[,SCOPE]]`, `#` starts a
comment, and a key with no scope reads only. Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READ = "read"
WRITE = "write"
METRICS = "metrics"
SCOPES = (READ, WRITE, METRICS)
#: What each scope grants, as the schema's security scheme of each says it.
GRANTED = {
    READ: "embeddings, similarity and the models; listing, reading and searching the "
    "collections; and GET /metrics, as the `metrics` scope does",
    WRITE: "creating and dropping collections; writing, deleting and erasing their documents",
    METRICS: "GET /metrics alone: a scraper's key, which reads no data",
}
ENV_VAR = "PROBEMBED_API_KEYS"
#: Shorter keys are guessable: refused when loaded.
MIN_KEY_CHARS = 16


#: A comment: `#` at the start of an entry or after a space (a `#` inside a key is the key's).
_COMMENT = re.compile(r"(?:^|\s)#")


def scope_authorization(scope: Mapping[str, Any]) -> str:
    """An ASGI request's first Authorization header, as the routes' scope check reads it (a
    dict of the headers kept the last: the gate and the routes judged different keys)."""
    headers = scope.get("headers") or []
    header = next((value for name, value in headers if name == b"authorization"), b"")
    return header.decode("latin-1")


def authorization_parts(authorization: str) -> tuple[str, str]:
    """An Authorization header's scheme and credentials, split at its first run of white
    space (`Bearer<TAB>KEY` was read as a key sent with no scheme)."""
    scheme, *credentials = authorization.split(None, 1) or [""]
    return scheme, credentials[0].strip() if credentials else ""


def bearer_key(authorization: str) -> str | None:
    """The key an Authorization header presents (`Bearer KEY`), or None."""
    scheme, key = authorization_parts(authorization)
    if scheme.lower() != "bearer":
        return None
    return key or None


def grants(granted: frozenset[str], needed: str) -> bool:
    """Whether a key's scopes grant `needed`, named or implied (`read` grants `metrics`, so an
    operator's read key scrapes on after an upgrade)."""
    return needed in granted or (needed == METRICS and READ in granted)


@dataclass(frozen=True)
class ApiKeys:
    """Key -> the scopes it grants."""

    scopes: Mapping[str, frozenset[str]]

    def __post_init__(self) -> None:
        if not self.scopes:
            raise ValueError("API keys were given but none was found; give at least one key")

    def granted(self, key: str) -> frozenset[str] | None:
        """The scopes of a presented key, or None if it is not one of ours."""
        found: frozenset[str] | None = None
        for known, scopes in self.scopes.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                found = scopes
        return found

    @classmethod
    def parse(cls, entries: list[str], source: str) -> ApiKeys:
        """Keys from `KEY [SCOPES]` entries; a bad entry names its source and position."""
        scopes: dict[str, frozenset[str]] = {}
        for number, raw in enumerate(entries, 1):
            entry = _COMMENT.split(raw, maxsplit=1)[0].strip()
            if not entry:
                continue
            where = f"{source}: entry {number}"
            key, *rest = entry.split()
            if not (key.isascii() and key.isprintable()):
                raise ValueError(
                    f"{where}: a key must be printable ASCII (HTTP headers carry it), "
                    f"got {key[:4]!r}…"
                )
            if len(rest) > 1:
                raise ValueError(
                    f"{where}: expected 'KEY [SCOPE,SCOPE]', got {len(rest) + 1} words"
                )
            granted = frozenset(s.strip() for s in (rest[0].split(",") if rest else [READ]))
            unknown = sorted(granted - set(SCOPES))
            if unknown:
                raise ValueError(f"{where}: unknown scope(s) {unknown}; scopes are {SCOPES}")
            if len(key) < MIN_KEY_CHARS:
                raise ValueError(f"{where}: key has {len(key)} characters; use {MIN_KEY_CHARS}+")
            if key in scopes:
                raise ValueError(f"{where}: key repeated")
            scopes[key] = granted
        return cls(scopes)


def load_keys(file: Path | None = None, environ: Mapping[str, str] | None = None) -> ApiKeys | None:
    """Keys from the file if given, else from PROBEMBED_API_KEYS, else None (no auth)."""
    if file is not None:
        try:
            lines = Path(file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read API keys from {file}: {exc.strerror}") from exc
        return ApiKeys.parse(lines, str(file))
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    if not value.strip():
        return None
    return ApiKeys.parse(value.replace(";", "\n").splitlines(), f"${ENV_VAR}")
