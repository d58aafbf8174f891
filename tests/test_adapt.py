"""Collection-adapted weights: agreement finds the member that goes its own way, no labels."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.evaluation.harness import Embedded
from probembed.evaluation.lodo import Split, fold_choice
from probembed.fusion import Fused, fuse
from probembed.fusion.adapt import (
    adapted_weights,
    agreement,
    collection_tilt,
    members_of,
    neighbour_disagreement,
    retilt,
)
from probembed.gaussian import Gaussian, decimals

FAST = settings(max_examples=30, deadline=None)


def _members(seed: int, n: int = 200, noise: tuple[float, ...] = (0.1, 0.1, 2.0)) -> list:
    """Members that see one shared latent point per text, each through its own noise level."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=(n, 8))
    return [Gaussian(truth + s * rng.normal(size=truth.shape), np.zeros_like(truth)) for s in noise]


def test_the_noisy_member_agrees_least() -> None:
    """Two members near the truth and one far from it: the far one has the lowest agreement."""
    a = agreement(_members(0), sample=200, neighbours=5)
    assert a.argmin() == 2
    assert a[2] < 0.5 * min(a[0], a[1])  # 2.0 noise against 0.1: its lists are near random


def test_agreement_is_seeded_and_order_equivariant() -> None:
    """Same sample, same answer; permuting members permutes their agreements."""
    parts = _members(1)
    a = agreement(parts, sample=100)
    np.testing.assert_array_equal(a, agreement(parts, sample=100))
    np.testing.assert_allclose(agreement(parts[::-1], sample=100), a[::-1], rtol=1e-12)


@FAST
@given(st.integers(0, 2**32 - 1))
def test_two_members_agree_with_each_other_alike_exactly(seed: int) -> None:
    """Each one's consensus is the other: equal agreements, so no tilt. Members of few
    distinct values (hashing's exactly tied cosines) made the total-less-own consensus round
    differently from the other's table, and the tilt of two members was noise that turned
    with the CPU's BLAS kernel."""
    rng = np.random.default_rng(seed)
    parts = [
        Gaussian(rng.integers(-1, 2, (120, 6)).astype(float), np.zeros((120, 6))) for _ in "ab"
    ]
    a = agreement(parts, sample=120, neighbours=5)
    assert a[0] == a[1]
    u = neighbour_disagreement(parts, scales=(5, 10))
    np.testing.assert_array_equal(u[:, 0], u[:, 1])
    np.testing.assert_array_equal(adapted_weights(a, np.array([0.7, 0.3]), 20.0), [0.7, 0.3])


def test_a_member_that_misreads_some_texts_disagrees_on_exactly_those() -> None:
    """Member 0 embeds texts 0-19 at random: its per-text disagreement singles them out."""
    parts = _members(2, noise=(0.1, 0.1, 0.1))
    scrambled = parts[0].mean.copy()
    scrambled[:20] = np.random.default_rng(9).normal(size=(20, scrambled.shape[1]))
    parts[0] = Gaussian(scrambled, np.zeros_like(scrambled))
    u = neighbour_disagreement(parts, scales=(5, 10, 20))
    assert u.shape == (200, 3)
    assert (u[:20].argmax(axis=1) == 0).all()  # on each misread text, member 0 stands out
    assert u[:20, 0].mean() > 0.8 > 0.4 > u[20:, 0].mean()
    # The others' consensus counts member 0 too, so they disagree more there, but far less.
    assert u[:20, 0].mean() > 0.2 + u[:20, 1:].mean()


def test_per_text_disagreement_is_the_complement_of_agreement_text_by_text() -> None:
    """At one scale over every text, agreement is 1 − the mean per-text disagreement."""
    parts = _members(3, n=120)
    u = neighbour_disagreement(parts, scales=(10,))
    np.testing.assert_allclose(1.0 - u.mean(axis=0), agreement(parts, sample=120), rtol=1e-12)


