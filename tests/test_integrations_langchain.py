"""LangChain on probembed: a retriever answers through LangChain's own public API.

The store is a real probembed collection (LanceDB on disk) and the classes are LangChain's own
(`langchain_core`), so these tests fail if either side's interface moves.
"""

import asyncio
import datetime
import itertools
import json
import unicodedata
import warnings
from dataclasses import replace

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStoreRetriever

from probembed.calibration import RelevanceCalibrator, hit_features
from probembed.integrations.common import text_id
from probembed.integrations.langchain import ProbembedEmbeddings, ProbembedVectorStore
from probembed.pipeline import AdaptConfig, FusionConfig, ModelSpec, Pipeline
from probembed.scoring import parse_score
from probembed.store import Database
from probembed.store.errors import CollectionNotFoundError, StoreError
from probembed.store.pydoc_corpus import read_pydoc_topics
from probembed.store.ranking import scan
from probembed.store.search import QueryCutWarning

TOPICS = ["try", "with", "assert", "lambda", "del", "while"]
QUESTION = "What does the assert statement do when debugging is on?"
#: A question past the built-ins' token limit (256).
LONG_QUESTION = " ".join(["the history of football clubs in european leagues"] * 60)


@pytest.fixture(scope="module")
def records():
    """Passages of six topics of the bundled Python docs, with topic/title/section metadata;
    whole records, as a LangChain app's splitter gives them (without chunked ingest's
    doc_hash, a collection of chunks would refuse every other text the tests add)."""
    return [
        replace(r, metadata={k: v for k, v in r.metadata.items() if k != "doc_hash"})
        for r in read_pydoc_topics(TOPICS)
    ]


@pytest.fixture
def store(tmp_path, pydoc_pipeline, records) -> ProbembedVectorStore:
    """A store over a fresh collection holding the passages under their own ids."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    store = ProbembedVectorStore(collection, ProbembedEmbeddings(pydoc_pipeline))
    store.add_texts(
        [r.text for r in records], [r.metadata for r in records], ids=[r.id for r in records]
    )
    return store


def test_a_retriever_answers_a_question_through_langchain_alone(store):
    retriever = store.as_retriever(search_kwargs={"k": 3})
    assert isinstance(retriever, VectorStoreRetriever)
    docs = retriever.invoke(QUESTION)
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    assert docs[0].metadata["topic"] == "assert"
    assert docs[0].id.startswith("assert#")
    assert "assert" in docs[0].page_content


def test_every_document_carries_the_hit_and_query_numbers_probembed_gives(store):
    docs = store.similarity_search(QUESTION, k=4)
    result = store.collection.search(QUESTION, k=4)
    assert [d.id for d in docs] == [h["id"] for h in result["hits"]]
    for doc, hit in zip(docs, result["hits"], strict=True):
        numbers = doc.metadata["probembed"]
        assert numbers["id"] == doc.id == hit["id"]
        assert numbers["score"] == hit["score"] and numbers["std"] == hit["std"]
        assert numbers["weights"] == hit["weights"] and numbers["p_relevant"] is None
        assert numbers["confidence"] == result["confidence"]
        assert {k: v for k, v in doc.metadata.items() if k != "probembed"} == hit["metadata"]


def test_scores_and_relevance_scores_follow_the_hits(store, pydoc_pipeline):
    scored = store.similarity_search_with_score(QUESTION, k=5)
    scores = [s for _, s in scored]
    assert scores == sorted(scores, reverse=True)
    assert pydoc_pipeline.score.name == "uec"  # a score in [-1, 1]: the documented (1 + s) / 2 map
    relevant = store.similarity_search_with_relevance_scores(QUESTION, k=5)
    assert [d.id for d, _ in relevant] == [d.id for d, _ in scored]
    # the same float64 arithmetic on the same stored score: equal to rounding of one division
    assert [r for _, r in relevant] == pytest.approx([(1 + s) / 2 for s in scores], abs=1e-12)
    assert all(0.0 <= r <= 1.0 for _, r in relevant)


def test_a_relevance_threshold_retriever_keeps_only_hits_above_it(store):
    relevant = store.similarity_search_with_relevance_scores(QUESTION, k=6)
    cut = relevant[2][1]
    retriever = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"k": 6, "score_threshold": cut}
    )
    kept = retriever.invoke(QUESTION)
    assert [d.id for d in kept] == [d.id for d, r in relevant if r >= cut]
    assert 3 <= len(kept) < 6


def test_the_async_relevance_search_and_threshold_retriever_give_what_the_sync_ones_give(store):
    import asyncio

    relevant = store.similarity_search_with_relevance_scores(QUESTION, k=6)
    cut = relevant[2][1]
    retriever = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"k": 6, "score_threshold": cut}
    )

    async def both():
        return (
            await store.asimilarity_search_with_relevance_scores(QUESTION, k=6),
            await retriever.ainvoke(QUESTION),
        )

    pairs, kept = asyncio.run(both())
    assert [(d.id, r) for d, r in pairs] == [(d.id, r) for d, r in relevant]
    assert [d.id for d in kept] == [d.id for d, r in relevant if r >= cut]


def test_the_relevance_map_follows_the_score_the_collection_searches_with(store, pydoc_pipeline):
    """An alias of dot maps as dot does; an embedding whose pipeline has another score setting
    (same vectors) is mapped by the score the collection's kept copy searches with."""
    from dataclasses import replace

    by_dot = store.similarity_search_with_relevance_scores(QUESTION, k=3, score="dot")
    by_alias = store.similarity_search_with_relevance_scores(QUESTION, k=3, score="cosine")
    assert [r for _, r in by_alias] == [r for _, r in by_dot]
    other = replace(pydoc_pipeline.score, name="w2")
    assert other.name != pydoc_pipeline.score.name  # a score outside [-1, 1]
    w2 = Pipeline(pydoc_pipeline.members, pydoc_pipeline.fusion, other, pydoc_pipeline.name,
                  cache=False)  # fmt: skip
    assert w2.fingerprint == pydoc_pipeline.fingerprint
    second = ProbembedVectorStore(store.collection, ProbembedEmbeddings(w2))
    scored = second.similarity_search_with_score(QUESTION, k=3)
    relevant = second.similarity_search_with_relevance_scores(QUESTION, k=3)
    assert [r for _, r in relevant] == pytest.approx([(1 + s) / 2 for _, s in scored], abs=1e-12)


