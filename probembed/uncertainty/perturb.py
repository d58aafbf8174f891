"""Monte Carlo over word-dropout views: a model-agnostic baseline that costs M extra encodes."""

from __future__ import annotations

import zlib
from typing import Any, ClassVar

import numpy as np

from probembed.gaussian import unit_rows
from probembed.uncertainty.base import Estimator, is_count, is_number
from probembed.uncertainty.moments import Moments


def dropout_views(text: str, views: int, rate: float, seed: int) -> list[str]:
    """M copies of the text with words dropped; seeded by the text so a text's views never vary."""
    words = text.split()
    if len(words) < 2:
        return [text] * views
    rng = np.random.default_rng([seed, zlib.crc32(text.encode("utf-8"))])
    out = []
    for _ in range(views):
        keep = rng.random(len(words)) >= rate
        if not keep.any():
            keep[rng.integers(len(words))] = True
        out.append(" ".join(w for w, k in zip(words, keep, strict=True) if k))
    return out


class PerturbEstimator(Estimator):
    """Mean from the text itself; variance = sample variance of M word-dropout views of it."""

    kind = "perturb"
    needs_fit = False
    DEFAULTS: ClassVar[dict[str, Any]] = {"views": 8, "rate": 0.15}

    def _check_params(self) -> None:
        """A variance needs two views; a rate of 1 would drop every word."""
        super()._check_params()
        views, rate = self.params["views"], self.params["rate"]
        self._require("views", is_count(views) and views >= 2, "a whole number >= 2")
        self._require("rate", is_number(rate) and 0 <= rate < 1, "a number in [0, 1)")

    def _fit(self, text_a: list[str], text_b: list[str]) -> None:
        """Nothing to learn: the only fitted quantity is the calibration scale."""

    def _encode_raw(self, texts: list[str]) -> Moments:
        """Encode the texts and all their views in one call, then take per-dimension variances."""
        m, rate, seed = self.params["views"], self.params["rate"], self.params["seed"]
        per_text = [dropout_views(text, m, rate, seed) for text in texts]
        vectors = self.encoder.encode(texts + [v for views in per_text for v in views])
        base, _ = unit_rows(vectors[: len(texts)])
        perturbed, _ = unit_rows(vectors[len(texts) :])
        spread = perturbed.reshape(len(texts), m, -1).var(axis=1, ddof=1)
        # views that are all one string (a one-word text) saw no spread: exactly 0, the
        # unknown that fusion and calibration skip, not the ~1e-32 that rounding of the mean
        # (or an encoder whose float32 output shifts with the batch) leaves, which would
        # read as the most certain text there is
        spread[[len(set(views)) == 1 for views in per_text]] = 0.0
        return Moments(base, spread)

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """Perturbation keeps no arrays; anything stored means the directory is not ours."""
        if state:
            raise ValueError(f"perturb state must be empty, found arrays {sorted(state)}")
