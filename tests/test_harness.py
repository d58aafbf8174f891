"""The evaluation harness: methods side by side, tuning on dev only, uncertainty reports."""

import itertools
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from probembed.evaluation import tuning as tuning_module
from probembed.evaluation.datasets import load_dataset, load_evaluable, load_pairs
from probembed.evaluation.harness import (
    Method,
    Outcome,
    baseline_methods,
    embed,
    evaluate,
    primary_metric,
)
from probembed.evaluation.report import compare, markdown_table, shipped_label, write_plots
from probembed.evaluation.tuning import BETAS, TEMPERATURES, simplex_grid, tune
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline, ScoreConfig

TOY = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def pipe(toy_pairs):
    """Two hash encoders: one Laplace, one perturbation, so fusion has something to weigh."""
    specs = [
        ModelSpec("hash", "laplace", encoder_params={"dim": 128}),
        ModelSpec("hash", "perturb", encoder_params={"dim": 64}),
    ]
    return Pipeline.fit(specs, toy_pairs, cache=False)


@pytest.fixture(scope="module")
def small_sts(datasets, tmp_path_factory):
    """The first 150 pairs of STS-B dev and test, as a dataset directory."""
    directory = tmp_path_factory.mktemp("sts")
    for split in ("dev", "test"):
        lines = (datasets / "sts" / "stsb" / f"{split}.tsv").read_text().splitlines()[:151]
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return directory


def test_the_harness_reads_member_blocks_as_the_pipeline_does(pipe, small_sts):
    """A method's std carries the members' spread exactly where a pipeline's search would."""
    embedded = embed(pipe, load_dataset(small_sts, "dev"))
    for method in baseline_methods(pipe.models):  # singles, and concat: (sum: test_fusion)
        assert embedded.blocks(method.fusion) == pipe.with_fusion(method.fusion).blocks


@pytest.mark.parametrize("k, step", [(2, 0.5), (3, 0.25), (4, 0.1)])
def test_simplex_grid_covers_the_simplex(k, step):
    grid = simplex_grid(k, step)
    units = round(1 / step)
    assert len(grid) == math.comb(units + k - 1, k - 1)
    assert all(len(w) == k and math.isclose(sum(w), 1.0) and min(w) >= 0 for w in grid)


@pytest.mark.parametrize("step", [0.3, 0.0, -0.5, 1.5])
def test_a_grid_step_that_does_not_divide_one_is_refused(step):
    """0.3 quietly became thirds; 0 divided by zero."""
    with pytest.raises(ValueError, match="step must be 1/n"):
        simplex_grid(2, step)


def test_tuning_on_a_split_whose_gold_scores_are_all_equal_is_refused(pipe, small_sts):
    """Every candidate's Spearman was NaN, NaN lost every comparison, and tuning returned the
    first grid point with a dev figure of -inf and no word."""
    dev = load_dataset(small_sts, "dev")
    flat = replace(dev, scores=np.full(len(dev.scores), 3.0))
    with pytest.raises(ValueError, match="gold scores are all equal"):
        tune([(embed(pipe, flat), flat)], step=0.5)


def test_tuning_refuses_a_candidate_that_scores_nan(pipe, small_sts, monkeypatch):
    """A NaN objective (predictions all equal) names the candidate instead of being skipped."""
    dev = load_dataset(small_sts, "dev")
    embedded = embed(pipe, dev)
    monkeypatch.setattr(tuning_module, "evaluate", lambda *a: Outcome({"spearman": np.nan}, {}))
    with pytest.raises(ValueError, match="tune weights: .* scores NaN"):
        tune([(embedded, dev)], step=0.5)


