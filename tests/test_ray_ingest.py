"""Ingest on Ray: the same collection as local ingest, resumable after a killed driver.

One local Ray instance (2 CPUs) serves the module; the killed job joins it as a separate
driver process, as a job submitted to a cluster would.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_builtin_pipelines import MEAN_BOUND, VAR_BOUND, WEIGHT_BOUND, scaled_var_change
from test_cli_errors import stored, terminated_after_a_commit
from typer.testing import CliRunner

from probembed.cache import CacheStats, EmbeddingCache
from probembed.gaussian import Gaussian
from probembed.pipeline import Encoded, Pipeline
from probembed.store import (
    Database,
    IngestError,
    PipelineMismatchError,
    Record,
    ingest,
)

ray = pytest.importorskip("ray")

import ray_support  # noqa: E402

from probembed.actors.encoding import (  # noqa: E402
    ACTOR_DIR_PREFIX,
    STALE_ACTOR_DIR_SECONDS,
    Embedder,
    pipeline_files,
)
from probembed.interfaces.cli import app  # noqa: E402
from probembed.store import ray_ingest  # noqa: E402
from probembed.store.embed_job import embed_to_parquet  # noqa: E402
from probembed.store.ray_ingest import OnRay, check_reachable, ingest_ray  # noqa: E402
from probembed.store.repeats import RepeatedTexts  # noqa: E402
from probembed.variance_basis import pipeline_basis  # noqa: E402

#: Texts of the equality test: "a couple of thousand", several batches per actor.
N = 2000


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray instance with 2 CPUs for this module, holding `ray_support.COUNTER`; its
    address for other drivers. No runtime_env: its workers are prestarted (`_actors_counted`)."""
    ray.cloudpickle.register_pickle_by_value(ray_support)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    counter = ray_support.EncodedTexts.options(name=ray_support.COUNTER).remote()
    yield ray.get_runtime_context().gcs_address
    del counter
    ray.shutdown()


@pytest.fixture(autouse=True)
def _actors_counted(monkeypatch):
    """Every Ray ingest or embed this process runs has actors whose hash encoders tell
    `ray_support.COUNTER` what they encode (`ray_support.counting`)."""
    monkeypatch.setattr(ray_ingest, "Embedder", ray_support.counting(ray_ingest.Embedder))


@pytest.fixture
def encoded_by_actors(ray_address):
    """What this test's Ray actors encoded: a function giving each (encoder dim, text)'s
    count since the test began."""
    counter = ray.get_actor(ray_support.COUNTER)
    ray.get(counter.take.remote())  # what earlier tests encoded
    return lambda: Counter(ray.get(counter.take.remote()))


def records(texts):
    """Records with ids t0, t1, ... and metadata of two types (one promoted to a column)."""
    return [Record(f"t{i}", t, {"n": i, "tag": f"g{i % 5}"}) for i, t in enumerate(texts)]


def table_rows(collection):
    """Every stored row as id -> (text, metadata JSON, mean, var, weights)."""
    data = collection.db.table(collection.name).to_arrow().to_pylist()
    return {
        r["id"]: (r["text"], r["metadata"], r["n"], r["tag"], r["mean"], r["var"], r["weights"])
        for r in data
    }


def assert_within_batch_bound(got, want):
    """Vectors equal up to the encoders' batch-to-batch bound (test_builtin_pipelines)."""
    assert np.abs(got.mean - want.mean).max() <= MEAN_BOUND
    assert scaled_var_change(got, want) <= VAR_BOUND


def test_an_actor_keeps_no_folder_once_its_pipeline_is_loaded(
    tmp_path, monkeypatch, pydoc_pipeline
):
    """Ray ends an actor without running its finalizers: a folder kept for the actor's life
    stayed in the temporary directory after jobs (2 to 6 per run of this suite)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's folders only
    # what actors killed while loading left (a killed job): an old one, and one that may be
    # another actor's loading now; and a folder of another name
    old, recent = tmp_path / f"{ACTOR_DIR_PREFIX}old", tmp_path / f"{ACTOR_DIR_PREFIX}recent"
    other = tmp_path / "probembed-pipeline-x"
    for folder in (old, recent, other):
        (folder / "models").mkdir(parents=True)
        (folder / "pipeline.json").write_text("{}")
    past = time.time() - STALE_ACTOR_DIR_SECONDS - 60
    os.utime(old, (past, past))
    os.utime(other, (past, past))
    embedder = Embedder(pipeline_files(pydoc_pipeline), pydoc_pipeline.fingerprint)
    assert sorted(tmp_path.iterdir()) == [recent, other]  # its own gone, the old one swept
    texts = ["a list comprehension", "the with statement", "raising an exception"]
    work = pa.table({"start": [0], "texts": [texts], "lacking": [[True, True] * len(texts)]})
    out = embedder(work).column("mean")[0].as_py()
    for sent, want in zip(out, pydoc_pipeline.encode_members(texts), strict=True):
        got = np.frombuffer(sent, np.float32).reshape(want.mean.shape)
        assert np.abs(got - want.mean).max() <= MEAN_BOUND


def test_ray_ingest_equals_local_ingest(tmp_path, hash_pipeline, sentences, ray_address):
    items = records(sentences[:N])
    local = Database(tmp_path / "local", create=True).collection("c")
    on_ray = Database(tmp_path / "ray", create=True).collection("c")
    ingest(items, local, hash_pipeline, batch_size=512)
    # other batches than local's, on two actors: a row's batch differs between the two
    report = ingest_ray(items, on_ray, hash_pipeline, batch_size=96, workers=2)
    assert (report.added, report.already_stored, report.problems) == (N, 0, [])
    assert on_ray.pipeline == local.pipeline
    assert on_ray.metadata_columns() == local.metadata_columns()
    got, want = table_rows(on_ray), table_rows(local)
    assert sorted(got) == sorted(want) == sorted(r.id for r in items)
    ids = sorted(want)
    assert [got[i][:4] for i in ids] == [want[i][:4] for i in ids]  # text and metadata exact
    stack = lambda rows, k: np.array([rows[i][k] for i in ids], dtype=np.float32)  # noqa: E731
    assert_within_batch_bound(
        Gaussian(stack(got, 4), stack(got, 5)), Gaussian(stack(want, 4), stack(want, 5))
    )
    assert np.abs(stack(got, 6) - stack(want, 6)).max() <= WEIGHT_BOUND
    again = ingest_ray(items, on_ray, hash_pipeline, batch_size=96, workers=2)
    assert (again.added, again.already_stored) == (0, N)
    assert on_ray.count() == N


@pytest.fixture(autouse=True)
def _basis_fitted(request):
    """Fit the hash pipeline's variance basis without a cache before a test counts what its
    cache holds: a first write fits it through the writing pipeline, whose cache then holds
    the 2 x 64 reference texts too (427 entries, not 300, for a test run alone). Only for a
    test that uses it: the hash pipeline needs the datasets, which the others do not."""
    if "hash_pipeline" in request.fixturenames:
        pipeline_basis(request.getfixturevalue("hash_pipeline"))


def counting(encode, counts):
    """A member's `encode` that first appends how many texts it was given to `counts`: what
    the driver encodes itself."""

    def encode_counted(texts):
        counts.append(len(texts))
        return encode(texts)

    return encode_counted


def cached(pipeline, directory):
    """The pipeline with an embedding cache in `directory`, whose statistics start at 0."""
    return Pipeline(
        pipeline.members, pipeline.fusion, pipeline.score, pipeline.name, EmbeddingCache(directory)
    )


def vectors(collection):
    """Every stored row's id, mean, var and weights, by id: to compare bit for bit."""
    rows = collection.db.table(collection.name).to_arrow().sort_by("id")
    return {name: rows.column(name).to_pylist() for name in ("id", "mean", "var", "weights")}


