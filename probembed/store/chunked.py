"""Documents into a collection as chunks, re-ingesting only what changed.

Each document (a file of a folder, or a JSONL/BEIR record) is cut by `probembed.chunking`
into chunks that every member model reads whole; chunk `i` of document `d` is stored under id
`d#i` with metadata `doc_id`, `chunk`, `start`, `end` (character offsets into the document's
text), `title` (left out when there is none), `heading` (the Markdown heading path,
" > "-joined), `page` (PDF) and `doc_hash` (SHA-256 of the document's text and metadata and
of the chunk size and overlap that cut it; chunk 0's adds `+N@SIZE:OVERLAP`, the document's
chunk count and those settings), for a file `file_path` (its absolute path where last read),
beside the document's own metadata. A re-run compares hashes: unchanged documents are not
touched, changed ones (or those cut at other settings than a run is given) are re-chunked,
at the settings given, else at those they were cut at (new chunks upserted first, chunk 0
last of them, then the chunks they no longer have deleted, so a crash anywhere in between
leaves a document that the next run sees as changed), and with `sync` documents no longer
in the input are removed. A document is unchanged only when chunk 0 is
stored, every stored chunk carries the document's current hash, and all N chunks are there.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, cast

from probembed.chunking import (
    Chunk,
    ChunkSettings,
    GivenChunking,
    chunk_text,
    stoppable,
    stream_chunks,
)
from probembed.documents import under_prefix
from probembed.encoders.base import is_blank
from probembed.fusion import Fused
from probembed.progress import progress_bar
from probembed.store.collection import Collection
from probembed.store.errors import CollectionDroppedError, StoreError, UndoConflictError
from probembed.store.formats import (
    READERS,
    Found,
    NoText,
    SourceDocument,
    UnreadableError,
    content_digest,
    first_heading,
    markdown_title,
    names_markdown,
    read_file,
)
from probembed.store.ingest import (
    DEFAULT_BATCH,
    Checked,
    IngestError,
    IngestReport,
    OnError,
    Repeats,
    check_records,
    columns_to_check,
    commit,
    creation,
    finish,
    ingest,
    kept_stored,
    prepare,
    refuse_sync,
    repeated,
    undo,
    validate_options,
    withheld_note,
    writing_pipeline,
    written_json,
)
from probembed.store.kinds import refuse_mixing
from probembed.store.readers import (
    RECOMPOSED,
    Excluded,
    OwnFolders,
    Problem,
    Record,
    Unread,
    composed,
    document_id,
    is_beir,
    misnamed,
    nothing_to_read,
    prefixed,
    read_records,
    recomposed,
    removed_links,
    removed_note,
    unread_files,
    unread_note,
    walk_folder,
)
from probembed.store.reads import FILE_FIELD, StoredDocument
from probembed.store.rows import (
    Clashes,
    PipelineInfo,
    not_unicode,
    reserved_key,
    unusable_id,
)
from probembed.store.streamed import (
    STREAM_BYTES,
    STREAMED,
    StreamedFile,
    scan_file,
)

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: Metadata keys chunking writes; a document's own metadata may not use them.
RESERVED = ("doc_id", "chunk", "start", "end", "title", "heading", "page", "doc_hash")
#: Documents read from a file of their own, whose chunks name it (`file_path`); a record's
#: metadata is its own, `file_path` included.
FILE_KINDS = frozenset({"text", "markdown", "html", "pdf"})


@dataclass
class DocumentReport:
    """What a chunked ingest did, per document and per chunk."""

    source: str
    added: int = 0
    updated: int = 0
    removed: int = 0
    #: With sync: the documents removed, and those of them that links not followed held
    #: (`readers.removed_links`) and those stored again under their composed ids
    #: (`readers.recomposed`).
    gone: list[str] = field(default_factory=list)
    removed_links: list[str] = field(default_factory=list)
    recomposed: list[str] = field(default_factory=list)
    unchanged: int = 0
    chunks_written: int = 0
    #: Of those, the chunks the character cap ended rather than the token budget
    #: (`Chunk.by_chars`): text the tokenizers see few tokens in (Thai or emoji to WordPiece,
    #: unspaced Chinese to a word count), which would otherwise be a chunk of any length.
    chunks_by_chars: int = 0
    chunks_removed: int = 0
    #: Of `updated`, the documents re-chunked for the chunk settings alone: their content is
    #: as stored, cut at other settings than the run was given (`rechunked`).
    rechunked: int = 0
    #: Of `updated`, the documents whose chunk 0 recorded no settings (chunked by an earlier
    #: release), cut at the defaults for what the run was not given (`unrecorded`), and the
    #: settings they were cut at: the first sync after an upgrade said only "updated N".
    unrecorded: int = 0
    unrecorded_at: set[ChunkSettings] = field(default_factory=set)
    #: Unchanged documents read from another place than stored, whose `file_path` now names it.
    relocated: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: Bad items that named no document, so a sync removed nothing (any might be one kept).
    sync_withheld: int = 0
    #: Files of a folder source that no reader takes, by suffix (`readers.unread_files`).
    unread: Unread = field(default_factory=Unread)
    #: Documents of this run whose content digest another of the run's or a stored one has.
    repeats: Repeats = field(default_factory=Repeats)
    #: Documents read with no text to index (an empty file, one of nothing but markup): no
    #: bad input. With sync their stored versions are removed (`emptied` counts them);
    #: without, kept (`empty_kept`), as a sync would not keep them.
    empty: list[str] = field(default_factory=list)
    emptied: int = 0
    empty_kept: int = 0
    #: The settings the documents written or left unchanged were cut at (`cutting`).
    cuts: set[ChunkSettings] = field(default_factory=set)

    @property
    def chunked_at(self) -> ChunkSettings | None:
        """The settings every document of the run was cut at, None where they differ (each
        document keeps its own when the run was given none or one of them) or none was."""
        return next(iter(self.cuts)) if len(self.cuts) == 1 else None

    def cut_note(self) -> str:
        """What the summary says of the settings the documents were cut at ('' if none was):
        a folder at mixed settings is told, which a run given none keeps as it is."""
        return f"; cut at {settings_told(self.cuts)}" if self.cuts else ""

    def recut_note(self) -> str:
        """What the summary says of the updated documents re-cut for their settings ('' if
        none was): those re-chunked for the settings given alone, and those recording none
        cut at the defaults, with the options that would keep theirs."""
        told = []
        if self.rechunked:
            told.append(f"{self.rechunked} re-chunked for the chunk settings alone")
        if self.unrecorded:
            told.append(
                f"{self.unrecorded} recording no chunk settings re-cut by default at "
                f"{settings_pairs(self.unrecorded_at)}; --chunk-tokens/--overlap keep theirs"
            )
        return f" ({'; '.join(told)})" if told else ""

    def summary(self) -> str:
        """One line for a person."""
        withheld = withheld_note(self.sync_withheld) + self.repeats.note()
        moved = f" ({self.relocated} at a new path)" if self.relocated else ""
        settings = self.recut_note()
        by_chars = (
            f" ({self.chunks_by_chars} cut by characters, not tokens)"
            if self.chunks_by_chars
            else ""
        )
        return (
            f"{self.source}: documents added {self.added}, updated {self.updated}{settings}, "
            f"removed {self.removed}{removed_note(self.removed_links)}"
            f"{removed_note(self.recomposed, RECOMPOSED)}"
            f"{f', emptied {self.emptied}' if self.emptied else ''}, unchanged {self.unchanged}"
            f"{moved}; chunks written {self.chunks_written}{by_chars}, "
            f"removed {self.chunks_removed}{self.cut_note()}; skipped {len(self.problems)} bad "
            f"item(s){withheld}"
            f"{empty_note(self.empty, self.empty_kept)}{unread_note(self.unread)}"
        )

    def to_json(self) -> dict[str, Any]:
        """As `probembed ingest --chunk --json` prints it and the service answers a chunked
        write: documents, then chunks, then the settings they were cut at (`chunked_at`)."""
        cut = self.chunked_at
        return written_json(self) | {
            "rechunked": self.rechunked,
            "unrecorded": self.unrecorded,
            "relocated": self.relocated,
            "chunks_written": self.chunks_written,
            "chunks_by_chars": self.chunks_by_chars,
            "chunks_removed": self.chunks_removed,
            "empty": len(self.empty),
            "emptied": self.emptied,
            "chunked_at": None
            if cut is None
            else {"max_tokens": cut.max_tokens, "overlap_tokens": cut.overlap_tokens},
        }


def settings_told(cuts: Iterable[ChunkSettings]) -> str:
    """Chunk settings as a person reads them, '128/8 (tokens/overlap)', or where they differ
    '2 settings: 64/31, 128/31 (tokens/overlap)': one wording for an ingest's summary and
    a collection's listing."""
    kinds = set(cuts)
    many = f"{len(kinds)} settings: " if len(kinds) > 1 else ""
    return f"{many}{settings_pairs(kinds)} (tokens/overlap)"


