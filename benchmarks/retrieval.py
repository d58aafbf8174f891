"""Which built-in should index documents: `retrieval` or `default`, also where neither was tuned.

    python benchmarks/retrieval.py [--out PATH]

`retrieval` is `default`'s candidate members with the fusion tuned on the SciFact train qrels
only (`scripts/build_pipelines.py`, `TUNED_ON`); `default` is tuned on the tuning splits of all
seven LODO datasets at once. Both are scored by nDCG@10 through the evaluation harness on

- SciFact test: the test split of the one dataset `retrieval` was tuned on (`make run`'s);
- LIMIT-small test: 1,000 queries over 46 documents, seen by no tuning step;
- QNLI answers as retrieval: each of the 2,702 questions of `pairs/qnli-answers.tsv` against
  every distinct answer sentence, seen by no fusion tuning (its pairs are in the sample every
  member's variance was fitted on, for both pipelines alike).

Per pipeline: its fusion and score on the prior; the same tilted by the collection's own
member agreement (what a collection's search uses, γ from the pipeline); `dot` on the same
tilted means. On SciFact also as `make run` computes it: the corpus ingested into a temporary
LanceDB collection and searched (dense with the pipeline's score and with `dot`, and hybrid
with BM25), the collection measuring its members' agreement on its stored rows; with the
bytes a stored item takes. Beside them
each candidate member alone and the plain mean of the four cosines, and the standard error of
the per-query difference `retrieval` − `default` (both on their prior): what the query count
can resolve. And `retrieval`'s own tuning repeated at two grid steps (0.2, as `default`, and
the 0.1 it ships with), each choice scored on SciFact test: what the step chose. Writes
benchmarks/results/retrieval.json (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import sem

from probembed.evaluation.datasets import RetrievalDataset, load_dataset, load_pairs
from probembed.evaluation.harness import Method, embed, evaluate, searched_as
from probembed.evaluation.lodo import (
    Scores,
    embed_split,
    load_tasks,
    tune_families,
)
from probembed.evaluation.metrics import retrieval_metrics, run_from_results
from probembed.evaluation.recipes import candidate_pipeline, sample_pairs
from probembed.evaluation.tuning import without_unweighted
from probembed.paths import datasets_dir
from probembed.pipeline import FusionConfig, Pipeline, ScoreConfig
from probembed.store import Database, ingest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
DATA = datasets_dir()
OUT = ROOT / "benchmarks" / "results" / "retrieval.json"
PIPELINES = ("default", "retrieval")
METRIC = "ndcg@10"


def pairs_as_retrieval(path: Path) -> RetrievalDataset:
    """Question -> answer pairs as a corpus of the distinct answers and one judged answer each."""
    pairs = load_pairs(path)
    ids = {text: f"d{i}" for i, text in enumerate(dict.fromkeys(pairs.text_b))}
    queries = {f"q{i}": q for i, q in enumerate(pairs.text_a)}
    qrels = {f"q{i}": {ids[a]: 1} for i, a in enumerate(pairs.text_b)}
    return RetrievalDataset(pairs.name, "all", {d: t for t, d in ids.items()}, queries, qrels)


def datasets() -> dict[str, RetrievalDataset]:
    """The three retrieval test sets, by name."""
    scifact = load_dataset(DATA / "retrieval" / "scifact", "test")
    limit = load_dataset(DATA / "retrieval" / "limit-small", "test")
    assert isinstance(scifact, RetrievalDataset) and isinstance(limit, RetrievalDataset)
    qnli = pairs_as_retrieval(DATA / "pairs" / "qnli-answers.tsv")
    return {"scifact": scifact, "limit-small": limit, "qnli": qnli}


def pipeline_rows(pipe: Pipeline, dataset: RetrievalDataset) -> tuple[dict, np.ndarray]:
    """A built-in's nDCG@10 on the prior, tilted by the corpus's agreement, and dot when tilted;
    with the per-query nDCG@10 on the prior."""
    embedded = embed(pipe, dataset, progress=True)
    collection = searched_as(pipe, embedded, dataset, "collection")
    tilted = collection.fusion
    methods = {
        "prior": Method("prior", pipe.fusion, pipe.score),
        "collection": collection,
        "collection, dot": Method("dot", tilted, ScoreConfig("dot")),
    }
    outcomes = {k: evaluate(embedded, dataset, m) for k, m in methods.items()}
    out: dict = {k: 100 * o.metrics[METRIC] for k, o in outcomes.items()}
    out["weights"] = None
    if tilted != pipe.fusion:
        assert tilted.prior is not None  # searched_as tilts a uec fusion's prior (the built-ins')
        out["weights"] = [round(w, 4) for w in tilted.prior]
    return out, 100 * np.asarray(outcomes["prior"].per_item[METRIC], dtype=np.float64)


def collection_rows(pipe: Pipeline, dataset: RetrievalDataset, corpus: Path) -> dict:
    """nDCG@10 of the test queries searched in a collection of the corpus, as `make run` does,
    the collection's bytes per item and its adapted weights."""
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(tmp, create=True).collection("corpus")
        ingest(corpus, collection, pipe, progress=True)
        searcher = collection.searcher()
        query_ids = list(dataset.queries)
        texts = [dataset.queries[q] for q in query_ids]
        fused = pipe.encode(texts)
        out: dict[str, float | list[float] | None] = {}
        searches = {
            f"dense {pipe.score.name}": (pipe.score.name, False),
            "dense dot": ("dot", False),
            f"hybrid {pipe.score.name}": (pipe.score.name, True),
        }
        for name, (score, hybrid) in searches.items():  # k = 11: 10 after a self-match
            results = searcher.search_fused(fused, k=11, score=score, hybrid=hybrid, texts=texts)
            run = run_from_results(query_ids, results)
            out[name] = 100 * retrieval_metrics(dataset.qrels, run, [METRIC])[METRIC]
        stats = collection.stats()
        out["bytes_per_item"] = stats.bytes_per_item
        # The collection samples its rows for the agreement in id order, the harness in
        # corpus order: the weights say how far the two samples tilt apart.
        weights = stats.adapted_weights
        out["weights"] = None if weights is None else [round(w, 4) for w in weights.values()]
        return out


