"""`Database.backup` / `probembed backup`: a collection copied at one version while another
process writes and prunes it opens as a database of its own, holding that version's rows and
answering its searches.

A plain `cp -a` of a served database broke 3 copies in 12 (a manifest copied after the data
named files it had not copied), and nothing said so until a search failed.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from test_planning_writers import Held, chunked, chunks_of, write_docs
from tuning_support import tuned_copy
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.store import (
    Batch,
    Database,
    PipelineInfo,
    Record,
    StorageFullError,
    StoreError,
    ingest,
)
from probembed.store.backup import CollectionBackup

runner = CliRunner()
QUERIES = ["cell gene dose", "brain virus", "heart risk trial"]


def rows_of(db: Path | str, name: str = "c") -> pa.Table:
    """Every row of a collection's table, every column, in the order a scan reads them."""
    return Database(db).table(name).to_arrow()


def own_files(db: Path, name: str = "c") -> set[str]:
    """The files of a collection's own folder, relative to it."""
    folder = db / ".probembed" / name
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_backup_while_another_process_writes_and_prunes_is_the_source_at_one_version(
    tmp_path, pydoc_pipeline_dir, pydoc_pipeline, monkeypatch
):
    db, to = tmp_path / "db", tmp_path / "backup"
    chunks_of(write_docs(tmp_path / "A", range(8), "v1"), db, pydoc_pipeline)
    Database(db).open("c").search(QUERIES[0], hybrid=True)  # a text index, which the copy keeps
    # a sync of other documents, held after its first commit: its pin stands
    held = Held(chunked(db, write_docs(tmp_path / "B", range(4, 12), "v2"), pydoc_pipeline_dir,
                        "--sync"), tmp_path / "writer.log")  # fmt: skip
    seen: dict = {}
    copied = CollectionBackup._rows_copied

    def meanwhile(self, at, target, record):
        """Once the version is pinned: what the source holds and answers at it; then the
        writer's sync to its end and a compaction that prunes every version it may."""
        seen["rows"], seen["version"] = rows_of(db), int(at.version)
        source = Database(db).open("c")
        seen["results"] = source.search(QUERIES, k=5), source.search(QUERIES, k=5, hybrid=True)
        held.release()
        compact = ["compact", "-c", "c", "--keep", "0", "--db", str(db)]
        done = subprocess.run([sys.executable, "-m", "probembed", *compact], capture_output=True)
        assert done.returncode == 0, done.stderr
        return copied(self, at, target, record)

    monkeypatch.setattr(CollectionBackup, "_rows_copied", meanwhile)
    (backup,) = Database(db).backup(to)

    source = Database(db).open("c")
    assert backup.version == seen["version"] < source.version  # the writer went on after it
    assert (backup.collection, backup.items) == ("c", seen["rows"].num_rows)
    assert rows_of(to).equals(seen["rows"])  # every row, every column, in the same order
    assert rows_of(to).schema.equals(seen["rows"].schema, check_metadata=True)
    copy = Database(to).open("c")
    assert (copy.search(QUERIES, k=5), copy.search(QUERIES, k=5, hybrid=True)) == seen["results"]
    assert copy.tags() == [] and source.tags() == []  # no pin copied, none left behind
    assert own_files(to) == {"agreement.json"} | {
        f for f in own_files(db) if f.startswith("pipeline/")
    }  # no lock, no pin's lock file, no search graph


def test_the_copys_agreement_is_measured_again_once_a_fifth_of_it_is_rewritten(
    tmp_path, pydoc_pipeline
):
    """The agreement record marks the rows measured by their row ids, which the copy
    renumbers: kept as they were, the copy's rewritten rows all lay below the source's mark,
    and a copy rewritten whole never measured its agreement again."""
    source = Database(tmp_path / "db", create=True).collection("c")
    items = [Record(f"r{i}", f"record {i} about cell gene {i % 7}") for i in range(200)]
    ingest(items, source, pydoc_pipeline, batch_size=20)  # ten fragments: large row ids
    assert not source.agreement_due()
    source.db.backup(tmp_path / "to")

    copy = Database(tmp_path / "to").open("c")
    assert copy.agreement().tolist() == source.agreement().tolist()
    assert not copy.agreement_due()
    texts = [f"record {i} rewritten" for i in range(50)]
    fused = pydoc_pipeline.encode(texts)
    info = PipelineInfo.of(pydoc_pipeline)
    copy.upsert(Batch([f"r{i}" for i in range(50)], texts, [{}] * 50, fused, info))
    assert copy.agreement_due()


