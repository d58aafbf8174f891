"""Collections on S3-compatible object storage: moto's server on loopback, compared with disk.

moto's server (`ThreadedMotoServer`, the dev extra) runs in this process on a free port of
127.0.0.1, started and stopped by the module. Buckets are made with pyarrow, the client the
store itself uses.
"""

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from datetime import timedelta
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from service_support import Server, serve_on_a_held_port
from test_backup import failing_at, two_collections
from test_erase import ERASED, MARKER, ROWS, every_row, files_holding, item_id, record_of, searched
from test_store_upkeep import small_writes, spanning, text_of
from typer.testing import CliRunner

from probembed.cache import EmbeddingCache
from probembed.interfaces.cli import app
from probembed.pipeline import Pipeline
from probembed.store import (
    Database,
    PipelineMismatchError,
    Record,
    StorageFullError,
    StoreError,
    WriteConflictError,
    ingest,
)

#: moto accepts any credentials; these are what the client signs with.
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
#: Two reads of the same stored float32 rows scored by the same float64 code: equal up to
#: the summation order numpy's SIMD kernels pick per array alignment (a few ulps of 1.0).
SAME = 1e-12


def _free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def moto_server():
    """moto's S3 on 127.0.0.1 for the duration; yields its endpoint URL."""
    server_module = pytest.importorskip("moto.server", reason="needs moto[server] (dev extra)")
    port = _free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        _wait_for(f"http://127.0.0.1:{port}/moto-api/")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _wait_for(url: str) -> None:
    """Return once the server answers; fail if it takes over a minute."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2).close()
            return
        time.sleep(0.1)
    raise RuntimeError(f"moto's server did not answer at {url}")


@pytest.fixture(scope="module")
def endpoint():
    """The S3 endpoint of a moto server this module starts and stops."""
    with moto_server() as url:
        yield url


def new_bucket(endpoint: str) -> str:
    """A new empty bucket on the server at `endpoint`; its name."""
    name = f"test-{secrets.token_hex(4)}"
    fs = pafs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        allow_bucket_creation=True,
    )
    fs.create_dir(name)
    return name


@pytest.fixture
def bucket(endpoint) -> str:
    """A new empty bucket per test."""
    return new_bucket(endpoint)


@pytest.fixture
def options(endpoint) -> dict[str, str]:
    """LanceDB storage options for the moto server."""
    return {
        **CREDENTIALS,
        "aws_endpoint": endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


def s3_files(endpoint: str) -> pafs.S3FileSystem:
    """The moto server's objects as pyarrow reaches them."""
    return pafs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
    )


def object_keys(endpoint: str, bucket: str) -> list[str]:
    """Every object key in a bucket, listed straight from the server (no directory guessing)."""
    fs = s3_files(endpoint)
    infos = fs.get_file_info(pafs.FileSelector(bucket, recursive=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File)


def records(texts):
    """Records with ids s0, s1, ... and an integer metadata field."""
    return [Record(f"s{i}", t, {"n": i}) for i, t in enumerate(texts)]


QUERIES = ["A man is playing a guitar.", "A woman is slicing an onion.", "Stocks fell."]


def assert_same_hits(got, want):
    """The same hits with the same stored values and the same scores."""
    for g, w in zip(got, want, strict=True):
        assert [h["id"] for h in g["hits"]] == [h["id"] for h in w["hits"]]
        for gh, wh in zip(g["hits"], w["hits"], strict=True):
            assert (gh["text"], gh["metadata"], gh["weights"]) == (
                wh["text"],
                wh["metadata"],
                wh["weights"],
            )
            assert (gh["score"], gh["std"]) == pytest.approx((wh["score"], wh["std"]), rel=SAME)


def test_s3_collection_equals_local_through_ingest_search_delete_and_reopen(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    uri = f"s3://{bucket}/db"
    items = records(sentences[:400])
    remote = Database(uri, create=True, storage_options=options).collection("c")
    local = Database(tmp_path / "local", create=True).collection("c")
    assert ingest(items, remote, hash_pipeline, batch_size=128).added == 400
    ingest(items, local, hash_pipeline, batch_size=128)
    assert_same_hits(remote.search(QUERIES, k=10), local.search(QUERIES, k=10))
    assert remote.agreement() is not None
    assert remote.agreement().tolist() == local.agreement().tolist()
    gone = [f"s{i}" for i in range(0, 400, 7)]
    assert remote.delete(gone) == local.delete(gone) == len(gone)
    # another machine: a new Database object and an empty local cache, no pipeline given
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "elsewhere"))
    reopened = Database(uri, storage_options=options)
    assert reopened.collections() == ["c"]
    again = reopened.open("c")
    assert again.count() == local.count() == 400 - len(gone)
    assert again.ids() == local.ids()
    assert again.derived_dir.is_relative_to(tmp_path / "elsewhere")
    assert_same_hits(again.search(QUERIES, k=10), local.search(QUERIES, k=10))
    assert_same_hits(
        again.search(QUERIES, k=5, where="n > 100"), local.search(QUERIES, k=5, where="n > 100")
    )
    assert again.stats().count == local.stats().count
    reopened.drop("c")
    assert reopened.collections() == []


def test_standard_environment_variables_configure_the_store(
    monkeypatch, endpoint, bucket, hash_pipeline, sentences
):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    collection = Database(f"s3://{bucket}/db", create=True).collection("c")
    ingest(records(sentences[:50]), collection, hash_pipeline)
    assert Database(f"s3://{bucket}/db").open("c").search("A man plays.", k=3)["hits"]


def test_probing_writability_leaves_only_the_database_marker(endpoint, bucket, options):
    database = Database(f"s3://{bucket}/db", create=True, storage_options=options)
    assert database.writable
    assert object_keys(endpoint, bucket) == [f"{bucket}/db/.probembed/database.json"]


def test_clear_errors_for_a_missing_bucket_and_misplaced_options(tmp_path, options):
    with pytest.raises(StoreError, match="bucket 'no-such-bucket' does not exist"):
        Database("s3://no-such-bucket/db", storage_options=options)
    with pytest.raises(StoreError, match="apply to object storage"):
        Database(tmp_path / "db", create=True, storage_options=options)


