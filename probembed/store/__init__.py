"""Persistent probabilistic collections on LanceDB: ingest documents, search with uncertainty.

A database is a directory or an object-store URI; ingest runs here or as a Ray Data job
(`ingest_ray`, the `ray` extra), and `embed_to_parquet` exports Gaussians for other stores.

Importing the package, or a light submodule of it (`formats`, `readers`, `errors`, ...), loads
no LanceDB: each public name below is imported from its module on first use (`_LAZY`), so a
command that reads files or refuses an option does not pay a second for LanceDB.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from probembed.extras import require

require("store", "probembed.store")  # finds the modules without importing them

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs
    from probembed.store.backup import Backup
    from probembed.store.chunked import DocumentReport, ingest_documents, read_documents
    from probembed.store.collection import Collection, CollectionStats
    from probembed.store.database import DEFAULT_COLLECTION, Database
    from probembed.store.embed_job import EmbedReport, embed_to_parquet
    from probembed.store.erasure import Erasure
    from probembed.store.errors import (
        CollectionBusyError,
        CollectionDroppedError,
        CollectionExistsError,
        CollectionNotFoundError,
        ErasureHeldError,
        EveryItemError,
        NoDatabaseError,
        NotChunkedError,
        NotWritableError,
        PipelineMismatchError,
        ReadOnlyError,
        StorageCredentialsError,
        StorageFullError,
        StorageUnavailableError,
        StoreError,
        StoreStateError,
        UndoConflictError,
        WriteConflictError,
    )
    from probembed.store.index import IndexSettings
    from probembed.store.ingest import IngestError, IngestReport, ingest, remove
    from probembed.store.ray_ingest import ingest_ray
    from probembed.store.readers import Problem, Record, read_records
    from probembed.store.results import GroupedHit, Hit, QueryResult, confidence
    from probembed.store.rows import Batch, PipelineInfo
    from probembed.store.search import QueryCutWarning, Searcher

#: Public names imported on first use, and the module that holds each.
_LAZY = {
    "Backup": "probembed.store.backup",
    "DocumentReport": "probembed.store.chunked",
    "ingest_documents": "probembed.store.chunked",
    "read_documents": "probembed.store.chunked",
    "Collection": "probembed.store.collection",
    "CollectionStats": "probembed.store.collection",
    "DEFAULT_COLLECTION": "probembed.store.database",
    "Database": "probembed.store.database",
    "EmbedReport": "probembed.store.embed_job",
    "embed_to_parquet": "probembed.store.embed_job",
    "Erasure": "probembed.store.erasure",
    "CollectionBusyError": "probembed.store.errors",
    "CollectionDroppedError": "probembed.store.errors",
    "CollectionExistsError": "probembed.store.errors",
    "CollectionNotFoundError": "probembed.store.errors",
    "ErasureHeldError": "probembed.store.errors",
    "EveryItemError": "probembed.store.errors",
    "NoDatabaseError": "probembed.store.errors",
    "NotChunkedError": "probembed.store.errors",
    "NotWritableError": "probembed.store.errors",
    "PipelineMismatchError": "probembed.store.errors",
    "ReadOnlyError": "probembed.store.errors",
    "StorageCredentialsError": "probembed.store.errors",
    "StorageFullError": "probembed.store.errors",
    "StorageUnavailableError": "probembed.store.errors",
    "StoreError": "probembed.store.errors",
    "StoreStateError": "probembed.store.errors",
    "UndoConflictError": "probembed.store.errors",
    "WriteConflictError": "probembed.store.errors",
    "IndexSettings": "probembed.store.index",
    "IngestError": "probembed.store.ingest",
    "IngestReport": "probembed.store.ingest",
    "ingest": "probembed.store.ingest",
    "remove": "probembed.store.ingest",
    "ingest_ray": "probembed.store.ray_ingest",
    "Problem": "probembed.store.readers",
    "Record": "probembed.store.readers",
    "read_records": "probembed.store.readers",
    "GroupedHit": "probembed.store.results",
    "Hit": "probembed.store.results",
    "QueryResult": "probembed.store.results",
    "confidence": "probembed.store.results",
    "Batch": "probembed.store.rows",
    "PipelineInfo": "probembed.store.rows",
    "QueryCutWarning": "probembed.store.search",
    "Searcher": "probembed.store.search",
}

__all__ = [
    "DEFAULT_COLLECTION",
    "Backup",
    "Batch",
    "Collection",
    "CollectionBusyError",
    "CollectionDroppedError",
    "CollectionExistsError",
    "CollectionNotFoundError",
    "CollectionStats",
    "Database",
    "DocumentReport",
    "EmbedReport",
    "Erasure",
    "ErasureHeldError",
    "EveryItemError",
    "GroupedHit",
    "Hit",
    "IndexSettings",
    "IngestError",
    "IngestReport",
    "NoDatabaseError",
    "NotChunkedError",
    "NotWritableError",
    "PipelineInfo",
    "PipelineMismatchError",
    "Problem",
    "QueryCutWarning",
    "QueryResult",
    "ReadOnlyError",
    "Record",
    "Searcher",
    "StorageCredentialsError",
    "StorageFullError",
    "StorageUnavailableError",
    "StoreError",
    "StoreStateError",
    "UndoConflictError",
    "WriteConflictError",
    "confidence",
    "embed_to_parquet",
    "ingest",
    "ingest_documents",
    "ingest_ray",
    "read_documents",
    "read_records",
    "remove",
]


if not TYPE_CHECKING:  # a module __getattr__ makes every unknown name Any to mypy

    def __getattr__(name: str) -> Any:
        """Import a public name's module on first use: LanceDB loads only for what needs it."""
        import importlib

        if name not in _LAZY:
            raise AttributeError(f"module 'probembed.store' has no attribute {name!r}")
        return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    """The public names, including the lazily imported ones."""
    return sorted({*globals(), *__all__})


class _Package(ModuleType):
    """The package, whose public `ingest` stays the function once its submodule is loaded."""

    def __setattr__(self, name: str, value: Any) -> None:
        """Bind a public name its own submodule shares (`ingest`) to the name, not the module:
        the import system sets a loaded submodule on its package, which made
        `from probembed.store import ingest` the module (the eager import bound it back)."""
        if isinstance(value, ModuleType) and _LAZY.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
