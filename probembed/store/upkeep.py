"""Disk upkeep of a collection: compact its small fragments and prune the versions nobody needs.

Every LanceDB commit is a version (a manifest, a transaction file, the commit's data files),
and LanceDB keeps every one until it is pruned: a service's small writes left 33 MB on disk
for 2.5 MB of live rows. `Collection.compact` compacts and then prunes with `prune_after`,
the retention read as "replaced at least this long ago" (LanceDB prunes only inside its
optimize, which compacts first); ingest runs it once small fragments piled up
(`Collection.optimize`), the service's background pass where that is due or where enough
versions are past the retention (`Collection.upkeep_if_due`, `probembed.service.state`),
`probembed compact` on demand. `CollectionUpkeep` is that part of a `Collection`, under its
write lock.
"""

from __future__ import annotations

import contextlib
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

from probembed.store import shared_writes
from probembed.store.handle import CollectionHandle
from probembed.store.pins import Tag, drop, drop_stale, held, lock_dir, tags_of
from probembed.store.threads import one_at_a_time

#: How long a version is kept after a newer one replaced it, unless told otherwise.
#: What reads an old version: a searcher lists a version and then takes its rows at that
#: version (seconds; minutes for a first load of millions of rows), here or on another machine
#: of the same bucket; and an undo (`Collection.revert`), which puts a stopped chunked write's
#: ids back as they were at the version the write started from, i.e. the version its first
#: commit replaced, so that version must outlive the whole write. The service's own chunked
#: writes hold the collection's write lock through their undo, and its background upkeep
#: takes that lock, so none of them ever meets a prune; a CLI ingest beside the service (or
#: beside `probembed compact`) pins that version with a tag while it runs (`pins`), which
#: every prune stops below, for up to `PIN_EXPIRY` (a week). A day bounds
#: disk by a day of writes, not by all of them (LanceDB's own default is 7 days, and counts
#: them from a version's creation, which `prune_after` does not).
DEFAULT_KEEP = timedelta(days=1)
#: Versions replaced less than this before the cutoff are kept too: LanceDB takes its own
#: "now" when it prunes, a moment after `prune_after` took its.
CLOCK_SLACK = timedelta(seconds=1)
#: The retention a prune of every version but the latest passes: LanceDB warns at 0, and
#: counts in whole milliseconds from a "now" taken after the versions were listed.
ONLY_LATEST = timedelta(milliseconds=1)
#: Longer than any collection's history: a compaction that prunes nothing.
NO_PRUNE = timedelta(days=3650)
#: Ingest compacts the table once this many small fragments have accumulated (one per commit
#: of fewer rows than LanceDB's fragment target), not after every write.
COMPACT_SMALL_FRAGMENTS = 16
#: The service's upkeep prunes a collection once this many of its versions were replaced a
#: retention ago, where no compaction is due: deletes leave no small fragment (a delete of a
#: few ids is a deletion file and a manifest, some 2 KB), so compaction never became due and
#: their versions piled up unpruned. The prune is LanceDB's optimize, which compacts first:
#: nothing in a collection of one fragment with under a tenth of its rows deleted (what an
#: ingest's compaction leaves of one under a million rows), every fragment under the million
#: rows in one of a large fragment and a few small writes; hence many versions, not a few.
PRUNE_VERSIONS = 256
#: A file a killed writer left unfinished in a table's folder: LanceDB's temporary file
#: (`.tmpXXXXXX`, renamed into place once whole) and its object store's staged one (`NAME#N`).
#: No manifest names either, and LanceDB's cleanup never removes them (a compaction killed
#: mid-rewrite left a 125 MB `data/.tmp...` file through every `compact --keep 0`).
_UNFINISHED = re.compile(r"\.tmp[A-Za-z0-9]{6}|.+#\d+")
#: An unfinished file untouched this long is a killed writer's: a live one writes its file as
#: it goes and renames it before its commit (probembed's own under the write lock, which a
#: compaction holds: this is for writers of other machines sharing the folder, or a user's
#: own LanceDB code). One of a writer paused longer only fails that write (its rename finds
#: no file), never a commit. Under no retention (`--keep 0`: a database nobody else reads or
#: writes), any age.
STALE_UNFINISHED = timedelta(hours=6)
#: A duration as the CLI and `probembed serve` take it: a number and a unit.
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Compaction:
    """What one upkeep of a collection did, for a log line, a metric and the CLI."""

    collection: str
    fragments_before: int
    fragments_after: int
    versions_removed: int
    bytes_freed: int
    #: The version left, the only one pruning can never remove.
    version: int
    #: Versions past the retention kept only because a tag holds them (`held_back`), and
    #: the tags that do: a user's own, or a killed writer's pin, held every later version
    #: from every prune without a word.
    versions_held: int = 0
    held_by: tuple[str, ...] = ()
    #: Unfinished files of killed writers removed (`swept`); their bytes are in `bytes_freed`.
    unfinished_removed: int = 0

    def to_json(self) -> dict[str, Any]:
        """As `--json` prints it."""
        return asdict(self)

    def __str__(self) -> str:
        done = (
            f"{self.collection}: fragments {self.fragments_before} -> {self.fragments_after}, "
            f"{self.versions_removed} old version(s) removed, {self.bytes_freed:,} bytes freed"
        )
        if self.unfinished_removed:
            done += f" (with {self.unfinished_removed} unfinished file(s) of killed writers)"
        if not self.versions_held:
            return done
        return (
            f"{done}; {self.versions_held} more past the retention held by tag(s) "
            f"{', '.join(self.held_by)}: `probembed pins -c {self.collection}` says whose each "
            "is and drops one (a pin of a write still running is removed by that write when "
            "it ends, one whose write was killed on this machine by the next compaction, any "
            "other pin a week after it was made; a tag of your own stays until you drop it)"
        )


