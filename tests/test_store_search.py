"""Search: equal to a brute-force scan for every score, ANN recall, hybrid RRF, CLI JSON."""

import json

import numpy as np
import pytest
import typer
from scipy.stats import norm
from typer.testing import CliRunner

from probembed.gaussian import Gaussian
from probembed.interfaces.store_commands import register
from probembed.scoring import Score, dot_variance, score_matrix
from probembed.store import Database, IndexSettings, Searcher, confidence, ingest
from probembed.store.ranking import RRF_K
from probembed.store.readers import Record

QUERIES = ["A man is playing a guitar.", "The cat sat on the mat.", "Stocks fell sharply today."]


@pytest.fixture(scope="module")
def small(tmp_path_factory, hash_pipeline, sentences):
    """300 real sentences in a collection, and their Gaussians for brute-force comparison."""
    texts = sentences[:300]
    db = Database(tmp_path_factory.mktemp("small") / "db", create=True)
    records = [Record(f"s{i}", t, {"n": i}) for i, t in enumerate(texts)]
    ingest(records, db.collection("small"), hash_pipeline, batch_size=100)
    return db.open("small"), hash_pipeline.encode(texts).gaussian


def brute_force(queries: Gaussian, docs: Gaussian, score, k):
    """Top-k positions and scores of an exhaustive score_matrix scan."""
    scores = score_matrix(queries, docs, score)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.mark.parametrize("score", [s.value for s in Score])
@pytest.mark.parametrize("settings", [IndexSettings(), IndexSettings(scan_below=0, pool=1000)])
def test_search_equals_brute_force_scan(small, hash_pipeline, score, settings):
    collection, docs = small
    queries = hash_pipeline.encode(QUERIES).gaussian
    order, expected = brute_force(queries, docs, score, k=7)
    results = Searcher(collection, hash_pipeline, settings).search(QUERIES, k=7, score=score)
    for i, result in enumerate(results):
        assert [h["id"] for h in result["hits"]] == [f"s{j}" for j in order[i]]
        got = [h["score"] for h in result["hits"]]
        np.testing.assert_allclose(got, expected[i], rtol=1e-9, atol=1e-9)
        std = np.sqrt(dot_variance(queries[i], docs[order[i]])[0])
        np.testing.assert_allclose([h["std"] for h in result["hits"]], std, rtol=1e-6)


def test_hits_carry_weights_text_and_query_confidence(small, hash_pipeline, sentences):
    collection, docs = small
    result = collection.search(QUERIES[0], k=2, score="dot", exact=True)
    first, second = result["hits"]
    assert first["text"] == sentences[int(first["id"][1:])]
    assert set(first["weights"]) == set(hash_pipeline.models)
    assert sum(first["weights"].values()) == pytest.approx(1.0, abs=1e-6)
    q = hash_pipeline.encode(QUERIES[:1]).gaussian
    d = docs[[int(first["id"][1:]), int(second["id"][1:])]]
    v = dot_variance(q, d)[0]
    expected = norm.cdf((first["score"] - second["score"]) / np.sqrt(v.sum()))
    assert result["confidence"] == pytest.approx(expected)
    assert confidence(np.array([]), np.array([])) is None
    assert confidence(np.array([0.5]), np.array([0.1])) == 1.0


def test_ann_recall_for_uec_is_at_least_099(tmp_path, hash_pipeline, sentences):
    texts = sentences[:3000]
    collection = Database(tmp_path / "db", create=True).collection("big")
    ingest([Record(str(i), t) for i, t in enumerate(texts)], collection, hash_pipeline)
    queries = sentences[3000:3100]
    ann = Searcher(collection, hash_pipeline, IndexSettings(scan_below=0))
    exact = Searcher(collection, hash_pipeline)
    got = ann.search(queries, k=10, score="uec")
    truth = exact.search(queries, k=10, score="uec", exact=True)
    recall = np.mean(
        [
            len({h["id"] for h in a["hits"]} & {h["id"] for h in t["hits"]}) / 10
            for a, t in zip(got, truth, strict=True)
        ]
    )
    assert recall >= 0.99
    graphs = list((collection.db.path / ".probembed" / "big").glob("hnsw-mean-v*.faiss"))
    assert len(graphs) == 1  # persisted beside the table for the next process


def test_hybrid_is_reciprocal_rank_fusion_of_dense_and_bm25(small, hash_pipeline):
    collection, _ = small
    query = "A man is playing a guitar."
    settings = IndexSettings()
    depth = settings.pool_size(5)
    dense = collection.search(query, k=depth, score="uec")["hits"]
    lexical = collection.text_search(query, depth)
    expected: dict[str, float] = {}
    for ranking in ([h["id"] for h in dense], lexical):
        for rank, doc_id in enumerate(ranking, start=1):
            expected[doc_id] = expected.get(doc_id, 0.0) + 1 / (RRF_K + rank)
    best = sorted(expected, key=lambda d: (-expected[d], int(d[1:])))[:5]
    hybrid = collection.search(query, k=5, score="uec", hybrid=True)
    assert [h["id"] for h in hybrid["hits"]] == best
    np.testing.assert_allclose([h["score"] for h in hybrid["hits"]], [expected[d] for d in best])
    assert lexical and "guitar" in collection.rows(lexical[:1])[lexical[0]]["text"].lower()


def test_cli_search_json_has_the_documented_shape(small):
    collection, _ = small
    app = typer.Typer()
    register(app)
    args = ["search", "a man plays guitar", "--db", str(collection.db.path), "-c", "small"]
    done = CliRunner().invoke(app, [*args, "-k", "3", "--json"])
    assert done.exit_code == 0, done.output
    (result,) = json.loads(done.stdout)  # always a list, one result per question
    assert set(result) == {"query", "confidence", "hits"}
    assert len(result["hits"]) == 3
    assert {"id", "score", "std", "weights", "text"} <= set(result["hits"][0])
    table = CliRunner().invoke(app, [*args, "-k", "2"])
    assert table.exit_code == 0 and "confidence" in table.stdout and "±" in table.stdout


def test_cli_reports_missing_database_and_corpus_without_traceback(tmp_path):
    app = typer.Typer()
    register(app)
    missing = CliRunner().invoke(app, ["search", "q", "--db", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no database at" in missing.output
    assert "Traceback" not in missing.output
    demo = CliRunner().invoke(app, ["demo", "--data", str(tmp_path / "no-corpus")])
    assert demo.exit_code == 1 and "make run DATA=" in demo.output


@pytest.mark.parametrize("settings", [IndexSettings(), IndexSettings(scan_below=0, pool=1000)])
def test_filtered_search_equals_brute_force_over_the_kept_rows(small, hash_pipeline, settings):
    collection, docs = small
    queries = hash_pipeline.encode(QUERIES).gaussian
    kept = np.arange(150, 300)
    order, _ = brute_force(queries, docs[kept], "uec", k=5)
    searcher = Searcher(collection, hash_pipeline, settings)
    results = searcher.search(QUERIES, k=5, score="uec", where="n >= 150")
    for i, result in enumerate(results):
        assert [h["id"] for h in result["hits"]] == [f"s{kept[j]}" for j in order[i]]
