"""Evaluation harness: metrics against hand-computed values, dataset readers, plots."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from probembed.evaluation import (
    NDCG_BELOW_MEDIAN,
    RECALL10_ZERO,
    ClassificationDataset,
    PairsDataset,
    RetrievalDataset,
    StsDataset,
    abs_rank_error,
    auroc,
    binned_quality,
    confidence_signals,
    failed_queries,
    load_dataset,
    load_pairs,
    per_query_metrics,
    plot_binned,
    plot_risk_coverage,
    probe_accuracy,
    quality_at_coverage,
    retrieval_metrics,
    risk_coverage,
    run_from_scores,
    spearman,
    top_quartile,
)
from probembed.evaluation.datasets import load_retrieval

DATA = Path(__file__).resolve().parent / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --- metrics -------------------------------------------------------------------------------


def test_spearman_of_known_permutations() -> None:
    assert spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # one adjacent swap: rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 12 / 120
    assert spearman([1, 2, 3, 4, 5], [1, 2, 3, 5, 4]) == pytest.approx(0.9)


def test_spearman_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2, 3], [1, 2])


def test_retrieval_metrics_match_the_formulas() -> None:
    qrels = {"q": {"a": 1, "c": 2}}
    run = {"q": {"b": 0.9, "a": 0.5, "c": 0.1}}  # ranking: b, a, c
    dcg = 0 / math.log2(2) + 1 / math.log2(3) + 2 / math.log2(4)  # linear gains
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    got = retrieval_metrics(qrels, run, ("ndcg@10", "recall@100", "mrr@10", "recall@2", "mrr@1"))
    assert got["ndcg@10"] == pytest.approx(dcg / idcg)
    assert got["recall@100"] == pytest.approx(1.0)
    assert got["recall@2"] == pytest.approx(0.5)
    assert got["mrr@10"] == pytest.approx(1 / 2)
    assert got["mrr@1"] == 0.0  # MRR@k: a first hit below rank k counts as nothing


def test_per_query_metrics_scores_missing_queries_zero_and_ignores_unjudged() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"x": 0.9, "y": 0.8, "a": 0.7}, "unjudged": {"a": 1.0}}
    per_query = per_query_metrics(qrels, run, ["mrr@10"])
    assert per_query == {"mrr@10": {"q1": pytest.approx(1 / 3), "q2": 0.0}}
    assert retrieval_metrics(qrels, run, ["mrr@10"]) == {"mrr@10": pytest.approx(1 / 6)}


def test_a_run_that_retrieved_nothing_for_any_query_scores_zero() -> None:
    """ranx's Run refused a run holding no document at all (`max() arg is an empty sequence`)."""
    scored = per_query_metrics({"q1": {"a": 1}, "q2": {"b": 2}}, {"q1": {}}, ["mrr@10", "ndcg@10"])
    assert scored == {"mrr@10": {"q1": 0.0, "q2": 0.0}, "ndcg@10": {"q1": 0.0, "q2": 0.0}}


def test_per_query_metrics_rejects_a_bare_metric_string() -> None:
    with pytest.raises(TypeError, match="wrap it"):
        per_query_metrics({"q": {"a": 1}}, {"q": {"a": 1.0}}, "ndcg@10")


def _ranx_overloads() -> dict[str, int]:
    """How many compiled signatures each of ranx's numba functions holds now."""
    import sys

    from numba.core.dispatcher import Dispatcher

    return {
        f"{name}.{attr}": len(found.signatures)
        for name, module in list(sys.modules.items())
        if name.startswith("ranx")
        for attr, found in vars(module).items()
        if isinstance(found, Dispatcher)
    }


def test_a_dataset_with_longer_ids_is_scored_without_compiling_anew() -> None:
    """ranx's Qrels and Run typed their ids by the longest one: every dataset whose longest id
    was a new length compiled their numba dictionaries again (10 to 40 s on 2 cores, so the
    first test scoring a few queries took 44 s). The metrics read numbered documents."""
    metrics = ["ndcg@10", "recall@100", "mrr@10"]
    short = per_query_metrics({"q": {"a": 1}}, {"q": {"b": 0.9, "a": 0.5}}, metrics)
    before = _ranx_overloads()
    doc, query = "doc-" + "x" * 40, "query-" + "y" * 30
    long = per_query_metrics({query: {doc: 1}}, {query: {"b": 0.9, doc: 0.5}}, metrics)
    assert _ranx_overloads() == before
    assert long == {name: {query: scores["q"]} for name, scores in short.items()}


