"""Chunks or whole records: a collection holds one kind, never both, whichever front door writes.

An item is a chunk when its metadata has `doc_id`, `chunk` and `doc_hash` (`CHUNK_COLUMNS`:
only chunked ingest writes all three; a corpus exported as chunks has its own doc_id and chunk,
and is whole records, as are LlamaIndex's nodes). A collection holds chunks once those are
columns of its table (emptied by deletes or not), whole records once it holds a row without
them. Beside each other, a grouped search found a document twice (`d0` and its chunk `d0#0`),
and a sync of either kind kept the other's rows as documents of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from probembed.store.errors import StoreError

if TYPE_CHECKING:
    from probembed.store.reads import CollectionReads

#: The columns that together mark chunked ingest's chunks (`Collection.holds_chunks`).
CHUNK_COLUMNS = frozenset({"doc_id", "chunk", "doc_hash"})
#: `refuse_mixing` without a table: it looks at the collection's latest version itself.
_LOOK: Any = object()


def refuse_mixing(
    collection: CollectionReads,
    chunks: bool | Sequence[Mapping[str, Any]],
    table: Any = _LOOK,
) -> None:
    """Refuse a write of chunks into a collection of whole records, of whole records into one
    of chunks, or of both kinds at once: the one rule of every write.

    `chunks` is the kind a front door chose (chunked ingest, `probembed ingest` with or without
    `--chunk`, the service's "chunk", a sync of whole records), asked before anything is read
    or encoded, or the metadata of the items a write holds: every plain ingest asks before it
    keeps anything, and every commit (`Collection.add`, `upsert`) again under the write lock,
    against the `table` it holds (None: not made yet) so that no other writer's kind slips in
    between. An empty collection that holds no chunk columns takes either kind.
    """
    rows: Callable[[], int]
    if table is _LOOK:
        holds_chunks, rows = collection.holds_chunks, collection.count
    else:
        holds_chunks = table is not None and set(table.schema.names) >= CHUNK_COLUMNS
        rows = (lambda: 0) if table is None else table.count_rows
    counted: tuple[int, int] | None = None
    if isinstance(chunks, bool):
        writes_chunks, writes_whole = chunks, not chunks
    else:
        whole = sum(not m.keys() >= CHUNK_COLUMNS for m in chunks)
        writes_chunks, writes_whole = whole < len(chunks), whole > 0
        counted = (whole, len(chunks))
    if writes_whole and (holds_chunks or writes_chunks):
        raise StoreError(_whole_beside_chunks(collection.name, holds_chunks, counted))
    if writes_chunks and not holds_chunks and rows():
        raise StoreError(_chunks_beside_whole(collection.name, counted))


def _chunks_beside_whole(name: str, counted: tuple[int, int] | None) -> str:
    """Why chunks are refused beside whole records, naming the fields that made items chunks
    when the items were given (a plain ingest of records carrying them is not chunking)."""
    told = (
        f"collection {name!r} holds whole documents: chunks beside them would be found twice "
        "(the document and a chunk of it)"
    )
    if counted is None:
        return f"{told}; ingest without chunking, or into another collection"
    whole, given = counted
    fields = ", ".join(sorted(CHUNK_COLUMNS))
    return (
        f"{told}; {given - whole} of these {given} items carry {fields} in their metadata, "
        "which marks a chunk: rename those fields, or write into another collection"
    )


def _whole_beside_chunks(name: str, holds_chunks: bool, counted: tuple[int, int] | None) -> str:
    """Why whole records are refused beside chunks (stored, or in the same write), with how
    many of the write's items are whole when its items were given."""
    if counted is None:
        return (
            f"collection {name!r} holds documents as chunks: whole documents beside them "
            "would be found twice (a chunk and the document); ingest with chunking (--chunk, "
            'or the service\'s "chunk"), or into another collection'
        )
    whole, given = counted
    held = "holds documents as chunks" if holds_chunks else "is given chunks in this write"
    return (
        f"collection {name!r} {held}: {whole} of these {given} items are whole records (no "
        "doc_id, chunk and doc_hash), which a sync of the documents would keep and a search "
        "by document would rank as documents of their own; write them with chunking "
        '(probembed ingest --chunk, ingest_documents in Python, the service\'s "chunk"), or '
        "into another collection"
    )
