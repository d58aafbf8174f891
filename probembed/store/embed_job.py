"""Gaussians for another vector database: a corpus embedded into Parquet files, one per batch.

The input is read and checked as ingest reads it (`probembed.store.ingest.read_checked`; with
chunking, cut and checked as chunked ingest cuts it, `probembed.store.chunked.chunked_input`),
so with `on_error="stop"` a bad line writes nothing. Each batch becomes one file
`part-<first row>.parquet` with a collection's columns in its types (id, text, the metadata
JSON, float32 fixed-size lists mean, var and weights, a column per scalar metadata field,
its type decided over the whole input; a field whose values clash in type between records,
which a collection refuses, has no column, only its place in the JSON, and a warning) and
the collections' pipeline header in the schema metadata, with the part's rows and a digest
of their ids, texts and metadata; each is written to a temporary name and renamed into place,
so a killed job leaves whole files only, and a re-run keeps the parts that hold what it would
write and writes the others. The embedding runs here (`probembed.store.ingest.in_order`),
or on Ray actors (`probembed.store.ray_ingest.OnRay`), as ingest's does.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from probembed import atomic
from probembed.chunking import ChunkSettings
from probembed.fusion import Fused
from probembed.progress import progress_bar
from probembed.store.chunked import chunked_input
from probembed.store.errors import StoreError
from probembed.store.ingest import (
    DEFAULT_BATCH,
    Embedding,
    IngestError,
    OnError,
    bar_label,
    in_order,
    read_checked,
    validate_options,
)
from probembed.store.readers import (
    READERS,
    TEXT_SUFFIXES,
    Problem,
    Record,
    Unread,
    unread_files,
    unread_note,
)
from probembed.store.rows import (
    NOT_A_COLUMN,
    SCHEMA_KEY,
    WRITE_TAG,
    Batch,
    Clashes,
    PipelineInfo,
    metadata_json,
    read_header,
    table_schema,
    to_arrow,
)

#: The columns every part has, before one per scalar metadata field.
COLUMNS = ("id", "text", "metadata", "mean", "var", "weights")
_PART = re.compile(r"part-(\d{9,})\.parquet")


def part_name(first: int) -> str:
    """The file of the part whose rows start at `first`."""
    return f"part-{first:09d}.parquet"


@dataclass
class EmbedReport:
    """What an embedding job wrote, what it kept of an earlier run, and the input it skipped."""

    source: str
    out: Path
    rows: int = 0
    files: int = 0
    #: Parts an earlier run of the same job wrote, kept as they are, and their rows.
    kept_files: int = 0
    kept_rows: int = 0
    #: With chunking: the documents the rows are chunks of.
    documents: int | None = None
    problems: list[Problem] = field(default_factory=list)
    #: Files of a folder source that no reader takes, by suffix (`readers.unread_files`).
    unread: Unread = field(default_factory=Unread)
    #: The suffixes this run read in a folder.
    reads: tuple[str, ...] = TEXT_SUFFIXES
    #: Metadata fields whose values clash in type between records (field -> the type it had,
    #: the type that clashed): in the metadata JSON column only, no column of their own.
    json_only: Clashes = field(default_factory=dict)

    def summary(self) -> str:
        """One line for a person."""
        of = f" (chunks of {self.documents} document(s))" if self.documents is not None else ""
        kept = (
            f", kept {self.kept_files} file(s) ({self.kept_rows} rows) an earlier run wrote"
            if self.kept_files
            else ""
        )
        return (
            f"{self.source}: wrote {self.rows} Gaussians{of} in {self.files} Parquet file(s) "
            f"to {self.out}{kept}, skipped {len(self.problems)} bad item(s)"
            f"{unread_note(self.unread, self.reads, '`probembed embed --chunk`')}"
        )


def embed_to_parquet(
    source: str | Path,
    out: str | Path,
    pipeline: Any,
    batch_size: int = DEFAULT_BATCH,
    on_error: OnError = "stop",
    use_ray: bool = False,
    workers: int = 1,
    address: str | None = None,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    progress: bool = False,
    chunking: ChunkSettings | None = None,
    follow_links: bool = False,
) -> EmbedReport:
    """Embed a JSONL file, BEIR folder or text folder into Parquet files under `out`; with
    `chunking`, documents (Markdown, HTML, PDF, text files, records) as the chunks chunked
    ingest would store, ids `DOC#i`.

    A re-run into the same `out` keeps the parts an earlier run of the same input, pipeline
    and batch size wrote, and writes the others; a part of anything else is refused
    (`kept_parts`), as is any other file. With `use_ray`, `workers` actors embed, each
    reserving `cpus_per_worker` and `gpus_per_worker`. A folder's links are followed only to
    files in it, unless `follow_links`, and `out` in it is no part of it (`readers.walk_folder`).
    """
    validate_options(batch_size, on_error)
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:/", str(out)):  # s3://..., which Path would mangle
        raise StoreError(
            f"--out {str(out)!r} is an object-store URI; probembed embed writes its Parquet "
            "files to a local folder (copy them to object storage afterwards)"
        )
    embed_with: Embedding = in_order
    if use_ray:
        from probembed.store.ray_ingest import OnRay

        embed_with = OnRay(address, workers, cpus_per_worker, gpus_per_worker)  # checked here
    out = Path(out)
    check_out(out)
    clashes: Clashes = {}
    if chunking is None:
        records, problems, columns = read_checked(
            source, None, on_error, clashes=clashes, follow_links=follow_links, own=[out]
        )
    else:
        settings = chunking.capped(pipeline.max_tokens)
        records, problems, columns = chunked_input(
            source,
            pipeline.count_tokens,
            settings,
            clashes=clashes,
            follow_links=follow_links,
            own=[out],
        )
        if problems and on_error == "stop":
            raise IngestError(problems)
    warn_json_only(clashes)
    info = PipelineInfo.of(pipeline)
    kept = kept_parts(out, records, batch_size, info, columns)
    if records:  # every item skipped: no empty folder left for a next job to meet
        _make_out(out)
    report = EmbedReport(
        str(source),
        out,
        kept_files=len(kept),
        kept_rows=sum(kept.values()),
        problems=problems,
        reads=TEXT_SUFFIXES if chunking is None else tuple(READERS),
        json_only=clashes,
    )
    report.unread = unread_files(source, report.reads, follow_links, own=[out])
    if chunking is not None:
        report.documents = len({r.metadata["doc_id"] for r in records})
    todo = [first for first in range(0, len(records), batch_size) if first not in kept]
    texts = [r.text for r in records]
    with progress_bar(
        bar_label(f"embed {Path(source).name}", embed_with),
        len(records) - report.kept_rows,
        progress,
    ) as bar:
        # everything kept: no Ray to start
        embedded = embed_with(texts, pipeline, batch_size, todo) if todo else iter(())
        for index, fused in embedded:
            _write_part(out, [records[i] for i in index], int(index.min()), fused, info, columns)
            report.rows += len(index)
            report.files += 1
            bar.advance(len(index))
    return report


def warn_json_only(clashes: Clashes) -> None:
    """One warning per metadata field kept out of the columns for a type clash: a collection
    refuses such input, an export (which once wrote no metadata at all) keeps every record."""
    for name, (had, then) in clashes.items():
        warnings.warn(
            f"metadata field {name!r} holds {had} and {then} values: it has no column of its "
            "own in the Parquet files, only its place in the `metadata` JSON column",
            UserWarning,
            stacklevel=3,
        )


def _write_part(
    out: Path,
    chunk: list[Record],
    first: int,
    fused: Fused,
    info: PipelineInfo,
    columns: Mapping[str, pa.DataType],
) -> None:
    """One batch as one Parquet file, renamed into place whole; its header says which rows of
    the input it holds, so a re-run can tell it is its own."""
    texts, metadata = [r.text for r in chunk], [r.metadata for r in chunk]
    batch = Batch([r.id for r in chunk], texts, metadata, fused, info, columns)
    schema = table_schema(batch, compact=False)
    header = read_header(schema) or {}
    header["part"] = {"first": first, "rows": len(chunk), "digest": rows_digest(chunk)}
    schema = schema.remove(schema.get_field_index(WRITE_TAG))  # a collection's own
    schema = schema.with_metadata({SCHEMA_KEY: json.dumps(header).encode()})
    with atomic.replacing(out / part_name(first)) as tmp:
        pq.write_table(to_arrow(batch, schema), tmp)


def rows_digest(rows: Sequence[Record]) -> str:
    """SHA-256 of rows' ids, texts and metadata: what a part holds, beyond its ids."""
    digest = hashlib.sha256()
    for r in rows:
        row = [r.id, r.text, metadata_json(r.id, r.metadata)]
        digest.update(json.dumps(row, ensure_ascii=False).encode("utf-8"))
    return digest.hexdigest()


