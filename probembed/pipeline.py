"""A pipeline = encoders + uncertainty estimators + fusion + default score, saved as a directory.

The same object turns documents and queries into Gaussians, so index time and query time can
never drift apart. A directory holds `pipeline.json` and one sub-directory of fitted state per
model; built-in pipelines ship that directory inside the package.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from probembed import atomic
from probembed.cache import EmbeddingCache
from probembed.encoders import get_encoder
from probembed.encoders.base import validate_texts
from probembed.fusion import Fused, fuse
from probembed.gaussian import Gaussian
from probembed.progress import map_chunks
from probembed.uncertainty import Estimator, estimator_class, make_estimator

CONFIG_FILE = "pipeline.json"
FORMAT_VERSION = 1
_CHUNK = 256


@dataclass(frozen=True)
class FusionConfig:
    """How the K per-model Gaussians of a text become one (see probembed.fusion.fuse)."""

    method: str = "uec"
    mode: str = "concat"
    temperature: float = 1.0
    prior: tuple[float, ...] | None = None
    weights: tuple[float, ...] | None = None


@dataclass(frozen=True)
class ScoreConfig:
    """The similarity a pipeline's searches use unless told otherwise."""

    name: str = "uec"
    beta: float = 1.0


@dataclass(frozen=True)
class ModelSpec:
    """One member of the ensemble before fitting: an encoder and how to make it probabilistic."""

    encoder: str
    estimator: str = "laplace"
    params: dict[str, Any] = field(default_factory=dict)
    encoder_params: dict[str, Any] = field(default_factory=dict)


def builtin_dir() -> Path:
    """Folder inside the installed package that holds the shipped pipelines."""
    return Path(__file__).resolve().parent / "pipelines"


def available_pipelines() -> list[str]:
    """Names of the pipelines shipped with the package."""
    root = builtin_dir()
    return sorted(p.name for p in root.iterdir() if (p / CONFIG_FILE).is_file())


class Pipeline:
    """Texts in, fused Gaussians out, with an embedding cache under every model."""

    def __init__(
        self,
        members: Sequence[Estimator],
        fusion: FusionConfig | None = None,
        score: ScoreConfig | None = None,
        name: str = "custom",
        cache: EmbeddingCache | bool = True,
    ) -> None:
        if not members:
            raise ValueError("a pipeline needs at least one model")
        self.members = list(members)
        self.fusion = fusion or FusionConfig()
        self.score = score or ScoreConfig()
        self.name = name
        self.cache = EmbeddingCache() if cache is True else (cache or None)

    @property
    def models(self) -> tuple[str, ...]:
        """Unique labels of the member models, in fusion order: the name, plus params if shared."""
        names = [m.encoder.name for m in self.members]
        return tuple(
            _label(m.encoder.name, m.encoder.params)
            if names.count(m.encoder.name) > 1
            else m.encoder.name
            for m in self.members
        )

    @property
    def fingerprint(self) -> str:
        """Identifies what vectors this pipeline makes: stores refuse vectors from another."""
        digest = hashlib.sha256()
        for member in self.members:
            digest.update(member.fingerprint.encode())
        digest.update(json.dumps(asdict(self.fusion), sort_keys=True).encode())
        return digest.hexdigest()[:16]

    @classmethod
    def fit(
        cls,
        specs: Sequence[ModelSpec],
        pairs: Sequence[tuple[str, str]],
        fusion: FusionConfig | None = None,
        score: ScoreConfig | None = None,
        name: str = "custom",
        cache: EmbeddingCache | bool = True,
        progress: bool = False,
    ) -> Pipeline:
        """Fit each member's estimator on the same positive pairs."""
        members = []
        for spec in specs:
            encoder = get_encoder(spec.encoder, **spec.encoder_params)
            estimator = make_estimator(spec.estimator, encoder, **spec.params)
            members.append(estimator.fit(pairs, progress=progress))
        return cls(members, fusion, score, name, cache)

    def with_fusion(self, fusion: FusionConfig) -> Pipeline:
        """The same fitted members under another fusion (shares the cache)."""
        return Pipeline(self.members, fusion, self.score, self.name, self.cache or False)

    def encode_members(self, texts: Sequence[str], progress: bool = False) -> list[Gaussian]:
        """Each member's Gaussians for the texts, read from the cache where possible."""
        texts = validate_texts(texts)
        return [self._encode_member(m, texts, progress) for m in self.members]

    def fuse(self, parts: Sequence[Gaussian]) -> Fused:
        """Combine per-member Gaussians with this pipeline's fusion settings."""
        f = self.fusion
        return fuse(
            parts,
            self.models,
            method=f.method,
            mode=f.mode,
            temperature=f.temperature,
            prior=f.prior,
            weights=f.weights,
        )

    def encode(self, texts: Sequence[str], progress: bool = False) -> Fused:
        """One fused Gaussian per text, with the per-model weights that made it."""
        return self.fuse(self.encode_members(texts, progress))

    def _encode_member(self, member: Estimator, texts: list[str], progress: bool) -> Gaussian:
        """Encode what the cache lacks in chunks (with a progress bar) and store it."""
        key = member.fingerprint
        if self.cache is None:
            found, cached = [False] * len(texts), None
        else:
            found, cached = self.cache.get(key, texts)
        missing = [t for t, hit in zip(texts, found, strict=True) if not hit]

        def encode_and_store(chunk: list[str]) -> Gaussian:
            gaussian = member.encode(chunk)
            if self.cache is not None:
                self.cache.put(key, chunk, gaussian)
            return gaussian

        label = f"{member.encoder.name} ({member.kind})"
        fresh = map_chunks(encode_and_store, missing, label, progress, _CHUNK)
        return _merge(found, cached, fresh)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the config and each member's fitted state; replaces an existing pipeline."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        models_dir = directory / "models"
        if models_dir.exists():
            shutil.rmtree(models_dir)
        entries = []
        for i, member in enumerate(self.members):
            sub = f"models/{i}-{Path(member.encoder.name).name}"
            member.save(directory / sub)
            entries.append(
                {
                    "encoder": member.encoder.name,
                    "encoder_params": member.encoder.params,
                    "estimator": member.kind,
                    "dir": sub,
                }
            )
        config = {
            "format": FORMAT_VERSION,
            "name": self.name,
            "models": entries,
            "fusion": _fusion_to_json(self.fusion),
            "score": asdict(self.score),
        }
        text = json.dumps(config, indent=2, allow_nan=False)
        atomic.write_bytes(directory / CONFIG_FILE, text.encode())
        return directory

    @classmethod
    def load(cls, name_or_dir: str | os.PathLike, cache: EmbeddingCache | bool = True) -> Pipeline:
        """Load a pipeline directory, or a built-in by name (see `available_pipelines`)."""
        directory = _resolve(name_or_dir)
        config = _read_config(directory)
        members = []
        for entry in config["models"]:
            encoder = get_encoder(entry["encoder"], **entry.get("encoder_params", {}))
            kind = estimator_class(entry["estimator"])
            members.append(kind.load(directory / entry["dir"], encoder))
        fusion = _fusion_from_json(config.get("fusion", {}))
        score = ScoreConfig(**config.get("score", {}))
        return cls(members, fusion, score, config.get("name", directory.name), cache)

    def __repr__(self) -> str:
        return f"Pipeline(name={self.name!r}, models={self.models}, fusion={self.fusion.method!r})"


