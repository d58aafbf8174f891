"""Compact variances: how far scores from what a collection stores are from the full variances.

    python benchmarks/variance.py [--pipeline default] [--docs 10000]

The first --docs texts and 100 queries of search.py's seeded "all" sample of the shared
datasets (STS, pairs, classification, SciFact and LIMIT texts). The texts are ingested into a
new collection under a temporary folder, as any user's would be (its variances stored as
coefficients on the pipeline's basis, `probembed.variance_basis`), read back, and scored
against the queries beside the pipeline's full variances: per score, the largest absolute
error and the score's range; for the std of the dot product, its largest error and median.
About 15 minutes on 2 cores for the default pipeline (the embedding cache keeps the texts for
later runs). Writes benchmarks/results/variance.json (docs/results.md's compact-variance table).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from search import DATA, LIMIT, datasets

from probembed.gaussian import Gaussian
from probembed.pipeline import Pipeline
from probembed.scoring import dot_variance, score_matrix
from probembed.store import Database, ingest
from probembed.variance_basis import reference_fit

OUT = Path(__file__).resolve().parent / "results" / "variance.json"
#: Scores whose error is measured: the inner-product ones and those with a log or a ratio.
SCORES = ("dot", "uec", "csd", "w2", "kl", "mls", "bhattacharyya")
QUERIES = 100
DOCS = 10_000


def variance_errors(stored: Gaussian, full: Gaussian, queries: Gaussian, beta: float) -> list:
    """Per score, the largest error the stored (compact) variances make against the full ones."""
    out = []
    for score in SCORES:
        want = score_matrix(queries, full, score, beta)
        got = score_matrix(queries, stored, score, beta)
        error, spread = float(np.abs(got - want).max()), float(np.ptp(want))
        out.append({"score": score, "max_abs_error": error, "score_range": spread})
    want = np.sqrt(dot_variance(queries, full))
    got = np.sqrt(dot_variance(queries, stored))
    error, median = float(np.abs(got - want).max()), float(np.median(want))
    return [*out, {"score": "std", "max_abs_error": error, "median_std": median}]


def stored(texts: list[str], pipe: Pipeline, folder: Path) -> tuple[Gaussian, str]:
    """The texts' Gaussians as a new collection stores them (row i: text i), and its column."""
    records = [{"id": str(i), "text": t} for i, t in enumerate(texts)]
    collection = Database(folder / "db", create=True).collection("variance")
    ingest(records, collection, pipe, progress=True)
    vectors = collection.vectors()
    order = np.argsort(vectors.ids.astype(int))
    return Gaussian(vectors.mean[order], vectors.var[order]), collection.variance_column


def main() -> None:
    """Measure, print, and write the results (at the default --docs, or to --out)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--pipeline", default="default", help="built-in name or directory")
    parser.add_argument("--docs", type=int, default=DOCS, help=f"texts stored [{DOCS}]")
    parser.add_argument("--out", type=Path, help=f"results JSON [{OUT} at the default --docs]")
    args = parser.parse_args()
    pipe = Pipeline.load(args.pipeline)
    corpus, query_texts = datasets(DATA, LIMIT, QUERIES)["all"]
    texts = corpus[: args.docs]
    with tempfile.TemporaryDirectory() as folder:
        kept, column = stored(texts, pipe, Path(folder))
    if column != "var_coef":
        raise SystemExit(f"{pipe.name}'s collections store whole variances: nothing to measure")
    full = pipe.encode(texts).gaussian
    queries = pipe.encode(query_texts).gaussian
    rows = variance_errors(kept, full, queries, pipe.score.beta)
    _, reference_error = reference_fit(pipe)
    print(json.dumps(rows, indent=1))
    print(f"the basis's std error on held-out reference texts: {reference_error:.2e}")
    out = args.out or (OUT if args.docs == DOCS else None)
    if out is not None:
        out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
