"""The service's background disk upkeep: many small writes, then a pass compacts a collection
where that pays and frees its old versions, and leaves one of large fragments alone; writes
racing passes lose nothing (the app in this process, real LanceDB)."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from test_service import _in_process
from test_store_upkeep import disk_bytes
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.service.settings import UpkeepSettings
from probembed.store import Database, Record, ingest, upkeep
from probembed.store.upkeep import COMPACT_SMALL_FRAGMENTS


def write(http, item: str, text: str, upsert: bool = False, collection: str = "c") -> None:
    """One document, one request: a client's small write."""
    body = {"documents": [{"id": item, "text": text}], "upsert": upsert}
    answer = http.post(f"/v1/collections/{collection}/documents", json=body)
    assert answer.status_code == 200, answer.text


def killed_after(db_dir, name: str, commits: int) -> dict[str, str]:
    """An ingest of one item per commit stopped after `commits` commits, before its end
    compacts (a killed process beside the service): small fragments the service's own
    writes never leave, as many as make a compaction due. The items it stored."""

    def stop(stored: int) -> None:
        if stored == commits:
            raise RuntimeError("killed")

    texts = {f"one-{i}": f"one document, number {i}" for i in range(commits + 1)}
    records = [Record(item, text) for item, text in texts.items()]
    with pytest.raises(RuntimeError, match="killed"):
        ingest(records, Database(db_dir).open(name), None, batch_size=1, on_commit=stop)
    return {item: texts[item] for item in list(texts)[:commits]}


def spanning(http, db_dir, texts: dict[str, str]) -> None:
    """Write until the collection's versions span over 2 s: a 0 retention (less LanceDB's
    clock slack of 1 s) then has versions to prune whatever the machine's speed."""
    table = Database(db_dir).open("c")._require()
    first = table.list_versions()[0]["timestamp"]
    while table.list_versions()[-1]["timestamp"] - first < timedelta(seconds=2):
        item = f"extra-{len(texts)}"
        texts[item] = f"an extra document, number {len(texts)}"
        write(http, item, texts[item])


def found(http, texts: dict[str, str], sample: int) -> None:
    """The count is exact, and a seeded sample of items is found by its own text, whole."""
    stats = http.get("/v1/collections/c").json()
    assert stats["count"] == len(texts)
    for item in random.Random(3).sample(sorted(texts), sample):
        answer = http.post("/v1/collections/c/search", json={"query": texts[item], "k": 1})
        hit = answer.json()["results"][0]["hits"][0]
        assert (hit["id"], hit["text"]) == (item, texts[item])


def test_upkeep_frees_what_small_writes_left_and_loses_no_racing_write(
    tmp_path, pydoc_pipeline_dir
):
    """A collection where compaction is due (a killed ingest's small fragments after the
    service's small writes) is compacted and its old versions pruned."""
    upkeep = UpkeepSettings(every=1, keep=timedelta(0))
    with _in_process(tmp_path, pydoc_pipeline_dir, upkeep=upkeep) as http:
        service = http.app.state.service
        assert http.post("/v1/collections", json={"name": "c"}).status_code == 201
        texts = {f"doc-{i}": f"document {i} says something about topic {i % 9}" for i in range(80)}
        for i, (item, text) in enumerate(texts.items()):
            write(http, item, text)
            if i % 8 == 7:  # an upsert leaves a replaced row behind, as clients' edits do
                texts[f"doc-{i - 3}"] = f"document {i - 3}, edited"
                write(http, f"doc-{i - 3}", texts[f"doc-{i - 3}"], upsert=True)
        spanning(http, tmp_path / "db", texts)
        texts.update(killed_after(tmp_path / "db", "c", COMPACT_SMALL_FRAGMENTS))
        before = disk_bytes(tmp_path / "db")

        (done,) = http.portal.call(service.upkeep)

        assert done.collection == "c" and done.versions_removed > 20 and done.bytes_freed > 0
        assert done.fragments_after < done.fragments_before - COMPACT_SMALL_FRAGMENTS // 2
        assert disk_bytes(tmp_path / "db") < before
        found(http, texts, 12)
        assert http.portal.call(service.upkeep) == []  # nothing written since: not due
        metrics = http.get("/metrics").text
        assert 'probembed_compactions_total{collection="c",outcome="done"} 1.0' in metrics

        rng = random.Random(11)
        racing = {
            f"race-{i}": f"racing document {i} on topic {rng.randint(0, 99)}" for i in range(30)
        }

        def writes() -> None:
            for item, text in racing.items():
                write(http, item, text)

        writer = threading.Thread(target=writes)
        writer.start()
        passes = [http.portal.call(service.upkeep) for _ in range(6)]
        writer.join()
        texts.update(racing)
        found(http, texts, 12)
        assert all(d.collection == "c" for done in passes for d in done)


def data_files(db_dir, name: str) -> set[str]:
    """The names of a collection's data files: a compaction writes new ones, a prune deletes
    old ones, and neither is done where these stay."""
    return {f.name for f in (db_dir / f"{name}.lance" / "data").iterdir()}


