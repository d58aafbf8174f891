"""The store: collections on LanceDB, ingest from files, and every bad input a clear error."""

import codecs
import contextlib
import datetime
import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pyarrow as pa
import pytest

from probembed.store import (
    Batch,
    Database,
    IngestError,
    NotChunkedError,
    PipelineInfo,
    PipelineMismatchError,
    Searcher,
    StoreError,
    ingest,
    remove,
)
from probembed.store import handle as collection_module
from probembed.store.chunked import read_documents
from probembed.store.filters import sql_list
from probembed.store.readers import Record, read_records
from probembed.store.rows import MAX_METADATA_COLUMNS, NOT_A_COLUMN, promote_metadata

#: The names a refusal lists for a collection of items with a `year`: the fields, and
#: `metadata` (it left metadata out, though `metadata LIKE '%...%'` works).
LISTED = r"id, text, year and metadata \(each item's metadata as JSON text\)$"


def batch(pipeline, ids, texts=None, metadata=None):
    """A write batch of these ids, texts defaulting to a sentence per id."""
    texts = texts or [f"document {i} talks about topic {i}" for i in ids]
    metadata = metadata or [{} for _ in ids]
    return Batch(ids, texts, metadata, pipeline.encode(texts), PipelineInfo.of(pipeline))


def write_jsonl(path, rows):
    """Rows as JSON lines; a str row is written verbatim (to make malformed lines)."""
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def collection(tmp_path):
    return Database(tmp_path / "db", create=True).collection("docs")


def test_add_upsert_delete_and_stats(collection, hash_pipeline):
    assert not collection.exists and collection.count() == 0
    assert collection.add(batch(hash_pipeline, ["a", "b", "c"])) == 3
    with pytest.raises(StoreError, match=r"already in collection 'docs'.*upsert"):
        collection.add(batch(hash_pipeline, ["c", "d"]))
    assert collection.count() == 3
    inserted, updated, _ = collection.upsert(batch(hash_pipeline, ["c", "d"], ["new c", "new d"]))
    assert (inserted, updated) == (1, 1)
    assert collection.rows(["c"])["c"]["text"] == "new c"
    assert collection.delete(["a", "zzz"]) == 1
    assert collection.ids() == {"b", "c", "d"}
    stats = collection.stats()
    assert stats.count == 3 and stats.dim == 128 + 96
    assert stats.pipeline == PipelineInfo.of(hash_pipeline)
    assert stats.bytes_per_item > 2 * 224 * 4  # mean + var as float32, plus text and weights
    assert Database(collection.db.path).collections() == ["docs"]
    assert collection.delete(["b", "c", "d"]) == 3
    emptied = collection.stats()  # it said total_bytes / 1 per item
    assert emptied.count == 0 and emptied.bytes_per_item is None
    assert emptied.to_json()["bytes_per_item"] is None


def test_a_collection_dropped_by_a_revert_and_written_again_reads_its_new_header(
    tmp_path, pydoc_pipeline
):
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline
    from probembed.store.pydoc_corpus import read_pydoc_topics

    passages = [r.text for r in read_pydoc_topics()[:40]]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in passages]
    spec = ModelSpec("hash", "laplace", {}, encoder_params={"dim": 40})
    other = Pipeline.fit([spec], pairs, FusionConfig("uec"), name="other", cache=False)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    collection.add(batch(pydoc_pipeline, ["a", "b"]))
    assert collection.dim == 112  # the header is read, and kept for this version
    collection.revert(None, ["a", "b"])  # emptied, dropped; this handle stays the collection's
    collection.add(batch(other, ["c"]))  # a new table, whose first version may be the same
    assert collection.dim == 40 and collection.pipeline == PipelineInfo.of(other)


def test_a_search_sees_another_handles_commit_and_an_unmoved_table_is_not_reopened(
    collection, hash_pipeline, monkeypatch
):
    # the once-a-second look for a collection made again is a reopen too: off here, so the
    # count does not depend on how fast the searches run
    monkeypatch.setattr(collection_module, "RECREATION_RECHECK_S", float("inf"))
    collection.add(batch(hash_pipeline, ["a", "b"]))
    searcher = Searcher(collection, hash_pipeline)
    assert searcher.search(["document b"], k=5)[0]["hits"]
    table = collection._table
    reopened = []
    checkout = table.checkout_latest
    table.checkout_latest = lambda: (reopened.append(1), checkout())[1]
    before = collection.version
    for _ in range(3):  # an unchanged table: asked once each, never reopened
        assert collection.version == before
        searcher.search(["document a"], k=5)
    assert reopened == []
    # a commit through another handle on the database (as from another process) is seen
    other = Database(collection.db.path).collection("docs")
    other.add(batch(hash_pipeline, ["c"], ["a brand new sentence about zebras"]))
    assert collection.version > before and reopened == [1]
    hits = searcher.search(["a brand new sentence about zebras"], k=1)[0]["hits"]
    assert [h["id"] for h in hits] == ["c"]


def test_rows_are_found_by_id_across_a_compaction(collection, hash_pipeline):
    for start in range(0, 40, 10):  # several fragments, so compaction rewrites them
        collection.add(batch(hash_pipeline, [f"d{i}" for i in range(start, start + 10)]))
    wanted = [f"d{i}" for i in (3, 17, 25, 39)]
    before = collection.rows(wanted)
    assert collection.delete([f"d{i}" for i in range(0, 40, 2)]) == 20
    collection.optimize()
    after = collection.rows(wanted)
    assert before == after
    assert {k: v["text"] for k, v in after.items()} == {
        i: f"document {i} talks about topic {i}" for i in wanted
    }


def test_ids_that_are_not_strings_are_refused_naming_the_argument(collection, hash_pipeline):
    """An integer id (as a service write takes, stored as its string) failed deep in the
    lookup of its other Unicode spelling: "normalize() argument 2 must be str, not int"."""
    collection.add(batch(hash_pipeline, ["7", "8"]))
    calls = {
        "ids": (collection.delete, collection.rows, lambda ids: collection.erase(ids)),
        "doc_ids": (collection.delete_documents,),
    }
    for name, takers in calls.items():
        for take in takers:
            with pytest.raises(
                StoreError, match=rf"^{name} must be strings; {name}\[1\] is 7 \(int\)$"
            ):
                take(["8", 7])
            with pytest.raises(StoreError, match=rf"^{name} must be a list .*wrap it: \['8'\]$"):
                take("8")
    assert collection.count() == 2


def test_small_writes_are_compacted_only_once_fragments_pile_up(tmp_path, pydoc_pipeline):
    from probembed.store.readers import Record
    from probembed.store.upkeep import COMPACT_SMALL_FRAGMENTS

    collection = Database(tmp_path / "db", create=True).collection("docs")

    def fragments() -> int:
        return collection.db.table("docs").stats()["fragment_stats"]["num_fragments"]

    counts = []
    for i in range(COMPACT_SMALL_FRAGMENTS):
        ingest([Record(f"d{i}", f"document {i} talks about topic {i}")], collection, pydoc_pipeline)
        counts.append(fragments())
    # each write adds a fragment until the 16th small one, whose ingest compacts them into one
    assert counts[:-1] == list(range(1, COMPACT_SMALL_FRAGMENTS))
    assert counts[-1] == 1
    assert collection.count() == COMPACT_SMALL_FRAGMENTS


def test_collection_refuses_another_pipelines_vectors(collection, hash_pipeline, toy_pairs):
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline

    collection.add(batch(hash_pipeline, ["a"]))
    spec = ModelSpec("hash", "laplace", encoder_params={"dim": 64})
    other = Pipeline.fit([spec], toy_pairs[:40], FusionConfig("single:hash"), name="other")
    with pytest.raises(PipelineMismatchError, match=r"pipeline 'hash'.*not of 'other'"):
        collection.add(batch(other, ["b"]))
    with pytest.raises(PipelineMismatchError):
        Searcher(collection, other)
    with pytest.raises(PipelineMismatchError):
        collection.record_pipeline(other)
    with pytest.raises(PipelineMismatchError):  # before the rows go, not after
        remove(collection, ["a"], other)
    with pytest.raises(ValueError, match="no pipeline 'hsah'"):  # it was read only if needed
        remove(collection, ["a"], "hsah")
    assert collection.count() == 1


def test_missing_database_and_collection_are_clear_errors(tmp_path, hash_pipeline):
    with pytest.raises(StoreError, match=r"no database at .*does not exist") as missing:
        Database(tmp_path / "nowhere")
    # it told a Python caller to run `probembed ingest PATH --db DIR`
    fix = f"(`Database({str(tmp_path / 'nowhere')!r}, create=True)` makes one)"
    assert str(missing.value).endswith(fix) and "--db" not in str(missing.value)
    (tmp_path / "docs.jsonl").write_text("{}\n")
    as_file = r"docs\.jsonl: it is a file; a database is a directory"
    with pytest.raises(StoreError, match=as_file) as file:
        Database(tmp_path / "docs.jsonl")  # it said the directory does not exist
    # its fix names the path given, where it told a Python caller `Database('DIR', ...)`
    fix = f"(`Database({str(tmp_path / 'docs.jsonl')!r}, create=True)` makes one once that file"
    assert fix in str(file.value) and "DIR" not in str(file.value)
    for made in ("docs.jsonl", "docs.jsonl/sub"):  # to create: it said "File exists"
        with pytest.raises(StoreError, match=r"docs\.jsonl is a file; a database is a directory"):
            Database(tmp_path / made, create=True)
    db = Database(tmp_path / "db", create=True)
    with pytest.raises(StoreError, match=r"no collection 'missing'.*collections: none"):
        db.open("missing")
    ingest([Record("a", "some text")], db.collection("default"), hash_pipeline)
    with pytest.raises(StoreError, match=r"no collection 'defualt' in .*; collections: default$"):
        db.collection("defualt").search("text")  # a handle by name: the same list as open()
    with pytest.raises(StoreError, match="invalid collection name"):
        db.collection("../escape")


