"""Compact stored variances: exact where the variances are low-rank, close on real pipelines."""

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed import variance_basis as variance
from probembed.cache import EmbeddingCache
from probembed.fusion import Fused
from probembed.fusion.adapt import retilt
from probembed.gaussian import Gaussian
from probembed.pipeline import Pipeline
from probembed.scoring import dot_variance, score_matrix
from probembed.store import Collection, Database, Record, ingest, snapshot
from probembed.store.pydoc_corpus import read_pydoc_topics
from probembed.variance_basis import RANK, VarianceBasis, reference_fit


def low_rank(rng: np.random.Generator, n: int, blocks: tuple[int, ...]) -> np.ndarray:
    """Variances that are, per block, a positive combination of RANK positive profiles."""
    parts = []
    for width in blocks:
        profiles = rng.uniform(1e-4, 1e-2, size=(RANK, width))
        parts.append(rng.uniform(0.1, 1.0, size=(n, RANK)) @ profiles)
    return np.hstack(parts)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    blocks=st.lists(st.integers(1, 64), min_size=1, max_size=4).map(tuple),
    n=st.integers(1, 50),
)
def test_variances_in_the_span_of_the_basis_come_back_exactly(seed, blocks, n):
    rng = np.random.default_rng(seed)
    var = low_rank(rng, n + 2 * RANK, blocks)
    basis = VarianceBasis.fit(var[: max(n, 2 * RANK)], blocks)
    back = basis.decode(basis.encode(var))
    # float32 basis and coefficients: the round trip is exact up to a few float32 roundings
    # per term, relative to the variance itself; a row outside the fitted ones may lie below
    # the floor (half the smallest fitted variance), where it is floored by design
    np.testing.assert_allclose(back, np.maximum(var, basis.floor), rtol=1e-4)


def test_the_header_form_reads_back_bit_for_bit():
    rng = np.random.default_rng(0)
    basis = VarianceBasis.fit(low_rank(rng, 30, (8, 5)), (8, 5))
    again = VarianceBasis.from_json(basis.to_json())
    coef = basis.encode(low_rank(rng, 4, (8, 5)))
    np.testing.assert_array_equal(again.decode(coef), basis.decode(coef))
    assert again.blocks == basis.blocks and again.floor == basis.floor


def test_a_block_width_mismatch_is_refused():
    with pytest.raises(ValueError, match="blocks"):
        VarianceBasis.fit(np.ones((3, 10)), (4, 4))


#: Tolerances of the scores computed from stored (compact) variances against the full ones,
#: relative to the spread of each score (the std: to its median) over the corpus: several
#: times what the default pipeline errs by on 100,000 real texts (benchmarks/results/
#: variance.json: uec 6e-7, csd 2e-5, w2 4e-5 of their range, the std 0.3% of its median).
TOLERANCE = {"dot": 0.0, "uec": 4e-6, "csd": 5e-4, "w2": 1e-3, "std": 0.005}


def stored_and_full(directory, pipeline, records):
    """A collection of the records, the Gaussians it stores, and the full ones, row-aligned."""
    collection = Database(directory / "db", create=True).collection("d")
    ingest(records, collection, pipeline)
    vectors = collection.vectors()
    order = {doc_id: i for i, doc_id in enumerate(vectors.ids)}
    rows = [order[r.id] for r in records]
    full = pipeline.encode([r.text for r in records]).gaussian
    return collection, Gaussian(vectors.mean[rows], vectors.var[rows]), full


@pytest.fixture(scope="module")
def cached_default(tmp_path_factory, default_pipeline):
    """The default pipeline with an embedding cache of this module's own (its models are the
    session's: a built-in's encoders load once per process), so a passage several tests store
    is encoded once: each encoding of 120 passages was about 18 s."""
    cache = EmbeddingCache(tmp_path_factory.mktemp("cache"))
    return Pipeline.load(default_pipeline.name, cache=cache)


#: Passages of the bundled Python docs the module stores (256-token chunks, texts far from the
#: short reference sentences a basis is fitted on). 40 score the first 20 against 800 pairs:
#: each score's largest error over them was 0.7 to 0.8 of what 120 passages gave, and under
#: 5% of its tolerance in both; each of these passages costs the default pipeline about
#: 0.2 s to encode on 2 idle cores.
PASSAGES = 40


@pytest.fixture(scope="module")
def compact(tmp_path_factory, cached_default):
    """PASSAGES passages of the bundled Python docs stored by the default pipeline, and the
    full Gaussians of what ingest encoded, read back from the module's embedding cache."""
    directory = tmp_path_factory.mktemp("compact")
    return stored_and_full(directory, cached_default, read_pydoc_topics()[:PASSAGES])


