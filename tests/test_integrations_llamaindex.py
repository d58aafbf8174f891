"""LlamaIndex on probembed: `VectorStoreIndex.from_vector_store(...).as_retriever()` answers.

The store is a real probembed collection (LanceDB on disk) and every class used is LlamaIndex's
own (`llama_index.core`); nothing is downloaded (its bundled NLTK and tiktoken data suffice).
"""

import asyncio
import subprocess
import sys
import warnings

import numpy as np
import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn
from tuning_support import tuned_copy

from probembed.integrations.llamaindex import ProbembedEmbedding, ProbembedVectorStore
from probembed.store import Database
from probembed.store.errors import CollectionNotFoundError
from probembed.store.pydoc_corpus import read_pydoc_topics
from probembed.store.search import QueryCutWarning

TOPICS = ["try", "with", "assert", "lambda", "del", "while"]
QUESTION = "What does the assert statement do when debugging is on?"


@pytest.fixture(scope="module")
def nodes() -> list[TextNode]:
    """Passages of six topics of the Python docs as nodes, each from its topic's document."""
    return [
        TextNode(
            id_=r.id,
            text=r.text,
            metadata=r.metadata,
            relationships={
                NodeRelationship.SOURCE: Document(id_=r.metadata["topic"]).as_related_node_info()
            },
        )
        for r in read_pydoc_topics(TOPICS)
    ]


@pytest.fixture
def store(tmp_path, pydoc_pipeline, nodes) -> ProbembedVectorStore:
    """A store over a fresh collection holding the nodes."""
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("docs"), pydoc_pipeline
    )
    assert store.add(nodes) == [n.node_id for n in nodes]
    return store


def retriever(store, pydoc_pipeline, **kwargs):
    """A retriever built with LlamaIndex's public API only."""
    index = VectorStoreIndex.from_vector_store(
        store, embed_model=ProbembedEmbedding(pydoc_pipeline)
    )
    return index.as_retriever(**kwargs)


def test_a_retriever_answers_a_question_through_llamaindex_alone(store, pydoc_pipeline):
    found = retriever(store, pydoc_pipeline, similarity_top_k=3).retrieve(QUESTION)
    assert len(found) == 3 and all(isinstance(n, NodeWithScore) for n in found)
    assert found[0].node.metadata["topic"] == "assert"
    assert found[0].node.node_id.startswith("assert#")
    assert found[0].node.ref_doc_id == "assert"  # relationships survive the round trip
    assert "assert" in found[0].node.get_content()


def test_nodes_carry_the_hit_and_query_numbers_probembed_gives(store, pydoc_pipeline, nodes):
    found = retriever(store, pydoc_pipeline, similarity_top_k=4).retrieve(QUESTION)
    result = store.client.search(QUESTION, k=4)
    assert [n.node.node_id for n in found] == [h["id"] for h in result["hits"]]
    given = {n.node_id: n for n in nodes}
    for scored, hit in zip(found, result["hits"], strict=True):
        numbers = scored.node.metadata["probembed"]
        assert scored.score == hit["score"] == numbers["score"]
        assert numbers["std"] == hit["std"] and numbers["weights"] == hit["weights"]
        assert numbers["confidence"] == result["confidence"] and numbers["id"] == hit["id"]
        original = given[hit["id"]]
        assert {
            k: v for k, v in scored.node.metadata.items() if k != "probembed"
        } == original.metadata
        assert scored.node.get_content() == original.get_content()
        assert "probembed" in scored.node.excluded_llm_metadata_keys  # not shown to an LLM
    # what was encoded is what LlamaIndex embeds: the text with its metadata
    first = found[0].node.node_id
    stored = store.client.rows([first], ["text"])[first]["text"]
    assert stored == given[first].get_content(metadata_mode=MetadataMode.EMBED) != given[first].text


