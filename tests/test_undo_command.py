"""`probembed undo` (`Collection.undo`): a collection's last write taken back as `revert`
takes back a stopped one, the ids it changed put back and every other row left; there was no
way to undo a write but LanceDB's Python API, whose rollback of the table takes back every
commit after the version, other writers' too."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from probembed.chunking import ChunkSettings
from probembed.interfaces.cli import app
from probembed.store import Database, Record, ingest, ingest_documents

runner = CliRunner()
#: Chunks of a few words: a document of several chunks, a write of several commits.
SMALL = ChunkSettings.sized(16)


def texts(root: Path) -> dict[str, str]:
    """Every item of collection c at root, id -> text."""
    collection = Database(root).open("c")
    return {i: row["text"] for i, row in collection.rows(sorted(collection.ids())).items()}


def undo(root: Path, *args: str) -> dict:
    """`probembed undo -c c` on the database at root, and what it says it did (--json)."""
    result = runner.invoke(app, ["undo", "-c", "c", "--db", str(root), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_undo_takes_back_the_last_write_and_an_undo_of_it_puts_it_back(tmp_path, hash_pipeline):
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ingest([Record(i, f"the first {i}") for i in "abc"], collection, hash_pipeline)
    first = collection.version
    changed = [Record("b", "b written again"), Record("d", "a new one")]
    ingest(changed, collection, hash_pipeline, upsert=True)
    upserted = texts(root)
    collection.delete(["c"])

    done = undo(root)  # the delete

    assert (done["restored"], done["removed"], done["left"]) == (["c"], [], [])
    assert texts(root) == upserted
    again = undo(root)  # the undo: c deleted again
    assert again["undone"] == [done["version"]] and again["removed"] == ["c"]
    assert set(texts(root)) == {"a", "b", "d"}
    said = runner.invoke(app, ["undo", "-c", "c", "--db", str(root), "--to", str(first)])
    assert said.exit_code == 0, said.output
    assert f"c: undid versions {first + 1}-" in said.stderr
    assert "2 item(s) it replaced or deleted back as they were, 1 it added taken out" in said.stderr
    assert texts(root) == {i: f"the first {i}" for i in "abc"}


def test_undo_of_one_version_names_it_apart_from_the_word(tmp_path, hash_pipeline):
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ingest([Record("a", "the first a")], collection, hash_pipeline)
    collection.delete(["a"])
    deleted = collection.version

    said = runner.invoke(app, ["undo", "-c", "c", "--db", str(root)])

    assert said.exit_code == 0, said.output
    assert said.stderr.startswith(
        f"c: undid version {deleted}, its items put back as at version {deleted - 1}, in "
        f"version {deleted + 1}: 1 item(s) it replaced or deleted back as they were"
    )


def document(i: int, version: str, paragraphs: int = 6) -> str:
    """Document i as Markdown: a title and paragraphs of a few words, each a chunk."""
    body = "\n\n".join(
        f"Paragraph {p} of document {i}, {version} version." for p in range(paragraphs)
    )
    return f"# Document {i}\n\n{body}\n"


def test_undo_takes_back_a_chunked_ingest_whole(tmp_path, hash_pipeline):
    """A chunked ingest is many commits, its documents' chunks 0 last: undoing its last
    commit alone left documents of two versions. The undo reaches back to where every
    document it touched was whole."""
    root, docs = tmp_path / "db", tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"doc{i:02d}.md").write_text(document(i, "first"))
    collection = Database(root, create=True).collection("c")
    ingest_documents(docs, collection, hash_pipeline, SMALL, batch_size=4)
    before = texts(root)
    for i in range(0, 12, 2):  # half the documents change, one goes
        (docs / f"doc{i:02d}.md").write_text(document(i, "second", 4))
    (docs / "doc11.md").unlink()
    start = collection.version
    ingest_documents(docs, collection, hash_pipeline, SMALL, sync=True, batch_size=4)
    assert collection.version > start + 2 and texts(root) != before  # several commits

    done = undo(root)

    assert done["to"] == start and done["undone"][0] == start + 1
    assert texts(root) == before


def test_undo_takes_back_a_chunked_sync_whose_last_commits_touch_only_whole_documents(
    tmp_path, hash_pipeline
):
    """A chunked sync's removal is its last commit; where the documents the run changed
    are whole at the removal's start (notes of one chunk each), the undo took back the
    removal alone and left the changed notes in their new version. The run keeps the
    versions it committed (`record_span`), and an undo takes them back together."""
    root, docs = tmp_path / "db", tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"note{i}.md").write_text(f"Short note {i}, first version.\n")
    collection = Database(root, create=True).collection("c")
    ingest_documents(docs, collection, hash_pipeline, SMALL)
    before = texts(root)
    (docs / "note0.md").write_text("Short note 0, second version.\n")
    (docs / "note3.md").unlink()
    start = collection.version
    report = ingest_documents(docs, collection, hash_pipeline, SMALL, sync=True)
    assert (report.updated, report.removed, report.unchanged) == (1, 1, 2)

    done = undo(root)

    assert done["to"] == start and done["undone"][0] == start + 1
    assert sorted(done["restored"]) == ["note0.md#0", "note3.md#0"]
    assert texts(root) == before


def test_undo_refuses_a_chunked_ingest_that_made_the_collection(tmp_path, hash_pipeline):
    """A first chunked ingest is several commits, the first of which made the collection:
    an undo took back its last commits and left chunks of documents without their chunk 0.
    It is refused as a first write is, naming the drop."""
    root, docs = tmp_path / "db", tmp_path / "docs"
    docs.mkdir()
    (docs / "doc.md").write_text(document(0, "first"))
    collection = Database(root, create=True).collection("c")
    ingest_documents(docs, collection, hash_pipeline, SMALL, batch_size=2)
    made = texts(root)
    assert collection.version > 2  # several commits

    said = runner.invoke(app, ["undo", "-c", "c", "--db", str(root)])

    assert said.exit_code == 2, said.output
    assert "holds only what its first write made" in " ".join(said.stderr.split())
    assert texts(root) == made


def test_undo_refuses_what_it_cannot_take_back_naming_why(tmp_path, hash_pipeline):
    root = tmp_path / "db"
    collection = Database(root, create=True).collection("c")
    ingest([Record("a", "only one")], collection, hash_pipeline)
    base = ["undo", "-c", "c", "--db", str(root)]

    first = runner.invoke(app, base)
    beyond = runner.invoke(app, [*base, "--to", "7"])

    assert first.exit_code == 2 and beyond.exit_code == 2
    assert "holds only what its first write made" in " ".join(first.stderr.split())
    assert "drop the collection instead" in " ".join(first.stderr.split())
    assert "cannot undo to version 7: collection 'c' holds versions 1 to 1" in " ".join(
        beyond.stderr.split()
    )
    assert texts(root) == {"a": "only one"}
