"""Persistent probabilistic collections on LanceDB: ingest documents, search with uncertainty."""

from probembed.extras import require

require("store", "probembed.store")

from probembed.store.chunked import DocumentReport, ingest_documents, read_documents
from probembed.store.collection import DEFAULT_COLLECTION, Collection, CollectionStats, Database
from probembed.store.errors import (
    CollectionExistsError,
    CollectionNotFoundError,
    PipelineMismatchError,
    StoreError,
)
from probembed.store.index import IndexSettings
from probembed.store.ingest import IngestError, IngestReport, ingest
from probembed.store.readers import Problem, Record, read_records
from probembed.store.rows import Batch, PipelineInfo
from probembed.store.search import Hit, QueryResult, Searcher, confidence

__all__ = [
    "DEFAULT_COLLECTION",
    "Batch",
    "Collection",
    "CollectionExistsError",
    "CollectionNotFoundError",
    "CollectionStats",
    "Database",
    "DocumentReport",
    "Hit",
    "IndexSettings",
    "IngestError",
    "IngestReport",
    "PipelineInfo",
    "PipelineMismatchError",
    "Problem",
    "QueryResult",
    "Record",
    "Searcher",
    "StoreError",
    "confidence",
    "ingest",
    "ingest_documents",
    "read_documents",
    "read_records",
]
