"""Calibrated relevance: the model's maths, its JSON, p_relevant and min_p_relevant in search."""

import itertools
import json
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from probembed.calibration import (
    BASE_FEATURES,
    BM25_HIT_FEATURES,
    CALIBRATION_FILE,
    QueryConfidence,
    RelevanceCalibrator,
    bm25_hit_features,
    hit_features,
    query_features,
)
from probembed.calibration.calibrator import HOLDOUT, MIN_ISOTONIC_HOLDOUT
from probembed.calibration.confidence import (
    CONFIDENCE_DEPTH,
    COVERAGE_HITS,
    LEXICAL_DEPTH,
    coverage_features,
    lexical_features,
)
from probembed.calibration.features import BM25_RANK_CAP
from probembed.calibration.logistic import Logistic
from probembed.calibration.training import RankedSplit, hybrid_split, rank_split
from probembed.evaluation import expected_calibration_error
from probembed.evaluation.datasets import RetrievalDataset
from probembed.evaluation.harness import corpus_agreement, embed
from probembed.gaussian import Gaussian
from probembed.interfaces.store_commands import register
from probembed.pipeline import AdaptConfig, FusionConfig, Pipeline
from probembed.scoring.ensemble import hit_variance, member_cosines
from probembed.store import Database, Searcher, ingest
from probembed.store.index import IndexSettings
from probembed.store.ranking import HYBRID_DEPTH, Ranked, scan
from probembed.store.readers import Record
from probembed.store.search import CONTEXT_DEPTH

SEED = 0
DOCS = 300


@pytest.fixture(scope="module")
def ranked(hash_pipeline, sentences):
    """Real ranked hits of the hash pipeline: 60 queries over 300 documents, 11 deep."""
    docs = hash_pipeline.encode(sentences[:DOCS])
    queries = hash_pipeline.encode(sentences[DOCS : DOCS + 60])
    rows = np.arange(DOCS)
    kind, beta = hash_pipeline.score.name, hash_pipeline.score.beta
    return queries, docs, scan(queries.gaussian, docs.gaussian, rows, CONFIDENCE_DEPTH, kind, beta)


def synthetic_labels(features: np.ndarray, seed: int = SEED) -> np.ndarray:
    """Labels drawn from a known logistic law of the dot and the rank: a learnable target."""
    z = 8.0 * (features[:, 0] - np.median(features[:, 0])) - 1.5 * features[:, 2]
    return np.random.default_rng(seed).random(len(z)) < 1.0 / (1.0 + np.exp(-z))


@pytest.fixture(scope="module")
def training(ranked):
    """(X, y, groups) of the real ranked hits with synthetic relevance labels."""
    rows = [hit_features(r.dots, r.variances, 10) for r in ranked[2]]
    x = np.concatenate(rows)
    groups = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
    return x, synthetic_labels(x), groups


@pytest.fixture(scope="module")
def confidence_model(ranked, hash_pipeline):
    """A query confidence fitted on the real ranked lists with synthetic failure flags."""
    queries, docs, hits = ranked
    dims = [m.encoder.dim for m in hash_pipeline.members]
    features = np.stack(
        [
            query_features(
                r.dots,
                member_cosines(
                    queries.gaussian.mean[i : i + 1],
                    queries.weights[i : i + 1],
                    docs.gaussian.mean,
                    docs.weights,
                    dims,
                    r.positions[None, :],
                )[0],
            )
            for i, r in enumerate(hits)
        ]
    )
    failed = features[:, 0] < np.median(features[:, 0])  # a narrow dot margin "fails"
    # lexical features as a hybrid search reads them: a 0/1 flag and a margin in [0, 1)
    rng = np.random.default_rng(SEED)
    lexical = np.stack([rng.random(len(failed)) < 0.5, rng.random(len(failed))], axis=1)
    # coverage features as a search reads them: shares of the query's words in [0, 1]
    coverage = rng.random((len(failed), 2))
    model = QueryConfidence.fit(features, failed, len(dims), SEED)
    hybrid = np.concatenate([lexical.astype(np.float64), coverage], axis=1)
    model = model.with_model("hybrid_model", features, hybrid, failed ^ (lexical[:, 1] < 0.2), SEED)
    return model.with_model("text_model", features, coverage, failed ^ (coverage[:, 0] < 0.2), SEED)


@pytest.fixture(scope="module")
def calibrator(training, confidence_model):
    """A calibrator fitted on the synthetic labels, carrying the query confidence."""
    fitted = RelevanceCalibrator.fit(*training, seed=SEED)
    return RelevanceCalibrator(fitted.features, fitted.logistic, fitted.isotonic, confidence_model)


@pytest.fixture(scope="module")
def isotonic(training):
    """The same data with the isotonic step forced on."""
    return RelevanceCalibrator.fit(*training, seed=SEED, isotonic=True)


@pytest.fixture(scope="module")
def collections(tmp_path_factory, hash_pipeline, calibrator, sentences):
    """The 300 documents in two LanceDB collections: with and without a calibrator."""
    db = Database(tmp_path_factory.mktemp("calibration") / "db", create=True)
    records = [Record(f"s{i}", t, {}) for i, t in enumerate(sentences[:DOCS])]
    calibrated = Pipeline(
        hash_pipeline.members,
        hash_pipeline.fusion,
        hash_pipeline.score,
        "hash-calibrated",
        cache=False,
        calibrator=calibrator,
    )
    ingest(records, db.collection("calibrated"), calibrated, batch_size=150)
    ingest(records, db.collection("plain"), hash_pipeline, batch_size=150)
    return db.open("calibrated"), db.open("plain")


def test_fit_recovers_the_direction_of_the_synthetic_law(calibrator):
    coef = dict(zip(BASE_FEATURES, calibrator.logistic.coef, strict=True))
    assert coef["dot"] > 0 and coef["log_rank"] < 0


@settings(max_examples=60, deadline=None)
@given(
    row=st.integers(0, 599),
    steps=st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=2, max_size=8),
)
def test_p_relevant_is_monotone_in_the_dot_as_its_coefficient_says(
    calibrator, isotonic, training, row, steps
):
    x = np.repeat(training[0][row : row + 1], len(steps), axis=0)
    x[:, 0] += np.sort(steps)
    for model in (calibrator, isotonic):
        sign = np.sign(model.logistic.coef[0])
        change = np.diff(model.predict(x))
        assert (sign * change >= 0).all()  # isotonic knots are non-decreasing: order is kept


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=6, max_size=6),
        min_size=1,
        max_size=20,
    )
)
def test_p_relevant_is_a_probability_for_any_features(calibrator, isotonic, rows):
    for model in (calibrator, isotonic):
        p = model.predict(np.array(rows))
        assert ((p >= 0) & (p <= 1)).all()


def threshold_hits(queries: int, seed: int = SEED) -> tuple[np.ndarray, ...]:
    """(X, y, groups) of 10 synthetic ranked hits per query, relevant by a step in the dot
    (0.9 above 0.6, else 0.05): an isotonic map follows the step, a logistic cannot."""
    rng = np.random.default_rng(seed)
    dots = np.sort(rng.normal(0.5, 0.15, (queries, 10)), axis=1)[:, ::-1]
    variances = rng.uniform(1e-3, 3e-3, (queries, 10))
    x = np.concatenate([hit_features(d, v, 10) for d, v in zip(dots, variances, strict=True)])
    y = rng.random(len(x)) < np.where(x[:, 0] > 0.6, 0.9, 0.05)
    return x, y.astype(int), np.repeat(np.arange(queries), 10)


