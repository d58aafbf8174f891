"""Pins: LanceDB tags that keep the version a running write would be undone to from a prune.

An undo (`Collection.revert`) reads the version its write started from, which the write's
first commit replaced; a prune removes a version replaced `keep` ago (`upkeep.prune_after`),
so a write running longer than the retention could not be undone (its start version pruned
by another process's compaction). A write that may be undone tags that version for its
duration (`pinned`); every prune stops below the oldest tagged version, a user's own tags
included (LanceDB refuses a cleanup that would remove a tagged version).

A pin outlives a writer killed before it could remove it (SIGKILL, a power cut). Its writer
holds a lock file of the pin's name (flock, which the kernel releases when the process ends
however it ends) beside the collection's write lock for as long as the pin stands, made
before the tag: a pin whose lock file is there and held by nobody is a dead writer's
(`ENDED`), and the next compaction removes it, as it removes one older than `PIN_EXPIRY`
(`EXPIRED`, whatever made it). A pin with no lock file here was made on another machine (a
database on object storage; its lock is in that machine's cache) or by an earlier release:
whether its writer still runs cannot be told here (`UNKNOWN`), so it stays until it expires
or is dropped by force (`drop`, `probembed pins --drop TAG --force`).
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from probembed import atomic
from probembed.store.errors import StoreError

#: A pin's tag: this prefix, the UTC second it was made, a random part.
PIN_PREFIX = "probembed-undo-"
_PIN = re.compile(rf"{re.escape(PIN_PREFIX)}(\d+)-[0-9a-f]+")
#: A pin this old is taken for a writer that was killed before removing it: a write running
#: longer than this can no longer be undone once its pin is gone (it says so, as before).
PIN_EXPIRY = timedelta(days=7)
#: The folder of the pins' lock files in a collection's own folder (`Location.own_dir`).
LOCKS = "pins"

#: What a tag is, as `probembed pins` tells it.
RUNNING = "running"
ENDED = "ended"
EXPIRED = "expired"
UNKNOWN = "unknown"
OWN = "own"
SAID = {
    RUNNING: "pin of a write running on this machine, which removes it when it ends",
    ENDED: "pin of a write that ended without removing it (killed): stale, the next "
    "compaction removes it",
    EXPIRED: f"pin made over {PIN_EXPIRY.days} days ago: stale, the next compaction removes it",
    UNKNOWN: "pin of a write on another machine or of an earlier release: whether that write "
    "still runs cannot be told here",
    OWN: "a tag of your own: it keeps its version and every later one from every prune",
}
#: Tags every prune may ignore: their writers are gone, and the next compaction removes them.
STALE = (ENDED, EXPIRED)


@dataclass(frozen=True)
class Tag:
    """A tag of a collection's table, and what it is (`SAID`)."""

    name: str
    version: int
    state: str
    #: When a pin was made (from its name); None for a tag of one's own.
    made: datetime | None

    def to_json(self) -> dict[str, Any]:
        """As `probembed pins --json` prints it."""
        made = None if self.made is None else self.made.isoformat()
        return {"name": self.name, "version": self.version, "state": self.state, "made": made}


def lock_dir(own_dir: Path) -> Path:
    """Where a collection's pins keep their lock files: in its own folder, beside its write
    lock (for a database on object storage, this machine's cache of it)."""
    return own_dir / LOCKS


@contextlib.contextmanager
def pinned(table: Any, version: int | None, locks: Path) -> Iterator[None]:
    """Tag `version` of the table for the block (None, or no table: nothing to keep), and
    remove the tag after it, however it ends; its lock file in `locks` is held the while."""
    if table is None or version is None:
        yield
        return
    name = f"{PIN_PREFIX}{int(datetime.now(UTC).timestamp())}-{uuid.uuid4().hex[:12]}"
    with _held(locks / name):  # before the tag: a pin is never seen without its lock
        table.tags.create(name, version)
        try:
            yield
        finally:
            untag(table, name)


