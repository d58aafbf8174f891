"""Progress where stderr is not a terminal: plain lines, not a bar shown only at the end."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest

from probembed import progress
from probembed.progress import progress_bar


@pytest.fixture(autouse=True)
def not_forced(monkeypatch):
    """rich takes these as a terminal whatever stderr is."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


def test_a_log_gets_a_line_per_interval_and_a_last_one(capsys, monkeypatch):
    """A live bar on a non-terminal printed nothing until the work was done: an ingest of
    hours in a container's log said nothing for hours."""
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)  # every advance is an interval
    with progress_bar("ingest docs", 1200) as bar:
        for _ in range(3):
            bar.advance(400)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" elapsed")[0] for line in lines] == [
        "ingest docs: 400/1,200",
        "ingest docs: 800/1,200",
        "ingest docs: 1,200/1,200",  # and no second line of the same count at the end
    ]
    assert all(re.fullmatch(r".* elapsed \d+:\d\d:\d\d eta \d+:\d\d:\d\d", line) for line in lines)
    assert lines[-1].endswith("eta 0:00:00")


def test_between_intervals_only_the_last_line_is_written(capsys):
    with progress_bar("embed", 10) as bar:
        bar.advance(4)
        bar.advance(6)
    (line,) = capsys.readouterr().err.splitlines()  # unless 30 s passed between the two
    assert re.fullmatch(r"embed: 10/10 elapsed \d+:\d\d:\d\d eta 0:00:00", line)


def test_a_disabled_bar_writes_nothing(capsys):
    with progress_bar("quiet", 5, enabled=False) as bar:
        bar.advance(5)
    assert capsys.readouterr().err == ""


def test_an_ingest_line_comes_while_a_batch_is_encoded(
    capsys, monkeypatch, tmp_path, hash3_pipeline
):
    """Ingest advanced its bar once per committed batch (512 texts): `make run` on the Python
    docs wrote its first line after 512 of 544 passages, 90 s in. The bar now moves as each
    member encodes a piece of the batch, in whole texts (all members done with them)."""
    from probembed import pipeline as pipeline_module
    from probembed.store import Database, ingest

    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    monkeypatch.setattr(pipeline_module, "_CHUNK", 4)  # pieces of 4 texts per member
    records = [{"id": str(i), "text": f"text number {i}"} for i in range(10)]
    collection = Database(tmp_path / "db", create=True).collection("c")
    ingest(records, collection, hash3_pipeline, batch_size=10, progress=True)
    counts = [
        int(line.split(": ")[1].split("/")[0]) for line in capsys.readouterr().err.splitlines()
    ]
    # three members encode 4 + 4 + 2 texts each, 30 member-texts told as whole texts
    assert counts == [1, 2, 3, 4, 6, 8, 9, 10]


#: A bar of 300 items advanced in three steps, in a process of its own.
BAR = (
    "from probembed.progress import progress_bar\n"
    "with progress_bar('embed', 300) as bar:\n"
    "    for _ in range(3):\n"
    "        bar.advance(100)\n"
)
#: What rich writes to start a live display: the cursor hidden.
LIVE = b"\x1b[?25l"


def _environment(**set_: str) -> dict[str, str]:
    """This environment without the variables that force a terminal, then `set_`."""
    forced = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
    return {k: v for k, v in os.environ.items() if k not in forced} | set_


def test_forced_colour_puts_no_live_bar_in_a_log_file(tmp_path):
    """FORCE_COLOR=1 / TTY_COMPATIBLE=1 (common in CI) made rich take a log file for a
    terminal: a live bar's redraws, 72 KB of them for an ingest of 1,000 rows."""
    log = tmp_path / "log"
    with log.open("wb") as handle:
        subprocess.run(
            [sys.executable, "-c", BAR],
            stderr=handle,
            env=_environment(FORCE_COLOR="1", TTY_COMPATIBLE="1"),
            check=True,
            timeout=120,
        )
    (line,) = log.read_bytes().decode().splitlines()
    assert re.fullmatch(r"embed: 300/300 elapsed \d+:\d\d:\d\d eta 0:00:00", line)


def test_a_terminal_still_gets_the_live_bar(tmp_path):
    """Where stderr is a terminal the bar is drawn live, whatever the environment says."""
    main, terminal = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-c", BAR], stderr=terminal, env=_environment(), stdout=subprocess.DEVNULL
    )
    os.close(terminal)
    shown = b""
    while True:  # read until the child has gone and the terminal closed (EIO)
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert child.wait(timeout=120) == 0
    assert LIVE in shown and b"300/300" in shown