def test_a_misspelt_storage_option_is_named_with_the_key_it_is_close_to(bucket, options):
    """LanceDB ignores a key it does not know: a misspelt region or key fell back to the
    environment's in silence; `s3_endpoint` was told Azure's `msi_endpoint`, and a key near
    none was not told at all. Known keys, and lance's own, pass without a word."""
    uri = f"s3://{bucket}/db"
    with pytest.warns(UserWarning, match=r"'aws_regoin' is not a key .* did you mean 'aws_region'"):
        Database(uri, create=True, storage_options={**options, "aws_regoin": "us-east-1"})
    with pytest.warns(UserWarning, match=r"'s3_endpoint' is not a key .* mean 'aws_endpoint'"):
        Database(uri, create=True, storage_options={**options, "s3_endpoint": "http://x"})
    with pytest.warns(UserWarning, match=r"'zzz' is not a key .* include aws_endpoint, "):
        Database(uri, create=True, storage_options={**options, "zzz": "1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # object_store's short aliases are keys too (they were taken for misspellings)
        aliases = {"virtual_hosted_style_request": "false", "default_region": "us-east-1"}
        Database(uri, create=True, storage_options={**options, **aliases, "lance_x": "1"})


@pytest.mark.parametrize("prefix", ["team#1", "q?z", "pct%41", "./db", "db/../x"])
def test_a_prefix_lancedb_would_read_as_a_url_is_refused(bucket, options, prefix):
    """With `#` every collection wrote one table (LanceDB drops the fragment) while
    probembed's own files went under the literal prefix: collections() was [] and one
    collection held the rows of both; `.`/`..` wrote where a reopen could not find it."""
    with pytest.raises(StoreError, match="LanceDB would read it as a URL"):
        Database(f"s3://{bucket}/{prefix}", create=True, storage_options=options)


def test_another_machine_writing_a_collection_searches_with_its_kept_settings(
    tmp_path, bucket, options, hash_pipeline, sentences, monkeypatch
):
    """A second machine (no mirror yet) ingesting with a pipeline of the same models but
    another score searched with its own score, where a fresh handle used the kept copy's.
    It compares with the kept copy (fetched first) and is refused for the other score; its
    own pipeline left out, it writes and searches with the copy's; a replaced copy is
    published, so a third machine searches with the replacing pipeline's score, and so does
    the first from its next search (it kept the score it had loaded)."""
    from dataclasses import replace

    from probembed.pipeline import Pipeline

    score = replace(hash_pipeline.score, name="dot")
    dot = Pipeline(hash_pipeline.members, hash_pipeline.fusion, score, "hash", cache=False)
    assert hash_pipeline.score.name != "dot" and dot.fingerprint == hash_pipeline.fingerprint
    uri = f"s3://{bucket}/db"
    records = [Record(f"s{i}", t) for i, t in enumerate(sentences[:60])]
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-1"))
    first = Database(uri, create=True, storage_options=options).collection("c")
    ingest(records[:30], first, dot)
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-2"))
    second = Database(uri, storage_options=options).collection("c")
    with pytest.raises(PipelineMismatchError, match="score dot beta 1 -> uec beta 1$|score dot"):
        ingest(records[30:], second, hash_pipeline)
    assert second.count() == 30
    ingest(records[30:], second)
    assert second.count() == 60 and second.load_pipeline().score.name == "dot"
    assert second.record_pipeline(hash_pipeline, replace=True) == ["score dot beta 1 -> uec beta 1"]
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-3"))
    third = Database(uri, storage_options=options).collection("c")
    assert third.load_pipeline().score.name == "uec"
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-1"))
    assert first.search("a man", k=2)["hits"]  # held open since its ingest: takes the new copy
    assert first.load_pipeline().score.name == "uec"


def test_reading_a_prefix_that_holds_nothing_is_no_database(endpoint, bucket, options):
    """A mistyped prefix is refused as a missing local directory is, not read as empty; one
    made (create=True) and left empty is a database (it wrote nothing, and was refused when
    next opened to read); an object in the prefix's place is none (`--db s3://b/docs.jsonl`
    was served as an empty database)."""
    Database(f"s3://{bucket}/db", create=True, storage_options=options)
    with pytest.raises(StoreError, match="nothing is stored under that prefix"):
        Database(f"s3://{bucket}/dbtypo", storage_options=options)
    assert Database(f"s3://{bucket}/db", storage_options=options).collections() == []
    with s3_files(endpoint).open_output_stream(f"{bucket}/docs.jsonl") as stream:
        stream.write(b'{"_id": "d0", "text": "x"}\n')
    for create in (False, True):
        with pytest.raises(StoreError, match="docs.jsonl: it is an object; a database is a"):
            Database(f"s3://{bucket}/docs.jsonl", create=create, storage_options=options)


def test_cli_on_s3_gives_what_it_gives_on_disk(tmp_path, bucket, options, hash_pipeline, sentences):
    source = tmp_path / "docs.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "text": t}) for i, t in enumerate(sentences[:200])]
    source.write_text("\n".join(lines) + "\n")
    pipeline_dir = str(hash_pipeline.save(tmp_path / "pipeline"))
    flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    outputs = []
    places = [([f"s3://{bucket}/db", *flags], f"s3://{bucket}/copy")]
    places.append(([str(tmp_path / "local")], str(tmp_path / "copy")))
    for db, copy in places:
        run = lambda *args, db=db: CliRunner().invoke(app, [*args, "--db", *db])  # noqa: E731
        ingested = run("ingest", str(source), "--pipeline", pipeline_dir)
        assert ingested.exit_code == 0, ingested.output
        assert run("delete", "d1", "d2").exit_code == 0
        whole = run("delete", "--doc", "d3")  # documents, not chunks: refused, nothing deleted
        said = " ".join(whole.output.split())
        assert whole.exit_code == 2 and "holds no chunked documents" in said
        listed = json.loads(run("collections", "--json").stdout)
        found = run("search", *QUERIES, "--json")
        assert found.exit_code == 0, found.output
        outputs.append(([(c["name"], c["count"]) for c in listed], json.loads(found.stdout)))
        assert run("delete", "--where", "id = 'd5'").exit_code == 0
        undone = run("undo", "--json")  # d5 back
        assert undone.exit_code == 0 and json.loads(undone.stdout)["restored"] == ["d5"]
        assert run("compact", "--all", "--keep", "0").exit_code == 0
        assert "has no tags" in run("pins").stderr
        assert run("backup", copy).exit_code == 0
        copied = CliRunner().invoke(app, ["collections", "--json", "--db", copy, *db[1:]])
        assert [(c["name"], c["count"]) for c in json.loads(copied.stdout)] == [("default", 198)]
        assert run("drop", "default", "--yes").exit_code == 0
        assert json.loads(run("collections", "--json").stdout) == []
    (remote_list, remote_hits), (local_list, local_hits) = outputs
    assert remote_list == local_list == [("default", 198)]
    assert_same_hits(remote_hits, local_hits)
    bad = CliRunner().invoke(
        app, ["collections", "--db", f"s3://{bucket}/db", "--storage-option", "x"]
    )
    assert bad.exit_code != 0 and "KEY=VALUE" in bad.output


#: A query the server encodes in its own process and batch: float32 encoders are not
#: batch-invariant (test_store_front_door.REENCODED), and a score moves with its query.
REENCODED = 1e-6
DOCS = [
    {"id": "d1", "text": "The cat sat on the mat near the door.", "metadata": {"year": 2001}},
    {"id": "d2", "text": "Stock markets fell sharply on Monday.", "metadata": {"year": 2015}},
    {"id": "d3", "text": "A recipe for bread needs flour and water.", "metadata": {"year": 2020}},
]


def test_the_service_serves_a_collection_on_s3(tmp_path, bucket, options, pydoc_pipeline_dir):
    uri = f"s3://{bucket}/db"
    flags = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    query = {"query": DOCS[0]["text"], "k": 2}
    with (
        Server(uri, pydoc_pipeline_dir, *flags, log=tmp_path / "server.log") as server,
        server.client() as http,
    ):
        assert http.post("/v1/collections", json={"name": "life"}).status_code == 201
        assert http.post("/v1/collections/life/documents", json={"documents": DOCS}).is_success
        assert http.post("/v1/collections/life/delete", json={"ids": ["d2"]}).is_success
        served = http.post("/v1/collections/life/search", json=query).json()["results"]
        listed = http.get("/v1/collections").json()
    assert "life" in json.dumps(listed)
    reopened = Database(uri, storage_options=options).open("life")
    assert reopened.ids() == {"d1", "d3"}
    want = reopened.search(DOCS[0]["text"], k=2)
    (got,) = served
    assert [h["id"] for h in got["hits"]] == [h["id"] for h in want["hits"]] == ["d1", "d3"]
    for g, w in zip(got["hits"], want["hits"], strict=True):
        assert (g["text"], g["metadata"]) == (w["text"], w["metadata"])
        assert (g["score"], g["std"]) == pytest.approx((w["score"], w["std"]), rel=REENCODED)


def test_serve_refuses_an_empty_prefix_unless_asked_to_create_it(
    tmp_path, endpoint, bucket, options, pydoc_pipeline_dir
):
    """A prefix with nothing under it is no database (a typo and a new one look alike on
    object storage): `serve` refuses it before the port or a model is taken, exit 2, naming
    the URI whole (the operator typed it; only clients see it hidden) and --create-db, and no
    credential; nothing is written there. --create-db makes and serves it, and the database
    it holds then is taken without the flag: `serve` goes on past it to the port, which the
    test holds, so the refusal it met before (c342822) is told apart without a second load
    of the models."""
    secret = secrets.token_hex(8)  # moto takes any key: one no message can hold by chance
    keyed = {**options, "aws_secret_access_key": secret}
    flags = [arg for k, v in keyed.items() for arg in ("--storage-option", f"{k}={v}")]
    uri = f"s3://{bucket}/served"
    command = [sys.executable, "-m", "probembed", "serve", "--db", uri, *flags]
    done = subprocess.run(
        [*command, "--pipeline", str(pydoc_pipeline_dir), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    told = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    said = f"no database at {uri}: nothing is stored under that prefix (--create-db makes one)"
    assert said in told, done.stderr
    assert secret not in told and "<db>" not in told and "<bucket>" not in told, done.stderr
    assert "Traceback" not in told and "listening" not in told, done.stderr
    assert object_keys(endpoint, bucket) == []
    with (
        Server(uri, pydoc_pipeline_dir, *flags, log=tmp_path / "made.log") as made,
        made.client() as http,
    ):
        assert http.get("/v1/collections").json()["data"] == []
    # made and left empty, it is still a database (its marker object): taken without the flag
    again, port = serve_on_a_held_port([*command, "--pipeline", str(pydoc_pipeline_dir)])
    assert f"cannot listen on 127.0.0.1:{port}" in " ".join(again.stderr.split()), again.stderr
    assert again.returncode != 0 and "no database" not in again.stderr, again.stderr
    assert Database(uri, storage_options=keyed).collections() == []


def test_an_upsert_on_s3_writes_only_what_changed(bucket, options, hash_pipeline, sentences):
    """The stored texts and metadata are read back from the object store, batch by batch."""
    remote = Database(f"s3://{bucket}/db", create=True, storage_options=options).collection("c")
    items = records(sentences[:1500])  # more than FILTERED_IDS: the whole table is read
    ingest(items, remote, hash_pipeline, batch_size=512, upsert=True)
    version = remote.version
    items[7] = Record("s7", "an edited text", {"n": 7})
    items[9] = Record("s9", items[9].text, {"n": -9})
    again = ingest(items, remote, hash_pipeline, upsert=True)
    assert (again.added, again.updated, again.unchanged) == (0, 2, 1498)
    assert remote.version == version + 1  # one commit, of the two changed rows
    rows = remote.rows(["s7", "s9"], ("text", "n"))
    assert (rows["s7"]["text"], rows["s9"]["n"]) == ("an edited text", -9)


def test_a_sync_on_s3_removes_in_the_step_of_its_write(bucket, options, hash_pipeline):
    """On object storage a write is a keyed merge (`shared_writes`): a sync's removal is the
    commit after it, and the collection holds exactly the input."""
    remote = Database(f"s3://{bucket}/db", create=True, storage_options=options).collection("c")
    items = records([f"text number {i}" for i in range(6)])
    ingest(items, remote, hash_pipeline, sync=True)
    version = remote.version
    kept = [Record("s0", "an edited text", {"n": 0}), *items[1:4], Record("s9", "new", {})]
    report = ingest(kept, remote, hash_pipeline, sync=True)
    assert (report.added, report.updated, report.removed) == (1, 1, 2)
    assert remote.version == version + 2  # the merge, then the removal
    rows = remote.rows(sorted(remote.ids()))
    assert {i: r["text"] for i, r in rows.items()} == {r.id: r.text for r in kept}


def test_compacting_on_s3_prunes_old_versions_and_keeps_every_item(
    endpoint, bucket, options, hash_pipeline
):
    """Upkeep on object storage: the prune (LanceDB's optimize on a table opened with the
    database's storage options) deletes the old versions' objects there, and every item is
    still found by its own text from a handle opened afterwards."""
    uri = f"s3://{bucket}/db"
    collection = Database(uri, create=True, storage_options=options).collection("c")
    ids = small_writes(collection, hash_pipeline, 6)
    start = collection.version - 1
    spanning(collection, hash_pipeline, ids, after=start)  # versions <= start replaced 2 s ago
    before = set(object_keys(endpoint, bucket))

    done = collection.compact(timedelta(0))

    assert done.versions_removed >= start and done.bytes_freed > 0
    gone = before - set(object_keys(endpoint, bucket))
    manifests = sum("/_versions/" in key for key in gone)
    assert manifests == done.versions_removed - 1  # and the compaction's own reservation
    reopened = Database(uri, storage_options=options).open("c")
    assert min(v["version"] for v in reopened._require().list_versions()) > start
    assert reopened.count() == len(ids) and reopened.ids() == set(ids)
    for item in ids:
        text = text_of(int(item.split("-")[1]))
        hit = reopened.search(text, k=1)["hits"][0]
        assert (hit["id"], hit["text"]) == (item, text)


def test_a_backup_copies_s3_into_s3_and_a_folder_into_s3(
    tmp_path, endpoint, bucket, options, hash_pipeline, sentences
):
    """`Database.backup` reads and writes object storage as a folder: a collection on S3 into
    another prefix (with the source's storage options) and into a folder, and a folder back
    onto S3; each copy holds the same rows and answers the same searches."""
    uri = f"s3://{bucket}/db"
    source = Database(uri, create=True, storage_options=options)
    ingest(records(sentences[:120]), source.collection("c"), hash_pipeline, batch_size=40)
    source.backup(f"s3://{bucket}/copy")
    source.backup(tmp_path / "folder")
    Database(tmp_path / "folder").backup(f"s3://{bucket}/back", storage_options=options)

    want = source.table("c").to_arrow()
    for where in (f"s3://{bucket}/copy", tmp_path / "folder", f"s3://{bucket}/back"):
        copy = Database(where, storage_options=options if isinstance(where, str) else None)
        assert copy.table("c").to_arrow().equals(want), where
        assert copy.open("c").search(QUERIES, k=5) == source.open("c").search(QUERIES, k=5)
    assert not any("/_refs/" in key for key in object_keys(endpoint, bucket))  # pins removed
    with pytest.raises(StoreError, match=f"cannot back up into s3://{bucket}/copy: something"):
        source.backup(f"s3://{bucket}/copy")


def test_a_backup_onto_s3_that_fails_part_way_leaves_the_prefix_empty(
    tmp_path, endpoint, bucket, options, pydoc_pipeline, monkeypatch
):
    db = two_collections(tmp_path / "db", pydoc_pipeline)
    monkeypatch.setattr(Database, "create_table", failing_at("d"))
    with pytest.raises(StorageFullError):
        db.backup(f"s3://{bucket}/to", storage_options=options)
    assert object_keys(endpoint, bucket) == []
    monkeypatch.undo()
    assert len(db.backup(f"s3://{bucket}/to", storage_options=options)) == 2


def objects_holding(endpoint: str, bucket: str, needle: bytes) -> list[str]:
    """Every object of the bucket whose bytes hold `needle`: an auditor's grep of the store."""
    fs = s3_files(endpoint)
    found = []
    for key in object_keys(endpoint, bucket):
        with fs.open_input_stream(key) as stream:
            if needle in stream.read():
                found.append(key)
    return found


def test_an_erasure_on_s3_leaves_no_byte_of_the_rows_in_the_bucket_or_the_local_mirror(
    tmp_path, monkeypatch, endpoint, bucket, options, pydoc_pipeline_dir
):
    """On object storage the table's files are objects, its graphs in this machine's mirror
    (under the cache folder), and its writes merges: erased all the same."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(cache))
    pipeline = Pipeline.load(pydoc_pipeline_dir, cache=EmbeddingCache(cache))
    collection = Database(f"s3://{bucket}/db", create=True, storage_options=options).collection("c")
    ingest([record_of(i) for i in range(ROWS)], collection, pipeline)
    ingest([record_of(i) for i in range(ROWS, 2 * ROWS)], collection, pipeline)
    collection.compact()
    searched(collection)
    erased = [item_id(i) for i in ERASED]
    everything = every_row(collection)
    kept = everything.filter(pc.invert(pc.is_in(everything.column("id"), pa.array(erased))))
    assert objects_holding(endpoint, bucket, MARKER.encode())
    assert list(cache.rglob("hnsw-*.faiss"))

    done = collection.erase(erased)

    assert (done.erased, done.fragments_rewritten) == (len(ERASED), 1)
    assert objects_holding(endpoint, bucket, MARKER.encode()) == []
    assert files_holding(cache, MARKER.encode()) == []
    assert not list(cache.rglob("*.faiss*"))
    reopened = Database(f"s3://{bucket}/db", storage_options=options).open("c")
    assert every_row(reopened).equals(kept)
    assert len(reopened._require().list_versions()) == 1


def test_the_service_answers_503_while_its_storage_is_down(tmp_path, pydoc_pipeline_dir):
    """Object storage that stops answering under a running server gave every route a 500
    ("internal error") after lance's retries, and /readyz stayed "ready": a 503 saying the
    storage did not answer, with Retry-After, lets a client retry and a balancer route away.
    Neither the answers nor /readyz name where the database lives: lance's words held the
    endpoint and the prefix URL-encoded (`prefix=pe-prod%2Fs3docs`), past the masking of
    the URI; the log keeps them. The operator's `client_max_retries=0` (object_store's
    retries of each call, with back-off) leaves each failed request to lance's own tries."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(moto_server())
        name = new_bucket(url)
        options = {**CREDENTIALS, "aws_endpoint": url, "aws_region": "us-east-1"}
        flags = [
            a
            for k, v in {**options, "allow_http": "true", "client_max_retries": "0"}.items()
            for a in ("--storage-option", f"{k}={v}")
        ]
        uri, log = f"s3://{name}/pe-prod/s3docs", tmp_path / "server.log"
        server = Server(uri, pydoc_pipeline_dir, *flags, log=log)
        host = url.removeprefix("http://")
        secret = [url, host, host.replace(":", "%3A"), name, "pe-prod", "s3docs"]
        with server, server.client() as http:
            assert http.post("/v1/collections", json={"name": "life"}).status_code == 201
            assert http.post("/v1/collections/life/documents", json={"documents": DOCS}).is_success
            stack.close()  # moto stops; the server goes on
            for method, path, body in (
                ("POST", "/v1/collections/life/search", {"query": "cells", "k": 2}),
                ("GET", "/v1/collections", None),
                ("POST", "/v1/collections/life/documents", {"documents": DOCS[:1]}),
            ):
                answer = http.request(method, path, json=body, timeout=120)
                assert answer.status_code == 503, (path, answer.text)
                assert answer.headers["retry-after"] == "5"
                assert "the database's storage failed: " in answer.json()["detail"]
                assert not [s for s in secret if s in answer.text], answer.text
            ready = http.get("/readyz")
            assert ready.status_code == 503 and ready.json()["status"] == "storage", ready.text
            assert not [s for s in secret if s in ready.text], ready.text
            assert "<storage>" in ready.text and "<db>" in ready.text
            assert http.get("/healthz").status_code == 200  # alive: no restart mends storage
        told = log.read_text()
        assert "storage failed" in told and "Exception in ASGI application" not in told
        warned = [line for line in told.splitlines() if "storage failed: " in line]
        assert warned and all(url in line and "pe-prod%2Fs3docs" in line for line in warned)


@contextlib.contextmanager
def moto_process(unchecked: int | None = None):
    """moto's S3 in a process of its own (so it can be paused); yields its endpoint and pid.
    `unchecked`: the calls it answers before it checks credentials against its IAM (none
    known: every later call is refused), else it never checks them."""
    pytest.importorskip("moto.server", reason="needs moto[server] (dev extra)")
    port = _free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    env = os.environ | (
        {} if unchecked is None else {"INITIAL_NO_AUTH_ACTION_COUNT": str(unchecked)}
    )
    moto = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _wait_for(f"http://127.0.0.1:{port}/moto-api/")
        yield f"http://127.0.0.1:{port}", moto.pid
    finally:
        os.kill(moto.pid, signal.SIGCONT)  # a paused process does not act on SIGTERM
        moto.terminate()
        moto.wait(30)


def test_a_hung_store_is_a_503_naming_the_timeout_not_a_request_held_for_minutes(
    tmp_path, pydoc_pipeline_dir
):
    """moto paused (SIGSTOP) accepts connections and never answers: every request waited for
    minutes (object_store's 30 s per try, four tries, lance's six tries of a listing), past
    its client's timeout, and a write whose client had given up committed once the store
    came back. With storage timeouts bounding each call the write is a 503 naming the
    timeout, /readyz reports the storage, and nothing of the write is stored once the store
    answers again. The operator's own bounds (`--storage-option`, which `serve` keeps) are
    set short here: the service's defaults, added where none is given (checked with the
    spellings an operator may use, `test_service.py`), take the same path in about a
    minute."""
    with moto_process() as (url, pid):
        name = new_bucket(url)
        options = {**CREDENTIALS, "aws_endpoint": url, "aws_region": "us-east-1"}
        bounds = {"timeout": "1s", "client_retry_timeout": "1"}  # each call, and its retries
        flags = [
            a
            for k, v in {**options, "allow_http": "true", **bounds}.items()
            for a in ("--storage-option", f"{k}={v}")
        ]
        server = Server(f"s3://{name}/db", pydoc_pipeline_dir, *flags, log=tmp_path / "s.log")
        with server, server.client() as http:
            assert http.post("/v1/collections", json={"name": "life"}).status_code == 201
            assert http.post("/v1/collections/life/documents", json={"documents": DOCS}).is_success
            os.kill(pid, signal.SIGSTOP)
            try:
                late = {"documents": [{"id": "late", "text": "written while the store hung"}]}
                # generous: answered at all, not how fast
                answer = http.post("/v1/collections/life/documents", json=late, timeout=240)
                ready = http.get("/readyz")
            finally:
                os.kill(pid, signal.SIGCONT)
            assert answer.status_code == 503, answer.text
            assert "storage timeout of 1s (storage option timeout)" in answer.json()["detail"]
            assert ready.status_code == 503 and ready.json()["status"] == "storage", ready.text
            assert "storage timeout" in ready.json()["error"]
        reopened = Database(
            f"s3://{name}/db", storage_options={**options, "allow_http": "true"}
        ).open("life")
        assert reopened.ids() == {d["id"] for d in DOCS}


class LanceTraffic:
    """What `lance_proxy` does to LanceDB's calls from when one of these is set: `frozen`
    holds them unanswered (a store that accepts connections and never answers), `cut`
    closes their connections (a store gone)."""

    def __init__(self) -> None:
        self.frozen, self.cut, self.stop = threading.Event(), threading.Event(), threading.Event()

    def pump(self, source: socket.socket, sink: socket.socket, lance: bool | None) -> None:
        """Copy one direction of a connection (`lance`: LanceDB's, None: known by its first
        request's user agent, object_store's), freezing or cutting LanceDB's as set."""
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                lance = b"object_store/" in data.lower() if lance is None else lance
                while lance and self.frozen.is_set() and not self.stop.is_set():
                    self.stop.wait(0.2)
                if lance and self.cut.is_set():
                    break
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def lance_proxy(upstream: str):
    """A TCP proxy on 127.0.0.1 in front of `upstream` (an http://HOST:PORT endpoint) that
    passes every call until told (`LanceTraffic`) to freeze or cut LanceDB's, while
    pyarrow's calls (probembed's own files) still pass: the store fails under LanceDB
    after the database was found. Yields (its endpoint, its LanceTraffic)."""
    host, port = upstream.removeprefix("http://").split(":")
    traffic = LanceTraffic()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    held: list[socket.socket] = []

    def accept() -> None:
        """Connect each client to the upstream while the test runs."""
        while not traffic.stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection((host, int(port)))
            held.extend((client, server))
            threading.Thread(target=traffic.pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=traffic.pump, args=(server, client, False), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", traffic
    finally:
        traffic.stop.set()
        acceptor.join()
        for connection in [listener, *held]:
            connection.close()


def proxied_ingest(source, uri: str, proxied: str, **settings: str) -> list[str]:
    """The command line of a CLI ingest of `source` into `uri` through the proxy `proxied`,
    with these storage options (`settings`) besides those reaching it."""
    options = {**CREDENTIALS, "aws_endpoint": proxied, "aws_region": "us-east-1"}
    flags = [
        arg
        for k, v in {**options, "allow_http": "true", **settings}.items()
        for arg in ("--storage-option", f"{k}={v}")
    ]
    return [sys.executable, "-m", "probembed", "ingest", str(source), "--db", uri, *flags]


def test_a_cli_ingest_onto_a_store_that_freezes_ends_instead_of_hanging(
    tmp_path, endpoint, bucket, pydoc_pipeline_dir
):
    """A store that stopped answering LanceDB held a CLI ingest for ever without a line (7
    minutes and more, each call waiting 30 s a try, lance trying a listing six times): the
    storage timeouts `serve` set are now set for every database on object storage
    (`location.TIMEOUTS`), so the command ends saying the storage failed. The frozen run is
    given bounds of 1 s (`--storage-option`, as a user sets them); the shipped ones, which
    take the same path in about a minute, are checked as LanceDB is given them by
    `test_a_database_on_object_storage_gives_lancedb_the_shipped_timeouts`. The bound is
    only ever waited out on failure."""
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"id": d["id"], "text": d["text"]}) + "\n" for d in DOCS))
    with lance_proxy(endpoint) as (proxied, traffic):
        command = proxied_ingest(source, f"s3://{bucket}/db", proxied)
        # the healthy run needs no process of its own: its words after `python -m probembed`
        first = CliRunner().invoke(app, [*command[3:], "--pipeline", str(pydoc_pipeline_dir)])
        assert first.exit_code == 0, first.output
        traffic.frozen.set()
        source.write_text(json.dumps({"id": "late", "text": "written while the store hung"}))
        bounded = proxied_ingest(
            source, f"s3://{bucket}/db", proxied, timeout="1s", client_retry_timeout="1"
        )
        ended = subprocess.run(bounded, capture_output=True, text=True, timeout=240)
    assert ended.returncode == 75, ended.stderr  # docs/cli.md: the storage failed a call
    assert "the database's storage failed: " in ended.stderr, ended.stderr


