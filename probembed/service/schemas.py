"""Request and response bodies: what the OpenAPI schema at /openapi.json promises.

Embeddings follow OpenAI's shape exactly and add `variance` and `weights` per item; search
answers the Python API's hit shape. Unknown fields are refused (a typo'd option is an error,
not silently ignored), except on /v1/embeddings, where OpenAI clients may send fields of
their own.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from probembed.encoders.base import lone_surrogate
from probembed.scoring import Score, parse_score
from probembed.service.settings import DEFAULT_K
from probembed.store.database import COLLECTION_NAME

#: Longest document id a write takes (characters): an id is a key, not a place for content.
MAX_ID_LENGTH = 1024


class Strict(BaseModel):
    """A body whose unknown fields are a 422, and whose values are not coerced: `k: true`,
    `k: "5"` or `upsert: "yes"` are refused rather than read as 1, 5 and true."""

    model_config = ConfigDict(extra="forbid", strict=True)


class EmbeddingRequest(BaseModel):
    """OpenAI's embeddings request (token-id inputs are not supported)."""

    model_config = ConfigDict(extra="ignore")

    input: str | list[str] = Field(description="A text or a list of texts.")
    model: str = Field(description="A pipeline this server serves (see /v1/models).")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(
        None, ge=1, description="Only the pipeline's own dimension: fused vectors do not truncate."
    )
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _no_token_ids(cls, value: Any) -> Any:
        """OpenAI's token-id inputs, refused in one sentence (each id was a complaint)."""
        if isinstance(value, list) and value and all(_token_ids(item) for item in value):
            raise ValueError(
                "token ids are not supported here: send text, a string or a list of strings"
            )
        return value


def _token_ids(item: Any) -> bool:
    """Whether an input item is a token id or a list of them (OpenAI's other input shapes)."""
    if isinstance(item, list):
        return all(isinstance(i, int) and not isinstance(i, bool) for i in item)
    return isinstance(item, int) and not isinstance(item, bool)


class EmbeddingItem(BaseModel):
    """One text's fused Gaussian: OpenAI's fields plus `variance` and `weights`."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="Mean; base64 float32 with base64 format.")
    variance: list[float] | str = Field(description="Per-dimension variance, same format.")
    weights: dict[str, float] = Field(description="Fusion weight per model for this text.")


class Usage(BaseModel):
    """Whitespace-separated words in, counted as tokens (members have their own tokenizers)."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    """OpenAI's embeddings response: one item per input text, in input order."""

    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: Usage


class SimilarityInputs(Strict):
    """Text Embeddings Inference's similarity inputs: one text and the texts to compare with it."""

    source_sentence: str = Field(
        description="The text each of `sentences` is compared with (scored as the query)."
    )
    sentences: list[str] = Field(
        min_length=1, description="The texts to compare with it; answered in this order."
    )


class SimilarityRequest(Strict):
    """Text Embeddings Inference's `/similarity` request (`inputs` alone), with `model`
    choosing the served pipeline as `/v1/embeddings` does (default: the first served)."""

    inputs: SimilarityInputs
    model: str | None = Field(
        None, description="A pipeline this server serves (see /v1/models); default: the first."
    )


class SimilarityItem(BaseModel):
    """One sentence's similarity to the source sentence, and how sure it is."""

    index: int = Field(description="The sentence's place in `inputs.sentences`.")
    score: float = Field(
        description="The pipeline's own score (`score_name`, `beta`), as it searches."
    )
    std: float = Field(
        description="The std of the pair's dot product, the members' disagreement included: "
        "what a search hit of the same pair reports, on the pipeline's own weights (a "
        "collection its members' agreement tilts scores its hits with the tilted ones)."
    )


class SimilarityResponse(BaseModel):
    """One item per sentence, in request order (Text Embeddings Inference answers the list of
    `data[i].score` alone); the score and beta they are by."""

    object: Literal["list"] = "list"
    data: list[SimilarityItem]
    model: str
    score_name: Score = Field(description="The similarity scored: the pipeline's own.")
    beta: float = Field(description="Its beta (the variance penalty of uec and uec-mteb).")


class ModelCard(BaseModel):
    """A served pipeline as OpenAI lists a model, with its dimension and members."""

    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "probembed"
    dim: int
    models: list[str] = Field(description="The member models fused by this pipeline.")


