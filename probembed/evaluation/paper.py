"""The published UEC (MLAI-Yonsei/UEC) as rows of the quality table, beside our own methods.

Its fusion is `uec-paper` (softmax(Σ_d 1/ṽ_d / T), ṽ = σ²/‖σ²‖², T = 2); its similarity comes
in two forms in its code: `uec.py` divides the dot by √(1 + π/8·β·Var), which is our `uec`
score, and its MTEB script divides the cosine by 1 + β/π·Var, our `uec-mteb`. β = 0.1 as its
README runs. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from probembed.encoders import REGISTRY
from probembed.evaluation.harness import COSINE, Method
from probembed.fusion import FusionMode, parse_mode
from probembed.pipeline import FusionConfig, ScoreConfig

#: The variance penalty the published UEC is run with (its MTEB README: --beta 0.1).
PAPER_BETA = 0.1


def paper_mode(models: Sequence[str]) -> FusionMode:
    """Sum, as published, when every member has one dimension; else the concat analogue."""
    dims = {name: spec.dim for name, spec in REGISTRY.items()}
    if not models:
        raise ValueError("paper_methods needs at least one model name")
    unknown = [m for m in models if m not in dims]
    if unknown:
        raise ValueError(
            f"paper_methods picks sum or concat by the members' dimensions, but {unknown} "
            f"are not built-in encoders ({', '.join(sorted(dims))}); pass mode= instead"
        )
    return FusionMode.SUM if len({dims[m] for m in models}) == 1 else FusionMode.CONCAT


def paper_methods(models: Sequence[str], mode: FusionMode | str | None = None) -> list[Method]:
    """uec-paper fused means scored as uec.py, as the MTEB script, and by plain dot.

    The mode is sum when the models share a dimension (as the paper runs it), else concat;
    `mode` overrides that. Row names say which similarity: "uec-paper" (uec.py's), and
    "uec-paper:mteb" and "uec-paper:dot" on the same fused Gaussians.
    """
    chosen = paper_mode(models) if mode is None else parse_mode(mode)
    fusion = FusionConfig("uec-paper", str(chosen))
    return [
        Method("uec-paper", fusion, ScoreConfig("uec", PAPER_BETA)),
        Method("uec-paper:mteb", fusion, ScoreConfig("uec-mteb", PAPER_BETA)),
        Method("uec-paper:dot", fusion, COSINE),
    ]