def test_tuning_reports_the_best_dev_figure_of_each_grid(pipe, small_sts):
    dev = load_dataset(small_sts, "dev")
    embedded = embed(pipe, dev)
    tuned = tune([(embedded, dev)], step=0.25)

    def dev_figure(method: Method) -> float:
        return evaluate(embedded, dev, method).metrics[primary_metric(dev)]

    weighted = [FusionConfig("weighted", weights=w) for w in simplex_grid(2, 0.25)]
    prior = tuned.weighted.fusion.weights
    uec = [
        (FusionConfig("uec", temperature=t, prior=prior), ScoreConfig("uec", beta))
        for t, beta in itertools.product(TEMPERATURES, BETAS)
    ]
    # The same evaluations as tune's, recomputed here; tune breaks ties within 1e-12.
    best_weighted = max(dev_figure(Method("weighted", f)) for f in weighted)
    best_uec = max(dev_figure(Method("uec", f, s)) for f, s in uec)
    assert tuned.dev["weighted"] == pytest.approx(best_weighted, abs=1e-12)
    assert tuned.dev["weighted"] == pytest.approx(dev_figure(tuned.weighted), abs=1e-12)
    assert tuned.dev["uec"] == pytest.approx(best_uec, abs=1e-12)
    assert tuned.dev["uec"] == pytest.approx(dev_figure(tuned.uec), abs=1e-12)


def test_single_method_equals_the_models_own_cosine(pipe, small_sts):
    test = load_dataset(small_sts, "test")
    embedded = embed(pipe, test)
    name = pipe.models[0]
    outcome = evaluate(embedded, test, Method(f"single:{name}", FusionConfig(f"single:{name}")))
    a = embedded.parts["a"][0].normalize().mean
    b = embedded.parts["b"][0].normalize().mean
    np.testing.assert_allclose(outcome.per_item["pred"], np.einsum("nd,nd->n", a, b), rtol=1e-5)


def test_a_pairs_dataset_is_refused_by_name_not_scored_as_classification(pipe, small_sts):
    """`evaluate` sent anything not STS or retrieval to the classification probe: a pairs
    dataset failed there with KeyError 'train'."""
    pairs_file = Path(__file__).parent / "data" / "pairs" / "toy-pairs.tsv"
    test = load_dataset(small_sts, "test")
    name = pipe.models[0]
    method = Method(f"single:{name}", FusionConfig(f"single:{name}"))
    with pytest.raises(TypeError, match="cannot evaluate a PairsDataset; give STS, retrieval"):
        evaluate(embed(pipe, test), load_pairs(pairs_file), method)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a pairs file .* fits uncertainty estimators"):
        load_evaluable(pairs_file)


def test_compare_reports_every_method_and_uncertainty_quality(pipe, small_sts, tmp_path):
    test, dev = load_dataset(small_sts, "test"), load_dataset(small_sts, "dev")
    result = compare(pipe, test, dev)
    spearman = {r["method"] for r in result.rows if r["metric"] == "spearman"}
    shipped = shipped_label(pipe.name)  # beside the retuned uec: what eval without --compare says
    assert spearman == {m.name for m in baseline_methods(pipe.models)} | {
        "weighted",
        "uec",
        shipped,
    }
    alone = evaluate(embed(pipe, test), test, Method("x", pipe.fusion, pipe.score))
    assert _by_method(result.rows, "spearman")[shipped] == alone.metrics["spearman"]
    metrics = {r["metric"] for r in result.rows if r["method"] == "uec"}
    assert {"auroc:uncertainty", "abs_rank_error_spearman:uncertainty"} <= metrics
    assert {"u_cv", "u_error_spearman"} <= {r["metric"] for r in result.rows}
    table = markdown_table(result.rows, ["spearman"])
    assert table.count("\n") == len(spearman) + 1
    pngs = write_plots(result, test, tmp_path)
    assert pngs and all(p.stat().st_size > 1000 for p in pngs)


def _by_method(rows: list[dict], metric: str) -> dict[str, float]:
    """method -> value of one metric."""
    return {r["method"]: r["value"] for r in rows if r["metric"] == metric}


