"""Diagonal empirical Fisher of one linear layer under an in-batch contrastive (InfoNCE) loss.

The layer is y = W a + b. In the linearised model a change of W moves every output by
dW a, so the per-example gradient of the loss l_i is sum_n (dl_i/dy_n) a_n^T over every text n
of the batch (in-batch negatives make each l_i depend on all of them). The diagonal empirical
Fisher is the sum over examples of that gradient squared, elementwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def info_nce_losses(y_a: torch.Tensor, y_b: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per-pair symmetric InfoNCE losses of unit-normalised outputs, in-batch negatives."""
    import torch
    import torch.nn.functional as F

    logits = F.normalize(y_a, dim=1) @ F.normalize(y_b, dim=1).T / temperature
    target = torch.arange(len(y_a))
    row = F.cross_entropy(logits, target, reduction="none")
    col = F.cross_entropy(logits.T, target, reduction="none")
    return 0.5 * (row + col)


def _output_jacobian(y_a: torch.Tensor, y_b: torch.Tensor, temperature: float) -> torch.Tensor:
    """d l_i / d y_n for every pair i and text n: shape (B, 2B, d)."""
    import torch

    y = torch.cat([y_a, y_b]).detach()
    b = len(y_a)

    def losses(outputs: torch.Tensor) -> torch.Tensor:
        return info_nce_losses(outputs[:b], outputs[b:], temperature)

    return torch.func.jacrev(losses)(y)


def fisher_diagonal(
    y_a: np.ndarray,
    act_a: np.ndarray,
    y_b: np.ndarray,
    act_b: np.ndarray,
    temperature: float = 0.05,
    batch_size: int = 32,
) -> np.ndarray:
    """Sum over pairs of squared per-pair gradients w.r.t. W: the (d, h) diagonal Fisher.

    y_*: layer outputs (n, d) of the two sides of each positive pair; act_*: layer inputs (n, h).
    Pairs are grouped into batches that serve as each other's negatives.
    """
    import torch

    n, d = y_a.shape
    h = act_a.shape[1]
    fisher = torch.zeros(d, h, dtype=torch.float64)
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        if stop - start < 2:
            break  # a lone pair has no negatives, so its loss carries no gradient signal
        jac = _output_jacobian(
            torch.from_numpy(y_a[start:stop]).float(),
            torch.from_numpy(y_b[start:stop]).float(),
            temperature,
        )
        acts = torch.from_numpy(np.concatenate([act_a[start:stop], act_b[start:stop]])).float()
        per_pair = torch.einsum("ind,nh->idh", jac, acts)
        fisher += per_pair.double().square().sum(0)
    return fisher.numpy()


def posterior_variance(fisher: np.ndarray, prior_precision: float) -> np.ndarray:
    """Diagonal Laplace posterior variance of W in float64: 1 / (F + lambda)."""
    if prior_precision <= 0:
        raise ValueError(f"prior_precision must be > 0, got {prior_precision}")
    return 1.0 / (np.asarray(fisher, dtype=np.float64) + prior_precision)


def predictive_variance(act: np.ndarray, weight_var: np.ndarray) -> np.ndarray:
    """Linearised output variance sigma^2_d(x) = sum_i a_i(x)^2 V[d, i], one float64 matmul.

    float64 because a float32 sgemm rounds each row differently depending on how many rows
    share the call: the variance would move with the batch split, not with the text.
    """
    weight_var = np.asarray(weight_var, dtype=np.float64)
    return np.square(act, dtype=np.float64) @ weight_var.T
