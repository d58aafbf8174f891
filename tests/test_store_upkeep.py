"""Disk upkeep: `Collection.compact` frees what many small writes left and loses nothing."""

from __future__ import annotations

import json
import random
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.store import Database, Record, ingest
from probembed.store.errors import WriteConflictError
from probembed.store.pins import PIN_EXPIRY, PIN_PREFIX
from probembed.store.upkeep import (
    COMPACT_SMALL_FRAGMENTS,
    NO_PRUNE,
    PRUNE_VERSIONS,
    fragments,
    held_back,
    parse_duration,
    prunable_at,
    prune_after,
)

runner = CliRunner()


def disk_bytes(root: Path) -> int:
    """Bytes of every file under a database directory."""
    return sum(disk_files(root).values())


def disk_files(root: Path) -> dict[Path, int]:
    """Every file under a database directory, with its size."""
    return {f: f.stat().st_size for f in root.rglob("*") if f.is_file()}


def removed_bytes(before: dict[Path, int], root: Path) -> int:
    """Bytes of the files of `before` no longer there: what a prune freed of them."""
    return sum(size for path, size in before.items() if not path.exists())


#: Bytes of the manifest and transaction a compaction commits first (its reservation of
#: fragment ids), which a prune of every version but the latest removes as well.
RESERVATION_BYTES = 16_384


def freed_as_said(before: dict[Path, int], root: Path, said: int) -> bool:
    """Whether a prune freed what it says: the files of `before` gone, and at most the
    reservations of the compactions it ran (files made meanwhile, not in `before`)."""
    return removed_bytes(before, root) <= said <= removed_bytes(before, root) + RESERVATION_BYTES


def text_of(i: int) -> str:
    """The text of item i."""
    return f"text number {i} about topic {i % 7}"


def small_writes(collection, pipeline, count: int, start: int = 0) -> list[str]:
    """One item per ingest, as a service's clients write: each its own LanceDB version."""
    ids = [f"item-{i}" for i in range(start, start + count)]
    for i, item in zip(range(start, start + count), ids, strict=True):
        ingest([Record(item, text_of(i))], collection, pipeline)
    return ids


def spanning(collection, pipeline, ids: list[str], after: int) -> None:
    """Write until a version made over 2 s after version `after` exists: what a 0 retention
    (less LanceDB's clock slack) prunes is then at least every version up to `after`."""
    table = collection._require()
    replaced = next(v["timestamp"] for v in table.list_versions() if v["version"] > after)
    while table.list_versions()[-1]["timestamp"] - replaced < timedelta(seconds=2):
        ids += small_writes(collection, pipeline, 1, start=len(ids) + 1000)


def test_prune_after_counts_from_when_a_version_was_replaced():
    """LanceDB counts a retention from a version's creation: the version a running write
    started from, made a week ago and replaced a second ago, went under any retention below
    a week; here it stays for `keep` after its replacement."""
    now = datetime(2026, 1, 8, 12, 0, 0).astimezone()
    week_ago = now - timedelta(days=7)
    versions = [
        {"version": 1, "timestamp": (week_ago - timedelta(hours=1)).replace(tzinfo=None)},
        {"version": 2, "timestamp": week_ago.replace(tzinfo=None)},  # replaced a second ago
        {"version": 3, "timestamp": (now - timedelta(seconds=1)).replace(tzinfo=None)},
    ]
    older_than = prune_after(versions, timedelta(hours=1), now)
    cutoff = now - older_than
    assert versions[0]["timestamp"].astimezone() < cutoff  # replaced a week ago: pruned
    assert versions[1]["timestamp"].astimezone() >= cutoff  # replaced a second ago: kept
    assert prune_after(versions[1:], timedelta(hours=1), now) == NO_PRUNE


