"""A learned reliability router: per-text weights from cheap features that predict each error.

Which member to trust differs from text to text. The router learns, per member k, a ridge
regression r̂_k(x) of that member's *relative* per-item error (its error minus the members'
mean error on the item, in units of the dataset's error spread) on cheap features of the text:
the member's own uncertainty log u_k(x), its disagreement with the other members, and the
text's length. Its weights are

    π_k(x) = softmax_k(log p_k + g_k(x)),   g_k(x) = -α · r̂_k(x),

so α = 0 is the prior p and a member predicted to err more than the others loses weight.
Plain numpy: the model is K small linear maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from probembed.fusion.weights import uncertainty
from probembed.gaussian import Gaussian, unit_rows

#: Per member and text: own log-uncertainty, own disagreement, the mean disagreement of all
#: members, log characters, log words.
FEATURES = ("log_u", "disagreement", "mean_disagreement", "log_chars", "log_words")
#: Anchor texts of a relative representation: enough for a stable profile correlation,
#: small enough that (n, anchors) cosine tables cost nothing beside encoding.
ANCHORS = 256
SEED = 0
#: Ridge penalty on standardised features: features are few and correlated (lengths).
RIDGE = 1.0


def _standardised_rows(table: np.ndarray) -> np.ndarray:
    """Each row minus its mean, over its standard deviation (a profile's shape, not level)."""
    centred = table - table.mean(axis=1, keepdims=True)
    return centred / np.maximum(centred.std(axis=1, keepdims=True), 1e-12)


def anchor_disagreement(parts: Sequence[Gaussian], anchors: np.ndarray) -> np.ndarray:
    """(n, K) 1 − correlation of member k's cosine profile over the anchors with the others'
    (the router's "disagreement" feature).

    Relative representations: each member describes a text by its cosines to the same anchor
    texts, so members of different dimension become comparable; a member whose profile departs
    from the mean of the others' sees the text differently from them.
    """
    if len(parts) < 2:
        raise ValueError(f"anchor_disagreement needs at least 2 members, got {len(parts)}")
    profiles = []
    for part in parts:
        unit, _ = unit_rows(part.mean)
        profiles.append(_standardised_rows(unit @ unit[anchors].T))
    total = np.sum(profiles, axis=0)
    out = np.empty((len(parts[0]), len(parts)))
    for k, own in enumerate(profiles):
        others = _standardised_rows((total - own) / (len(parts) - 1))
        out[:, k] = 1.0 - np.mean(own * others, axis=1)
    return out


def anchor_rows(n: int, anchors: int = ANCHORS, seed: int = SEED) -> np.ndarray:
    """A seeded sample of at most `anchors` row indices out of n, sorted."""
    if n < 2:
        raise ValueError(f"anchors need at least 2 texts, got {n}")
    return np.sort(np.random.default_rng(seed).choice(n, min(anchors, n), replace=False))


def text_features(
    parts: Sequence[Gaussian], texts: Sequence[str], anchors: np.ndarray
) -> np.ndarray:
    """(n, K, len(FEATURES)) features of every text for every member, in FEATURES order."""
    n, k = len(texts), len(parts)
    if any(len(p) != n for p in parts):
        raise ValueError(f"every member must embed the {n} texts given")
    log_u = np.log(np.stack([np.maximum(uncertainty(p), 1e-300) for p in parts], axis=1))
    dis = anchor_disagreement(parts, anchors)
    chars = np.log1p([len(t) for t in texts])
    words = np.log1p([len(t.split()) for t in texts])
    shared = np.stack([dis.mean(axis=1), chars, words], axis=1)
    return np.concatenate([log_u[..., None], dis[..., None], np.repeat(shared[:, None], k, 1)], 2)


def relative_errors(errors: np.ndarray) -> np.ndarray:
    """(n, K) each member's error minus the item's mean error, over the errors' spread."""
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim != 2 or e.shape[1] < 2 or not np.all(np.isfinite(e)):
        raise ValueError(f"errors must be a finite (n, K >= 2) array, got shape {e.shape}")
    return (e - e.mean(axis=1, keepdims=True)) / max(float(e.std()), 1e-12)


@dataclass(frozen=True)
class Router:
    """K ridge regressions on standardised features: (K, F) centre, scale, coef; (K,) bias."""

    centre: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    bias: np.ndarray

    def predict(self, features: np.ndarray) -> np.ndarray:
        """(n, K) predicted relative error of every member on every text."""
        x = (np.asarray(features, dtype=np.float64) - self.centre) / self.scale
        return np.einsum("nkf,kf->nk", x, self.coef) + self.bias

    def logits(self, features: np.ndarray, alpha: float) -> np.ndarray:
        """(n, K) g = -α · r̂, centred per text (a softmax ignores a shared shift)."""
        if not (np.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
        g = -alpha * self.predict(features)
        return g - g.mean(axis=1, keepdims=True)


def fit_router(features: np.ndarray, targets: np.ndarray, ridge: float = RIDGE) -> Router:
    """Per member, ridge regression of its relative error on its standardised features."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if x.ndim != 3 or y.shape != x.shape[:2]:
        raise ValueError(f"features (n, K, F) and targets (n, K) disagree: {x.shape}, {y.shape}")
    if len(x) < 2 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("the router needs at least 2 items of finite features and targets")
    centre, scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-12)
    z = (x - centre) / scale
    f = x.shape[2]
    coef = np.empty((x.shape[1], f))
    bias = y.mean(axis=0)
    for k in range(x.shape[1]):
        gram = z[:, k].T @ z[:, k] + ridge * np.eye(f)
        coef[k] = np.linalg.solve(gram, z[:, k].T @ (y[:, k] - bias[k]))
    return Router(centre, scale, coef, bias)