@contextlib.contextmanager
def _held(path: Path) -> Iterator[None]:
    """Hold a lock file at `path` while the block runs, and remove it after it. It is locked
    under a hidden name and renamed into place, so nobody finds it there unheld."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}")
    staged.touch()
    held = atomic.hold(staged)
    staged.rename(path)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        if held is not None:
            os.close(held)


def untag(table: Any, name: str) -> None:
    """Remove a tag, gone already or not: a pin's writer and a compaction expiring it may
    both remove it."""
    try:
        table.tags.delete(name)
    except RuntimeError as exc:
        if "Ref not found" not in str(exc):
            raise


def tags_of(
    tags: Mapping[str, Mapping[str, Any]], locks: Path, now: datetime | None = None
) -> list[Tag]:
    """The table's tags (`Table.tags.list()`), each with what it is, by name."""
    now = datetime.now(UTC) if now is None else now
    return [_tag(name, int(tags[name]["version"]), locks, now) for name in sorted(tags)]


def _tag(name: str, version: int, locks: Path, now: datetime) -> Tag:
    """One tag and what it is: a pin by its name, then by its age and its lock file."""
    found = _PIN.fullmatch(name)
    if found is None:
        return Tag(name, version, OWN, None)
    made = datetime.fromtimestamp(int(found.group(1)), UTC)
    if made < now - PIN_EXPIRY:
        return Tag(name, version, EXPIRED, made)
    return Tag(name, version, _writer(locks / name), made)


def _writer(lock: Path) -> str:
    """Whether the writer of the pin whose lock file this is still runs: `ENDED` when nobody
    holds it (taken here for a moment), `RUNNING` when someone does (or locks do not work
    here, where nothing can be told apart), `UNKNOWN` when there is no such file here."""
    try:
        held = atomic.hold(lock)
    except FileNotFoundError:
        return UNKNOWN
    if held is None:
        return RUNNING
    os.close(held)
    return ENDED


def held(
    tags: Mapping[str, Mapping[str, Any]], locks: Path, now: datetime | None = None
) -> dict[str, int]:
    """The table's tags (`Table.tags.list()`) that keep their versions from a prune, each
    with its version: all but stale pins (`STALE`)."""
    return {t.name: t.version for t in tags_of(tags, locks, now) if t.state not in STALE}


def drop_stale(table: Any, locks: Path, now: datetime | None = None) -> list[str]:
    """Remove the stale pins (`STALE`) and the lock files no pin's writer holds any more (a
    writer killed between removing its tag and its lock file): the names of the pins."""
    stale = [t.name for t in tags_of(table.tags.list(), locks, now) if t.state in STALE]
    for name in stale:
        removed(table, locks, name)
    with contextlib.suppress(FileNotFoundError):
        for lock in locks.iterdir():
            if not lock.name.startswith(".") and _writer(lock) == ENDED:
                lock.unlink(missing_ok=True)
    return stale


def drop(table: Any, locks: Path, name: str, force: bool = False) -> Tag:
    """Remove the tag `name` (a stale pin, a tag of one's own), and a pin's lock file; a pin
    whose write may still run (`RUNNING`, `UNKNOWN`) only with `force`: its write could then
    not be undone once a compaction prunes the version it held. What was removed."""
    tags = table.tags.list()
    if name not in tags:
        known = ", ".join(sorted(tags)) or "none"
        raise StoreError(f"no tag {name!r} on this collection; its tags: {known}")
    tag = _tag(name, int(tags[name]["version"]), locks, datetime.now(UTC))
    if tag.state in (RUNNING, UNKNOWN) and not force:
        raise StoreError(
            f"tag {name!r} is a {SAID[tag.state]}; dropping it while that write runs lets a "
            "compaction prune the version its undo reads, so refused: wait for the write to "
            "end (it removes its pin), or drop it by force once you know it no longer runs"
        )
    removed(table, locks, name)
    return tag


def removed(table: Any, locks: Path, name: str) -> None:
    """Remove the tag `name` and, for a pin, its lock file (either gone already or not), with
    no question asked: its callers have decided it may go."""
    untag(table, name)
    (locks / name).unlink(missing_ok=True)