def parse_duration(text: str, option: str = "--keep") -> timedelta:
    """A retention given as text ('90s', '30m', '12h', '1d', '2w', '0'), or a ValueError naming
    the option and the value: a typo must not prune what it meant to keep."""
    value = text.strip().lower()
    if value == "0":
        return timedelta(0)
    found = _DURATION.fullmatch(value)
    if found is None:
        raise ValueError(
            f"{option} {text!r} is not a duration: give a number and a unit, s, m, h, d or w "
            "(e.g. 30m, 12h, 1d), or 0 to keep only the latest version"
        )
    return timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2)])


def prune_after(
    versions: Sequence[Mapping[str, Any]],
    keep: timedelta,
    now: datetime | None = None,
    pins: Sequence[int] = (),
) -> timedelta:
    """The `cleanup_older_than` that prunes exactly the versions replaced at least `keep` ago.

    LanceDB prunes by a version's creation time: a version made a week ago and replaced a
    second ago (the start of a write now running, which its undo reads) went at once under
    any retention shorter than a week. What a reader or an undo holds is the version that
    was latest when it began, so the clock that matters starts when the next version
    replaced it. Versions are made in order, so the ones to prune are a prefix: every version
    before the newest one replaced by `now - keep` goes (`_cutoff`). `versions` are
    `Table.list_versions()` rows, whose naive timestamps are local time. Nothing from the
    oldest of `pins` on is pruned: the versions tags hold (`pins.held`), such as the start of
    a write that may still be undone.
    """
    now = datetime.now(UTC) if now is None else now
    cutoff = _cutoff(versions, keep, now, pins)
    return NO_PRUNE if cutoff is None else now - cutoff


def held_back(
    versions: Sequence[Mapping[str, Any]],
    keep: timedelta,
    tags: Mapping[str, int],
    now: datetime | None = None,
) -> tuple[int, tuple[str, ...]]:
    """How many versions a prune by `prune_after` keeps only because of these tags (name ->
    version: `pins.held`), and the tags on versions replaced at least `keep` ago, those a
    prune would otherwise remove: what an operator needs to see a stale tag and delete it.
    (A tag named by whether its version was pruned without tags was missed where its
    version, made within `CLOCK_SLACK` of the next, stayed anyway, and the versions it held
    were counted with no tag named.)"""
    now = datetime.now(UTC) if now is None else now
    kept = len(_pruned(versions, keep, now)) - len(
        _pruned(versions, keep, now, list(tags.values()))
    )
    made = _made(versions)
    due = {v for (v, _), (_, after) in pairwise(made) if after <= now - keep}
    return kept, tuple(sorted(name for name, v in tags.items() if v in due))


def _pruned(
    versions: Sequence[Mapping[str, Any]], keep: timedelta, now: datetime, pins: Sequence[int] = ()
) -> list[int]:
    """The versions a prune by `prune_after` removes: those made before its cutoff, never
    the latest."""
    cutoff = _cutoff(versions, keep, now, pins)
    return [] if cutoff is None else [v for (v, at) in _made(versions)[:-1] if at < cutoff]