def test_a_tag_holding_versions_is_named_though_its_own_version_stayed_anyway():
    """Versions made within `CLOCK_SLACK` of the cutoff stay: a pin on one of them held the
    versions just before it, and the compaction said "1 more past the retention held by
    tag(s)" naming none. A tag on a version replaced a retention ago is named."""
    start = datetime(2026, 1, 8, 12, 0, 0).astimezone()
    made = [0, 19.2, 19.8, 20.5, 35]  # seconds after start; version 3 pinned
    versions = [
        {"version": i + 1, "timestamp": (start + timedelta(seconds=s)).replace(tzinfo=None)}
        for i, s in enumerate(made)
    ]
    now = start + timedelta(seconds=40)
    held, names = held_back(versions, timedelta(seconds=10), {"pin": 3}, now)
    assert held == 1 and names == ("pin",)


def test_no_retention_prunes_every_version_but_the_latest(tmp_path, hash_pipeline):
    """`--keep 0` left the version made a millisecond before the compaction's (its
    reservation of fragment ids, which still names every replaced data file): the clock's
    one-second slack kept it, and a run again freed nothing."""
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 6)

    done = collection.compact(timedelta(0))

    table = collection._require()
    assert [int(v["version"]) for v in table.list_versions()] == [done.version]
    data = {f.name for f in (root / "c.lance" / "data").iterdir()}
    assert len(data) == fragments(table) == 1  # every replaced data file went
    again = collection.compact(timedelta(0))
    assert (again.versions_removed, again.bytes_freed) == (0, 0)
    assert collection.ids() == set(ids)


def test_a_prune_is_due_once_enough_versions_were_replaced_a_retention_ago():
    """`prunable_at`: when the version replacing the `PRUNE_VERSIONS`-th oldest was made, plus
    the retention; with too few versions replaced yet, no sooner than a retention from now."""
    now = datetime(2026, 1, 8, 12, 0, 0).astimezone()
    made = [now - timedelta(minutes=PRUNE_VERSIONS + 5 - i) for i in range(PRUNE_VERSIONS + 5)]
    versions = [{"version": i + 1, "timestamp": t.replace(tzinfo=None)} for i, t in enumerate(made)]
    keep = timedelta(hours=1)
    assert prunable_at(versions, keep, now) == made[PRUNE_VERSIONS] + keep
    assert prunable_at(versions[:PRUNE_VERSIONS], keep, now) == now + keep
    assert prunable_at(versions, timedelta(0), now) <= now  # due now with no retention


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", 0), ("90s", 90), ("30m", 1800), ("12h", 43200), ("1.5d", 129600)]
)
def test_a_retention_is_a_number_and_a_unit(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["1", "1 day", "-1h", "h", "1y", ""])
def test_a_retention_without_a_unit_is_refused_naming_it(text):
    with pytest.raises(ValueError, match=rf"--keep {text!r} is not a duration"):
        parse_duration(text)


