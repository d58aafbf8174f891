"""`probembed tune` end to end on a BEIR set written here and hashing pipelines (no shared data)."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from beir_data import write_beir
from script_support import ROOT
from typer.testing import CliRunner

from probembed.calibration.calibrator import HOLDOUT, MIN_ISOTONIC_HOLDOUT
from probembed.calibration.training import MIN_QUERIES, ROUGH_QUERIES
from probembed.evaluation.datasets import load_evaluable, load_pairs
from probembed.evaluation.pipeline_tuning import default_step
from probembed.interfaces.cli import app
from probembed.interfaces.tune_command import held_out_command, tuning_split
from probembed.pipeline import FusionConfig, ModelSpec, Pipeline
from probembed.variance_basis import BASIS_FILE

runner = CliRunner()
SEED = 0
#: Documents and judged queries per split: enough for the agreement (> 10 texts) and for a
#: calibrator (MIN_QUERIES judged queries).
DOCS, DEV, TEST = 60, 30, 20
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))
#: The fixture's test qrels: no reader gets past its first line.
GARBAGE = "query-id\tcorpus-id\tscore\nnot a qrels line\n"


def _words(rng: np.random.Generator, n: int, length: int = 9) -> list[str]:
    """n distinct seeded pseudo-words: no n-gram pattern shared on purpose."""
    return ["".join(rng.choice(LETTERS, length)) for _ in range(n)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Each document names its own key word among shared filler; a query asks for the key word.

    A member that tells the key words apart (128 hashed slots) finds the document; one that
    hashes every n-gram into 2 slots sees the same few directions in every text.
    """
    rng = np.random.default_rng(SEED)
    keys, filler = _words(rng, DOCS), _words(rng, 12)
    corpus = [
        {"_id": f"d{i}", "title": "", "text": " ".join([key, *rng.choice(filler, 4)])}
        for i, key in enumerate(keys)
    ]
    queries = [
        {"_id": f"q{i}", "text": " ".join([key, *rng.choice(filler, 2)])}
        for i, key in enumerate(keys[: DEV + TEST])
    ]
    folder = write_beir(tmp_path_factory.mktemp("beir") / "mine", corpus, queries, [])
    (folder / "qrels" / "dev.tsv").write_text(_qrels(range(DEV)))
    # tune must never read test: a read of this one fails (the test of eval reads a real one)
    (folder / "qrels" / "test.tsv").write_text(GARBAGE)
    with pytest.raises(ValueError, match="test.tsv:2: expected 3 tab-separated fields"):
        load_evaluable(folder, "test")
    return folder


def _qrels(queries: range) -> str:
    """A qrels file judging each query's own document (q<i> finds d<i>)."""
    return "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in queries)


def _copy(dataset: Path, folder: Path, qrels: dict[str, str]) -> Path:
    """The dataset's corpus and queries in `folder`, with these qrels files (split -> text)."""
    (folder / "qrels").mkdir(parents=True)
    for part in ("corpus.jsonl", "queries.jsonl"):
        (folder / part).write_text((dataset / part).read_text())
    for split, text in qrels.items():
        (folder / "qrels" / f"{split}.tsv").write_text(text)
    return folder


def _pipeline(directory: Path, dims: tuple[int, ...]) -> Path:
    """A saved hashing pipeline (uec, concat) fitted on the bundled Python docs' passages."""
    from probembed.store.pydoc_corpus import read_pydoc_topics

    passages = [r.text for r in read_pydoc_topics()[:80]]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in passages]
    specs = [ModelSpec("hash", "laplace", {}, encoder_params={"dim": d}) for d in dims]
    fitted = Pipeline.fit(specs, pairs, FusionConfig("uec"), name="start", cache=False)
    return fitted.save(directory)


@pytest.fixture(scope="module")
def two_members(tmp_path_factory) -> Path:
    """Members that read the dataset's vocabulary (128 slots) and that cannot (2 slots)."""
    return _pipeline(tmp_path_factory.mktemp("pipelines") / "start", (2, 128))