def test_metadata_filters_restrict_the_search(store, pydoc_pipeline):
    only_try = MetadataFilters(filters=[MetadataFilter(key="topic", value="try")])
    found = retriever(store, pydoc_pipeline, similarity_top_k=4, filters=only_try).retrieve(
        QUESTION
    )
    assert len(found) == 4 and {n.node.metadata["topic"] for n in found} == {"try"}
    either = MetadataFilters(
        filters=[
            MetadataFilter(key="topic", value="with"),
            MetadataFilter(key="topic", value=["del", "lambda"], operator=FilterOperator.IN),
        ],
        condition=FilterCondition.OR,
    )
    found = retriever(store, pydoc_pipeline, similarity_top_k=50, filters=either).retrieve(QUESTION)
    assert {n.node.metadata["topic"] for n in found} == {"with", "del", "lambda"}
    partial = MetadataFilters(
        filters=[MetadataFilter(key="topic", value="ssert", operator=FilterOperator.TEXT_MATCH)]
    )
    found = retriever(store, pydoc_pipeline, similarity_top_k=50, filters=partial).retrieve(
        QUESTION
    )
    assert found and {n.node.metadata["topic"] for n in found} == {"assert"}


#: Metadata with strings, numbers, missing and empty fields, to tell every operator apart;
#: named like SQL words (`select`, `null`), which the SQL must quote to read as fields.
TAGGED = [
    {"select": "Red apple", "kind": "fruit", "null": 1, "ripe": True},
    {"select": "red pepper", "kind": "vegetable", "null": 2, "ripe": False},
    {"select": "green apple", "null": 3, "ripe": False},
    {"select": "", "kind": "fruit"},
    {"kind": "grain", "null": 5},
    {"select": "Apple pie", "kind": "dessert", "null": 6},
]
F = FilterOperator
FILTERS = [
    [MetadataFilter(key="select", value="apple", operator=F.TEXT_MATCH)],
    [MetadataFilter(key="select", value="APPLE", operator=F.TEXT_MATCH_INSENSITIVE)],
    [MetadataFilter(key="select", value="red", operator=F.CONTAINS)],
    [MetadataFilter(key="select", value=["pepper", "pie"], operator=F.ANY)],
    [MetadataFilter(key="select", value=["apple", "green"], operator=F.ALL)],
    [MetadataFilter(key="select", value=None, operator=F.IS_EMPTY)],
    [MetadataFilter(key="null", value=None, operator=F.IS_EMPTY)],
    [MetadataFilter(key="kind", value="fruit", operator=F.NE)],
    [MetadataFilter(key="kind", value=["fruit", "grain"], operator=F.NIN)],
    [MetadataFilter(key="null", value=3, operator=F.GTE)],
    # across number types, as Python compares them (LanceDB refused a fraction for an integer)
    [MetadataFilter(key="null", value=2.5, operator=F.GT)],
    [MetadataFilter(key="null", value=[1.0, 5], operator=F.IN)],
    [MetadataFilter(key="ripe", value=1)],
    [MetadataFilter(key="ripe", value=0.0, operator=F.NE)],
    # a field no node has: every node misses it (they raised "cannot filter on 'nope'")
    *(
        [MetadataFilter(key="nope", value=value, operator=operator)]
        for operator, value in [
            (F.EQ, 1),
            (F.NE, 1),
            (F.NIN, [1, 2]),
            (F.IS_EMPTY, None),
            (F.GT, 0),
            (F.TEXT_MATCH, "a"),
            (F.ANY, ["a"]),
        ]
    ),
]


