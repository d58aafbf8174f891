"""`probembed eval` end to end on every dataset kind, checked against the harness run directly."""

import json
from pathlib import Path

import numpy as np
import pytest
from beir_data import pairs_as_beir, write_beir
from scipy.stats import spearmanr
from typer.testing import CliRunner

from probembed.evaluation.datasets import load_dataset
from probembed.evaluation.harness import (
    RETRIEVAL_METRIC,
    Method,
    embed,
    evaluate,
    primary_metric,
)
from probembed.evaluation.report import compare, file_stem
from probembed.evaluation.tuning import tune
from probembed.fusion import uncertainty
from probembed.interfaces.cli import app
from probembed.interfaces.console import PIPED_WIDTH
from probembed.interfaces.eval_commands import find_dev, own_figures
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline

DATA = Path(__file__).parent / "data"
runner = CliRunner()

KINDS = {
    "sts": DATA / "sts" / "toy",
    "retrieval": DATA / "retrieval" / "toy",
    "classification": DATA / "classification" / "toy",
}


@pytest.fixture(scope="module")
def pipeline_dir(hash_pipeline, tmp_path_factory) -> Path:
    """The fast hashing pipeline as a directory, the form `--pipeline DIR` reads."""
    return hash_pipeline.save(tmp_path_factory.mktemp("pipeline") / "hash")


def _eval(args: list[str], pipeline_dir: Path, out: Path) -> dict:
    """Run `probembed eval` writing JSON rows, fail with the output if it did not exit 0."""
    result = runner.invoke(
        app, ["eval", *args, "--pipeline", str(pipeline_dir), "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    payload["output"] = _unwrapped(result.output)
    payload["stdout"], payload["stderr"] = result.stdout, _unwrapped(result.stderr)
    return payload


def _unwrapped(output: str) -> str:
    """The output with rich's line wrapping undone, so phrases can be searched for."""
    return " ".join(output.split())


def _values(rows: list[dict], metric: str) -> dict[str, float]:
    """method -> value of one metric on the reported split."""
    return {r["method"]: r["value"] for r in rows if r["metric"] == metric}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_eval_reports_the_harness_figures(kind, pipeline_dir, tmp_path):
    path = KINDS[kind]
    payload = _eval([str(path)], pipeline_dir, tmp_path / "rows.json")
    pipe = Pipeline.load(pipeline_dir, cache=False)
    test = load_dataset(path)
    direct = evaluate(embed(pipe, test), test, Method("uec", pipe.fusion, pipe.score)).metrics
    # the same pipeline encodes the same texts in the same batches, and JSON round-trips a
    # float exactly: the figures are identical, not merely close
    reported = {r["metric"]: r["value"] for r in payload["rows"]}
    assert reported == direct
    assert {r["split"] for r in payload["rows"]} == {"test"}
    metric = primary_metric(test)
    assert f"{100 * direct[metric]:.2f}" in payload["stdout"]  # the table on stdout,
    assert "wrote" not in payload["stdout"] and "rows to" in payload["stderr"]  # notes not


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_eval_compare_reports_the_harness_figures(kind, pipeline_dir, tmp_path):
    path = KINDS[kind]
    payload = _eval([str(path), "--compare"], pipeline_dir, tmp_path / "rows.json")
    pipe = Pipeline.load(pipeline_dir, cache=False)
    test = load_dataset(path)
    dev_split = None if kind == "classification" else find_dev(path, "test")
    assert payload["config"]["tuned_on"] == dev_split
    dev = load_dataset(path, dev_split) if dev_split else None
    direct = compare(pipe, test, dev)
    metric = primary_metric(test)
    cli, expected = _values(payload["rows"], metric), _values(direct.rows, metric)
    assert set(cli) == {*(f"single:{m}" for m in pipe.models), "mean", "concat", "uec"} | (
        {"weighted", "hash as shipped"} if dev else set()
    )
    assert cli == expected  # identical for the reason given in the test above
    assert f"{100 * expected['uec']:.2f}" in payload["output"]
    # the split tuned on is said, on stderr and in the table's heading, not only in the JSON
    assert (f"tuning on toy {dev_split}" in payload["stderr"]) == (dev is not None)
    assert (f"tuned on {dev_split}" in payload["stdout"]) == (dev is not None)
    # without a split to tune on, the uec row is the pipeline as shipped, and it is said
    assert ("the uec row is hash as shipped" in payload["stderr"]) == (dev is None)
    if dev is None:  # the reason that holds, not both
        why = "its probe trains on" if kind == "classification" else "it has no dev or train"
        assert f"({why}" in payload["stderr"] and payload["stderr"].count("(it") == 1


def test_the_tuning_figures_are_rows_of_the_split_tuned_on_under_their_own_key(
    pipeline_dir, tmp_path
):
    """They were `{"split": "test", "metric": "dev", ...}` among the rows: a figure on dev,
    tagged with the reported split, under a key that names no metric; and, as rows of their
    split in the primary metric, a reader keyed by method and metric took them for the test
    figures (a review). They have a key of their own."""
    path = KINDS["sts"]
    payload = _eval([str(path), "--compare"], pipeline_dir, tmp_path / "rows.json")
    pipe = Pipeline.load(pipeline_dir, cache=False)
    dev = load_dataset(path, "train")  # the toy set's only split besides test
    reached = tune([(embed(pipe, dev), dev)]).dev  # what tuning chose by, on dev
    assert payload["tuning"] == [
        {"dataset": "toy", "split": "train", "method": m, "metric": "spearman", "value": reached[m]}
        for m in ("weighted", "uec")
    ]
    assert not [r for r in payload["rows"] if r["metric"] == "dev"]
    assert {r["split"] for r in payload["rows"]} == {"test"}
    shown = _values(payload["rows"], "spearman")  # the table shows the test figures alone
    assert f"{100 * shown['uec']:.2f}" in payload["stdout"]  # 50.00, on train 100.00
    assert reached["uec"] != shown["uec"] and f"{100 * reached['uec']:.2f}" not in payload["stdout"]


@pytest.mark.parametrize("compare_flag", [[], ["--compare"]])
def test_eval_on_a_pairs_file_is_a_clear_error(compare_flag, pipeline_dir):
    path = DATA / "pairs" / "toy-pairs.tsv"
    result = runner.invoke(app, ["eval", str(path), "--pipeline", str(pipeline_dir), *compare_flag])
    assert result.exit_code == 2, result.output
    assert "toy-pairs.tsv" in result.output and "probembed fit" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (
            ["--json", "{tmp}/nodir/rows.json"],
            "--json {tmp}/nodir/rows.json: no directory {tmp}/nodir",
        ),
        (["--json", "{tmp}"], "--json {tmp}: is a directory"),
        (
            ["--compare", "--plots", "{tmp}/file/plots"],
            "--plots {tmp}/file/plots: {tmp}/file is a file",
        ),
        (["--tune-on", "dev"], "--tune-on needs --compare"),
    ],
)
def test_eval_refuses_outputs_and_options_it_cannot_honour_before_the_evaluation(
    pipeline_dir, tmp_path, options, said
):
    """Each failed (or was ignored) only after the whole evaluation ran; the dataset path
    does not exist, so a refusal naming the option came first."""
    (tmp_path / "file").write_text("not a folder")
    options = [o.format(tmp=tmp_path) for o in options]
    result = runner.invoke(
        app, ["eval", str(tmp_path / "nothing"), "--pipeline", str(pipeline_dir), *options]
    )
    assert result.exit_code == 2, result.output
    assert "".join(said.format(tmp=tmp_path).split()) in "".join(result.output.split())