def _cutoff(
    versions: Sequence[Mapping[str, Any]],
    keep: timedelta,
    now: datetime,
    pins: Sequence[int] = (),
) -> datetime | None:
    """The creation time before which a prune removes versions (LanceDB keeps the latest
    whatever its age), None for none: just below the creation of the version that replaced
    the newest one due (replaced at least `keep` ago, and below the oldest of `pins`), by
    `CLOCK_SLACK`, since LanceDB takes its own "now" a moment later. Where every version but
    the latest is due under no retention, `now` less `ONLY_LATEST`: nothing newer is to be
    spared, and a compaction makes two versions a millisecond apart (a reservation of
    fragment ids, then the rewrite), so the slack kept the one holding every replaced data
    file (309 MB left for 139 MB of live rows, and a run again freed nothing)."""
    made = _made(versions, pins)
    due = [after for (_, after) in made[1:] if after <= now - keep]
    if not due:
        return None
    if not keep and len(due) == len(versions) - 1:
        return now - ONLY_LATEST
    return due[-1] - CLOCK_SLACK


def prunable_at(
    versions: Sequence[Mapping[str, Any]],
    keep: timedelta,
    now: datetime | None = None,
    pins: Sequence[int] = (),
) -> datetime:
    """When `PRUNE_VERSIONS` of these versions will have been replaced `keep` ago, as
    `prune_after` counts: the earliest a prune of them is due, since a version committed later
    is replaced later still (and a prune elsewhere only leaves fewer). Where fewer have been
    replaced yet (or before the oldest of `pins`, as `prune_after` stops there), `now + keep`:
    the next replacement is no earlier than now. A listing reads every version's manifest, so
    the service lists again only once this time has come."""
    now = datetime.now(UTC) if now is None else now
    made = _made(versions, pins)
    if len(made) <= PRUNE_VERSIONS:
        return now + keep
    return made[PRUNE_VERSIONS][1] + keep


def _made(
    versions: Sequence[Mapping[str, Any]], pins: Sequence[int] = ()
) -> list[tuple[int, datetime]]:
    """`Table.list_versions()` rows as (version, creation in UTC), oldest first, up to the
    oldest of `pins`: no version from it on may be pruned."""
    made = sorted((int(v["version"]), _utc(v["timestamp"])) for v in versions)
    return [(v, at) for (v, at) in made if not pins or v <= min(pins)]


def optimized(table: Any, older_than: timedelta) -> Any:
    """LanceDB's optimize with its statistics (the synchronous `Table.optimize` drops them):
    compaction, index update, then a prune of versions made before `older_than` ago.
    `delete_unverified` stays off: a file no version names yet may be another machine's
    commit in flight. LanceDB is imported here, not with the module: `parse_duration` checks
    `probembed serve`'s options without it."""
    from lancedb.background_loop import LOOP

    return LOOP.run(table._table.optimize(cleanup_older_than=older_than, delete_unverified=False))


def swept(folder: Path, stale: timedelta = STALE_UNFINISHED) -> tuple[int, int]:
    """Remove the unfinished files (`_UNFINISHED`) in a table's folder untouched for `stale`:
    how many, and their bytes."""
    now = time.time()
    removed, freed = 0, 0
    for path in folder.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            found = path.lstat()
            if not stat.S_ISREG(found.st_mode) or not _UNFINISHED.fullmatch(path.name):
                continue
            if now - found.st_mtime >= stale.total_seconds():
                path.unlink()
                removed, freed = removed + 1, freed + found.st_size
    return removed, freed


def fragments(table: Any) -> int:
    """How many fragments the table's latest version has."""
    return int(table.stats()["fragment_stats"]["num_fragments"])


def _utc(stamp: datetime) -> datetime:
    """A version's timestamp as an aware UTC time (LanceDB gives naive local time)."""
    return stamp.astimezone(UTC)