@pytest.mark.parametrize(
    "condition", [FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT]
)
def test_every_filter_operator_selects_what_llamaindex_itself_selects(
    tmp_path, pydoc_pipeline, condition
):
    nodes = [TextNode(id_=f"n{i}", text=f"item {i}", metadata=m) for i, m in enumerate(TAGGED)]
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("tags"), pydoc_pipeline
    )
    store.add(nodes)
    metadata = {n.node_id: n.metadata for n in nodes}
    for given in [*FILTERS, FILTERS[0] + FILTERS[7], FILTERS[3] + FILTERS[9], FILTERS[-6]]:
        filters = MetadataFilters(filters=given, condition=condition)
        reference = build_metadata_filter_fn(metadata.__getitem__, filters)
        expected = {n.node_id for n in nodes if reference(n.node_id)}
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            assert {n.node_id for n in store.get_nodes(filters=filters)} == expected, filters
        # a field no node has is said (a misspelt one looked like a filter nothing matched)
        unknown = {f.key for f in given} - {key for m in TAGGED for key in m}
        assert [str(w.message).split(":")[0] for w in said] == [
            f"filter field {key!r}" for key in unknown
        ]


def test_filters_that_cannot_apply_are_refused_naming_the_field(tmp_path, pydoc_pipeline):
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("tags"), pydoc_pipeline
    )
    store.add([TextNode(id_="a", text="item", metadata={"n": 1, "tags": ["x", "y"]})])
    refused = {
        "n": (F.TEXT_MATCH, "x", "'n' is stored as int64"),
        "tags": (F.ANY, ["x"], "cannot filter on 'tags'"),  # a list is not a column
    }
    for key, (operator, value, words) in refused.items():
        filters = MetadataFilters(filters=[MetadataFilter(key=key, value=value, operator=operator)])
        with pytest.raises(ValueError, match=words):
            store.get_nodes(filters=filters)
    bad_value = MetadataFilters(filters=[MetadataFilter(key="text", value=[], operator=F.ALL)])
    with pytest.raises(ValueError, match="needs a non-empty list of strings"):
        store.get_nodes(filters=bad_value)


def test_delete_by_source_document_removes_only_its_nodes(store, pydoc_pipeline, nodes):
    count = store.client.count()
    assert_nodes = sum(1 for n in nodes if n.ref_doc_id == "assert")
    store.delete("assert")
    assert store.client.count() == count - assert_nodes
    found = retriever(store, pydoc_pipeline, similarity_top_k=50).retrieve(QUESTION)
    assert found and all(n.node.metadata["topic"] != "assert" for n in found)
    store.delete("no-such-document")
    assert store.client.count() == count - assert_nodes


def test_get_nodes_returns_the_stored_nodes_whole(store, nodes):
    wanted = [nodes[0].node_id, nodes[5].node_id]
    got = {n.node_id: n for n in store.get_nodes(node_ids=wanted)}
    assert set(got) == set(wanted)
    for node_id in wanted:
        original = next(n for n in nodes if n.node_id == node_id)
        assert got[node_id].get_content() == original.get_content()
        assert got[node_id].metadata == original.metadata
        assert got[node_id].ref_doc_id == original.ref_doc_id
    only_del = MetadataFilters(filters=[MetadataFilter(key="topic", value="del")])
    assert {n.node_id for n in store.get_nodes(filters=only_del)} == {
        n.node_id for n in nodes if n.metadata["topic"] == "del"
    }


def test_adding_again_replaces_and_delete_nodes_removes_by_id(store, nodes):
    count = store.client.count()
    store.add(nodes[:3])  # the same node ids: replaced, not duplicated
    assert store.client.count() == count
    store.delete_nodes(node_ids=[nodes[0].node_id, nodes[1].node_id])
    assert store.client.count() == count - 2
    store.delete_nodes(node_ids=[])  # an empty id list selects no node
    assert store.client.count() == count - 2
    assert store.get_nodes(node_ids=[]) == []
    assert store.client.existing([n.node_id for n in nodes[:3]]) == {nodes[2].node_id}


def test_a_node_whose_metadata_json_cannot_hold_is_refused_not_stored_as_null(store, nodes):
    """LlamaIndex's node_to_metadata_dict writes inf and nan as null: a node with an infinite
    value was stored with null in its place, where the LangChain store refuses the value."""
    from probembed.store import StoreError

    count = store.client.count()
    for value in (float("inf"), float("-inf"), float("nan")):
        bad = TextNode(text="Fish swim in rivers.", id_="fish", metadata={"depth": value})
        with pytest.raises(StoreError, match="metadata field 'depth' = .* is not JSON"):
            store.add([bad])
    assert store.client.count() == count and not store.client.existing(["fish"])


