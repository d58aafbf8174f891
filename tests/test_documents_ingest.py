"""Chunked ingest of real file formats: heading paths, offsets, pages, change detection, and
a clear report for every file that cannot be read."""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys

import pytest
from fpdf import FPDF
from memory_support import PATH
from release_support import as_an_earlier_release_wrote
from typer.testing import CliRunner

from probembed.chunking import ChunkSettings, GivenChunking, last_paragraph_break
from probembed.documents import record_from
from probembed.encoders.hashing import CACHED_CHARS
from probembed.interfaces.cli import app
from probembed.store import Database, IngestError, StoreError, ingest, ingest_documents
from probembed.store.chunked import STREAM_BYTES as STREAM_DEFAULT
from probembed.store.chunked import cut_at, cutting, ingest_parsed, read_documents
from probembed.store.embed_job import embed_to_parquet
from probembed.store.formats import read_file
from probembed.store.readers import Problem, Record

SMALL = ChunkSettings(48, 8)  # small chunks, so a long file has many


def long_markdown(last: str) -> str:
    """A guide whose answer sits in its last section, far past any model's token limit."""
    sections = [
        f"## Chapter {i}\n\n"
        + " ".join(f"Routine step {i}.{j} of the procedure." for j in range(12))
        for i in range(20)
    ]
    return (
        "# Field guide\n\nAn introduction.\n\n"
        + "\n\n".join(sections)
        + f"\n\n## Troubleshooting\n\n{last}\n"
    )


HTML = """<html><head><title>Quarterly page</title><script>var tracking = "secret-tracker";</script>
<style>body { color: red }</style></head><body>
<nav><a href="/">Home</a> <a href="/menu">navigation-menu-item</a></nav>
<h1>Quarterly review</h1><p>Revenue grew in the northern region.</p>
<h2>Outlook</h2><ul><li>Hiring continues in <b>robotics</b> teams.</li></ul>
<footer>copyright footer-text</footer></body></html>"""


def write_pdf(path, pages):
    """A real PDF (fpdf2) with one text block per page."""
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    pdf.output(str(path))


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text(long_markdown("The flux capacitor overheats when left on."))
    (root / "page.html").write_text(HTML)
    (root / "notes.txt").write_text("Plain notes about gardening and tomato plants.")
    pages = [
        "Introduction to the study.",
        "Methods used in the lab.",
        "Quantum entanglement results.",
    ]
    write_pdf(root / "report.pdf", pages)
    return root


def test_folder_chunks_keep_headings_offsets_and_pages(tmp_path, folder, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    report = ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    assert (report.added, report.updated, report.unchanged, report.problems) == (4, 0, 0, [])
    assert report.chunks_written == collection.count() > 20
    hit = collection.search("flux capacitor overheats", k=3, exact=True, group_by_doc=True)["hits"][
        0
    ]
    meta = hit["metadata"]
    assert meta["doc_id"] == "guide.md" and meta["heading"] == "Field guide > Troubleshooting"
    source = (folder / "guide.md").read_text()
    assert source[meta["start"] : meta["end"]] == hit["text"] and "flux capacitor" in hit["text"]
    assert meta["title"] == "Field guide" and hit["other_chunks"] >= 0
    pdf_hit = collection.search("quantum entanglement results", k=1, exact=True)["hits"][0]
    assert pdf_hit["metadata"]["doc_id"] == "report.pdf" and pdf_hit["metadata"]["page"] == 3
    texts = " ".join(h["text"] for h in collection.search("page", k=200, exact=True)["hits"])
    html = [h for h in collection.search("robotics hiring", k=5, exact=True)["hits"]
            if h["metadata"]["doc_id"] == "page.html"]  # fmt: skip
    assert html and html[0]["metadata"]["title"] == "Quarterly page"
    for furniture in ("secret-tracker", "navigation-menu-item", "footer-text", "color: red"):
        assert furniture not in texts


def test_every_report_of_a_folder_names_the_files_no_reader_takes(tmp_path, folder, pydoc_pipeline):
    """A .docx beside the Markdown was left out by the library without a word (the CLI said
    it; a Python caller's report did not)."""
    for name in ("draft.docx", "sheet.csv", "more/sheet2.CSV", ".hidden.docx"):
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text("x")
    db = Database(tmp_path / "db", create=True)
    chunked = ingest_documents(folder, db.collection("chunks"), pydoc_pipeline, SMALL)
    assert chunked.unread == {".csv": 2, ".docx": 1}
    assert "; not read: 3 file(s), .csv (2), .docx (1) (this run reads .txt, .md, " in (
        chunked.summary()
    )
    plain = ingest(folder, db.collection("plain"), pydoc_pipeline)  # the PDF stops nothing
    embedded = embed_to_parquet(folder, tmp_path / "parquet", pydoc_pipeline)
    for report, reads in ((plain, "chunked ingestion (--chunk)"),
                          (embedded, "`probembed embed --chunk`")):  # fmt: skip
        assert report.unread == {".csv": 2, ".docx": 1, ".html": 1, ".pdf": 1}  # text files only
        assert f"{reads} also .html, .htm, .pdf)" in report.summary()
    assert chunked.added == 4 and plain.added == embedded.rows == 2
    one_file = ingest_documents(folder / "notes.txt", db.collection("one"), pydoc_pipeline, SMALL)
    assert one_file.unread == {} and "not read" not in one_file.summary()


def test_every_report_of_a_folder_names_the_links_to_folders_it_did_not_follow(
    tmp_path, folder, pydoc_pipeline
):
    """A link to a folder was passed over without a word (os.walk does not follow it): its
    documents were never ingested and nothing said so."""
    shared = tmp_path / "shared"
    (shared / "deep").mkdir(parents=True)
    (shared / "deep" / "faq.md").write_text("# FAQ\n\nLinked answers.")
    (folder / "shared").symlink_to(shared, target_is_directory=True)
    (folder / "sub").mkdir()
    (folder / "sub" / "loop").symlink_to(folder, target_is_directory=True)  # a cycle
    db = Database(tmp_path / "db", create=True)
    chunked = ingest_documents(folder, db.collection("chunks"), pydoc_pipeline, SMALL)
    plain = ingest(folder, db.collection("plain"), pydoc_pipeline)
    embedded = embed_to_parquet(folder, tmp_path / "parquet", pydoc_pipeline)
    assert chunked.added == 4 and plain.added == embedded.rows == 2  # faq.md is not read
    named = f"shared/ -> {os.path.realpath(shared)}, sub/loop/ -> {os.path.realpath(folder)}"
    for report in (chunked, plain, embedded):
        assert [x.name for x in report.unread.linked] == ["shared", "sub/loop"]
        assert f"; not followed: 2 link(s) out of the folder or to a folder, {named} (" in (
            report.summary()
        )
    alone = ingest_documents(shared, db.collection("shared"), pydoc_pipeline, SMALL)
    assert alone.added == 1 and "not followed" not in alone.summary()
    only_links = tmp_path / "only"  # where a word matters most: there is nothing else
    only_links.mkdir()
    (only_links / "shared").symlink_to(shared, target_is_directory=True)
    for write in (ingest_documents, ingest):
        with pytest.raises(FileNotFoundError, match="not followed: 1 link.s. .* shared/ -> "):
            write(only_links, db.collection("none"), pydoc_pipeline)


def test_a_beir_folder_reports_the_documents_beside_its_corpus(tmp_path, pydoc_pipeline):
    """A corpus.jsonl makes a folder a BEIR folder, read by its corpus alone: Markdown beside
    it was left out without a word."""
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "Python lists are mutable."}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "lists"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (beir / "guide.md").write_text("# Guide\n\nTuples are not.")
    (beir / "more").mkdir()
    (beir / "more" / "notes.txt").write_text("Sets hold unique items.")
    db = Database(tmp_path / "db", create=True)
    plain = ingest(beir, db.collection("plain"), pydoc_pipeline)
    chunked = ingest_documents(beir, db.collection("chunks"), pydoc_pipeline, SMALL)
    for report in (plain, chunked):
        assert report.unread == {".md": 1, ".txt": 1}  # not queries.jsonl or qrels/: BEIR's
        assert report.summary().endswith(
            "; not read: 2 file(s), .md (1), .txt (1) (a folder with a corpus.jsonl is a BEIR "
            "folder: only its corpus is read)"
        )
    assert plain.added == 1 and chunked.added == 1
    moved = beir.rename(tmp_path / "moved")  # the report says what the run did, not what is now
    assert plain.summary().endswith("only its corpus is read)") and not (beir.exists())
    beir = moved.rename(beir)
    (beir / "guide.md").unlink()
    (beir / "more" / "notes.txt").unlink()
    again = ingest(beir, db.collection("plain"), pydoc_pipeline)
    assert again.unread == {} and "not read" not in again.summary()


def test_a_documents_chunks_are_deleted_by_its_id_in_one_commit(tmp_path, folder, pydoc_pipeline):
    db = Database(tmp_path / "db", create=True)
    collection = db.collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    chunks = len(collection.document_index()["guide.md"].ids)
    version = collection.version
    assert collection.delete_documents(["guide.md", "guide.md", "none"]) == (chunks, ["none"])
    assert collection.version == version + 1  # one commit
    assert "guide.md" not in collection.document_index() and chunks > 1
    whole = db.collection("whole")
    ingest([Record("a", "some text")], whole, pydoc_pipeline)
    with pytest.raises(StoreError, match="holds no chunked documents"):
        whole.delete_documents(["a"])


def file_paths(collection) -> dict[str, set[str]]:
    """doc_id -> the `file_path` its chunks name, as a search reads them."""
    hits = collection.search("gizmo flux notes quarterly study", k=500, exact=True)["hits"]
    named: dict[str, set[str]] = {}
    for hit in hits:
        named.setdefault(hit["metadata"]["doc_id"], set()).add(hit["metadata"].get("file_path"))
    return named


