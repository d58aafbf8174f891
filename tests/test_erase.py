"""Erasure: `Collection.erase` leaves no byte of the erased rows in any file of the database or
of the embedding cache, and changes nothing else, as an auditor would check it: every file's
bytes walked, not LanceDB's reads."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import unicodedata
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lancedb.index import FTS, IvfFlat
from service_support import Server
from typer.testing import CliRunner

from probembed.cache import EmbeddingCache, text_key
from probembed.chunking import ChunkSettings
from probembed.interfaces.cli import app
from probembed.interfaces.store_options import BUSY_EXIT
from probembed.pipeline import Pipeline
from probembed.store import (
    Collection,
    Database,
    ErasureHeldError,
    IndexSettings,
    Record,
    Searcher,
    StoreError,
    erasure,
    ingest,
    ingest_documents,
)
from probembed.store.handle import scan

runner = CliRunner()
#: A token found nowhere else: in the erased rows' texts, ids and metadata.
MARKER = "zqxjvmarker"
#: Rows per ingest, of two.
ROWS = 150
#: The rows erased, by position: under a tenth of the collection.
ERASED = (3, 40, 151, 290)


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """Every file under `root` whose bytes hold `needle`: an auditor's grep of the disk."""
    return sorted(p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def item_id(i: int) -> str:
    """Item i's id: an erased one carries the marker (an id may be personal)."""
    return f"{MARKER}-customer-{i}" if i in ERASED else f"item-{i}"


def record_of(i: int) -> Record:
    """Item i: an erased one names the marker in its text and its metadata."""
    if i in ERASED:
        return Record(item_id(i), f"{MARKER} customer {i} asked to be forgotten", {"who": MARKER})
    return Record(item_id(i), f"ordinary text number {i} about topic {i % 7}", {"who": "other"})


def tokens(table_folder: Path) -> list[bytes]:
    """The token files of a table's full-text indices (an FST of every token indexed: a
    token's letters are not its bytes there, so no grep finds them)."""
    return sorted(p.read_bytes() for p in (table_folder / "_indices").rglob("*_tokens.lance"))


def fresh_tokens(folder: Path, texts: list[str]) -> list[bytes]:
    """`tokens` of a table that only ever held these texts, indexed as probembed does."""
    table = lancedb.connect(folder).create_table("t", pa.table({"text": texts}))
    table.create_index("text", config=FTS())
    return tokens(folder / "t.lance")


def every_row(collection: Collection) -> pa.Table:
    """Every column of every row, by id: what `erase` must leave bit for bit."""
    table = collection._require()
    return scan(table, table.schema.names).sort_by("id")


def history(collection: Collection) -> tuple[list[int], list[str]]:
    """The versions a collection keeps and its tags: what an undo reads back."""
    table = collection._require()
    return [int(v["version"]) for v in table.list_versions()], sorted(table.tags.list())


def graphs_of(tmp_path: Path) -> list[Path]:
    """The search graphs saved beside collection c."""
    return sorted((tmp_path / "db" / ".probembed" / "c").rglob("*.faiss*"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """The embedding cache of this test: the default one, where erase evicts."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def cached_pipeline(pydoc_pipeline_dir, cache_dir) -> Pipeline:
    """The saved hashing pipeline with the test's cache: ingest and search fill it."""
    return Pipeline.load(pydoc_pipeline_dir, cache=EmbeddingCache(cache_dir))


def searched(collection: Collection, hybrid: bool = True) -> None:
    """A search (hybrid: the full-text index made) and a graph search (its graph saved)."""
    collection.search(f"{MARKER} customer", hybrid=hybrid)
    graphed = Searcher(collection, collection.load_pipeline(), IndexSettings(scan_below=0))
    graphed.search([f"{MARKER} customer"], 5)
    graphed.close()


def filled(tmp_path: Path, pipeline: Pipeline, hybrid: bool = True) -> Collection:
    """A collection of 2 x ROWS items in two ingests compacted into one fragment (as a large
    collection's are: LanceDB's compaction would rewrite small ones anyway, and rewrites one
    with under a tenth of its rows deleted never), searched once."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([record_of(i) for i in range(ROWS)], collection, pipeline)
    ingest([record_of(i) for i in range(ROWS, 2 * ROWS)], collection, pipeline)
    collection.compact()
    searched(collection, hybrid)
    return collection


def test_an_erasure_leaves_no_byte_of_the_rows_on_disk_and_changes_nothing_else(
    tmp_path, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    db = tmp_path / "db"
    erased = [item_id(i) for i in ERASED]
    texts = [record_of(i).text for i in ERASED]
    means = [row["mean"] for row in collection.rows(erased, ["mean"]).values()]
    vectors = [np.asarray(m, np.float32).tobytes() for m in means]
    kept = every_row(collection).filter(
        pc.invert(pc.is_in(every_row(collection).column("id"), pa.array(erased)))
    )
    collection._require().tags.create("my-bookmark", collection.version)
    # what a delete leaves, each found by the walk (so the walk is a real check)
    assert files_holding(db / "c.lance" / "data", MARKER.encode())
    assert all(files_holding(db, v) for v in vectors)
    assert list((db / ".probembed" / "c").glob("hnsw-*.faiss"))
    assert all(files_holding(cache_dir, text_key(t)) for t in texts)

    done = collection.erase(erased)

    assert (done.erased, done.not_found, done.fragments_rewritten) == (4, (), 1)
    assert done.rows_rewritten == 2 * ROWS - 4
    assert done.cache_entries_evicted == 4 * 2  # two members
    assert done.tags_dropped == ("my-bookmark",)
    assert done.indices_rebuilt == ("text_idx",)
    assert done.graphs_removed >= 2 and done.versions_removed >= 3
    for root in (db, cache_dir):
        assert files_holding(root, MARKER.encode()) == []
    for needle in [*vectors, *(text_key(t) for t in texts)]:
        assert files_holding(db, needle) == files_holding(cache_dir, needle) == []
    assert every_row(collection).equals(kept)
    table = collection._require()
    assert [int(v["version"]) for v in table.list_versions()] == [done.version]
    assert {p.name for p in (db / "c.lance" / "_indices").iterdir()} == {
        ix.index_uuid for ix in table.list_indices()
    }
    # the text index holds the tokens of the rows left, and no other (a delete kept them)
    left = scan(table, ["text"]).column("text").to_pylist()  # in the table's order
    assert tokens(db / "c.lance") == fresh_tokens(tmp_path / "fresh", left)
    assert not list((db / ".probembed" / "c").rglob("*.faiss*"))
    with pytest.raises(StoreError, match="no write to undo|only what its first write"):
        collection.undo()
    hits = collection.search(f"{MARKER} customer", k=2 * ROWS, hybrid=True)["hits"]
    assert len(hits) == 2 * ROWS - 4 and not {h["id"] for h in hits} & set(erased)


def test_a_searcher_of_another_process_loads_the_rows_afresh_after_an_erasure(
    tmp_path, cache_dir, cached_pipeline
):
    """A refresh only masks deleted rows (their texts and means stay in its snapshot's
    files until a fifth of them are dead): an erasure's mark loads them afresh."""
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    elsewhere = Database(tmp_path / "db").open("c")  # as another process opens it
    elsewhere.search("ordinary text")
    assert len(elsewhere.searcher()._snapshot) == 2 * ROWS

    collection.erase(erased)

    hits = elsewhere.search(f"{MARKER} customer", k=2 * ROWS)["hits"]
    snapshot = elsewhere.searcher()._snapshot
    assert len(snapshot) == snapshot.live == len(hits) == 2 * ROWS - len(erased)
    assert not set(snapshot.ids) & set(erased)


def test_erasing_documents_takes_every_chunk_of_them(tmp_path, cache_dir, cached_pipeline):
    folder = tmp_path / "docs"
    folder.mkdir()
    sentences = " ".join(f"Sentence {i} of the file." for i in range(60))
    (folder / "a.md").write_text(f"# A\n\n{sentences}\n", encoding="utf-8")
    (folder / "b.md").write_text(f"# B\n\n{sentences}\n", encoding="utf-8")
    told = " ".join(f"{MARKER} said {i} things in confidence." for i in range(60))
    (folder / "secret.md").write_text(f"# Secret\n\n{told}\n", encoding="utf-8")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(
        folder, collection, cached_pipeline, ChunkSettings(max_tokens=32, overlap_tokens=0)
    )
    searched(collection)
    chunks = [i for i in collection.ids() if i.startswith("secret.md#")]
    assert len(chunks) > 3
    before = every_row(collection)
    kept = before.filter(pc.invert(pc.starts_with(before.column("id"), "secret")))
    assert files_holding(tmp_path / "db", MARKER.encode())

    base = ["--db", str(tmp_path / "db"), "--collection", "docs", "-y", "--json"]
    kept_history = history(collection)
    result = runner.invoke(app, ["erase", "--doc", "gone.md", *base])
    assert result.exit_code == 1, result.output
    nothing = json.loads(result.stdout)
    assert (nothing["erased"], nothing["not_found"], nothing["versions_removed"]) == (
        0,
        ["gone.md"],
        0,
    )
    assert history(collection) == kept_history and every_row(collection).equals(before)

    result = runner.invoke(app, ["erase", "--doc", "secret.md", "gone.md", *base])

    assert result.exit_code == 1, result.output  # gone.md was not there
    done = json.loads(result.stdout)
    assert (done["erased"], done["not_found"]) == (len(chunks), ["gone.md"])
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert files_holding(cache_dir, MARKER.encode()) == []
    assert every_row(collection).equals(kept)


def test_erasing_documents_reads_past_versions_made_before_the_first_chunk(
    tmp_path, cache_dir, cached_pipeline
):
    """A collection made empty first (the service's `POST /v1/collections`, `create`) has a
    first version without a `doc_id` column: reading the documents' earlier rows there was
    a LanceDB "No field named doc_id" error, the service's 500."""
    folder = tmp_path / "docs"
    folder.mkdir()
    sentences = " ".join(f"Sentence {i} of the file." for i in range(60))
    (folder / "a.md").write_text(f"# A\n\n{MARKER} {sentences}\n", encoding="utf-8")
    (folder / "b.md").write_text(f"# B\n\n{sentences}\n", encoding="utf-8")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    collection.create(cached_pipeline)
    ingest_documents(
        folder, collection, cached_pipeline, ChunkSettings(max_tokens=32, overlap_tokens=0)
    )
    chunks = len([i for i in collection.ids() if i.startswith("a.md#")])
    collection.delete_documents(["a.md"])  # its rows now in older versions alone

    done = collection.erase(documents=["a.md", "gone.md"])

    assert (done.erased, done.erased_deleted, done.not_found) == (chunks, chunks, ("gone.md",))
    assert files_holding(tmp_path / "db", MARKER.encode()) == []


def deletion_rows(collection: Collection) -> int:
    """Rows of the latest version hidden by deletion files: still in their data file."""
    return int(collection._require().list_versions()[-1]["metadata"]["total_deletion_file_rows"])


def test_items_deleted_before_are_erased_from_their_data_file_and_the_cache(
    tmp_path, cache_dir, cached_pipeline
):
    """The compliance flow: a delete at once, a request to be forgotten later. Under a tenth
    of the fragment deleted, no compaction rewrites it: the erasure must."""
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    texts = [record_of(i).text for i in ERASED]
    collection.delete(erased)
    kept = every_row(collection)
    assert deletion_rows(collection) == len(erased)  # in the data file, under a deletion file
    assert all(files_holding(cache_dir, text_key(t)) for t in texts)
    base = ["--db", str(tmp_path / "db"), "--collection", "c", "-y", "--json"]

    result = runner.invoke(app, ["erase", *erased, "nobody", *base])

    assert result.exit_code == 1, result.output  # nobody was never stored
    done = json.loads(result.stdout)
    assert (done["erased"], done["erased_deleted"], done["not_found"]) == (4, 4, ["nobody"])
    assert (done["fragments_rewritten"], done["rows_rewritten"]) == (1, 2 * ROWS - 4)
    assert done["cache_entries_evicted"] == 4 * 2  # two members
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert all(files_holding(cache_dir, text_key(t)) == [] for t in texts)
    assert every_row(collection).equals(kept)
    assert deletion_rows(collection) == 0
    result = runner.invoke(app, ["erase", "nobody", *base])
    assert result.exit_code == 1 and json.loads(result.stdout)["not_found"] == ["nobody"]


def test_an_id_deleted_ingested_again_and_deleted_again_is_erased_in_every_copy(
    tmp_path, cache_dir, cached_pipeline
):
    """Its first row under a deletion file in the large fragment, its second in a small one
    whose other item is live: both fragments are rewritten."""
    collection = filled(tmp_path, cached_pipeline)
    twice = item_id(ERASED[0])
    second = Record(twice, f"{MARKER} second copy, another text", {"who": MARKER})
    collection.delete([twice])
    ingest(
        [second, Record("fresh-1", "a fresh ordinary item", {"who": "other"})],
        collection,
        cached_pipeline,
    )
    collection.delete([twice])
    erased = [item_id(i) for i in ERASED]
    kept = every_row(collection).filter(
        pc.invert(pc.is_in(every_row(collection).column("id"), pa.array(erased)))
    )
    assert deletion_rows(collection) == 2
    assert files_holding(cache_dir, text_key(second.text))

    done = collection.erase(erased)

    assert (done.erased, done.erased_deleted, done.not_found) == (4, 1, ())
    assert (done.fragments_rewritten, done.rows_rewritten) == (2, 2 * ROWS - 4 + 1)
    assert done.cache_entries_evicted == 5 * 2  # both texts of the one erased twice
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert files_holding(cache_dir, text_key(second.text)) == []
    assert every_row(collection).equals(kept)


def test_a_live_item_of_another_spelling_is_left_when_one_spelling_is_erased(
    tmp_path, cache_dir, cached_pipeline
):
    """Two items, `café` composed and decomposed, then any later write: erasing the composed
    one read the history in both spellings and erased the live decomposed one too, counted
    as deleted before (a review's reproduction)."""
    composed, decomposed = (
        unicodedata.normalize("NFC", "café"),
        unicodedata.normalize("NFD", "café"),
    )
    collection = Database(tmp_path / "db", create=True).collection("c")
    records = [Record(composed, "the composed one", {}), Record(decomposed, "the other one", {})]
    ingest([*records, Record("other", "unrelated", {})], collection, cached_pipeline)
    ingest([Record("later", "a later write", {})], collection, cached_pipeline)

    done = collection.erase([composed])

    assert (done.erased, done.erased_deleted, done.not_found) == (1, 0, ())
    assert sorted(collection.ids()) == sorted([decomposed, "other", "later"])
    assert files_holding(tmp_path / "db", b"the composed one") == []
    assert files_holding(tmp_path / "db", b"the other one")


def test_an_item_deleted_before_a_compaction_rewrote_its_fragment_is_erased_from_older_versions(
    tmp_path, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    collection.delete([*erased, *(item_id(i) for i in range(100, 140))])  # over a tenth
    collection.compact()  # materialises the deletions; the older versions kept
    kept = every_row(collection)
    assert deletion_rows(collection) == 0
    assert files_holding(tmp_path / "db" / "c.lance" / "data", MARKER.encode())

    done = collection.erase(erased)

    assert (done.erased, done.erased_deleted, done.not_found) == (4, 4, ())
    assert (done.fragments_rewritten, done.rows_rewritten) == (0, 0)
    assert done.versions_removed >= 3
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert all(files_holding(cache_dir, text_key(record_of(i).text)) == [] for i in ERASED)
    assert every_row(collection).equals(kept)


def test_an_item_deleted_before_every_version_showing_it_was_pruned_is_not_found(
    tmp_path, cache_dir, cached_pipeline
):
    """What docs/cli.md says erase cannot reach: lancedb 0.40 reads no deleted row, so with
    the versions that showed it pruned, the row stays in its data file, unread."""
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    collection.delete(erased)
    collection.compact(timedelta(0))
    assert deletion_rows(collection) == len(erased)

    done = collection.erase(erased)

    assert (done.erased, done.erased_deleted, done.not_found) == (0, 0, tuple(erased))
    assert files_holding(tmp_path / "db" / "c.lance" / "data", MARKER.encode())


def test_erasing_ids_no_version_shows_changes_nothing_and_undo_still_works(
    tmp_path, cache_dir, cached_pipeline
):
    """A typo'd id pruned every older version and dropped every tag, so the next undo was
    refused (a review's reproduction)."""
    collection = filled(tmp_path, cached_pipeline)
    ingest([Record("late", "a later write", {"who": "other"})], collection, cached_pipeline)
    collection._require().tags.create("my-bookmark", collection.version)
    kept, before, graphs = every_row(collection), history(collection), graphs_of(tmp_path)
    assert len(before[0]) >= 4 and graphs

    done = collection.erase(["nosuchid", "nobody"])

    assert done.unchanged and (done.erased, done.not_found) == (0, ("nosuchid", "nobody"))
    assert (done.versions_removed, done.tags_dropped, done.bytes_freed) == (0, (), 0)
    assert (done.fragments_rewritten, done.indices_rebuilt, done.version) == (0, (), before[0][-1])
    assert done.graphs_removed == len(graphs) and graphs_of(tmp_path) == []  # built again
    assert history(collection) == before and every_row(collection).equals(kept)
    assert "c: nothing erased: none of the 2 given is in any version kept" in str(done)
    collection.undo()
    assert "late" not in collection.ids() and collection.count() == 2 * ROWS


def test_a_filter_that_keeps_no_row_still_removes_the_older_versions_so_a_stopped_one_completes(
    tmp_path, monkeypatch, cache_dir, cached_pipeline
):
    """A filter is read at the latest version only: once an erasure stopped after its
    deletes, the same filter keeps no row, and the rows are in the older versions alone."""
    collection = filled(tmp_path, cached_pipeline)
    where = f"who = '{MARKER}'"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # once the rows are deleted, before the prune

    with monkeypatch.context() as patched:
        patched.setattr(erasure.CollectionErasure, "_marked", interrupted)
        with pytest.raises(KeyboardInterrupt):
            collection.erase(where=where)
    again = Database(tmp_path / "db").open("c")
    assert again.count() == 2 * ROWS - len(ERASED)
    assert files_holding(tmp_path / "db", MARKER.encode())  # in the older versions

    done = again.erase(where=where)

    assert (done.erased, done.not_found, done.unchanged) == (0, (), False)
    assert done.versions_removed >= 3 and len(history(again)[0]) == 1
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert "older version(s) removed (no undo can bring them back)" in str(done)


def test_erasing_by_a_filter_takes_the_rows_it_keeps(
    tmp_path, monkeypatch, cache_dir, cached_pipeline
):
    """With no text index to build again and no fragment to compact, the erasure's last
    commit would be its delete, whose transaction and manifest name the ids."""
    collection = filled(tmp_path, cached_pipeline, hybrid=False)
    kept = every_row(collection).filter(pc.field("who") == "other")
    monkeypatch.setattr(erasure, "REWRITE_ROWS", 100)  # the fragment's rows in three merges

    done = collection.erase(where=f"who = '{MARKER}'")

    assert (done.erased, done.not_found, done.rows_rewritten) == (len(ERASED), (), 2 * ROWS - 4)
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert every_row(collection).equals(kept)


def test_a_bad_filter_or_selection_is_refused_before_anything_is_erased(
    tmp_path, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    versions = len(collection._require().list_versions())
    with pytest.raises(StoreError, match="no field colour; filters can name id, text"):
        collection.erase(where="colour = 'red'")
    with pytest.raises(StoreError, match="one of ids, documents or where; given: ids, where"):
        collection.erase(["item-1"], where="n = 1")
    with pytest.raises(StoreError, match="given: none"):
        collection.erase()
    with pytest.raises(StoreError, match=r"not one string; wrap it: \['item-1'\]"):
        collection.erase("item-1")
    with pytest.raises(StoreError, match="no chunked documents"):
        collection.erase(documents=["a.md"])
    for always in ("1 = 1", "who = who"):  # erased every item for good, where delete refuses it
        with pytest.raises(StoreError, match=r"selects every item .*allow_all=True to erase"):
            collection.erase(where=always)
    assert collection.count() == 2 * ROWS
    assert len(collection._require().list_versions()) == versions
    assert collection.erase(where="1 = 1", allow_all=True).erased == 2 * ROWS


def test_a_pin_of_a_running_write_refuses_the_erasure_unless_forced(
    tmp_path, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    with collection.pinned(collection.version):
        with pytest.raises(ErasureHeldError, match="probembed-undo-.*running on this machine"):
            collection.erase(erased)
        assert collection.count() == 2 * ROWS
        assert files_holding(tmp_path / "db", MARKER.encode())
        done = collection.erase(erased, force=True)
        assert done.tags_dropped[0].startswith("probembed-undo-")
    assert collection.tags() == []
    assert files_holding(tmp_path / "db", MARKER.encode()) == []


def test_an_index_erase_cannot_build_again_is_refused_first(tmp_path, cache_dir, cached_pipeline):
    collection = filled(tmp_path, cached_pipeline)
    collection._require().create_index("mean", config=IvfFlat(num_partitions=1), name="mine")
    with pytest.raises(StoreError, match=r"mine \(IvfFlat\).*Nothing was erased"):
        collection.erase([item_id(ERASED[0])])
    assert collection.count() == 2 * ROWS


#: A process that erases and is killed (SIGKILL) at a stage: before its first commit, once
#: the other rows of the fragments were written again (before the deletes), once the rows
#: were deleted (before the mark and the prune), once the older versions were removed (before
#: the saved graphs).
KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from probembed.store import Database, erasure

    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    stage = {
        "before": "_rewritten",
        "moved": "id_conditions",
        "deleted": "_marked",
        "pruned": "removed_graphs",
    }[sys.argv[2]]
    if stage in ("id_conditions", "removed_graphs"):
        setattr(erasure, stage, killed)
    else:
        setattr(erasure.CollectionErasure, stage, killed)
    Database(sys.argv[1]).open("c").erase(sys.argv[3:])
    """
)


def killed_erasing(tmp_path: Path, cache_dir: Path, when: str, ids: list[str]) -> Collection:
    """Erase these ids of collection c in a process killed at `when` (`KILLED`): the
    collection as it left it, opened afresh."""
    child = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path / "db"), when, *ids],
        env={**os.environ, "PROBEMBED_CACHE_DIR": str(cache_dir)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    return Database(tmp_path / "db").open("c")


@pytest.mark.parametrize("when", ["before", "moved", "deleted"])
def test_an_erasure_killed_midway_leaves_the_collection_whole_and_completes_when_run_again(
    tmp_path, cache_dir, cached_pipeline, when
):
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    everything = every_row(collection)
    kept = everything.filter(pc.invert(pc.is_in(everything.column("id"), pa.array(erased))))
    again = killed_erasing(tmp_path, cache_dir, when, erased)
    assert every_row(again).equals(kept if when == "deleted" else everything)
    assert files_holding(tmp_path / "db", MARKER.encode())  # the older versions hold them

    done = again.erase(erased)

    assert done.erased == len(erased)  # those deleted read from the older versions
    assert done.erased_deleted == (len(erased) if when == "deleted" else 0)
    assert every_row(again).equals(kept)
    assert files_holding(tmp_path / "db", MARKER.encode()) == []
    assert len(again._require().list_versions()) == 1


def test_an_erasure_killed_after_its_prune_removes_the_graphs_left_when_run_again(
    tmp_path, cache_dir, cached_pipeline
):
    """No version shows the rows any more, so the rerun finds none: it commits nothing, and
    removes the graphs saved before the erasure, whose codes are the rows' vectors."""
    collection = filled(tmp_path, cached_pipeline)
    erased = [item_id(i) for i in ERASED]
    again = killed_erasing(tmp_path, cache_dir, "pruned", erased)
    before, graphs = history(again), graphs_of(tmp_path)
    assert len(before[0]) == 1 and graphs  # pruned; the graphs of before left
    assert collection.count() == 2 * ROWS - len(ERASED)

    done = again.erase(erased)

    assert done.unchanged and done.not_found == tuple(erased)
    assert done.graphs_removed == len(graphs) and graphs_of(tmp_path) == []
    assert history(again) == before


def test_the_cli_erasing_an_id_not_there_says_nothing_changed_and_undo_still_works(
    tmp_path, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    ingest([Record("late", "a later write", {"who": "other"})], collection, cached_pipeline)
    before = history(collection)
    base = ["--db", str(tmp_path / "db"), "-c", "c"]

    result = runner.invoke(app, ["erase", "nosuchid", *base, "--yes"])

    assert result.exit_code == 1, result.output  # as for any id not there
    said = " ".join(result.output.split())
    assert "c: nothing erased: none of the 1 given is in any version kept ('nosuchid')" in said
    assert "nothing changed (no commit, every older version and tag kept: undo works)" in said
    assert "older version(s) removed" not in said and "bytes freed" not in said
    assert history(collection) == before
    assert runner.invoke(app, ["erase", "nosuchid", *base, "-y", "--missing-ok"]).exit_code == 0
    undone = runner.invoke(app, ["undo", *base])
    assert undone.exit_code == 0, undone.output
    assert "late" not in collection.ids() and collection.count() == 2 * ROWS


def test_the_cli_erases_by_id_or_filter_and_says_what_it_did(tmp_path, cache_dir, cached_pipeline):
    collection = filled(tmp_path, cached_pipeline)
    base = ["--db", str(tmp_path / "db"), "--collection", "c"]
    erased = [item_id(i) for i in ERASED[:2]]

    result = runner.invoke(app, ["erase", *erased, "nobody", *base, "--yes"])

    assert result.exit_code == 1, result.output  # as delete: some ids were not there
    said = " ".join(result.output.split())
    assert "c: erased 2 item(s): 1 fragment(s) rewritten" in said
    assert "no undo can bring them back" in said and "1 given were not there: 'nobody'" in said
    assert "erase c: 5/5" in " ".join(result.stderr.split())  # its progress
    assert collection.count() == 2 * ROWS - 2

    result = runner.invoke(app, ["erase", *base, "--where", f"who = '{MARKER}'", "-y", "--json"])

    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout)
    assert (done["erased"], done["not_found"]) == (2, []) and done["versions_removed"] >= 3
    assert files_holding(tmp_path / "db", MARKER.encode()) == []


def test_the_cli_asks_before_erasing_and_refuses_mixed_selectors(
    tmp_path, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    base = ["--db", str(tmp_path / "db"), "--collection", "c"]
    erased = item_id(ERASED[0])
    result = runner.invoke(app, ["erase", erased, *base], input="n\n")
    assert result.exit_code == 1 and "nothing erased" in result.output
    assert "for good (every older version is removed: no undo)?" in result.stderr
    result = runner.invoke(app, ["erase", erased, *base, "--where", "n = 1", "-y"])
    assert result.exit_code == 2 and "not both" in result.output
    result = runner.invoke(app, ["erase", *base, "-y"])
    assert result.exit_code == 2 and "name the ids to erase" in result.output
    with collection.pinned(collection.version):
        result = runner.invoke(app, ["erase", erased, *base, "-y"])
    assert result.exit_code == BUSY_EXIT, result.output  # try again once that write ends
    assert "probembed erase --force" in " ".join(result.output.split())
    assert collection.count() == 2 * ROWS


def open_files_holding(pid: int, needle: bytes) -> list[str]:
    """The regular files a process holds open (unlinked ones too, read through /proc) whose
    bytes hold `needle`: where a search snapshot keeps its texts and means."""
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if fd.is_file() and needle in fd.read_bytes():
                found.append(os.readlink(fd))
    return found


def test_the_service_erases_and_keeps_nothing_of_the_items_in_its_process(
    tmp_path, pydoc_pipeline_dir
):
    cache = tmp_path / "cache"
    db = tmp_path / "db"
    documents = [
        {"id": r.id, "text": r.text, "metadata": r.metadata}
        for r in (record_of(i) for i in range(2 * ROWS))
    ]
    erased = [item_id(i) for i in ERASED]
    with (
        Server(db, pydoc_pipeline_dir, env={"PROBEMBED_CACHE_DIR": str(cache)}) as server,
        server.client() as http,
    ):
        http.post("/v1/collections", json={"name": "c"})
        wrote = http.post("/v1/collections/c/documents", json={"documents": documents})
        assert wrote.json()["added"] == 2 * ROWS
        query = {"query": f"{MARKER} customer", "k": 5, "hybrid": True}
        assert http.post("/v1/collections/c/search", json=query).json()["results"][0]["hits"]
        pid = server.process.pid
        assert open_files_holding(pid, MARKER.encode())  # its snapshot's texts
        assert files_holding(cache, text_key(record_of(ERASED[0]).text))  # its children's

        for refused in ({"ids": erased, "where": "n = 1"}, {"doc": True, "where": "n = 1"}, {}):
            assert http.post("/v1/collections/c/erase", json=refused).status_code == 422
        bad = http.post("/v1/collections/c/erase", json={"where": "colour = 'red'"})
        assert bad.status_code == 422 and "no field colour" in bad.text
        every = http.post("/v1/collections/c/erase", json={"where": "1 = 1"})  # erased all
        assert every.status_code == 422 and 'pass "all": true to erase' in every.json()["detail"]
        alone = http.post("/v1/collections/c/erase", json={"ids": erased, "all": True})
        assert alone.status_code == 422 and "give 'where'" in alone.text
        versions = history(Database(db).open("c"))
        typo = http.post("/v1/collections/c/erase", json={"ids": ["nosuchid"]})
        assert typo.status_code == 200, typo.text
        nothing = typo.json()
        assert (nothing["erased"], nothing["not_found"], nothing["count"]) == (
            0,
            ["nosuchid"],
            2 * ROWS,
        )
        assert (nothing["versions_removed"], nothing["bytes_freed"]) == (0, 0)
        assert history(Database(db).open("c")) == versions
        deleted = http.post("/v1/collections/c/delete", json={"ids": erased[:1]})
        assert deleted.status_code == 200, deleted.text
        done = http.post("/v1/collections/c/erase", json={"ids": [*erased, "nobody"]})

        assert done.status_code == 200, done.text
        report = done.json()
        assert (report["erased"], report["erased_deleted"], report["not_found"]) == (
            len(erased),
            1,
            ["nobody"],
        )
        assert report["count"] == 2 * ROWS - len(erased)
        assert report["cache_entries_evicted"] == len(erased) * 2
        assert open_files_holding(pid, MARKER.encode()) == []
        for root in (db, cache):
            assert files_holding(root, MARKER.encode()) == []
        again = http.post("/v1/collections/c/search", json={**query, "k": 2 * ROWS}).json()
        hits = again["results"][0]["hits"]
        assert len(hits) == 2 * ROWS - len(erased) and not {h["id"] for h in hits} & set(erased)


def test_an_erase_stopped_by_ctrl_c_says_what_it_keeps_and_the_same_command_completes_it(
    tmp_path, monkeypatch, cache_dir, cached_pipeline
):
    collection = filled(tmp_path, cached_pipeline)
    args = ["erase", *(item_id(i) for i in ERASED), "--db", str(tmp_path / "db"), "-c", "c", "-y"]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C once the rows are deleted, before the prune

    with monkeypatch.context() as patched:
        patched.setattr(erasure.CollectionErasure, "_marked", interrupted)
        stopped = runner.invoke(app, args)

    assert stopped.exit_code == 130
    said = " ".join(stopped.output.split())
    assert "the erased ones there or gone" in said
    assert "the same command completes the erasure" in said
    assert collection.count() == 2 * ROWS - len(ERASED)
    assert files_holding(tmp_path / "db", MARKER.encode())  # in the older versions
    assert runner.invoke(app, [*args, "--missing-ok"]).exit_code == 0
    assert files_holding(tmp_path / "db", MARKER.encode()) == []


def test_the_cli_refuses_a_bad_filter_before_it_asks(tmp_path, cache_dir, cached_pipeline):
    """`erase --where "nosuch = 1"` without --yes asked to erase for good first, and only
    then said the filter was bad: a person confirmed an erasure that could never run. A
    filter the erasure refuses (an unknown field, one it cannot parse, one keeping every
    item without --all) and a missing collection are refused before the question."""
    collection = filled(tmp_path, cached_pipeline)
    base = ["--db", str(tmp_path / "db"), "--collection", "c"]
    cases = [
        (["--where", "nosuch = 1"], "no field nosuch"),
        (["--where", "who = = 'x'"], "invalid filter"),
        (["--where", "1 = 1"], "selects every item of collection 'c' (300)"),
        (["--where", "  "], "--where must be a filter (an SQL condition)"),
        (["--where", "who = 'x'", "--collection", "gone"], "no collection 'gone'"),
    ]
    for args, said in cases:
        for given in ("y\n", None):
            result = runner.invoke(app, ["erase", *base, *args], input=given)
            assert result.exit_code == 2, result.output
            assert said in " ".join(result.output.split()), result.output
            assert "for good" not in result.output and "nothing erased" not in result.output
    everything = runner.invoke(app, ["erase", *base, "--where", "1 = 1", "--all"], input="n\n")
    assert "for good" in everything.output and "nothing erased" in everything.output  # asked
    assert collection.count() == 2 * ROWS