@pytest.mark.parametrize("score", ["w2", "kl", "bhattacharyya", "csd", "mls"])
def test_relevance_without_a_calibrator_ranks_every_score_within_0_and_1(store, records, score):
    """A logistic of the raw score made an exact duplicate 0.5 under w2, every kl and
    bhattacharyya hit 0, and every mls hit 1 (ties where the scores differ)."""
    hits = store.similarity_search_with_score(records[0].text, k=5, score=score)
    relevant = store.similarity_search_with_relevance_scores(records[0].text, k=5, score=score)
    scores, values = [s for _, s in hits], [r for _, r in relevant]
    assert all(0.0 <= v <= 1.0 for v in values)
    for (a, b), (ra, rb) in zip(
        itertools.pairwise(scores), itertools.pairwise(values), strict=True
    ):
        assert ra >= rb and (ra > rb) == (a > b)  # as the scores order them, ties only as theirs
    if score in ("w2", "kl", "bhattacharyya"):  # 0 for identical Gaussians: the text itself
        assert relevant[0][0].id == records[0].id and values[0] == pytest.approx(1.0, abs=1e-6)


def test_a_threshold_without_a_calibrator_warns_once_per_store_what_it_compares_with(
    store, calibrated, records
):
    """Without a calibrator the relevance is a map of the score: a score_threshold of 0.3
    kept all 4 hits without a word, where the store's own min_p_relevant is refused."""
    assert store.collection.load_pipeline().calibrator is None
    threshold = store.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"k": 4, "score_threshold": 0.3}
    )
    said = r"pipeline 'hash' of collection 'docs' has no relevance calibrator, so a hit's "
    with pytest.warns(UserWarning, match=said + r".* is \(1 \+ s\)/2 of its uec score s") as told:
        assert len(threshold.invoke(QUESTION)) == 4
    assert len([w for w in told if "relevance calibrator" in str(w.message)]) == 1
    assert {w.filename for w in told if "calibrator" in str(w.message)} == {__file__}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per store: its second search says nothing
        threshold.invoke(QUESTION)
        store.similarity_search_with_relevance_scores(QUESTION, k=2, hybrid=True)
    again = ProbembedVectorStore(store.collection)  # another store: told again, the RRF map
    with pytest.warns(UserWarning, match=said + r".* its hybrid RRF score over the most") as told:
        again.similarity_search_with_relevance_scores(QUESTION, k=2, hybrid=True)
    assert {w.filename for w in told if "calibrator" in str(w.message)} == {__file__}
    chosen = ProbembedVectorStore(store.collection, relevance_score_fn=lambda s: (1 + s) / 2)
    calibrated_store = ProbembedVectorStore.from_texts(
        [r.text for r in records], ProbembedEmbeddings(calibrated), db=store.collection.db.path
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a chosen map, or p_relevant: nothing to tell
        chosen.similarity_search_with_relevance_scores(QUESTION, k=2)
        calibrated_store.similarity_search_with_relevance_scores(QUESTION, k=2)


def test_hybrid_relevance_is_the_rrf_score_over_its_most(store):
    """RRF scores are about 1/60: a logistic made every hybrid hit about 0.5."""
    hits = store.similarity_search_with_score(QUESTION, k=5, hybrid=True)
    relevant = store.similarity_search_with_relevance_scores(QUESTION, k=5, hybrid=True)
    assert [r for _, r in relevant] == pytest.approx([s * 61 / 2 for _, s in hits], abs=1e-12)


def test_k_of_zero_finds_nothing_as_langchains_own_stores_do(store):
    assert store.similarity_search(QUESTION, k=0) == []
    assert store.similarity_search_with_relevance_scores(QUESTION, k=0) == []
    assert store.max_marginal_relevance_search(QUESTION, k=0, fetch_k=0) == []
    with pytest.raises(ValueError, match="k"):
        store.similarity_search(QUESTION, k=-1)


def test_filter_and_where_pass_through_to_the_collection(store):
    only_try = store.similarity_search(QUESTION, k=4, filter={"topic": "try"})
    assert len(only_try) == 4 and {d.metadata["topic"] for d in only_try} == {"try"}
    two = store.similarity_search(QUESTION, k=50, filter={"topic": ["with", "del"]})
    assert {d.metadata["topic"] for d in two} == {"with", "del"}
    sql = store.similarity_search(QUESTION, k=50, where="topic = 'lambda'")
    assert sql and {d.metadata["topic"] for d in sql} == {"lambda"}
    # a field no item has: every item misses it, as in LangChain's own stores (it raised
    # "cannot filter on 'colour'" once the store held anything, and matched nothing before)
    # (with a warning naming it and the fields there are: a misspelt field looked the same)
    named = r"filter field 'colour': no item of collection 'docs' has it.* columns: .*topic"
    with pytest.warns(UserWarning, match=named):
        assert store.similarity_search(QUESTION, filter={"colour": "red"}) == []
    with pytest.warns(UserWarning, match=named):
        everything = store.similarity_search(QUESTION, k=1000, filter={"colour": None})
    assert len(everything) == store.collection.count()
    with pytest.raises(ValueError, match="cannot filter on 'Colour'"):  # never a column
        store.similarity_search(QUESTION, filter={"Colour": "red"})
    store.add_texts(["A note."], [{"null": 1, "select": "x"}], ids=["note"])  # SQL words
    assert [d.id for d in store.similarity_search(QUESTION, filter={"null": 1})] == ["note"]
    assert [d.id for d in store.similarity_search(QUESTION, filter={"select": "x"})] == ["note"]
    # 1.0 == 1 as in Python (LanceDB refused to turn the float into the integer column's type)
    assert [d.id for d in store.similarity_search(QUESTION, filter={"null": 1.0})] == ["note"]
    with pytest.raises(
        ValueError, match="'1' .str. cannot be compared with null, which holds int64"
    ):
        store.similarity_search(QUESTION, filter={"null": "1"})
    with pytest.raises(ValueError, match="2361183241434822606848 on null does not fit a 64-bit"):
        store.similarity_search(QUESTION, filter={"null": 2**71})  # the engine's own words
    with pytest.raises(NotImplementedError, match="searches by a query's text"):
        store.similarity_search_by_vector([0.0] * 8)  # LangChain's default said nothing
    # None is a missing value, as IS NULL (it was refused as no str, bool, int or float)
    lacking = store.similarity_search(QUESTION, k=1000, filter={"select": None})
    assert "note" not in {d.id for d in lacking} and len(lacking) == store.collection.count() - 1


def test_metadata_from_pandas_keeps_dates_as_dates_and_missing_values_as_missing(store):
    """A DataFrame's values: datetime64 was stored as nanoseconds (an int64 column) or
    refused; NaT crashed the write before any check, and NaN was refused."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "when": pd.to_datetime(
                ["2024-01-01 10:00:00", None, "2024-03-05 08:30:15.5"], format="ISO8601"
            ),
            "price": [1.5, float("nan"), 3.0],
        }
    )
    ids = ["d0", "d1", "d2"]
    rows = [dict(zip(frame.columns, row, strict=True)) for row in frame.to_numpy()]
    assert isinstance(rows[0]["when"], pd.Timestamp | np.datetime64)
    store.add_texts(["first", "second", "third"], rows, ids=ids)
    rows += [{"when": frame["when"].to_numpy()[0]}]  # a bare numpy datetime64[ns]
    store.add_texts(["fourth"], rows[3:], ids=["d3"])
    got = {d.id: d.metadata for d in store.get_by_ids([*ids, "d3"])}
    assert [got[i].get("when") for i in [*ids, "d3"]] == [
        "2024-01-01T10:00:00",
        None,
        "2024-03-05T08:30:15.500000",
        "2024-01-01T10:00:00",
    ]
    assert [got[i].get("price") for i in ids] == [1.5, None, 3.0]
    when = pd.Timestamp("2024-01-01 10:00")
    found = store.similarity_search("first", k=10, filter={"when": when})
    assert {d.id for d in found} == {"d0", "d3"}
    with pytest.raises(StoreError, match="metadata field 'price' = inf is not JSON"):
        store.add_texts(["fifth"], [{"price": float("inf")}], ids=["d4"])


def test_mmr_drops_near_duplicates_that_plain_similarity_keeps(store):
    best = store.similarity_search(QUESTION, k=1)[0]
    copies = [f"copy{i}" for i in range(3)]  # the best passage three more times, as other ids
    store.add_texts([best.page_content] * 3, [{"topic": "copy"}] * 3, ids=copies)
    plain = [d.id for d in store.similarity_search(QUESTION, k=4)]
    assert set(plain) == {best.id, *copies}  # four identical texts fill the top 4
    diverse = store.max_marginal_relevance_search(QUESTION, k=4, fetch_k=12, lambda_mult=0.5)
    ids = [d.id for d in diverse]
    assert len(ids) == 4 and len(set(ids) & {best.id, *copies}) == 1  # one of the copies only
    assert set(ids) <= {d.id for d in store.similarity_search(QUESTION, k=12)}
    assert all("probembed" in d.metadata for d in diverse)
    retriever = store.as_retriever(search_type="mmr", search_kwargs={"k": 4, "fetch_k": 12})
    assert [d.id for d in retriever.invoke(QUESTION)] == ids
    relevance_only = store.max_marginal_relevance_search(QUESTION, k=4, lambda_mult=1.0)
    assert set(d.id for d in relevance_only) == set(plain)  # lambda 1: no diversity term
    only_try = store.max_marginal_relevance_search(QUESTION, k=3, filter={"topic": "try"})
    assert len(only_try) == 3 and {d.metadata["topic"] for d in only_try} == {"try"}
    with pytest.raises(ValueError, match="lambda_mult must be in"):
        store.max_marginal_relevance_search(QUESTION, lambda_mult=1.5)


def test_mmr_compares_the_vectors_the_search_ranked_with(tmp_path):
    """A collection that tilts its members by their agreement searches with tilted means:
    MMR read the stored (untilted) ones, so its relevance term was not the search's."""
    records = read_pydoc_topics()[:200]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in (r.text for r in records)]
    specs = [  # three members: two agree with each other alike, whatever their neighbours
        ModelSpec("hash", "laplace", {"calibrate": True}, encoder_params={"dim": dim})
        for dim in (64, 48, 16)
    ]
    fitted = Pipeline.fit(specs, pairs, FusionConfig("uec"), name="hash3", cache=False)
    adapting = Pipeline(
        fitted.members, fitted.fusion, fitted.score, "hash3", False, adapt=AdaptConfig(gamma=20.0)
    )
    collection = Database(tmp_path / "db", create=True).collection("docs")
    store = ProbembedVectorStore(collection, ProbembedEmbeddings(adapting))
    store.add_texts([r.text for r in records], ids=[r.id for r in records])
    tilted = list(collection.stats().adapted_weights.values())
    assert max(abs(w - 1 / 3) for w in tilted) > 0.2  # far from the even prior: dots move
    hits = collection.search(QUESTION, k=20, score="dot", exact=True)["hits"]
    query, means = collection.searcher().vectors(QUESTION, [h["id"] for h in hits] + ["gone"])
    assert list(means) == [h["id"] for h in hits]  # an id not stored is left out
    # float32 dots of unit vectors against float64: equal to a few float32 ulps (1e-5 is ~80)
    assert [float(query @ means[h["id"]]) for h in hits] == pytest.approx(
        [h["score"] for h in hits], abs=1e-5
    )
    relevance_only = store.max_marginal_relevance_search(
        QUESTION, k=6, fetch_k=20, lambda_mult=1.0, score="dot", exact=True
    )  # lambda 1: MMR picks by cosine alone, which for unit means is the dot the search ranks by
    assert {d.id for d in relevance_only} == {h["id"] for h in hits[:6]}