def test_a_file_uri_is_its_directory_and_other_schemes_are_refused(
    tmp_path, monkeypatch, hash_pipeline
):
    """`file:///abs` put LanceDB's tables at /abs and probembed's own files under ./file:/abs,
    so the collection's kept pipeline was found by neither spelling; `s3a://` and the like
    made ./s3a: before LanceDB refused the scheme."""
    monkeypatch.chdir(tmp_path)
    uri = (tmp_path / "my db").as_uri()  # file:///.../my%20db
    ingest([Record("a", "some text")], Database(uri, create=True).collection("c"), hash_pipeline)
    by_path = Database(tmp_path / "my db")
    assert by_path.collections() == ["c"]
    assert by_path.open("c").search("text")["hits"][0]["id"] == "a"  # with its kept pipeline
    assert Database(f"file://localhost{tmp_path}/my%20db").collections() == ["c"]
    assert Database(f"file:{tmp_path}/my%20db").collections() == ["c"]  # RFC 8089's short form
    for uri, says in [
        (f"file://{tmp_path}/my%20db?mode=ro", "names no local directory"),
        ("s3a://bucket/db", "probembed stores on s3, gs, az .* not 's3a'"),
        ("gcs://bucket/db", "not 'gcs'"),
        ("file://elsewhere/db", "names no local directory"),
        ("", "database path is empty"),
        ("s3://", r"'s3://' names no bucket \(s3://BUCKET/PREFIX\)"),
        ("s3://bucket//db", r"has an empty part \('//'\)"),
    ]:
        with pytest.raises(StoreError, match=says):
            Database(uri, create=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my db"]


def test_search_rejects_k_below_one(collection, hash_pipeline):
    collection.add(batch(hash_pipeline, ["a", "b"]))
    collection.record_pipeline(hash_pipeline)
    for k in (0, -3):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            collection.search("topic", k=k)


def test_bad_search_arguments_are_refused_before_the_pipeline_loads(collection, hash_pipeline):
    """A typo'd score waited for the pipeline to load (~9 s for a built-in) to be refused:
    here no copy of the pipeline is kept, so anything that loads it fails otherwise."""
    collection.add(batch(hash_pipeline, ["a", "b"]))
    for options, says in (
        ({"score": "cosine-ish"}, "unknown score 'cosine-ish'"),
        ({"k": 0}, "k must be a positive integer"),
        ({"min_p_relevant": 1.5}, r"min_p_relevant must be in \[0, 1\]"),
        # "'int' object has no attribute 'strip'", and strings taken as true: a hybrid search
        ({"where": 5}, r"where must be a filter \(an SQL condition, a str\) or None, got 5$"),
        ({"hybrid": "no"}, r"hybrid must be True or False, got 'no'$"),
        ({"exact": 1}, r"exact must be True or False, got 1$"),
        ({"group_by_doc": "false"}, r"group_by_doc must be True or False, got 'false'$"),
    ):
        with pytest.raises(StoreError, match=says):
            collection.search("topic", **options)
    with pytest.raises(StoreError, match=r"queries are bytes \(b'abc'\): decode them"):
        collection.search(b"abc")  # it said `queries[0] is not a string: 97`
    valid = ({"score": "cosine"}, {"min_p_relevant": np.float32(0.5)}, {"hybrid": np.bool_(True)})
    for options in valid:  # a numpy threshold was "not a number"; the pipeline is what fails
        with pytest.raises(StoreError, match="no copy of it is kept"):
            collection.search("topic", **options)


@pytest.mark.parametrize("filtered_ids", [1024, 1])  # stored ids looked up by filter; read all
def test_ingest_jsonl_keeps_metadata_and_resumes(
    tmp_path, collection, hash_pipeline, monkeypatch, filtered_ids
):
    # the module, not the `ingest` function that probembed.store re-exports under its name
    monkeypatch.setattr(
        importlib.import_module("probembed.store.ingest"), "FILTERED_IDS", filtered_ids
    )
    rows = [
        {"id": f"d{i}", "title": f"Title {i}", "text": f"body of document {i}", "year": 2000 + i}
        for i in range(30)
    ]
    write_jsonl(tmp_path / "first.jsonl", rows[:12])
    first = ingest(tmp_path / "first.jsonl", collection, hash_pipeline, batch_size=5)
    assert (first.added, first.already_stored) == (12, 0)
    source = write_jsonl(tmp_path / "all.jsonl", rows)
    second = ingest(source, collection, hash_pipeline, batch_size=5)
    assert (second.added, second.already_stored, second.problems) == (18, 12, [])
    assert collection.count() == 30
    row = collection.rows(["d3"], ("text", "metadata", "year"))["d3"]
    assert row["text"] == "Title 3 body of document 3"
    assert json.loads(row["metadata"]) == {"title": "Title 3", "year": 2003}
    assert row["year"] == 2003


@pytest.mark.parametrize("filtered_ids", [1024, 1])  # stored rows read by filter; read all
def test_an_upsert_writes_only_what_changed_and_leaves_the_rest_as_stored(
    collection, hash_pipeline, monkeypatch, filtered_ids
):
    """A re-run of an unchanged corpus with upsert commits nothing; a changed text or a
    changed metadata value replaces just that row, a new id is added."""
    monkeypatch.setattr(
        importlib.import_module("probembed.store.ingest"), "FILTERED_IDS", filtered_ids
    )
    records = [Record(f"d{i}", f"body of document {i}", {"year": 2000 + i}) for i in range(20)]
    first = ingest(records, collection, hash_pipeline, batch_size=7, upsert=True)
    assert (first.added, first.updated, first.unchanged) == (20, 0, 0)
    version = collection.version
    again = ingest(records, collection, hash_pipeline, upsert=True)
    assert (again.added, again.updated, again.unchanged) == (0, 0, 20)
    assert collection.version == version  # not one commit
    edited = list(records)
    edited[3] = Record("d3", "a new body for document 3", {"year": 2003})
    edited[5] = Record("d5", "body of document 5", {"year": 1999})
    edited.append(Record("d20", "body of document 20", {}))
    third = ingest(edited, collection, hash_pipeline, upsert=True)
    assert (third.added, third.updated, third.unchanged) == (1, 2, 18)
    assert "unchanged 18" in third.summary()
    rows = collection.rows(["d3", "d5"], ("text", "year"))
    assert (rows["d3"]["text"], rows["d5"]["year"]) == ("a new body for document 3", 1999)
    assert collection.count() == 21


@pytest.mark.parametrize("filtered_ids", [1024, 1])  # one `id IN` read; located and taken
def test_a_rerun_without_upsert_names_the_stored_ids_it_left_with_another_text(
    collection, hash_pipeline, monkeypatch, filtered_ids
):
    """A re-run said only "already stored 20": an edited text or metadata value was left as
    stored without a word (the service alone compared them). The report names those ids, in
    input order; metadata compares as it is stored (key order is not a change), and the
    re-run embeds nothing."""
    ingest_module = importlib.import_module("probembed.store.ingest")
    monkeypatch.setattr(ingest_module, "FILTERED_IDS", filtered_ids)
    monkeypatch.setattr(ingest_module, "TAKEN_ROWS", 3)  # several takes of stored rows
    records = [Record(f"d{i}", f"body of document {i}", {"year": 2000 + i}) for i in range(20)]
    first = ingest(records, collection, hash_pipeline, batch_size=7)
    assert (first.added, first.already_stored, first.changed) == (20, 0, [])
    encoded: list[str] = []

    def encode(texts):
        encoded.extend(texts)
        return hash_pipeline.encode(texts)

    edited = list(records)
    edited[12] = Record("d12", "body of document 12", {"year": 1999})
    edited[3] = Record("d3", "a new body for document 3", {"year": 2003})
    edited[7] = Record("d7", "body of document 7", {"year": 2007, "new": True})
    edited[9] = Record("d9", "body of document 9", {"year": 2009} | {})  # the same, anew
    edited.append(Record("d20", "body of document 20", {}))
    again = ingest(edited, collection, hash_pipeline, encode=encode)
    assert (again.added, again.already_stored, again.changed) == (1, 20, ["d3", "d7", "d12"])
    assert encoded == ["body of document 20"]  # only the new id is embedded
    assert collection.rows(["d3"])["d3"]["text"] == "body of document 3"  # left as stored
    same = ingest(records, collection, hash_pipeline, encode=encode)
    assert (same.already_stored, same.changed, len(encoded)) == (20, [], 1)
    upserted = ingest(edited, collection, hash_pipeline, upsert=True)
    assert (upserted.updated, upserted.unchanged, upserted.changed) == (3, 18, [])


def test_an_id_another_writer_stored_meanwhile_with_another_text_counts_as_changed(
    tmp_path, hash_pipeline
):
    """Records are embedded with the collection unlocked (the service's writes): an id another
    handle stored between the look and the commit is already stored, and changed when that
    writer stored another text."""
    from probembed.store.ingest import commit, prepare

    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest([Record("a", "first text")], collection, hash_pipeline)
    records = [Record("a", "first text"), Record("b", "mine"), Record("c", "also mine")]
    report, todo, _ = prepare(records, collection, hash_pipeline, "stop", upsert=False)
    assert ([r.id for r in todo], report.changed) == (["b", "c"], [])
    other = Database(tmp_path / "db").collection("docs")
    ingest([Record("b", "theirs"), Record("c", "also mine")], other, hash_pipeline)
    fused = hash_pipeline.encode([r.text for r in todo])
    commit(collection, PipelineInfo.of(hash_pipeline), todo, fused, False, report)
    assert (report.added, report.already_stored, report.changed) == (0, 3, ["b"])


BAD_LINES = [
    {"id": "ok1", "text": "a fine document"},
    '{"id": "broken", "text": ',
    {"id": "notext", "title": ""},
    {"id": "ok1", "text": "the same id again"},
    {"id": "blank", "text": "   "},
    "[1, 2]",
    {"id": "ok2", "text": "another fine document"},
]


def test_dicts_given_in_python_are_read_as_json_lines_are(collection, hash_pipeline):
    """A RAG app holds its documents in memory: a list of dicts crashed with AttributeError
    ('dict' object has no attribute 'source'), and two Records with one id said "(first at
    earlier)"."""
    given = [
        {"id": "a", "title": "Cats", "text": "They sleep all day.", "lang": "en"},
        Record("b", "Dogs fetch sticks."),
        {"_id": 3, "text": "Birds sing at dawn.", "metadata": {"lang": "en"}},
        {"id": np.int64(4), "text": "A pandas row.", "day": datetime.date(2024, 1, 2)},
    ]
    assert ingest(given, collection, hash_pipeline).added == 4
    assert collection.ids() == {"a", "b", "3", "4"}
    assert collection.rows(["4"], ("day",))["4"]["day"] == "2024-01-02"
    assert collection.rows(["a"])["a"]["text"] == "Cats They sleep all day."
    assert collection.rows(["a", "3"], ("lang",)) == {
        "a": {"id": "a", "lang": "en"},
        "3": {"id": "3", "lang": "en"},
    }
    bad = [{"id": "c", "body": "no text"}, Record("b", "again"), Record("b", "and again"), 7]
    with pytest.raises(IngestError) as info:
        ingest(bad, collection, hash_pipeline)
    message = str(info.value)
    assert "records[0]: document 'c' has no 'text' field" in message
    assert "id 'b': duplicate id 'b' (given twice)" in message  # a Record is named by its id
    assert "records[3]: expected a Record or a dict with 'id' and 'text', got int" in message
    with pytest.raises(TypeError, match="a path or a list of records or dicts, got one dict"):
        ingest({"id": "d", "text": "one"}, collection, hash_pipeline)


def test_a_json_message_ending_in_at_gets_no_second_at(tmp_path, collection, hash_pipeline):
    """It read "Unterminated string starting at at character 21"."""
    source = tmp_path / "cut.jsonl"
    source.write_text('{"id": "a", "text": "cut off')
    with pytest.raises(IngestError, match=r"Unterminated string starting at character 21\)"):
        ingest(source, collection, hash_pipeline)


def test_bad_lines_stop_the_run_before_anything_is_written(tmp_path, collection, hash_pipeline):
    source = write_jsonl(tmp_path / "bad.jsonl", BAD_LINES)
    with pytest.raises(IngestError) as info:
        ingest(source, collection, hash_pipeline)
    message = str(info.value)
    assert "5 bad input item(s); nothing was written" in message
    assert f"{source}:2: malformed JSON" in message
    assert f"{source}:3: document 'notext' has no 'text' field" in message
    assert f"{source}:4: duplicate id 'ok1' (first at {source}:1)" in message
    assert f"{source}:5: document 'blank' has no text: empty or blank" in message
    assert f"{source}:6: expected a JSON object, got list" in message
    assert not collection.exists


def test_bad_lines_are_skipped_and_reported_on_request(tmp_path, collection, hash_pipeline):
    source = write_jsonl(tmp_path / "bad.jsonl", BAD_LINES)
    report = ingest(source, collection, hash_pipeline, on_error="skip")
    assert report.added == 2 and collection.ids() == {"ok1", "ok2"}
    assert [p.source for p in report.problems] == [f"{source}:{n}" for n in (2, 3, 4, 5, 6)]
    assert "skipped 5 bad item(s)" in report.summary()


def test_metadata_type_clash_is_a_reported_line(tmp_path, collection, hash_pipeline):
    """A clash within one input is with an earlier item's value: it said "the collection
    stores", of a collection that stored nothing yet; with a stored column, it says so."""
    rows = [{"id": "a", "text": "x y", "year": 2001}, {"id": "b", "text": "y z", "year": "soon"}]
    source = write_jsonl(tmp_path / "clash.jsonl", rows)
    with pytest.raises(IngestError, match=r"clash.jsonl:2: item 'b': metadata field 'year'") as e:
        ingest(source, collection, hash_pipeline)
    assert "but earlier items of this input give 'year' as int64" in str(e.value)
    ingest(source, collection, hash_pipeline, on_error="skip")
    with pytest.raises(IngestError, match="but the collection stores 'year' as int64"):
        ingest([Record("c", "z w", {"year": "later"})], collection, hash_pipeline)


def test_whole_numbers_then_fractions_in_one_write_make_a_float_column(
    tmp_path, collection, hash_pipeline
):
    """A price of 10 then 9.99 was refused (the column's type was its first value's); within
    one write the field is a float column from its first commit, however many commits the
    write takes (batch_size=1: the first made an integer column, the second failed). A
    stored integer column cannot widen (LanceDB): a fraction there is refused saying to
    write 4.0."""
    ints_first = [Record("a", "one text", {"rating": 4}), Record("b", "two text", {"rating": 4.5})]
    report = ingest(ints_first, collection, hash_pipeline, batch_size=1)
    assert (report.added, report.problems) == (2, [])
    rows = collection.rows(["a", "b"], ("rating", "metadata"))
    assert (rows["a"]["rating"], rows["b"]["rating"]) == (4.0, 4.5)
    assert json.loads(rows["a"]["metadata"]) == {"rating": 4}  # the JSON keeps what was given
    whole = Database(tmp_path / "whole", create=True).collection("c")
    ingest([Record("c", "three text", {"rating": 3})], whole, hash_pipeline)
    with pytest.raises(IngestError, match=r"stores 'rating' as int64 \(a stored column .* 4\.0"):
        ingest([Record("d", "four text", {"rating": 4.5})], whole, hash_pipeline)


def test_a_list_where_a_column_holds_scalars_is_a_reported_item_and_can_be_skipped(
    collection, hash_pipeline
):
    """A list for an integer column reached Arrow (a raw "Could not convert [1]" naming no
    item, field or way out, and on_error='skip' did not skip it); a list first and a number
    later in one write failed the same way."""
    ingest([Record("a", "one text", {"year": 2001})], collection, hash_pipeline)
    listed = [Record("b", "two text", {"year": [1]}), Record("c", "three text", {"year": 2})]
    with pytest.raises(IngestError, match=r"item 'b': metadata field 'year' = \[1\] is a list"):
        ingest(listed, collection, hash_pipeline)
    report = ingest(listed, collection, hash_pipeline, on_error="skip")
    assert report.added == 1 and collection.ids() == {"a", "c"}
    mixed = [Record("d", "four text", {"tags": ["x"]}), Record("e", "five text", {"tags": 3})]
    ingest(mixed, collection, hash_pipeline)  # the first value, a list: JSON only
    assert "tags" not in collection.metadata_columns()
    assert json.loads(collection.rows(["e"], ["metadata"])["e"]["metadata"]) == {"tags": 3}


@pytest.mark.parametrize("batch_size", [1, 512])
def test_a_field_kept_in_the_json_stays_there_in_later_batches_and_writes(
    collection, hash_pipeline, batch_size
):
    """A list first made a field JSON only for its own batch: a later batch or write gave it a
    column that missed the scalars written before, so `where tags = 'y'` found 'c' and passed
    over 'b' without a word. The place a field's first value gave it is kept; a field whose
    first values were null still becomes a column."""
    first = [
        Record("a", "one text", {"tags": ["x"], "note": None}),
        Record("b", "two text", {"tags": "y"}),
    ]
    ingest(first, collection, hash_pipeline, batch_size=batch_size)
    ingest([Record("c", "three text", {"tags": "y", "note": "n"})], collection, hash_pipeline)
    assert "tags" not in collection.metadata_columns()
    assert collection.metadata_columns()["note"] == pa.string()
    with pytest.raises(StoreError, match="no field tags"):
        collection.search("text", where="tags = 'y'")
    stored = collection.rows(["b", "c"], ["metadata"])
    assert [json.loads(stored[i]["metadata"])["tags"] for i in "bc"] == ["y", "y"]
    assert [h["id"] for h in collection.search("text", where="note = 'n'")["hits"]] == ["c"]


def nested(levels: int) -> list:
    """An empty list this many lists deep."""
    return functools.reduce(lambda value, _: [value], range(levels - 1), [])


def test_a_bad_id_or_metadata_key_past_the_first_batch_writes_nothing(collection, hash_pipeline):
    """Ids were checked a batch at a time, as each was committed: a blank id in the second
    batch left the first one stored, against "all or nothing" (and an integer metadata key
    raised a bare TypeError, also under on_error='skip'); metadata nested past 32 levels
    is refused too (the service stored it, then answered every search finding it with a 500)."""
    good = [Record(f"d{i}", f"text number {i}", {"a": nested(32)}) for i in range(3)]
    for bad, said in [
        (Record("", "empty id", {}), "ids must be strings with a visible character, got ''"),
        (
            Record(" \t", "blank id", {}),
            r"a visible character, got ' \\t'",
        ),  # a reader refuses it too
        (Record(17, "number id", {}), "ids must be strings with a visible character, got 17"),
        (Record("k", "int key", {1: "x"}), "metadata keys must be strings, got 1"),
        (Record("n", "deep", {"a": nested(33)}), "more than 32 levels deep"),
        (Record("n", "deeper", {"a": nested(5000)}), "more than 32 levels deep"),  # no recursion
    ]:
        with pytest.raises(IngestError, match=said):
            ingest([*good, bad], collection, hash_pipeline, batch_size=1)
        assert not collection.exists
    report = ingest([*good, bad], collection, hash_pipeline, batch_size=1, on_error="skip")
    assert (report.added, len(report.problems)) == (3, 1)
    assert collection.ids() == {"d0", "d1", "d2"}


def test_a_field_over_64_bits_kept_in_json_only_takes_no_column_place():
    """An export keeps an integer over 64 bits out of the columns (metadata JSON only); it
    counted toward MAX_METADATA_COLUMNS all the same, so the record's next field, which fits
    the last place, was kept out too."""
    types = {f"f{j}": pa.int64() for j in range(MAX_METADATA_COLUMNS - 1)}
    clashes: dict = {}
    promote_metadata("a", {"big": 2**70, "last": 1}, types, (), clashes)
    assert (types["big"], types["last"]) == (NOT_A_COLUMN, pa.int64())
    assert clashes == {"big": ("int64", "an integer over 64 bits")}


def test_an_integer_beyond_64_bits_is_refused_and_nothing_is_committed(
    tmp_path, collection, hash_pipeline
):
    ingest(
        write_jsonl(tmp_path / "a.jsonl", [{"id": "a", "text": "x y"}]), collection, hash_pipeline
    )
    version, columns = collection.version, collection.metadata_columns()
    rows = [{"id": "big", "text": "y z", "n": 2**63}]
    source = write_jsonl(tmp_path / "big.jsonl", rows)
    with pytest.raises(IngestError, match=r"big.jsonl:1: item 'big': metadata field 'n' = 9223"):
        ingest(source, collection, hash_pipeline)
    assert (collection.version, collection.metadata_columns()) == (version, columns)
    assert collection.ids() == {"a"}
    ok = [{"id": "edge", "text": "y z", "n": 2**63 - 1}, {"id": "low", "text": "z", "n": -(2**63)}]
    ingest(write_jsonl(tmp_path / "ok.jsonl", ok), collection, hash_pipeline)
    assert collection.rows(["edge"], ["n"])["edge"]["n"] == 2**63 - 1


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"score": float("nan")}, "score"),
        ({"score": float("-inf")}, "score"),
        ({"ok": 1, "nested": [float("inf")]}, "nested"),
    ],
)
def test_non_finite_metadata_of_a_record_is_refused_naming_its_field(
    collection, hash_pipeline, metadata, field
):
    from probembed.store.readers import Record

    says = f"item 'n': metadata field '{field}' = .* is not JSON-serialisable: Out of range float"
    with pytest.raises(IngestError, match=says):
        ingest([Record("n", "some text", metadata)], collection, hash_pipeline)
    assert not collection.exists


