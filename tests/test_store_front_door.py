"""One front door: `collection.search` with the collection's own pipeline, warm across calls,
typed hits, the CLI's JSON list, and a confidence that does not depend on k."""

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from tuning_support import TUNED_CHANGES, tuned_copy
from typer.testing import CliRunner

import probembed
from probembed import encoders
from probembed.encoders.hashing import HashingEncoder
from probembed.interfaces.cli import app as cli_app
from probembed.interfaces.store_commands import register
from probembed.pipeline import AdaptConfig, FusionConfig, ModelSpec, Pipeline, ScoreConfig
from probembed.store import (
    Batch,
    Collection,
    Database,
    Hit,
    PipelineInfo,
    PipelineMismatchError,
    QueryCutWarning,
    QueryResult,
    Searcher,
    StoreError,
    ingest,
    remove,
    search,
)
from probembed.store.readers import Record
from probembed.uncertainty import make_estimator

QUERY = "A man is playing a guitar."


#: Relative tolerance between two encodings of one query. A collection loads its own copy of
#: the pipeline, with an embedding cache, so a query it serves from the cache was encoded in
#: another batch; float32 encoders are not batch-invariant (a few float32 units, ~1e-7
#: relative), and a score moves with its query. Stored values (ids, weights, text) are exact.
REENCODED = 1e-6


