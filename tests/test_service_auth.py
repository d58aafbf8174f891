"""API keys and scopes on a live server, and the refusal to serve the network without them."""

from __future__ import annotations

import re
import subprocess
import sys

import openai
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from service_support import Server

from probembed.service import ApiKeys, ServiceSettings, create_app, load_keys
from probembed.service.auth import SCOPES, grants
from probembed.service.gate import PROBES

READER = "reader-key-0123456789abcdef"
WRITER = "writer-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef0"
SCRAPER = "scraper-key-0123456789abcdef"
DOCS = [{"id": "a", "text": "keys open doors"}, {"id": "b", "text": "scopes limit them"}]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, pydoc_pipeline_dir):
    root = tmp_path_factory.mktemp("auth")
    keys = root / "keys.txt"
    keys.write_text(
        f"# who may do what\n{READER}\n{WRITER} write\n{ADMIN} read,write  # ops\n"
        f"{SCRAPER} metrics  # Prometheus\n"
    )
    with Server(root / "db", pydoc_pipeline_dir, "--api-keys", str(keys)) as running:
        with running.client(ADMIN) as admin:
            admin.post("/v1/collections", json={"name": "kept"})
            admin.post("/v1/collections/kept/documents", json={"documents": DOCS})
        yield running


EMBED = ("POST", "/v1/embeddings", {"model": "hash", "input": "x"})
SEARCH = ("POST", "/v1/collections/kept/search", {"query": "doors"})
WRITE = ("POST", "/v1/collections/kept/documents", {"documents": [{"id": "c", "text": "new"}]})
DELETE = ("POST", "/v1/collections/kept/delete", {"ids": ["nope"]})
ERASE = ("POST", "/v1/collections/kept/erase", {"ids": ["nope"]})
CREATE = ("POST", "/v1/collections", {"name": "other"})


@pytest.mark.parametrize(
    ("key", "request_", "status"),
    [
        (None, EMBED, 401),
        ("not-a-key-0123456789", EMBED, 401),
        (READER, EMBED, 200),
        (READER, SEARCH, 200),
        (READER, WRITE, 403),
        (READER, DELETE, 403),
        (READER, ERASE, 403),
        (READER, CREATE, 403),
        (WRITER, SEARCH, 403),
        (WRITER, WRITE, 200),
        (WRITER, DELETE, 200),
        (WRITER, ERASE, 200),
        (ADMIN, SEARCH, 200),
        (None, ("GET", "/metrics", None), 401),
        (READER, ("GET", "/metrics", None), 200),
        (None, ("GET", "/healthz", None), 200),
        (None, ("GET", "/readyz", None), 200),
    ],
)
def test_scopes(guarded, key, request_, status):
    method, path, body = request_
    with guarded.client(key) as http:
        answer = http.request(method, path, json=body)
    assert answer.status_code == status, answer.text
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    if status == 403:
        assert "needs 'write'" in answer.text or "needs 'read'" in answer.text


def test_a_metrics_key_scrapes_metrics_and_reads_no_data(guarded):
    """A scrape credential was a `read` key, which also searched every collection and read
    every stored text. A `metrics` key gets /metrics (GET and HEAD) and a 403 on every other
    route, before its body is judged; a `read` key keeps /metrics."""
    with guarded.client(SCRAPER) as http:
        scraped = http.get("/metrics")
        headed = http.head("/metrics")
        refused = [
            http.request(method, path, json=body)
            for method, path, body in (
                ("GET", "/v1/models", None),
                ("GET", "/v1/collections", None),
                EMBED,
                SEARCH,
                WRITE,
                CREATE,
            )
        ]
        json_type = {"content-type": "application/json"}
        garbled = http.post(SEARCH[1], content=b'{"query": ', headers=json_type)
    assert scraped.status_code == 200, scraped.text
    assert scraped.headers["content-type"].startswith("text/plain")
    assert "# TYPE probembed_requests_total counter" in scraped.text
    assert headed.status_code == 200 and headed.content == b""
    for answer in (*refused, garbled):
        assert answer.status_code == 403, answer.text
        assert "this key grants ['metrics']; this route needs" in answer.text
    with guarded.client(READER) as http:
        assert "# TYPE probembed_requests_total counter" in http.get("/metrics").text