def test_numpy_datetimes_are_iso_strings_even_past_pythons_years():
    """datetime64 became an int (nanoseconds, or days past year 9999); Python's datetime
    holds years 1 to 9999 only, numpy's own string goes beyond (found by a reviewer)."""
    from probembed.store.rows import plain_value

    assert plain_value(np.datetime64("2024-01-01T10:00:00.5", "ns")) == "2024-01-01T10:00:00.500000"
    assert plain_value(np.datetime64("2024-03", "M")) == "2024-03-01"
    assert plain_value(np.datetime64("12000-01-01")) == "12000-01-01"
    assert plain_value(np.datetime64("12000-01-01T00:00:00")).startswith("12000-01-01T00:00:00")
    assert plain_value(np.datetime64("NaT")) is None


def test_nan_in_a_dict_given_in_python_is_a_missing_value(collection, hash_pipeline):
    """A dict made from a pandas frame holds NaN for a missing number: stored as null, as
    the frameworks' metadata is (it was refused, so a frame with one gap was not stored)."""
    items = [
        {"id": "a", "text": "one", "score": np.float64("nan"), "nested": [float("nan")]},
        {"id": "b", "text": "two", "score": 2.5},
    ]
    ingest(items, collection, hash_pipeline)
    rows = collection.rows(["a", "b"], ["score", "metadata"])
    assert rows["a"]["score"] is None and rows["b"]["score"] == 2.5
    assert json.loads(rows["a"]["metadata"]) == {"score": None, "nested": [None]}
    assert collection.search("one", where="score IS NULL")["hits"][0]["id"] == "a"