def assert_same_results(got, want):
    """The same hits with the same stored values, and scores equal up to a re-encoding."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g["query"] == w["query"]
        assert g["confidence"] == pytest.approx(w["confidence"], rel=REENCODED)
        assert [h["id"] for h in g["hits"]] == [h["id"] for h in w["hits"]]
        for gh, wh in zip(g["hits"], w["hits"], strict=True):
            assert (gh["weights"], gh["text"], gh["metadata"]) == (
                wh["weights"],
                wh["text"],
                wh["metadata"],
            )
            assert (gh["score"], gh["std"]) == pytest.approx(
                (wh["score"], wh["std"]), rel=REENCODED
            )


def records(texts, start=0):
    """Records with ids s<start>, s<start+1>, ... and an integer metadata field."""
    return [Record(f"s{start + i}", t, {"n": start + i}) for i, t in enumerate(texts)]


@pytest.fixture
def docs(tmp_path, hash_pipeline, sentences):
    """60 real sentences ingested with a custom (not built-in) pipeline."""
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest(records(sentences[:60]), collection, hash_pipeline)
    return collection


def test_second_search_reuses_the_warm_searcher_vectors_and_pipeline(docs):
    first = docs.search(QUERY, k=3)
    searcher = docs.searcher()
    vectors, pipeline = searcher._snapshot, searcher.pipeline
    handle = docs.db.collection("docs")  # asking again gives the same handle, so the same state
    second = handle.search(QUERY, k=3)
    assert handle is docs and handle.searcher() is searcher
    assert searcher._snapshot is vectors and searcher.pipeline is pipeline  # nothing reloaded
    assert first == second


def test_search_after_an_add_sees_the_new_rows(docs, sentences):
    docs.search(QUERY, k=3)
    searcher = docs.searcher()
    before = searcher._snapshot.version
    new = sentences[500]
    ingest(records([new], start=500), docs, docs.load_pipeline())
    hits = docs.search(new, k=1, exact=True)["hits"]
    assert hits[0]["id"] == "s500" and hits[0]["text"] == new
    assert docs.searcher() is searcher and searcher._snapshot.version > before


def test_a_collection_searched_while_empty_finds_what_is_added_later(tmp_path, hash_pipeline):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    collection.create(hash_pipeline)
    assert collection.search(QUERY, k=3)["hits"] == []  # the warm searcher holds no row
    ingest(records(["the cat sat on the mat", "dogs bark at night"]), collection, hash_pipeline)
    for exact in (True, False):
        hits = collection.search("the cat sat on the mat", k=3, exact=exact)["hits"]
        assert [h["id"] for h in hits][:1] == ["s0"] and len(hits) == 2


def test_rows_without_a_doc_id_are_each_their_own_document(tmp_path, hash_pipeline, sentences):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    items = records(sentences[:6])
    items[2] = Record(items[2].id, items[2].text, {"doc_id": "d"})  # one row names a document
    items[3] = Record(items[3].id, items[3].text, {"doc_id": "d"})
    ingest(items, collection, hash_pipeline)
    plain = collection.search(sentences[0], k=6, exact=True)["hits"]
    grouped = collection.search(sentences[0], k=6, exact=True, group_by_doc=True)["hits"]
    first_of_d = next(h["id"] for h in plain if h["id"] in ("s2", "s3"))
    want = [h["id"] for h in plain if h["id"] not in ("s2", "s3") or h["id"] == first_of_d]
    assert [h["id"] for h in grouped] == want  # five documents: four plain rows and d
    assert [h["other_chunks"] for h in grouped] == [1 if i == first_of_d else 0 for i in want]


def test_a_custom_pipeline_round_trips_through_the_kept_copy(tmp_path, hash_pipeline, sentences):
    source = hash_pipeline.save(tmp_path / "my-pipeline")
    path = tmp_path / "db"
    ingest(
        records(sentences[:60]), Database(path, create=True).collection("docs"), source_pipe(source)
    )
    shutil.rmtree(source)  # the directory it came from is gone: the collection's copy remains
    fresh = Database(path).open("docs")  # a new handle, as in another process
    loaded = fresh.load_pipeline()
    assert loaded is not hash_pipeline and loaded.fingerprint == hash_pipeline.fingerprint
    got = fresh.search([QUERY, "Stocks fell sharply today."], k=5, exact=True)
    want = Searcher(fresh, hash_pipeline).search(
        [QUERY, "Stocks fell sharply today."], k=5, exact=True
    )
    assert_same_results(got, want)


def test_a_write_takes_a_pipeline_by_name_or_directory_or_none_for_the_collections_own(
    tmp_path, hash_pipeline, sentences
):
    """`ingest(records, coll, "retrieval")` and `ingest(records, coll)` failed with
    AttributeError: 'str' (or 'NoneType') object has no attribute 'name'."""
    from probembed.store import ingest_documents, remove

    source = hash_pipeline.save(tmp_path / "my-pipeline")
    db = Database(tmp_path / "db", create=True)
    docs = db.collection("docs")
    with pytest.raises(StoreError, match="'docs' in .* holds nothing yet: pass the pipeline"):
        ingest(records(sentences[:4]), docs)
    with pytest.raises(TypeError, match="pipeline must be a probembed Pipeline.*got int"):
        ingest(records(sentences[:4]), docs, 7)
    assert not docs.exists
    assert ingest(records(sentences[:30]), docs, str(source)).added == 30
    assert ingest(records(sentences[30:60], start=30), docs).added == 30  # its own pipeline
    assert docs.pipeline.fingerprint == hash_pipeline.fingerprint and docs.count() == 60
    assert remove(docs, ["s0", "s1"]) == 2 and docs.count() == 58
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# Guitars\n\nA man is playing a guitar.\n")
    chunks = db.collection("chunks")
    assert ingest_documents(tmp_path / "notes", chunks, source).added == 1
    (tmp_path / "notes" / "b.md").write_text("# Stocks\n\nStocks fell sharply today.\n")
    report = ingest_documents(tmp_path / "notes", chunks)
    assert (report.added, report.unchanged) == (1, 1)


def source_pipe(directory):
    """A pipeline loaded from a directory, as `probembed ingest --pipeline DIR` does."""
    return Pipeline.load(directory, cache=False)


def test_a_shared_pipeline_answers_with_the_kept_copys_settings(docs, hash_pipeline):
    """A server's upgraded pipeline of the same fingerprint (another score, adaptation and no
    calibrator: none changes a vector) lends its models, not its settings."""
    want = Database(docs.db.path).open("docs").search(QUERY, k=5)  # the kept copy alone
    upgraded = Pipeline(
        hash_pipeline.members,
        hash_pipeline.fusion,
        ScoreConfig("dot"),
        "hash",
        False,
        adapt=AdaptConfig(gamma=5.0),
    )
    assert upgraded.fingerprint == hash_pipeline.fingerprint
    assert upgraded.score != hash_pipeline.score
    fresh = Database(docs.db.path).open("docs")
    fresh.use_pipeline(upgraded)
    used = fresh.load_pipeline()
    assert all(a is b for a, b in zip(used.members, upgraded.members, strict=True))  # shared
    assert (used.score, used.adapt) == (hash_pipeline.score, hash_pipeline.adapt)
    assert_same_results([fresh.search(QUERY, k=5)], [want])
    searcher = fresh.searcher()
    fresh.use_pipeline(upgraded)  # every request of a server does this: nothing is rebuilt
    assert fresh.load_pipeline() is used and fresh.searcher() is searcher


def test_a_pipeline_with_other_members_cannot_take_a_copys_settings(docs, toy_pairs):
    spec = ModelSpec("hash", "laplace", encoder_params={"dim": 64})
    other = Pipeline.fit([spec], toy_pairs[:40], FusionConfig("single:hash"), name="hash")
    kept = r"\[\('hash', 'laplace'\), \('hash', 'laplace'\)\]"
    with pytest.raises(ValueError, match=rf"members {kept} are not this pipeline's"):
        other.with_settings_of(docs.pipeline_dir)


def test_a_replaced_copy_is_refused_by_fingerprint(docs, hash_pipeline, toy_pairs):
    spec = ModelSpec("hash", "laplace", encoder_params={"dim": 64})
    other = Pipeline.fit([spec], toy_pairs[:40], FusionConfig("single:hash"), name="hash")
    shutil.rmtree(docs.pipeline_dir)
    other.save(docs.pipeline_dir)
    fresh = Database(docs.db.path).open("docs")
    with pytest.raises(
        PipelineMismatchError,
        match=rf"fingerprint {hash_pipeline.fingerprint}.*"
        rf"copy kept at .*has fingerprint {other.fingerprint}",
    ):
        fresh.search(QUERY)


def test_the_same_models_fused_with_other_weights_are_refused_saying_what_replace_cannot_do(
    docs, hash_pipeline, sentences, tmp_path
):
    """What `probembed tune` gives once it moves the prior: the same models, other vectors.
    The README (its Tune on your own data, now in docs/cli.md) promised --replace-pipeline
    would take it over; it was refused with "use that pipeline or another collection" alone,
    and --replace-pipeline the same. The refusal says why (the vectors differ) and what
    replacing can and cannot take over, in the CLI's terms there."""
    from dataclasses import replace

    from probembed.interfaces.cli import app

    fusion = replace(hash_pipeline.fusion, prior=(0.7, 0.3))
    reweighed = Pipeline(hash_pipeline.members, fusion, hash_pipeline.score, "reweighed")
    assert reweighed.fingerprint != hash_pipeline.fingerprint
    with pytest.raises(PipelineMismatchError) as refused:
        docs.record_pipeline(reweighed, replace=True)
    said = str(refused.value)
    assert "'reweighed' has the same models, fused with other weights" in said
    assert "every item would be encoded again, into another collection" in said
    assert "record_pipeline(pipeline, replace=True) takes over only a score" in said
    reweighed.save(tmp_path / "reweighed")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "s0", "text": sentences[0]}) + "\n")
    base = ["ingest", str(corpus), "--db", str(docs.db.path), "-c", "docs"]
    for extra in ([], ["--replace-pipeline"]):
        cli = CliRunner().invoke(app, [*base, "--pipeline", str(tmp_path / "reweighed"), *extra])
        told = " ".join(cli.output.split())
        assert cli.exit_code == 2 and "--replace-pipeline takes over only a score" in told, told
    assert docs.count() == 60 and docs.load_pipeline().fingerprint == hash_pipeline.fingerprint


