"""BEIR data: one JSONL reader for ingest and evaluation, missing judged documents, self-matches."""

import warnings
from pathlib import Path

import numpy as np
import pytest
from beir_data import write_beir

from probembed.evaluation.datasets import load_dataset, load_evaluable, load_retrieval
from probembed.evaluation.harness import COSINE, Method, embed, evaluate
from probembed.evaluation.metrics import per_query_metrics
from probembed.pipeline import FusionConfig
from probembed.store.readers import Record, read_records

COSINE_MEAN = Method("mean", FusionConfig("mean"), COSINE)


TITLES = [
    {"_id": "null", "title": None, "text": "Cats purr."},
    {"_id": "missing", "text": "Dogs bark."},
    {"_id": "empty", "title": "", "text": "Fish swim."},
    {"_id": "padded", "title": "Birds   ", "text": " Birds sing. "},
]
QUERIES = [{"_id": "q1", "text": "why do cats purr"}, {"_id": "q2", "text": "how do fish swim"}]


def test_every_title_form_reads_the_same_for_ingest_and_evaluation(tmp_path):
    data = write_beir(tmp_path, TITLES, QUERIES, [("q1", "null", 1), ("q2", "empty", 1)])
    expected = {
        "null": "Cats purr.",
        "missing": "Dogs bark.",
        "empty": "Fish swim.",
        "padded": "Birds Birds sing.",
    }
    assert load_retrieval(data).corpus == expected
    records = list(read_records(data))
    assert all(isinstance(r, Record) for r in records)
    assert {r.id: r.text for r in records} == expected


def test_a_title_that_is_not_a_string_is_named_with_file_and_line(tmp_path):
    corpus = [*TITLES, {"_id": "bad", "title": 3, "text": "Numbers."}]
    data = write_beir(tmp_path, corpus, QUERIES, [("q1", "null", 1)])
    with pytest.raises(ValueError, match=r"corpus\.jsonl:5: document 'bad'.*'title'"):
        load_retrieval(data)


def test_real_scifact_reads_the_same_for_ingest_and_evaluation(datasets):
    scifact = datasets / "retrieval" / "scifact"
    records = {r.id: r.text for r in read_records(scifact)}
    assert load_retrieval(scifact).corpus == records


#: A corpus that every earlier reader could read, for the tests of what gets scored.
PLAIN = [
    {"_id": "cats", "title": "Cats", "text": "Cats purr."},
    {"_id": "dogs", "text": "Dogs bark."},
    {"_id": "fish", "title": "Fish", "text": "Fish swim."},
    {"_id": "birds", "title": "Birds", "text": "Birds sing."},
]
QRELS_WITH_A_GAP = [("q1", "cats", 1), ("q1", "gone", 1), ("q1", "also-gone", 2), ("q2", "fish", 1)]


def test_judged_documents_missing_from_the_corpus_warn_and_count_as_never_retrieved(
    hash_pipeline, tmp_path
):
    data = write_beir(tmp_path, PLAIN, QUERIES, QRELS_WITH_A_GAP)
    with pytest.warns(UserWarning, match=r"2 judged documents missing.*'also-gone'"):
        dataset = load_dataset(data)
    assert dataset.qrels["q1"] == {"cats": 1, "gone": 1, "also-gone": 2}
    outcome = evaluate(embed(hash_pipeline, dataset), dataset, COSINE_MEAN)
    # the corpus has 4 documents, so recall@100 retrieves all present ones: q1 finds 1 of 3
    np.testing.assert_array_equal(outcome.per_item["recall@100"], [1 / 3, 1.0])


def test_strict_refuses_judged_documents_missing_from_the_corpus(tmp_path):
    data = write_beir(tmp_path, PLAIN, QUERIES, QRELS_WITH_A_GAP)
    with pytest.raises(ValueError, match=r"2 judged documents missing.*'also-gone'"):
        load_dataset(data, strict=True)
    with pytest.raises(ValueError, match=r"2 judged documents missing"):
        load_retrieval(data, strict=True)


def test_judged_queries_missing_from_the_queries_file_are_still_refused(tmp_path):
    """The refusal names the qrels line of the first missing query (it named the folder)."""
    data = write_beir(tmp_path, PLAIN, QUERIES, [("q1", "cats", 1), ("q9", "fish", 1)])
    with pytest.raises(ValueError, match=r"1 judged queries missing.*'q9'") as refused:
        load_retrieval(data)
    assert str(refused.value).startswith(
        f"{data / 'qrels' / 'test.tsv'}:3: query 'q9' is not in queries.jsonl; "
    )