def test_add_without_ids_is_deterministic_and_delete_round_trips(store):
    texts = ["A note about generators and yield.", "A note about decorators."]
    metas = [{"topic": "notes", "n": 1}, {"topic": "notes", "n": 2}]
    before = store.collection.count()
    ids = store.add_texts(texts, metas)
    assert ids == [text_id(t, m) for t, m in zip(texts, metas, strict=True)]
    assert store.add_texts(texts, metas) == ids  # the same items again: replaced, not added
    padded = [f"  {t}\n" for t in texts]  # stored stripped, so the same records: same ids
    assert store.add_texts(padded, metas) == ids
    assert store.collection.count() == before + 2
    stored = {d.id: d for d in store.get_by_ids(ids)}
    assert stored[ids[1]].page_content == texts[1] and stored[ids[1]].metadata == metas[1]
    assert store.delete([ids[0]]) is True
    assert store.collection.count() == before + 1
    assert [d.id for d in store.get_by_ids(ids)] == [ids[1]]
    found = store.similarity_search("generators and yield", k=50, filter={"topic": "notes"})
    assert [d.id for d in found] == [ids[1]]


def test_a_delete_of_a_large_part_measures_the_agreement_again(store, sentences):
    """The adapter deleted through the collection alone: the agreement (and so the fusion
    weights searches tilt by) stayed that of the corpus before the delete."""
    ids = store.add_texts(sentences[:40])
    measured, count = store.collection.agreement_file, store.collection.count()
    assert json.loads(measured.read_text())["count"] == count
    store.delete(ids[:20])
    assert json.loads(measured.read_text())["count"] == count - 20