@pytest.fixture(scope="module")
def tuned(two_members, dataset, tmp_path_factory):
    """`probembed tune` of the two-member pipeline on the dataset's dev split."""
    out = tmp_path_factory.mktemp("tuned") / "mine-tuned"
    result = runner.invoke(app, ["tune", str(two_members), str(dataset), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result


def _said(result) -> str:
    """The output with rich's wrapping undone."""
    return " ".join(result.output.split())


def _figures(stdout: str) -> dict[str, float]:
    """method -> figure of the printed table."""
    rows = (re.fullmatch(r"\s*(\S.*?)\s+(\d+\.\d+)\s*", line) for line in stdout.splitlines())
    return {row[1]: float(row[2]) for row in rows if row}


def test_tuning_keeps_the_member_that_reads_the_vocabulary(tuned):
    out, result = tuned
    pipe = Pipeline.load(out, cache=False)
    weights = dict(zip(pipe.models, pipe.fusion.prior or (1.0,), strict=True))
    # the 2-slot member gets weight 0 (dropped) or far less than the one that reads the words
    assert weights.get("hash(dim=128)", weights.get("hash", 0.0)) > 0.5
    assert weights.get("hash(dim=2)", 0.0) < 0.5
    said = _said(result)
    assert "chosen: prior" in said and "; T " in said and "; β " in said and "; γ " in said


def test_tune_says_its_grid_before_tuning(tuned):
    _, result = tuned
    grid = "grid: 11 static weight vectors (step 0.1 over 2 members), then 35 (T, β) around "
    assert grid + "the best, then 6 γ" in _said(result)
    assert _said(result).index("grid:") < _said(result).index("chosen:")


def test_the_tuning_splits_heading_carries_no_trailing_spaces_to_a_pipe(tuned):
    """rich justified the Markdown heading to the console's width (120 columns piped)."""
    _, result = tuned
    (heading,) = [line for line in result.stdout.splitlines() if "the tuning split" in line]
    assert heading == "mine (dev, the tuning split)"


def test_the_default_step_is_the_built_ins_for_their_member_count():
    assert [default_step(k) for k in (2, 3, 4, 5)] == [0.1, 0.1, 0.2, 0.2]


def test_step_sets_the_weight_grid(two_members, dataset, tmp_path):
    out = tmp_path / "coarse"
    args = ["tune", str(two_members), str(dataset), "--out", str(out), "--step", "0.5"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "grid: 3 static weight vectors (step 0.5 over 2 members)" in _said(result)
    prior = Pipeline.load(out, cache=False).fusion.prior or (1.0,)
    assert set(prior) <= {0.5, 1.0}  # (0.5, 0.5), or one member kept at 1


@pytest.mark.parametrize("step", ["0.3", "0", "-0.5"])
def test_a_step_that_tiles_no_simplex_is_refused_before_embedding(
    two_members, dataset, tmp_path, step
):
    out = tmp_path / "o"
    args = ["tune", str(two_members), str(dataset), "--out", str(out), "--step", step]
    result = runner.invoke(app, args)
    said = _said(result)
    assert result.exit_code == 2, result.output
    assert f"error: --step {float(step)}: step must be 1/n for a whole n" in said
    assert "tuning start" not in said and not out.exists()


def test_the_tuned_figure_on_the_tuning_split_is_at_least_the_start(tuned):
    _, result = tuned
    figures = _figures(result.stdout)
    assert {"start (start)", "single:hash(dim=2)", "single:hash(dim=128)", "tuned"} <= set(figures)
    assert figures["tuned"] >= figures["start (start)"]
    assert figures["single:hash(dim=128)"] > figures["single:hash(dim=2)"]


def test_the_tuned_pipeline_records_its_split_and_says_how_to_measure_it(tuned, dataset):
    out, result = tuned
    pipe = Pipeline.load(out, cache=False)
    assert pipe.tuned_on == ("retrieval/mine:dev",)
    assert pipe.name == "mine-tuned"
    assert pipe.calibrator is not None and pipe.calibrator.fit_info["dataset"] == "mine/dev"
    said = _said(result)
    assert f"probembed eval {dataset} --pipeline {out} --split test" in said
    assert said.count("warning") == 1 and "p_relevant will be rough" in said  # the next test's
    held = runner.invoke(app, ["eval", str(dataset), "--pipeline", str(out), "--split", "dev"])
    assert held.exit_code == 0 and "was tuned on retrieval/mine:dev" in _said(held)


@pytest.mark.parametrize(
    ("dims", "undecided"),
    # (96, 128): both read the 60 key words, +0.77 [-3.75, +5.36] when written; (12, 16): two
    # ways of colliding them, which fusion undoes, +7.65 [+0.96, +15.29]
    [((96, 128), True), ((12, 16), False)],
)
def test_tune_sets_the_tuned_pipeline_against_its_best_member_and_warns_when_undecided(
    dataset, tmp_path, dims, undecided
):
    """tune showed the tuning split's figures with no interval and no word that 30 queries
    cannot tell an ensemble from its best member, which a held-out eval then showed; then
    the difference with no metric named ("tuned - single:minilm: +3.42 [+0.33, +8.16]")."""
    start = _pipeline(tmp_path / "start", dims)
    result = runner.invoke(app, ["tune", str(start), str(dataset), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert len(Pipeline.load(tmp_path / "t", cache=False).members) == 2  # else no comparison
    figures = _figures(result.stdout)
    best = max((name for name in figures if name.startswith("single:")), key=figures.__getitem__)
    said = _said(result)
    number = r"([+-]\d+\.\d+)"
    shown = re.search(
        rf"tuned - {re.escape(best)}, ndcg@10: {number} \[{number}, {number}\] \(paired "
        rf"bootstrap 95% interval over the {DEV} queries; on the split it was tuned on",
        said,
    )
    assert shown is not None, said
    difference, low, high = map(float, shown.groups())
    # the table's figures and the difference are each rounded to 0.01
    assert difference == pytest.approx(figures["tuned"] - figures[best], abs=0.011)
    assert low <= difference <= high
    assert (low <= 0) is undecided
    assert (f"its {DEV} queries do not tell the tuned pipeline from {best}" in said) is undecided


def test_tune_prints_the_calibrators_fit_and_warns_that_a_small_split_gives_it_rough(tuned):
    """A calibrator fitted on a small split is overconfident, and tune said nothing of it."""
    out, result = tuned
    said = _said(result)
    held = round(HOLDOUT * DEV)
    assert f"calibrator: {DEV} judged queries ({DEV * 10} hits, " in said
    assert f"{held} held out; held-out calibration error (ECE) " in said
    why = f"{held} held-out queries; judging it needs {MIN_ISOTONIC_HOLDOUT}"
    assert f"isotonic step left out: {why}" in said
    assert (
        f"warning: mine dev: the calibrator is fitted on {DEV} judged queries; below "
        f"{ROUGH_QUERIES} its p_relevant will be rough" in said
    )
    calibrator = Pipeline.load(out, cache=False).calibrator
    assert calibrator is not None and calibrator.isotonic is None


def test_the_tuned_pipeline_ingests_and_answers_min_p_relevant(tuned, dataset, tmp_path):
    out, _ = tuned
    db = tmp_path / "db"
    corpus = dataset / "corpus.jsonl"
    made = runner.invoke(app, ["ingest", str(corpus), "--db", str(db), "--pipeline", str(out)])
    assert made.exit_code == 0, made.output
    query = json.loads((dataset / "queries.jsonl").read_text().splitlines()[DEV])["text"]
    args = ["search", query, "--db", str(db), "-k", "10", "--json"]
    every = runner.invoke(app, args)
    assert every.exit_code == 0, every.output
    (answer,) = json.loads(every.stdout)
    assert answer["hits"][0]["id"] == f"d{DEV}"
    top = answer["hits"][0]["p_relevant"]
    kept = runner.invoke(app, [*args, "--min-p-relevant", str(top)])
    assert kept.exit_code == 0, kept.output
    (filtered,) = json.loads(kept.stdout)
    assert filtered["hits"] and all(h["p_relevant"] >= top for h in filtered["hits"])


def test_a_missing_split_lists_the_splits_there(two_members, dataset, tmp_path):
    args = ["tune", str(two_members), str(dataset), "--out", str(tmp_path / "o")]
    result = runner.invoke(app, [*args, "--split", "train"])
    said = _said(result)
    assert result.exit_code == 2 and "train.tsv: missing" in said and "dev, test" in said
    assert not (tmp_path / "o").exists()


def test_no_dev_or_train_split_is_refused_without_tuning_on_test(two_members, tmp_path):
    only_test = tmp_path / "only-test"
    only_test.mkdir()
    for part in ("corpus.jsonl", "queries.jsonl"):
        (only_test / part).write_text("")
    (only_test / "qrels").mkdir()
    (only_test / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    args = ["tune", str(two_members), str(only_test), "--out", str(tmp_path / "o")]
    said = _said(runner.invoke(app, args))
    assert "no dev or train split to tune on (splits here: test)" in said and "--split" in said


def test_a_split_saved_as_csv_is_named_as_not_read(two_members, dataset, tmp_path):
    """A split saved as dev.csv (or qrels/dev.csv) was passed over in silence ("splits here:
    none"): the refusal names the files there and the .tsv the readers want."""
    beir = _copy(dataset, tmp_path / "beir", {"test": _qrels(range(DEV))})
    (beir / "qrels" / "dev.csv").write_text(_qrels(range(DEV)))
    sts = tmp_path / "sts"
    sts.mkdir()
    (sts / "dev.csv").write_text("sentence1\tsentence2\tscore\na\tb\t1\nc\td\t2\n")
    (sts / "README.md").write_text("what these pairs are")  # no split: not listed
    unread = "not read: dev.csv (a split is a tab-separated <split>.tsv file)"
    for folder, there in ((beir, "test"), (sts, "none")):
        args = ["tune", str(two_members), str(folder), "--out", str(tmp_path / "o")]
        said = _said(runner.invoke(app, args))
        assert f"no dev or train split to tune on (splits here: {there}; {unread})" in said
        said = _said(runner.invoke(app, [*args, "--split", "dev"]))
        assert "dev.tsv: missing" in said and f"{there}; {unread}" in said
    assert not (tmp_path / "o").exists()


def _format_examples() -> list[str]:
    """The code blocks of docs/cli.md's "Data formats" section, in order."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("\n## Data formats\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"\n```\n(.*?)```\n", section, re.S)


def test_the_data_formats_examples_are_read_as_the_docs_say(tmp_path):
    """The input formats were in no user doc: each example of the section is read by the
    reader it documents, the BEIR tree written out file by file."""
    pairs, sts, beir, labelled = _format_examples()
    (tmp_path / "pairs.tsv").write_text(pairs)
    assert load_pairs(tmp_path / "pairs.tsv").text_b == ["Someone is playing the guitar."]
    (tmp_path / "sts").mkdir()
    (tmp_path / "sts" / "dev.tsv").write_text(sts)
    assert list(load_evaluable(tmp_path / "sts", "dev").scores) == [4.8, 0.2]
    files: dict[str, str] = {}
    for line in beir.splitlines()[1:]:
        name, _, content = line.strip().partition("    ")
        if content:
            files[name] = content.strip() + "\n"
        else:  # a qrels line under its header
            files[list(files)[-1]] += name + "\n"
    for name, content in files.items():
        (tmp_path / "my-beir" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "my-beir" / name).write_text(content)
    retrieval = load_evaluable(tmp_path / "my-beir", "dev")
    assert retrieval.qrels == {"q1": {"d1": 1}} and "six strings" in retrieval.corpus["d1"]
    (tmp_path / "cls").mkdir()
    for split in ("train", "test"):
        (tmp_path / "cls" / f"{split}.tsv").write_text(labelled)
    assert load_evaluable(tmp_path / "cls").test_labels == ["complaint", "praise"]


def test_tune_onto_its_starting_pipeline_says_it_replaced_it(two_members, dataset, tmp_path, tuned):
    """`tune --out` onto an existing pipeline, the starting one too, replaced it without a
    word; it now says so, as `fit` does (and only then)."""
    start = tmp_path / "start"
    shutil.copytree(two_members, start)
    result = runner.invoke(app, ["tune", str(start), str(dataset), "--out", str(start)])
    assert result.exit_code == 0, result.output
    assert f"to {start} (it replaced the pipeline there)" in _said(result)
    assert Pipeline.load(start, cache=False).tuned_on == ("retrieval/mine:dev",)
    assert "saved pipeline" in _said(tuned[1]) and "replaced" not in _said(tuned[1])


def test_a_classification_dataset_is_refused_as_one_whatever_the_split(two_members, tmp_path):
    """tune on a classification folder first said "split='train' would score the probe on the
    data it was fitted on; choose ... 'test'", and `--split test` then refused it as
    classification: the kind is told first, for the default split, a named one and a file."""
    folder = tmp_path / "cls"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.tsv").write_text("text\tlabel\nit broke\tbad\nit works\tgood\n")
    refusal = "a classification dataset; tune reads an STS or retrieval (BEIR) dataset"
    out = ["--out", str(tmp_path / "o")]
    for given in ([str(folder)], [str(folder), "--split", "test"], [str(folder / "test.tsv")]):
        result = runner.invoke(app, ["tune", str(two_members), *given, *out])
        assert result.exit_code == 2 and refusal in _said(result), result.output
        assert "would score the probe" not in _said(result)


def test_a_split_file_is_tuned_on_as_its_own_split(dataset, tmp_path):
    """`tune PIPE folder/train.tsv` tuned on dev (found beside it), then refused the file as
    conflicting with split 'dev': a split file given is the split tuned on."""
    both = _copy(
        dataset, tmp_path / "both", {"dev": _qrels(range(DEV)), "train": _qrels(range(DEV))}
    )
    assert tuning_split(both / "qrels" / "train.tsv", None) == "train"
    assert tuning_split(both, None) == "dev"


def test_a_named_test_split_is_tuned_on_with_a_warning(two_members, dataset, tmp_path):
    """With enough judged test queries, test is tuned on when named, with a warning."""
    bigger = _copy(dataset, tmp_path / "bigger", {"test": _qrels(range(DEV))})
    out = tmp_path / "on-test"
    args = ["tune", str(two_members), str(bigger), "--out", str(out), "--split", "test"]
    result = runner.invoke(app, args)
    said = _said(result)
    assert result.exit_code == 0, result.output
    assert "warning: tuning on test: a figure on the split it was tuned on is optimistic" in said
    assert "no split besides test to measure it on" in said
    assert Pipeline.load(out, cache=False).tuned_on == ("retrieval/bigger:test",)


@pytest.mark.parametrize(
    ("splits", "tuned", "held"),
    [
        (("train", "dev", "test"), "test", "dev"),  # warned "no split besides test"
        (("train", "dev"), "train", "dev"),  # warned though dev is held out
        (("dev", "train"), "dev", "train"),
        (("train", "validation", "dev", "test"), "dev", "test"),
        (("train", "validation", "dev"), "train", "validation"),
        (("dev", "eval", "extra"), "dev", "eval"),  # no known name: the first by name
        (("test",), "test", None),
    ],
)
def test_the_held_out_command_names_the_best_split_not_tuned_on(tmp_path, splits, tuned, held):
    (tmp_path / "qrels").mkdir()
    for split in splits:
        (tmp_path / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n")
    command = held_out_command(Path("/out"), tmp_path, tuned)
    expected = f"probembed eval {tmp_path} --pipeline /out --split {held}"
    assert command == (None if held is None else expected)


def test_one_member_has_nothing_to_tune_but_still_gets_a_calibrator(dataset, tmp_path):
    single = _pipeline(tmp_path / "single", (128,))
    out = tmp_path / "single-tuned"
    result = runner.invoke(app, ["tune", str(single), str(dataset), "--out", str(out)])
    said = _said(result)
    assert result.exit_code == 0, result.output
    assert "start has one member: no fusion to tune; fitting its calibrator only" in said
    assert "grid:" not in said
    args = ["tune", str(single), str(dataset), "--out", str(tmp_path / "o"), "--step", "0.5"]
    stepped = _said(runner.invoke(app, args))
    assert "error: --step 0.5: start has one member, no weights to tune" in stepped
    pipe = Pipeline.load(out, cache=False)
    assert pipe.fusion == Pipeline.load(single, cache=False).fusion
    assert pipe.calibrator is not None and pipe.tuned_on == ("retrieval/mine:dev",)
    # the same vectors: the start's variance verdict, written as it was loaded
    assert (out / BASIS_FILE).read_text() == (single / BASIS_FILE).read_text()


def test_the_tuned_pipeline_keeps_a_variance_verdict_of_its_own_fusion(two_members, tuned):
    """The verdict is fitted on the fused variances, which the tuned weights scale otherwise:
    the start's, held since the start was loaded, is not the tuned pipeline's to reuse."""
    out, _ = tuned
    kept = json.loads((out / BASIS_FILE).read_text())
    pipe, start = Pipeline.load(out, cache=False), Pipeline.load(two_members, cache=False)
    assert kept["pipeline"] == pipe.fingerprint != start.fingerprint


def test_too_few_judged_queries_say_how_many_and_how_many_are_needed(
    two_members, dataset, tmp_path
):
    few = tmp_path / "few"
    (few / "qrels").mkdir(parents=True)
    for part in ("corpus.jsonl", "queries.jsonl"):
        (few / part).write_text((dataset / part).read_text())
    lines = (dataset / "qrels" / "dev.tsv").read_text().splitlines()[:6]  # header + 5
    (few / "qrels" / "dev.tsv").write_text("\n".join(lines) + "\n")
    args = ["tune", str(two_members), str(few), "--out", str(tmp_path / "o")]
    said = _said(runner.invoke(app, args))
    assert "few dev: 5 judged queries with a relevant document; fitting a relevance " in said
    assert f"calibrator needs at least {MIN_QUERIES}" in said


def test_a_corpus_too_small_for_the_agreement_is_refused_before_tuning(
    two_members, dataset, tmp_path
):
    """8 documents failed after embedding with the agreement's own "agreement needs more than
    10 texts", naming neither dataset nor command; enough judged queries to pass that check."""
    tiny = tmp_path / "tiny"
    (tiny / "qrels").mkdir(parents=True)
    docs = (dataset / "corpus.jsonl").read_text().splitlines()[:8]
    (tiny / "corpus.jsonl").write_text("\n".join(docs) + "\n")
    (tiny / "queries.jsonl").write_text((dataset / "queries.jsonl").read_text())
    judged = "".join(f"q{i}\td{i % 8}\t1\n" for i in range(MIN_QUERIES))  # each one judged
    (tiny / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + judged)
    out = tmp_path / "o"
    result = runner.invoke(app, ["tune", str(two_members), str(tiny), "--out", str(out)])
    said = _said(result)
    assert result.exit_code == 2, result.output
    assert (
        "tiny dev: 8 documents in its corpus; tuning a fusion measures its members' agreement "
        "on them, which needs at least 11" in said
    )
    assert "tuning start" not in said and "agreement needs more than" not in said
    assert not out.exists()


def test_a_split_every_query_answers_perfectly_saves_the_fusion_without_a_query_confidence(
    two_members, tmp_path
):
    """Each query is its document's own text: nDCG@10 1.0 for all, no query below the median.
    Tuning ran, then failed with the query confidence's internal "failed must flag each query"
    and saved nothing."""
    rng = np.random.default_rng(SEED)
    texts = [" ".join(_words(rng, 5)) for _ in range(DOCS)]
    corpus = [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate(texts)]
    queries = [{"_id": f"q{i}", "text": texts[i]} for i in range(DEV)]
    qrels = [(f"q{i}", f"d{i}", 1) for i in range(DEV)]
    folder = write_beir(tmp_path / "easy", corpus, queries, qrels)
    (folder / "qrels" / "test.tsv").rename(folder / "qrels" / "dev.tsv")
    out = tmp_path / "easy-tuned"
    result = runner.invoke(app, ["tune", str(two_members), str(folder), "--out", str(out)])
    said = _said(result)
    assert result.exit_code == 0, result.output
    assert _figures(result.stdout)["tuned"] == 100.0
    assert (
        "warning: easy dev: every query scores nDCG@10 1.000 (dense ranking), so no query falls "
        "below the median to learn failure from: no query confidence" in said
    )
    pipe = Pipeline.load(out, cache=False)
    assert pipe.calibrator is not None and pipe.calibrator.confidence is None
    assert pipe.tuned_on == ("retrieval/easy:dev",)


def test_a_split_most_of_whose_queries_miss_learns_the_query_confidence_from_the_misses(
    two_members, dataset, tmp_path
):
    """24 of the 30 dev queries are judged another query's document, which their search does
    not find: nDCG@10 0 for most, so its median is 0 and none was strictly below it. Tuning
    warned "half or more of the queries score the lowest nDCG@10" and saved no query
    confidence; the queries at 0 are the failures it learns now (`failed_queries`)."""
    misses = "".join(f"q{i}\td{DOCS - 1 - i}\t1\n" for i in range(24))
    folder = _copy(dataset, tmp_path / "missed", {"dev": _qrels(range(24, DEV)) + misses})
    out = tmp_path / "missed-tuned"
    result = runner.invoke(app, ["tune", str(two_members), str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "below the median" not in _said(result)
    pipe = Pipeline.load(out, cache=False)
    assert pipe.calibrator is not None and pipe.calibrator.confidence is not None


def test_eval_compare_names_each_tuned_rows_settings(two_members, dataset, tmp_path):
    """The tuned rows printed no weights, T or β, and the JSON held none: nothing to save."""
    rows = tmp_path / "rows.json"
    splits = {"dev": _qrels(range(DEV)), "test": _qrels(range(DEV, DEV + TEST))}
    judged = _copy(dataset, tmp_path / "mine", splits)
    args = ["eval", str(judged), "--pipeline", str(two_members), "--compare", "--json", str(rows)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    chosen = json.loads(rows.read_text())["config"]["tuned_settings"]
    models = ["hash(dim=2)", "hash(dim=128)"]
    assert list(chosen["weighted"]["weights"]) == models
    assert sum(chosen["weighted"]["weights"].values()) == pytest.approx(1.0)
    assert chosen["uec"]["prior"] == chosen["weighted"]["weights"]  # uec is tuned around them
    assert {"temperature", "beta"} <= set(chosen["uec"])
    table = _said(result)
    assert "settings" in table
    for name in ("weighted", "uec"):
        weights = chosen[name].get("weights") or chosen[name]["prior"]
        assert f"hash(dim=128) {weights['hash(dim=128)']:.3g}" in table


@pytest.mark.parametrize(
    ("low", "high", "says"),
    [
        (-0.02, 0.03, "do not tell the tuned pipeline from single:minilm (the interval reaches 0"),
        (-0.05, -0.01, "the tuned pipeline is below single:minilm alone even on the split it"),
    ],
)
def test_the_undecided_warning_tells_a_loss_from_a_tie(capsys, low, high, says):
    """An interval wholly below 0 was called one that "reaches 0": the tuned row is scored
    as searched and the members' as encoded, so it can fall below its best member."""
    from types import SimpleNamespace

    from probembed.interfaces.tune_command import warn_undecided

    against = {"member": "single:minilm", "items": "200 pairs", "difference": (low + high) / 2}
    warn_undecided({**against, "low": low, "high": high}, SimpleNamespace(name="mine", split="dev"))
    said = " ".join(capsys.readouterr().err.split())
    assert said.startswith("warning: mine dev: ") and says in said