def member_rows(pipe: Pipeline, dataset: RetrievalDataset) -> dict[str, float]:
    """Each candidate member alone and the plain mean of their cosines."""
    embedded = embed(pipe, dataset, progress=True)
    k = len(pipe.models)
    methods = [Method(m, FusionConfig(f"single:{m}")) for m in pipe.models]
    methods.append(Method("mean", FusionConfig("weighted", weights=(1 / k,) * k)))
    return {m.name: 100 * evaluate(embedded, dataset, m).metrics[METRIC] for m in methods}


def grid_rows(candidates: Pipeline) -> dict[str, dict]:
    """`retrieval`'s tuning (scripts/build_pipelines.py's steps on the SciFact train qrels) at
    the 0.2 grid step `default` uses and the 0.1 it ships with, each choice scored on test."""
    task = load_tasks(DATA, ["scifact"])["scifact"]
    splits = {
        ("scifact", role): embed_split(candidates, data, progress=True)
        for role, data in (("tune", task.tune), ("test", task.test))
    }
    scores = Scores(splits)
    out = {}
    for step in (0.2, 0.1):
        choice = tune_families(scores, len(candidates.models), step)
        setting = choice.settings["uec+adapted"]
        base = choice.settings["uec"](splits["scifact", "tune"])
        tuned = Pipeline(candidates.members, base.fusion, base.score, "retrieval", cache=False)
        kept = without_unweighted(tuned)
        out[str(step)] = {
            "models": list(kept.models),
            "prior": kept.fusion.prior,
            "beta": kept.score.beta,
            "gamma": choice.gamma["uec+adapted"],
            "train": 100 * scores.figure("scifact", "tune", setting),
            "test": 100 * scores.figure("scifact", "test", setting),
        }
    return out


def main() -> None:
    """Score both built-ins and the members on the three sets; write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON to write")
    args = parser.parse_args()
    candidates = candidate_pipeline("default", sample_pairs(DATA / "pairs"))
    pipelines = {p: Pipeline.load(p) for p in PIPELINES}
    results: dict[str, dict] = {}
    for name, dataset in datasets().items():
        print(f"{name}: {len(dataset.queries)} queries, {len(dataset.corpus)} documents")
        scored = {p: pipeline_rows(pipe, dataset) for p, pipe in pipelines.items()}
        row: dict = {p: figures for p, (figures, _) in scored.items()}
        difference = scored["retrieval"][1] - scored["default"][1]
        row["difference_prior"] = {"mean": float(difference.mean()), "se": float(sem(difference))}
        row["members"] = member_rows(candidates, dataset)
        if name == "scifact":
            corpus = DATA / "retrieval" / "scifact"
            row["as make run searches"] = {
                p: collection_rows(pipe, dataset, corpus) for p, pipe in pipelines.items()
            }
            row["retrieval's grid step"] = grid_rows(candidates)
        results[name] = row
        print(json.dumps(row, indent=1))
    out = {
        "metric": METRIC,
        "pipelines": {
            p: {"models": pipe.models, "prior": pipe.fusion.prior, "fingerprint": pipe.fingerprint}
            for p, pipe in pipelines.items()
        },
        "results": results,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