def test_ingest_beir_folder_and_text_folder(tmp_path, hash_pipeline):
    beir = tmp_path / "beir"
    beir.mkdir()
    corpus = [{"_id": "1", "title": "Cats", "text": "Cats purr."}, {"_id": 2, "text": "Dogs bark."}]
    write_jsonl(beir / "corpus.jsonl", corpus)
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "a.md").write_text("# Heading\nsome notes", encoding="utf-8")
    (notes / "sub" / "b.txt").write_text("more notes", encoding="utf-8")
    (notes / "skip.pdf").write_bytes(b"%PDF")
    db = Database(tmp_path / "db", create=True)
    (notes / "photo.png").write_bytes(b"\x89PNG")  # not a document: passed over
    # refused as chunked ingestion refuses them (binary bytes were stored as text)
    (notes / "bin.txt").write_bytes(b"abc\x00\x01\x02")
    (notes / "notepad.txt").write_bytes("\ufeffsaved as Unicode".encode("utf-16-le"))
    ingest(beir, db.collection("beir"), hash_pipeline)
    with pytest.raises(IngestError, match=r"bin\.txt: binary file") as raised:
        ingest(notes, db.collection("notes"), hash_pipeline)
    assert "skip.pdf" not in str(raised.value)  # a PDF is no bad input: it stopped the ingest
    report = ingest(notes, db.collection("notes"), hash_pipeline, on_error="skip")
    said = {p.source.rsplit("/", 1)[-1]: p.message for p in report.problems}
    assert sorted(said) == ["bin.txt", "notepad.txt"]
    assert report.unread == {".pdf": 1, ".png": 1}  # not left out without a word
    assert "(this run reads .txt, .md, .markdown; chunked ingestion (--chunk) also .html, " in (
        report.summary()
    )
    assert said["bin.txt"].startswith("binary file") and said["notepad.txt"].startswith("UTF-16")
    assert db.open("beir").rows(["1"])["1"]["text"] == "Cats Cats purr."
    assert db.open("beir").ids() == {"1", "2"}
    assert db.open("notes").ids() == {"a.md", "sub/b.txt"}
    only_pdf = tmp_path / "pdfs"
    only_pdf.mkdir()
    (only_pdf / "x.pdf").write_bytes(b"%PDF")
    with pytest.raises(
        FileNotFoundError,
        match=r"\.markdown files .* \.pdf files are read by `probembed ingest --chunk`",
    ):
        ingest(only_pdf, db.collection("pdfs"), hash_pipeline)
    with pytest.raises(FileNotFoundError, match="no documents at"):
        ingest(tmp_path / "absent", db.collection("x"), hash_pipeline)


def test_a_json_array_file_is_read_as_its_records(tmp_path, hash_pipeline):
    """A `.json` export holding one array of objects was read as JSON lines: one 'malformed
    JSON' problem per line and nothing written."""
    rows = [{"id": "a", "text": "A cat sat."}, {"_id": 7, "text": "Dogs bark.", "lang": "en"}]
    path = tmp_path / "export.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows, indent=2).encode())  # with a BOM
    db = Database(tmp_path / "db", create=True)
    report = ingest(path, db.collection("docs"), hash_pipeline)
    assert (report.added, report.problems) == (2, [])
    assert db.open("docs").rows(["7"], ["text", "lang"])["7"] == {
        "id": "7", "text": "Dogs bark.", "lang": "en"
    }  # fmt: skip
    path.write_text(json.dumps([*rows, 5, {"id": "c"}]))
    odd = list(read_records(path))
    assert [str(p) for p in odd[2:]] == [
        f"{path}[2]: expected a JSON object, got int",
        f"{path}[3]: document 'c' has no 'text' field",
    ]
    path.write_text('[{"id": "a", "text": "x"},\n')
    (problem,) = read_records(path)  # one problem for the file, not one per line
    assert "malformed JSON array (Expecting value at line 2 column 1)" in str(problem)


