"""Calibrated relevance and query confidence of a shipped built-in on SciFact TEST.

    python benchmarks/calibration.py [--pipeline default|retrieval]

The calibrator shipped in probembed/pipelines/<name>/calibration.json (fitted on SciFact train
by scripts/fit_calibration.py) scores the top-10 hits of each of the 300 judged test queries,
ranked by the pipeline's own fusion and score, exactly as a search computes p_relevant:
- expected calibration error with 15 equal-width bins (target <= 0.05);
- at the threshold that keeps 90% of the relevant top-10 hits, the share of irrelevant top-10
  hits dropped (target >= 0.5), the same at the threshold that keeps 90% of the *train* hits
  (what a deployment can set), and at min_p_relevant = 0.5;
- a reliability diagram, benchmarks/results/plots/reliability.png;
- the variants tried (isotonic step, member disagreement as a feature), refitted on train;
- query confidence: test AUROC for "nDCG@10 below median" of every signal: the outrank
  probability a search reported so far, report.py's signals, each learned-confidence feature,
  the learned confidence on the dense features alone and with the coverage of the query's
  words by the first hits' texts (what dense searches report; target >= 0.85);
- the same for hybrid searches (dense + BM25 by reciprocal rank, BM25 from a temporary
  LanceDB collection of the corpus), against the hybrid ranking's own median: the confidence
  without and with the hybrid model (lexical and coverage features), and each feature alone;
- how those features were chosen: 5-fold cross-validated AUROC on the *train* queries of each
  feature set tried, for dense and hybrid rankings.
Writes benchmarks/results/calibration.json (`default`) or calibration-<name>.json, and
plots/reliability.png or reliability-<name>.png.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np

from probembed.calibration import BASE_FEATURES, DISAGREEMENT, RelevanceCalibrator
from probembed.calibration.checking import BINS, hit_probabilities, reliability
from probembed.calibration.confidence import LEXICAL_FEATURES, TEXT_FEATURES, feature_names
from probembed.calibration.logistic import Logistic
from probembed.calibration.training import (
    TOP,
    RankedSplit,
    TextSearch,
    corpus_text_search,
    hybrid_split,
    rank_split,
)
from probembed.evaluation import (
    auroc,
    confidence_signals,
    expected_calibration_error,
    failed_queries,
    plot_reliability,
)
from probembed.evaluation.datasets import RetrievalDataset, load_retrieval
from probembed.evaluation.harness import Embedded, Method, embed, evaluate
from probembed.evaluation.report import write_json
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.scoring import outrank_probability

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
KEEP_RELEVANT = 0.9
SEED = 0


def keep_threshold(p: np.ndarray, relevant: np.ndarray) -> float:
    """The highest p_relevant threshold that keeps KEEP_RELEVANT of these relevant hits."""
    ranked = np.sort(p[relevant])[::-1]
    return float(ranked[math.ceil(KEEP_RELEVANT * len(ranked)) - 1])


def hit_figures(
    p: np.ndarray, relevant: np.ndarray, train: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, float]:
    """ECE, and what thresholds keep of the relevant and drop of the irrelevant hits: the one
    set on these (test) labels, as the target states it, and, given the train hits, the one a
    deployment would set on train."""
    threshold = keep_threshold(p, relevant)
    deployed = {}
    if train is not None:
        chosen = keep_threshold(*train)
        deployed = {
            "threshold_keep90_on_train": chosen,
            "kept_relevant_at_train_threshold": float((p[relevant] >= chosen).mean()),
            "dropped_irrelevant_at_train_threshold": float((p[~relevant] < chosen).mean()),
        }
    return deployed | {
        "ece15": expected_calibration_error(p, relevant, BINS),
        "hits": len(p),
        "relevant_rate": float(relevant.mean()),
        "mean_p_relevant": float(p.mean()),
        "threshold_keep90": threshold,
        "kept_relevant_at_threshold": float((p[relevant] >= threshold).mean()),
        "dropped_irrelevant_at_threshold": float((p[~relevant] < threshold).mean()),
        "kept_relevant_at_0.5": float((p[relevant] >= 0.5).mean()),
        "dropped_irrelevant_at_0.5": float((p[~relevant] < 0.5).mean()),
    }


def variants(train: RankedSplit, test: RankedSplit) -> dict[str, dict]:
    """Test figures of the calibrators tried, each fitted on train: isotonic step chosen on a
    held-out part of train, forced off, forced on; with and without member disagreement."""
    out = {}
    for name, with_spread in (("logistic", False), ("logistic+disagreement", True)):
        features, labels, groups = train.table(TOP, with_spread)
        names = (*BASE_FEATURES, DISAGREEMENT) if with_spread else BASE_FEATURES
        test_labels = test.table(TOP, with_spread)[1].astype(bool)
        for choice, isotonic in (("chosen", None), ("no isotonic", False), ("isotonic", True)):
            model = RelevanceCalibrator.fit(features, labels, groups, names, SEED, isotonic)
            figures = hit_figures(hit_probabilities(model, test), test_labels)
            out[f"{name} ({choice})"] = {
                "ece15": figures["ece15"],
                "dropped_irrelevant_at_threshold": figures["dropped_irrelevant_at_threshold"],
                "isotonic": model.isotonic is not None,
                "train_holdout_ece": (model.fit_info or {}).get("holdout_ece"),
            }
    return out


def query_confidence(
    calibrator: RelevanceCalibrator, test: RankedSplit, dataset: RetrievalDataset, per_item: dict
) -> dict[str, float]:
    """Test AUROC ("nDCG@10 below median") of every query-level signal, higher = less sure."""
    failed = test.failed(dataset)
    d = np.stack([r.dots[:2] for r in test.ranked])
    v = np.stack([r.variances[:2] for r in test.ranked])
    figures = {
        "outrank (search confidence until now)": auroc(
            1 - outrank_probability(d[:, 0], d[:, 1], v[:, 0], v[:, 1]), failed
        )
    }
    harness_failed = failed_queries(
        dict(enumerate(per_item["ndcg@10"])), dict(enumerate(per_item["recall@10"]))
    )["ndcg_below_median"]
    signals = confidence_signals(
        per_item["top_scores"], per_item["top_vars"], per_item["uncertainty"], per_item["top_dots"]
    )
    figures.update({f"report:{k}": auroc(s, harness_failed) for k, s in signals.items()})
    if calibrator.confidence is None:
        return figures
    features = test.query_table()
    for j, name in enumerate(feature_names(calibrator.confidence.members)):
        sure = -1.0 if "margin" in name else 1.0  # a wide margin is sure, a flat top 10 is not
        figures[f"feature:{name}"] = auroc(sure * features[:, j], failed)
    sum_p = hit_probabilities(calibrator, test).reshape(len(test.ranked), TOP).sum(axis=1)
    figures["sum_p_relevant_top10"] = auroc(-sum_p, failed)
    learned = calibrator.confidence.logistic.predict(features)
    figures["learned, dense features only"] = auroc(1 - learned, failed)
    text_model = calibrator.confidence.text_model
    if text_model is not None:
        coverage = test.coverage_table(dataset)
        for j, name in enumerate(TEXT_FEATURES):
            figures[f"feature:{name}"] = auroc(-coverage[:, j], failed)
        learned = text_model.predict(np.concatenate([features, coverage], axis=1))
        figures["learned with coverage (search confidence)"] = auroc(1 - learned, failed)
    return figures


def hybrid_confidence(
    pipeline: Pipeline, dataset: RetrievalDataset, embedded: Embedded, bm25: TextSearch
) -> dict[str, float]:
    """Test AUROC of the hybrid searches' confidences against hybrid failures, and nDCG@10."""
    calibrator = pipeline.calibrator
    assert calibrator is not None and calibrator.confidence is not None
    split, lexical = hybrid_split(pipeline, dataset, bm25, embedded)
    failed = split.failed(dataset)
    dots = np.stack([r.dots for r in split.ranked])
    assert split.cosines is not None
    figures = {
        "ndcg@10": float(np.mean(list(split.per_query(dataset)["ndcg@10"].values()))),
        "learned, dense features only": auroc(
            1 - calibrator.confidence.predict(dots, split.cosines), failed
        ),
    }
    coverage = split.coverage_table(dataset)
    for j, name in enumerate(TEXT_FEATURES):
        figures[f"feature:{name}"] = auroc(-coverage[:, j], failed)
    if calibrator.confidence.hybrid_model is not None:
        learned = calibrator.confidence.predict(dots, split.cosines, lexical, coverage)
        name = "learned with lexical and coverage features (search confidence)"
        figures[name] = auroc(1 - learned, failed)
    for j, name in enumerate(LEXICAL_FEATURES):
        figures[f"feature:{name}"] = auroc(-lexical[:, j], failed)
    return figures


