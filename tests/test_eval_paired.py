"""`probembed eval --compare`: each row's paired difference from a baseline row, with a seeded
bootstrap interval over the split's items, and rows alike by construction shown once."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from beir_data import pairs_as_beir
from scipy.stats import bootstrap, spearmanr
from typer.testing import CliRunner

from probembed.evaluation.datasets import RetrievalDataset, StsDataset, load_dataset
from probembed.evaluation.harness import Method, Outcome, embed, evaluate
from probembed.evaluation.paired import (
    CONFIDENCE,
    RESAMPLES,
    SEED,
    against_baseline,
    paired_difference,
)
from probembed.evaluation.report import (
    compare,
    fusion_settings,
    markdown_table,
    same_rows,
    settings_text,
)
from probembed.evaluation.tuning import Tuned
from probembed.interfaces.cli import app
from probembed.pipeline import FusionConfig, Pipeline, ScoreConfig

DATA = Path(__file__).parent / "data"
runner = CliRunner()


@pytest.fixture(scope="module")
def pipeline_dir(hash_pipeline, tmp_path_factory) -> Path:
    """The fast hashing pipeline as a directory, the form `--pipeline DIR` reads."""
    return hash_pipeline.save(tmp_path_factory.mktemp("pipeline") / "hash")


@pytest.fixture(scope="module")
def beir(toy_pairs, tmp_path_factory) -> Path:
    """80 judged queries, one relevant document each."""
    return pairs_as_beir(toy_pairs, tmp_path_factory.mktemp("beir") / "pairs")


def _run(args: list[str], pipeline_dir: Path, out: Path) -> tuple[dict, str, str]:
    """Run eval with --json; the payload, stdout and stderr (rich's wrapping undone)."""
    result = runner.invoke(
        app, ["eval", *args, "--pipeline", str(pipeline_dir), "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    unwrapped = (" ".join(text.split()) for text in (result.stdout, result.stderr))
    return json.loads(out.read_text()), *unwrapped


def test_each_row_differs_from_the_baseline_by_its_mean_per_query_gain(
    beir, pipeline_dir, tmp_path
):
    """--compare printed point estimates only: a gain looked like a win until bootstrapped,
    and --json held no per-query values to bootstrap it with."""
    pipe = Pipeline.load(pipeline_dir, cache=False)
    member = f"single:{pipe.models[0]}"
    payload, stdout, stderr = _run(
        [str(beir), "--compare", "--baseline", member], pipeline_dir, tmp_path / "r.json"
    )
    paired, items = payload["paired"], payload["per_item"]
    assert paired["baseline"] == member and paired["resamples"] == 2000 and paired["seed"] == 0
    assert "paired bootstrap over the split's 80 queries, 2000 resamples (seed 0)" in stderr
    assert f"Δ: difference from {member}" in stdout and "[95% CI]" in stdout
    test = load_dataset(beir)
    own = evaluate(embed(pipe, test), test, Method("uec", pipe.fusion, pipe.score))
    # per query, by id, what the harness scored
    assert items["items"] == "queries" and items["ids"] == list(own.ids)
    assert sorted(items["ids"]) == sorted(test.qrels)
    assert items["values"]["uec"]["ndcg@10"] == own.per_item["ndcg@10"].tolist()
    base = {m: np.array(v) for m, v in items["values"][member].items()}
    for method, by_metric in paired["differences"].items():
        for metric, d in by_metric.items():
            gain = np.array(items["values"][method][metric]) - base[metric]
            assert d["difference"] == pytest.approx(gain.mean(), abs=1e-12)
            assert d["low"] <= d["difference"] <= d["high"]
    # a row against itself: no difference, and an interval of exactly [0, 0]
    zero = {"difference": 0.0, "low": 0.0, "high": 0.0}
    assert paired["differences"][member] == dict.fromkeys(("ndcg@10", "recall@100", "mrr@10"), zero)
    moved = paired["differences"]["uec"]["ndcg@10"]
    assert moved["difference"] != 0 and moved["low"] < moved["high"]  # so the test can fail
    again, _, _ = _run(
        [str(beir), "--compare", "--baseline", member], pipeline_dir, tmp_path / "b.json"
    )
    assert again["paired"] == paired  # seeded


def test_a_known_difference_on_four_queries() -> None:
    """One query of four gains a whole point: +0.25, in a seeded interval inside [0, 1] (a
    resample holds that query from none to four times)."""
    dataset = RetrievalDataset("toy", "test", {}, {}, {})
    ids = ("a", "b", "c", "d")
    base = Outcome(
        {}, {m: np.array([0.0, 0.5, 1.0, 1.0]) for m in ("ndcg@10", "recall@100", "mrr@10")}, ids
    )
    better = Outcome(
        {}, {m: np.array([1.0, 0.5, 1.0, 1.0]) for m in ("ndcg@10", "recall@100", "mrr@10")}, ids
    )
    got = against_baseline(dataset, {"base": base, "better": better, "alias": better}, "base")
    for metric in ("ndcg@10", "recall@100", "mrr@10"):
        d = got["better"][metric]
        assert d["difference"] == 0.25 and 0 <= d["low"] < 0.25 < d["high"] <= 1.0
        assert got["base"][metric] == {"difference": 0.0, "low": 0.0, "high": 0.0}
    assert got["alias"] == got["better"]
    with pytest.raises(ValueError, match="baseline 'nope' is not a row of this comparison"):
        against_baseline(dataset, {"base": base}, "nope")


def test_rows_that_score_other_items_are_refused_naming_them() -> None:
    """The bootstrap pairs values by position: a row of the same queries in another order was
    compared with the baseline's as if each position were one query, without a word."""
    dataset = RetrievalDataset("toy", "test", {}, {}, {})
    values = {m: np.array([0.0, 0.5, 1.0]) for m in ("ndcg@10", "recall@100", "mrr@10")}
    base, same = Outcome({}, values, ("a", "b", "c")), Outcome({}, values, ("a", "b", "c"))
    shuffled = Outcome({}, values, ("a", "c", "b"))
    shorter = Outcome({}, {m: v[:2] for m, v in values.items()}, ("a", "b"))
    rows = {"base": base, "same": same, "shuffled": shuffled, "shorter": shorter}
    with pytest.raises(ValueError) as caught:
        against_baseline(dataset, rows, "base")
    assert str(caught.value) == (
        "rows 'shuffled' (item 1 is 'c', the baseline's 'b'), 'shorter' (2 items, the "
        "baseline 3) do not score the 3 queries the baseline 'base' scores, in its order; a "
        "paired comparison needs every row scored on the same queries"
    )
    assert against_baseline(dataset, {"base": base, "same": same}, "base")["same"]["ndcg@10"] == {
        "difference": 0.0,
        "low": 0.0,
        "high": 0.0,
    }


def test_a_one_hot_weighted_row_is_shown_once_with_its_single_member(beir, hash_pipeline):
    """Tuning may put every weight on one member: `weighted` then is that member alone, and
    the two rows, one figure, were shown twice as if they were two results."""
    member = hash_pipeline.models[1]
    one_hot = tuple(float(m == member) for m in hash_pipeline.models)
    tuned = Tuned(
        Method("weighted", FusionConfig("weighted", weights=one_hot)),
        Method("uec", FusionConfig("uec", temperature=1.0, prior=one_hot), ScoreConfig("uec", 4)),
        {"weighted": 0.5, "uec": 0.5},
    )
    test = load_dataset(beir)
    result = compare(hash_pipeline, test, None, tuned=tuned)
    assert (f"single:{member}", "weighted") in same_rows(result)
    settings = {
        "settings": {
            "weighted": settings_text(fusion_settings(tuned.weighted, hash_pipeline.models))
        }
    }
    table = markdown_table(result.rows, ["ndcg@10"], settings, same_rows(result))
    (row,) = [line for line in table.splitlines() if line.startswith(f"| single:{member} ")]
    assert row.startswith(f"| single:{member} = weighted | ") and "weights" in row
    assert "| weighted |" not in table
    # scored apart, the two agree to the last bit, per query too: the merge hides nothing
    apart = evaluate(embed(hash_pipeline, test), test, tuned.weighted)
    assert apart.metrics == result.outcomes["weighted"].metrics
    for name, values in apart.per_item.items():
        np.testing.assert_array_equal(values, result.outcomes["weighted"].per_item[name])


def test_metric_chooses_what_is_reported_and_compared(beir, pipeline_dir, tmp_path):
    """--compare reported nDCG@10, Recall@100 and MRR@10 and a Δ of nDCG@10 alone: a user
    ranked by recall@5 could neither see it nor its interval."""
    args = [str(beir), "--compare", "--metric", "Recall@05", "--metric", "mrr@10"]
    payload, stdout, _ = _run(args, pipeline_dir, tmp_path / "r.json")
    chosen = ["recall@5", "mrr@10"]
    assert payload["config"]["metrics"] == chosen
    reported = {r["metric"] for r in payload["rows"]}
    assert {"recall@5", "mrr@10"} <= reported and not {"ndcg@10", "recall@100"} & reported
    assert "Δ recall@5 [95% CI]" in stdout and "Δ mrr@10 [95% CI]" in stdout
    assert "ndcg@10" not in stdout.split("Δ:")[0]  # the heading's columns: the chosen ones
    paired, items = payload["paired"], payload["per_item"]
    assert all(list(by_metric) == chosen for by_metric in paired["differences"].values())
    assert all(list(values) == chosen for values in items["values"].values())
    # each query's recall@5, by its relevant document's rank (one each) in the harness's scan
    pipe = Pipeline.load(pipeline_dir, cache=False)
    test = load_dataset(beir)
    embedded, method = embed(pipe, test), Method("uec", pipe.fusion, pipe.score)
    own = evaluate(embedded, test, method, ["recall@5"])
    assert list(own.metrics) == ["recall@5"]
    assert items["values"]["uec"]["recall@5"] == own.per_item["recall@5"].tolist()
    assert set(own.per_item["recall@5"]) <= {0.0, 1.0}
    wider = evaluate(embedded, test, method, ["recall@10"]).per_item["recall@10"]
    assert (own.per_item["recall@5"] <= wider).all()
    base = items["values"][paired["baseline"]]
    for row, by_metric in paired["differences"].items():
        for name in chosen:
            gain = np.array(items["values"][row][name]) - np.array(base[name])
            assert by_metric[name]["difference"] == pytest.approx(gain.mean(), abs=1e-12)
    assert any(d["mrr@10"]["low"] < d["mrr@10"]["high"] for d in paired["differences"].values())


@pytest.mark.parametrize(
    ("kind", "options", "said"),
    [
        (
            "retrieval",
            ["--metric", "precision@5"],
            "unknown metric 'precision@5'; known: ndcg@K, recall@K, mrr@K (retrieval, K from 1 "
            "to 100), spearman (STS), accuracy (classification)",
        ),
        (
            "retrieval",
            ["--compare", "--metric", "recall@500"],
            "metric 'recall@500': the cutoff must be from 1 to 100, the depth every query is "
            "ranked to",
        ),
        (
            "retrieval",
            ["--metric", "spearman"],
            "metric 'spearman' does not apply to toy (retrieval): a split of its kind is scored "
            "by ndcg@K, recall@K or mrr@K",
        ),
        (
            "sts",
            ["--compare", "--metric", "ndcg@10"],
            "metric 'ndcg@10' does not apply to toy (sts): a split of its kind has one metric, "
            "spearman",
        ),
        (
            "classification",
            ["--metric", "spearman"],
            "metric 'spearman' does not apply to toy (classification): a split of its kind has "
            "one metric, accuracy",
        ),
    ],
)
def test_a_metric_that_is_unknown_or_not_the_kinds_is_refused_before_encoding(
    kind, options, said, pipeline_dir
):
    path = DATA / kind / "toy"
    result = runner.invoke(app, ["eval", str(path), *options, "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert said in output and "each embedded by" not in output and "Traceback" not in output


@pytest.mark.parametrize("hybrid", [[], ["--hybrid"]])
def test_metric_chooses_the_figures_of_eval_without_compare(hybrid, beir, pipeline_dir, tmp_path):
    """The pipeline's own figures, dense or hybrid, in the metric asked for alone."""
    args = [str(beir), *hybrid, "--metric", "recall@5", "--metric", "recall@5"]
    payload, stdout, _ = _run(args, pipeline_dir, tmp_path / "r.json")
    assert [r["metric"] for r in payload["rows"]] == ["recall@5"]
    default, _, _ = _run([str(beir), *hybrid], pipeline_dir, tmp_path / "d.json")
    assert [r["metric"] for r in default["rows"]] == ["ndcg@10", "recall@100", "mrr@10"]
    assert default["config"]["metrics"] == ["ndcg@10", "recall@100", "mrr@10"]
    (row,) = payload["rows"]
    assert "method recall@5" in stdout and f"{100 * row['value']:.2f}" in stdout


@pytest.mark.parametrize("pairs", [3, 12, 400])
def test_the_sts_interval_is_scipys_spearman_per_resample_to_the_last_bit(pairs) -> None:
    """The Spearmans of every resample are ranked and correlated in batches, not by
    `spearmanr` one resample at a time (4 s a comparison on SICK-R): the same draws, the
    same figures, bit for bit, ties and resamples that rank nothing (NaN) included."""
    rng = np.random.default_rng(SEED)
    gold = rng.integers(0, 6, pairs).astype(np.float64)  # few values: many ties
    base = np.round(gold + rng.normal(0, 2, pairs), 1)
    other = np.round(gold + rng.normal(0, 1.5, pairs), 1).astype(np.float32)
    dataset = StsDataset("toy", "test", [""] * pairs, [""] * pairs, gold)
    ids = tuple(map(str, range(pairs)))
    got = paired_difference(
        dataset, Outcome({}, {"pred": base}, ids), Outcome({}, {"pred": other}, ids)
    )

    def gain(a: np.ndarray, b: np.ndarray, g: np.ndarray) -> float:
        """The Spearman gain of one resample by scipy's spearmanr (NaN: gold ranks nothing)."""
        if np.all(g == g[0]):
            return np.nan
        return spearmanr(b, g).statistic - spearmanr(a, g).statistic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = bootstrap(
            (base, other, gold),
            gain,
            vectorized=False,
            paired=True,
            n_resamples=RESAMPLES,
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(SEED),
        )
    low, high = reference.confidence_interval
    want = {"difference": gain(base, other, gold), "low": float(low), "high": float(high)}
    assert {k: str(v) for k, v in got.items()} == {k: str(v) for k, v in want.items()}  # nan
    assert np.isnan(got["low"]) == (pairs == 3)


def test_too_few_pairs_give_no_interval_and_say_so(pipeline_dir, tmp_path):
    """Three STS pairs: most resamples rank nothing, and the interval is not made up."""
    _, stdout, _ = _run([str(DATA / "sts" / "toy"), "--compare"], pipeline_dir, tmp_path / "r.json")
    assert "[no interval: too few items]" in stdout and "baseline" in stdout


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            ["--compare", "--baseline", "nope"],
            "--baseline 'nope' is not a row of this comparison; its rows are: single:",
        ),
        (["--baseline", "uec"], "--baseline needs --compare"),
    ],
)
def test_a_baseline_that_names_no_row_is_refused_before_encoding(options, said, beir, pipeline_dir):
    result = runner.invoke(app, ["eval", str(beir), *options, "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert said in output and "each embedded by" not in output


def test_rows_alike_by_construction_are_shown_once_with_all_their_names(
    beir, pipeline_dir, hash_pipeline, tmp_path
):
    """mean and concat are one fusion (uniform weights, concatenated), and uec at T = inf,
    β = 0 is `weighted` with its prior as weights: each pair was two rows of one figure."""
    payload, stdout, _ = _run([str(beir), "--compare"], pipeline_dir, tmp_path / "r.json")
    assert " mean = concat " in stdout
    assert " concat " not in stdout.replace("mean = concat", "")
    assert "the same fusion and score by construction" in stdout
    assert ["mean", "concat"] in payload["config"]["same_rows"]
    weights = (0.7, 0.3)
    tuned = Tuned(
        Method("weighted", FusionConfig("weighted", weights=weights)),
        Method(
            "uec",
            FusionConfig("uec", temperature=float("inf"), prior=weights),
            ScoreConfig("uec", 0.0),
        ),
        {"weighted": 0.5, "uec": 0.5},
    )
    test = load_dataset(beir)
    result = compare(hash_pipeline, test, None, tuned=tuned)
    assert set(same_rows(result)) == {("mean", "concat"), ("weighted", "uec")}
    # scored apart, the two would agree: the merge hides no difference
    apart = evaluate(embed(hash_pipeline, test), test, tuned.uec)
    assert apart.metrics == pytest.approx(result.outcomes["weighted"].metrics, abs=1e-12)