def test_the_same_text_twice_without_ids_is_one_row_with_one_id(store):
    before = store.collection.count()
    ids = store.add_texts(["Boilerplate footer.", "Boilerplate footer.", "Another text."])
    assert ids[0] == ids[1] != ids[2]
    assert store.collection.count() == before + 2


def test_a_blank_text_is_named_by_its_position_and_nothing_is_written(store):
    """The store's message named a derived hash id and told to pass on_error, which the
    adapters do not take."""
    before = store.collection.count()
    docs = [Document(page_content="A page of text."), Document(page_content=" \n ")]
    with pytest.raises(ValueError, match=r"documents\[1\] is blank: there is nothing to embed"):
        store.add_documents(docs)
    assert store.collection.count() == before


def test_an_id_given_twice_is_refused_naming_it_as_every_other_write_refuses_it(store):
    """It kept the last of the two without a word, where `ingest` (and the CLI, the service)
    refuse an id given twice in one write."""
    before = store.collection.count()
    texts, ids = ["one", "two", "three"], ["x", "y", "x"]
    with pytest.raises(ValueError, match=r"texts\[2\]: duplicate id 'x' \(first at texts\[0\]\)"):
        store.add_texts(texts, [{"n": 1}, {"n": 2}, {"n": 3}], ids=ids)
    assert store.collection.count() == before and store.get_by_ids(["x", "y"]) == []