def test_a_database_on_object_storage_gives_lancedb_the_shipped_timeouts(
    monkeypatch, bucket, options
):
    """What a CLI command opens (`open_database`, no timeout given in any spelling) is what
    LanceDB connects with: the user's options and the shipped `location.TIMEOUTS`, the bounds
    docs/architecture.md states, so a hung store fails a command in about a minute."""
    from probembed.interfaces.store_options import open_database
    from probembed.store.location import TIMEOUTS

    for name in ("AWS_TIMEOUT", "AWS_CONNECT_TIMEOUT", "AWS_CLIENT_RETRY_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    assert TIMEOUTS == {"timeout": "5s", "connect_timeout": "2s", "client_retry_timeout": "10"}
    flags = [f"{k}={v}" for k, v in options.items()]
    database = open_database(f"s3://{bucket}/db", flags, create=True)
    assert database._conn.storage_options == {**options, **TIMEOUTS}
    database.reconnect()
    assert database._conn.storage_options == {**options, **TIMEOUTS}


def test_storage_lost_during_an_ingest_exits_75_in_the_storages_words_saying_what_is_kept(
    tmp_path, endpoint, bucket, pydoc_pipeline_dir
):
    """Object storage gone part-way through a CLI ingest ended it with exit 1 and LanceDB's
    raw `RuntimeError: lance error: LanceError(IO): ...` with its Rust source location, not
    docs/cli.md's exit 75 and without saying the committed batches are kept: now the
    storage's words in one line, as the service says them, exit 75, and how many batches
    are stored (all but the one it was at, which may be too)."""
    source, batch = tmp_path / "docs.jsonl", 20
    lines = [json.dumps({"id": f"d{i}", "text": f"record {i} of the corpus"}) for i in range(600)]
    source.write_text("\n".join(lines) + "\n")
    versions = f"{bucket}/db/default.lance/_versions"
    with lance_proxy(endpoint) as (proxied, traffic):
        command = proxied_ingest(source, f"s3://{bucket}/db", proxied)
        command += ["--pipeline", str(pydoc_pipeline_dir), "--batch-size", str(batch)]
        run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        while run.poll() is None and len(_listed(endpoint, versions)) < 4:
            time.sleep(0.05)
        traffic.cut.set()
        _, said = run.communicate(timeout=240)
    assert run.returncode == 75, said
    line = said.strip().splitlines()
    assert "the database's storage failed: " in said and "LanceError" not in said, said
    assert ".rs:" not in said, said  # no Rust source location
    kept = re.search(r"(\d+) committed batch\(es\) are kept, and the one it was at may be", said)
    assert kept is not None, line
    stored = Database(f"s3://{bucket}/db", storage_options=_direct(endpoint)).open().count()
    assert stored % batch == 0 and stored // batch - int(kept.group(1)) in (0, 1), said


def _listed(endpoint: str, prefix: str) -> list[pafs.FileInfo]:
    """The objects under a prefix, listed straight from the server (none: [])."""
    selector = pafs.FileSelector(prefix, allow_not_found=True)
    return s3_files(endpoint).get_file_info(selector)


def _direct(endpoint: str) -> dict[str, str]:
    """Storage options reaching the moto server at `endpoint` directly."""
    return {
        **CREDENTIALS,
        "aws_endpoint": endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


def test_credentials_the_store_refuses_are_said_so_with_exit_2_not_retry_later():
    """A wrong key was "cannot reach" with exit 75 (retry later) though the store had said
    ACCESS_DENIED: retrying gets nowhere, so it is exit 2 saying the credentials were refused
    and which settings carry them, as a command line sets them."""
    with moto_process(unchecked=0) as (url, _):
        name = "any-bucket"  # its IAM knows no key: the first call is refused
        options = {**CREDENTIALS, "aws_endpoint": url, "aws_region": "us-east-1"}
        flags = [
            arg
            for k, v in {**options, "allow_http": "true"}.items()
            for arg in ("--storage-option", f"{k}={v}")
        ]
        done = CliRunner().invoke(app, ["collections", "--db", f"s3://{name}/db", *flags])
    said = " ".join(done.output.split())
    assert done.exit_code == 2, said
    assert "the object storage refused the credentials for s3://" in said, said
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in said, said
    assert "or --storage-option aws_access_key_id and aws_secret_access_key" in said, said
    assert "cannot reach" not in said, said


def test_an_endpoint_lancedb_cannot_use_is_refused_before_any_call_saying_the_fix(monkeypatch):
    """`aws_endpoint=HOST:PORT` (no scheme) made LanceDB panic (a Rust backtrace, RustPanic,
    exit 1), and AWS_ENDPOINT_URL=http://... without AWS_ALLOW_HTTP a 700-character Rust dump
    ending `BadScheme`: both are refused at once, naming the setting and the fix. Nothing
    listens at the port: no call is made."""
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT", raising=False)
    port = _free_port()
    bare = ["--storage-option", f"aws_endpoint=127.0.0.1:{port}"]
    no_scheme = CliRunner().invoke(
        app, ["collections", "--db", "s3://b/db", *bare, "--storage-option", "allow_http=true"]
    )
    said = " ".join(no_scheme.output.split())
    assert no_scheme.exit_code == 2, said
    assert f"S3 endpoint '127.0.0.1:{port}' (storage option aws_endpoint) has no scheme" in said
    assert f"http://127.0.0.1:{port}" in said and "Panic" not in said, said
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    plain = CliRunner().invoke(app, ["collections", "--db", "s3://b/db"])
    said = " ".join(plain.output.split())
    assert plain.exit_code == 2, said
    assert "(AWS_ENDPOINT_URL) is plain HTTP" in said and "BadScheme" not in said, said
    assert "--storage-option allow_http=true" in said and "AWS_ALLOW_HTTP=true" in said, said


def test_a_failures_command_line_shows_the_endpoint_and_hides_the_keys():
    """Every --storage-option value was hidden (`aws_endpoint=***`), the endpoint too, which
    is no secret and often the mistake: now only what may hold a credential is."""
    from probembed.interfaces.cli import _redacted

    words = ["--storage-option", "aws_endpoint=http://h:1", "--storage-option=region=eu"]
    words += ["--storage-option", "aws_secret_access_key=S3CRET", "--storage-option", "odd=x"]
    assert _redacted(words) == [
        "--storage-option", "aws_endpoint=http://h:1", "--storage-option=region=eu",
        "--storage-option", "aws_secret_access_key=***", "--storage-option", "odd=***",
    ]  # fmt: skip


def test_an_endpoint_with_credentials_is_never_quoted_with_them_and_aws_allow_http_counts(
    monkeypatch,
):
    """A review: `https://KEY:SECRET@host` was printed whole by the failure's command line,
    the endpoint refusals and the storage's shortened words; and `aws_allow_http=true`, which
    object_store and LanceDB read, was refused as plain HTTP without allow_http."""
    from probembed.interfaces.cli import _redacted
    from probembed.store.errors import storage_failure
    from probembed.store.location import _check_endpoint

    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT", raising=False)
    secret = "AKIA:s3cr3t@127.0.0.1:9"
    assert _redacted(["--storage-option", f"aws_endpoint=http://{secret}"]) == [
        "--storage-option",
        "aws_endpoint=http://***@127.0.0.1:9",
    ]
    for endpoint in (secret, f"http://{secret}"):
        with pytest.raises(StoreError) as refused:
            _check_endpoint({"aws_endpoint": endpoint})
        assert "s3cr3t" not in str(refused.value) and "***@127.0.0.1:9" in str(refused.value)
    _check_endpoint({"aws_endpoint": f"http://{secret}", "aws_allow_http": "true"})
    lance = RuntimeError(f"lance error: LanceError(IO): Generic S3 error: GET http://{secret}/b")
    said = storage_failure(lance)
    assert said is not None and "s3cr3t" not in said and "http://***@127.0.0.1:9/b" in said


def _race(tmp_path, monkeypatch, uri, options, pipeline, plans, pause_in, batch_size):
    """Ingest each plan (the ids it ingests) at once, each as another machine
    (`writer_support`): the first in this process, each other one in a process of its own;
    all pause at the first call of `pause_in`, then go on together. Their (added, already
    stored) reports, in plan order."""
    import multiprocessing

    from writer_support import ingest_as_another_machine, paused_ingest, pausing_at

    pipeline_dir = str(pipeline.save(tmp_path / "pipeline"))
    context = multiprocessing.get_context("spawn")  # no LanceDB runtime forked mid-flight
    barrier = context.Barrier(len(plans), timeout=120)
    queues = [context.Queue() for _ in plans[1:]]
    writers = [
        context.Process(
            target=ingest_as_another_machine,
            args=(
                uri,
                options,
                pipeline_dir,
                str(tmp_path / f"machine-{i}"),
                items,
                batch_size,
                pause_in,
                barrier,
                queue,
            ),
        )
        for i, (items, queue) in enumerate(zip(plans[1:], queues, strict=True), start=1)
    ]
    for writer in writers:
        writer.start()
    try:
        with monkeypatch.context() as patched, pausing_at(pause_in, barrier):
            patched.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-0"))
            reports = [paused_ingest(uri, options, pipeline_dir, plans[0], batch_size)]
        reports += [queue.get(timeout=300) for queue in queues]
    finally:
        for writer in writers:
            writer.join(timeout=60)
            if writer.is_alive():
                writer.kill()
    failed = [r for r in reports if isinstance(r, str)]
    assert not failed, "\n".join(failed)
    return reports


def _stored_once(collection, wanted):
    """Every wanted id is stored, and none twice (a count of rows, not of distinct ids)."""
    assert collection.ids() == set(wanted)
    assert collection.count() == len(wanted)


def test_two_machines_ingesting_overlapping_ids_store_each_id_once(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """The walkthrough: two machines ingesting the same documents into one collection on S3
    left 380 rows for 300 ids, and search showed a document at ranks 1 and 2. Each machine's
    lock is its own, and both read which ids are stored before either commits (they pause
    there together): the old read-then-append stored every overlapping id twice."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:300])}
    seed = [Record(i, texts[i]) for i in list(texts)[:20]]
    ingest(seed, Database(uri, create=True, storage_options=options).collection("c"), hash_pipeline)
    first = [(i, texts[i]) for i in list(texts)[:200]]  # 20 seeded, 180 new
    second = [(i, texts[i]) for i in reversed(list(texts)[100:])]  # 100 of them the first's
    reports = _race(
        tmp_path, monkeypatch, uri, options, hash_pipeline, [first, second], "_arrow", 64
    )
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, texts)
    (added_1, stored_1), (added_2, stored_2) = reports
    assert added_1 + stored_1 == len(first) and added_2 + stored_2 == len(second)
    assert added_1 + added_2 == len(texts) - len(seed)  # an id the other stored first: stored
    hits = collection.search(texts["s150"], k=5)["hits"]
    assert hits[0]["id"] == "s150" and len({h["id"] for h in hits}) == len(hits)


def test_two_machines_creating_one_collection_at_once_lose_nothing(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """Both find no collection and both create it (they pause there together): LanceDB
    refuses the second creation, or commits it as an overwrite of the first one's table,
    whose rows were then gone. The one refused, or whose creation replaced a table, writes
    its rows into the table that was there."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:90])}
    first = [(i, texts[i]) for i in list(texts)[:60]]
    second = [(i, texts[i]) for i in list(texts)[30:]]
    reports = _race(
        tmp_path, monkeypatch, uri, options, hash_pipeline, [first, second], "_create", 100
    )
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, texts)
    assert sum(added for added, _ in reports) == len(texts)


def test_a_creation_committed_over_another_machines_table_is_undone(
    bucket, options, hash_pipeline, sentences, monkeypatch
):
    """The other outcome of that race, made certain: a creation that found no table, whose
    table another machine made before its commit, which LanceDB then commits as an
    overwrite (version 2). The table it replaced comes back, and its rows go in too."""
    from probembed.store.collection import Collection
    from probembed.store.rows import Batch, PipelineInfo

    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:80])}
    first = [Record(i, texts[i]) for i in list(texts)[:50]]
    ingest(
        first, Database(uri, create=True, storage_options=options).collection("c"), hash_pipeline
    )
    late = Database(uri, storage_options=options).collection("c")
    # its looks before the other machine's commit (whether to fit the variance basis, the
    # pipeline check, add's own): no table
    looks = iter([None, None, None])
    monkeypatch.setattr(late, "_open", lambda: next(looks, "open") and Collection._open(late))
    creations = []
    create = late.db._conn.create_table

    def overwriting(*args, **kwargs):  # what LanceDB makes of a creation that lost the race
        creations.append(args[0])
        return create(*args, **{**kwargs, "mode": "overwrite"})

    monkeypatch.setattr(late.db._conn, "create_table", overwriting)
    ids = list(texts)[30:]
    fused = hash_pipeline.encode([texts[i] for i in ids])
    batch = Batch(
        ids, [texts[i] for i in ids], [{}] * len(ids), fused, PipelineInfo.of(hash_pipeline)
    )
    assert late.add(batch, skip_stored=True) == 30  # the 20 ids both hold are the first's
    assert creations == ["c"]
    _stored_once(Database(uri, storage_options=options).open("c"), texts)