def test_a_missing_copy_of_a_custom_pipeline_is_a_clear_error(docs, hash_pipeline):
    shutil.rmtree(docs.pipeline_dir)
    fresh = Database(docs.db.path).open("docs")
    with pytest.raises(StoreError, match=r"pipeline 'hash' .*not a built-in.*record_pipeline"):
        fresh.search(QUERY)
    fresh.record_pipeline(hash_pipeline)  # the documented repair
    assert Database(docs.db.path).open("docs").search(QUERY, k=2)["hits"]


def test_a_copy_left_by_a_failed_first_write_is_replaced(tmp_path, hash_pipeline, toy_pairs):
    spec = ModelSpec("hash", "laplace", encoder_params={"dim": 64})
    other = Pipeline.fit([spec], toy_pairs[:40], FusionConfig("single:hash"), name="other")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    other.save(collection.pipeline_dir)  # as if a first write with `other` died before commit
    collection.record_pipeline(hash_pipeline)  # what ingest does before its first commit
    fused = hash_pipeline.encode(["one text"])
    collection.add(Batch(["a"], ["one text"], [{}], fused, PipelineInfo.of(hash_pipeline)))
    assert Database(collection.db.path).open("docs").load_pipeline().name == "hash"


def test_hits_are_typed_and_json_ready(docs):
    result = docs.search(QUERY, k=4)
    assert set(result) == set(QueryResult.__annotations__)
    assert len(result["hits"]) == 4
    for hit in result["hits"]:
        assert set(hit) == set(Hit.__annotations__)
        assert isinstance(hit["id"], str) and isinstance(hit["metadata"]["n"], int)
    assert json.loads(json.dumps(result)) == result
    many = docs.search([QUERY, "The cat sat on the mat."], k=2)
    assert [r["query"] for r in many] == [QUERY, "The cat sat on the mat."]


@pytest.mark.parametrize("hybrid", [False, True])
@pytest.mark.parametrize("score", ["uec", "dot"])
def test_confidence_of_one_hit_is_that_of_the_first_two(docs, score, hybrid):
    one = docs.search(QUERY, k=1, score=score, hybrid=hybrid)
    two = docs.search(QUERY, k=2, score=score, hybrid=hybrid)
    assert len(one["hits"]) == 1 and one["hits"][0] == two["hits"][0]
    assert one["confidence"] == two["confidence"]
    assert 0.0 < one["confidence"] < 1.0  # not the certainty a lone hit used to report


@pytest.mark.parametrize("score", ["uec", "dot"])
def test_a_filter_that_leaves_one_hit_reports_no_confidence(docs, score):
    """One hit has no rival to outrank: its confidence is unknown (None), not the 1.0 that
    made a filtered search look certain."""
    first = docs.search(QUERY, k=1, score=score)["hits"][0]["id"]
    alone = docs.search(QUERY, k=5, score=score, where=f"id = '{first}'")
    assert [h["id"] for h in alone["hits"]] == [first] and alone["confidence"] is None


