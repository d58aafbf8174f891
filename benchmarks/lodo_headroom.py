"""How much could knowing a new domain gain a static ensemble, and is +0.5 above the noise?

    python benchmarks/lodo_headroom.py [--datasets stsb sick ...] [--step 0.2]

The leave-one-dataset-out target asks an adaptive ensemble to beat the static weights tuned
on the other datasets by +0.5 on three of seven left-out datasets. A label-free method that
adapts to a domain can at best find the weights that the domain's own labels would pick. So,
for each of the seven datasets and the same four members and weight grid as
`benchmarks/lodo.py`, this scores on the test split the static weights chosen on:

- lodo: the other six datasets' tuning splits (the `static` row of lodo.json);
- in domain: the dataset's own tuning split (forbidden by the protocol: what perfect
  domain-level adaptation could reach with the same grid);
- test oracle: the test split itself (a ceiling that overfits the test; not a method),

and the paired bootstrap 95% interval (2,000 resamples of test items, seeded) of each one's
difference from lodo, which says how large a difference the test split can resolve.
Writes benchmarks/results/lodo_headroom.json.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from probembed.evaluation.lodo import LODO_DATASETS, Scores, candidate_splits, headroom_rows
from probembed.evaluation.paired import BOOTSTRAP
from probembed.evaluation.report import write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> None:
    """Embed every split, choose the static weights three ways, compare them on each test."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(LODO_DATASETS))
    parser.add_argument("--step", type=float, default=0.2, help="static weight grid step")
    parser.add_argument("--out", type=Path, default=RESULTS / "lodo_headroom.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pipe, _, splits = candidate_splits()  # every fold tunes on all the others
    rows = headroom_rows(Scores(splits), len(pipe.models), args.datasets, args.step)
    for name in args.datasets:
        shown = ", ".join(
            f"{r['chosen_on']} {100 * r['value']:.2f}" for r in rows if r["left_out"] == name
        )
        print(f"{name}: {shown}", flush=True)
    config = {
        "models": list(pipe.models),
        "fingerprint": pipe.fingerprint,
        "static_step": args.step,
        "datasets": {n: LODO_DATASETS[n] for n in args.datasets},
        "bootstrap": BOOTSTRAP,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