class ModelList(BaseModel):
    """Every served pipeline (`GET /v1/models`)."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class PipelineOut(BaseModel):
    """The pipeline that wrote a collection: its name, fingerprint and members."""

    name: str
    fingerprint: str
    models: list[str]


class CollectionInfo(BaseModel):
    """A collection's size, storage cost, version, pipeline, and the weights its members'
    agreement gives (None: not adapted)."""

    name: str
    count: int
    dim: int
    bytes_per_item: float | None
    total_bytes: int
    version: int
    pipeline: PipelineOut
    adapted_weights: dict[str, float] | None
    problem: str | None = Field(
        None,
        description="Why this server cannot load the collection's pipeline (its routes that "
        "encode answer 503); None: served.",
    )


class CollectionList(BaseModel):
    """Every collection of the database (`GET /v1/collections`)."""

    object: Literal["list"] = "list"
    data: list[CollectionInfo]


class CollectionCreate(Strict):
    """A new, empty collection and the served pipeline that will write it."""

    name: str = Field(pattern=COLLECTION_NAME)
    pipeline: str | None = Field(None, description="A served pipeline; default: the first.")


def _integer_as_text(value: Any) -> str:
    """An id as its string: an integer (not a bool) as its decimal digits, as `probembed
    ingest` stores a JSON line's `"id": 7` (`documents._find_id`); a string as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"Input should be a valid string or integer, got {_shown(value)}")


def _shown(value: Any) -> str:
    """A refused JSON value as the client wrote it, cut short: `true`, `7.5`, `null`."""
    try:
        return json.dumps(value)[:40]
    except (TypeError, ValueError):
        return repr(value)[:40]


#: What an id takes in JSON: a string or an integer, stored as its decimal string.
_ID_SCHEMA = 'A string, or an integer stored as its decimal string (`7` as `"7"`)'
#: A document's id in a write: stored as a string of 1 to MAX_ID_LENGTH characters (an
#: integer's digits count, its sign too).
DocumentId = Annotated[
    str,
    Field(min_length=1, max_length=MAX_ID_LENGTH),
    BeforeValidator(_integer_as_text),  # outside the length check: an integer's digits count
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
                {"type": "integer"},
            ],
            "description": f"{_ID_SCHEMA}; at most {MAX_ID_LENGTH:,} characters either way.",
        }
    ),
]
#: An id a delete names: as a write takes it, of any length (a Python or CLI write has no
#: limit, and a delete of an id never stored finds nothing).
StoredId = Annotated[
    str,
    BeforeValidator(_integer_as_text),
    WithJsonSchema(
        {"anyOf": [{"type": "string"}, {"type": "integer"}], "description": f"{_ID_SCHEMA}."}
    ),
]


class Document(Strict):
    """One document to store: an id (at most 1,024 characters), its text, JSON metadata."""

    id: DocumentId
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class ChunkOptions(Strict):
    """How documents are cut into chunks (the CLI's --chunk-tokens, --overlap)."""

    max_tokens: int | None = Field(
        None,
        ge=8,
        description="Chunk size in tokens, capped at the pipeline's limit; default: 256. With "
        "neither this nor `overlap_tokens`, a stored document is cut at the size and overlap "
        "it was cut at before (left alone when unchanged, re-cut at those when changed), a "
        "new one at those of a stored document of its content under `prefix`, else those "
        "more than half the stored documents under `prefix` share, else the defaults; given, a "
        "stored document cut at others is re-chunked (`rechunked` in the answer). Given without "
        "`overlap_tokens`, each document keeps its own overlap (a new one's as above), "
        "lowered under max_tokens / 2.",
    )
    overlap_tokens: int | None = Field(
        None,
        ge=0,
        description="Tokens a chunk repeats of the one before, under max_tokens / 2; "
        "default: 32, or the most under max_tokens / 2 for smaller chunks. Given without "
        "`max_tokens`, each document keeps its own size (a new one's as `max_tokens` says), "
        "and a document whose size it is not under half of is a bad document.",
    )
    markdown: bool | None = Field(
        None,
        description="Sections at Markdown headings (`heading` paths), and a document without a "
        "`title` in its metadata titled as `probembed ingest` titles a .md file (front matter, "
        "first heading, its id's file name); default: for documents whose id ends in .md or "
        ".markdown, as the CLI reads such files.",
    )

    @model_validator(mode="after")
    def _overlap_fits(self) -> ChunkOptions:
        """An overlap given with a size is under half of it (a 422 naming both, not a later
        refusal); one given alone is checked against each document's own size."""
        size, overlap = self.max_tokens, self.overlap_tokens
        if size is not None and overlap is not None and overlap >= size // 2:
            raise ValueError(
                f"overlap_tokens must be under max_tokens / 2, got {overlap} for max_tokens={size}"
            )
        return self