def test_an_ingest_whose_new_table_another_machine_overwrote_and_repaired_goes_on(
    bucket, options, hash_pipeline, sentences, monkeypatch
):
    """A's ingest made the table; B's creation landed over it as an overwrite and B's repair
    merged A's rows back under B's creation token. A's next commit met another token and
    stopped as if the collection had been dropped (10 of 20 written, a 404 in a service):
    a table whose history bears A's token is the same collection, and A writes on."""
    from probembed.store.collection import Collection
    from probembed.store.rows import Batch, PipelineInfo

    uri = f"s3://{bucket}/db"
    first = Database(uri, create=True, storage_options=options).collection("c")
    late = Database(uri, create=True, storage_options=options).collection("c")
    looks = iter([None, None, None])  # B's looks before its commit: no table yet
    monkeypatch.setattr(late, "_open", lambda: next(looks, "open") and Collection._open(late))
    create = late.db._conn.create_table
    monkeypatch.setattr(
        late.db._conn, "create_table", lambda *a, **kw: create(*a, **{**kw, "mode": "overwrite"})
    )
    tokens = []

    def overwritten_after_the_first_commit(_: int) -> None:
        if tokens:
            return
        tokens.append(first.created)
        texts = sentences[100:110]
        fused = hash_pipeline.encode(texts)
        ids = [f"b{i}" for i in range(10)]
        batch = Batch(ids, texts, [{}] * 10, fused, PipelineInfo.of(hash_pipeline))
        assert late.add(batch, skip_stored=True) == 10
        tokens.append(Database(uri, storage_options=options).open("c").created)

    records = [Record(f"a{i}", t) for i, t in enumerate(sentences[:20])]
    report = ingest(
        records, first, hash_pipeline, batch_size=10, on_commit=overwritten_after_the_first_commit
    )
    assert tokens[0] != tokens[1]  # the repair kept B's creation token
    assert report.added == 20
    stored = Database(uri, storage_options=options).open("c").ids()
    assert stored == {f"a{i}" for i in range(20)} | {f"b{i}" for i in range(10)}


