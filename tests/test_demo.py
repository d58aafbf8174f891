"""The `make run` demo: the datasets directory, the bundled Python docs, the CLI's output."""

import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from beir_data import write_beir
from rich.console import Console
from typer.testing import CliRunner

import probembed
from probembed import paths
from probembed.chunking import ChunkSettings
from probembed.encoders import available_encoders
from probembed.evaluation.datasets import load_retrieval
from probembed.evaluation.harness import Method, embed, evaluate
from probembed.evaluation.metrics import run_from_results
from probembed.interfaces.cli import app, inspect_table
from probembed.interfaces.demo_command import PYTHON_QUESTIONS
from probembed.interfaces.store_options import SEARCH_PIPELINE
from probembed.paths import DATASETS_ENV, datasets_dir
from probembed.pipeline import Pipeline, ScoreConfig
from probembed.store.pydoc_corpus import read_pydoc_topics, topic_document
from probembed.uncertainty import ESTIMATORS

#: Lines a third-party loader prints while it loads weights (transformers' tqdm bar).
WORD = re.compile(r"\S+")
UNDERLINE = re.compile(r"^[*=\-~^]{3,}$")
NOISE = re.compile(r"Loading weights|\d+it/s\]|\|\s*\d+/\d+ \[")
ROOT = Path(probembed.__file__).resolve().parents[1]


@pytest.fixture
def demo_pipe(hash_pipeline, tmp_path, monkeypatch) -> str:
    """The hashing pipeline saved for the demo, a cache of the test's own, 200 columns."""
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    return str(hash_pipeline.save(tmp_path / "hash"))


def test_datasets_dir_honours_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(DATASETS_ENV, str(tmp_path))
    assert datasets_dir() == tmp_path
    monkeypatch.setenv(DATASETS_ENV, "  ")  # blank counts as unset, as in `make VAR=`
    assert datasets_dir() == ROOT.parent / "shared" / "datasets"
    monkeypatch.delenv(DATASETS_ENV)
    assert datasets_dir() == ROOT.parent / "shared" / "datasets"


def test_datasets_dir_of_an_installed_package_is_beside_the_working_directory(
    monkeypatch, tmp_path
):
    monkeypatch.delenv(DATASETS_ENV, raising=False)
    site_packages = tmp_path / "lib" / "python3.11" / "site-packages"
    site_packages.mkdir(parents=True)  # a wheel's parent folder holds no pyproject.toml
    monkeypatch.setattr(paths, "_PACKAGE_PARENT", site_packages)
    assert datasets_dir() == Path("..", "shared", "datasets")


def test_pydoc_passages_are_chunks_of_each_topic_covering_every_word_in_order():
    from pydoc_data.topics import topics

    from probembed.store.chunked import chunk_records

    settings = ChunkSettings(64, 8)
    records = read_pydoc_topics(chunking=settings)
    assert len({r.id for r in records}) == len(records)
    assert len({r.text for r in records}) == len(records)  # a passage repeated is left out
    assert records == read_pydoc_topics(chunking=settings)  # deterministic, ids included
    by_topic: dict[str, list] = {}
    for record in records:
        by_topic.setdefault(record.metadata["doc_id"], []).append(record)
    seen: set[str] = set()
    for topic in topics:
        document = topic_document(topic, topics[topic])
        passages = chunk_records(document, lambda ts: [len(t.split()) for t in ts], settings)
        # what is read: the topic's passages but those an earlier topic gave word for word
        assert by_topic.get(topic, []) == [p for p in passages if p.text not in seen]
        seen.update(p.text for p in passages)
        assert [p.id for p in passages] == [f"{topic}#{n}" for n in range(len(passages))]
        covered: set[int] = set()
        for passage in passages:
            meta = passage.metadata
            assert passage.text == document.text[meta["start"] : meta["end"]]
            assert len(passage.text.split()) <= settings.max_tokens  # tokens are words here
            covered |= {m.start() for m in WORD.finditer(document.text, meta["start"], meta["end"])}
        assert covered == {m.start() for m in WORD.finditer(document.text)}
        # the document is the topic's own words, only the underlines of its headings left out
        raw, kept = topics[topic].split(), iter(topics[topic].split())
        assert all(word in kept for word in document.text.split())  # in order: a subsequence
        dropped = Counter(raw) - Counter(document.text.split())
        assert all(UNDERLINE.match(word) for word in dropped)