class DocumentsWrite(Strict):
    """Documents to embed and store, whole or as chunks."""

    documents: list[Document] = Field(min_length=1)
    upsert: bool = Field(
        False,
        description="Replace documents whose id is already stored (chunked: always, and an "
        "explicit false is refused).",
    )
    on_error: Literal["stop", "skip"] = Field(
        "stop", description="On a bad document: write nothing (422), or skip it and report it."
    )
    chunk: ChunkOptions | bool = Field(
        False,
        description="Store each document as chunks `id#i` (true: a stored document at the "
        "size and overlap it was cut at, a new one at those its stored neighbours share, else "
        "256 tokens, 32 overlap: `max_tokens`), re-embedding "
        "only documents whose content changed since they were stored.",
    )
    sync: bool = Field(
        False,
        description="Make the collection hold what this request holds (under `prefix`): "
        "replace changed documents (as upsert) and remove the stored ones it does not hold, "
        "whole documents right after the write (a commit per 5,000 ids; an error puts the "
        "write back too, but a server killed between the commits leaves the write and the "
        "first parts: the same request again completes it). Refused when it would remove every "
        "stored document; with on_error skip, a skipped document that names no id removes "
        "nothing.",
    )
    prefix: str = Field(
        "",
        max_length=256,
        description="Put every document id under this prefix (`crm/` stores `7` as `crm/7`); "
        "with sync, only documents under it are removed, so several sources share a "
        "collection, each synced on its own.",
    )

    @field_validator("prefix")
    @classmethod
    def _prefix_is_unicode(cls, value: str) -> str:
        """A prefix every id takes: one that cannot be stored refuses the request, not each id."""
        surrogate = lone_surrogate(value)
        if surrogate is not None:
            raise ValueError(f"prefix is not valid Unicode: it holds {surrogate}")
        return value

    @model_validator(mode="after")
    def _replacing(self) -> DocumentsWrite:
        """A chunked write and a sync replace changed documents: "upsert": false asks not to."""
        if "upsert" in self.model_fields_set and not self.upsert:
            asked = "chunk" if self.chunking is not None else "sync" if self.sync else None
            if asked is not None:  # asked not to replace, and a changed one was replaced
                raise ValueError(
                    f"upsert false does not apply with {asked}: it always replaces a stored "
                    "document whose content changed; leave upsert out"
                )
        return self

    @property
    def replacing(self) -> bool:
        """Whether a whole-document write replaces stored ids (upsert, or sync)."""
        return self.upsert or self.sync

    @property
    def chunking(self) -> ChunkOptions | None:
        """The chunk options asked for, or None for whole documents."""
        if isinstance(self.chunk, ChunkOptions):
            return self.chunk
        return ChunkOptions() if self.chunk else None


class ChunksCut(BaseModel):
    """The size and overlap, in tokens, a chunked write cut its documents at."""

    max_tokens: int
    overlap_tokens: int