def test_eval_refuses_to_tune_on_the_split_it_reports(pipeline_dir, tmp_path):
    """Tuned on the reported split, `weighted` and `uec` beat every baseline by 10 points."""
    args = [str(KINDS["sts"]), "--compare", "--tune-on", "test", "--json", str(tmp_path / "r")]
    result = runner.invoke(app, ["eval", *args, "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2, result.output
    assert "--tune-on test is the split being reported" in _unwrapped(result.output)
    assert not (tmp_path / "r").exists()


CORPUS = [
    {"_id": "d1", "title": "Cats", "text": "Cats purr when content."},
    {"_id": "d2", "title": "", "text": "Dogs bark at strangers."},
    {"_id": "d3", "text": "Fish breathe through gills."},
]
QUERIES = [{"_id": "q1", "text": "why do cats purr"}, {"_id": "q2", "text": "how do fish breathe"}]


def test_eval_warns_about_judged_documents_missing_from_the_corpus(pipeline_dir, tmp_path):
    """The warning counted documents alone: "8 judged documents missing" where 8 of 80
    queries could then only score 0; it says how many queries lose one, and are left with
    none, and --json counts them."""
    queries = [*QUERIES, {"_id": "q3", "text": "do dogs bark"}]
    judged = [("q1", "d1", 1), ("q1", "gone", 1), ("q2", "d3", 1), ("q3", "lost", 1)]
    data = write_beir(tmp_path / "beir", CORPUS, queries, [*judged, ("q2", "unseen", 0)])
    payload = _eval([str(data)], pipeline_dir, tmp_path / "rows.json")
    said = payload["stderr"]
    assert "warning:" in said and "3 judged documents missing" in said and "'gone'" in said
    # a missing document judged 0 costs its query nothing
    assert "2 of 3 judged queries lose a relevant document to them, 1 of those left" in said
    assert payload["config"]["queries_short_of_relevant"] == 2
    assert payload["config"]["queries_with_none_relevant_in_corpus"] == 1
    # all three documents are within the top 100, so only the missing ones are never retrieved
    assert _values(payload["rows"], "recall@100") == {"hash": (0.5 + 1.0 + 0.0) / 3}


def test_eval_strict_refuses_judged_documents_missing_from_the_corpus(pipeline_dir, tmp_path):
    data = write_beir(tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1), ("q1", "gone", 1)])
    args = ["eval", str(data), "--pipeline", str(pipeline_dir), "--strict"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    output = _unwrapped(result.output)
    assert "1 judged document missing" in output and "'gone'" in output
    assert "Traceback" not in output


@pytest.mark.parametrize("command", ["eval", "tune"])
def test_a_beir_file_given_for_its_folder_is_refused_naming_the_folder(
    pipeline_dir, tmp_path, command
):
    """`eval scifact/corpus.jsonl` said "unknown header" and quoted the whole first record
    (1,500 characters of abstract) as that header."""
    data = write_beir(tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1)])
    (tmp_path / "notes.jsonl").write_text(json.dumps({"text": "x" * 500}) + "\n")
    for given, said in (
        (data / "corpus.jsonl", f"a file of the BEIR dataset {data}, not a split; give the folder"),
        (data / "queries.jsonl", f"a file of the BEIR dataset {data}, not a split"),
        (tmp_path / "notes.jsonl", "notes.jsonl: a JSONL file, not a split"),
    ):
        args = (
            ["tune", str(pipeline_dir), str(given), "--out", str(tmp_path / "tuned")]
            if command == "tune"
            else ["eval", str(given), "--pipeline", str(pipeline_dir)]
        )
        result = runner.invoke(app, args)
        output = "".join(result.output.split())
        assert result.exit_code == 2, result.output
        assert "".join(said.split()) in output, result.output
        assert "unknownheader" not in output and "xxxx" not in output


