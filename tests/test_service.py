"""The HTTP service, end to end: a real `probembed serve` on a loopback port, real clients.

Every server here is a subprocess started and stopped by its fixture; requests go to
127.0.0.1 only. The pipeline is a saved two-model hashing pipeline (deterministic, no data
needed), so vectors can be compared exactly with the same pipeline run in this process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import openai
import orjson
import pytest
from fastapi.testclient import TestClient
from release_support import as_an_earlier_release_wrote
from service_support import Server, encoding_children, raw, serve_on_a_held_port
from starlette.requests import Request
from tuning_support import tuned_copy
from typer.testing import CliRunner

from probembed.cache import default_cache_dir
from probembed.chunking import ChunkSettings, chunk_text, markdown_sections, plain_sections
from probembed.fusion import Fused
from probembed.interfaces.cli import app as cli_app
from probembed.pipeline import Pipeline
from probembed.service import ServiceSettings, schemas
from probembed.service import collections as collections_module
from probembed.service import embeddings as embeddings_module
from probembed.service.answers import _embedding_body, _embedding_payload, _search_body
from probembed.service.app import create_app
from probembed.service.process import FAILED, READY_TIMEOUT
from probembed.service.settings import BatchSettings
from probembed.store import Database, Record, ingest, ingest_documents
from probembed.store.errors import CollectionNotFoundError, StoreStateError

DOCS = [
    {"id": "d1", "text": "The cat sat on the mat near the door.", "metadata": {"year": 2001}},
    {"id": "d2", "text": "Stock markets fell sharply on Monday.", "metadata": {"year": 2015}},
    {"id": "d3", "text": "A recipe for bread needs flour and water.", "metadata": {"year": 2020}},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory, pydoc_pipeline_dir):
    """An open server (no keys, loopback) over an empty database."""
    root = tmp_path_factory.mktemp("service")
    with Server(root / "db", pydoc_pipeline_dir) as running:
        yield running


def test_openai_client_round_trip(server, pydoc_pipeline):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-checked", max_retries=0)
    texts = ["a probabilistic embedding", "how sure is this hit?"]
    expected = pydoc_pipeline.encode(texts).gaussian.mean
    for encoding in (openai.omit, "float", "base64"):  # omitted: the client asks for base64
        answer = client.embeddings.create(model="hash", input=texts, encoding_format=encoding)
        assert [d.index for d in answer.data] == [0, 1]
        rows = [d.embedding for d in answer.data]
        if encoding == "base64":  # asked for by the caller, the client leaves it encoded
            rows = [np.frombuffer(base64.b64decode(r), "<f4") for r in rows]
        np.testing.assert_array_equal(np.asarray(rows, np.float32), expected)  # exact: float32
        assert answer.model == "hash" and answer.usage.total_tokens == 8
    single = client.embeddings.create(model="hash", input="one text")
    assert (
        len(single.data) == 1
        and len(single.data[0].embedding) == pydoc_pipeline.empty().gaussian.dim
    )
    with pytest.raises(openai.NotFoundError, match="models: hash"):
        client.embeddings.create(model="text-embedding-3-small", input="x")
    assert [m.id for m in client.models.list()] == ["hash"]
    retrieved = client.models.retrieve("hash")  # it was a 404: no such route
    assert (retrieved.id, retrieved.dim) == ("hash", pydoc_pipeline.empty().gaussian.dim)
    with pytest.raises(openai.NotFoundError, match="models: hash"):
        client.models.retrieve("text-embedding-3-small")


def test_embeddings_carry_variance_and_weights(server, pydoc_pipeline):
    with server.client() as http:
        body = http.post("/v1/embeddings", json={"model": "hash", "input": ["x y z", "w"]}).json()
        b64 = http.post(
            "/v1/embeddings",
            json={"model": "hash", "input": ["x y z"], "encoding_format": "base64"},
        ).json()
    fused = pydoc_pipeline.encode(["x y z", "w"])
    assert body["object"] == "list" and body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    np.testing.assert_array_equal(
        np.asarray([d["variance"] for d in body["data"]], np.float32), fused.gaussian.var
    )
    assert [d["weights"] for d in body["data"]] == [fused.explain(0), fused.explain(1)]
    decoded = np.frombuffer(base64.b64decode(b64["data"][0]["variance"]), "<f4")
    np.testing.assert_array_equal(decoded, fused.gaussian.var[0])


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        ({"model": "nope", "input": "x"}, 404, "models: hash"),
        ({"model": "hash", "input": []}, 422, "empty list"),
        ({"model": "hash", "input": ["ok", "  "]}, 422, r"input\[1\] is blank \(only white"),
        ({"model": "hash", "input": ""}, 422, r'"input is empty'),  # as sent: no index
        ({"model": "hash", "input": [[1, 2, 3]]}, 422, "input"),
        ({"model": "hash", "input": "x", "dimensions": 8}, 422, "makes 112-dimensional"),
        ({"model": "hash", "input": "x", "encoding_format": "int8"}, 422, "encoding_format"),
        ({"input": "x"}, 422, "model"),
    ],
)
def test_embedding_errors_name_the_input(server, payload, status, says):
    with server.client() as http:
        answer = http.post("/v1/embeddings", json=payload)
    assert answer.status_code == status
    assert re.search(says, answer.text)


def test_a_delete_of_a_large_part_measures_the_agreement_again(server, sentences):
    """A delete through the service kept the agreement measured before it (and the tilt)."""
    kept = Database(server.db).collection("agree").agreement_file
    documents = [{"id": f"s{i}", "text": t} for i, t in enumerate(sentences[:60])]
    with server.client() as http:
        assert http.post("/v1/collections", json={"name": "agree"}).status_code == 201
        written = http.post("/v1/collections/agree/documents", json={"documents": documents})
        assert written.json()["added"] == 60
        assert json.loads(kept.read_text())["count"] == 60
        few = {"ids": ["s0", "s1"]}  # under a tenth: the measurement stands
        assert http.post("/v1/collections/agree/delete", json=few).json()["deleted"] == 2
        assert json.loads(kept.read_text())["count"] == 60
        many = {"ids": [f"s{i}" for i in range(2, 20)]}
        assert http.post("/v1/collections/agree/delete", json=many).json()["count"] == 40
        assert json.loads(kept.read_text())["count"] == 40
        assert http.delete("/v1/collections/agree").status_code == 200  # the server is shared


def test_a_collection_the_server_cannot_load_is_a_503_naming_it_logged_not_a_422(
    server, hash_pipeline
):
    """A corrupt kept pipeline copy answered every search 422 "invalid input", and the
    server's log held nothing: the client could mend nothing, the operator saw nothing. It is
    the 503 of a collection this server cannot load (as one found so at start-up)."""
    from probembed.store import ingest
    from probembed.store.readers import Record

    collection = Database(server.db).collection("broken")
    ingest([Record("a", "a text to find"), Record("b", "another one")], collection, hash_pipeline)
    collection.record_pipeline(hash_pipeline)
    (collection.pipeline_dir / "pipeline.json").write_text("{ truncated", encoding="utf-8")
    with server.client() as http:
        answer = http.post("/v1/collections/broken/search", json={"query": "a text"})
        assert answer.status_code == 503 and "cannot load" in answer.json()["detail"]
        assert "collection 'broken' cannot be served" in answer.json()["detail"]
        assert answer.json()["error"]["type"] == "service_unavailable"
        assert "Retry-After" not in answer.headers
        # where the database lives is the operator's, in the log, not the client's
        assert "<db>/" in answer.text and str(server.db) not in answer.text
        assert "broken" in http.get("/readyz").json()["unservable"]
        Database(server.db).drop("broken")  # by another process: a listing forgets it
        assert "broken" not in [c["name"] for c in http.get("/v1/collections").json()["data"]]
        assert http.get("/readyz").json()["unservable"] == {}  # the server is shared
    logged = server.log.read_text(encoding="utf-8")
    assert "cannot load" in logged and str(server.db) in logged


def test_a_server_on_an_empty_database_says_so_in_its_log(server):
    """`serve --db` on a mistyped path made an empty database and said nothing."""
    assert f"database {server.db} holds no collections yet" in server.log.read_text("utf-8")


def test_the_encoding_children_load_neither_the_store_nor_the_web_framework(server):
    """Each encoding child imported the whole service package on its way to its worker
    module: LanceDB and FastAPI, about 2 s of each child's start (a server was ready in
    17-19 s on a loaded 2-core machine, 7-11 s without them), and their memory for the
    child's life. Read from the children's memory maps: no LanceDB library is loaded."""
    encoders = encoding_children(server)
    assert encoders
    for pid in encoders:
        assert "lancedb" not in Path(f"/proc/{pid}/maps").read_text(), pid
    assert "lancedb" in Path(f"/proc/{server.process.pid}/maps").read_text()  # the server's


def test_a_pipeline_of_laplace_members_loads_without_scipy_special(server):
    """Every pipeline load imported the `head` estimator's module, and with it scipy.special
    for the GELU of a head that a laplace member does not have: ~0.25 s of CPU in each
    encoding child's start (and in every CLI command that loads a pipeline). Read from the
    children's memory maps: no scipy.special library is loaded, though they encoded."""
    encoders = encoding_children(server)
    assert encoders
    for pid in encoders:
        assert "scipy/special" not in Path(f"/proc/{pid}/maps").read_text(), pid


def test_an_access_line_is_one_json_object_a_log_shipper_reads_whole(server):
    """Access lines had the time, logger and level before their JSON, so no line parsed."""
    with server.client() as http:
        assert http.get("/v1/models/nope-for-the-log").status_code == 404
    deadline = time.monotonic() + 30  # the line is written once the answer has gone out
    while True:
        lines = server.log.read_text("utf-8").splitlines()
        access = [json.loads(line) for line in lines if "nope-for-the-log" in line]
        if access or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert access and access[-1]["status"] == 404 and access[-1]["route"] == "/v1/models/{model}"
    assert datetime.fromisoformat(access[-1]["time"]).tzinfo is not None


def test_a_new_collection_naming_a_pipeline_not_served_is_invalid_input(server):
    """The pipeline is a value of the body, not a resource of the path: 422 (it was a 404),
    as the schema says by listing the served pipelines; a model named in a path stays 404."""
    with server.client() as http:
        unserved = http.post("/v1/collections", json={"name": "x", "pipeline": "no"})
        schema = http.get("/openapi.json").json()
        assert http.get("/v1/collections/x").status_code == 404  # nothing was made
        assert http.get("/v1/models/no").status_code == 404
    assert unserved.status_code == 422
    assert unserved.json()["detail"] == "pipeline 'no' is not served here; pipelines: hash"
    assert unserved.json()["error"]["type"] == "invalid_request_error"
    named = schema["components"]["schemas"]["CollectionCreate"]["properties"]["pipeline"]
    assert {"type": "string", "enum": ["hash"]} in named["anyOf"]
    responses = schema["paths"]["/v1/collections"]["post"]["responses"]
    assert "422" in responses and "404" not in responses


def test_listing_collections_documents_no_404_it_cannot_answer(server):
    """GET /v1/collections names no collection, and leaves out one dropped while it lists:
    its schema promised a 404 all the same."""
    with server.client() as http:
        schema = http.get("/openapi.json").json()
        assert http.get("/v1/collections").status_code == 200
    listed = schema["paths"]["/v1/collections"]["get"]["responses"]
    assert "404" not in listed and {"200", "401", "403", "503"} <= set(listed)
    assert "404" in schema["paths"]["/v1/collections/{name}"]["get"]["responses"]


def test_collection_lifecycle(server):
    with server.client() as http:
        created = http.post("/v1/collections", json={"name": "life"})
        assert created.status_code == 201 and created.json()["count"] == 0
        assert http.post("/v1/collections", json={"name": "life"}).status_code == 409
        assert http.post("/v1/collections", json={"name": "bad name!"}).status_code == 422
        assert http.post("/v1/collections", json={"name": "x", "pipeline": "no"}).status_code == 422
        wrote = http.post("/v1/collections/life/documents", json={"documents": DOCS}).json()
        assert (wrote["added"], wrote["count"]) == (3, 3)
        again = http.post("/v1/collections/life/documents", json={"documents": DOCS[:1]}).json()
        assert (again["added"], again["already_stored"]) == (0, 1)
        changed = {"id": "d1", "text": "A dog slept by the fire.", "metadata": {"year": 2001}}
        upsert = {"documents": [changed], "upsert": True}
        replaced = http.post("/v1/collections/life/documents", json=upsert).json()
        assert (replaced["added"], replaced["updated"], replaced["count"]) == (0, 1, 3)
        same = http.post("/v1/collections/life/documents", json=upsert).json()
        assert (same["added"], same["updated"], same["unchanged"]) == (0, 0, 1)
        listed = http.get("/v1/collections").json()["data"]
        assert [c["name"] for c in listed] == ["life"] and listed[0]["pipeline"]["name"] == "hash"
        stats = http.get("/v1/collections/life").json()
        assert stats["count"] == 3 and stats["dim"] == 112 and stats["version"] >= 3
        gone = http.post("/v1/collections/life/delete", json={"ids": ["d2", "nope", "nope"]})
        expected = {"collection": "life", "deleted": 1, "count": 2, "not_found": 1}
        assert gone.json() == {**expected, "hint": None}  # d2 is a row, nope no document
        assert http.delete("/v1/collections/life").json()["deleted"] == 2
        for answer in (
            http.get("/v1/collections/life"),
            http.post("/v1/collections/life/search", json={"query": "cat"}),
            http.post("/v1/collections/life/documents", json={"documents": DOCS}),
            http.delete("/v1/collections/life"),
        ):
            assert answer.status_code == 404 and "no collection 'life'" in answer.text
            assert str(server.db) not in answer.text  # the operator's path, not the client's


def test_a_write_without_upsert_says_which_stored_ids_kept_another_text(server):
    """It answered `"already_stored": 1` and kept the old text without a word, where the CLI
    says that --upsert replaces what changed."""
    edited = {**DOCS[0], "text": "A dog slept by the fire."}
    retagged = {**DOCS[2], "metadata": {"year": 2021}}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "edits"})

        def write(documents, **options):
            body = {"documents": documents, "prefix": "p/", **options}
            return http.post("/v1/collections/edits/documents", json=body).json()

        first = write(DOCS)
        assert (first["added"], first["changed"], first["hint"]) == (3, 0, None)
        again = write([edited, DOCS[1], retagged])
        assert (again["added"], again["already_stored"], again["changed"]) == (0, 3, 2)
        assert again["hint"] == (
            "2 id(s) are stored with another text or metadata (e.g. 'p/d1') and were left "
            'as stored: send "upsert": true to replace them'
        )
        found = http.post("/v1/collections/edits/search", json={"query": "cat", "k": 3}).json()
        texts = {h["id"]: h["text"] for h in found["results"][0]["hits"]}
        assert texts["p/d1"] == DOCS[0]["text"]  # left as stored, as the hint says
        same = write(DOCS[1:2])
        assert (same["already_stored"], same["changed"], same["hint"]) == (1, 0, None)
        replaced = write([edited, retagged], upsert=True)
        assert (replaced["updated"], replaced["changed"], replaced["hint"]) == (2, None, None)
        http.delete("/v1/collections/edits")


