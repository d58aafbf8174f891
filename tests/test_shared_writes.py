"""`shared_writes.committed`'s reading of LanceDB's errors: which are a conflict with another
writer's commit (`WriteConflictError`) and which pass through unchanged; and each write of a
collection meeting a real conflict, on disk. Two machines' concurrent writes are tested on
moto's S3 (test_s3_store)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import lancedb
import pytest

from probembed.store import (
    Batch,
    Database,
    PipelineInfo,
    UndoConflictError,
    WriteConflictError,
    filters,
)
from probembed.store.rows import WRITE_TAG
from probembed.store.shared_writes import _CONFLICTS, committed
from probembed.store.undo import UNDO_CONFLICT


def _raising(exc: BaseException):
    def run():
        raise exc

    return run


def test_a_write_that_succeeds_returns_its_result():
    assert committed(lambda: 42) == 42


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(
            "lance error: Commit conflict for version 7: This Merge transaction was preempted"
            "\nat lance/src/io/commit.rs:1:1"
        ),
        RuntimeError("Retryable commit conflict: Incompatible transaction Update vs Merge"),
        OSError("Too many concurrent writers: 10 attempts failed within 30s"),
    ],
)
def test_a_lance_conflict_is_a_write_conflict_naming_its_first_line(exc):
    with pytest.raises(WriteConflictError, match="nothing of this one was stored") as raised:
        committed(_raising(exc))
    first = str(exc).splitlines()[0]
    assert str(raised.value).endswith(first) and raised.value.__cause__ is exc
    assert "\n" not in str(raised.value)  # the engine's source location is left out


def test_every_conflict_wording_is_recognised():
    for word in _CONFLICTS:
        with pytest.raises(WriteConflictError):
            committed(_raising(RuntimeError(f"lance: {word} 3")))


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("lance error: IO error: connection reset"),
        OSError("Generic S3 error: 500"),
        RuntimeError(""),
        RuntimeError("Not found: s3://b/db/c.lance\nCommit conflict for version 2"),  # not 1st
        ValueError("Commit conflict for version 2"),  # not a Lance runtime failure
        KeyError("Incompatible transaction"),
    ],
)
def test_any_other_error_passes_through_unchanged(exc):
    with pytest.raises(type(exc)) as raised:
        committed(_raising(exc))
    assert raised.value is exc


# Real conflicts, no stand-in for LanceDB: another writer (its own connection) commits a
# restore of the latest version, same rows, right after each look this handle takes at the
# table. Lance refuses every commit made on a version a restore replaced ("Incompatible
# transaction ... concurrent transaction Restore"); its concurrent deletes, merges and
# schema changes it mostly reconciles, so a restore is what makes the conflict certain.


def batch(pipeline, ids, metadata=None):
    """A write batch of these ids."""
    texts = [f"document {i} talks about topic {i}" for i in ids]
    metadata = metadata or [{} for _ in ids]
    return Batch(ids, texts, metadata, pipeline.encode(texts), PipelineInfo.of(pipeline))


def raced(monkeypatch, collection):
    """After each look `collection` takes at its table's latest version, another writer
    commits a restore of that version."""
    other = lancedb.connect(str(collection.db.path))
    look = collection._open

    def looked():
        table = look()
        if table is not None:
            theirs = other.open_table(collection.name)
            theirs.restore(theirs.version)
        return table

    monkeypatch.setattr(collection, "_open", looked)


@pytest.fixture
def collection(tmp_path, hash_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    meta = [{"doc_id": d, "chunk": 0} for d in ("d1", "d2", "d3")]
    collection.add(batch(hash_pipeline, ["a", "b", "c"], meta))
    return collection


WRITES = {
    "delete": lambda c, p: c.delete(["a"]),
    "delete_documents": lambda c, p: c.delete_documents(["d1"]),
    "add": lambda c, p: c.add(batch(p, ["e"])),
    "add_new_column": lambda c, p: c.add(batch(p, ["e"], [{"tag": "new"}])),  # add_columns
    "upsert": lambda c, p: c.upsert(batch(p, ["a", "e"])),
    "index_text": lambda c, p: c.index_text(),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_meeting_a_real_conflict_is_a_write_conflict_that_stored_nothing(
    monkeypatch, collection, hash_pipeline, write
):
    rows = collection.rows(["a", "b", "c"], ["text", "metadata"])
    raced(monkeypatch, collection)
    with pytest.raises(WriteConflictError, match="nothing of this one was stored; run it"):
        WRITES[write](collection, hash_pipeline)
    monkeypatch.undo()
    assert collection.ids() == {"a", "b", "c"}
    assert collection.rows(["a", "b", "c"], ["text", "metadata"]) == rows
    WRITES[write](collection, hash_pipeline)  # run again, it goes through


def test_a_compaction_meeting_a_real_conflict_is_a_write_conflict(
    monkeypatch, collection, hash_pipeline
):
    for i in range(4):  # small fragments, for the compaction to rewrite
        collection.add(batch(hash_pipeline, [f"f{i}"]))
    raced(monkeypatch, collection)
    with pytest.raises(WriteConflictError, match="nothing of this one was stored"):
        collection.optimize()
    monkeypatch.undo()
    collection.optimize()
    assert collection.count() == 7


@pytest.mark.parametrize("kind", ["delete", "merge"])
def test_a_revert_meeting_a_real_conflict_says_the_stopped_writes_batches_stay(
    monkeypatch, collection, hash_pipeline, kind
):
    """A revert undoes a write that stopped part-way: when its commit conflicts, what that
    write committed stays stored, which "nothing of this one was stored" did not say."""
    start = collection.version
    collection.upsert(batch(hash_pipeline, ["a", "new"], [{"n": 2}] * 2))  # the stopped write
    written = collection.rows(["a", "new"], ["text", "metadata"])
    raced(monkeypatch, collection)
    with pytest.raises(WriteConflictError) as raised:  # its commit: the delete, or the merge
        collection.revert(start, ["new"] if kind == "delete" else ["a", "new"])
    assert UNDO_CONFLICT in str(raised.value)
    assert "nothing of this one" not in str(raised.value)
    monkeypatch.undo()
    assert collection.rows(["a", "new"], ["text", "metadata"]) == written  # still stored


def test_a_revert_told_what_stopped_the_write_names_it_beside_its_conflict(
    monkeypatch, collection, hash_pipeline
):
    """The conflict, raised in place of what stopped the write, hid it."""
    start = collection.version
    collection.upsert(batch(hash_pipeline, ["new"]))  # the stopped write's first batch
    stop = OSError("disk full")
    raced(monkeypatch, collection)
    with pytest.raises(UndoConflictError) as raised:
        collection.revert(start, ["new"], stopped_by=stop)
    said = str(raised.value)
    assert said.startswith("this write stopped part-way (OSError: disk full), and undoing it")
    assert UNDO_CONFLICT in said and raised.value.stopped_by is stop
    assert isinstance(raised.value, WriteConflictError)  # a 409 in the service
    monkeypatch.undo()
    assert collection.ids() == {"a", "b", "c", "new"}  # as the message says


def raced_after_first(monkeypatch, table, collection):
    """After the first delete through `table` commits, another writer commits a restore of
    the latest version, so the next commit made on the version before it conflicts."""
    other = lancedb.connect(str(collection.db.path))
    delete = table.delete

    def deleted_then_raced(where):
        done = delete(where)
        theirs = other.open_table(collection.name)
        theirs.restore(theirs.version)
        monkeypatch.setattr(table, "delete", delete)  # once
        return done

    monkeypatch.setattr(table, "delete", deleted_then_raced)


@pytest.mark.parametrize("kind", ["upsert", "delete"])
def test_a_removal_in_parts_that_fails_part_way_puts_the_whole_step_back(
    monkeypatch, collection, hash_pipeline, kind
):
    """A removal names `IDS_PER_CONDITION` ids a commit (one `IN` of a sync's 100k held
    +276 MB): a part that fails after others committed puts the upsert's rows and every id
    removed back as they were, so the step lands whole or not at all, as its one commit did,
    and its error says nothing of it was stored."""
    monkeypatch.setattr(filters, "IDS_PER_CONDITION", 2)
    more = [f"m{i}" for i in range(5)]
    collection.add(batch(hash_pipeline, more, [{"doc_id": i, "chunk": 0} for i in more]))
    ids = sorted(collection.ids())
    before, version = collection.rows(ids, ["text", "metadata", WRITE_TAG]), collection.version
    raced_after_first(monkeypatch, collection._require(), collection)
    meta = [{"doc_id": i, "chunk": 0} for i in ("a", "new")]
    step = {  # after the upsert's merge, or the delete's first part, a part meets the race
        "upsert": lambda: collection.upsert(batch(hash_pipeline, ["a", "new"], meta), ["b", *more]),
        "delete": lambda: collection.delete(["b", *more]),
    }
    with pytest.raises(WriteConflictError, match="nothing of this one was stored"):
        step[kind]()
    assert collection.version > version + 1  # parts were committed, then put back
    assert sorted(collection.ids()) == ids
    assert collection.rows(ids, ["text", "metadata", WRITE_TAG]) == before


DELETES = {
    "delete": (lambda c: c.delete(["a"]), 1),
    "delete_documents": (lambda c: c.delete_documents(["d1"]), (1, [])),
}


@pytest.mark.parametrize("kind", list(DELETES))
def test_a_delete_from_another_handle_waits_for_the_write_lock(
    monkeypatch, collection, hash_pipeline, kind
):
    """A delete took no write lock: from another handle (another process, on one machine) it
    landed between a write's look at the table and that write's commit, and Lance refused the
    write's new metadata column after it ("preempted by concurrent transaction Delete"), a
    conflict on a directory whose lock holds every writer. The write pauses after its last
    look until the delete has committed or is waiting for the write lock, whichever it does."""
    writes = batch(hash_pipeline, ["e"], [{"tag": "new"}])  # a new column: add_columns
    other = Database(collection.db.path).open("docs")
    inside, delete_waits = threading.Event(), threading.Event()
    types, writing = collection.column_types, other._writing

    def pausing(*args):  # the upsert's last look at its table before it commits a column
        found = types(*args)
        inside.set()
        assert delete_waits.wait(60)
        return found

    def taking():  # the delete is about to wait for the lock the upsert holds
        delete_waits.set()
        return writing()

    monkeypatch.setattr(collection, "column_types", pausing)
    monkeypatch.setattr(other, "_writing", taking)
    delete, deleted = DELETES[kind]
    with ThreadPoolExecutor(1) as pool:
        upserted = pool.submit(collection.upsert, writes)
        assert inside.wait(60)
        try:
            assert delete(other) == deleted
        finally:
            delete_waits.set()  # without the lock: the delete has committed
        assert upserted.result() == (1, 0, 0)
    assert collection.ids() == other.ids() == {"b", "c", "e"}
    assert collection.rows(["e"], ["tag"]) == {"e": {"id": "e", "tag": "new"}}


def test_a_relocate_meeting_a_real_conflict_is_a_write_conflict_that_changed_nothing(
    monkeypatch, tmp_path, hash_pipeline
):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    meta = [{"doc_id": "d1", "chunk": n, "file_path": "/old/d1.md"} for n in range(2)]
    collection.add(batch(hash_pipeline, ["d1#0", "d1#1"], meta))
    columns = ["text", "metadata", "file_path", WRITE_TAG]  # a new tag: searchers read again
    rows = collection.rows(["d1#0", "d1#1"], columns)
    raced(monkeypatch, collection)
    with pytest.raises(WriteConflictError, match="nothing of this one was stored; run it"):
        collection.relocate({"d1": "/new/d1.md"})
    monkeypatch.undo()
    assert collection.rows(["d1#0", "d1#1"], columns) == rows
    assert collection.relocate({"d1": "/new/d1.md"}) == 2  # run again, it goes through
    moved = collection.rows(["d1#0", "d1#1"], ["file_path"])
    assert {r["file_path"] for r in moved.values()} == {"/new/d1.md"}


def test_declaring_the_key_meeting_a_real_conflict_is_a_write_conflict_that_changed_nothing(
    monkeypatch, tmp_path, hash_pipeline
):
    """`keyed` declares `id` the primary key of a collection made before new ones carried
    it, in one schema commit: meeting another writer's commit, it declares nothing."""
    import pyarrow as pa

    from probembed.store import creation as collection_module
    from probembed.store.shared_writes import PRIMARY_KEY_MARKERS, keyed

    def keys(table):
        field = table.schema.field("id")
        return {key.decode() for key in field.metadata or {}} & set(PRIMARY_KEY_MARKERS)

    made = collection_module.table_schema

    def older(*args, **kwargs):  # made as before ids were the primary key
        schema = made(*args, **kwargs)
        return schema.set(schema.get_field_index("id"), pa.field("id", pa.string(), False))

    with monkeypatch.context() as patched:
        patched.setattr(collection_module, "table_schema", older)
        collection = Database(tmp_path / "db", create=True).collection("docs")
        collection.add(batch(hash_pipeline, ["a", "b"]))
    schema, rows = collection._require().schema, collection.rows(["a", "b"], ["text"])
    assert not keys(collection._require())
    raced(monkeypatch, collection)
    with pytest.raises(WriteConflictError, match="nothing of this one was stored; run it"):
        keyed(collection._require())
    monkeypatch.undo()
    table = collection._require()
    assert table.schema == schema and not keys(table)
    assert collection.rows(["a", "b"], ["text"]) == rows
    keyed(table)  # run again, it goes through
    assert keys(collection._require())


