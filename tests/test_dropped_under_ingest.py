"""A collection dropped while an ingest runs stops the ingest; it is not made again.

`probembed drop race2` (or the service's DELETE) during `probembed ingest race2.jsonl
--batch-size 40`: the ingest's next commit made a new collection of its last batches, printed
"added 200" and exited 0; the collection held 160 items and no kept pipeline copy, so every
search of it failed. Here another `Database` object drops the collection between batches."""

import pytest

from probembed.store import CollectionDroppedError, Database, ingest, ingest_documents

SMALL_BATCH = 4


def records(n):
    """n records with distinct texts."""
    return [{"id": f"r{i}", "text": f"record {i} is about topic {i}"} for i in range(n)]


def dropping(path, at, then=None):
    """An encode hook that drops the collection through another handle when asked for its
    `at`-th batch (1-based), and with `then` makes it again with those records first."""
    calls = []

    def encode(pipeline):
        def run(texts):
            calls.append(len(texts))
            if len(calls) == at:
                other = Database(path)
                other.drop("docs")
                if then is not None:
                    ingest(then, other.collection("docs"), pipeline)
            return pipeline.encode(texts)

        return run

    return encode


@pytest.mark.parametrize("upsert", [False, True])
def test_a_plain_ingest_stops_naming_what_it_wrote_and_makes_no_collection(
    tmp_path, pydoc_pipeline, upsert
):
    db = Database(tmp_path / "db", create=True)
    hook = dropping(tmp_path / "db", at=3)(pydoc_pipeline)
    says = (
        r"collection 'docs' was dropped while this ingest ran: 8 of 12 records had been "
        r"written before the drop; nothing was written after it"
    )
    with pytest.raises(CollectionDroppedError, match=says):
        ingest(
            records(12), db.collection("docs"), pydoc_pipeline, SMALL_BATCH, encode=hook,
            upsert=upsert,
        )  # fmt: skip
    assert Database(tmp_path / "db").collections() == []


def test_a_collection_made_again_meanwhile_is_left_as_its_maker_wrote_it(tmp_path, pydoc_pipeline):
    """Dropped and made again by another writer: that collection is another one, which
    takes none of this ingest's rows (and no undo of a sync touches it)."""
    db = Database(tmp_path / "db", create=True)
    collection = db.collection("docs")
    ingest(records(2), collection, pydoc_pipeline)
    theirs = [{"id": "t0", "text": "theirs"}]
    hook = dropping(tmp_path / "db", at=2, then=theirs)(pydoc_pipeline)
    with pytest.raises(CollectionDroppedError, match="4 of 10 records had been written"):
        ingest(records(12), collection, encode=hook, batch_size=SMALL_BATCH, sync=True)
    assert Database(tmp_path / "db").collection("docs").ids() == {"t0"}


def test_a_chunked_ingest_stops_naming_the_chunks_it_wrote(tmp_path, pydoc_pipeline):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(6):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nNote {i} is about topic {i}.\n")
    db = Database(tmp_path / "db", create=True)
    hook = dropping(tmp_path / "db", at=2)(pydoc_pipeline)
    says = r"'docs' was dropped while this ingest ran: 4 of 6 chunks had been written before"
    with pytest.raises(CollectionDroppedError, match=says):
        ingest_documents(
            folder, db.collection("docs"), pydoc_pipeline, batch_size=SMALL_BATCH, encode=hook
        )
    assert Database(tmp_path / "db").collections() == []


def test_a_writes_delete_leaves_a_collection_made_again_meanwhile_alone(tmp_path, pydoc_pipeline):
    """A sync's removal alone and a document's stale chunks are deleted by id after the
    write's other commits: dropped and made again by another writer in between (with the
    same ids), the delete removed the new collection's rows. Given the write's creation
    token it refuses, as the write's other commits do; without one it deletes as asked."""
    db = Database(tmp_path / "db", create=True)
    collection = db.collection("docs")
    ingest(records(3), collection, pydoc_pipeline)
    token = collection.created
    other = Database(tmp_path / "db")
    other.drop("docs")
    ingest(records(3), other.collection("docs"), pydoc_pipeline)  # the same ids, a new table
    with pytest.raises(CollectionDroppedError, match="'docs' was dropped while this write ran"):
        collection.delete_stored(["r0"], token)
    assert Database(tmp_path / "db").collection("docs").ids() == {"r0", "r1", "r2"}
    assert collection.delete(["r0"]) == 1  # no token: a plain delete of what is there
