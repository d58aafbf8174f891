"""Files the commands write, named by an option: `-`, stdout's own path, links, named pipes,
devices and folders, each written through or refused as `console.output_file` decides.

What is about standard output and pipes runs the command as its own process."""

import json
import os
import pty
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from probembed.interfaces.cli import app

DATA = Path(__file__).parent / "data"
STS = DATA / "sts" / "toy"
runner = CliRunner()


def probembed(*args: str, **options) -> subprocess.CompletedProcess:
    """The command as a process of its own, its output captured as bytes."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, "-m", "probembed", *args], timeout=300, check=False, **options
    )


def one_line(text: str | bytes) -> str:
    """Output with rich's wrapping undone, to search for a phrase."""
    return " ".join((text.decode() if isinstance(text, bytes) else text).split())


@pytest.mark.parametrize("path", ["-", "/dev/fd/1"])
def test_eval_json_to_stdout_is_the_json_alone(pydoc_pipeline_dir, tmp_path, path):
    """`--json -` wrote a file named `-`, and `--json /dev/stdout` replaced the device with a
    file (as root); /dev/fd/1 failed. Both are stdout now, and the table goes to stderr."""
    done = probembed(
        "eval", str(STS), "--pipeline", str(pydoc_pipeline_dir), "--json", path, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr.decode()
    payload = json.loads(done.stdout)  # the whole of stdout: no table before it
    assert [row["metric"] for row in payload["rows"]] == ["spearman"]
    assert "spearman" in done.stderr.decode() and "wrote 1 rows to stdout" in one_line(done.stderr)
    assert list(tmp_path.iterdir()) == []


def test_eval_json_through_a_link_replaces_its_target(pydoc_pipeline_dir, tmp_path):
    """The link was replaced by a file and its target left empty."""
    target, link = tmp_path / "results" / "rows.json", tmp_path / "rows.json"
    target.parent.mkdir()
    target.write_text("")
    link.symlink_to(target)
    args = ["eval", str(STS), "--pipeline", str(pydoc_pipeline_dir), "--json", str(link)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["rows"][0]["metric"] == "spearman"


def test_eval_json_into_a_named_pipe_is_written_to_its_reader(pydoc_pipeline_dir, tmp_path):
    """The named pipe was replaced by a file, and its reader waited for ever."""
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        args = ["eval", str(STS), "--pipeline", str(pydoc_pipeline_dir), "--json", str(fifo)]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        read, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
        reader.wait()
    assert json.loads(read)["rows"][0]["metric"] == "spearman"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_character_device_is_written_as_it_is():
    """A device is written to directly: an atomic replace would put a file in its place."""
    from probembed.interfaces.console import output_file

    device = output_file("--json", Path(os.devnull))
    assert device.direct and str(device) == os.devnull
    with device.open() as handle:
        handle.write(b"{}\n")
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


def test_encode_out_dash_writes_the_npz_to_a_pipe_but_not_to_a_terminal(
    pydoc_pipeline_dir, tmp_path
):
    """`--out -` wrote a file named `-.npz`; a binary archive on a terminal is refused, before
    any encoding, as gzip refuses one."""
    args = ("encode", "--pipeline", str(pydoc_pipeline_dir), "jaguar", "a big cat", "--out", "-")
    piped = probembed(*args, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr.decode()
    (tmp_path / "got.npz").write_bytes(piped.stdout)
    with np.load(tmp_path / "got.npz") as data:
        assert data["texts"].tolist() == ["jaguar", "a big cat"]
    assert "to stdout" in one_line(piped.stderr)
    main, terminal = pty.openpty()
    try:
        shown = probembed(*args, cwd=tmp_path, stdout=terminal)
    finally:
        os.close(terminal)
        os.close(main)
    assert shown.returncode == 2
    assert "--out -: stdout is a terminal, and binary data is not written to one" in one_line(
        shown.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["got.npz"]


def test_encode_out_through_a_link_replaces_its_target(pydoc_pipeline_dir, tmp_path):
    """numpy's `.npz` rule named a link `vectors` as `vectors.npz`: a file beside the link."""
    target, link = tmp_path / "store" / "v.npz", tmp_path / "vectors"
    target.parent.mkdir()
    link.symlink_to(target)  # its target not there yet: made, as a shell's `>` makes it
    args = ["encode", "--pipeline", str(pydoc_pipeline_dir), "one", "--out", str(link)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["store", "vectors"]
    with np.load(target) as data:
        assert data["texts"].tolist() == ["one"]


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["fit", "--pairs", str(DATA / "pairs" / "toy-pairs.tsv"), "--model", "hash", "--out", "-"],
         "--out -: it names a folder to write files in; stdout cannot be one"),
        (["embed", str(DATA / "retrieval" / "toy"), "--out", "-"],
         "--out -: it names a folder to write files in; stdout cannot be one"),
        (["eval", str(STS), "--plots", "-"],
         "--plots -: it names a folder to write files in; stdout cannot be one"),
        (["tune", "default", str(STS), "--out", "fifo"],
         "--out fifo: is a named pipe, not a folder"),
        (["encode", "one", "--out", "fifo/x"],
         "--out fifo/x: no directory {tmp}/fifo"),
    ],
)  # fmt: skip
def test_a_folder_to_write_is_never_stdout_or_a_named_pipe(
    command, said, tmp_path, monkeypatch, pydoc_pipeline_dir
):
    """`--out -` made a folder named `-`, and a pipeline was saved there."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    if command[0] in ("eval", "encode"):
        command = [*command, "--pipeline", str(pydoc_pipeline_dir)]
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert said.format(tmp=tmp_path) in one_line(result.output)
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]


@pytest.mark.parametrize(
    "command", [["encode", "one", "--out", "-"], ["eval", str(STS), "--json", "-"]]
)
def test_dash_with_stdout_closed_is_refused_naming_the_option(command, pydoc_pipeline_dir):
    """Python gives a process started with stdout closed (`>&-`) no sys.stdout: `--out -`
    failed on it with an AttributeError, exit 1."""
    done = probembed(
        *command,
        "--pipeline",
        str(pydoc_pipeline_dir),
        preexec_fn=lambda: os.close(1),  # a closed stdout, as `>&-` gives
        stdout=None,
    )
    assert done.returncode == 2, done.stderr.decode()
    assert f"{command[-2]} -: stdout is closed; name a file" in one_line(done.stderr)