def test_eval_options_are_named_in_refusals_and_an_unlearnable_label_in_a_warning(
    pipeline_dir, tmp_path
):
    """They said `keep_self_matches applies to ...` and `without strict they count ...`;
    a test label no train row has was scored as wrong without a word."""
    classification = KINDS["classification"]
    result = runner.invoke(app, ["eval", str(classification), "--keep-self-matches"])
    assert result.exit_code == 2 and "--keep-self-matches applies to retrieval datasets only" in (
        _unwrapped(result.output)
    )
    data = write_beir(tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1), ("q1", "gone", 1)])
    result = runner.invoke(app, ["eval", str(data), "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 0 and "without --strict they count" not in result.output
    result = runner.invoke(app, ["eval", str(data), "--pipeline", str(pipeline_dir), "--strict"])
    assert result.exit_code == 2 and "without --strict they count" in _unwrapped(result.output)
    odd = tmp_path / "cls"
    odd.mkdir()
    (odd / "train.tsv").write_text((classification / "train.tsv").read_text())
    test = (classification / "test.tsv").read_text()
    (odd / "test.tsv").write_text(test + "an odd one\tweird\n")
    payload = _eval([str(odd)], pipeline_dir, tmp_path / "odd.json")
    assert "1 label(s) in no row of train.tsv ('weird')" in payload["stderr"]


@pytest.mark.parametrize("hybrid", [[], ["--hybrid"]])
def test_eval_drops_self_matches_unless_asked_to_keep_them(hybrid, pipeline_dir, tmp_path):
    # the query is also a corpus document, with the same text: it would rank itself first
    corpus = [*CORPUS, {"_id": "q1", "text": "why do cats purr"}]
    data = write_beir(tmp_path / "beir", corpus, QUERIES[:1], [("q1", "d1", 1)])
    without = write_beir(tmp_path / "without", CORPUS, QUERIES[:1], [("q1", "d1", 1)])
    dropped = _eval([str(data), *hybrid], pipeline_dir, tmp_path / "a.json")["rows"]
    reference = _eval([str(without), *hybrid], pipeline_dir, tmp_path / "b.json")["rows"]
    assert _values(dropped, "mrr@10") == _values(reference, "mrr@10")
    if hybrid:  # kept, the query's own document is BM25's first hit as well as dense's
        kept = _eval([str(data), *hybrid, "--keep-self-matches"], pipeline_dir, tmp_path / "c")
        assert _values(kept["rows"], "mrr@10") == {"hash hybrid": 0.5}
        return
    kept = _eval([str(data), "--keep-self-matches"], pipeline_dir, tmp_path / "c.json")
    pipe = Pipeline.load(pipeline_dir, cache=False)
    test = load_dataset(data, keep_self_matches=True)
    direct = evaluate(embed(pipe, test), test, Method("uec", pipe.fusion, pipe.score)).metrics
    assert _values(kept["rows"], "mrr@10") == {"hash": direct["mrr@10"]}


def test_a_relevant_document_with_its_query_s_id_is_said_to_be_dropped_and_counted(
    pipeline_dir, tmp_path
):
    """A SciFact slice whose query 5's relevant document was renamed `5` fell from 89.45 to
    88.20 nDCG@10 without a word: the document is a self-match, never retrieved for it."""
    corpus = [*CORPUS, {"_id": "q1", "text": "Cats purr when they are content."}]
    data = write_beir(tmp_path / "beir", corpus, QUERIES, [("q1", "q1", 1), ("q2", "d3", 1)])
    payload = _eval([str(data)], pipeline_dir, tmp_path / "a.json")
    said = payload["stderr"]
    assert "warning:" in said and "1 of 2 judged queries judge relevant a document with" in said
    assert "('q1')" in said and "--keep-self-matches lets a query retrieve it" in said
    assert "keep_self_matches" not in said
    assert payload["config"]["queries_judging_own_id"] == 1
    assert payload["config"]["queries_judging_own_id_ids"] == ["q1"]
    assert _values(payload["rows"], "recall@100") == {"hash": 0.5}  # q1's is never retrieved
    kept = _eval([str(data), "--keep-self-matches"], pipeline_dir, tmp_path / "b.json")
    assert "own id" not in kept["stderr"] and kept["config"]["queries_judging_own_id"] == 1
    assert _values(kept["rows"], "recall@100") == {"hash": 1.0}
    with pytest.warns(UserWarning, match="keep_self_matches lets a query retrieve it"):
        test = load_dataset(data)
    assert test.self_judged == ("q1",)


def test_eval_says_how_many_corpus_documents_the_models_read_only_the_start_of(
    search_pipeline, tmp_path
):
    """ingest and embed said it, eval scored cut documents without a word."""
    long = " ".join(f"word{i}" for i in range(600)) + " Octopuses have three hearts."
    corpus = [*CORPUS, {"_id": "long", "text": long}]
    data = write_beir(tmp_path / "beir", corpus, QUERIES, [("q1", "d1", 1), ("q2", "d3", 1)])
    pipe = search_pipeline.save(tmp_path / "pipe")
    said = _eval([str(data)], pipe, tmp_path / "a.json")["stderr"]
    assert "cut short: 1 of 4 documents are longer than 'retrieval' reads" in said
    assert f"({search_pipeline.max_tokens} tokens)" in said
    assert "`probembed ingest --chunk` splits them into passages" in said
    short = write_beir(tmp_path / "short", CORPUS, QUERIES, [("q1", "d1", 1), ("q2", "d3", 1)])
    assert "cut short" not in _eval([str(short)], pipe, tmp_path / "b.json")["stderr"]


def test_eval_of_a_corpus_reports_what_a_search_of_it_finds_with_the_adapted_weights(
    hash_pipeline, toy_pairs, tmp_path
):
    """A pipeline with γ > 0 tilts a collection's weights by its members' agreement; eval
    scored the untilted prior, so it reported another figure than a search of the corpus."""
    from probembed.evaluation.metrics import retrieval_metrics, run_from_results
    from probembed.pipeline import AdaptConfig
    from probembed.store import Database, ingest

    # distinct documents: SICK repeats sentences, and the harness and a search order exact
    # ties differently (by id, by position)
    first: dict[str, tuple[str, str]] = {}
    for a, b in toy_pairs:
        first.setdefault(b, (a, b))
    pairs = list(first.values())[:80]
    assert len(pairs) == 80
    corpus = [{"_id": f"d{i}", "text": b} for i, (_, b) in enumerate(pairs)]
    queries = [{"_id": f"q{i}", "text": a} for i, (a, _) in enumerate(pairs)]
    data = write_beir(
        tmp_path / "beir", corpus, queries, [(f"q{i}", f"d{i}", 1) for i in range(80)]
    )
    # three members: two agree with their ensemble equally, whatever they embed
    specs = [ModelSpec("hash", "laplace", encoder_params={"dim": d}) for d in (128, 64, 16)]
    fusion = FusionConfig("uec", temperature=float("inf"), prior=(0.4, 0.3, 0.3))  # as `default`
    members, score = Pipeline.fit(specs, toy_pairs, fusion).members, hash_pipeline.score
    adapted = Pipeline(members, fusion, score, "adapted", cache=False, adapt=AdaptConfig(20.0))
    payload = _eval([str(data)], adapted.save(tmp_path / "pipe"), tmp_path / "rows.json")
    reported = _values(payload["rows"], "ndcg@10")["adapted"]

    collection = Database(tmp_path / "db", create=True).collection("corpus")
    ingest(data / "corpus.jsonl", collection, adapted)
    weights = list(collection.stats().adapted_weights.values())
    assert abs(weights[0] - fusion.prior[0]) > 0.1  # the tilt is far from the prior
    results = collection.searcher().search_fused(
        adapted.encode([q["text"] for q in queries]), k=10, exact=True
    )
    run = run_from_results([q["_id"] for q in queries], results)
    test = load_dataset(data)
    searched = retrieval_metrics(test.qrels, run, ["ndcg@10"])["ndcg@10"]
    on_prior = evaluate(embed(adapted, test), test, Method("uec", fusion, score))
    assert abs(on_prior.metrics["ndcg@10"] - searched) > 0.005  # so the test can fail
    # float32 stored rows against the harness's float64 fusion: no near-tie flips here
    assert reported == pytest.approx(searched, abs=1e-9)


def test_a_beir_set_is_scored_with_the_built_in_ingest_indexes_documents_with(tmp_path):
    """Without --pipeline a BEIR set was scored with `default` while ingest, search and
    make run index documents with `retrieval`: a user evaluating retrieval saw other figures."""
    out = tmp_path / "rows.json"
    result = runner.invoke(app, ["eval", str(KINDS["retrieval"]), "--json", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    assert payload["config"]["pipeline"] == "retrieval"
    assert {row["method"] for row in payload["rows"]} == {"retrieval"}
    data = load_dataset(KINDS["retrieval"])
    texts = len(data.corpus) + len(data.queries)  # said before the long part starts
    assert f"{texts} texts (" in result.stderr and "each embedded by retrieval's models" in (
        _unwrapped(result.stderr)
    )


def test_eval_says_nothing_of_the_cache_when_it_is_off(pipeline_dir, tmp_path, monkeypatch):
    """A cache that cannot open its directory is off (warned): eval said "0 from the cache"."""
    (tmp_path / "a-file").write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    data = write_beir(tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1), ("q2", "d3", 1)])
    said = _eval([str(data)], pipeline_dir, tmp_path / "a.json")["stderr"]
    assert "embedding cache at" in said and "disabled" in said
    assert "beir test: 5 texts, each embedded by hash's models" in said
    assert "from the cache" not in said


def test_a_rerun_says_how_many_texts_come_from_the_cache(pipeline_dir, tmp_path, monkeypatch):
    """A rerun read every embedding from the cache and said, as the first run had, that each
    text was embedded by the models."""
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "cache"))
    data = write_beir(tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1), ("q2", "d3", 1)])
    first = _eval([str(data)], pipeline_dir, tmp_path / "a.json")["stderr"]
    assert "beir test: 5 texts (0 from the cache), each embedded by hash's models" in first
    more = write_beir(  # one document more: the others are read, it is encoded
        tmp_path / "more",
        [*CORPUS, {"_id": "d4", "text": "Owls hunt at night."}],
        QUERIES,
        [("q1", "d1", 1), ("q2", "d3", 1)],
    )
    again = _eval([str(more)], pipeline_dir, tmp_path / "b.json")["stderr"]
    assert "more test: 6 texts (5 from the cache), each embedded by hash's models" in again
    pipe = Pipeline.load(pipeline_dir)  # held for every member, or not held
    assert pipe.held(["Owls hunt at night.", "never seen"]).tolist() == [True, False]
    assert Pipeline.load(pipeline_dir, cache=False).held(["Owls hunt at night."]).tolist() == [
        False
    ]