def test_the_isotonic_step_is_kept_only_when_enough_held_out_queries_show_it_helps():
    """On 200 queries (40 held out) the step that lowers the held-out ECE is kept."""
    fitted = RelevanceCalibrator.fit(*threshold_hits(200), seed=SEED)
    held = fitted.fit_info["holdout_ece"]
    assert fitted.fit_info["holdout_queries"] == 40 >= MIN_ISOTONIC_HOLDOUT
    assert held["logistic+isotonic"] < held["logistic"]
    assert fitted.isotonic is not None and fitted.fit_info["isotonic"]
    assert fitted.fit_info["isotonic_why"] == "it lowers the held-out calibration error"


def test_the_isotonic_step_is_left_out_on_too_few_held_out_queries():
    """30 queries hold out 6: their held-out ECE favours the step (0.148 against 0.100), but
    a step judged on 60 hits was kept and mapped the surest hits to exactly 1.0 (a review saw
    62.5% of such hits relevant)."""
    fitted = RelevanceCalibrator.fit(*threshold_hits(30), seed=SEED)
    held = fitted.fit_info["holdout_ece"]
    assert held["logistic+isotonic"] < held["logistic"]  # what decided it before
    assert fitted.isotonic is None and fitted.fit_info["isotonic"] is False
    why = fitted.fit_info["isotonic_why"]
    assert why == f"6 held-out queries; judging it needs {MIN_ISOTONIC_HOLDOUT}"
    forced = RelevanceCalibrator.fit(*threshold_hits(30), seed=SEED, isotonic=True)
    assert forced.isotonic is not None  # forcing still works


def test_a_hold_out_holding_every_relevant_hit_fits_without_the_isotonic_step(training):
    """Where the queries outside the hold-out hold one class only, there is nothing to judge
    the isotonic step on: the logistic alone is fitted on every hit (forcing still works)."""
    x, _, groups = training
    queries = np.unique(groups)
    count = max(1, round(HOLDOUT * len(queries)))
    held = np.random.default_rng(SEED).permutation(queries)[:count]  # as `fit` draws them
    y = np.isin(groups, held[:1]) & (np.arange(len(groups)) % 2 == 0)
    fitted = RelevanceCalibrator.fit(x, y.astype(int), groups, seed=SEED)
    assert fitted.fit_info["holdout_ece"] is None and fitted.isotonic is None
    assert fitted.fit_info["relevant"] == int(y.sum())
    forced = RelevanceCalibrator.fit(x, y.astype(int), groups, seed=SEED, isotonic=True)
    assert forced.isotonic is not None


@pytest.mark.parametrize("isotonic", [None, False, True])
def test_features_of_one_value_fit_the_base_rate_without_an_isotonic_map(training, isotonic):
    """Every hit alike (one feature row): the logistic's output is one value and an isotonic
    map of one point cannot be kept; the fit failed on it even with the step turned off."""
    x, y, groups = training
    same = np.tile(x[0], (len(x), 1))
    fitted = RelevanceCalibrator.fit(same, y, groups, seed=SEED, isotonic=isotonic)
    assert fitted.isotonic is None and fitted.fit_info["isotonic"] is False
    p = fitted.predict(same[:3])
    assert np.all(p == p[0]) and abs(p[0] - y.mean()) < 0.01  # the base rate; L2 pulls a little


def test_fitting_is_deterministic(training):
    assert RelevanceCalibrator.fit(*training, seed=SEED) == RelevanceCalibrator.fit(
        *training, seed=SEED
    )


def nudged(model: Logistic) -> Logistic:
    """The model with its first coefficient one float64 step up: it computes something else."""
    coef = model.coef.copy()
    coef[0] = np.nextafter(coef[0], np.inf)
    return replace(model, coef=coef)


def test_calibrators_are_equal_when_they_compute_the_same_whatever_their_fit_records(
    calibrator,
):
    """Two tunings alike but for the pipeline name in their fit records were told apart, so a
    collection refused the second ("relevance calibrator one -> another"): equality reads what
    a calibrator computes, and a one-ulp change of any model in it still counts."""
    width = len(BASE_FEATURES) + len(BM25_HIT_FEATURES)
    ones = np.ones(width)
    hybrid = RelevanceCalibrator(
        (*BASE_FEATURES, *BM25_HIT_FEATURES),
        Logistic(np.zeros(width), ones, ones, 0.0),
        fit_info={"pipeline": "tuned-limit"},
    )
    first = replace(calibrator, fit_info={"pipeline": "tuned-limit"}, hybrid=hybrid)
    assert first.confidence is not None and first.confidence.text_model is not None
    relabelled = replace(
        first,
        fit_info={"pipeline": "tuned-limit2"},
        confidence=replace(first.confidence, fit_info={"queries": 1}),
        hybrid=replace(hybrid, fit_info={"pipeline": "tuned-limit2"}),
    )
    assert first.to_json() != relabelled.to_json() and first == relabelled
    changed = (
        replace(first, logistic=nudged(first.logistic)),
        replace(
            first, confidence=replace(first.confidence, logistic=nudged(first.confidence.logistic))
        ),
        replace(
            first,
            confidence=replace(first.confidence, text_model=nudged(first.confidence.text_model)),
        ),
        replace(first, hybrid=replace(hybrid, logistic=nudged(hybrid.logistic))),
        replace(first, hybrid=None),
        replace(first, confidence=None),
    )
    assert all(first != other for other in changed)


@pytest.mark.parametrize("which", ["calibrator", "isotonic"])
def test_save_load_round_trip(tmp_path, training, which, request):
    model = request.getfixturevalue(which)
    loaded = RelevanceCalibrator.load(model.save(tmp_path / CALIBRATION_FILE))
    assert loaded == model and loaded.to_json() == model.to_json()  # its fit records too
    np.testing.assert_array_equal(loaded.predict(training[0]), model.predict(training[0]))
    assert (loaded.confidence is None) == (model.confidence is None)


def test_a_pipeline_saves_and_loads_its_calibrator(tmp_path, hash_pipeline, calibrator):
    pipe = Pipeline(
        hash_pipeline.members,
        hash_pipeline.fusion,
        hash_pipeline.score,
        "c",
        cache=False,
        calibrator=calibrator,
    )
    loaded = Pipeline.load(pipe.save(tmp_path / "pipe"), cache=False)
    assert loaded.calibrator == calibrator
    assert loaded.fingerprint == hash_pipeline.fingerprint  # the calibrator changes no vector
    plain = Pipeline.load(hash_pipeline.save(tmp_path / "plain"), cache=False)
    assert plain.calibrator is None