def test_pydoc_passages_carry_titles_and_heading_paths_of_the_topic():
    passages = read_pydoc_topics(["try"])
    first = passages[0].metadata
    assert (first["topic"], first["doc_id"], first["title"]) == (
        "try",
        "try",
        'The "try" statement',
    )
    assert first["heading"] == 'The "try" statement' and first["start"] == 0
    headings = {p.metadata["heading"] for p in passages}
    assert 'The "try" statement > "except" clause' in headings
    assert 'The "try" statement > "finally" clause' in headings
    for passage in passages:  # a section's first passage starts with its heading
        heading = passage.metadata["heading"].split(" > ")[-1]
        if passage.metadata["chunk"] == min(
            p.metadata["chunk"] for p in passages if p.metadata["heading"].endswith(heading)
        ):
            assert passage.text.startswith(heading)


def test_pydoc_passages_fit_the_pipeline_they_are_cut_for(search_pipeline):
    passages = read_pydoc_topics(["try", "with"], search_pipeline)
    limit = ChunkSettings().capped(search_pipeline.max_tokens).max_tokens
    assert max(search_pipeline.count_tokens([p.text for p in passages])) <= limit
    words = read_pydoc_topics(["try", "with"])  # counted in words: other cuts
    assert [p.text for p in words] != [p.text for p in passages]


def test_pydoc_reader_rejects_unknown_topics():
    with pytest.raises(ValueError, match=r"unknown pydoc topic\(s\) \['trie'\]; known: .*try"):
        read_pydoc_topics(["try", "trie"])


def test_inspect_table_fits_80_columns_with_every_model_name_whole():
    rng = np.random.default_rng(0)
    names = [info.name for info in available_encoders()]
    # u x1000 of the built-ins runs from 0 to about 1,400 (six characters with the decimal);
    # draw up to 1,500 so every cell is as wide as the widest real one.
    rows = [(name, kind, rng.uniform(0.05, 1.5, size=5)) for name in names for kind in ESTIMATORS]
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(inspect_table(5, rows))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    assert [(c[0], c[1]) for c in cells] == [(name, kind) for name, kind, _ in rows]
    assert "…" not in console.export_text()


def test_inspect_shows_a_zero_variance_as_unmeasured_not_as_certain():
    """Word dropout has nothing to drop in one word: u = 0 there means no measurement."""
    rows = [("minilm", "perturb", np.array([0.0, 0.002, 0.001])),
            ("minilm", "laplace", np.array([0.004, 0.003, 0.002]))]  # fmt: skip
    console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(inspect_table(3, rows))
    text = console.export_text()
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines()
             if line.startswith("│")]  # fmt: skip
    assert cells == [["minilm", "perturb", "n/a", "2.0", "1.0", "n/a"],
                     ["minilm", "laplace", "4.0", "3.0", "2.0", "2.00"]]  # fmt: skip
    assert "no spread measured" in " ".join(text.split())