def settings_pairs(cuts: Iterable[ChunkSettings]) -> str:
    """Chunk settings as 'SIZE/OVERLAP', by size, comma-joined: '64/31, 128/31'."""
    return ", ".join(f"{c.max_tokens}/{c.overlap_tokens}" for c in sorted(set(cuts), key=by_size))


def by_size(cut: ChunkSettings) -> tuple[int, int]:
    """The order settings are told and tried in: by size, then overlap."""
    return cut.max_tokens, cut.overlap_tokens


def empty_note(empty: Sequence[str], kept: int) -> str:
    """What a summary says of the documents read with no text to index ('' if none): not
    stored, and of those stored before, that a sync removes them (`kept`: left stored)."""
    if not empty:
        return ""
    stays = f"; {kept} of them stored before: that version kept (--sync removes it)" if kept else ""
    return (
        f"; {len(empty)} document(s) with no text to index, not stored (e.g. {empty[0]!r}){stays}"
    )


def read_documents(
    source: str | Path,
    stream_bytes: int = STREAM_BYTES,
    follow_links: bool = False,
    exclude: Sequence[str] = (),
    own: OwnFolders = (),
) -> Iterator[SourceDocument | StreamedFile | Problem]:
    """Documents of a folder (every supported file below it, id = relative path; through any
    link with `follow_links`, `walk_folder`; but what the gitignore-style `exclude` patterns
    match, `readers.Excluded`, and the run's `own` folders), of one file, or of a JSONL file
    / BEIR folder (one per record); a text or Markdown file over `stream_bytes` is scanned,
    not read, and chunked as a stream when written."""
    path = Path(source)
    if path.is_dir() and not is_beir(path):
        walk = walk_folder(path, READERS, follow_links, Excluded(exclude), own)
        if not walk.files and not walk.problems:
            raise nothing_to_read(path, READERS, follow_links, Excluded(exclude), own)
        yield from walk.problems
        for file, found in walk.files.items():
            yield _read(file, document_id(file, path), stream_bytes, found)
    elif path.is_file() and path.suffix.lower() in READERS:
        doc_id = document_id(path, path.parent)
        yield misnamed(path, doc_id) or _read(path, doc_id, stream_bytes)
    else:
        for item in read_records(path, allow_empty=True):  # a blank one: `_empty`'s
            yield item if isinstance(item, Problem) else record_document(item)


def _read(
    path: Path, doc_id: str, stream_bytes: int, found: Found | None = None
) -> SourceDocument | StreamedFile | Problem:
    """A file read whole, or, when it is large text, scanned for reading as a stream; a
    problem names the document, which exists even when it cannot be read. `found`: what
    the folder's walk found at its name, which every read of it must find still."""
    try:
        large = path.suffix.lower() in STREAMED and path.stat().st_size > stream_bytes
    except OSError as exc:
        return Problem(str(path), f"cannot read: {exc.strerror or exc}", doc_id)
    if not large:
        return read_file(path, doc_id, found)  # its problem names the document
    item = scan_file(path, doc_id, found)
    return replace(item, doc_id=doc_id) if isinstance(item, Problem) else item


def record_document(record: Record, markdown: bool | None = None) -> SourceDocument:
    """A record (JSONL/BEIR line, service request) as a document; its text already holds the
    title, taken from its metadata; `markdown`: sections at its Markdown headings, by default
    (None) when its id ends in .md or .markdown (`formats.names_markdown`), as `probembed
    ingest` reads such a file. One rule for every front door (a JSONL file's records, the
    service's documents, Python's `ingest_documents`), so the same record hashes the same
    through each (`content_hash` holds the reading, chosen or not)."""
    metadata = dict(record.metadata)
    title = metadata.pop("title", None)
    return SourceDocument(
        record.id,
        record.text,
        record.source,
        "record",
        title=title,
        markdown=names_markdown(record.id) if markdown is None else markdown,
        metadata=metadata,
    )


def content_hash(document: SourceDocument) -> str:
    """What decides whether a document changed: its text and its metadata, and for a record
    (a JSONL line, a service request) its title where the text does not hold it and whether
    it is read as Markdown; for HTML and PDF a title from outside the text (<title>, the PDF's
    own metadata). These add nothing at their defaults, so a document stored before they
    counted still reads as unchanged. The Markdown marker is the reading, however it was
    chosen (asked, or defaulted by a .md id): left out when defaulted, a .md record read as
    Markdown would hash as the same record read plain, and a changed reading must re-chunk."""
    parts = [document.text.encode("utf-8")]
    title = str(document.title or "").strip()
    if document.kind == "record":
        if title and not document.text.startswith(title):
            parts.append(b"\0title\0" + title.encode("utf-8"))
        if document.markdown:
            parts.append(b"\0markdown")
    elif document.kind in ("html", "pdf"):
        given = (Path(document.source).stem, first_heading(document.text.splitlines()))
        if title not in given:  # not what the file name or the text would give
            parts.append(b"\0title\0" + title.encode("utf-8"))
    return content_digest(parts, document.metadata)


def chunked_digest(content: str, settings: ChunkSettings) -> str:
    """A chunk's doc_hash: the document's content digest and the settings that cut it, so a
    re-run with another chunk size or overlap re-chunks the document as a changed one does."""
    key = f"{content}:{settings.max_tokens}:{settings.overlap_tokens}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def chunk_records(
    document: SourceDocument, count: Callable, settings: ChunkSettings
) -> list[Record] | Problem:
    """The document's chunks as records to store, or the problem with its metadata or text."""
    chunks = document_chunks(document, count, settings)
    return chunks if isinstance(chunks, Problem) else as_records(document, chunks, settings)


def document_chunks(
    document: SourceDocument, count: Callable, settings: ChunkSettings
) -> list[Chunk] | Problem:
    """The document's chunks, or the problem with its metadata or text."""
    clash = sorted(set(document.metadata) & set(RESERVED))
    if clash:
        return Problem(document.source, f"metadata uses {clash}, which chunking writes itself")
    chunks = chunk_text(document.text, document.sections(), count, settings)
    if not chunks:
        return Problem(document.source, f"document {document.id!r} has no text to chunk")
    return chunks


def as_records(
    document: SourceDocument, chunks: Sequence[Chunk], settings: ChunkSettings
) -> list[Record]:
    """A document's chunks as the records stored for them, chunk 0 with their count."""
    digest = chunked_digest(content_hash(document), settings)
    titled = replace(document, title=record_title(document))
    records = [chunk_record(titled, chunk, digest) for chunk in chunks]
    return [counted(records[0], len(records), settings), *records[1:]]