def cross_validated(x: np.ndarray, failed: np.ndarray) -> float:
    """AUROC of a query-confidence model on train queries it was not fitted on (5 seeded folds)."""
    from sklearn.model_selection import StratifiedKFold

    p = np.empty(len(x))
    for fit, held in StratifiedKFold(5, shuffle=True, random_state=SEED).split(x, failed):
        p[held] = Logistic.fit(x[fit], ~failed[fit], SEED).predict(x[held])
    return auroc(1 - p, failed)


def feature_choice(pipeline: Pipeline, train: RankedSplit, bm25: TextSearch) -> dict[str, float]:
    """Cross-validated train AUROC of each feature set tried, dense and hybrid: how the shipped
    models' features were chosen (train queries only; the largest set is kept where it wins)."""
    dataset = load_retrieval(SCIFACT, "train")
    hybrid, lexical = hybrid_split(pipeline, dataset, bm25)
    out: dict[str, float] = {}
    for kind, split, bm25_features in (("dense", train, None), ("hybrid", hybrid, lexical)):
        base, coverage = split.query_table(), split.coverage_table(dataset)
        failed = split.failed(dataset)
        sets = {"margin and entropy": base, "+ coverage": np.hstack([base, coverage])}
        if bm25_features is not None:
            sets["+ BM25"] = np.hstack([base, bm25_features])
            sets["+ BM25 + coverage"] = np.hstack([base, bm25_features, coverage])
        out |= {f"{kind}: {name}": cross_validated(x, failed) for name, x in sets.items()}
    return out