class CollectionUpkeep(CollectionHandle):
    """A collection's compaction and pruning, under its write lock: two at once failed the
    second."""

    def compaction_due(self) -> bool:
        """Whether enough small fragments have piled up for compacting to pay.

        Compaction rewrites the small fragments (and brings the text index up to date), so
        after every small write (a service's few documents) it would rewrite far more than
        was written. Searches read unindexed and uncompacted rows as they are, so waiting
        changes no answer.
        """
        stats = self._require().stats()["fragment_stats"]
        return int(stats["num_small_fragments"]) >= COMPACT_SMALL_FRAGMENTS

    def prune_due_at(self, keep: timedelta) -> datetime:
        """When `PRUNE_VERSIONS` of the collection's versions are past the retention `keep`
        (`prunable_at`), the versions its tags hold kept."""
        table = self._require()
        pins = held(table.tags.list(), self._pin_locks())
        return prunable_at(table.list_versions(), keep, pins=list(pins.values()))

    def tags(self) -> list[Tag]:
        """The collection's tags, each with what it is (`pins.SAID`): a running write's pin,
        a stale one, one whose writer cannot be told here, or a tag of one's own."""
        return tags_of(self._require().tags.list(), self._pin_locks())

    @one_at_a_time
    def drop_tag(self, name: str, force: bool = False) -> Tag:
        """Remove a tag: a stale pin or a tag of one's own, a pin whose write may still run
        only with `force` (`pins.drop`). What was removed."""
        self.db.require_writable()
        return drop(self._require(), self._pin_locks(), name, force)

    def _pin_locks(self) -> Path:
        """Where this collection's pins keep their lock files (`pins.lock_dir`)."""
        return lock_dir(self.db.location.own_dir(self.name))

    def optimize(self) -> None:
        """What ingest runs once small fragments piled up (`ingest.finish`): `compact` with the
        default retention, a day after a version was replaced. It pruned by LanceDB's own
        rule, 7 days after a version's creation, so a version made a week ago went as soon as
        a write replaced it, under another write that started from it (its undo then
        failed)."""
        self.compact()

    @one_at_a_time  # the handle's lock before the write lock, as add and upsert take them
    def compact(self, keep: timedelta = DEFAULT_KEEP) -> Compaction:
        """Compact, then prune the versions replaced at least `keep` ago, under the write lock:
        two ingests finishing together both compacted, and LanceDB failed the second
        ("Rewrite transaction was preempted by concurrent transaction Rewrite"). LanceDB keeps
        every version (each commit's manifest, transaction and replaced data files) until
        pruned, and its own retention counts from a version's creation
        (`prune_after`)."""
        self.db.require_writable()
        with self._writing():
            return self._compacted(keep)

    @one_at_a_time
    def upkeep_if_due(self, keep: timedelta) -> Compaction | None:
        """`compact` where `compaction_due` or `PRUNE_VERSIONS` versions are past `keep`, else
        nothing (None), decided under the write lock: a compaction rewrites every fragment
        under LanceDB's million-row target, so one of a collection of a few large fragments
        and some small writes rewrote it whole (a 500k-row one held its searches that long)
        to free a few versions; and where only deletes were written, compaction was never
        due and their versions were never pruned."""
        self.db.require_writable()
        with self._writing():
            due = self.compaction_due() or self.prune_due_at(keep) <= datetime.now(UTC)
            return self._compacted(keep) if due else None

    def _compacted(self, keep: timedelta) -> Compaction:
        """`compact`'s work, under the write lock. The prune is a call of its own, after the
        compaction, so its cutoff is taken when it runs, not before a long rewrite; it stops
        below the oldest version a tag holds (a running write's pin: `pins`), where LanceDB
        failed the whole cleanup, and first removes the pins of writers gone (killed here,
        or a week ago: `pins.drop_stale`). In a folder (object storage has none) it then
        removes what killed writers left unfinished there (`swept`)."""
        table = self._require()
        before = fragments(table)
        compacted = shared_writes.committed(partial(optimized, table, NO_PRUNE))
        drop_stale(table, self._pin_locks())
        pins = held(table.tags.list(), self._pin_locks())
        versions, now = table.list_versions(), datetime.now(UTC)
        older_than = prune_after(versions, keep, now, list(pins.values()))
        pruned = shared_writes.committed(partial(optimized, table, older_than))
        folder = self.db.location.table_folder(self.name)
        stale = STALE_UNFINISHED if keep else timedelta(0)
        unfinished, unfinished_bytes = (0, 0) if isinstance(folder, str) else swept(folder, stale)
        return Compaction(
            self.name,
            before,
            fragments(table),
            int(compacted.prune.old_versions_removed + pruned.prune.old_versions_removed),
            int(compacted.prune.bytes_removed + pruned.prune.bytes_removed) + unfinished_bytes,
            int(table.version),
            *held_back(versions, keep, pins, now),
            unfinished,
        )