def test_the_default_pipeline_stores_coefficients_not_whole_variances(compact):
    collection, _, full = compact
    assert collection.variance_column == "var_coef"
    assert collection.variance_basis.width <= RANK * 3 < full.dim


@pytest.mark.parametrize("score", ["dot", "uec", "csd", "w2"])
def test_scores_from_stored_variances_stay_within_tolerance(compact, score):
    _, stored, full = compact
    want = score_matrix(full[:20], full, score)
    got = score_matrix(full[:20], stored, score)
    assert np.abs(got - want).max() <= TOLERANCE[score] * np.ptp(want)


def test_score_std_from_stored_variances_stays_within_tolerance(compact):
    _, stored, full = compact
    want = np.sqrt(dot_variance(full[:20], full))
    got = np.sqrt(dot_variance(full[:20], stored))
    assert np.abs(got - want).max() <= TOLERANCE["std"] * np.median(want)


def test_variances_a_basis_cannot_reproduce_are_stored_whole(tmp_path, pydoc_pipeline):
    # the hashing encoder's variance changes shape with each text: no basis is kept, and the
    # stored variances are the full ones
    collection, stored, full = stored_and_full(tmp_path, pydoc_pipeline, read_pydoc_topics()[:100])
    assert collection.variance_column == "var" and collection.variance_basis is None
    np.testing.assert_array_max_ulp(stored.var, full.var, maxulp=1)  # ingest's batches: an ulp


def test_loading_whole_variances_holds_arrow_buffers_of_one_batch_at_a_time(
    tmp_path, pydoc_pipeline, monkeypatch
):
    # the variance column read from LanceDB is a zero-copy view of Arrow's buffer: written to
    # the snapshot's file batch by batch, at most a couple of batches are alive at once; kept
    # to the end of the load, every batch's column would be (at 10^6 rows of the hashing
    # pipeline, 1 GB more at the peak)
    import pyarrow as pa

    monkeypatch.setattr(snapshot, "FETCH_ROWS", 8)  # 13 batches from 100 rows
    collection, _, _ = stored_and_full(tmp_path, pydoc_pipeline, read_pydoc_topics()[:100])
    assert collection.variance_column == "var"
    seen, append = [], snapshot.MeanFile.append

    def counting(self, rows):
        seen.append(pa.total_allocated_bytes())
        append(self, rows)

    monkeypatch.setattr(snapshot.MeanFile, "append", counting)
    before = pa.total_allocated_bytes()
    loaded = snapshot.Snapshot.load(collection)
    try:
        # in rows of float32 variance: every batch's variances kept would be 100 on their
        # own; what a load holds anyway (the listing, one or two batches' means, variances
        # and texts, Arrow's 64-byte padding of each buffer) measured about 64 here
        row = collection.dim * 4
        assert max(seen) - before < 100 * row, (max(seen) - before) / row
        np.testing.assert_array_equal(loaded.variances(np.arange(100)), collection.vectors().var)
    finally:
        loaded.close()


@pytest.mark.parametrize("first_write", [0, 1])
def test_a_collection_created_empty_or_with_one_item_stores_coefficients(
    tmp_path, cached_default, first_write
):
    # the basis is the pipeline's: a service's collection, created empty and written a few
    # items at a time, is as compact as one ingested in large batches (the passages are
    # among the module's, so the cache holds their Gaussians: the basis is what is tested)
    collection = Database(tmp_path / "db", create=True).collection("d")
    records = read_pydoc_topics()[:3]
    if first_write == 0:
        collection.create(cached_default)
    else:
        ingest(records[:1], collection, cached_default)
    ingest(records, collection, cached_default)
    assert collection.variance_column == "var_coef"
    full = cached_default.encode([r.text for r in records]).gaussian
    want = np.sqrt(dot_variance(full, full))
    stored = collection.vectors()
    order = [list(stored.ids).index(r.id) for r in records]
    got = np.sqrt(dot_variance(full, Gaussian(stored.mean[order], stored.var[order])))
    assert np.abs(got - want).max() <= TOLERANCE["std"] * np.median(want)


