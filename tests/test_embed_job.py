"""`probembed embed`: Gaussians as Parquet files, read back equal to what Pipeline.encode gives."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from test_builtin_pipelines import (
    MEAN_BOUND,
    VAR_BOUND,
    WEIGHT_BOUND,
    python_doc_paragraphs,
    scaled_var_change,
)
from typer.testing import CliRunner

from probembed.chunking import ChunkSettings
from probembed.gaussian import Gaussian
from probembed.interfaces.cli import app
from probembed.store import Database, IngestError, StoreError, ingest, ingest_documents
from probembed.store.embed_job import COLUMNS, embed_to_parquet
from probembed.store.rows import read_header

#: Small chunks, so a short document has several.
SMALL = ChunkSettings(48, 8)


def written(path) -> tuple[int, ...]:
    """What changes when a file is written or replaced (inode, size, mtime, ctime), not when it
    is read: the whole stat held the access time, which a refusing run's read of a part moves
    (relatime), so the comparison failed whenever that read fell in a later second."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@pytest.fixture
def source(tmp_path, sentences):
    """300 sentences as a JSONL file with ids d0, d1, ..."""
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "text": t}) for i, t in enumerate(sentences[:300])]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_embed_writes_what_pipeline_encode_gives(tmp_path, source, hash_pipeline, sentences):
    pipeline_dir = str(hash_pipeline.save(tmp_path / "pipeline"))
    out = tmp_path / "out"
    args = ["embed", str(source), "--out", str(out), "--pipeline", pipeline_dir]
    result = CliRunner().invoke(app, [*args, "--batch-size", "128"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "part-000000000.parquet",
        "part-000000128.parquet",
        "part-000000256.parquet",
    ]
    table = ds.dataset(out).to_table()
    assert table.column_names == ["id", "text", "metadata", "mean", "var", "weights"]
    assert table.column("id").to_pylist() == [f"d{i}" for i in range(300)]
    assert table.column("text").to_pylist() == sentences[:300]
    header = read_header(table.schema)
    assert header["pipeline"]["fingerprint"] == hash_pipeline.fingerprint
    want = hash_pipeline.encode(sentences[:300])  # one batch, the files were three
    got = Gaussian(
        np.array(table.column("mean").to_pylist(), dtype=np.float32),
        np.array(table.column("var").to_pylist(), dtype=np.float32),
    )
    # the encoders' batch-to-batch bound (test_builtin_pipelines)
    assert np.abs(got.mean - want.gaussian.mean).max() <= MEAN_BOUND
    assert scaled_var_change(got, want.gaussian) <= VAR_BOUND
    weights = np.array(table.column("weights").to_pylist())
    assert np.abs(weights - want.weights).max() <= WEIGHT_BOUND


def test_embed_writes_nothing_for_bad_input_and_refuses_a_directory_of_other_files(
    tmp_path, source, hash_pipeline
):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "a", "text": "fine"}\n{"_id": "a", "text": "twice"}\n')
    with pytest.raises(IngestError, match="duplicate id 'a'"):
        embed_to_parquet(bad, tmp_path / "never", hash_pipeline)
    assert not (tmp_path / "never").exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")  # a reader of the folder would take it for a part
    with pytest.raises(StoreError, match=r"holds 'notes.txt', which probembed embed does not"):
        embed_to_parquet(source, used, hash_pipeline)
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]


def test_embed_writes_text_and_metadata_as_a_collection_stores_them(tmp_path, hash_pipeline):
    """The files held id and vectors only: every record's text and metadata were dropped. Now
    each metadata field is a column of the type a collection gives it, decided over the whole
    input: a year of whole numbers in the first part and a fraction in the last is a float
    column in every part, so the folder reads as one table."""
    rows = [
        {"_id": "a", "text": "a cat", "year": 2001, "tags": ["pet"], "Source": "x"},
        {"_id": "b", "text": "a dog", "year": 2003, "lang": "en"},
        {"_id": "c", "text": "a cow", "year": 2004.5, "ok": True},
    ]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = embed_to_parquet(source, tmp_path / "out", hash_pipeline, batch_size=2)
    assert (report.rows, report.files) == (3, 2)
    table = ds.dataset(tmp_path / "out").to_table()
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest(source, collection, hash_pipeline, batch_size=2)
    stored = collection.db.table("c").to_arrow().sort_by("id")
    exported = {f.name: f.type for f in table.schema}
    kept = {f.name: f.type for f in stored.schema if f.name not in ("var_coef", "written")}
    assert exported == {**kept, "var": exported["mean"]}
    assert exported["year"] == pa.float64()  # both parts, though the first saw whole numbers
    assert (exported["lang"], exported["ok"]) == (pa.string(), pa.bool_())
    assert "tags" not in exported and "Source" not in exported  # in the JSON, as stored
    for name in ("id", "text", "metadata", "year", "lang", "ok"):
        assert table.column(name).to_pylist() == stored.column(name).to_pylist(), name
    assert json.loads(table.column("metadata")[0].as_py()) == {
        "Source": "x",
        "tags": ["pet"],
        "year": 2001,
    }