def record_title(document: SourceDocument) -> Any:
    """The title a document's chunks carry: the one read or given, else for a record read as
    Markdown what `probembed ingest` reads from a file of that text (front matter, first
    heading, the id's file name if it names one). Not hashed: its text and id decide it."""
    if document.title or document.kind != "record" or not document.markdown:
        return document.title
    stem = PurePosixPath(document.id).stem if names_markdown(document.id) else None
    return markdown_title(document.text) or stem


def chunk_record(document: Any, chunk: Chunk, digest: str) -> Record:
    """One chunk as the record stored for it, with the document's metadata and its own."""
    metadata: dict[str, Any] = {
        **document.metadata,
        "doc_id": document.id,
        "chunk": chunk.index,
        "start": chunk.start,
        "end": chunk.end,
    }
    if not is_blank(str(document.title or "")):  # no title is left out, not stored as ""
        metadata["title"] = document.title
    metadata["heading"] = " > ".join(chunk.headings)
    metadata["doc_hash"] = digest
    page = document.page_of(chunk.start)
    if page is not None:
        metadata["page"] = page
    path = file_path(document)
    if path is not None:
        metadata[FILE_FIELD] = path
    return Record(f"{document.id}#{chunk.index}", chunk.text, metadata, document.source)


def file_path(document: SourceDocument | StreamedFile) -> str | None:
    """The absolute path of the file a document was read from (links kept as named), or
    None for a record: what its chunks record as `file_path`."""
    if isinstance(document, StreamedFile):
        return os.path.abspath(document.path)
    return os.path.abspath(document.source) if document.kind in FILE_KINDS else None


def other_file(
    doc_id: str, path: str | None, stored: StoredDocument | None, prefix: str = ""
) -> str | None:
    """The file a stored document of this id was read from, when that is another file and
    still there: a single file given alone has its name as its id, so `a/README.md` then
    `b/README.md` name one document, and writing the second replaced the first. A stored
    file that is gone was moved or renamed: that is an update. Only a stored path ending in
    the id counts (`_read_from`)."""
    before = _read_from(doc_id, stored, prefix)
    if path is None or before is None or before == path or not os.path.isfile(before):
        return None
    return None if _same_file(before, path) else before


def stored_as(path: str | None, stored: dict[str, StoredDocument], prefix: str = "") -> str | None:
    """The id of the stored document read from this very file (`docs/sub/tips.md`, stored by
    a folder ingest as `sub/tips.md`), or None (`_read_from`); a link and its target, or a
    path through a linked folder, are the same file."""
    if path is None:
        return None
    name = os.path.basename(path)
    for doc_id, doc in stored.items():
        before = _read_from(doc_id, doc, prefix)
        if before is not None and (
            before == path or (os.path.basename(before) == name and _same_file(before, path))
        ):
            return doc_id
    return None


def moved_to(
    doc_id: str,
    path: str | None,
    stored: StoredDocument | None,
    elsewhere: str | None,
    prefix: str = "",
) -> bool:
    """Whether an unchanged document was read from another file than its chunks name (a
    folder moved, a second checkout): not the same file under another spelling (a link), not
    one given alone while the stored file is still there (`other_file`), not a record."""
    before = _read_from(doc_id, stored, prefix)
    if path is None or before is None or before == path or elsewhere is not None:
        return False
    return not _same_file(before, path)


def renamed_all(
    stored: dict[str, StoredDocument], folder: str | None, seen: Mapping[str, str], prefix: str = ""
) -> bool:
    """Whether a sync of this folder, which read documents, may replace every stored one:
    each was read from a file in this very folder that is no longer there (its files all
    renamed). Refused as "would remove all", the advice to leave out sync left the old
    documents beside the new; a moved folder's subfolder, an empty input or files gone
    elsewhere (another machine, an unmounted drive) are still refused."""
    if folder is None or not seen:
        return False
    inside = folder.rstrip(os.sep) + os.sep
    paths = [_read_from(doc_id, doc, prefix) for doc_id, doc in stored.items()]
    return all(p is not None and p.startswith(inside) and not os.path.lexists(p) for p in paths)


def _read_from(doc_id: str, stored: StoredDocument | None, prefix: str = "") -> str | None:
    """The file chunked ingest read a stored document from: its `file_path` when that is a
    path ending in its id less the prefix it was ingested under (a record's own `file_path`
    metadata is no file of ours)."""
    before = stored.file_path if stored is not None else None
    name = doc_id.removeprefix(prefix)
    if before is None or not before.replace(os.sep, "/").endswith(f"/{name}"):
        return None
    return before


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (False when either is gone)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def unchanged(document_id: str, digest: str, stored: StoredDocument | None) -> bool:
    """Whether a document is stored whole with this content: every chunk carries its hash,
    chunk 0, which is always written last, is there (a half-written document is not), and
    every chunk it counts is there (`counted`: one deleted by id, the last one too, is
    written again). A chunk 0 written before it counted them leaves a deleted last chunk
    no gap to see."""
    if stored is None or not was_whole(document_id, stored):
        return False
    marks = stored.hashes - {digest}  # chunk 0's DIGEST+N@SIZE:OVERLAP, DIGEST+N or DIGEST
    counted = f"{digest}+"
    counts = [
        m[len(counted) :].partition("@")[0]
        for m in marks
        if isinstance(m, str) and m.startswith(counted)
    ]
    if len(marks) > 1 or not all(c.isdigit() for c in counts) or len(counts) != len(marks):
        return False
    total = int(counts[0]) if counts else len(stored.ids)
    prefix = f"{document_id}#"
    numbers = {i.removeprefix(prefix) for i in stored.ids if i.startswith(prefix)}
    return numbers == {str(n) for n in range(total)}


def stored_digests(stored: Mapping[str, StoredDocument]) -> Iterator[tuple[str, str]]:
    """(doc_id, doc_hash) of the stored documents whose chunks carry one digest (chunk 0's
    `+N@SIZE:OVERLAP` aside): a document half-rewritten has none."""
    for doc_id, doc in stored.items():
        digests = {str(h).partition("+")[0] for h in doc.hashes}
        if len(digests) == 1:
            yield doc_id, digests.pop()


def stored_contents(
    left: Mapping[str, StoredDocument], contents: Iterable[str], fallback: ChunkSettings
) -> Iterator[tuple[str, str]]:
    """(doc_id, key) of the stored documents a run leaves, keyed as the run's own are, by
    their content digest, where one of the run's `contents` cut at their settings gives
    their doc_hash (else by that): a copy is named whatever each was cut at (a document
    kept at 128 tokens, its new copy cut at 256). `fallback`: the settings of one stored
    before chunk 0 recorded them, which the run's documents would be cut at."""
    digests = dict(stored_digests(left))
    cuts = {cut_at(left[doc]) or fallback for doc in digests}
    known = {chunked_digest(content, cut): content for content in set(contents) for cut in cuts}
    for doc_id, digest in digests.items():
        yield doc_id, known.get(digest, digest)


def counted(mark: Record, chunks: int, settings: ChunkSettings) -> Record:
    """Chunk 0 with the document's chunk count and the settings that cut it in its doc_hash
    (`DIGEST+N@SIZE:OVERLAP`): the rest carry the digest alone, so a document missing its
    last chunks is not taken for whole, and a run given no settings cuts the document, once
    changed, at these (`cut_at`), undone with the rows by an undo."""
    digest = mark.metadata["doc_hash"]
    cut = f"{settings.max_tokens}:{settings.overlap_tokens}"
    return replace(mark, metadata={**mark.metadata, "doc_hash": f"{digest}+{chunks}@{cut}"})