def test_a_calibrator_loads_and_predicts_without_scikit_learn(tmp_path, calibrator, training):
    path = calibrator.save(tmp_path / CALIBRATION_FILE)
    np.save(tmp_path / "x.npy", training[0])
    code = (
        "import sys; sys.modules['sklearn'] = None\n"  # any sklearn import now fails
        "import numpy as np\n"
        "from probembed.calibration import RelevanceCalibrator\n"
        f"c = RelevanceCalibrator.load({str(path)!r})\n"
        f"np.save({str(tmp_path / 'p.npy')!r}, c.predict(np.load({str(tmp_path / 'x.npy')!r})))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), calibrator.predict(training[0]))


def corrupt(data: dict, change: str) -> dict:
    """The calibrator's JSON with one thing broken."""
    data = json.loads(json.dumps(data))
    if change == "format":
        data["format"] = 99
    elif change == "missing":
        del data["model"]
    elif change == "unknown":
        data["extra"] = 1
    elif change == "features":
        data["features"] = ["dot", "std"]
    elif change == "coef":
        data["model"]["coef"] = data["model"]["coef"][:3]
    elif change == "scale":
        data["model"]["scale"][0] = 0.0
    elif change == "isotonic":
        data["isotonic"] = {"x": [0.0, 0.5, 1.0], "y": [0.2, 0.1, 0.9]}
    elif change == "confidence":
        data["query_confidence"]["members"] = 5
    return data


@pytest.mark.parametrize(
    "change",
    ["format", "missing", "unknown", "features", "coef", "scale", "isotonic", "confidence"],
)
def test_a_malformed_calibration_file_is_refused_naming_it(tmp_path, calibrator, change):
    path = tmp_path / CALIBRATION_FILE
    path.write_text(json.dumps(corrupt(calibrator.to_json(), change)))
    with pytest.raises(ValueError, match=CALIBRATION_FILE):
        RelevanceCalibrator.load(path)


def test_a_pipeline_with_a_broken_calibration_file_names_it(tmp_path, hash_pipeline):
    directory = hash_pipeline.save(tmp_path / "pipe")
    for broken in (b"{not json", b"\xff\xfe{}"):  # not JSON; not UTF-8
        (directory / CALIBRATION_FILE).write_bytes(broken)
        with pytest.raises(ValueError, match=r"calibration\.json is not valid JSON"):
            Pipeline.load(directory, cache=False)


def test_fit_refuses_labels_of_one_class(training):
    x, y, groups = training
    with pytest.raises(ValueError, match="both relevant and irrelevant"):
        RelevanceCalibrator.fit(x, np.zeros_like(y), groups)


def test_hits_carry_p_relevant_and_min_p_relevant_drops_the_rest(collections, calibrator):
    calibrated, _ = collections
    queries = ["A man is playing a guitar.", "The cat sat on the mat.", "A woman is cooking."]
    every = calibrated.search(queries, k=10)
    threshold = float(np.median([h["p_relevant"] for r in every for h in r["hits"]]))
    kept = calibrated.search(queries, k=10, min_p_relevant=threshold)
    for full, filtered in zip(every, kept, strict=True):
        p = [h["p_relevant"] for h in full["hits"]]
        assert all(0.0 <= v <= 1.0 for v in p)
        expected = [h["id"] for h in full["hits"] if h["p_relevant"] >= threshold]
        assert [h["id"] for h in filtered["hits"]] == expected
        assert filtered["confidence"] == full["confidence"]  # the ranking, not the filter
    dropped = sum(len(f["hits"]) - len(k["hits"]) for f, k in zip(every, kept, strict=True))
    assert dropped > 0  # the median threshold really removed something


def test_p_relevant_never_rises_down_a_list_and_more_hits_change_none_shown(collections):
    """A threshold keeps a prefix of the ranked list, and k=3 shows what k=10 shows first."""
    calibrated, _ = collections
    queries = [f"{s} {w}" for s in ("A man is playing", "The cat sat", "A woman is") for w in
               ("a guitar.", "on the mat.", "cooking.", "outside.")]  # fmt: skip
    every, first = calibrated.search(queries, k=10), calibrated.search(queries, k=3)
    for full, few in zip(every, first, strict=True):
        p = [h["p_relevant"] for h in full["hits"]]
        assert all(a >= b for a, b in itertools.pairwise(p))
        assert [h["p_relevant"] for h in few["hits"]] == p[:3]
        for threshold in p:
            kept = [h["p_relevant"] >= threshold for h in full["hits"]]
            assert kept == sorted(kept, reverse=True)  # a prefix: True..., then False...


def test_a_filter_leaves_each_hit_the_p_relevant_it_has_without_one(collections):
    """Read along the filtered list, a hit's rank and gaps were counted among the rows kept:
    a filter to a few middling rows made the first of them look like a search's best (a
    chunk filtered to its own document went from 0.10 to 0.82). Each hit now reads its p
    in the same search without the filter (equal to 1e-9: the same features, batched
    otherwise). Hits ranked past that search's CONTEXT_DEPTH read their own value there, at
    most its last one's: they all read the last one's, and a filter to another tenant's rows
    gave its best and its worst hit the same p."""
    calibrated, _ = collections
    for query in ("A man is playing a guitar.", "The cat sat on the mat.", "A woman is cooking."):
        every = calibrated.search(query, k=CONTEXT_DEPTH, exact=True)["hits"]
        p_of = {h["id"]: h["p_relevant"] for h in every}
        middling = [h["id"] for h in every[4:40:5]]
        where = "id IN (" + ", ".join(f"'{i}'" for i in middling) + ")"
        kept = calibrated.search(query, k=5, exact=True, where=where)["hits"]
        assert [h["id"] for h in kept] == middling[:5]
        for hit in kept:
            assert hit["p_relevant"] == pytest.approx(p_of[hit["id"]], rel=1e-9, abs=1e-12)
        last = every[-1]["p_relevant"]
        deep = calibrated.search(
            query, k=3, exact=True, where=f"id = '{_unreached(calibrated, every)}'"
        )
        assert deep["hits"][0]["p_relevant"] <= last


def test_a_filter_to_rows_past_the_unfiltered_context_keeps_them_apart(
    collections, tmp_path, sentences
):
    """A tenant's rows ranked below another tenant's 40 near-copies of the answer all read
    the last value of the unfiltered ranking: its answer and an unrelated row got the same
    p_relevant. Each now reads its own value past that ranking, at most its last one's."""
    calibrated, _ = collections
    pipeline = calibrated.load_pipeline()
    shared = Database(tmp_path / "db", create=True).collection("tenants")
    query = "A man is playing a guitar."
    records = [Record(f"a{i}", query, {"tenant": "acme"}) for i in range(40)]
    records += [
        Record("answer", "A man plays the guitar.", {"tenant": "globex"}),
        Record("other", sentences[DOCS - 1], {"tenant": "globex"}),
    ]
    ingest(
        records + [Record(f"s{i}", t, {}) for i, t in enumerate(sentences[:100])], shared, pipeline
    )
    every = shared.search(query, k=CONTEXT_DEPTH, exact=True)["hits"]
    assert {h["metadata"].get("tenant") for h in every} == {"acme"}
    last = every[-1]["p_relevant"]
    hits = shared.search(query, k=2, exact=True, where="tenant = 'globex'")["hits"]
    assert [h["id"] for h in hits] == ["answer", "other"]
    assert last >= hits[0]["p_relevant"] > hits[1]["p_relevant"]


def test_a_grouped_hit_filtered_to_another_chunk_reads_its_documents_p_relevant(
    collections, tmp_path, sentences
):
    """Grouped, a hit stands for its document: filtered to chunks that are not its best, it
    was looked up by row in an unfiltered grouped list that shows only best chunks, and got
    the list's last value (below documents it outranks)."""
    calibrated, _ = collections
    pipeline = calibrated.load_pipeline()
    chunks = Database(tmp_path / "db", create=True).collection("chunks")
    records = [
        Record(f"d{i // 3}#{i % 3}", t, {"doc_id": f"d{i // 3}", "part": i % 3})
        for i, t in enumerate(sentences[:DOCS])
    ]
    ingest(records, chunks, pipeline, batch_size=150)
    for query in ("A man is playing a guitar.", "The cat sat on the mat."):
        every = chunks.search(query, k=CONTEXT_DEPTH, exact=True, group_by_doc=True)["hits"]
        p_of = {h["metadata"]["doc_id"]: h["p_relevant"] for h in every}
        kept = chunks.search(query, k=5, exact=True, group_by_doc=True, where="part = 2")
        for hit in kept["hits"]:
            document = hit["metadata"]["doc_id"]
            if document in p_of:
                assert hit["p_relevant"] == pytest.approx(p_of[document], rel=1e-9, abs=1e-12)


def _unreached(collection, ranked) -> str:
    """An id of the collection that a search's ranked hits do not hold."""
    shown = {h["id"] for h in ranked}
    return next(f"s{i}" for i in range(collection.count()) if f"s{i}" not in shown)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=2, max_size=12), st.integers(1, 12))