def test_a_split_the_pipeline_was_tuned_on_is_reported_as_not_held_out(
    hash_pipeline, tmp_path, monkeypatch
):
    """`probembed eval --split train` of `default` on SciFact scored the split its calibrator
    and fusion were chosen on, without a word: the figure looked held out."""
    from probembed.pipeline import builtin_dir, read_tuning

    tuned = Pipeline(
        hash_pipeline.members, hash_pipeline.fusion, hash_pipeline.score, "hash",
        cache=False, tuned_on=("retrieval/toy:test", "sts/toy:dev"),
    )  # fmt: skip
    directory = tuned.save(tmp_path / "tuned")
    assert Pipeline.load(directory, cache=False).tuned_on == tuned.tuned_on  # kept by save
    warned = _eval([str(KINDS["retrieval"])], directory, tmp_path / "a.json")["stderr"]
    assert "hash was tuned on retrieval/toy:test: figures on this split are not held out" in warned
    monkeypatch.chdir(KINDS["retrieval"])  # `eval .` named the dataset "" and said nothing
    here = _eval(["."], directory, tmp_path / "c.json")
    assert "hash was tuned on retrieval/toy:test" in here["stderr"]
    assert {r["dataset"] for r in here["rows"]} == {"toy"}
    quiet = _eval([str(KINDS["sts"])], directory, tmp_path / "b.json")["stderr"]  # dev, not test
    assert "tuned on" not in quiet
    assert "retrieval/scifact:train" in read_tuning(builtin_dir() / "default")  # its calibrator's
    assert read_tuning(builtin_dir() / "retrieval") == ("retrieval/scifact:train",)