def test_run_from_scores_keeps_the_top_k_in_order() -> None:
    scores = np.array([[0.1, 0.9, 0.5, 0.3], [0.8, 0.2, 0.4, 0.6]])
    run = run_from_scores(["q1", "q2"], ["a", "b", "c", "d"], scores, k=2)
    assert run == {"q1": {"b": 0.9, "c": 0.5}, "q2": {"a": 0.8, "d": 0.6}}
    assert list(run["q1"]) == ["b", "c"]
    assert len(run_from_scores(["q1", "q2"], ["a", "b", "c", "d"], scores, k=100)["q1"]) == 4


def test_tied_scores_rank_by_document_id_whatever_the_corpus_order() -> None:
    """A relevant document tied with a duplicate scored nDCG 1.0 or 0.63 by where it sat in
    the corpus; ties now rank as trec_eval ranks them (id descending), in and at the cut."""
    qrels = {"q": {"rel": 1}}
    for ids in (["rel", "dup"], ["dup", "rel"]):
        run = run_from_scores(["q"], ids, [[0.5, 0.5]])
        assert list(run["q"]) == ["rel", "dup"]
        assert per_query_metrics(qrels, run, ["ndcg@10"])["ndcg@10"]["q"] == 1.0
    run = run_from_scores(["q"], ["b", "a", "d", "c"], [[0.9, 0.2, 0.2, 0.2]], k=2)
    assert list(run["q"]) == ["b", "d"]  # the cut falls inside a tie: d before c and a


@pytest.mark.parametrize("tied", [2, 12, 40])
def test_a_large_tie_is_scored_in_the_order_the_run_ranks_it(tied) -> None:
    """ranx re-sorts a run with an unstable quicksort: with a few dozen tied documents the
    relevant one that trec_eval ranks first was scored anywhere in the tie (MRR 0.1, not 1)."""
    ids = [f"d{i:02d}" for i in range(tied)] + ["low"]
    run = run_from_scores(["q"], ids, [[1.0] * tied + [0.0]])
    first = next(iter(run["q"]))
    assert first == ids[tied - 1]  # id descending
    scored = per_query_metrics({"q": {first: 1}}, run, ["mrr@10", "ndcg@10"])
    assert scored["mrr@10"]["q"] == 1.0 and scored["ndcg@10"]["q"] == 1.0
    last = list(run["q"])[min(tied, 10) - 1]  # the tenth of the tie, or its last
    assert per_query_metrics({"q": {last: 1}}, run, ["mrr@10"])["mrr@10"]["q"] == pytest.approx(
        1 / min(tied, 10)
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=4, max_size=12),
    st.integers(1, 12),
    st.randoms(use_true_random=False),
)
def test_a_run_does_not_depend_on_the_order_of_the_corpus(levels, k, rng) -> None:
    ids = [f"d{i}" for i in range(len(levels))]
    order = list(range(len(ids)))
    rng.shuffle(order)
    scores = np.array(levels, dtype=np.float64)[None]  # few levels: many ties
    run = run_from_scores(["q"], ids, scores, k=k)
    shuffled = run_from_scores(["q"], [ids[i] for i in order], scores[:, order], k=k)
    assert list(run["q"].items()) == list(shuffled["q"].items())
    assert len(run["q"]) == min(k, len(ids))


def test_run_from_scores_rejects_a_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        run_from_scores(["q1", "q2"], ["a", "b", "c"], np.zeros((3, 2)))


def test_probe_accuracy_on_separable_clusters() -> None:
    rng = np.random.default_rng(0)
    centers = np.array([[3.0, 0.0], [-3.0, 0.0]])
    labels = np.array(["pos", "neg"] * 20)
    features = centers[(labels == "neg").astype(int)] + rng.normal(0, 0.3, (40, 2))
    assert probe_accuracy(features[:30], labels[:30], features[30:], labels[30:]) == 1.0


