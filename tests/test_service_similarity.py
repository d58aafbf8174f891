"""`POST /v1/similarity` on a real `probembed serve`: Text Embeddings Inference's request, each
score with the std a search hit of the same pair reports, and bad input a 422 naming it.

The servers are subprocesses on loopback ports, serving the saved two-model hashing pipeline
that the tests also load in this process (`pydoc_pipeline`), so answers compare with
`Pipeline.similarity` directly. Tolerances as in test_similarity.py: ATOL bounds float64
summation in another order (the server's BLAS may pick another kernel than this process's);
a hit's std reads the weights as the collection stores them, in float32 (STORED_RTOL).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from service_support import Server

from probembed.encoders.base import is_blank

#: Float64 summation in another order (test_similarity.py's module docstring).
ATOL = 1e-12
#: A hit's std from float32-stored weights (test_similarity.py's module docstring).
STORED_RTOL = 1e-6

SOURCE = "how do I open a file for reading"
SENTENCES = [
    "Files are opened with open() and read with read().",
    "The for statement iterates over the items of any sequence.",
    "Exceptions are raised with the raise statement.",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory, pydoc_pipeline_dir):
    """An open server (no keys, loopback) over an empty database."""
    with Server(tmp_path_factory.mktemp("similarity") / "db", pydoc_pipeline_dir) as running:
        yield running


@pytest.fixture(scope="module")
def tight(tmp_path_factory, pydoc_pipeline_dir):
    """A server with small limits: 3 texts a request, 20 characters a text."""
    limits = ["--max-inputs", "3", "--max-chars", "20"]
    root = tmp_path_factory.mktemp("similarity-tight")
    with Server(root / "db", pydoc_pipeline_dir, *limits) as running:
        yield running


def asked(source: str, sentences: list[str], **more: object) -> dict:
    """A request body in Text Embeddings Inference's shape."""
    return {"inputs": {"source_sentence": source, "sentences": sentences}, **more}


def test_scores_and_stds_are_the_front_doors_and_a_search_hits(server, pydoc_pipeline):
    with server.client() as http:
        answer = http.post("/v1/similarity", json=asked(SOURCE, SENTENCES, model="hash"))
        assert answer.status_code == 200, answer.text
        http.post("/v1/collections", json={"name": "docs"})
        documents = [{"id": f"d{i}", "text": t} for i, t in enumerate(SENTENCES)]
        written = http.post("/v1/collections/docs/documents", json={"documents": documents})
        assert written.status_code == 200, written.text
        search = {"query": SOURCE, "k": len(SENTENCES), "exact": True}
        hits = http.post("/v1/collections/docs/search", json=search).json()["results"][0]["hits"]
    body = answer.json()
    assert (body["object"], body["model"]) == ("list", "hash")
    assert (body["score_name"], body["beta"]) == ("uec", 1.0)
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    expected = pydoc_pipeline.similarity(SOURCE, SENTENCES)
    scores = [item["score"] for item in body["data"]]
    stds = [item["std"] for item in body["data"]]
    np.testing.assert_allclose(scores, expected.score[0], rtol=0, atol=ATOL)
    np.testing.assert_allclose(stds, expected.std[0], rtol=0, atol=ATOL)
    order = [int(hit["id"][1:]) for hit in hits]
    np.testing.assert_allclose([stds[i] for i in order], [h["std"] for h in hits], STORED_RTOL)
    np.testing.assert_allclose([scores[i] for i in order], [h["score"] for h in hits], atol=ATOL)


#: Texts a client may send: any Unicode but lone surrogates, something to embed in each.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30).filter(
    lambda t: not is_blank(t)
)


