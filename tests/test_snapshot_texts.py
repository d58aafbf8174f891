"""Hit texts come from the snapshot's text files: what LanceDB stores, version by version."""

import json

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.store import Database, Record, Searcher, ingest
from probembed.store.pydoc_corpus import read_pydoc_topics
from probembed.store.snapshot import TextFile

texts = st.one_of(st.none(), st.text(max_size=40))  # empty, None and any code point


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.lists(st.lists(texts, max_size=12), min_size=1, max_size=5),
    skip=st.integers(0, 3),
    data=st.data(),
)
def test_a_text_file_reads_back_every_appended_string(blocks, skip, data):
    expected: list[str | None] = []
    file = TextFile()
    try:
        for block in blocks:
            # a slice of a chunked array: its offsets start past zero, as a take's may
            column = pa.chunked_array([pa.array(["x"] * skip + block, pa.string())])[skip:]
            file.append(column)
            expected += block
        assert len(file) == len(expected)
        if expected:
            positions = data.draw(st.lists(st.integers(0, len(expected) - 1), max_size=20))
            assert file[np.array(positions, dtype=np.int64)] == [expected[p] for p in positions]
    finally:
        file.close()


def test_hits_show_the_text_and_metadata_of_the_version_searched(tmp_path, pydoc_pipeline):
    records = [
        Record(f"p{i}", r.text, {"topic": r.metadata.get("topic", ""), "n": i}, "")
        for i, r in enumerate(read_pydoc_topics()[:60])
    ]
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest(records, collection, pydoc_pipeline)
    searcher = Searcher(collection, pydoc_pipeline)

    def shown(query: str) -> dict[str, tuple]:
        (result,) = searcher.search([query], k=20)
        return {h["id"]: (h["text"], h["metadata"]) for h in result["hits"]}

    def stored(ids) -> dict[str, tuple]:
        rows = collection.rows(list(ids), ("text", "metadata"))
        return {i: (r["text"], json.loads(r["metadata"])) for i, r in rows.items()}

    before = shown(records[3].text)
    assert "p3" in before and before == stored(before)
    changed = Record("p3", records[3].text + " (revised)", {"topic": "revised", "n": -1}, "")
    ingest([changed], collection, pydoc_pipeline, upsert=True)
    collection.delete(["p5"])
    after = shown(records[3].text)
    assert after["p3"] == (changed.text, changed.metadata)
    assert "p5" not in after and after == stored(after)