def main() -> None:
    """Measure on SciFact test, draw the reliability diagram, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline", default="default", help="a built-in with a calibrator")
    name = parser.parse_args().pipeline
    suffix = "" if name == "default" else f"-{name}"
    out = RESULTS / f"calibration{suffix}.json"
    plot = RESULTS / "plots" / f"reliability{suffix}.png"
    pipeline = Pipeline.load(name)
    calibrator = pipeline.calibrator
    if calibrator is None:
        raise SystemExit(
            f"{name} ships no calibration.json: run scripts/fit_calibration.py --pipeline {name}"
        )
    test_set = load_retrieval(SCIFACT, "test")
    embedded = embed(pipeline, test_set, progress=True)
    test = rank_split(pipeline, test_set, embedded=embedded)
    train = rank_split(pipeline, load_retrieval(SCIFACT, "train"))
    relevant = test.table(TOP, calibrator.uses_disagreement)[1].astype(bool)
    train_relevant = train.table(TOP, calibrator.uses_disagreement)[1].astype(bool)
    p = hit_probabilities(calibrator, test)
    train_p = hit_probabilities(calibrator, train)
    curve = reliability(p, relevant)
    plot_reliability(
        {f"{name} on SciFact test": (curve["mean_predicted"], curve["observed"])},
        plot,
        f"SciFact test: p_relevant of the top-10 hits ({name})",
        counts=curve["count"],
    )
    outcome = evaluate(embedded, test_set, Method(name, pipeline.fusion, pipeline.score))
    with corpus_text_search(pipeline, SCIFACT) as bm25:
        figures = {
            "hits": hit_figures(p, relevant, (train_p, train_relevant)),
            "reliability": curve,
            "variants": variants(train, test),
            "query_confidence_auroc": query_confidence(
                calibrator, test, test_set, outcome.per_item
            ),
            "hybrid_query_confidence_auroc": hybrid_confidence(pipeline, test_set, embedded, bm25),
            "feature_choice_train_cv_auroc": feature_choice(pipeline, train, bm25),
            "ndcg@10": outcome.metrics["ndcg@10"],
        }
    config = {
        "dataset": "scifact/test",
        "top": TOP,
        "bins": BINS,
        "keep_relevant": KEEP_RELEVANT,
        "pipeline": name,
        "pipeline_fingerprint": pipeline.fingerprint,
        "calibrator_fit": calibrator.fit_info,
        "seed": SEED,
    }
    write_json(out, [figures], config)
    print(f"wrote {out} and {plot}")
    print(
        {k: figures[k] for k in ("hits", "query_confidence_auroc", "hybrid_query_confidence_auroc")}
    )


if __name__ == "__main__":
    main()