def test_ray_ingest_reads_and_fills_the_embedding_cache_local_ingest_uses(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """Ray ingest skipped the cache: a Ray run after a warm local one encoded every text again,
    and left nothing in the cache. Now the driver sends actors only what the cache lacks and
    stores what they return; the rows are those of a run without a cache, bit for bit."""
    items = records(sentences[:300])
    members = len(hash_pipeline.members)
    want = Database(tmp_path / "uncached", create=True).collection("c")
    ingest(items, want, hash_pipeline, batch_size=64)  # no cache at all
    store = tmp_path / "cache"

    def run(name, writer, pipeline):
        collection = Database(tmp_path / name, create=True).collection("c")
        if writer is ingest:
            writer(items, collection, pipeline, batch_size=64)
        else:
            writer(items, collection, pipeline, batch_size=64, workers=2)
        assert vectors(collection) == vectors(want)
        return pipeline.cache

    cold = run("ray-cold", ingest_ray, cached(hash_pipeline, store))
    held = EmbeddingCache(store).info()
    assert [m.entries for m in held.models] == [300] * members  # the actors' Gaussians, kept
    # each text missed once per member: the driver looked every batch up twice
    assert cold.stats == CacheStats(hits=0, misses=300 * members, stored=300 * members)
    later = run("local-after-ray", ingest, cached(hash_pipeline, store)).stats
    assert (later.hits, later.misses, later.stored) == (300 * members, 0, 0)
    again = run("ray-after-ray", ingest_ray, cached(hash_pipeline, store)).stats
    assert (again.hits, again.misses, again.stored) == (300 * members, 0, 0)


def test_ray_ingest_sends_actors_only_what_each_member_lacks(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """A local run left some texts in the cache, and a pipeline sharing a member left that
    member's Gaussians of others: actors encode the rest only, member by member, and the rows
    are bit for bit those of a local ingest from the same cache. The driver reads the cached
    ones again when a batch comes back, and counts them once."""
    texts = sentences[:300]
    items = records(texts)
    first, second = (m.fingerprint for m in hash_pipeline.members)
    store = tmp_path / "cache"
    ingest(items[::3], Database(tmp_path / "some", create=True).collection("c"),
           cached(hash_pipeline, store), batch_size=50)  # fmt: skip
    one_member = Pipeline(hash_pipeline.members[:1], cache=EmbeddingCache(store))
    one_member.encode_members(texts[1::3])  # the first member only: shared with another
    EmbeddingCache(store).close()
    copy = tmp_path / "same-cache"
    shutil.copytree(store, copy)
    here = Database(tmp_path / "here", create=True).collection("c")
    on_ray = Database(tmp_path / "ray", create=True).collection("c")
    ingest(items, here, cached(hash_pipeline, copy), batch_size=64)
    pipeline = cached(hash_pipeline, store)
    ingest_ray(items, on_ray, pipeline, batch_size=64, workers=2)
    assert vectors(on_ray) == vectors(here)
    per_model = {m.model: m.entries for m in EmbeddingCache(store).info().models}
    assert per_model == {first: 300, second: 300}
    assert pipeline.cache.stats.stored == 100 + 200  # the first member's third, the second's two
    assert (pipeline.cache.stats.hits, pipeline.cache.stats.misses) == (200 + 100, 100 + 200)


@pytest.mark.parametrize("cache", ["none", "kept", "lost"])
def test_a_text_repeated_in_later_batches_is_encoded_once_on_ray(
    tmp_path, monkeypatch, hash_pipeline, sentences, encoded_by_actors, cache
):
    """A text in two batches the cache lacked was encoded by each batch's actor (the cache
    helped only once one of them had stored it). Now the first batch sends it and the later
    ones take its Gaussians when it answers: each text is encoded once per member, every
    record stored, with or without a cache, and the rows are those of a local ingest. A
    cache that loses what the run stored ("lost": cleared before each batch's second look)
    moved the borrowed texts to the driver, which encoded them; the driver keeps them now."""
    distinct = sentences[:288]
    # batches of 64: 0-3 new; 4 all repeats (it sends nothing); 5 half repeats, one of them
    # twice in the batch, half new
    texts = distinct[:256] + distinct[:64][::-1] + distinct[100:131] + [distinct[100]]
    texts += distinct[256:288]
    items = records(texts)
    want = Database(tmp_path / "here", create=True).collection("c")
    ingest(items, want, hash_pipeline, batch_size=64)
    with_cache = cache != "none"
    pipeline = cached(hash_pipeline, tmp_path / "cache") if with_cache else hash_pipeline
    looked_up, found_again = pipeline.lookup, []

    def lookup(chunk, counted=True):
        if cache == "lost" and not counted:
            pipeline.cache.clear()
        found = looked_up(chunk, counted=counted)
        if not counted:  # a batch come back
            found_again.append(sum(int(f.sum()) for f, _ in found))
        return found

    on_driver = []
    monkeypatch.setattr(pipeline, "lookup", lookup)
    for member in hash_pipeline.members:
        monkeypatch.setattr(member, "encode", counting(member.encode, on_driver))
    on_ray = Database(tmp_path / "ray", create=True).collection("c")
    report = ingest_ray(items, on_ray, pipeline, batch_size=64, workers=2)
    assert report.added == len(texts) == 384
    assert vectors(on_ray) == vectors(want)
    dims = [m.encoder.dim for m in hash_pipeline.members]
    assert encoded_by_actors() == Counter({(d, t): 1 for d in dims for t in distinct})
    assert sum(on_driver) == 0
    if cache == "kept":  # each text stored once per member, as its sender's actor made it; the
        # borrowers read their 64 + 32 repeats from the cache, the driver kept none of them
        assert pipeline.cache.stats.stored == len(distinct) * len(dims)
        assert sum(found_again) == (64 + 32) * len(dims)


def gaussians(*means):
    """Gaussians of the given 2-d means, unit variance."""
    return Gaussian(np.array(means, np.float32), np.ones((len(means), 2), np.float32))


def test_a_borrowing_batch_takes_the_rows_its_sender_answered_whatever_the_cache_holds():
    """Fused in plan order, each batch takes the rows it borrows from its sender's answer,
    kept on the driver until the last borrower, also where the cache has let them go (here it
    holds nothing but d); what the cache holds stays as it gave it. A cache that turned off
    or evicted mid-run sent the borrowed texts to the driver to be encoded again."""
    batches = {0: ["a", "b"], 2: ["b", "c"], 4: ["b", "b"], 6: ["d", "b"], 8: ["c"]}
    lacking = {start: np.ones((len(texts), 1), bool) for start, texts in batches.items()}
    lacking[6][0] = False  # d: cached
    repeats, sent = RepeatedTexts.planned(1, batches, lacking)
    assert {s: m[:, 0].tolist() for s, m in sent.items()} == {
        0: [True, True], 2: [False, True], 4: [False, False], 6: [False, False], 8: [False]
    }  # fmt: skip
    answers = {
        0: [Encoded(["a", "b"], gaussians([1, 1], [2, 2]))],
        2: [Encoded(["c"], gaussians([5, 5]))],
    }
    nothing, cached_d = (np.zeros(2, bool), None), (np.array([True, False]), gaussians([7, 7]))
    lookups = {0: nothing, 2: nothing, 4: nothing, 6: cached_d, 8: (np.zeros(1, bool), None)}
    fused = {}
    for start in sent:
        lent = repeats.lend(start, batches[start], [lookups[start]], answers.get(start, [None]))
        found, got = lent[0]
        fused[start] = (found.tolist(), None if got is None else got.mean.tolist())
    assert fused == {
        0: ([False, False], None),
        2: ([True, False], [[2, 2]]),
        4: ([True, True], [[2, 2], [2, 2]]),
        6: ([True, True], [[7, 7], [2, 2]]),
        8: ([True], [[5, 5]]),
    }
    assert repeats._kept == [{}]  # every row let go with its last borrower


def test_the_driver_keeps_no_cached_gaussians_while_a_batch_is_out(
    tmp_path, monkeypatch, hash_pipeline, sentences, ray_address
):
    """The driver kept each partly cached batch's cached Gaussians from its lookup until its
    actor answered (up to 256 MiB: 61 MB for 20,000 texts of one cached 384-d member). Now it
    keeps which texts each lacks and reads the others again, uncounted, when the batch comes
    back; what the cache let go in between (evicted past its cap) is encoded on the driver,
    and the statistics count each text once."""
    texts = sentences[:300]
    items = records(texts)
    store = tmp_path / "cache"
    ingest(items[::2], Database(tmp_path / "half", create=True).collection("c"),
           cached(hash_pipeline, store), batch_size=64)  # fmt: skip
    pipeline = cached(hash_pipeline, store)
    looked_up, batches = pipeline.lookup, -(-len(texts) // 64)
    looks = []  # whether each look was counted

    def lookup_then_lose_everything(chunk, counted=True):
        looks.append(counted)
        found = looked_up(chunk, counted=counted)
        if looks == [True] * batches:  # every batch looked up: the cache lets everything go
            pipeline.cache.clear()
        return found

    monkeypatch.setattr(pipeline, "lookup", lookup_then_lose_everything)
    on_driver = []
    for member in pipeline.members:
        monkeypatch.setattr(member, "encode", counting(member.encode, on_driver))
    collection = Database(tmp_path / "ray", create=True).collection("c")
    ingest_ray(items, collection, pipeline, batch_size=64, workers=2)
    members, stats = len(hash_pipeline.members), pipeline.cache.stats
    assert looks.count(True) == looks.count(False) == batches  # sent out, then come back
    assert sum(on_driver) == 150 * members  # cached at the first look, let go since
    assert collection.count() == len(texts)
    assert (stats.hits, stats.misses) == (150 * members, 150 * members)
    assert stats.stored == 150 * members + 150 * members


def test_a_ray_ingest_bar_moves_as_the_actors_encode(
    tmp_path, monkeypatch, hash_pipeline, sentences, ray_address
):
    """The bar of a Ray ingest moved once per committed batch: a batch of thousands of texts
    showed nothing until it was whole. Now each actor tells a counter every piece it encodes
    (256 texts of one member) and the driver tells the bar: it moves before the batch's
    commit, and ends at every text once."""
    texts = sentences[:600]
    told, moved = [], threading.Event()

    def advance(whole):
        told.append(whole)
        moved.set()

    collection = Database(tmp_path / "db", create=True).collection("c")
    add = collection.add

    def add_once_moved(*args, **kwargs):
        # the only batch: what moved the bar before it commits came from the actor
        assert moved.wait(120), "the bar did not move before the batch was committed"
        return add(*args, **kwargs)

    monkeypatch.setattr(collection, "add", add_once_moved)
    report = ingest_ray(
        records(texts), collection, hash_pipeline, batch_size=len(texts), advance=advance
    )
    assert report.added == len(texts) and sum(told) == len(texts)


def test_the_actors_encode_without_loading_the_store_or_the_service(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """An actor unpickled `Embedder` from `probembed.store.ray_ingest`, which imports the
    store and with it LanceDB: some 1.5 s of each actor's start for a library it never uses.
    Encoding with the job's progress counter too, the actors now load neither LanceDB nor
    FastAPI (`ray_support` records what each encoding worker had loaded)."""
    counter = ray.get_actor(ray_support.COUNTER)
    ray.get(counter.loaded_by_encoders.remote())  # what earlier tests' workers had
    told = []
    collection = Database(tmp_path / "db", create=True).collection("c")
    report = ingest_ray(
        records(sentences[:64]),
        collection,
        hash_pipeline,
        batch_size=32,
        workers=2,
        advance=told.append,
    )
    assert report.added == 64 and sum(told) == 64
    assert ray.get(counter.loaded_by_encoders.remote()) == set()


def test_fewer_batches_than_workers_start_only_the_actors_they_need(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """Two workers asked for one batch started two actors, each loading the pipeline (seconds
    of every member's model for nothing), and Ray warned that the second could get no work.
    The pool is now no larger than the batches sent: the run warns of nothing."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ingest_ray(records(sentences[:20]), collection, hash_pipeline, workers=2)
    assert report.added == 20
    # (Ray's own deprecation warnings of its settings are not the run's)
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []


def bar_of(told):
    """An `advance` that appends each move of the bar to `told`."""
    return told.append


def test_a_ray_ingest_bar_ends_at_every_text_with_cached_and_borrowed_texts(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """The driver tells the bar each batch's texts its actors did not encode (cached, or
    borrowed from an earlier batch) as the batch is fused: the bar ends at every text, once,
    never moving back. (A run that left that share out stayed green before.)"""
    distinct = sentences[:160]
    texts = distinct[:128] + distinct[64:96] + distinct[128:160]  # batch 2 borrows 32 of 1
    store = tmp_path / "cache"
    ingest(records(distinct[:32]), Database(tmp_path / "some", create=True).collection("c"),
           cached(hash_pipeline, store), batch_size=64)  # fmt: skip
    told = []
    collection = Database(tmp_path / "ray", create=True).collection("c")
    report = ingest_ray(
        records(texts), collection, cached(hash_pipeline, store), batch_size=64, workers=2,
        advance=bar_of(told),
    )  # fmt: skip
    assert report.added == collection.count() == len(texts)
    assert sum(told) == len(texts) and min(told) > 0


def keeping_the_counter(monkeypatch, held):
    """Make Ray ingest's progress count (`counted`) append its counter actor to `held`."""
    counted = ray_ingest.counted

    @contextlib.contextmanager
    def keeping(tally):
        with counted(tally) as counter:
            held.append(counter)
            yield counter

    monkeypatch.setattr(ray_ingest, "counted", keeping)


def test_losing_the_progress_counter_loses_only_the_bar(
    tmp_path, monkeypatch, hash_pipeline, sentences, ray_address
):
    """Each actor waited for the count to take every piece: the count killed at the bar's
    first move failed the ingest (RayTaskError, no rows). Now the actors do not wait, and
    the driver tells each batch's rest as it is fused: every row is stored, the bar ends."""
    texts, held, told = sentences[:600], [], []
    keeping_the_counter(monkeypatch, held)

    def advance(whole):
        told.append(whole)
        if len(told) == 1:
            ray.kill(held[0])

    collection = Database(tmp_path / "db", create=True).collection("c")
    report = ingest_ray(
        records(texts), collection, hash_pipeline, batch_size=len(texts), advance=advance
    )
    assert report.added == collection.count() == len(texts)
    assert sum(told) == len(texts) and min(told) > 0


def test_a_retried_batch_does_not_carry_the_bar_past_its_texts(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """Ray retries the batch of an actor that died, which counts its pieces again: the bar
    was told 728 of 600 (and chunked ingest then moved its own back). Each batch's count now
    stops at what it sends."""
    texts, told = sentences[:600], []
    ray.get(ray.get_actor(ray_support.COUNTER).exit_once_at.remote(texts[300]))  # 2nd piece
    collection = Database(tmp_path / "db", create=True).collection("c")
    report = ingest_ray(
        records(texts), collection, hash_pipeline, batch_size=len(texts), advance=bar_of(told)
    )
    assert report.added == collection.count() == len(texts)
    assert sum(told) == len(texts) and min(told) > 0


def test_a_batch_ray_lets_go_fails_the_ingest_not_silently(
    tmp_path, monkeypatch, hash_pipeline, sentences, ray_address
):
    """With DataContext.max_errored_blocks above 0 Ray Data drops a failed batch and goes
    on: the ingest reported success without its texts. Now the batches come back in plan
    order, and one missing stops the run naming it, with the batches before it written."""
    context = pytest.importorskip("ray.data").DataContext.get_current()
    monkeypatch.setattr(context, "max_errored_blocks", 1)
    texts = sentences[:192]
    texts[70] = ray_support.FAILING  # in the second batch of 64
    collection = Database(tmp_path / "db", create=True).collection("c")
    with pytest.raises(RuntimeError, match="the batch at text 64 was due"):
        ingest_ray(records(texts), collection, hash_pipeline, batch_size=64, workers=1)
    assert collection.count() == 64


def test_embed_on_ray_reads_and_fills_the_embedding_cache(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """`probembed embed --ray` shares the Ray path: it fills the cache a Ray ingest then
    reads whole, and writes the Gaussians a run without a cache writes."""
    texts = sentences[:200]
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    store = tmp_path / "cache"
    runs = {}
    for name, pipeline, ray in (
        ("uncached", hash_pipeline, False),
        ("cold", cached(hash_pipeline, store), True),
        ("warm", cached(hash_pipeline, store), True),
    ):
        out = tmp_path / name
        embed_to_parquet(source, out, pipeline, batch_size=64, use_ray=ray, workers=2)
        runs[name] = pq.read_table(out).sort_by("id").to_pydict()
        if name == "cold":  # the actors' Gaussians, kept
            held = EmbeddingCache(store).info()
            assert [m.entries for m in held.models] == [len(texts)] * len(pipeline.members)
        if pipeline.cache is not None:
            runs[f"{name} stats"] = pipeline.cache.stats
    members = len(hash_pipeline.members)
    assert runs["cold"] == runs["warm"] == runs["uncached"]
    assert runs["cold stats"] == CacheStats(hits=0, misses=200 * members, stored=200 * members)
    warm = runs["warm stats"]
    assert (warm.hits, warm.misses, warm.stored) == (200 * members, 0, 0)


def write_source(path, docs):
    """The documents (name -> text) as a folder of .md files, or as a JSONL file of records
    when `path` names one; a file of the folder not among them is deleted."""
    if path.suffix == ".jsonl":
        lines = [json.dumps({"id": name, "text": text}) for name, text in docs.items()]
        path.write_text("\n".join(lines) + "\n")
        return
    path.mkdir(exist_ok=True)
    for gone in set(os.listdir(path)) - set(docs):
        (path / gone).unlink()
    for name, text in docs.items():
        (path / name).write_text(f"# {name}\n\n{text}\n")


def stored_table(collection):
    """Every stored row, all columns but the random write tag, by id: to compare bit for bit."""
    rows = collection.db.table(collection.name).to_arrow().sort_by("id")
    return rows.drop_columns(["written"]).to_pydict()


def sync_steps(sentences):
    """What a source holds at each sync: 40 documents; then one edited, one removed, one
    added; then one more removed and nothing else changed (a removal alone)."""
    first = {f"doc{i:02d}.md": " ".join(sentences[3 * i : 3 * i + 3]) for i in range(40)}
    changed = {
        **first,
        "doc03.md": "doc03 was rewritten: " + sentences[200],
        "doc40.md": sentences[201],
    }
    del changed["doc07.md"]
    removed = dict(changed)
    del removed["doc11.md"]
    return [first, changed, removed]


@pytest.mark.parametrize("name", ["docs", "records.jsonl"])
def test_a_sync_on_ray_leaves_what_a_sync_here_leaves(
    tmp_path, hash_pipeline, sentences, ray_address, name
):
    """`ingest --sync --ray` was refused, whole documents or records (`ingest_ray` took no
    sync). Now a Ray sync is ingest's own: at each step the same report, the same rows bit
    for bit, and the same commits (written, then removed; a removal alone, one)."""
    source = tmp_path / name
    here = Database(tmp_path / "here", create=True).collection("c")
    there = Database(tmp_path / "ray", create=True).collection("c")
    for docs in sync_steps(sentences):
        write_source(source, docs)
        want = ingest(source, here, hash_pipeline, batch_size=16, sync=True)
        got = ingest_ray(source, there, hash_pipeline, batch_size=16, workers=2, sync=True)
        assert got == want
        assert there.version == here.version
        assert stored_table(there) == stored_table(here)
        assert sorted(there.ids()) == sorted(docs)
    assert (want.added, want.updated, want.unchanged, want.removed) == (0, 0, 39, 1)


def test_a_sync_on_ray_stopped_part_way_is_put_back(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """A Ray sync stopped after its first commit puts it back and removes nothing, as a sync
    here does (`undo`), and the same sync run again completes it."""
    source = tmp_path / "docs"
    first, changed, _ = sync_steps(sentences)
    write_source(source, first)
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest(source, collection, hash_pipeline, sync=True)
    before = stored_table(collection)
    write_source(source, {name: text + " (edited)" for name, text in changed.items()})

    def stop(written):
        raise OSError(f"disk full after {written}")

    with pytest.raises(OSError, match="disk full after 16"):
        ingest_ray(source, collection, hash_pipeline, batch_size=16, sync=True, on_commit=stop)
    assert stored_table(collection) == before
    report = ingest_ray(source, collection, hash_pipeline, batch_size=16, sync=True)
    assert (report.added, report.updated, report.removed) == (1, 39, 1)
    assert sorted(collection.ids()) == sorted(changed)


def test_cli_syncs_a_folder_on_ray_as_here(
    tmp_path, hash_pipeline, sentences, ray_address, encoded_by_actors
):
    """`probembed ingest FOLDER --sync --ray` said "--sync of whole documents does not run on
    Ray": now it says and stores what the plain sync does, step by step. Its progress says
    which ran: the bar of a run on Ray had lost its " (ray)". Ray runs first, so its actors
    encode the texts rather than find them in the cache the run here filled."""
    source = tmp_path / "docs"
    pipeline_dir = str(hash_pipeline.save(tmp_path / "pipeline"))
    on_ray = ["--ray", "--address", ray_address, "--workers", "2"]
    bars: dict[str, set[str]] = {"here": set(), "ray": set()}
    first = True
    for docs in sync_steps(sentences):
        write_source(source, docs)
        said = []
        for db, extra in (("ray", on_ray), ("here", [])):
            args = ["ingest", str(source), "--db", str(tmp_path / db), "--pipeline", pipeline_dir]
            result = CliRunner().invoke(app, [*args, "--sync", "--batch-size", "16", *extra])
            assert result.exit_code == 0, result.output
            output = " ".join(result.output.split())  # the summary, wrapped or not
            said.append(output[output.index(": added") : output.index("bad item(s)")])
            bars[db] |= {line.split(":")[0] for line in result.stderr.splitlines() if "eta" in line}
        if first:  # every document of the first step was encoded by the actors (titled)
            encoded = {t for _, t in encoded_by_actors()}
            assert all(any(text in e for e in encoded) for text in docs.values())
            first = False
        assert said[0] == said[1]
    assert bars == {"here": {"ingest default"}, "ray": {"ingest default (ray)"}}
    here, there = (Database(tmp_path / db).open("default") for db in ("here", "ray"))
    assert stored_table(there) == stored_table(here)
    assert said[0] == ": added 0, unchanged 39, removed 1, already stored 0, skipped 0 "


def test_ray_ingest_refuses_what_local_ingest_refuses(tmp_path, hash_pipeline, pydoc_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("c")
    bad = [Record("a", "fine"), Record("a", "again"), Record("b", "  ")]
    with pytest.raises(IngestError) as local_error:
        ingest(bad, collection, hash_pipeline)
    with pytest.raises(IngestError) as ray_error:
        ingest_ray(bad, collection, hash_pipeline)
    assert str(ray_error.value) == str(local_error.value)
    assert not collection.exists  # nothing written, not even the table
    ingest([Record("a", "fine")], collection, hash_pipeline)
    with pytest.raises(PipelineMismatchError):
        ingest_ray([Record("b", "other")], collection, pydoc_pipeline)
    with pytest.raises(ValueError, match="workers"):
        ingest_ray([Record("b", "other")], collection, hash_pipeline, workers=0)
    both = {"encode": hash_pipeline.encode, "embed_with": OnRay()}  # one would be ignored
    with pytest.raises(ValueError, match="pass encode or embed_with, not both"):
        ingest([Record("b", "other")], collection, hash_pipeline, **both)


def test_ray_ingest_of_a_folder_reads_a_link_out_of_it_only_when_told(
    tmp_path, hash_pipeline, ray_address
):
    """Ray ingest walks a folder as ingest does: a link out of it was stored silently."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nApples grow on trees.")
    (tmp_path / "secret.txt").write_text("The launch code is 4242.")
    (folder / "leak.md").symlink_to(tmp_path / "secret.txt")
    db = Database(tmp_path / "db", create=True)
    kept = ingest_ray(folder, db.collection("kept"), hash_pipeline)
    assert db.open("kept").ids() == {"a.md"}
    assert f"leak.md -> {os.path.realpath(tmp_path / 'secret.txt')}" in kept.summary()
    ingest_ray(folder, db.collection("followed"), hash_pipeline, follow_links=True)
    assert db.open("followed").ids() == {"a.md", "leak.md"}


KILLED_JOB = """
import sys, time
import ray
from probembed.pipeline import Encoded, Pipeline
from probembed.store import Database
from probembed.store.ray_ingest import ingest_ray

db, pipeline_dir, source, address = sys.argv[1:]
def stall(added):
    print(f"committed {added}", flush=True)
    time.sleep(600)  # the test kills the process here, after its first commit
ray.init(address=address, logging_level="WARNING")
ingest_ray(source, Database(db, create=True).collection("c"),
           Pipeline.load(pipeline_dir, cache=False), batch_size=100, workers=2, on_commit=stall)
"""


def test_a_killed_job_rerun_stores_every_document_once(
    tmp_path, hash_pipeline, sentences, ray_address
):
    texts = sentences[:600]
    source = tmp_path / "docs.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "text": t}) for i, t in enumerate(texts)]
    source.write_text("\n".join(lines) + "\n")
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    db = tmp_path / "db"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(KILLED_JOB))
    args = [sys.executable, str(script), str(db), str(pipeline_dir), str(source), ray_address]
    job = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    hung = threading.Timer(300, job.kill)  # only a guard against a hang: the kill is below
    hung.start()
    try:
        first = job.stdout.readline()
        assert first.startswith("committed "), first
    finally:
        hung.cancel()
        job.send_signal(signal.SIGKILL)
        job.wait()
    collection = Database(db).collection("c")
    before = collection.count()
    assert 0 < before < len(texts)  # killed mid-run, after whole committed batches
    report = ingest_ray(source, collection, hash_pipeline, batch_size=100, workers=2)
    assert (report.already_stored, report.added) == (before, len(texts) - before)
    stored = collection.db.table("c").to_arrow().column("id").to_pylist()
    assert sorted(stored) == sorted(f"d{i}" for i in range(len(texts)))  # each exactly once


def test_sigterm_ends_a_ray_ingest_as_it_ends_a_local_one(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """ray.init replaced the process's SIGTERM handler: a Ray ingest sent SIGTERM dumped a C++
    stack ("*** SIGTERM received ... PC: @") and exited 15 or 134. Now it ends as a local
    ingest does, by the signal (143 in a shell) after the line that says what is kept; the
    committed batches stay and the same command resumes. (Ending through ray.shutdown()
    exited 1 in half the runs.)"""
    n = 6000  # 375 batches of 16: the signal lands long before the last (asserted below)
    source = tmp_path / "docs.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "text": f"{sentences[i % 2000]} {i}"}) for i in range(n)]
    source.write_text("\n".join(lines) + "\n")
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    db = tmp_path / "db"
    args = ["ingest", str(source), "--db", str(db), "-c", "c", "--pipeline", str(pipeline_dir)]
    args += ["--ray", "--address", ray_address, "--workers", "2", "--batch-size", "16"]
    code, err = terminated_after_a_commit(args, db)
    assert code == -signal.SIGTERM, err
    assert "SIGTERM received" not in err and "Traceback" not in err, err
    before = stored(db)
    assert 0 < before < n  # ended mid-run, after whole committed batches
    said = re.search(  # one LanceDB was committing as the signal came may land after the count
        r"terminated \(SIGTERM\): (\d+) committed batch\(es\) are kept"
        r"(, and one it was committing may land)?; the same command resumes",
        err,
    )
    assert said is not None and 0 < int(said.group(1)) <= before, err
    collection = Database(db).collection("c")
    report = ingest_ray(source, collection, hash_pipeline, batch_size=1000, workers=2)
    assert (report.already_stored, report.added) == (before, n - before)
    assert collection.count() == n


def test_a_ray_gcs_passes_the_address_probe(ray_address):
    """The probe sends an HTTP/2 preface and wants a SETTINGS frame: a real GCS answers so."""
    check_reachable(ray_address)


def test_cli_ingest_ray_joins_the_given_cluster(tmp_path, hash_pipeline, sentences, ray_address):
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(
            json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(sentences[:300])
        )
    )
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    db = str(tmp_path / "db")
    args = ["ingest", str(source), "--db", db, "--pipeline", str(pipeline_dir), "--ray"]
    args += ["--batch-size", "100"]
    result = CliRunner().invoke(app, [*args, "--address", ray_address, "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "added 300" in result.output
    assert Database(db).open("default").count() == 300


def test_cli_ingest_ray_joins_the_cluster_ray_address_names(
    tmp_path, hash_pipeline, sentences, ray_address
):
    """Under `ray job submit` (RAY_ADDRESS set) it asked Ray for a local instance of its own
    CPUs, and Ray refused: "When connecting to an existing cluster, num_cpus ... must not be
    provided"."""
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                              for i, t in enumerate(sentences[:50])))  # fmt: skip
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    db = str(tmp_path / "db")
    args = ["ingest", str(source), "--db", db, "--pipeline", str(pipeline_dir), "--ray"]
    child = subprocess.run(
        [sys.executable, "-m", "probembed", *args],
        env={**os.environ, "RAY_ADDRESS": ray_address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    assert Database(db).open("default").count() == 50


def test_chunked_ingest_on_ray_equals_chunked_ingest_here(
    tmp_path, hash_pipeline, sentences, ray_address, encoded_by_actors
):
    folder = tmp_path / "docs"
    folder.mkdir()
    for d in range(12):  # 12 Markdown files of 20 sentences under two headings: several chunks
        one, two = (" ".join(sentences[d * 20 + k : d * 20 + k + 10]) for k in (0, 10))
        (folder / f"doc{d}.md").write_text(f"# Part one\n\n{one}\n\n# Part two\n\n{two}\n")
    pipeline_dir = str(hash_pipeline.save(tmp_path / "pipeline"))
    args = [str(folder), "--pipeline", pipeline_dir, "--chunk"]
    args += ["--chunk-tokens", "48", "--overlap", "8"]
    on_ray = ["--ray", "--address", ray_address, "--workers", "2", "--batch-size", "16"]
    for db, extra in (("ray", on_ray), ("here", [])):  # Ray first: its actors encode
        result = CliRunner().invoke(app, ["ingest", *args, "--db", str(tmp_path / db), *extra])
        assert result.exit_code == 0, result.output
    here, there = (Database(tmp_path / db).open("default") for db in ("here", "ray"))
    got, want = (c.db.table("default").to_arrow().to_pylist() for c in (there, here))
    assert {t for _, t in encoded_by_actors()} >= {row["text"] for row in got}
    assert len(want) > 24  # more than two chunks per document
    by_id = lambda rows: {r["id"]: r for r in rows}  # noqa: E731
    got, want = by_id(got), by_id(want)
    assert sorted(got) == sorted(want)
    fields = ("text", "doc_id", "chunk", "start", "end", "heading", "doc_hash")
    assert all([got[i][f] for f in fields] == [want[i][f] for f in fields] for i in want)
    ids = sorted(want)
    stack = lambda rows, k: np.array([rows[i][k] for i in ids], dtype=np.float32)  # noqa: E731
    assert_within_batch_bound(
        Gaussian(stack(got, "mean"), stack(got, "var")),
        Gaussian(stack(want, "mean"), stack(want, "var")),
    )
    again = CliRunner().invoke(app, ["ingest", *args, "--db", str(tmp_path / "ray"), *on_ray])
    assert again.exit_code == 0 and "unchanged 12" in again.output


def test_embed_on_ray_writes_what_pipeline_encode_gives(
    tmp_path, hash_pipeline, sentences, ray_address
):
    texts = sentences[:500]
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    pipeline_dir = hash_pipeline.save(tmp_path / "pipeline")
    out = tmp_path / "out"
    args = ["embed", str(source), "--out", str(out), "--pipeline", str(pipeline_dir), "--ray"]
    result = CliRunner().invoke(app, [*args, "--batch-size", "64", "--workers", "2"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()  # its bar says where, on a line of its own
    assert any(line.startswith("embed docs.jsonl (ray): 500/500 elapsed ") for line in lines)
    assert len(list(out.glob("part-*.parquet"))) == -(-len(texts) // 64)
    table = pq.read_table(out).sort_by("id")
    want = hash_pipeline.encode(texts)
    order = np.argsort([f"d{i}" for i in range(len(texts))], kind="stable")
    assert table.column("id").to_pylist() == [f"d{i}" for i in order]
    got = Gaussian(
        np.array(table.column("mean").to_pylist(), dtype=np.float32),
        np.array(table.column("var").to_pylist(), dtype=np.float32),
    )
    assert_within_batch_bound(got, want.gaussian[order])
    weights = np.array(table.column("weights").to_pylist())
    assert np.abs(weights - want.weights[order]).max() <= WEIGHT_BOUND


def test_a_request_no_node_can_meet_is_refused_not_waited_for(tmp_path, hash_pipeline, ray_address):
    """A GPU per worker on a cluster without one (Ray would wait forever), or a negative CPU
    count, is a named error; nothing is written, and the CLI creates no database."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    texts = [Record(f"t{i}", f"text number {i}") for i in range(20)]
    with pytest.raises(ValueError, match=r"asks for 1 CPU\(s\) and 1 GPU\(s\), but no node"):
        ingest_ray(texts, collection, hash_pipeline, gpus_per_worker=1.0)
    with pytest.raises(ValueError, match="^cpus_per_worker must be a positive number, got -1"):
        ingest_ray(texts, collection, hash_pipeline, cpus_per_worker=-1.0)
    assert not collection.exists
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "some text"}\n')
    for option in (["--workers", "0"], ["--cpus-per-worker", "-1"]):
        result = CliRunner().invoke(
            app, ["ingest", str(source), "--db", str(tmp_path / "cli-db"), "--ray", *option]
        )
        said = f"{option[0]} must be a positive"  # the option, not the Python parameter
        assert result.exit_code == 2 and said in result.output, result.output
        assert not (tmp_path / "cli-db").exists()


def test_embed_on_ray_writes_chunks_and_metadata_and_resumes_as_a_local_run(
    tmp_path, pydoc_pipeline, ray_address
):
    """`embed --ray --chunk` writes what a local run writes (the chunks, their text and
    metadata columns, their Gaussians), and a re-run on Ray writes only the missing parts."""
    from probembed.chunking import ChunkSettings
    from probembed.store.pydoc_corpus import read_pydoc_topics

    topics = read_pydoc_topics()[:12]
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(
            json.dumps({"_id": r.id, "text": r.text, "n": i, "tag": f"g{i % 3}"}) + "\n"
            for i, r in enumerate(topics)
        )
    )
    settings = ChunkSettings(48, 8)
    here = embed_to_parquet(source, tmp_path / "here", pydoc_pipeline, 16, chunking=settings)
    out = tmp_path / "ray"
    options = {"use_ray": True, "workers": 2, "chunking": settings}
    on_ray = embed_to_parquet(source, out, pydoc_pipeline, 16, **options)
    assert on_ray.rows == here.rows > 3 * 16 and on_ray.files == here.files
    want = pq.read_table(tmp_path / "here").to_pydict()
    assert pq.read_table(out).to_pydict() == want
    assert {"n", "tag", "doc_id", "chunk", "heading"} <= set(want)
    parts = sorted(out.glob("part-*.parquet"))
    for part in (parts[0], parts[-1]):  # what a killed job had not written
        part.unlink()
    again = embed_to_parquet(source, out, pydoc_pipeline, 16, **options)
    assert (again.files, again.kept_files) == (2, len(parts) - 2)
    assert pq.read_table(out).to_pydict() == want


def test_address_auto_with_no_ray_running_is_refused_before_the_input_is_read(tmp_path):
    """`--address auto` with no cluster failed only once the input was read and the models
    loaded (29 s), though a bad address is refused before: `auto` is now found as ray.init
    finds it, and refused naming what to do, before anything is read (`docs.jsonl` is no
    file: reading it would be another refusal).

    Ray finds a running Ray by every process's command line, so the CLI runs in a PID
    namespace of its own (`unshare`), where it sees no other process's Ray (this module's
    own is running), and with a Ray temporary folder of its own (no `ray start` recorded);
    where no namespace can be made, it is skipped (it always was, a Ray being found)."""
    alone = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    if shutil.which("unshare") is None or subprocess.run([*alone, "true"]).returncode:
        pytest.skip("no PID namespace here (unshare): `auto` would find another process's Ray")
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "x"}\n')
    args = ["ingest", str(source), "--db", str(tmp_path / "db"), "--ray", "--address", "auto"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [*alone, sys.executable, "-m", "probembed", *args],
        env=env | {"RAY_TMPDIR": str(tmp_path / "ray")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert "Ray address 'auto' finds no running Ray on this machine" in said, said
    assert not (tmp_path / "db").exists()  # refused before a database was made
