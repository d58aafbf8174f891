"""The contract every uncertainty estimator keeps: fit on positive pairs, save, load, encode."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import numpy as np

from probembed import atomic
from probembed.encoders.base import Encoder, validate_texts
from probembed.gaussian import Gaussian
from probembed.progress import map_chunks
from probembed.uncertainty.calibration import calibration_scale
from probembed.uncertainty.moments import Moments

PARAMS_FILE = "estimator.json"
STATE_FILE = "state.npz"
R = TypeVar("R")


def validate_pairs(pairs: object) -> tuple[list[str], list[str]]:
    """Split a sequence of (text_a, text_b) into two lists, rejecting anything else clearly."""
    if not isinstance(pairs, Sequence) or len(pairs) == 0:
        raise ValueError("pairs must be a non-empty sequence of (text_a, text_b) tuples")
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"pairs[{i}] must be a (text_a, text_b) pair, got {pair!r:.80}")
    text_a = validate_texts([p[0] for p in pairs], "pairs text_a")
    text_b = validate_texts([p[1] for p in pairs], "pairs text_b")
    return text_a, text_b


def split_holdout(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of n pair indices into fit and calibration parts."""
    if not 0 < fraction < 1:
        raise ValueError(f"holdout must be strictly between 0 and 1, got {fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_cal = max(1, round(n * fraction))
    if n - n_cal < 2:
        raise ValueError(f"need at least {n_cal + 2} pairs to fit and calibrate, got {n}")
    return np.sort(order[n_cal:]), np.sort(order[:n_cal])


class Derived:
    """A value computed from some inputs, computed again only when one of them changes.

    Arrays compare by identity, which is sound for what estimators derive from: their state
    arrays are read-only, so the same array object still holds the same numbers. Any other
    input compares by value. It keeps per-call costs (hashing or inverting a Fisher) out of
    every encode.
    """

    def __init__(self) -> None:
        self._inputs: tuple[object, ...] | None = None
        self._value: Any = None

    def get(self, inputs: tuple[object, ...], compute: Callable[[], R]) -> R:
        """The value for these inputs, from `compute` unless they are the last ones."""
        last = self._inputs
        same = last is not None and len(last) == len(inputs)
        if not (
            same
            and last is not None
            and all(_same(a, b) for a, b in zip(last, inputs, strict=True))
        ):
            self._value, self._inputs = compute(), inputs
        return self._value


def _same(a: object, b: object) -> bool:
    """The same array object, or equal values of the same type."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b
    return type(a) is type(b) and bool(a == b)


def _read_only(array: np.ndarray) -> np.ndarray:
    """The array itself, no longer writable (fitted state is never changed in place)."""
    array = np.asarray(array)
    array.setflags(write=False)
    return array


def is_number(value: object) -> bool:
    """A finite real number and not a bool (JSON's true would pass as 1)."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return real and math.isfinite(value)  # type: ignore[arg-type]


def is_count(value: object) -> bool:
    """A whole number and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Estimator(ABC):
    """Turns one deterministic encoder into a probabilistic one.

    Subclasses declare their hyper-parameters in DEFAULTS, learn arrays in `_fit`, and map texts
    to float64 unit-norm means with uncalibrated variances in `_encode_raw`; this base class does
    validation, the held-out scale calibration (docs/architecture.md), the one cast to a float32
    Gaussian, persistence and fingerprinting.
    """

    kind: ClassVar[str]
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    COMMON: ClassVar[dict[str, Any]] = {"holdout": 0.2, "seed": 0, "calibrate": True}

    def __init__(self, encoder: Encoder, **params: Any) -> None:
        allowed = {**self.COMMON, **self.DEFAULTS}
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise TypeError(
                f"{self.kind} estimator got unknown parameter(s) {unknown}; "
                f"allowed: {sorted(allowed)}"
            )
        self.encoder = encoder
        self.params: dict[str, Any] = {**allowed, **params}
        self._check_params()
        self.state = {}
        self.scale = 1.0
        self._progress = False
        self._fingerprint = Derived()
        #: Its encoder's fingerprint when it was saved (None: not loaded, or saved before
        #: saves kept it): which member's model changed since, when a pipeline is refused.
        self.saved_encoder_fingerprint: str | None = None

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The fitted arrays by name, each read-only: fit and load replace them whole."""
        return self._state

    @state.setter
    def state(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._state = {k: _read_only(v) for k, v in arrays.items()}

    @property
    def is_fitted(self) -> bool:
        """Whether `fit` (or `load`) has supplied the state that `encode` needs."""
        return bool(self.state) or not self.needs_fit

    needs_fit: ClassVar[bool] = True

    def fit(self, pairs: Sequence[tuple[str, str]], progress: bool = False) -> Self:
        """Learn the estimator's state on part of the pairs and its variance scale on the rest."""
        text_a, text_b = validate_pairs(pairs)
        self._progress = progress
        fit_idx, _ = split_holdout(len(text_a), self.params["holdout"], self.params["seed"])
        self._fit([text_a[i] for i in fit_idx], [text_b[i] for i in fit_idx])
        return self.calibrate(pairs, progress)

    def calibrate(self, pairs: Sequence[tuple[str, str]], progress: bool = False) -> Self:
        """(Re)fit only the variance scale, on the held-out part of the pairs `fit` was given.

        The held-out part is the same seeded split `fit` used, so an estimator whose
        encode-time parameters change (e.g. a Laplace prior precision) is calibrated alike.
        """
        text_a, text_b = validate_pairs(pairs)
        self._progress = progress
        _, cal_idx = split_holdout(len(text_a), self.params["holdout"], self.params["seed"])
        self.scale = 1.0
        if self.params["calibrate"]:
            a = self._map(self._encode_raw, [text_a[i] for i in cal_idx], "calibrate")
            b = self._map(self._encode_raw, [text_b[i] for i in cal_idx], "calibrate")
            self.scale = calibration_scale(Moments.concat(a), Moments.concat(b))
        return self

    def _map(self, fn: Callable[[list[str]], R], texts: list[str], step: str) -> list[R]:
        """fn over chunks of texts, with a progress bar while fitting if one was asked for."""
        label = f"{self.encoder.name} {self.kind}: {step}"
        return map_chunks(fn, texts, label, self._progress)

    def encode(self, texts: Sequence[str]) -> Gaussian:
        """Unit-norm means with calibrated variances, one Gaussian per text."""
        texts = validate_texts(texts)
        if not self.is_fitted:
            raise RuntimeError(f"{self.kind} estimator for {self.encoder.name} is not fitted yet")
        return self._encode_raw(texts).gaussian(self.scale)

    @abstractmethod
    def _fit(self, text_a: list[str], text_b: list[str]) -> None:
        """Learn `self.state` from positive pairs."""

    def _check_params(self) -> None:
        """Refuse a bad hyper-parameter when the estimator is made, not minutes into a fit.

        Subclasses check their own DEFAULTS after these.
        """
        holdout = self.params["holdout"]
        self._require("holdout", is_number(holdout) and 0 < holdout < 1, "a number in (0, 1)")
        seed = self.params["seed"]
        self._require("seed", is_count(seed) and seed >= 0, "a whole number >= 0")
        self._require("calibrate", isinstance(self.params["calibrate"], bool), "true or false")

    def _require(self, name: str, ok: bool, what: str) -> None:
        """A ValueError naming the estimator, the parameter, what it must be and what it is."""
        if not ok:
            raise ValueError(f"{self.kind} {name} must be {what}, got {self.params[name]!r}")

    @abstractmethod
    def _encode_raw(self, texts: list[str]) -> Moments:
        """Float64 unit-norm means and variances before the calibration scale."""

    @property
    def fingerprint(self) -> str:
        """Changes whenever encode's output would: keys the embedding cache."""
        head = (self.encoder.fingerprint, self._params_key())
        inputs = (*head, *self.state, *self.state.values())
        return self._fingerprint.get(inputs, lambda: self._hash(*head))

    @property
    def legacy_fingerprints(self) -> tuple[str, ...]:
        """The fingerprints this estimator had under its encoder's `legacy_fingerprints`, so a
        collection recorded under one stays readable."""
        return tuple(
            self._hash(old, self._params_key()) for old in self.encoder.legacy_fingerprints
        )

    def _params_key(self) -> str:
        """The hyper-parameters and scale, as they enter the fingerprint."""
        return json.dumps([self.kind, self.params, self.scale], sort_keys=True)

    def _hash(self, encoder: str, params: str) -> str:
        """SHA-256 of the encoder, the parameters and the fitted arrays (megabytes: hashed
        once per state, not per encode)."""
        digest = hashlib.sha256()
        digest.update(encoder.encode())
        digest.update(params.encode())
        for key in sorted(self.state):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(self.state[key]).tobytes())
        return digest.hexdigest()[:16]

    def save(self, directory: str | os.PathLike) -> None:
        """Write parameters (JSON) and fitted arrays (npz); each file replaced atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta: dict[str, Any] = {
            "kind": self.kind,
            "encoder": self.encoder.name,
            # not read back as the fingerprint: it says which member a changed model was
            "encoder_fingerprint": self.encoder.fingerprint,
            "params": self.params,
        }
        meta["scale"] = self.scale
        atomic.write_bytes(directory / PARAMS_FILE, json.dumps(meta, indent=2).encode())
        atomic.save_npz(directory / STATE_FILE, **self.state)

    @classmethod
    def load(cls, directory: str | os.PathLike, encoder: Encoder) -> Self:
        """Rebuild a fitted estimator written by `save`, failing clearly on a damaged directory."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / PARAMS_FILE).read_text())
            state = atomic.load_npz(directory / STATE_FILE)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"cannot load estimator from {directory}: {exc}") from exc
        where = directory / PARAMS_FILE
        if not isinstance(meta, dict) or not {"kind", "params", "scale"} <= meta.keys():
            raise ValueError(f"{where}: needs an object with kind, params and scale")
        if meta["kind"] != cls.kind:
            raise ValueError(f"{directory} holds a {meta['kind']!r} estimator, not {cls.kind!r}")
        scale = meta["scale"]
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ValueError(f"{where}: scale must be a number, got {scale!r}")
        if not (math.isfinite(scale) and scale >= 0):
            raise ValueError(f"{where}: scale must be finite and >= 0, got {scale!r}")
        if not isinstance(meta["params"], dict):
            raise ValueError(f"{where}: params must be an object, got {meta['params']!r}")
        try:
            estimator = cls(encoder, **meta["params"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from exc
        estimator._check_state(state)
        estimator.state, estimator.scale = state, float(scale)
        saved = meta.get("encoder_fingerprint")
        estimator.saved_encoder_fingerprint = saved if isinstance(saved, str) else None
        return estimator

    @abstractmethod
    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """Reject loaded arrays that cannot belong to this encoder."""