def test_a_count_mismatch_names_only_what_was_passed(store):
    """Metadatas for one of two texts was told as "got 2 texts, 1 metadatas and 2 ids" with no
    ids passed, and ids for one of two as "2 texts, 2 metadatas and 1 ids" with no metadatas:
    counts of lists the adapter filled in, not the caller's."""
    before = store.collection.count()
    with pytest.raises(ValueError, match=r"^got 2 texts and 1 metadatas: give one of each"):
        store.add_texts(["a1", "a2"], metadatas=[{}])
    with pytest.raises(ValueError, match=r"^got 2 texts and 1 ids: give one of each"):
        store.add_texts(["a1", "a2"], ids=["x"])
    with pytest.raises(ValueError, match=r"^got 1 documents and 2 ids: give one of each"):
        store.add_documents([Document("one")], ids=["x", "y"])
    assert store.collection.count() == before


def test_a_refusal_of_add_documents_names_documents_not_texts(store):
    """add_documents went through add_texts, so its refusals named `texts[2]`, an argument the
    caller never passed."""
    before = store.collection.count()
    documents = [Document("one", id="x"), Document("two", id="y"), Document("three", id="x")]
    said = r"documents\[2\]: duplicate id 'x' \(first at documents\[0\]\)"
    with pytest.raises(ValueError, match=said):
        store.add_documents(documents)
    assert store.collection.count() == before


def test_a_given_id_that_another_texts_derived_id_repeats_is_told_apart(store):
    """An id given for one text and derived for another (a list of ids kept from an earlier
    add_texts, with None for the new texts) was refused as a duplicate id, as if both ids
    had been given."""
    derived = text_id("two", {})
    said = (
        rf"texts\[1\], whose id is derived from its text and metadata: duplicate id "
        rf"'{derived}' \(first at texts\[0\]\)"
    )
    with pytest.raises(ValueError, match=said):
        store.add_texts(["one", "two"], ids=[derived, None])
    first = r"\(first at texts\[0\], whose id is derived from its text and metadata\)"
    with pytest.raises(ValueError, match=rf"texts\[1\]: duplicate id '{derived}' {first}"):
        store.add_texts(["two", "one"], ids=[None, derived])


def test_langchains_indexing_api_writes_skips_and_cleans_up_through_the_store(store):
    """`langchain_core.indexing.index` calls add_documents(..., batch_size=...), which the
    store refused as an unknown option: LangChain's own sync-and-dedupe path could not write."""
    from langchain_core.indexing import InMemoryRecordManager, index

    manager = InMemoryRecordManager("probembed")
    manager.create_schema()
    docs = [
        Document(page_content=f"Indexed note {i} about context managers.", metadata={"src": s})
        for i, s in enumerate("aab")
    ]
    before = store.collection.count()
    first = index(
        docs,
        manager,
        store,
        cleanup="incremental",
        source_id_key="src",
        batch_size=2,
        key_encoder="sha256",
    )
    assert (first["num_added"], store.collection.count()) == (3, before + 3)
    again = index(
        docs, manager, store, cleanup="incremental", source_id_key="src", key_encoder="sha256"
    )
    assert (again["num_added"], again["num_skipped"]) == (0, 3)
    changed = [docs[0], Document(page_content="A new note from source a.", metadata={"src": "a"})]
    result = index(
        changed, manager, store, cleanup="incremental", source_id_key="src", key_encoder="sha256"
    )
    assert (result["num_added"], result["num_deleted"]) == (1, 1)
    found = store.similarity_search("note", k=50, filter={"src": "a"})
    assert {d.page_content for d in found} == {docs[0].page_content, changed[1].page_content}


def test_add_texts_embeds_and_commits_batch_size_texts_at_a_time(store):
    version = store.collection.version
    store.add_texts([f"Batched text number {i}." for i in range(5)], batch_size=2)
    assert store.collection.version == version + 3  # ceil(5 / 2) commits
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        store.add_texts(["never written"], batch_size=0)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['bogus'\]"):
        store.add_texts(["never written"], bogus=1)


def test_a_lone_string_of_ids_is_refused_not_read_as_one_id_per_character(store):
    """delete("ab") deleted the items "a" and "b" and kept "ab"."""
    store.add_texts(["one", "two", "both"], ids=["a", "b", "ab"])
    for call in (store.delete, store.get_by_ids, lambda ids: store.add_texts(["x"], ids=ids)):
        with pytest.raises(TypeError, match="takes a list of ids, got the string 'ab'"):
            call("ab")
    assert {d.id for d in store.get_by_ids(["a", "b", "ab"])} == {"a", "b", "ab"}


def test_get_by_ids_returns_a_document_once_for_both_spellings_of_its_id(store):
    """Asked for an id in both Unicode spellings (one pasted from a macOS folder listing),
    get_by_ids returned the one stored document twice; two items stored under the two
    spellings are still two documents."""
    composed = "café.txt"
    decomposed = unicodedata.normalize("NFD", composed)
    store.add_texts(["one café"], ids=[composed])
    assert [d.id for d in store.get_by_ids([composed, decomposed, composed])] == [composed]
    store.add_texts(["another café"], ids=[decomposed])
    got = {d.id: d.page_content for d in store.get_by_ids([decomposed, composed])}
    assert got == {composed: "one café", decomposed: "another café"}


