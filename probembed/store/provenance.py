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
"""

from __future__ import annotations

from pathlib import Path

from probembed.pipeline import CONFIG_FILE, Pipeline, available_pipelines
from probembed.store.errors import PipelineMismatchError, StoreStateError
from probembed.store.rows import PipelineInfo

#: Name of the kept copy inside a collection's derived directory.
PIPELINE_DIR = "pipeline"


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
    if pipeline.fingerprint != info.fingerprint:
        raise PipelineMismatchError(
            f"collection {collection!r} holds vectors of pipeline {info.name!r} (fingerprint "
            f"{info.fingerprint}), but {source} has fingerprint {pipeline.fingerprint}: it "
            "would encode queries differently from the stored vectors; re-ingest the "
            "collection with the pipeline you want to search with"
        )
    return pipeline


def _load(name_or_dir: str | Path, source: str) -> Pipeline:
    """Pipeline.load with its failures (corrupt files, a missing optional encoder) named."""
    try:
        return Pipeline.load(name_or_dir)
    except (ValueError, ImportError, OSError) as exc:
        raise StoreStateError(f"cannot load {source}: {exc}") from exc