@settings(max_examples=20, deadline=None)
@given(source=TEXT, sentences=st.lists(TEXT, min_size=1, max_size=4))
def test_any_texts_are_answered_as_the_pipeline_scores_them(
    server, pydoc_pipeline, source, sentences
):
    with server.client() as http:
        answer = http.post("/v1/similarity", json=asked(source, sentences))  # model: the first
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = pydoc_pipeline.similarity(source, sentences)
    assert body["model"] == "hash" and len(body["data"]) == len(sentences)
    got = np.array([[item["score"], item["std"]] for item in body["data"]])
    np.testing.assert_allclose(got[:, 0], expected.score[0], rtol=0, atol=ATOL)
    np.testing.assert_allclose(got[:, 1], expected.std[0], rtol=0, atol=ATOL)


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        (asked("x", ["y"], model="nope"), 404, "model 'nope' is not served here; models: hash"),
        (asked("x", []), 422, r"inputs\.sentences: List should have at least 1 item"),
        (asked("x", ["ok", "  "]), 422, r"inputs\.sentences\[1\] is blank \(only white"),
        (asked(" ", ["ok"]), 422, r"inputs\.source_sentence is blank \(only white"),
        (asked("x", ["ok", 5]), 422, r"inputs\.sentences\[1\]: Input should be a valid string"),
        (asked("x", "ok"), 422, r"inputs\.sentences: Input should be a valid list"),
        (asked(["x"], ["ok"]), 422, r"inputs\.source_sentence: Input should be a valid string"),
        (asked("x", ["ok"], model=3), 422, r"model: Input should be a valid string"),
        (asked("x", ["ok"], truncate=True), 422, r"truncate: Extra inputs are not permitted"),
        ({"inputs": {"sentences": ["ok"]}}, 422, r"inputs\.source_sentence: Field required"),
        ({"source_sentence": "x", "sentences": ["y"]}, 422, r"inputs: Field required"),
    ],
)
def test_bad_input_is_refused_naming_the_field(server, payload, status, says):
    with server.client() as http:
        answer = http.post("/v1/similarity", json=payload)
    assert answer.status_code == status, answer.text
    assert re.search(says, answer.json()["detail"] if status != 422 else answer.text)
    assert answer.json()["error"]["message"]  # the error object every refusal carries


def test_a_lone_surrogate_is_a_422_naming_the_text(server):
    body = '{"inputs": {"source_sentence": "x", "sentences": ["ok", "a \\ud800 b"]}}'
    with server.client() as http:
        answer = http.post(
            "/v1/similarity", content=body, headers={"content-type": "application/json"}
        )
    assert answer.status_code == 422
    assert "inputs.sentences[1] is not valid Unicode" in answer.text


def test_the_limits_are_the_embeddings_routes_and_the_schema_states_them(tight):
    with tight.client() as http:
        many = http.post("/v1/similarity", json=asked("x", ["a", "b", "c", "d"]))
        long_source = http.post("/v1/similarity", json=asked("x" * 21, ["a"]))
        long_sentence = http.post("/v1/similarity", json=asked("x", ["a", "b" * 21]))
        fits = http.post("/v1/similarity", json=asked("x" * 20, ["a", "b", "c"]))
        schema = http.get("/openapi.json").json()
    assert many.status_code == 413 and "inputs.sentences has 4 texts" in many.text
    assert "--max-inputs" in many.text
    assert long_source.status_code == 422
    as_sent = "has 21 characters as sent, with its surrounding whitespace; the limit is 20"
    assert f"inputs.source_sentence {as_sent}" in long_source.text
    assert long_sentence.status_code == 422
    assert f"inputs.sentences[1] {as_sent}" in long_sentence.text
    assert fits.status_code == 200, fits.text
    fields = schema["components"]["schemas"]["SimilarityInputs"]["properties"]
    assert fields["sentences"]["maxItems"] == 3 and fields["sentences"]["minItems"] == 1
    assert fields["sentences"]["items"]["maxLength"] == 20
    assert fields["source_sentence"]["maxLength"] == 20 and "pattern" in fields["source_sentence"]


def test_a_similarity_is_counted_under_its_route_and_its_encode_batch(server):
    with server.client() as http:
        assert http.post("/v1/similarity", json=asked("x", ["y", "z"])).status_code == 200
        text = http.get("/metrics").text
    assert 'probembed_requests_total{method="POST",route="/v1/similarity",status="200"}' in text
    assert 'probembed_encode_batch_texts_count{pipeline="hash"}' in text