def kept_parts(
    out: Path,
    records: Sequence[Record],
    batch_size: int,
    info: PipelineInfo,
    columns: Mapping[str, pa.DataType],
) -> dict[int, int]:
    """The parts in `out` an earlier run of this very job wrote (first row -> rows), read by
    their schema and id column only: written by the same pipeline, holding the ids of the
    rows this run would write there, with the same texts and metadata (the header's digest)
    and metadata columns. Any other part is refused, naming it and what differs: files of two
    runs never mix."""
    kept: dict[int, int] = {}
    if not out.is_dir():
        return kept
    for path in sorted(out.iterdir()):
        first = _first_row(path.name)
        if first is None:  # hidden: a temporary file of a killed run, which no reader reads
            continue
        rows = records[first : first + batch_size]
        why = _difference(path, first, rows, batch_size, len(records), info, columns)
        if why is not None:
            raise StoreError(
                f"--out {out} holds {path.name}, which is not a part of this run: it {why}. "
                "Files of two runs are not mixed: give an empty --out, or delete that run's "
                "files from it"
            )
        kept[first] = len(rows)
    return kept


def _difference(
    path: Path,
    first: int,
    rows: Sequence[Record],
    batch_size: int,
    total: int,
    info: PipelineInfo,
    columns: Mapping[str, pa.DataType],
) -> str | None:
    """What makes a part in `out` another run's than this one (None: it is this one's)."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        return f"is no Parquet file pyarrow can read ({exc})"
    header = read_header(schema) or {}
    part = header.get("part")
    if not isinstance(part, dict):
        return "records no rows of an input (not written by this version of probembed embed)"
    theirs = header["pipeline"]
    if theirs["fingerprint"] != info.fingerprint:
        return (
            f"was written by pipeline {theirs['name']!r} (fingerprint "
            f"{theirs['fingerprint'][:12]}), this run embeds with {info.name!r} "
            f"({info.fingerprint[:12]})"
        )
    if first % batch_size or first >= total:
        return (
            f"holds rows from {first}, where no part of this run starts: this input has "
            f"{total} rows in parts of {batch_size} (another input, or another --batch-size)"
        )
    ids = pq.read_table(path, columns=["id"]).column("id").to_pylist()
    want = [r.id for r in rows]
    if ids != want:
        at = next((i for i, (a, b) in enumerate(zip(ids, want, strict=False)) if a != b), None)
        if at is None:
            return (
                f"holds {len(ids)} rows where this run's part from row {first} holds "
                f"{len(want)} (another input, or another --batch-size)"
            )
        return (
            f"holds id {ids[at]!r} where row {first + at} of this input is {want[at]!r} "
            "(another input, or other --batch-size or --chunk settings)"
        )
    if part.get("digest") != rows_digest(rows):
        return (
            f"holds the ids of rows {first} to {first + len(rows) - 1} of this input with "
            "other texts or metadata (the input changed since it was written)"
        )
    have = {f.name: str(f.type) for f in schema if f.name not in COLUMNS}
    given = {name: str(kind) for name, kind in columns.items() if kind != NOT_A_COLUMN}
    if have != given:
        return (
            f"has the metadata columns {have} where this input gives {given} (the input "
            "changed since it was written)"
        )
    return None


def _first_row(name: str) -> int | None:
    """The first row of a part by its file name, or None for a name no part has."""
    match = _PART.fullmatch(name)
    if match is None or part_name(int(match[1])) != name:
        return None
    return int(match[1])


def check_out(out: Path) -> None:
    """Refuse an output that is a file, or a directory holding anything but parts (a re-run
    checks which it keeps) and hidden files: a reader takes every other file in it for a
    part of the table."""
    if not out.exists():
        return
    if not out.is_dir():
        raise StoreError(f"--out {out} is a file: give a new or empty directory")
    others = sorted(
        p.name
        for p in out.iterdir()
        if not p.name.startswith(".") and (_first_row(p.name) is None or not p.is_file())
    )
    if others:
        more = f" and {len(others) - 1} more" if others[1:] else ""
        raise StoreError(
            f"--out {out} holds {others[0]!r}{more}, which probembed embed does not write: "
            "give a new or empty directory (or one only an earlier run of this job wrote to, "
            "which a re-run continues)"
        )


def _make_out(out: Path) -> None:
    """Create the output directory (and its parents)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create --out directory {out}: {exc.strerror}") from exc