def test_compacting_many_small_writes_frees_disk_and_keeps_every_item(tmp_path, hash_pipeline):
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 120)
    spanning(collection, hash_pipeline, ids, after=len(collection._require().list_versions()) // 2)
    before, versions = disk_files(root), len(collection._require().list_versions())

    done = collection.compact(timedelta(0))

    assert done.versions_removed > versions // 2
    assert freed_as_said(before, root, done.bytes_freed)
    assert done.bytes_freed > 0 and done.fragments_after <= done.fragments_before
    reopened = Database(root).open("c")
    assert reopened.count() == len(ids) and reopened.ids() == set(ids)
    for item in random.Random(0).sample(ids, 10):  # found by its own text, read whole
        hit = reopened.search(text_of(int(item.split("-")[1])), k=1)["hits"][0]
        assert (hit["id"], hit["text"]) == (item, text_of(int(item.split("-")[1])))


def test_a_long_retention_prunes_nothing_a_reader_may_hold(tmp_path, hash_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("c")
    small_writes(collection, hash_pipeline, 20)
    versions = len(collection._require().list_versions())
    done = collection.compact()  # the default: a day after a version was replaced
    assert done.versions_removed == 0
    assert len(collection._require().list_versions()) >= versions


def test_an_undo_to_a_pruned_version_says_so_and_what_stays(tmp_path, hash_pipeline):
    """A chunked write's undo reads the version it started from; pruned, LanceDB said only
    'Version 3 no longer exists', naming neither the compaction nor what the write left."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 3)
    start = collection.version
    ingest([Record("item-0", "a changed text")], collection, hash_pipeline, upsert=True)
    spanning(collection, hash_pipeline, ids, after=start)
    collection.compact(timedelta(0))
    pruned = rf"version {start}, .* was pruned .* still stored"
    with pytest.raises(WriteConflictError, match=pruned):
        collection.revert(start, ["item-0"])


def varint(value: int) -> bytes:
    """A non-negative integer as protobuf writes it."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def made_days_ago(root: Path, name: str, version: int, days: int) -> None:
    """Move a version's creation back `days` in its manifest, as if it was made then: LanceDB
    stamps a version with the clock at its commit, and a test does not wait a week. The time
    is a protobuf Timestamp, seconds first (field 1); days earlier, they keep their varint's
    length, so the manifest keeps its layout. Before any handle reads that version."""
    made = next(
        v["timestamp"]
        for v in Database(root).open(name)._require().list_versions()
        if v["version"] == version
    )
    seconds = int(made.timestamp())  # naive local time, as `timestamp` reads it
    old, new = b"\x08" + varint(seconds), b"\x08" + varint(seconds - days * 86400)
    manifest = root / f"{name}.lance" / "_versions" / f"{2**64 - 1 - version:020d}.manifest"
    data = manifest.read_bytes()
    assert len(old) == len(new) and data.count(old) == 1
    manifest.write_bytes(data.replace(old, new))


def test_an_ingests_compaction_keeps_a_week_old_version_it_just_replaced(tmp_path, hash_pipeline):
    """Ingest's compaction (`Collection.optimize`) pruned by LanceDB's rule, 7 days after a
    version's creation: a version made 8 days ago went as soon as this ingest replaced it,
    and a write beside it that started from that version could not be undone. It stays a
    day after its replacement, as `compact` keeps it."""
    root = tmp_path / "db"
    small_writes(Database(root, create=True).collection("c"), hash_pipeline, 1)
    start = Database(root).open("c").version
    made_days_ago(root, "c", start, days=8)
    collection = Database(root).open("c")
    records = [Record(f"item-{i}", text_of(i)) for i in range(1, 1 + COMPACT_SMALL_FRAGMENTS)]

    ingest(records, collection, hash_pipeline, batch_size=1)  # a commit each, then compacts

    table = collection._require()
    assert fragments(table) == 1  # it compacted
    assert start in {int(v["version"]) for v in table.list_versions()}
    collection.revert(start, ["item-1"])  # an undo to the version it started from
    assert collection.ids() == {f"item-{i}" for i in range(len(records) + 1)} - {"item-1"}


def test_writes_racing_compactions_lose_nothing(tmp_path, hash_pipeline):
    """Writers and compactions from their own handles (as other processes hold them) take
    the collection's write lock in turn: every write lands, counted once."""
    root = tmp_path / "db"
    small_writes(Database(root, create=True).collection("c"), hash_pipeline, 2)
    rng = random.Random(7)
    sizes = [rng.randint(1, 4) for _ in range(40)]
    errors: list[BaseException] = []

    def write() -> None:
        collection = Database(root).open("c")
        start = 100
        try:
            for size in sizes:
                records = [Record(f"w{start + i}", f"racing text {start + i}") for i in range(size)]
                ingest(records, collection, hash_pipeline)
                start += size
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    def compact() -> None:
        collection = Database(root).open("c")
        try:
            for _ in range(8):
                collection.compact(timedelta(0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write), threading.Thread(target=compact)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    reopened = Database(root).open("c")
    written = {f"w{100 + i}" for i in range(sum(sizes))}
    assert reopened.count() == 2 + sum(sizes)
    assert reopened.ids() == written | {"item-0", "item-1"}


def test_the_compact_command_frees_a_database_of_many_small_ingests(tmp_path, hash_pipeline):
    root = tmp_path / "db"
    database = Database(root, create=True)
    ids = {name: small_writes(database.collection(name), hash_pipeline, 30) for name in "ab"}
    spanning(database.open("b"), hash_pipeline, ids["b"], after=20)
    before = disk_files(root)

    result = runner.invoke(app, ["compact", "--all", "--db", str(root), "--keep", "0", "--json"])

    assert result.exit_code == 0, result.output
    done = {line["collection"]: line for line in map(json.loads, result.stdout.splitlines())}
    assert set(done) == {"a", "b"} and done["b"]["versions_removed"] >= 20
    assert freed_as_said(before, root, sum(d["bytes_freed"] for d in done.values()))
    for name, written in ids.items():
        assert Database(root).open(name).ids() == set(written)
    said = runner.invoke(app, ["compact", "-c", "a", "--db", str(root)])  # a day: nothing goes
    assert said.exit_code == 0 and "a: fragments 1 -> 1, 0 old version(s) removed" in said.output


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["-c", "a", "--keep", "1 day"], "--keep '1 day' is not a duration"),
        (["-c", "a", "--all"], "name one collection (-c NAME) or pass --all"),
        ([], "name one collection (-c NAME) or pass --all"),
        (["-c", "nope"], "nope"),
    ],
)
def test_the_compact_command_refuses_what_it_cannot_do_naming_it(
    tmp_path, hash_pipeline, arguments, says
):
    root = tmp_path / "db"
    small_writes(Database(root, create=True).collection("a"), hash_pipeline, 2)
    result = runner.invoke(app, ["compact", "--db", str(root), *arguments])
    assert result.exit_code == 2
    assert says in " ".join(result.stderr.split())
    assert Database(root).open("a").count() == 2


