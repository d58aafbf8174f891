"""Disk upkeep of a collection: compact its small fragments and prune the versions nobody needs.

Every LanceDB commit is a version (a manifest, a transaction file, the commit's data files),
and LanceDB keeps every one until it is pruned: a service's small writes left 33 MB on disk
for 2.5 MB of live rows. `Collection.compact` compacts and then prunes with `prune_after`,
the retention read as "replaced at least this long ago" (LanceDB prunes only inside its
optimize, which compacts first); ingest runs it once small fragments piled up
(`Collection.optimize`), the service's background pass where that is due
(`probembed.service.state`), `probembed compact` on demand.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lancedb.background_loop import LOOP

#: How long a version is kept after a newer one replaced it, unless told otherwise.
#: What reads an old version: a searcher lists a version and then takes its rows at that
#: version (seconds; minutes for a first load of millions of rows), here or on another machine
#: of the same bucket; and an undo (`Collection.revert`), which puts a stopped chunked write's
#: ids back as they were at the version the write started from, i.e. the version its first
#: commit replaced, so that version must outlive the whole write. The service's own chunked
#: writes hold the collection's write lock through their undo, and its background upkeep
#: takes that lock, so none of them ever meets a prune; a CLI ingest beside the service (or
#: beside `probembed compact`) is protected for a day after its first commit. A day bounds
#: disk by a day of writes, not by all of them (LanceDB's own default is 7 days, and counts
#: them from a version's creation, which `prune_after` does not).
DEFAULT_KEEP = timedelta(days=1)
#: Versions replaced less than this before the cutoff are kept too: LanceDB takes its own
#: "now" when it prunes, a moment after `prune_after` took its.
CLOCK_SLACK = timedelta(seconds=1)
#: Longer than any collection's history: a compaction that prunes nothing.
NO_PRUNE = timedelta(days=3650)
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

    def to_json(self) -> dict[str, Any]:
        """As `--json` prints it."""
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"{self.collection}: fragments {self.fragments_before} -> {self.fragments_after}, "
            f"{self.versions_removed} old version(s) removed, {self.bytes_freed:,} bytes freed"
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
    versions: Sequence[Mapping[str, Any]], keep: timedelta, now: datetime | None = None
) -> timedelta:
    """The `cleanup_older_than` that prunes exactly the versions replaced at least `keep` ago.

    LanceDB prunes by a version's creation time: a version made a week ago and replaced a
    second ago (the start of a write now running, which its undo reads) went at once under
    any retention shorter than a week. What a reader or an undo holds is the version that
    was latest when it began, so the clock that matters starts when the next version
    replaced it. Versions are made in order, so the ones to prune are a prefix: every version
    before the newest one replaced by `now - keep` goes, and the cutoff is set just below the
    creation of the version that replaced it (LanceDB keeps a version created at or after the
    cutoff, and always the latest). `versions` are `Table.list_versions()` rows, whose naive
    timestamps are local time.
    """
    now = datetime.now(UTC) if now is None else now
    made = sorted((int(v["version"]), _utc(v["timestamp"])) for v in versions)
    due = [after for (_, after) in made[1:] if after <= now - keep]
    if not due:
        return NO_PRUNE
    return now - (due[-1] - CLOCK_SLACK)


def optimized(table: Any, older_than: timedelta) -> Any:
    """LanceDB's optimize with its statistics (the synchronous `Table.optimize` drops them):
    compaction, index update, then a prune of versions made before `older_than` ago.
    `delete_unverified` stays off: a file no version names yet may be another machine's
    commit in flight."""
    return LOOP.run(table._table.optimize(cleanup_older_than=older_than, delete_unverified=False))


def fragments(table: Any) -> int:
    """How many fragments the table's latest version has."""
    return int(table.stats()["fragment_stats"]["num_fragments"])


def _utc(stamp: datetime) -> datetime:
    """A version's timestamp as an aware UTC time (LanceDB gives naive local time)."""
    return stamp.astimezone(UTC)
