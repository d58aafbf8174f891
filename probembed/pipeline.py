"""A pipeline = encoders + uncertainty estimators + fusion + default score, saved as a directory.

The same object turns documents and queries into Gaussians, so index time and query time can
never drift apart. A directory holds `pipeline.json` and one sub-directory of fitted state per
model; built-in pipelines ship that directory inside the package. The settings are
`pipeline_config`'s; finding, checking and tuning records of a directory, `pipeline_directory`'s.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from probembed import atomic
from probembed.cache import EmbeddingCache
from probembed.calibration import CALIBRATION_FILE, RelevanceCalibrator
from probembed.calibration.calibrator import require_dense
from probembed.caller import warn_caller
from probembed.encoders import check_loadable, get_encoder
from probembed.encoders.base import Encoder, longer_than, token_limit, validate_texts
from probembed.encoders.scripts import UnreadScriptWarning, label, scripts_in
from probembed.fusion import Fused, member_blocks
from probembed.fusion.adapt import collection_tilt
from probembed.gaussian import Gaussian
from probembed.integrations.sentence_transformers import SentenceEncoder
from probembed.paths import home_expanded
from probembed.pipeline_config import AdaptConfig, FusionConfig, ModelSpec, ScoreConfig
from probembed.pipeline_directory import (
    CONFIG_FILE,
    FORMAT_VERSION,
    TUNING_FILE,
    available_pipelines,
    builtin_dir,
    check_save_target,
    find_pipeline,
    fusion_to_json,
    pipeline_name,
    read_config,
    read_tuning,
    resolve_pipeline,
    write_tuning,
)
from probembed.progress import map_chunks
from probembed.scoring import Similarity, similarity
from probembed.uncertainty import Estimator, estimator_class, make_estimator
from probembed.variance_basis import Verdict, hold_kept, pipeline_verdict, read_verdict

#: What `from probembed.pipeline import ...` gives: the pipeline, its settings (held in
#: `pipeline_config`) and its directories (`pipeline_directory`).
__all__ = [
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "TUNING_FILE",
    "AdaptConfig",
    "Encoded",
    "FusionConfig",
    "ModelSpec",
    "Pipeline",
    "ScoreConfig",
    "as_pipeline",
    "available_pipelines",
    "builtin_dir",
    "check_save_target",
    "find_pipeline",
    "fusion_to_json",
    "pipeline_name",
    "read_config",
    "read_tuning",
    "resolve_pipeline",
    "write_tuning",
]

_CHUNK = 256


class Encoded:
    """One member's Gaussians for some texts, made elsewhere (a Ray actor), so that encoding
    them here would be work done twice."""

    def __init__(self, texts: Sequence[str], gaussian: Gaussian) -> None:
        if len(texts) != len(gaussian):
            raise ValueError(f"{len(texts)} texts but {len(gaussian)} Gaussians")
        self.texts = list(texts)
        self.gaussian = gaussian
        self._rows = {text: row for row, text in enumerate(self.texts)}

    def take(self, texts: Sequence[str], member: Estimator) -> Gaussian:
        """The texts' rows held here, in input order; any other text encoded by the member
        (one its cache held when the work was sent out, and has let go since)."""
        held = np.array([t in self._rows for t in texts], dtype=bool)
        rows = [self._rows[t] for t in texts if t in self._rows]
        rest = [t for t, h in zip(texts, held, strict=True) if not h]
        found = self.gaussian[rows] if rows else None
        return _merge(held, found, [member.encode(rest)] if rest else [])


class Pipeline:
    """Texts in, fused Gaussians out, with an embedding cache under every model."""

    def __init__(
        self,
        members: Sequence[Estimator],
        fusion: FusionConfig | None = None,
        score: ScoreConfig | None = None,
        name: str = "custom",
        cache: EmbeddingCache | bool = True,
        calibrator: RelevanceCalibrator | None = None,
        adapt: AdaptConfig | None = None,
        tuned_on: Sequence[str] = (),
    ) -> None:
        if not members:
            raise ValueError("a pipeline needs at least one model")
        self.members = list(members)
        self.fusion = fusion or FusionConfig()
        self.score = score or ScoreConfig()
        self.name = name
        self.fusion.check(self.models)
        dims = [m.encoder.dim for m in self.members]
        if self.fusion.mode == "sum" and len(set(dims)) > 1:
            widths = ", ".join(f"{n}: {d}" for n, d in zip(self.models, dims, strict=True))
            raise ValueError(f"sum fusion needs members of one dimension, got {widths}")
        self.cache = EmbeddingCache() if cache is True else (cache or None)
        #: Hit features -> P(relevant), fitted for this fusion and score; None: no p_relevant.
        #: Not part of the fingerprint: it changes no vector.
        self.calibrator = None if calibrator is None else require_dense(calibrator)
        self.adapt = adapt or AdaptConfig()
        #: The labelled splits ("retrieval/scifact:train") its fusion, score or calibrator were
        #: chosen on: a figure measured on one of them is not held out.
        self.tuned_on = tuple(tuned_on)
        #: Whether its collections store variance coefficients, as its directory kept it
        #: (`variance_basis.BASIS_FILE`); used only where it names this fingerprint, else the
        #: one a loaded pipeline of this fingerprint kept, else fitted at first use
        #: (`variance_basis.pipeline_verdict`). Not in the fingerprint.
        self.variance_verdict: Verdict | None = None

    def tuned_on_split(self, kind: str, dataset: str, split: str) -> str | None:
        """The `tuned_on` entry naming this kind of dataset ("retrieval"), its directory name
        and split, if any."""
        for entry in self.tuned_on:
            path, _, tuned_split = entry.rpartition(":")
            parts = Path(path).parts
            if (parts[0], parts[-1], tuned_split) == (kind, dataset, split):
                return entry
        return None

    @property
    def models(self) -> tuple[str, ...]:
        """Unique labels of the member models, in fusion order: the name, plus params if shared."""
        return _labels([m.encoder for m in self.members])

    @property
    def blocks(self) -> tuple[int, ...]:
        """Each member's width in the fused rows, so members can be read back out of them; ()
        where the rows hold no block per member (`fusion.member_blocks`: sum, single)."""
        dims = [m.encoder.dim for m in self.members]
        return member_blocks(self.fusion.method, self.fusion.mode, dims)

    @property
    def fingerprint(self) -> str:
        """Identifies what vectors this pipeline makes: stores refuse vectors from another."""
        return self._fingerprint_of([member.fingerprint for member in self.members])

    def made(self, fingerprint: str) -> bool:
        """Whether vectors recorded under `fingerprint` are this pipeline's: its own, or the
        one an older release gave it (a local model folder identified by its files'
        modification times, before its contents: `Encoder.legacy_fingerprints`), so
        collections made then stay readable while their folders are untouched."""
        if fingerprint == self.fingerprint:
            return True
        choices = [(m.fingerprint, *m.legacy_fingerprints) for m in self.members]
        return any(
            self._fingerprint_of(list(chosen)) == fingerprint
            for chosen in itertools.product(*choices)
        )

    def _fingerprint_of(self, member_fingerprints: list[str]) -> str:
        """The pipeline's fingerprint from its members' and its fusion."""
        digest = hashlib.sha256()
        for member in member_fingerprints:
            digest.update(member.encode())
        digest.update(json.dumps(asdict(self.fusion), sort_keys=True).encode())
        return digest.hexdigest()[:16]

    def setting_changes(self, other: Pipeline) -> list[str]:
        """How `other`'s score, collection adaptation and calibrator (by what it computes, not
        its fit records) differ from this one's, in words: none is in the fingerprint, so a
        collection searched under one answers otherwise under the other with the very same
        vectors."""
        changes = []
        if self.score != other.score:
            mine, theirs = self.score, other.score
            changes.append(
                f"score {mine.name} beta {mine.beta:g} -> {theirs.name} beta {theirs.beta:g}"
            )
        if self.adapt != other.adapt:
            changes.append(f"adaptation gamma {self.adapt.gamma:g} -> {other.adapt.gamma:g}")
        if self.calibrator != other.calibrator:
            said = {(False, True): "none -> one", (True, False): "one -> none"}
            shift = said.get((self.calibrator is not None, other.calibrator is not None))
            changes.append(f"relevance calibrator {shift or 'one -> another'}")
        return changes

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
        estimators = []
        for spec in specs:
            encoder = get_encoder(spec.encoder, **spec.encoder_params)
            estimators.append(make_estimator(spec.estimator, encoder, **spec.params))
        labels = _labels([e.encoder for e in estimators])
        if len(set(labels)) < len(labels):  # refused before any member is fitted
            raise ValueError(
                f"model names must be unique, got {list(labels)}: one encoder with the same "
                "params can be a member only once"
            )
        members = [e.fit(pairs, progress=progress) for e in estimators]
        return cls(members, fusion, score, name, cache)

    def adapted(self, agreements: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """(w, t): a collection's weights w = softmax(log p + γ·a) and the factors t = w/p.

        a is the collection's member agreement, p this pipeline's prior. None when there is
        nothing to adapt: γ = 0, no agreement measured, or a fusion without a prior to tilt.
        """
        tiltable = self.fusion.method in ("uec", "weighted") and bool(self.blocks)
        if agreements is None or self.adapt.gamma == 0 or not tiltable:
            return None
        prior = self.fusion.prior if self.fusion.method == "uec" else self.fusion.weights
        return collection_tilt(agreements, prior, len(self.members), self.adapt.gamma)

    def with_fusion(self, fusion: FusionConfig) -> Pipeline:
        """The same fitted members under another fusion (shares the cache; no calibrator)."""
        return Pipeline(self.members, fusion, self.score, self.name, self.cache or False)

    def warn_unread(self, texts: Sequence[str]) -> None:
        """Warn, once per script, of texts in one the models holding most of the fusion's
        weight were not trained on: there scores are near chance and p_relevant, fitted on
        English, is confidently wrong (docs/cli.md#languages). Models that do not say what they
        read (`Encoder.scripts` None) count as reading it."""
        shares = self.fusion.shares(self.models)
        declared = [
            m.encoder.scripts for m, share in zip(self.members, shares, strict=True) if share > 0
        ]
        if all(reads is None for reads in declared):
            return  # nothing is known of what the models read: the texts are not scanned
        for script in sorted(scripts_in(t for t in texts if not t.isascii())):
            blind = [
                (name, share)
                for name, member, share in zip(self.models, self.members, shares, strict=True)
                if share > 0
                and member.encoder.scripts is not None
                and script not in member.encoder.scripts
            ]
            weight = sum(share for _, share in blind)
            if weight >= 0.5 - 1e-9:  # half or more, as the shares' float sum rounds it
                warn_caller(
                    f"texts mostly in {label(script)} script: pipeline {self.name!r} gives "
                    f"{weight:.0%} of its weight to models not trained on it "
                    f"({', '.join(name for name, _ in blind)}), so their scores, std and "
                    "p_relevant are not to be trusted (see docs/cli.md#languages)",
                    UnreadScriptWarning,
                )

    def encode_members(
        self,
        texts: Sequence[str],
        progress: bool = False,
        encoded: Sequence[Encoded | None] | None = None,
        advance: Callable[[int], None] | None = None,
        looked_up: Sequence[tuple[np.ndarray, Gaussian | None]] | None = None,
    ) -> list[Gaussian]:
        """Each member's Gaussians for the texts, read from the cache where possible.

        `encoded` (one entry per member, or None) holds Gaussians made elsewhere (a Ray
        actor): a text the cache lacks is taken from it, and stored, rather than encoded here.
        `looked_up` is `lookup`'s answer for these texts, made by the caller (Ray ingest's
        second look, uncounted, when the work sent out comes back): the cache is not read
        here, so its statistics count each text once.
        `advance` is told, as each piece is encoded or found in the cache, how many more
        whole texts' worth of work is done (member-texts / members; all the texts by the
        end): a caller's own bar moves while a large batch is encoded.
        """
        texts = validate_texts(texts)
        self.warn_unread(texts)
        given = encoded if encoded is not None else [None] * len(self.members)
        if len(given) != len(self.members):
            raise ValueError(f"encoded needs one entry per member ({len(self.members)})")
        found = looked_up if looked_up is not None else [None] * len(self.members)
        if len(found) != len(self.members):
            raise ValueError(f"looked_up needs one entry per member ({len(self.members)})")
        told = None if advance is None else WholeTexts(advance, len(self.members))
        return [
            self._encode_member(m, texts, progress, e, told, f)
            for m, e, f in zip(self.members, given, found, strict=True)
        ]

    def lookup(
        self, texts: Sequence[str], counted: bool = True
    ) -> list[tuple[np.ndarray, Gaussian | None]]:
        """Each member's cache lookup: which texts it holds (a bool mask; none without a
        cache) and their Gaussians, as encoding reads them: so a caller can send elsewhere
        only what encoding would encode. `counted=False` for a second look at texts whose
        first the cache's statistics counted."""
        texts = validate_texts(texts)
        return [self._cached(member, texts, counted) for member in self.members]

    def held(self, texts: Sequence[str]) -> np.ndarray:
        """Per text, whether the cache holds it for every member: read, not encoded, by the
        next encode (`EmbeddingCache.held`; all False without a cache)."""
        out = np.full(len(texts), self.cache is not None)
        if self.cache is not None:
            for member in self.members:
                out &= self.cache.held(member.fingerprint, list(texts))
        return out

    def encode_lacking(
        self,
        texts: Sequence[str],
        lacking: np.ndarray,
        advance: Callable[[int], None] | None = None,
    ) -> list[Encoded | None]:
        """Each member's Gaussians for the texts `lacking` marks in its column (None where it
        marks none), encoded in the chunks the cache's misses are: what a Ray actor makes of
        a batch whose other texts the driver's cache holds. `advance` is told the
        member-texts of each chunk as it is encoded (a Ray job's progress)."""
        texts = validate_texts(texts)
        lacking = np.asarray(lacking, dtype=bool)
        if lacking.shape != (len(texts), len(self.members)):
            raise ValueError(
                f"lacking must be (texts, members) = {(len(texts), len(self.members))}, "
                f"got {lacking.shape}"
            )
        out: list[Encoded | None] = []
        for member, column in zip(self.members, lacking.T, strict=True):
            chosen = [t for t, lacks in zip(texts, column, strict=True) if lacks]
            made = self._encode_member(member, chosen, False, advance=advance) if chosen else None
            out.append(None if made is None else Encoded(chosen, made))
        return out

    def fuse(self, parts: Sequence[Gaussian]) -> Fused:
        """Combine per-member Gaussians with this pipeline's fusion settings."""
        return self.fusion.fuse(parts, self.models)

    def encode(
        self,
        texts: Sequence[str],
        progress: bool = False,
        advance: Callable[[int], None] | None = None,
    ) -> Fused:
        """One fused Gaussian per text, with the per-model weights that made it (`advance`:
        as `encode_members` tells it)."""
        return self.fuse(self.encode_members(texts, progress, advance=advance))

    def similarity(self, a: str | Sequence[str], b: str | Sequence[str]) -> Similarity:
        """Every text of `a` against every text of `b`: float64 (len(a), len(b)) `score`, by
        this pipeline's own score and beta (what its searches score), and `std`, the std a
        search hit reports for the same pair (the members' own variances and their
        disagreement), on this pipeline's weights, not a collection's tilt of them
        (`adapted`). A str is one text; `a` is scored as the query (only `kl` differs)."""
        return self._similarity(a, b, pairwise=False)

    def similarity_pairwise(self, a: str | Sequence[str], b: str | Sequence[str]) -> Similarity:
        """Text i of `a` against text i of `b` (STS pairs): float64 (n,) `score` and `std`,
        as `similarity` gives them."""
        return self._similarity(a, b, pairwise=True)

    def similarity_of(self, a: Fused, b: Fused, pairwise: bool = False) -> Similarity:
        """`similarity` (or its pairwise form) of texts this pipeline has already fused: for a
        caller that encodes elsewhere (the service's batchers)."""
        return similarity(
            a.gaussian,
            b.gaussian,
            self.score.name,
            self.score.beta,
            a.weights,
            b.weights,
            self.blocks,
            pairwise,
        )

    def _similarity(
        self, a: str | Sequence[str], b: str | Sequence[str], pairwise: bool
    ) -> Similarity:
        """Both sides checked, encoded in one call, and scored."""
        texts_a = validate_texts([a] if isinstance(a, str) else a, "a")
        texts_b = validate_texts([b] if isinstance(b, str) else b, "b")
        if pairwise and len(texts_a) != len(texts_b):
            raise ValueError(
                f"similarity_pairwise pairs text i of a with text i of b: a has "
                f"{len(texts_a)} texts and b {len(texts_b)}"
            )
        fused = self.encode(texts_a + texts_b)  # one call: the cache and the batches see both
        split = len(texts_a)
        a_fused, b_fused = fused.rows(slice(None, split)), fused.rows(slice(split, None))
        return self.similarity_of(a_fused, b_fused, pairwise)

    @property
    def max_tokens(self) -> int | None:
        """The shortest member's token limit: a chunk past it would be cut by that member."""
        limits = [limit for _, limit in self._token_limits()]
        return min(limits) if limits else None

    def _token_limits(self) -> list[tuple[Encoder, int]]:
        """Each member encoder with a token limit, and the limit as a count: an encoder of
        one's own may say `inf` for none, as sentence-transformers does."""
        limits = [(m.encoder, token_limit(m.encoder.max_tokens)) for m in self.members]
        return [(encoder, limit) for encoder, limit in limits if limit is not None]

    def count_tokens(self, texts: Sequence[str]) -> np.ndarray:
        """Per text, the most tokens any member's tokenizer makes of it (chunks must fit all)."""
        counts = [m.encoder.count_tokens(texts) for m in self.members]
        return np.max(np.asarray(counts, dtype=np.int64), axis=0)

    def cut(self, texts: Sequence[str]) -> np.ndarray:
        """Per text, whether some member reads only its start (more tokens than that member's
        limit): what plain ingest embeds of a long document; chunking fits such texts."""
        out = np.zeros(len(texts), dtype=bool)
        for encoder, limit in self._token_limits():
            out |= longer_than(encoder, texts, limit)
        return out

    def as_sentence_transformer(self) -> SentenceEncoder:
        """This pipeline behind sentence-transformers' `encode`, for code written for ST or MTEB."""
        return SentenceEncoder(self)

    def empty(self) -> Fused:
        """No texts, fused: this pipeline's output shape, for a collection created empty."""
        dims = [member.encoder.dim for member in self.members]
        return self.fuse([Gaussian.deterministic(np.zeros((0, d), np.float32)) for d in dims])

    def _cached(
        self, member: Estimator, texts: list[str], counted: bool = True
    ) -> tuple[np.ndarray, Gaussian | None]:
        """Which texts the cache holds for a member, and their Gaussians (None if none)."""
        if self.cache is None:
            return np.zeros(len(texts), dtype=bool), None
        return self.cache.get(member.fingerprint, texts, counted)

    def _encode_member(
        self,
        member: Estimator,
        texts: list[str],
        progress: bool,
        encoded: Encoded | None = None,
        advance: Callable[[int], None] | None = None,
        looked_up: tuple[np.ndarray, Gaussian | None] | None = None,
    ) -> Gaussian:
        """Encode what the cache lacks in chunks (with a progress bar), or take it from
        `encoded`, and store it; what the cache holds is `looked_up` if given, else read."""
        key = member.fingerprint
        found, cached = self._cached(member, texts) if looked_up is None else looked_up
        if len(found) != len(texts):
            raise ValueError(f"looked_up marks {len(found)} texts, not {len(texts)}")
        missing = [t for t, hit in zip(texts, found, strict=True) if not hit]
        if advance is not None:
            advance(len(texts) - len(missing))

        label = f"{member.encoder.name} ({member.kind})"

        def encode_and_store(chunk: list[str]) -> Gaussian:
            gaussian = member.encode(chunk) if encoded is None else encoded.take(chunk, member)
            if self.cache is not None:
                self.cache.put(key, chunk, gaussian, label)
            if advance is not None:
                advance(len(chunk))
            return gaussian

        fresh = map_chunks(encode_and_store, missing, label, progress, _CHUNK)
        return _merge(found, cached, fresh)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the pipeline beside any old one, then swap it in: a crash leaves one of them.

        Refused (ValueError) first where a member's encoder could not be built again by its
        name and params, or would be built as another model (`encoders.check_loadable`): a
        custom one must be registered under a name of its own."""
        directory = home_expanded(directory, "pipeline directory")
        check_save_target(directory)
        for member in self.members:  # a member no process could load again is refused
            check_loadable(member.encoder)
        verdict = pipeline_verdict(self)  # fitted before the lock, where it was not yet
        with atomic.staging_dir(directory, "saving") as staged:
            self._write(staged, verdict)
            atomic.replace_dir(staged, directory)
        return directory

    def _write(self, directory: Path, verdict: Verdict) -> None:
        """The config, each member's fitted state and the variance verdict, into an empty
        directory."""
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
            "fusion": fusion_to_json(self.fusion),
            "score": asdict(self.score),
            "adapt": asdict(self.adapt),
        }
        text = json.dumps(config, indent=2, allow_nan=False)
        atomic.write_bytes(directory / CONFIG_FILE, text.encode())
        if self.calibrator is not None:
            self.calibrator.save(directory / CALIBRATION_FILE)
        if self.tuned_on:
            write_tuning(directory, self.tuned_on)
        verdict.write(directory)

    @classmethod
    def load(cls, name_or_dir: str | os.PathLike, cache: EmbeddingCache | bool = True) -> Pipeline:
        """Load a pipeline directory, or a built-in by name (see `available_pipelines`)."""
        directory = resolve_pipeline(name_or_dir)
        config = read_config(directory)
        members = []
        for i, entry in enumerate(config["models"]):
            params = entry.get("encoder_params", {})
            try:
                encoder = get_encoder(entry["encoder"], **params)
            except (TypeError, ValueError) as exc:  # a param it lacks, its folder gone
                raise ValueError(f"{directory / CONFIG_FILE}: models[{i}]: {exc}") from exc
            kind = estimator_class(entry["estimator"])
            members.append(kind.load(directory / entry["dir"], encoder))
        return cls._assemble(directory, config, members, cache)

    def with_settings_of(self, directory: str | os.PathLike) -> Pipeline:
        """This pipeline's loaded members under the settings kept in another pipeline directory.

        A collection's kept copy may carry a score, collection adaptation or calibrator that an
        upgraded built-in of the same fingerprint no longer has (none of them changes a
        vector): a server that shares its loaded models with the collection must still answer
        as the copy does. Member states are not read; a fingerprint check stays the caller's.
        """
        directory = Path(directory)
        config = read_config(directory)
        kept = [(e["encoder"], e["estimator"]) for e in config["models"]]
        mine = [(m.encoder.name, m.kind) for m in self.members]
        if kept != mine:
            raise ValueError(
                f"{directory / CONFIG_FILE}: its members {kept} are not this pipeline's {mine}"
            )
        return self._assemble(directory, config, self.members, self.cache or False)

    @classmethod
    def _assemble(
        cls,
        directory: Path,
        config: dict[str, Any],
        members: Sequence[Estimator],
        cache: EmbeddingCache | bool,
    ) -> Pipeline:
        """Fitted members plus the fusion, score, adaptation, calibrator and variance verdict a
        directory keeps."""
        calibration = directory / CALIBRATION_FILE
        calibrator = RelevanceCalibrator.load(calibration) if calibration.is_file() else None
        tuned_on = read_tuning(directory)
        try:
            fusion = FusionConfig(**config.get("fusion", {}))
            score = ScoreConfig(**config.get("score", {}))
            adapt = AdaptConfig(**config.get("adapt", {}))
            name = config.get("name", directory.name)
            pipeline = cls(members, fusion, score, name, cache, calibrator, adapt, tuned_on)
        except ValueError as exc:
            raise ValueError(f"{directory / CONFIG_FILE}: {exc}") from exc
        pipeline.variance_verdict = read_verdict(directory)
        hold_kept(pipeline)  # for pipelines made from its members under other settings
        return pipeline

    def __repr__(self) -> str:
        return f"Pipeline(name={self.name!r}, models={self.models}, fusion={self.fusion.method!r})"


def as_pipeline(pipeline: Pipeline | str | os.PathLike) -> Pipeline:
    """A pipeline object, loading a built-in name or a saved directory when given one: what
    every function that takes a pipeline accepts."""
    if isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, (str, os.PathLike)):
        return Pipeline.load(pipeline)
    raise TypeError(
        f"pipeline must be a probembed Pipeline, a built-in name or a saved directory, "
        f"got {type(pipeline).__name__}"
    )


def _labels(encoders: Sequence[Encoder]) -> tuple[str, ...]:
    """Member labels: an encoder's name, plus its params where two members share the name."""
    names = [e.name for e in encoders]
    return tuple(e.label if names.count(e.name) > 1 else e.name for e in encoders)


def _merge(
    found: Sequence[bool] | np.ndarray, cached: Gaussian | None, fresh: list[Gaussian]
) -> Gaussian:
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


class WholeTexts:
    """Member-texts counted into whole texts for a caller's bar: with three members, a text
    is done once all three have encoded it, or its share of them, rounded down. Safe to call
    from several threads (a Ray job tells it from its watcher and its driver)."""

    def __init__(self, advance: Callable[[int], None], members: int) -> None:
        self._advance, self._members, self._units, self._told = advance, max(members, 1), 0, 0
        self._lock = threading.Lock()

    def __call__(self, units: int) -> None:
        """Count `units` more member-texts; tell the whole texts they complete."""
        with self._lock:
            self._units += units
            whole = self._units // self._members
            if whole > self._told:
                self._advance(whole - self._told)
                self._told = whole
