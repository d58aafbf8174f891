"""`probembed eval` on a judged BEIR split with a calibrated pipeline: plots of the pipeline
alone, with the learned confidence its searches report among the signals."""

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