def test_a_commit_landing_on_a_creation_that_overwrote_the_table_is_kept(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """Machine B finds no collection and creates it, but machine A's creation lands between
    B's look and B's commit, which LanceDB then commits as an overwrite of A's table (done
    here with mode="overwrite", as LanceDB's commit of it ends). A's next batch lands on the
    overwrite before B repairs it. B used to restore the version before its overwrite, which
    dropped that batch: every row of both writers must stay, each once."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:30])}
    first = [Record(i, texts[i]) for i in list(texts)[:10]]  # A's creation
    later = [Record(i, texts[i]) for i in list(texts)[10:20]]  # A's next batch
    mine = [Record(i, texts[i]) for i in list(texts)[15:]]  # B's creation, 5 of them A's too

    def machine(name: str) -> None:
        monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / name))

    machine("machine-a")
    a = Database(uri, create=True, storage_options=options).collection("c")
    machine("machine-b")
    b_db = Database(uri, create=True, storage_options=options)
    b = b_db.collection("c")
    reports = {}

    def overwriting(name, data, schema):
        machine("machine-a")
        reports["a-first"] = ingest(first, a, hash_pipeline).added
        created = b_db._conn.create_table(name, data=data, schema=schema, mode="overwrite")
        reports["a-later"] = ingest(later, a, hash_pipeline).added  # built on the overwrite
        machine("machine-b")
        return created

    monkeypatch.setattr(b_db, "create_table", overwriting)
    reports["b"] = ingest(mine, b, hash_pipeline).added
    assert reports == {"a-first": 10, "a-later": 5, "b": 15}  # A found s15-s19 stored (B's)
    machine("machine-c")
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, texts)
    rows = collection.rows(list(texts), ("text",))
    assert {i: r["text"] for i, r in rows.items()} == texts


def _overwritten_creation(tmp_path, monkeypatch, uri, options, first, pipeline, write=ingest):
    """Machine B's database, whose creation of collection "c" LanceDB commits as an overwrite
    of the one machine A makes, ingesting `first` with `pipeline` (by `write`), between B's
    look and its commit (done with mode="overwrite", as LanceDB's commit of it ends)."""
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-a"))
    a = Database(uri, create=True, storage_options=options).collection("c")
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-b"))
    b_db = Database(uri, create=True, storage_options=options)

    def overwriting(name, data, schema):
        monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-a"))  # its lock
        write(first, a, pipeline)
        monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-b"))
        return b_db._conn.create_table(name, data=data, schema=schema, mode="overwrite")

    monkeypatch.setattr(b_db, "create_table", overwriting)
    return b_db


def _restored_after_looks(monkeypatch, collection, uri, options, looks, meanwhile=None):
    """After each of `collection`'s looks at its table (those that find one) numbered in
    `looks` (0 the first), another writer commits a restore of the latest version, by its
    own connection: a commit made on the version looked at is then refused by Lance
    ("Incompatible transaction"), a real conflict. `meanwhile`, if given, commits before the
    first of those restores (rows another writer adds in that instant). Returns the restores
    made."""
    import lancedb

    other = lancedb.connect(uri, storage_options=options)
    look, seen, restores = collection._open, [], []

    def looked():
        table = look()
        if table is not None:
            seen.append(table.version)
            if len(seen) - 1 in looks:
                if meanwhile is not None and not restores:
                    meanwhile()
                theirs = other.open_table(collection.name)
                theirs.restore(theirs.version)
                restores.append(theirs.version)
        return table

    monkeypatch.setattr(collection, "_open", looked)
    return restores


def _later_batch(tmp_path, monkeypatch, uri, options, records, pipeline, reports, write=ingest):
    """Machine A's next ingest of `records` (by `write`) into collection "c", as a `meanwhile`
    of `_restored_after_looks`: it lands on the table as it is then, its report in `reports`."""

    def ingest_later():
        monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-a"))  # its lock
        a = Database(uri, storage_options=options).collection("c")
        reports.append(write(records, a, pipeline))
        monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-b"))

    return ingest_later


def test_a_creation_that_overwrote_a_table_of_other_column_types_gives_it_back(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """As above, but the two first batches give one metadata field two types (a price of 9.99
    against one of 10): LanceDB cannot change a column's type, so the first writer's rows
    cannot go back into the overwrite's table. The repair raised pyarrow's ArrowInvalid and
    left the overwrite, the first writer's 10 rows gone from the latest version; its table
    is now the one kept, and the later batch goes into it as into any table."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:30])}
    first = [Record(i, texts[i], {"price": 9.99}) for i in list(texts)[:10]]
    mine = [Record(i, texts[i], {"price": 10}) for i in list(texts)[15:]]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, hash_pipeline)
    assert ingest(mine, b_db.collection("c"), hash_pipeline).added == len(mine)
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, [r.id for r in first + mine])
    prices = {i: r["price"] for i, r in collection.rows(list(texts), ("price",)).items()}
    assert prices == {r.id: r.metadata["price"] for r in first + mine}


def test_a_commit_on_a_creation_that_overwrote_a_table_of_other_column_types_is_kept(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """As above, and machine A's next batch (no price) lands on the overwrite before the
    repair looks: giving A's table back by a restore dropped it; now what the restore
    dropped is merged back into that table (a field none of its rows holds, price, is
    no obstacle)."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:40])}
    first = [Record(i, texts[i], {"price": 9.99}) for i in list(texts)[:10]]
    mine = [Record(i, texts[i], {"price": 10}) for i in list(texts)[15:30]]
    later = [Record(i, texts[i]) for i in list(texts)[30:]]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, hash_pipeline)
    b = b_db.collection("c")
    reports = []
    landing = _later_batch(tmp_path, monkeypatch, uri, options, later, hash_pipeline, reports)
    _restored_after_looks(monkeypatch, b, uri, options, {0}, landing)
    assert ingest(mine, b, hash_pipeline).added == len(mine)
    assert [r.added for r in reports] == [len(later)]
    monkeypatch.undo()
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, [r.id for r in first + mine + later])
    prices = {i: r["price"] for i, r in collection.rows(list(texts), ("price",)).items()}
    assert prices == {r.id: r.metadata.get("price") for r in first + mine + later}


def _retyped_race(tmp_path, monkeypatch, uri, options, pipeline, texts, fields):
    """The creation race of a field typed otherwise by each first batch, machine A's next
    batch landing on the overwrite: `fields` gives A's first, B's and A's later value of
    each field. B's ingest, as a callable, and A's later reports."""
    ids = list(texts)
    first = [Record(i, texts[i], {k: v[0] for k, v in fields.items()}) for i in ids[:10]]
    mine = [Record(i, texts[i], {k: v[1] for k, v in fields.items()}) for i in ids[15:30]]
    later = [Record(i, texts[i], {k: v[2] for k, v in fields.items()}) for i in ids[30:]]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, pipeline)
    b = b_db.collection("c")
    reports = []
    landing = _later_batch(tmp_path, monkeypatch, uri, options, later, pipeline, reports)
    _restored_after_looks(monkeypatch, b, uri, options, {0}, landing)
    return partial(ingest, mine, b, pipeline), reports, first + mine + later