def test_pretty_printed_objects_are_read_as_records_named_by_their_first_line(tmp_path):
    """One object spread over lines (a pretty-printed export) was one 'malformed JSON'
    problem per line; a file of JSON lines whose first line is bad is still read by line."""
    first = {"id": "a", "text": "A cat sat.", "tags": {"x": [1, 2]}}
    second = {"id": "b", "text": "Dogs bark."}
    path = tmp_path / "doc.json"
    path.write_bytes(
        b"\xef\xbb\xbf\n" + json.dumps(first, indent=2).encode() + b"\n\n"
        + json.dumps(second, indent=4).encode() + b"\n"
    )  # fmt: skip
    records = list(read_records(path))
    assert [(r.id, r.source) for r in records] == [("a", f"{path}:2"), ("b", f"{path}:13")]
    assert records[0].metadata == {"tags": {"x": [1, 2]}}
    path.write_text(json.dumps(first, indent=2) + "\n5\n")
    *_, odd = read_records(path)
    assert str(odd) == f"{path}:11: expected a JSON object, got int"
    lines = '{"id": "a", "text": \n{"id": "b", "text": "fine"}\n{"id": "c", "text": "too"}\n'
    path.write_text(lines)  # a truncated first line: not one object spread over lines
    bad, *good = read_records(path)
    assert str(bad).startswith(f"{path}:1: ") and [r.id for r in good] == ["b", "c"]


def test_one_text_file_is_one_document_not_lines_of_json(tmp_path, hash_pipeline):
    """A lone .md/.txt is read as the folder reads its files (a .pdf says to chunk)."""
    (tmp_path / "cats.md").write_text("# Big cats\n\nThe jaguar is a cat.\n", encoding="utf-8")
    (tmp_path / "paper.pdf").write_bytes(b"%PDF")
    db = Database(tmp_path / "db", create=True)
    report = ingest(tmp_path / "cats.md", db.collection("one"), hash_pipeline)
    assert (report.added, report.problems) == (1, [])
    stored = db.open("one").rows(["cats.md"])["cats.md"]["text"]
    assert stored == "# Big cats\n\nThe jaguar is a cat."
    with pytest.raises(ValueError, match=r"paper\.pdf is a \.pdf document, read only by chunked"):
        ingest(tmp_path / "paper.pdf", db.collection("two"), hash_pipeline)
    # any other suffix was read as JSON lines: one "malformed JSON" problem per line
    (tmp_path / "table.csv").write_text("id,text\na,some text\n")
    for chunk in (False, True):
        with pytest.raises(ValueError, match=r"table\.csv: probembed does not read \.csv files"):
            if chunk:
                list(read_documents(tmp_path / "table.csv"))
            else:
                ingest(tmp_path / "table.csv", db.collection("three"), hash_pipeline)
    assert not db.collection("three").exists


def test_a_byte_order_mark_is_not_stored_as_text(tmp_path, hash_pipeline):
    """Windows editors begin UTF-8 files with U+FEFF; chunked ingest dropped it, a plain one
    stored it as the text's first character."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "bom.md").write_bytes("\ufeff# Title\n\nBody.\n".encode())
    db = Database(tmp_path / "db", create=True)
    ingest(folder, db.collection("c"), hash_pipeline)
    assert db.open("c").rows(["bom.md"])["bom.md"]["text"] == "# Title\n\nBody."


def test_a_filter_naming_probembeds_own_columns_is_refused_as_no_field(
    tmp_path, collection, hash_pipeline
):
    """`written = 1` filtered on the write tag (an integer, as the literal) without a word:
    `written > 0` kept every row, `written = 1` none. Every column of the table that is no
    filterable field and not the metadata JSON is refused, quoted or not, in any case."""
    rows = [{"id": f"p{i}", "text": f"paper {i}", "year": 2010 + i} for i in range(3)]
    ingest(write_jsonl(tmp_path / "p.jsonl", rows), collection, hash_pipeline)
    import lancedb

    names = lancedb.connect(tmp_path / "db").open_table("docs").schema.names
    own = set(names) - set(collection.filter_fields()) - {"metadata"}
    assert {"written", "mean", "weights"} <= own
    for column in sorted(own):
        for where in (f"{column} > 0", f"{column.upper()} IS NOT NULL", f'"{column}" = 1'):
            with pytest.raises(StoreError, match=f"no field {column}: it is one of probembed"):
                collection.search("paper", where=where)
            with pytest.raises(StoreError, match=f"no field {column}: it is one of probembed"):
                collection.count(where)
    with pytest.raises(StoreError, match="filters can name " + LISTED):
        collection.search("paper", where="year > 1 AND `written` IS NOT NULL")
    assert collection.count("text LIKE '%written%'") == 0  # inside a string: a value
    # an item's own field of that name stays in its JSON, which the refusal says
    ingest([Record("w", "paper w", {"written": 1})], collection, hash_pipeline)
    with pytest.raises(StoreError, match="the items hold written in their metadata JSON only"):
        collection.search("paper", where="written = 1")


def test_a_filter_naming_lancedbs_virtual_columns_is_refused_by_every_filtered_call(
    tmp_path, collection, hash_pipeline
):
    """`_rowid > 3` was accepted: search filtered on, and `delete --where` deleted by, a row id
    that a compaction changes, while `mean` and `written` were refused. Each of LanceDB's
    virtual columns is refused by name, quoted or not, before anything is read or removed."""
    rows = [{"id": f"p{i}", "text": f"paper {i}", "year": 2010 + i} for i in range(5)]
    ingest(write_jsonl(tmp_path / "p.jsonl", rows), collection, hash_pipeline)
    import lancedb

    table = lancedb.connect(tmp_path / "db").open_table("docs")
    assert table.count_rows("_rowid > 3") == 1  # LanceDB reads it: a row id, not an item's
    calls = {
        "search": lambda where: collection.search("paper", where=where),
        "count": collection.count,
        "delete": lambda where: collection.delete(where=where),
        "erase": lambda where: collection.erase(where=where),
    }
    for column in ("_rowid", "_rowaddr", "_row_created_at_version", "_distance", "_score"):
        for where in (f"{column} > 3", f"id = 'p1' OR {column.upper()} >= 0", f'"{column}" > 3'):
            for call in calls.values():
                with pytest.raises(StoreError, match=f"no field {column}: it is one of LanceDB"):
                    call(where)
    with pytest.raises(StoreError, match="filters can name " + LISTED):
        collection.delete(where="`_rowaddr` > 3")
    assert collection.count() == 5
    assert collection.count("text LIKE '%_rowid%'") == 0  # inside a string: a value


#: Filters past what LanceDB 0.40 walks without overflowing its stack (a segfault): the
#: walkthrough's 480 KB OR chain, an arithmetic chain, comparisons chained, a chain hidden
#: from a count of one level by parentheses, and a chain whose comment holds an OR; 4 MB of
#: groups opened (read whole, they took 10 s and 816 MB before the refusal).
TERMS = "one of its conditions chains more than 128 terms"
CRASHING_FILTERS = {
    " OR ".join(["id = 'a'"] * 40_000): "it chains more than 4,000 AND/OR operators, the limit",
    "year = " + " + ".join(["1"] * 1_000): TERMS,
    " = ".join(["year"] * 2_000): TERMS,
    "year = 1" + " + (1" * 45 + " + 1" * 20 + ")" * 45: TERMS,
    "year = 1" + " + 1" * 700 + " -- OR": TERMS,
    "(" * 4_000_000: TERMS,
    "f(" * 2_000_000: TERMS,
    "CASE " * 800_000: TERMS,
}
#: Counts each of CRASHING_FILTERS' filters in a process of its own: on the engine they
#: crashed it, which must not take the tests with it.
DEEP_FILTER_CHILD = """
import json, sys
from probembed.store import Database, StoreError
collection = Database(sys.argv[1]).collection("docs")
for where in json.loads(sys.stdin.read()):
    try:
        print(json.dumps({"count": collection.count(where)}), flush=True)
    except StoreError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
"""


def test_a_filter_deep_enough_to_crash_the_engine_is_refused_and_a_long_in_list_is_not(
    collection, hash_pipeline
):
    """A flat chain of some 32,000 ORs (or 700 arithmetic operators) segfaulted LanceDB in the
    caller's thread: a server died with no log line. Refused before the engine sees it."""
    ids = [f"p{i}" for i in range(5)]
    collection.add(batch(hash_pipeline, ids, metadata=[{"year": 2020 + i} for i in range(5)]))
    filters = list(CRASHING_FILTERS)
    child = [sys.executable, "-c", DEEP_FILTER_CHILD, str(collection.db.path)]
    done = subprocess.run(child, input=json.dumps(filters), capture_output=True, text=True)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(filters)
    for (where, says), answer in zip(CRASHING_FILTERS.items(), answers, strict=True):
        assert says in answer.get("error", ""), (where[:60], answer)
        assert len(answer["error"]) < 600  # the filter quoted by its start and its size
    assert f"... ({len(filters[0]):,} characters): it chains" in answers[0]["error"]
    # within the limits the engine runs them: the longest chains allowed, a long IN list
    longest = " OR ".join(["year = 2021"] * 4_001)
    assert collection.count(longest) == 1
    assert collection.count("(year)" + " + 0" * 62 + " = 2023") == 1  # 128 terms
    listed = [f"q{i:06d}" for i in range(200_000)] + ["p3"]
    assert collection.count(f"id IN ({sql_list(listed)})") == 1
    negatives = ", ".join(["-1"] * 200_000)
    assert collection.count(f"year IN ({negatives}, 2024)") == 1