def test_a_copy_answers_with_the_kept_calibration_tuning_and_adapted_weights(
    tmp_path, hash_pipeline, sentences
):
    source = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record(f"s{i}", t) for i, t in enumerate(sentences[:80])], source, hash_pipeline)
    source.record_pipeline(tuned_copy(hash_pipeline, sentences), replace=True)
    source.record_agreement(source.load_pipeline())  # weights tilted by gamma 5
    source.db.backup(tmp_path / "to")

    copy = Database(tmp_path / "to").open("c")
    assert copy.load_pipeline().setting_changes(source.load_pipeline()) == []
    assert copy.stats().adapted_weights == source.stats().adapted_weights is not None
    found, want = copy.search(QUERIES, k=5), source.search(QUERIES, k=5)
    assert found == want and found[0]["hits"][0]["p_relevant"] is not None


def test_a_backup_is_refused_where_something_is_there_or_a_collection_is_not(
    tmp_path, pydoc_pipeline
):
    db = Database(tmp_path / "db", create=True)
    ingest([Record("a", "a text")], db.collection("c"), pydoc_pipeline)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    for there in ("full", "file"):
        with pytest.raises(StoreError, match=rf"cannot back up into {tmp_path / there}: some"):
            db.backup(tmp_path / there)
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
    with pytest.raises(StoreError, match="no collection 'nope'"):
        db.backup(tmp_path / "new", ["c", "nope"])
    with pytest.raises(StoreError, match=r"collections must be a list .*wrap it: \['c'\]$"):
        db.backup(tmp_path / "new", "c")  # read a letter each: "docs" was "no collection 'd'"
    assert not (tmp_path / "new").exists()  # refused before anything was written
    (tmp_path / "empty").mkdir()
    assert [b.collection for b in db.backup(tmp_path / "empty")] == ["c"]
    assert Database(tmp_path / "empty").open("c").ids() == {"a"}


def test_the_cli_backs_up_and_restores_by_a_backup_the_other_way(tmp_path, pydoc_pipeline):
    db = two_collections(tmp_path / "db", pydoc_pipeline)
    to, back = str(tmp_path / "to"), str(tmp_path / "back")

    said = runner.invoke(app, ["backup", to, "--db", str(db.path), "-c", "d", "--json"])
    assert said.exit_code == 0, said.output
    assert [json.loads(line) for line in said.stdout.splitlines()] == [
        {"collection": "d", "version": db.open("d").version, "items": 3}
    ]
    said = runner.invoke(app, ["backup", back, "--db", to])
    assert said.exit_code == 0, said.output
    assert f"d: version 1, 3 item(s) copied to {back}" in said.stderr
    assert Database(back).collections() == ["d"]
    assert rows_of(back, "d").equals(rows_of(db.path, "d"))
    again = runner.invoke(app, ["backup", back, "--db", to])
    assert again.exit_code == 2 and f"cannot back up into {back}" in again.stderr


def failing_at(name: str):
    """`Database.create_table` that fails, as a full disk does, at the table `name`."""
    create = Database.create_table

    def create_table(self, table, data, schema):
        if table == name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return create(self, table, data, schema)

    return create_table


def two_collections(root: Path, pipeline) -> Database:
    """A database of collections c and d, three items each."""
    db = Database(root, create=True)
    for name in ("c", "d"):
        ingest([Record(f"{name}{i}", f"{name} text {i}") for i in range(3)], db.collection(name),
               pipeline)  # fmt: skip
    return db


def test_a_backup_that_fails_part_way_leaves_nothing_where_it_was_to_be(
    tmp_path, pydoc_pipeline, monkeypatch
):
    db = two_collections(tmp_path / "db", pydoc_pipeline)
    monkeypatch.setattr(Database, "create_table", failing_at("d"))
    with pytest.raises(StorageFullError, match="no space left on device for collection 'd'") as f:
        db.backup(tmp_path / "to")
    assert str(db.path) not in str(f.value)  # the copy's disk, not the source's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]  # no half copy, nothing staged
    monkeypatch.undo()
    assert [b.collection for b in db.backup(tmp_path / "to")] == ["c", "d"]