def test_a_batch_on_an_overwrite_whose_column_type_differs_goes_back_in_the_restored_type(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """A's first batch has price 9.99, B's creation price 10, and A's next batch, price 7,
    lands on B's int64 column (A is told 10 rows were added). The merge back into A's table
    (double) compared the columns strictly and refused: B got a 409 and A's 10 rows were
    gone. Now their columns are made again from their JSON in the restored table's types."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:40])}
    write, reports, rows = _retyped_race(
        tmp_path, monkeypatch, uri, options, hash_pipeline, texts, {"price": (9.99, 10, 7)}
    )
    assert write().added == 15
    assert [r.added for r in reports] == [10]
    monkeypatch.undo()
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, [r.id for r in rows])
    prices = {i: r["price"] for i, r in collection.rows(list(texts), ("price",)).items()}
    assert prices == {r.id: r.metadata["price"] for r in rows}


def test_a_batch_on_an_overwrite_whose_value_the_restored_column_cannot_hold_names_the_field(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """As above with a real clash: A's table stores size as a string, and A's next batch
    wrote whole numbers into B's int64 column. Not a conflict (a retry cannot help): a
    StoreError naming the field, the rows not stored and the version holding them."""
    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:40])}
    write, _, _ = _retyped_race(
        tmp_path, monkeypatch, uri, options, hash_pipeline, texts, {"size": ("L", 3, 4)}
    )
    told = r"10 rows other writers.*metadata field 'size' = 4 is a int.*version \d+ of the table"
    with pytest.raises(StoreError, match=told) as raised:
        write()
    assert not isinstance(raised.value, WriteConflictError)
    monkeypatch.undo()
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, list(texts)[:10])


def test_a_creation_that_overwrote_another_pipelines_table_gives_it_back(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, hash3_pipeline, sentences
):
    """As above, but the first creator's pipeline is another: its rows cannot share a table
    with this creation's, so its table (rows and header) is what stays, and the later
    creation is refused as any write of another pipeline is."""
    from probembed.store import PipelineMismatchError

    uri = f"s3://{bucket}/db"
    first = [Record(f"s{i}", t) for i, t in enumerate(sentences[:10])]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, hash3_pipeline)
    with pytest.raises(PipelineMismatchError, match="hash3"):
        ingest([Record("b0", sentences[20])], b_db.collection("c"), hash_pipeline)
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, [r.id for r in first])
    assert collection.pipeline.name == "hash3"


def test_an_add_finding_ids_stored_by_another_machine_at_its_commit_is_refused(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """An add without skip_stored refuses ids already stored ("use upsert"). On S3 another
    machine may store some of them between its look and its merge, which then inserts only
    the rest: it returned the smaller count as if all had gone in."""
    from probembed.store.collection import Collection
    from probembed.store.rows import Batch, PipelineInfo

    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:30])}
    seed = [Record(i, texts[i]) for i in list(texts)[:10]]
    theirs = [Record(i, f"their {texts[i]}") for i in list(texts)[20:25]]

    def machine(name: str) -> None:
        monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / name))

    machine("machine-a")
    a = Database(uri, create=True, storage_options=options).collection("c")
    ingest(seed, a, hash_pipeline)
    machine("machine-b")
    b = Database(uri, storage_options=options).collection("c")
    original = Collection._arrow  # called after the look, before the merge

    def storing_meanwhile(self, batch, table):
        if self is b:
            machine("machine-a")
            assert ingest(theirs, a, hash_pipeline).added == 5
            machine("machine-b")
        return original(self, batch, table)

    monkeypatch.setattr(Collection, "_arrow", storing_meanwhile)
    mine = list(texts)[10:]
    values = [texts[i] for i in mine]
    info = PipelineInfo.of(hash_pipeline)
    batch = Batch(mine, values, [{} for _ in mine], hash_pipeline.encode(values), info)
    with pytest.raises(
        StoreError, match=r"5 ids are already in collection 'c' \(e\.g\. \['s20', .*the other 15"
    ):
        b.add(batch)
    monkeypatch.undo()
    machine("machine-c")
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, texts)
    rows = collection.rows(["s20", "s25"], ("text",))
    assert (rows["s20"]["text"], rows["s25"]["text"]) == (f"their {texts['s20']}", texts["s25"])


def _unkeyed(monkeypatch, nullable: bool = False) -> None:
    """New collections made as before ids were Lance's primary key: an `id` field without
    the key's metadata (and, with `nullable`, one that accepts nulls, as no probembed made)."""
    import pyarrow as pa

    from probembed.store import creation as collection_module

    made = collection_module.table_schema

    def older(*args, **kwargs):
        schema = made(*args, **kwargs)
        field = pa.field("id", pa.string(), nullable=nullable)
        return schema.set(schema.get_field_index("id"), field)

    monkeypatch.setattr(collection_module, "table_schema", older)


def test_a_collection_made_before_ids_were_keyed_gets_the_key_on_its_first_shared_write(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """Lance reruns a merge that lost an id to another writer's only on a keyed table, so a
    collection made before gets the key (one schema commit) on its first write from S3."""
    from probembed.store.shared_writes import PRIMARY_KEY_MARKERS

    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:40])}
    with monkeypatch.context() as patched:
        _unkeyed(patched)
        old = Database(uri, create=True, storage_options=options).collection("c")
        ingest([Record(i, texts[i]) for i in list(texts)[:20]], old, hash_pipeline)

    def keys(collection):
        field = collection._require().schema.field("id")
        return {key.decode() for key in field.metadata or {}} & set(PRIMARY_KEY_MARKERS)

    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-b"))
    collection = Database(uri, storage_options=options).open("c")
    assert not keys(collection) and collection.version == 1
    report = ingest([Record(i, texts[i]) for i in list(texts)[10:30]], collection, hash_pipeline)
    assert (report.added, report.already_stored) == (10, 10)
    assert keys(collection) and collection.version == 3  # the key, then the merge
    edited = [Record("s5", "an edited text"), *(Record(i, texts[i]) for i in list(texts)[30:])]
    report = ingest(edited, collection, hash_pipeline, upsert=True)
    assert (report.added, report.updated) == (10, 1) and collection.version == 4  # keyed once
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    reopened = Database(uri, storage_options=options).open("c")
    assert keys(reopened)
    _stored_once(reopened, texts)
    stored = {i: r["text"] for i, r in reopened.rows(list(texts), ("text",)).items()}
    assert stored == {**texts, "s5": "an edited text"}