def cut_at(stored: StoredDocument | None) -> ChunkSettings | None:
    """The chunk size and overlap a stored document was cut at, as its chunk 0's doc_hash
    records them (`counted`); None: no chunk 0 stored, or one written before it recorded
    them (or a doc_hash edited into another form)."""
    marks = stored.hashes if stored is not None else ()
    return next((cut for mark in marks if (cut := recorded_settings(mark)) is not None), None)


def recorded_settings(mark: object) -> ChunkSettings | None:
    """The settings a chunk 0's doc_hash records (`counted`), else None: another chunk's
    digest, an earlier release's `DIGEST+N`, or settings chunking could not have cut at."""
    size, _, overlap = str(mark).partition("+")[2].partition("@")[2].partition(":")
    if not (size.isdigit() and overlap.isdigit()):
        return None
    try:
        return ChunkSettings(int(size), int(overlap))
    except ValueError:  # a doc_hash edited into another form
        return None


@dataclass(frozen=True)
class StoredCuts:
    """What a chunked collection's documents are cut at, as their chunks 0 record it: a user
    could not see it short of an ingest run, nor that a collection was mixed, nor that an
    earlier release chunked it (those documents, recording none, are re-cut at the defaults
    by a run given no settings)."""

    #: Documents per settings recorded.
    cuts: dict[ChunkSettings, int]
    #: Documents whose chunk 0 records no settings.
    unrecorded: int

    @classmethod
    def of(cls, collection: Collection) -> StoredCuts | None:
        """A collection's, read from its chunks 0 alone; None where it holds no chunked
        ingest's chunks."""
        if not collection.holds_chunks:
            return None
        found = Counter(recorded_settings(mark) for mark in collection.first_chunk_hashes())
        unrecorded = found.pop(None, 0)
        return cls({cut: n for cut, n in found.items() if cut is not None}, unrecorded)

    def __str__(self) -> str:
        """As `probembed collections` shows it: the ingest summary's wording, then the
        documents that record none."""
        told = [settings_told(self.cuts)] if self.cuts else []
        if self.unrecorded:
            told.append(
                f"{self.unrecorded} document(s) record none (chunked by an earlier release)"
            )
        return "; ".join(told)

    def to_json(self) -> dict[str, Any]:
        """As `probembed collections --json` prints it: each setting with its documents."""
        cut_at = [asdict(c) | {"documents": self.cuts[c]} for c in sorted(self.cuts, key=by_size)]
        return {"cut_at": cut_at, "unrecorded": self.unrecorded}


def cutting(
    given: ChunkSettings | GivenChunking | None, before: ChunkSettings | None, limit: int | None
) -> ChunkSettings:
    """The settings a document is cut at: those the run was given, the one not given (a size
    or an overlap alone) filled from `before` (those its stored version was cut at, `cut_at`,
    or a new one's `Inherited`), else the defaults; capped at the pipeline's `limit`. A run
    given none cut every document at the defaults: one cut at 128 tokens was re-chunked at
    256 without a word. A ValueError: an overlap given alone not under half that size as
    capped (checked against the uncapped size, 40 alone on a document at 512 was cut at 64:31
    under a limit of 64, not refused)."""
    base = (before or ChunkSettings()).capped(limit)
    return (base if given is None else given.over(base)).capped(limit)


def in_scope(stored: Mapping[str, StoredDocument], prefix: str) -> dict[str, StoredDocument]:
    """The stored documents under `prefix` (composed): those a sync may remove and a new
    document takes its settings from."""
    return {doc: v for doc, v in stored.items() if prefixed(doc, composed(prefix))}


def refuse_unfit_overlap(
    given: ChunkSettings | GivenChunking | None,
    scope: Mapping[str, StoredDocument],
    limit: int | None,
) -> None:
    """Refuse before reading an overlap given alone that no document can be cut at: not
    under half the default size nor any stored size of the `scope` (each capped at `limit`),
    where each document was refused, one line apiece over 10,000 files. A StoreError."""
    overlap = given.overlap_tokens if isinstance(given, GivenChunking) else None
    if overlap is None or cast(GivenChunking, given).max_tokens is not None:
        return
    default = ChunkSettings().capped(limit).max_tokens
    stored = {(cut_at(v) or ChunkSettings()).capped(limit).max_tokens for v in scope.values()}
    largest = max(stored | {default})
    if overlap < largest // 2:
        return
    kept = f", and no stored document is cut at over {max(stored)}" if stored else ""
    raise StoreError(
        f"overlap_tokens must be in [0, max_tokens / 2), got {overlap}: given alone, no "
        f"document can take it (a new one is cut at the default size of {default} "
        f"tokens{kept}); give max_tokens too, or an overlap under {largest // 2}"
    )


@dataclass(frozen=True)
class Inherited:
    """The settings a new document takes in a run given none, from the stored documents of
    the run's scope: a renamed, moved or recomposed file fell back to the defaults, so a
    folder cut at 128 tokens drifted to mixed sizes without a word."""

    #: The content digests (`stored_digests`) of the stored documents that record settings.
    digests: frozenset[str]
    #: The settings those record, in a fixed order.
    cuts: tuple[ChunkSettings, ...]
    #: The settings more than half of the whole stored documents share (one recording none
    #: counts as the defaults it is re-cut at), None where none has a majority or there are
    #: none: one page re-cut at other settings left every later new file at the defaults.
    shared: ChunkSettings | None

    @classmethod
    def of(cls, scope: Mapping[str, StoredDocument]) -> Inherited:
        """What the stored documents of a run's scope leave a new document."""
        whole = {doc: v for doc, v in scope.items() if was_whole(doc, v)}
        recorded = {doc: cut for doc, v in whole.items() if (cut := cut_at(v)) is not None}
        digests = frozenset(d for doc, d in stored_digests(whole) if doc in recorded)
        cuts = tuple(sorted(set(recorded.values()), key=by_size))
        kinds = Counter(recorded.get(doc, ChunkSettings()) for doc in whole)
        top = kinds.most_common(1)
        shared = top[0][0] if top and 2 * top[0][1] > len(whole) else None
        return cls(digests, cuts, shared)

    def settings(self, content: str) -> ChunkSettings | None:
        """A new document's: those of a stored document of its very content (the file it
        was renamed from, its old spelling), else those most stored documents share."""
        for cut in self.cuts:
            if chunked_digest(content, cut) in self.digests:
                return cut
        return self.shared


def rechunked(
    doc_id: str, content: str, settings: ChunkSettings, stored: StoredDocument | None
) -> bool:
    """Whether a document is re-chunked for its settings alone: stored whole with this very
    content (`content`, its digest) at other settings than `settings`, as its chunk 0 says."""
    before = cut_at(stored)
    if before is None or before == settings:
        return False
    return unchanged(doc_id, chunked_digest(content, before), stored)


def unrecorded(
    doc_id: str, stored: StoredDocument | None, given: ChunkSettings | GivenChunking | None
) -> bool:
    """Whether a document is cut at the defaults (in part) for recording no settings: stored
    whole by a release before chunk 0 recorded them, in a run given neither a size nor an
    overlap, or one alone, where it would have kept its own (`cutting`)."""
    if not was_whole(doc_id, stored) or cut_at(stored) is not None:
        return False
    return given is None or (
        isinstance(given, GivenChunking) and None in (given.max_tokens, given.overlap_tokens)
    )


def was_whole(document_id: str, stored: StoredDocument | None) -> bool:
    """Whether some version of a document was stored whole (its chunk 0, written last of its
    chunks, is there): rewriting it is an update, where finishing a run that was stopped
    part-way through its first write is an addition."""
    return stored is not None and f"{document_id}#0" in stored.ids