def test_a_file_given_alone_is_refused_where_another_file_still_there_holds_its_id(
    tmp_path, pydoc_pipeline
):
    """A file given alone has its name as its id: `a/README.md` then `b/README.md` replaced
    the first document with the second. While the stored one's file is still there, the
    second is a problem that names both and what to do; once it is gone (moved, renamed),
    the second is an update."""
    first, second = tmp_path / "a" / "README.md", tmp_path / "b" / "README.md"
    for path, text in ((first, "Alpha install steps."), (second, "Beta release notes.")):
        path.parent.mkdir()
        path.write_text(text)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(first, collection, pydoc_pipeline, SMALL)
    assert file_paths(collection) == {"README.md": {str(first)}}
    version = collection.version
    with pytest.raises(IngestError) as refused:
        ingest_documents(second, collection, pydoc_pipeline, SMALL)
    told = str(refused.value)
    assert str(first) in told and str(second) in told and "delete --doc README.md" in told
    skipped = ingest_documents(second, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert (skipped.added, skipped.updated, len(skipped.problems)) == (0, 0, 1)
    assert collection.version == version  # nothing written either time
    first.rename(first.with_name("OLD.md"))
    moved = ingest_documents(second, collection, pydoc_pipeline, SMALL)
    assert (moved.updated, file_paths(collection)) == (1, {"README.md": {str(second)}})


def test_a_file_of_an_ingested_folder_given_alone_updates_its_document(
    tmp_path, folder, pydoc_pipeline
):
    """Re-ingesting the one file just edited stored it a second time, under its name beside
    its folder id (`notes/a.md` and `a.md`), and a search found it twice. With --sync it
    removed every other document of the collection."""
    nested = folder / "sub" / "tips.md"
    nested.parent.mkdir()
    nested.write_text("# Tips\n\nWater tomato plants early.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    stored = set(collection.document_index())
    nested.write_text("# Tips\n\nWater tomato plants late, and the flux capacitor never.")
    report = ingest_documents(nested, collection, pydoc_pipeline, SMALL)
    assert (report.added, report.updated) == (0, 1)
    assert set(collection.document_index()) == stored  # no second tips.md
    assert "late" in " ".join(h["text"] for h in collection.search("tomato", k=50)["hits"])
    version = collection.version
    with pytest.raises(
        StoreError, match=r"sync with one file would remove the 4 other document\(s\)"
    ):
        ingest_documents(nested, collection, pydoc_pipeline, SMALL, sync=True)
    assert collection.version == version and set(collection.document_index()) == stored


def test_a_file_given_alone_finds_its_document_by_its_file_not_its_name(tmp_path, pydoc_pipeline):
    """The file given alone was matched by its name first: `proj/docs/README.md` after the
    folder `proj` was refused as the root README.md's namesake (and the hint would have
    deleted the root one); a path through a linked folder was another file; a record whose
    own metadata holds a `file_path` was taken for the file and overwritten."""
    proj = tmp_path / "proj"
    (proj / "docs").mkdir(parents=True)
    (proj / "README.md").write_text("# Root\n\nThe project's front page.")
    (proj / "docs" / "README.md").write_text("# Docs\n\nHow to read the docs.")
    (tmp_path / "alias").symlink_to(proj, target_is_directory=True)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(tmp_path / "alias", collection, pydoc_pipeline, SMALL)  # paths via the link
    (proj / "docs" / "README.md").write_text("# Docs\n\nHow to read the docs, revised.")
    report = ingest_documents(proj / "docs" / "README.md", collection, pydoc_pipeline, SMALL)
    assert (report.added, report.updated, report.problems) == (0, 1, [])
    assert set(collection.document_index()) == {"README.md", "docs/README.md"}
    texts = {h["id"]: h["text"] for h in collection.search("docs", k=20, exact=True)["hits"]}
    assert "revised" in texts["docs/README.md#0"] and "front page" in texts["README.md#0"]
    records = tmp_path / "records.jsonl"
    notes = tmp_path / "notes.md"
    notes.write_text("Notes on gardening.")
    row = {"id": "doc-1", "text": "The moon landing.", "file_path": str(notes)}
    records.write_text(json.dumps(row) + "\n")
    mixed = Database(tmp_path / "db", create=True).collection("mixed")
    ingest_documents(records, mixed, pydoc_pipeline, SMALL)
    alone = ingest_documents(notes, mixed, pydoc_pipeline, SMALL)
    assert (alone.added, alone.updated) == (1, 0)  # its own document, the record kept
    assert set(mixed.document_index()) == {"doc-1", "notes.md"}


def test_a_folder_moved_or_checked_out_again_updates_its_documents(
    tmp_path, folder, pydoc_pipeline
):
    """A folder's ids are paths relative to it: the same folder moved, or a second checkout
    of it beside the first, holds the same documents. Unchanged ones are not embedded again,
    but their `file_path` names where they are now (it named the old place, and a citation
    built from it led nowhere); a changed one is an update, even while the first folder is
    still there, and names its new file. The same files through a linked folder are not
    moved."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    names = sorted(p.name for p in folder.iterdir())
    assert file_paths(collection) == {n: {str(folder / n)} for n in names}
    before = {h["id"]: h["score"] for h in collection.search("flux", k=50, exact=True)["hits"]}

    def hybrid(collection):
        return collection.search("flux tomato", k=50, exact=True, hybrid=True)["hits"]

    lexical_before = {h["id"] for h in hybrid(collection)}

    def no_encoding(texts):
        raise AssertionError(f"an unchanged document was embedded again: {texts[:1]}")

    moved = folder.rename(tmp_path / "moved")
    report = ingest_documents(moved, collection, pydoc_pipeline, SMALL, encode=no_encoding)
    assert (report.unchanged, report.relocated) == (len(names), len(names))
    assert "unchanged 4 (4 at a new path)" in report.summary()
    assert file_paths(collection) == {n: {str(moved / n)} for n in names}
    after = {h["id"]: h["score"] for h in collection.search("flux", k=50, exact=True)["hits"]}
    assert after == before  # the same rows and vectors, only the path rewritten
    lexical = {h["id"]: h["metadata"]["file_path"] for h in hybrid(collection)}
    assert set(lexical) == set(lexical_before)  # the text index built before still finds them
    assert set(lexical.values()) <= {str(moved / n) for n in names}
    version = collection.version
    (tmp_path / "alias").symlink_to(moved, target_is_directory=True)
    linked = ingest_documents(tmp_path / "alias", collection, pydoc_pipeline, SMALL)
    assert (linked.relocated, collection.version) == (0, version)
    again = ingest_documents(moved, collection, pydoc_pipeline, SMALL)
    assert (again.relocated, collection.version) == (0, version)
    checkout = tmp_path / "checkout"
    shutil.copytree(moved, checkout)
    (checkout / "notes.txt").write_text("Notes about flux and tomato plants.")
    again = ingest_documents(checkout, collection, pydoc_pipeline, SMALL)
    assert (again.updated, again.unchanged, again.problems) == (1, len(names) - 1, [])
    assert file_paths(collection) == {n: {str(checkout / n)} for n in names}


def test_grouping_gives_one_hit_per_document(tmp_path, folder, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    plain = collection.search("routine step of the procedure", k=5, exact=True)["hits"]
    grouped = collection.search("routine step of the procedure", k=5, exact=True, group_by_doc=True)
    docs = [h["metadata"]["doc_id"] for h in grouped["hits"]]
    assert len(docs) == len(set(docs)) == 4  # four documents, each once
    assert [h["metadata"]["doc_id"] for h in plain].count("guide.md") > 1
    assert grouped["hits"][0]["id"] == plain[0]["id"] and grouped["hits"][0]["other_chunks"] >= 4


def test_rerun_touches_only_what_changed(tmp_path, folder, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    version = collection.version
    again = ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    assert (again.unchanged, again.chunks_written, collection.version) == (4, 0, version)
    (folder / "guide.md").write_text(long_markdown("Reset the gizmo twice."))
    (folder / "notes.txt").unlink()
    before = collection.document_index()
    synced = ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True)
    assert (synced.added, synced.updated, synced.removed, synced.unchanged) == (0, 1, 1, 2)
    after = collection.document_index()
    assert set(after) == {"guide.md", "page.html", "report.pdf"}
    assert after["page.html"] == before["page.html"] and after["report.pdf"] == before["report.pdf"]
    assert len({h.partition("+")[0] for h in after["guide.md"].hashes}) == 1  # one version
    assert after["guide.md"].hashes != before["guide.md"].hashes
    assert collection.count() == sum(len(doc.ids) for doc in after.values())
    hit = collection.search("gizmo reset twice", k=1, exact=True)["hits"][0]
    assert hit["metadata"]["doc_id"] == "guide.md" and "gizmo" in hit["text"]


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_rerun_writes_again_a_chunk_deleted_by_id(
    tmp_path, folder, pydoc_pipeline, which, streamed
):
    """A document missing a chunk deleted by id was taken as unchanged for good: a middle
    one until gaps were looked for, the last one (no gap) until chunk 0 counted the chunks;
    a file read as a stream counts them too."""
    stream_bytes = 64 if streamed else STREAM_DEFAULT
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL, stream_bytes=stream_bytes)
    whole = sorted(collection.document_index()["guide.md"].ids, key=lambda i: int(i[9:]))
    gone = whole[1] if which == "middle" else whole[-1]
    assert len(whole) > 2 and collection.delete([gone]) == 1
    again = ingest_documents(folder, collection, pydoc_pipeline, SMALL, stream_bytes=stream_bytes)
    assert (again.updated, again.unchanged, again.chunks_removed) == (1, 3, 0)
    assert sorted(collection.document_index()["guide.md"].ids) == sorted(whole)
    assert collection.rows([gone])[gone]["text"]
    settled = ingest_documents(folder, collection, pydoc_pipeline, SMALL, stream_bytes=stream_bytes)
    assert (settled.updated, settled.unchanged, settled.chunks_written) == (0, 4, 0)


def test_a_chunk_0_stored_before_it_counted_the_chunks_is_still_unchanged(
    tmp_path, folder, pydoc_pipeline
):
    """Collections chunked before chunk 0 carried the count are read by the old rule (no gap
    from 0): upgrading probembed embeds none of their documents again."""
    import lancedb

    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    table = lancedb.connect(tmp_path / "db").open_table("docs")
    marks = table.search().where("chunk = 0").select(["id", "doc_hash"]).limit(None).to_list()
    for mark in marks:  # as an older probembed wrote them: the digest alone
        assert "+" in mark["doc_hash"]
        digest = mark["doc_hash"].rpartition("+")[0]
        table.update(where=f"id = '{mark['id']}'", values={"doc_hash": digest})
    again = ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    assert (again.unchanged, again.chunks_written) == (4, 0)


def test_other_chunk_settings_re_chunk_every_document(tmp_path, folder, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    count = collection.count()
    bigger = ChunkSettings(SMALL.max_tokens * 4, SMALL.overlap_tokens)
    again = ingest_documents(folder, collection, pydoc_pipeline, bigger)
    assert (again.unchanged, again.updated) == (0, 4)
    assert collection.count() < count  # fewer, larger chunks replace the old ones
    same = ingest_documents(folder, collection, pydoc_pipeline, bigger)
    assert (same.unchanged, same.chunks_written) == (4, 0)


#: The walkthrough's size: a team lead's folder ingested with `--chunk-tokens 128`.
AT_128 = ChunkSettings.sized(128)


def long_section(last: str) -> str:
    """A page of one long section, so the chunk size decides where its chunks end (those of
    `long_markdown` end at its short sections at 128 tokens and at 256 alike)."""
    steps = (" ".join(f"Step {i}.{j} of the routine." for j in range(4)) for i in range(40))
    return "# Guide\n\n" + "\n\n".join(steps) + f"\n\n{last}\n"


def kept_docs(tmp_path):
    """A folder of a long guide (more chunks at 128 tokens than at 256) and a short note."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(long_section("The flux capacitor overheats."))
    (docs / "notes.txt").write_text("Plain notes about gardening and tomato plants.")
    return docs


def chunks_of(collection, doc_id):
    """A stored document's chunks, id -> text, in id order: what the size it was cut at
    decides."""
    ids = sorted(collection.document_index()[doc_id].ids)
    rows = collection.rows(ids)
    return {i: rows[i]["text"] for i in ids}


def cut_alone(tmp_path, path, settings, pipeline):
    """The chunk ids one file gets cut at `settings` into a collection of its own."""
    name = f"{path.stem}-{settings.max_tokens}-{settings.overlap_tokens}"
    collection = Database(tmp_path / "reference", create=True).collection(name)
    ingest_documents(path, collection, pipeline, settings)
    return chunks_of(collection, path.name)


def test_a_run_given_no_chunk_settings_leaves_each_document_at_its_own(tmp_path, pydoc_pipeline):
    """The walkthrough: ingested with --chunk-tokens 128, the same cron sync without it
    re-chunked every document at the default 256 without a word ('updated 39, chunks
    written 355, removed 419' for an unchanged folder)."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    first = ingest_documents(docs, collection, pydoc_pipeline, AT_128)
    version, count = collection.version, collection.count()
    again = ingest_documents(docs, collection, pydoc_pipeline, sync=True)  # no settings
    assert (again.unchanged, again.updated, again.removed) == (2, 0, 0)
    assert (again.chunks_written, again.chunks_removed, again.rechunked) == (0, 0, 0)
    assert collection.version == version and collection.count() == count == first.chunks_written
    # a changed document is re-cut at the 128 it was cut at, a new one at the 128 they share
    (docs / "guide.md").write_text(long_section("Reset the gizmo twice."))
    (docs / "new.md").write_text(long_section("A new page."))
    changed = ingest_documents(docs, collection, pydoc_pipeline, sync=True)
    assert (changed.added, changed.updated, changed.unchanged, changed.rechunked) == (1, 1, 1, 0)
    guide = cut_alone(tmp_path, docs / "guide.md", AT_128, pydoc_pipeline)
    assert guide != cut_alone(tmp_path, docs / "guide.md", ChunkSettings(), pydoc_pipeline)
    assert chunks_of(collection, "guide.md") == guide
    new = cut_alone(tmp_path, docs / "new.md", AT_128, pydoc_pipeline)
    assert new != cut_alone(tmp_path, docs / "new.md", ChunkSettings(), pydoc_pipeline)
    assert chunks_of(collection, "new.md") == new
    settled = ingest_documents(docs, collection, pydoc_pipeline)
    assert (settled.unchanged, settled.chunks_written) == (3, 0)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("moved", ["renamed", "subfolder"])
def test_a_renamed_or_moved_file_keeps_the_settings_it_was_cut_at(
    tmp_path, pydoc_pipeline, moved, streamed
):
    """A sync with no settings cut a renamed file at the default 256 while the rest of its
    folder stayed at 128: it takes the settings of the stored document of its content,
    the one the sync removes, whatever the others are cut at."""
    stream_bytes = 64 if streamed else STREAM_DEFAULT
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, AT_128, stream_bytes=stream_bytes)
    (docs / "other.md").write_text(long_section("Another page, cut at 64."))
    at_64 = ChunkSettings.sized(64)
    ingest_documents(docs / "other.md", collection, pydoc_pipeline, at_64)  # mixed settings
    target = docs / ("guide2.md" if moved == "renamed" else "sub/guide.md")
    target.parent.mkdir(exist_ok=True)
    (docs / "guide.md").rename(target)
    synced = ingest_documents(
        docs, collection, pydoc_pipeline, sync=True, stream_bytes=stream_bytes
    )
    new_id = target.relative_to(docs).as_posix()
    assert (synced.added, synced.removed, synced.unchanged) == (1, 1, 2)
    texts = list(chunks_of(collection, new_id).values())  # ids aside: its own, not the name
    assert texts == list(cut_alone(tmp_path, target, AT_128, pydoc_pipeline).values())
    assert chunks_of(collection, "other.md") == cut_alone(
        tmp_path, docs / "other.md", at_64, pydoc_pipeline
    )


def test_a_new_file_takes_the_settings_most_of_its_folder_has_else_the_defaults(
    tmp_path, pydoc_pipeline
):
    """The cron case: a file added to a folder cut at 128 is cut at 128 by a run given no
    settings (it was cut at 256); where one page was re-cut at 64, still at the 128 most
    are at (it fell back to the defaults without a word); with no settings held by more than
    half, at the defaults."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, AT_128)
    (docs / "added.md").write_text(long_section("Added by a colleague."))
    added = ingest_documents(docs, collection, pydoc_pipeline, sync=True)
    assert (added.added, added.unchanged) == (1, 2)
    at_128 = cut_alone(tmp_path, docs / "added.md", AT_128, pydoc_pipeline)
    assert at_128 != cut_alone(tmp_path, docs / "added.md", ChunkSettings(), pydoc_pipeline)
    assert chunks_of(collection, "added.md") == at_128
    at_64 = ChunkSettings.sized(64)
    ingest_documents(docs / "added.md", collection, pydoc_pipeline, at_64)  # 128, 128, 64
    (docs / "mixed.md").write_text(long_section("Added to a folder of mixed sizes."))
    mixed = ingest_documents(docs, collection, pydoc_pipeline, sync=True)
    assert (mixed.added, mixed.unchanged) == (1, 3)
    assert chunks_of(collection, "mixed.md") == cut_alone(
        tmp_path, docs / "mixed.md", AT_128, pydoc_pipeline
    )
    ingest_documents(docs / "mixed.md", collection, pydoc_pipeline, at_64)  # two and two
    (docs / "tied.md").write_text(long_section("Added where no size has a majority."))
    tied = ingest_documents(docs, collection, pydoc_pipeline, sync=True)
    assert (tied.added, tied.unchanged) == (1, 4)
    assert chunks_of(collection, "tied.md") == cut_alone(
        tmp_path, docs / "tied.md", ChunkSettings(), pydoc_pipeline
    )


def cuts_of(collection) -> dict[str, ChunkSettings | None]:
    """The settings each stored document's chunk 0 records it was cut at."""
    return {doc: cut_at(stored) for doc, stored in collection.document_index().items()}


def test_a_size_or_an_overlap_given_alone_keeps_each_documents_other(tmp_path, pydoc_pipeline):
    """`--overlap 8` alone re-cut a folder kept at 128:16 at 256:8, `--chunk-tokens 64` alone
    at 64:31: the value not given came from the defaults. It comes from each document (a
    new one's as one given none gets it), the overlap lowered under half a smaller size."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, ChunkSettings(128, 16))
    (docs / "other.md").write_text(long_section("Kept at 128 with a wide overlap."))
    ingest_documents(docs / "other.md", collection, pydoc_pipeline, ChunkSettings(128, 40))
    overlap = ingest_documents(docs, collection, pydoc_pipeline, GivenChunking(overlap_tokens=8))
    assert (overlap.updated, overlap.rechunked) == (3, 3)
    assert set(cuts_of(collection).values()) == {ChunkSettings(128, 8)}
    assert chunks_of(collection, "guide.md") == cut_alone(
        tmp_path, docs / "guide.md", ChunkSettings(128, 8), pydoc_pipeline
    )
    ingest_documents(docs / "other.md", collection, pydoc_pipeline, ChunkSettings(128, 40))
    (docs / "new.md").write_text(long_section("A new page."))
    size = ingest_documents(docs, collection, pydoc_pipeline, GivenChunking(max_tokens=64))
    assert (size.added, size.updated) == (1, 3)
    assert cuts_of(collection) == {
        "guide.md": ChunkSettings(64, 8),
        "notes.txt": ChunkSettings(64, 8),
        "other.md": ChunkSettings(64, 31),  # its 40, under half of 64
        "new.md": ChunkSettings(64, 8),  # the overlap of 128:8, which two of three have
    }


def test_an_overlap_given_alone_that_a_documents_size_refuses_names_it(tmp_path, pydoc_pipeline):
    """An overlap alone fits one document's size and not another's: that one is a bad
    document, named with its size, and nothing is written (on_error stop)."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, ChunkSettings(512, 16))
    ingest_documents(docs / "notes.txt", collection, pydoc_pipeline, ChunkSettings(64, 16))
    version = collection.version
    with pytest.raises(
        IngestError, match=r"'notes.txt': the overlap of 100 .* 64-token"
    ) as refused:
        ingest_documents(docs, collection, pydoc_pipeline, GivenChunking(overlap_tokens=100))
    assert "guide.md" not in str(refused.value) and collection.version == version
    skipped = ingest_documents(
        docs, collection, pydoc_pipeline, GivenChunking(overlap_tokens=100), on_error="skip"
    )
    assert (skipped.updated, len(skipped.problems)) == (1, 1)
    assert cuts_of(collection) == {
        "guide.md": ChunkSettings(512, 100),
        "notes.txt": ChunkSettings(64, 16),
    }


def test_an_overlap_alone_is_checked_against_the_size_as_the_pipeline_caps_it():
    """An overlap alone was checked against a document's uncapped size: 40 on one kept at
    512, under a pipeline limit of 64, was cut at 64:31, not refused as 64 cannot take 40."""
    at_512 = ChunkSettings(512, 16)
    with pytest.raises(ValueError, match="overlap_tokens must be in"):
        cutting(GivenChunking(overlap_tokens=40), at_512, 64)
    assert cutting(GivenChunking(overlap_tokens=24), at_512, 64) == ChunkSettings(64, 24)
    assert cutting(GivenChunking(max_tokens=512), at_512, 64) == ChunkSettings(64, 16)
    assert cutting(None, at_512, 64) == ChunkSettings(64, 16)


def test_an_overlap_alone_no_document_can_take_is_refused_before_reading(tmp_path, pydoc_pipeline):
    """An overlap alone over half the default size and every stored one was one problem per
    document (10,000 files, 10,000 lines), where it had been refused once, naming it. One a
    stored size takes stays per document, and a new document's keeps no chunks."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, ChunkSettings(64, 16))
    version = collection.version
    with pytest.raises(StoreError, match=r"overlap_tokens must be .* got 200: given alone"):
        ingest_documents(docs, collection, pydoc_pipeline, GivenChunking(overlap_tokens=200))
    assert collection.version == version
    ingest_documents(docs / "guide.md", collection, pydoc_pipeline, ChunkSettings(512, 16))
    (docs / "new.txt").write_text("A new page about beans.")
    with pytest.raises(IngestError) as refused:  # guide.md's 512 takes it: each one's own
        ingest_documents(docs, collection, pydoc_pipeline, GivenChunking(overlap_tokens=200))
    said = str(refused.value)
    assert (
        "'new.txt': the overlap of 200 tokens given alone is not under half the 256-token "
        "default size"
        in said
        and "'notes.txt'" in said
        and "'guide.md'" not in said
    )
    assert "256-token chunks it keeps" not in said


def test_settings_given_re_chunk_the_documents_cut_otherwise_and_say_how_many(
    tmp_path, pydoc_pipeline
):
    """A run given other settings re-chunks as before, and its report counts the documents
    re-chunked for the settings alone (a changed one is not among them)."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, AT_128)
    (docs / "notes.txt").write_text("Plain notes about gardening, tomatoes and beans.")
    other = ingest_documents(docs, collection, pydoc_pipeline, ChunkSettings())
    assert (other.updated, other.unchanged, other.rechunked) == (2, 0, 1)
    assert "updated 2 (1 re-chunked for the chunk settings alone), removed 0" in other.summary()
    assert other.to_json()["rechunked"] == 1
    assert chunks_of(collection, "guide.md") == cut_alone(
        tmp_path, docs / "guide.md", ChunkSettings(), pydoc_pipeline
    )
    same = ingest_documents(docs, collection, pydoc_pipeline, ChunkSettings())
    assert (same.unchanged, same.chunks_written, same.rechunked) == (2, 0, 0)
    assert "re-chunked" not in same.summary()


@pytest.mark.parametrize("streamed", [False, True])
def test_an_undone_re_chunk_gives_the_documents_their_old_settings_back(
    tmp_path, pydoc_pipeline, streamed
):
    """The settings are in the rows: an undo of a run that re-chunked at 256 puts back the
    128 the documents were cut at, and the next run given none leaves them there (kept per
    collection, an undo left the undone run's settings)."""
    stream_bytes = 64 if streamed else STREAM_DEFAULT
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, AT_128, stream_bytes=stream_bytes)
    before = chunks_of(collection, "guide.md")
    bigger = ingest_documents(docs, collection, pydoc_pipeline, stream_bytes=stream_bytes,
                              chunking=ChunkSettings())  # fmt: skip
    assert bigger.rechunked == 2 and chunks_of(collection, "guide.md") != before
    collection.undo()
    assert chunks_of(collection, "guide.md") == before
    again = ingest_documents(docs, collection, pydoc_pipeline, stream_bytes=stream_bytes)
    assert (again.unchanged, again.chunks_written) == (2, 0)
    (docs / "guide.md").write_text(long_section("Reset the gizmo twice."))
    changed = ingest_documents(docs, collection, pydoc_pipeline, stream_bytes=stream_bytes)
    assert changed.updated == 1
    assert chunks_of(collection, "guide.md") == cut_alone(
        tmp_path, docs / "guide.md", AT_128, pydoc_pipeline
    )


@pytest.mark.parametrize("streamed", [False, True])
def test_documents_chunked_before_settings_were_recorded_are_cut_as_before(
    tmp_path, pydoc_pipeline, streamed
):
    """A chunk 0 an earlier release wrote (`DIGEST+N`) records no settings: the settings it
    was cut at leave it alone, and a run given none cuts it at the defaults (docs/upgrading.md),
    counted as no re-chunk for settings, which it cannot tell, but as cut at the defaults for
    recording none (`unrecorded`; read whole or streamed alike)."""
    stream_bytes = 64 if streamed else STREAM_DEFAULT
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, AT_128, stream_bytes=stream_bytes)
    as_an_earlier_release_wrote(tmp_path / "db", "docs")
    same = ingest_documents(docs, collection, pydoc_pipeline, AT_128, stream_bytes=stream_bytes)
    assert (same.unchanged, same.unrecorded) == (2, 0)
    default = ingest_documents(docs, collection, pydoc_pipeline, stream_bytes=stream_bytes)
    assert (default.updated, default.rechunked, default.unrecorded) == (2, 0, 2)
    assert default.unrecorded_at == {ChunkSettings()}
    assert chunks_of(collection, "guide.md") == cut_alone(
        tmp_path, docs / "guide.md", ChunkSettings(), pydoc_pipeline
    )


def test_the_first_run_after_an_upgrade_says_which_documents_it_cut_at_the_defaults(
    tmp_path, pydoc_pipeline_dir
):
    """The first sync after an upgrade re-cut the documents an earlier release chunked at 128
    (recording no settings) at the default 256 and said only "updated 2": the summary and
    `--json` count them apart, with the settings and the options that keep theirs. A run
    given both settings cuts nothing at the defaults; one given a size alone takes the
    default overlap."""
    docs = kept_docs(tmp_path)
    db = ["--db", str(tmp_path / "db"), "-c", "kb"]
    command = ["ingest", str(docs), "--chunk", "--sync", *db]
    runner = CliRunner()
    made = runner.invoke(app, [*command, "--chunk-tokens", "128", "--overlap", "8",
                               "--pipeline", str(pydoc_pipeline_dir)])  # fmt: skip
    assert made.exit_code == 0, made.output
    as_an_earlier_release_wrote(tmp_path / "db", "kb")
    (docs / "notes.txt").write_text("Plain notes about gardening, tomatoes and beans.")
    synced = runner.invoke(app, command)
    assert synced.exit_code == 0, synced.output
    line = " ".join(synced.output.split())
    assert (
        "updated 2 (2 recording no chunk settings re-cut by default at 256/32; "
        "--chunk-tokens/--overlap keep theirs), removed 0" in line
    )
    kept = runner.invoke(app, [*command, "--json"])  # recorded now: each keeps its 256
    assert kept.exit_code == 0 and json.loads(kept.stdout.splitlines()[-1])["unrecorded"] == 0
    as_an_earlier_release_wrote(tmp_path / "db", "kb")
    size = runner.invoke(app, [*command, "--chunk-tokens", "64", "--json"])
    answer = json.loads(size.stdout.splitlines()[-1])
    assert (answer["updated"], answer["rechunked"], answer["unrecorded"]) == (2, 0, 2)
    as_an_earlier_release_wrote(tmp_path / "db", "kb")
    both = runner.invoke(app, [*command, "--chunk-tokens", "128", "--overlap", "8", "--json"])
    answer = json.loads(both.stdout.splitlines()[-1])
    assert (answer["updated"], answer["unrecorded"]) == (2, 0)
    assert "recording no chunk settings" not in both.stderr