def test_a_collection_whose_ids_may_be_null_is_not_keyed_and_says_why(
    monkeypatch, bucket, options, hash_pipeline, sentences
):
    uri = f"s3://{bucket}/db"
    with monkeypatch.context() as patched:
        _unkeyed(patched, nullable=True)
        old = Database(uri, create=True, storage_options=options).collection("c")
        ingest([Record("s0", sentences[0])], old, hash_pipeline)
    collection = Database(uri, storage_options=options).open("c")
    with pytest.raises(StoreError, match="id column accepts nulls"):
        ingest([Record("s1", sentences[1])], collection, hash_pipeline)
    assert collection.ids() == {"s0"}


def test_a_creation_repair_beaten_by_another_commit_runs_again_and_keeps_both(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """The overwritten creation's repair is one merge on the latest version; when another
    commit lands between its look and its commit, it runs again from the latest version
    (`OVERWRITE_REPAIRS` attempts). Here the first attempt's merge meets a real conflict and
    the second goes through: every row of both writers is stored, once."""
    from probembed.store import shared_writes

    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:30])}
    first = [Record(i, texts[i]) for i in list(texts)[:20]]
    mine = [Record(i, texts[i]) for i in list(texts)[10:]]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, hash_pipeline)
    b = b_db.collection("c")
    restores = _restored_after_looks(monkeypatch, b, uri, options, looks={0})
    conflicts, committed = [], shared_writes.committed

    def counting(*args, **kwargs):
        try:
            return committed(*args, **kwargs)
        except shared_writes.WriteConflictError as exc:
            conflicts.append(str(exc))
            raise

    monkeypatch.setattr(shared_writes, "committed", counting)
    report = ingest(mine, b, hash_pipeline)
    assert len(restores) == 1 and len(conflicts) == 1 and "Incompatible" in conflicts[0]
    assert (report.added, report.already_stored) == (10, 10)  # 10 of its ids were the first's
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, texts)
    assert {i: r["text"] for i, r in collection.rows(list(texts)).items()} == texts