def test_a_pass_leaves_a_collection_of_few_fragments_as_it_is(tmp_path, pydoc_pipeline_dir):
    """A compaction rewrites every fragment under LanceDB's million-row target, so the pass
    rewrote a collection of one large fragment whole at every `--compact-every` commits (a
    500k-row one held its searches that long): it compacts, and prunes, only where small
    fragments piled up (`Collection.compaction_due`)."""
    upkeep = UpkeepSettings(every=1, keep=timedelta(0))
    db_dir = tmp_path / "db"
    with _in_process(tmp_path, pydoc_pipeline_dir, upkeep=upkeep) as http:
        for name in ("large", "many"):
            assert http.post("/v1/collections", json={"name": name}).status_code == 201
        texts = {f"doc-{i}": f"document {i} says something about topic {i % 9}" for i in range(300)}
        documents = [{"id": item, "text": text} for item, text in texts.items()]
        answer = http.post("/v1/collections/large/documents", json={"documents": documents})
        assert answer.status_code == 200, answer.text
        for i in range(3):  # a few small writes after the large one
            texts[f"small-{i}"] = f"a small write, number {i}"
            write(http, f"small-{i}", texts[f"small-{i}"], collection="large")
        killed_after(db_dir, "many", COMPACT_SMALL_FRAGMENTS)
        large = Database(db_dir).open("large")._require()
        files, versions = data_files(db_dir, "large"), len(large.list_versions())

        done = http.portal.call(http.app.state.service.upkeep)

        assert data_files(db_dir, "large") == files  # neither rewritten nor pruned
        assert len(large.list_versions()) == versions
        assert [d.collection for d in done] == ["many"] and done[0].fragments_after == 1
        assert http.get("/v1/collections/large").json()["count"] == len(texts)
        for item in random.Random(5).sample(sorted(texts), 5):
            body = {"query": texts[item], "k": 1}
            hit = http.post("/v1/collections/large/search", json=body).json()["results"][0]
            assert (hit["hits"][0]["id"], hit["hits"][0]["text"]) == (item, texts[item])


def test_upkeep_settings_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"--compact-every \(every\) must be .* got -1"):
        UpkeepSettings(every=-1)
    with pytest.raises(ValueError, match=r"--compact-keep \(keep\) must be a duration >= 0"):
        UpkeepSettings(keep=timedelta(seconds=-1))


def test_serve_refuses_a_retention_that_is_not_a_duration(tmp_path):
    result = CliRunner().invoke(
        app, ["serve", "--db", str(tmp_path / "db"), "--compact-keep", "forever"]
    )
    assert result.exit_code == 2
    assert "--compact-keep 'forever' is not a duration" in " ".join(result.output.split())
    assert not (tmp_path / "db").exists()  # refused before anything was made


def versions_made_before(table, seconds: float) -> int:
    """How many of a table's versions were made over `seconds` before its newest one."""
    made = [v["timestamp"] for v in table.list_versions()]
    return sum(t < made[-1] - timedelta(seconds=seconds) for t in made)


def test_a_pass_prunes_the_versions_deletes_alone_left(tmp_path, pydoc_pipeline_dir, monkeypatch):
    """A delete leaves no small fragment, so compaction was never due in a collection only
    deleted from, and the pass, whose prune rode on it, never pruned its versions: it prunes
    them once `PRUNE_VERSIONS` are past the retention, here with nothing to compact (one
    fragment, under a tenth of it deleted: no data file is rewritten)."""
    monkeypatch.setattr(upkeep, "PRUNE_VERSIONS", 8)
    db_dir = tmp_path / "db"
    settings = UpkeepSettings(every=1, keep=timedelta(0))
    texts = {f"doc-{i}": f"document {i} says something about topic {i % 9}" for i in range(4000)}
    records = [Record(item, text) for item, text in texts.items()]
    ingest(records, Database(db_dir, create=True).collection("c"), pydoc_pipeline_dir, 4000)
    with _in_process(tmp_path, pydoc_pipeline_dir, upkeep=settings) as http:
        service, table = http.app.state.service, Database(db_dir).open("c")._require()
        assert http.portal.call(service.upkeep) == []  # one fragment, a few versions: not due
        deleted = iter(sorted(texts))
        # a 0 retention less LanceDB's clock slack (1 s) prunes what was made over 1 s before
        # the newest version
        while versions_made_before(table, 1.5) < 2 * upkeep.PRUNE_VERSIONS:
            item = next(deleted)
            answer = http.post("/v1/collections/c/delete", json={"ids": [item]})
            assert answer.json()["deleted"] == 1
            del texts[item]
        assert len(texts) > 3600  # under a tenth deleted: LanceDB leaves its fragment as it is
        files, versions = data_files(db_dir, "c"), len(table.list_versions())

        (done,) = http.portal.call(service.upkeep)

        assert done.versions_removed >= 2 * upkeep.PRUNE_VERSIONS
        assert len(table.list_versions()) == versions - done.versions_removed
        assert done.fragments_before == done.fragments_after == 1
        assert data_files(db_dir, "c") == files  # pruned without a rewrite
        found(http, texts, 12)
        assert http.portal.call(service.upkeep) == []  # nothing written since: not due