def test_a_key_that_may_not_list_collections_is_not_told_their_names_in_a_404(guarded):
    """The 404 of an unknown collection lists the collections there are (a typo, often): a
    write-only key, which may not list them (`GET /v1/collections` needs read), learnt every
    name from one write to a made-up one. A key that may read keeps the list."""
    writes = ("POST", "/v1/collections/kpt/documents", {"documents": DOCS})
    searches = ("POST", "/v1/collections/kpt/search", {"query": "doors"})
    for key, (method, path, body), listed in (
        (WRITER, writes, False),
        (READER, searches, True),
        (ADMIN, writes, True),
    ):
        with guarded.client(key) as http:
            answer = http.request(method, path, json=body)
        assert answer.status_code == 404, answer.text
        said = answer.json()["error"]["message"]
        assert said.startswith("no collection 'kpt' in <db>"), said
        assert ("; collections: " in said) is listed, said
        assert ("kept" in said) is listed, said


def test_a_request_without_a_valid_key_is_refused_before_its_body_is_read(guarded):
    """Parsed first, a stranger's malformed body got a 422 describing the parser's complaint,
    and any stranger could make the server buffer a body up to the size limit."""
    json_type = {"content-type": "application/json"}
    for key in (None, "not-a-key-0123456789"):
        with guarded.client(key) as http:
            garbled = http.post("/v1/embeddings", content=b'{"model": ', headers=json_type)
            bulky = http.post("/v1/collections/kept/documents", content=b"x" * 20_000_000)
            unknown = http.get("/v1/nowhere")
        for answer in (garbled, bulky, unknown):
            assert answer.status_code == 401, answer.text
            assert answer.json()["error"]["message"] in (
                "missing API key: send 'Authorization: Bearer KEY'",
                "unknown API key",
            )
    with guarded.client() as http:  # a key sent as Basic was "missing"
        basic = http.get("/v1/models", headers={"Authorization": "Basic dXNlcjpwYXNz"})
        bare = http.get("/v1/models", headers={"Authorization": "sk-live-0123456789abcdef"})
        alone = {
            word: http.get("/v1/models", headers={"Authorization": word}).json()["error"]
            for word in ("Bearer", "Negotiate")
        }
    assert basic.status_code == 401
    assert basic.json()["error"]["message"] == (
        "expected 'Authorization: Bearer KEY', got the scheme 'Basic'"
    )
    assert bare.status_code == 401 and "sk-live" not in bare.text  # a key is never echoed
    assert bare.json()["error"]["message"].startswith("the Authorization header has no scheme")
    assert alone["Bearer"]["message"].startswith("missing API key")  # a scheme, no key
    assert alone["Negotiate"]["message"].endswith("got the scheme 'Negotiate'")
    with guarded.client() as http:  # the schema and docs stay open
        assert http.get("/openapi.json").status_code == 200
        assert http.get("/docs").status_code == 200


def test_the_docs_pages_load_nothing_from_another_host(guarded):
    """/docs loaded Swagger UI's script and style from a CDN, and /redoc ReDoc's and Google's
    fonts: on a network without the internet both pages were blank. Every script, style and
    icon /docs references is now on the server, open without a key as the page is; /redoc is
    gone (ReDoc's script fetches its logo from cdn.redoc.ly whenever the page is opened)."""
    with guarded.client() as http:
        assert http.get("/redoc").status_code == 401  # no such page: as any unknown path
        for page in ("/docs",):
            html = http.get(page)
            assert html.status_code == 200
            assert not re.search(r"(?:https?:)?//\w", html.text), html.text  # no other host
            assets = re.findall(r'(?:src|href)="([^"]+)"', html.text)
            assert len(assets) >= 2, html.text  # the script, and the style or the icon
            for asset in assets:
                fetched = http.get(asset)
                assert fetched.status_code == 200 and fetched.content, asset


def test_openai_client_sends_its_key(guarded):
    good = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=READER, max_retries=0)
    assert len(good.embeddings.create(model="hash", input=["a", "b"]).data) == 2
    bad = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key="wrong-key-0123456789", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="unknown API key"):
        bad.embeddings.create(model="hash", input="a")


def test_no_keys_means_loopback_only(tmp_path, pydoc_pipeline_dir):
    command = [sys.executable, "-m", "probembed", "serve", "--db", str(tmp_path / "db")]
    command += ["--pipeline", str(pydoc_pipeline_dir), "--host", "0.0.0.0"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # and no PROBEMBED_API_KEYS
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "refusing to serve on '0.0.0.0' without API keys" in done.stderr
    assert ServiceSettings(tmp_path, host="0.0.0.0", insecure=True).insecure
    assert ServiceSettings(tmp_path, host="::1").host == "::1"


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        (["short read"], "key has 5 characters"),
        ([f"{READER} admin"], r"entry 1: unknown scope\(s\) \['admin'\]; scopes are .*'metrics'"),
        ([READER, READER], "entry 2: key repeated"),
        ([f"{READER} read write"], r"expected 'KEY \[SCOPE,SCOPE\]'"),
        (["# only a comment"], "none was found"),
        (["clé-0123456789abcdef"], "entry 1: a key must be printable ASCII"),
    ],
)
def test_bad_key_entries_are_named(entries, says):
    with pytest.raises(ValueError, match=says):
        ApiKeys.parse(entries, "keys.txt")