def test_a_creation_repair_beaten_at_every_merge_restores_and_keeps_what_was_committed_meanwhile(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """Every merge of the repair meets another commit, and machine A's next batch (10 new
    ids, and s25, which it counted as stored: B's overwrite held it) lands on the overwrite
    in that instant. Giving up restored A's first table whole, which dropped that batch
    (its rows reported added) and left s25 stored by nobody; now the restore is followed by
    a merge of what it dropped, and B's batch is written as into any table."""
    from probembed.store.creation import OVERWRITE_REPAIRS

    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:40])}
    first = [Record(i, texts[i]) for i in list(texts)[:20]]
    mine = [Record(i, texts[i]) for i in list(texts)[10:30]]
    later = [Record(i, texts[i]) for i in ["s25", *list(texts)[30:]]]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, hash_pipeline)
    b = b_db.collection("c")
    reports = []
    landing = _later_batch(tmp_path, monkeypatch, uri, options, later, hash_pipeline, reports)
    beaten = range(OVERWRITE_REPAIRS)
    restores = _restored_after_looks(monkeypatch, b, uri, options, beaten, landing)
    report = ingest(mine, b, hash_pipeline)
    assert len(restores) == OVERWRITE_REPAIRS
    assert [(r.added, r.already_stored) for r in reports] == [(10, 1)]
    assert (report.added, report.already_stored) == (10, 10)  # s10-s19 were A's first
    monkeypatch.undo()
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, texts)
    assert {i: r["text"] for i, r in collection.rows(list(texts)).items()} == texts
    assert collection.pipeline.fingerprint == hash_pipeline.fingerprint


def test_a_creation_repair_beaten_at_every_attempt_names_what_is_not_stored(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """When every merge, and every merge putting back what the restore dropped, meets
    another commit, the write is a `WriteConflictError` (the service's 409) naming the rows
    other writers committed meanwhile that are not stored now and the version holding them;
    the table holds what the other writer's creation stored, as it was, and opens."""
    from probembed.store import WriteConflictError
    from probembed.store.creation import OVERWRITE_REPAIRS

    uri = f"s3://{bucket}/db"
    texts = {f"s{i}": t for i, t in enumerate(sentences[:40])}
    first = [Record(i, texts[i], {"n": n}) for n, i in enumerate(list(texts)[:20])]
    mine = [Record(i, texts[i], {"n": 100}) for i in list(texts)[10:30]]
    later = [Record(i, texts[i], {"n": 200}) for i in list(texts)[30:]]
    b_db = _overwritten_creation(tmp_path, monkeypatch, uri, options, first, hash_pipeline)
    b = b_db.collection("c")
    reports = []
    landing = _later_batch(tmp_path, monkeypatch, uri, options, later, hash_pipeline, reports)
    restores = _restored_after_looks(monkeypatch, b, uri, options, range(100), landing)
    told = (
        r"10 rows other writers committed on the replaced table meanwhile \(e\.g\. \['s30', "
        r".*not stored now \(version (\d+) of the table holds them\).*nothing of this write"
    )
    with pytest.raises(WriteConflictError, match=told) as raised:
        ingest(mine, b, hash_pipeline)
    assert len(restores) >= 2 * OVERWRITE_REPAIRS and [r.added for r in reports] == [10]
    monkeypatch.undo()
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    collection = Database(uri, storage_options=options).open("c")
    _stored_once(collection, [r.id for r in first])
    rows = collection.rows([r.id for r in first], ("text", "n"))
    assert {i: (r["text"], r["n"]) for i, r in rows.items()} == {
        r.id: (r.text, r.metadata["n"]) for r in first
    }
    import re

    import lancedb

    held = int(re.search(told, str(raised.value)).group(1))
    table = lancedb.connect(uri, storage_options=options).open_table("c")
    table.checkout(held)
    ids = set(table.search().select(["id"]).limit(None).to_arrow().column("id").to_pylist())
    assert ids >= {r.id for r in later}


def _markdown(folder, names, sentences):
    """A folder of small Markdown files, one sentence each; its path."""
    folder.mkdir()
    for i, name in enumerate(names):
        (folder / name).write_text(f"# {name}\n\n{sentences[i]}\n", encoding="utf-8")
    return folder


def test_a_chunked_first_write_giving_up_its_repair_leaves_the_first_creators_documents(
    tmp_path, monkeypatch, bucket, options, hash_pipeline, sentences
):
    """Machines A and B ingest the same four Markdown files; B's creation is committed over
    A's table, A's next ingest lands on the overwrite and every merge of B's repair is
    beaten, so B gives up (`WriteConflictError`: nothing of its write stored). Its chunked
    run then undid its ids as "not there before": it deleted A's chunks of the same files
    and dropped the emptied collection. Now the undo goes back to the table B found."""
    from probembed.store import WriteConflictError, ingest_documents

    uri = f"s3://{bucket}/db"
    names = [f"d{i}.md" for i in range(4)]
    docs = _markdown(tmp_path / "docs", names, sentences)
    more = _markdown(tmp_path / "more", ["e0.md", "e1.md"], sentences[10:])
    b_db = _overwritten_creation(
        tmp_path, monkeypatch, uri, options, docs, hash_pipeline, ingest_documents
    )
    b = b_db.collection("c")
    reports = []
    landing = _later_batch(
        tmp_path, monkeypatch, uri, options, more, hash_pipeline, reports, ingest_documents
    )
    beaten = set(range(100))
    _restored_after_looks(monkeypatch, b, uri, options, beaten, landing)
    give_up = b._restore_keeping

    def giving_up(*args):  # the undo after it meets no other commit
        try:
            give_up(*args)
        finally:
            beaten.clear()

    monkeypatch.setattr(b, "_restore_keeping", giving_up)
    with pytest.raises(WriteConflictError, match="nothing of this write was stored") as raised:
        ingest_documents(docs, b, hash_pipeline)
    assert "undoing it failed" not in str(raised.value)
    assert [r.added for r in reports] == [2]
    monkeypatch.undo()
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "machine-c"))
    db = Database(uri, storage_options=options)
    assert db.collections() == ["c"]
    stored = db.open("c").document_index()
    assert sorted(stored) == names
