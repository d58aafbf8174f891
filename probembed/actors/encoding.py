"""A pipeline sent to another process as its files: what a Ray actor loads and encodes with.

`pipeline_files` is the sender's side (the files `Pipeline.save` writes, a few MB: configs
and fitted states; the encoders' weights come with their packages on every node) and
`Embedder` the actor's.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

#: Prefix of the temporary folder an actor writes its pipeline to, to load it.
ACTOR_DIR_PREFIX = "probembed-actor-"
#: Age past which such a folder is an actor's that died loading (a killed job: Ray kills its
#: actors without running their cleanup) and the next actor on the node removes it. A folder
#: lives only while a pipeline loads, seconds to a minute; an hour leaves ample room.
STALE_ACTOR_DIR_SECONDS = 3600.0


def pipeline_files(pipeline: Any) -> dict[str, bytes]:
    """The files `Pipeline.save` writes, by relative path: what an actor needs to load it."""
    with tempfile.TemporaryDirectory(prefix="probembed-pipeline-") as tmp:
        root = pipeline.save(Path(tmp) / "pipeline")
        return {
            p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
        }


def remove_stale_actor_dirs(parent: Path, max_age: float = STALE_ACTOR_DIR_SECONDS) -> None:
    """Remove the pipeline folders of actors killed while loading, once older than max_age
    (what another user's folder refuses, or another actor removed first, is left)."""
    now = time.time()
    for folder in parent.glob(f"{ACTOR_DIR_PREFIX}*"):
        with contextlib.suppress(OSError):
            if folder.is_dir() and now - folder.stat().st_mtime > max_age:
                shutil.rmtree(folder)


class Embedder:
    """A Ray actor's encoder: loads the pipeline once, then embeds batch after batch."""

    def __init__(self, files: dict[str, bytes], fingerprint: str, counter: Any = None) -> None:
        from probembed.pipeline import Pipeline

        self._counter = counter  # the job's `EncodedCount` actor, if its progress is shown

        # Loading reads every file into memory, so the folder goes at once: Ray ends an actor
        # without running finalizers, and a folder kept for the actor's life stayed behind.
        # An actor killed while it loads still leaves its folder: the next one sweeps it.
        remove_stale_actor_dirs(Path(tempfile.gettempdir()))
        with tempfile.TemporaryDirectory(prefix=ACTOR_DIR_PREFIX) as tmp:
            root = Path(tmp)
            for name, data in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(data)
            self.pipeline = Pipeline.load(root, cache=False)
        if self.pipeline.fingerprint != fingerprint:  # a node whose encoders differ
            raise RuntimeError(
                f"this node loads the pipeline with fingerprint {self.pipeline.fingerprint}, "
                f"not {fingerprint}: its installed encoders differ from the driver's"
            )

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Per row (one ingest batch's texts the driver's cache lacks), each member's means
        and variances of the texts marked for it, as float32 bytes (empty for none)."""
        means: list[list[bytes]] = []
        variances: list[list[bytes]] = []
        for start, texts, lacking in zip(
            batch.column("start").to_pylist(),
            batch.column("texts").to_pylist(),
            batch.column("lacking").to_pylist(),
            strict=True,
        ):
            marks = np.asarray(lacking, dtype=bool).reshape(len(texts), -1)
            told = None if self._counter is None else functools.partial(self._encoded, start)
            parts = self.pipeline.encode_lacking(texts, marks, told)
            means.append([b"" if e is None else e.gaussian.mean.tobytes() for e in parts])
            variances.append([b"" if e is None else e.gaussian.var.tobytes() for e in parts])
        return pa.table(
            {
                "start": batch.column("start"),
                "mean": pa.array(means, pa.list_(pa.binary())),
                "var": pa.array(variances, pa.list_(pa.binary())),
            }
        )

    def _encoded(self, start: int, units: int) -> None:
        """Tell the job's counter `units` more member-texts of the batch at `start` encoded,
        without waiting for it: the bar is only a view, and the driver tells each batch's
        rest as it is fused, so a lost counter costs the bar, not the batch."""
        if units:
            self._counter.add.remote(start, units)