def test_stored_variances_do_not_depend_on_the_batch_size(tmp_path, default_pipeline):
    # the basis was fitted on the first batch: ingests of the same texts at batch sizes 64
    # and 512 decoded variances up to 2.2% apart (and a first batch under 32 rows kept whole
    # variances); now the basis is the pipeline's, and they agree. Uncached, so each ingest
    # encodes its own batches: six passages in three batches, then in one
    records = read_pydoc_topics()[:6]
    stored = []
    for batch_size in (2, 6):
        collection = Database(tmp_path / f"db{batch_size}", create=True).collection("d")
        ingest(records, collection, default_pipeline, batch_size=batch_size)
        stored.append((collection.variance_basis.to_json(), collection.vectors()))
    (basis_a, a), (basis_b, b) = stored
    assert basis_a == basis_b
    # what is left is the encoders' own batch effect (padding moves a variance by < 1e-6 of
    # itself), 2,000 times below what the first batch's basis made
    np.testing.assert_allclose(a.var[np.argsort(a.ids)], b.var[np.argsort(b.ids)], rtol=1e-5)


@pytest.mark.parametrize("decoded_rows", [10_000, 10])
def test_search_reads_rows_as_stored_and_tilted_whether_kept_decoded_or_not(
    tmp_path, cached_default, decoded_rows, monkeypatch
):
    # small snapshots keep every variance decoded and tilted; large ones decode on each read:
    # both must give what retilt gives on the stored rows, also for rows appended later
    monkeypatch.setattr(snapshot, "DECODED_ROWS", decoded_rows)
    records = read_pydoc_topics()[:PASSAGES]  # the module's: their Gaussians are cached
    collection = Database(tmp_path / "db", create=True).collection("d")
    ingest(records[:32], collection, cached_default)
    dims = tuple(m.encoder.dim for m in cached_default.members)
    tilt = snapshot.Tilt(dims, np.array([1.5, 0.5, 1.0]))
    snap = snapshot.Snapshot.load(collection, tilt)
    snap.gaussian(np.arange(len(snap)))  # read once before the write, as a search would
    ingest(records[32:], collection, cached_default)
    snap = snap.refreshed(collection)
    got = snap.gaussian(np.arange(len(snap)))
    vectors = collection.vectors()
    order = {doc_id: i for i, doc_id in enumerate(vectors.ids)}
    rows = [order[i] for i in snap.ids]
    stored = Fused(Gaussian(vectors.mean[rows], vectors.var[rows]), vectors.weights[rows],
                   cached_default.models)  # fmt: skip
    want = retilt(stored, dims, tilt.factors)
    assert collection.variance_column == "var_coef" and len(snap) == PASSAGES
    np.testing.assert_array_equal(got.mean, want.gaussian.mean)
    np.testing.assert_array_equal(got.var, want.gaussian.var)
    np.testing.assert_array_equal(snap.fusion_weights(np.arange(PASSAGES)), want.weights)


def test_threads_asking_for_one_pipelines_basis_at_once_fit_it_once(monkeypatch, hash_pipeline):
    """The service asks on its request threads: each fitted it (seconds of encoding apiece)."""
    monkeypatch.delitem(variance._FITTED, hash_pipeline.fingerprint, raising=False)
    fits = []
    start = threading.Barrier(2)

    def counted(pipeline):
        fits.append(pipeline.fingerprint)
        time.sleep(0.3)  # the other thread asks while this one fits
        return reference_fit(pipeline)

    monkeypatch.setattr(variance, "reference_fit", counted)
    answers = []

    def ask():
        start.wait()
        answers.append(variance.pipeline_basis(hash_pipeline))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fits == [hash_pipeline.fingerprint]
    assert len(answers) == 2 and answers[0] is answers[1]


def test_a_first_write_fits_the_basis_before_taking_the_write_lock(
    tmp_path, monkeypatch, hash_pipeline
):
    """The fit ran inside `_create`, under the collection's write lock (a file lock that every
    other writer of the collection waits for)."""
    key = hash_pipeline.fingerprint
    monkeypatch.delitem(variance._FITTED, key, raising=False)
    fits = []

    def counted(pipeline):
        fits.append(pipeline.fingerprint)
        return reference_fit(pipeline)

    monkeypatch.setattr(variance, "reference_fit", counted)
    writing = Collection._writing
    fitted_when_locked = []

    def watched(self):
        fitted_when_locked.append(key in variance._FITTED)
        return writing(self)

    monkeypatch.setattr(Collection, "_writing", watched)
    records = [Record(f"r{i}", f"text number {i}") for i in range(5)]
    ingest(records, Database(tmp_path / "db", create=True).collection("c"), hash_pipeline)
    assert fits == [key]  # fitted once, for the collection's header
    assert fitted_when_locked and all(fitted_when_locked)