def test_a_sync_of_whole_documents_leaves_the_collection_holding_the_request(server):
    """`"sync": true` without `"chunk"` was a 422 "sync needs chunk": a client could not
    remove what its source no longer holds. It replaces and adds in one commit and removes
    in the next, under its prefix only, and refuses a sync that would keep nothing."""
    with server.client() as http:
        http.post("/v1/collections", json={"name": "synced"})

        def write(documents, **options):
            body = {"documents": documents, **options}
            return http.post("/v1/collections/synced/documents", json=body)

        write([{"id": "kept", "text": "Another source's note."}], prefix="other/")
        first = write(DOCS, sync=True, prefix="p/").json()
        assert (first["added"], first["removed"], first["count"]) == (3, 0, 4)
        collection = Database(server.db).collection("synced")
        version = collection.version
        edited = [{**DOCS[0], "text": "A dog slept by the fire."}, DOCS[1]]
        edited.append({"id": "d9", "text": "A new document."})
        synced = write(edited, sync=True, prefix="p/").json()
        assert (synced["added"], synced["updated"], synced["unchanged"], synced["removed"]) == (
            1, 1, 1, 1)  # fmt: skip
        assert synced["count"] == 4 and collection.version == version + 2
        ids = sorted(collection.ids())
        assert ids == ["other/kept", "p/d1", "p/d2", "p/d9"]
        texts = {i: r["text"] for i, r in collection.rows(ids).items()}
        assert texts == {"other/kept": "Another source's note."} | {
            f"p/{d['id']}": d["text"] for d in edited
        }
        kept = write([{"id": "z", "text": "Zebra."}], sync=True, prefix="p/x").json()
        assert (kept["added"], kept["removed"]) == (1, 0)  # nothing stored under p/x: none go
        for options, says in (
            ({"upsert": False}, "upsert false does not apply with sync"),
            ({}, "sync would remove all 4 record(s) under prefix 'p/' of collection"),
        ):
            refused = write([{"id": "y", "text": "Yak."}], sync=True, prefix="p/", **options)
            assert refused.status_code == 422 and says in refused.text, refused.text
        assert sorted(collection.ids()) == ["other/kept", "p/d1", "p/d2", "p/d9", "p/xz"]
        http.delete("/v1/collections/synced")


def test_an_integer_id_is_stored_as_its_string_as_the_cli_stores_it(
    server, tmp_path, pydoc_pipeline_dir
):
    """`probembed ingest` stores a JSON line's `"id": 7` as "7", and the service answered the
    same document 422 "documents[0].id: Input should be a valid string". It takes an integer
    (not a bool) as its string, within the length limit, and so does a delete."""
    source = tmp_path / "numbered.jsonl"
    source.write_text(json.dumps({"id": 7, "text": DOCS[0]["text"]}) + "\n", encoding="utf-8")
    args = ["ingest", str(source), "--db", str(server.db), "-c", "numbered"]
    made = CliRunner().invoke(cli_app, [*args, "--pipeline", str(pydoc_pipeline_dir)])
    assert made.exit_code == 0, made.output
    with server.client() as http:

        def write(*documents):
            return http.post("/v1/collections/numbered/documents", json={"documents": documents})

        same = write({"id": 7, "text": DOCS[0]["text"]})  # the CLI's row: already stored
        assert same.status_code == 200, same.text
        assert (same.json()["already_stored"], same.json()["changed"]) == (1, 0)
        added = write({"id": -8, "text": DOCS[1]["text"]}, {"id": "9", "text": DOCS[2]["text"]})
        assert (added.json()["added"], added.json()["count"]) == (2, 3)
        found = http.post("/v1/collections/numbered/search", json={"query": "cat", "k": 3})
        assert {h["id"] for h in found.json()["results"][0]["hits"]} == {"7", "-8", "9"}
        longest = {"id": 10 ** (schemas.MAX_ID_LENGTH - 1), "text": "x"}  # 1,024 digits
        assert write(longest).json()["added"] == 1
        for bad, says in (
            (True, "documents[0].id: Input should be a valid string or integer, got true"),
            (7.5, "documents[0].id: Input should be a valid string or integer, got 7.5"),
            (None, "documents[0].id: Input should be a valid string or integer, got null"),
            (10**schemas.MAX_ID_LENGTH, "documents[0].id: String should have at most 1024"),
            ("", "documents[0].id: String should have at least 1 character"),
            ("  ", "ids must be strings with a visible character, got '  '"),  # as ingest
        ):
            refused = write({"id": bad, "text": "x"})
            assert refused.status_code == 422 and says in refused.text, (bad, refused.text)
        assert http.post("/v1/collections", json={"name": "blank-ids"}).status_code == 201
        chunked = http.post(  # chunked writes check ids as plain ones do
            "/v1/collections/blank-ids/documents",
            json={"documents": [{"id": "  ", "text": "x"}], "chunk": True},
        )
        assert chunked.status_code == 422 and "a visible character, got '  '" in chunked.text
        deleted = http.post("/v1/collections/numbered/delete", json={"ids": [7, -8, 6]}).json()
        assert (deleted["deleted"], deleted["not_found"], deleted["count"]) == (2, 1, 2)
        refused = http.post("/v1/collections/numbered/delete", json={"ids": [False]})
        assert refused.status_code == 422 and "ids[0]: Input should be a valid string" in (
            refused.text
        )
        components = http.get("/openapi.json").json()["components"]["schemas"]
        said = {"type": "string", "minLength": 1, "maxLength": schemas.MAX_ID_LENGTH}
        assert components["Document"]["properties"]["id"]["anyOf"] == [
            said,
            {"type": "integer"},
        ]
        assert components["DeleteDocuments"]["properties"]["ids"]["items"]["anyOf"] == [
            {"type": "string"},
            {"type": "integer"},
        ]
        http.delete("/v1/collections/numbered")


def test_a_chunked_documents_chunks_are_deleted_by_its_id_with_doc(server):
    """The service deleted by row id only: a chunked document's id deleted nothing, and the
    answer said only "not_found": 1 (the CLI has --doc)."""
    long_doc = {"id": "long", "text": " ".join(f"word{i}." for i in range(200))}
    body = {"documents": [long_doc, DOCS[0]], "chunk": {"max_tokens": 16}}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "chunks"})
        written = http.post("/v1/collections/chunks/documents", json=body).json()
        total = written["count"]
        by_row = http.post("/v1/collections/chunks/delete", json={"ids": ["long"]}).json()
        assert (by_row["deleted"], by_row["not_found"], by_row["count"]) == (0, 1, total)
        assert by_row["hint"] == (
            "1 id(s) are documents stored as chunks (e.g. 'long'): send \"doc\": true to delete "
            "their chunks"
        )
        chunk = http.post("/v1/collections/chunks/delete", json={"ids": ["long#3"], "doc": True})
        assert chunk.json()["hint"] == (
            "1 id(s) are chunk ids (e.g. 'long#3'): without \"doc\" they delete that chunk; "
            "its document is 'long'"
        )
        asked = {"ids": ["long", "nope"], "doc": True}
        by_doc = http.post("/v1/collections/chunks/delete", json=asked).json()
        assert by_doc["deleted"] == total - 1 and by_doc["not_found"] == 1
        assert by_doc["count"] == 1  # DOCS[0], one chunk, stays
        http.post("/v1/collections", json={"name": "whole"})
        empty = http.post("/v1/collections/whole/delete", json={"ids": ["d1"], "doc": True})
        assert empty.status_code == 200 and empty.json()["not_found"] == 1  # holds none yet
        http.post("/v1/collections/whole/documents", json={"documents": DOCS})
        refused = http.post("/v1/collections/whole/delete", json={"ids": ["d1"], "doc": True})
        assert refused.status_code == 422 and "holds no chunked documents" in refused.text
        for name in ("chunks", "whole"):
            http.delete(f"/v1/collections/{name}")


def test_a_delete_by_id_finds_an_id_by_either_unicode_spelling(server):
    """The service's delete took ids exactly as sent, where `delete --doc` and the CLI's
    delete find either spelling: a name listed from a macOS folder (decomposed) deleted
    nothing of the composed id stored for it, and said not_found. Now each id is found as
    sent, else by its other spelling; one stored as sent is the one deleted."""
    composed, decomposed = "café.txt", unicodedata.normalize("NFD", "café.txt")
    stored = [{"id": composed, "text": "Un café noir."}, {"id": "other", "text": "Tomatoes."}]
    with server.client() as http:
        http.post("/v1/collections", json={"name": "accents"})
        http.post("/v1/collections/accents/documents", json={"documents": stored})
        pasted = http.post("/v1/collections/accents/delete", json={"ids": [decomposed, "nope"]})
        expected = {"collection": "accents", "deleted": 1, "count": 1, "not_found": 1}
        assert pasted.json() == {**expected, "hint": None}
        both = [{"id": composed, "text": "composed"}, {"id": decomposed, "text": "decomposed"}]
        http.post("/v1/collections/accents/documents", json={"documents": both})
        exact = http.post("/v1/collections/accents/delete", json={"ids": [decomposed]}).json()
        assert (exact["deleted"], exact["not_found"], exact["count"]) == (1, 0, 2)
        hits = http.post("/v1/collections/accents/search", json={"query": "café", "k": 5})
        assert {h["id"] for h in hits.json()["results"][0]["hits"]} == {composed, "other"}
        http.delete("/v1/collections/accents")


def test_a_decomposed_prefix_is_stored_composed(server):
    """A request's `prefix` was put before each id as sent: decomposed (a macOS folder's
    name), it stored ids a composed prefix, the CLI's or a filter's, did not find."""
    prefix = unicodedata.normalize("NFD", "résumé/")
    with server.client() as http:
        http.post("/v1/collections", json={"name": "prefixed"})
        body = {"documents": DOCS[:1], "prefix": prefix}
        assert http.post("/v1/collections/prefixed/documents", json=body).status_code == 200
        body = {"query": "cat", "where": "id = 'résumé/d1'"}
        found = http.post("/v1/collections/prefixed/search", json=body).json()
        assert [h["id"] for h in found["results"][0]["hits"]] == ["résumé/d1"]
        http.delete("/v1/collections/prefixed")


def test_acknowledged_writes_are_searchable_with_the_hit_shape(server):
    with server.client() as http:
        http.post("/v1/collections", json={"name": "find"})
        assert http.post("/v1/collections/find/documents", json={"documents": DOCS}).is_success
        result = http.post(
            "/v1/collections/find/search", json={"query": DOCS[1]["text"], "k": 2}
        ).json()
    (only,) = result["results"]
    assert only["query"] == DOCS[1]["text"] and 0 <= only["confidence"] <= 1
    top = only["hits"][0]
    assert top["id"] == "d2" and top["text"] == DOCS[1]["text"]
    assert top["metadata"] == {"year": 2015} and top["std"] > 0
    assert set(top["weights"]) == {"hash(dim=64)", "hash(dim=48)"} and top["p_relevant"] is None
    assert len(only["hits"]) == 2


def test_a_search_answer_is_the_response_model_written_a_query_at_a_time():
    """The body is written off the event loop, per query: it must be what the model gives."""
    hit = {
        "id": "d\u00e9j\u00e0 \U0001f600",
        "score": 0.1 + 0.2,  # a float with a long shortest form
        "std": 1e-300,
        "weights": {"minilm": 0.6, "use": 0.4},
        "p_relevant": None,
        "text": 'quotes " and \\ and \n',
        "metadata": {"year": 2015, "tags": ["a", {"b": None}], "x": 2.5},
    }
    results = [
        {"query": "q1", "confidence": 0.75, "hits": [hit, {**hit, "other_chunks": 3}]},
        {"query": None, "confidence": None, "hits": []},
    ]
    written = _search_body("col\u00e9", results)
    model = schemas.SearchResponse.model_validate({"collection": "col\u00e9", "results": results})
    assert json.loads(written) == json.loads(model.model_dump_json())
    assert json.loads(written)["results"][0]["hits"][0]["score"] == 0.1 + 0.2  # read back exactly
    with pytest.raises(ValueError, match="hits"):  # still validated, not written as it came
        _search_body("c", [{"query": "q", "confidence": None}])


def _on_loop() -> bool:
    """Whether the caller runs on an event loop's thread (not a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop runs in a worker thread
        return False
    return True


#: Where an in-process client sends its requests: a name a server without keys answers to
#: (TestClient's own, testserver, is not one).
LOCAL = "http://localhost"


@contextlib.contextmanager
def _in_process(
    tmp_path: Path, pipeline_dir: Path, raising: bool = True, **options: Any
) -> Iterator[TestClient]:
    """The app in this process, ready, so a test can see which thread runs what (or reach its
    `Service`: `http.app.state.service`); `options` are more `ServiceSettings`; `raising`
    False answers an exception as the server would (a 500) instead of raising it here."""
    settings = ServiceSettings(
        db=tmp_path / "db",
        pipelines=(str(pipeline_dir),),
        batching=BatchSettings(workers=1),
        create_db=True,
        **options,
    )
    with TestClient(create_app(settings), LOCAL, raise_server_exceptions=raising) as http:
        for _ in range(1200):  # loading runs beside the app; a minute at most
            if http.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        yield http


def test_an_internal_error_carries_its_request_id_in_header_body_and_log(
    tmp_path, pydoc_pipeline_dir, monkeypatch, caplog
):
    """A 500 for an exception that is a bug is sent from outside the gate: it still carries
    the request's id, and the line logged before its traceback names it."""
    from probembed.service.state import Service

    def broken(self: Service) -> None:
        raise ZeroDivisionError("a bug")

    with _in_process(tmp_path, pydoc_pipeline_dir, raising=False) as http:
        monkeypatch.setattr(Service, "require_ready", broken)
        answer = http.get("/v1/collections", headers={"X-Request-ID": "bug-7"})
    assert answer.status_code == 500 and answer.headers["X-Request-ID"] == "bug-7"
    assert answer.json()["request_id"] == "bug-7"
    assert answer.json()["detail"].startswith("internal error")
    said = "GET /v1/collections (request bug-7): internal error, its traceback follows"
    assert said in caplog.text


def test_a_search_answer_is_written_off_the_event_loop(tmp_path, pydoc_pipeline_dir, monkeypatch):
    """Written on the loop, a large answer held every other request (/healthz 2 s behind
    200 queries of 1,000 hits); the app runs in this process to see which thread writes."""
    on_loop: list[bool] = []

    def watched(name: str, results: list) -> bytes:
        on_loop.append(_on_loop())
        return _search_body(name, results)

    monkeypatch.setattr(collections_module, "_search_body", watched)
    with _in_process(tmp_path, pydoc_pipeline_dir) as http:
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        written = http.post("/v1/collections/c/documents", json={"documents": DOCS})
        assert written.status_code == 200, written.text
        answer = http.post("/v1/collections/c/search", json={"queries": ["cat", "bread"], "k": 2})
    assert answer.status_code == 200 and len(answer.json()["results"]) == 2
    assert on_loop == [False]


def test_what_loading_made_is_frozen_out_of_the_garbage_collectors_reach(
    tmp_path, pydoc_pipeline_dir
):
    """A full collection set off by a large search's allocations traversed the loaded models
    with the GIL held: /healthz waited 0.1-0.16 s behind 50 queries of 1,000 hits (loopback
    scratch run), 0.02-0.035 s with them frozen."""
    try:
        with _in_process(tmp_path, pydoc_pipeline_dir) as http:
            service = http.app.state.service
            pipeline = service.pipelines["hash"]
            collected = [o for g in range(3) for o in gc.get_objects(g) if o is pipeline]
            assert gc.get_freeze_count() > 0 and not collected
            assert http.get("/healthz").status_code == 200
    finally:
        gc.unfreeze()  # the rest of this test session as it was


