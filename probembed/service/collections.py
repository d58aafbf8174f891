"""The collections routes: create, list, stats and drop a collection; write, delete and erase
its documents; search it."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Path, Security
from fastapi.responses import Response

from probembed.chunking import GivenChunking
from probembed.encoders.base import lone_surrogate
from probembed.fusion import Fused
from probembed.service import schemas
from probembed.service.answers import _search_body
from probembed.service.auth import READ, WRITE
from probembed.service.errors import _ERRORS, ApiError, _errors
from probembed.service.scopes import ScopedRoute, _scope
from probembed.service.settings import Limits
from probembed.service.state import Service, UnknownModelError
from probembed.service.validation import check_texts, text_problem
from probembed.store import CollectionNotFoundError, Problem, Record
from probembed.store.chunked import (
    DocumentReport,
    ingest_parsed,
    record_document,
)
from probembed.store.ingest import (
    IngestReport,
    commit,
    finish,
    finish_delete,
    prepare,
)
from probembed.store.kinds import refuse_mixing
from probembed.store.rows import PipelineInfo, not_unicode
from probembed.store.search import cut_at

#: Seconds a write that plans over a collection's documents (chunked, a sync, a delete by
#: document) waits for another process's such write (`Collection.planning`): none, since it
#: would wait in its collection's turn (`Service.run`), holding up that collection's
#: searches; the client is answered 409 naming that write and sends it again later.
PLAN_WAIT = 0.0
#: Retry-After of that 409: how often to ask again, not an estimate of when the other write
#: ends, which nothing here knows (a sync of one file or of a whole folder); its detail names
#: that write and since when it runs.
PLAN_RETRY_S = 5
#: A collection name in a path, as the store accepts them.
CollectionName = Annotated[str, Path(pattern=schemas.COLLECTION_NAME)]


def _document(
    document: schemas.Document, i: int, limits: Limits, chunked: bool
) -> Record | Problem:
    """A document of a write as the record ingest reads, or, where its text cannot be embedded
    as sent, the problem a skipping write reports (a refusing one was refused before)."""
    source = f"documents[{i}]"
    problem = text_problem(document.text, limits, chunked, stored=True)
    if problem is not None:
        return Problem(source, f"document {document.id!r}: its text {problem}", document.id)
    return Record(document.id, document.text, document.metadata, source)


def _check_ids(ids: list[str], limits: Limits) -> None:
    """Refuse a delete's or erasure's ids past `--max-inputs` (413) or not valid Unicode
    (422), naming the first such id, before the collection is touched."""
    if len(ids) > limits.max_inputs:
        raise ApiError(
            413, f"ids has {len(ids)} entries; the limit is {limits.max_inputs} (--max-inputs)"
        )
    for i, given in enumerate(ids):
        surrogate = lone_surrogate(given)
        if surrogate is not None:
            raise ApiError(422, f"ids[{i}] is not valid Unicode: it holds {surrogate}")


def _upsert_hint(changed: list[str] | None) -> str | None:
    """What a client sends to store the texts a write left as stored, or None."""
    if not changed:
        return None
    return (
        f"{len(changed)} id(s) are stored with another text or metadata (e.g. {changed[0]!r}) "
        'and were left as stored: send "upsert": true to replace them'
    )


def _chunked_report(name: str, report: DocumentReport, count: int) -> schemas.WriteReport:
    """What a chunked write did, documents and chunks, and the size it cut them at where
    that was one (`DocumentReport.chunked_at`), in the response's shape."""
    return schemas.WriteReport(**report.to_json(), collection=name, already_stored=0, count=count)


