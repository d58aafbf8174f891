"""Whether a pipeline's variance verdict depends on its fusion: `default`'s members under other
fusions, each fitted on the reference texts and set beside the verdict `default` ships.

    python benchmarks/verdict_fusion.py

A verdict held for one fingerprint is reused only by pipelines of that fingerprint (members
and fusion; `variance_basis.verdict_fits`), so a pipeline `probembed tune` saves under another
fusion fits its own. Per fusion: whether its fingerprint is default's, its own fit's std error
and floor, how far each block's basis vectors turn from the shipped ones (largest 1 - |cos|),
and the shipped basis applied to its rows: that basis's std error there, and the share of its
fused variances below the shipped floor (read back raised to it). "tuned" is the fusion
`probembed tune default` chose on the first 150 pairs of SICK's dev split. Seconds, with the
reference texts in the embedding cache. Writes benchmarks/results/verdict_fusion.json.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from cli_exit import run_config

from probembed.evaluation.report import write_json
from probembed.pipeline import FusionConfig, Pipeline
from probembed.variance_basis import REFERENCE_ROWS, fitted_verdict, reference_texts

OUT = Path(__file__).resolve().parent / "results" / "verdict_fusion.json"
INF = float("inf")
#: Fusions of default's three members (minilm, paraphrase-l3, use), by label.
FUSIONS = {
    "uniform prior": FusionConfig("uec", temperature=INF, prior=(1 / 3, 1 / 3, 1 / 3)),
    "tuned (prior 0.1/0.6/0.3)": FusionConfig("uec", temperature=INF, prior=(0.1, 0.6, 0.3)),
    "prior 0.9/0.05/0.05": FusionConfig("uec", temperature=INF, prior=(0.9, 0.05, 0.05)),
    "T=1 (weights by text)": FusionConfig("uec", temperature=1.0, prior=(0.6, 0.2, 0.2)),
}


def compared(pipe: Pipeline, label: str, fusion: FusionConfig) -> dict:
    """One fusion's own verdict, and the shipped basis on its reference rows."""
    shipped = pipe.variance_verdict
    if shipped is None or shipped.basis is None:
        raise SystemExit(f"{pipe.name} ships no basis to compare with")
    other = pipe.with_fusion(fusion)
    own = fitted_verdict(other)
    if own.basis is None:
        raise SystemExit(f"{label}: its own fit keeps no basis (std error {own.std_error:.2e})")
    g = other.encode(reference_texts()).gaussian
    turned = [
        float(1 - np.abs(np.sum(a.astype(np.float64) * b, axis=1)).min())
        for a, b in zip(own.basis.bases, shipped.basis.bases, strict=True)
    ]
    return {
        "fusion": label,
        "same_fingerprint": other.fingerprint == pipe.fingerprint,
        "own_std_error": own.std_error,
        "own_floor": own.basis.floor,
        "shipped_floor": shipped.basis.floor,
        "basis_turn": turned,
        "shipped_std_error": shipped.basis.std_error(g[REFERENCE_ROWS:]),
        "below_shipped_floor": float((g.var < shipped.basis.floor).mean()),
    }


def main() -> None:
    """Compare each fusion's verdict with the shipped one; print and write the rows."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    load_before = os.getloadavg()
    pipe = Pipeline.load("default")
    rows = [compared(pipe, "shipped", pipe.fusion)]
    rows += [compared(pipe, label, fusion) for label, fusion in FUSIONS.items()]
    for row in rows:
        print(row, flush=True)
    write_json(args.out, rows, run_config(1, load_before))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