def test_predict_ranked_is_the_running_minimum_of_the_hits_own_predictions(calibrator, dots, k):
    """Each hit's p is its own prediction capped by the ones above it: never more; a hit that
    ties the one above (same dot and variance) takes its p."""
    dots = np.sort(np.asarray(dots))[::-1]
    variances = np.full_like(dots, 0.01)
    own = calibrator.predict(hit_features(dots, variances, k))
    for i in range(1, len(own)):
        own[i] = own[i - 1] if dots[i] == dots[i - 1] else own[i]
    ranked = calibrator.predict_ranked(dots, variances, k)
    np.testing.assert_array_equal(ranked, np.minimum.accumulate(own))


def test_a_lone_hit_has_no_margin_rather_than_a_certain_one(calibrator):
    """A filter that keeps one row: its margin over a rival was 1.0 (certain), a value
    training never saw beside a gap of 0; it is unknown now, read as the training mean."""
    features = hit_features(np.array([0.55]), np.array([0.01]), 1)
    margin = list(BASE_FEATURES).index("query_margin")
    assert np.isnan(features[0, margin])
    average = features.copy()
    average[0, margin] = calibrator.logistic.mean[margin]
    assert calibrator.predict_ranked(np.array([0.55]), np.array([0.01]), 1)[0] == pytest.approx(
        calibrator.predict(average)[0], rel=1e-12
    )


def test_duplicate_hits_get_the_same_p_relevant(calibrator):
    """Two copies of one passage score alike: rank alone must not make the second less likely."""
    dots, variances = np.array([0.8, 0.6, 0.6, 0.6, 0.3]), np.full(5, 0.01)
    ranked = calibrator.predict_ranked(dots, variances, 5)
    assert ranked[1] == ranked[2] == ranked[3] and ranked[0] >= ranked[1] >= ranked[4]
    other = calibrator.predict_ranked(dots, np.array([0.01, 0.01, 0.02, 0.01, 0.01]), 5)
    assert other[2] <= other[1]  # a different variance is no tie


def test_search_reports_what_the_calibrator_gives_its_ranked_hits(collections, calibrator):
    calibrated, _ = collections
    pipeline = calibrated.load_pipeline()
    question = "A man is playing a guitar."
    vectors = calibrated.vectors()
    docs = Gaussian(vectors.mean, vectors.var)
    query = pipeline.encode([question])
    kind, beta = pipeline.score.name, pipeline.score.beta
    (ranked,) = scan(query.gaussian, docs, np.arange(len(docs)), CONFIDENCE_DEPTH, kind, beta)
    dims = [m.encoder.dim for m in pipeline.members]
    cosines = member_cosines(
        query.gaussian.mean,
        query.weights,
        vectors.mean,
        vectors.weights,
        dims,
        ranked.positions[None, :],
    )[0]
    variances = hit_variance(  # what every hit's std reports
        ranked.variances[None, :],
        query.gaussian.mean,
        query.weights,
        vectors.mean,
        vectors.weights,
        dims,
        ranked.positions[None, :],
    )[0]
    texts = calibrated.rows(ids := [f"s{p}" for p in ranked.positions[:COVERAGE_HITS]])
    coverage = coverage_features(question, [texts[i]["text"] for i in ids])
    for k in (5, 10):
        result = calibrated.search(question, k=k)
        expected = calibrator.predict_ranked(ranked.dots, variances, k)
        # the same rows and float64 maths as the search's own scan; only the order of
        # float64 sums may differ (~1e-16 relative)
        np.testing.assert_allclose([h["p_relevant"] for h in result["hits"]], expected, rtol=1e-12)
        assert result["confidence"] == pytest.approx(
            calibrator.confidence.predict(ranked.dots, cosines, coverage=coverage), rel=1e-12
        )
    # searching by vector alone, no query text: the dense features only
    alone = calibrated.searcher().search_fused(query, k=10)[0]
    assert alone["confidence"] == pytest.approx(
        calibrator.confidence.predict(ranked.dots, cosines), rel=1e-12
    )


def test_training_ranks_as_a_search_of_a_collection_that_adapts(
    tmp_path, hash3_pipeline, sentences
):
    """A pipeline whose collections tilt their weights by the members' agreement: training
    fused without the tilt, so the shipped calibrator was fitted on rankings, dots and
    margins no search of the corpus gives."""
    adapting = Pipeline(
        hash3_pipeline.members,
        hash3_pipeline.fusion,
        hash3_pipeline.score,
        "hash-adapting",
        cache=False,
        adapt=AdaptConfig(gamma=20.0),
    )  # fmt: skip
    texts = {f"s{i}": t for i, t in enumerate(sentences[:DOCS])}
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record(i, t, {}) for i, t in texts.items()], collection, adapting)
    tilted = list(collection.stats().adapted_weights.values())
    assert max(abs(w - 1 / 3) for w in tilted) > 0.05  # a tilt large enough to move rankings
    questions = [sentences[DOCS + i] for i in range(0, 40, 2)]
    queries = {f"q{i}": q for i, q in enumerate(questions)}
    dataset = RetrievalDataset("sentences", "test", texts, queries, {q: {"s0": 1} for q in queries})
    split = rank_split(adapting, dataset)
    # the same float32 rows through the same products on either side: equal bit for bit (one
    # tied neighbour flipped when training read float64 weights, and so did the tilt)
    measured = corpus_agreement(adapting, embed(adapting, dataset))
    np.testing.assert_array_equal(measured, collection.agreement())
    results = collection.search(questions, k=10, exact=True)
    for result, r in zip(results, split.ranked, strict=True):
        assert [h["id"] for h in result["hits"]] == [split.doc_ids[p] for p in r.positions[:10]]