def test_documents_inserted_through_the_index_are_split_stored_and_found(tmp_path, pydoc_pipeline):
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("docs"), pydoc_pipeline
    )
    splitter = SentenceSplitter(chunk_size=200, chunk_overlap=0)
    index = VectorStoreIndex.from_vector_store(
        store, embed_model=ProbembedEmbedding(pydoc_pipeline), transformations=[splitter]
    )
    text = "\n\n".join(r.text for r in read_pydoc_topics(["try", "assert"]))
    document = Document(text=text, id_="reference", metadata={"kind": "docs"})
    index.insert(document)
    stored = store.client.count()
    assert stored > 5  # the document was split into many nodes, each stored
    found = index.as_retriever(similarity_top_k=2).retrieve(QUESTION)
    assert found[0].node.ref_doc_id == "reference" and "assert" in found[0].node.get_content()
    assert found[0].node.metadata["kind"] == "docs"
    index.delete_ref_doc("reference")
    assert store.client.count() == 0


def test_the_embedding_model_gives_the_fused_means(pydoc_pipeline, nodes):
    model = ProbembedEmbedding(pydoc_pipeline)
    texts = [n.get_content() for n in nodes[:5]]
    means = pydoc_pipeline.encode(texts).gaussian.mean
    # one text alone or in a batch: BLAS may round a row's products by an ulp (the suite's bound)
    got = np.asarray(model.get_text_embedding_batch(texts), np.float32)
    np.testing.assert_array_max_ulp(got, means, maxulp=1)
    query = np.asarray(model.get_query_embedding(texts[1]), np.float32)
    np.testing.assert_array_max_ulp(query, means[1], maxulp=1)


def test_the_async_batch_embedding_encodes_in_batches_as_the_sync_one(
    pydoc_pipeline, nodes, monkeypatch
):
    """LlamaIndex's default async batch made one pipeline call per text (13x slower with
    `default`, and blocking the event loop)."""
    model = ProbembedEmbedding(pydoc_pipeline, embed_batch_size=4)
    texts = [n.get_content() for n in nodes[:10]]
    calls: list[int] = []
    encode = pydoc_pipeline.encode

    def counted(batch, *args, **kwargs):
        calls.append(len(batch))
        return encode(batch, *args, **kwargs)

    monkeypatch.setattr(pydoc_pipeline, "encode", counted)
    got = asyncio.run(model.aget_text_embedding_batch(texts))
    assert calls == [4, 4, 2]
    # batches of 4, 4, 2 against one of 10: a row's products may round by an ulp
    np.testing.assert_array_max_ulp(np.asarray(got, np.float32), encode(texts).gaussian.mean, 1)


def test_an_empty_store_retrieves_nothing(tmp_path, pydoc_pipeline):
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("docs"), pydoc_pipeline
    )
    assert retriever(store, pydoc_pipeline).retrieve(QUESTION) == []


def test_a_top_k_of_zero_retrieves_nothing_and_a_negative_one_is_refused(store, pydoc_pipeline):
    """As LlamaIndex's own stores answer similarity_top_k=0: with nothing, not an error."""
    assert retriever(store, pydoc_pipeline, similarity_top_k=0).retrieve(QUESTION) == []
    with pytest.raises(ValueError, match="k"):
        retriever(store, pydoc_pipeline, similarity_top_k=-1).retrieve(QUESTION)