class WriteReport(BaseModel):
    """What a write stored, replaced, left and skipped, and the collection's count after it."""

    collection: str
    added: int
    updated: int
    already_stored: int
    #: With on_error="skip": each skipped document and why.
    skipped: list[str] = Field(default_factory=list)
    count: int
    #: Chunked writes and upserts: documents left as stored, their content unchanged.
    unchanged: int | None = None
    changed: int | None = Field(
        None,
        description="Without upsert or chunk: documents of `already_stored` whose stored text "
        "or metadata is not what was sent; they were left as stored (`hint` says how to "
        "replace them).",
    )
    hint: str | None = Field(
        None, description="What to send to store the sent text of `changed` documents."
    )
    #: Syncs and chunked writes: documents removed (sync).
    removed: int | None = None
    sync_withheld: int | None = Field(
        None,
        description="Syncs: skipped documents that named no usable id; any of them may be one "
        "still stored, so the sync removed nothing.",
    )
    repeated: int = Field(
        0,
        description="Documents sent whose content another sent document repeats (a chunked "
        "write also compares the stored documents): each is found, and each gets a lower "
        "p_relevant than one would. None is dropped.",
    )
    repeated_example: tuple[str, str] | None = Field(
        None, description="One pair of `repeated`: a sent document, the one it repeats."
    )
    rechunked: int | None = Field(
        None,
        description="Chunked writes only: of `updated`, the documents re-chunked for the chunk "
        "settings alone (their content as stored, cut at another `max_tokens` or "
        "`overlap_tokens` than sent); a document chunked by a release that did not record "
        "its settings is not counted (`unrecorded` is).",
    )
    unrecorded: int | None = Field(
        None,
        description="Chunked writes only: of `updated`, the documents chunked by a release "
        "that did not record their chunk settings, cut at the defaults (256 tokens, overlap "
        "32, capped at the pipeline's limit) for what the request did not send of "
        "`max_tokens` and `overlap_tokens`: send both to keep theirs.",
    )
    #: Chunked writes only: chunks written / removed.
    chunks_written: int | None = None
    chunks_by_chars: int | None = Field(
        None,
        description="Chunked writes only: of `chunks_written`, those the character cap "
        "(16 characters a token of the size) ended rather than the token budget: text the "
        "tokenizers see few tokens in (Thai, emoji, unspaced Chinese to a word count).",
    )
    chunks_removed: int | None = None
    empty: int | None = Field(
        None,
        description="Chunked writes only: documents sent with a blank text, so nothing to "
        "index: not stored, and not skipped as bad input either.",
    )
    emptied: int | None = Field(
        None,
        description="Chunked syncs only: of `empty`, the documents that were stored; their "
        "stored chunks were removed, as a sync removes a document not sent. Without sync "
        "they stay stored (0).",
    )
    chunked_at: ChunksCut | None = Field(
        None,
        description="Chunked writes only: the chunk size and overlap the request's documents "
        "were cut at (or, unchanged, are stored at), `chunk`'s capped at the pipeline's "
        "shortest member's token limit (a larger `max_tokens` would leave the end of each "
        "chunk unread by that member). null: they were cut at different settings (sent with "
        "neither or one of `max_tokens` and `overlap_tokens`, each document keeps its own), "
        "or no document was cut.",
    )


class DeleteDocuments(Strict):
    """Ids to delete."""

    ids: list[StoredId] = Field(min_length=1)
    doc: bool = Field(
        False,
        description="The ids are documents of a chunked collection: delete every chunk of "
        "each (as `probembed delete --doc`); a chunk's id is `doc#i`.",
    )


class DeleteReport(BaseModel):
    """What a delete removed, and the collection's count after it."""

    collection: str
    deleted: int
    count: int
    not_found: int = Field(
        0,
        description="Ids asked for that were not stored (each counted once); with `doc`, "
        "documents that had no chunk.",
    )
    hint: str | None = Field(
        None, description="Why an id was not found, where it names a chunked document."
    )


class EraseItems(Strict):
    """What to erase for good: ids (with `doc`, documents), or the items a filter keeps."""

    ids: list[StoredId] | None = Field(None, min_length=1)
    doc: bool = Field(
        False,
        description="The ids are documents of a chunked collection: erase every chunk of each.",
    )
    where: str | None = Field(
        None,
        min_length=1,
        description="Erase every item this filter keeps, as search's `where` takes it, e.g. "
        "\"customer = 'T9000'\".",
    )
    force: bool = Field(
        False,
        description="Drop a pin of a write that may still run (it can then not be undone); "
        "without it such a pin is a 409 naming it, and nothing is erased.",
    )
    all: bool = Field(
        False,
        description="With `where`: erase even where the filter keeps every item (without it "
        "such a filter, `1 = 1` by mistake, is a 422 and nothing is erased).",
    )

    @model_validator(mode="after")
    def _one_of(self) -> EraseItems:
        """Exactly one of ids and where, doc only with ids, and all only with where."""
        if (self.ids is None) == (self.where is None):
            raise ValueError("give exactly one of 'ids' (a list) and 'where' (a filter)")
        if self.doc and self.ids is None:
            raise ValueError("'doc' names the ids as documents: give 'ids', not 'where'")
        if self.all and self.where is None:
            raise ValueError("'all' lets a filter that keeps every item erase them: give 'where'")
        return self


class EraseReport(BaseModel):
    """What an erasure did (`probembed erase --json`), and the collection's count after it."""

    collection: str
    erased: int = Field(
        description="Items erased (a document's chunks, each), those deleted before among them."
    )
    erased_deleted: int = Field(
        description="Of `erased`, the items deleted before (with `delete`): not in the "
        "collection's latest version, found in its older versions and erased from its files."
    )
    not_found: list[str] = Field(
        description="Ids (with `doc`, documents) asked for that were not stored."
    )
    fragments_rewritten: int = Field(
        description="LanceDB data fragments that held an erased item, written again without it."
    )
    rows_rewritten: int = Field(
        description="The other items of those fragments, written again unchanged."
    )
    indices_rebuilt: list[str]
    versions_removed: int = Field(
        description="Older versions removed: no undo can bring the items back."
    )
    tags_dropped: list[str]
    graphs_removed: int = Field(description="Files of search graphs saved beside the collection.")
    cache_entries_evicted: int = Field(
        description="The erased texts' entries removed from the embedding cache (one a model)."
    )
    bytes_freed: int
    version: int = Field(
        description="The version left, the only one; where no id or document given was in any "
        "version kept (`erased` and `versions_removed` 0), the latest: nothing was changed."
    )
    count: int