def test_an_embedding_answer_is_written_off_the_event_loop(
    tmp_path, pydoc_pipeline_dir, monkeypatch
):
    """orjson over 2,048 rows on the loop held /healthz 0.13-0.15 s (loopback scratch run)."""
    on_loop: list[bool] = []

    def watched(fused: Fused, model: str, encoding: str, texts: list[str]) -> bytes:
        on_loop.append(_on_loop())
        return _embedding_body(fused, model, encoding, texts)

    monkeypatch.setattr(embeddings_module, "_embedding_body", watched)
    with _in_process(tmp_path, pydoc_pipeline_dir) as http:
        for encoding in ("float", "base64"):
            asked = {"model": "hash", "input": ["cat", "bread"], "encoding_format": encoding}
            answer = http.post("/v1/embeddings", json=asked)
            assert answer.status_code == 200 and len(answer.json()["data"]) == 2
    assert on_loop == [False, False]


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_an_embedding_answer_is_the_bytes_orjson_wrote_of_it_whole(
    server, pydoc_pipeline, encoding
):
    """Written a row per orjson call (no call holds the GIL for the whole answer), the
    body is byte for byte the one orjson wrote of the whole payload in one call."""
    texts = [f"text number {i} with \u00e9 and \U0001f600" for i in range(300)]
    with server.client() as http:
        asked = {"model": "hash", "input": texts, "encoding_format": encoding}
        answer = http.post("/v1/embeddings", json=asked)
    assert answer.status_code == 200
    payload = _embedding_payload(pydoc_pipeline.encode(texts), "hash", encoding, texts)
    whole = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    assert answer.content == whole
    assert _embedding_body(pydoc_pipeline.encode(texts), "hash", encoding, texts) == whole


def test_the_servers_own_folders_are_not_shown_to_clients():
    """A full disk names the search snapshot's folder: for an object-storage database that is
    the operator's local cache (their home directory), for an unwritable one the temp dir."""
    app = create_app(ServiceSettings(db="s3://bucket/prefix", pipelines=("default",)))
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    scope["state"] = {"request_id": "r1"}  # what the gate gives every request
    cache, tmp = default_cache_dir() / "remote" / "ab12" / "docs", tempfile.gettempdir()

    def answer(exc: Exception) -> str:
        handler = app.exception_handlers[type(exc)]
        return asyncio.run(handler(Request(scope), exc)).body.decode()

    full = answer(StoreStateError(f"no space left in {cache} (or {tmp}/x) at s3://bucket/prefix"))
    assert "<cache>/remote/ab12/docs" in full and "<tmp>/x" in full and "<db>" in full
    assert str(default_cache_dir()) not in full and f"{tmp}/" not in full
    named = answer(CollectionNotFoundError(f"no collection '{tmp}/x'"))  # the client's words
    assert f"{tmp}/x" in named


def test_a_search_asking_for_more_hits_than_max_hits_is_refused_naming_queries_k_and_the_limit(
    server,
):
    """200 queries × k 1000 from a read-only key was a 251 MB answer, +270 MB in the server
    and seconds more for every other search of the collection: a request's hits, queries ×
    k, are bounded by --max-hits (20,480 by default), refused before any encoding."""
    with server.client() as http:
        http.post("/v1/collections", json={"name": "hits"})
        http.post("/v1/collections/hits/documents", json={"documents": DOCS})
        many = http.post("/v1/collections/hits/search", json={"queries": ["q"] * 21, "k": 1000})
        within = http.post("/v1/collections/hits/search", json={"queries": ["q"] * 20, "k": 1000})
        schema = http.get("/openapi.json").json()
    assert many.status_code == 422, many.text
    assert many.json()["detail"] == (
        "21 queries × k=1000 ask for 21000 hits; the limit is 20480 per request (--max-hits): "
        "send fewer queries or a smaller k"
    )
    assert within.status_code == 200, within.text
    assert schema["info"]["x-max-hits"] == 20480


def test_search_options_and_their_errors(server):
    with server.client() as http:
        http.post("/v1/collections", json={"name": "opts"})
        http.post("/v1/collections/opts/documents", json={"documents": DOCS})

        def search(**body):
            return http.post("/v1/collections/opts/search", json=body)

        everything = search(query="bread", k=4).json()["results"][0]["hits"]
        for blank in ("", "  "):  # a form's empty filter field: no filter, not a parse error
            hits = search(query="bread", k=4, where=blank).json()["results"][0]["hits"]
            assert [h["id"] for h in hits] == [h["id"] for h in everything]
        filtered = search(queries=["bread", "cat"], k=3, where="year >= 2015", exact=True).json()
        assert [len(r["hits"]) for r in filtered["results"]] == [2, 2]
        assert {h["id"] for r in filtered["results"] for h in r["hits"]} == {"d2", "d3"}
        hybrid = search(query="flour water bread", hybrid=True, score="dot").json()
        assert hybrid["results"][0]["hits"][0]["id"] == "d3"
        quoted = search(query='"flour water bread"', hybrid=True, score="dot")  # was a 500
        assert quoted.status_code == 200
        assert quoted.json()["results"][0]["hits"] == hybrid["results"][0]["hits"]
        for body, says in (
            ({"query": "x", "where": "year >>> 1"}, "invalid filter"),
            ({"query": "x", "where": "year > 'a'"}, "year holds int64, and 'a' is a string"),
            ({"query": "x", "where": "metadata = 1"}, "metadata is each item's metadata as"),
            ({"query": "x", "score": "cosine-ish"}, "valid scores are: dot, uec"),
            ({"query": "x", "score": 5}, "valid scores are: dot, uec"),
            ({"query": "x", "min_p_relevant": 0.5}, "calibrator"),
            ({"query": "x", "k": 0}, "k"),
            ({"query": "x", "queries": ["y"]}, "exactly one"),
            ({}, "exactly one"),
            ({"query": "x", "top_k": 3}, "top_k"),
            ({"query": "x", "k": True}, "valid integer"),  # was read as k=1
            ({"query": "x", "k": "5"}, "valid integer"),
            ({"query": "x", "exact": "yes"}, "valid boolean"),
            ({"query": "   "}, '"query is blank (only white space'),  # was "query is empty"
            ({"query": ""}, '"query is empty: there is nothing to embed'),
            ({"queries": ["x", "\u200b\t"]}, "queries[1] is blank (only white space or invis"),
        ):
            answer = search(**body)
            assert answer.status_code == 422, body
            assert says in answer.text, (body, answer.text)


def test_a_filter_that_crashed_the_engine_or_made_it_panic_is_a_422_and_the_server_lives(server):
    """A 480 KB chain of ORs, sent with any read key, segfaulted LanceDB inside the server:
    the process died with no log line. `$1` and `N'x'` made it panic: a 500."""
    chain = " OR ".join(["id = 'a'"] * 40_000)
    with server.client() as http:
        http.post("/v1/collections", json={"name": "deep"})
        http.post("/v1/collections/deep/documents", json={"documents": DOCS})
        for where, says in (
            (chain, "more than 4,000 AND/OR operators"),
            ("text = $1", "'$'"),
            ("text = N'x'", "LanceDB cannot run it"),
        ):
            answer = http.post("/v1/collections/deep/search", json={"query": "x", "where": where})
            assert answer.status_code == 422, answer.text[:500]
            assert says in answer.json()["error"]["message"]
            assert len(answer.content) < 2_000  # the filter quoted by its start and size
        assert http.get("/healthz").status_code == 200


def test_a_bad_name_is_told_in_words_at_its_place_and_a_long_one_is_quoted_cut_short(server):
    """An invalid collection name answered the raw regex ("String should match pattern ..."),
    a path's error was placed in the body (`loc` ["body", "path", "name"]), a search body's
    `query` out of the body (["query"], as a URL parameter's), and a 404 quoted a model name
    of any length."""
    rule = (
        "use letters, digits, '_', '.', '-' (starting with a letter or digit, at most 128 "
        "characters)"
    )
    with server.client() as http:
        made = http.post("/v1/collections", json={"name": "a/b"})
        read = http.get("/v1/collections/%C3%A9")
        long_name = http.delete("/v1/collections/" + "n" * 10_000)
        long_model = http.get("/v1/models/" + "m" * 10_000)
        asked = [http.post("/v1/collections/c/search", json={"query": q}) for q in (5, ["a"])]
    for answer in asked:
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][:2] == [
            "body",
            "query",
        ], answer.text
    assert made.status_code == 422 and made.json()["detail"][0]["loc"] == ["body", "name"]
    assert made.json()["error"]["message"] == f"name: invalid collection name 'a/b': {rule}"
    assert read.status_code == 422 and read.json()["detail"][0]["loc"] == ["path", "name"]
    assert read.json()["error"]["message"] == f"path.name: invalid collection name 'é': {rule}"
    for answer, status in ((long_name, 422), (long_model, 404)):
        assert answer.status_code == status and len(answer.content) < 2_000, answer.text[:300]
        assert "... (10,000 characters)" in answer.json()["error"]["message"]


def test_head_is_answered_wherever_get_is_without_a_body(server):
    """Only /healthz and /readyz answered HEAD; every other GET route answered it 405."""
    with server.client() as http:
        http.post("/v1/collections", json={"name": "headed"})
        for path in ("/v1/collections", "/v1/collections/headed", "/v1/models", "/openapi.json"):
            got, head = http.get(path), http.head(path)
            assert (head.status_code, head.content) == (200, b""), (path, head.status_code)
            assert head.headers["content-length"] == str(len(got.content)), path
        missing = http.head("/v1/collections/nowhere")
        posted_only = http.head("/v1/embeddings")
    assert (missing.status_code, missing.content) == (404, b"")
    assert posted_only.status_code == 405


def test_a_search_by_document_of_whole_documents_is_refused_empty_or_not_in_service_terms(
    server,
):
    """An empty collection of no chunks answered 200 and a written one 422, telling an HTTP
    client to run `probembed ingest --chunk`; one emptied of its chunks still answers."""
    grouped = {"query": "cat", "group_by_doc": True}
    with server.client() as http:
        for name in ("never", "whole", "emptied"):
            http.post("/v1/collections", json={"name": name})
        empty = http.post("/v1/collections/never/search", json=grouped)
        assert empty.status_code == 422, empty.text
        assert empty.json()["error"]["message"] == (
            "group_by_doc needs chunked documents, but collection 'never' is empty and no chunk "
            'was ever written to it; write its documents with chunking ("chunk": true in the '
            "documents write) before searching by document"
        )
        http.post("/v1/collections/whole/documents", json={"documents": DOCS})
        whole = http.post("/v1/collections/whole/search", json=grouped)
        said = whole.json()["error"]["message"]
        assert whole.status_code == 422 and "probembed" not in said
        assert (
            'holds whole documents (no doc_id column); write them with chunking ("chunk": ' in said
        )
        chunked = {"documents": DOCS, "chunk": True}
        assert http.post("/v1/collections/emptied/documents", json=chunked).is_success
        ids = [d["id"] for d in DOCS]
        http.post("/v1/collections/emptied/delete", json={"ids": ids, "doc": True})
        emptied = http.post("/v1/collections/emptied/search", json=grouped)
        assert emptied.status_code == 200 and emptied.json()["results"][0]["hits"] == []
        for name in ("never", "whole", "emptied"):
            http.delete(f"/v1/collections/{name}")


def test_a_lone_surrogate_is_a_422_naming_the_text(server):
    """A JSON "\\ud800" escape parses to a str no tokenizer reads: refused by position."""
    json_type = {"content-type": "application/json"}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "uni"})
        for path, body, says in (
            ("/v1/embeddings", '{"model": "hash", "input": ["ok", "a \\ud800 b"]}', "input[1]"),
            ("/v1/collections/uni/search", '{"query": "x \\udc80"}', '"query is not valid'),
            ("/v1/collections/uni/search", '{"queries": ["x \\udc80"]}', "queries[0]"),
            ("/v1/embeddings", '{"model": "hash", "input": "a \\ud800"}', '"input is not valid'),
            ("/v1/collections/uni/delete", '{"ids": ["a", "b\\ud800"]}', "ids[1]"),
            (  # chunking hashed the title before any check: a message about the codec
                "/v1/collections/uni/documents",
                '{"documents": [{"id": "t", "text": "x", "metadata": {"title": "\\ud800"}}],'
                ' "chunk": true}',
                "documents[0]: its metadata",
            ),
            (  # every id takes the prefix: refused once, not per document
                "/v1/collections/uni/documents",
                '{"documents": [{"id": "t", "text": "x"}], "prefix": "\\ud800/"}',
                "prefix is not valid Unicode",
            ),
        ):
            answer = http.post(path, content=body, headers=json_type)
            assert answer.status_code == 422, answer.text
            assert says in answer.text and "lone surrogate" in answer.text, answer.text


def test_a_body_that_is_not_utf8_is_a_400_whatever_json_loads_makes_of_it(server):
    """FastAPI's `json.loads` of the bytes read CESU-8 (Java's modified UTF-8: a surrogate
    pair's halves encoded one by one) as lone surrogates, a 422 naming the query, and UTF-16
    as JSON; docs/service.md promises a 400 for a body that is not UTF-8. A byte order mark before
    UTF-8 is still read."""
    json_type = {"content-type": "application/json"}
    search = "/v1/collections/bytes/search"
    with server.client() as http:
        http.post("/v1/collections", json={"name": "bytes"})
        for body, said in (
            (b'{"query": "x \xed\xa0\xbd\xed\xb8\x80"}', "not UTF-8 text (byte 0xed at offset 13)"),
            ('{"query": "x"}'.encode("utf-16"), "the body is UTF-16 text, not UTF-8"),
            ('{"query": "x"}'.encode("utf-32-le"), "the body is UTF-32LE text, not UTF-8"),
        ):
            answer = http.post(search, content=body, headers=json_type)
            assert answer.status_code == 400, answer.text
            assert said in answer.json()["error"]["message"], answer.text
        marked = http.post(search, content=b'\xef\xbb\xbf{"query": "x"}', headers=json_type)
        assert marked.status_code == 200, marked.text


def test_a_document_whose_metadata_uses_the_key_probembed_is_a_422_naming_it(server):
    """The adapters give a hit's numbers under metadata["probembed"] and refuse user metadata
    there; the service stored it, so the item read one way here and another through them.
    Plain and chunked writes refuse it naming the document's index (skip: that document)."""
    mine = {"id": "m", "text": "A note about dogs.", "metadata": {"probembed": "mine"}}
    with server.client() as http:
        for chunk in (False, True):
            name = f"reserved-{chunk}"
            http.post("/v1/collections", json={"name": name})
            body = {"documents": [DOCS[0], mine], "chunk": chunk}
            refused = http.post(f"/v1/collections/{name}/documents", json=body)
            assert refused.status_code == 422, refused.text
            said = "documents[1]: document 'm': metadata uses the key 'probembed'"
            assert said in refused.text and "rename that field" in refused.text, refused.text
            assert http.get(f"/v1/collections/{name}").json()["count"] == 0
            skipping = {**body, "on_error": "skip"}
            report = http.post(f"/v1/collections/{name}/documents", json=skipping).json()
            assert [s.split(":")[0] for s in report["skipped"]] == ["documents[1]"], report
            assert report["added"] == 1
            http.delete(f"/v1/collections/{name}")


def test_a_refusal_that_echoes_nan_or_a_surrogate_still_names_the_field(server):
    """Pydantic echoes the input; a NaN or a lone surrogate in it made the refusal itself
    fail to render, and the client read "Out of range float values are not JSON compliant"."""
    json_type = {"content-type": "application/json"}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "echo"})
        for body, says in (
            ('{"query": "x", "min_p_relevant": NaN}', "min_p_relevant: Input should be a finite"),
            ('{"query": "x", "k": Infinity}', "k:"),
            ('{"query": "x", "score": "\\ud800"}', "score:"),
        ):
            answer = http.post("/v1/collections/echo/search", content=body, headers=json_type)
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["message"].startswith(says), answer.text


