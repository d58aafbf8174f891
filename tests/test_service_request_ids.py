"""Request ids on a live server: the client's X-Request-ID (or a new one) in the answer's header,
its error body and its access line, so an operator finds the line a user's report names."""

from __future__ import annotations

import re

import pytest
from service_support import Server

KEY = "request-id-key-0123456789abcdef"
#: What the server makes when the client gives no usable id.
MADE = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, pydoc_pipeline_dir):
    """A server with one read-write key."""
    root = tmp_path_factory.mktemp("request-ids")
    keys = root / "keys.txt"
    keys.write_text(f"{KEY} read,write\n")
    with Server(root / "db", pydoc_pipeline_dir, "--api-keys", str(keys)) as running:
        yield running


def test_a_clients_request_id_is_echoed_in_the_header_the_error_body_and_the_access_line(keyed):
    """The access log had no request id: a user's report of a refusal matched no line."""
    with keyed.client(KEY) as http:
        missing = http.get("/v1/models/nope", headers={"X-Request-ID": "report-42/a:b"})
        fine = http.get("/v1/models", headers={"X-Request-ID": "fine-1"})
    assert missing.status_code == 404 and fine.status_code == 200
    assert missing.headers["X-Request-ID"] == "report-42/a:b"
    assert missing.json()["request_id"] == "report-42/a:b"
    assert "'nope' is not served" in missing.json()["detail"]
    line = keyed.access_line("report-42/a:b")
    assert line["status"] == 404 and line["path"] == "/v1/models/nope"
    assert fine.headers["X-Request-ID"] == "fine-1"
    assert keyed.access_line("fine-1")["status"] == 200


def test_a_refusal_made_before_the_app_ran_carries_a_made_id(keyed):
    """The gate's own refusals (401 here) get an id too when the client sent none."""
    with keyed.client() as http:
        refused = http.get("/v1/models")
    made = refused.headers["X-Request-ID"]
    assert refused.status_code == 401 and MADE.fullmatch(made)
    assert refused.json()["request_id"] == made
    assert keyed.access_line(made)["status"] == 401


@pytest.mark.parametrize(
    "given",
    ["x" * 129, "two words", "tab\there", "caf\u00e9", KEY],
    ids=["too-long", "space", "control", "not-ascii", "an-api-key"],
)
def test_an_unusable_request_id_is_replaced_and_an_api_key_never_reaches_the_log(keyed, given):
    """A client's id is taken only when printable ASCII of at most 128 characters, and never
    when it is one of the server's keys (sent in the wrong header): a new one is made."""
    with keyed.client(KEY) as http:
        answer = http.get("/v1/models", headers={"X-Request-ID": given.encode()})
    made = answer.headers["X-Request-ID"]
    assert answer.status_code == 200 and MADE.fullmatch(made), made
    assert keyed.access_line(made)["path"] == "/v1/models"
    assert KEY not in keyed.output
