"""A pipeline directory on disk: finding one (a path or a built-in name), reading and checking
its `pipeline.json`, the splits its settings were tuned on (`tuning.json`), and where one may
be saved. No model is loaded here: a server or a job refuses a wrong pipeline before it starts.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, cast

from probembed import atomic
from probembed.paths import home_expanded
from probembed.pipeline_config import AdaptConfig, FusionConfig, ScoreConfig
from probembed.uncertainty import estimator_class

CONFIG_FILE = "pipeline.json"
#: The labelled splits that chose a pipeline's settings, beside its config (absent: none known).
TUNING_FILE = "tuning.json"
FORMAT_VERSION = 1


def builtin_dir() -> Path:
    """Folder inside the installed package that holds the shipped pipelines."""
    return Path(__file__).resolve().parent / "pipelines"


def available_pipelines() -> list[str]:
    """Names of the pipelines shipped with the package."""
    root = builtin_dir()
    return sorted(p.name for p in root.iterdir() if (p / CONFIG_FILE).is_file())


def read_tuning(directory: Path) -> tuple[str, ...]:
    """The splits a pipeline directory's settings were tuned on (none recorded: ())."""
    path = directory / TUNING_FILE
    if not path.is_file():
        return ()
    entries = json.loads(path.read_text(encoding="utf-8")).get("tuned_on")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ValueError(f"{path}: 'tuned_on' must be a list of \"dataset/path:split\" strings")
    return tuple(entries)


def write_tuning(directory: Path, tuned_on: Sequence[str]) -> None:
    """Record the splits a pipeline directory's settings were tuned on, in order, once each."""
    record = json.dumps({"tuned_on": list(dict.fromkeys(tuned_on))}, indent=2)
    atomic.write_bytes(directory / TUNING_FILE, record.encode())


def check_save_target(directory: Path) -> None:
    """Saving replaces the whole directory: refuse one that holds anything but a pipeline
    (a caller about to fit checks first, so a long fit is not lost to a bad --out)."""
    if directory.is_dir() and any(directory.iterdir()) and not (directory / CONFIG_FILE).is_file():
        raise ValueError(
            f"cannot save a pipeline to {directory}: it is not empty and holds no "
            f"{CONFIG_FILE}; choose a new or empty directory"
        )
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"cannot save a pipeline to {directory}: it is a file")
    ancestor = directory.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"cannot save a pipeline to {directory}: {ancestor} is a file")


def find_pipeline(name_or_dir: str | os.PathLike) -> Path:
    """The directory of a pipeline, its pipeline.json checked, without loading a model: a
    server or a job refuses a wrong name at once rather than after it has started."""
    directory = resolve_pipeline(name_or_dir)
    read_config(directory)
    return directory


def pipeline_name(name_or_dir: str | os.PathLike) -> str:
    """The name a pipeline loads under, read from its pipeline.json without loading a model:
    a server states the pipelines it serves in its schema before they have loaded."""
    directory = resolve_pipeline(name_or_dir)
    return str(read_config(directory).get("name", directory.name))


def resolve_pipeline(name_or_dir: str | os.PathLike) -> Path:
    """A pipeline directory wins; otherwise a built-in name; otherwise a helpful error (a
    directory without a pipeline is reported when no built-in has its name)."""
    if not str(name_or_dir).strip():  # Path("") is the working directory
        raise ValueError(
            f"no pipeline {str(name_or_dir)!r}: give a built-in name ({available_pipelines()}) "
            "or a pipeline directory"
        )
    path = home_expanded(name_or_dir, "pipeline directory")
    builtin = builtin_dir() / str(name_or_dir)
    if path.is_dir() and ((path / CONFIG_FILE).exists() or not (builtin / CONFIG_FILE).is_file()):
        return path
    if (builtin / CONFIG_FILE).is_file():
        return builtin
    known = available_pipelines()
    near = difflib.get_close_matches(str(name_or_dir), known, n=1, cutoff=0.75)
    guess = f"did you mean {near[0]!r}? " if near else ""  # `retreival`, `defualt`
    raise ValueError(
        f"no pipeline {str(name_or_dir)!r}: not a directory, and not a built-in; {guess}"
        f"(built-ins: {known}); make one with `probembed fit`"
    )


