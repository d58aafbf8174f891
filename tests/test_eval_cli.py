"""`probembed eval` end to end on every dataset kind, checked against the harness run directly."""

import json
from pathlib import Path

import pytest
from beir_data import write_beir
from typer.testing import CliRunner

from probembed.evaluation.datasets import load_dataset
from probembed.evaluation.harness import Method, embed, evaluate, primary_metric
from probembed.evaluation.report import compare
from probembed.interfaces.cli import app
from probembed.interfaces.eval_commands import find_dev
from probembed.pipeline import Pipeline

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
    return payload


def _unwrapped(output: str) -> str:
    """The output with rich's line wrapping undone, so phrases can be searched for."""
    return " ".join(output.split())


def _values(rows: list[dict], metric: str) -> dict[str, float]:
    """method -> value of one metric."""
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
    assert f"{100 * direct[metric]:.2f}" in payload["output"]


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
        {"weighted"} if dev else set()
    )
    assert cli == expected  # identical for the reason given in the test above
    assert f"{100 * expected['uec']:.2f}" in payload["output"]


@pytest.mark.parametrize("compare_flag", [[], ["--compare"]])
def test_eval_on_a_pairs_file_is_a_clear_error(compare_flag, pipeline_dir):
    path = DATA / "pairs" / "toy-pairs.tsv"
    result = runner.invoke(app, ["eval", str(path), "--pipeline", str(pipeline_dir), *compare_flag])
    assert result.exit_code == 2, result.output
    assert "toy-pairs.tsv" in result.output and "probembed fit" in result.output
    assert "Traceback" not in result.output


def test_eval_json_into_a_missing_directory_is_refused_before_the_evaluation(
    pipeline_dir, tmp_path
):
    """It ran the whole evaluation, then failed naming a hidden temporary file."""
    out = tmp_path / "nodir" / "rows.json"
    result = runner.invoke(
        app,
        ["eval", str(tmp_path / "nothing"), "--pipeline", str(pipeline_dir), "--json", str(out)],
    )
    assert result.exit_code == 2, result.output
    said = f"--json {out}: no directory {tmp_path / 'nodir'}"
    assert "".join(said.split()) in "".join(result.output.split())  # however the line wraps


CORPUS = [
    {"_id": "d1", "title": "Cats", "text": "Cats purr when content."},
    {"_id": "d2", "title": "", "text": "Dogs bark at strangers."},
    {"_id": "d3", "text": "Fish breathe through gills."},
]
QUERIES = [{"_id": "q1", "text": "why do cats purr"}, {"_id": "q2", "text": "how do fish breathe"}]


def test_eval_warns_about_judged_documents_missing_from_the_corpus(pipeline_dir, tmp_path):
    data = write_beir(
        tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1), ("q1", "gone", 1), ("q2", "d3", 1)]
    )
    payload = _eval([str(data)], pipeline_dir, tmp_path / "rows.json")
    assert "warning:" in payload["output"] and "1 judged document missing" in payload["output"]
    assert "'gone'" in payload["output"]
    # all three documents are within the top 100, so only the missing one is never retrieved
    assert _values(payload["rows"], "recall@100") == {"hash": (0.5 + 1.0) / 2}


def test_eval_strict_refuses_judged_documents_missing_from_the_corpus(pipeline_dir, tmp_path):
    data = write_beir(tmp_path / "beir", CORPUS, QUERIES, [("q1", "d1", 1), ("q1", "gone", 1)])
    args = ["eval", str(data), "--pipeline", str(pipeline_dir), "--strict"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    output = _unwrapped(result.output)
    assert "1 judged document missing" in output and "'gone'" in output
    assert "Traceback" not in output


def test_eval_drops_self_matches_unless_asked_to_keep_them(pipeline_dir, tmp_path):
    # the query is also a corpus document, with the same text: it would rank itself first
    corpus = [*CORPUS, {"_id": "q1", "text": "why do cats purr"}]
    data = write_beir(tmp_path / "beir", corpus, QUERIES[:1], [("q1", "d1", 1)])
    without = write_beir(tmp_path / "without", CORPUS, QUERIES[:1], [("q1", "d1", 1)])
    dropped = _values(_eval([str(data)], pipeline_dir, tmp_path / "a.json")["rows"], "mrr@10")
    reference = _values(_eval([str(without)], pipeline_dir, tmp_path / "b.json")["rows"], "mrr@10")
    assert dropped == reference
    kept = _eval([str(data), "--keep-self-matches"], pipeline_dir, tmp_path / "c.json")
    pipe = Pipeline.load(pipeline_dir, cache=False)
    test = load_dataset(data, keep_self_matches=True)
    direct = evaluate(embed(pipe, test), test, Method("uec", pipe.fusion, pipe.score)).metrics
    assert _values(kept["rows"], "mrr@10") == {"hash": direct["mrr@10"]}
