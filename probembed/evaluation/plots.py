"""PNG figures for reports: risk–coverage, quality per uncertainty bin, reliability of hits.

Figures are drawn on an explicit Agg canvas, never through pyplot, so plotting neither needs a
display nor changes matplotlib's global backend for the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Curve = tuple[ArrayLike, ArrayLike]


def plot_risk_coverage(
    curves: Mapping[str, Curve], path: str | Path, title: str = "Risk–coverage"
) -> Path:
    """Draw mean quality against coverage, one line per method, to compare selective answering."""
    figure, axes = _new_figure()
    for label, (coverage, quality) in _validate_curves(curves).items():
        axes.plot(coverage, quality, label=label)
    axes.set(xlabel="coverage (most confident first)", ylabel="mean quality", xlim=(0, 1))
    return _save(figure, axes, path, title)


def plot_binned(
    bins: Mapping[str, Curve],
    path: str | Path,
    title: str = "Quality per uncertainty bin",
    xlabel: str = "uncertainty (bin mean)",
    ylabel: str = "mean quality",
) -> Path:
    """Draw mean quality per uncertainty bin, one marked line per signal, to show the trend.

    Lines share one x-axis: give signals of different scales a common one, such as each
    signal's quantile (`report.bin_quantiles`), and say so in `xlabel`."""
    figure, axes = _new_figure()
    for label, (centers, quality) in _validate_curves(bins).items():
        axes.plot(centers, quality, marker="o", label=label)
    axes.set(xlabel=xlabel, ylabel=ylabel)
    return _save(figure, axes, path, title)


def plot_reliability(
    curves: Mapping[str, Curve],
    path: str | Path,
    title: str = "Reliability: observed rate per predicted-probability bin",
    counts: ArrayLike | None = None,
) -> Path:
    """Observed frequency against mean predicted probability per bin, beside the diagonal.

    `curves` maps a label to (mean predicted, observed rate) per non-empty bin; `counts`, the
    items per bin of the first curve, is drawn as bars on a second axis to show where mass is.
    """
    figure, axes = _new_figure()
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    for label, (predicted, observed) in _validate_curves(curves).items():
        axes.plot(predicted, observed, marker="o", label=label)
    if counts is not None:
        predicted = np.asarray(next(iter(curves.values()))[0], dtype=np.float64)
        if np.shape(counts) != predicted.shape:
            raise ValueError(f"counts has shape {np.shape(counts)}; expected {predicted.shape}")
        share = axes.twinx()
        share.bar(predicted, counts, width=0.03, alpha=0.25, color="grey")
        share.set(ylabel="items per bin", yscale="log")
    axes.set(xlabel="predicted probability", ylabel="observed frequency", xlim=(0, 1), ylim=(0, 1))
    return _save(figure, axes, path, title)


def _new_figure() -> tuple[Figure, Axes]:
    """Create a figure bound to an Agg canvas (matplotlib is imported only when plotting)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _save(figure: Figure, axes: Axes, path: str | Path, title: str, legend: bool = True) -> Path:
    """Title, grid and legend the axes, then write the PNG, creating its folder."""
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if legend:
        axes.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=120)
    return path


def _validate_curves(curves: Mapping[str, Curve]) -> Mapping[str, Curve]:
    """Refuse an empty mapping or a curve whose x and y lengths differ."""
    if not curves:
        raise ValueError("nothing to plot: pass {label: (x, y)} with at least one curve")
    for label, (x, y) in curves.items():
        if np.shape(x) != np.shape(y) or np.ndim(x) != 1:
            raise ValueError(f"curve {label!r}: x {np.shape(x)} and y {np.shape(y)} must match")
    return curves