def read_config(directory: Path) -> dict[str, Any]:
    """Parse and check pipeline.json, naming the directory and the problem on failure."""
    path = directory / CONFIG_FILE
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"{directory} is not a pipeline directory: {CONFIG_FILE} is missing"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # not JSON, or not UTF-8
        raise ValueError(f"{path} is corrupted: {exc}") from exc
    _check_keys(path, "the top level", config, _TOP_KEYS)
    if config.get("format") != FORMAT_VERSION or isinstance(config.get("format"), bool):
        raise ValueError(f"{path} has format {config.get('format')!r}; expected {FORMAT_VERSION}")
    models = config.get("models")
    if not isinstance(models, list) or not models:
        raise ValueError(f"{path} lists no models")
    for i, entry in enumerate(models):
        _check_keys(path, f"models[{i}]", entry, _MODEL_KEYS)
        if not {"encoder", "estimator", "dir"} <= set(entry):
            raise ValueError(f"{path}: model entry {entry} needs encoder, estimator and dir")
        for key in ("encoder", "estimator"):  # dir: `_inside` below says what it must be
            if not isinstance(entry[key], str):
                raise ValueError(f"{path}: models[{i}].{key} must be a string, got {entry[key]!r}")
        try:
            estimator_class(entry["estimator"])
        except ValueError as exc:
            raise ValueError(f"{path}: models[{i}]: {exc}") from exc
        if not isinstance(entry.get("encoder_params", {}), dict):
            raise ValueError(f"{path}: models[{i}].encoder_params must be a JSON object")
        if not _inside(directory, entry["dir"]):
            raise ValueError(
                f"{path}: models[{i}].dir must name a sub-directory of {directory}, "
                f"got {entry['dir']!r}"
            )
    _check_keys(path, '"fusion"', config.get("fusion", {}), _field_names(FusionConfig))
    _check_keys(path, '"score"', config.get("score", {}), _field_names(ScoreConfig))
    _check_keys(path, '"adapt"', config.get("adapt", {}), _field_names(AdaptConfig))
    if not isinstance(config.get("name", ""), str):
        raise ValueError(f"{path}: name must be a string, got {config['name']!r}")
    try:  # the values too, so a server refuses a bad one before it starts, not when loading
        FusionConfig(**config.get("fusion", {}))
        ScoreConfig(**config.get("score", {}))
        AdaptConfig(**config.get("adapt", {}))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    return config


def _inside(directory: Path, sub: object) -> bool:
    """Whether `sub` names a folder within the pipeline directory: a shared pipeline must not
    make its loader read state from elsewhere on the machine."""
    if not isinstance(sub, str) or not sub:
        return False
    root = directory.resolve()
    target = (root / sub).resolve()
    return target != root and target.is_relative_to(root)


_TOP_KEYS = ("format", "name", "models", "fusion", "score", "adapt")
_MODEL_KEYS = ("encoder", "encoder_params", "estimator", "dir")


def _field_names(config: type) -> tuple[str, ...]:
    """The keys a config dataclass takes, as pipeline.json may spell them."""
    return tuple(f.name for f in fields(config))


def _check_keys(path: Path, where: str, data: object, allowed: Sequence[str]) -> None:
    """An object with only known keys, or an error naming the file, the key and the allowed."""
    if not isinstance(data, dict):
        raise ValueError(f"{path}: {where} must be a JSON object, got {type(data).__name__}")
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise ValueError(
            f"{path}: unknown key {unknown[0]!r} in {where}; allowed keys: {', '.join(allowed)}"
        )


def fusion_to_json(fusion: FusionConfig) -> dict[str, Any]:
    """Strict JSON: an infinite temperature (weights = the prior) is written as the string "inf"."""
    data = asdict(fusion)
    if math.isinf(cast(float, fusion.temperature)):  # never None once made (__post_init__)
        data["temperature"] = "inf"
    return data