class SearchRequest(Strict):
    """One query (`query`) or several (`queries`), with the score, filter and depth to search
    by."""

    query: str | None = None
    queries: list[str] | None = Field(None, min_length=1)
    k: int = Field(DEFAULT_K, ge=1)
    score: Score | None = Field(
        None, description="The similarity (`cosine` names `dot`); default: the pipeline's."
    )
    where: str | None = Field(None, description='SQL filter, e.g. "year > 2015".')
    hybrid: bool = False
    exact: bool = False
    min_p_relevant: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    group_by_doc: bool = Field(
        False, description="Chunked collections: each document's best chunk only."
    )

    @field_validator("score", mode="before")
    @classmethod
    def _alias(cls, value: object) -> object:
        """The names the CLI and the library take (`cosine`, any case) name the same score;
        anything else is refused listing the valid names (the strict enum said only "Input
        should be an instance of Score")."""
        return None if value is None else parse_score(value)  # type: ignore[arg-type]

    @model_validator(mode="after")
    def _one_of(self) -> SearchRequest:
        """Exactly one of query and queries."""
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a text) and 'queries' (a list)")
        return self

    @property
    def texts(self) -> list[str]:
        """The queries as a list."""
        return [self.query] if self.query is not None else list(self.queries or [])


class HitOut(BaseModel):
    """One hit: its exact score, the score's std, the stored weights, P(relevant), text and
    metadata."""

    id: str
    score: float
    std: float
    weights: dict[str, float]
    p_relevant: float | None
    text: str | None
    metadata: dict[str, Any]
    other_chunks: int | None = Field(
        None, description="With group_by_doc: the document's other chunks among the candidates."
    )


class QueryResultOut(BaseModel):
    """One query's hits, best first, and its `confidence`: P(the query is answered well) from
    a learned confidence, else P(the first hit truly outranks the second); a property of the
    query's ranking before `min_p_relevant` drops hits (it may stand beside no hit), None when
    that ranking has fewer than two."""

    query: str | None
    confidence: float | None
    hits: list[HitOut]
    cut_at_tokens: int | None = Field(
        None,
        description="Set when the query is longer than a member model reads: the fewest "
        "tokens any member reads of it (the pipeline's shortest member limit). The models "
        "embed only its start, so the dense hits answer that start; a hybrid search's BM25 "
        "reads all of it. The query is searched, not refused; null when it is read whole.",
    )


class SearchResponse(BaseModel):
    """Every query's result, in request order."""

    collection: str
    results: list[QueryResultOut]


class ErrorMessage(BaseModel):
    """OpenAI's error object: the message and the error type its clients map to an exception."""

    message: str
    type: str


#: OpenAI's error `type` per status, so its clients raise the matching exception class.
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
    507: "server_error",
}


def error_body(status: int, message: str, request_id: str, detail: Any = None) -> dict[str, Any]:
    """A refusal's JSON: `detail` (the message, or the problems), OpenAI's `error` object and
    the request's id (its access line's, so an operator finds the line a user reports).

    What it echoes of the request is made writable as JSON: a NaN or an infinity, or a lone
    surrogate, made rendering the refusal fail and the client got that failure's message.
    """
    error = {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error")}
    told = {"detail": message if detail is None else detail, "error": error}
    return _json_safe({**told, "request_id": request_id})


def _json_safe(value: Any) -> Any:
    """The value with non-finite floats as their names and lone surrogates escaped."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class ErrorBody(BaseModel):
    """Every refusal: `detail` (a message, or a list of the problems), OpenAI's `error`, and
    the request's id (also its `X-Request-ID` header and in its access line)."""

    detail: Any
    error: ErrorMessage
    request_id: str


class Health(BaseModel):
    """Liveness or readiness: the state, the pipelines loaded so far, and a failed load's error."""

    status: str
    pipelines: list[str] = Field(default_factory=list)
    error: str | None = None


class Readiness(Health):
    """/readyz: a Health, and the collections whose pipeline does not load in this server,
    with why (they alone are refused, so the server stays ready)."""

    unservable: dict[str, str] = Field(default_factory=dict)