def ingest_documents(
    source: str | Path,
    collection: Collection,
    pipeline: Pipeline | str | os.PathLike | None = None,
    chunking: ChunkSettings | GivenChunking | None = None,
    sync: bool = False,
    on_error: OnError = "stop",
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    encode: Callable[[list[str]], Fused] | None = None,
    ingest_with: Callable[..., IngestReport] | None = None,
    stream_bytes: int = STREAM_BYTES,
    prefix: str = "",
    follow_links: bool = False,
    wait: float | None = None,
    exclude: Sequence[str] = (),
) -> DocumentReport:
    """Chunk and store the documents of a folder, a file, a JSONL file or a BEIR folder,
    touching only those whose content changed since last time (see `ingest_parsed`, and its
    `prefix` and `wait`); text and Markdown files over `stream_bytes` are read, chunked and
    written as streams. A folder's links are followed only to files in it, unless
    `follow_links` (`readers.walk_folder`). `exclude`: gitignore-style patterns of a folder's
    files and subfolders to leave out (`readers.Excluded`), relative to it; with `sync` a
    stored document they now match is removed, as a file gone is. The collection's database,
    when it is in the folder, is no part of it (`readers.walk_folder`'s `own`)."""
    excluded = Excluded(exclude)  # a bad pattern refused before anything is read
    if exclude and not (Path(source).is_dir() and not is_beir(Path(source))):
        raise ValueError(
            f"exclude leaves out files of a folder; {source} is no folder of files (a file, "
            "a JSONL file or a BEIR folder is read whole)"
        )
    prefix = composed(prefix)  # as `ingest_parsed` puts it, which the links' report reads
    report = ingest_parsed(
        read_documents(source, stream_bytes, follow_links, exclude, collection.db.own_folders()),
        collection,
        pipeline,
        chunking,
        sync,
        on_error,
        batch_size,
        progress,
        encode,
        ingest_with,
        str(source),
        alone=Path(source).is_file() and Path(source).suffix.lower() in READERS,
        folder=os.path.abspath(source) if Path(source).is_dir() else None,
        prefix=prefix,
        wait=wait,
    )
    refuse_no_text(report)
    report.unread = unread_files(
        source, follow_links=follow_links, exclude=excluded, own=collection.db.own_folders()
    )
    report.removed_links = removed_links(report.gone, report.unread.linked, prefix)
    if excluded.unmatched():  # a pattern written from the wrong folder leaves nothing out
        warnings.warn(
            f"exclude pattern(s) {', '.join(map(repr, excluded.unmatched()))} matched no file "
            f"or folder of {source}: patterns are paths relative to the folder given",
            stacklevel=2,
        )
    return report


def refuse_no_text(report: DocumentReport) -> None:
    """Refuse, naming the source, a run whose every document had no text to index and that
    stored, kept and removed nothing (an empty file given alone, a folder of blank files):
    such a source is most often a mistake, and the run ended "nothing stored" with exit
    status 0. One empty file among others is no mistake, nor a sync that removes emptied
    documents, nor one that keeps their stored versions (`empty_kept`)."""
    effects = (report.added, report.updated, report.unchanged, report.removed, report.emptied)
    if not report.empty or report.problems or report.empty_kept or any(effects):
        return
    empty = report.empty
    raise ValueError(
        f"{report.source} holds no text to index: {len(empty)} document(s), each empty, blank "
        f"or nothing but markup (e.g. {empty[0]!r}); nothing was stored"
    )