@pytest.fixture
def plain(tmp_path, hash_pipeline):
    """A collection of whole records a..h, for a sync."""
    from probembed.store import Record, ingest

    collection = Database(tmp_path / "plain", create=True).collection("docs")
    ingest([Record(i, f"document {i}") for i in "abcdefgh"], collection, hash_pipeline)
    return collection


def synced_with_a_race(monkeypatch, collection, pipeline, between):
    """A sync of a and b alone (removing c..h, 2 ids a commit), `between` run right after
    its removal's first part commits; its error."""
    from probembed.store import Record, ingest

    monkeypatch.setattr(filters, "IDS_PER_CONDITION", 2)
    table = collection._require()
    delete = table.delete

    def deleted_then(where):
        done = delete(where)
        monkeypatch.setattr(table, "delete", delete)  # once
        between()
        return done

    monkeypatch.setattr(table, "delete", deleted_then)
    with pytest.raises(WriteConflictError) as raised:
        ingest([Record("a", "ours a"), Record("b", "ours b")], collection, pipeline, sync=True)
    monkeypatch.undo()
    return raised.value


def test_an_undone_sync_leaves_a_row_another_machine_wrote_since_as_it_wrote_it(
    monkeypatch, plain, hash_pipeline
):
    """Between a sync's merge and its removal's second part, another machine (its own
    connection, no lock of ours) rewrote `a`, with a tag of its own as every write gives
    its rows; the part then fails (a restore after it makes the conflict certain). The
    step's put-back and the sync's undo put back every id of the sync but `a`: putting it
    back too lost that writer's commit without a word."""
    ids = sorted(plain.ids())
    before = plain.rows(ids, ["text", WRITE_TAG])
    other = lancedb.connect(str(plain.db.path))

    def theirs_then_raced():
        table = other.open_table("docs")
        table.update(where="id = 'a'", values={"text": "theirs", WRITE_TAG: 7})
        table.restore(table.version)

    raised = synced_with_a_race(monkeypatch, plain, hash_pipeline, theirs_then_raced)
    assert "nothing of this one was stored" in str(raised)
    after = plain.rows(ids, ["text", WRITE_TAG])
    assert after.pop("a") == {"id": "a", "text": "theirs", WRITE_TAG: 7}
    assert after == {i: row for i, row in before.items() if i != "a"}