def test_a_hybrid_search_reports_the_confidence_training_computes(
    collections, calibrator, sentences
):
    calibrated, _ = collections
    pipeline = calibrated.load_pipeline()
    texts = {f"s{i}": t for i, t in enumerate(sentences[:DOCS])}  # in ingest order
    questions = ["A man is playing a guitar.", "The cat sat on the mat.", "Stocks fell sharply."]
    queries = {f"q{i}": q for i, q in enumerate(questions)}
    dataset = RetrievalDataset("sentences", "test", texts, queries, {q: {"s0": 1} for q in queries})
    split, lexical = hybrid_split(pipeline, dataset, calibrated.text_search)
    dots = np.stack([r.dots for r in split.ranked])
    coverage = split.coverage_table(dataset)
    expected = calibrator.confidence.predict(dots, split.cosines, lexical, coverage)
    dense_only = calibrator.confidence.predict(dots, split.cosines)
    results = calibrated.search(questions, k=10, hybrid=True)
    for result, r, want in zip(results, split.ranked, expected, strict=True):
        assert [h["id"] for h in result["hits"]] == [split.doc_ids[p] for p in r.positions[:10]]
        # the same rows and BM25 lists; training reads the fusion weights as fused (float64),
        # the search as stored (float32, 6e-8 relative rounding), which moves a member cosine
        # by ~1e-7 relative: measured 2e-7 on the confidence; 1e-5 leaves 50x margin
        assert result["confidence"] == pytest.approx(want, rel=1e-5)
    assert not np.allclose(expected, dense_only)  # the hybrid model is the one used


def test_a_hybrid_hit_is_read_where_the_fused_ranking_puts_it(collections):
    """p_relevant reads a hit's rank and gaps along the list it is shown in: for a hybrid
    search the fused one, so BM25's evidence moves it (measured on SciFact test: reading it
    from the dense ranking instead raised the Brier score from 0.052 to 0.056), and it never
    rises down the list a threshold cuts."""
    calibrated, _ = collections
    questions = ["A man is playing a guitar.", "The cat sat on the mat.", "Stocks fell sharply."]
    dense = calibrated.search(questions, k=60, exact=True)
    hybrid = calibrated.search(questions, k=10, hybrid=True, exact=True)
    differs = 0
    for d, h in zip(dense, hybrid, strict=True):
        shown = [hit["p_relevant"] for hit in h["hits"]]
        assert shown == sorted(shown, reverse=True)
        of = {hit["id"]: hit["p_relevant"] for hit in d["hits"]}
        differs += sum(hit["p_relevant"] != of.get(hit["id"]) for hit in h["hits"])
    assert differs  # not the dense values: the fused ranking's own


@pytest.fixture(scope="module")
def hybrid_calibrated(tmp_path_factory, collections, calibrator, sentences):
    """A collection whose calibrator carries a hybrid one, fitted on hybrid rankings of the
    300 documents for 60 queries (synthetic labels that favour a high dot and a high BM25
    rank); with the training split and its questions."""
    calibrated, _ = collections
    pipeline = calibrated.load_pipeline()
    texts = {f"s{i}": t for i, t in enumerate(sentences[:DOCS])}  # in ingest order
    questions = sentences[DOCS : DOCS + 60]
    queries = {f"q{i}": q for i, q in enumerate(questions)}
    dataset = RetrievalDataset("sentences", "test", texts, queries, {q: {"s0": 1} for q in queries})
    split, _ = hybrid_split(pipeline, dataset, calibrated.text_search)
    x, _, groups = split.table(10, with_bm25=True)
    z = 8.0 * (x[:, 0] - np.median(x[:, 0])) - 1.5 * x[:, len(BASE_FEATURES)]
    y = np.random.default_rng(SEED).random(len(z)) < 1.0 / (1.0 + np.exp(-z))
    names = (*BASE_FEATURES, *BM25_HIT_FEATURES)
    hybrid = RelevanceCalibrator.fit(x, y, groups, names, seed=SEED)
    both = Pipeline(
        pipeline.members,
        pipeline.fusion,
        pipeline.score,
        "hash-hybrid-calibrated",
        cache=False,
        calibrator=replace(calibrator, hybrid=hybrid),
    )
    collection = Database(tmp_path_factory.mktemp("hybrid-calibrated") / "db", create=True)
    records = [Record(i, t, {}) for i, t in texts.items()]
    ingest(records, collection.collection("c"), both, batch_size=150)
    return collection.open("c"), split, questions


def test_a_hybrid_search_reads_p_relevant_from_the_hybrid_calibrator_as_training_does(
    hybrid_calibrated, collections
):
    collection, split, questions = hybrid_calibrated
    hybrid = collection.load_pipeline().calibrator.hybrid
    bm25_rank = dict(zip(hybrid.features, hybrid.logistic.coef, strict=True))["bm25_log_rank"]
    assert bm25_rank < 0  # it learned the synthetic law: a worse BM25 rank, less relevant
    results = collection.search(questions, k=10, hybrid=True)
    for result, i in zip(results, range(len(questions)), strict=True):
        r = split.ranked[i]
        assert [h["id"] for h in result["hits"]] == [split.doc_ids[p] for p in r.positions[:10]]
        want = hybrid.predict_ranked(r.dots, r.variances, 10, split.cosines[i], split.bm25_hits[i])
        # training reads the fusion weights as fused (float64), the search as stored (float32,
        # 6e-8 relative), which moves a hit's variance by ~1e-7 relative; 1e-5 is the
        # tolerance the hybrid query confidence's test measured 50x margin for
        np.testing.assert_allclose([h["p_relevant"] for h in result["hits"]], want, rtol=1e-5)
    # without a hybrid calibrator a hybrid search reads the dense one along the fused list,
    # and a dense search reads the dense one whichever the pipeline carries
    fallback = collections[0].search(questions, k=10, hybrid=True)
    assert [h["p_relevant"] for r in fallback for h in r["hits"]] != [
        h["p_relevant"] for r in results for h in r["hits"]
    ]
    dense = collection.search(questions, k=10, exact=True)
    assert dense == collections[0].search(questions, k=10, exact=True)


def test_a_hybrid_calibrator_round_trips_as_format_3_and_is_checked(tmp_path, hybrid_calibrated):
    collection, split, _ = hybrid_calibrated
    both = collection.load_pipeline().calibrator
    data = json.loads(json.dumps(both.to_json()))
    assert data["format"] == 3 and data["hybrid"]["features"][-2:] == list(BM25_HIT_FEATURES)
    loaded = RelevanceCalibrator.load(both.save(tmp_path / CALIBRATION_FILE))
    assert loaded == both and loaded.hybrid == both.hybrid
    assert "hybrid" not in replace(both, hybrid=None).to_json()  # earlier versions read it
    for older in (1, 2):  # a file that says an earlier format holds only what that one had
        with pytest.raises(ValueError, match=f"format {older} cannot hold .*hybrid calibrator"):
            RelevanceCalibrator.from_json({**data, "format": older})
    with pytest.raises(ValueError, match=r'"hybrid": calibrator features must be'):
        RelevanceCalibrator.from_json({**data, "hybrid": {**data["hybrid"], "features": []}})
    with pytest.raises(ValueError, match="reads the BM25 hit features"):
        replace(both, hybrid=replace(both, hybrid=None, confidence=None))  # a dense one
    with pytest.raises(ValueError, match="no query confidence"):
        replace(both, hybrid=replace(both.hybrid, confidence=both.confidence))
    with pytest.raises(ValueError, match="hybrid calibrator of its own"):
        replace(both, hybrid=replace(both.hybrid, hybrid=both.hybrid))
    # one reading BM25 features cannot serve dense searches: refused as a pipeline's own,
    # whether saved alone or written by hand
    with pytest.raises(ValueError, match='belongs under "hybrid"'):
        both.hybrid.save(tmp_path / "alone.json")
    assert not (tmp_path / "alone.json").exists()
    (tmp_path / "hand.json").write_text(json.dumps(both.hybrid.to_json()))
    with pytest.raises(ValueError, match=r'hand\.json: .*belongs under "hybrid"'):
        RelevanceCalibrator.load(tmp_path / "hand.json")
    pipeline = collection.load_pipeline()
    with pytest.raises(ValueError, match='belongs under "hybrid"'):
        Pipeline(pipeline.members, pipeline.fusion, cache=False, calibrator=both.hybrid)
    r = split.ranked[0]
    with pytest.raises(ValueError, match="BM25's hit features"):
        both.hybrid.predict_ranked(r.dots, r.variances, 10)
    assert both.for_search(hybrid=True) is both.hybrid and both.for_search(hybrid=False) is both