def ingest_parsed(
    items: Iterable[SourceDocument | StreamedFile | Problem],
    collection: Collection,
    pipeline: Pipeline | str | os.PathLike | None = None,
    chunking: ChunkSettings | GivenChunking | None = None,
    sync: bool = False,
    on_error: OnError = "stop",
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    encode: Callable[[list[str]], Fused] | None = None,
    ingest_with: Callable[..., IngestReport] | None = None,
    label: str = "documents",
    alone: bool = False,
    folder: str | None = None,
    prefix: str = "",
    stop: Callable[[], None] | None = None,
    wait: float | None = None,
) -> DocumentReport:
    """Chunk and store documents already read, touching only those whose content changed.

    Everything is read and chunked before anything is written: with `on_error="stop"` a bad
    document writes nothing. `sync` removes the chunks of documents absent from the input,
    and is refused when that would be every stored document (a source that names none of
    them, e.g. an empty file, or a subfolder of the folder the collection was made from).
    `ingest_with` writes the chunks instead of `ingest` with `encode` (e.g.
    `functools.partial(ingest_ray, workers=4)`); it takes `ingest`'s first eight arguments
    and its `columns`.
    Every document's chunk 0 is written after all other chunks (a second write, so Ray's
    out-of-order commits keep it too): a run that stops part-way never leaves a document that
    the next run takes as unchanged. The chunks the documents no longer have (and a sync's
    vanished documents) are deleted last, under the run's undo, and an ended run keeps its
    versions (`Collection.record_span`), so `Collection.undo` takes all of it back at once.
    A `StreamedFile` is chunked and written after the others, in batches, always with
    `encode` (see `write_streamed`). `alone`: the items are one file given alone, whose id
    is its name; a document of that id stored from another file that is still there is a
    problem, not an update (`other_file`), the file stored by a folder ingest under another
    id takes that id, and a sync that would remove any other
    document is refused. `folder`: the folder the items were read from (absolute; a BEIR
    folder too, whose records name no file), where a sync may replace every stored document
    whose file was in it and is gone (`renamed_all`), and whose ids a refusal explains.
    `prefix`: every document's id is put under it (`docs/` makes `README.md` `docs/README.md`),
    composed (NFC) as a file name's id is, and a sync removes only stored documents under it
    (`readers.prefixed`): several sources share a collection, each synced on its own.
    `chunking`: the chunk size and overlap to cut every document at, so a document stored at
    others is re-chunked (`DocumentReport.rechunked` counts those whose content is as
    stored); a `GivenChunking` of one of them: that one, the other each document's own as
    below (its overlap lowered under half of a smaller size given; an overlap alone over half
    a document's size is that document's problem); None: each document at those it was cut
    at before (`cut_at`: a stored document left alone whatever it was cut at, a changed one
    re-cut at its own, a new one at those
    of a stored document of its content under `prefix` (a renamed or moved file), else at
    those more than half the stored documents under `prefix` share, else at the defaults
    (`Inherited`),
    as is one stored before chunk 0 recorded them), so a run given no settings never
    re-chunks what another run cut at other settings, nor cuts a folder's new files at
    others. Capped at the pipeline's limit.
    `stop`: called before each tokenizer call of the chunking, which comes before any write,
    so what it raises ends the run with nothing written (the service's shutdown, whose
    `encode` refuses the batches after it; a streamed file is chunked between its batches).
    From its look at what is stored to its last commit (and undo) it holds the collection
    against every other write that plans over its documents on this machine
    (`Collection.planning`: another sync, chunked ingest, delete by document waits, or this
    one for it); `wait`: seconds to wait for one at most (None: until it ends), said as it
    lasts with `progress`.
    """
    validate_options(batch_size, on_error)  # before any delete a sync would make
    refuse_mixing(collection, chunks=True)
    pipeline = writing_pipeline(collection, pipeline)
    limit = pipeline.max_tokens
    report = DocumentReport(label)
    what = f"chunked {'sync' if sync else 'ingest'} of {label}"
    prefix = composed(prefix)  # as file names are: one spelling in every id
    # to its last commit: another plan moves none of it
    with collection.planning(what, wait, progress):
        stored = collection.document_index()
        scope = in_scope(stored, prefix)  # a sync's own
        refuse_unfit_overlap(chunking, scope, limit)
        items = (under_prefix(item, prefix) for item in items)
        count = pipeline.count_tokens if stop is None else stoppable(pipeline.count_tokens, stop)
        plan = _plan(items, stored, scope, count, chunking, report, alone, prefix, limit)
        planned = [*plan.records, *plan.marks]
        # the check's column types are the plan of both parts' writes
        good, bad, columns = check_records(planned, columns_to_check(collection, planned))
        report.problems += per_document(
            planned, good, bad, list(plan.seen)
        )  # a type stored otherwise
        if report.problems and on_error == "stop":
            raise IngestError(report.problems)
        kept = {r.id for r in good}
        refused = {r.metadata["doc_id"] for r in (*plan.records, *plan.marks) if r.id not in kept}
        stale = []
        for doc, (new, old) in plan.changed.items():
            if doc in refused:  # none of its chunks is written and its stored version stays whole
                continue
            report.added += new
            report.updated += not new
            report.rechunked += doc in plan.rechunked
            _count_unrecorded(report, plan, doc)
            report.chunks_by_chars += plan.by_chars[doc]
            stale += old
        gone: list[str] = []
        emptied = [doc for doc in plan.empty if doc in scope]  # named: removed even if withheld
        if sync and plan.unplaced:
            report.sync_withheld = plan.unplaced
            refuse_sync(collection, emptied, len(scope), prefix, emptied=len(emptied))
        elif sync:
            gone = [doc for doc in scope if doc not in plan.seen]
            report.recomposed = recomposed(gone, plan.seen)  # stored again, not removed
            removed = [doc for doc in gone if doc not in report.recomposed]
            if not renamed_all(scope, folder, plan.seen, prefix):  # a folder renamed: all may go
                if emptied:  # what would go with the emptied ones: all of it?
                    going = [*removed, *emptied]
                    refuse_sync(collection, going, len(scope), prefix, emptied=len(emptied))
                refuse_sync(
                    collection, removed, len(scope), prefix, alone=alone, folder=bool(folder)
                )
            report.removed, report.gone = len(gone), gone
            stale += [i for doc in gone for i in stored[doc].ids]
        report.empty = list(plan.empty)
        if sync:
            report.emptied = len(emptied)
            stale += [i for doc in emptied for i in stored[doc].ids]
        else:
            report.empty_kept = len(emptied)
        kept_empty = set(() if sync else emptied)
        left = {
            doc: v
            for doc, v in stored.items()
            if (doc not in plan.seen or doc in kept_empty) and doc not in gone
        }
        ours = [(doc, c) for doc, c in plan.contents.items() if doc not in refused]
        report.cuts = {cut for doc, cut in plan.cuts.items() if doc not in refused}
        try:  # what one stored before cut_at is cut at
            fallback = cutting(chunking, None, limit)
        except ValueError:  # an overlap alone that the defaults refuse: no document is cut so
            fallback = ChunkSettings()
        report.repeats = repeated(ours, stored_contents(left, (c for _, c in ours), fallback))
        start = collection.version if collection.exists else None  # what a failed stream undoes to
        created = creation(collection)  # what every part's commits must find: a drop stops them
        touched: set[str] = set()  # ids this run wrote: a stop puts them back as they were at start
        write = ingest_with or functools.partial(ingest, encode=encode)
        parts = [
            [r for r in part if r.metadata["doc_id"] not in refused]
            for part in (plan.records, plan.marks)
        ]
        total = sum(map(len, parts))
        with collection.pinned(start):  # the version every undo below reads, kept from a prune
            with progress_bar(f"ingest {collection.name}", total, progress and total > 0) as bar:
                try:
                    for (
                        part
                    ) in parts:  # one bar over both writes: a person sees chunks, not two phases
                        if part:
                            touched.update(r.id for r in part)
                            moved = _Advance(bar)
                            result = write(
                                part,
                                collection,
                                pipeline,
                                batch_size,
                                on_error,
                                True,
                                columns=columns,
                                advance=moved,
                                created=created,
                            )
                            created = created or creation(collection)  # the table part one made
                            report.chunks_written += result.added + result.updated
                            report.problems += result.problems
                            bar.advance(len(part) - moved.seen)  # skipped and unchanged: looked at
                except (
                    Exception
                ) as exc:  # a fault between commits (storage, the encoder): none stays
                    undo(collection, start, touched, exc, report.problems)
                    if isinstance(exc, CollectionDroppedError):
                        done = report.chunks_written + (exc.written or 0)
                        raise exc.during(done, total, "chunks") from None
                    raise
            for item, settings in plan.streamed:
                before = stored[item.id].ids if item.id in stored else []
                # under "stop" the run's one undo takes the file's ids too: an undo of the file's
                # own that conflicted, undone again by the run's, nested the two messages
                stopping = touched if on_error == "stop" else None
                try:
                    written, kept, by_chars = write_streamed(
                        item,
                        collection,
                        pipeline,
                        settings,
                        batch_size,
                        encode,
                        before,
                        stopping,
                        created,
                    )
                except CollectionDroppedError:  # no file after it can be written either
                    raise
                except Exception as exc:
                    problem = _failed(item, exc)
                    if on_error == "stop":  # nothing at all, as when a bad document stops the run
                        undo(collection, start, touched, exc, report.problems)
                        raise IngestError([*report.problems, problem]) from exc
                    report.problems.append(problem)
                    continue
                touched.update(written, before)
                report.chunks_written += len(written)
                report.chunks_by_chars += by_chars
                report.chunks_removed += len(set(before) - written - kept)
                whole = was_whole(item.id, stored.get(item.id))
                report.added += not whole
                report.updated += whole
                report.rechunked += item.id in plan.rechunked
                _count_unrecorded(report, plan, item.id)
            repointed = [i for doc in plan.relocated for i in stored[doc].ids]
            touched.update(stale, repointed)  # the run's last commits, undone with the rest
            try:
                report.chunks_removed += collection.delete_stored(stale, created) if stale else 0
                if plan.relocated:
                    collection.relocate(plan.relocated)
                    report.relocated = len(plan.relocated)
            except Exception as exc:
                undo(collection, start, touched, exc, report.problems)
                raise
        collection.record_span(start)  # so `probembed undo` takes the run back whole
        report.problems = kept_stored(report.problems, stored)
        return report


def per_document(
    planned: list[Record], good: list[Record], bad: list[Problem], order: list[str]
) -> list[Problem]:
    """The checks' problems, one per document in the input's `order`: chunk 0's (else its
    first chunk's), counting the others (a metadata field of the wrong type was reported once
    for each of a document's 1,057 chunks)."""
    kept = {r.id for r in good}
    refused = [r for r in planned if r.id not in kept]  # one problem each, in this order
    by_doc: dict[str, list[tuple[Record, Problem]]] = {}
    for record, problem in zip(refused, bad, strict=True):
        by_doc.setdefault(record.metadata["doc_id"], []).append((record, problem))
    place = {doc: i for i, doc in enumerate(order)}
    out = []
    for doc in sorted(by_doc, key=lambda d: place.get(d, len(place))):
        found = sorted(by_doc[doc], key=lambda pair: pair[0].metadata["chunk"])
        first = found[0][1]
        more = f" (and {len(found) - 1} more of its chunks)" if found[1:] else ""
        out.append(Problem(first.source, first.message + more, doc))
    return out


class _Advance:
    """An ingest's `advance` that moves one bar over several writes, counting what it moved
    (the texts encoded, as they are), so the rest of a part is moved after it."""

    def __init__(self, bar: Any) -> None:
        self.bar, self.seen = bar, 0

    def __call__(self, encoded: int) -> None:
        self.bar.advance(encoded)
        self.seen += encoded