@pytest.mark.parametrize(
    ("blocked", "module", "extra"),
    [
        ("llama_index", "probembed.integrations.llamaindex", "llamaindex"),
        ("langchain_core", "probembed.integrations.langchain", "langchain"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(blocked, module, extra):
    # a fresh interpreter where the framework cannot be imported (sys.modules[name] = None);
    # llama_index.core is a dotted name, whose missing parent find_spec raises on
    code = f"import sys\nsys.modules[{blocked!r}] = None\nimport {module}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("probembed.extras.MissingExtraError: ")
    assert f"pip install 'probembed[{extra}]'" in last


def test_llamaindex_splits_and_tokenizes_without_the_network():
    # LlamaIndex fetches NLTK stopwords/punkt and tiktoken's encoding on first use unless it
    # finds them; its wheel ships them. Refuse every connection and use all three.
    code = (
        "import socket\n"
        "tried = []\n"
        "def refuse(self, address):\n"
        "    tried.append(address)\n"
        "    raise OSError('network refused in this test')\n"
        "socket.socket.connect = refuse\n"
        "from llama_index.core import Document\n"
        "from llama_index.core.node_parser import SentenceSplitter\n"
        "from llama_index.core.utils import get_tokenizer, globals_helper\n"
        "text = ' '.join(['The assert statement checks a condition. It raises.'] * 80)\n"
        "nodes = SentenceSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents("
        "[Document(text=text)])\n"
        "print(len(nodes), len(get_tokenizer()('a b c')), 'the' in globals_helper.stopwords)\n"
        "print(tried)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    counts, tried = result.stdout.splitlines()
    n_nodes, n_tokens, stopword = counts.split()
    assert int(n_nodes) > 5 and int(n_tokens) == 3 and stopword == "True"
    assert tried == "[]"


def test_query_modes_given_as_strings_hybrid_top_k_and_empty_filter_groups(store, nodes):
    """A mode given as a plain string raised AttributeError ('str' has no 'value'); hybrid
    mode gave similarity_top_k nodes whatever hybrid_top_k said; an empty nested filter group
    became the SQL "(None)" (LlamaIndex's own stores read it as matching every node)."""

    def query(**options):
        return store.query(VectorStoreQuery(query_str=QUESTION, **options))

    dense = query(similarity_top_k=3, mode="default")
    assert dense.ids == query(similarity_top_k=3, mode=VectorStoreQueryMode.DEFAULT).ids
    with pytest.raises(NotImplementedError, match="no 'sparse' query mode"):
        query(similarity_top_k=3, mode="sparse")
    hybrid = query(similarity_top_k=2, hybrid_top_k=5, mode="hybrid")
    assert len(hybrid.ids) == 5
    assert query(similarity_top_k=2, mode="hybrid").ids == hybrid.ids[:2]
    empty = MetadataFilters(filters=[])
    only_del = MetadataFilters(filters=[MetadataFilter(key="topic", value="del")])
    expected = query(similarity_top_k=50, filters=only_del).ids
    for condition in (FilterCondition.AND, FilterCondition.OR):  # an empty group is left out
        grouped = MetadataFilters(
            filters=[empty, MetadataFilter(key="topic", value="del")], condition=condition
        )
        assert query(similarity_top_k=50, filters=grouped).ids == expected


def test_a_lone_string_of_ids_is_refused_not_read_as_one_id_per_character(store, nodes):
    """get_nodes(node_ids="ab") looked up "a" and "b"; delete_nodes deleted them."""
    count = store.client.count()
    with pytest.raises(TypeError, match="takes a list of ids, got the string 'ab'"):
        store.delete_nodes(node_ids="ab")
    with pytest.raises(TypeError, match="got the string"):
        store.get_nodes(node_ids=nodes[0].node_id)
    assert store.client.count() == count


def test_custom_embedding_strs_as_hyde_sets_them_are_what_is_searched(store, pydoc_pipeline):
    """The retriever passed the store only query_str: HyDE's hypothetical document (in
    custom_embedding_strs) changed nothing."""
    from llama_index.core.schema import QueryBundle

    ids = lambda found: [n.node.node_id for n in found]  # noqa: E731
    top = retriever(store, pydoc_pipeline, similarity_top_k=4)
    plain = ids(top.retrieve(QueryBundle(query_str="zzz qqq")))
    wanted = ids(top.retrieve(QUESTION))
    assert plain != wanted
    hyde = QueryBundle(query_str="zzz qqq", custom_embedding_strs=[QUESTION])
    assert ids(top.retrieve(hyde)) == wanted
    again = QueryBundle(query_str="zzz qqq", custom_embedding_strs=[QUESTION])
    assert ids(asyncio.run(top.aretrieve(again))) == wanted
    # several texts (HyDE's document and the question): each node as close as its closest text
    both = top.retrieve(QueryBundle(query_str="zzz", custom_embedding_strs=[QUESTION, "zzz"]))
    alone = [top.retrieve(text) for text in (QUESTION, "zzz")]
    best = {}
    for found in alone:
        for n in found:
            best[n.node.node_id] = max(best.get(n.node.node_id, -np.inf), n.score)
    expected = sorted(best.items(), key=lambda item: item[1], reverse=True)[:4]
    assert [(n.node.node_id, n.score) for n in both] == expected


def test_a_bare_query_embedding_is_refused_saying_why(store, pydoc_pipeline):
    """A given QueryBundle.embedding was silently replaced by a search for query_str."""
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import QueryBundle

    embedding = ProbembedEmbedding(pydoc_pipeline).get_text_embedding(QUESTION)
    bundle = QueryBundle(query_str="zzz qqq", embedding=embedding)
    with pytest.raises(ValueError, match="bare embedding: probembed searches by a query's text"):
        retriever(store, pydoc_pipeline).retrieve(bundle)
    other = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=8))
    with pytest.raises(ValueError, match="embed_model is ProbembedEmbedding"):
        other.as_retriever().retrieve(QUESTION)
    with pytest.raises(ValueError, match="no text to search by"):
        store.query(VectorStoreQuery(similarity_top_k=2))


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_question_is_refused_as_blank_not_as_a_bare_embedding(store, pydoc_pipeline, blank):
    """An empty question was told to use ProbembedEmbedding, which its index already did."""
    for run in (
        lambda: retriever(store, pydoc_pipeline).retrieve(blank),
        lambda: store.query(VectorStoreQuery(query_str=blank, similarity_top_k=2)),
    ):
        with pytest.raises(ValueError, match=r"is blank") as refused:
            run()
        assert "ProbembedEmbedding" not in str(refused.value)


def test_a_lone_string_or_node_is_refused_not_added_per_character(store, nodes):
    count = store.client.count()
    with pytest.raises(TypeError, match="nodes takes a list, got one str"):
        store.add("hello")
    with pytest.raises(TypeError, match="nodes takes a list, got one TextNode"):
        store.add(nodes[0])
    with pytest.raises(TypeError, match=r"nodes\[1\] is str"):
        store.add([nodes[0], "hello"])
    assert store.client.count() == count


def test_nodes_just_retrieved_can_be_inserted_again(store, pydoc_pipeline, nodes):
    """insert_nodes of retrieved nodes was refused for the key the store put there."""
    index = VectorStoreIndex.from_vector_store(
        store, embed_model=ProbembedEmbedding(pydoc_pipeline)
    )
    count = store.client.count()
    found = index.as_retriever(similarity_top_k=3).retrieve(QUESTION)
    index.insert_nodes([n.node for n in found])
    assert store.client.count() == count
    for node in store.get_nodes(node_ids=[n.node.node_id for n in found]):
        assert "probembed" not in node.metadata
        assert "probembed" not in node.excluded_llm_metadata_keys
    assert "probembed" in found[0].node.metadata  # the caller's nodes are left as they were


def test_the_async_methods_leave_the_event_loop_free(store, nodes):
    """LlamaIndex's defaults ran add, query, delete... on the loop (a 10 ms ticker stalled
    0.83 s during async_add of 40 nodes); each must yield while it works in a thread."""
    query = VectorStoreQuery(query_str=QUESTION, similarity_top_k=3)
    calls = [
        lambda: store.async_add(nodes[:5]),
        lambda: store.aquery(query),
        lambda: store.aget_nodes(node_ids=[nodes[0].node_id]),
        lambda: store.adelete_nodes(node_ids=[nodes[1].node_id]),
        lambda: store.adelete(nodes[2].ref_doc_id),
        lambda: store.aclear(),
    ]

    async def waits(call):
        """Whether the call was still running when the loop next ran another task."""
        task = asyncio.create_task(call())
        await asyncio.sleep(0)  # the task's first step runs: a sync body finishes in it
        running = not task.done()
        await task
        return running

    assert [asyncio.run(waits(call)) for call in calls] == [True] * len(calls)
    assert store.client.count() == 0


def test_wrong_collection_arguments_are_named(tmp_path, pydoc_pipeline):
    database = Database(tmp_path / "db", create=True)
    with pytest.raises(TypeError, match="takes a probembed Collection, got a Database"):
        ProbembedVectorStore(database, pydoc_pipeline)
    with pytest.raises(TypeError, match=r"got str 'my\.db'"):
        ProbembedVectorStore("my.db", pydoc_pipeline)
    with pytest.raises(ValueError, match=r"pass pipeline='retrieval'"):
        ProbembedVectorStore(database.collection("new"))


def test_in_an_empty_list_matches_nothing_and_not_in_it_everything(store, nodes):
    """`in []` raised "needs a non-empty list"; LlamaIndex's own stores select no node."""
    metadata = {n.node_id: n.metadata for n in nodes}
    for operator in (F.IN, F.NIN):
        filters = MetadataFilters(
            filters=[MetadataFilter(key="topic", value=[], operator=operator)]
        )
        reference = build_metadata_filter_fn(metadata.__getitem__, filters)
        expected = {n.node_id for n in nodes if reference(n.node_id)}
        assert {n.node_id for n in store.get_nodes(filters=filters)} == expected
        assert len(expected) == (0 if operator == F.IN else len(nodes))


def test_a_collection_written_by_ingest_is_refused_naming_it_and_what_reads_it(
    tmp_path, pydoc_pipeline_dir
):
    """Over rows `probembed ingest` wrote, which keep no LlamaIndex node, a query failed with
    LlamaIndex's bare "Node content not found in metadata dict."; get_nodes alike."""
    import json

    from typer.testing import CliRunner

    from probembed.interfaces.cli import app

    source = tmp_path / "topics.jsonl"
    rows = [{"id": r.id, "text": r.text, **r.metadata} for r in read_pydoc_topics(TOPICS)]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    args = ["ingest", str(source), "--db", str(tmp_path / "db"), "-c", "docs"]
    made = CliRunner().invoke(app, [*args, "--pipeline", str(pydoc_pipeline_dir)])
    assert made.exit_code == 0, made.output
    collection = Database(tmp_path / "db").collection("docs")
    store = ProbembedVectorStore(collection)  # the pipeline that wrote it
    says = (
        r"collection 'docs' holds rows ProbembedVectorStore did not write \(.* keeps no "
        r"LlamaIndex node\): the LlamaIndex store reads only nodes it wrote; search it with "
        r"Database\(path\)\.collection\('docs'\)\.search\(\.\.\.\) or LangChain's "
        r"ProbembedVectorStore\(collection\)"
    )
    embed = ProbembedEmbedding(collection.load_pipeline())
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
    with pytest.raises(ValueError, match=says):
        index.as_retriever(similarity_top_k=3).retrieve(QUESTION)
    with pytest.raises(ValueError, match=says):
        store.get_nodes(node_ids=[rows[0]["id"]])
    assert collection.search(QUESTION, k=3)["hits"]  # the reopened form reads them


def test_a_retriever_passes_min_p_relevant_and_the_search_options_to_the_store(
    tmp_path, pydoc_pipeline
):
    """`vector_store_kwargs={"min_p_relevant": ...}` was a TypeError ("unknown option"), so
    a LlamaIndex app could not drop unlikely hits as the LangChain store and the service do;
    an option the store does not take is still refused, naming those it takes."""
    passages = [r.text for r in read_pydoc_topics(TOPICS)]
    others = [r.text for r in read_pydoc_topics()[:90]]
    tuned = tuned_copy(pydoc_pipeline, others)  # the same vectors, with a calibrator
    store = ProbembedVectorStore(Database(tmp_path / "db", create=True).collection("c"), tuned)
    store.add([TextNode(id_=f"n{i}", text=t) for i, t in enumerate(passages)])
    index = VectorStoreIndex.from_vector_store(store, embed_model=ProbembedEmbedding(tuned))
    every = index.as_retriever(similarity_top_k=10).retrieve(QUESTION)
    chances = sorted(n.node.metadata["probembed"]["p_relevant"] for n in every)
    assert chances[0] < chances[-1], chances  # a threshold between them keeps some, not all
    cut = chances[len(chances) // 2]
    kept = index.as_retriever(similarity_top_k=10, vector_store_kwargs={"min_p_relevant": cut})
    found = kept.retrieve(QUESTION)
    assert [n.node.node_id for n in found] == [
        n.node.node_id for n in every if n.node.metadata["probembed"]["p_relevant"] >= cut
    ]
    by_dot = index.as_retriever(similarity_top_k=3, vector_store_kwargs={"score": "dot"})
    assert [n.score for n in by_dot.retrieve(QUESTION)] == [
        h["score"] for h in store.client.search(QUESTION, k=3, score="dot")["hits"]
    ]
    unknown = index.as_retriever(vector_store_kwargs={"min_p": 0.5})
    with pytest.raises(TypeError, match=r"\['min_p'\]; it takes min_p_relevant, score"):
        unknown.retrieve(QUESTION)


def test_a_collection_dropped_under_the_store_is_an_error_not_an_empty_answer(
    tmp_path, store, pydoc_pipeline
):
    """Dropped by another process, the collection answered every query with no nodes."""
    Database(tmp_path / "db").drop("docs")
    for read in (
        lambda: retriever(store, pydoc_pipeline).retrieve(QUESTION),
        lambda: store.get_nodes(["assert#0"]),
        lambda: store.delete("assert"),
    ):
        with pytest.raises(CollectionNotFoundError, match="'docs' .* was dropped after this"):
            read()


def test_a_node_id_given_twice_is_refused_naming_the_nodes_by_position(store):
    """The refusal named `texts[2]`, an argument of LangChain's, where the caller passed
    `nodes`; nothing is written."""
    before = store.client.count()
    nodes = [TextNode(id_="x", text="one"), TextNode(id_="y", text="two")]
    with pytest.raises(ValueError, match=r"nodes\[2\]: duplicate id 'x' \(first at nodes\[0\]\)"):
        store.add([*nodes, TextNode(id_="x", text="three")])
    with pytest.raises(ValueError, match=r"nodes\[1\] is blank"):
        store.add([nodes[0], TextNode(id_="z", text=" ")])
    assert store.client.count() == before and store.get_nodes(["x", "y", "z"]) == []


def test_a_query_cut_short_through_a_retriever_warns_at_the_users_line(tmp_path, search_pipeline):
    """The QueryCutWarning of a retriever's query named llama_index.core's retriever, which
    called the store, not the line that asked it."""
    store = ProbembedVectorStore(
        Database(tmp_path / "db", create=True).collection("c"), search_pipeline
    )
    store.add(
        [TextNode(id_="v", text="Volcanoes erupt lava."), TextNode(id_="f", text="Football.")]
    )
    long = " ".join(["the history of football clubs in european leagues"] * 60)
    with pytest.warns(QueryCutWarning) as told:
        found = retriever(store, search_pipeline, similarity_top_k=1).retrieve(long)
    assert len(found) == 1  # searched, not refused
    assert [w.filename for w in told if w.category is QueryCutWarning] == [__file__]