def test_queries_are_compared_with_a_reference_and_bad_input_is_named() -> None:
    """A query set against a corpus: one row per query; scales and shapes are checked."""
    corpus, queries = _members(4), _members(5, n=30)
    u = neighbour_disagreement(queries, corpus, scales=(5, 200))
    assert u.shape == (30, 3) and ((u >= 0) & (u <= 1)).all()
    with pytest.raises(ValueError, match=r"scales must be neighbour counts in 1\.\.200"):
        neighbour_disagreement(queries, corpus, scales=(201,))
    with pytest.raises(ValueError, match=r"scales must be neighbour counts in 1\.\.199"):
        neighbour_disagreement(corpus, scales=(200,))  # a text is not its own neighbour
    with pytest.raises(ValueError, match="reference needs every member"):
        neighbour_disagreement(queries, corpus[:2])
    with pytest.raises(ValueError, match="at least 2 members"):
        neighbour_disagreement(queries[:1])


@FAST
@given(st.integers(0, 10_000), st.permutations([0, 1, 2]))
def test_neighbour_disagreement_is_a_share_and_member_order_equivariant(seed, order) -> None:
    """Every value is a share in [0, 1]; permuting members permutes the columns."""
    parts = _members(seed, n=40, noise=(0.2, 0.5, 1.0))
    u = neighbour_disagreement(parts, scales=(3, 7))
    assert ((u >= 0) & (u <= 1)).all()
    np.testing.assert_allclose(
        neighbour_disagreement([parts[i] for i in order], scales=(3, 7)), u[:, order], atol=1e-12
    )


@FAST
@given(
    st.lists(st.floats(0, 1), min_size=2, max_size=5),
    st.floats(0, 50),
)
def test_adapted_weights_tilt_the_prior_towards_agreement(a: list[float], gamma: float) -> None:
    """A probability vector; gamma 0 is the prior; more agreement never means less weight."""
    prior = np.linspace(1, 2, len(a))
    w = adapted_weights(np.array(a), prior, gamma)
    assert w.sum() == pytest.approx(1.0) and (w >= 0).all()
    np.testing.assert_allclose(adapted_weights(np.array(a), prior, 0.0), prior / prior.sum())
    ratio = w / (prior / prior.sum())
    order = np.argsort(a, kind="stable")
    assert np.all(np.diff(ratio[order]) >= -1e-9)


def test_a_zero_prior_stays_zero_and_bad_input_is_named() -> None:
    """A member the prior drops is never revived; bad gamma or too few texts are errors."""
    w = adapted_weights(np.array([0.9, 0.1]), [0.0, 1.0], 40.0)
    assert w[0] == 0.0 and w[1] == 1.0
    with pytest.raises(ValueError, match="gamma"):
        adapted_weights(np.array([0.5, 0.5]), None, -1.0)
    with pytest.raises(ValueError, match="more than 10 texts"):
        agreement(_members(0, n=5))


def test_fold_choice_never_looks_at_the_left_out_dataset() -> None:
    """The left-out dataset's figures do not move the choice, however extreme they are."""
    dev = {"a": [0.1, 0.9, 0.5], "b": [0.2, 0.8, 0.4], "c": [9.0, -9.0, 0.0]}
    assert fold_choice(dev, "c") == 1
    dev["c"] = [-9.0, -9.0, 9.0]
    assert fold_choice(dev, "c") == 1
    assert fold_choice(dev, "a") == 2  # b and c: means -4.4, -4.1, 4.7
    dev["b"] = [0.2, float("nan"), 0.4]
    with pytest.raises(ValueError, match="setting 1 scores NaN on b's tuning split"):
        fold_choice(dev, "c")


def test_a_tilt_reads_the_agreement_among_the_members_it_weights() -> None:
    """A member the prior drops does not take part, as in a collection without it."""
    parts = _members(2, noise=(0.1, 0.3, 2.0))
    split = Split(None, Embedded(("a", "b", "c"), {"a": parts}), agreement(parts))
    among = split.agreement_among((0.6, 0.0, 0.4))
    np.testing.assert_array_equal(among[[0, 2]], agreement([parts[0], parts[2]]))
    assert among[1] == 0 and split.agreement_among((0.6, 0.0, 0.4)) is among  # measured once
    assert split.agreement_among((0.2, 0.3, 0.5)) is split.agreement  # every member weighted
    assert split.agreement_among((1.0, 0.0, 0.0)) is split.agreement  # one member: no tilt