def test_embed_keeps_a_field_whose_types_clash_in_the_metadata_json_only(tmp_path, hash_pipeline):
    """embed wrote no metadata, so records whose fields clash in type exported; refusing them
    (as ingest does) broke such exports. The field gets no column, keeps its values in the
    metadata JSON (as a field a collection cannot make a column of), and a warning names it
    and its two types; the fields that do not clash are columns as before."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"_id": "a", "text": "a cat", "year": 2001, "lang": "en"}\n'
                     '{"_id": "b", "text": "a dog", "year": "unknown", "lang": "fr"}\n'
                     '{"_id": "c", "text": "a cow", "year": 2002, "n": 1}\n'
                     '{"_id": "d", "text": "a hen", "n": [1, 2]}\n')  # fmt: skip
    collection = Database(tmp_path / "db", create=True).collection("c")
    with pytest.raises(IngestError, match="metadata field 'year' = 'unknown' is a str"):
        ingest(mixed, collection, hash_pipeline)  # a collection still refuses it
    with pytest.warns(UserWarning) as warned:
        report = embed_to_parquet(mixed, tmp_path / "out", hash_pipeline, batch_size=2)
    said = sorted(str(w.message) for w in warned)
    assert len(said) == 2, said
    assert said[0].startswith("metadata field 'n' holds int64 and list values")
    assert said[1].startswith("metadata field 'year' holds int64 and string values")
    assert "only its place in the `metadata` JSON column" in said[1]
    assert report.json_only == {"n": ("int64", "list"), "year": ("int64", "string")}
    assert (report.rows, report.problems) == (4, [])
    table = ds.dataset(tmp_path / "out").to_table()
    assert table.column_names == [*COLUMNS, "lang"]
    assert table.column("id").to_pylist() == ["a", "b", "c", "d"]
    assert table.column("lang").to_pylist() == ["en", "fr", None, None]
    years = [json.loads(m).get("year") for m in table.column("metadata").to_pylist()]
    assert years == [2001, "unknown", 2002, None]
    with pytest.warns(UserWarning) as warned_again:  # each run warns
        again = embed_to_parquet(mixed, tmp_path / "out", hash_pipeline, batch_size=2)
    assert sorted(str(w.message) for w in warned_again) == said
    assert (again.kept_files, again.files) == (2, 0)  # a re-run keeps both parts
    result = CliRunner().invoke(
        app,
        ["embed", str(mixed), "--out", str(tmp_path / "cli"), "--pipeline",
         str(hash_pipeline.save(tmp_path / "pipeline"))],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: metadata field 'year' holds int64 and string values" in result.output


def test_embed_refuses_an_object_store_out_and_makes_no_local_folder_of_it(
    tmp_path, source, hash_pipeline, monkeypatch
):
    """`--out s3://bucket/x` would become a local folder s3:/bucket/x: refused by name."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="is an object-store URI"):
        embed_to_parquet(source, "s3://bucket/vectors", hash_pipeline)
    pipe = str(hash_pipeline.save(tmp_path / "pipe"))
    result = CliRunner().invoke(
        app, ["embed", str(source), "--out", "s3://bucket/vectors", "--pipeline", pipe]
    )
    assert result.exit_code == 2 and "is an object-store URI" in result.output, result.output
    assert not (tmp_path / "s3:").exists()


