"""When should an application not answer? Abstention signals of a built-in on SciFact.

`p_relevant` is calibrated on SciFact train queries, every one of which has a relevant
document in the collection; an application also meets questions its collection cannot
answer. This benchmark makes such questions from SciFact itself: the judged queries of a
split are cut by a seeded half into answerable and unanswerable ones, and the collection is
SciFact's corpus without every document judged relevant to an unanswerable query (an
answerable query that loses a relevant document that way is dropped: it is neither). A
seeded sample of Banking77 texts adds off-topic questions. Each question is searched through
`Collection.search` (k = 10, dense and hybrid) on a collection of that corpus in a temporary
directory, indexed with the shipped pipeline (`retrieval` unless --pipeline says) as
`probembed ingest` does; its embeddings come from the pipeline's cache after the first run.

Per signal (the first hit's p_relevant, the query's confidence, the first hit's score and
std, the gap between the first two scores), on SciFact test: AUROC of answerable against
unanswerable and against off-topic questions (a std counts lower as surer), with seeded
bootstrap 95% intervals; and for each `min_p_relevant` of THRESHOLDS, the share of each group
that keeps at least one hit, searched with that threshold. A logistic regression on the five
signals is fitted on SciFact *train* under the same protocol (its own half, its own corpus,
Banking77 train texts) and scored on test beside them, with a paired bootstrap interval of
its AUROC minus the best single signal's.

    python benchmarks/abstention.py [--pipeline retrieval|default] [--out FILE]

Writes benchmarks/results/abstention[-NAME].json and plots/abstention[-NAME].png.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import Pipeline as SklearnPipeline
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import probembed
from probembed.documents import Record, read_jsonl
from probembed.evaluation import load_dataset, plot_binned
from probembed.evaluation.datasets import ClassificationDataset, RetrievalDataset
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.progress import progress_bar
from probembed.store import Collection, Database, ingest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
BANKING77 = datasets_dir() / "classification" / "banking77"
SEED = 0
K = 10
THRESHOLDS = (0.04, 0.1, 0.2, 0.3, 0.5)
#: Off-topic questions per split (a seeded sample of Banking77's texts of the same split).
OFF_TOPIC = 300
#: Resamples of the questions for the bootstrap intervals (seeded).
RESAMPLES = 2000
#: Questions per search call, so the bar moves.
SLICE = 50
GROUPS = ("answerable", "unanswerable", "off_topic")
#: Each signal's direction, fixed before measuring: +1 where higher reads as "answerable".
SIGNALS = {"top_p_relevant": 1, "confidence": 1, "top_score": 1, "top_std": -1, "top_gap": 1}
LEARNED = "logistic regression on the five signals (fitted on train)"


@dataclass(frozen=True)
class Protocol:
    """One split's questions by group, and the corpus documents left out to make them."""

    questions: dict[str, list[str]]
    removed: frozenset[str]
    lost: int


def protocol(split: str, off_topic: Sequence[str], seed: int = SEED) -> Protocol:
    """Cut a split's judged queries into answerable and unanswerable halves (seeded), so the
    unanswerable ones are made so by removing their relevant documents from the corpus."""
    dataset = load_dataset(SCIFACT, split)
    assert isinstance(dataset, RetrievalDataset)
    qids = sorted(dataset.queries)
    order = np.random.default_rng(seed).permutation(len(qids))
    half = len(qids) // 2
    unanswerable = [qids[i] for i in order[:half]]
    candidates = [qids[i] for i in order[half:]]
    relevant = {q: {d for d, grade in dataset.qrels[q].items() if grade > 0} for q in qids}
    removed = frozenset().union(*(relevant[q] for q in unanswerable))
    answerable = [q for q in candidates if not relevant[q] & removed]
    sample = np.random.default_rng(seed).choice(len(off_topic), OFF_TOPIC, replace=False)
    questions = {
        "answerable": [dataset.queries[q] for q in answerable],
        "unanswerable": [dataset.queries[q] for q in unanswerable],
        "off_topic": [off_topic[i] for i in np.sort(sample)],
    }
    return Protocol(questions, removed, len(candidates) - len(answerable))


def corpus_without(removed: frozenset[str]) -> list[Record]:
    """SciFact's corpus as `probembed ingest` reads it, less the removed documents."""
    records = []
    for item in read_jsonl(SCIFACT / "corpus.jsonl"):
        if not isinstance(item, Record):
            raise SystemExit(f"{SCIFACT / 'corpus.jsonl'}: {item}")
        if item.id not in removed:
            records.append(item)
    return records


def searched(
    collection: Collection, texts: list[str], hybrid: bool, min_p: float | None = None
) -> list[dict]:
    """Every question's result through the front door, in slices so the bar moves."""
    results: list[dict] = []
    label = f"{'hybrid' if hybrid else 'dense'} search" + (f", min_p {min_p}" if min_p else "")
    with progress_bar(label, len(texts)) as bar:
        for start in range(0, len(texts), SLICE):
            part = texts[start : start + SLICE]
            found = collection.search(part, k=K, hybrid=hybrid, min_p_relevant=min_p)
            results.extend(dict(r) for r in found)
            bar.advance(len(part))
    return results