def test_a_tsv_that_is_not_utf8_is_named_by_line_and_a_bom_is_skipped(pipeline_dir, tmp_path):
    """The codec's message named neither the file nor the line; a BOM made the header wrong."""
    sts = tmp_path / "sts" / "mine"
    sts.mkdir(parents=True)
    lines = [
        "sentence1\tsentence2\tscore",
        *(f"a cat number {i}\ta dog number {i}\t{i % 5}" for i in range(8)),
    ]
    (sts / "test.tsv").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    rows = _eval([str(sts)], pipeline_dir, tmp_path / "a.json")["rows"]
    assert {r["dataset"] for r in rows} == {"mine"}
    (sts / "test.tsv").write_bytes("\n".join(lines).encode() + b"\ncaf\xe9\tx\t1\n")
    result = runner.invoke(app, ["eval", str(sts), "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2
    said = _unwrapped(result.output)
    assert f"{sts / 'test.tsv'}:10: not UTF-8: byte 0xe9 at offset 3 of the line" in said


@pytest.mark.parametrize(
    ("files", "says"),
    [
        (
            {"sts/one/test.tsv": "sentence1\tsentence2\tscore\na\tb\t1\n"},
            "1 pair(s) after the header",
        ),
        (
            {
                "classification/one/train.tsv": "text\tlabel\na\tpos\nb\tpos\n",
                "classification/one/test.tsv": "text\tlabel\nc\tpos\n",
            },
            "train.tsv: 1 label(s); a probe needs at least 2",
        ),
        (
            {
                "classification/one/train.tsv": "text\tlabel\na\tpos\nb\tneg\n",
                "classification/one/test.tsv": "text\tlabel\n",
            },
            "test.tsv: no rows after the header",
        ),
        (
            {
                "retrieval/one/corpus.jsonl": "",
                "retrieval/one/queries.jsonl": '{"_id": "q", "text": "x"}\n',
                "retrieval/one/qrels/test.tsv": "query-id\tcorpus-id\tscore\nq\td\t1\n",
            },
            "corpus.jsonl: no documents to search",
        ),
        (  # the blank sentence was embedded as "" and counted in the Spearman score
            {"sts/one/test.tsv": "sentence1\tsentence2\tscore\na cat\t\t3.0\nb\tc\t1\n"},
            "test.tsv:2: sentence2 is blank",
        ),
        (
            {
                "classification/one/train.tsv": "text\tlabel\na\tpos\nx\t \nb\tneg\n",
                "classification/one/test.tsv": "text\tlabel\nc\tpos\n",
            },
            "train.tsv:3: label is blank",
        ),
        (
            {"sts/one/test.tsv": "sentence1\tsentence2\tscore\na\tb\t3.0\nc\td\t3\n"},
            "test.tsv: every score is 3: no ranking",  # after embedding, as np.float64(3.0)
        ),
    ],
)
def test_a_split_too_small_to_score_is_refused_by_name_before_encoding(
    files, says, pipeline_dir, tmp_path
):
    """Empty or one-row splits failed after embedding with the metric's or sklearn's words."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    dataset = tmp_path / next(iter(files)).rsplit("/", 1)[0].removesuffix("/qrels")
    result = runner.invoke(app, ["eval", str(dataset), "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2, result.output
    assert says in _unwrapped(result.output) and "embedded" not in result.output


@pytest.mark.parametrize("compare_flag", [[], ["--compare"]])
def test_plots_of_a_classification_split_are_refused_before_any_encoding(
    compare_flag, pipeline_dir, tmp_path
):
    """They were refused with a warning after the whole evaluation (90 s), an empty folder
    and exit 0; the split file given alone is told by its header too."""
    plots = tmp_path / "plots"
    for path in (KINDS["classification"], KINDS["classification"] / "test.tsv"):
        args = ["eval", str(path), "--pipeline", str(pipeline_dir), "--plots", str(plots)]
        result = runner.invoke(app, [*args, *compare_flag])
        assert result.exit_code == 2, result.output
        said = _unwrapped(result.stderr)
        assert f"--plots draws per-item uncertainty (risk-coverage, per decile), which {path}" in (
            said
        )
        assert "embedded" not in said and not plots.exists()


@pytest.mark.parametrize("json_to", ["file", "-"])
def test_the_table_to_a_pipe_or_a_file_is_as_wide_as_piped_help_unless_columns_is_set(
    json_to, pipeline_dir, tmp_path, monkeypatch
):
    """Piped, the table was 80 columns wide: row names cut (`single:paraphr…`), Δ cells
    wrapped over three lines. COLUMNS, where set, still rules; with --json - the table is on
    stderr, as wide."""
    monkeypatch.delenv("COLUMNS", raising=False)
    json_path = str(tmp_path / "rows.json") if json_to == "file" else "-"
    args = ["eval", str(KINDS["retrieval"]), "--pipeline", str(pipeline_dir), "--compare"]
    args += ["--metric", "ndcg@10", "--metric", "recall@100", "--metric", "mrr@10"]
    result = runner.invoke(app, [*args, "--json", json_path])
    assert result.exit_code == 0, result.output
    shown = result.stdout if json_to == "file" else result.stderr
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" method "))
    table = lines[start : start + 6]  # the heading, its rule and a line per row
    assert 80 < max(len(line.rstrip()) for line in table) <= PIPED_WIDTH
    assert "…" not in shown and [line.split()[0] for line in table[2:]] == [
        "single:hash(dim=128)",
        "single:hash(dim=96)",
        "mean",
        "uec",
    ]
    # each Δ cell, difference and interval, on its row's line
    assert all(line.count("[") == line.count("]") == 3 for line in table[2:5])
    monkeypatch.setenv("COLUMNS", "80")
    narrow = runner.invoke(app, [*args, "--json", str(tmp_path / "narrow.json")])
    assert narrow.exit_code == 0, narrow.output
    assert max(map(len, narrow.stdout.splitlines())) <= 80


def test_the_heading_to_a_pipe_or_a_file_ends_where_its_text_does(
    pipeline_dir, tmp_path, monkeypatch
):
    """rich justified a Markdown heading to the console's width: piped, `toy (test)` was
    followed by 110 spaces. The table keeps its width (each line as long as the widest row)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    args = ["eval", str(KINDS["retrieval"]), "--pipeline", str(pipeline_dir), "--compare"]
    result = runner.invoke(app, [*args, "--json", str(tmp_path / "rows.json")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    heading = next(line for line in lines if line.startswith("toy (test"))
    assert heading == "toy (test); Δ: difference from uec"
    start = next(i for i, line in enumerate(lines) if line.startswith(" method "))
    table = lines[start - 1 : start + 7]  # its blank top edge, heading, rule, rows, bottom edge
    widths = {len(line) for line in table}
    assert len(widths) == 1 and len(heading) < widths.pop() < PIPED_WIDTH


def test_plot_files_are_named_as_a_shell_takes_one_word(pipeline_dir, tmp_path):
    """`sf-test-retrieval as shipped-binned.png` needed quoting in every shell command."""
    plots = tmp_path / "plots"
    args = [str(KINDS["sts"]), "--compare", "--plots", str(plots)]
    said = _eval(args, pipeline_dir, tmp_path / "rows.json")["stderr"]
    names = sorted(p.name for p in plots.iterdir())
    assert "toy-test-hash_as_shipped-binned.png" in names
    assert not [name for name in names if " " in name] and f"plot: {plots}/toy" in said
    taken: set[str] = set()
    assert [file_stem(n, taken) for n in ("a b", "a_b", "a  b", "c")] == [
        "a_b",
        "a_b-2",
        "a_b-3",
        "c",
    ]


def test_plots_that_cannot_be_drawn_are_said_not_left_an_empty_folder(pipeline_dir, tmp_path):
    """A split of one scored query left an empty folder and exited 0 without a word."""
    plots = tmp_path / "plots"
    one = write_beir(tmp_path / "one", CORPUS, QUERIES[:1], [("q1", "d1", 1)])
    said = _eval([str(one), "--plots", str(plots)], pipeline_dir, tmp_path / "rows.json")["stderr"]
    assert f"warning: no plots written to {plots}: risk-coverage needs per-item" in said
    drawn = _eval(
        [str(KINDS["sts"]), "--compare", "--plots", str(plots)], pipeline_dir, tmp_path / "b.json"
    )
    assert "no plots written" not in drawn["stderr"] and list(plots.glob("*.png"))


def test_queries_judged_with_no_relevant_document_are_left_out_said_and_counted(
    pipeline_dir, tmp_path
):
    """Queries whose every judgement is grade 0 scored 0 on every metric (as ranx scores
    them): half the queries so judged halved nDCG, and the run exited 0 without a word."""
    queries = [*QUERIES, {"_id": "q3", "text": "do dogs bark"}]
    judged = [("q1", "d1", 1), ("q2", "d3", 1)]
    zero = [("q3", "d2", 0), ("q3", "d1", 0)]
    with_zero = write_beir(tmp_path / "zero", CORPUS, queries, judged + zero)
    without = write_beir(tmp_path / "without", CORPUS, QUERIES, judged)
    payload = _eval([str(with_zero)], pipeline_dir, tmp_path / "a.json")
    reference = _eval([str(without)], pipeline_dir, tmp_path / "b.json")
    figures = {r["metric"]: r["value"] for r in payload["rows"]}
    assert figures == {r["metric"]: r["value"] for r in reference["rows"]}  # of q1 and q2 alone
    said = payload["stderr"]
    assert "warning:" in said and "1 of 3 judged queries have no document judged relevant" in said
    assert "'q3'" in said and "left out of every mean" in said
    assert payload["config"]["queries_without_relevant"] == 1
    assert payload["config"]["queries_without_relevant_ids"] == ["q3"]
    assert payload["config"]["queries_scored"] == 2
    assert reference["config"]["queries_without_relevant"] == 0
    # the Python API leaves them out alike
    with pytest.warns(UserWarning, match="1 of 3 judged queries"):
        test = load_dataset(with_zero)
    assert test.without_relevant == ("q3",) and set(test.queries) == {"q1", "q2"}
    none = write_beir(tmp_path / "none", CORPUS, QUERIES[:1], [("q1", "d1", 0)])
    result = runner.invoke(app, ["eval", str(none), "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2, result.output
    assert "none of the 1 judged queries has a document judged relevant" in _unwrapped(
        result.output
    )


def _sts_file(path: Path, rows: int = 6) -> Path:
    """An STS split of `rows` pairs taken from the toy set, repeated as needed."""
    lines = (KINDS["sts"] / "test.tsv").read_text().splitlines()
    body = [lines[1 + i % (len(lines) - 1)] for i in range(rows)]
    body = [
        f"{a} {i}\t{b}\t{(i % 5) + 0.5}" for i, (a, b, _) in enumerate(r.split("\t") for r in body)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([lines[0], *body]) + "\n")
    return path


def test_a_file_alone_is_named_after_itself_and_a_split_after_its_folder(pipeline_dir, tmp_path):
    """`eval mypairs.tsv` labelled the rows after the folder the file happened to lie in."""
    alone = _sts_file(tmp_path / "h-scale" / "mypairs.tsv")
    payload = _eval([str(alone)], pipeline_dir, tmp_path / "a.json")
    assert {r["dataset"] for r in payload["rows"]} == {"mypairs"}
    assert payload["stdout"].lstrip().splitlines()[0] == "mypairs"  # the heading names the file
    assert "h-scale" not in payload["output"]
    split = _sts_file(tmp_path / "mysts" / "test2.tsv")
    _sts_file(tmp_path / "mysts" / "dev.tsv", rows=8)
    beside = _eval([str(split)], pipeline_dir, tmp_path / "b.json")
    assert {r["dataset"] for r in beside["rows"]} == {"mysts"}
    assert {r["split"] for r in beside["rows"]} == {"test2"}


def test_compare_says_where_it_tuned_and_shows_the_pipeline_as_shipped(pipeline_dir, tmp_path):
    """`eval mysts/test2.tsv --compare` tuned on the sibling dev.tsv saying so only in the
    JSON, and its uec row (retuned) was not the figure a run without --compare reports."""
    split = _sts_file(tmp_path / "mysts" / "test2.tsv")
    dev = _sts_file(tmp_path / "mysts" / "dev.tsv", rows=8)
    compared = _eval([str(split), "--compare"], pipeline_dir, tmp_path / "a.json")
    plain = _eval([str(split)], pipeline_dir, tmp_path / "b.json")
    assert compared["config"]["tuned_on"] == "dev"
    assert f"tuning on mysts dev ({dev}" in compared["stderr"]
    assert "mysts (test2); weighted and uec tuned on dev" in compared["stdout"]
    spearman = _values(compared["rows"], "spearman")
    assert spearman["hash as shipped"] == _values(plain["rows"], "spearman")["hash"]
    assert " hash as shipped " in compared["stdout"] and " uec " in compared["stdout"]


@pytest.mark.parametrize("kind", ["sts", "retrieval"])
def test_the_binned_plot_puts_every_signal_on_its_own_quantile_axis(kind, pipeline_dir, tmp_path):
    """Every uncertainty signal was drawn at its own bin means on one x-axis, though a
    variance and a score differ in scale by orders of magnitude."""
    from probembed.evaluation.report import bin_quantiles

    path = KINDS[kind]
    pipe = Pipeline.load(pipeline_dir, cache=False)
    test = load_dataset(path)
    result = compare(pipe, test, None)
    binned = result.curves["uec"]["binned"]
    assert len(binned) >= 2
    items = len(test.queries) if kind == "retrieval" else len(test)
    for x, quality in binned.values():  # one axis for all: each signal's own quantiles
        np.testing.assert_array_equal(x, bin_quantiles(items, min(10, items)))
        assert x.min() > 0 and x.max() < 1 and len(quality) == len(x)
    payload = _eval(
        [str(path), "--compare", "--plots", str(tmp_path / "p")], pipeline_dir, tmp_path / "r.json"
    )
    assert any(p.name.endswith("-binned.png") for p in (tmp_path / "p").iterdir()), payload[
        "output"
    ]


def test_eval_hybrid_reports_what_a_hybrid_search_of_the_corpus_finds(
    hash_pipeline, toy_pairs, tmp_path
):
    """eval could not measure hybrid search (dense + BM25 by RRF), which lifted LIMIT-small's
    nDCG@10 by 25-32 points: a user choosing a pipeline never saw it."""
    from probembed.evaluation.metrics import retrieval_metrics, run_from_results
    from probembed.store import Database, ingest

    data = pairs_as_beir(toy_pairs, tmp_path / "beir")
    directory = hash_pipeline.save(tmp_path / "pipe")
    payload = _eval([str(data), "--hybrid"], directory, tmp_path / "rows.json")
    reported = _values(payload["rows"], "ndcg@10")
    assert set(reported) == {"hash hybrid"} and payload["config"]["hybrid"] is True
    assert "hybrid search: dense + BM25" in payload["stdout"]

    collection = Database(tmp_path / "db", create=True).collection("corpus")
    ingest(data / "corpus.jsonl", collection, directory)
    test = load_dataset(data)
    queries = list(test.queries)
    results = collection.search([test.queries[q] for q in queries], k=10, hybrid=True)
    searched = retrieval_metrics(test.qrels, run_from_results(queries, results), ["ndcg@10"])
    assert reported["hash hybrid"] == searched["ndcg@10"]  # the same ranks, the same sums
    dense = _values(_eval([str(data)], directory, tmp_path / "dense.json")["rows"], "ndcg@10")
    assert abs(dense["hash"] - searched["ndcg@10"]) > 0.005  # so the test can fail


@pytest.mark.parametrize(
    ("kind", "options", "said"),
    [
        ("sts", [], "--hybrid applies to retrieval (BEIR) datasets only, not to toy (sts)"),
        (
            "classification",
            [],
            "--hybrid applies to retrieval (BEIR) datasets only, not to toy (classification)",
        ),
        ("retrieval", ["--compare"], "--hybrid measures the pipeline's own hybrid search"),
        ("empty", [], "--hybrid: 1 document(s) of empty with an empty text (e.g. 'd2')"),
    ],
)
def test_eval_hybrid_is_refused_where_no_hybrid_search_ranks(
    kind, options, said, pipeline_dir, tmp_path
):
    """A corpus with an empty document failed after embedding, saying to pass --on-error
    skip, an option of ingest that eval does not have."""
    empty = [{**CORPUS[1], "text": ""} if d["_id"] == "d2" else d for d in CORPUS]
    path = write_beir(tmp_path / "empty", empty, QUERIES, [("q1", "d1", 1)])
    path = path if kind == "empty" else KINDS[kind]
    args = ["eval", str(path), "--hybrid", *options, "--json", str(tmp_path / "r")]
    result = runner.invoke(app, [*args, "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 2, result.output
    assert said in _unwrapped(result.output) and "each embedded by" not in result.output
    assert not (tmp_path / "r").exists()


def test_eval_metric_chooses_the_figures_the_difference_column_and_the_json_rows(
    pipeline_dir, tmp_path
):
    """`--metric recall@5 --compare` on the BEIR fixture: every method's figure, the Δ column
    and the paired differences are recall@5's (the default ndcg@10 in no table), and the
    figures are the harness's own; an unknown metric exits 2 naming the known ones."""
    path = KINDS["retrieval"]
    args = [str(path), "--compare", "--metric", "Recall@05"]
    payload = _eval(args, pipeline_dir, tmp_path / "rows.json")
    assert payload["config"]["metrics"] == ["recall@5"]
    scored = [r for r in payload["rows"] if RETRIEVAL_METRIC.fullmatch(r["metric"])]
    assert {r["metric"] for r in scored} == {"recall@5"}  # beside them: uec's diagnostics
    assert {r["method"] for r in scored} == {r["method"] for r in payload["rows"]}
    differences = payload["paired"]["differences"]
    assert differences and all(set(d) == {"recall@5"} for d in differences.values())
    assert "Δ recall@5" in payload["output"] and "ndcg" not in payload["stdout"]
    pipe, test = Pipeline.load(pipeline_dir, cache=False), load_dataset(path)
    dev_split = find_dev(path, "test")
    dev = load_dataset(path, dev_split) if dev_split else None
    direct = compare(pipe, test, dev, metrics=("recall@5",))
    assert _values(payload["rows"], "recall@5") == _values(direct.rows, "recall@5")
    for method, d in differences.items():  # the Δ column's cells, as the table prints them
        if method != payload["paired"]["baseline"]:
            assert f"{100 * d['recall@5']['difference']:+.2f}" in payload["output"]

    result = runner.invoke(
        app, ["eval", str(path), "--metric", "precision@5", "--pipeline", str(pipeline_dir)]
    )
    assert result.exit_code == 2
    said = _unwrapped(result.output)
    assert "unknown metric 'precision@5'; known:" in said and "recall@K" in said


def test_eval_metric_chooses_what_the_uncertainty_diagnostics_judge_by(
    pipeline_dir, toy_pairs, tmp_path
):
    """`--compare --metric recall@5`: the --json rows of the uncertainty diagnostics (failure
    AUROCs, coverage figures, each model's ρ(u, error)) were still nDCG@10's and Recall@10's
    whatever was named. They judge by recall@5 now, named in the keys (the per-decile figure
    stays Recall@1, as the help says), and without --metric by nDCG@10, under the names they
    always had."""
    data = pairs_as_beir(toy_pairs, tmp_path / "beir")
    args = [str(data), "--compare", "--metric", "recall@5"]
    payload = _eval(args, pipeline_dir, tmp_path / "rows.json")
    value = {(r["method"], r["metric"]): r["value"] for r in payload["rows"]}
    judged = {metric for _, metric in value} - {"recall@5"}
    assert not [m for m in judged if "ndcg" in m or "@10" in m], judged
    signals = {m.split(":")[1] for m in judged if m.startswith("auroc:")}
    assert "query_var" in signals
    for signal in signals:
        assert f"auroc:{signal}" not in judged  # which would not say it judged by recall@5
        assert {
            f"auroc:{signal}:recall@5<median",
            f"auroc:{signal}:recall@5=0",
            f"recall@5@coverage80:{signal}",
            f"recall@1_decile_spearman:{signal}",
        } <= judged
    own = payload["paired"]["baseline"]  # the pipeline as shipped: no split to tune on
    assert value[own, "recall@5@coverage100"] == value[own, "recall@5"]
    # each model's ρ(u, error): its queries' uncertainty against 1 - its own recall@5
    pipe = Pipeline.load(pipeline_dir, cache=False)
    embedded = embed(pipe, load_dataset(data))
    items = payload["per_item"]
    assert items["ids"] == list(embedded.ids["queries"])
    for k, model in enumerate(pipe.models):
        u = uncertainty(embedded.parts["queries"][k])
        error = 1 - np.array(items["values"][f"single:{model}"]["recall@5"])
        rho = value[f"single:{model}", "u_error_spearman"]
        assert rho == pytest.approx(spearmanr(u, error).statistic, abs=1e-12)
    # --plots without --compare: the risk-coverage curve it draws ends at the mean recall@5
    test = load_dataset(data)
    figures, drawn, _ = own_figures(pipe, test, data, ("recall@5",), False, True, False)
    assert drawn is not None
    assert drawn.curves[pipe.name]["risk_coverage"]["query_var"][1][-1] == pytest.approx(
        figures["recall@5"], abs=1e-12
    )

    default = _eval([str(data), "--compare"], pipeline_dir, tmp_path / "default.json")
    names = {r["metric"] for r in default["rows"]}
    assert {
        "auroc:query_var",
        "auroc:query_var:recall@10=0",
        "ndcg@10@coverage80:query_var",
        "recall@1_decile_spearman:query_var",
        "ndcg@10@coverage100",
    } <= names


def test_eval_by_a_0_1_metric_most_queries_miss_fails_the_misses(pipeline_dir, toy_pairs, tmp_path):
    """`--metric recall@5` on a split where most queries miss their judged document: recall@5
    is 0 or 1 and its median 0, and "strictly below the median" failed no query, so every
    signal's `auroc:<signal>` was nan (with the warning "all 80 items succeeded") under a
    key that did not say it judged by recall@5. The queries at 0 fail now: for a metric of
    two values the label is recall@5 = 0, and its AUROCs are the `recall@5=0` ones."""
    data = pairs_as_beir(toy_pairs, tmp_path / "beir")
    wrong = "".join(f"q{i}\td{79 - i}\t1\n" for i in range(48))  # another query's document
    right = "".join(f"q{i}\td{i}\t1\n" for i in range(48, 80))
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + wrong + right)
    payload = _eval([str(data), "--compare", "--metric", "recall@5"], pipeline_dir, tmp_path / "j")
    own = payload["paired"]["baseline"]
    recall = np.array(payload["per_item"]["values"][own]["recall@5"])
    assert np.median(recall) == 0 and recall.any()
    aurocs = {
        (r["method"], r["metric"]): r["value"]
        for r in payload["rows"]
        if r["metric"].startswith("auroc:")
    }
    below = {key: v for key, v in aurocs.items() if key[1].endswith(":recall@5<median")}
    assert {m.split(":")[1] for _, m in below} >= {"query_var", "margin_prob", "top1_std"}
    for (method, metric), value in below.items():
        assert isinstance(value, float) and np.isfinite(value), (method, metric)
        assert value == aurocs[method, metric.replace("<median", "=0")]
    assert "nan" not in payload["stderr"] and "AUROC" not in payload["stderr"]


def test_eval_says_which_failure_aurocs_are_nan_and_why(pipeline_dir, toy_pairs, tmp_path):
    """Each of 20 queries finds its document first, so no query fails by recall@5 either way:
    the warning was auroc's "AUROC is undefined when all 20 items succeeded", said of items
    below a median none can be below, naming neither the metric nor the figures; then the
    figures by their --json key alone, which a run without --json never shows."""
    data = pairs_as_beir(toy_pairs, tmp_path / "beir", 20)
    payload = _eval([str(data), "--compare", "--metric", "recall@5"], pipeline_dir, tmp_path / "j")
    said = payload["stderr"]
    assert (
        "the uncertainty signals' AUROC for spotting queries below the median recall@5 "
        "(--json: auroc:<signal>:recall@5<median) is nan: every one of the 20 queries scores "
        "recall@5 1, so none falls below another" in said
    )
    assert (
        "the uncertainty signals' AUROC for spotting queries with recall@5 = 0 (--json: "
        "auroc:<signal>:recall@5=0) is nan: none of the 20 queries has recall@5 = 0, each finds "
        "a relevant document in its top 5" in said
    )
    assert "AUROC is undefined" not in said
    nan = [r for r in payload["rows"] if ":recall@5" in r["metric"] and r["metric"][:6] == "auroc:"]
    assert nan and all(r["value"] == "nan" for r in nan)  # as strict JSON readers take it
