"""`probembed eval` on a judged BEIR split with a calibrated pipeline: plots of the pipeline
alone, with the learned confidence its searches report among the signals."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from beir_data import pairs_as_beir
from typer.testing import CliRunner

from probembed.calibration.training import fit_calibrator
from probembed.evaluation.datasets import load_dataset
from probembed.evaluation.harness import embed, evaluate, searched_as
from probembed.evaluation.report import LEARNED_CONFIDENCE, compare, learned_confidence
from probembed.interfaces.cli import app
from probembed.pipeline import Pipeline
from probembed.store import Database, ingest

runner = CliRunner()


@pytest.fixture(scope="module")
def beir(toy_pairs, tmp_path_factory) -> Path:
    """80 judged queries, one relevant document each."""
    return pairs_as_beir(toy_pairs, tmp_path_factory.mktemp("beir") / "pairs")


@pytest.fixture(scope="module")
def calibrated(hash_pipeline, beir, tmp_path_factory) -> Pipeline:
    """The hashing pipeline with a calibrator and query confidence fitted on the split."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a part the toy split cannot teach
        calibrator = fit_calibrator(hash_pipeline, load_dataset(beir), beir)
    assert calibrator is not None and calibrator.confidence is not None
    p = hash_pipeline
    return Pipeline(p.members, p.fusion, p.score, "calibrated", cache=False, calibrator=calibrator)


@pytest.fixture(scope="module")
def calibrated_dir(calibrated, tmp_path_factory) -> Path:
    """The calibrated pipeline as a directory, the form `--pipeline DIR` reads."""
    return calibrated.save(tmp_path_factory.mktemp("pipeline") / "calibrated")


def test_plots_of_the_pipeline_alone_need_no_compare(beir, calibrated_dir, tmp_path):
    """`--plots` without `--compare` was refused, which the help did not say."""
    plots = tmp_path / "plots"
    args = ["eval", str(beir), "--pipeline", str(calibrated_dir), "--plots", str(plots)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["pairs-test-calibrated-binned.png", "pairs-test-calibrated-risk-coverage.png"]


def test_the_plotted_confidence_is_what_a_search_of_the_corpus_reports(beir, calibrated, tmp_path):
    """The plots drew margin_prob, query_var, ... but not the learned confidence a search
    reports, the one signal a user of search sees."""
    test = load_dataset(beir)
    embedded = embed(calibrated, test)
    outcome = evaluate(embedded, test, searched_as(calibrated, embedded, test, "calibrated"))
    signal = learned_confidence(calibrated, embedded, test, outcome.ids)[LEARNED_CONFIDENCE]
    collection = Database(tmp_path / "db", create=True).collection("corpus")
    ingest(beir / "corpus.jsonl", collection, calibrated)
    searched = collection.search([test.queries[q] for q in outcome.ids], k=10, exact=True)
    reported = np.array([r["confidence"] for r in searched], dtype=np.float64)
    # the collection's rows are float32, the harness fuses in float64: ~1e-7 apart
    np.testing.assert_allclose(1 - signal, reported, rtol=0, atol=1e-6)
    assert reported.std() > 0  # so the test can fail
    result = compare(calibrated, test, None)
    assert LEARNED_CONFIDENCE in result.curves["uec"]["risk_coverage"]
    assert any(r["metric"] == f"auroc:{LEARNED_CONFIDENCE}" for r in result.rows)


def test_plots_of_a_hybrid_ranking_are_refused_before_encoding(beir, calibrated_dir, tmp_path):
    args = ["eval", str(beir), "--pipeline", str(calibrated_dir), "--hybrid"]
    result = runner.invoke(app, [*args, "--plots", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "--plots draws the dense search's uncertainty signals" in output
    assert "each embedded by" not in output


def test_calibration_on_a_judged_split_is_what_searches_of_its_corpus_show(
    beir, calibrated, calibrated_dir, tmp_path
):
    """No command checked the shipped p_relevant and confidence on a user's own labels: a
    benchmark did, fixed to SciFact."""
    from probembed.evaluation.metrics import per_query_metrics, run_from_results
    from probembed.evaluation.uncertainty import (
        NDCG_BELOW_MEDIAN,
        auroc,
        expected_calibration_error,
        failed_queries,
    )

    plots, out = tmp_path / "plots", tmp_path / "rows.json"
    args = ["eval", str(beir), "--pipeline", str(calibrated_dir), "--calibration"]
    result = runner.invoke(app, [*args, "--plots", str(plots), "--json", str(out)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "ECE of p_relevant (15 bins)" in said and "irrelevant hits dropped" in said
    checked = json.loads(out.read_text())["calibration"]
    assert checked["confidence"] == "learned"
    figures = checked["figures"]
    names = {p.name for p in plots.iterdir()}
    assert {"pairs-test-calibrated-reliability.png"} <= names
    assert "pairs-test-calibrated-confidence-risk-coverage.png" in names

    test = load_dataset(beir)
    queries = list(test.qrels)
    collection = Database(tmp_path / "db", create=True).collection("corpus")
    ingest(beir / "corpus.jsonl", collection, calibrated)
    searched = collection.search([test.queries[q] for q in queries], k=10, exact=True)
    p = np.array([h["p_relevant"] for r in searched for h in r["hits"]], dtype=np.float64)
    judged = [test.qrels[q] for q in queries]
    relevant = np.array(
        [j.get(h["id"], 0) > 0 for j, r in zip(judged, searched, strict=True) for h in r["hits"]]
    )
    # float32 rows in the collection: p_relevant agrees to ~1e-7, no hit crosses a bin edge
    assert figures["hits"] == len(p) and figures["relevant_share"] == relevant.mean()
    assert figures["ece15"] == pytest.approx(expected_calibration_error(p, relevant), abs=1e-6)
    for t in (0.1, 0.25, 0.5, 0.75):
        assert figures[f"kept_relevant@{t:g}"] == pytest.approx((p[relevant] >= t).mean())
        assert figures[f"dropped_irrelevant@{t:g}"] == pytest.approx((p[~relevant] < t).mean())
    per_query = per_query_metrics(
        test.qrels, run_from_results(queries, searched), ("ndcg@10", "recall@10")
    )
    failed = failed_queries(per_query["ndcg@10"], per_query["recall@10"], queries)
    sure = np.array([r["confidence"] for r in searched], dtype=np.float64)
    assert figures["confidence_auroc"] == pytest.approx(
        auroc(1 - sure, failed[NDCG_BELOW_MEDIAN]), abs=1e-9
    )


@pytest.mark.parametrize(
    ("where", "options", "said"),
    [
        ("sts", [], "--calibration applies to retrieval (BEIR) datasets only, not to toy (sts)"),
        (
            "beir",
            ["--compare"],
            "--calibration checks the pipeline's own dense search, not with --compare",
        ),
        ("beir", ["--hybrid"], "not with --hybrid"),
        ("plain", [], "--calibration: hash has no relevance calibrator (calibration.json)"),
    ],
)
def test_calibration_is_refused_where_there_is_nothing_to_check(
    where, options, said, beir, calibrated_dir, hash_pipeline, tmp_path
):
    path = Path(__file__).parent / "data" / "sts" / "toy" if where == "sts" else beir
    pipeline = hash_pipeline.save(tmp_path / "hash") if where == "plain" else calibrated_dir
    args = ["eval", str(path), "--pipeline", str(pipeline), "--calibration", *options]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert said in output and "each embedded by" not in output
