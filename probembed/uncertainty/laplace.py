"""UEC's post-hoc diagonal Laplace: a posterior over one linear map gives each text a variance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np

from probembed.encoders.base import Encoder, EncoderOutputError, checked_output, checked_rows
from probembed.gaussian import unit_rows
from probembed.uncertainty.base import Derived, Estimator, is_count, is_number
from probembed.uncertainty.fisher import fisher_diagonal, posterior_variance, predictive_variance
from probembed.uncertainty.moments import Moments


@runtime_checkable
class ExposesLastLayer(Protocol):
    """An encoder that hands out the input of its last linear layer with each embedding."""

    def encode_with_activations(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Return (pre-normalisation embedding (n, d), pooled last-layer input (n, h))."""
        ...


class LaplaceEstimator(Estimator):
    """Diagonal Laplace over W of y = W a + b, linearised: var_d(x) = sum_i a_i(x)^2 V[d, i].

    On a sentence-transformers model, W is the output dense layer of the last feed-forward block
    and a its mean-pooled input, captured by a hook during the normal forward pass. On any other
    encoder, W is an identity-initialised d x d adapter on the output and a the embedding itself.
    """

    kind = "laplace"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "prior_precision": 1.0,
        "temperature": 0.05,
        "batch_size": 32,
        "adapter": False,
    }

    def __init__(self, encoder: Encoder, **params: Any) -> None:
        super().__init__(encoder, **params)
        self._posterior = Derived()

    def _check_params(self) -> None:
        """λ and the temperature divide and take roots; the batch size counts texts."""
        super()._check_params()
        for name in ("prior_precision", "temperature"):
            value = self.params[name]
            self._require(name, is_number(value) and value > 0, "a finite number > 0")
        size = self.params["batch_size"]
        self._require("batch_size", is_count(size) and size > 0, "a whole number > 0")

    @property
    def uses_last_layer(self) -> bool:
        """Whether the transformer's own last layer (not an adapter) carries the posterior."""
        return isinstance(self.encoder, ExposesLastLayer) and not self.params["adapter"]

    def features(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Layer output y and input a for each text, from one pass of the encoder; a custom
        encoder's pair is checked as its `encode` is, so a wrong shape or a NaN is named here,
        not met as a broadcast error inside the Fisher."""
        if not self.uses_last_layer:
            embedding = self.encoder.encode(texts)
            return embedding, embedding
        pair = cast(ExposesLastLayer, self.encoder).encode_with_activations(texts)
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise EncoderOutputError(
                f"encoder {self.encoder.label!r}: encode_with_activations gave "
                f"{type(pair).__name__}, not the pair (embeddings, last-layer inputs)"
            )
        width = self.state["fisher"].shape[1] if self.state else None
        return (
            checked_output(self.encoder, texts, pair[0]),
            checked_rows(self.encoder, texts, pair[1], width, "last-layer input"),
        )

    def _fit(self, text_a: list[str], text_b: list[str]) -> None:
        """Diagonal empirical Fisher of the in-batch InfoNCE loss, then V = 1 / (F + lambda)."""
        y_a, act_a = self._features_of(text_a, "encode text_a")
        y_b, act_b = self._features_of(text_b, "encode text_b", act_a.shape[1])
        fisher = fisher_diagonal(
            y_a, act_a, y_b, act_b, self.params["temperature"], self.params["batch_size"]
        )
        self.state = {"fisher": fisher.astype(np.float32)}

    def with_prior_precision(
        self, prior_precision: float, pairs: Sequence[tuple[str, str]], progress: bool = False
    ) -> LaplaceEstimator:
        """The same Fisher under another lambda, its scale refitted on the fit's held-out pairs.

        V = 1/(F + lambda) is formed at encode, so no refit of F is needed; the calibration
        scale is not lambda-consistent (it absorbs 1/lambda only where F << lambda) and is
        fitted again. `pairs` must be the pairs this estimator was fitted on.
        """
        if not self.state:
            raise RuntimeError(f"laplace estimator for {self.encoder.name} is not fitted yet")
        params = {**self.params, "prior_precision": float(prior_precision)}
        other = type(self)(self.encoder, **params)
        other.state = dict(self.state)
        return other.calibrate(pairs, progress)

    def _features_of(
        self, texts: list[str], step: str, width: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`features` over many texts, in chunks with a progress bar; every chunk's last-layer
        inputs of one width (`width`, where the fit's other side has set it)."""
        parts = self._map(self.features, texts, step)
        widths = sorted({a.shape[1] for _, a in parts} | ({width} if width else set()))
        if len(widths) > 1:  # the Fisher has one column per input: no width is the right one
            raise EncoderOutputError(
                f"encoder {self.encoder.label!r}: encode_with_activations gave last-layer "
                f"inputs of widths {widths} in one fit, not one width"
            )
        return np.concatenate([y for y, _ in parts]), np.concatenate([a for _, a in parts])

    def _encode_raw(self, texts: list[str]) -> Moments:
        """Predictive variance in one matmul, then both moments rescaled to the unit sphere."""
        y, act = self.features(texts)
        fisher, prior_precision = self.state["fisher"], self.params["prior_precision"]
        weight_var = self._posterior.get(
            (fisher, prior_precision), lambda: posterior_variance(fisher, prior_precision)
        )
        mean, sq_norm = unit_rows(y)
        return Moments(mean, predictive_variance(act, weight_var) / sq_norm)

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """The Fisher must have one row per output dimension of this encoder (and, over an
        adapter on the output, one column too) and be >= 0: else the first encode fails."""
        fisher, dim = state.get("fisher"), self.encoder.dim
        width = "h" if self.uses_last_layer else str(dim)
        if (
            fisher is None
            or fisher.ndim != 2
            or fisher.shape[0] != dim
            or (not self.uses_last_layer and fisher.shape[1] != dim)
        ):
            shape = None if fisher is None else fisher.shape
            raise ValueError(
                f"laplace state for {self.encoder.name} needs a fisher array of shape "
                f"({dim}, {width}), found {shape}"
            )
        if not np.all(np.isfinite(fisher)) or fisher.min() < 0:
            raise ValueError(
                f"laplace state for {self.encoder.name} has a negative or non-finite Fisher"
            )
