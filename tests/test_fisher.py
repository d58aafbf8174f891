"""The hand-written diagonal Fisher must equal per-example autograd on a toy linear layer."""

import numpy as np
import pytest
import torch

from probembed.uncertainty.fisher import (
    fisher_diagonal,
    info_nce_losses,
    posterior_variance,
    predictive_variance,
)


def autograd_fisher(weight, bias, act_a, act_b, temperature, batch_size):
    """Sum over pairs of (d l_i / d W)^2, one backward pass per pair."""
    w = torch.tensor(weight, requires_grad=True)
    fisher = torch.zeros_like(w)
    for start in range(0, len(act_a), batch_size):
        a = torch.tensor(act_a[start : start + batch_size])
        b = torch.tensor(act_b[start : start + batch_size])
        if len(a) < 2:
            break
        losses = info_nce_losses(a @ w.T + bias, b @ w.T + bias, temperature)
        for loss in losses:
            (grad,) = torch.autograd.grad(loss, w, retain_graph=True)
            fisher += grad.square()
    return fisher.numpy()


@pytest.mark.parametrize("batch_size", [4, 7])
def test_fisher_matches_autograd_on_toy_layer(batch_size):
    rng = np.random.default_rng(0)
    d, h, n = 5, 8, 13
    weight = rng.normal(size=(d, h)).astype(np.float32)
    bias = torch.tensor(rng.normal(size=d).astype(np.float32))
    act_a = rng.normal(size=(n, h)).astype(np.float32)
    act_b = (act_a + 0.3 * rng.normal(size=(n, h))).astype(np.float32)
    y_a = act_a @ weight.T + bias.numpy()
    y_b = act_b @ weight.T + bias.numpy()
    ours = fisher_diagonal(y_a, act_a, y_b, act_b, temperature=0.1, batch_size=batch_size)
    expected = autograd_fisher(weight, bias, act_a, act_b, 0.1, batch_size)
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-7)


def test_posterior_variance_is_positive_and_decreasing_in_prior_precision():
    fisher = np.abs(np.random.default_rng(1).normal(size=(3, 4)))
    weak, strong = posterior_variance(fisher, 0.1), posterior_variance(fisher, 10.0)
    assert (weak > 0).all() and (strong < weak).all()
    with pytest.raises(ValueError, match="prior_precision"):
        posterior_variance(fisher, 0.0)


def test_predictive_variance_equals_linearised_sum():
    rng = np.random.default_rng(2)
    act, weight_var = rng.normal(size=(6, 4)), np.abs(rng.normal(size=(3, 4)))
    expected = np.array([[np.sum(a**2 * v) for v in weight_var] for a in act])
    np.testing.assert_allclose(predictive_variance(act, weight_var), expected, rtol=1e-5)