def test_a_sync_outlives_a_prune_of_the_version_it_would_be_undone_to(tmp_path, hash_pipeline):
    """A sync that failed more than the retention after its first commit found the version
    it started from pruned by another process's compaction, and could not be undone (it
    said so): it pins that version with a LanceDB tag while it runs, every prune stops below
    the pin, and the tag goes when the write ends."""
    root = tmp_path / "db"
    small_writes(Database(root, create=True).collection("c"), hash_pipeline, 3)
    start = Database(root).open("c").version
    made_days_ago(root, "c", start, days=8)  # a prune of no retention takes it once replaced
    collection = Database(root).open("c")
    before = {i: row["text"] for i, row in collection.rows(sorted(collection.ids())).items()}
    records = [Record(f"item-{i}", f"item {i}, edited") for i in range(3)]
    compactions = []

    def compacted_elsewhere(written: int) -> None:  # after the first commit
        if not compactions:
            compactions.append(Database(root).open("c").compact(timedelta(0)))

    def encode(texts):  # the second batch fails
        if compactions:
            raise OSError("disk full")
        return hash_pipeline.encode(texts)

    with pytest.raises(OSError, match="disk full"):
        ingest(
            [*records, Record("new", "a new item")],
            collection,
            hash_pipeline,
            batch_size=2,
            sync=True,
            on_commit=compacted_elsewhere,
            encode=encode,
        )

    assert len(compactions) == 1
    assert {i: row["text"] for i, row in collection.rows(sorted(collection.ids())).items()} == (
        before
    )
    table = collection._require()
    assert table.tags.list() == {}  # the pin went with the write
    Database(root).open("c").compact(timedelta(0))
    assert start not in {int(v["version"]) for v in table.list_versions()}  # pruned now