def _cli(*args: str, tmp_path: Path, columns: int) -> subprocess.CompletedProcess:
    """Run the probembed CLI as `make run` does: a fresh process, its own cache, no data."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PROBEMBED_CACHE_DIR": str(tmp_path / "cache"),
        DATASETS_ENV: str(tmp_path / "no-datasets"),
        "COLUMNS": str(columns),
    }
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)  # the CLI must silence loaders by itself
    command = [sys.executable, "-m", "probembed.interfaces.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)


def test_demo_without_data_answers_python_questions_from_the_bundled_docs(
    search_pipeline, tmp_path
):
    done = _cli("demo", "--topic", "try", "--topic", "with", tmp_path=tmp_path, columns=200)
    assert done.returncode == 0, done.stderr
    assert "passages of the Python" in done.stderr
    # documents are indexed by the built-in tuned for search unless --pipeline says otherwise
    assert search_pipeline.name == SEARCH_PIPELINE
    assert [p.name for p in (tmp_path / "cache" / "demo").iterdir()] == [
        search_pipeline.fingerprint
    ]
    assert not NOISE.search(done.stdout + done.stderr), done.stderr
    titles = [done.stdout.find(question) for question in PYTHON_QUESTIONS]
    assert -1 not in titles and titles == sorted(titles)  # every question answered, in order
    sections = [done.stdout[a:b] for a, b in zip(titles, [*titles[1:], None], strict=True)]
    for section in sections:
        assert re.search(r"confidence (\d\.\d\d)", section)
        assert len(re.findall(r"\d\.\d{4} ± \d\.\d{4}", section)) == 3
        assert set(re.findall(r"│ ([a-z-]+)#\d+ ", section)) <= {"try", "with"}
    first_hit = re.compile(r"│ 1 │ ([a-z-]+)#\d+ ")
    assert first_hit.search(sections[0]).group(1) == "try"  # "How do I catch an exception?"
    assert first_hit.search(sections[1]).group(1) == "with"  # "What does the with statement do?"


def test_inspect_prints_no_loader_progress_and_fits_80_columns(default_pipeline, tmp_path):
    """As `make run` runs it: every built-in, whose rows differ by estimator, so no row is
    named by its pipeline (naming them all cut every cell short at 80 columns)."""
    done = _cli("inspect", tmp_path=tmp_path, columns=80)
    assert done.returncode == 0, done.stderr
    assert not NOISE.search(done.stdout + done.stderr), done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    for name in default_pipeline.models:
        assert re.search(rf"│ +{name} │ +laplace │", done.stdout)
    assert "…" not in done.stdout


def test_inspect_shows_a_texts_control_characters_as_escapes(hash_pipeline, tmp_path):
    """`inspect` printed a text as given: an escape sequence in it reached the terminal."""
    pipe = str(hash_pipeline.save(tmp_path / "hash"))
    done = CliRunner().invoke(
        app, ["inspect", "--pipeline", pipe, "--text", "evil\x1b]0;TITLE\x07"]
    )
    assert done.exit_code == 0, done.output
    assert "evil\\x1b]0;TITLE\\x07" in done.stdout and "\x1b]0;" not in done.stdout


def test_demo_restricts_search_to_the_topics_asked_for(demo_pipe):
    runner = CliRunner()
    first = runner.invoke(app, ["demo", "--pipeline", demo_pipe, "--topic", "with"])
    assert first.exit_code == 0, first.output
    second = runner.invoke(
        app, ["demo", "--pipeline", demo_pipe, "--topic", "try", "--queries", "2"]
    )
    assert second.exit_code == 0, second.output
    # The collection now holds both topics; the second run must only show what it asked for.
    ids = re.findall(r"│ ([a-z-]+)#\d+ ", second.stdout)
    assert len(ids) == 2 * 3 and set(ids) == {"try"}
    assert PYTHON_QUESTIONS[1] in second.stdout and PYTHON_QUESTIONS[2] not in second.stdout


def test_a_demo_cache_written_before_a_release_refit_the_pipeline_takes_its_settings(
    hash_pipeline, tmp_path, monkeypatch
):
    """A release that refits a built-in's calibrator keeps its vectors (the fingerprint): the
    demo's cached collection kept the old copy and the demo, its only writer, was refused
    ("keeps its pipeline's score, adaptation and calibrator"): `make run` failed after an
    upgrade. The demo gives its cache the pipeline's settings of this release."""
    from dataclasses import replace

    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    before = str(hash_pipeline.save(tmp_path / "before"))
    runner = CliRunner()
    first = runner.invoke(app, ["demo", "--pipeline", before, "--topic", "with"])
    assert first.exit_code == 0, first.output
    score = replace(hash_pipeline.score, beta=hash_pipeline.score.beta * 2)
    refit = Pipeline(hash_pipeline.members, hash_pipeline.fusion, score, "hash", cache=False)
    after = str(refit.save(tmp_path / "after"))
    again = runner.invoke(app, ["demo", "--pipeline", after, "--topic", "with"])
    assert again.exit_code == 0, again.output
    assert "the cached index takes 'hash''s settings of this release: score uec beta" in " ".join(
        again.output.split()
    )


