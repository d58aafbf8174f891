"""A collection holds chunks or whole records, never both, whichever front door writes.

`ingest_documents` into a collection of whole records was refused, but plain `ingest` and
LangChain's `add_texts` put whole records into a collection of chunks: they had no doc_id, so
`ingest --chunk --sync` kept them (799 items where the folder gave 798) and a grouped search
ranked the LangChain row first."""

import pytest

from probembed.store import Database, StoreError, ingest, ingest_documents
from probembed.store.rows import Batch, PipelineInfo

REFUSED = (
    r"collection 'docs' holds documents as chunks: 1 of these 1 items are whole records "
    r"\(no doc_id, chunk and doc_hash\).*write them with chunking \(probembed ingest --chunk, "
    r"ingest_documents in Python"
)


@pytest.fixture
def chunked(tmp_path, pydoc_pipeline):
    """A collection of two Markdown files' chunks."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Tea\n\nGreen tea is steeped briefly.\n", encoding="utf-8")
    (folder / "b.md").write_text("# Bread\n\nDough rises overnight.\n", encoding="utf-8")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest_documents(folder, collection, pydoc_pipeline)
    return folder, collection


def test_plain_ingest_of_a_whole_record_into_chunks_is_refused_and_writes_nothing(
    chunked, pydoc_pipeline
):
    folder, collection = chunked
    version, ids = collection.version, collection.ids()
    with pytest.raises(StoreError, match=REFUSED):
        ingest([{"id": "x1", "text": "Green tea is steeped briefly."}], collection)
    assert (collection.version, collection.ids()) == (version, ids)
    report = ingest_documents(folder, collection, pydoc_pipeline, sync=True)
    assert report.unchanged == 2 and collection.ids() == ids


def test_a_batch_of_whole_records_given_to_add_or_upsert_is_refused(chunked, pydoc_pipeline):
    """The rule holds under the write lock too, for a Batch written without ingest."""
    _, collection = chunked
    batch = Batch(
        ["x1"], ["tea"], [{}], pydoc_pipeline.encode(["tea"]), PipelineInfo.of(pydoc_pipeline)
    )
    version = collection.version
    with pytest.raises(StoreError, match=REFUSED):
        collection.add(batch)
    with pytest.raises(StoreError, match=REFUSED):
        collection.upsert(batch)
    assert collection.version == version


def test_whole_records_beside_chunks_in_one_write_are_refused(tmp_path, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    chunk = {"doc_id": "d", "chunk": 0, "doc_hash": "h+1"}
    items = [{"id": "d#0", "text": "a chunk", **chunk}, {"id": "x", "text": "a record"}]
    with pytest.raises(StoreError, match="'docs' is given chunks in this write: 1 of these 2"):
        ingest(items, collection, pydoc_pipeline)
    assert not collection.exists


def test_langchain_add_texts_into_chunks_is_refused(chunked, pydoc_pipeline):
    from probembed.integrations.langchain import ProbembedEmbeddings, ProbembedVectorStore

    _, collection = chunked
    store = ProbembedVectorStore(collection, ProbembedEmbeddings(pydoc_pipeline))
    ids = collection.ids()
    with pytest.raises(StoreError, match=REFUSED):
        store.add_texts(["Green tea is steeped briefly."])
    assert collection.ids() == ids


def test_llamaindex_nodes_are_whole_records_beside_chunks_but_fill_their_own_collection(
    tmp_path, chunked, pydoc_pipeline
):
    """A node keeps doc_id and ref_doc_id (`node_to_metadata_dict`), not chunk and doc_hash:
    its own collection (doc_id, not chunks) takes later nodes, one of chunks refuses them."""
    from llama_index.core.schema import Document, NodeRelationship, TextNode

    from probembed.integrations.llamaindex import ProbembedVectorStore

    def nodes(*ids):
        source = Document(id_="tea-guide").as_related_node_info()
        return [
            TextNode(id_=i, text=f"tea note {i}", relationships={NodeRelationship.SOURCE: source})
            for i in ids
        ]

    own = Database(tmp_path / "own", create=True).collection("nodes")
    store = ProbembedVectorStore(own, pydoc_pipeline)
    assert store.add(nodes("n1")) == ["n1"] and store.add(nodes("n2")) == ["n2"]
    assert own.chunked and not own.holds_chunks and own.count() == 2
    with pytest.raises(StoreError, match=REFUSED):
        ProbembedVectorStore(chunked[1], pydoc_pipeline).add(nodes("n3"))


def test_a_batch_of_chunks_given_to_add_or_upsert_of_whole_records_is_refused(
    tmp_path, pydoc_pipeline
):
    """Chunks beside whole records were refused only by the front doors that choose a kind
    (chunked ingest, the CLI, the service); a Batch of chunks went in by add or upsert, and
    a grouped search found the document twice. One check now holds for every write."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest([{"id": "d0", "text": "Green tea is steeped briefly."}], collection, pydoc_pipeline)
    chunk = {"doc_id": "d1", "chunk": 0, "doc_hash": "h+1"}
    fused = pydoc_pipeline.encode(["tea"])
    batch = Batch(["d1#0"], ["tea"], [chunk], fused, PipelineInfo.of(pydoc_pipeline))
    version = collection.version
    said = "'docs' holds whole documents: chunks beside them would be found twice"
    with pytest.raises(StoreError, match=said):
        collection.add(batch)
    with pytest.raises(StoreError, match=said):
        collection.upsert(batch)
    assert (collection.version, collection.ids()) == (version, {"d0"})


def test_a_collection_of_chunks_emptied_by_deletes_still_refuses_whole_records_at_the_door(
    chunked,
):
    """Its chunk columns stay: every commit refused whole records into it, while the front
    doors that choose a kind (`probembed ingest` without --chunk, the service) let them by
    as into an empty collection, to be refused later, after the pipeline had loaded."""
    from probembed.store.kinds import refuse_mixing

    _, collection = chunked
    collection.delete(sorted(collection.ids()))
    assert collection.count() == 0 and collection.holds_chunks
    with pytest.raises(StoreError, match="'docs' holds documents as chunks: whole documents"):
        refuse_mixing(collection, chunks=False)
    refuse_mixing(collection, chunks=True)


def test_a_plain_ingest_of_records_carrying_chunk_fields_is_told_which_fields(
    tmp_path, pydoc_pipeline
):
    """Such records are chunks by their metadata; the refusal said "ingest without
    chunking" to a user who was not chunking, and named neither the items nor the fields."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest([{"id": "d0", "text": "Green tea is steeped briefly."}], collection, pydoc_pipeline)
    marked = {"doc_id": "d1", "chunk": 0, "doc_hash": "h"}
    records = [
        {"id": "d1", "text": "Black tea steeps longer.", "metadata": marked},
        {"id": "d2", "text": "Oolong sits between them.", "metadata": {**marked, "chunk": 1}},
    ]
    said = "2 of these 2 items carry chunk, doc_hash, doc_id in their metadata"
    with pytest.raises(StoreError, match=said):
        ingest(records, collection, pydoc_pipeline)
    assert collection.ids() == {"d0"}