def test_collection_tilt_is_the_adapted_weights_over_the_prior() -> None:
    """w is the tilted prior; t = w/p, 0 for a member the prior drops; p·t is w again."""
    prior = np.array([0.0, 3.0, 1.0])
    w, t = collection_tilt(np.array([0.9, 0.2, 0.6]), prior, 3, 5.0)
    np.testing.assert_array_equal(w, adapted_weights(np.array([0.9, 0.2, 0.6]), prior, 5.0))
    assert t[0] == 0.0 and w[0] == 0.0
    np.testing.assert_allclose(prior / prior.sum() * t, w, rtol=1e-15)
    _, uniform = collection_tilt(np.array([0.5, 0.5]), None, 2, 5.0)
    np.testing.assert_allclose(uniform, [1.0, 1.0], rtol=1e-15)  # equal agreement: no tilt
    with pytest.raises(ValueError, match=r"agreements must be one per member, shape \(3,\)"):
        collection_tilt(np.array([0.5, 0.5]), None, 3, 5.0)  # agreements of another ensemble


def test_retilt_equals_fusing_with_the_tilted_prior() -> None:
    """Re-weighting stored concat rows is exactly fusing again with prior p·t: no re-encoding."""
    rng = np.random.default_rng(3)
    dims, models = [4, 3, 2], ("a", "b", "c")
    parts = [Gaussian(rng.normal(size=(6, d)), rng.uniform(1e-4, 1e-2, (6, d))) for d in dims]
    prior, tilt = np.array([0.5, 0.3, 0.2]), np.array([2.0, 0.5, 1.0])
    stored = fuse(parts, models, temperature=0.7, prior=prior)
    direct = fuse(parts, models, temperature=0.7, prior=prior * tilt)
    again = retilt(stored, dims, tilt)
    # float32 rows scaled in float64 and stored again as float32: a few ulps (~1e-7 relative)
    np.testing.assert_allclose(again.weights, direct.weights, rtol=1e-6)
    np.testing.assert_allclose(again.gaussian.mean, direct.gaussian.mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(again.gaussian.var, direct.gaussian.var, rtol=1e-5, atol=1e-12)
    back = members_of(stored, dims)
    for k, part in enumerate(parts):
        np.testing.assert_allclose(back[k].mean, part.normalize().mean, rtol=1e-5, atol=1e-6)


def adapting(pipeline):
    """The same fitted pipeline, with collections tilting its prior by their agreement."""
    from probembed.pipeline import AdaptConfig, Pipeline

    fusion, score = pipeline.fusion, pipeline.score
    return Pipeline(pipeline.members, fusion, score, "hash-adapt", cache=False,
                    adapt=AdaptConfig(gamma=20.0))  # fmt: skip


def test_a_collection_keeps_its_agreement_and_searches_with_its_own_weights(
    tmp_path, hash3_pipeline, sentences
) -> None:
    """Ingest measures agreement; search equals a scan fused with the collection's weights."""
    from dataclasses import replace

    from probembed.scoring import score_matrix
    from probembed.store import Database, ingest
    from probembed.store.readers import Record

    pipe = adapting(hash3_pipeline)
    assert pipe.fingerprint == hash3_pipeline.fingerprint  # adaptation changes no stored vector
    texts = sentences[:300]
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record(f"{i:04d}", t) for i, t in enumerate(texts)], collection, pipe)
    measured = collection.agreement()
    dims = [m.encoder.dim for m in pipe.members]
    encoded = pipe.encode(texts)  # weights stored as float32: round them the same way, since
    # the hashing encoder's many exactly tied cosines make neighbour lists flip on any ulp
    encoded = Fused(encoded.gaussian, encoded.weights.astype(np.float32), encoded.models)
    fresh = agreement(members_of(encoded, dims))
    # the same rows sampled (in id order) from float32 rows read back: neighbour lists equal
    np.testing.assert_allclose(measured, fresh, atol=1e-12)
    adapted_pair = pipe.adapted(measured)
    assert adapted_pair is not None
    tilt = adapted_pair[1]
    assert not np.allclose(tilt, 1.0)
    adapted = replace(pipe.fusion, prior=tuple(np.asarray(pipe.fusion.prior or (1, 1, 1)) * tilt))
    docs = adapted.fuse(pipe.encode_members(texts), pipe.models).gaussian
    queries = adapted.fuse(pipe.encode_members(texts[:3]), pipe.models).gaussian
    expected = np.argsort(-score_matrix(queries, docs, "dot"), axis=1, kind="stable")[:, :5]
    shown = collection.stats().adapted_weights
    assert shown is not None and sum(shown.values()) == pytest.approx(1.0)
    np.testing.assert_allclose(list(shown.values()), np.asarray(adapted.prior) / sum(adapted.prior))
    results = collection.searcher().search(texts[:3], k=5, score="dot", exact=True)
    for row, result in enumerate(results):
        assert [h["id"] for h in result["hits"]] == [f"{j:04d}" for j in expected[row]]
    # `collections` at 80 columns: each model on a line of its own with its weight, none cut
    # (a comma-joined list wrapped "paraphrase-l3" to "paraphrase…", and the weights apart)
    from typer.testing import CliRunner

    from probembed.interfaces.cli import app

    db = ["--db", str(tmp_path / "db")]
    listed = CliRunner().invoke(app, ["collections", *db], env={"COLUMNS": "80"})
    lines = listed.output.splitlines()
    assert listed.exit_code == 0 and "…" not in listed.output
    assert max(map(len, lines)) <= 80
    for model, weight in shown.items():
        assert sum(f" {model} " in line and f" {weight:.2f} " in line for line in lines) == 1