# --- uncertainty ---------------------------------------------------------------------------


def test_auroc_perfect_inverted_and_undefined() -> None:
    failed = [False, False, True, True]
    assert auroc([0.1, 0.2, 0.8, 0.9], failed) == 1.0
    assert auroc([0.9, 0.8, 0.2, 0.1], failed) == 0.0
    with pytest.warns(RuntimeWarning, match="all 2 items succeeded"):
        assert math.isnan(auroc([0.1, 0.2], [False, False]))


def test_metrics_and_diagnostics_name_their_misaligned_inputs_alike() -> None:
    """One check of paired inputs: the metric and the diagnostics say the same of a mismatch;
    a diagnostic takes a single item, the metric needs two, and a NaN is refused by name."""
    with pytest.raises(ValueError, match="signal and failed need the same length >= 1, got 2, 1"):
        auroc([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="uncertainty and quality need the same length >= 1"):
        risk_coverage([], [])
    with pytest.raises(ValueError, match=r"uncertainty, quality have shapes \(1, 2\), \(2,\)"):
        risk_coverage([[0.1, 0.2]], [1.0, 0.0])
    with pytest.raises(ValueError, match="pred and gold need the same length >= 2, got 1, 1"):
        spearman([0.1], [1.0])
    with pytest.raises(ValueError, match="quality holds 1 NaN values"):
        risk_coverage([0.1, 0.2], [1.0, math.nan])


def test_spearman_of_a_constant_side_is_nan_with_a_warning_naming_it() -> None:
    """scipy warned "An input array is constant" without saying which figure it was."""
    import warnings

    assert spearman([1, 2, 3], [0.1, 0.5, 0.4], diagnostic="x") == pytest.approx(0.5)
    for signal, quality in (([1, 2, 3], [0.5, 0.5, 0.5]), ([2, 2, 2], [1, 2, 3])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert math.isnan(spearman(signal, quality, diagnostic="u with its error"))
        said = [str(w.message) for w in caught]
        assert said == [
            "Spearman ρ of u with its error is undefined: one of them is the same for every "
            "item; returning nan"
        ]


def test_risk_coverage_by_hand() -> None:
    uncertainty = [0.3, 0.1, 0.2, 0.4]
    quality = [0.0, 1.0, 1.0, 0.0]  # most confident first: 1, 1, 0, 0
    coverage, mean_quality = risk_coverage(uncertainty, quality)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(mean_quality, [1.0, 1.0, 2 / 3, 0.5])
    assert quality_at_coverage(uncertainty, quality, 0.5) == 1.0
    assert quality_at_coverage(uncertainty, quality, 0.6) == pytest.approx(2 / 3)  # ceil(2.4)


def test_risk_coverage_averages_ties_so_order_does_not_matter() -> None:
    _, forward = risk_coverage([0.0, 0.0, 1.0], [1.0, 0.0, 1.0])
    _, backward = risk_coverage([0.0, 0.0, 1.0], [0.0, 1.0, 1.0])
    np.testing.assert_allclose(forward, [0.5, 0.5, 2 / 3])
    np.testing.assert_allclose(backward, forward)


def test_binned_quality_falls_with_uncertainty() -> None:
    uncertainty = np.arange(10.0)
    centers, quality, rho = binned_quality(uncertainty, 10 - uncertainty, n_bins=5)
    np.testing.assert_allclose(centers, [0.5, 2.5, 4.5, 6.5, 8.5])
    np.testing.assert_allclose(quality, [9.5, 7.5, 5.5, 3.5, 1.5])
    assert rho == pytest.approx(-1.0)


def test_failed_queries_two_definitions() -> None:
    ndcg = {"a": 0.9, "b": 0.1, "c": 0.5, "d": 0.0}  # median 0.3
    recall10 = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0}
    failed = failed_queries(ndcg, recall10, query_ids=["d", "c", "b", "a"])
    np.testing.assert_array_equal(failed[NDCG_BELOW_MEDIAN], [True, False, True, False])
    np.testing.assert_array_equal(failed[RECALL10_ZERO], [True, True, True, False])


def test_a_0_1_metric_at_0_for_most_queries_fails_them() -> None:
    """Recall@5 is 0 or 1: with 0 for half the queries or more its median is 0, and "strictly
    below the median" failed none of them (every AUROC nan, said as "all 10 items
    succeeded"). The queries at the lowest value fail, the most even split the ties allow."""
    recall = dict(enumerate([0.0, 0, 0, 1, 1, 0, 1, 0, 0, 1]))
    failed = failed_queries(recall, recall)
    np.testing.assert_array_equal(failed[NDCG_BELOW_MEDIAN], np.array(list(recall.values())) == 0)
    signal = np.array([0.9, 0.8, 0.7, 0.1, 0.2, 0.6, 0.3, 0.5, 0.4, 0.45])
    assert auroc(signal, failed[NDCG_BELOW_MEDIAN]) == pytest.approx(23 / 24)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, 1, 1, 0, 1, 0, 1], [False, False, False, True, False, True, False]),  # median 1
        ([0.0, 0.5, 0.5, 0.5, 1, 1], [True, False, False, False, False, False]),  # below it
        ([0.5, 0.5, 0.5, 1.0], [True, True, True, False]),  # ties at the lowest hold it
        ([0.4, 0.4, 0.4], [False, False, False]),  # every query alike: none below another
    ],
)
def test_below_the_median_with_ties(values, expected) -> None:
    """Where some query is strictly below the median, those fail, as before (the calibrator's
    target and the committed tables keep their labels); only where none is do the queries at
    the lowest value, and never every query."""
    per_query = dict(enumerate(values))
    np.testing.assert_array_equal(failed_queries(per_query, per_query)[NDCG_BELOW_MEDIAN], expected)