def test_a_prune_keeps_what_a_tag_holds_and_drops_a_dead_writers_pin(tmp_path, hash_pipeline):
    """A tagged version older than the cutoff made LanceDB fail the whole cleanup ("tagged
    version(s) have been marked for cleanup"): a prune stops below the oldest tag (a user's
    own here), and first removes a pin older than `PIN_EXPIRY` (a writer killed before it
    could remove its own)."""
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 4)
    spanning(collection, hash_pipeline, ids, after=2)  # versions made over 2 s apart
    table = collection._require()
    release = collection.version
    ids += small_writes(collection, hash_pipeline, 2, start=100)
    stale = datetime.now(UTC) - PIN_EXPIRY - timedelta(hours=1)
    dead = f"{PIN_PREFIX}{int(stale.timestamp())}-0123abcd"
    table.tags.create(dead, 2)
    table.tags.create("release", release)

    done = collection.compact(timedelta(0))

    assert set(table.tags.list()) == {"release"}
    kept = {int(v["version"]) for v in table.list_versions()}
    assert done.versions_removed > 0 and 2 not in kept
    assert set(range(release, collection.version + 1)) <= kept  # from the tagged one on
    assert collection.ids() == set(ids)


def test_a_compaction_names_the_tags_holding_versions_past_the_retention(tmp_path, hash_pipeline):
    """A user's own tag, or the pin of a writer killed before removing it (for a week),
    holds its version and every later one from every prune, and nothing said so: the
    result, its line (the CLI's, the service's log) and --json name them and count what
    they hold, so an operator can delete a stale one."""
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 3)
    table, release = collection._require(), collection.version
    pin = f"{PIN_PREFIX}{int(datetime.now(UTC).timestamp())}-0123abcd"  # a killed writer's
    table.tags.create("release", release)
    table.tags.create(pin, release - 1)
    ids += small_writes(collection, hash_pipeline, 3, start=100)
    spanning(collection, hash_pipeline, ids, after=release + 2)

    done = collection.compact(timedelta(0))

    assert done.held_by == tuple(sorted(["release", pin])) and done.versions_held >= 2
    assert f"more past the retention held by tag(s) {', '.join(done.held_by)}" in str(done)
    said = runner.invoke(app, ["compact", "-c", "c", "--db", str(root), "--keep", "0", "--json"])
    assert said.exit_code == 0, said.output
    assert json.loads(said.stdout)["held_by"] == list(done.held_by)
    for name in done.held_by:
        table.tags.delete(name)
    freed = collection.compact(timedelta(0))
    assert (freed.versions_held, freed.held_by) == (0, ()) and "held" not in str(freed)
    assert freed.versions_removed >= done.versions_held
    assert collection.ids() == set(ids)


#: A writer that pins the collection's latest version and holds the pin until its stdin
#: closes, in a process of its own: what a chunked ingest does while it runs.
PINNING_WRITER = """
import sys
from probembed.store import Database

collection = Database(sys.argv[1]).open("c")
with collection.pinned(collection.version):
    print("pinned", flush=True)
    sys.stdin.read()
"""