def test_a_copy_is_named_a_repeat_whatever_settings_each_was_cut_at(tmp_path, pydoc_pipeline):
    """The settings are in every doc_hash: a new copy cut at the default 256 (under a prefix
    of no stored document) of a document kept at 128 has another, and repeats compare the
    content, in the run and stored."""
    docs = kept_docs(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, AT_128)
    shutil.copy(docs / "notes.txt", docs / "copy.txt")
    beside = ingest_documents(docs, collection, pydoc_pipeline)
    assert (beside.added, beside.unchanged) == (1, 2)
    assert (beside.repeats.count, beside.repeats.example) == (2, ("notes.txt", "copy.txt"))
    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(docs / "notes.txt", more / "again.txt")
    stored = ingest_documents(more, collection, pydoc_pipeline, prefix="more/")
    assert stored.repeats.count == 3 and stored.repeats.example is not None
    assert stored.repeats.example == ("more/again.txt", "notes.txt")


def test_the_cli_keeps_each_documents_settings_and_counts_a_re_chunk(tmp_path, pydoc_pipeline_dir):
    """`ingest --chunk` without --chunk-tokens leaves a folder cut at 128 as it is; with
    other settings it says, on its line and in --json, how many it re-chunked for them."""
    docs = kept_docs(tmp_path)
    db = str(tmp_path / "db")
    command = ["ingest", str(docs), "--chunk", "--sync", "--db", db, "-c", "kb"]
    runner = CliRunner()
    pipeline = ["--pipeline", str(pydoc_pipeline_dir)]
    made = runner.invoke(app, [*command, "--chunk-tokens", "128", *pipeline])
    assert made.exit_code == 0, made.output
    again = runner.invoke(app, [*command, "--json"])
    assert again.exit_code == 0, again.output
    answer = json.loads(again.stdout.splitlines()[-1])
    assert (answer["unchanged"], answer["chunks_written"], answer["removed"]) == (2, 0, 0)
    assert (answer["chunks_removed"], answer["rechunked"]) == (0, 0)
    assert answer["chunked_at"] == {"max_tokens": 128, "overlap_tokens": 32}  # what they keep
    said = runner.invoke(app, [*command, "--chunk-tokens", "64"])
    assert said.exit_code == 0, said.output
    line = " ".join(said.output.split())
    assert "updated 2 (2 re-chunked for the chunk settings alone), removed 0" in line
    assert "cut at 64/31 (tokens/overlap)" in line
    one = [str(docs / "guide.md"), "--chunk", "--chunk-tokens", "128", "--db", db, "-c", "kb"]
    assert runner.invoke(app, ["ingest", *one]).exit_code == 0  # one page re-cut: mixed
    mixed = runner.invoke(app, command)  # the folder, none given: each keeps its own
    assert "cut at 2 settings: 64/31, 128/31 (tokens/overlap)" in " ".join(mixed.output.split())
    mixed = runner.invoke(app, [*command, "--json"])
    assert json.loads(mixed.stdout.splitlines()[-1])["chunked_at"] is None
    overlap = runner.invoke(app, [*command, "--chunk-tokens", "64", "--overlap", "8", "--json"])
    assert json.loads(overlap.stdout.splitlines()[-1])["rechunked"] == 2


def test_the_collections_listing_says_what_the_documents_are_cut_at(tmp_path, pydoc_pipeline_dir):
    """`probembed collections` showed no chunk settings: a user could not find out what a
    chunked collection's documents are cut at, short of an ingest run, nor that an earlier
    release chunked some (which a run given none re-cuts at the defaults). The table says it
    as the ingest summary does, `--json` per setting; an unchunked collection says nothing."""
    docs = kept_docs(tmp_path)
    db = ["--db", str(tmp_path / "db")]
    runner = CliRunner()
    pipeline = ["--pipeline", str(pydoc_pipeline_dir)]
    command = ["ingest", str(docs), "--chunk", "--chunk-tokens", "128", *db, "-c", "kb"]
    assert runner.invoke(app, [*command, *pipeline]).exit_code == 0
    plain = ["ingest", str(docs / "notes.txt"), *db, "-c", "plain"]
    assert runner.invoke(app, [*plain, *pipeline]).exit_code == 0

    def listed():
        table = runner.invoke(app, ["collections", *db], env={"COLUMNS": "400"})
        answer = runner.invoke(app, ["collections", *db, "--json"])
        assert table.exit_code == 0 and answer.exit_code == 0, table.output + answer.output
        rows = {line.split()[1]: line for line in table.stdout.splitlines() if "│ " in line}
        chunking = {c["name"]: c["chunking"] for c in json.loads(answer.stdout)}
        return rows, chunking

    rows, chunking = listed()
    assert "│ 128/32 (tokens/overlap) │" in rows["kb"] and "tokens/overlap" not in rows["plain"]
    at_128 = {"max_tokens": 128, "overlap_tokens": 32}
    assert chunking == {
        "kb": {"cut_at": [at_128 | {"documents": 2}], "unrecorded": 0},
        "plain": None,
    }
    one = ["ingest", str(docs / "guide.md"), "--chunk", "--chunk-tokens", "64", *db, "-c", "kb"]
    assert runner.invoke(app, one).exit_code == 0
    rows, chunking = listed()
    assert "│ 2 settings: 64/31, 128/32 (tokens/overlap) │" in rows["kb"]
    at_64 = {"max_tokens": 64, "overlap_tokens": 31, "documents": 1}
    assert chunking["kb"] == {"cut_at": [at_64, at_128 | {"documents": 1}], "unrecorded": 0}
    as_an_earlier_release_wrote(tmp_path / "db", "kb", "doc_id = 'notes.txt' AND chunk = 0")
    rows, chunking = listed()
    said = "│ 64/31 (tokens/overlap); 1 document(s) record none (chunked by an earlier release) │"
    assert said in rows["kb"]
    assert chunking["kb"] == {"cut_at": [at_64], "unrecorded": 1}


def test_the_cli_fills_an_option_not_given_from_each_document(tmp_path, pydoc_pipeline_dir):
    """`ingest --chunk --overlap 8` re-cut a folder kept at 128:16 at 256:8; `embed`, which
    writes files of no stored document, fills it from the defaults still."""
    docs = kept_docs(tmp_path)
    db = str(tmp_path / "db")
    command = ["ingest", str(docs), "--chunk", "--db", db, "-c", "kb"]
    command += ["--pipeline", str(pydoc_pipeline_dir)]
    runner = CliRunner()
    made = runner.invoke(app, [*command, "--chunk-tokens", "128", "--overlap", "16"])
    assert made.exit_code == 0, made.output
    again = runner.invoke(app, [*command, "--overlap", "8", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout.splitlines()[-1])["rechunked"] == 2
    collection = Database(tmp_path / "db").collection("kb")
    assert set(cuts_of(collection).values()) == {ChunkSettings(128, 8)}
    out = ["embed", str(docs), "--chunk", "--out", str(tmp_path / "out"), "--overlap", "200"]
    refused = runner.invoke(app, out)
    assert refused.exit_code != 0 and "--overlap" in refused.output, refused.output


def test_one_bar_counts_every_chunk_and_a_replaced_row_counts_as_written(
    tmp_path, folder, pydoc_pipeline, capsys
):
    """The chunks and then the chunks 0 were two bars (46 of 46, then 3 of 3); and a commit
    that replaced rows told `on_commit` nothing, so a bar over an update stood still."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL, progress=True)
    n = collection.count()
    err = capsys.readouterr().err
    assert err.count("ingest docs") == 1 and f"{n}/{n}" in err
    records = [Record(f"r{i}", f"Text {i}.", {}) for i in range(5)]
    commits: list[int] = []
    plain = Database(tmp_path / "db").collection("plain")  # whole records: not beside chunks
    ingest(records, plain, pydoc_pipeline, batch_size=2)
    replaced = [Record(r.id, r.text + " Changed.", {}) for r in records]
    ingest(replaced, plain, pydoc_pipeline, batch_size=2, upsert=True, on_commit=commits.append)
    assert commits == [2, 4, 5]


def test_the_one_bar_moves_while_a_batch_of_chunks_is_encoded(
    tmp_path, folder, pydoc_pipeline, capsys, monkeypatch
):
    """`probembed ingest md --chunk` moved its bar per commit: 332 of 336 chunks at its first
    line, 104 s in. It now moves as the members encode pieces of each batch."""
    from probembed import pipeline as pipeline_module
    from probembed import progress

    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)  # a line at every advance
    monkeypatch.setattr(pipeline_module, "_CHUNK", 4)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL, progress=True)
    n = collection.count()
    lines = capsys.readouterr().err.splitlines()
    counts = [int(line.split(": ")[1].split("/")[0].replace(",", "")) for line in lines]
    assert counts[-1] == n and counts == sorted(counts)
    assert len(counts) >= n // 4, counts  # a line per piece of 4 chunks, not per commit of 512


def test_a_document_missing_its_chunk_zero_is_written_again(tmp_path, folder, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    calls: list[list[str]] = []

    def recording(records, *args, **kwargs):
        calls.append([r.id for r in records])
        return ingest(records, *args, **kwargs)

    ingest_documents(folder, collection, pydoc_pipeline, SMALL, ingest_with=recording)
    zeros = {i for ids in calls for i in ids if i.endswith("#0")}
    assert len(calls) == 2 and set(calls[1]) == zeros and len(zeros) == 4  # chunk 0s last

    def index():
        return {
            doc: (stored.hashes, sorted(stored.ids))
            for doc, stored in collection.document_index().items()
        }

    whole = index()
    collection.delete(["guide.md#0"])  # as a run stopped before its last write leaves it
    again = ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    # never stored whole, so finishing it adds it (a reviewer's re-run after Ctrl-C said
    # "added 0, updated 40" of documents the stopped run had not finished)
    assert (again.unchanged, again.updated, again.added) == (3, 0, 1)
    assert index() == whole


@pytest.mark.parametrize(
    ("html", "text"),
    [
        (  # text straight in divs and in the body is content like any paragraph
            "<html><body><div>The pump overheats.</div><div>Clean the <b>filter</b>.</div>"
            "<h1>Pump</h1>Unplug it first.<p>Monthly.</p></body></html>",
            "The pump overheats.\n\nClean the filter.\n\n# Pump\n\nUnplug it first.\n\nMonthly.",
        ),
        ("A fragment with <b>bold</b> text.", "A fragment with bold text."),
        (  # the page's tags structure it: its text is never re-read as Markdown syntax
            "<h1>Notes</h1><p># 1 priority is speed.</p><pre>```python</pre><h2>Fixes</h2>",
            "# Notes\n\n\\# 1 priority is speed.\n\n````\n```python\n````\n\n## Fixes",
        ),
        (  # preformatted text keeps its lines, fenced: its `# ` line is code, not a heading
            "<p>Run:</p><pre>\n# set up\nmake install  \n\n  make run\n</pre><p>Done.</p>",
            "Run:\n\n```\n# set up\nmake install\n\n  make run\n```\n\nDone.",
        ),
        (  # an article's own header holds its headline and byline; the page's header is a menu
            "<header>Site menu</header><article><header><h1>Jaguars hunt</h1><p>By Ann</p>"
            "</header><p>Body.</p><footer>Tags: cats</footer></article><footer>(c)</footer>",
            "# Jaguars hunt\n\nBy Ann\n\nBody.\n\nTags: cats",
        ),
        ("<title>T</title><p>x</p>", "x"),  # a fragment's title is its title, not its text
        (  # a page wrapped in one <form> (ASP.NET WebForms): its controls go, not its text
            '<form id="f"><input type="hidden" value="STATE"><h1>Pump</h1><p>Unplug it.</p>'
            "<select><option>English</option></select><button>Send</button></form>",
            "# Pump\n\nUnplug it.",
        ),
        (  # an icon's <title> is neither text nor the page's title
            "<p>Close <svg><title>icon-close</title><path d='M0'/></svg>the lid.</p>",
            "Close the lid.",
        ),
        ("<pre>line one<br>line two</pre>", "```\nline one\nline two\n```"),
        (  # an article's header, asides and footer are blocks: their words were glued on
            "<article><h1>Post</h1><header>By Ann</header>Intro.<aside>Tip: unplug.</aside>"
            "<aside>Hot.</aside><footer>Tags: pumps</footer></article>",
            "# Post\n\nBy Ann\n\nIntro.\n\nTip: unplug.\n\nHot.\n\nTags: pumps",
        ),
        (  # a table row is one paragraph, its cells side by side (a cell each split a key
            # from its value at a chunk cut); an empty cell keeps its place
            "<table><caption>Specs</caption><tr><th>Key</th><th>Value</th></tr>"
            "<tr><td>Weight</td><td>5 <b>kg</b></td></tr><tr><td># Ports</td><td></td></tr>"
            "</table>",
            "Specs\n\nKey | Value\n\nWeight | 5 kg\n\n\\# Ports |",
        ),
    ],
)
def test_html_keeps_all_visible_text_and_only_its_own_headings(tmp_path, html, text):
    path = tmp_path / "page.html"
    path.write_text(html, encoding="utf-8")
    document = read_file(path, "page.html")
    assert document.text == text
    assert document.title != "icon-close"
    headings = {section.headings[-1] for section in document.sections() if section.headings}
    assert headings <= {"Pump", "Notes", "Fixes", "Jaguars hunt", "Post"}


def bad_folder(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    (root / "good.md").write_text("# Fine\n\nA perfectly good file.")
    (root / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.txt").write_bytes("Un café très noir.".encode("latin-1"))
    (root / "empty.txt").write_text("")
    write_pdf(root / "whole.pdf", ["A page."])
    data = (root / "whole.pdf").read_bytes()
    (root / "truncated.pdf").write_bytes(data[: len(data) // 3])
    (root / "whole.pdf").unlink()
    locked = FPDF()
    locked.set_encryption(owner_password="owner", user_password="secret")
    locked.add_page()
    locked.set_font("helvetica", size=12)
    locked.cell(0, 10, "hidden")
    locked.output(str(root / "locked.pdf"))
    scanned = FPDF()
    scanned.add_page()  # a page with no text layer, as a scanner makes it
    scanned.output(str(root / "scanned.pdf"))
    return root


EXPECTED = {
    "binary.md": "binary file",
    "latin1.txt": "not UTF-8: byte 0xe9",
    "truncated.pdf": "PDF",
    "locked.pdf": "encrypted PDF",
    "scanned.pdf": "no text layer (a scanned PDF?): run OCR",
}


def test_any_error_inside_the_pdf_parser_is_that_files_problem(tmp_path, monkeypatch):
    """pypdf fails on some damaged files with errors of its own internals (an AttributeError
    on a null object): they stopped the whole run instead of naming the file."""
    import pypdf

    write_pdf(tmp_path / "odd.pdf", ["A page."])

    def broken(self, *args, **kwargs):  # what a damaged page tree makes pypdf raise
        raise AttributeError("'NullObject' object has no attribute 'get_object'")

    monkeypatch.setattr(pypdf.PageObject, "extract_text", broken)
    problem = read_file(tmp_path / "odd.pdf", "odd.pdf")
    assert str(problem) == (
        f"{tmp_path / 'odd.pdf'}: damaged or truncated PDF: AttributeError: 'NullObject' "
        "object has no attribute 'get_object'"
    )


def test_unreadable_files_are_each_reported_and_nothing_half_written(
    tmp_path, pydoc_pipeline, caplog
):
    root = bad_folder(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("bad")
    with caplog.at_level(logging.WARNING), pytest.raises(IngestError) as stopped:
        ingest_documents(root, collection, pydoc_pipeline, SMALL)
    # pypdf's own "EOF marker not found" stays out of the output: the problem says it all.
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]
    assert logging.getLogger("pypdf").level == logging.NOTSET  # and its level is restored
    assert not collection.exists  # on_error="stop": nothing at all was written
    said = {p.source.rsplit("/", 1)[-1]: p.message for p in stopped.value.problems}
    assert set(said) == set(EXPECTED)
    for name, words in EXPECTED.items():
        assert words in said[name], (name, said[name])
    report = ingest_documents(root, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert report.added == 1 and len(report.problems) == 5
    assert report.empty == ["empty.txt"]  # no text to index: no bad item
    assert collection.document_index().keys() == {"good.md"}


def test_sync_keeps_a_document_that_is_there_but_cannot_be_read(tmp_path, pydoc_pipeline):
    """A file that turned unreadable is skipped, not taken for deleted: its version stays."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nalpha beta gamma.\n")
    (docs / "b.md").write_text("# B\n\ndelta epsilon zeta.\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    before = collection.document_index()["b.md"]
    (docs / "b.md").write_bytes("# B\n\ndelta epsilon zeta caf\xe9.\n".encode("latin-1"))
    report = ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    assert (report.removed, report.unchanged, len(report.problems)) == (0, 1, 1)
    assert "not UTF-8" in report.problems[0].message
    assert collection.document_index()["b.md"] == before
    # the report said only "skipped" of it: it says its stored version stays
    assert report.problems[0].message.endswith("(kept the stored version)")
    (docs / "c.md").write_bytes(b"\xff")  # not stored: skipped, nothing kept
    report = ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    said = {p.doc_id: p.message.endswith("(kept the stored version)") for p in report.problems}
    assert said == {"b.md": True, "c.md": False}


def test_an_emptied_file_is_no_bad_input_and_a_sync_removes_its_document(tmp_path, pydoc_pipeline):
    """An emptied placeholder was a bad item: it stopped a sync under on_error="stop", and
    under "skip" its old chunks stayed searchable, their file_path a 0-byte file."""
    docs = tmp_path / "docs"
    (docs / "x").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nalpha beta gamma.\n")
    (docs / "x" / "heapq.md").write_text("# heapq\n\nHeap queue algorithm, a priority queue.\n")
    (docs / "x" / "markup.html").write_text("<p>Tables of widgets and gadgets.</p>")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    (docs / "x" / "heapq.md").write_text("")
    (docs / "x" / "markup.html").write_text("<html><script>var x = 1;</script></html>")
    (docs / "new.txt").write_text(" \n")  # empty and never stored
    plain = ingest_documents(docs, collection, pydoc_pipeline, SMALL)  # on_error="stop"
    assert (plain.problems, plain.emptied, plain.empty_kept) == ([], 0, 2)
    assert sorted(plain.empty) == ["new.txt", "x/heapq.md", "x/markup.html"]
    assert "2 of them stored before: that version kept (--sync removes it)" in plain.summary()
    assert collection.document_index().keys() == {"a.md", "x/heapq.md", "x/markup.html"}
    synced = ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    assert (synced.problems, synced.emptied, synced.removed, synced.unchanged) == ([], 2, 0, 1)
    assert ", emptied 2, unchanged 1;" in synced.summary()
    assert collection.document_index().keys() == {"a.md"}
    hits = collection.search("heap queue priority", k=50, exact=True)["hits"]
    assert {h["id"] for h in hits} == {"a.md#0"}
    # a file that cannot be read keeps its stored version, as before
    (docs / "a.md").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(IngestError):
        ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    assert collection.document_index().keys() == {"a.md"}


def test_a_blank_duplicate_is_refused_as_any_duplicate_and_removes_nothing(
    tmp_path, pydoc_pipeline
):
    """A blank copy of a document id read before in the same write (a service body) was
    taken as an emptied document: the sync removed the chunks just written for the id, and
    the duplicate check, which a copy with text meets, was skipped (a review's reproduction)."""
    from probembed.store.chunked import record_document

    collection = Database(tmp_path / "db", create=True).collection("docs")

    def write(*records: Record, **options):
        documents = [record_document(r, False) for r in records]
        return ingest_parsed(documents, collection, pydoc_pipeline, SMALL, sync=True, **options)

    write(Record("x", "the first text of x"), Record("z", "zeta"))
    with pytest.raises(IngestError, match="duplicate document id 'x'"):
        write(Record("x", "changed text"), Record("x", " "), Record("z", "zeta"))
    report = write(
        Record("x", "changed text"), Record("x", " "), Record("z", "zeta"), on_error="skip"
    )
    assert (report.updated, report.emptied, len(report.problems)) == (1, 0, 1)
    assert collection.document_index().keys() == {"x", "z"}


def test_a_sync_that_would_empty_every_stored_document_is_refused(tmp_path, pydoc_pipeline):
    """Every file truncated (a cloud drive's placeholders): the sync removed them all, where
    the same sync with the files gone is refused."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.md", "b.md"):
        (docs / name).write_text(f"# {name}\n\nsome text of {name}.\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    for name in ("a.md", "b.md"):
        (docs / name).write_text("")
    with pytest.raises(StoreError, match=r"would remove all 2 .*2 of them are files with no text"):
        ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    assert collection.document_index().keys() == {"a.md", "b.md"}
    (docs / "a.md").write_text("# a\n\nback again.\n")  # one left: the other may go
    report = ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    assert (report.emptied, report.updated) == (1, 1)


def test_the_cli_syncs_an_emptied_file_without_on_error_skip(tmp_path, pydoc_pipeline_dir):
    """The walkthrough's cron sync: one emptied file stopped it with exit 2."""
    docs = tmp_path / "kb"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nalpha beta gamma.\n")
    (docs / "heapq.md").write_text("# heapq\n\nHeap queue algorithm.\n")
    db = str(tmp_path / "db")
    command = ["ingest", str(docs), "--chunk", "--sync", "--db", db, "-c", "kb"]
    first = CliRunner().invoke(app, [*command, "--pipeline", str(pydoc_pipeline_dir)])
    assert first.exit_code == 0, first.output
    (docs / "heapq.md").write_text("")
    result = CliRunner().invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout.splitlines()[-1])
    assert (answer["empty"], answer["emptied"], answer["skipped"]) == (1, 1, [])
    assert answer["count"] == Database(db).collection("kb").count()
    assert Database(db).collection("kb").document_index().keys() == {"a.md"}


