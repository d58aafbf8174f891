"""The FastAPI application: routes that validate, hand work to the store and the batchers,
and answer; the maths stays in the pipeline and the store."""

from __future__ import annotations

import asyncio
import functools
import logging
import pathlib
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from probembed import __version__
from probembed.cache import default_cache_dir
from probembed.chunking import ChunkSettings
from probembed.encoders.base import is_blank, lone_surrogate
from probembed.fusion import Fused
from probembed.pipeline import pipeline_name
from probembed.service import schemas
from probembed.service.answers import _search_body
from probembed.service.auth import READ, WRITE
from probembed.service.batching import QueueFullError
from probembed.service.embeddings import _embeddings
from probembed.service.errors import _ERRORS, _INTERNAL, _STATUS, ApiError, _errors, refusal
from probembed.service.gate import Gate
from probembed.service.operations import _operations
from probembed.service.scopes import _lacking_scope, _scope, _scope_refusal
from probembed.service.settings import Limits, ServiceSettings
from probembed.service.state import NotReadyError, Service, UnknownModelError
from probembed.service.validation import (
    _PROBLEMS_TOLD,
    UNPARSABLE,
    _echoed,
    _kept,
    _problems,
    _unreadable,
    check_texts,
    text_problem,
)
from probembed.store import (
    CollectionNotFoundError,
    IngestError,
    NotChunkedError,
    Problem,
    Record,
    StorageUnavailableError,
    StoreStateError,
    UndoConflictError,
)
from probembed.store.chunked import (
    DocumentReport,
    ingest_parsed,
    record_document,
    refuse_mixing,
)
from probembed.store.errors import storage_failure
from probembed.store.ingest import (
    IngestReport,
    commit,
    finish,
    not_unicode,
    prepare,
    remove,
)
from probembed.store.location import database_target
from probembed.store.rows import PipelineInfo

log = logging.getLogger("probembed.service")

#: A collection name in a path, as the store accepts them.
CollectionName = Annotated[str, Path(pattern=schemas.COLLECTION_NAME)]


def create_app(settings: ServiceSettings) -> FastAPI:
    """The service as an ASGI app (start it with `probembed serve` or any ASGI server)."""
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(service.start())
        try:
            yield
        finally:
            loading.cancel()
            await service.stop()

    app = FastAPI(
        title="probembed",
        version=__version__,
        summary="Probabilistic embeddings and search: every vector and hit says how sure it is.",
        lifespan=lifespan,
    )
    app.state.service = service
    _handle_errors(app, service)
    routers = (_operations(service), _embeddings(service), _collections(service))
    for router in routers:
        app.include_router(router)
    pages = frozenset(
        p
        for p in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url)
        if p
    )
    app.add_middleware(
        Gate,
        metrics=service.metrics,
        max_body_bytes=settings.limits.max_body_bytes,
        pages=pages,
        keys=settings.keys,
        open_paths=pages | {"/healthz", "/readyz"},
        refused=_scope_refusal([r for router in routers for r in router.routes], settings.keys),
    )
    _publish_limits(app, settings.limits, [pipeline_name(p) for p in settings.pipelines])
    return app


#: (schema, property) -> which limits bind it: texts (characters, non-blank), lists (count).
_TEXTS = {("EmbeddingRequest", "input"), ("SearchRequest", "query")}
_TEXTS |= {("SearchRequest", "queries"), ("SimilarityInputs", "source_sentence")}
_TEXTS |= {("SimilarityInputs", "sentences")}
_LISTS = {("EmbeddingRequest", "input"), ("DocumentsWrite", "documents")}
_LISTS |= {("SimilarityInputs", "sentences")}
_LISTS |= {("DeleteDocuments", "ids"), ("SearchRequest", "queries")}