def test_a_killed_writers_pin_is_told_apart_from_a_running_ones_and_goes_at_the_next_compaction(
    tmp_path, hash_pipeline
):
    """A writer killed mid-write (SIGKILL, a power cut) left its pin, which held its start
    version and every later one from every prune for a week, and nothing told it from the
    pin of a write still running. The writer holds a lock file for its pin: a compaction
    keeps a running writer's pin and removes a dead one's."""
    import signal
    import subprocess
    import sys

    from probembed.store.pins import ENDED, RUNNING

    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 3)
    writer = subprocess.Popen(
        [sys.executable, "-c", PINNING_WRITER, str(root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "pinned\n"
        ids += small_writes(collection, hash_pipeline, 3, start=100)
        [pin] = collection.tags()
        assert pin.state == RUNNING
        running = collection.compact(timedelta(0))
        assert running.held_by == (pin.name,) and running.versions_held > 0
        writer.send_signal(signal.SIGKILL)  # its `finally` never runs: the tag stays
        writer.wait(timeout=60)
    finally:
        writer.kill()
    assert [(t.name, t.state) for t in collection.tags()] == [(pin.name, ENDED)]

    done = collection.compact(timedelta(0))

    assert collection.tags() == [] and (done.versions_held, done.held_by) == (0, ())
    assert [int(v["version"]) for v in collection._require().list_versions()] == [done.version]
    assert not any((root / ".probembed" / "c" / "pins").iterdir())  # its lock file went too
    assert collection.ids() == set(ids)


def test_the_pins_command_lists_the_tags_and_drops_one_a_running_write_may_need_only_by_force(
    tmp_path, hash_pipeline
):
    """A stale pin could be deleted only through LanceDB's Python API; `probembed pins`
    lists the tags with what each is, and --drop removes one, refusing a pin whose write may
    still run (here one with no lock file on this machine: another machine's, an earlier
    release's) unless forced."""
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    small_writes(collection, hash_pipeline, 3)
    table = collection._require()
    pin = f"{PIN_PREFIX}{int(datetime.now(UTC).timestamp())}-0123abcd"  # no lock file here
    table.tags.create(pin, 2)
    table.tags.create("release", 3)
    base = ["pins", "-c", "c", "--db", str(root)]

    listed = runner.invoke(app, [*base, "--json"])
    assert listed.exit_code == 0, listed.output
    states = {line["name"]: line["state"] for line in map(json.loads, listed.stdout.splitlines())}
    assert states == {pin: "unknown", "release": "own"}
    shown = runner.invoke(app, base)
    assert shown.exit_code == 0 and "tags of collection 'c'" in shown.stdout
    assert "release" in shown.stdout

    refused = runner.invoke(app, [*base, "--drop", pin])
    assert refused.exit_code == 2
    said = " ".join(refused.stderr.split())
    assert f"tag {pin!r} is a pin of a write on another machine" in said and "by force" in said
    assert set(table.tags.list()) == {pin, "release"}
    missing = runner.invoke(app, [*base, "--drop", "nope"])
    assert missing.exit_code == 2
    assert f"no tag 'nope' on this collection; its tags: {pin}, release" in missing.stderr

    dropped = runner.invoke(app, [*base, "--drop", pin, "--drop", "release", "--force"])
    assert dropped.exit_code == 0, dropped.output
    assert f"dropped tag {pin!r} (version 2)" in dropped.stderr
    assert table.tags.list() == {}
    none = runner.invoke(app, base)
    assert "collection 'c' has no tags" in none.stderr


def test_a_compaction_removes_what_killed_writers_left_unfinished_once_stale(
    tmp_path, hash_pipeline
):
    """A compaction killed mid-rewrite left the data file it was writing (`data/.tmp` and six
    characters: 125 MB measured), which no manifest names and LanceDB's cleanup never
    removes, `--keep 0` and `delete_unverified` alike; so did a commit's staged manifest
    (`N.manifest#1`). A compaction removes them once untouched for `STALE_UNFINISHED`; a
    fresh one may be a live writer's (on another machine sharing the folder) and stays but
    under no retention, which is for a database nobody else writes."""
    import os
    import time

    from probembed.store.upkeep import STALE_UNFINISHED

    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ids = small_writes(collection, hash_pipeline, 3)
    table = root / "c.lance"
    stale = [table / "data" / ".tmpAbC123", table / "_versions" / "5.manifest#1"]
    fresh = table / "data" / ".tmpXyZ789"
    then = time.time() - STALE_UNFINISHED.total_seconds() - 60
    for path in [*stale, fresh]:
        path.write_bytes(b"\0" * 4096)
    for path in stale:
        os.utime(path, (then, then))
    before = disk_files(root)

    done = collection.compact(timedelta(hours=1))

    assert [path.exists() for path in [*stale, fresh]] == [False, False, True]
    assert done.unfinished_removed == 2 and "(with 2 unfinished file(s)" in str(done)
    assert freed_as_said(before, root, done.bytes_freed)
    assert collection.compact(timedelta(0)).unfinished_removed == 1  # nobody else writes
    assert not fresh.exists() and collection.ids() == set(ids)