def test_agreement_is_measured_again_only_when_enough_of_the_collection_changed(
    tmp_path, hash_pipeline, sentences
):
    """A size check alone kept the measurement through an upsert that replaced a quarter of
    the texts (the count did not move) and through deletes."""
    import json

    from probembed.store import Database, ingest
    from probembed.store.agreement import REMEASURE_FRACTION
    from probembed.store.readers import Record

    collection = Database(tmp_path / "db", create=True).collection("grow")
    records = [Record(f"{i:04d}", t) for i, t in enumerate(sentences[:400])]
    ingest(records[:300], collection, hash_pipeline)

    def measured_at() -> int:
        return json.loads(collection.agreement_file.read_text())["count"]

    assert measured_at() == 300
    small = int(300 * REMEASURE_FRACTION) // 2  # a write of a few: the measurement stands
    ingest(records[300 : 300 + small], collection, hash_pipeline)
    assert measured_at() == 300 and not collection.agreement_due()
    ingest(records[300 + small :], collection, hash_pipeline)  # grown by a third: measured again
    assert measured_at() == 400

    def measured_version() -> int:
        return json.loads(collection.agreement_file.read_text())["version"]

    before = measured_version()
    replaced = [Record(f"{i:04d}", t) for i, t in enumerate(sentences[1000:1100])]
    ingest(replaced, collection, hash_pipeline, upsert=True)  # same count, a quarter new
    assert measured_at() == 400 and measured_version() > before
    before = measured_version()
    collection.delete([f"{i:04d}" for i in range(small)])  # a few gone: the measurement stands
    assert not collection.agreement_due()
    collection.delete([f"{i:04d}" for i in range(small, 100)])
    assert collection.agreement_due() and measured_version() == before