def test_a_query_with_no_relevant_document_is_left_out_of_every_figure(pipe):
    """A dataset built in Python with a query judged all 0: it scored 0 and halved each mean."""
    data = load_dataset(TOY / "retrieval" / "toy")
    zero = replace(
        data,
        queries={**data.queries, "z": "a question nothing answers"},
        qrels={**data.qrels, "z": {next(iter(data.corpus)): 0}},
    )
    method = Method("mean", FusionConfig("mean"))
    with pytest.warns(UserWarning, match=r"1 of \d+ judged queries .*'z'"):
        outcome = evaluate(embed(pipe, zero), zero, method)
    assert outcome.metrics == evaluate(embed(pipe, data), data, method).metrics
    assert (
        len(outcome.per_item["ndcg@10"])
        == len(outcome.per_item["uncertainty"])
        == len(data.queries)
    )


def test_retrieval_evaluation_on_a_toy_beir_folder(pipe):
    data = load_dataset(TOY / "retrieval" / "toy")
    outcome = evaluate(embed(pipe, data), data, Method("mean", FusionConfig("mean")))
    # Each judged query shares its distinctive words (purr, breathe) with its one relevant
    # document only, so it ranks first and every metric is exactly 1; a wrong ranking, id
    # mapping or metric would fall below.
    assert outcome.metrics == {"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0}
    assert outcome.per_item["top_scores"].shape == (len(data.queries), 2)


@pytest.mark.parametrize("score", ["csd", "kl"])
def test_the_outrank_signal_reads_dot_products_whatever_score_ranked(pipe, score):
    """The variances a query's outrank probability divides by are of the hits' dot products;
    a KL or CSD margin over them mixed units and put nearly every query at 0."""
    from probembed.evaluation.uncertainty import confidence_signals
    from probembed.scoring import outrank_probability, score_matrix

    data = load_dataset(TOY / "retrieval" / "toy")
    embedded, fusion = embed(pipe, data), FusionConfig("mean")
    item = evaluate(embedded, data, Method(score, fusion, ScoreConfig(score, 1))).per_item
    queries = embedded.fused("queries", fusion).gaussian
    docs = embedded.fused("docs", fusion).gaussian
    top = np.argsort(-score_matrix(queries, docs, score, 1), axis=1)[:, :2]
    dots = np.einsum("qd,qkd->qk", queries.mean.astype(np.float64), docs.mean[top])
    np.testing.assert_allclose(item["top_dots"], dots, rtol=1e-12)
    assert np.abs(item["top_scores"] - dots).max() > 0.1  # the score is in other units
    d, v = dots, item["top_vars"]
    signals = confidence_signals(item["top_scores"], v, item["uncertainty"], item["top_dots"])
    np.testing.assert_allclose(
        signals["margin_prob"], outrank_probability(d[:, 1], d[:, 0], v[:, 1], v[:, 0])
    )


def test_a_results_file_keeps_rows_not_asked_for_and_resumes_only_rows_of_todays_pipeline(
    tmp_path,
):
    from probembed.evaluation.report import earlier_rows, write_json

    path = tmp_path / "rows.json"
    assert earlier_rows(path, lambda r: r["dataset"], {"a": "f1"}, True) == ([], {}, set())
    rows = [
        {"dataset": "a", "value": 1.0, "fingerprint": "f1"},
        {"dataset": "b", "value": 2.0, "fingerprint": "old"},
        {"dataset": "b", "value": 2.5},  # from before rows carried their fingerprint
        {"dataset": "c", "value": 3.0, "fingerprint": "old"},
    ]
    write_json(path, rows, {"seed": 0})
    to_run = {"a": "f1", "b": "f1"}
    kept, config, done = earlier_rows(path, lambda r: r["dataset"], to_run, resume=True)
    assert [r["value"] for r in kept] == [1.0, 3.0] and done == {"a"} and config == {"seed": 0}
    kept, _, done = earlier_rows(path, lambda r: r["dataset"], to_run, resume=False)
    assert [r["value"] for r in kept] == [3.0] and done == set()  # c was not asked for: it stays