def test_a_dollar_outside_quotes_is_refused_before_the_engine_panics_on_it(
    collection, hash_pipeline
):
    """`$1` and `$$x$$` made LanceDB panic (`RustPanic`, which the service answered 500)."""
    collection.add(batch(hash_pipeline, ["a$b"]))
    for where in ("text = $1", "id = $$a$b$$", "id = 'a' OR text = $x"):
        with pytest.raises(StoreError, match=r"'\$' is not allowed outside a quoted string"):
            collection.count(where)
    assert collection.count("id = 'a$b'") == 1
    assert collection.count("\"id\" = 'a$b'") == 1
    # in a comment the engine reads a space, and runs the filter
    for commented in ("id = 'a$b' -- costs $5", "id = 'a$b' /* $1 */", "id = 'a$b' -- ;"):
        assert collection.count(commented) == 1, commented


def test_a_filter_the_engine_panics_on_is_refused_as_a_bad_filter(collection, hash_pipeline):
    """`N'x'`, `B'01'`, `R'x'` strings and `?`, `:x` placeholders made LanceDB's planner panic
    (not yet implemented), raised as a plain Exception `filtered` let through: a 500."""
    collection.add(batch(hash_pipeline, ["a"], metadata=[{"year": 2020}]))
    panicking = ("text = N'x'", "text = n'x'", "text = B'01'", "text = R'x'", "year = ?")
    for where in (*panicking, "year = :x"):
        with pytest.raises(StoreError, match="invalid filter .*: LanceDB cannot run it"):
            collection.count(where)
    assert collection.count("year = 2020") == 1  # the engine still answers


def test_a_field_given_at_the_top_and_in_metadata_with_two_values_is_a_named_problem(tmp_path):
    """{"lang": "fr", "metadata": {"lang": "en"}} stored "en" and dropped "fr" unsaid."""
    rows = [
        {"id": "same", "text": "t", "lang": "fr", "metadata": {"lang": "fr", "year": 1}},
        {"id": "two", "text": "t", "lang": "fr", "metadata": {"lang": "en"}},
    ]
    same, two = read_records(write_jsonl(tmp_path / "d.jsonl", rows))
    assert same.metadata == {"lang": "fr", "year": 1}
    assert "field 'lang' is given twice, at the top ('fr') and in 'metadata' ('en')" in str(two)


def test_where_filters_on_metadata_columns(tmp_path, collection, hash_pipeline):
    rows = [{"id": f"p{i}", "text": f"paper number {i}", "year": 2010 + i} for i in range(10)]
    ingest(write_jsonl(tmp_path / "p.jsonl", rows), collection, hash_pipeline)
    result = collection.search("paper", k=10, where="year > 2015")
    assert {h["id"] for h in result["hits"]} == {f"p{i}" for i in range(6, 10)}
    assert all(h["metadata"]["year"] > 2015 for h in result["hits"])
    with pytest.raises(StoreError, match="invalid filter where='colour = 1'") as unknown:
        collection.search("paper", where="colour = 1")
    # the fields a filter can name, not the vector columns; no engine source paths
    assert "no field colour; filters can name id, text, year" in str(unknown.value)
    with pytest.raises(StoreError, match="no field .a b.; filters can name " + LISTED):
        collection.search("paper", where='"a b" = 1')  # a quoted name with a space in it
    with pytest.raises(StoreError, match="a string takes single quotes in SQL: 'p1'$"):
        collection.search("paper", where='id = "p1"')  # "p1" is a column to SQL
    for bare in ("id = P1", "id IN (P1, p0)", "id LIKE P1"):  # the shell took its quotes
        with pytest.raises(StoreError, match="a string takes single quotes in SQL: 'P1'$"):
            collection.search("paper", where=bare)
    with pytest.raises(StoreError, match="no field colour; filters can name " + LISTED):
        collection.search("paper", where="colour > 1 AND text = 'colour'")  # a field, not a value
    for mixed_case in ('id = "P1"', 'id IN ("P1")', 'id LIKE "P1"'):  # its name stays quoted
        with pytest.raises(StoreError, match="a string takes single quotes in SQL: 'P1'$"):
            collection.search("paper", where=mixed_case)
    for quoted_name in ('("colour" = 1)', "lower(\"colour\") = 'red'"):  # names, rightly quoted
        with pytest.raises(StoreError, match="no field colour; filters can name " + LISTED):
            collection.search("paper", where=quoted_name)
    for where, says in (
        ("year = 'soon'", "year holds int64, and 'soon' is a string: compare it with a number"),
        ("year >", r"cannot parse it \(Expected: an expression"),
        ("year > 1; DROP TABLE docs", "one SQL condition; ';' is not allowed"),
    ):
        with pytest.raises(StoreError, match=says) as bad:
            collection.search("paper", where=where)
        assert ".rs:" not in str(bad.value) and "SELECT" not in str(bad.value)
    # a literal the field's type cannot hold: the engine named neither the field nor its type
    for where, says in (
        ("year > 'a'", "year holds int64, and 'a' is a string: compare it with a number"),
        ("'it''s' < `year`", "year holds int64, and 'it''s' is a string"),
        ("year > 2 AND id IN (3)", "id holds string, and 3 is an integer: compare it with a str"),
        ("text = true", "text holds string, and true is a boolean"),
    ):
        with pytest.raises(StoreError, match=says) as bad:
            collection.search("paper", where=where)
        assert "literal" not in str(bad.value), where  # Received literal Utf8("a") ...
    # the metadata JSON compared as no text can be: told it is text, and the fields
    for where in ("metadata = 1", "METADATA = 1", "id IS NOT NULL AND Metadata = 1"):
        with pytest.raises(StoreError, match="metadata is each item's metadata as JSON text, no"):
            collection.search("paper", where=where)  # SQL lower-cases it: the same advice
    with pytest.raises(StoreError, match="or name a field: id, text, year$"):
        collection.search("paper", where="metadata = 1")
    with pytest.raises(StoreError, match="no field mean: .* filters can name " + LISTED):
        collection.search("paper", where="mean > 0")
    with pytest.raises(StoreError, match=r"`metadata LIKE '%\.\.\.%'` matches the JSON's text"):
        collection.search("paper", where="metadata > 3")
    assert collection.search("paper", k=10, where="metadata LIKE '%paper%'")["hits"] == []
    quoted = collection.search("paper", k=3, where="text = 'a;b'")  # inside quotes: a value
    assert quoted["hits"] == []
    # a field the items hold in their JSON only read like a typo ("no field")
    ingest([Record("j", "paper j", {"Venue": "web", "tags": ["x"]})], collection, hash_pipeline)
    for field, where in (('"Venue"', "\"Venue\" = 'web'"), ("tags", "tags = 'x'")):
        with pytest.raises(StoreError, match=f"the items hold {field} in their metadata JSON only"):
            collection.search("paper", where=where)
    with pytest.raises(StoreError, match="filters can name " + LISTED):
        collection.search("paper", where="venue = 'web'")  # held by no item
    # SQL lower-cases a name outside quotes: `Year` filtered on `year` without a word, where
    # a field `Year` of the items' JSON may be meant
    ingest([Record("y", "paper y", {"Year": 1999})], collection, hash_pipeline)
    for folded in ("Year = 1999", "YEAR IS NOT NULL AND id = 'y'", "(Year > 1)"):
        with pytest.raises(StoreError, match="SQL reads Y.* as the field 'year'; write year"):
            collection.search("paper", where=folded)
    for fine in ("year > 2018 AND id IS NOT NULL", "LOWER(text) LIKE 'paper%'"):  # SQL's words
        assert collection.search("paper", where=fine)["hits"], fine
    collection.delete(["y"])
    # `= NULL` kept no row, silently: SQL never holds a comparison with NULL true
    for never in ("year = NULL", "year != null", "NULL <> year", "year<=null", "(year = NULL)"):
        with pytest.raises(StoreError, match="comparison with NULL is never true.*IS NULL"):
            collection.search("paper", where=never)
    with pytest.raises(StoreError, match="invalid filter where='year <=> NULL'") as safe:
        collection.search("paper", where="year <=> NULL")  # null-safe: the engine's refusal
    assert "never true" not in str(safe.value)
    for fine in ("year IS NULL", "text = 'x = null'", "year IS NOT NULL AND year > 2018"):
        found = collection.search("paper", k=10, where=fine)["hits"]
        assert len(found) == {"text = 'x = null'": 0}.get(fine, 1), fine  # j has no year
    everything = collection.search("paper", k=10)["hits"]
    for blank in ("", "   "):  # an empty filter (a form's empty field) filters nothing
        for hybrid in (False, True):
            found = collection.search("paper", k=10, where=blank, hybrid=hybrid)["hits"]
            assert len(found) == 10, (blank, hybrid)
    assert [h["id"] for h in collection.search("paper", k=10, where=" ")["hits"]] == [
        h["id"] for h in everything
    ]
    for score in ("dot", "uec", "kl"):  # a filter that keeps nothing: no hits, for every score
        for hybrid in (False, True):
            found = collection.search("paper", k=3, where="year > 3000", score=score, hybrid=hybrid)
            assert found["hits"] == [], (score, hybrid)