def test_probes_by_head_and_bodies_not_sent_as_plain_json_are_answered_in_a_clients_terms(server):
    """Load balancers probe with HEAD: /healthz and /readyz answered 405. A body sent as
    text, a form or without a type was refused with pydantic's "Input should be a valid
    dictionary" as its `detail`, and a gzip body as "not UTF-8 text (byte 0x8b)"."""
    body = json.dumps({"model": "hash", "input": ["a"]}).encode()
    with server.client() as http:
        for path in ("/healthz", "/readyz", "/readyz/"):
            probed = http.head(path)
            assert (probed.status_code, probed.content) == (200, b""), (path, probed.text)
        for content_type, named in (
            ("text/plain", "Content-Type 'text/plain'"),
            (
                "application/x-www-form-urlencoded",
                "Content-Type 'application/x-www-form-urlencoded'",
            ),
            ("", "no Content-Type"),
        ):
            sent = http.post("/v1/embeddings", content=body, headers={"content-type": content_type})
            assert sent.status_code == 415, sent.text
            assert sent.json()["detail"] == (
                f"the body must be JSON, sent with Content-Type: application/json (got {named})"
            )
        packed = {"content-type": "application/json", "content-encoding": "gzip"}
        zipped = http.post("/v1/embeddings", content=gzip.compress(body), headers=packed)
        assert zipped.status_code == 415, zipped.text
        assert zipped.json()["detail"] == (
            "Content-Encoding 'gzip' is not supported: send the body uncompressed"
        )


def test_metrics_tell_the_process_its_requests_its_encoders_and_only_live_collections(
    tmp_path, pydoc_pipeline_dir
):
    """An encoding child killed (SIGKILL) was replaced without a word in the log or the
    metrics; the registry had no process metrics and no gauge of requests in flight, and
    every counter and histogram a `_created` series; a collection dropped by another process
    (the CLI) kept its item count for as long as the server ran."""
    with (
        Server(tmp_path / "db", pydoc_pipeline_dir, "--workers", "1") as server,
        server.client() as http,
    ):
        for name in ("listed", "searched"):
            assert http.post("/v1/collections", json={"name": name}).status_code == 201
            body = {"documents": DOCS}
            assert http.post(f"/v1/collections/{name}/documents", json=body).is_success
        encoders = encoding_children(server)
        assert len(encoders) == 1, encoders
        os.kill(encoders[0], signal.SIGKILL)
        embedded = http.post("/v1/embeddings", json={"model": "hash", "input": ["after"]})
        assert embedded.status_code == 200, embedded.text  # the batch given to the replacement
        before = http.get("/metrics").text
        database = Database(server.db)
        database.drop("listed")
        database.drop("searched")
        assert http.get("/v1/collections").status_code == 200
        assert http.post("/v1/collections/searched/search", json={"query": "x"}).status_code == 404
        after = http.get("/metrics").text
    assert 'probembed_encoder_respawns_total{pipeline="hash"} 1.0' in before
    assert "an encoding child of" in server.output and "died" in server.output
    for family in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
    ):
        assert f"\n{family} " in before, family
    assert "probembed_requests_in_flight 1.0" in before  # the scrape itself
    assert "_created" not in before
    assert 'probembed_collection_items{collection="listed"} 3.0' in before
    assert 'probembed_collection_items{collection="searched"} 3.0' in before
    assert "probembed_collection_items{" not in after, after


def test_the_common_mistakes_of_a_client_are_said_in_its_terms(server):
    """What `error.message` said (what OpenAI clients show) lost the cause: a form-encoded
    body ("Input should be a valid dictionary"), a trailing comma ("22: JSON decode error"),
    pydantic's union tags (`chunk.function-after[_overlap_fits(), ChunkOptions].max_tokens`
    beside `chunk.bool`), `--on-error skip` to an HTTP client, "model" for a `pipeline`."""
    json_type = {"content-type": "application/json"}
    search = "/v1/collections/words/search"

    def said(answer, status=422):
        assert answer.status_code == status, answer.text
        return answer.json()["error"]["message"]

    with server.client() as http:
        http.post("/v1/collections", json={"name": "words"})
        form = http.post(search, content=b'{"query": "leak"}')  # curl -d: no JSON content type
        assert said(form, 415) == (
            "the body must be JSON, sent with Content-Type: application/json (got no Content-Type)"
        )
        assert form.json()["detail"] == said(form, 415)  # was pydantic's "a valid dictionary"
        comma = http.post(search, content=b'{"query": "leak", "k": 1,}', headers=json_type)
        assert said(comma).startswith("the body is not valid JSON at character 26: Expecting")
        garbled = http.post(search, content=b'{"query": "\xff"}', headers=json_type)
        assert said(garbled, 400).startswith("the body is not UTF-8 text (byte 0xff at offset 11)")
        deep = b'{"query": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # past the parser's depth
        assert said(http.post(search, content=deep, headers=json_type), 400).startswith(
            "the body nests arrays or objects too deeply to be read"
        )
        listed = http.get("/openapi.json").json()["paths"][search.replace("words", "{name}")]
        assert "400" in listed["post"]["responses"]  # schemathesis: a status it did not list
        ndjson = {"content-type": "application/x-ndjson"}  # a JSON body FastAPI does not parse
        assert said(http.post(search, content=b'{"query": "leak"}', headers=ndjson), 415) == (
            "the body must be JSON, sent with Content-Type: application/json (got Content-Type "
            "'application/x-ndjson')"
        )
        documents = "/v1/collections/words/documents"
        chunk = {"documents": [{"id": "a", "text": "x"}], "chunk": {"max_tokens": 5}}
        assert said(http.post(documents, json=chunk)) == (
            "chunk.max_tokens: Input should be greater than or equal to 8"
        )
        skipped = http.post(documents, json={"documents": [{"id": "a", "text": " "}]})
        assert 'send "on_error": "skip" to skip them' in said(skipped)
        shapeless = http.post("/v1/embeddings", json={"model": "hash", "input": 5})
        assert said(shapeless) == (
            "input: Input should be a valid string or Input should be a valid list"
        )
        unknown = http.post("/v1/collections", json={"name": "y", "pipeline": "nope"})
        assert said(unknown) == "pipeline 'nope' is not served here; pipelines: hash"
        # the shape the body gave, not "or Input should be a valid boolean" beside it
        overlap = {
            "documents": [{"id": "a", "text": "x"}],
            "chunk": {"max_tokens": 8, "overlap_tokens": 4},
        }
        refused = http.post(documents, json=overlap)
        told = said(refused)
        assert told.startswith("chunk: overlap") and "boolean" not in told
        assert [e["loc"] for e in refused.json()["detail"]] == [["body", "chunk"]]  # no tags
        # token ids: one sentence, not a complaint per id
        tokens = http.post("/v1/embeddings", json={"model": "hash", "input": list(range(2000))})
        assert said(tokens) == (
            "input: token ids are not supported here: send text, a string or a list of strings"
        )
        # places named as the app's own checks name them, a lone surrogate in its words
        placed = http.post(
            documents,
            content=b'{"documents": [{"id": "a", "text": "x"}, {"id": 5.5, "text": "y"}]}',
            headers=json_type,
        )
        assert said(placed) == (
            "documents[1].id: Input should be a valid string or integer, got 5.5"
        )
        lone = http.post(
            documents, content=b'{"documents": [{"id": "\\ud800", "text": "y"}]}', headers=json_type
        )
        assert said(lone).startswith(
            "documents[0].id is not valid Unicode: it holds a lone surrogate"
        )
        assert said(http.post(search, content=b"", headers=json_type)).startswith(
            "the body is empty;"
        )
        # a large refused body is not echoed whole, and 300 bad items are not all listed
        many = [{"id": i + 0.5, "text": "y" * 20_000} for i in range(300)]
        answer = http.post(documents, json={"documents": many, "sync": True})
        assert said(answer).endswith(
            "documents[9].id: Input should be a valid string or integer, got 9.5; and 290 more"
        )
        assert len(answer.content) < 20_000, len(answer.content)


def test_a_document_to_chunk_is_bounded_by_the_body_not_the_character_limit(server):
    """Chunking exists for long documents, yet over HTTP one of 45,000 characters was refused
    by --max-chars (32,768), which bounds what one encode reads: a chunk here."""
    long = " ".join(f"word{i}" for i in range(6_000))  # 52,889 characters
    document = {"documents": [{"id": "long", "text": long}]}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "long"})
        whole = http.post("/v1/collections/long/documents", json=document)
        chunked = http.post("/v1/collections/long/documents", json={**document, "chunk": True})
        schema = http.get("/openapi.json").json()["components"]["schemas"]
    assert whole.status_code == 422 and "--max-chars" in whole.text
    assert chunked.status_code == 200 and chunked.json()["chunks_written"] > 1, chunked.text
    text = schema["Document"]["properties"]["text"]
    assert "maxLength" not in text and "unless the write chunks" in text["description"]


def test_a_chunked_write_says_how_many_chunks_the_character_cap_ended(server):
    """Thai has no spaces between words: a chunk of 32 tokens held 2,250 characters of it, and
    the answer said nothing. Chunks now hold at most 16 characters a token, and the answer
    counts those the cap ended."""
    thai = "แม่น้ำท่วมหมู่บ้านหลังฝนตกหนักสามวันและชาวบ้านต้องอพยพไปอยู่ที่วัดใกล้เคียง"
    document = {"documents": [{"id": "th", "text": thai * 30}], "chunk": {"max_tokens": 32}}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "thai"})
        written = http.post("/v1/collections/thai/documents", json=document)
    assert written.status_code == 200, written.text
    assert (written.json()["chunks_written"], written.json()["chunks_by_chars"]) == (5, 4)


def test_search_takes_the_score_names_the_cli_takes(server):
    """`--score cosine` worked on the command line and was a 422 over HTTP."""
    with server.client() as http:
        http.post("/v1/collections", json={"name": "alias"})
        http.post("/v1/collections/alias/documents", json={"documents": DOCS})
        found = {}
        for score in ("dot", "cosine", " Dot ", "uec", "UEC"):
            answer = http.post(
                "/v1/collections/alias/search", json={"query": "a cat", "score": score}
            )
            assert answer.status_code == 200, answer.text
            found[score] = [(h["id"], h["score"]) for h in answer.json()["results"][0]["hits"]]
        assert found["dot"] == found["cosine"] == found[" Dot "] and found["uec"] == found["UEC"]
        assert found["dot"] != found["uec"]
        assert http.delete("/v1/collections/alias").status_code == 200  # the server is shared