def signals_of(results: list[dict]) -> dict[str, np.ndarray]:
    """The five per-question signals an application can read off a result, in float64."""
    columns: dict[str, list[float]] = {name: [] for name in SIGNALS}
    for result in results:
        first, second = result["hits"][0], result["hits"][1]
        assert result["confidence"] is not None and first["p_relevant"] is not None
        columns["top_p_relevant"].append(first["p_relevant"])
        columns["confidence"].append(result["confidence"])
        columns["top_score"].append(first["score"])
        columns["top_std"].append(first["std"])
        columns["top_gap"].append(first["score"] - second["score"])
    return {name: np.asarray(values, dtype=np.float64) for name, values in columns.items()}


def matrix(signals: dict[str, np.ndarray]) -> np.ndarray:
    """The signals as columns of one float64 matrix, in SIGNALS' order."""
    return np.column_stack([signals[name] for name in SIGNALS])


def group_signals(
    collection: Collection, questions: dict[str, list[str]], hybrid: bool
) -> dict[str, dict[str, np.ndarray]]:
    """Each group's signals of one kind of search."""
    return {g: signals_of(searched(collection, questions[g], hybrid)) for g in GROUPS}


def stratified_bootstrap(
    statistic: Callable[[np.ndarray, np.ndarray], float], n_pos: int, n_neg: int
) -> tuple[float, list[float]]:
    """A statistic of the positive and negative questions picked by index, and its 95%
    interval over seeded resamples of each group on its own (sizes fixed, as AUROC needs)."""
    rng = np.random.default_rng(SEED)
    draws = [
        statistic(rng.integers(0, n_pos, n_pos), rng.integers(0, n_neg, n_neg))
        for _ in range(RESAMPLES)
    ]
    whole = statistic(np.arange(n_pos), np.arange(n_neg))
    return whole, np.percentile(draws, [2.5, 97.5]).tolist()


def auroc_of(
    positive: np.ndarray, negative: np.ndarray
) -> Callable[[np.ndarray, np.ndarray], float]:
    """AUROC of the picked positive values over the picked negative ones (sklearn)."""
    labels = np.r_[np.ones(len(positive)), np.zeros(len(negative))]
    return lambda pos, neg: float(roc_auc_score(labels, np.r_[positive[pos], negative[neg]]))


def auroc_interval(positive: np.ndarray, negative: np.ndarray) -> dict:
    """AUROC of positive over negative values, with its bootstrap 95% interval."""
    value, interval = stratified_bootstrap(
        auroc_of(positive, negative), *map(len, (positive, negative))
    )
    return {"auroc": value, "interval": interval}