def excluded_folder(tmp_path):
    """A knowledge base with build output, a dependency folder, a temporary page, a hidden
    file and a .gitignore naming a page that is not to be left out by it."""
    root = tmp_path / "kb"
    for name, text in {
        "keep.md": "# Keep\n\nKept notes about tomato plants.\n",
        "notes.md": "# Notes\n\nListed in .gitignore, read all the same.\n",
        "build/out.md": "# Built\n\nGenerated output.\n",
        "docs/node_modules/pkg/README.md": "# Pkg\n\nA dependency's readme.\n",
        "draft.tmp.md": "# Draft\n\nA temporary page.\n",
        ".hidden.md": "# Hidden\n\nAn editor's file.\n",
        ".gitignore": "notes.md\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


EXCLUDE = ["build/", "node_modules/", "*.tmp.md"]


def test_exclude_leaves_files_out_counts_them_and_a_sync_removes_them(tmp_path, pydoc_pipeline):
    """`.gitignore`'d build/, node_modules/ and *.tmp.md were ingested, and hidden files were
    left out without a word."""
    root = excluded_folder(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("kb")
    everything = ingest_documents(root, collection, pydoc_pipeline, SMALL, sync=True)
    assert everything.added == 5 and everything.unread.hidden == 2  # .hidden.md, .gitignore
    assert "left out: 2 hidden file(s) or folder(s)" in everything.summary()
    synced = ingest_documents(root, collection, pydoc_pipeline, SMALL, sync=True, exclude=EXCLUDE)
    assert sorted(synced.gone) == [
        "build/out.md",
        "docs/node_modules/pkg/README.md",
        "draft.tmp.md",
    ]
    assert (synced.removed, synced.unchanged) == (3, 2)
    assert (synced.unread.hidden, synced.unread.excluded) == (2, 3)
    assert "left out: 2 hidden, 3 excluded (--exclude) file(s) or folder(s)" in synced.summary()
    # a .gitignore is not read: notes.md, which it lists, stays
    assert collection.document_index().keys() == {"keep.md", "notes.md"}
    # excluding every stored document is refused as any sync that would keep none is
    (root / "new.txt").write_text("A new page of plain text.")
    with pytest.raises(StoreError, match="would remove all 2"):
        ingest_documents(root, collection, pydoc_pipeline, SMALL, sync=True, exclude=["*.md"])
    assert collection.document_index().keys() == {"keep.md", "notes.md"}
    with pytest.raises(TypeError, match="list of patterns"):
        ingest_documents(root, collection, pydoc_pipeline, SMALL, exclude="build/")


def test_exclude_warns_of_a_pattern_that_matched_nothing_and_refuses_a_source_it_cannot_apply_to(
    tmp_path, pydoc_pipeline
):
    """A pattern written from the wrong folder (`kb/build/` ingesting `kb`) left nothing out
    without a word, and patterns given with a single file or a JSONL file were ignored."""
    root = excluded_folder(tmp_path)
    collection = Database(tmp_path / "db", create=True).collection("kb")
    with pytest.warns(UserWarning, match=r"pattern\(s\) 'kb/build/' matched no file or folder"):
        report = ingest_documents(
            root, collection, pydoc_pipeline, SMALL, exclude=["kb/build/", "*.tmp.md"]
        )
    assert report.unread.excluded == 1  # *.tmp.md matched, and is not named
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"id": "a", "text": "alpha"}\n')
    for source in (jsonl, root / "keep.md"):
        with pytest.raises(ValueError, match="exclude leaves out files of a folder"):
            ingest_documents(source, collection, pydoc_pipeline, SMALL, exclude=["*.md"])


def test_the_cli_excludes_with_chunk_only(tmp_path, pydoc_pipeline_dir):
    root = excluded_folder(tmp_path)
    db = str(tmp_path / "db")
    command = ["ingest", str(root), "--db", db, "-c", "kb", "--pipeline", str(pydoc_pipeline_dir)]
    patterns = [word for p in EXCLUDE for word in ("--exclude", p)]
    refused = CliRunner().invoke(app, [*command, *patterns])
    assert refused.exit_code == 2 and "--exclude needs --chunk" in refused.output
    done = CliRunner().invoke(app, [*command, "--chunk", *patterns])
    assert done.exit_code == 0, done.output
    assert "left out: 2 hidden, 3 excluded (--exclude)" in done.output
    assert Database(db).collection("kb").document_index().keys() == {"keep.md", "notes.md"}


def jsonl_lines(n: int) -> list[bytes]:
    """n one-line JSONL documents d1 ... dn."""
    return [
        json.dumps({"_id": f"d{i}", "text": f"Document {i}."}).encode() for i in range(1, n + 1)
    ]


def test_a_jsonl_line_that_is_not_utf8_is_its_own_problem_and_a_sync_keeps_its_document(
    tmp_path, pydoc_pipeline
):
    """A stream decoder met the bad byte of line 40 a buffer early: it named line 1, dropped
    the good lines before it, and a sync then removed all 79 documents."""
    source = tmp_path / "docs.jsonl"
    lines = jsonl_lines(79)
    source.write_bytes(b"\n".join(lines) + b"\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True)
    lines[39] = b'{"_id": "d40", "text": "Caf\xe9 menu."}'  # one Latin-1 byte
    source.write_bytes(b"\n".join(lines) + b"\n")
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    assert (report.removed, report.unchanged) == (0, 78)
    assert [str(p) for p in report.problems] == [
        f"{source}:40: document 'd40': not UTF-8: byte 0xe9 at offset 27 of the line "
        "(kept the stored version)"
    ]
    assert collection.count() == 79
    # on the first line, after a byte order mark: the same byte named, and its document kept
    lines[39], lines[0] = lines[0], b"\xef\xbb\xbf" + lines[39]
    source.write_bytes(b"\n".join(lines) + b"\n")
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    assert [str(p) for p in report.problems] == [
        f"{source}:1: document 'd40': not UTF-8: byte 0xe9 at offset 27 of the line "
        "(kept the stored version)"
    ]
    assert report.removed == 0 and collection.count() == 79


def test_reordered_keys_of_a_nested_object_leave_a_document_unchanged(tmp_path, pydoc_pipeline):
    """A JSON writer may write an object's keys in any order: the document is the same."""
    source = tmp_path / "docs.jsonl"
    meta = {"author": {"name": "Ann", "ids": [{"orcid": 1, "isni": 2}]}, "year": 2020}
    source.write_text(json.dumps({"_id": "d1", "text": "A note.", **meta}) + "\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(source, collection, pydoc_pipeline, SMALL)
    meta = {"year": 2020, "author": {"ids": [{"isni": 2, "orcid": 1}], "name": "Ann"}}
    source.write_text(json.dumps({"_id": "d1", "text": "A note.", **meta}) + "\n")
    again = ingest_documents(source, collection, pydoc_pipeline, SMALL)
    assert (again.unchanged, again.updated, again.chunks_written) == (1, 0, 0)
    meta["author"]["ids"].insert(0, {"isni": 3})  # a list's items and order are its value
    source.write_text(json.dumps({"_id": "d1", "text": "A note.", **meta}) + "\n")
    assert ingest_documents(source, collection, pydoc_pipeline, SMALL).updated == 1


def test_a_sync_that_would_keep_no_stored_document_is_refused(tmp_path, folder, pydoc_pipeline):
    """A sync of a subfolder (its ids relative to it), of an empty file or of the folder once a
    corpus.jsonl made it a BEIR folder named none of the stored documents, and removed them all."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.md").write_text("# Extra\n\nA page in a subfolder.")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    before = collection.document_index()
    with pytest.raises(StoreError, match=r"sync would remove all 4 document\(s\) of collection"):
        ingest_documents(folder / "sub", collection, pydoc_pipeline, SMALL, sync=True)
    with pytest.raises(ValueError, match=r"empty.jsonl holds no records: it is empty"):
        ingest_documents(empty, collection, pydoc_pipeline, SMALL, sync=True)  # refused alike
    assert collection.document_index() == before  # nothing written, nothing removed
    one = ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True)
    assert (one.added, one.removed, one.unchanged) == (1, 0, 4)  # a sync that keeps some runs


def test_a_sync_of_a_folder_whose_files_were_all_renamed_replaces_them(tmp_path, pydoc_pipeline):
    """Renaming a folder's only file and syncing was refused as "would remove all", and the
    advice (leave out sync) left the old document beside the new; with the stored files gone
    from disk, the sync goes ahead."""
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "a.md").write_text("# Only\n\nLlamas graze on the high plain.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    (folder / "a.md").rename(folder / "b.md")
    report = ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True)
    assert (report.added, report.removed) == (1, 1)
    assert set(collection.document_index()) == {"b.md"}
    # files gone from another place than the folder synced are no rename: still refused
    (folder / "sub").mkdir()
    (folder / "sub" / "c.md").write_text("# Sub\n\nAlpacas too.")
    moved = folder.rename(tmp_path / "moved")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(StoreError, match=r"sync would remove all 1 document\(s\)"):
        ingest_documents(moved / "sub", collection, pydoc_pipeline, SMALL, sync=True)
    with pytest.raises(ValueError, match=r"empty.jsonl holds no records"):
        ingest_documents(empty, collection, pydoc_pipeline, SMALL, sync=True)
    assert set(collection.document_index()) == {"b.md"}


def test_folders_under_their_own_prefixes_share_a_collection_and_sync_apart(
    tmp_path, pydoc_pipeline
):
    """Two folders' `README.md` were one document (ids are paths relative to the folder), and
    a sync of one folder removed the other's documents. Under a prefix each folder keeps its
    own documents, a sync removes only those under its prefix, a move is still found by path
    (not embedded again) and a file of the folder given alone updates its prefixed document."""
    sources = {}
    for name, extra in (("api", "endpoints.md"), ("guide", "install.md")):
        root = tmp_path / name
        root.mkdir()
        (root / "README.md").write_text(f"# {name}\n\nThe {name} pages, about llamas.")
        (root / extra).write_text(f"# {extra}\n\nHow {name} treats alpacas.")
        sources[name] = root
    collection = Database(tmp_path / "db", create=True).collection("docs")
    for name, root in sources.items():
        report = ingest_documents(root, collection, pydoc_pipeline, SMALL, prefix=f"{name}/")
        assert (report.added, report.problems) == (2, [])
    ids = {"api/README.md", "api/endpoints.md", "guide/README.md", "guide/install.md"}
    assert set(collection.document_index()) == ids
    (sources["guide"] / "install.md").unlink()
    synced = ingest_documents(
        sources["guide"], collection, pydoc_pipeline, SMALL, sync=True, prefix="guide/"
    )
    assert (synced.removed, synced.unchanged) == (1, 1)
    assert set(collection.document_index()) == ids - {"guide/install.md"}

    def no_encoding(texts):
        raise AssertionError(f"an unchanged document was embedded again: {texts[:1]}")

    moved = sources["api"].rename(tmp_path / "api-moved")
    again = ingest_documents(
        moved, collection, pydoc_pipeline, SMALL, encode=no_encoding, prefix="api/"
    )
    assert (again.unchanged, again.relocated) == (2, 2)
    assert file_paths(collection)["api/README.md"] == {str(moved / "README.md")}
    (moved / "README.md").write_text("# api\n\nThe api pages, now about vicunas.")
    alone = ingest_documents(moved / "README.md", collection, pydoc_pipeline, SMALL, prefix="api/")
    assert (alone.updated, alone.added, alone.problems) == (1, 0, [])
    other = tmp_path / "other.jsonl"  # names none of the prefix's stored documents
    other.write_text('{"id": "other.md", "text": "A page of another source."}\n')
    with pytest.raises(StoreError, match=r"remove all 2 document\(s\) under prefix 'api/'"):
        ingest_documents(other, collection, pydoc_pipeline, SMALL, sync=True, prefix="api/")
    assert set(collection.document_index()) == ids - {"guide/install.md"}


def test_plain_ingest_puts_every_id_under_its_prefix(tmp_path, pydoc_pipeline):
    """Whole documents of two folders under their prefixes: the second `README.md` was
    "already stored" and left out."""
    collection = Database(tmp_path / "db", create=True).collection("whole")
    for name in ("one", "two"):
        root = tmp_path / name
        root.mkdir()
        (root / "README.md").write_text(f"# {name}\n\nPages of folder {name}.")
        report = ingest(root, collection, pydoc_pipeline, prefix=f"{name}/")
        assert (report.added, report.already_stored) == (1, 0)
    hits = collection.search("pages of folder", k=5, exact=True)["hits"]
    assert sorted(h["id"] for h in hits) == ["one/README.md", "two/README.md"]


def test_a_sync_keeps_what_a_folder_it_cannot_list_or_a_broken_link_holds(
    tmp_path, folder, pydoc_pipeline, monkeypatch
):
    """Path.rglob passed over a folder it could not list and a link whose target was gone
    without a word, and a sync removed their documents; hidden files were ingested."""
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "sub" / "deeper" / "nested.md").write_text("# Nested\n\nSubmarines dive deep.")
    (folder / "target.txt").write_text("A linked note about bicycles.")
    (folder / "link.txt").symlink_to(folder / "target.txt")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "secret.md").write_text("# Secret\n\nAn editor's own notes.")
    (folder / ".dotfile.md").write_text("# Dot\n\nA tool's settings.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    first = ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True)
    stored = set(collection.document_index())
    assert first.added == 7 and "sub/deeper/nested.md" in stored and "link.txt" in stored
    assert not any(doc.startswith(".") for doc in stored)  # hidden files and folders aside
    (folder / "target.txt").rename(folder / "moved.txt")
    unlistable = str(folder / "sub" / "deeper")
    listing = os.scandir

    def scandir(path="."):
        if os.fspath(path) == unlistable:
            raise PermissionError(13, "Permission denied", unlistable)
        return listing(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    problems = {p.source: p.message for p in report.problems}
    assert problems[unlistable] == "cannot list this folder (Permission denied)"
    link = "a link whose target is missing (kept the stored version)"
    assert problems[str(folder / "link.txt")] == link
    # the unlisted folder names no document, so the sync removes nothing, not even target.txt
    assert (report.removed, report.sync_withheld, report.added) == (0, 1, 1)
    assert {"sub/deeper/nested.md", "link.txt", "target.txt"} <= set(collection.document_index())


def test_a_sync_removes_nothing_when_a_line_names_no_document(tmp_path, pydoc_pipeline):
    """A line that is not JSON may be any document: removing the ones not read would remove it."""
    source = tmp_path / "docs.jsonl"
    lines = jsonl_lines(3)
    source.write_bytes(b"\n".join(lines) + b"\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True)
    source.write_bytes(b"\n".join([lines[0], b'{"_id": "d2", "text": "trunc']) + b"\n")
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    assert report.removed == 0 and collection.count() == 3
    assert (len(report.problems), report.sync_withheld) == (1, 1)  # the line, counted once
    assert report.summary().endswith(
        "skipped 1 bad item(s); sync removed nothing: 1 bad item(s) name no document, "
        "which may be one still there"
    )
    source.write_bytes(lines[0] + b"\n")  # every line read: the others are gone
    assert ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True).removed == 2


def pretty(*objects: dict) -> str:
    """Objects pretty-printed one after another, as a `.json` export holds them."""
    return "".join(json.dumps(obj, indent=2) + "\n" for obj in objects)


def test_cli_a_pretty_printed_file_keeps_the_objects_around_a_bad_one(tmp_path, pydoc_pipeline_dir):
    """A truncated last object sent the whole file to the line reader: five problems, one per
    line (the valid p1's "line 1: Expecting property name" too), and `--on-error skip` stored
    nothing and exited 0; one quote inside a string gave a problem for every line."""
    source = tmp_path / "pretty_bad.json"
    source.write_text(pretty({"id": "p1", "text": "first"}) + '{ "id": "p2", "text":\n')
    db = str(tmp_path / "js.db")
    args = ["ingest", str(source), "--db", db, "--pipeline", str(pydoc_pipeline_dir)]
    skipped = CliRunner().invoke(app, [*args, "--on-error", "skip"])
    said = " ".join(skipped.output.split())
    assert skipped.exit_code == 0, skipped.output
    assert "added 1, already stored 0, skipped 1 bad item(s)" in said
    assert (
        f"skipped: {source}:5: malformed JSON (Expecting value at the end of the file); "
        "line 5 not read" in said
    )
    assert Database(db).open("default").ids() == {"p1"}
    stopped = CliRunner().invoke(app, [*args, "--collection", "other"])
    assert stopped.exit_code != 0 and "1 bad input item(s); nothing was written" in stopped.output
    # a quote inside a string: that object is one problem, from the line it starts on
    objects = [{"id": f"q{i}", "text": f"text {i}", "meta": {"tags": [1, 2]}} for i in range(4)]
    source.write_text(pretty(*objects).replace('"text 1"', '"text "1" quoted"'))
    quoted = CliRunner().invoke(app, [*args, "--on-error", "skip", "--collection", "quoted"])
    said = " ".join(quoted.output.split())
    assert "added 3, already stored 0, skipped 1 bad item(s)" in said, quoted.output
    assert (
        f"{source}:11: malformed JSON (Expecting ',' delimiter at line 13 column 18); "
        "lines 11-20 not read" in said
    )
    assert Database(db).open("quoted").ids() == {"q0", "q2", "q3"}


def test_a_bad_stretch_of_a_pretty_printed_file_makes_a_sync_remove_nothing(
    tmp_path, pydoc_pipeline
):
    """The objects of a stretch that does not parse name no document (any of them may be
    one the stretch holds): the sync keeps every stored document, and reads the rest."""
    source = tmp_path / "export.json"
    objects = [{"id": f"p{i}", "text": f"Passage {i} about rivers."} for i in range(1, 5)]
    source.write_text(pretty(*objects))
    collection = Database(tmp_path / "db", create=True).collection("docs")
    assert ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True).added == 4
    # p2 cut short, and p3 indented: it opens no line, so it is inside p2's stretch
    broken = pretty(objects[0]) + '{\n  "id": "p2",\n  "text": "cut\n'
    broken += "".join("  " + line + "\n" for line in json.dumps(objects[2], indent=2).splitlines())
    source.write_text(broken + pretty(objects[3]))
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    assert [p.source for p in report.problems] == [f"{source}:5"]
    assert "lines 5-11 not read" in report.problems[0].message
    assert (report.unchanged, report.removed, report.sync_withheld) == (2, 0, 1)
    assert set(collection.document_index()) == {"p1", "p2", "p3", "p4"}
    source.write_text(pretty(objects[0], objects[3]))  # read whole: the others are gone
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True)
    assert (report.removed, set(collection.document_index())) == (2, {"p1", "p4"})


def test_cli_delete_given_an_ingested_files_path_names_its_document(
    tmp_path, monkeypatch, pydoc_pipeline_dir
):
    """`delete --doc notes/cooking.md` after `ingest notes/ --chunk` said only "1 document(s)
    were not there": the stored id is relative to the folder ingested (`cooking.md`). The
    hint names it; nothing is deleted by path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "cooking.md").write_text("# Cooking\n\nBoil the water first.\n")
    runner, db = CliRunner(), str(tmp_path / "db")
    pipeline = ["--pipeline", str(pydoc_pipeline_dir)]
    made = runner.invoke(app, ["ingest", "notes/", "--chunk", "--db", db, *pipeline])
    assert made.exit_code == 0, made.output
    given = ["notes/cooking.md", str(tmp_path / "notes" / "cooking.md")]
    for path in given:
        by_doc = runner.invoke(app, ["delete", "--doc", path, "--db", db])
        said = " ".join(by_doc.output.split())
        assert by_doc.exit_code == 1, by_doc.output
        assert (
            f"1 document(s) were not there: {path!r} (1 of them are paths of files stored as "
            f"documents, e.g. {path!r} is document 'cooking.md': --doc takes the stored id, "
            "not the path)" in said
        )
    plain = runner.invoke(app, ["delete", given[0], "nothere.md", "--db", db])
    said = " ".join(plain.output.split())
    assert plain.exit_code == 1 and "2 id(s) were not there" in said
    assert "e.g. 'notes/cooking.md' is document 'cooking.md': --doc with the stored id" in said
    assert set(Database(db).open("default").document_index()) == {"cooking.md"}
    gone = runner.invoke(app, ["delete", "--doc", "nothere.md", "--db", db])  # no such file
    assert gone.exit_code == 1 and "paths of files" not in gone.output


def test_a_record_read_as_markdown_or_retitled_is_a_changed_document(tmp_path, pydoc_pipeline):
    """A service client that turns on Markdown sections, or renames a document whose text does
    not hold its title, got "unchanged" and kept the old chunks and title."""
    from probembed.store.chunked import record_document

    collection = Database(tmp_path / "db", create=True).collection("docs")
    text = "# Cats\n\nCats purr.\n\n# Dogs\n\nDogs bark loudly."

    def put(markdown: bool, title: str):
        document = record_document(Record("d1", text, {"title": title}, "req"), markdown)
        return ingest_parsed([document], collection, pydoc_pipeline, SMALL)

    assert put(False, "Pets").added == 1
    assert put(False, "Pets").unchanged == 1
    assert put(True, "Pets").updated == 1 and collection.count() == 2  # one chunk per section
    assert put(True, "Pets v2").updated == 1
    assert {meta["title"] for _, meta in stored_rows(collection).values()} == {"Pets v2"}


def test_a_byte_order_mark_is_not_text(tmp_path):
    """Notepad saves an empty file as a BOM: it was a document of one junk chunk, and every
    BOM file's first chunk began with U+FEFF."""
    from probembed.store.chunked import chunk_records

    def count(texts):
        return [len(t.split()) + 2 for t in texts]

    (tmp_path / "empty.txt").write_bytes(b"\xef\xbb\xbf")
    (tmp_path / "blank.md").write_bytes(b"\xef\xbb\xbf\r\n\r\n")
    for name in ("empty.txt", "blank.md"):
        assert "no text" in str(read_file(tmp_path / name, name))
    (tmp_path / "a.md").write_bytes(b"\xef\xbb\xbf# Title\n\nSome words here.\n")
    chunks = chunk_records(read_file(tmp_path / "a.md", "a.md"), count, SMALL)
    assert chunks[0].text == "# Title\n\nSome words here."


def test_a_markdown_title_is_its_first_heading_outside_code(tmp_path):
    """A file opening with a fenced shell script was titled "!/bin/sh"."""
    (tmp_path / "run.md").write_text(
        "```sh\n#!/bin/sh\necho hi\n```\n#tag\n\n## Usage #\n\nRun it.\n"
    )
    assert read_file(tmp_path / "run.md", "run.md").title == "Usage"
    (tmp_path / "plain.md").write_text("no heading at all\n")
    assert read_file(tmp_path / "plain.md", "plain.md").title == "plain"


def test_a_byte_order_mark_before_the_first_jsonl_line_is_skipped(tmp_path):
    from probembed.documents import read_jsonl, read_texts

    source = tmp_path / "bom.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + b"\n".join(jsonl_lines(2)) + b"\n")
    assert [r.id for r in read_jsonl(source)] == ["d1", "d2"]
    assert read_texts(source) == {"d1": "Document 1.", "d2": "Document 2."}


def test_a_changed_document_whose_chunks_are_refused_keeps_its_stored_version(
    tmp_path, pydoc_pipeline
):
    """New chunks that fail the checks (metadata of another type) write and delete nothing
    of that document, and it is not counted as updated; the problem is told once for the
    document, not once per chunk."""
    source = tmp_path / "docs.jsonl"

    def write(text, year):
        rows = [{"id": "a", "text": text, "year": year}, {"id": "b", "text": "delta", "year": 1}]
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))

    collection = Database(tmp_path / "db", create=True).collection("docs")
    write("\n\n".join(" ".join(f"w{p}_{k}" for k in range(30)) for p in range(3)), 2020)
    ingest_documents(source, collection, pydoc_pipeline, SMALL)
    before = collection.document_index()["a"]
    assert len(before.ids) > 1  # several chunks, so a shorter new version would leave stale ones
    write("a short new text", "2020")  # changed, and its year is now a string
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert (report.updated, report.chunks_written, report.chunks_removed) == (0, 0, 0)
    assert "stores 'year' as int64" in report.problems[0].message
    write("\n\n".join(" ".join(f"v{p}_{k}" for k in range(30)) for p in range(4)), "2020")
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert len(report.problems) == 1 and report.problems[0].doc_id == "a"
    assert "item 'a#0'" in str(report.problems[0])  # the document's first chunk, not #1
    long = "\n\n".join(" ".join(f"u{p}_{k}" for k in range(30)) for p in range(4))
    rows = [{"id": "one", "text": "short", "year": "x"}, {"id": "many", "text": long, "year": "y"}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    both = ingest_documents(source, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert [p.doc_id for p in both.problems] == ["one", "many"]  # in the input's order
    assert re.search(
        r"stores 'year' as int64.* \(and \d+ more of its chunks\) \(kept the stored version\)$",
        str(report.problems[0]),
    )
    assert collection.document_index()["a"] == before


def test_whole_numbers_then_fractions_make_one_float_column_across_the_two_parts(
    tmp_path, pydoc_pipeline
):
    """Chunks 1.. of every document are written before the chunks 0: a price of 10 on a long
    document's later chunks made an integer column, and a one-chunk document's 9.99 (in the
    second part) then failed, the run undone."""
    long = "\n\n".join(" ".join(f"w{p}_{k}" for k in range(30)) for p in range(3))
    rows = [
        {"id": "many", "text": long, "price": 10},
        {"id": "one", "text": "short", "price": 9.99},
    ]
    source = tmp_path / "prices.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    collection = Database(tmp_path / "db", create=True).collection("c")
    done = ingest_documents(source, collection, pydoc_pipeline, SMALL)
    assert (done.added, done.problems) == (2, [])
    assert len(collection.document_index()["many"].ids) > 1
    prices = {h["metadata"]["price"] for h in collection.search("short", k=20)["hits"]}
    assert prices == {10, 9.99}


def test_a_document_with_a_lone_surrogate_is_a_problem_not_a_failure(tmp_path, pydoc_pipeline):
    """A JSON escape like \\ud800 (in a text or in metadata) cannot be hashed or stored as
    UTF-8: that document is named as a problem, the others are written (or, by default,
    nothing is)."""
    source = tmp_path / "docs.jsonl"
    source.write_text(
        '{"id": "a", "text": "a fine document about cats"}\n'
        '{"id": "b", "text": "broken \\ud800 text"}\n'
        '{"id": "c", "text": "fine", "tag": "\\udfff"}\n'
    )
    collection = Database(tmp_path / "db", create=True).collection("docs")
    with pytest.raises(IngestError, match="'b': its text is not valid Unicode"):
        ingest_documents(source, collection, pydoc_pipeline, SMALL)
    assert not collection.exists
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert report.added == 1 and collection.ids() == {"a#0"}
    said = sorted(p.message for p in report.problems)
    assert said[0].startswith("document 'b': its text") and "'c': its metadata" in said[1]


def test_cli_ingest_says_when_the_chunk_size_is_over_the_pipelines_limit(tmp_path):
    """--chunk-tokens 1000 with members that read 256 tokens was cut at 256 without a word;
    an --overlap over half of that was lowered to 127 without one (ingest and embed)."""
    (tmp_path / "note.md").write_text("# Note\n\nA short note about chunk sizes.\n")
    args = ["ingest", str(tmp_path / "note.md"), "--db", str(tmp_path / "db"), "--chunk"]
    done = CliRunner().invoke(app, [*args, "--pipeline", "retrieval", "--chunk-tokens", "1000"])
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert (
        "warning: --chunk-tokens 1000 is more than the 256 tokens pipeline retrieval's shortest "
        "member reads: chunks are cut at 256" in said
    )
    assert "and the overlap at" not in said  # the default 32 fits under half of 256
    assert "cut at 256/32 (tokens/overlap)" in said
    embed = ["embed", str(tmp_path / "note.md"), "--out", str(tmp_path / "out"), "--chunk"]
    wide = ["--chunk-tokens", "100000", "--overlap", "200"]
    for command in ([*args, "--collection", "wide"], embed):
        done = CliRunner().invoke(app, [*command, "--pipeline", "retrieval", *wide])
        assert done.exit_code == 0, done.output
        said = " ".join(done.output.split())
        assert said.count("warning:") == 1, done.output
        assert (
            "warning: --chunk-tokens 100000 is more than the 256 tokens pipeline retrieval's "
            "shortest member reads: chunks are cut at 256, and the overlap at 127 (under half "
            "of that)" in said
        )


def test_cli_ingest_chunk_sync_and_group_by_doc(tmp_path, folder, pydoc_pipeline_dir):
    runner = CliRunner()
    db = str(tmp_path / "db")
    args = ["ingest", str(folder), "--db", db, "--pipeline", str(pydoc_pipeline_dir), "--chunk"]
    for name in ("sheet.csv", "photo.PNG", "more.png", ".DS_Store", ".git/config", "Makefile"):
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text("x")  # files no reader takes: said, not silently left out
    first = runner.invoke(app, [*args, "--chunk-tokens", "48", "--overlap", "8"])
    assert first.exit_code == 0, first.output
    assert "documents added 4, updated 0, removed 0, unchanged 0" in first.output
    said = " ".join(first.output.split())
    assert "not read: 4 file(s), .csv (1), .png (2), Makefile (1) (this run reads .txt, .md" in said
    (folder / "notes.txt").unlink()
    second = runner.invoke(app, [*args, "--chunk-tokens", "48", "--overlap", "8", "--sync"])
    assert "added 0, updated 0, removed 1, unchanged 3" in second.output
    other = tmp_path / "other"
    other.mkdir()
    (other / "guide.md").write_text("# Another guide\n\nNothing about capacitors.")
    beside = runner.invoke(  # a second folder, synced under its prefix, beside the first
        app,
        [
            "ingest",
            str(other),
            *args[2:],
            "--chunk-tokens",
            "48",
            "--overlap",
            "8",
            "--sync",
            "--prefix",
            "other/",
        ],
    )
    assert "added 1, updated 0, removed 0, unchanged 0" in beside.output, beside.output
    stored = set(Database(db).open("default").document_index())
    assert {"guide.md", "other/guide.md"} <= stored and len(stored) == 4
    found = runner.invoke(
        app, ["search", "flux capacitor", "--db", db, "--group-by-doc", "--json", "--exact"]
    )
    hits = json.loads(found.output)[0]["hits"]
    assert hits[0]["metadata"]["doc_id"] == "guide.md" and hits[0]["other_chunks"] > 0
    shown = runner.invoke(  # the table says the count too (only --json did)
        app,
        ["search", "flux capacitor", "--db", db, "--group-by-doc", "--exact"],
        env={"COLUMNS": "160"},
    )
    others = hits[0]["other_chunks"]
    assert f"{hits[0]['id']} (+{others} chunk{'s' if others > 1 else ''})" in shown.output
    refused = runner.invoke(app, ["ingest", str(folder), "--db", db, "--sync"])
    assert refused.exit_code == 2 and "holds documents as chunks" in refused.output
    # a document's id names no row of a chunked collection: said, with how to delete it
    by_id = runner.invoke(app, ["delete", "guide.md", "--db", db])
    said = " ".join(by_id.output.split())
    assert by_id.exit_code == 1  # as rm: something asked for was not there
    assert (
        "deleted 0 item(s); 1 id(s) were not there: 'guide.md' (1 of them name document(s) " in said
    )
    assert "--doc deletes a document's chunks" in said
    chunks = len(Database(db).open("default").document_index()["guide.md"].ids)
    chunk_id = runner.invoke(app, ["delete", "--doc", "guide.md#1", "--db", db])  # a chunk's
    said = " ".join(chunk_id.output.split())
    assert chunk_id.exit_code == 1 and "(1 of them are chunk ids, e.g. 'guide.md#1': " in said
    assert "without --doc it deletes that chunk, and its document is 'guide.md')" in said
    by_doc = runner.invoke(app, ["delete", "--doc", "guide.md", "nothere.md", "--db", db])
    said = " ".join(by_doc.output.split())
    assert by_doc.exit_code == 1 and chunks > 1
    assert f"deleted {chunks} chunk(s) of 1 document(s); 1 document(s) were not there: " in said
    assert "'nothere.md'" in said
    again = runner.invoke(app, ["delete", "--doc", "guide.md", "--db", db, "--missing-ok"])
    assert again.exit_code == 0 and "1 document(s) were not there: 'guide.md'" in again.output
    assert "guide.md" not in Database(db).open("default").document_index()


def big_markdown() -> str:
    """A Markdown file with what a stream must carry across its cuts: multi-byte characters,
    CRLF lines, a fence holding a # line, long paragraphs, headings with nothing under them
    before their subsection or sibling (one over more blank lines than a segment holds), a
    one-line section at the end."""
    parts = ["# Handbook\r\n\r\nIntro with café and 🚀 rockets.\r\n"]
    for i in range(40):
        parts.append(f"\n## Section {i}\n\n")
        if i % 13 == 6:  # headings with nothing under them: they join their subsection
            parts.append(f"### Part {i}\r\n\r\n#### Step {i}\n")
        parts.append("\n\n".join(
            " ".join(f"Naïve step {i}.{j}.{k} goes on." for k in range(6 + (i * j) % 9))
            for j in range(8)
        ))  # fmt: skip
        if i % 7 == 3:
            parts.append("\n\n```sh\n# not a heading, inside a fence\nmake all\n```\n")
        if i % 9 == 2:  # a heading with nothing under it before a sibling: joins it too
            parts.append(f"\n\n### Empty {i}\n\n### Sibling {i}\n\nText {i}.\n")
        if i % 17 == 8:  # more blank lines after a heading than a segment holds
            parts.append(f"\n\n### Gap {i}" + "\n" * 800 + f"#### Filled {i}\n\nText.\n")
        if i % 11 == 5:  # a paragraph longer than a segment, then a subsection
            parts.append("\n\n" + " ".join(f"long{n}" for n in range(900)) + "\n")
            parts.append(f"### After {i}\n\nShort.\n")
    parts.append("\n### Last\nThe final answer sits here.\n")
    return "".join(parts)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks and segments far smaller than the file, so every cut is exercised."""
    from probembed.store import streamed

    monkeypatch.setattr(streamed, "BLOCK_BYTES", 997)  # odd: cuts fall inside characters
    monkeypatch.setattr(streamed, "SEGMENT_CHARS", 700)


def stored_rows(collection) -> dict[str, tuple[str, dict]]:
    """Every stored chunk: id -> (text, metadata)."""
    rows = collection.rows(sorted(collection.ids()), ["text", "metadata"])
    return {i: (r["text"], json.loads(r["metadata"])) for i, r in rows.items()}


def read_whole_and_streamed(root, db_path, pipeline):
    """A folder ingested read whole into one collection and streamed (in batches of 50) into
    another: the streamed run's report, its rows and the whole run's rows."""
    db = Database(db_path, create=True)
    whole, streamed = db.collection("whole"), db.collection("streamed")
    ingest_documents(root, whole, pipeline, SMALL)
    report = ingest_documents(root, streamed, pipeline, SMALL, batch_size=50, stream_bytes=0)
    return report, stored_rows(streamed), stored_rows(whole)


def test_a_streamed_file_gives_the_chunks_of_the_file_read_whole(
    tmp_path, pydoc_pipeline, small_blocks
):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "handbook.md").write_bytes(big_markdown().encode("utf-8"))
    (root / "notes.txt").write_bytes(big_markdown().replace("#", "=").encode("utf-8"))
    report, rows, whole = read_whole_and_streamed(root, tmp_path / "db", pydoc_pipeline)
    assert (report.added, report.problems) == (2, [])
    assert rows == whole and report.chunks_written == len(rows) > 200
    text = (root / "handbook.md").read_bytes().decode("utf-8")
    for chunk_text, meta in rows.values():
        source = text if meta["doc_id"] == "handbook.md" else text.replace("#", "=")
        assert source[meta["start"] : meta["end"]] == chunk_text  # character offsets
    last = max((m["chunk"], m["heading"]) for t, m in rows.values() if m["doc_id"] == "handbook.md")
    assert last[1] == "Handbook > Section 39 > Last"
    streamed = Database(tmp_path / "db").collection("streamed")
    again = ingest_documents(root, streamed, pydoc_pipeline, SMALL)  # read whole: same hashes
    assert (again.unchanged, again.chunks_written) == (2, 0)


def long_lines_markdown() -> str:
    """Markdown with lines far past LINE_CHARS as a test sets it (500): French on one line,
    CRLF lines, one that starts like a heading, one under a setext underline, one inside a
    fence, a line of blanks inside a paragraph break, and unspaced Japanese with flags and
    accents written out (one word to a word count, cut by characters)."""
    french = " ".join(f"Le café numéro {i} est ouvert." for i in range(120))
    crlf = french.replace(" ", "\r\n", 40)  # its first 40 words on lines of their own
    unspaced = "".join(f"東京の天気{i}は晴れ\U0001f1ef\U0001f1f5e\u0301" for i in range(150))
    return (
        f"# Guide\n\n{french}\n\n{crlf}\r\n\r\n"
        f"# {french}\n\nText.\n\n{french}\n===\n\n```\n# {french}\n```\n\n"
        f"## Next\n\n{french}\n{' ' * 1200}\n{unspaced}\n"
    )


def test_long_lines_stream_in_pieces_and_give_the_chunks_read_whole(
    tmp_path, pydoc_pipeline, small_blocks, monkeypatch
):
    """A line was held whole, however long; it is now read in the pieces chunking cuts it
    into read whole too (at its last white space before LINE_CHARS, else between grapheme
    clusters), so a stream gives the same chunks, and no segment holds the line whole."""
    from probembed.chunking import structure
    from probembed.store import streamed

    monkeypatch.setattr(structure, "LINE_CHARS", 500)
    root = tmp_path / "docs"
    root.mkdir()
    text = long_lines_markdown()
    (root / "long.md").write_bytes(text.encode("utf-8"))
    (root / "long.txt").write_bytes(text.encode("utf-8"))
    report, rows, whole = read_whole_and_streamed(root, tmp_path / "db", pydoc_pipeline)
    assert (report.added, report.problems) == (2, []) and rows == whole
    for chunk_text, meta in rows.values():
        assert text[meta["start"] : meta["end"]] == chunk_text and len(chunk_text) <= 48 * 16
    headings = {m["heading"] for _, m in rows.values() if m["doc_id"] == "long.md"}
    assert headings == {"Guide", "Guide > Next"}  # a long line is no heading, nor a title
    assert report.chunks_by_chars > 5 and "cut by characters, not tokens" in report.summary()
    file = streamed.scan_file(root / "long.txt", "long.txt")
    segments = list(file.segments())
    assert "".join(s.text for s in segments) == text
    assert max(len(s.text) for s in segments) <= streamed.SEGMENT_CHARS + 2 * 500 + 2


def fenced_markdown() -> str:
    """Markdown whose fenced code holds blank lines: blocks shorter than a chunk, blocks
    longer than a segment (which a stream may not cut at their blank lines), CRLF lines, a
    ~~~ block showing ``` lines, blocks in a list item and a quote, and an unclosed fence
    running to the end."""
    short = "```python\ndef area(r):\n    return 3.14 * r * r\n\n\ndef side(a):\n    return a\n```"
    parts = ["# Code guide\n\nExamples follow, each with its own words around it.\n"]
    for i in range(12):
        # 36 words with the heading: the block's first 9 of 14 filled its chunk of 48
        words = f"Example {i} shows a call." + " It returns a value." * 7
        parts.append(f"\n## Example {i}\n\n{words}\n\n")
        parts.append(short.replace("area", f"area{i}") + "\n")
        if i % 4 == 1:  # longer than a segment, blank lines between its functions
            body = "\n\n".join(f"def f{i}_{k}(x):\n    return x.real * {k}. + 1" for k in range(40))
            parts.append(f"\nText before.\n````py\n{body}\n````\nText after.\n")
        if i % 4 == 2:
            parts.append("\r\n~~~md\r\n```sh\r\nmake\r\n\r\n# no heading\r\n```\r\n~~~\r\n")
        if i % 4 == 3:  # its `#` lines two spaces in, or after `>`: code, no headings
            parts.append("\n- ```sh\n  # not a heading\n\n  make\n  ```\n")
            parts.append("\n> ```py\n> # not a heading\n>\n> x = 1\n> ```\n")
    parts.append("\n## Unclosed\n\n```sh\nmake\n\n# not a heading\n\n" + "make all\n\n" * 60)
    return "".join(parts)


def test_fenced_code_streams_as_read_whole_and_a_short_block_stays_whole(
    tmp_path, pydoc_pipeline, small_blocks
):
    """A fenced block's blank lines cut it into paragraphs, read whole or streamed: a block
    that fit a chunk was cut across two. It is one paragraph now, and a stream cuts no segment
    at a blank line inside one (the segments hold the blocks that reach into them)."""
    from probembed.store import streamed

    root = tmp_path / "docs"
    root.mkdir()
    text = fenced_markdown()
    (root / "code.md").write_bytes(text.encode("utf-8"))
    report, rows, whole = read_whole_and_streamed(root, tmp_path / "db", pydoc_pipeline)
    assert (report.added, report.problems) == (1, []) and rows == whole
    texts = [t for t, _ in rows.values()]
    for i in range(12):
        block = text[text.index(f"```python\ndef area{i}(") :]
        block = block[: block.index("\n```") + 4]
        assert any(block in t for t in texts)  # in one chunk
    listed = "- ```sh\n  # not a heading\n\n  make\n  ```"
    quoted = "> ```py\n> # not a heading\n>\n> x = 1\n> ```"
    for block in (listed, quoted):  # in a list item, in a quote: each of the 3 in one chunk
        assert sum(block in t for t in texts) >= 3
    headings = {m["heading"] for _, m in rows.values()}
    assert "Code guide > Unclosed" in headings and not any("heading" in h for h in headings)
    segments = list(streamed.scan_file(root / "code.md", "code.md").segments())
    blocks = [block for segment in segments for block in segment.code]
    assert len(segments) > 5 and len(set(blocks)) == 12 + 3 + 3 + 3 * 2 + 1
    for segment in segments[1:]:
        assert not any(s < segment.start < e for s, e in blocks)


def test_a_stream_searches_a_long_code_block_for_paragraph_breaks_once(
    tmp_path, small_blocks, monkeypatch
):
    """A fenced block longer than a segment is held whole, and each segment's worth of it
    searched the whole block again for a paragraph break outside code: quadratic (an unclosed
    fence over 40 MB of paragraphs took 14.5 s of CPU to cut where 4.1 s did without it). The
    characters searched now add up to the file's size, and the segments are as before."""
    from probembed.store import streamed

    searched = []

    def counted(text, *args):
        """The real search, noting how much of the text it looks at."""
        searched.append(len(text) - (args[1] if len(args) > 1 else 0))
        return last_paragraph_break(text, *args)

    text = "# Log\n\nIntro.\n\n```\n" + "A line of it. And more.\n\n" * 4000 + "```\n\nEnd.\n"
    path = tmp_path / "log.md"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(streamed, "last_paragraph_break", counted)
    segments = list(streamed.scan_file(path, "log.md").segments())
    assert "".join(s.text for s in segments) == text
    assert [s.text for s in segments] == [text[:15], text[15:]] and segments[1].code
    assert len(searched) > 100 and sum(searched) < 2 * len(text)


def test_an_unclosed_fence_holds_no_more_than_code_chars_of_a_stream(
    tmp_path, pydoc_pipeline, small_blocks, monkeypatch
):
    """A fence left unclosed made the rest of a streamed file one block, held whole: a 100 MB
    file's 100 MB. Past CODE_CHARS the block ends at a line start, so a segment holds at most
    that and a segment more; streamed and read whole still give the same chunks."""
    from probembed.chunking import structure
    from probembed.store import streamed

    monkeypatch.setattr(structure, "CODE_CHARS", 1500)
    root = tmp_path / "docs"
    root.mkdir()
    text = "# Notes\n\nA stray fence follows.\n\n```\n"
    text += "".join(f"Note {i} says a thing. It is short.\n\n" for i in range(1000))
    (root / "notes.md").write_bytes(text.encode("utf-8"))
    segments = list(streamed.scan_file(root / "notes.md", "notes.md").segments())
    assert "".join(s.text for s in segments) == text and len(segments) > 20
    assert max(len(s.text) for s in segments) <= 1500 + streamed.SEGMENT_CHARS + 2 * 40
    report, rows, whole = read_whole_and_streamed(root, tmp_path / "db", pydoc_pipeline)
    assert (report.added, report.problems) == (1, []) and rows == whole


@pytest.mark.parametrize("words", [True, False])
def test_a_line_of_any_length_is_held_in_pieces(tmp_path, words):
    """20 MB of French on one line took 1.23 GB to ingest where the same bytes in paragraphs
    took 0.47 GB, 20 MB of unspaced Chinese 3.6 GB: the line was one segment. Each segment
    now holds at most a segment's worth and two pieces of a line."""
    from probembed.chunking import LINE_CHARS
    from probembed.store.streamed import SEGMENT_CHARS, scan_file

    unit = "Le café est ouvert le dimanche. " if words else "東京の天気は晴れです"
    path = tmp_path / "line.txt"
    path.write_text(unit * (5 * 2**20 // len(unit)) + "\n", encoding="utf-8")
    segments = list(scan_file(path, "line.txt").segments())
    assert max(len(s.text) for s in segments) <= SEGMENT_CHARS + 2 * LINE_CHARS + 2
    offset = 0
    for segment in segments:
        assert segment.start == offset
        offset += len(segment.text)
    assert offset == 5 * 2**20 // len(unit) * len(unit) + 1


def test_a_thai_file_is_cut_by_characters_and_the_report_says_so(tmp_path, pydoc_pipeline_dir):
    """`ingest --chunk --chunk-tokens 32` stored a 2,250-character chunk of a Thai file (a
    word count sees one word between spaces) and the report said nothing of it."""
    thai = "แม่น้ำท่วมหมู่บ้านหลังฝนตกหนักสามวันและชาวบ้านต้องอพยพไปอยู่ที่วัดใกล้เคียง"
    (tmp_path / "th.txt").write_text(f"{thai * 30} {thai * 10}\n", encoding="utf-8")
    db = str(tmp_path / "db")
    args = ["ingest", str(tmp_path / "th.txt"), "--chunk", "--chunk-tokens", "32", "--db", db]
    done = CliRunner().invoke(app, [*args, "--pipeline", str(pydoc_pipeline_dir)])
    assert done.exit_code == 0, done.output
    texts = [r["text"] for r in stored_rows_of(Database(db).open("default"))]
    assert max(map(len, texts)) <= 32 * 16 and len(texts) == 7
    assert "chunks written 7 (6 cut by characters, not tokens)" in " ".join(done.output.split())


def stored_rows_of(collection) -> list[dict]:
    """Every stored row's text and metadata, in id order."""
    return list(collection.rows(sorted(collection.ids()), ["text", "metadata"]).values())


def test_front_matter_and_underlined_headings_stream_as_they_read_whole(
    tmp_path, pydoc_pipeline, small_blocks
):
    """A static-site page's YAML front matter was chunked as text (its closing `---` made
    its last key a heading once underlines counted), and `Title` over `=====` was no
    heading. Front matter is now in no chunk and gives the title; underlined headings open
    sections, the same read whole or streamed, wherever a segment is cut."""
    parts = ['---\ntitle: "Field guide: birds"\ntags: [owls, larks]\n---\n\n', big_markdown()]
    for i in range(24):
        words = 40 if i % 5 else 400  # every fifth runs past a segment before its heading
        parts.append(f"\n\nTopic {i}\n{'=-'[i % 2] * (3 + i % 4)}\n\n")
        parts.append(" ".join(f"Bird {i}.{k} sings." for k in range(words)))
    parts.append("\n\nA paragraph\nof two lines\n---\n\n- a list item\n---\n\nEnd.\n")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text("".join(parts), encoding="utf-8")
    (root / "alone.md").write_text("---\ntitle: Only front matter\n---\n", encoding="utf-8")
    report, rows, whole = read_whole_and_streamed(root, tmp_path / "db", pydoc_pipeline)
    assert (report.added, report.problems) == (2, [])
    assert rows == whole
    guide = {i: r for i, r in rows.items() if r[1]["doc_id"] == "guide.md"}
    assert {meta["title"] for _, meta in guide.values()} == {"Field guide: birds"}
    assert not any("tags:" in text or "title:" in text for text, _ in guide.values())
    assert min(meta["start"] for _, meta in guide.values()) == len(parts[0])
    headings = {meta["heading"] for _, meta in guide.values()}
    assert {"Topic 0", "Topic 0 > Topic 1", "Topic 22 > Topic 23"} <= headings
    assert not any("two lines" in h or "list item" in h for h in headings)
    topic = next(t for t, m in guide.values() if m["heading"] == "Topic 4 > Topic 5")
    assert topic.startswith("Topic 5\n-")  # the heading's line is in its section
    # a page of front matter alone keeps it as its text, and its title
    alone = [r for r in rows.values() if r[1]["doc_id"] == "alone.md"]
    assert [(t, m["title"]) for t, m in alone] == [
        ("---\ntitle: Only front matter\n---", "Only front matter")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "# Guide\n\nIntro.\n\n## Parent\n" + "\n" * 700 + "Child\n-----\n\nBody text.\n",
        "## Parent\n\n" + "x" * 800 + "\n-----\n\nBody text.\n",
        "Title\u2028===\u2028body text here\n",
    ],
)
def test_setext_headings_after_a_long_gap_or_odd_line_ends_stream_as_read_whole(
    tmp_path, pydoc_pipeline, small_blocks, text
):
    """A segment was cut between an empty heading and a setext title more than a segment
    later, so the stream kept the empty heading's path where read whole joined it; a title
    underlined across U+2028 was the file's title read whole, not streamed (a reviewer)."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "page.md").write_text(text, encoding="utf-8")
    _, rows, whole = read_whole_and_streamed(root, tmp_path / "db", pydoc_pipeline)
    assert rows == whole and rows


def test_a_streamed_file_that_cannot_be_read_is_reported_as_when_read_whole(
    tmp_path, pydoc_pipeline, small_blocks
):
    root = tmp_path / "bad"
    root.mkdir()
    (root / "late-latin1.txt").write_bytes(b"plain words " * 500 + "café".encode("latin-1"))
    (root / "cut-short.md").write_bytes("# Title\n\nan ending é".encode()[:-1])
    (root / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + b"x" * 3000)
    # NUL bytes past the first 8 KiB were stored as text
    (root / "late-nul.txt").write_bytes(b"plain words " * 900 + b"\x00" * 64 + b" more words")
    (root / "blank.txt").write_bytes(b" \n\t\n" * 2000)
    # a byte order mark and invisible characters are no text either (streamed, it was
    # "added" with no chunk, on every run)
    (root / "marks.txt").write_bytes(b"\xef\xbb\xbf\n\n" + "\u200b \n".encode() * 2000)
    (root / "notepad.txt").write_bytes("\ufeffA note saved as Unicode.\n".encode("utf-16-le"))
    said = {}
    for stream_bytes in (0, 10**9):
        collection = Database(tmp_path / f"db{stream_bytes}", create=True).collection("bad")
        with pytest.raises(IngestError) as stopped:
            ingest_documents(root, collection, pydoc_pipeline, SMALL, stream_bytes=stream_bytes)
        said[stream_bytes] = {
            p.source.rsplit("/", 1)[-1]: p.message for p in stopped.value.problems
        }
        assert not collection.exists
    assert said[0] == said[10**9]  # the same report, streamed or read whole
    assert said[0]["late-latin1.txt"].startswith("not UTF-8: byte 0xe9 at offset 6003;")
    assert said[0]["cut-short.md"].startswith("not UTF-8: byte 0xc3 at offset 19;")
    assert "binary" in said[0]["binary.md"] and "blank.txt" not in said[0]
    assert said[0]["late-nul.txt"] == "binary file, not text: a NUL byte at offset 10800"
    assert "marks.txt" not in said[0]  # no text to index: empty, not bad input
    assert said[0]["notepad.txt"].startswith("UTF-16 text, not UTF-8; convert it")


def test_a_stream_that_fails_part_way_leaves_nothing_of_it(tmp_path, pydoc_pipeline, small_blocks):
    root = tmp_path / "docs"
    root.mkdir()
    big = root / "big.md"
    big.write_text(big_markdown())
    (root / "small.md").write_text("# Small\n\nA small file.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(root, collection, pydoc_pipeline, SMALL, batch_size=50, stream_bytes=0)
    before, version = stored_rows(collection), collection.version
    for on_error in ("stop", "skip"):
        big.write_text(big_markdown().replace("final answer", "new answer"))
        (root / "small.md").write_text(f"# Small\n\nA small file, edited ({on_error}).")
        scanned = list(read_documents(root, stream_bytes=0))
        with big.open("a") as handle:  # changed after its first pass: found at the end
            handle.write("\nOne more line.\n")
        run = functools.partial(ingest_parsed, scanned, collection, pydoc_pipeline, SMALL)
        if on_error == "stop":
            with pytest.raises(IngestError, match=r"big.md: the file changed while it was read"):
                run(on_error=on_error, batch_size=50)
            assert stored_rows(collection) == before  # every batch written was undone
            assert collection.version > version
            continue
        report = run(on_error=on_error, batch_size=50)
        assert [p.source for p in report.problems] == [str(big)]
        assert (report.updated, report.chunks_written) == (1, 1)  # small.md only
        after = stored_rows(collection)
        assert {i: r for i, r in after.items() if i.startswith("big.md")} == {
            i: r for i, r in before.items() if i.startswith("big.md")
        }
    rerun = ingest_documents(root, collection, pydoc_pipeline, SMALL, stream_bytes=0)
    assert (rerun.updated, rerun.unchanged) == (1, 1)  # big.md, whose stored hash is stale
    assert any("One more line." in text for text, _ in stored_rows(collection).values())


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_a_failed_stream_keeps_what_another_writer_committed_meanwhile(
    tmp_path, pydoc_pipeline, small_blocks, on_error
):
    """Undoing a failed stream rolled the whole table back to where the stream began, and a
    document the service stored during it was gone."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.md").write_text(big_markdown())
    (root / "small.md").write_text("# Small\n\nA small file.")
    db = Database(tmp_path / "db", create=True)
    collection = db.collection("docs")
    ingest_documents(root / "small.md", collection, pydoc_pipeline, SMALL)
    before = stored_rows(collection)
    calls = []

    def encode(texts):
        """The pipeline's encode; another writer commits after the first batch, then a fault."""
        calls.append(len(texts))
        if len(calls) == 2:  # the service, through its own handle
            Database(tmp_path / "db").collection("docs").add(_service_chunk(pydoc_pipeline))
        if len(calls) == 3:
            raise OSError("disk full")
        return pydoc_pipeline.encode(texts)

    run = functools.partial(
        ingest_documents, root / "big.md", collection, pydoc_pipeline, SMALL,
        batch_size=20, stream_bytes=0, encode=encode, on_error=on_error,
    )  # fmt: skip
    if on_error == "stop":
        with pytest.raises(IngestError, match="disk full"):
            run()
    else:
        assert "disk full" in str(run().problems[0])
    assert len(calls) == 3
    after = stored_rows(Database(tmp_path / "db").collection("docs"))
    assert not any(i.startswith("big.md") for i in after)  # the stream's chunks are undone
    assert after == {**before, "service#0": after["service#0"]}  # the other writer's stays


def test_a_chunked_write_that_fails_between_commits_leaves_the_collection_as_it_was(
    tmp_path, pydoc_pipeline
):
    """Chunks are written in batches, one commit each: a fault in a later batch left the
    earlier ones committed (a service's chunked write answered 500 with part of it stored)."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.md").write_text(big_markdown())
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(root / "big.md", collection, pydoc_pipeline, SMALL, batch_size=50)
    before = stored_rows(collection)
    (root / "big.md").write_text(big_markdown().replace("Section", "Part"))  # every chunk new
    (root / "small.md").write_text("# Small\n\nA small file.")
    calls = []

    def encode(texts):
        """The pipeline's encode, failing on its third batch."""
        calls.append(len(texts))
        if len(calls) == 3:
            raise OSError("disk full")
        return pydoc_pipeline.encode(texts)

    with pytest.raises(OSError, match="disk full"):
        ingest_documents(root, collection, pydoc_pipeline, SMALL, batch_size=50, encode=encode)
    assert stored_rows(collection) == before
    assert not any(i.startswith("small.md") for i in collection.ids())


def _service_chunk(pipeline):
    """A one-chunk document as the service would store it."""
    from probembed.store.rows import Batch, PipelineInfo

    meta = {"doc_id": "service", "chunk": 0, "doc_hash": "0" * 32 + "+1"}
    text = "a note the service stored during the stream"
    return Batch(["service#0"], [text], [meta], pipeline.encode([text]), PipelineInfo.of(pipeline))


def write_large_text(path, size: int) -> None:
    """A plain-text file of `size` bytes or a little more, written a block at a time: real
    paragraphs of long words the hashing encoder keeps in its cache (`CACHED_CHARS`
    characters), so the models embed it fast; a longer word is hashed n-gram by n-gram each
    time it is met (a 20 MiB file of 34-character words was ingested in 49 s, of 24 in 6)."""
    rng = random.Random(0)
    letters = CACHED_CHARS - len("lexeme0000")
    vocabulary = [
        f"lexeme{i:04d}" + "".join(rng.choices("abcdefghij", k=letters)) for i in range(1500)
    ]
    block = "".join(
        " ".join(rng.choices(vocabulary, k=rng.randint(20, 120))) + ".\n\n" for _ in range(300)
    )
    with path.open("w", encoding="utf-8") as handle:
        written = 0
        while written < size:
            part = f"Part {written}.\n\n{block}"
            handle.write(part)
            written += len(part)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("The last paragraph names the zeppelin hangar.\n")


#: Run in a fresh interpreter: a warm-up ingest, then the large file; the process's own peak
#: RSS (`memory_support`: its ru_maxrss starts at the test process's) before and after.
MEASURE = """
import json, sys
from memory_support import status_bytes
from probembed.pipeline import Pipeline
from probembed.store import Database, ingest_documents
pipeline = Pipeline.load(sys.argv[1], cache=False)
collection = Database(sys.argv[2], create=True).collection("large")
ingest_documents(sys.argv[3], collection, pipeline, stream_bytes=0)
before = status_bytes("VmHWM")
report = ingest_documents(sys.argv[4], collection, pipeline)
print(json.dumps({"before": before, "after": status_bytes("VmHWM"),
                  "chunks": report.chunks_written, "problems": [str(p) for p in report.problems]}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self")
def test_a_20_mb_file_is_ingested_in_bounded_memory(tmp_path, pydoc_pipeline_dir):
    """A file over `STREAM_BYTES` is streamed: what ingesting a 20 MiB file adds to the peak
    memory a 4 MiB warm-up left stays far under what holding it takes. A stream that merged
    each batch into the table and compacted it at the end added some 60 MiB (17fe7da)."""
    warm, large = tmp_path / "warm.txt", tmp_path / "large.txt"
    write_large_text(warm, 4 * 2**20)
    write_large_text(large, 20 * 2**20)
    assert large.stat().st_size > STREAM_DEFAULT  # streamed as ingest streams it by default
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(pydoc_pipeline_dir), str(tmp_path / "db"), str(warm),
         str(large)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": PATH},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.splitlines()[-1])
    assert measured["problems"] == [] and measured["chunks"] > 6 * 512  # batches of 512
    # Holding the file would take at least its 20 MiB as bytes, again as text (ASCII: a byte a
    # character) and about as much again as chunks (+ overlap): 60 MiB; read whole, the
    # peak rose by 92 to 107 MiB. A stream holds a 1 MiB block, a 1 MiB segment and a batch
    # of 512 chunks (~4 MiB) with LanceDB's copies of it; the warm-up ran the same steps on
    # a 4 MiB file (and the agreement measure on a 1,000-row sample). What the stream adds
    # above that is the agreement measure over a larger table and the allocator's drift over
    # 14 batches: 7 to 20 MiB in runs on 2 cores; merged a batch at a time and compacted
    # (17fe7da^), 53 to 75 MiB. The bound sits some 16 MiB clear of both.
    assert measured["after"] - measured["before"] < 36 * 2**20, measured
    collection = Database(tmp_path / "db").open("large")
    last = f"large.txt#{measured['chunks'] - 1}"  # the warm-up file is another document
    row = collection.rows([last], ["text", "metadata"])[last]
    meta = json.loads(row["metadata"])
    with large.open(encoding="utf-8") as handle:  # ASCII: character offsets are byte offsets
        handle.seek(meta["start"])
        assert handle.read(meta["end"] - meta["start"]) == row["text"]
    assert row["text"].endswith("zeppelin hangar.") and meta["end"] == large.stat().st_size - 1


def test_a_changed_html_title_is_a_changed_document_and_one_its_text_gives_changes_no_digest(
    tmp_path, pydoc_pipeline
):
    from probembed.store.chunked import content_hash
    from probembed.store.formats import content_digest

    docs = tmp_path / "docs"
    docs.mkdir()
    page = "<html><head><title>{}</title></head><body><h1>Pump</h1><p>Unplug it.</p></body></html>"
    (docs / "p.html").write_text(page.format("Old title"))
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest_documents(docs, collection, pydoc_pipeline, SMALL)
    (docs / "p.html").write_text(page.format("New title"))
    again = ingest_documents(docs, collection, pydoc_pipeline, SMALL)
    assert (again.updated, again.unchanged) == (1, 0)  # it read "unchanged 1"
    assert collection.rows(["p.html#0"], ["title"])["p.html#0"]["title"] == "New title"
    # a title the text or the file name gives counts as before: nothing stored is re-embedded
    for title in ("Pump", ""):
        (docs / "p.html").write_text(page.format(title))
        document = read_file(docs / "p.html", "p.html")
        assert document.title == "Pump"
        assert content_hash(document) == content_digest([document.text.encode()], {})


@pytest.mark.parametrize(("option", "value"), [("on_error", "abort"), ("batch_size", 0)])
def test_a_bad_option_is_refused_before_a_sync_deletes_anything(
    tmp_path, folder, pydoc_pipeline, option, value
):
    """With nothing to write, a misspelt on_error went ahead as "skip" and the sync ran."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    count = collection.count()
    (folder / "guide.md").unlink()
    with pytest.raises(ValueError, match=option):
        ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True, **{option: value})
    assert collection.count() == count


def test_chunks_and_whole_documents_never_share_a_collection(tmp_path, hash_pipeline):
    """`ingest --chunk` into a collection of whole documents (or the reverse) stored both, and
    a grouped search returned the same document twice: `d0` and `d0#0`. (The library's
    `ingest` and the framework adapters write records as given: their metadata decides.)"""
    from probembed.store import StoreError
    from probembed.store.chunked import record_document
    from probembed.store.kinds import refuse_mixing

    whole = Database(tmp_path / "db", create=True).collection("whole")
    ingest([Record("d0", "a whole document about jaguars")], whole, hash_pipeline)
    with pytest.raises(StoreError, match="'whole' holds whole documents"):
        ingest_parsed([record_document(Record("d1", "another one"))], whole, hash_pipeline)
    chunks = Database(tmp_path / "db").collection("chunks")
    ingest_parsed([record_document(Record("d0", "a document about jaguars"))], chunks,
                  hash_pipeline)  # fmt: skip
    with pytest.raises(StoreError, match="'chunks' holds documents as chunks"):
        refuse_mixing(chunks, chunks=False)  # what `ingest` without --chunk and the service ask
    ingest_parsed([record_document(Record("d1", "another one"))], chunks, hash_pipeline)
    assert (whole.ids(), chunks.ids()) == ({"d0"}, {"d0#0", "d1#0"})
    # a corpus exported as chunks, with its own doc_id and chunk fields, is whole records:
    # it was taken for chunked ingest's and refused every later write, its resume included
    exported = Database(tmp_path / "db").collection("exported")
    part = [Record("m-1", "Reset: hold the button.", {"doc_id": "m", "chunk": 1})]
    ingest(part, exported, hash_pipeline)
    refuse_mixing(exported, chunks=False)
    rest = [*part, Record("f-1", "Warranty is two years.", {"doc_id": "f", "chunk": 1})]
    assert ingest(rest, exported, hash_pipeline).added == 1


def test_the_cli_refuses_chunks_into_whole_documents_and_the_reverse(tmp_path, hash_pipeline):
    """The reviewer's case: `ingest docs.jsonl` then `ingest docs.jsonl --chunk` stored both."""
    source = tmp_path / "docs.jsonl"
    source.write_text('{"_id": "d0", "text": "a document about jaguars"}\n', encoding="utf-8")
    pipe = str(hash_pipeline.save(tmp_path / "pipe"))
    cases = [
        (["-c", "w"], ["-c", "w", "--chunk"], "holds whole documents"),
        (["-c", "k", "--chunk"], ["-c", "k"], "holds documents as chunks"),
    ]
    for first, second, said in cases:
        base = ["ingest", str(source), "--db", str(tmp_path / "db"), "--pipeline", pipe]
        assert CliRunner().invoke(app, [*base, *first]).exit_code == 0
        refused = CliRunner().invoke(app, [*base, *second])
        told = " ".join(refused.output.split())
        assert refused.exit_code == 2 and said in told, refused.output
        assert told.endswith("or into another collection (-c NAME)")  # the option, named


def test_a_whole_markdown_document_embeds_its_text_not_its_front_matter(tmp_path, pydoc_pipeline):
    """Without chunking, a page's YAML front matter was embedded as the start of its text
    (what each member reads most of) and its title dropped; a page of front matter alone
    is still its own text."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "page.md").write_text(
        "---\ntitle: Espresso Guide\nauthor: Jane\n---\n# Brewing\n\nGrind fine.\n"
    )
    (folder / "only.md").write_text("---\ntitle: Only front\n---\n")
    (folder / "notes.txt").write_text("---\nnot: yaml here\n---\nplain notes\n")
    collection = Database(tmp_path / "db", create=True).collection("site")
    ingest(folder, collection, pydoc_pipeline)
    rows = collection.rows(["page.md", "only.md", "notes.txt"], ["text", "metadata"])
    assert rows["page.md"]["text"] == "# Brewing\n\nGrind fine."
    assert json.loads(rows["page.md"]["metadata"]) == {"title": "Espresso Guide"}
    assert rows["only.md"]["text"] == "---\ntitle: Only front\n---"
    assert json.loads(rows["only.md"]["metadata"]) == {"title": "Only front"}  # as chunked
    assert rows["notes.txt"]["text"].startswith("---\nnot: yaml")  # a text file is as it is


def _racing_undos(monkeypatch, collection, write="revert"):
    """Another writer's commit (a restore of the latest version, by its own connection: one
    Lance cannot reconcile with any other) lands after each look a `write` of `collection`
    (an undo, `Collection.revert`, by default) takes at its table, so each of its commits
    meets a real conflict. Returns the calls made."""
    import lancedb

    method, look, calls = getattr(collection, write), collection._open, []

    def looked():
        table = look()
        theirs = lancedb.connect(str(collection.db.path)).open_table(collection.name)
        theirs.restore(theirs.version)
        return table

    def raced(*args, **kwargs):
        calls.append(args)
        with monkeypatch.context() as patched:
            patched.setattr(collection, "_open", looked)
            return method(*args, **kwargs)

    monkeypatch.setattr(collection, write, raced)
    return calls


def test_a_sync_whose_removal_fails_is_undone_whole(tmp_path, folder, monkeypatch, pydoc_pipeline):
    """A chunked run deletes what its documents no longer have, and what a sync removes,
    after its writes: that deletion came after the run's undo, so one that failed left the
    run's new chunks stored beside the old ones. It is part of the run now, undone with it."""
    from probembed.store import WriteConflictError

    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    before = stored_rows(collection)
    (folder / "notes.txt").write_text("Other notes, about roses and how to prune them.")
    (folder / "page.html").unlink()
    deletes = _racing_undos(monkeypatch, collection, "delete_stored")
    with pytest.raises(WriteConflictError):
        ingest_documents(folder, collection, pydoc_pipeline, SMALL, sync=True)
    assert len(deletes) == 1
    monkeypatch.undo()
    assert stored_rows(collection) == before


def _failing_encoder(pipeline, call: int):
    """The pipeline's encode, failing at its `call`-th call (1 the first); and its calls."""
    calls = []

    def encode(texts):
        calls.append(len(texts))
        if len(calls) == call:
            raise RuntimeError("encoder went away")
        return pipeline.encode(texts)

    return encode, calls


def test_an_ingest_whose_undo_meets_a_conflict_says_its_batches_stay_and_a_rerun_ends_it(
    tmp_path, folder, monkeypatch, pydoc_pipeline
):
    """A run stopped part-way is undone by `Collection.revert`; when another writer's commit
    lands as the undo commits, the error said "nothing of this one was stored" while the
    batches the run had committed were still stored, and it said nothing of what stopped
    the run: both are named now."""
    from probembed.store import UndoConflictError
    from probembed.store.undo import UNDO_CONFLICT

    clean = Database(tmp_path / "clean", create=True).collection("docs")
    ingest_documents(folder, clean, pydoc_pipeline, SMALL, batch_size=4)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    encode, _ = _failing_encoder(pydoc_pipeline, 2)  # after the first batch was committed
    _racing_undos(monkeypatch, collection)
    with pytest.raises(UndoConflictError) as raised:
        ingest_documents(folder, collection, pydoc_pipeline, SMALL, batch_size=4, encode=encode)
    said = str(raised.value)
    assert said.startswith("this write stopped part-way (RuntimeError: encoder went away)")
    assert UNDO_CONFLICT in said and "nothing of this one" not in said
    assert str(raised.value.stopped_by) == "encoder went away"
    assert collection.count() == 4 < clean.count()  # the first batch stayed, as it says
    monkeypatch.undo()
    rerun = ingest_documents(folder, collection, pydoc_pipeline, SMALL, batch_size=4)
    assert rerun.problems == []
    assert stored_rows(collection) == stored_rows(clean)


def test_a_stopped_stream_whose_undo_meets_a_conflict_says_once_what_stopped_it(
    tmp_path, monkeypatch, pydoc_pipeline
):
    """A streamed file that fails under on_error="stop" was undone on its own and then
    with the rest of the run: both undos met the conflict, and the second's message wrapped
    the first's ("stopped part-way (UndoConflictError: this write stopped part-way (...)").
    One undo takes the whole run now: what stopped it is said once, and every batch the run
    committed is still stored, as the message says; a rerun ends it."""
    from probembed.store import UndoConflictError
    from probembed.store.undo import UNDO_CONFLICT

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Small\n\nA small file, read whole.")
    (root / "big.md").write_text(big_markdown())  # streamed, in batches of 20 chunks
    run = functools.partial(
        ingest_documents, root, pipeline=pydoc_pipeline, chunking=SMALL, batch_size=20,
        stream_bytes=1000,
    )  # fmt: skip
    clean = Database(tmp_path / "clean", create=True).collection("docs")
    run(collection=clean)
    collection = Database(tmp_path / "db", create=True).collection("docs")
    encode, calls = _failing_encoder(pydoc_pipeline, 3)  # a.md, big.md's first batch, then
    undos = _racing_undos(monkeypatch, collection)
    with pytest.raises(UndoConflictError) as raised:
        run(collection=collection, encode=encode)
    said = str(raised.value)
    assert said.startswith("this write stopped part-way (RuntimeError: encoder went away)")
    assert said.count("this write stopped part-way") == 1 and said.count(UNDO_CONFLICT) == 1
    assert str(raised.value.stopped_by) == "encoder went away" and not raised.value.problems
    assert len(calls) == 3 and len(undos) == 1
    monkeypatch.undo()
    stored = collection.ids()  # what the run committed before it stopped, as it says
    assert "a.md#0" in stored and len({i for i in stored if i.startswith("big.md#")}) == 20
    rerun = run(collection=collection)
    assert rerun.problems == [] and (rerun.added, rerun.unchanged) == (1, 1)
    assert stored_rows(collection) == stored_rows(clean)


def test_a_run_whose_undo_meets_a_conflict_names_the_documents_it_skipped(
    tmp_path, folder, monkeypatch, pydoc_pipeline
):
    """Under on_error="skip" a run reports the documents it skipped; stopped part-way by its
    encoder, with an undo that met a conflict, it raised the conflict alone, and those
    problems were gone with the report. The error keeps them now."""
    from probembed.store import UndoConflictError

    (folder / "notepad.txt").write_bytes("A note.".encode("utf-16"))
    collection = Database(tmp_path / "db", create=True).collection("docs")
    encode, _ = _failing_encoder(pydoc_pipeline, 2)
    _racing_undos(monkeypatch, collection)
    with pytest.raises(UndoConflictError) as raised:
        ingest_documents(
            folder, collection, pydoc_pipeline, SMALL, batch_size=4, encode=encode,
            on_error="skip",
        )  # fmt: skip
    said = str(raised.value)
    assert said.startswith("this write stopped part-way (RuntimeError: encoder went away)")
    assert [p.doc_id for p in raised.value.problems] == ["notepad.txt"]
    skipped = str(raised.value.problems[0])
    assert said.endswith(f"skipped 1 bad input item(s), none of which was written:\n  {skipped}")
    assert "UTF-16 text, not UTF-8" in skipped


def test_a_run_undone_after_its_encoder_failed_names_the_documents_it_skipped(
    tmp_path, folder, pydoc_pipeline
):
    """Under on_error="skip" a run stopped part-way by its encoder, whose undo succeeded,
    re-raised the encoder's error bare: the documents it had skipped, which its report would
    have named, were told nowhere. The error carries them now as a note (PEP 678), its class
    and message as they were, and nothing of the run is stored."""
    (folder / "notepad.txt").write_bytes("A note.".encode("utf-16"))
    collection = Database(tmp_path / "db", create=True).collection("docs")
    encode, calls = _failing_encoder(pydoc_pipeline, 2)  # after the first batch was committed
    with pytest.raises(RuntimeError) as raised:
        ingest_documents(
            folder, collection, pydoc_pipeline, SMALL, batch_size=4, encode=encode,
            on_error="skip",
        )  # fmt: skip
    assert type(raised.value) is RuntimeError and str(raised.value) == "encoder went away"
    assert len(calls) == 2
    skipped = next(p for p in read_documents(folder) if isinstance(p, Problem))
    assert "UTF-16 text, not UTF-8" in str(skipped)
    told = "skipped 1 bad input item(s), none of which was written:\n  " + str(skipped)
    assert [n.endswith(told) for n in getattr(raised.value, "__notes__", [])] == [True]
    assert not collection.exists  # the run made it, and its undo took everything back


@pytest.mark.parametrize(("error", "code"), [(RuntimeError, 1), (ValueError, 2)])
def test_cli_a_run_undone_after_its_encoder_failed_names_the_documents_it_skipped(
    tmp_path, folder, pydoc_pipeline_dir, monkeypatch, error, code
):
    """`probembed ingest --chunk --on-error skip` stopped part-way said what stopped it and
    not the documents it had skipped, which the error's notes hold: told after it now, by
    the handler of an unexpected failure (exit 1) and by ingest's own (exit 2)."""
    from probembed.pipeline import Pipeline

    (folder / "notepad.txt").write_bytes("A note.".encode("utf-16"))
    encode = Pipeline.encode

    def failing(self, texts, *args, **kwargs):  # the PDF's chunks fail, wherever they fall
        if any("Quantum entanglement" in text for text in texts):
            raise error("encoder went away")
        return encode(self, texts, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "encode", failing)
    args = ["ingest", str(folder), "--db", str(tmp_path / "db"), "--chunk", "--on-error", "skip"]
    args += ["--pipeline", str(pydoc_pipeline_dir), "--batch-size", "4", "--chunk-tokens", "48"]
    done = CliRunner().invoke(app, [*args, "--overlap", "8"])
    assert done.exit_code == code, done.output
    said = " ".join(done.output.split())
    assert "encoder went away" in said and "skipped 1 bad input item(s)" in said, said
    assert f"{folder / 'notepad.txt'}: UTF-16 text, not UTF-8" in said


def test_a_record_whose_id_is_invisible_is_refused_when_chunked_too(tmp_path, pydoc_pipeline):
    """A plain ingest refused an id of invisible characters; a chunked one stored its chunks
    under it ('\\u200b#0'), an id no reader or user can give back. It is refused now, and a
    sync of the file it is in removes nothing (it names no stored document)."""
    source = tmp_path / "docs.jsonl"
    lines = jsonl_lines(3)
    source.write_bytes(b"\n".join(lines) + b"\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True)
    lines[1] = json.dumps({"_id": "\u200b", "text": "Document 2."}).encode()
    source.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(IngestError, match="ids must be strings with a visible character"):
        ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True)
    report = ingest_documents(source, collection, pydoc_pipeline, SMALL, sync=True, on_error="skip")
    assert [p.message for p in report.problems] == [
        "ids must be strings with a visible character, got '\\u200b'"
    ]
    assert report.removed == 0  # d2's line now names no document, and d2 stays
    assert {i.split("#")[0] for i in collection.ids()} == {"d1", "d2", "d3"}


def test_a_bad_object_of_an_indent_0_export_gives_no_record_of_what_it_nests(tmp_path):
    """Written with `indent=0`, a thread's replies open lines with `{` too: after a post with
    a stray quote, reading resumed at its first reply, and the reply became a record."""
    from probembed.documents import Problem, read_jsonl

    posts = [
        {"id": "a", "text": "First post."},
        {"id": "b", "text": "Second post.", "replies": [{"id": "r1", "text": "A reply."}]},
        {"id": "c", "text": "Third post."},
    ]
    lines = "".join(json.dumps(post, indent=0) + "\n" for post in posts)
    source = tmp_path / "thread.json"
    source.write_text(lines.replace('"Second post."', '"Second "post."'))
    read = list(read_jsonl(source))
    assert [r.id for r in read if not isinstance(r, Problem)] == ["a", "c"]
    assert [p.source for p in read if isinstance(p, Problem)] == [f"{source}:5"]


def test_the_key_probembed_is_refused_at_every_write_front_door(tmp_path, pydoc_pipeline_dir):
    """The LangChain and LlamaIndex adapters give a hit's numbers under metadata["probembed"]
    and refuse user metadata under that key, but `probembed ingest`, `ingest` and
    `ingest_documents` stored it: read through an adapter, that item's value was replaced by
    the hit's numbers. Each refuses it naming the document and the key, as a problem per
    record (`--on-error skip` writes the others), plain and chunked."""
    rows = [
        {"id": "a", "text": "A fine note about cats."},
        {"id": "b", "text": "A note about dogs.", "probembed": "mine"},
        {"id": "c", "text": "A note about birds.", "metadata": {"probembed": "theirs"}},
    ]
    source = tmp_path / "notes.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    said = "metadata uses the key 'probembed', which probembed reserves"
    db = Database(tmp_path / "db", create=True)
    for write in (
        functools.partial(ingest, source),
        functools.partial(ingest, rows),
        functools.partial(ingest, [Record("b", "A note.", {"probembed": 1})]),
        functools.partial(ingest_documents, source, chunking=SMALL),
    ):
        collection = db.collection("refused")
        with pytest.raises(IngestError, match=f"document 'b': {said}"):
            write(collection, pydoc_pipeline_dir)
        assert not collection.exists
    for chunk in ([], ["--chunk"]):
        name = f"cli{len(chunk)}"
        args = ["ingest", str(source), "--db", str(tmp_path / "db"), "-c", name, *chunk]
        args += ["--pipeline", str(pydoc_pipeline_dir)]
        stopped = CliRunner().invoke(app, args)
        assert stopped.exit_code == 2, stopped.output
        told = " ".join(stopped.output.split())
        assert "2 bad input item(s); nothing was written" in told and said in told, told
        assert f"notes.jsonl:2: document 'b': {said}" in told
        skipped = CliRunner().invoke(app, [*args, "--on-error", "skip"])
        assert skipped.exit_code == 0, skipped.output
        assert {i.split("#")[0] for i in db.collection(name).ids()} == {"a"}


def test_a_record_without_a_title_stores_none_plain_or_chunked(tmp_path, pydoc_pipeline):
    """Absent, null, empty or blank all mean no title (`probembed.documents`): chunked ingest
    left it out, plain ingest stored BEIR's `"title": ""` (and null) as given."""
    corpus = tmp_path / "corpus.jsonl"
    lines = [
        {"_id": "empty", "title": "", "text": "Cats purr when they are content."},
        {"_id": "null", "title": None, "text": "Dogs bark at the mail carrier."},
        {"_id": "blank", "title": "  ", "text": "Birds sing before dawn."},
        {"_id": "absent", "text": "Fish swim in schools."},
        {"_id": "titled", "title": "Owls", "text": "Owls hunt at night."},
    ]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db = Database(tmp_path / "db", create=True)
    ingest(corpus, db.collection("plain"), pydoc_pipeline)
    ingest_documents(corpus, db.collection("chunked"), pydoc_pipeline, SMALL)
    plain = {
        i: meta.get("title", "left out") for i, (_, meta) in stored_rows(db.open("plain")).items()
    }
    chunked = {
        meta["doc_id"]: meta.get("title", "left out")
        for _, meta in stored_rows(db.open("chunked")).values()
    }
    expected = {line["_id"]: "left out" for line in lines} | {"titled": "Owls"}
    assert plain == chunked == expected
    assert stored_rows(db.open("plain"))["titled"][0] == "Owls Owls hunt at night."


def test_a_title_that_is_false_or_zero_is_refused_not_dropped(tmp_path, pydoc_pipeline):
    """`obj.get("title") or ""` read `false` and `0` as no title; like any title neither a
    string nor null they are refused, by the reader and by an ingest of dicts."""
    for title in (False, 0, 0.0, [], {}, True, 3):
        item = record_from({"id": "a", "title": title, "text": "Cats purr."}, "given")
        assert isinstance(item, Problem), title
        assert item.message == "document 'a': 'text' and 'title' must be strings"
    for title in (None, "", "  "):  # no title, kept out of the metadata
        item = record_from({"id": "a", "title": title, "text": "Cats purr."}, "given")
        assert (
            isinstance(item, Record) and "title" not in item.metadata and item.text == "Cats purr."
        )
    collection = Database(tmp_path / "db", create=True).collection("docs")
    with pytest.raises(IngestError, match="'text' and 'title' must be strings"):
        ingest([{"id": "a", "title": False, "text": "Cats purr."}], collection, pydoc_pipeline)
    assert not collection.exists  # nothing written


def test_a_chunked_ingest_names_documents_that_repeat_anothers_content(tmp_path, pydoc_pipeline):
    """Two files of one text under two ids tie at the top of every search and split their
    p_relevant; the report said nothing. It counts them, in the run and against the stored
    documents, names a pair, and stores every one of them."""
    docs = tmp_path / "docs"
    (docs / "policies").mkdir(parents=True)
    text = "# Leave\n\nStaff may carry over five days of leave.\n"
    (docs / "dup_a.md").write_text(text)
    (docs / "policies" / "dup_b.md").write_text(text)
    (docs / "other.md").write_text("# Travel\n\nBook trains a week ahead.\n")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    report = ingest_documents(docs, collection, pydoc_pipeline, SMALL)
    assert (report.repeats.count, report.repeats.example) == (2, ("policies/dup_b.md", "dup_a.md"))
    assert (
        "2 document(s) repeat another's content, e.g. 'policies/dup_b.md' = 'dup_a.md': both "
        "are found, and each gets a lower p_relevant than one would"
    ) in report.summary()
    assert ingest_documents(docs, collection, pydoc_pipeline, SMALL).repeats.count == 2  # unchanged
    more = tmp_path / "more"
    more.mkdir()
    (more / "copy.md").write_text(text)  # against the stored ones, under a prefix of its own
    report = ingest_documents(more, collection, pydoc_pipeline, SMALL, prefix="more/")
    assert report.repeats.count == 3 and report.repeats.example is not None
    assert report.repeats.example[0] == "more/copy.md"
    assert report.repeats.example[1] in {"dup_a.md", "policies/dup_b.md"}
    assert collection.document_index().keys() == {
        "dup_a.md", "policies/dup_b.md", "other.md", "more/copy.md"}  # fmt: skip
    (more / "copy.md").write_text("# Leave\n\nStaff may carry over six days of leave.\n")
    assert (
        ingest_documents(more, collection, pydoc_pipeline, SMALL, prefix="more/").repeats.count == 0
    )
    # a stored copy a sync removes is no longer repeated
    (docs / "policies" / "dup_b.md").unlink()
    report = ingest_documents(docs, collection, pydoc_pipeline, SMALL, sync=True)
    assert (report.removed, report.repeats.count) == (2, 0)  # more/copy.md is outside docs/ too
    assert "repeat another's content" not in report.summary()


@pytest.mark.parametrize("chunk", [["--chunk"], []], ids=["chunked", "plain"])
@pytest.mark.parametrize("place", ["store/db", "."], ids=["inside", "the folder"])
def test_a_database_inside_the_folder_it_ingests_is_no_part_of_it(
    tmp_path, folder, pydoc_pipeline_dir, chunk, place
):
    """`probembed ingest md4 --db md4/db` named the database's own files (.lance, .manifest,
    .txn, .json) as files not read on every run: the walk took them for the folder's. They
    are left out without a word, so a re-run, and a sync, reads nothing new and removes
    nothing; `--db md4`, the folder itself, too (its tables' folders; its hidden
    `.probembed` is counted as hidden, as any hidden folder is)."""
    (folder / "report.pdf").unlink()  # a plain ingest names the PDF and HTML files, as it should
    (folder / "page.html").unlink()
    db = (folder / place).resolve()
    command = ["ingest", str(folder), *chunk, "--db", str(db), "-c", "kb"]
    runner = CliRunner()
    made = runner.invoke(app, [*command, "--pipeline", str(pydoc_pipeline_dir), "--json"])
    assert made.exit_code == 0, made.output
    assert any(p.suffix == ".lance" for p in db.rglob("*"))  # its files are there to walk
    for again in (command, [*command, "--sync"]):
        said = runner.invoke(app, again)
        assert said.exit_code == 0, said.output
        assert "not read" not in said.output, said.output
        hidden = "left out: 1 hidden file(s) or folder(s)" if place == "." else "left out"
        assert (hidden in " ".join(said.output.split())) == (place == "."), said.output
        answer = json.loads(runner.invoke(app, [*again, "--json"]).stdout.splitlines()[-1])
        assert (answer["added"], answer["removed"], answer["skipped"]) == (0, 0, []), answer


def test_the_clis_early_check_leaves_the_database_out_as_the_run_does(
    tmp_path, folder, pydoc_pipeline_dir
):
    """The check of the input before a model loads walked the folder with the database in
    it, which the run leaves out: a link there whose target is gone refused a plain ingest
    that would have read nothing of it."""
    (folder / "report.pdf").unlink()
    (folder / "page.html").unlink()
    db = folder / "db"
    db.mkdir()
    (db / "stale.md").symlink_to(db / "gone.md")  # a problem of the walk that meets it
    command = ["ingest", str(folder), "--db", str(db), "--pipeline", str(pydoc_pipeline_dir)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "stale.md" not in result.output
    assert sorted(Database(db).open("default").ids()) == ["guide.md", "notes.txt"]


def test_a_record_of_white_space_or_invisible_characters_is_a_document_of_no_text(
    tmp_path, pydoc_pipeline
):
    """Chunked, a record of white space alone stopped the run as bad input ("has an empty
    text") while one of zero-width characters was a document of no text, not stored (as the
    service's blank documents are): both are the latter now, each named. `embed --chunk`,
    which reports such documents as problems, named the record's line with a file's words
    ("no text in it (empty file, ...)"); it names the record."""
    records = tmp_path / "r.jsonl"
    rows = [{"id": "a", "text": "  \t"}, {"id": "b", "text": "\u200b\u2060"}]
    rows.append({"id": "c", "text": "A page about llamas."})
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    collection = Database(tmp_path / "db", create=True).collection("docs")
    report = ingest_documents(records, collection, pydoc_pipeline, SMALL)
    assert (report.added, report.problems, report.empty) == (1, [], ["a", "b"])
    with pytest.raises(IngestError) as refused:
        embed_to_parquet(records, tmp_path / "out", pydoc_pipeline, chunking=SMALL)
    said = [str(p) for p in refused.value.problems]
    assert said == [
        f"{records}:{line}: document {doc!r} has no text to index (empty, blank, or nothing but "
        "markup)"
        for line, doc in ((1, "a"), (2, "b"))
    ]


@pytest.mark.parametrize("chunk", [["--chunk"], []], ids=["chunked", "plain"])
def test_a_folder_of_nothing_to_read_says_what_it_holds(tmp_path, pydoc_pipeline_dir, chunk):
    """A folder of hidden notes and a .docx was "holds no .txt/.md/.markdown files to
    ingest" alone: its user looked for files that were there. The refusal names what the
    walk found instead."""
    root = tmp_path / "vault"
    (root / ".obsidian").mkdir(parents=True)
    (root / ".draft.md").write_text("# Draft\n\nHidden.")
    (root / ".obsidian" / "note.md").write_text("# Note\n\nAn editor's.")
    (root / "report.docx").write_bytes(b"PK\x03\x04")
    command = ["ingest", str(root), *chunk, "--db", str(tmp_path / "db")]
    result = CliRunner().invoke(app, [*command, "--pipeline", str(pydoc_pipeline_dir)])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert said.endswith(
        "files to ingest; it holds 1 file(s) of no kind read: .docx (1); left out: 2 hidden "
        "file(s) or folder(s)"
    ), said
    assert not (tmp_path / "db").exists()