def deep(levels: int) -> list:
    """A value nested this many lists deep."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_bad_documents_are_named_and_nothing_is_written(server):
    with server.client() as http:
        http.post("/v1/collections", json={"name": "strict"})
        http.post("/v1/collections/strict/documents", json={"documents": DOCS[:1]})
        for documents, says in (
            ([DOCS[1], {"id": "e", "text": "   "}], r"documents\[1\].*'e' has no text: empty or"),
            ([{"id": "z", "text": "\u200b\ufeff "}], r"documents\[0\].*'z' has no text: empty or"),
            ([{"id": "c", "text": "\x00\x01"}], r"documents\[0\].*'c' has no text: empty or"),
            ([DOCS[1], DOCS[1]], "duplicate id 'd2'"),
            ([{"id": "f", "text": "t", "metadata": {"year": "soon"}}], "year"),
            ([{"id": "", "text": "t"}], "id"),
            ([{"id": "i" * 1025, "text": "t"}], "at most 1024 characters"),
            # stored, then every search that found it was a 500 (the response's serialiser
            # gives up some 255 levels down)
            ([{"id": "n", "text": "t", "metadata": {"zz": deep(300)}}], "more than 32 levels"),
        ):
            answer = http.post("/v1/collections/strict/documents", json={"documents": documents})
            assert answer.status_code == 422 and re.search(says, answer.text), answer.text
        assert http.get("/v1/collections/strict").json()["count"] == 1
        skipping = {"documents": [DOCS[1], {"id": "e", "text": " "}], "on_error": "skip"}
        report = http.post("/v1/collections/strict/documents", json=skipping).json()
        assert (report["added"], report["count"]) == (1, 2)
        assert len(report["skipped"]) == 1 and "documents[1]" in report["skipped"][0]
        # an over-long text or a lone surrogate refused the whole write, "skip" or not
        long, broken = {"id": "l", "text": "x " * 16_500}, {"id": "u", "text": "ok \ud800"}
        for chunk in (False, True):
            name = f"skips-{chunk}"
            http.post("/v1/collections", json={"name": name})
            body = {"documents": [DOCS[2], long, broken], "on_error": "skip", "chunk": chunk}
            raw = json.dumps(body)  # ASCII escapes: "\\ud800" reaches the server as sent
            answer = http.post(
                f"/v1/collections/{name}/documents",
                content=raw,
                headers={"content-type": "application/json"},
            )
            assert answer.status_code == 200, answer.text
            report = answer.json()
            skipped = ["documents[2]"] if chunk else ["documents[1]", "documents[2]"]
            assert [s.split(":")[0] for s in report["skipped"]] == skipped, report
            assert report["added"] == (2 if chunk else 1)  # chunked: no character limit


MANUAL = (
    "# Manual\n\nAn introduction.\n\n"
    + "\n\n".join(
        f"## Part {i}\n\n" + " ".join(f"Routine step {i}.{j} of the procedure." for j in range(12))
        for i in range(6)
    )
    + "\n\n## Troubleshooting\n\nThe flux capacitor overheats when left on.\n"
)


def test_chunked_documents_are_found_by_document_and_rewritten_only_when_changed(
    server, pydoc_pipeline
):
    chunk = {"max_tokens": 48, "overlap_tokens": 8, "markdown": True}
    docs = [
        {"id": "manual", "text": MANUAL, "metadata": {"kind": "guide"}},
        {"id": "note", "text": "Plain notes about tomato plants.", "metadata": {"kind": "note"}},
    ]
    settings = ChunkSettings(48, 8).capped(pydoc_pipeline.max_tokens)
    expected = chunk_text(MANUAL, markdown_sections(MANUAL), pydoc_pipeline.count_tokens, settings)
    with server.client() as http:
        http.post("/v1/collections", json={"name": "chunks"})

        def write(documents, **options):
            body = {"documents": documents, "chunk": chunk, **options}
            return http.post("/v1/collections/chunks/documents", json=body)

        first = write(docs).json()
        assert (first["added"], first["updated"], first["unchanged"], first["removed"]) == (
            2, 0, 0, 0)  # fmt: skip
        assert first["chunks_written"] == first["count"] == len(expected) + 1
        again = write(docs).json()
        assert (again["unchanged"], again["chunks_written"], again["count"]) == (
            2,
            0,
            first["count"],
        )
        found = http.post(
            "/v1/collections/chunks/search",
            json={"query": "flux capacitor overheats", "k": 2, "exact": True, "group_by_doc": True},
        ).json()["results"][0]["hits"]
        top = found[0]
        meta = top["metadata"]
        assert (meta["doc_id"], meta["heading"], meta["kind"]) == (
            "manual", "Manual > Troubleshooting", "guide")  # fmt: skip
        assert MANUAL[meta["start"] : meta["end"]] == top["text"] and "flux" in top["text"]
        assert top["other_chunks"] >= 0 and len({h["metadata"]["doc_id"] for h in found}) == 2
        edited = {**docs[0], "text": MANUAL.replace("flux capacitor", "gizmo")}
        synced = write([edited], sync=True).json()
        assert (synced["added"], synced["updated"], synced["removed"], synced["unchanged"]) == (
            0, 1, 1, 0)  # fmt: skip
        assert synced["chunks_removed"] >= 1 and synced["count"] == len(expected)
        for documents, options, says in (
            ([docs[1], docs[1]], {}, "duplicate document id 'note'"),
            ([docs[1]], {"chunk": {"max_tokens": 48, "overlap_tokens": 30}}, "overlap_tokens"),
            ([docs[1]], {"chunk": False, "sync": True}, "holds documents as chunks"),
            # no folder to explain to an API client: the refusal says what is true of its input
            (
                [{"id": "other", "text": "Another text."}],
                {"sync": True},
                r"the input names none of them\. Leave out sync(?!.*folder)",
            ),
            # asked not to replace, a changed document was replaced all the same
            ([edited], {"upsert": False}, "upsert false does not apply with chunk"),
        ):
            refused = write(documents, **options)
            assert refused.status_code == 422 and re.search(says, refused.text), refused.text
        assert http.get("/v1/collections/chunks").json()["count"] == len(expected)
        # a second source under its own prefix: its sync leaves the documents above alone
        crm = [
            {"id": "7", "text": "A customer asked about the gizmo."},
            {"id": "8", "text": "Another customer."},
        ]
        beside = write(crm, sync=True, prefix="crm/").json()
        assert (beside["added"], beside["removed"], beside["count"]) == (2, 0, len(expected) + 2)
        kept = write(crm[1:], sync=True, prefix="crm/").json()
        assert (kept["unchanged"], kept["removed"], kept["count"]) == (1, 1, len(expected) + 1)
        ids = {
            h["metadata"]["doc_id"]
            for h in http.post(
                "/v1/collections/chunks/search", json={"query": "customer", "k": 20}
            ).json()["results"][0]["hits"]
        }
        assert ids == {"manual", "crm/8"}  # "note" went with the sync above
        # a blank text is no text to index, not bad input: a sync removes its stored document
        # (not the prefix's every one: that sync is refused as one naming none of them is)
        blank = [{"id": "8", "text": "   "}, {"id": "9", "text": ""}]
        refused = write(blank, sync=True, prefix="crm/")  # "8" is the prefix's only document
        assert refused.status_code == 422 and "1 of them are files with no text" in refused.text
        third = {"id": "10", "text": "A third customer."}
        assert write([third], prefix="crm/").status_code == 200
        emptied = write([*blank, third], sync=True, prefix="crm/")
        assert emptied.status_code == 200, emptied.text
        said = emptied.json()
        assert (said["empty"], said["emptied"], said["unchanged"], said["skipped"]) == (2, 1, 1, [])
        assert said["count"] == len(expected) + 1


def test_a_chunked_write_counts_the_documents_it_cut_at_the_defaults_for_recording_none(server):
    """Documents an earlier release chunked record no settings: a write given none cut them
    at the defaults and counted them as plain updates. `unrecorded` counts them apart, as the
    OpenAPI schema says; a write sending both settings cuts none at the defaults."""
    note = {"id": "note", "text": "Plain notes about tomato plants."}
    sent = [{"id": "manual", "text": MANUAL}, note]
    with server.client() as http:
        http.post("/v1/collections", json={"name": "upgraded"})

        def write(chunk):
            body = {"documents": sent, "chunk": chunk}
            answer = http.post("/v1/collections/upgraded/documents", json=body)
            assert answer.status_code == 200, answer.text
            return answer.json()

        at_48 = {"max_tokens": 48, "overlap_tokens": 8}
        write(at_48)
        as_an_earlier_release_wrote(server.db, "upgraded")
        defaults = write(True)
        assert (defaults["updated"], defaults["rechunked"], defaults["unrecorded"]) == (2, 0, 2)
        assert defaults["chunked_at"] == {"max_tokens": 256, "overlap_tokens": 32}
        as_an_earlier_release_wrote(server.db, "upgraded")
        both = write(at_48)
        assert (both["updated"], both["unrecorded"]) == (2, 0)
        schema = http.get("/openapi.json").json()["components"]["schemas"]
    field = schema["WriteReport"]["properties"]["unrecorded"]
    assert "did not record their chunk settings" in field["description"]


def test_a_chunked_write_without_settings_leaves_each_document_at_its_own(server, pydoc_pipeline):
    """`"chunk": true` cut every document at 256 tokens: one stored at 48 was re-chunked and
    re-embedded without a word. Now a stored document keeps its settings (re-cut at them
    when changed), a new one gets the defaults, and settings sent re-chunk the documents cut
    at others, which the answer counts."""

    def cut(text: str, settings: ChunkSettings) -> int:
        """The chunks a plain document (its id no .md) is cut into at `settings`."""
        sections = plain_sections(text)
        return len(chunk_text(text, sections, pydoc_pipeline.count_tokens, settings))

    at_48 = ChunkSettings(48, 8)
    note = {"id": "note", "text": "Plain notes about tomato plants."}
    manual = {"id": "manual", "text": MANUAL}
    edited = {**manual, "text": MANUAL.replace("flux capacitor", "gizmo")}
    extra = {"id": "extra", "text": MANUAL.replace("Manual", "Handbook")}
    assert cut(edited["text"], at_48) != cut(edited["text"], ChunkSettings())
    with server.client() as http:
        http.post("/v1/collections", json={"name": "kept"})

        def write(documents, chunk, **options):
            body = {"documents": documents, "chunk": chunk, **options}
            answer = http.post("/v1/collections/kept/documents", json=body)
            assert answer.status_code == 200, answer.text
            return answer.json()

        first = write([manual, note], {"max_tokens": 48, "overlap_tokens": 8})
        again = write([manual, note], True, sync=True)
        assert (again["unchanged"], again["updated"], again["removed"]) == (2, 0, 0)
        assert (again["chunks_written"], again["chunks_removed"], again["rechunked"]) == (0, 0, 0)
        assert again["count"] == first["count"]
        assert again["chunked_at"] == {"max_tokens": 48, "overlap_tokens": 8}  # what they keep
        changed = write([edited, note, extra], {"markdown": False})  # no settings either
        assert (changed["added"], changed["updated"], changed["unchanged"]) == (1, 1, 1)
        own = cut(edited["text"], at_48)  # the manual at its 48, the new one at the 48
        assert cut(extra["text"], at_48) != cut(extra["text"], ChunkSettings())  # both share
        assert changed["chunks_written"] == own + cut(extra["text"], at_48)
        sent = write([edited, note, extra], {"max_tokens": 64})  # each keeps its overlap
        assert (sent["updated"], sent["rechunked"]) == (3, 3)
        assert sent["chunked_at"] == {"max_tokens": 64, "overlap_tokens": 8}
        assert write([edited, note, extra], {"max_tokens": 64})["rechunked"] == 0
        overlap = write([edited, note, extra], {"overlap_tokens": 4})  # each keeps its size
        assert (overlap["rechunked"], overlap["chunked_at"]) == (
            3, {"max_tokens": 64, "overlap_tokens": 4})  # fmt: skip
        write([note], {"max_tokens": 48, "overlap_tokens": 8})
        mixed = write([edited, note, extra], True)
        assert mixed["unchanged"] == 3 and mixed["chunked_at"] is None  # no one setting
        body = {"documents": [edited, note], "chunk": {"overlap_tokens": 30}}
        unfit = http.post("/v1/collections/kept/documents", json=body)
        assert unfit.status_code == 422 and "'note'" in unfit.text, unfit.text
        assert "'manual'" not in unfit.text and "the 48-token chunks" in unfit.text
        body["chunk"] = {"overlap_tokens": 200}  # over half the default and every stored size
        none = http.post("/v1/collections/kept/documents", json=body)
        assert none.status_code == 422, none.text
        assert "overlap_tokens must be in [0, max_tokens / 2), got 200: given alone" in none.text
        assert "'note'" not in none.text  # one refusal, not one per document


def test_a_markdown_document_is_titled_and_sectioned_as_the_cli_reads_its_file(
    server, pydoc_pipeline, tmp_path
):
    """A service document got `heading: ""` unless `"markdown": true`, and `title: ""` even
    then, where `probembed ingest --chunk` of the same .md file reads its front matter's title
    (else its first heading, else its name) and heading paths."""
    files = {
        "guide.md": "---\ntitle: The Guide\n---\n\n" + MANUAL,
        "notes.markdown": "Plain notes about tomato plants, with no heading at all.\n",
        "memo.md": MANUAL,
    }
    folder = tmp_path / "pages"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    cli = Database(tmp_path / "db", create=True).collection("pages")
    ingest_documents(folder, cli, pydoc_pipeline, ChunkSettings(48, 8))

    def read(hits: list[dict]) -> dict[str, tuple]:
        meta = [h["metadata"] for h in hits]
        return {h["id"]: (m.get("title"), m["heading"]) for h, m in zip(hits, meta, strict=True)}

    expected = read(cli.search("routine step", k=100, exact=True)["hits"])
    assert expected["guide.md#0"] == ("The Guide", "Manual")
    assert expected["notes.markdown#0"][0] == "notes" and expected["memo.md#0"][0] == "Manual"
    documents = [{"id": name, "text": text} for name, text in files.items()]
    plain = [  # neither named nor asked as Markdown: no headings, and no title to store
        {"id": "memo", "text": MANUAL},
        {"id": "asked", "text": MANUAL, "metadata": {"title": ""}},
    ]
    chunk = {"max_tokens": 48, "overlap_tokens": 8}
    with server.client() as http:
        http.post("/v1/collections", json={"name": "pages"})
        body = {"documents": documents + plain, "chunk": chunk}
        assert http.post("/v1/collections/pages/documents", json=body).is_success
        asked = {
            "documents": [{"id": "asked", "text": MANUAL}],
            "chunk": {**chunk, "markdown": True},
        }
        assert http.post("/v1/collections/pages/documents", json=asked).json()["updated"] == 1
        search = {"query": "routine step", "k": 100, "exact": True}
        hits = http.post("/v1/collections/pages/search", json=search).json()["results"][0]["hits"]
        http.delete("/v1/collections/pages")
    served = read(hits)
    assert {i: served[i] for i in expected} == expected
    memo = [h["metadata"] for h in hits if h["id"].startswith("memo#")]
    assert memo and all("title" not in m and m["heading"] == "" for m in memo)
    assert served["asked#0"] == ("Manual", "Manual")


def test_a_record_hashes_the_same_through_the_cli_and_the_service(
    server, pydoc_pipeline_dir, tmp_path
):
    """The service read a document whose id ends in .md as Markdown, `probembed ingest --chunk`
    read the same JSONL record as plain text, and the reading is in the hash: a record written
    through one and then the other was re-embedded at every switch. Both read it by its id."""
    texts = {
        "guide.md": "---\ntitle: The Guide\n---\n\n" + MANUAL.strip(),
        "notes.markdown": MANUAL.strip(),
        "memo": MANUAL.strip(),  # no Markdown id: plain through both
    }
    source = tmp_path / "records.jsonl"
    source.write_text(
        "".join(json.dumps({"_id": i, "text": t, "lang": "en"}) + "\n" for i, t in texts.items())
    )
    documents = [{"id": i, "text": t, "metadata": {"lang": "en"}} for i, t in texts.items()]
    body = {"documents": documents, "chunk": {"max_tokens": 48, "overlap_tokens": 8}}

    def cli_ingest(name: str) -> str:
        args = ["ingest", str(source), "--db", str(server.db), "-c", name, "--chunk"]
        args += ["--chunk-tokens", "48", "--overlap", "8", "--pipeline", str(pydoc_pipeline_dir)]
        result = CliRunner().invoke(cli_app, args)
        assert result.exit_code == 0, result.output
        return result.output

    def stored(name: str) -> dict[str, tuple]:
        rows = Database(server.db).collection(name).db.table(name).to_arrow().to_pylist()
        return {r["id"]: (r["doc_hash"], r["title"], r["heading"]) for r in rows}

    cli_ingest("via-cli")
    with server.client() as http:
        again = http.post("/v1/collections/via-cli/documents", json=body).json()
        assert (again["unchanged"], again["chunks_written"]) == (3, 0), again
        http.post("/v1/collections", json={"name": "via-service"})
        first = http.post("/v1/collections/via-service/documents", json=body).json()
        assert first["added"] == 3, first
        again = http.post("/v1/collections/via-service/documents", json=body).json()
        assert (again["unchanged"], again["chunks_written"]) == (3, 0), again
        try:
            assert stored("via-cli") == stored("via-service")
            assert stored("via-cli")["guide.md#0"][1:] == ("The Guide", "Manual")
            assert "unchanged 3" in cli_ingest("via-service")  # and back: nothing re-embedded
            assert "chunks written 0" in cli_ingest("via-service")
        finally:
            for name in ("via-cli", "via-service"):
                http.delete(f"/v1/collections/{name}")


def test_a_text_with_surrounding_whitespace_is_one_record_through_every_front_door(
    server, pydoc_pipeline_dir, tmp_path
):
    """`probembed ingest` strips a JSONL text's surrounding whitespace; the service, a Python
    `Record` and the adapters kept it, so a record ingested by the CLI and sent again to the
    service was a changed one (re-embedded with upsert, chunks re-written). Every front door
    strips it now."""
    texts = {
        "w1": "  The cat sat on the mat near the door.\n",
        "w2": "\tStock markets fell sharply on Monday.  \n\n",
        "w3": "A recipe for bread needs flour and water.",
    }
    source = tmp_path / "spaced.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    documents = [{"id": i, "text": t} for i, t in texts.items()]
    chunk = {"max_tokens": 48, "overlap_tokens": 8}
    for name, options in (("ws-plain", []), ("ws-chunks", ["--chunk", "--chunk-tokens", "48"])):
        args = ["ingest", str(source), "--db", str(server.db), "-c", name, *options]
        args += ["--overlap", "8"] if options else []
        done = CliRunner().invoke(cli_app, [*args, "--pipeline", str(pydoc_pipeline_dir)])
        assert done.exit_code == 0, done.output
    with server.client() as http:

        def write(name: str, **options) -> dict:
            body = {"documents": documents, **options}
            return http.post(f"/v1/collections/{name}/documents", json=body).json()

        try:
            again = write("ws-plain")
            assert (again["already_stored"], again["changed"]) == (3, 0), again
            again = write("ws-plain", upsert=True)
            assert (again["unchanged"], again["updated"]) == (3, 0), again
            again = write("ws-chunks", chunk=chunk)
            assert (again["unchanged"], again["chunks_written"]) == (3, 0), again
            found = http.post("/v1/collections/ws-plain/search", json={"query": "cat", "k": 3})
            stored = {h["id"]: h["text"] for h in found.json()["results"][0]["hits"]}
            assert stored == {i: t.strip() for i, t in texts.items()}
            records = [Record(i, t) for i, t in texts.items()]  # and from Python
            collection = Database(server.db).collection("ws-plain")
            assert ingest(records, collection, upsert=True).unchanged == 3
        finally:
            for name in ("ws-plain", "ws-chunks"):
                http.delete(f"/v1/collections/{name}")


def test_listing_collections_while_one_is_dropped_and_made_again_lists_the_others(server):
    """A collection dropped between reading the names and reading its stats made the whole
    listing a 404 (12 of 150 listings); whenever the drops land, every listing is a 200 with
    the kept collections in it. Two collections are dropped and made again, each by its own
    client: on the code before, 13 to 16 of 40 listings were a 404 (on a fresh server, and on
    one holding 30 more collections, as this module's does by then), so one of 25 met it."""
    stop = threading.Event()

    def churn(name: str) -> None:
        with server.client() as own:
            while not stop.is_set():
                own.post("/v1/collections", json={"name": name})
                own.delete(f"/v1/collections/{name}")

    with server.client() as http:
        for name in ("keep0", "keep1"):
            http.post("/v1/collections", json={"name": name})
        churning = [threading.Thread(target=churn, args=(f"churn{i}",)) for i in range(2)]
        for thread in churning:
            thread.start()
        try:
            listings = [http.get("/v1/collections") for _ in range(25)]
        finally:
            stop.set()
            for thread in churning:
                thread.join()
    assert [a.status_code for a in listings] == [200] * 25
    assert all({"keep0", "keep1"} <= {c["name"] for c in a.json()["data"]} for a in listings)


def test_metrics_export_requests_batches_and_items(server):
    with server.client() as http:
        http.post("/v1/collections", json={"name": "counted"})
        http.post("/v1/collections/counted/documents", json={"documents": DOCS})
        http.post("/v1/embeddings", json={"model": "hash", "input": "x"})
        http.get("/openapi.json")
        http.post("/v1/collections/x0/documents", content=b"x" * 20_000_000)  # 413, unrouted
        http.get("/docs-assets/swagger-ui.css")  # the docs pages' files: one label, their mount
        for n in range(3):  # paths a client makes up: redirected, unknown, no such asset
            http.get(f"/v1/collections/junk{n}/")
            http.get(f"/nowhere/{n}")
            http.get(f"/docs-assets/junk{n}.js")
        text = http.get("/metrics").text
    assert 'probembed_requests_total{method="POST",route="/v1/embeddings",status="200"}' in text
    assert 'route="/v1/collections/{name}/documents"' in text  # templates, never raw paths
    assert 'route="/openapi.json"' in text
    assert 'route="unmatched",status="413"' in text and 'route="unmatched",status="404"' in text
    assert 'route="/docs-assets",status="200"' in text
    assert 'route="/docs-assets",status="404"' in text
    assert "x0" not in text and "junk" not in text and "nowhere" not in text
    assert "swagger-ui" not in text
    assert 'probembed_collection_items{collection="counted"} 3.0' in text
    count = re.search(r'probembed_encode_batch_texts_count\{pipeline="hash"\} (\d+)', text)
    assert count is not None and int(count.group(1)) >= 2
    assert "probembed_encode_queue_texts" in text and "probembed_request_duration_seconds" in text


def test_a_collections_own_pipeline_named_like_a_served_one_has_its_own_metric_series(
    tmp_path, pydoc_pipeline_dir
):
    """Both batchers wrote pipeline="hash": the queue gauge read whichever moved last."""
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline

    spec = ModelSpec("hash", "laplace", encoder_params={"dim": 40})
    pairs = [("a cat", "the cat"), ("a dog", "one dog"), ("red car", "a red car")]
    theirs = Pipeline.fit([spec], pairs, FusionConfig("mean"), name="hash", cache=False)
    Database(tmp_path / "db", create=True).collection("theirs").create(theirs)
    with _in_process(tmp_path, pydoc_pipeline_dir) as http:  # a batcher each
        assert http.post("/v1/embeddings", json={"model": "hash", "input": "x"}).status_code == 200
        answer = http.post("/v1/collections/theirs/search", json={"query": "cat"})
        text = http.get("/metrics").text
    assert answer.status_code == 200, answer.text
    own = f"hash@{theirs.fingerprint[:8]}"
    assert f'probembed_encode_batch_texts_count{{pipeline="{own}"}} 1.0' in text
    assert 'probembed_encode_batch_texts_count{pipeline="hash"} 1.0' in text


def test_health_and_readiness(server):
    with server.client() as http:
        assert http.get("/healthz").json() == {"status": "ok", "pipelines": ["hash"], "error": None}
        assert f"ready on {server.url}: pipelines ['hash']" in server.output  # where to call it
        listening = server.output.index(f"listening on {server.url}, loading pipelines [")
        assert listening < server.output.index("ready on")  # --port 0 is known while loading
        assert http.get("/readyz").json() == {
            "status": "ready",
            "pipelines": ["hash"],
            "error": None,
            "unservable": {},
        }
        assert http.get("/openapi.json").json()["info"]["title"] == "probembed"


@pytest.fixture(scope="module")
def tight(tmp_path_factory, pydoc_pipeline_dir):
    """A server with small limits, batches of 4 and one encoder (several free at once would
    split a batch between them). A batch waits up to 60 s (the most the settings take) to
    fill: each test fills its own, so none rests on how soon a stalled runner gets on."""
    root = tmp_path_factory.mktemp("tight")
    limits = ["--max-inputs", "4", "--max-chars", "50", "--max-body-bytes", "2000"]
    batching = ["--max-batch", "4", "--max-queue", "4", "--max-wait-ms", "60000", "--workers", "1"]
    with Server(root / "db", pydoc_pipeline_dir, *limits, *batching) as running:
        yield running


def test_limits_are_named(tight):
    with tight.client() as http:
        many = http.post("/v1/embeddings", json={"model": "hash", "input": ["a"] * 5})
        long = http.post("/v1/embeddings", json={"model": "hash", "input": ["a" * 51]})
        body = http.post("/v1/embeddings", json={"model": "hash", "input": ["a " * 1500]})
        ids = http.post("/v1/collections/any/delete", json={"ids": list("abcde")})
        skipping = {"documents": [{"id": i, "text": i} for i in "abcde"], "on_error": "skip"}
        docs = http.post("/v1/collections/any/documents", json=skipping)  # skip skips no limit
        schema = http.get("/openapi.json").json()
    # the schema states this server's limits, the body's too (no JSON Schema keyword has it)
    texts = schema["components"]["schemas"]["EmbeddingRequest"]["properties"]["input"]
    assert (
        schema["info"]["x-max-body-bytes"] == 2000 and "2000 bytes" in schema["info"]["description"]
    )
    assert '"maxItems": 4' in json.dumps(texts) and '"maxLength": 50' in json.dumps(texts)
    assert many.status_code == 413 and "--max-inputs" in many.text
    assert ids.status_code == 413 and "--max-inputs" in ids.text
    assert docs.status_code == 413 and "--max-inputs" in docs.text
    assert long.status_code == 422 and "--max-chars" in long.text
    assert body.status_code == 413 and "--max-body-bytes" in body.text
    assert body.json()["error"]["message"] == body.json()["detail"]  # what OpenAI clients read


def test_a_body_that_cannot_be_parsed_and_an_unknown_route_carry_the_error_object(server):
    with server.client() as http:
        garbled = http.post(
            "/v1/embeddings",
            content=b'{"model": "hash", "input": "\xff\xfe"}\xff',
            headers={"content-type": "application/json"},
        )
        nowhere = http.get("/v1/nowhere")
    assert garbled.status_code in (400, 422)  # refused by the JSON parser, never a 5xx
    assert nowhere.status_code == 404
    for answer in (garbled, nowhere):
        error = answer.json()["error"]
        assert error["message"] and error["type"] in ("invalid_request_error", "not_found_error")


def batch_counts(http) -> tuple[int, int]:
    """(batches encoded, texts encoded) so far, from /metrics."""
    text = http.get("/metrics").text
    count = re.search(r'probembed_encode_batch_texts_count\{pipeline="hash"\} (\S+)', text)
    total = re.search(r'probembed_encode_batch_texts_sum\{pipeline="hash"\} (\S+)', text)
    return (0, 0) if count is None else (int(float(count.group(1))), int(float(total.group(1))))


def wait_for_queue(http, texts: int) -> None:
    """Until `texts` texts wait in the hash pipeline's encode queue (10 s at most)."""
    deadline = time.monotonic() + 10
    while (
        f'probembed_encode_queue_texts{{pipeline="hash"}} {texts:.1f}'
        not in http.get("/metrics").text
    ):
        assert time.monotonic() < deadline, f"{texts} texts never reached the queue"
        time.sleep(0.05)


def test_a_documents_text_is_measured_as_stored_and_other_texts_as_sent(tight):
    """--max-chars measured a document's text before the whitespace around it was stripped
    (every front door stores, hashes and embeds it stripped: `Record`), so a text within the
    limit was refused for its padding. A document's text is measured as stored now; texts
    embedded as sent (/v1/embeddings, a search's query) are measured as sent; each message
    says which."""
    padded = "\n\n" + "x" * 50 + "   \n"  # 56 characters sent, 50 stored
    documents = [{"id": "p0", "text": padded}]
    documents += [{"id": f"p{i}", "text": f"Short text {i}."} for i in (1, 2, 3)]  # a batch of 4
    over = [{"id": "o", "text": "  " + "y" * 51 + "\n"}]  # 54 sent, 51 stored
    within = "z" * 46  # 51 characters sent with the 5 spaces around it
    with tight.client() as http:
        assert http.post("/v1/collections", json={"name": "padded"}).status_code == 201
        written = http.post("/v1/collections/padded/documents", json={"documents": documents})
        refused = http.post("/v1/collections/padded/documents", json={"documents": over})
        body = {"documents": over, "on_error": "skip"}
        skipped = http.post("/v1/collections/padded/documents", json=body)
        embedded = http.post("/v1/embeddings", json={"model": "hash", "input": [f"  {within}   "]})
        query = {"query": f"{within}     ", "k": 1}
        searched = http.post("/v1/collections/padded/search", json=query)
        schema = http.get("/openapi.json").json()["components"]["schemas"]
    assert written.status_code == 200 and written.json()["added"] == 4, written.text
    stored = Database(tight.db).collection("padded").rows(["p0"], ["text"])
    assert stored["p0"]["text"] == "x" * 50
    limit = "the limit is 50 (--max-chars)"
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        f"documents[0].text has 51 characters without its surrounding whitespace; {limit}"
    )
    assert skipped.status_code == 200 and skipped.json()["skipped"] == [
        f"documents[0]: document 'o': its text has 51 characters without its surrounding "
        f"whitespace; {limit}"
    ]
    as_sent = f"has 51 characters as sent, with its surrounding whitespace; {limit}"
    assert embedded.status_code == 422 and embedded.json()["detail"] == f"input[0] {as_sent}"
    assert searched.status_code == 422 and searched.json()["detail"] == f"query {as_sent}"
    text = schema["Document"]["properties"]["text"]["description"]
    assert "At most 50 characters (--max-chars) without its surrounding whitespace" in text


