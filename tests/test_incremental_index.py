"""Incremental search state: adds extend the graph, deletes are masked, a rebuild when it pays."""

import pytest

from probembed.chunking import ChunkSettings
from probembed.store import Database, IndexSettings, Record, Searcher, ingest
from probembed.store.pydoc_corpus import read_pydoc_topics
from probembed.store.snapshot import REBUILD_DEAD_FRACTION

#: Every collection here searched through its graph, however small.
GRAPH = IndexSettings(scan_below=0, pool=400)


@pytest.fixture
def passages() -> list[Record]:
    """Real passages with unique ids and texts (the Python docs that ship with CPython).

    Some topics repeat others' sections (`compound` holds `try`), so equal texts are dropped:
    every passage must be its own best match.
    """
    unique: dict[str, Record] = {}
    for record in read_pydoc_topics(chunking=ChunkSettings(128, 16)):
        unique.setdefault(record.text, record)
    return list(unique.values())[:400]


@pytest.fixture
def warm(tmp_path, pydoc_pipeline, passages):
    """300 passages in a collection, and a searcher whose graph is built."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest(passages[:300], collection, pydoc_pipeline)
    searcher = Searcher(collection, pydoc_pipeline, GRAPH)
    searcher.search([passages[0].text], k=5)
    return collection, searcher


def ids_of(result) -> list[str]:
    return [h["id"] for h in result["hits"]]


def same_as_exact(searcher: Searcher, texts: list[str], k: int = 10) -> None:
    """The graph search finds what the exact scan finds (pool 400 covers every row)."""
    for got, want in zip(
        searcher.search(texts, k=k), searcher.search(texts, k=k, exact=True), strict=True
    ):
        assert ids_of(got) == ids_of(want)


def test_added_rows_extend_the_graph_instead_of_rebuilding_it(warm, pydoc_pipeline, passages):
    collection, searcher = warm
    graph, snapshot = searcher._graphs["mean"], searcher._snapshot
    # 25 more rows: under REMEASURE_FRACTION, so the collection's adaptation (which retilts
    # every row, and so does need a new graph) stays as it was
    ingest(passages[300:325], collection, pydoc_pipeline)
    hits = searcher.search([p.text for p in passages[300:310]], k=1)
    assert [ids_of(r)[0] for r in hits] == [p.id for p in passages[300:310]]
    assert searcher._graphs["mean"] is graph and len(graph) == 325  # extended in place
    assert searcher._snapshot is snapshot
    same_as_exact(searcher, [p.text for p in passages[295:305]])


def test_deleted_rows_are_never_returned_and_cost_no_rebuild(warm, passages):
    collection, searcher = warm
    graph = searcher._graphs["mean"]
    gone = [p.id for p in passages[:20]]
    collection.delete(gone)
    for result in searcher.search([p.text for p in passages[:20]], k=10):
        assert not set(ids_of(result)) & set(gone)
    snapshot = searcher._snapshot
    assert searcher._graphs["mean"] is graph and snapshot.live == 280
    assert snapshot.live == int(snapshot.alive.sum())  # counted by key, not by a pass
    same_as_exact(searcher, [p.text for p in passages[:5]])


def test_many_deletes_load_the_rows_afresh_and_rebuild(warm, passages):
    collection, searcher = warm
    graph, snapshot = searcher._graphs["mean"], searcher._snapshot
    dead = int(REBUILD_DEAD_FRACTION * 300) + 1
    collection.delete([p.id for p in passages[:dead]])
    searcher.search([passages[dead].text], k=5)
    assert searcher._snapshot is not snapshot and len(searcher._snapshot) == 300 - dead
    assert searcher._graphs["mean"] is not graph
    same_as_exact(searcher, [p.text for p in passages[dead : dead + 5]])


def test_an_upsert_replaces_the_row_the_search_returns(warm, pydoc_pipeline, passages):
    collection, searcher = warm
    first = passages[0]
    changed = Record(first.id, passages[350].text, first.metadata)
    ingest([changed], collection, pydoc_pipeline, upsert=True)
    hit = searcher.search([passages[350].text], k=1)[0]["hits"][0]
    assert hit["id"] == first.id and hit["text"] == passages[350].text
    snapshot = searcher._snapshot  # the old row is dead, the new one live
    assert snapshot.live == int(snapshot.alive.sum()) == 300 and len(snapshot) == 301


def listed(collection, monkeypatch) -> list[int | None]:
    """Record each listing's `after_row_id` (None: the whole listing); the real one runs."""
    calls: list[int | None] = []
    real = collection.listing

    def listing(after_row_id=None):
        calls.append(after_row_id)
        return real(after_row_id)

    monkeypatch.setattr(collection, "listing", listing)
    return calls


