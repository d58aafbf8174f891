"""A Ray ingest that started Ray on this machine leaves none of Ray's processes behind,
however its driver ends: SIGKILL (the OOM killer, a CI timeout), SIGTERM, Ctrl-C.

Each test runs the real CLI in a session of its own (Ray's processes stay in their driver's
session) with a Ray of its own (no RAY_ADDRESS), and kills it once it has committed a batch:
its actors are at work then.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli_errors import stored

pytest.importorskip("ray")

if not Path("/proc/self/stat").exists():
    pytest.skip("Linux only: Ray's processes are found through /proc", allow_module_level=True)

#: Seconds the processes of a killed driver's Ray get to end: ray.init's fate-sharing and our
#: watcher end them within about 2 s; the raylet's agents outlived a SIGKILL or SIGTERM by
#: 60-62 s (a timeout written in Ray's code), so this bound tells the two apart.
GONE_WITHIN = 30


def processes() -> dict[int, tuple[int, str]]:
    """Each live process (not a zombie) by pid: its session and command line (/proc)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            command = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # ended since listed
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()  # state, parent, group, session, ...
        if fields[0] != b"Z":
            found[int(entry.name)] = (int(fields[3]), command.decode(errors="replace").strip())
    return found


def ray_session_dir(driver: int) -> str:
    """The session folder of the Ray the driver started, read off its raylet's command line."""
    for session, command in processes().values():
        found = re.search(r"raylet .*--session_dir=(\S+)", command)
        if session == driver and found:
            return found.group(1)
    raise AssertionError(f"no raylet in the session of driver {driver}")


def left_of(driver: int, session_dir: str) -> dict[int, str]:
    """The processes of the driver's session, or whose command line names its Ray session's
    folder (the driver itself included): their command lines, by pid."""
    return {
        pid: command
        for pid, (session, command) in processes().items()
        if session == driver or session_dir in command
    }


@pytest.mark.parametrize(
    "sent", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda sent: sent.name
)
def test_a_killed_ray_ingest_leaves_no_ray_process_behind(tmp_path, hash_pipeline, sent):
    """Killed (SIGKILL) or sent SIGTERM, a Ray ingest left the raylet's dashboard agent and
    runtime env agent running 60-62 s; Ctrl-C (ray.shutdown()) left nothing."""
    n = 3000  # batches of 16: the signal lands long before the last (asserted below)
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"text {i}"}) + "\n"
                              for i in range(n)))  # fmt: skip
    db = tmp_path / "db"
    args = ["ingest", str(source), "--db", str(db), "-c", "c", "--batch-size", "16"]
    args += ["--pipeline", str(hash_pipeline.save(tmp_path / "pipeline")), "--ray"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
    job = subprocess.Popen(
        [sys.executable, "-m", "probembed", *args, "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        # Ctrl-C as a terminal sends it, whatever the runner ignores (conftest)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # only a guard against a hang
        while stored(db) == 0 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        session_dir = ray_session_dir(job.pid)
        assert job.poll() is None  # still at work
        job.send_signal(sent)
        job.wait(120)
    finally:
        job.kill()
    assert 0 < stored(db) < n
    deadline = time.monotonic() + GONE_WITHIN
    while left_of(job.pid, session_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left_of(job.pid, session_dir) == {}