def _label(name: str, params: dict[str, object]) -> str:
    """A model label that tells apart two members sharing an encoder name."""
    return name + "(" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + ")"


def _merge(found: Sequence[bool], cached: Gaussian | None, fresh: list[Gaussian]) -> Gaussian:
    """Interleave cached and freshly encoded rows back into input order."""
    found = np.asarray(found, dtype=bool)
    if cached is not None and not fresh:
        return cached
    new = Gaussian.concat(fresh)
    if cached is None:
        return new
    mean = np.empty((len(found), new.dim), dtype=np.float32)
    var = np.empty_like(mean)
    mean[found], var[found] = cached.mean, cached.var
    mean[~found], var[~found] = new.mean, new.var
    return Gaussian(mean, var)


def _resolve(name_or_dir: str | os.PathLike) -> Path:
    """A path that exists wins; otherwise a built-in name; otherwise a helpful error."""
    path = Path(name_or_dir)
    if path.is_dir():
        return path
    builtin = builtin_dir() / str(name_or_dir)
    if (builtin / CONFIG_FILE).is_file():
        return builtin
    raise ValueError(
        f"no pipeline {str(name_or_dir)!r}: not a directory, and not a built-in "
        f"(built-ins: {available_pipelines()}); make one with `probembed fit`"
    )


def _read_config(directory: Path) -> dict[str, Any]:
    """Parse and check pipeline.json, naming the directory and the problem on failure."""
    path = directory / CONFIG_FILE
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"{directory} is not a pipeline directory: {CONFIG_FILE} is missing"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is corrupted: {exc}") from exc
    if config.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path} has format {config.get('format')!r}; expected {FORMAT_VERSION}")
    models = config.get("models")
    if not isinstance(models, list) or not models:
        raise ValueError(f"{path} lists no models")
    for entry in models:
        if not {"encoder", "estimator", "dir"} <= set(entry):
            raise ValueError(f"{path}: model entry {entry} needs encoder, estimator and dir")
    return config


def _fusion_to_json(fusion: FusionConfig) -> dict[str, Any]:
    """Strict JSON: an infinite temperature (uniform weights) is written as the string "inf"."""
    data = asdict(fusion)
    if math.isinf(fusion.temperature):
        data["temperature"] = "inf"
    return data


def _fusion_from_json(data: dict[str, Any]) -> FusionConfig:
    """JSON lists back to the tuples FusionConfig holds, and "inf" back to a float."""
    tuples = {k: tuple(v) for k, v in data.items() if k in ("prior", "weights") and v is not None}
    plain = {**data, "prior": None, "weights": None}
    plain["temperature"] = float(data.get("temperature", FusionConfig.temperature))
    return replace(FusionConfig(**plain), **tuples)
