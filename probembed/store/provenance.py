"""Which pipeline made a collection: a copy kept beside the table, loaded back for search.

At its first write through `ingest` (or `Collection.record_pipeline`) a collection keeps a copy
of its pipeline, written by `Pipeline.save` into `<db>/.probembed/<collection>/pipeline/`: the
config and the fitted state of every model (a few MB for `default`; the encoders' weights stay
in their packages). So search needs no pipeline argument, a custom pipeline directory may move or
vanish, and a later release whose built-in of the same name changed cannot silently encode
queries for vectors it did not make. A loaded copy must have the fingerprint recorded in the
table's schema, else it is refused. A collection with no copy (its rows written by
`Collection.add` alone) falls back to the built-in pipeline of the recorded name, under the same
fingerprint check.

`CollectionPipeline`, the part of a `Collection` that keeps the copy, refuses a pipeline of
other vectors (`check_pipeline`) or of other settings (`check_settings`) and loads the one
searches run on (`load_pipeline`, or one lent to it: `use_pipeline`); a copy replaced for
other settings (`record_pipeline(replace=True)`) is marked by a commit of the table's schema
metadata (`rows.SETTINGS_MARK`), which every handle's next look at the header reads.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from probembed.pipeline import CONFIG_FILE, Pipeline, available_pipelines
from probembed.store import shared_writes
from probembed.store.errors import PipelineMismatchError, StoreStateError, disk_refusals
from probembed.store.handle import PIPELINE_DIR, CollectionHandle
from probembed.store.rows import SETTINGS_MARK, PipelineInfo
from probembed.store.threads import one_at_a_time


def has_copy(directory: Path) -> bool:
    """Whether a pipeline copy is kept in this directory."""
    return (directory / CONFIG_FILE).is_file()


def load_recorded(directory: Path, info: PipelineInfo, collection: str) -> Pipeline:
    """The kept copy, else the built-in named in `info`; refused unless its fingerprint matches."""
    if has_copy(directory):
        source = f"the pipeline copy kept at {directory}"
        pipeline = _load(directory, source)
    elif info.name in available_pipelines():
        source = f"the built-in pipeline {info.name!r}"
        pipeline = _load(info.name, source)
    else:
        raise StoreStateError(
            f"collection {collection!r} was made by pipeline {info.name!r} (fingerprint "
            f"{info.fingerprint}), which is not a built-in, and no copy of it is kept at "
            f"{directory}; record it once with collection.record_pipeline(Pipeline.load(DIR)), "
            "or re-run `probembed ingest` with `--pipeline DIR` (it adds nothing twice)"
        )
    if not pipeline.made(info.fingerprint):
        raise PipelineMismatchError(
            f"collection {collection!r} holds vectors of pipeline {info.name!r} (fingerprint "
            f"{info.fingerprint}), but {source} has fingerprint {pipeline.fingerprint}"
            f"{_changed_models(pipeline)}: it would encode queries differently from the "
            "stored vectors; re-ingest the collection with the pipeline you want to search "
            "with"
        )
    return pipeline


def _changed_models(pipeline: Pipeline) -> str:
    """Which members' models are not those the copy was saved with (a local folder's files
    changed, a package upgraded), named with their folders; "" when the copy does not say."""
    changed = [
        member.encoder
        for member in pipeline.members
        if member.saved_encoder_fingerprint not in (None, member.encoder.fingerprint)
    ]
    if not changed:
        return ""
    said = [
        f"member {encoder.name!r}: "
        + (
            f"the files of its model folder {encoder.folder}, or the packages that run it"
            if encoder.folder is not None
            else "its model, or the packages that run it"
        )
        for encoder in changed
    ]
    return f" (changed since the collection was made: {'; '.join(said)})"


def _load(name_or_dir: str | Path, source: str) -> Pipeline:
    """Pipeline.load with its failures (corrupt files, a missing optional encoder) named."""
    try:
        return Pipeline.load(name_or_dir)
    except (ValueError, ImportError, OSError) as exc:
        raise StoreStateError(f"cannot load {source}: {exc}") from exc


def _refitted(mine: PipelineInfo, other: PipelineInfo) -> str:
    """Why a pipeline of the same models cannot take over a collection (what `probembed tune`
    gives once it moves the prior weights or T), and what can; "" for other models."""
    if mine.models != other.models:
        return ""
    return (
        f". {other.name!r} has the same models, fused with other weights (or fitted "
        "otherwise): its vectors are not the stored ones, and every item would be encoded "
        "again, into another collection (or this one dropped first); "
        "collection.record_pipeline(pipeline, replace=True) takes over only a score, "
        "adaptation or calibrator, which leave the vectors as they are"
    )


def _settings_refused(name: str, pipeline: Pipeline, changes: list[str]) -> PipelineMismatchError:
    """Why a collection refuses a pipeline of its vectors with other settings, and the ways out."""
    return PipelineMismatchError(
        f"collection {name!r} keeps its pipeline's score, adaptation and calibrator, and "
        f"pipeline {pipeline.name!r} (the same vectors: fingerprint {pipeline.fingerprint}) "
        f"changes them: {'; '.join(changes)}. Searches of the collection answer with the kept "
        "ones; to make the given ones the collection's for every reader (nothing is encoded "
        "again, and its other users' scores change), replace its copy: "
        "collection.record_pipeline(pipeline, replace=True); else leave the pipeline out to "
        "write with the collection's own"
    )


class CollectionPipeline(CollectionHandle):
    """The pipeline a collection's vectors were made with, kept beside it and checked."""

    def record_pipeline(self, pipeline: Pipeline, replace: bool = False) -> list[str]:
        """Keep a copy of the pipeline that writes (or wrote) this collection, for search to load.

        `ingest` calls it before writing; call it yourself after writing batches with `add` or
        `upsert` alone. The copy is written before the first commit (and replaced then, should
        an earlier first write have failed), or where an existing collection has none. A
        pipeline of the collection's vectors whose score, adaptation or calibrator differ from
        the kept copy's (`probembed tune` of the same members) is refused
        (`check_settings`), unless `replace`: then it becomes the kept copy (no vector is
        encoded again), which every search takes from then on, in this process and in any
        other that holds the collection open (a running service: a commit marks the change).
        Returns what a replaced copy's settings changed, in words ([] if nothing was replaced).
        """
        self.check_pipeline(PipelineInfo.of(pipeline))
        self.db.require_writable()
        location = self.db.location
        kept = self.exists and location.has_file(self.name, f"{PIPELINE_DIR}/{CONFIG_FILE}")
        if kept:  # this machine's mirror may be missing, or an earlier collection's of the name
            location.fetch(self.name, PIPELINE_DIR)
        compared = kept and (replace or not self._holds(pipeline))
        changes = self._changes_to_copy(pipeline) if compared else []
        if changes and not replace:
            raise _settings_refused(self.name, pipeline, changes)
        if not kept or changes:
            with disk_refusals(self.name, self.pipeline_dir):  # a full disk: a raw OSError
                pipeline.save(self.pipeline_dir)  # swapped in whole: never half a copy
            location.publish(self.name, PIPELINE_DIR, CONFIG_FILE)
            if changes:
                self._mark_replaced()
            self._pipeline, self._shares = None, None  # searches take the new copy's settings
        self._share(pipeline)
        return changes

    @one_at_a_time
    def _mark_replaced(self) -> None:
        """Commit a new settings mark: a service or another process holding the collection
        open kept searching with the settings it had loaded until it reopened it."""
        table = self._require()
        marked = {"path": "id", "metadata": {SETTINGS_MARK: uuid.uuid4().hex}}
        outcome = "the pipeline copy was replaced; processes holding it open keep the old one"
        with self._writing():  # a write of this machine prepared beside it would conflict
            shared_writes.committed(lambda: table.update_field_metadata(marked), outcome)
        self._header(reopen=True)

    def check_settings(self, pipeline: Pipeline) -> None:
        """Refuse (PipelineMismatchError) a write given a pipeline whose score, adaptation or
        calibrator differ from the kept copy's, before it reads anything: kept silently, a
        tuned pipeline's were ignored by every search. One lent to the collection
        (`use_pipeline`) answers with the copy's by design, and passes."""
        if self._holds(pipeline) or not self.exists:
            return
        self.db.location.fetch(self.name, PIPELINE_DIR)
        changes = self._changes_to_copy(pipeline)
        if changes:
            raise _settings_refused(self.name, pipeline, changes)

    def _changes_to_copy(self, pipeline: Pipeline) -> list[str]:
        """How `pipeline`'s settings differ from the (fetched) kept copy's; [] without one."""
        if not has_copy(self.pipeline_dir):
            return []
        return pipeline.with_settings_of(self.pipeline_dir).setting_changes(pipeline)

    def use_pipeline(self, pipeline: Pipeline) -> None:
        """Search with a pipeline already in memory instead of loading the kept copy.

        A service that serves the same pipeline for embeddings shares its models this way;
        refused (PipelineMismatchError) unless it is the pipeline that made the vectors. The
        score, adaptation and calibrator stay the kept copy's (they are not in the
        fingerprint), so every front door answers a collection alike.
        """
        self.check_pipeline(PipelineInfo.of(pipeline))
        if not self._holds(pipeline):
            self.db.location.fetch(self.name, PIPELINE_DIR)
            self._share(pipeline)

    def _holds(self, pipeline: Pipeline) -> bool:
        """Whether searches run on `pipeline` already, or on its models with the copy's settings."""
        held = None if self._pipeline is None else self._pipeline[0]
        return pipeline is held or pipeline is self._shares

    def _share(self, pipeline: Pipeline) -> None:
        """Hold `pipeline`'s models under the kept copy's settings (itself if none is kept)."""
        if self._holds(pipeline):
            return
        own = (
            pipeline.with_settings_of(self.pipeline_dir)
            if has_copy(self.pipeline_dir)
            else pipeline
        )
        self._pipeline, self._shares = (own, own.fingerprint), pipeline

    def load_pipeline(self) -> Pipeline:
        """The pipeline that made the stored vectors, to encode queries exactly as they were.

        The one in memory, else the kept copy, else the built-in of the recorded name; refused
        (PipelineMismatchError) unless its fingerprint is the one recorded in the table.
        """
        info = self.pipeline
        if self._pipeline is None or self._pipeline[1] != info.fingerprint:
            self.db.location.fetch(self.name, PIPELINE_DIR)
            pipeline = load_recorded(self.pipeline_dir, info, self.name)
            self._pipeline, self._shares = (pipeline, info.fingerprint), None
        return self._pipeline[0]

    def check_pipeline(self, pipeline: PipelineInfo) -> None:
        """Refuse a pipeline other than the one that made this collection's vectors."""
        if not self.exists:
            return
        mine = self.pipeline
        if not pipeline.made(mine.fingerprint):
            raise PipelineMismatchError(
                f"collection {self.name!r} holds vectors of pipeline {mine.name!r} "
                f"(models {', '.join(mine.models)}, fingerprint {mine.fingerprint}), not of "
                f"{pipeline.name!r} (fingerprint {pipeline.fingerprint}); use that pipeline "
                f"or another collection{_refitted(mine, pipeline)}"
            )