def test_metadata_columns_stop_at_the_cap_and_later_fields_stay_in_the_json(
    collection, hash_pipeline
):
    """Free-form keys cannot make a table thousands of columns wide: the first
    MAX_METADATA_COLUMNS fields become columns, later ones (in this write or the next) stay
    in the JSON, returned with the hit but not filterable."""
    wide = {f"f{j}": j for j in range(MAX_METADATA_COLUMNS + 20)}
    collection.add(batch(hash_pipeline, ["a"], ["first text"], [wide]))
    columns = collection.metadata_columns()
    assert list(columns) == [f"f{j}" for j in range(MAX_METADATA_COLUMNS)]
    collection.add(batch(hash_pipeline, ["b"], ["second text"], [{"late": 1, "f3": 4}]))
    collection.record_pipeline(hash_pipeline)
    assert "late" not in collection.metadata_columns()
    stored = collection.rows(["a", "b"], ["metadata"])
    assert json.loads(stored["a"]["metadata"]) == wide  # nothing of the item is lost
    assert json.loads(stored["b"]["metadata"]) == {"late": 1, "f3": 4}
    assert [h["id"] for h in collection.search("text", where="f3 = 4")["hits"]] == ["b"]
    with pytest.raises(StoreError, match="no field late") as late:
        collection.search("text", where="late = 1")
    told = str(late.value)  # the cap is the reason, and 128 fields are not all listed
    assert f"fewer than {MAX_METADATA_COLUMNS} metadata columns" in told
    assert "f17, 110 more and metadata (" in told and "f18" not in told  # id, text, f0..f17
    with pytest.raises(
        StoreError, match="no field f0x; did you mean 'f0'.; filters can name id, text, f0, "
    ) as typo:
        collection.search("text", where="f0x IS NULL")  # the planner's "Did you mean" variant
    assert ".rs:" not in str(typo.value) and "Did you mean" not in str(typo.value)


READ_ONLY_CHILD = textwrap.dedent(
    """
    import json, sys
    from probembed.pipeline import Pipeline
    from probembed.store import Database, StoreError, ingest
    pipe = Pipeline.load(sys.argv[2], cache=False)
    db = Database(sys.argv[1])
    hits = db.open("docs").search("topic", k=2)["hits"]  # with the copy the collection kept
    try:
        ingest(sys.argv[3], db.collection("docs"), pipe)
    except StoreError as exc:
        print(json.dumps({"hits": len(hits), "error": str(exc)}))
    """
)


def test_read_only_database_is_searchable_but_refuses_writes(tmp_path, collection, hash_pipeline):
    collection.add(batch(hash_pipeline, ["a", "b", "c"]))
    collection.record_pipeline(hash_pipeline)
    pipe_dir = hash_pipeline.save(tmp_path / "pipe")
    source = write_jsonl(tmp_path / "more.jsonl", [{"id": "z", "text": "new text"}])
    args = [
        sys.executable,
        "-c",
        READ_ONLY_CHILD,
        str(collection.db.path),
        str(pipe_dir),
        str(source),
    ]
    db_dir = str(collection.db.path)
    if os.geteuid() != 0:
        os.chmod(db_dir, 0o555)
        command = args
    elif shutil.which("unshare"):
        # root ignores permission bits: make the directory a read-only bind mount instead,
        # inside a private mount namespace that disappears with the child process
        quoted = " ".join(f"'{a}'" for a in args)
        script = f"mount --bind {db_dir} {db_dir} && mount -o remount,bind,ro {db_dir} && {quoted}"
        command = ["unshare", "--mount", "sh", "-c", script]
    else:
        pytest.skip("running as root without unshare: no way to make a directory read-only")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if os.geteuid() == 0 and "mount" in done.stderr and done.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["hits"] == 2
    assert "is read-only" in result["error"]
    assert collection.count() == 3


def test_batch_validation_names_the_problem(hash_pipeline):
    fused = hash_pipeline.encode(["one", "two"])
    info = PipelineInfo.of(hash_pipeline)
    with pytest.raises(StoreError, match="batch repeats ids"):
        Batch(["x", "x"], ["one", "two"], [{}, {}], fused, info)
    with pytest.raises(StoreError, match="2 ids but"):
        Batch(["x", "y"], ["one"], [{}, {}], fused, info)


@pytest.mark.parametrize("blank", [" ", "\u200b", "\t\u00a0"])
def test_collection_add_refuses_a_blank_id_as_ingest_does(tmp_path, hash_pipeline, blank):
    """A Batch refused only the empty id, where ingest refuses ids of spaces or invisible
    characters too: `Collection.add` (no ingest check before it) stored one that no reader or
    user could give back. The Batch applies ingest's rule, and nothing is written."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    with pytest.raises(StoreError, match="ids must be strings with a visible character"):
        collection.add(batch(hash_pipeline, ["ok", blank]))
    assert not collection.exists


@pytest.mark.parametrize("write", ["add", "upsert"])
def test_collection_writes_refuse_the_reserved_metadata_key_as_ingest_does(
    tmp_path, hash_pipeline, write
):
    """Ingest, chunked ingest, the service and the adapters refuse metadata under
    `probembed`, the key the adapters give each hit's numbers under; a Batch did not, so
    `Collection.add` or `upsert` stored it. Refused naming the item, and nothing written."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    collection.add(batch(hash_pipeline, ["a"]))
    metadata = [{"n": 1}, {"probembed": {"score": 1.0}}]
    with pytest.raises(StoreError, match="item 'y': metadata uses the key 'probembed'"):
        getattr(collection, write)(batch(hash_pipeline, ["x", "y"], metadata=metadata))
    assert collection.ids() == {"a"} and collection.version == 1


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (Record("s1", "bad \ud800 surrogate", {}), "text"),
        (Record("s\udc80", "fine text", {}), "id"),
        (Record("s3", "fine text", {"note": "x\ud800"}), "metadata"),
    ],
)
def test_a_lone_surrogate_is_a_named_problem_not_a_half_written_ingest(
    tmp_path, hash_pipeline, record, field
):
    """A JSON "\\ud800" escape makes a str no store can hold: refused by name before any
    write (stop), or skipped while the rest is stored (skip)."""
    good = [Record(f"g{i}", f"good text {i}", {}) for i in range(150)]
    collection = Database(tmp_path / "db", create=True).collection("c")
    with pytest.raises(IngestError, match=f"its {field} is not valid Unicode"):
        ingest([*good[:100], record, *good[100:]], collection, hash_pipeline, batch_size=64)
    assert not collection.exists
    report = ingest(
        [*good[:100], record, *good[100:]], collection, hash_pipeline, 64, on_error="skip"
    )
    assert report.added == 150 and len(report.problems) == 1


def _unlinked_snapshot_files() -> int:
    """Open descriptors of this process on probembed's unlinked temporary files."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            count += "probembed-" in target and "(deleted)" in target
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd (Linux)")
def test_searchers_let_go_of_their_temporary_files(tmp_path, hash_pipeline):
    """A searcher keeps texts in unlinked files: one dropped unclosed (a handle opened per
    request) lets go of them when collected, a dropped collection's at once."""
    import gc

    db = Database(tmp_path / "db", create=True)
    records = [Record(f"d{i}", f"document {i} talks about topic {i}") for i in range(50)]
    ingest(records, db.collection("c"), hash_pipeline)
    gc.collect()
    before = _unlinked_snapshot_files()
    for _ in range(5):
        Database(tmp_path / "db").collection("c").search("topic 3", k=2)
    gc.collect()
    assert _unlinked_snapshot_files() == before
    db.collection("c").search("topic 3", k=2)
    assert _unlinked_snapshot_files() > before  # the warm searcher holds its files
    db.drop("c")
    assert _unlinked_snapshot_files() == before


def test_a_warm_searcher_follows_the_doc_id_column_as_it_comes_and_goes(tmp_path, hash_pipeline):
    """Chunks (rows with a doc_id) joining plain records, then a revert to before them: the
    warm searcher groups and finds as a fresh one does at each step."""
    texts = [f"document {i} talks about topic {i}" for i in range(60)]
    collection = Database(tmp_path / "db", create=True).collection("c")
    collection.record_pipeline(hash_pipeline)
    collection.add(batch(hash_pipeline, [f"plain{i}" for i in range(40)], texts[:40]))
    start = collection.version
    collection.search(texts[0], k=3)  # warm: no doc_id column yet
    collection.delete(["plain7"])
    chunks = [f"doc{i // 4}#{i % 4}" for i in range(20)]
    meta = [{"doc_id": f"doc{i // 4}", "chunk": i % 4} for i in range(20)]
    collection.add(batch(hash_pipeline, chunks, texts[40:], meta))

    def both(query, **options):
        fresh = Database(tmp_path / "db").collection("c").search(query, k=3, **options)
        warm = collection.search(query, k=3, **options)
        assert [h["id"] for h in warm["hits"]] == [h["id"] for h in fresh["hits"]]
        return [h["id"] for h in warm["hits"]]

    assert both(texts[41], group_by_doc=True)[0] == "doc0#1"
    collection.revert(start, ["plain7", *chunks])  # plain7 back, the chunks gone
    assert both(texts[7])[0] == "plain7"
    assert both(texts[41], group_by_doc=True)[0] != "doc0#1"