def _collections(service: Service) -> APIRouter:
    """Collections: list, create, stats, delete; documents: add/upsert, delete; search."""
    router = APIRouter(prefix="/v1/collections", tags=["collections"], route_class=ScopedRoute)
    reader = [Security(_scope(service, READ))]
    writer = [Security(_scope(service, WRITE))]
    limits = service.settings.limits

    def info(name: str) -> schemas.CollectionInfo:
        collection = service.collection(name)
        service.count_items(collection)
        problem = service.unservable.get(name)
        return schemas.CollectionInfo.model_validate(
            {**collection.stats().to_json(), "problem": problem}
        )

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
        service.forget_all_but(names)

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
        """Add documents (or replace them, with upsert) in one commit: all of them or none;
        with sync, the stored documents the request does not hold are removed right after it
        (a commit per 5,000 ids, put back with the write if one fails).

        With `chunk`, each document is stored as chunks, as `probembed ingest --chunk` does:
        documents whose content is unchanged are left alone, and a bad one writes nothing.
        """
        options, skip = body.chunking, body.on_error == "skip"
        texts = [d.text for d in body.documents]
        chunked = options is not None
        check_texts(
            texts,
            "documents",
            limits,
            allow_empty=True,
            chunked=chunked,
            each=not skip,
            stored=True,
            member=".text",
        )
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
            # none given: each stored document is cut at its own, a new one as `Inherited` finds
            settings = GivenChunking.of(options.max_tokens, options.overlap_tokens)
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
                    label="documents of a service request",  # what a waiting writer is told
                    prefix=body.prefix,
                    stop=service.refuse_if_stopping,  # a shutdown's: not the whole document
                    wait=PLAN_WAIT,
                )
                return _chunked_report(name, report, service.count_items(collection))

            return await service.run(name, write_chunks, writer=True)

        def prepared() -> tuple[IngestReport, list[Record]]:  # Problems are reported, skipped
            refuse_mixing(service.still(collection), chunks=False)
            report, todo, _ = prepare(
                records, collection, pipeline, body.on_error, body.replacing, body.prefix, body.sync
            )  # one commit: its batch decides its own column types
            return report, todo

        def write(
            report: IngestReport, todo: list[Record], fused: Fused | None
        ) -> schemas.WriteReport:
            # a chunked write may have filled the empty collection while this one encoded
            refuse_mixing(service.still(collection), chunks=False)
            if fused is not None or report.gone:  # a sync's removal lands with the write
                info = PipelineInfo.of(pipeline)
                commit(collection, info, todo, fused, body.replacing, report, remove=report.gone)
            finish(collection, pipeline)
            counts = report.to_json()  # null where a count does not apply to this write
            changed = None if body.replacing else report.changed
            return schemas.WriteReport(
                **counts
                | {
                    "collection": name,
                    "count": service.count_items(collection),
                    "unchanged": counts["unchanged"] if body.replacing else None,
                    "changed": None if changed is None else counts["changed"],
                    "hint": _upsert_hint(changed),
                    "removed": counts["removed"] if body.sync else None,
                    "sync_withheld": counts["sync_withheld"] if body.sync else None,
                }
            )

        if body.sync:  # what it removes is decided on what is stored: held to its commit
            loop = asyncio.get_running_loop()

            def synced() -> schemas.WriteReport:
                with collection.planning("sync of records of a service request", PLAN_WAIT):
                    report, todo = prepared()
                    fused = None
                    if todo:
                        with service.unlocked(name, loop):  # searches run while it encodes
                            fused = batcher.encode_blocking([r.text for r in todo], wait=False)
                    return write(report, todo, fused)

            return await service.run(name, synced, writer=True)

        report, todo = await service.run(name, prepared)
        # encoded on the event loop, with the collection unlocked: a write that waits for
        # the encoders (seconds, under load) must not hold up the collection's searches.
        # Each record is one row; an id another request stored meanwhile counts as stored.
        fused = await batcher.encode([r.text for r in todo]) if todo else None
        return await service.run(name, partial(write, report, todo, fused))

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
        _check_ids(body.ids, limits)

        def delete() -> schemas.DeleteReport:
            collection = service.collection(name)
            hint = None
            if body.doc:
                deleted, gone = collection.delete_documents(body.ids, PLAN_WAIT)
                missing = len(gone)
                chunks = collection.named_otherwise(gone, documents=True)
                if chunks:  # a chunk's id names no document
                    chunk, document = next(iter(chunks.items()))
                    hint = (
                        f"{len(chunks)} id(s) are chunk ids (e.g. {chunk!r}): without "
                        f'"doc" they delete that chunk; its document is {document!r}'
                    )
            else:
                gone = collection.absent(body.ids)  # each as given, else NFC or NFD
                deleted = collection.delete(body.ids)
                missing = len(gone)
                named = list(collection.named_otherwise(gone, documents=False))
                if named:  # a document's id names no row of a chunked collection
                    hint = (
                        f"{len(named)} id(s) are documents stored as chunks (e.g. "
                        f'{named[0]!r}): send "doc": true to delete their chunks'
                    )
            if deleted:  # an unloadable pipeline is logged and listed by /readyz
                finish_delete(collection, partial(service.own_pipeline, collection))
            count = service.count_items(collection)
            return schemas.DeleteReport(
                collection=name, deleted=deleted, count=count, not_found=missing, hint=hint
            )

        # after chunked writes: one that lets the lock go to encode would otherwise store the
        # rest of a document this deletes, and the next write would find it partly stored
        return await service.run(name, delete, writer=True)

    @router.post(
        "/{name}/erase",
        response_model=schemas.EraseReport,
        dependencies=writer,
        responses=_ERRORS,
    )
    async def erase_items(name: CollectionName, body: schemas.EraseItems) -> schemas.EraseReport:
        """Erase items for good (`probembed erase`): their rows, every older version (no
        undo), their text index entries, the saved graphs, their embedding cache entries,
        and this server's search snapshot of the collection (its next search loads afresh)."""
        _check_ids(body.ids or [], limits)

        def erase() -> schemas.EraseReport:
            collection = service.collection(name)
            done = collection.erase(
                None if body.doc or body.ids is None else body.ids,
                documents=body.ids if body.doc else None,
                where=body.where,
                force=body.force,
                wait=PLAN_WAIT,
                allow_all=body.all,
            )
            if done.live:  # an unloadable pipeline is logged and listed by /readyz
                finish_delete(collection, partial(service.own_pipeline, collection))
            return schemas.EraseReport.model_validate(
                {**done.to_json(), "count": service.count_items(collection)}
            )

        return await service.run(name, erase, writer=True)  # after chunked writes, as delete

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
        if len(texts) * body.k > limits.max_hits:
            raise ApiError(
                422,
                f"{len(texts)} queries × k={body.k} ask for {len(texts) * body.k} hits; the "
                f"limit is {limits.max_hits} per request (--max-hits): send fewer queries or "
                "a smaller k",
            )
        collection = await service.run(name, lambda: service.collection(name))
        pipeline = await service.prepare(collection)
        fused, cuts = await asyncio.gather(  # counted beside the encode, the lock not held
            service.batcher(pipeline).encode(texts), asyncio.to_thread(cut_at, pipeline, texts)
        )

        def run() -> list:
            results = (
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
            return [{**r, "cut_at_tokens": at} for r, at in zip(results, cuts, strict=True)]

        results = await service.run(name, run)
        body_bytes = await asyncio.to_thread(_search_body, name, results)  # the lock let go
        return Response(body_bytes, media_type="application/json")

    return router