def paired_difference(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> dict:
    """AUROC of score a minus score b ((positive, negative) values of each) on the same
    questions, with a paired bootstrap 95% interval."""
    first, second = auroc_of(*a), auroc_of(*b)
    value, interval = stratified_bootstrap(
        lambda pos, neg: first(pos, neg) - second(pos, neg), len(a[0]), len(a[1])
    )
    return {"difference": value, "interval": interval}


def signal_rows(kind: str, signals: dict[str, dict[str, np.ndarray]]) -> list[dict]:
    """AUROC with interval of every signal (in its direction), answerable against each
    other group, and each group's median."""
    rows = []
    for name, sign in SIGNALS.items():
        row: dict = {"table": "auroc", "search": kind, "signal": name}
        for other in GROUPS[1:]:
            answerable, rest = sign * signals["answerable"][name], sign * signals[other][name]
            row[f"vs_{other}"] = auroc_interval(answerable, rest)
        for group in GROUPS:
            row[f"median_{group}"] = float(np.median(signals[group][name]))
        rows.append(row)
    return rows


def kept_rows(
    kind: str,
    collection: Collection,
    questions: dict[str, list[str]],
    signals: dict[str, dict[str, np.ndarray]],
) -> list[dict]:
    """Share of each group left with at least one hit by each min_p_relevant, searched with
    it (which must be the share whose first hit reaches it: a threshold keeps a prefix)."""
    rows = []
    for threshold in THRESHOLDS:
        row: dict = {"table": "kept", "search": kind, "min_p_relevant": threshold}
        for group in GROUPS:
            results = searched(collection, questions[group], kind == "hybrid", threshold)
            kept = np.array([bool(r["hits"]) for r in results])
            assert np.array_equal(kept, signals[group]["top_p_relevant"] >= threshold)
            row[group] = float(kept.mean())
        rows.append(row)
    return rows


def fitted(signals: dict[str, dict[str, np.ndarray]]) -> SklearnPipeline:
    """A logistic regression telling answerable questions from all others by the signals."""
    x = np.vstack([matrix(signals[g]) for g in GROUPS])
    y = np.concatenate([np.full(len(signals[g]["top_score"]), g == "answerable") for g in GROUPS])
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    return model.fit(x, y)


def learned_rows(
    kind: str,
    model: SklearnPipeline,
    signals: dict[str, dict[str, np.ndarray]],
    best: dict[str, str],
) -> list[dict]:
    """The learned score's AUROC on test against each group, and its paired difference from
    the single signal that does best there (chosen on test: a bar in the single's favour)."""
    learned = {g: model.predict_proba(matrix(signals[g]))[:, 1] for g in GROUPS}
    row: dict = {"table": "auroc", "search": kind, "signal": LEARNED}
    for other in GROUPS[1:]:
        row[f"vs_{other}"] = auroc_interval(learned["answerable"], learned[other])
        sign = SIGNALS[best[other]]
        single = (sign * signals["answerable"][best[other]], sign * signals[other][best[other]])
        row[f"minus_best_vs_{other}"] = {
            "best": best[other],
            **paired_difference((learned["answerable"], learned[other]), single),
        }
    coefficients = model[-1].coef_[0] / model[0].scale_
    row["coefficients_per_unit"] = dict(zip(SIGNALS, coefficients.tolist(), strict=True))
    return [row]


def best_signals(rows: list[dict], kind: str) -> dict[str, str]:
    """The single signal with the highest test AUROC against each other group."""
    mine = [r for r in rows if r["table"] == "auroc" and r["search"] == kind]
    return {other: best_against(mine, other) for other in GROUPS[1:]}


def best_against(rows: list[dict], other: str) -> str:
    """The signal of the row with the highest test AUROC against the group `other`."""
    return max(rows, key=lambda r: r[f"vs_{other}"]["auroc"])["signal"]


def plot(rows: list[dict], path: Path) -> None:
    """Share of each group keeping a hit against min_p_relevant, dense and hybrid."""
    curves = {}
    for kind in ("dense", "hybrid"):
        kept = [r for r in rows if r["table"] == "kept" and r["search"] == kind]
        for group in GROUPS:
            x = [r["min_p_relevant"] for r in kept]
            curves[f"{kind}: {group}"] = (x, [r[group] for r in kept])
    plot_binned(
        curves,
        path,
        title="Questions that keep ≥ 1 hit (SciFact test, k = 10)",
        xlabel="min_p_relevant",
        ylabel="share of the group keeping ≥ 1 hit",
    )


def collection_for(db: Database, name: str, part: Protocol, pipeline: str) -> Collection:
    """A collection of the corpus without the part's removed documents."""
    collection = db.collection(name)
    ingest(corpus_without(part.removed), collection, pipeline, progress=True)
    return collection


def main() -> None:
    """Index both protocols' corpora, search every question, score the signals, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="retrieval", help="a built-in with a calibrator")
    parser.add_argument("--out", type=Path, help="default: results/abstention[-NAME].json")
    args = parser.parse_args()
    suffix = "" if args.pipeline == "retrieval" else f"-{args.pipeline}"
    out = args.out or RESULTS / f"abstention{suffix}.json"
    started = time.perf_counter()
    banking = load_dataset(BANKING77)
    assert isinstance(banking, ClassificationDataset)
    parts = {
        "test": protocol("test", banking.test_texts),
        "train": protocol("train", banking.train_texts),
    }
    rows: list[dict] = []
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="probembed-abstention-") as folder:
        db = Database(folder, create=True)
        signals = {}
        for split, part in parts.items():
            begun = time.perf_counter()
            collection = collection_for(db, f"scifact-{split}", part, args.pipeline)
            seconds[f"ingest_{split}"] = time.perf_counter() - begun
            begun = time.perf_counter()
            for kind in ("dense", "hybrid"):
                signals[split, kind] = group_signals(collection, part.questions, kind == "hybrid")
                if split == "test":
                    rows += kept_rows(kind, collection, part.questions, signals[split, kind])
            seconds[f"search_{split}"] = time.perf_counter() - begun
    begun = time.perf_counter()
    for kind in ("dense", "hybrid"):
        rows += signal_rows(kind, signals["test", kind])
        model = fitted(signals["train", kind])
        rows += learned_rows(kind, model, signals["test", kind], best_signals(rows, kind))
    seconds["bootstrap_and_fit"] = time.perf_counter() - begun
    for row in rows:
        print(row)
    plot(rows, RESULTS / "plots" / f"abstention{suffix}.png")
    seconds["total"] = time.perf_counter() - started
    config = {
        "tree": str(Path(probembed.__file__).parent),
        "pipeline": args.pipeline,
        "k": K,
        "seed": SEED,
        "resamples": RESAMPLES,
        "signal_direction": SIGNALS,
        "off_topic": f"{OFF_TOPIC} Banking77 texts of the split's own side (seeded)",
        "answerable_losing_a_relevant_document": "dropped",
        "seconds": seconds,
        "cores": os.cpu_count(),
    }
    for split, part in parts.items():
        config[split] = {
            "questions": {g: len(part.questions[g]) for g in GROUPS},
            "documents_removed": len(part.removed),
            "answerable_dropped_for_a_lost_document": part.lost,
        }
    write_json(out, rows, config)


if __name__ == "__main__":
    main()