@dataclass
class _Plan:
    """What a chunked ingest writes: chunks (chunk 0s apart, written last), large files to
    stream, the documents seen (id -> where), and per changed document whether it is new and
    which of its stored chunks the new ones leave behind (counted and deleted only once its
    chunks pass the checks)."""

    records: list[Record] = field(default_factory=list)
    marks: list[Record] = field(default_factory=list)
    #: Large files to stream, each with the settings it is cut at (`cutting`).
    streamed: list[tuple[StreamedFile, ChunkSettings]] = field(default_factory=list)
    seen: dict[str, str] = field(default_factory=dict)
    changed: dict[str, tuple[bool, list[str]]] = field(default_factory=dict)
    #: Unchanged documents read from another file than their chunks name: doc_id -> path.
    relocated: dict[str, str] = field(default_factory=dict)
    #: Per changed document, its chunks the character cap ended (`Chunk.by_chars`).
    by_chars: dict[str, int] = field(default_factory=dict)
    #: The content digest (`content_hash`, a streamed file's `digest`) of each document
    #: written or left unchanged, whatever settings it is cut at: what repeats compare.
    contents: dict[str, str] = field(default_factory=dict)
    #: The settings each document of `contents` is cut at.
    cuts: dict[str, ChunkSettings] = field(default_factory=dict)
    #: Changed documents whose content is as stored, re-chunked for the settings alone.
    rechunked: set[str] = field(default_factory=set)
    #: Changed documents recording no settings, cut at the defaults (`unrecorded`).
    unrecorded: set[str] = field(default_factory=set)
    #: Problems that name no document (a line that is not JSON): a sync cannot tell what
    #: is gone.
    unplaced: int = 0
    #: Documents read with no text to index (`_empty`): doc_id -> where.
    empty: dict[str, str] = field(default_factory=dict)


def _repeated(doc_id: str, plan: _Plan) -> str | None:
    """Why a document id read before in this run is refused, else None."""
    first = plan.seen.get(doc_id)
    return None if first is None else f"duplicate document id {doc_id!r} (first at {first})"


def _plan(
    items: Iterable[SourceDocument | StreamedFile | Problem],
    stored: dict[str, StoredDocument],
    scope: dict[str, StoredDocument],
    count: Callable,
    given: ChunkSettings | GivenChunking | None,
    report: DocumentReport,
    alone: bool = False,
    prefix: str = "",
    limit: int | None = None,
) -> _Plan:
    """Sort the documents read (their ids under `prefix`) into unchanged, to chunk and to
    stream, each at the settings `cutting` gives it (`given`, else its stored version's,
    else for a new one, or one whose first write stopped before its chunk 0, those
    `Inherited` finds in `scope`, else the defaults; capped at
    `limit`); count them and their problems in the report (with `alone`, a file whose id
    another file still there holds). `scope`: the stored documents under `prefix`, among
    which a file given alone finds the document a folder ingest stored it as."""
    plan = _Plan()
    inherited = Inherited.of(scope)
    for item in items:
        empty = _empty(item)
        if empty is not None:  # there, with nothing to index: neither bad nor gone
            if alone:
                empty = stored_as(os.path.abspath(item.source), scope, prefix) or empty
            unusable = unusable_id(empty)  # checked as a document with text is: a blank
            if unusable is not None:  # duplicate removed the copy written beside it
                report.problems.append(Problem(item.source, unusable))
                plan.unplaced += 1
                continue
            repeated = _repeated(empty, plan)
            if repeated is not None:
                report.problems.append(Problem(item.source, repeated))
                continue
            plan.seen[empty] = item.source
            plan.empty[empty] = item.source
            continue
        if isinstance(item, Problem):
            report.problems.append(item)
            if item.doc_id is not None:  # there, but unreadable: not gone
                plan.seen.setdefault(item.doc_id, item.source)
            else:
                plan.unplaced += 1
            continue
        if alone:  # the file a folder ingest stored is that document, whatever its name
            item = replace(item, id=stored_as(file_path(item), scope, prefix) or item.id)
        unusable = unusable_id(item.id)
        if unusable is not None:  # names no stored document: a sync removes nothing
            report.problems.append(Problem(item.source, unusable))
            plan.unplaced += 1
            continue
        repeated = _repeated(item.id, plan)
        if repeated is not None:
            report.problems.append(Problem(item.source, repeated))
            continue
        plan.seen[item.id] = item.source
        refused = (
            None
            if isinstance(item, StreamedFile)  # a file's: no metadata of its own
            else not_unicode(item.id, item.text, item.metadata) or reserved_key(item.metadata)
        )
        if refused is not None:
            report.problems.append(Problem(item.source, f"document {item.id!r}: {refused}"))
            continue
        before = stored.get(item.id)
        content = item.digest if isinstance(item, StreamedFile) else content_hash(item)
        own = cut_at(before) if was_whole(item.id, before) else inherited.settings(content)
        try:
            settings = cutting(given, own, limit)
        except ValueError:  # an overlap given alone, not under half the size it keeps
            overlap = cast(GivenChunking, given).overlap_tokens  # only an overlap alone fails
            size = (own or ChunkSettings()).capped(limit).max_tokens
            whose = _whose_size(was_whole(item.id, before), own is not None)
            problem = _unfit(item.id, overlap, size, whose)
            report.problems.append(Problem(item.source, problem, item.id))
            continue
        digest = chunked_digest(content, settings)
        elsewhere = other_file(item.id, file_path(item), before, prefix) if alone else None
        if unchanged(item.id, digest, before):
            report.unchanged += 1
            plan.contents[item.id] = content
            plan.cuts[item.id] = settings
            if moved_to(item.id, file_path(item), before, elsewhere, prefix):
                plan.relocated[item.id] = cast(str, file_path(item))  # moved: read from a file
        elif elsewhere is not None:
            report.problems.append(Problem(item.source, _same_id(item.id, elsewhere), item.id))
        elif isinstance(item, StreamedFile):
            plan.streamed.append((item, settings))  # counted once written
            plan.contents[item.id] = content
            plan.cuts[item.id] = settings
            _note_recut(plan, item.id, content, settings, before, given)
        else:
            chunks = document_chunks(item, count, settings)
            if isinstance(chunks, Problem):
                report.problems.append(chunks)
                continue
            records = as_records(item, chunks, settings)
            plan.records += records[1:]
            plan.marks.append(records[0])
            kept = {r.id for r in records}
            old = [i for i in (before.ids if before else []) if i not in kept]
            plan.changed[item.id] = (not was_whole(item.id, before), old)
            plan.by_chars[item.id] = sum(chunk.by_chars for chunk in chunks)
            plan.contents[item.id] = content
            plan.cuts[item.id] = settings
            _note_recut(plan, item.id, content, settings, before, given)
    return plan


def _note_recut(
    plan: _Plan,
    doc_id: str,
    content: str,
    settings: ChunkSettings,
    stored: StoredDocument | None,
    given: ChunkSettings | GivenChunking | None,
) -> None:
    """Mark a changed document in the plan re-chunked for its settings alone (`rechunked`),
    or cut at the defaults for recording none (`unrecorded`)."""
    if rechunked(doc_id, content, settings, stored):
        plan.rechunked.add(doc_id)
    elif unrecorded(doc_id, stored, given):
        plan.unrecorded.add(doc_id)


def _count_unrecorded(report: DocumentReport, plan: _Plan, doc_id: str) -> None:
    """Count a written document in the report if it was cut at the defaults for recording
    no settings, with the settings it was cut at."""
    if doc_id in plan.unrecorded:
        report.unrecorded += 1
        report.unrecorded_at.add(plan.cuts[doc_id])


def _empty(item: SourceDocument | StreamedFile | Problem) -> str | None:
    """The id of a document read with no text to index (an empty file, one of nothing but
    markup, a service's document of a blank text), else None: an emptied placeholder is no
    bad input that stops a run, and a sync removes its stored version."""
    if isinstance(item, NoText):
        return item.doc_id
    if isinstance(item, SourceDocument) and is_blank(item.text):
        return item.id
    return None