def test_abs_rank_error_and_top_quartile() -> None:
    np.testing.assert_allclose(abs_rank_error([1, 2, 3, 4], [4, 3, 2, 1]), [0.75, 0.25, 0.25, 0.75])
    np.testing.assert_array_equal(top_quartile(np.arange(1.0, 9.0)), [False] * 6 + [True] * 2)


def test_confidence_signals_by_hand() -> None:
    scores = np.array([[0.9, 0.5, 0.1], [0.6, 0.6, 0.2], [0.8, 0.7, 0.0]])
    variances = np.array([[0.04, 0.05, 0.1], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    signals = confidence_signals(scores, variances, [0.3, 0.2, 0.1])
    # z = 0.4 / sqrt(0.09); a zero-variance tie is a coin flip, a zero-variance lead is certain
    np.testing.assert_allclose(signals["margin_prob"], [norm.sf(0.4 / 0.3), 0.5, 0.0])
    np.testing.assert_allclose(signals["query_var"], [0.3, 0.2, 0.1])
    np.testing.assert_allclose(signals["neg_top1"], [-0.9, -0.6, -0.8])
    np.testing.assert_allclose(signals["neg_margin"], [-0.4, 0.0, -0.1], atol=1e-12)
    np.testing.assert_allclose(signals["top1_std"], [0.2, 0.0, 0.0])


def test_confidence_signals_reject_unsorted_scores() -> None:
    with pytest.raises(ValueError, match="descending"):
        confidence_signals([[0.1, 0.9]], [[0.0, 0.0]], [0.0])


# --- dataset readers -----------------------------------------------------------------------


def test_sts_file_and_directory() -> None:
    sts = load_dataset(DATA / "sts" / "toy" / "test.tsv")
    assert isinstance(sts, StsDataset)
    assert (sts.name, sts.split, len(sts)) == ("toy", "test", 3)
    assert sts.sentence1[0] == 'A man plays a "guitar".'  # quotes are text, not CSV quoting
    np.testing.assert_allclose(sts.scores, [4.8, 0.5, 4.0])
    from_directory = load_dataset(DATA / "sts" / "toy")
    assert from_directory.sentence2 == sts.sentence2
    np.testing.assert_array_equal(from_directory.scores, sts.scores)
    assert len(load_dataset(DATA / "sts" / "toy", split="train")) == 2


def test_classification_file_and_directory() -> None:
    from_file = load_dataset(DATA / "classification" / "toy" / "test.tsv")
    assert isinstance(from_file, ClassificationDataset)
    assert (len(from_file.train_texts), len(from_file.test_texts)) == (4, 2)
    assert from_file.test_labels == ["1", "0"]
    assert from_file.train_texts[2] == 'sharp "funny" writing'
    assert load_dataset(DATA / "classification" / "toy") == from_file


def test_pairs_file() -> None:
    pairs = load_dataset(DATA / "pairs" / "toy-pairs.tsv")
    assert isinstance(pairs, PairsDataset)
    assert (pairs.name, len(pairs)) == ("toy-pairs", 2)
    assert pairs.text_b[1] == "Someone cuts an onion ."
    assert load_pairs(DATA / "pairs" / "toy-pairs.tsv") == pairs


def test_retrieval_directory_and_qrels_file() -> None:
    beir = load_dataset(DATA / "retrieval" / "toy")
    assert isinstance(beir, RetrievalDataset)
    assert beir.corpus == {
        "d1": "Cats Cats purr when content.",
        "d2": "Dogs bark at strangers.",  # empty title: no leading space
        "d3": 'Fish Fish breathe through "gills".',
    }
    assert beir.queries == {"q1": "why do cats purr", "q2": "how do fish breathe"}
    assert beir.qrels == {"q1": {"d1": 1}, "q2": {"d3": 1}}
    assert load_dataset(DATA / "retrieval" / "toy" / "qrels" / "test.tsv") == beir


def test_missing_qrels_directory_is_named() -> None:
    with pytest.raises(FileNotFoundError, match=r"no_qrels/qrels: missing"):
        load_dataset(DATA / "bad" / "no_qrels")
    judged = r"qrels/dev\.tsv: missing; the splits judged here are: test$"
    with pytest.raises(FileNotFoundError, match=judged):
        load_retrieval(DATA / "retrieval" / "toy", "dev")  # it named the file only


def test_unknown_header_is_named() -> None:
    with pytest.raises(ValueError, match=r"test\.tsv:1: unknown header 'query\\tanswer'"):
        load_dataset(DATA / "bad" / "unknown_header")


@pytest.mark.parametrize("kind", ["sts", "pairs", "qrels"])
def test_an_empty_or_utf16_split_is_named_as_such(tmp_path: Path, kind: str) -> None:
    """An empty STS or pairs file said "unknown header ''" (or "header '', expected ..."), a
    UTF-16 one "not UTF-8: byte 0xff at offset 0": say the file is empty, or UTF-16 with the
    iconv that converts it, as a UTF-16 corpus.jsonl is told."""
    header = {"sts": "sentence1\tsentence2\tscore", "pairs": "text_a\ttext_b"}.get(
        kind, "query-id\tcorpus-id\tscore"
    )
    folder = tmp_path / "qrels" if kind == "qrels" else tmp_path
    folder.mkdir(exist_ok=True)
    split = folder / "dev.tsv"
    readers = [lambda: load_dataset(split)]
    if kind == "pairs":
        readers.append(lambda: load_pairs(split))
    else:
        readers.append(lambda: load_dataset(tmp_path, "dev"))
    if kind == "qrels":
        (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    split.write_bytes(b"")
    for read in readers:
        with pytest.raises(ValueError, match="dev.tsv: the file is empty; expected the header "):
            read()
    # with a byte order mark, and without one (UTF-16 of ASCII is valid UTF-8 with NULs: it
    # was read as the garbled header 's\x00e\x00n\x00...')
    for encoding, name in (("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE")):
        split.write_text(f"{header}\na\tb\t1\n", encoding=encoding)
        for read in readers:
            with pytest.raises(ValueError) as refused:
                read()
            assert str(refused.value).startswith(f"{split}: {name} text"), str(refused.value)
            assert f"`iconv -f {name} -t UTF-8`" in str(refused.value)


def test_malformed_line_gives_file_and_line() -> None:
    with pytest.raises(ValueError, match=r"malformed/test\.tsv:3: expected 3 tab-separated"):
        load_dataset(DATA / "bad" / "malformed" / "test.tsv")


@pytest.mark.parametrize("score", ["nan", "inf", "-Infinity"])
def test_a_gold_score_that_is_not_finite_is_refused_naming_file_and_line(
    tmp_path: Path, score: str
) -> None:
    """float() reads them; the Spearman came out NaN, or tuning blamed a method for it."""
    path = tmp_path / "sts" / "test.tsv"
    path.parent.mkdir()
    path.write_text(f"sentence1\tsentence2\tscore\na\tb\t1.0\nc\td\t{score}\n")
    with pytest.raises(ValueError, match=rf"test\.tsv:3: '{score}' is not a finite number"):
        load_dataset(path)


def test_missing_split_lists_what_exists() -> None:
    with pytest.raises(FileNotFoundError, match=r"dev\.tsv: missing.*splits found: test, train$"):
        load_dataset(DATA / "sts" / "toy", split="dev")


def test_split_conflicting_with_a_file_is_rejected() -> None:
    with pytest.raises(ValueError, match="conflicts"):
        load_dataset(DATA / "sts" / "toy" / "test.tsv", split="train")


def test_bad_json_line_gives_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "fine"}\n{"_id": "d2",\n')
    with pytest.raises(ValueError, match=r"corpus\.jsonl:2: malformed JSON"):
        load_dataset(tmp_path)


def test_a_pair_judged_twice_differently_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """The later line silently won: d1 scored as irrelevant with no word of the conflict."""
    (tmp_path / "qrels").mkdir()
    qrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq1\td2\t0\nq1\td1\t0\n"
    (tmp_path / "qrels" / "test.tsv").write_text(qrels)
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
    corpus = '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "b"}\n'
    (tmp_path / "corpus.jsonl").write_text(corpus)
    with pytest.raises(ValueError, match=r"test\.tsv:5: .*'d1' 0, but line 2 judged it 1"):
        load_dataset(tmp_path)


def test_real_datasets_have_the_documented_counts(datasets: Path) -> None:
    stsb = load_dataset(datasets / "sts" / "stsb")
    assert isinstance(stsb, StsDataset)
    assert len(stsb) == 1379
    assert stsb.scores.min() >= 0 and stsb.scores.max() <= 5
    scifact = load_dataset(datasets / "retrieval" / "scifact")
    assert isinstance(scifact, RetrievalDataset)
    assert (len(scifact.queries), len(scifact.corpus)) == (300, 5183)
    assert sum(len(docs) for docs in scifact.qrels.values()) == 339


# --- plots ---------------------------------------------------------------------------------


def test_plots_write_png_files(tmp_path: Path) -> None:
    coverage, quality = risk_coverage([0.3, 0.1, 0.2, 0.4], [0.0, 1.0, 1.0, 0.0])
    written = [
        plot_risk_coverage({"toy": (coverage, quality)}, tmp_path / "rc.png", "toy"),
        plot_binned({"toy": ([0.1, 0.5, 0.9], [0.9, 0.6, 0.2])}, tmp_path / "sub" / "bins.png"),
    ]
    for path in written:
        assert path.read_bytes().startswith(PNG_MAGIC)


def test_a_query_with_no_relevant_document_is_left_out_of_the_means_with_a_warning():
    """ranx (and trec_eval) score such a query 0 on every metric: half the queries so judged
    halved every mean, and nothing said so."""
    qrels = {"a": {"d1": 1}, "b": {"d2": 0, "d3": 0}, "c": {"d4": 2}}
    run = {"a": {"d1": 1.0}, "b": {"d2": 1.0}, "c": {"d9": 2.0, "d4": 1.0}}
    with pytest.warns(UserWarning, match=r"1 of 3 judged queries have no document judged"):
        per_query = per_query_metrics(qrels, run, ["ndcg@10", "mrr@10"])
    assert set(per_query["mrr@10"]) == {"a", "c"}
    with pytest.warns(UserWarning, match=r"left out of every mean.*'b'"):
        means = retrieval_metrics(qrels, run, ["mrr@10", "recall@100"])
    assert means == {"mrr@10": pytest.approx((1 + 1 / 2) / 2), "recall@100": 1.0}
    with pytest.raises(ValueError, match="none of the 1 judged queries has a document judged"):
        retrieval_metrics({"b": {"d2": 0}}, run)