def test_a_lone_surrogate_without_an_id_is_refused_by_name(store):
    """The id derived from the text failed first, with a bare UnicodeEncodeError."""
    with pytest.raises(Exception, match="not valid Unicode") as refused:
        store.add_texts(["broken \ud800 text"])
    assert not isinstance(refused.value, UnicodeError)


def test_documents_keep_their_ids_through_add_documents(store):
    doc = Document(
        page_content="The pass statement does nothing.", metadata={"topic": "pass"}, id="p1"
    )
    assert store.add_documents([doc]) == ["p1"]
    hit = store.similarity_search("pass statement does nothing", k=1, filter={"topic": "pass"})[0]
    assert hit.id == "p1" and hit.metadata["topic"] == "pass"


def test_numpy_and_date_metadata_from_dataframes_are_stored_and_filterable(store):
    """Documents made from a pandas frame carry numpy scalars (np.int64 years, np.float64
    ratings): they were refused, and a np.float64 was no column to filter on."""
    meta = {
        "year": np.int64(2015),
        "rating": np.float64(4.5),
        "public": np.bool_(True),
        "day": datetime.date(2024, 5, 1),
        "seen": datetime.datetime(2024, 5, 1, 12, 30),
        "tags": [np.int32(1), "x"],
    }
    (added,) = store.add_texts(["The with statement wraps a block."], [meta])
    found = store.similarity_search(
        "with statement", k=1, filter={"year": 2015, "rating": 4.5, "public": True}
    )
    assert [d.id for d in found] == [added]
    stored = {k: v for k, v in found[0].metadata.items() if k != "probembed"}
    assert stored == {
        "year": 2015, "rating": 4.5, "public": True, "day": "2024-05-01",
        "seen": "2024-05-01T12:30:00", "tags": [1, "x"],
    }  # fmt: skip
    assert type(stored["year"]) is int and type(stored["public"]) is bool
    assert [d.id for d in store.similarity_search("with", k=1, where="day >= '2024'")] == [added]
    # the filter's values as the stored ones were made: they were refused
    typed = {"year": np.int64(2015), "rating": np.float32(4.5), "day": datetime.date(2024, 5, 1)}
    assert [d.id for d in store.similarity_search("with", k=1, filter=typed)] == [added]


def test_datetimes_with_time_zones_are_stored_in_utc_so_they_sort_in_time_order(store):
    """ISO strings with other offsets did not compare in time order: 09:00+02:00 (07:00 UTC)
    sorted after 08:00+00:00."""
    zone = datetime.timezone(datetime.timedelta(hours=2))
    early = datetime.datetime(2024, 5, 1, 9, 0, tzinfo=zone)
    late = datetime.datetime(2024, 5, 1, 8, 0, tzinfo=datetime.UTC)
    ids = store.add_texts(["An early note.", "A late note."], [{"at": early}, {"at": late}])
    cut = datetime.datetime(2024, 5, 1, 7, 30, tzinfo=datetime.UTC)
    found = store.similarity_search("note", k=50, where=f"at > '{cut.isoformat()}'")
    assert [d.id for d in found] == [ids[1]]
    later = store.similarity_search("note", k=50, filter={"at": late})
    assert [d.metadata["at"] for d in later] == ["2024-05-01T08:00:00+00:00"]


def test_the_reserved_key_is_refused_and_nothing_is_written(store):
    before = store.collection.count()
    with pytest.raises(ValueError, match="reserves"):
        store.add_texts(["fine", "clashing"], [{"a": 1}, {"probembed": 1}])
    assert store.collection.count() == before


def test_from_texts_builds_a_searchable_store_in_a_database_directory(
    tmp_path, pydoc_pipeline, records
):
    texts = [r.text for r in records]
    store = ProbembedVectorStore.from_texts(
        texts,
        ProbembedEmbeddings(pydoc_pipeline),
        [r.metadata for r in records],
        db=tmp_path / "db",
    )
    assert store.collection.count() == len(records)
    assert store.similarity_search(QUESTION, k=1)[0].metadata["topic"] == "assert"
    reopened = ProbembedVectorStore(Database(tmp_path / "db").open("default"))
    assert reopened.embeddings.pipeline.fingerprint == pydoc_pipeline.fingerprint
    assert [d.id for d in reopened.similarity_search(QUESTION, k=3)] == [
        d.id for d in store.similarity_search(QUESTION, k=3)
    ]


def test_embeddings_are_the_fused_means(pydoc_pipeline, records):
    embeddings = ProbembedEmbeddings(pydoc_pipeline)
    texts = [r.text for r in records[:4]]
    means = pydoc_pipeline.encode(texts).gaussian.mean
    # one text alone or in a batch: BLAS may round a row's products by an ulp (the suite's bound)
    got = np.asarray(embeddings.embed_documents(texts), np.float32)
    np.testing.assert_array_max_ulp(got, means, maxulp=1)
    query = np.asarray(embeddings.embed_query(texts[2]), np.float32)
    np.testing.assert_array_max_ulp(query, means[2], maxulp=1)


