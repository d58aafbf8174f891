"""The command line end to end on the hash encoder: fit, encode, models, eval."""

import gc
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import spearmanr
from script_support import ROOT
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.pipeline import Pipeline

runner = CliRunner()


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory, toy_pairs):
    path = tmp_path_factory.mktemp("pairs") / "pairs.tsv"
    path.write_text("text_a\ttext_b\n" + "\n".join(f"{a}\t{b}" for a, b in toy_pairs) + "\n")
    return path


@pytest.fixture(scope="module")
def hash_pipeline(tmp_path_factory, pairs_file):
    out = tmp_path_factory.mktemp("pipelines") / "hash-uec"
    result = runner.invoke(
        app, ["fit", "--pairs", str(pairs_file), "--model", "hash", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_models_lists_every_short_name():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    for name in ("minilm", "paraphrase-l3", "use", "wordllama", "e5-small", "minilm-int8", "hash"):
        assert name in result.output


def test_fit_writes_a_loadable_pipeline_directory(hash_pipeline):
    config = json.loads((hash_pipeline / "pipeline.json").read_text())
    assert [m["encoder"] for m in config["models"]] == ["hash"]
    assert (hash_pipeline / "models" / "0-hash" / "state.npz").is_file()


def test_fit_over_a_pipeline_says_it_replaced_it(tmp_path, pairs_file):
    """A fit to an existing pipeline's --out replaced it without a word."""
    args = ["fit", "--pairs", str(pairs_file), "--model", "hash", "--out", str(tmp_path / "p")]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == second.exit_code == 0, second.output
    assert "replaced" not in first.output
    assert "(it replaced the pipeline there)" in " ".join(second.output.split())


def test_encode_prints_one_json_line_per_text(hash_pipeline):
    result = runner.invoke(app, ["encode", "--pipeline", str(hash_pipeline), "jaguar", "a big cat"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["text"] for line in lines] == ["jaguar", "a big cat"]
    assert len(lines[0]["mean"]) == len(lines[0]["var"]) == 256
    assert min(lines[0]["var"]) >= 0
    assert lines[0]["weights"] == {"hash": 1.0}


def test_a_warning_outside_eval_is_one_warning_line_not_pythons_format(
    hash_pipeline, tmp_path, monkeypatch
):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(blocked))
    result = runner.invoke(app, ["encode", "--pipeline", str(hash_pipeline), "jaguar"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"] == "jaguar"  # stdout stays the JSON alone
    said = " ".join(result.stderr.split())
    assert said.startswith(f"warning: embedding cache at {blocked} disabled"), said
    assert "RuntimeWarning" not in result.output and "warnings.warn" not in result.output


def test_encode_reads_stdin_and_writes_npz(hash_pipeline, tmp_path):
    out = tmp_path / "g.npz"
    result = runner.invoke(
        app, ["encode", "--pipeline", str(hash_pipeline), "--out", str(out)], input="one\n\ntwo\n"
    )
    assert result.exit_code == 0, result.output
    with np.load(out) as data:
        assert data["mean"].shape == data["var"].shape == (2, 256)
        assert data["texts"].tolist() == ["one", "two"]


def test_a_byte_order_mark_is_no_part_of_the_first_text(hash_pipeline, tmp_path):
    """A file saved by a Windows editor starts with U+FEFF: the first question was searched
    with it, and scored apart from the same question without it."""
    source = tmp_path / "q.txt"
    source.write_bytes("\ufeffone\ntwo\n".encode())
    for given in (["--file", str(source)], []):
        out = tmp_path / "g.npz"
        stdin = None if given else "\ufeffone\ntwo\n"
        args = ["encode", "--pipeline", str(hash_pipeline), *given, "--out", str(out)]
        result = runner.invoke(app, args, input=stdin)
        assert result.exit_code == 0, result.output
        with np.load(out) as data:
            assert data["texts"].tolist() == ["one", "two"]


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"caf\xe9\n", "not UTF-8: byte 0xe9 at offset 3; it may be Latin-1"),
        (b"\xff\xfeh\x00i\x00", "UTF-16 text, not UTF-8"),
        (b"h\x00i\x00\n\x00", "UTF-16LE text without a byte order mark"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file, not text: a NUL byte at offset 8"),
    ],
)
def test_input_that_is_not_utf8_text_is_refused_alike_from_a_file_and_stdin(
    hash_pipeline, tmp_path, data, said
):
    """On stdin Latin-1 read as a lone surrogate ('texts[0] ... holds a lone surrogate'),
    and NUL bytes in --file (UTF-16 without its mark) were embedded as text."""
    source = tmp_path / "q.txt"
    source.write_bytes(data)
    base = ["encode", "--pipeline", str(hash_pipeline)]
    for given, where, stdin in (
        (["--file", str(source)], f"--file {source}", None),
        ([], "stdin", data),
    ):
        result = runner.invoke(app, [*base, *given], input=stdin)
        assert result.exit_code == 2 and f"cannot read {where}: {said}" in result.output


def test_encode_names_the_file_it_wrote_and_refuses_a_directory(hash_pipeline, tmp_path):
    """numpy adds .npz to a name without it: the message says where the vectors really are."""
    base = ["encode", "--pipeline", str(hash_pipeline), "one"]
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "vecs")])
    assert result.exit_code == 0 and f"to {tmp_path / 'vecs.npz'}" in result.output
    assert (tmp_path / "vecs.npz").is_file() and not (tmp_path / "vecs").exists()
    refused = runner.invoke(app, [*base, "--out", str(tmp_path)])
    assert refused.exit_code == 2 and "is a directory" in refused.output
    assert not tmp_path.with_name(tmp_path.name + ".npz").exists()


