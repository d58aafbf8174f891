"""schemathesis against the live service: generated requests for every route, no 5xx and
every answer as the OpenAPI schema at /openapi.json says.

The fast form CI runs: a bounded number of examples per operation, derandomised (seeded), on
a loopback server this module starts and stops. Raise SCHEMA_EXAMPLES locally for a longer run.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from service_support import Server

#: Generated cases per operation: ~40 routes x methods x this stays well under a minute.
EXAMPLES = int(os.environ.get("SCHEMA_EXAMPLES", "25"))
#: With keys configured, schemathesis also checks that made-up keys are refused.
KEY = "schema-test-key-0123456789"
#: Operations where a schema-valid body can still be refused for what no schema states: a
#: SQL filter that does not parse, min_p_relevant without a calibrator, documents repeating
#: an id or changing a metadata field's type, an erasure's one of ids and where (as search's
#: one of query and queries). Every other check still runs on them.
CONTEXTUAL = ("/search", "/documents", "/erase")


@pytest.fixture(scope="module")
def live(tmp_path_factory, pydoc_pipeline_dir):
    """A server with one collection of a few documents, so item routes have something."""
    root = tmp_path_factory.mktemp("schema")
    keys = {"PROBEMBED_API_KEYS": f"{KEY} read,write"}
    server = Server(root / "db", pydoc_pipeline_dir, env=keys)
    with server as running, running.client(KEY) as http:
        http.post("/v1/collections", json={"name": "docs"})
        documents = [{"id": f"d{i}", "text": f"document number {i}"} for i in range(5)]
        http.post("/v1/collections/docs/documents", json={"documents": documents})
        yield running


@pytest.fixture(scope="module")
def api_schema(live):
    """The schema as served, its base URL the live server."""
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json")


def operations(schema) -> list:
    """Every operation of the schema (a schema that fails to load fails here)."""
    return [result.ok() for result in schema.get_all_operations()]


def fuzz(operation, excluded: list) -> None:
    """One seeded Hypothesis run of generated cases against one operation."""
    headers = {"Authorization": f"Bearer {KEY}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case) -> None:
        case.call_and_validate(headers=headers, excluded_checks=excluded)

    call()


def test_every_route_answers_as_its_schema_says(api_schema):
    # schemathesis's pytest plugin does not run under this pytest: one Hypothesis run per
    # operation instead, with the same checks (no 5xx, status and body as documented)
    found = operations(api_schema)
    assert len(found) >= 12, [op.label for op in found]
    for operation in found:
        contextual = operation.path.endswith(CONTEXTUAL)
        fuzz(operation, [positive_data_acceptance] if contextual else [])