def test_demo_without_data_falls_back_to_all_the_python_docs(
    hash_pipeline, demo_pipe, tmp_path, monkeypatch
):
    from pydoc_data.topics import topics

    monkeypatch.setenv(DATASETS_ENV, str(tmp_path / "no-datasets"))
    done = CliRunner().invoke(app, ["demo", "--pipeline", demo_pipe])
    assert done.exit_code == 0, done.output
    assert f"no SciFact at {tmp_path / 'no-datasets' / 'retrieval' / 'scifact'}" in done.output
    assert f"indexing {len(read_pydoc_topics(pipeline=hash_pipeline))} passages" in done.output
    assert all(question in done.stdout for question in PYTHON_QUESTIONS)
    assert set(re.findall(r"│ ([a-z-]+)#\d+ ", done.stdout)) <= set(topics)


#: SciFact documents no test query judges that `scifact_sample` keeps beside the judged ones.
UNJUDGED = 500


def scifact_sample(datasets: Path, root: Path) -> Path:
    """A datasets folder of its own under `root` whose retrieval/scifact holds SciFact's test
    queries and qrels, the documents they judge and a seeded UNJUDGED others (of 5,183): the
    demo finds and scores it as it does SciFact, at a sixth of the encoding."""
    source, sample = datasets / "retrieval" / "scifact", root / "retrieval" / "scifact"
    (sample / "qrels").mkdir(parents=True)
    qrels = (source / "qrels" / "test.tsv").read_text(encoding="utf-8")
    (sample / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    (sample / "queries.jsonl").write_bytes((source / "queries.jsonl").read_bytes())
    judged = {line.split("\t")[1] for line in qrels.splitlines()[1:]}
    lines = (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    unjudged = [i for i, line in enumerate(lines) if json.loads(line)["_id"] not in judged]
    kept = np.random.default_rng(0).choice(unjudged, UNJUDGED, replace=False).tolist()
    dropped = set(unjudged) - set(kept)
    chosen = [line for i, line in enumerate(lines) if i not in dropped]
    (sample / "corpus.jsonl").write_text("".join(chosen), encoding="utf-8")
    return root


def test_demo_with_scifact_reports_ndcg(hash_pipeline, demo_pipe, datasets, monkeypatch, tmp_path):
    sample = scifact_sample(datasets, tmp_path / "datasets")
    monkeypatch.setenv(DATASETS_ENV, str(sample))
    done = CliRunner().invoke(app, ["demo", "--pipeline", demo_pipe, "--queries", "1"])
    assert done.exit_code == 0, done.output
    corpus = (sample / "retrieval" / "scifact" / "corpus.jsonl").read_text(encoding="utf-8")
    documents = sum(1 for line in corpus.splitlines() if line.strip())
    rows = re.findall(rf"│ +{documents} │ +([a-z]+) │ +dense │ +(\d+\.\d\d) │", done.stdout)
    assert re.search(r"scifact: 300 test queries", done.stdout)
    assert [name for name, _ in rows] == list(dict.fromkeys([hash_pipeline.score.name, "dot"]))
    hybrid = rf"│ +{documents} │ +{hash_pipeline.score.name} │ +dense \+ BM25 \(RRF\) │"
    assert re.search(hybrid + r" +\d+\.\d\d │", done.stdout)
    # the same pipeline and scores through the evaluation harness (an exact scan, as the demo's
    # rows are scanned too): equal up to the two decimals printed
    bench = load_retrieval(sample / "retrieval" / "scifact", "test")
    embedded = embed(hash_pipeline, bench)
    for name, shown in rows:
        beta = hash_pipeline.score.beta if name == "uec" else 0.0
        method = Method(name, hash_pipeline.fusion, ScoreConfig(name, beta))
        expected = 100 * evaluate(embedded, bench, method).metrics["ndcg@10"]
        assert float(shown) == pytest.approx(expected, abs=0.005 + 1e-9)


def test_demo_rejects_bad_options_cleanly(tmp_path):
    done = CliRunner().invoke(app, ["demo", "--data", str(tmp_path), "--topic", "try"])
    assert done.exit_code == 2 and "--topic picks passages" in done.output
    done = CliRunner().invoke(app, ["demo", "--queries", "0"])
    assert done.exit_code == 2 and "--queries must be at least 1, got 0" in done.output


def test_the_demo_run_drops_self_matches_and_keeps_k_hits_in_rank_order():
    hits = [{"id": i} for i in ("d1", "q1", "d2", "d3")]
    run = run_from_results(["q1"], [{"hits": hits}], k=2)
    assert run == {"q1": {"d1": 2.0, "d2": 1.0}}


def test_demo_keeps_two_corpora_of_one_name_apart(demo_pipe, tmp_path):
    """d1/corpus.jsonl and d2/corpus.jsonl: each run searches its own documents only."""
    for folder, text in (("d1", "the jaguar is a large cat"), ("d2", "rivers flow to the sea")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "corpus.jsonl").write_text(f'{{"id": "{folder}", "text": "{text}"}}\n')
    runs = [
        CliRunner().invoke(
            app, ["demo", "--pipeline", demo_pipe, "--data", str(tmp_path / d / "corpus.jsonl")]
        )
        for d in ("d1", "d2")
    ]
    assert all(run.exit_code == 0 for run in runs), [run.output for run in runs]
    assert "1 items indexed" in runs[1].output  # not 2: d1's document is not in d2's collection
    names = [re.search(r"--collection (\S+)", run.output).group(1) for run in runs]
    assert names[0] != names[1] and all(n.startswith("corpus-") for n in names)


def test_a_demo_re_run_takes_in_a_document_edited_in_place(demo_pipe, tmp_path):
    """The demo's cached collection follows its corpus: an edited document is stored as it
    now reads, an unchanged one is left alone, a removed one goes."""
    from probembed.store import Database

    corpus = tmp_path / "corpus.jsonl"
    lines = ['{"id": "a", "text": "the jaguar is a large cat"}', '{"id": "b", "text": "%s"}']

    def run(text: str) -> str:
        corpus.write_text("\n".join(lines) % text + "\n")
        result = CliRunner().invoke(app, ["demo", "--pipeline", demo_pipe, "--data", str(corpus)])
        assert result.exit_code == 0, result.output
        return result.output

    run("rivers flow to the sea")
    output = run("glaciers carve the valleys")
    assert "updated 1, unchanged 1" in output
    db = re.search(r"--db (\S+)", output).group(1)
    name = re.search(r"--collection (\S+)", output).group(1)
    rows = Database(db).open(name).rows(["b"])
    assert rows["b"]["text"] == "glaciers carve the valleys"
    lines[1] = '{"id": "b", "text": "%s", "title": 5}'  # a line turned bad names 'b'
    assert "removed" not in run("glaciers")  # it was deleted, where --sync keeps it
    assert Database(db).open(name).ids() == {"a", "b"}
    lines[1] = '{"id": "b", "text": "%s"}'
    lines.pop(0)  # the corpus loses a document: so does the demo's collection
    assert "removed 1 item(s) no longer in the corpus" in " ".join(run("glaciers").split())
    assert Database(db).open(name).ids() == {"b"}
    # an export whose one bad byte makes the whole array one bad item that names no document:
    # the re-run took its documents for gone and emptied the cached collection
    export = tmp_path / "export.json"
    args = ["demo", "--pipeline", demo_pipe, "--data", str(export)]
    export.write_text('[{"id": "x", "text": "the jaguar"}, {"id": "y", "text": "rivers"}]')
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    kept = re.search(r"--collection (\S+)", first.output).group(1)
    export.write_bytes(b'[{"id": "x", "text": "the jaguar"}, {"id": "y", "text": "caf\xe9"}]')
    again = CliRunner().invoke(app, args)
    said = "kept 2 stored item(s) the corpus no longer holds: 1 bad item(s) name no document"
    assert said in " ".join(again.output.split())
    assert Database(db).open(kept).ids() == {"x", "y"}


def test_a_demo_of_a_folder_drops_a_deleted_file_beside_one_it_cannot_read(
    demo_pipe, tmp_path, monkeypatch
):
    """A folder is cut into passages kept in step with its files: an empty (or binary, or
    Latin-1) file named no document, so nothing was removed and a deleted file stayed
    searchable; each file was one vector of its start. A corpus of nothing but bad items
    exited 0 and suggested a search of a collection that was never made. The suggested
    search runs as printed, from a cache whose path holds a space."""
    from probembed.store import Database

    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "my cache"))
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("Apples grow on trees in orchards. " * 200)  # many passages
    (notes / "b.txt").write_text("Volcanoes erupt molten lava.")
    (notes / "empty.txt").write_text("")
    args = ["demo", "--pipeline", demo_pipe, "--data", str(notes)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output  # an empty file has no text: no bad item
    assert "with no text to index, not stored (e.g. 'empty.txt')" in first.output, first.output
    (notes / "b.txt").unlink()
    again = CliRunner().invoke(app, args)
    assert "documents added 0, updated 0, removed 1, unchanged 1" in again.output, again.output
    suggested = again.output.split("search them with: probembed ")[1].split(" (--group")[0]
    command = shlex.split(suggested)
    assert command[:2] == ["search", "your question"]
    db, name = command[command.index("--db") + 1], command[command.index("--collection") + 1]
    ids = Database(db).open(name).ids()
    assert len(ids) > 1 and {i.partition("#")[0] for i in ids} == {"a.txt"}
    searched = CliRunner().invoke(app, [*command, "--group-by-doc", "--json"])
    assert searched.exit_code == 0 and '"doc_id": "a.txt"' in searched.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": ""}\n{"text": "no id"}\n')
    nothing = CliRunner().invoke(app, ["demo", "--pipeline", demo_pipe, "--data", str(bad)])
    assert nothing.exit_code == 2 and f"nothing indexed from {bad}" in nothing.output


def test_a_demo_of_a_folder_reads_a_link_out_of_it_only_with_follow_links(demo_pipe, tmp_path):
    """The demo's folder is walked as ingest walks one: a link out of it was read silently."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("Volcanoes erupt molten lava.")
    (tmp_path / "secret.txt").write_text("The launch code is 4242.")
    (notes / "leak.txt").symlink_to(tmp_path / "secret.txt")
    args = ["demo", "--pipeline", demo_pipe, "--data", str(notes)]
    first = CliRunner().invoke(app, args)
    said = " ".join(first.output.split())
    assert first.exit_code == 0 and "documents added 1," in said, first.output
    assert f"leak.txt -> {os.path.realpath(tmp_path / 'secret.txt')} (--follow-links" in said
    followed = CliRunner().invoke(app, [*args, "--follow-links"])
    assert "documents added 1, updated 0, removed 0, unchanged 1" in followed.output


def test_demo_refuses_a_beir_set_it_cannot_score_before_indexing_it(demo_pipe, tmp_path):
    """One bad corpus line was skipped while everything else was indexed, then the scoring
    read the set strictly and failed on it: minutes of indexing for an error."""
    docs = [{"_id": f"d{i}", "text": f"document {i} about cats"} for i in range(5)]
    beir = write_beir(tmp_path / "set", docs, [{"_id": "q", "text": "cats"}], [("q", "d1", 1)])
    with (beir / "corpus.jsonl").open("a") as corpus:
        corpus.write('{"_id": "d9", "text": \n')
    result = CliRunner().invoke(app, ["demo", "--pipeline", demo_pipe, "--data", str(beir)])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "corpus.jsonl:6: malformed JSON" in said and "indexing" not in said


def test_inspect_of_ones_own_texts_claims_no_order_and_one_text_no_ratio():
    """The caption said "short text over long" whatever texts were given, and one text got a
    t1/t1 = 1.00 column."""
    rows = [("minilm", "laplace", np.array([0.004, 0.003]))]
    for n, examples, caption in (
        (2, True, "t1/t2 = u(t1) / u(t2): short text over long"),
        (2, False, "t1/t2 = u(t1) / u(t2)"),
        (1, False, None),
    ):
        table = inspect_table(n, [(m, k, u[:n]) for m, k, u in rows], examples=examples)
        assert table.caption == caption
        assert [c.header for c in table.columns][2:] == [f"t{i}" for i in range(1, n + 1)] + (
            [f"t1/t{n}"] if n > 1 else []
        )
