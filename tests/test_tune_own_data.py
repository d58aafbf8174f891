"""benchmarks/tune_own_data.py's test rows are what `probembed eval` reports: the script called
the CLI's `own_figures` with a signature it no longer had, and stopped at its first test row."""

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from beir_data import pairs_as_beir
from typer.testing import CliRunner

from probembed.interfaces.cli import app

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
runner = CliRunner()


@pytest.fixture(scope="module")
def tune_own_data() -> ModuleType:
    """The benchmark script as a module, imported from its folder as it runs."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("tune_own_data")
    finally:
        sys.path.remove(str(BENCHMARKS))


def _eval_ndcg(folder: Path, pipeline_dir: Path, options: list[str], out: Path) -> float:
    """nDCG@10 of `probembed eval FOLDER --split test [options]`, read from its --json."""
    args = ["eval", str(folder), "--split", "test", *options]
    result = runner.invoke(app, [*args, "--pipeline", str(pipeline_dir), "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    return next(r["value"] for r in rows if r["metric"] == "ndcg@10")


def test_its_test_rows_are_evals_dense_and_hybrid_figures(
    tune_own_data, hash_pipeline, toy_pairs, tmp_path
):
    pipeline_dir = hash_pipeline.save(tmp_path / "hash")
    folder = pairs_as_beir(toy_pairs, tmp_path / "beir")
    rows = tune_own_data.on_test(folder, {tune_own_data.START: str(pipeline_dir)})
    for search, options in (("dense", []), ("hybrid", ["--hybrid"])):
        [row] = [r for r in rows if r["pipeline"] == tune_own_data.START and r["search"] == search]
        out = tmp_path / f"{search}.json"
        assert row["value"] == _eval_ndcg(folder, pipeline_dir, options, out)
    singles = {r["pipeline"] for r in rows if r["pipeline"].startswith("single:")}
    assert singles == {f"single:{m}" for m in hash_pipeline.models}