def _publish_limits(app: FastAPI, limits: Limits, pipelines: Sequence[str]) -> None:
    """State this server's limits and pipelines in its OpenAPI schema, so clients and fuzzers
    see them (a collection naming another pipeline is a 422, as a value over a limit is)."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            components = schema["components"]["schemas"]
            for name, prop in _TEXTS | _LISTS:
                node = components[name]["properties"][prop]
                _constrain(node, limits, (name, prop) in _TEXTS, (name, prop) in _LISTS)
            components["SearchRequest"]["properties"]["k"]["maximum"] = limits.max_k
            named = components["CollectionCreate"]["properties"]["pipeline"]
            for option in named.get("anyOf", [named]):
                if option.get("type") == "string":
                    option["enum"] = list(pipelines)
            components["Document"]["properties"]["text"]["description"] = (
                f"At most {limits.max_chars} characters (--max-chars), unless the write chunks "
                "its documents: then only the body's size bounds it."
            )
            # no JSON Schema keyword bounds a whole body: said in words and as an extension
            info = schema["info"]
            info["x-max-body-bytes"] = limits.max_body_bytes
            body = f"Request bodies up to {limits.max_body_bytes} bytes (413 beyond)."
            info["description"] = f"{info.get('description', '')}\n\n{body}".strip()
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _constrain(node: dict[str, Any], limits: Limits, text: bool, listed: bool) -> None:
    """Add maxLength and a non-blank pattern to strings, maxItems to arrays, in anyOf too."""
    for option in node.get("anyOf", []):
        _constrain(option, limits, text, listed)
    if node.get("type") == "string" and text:
        node["maxLength"] = limits.max_chars
        node["pattern"] = _non_blank()
    if node.get("type") == "array":
        if listed:
            node["minItems"], node["maxItems"] = 1, limits.max_inputs
        _constrain(node.get("items", {}), limits, text, False)


@functools.cache
def _non_blank() -> str:
    """The pattern of a text with something to embed: one character `is_blank` does not
    pass over (white space, control and format characters, combining marks), as the routes
    check it; `\\S` let a fuzzer send "\\x01" as valid and count its 422 a failure. The
    Basic Multilingual Plane only, as \\uXXXX escapes that every JSON Schema validator reads
    (a text of astral marks alone passes it and is refused), built in some 50 ms."""
    ranges: list[list[int]] = []
    for code in range(0x10000):
        if is_blank(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    parts = (f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)
    return f"[^{''.join(parts)}]"


def _handle_errors(app: FastAPI, service: Service) -> None:
    """Each refusal as JSON {"detail": ...} with its status; Retry-After where it helps."""
    db, keys = service.settings.db, service.settings.keys
    roots = _spellings(db)
    remote = isinstance(database_target(db), str)

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return refusal(exc.status, exc.detail, exc.headers)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        lacking = _lacking_scope(request, keys)  # FastAPI reads the body before the scope
        if lacking is not None:
            return refusal(403, lacking)
        kept = _kept(exc.errors())
        problems = _problems(kept, request.headers.get("content-type", ""))
        more = len(problems) - _PROBLEMS_TOLD
        told = "; ".join(problems[:_PROBLEMS_TOLD]) + (f"; and {more} more" if more > 0 else "")
        return refusal(422, told, raw=_echoed(kept))

    async def known(request: Request, exc: Exception) -> Response:
        status = next(code for kind, code in _STATUS if isinstance(exc, kind))
        if isinstance(exc, StoreStateError):  # the operator's to mend, so it goes in the log
            log.error("%s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        headers = {}
        if isinstance(exc, StorageUnavailableError):
            return storage_down(request, str(exc))
        if isinstance(exc, QueueFullError):
            headers["Retry-After"] = str(exc.retry_after)
        elif isinstance(exc, NotReadyError) and not exc.failed:
            headers["Retry-After"] = "1"
        if isinstance(exc, IngestError):
            message = exc.told('send "on_error": "skip"')
            return refusal(status, message, headers, raw=[str(p) for p in exc.problems])
        if isinstance(exc, NotChunkedError):
            return refusal(status, exc.told('"chunk": true in the documents write'), headers)
        message = str(exc)
        if isinstance(exc, UndoConflictError):  # what stopped the write, as it would be told
            stop = exc.stopped_by
            known_stop = isinstance(stop, tuple(kind for kind, _ in _STATUS))
            message = exc.told(str(stop) if known_stop else _INTERNAL)
        local = _local_places() if isinstance(exc, StoreStateError) else []
        for root, shown in [*roots, *local]:  # where the server keeps things is the operator's
            message = message.replace(root, shown)
        return refusal(status, message, headers)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        message = str(exc.detail)
        if exc.status_code == 400 and message == UNPARSABLE:  # FastAPI's, for any read failure
            lacking = _lacking_scope(request, keys)
            if lacking is not None:
                return refusal(403, lacking)
            message = _unreadable(await request.body())
        return refusal(exc.status_code, message, exc.headers)

    def storage_down(request: Request, said: str) -> Response:
        """503 with Retry-After for a failure of the database's object storage, which the
        same request may not meet later; logged in a line, and /readyz says so a while."""
        for root, shown in roots:
            said = said.replace(root, shown)
        log.warning("%s %s: storage failed: %s", request.method, request.url.path, said)
        service.storage_failed(said)
        return refusal(503, f"the database's storage failed: {said}", {"Retry-After": "5"})

    async def internal(request: Request, exc: Exception) -> Response:
        """Any other exception is the server's fault, never the client's (a numpy ValueError
        deep in search was a 422 "invalid input" and left no trace): 500 in the error body
        every route answers, while the server logs the traceback."""
        return refusal(500, _INTERNAL)

    async def engine_error(request: Request, exc: Exception) -> Response:
        """LanceDB's I/O failure of object storage is the storage's (`storage_failure`): a
        503 (it was a 500 and a trace); any other such error is `internal`, its traceback
        logged here (a handler for its own class is not re-raised to the server's log)."""
        said = storage_failure(exc) if remote else None
        if said is not None:
            return storage_down(request, said)
        log.error("%s %s: internal error", request.method, request.url.path, exc_info=exc)
        return await internal(request, exc)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)  # unparsable body, no route
    for kind, _ in _STATUS:
        app.add_exception_handler(kind, known)
    app.add_exception_handler(RuntimeError, engine_error)
    app.add_exception_handler(OSError, engine_error)
    app.add_exception_handler(Exception, internal)