def test_an_append_reads_only_the_rows_written_since(warm, pydoc_pipeline, passages, monkeypatch):
    collection, searcher = warm
    calls = listed(collection, monkeypatch)
    ingest(passages[300:310], collection, pydoc_pipeline)
    hits = searcher.search([p.text for p in passages[300:310]], k=1)
    assert [ids_of(r)[0] for r in hits] == [p.id for p in passages[300:310]]
    assert calls and None not in calls  # never the whole listing
    assert searcher._snapshot.live == 310


def test_deletes_hidden_behind_as_many_adds_are_still_seen(
    warm, pydoc_pipeline, passages, monkeypatch
):
    # 10 rows deleted and 10 added between two searches: the count alone matches an append
    # of 10, but the deleted rows must still be found dead (the whole listing is read)
    collection, searcher = warm
    calls = listed(collection, monkeypatch)
    gone = [p.id for p in passages[:10]]
    collection.delete(gone)
    ingest(passages[300:310], collection, pydoc_pipeline)
    results = searcher.search([p.text for p in passages[:10]], k=10)
    assert all(not set(ids_of(r)) & set(gone) for r in results)
    assert None in calls
    snapshot = searcher._snapshot
    assert snapshot.live == int(snapshot.alive.sum()) == 300
    same_as_exact(searcher, [p.text for p in passages[300:305]])


def test_a_compaction_moves_rows_but_changes_no_answer(warm, pydoc_pipeline, passages):
    collection, searcher = warm
    for start in range(300, 310, 2):  # small fragments for the compaction to merge
        ingest(passages[start : start + 2], collection, pydoc_pipeline)
    before = [ids_of(r) for r in searcher.search([p.text for p in passages[:5]], k=10)]
    rows_before = set(collection.listing()[2].column("_rowid").to_pylist())
    collection.optimize()
    assert set(collection.listing()[2].column("_rowid").to_pylist()) != rows_before  # moved
    after = [ids_of(r) for r in searcher.search([p.text for p in passages[:5]], k=10)]
    assert after == before and searcher._snapshot.live == 310
    same_as_exact(searcher, [p.text for p in passages[:5]])


def test_a_graph_saved_after_a_revert_serves_another_searcher(tmp_path, pydoc_pipeline, passages):
    """After a revert, a warm searcher holds the row that came back at its end: the graph it
    saves is keyed by its order, and a new searcher (another process) finds as it does."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest(passages[:300], collection, pydoc_pipeline)
    version = collection.version
    collection.delete([passages[3].id])
    warm = Searcher(collection, pydoc_pipeline, GRAPH)
    warm.search([passages[0].text], k=1, exact=True)  # the snapshot, without the graph
    collection.revert(version, [passages[3].id])  # passages[3] comes back
    texts, own = [p.text for p in passages[:300:10]], [p.id for p in passages[:300:10]]
    narrow = IndexSettings(scan_below=0, pool=10, pool_factor=1)  # the graph picks the 10
    warm.settings = narrow
    assert [ids_of(r)[0] for r in warm.search(texts, k=1)] == own  # builds and saves its graph
    fresh = Searcher(Database(tmp_path / "db").collection("docs"), pydoc_pipeline, narrow)
    assert [ids_of(r)[0] for r in fresh.search(texts, k=1)] == own
