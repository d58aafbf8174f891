"""Gaussians for another vector database: a corpus embedded into Parquet files, one per batch.

The input is read and checked as ingest reads it (`probembed.store.ingest.read_checked`), so
with `on_error="stop"` a bad line writes nothing. Each batch becomes one file
`part-<first row>.parquet` with columns id, mean, var, weights in the collections' own types
(float32 fixed-size lists) and the collections' pipeline header in the schema metadata; each is
written to a temporary name and renamed into place, so a killed job leaves whole files only.
The embedding runs here, or on Ray actors (`probembed.store.ray_ingest.embed_on_ray`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from probembed import atomic
from probembed.fusion import Fused
from probembed.progress import progress_bar
from probembed.store.errors import StoreError
from probembed.store.ingest import DEFAULT_BATCH, OnError, read_checked, validate_options
from probembed.store.readers import (
    TEXT_SUFFIXES,
    Problem,
    Record,
    Unread,
    read_records,
    unread_files,
    unread_note,
)
from probembed.store.rows import Batch, PipelineInfo, table_schema, to_arrow

#: The columns written: what a vector database needs of each row.
COLUMNS = ("id", "mean", "var", "weights")


@dataclass
class EmbedReport:
    """What an embedding job wrote, and the input it skipped."""

    source: str
    out: Path
    rows: int = 0
    files: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: Files of a folder source that no reader takes, by suffix (`readers.unread_files`).
    unread: Unread = field(default_factory=Unread)

    def summary(self) -> str:
        """One line for a person."""
        return (
            f"{self.source}: wrote {self.rows} Gaussians in {self.files} Parquet file(s) to "
            f"{self.out}, skipped {len(self.problems)} bad item(s)"
            f"{unread_note(self.unread, TEXT_SUFFIXES, '`probembed ingest --chunk` (not embed)')}"
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
) -> EmbedReport:
    """Embed a JSONL file, BEIR folder or text folder into Parquet files under `out`.

    `out` must be absent or empty: files of two runs (or two pipelines) never mix. With
    `use_ray`, `workers` actors embed, each reserving `cpus_per_worker` and `gpus_per_worker`.
    """
    validate_options(batch_size, on_error)
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:/", str(out)):  # s3://..., which Path would mangle
        raise StoreError(
            f"--out {str(out)!r} is an object-store URI; probembed embed writes its Parquet "
            "files to a local folder (copy them to object storage afterwards)"
        )
    on_ray = None
    if use_ray:
        from probembed.store.ray_ingest import validate_workers

        validate_workers(workers, cpus_per_worker, gpus_per_worker)
        on_ray = (workers, address, cpus_per_worker, gpus_per_worker)
    out = Path(out)
    records, problems = read_input(source, on_error)
    _prepare_out(out)
    report = EmbedReport(
        str(source),
        out,
        problems=problems,
        unread=unread_files(source, TEXT_SUFFIXES),
    )
    info = PipelineInfo.of(pipeline)
    with progress_bar(f"embed {Path(source).name}", len(records), progress) as bar:
        for index, fused in _embedded(records, pipeline, batch_size, on_ray):
            _write_part(out, [records[i] for i in index], int(index.min()), fused, info)
            report.rows += len(index)
            report.files += 1
            bar.advance(len(index))
    return report


def read_input(source: str | Path, on_error: OnError) -> tuple[list[Record], list[Problem]]:
    """The input read and checked as the files keep it, which needs no model (a caller can
    refuse bad input before it loads one); under on_error="stop" a problem raises."""
    # the files hold no metadata: its types and values are no reason to refuse a document
    items = (i if isinstance(i, Problem) else replace(i, metadata={}) for i in read_records(source))
    records, problems, _ = read_checked(items, None, on_error)
    return records, problems


def _embedded(
    records: Sequence[Record],
    pipeline: Any,
    batch_size: int,
    on_ray: tuple[int, str | None, float, float] | None,
) -> Iterator[tuple[np.ndarray, Fused]]:
    """(row positions, their Gaussians) per batch: encoded here, or by Ray actors given
    (workers, address, cpus_per_worker, gpus_per_worker)."""
    texts = [r.text for r in records]
    if on_ray is None:
        for start in range(0, len(texts), batch_size):
            index = np.arange(start, min(start + batch_size, len(texts)))
            yield index, pipeline.encode(texts[start : start + batch_size])
        return
    from probembed.store.ray_ingest import embed_on_ray, ray_session

    workers, address, cpus, gpus = on_ray
    with ray_session(address):
        yield from embed_on_ray(texts, pipeline, batch_size, workers, cpus, gpus)


def _write_part(
    out: Path, chunk: list[Record], first: int, fused: Fused, info: PipelineInfo
) -> None:
    """One batch as one Parquet file, renamed into place whole."""
    batch = Batch([r.id for r in chunk], [r.text for r in chunk], [{}] * len(chunk), fused, info)
    table = to_arrow(batch, table_schema(batch, compact=False)).select(list(COLUMNS))
    with atomic.replacing(out / f"part-{first:09d}.parquet") as tmp:
        pq.write_table(table, tmp)


def check_out(out: Path) -> None:
    """Refuse an output that is a file or a directory that already holds anything."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise StoreError(f"--out {out} must be a new or empty directory")


def _prepare_out(out: Path) -> None:
    """Create the output directory, refusing one that already holds anything."""
    check_out(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create --out directory {out}: {exc.strerror}") from exc