def test_a_search_by_document_of_no_chunks_is_refused_empty_or_not(tmp_path, hash_pipeline):
    """An empty collection of no chunks answered no hits where one holding whole documents
    was refused; and the refusal told a Python caller to run `probembed ingest --chunk`."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    collection.create(hash_pipeline)
    with pytest.raises(NotChunkedError, match=r"'c' is empty .*\(`ingest_documents`\)"):
        collection.search("a cat", group_by_doc=True)
    collection.add(batch(hash_pipeline, ["a"], ["a cat"]))
    with pytest.raises(NotChunkedError, match=r"holds whole documents .*\(`ingest_documents`\)"):
        collection.search("a cat", group_by_doc=True)
    assert collection.search("a cat")["hits"][0]["id"] == "a"


def test_a_revert_puts_back_its_own_ids_and_keeps_what_another_writer_committed(
    collection, hash_pipeline
):
    """A write stopped part-way is undone id by id: a rollback of the whole table erased
    what the service beside it committed meanwhile."""
    collection.record_pipeline(hash_pipeline)
    collection.add(batch(hash_pipeline, ["a", "b", "c"], metadata=[{"n": 1}] * 3))
    start, before = collection.version, collection.rows(["a", "b"], ["text", "metadata"])
    warm = collection.search("document a", k=3)  # a searcher that follows the undo
    other = Database(collection.db.path).collection("docs")
    collection.delete(["a"])
    collection.upsert(batch(hash_pipeline, ["b"], ["b rewritten"], [{"n": 2}]))
    other.add(batch(hash_pipeline, ["theirs"]))  # another writer, between this run's writes
    collection.add(batch(hash_pipeline, ["new"], metadata=[{"tag": "late"}]))  # a new column
    collection.revert(start, ["a", "b", "new"])
    assert collection.ids() == {"a", "b", "c", "theirs"}
    assert collection.rows(["a", "b"], ["text", "metadata"]) == before
    assert warm["hits"] and collection.count("tag IS NOT NULL") == 0
    fresh = Database(collection.db.path).collection("docs")
    for query in ("document a talks about topic a", "document theirs talks about topic theirs"):
        found = [h["id"] for h in collection.search(query, k=4, exact=True)["hits"]]
        assert found == [h["id"] for h in fresh.search(query, k=4, exact=True)["hits"]]
        assert found[0] == query.split()[1]
    collection.revert(None, ["a", "b", "c"])  # not dropped: "theirs" is still in it
    assert collection.ids() == {"theirs"}


def test_a_lancedb_table_of_the_users_own_is_not_a_collection(tmp_path, pydoc_pipeline):
    """A database shared with other LanceDB tables: listing collections (the CLI's
    `collections`, the service's start) failed on the first table probembed did not write."""
    import lancedb
    import pyarrow as pa

    db = Database(tmp_path / "db", create=True)
    db.collection("docs").add(batch(pydoc_pipeline, ["a", "b"]))
    lancedb.connect(tmp_path / "db").create_table("theirs", pa.table({"x": [1, 2]}))
    assert db.collections() == ["docs"]
    with pytest.raises(StoreError, match="'theirs' .* was not written by probembed"):
        db.open("theirs").pipeline  # noqa: B018 (read for its error)


@pytest.mark.parametrize("write", ["upsert", "delete"])
def test_a_search_beside_writes_through_the_same_handle_never_fails(
    tmp_path, hash_pipeline, sentences, write
):
    """A search listed row ids at one version of the shared table handle while the writing
    thread moved it; taking them then failed (KeyError, in 3 of 3 runs of a review's loop)."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record(f"s{i}", t, {}) for i, t in enumerate(sentences[:1000])], collection,
           hash_pipeline)  # fmt: skip
    collection.search("warm up", k=3)
    failures: list[BaseException] = []
    done = threading.Event()

    def writes() -> None:
        try:
            for n in range(100):
                ids = [f"w{n}-{j}" for j in range(5)]
                texts = [sentences[1000 + 5 * n + j] for j in range(5)]
                collection.upsert(batch(hash_pipeline, ids, texts))
                if write == "delete":
                    collection.delete(ids[:1])
        finally:
            done.set()

    def searches() -> None:
        while not done.is_set():
            try:
                hits = collection.search("a person is walking", k=5, exact=True)["hits"]
                assert len({h["id"] for h in hits}) == 5
            except BaseException as exc:  # every failure is what this test counts
                failures.append(exc)

    threads = [threading.Thread(target=writes), threading.Thread(target=searches)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    expected = 1000 + 100 * (4 if write == "delete" else 5)
    assert collection.count() == expected
    collection.search("after the writes", k=3)  # the snapshot follows every write
    assert collection.searcher()._snap.live == expected


def test_a_model_fault_stops_an_ingest_that_skips_bad_items(tmp_path, nan_model_dir):
    """A text the model embeds to NaN is the model's fault, not a bad item: ingest stops on it
    under on_error="skip" too (it was a Gaussian's "non-finite value (first in row 0)"),
    naming the model and the text; the batches committed before it stay, as a re-run resumes."""
    from probembed.encoders import get_encoder
    from probembed.encoders.base import EncoderOutputError
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    pipeline = Pipeline([make_estimator("perturb", get_encoder(str(nan_model_dir)))], cache=False)
    texts = ["a cat sat", "a dog ran", "a man plays the guitar", "a bird sang"]
    records = [Record(f"r{i}", text, {}) for i, text in enumerate(texts)]
    collection = Database(tmp_path / "db", create=True).collection("c")
    with pytest.raises(EncoderOutputError) as caught:
        ingest(records, collection, pipeline, batch_size=2, on_error="skip")
    said = str(caught.value)
    assert f"encoder '{nan_model_dir}'" in said and "'a man plays the guitar'" in said
    assert 'ingest stops on it under on_error="skip" too' in said
    assert sorted(collection.ids()) == ["r0", "r1"]


def test_a_byte_order_mark_starting_a_later_line_of_json_lines_is_skipped(tmp_path, hash_pipeline):
    """Two exports joined with `cat`, the second saved with a BOM: its first line was
    "malformed JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) at character 1)", where
    the same mark at the file's start is skipped."""
    first = b'{"id": "a", "text": "one"}\n'
    second = codecs.BOM_UTF8 + b'{"id": "b", "text": "two"}\n'
    (tmp_path / "joined.jsonl").write_bytes(first + second)
    db = Database(tmp_path / "db", create=True)
    report = ingest(tmp_path / "joined.jsonl", db.collection("c"), hash_pipeline)
    assert (report.added, report.problems) == (2, [])
    assert db.open("c").rows(["b"])["b"]["text"] == "two"


def test_json_nested_past_the_recursion_limit_is_a_bad_line_not_a_crash(tmp_path, hash_pipeline):
    """A line (or a JSON array file) nested 100,000 deep stopped the CLI with "RecursionError:
    maximum recursion depth exceeded ..." (exit 1), naming neither line nor file."""
    deep = "[" * 100_000 + "]" * 100_000
    lines = tmp_path / "deep.jsonl"
    lines.write_text(f'{{"id": "a", "text": "x", "m": {deep}}}\n{{"id": "b", "text": "y"}}\n')
    array = tmp_path / "deep.json"
    array.write_text(f"[{deep}]")
    db = Database(tmp_path / "db", create=True)
    report = ingest(lines, db.collection("c"), hash_pipeline, on_error="skip")
    assert report.added == 1
    assert [str(p) for p in report.problems] == [f"{lines}:1: malformed JSON (nested too deeply)"]
    with pytest.raises(IngestError, match=r"deep.json: malformed JSON array \(nested too deeply\)"):
        ingest(array, db.collection("d"), hash_pipeline)


def test_a_number_longer_than_python_reads_is_a_bad_line_naming_it(tmp_path, hash_pipeline):
    """A value of 5,000 digits (json's int conversion limit is 4,300) raised json's plain
    ValueError out of the reader: the CLI said "error: Exceeds the limit (4300 digits) ..."
    naming no file or line, and --on-error skip could not skip it."""
    records = tmp_path / "big.jsonl"
    big = "1" * 5_000
    records.write_text(f'{{"id": "a", "text": "x", "n": {big}}}\n{{"id": "b", "text": "y"}}\n')
    db = Database(tmp_path / "db", create=True)
    report = ingest(records, db.collection("c"), hash_pipeline, on_error="skip")
    assert report.added == 1
    (problem,) = map(str, report.problems)
    assert problem.startswith(f"{records}:1: malformed JSON (Exceeds the limit (4300 digits)")


def test_an_export_wrapping_its_records_in_an_object_is_told_where_they_are(
    tmp_path, hash_pipeline
):
    """`{"docs": [{...}, ...]}` (a common export) was "no id field (one of id, _id)" alone:
    the records were there, one level down."""
    wrapped = tmp_path / "export.json"
    rows = [{"id": "a", "text": "one"}, {"id": "b", "text": "two"}]
    wrapped.write_text(json.dumps({"docs": rows}, indent=2))
    with pytest.raises(IngestError) as refused:
        ingest(wrapped, Database(tmp_path / "db", create=True).collection("c"), hash_pipeline)
    (problem,) = map(str, refused.value.problems)
    assert problem == (
        f"{wrapped}:1: no id field (one of id, _id); its 'docs' is a list of 2 objects: give "
        "those as the records, one per line or as the file's top-level array"
    )