def test_a_store_needs_probembed_embeddings(tmp_path):
    from langchain_core.embeddings import FakeEmbeddings

    collection = Database(tmp_path / "db", create=True).collection("docs")
    with pytest.raises(TypeError, match="ProbembedEmbeddings"):
        ProbembedVectorStore(collection, FakeEmbeddings(size=8))


def test_an_empty_store_answers_with_no_documents(tmp_path, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    store = ProbembedVectorStore(collection, ProbembedEmbeddings(pydoc_pipeline))
    assert store.as_retriever().invoke(QUESTION) == []
    assert store.similarity_search_with_relevance_scores(QUESTION) == []
    assert store.delete(["nothing"]) is False


@pytest.fixture(scope="module")
def calibrated(pydoc_pipeline, records) -> Pipeline:
    """The pipeline with a relevance calibrator fitted on real labels: a hit of the same topic.

    Queries are each passage's first 120 characters, ranked against every passage.
    """
    docs = pydoc_pipeline.encode([r.text for r in records])
    queries = pydoc_pipeline.encode([r.text[:120] for r in records])
    rows = np.arange(len(records))
    ranked = scan(queries.gaussian, docs.gaussian, rows, 10, parse_score("uec"), 1.0)
    x = np.concatenate([hit_features(r.dots, r.variances, 10) for r in ranked])
    topics = np.array([r.metadata["topic"] for r in records])
    y = np.concatenate([topics[r.positions] == topics[i] for i, r in enumerate(ranked)])
    groups = np.repeat(np.arange(len(ranked)), [len(r.positions) for r in ranked])
    calibrator = RelevanceCalibrator.fit(x, y, groups, seed=0)
    return Pipeline(
        pydoc_pipeline.members,
        pydoc_pipeline.fusion,
        pydoc_pipeline.score,
        "hash-cal",
        False,
        calibrator,
    )


def test_with_a_calibrator_the_relevance_score_is_p_relevant(tmp_path, calibrated, records):
    store = ProbembedVectorStore.from_texts(
        [r.text for r in records], ProbembedEmbeddings(calibrated), db=tmp_path / "db"
    )
    relevant = store.similarity_search_with_relevance_scores(QUESTION, k=5)
    p = [d.metadata["probembed"]["p_relevant"] for d, _ in relevant]
    assert all(v is not None for v in p) and [r for _, r in relevant] == p
    scores = [d.metadata["probembed"]["score"] for d, _ in relevant]
    assert [r for _, r in relevant] != [(1 + s) / 2 for s in scores]  # not the fallback map


def test_concurrent_async_writes_and_searches_each_land_once(tmp_path, pydoc_pipeline, records):
    """LangChain runs the async methods in executor threads: on a new collection two of four
    concurrent writes failed ("Table 'docs' already exists") and 150 of 200 rows were lost,
    and searches beside writes failed on a file another thread had closed."""
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("docs"),
        ProbembedEmbeddings(pydoc_pipeline),
    )
    texts = [r.text for r in records[:40]]

    async def together() -> list:
        writes = [
            store.aadd_texts(texts[j::4], ids=[f"w{j}-{i}" for i in range(len(texts[j::4]))])
            for j in range(4)
        ]
        searches = [store.asimilarity_search(QUESTION, k=3) for _ in range(4)]
        return await asyncio.gather(*writes, *searches, return_exceptions=True)

    outcomes = asyncio.run(together())
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert store.collection.count() == len(texts)


def test_a_lone_string_of_texts_or_documents_is_refused_not_stored_per_character(store):
    """add_texts("hello") stored five documents, one per character."""
    before = store.collection.count()
    with pytest.raises(TypeError, match=r"texts takes a list, got one str: pass \['hello'\]"):
        store.add_texts("hello")
    for lone in ("hello", Document(page_content="hello")):
        with pytest.raises(TypeError, match="documents takes a list, got one"):
            store.add_documents(lone)
    with pytest.raises(TypeError, match=r"documents\[0\] is str 'plain string'"):
        store.add_documents(["plain string"])
    assert store.collection.count() == before


def test_a_bad_item_is_told_to_be_left_out_not_to_pass_on_error(store):
    """The message said "pass on_error='skip'", an option add_texts refuses."""
    before = store.collection.count()
    with pytest.raises(StoreError, match="leave those items out of the call") as caught:
        store.add_texts(["fine", "infinite"], [{"x": 1.0}, {"x": float("inf")}])
    assert "on_error" not in str(caught.value) and len(caught.value.problems) == 1
    assert store.collection.count() == before


def test_documents_just_retrieved_can_be_added_again(store):
    """Re-adding search results was refused for the `probembed` key the adapter put there."""
    before = store.collection.count()
    docs = store.similarity_search(QUESTION, k=3)
    assert store.add_documents(docs) == [d.id for d in docs]
    assert store.collection.count() == before
    stored = store.get_by_ids([d.id for d in docs])
    assert all("probembed" not in d.metadata for d in stored)
    with pytest.raises(ValueError, match="reserves"):  # a user's own field of that name
        store.add_texts(["clashing"], [{"probembed": {"id": "x", "score": 1.0}}])


