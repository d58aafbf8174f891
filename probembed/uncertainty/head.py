"""Learned variance head: a small network g(mu) -> log sigma^2 on a frozen encoder (PFE-style).

Trained on positive pairs by maximising the mutual likelihood score, whose optimum for a pair
puts sigma_a^2 + sigma_b^2 at the squared residual (mu_a - mu_b)^2: the head learns which
texts a model embeds far from their paraphrases. Inference is one small numpy MLP, so any
encoder (torch, ONNX, numpy, static vectors) gets it at negligible cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

if TYPE_CHECKING:
    import torch

from probembed.gaussian import Gaussian
from probembed.uncertainty.base import Estimator, is_count, is_number
from probembed.uncertainty.moments import Moments

#: The range log-variances are kept in, in training and at inference: exp neither underflows
#: nor explodes.
LOG_VAR_MIN, LOG_VAR_MAX = -20.0, 5.0


def mls_loss(
    mu_a: torch.Tensor, logv_a: torch.Tensor, mu_b: torch.Tensor, logv_b: torch.Tensor
) -> torch.Tensor:
    """Negative mutual likelihood score, averaged over pairs."""
    total = logv_a.exp() + logv_b.exp()
    return 0.5 * ((mu_a - mu_b).square() / total + total.log()).sum(1).mean()


def head_network(dim: int, hidden: int) -> torch.nn.Sequential:
    """Two-layer MLP from a unit-norm embedding to per-dimension log-variances: the torch
    network a head is trained as, whose forward pass `head_log_variance` computes in numpy."""
    from torch import nn

    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, as torch's default, so inference needs no torch."""
    # imported here: every pipeline imports this module (estimators are found by kind), and
    # scipy.special was ~0.25 s of CPU in each CLI command's and encoding child's start
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def head_log_variance(state: dict[str, np.ndarray], mean: np.ndarray) -> np.ndarray:
    """The trained network's forward pass in float64 numpy: clipped log-variances (n, d).

    float64, not the float32 it was trained in, so its sums do not round differently with the
    number of texts in a batch (a float32 sgemm does); the weights are the float32 ones trained.
    """
    w = {key: np.asarray(value, dtype=np.float64) for key, value in state.items()}
    hidden = _gelu(np.asarray(mean, dtype=np.float64) @ w["0.weight"].T + w["0.bias"])
    return np.clip(hidden @ w["2.weight"].T + w["2.bias"], LOG_VAR_MIN, LOG_VAR_MAX)


class HeadEstimator(Estimator):
    """Per-dimension log-variance predicted from the embedding by a small MLP trained with MLS."""

    kind = "head"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        "hidden": 128,
        "epochs": 30,
        "lr": 3e-3,
        "weight_decay": 1e-4,
        "batch_size": 256,
    }

    def _check_params(self) -> None:
        """Sizes count units, epochs and texts; the optimiser's rates are not negative."""
        super()._check_params()
        for name in ("hidden", "epochs", "batch_size"):
            value = self.params[name]
            self._require(name, is_count(value) and value > 0, "a whole number > 0")
        for name in ("lr", "weight_decay"):
            value = self.params[name]
            self._require(name, is_number(value) and value >= 0, "a finite number >= 0")

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Unit-norm embeddings: the head's input and the Gaussian's mean."""
        return Gaussian.deterministic(self.encoder.encode(texts)).normalize().mean

    def _fit(self, text_a: list[str], text_b: list[str]) -> None:
        """AdamW on the MLS of each positive pair with the encoder frozen; seeded."""
        import torch

        torch.manual_seed(self.params["seed"])
        mu_a = torch.from_numpy(np.concatenate(self._map(self._embed, text_a, "encode text_a")))
        mu_b = torch.from_numpy(np.concatenate(self._map(self._embed, text_b, "encode text_b")))
        net = head_network(mu_a.shape[1], self.params["hidden"])
        with torch.no_grad():  # start at the pooled residual variance, a sensible constant
            cast("torch.nn.Linear", net[2]).weight.mul_(0.01)
            start = float(((mu_a - mu_b).square().mean() / 2).log())  # -inf: identical pairs
            cast("torch.nn.Linear", net[2]).bias.fill_(max(start, LOG_VAR_MIN))
        optimiser = torch.optim.AdamW(
            net.parameters(), lr=self.params["lr"], weight_decay=self.params["weight_decay"]
        )
        generator = torch.Generator().manual_seed(self.params["seed"])
        size = self.params["batch_size"]
        for _ in range(self.params["epochs"]):
            for idx in torch.randperm(len(mu_a), generator=generator).split(size):
                a, b = mu_a[idx], mu_b[idx]
                loss = mls_loss(a, self._log_var(net(a)), b, self._log_var(net(b)))
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        self.state = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

    @staticmethod
    def _log_var(raw: torch.Tensor) -> torch.Tensor:
        """Keep log-variances in a range where exp neither underflows nor explodes."""
        return raw.clamp(LOG_VAR_MIN, LOG_VAR_MAX)

    def _encode_raw(self, texts: list[str]) -> Moments:
        """One numpy forward pass of the head per batch of embeddings."""
        mean = self._embed(texts)
        return Moments(mean.astype(np.float64), np.exp(head_log_variance(self.state, mean)))

    def _check_state(self, state: dict[str, np.ndarray]) -> None:
        """The head's input and output widths must equal this encoder's dimension."""
        expected = {"0.weight", "0.bias", "2.weight", "2.bias"}
        if set(state) != expected:
            raise ValueError(f"head state needs arrays {sorted(expected)}, found {sorted(state)}")
        d = self.encoder.dim
        if state["0.weight"].shape[1] != d or state["2.weight"].shape[0] != d:
            raise ValueError(
                f"head state was fitted for dimension {state['0.weight'].shape[1]}, "
                f"but {self.encoder.name} has dimension {d}"
            )
