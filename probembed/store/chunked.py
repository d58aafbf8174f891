"""Documents into a collection as chunks, re-ingesting only what changed.

Each document (a file of a folder, or a JSONL/BEIR record) is cut by `probembed.chunking`
into chunks that every member model reads whole; chunk `i` of document `d` is stored under id
`d#i` with metadata `doc_id`, `chunk`, `start`, `end` (character offsets into the document's
text), `title`, `heading` (the Markdown heading path, " > "-joined), `page` (PDF) and
`doc_hash` (SHA-256 of the document's text) beside the document's own metadata. A re-run
compares hashes: unchanged documents are not touched, changed ones are re-chunked (new chunks
upserted first, then the chunks they no longer have deleted, so a crash in between leaves a
document that the next run sees as changed), and with `sync` documents no longer in the input
are removed.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probembed.chunking import ChunkSettings, chunk_text
from probembed.fusion import Fused
from probembed.store.collection import Collection
from probembed.store.formats import READERS, SourceDocument, read_file
from probembed.store.ingest import DEFAULT_BATCH, IngestError, IngestReport, OnError, ingest
from probembed.store.readers import Problem, Record, read_records

#: Metadata keys chunking writes; a document's own metadata may not use them.
RESERVED = ("doc_id", "chunk", "start", "end", "title", "heading", "page", "doc_hash")


@dataclass
class DocumentReport:
    """What a chunked ingest did, per document and per chunk."""

    source: str
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks_written: int = 0
    chunks_removed: int = 0
    problems: list[Problem] = field(default_factory=list)

    def summary(self) -> str:
        """One line for a person."""
        return (
            f"{self.source}: documents added {self.added}, updated {self.updated}, removed "
            f"{self.removed}, unchanged {self.unchanged}; chunks written {self.chunks_written}, "
            f"removed {self.chunks_removed}; skipped {len(self.problems)} bad item(s)"
        )


def read_documents(source: str | Path) -> Iterator[SourceDocument | Problem]:
    """Documents of a folder (every supported file below it, id = relative path), of one
    file, or of a JSONL file / BEIR folder (one per record)."""
    path = Path(source)
    if path.is_dir() and not (path / "corpus.jsonl").is_file():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in READERS)
        if not files:
            raise FileNotFoundError(f"{path} holds no {', '.join(READERS)} files to ingest")
        for file in files:
            yield read_file(file, file.relative_to(path).as_posix())
    elif path.is_file() and path.suffix.lower() in READERS:
        yield read_file(path, path.name)
    else:
        for item in read_records(path):
            yield item if isinstance(item, Problem) else _from_record(item)


def _from_record(record: Record) -> SourceDocument:
    """A JSONL/BEIR record as a plain document (its text already holds the title)."""
    metadata = dict(record.metadata)
    title = metadata.pop("title", None)
    return SourceDocument(
        record.id, record.text, record.source, "record", title=title, metadata=metadata
    )


def content_hash(document: SourceDocument) -> str:
    """What decides whether a document changed: its text and its metadata."""
    digest = hashlib.sha256(document.text.encode("utf-8"))
    digest.update(repr(sorted(document.metadata.items())).encode("utf-8"))
    return digest.hexdigest()[:32]


def chunk_records(
    document: SourceDocument, count: Callable, settings: ChunkSettings
) -> list[Record] | Problem:
    """The document's chunks as records to store, or the problem with its metadata."""
    clash = sorted(set(document.metadata) & set(RESERVED))
    if clash:
        return Problem(document.source, f"metadata uses {clash}, which chunking writes itself")
    digest = content_hash(document)
    records = []
    for chunk in chunk_text(document.text, document.sections(), count, settings):
        metadata: dict[str, Any] = {
            **document.metadata,
            "doc_id": document.id,
            "chunk": chunk.index,
            "start": chunk.start,
            "end": chunk.end,
            "title": document.title or "",
            "heading": " > ".join(chunk.headings),
            "doc_hash": digest,
        }
        page = document.page_of(chunk.start)
        if page is not None:
            metadata["page"] = page
        records.append(
            Record(f"{document.id}#{chunk.index}", chunk.text, metadata, document.source)
        )
    return records


def ingest_documents(
    source: str | Path,
    collection: Collection,
    pipeline: Any,
    chunking: ChunkSettings | None = None,
    sync: bool = False,
    on_error: OnError = "stop",
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    encode: Callable[[list[str]], Fused] | None = None,
    ingest_with: Callable[..., IngestReport] | None = None,
) -> DocumentReport:
    """Chunk and store documents, touching only those whose content changed since last time.

    Everything is read and chunked before anything is written: with `on_error="stop"` a bad
    file writes nothing. `sync` removes the chunks of documents absent from the input.
    `ingest_with` writes the chunks instead of `ingest` with `encode` (e.g.
    `functools.partial(ingest_ray, workers=4)`); it takes `ingest`'s first seven arguments.
    """
    settings = (chunking or ChunkSettings()).capped(pipeline.max_tokens)
    report = DocumentReport(str(source))
    stored = collection.document_index()
    seen: set[str] = set()
    records: list[Record] = []
    stale: list[str] = []
    for item in read_documents(source):
        if isinstance(item, Problem):
            report.problems.append(item)
            continue
        seen.add(item.id)
        before = stored.get(item.id)
        if before is not None and before[0] == {content_hash(item)}:
            report.unchanged += 1
            continue
        chunks = chunk_records(item, pipeline.count_tokens, settings)
        if isinstance(chunks, Problem):
            report.problems.append(chunks)
            continue
        records += chunks
        if before is None:
            report.added += 1
        else:
            report.updated += 1
            kept = {r.id for r in chunks}
            stale += [i for i in before[1] if i not in kept]
    if report.problems and on_error == "stop":
        raise IngestError(report.problems)
    if sync:
        gone = [doc for doc in stored if doc not in seen]
        report.removed = len(gone)
        stale += [i for doc in gone for i in stored[doc][1]]
    if records:
        write = ingest_with or functools.partial(ingest, encode=encode)
        written = write(records, collection, pipeline, batch_size, on_error, True, progress)
        report.chunks_written = written.added + written.updated
        report.problems += written.problems
    if stale:
        report.chunks_removed = collection.delete(stale)
    return report
