"""`probembed embed`: Gaussians as Parquet files, read back equal to what Pipeline.encode gives."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_builtin_pipelines import MEAN_BOUND, VAR_BOUND, WEIGHT_BOUND, scaled_var_change
from typer.testing import CliRunner

from probembed.gaussian import Gaussian
from probembed.interfaces.cli import app
from probembed.store import IngestError, StoreError
from probembed.store.embed_job import embed_to_parquet
from probembed.store.rows import read_header


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
    table = pq.read_table(out)
    assert table.column_names == ["id", "mean", "var", "weights"]
    assert table.column("id").to_pylist() == [f"d{i}" for i in range(300)]
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


def test_embed_writes_nothing_for_bad_input_and_refuses_a_used_directory(
    tmp_path, source, hash_pipeline
):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "a", "text": "fine"}\n{"_id": "a", "text": "twice"}\n')
    with pytest.raises(IngestError, match="duplicate id 'a'"):
        embed_to_parquet(bad, tmp_path / "never", hash_pipeline)
    assert not (tmp_path / "never").exists()
    embed_to_parquet(source, tmp_path / "out", hash_pipeline)
    with pytest.raises(StoreError, match="new or empty directory"):
        embed_to_parquet(source, tmp_path / "out", hash_pipeline)


def test_embed_takes_documents_whose_metadata_a_collection_would_refuse(tmp_path, hash_pipeline):
    """The files hold no metadata, yet a type clash across documents ("year" a number, then
    a word) refused the run, naming a collection that does not exist."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"_id": "a", "text": "a cat", "year": 2001}\n'
                     '{"_id": "b", "text": "a dog", "year": "unknown"}\n')  # fmt: skip
    report = embed_to_parquet(mixed, tmp_path / "out", hash_pipeline)
    assert report.rows == 2 and not report.problems
    ids = pq.read_table(tmp_path / "out").column("id").to_pylist()
    assert ids == ["a", "b"]


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
    tmp_path, default_pipeline
):
    # the default pipeline's collections keep variance coefficients on a basis; files for other
    # stores have no basis to decode them with, so they carry the whole variance
    from probembed.store.pydoc_corpus import read_pydoc_topics

    records = read_pydoc_topics()[:40]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"_id": r.id, "text": r.text}) + "\n" for r in records))
    embed_to_parquet(source, tmp_path / "out", default_pipeline, batch_size=40)
    table = pq.read_table(tmp_path / "out")
    assert table.column_names == ["id", "mean", "var", "weights"]
    got = Gaussian(
        np.array(table.column("mean").to_pylist(), dtype=np.float32),
        np.array(table.column("var").to_pylist(), dtype=np.float32),
    )
    want = default_pipeline.encode([r.text for r in records]).gaussian  # the same one batch
    assert scaled_var_change(got, want) <= VAR_BOUND


def test_embed_of_a_folder_names_the_command_that_reads_what_it_left(tmp_path, hash_pipeline):
    """embed's summary pointed at --chunk, an option embed does not have."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Notes\nsome notes", encoding="utf-8")
    (folder / "b.pdf").write_bytes(b"%PDF-1.4")
    report = embed_to_parquet(folder, tmp_path / "out", hash_pipeline)
    said = report.summary()
    assert "not read: 1 file(s), .pdf (1)" in said and "--chunk` (not embed) also .html" in said
    assert "`probembed ingest --chunk`" in said


def test_embed_says_how_many_documents_the_models_read_only_the_start_of(tmp_path, search_pipeline):
    """embed wrote every Gaussian without a word while most documents were longer than the
    models read; ingest says it (`cut_documents`), and so does embed now, with its remedy."""
    long = " ".join(f"word{i}" for i in range(600)) + " Octopuses have three hearts."
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
    assert "embed does not chunk" in said and "`probembed ingest --chunk`" in said
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps(rows[0]) + "\n")
    quiet = CliRunner().invoke(
        app, [*args[:1], str(short), "--out", str(tmp_path / "o2"), *args[4:]]
    )
    assert quiet.exit_code == 0 and "longer than" not in quiet.output