def test_hybrid_training_leaves_a_querys_own_document_out_of_both_lists(
    hash_pipeline, sentences, tmp_path
):
    """A query whose text is also a document (its own id): the dense list left it out, BM25's
    did not, so training read it as BM25's first hit and, fused, as a top hit of its own."""
    from beir_data import write_beir

    from probembed.calibration.training import corpus_text_search
    from probembed.evaluation.datasets import load_dataset

    question = "A man is playing a guitar on the stage."
    corpus = [{"_id": f"d{i}", "text": t} for i, t in enumerate(sentences[:20])]
    corpus.append({"_id": "q1", "text": question})  # the query is a document too
    query = [{"_id": "q1", "text": question}]
    folder = write_beir(tmp_path / "beir", corpus, query, [("q1", "d0", 1)])
    dataset = load_dataset(folder)
    with corpus_text_search(hash_pipeline, folder) as bm25:
        split, _ = hybrid_split(hash_pipeline, dataset, bm25)
        kept, _ = hybrid_split(hash_pipeline, replace(dataset, keep_self_matches=True), bm25)
        lexical = [(d, s) for d, s in bm25(question, HYBRID_DEPTH + 1) if d != "q1"]
    own = split.doc_ids.index("q1")
    assert kept.ranked[0].positions[0] == own  # kept, it is the first hit: the set tests it
    (ranked,) = split.ranked
    assert own not in ranked.positions
    # each hit's BM25 rank and relative score are read off BM25's list without it
    where = {d: p for p, d in enumerate(split.doc_ids)}
    positions = np.array([where[d] for d, _ in lexical[:HYBRID_DEPTH]])
    scores = np.array([s for _, s in lexical[:HYBRID_DEPTH]])
    expected = bm25_hit_features(ranked.positions, positions, scores)
    np.testing.assert_array_equal(split.bm25_hits[0, : len(ranked.positions)], expected)


def test_bm25_hit_features_read_bm25s_rank_and_relative_score():
    bm25, scores = np.array([7, 3, 9, 2, 3]), np.array([4.0, 3.0, 1.0, 0.5, 0.25])
    got = bm25_hit_features(np.array([3, 7, 5, 9, 2]), bm25, scores)
    want = [[np.log(2), 0.75], [0.0, 1.0], [np.log(BM25_RANK_CAP + 1), 0.0], [np.log(3), 0.25]]
    np.testing.assert_allclose(got, [*want, [np.log(4), 0.125]])  # 3 listed twice: its better
    deep = np.arange(BM25_RANK_CAP + 5)  # row r at rank r + 1
    cap = BM25_RANK_CAP
    edge = bm25_hit_features(np.array([cap - 1, cap]), deep, np.ones(len(deep)))
    # rank CAP is read; rank CAP + 1 is past the cap: not found, whatever BM25 scored it
    np.testing.assert_allclose(edge, [[np.log(cap), 1.0], [np.log(cap + 1), 0.0]])
    assert bm25_hit_features(np.array([1]), bm25[:0], scores[:0]).shape == (1, 2)
    zero = bm25_hit_features(np.array([7]), bm25[:1], np.array([0.0]))
    assert zero.tolist() == [[0.0, 0.0]]  # no positive best score: nothing to be relative to


def test_hit_features_put_disagreement_then_bm25_after_the_base_columns():
    rng = np.random.default_rng(SEED)
    dots, variances = np.sort(rng.random((3, 12)))[:, ::-1], rng.random((3, 12)) * 0.01
    spread, bm25 = rng.random((3, 12)), rng.random((3, 12, 2))
    features = hit_features(dots, variances, 10, spread, bm25)
    base = hit_features(dots, variances, 10)
    width = len(BASE_FEATURES)
    np.testing.assert_array_equal(features[..., :width], base)
    np.testing.assert_array_equal(features[..., width], spread[:, :10])
    np.testing.assert_array_equal(features[..., width + 1 :], bm25[:, :10, :])


def test_a_hybrid_search_answers_the_same_whatever_the_pool(hybrid_calibrated, monkeypatch):
    """The lists a hybrid search fuses are HYBRID_DEPTH deep whatever the index settings: with
    a small pool they followed it (BM25 asked for 11 hits), so the fused list, its p_relevant
    and its confidence were other than with the default settings and than training's, and a
    hit BM25 ranked past the pool read as not found."""
    collection, _, questions = hybrid_calibrated
    assert HYBRID_DEPTH >= BM25_RANK_CAP  # BM25's list reaches every rank the features read
    asked = []
    real = type(collection).text_search

    def recorded(self, text, k, where=None):
        asked.append(k)
        return real(self, text, k, where)

    monkeypatch.setattr(type(collection), "text_search", recorded)
    pipeline = collection.load_pipeline()
    small = Searcher(collection, pipeline, IndexSettings(pool=1, pool_factor=1))
    got = small.search(questions, k=10, hybrid=True, exact=True)
    assert asked == [HYBRID_DEPTH] * len(questions)
    assert got == Searcher(collection, pipeline).search(questions, k=10, hybrid=True, exact=True)


def test_coverage_weighs_the_words_only_the_first_hit_has_most():
    # n = 3 hits; "cat" is in all three: weight 1 + log(4/4) = 1; "mat" only in the first:
    # 1 + log(4/2)
    hits = ["the cat on the mat", "a cat", "cat food"]
    shares = coverage_features("Cat MAT", hits)
    mat = 1 + np.log(2.0)
    np.testing.assert_allclose(shares, [1.0, (1.0 + 1 / (1 + mat) * 2) / 3])
    assert np.isnan(coverage_features("!!", hits)).all()  # no words
    assert np.isnan(coverage_features("cat", [])).all()  # no hits
    assert coverage_features("dog", hits).tolist() == [0.0, 0.0]


def test_lexical_features_flag_agreement_and_measure_bm25s_margin():
    bm25 = np.array([7, 3, 9])
    assert lexical_features(3, bm25, np.array([4.0, 3.0, 1.0])).tolist() == [1.0, 0.25]
    assert lexical_features(5, bm25, np.array([4.0, 4.0, 1.0])).tolist() == [0.0, 0.0]
    assert lexical_features(None, bm25[:1], np.array([2.0])).tolist() == [0.0, 0.0]
    assert lexical_features(7, bm25[:0], np.array([])).tolist() == [0.0, 0.0]
    beyond = np.arange(LEXICAL_DEPTH + 1)
    assert lexical_features(LEXICAL_DEPTH, beyond, np.ones(len(beyond)))[0] == 0.0