def _spellings(db: pathlib.Path | str) -> list[tuple[str, str]]:
    """(spelling, what a client reads instead) of the operator's locations a message may
    name, longest first: the database; in a message about the server's own storage
    (`StoreStateError`: a full disk names the search snapshot's folder) also the local cache
    of an object-storage database and the temp dir."""
    target = database_target(db)
    if isinstance(target, str):
        return [(target.rstrip("/"), "<db>")]
    # absolute only: a relative `--db db` is also in users' words
    spellings = {str(target.absolute()), str(target.resolve())}
    return [(spelling, "<db>") for spelling in sorted(spellings, key=len, reverse=True)]


def _local_places() -> list[tuple[str, str]]:
    """(spelling, shown) of the temp dir and the local cache, longest first."""
    places = {}
    for shown, where in (("<tmp>", tempfile.gettempdir()), ("<cache>", str(default_cache_dir()))):
        for path in (pathlib.Path(where).absolute(), pathlib.Path(where).resolve()):
            places[str(path)] = shown
    return sorted(places.items(), key=lambda place: len(place[0]), reverse=True)


def _document(
    document: schemas.Document, i: int, limits: Limits, chunked: bool
) -> Record | Problem:
    """A document of a write as the record ingest reads, or, where its text cannot be embedded
    as sent, the problem a skipping write reports (a refusing one was refused before)."""
    source = f"documents[{i}]"
    problem = text_problem(document.text, limits, chunked)
    if problem is not None:
        return Problem(source, f"document {document.id!r}: its text {problem}", document.id)
    return Record(document.id, document.text, document.metadata, source)


def _upsert_hint(changed: list[str] | None) -> str | None:
    """What a client sends to store the texts a write left as stored, or None."""
    if not changed:
        return None
    return (
        f"{len(changed)} id(s) are stored with another text or metadata (e.g. {changed[0]!r}) "
        'and were left as stored: send "upsert": true to replace them'
    )


def _chunked_report(name: str, report: DocumentReport, count: int) -> schemas.WriteReport:
    """What a chunked write did, documents and chunks, in the response's shape."""
    return schemas.WriteReport(
        collection=name,
        added=report.added,
        updated=report.updated,
        already_stored=0,
        skipped=[str(p) for p in report.problems],
        count=count,
        unchanged=report.unchanged,
        removed=report.removed,
        chunks_written=report.chunks_written,
        chunks_removed=report.chunks_removed,
    )


