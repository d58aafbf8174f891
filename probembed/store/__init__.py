"""Persistent probabilistic collections on LanceDB: ingest documents, search with uncertainty.

A database is a directory or an object-store URI; ingest runs here or as a Ray Data job
(`ingest_ray`, the `ray` extra), and `embed_to_parquet` exports Gaussians for other stores.
"""

from probembed.extras import require

require("store", "probembed.store")

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