def test_an_adapted_collection_searches_the_rows_retilt_gives_also_after_a_write(
    tmp_path, hash_pipeline, sentences
) -> None:
    """The searcher tilts each row once, as it enters its snapshot; rows added later alike."""
    from probembed.scoring import score_matrix
    from probembed.store import Database, ingest
    from probembed.store.readers import Record

    pipe = adapting(hash_pipeline)
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record(f"{i:04d}", t) for i, t in enumerate(sentences[:300])], collection, pipe)
    searcher = collection.searcher()
    queries = sentences[300:303]  # each one is first found as the row the write adds
    searcher.search(queries, k=5, score="dot", exact=True)  # the snapshot, before the write
    later = [Record(f"n{i}", t) for i, t in enumerate(sentences[300:310])]
    ingest(later, collection, pipe)  # 10 rows: under the 10% that remeasures, same tilt
    results = searcher.search(queries, k=5, score="dot", exact=True)
    adapted = pipe.adapted(collection.agreement())
    assert adapted is not None
    dims = [m.encoder.dim for m in pipe.members]
    stored = collection.vectors()
    docs = retilt(Fused(Gaussian(stored.mean, stored.var), stored.weights, pipe.models), dims,
                  adapted[1])  # fmt: skip
    q = retilt(pipe.encode(queries), dims, adapted[1]).gaussian
    scores = score_matrix(q, docs.gaussian, "dot")
    for row, result in enumerate(results):
        order = np.argsort(-scores[row], kind="stable")[:5]
        assert [h["id"] for h in result["hits"]] == list(stored.ids[order])
        assert result["hits"][0]["id"] == f"n{row}"
        # float64 dot products of the same float32 rows; only the summation order may differ
        np.testing.assert_allclose([h["score"] for h in result["hits"]], scores[row, order],
                                   rtol=1e-12)  # fmt: skip
        for hit, j in zip(result["hits"], order, strict=True):  # the stored float32s, shown
            assert list(hit["weights"].values()) == decimals(docs.weights[j])  # without noise


def test_a_searcher_warmed_during_ingest_takes_in_the_agreement_measured_after_it(
    tmp_path, hash_pipeline, sentences
) -> None:
    """Agreement is kept after an ingest's last commit, without a new version: a searcher that
    searched during the ingest (as a service may) then searches with it, as a fresh one does."""
    from probembed.store import Database, ingest
    from probembed.store.readers import Record

    pipe = adapting(hash_pipeline)
    collection = Database(tmp_path / "db", create=True).collection("c")
    records = [Record(f"d{i}", s, {}) for i, s in enumerate(sentences[:400])]
    queries = sentences[400:405]

    def search_now(_: int) -> None:
        collection.searcher().search(queries, k=5, score="dot", exact=True)

    ingest(records, collection, pipe, batch_size=100, on_commit=search_now)
    warm = collection.searcher().search(queries, k=5, score="dot", exact=True)
    other = Database(tmp_path / "db").collection("c")
    fresh = other.searcher().search(queries, k=5, score="dot", exact=True)
    assert collection.stats().adapted_weights is not None
    for a, b in zip(warm, fresh, strict=True):
        assert [h["weights"] for h in a["hits"]] == [h["weights"] for h in b["hits"]]
        assert [h["score"] for h in a["hits"]] == [h["score"] for h in b["hits"]]


def test_a_searcher_in_another_process_takes_in_agreement_kept_without_a_new_version(
    tmp_path, hash_pipeline, sentences, monkeypatch
) -> None:
    """A reader's searcher (a service) that searched during another handle's ingest (a CLI
    in another process, which keeps agreement after its last commit at the same version)
    reads the agreement again once AGREEMENT_RECHECK_S has passed: here at once."""
    import probembed.store.search as search
    from probembed.store import Database, ingest
    from probembed.store.readers import Record

    pipe = adapting(hash_pipeline)
    writer = Database(tmp_path / "db", create=True).collection("c")
    records = [Record(f"d{i}", s, {}) for i, s in enumerate(sentences[:400])]
    queries = sentences[400:405]
    ingest(records[:100], writer, pipe)  # the collection exists for the reader to open
    reader = Database(tmp_path / "db").collection("c")
    warm = reader.searcher()

    def search_now(_: int) -> None:
        warm.search(queries, k=5, score="dot", exact=True)

    ingest(records[100:], writer, pipe, batch_size=100, on_commit=search_now)
    monkeypatch.setattr(search, "AGREEMENT_RECHECK_S", 0.0)
    later = warm.search(queries, k=5, score="dot", exact=True)
    fresh = Database(tmp_path / "db").collection("c").searcher()
    expected = fresh.search(queries, k=5, score="dot", exact=True)
    for a, b in zip(later, expected, strict=True):
        assert [h["weights"] for h in a["hits"]] == [h["weights"] for h in b["hits"]]
        assert [h["score"] for h in a["hits"]] == [h["score"] for h in b["hits"]]