def test_embed_writes_whole_variances_where_a_collection_would_store_coefficients(
    tmp_path, search_pipeline
):
    # the built-ins' collections keep variance coefficients on a basis (`retrieval`'s here,
    # which a test below loads too); files for other stores have no basis to decode them with,
    # so they carry the whole variance. Eight short paragraphs, where 40 passages of 256
    # tokens took most of this file's time: variances decoded from the basis would miss
    # VAR_BOUND on them by 900 times or more
    texts = python_doc_paragraphs(8)
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(json.dumps({"_id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    embed_to_parquet(source, tmp_path / "out", search_pipeline, batch_size=8)
    table = pq.read_table(tmp_path / "out")
    assert table.column_names == ["id", "text", "metadata", "mean", "var", "weights"]
    got = Gaussian(
        np.array(table.column("mean").to_pylist(), dtype=np.float32),
        np.array(table.column("var").to_pylist(), dtype=np.float32),
    )
    want = search_pipeline.encode(texts).gaussian  # the same one batch
    assert scaled_var_change(got, want) <= VAR_BOUND


def test_embed_of_a_folder_names_the_option_that_reads_what_it_left(tmp_path, hash_pipeline):
    """embed's summary pointed at `ingest --chunk`; embed --chunk reads those files itself."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Notes\nsome notes", encoding="utf-8")
    (folder / "b.html").write_text("<p>A page.</p>", encoding="utf-8")
    report = embed_to_parquet(folder, tmp_path / "out", hash_pipeline)
    said = report.summary()
    assert "not read: 1 file(s), .html (1)" in said
    assert "`probembed embed --chunk` also .html, .htm, .pdf)" in said
    chunked = embed_to_parquet(folder, tmp_path / "chunks", hash_pipeline, chunking=SMALL)
    assert chunked.unread == {} and "not read" not in chunked.summary()
    assert chunked.documents == 2


def test_embed_says_how_many_documents_the_models_read_only_the_start_of(tmp_path, search_pipeline):
    """embed wrote every Gaussian without a word while most documents were longer than the
    models read; ingest says it (`cut_documents`), and so does embed now, with its remedy."""
    # 537 tokens: twice the models' limit, cut into three chunks (600 words made seven)
    long = " ".join(f"word{i}" for i in range(200)) + " Octopuses have three hearts."
    source = tmp_path / "corpus.jsonl"
    rows = [{"id": "short", "text": "Jaguars are big cats."}, {"id": "long", "text": long}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert search_pipeline.cut([r["text"] for r in rows]).tolist() == [False, True]
    pipe = str(search_pipeline.save(tmp_path / "pipe"))
    args = ["embed", str(source), "--out", str(tmp_path / "out"), "--pipeline", pipe]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "wrote 2 Gaussians" in said
    assert "cut short: 1 of 2 documents are longer than" in said
    assert f"({search_pipeline.max_tokens} tokens)" in said
    assert "`probembed embed --chunk` splits them into passages" in said
    chunked = CliRunner().invoke(app, [*args[:3], str(tmp_path / "chunks"), *args[4:], "--chunk"])
    assert chunked.exit_code == 0, chunked.output
    assert "longer than" not in chunked.output
    assert "(chunks of 2 document(s))" in " ".join(chunked.output.split())
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps(rows[0]) + "\n")
    quiet = CliRunner().invoke(
        app, [*args[:1], str(short), "--out", str(tmp_path / "o2"), *args[4:]]
    )
    assert quiet.exit_code == 0 and "longer than" not in quiet.output


def test_embed_chunk_writes_the_chunks_ingest_chunk_stores(tmp_path, pydoc_pipeline):
    """embed cut long documents short and pointed at `ingest --chunk`; with chunking it writes
    each chunk `ingest --chunk` stores, under its id, with its text and metadata (doc_id,
    chunk, start, end, title, heading, doc_hash, file_path), in document and chunk order."""
    from test_documents_ingest import HTML, long_markdown

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text(long_markdown("The flux capacitor overheats."))
    (folder / "page.html").write_text(HTML)
    (folder / "notes.txt").write_text("Plain notes about gardening and tomato plants.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL)
    stored = collection.db.table("docs").to_arrow().sort_by("id")
    report = embed_to_parquet(folder, tmp_path / "out", pydoc_pipeline, 7, chunking=SMALL)
    table = ds.dataset(tmp_path / "out").to_table()
    assert report.rows == table.num_rows == stored.num_rows > 20 and report.documents == 3
    ids = table.column("id").to_pylist()
    by_doc = [(i.rsplit("#", 1)[0], int(i.rsplit("#", 1)[1])) for i in ids]
    assert by_doc == sorted(
        by_doc, key=lambda d: (["guide.md", "notes.txt", "page.html"].index(d[0]), d[1])
    )
    exported = table.sort_by("id")
    names = ("id", "text", "metadata", "doc_id", "chunk", "start", "end", "title", "heading")
    for name in (*names, "doc_hash", "file_path"):
        assert exported.column(name).to_pylist() == stored.column(name).to_pylist(), name
    assert "Field guide > Troubleshooting" in exported.column("heading").to_pylist()


def test_chunked_input_of_large_files_is_what_a_streamed_ingest_stores(tmp_path, pydoc_pipeline):
    """A text file past the streaming size is chunked as a stream, as ingest streams it."""
    from test_documents_ingest import long_markdown

    from probembed.store.chunked import chunked_input

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text(long_markdown("The flux capacitor overheats."))
    (folder / "notes.txt").write_text("Plain notes about gardening.\n\nAnd tomato plants.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline, SMALL, stream_bytes=0)
    stored = collection.db.table("docs").to_arrow().sort_by("id")
    records, problems, _ = chunked_input(folder, pydoc_pipeline.count_tokens, SMALL, 0)
    assert not problems
    got = sorted((r.id, r.text, r.metadata) for r in records)
    want = zip(*(stored.column(n).to_pylist() for n in ("id", "text", "metadata")), strict=True)
    assert got == [(i, text, json.loads(meta)) for i, text, meta in want]


def test_embed_chunk_refuses_what_ingest_chunk_refuses(tmp_path, pydoc_pipeline):
    """A record whose metadata uses a field chunking writes: ingest's problem, in its words."""
    source = tmp_path / "docs.jsonl"
    source.write_text('{"_id": "a", "text": "A cat sat.", "chunk": 3}\n'
                      '{"_id": "b", "text": "A dog ran.", "topic": "dogs"}\n')  # fmt: skip
    collection = Database(tmp_path / "db", create=True).collection("docs")
    with pytest.raises(IngestError) as by_ingest:
        ingest_documents(source, collection, pydoc_pipeline, SMALL)
    with pytest.raises(IngestError) as by_embed:
        embed_to_parquet(source, tmp_path / "out", pydoc_pipeline, chunking=SMALL)
    assert str(by_embed.value) == str(by_ingest.value)
    assert "metadata uses ['chunk'], which chunking writes itself" in str(by_embed.value)
    assert not (tmp_path / "out").exists()
    report = embed_to_parquet(
        source, tmp_path / "out", pydoc_pipeline, on_error="skip", chunking=SMALL
    )
    table = ds.dataset(tmp_path / "out").to_table()
    assert report.rows == 1 and table.column("id").to_pylist() == ["b#0"]
    assert table.column("topic").to_pylist() == ["dogs"]


def test_a_rerun_keeps_the_parts_a_stopped_run_wrote_and_writes_the_rest(
    tmp_path, source, hash_pipeline
):
    """A killed job over a large corpus started again from zero (a re-run refused a used
    --out): the parts it finished are kept, read by their ids, and the others written."""
    out = tmp_path / "out"
    embed_to_parquet(source, out, hash_pipeline, batch_size=64)  # 5 parts of 300 rows
    whole = ds.dataset(out).to_table().to_pydict()
    for first in (64, 256):  # the parts a killed run had not written, one of them half-way
        (out / f"part-{first:09d}.parquet").unlink()
    (out / ".part-000000064.parquet.0123456789abcdef.tmp").write_bytes(b"half a part")
    kept = {p.name: written(p) for p in out.glob("part-*")}
    report = embed_to_parquet(source, out, hash_pipeline, batch_size=64)
    assert (report.files, report.rows, report.kept_files, report.kept_rows) == (2, 108, 3, 192)
    assert "wrote 108 Gaussians in 2 Parquet file(s)" in report.summary()
    assert "kept 3 file(s) (192 rows) an earlier run wrote" in report.summary()
    assert {name: written(out / name) for name in kept} == kept  # not rewritten
    assert ds.dataset(out).to_table().to_pydict() == whole
    done = embed_to_parquet(source, out, hash_pipeline, batch_size=64)
    assert (done.files, done.kept_files) == (0, 5)
    pipe = str(hash_pipeline.save(tmp_path / "pipe"))
    args = ["embed", str(source), "--out", str(out), "--pipeline", pipe, "--batch-size", "64"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "wrote 0 Gaussians in 0 Parquet file(s)" in " ".join(result.output.split())


def test_a_rerun_refuses_parts_of_another_input_or_pipeline_naming_the_file(
    tmp_path, source, hash_pipeline, pydoc_pipeline, sentences
):
    """Files of two runs never mix: a part another pipeline, input or batch size wrote is
    refused, naming the file and what differs, and nothing in --out is written or removed."""
    out = tmp_path / "out"
    embed_to_parquet(source, out, hash_pipeline, batch_size=128)
    listing = {p.name: written(p) for p in out.iterdir()}

    def jsonl(name, rows):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    rows = [{"_id": f"d{i}", "text": t} for i, t in enumerate(sentences[:300])]
    edited = [dict(r, text="An edited text.") if r["_id"] == "d130" else r for r in rows]
    typed = [dict(r, year=2001) if r["_id"] == "d200" else r for r in rows]
    cases = [
        (source, pydoc_pipeline, 128, None, "part-000000000.parquet, which is not a part of "
         "this run: it was written by pipeline 'hash'"),
        (source, hash_pipeline, 100, None, "part-000000000.parquet, which is not a part of this "
         "run: it holds 128 rows where this run's part from row 0 holds 100"),
        (jsonl("other.jsonl", [dict(r, _id=f"e{i}") for i, r in enumerate(rows)]), hash_pipeline,
         128, None, "part-000000000.parquet, which is not a part of this run: it holds id 'd0' "
         "where row 0 of this input is 'e0'"),
        (jsonl("edited.jsonl", edited), hash_pipeline, 128, None, "part-000000128.parquet, which "
         "is not a part of this run: it holds the ids of rows 128 to 255 of this input with "
         "other texts or metadata"),
        (jsonl("typed.jsonl", typed), hash_pipeline, 128, None, "part-000000000.parquet, which "
         "is not a part of this run: it has the metadata columns {} where this input gives "
         "{'year': 'int64'}"),
        (jsonl("short.jsonl", rows[:256]), hash_pipeline, 128, None, "part-000000256.parquet, "
         "which is not a part of this run: it holds rows from 256, where no part of this run "
         "starts: this input has 256 rows in parts of 128"),
        (source, hash_pipeline, 128, SMALL, "part-000000000.parquet, which is not a part of this "
         "run: it holds id 'd0' where row 0 of this input is 'd0#0'"),
    ]  # fmt: skip
    for given, pipeline, batch_size, chunking, said in cases:
        with pytest.raises(StoreError) as refused:
            embed_to_parquet(given, out, pipeline, batch_size, chunking=chunking)
        message = " ".join(str(refused.value).split())
        assert f"--out {out} holds {said}" in message, message
        assert "give an empty --out, or delete that run's files from it" in message
        assert {p.name: written(p) for p in out.iterdir()} == listing
    pipe = str(pydoc_pipeline.save(tmp_path / "pipe"))
    result = CliRunner().invoke(app, ["embed", str(source), "--out", str(out), "--pipeline", pipe])
    assert result.exit_code == 2 and "written by pipeline 'hash'" in result.output, result.output


@pytest.mark.parametrize("chunk", [["--chunk"], []], ids=["chunked", "plain"])
def test_an_out_inside_the_folder_embedded_is_no_part_of_it(tmp_path, pydoc_pipeline, chunk):
    """`probembed embed docs --out docs/vectors` named the Parquet files of its own first run
    as files not read on the next: the walk took the output for the folder's files."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Plain notes about gardening and tomato plants.")
    (docs / "b.md").write_text("# Octopus\n\nOctopuses have three hearts.")
    out = docs / "vectors"
    pipe = str(pydoc_pipeline.save(tmp_path / "pipe"))
    args = ["embed", str(docs), "--out", str(out), "--pipeline", pipe, *chunk]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert [p.suffix for p in out.iterdir()] == [".parquet"]  # a file there to walk
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    said = " ".join(again.output.split())
    assert "kept 1 file(s)" in said and "not read" not in said, said