def test_wrong_argument_types_are_named_with_what_is_expected(tmp_path, pydoc_pipeline, store):
    """They failed as "'Database' object has no attribute 'exists'", "'str' object has no
    attribute 'items'", or a message about blank pages for a number."""
    database = Database(tmp_path / "other", create=True)
    embedding = ProbembedEmbeddings(pydoc_pipeline)
    with pytest.raises(TypeError, match=r"takes a probembed Collection, got a Database .*"
                                        r"database\.collection\('docs'\)"):  # fmt: skip
        ProbembedVectorStore(database, embedding)
    with pytest.raises(TypeError, match=r"got str 'my\.db': pass Database\(path"):
        ProbembedVectorStore("my.db", embedding)
    with pytest.raises(TypeError, match=r"metadatas takes a list, got one dict: pass \[\{"):
        store.add_texts(["a"], metadatas={"source": "x"})
    with pytest.raises(TypeError, match=r"metadatas\[0\] is str 'x'; metadatas takes dict or"):
        store.add_texts(["a"], metadatas=["x"])
    with pytest.raises(TypeError, match=r"texts\[0\] is int 123: texts are strings"):
        store.add_texts([123])
    with pytest.raises(StoreError, match=r"pass embedding=ProbembedEmbeddings\('retrieval'\)"):
        ProbembedVectorStore(database.collection("new"))


def test_operator_dicts_point_to_where_and_an_empty_list_matches_nothing(store):
    """{"$eq": ...} was refused as a bad value; an empty list raised "needs a non-empty list"
    where a UI with no source selected expects no hits."""
    for value in ({"$eq": "assert"}, {"$gte": 2023}):
        with pytest.raises(ValueError, match=r"operator dicts .* not supported.*where="):
            store.similarity_search(QUESTION, filter={"topic": value})
    assert store.similarity_search(QUESTION, filter={"topic": []}) == []
    with pytest.warns(UserWarning, match="filter field 'nope'"):  # a field none has
        assert store.similarity_search(QUESTION, filter={"nope": []}) == []
    kept = store.similarity_search(QUESTION, k=3, filter={"topic": ["assert"]})
    assert kept and {d.metadata["topic"] for d in kept} == {"assert"}


def test_a_relevance_score_fn_maps_each_hits_own_score(tmp_path, calibrated, records):
    """The relevance was always p_relevant, which reads the hit's rank and gaps: a chosen
    per-pair map of the raw score is what LangChain's own stores let a user give."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    texts, metas = [r.text for r in records], [r.metadata for r in records]
    calibrated_store = ProbembedVectorStore(collection, ProbembedEmbeddings(calibrated))
    calibrated_store.add_texts(texts, metas)
    scored = calibrated_store.similarity_search_with_score(QUESTION, k=5)
    default = calibrated_store.similarity_search_with_relevance_scores(QUESTION, k=5)
    assert [r for _, r in default] == [d.metadata["probembed"]["p_relevant"] for d, _ in default]
    chosen = ProbembedVectorStore(collection, relevance_score_fn=lambda s: (1 + s) / 2)
    mapped = chosen.similarity_search_with_relevance_scores(QUESTION, k=5)
    assert [d.id for d, _ in mapped] == [d.id for d, _ in scored]
    assert [r for _, r in mapped] == [(1 + s) / 2 for _, s in scored]
    assert chosen._select_relevance_score_fn()(0.5) == 0.75
    kept = chosen.as_retriever(
        search_type="similarity_score_threshold",
        search_kwargs={"k": 5, "score_threshold": mapped[2][1]},
    ).invoke(QUESTION)
    assert [d.id for d in kept] == [d.id for d, _ in mapped[:3]]
    with pytest.raises(TypeError, match="relevance_score_fn must be a function"):
        ProbembedVectorStore(collection, relevance_score_fn=0.5)


def test_a_collection_dropped_under_a_store_is_an_error_not_an_empty_answer(
    tmp_path, pydoc_pipeline, store, records
):
    """Dropped by another process, the collection answered every search with [] (an app
    said "nothing found"), where `Collection.search` says it is gone; a collection not made
    yet is still an empty store, and an add makes the dropped one again."""
    assert store.similarity_search(QUESTION, k=2)
    Database(tmp_path / "db").drop("docs")  # another process's handle
    for read in (
        lambda: store.similarity_search(QUESTION, k=2),
        lambda: store.get_by_ids([records[0].id]),
        lambda: store.delete([records[0].id]),
    ):
        with pytest.raises(CollectionNotFoundError, match="'docs' .* was dropped after this"):
            read()
    fresh = Database(tmp_path / "db").collection("never")
    assert (
        ProbembedVectorStore(fresh, ProbembedEmbeddings(pydoc_pipeline)).similarity_search(QUESTION)
        == []
    )
    store.add_texts([records[0].text], ids=["again"])
    assert [d.id for d in store.similarity_search(QUESTION, k=5)] == ["again"]


def test_a_query_cut_short_through_a_retriever_warns_at_the_users_line(tmp_path, search_pipeline):
    """The QueryCutWarning of a retriever's search named langchain_core's vectorstores/base.py,
    which called the store, not the line that invoked the retriever."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    store = ProbembedVectorStore(collection, ProbembedEmbeddings(search_pipeline))
    store.add_texts(["Volcanoes erupt molten rock called lava.", "Football is played by two."])
    with pytest.warns(QueryCutWarning) as told:
        found = store.as_retriever(search_kwargs={"k": 1}).invoke(LONG_QUESTION)
    assert len(found) == 1  # searched, not refused
    assert [w.filename for w in told if w.category is QueryCutWarning] == [__file__]
