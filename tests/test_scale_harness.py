"""benchmarks/scale.py at a few hundred items: kill-and-resume ingest, search and FAISS rows."""

import importlib
import sys
from pathlib import Path

import pytest

from probembed.store import Database

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
N = 400
BATCH = 20


@pytest.fixture(scope="module")
def scale(datasets):
    """The harness module, imported after conftest pointed the cache at a private directory."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        module = importlib.import_module("scale")
    finally:
        sys.path.remove(str(BENCHMARKS))
    module.fitted_pipeline()  # fitted once here; the worker processes load it
    return module


@pytest.fixture(scope="module")
def ingested(scale, tmp_path_factory) -> tuple[Path, list[dict]]:
    """A database of N hashing items whose first ingest was killed after 5 commits, resumed."""
    db_path = tmp_path_factory.mktemp("scale") / "db"
    rows = scale.run_ingest(db_path, N, BATCH, kill_after=5)
    return db_path, [{"n": N, "data": "hash", **r} for r in rows]


def test_corpus_cycles_real_texts_under_unique_ids(scale):
    base = ["alpha beta", "gamma"]
    records = scale.corpus(base, 5)
    assert [r.id for r in records] == ["0", "1", "2", "3", "4"]
    assert [r.text for r in records] == [
        "alpha beta",
        "gamma",
        "alpha beta 1",
        "gamma 1",
        "alpha beta 2",
    ]


def test_killed_ingest_resumes_to_exactly_n_unique_rows(scale, ingested):
    db_path, rows = ingested
    stored = Database(db_path).open(scale.name_of(N))
    assert stored.count() == N
    assert stored.ids() == {str(i) for i in range(N)}
    at_kill = scale.value_of(rows, "ingest", None, "rows_at_kill")
    # the parent kills after reading the 5th commit line: at least 5 whole commits are stored
    assert 5 * BATCH <= at_kill <= N
    assert at_kill % BATCH == 0  # a commit is all of a batch or none of it
    assert scale.value_of(rows, "ingest", None, "resume_ok") == 1
    assert scale.value_of(rows, "ingest", None, "rows") == N - at_kill


def test_search_rows_and_checks_at_small_n(scale, ingested, monkeypatch):
    monkeypatch.setattr(scale, "QUERIES", 30)
    monkeypatch.setattr(scale, "RECALL_QUERIES", 20)
    monkeypatch.setattr(scale, "REPEATS", 1)
    db_path, ingest_rows = ingested
    rows = scale.worker_search(db_path, scale.name_of(N), real=False)
    assert {r["n"] for r in rows} == {N}
    for score in scale.SCORES:
        # below IndexSettings.scan_below the default search is the exact scan itself
        assert scale.value_of(rows, "probembed", score, "recall@10") == 1.0
        p50, p99 = (scale.value_of(rows, "probembed", score, m) for m in ("p50_ms", "p99_ms"))
        assert 0 < p50 <= p99
        ef = scale.value_of(rows, "faiss-hnsw", score, "ef_search")
        by_ef = {
            e: scale.value_of(rows, f"faiss-hnsw-ef{e}", "dot", "recall@10") for e in scale.HNSW_EFS
        }
        reaching = [e for e in scale.HNSW_EFS if by_ef[e] >= 1.0]
        assert ef == (reaching[0] if reaching else scale.HNSW_EFS[-1])
    rss = scale.value_of(rows, "probembed", None, "rss_bytes")
    assert 0 < rss <= scale.value_of(rows, "probembed", None, "peak_rss_bytes")
    disk = scale.value_of(rows, "store", None, "disk_bytes_per_item")
    assert 0 < scale.value_of(rows, "store", None, "pruned_bytes_per_item") <= disk
    lines = scale.checks(ingest_rows + rows)
    assert lines[0].endswith("met") and "resumed" in lines[0]
    assert any(line.startswith("dot: p99") for line in lines)