def _collections(service: Service) -> APIRouter:
    """Collections: list, create, stats, delete; documents: add/upsert, delete; search."""
    router = APIRouter(prefix="/v1/collections", tags=["collections"])
    reader = [Security(_scope(service, READ))]
    writer = [Security(_scope(service, WRITE))]
    limits = service.settings.limits

    def info(name: str) -> schemas.CollectionInfo:
        collection = service.collection(name)
        service.count_items(collection)
        return schemas.CollectionInfo.model_validate(collection.stats().to_json())

    @router.get(
        "",
        response_model=schemas.CollectionList,
        dependencies=reader,
        responses=_errors(but=404),  # names none: one dropped while listing is left out
    )
    async def list_collections() -> schemas.CollectionList:
        """Every collection with its stats."""
        db = service.require_ready()
        names = await asyncio.to_thread(db.collections)

        def listed(name: str) -> schemas.CollectionInfo | None:
            try:
                return info(name)
            except CollectionNotFoundError:  # dropped since the names were read: not listed
                return None

        found = [await service.run(n, lambda n=n: listed(n)) for n in names]  # type: ignore[misc]
        return schemas.CollectionList(data=[i for i in found if i is not None])

    @router.post(
        "",
        response_model=schemas.CollectionInfo,
        status_code=201,
        dependencies=writer,
        responses=_errors(but=404),  # nothing in its path to miss: an unserved pipeline is a 422
    )
    async def create_collection(body: schemas.CollectionCreate) -> schemas.CollectionInfo:
        """An empty collection for a served pipeline's vectors (422 naming the served ones if
        `pipeline` is not one of them)."""
        try:
            pipeline = service.pipeline(body.pipeline, field="pipeline")
        except UnknownModelError as exc:  # 404 is for a name in the path (GET /v1/models/x)
            raise ApiError(422, str(exc)) from exc
        db = service.require_ready()

        def create() -> schemas.CollectionInfo:
            db.collection(body.name).create(pipeline)
            return info(body.name)

        return await service.run(body.name, create)

    @router.get(
        "/{name}", response_model=schemas.CollectionInfo, dependencies=reader, responses=_ERRORS
    )
    async def collection_stats(name: CollectionName) -> schemas.CollectionInfo:
        """Count, bytes, version, pipeline and adapted weights of one collection."""
        return await service.run(name, lambda: info(name))

    @router.delete(
        "/{name}", response_model=schemas.DeleteReport, dependencies=writer, responses=_ERRORS
    )
    async def drop_collection(name: CollectionName) -> schemas.DeleteReport:
        """Delete a collection and everything in it."""
        db = service.require_ready()

        def drop() -> tuple[schemas.DeleteReport, str]:
            collection = service.collection(name)
            count, fingerprint = collection.count(), collection.pipeline.fingerprint
            db.drop(name)
            service.forget(name)
            return schemas.DeleteReport(collection=name, deleted=count, count=0), fingerprint

        report, fingerprint = await service.run(name, drop, writer=True)  # after chunked writes
        service.retire(fingerprint)
        return report

    @router.post(
        "/{name}/documents",
        response_model=schemas.WriteReport,
        dependencies=writer,
        responses=_ERRORS,
    )
    async def add_documents(
        name: CollectionName, body: schemas.DocumentsWrite
    ) -> schemas.WriteReport:
        """Add documents (or replace them, with upsert) in one commit: all of them or none.

        With `chunk`, each document is stored as chunks, as `probembed ingest --chunk` does:
        documents whose content is unchanged are left alone, and a bad one writes nothing.
        """
        options, skip = body.chunking, body.on_error == "skip"
        texts = [d.text for d in body.documents]
        chunked = options is not None
        check_texts(texts, "documents", limits, allow_empty=True, chunked=chunked, each=not skip)
        collection = await service.run(name, lambda: service.collection(name))
        pipeline = await service.prepare(collection)
        batcher = service.batcher(pipeline)
        records = [_document(d, i, limits, chunked) for i, d in enumerate(body.documents)]

        if options is not None:
            for i, record in enumerate(records):  # chunking hashes them first, checks after
                if isinstance(record, Problem):
                    continue
                unencodable = not_unicode(record.id, record.text, record.metadata)
                if unencodable is None:
                    continue
                if not skip:
                    raise ApiError(422, f"{record.source}: {unencodable}")
                records[i] = Problem(
                    record.source, f"document {record.id!r}: {unencodable}", record.id
                )
            settings = ChunkSettings.sized(options.max_tokens, options.overlap_tokens)
            documents = [  # markdown None: by the id, as the CLI reads a JSONL file's records
                r if isinstance(r, Problem) else record_document(r, options.markdown)
                for r in records
            ]

            loop = asyncio.get_running_loop()

            def encode(texts: list[str]) -> Fused:  # the collection searchable meanwhile
                with service.unlocked(name, loop):
                    fused = batcher.encode_blocking(texts)
                # a plain write may have filled the empty collection meanwhile: this write
                # then fails, and ingest_parsed takes back what it wrote
                refuse_mixing(collection, chunks=True)
                return fused

            def write_chunks() -> schemas.WriteReport:
                report = ingest_parsed(
                    documents,
                    service.still(collection),
                    pipeline,
                    settings,
                    sync=body.sync,
                    on_error=body.on_error,
                    encode=encode,
                    label=name,
                    prefix=body.prefix,
                )
                return _chunked_report(name, report, service.count_items(collection))

            return await service.run(name, write_chunks, writer=True)

        def prepared() -> tuple[IngestReport, list[Record]]:  # Problems are reported, skipped
            refuse_mixing(service.still(collection), chunks=False)
            report, todo, _ = prepare(
                records, collection, pipeline, body.on_error, body.upsert, body.prefix
            )  # one commit: its batch decides its own column types
            return report, todo

        report, todo = await service.run(name, prepared)
        # encoded on the event loop, with the collection unlocked: a write that waits for
        # the encoders (seconds, under load) must not hold up the collection's searches.
        # Each record is one row; an id another request stored meanwhile counts as stored.
        fused = await batcher.encode([r.text for r in todo]) if todo else None

        def write() -> schemas.WriteReport:
            # a chunked write may have filled the empty collection while this one encoded
            refuse_mixing(service.still(collection), chunks=False)
            if fused is not None:
                commit(collection, PipelineInfo.of(pipeline), todo, fused, body.upsert, report)
            finish(collection, pipeline)
            changed = None if body.upsert else report.changed
            return schemas.WriteReport(
                collection=name,
                added=report.added,
                updated=report.updated,
                already_stored=report.already_stored,
                skipped=[str(p) for p in report.problems],
                count=service.count_items(collection),
                unchanged=report.unchanged if body.upsert else None,
                changed=None if changed is None else len(changed),
                hint=_upsert_hint(changed),
            )

        return await service.run(name, write)

    @router.post(
        "/{name}/delete",
        response_model=schemas.DeleteReport,
        dependencies=writer,
        responses=_ERRORS,
    )
    async def delete_documents(
        name: CollectionName, body: schemas.DeleteDocuments
    ) -> schemas.DeleteReport:
        """Delete items by id, or with `doc` every chunk of these documents, in one commit."""
        if len(body.ids) > limits.max_inputs:
            raise ApiError(
                413,
                f"ids has {len(body.ids)} entries; the limit is {limits.max_inputs} (--max-inputs)",
            )

        for i, doc_id in enumerate(body.ids):
            surrogate = lone_surrogate(doc_id)
            if surrogate is not None:
                raise ApiError(422, f"ids[{i}] is not valid Unicode: it holds {surrogate}")

        def delete() -> schemas.DeleteReport:
            collection = service.collection(name)
            hint = None
            if body.doc:
                deleted, gone = collection.delete_documents(body.ids)
                missing = len(gone)
                if deleted:
                    finish(collection, None)  # loads the pipeline only to measure agreement
                chunks = collection.named_otherwise(gone, documents=True)
                if chunks:  # a chunk's id names no document
                    chunk, document = next(iter(chunks.items()))
                    hint = (
                        f"{len(chunks)} id(s) are chunk ids (e.g. {chunk!r}): without "
                        f'"doc" they delete that chunk; its document is {document!r}'
                    )
            else:
                present = collection.existing(body.ids) if collection.chunked else set()
                deleted = remove(collection, body.ids)
                missing = len(set(body.ids)) - deleted
                gone = [i for i in dict.fromkeys(body.ids) if i not in present]
                named = list(collection.named_otherwise(gone, documents=False) if missing else {})
                if named:  # a document's id names no row of a chunked collection
                    hint = (
                        f"{len(named)} id(s) are documents stored as chunks (e.g. "
                        f'{named[0]!r}): send "doc": true to delete their chunks'
                    )
            count = service.count_items(collection)
            return schemas.DeleteReport(
                collection=name, deleted=deleted, count=count, not_found=missing, hint=hint
            )

        # after chunked writes: one that lets the lock go to encode would otherwise store the
        # rest of a document this deletes, and the next write would find it partly stored
        return await service.run(name, delete, writer=True)

    @router.post(
        "/{name}/search",
        response_model=schemas.SearchResponse,
        dependencies=reader,
        responses=_ERRORS,
    )
    async def search(name: CollectionName, body: schemas.SearchRequest) -> Response:
        """The k best items per query, each with score, std, weights, p_relevant, and a
        confidence per query."""
        texts, single = body.texts, body.query is not None
        check_texts(texts, "query" if single else "queries", limits, single=single)
        if body.k > limits.max_k:
            raise ApiError(422, f"k={body.k} exceeds the limit of {limits.max_k} hits (--max-k)")
        collection = await service.run(name, lambda: service.collection(name))
        pipeline = await service.prepare(collection)
        fused = await service.batcher(pipeline).encode(texts)

        def run() -> list:
            return (
                service.still(collection)
                .searcher()
                .search_fused(
                    fused,
                    body.k,
                    body.score,
                    body.exact,
                    body.where,
                    body.hybrid,
                    texts,
                    min_p_relevant=body.min_p_relevant,
                    group_by_doc=body.group_by_doc,
                )
            )

        results = await service.run(name, run)
        body_bytes = await asyncio.to_thread(_search_body, name, results)  # the lock let go
        return Response(body_bytes, media_type="application/json")

    return router