def test_encode_reads_lines_ended_by_newlines_only_and_checks_out_before_encoding(
    hash_pipeline, tmp_path
):
    """str.splitlines cut at a form feed or U+2028 inside a line: 5 vectors for 3 lines."""
    source = tmp_path / "texts.txt"
    source.write_text("page one\fpage two\r\nfirst\u2028second\n\nplain line\n", "utf-8")
    out = tmp_path / "g.npz"
    base = ["encode", "--pipeline", str(hash_pipeline)]
    result = runner.invoke(app, [*base, "--file", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with np.load(out) as data:
        assert data["texts"].tolist() == ["page one\fpage two", "first\u2028second", "plain line"]
    missing = runner.invoke(app, [*base, "one", "--out", str(tmp_path / "nodir" / "g.npz")])
    assert missing.exit_code == 2 and f"no directory {tmp_path / 'nodir'}" in missing.output


def test_encode_into_a_reader_that_stops_early_or_from_a_closed_stdin(hash_pipeline, tmp_path):
    """`encode | head -n 1` was an error (Broken pipe), and a closed stdin an AttributeError."""
    many = tmp_path / "many.txt"
    many.write_text("".join(f"text number {i}\n" for i in range(3000)))
    command = [sys.executable, "-m", "probembed", "encode", "--pipeline", str(hash_pipeline)]
    job = subprocess.Popen(
        [*command, "--file", str(many)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert json.loads(job.stdout.readline())["text"] == "text number 0"
    job.stdout.close()  # as `head -n 1` does
    assert job.wait(timeout=120) == 0, job.stderr.read().decode()
    closed = subprocess.run(command, stdin=None, capture_output=True, text=True,
                            preexec_fn=lambda: os.close(0))  # fmt: skip
    assert closed.returncode == 2 and "no texts: pass them as arguments" in closed.stderr


@pytest.mark.parametrize(
    ("given", "said"),
    [("", "no texts: stdin was empty; pass them"), ("\n \n", "no texts: stdin holds only blank")],
)
def test_encode_of_an_empty_or_blank_stdin_says_which(hash_pipeline, given, said):
    """An empty stdin (a script running `probembed encode` with no arguments) was said to
    hold 'only blank lines'."""
    result = runner.invoke(app, ["encode", "--pipeline", str(hash_pipeline)], input=given)
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


def test_encode_with_unknown_pipeline_is_a_clear_error():
    result = runner.invoke(app, ["encode", "--pipeline", "nope", "text"])
    assert result.exit_code == 2
    assert "no pipeline 'nope'" in result.output


def test_fit_with_a_missing_pairs_file_is_a_clear_error(tmp_path):
    result = runner.invoke(
        app, ["fit", "--pairs", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "p")]
    )
    assert result.exit_code == 2
    assert "missing.tsv" in result.output


def test_fit_refuses_a_bad_out_or_max_pairs_before_reading_any_pair(tmp_path):
    """--out a file, or --max-pairs 0, is refused at once (the pairs file is never read, so
    the missing one is not what the error names)."""
    (tmp_path / "taken").write_text("not a pipeline")
    base = ["fit", "--pairs", str(tmp_path / "missing.tsv"), "--model", "hash"]
    as_file = runner.invoke(app, [*base, "--out", str(tmp_path / "taken")])
    assert as_file.exit_code == 2 and "taken: is a file, not a folder" in as_file.output
    no_pairs = runner.invoke(app, [*base, "--out", str(tmp_path / "p"), "--max-pairs", "0"])
    assert no_pairs.exit_code == 2 and "--max-pairs" in no_pairs.output
    under_file = runner.invoke(app, [*base, "--out", str(tmp_path / "taken" / "sub")])
    assert under_file.exit_code == 2 and f"{tmp_path / 'taken'} is a file" in under_file.output


def test_fit_refuses_an_unknown_model_or_estimator_before_announcing_any_work(pairs_file, tmp_path):
    """`fit --model nosuch` said "fitting laplace on 2 pairs for nosuch" and then refused."""
    base = ["fit", "--pairs", str(pairs_file), "--out", str(tmp_path / "p")]
    for args, told in (
        (["--model", "nosuch"], "unknown encoder 'nosuch'"),
        (["--model", "hash", "--estimator", "bogus"], "unknown estimator 'bogus'"),
    ):
        result = runner.invoke(app, [*base, *args])
        assert result.exit_code == 2 and told in result.output
        assert "fitting" not in result.output and not (tmp_path / "p").exists()


def test_fit_names_its_options_and_what_is_wrong_with_the_pairs(pairs_file, tmp_path):
    """`--prior-precision 0` was refused after "fitting ..." as `laplace prior_precision`;
    `--temperature` with `single:` named the parameter; a folder given to --pairs was
    "missing"; a pair with a blank side was fitted on."""
    out = ["--out", str(tmp_path / "p"), "--model", "hash"]
    blank = tmp_path / "blank.tsv"
    blank.write_text(pairs_file.read_text() + "lonely\t \n")
    for args, told in (
        (["--pairs", str(pairs_file), "--prior-precision", "0"], "--prior-precision must be"),
        (
            ["--pairs", str(pairs_file), "--fusion", "single:hash", "--temperature", "3"],
            "--temperature not used by --fusion 'single:hash'",
        ),
        (["--pairs", str(tmp_path)], f"{tmp_path}: a folder, where a TSV file is expected"),
        (["--pairs", str(blank)], f"{blank}:{len(blank.read_text().splitlines())}: text_b is"),
    ):
        result = runner.invoke(app, ["fit", *args, *out])
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and told in said and "Traceback" not in said, said
        assert "fitting" not in said and not (tmp_path / "p").exists()


def test_fit_out_dot_saves_into_the_current_directory_named_after_it(
    pairs_file, tmp_path, monkeypatch
):
    """`--out .` fitted everything, then failed: the staging folder of `.` had no name."""
    here = tmp_path / "my-pipeline"
    here.mkdir()
    monkeypatch.chdir(here)
    fitted = runner.invoke(
        app, ["fit", "--pairs", str(pairs_file), "--model", "hash", "--out", "."]
    )
    assert fitted.exit_code == 0, fitted.output
    assert Pipeline.load(here, cache=False).name == "my-pipeline"


def test_eval_compare_on_a_small_sts_split_writes_tidy_rows(hash_pipeline, datasets, tmp_path):
    sts = tmp_path / "sts"
    sts.mkdir()
    for split in ("test", "dev"):
        lines = (datasets / "sts" / "stsb" / f"{split}.tsv").read_text().splitlines()[:201]
        (sts / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "rows.json"
    result = runner.invoke(
        app,
        ["eval", str(sts), "--pipeline", str(hash_pipeline), "--compare", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    rows = payload["rows"]
    assert payload["config"]["tuned_on"] == "dev"
    methods = {r["method"] for r in rows if r["metric"] == "spearman"}
    # tuned on dev: the pipeline as shipped is a row of its own beside the retuned uec
    assert methods == {"single:hash", "mean", "concat", "weighted", "uec", "hash-uec as shipped"}
    assert all(set(r) >= {"dataset", "split", "method", "metric", "value"} for r in rows)
    spearman = {r["method"]: r["value"] for r in rows if r["metric"] == "spearman"}
    # the single model's row is the plain cosine Spearman, computed here independently
    gold_rows = [line.split("\t") for line in (sts / "test.tsv").read_text().splitlines()[1:]]
    pipe = Pipeline.load(hash_pipeline, cache=False)
    a, b = (pipe.encode([r[i] for r in gold_rows]).gaussian.mean.astype(float) for i in (0, 1))
    cosine = np.einsum("nd,nd->n", a, b) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    expected = spearmanr(cosine, [float(r[2]) for r in gold_rows]).statistic
    # same float32 means scored in float64 on both sides: only summation order differs
    assert spearman["single:hash"] == pytest.approx(expected, abs=1e-9)


def test_a_table_into_a_reader_that_has_gone_ends_as_any_broken_pipe_does():
    """`probembed models | head -1` exited 1 (rich's own broken-pipe handling), where
    `encode | head` exits 0: a reader that stops early is not a failure."""
    child = subprocess.Popen(
        [sys.executable, "-m", "probembed", "models"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    child.stdout.close()  # gone before the table is written: every write meets a broken pipe
    _, said = child.communicate(timeout=120)
    assert child.returncode == 0, said.decode()
    assert b"Traceback" not in said


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"caf\xe9 au lait\n", "not UTF-8: byte 0xe9 at offset 3; it may be Latin-1"),
        (
            "d\xe9j\xe0 \x96 vu\n".encode().replace(b"\xc2\x96", b"\x96"),
            "`iconv -f UTF-8 -t UTF-8 -c`",
        ),
        ("two lines\nin UTF-16\n".encode("utf-16"), "UTF-16 text, not UTF-8; convert it"),
    ],
)
def test_encode_of_a_file_that_is_not_utf8_says_what_it_is(hash_pipeline, tmp_path, content, said):
    """It printed the codec's own "'utf-8' codec can't decode byte 0xff", where ingest says
    what the file is and how to convert it."""
    source = tmp_path / "texts.txt"
    source.write_bytes(content)
    result = runner.invoke(app, ["encode", "--pipeline", str(hash_pipeline), "--file", str(source)])
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


def test_encode_refuses_texts_and_a_file_together(hash_pipeline, tmp_path):
    """The file was ignored without a word when texts were given too."""
    source = tmp_path / "texts.txt"
    source.write_text("from the file\n", encoding="utf-8")
    args = ["encode", "--pipeline", str(hash_pipeline), "an argument", "--file", str(source)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "not both" in result.output, result.output


def test_fit_on_a_model_giving_nan_names_the_model_and_the_text(nan_model_dir, tmp_path):
    """A model giving NaN for some texts was told "calibration needs some non-zero variance;
    every variance is zero": the NaN, the model and the text it met are what is said."""
    pairs = tmp_path / "pairs.tsv"
    lines = [f"a cat number {i} sat\ta cat {i} sat down" for i in range(30)]
    lines[7] = "a man plays the guitar\tsomeone plays an instrument"
    pairs.write_text("text_a\ttext_b\n" + "\n".join(lines) + "\n")
    out = tmp_path / "p"
    result = runner.invoke(
        app, ["fit", "--pairs", str(pairs), "--model", str(nan_model_dir), "--out", str(out)]
    )
    said = " ".join(result.output.split())
    assert result.exit_code == 2, said
    assert f"encoder '{nan_model_dir}' (dim 16) gave a vector with a NaN" in said
    assert "'a man plays the guitar'" in said and "variance" not in said
    assert not out.exists()


def test_fit_reads_a_model_folder_named_from_home(pairs_file, tmp_path, static_model_dir):
    """A quoted `--model '~/models/static'` (a shell expands only a bare ~) was refused as a
    folder that does not exist; the pipeline records the folder's absolute path."""
    folder = shutil.copytree(static_model_dir, tmp_path / "home" / "models" / "static")
    out = tmp_path / "p"
    args = ["fit", "--pairs", str(pairs_file), "--model", "~/models/static", "--out", str(out)]
    result = runner.invoke(app, args, env={"HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    config = json.loads((out / "pipeline.json").read_text())
    assert [m["encoder"] for m in config["models"]] == [str(folder.resolve())]


def test_fit_with_a_model_folder_that_is_not_there_says_so(pairs_file, tmp_path):
    """`--model /path/that/does/not/exist` was "unknown encoder ...: use one of minilm, ..."."""
    missing, out = tmp_path / "models" / "mine", tmp_path / "p"
    result = runner.invoke(
        app, ["fit", "--pairs", str(pairs_file), "--model", str(missing), "--out", str(out)]
    )
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and f"model directory '{missing}' does not exist" in said


def test_freeze_for_exit_finalises_a_commands_garbage_before_freezing_the_rest():
    """The console script ends each command with `freeze_for_exit`: garbage in a reference cycle is
    finalised first (a temporary file or a connection in one would otherwise be left to
    shutdown, which no longer collects it), then the survivors are frozen out of the
    shutdown collections."""
    from probembed.interfaces import freeze_for_exit

    finalised = []

    class Cycle:
        def __del__(self):
            finalised.append(True)

    gc.disable()  # no automatic collection may run the finaliser before freeze_for_exit does
    try:
        loop = Cycle()
        loop.me = loop
        del loop
        survivor = Cycle()
        survivor.me = survivor
        freeze_for_exit()
        assert finalised == [True]
        assert not any(o is survivor for o in gc.get_objects())  # frozen: out of every generation
    finally:
        gc.unfreeze()
        gc.enable()
    del survivor.me


@pytest.mark.parametrize(
    "way_in",
    [
        "from probembed.interfaces import main; main()",
        "runpy.run_module('probembed', run_name='__main__', alter_sys=True)",
        "runpy.run_module('probembed.interfaces.cli', run_name='__main__', alter_sys=True)",
    ],
    ids=["console script", "python -m probembed", "python -m probembed.interfaces.cli"],
)
def test_the_console_script_freezes_for_exit_after_its_command(tmp_path, way_in):
    """`main` runs `freeze_for_exit` once its command is done, a failed one included (exit 2 here):
    the atexit hook, which runs after it, finds the objects frozen. Every way in is `main`
    (`python -m` runs a module as runpy does): `python -m probembed.interfaces.cli` ran the
    typer app alone, without it."""
    code = (
        "import atexit, gc, runpy, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "sys.argv = ['probembed', 'search', 'q', '--db', sys.argv[1]]\n"
        f"{way_in}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "frozen True"