def test_a_query_without_its_text_is_called_a_query(tmp_path):
    """A queries.jsonl line without a text said "document 'q2' has no 'text' field"."""
    data = write_beir(tmp_path, PLAIN, [QUERIES[0], {"_id": "q2"}], [("q1", "cats", 1)])
    with pytest.raises(ValueError) as refused:
        load_retrieval(data)
    assert str(refused.value) == f"{data / 'queries.jsonl'}:2: query 'q2' has no 'text' field"
    (data / "corpus.jsonl").write_text('{"_id": "cats"}\n')  # a document is still one
    with pytest.raises(ValueError, match=r"corpus\.jsonl:1: document 'cats' has no 'text'"):
        load_retrieval(data)


SELF_CORPUS = [*PLAIN, {"_id": "q1", "text": "why do cats purr"}]


def test_a_document_with_the_query_id_is_not_retrieved_by_default(hash_pipeline, tmp_path):
    with_self = load_retrieval(
        write_beir(tmp_path / "a", SELF_CORPUS, QUERIES, QRELS_WITH_A_GAP[:1])
    )
    without = load_retrieval(write_beir(tmp_path / "b", PLAIN, QUERIES, QRELS_WITH_A_GAP[:1]))
    dropped = evaluate(embed(hash_pipeline, with_self), with_self, COSINE_MEAN)
    reference = evaluate(embed(hash_pipeline, without), without, COSINE_MEAN)
    assert dropped.metrics == reference.metrics
    # products over 5 and 4 documents: OpenBLAS may round a column differently as the matrix
    # widens (measured: most shapes change the float64 value in the last bits); 1e-12 is
    # far above that and far below any gap between two documents' scores
    np.testing.assert_allclose(
        dropped.per_item["top_scores"], reference.per_item["top_scores"], rtol=1e-12
    )


def test_keep_self_matches_ranks_the_query_document_first(hash_pipeline, tmp_path):
    data = write_beir(tmp_path, SELF_CORPUS, QUERIES, QRELS_WITH_A_GAP[:1])
    dropped, kept = load_dataset(data), load_dataset(data, keep_self_matches=True)
    reference = evaluate(embed(hash_pipeline, dropped), dropped, COSINE_MEAN).metrics["mrr@10"]
    outcome = evaluate(embed(hash_pipeline, kept), kept, COSINE_MEAN)
    # the same text has cosine 1 with itself (float32 unit vectors: within 1e-6) and below 1
    # with every other text, so it ranks first and pushes the relevant document down one place
    np.testing.assert_allclose(outcome.per_item["top_scores"][0, 0], 1.0, atol=1e-6)
    assert outcome.metrics["mrr@10"] == pytest.approx(1 / (1 / reference + 1), rel=1e-12)


def test_keep_self_matches_applies_to_retrieval_only():
    sts = Path(__file__).parent / "data" / "sts" / "toy"
    with pytest.raises(ValueError, match="keep_self_matches.*retrieval"):
        load_dataset(sts, keep_self_matches=True)


def test_a_document_with_no_text_is_kept_with_a_warning_as_beir_does(tmp_path):
    corpus = [*PLAIN, {"_id": "blank", "title": "", "text": "  "}]
    path = write_beir(tmp_path / "b", corpus, QUERIES, QRELS_WITH_A_GAP[:1])
    with pytest.warns(UserWarning, match="1 document.* empty text .*'blank'"):
        data = load_retrieval(path)
    assert data.corpus["blank"] == "" and len(data.corpus) == len(corpus)


def test_a_grade_below_0_is_read_as_not_relevant_with_a_warning_naming_file_and_line(tmp_path):
    """TREC sets grade -1 (not relevant) and -2 (junk): eval read them without a word."""
    qrels = [("q1", "cats", 1), ("q1", "dogs", -1), ("q2", "fish", -2), ("q2", "birds", 0)]
    data = write_beir(tmp_path, PLAIN, QUERIES, qrels)
    said = (
        r"qrels/test.tsv:3: 2 judgements graded below 0 \(first: query 'q1', document 'dogs', "
        r"grade -1\), read as not relevant, as grade 0 is"
    )
    with pytest.warns(UserWarning, match=said) as told:
        dataset = load_retrieval(data)
    assert {w.filename for w in told if "below 0" in str(w.message)} == {__file__}
    for entry in (load_dataset, load_evaluable):  # reached another way: still the caller's line
        with pytest.warns(UserWarning, match=said) as told:
            entry(data)
        assert {w.filename for w in told if "below 0" in str(w.message)} == {__file__}, entry
    assert dataset.qrels == {"q1": {"cats": 1, "dogs": -1}}
    assert dataset.without_relevant == ("q2",)  # -2 and 0: no relevant document
    run = {"q1": {"dogs": 2.0, "cats": 1.0}}
    as_zero = {"q1": {"cats": 1, "dogs": 0}}
    assert per_query_metrics(dataset.qrels, run) == per_query_metrics(as_zero, run)
    write_beir(tmp_path / "clean", PLAIN, QUERIES, [("q1", "cats", 1), ("q2", "fish", 0)])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*below 0")
        load_retrieval(tmp_path / "clean", "test")