def test_a_hash_inside_a_key_is_the_keys_and_a_comment_needs_a_space_before_it():
    """`key#rest write` is one key with write, not `key` read-only; `# …` after a space is a
    comment."""
    keys = ApiKeys.parse(["hashkey-0123456789#abcdefgh read,write  # laptop", "#note"], "k")
    assert keys.granted("hashkey-0123456789#abcdefgh") == {"read", "write"}
    assert keys.granted("hashkey-0123456789") is None


def test_keys_from_the_environment():
    entries = f"{READER};{WRITER} read,write;{SCRAPER} metrics;{ADMIN} read,metrics"
    keys = load_keys(environ={"PROBEMBED_API_KEYS": entries})
    assert keys is not None
    assert keys.granted(READER) == {"read"} and keys.granted(WRITER) == {"read", "write"}
    assert keys.granted(SCRAPER) == {"metrics"} and keys.granted(ADMIN) == {"read", "metrics"}
    assert keys.granted("guess-0123456789abcdef") is None
    assert load_keys(environ={}) is None


def test_a_probe_with_a_trailing_slash_is_answered_not_refused(guarded):
    """A load balancer's /healthz/ got 401 from a server with keys (307 to /healthz without,
    which a probe that follows no redirect takes for down)."""
    with guarded.client() as http:
        for path, status in (("/healthz/", "ok"), ("/readyz/", "ready")):
            answer = http.get(path)
            assert answer.status_code == 200 and answer.json()["status"] == status, answer.text
        assert http.get("/metrics/").status_code == 401  # open paths only, slash or not


def test_a_key_without_the_routes_scope_is_refused_before_its_body_is_judged(guarded):
    """FastAPI parses and validates a body before the route's scope is checked: a read-only
    key's malformed or invalid writes got 400s and 422s describing the write schema."""
    json_type = {"content-type": "application/json"}
    bodies = (b'{"documents": ', b'{"documents": 5}', b'{"nothing": 1}', b"\xff")
    with guarded.client(READER) as http:
        for body in bodies:
            answer = http.post("/v1/collections/kept/documents", content=body, headers=json_type)
            assert answer.status_code == 403, (body, answer.text)
            assert "needs 'write'" in answer.text
        invalid = http.post("/v1/collections/kept/search", json={"k": 0})
    assert invalid.status_code == 422 and "greater than or equal to 1" in invalid.text  # judged
    with guarded.client(WRITER) as http:
        garbled = http.post("/v1/collections/kept/documents", content=bodies[0], headers=json_type)
        searched = http.post("/v1/collections/kept/search", json={"k": 0})
    assert garbled.status_code == 422 and searched.status_code == 403


def test_a_key_without_the_routes_scope_gets_403_before_413_for_a_body_over_the_limit(guarded):
    """The gate refuses a body over the limit before routing: a read-only key's write got
    413 over the limit and 403 within it. The scope is now judged first; a key that has it
    still gets 413, and so does a path no route matches."""
    bulky = b"x" * 20_000_000  # over the default 16 MiB
    write = "/v1/collections/kept/documents"
    with guarded.client(READER) as http:
        refused = http.post(write, content=bulky)
        nowhere = http.post("/v1/nowhere", content=bulky)
    assert refused.status_code == 403 and "needs 'write'" in refused.text
    assert refused.json()["error"]["type"] == "permission_error"
    assert nowhere.status_code == 413
    with guarded.client(WRITER) as http:
        for path in (write, "/v1/collections/kept/delete"):
            assert http.post(path, content=bulky).status_code == 413
        searched = http.post("/v1/collections/kept/search", content=bulky)
    assert searched.status_code == 403 and "needs 'read'" in searched.text


def test_the_gate_and_the_routes_judge_the_same_of_two_authorization_headers(guarded):
    """The gate read the last header, the routes' scope check the first."""
    with guarded.client() as http:
        for first, second, status in ((READER, "not-a-key-0123456789", 200), ("nope", READER, 401)):
            headers = [("Authorization", f"Bearer {first}"), ("Authorization", f"Bearer {second}")]
            answer = http.post(
                "/v1/embeddings", json={"model": "hash", "input": "x"}, headers=headers
            )
            assert answer.status_code == status, (first, second, answer.text)


