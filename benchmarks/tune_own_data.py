"""`probembed tune` on a dataset of one judged split, as a user would run it: the figures of
"Tune on your own data" in docs/cli.md.

    python benchmarks/tune_own_data.py [--seed 0]

LIMIT-small judges its 1,000 queries in one split (test). The split is cut in a temporary
BEIR folder (corpus.jsonl and queries.jsonl copied whole; the datasets folder is only read):
the judged query ids in their order of first appearance in qrels/test.tsv, permuted by
`numpy.random.default_rng(seed)` (seed 0), the first half (rounded down) as qrels/dev.tsv and
the rest as qrels/test.tsv, each query's qrels lines kept as they are.

Then, through the functions the commands call: `probembed tune retrieval DIR --out TUNED`
(dev, the default split: the chosen settings, dev nDCG@10 of `retrieval`, each member and the
tuned pipeline); `probembed eval DIR --split test [--hybrid]` for `retrieval` and the tuned
pipeline; `probembed eval DIR --split test --compare` for each member alone on test; and
`probembed ingest DIR/corpus.jsonl` + `probembed search` of every test query (k = 10) for each
pipeline's calibration: the mean p_relevant of the top-10 hits against the share of them
judged relevant. Writes benchmarks/results/tune_own_data.json.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import reported_metrics
from probembed.evaluation.pipeline_tuning import tuned_and_calibrated
from probembed.evaluation.report import compare, write_json
from probembed.interfaces.eval_commands import load_test_and_dev, own_figures
from probembed.interfaces.tune_command import load_split
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.store import Database, ingest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "tune_own_data.json"
LIMIT = datasets_dir() / "retrieval" / "limit-small"
START = "retrieval"
METRIC = "ndcg@10"
K = 10


def split_limit(source: Path, target: Path, seed: int) -> dict[str, int]:
    """Copy a one-split BEIR folder into `target` with its judged queries cut into dev and test
    halves by a seeded permutation; the number of judged queries in each."""
    with (source / "qrels" / "test.tsv").open(newline="", encoding="utf-8") as f:
        header, *lines = list(csv.reader(f, delimiter="\t"))
    ids = list(dict.fromkeys(line[0] for line in lines))
    order = np.random.default_rng(seed).permutation(len(ids))
    dev = {ids[i] for i in order[: len(ids) // 2]}
    (target / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copyfile(source / name, target / name)
    for split, keep in (("dev", True), ("test", False)):
        with (target / "qrels" / f"{split}.tsv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerows([header, *(line for line in lines if (line[0] in dev) == keep)])
    return {"dev": len(dev), "test": len(ids) - len(dev)}


def ndcg_row(pipeline: str, split: str, search: str, value: float) -> dict:
    """One nDCG@10 row of the results."""
    return {"table": "ndcg", "pipeline": pipeline, "split": split, "search": search,
            "metric": METRIC, "value": value}  # fmt: skip


def tuned_on_dev(folder: Path, out: Path, seed: int) -> list[dict]:
    """`probembed tune retrieval FOLDER --out OUT`: the chosen settings and dev figures."""
    dev = load_split(folder, "dev", strict=False)
    result = tuned_and_calibrated(Pipeline.load(START), dev, folder, "dev", out.name, seed)
    result.pipeline.save(out)
    names = {f"{START} (start)": START}
    rows = [ndcg_row(names.get(m, m), "dev", "dense", v) for m, v in result.figures.items()]
    settings = {"table": "settings", "pipeline": "tuned", "settings": result.settings}
    return [settings | {"dropped": list(result.dropped)}, *rows]


def test_split(folder: Path) -> RetrievalDataset:
    """The test split as `probembed eval FOLDER --split test` reads it."""
    test, _ = load_test_and_dev(folder, "test", False, None, {})
    assert isinstance(test, RetrievalDataset)
    return test


def on_test(folder: Path, pipelines: dict[str, str]) -> list[dict]:
    """`probembed eval FOLDER --split test [--hybrid]` of each pipeline, and each member of
    the first alone (`--compare`'s single rows)."""
    test = test_split(folder)
    metrics = reported_metrics(test)  # eval's default: nDCG@10, Recall@100 and MRR@10
    rows = []
    for label, name in pipelines.items():
        pipe = Pipeline.load(name)
        for search, hybrid in (("dense", False), ("hybrid", True)):
            figures, _, _ = own_figures(pipe, test, folder, metrics, hybrid, False, False)
            rows.append(ndcg_row(label, "test", search, figures[METRIC]))
            print(f"test {label} {search}: {100 * rows[-1]['value']:.2f}", flush=True)
    start = Pipeline.load(pipelines[START])
    for row in compare(start, test, None).rows:
        if row["method"].startswith("single:") and row["metric"] == METRIC:
            rows.append(ndcg_row(row["method"], "test", "dense", row["value"]))
    return rows


def calibration(folder: Path, db: Path, pipelines: dict[str, str]) -> list[dict]:
    """Each pipeline's corpus ingested and every test query searched (k = 10): the mean
    p_relevant of the hits against the share of them judged relevant."""
    test = test_split(folder)
    qids = list(test.queries)
    rows = []
    for label, name in pipelines.items():
        collection = Database(db, create=True).collection(label)
        ingest(folder / "corpus.jsonl", collection, name, progress=True)
        results = collection.search([test.queries[q] for q in qids], K)
        hits = [(q, h) for q, r in zip(qids, results, strict=True) for h in r["hits"]]
        p = np.array([h["p_relevant"] for _, h in hits], dtype=np.float64)
        relevant = np.array([test.qrels[q].get(h["id"], 0) > 0 for q, h in hits])
        rows.append({"table": "calibration", "pipeline": label, "split": "test", "k": K,
                     "hits": len(hits), "mean_p_relevant": float(p.mean()),
                     "share_relevant": float(relevant.mean())})  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    """Split, tune on dev, measure on test, write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the dev/test cut")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="probembed-tune-own-data-") as tmp:
        folder, tuned = Path(tmp) / "limit-small", Path(tmp) / "limit-small-tuned"
        queries = split_limit(LIMIT, folder, args.seed)
        rows = tuned_on_dev(folder, tuned, seed=0)
        pipelines = {START: START, "tuned": str(tuned)}
        rows += on_test(folder, pipelines)
        rows += calibration(folder, Path(tmp) / "db", pipelines)
        documents = sum(1 for _ in (folder / "corpus.jsonl").open(encoding="utf-8"))
    config = {
        "dataset": "retrieval/limit-small",
        "split_rule": "judged query ids of qrels/test.tsv in first-appearance order, permuted "
        "by numpy.random.default_rng(seed); first half dev, the rest test",
        "seed": args.seed,
        "queries": queries,
        "documents": documents,
        "start": START,
        "tune": {"split": "dev", "calibrator_seed": 0},
        "k": K,
    }
    write_json(args.out, rows, config)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
