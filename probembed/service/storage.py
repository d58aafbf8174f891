"""The service's object storage as its clients see it: where the database lives is hidden
from every answer (the log keeps it), and a failed call that took the whole storage timeout
(`location.TIMEOUTS`, set for every object-storage database) says so."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from probembed.store.location import database_target, given_timeouts

#: Storage option keys naming the store's endpoint (lower case), and the variables that do.
_ENDPOINT_KEYS: tuple[str, ...] = ("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url")
_ENDPOINT_KEYS += ("azure_storage_endpoint", "azure_endpoint")
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")
#: A name standing alone: not part of a longer word, host or key.
_ALONE = r"(?<![\w.-]){}(?![\w-])"
#: How object_store says how long a failed call took (`in 12.4s`, `in 395.5ms`).
_ELAPSED = re.compile(r"\bin (\d+(?:\.\d+)?)(ns|µs|us|ms|s)\b")
#: A duration as object_store reads one (`5s`, `500ms`, `1m`), enough of humantime's forms.
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|m|min|mins|h)?\s*")
_SECONDS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0}
_SECONDS |= {"m": 60.0, "min": 60.0, "mins": 60.0, "h": 3600.0}


def hidden_places(db: Path | str, options: Mapping[str, str]) -> list[tuple[str, str]]:
    """(pattern, what a client reads instead) of where an object-storage database lives, in
    every spelling a storage error uses: the URI, bucket and prefix, plain and URL-encoded
    (a listing's `prefix=pe-prod%2Fdocs`), the endpoint (`http://host:port`, `host:port`),
    the bucket alone; longest first. A directory: [] (the app hides its paths)."""
    target = database_target(db)
    if not isinstance(target, str):
        return []
    rest = target.partition("://")[2].strip("/")
    bucket, _, prefix = rest.partition("/")
    places = {re.escape(target.rstrip("/")): "<db>"}
    for spelling in (rest, prefix):
        for form in _forms(spelling):
            places[_ALONE.format(re.escape(form))] = "<db>"
    for endpoint in _endpoints(options):
        for part in (endpoint, urllib.parse.urlsplit(endpoint).netloc):
            for form in _forms(part):
                places[re.escape(form)] = "<storage>"
    for form in _forms(bucket):
        places[_ALONE.format(re.escape(form))] = "<bucket>"
    return sorted(places.items(), key=lambda place: len(place[0]), reverse=True)


def hidden(told: str, places: list[tuple[str, str]]) -> str:
    """A text with each of `places` (pattern, shown) as a client reads it."""
    for pattern, shown in places:
        told = re.sub(pattern, shown, told)
    return told


def timed_out(said: str, options: Mapping[str, str]) -> str | None:
    """What to add to a storage failure that took at least the calls' `timeout` (object_store
    words one only as "error sending request", as it does a refused connection), or None."""
    timeout = given_timeouts(options).get("timeout")
    limit = None if timeout is None else _duration(timeout)
    took = _ELAPSED.search(said)
    if limit is None or took is None:
        return None
    if float(took.group(1)) * _SECONDS[took.group(2)] < limit:
        return None
    return f"no answer within the storage timeout of {timeout} (storage option timeout)"


def _duration(text: str) -> float | None:
    """Seconds of a duration as object_store reads it (a bare number is seconds), or None."""
    found = _DURATION.fullmatch(text)
    if found is None:
        return None
    return float(found.group(1)) * _SECONDS[found.group(2) or "s"]


def _forms(spelling: str) -> list[str]:
    """A name as it is written and URL-encoded (`a/b` and `a%2Fb`); none for an empty one."""
    if not spelling:
        return []
    return list(dict.fromkeys([spelling, urllib.parse.quote(spelling, safe="")]))


def _endpoints(options: Mapping[str, str]) -> list[str]:
    """The endpoints the store may be reached at: the options', else the environment's."""
    given = {k.lower(): v for k, v in options.items()}
    found = [given[key] for key in _ENDPOINT_KEYS if given.get(key)]
    found += [os.environ[name] for name in _ENDPOINT_VARIABLES if os.environ.get(name)]
    return [endpoint.rstrip("/") for endpoint in found]


def operator_places(db: Path | str, options: Mapping[str, str]) -> list[tuple[str, str]]:
    """(pattern, what a client reads instead) of where the database lives, longest first:
    on object storage its bucket, prefix and endpoint (`hidden_places`), a directory's
    absolute paths as `<db>`: where the server keeps things is the operator's."""
    target = database_target(db)
    if isinstance(target, str):
        return hidden_places(target, options)
    # absolute only: a relative `--db db` is also in users' words
    spellings = {str(target.absolute()), str(target.resolve())}
    return [(re.escape(s), "<db>") for s in sorted(spellings, key=len, reverse=True)]