def test_concurrent_requests_share_one_encode_batch(tight):
    # four single-text requests fill a batch of 4, which is released at once: no timing
    with tight.client() as http:
        before = batch_counts(http)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda t: http.post(
                "/v1/embeddings", json={"model": "hash", "input": t}), "abcd"))  # fmt: skip
        after = batch_counts(http)
    assert [a.status_code for a in answers] == [200] * 4
    assert (after[0] - before[0], after[1] - before[1]) == (1, 4)


def test_writers_racing_for_one_new_id_each_get_a_200_and_one_row_is_stored(tight):
    # all four pass the stored-id check before any commits, since their texts are encoded in
    # one batch of 4 released together; then they commit one by one: the first adds the row,
    # the others find it stored (no timing: the batch is released only when full)
    document = {"documents": [{"id": "same", "text": "One id, four writers."}]}
    with tight.client() as http:
        assert http.post("/v1/collections", json={"name": "race"}).status_code == 201
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: http.post(
                "/v1/collections/race/documents", json=document), range(4)))  # fmt: skip
    assert [a.status_code for a in answers] == [200] * 4
    reports = [a.json() for a in answers]
    assert sorted(r["added"] for r in reports) == [0, 0, 0, 1]
    assert sum(r["already_stored"] for r in reports) == 3
    assert {r["count"] for r in reports} == {1}


def test_full_queue_answers_429_with_retry_after(tight):
    with tight.client() as http, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            http.post, "/v1/embeddings", json={"model": "hash", "input": ["a"] * 3}
        )
        wait_for_queue(http, 3)
        refused = http.post("/v1/embeddings", json={"model": "hash", "input": ["b", "c"]})
        filler = http.post("/v1/embeddings", json={"model": "hash", "input": ["d"]})
        assert filler.status_code == waiting.result().status_code == 200  # a batch of 4: not lost
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "--max-queue" in refused.text


def test_a_write_waiting_for_the_encoder_does_not_hold_up_its_collection(tight):
    # the write's one text waits for a batch of 4 (three more texts); meanwhile its collection
    # answers (a write that kept the collection's lock while encoding would make this wait
    # until the text had left the queue), and then the write lands
    document = {"documents": [{"id": "a", "text": "A cat sat."}]}
    with tight.client() as http, ThreadPoolExecutor(1) as pool:
        assert http.post("/v1/collections", json={"name": "busy"}).status_code == 201
        writing = pool.submit(http.post, "/v1/collections/busy/documents", json=document)
        wait_for_queue(http, 1)
        stats = http.get("/v1/collections/busy")
        still_waiting = (
            'probembed_encode_queue_texts{pipeline="hash"} 1.0' in http.get("/metrics").text
        )
        assert stats.status_code == 200 and stats.json()["count"] == 0 and still_waiting
        http.post("/v1/embeddings", json={"model": "hash", "input": ["x", "y", "z"]})
        assert writing.result().json()["count"] == 1


def test_chunked_writes_queued_on_one_collection_leave_the_others_answering(tight):
    # a chunked write encodes holding its collection's lock; writes queued behind it waited
    # for the lock inside the event loop's threads, more of them than it has, and a request
    # for another collection waited for the first write's batch to be released to get one
    writers = min(32, (os.cpu_count() or 1) + 4) + 2  # more than the loop's default threads
    with tight.client() as http, ThreadPoolExecutor(writers) as pool:
        for name in ("crowded", "quiet"):
            assert http.post("/v1/collections", json={"name": name}).status_code == 201
        writes = [
            pool.submit(
                http.post,
                "/v1/collections/crowded/documents",
                json={"documents": [{"id": f"d{i}", "text": f"Text {i}."}], "chunk": True},
            )
            for i in range(writers)
        ]
        wait_for_queue(http, 1)  # one write holds the lock, its text waits for a batch of 4
        quiet = http.get("/v1/collections/quiet")
        still_waiting = (
            'probembed_encode_queue_texts{pipeline="hash"} 1.0' in http.get("/metrics").text
        )
        while not all(w.done() for w in writes):  # three more texts release each write's one
            if 'probembed_encode_queue_texts{pipeline="hash"} 1.0' in http.get("/metrics").text:
                http.post("/v1/embeddings", json={"model": "hash", "input": ["x", "y", "z"]})
            else:  # the next write is not queued yet: a filler now would wait for a batch
                time.sleep(0.02)
    assert quiet.status_code == 200 and still_waiting
    assert [w.result().status_code for w in writes] == [200] * writers


def test_a_collection_dropped_while_requests_wait_for_the_encoder_answers_them_404(tight):
    # a search and a write wait in the queue with the handle they took; the drop closes it,
    # then two more texts fill the batch of 4 and release them (a 500 before: they ran on
    # the closed handle, whose files were gone)
    with tight.client() as http, ThreadPoolExecutor(2) as pool:
        assert http.post("/v1/collections", json={"name": "gone"}).status_code == 201
        document = {"documents": [{"id": "a", "text": "A cat sat."}]}
        searching = pool.submit(http.post, "/v1/collections/gone/search", json={"query": "cat"})
        writing = pool.submit(http.post, "/v1/collections/gone/documents", json=document)
        wait_for_queue(http, 2)
        assert http.delete("/v1/collections/gone").status_code == 200
        filler = http.post("/v1/embeddings", json={"model": "hash", "input": ["b", "c"]})
        answers = [searching.result(), writing.result()]
    assert filler.status_code == 200
    for answer in answers:
        assert answer.status_code == 404, answer.text
        assert "'gone' was dropped while this request ran" in answer.json()["detail"]


