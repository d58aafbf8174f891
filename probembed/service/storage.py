"""The service's object storage as its clients see it: where the database lives is hidden
from every answer (the log keeps it)."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from probembed.store.location import database_target

#: Storage option keys naming the store's endpoint (lower case), and the variables that do.
_ENDPOINT_KEYS: tuple[str, ...] = ("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url")
_ENDPOINT_KEYS += ("azure_storage_endpoint", "azure_endpoint")
_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")
#: A name standing alone: not part of a longer word, host or key.
_ALONE = r"(?<![\w.-]){}(?![\w-])"


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