def test_any_white_space_between_bearer_and_the_key_separates_them(guarded):
    """`Bearer<TAB>KEY` was told "the Authorization header has no scheme"; the routes' own
    check (FastAPI's HTTPBearer) split at one space and refused what the gate let through."""
    write = {"documents": [{"id": "tabbed", "text": "a tab before the key"}]}
    with guarded.client() as http:
        for gap in ("\t", "  ", " \t "):
            headers = {"Authorization": f"Bearer{gap}{WRITER}"}
            answer = http.post("/v1/collections/kept/documents", json=write, headers=headers)
            assert answer.status_code == 200, (gap, answer.text)
        unknown = http.get("/v1/models", headers={"Authorization": "Bearer\tnot-a-key-0123"})
    assert unknown.status_code == 401 and unknown.json()["detail"] == "unknown API key"


def test_the_schema_names_the_scope_each_route_needs(guarded, tmp_path, pydoc_pipeline_dir):
    """Every operation showed one anonymous bearer scheme and a 403 "the key lacks the scope
    this route needs", so a client generated from /openapi.json could not tell which key a
    route takes. Each operation's security now names the scheme of the scope its `_scope`
    dependency needs, described, then those of the wider scopes whose keys get in too (/metrics
    listed `metrics` alone, which a read key opens as well), and its 401 and 403 name that
    scope; the probes need none.
    Read off the app's own routes (a route added without a documented scope fails here) and
    checked against what the server does with a key of each scope; a server without keys
    publishes the same."""
    with guarded.client() as http:
        served = http.get("/openapi.json").json()
    keyless = create_app(ServiceSettings(tmp_path / "db", pipelines=(str(pydoc_pipeline_dir),)))
    own = keyless.openapi()
    schemes = served["components"]["securitySchemes"]
    assert schemes == own["components"]["securitySchemes"]
    assert set(schemes) == set(SCOPES), schemes  # no anonymous scheme left
    for scope, scheme in schemes.items():
        assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
        assert f"`{scope}` scope" in scheme["description"], scheme
    assert "GET /metrics" in schemes["read"]["description"]  # read grants metrics
    assert served["paths"]["/metrics"]["get"]["security"] == [{"metrics": []}, {"read": []}]
    single = {"read": READER, "write": WRITER, "metrics": SCRAPER}
    routes = [  # as the schema reads them: the routers' routes, each as it was included
        route
        for route in iter_route_contexts(keyless.routes)
        if isinstance(route.original_route, APIRoute) and route.include_in_schema
    ]
    assert len(routes) >= 12, [route.path_format for route in routes]
    for route in routes:
        scopes = (getattr(each.dependency, "needed_scope", None) for each in route.dependencies)
        needed = [scope for scope in scopes if scope is not None]
        for method in route.methods:
            where = f"{method} {route.path_format}"
            operation = served["paths"][route.path_format][method.lower()]
            assert _access(operation) == _access(own["paths"][route.path_format][method.lower()])
            responses = operation["responses"]
            if not needed:  # a route of no scope is one the gate lets in without a key
                assert route.path_format in PROBES, f"{where} needs no scope but a key"
                assert "security" not in operation and not {"401", "403"} & set(responses)
                continue
            assert len(needed) == 1, where
            (scope,) = needed
            for status in ("401", "403"):
                assert f"'{scope}'" in responses.get(status, {}).get("description", ""), where
            path = re.sub(r"\{[^}]+\}", "absent", route.path_format)  # nothing there to change
            let_in = []
            for key_scope, key in single.items():
                with guarded.client(key) as http:
                    status = http.request(method, path).status_code
                refused = not grants(frozenset({key_scope}), scope)
                assert (status == 403) is refused, (where, key_scope, status)
                let_in += [] if refused else [key_scope]
            # the schema's alternatives are exactly the keys the server lets in, its own first
            listed = [name for entry in operation["security"] for name in entry]
            assert listed[0] == scope and sorted(listed) == sorted(let_in), (where, listed)
            assert operation["security"] == [{name: []} for name in listed], where  # each alone


def _access(operation: dict) -> tuple:
    """What an operation of the schema says of keys: its security, its 401 and 403."""
    responses = operation["responses"]
    return operation.get("security"), responses.get("401"), responses.get("403")