def test_an_encoding_child_that_dies_is_replaced(tmp_path, pydoc_pipeline_dir):
    """Killed as the OOM killer kills it, the child left every later request a 500."""
    running = Server(tmp_path / "db", pydoc_pipeline_dir, "--workers", "1")
    body = {"model": "hash", "input": "hello"}
    with running, running.client() as http:
        first = http.post("/v1/embeddings", json=body)
        encoders = [
            pid
            for pid in running.children()
            if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(encoders) == 1
        os.kill(encoders[0], signal.SIGKILL)
        again = [http.post("/v1/embeddings", json=body) for _ in range(2)]
    assert first.status_code == 200 and [a.status_code for a in again] == [200, 200]
    assert again[0].json()["data"][0]["embedding"] == first.json()["data"][0]["embedding"]


def test_sigterm_finishes_the_request_in_flight(tmp_path, pydoc_pipeline_dir):
    """A request whose body is still arriving when SIGTERM lands is read, encoded and
    answered before the server exits. Seen in flight (the gate counts it) before the signal,
    its body's rest sent once uvicorn waits for it (within the grace, --graceful-timeout): no
    timer decides the order, where the request used to wait 8 s for a batch to fill."""
    body = b'{"model": "hash", "input": "x"}'
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\n"
    head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    running = Server(tmp_path / "db", pydoc_pipeline_dir, "--workers", "1")
    with running, running.client() as http:
        held = raw(running, head + body[:10])
        deadline = time.monotonic() + 30  # only ever waited out on failure
        while "probembed_requests_in_flight 2.0" not in http.get("/metrics").text:  # + this one
            assert time.monotonic() < deadline, "the held request never reached the service"
        assert running.process is not None
        running.process.send_signal(signal.SIGTERM)
        while "Waiting for connections to close" not in running.output:
            assert time.monotonic() < deadline + 30, running.output
            time.sleep(0.05)
        with held:
            held.sendall(body[10:])
            held.settimeout(60)
            answer = held.recv(65536)
        code = running.process.wait(60)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    # uvicorn re-raises the signal once shut down, so the exit status says SIGTERM
    assert code in (0, -signal.SIGTERM), running.output
    assert "Application shutdown complete" in running.output


def test_sigkill_loses_no_acknowledged_write(tmp_path, pydoc_pipeline_dir):
    db = tmp_path / "db"
    acknowledged: list[str] = []
    running = Server(db, pydoc_pipeline_dir).start()
    stop = threading.Event()

    def writer() -> None:
        with running.client() as http:
            http.post("/v1/collections", json={"name": "durable"})
            for n in range(10_000):
                ids = [f"r{n}-{i}" for i in range(4)]
                documents = [{"id": i, "text": f"document {i} of request {n}"} for i in ids]
                try:
                    answer = http.post(
                        "/v1/collections/durable/documents", json={"documents": documents}
                    )
                except Exception:  # the server died mid-request: not acknowledged
                    return
                if answer.status_code == 200:
                    acknowledged.extend(ids)
                if stop.is_set():
                    return

    thread = threading.Thread(target=writer)
    thread.start()
    while len(acknowledged) < 40 and thread.is_alive():
        time.sleep(0.01)
    children = running.children()
    running.kill()
    stop.set()
    thread.join(30)
    assert len(acknowledged) >= 40
    if Path("/proc/self/task").exists():  # the server encoded in children, which die with it
        assert children
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
    stored = Database(db).open("durable").ids()
    assert set(acknowledged) <= stored
    with _in_process(tmp_path, pydoc_pipeline_dir) as http:  # the service over `db` again
        count = http.get("/v1/collections/durable").json()["count"]
        hit = http.post(
            "/v1/collections/durable/search", json={"query": f"document {acknowledged[-1]}"}
        ).json()
    assert count == len(stored) >= len(acknowledged)
    assert hit["results"][0]["hits"]


def test_a_wrong_pipeline_is_refused_before_serving_and_a_failed_load_is_final(
    tmp_path, pydoc_pipeline_dir
):
    """A name that is no pipeline: one line, exit 2, no database. A pipeline that fails to
    load: /readyz says failed without Retry-After, /healthz 503 (it stayed 200, so nothing
    restarted it), no database, and start() says so (`wait_ready`, which it waits with)."""
    command = [sys.executable, "-m", "probembed", "serve", "--db", str(tmp_path / "db")]
    done = subprocess.run(
        [*command, "--pipeline", str(tmp_path / "no-such")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no pipeline" in done.stderr, done.stderr
    assert not (tmp_path / "db").exists()
    damaged = tmp_path / "damaged"
    shutil.copytree(pydoc_pipeline_dir, damaged)
    for state in damaged.rglob("*.npz"):
        state.write_bytes(b"\x00" * 10)  # pipeline.json is fine; the fitted state is not
    server = Server(tmp_path / "db2", damaged)
    server.launch()
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        status, headers = server.readiness()
        while status not in (200, FAILED) and time.monotonic() < deadline:
            time.sleep(0.1)
            status, headers = server.readiness()
        assert status == FAILED and "Retry-After" not in headers
        assert not (tmp_path / "db2").exists()
        with server.client() as http:  # alive, but a liveness probe must restart it
            health, ready = http.get("/healthz"), http.get("/readyz")
            spec = http.get("/openapi.json").json()
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "is not an .npz archive: the file is damaged" in health.json()["error"]
        # each probe's 503 body is its own (status, error), as the schema says: it promised
        # ErrorBody (detail, error.message, request_id), which no probe answers
        for path, answer, model in (
            ("/healthz", health, "Health"),
            ("/readyz", ready, "Readiness"),
        ):
            declared = spec["paths"][path]["get"]["responses"]["503"]
            schema = declared["content"]["application/json"]["schema"]
            assert schema == {"$ref": f"#/components/schemas/{model}"}, path
            fields = spec["components"]["schemas"][model]["properties"]
            assert answer.status_code == 503 and set(answer.json()) <= set(fields), path
        with pytest.raises(RuntimeError, match="server failed to load"):
            server.wait_ready()  # what `start()` waits with: it says so, and stops the server
        assert server.process is not None and server.process.poll() is not None
    finally:
        server.stop()


def test_a_port_in_use_is_one_line_before_any_model_loads(tmp_path, pydoc_pipeline_dir):
    """The socket is bound first: a second server on a taken port says so and exits at once
    (it used to load every model, then fail with uvicorn's own error)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "probembed", "serve", "--db", str(tmp_path / "db")]
        done = subprocess.run(
            [*command, "--create-db", "--pipeline", str(pydoc_pipeline_dir), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "loading" not in done.stderr.lower()


def test_a_db_that_does_not_exist_is_refused_unless_asked_to_create_it(
    tmp_path, pydoc_pipeline_dir
):
    """`serve --db` on a mistyped path made an empty database and answered healthy with no
    collections. It is refused now, naming the path and the flag, before the port is taken or
    a model loads; an existing directory, empty or not, is taken without the flag: `serve`
    goes on past it to the port, which the test holds (this module's server serves an empty
    one: `test_a_server_on_an_empty_database_says_so_in_its_log`)."""
    typo = tmp_path / "typo.db"
    command = [sys.executable, "-m", "probembed", "serve", "--db", str(typo)]
    done = subprocess.run(
        [*command, "--pipeline", str(pydoc_pipeline_dir), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    said = f"no database at {typo}: the directory does not exist (--create-db makes one)"
    assert said in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stderr
    assert not typo.exists()
    corpus = tmp_path / "docs.jsonl"  # --db naming the corpus: --create-db cannot make it, and
    corpus.write_text('{"_id": "d0", "text": "x"}\n')  # it was found after every model loaded
    for given in ([], ["--create-db"]):
        done = subprocess.run(
            [*command[:-1], str(corpus), *given, "--pipeline", str(pydoc_pipeline_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        told = " ".join(done.stderr.split())
        assert done.returncode == 2 and f"{corpus}" in told and "is a file" in told, told
        assert "listening" not in told and "loading" not in told.lower(), told
    made = tmp_path / "made.db"
    made.mkdir()
    done, port = serve_on_a_held_port(
        [*command[:-1], str(made), "--pipeline", str(pydoc_pipeline_dir)]
    )
    told = " ".join(done.stderr.split())
    assert done.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in told, told


def test_port_0_binds_a_free_port_and_the_ready_line_names_it(tmp_path, pydoc_pipeline_dir):
    """The ready line said http://127.0.0.1:0: the port taken could only be found with ss."""
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "probembed", "serve", "--db", str(tmp_path / "db")]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--create-db", "--pipeline", str(pydoc_pipeline_dir), "--port", "0"],
            stdout=out,
            stderr=out,
        )
    try:
        deadline, ready = time.monotonic() + 120, None
        while ready is None and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            ready = re.search(r"ready on http://127\.0\.0\.1:(\d+)", log.read_text())
        assert ready is not None, log.read_text()
        port = int(ready.group(1))
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
            assert answer.status == 200
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_dropping_the_last_collection_of_an_unserved_pipeline_stops_its_children(
    tmp_path, pydoc_pipeline, pydoc_pipeline_dir
):
    """A collection made with a pipeline the server does not serve is searched by children
    spawned for its own pipeline; dropping it left them running (a loaded copy of its
    models each) until shutdown. They now stop once no collection uses that pipeline, and
    a later collection of it spawns them again."""
    from dataclasses import replace

    from probembed.store import ingest
    from probembed.store.readers import Record

    other = pydoc_pipeline.with_fusion(replace(pydoc_pipeline.fusion, temperature=2.0))
    assert other.fingerprint != pydoc_pipeline.fingerprint
    db = tmp_path / "db"

    def make(name: str) -> None:
        collection = Database(db, create=True).collection(name)
        ingest([Record("a", "a text to find"), Record("b", "another one")], collection, other)
        collection.record_pipeline(other)

    def cmdline(pid: int) -> bytes | None:
        """A child's command line; None for one that ended since it was listed (the child
        of a dropped collection is stopping as this polls)."""
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return None

    def encoders(running: Server) -> set[int]:
        return {
            pid
            for pid in running.children()
            if (line := cmdline(pid)) is not None and b"resource_tracker" not in line
        }

    def settle(running: Server, expected: int) -> set[int]:
        deadline = time.monotonic() + 60  # 60 s: only ever waited out on failure
        while len(encoders(running)) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return encoders(running)

    make("own")
    make("twin")
    search = {"query": "a text", "k": 1}
    with Server(db, pydoc_pipeline_dir, "--workers", "1") as running, running.client() as http:
        if not Path("/proc/self/task").exists():
            pytest.skip("counts the server's children through Linux's /proc")
        served = settle(running, 1)
        assert http.post("/v1/collections/own/search", json=search).status_code == 200
        spawned = settle(running, 2) - served
        assert len(spawned) == 1
        assert http.delete("/v1/collections/own").status_code == 200
        time.sleep(0.5)  # a retiring would have begun: "twin" still uses the pipeline
        assert encoders(running) == served | spawned
        assert http.post("/v1/collections/twin/search", json=search).status_code == 200
        assert http.delete("/v1/collections/twin").status_code == 200
        assert settle(running, 1) == served
        make("again")
        answer = http.post("/v1/collections/again/search", json=search)
        assert answer.status_code == 200 and answer.json()["results"][0]["hits"][0]["id"] == "a"
        assert len(settle(running, 2) - served) == 1
    logged = running.log.read_text("utf-8")
    said = (
        f"pipeline {other.fingerprint[:8]} is used by no collection: stopped its 1 encoding child"
    )
    assert f"{said}\n" in logged  # the line ends there: it said "1 encoding children"


def test_a_chunked_write_lets_searches_run_while_it_encodes_and_a_drop_waits_for_it(
    tmp_path, pydoc_pipeline_dir, monkeypatch
):
    """A chunked write held the collection's lock while its documents encoded: a search of
    the collection waited for the whole write. Searches now run while it encodes; a drop
    still waits for it (the app runs in this process so an encode can be held at will)."""
    from probembed.service import batching

    holding, encoding, release = threading.Event(), threading.Event(), threading.Event()
    original = batching.Batcher.encode_blocking

    def held(self, texts):
        if holding.is_set() and not encoding.is_set():
            encoding.set()
            assert release.wait(60)  # 60 s: only ever waited out on failure
        return original(self, texts)

    monkeypatch.setattr(batching.Batcher, "encode_blocking", held)
    settings = ServiceSettings(
        db=tmp_path / "db",
        pipelines=(str(pydoc_pipeline_dir),),
        batching=BatchSettings(workers=1),
        create_db=True,
    )
    app = create_app(settings)
    chunked = {"chunk": {"max_tokens": 16}}
    long_doc = {"id": "long", "text": " ".join(f"word{i}." for i in range(200))}
    with TestClient(app, LOCAL) as http, ThreadPoolExecutor(3) as pool:
        for _ in range(1200):  # loading runs beside the app; a minute at most
            if http.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        http.post("/v1/collections", json={"name": "c"})
        first = http.post("/v1/collections/c/documents", json={"documents": DOCS, **chunked})
        assert first.status_code == 200, first.text
        holding.set()
        writing = pool.submit(
            http.post, "/v1/collections/c/documents", json={"documents": [long_doc], **chunked}
        )
        try:
            assert encoding.wait(60)
            searching = pool.submit(http.post, "/v1/collections/c/search", json={"query": "cat"})
            answer = searching.result(timeout=60)  # waited out only if the write holds the lock
            assert answer.status_code == 200 and answer.json()["results"][0]["hits"]
            assert not writing.done()
            dropping = pool.submit(http.delete, "/v1/collections/c")
            locks = app.state.service._locks
            deadline = time.monotonic() + 60  # until the drop waits beside the write
            while locks["c"].users < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert locks["c"].users == 2
        finally:
            release.set()
        written = writing.result(timeout=60)
        assert written.status_code == 200, written.text
        assert written.json()["added"] == 1 and written.json()["chunks_written"] > 10
        assert dropping.result(timeout=60).status_code == 200
        assert http.get("/v1/collections/c").status_code == 404


@pytest.mark.parametrize("held_write", ["chunked", "plain"])
def test_a_plain_and_a_chunked_write_racing_into_an_empty_collection_do_not_mix(
    tmp_path, pydoc_pipeline_dir, monkeypatch, held_write
):
    """Each write checked the collection empty before it encoded, with the lock let go while
    it encoded; the other kind committed meanwhile, and the collection held whole documents
    and chunks (a grouped search found a document twice). The write that commits second is
    now refused, and nothing of it stays."""
    from probembed.service import batching

    encoding, release = threading.Event(), threading.Event()
    held_chunked = held_write == "chunked"
    blocking, queued = batching.Batcher.encode_blocking, batching.Batcher.encode

    def hold() -> None:
        if not encoding.is_set():
            encoding.set()
            assert release.wait(60)  # 60 s: only ever waited out on failure

    def chunked_encode(self, texts):
        if held_chunked:
            hold()
        return blocking(self, texts)

    async def plain_encode(self, texts, wait=False):
        if not held_chunked and not wait:
            await asyncio.to_thread(hold)
        return await queued(self, texts, wait)

    monkeypatch.setattr(batching.Batcher, "encode_blocking", chunked_encode)
    monkeypatch.setattr(batching.Batcher, "encode", plain_encode)
    settings = ServiceSettings(
        db=tmp_path / "db",
        pipelines=(str(pydoc_pipeline_dir),),
        batching=BatchSettings(workers=1),
        create_db=True,
    )
    bodies = {
        "chunked": {"documents": [DOCS[0]], "chunk": {"max_tokens": 16}},
        "plain": {"documents": [DOCS[1]]},
    }
    second = "plain" if held_chunked else "chunked"
    with TestClient(create_app(settings), LOCAL) as http, ThreadPoolExecutor(2) as pool:
        for _ in range(1200):  # loading runs beside the app; a minute at most
            if http.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        assert http.post("/v1/collections", json={"name": "m"}).status_code == 201
        writing = pool.submit(http.post, "/v1/collections/m/documents", json=bodies[held_write])
        try:
            assert encoding.wait(60)
            other = http.post("/v1/collections/m/documents", json=bodies[second])
            assert other.status_code == 200, other.text
        finally:
            release.set()
        refused = writing.result(timeout=60)
        assert refused.status_code == 422 and "found twice" in refused.json()["detail"]
    stored = Database(tmp_path / "db").open("m")
    assert stored.holds_chunks == (second == "chunked")
    kept = DOCS[0]["id"] if second == "chunked" else DOCS[1]["id"]
    assert {row.split("#")[0] for row in stored.vectors().ids} == {kept}


@pytest.mark.parametrize("stop", ["stopping", "crash"])
def test_a_chunked_write_whose_undo_meets_a_conflict_answers_409_naming_what_stopped_it(
    tmp_path, pydoc_pipeline_dir, monkeypatch, stop
):
    """A chunked write whose encoder failed after its first batch is undone; when another
    writer's commit (a restore of the latest version, by its own connection: one Lance
    cannot reconcile with any other) lands as the undo commits, the 409's detail said only
    that the undo conflicted: what stopped the write was gone. It names both now, a failure
    of the server's own as every 500 names it, by the log."""
    import lancedb

    from probembed.service import batching
    from probembed.service.batching import StoppingError
    from probembed.store.collection import Collection
    from probembed.store.undo import UNDO_CONFLICT

    errors = {"stopping": StoppingError(), "crash": RuntimeError("child died at /srv/secret")}
    calls, blocking, revert = [], batching.Batcher.encode_blocking, Collection.revert

    def failing(self, texts):  # the second batch (the chunk 0s) fails
        calls.append(len(texts))
        if len(calls) == 2:
            raise errors[stop]
        return blocking(self, texts)

    def raced_revert(self, *args, **kwargs):  # another writer commits after each look
        look = self._open

        def looked():
            table = look()
            theirs = lancedb.connect(str(self.db.path)).open_table(self.name)
            theirs.restore(theirs.version)
            return table

        with monkeypatch.context() as patched:
            patched.setattr(self, "_open", looked)
            return revert(self, *args, **kwargs)

    monkeypatch.setattr(batching.Batcher, "encode_blocking", failing)
    monkeypatch.setattr(Collection, "revert", raced_revert)
    long_doc = {"id": "long", "text": " ".join(f"word{i}." for i in range(200))}
    with _in_process(tmp_path, pydoc_pipeline_dir) as http:
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        body = {"documents": [long_doc], "chunk": {"max_tokens": 16}}
        answer = http.post("/v1/collections/c/documents", json=body)
    assert answer.status_code == 409, answer.text
    detail = answer.json()["detail"]
    told = str(errors[stop]) if stop == "stopping" else "internal error: the server's log"
    assert detail.startswith(f"this write stopped part-way ({told}")
    assert "/srv/secret" not in detail and UNDO_CONFLICT in detail
    assert len(calls) == 2
    stored = Database(tmp_path / "db").open("c")
    assert stored.count() > 0 and "long#0" not in stored.ids()  # the first batch stays


@pytest.mark.parametrize("stop", ["stopping", "storage", "crash"])
def test_a_chunked_write_undone_after_its_encoder_failed_names_the_documents_it_skipped(
    tmp_path, pydoc_pipeline_dir, monkeypatch, stop
):
    """A chunked write with on_error "skip" whose encoder failed after its first batch is
    undone, and was answered with what stopped it alone: the documents it had skipped, which
    its answer would have listed, were told nowhere. The 503s (shutting down, storage) and
    the 500 (a failure of the server's own, named by the log) list them now, and nothing is
    stored. Notes other code put on the error are not told (they were, after the paths in
    the message had been hidden): only probembed's own."""
    from probembed.service import batching
    from probembed.service.batching import StoppingError
    from probembed.store import StorageUnavailableError

    errors = {
        "stopping": StoppingError(),
        "storage": StorageUnavailableError("database s3://b/db: cannot write: it timed out"),
        "crash": RuntimeError("child died at /srv/secret"),
    }
    for error in errors.values():  # as a library may note what it was doing, and where
        error.add_note(f"while writing {tmp_path / 'db'}/c.lance for /srv/secret")
    told = {
        "stopping": str(errors["stopping"]),
        "storage": f"the database's storage failed: {errors['storage']}",
        "crash": "internal error: the server's log",
    }
    calls, blocking = [], batching.Batcher.encode_blocking

    def failing(self, texts):  # the second batch (the chunk 0s) fails
        calls.append(len(texts))
        if len(calls) == 2:
            raise errors[stop]
        return blocking(self, texts)

    monkeypatch.setattr(batching.Batcher, "encode_blocking", failing)
    long_doc = {"id": "long", "text": " ".join(f"word{i}." for i in range(200))}
    bad = {"id": "bad", "text": "Tagged.", "metadata": {"probembed": {"score": 1}}}
    with _in_process(tmp_path, pydoc_pipeline_dir) as http:
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        body = {"documents": [long_doc, bad], "chunk": {"max_tokens": 16}, "on_error": "skip"}
        answer = http.post("/v1/collections/c/documents", json=body)
    assert answer.status_code == (500 if stop == "crash" else 503), answer.text
    retry = {"stopping": "1", "storage": "5", "crash": None}[stop]  # a shutdown's too
    assert answer.headers.get("Retry-After") == retry
    detail = answer.json()["detail"]
    assert detail.startswith(told[stop]) and "/srv/secret" not in detail
    assert str(tmp_path) not in detail and "while writing" not in detail
    skipped = detail.split("\n", 1)[1]
    assert skipped.startswith("Before it stopped, it had skipped 1 bad input item(s), none")
    assert "\n  documents[1]: document 'bad': " in skipped and "'probembed'" in skipped
    assert len(calls) == 2
    assert Database(tmp_path / "db").open("c").count() == 0  # the first batch was undone


def test_a_delete_waits_for_the_chunked_write_of_its_collection(
    tmp_path, pydoc_pipeline_dir, monkeypatch
):
    """A chunked write lets the collection's lock go while each batch encodes; a delete of its
    document ran there, between two commits, and the write then stored the rest of the
    document it had deleted. A delete now waits for the write and removes it whole."""
    from probembed.service import batching
    from probembed.store.collection import Collection

    encoding, release, deleting = threading.Event(), threading.Event(), threading.Event()
    calls, blocking, delete = [], batching.Batcher.encode_blocking, Collection.delete_documents

    def held(self, texts):  # the second batch waits, the first one committed
        calls.append(len(texts))
        if len(calls) == 2:
            encoding.set()
            assert release.wait(60)  # 60 s: only ever waited out on failure
        return blocking(self, texts)

    def watched(self, ids, *wait):
        deleting.set()
        return delete(self, ids, *wait)

    monkeypatch.setattr(batching.Batcher, "encode_blocking", held)
    monkeypatch.setattr(Collection, "delete_documents", watched)
    long_doc = {"id": "long", "text": " ".join(f"word{i}." for i in range(200))}
    with _in_process(tmp_path, pydoc_pipeline_dir) as http, ThreadPoolExecutor(2) as pool:
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        body = {"documents": [long_doc], "chunk": {"max_tokens": 16}}
        writing = pool.submit(http.post, "/v1/collections/c/documents", json=body)
        try:
            assert encoding.wait(60)
            gone = pool.submit(
                http.post, "/v1/collections/c/delete", json={"ids": ["long"], "doc": True}
            )
            # waiting for the delete is the fix: it must not start while the write holds on;
            # the 2 s only give the old code its chance to run the delete here, and do not
            # decide what the fixed code stores
            started_early = deleting.wait(2)
        finally:
            release.set()
        assert writing.result(timeout=60).status_code == 200
        answer = gone.result(timeout=60)
    assert not started_early
    assert answer.status_code == 200, answer.text
    assert answer.json()["deleted"] > 0
    assert Database(tmp_path / "db").open("c").count() == 0  # nothing of the document is left


@pytest.fixture(scope="module")
def retrieval_app(tmp_path_factory, search_pipeline) -> Iterator[TestClient]:
    """The app in this process serving the built-in `retrieval` (real models, with a token
    limit), loaded once for the module's tests of it; each writes collections of its own."""
    with _in_process(tmp_path_factory.mktemp("retrieval"), search_pipeline.name) as http:
        yield http


def test_a_chunked_write_says_the_size_it_cut_its_documents_at(retrieval_app, search_pipeline):
    """A `max_tokens` over the shortest member's limit was lowered to it without a word (the
    CLI warns): the answer says the size and overlap the documents were cut at."""
    limit = search_pipeline.max_tokens
    http = retrieval_app
    assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
    chunk = {"max_tokens": 100_000, "overlap_tokens": 200}
    big = http.post("/v1/collections/c/documents", json={"documents": DOCS, "chunk": chunk})
    asked = {"max_tokens": 48, "overlap_tokens": 8}
    small = http.post("/v1/collections/c/documents", json={"documents": DOCS, "chunk": asked})
    assert http.post("/v1/collections", json={"name": "d"}).status_code == 201
    plain = http.post("/v1/collections/d/documents", json={"documents": DOCS})
    assert big.status_code == 200, big.text
    assert big.json()["chunked_at"] == {"max_tokens": limit, "overlap_tokens": limit // 2 - 1}
    assert small.json()["chunked_at"] == asked  # within the limit: as asked
    assert plain.status_code == 200 and plain.json()["chunked_at"] is None  # not chunked


def test_a_search_answer_says_which_queries_the_models_read_only_the_start_of(
    retrieval_app, search_pipeline
):
    """A query past a member's token limit was searched by its start alone without a word
    (Python and the CLI warn): each result says the tokens read of it, null for one read
    whole, as the OpenAPI schema says; the long query is searched, not refused."""
    long = " ".join(["the history of football clubs in european leagues"] * 60) + " volcanoes"
    assert search_pipeline.cut([long]).tolist() == [True]
    http = retrieval_app
    assert http.post("/v1/collections", json={"name": "cut"}).status_code == 201
    wrote = http.post("/v1/collections/cut/documents", json={"documents": DOCS})
    assert wrote.status_code == 200, wrote.text
    found = http.post("/v1/collections/cut/search", json={"queries": ["guitar", long]})
    one = http.post("/v1/collections/cut/search", json={"query": long, "k": 1})
    schema = http.get("/openapi.json").json()["components"]["schemas"]
    assert found.status_code == 200, found.text
    results = found.json()["results"]
    limit = search_pipeline.max_tokens
    assert [r["cut_at_tokens"] for r in results] == [None, limit]
    assert all(len(r["hits"]) == len(DOCS) for r in results)
    assert one.status_code == 200 and one.json()["results"][0]["cut_at_tokens"] == limit
    field = schema["QueryResultOut"]["properties"]["cut_at_tokens"]
    assert {t["type"] for t in field["anyOf"]} == {"integer", "null"}
    # "the tokens the models read" was untrue of members of other limits and of BM25
    assert "the fewest tokens any member reads" in field["description"]
    assert "BM25 reads all of it" in field["description"]


def test_a_served_tuned_pipeline_leaves_a_collections_kept_settings_as_they_are(
    tmp_path, hash_pipeline, sentences
):
    """The service never changes a collection's pipeline copy: a served tuned pipeline of the
    collection's vectors lends its models, a write goes through (it names no pipeline: the
    collection's own, which the CLI and Python refuse to change without --replace-pipeline
    / replace=True), and searches answer with the kept score and calibrator, as every other
    reader of the collection does."""
    db = Database(tmp_path / "db", create=True)
    texts = sentences[:20]
    ingest([Record(f"s{i}", t, {}) for i, t in enumerate(texts)], db.collection("c"), hash_pipeline)
    tuned_copy(hash_pipeline, sentences).save(tmp_path / "tuned")
    with _in_process(tmp_path, tmp_path / "tuned") as http:
        written = http.post(
            "/v1/collections/c/documents", json={"documents": [{"id": "new", "text": texts[0]}]}
        )
        assert written.status_code == 200, written.text
        assert written.json()["added"] == 1
        refused = http.post("/v1/collections/c/search", json={"query": "x", "min_p_relevant": 0.1})
        assert refused.status_code == 422 and "no relevance calibrator" in refused.text
        found = http.post("/v1/collections/c/search", json={"query": texts[0], "k": 2}).json()
        assert {h["p_relevant"] for h in found["results"][0]["hits"]} == {None}
        again = http.post("/v1/collections", json={"name": "c", "pipeline": "tuned"})
        assert again.status_code == 409, again.text
    kept = Database(tmp_path / "db").open("c").load_pipeline()
    assert kept.setting_changes(hash_pipeline) == [] and kept.calibrator is None


def test_a_running_service_searches_with_a_copy_replaced_by_another_process(
    tmp_path, hash_pipeline, sentences
):
    """`ingest --replace-pipeline` from another process while the service runs: the service
    kept searching with the settings it had loaded (no calibrator: --min-p-relevant refused)
    until restarted. A replacement commits a mark that the service's next request sees."""
    db = Database(tmp_path / "db", create=True)
    texts = sentences[:20]
    ingest([Record(f"s{i}", t, {}) for i, t in enumerate(texts)], db.collection("c"), hash_pipeline)
    tuned_copy(hash_pipeline, sentences).save(tmp_path / "tuned")
    asked = {"query": texts[0], "k": 3, "min_p_relevant": 0.0}
    with _in_process(tmp_path, tmp_path / "tuned") as http:
        refused = http.post("/v1/collections/c/search", json=asked)
        assert refused.status_code == 422 and "no relevance calibrator" in refused.text
        elsewhere = Database(tmp_path / "db").open("c")  # another handle, as another process
        tuned = Pipeline.load(tmp_path / "tuned", cache=False)
        assert elsewhere.record_pipeline(tuned, replace=True)
        found = http.post("/v1/collections/c/search", json=asked)
        assert found.status_code == 200, found.text
        hits = found.json()["results"][0]["hits"]
        assert len(hits) == 3 and all(h["p_relevant"] is not None for h in hits)


def test_a_write_answers_how_many_documents_repeat_anothers_content(retrieval_app):
    """Documents of one text under two ids split their p_relevant: the answer said nothing.
    It counts them and names a pair, plain and chunked, and stores them all."""
    copy = {**DOCS[0], "id": "d4"}  # chunked ingest compares text and metadata (doc_hash)
    http = retrieval_app
    for name, chunk in (("plain", None), ("chunks", {"max_tokens": 48, "overlap_tokens": 8})):
        assert http.post("/v1/collections", json={"name": name}).status_code == 201
        body = {"documents": [*DOCS, copy], **({"chunk": chunk} if chunk else {})}
        answer = http.post(f"/v1/collections/{name}/documents", json=body)
        assert answer.status_code == 200, answer.text
        said = answer.json()
        assert (said["repeated"], said["repeated_example"], said["added"]) == (
            2, ["d4", "d1"], 4)  # fmt: skip
    alone = http.post("/v1/collections/plain/documents", json={"documents": DOCS[1:2]})
    assert alone.json()["repeated"] == 0 and alone.json()["repeated_example"] is None


def test_the_services_storage_timeouts_leave_the_operators_own_in_any_spelling(monkeypatch):
    """`aws_timeout` given (object_store's other spelling of `timeout`) or `AWS_TIMEOUT` set
    lost to the service's 5 s in some runs and in all, so an operator's bound was not kept."""
    from probembed.service.storage import timed_out
    from probembed.store.location import TIMEOUTS, with_timeouts

    for name in ("AWS_TIMEOUT", "AWS_CONNECT_TIMEOUT", "AWS_CLIENT_RETRY_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    uri = "s3://bucket/db"
    assert with_timeouts(uri, {}) == TIMEOUTS
    assert with_timeouts(uri, {"aws_timeout": "1s"}) == {
        "aws_timeout": "1s",
        "connect_timeout": "2s",
        "client_retry_timeout": "10",
    }
    assert with_timeouts(uri, {"Timeout": "9s"})["Timeout"] == "9s"
    assert "timeout" not in with_timeouts(uri, {"Timeout": "9s"})
    monkeypatch.setenv("AWS_CONNECT_TIMEOUT", "1s")
    assert "connect_timeout" not in with_timeouts(uri, {})
    assert with_timeouts("/a/directory", {}) == {}  # a directory takes no options
    said = "error sending request in 1.2s"
    assert "storage timeout of 1s" in (timed_out(said, {"aws_timeout": "1s"}) or "")


def test_a_chunked_write_with_a_model_of_no_token_limit_cuts_at_the_size_asked(
    tmp_path, static_pipeline_dir
):
    """A StaticEmbedding model's `max_seq_length` is inf: the chunked write was a 500
    (OverflowError reading the limit); nothing lowers the size asked."""
    with _in_process(tmp_path, static_pipeline_dir, raising=False) as http:
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        asked = {"max_tokens": 48, "overlap_tokens": 8}
        written = http.post("/v1/collections/c/documents", json={"documents": DOCS, "chunk": asked})
    assert written.status_code == 200, written.text
    assert written.json()["chunked_at"] == asked