@pytest.mark.parametrize(
    "questions", [[QUERY], [QUERY, "The cat sat on the mat.", "Stocks fell sharply today."]]
)
def test_cli_json_is_a_list_of_results_for_one_or_many_questions(docs, questions):
    app = typer.Typer()
    register(app)
    args = ["search", *questions, "--db", str(docs.db.path), "-c", "docs", "-k", "2", "--json"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    results = json.loads(done.stdout)
    assert [r["query"] for r in results] == questions
    assert_same_results(results, docs.search(questions, k=2))
    assert all(set(h) == set(Hit.__annotations__) for r in results for h in r["hits"])


def test_cli_search_reads_questions_from_a_file_or_stdin_and_refuses_a_blank_one(docs, tmp_path):
    """Only arguments were questions: `search -` searched the text "-", and a list of
    questions had to go on the command line; a blank one was "not a non-empty string"."""
    app = typer.Typer()
    register(app)
    questions = [QUERY, "The cat sat on the mat."]
    base = ["--db", str(docs.db.path), "-c", "docs", "-k", "2", "--json"]
    listed = tmp_path / "questions.txt"
    listed.write_text(f"{questions[0]}\n\n{questions[1]}\r\n", encoding="utf-8")
    expected = docs.search(questions, k=2)
    for args, given in (
        (["search", "--file", str(listed)], None),
        (["search"], "\n".join(questions)),
        (["search", "-"], "\n".join(questions)),
    ):
        done = CliRunner().invoke(app, [*args, *base], input=given)
        assert done.exit_code == 0, done.output
        results = json.loads(done.stdout)
        assert [r["query"] for r in results] == questions
        assert_same_results(results, expected)
    blank = CliRunner().invoke(app, ["search", QUERY, "  ", *base])
    assert blank.exit_code == 2 and "argument 2 ('  ') is blank: it holds no text" in blank.output
    both = CliRunner().invoke(app, ["search", QUERY, "--file", str(listed), *base])
    assert both.exit_code == 2 and "questions as arguments or with --file, not both" in both.output
    with pytest.raises(StoreError, match=r"queries\[1\] \('\\t'\) is blank"):
        docs.search([QUERY, "\t"])


def test_cli_search_names_a_missing_pipeline_copy_without_traceback(docs):
    shutil.rmtree(docs.pipeline_dir)
    app = typer.Typer()
    register(app)
    done = CliRunner().invoke(app, ["search", QUERY, "--db", str(docs.db.path), "-c", "docs"])
    assert done.exit_code == 2 and "no copy of it is kept" in done.output
    assert "Traceback" not in done.output


def test_cli_delete_of_a_large_part_measures_the_agreement_again(
    tmp_path, hash_pipeline, sentences
):
    """A delete outside ingest kept the models' agreement of the corpus as it was before."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record(f"s{i}", t) for i, t in enumerate(sentences[:100])], collection, hash_pipeline)

    def measured() -> dict:
        return json.loads(collection.agreement_file.read_text())

    first = measured()
    assert first["count"] == 100
    app = typer.Typer()
    register(app)
    db = ["--db", str(tmp_path / "db"), "-c", "c"]
    few = CliRunner().invoke(app, ["delete", "s0", "s1", *db])  # a few: the measurement stands
    assert few.exit_code == 0 and "agreement" not in few.output and measured() == first
    many = CliRunner().invoke(app, ["delete", *[f"s{i}" for i in range(2, 40)], *db])
    assert many.exit_code == 0, many.output
    assert "agreement" in many.output and measured()["count"] == 60


def test_cli_ingest_into_an_existing_collection_uses_its_pipeline(tmp_path, hash_pipeline):
    pipe_dir = hash_pipeline.save(tmp_path / "pipe")
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(json.dumps({"id": "a", "text": "cats purr softly"}) + "\n", encoding="utf-8")
    second.write_text(json.dumps({"id": "b", "text": "dogs bark loudly"}) + "\n", encoding="utf-8")
    app = typer.Typer()
    register(app)
    db = ["--db", str(tmp_path / "db"), "-c", "pets"]
    made = CliRunner().invoke(app, ["ingest", str(first), *db, "--pipeline", str(pipe_dir)])
    assert made.exit_code == 0, made.output
    shutil.rmtree(pipe_dir)
    more = CliRunner().invoke(app, ["ingest", str(second), *db])  # no --pipeline: the kept copy
    assert more.exit_code == 0, more.output
    found = CliRunner().invoke(app, ["search", "dogs bark loudly", *db, "-k", "1", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)[0]["hits"][0]["id"] == "b"
    assert "--upsert" not in more.output  # nothing was already stored
    first.write_text(json.dumps({"id": "a", "text": "cats purr loudly"}) + "\n")  # edited
    again = CliRunner().invoke(app, ["ingest", str(first), *db])
    said = " ".join(again.output.split())
    assert (
        again.exit_code == 0
        and (
            "1 of 1 already stored have another text or metadata than the file: a; "
            "--upsert replaces them"
        )
        in said
    )
    upserted = CliRunner().invoke(app, ["ingest", str(first), *db, "--upsert"])
    assert upserted.exit_code == 0 and "another text" not in upserted.output


def test_cli_ingest_again_names_the_edited_records_it_left_as_stored(tmp_path, hash_pipeline):
    """A re-run of an edited JSONL said "5 id(s) already stored were left as stored, edited or
    not", where the service names how many changed: it names them, a few, and no others."""
    pipe_dir = hash_pipeline.save(tmp_path / "pipe")
    source = tmp_path / "corpus.jsonl"
    rows = [{"id": f"d{i}", "text": f"document {i} is about topic {i}"} for i in range(12)]

    def written(rows) -> None:
        source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def ingested(*options: str) -> str:
        run = CliRunner().invoke(app, ["ingest", str(source), *db, *options])
        assert run.exit_code == 0, run.output
        return " ".join(run.output.split())

    app = typer.Typer()
    register(app)
    db = ["--db", str(tmp_path / "x.db"), "--pipeline", str(pipe_dir)]
    written(rows[:5])
    ingested()
    written([*rows[:2], {**rows[2], "text": "an edited text"}, *rows[3:5]])
    said = ingested()
    assert "added 0, already stored 5" in said
    assert (
        "1 of 5 already stored have another text or metadata than the file: d2; "
        "--upsert replaces them"
    ) in said
    assert "another text" not in ingested("--upsert")
    assert "another text" not in ingested()  # as stored now
    written(rows)
    ingested()
    written([{**r, "year": 2024} for r in rows[:8]] + rows[8:])  # metadata edited
    said = ingested()
    assert "8 of 12 already stored have another text or metadata than the file: " in said
    assert "d0, d1, d2, d3, d4 and 3 more; --upsert replaces them" in said


def test_cli_drop_asks_then_deletes_a_collection_and_names_one_that_is_not_there(
    tmp_path, hash_pipeline
):
    """There was no way to drop a collection from the command line (only HTTP DELETE)."""
    pipe_dir = hash_pipeline.save(tmp_path / "pipe")
    source = tmp_path / "pets.jsonl"
    source.write_text(json.dumps({"id": "a", "text": "cats purr softly"}) + "\n")
    app = typer.Typer()
    register(app)
    db = ["--db", str(tmp_path / "db")]
    for name in ("pets", "keep"):
        made = CliRunner().invoke(
            app, ["ingest", str(source), *db, "-c", name, "--pipeline", str(pipe_dir)]
        )
        assert made.exit_code == 0, made.output
    # not a terminal: no, whatever stdin holds (asked on one: test_cli_scripting)
    declined = CliRunner().invoke(app, ["drop", "pets", *db], input="y\n")
    assert declined.exit_code == 1 and "nothing dropped" in declined.output
    # the question and its answer on stderr: typer's confirm put a space on stdout
    assert declined.stdout == "" and "item(s)? [y/N]: no (stdin is not" in declined.stderr
    assert Database(tmp_path / "db").collections() == ["keep", "pets"]
    dropped = CliRunner().invoke(app, ["drop", "pets", *db, "--yes"])
    assert dropped.exit_code == 0 and "dropped collection 'pets' (1 item(s))" in dropped.output
    assert Database(tmp_path / "db").collections() == ["keep"]
    missing = CliRunner().invoke(app, ["drop", "pets", *db, "--yes"])
    assert missing.exit_code == 2 and "no collection 'pets'" in " ".join(missing.output.split())
    assert CliRunner().invoke(app, ["drop", "keep", *db, "-y"]).exit_code == 0
    assert Database(tmp_path / "db").collections() == []
    listed = CliRunner().invoke(app, ["collections", *db])  # an empty table said nothing
    assert listed.exit_code == 0 and f"no collections in {tmp_path / 'db'}" in listed.stderr


def test_printed_hits_show_shared_weights_once_and_differing_weights_per_hit():
    from rich.console import Console

    from probembed.interfaces.search_command import print_result

    def hit(i: int, weights: dict[str, float]) -> dict:
        return {"id": f"d{i}", "score": 0.5, "std": 0.1, "weights": weights, "text": "t"}

    def shown(hits: list[dict]) -> str:
        console = Console(width=80, record=True)
        print_result({"query": "q", "confidence": 0.9, "hits": hits}, console)
        return console.export_text()

    same = shown([hit(i, {"a": 0.6, "b": 0.4}) for i in range(3)])
    assert same.count("a 0.60 b 0.40") == 1 and "weights a 0.60 b 0.40" in same
    differing = shown([hit(0, {"a": 0.6, "b": 0.4}), hit(1, {"a": 0.3, "b": 0.7})])
    assert "a 0.60 b 0.40" in differing and "a 0.30 b 0.70" in differing


@pytest.mark.parametrize("width", [40, 71])
def test_a_narrow_terminal_prints_hits_as_lines_that_keep_the_text(width):
    """At 40 columns the table's fixed columns took the width and the text was gone."""
    from rich.console import Console

    from probembed.interfaces.search_command import print_result

    text = "The jaguar is the largest cat species native to the Americas"
    hits = [
        {"id": f"d{i}", "score": 0.8, "std": 0.01, "weights": w, "p_relevant": 0.42, "text": text}
        for i, w in enumerate([{"a": 0.6, "b": 0.4}, {"a": 0.3, "b": 0.7}])
    ]
    console = Console(width=width, record=True)
    print_result({"query": "big [cats]", "confidence": 0.7, "hits": hits}, console)
    shown = console.export_text()
    assert " ".join(shown.split()).count(text) == 2 and "'big [cats]'  confidence 0.70" in shown
    assert "1. d0  0.8000 ± 0.0100  p 0.42" in shown and "a 0.30 b 0.70" in shown
    assert max(len(line.rstrip()) for line in shown.splitlines()) <= width


@pytest.mark.parametrize("width", [40, 120])
def test_an_id_with_a_line_break_is_printed_on_one_line(width):
    """An id "b\\nc" printed as two lines, "b" and "c", in the table and in the narrow
    layout alike: it read as two hits' ids."""
    from rich.console import Console

    from probembed.interfaces.search_command import print_result

    hit = {"id": "b\nc\td", "score": 0.5, "std": 0.1, "weights": {"m": 1.0}, "text": "t"}
    console = Console(width=width, record=True)
    print_result({"query": "q", "confidence": 0.5, "hits": [hit]}, console)
    shown = console.export_text()
    assert "b\\nc\\td" in shown
    assert not any(line.strip(" │").startswith("c") for line in shown.splitlines())


def test_printed_text_ids_and_queries_stay_literal_not_markup():
    from rich.console import Console

    from probembed.interfaces.search_command import print_result

    text = "lst[index] = value, then [/] and [bold]x[/bold]"
    hit = {"id": "a[1]", "score": 0.5, "std": 0.1, "weights": {"m": 1.0}, "text": text}
    console = Console(width=200, record=True)
    print_result({"query": "q[i]", "confidence": 0.5, "hits": [hit]}, console)
    shown = console.export_text()
    assert text in shown and "a[1]" in shown and "'q[i]'" in shown
    long = "why " * 20_000  # a 80,000-character query was the whole title
    console = Console(width=200, record=True)
    print_result({"query": long, "confidence": 0.5, "hits": [hit]}, console)
    shown = " ".join(console.export_text().split())
    assert "why why w…' confidence 0.50" in shown and shown.count("why") == 27  # 109 chars


def test_a_plain_ingest_says_how_many_documents_the_models_read_only_the_start_of(
    tmp_path, search_pipeline
):
    """A document past the shortest member's limit is embedded from its start alone: the CLI
    says how many, and that --chunk fits them; a chunked ingest has nothing to say."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "short.md").write_text("Jaguars are big cats.", encoding="utf-8")
    long = " ".join(f"word{i}" for i in range(600)) + " Octopuses have three hearts."
    (folder / "long.md").write_text(long, encoding="utf-8")
    assert search_pipeline.cut(["Jaguars are big cats.", long]).tolist() == [False, True]
    app = typer.Typer()
    register(app)
    pipe = str(search_pipeline.save(tmp_path / "pipe"))
    base = [str(folder), "--db", str(tmp_path / "db"), "--pipeline", pipe]
    plain = CliRunner().invoke(app, ["ingest", *base, "-c", "plain"])
    assert plain.exit_code == 0, plain.output
    said = " ".join(plain.output.split())
    assert "1 of 2 documents are longer than" in said and "--chunk" in said
    chunked = CliRunner().invoke(app, ["ingest", *base, "-c", "chunked", "--chunk"])
    assert chunked.exit_code == 0 and "longer than" not in chunked.output
    lines = tmp_path / "some-bad.jsonl"
    lines.write_text(f'{{"id": "a", "text": "{long}"}}\n{{"id": "b", "text": "bad \\ud800"}}\n')
    source = [str(lines), "--db", str(tmp_path / "db"), "--pipeline", pipe, "--on-error", "skip"]
    skipped = CliRunner().invoke(app, ["ingest", *source, "-c", "skipped"])
    said = " ".join(skipped.output.split())  # the record skipped for its text is not counted
    assert skipped.exit_code == 0 and "1 of 1 documents are longer" in said, skipped.output


#: A question past the built-ins' token limit (256) whose subject comes only at its end.
LONG_QUESTION = " ".join(["the history of football clubs in european leagues"] * 60) + (
    " how do volcanoes erupt lava"
)


#: Two facts: the long question's start is of the one, its end of the other.
FACTS = ["Volcanoes erupt molten rock called lava.", "Football is played by two sides."]


def _facts(tmp_path, pipeline) -> Collection:
    """A collection of FACTS, "v" and "f"."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest([Record("v", FACTS[0]), Record("f", FACTS[1])], collection, pipeline)
    return collection


def test_a_query_longer_than_the_models_read_is_searched_with_a_warning_saying_so(
    tmp_path, search_pipeline
):
    """A query past a member's token limit was searched by its start alone without a word
    (its hits answered the football it opens with, not the volcanoes it asks of at its end):
    it is still searched, and Python and the CLI warn, naming the pipeline and the limit."""
    collection = _facts(tmp_path, search_pipeline)
    assert search_pipeline.cut([LONG_QUESTION, FACTS[0]]).tolist() == [True, False]
    limit = search_pipeline.max_tokens
    told = (
        r"^a query is longer than pipeline 'retrieval' reads: its models read only its start "
        rf"\(the first {limit} tokens, the fewest any member reads\), so its "
    )
    with pytest.warns(QueryCutWarning, match=told + "hits answer that start;"):
        found = collection.search(LONG_QUESTION, k=1)
    assert found["hits"][0]["id"] == "f"  # the start's subject: what the warning is for
    with pytest.warns(QueryCutWarning, match=told + "hits answer that start;"):
        collection.search(["volcanoes", LONG_QUESTION], k=1)
    # BM25 reads the whole query: "only its start is searched" was untrue of a hybrid search
    hybrid = told + "dense hits answer that start while BM25 reads all of it;"
    with pytest.warns(QueryCutWarning, match=hybrid):
        collection.search(LONG_QUESTION, k=1, hybrid=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", QueryCutWarning)
        collection.search(["how do volcanoes erupt lava", FACTS[1]], k=1)
    args = ["search", LONG_QUESTION, "--db", str(tmp_path / "db"), "-c", "c", "-k", "1"]
    done = CliRunner().invoke(cli_app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)[0]["hits"][0]["id"] == "f"  # searched, not refused
    said = " ".join(done.stderr.split())
    assert "warning: a query is longer than pipeline 'retrieval' reads: its models read" in said
    assert f"(the first {limit} tokens, the fewest any member reads)" in said


def test_a_loop_of_long_queries_warns_once_with_the_details_as_attributes(
    tmp_path, search_pipeline
):
    """Each cut query's warning quoted its text and size, so Python's once-per-line filter
    showed one per query of a RAG loop; the message is one per pipeline, and which queries,
    their lengths and the limit are the warning's attributes. It is public where the store's
    errors are, and at the top (`probembed.QueryCutWarning`)."""
    assert probembed.QueryCutWarning is QueryCutWarning is search.QueryCutWarning
    collection = _facts(tmp_path, search_pipeline)
    longer = LONG_QUESTION + " and geysers"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own: once per message and line
        for question in (LONG_QUESTION, longer):
            collection.search(question, k=1)
    assert [w.category for w in caught] == [QueryCutWarning]
    told = caught[0].message
    assert isinstance(told, QueryCutWarning) and caught[0].filename == __file__
    assert (told.positions, told.characters) == ([0], [len(LONG_QUESTION)])
    assert told.limit == search_pipeline.max_tokens
    with pytest.warns(QueryCutWarning) as batch:
        collection.search(["volcanoes", longer, "lava", LONG_QUESTION], k=1)
    (told,) = [w.message for w in batch]
    assert isinstance(told, QueryCutWarning) and str(told) == str(caught[0].message)
    assert (told.positions, told.characters) == ([1, 3], [len(longer), len(LONG_QUESTION)])


class EightWords(HashingEncoder):
    """Hashing that reads 8 words at most: queries cut short in milliseconds."""

    max_tokens = 8

    def __init__(self, dim: int = 16) -> None:
        super().__init__(dim)
        self.name = "eight-words"


@pytest.fixture
def eight_words(tmp_path):
    """A collection of FACTS written by a pipeline of `EightWords`, registered so that the
    CLI loads the collection's copy of it; the database's path."""
    probembed.register_encoder("eight-words", EightWords)
    try:
        pipeline = Pipeline([make_estimator("perturb", EightWords())], name="eight", cache=False)
        collection = Database(tmp_path / "db", create=True).collection("c")
        ingest([Record("v", FACTS[0]), Record("f", FACTS[1])], collection, pipeline)
        yield tmp_path / "db"
    finally:
        encoders.REGISTERED.pop("eight-words")


def test_search_names_the_lines_of_a_file_it_cut_and_json_says_it_per_query(
    tmp_path, eight_words, monkeypatch
):
    """`search --file` with several long questions said "a query is longer" once, naming
    none of its lines, and `--json` had no `cut_at_tokens`: the warning names the lines
    (blank ones counted, the first 10 named) and the tokens, once; each JSON result carries
    `cut_at_tokens` as the service's does, null for a question read whole."""
    monkeypatch.chdir(tmp_path)
    long = "how do volcanoes erupt lava in the deep ocean and on islands"
    lines = ["volcanoes", "", *[long] * 5, "lava", *[f"{long} {i}" for i in range(8)]]
    Path("q.txt").write_text("\n".join(lines) + "\n")
    args = ["search", "--file", "q.txt", "--db", str(eight_words), "-c", "c", "-k", "1"]
    done = CliRunner().invoke(cli_app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    cut = [r["cut_at_tokens"] for r in json.loads(done.stdout)]
    assert cut == [None, *[8] * 5, None, *[8] * 8]
    said = " ".join(done.stderr.split())
    assert said.count("a query is longer than pipeline 'eight' reads") == 1
    named = "3, 4, 5, 6, 7, 9, 10, 11, 12, 13 and 3 more of --file q.txt"
    assert f"fewer words; cut at 8 tokens: lines {named}" in said
    table = CliRunner().invoke(cli_app, args)
    assert f"cut at 8 tokens: lines {named}" in " ".join(table.stderr.split())
    given = CliRunner().invoke(cli_app, ["search", "lava", long, *args[3:], "--json"])
    assert [r["cut_at_tokens"] for r in json.loads(given.stdout)] == [None, 8]
    assert "cut at 8 tokens: argument 2" in " ".join(given.stderr.split())
    whole = CliRunner().invoke(cli_app, ["search", "lava", *args[3:], "--json"])
    assert whole.stderr == "" and json.loads(whole.stdout)[0]["cut_at_tokens"] is None


def test_a_long_query_is_warned_of_before_it_is_searched(tmp_path, search_pipeline):
    """The warning came after the search, so `-W error` threw a finished search away, and a
    search refused (a bad filter) never said its query was cut short."""
    collection = _facts(tmp_path, search_pipeline)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(StoreError, match="nope"):
            collection.search(LONG_QUESTION, k=1, where="nope = 1")
    assert [w.category for w in caught] == [QueryCutWarning]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_long_ids_print_hits_as_lines_rather_than_squeeze_out_the_text(width):
    """A chunked folder's ids (`path/to/file.md#12`) took the table's width: at 80 and 100
    columns the text column was dropped and the score cut, at 120 the text had 7 characters
    a line. Stored escape sequences reached the terminal too (colours, the window title)."""
    from rich.console import Console

    from probembed.interfaces.search_command import print_result

    long_id = "projects/backend/services/authentication/docs/troubleshooting-guide.md#12"
    text = "Login fails when the token has expired \x1b[31mred\x1b[0m \x1b]0;pwned\x07"
    hit = {"id": long_id, "score": 0.4722, "std": 0.0123, "weights": {"m": 1.0}, "text": text}
    console = Console(width=width, record=True)
    print_result({"query": "login fails", "confidence": 0.5, "hits": [hit]}, console)
    shown = console.export_text()
    assert f"1. {long_id} 0.4722 ± 0.0123" in " ".join(shown.split())  # wrapped at 80
    folded = "".join(shown.split())
    assert "Loginfailswhenthetokenhasexpired\\x1b[31mred\\x1b[0m\\x1b]0;pwned\\x07" in folded
    assert "\x1b" not in shown and "\x07" not in shown
    short = {**hit, "id": "d0"}
    console = Console(width=width, record=True)
    print_result({"query": "login fails", "confidence": 0.5, "hits": [short]}, console)
    assert "┃ text" in console.export_text()  # a short id still leaves the text its table


def test_a_tuned_pipeline_is_refused_by_its_collection_until_it_replaces_the_copy(
    docs, hash_pipeline, sentences, tmp_path
):
    """A pipeline of the collection's vectors whose score, gamma and calibrator differ was
    silently ignored: "added 0, already stored 60", and every search kept the old settings
    (--min-p-relevant refused for want of a calibrator). It is refused naming what differs,
    before anything is written, until `record_pipeline(..., replace=True)` keeps it."""
    tuned = tuned_copy(hash_pipeline, sentences)
    assert tuned.fingerprint == hash_pipeline.fingerprint
    tuned.save(tmp_path / "tuned")
    loaded = Pipeline.load(tmp_path / "tuned", cache=False)  # as --pipeline DIR loads it
    version = docs.version
    for write in (
        lambda: ingest(records(sentences[:61]), docs, loaded),
        lambda: docs.record_pipeline(loaded),
        lambda: remove(docs, ["s0"], loaded),
    ):
        with pytest.raises(PipelineMismatchError, match=TUNED_CHANGES) as refused:
            write()
        assert "record_pipeline(pipeline, replace=True)" in str(refused.value)
    assert docs.version == version and docs.count() == 60  # nothing written, nothing removed
    kept = Database(docs.db.path).open("docs").load_pipeline()
    assert (kept.score, kept.adapt, kept.calibrator) == (hash_pipeline.score, AdaptConfig(), None)
    with pytest.raises(StoreError, match="has no relevance calibrator"):
        docs.search(QUERY, min_p_relevant=0.1)

    assert docs.record_pipeline(loaded, replace=True) == TUNED_CHANGES.split("; ")
    assert docs.record_pipeline(loaded, replace=True) == []  # the copy's own: nothing to replace
    report = ingest(records(sentences[:60]), docs, loaded)
    assert (report.added, report.already_stored) == (0, 60)
    for reader in (docs, Database(docs.db.path).open("docs")):  # this handle, and a new one
        own = reader.load_pipeline()
        assert (own.score, own.adapt, own.calibrator) == (
            tuned.score,
            tuned.adapt,
            tuned.calibrator,
        )
        hits = reader.search(QUERY, k=5, min_p_relevant=0.0)["hits"]
        assert hits and all(h["p_relevant"] is not None for h in hits)


def test_a_tuning_saved_under_another_name_writes_where_its_twin_made_the_collection(
    docs, hash_pipeline, sentences, tmp_path
):
    """`tune --out tuned-limit2` of the tuning kept as `tuned-limit` was refused ("changes
    them: relevance calibrator one -> another"): its calibrator differed only in the pipeline
    named in its fit record. It writes now; one whose calibrator computes otherwise is still
    refused."""
    tuned = tuned_copy(hash_pipeline, sentences)
    labelled = replace(tuned.calibrator, fit_info={"pipeline": "tuned-limit"})
    first = Pipeline(
        tuned.members, tuned.fusion, tuned.score, "tuned-limit", False, labelled, tuned.adapt
    )
    docs.record_pipeline(first, replace=True)
    relabelled = replace(labelled, fit_info={"pipeline": "tuned-limit2"})
    twin = Pipeline(
        first.members, first.fusion, first.score, "tuned-limit2", False, relabelled, first.adapt
    )
    twin.save(tmp_path / "tuned-limit2")
    report = ingest(
        records(sentences[60:62], 60), docs, Pipeline.load(tmp_path / "tuned-limit2", cache=False)
    )
    assert (report.added, docs.count()) == (2, 62)
    other = replace(
        labelled, logistic=replace(labelled.logistic, intercept=labelled.logistic.intercept + 1e-12)
    )
    with pytest.raises(PipelineMismatchError, match="relevance calibrator one -> another"):
        ingest(
            records(sentences[62:63], 62),
            docs,
            Pipeline(first.members, first.fusion, first.score, "t3", False, other, first.adapt),
        )
    assert docs.count() == 62


def test_a_handle_open_elsewhere_takes_a_replaced_copy_at_its_next_search(
    docs, hash_pipeline, sentences, tmp_path
):
    """A process holding the collection open (another `Database`: its own handles) kept the
    settings it had loaded after a replacement, until it reopened the collection; lent the
    models (`use_pipeline`, as a service lends its served pipeline's) too."""
    tuned = tuned_copy(hash_pipeline, sentences)
    open_elsewhere, lent = Database(docs.db.path).open("docs"), Database(docs.db.path).open("docs")
    lent.use_pipeline(hash_pipeline)
    for reader in (open_elsewhere, lent):
        assert reader.search(QUERY, k=3)["hits"][0]["p_relevant"] is None
    version = docs.version
    docs.record_pipeline(tuned, replace=True)
    assert docs.version == version + 1 and docs.count() == 60  # a mark, no row written
    for reader in (open_elsewhere, lent):
        hits = reader.search(QUERY, k=3, min_p_relevant=0.0)["hits"]
        assert hits and all(h["p_relevant"] is not None for h in hits)
        assert reader.load_pipeline().setting_changes(tuned) == []
    lent.use_pipeline(hash_pipeline)  # lent again, as the service does per request
    assert lent.load_pipeline().calibrator is not None and lent.version == docs.version


def test_cli_ingest_refuses_a_tuned_pipeline_until_replace_pipeline(
    docs, hash_pipeline, sentences, tmp_path
):
    """The CLI tells the refusal in its own terms (--replace-pipeline, leave out --pipeline)
    and exits 2; with --replace-pipeline it says what changed, and search reads p_relevant."""
    from probembed.interfaces.cli import app

    tuned_copy(hash_pipeline, sentences).save(tmp_path / "tuned")
    corpus = tmp_path / "corpus.jsonl"
    lines = [{"id": f"s{i}", "text": t, "n": i} for i, t in enumerate(sentences[:60])]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    base = ["--db", str(docs.db.path), "-c", "docs"]
    ingest_tuned = ["ingest", str(corpus), *base, "--pipeline", str(tmp_path / "tuned")]
    refused = CliRunner().invoke(app, ingest_tuned)
    assert refused.exit_code == 2, refused.output
    told = " ".join(refused.output.split())
    assert TUNED_CHANGES in told and "--replace-pipeline" in told, told
    assert "leave out --pipeline" in told and "record_pipeline" not in told
    alone = CliRunner().invoke(app, ["ingest", str(corpus), *base, "--replace-pipeline"])
    assert alone.exit_code == 2 and "--replace-pipeline needs --pipeline" in alone.output
    done = CliRunner().invoke(app, [*ingest_tuned, "--replace-pipeline"])
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert f"collection 'docs' now searches with 'tuned': {TUNED_CHANGES}" in said, said
    assert "added 0, already stored 60" in said
    found = CliRunner().invoke(app, ["search", QUERY, *base, "--min-p-relevant", "0.0", "--json"])
    assert found.exit_code == 0, found.output
    assert all(h["p_relevant"] is not None for h in json.loads(found.stdout)[0]["hits"])