def test_a_lexical_confidence_round_trips_and_refuses_unknown_features(confidence_model):
    data = json.loads(json.dumps(confidence_model.to_json()))
    loaded = QueryConfidence.from_json(data, "q")
    rng = np.random.default_rng(1)
    dots, cosines = rng.random((4, CONFIDENCE_DEPTH)), rng.random((4, CONFIDENCE_DEPTH, 2))
    lexical, coverage = rng.random((4, 2)), rng.random((4, 2))
    cases = ((None, None), (lexical, None), (None, coverage), (lexical, coverage))
    for words, shares in cases:
        np.testing.assert_array_equal(
            loaded.predict(dots, cosines, words, shares),
            confidence_model.predict(dots, cosines, words, shares),
        )
    # a hybrid search reads both; without the coverage it counts as average (NaN), which
    # differs from what the text model alone or the hybrid model with coverage gives
    both = confidence_model.predict(dots, cosines, lexical, coverage)
    assert not np.allclose(both, confidence_model.predict(dots, cosines, lexical))
    assert not np.allclose(both, confidence_model.predict(dots, cosines, coverage=coverage))
    with pytest.raises(ValueError, match=r"q\.hybrid_features must be"):
        QueryConfidence.from_json({**data, "hybrid_features": ["idf", "margin"]}, "q")
    del data["hybrid_model"]
    with pytest.raises(ValueError, match="exactly the keys"):
        QueryConfidence.from_json(data, "q")


def test_a_confidence_without_extra_models_keeps_format_1_and_ignores_bm25_and_texts(
    calibrator, confidence_model
):
    dense = replace(confidence_model, hybrid_model=None, text_model=None)
    older = replace(calibrator, confidence=dense)
    data = json.loads(json.dumps(older.to_json()))
    assert data["format"] == 1 and "hybrid_model" not in data["query_confidence"]
    assert calibrator.to_json()["format"] == 2
    with pytest.raises(ValueError, match="format 1 cannot hold .*query confidence's models"):
        RelevanceCalibrator.from_json({**calibrator.to_json(), "format": 1})
    later = RelevanceCalibrator.from_json({**calibrator.to_json(), "format": 3})  # more is fine
    assert later == calibrator
    loaded = RelevanceCalibrator.from_json(data).confidence
    rng = np.random.default_rng(2)
    dots, cosines = rng.random((3, CONFIDENCE_DEPTH)), rng.random((3, CONFIDENCE_DEPTH, 2))
    np.testing.assert_array_equal(
        loaded.predict(dots, cosines, rng.random((3, 2)), rng.random((3, 2))),
        dense.predict(dots, cosines),
    )


def test_the_learned_confidence_is_a_probability_that_does_not_depend_on_k(collections):
    calibrated, _ = collections
    one = calibrated.search("The cat sat on the mat.", k=1)
    three = calibrated.search("The cat sat on the mat.", k=3)
    assert one["confidence"] == three["confidence"]
    assert 0.0 < one["confidence"] < 1.0


def test_without_a_calibrator_p_relevant_is_none_and_a_threshold_is_an_error(collections):
    _, plain = collections
    result = plain.search("A man is playing a guitar.", k=3)
    assert all(h["p_relevant"] is None for h in result["hits"])
    with pytest.raises(ValueError, match="no relevance calibrator"):
        plain.search("A man is playing a guitar.", k=3, min_p_relevant=0.5)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.5", True])
def test_a_threshold_outside_zero_one_is_refused(collections, bad):
    calibrated, _ = collections
    with pytest.raises(ValueError, match="min_p_relevant"):
        calibrated.search("A man is playing a guitar.", k=3, min_p_relevant=bad)


def test_cli_shows_p_relevant_and_refuses_a_bad_threshold(collections):
    calibrated, _ = collections
    app = typer.Typer()
    register(app)
    args = ["search", "a man plays guitar", "--db", str(calibrated.db.path), "-c", "calibrated"]
    table = CliRunner().invoke(app, [*args, "-k", "3"], env={"COLUMNS": "160"})
    assert table.exit_code == 0, table.output
    assert "p_relevant" in table.stdout
    lines = CliRunner().invoke(app, [*args, "-k", "3"], env={"COLUMNS": "80"})
    assert re.search(r"1\. \S+  [\d.]+ ± [\d.]+  p [\d.]+", lines.stdout), lines.stdout
    for option, value in (("--min-p-relevant", "1.5"), ("--min-p-relevant", "nan"), ("-k", "0")):
        bad = CliRunner().invoke(app, [*args, option, value])  # named as the option, not as
        said = " ".join(bad.output.split())  # the Python parameter (min_p_relevant, k)
        assert bad.exit_code == 2 and f"Invalid value for '{option}'" in said, said
        assert "Traceback" not in bad.output
    done = CliRunner().invoke(app, [*args, "-k", "10", "--min-p-relevant", "0.99", "--json"])
    assert done.exit_code == 0, done.output
    (result,) = json.loads(done.stdout)
    assert all(h["p_relevant"] >= 0.99 for h in result["hits"])
    stray = ["search", "zq xv wk", *args[2:]]  # words no stored text holds
    probe = CliRunner().invoke(app, [*stray, "-k", "10", "--json"])
    assert max(h["p_relevant"] for h in json.loads(probe.stdout)[0]["hits"]) < 0.9
    emptied = CliRunner().invoke(app, [*stray, "-k", "10", "--min-p-relevant", "0.9"])
    said = " ".join(emptied.stdout.split())
    assert emptied.exit_code == 0 and "no hits: no hit has " in said
    assert "empty" not in said  # the collection holds rows: not said to be empty
    assert "p_relevant >= 0.9" in said and "filter" not in said  # it blamed a filter not given
    assert "weights" not in said  # nor showed a weights column for no hits


def test_expected_calibration_error_by_hand_and_against_sklearn():
    from sklearn.calibration import calibration_curve

    # two bins: [0.1, 0.1] observed 1/2 (|0.5 - 0.1| = 0.4), [0.9, 0.9] observed 1 (0.1)
    p, y = np.array([0.1, 0.1, 0.9, 0.9]), np.array([0, 1, 1, 1])
    assert expected_calibration_error(p, y, 2) == pytest.approx(0.5 * 0.4 + 0.5 * 0.1)
    rng = np.random.default_rng(SEED)
    p = rng.random(500)
    y = rng.random(500) < p**2
    observed, predicted = calibration_curve(y, p, n_bins=15)
    which = np.minimum((p * 15).astype(int), 14)
    share = np.bincount(which, minlength=15)[np.unique(which)] / len(p)
    # same bins, summed in another order: equal up to float64 rounding (~1e-16)
    expected = float((share * np.abs(observed - predicted)).sum())
    assert expected_calibration_error(p, y, 15) == pytest.approx(expected, rel=1e-12)


def test_member_cosines_read_each_model_block(hash_pipeline, sentences):
    fused = hash_pipeline.encode(sentences[:4])
    parts = [p.normalize() for p in hash_pipeline.encode_members(sentences[:4])]
    dims = [m.encoder.dim for m in hash_pipeline.members]
    got = member_cosines(
        fused.gaussian.mean[:1],
        fused.weights[:1],
        fused.gaussian.mean,
        fused.weights,
        dims,
        [[0, 1, 2, 3]],
    )[0]
    expected = np.stack([p.mean.astype(np.float64) @ p.mean[0] for p in parts], axis=1)
    # the fused means are float32 copies of √π·μ: a cosine carries float32 rounding (~1e-7)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("fixture", ["default_pipeline", "search_pipeline"])
