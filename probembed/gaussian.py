"""The batch of diagonal Gaussians that every layer of probembed passes to the next."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from probembed import atomic

#: Smallest squared norm a mean is divided by, so an all-zero row normalises to zero, not NaN.
SQ_NORM_FLOOR = 1e-12


def decimals(values: np.ndarray) -> list:
    """float32 values as (nested lists of) the Python floats their shortest decimals read as:
    `float(np.float32(0.6))` is 0.6000000238418579, noise that JSON and reprs then show."""
    return np.asarray(values, dtype=np.float32).astype(str).astype(np.float64).tolist()


def squared_norms(mean: np.ndarray) -> np.ndarray:
    """Row-wise squared L2 norms (n, 1) in float64, floored: what normalisation divides by."""
    sq_norm = np.einsum("nd,nd->n", mean, mean, dtype=np.float64)[:, None]
    return np.maximum(sq_norm, SQ_NORM_FLOOR)


def unit_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of x scaled to unit L2 norm in float64, and their squared norms (n, 1)."""
    x = np.asarray(x, dtype=np.float64)
    sq_norm = squared_norms(x)
    return x / np.sqrt(sq_norm), sq_norm


def _as_matrix(name: str, values: np.ndarray | Sequence) -> np.ndarray:
    """Coerce to a C-contiguous float32 (n, d) array, naming the argument when it is not one."""
    arr = np.ascontiguousarray(values, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"Gaussian {name} must be a 2-D (n, d) array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise ValueError(f"Gaussian {name} has a non-finite value (first in row {bad})")
    return arr


@dataclass(frozen=True, eq=False)
class Gaussian:
    """n diagonal Gaussians N(mean[i], diag var[i]) in d dimensions, validated once on creation."""

    mean: np.ndarray
    var: np.ndarray

    def __post_init__(self) -> None:
        mean = _as_matrix("mean", self.mean)
        var = _as_matrix("var", self.var)
        if mean.shape != var.shape:
            raise ValueError(
                f"Gaussian mean and var must have the same shape, got {mean.shape} and {var.shape}"
            )
        if var.size and float(var.min()) < 0:
            raise ValueError(f"Gaussian var must be >= 0, got a minimum of {float(var.min()):.3g}")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "var", var)

    @classmethod
    def deterministic(cls, mean: np.ndarray) -> Gaussian:
        """Zero-variance Gaussians, so deterministic vectors fit the same API.

        The variances are a read-only broadcast of one zero: no memory for them, which a
        search scoring many rows' means alone would otherwise allocate and check.
        """
        mean = _as_matrix("mean", mean)
        return cls.unchecked(mean, np.broadcast_to(np.float32(0.0), mean.shape))

    def __len__(self) -> int:
        return self.mean.shape[0]

    @property
    def dim(self) -> int:
        """Number of dimensions d."""
        return self.mean.shape[1]

    def __getitem__(self, index: int | slice | np.ndarray | Sequence[int]) -> Gaussian:
        """Select rows; an integer keeps the batch axis so the result is still a Gaussian."""
        if isinstance(index, (int, np.integer)):
            if not -len(self) <= index < len(self):
                raise IndexError(f"row {int(index)} is out of range for {len(self)} Gaussians")
            index = slice(int(index), int(index) + 1) if index != -1 else slice(-1, None)
        mean, var = self.mean[index], self.var[index]
        if mean.ndim != 2:
            raise IndexError(f"Gaussian rows must be selected along the batch axis, got {index!r}")
        return Gaussian.unchecked(np.ascontiguousarray(mean), np.ascontiguousarray(var))

    @classmethod
    def unchecked(cls, mean: np.ndarray, var: np.ndarray) -> Gaussian:
        """Wrap contiguous float32 rows that were validated before (a Gaussian's own rows, or
        rows this library stored from Gaussians): in search the checks cost more than scoring."""
        g = object.__new__(cls)
        object.__setattr__(g, "mean", mean)
        object.__setattr__(g, "var", var)
        return g

    def normalize(self) -> Gaussian:
        """L2-normalise the means; the map x -> x/|mu| scales each variance by 1/|mu|^2."""
        sq_norm = squared_norms(self.mean)
        return Gaussian(
            (self.mean / np.sqrt(sq_norm)).astype(np.float32),
            (self.var / sq_norm).astype(np.float32),
        )

    def total_variance(self) -> np.ndarray:
        """Sum of variances per row, in float64: of unit-norm means, the uncertainty fusion
        weighs by (`fusion.uncertainty` divides it by |μ|², whatever the means' norm)."""
        return self.var.sum(axis=1, dtype=np.float64)

    @staticmethod
    def concat(parts: Sequence[Gaussian], axis: int = 0) -> Gaussian:
        """Stack batches (axis 0) or join the dimensions of aligned batches (axis 1)."""
        if not parts:
            raise ValueError("Gaussian.concat needs at least one Gaussian")
        if axis not in (0, 1):
            raise ValueError(f"Gaussian.concat axis must be 0 or 1, got {axis}")
        return Gaussian(
            np.concatenate([p.mean for p in parts], axis=axis),
            np.concatenate([p.var for p in parts], axis=axis),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write to an .npz file atomically, so a crash never leaves a half-written file."""
        atomic.save_npz(path, mean=self.mean, var=self.var)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Gaussian:
        """Read a file written by `save`, failing clearly on a file that is not one."""
        try:
            data = atomic.load_npz(path)
            return cls(data["mean"], data["var"])
        except (KeyError, ValueError, OSError) as exc:
            raise ValueError(f"{path} is not a saved Gaussian: {exc}") from exc

    def __repr__(self) -> str:
        return f"Gaussian(n={len(self)}, d={self.dim})"