def test_a_rerun_after_a_run_killed_before_measuring_measures_the_agreement(
    tmp_path, hash_pipeline, sentences, monkeypatch
) -> None:
    """Killed after its last commit, while measuring: the re-run found every id stored, wrote
    nothing, and so never measured; the collection searched with the unadapted prior."""
    from probembed.store import Database, ingest
    from probembed.store.collection import Collection
    from probembed.store.readers import Record

    pipe = adapting(hash_pipeline)
    records = [Record(f"d{i}", s, {}) for i, s in enumerate(sentences[:300])]
    clean = Database(tmp_path / "clean", create=True).collection("c")
    ingest(records, clean, pipe, batch_size=100)

    def killed(self, pipeline):
        raise KeyboardInterrupt("killed while measuring agreement")

    with monkeypatch.context() as patched:
        patched.setattr(Collection, "record_agreement", killed)
        with pytest.raises(KeyboardInterrupt):
            rerun = Database(tmp_path / "rerun", create=True).collection("c")
            ingest(records, rerun, pipe, batch_size=100)  # clean's batches: the same rows
    rerun = Database(tmp_path / "rerun").collection("c")
    assert rerun.agreement() is None
    report = ingest(records, rerun, pipe, batch_size=100)
    assert (report.added, report.already_stored) == (0, 300)
    # the same rows in the same order of ids: the same float64 measurement, bit for bit
    np.testing.assert_array_equal(rerun.agreement(), clean.agreement())


def test_an_agreement_file_an_earlier_collection_of_the_name_left_is_not_this_ones(
    tmp_path, hash_pipeline, sentences, toy_pairs
):
    """A drop killed between the table and its files (or a table deleted by hand) left the
    old agreement.json: another pipeline's made every ingest and search of the new collection
    fail for good; the same pipeline's was taken as measured on the new rows."""
    import json

    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline
    from probembed.store import Database, ingest
    from probembed.store.readers import Record

    records = [Record(f"{i:04d}", t) for i, t in enumerate(sentences[:150])]
    specs = [ModelSpec("hash", "laplace", encoder_params={"dim": d}) for d in (64, 48)]
    other = Pipeline.fit(specs, toy_pairs, FusionConfig("uec"), name="other", cache=False)
    for second, count in ((other, 150), (hash_pipeline, 145)):  # 145: within the 10% remeasure
        db = Database(tmp_path / f"db-{second.name}", create=True)
        ingest(records, db.collection("c"), hash_pipeline)
        db._conn.drop_table("c")  # what a drop killed before removing the files leaves
        fresh = Database(tmp_path / f"db-{second.name}").collection("c")
        ingest(records[:count], fresh, second)
        kept = json.loads(fresh.agreement_file.read_text())
        assert (kept["created"], kept["count"]) == (fresh.created, count)  # measured anew
        assert len(fresh.search(sentences[0], k=3)["hits"]) == 3


@pytest.mark.parametrize("content", [b"{", b"[1, 2]", b"\xff\xfe"])
def test_a_broken_agreement_file_is_measured_again_not_an_error_for_good(
    tmp_path, hash_pipeline, sentences, content
):
    """A truncated agreement.json made every search, write and stats of the collection fail
    (the service answered them all 422, a write after committing its rows)."""
    import json

    from probembed.store import Database, ingest
    from probembed.store.readers import Record

    collection = Database(tmp_path / "db", create=True).collection("c")
    records = [Record(f"{i:04d}", t) for i, t in enumerate(sentences[:60])]
    ingest(records[:50], collection, hash_pipeline)
    collection.agreement_file.write_bytes(content)
    with pytest.warns(UserWarning, match="not an agreement record"):
        assert len(collection.search(sentences[0], k=3)["hits"]) == 3
        collection.stats()
        ingest(records[50:], collection, hash_pipeline)  # measures it again
    assert json.loads(collection.agreement_file.read_text())["count"] == 60