def _no_text(doc_id: str) -> str:
    """What a job that writes files says of a document with no text to index, naming it: a
    JSONL record's was the words for a file, "no text in it (empty file, ...)"."""
    return f"document {doc_id!r} has no text to index (empty, blank, or nothing but markup)"


def _whose_size(stored: bool, recorded: bool) -> str:
    """What a document's size is in `_unfit`'s words: a new one keeps no chunks."""
    if stored:
        return "-token chunks it keeps"
    return "-token size the stored documents give it" if recorded else "-token default size"


def _unfit(doc_id: str, overlap: int | None, size: int, whose: str) -> str:
    """Why a document is not cut at the overlap given alone (in no front door's words: the
    CLI's and the service's options differ), and what to do."""
    return (
        f"document {doc_id!r}: the overlap of {overlap} tokens given alone is not "
        f"under half the {size}{whose}; give a chunk size too, or an overlap "
        f"under {size // 2}"
    )


def _same_id(doc_id: str, stored: str) -> str:
    """Why a file is not written over the stored document of its id, and what to do."""
    return (
        f"document {doc_id!r} is stored from {stored}, which is still there; this file has "
        "the same id (a file given alone has its name as its id), and writing it would "
        "replace that document. Ingest their common folder, or into another collection, or "
        f"delete the stored one first (probembed delete --doc {shlex.quote(doc_id)})"
    )


def _failed(item: StreamedFile, exc: Exception) -> Problem:
    """The problem of a streamed file whose writes failed and were undone."""
    if isinstance(exc, UnreadableError):
        return exc.problem
    if isinstance(exc, UndoConflictError):  # what it wrote stays, and the message says so
        return Problem(item.source, str(exc))
    return Problem(item.source, f"failed part-way ({exc}); what it wrote was undone")


def write_streamed(
    file: StreamedFile,
    collection: Collection,
    pipeline: Any,
    settings: ChunkSettings,
    batch_size: int,
    encode: Callable[[list[str]], Fused] | None = None,
    replaced: Sequence[str] = (),
    touched: set[str] | None = None,
    created: str | None = None,
) -> tuple[set[str], set[str], int]:
    """Chunk, embed and append a large file in batches of chunks, chunk 0 last, after
    deleting the chunks of its stored version (`replaced`) but its chunk 0, which the new
    one's upsert replaces (and any left over is deleted after it): a process killed
    mid-stream leaves the stored chunk 0, so the next run given no settings re-cuts the
    file at the settings it records (with none, at the defaults, without a word); returns
    the ids written, those kept as stored (a new chunk 0 equal to the stored one: not
    written, not removed) and how many written the character cap ended (`Chunk.by_chars`).

    On any failure the file's chunks are put back as they were (the collection dropped, if
    this made it and nothing else was written since) and the error raised; what other
    writers committed meanwhile stays. Given `touched` (the ids a caller's own undo puts
    back), a failure that is an Exception adds the file's ids to it and leaves the undo to
    that caller (one undo for a whole run); an interruption (Ctrl-C) is undone here still.
    The batches are not compacted at the end: LanceDB's compaction rewrites the table at
    once, with no bound on its memory (`Collection.optimize` does it, as the next ordinary
    ingest does). `created`: the creation token its batches must find (`ingest`'s).
    """
    version = collection.version if collection.exists else None
    token = [created or creation(collection)]
    info, report = PipelineInfo.of(pipeline), IngestReport(file.source)
    written: set[str] = set()
    kept: set[str] = set()
    mark: list[Record] = []
    batch: list[Record] = []
    by_chars = 0

    def flush(records: list[Record], upsert: bool = False) -> None:
        _, todo, _ = prepare(records, collection, pipeline, "stop", True)
        kept.update({r.id for r in records} - {r.id for r in todo})
        if not todo:  # all stored as they are (chunk 0 unchanged): nothing to encode
            return
        fused = (encode or pipeline.encode)([r.text for r in todo])
        token[0] = commit(collection, info, todo, fused, upsert, report, created=token[0])
        written.update(r.id for r in todo)

    with collection.pinned(version):  # what its undo reads, kept from a prune
        try:
            zero = f"{file.id}#0"  # replaced by the new chunk 0's upsert, written last
            if others := [i for i in replaced if i != zero]:
                collection.delete_stored(others, token[0])
            chunks = 0
            for chunk, record in streamed_records(file, pipeline.count_tokens, settings):
                (mark if chunk.index == 0 else batch).append(record)
                chunks += 1
                by_chars += chunk.by_chars
                if len(batch) == batch_size:
                    flush(batch)
                    batch = []
            mark = [counted(record, chunks, settings) for record in mark]
            if batch:
                flush(batch)
            if mark:
                flush(mark, upsert=True)
            elif zero in replaced:  # no chunk 0 now: the stored one is left over
                collection.delete_stored([zero], token[0])
        except BaseException as exc:
            ids = {*replaced, *written, *(r.id for r in (*batch, *mark))}
            if touched is not None and isinstance(exc, Exception):
                touched.update(ids)
            elif not isinstance(exc, CollectionDroppedError):  # else another collection's ids
                collection.revert(version, ids, stopped_by=exc)
            raise
    finish(collection, pipeline, compact=False)
    return written, kept, by_chars


def streamed_records(
    file: StreamedFile, count: Callable, settings: ChunkSettings
) -> Iterator[tuple[Chunk, Record]]:
    """A large file's chunks with the records stored for them, read as a stream; chunk 0's
    still without its chunk count (`counted`), which only the end of the file gives."""
    digest = chunked_digest(file.digest, settings)
    for chunk in stream_chunks(file.segments(), count, settings):
        yield chunk, chunk_record(file, chunk, digest)


def chunked_input(
    source: str | Path,
    count: Callable,
    settings: ChunkSettings,
    stream_bytes: int = STREAM_BYTES,
    clashes: Clashes | None = None,
    follow_links: bool = False,
    own: OwnFolders = (),
) -> Checked:
    """The chunks `ingest_documents` would write of a source into an empty collection, in
    document order, checked as it checks them (one problem per document, and none of a
    refused document's chunks kept): for a job that writes files, not a collection
    (`embed_job`). Files over `stream_bytes` are chunked as streams, and the chunks held.
    Given `clashes`, a metadata type clash keeps the field out of the columns and names it
    there, not a problem (`promote_metadata`). `follow_links`: as `ingest_documents`'s; `own`:
    the job's folders, left out (`readers.walk_folder`)."""
    report = DocumentReport(str(source))
    reading = read_documents(source, stream_bytes, follow_links, own=own)
    plan = _plan(reading, {}, {}, count, settings, report)
    # a file of no text is a problem here still: the job reports no documents but by these
    report.problems += [NoText(source, _no_text(doc), doc) for doc, source in plan.empty.items()]
    planned = [*plan.records, *plan.marks]
    for file, cut in plan.streamed:  # each at the settings `_plan` gave it
        try:
            records = [record for _, record in streamed_records(file, count, cut)]
        except UnreadableError as exc:
            report.problems.append(exc.problem)
            continue
        planned += [counted(records[0], len(records), cut), *records[1:]] if records else []
    good, bad, columns = check_records(planned, {}, clashes)
    passed = {r.id for r in good}
    refused = {r.metadata["doc_id"] for r in planned if r.id not in passed}
    place = {doc: i for i, doc in enumerate(plan.seen)}
    kept = sorted(
        (r for r in good if r.metadata["doc_id"] not in refused),
        key=lambda r: (place[r.metadata["doc_id"]], r.metadata["chunk"]),
    )
    problems = report.problems + per_document(planned, good, bad, list(plan.seen))
    return Checked(kept, problems, columns)
