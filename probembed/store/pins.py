"""Pins: LanceDB tags that keep the version a running write would be undone to from a prune.

An undo (`Collection.revert`) reads the version its write started from, which the write's
first commit replaced; a prune removes a version replaced `keep` ago (`upkeep.prune_after`),
so a write running longer than the retention could not be undone (its start version pruned
by another process's compaction). A write that may be undone tags that version for its
duration (`pinned`); every prune stops below the oldest tagged version, a user's own tags
included (LanceDB refuses a cleanup that would remove a tagged version). A pin outlives a
writer killed before it could remove it: one older than `PIN_EXPIRY` is a dead writer's, and
the next compaction deletes it (`expired`).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

#: A pin's tag: this prefix, the UTC second it was made, a random part.
PIN_PREFIX = "probembed-undo-"
_PIN = re.compile(rf"{re.escape(PIN_PREFIX)}(\d+)-[0-9a-f]+")
#: A pin this old is taken for a writer that was killed before removing it: a write running
#: longer than this can no longer be undone once its pin is gone (it says so, as before).
PIN_EXPIRY = timedelta(days=7)


@contextlib.contextmanager
def pinned(table: Any, version: int | None) -> Iterator[None]:
    """Tag `version` of the table for the block (None, or no table: nothing to keep), and
    remove the tag after it, however it ends."""
    if table is None or version is None:
        yield
        return
    name = f"{PIN_PREFIX}{int(datetime.now(UTC).timestamp())}-{uuid.uuid4().hex[:12]}"
    table.tags.create(name, version)
    try:
        yield
    finally:
        untag(table, name)


def untag(table: Any, name: str) -> None:
    """Remove a tag, gone already or not: a pin's writer and a compaction expiring it may
    both remove it."""
    try:
        table.tags.delete(name)
    except RuntimeError as exc:
        if "Ref not found" not in str(exc):
            raise


def held(tags: Mapping[str, Mapping[str, Any]], now: datetime | None = None) -> dict[str, int]:
    """The table's tags (`Table.tags.list()`) that keep their versions from a prune, each
    with its version: all but expired pins."""
    gone = set(expired(tags, now))
    return {name: int(tag["version"]) for name, tag in tags.items() if name not in gone}


def expired(tags: Mapping[str, Mapping[str, Any]], now: datetime | None = None) -> list[str]:
    """The pins among these tags made over `PIN_EXPIRY` ago: their writers are gone."""
    now = datetime.now(UTC) if now is None else now
    cutoff = (now - PIN_EXPIRY).timestamp()
    return [
        name
        for name in tags
        if (found := _PIN.fullmatch(name)) is not None and int(found.group(1)) < cutoff
    ]