@pytest.mark.parametrize("undo_conflicts", [False, True])
def test_a_sync_whose_steps_put_back_conflicted_says_what_holds_once(
    monkeypatch, plain, hash_pipeline, undo_conflicts
):
    """The removal's put-back met another writer's commit (an `UndoConflictError`), and the
    sync's own undo ran after it: when that undo conflicted too, the message held the whole
    explanation twice; when it succeeded, the step's message was raised anyway, saying the
    batches were still stored when nothing of the sync was."""
    ids = sorted(plain.ids())
    before = plain.rows(ids, ["text", WRITE_TAG])
    other = lancedb.connect(str(plain.db.path))
    look, looks = plain._open, []

    def restore():
        theirs = other.open_table("docs")
        theirs.restore(theirs.version)

    def looked():  # the put-back's look, and the sync's undo's when it conflicts too
        table = look()
        looks.append(1)
        if undo_conflicts or len(looks) == 1:
            restore()
        return table

    def raced():
        restore()  # the next part conflicts
        monkeypatch.setattr(plain, "_open", looked)

    raised = synced_with_a_race(monkeypatch, plain, hash_pipeline, raced)
    said = str(raised)
    if undo_conflicts:
        assert isinstance(raised, UndoConflictError) and said.count("undoing it failed") == 1
        assert not isinstance(raised.stopped_by, UndoConflictError)
        assert said.startswith("this write stopped part-way (WriteConflictError: ")
        assert UNDO_CONFLICT in said
    else:  # undone whole: what stopped it, as a sync undone without a conflict says
        assert not isinstance(raised, UndoConflictError)
        assert "nothing of this one was stored" in said and UNDO_CONFLICT not in said
        assert plain.rows(ids, ["text", WRITE_TAG]) == before