def test_the_shipped_calibrators_were_fitted_for_their_current_fusion(fixture, request):
    pipeline = request.getfixturevalue(fixture)
    name, calibrator = pipeline.name, pipeline.calibrator
    assert calibrator is not None, f"run scripts/fit_calibration.py --pipeline {name}"
    assert calibrator.fit_info["pipeline_fingerprint"] == pipeline.fingerprint, (
        f"{name}'s fusion changed since its calibrator was fitted: rerun "
        f"scripts/fit_calibration.py --pipeline {name}"
    )
    assert calibrator.fit_info["score"] == {
        "name": pipeline.score.name,
        "beta": pipeline.score.beta,
    }
    hybrid = calibrator.hybrid
    assert hybrid is not None, f"run scripts/fit_calibration.py --pipeline {name}"
    for key in ("pipeline_fingerprint", "score", "dataset", "top"):
        assert hybrid.fit_info[key] == calibrator.fit_info[key], key
    assert hybrid.isotonic is None  # no step mapping the surest hits to exactly 1.0


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    queries=st.integers(1, 6),
    depth=st.integers(1, 14),
    k=st.integers(1, 12),
)
def test_batched_features_are_each_querys_own(seed, queries, depth, k):
    """A search computes every query's features in one pass: row i of the batch must be what
    query i alone gives. The maths is the same elementwise float64; only a vectorised exp or
    log may round its last bit differently on another array shape (hence 1e-12)."""
    rng = np.random.default_rng(seed)
    dots = np.sort(rng.uniform(-1, 1, size=(queries, depth)), axis=1)[:, ::-1]
    variances = rng.uniform(0, 1e-2, size=(queries, depth))
    spread = rng.uniform(0, 0.1, size=(queries, depth))
    cosines = rng.uniform(-1, 1, size=(queries, depth, 3))
    cosines[rng.uniform(size=cosines.shape) < 0.1] = np.nan  # weightless members
    batch = hit_features(dots, variances, k, spread)
    for i in range(queries):
        alone = hit_features(dots[i], variances[i], k, spread[i])
        np.testing.assert_allclose(batch[i], alone, rtol=1e-12, atol=1e-15)
    if depth >= 2:
        together = query_features(dots, cosines)
        for i in range(queries):
            alone = query_features(dots[i], cosines[i])
            np.testing.assert_allclose(together[i], alone, rtol=1e-12, atol=1e-15)


def test_a_logistic_fits_features_that_are_missing_as_it_predicts_them():
    """A member weighted 0 gives NaN features (its cosines). `predict` reads NaN as the
    training mean; fitting on them failed inside scikit-learn. A column missing on every row
    carries nothing: the fit equals one without it; one missing on some rows still fits."""
    from probembed.calibration.logistic import Logistic

    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, 3))
    labels = x[:, 0] + 0.5 * rng.normal(size=200) > 0
    without = Logistic.fit(x, labels, seed=0)
    missing = np.column_stack([x, np.full(200, np.nan)])
    fitted = Logistic.fit(missing, labels, seed=0)
    assert fitted.coef[3] == 0.0
    np.testing.assert_allclose(fitted.predict(missing), without.predict(x), rtol=1e-9)
    assert Logistic.from_json(fitted.to_json(), "model").width == 4  # every number finite
    some = x.copy()
    some[::3, 1] = np.nan
    p = Logistic.fit(some, labels, seed=0).predict(some)
    assert np.all((p > 0) & (p < 1)) and np.corrcoef(p, labels)[0, 1] > 0.5


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.integers(1, 9), rows=st.integers(2, 700))
def test_a_logistic_gives_a_row_the_same_bits_alone_or_in_any_batch(seed, width, rows):
    """A hit's p_relevant must not depend on the hits beside it (a larger k, a batch of
    queries): a matrix-vector product rounded one row differently from a batch."""
    from probembed.calibration.logistic import Logistic

    rng = np.random.default_rng(seed)
    model = Logistic(
        rng.normal(size=width), rng.uniform(0.01, 2, width), rng.normal(size=width), 0.3
    )
    x = rng.normal(size=(rows, width))
    together = model.predict(x)
    assert all(model.predict(x[i : i + 1])[0] == together[i] for i in range(rows))
    np.testing.assert_array_equal(model.predict(x[: rows // 2]), together[: rows // 2])


def test_disagreement_features_without_member_cosines_are_refused_by_name(hash_pipeline):
    """A fusion with no block per member (single, sum) ranks with no member cosines: asking
    for their disagreement failed with "'NoneType' object is not subscriptable"."""
    single = hash_pipeline.with_fusion(FusionConfig(f"single:{hash_pipeline.models[0]}"))
    docs = {f"d{i}": f"a note about cats, number {i}" for i in range(20)}
    queries = {"q0": "cats", "q1": "number 3"}
    dataset = RetrievalDataset("notes", "test", docs, queries, {q: {"d3": 1} for q in queries})
    split = rank_split(single, dataset)
    assert split.cosines is None and len(split.table(10)[0]) == 20  # without it: fine
    with pytest.raises(ValueError, match="member disagreement needs member cosines"):
        split.table(10, with_disagreement=True)


def test_a_split_whose_judged_documents_are_never_found_fits_no_calibrator(hash_pipeline, tmp_path):
    """Every judged document is its query's own id, which a BEIR ranking never returns: every
    top hit is irrelevant, so there is nothing to calibrate (and it failed inside the fit)."""
    from probembed.calibration.training import MIN_QUERIES, TOP, fit_calibrator

    queries = {f"q{i}": f"a note about cats, number {i}" for i in range(MIN_QUERIES)}
    docs = {f"d{i}": f"a note about dogs, number {i}" for i in range(40)} | queries
    qrels = {q: {q: 1} for q in queries}
    dataset = RetrievalDataset("selves", "train", docs, queries, qrels)
    with pytest.warns(UserWarning) as caught:
        assert fit_calibrator(hash_pipeline, dataset, tmp_path) is None
    (warning,) = [str(w.message) for w in caught]
    assert warning == (
        f"selves train: every top-{TOP} hit of every query (dense ranking) is irrelevant: "
        "no relevance calibrator (no p_relevant)"
    )


def test_tied_hits_are_scored_in_the_order_the_search_shows_them():
    """q1's relevant "a" is shown first, tied with "z" (as RRF scores often tie): keyed by
    score, the metric put "z" first (ties by id, descending), scoring nDCG@10 0.63 where the
    search shows a perfect list, and no query fell below the median (the failure label)."""
    shown = {"q1": ([0, 1], [0.5, 0.5]), "q2": ([1, 0], [0.6, 0.5]), "q3": ([0, 1], [0.6, 0.5])}
    ranked = [
        Ranked(np.array(p), np.array(s), np.array(s), np.full(2, 0.01)) for p, s in shown.values()
    ]
    qrels = {q: {"a": 1} for q in shown}
    relevant = np.array([[p == 0 for p in positions] for positions, _ in shown.values()])
    split = RankedSplit(list(shown), ["a", "z"], ranked, None, relevant)
    corpus, queries = {"a": "x", "z": "y"}, dict.fromkeys(shown, "q")
    dataset = RetrievalDataset("tied", "train", corpus, queries, qrels)
    ndcg = split.per_query(dataset)["ndcg@10"]
    assert ndcg == {"q1": 1.0, "q2": pytest.approx(1 / np.log2(3)), "q3": 1.0}
    np.testing.assert_array_equal(split.failed(dataset), [False, True, False])
