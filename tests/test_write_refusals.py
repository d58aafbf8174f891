"""Writes the file system refuses: a collection folder of another user's files, a full disk.
LanceDB's raw error ended the CLI with exit 1 ("RuntimeError: lance error: LanceError(IO):
Permission denied (os error 13) ...") and a service's write with a generic 500; they are now
told as a read-only database is: the path, the cause, what to do; exit 2, 503 or 507."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from privilege_support import owned_by_another, unprivileged
from service_support import Server

from probembed.store import Database, Record, ingest

PROBEMBED = [sys.executable, "-m", "probembed"]
#: What the service's write and delete send.
WRITE = {"documents": [{"id": "z", "text": "a new item " * 40}]}
DELETE = {"ids": ["a"]}


def stored(root: Path, pipeline, ids: list[str]) -> None:
    """A collection c of these ids at root, each with a text of its own, a commit each (a
    compaction then has fragments to merge)."""
    records = [Record(i, f"the text of item {i}") for i in ids]
    ingest(records, Database(root, create=True).collection("c"), pipeline, batch_size=1)


def refused_for_permission(said: str, root: Path) -> bool:
    """Whether a message names the collection, the cause, its folder and what to do."""
    said = " ".join(said.split())
    return (
        f"cannot write collection 'c': permission denied on {root}/c.lance" in said
        and f"make {root}/c.lance and everything in it writable by this user" in said
        and "lance error" not in said
    )


def test_the_cli_names_a_collection_folder_it_may_not_write_and_what_to_do(
    tmp_path, pydoc_pipeline, pydoc_pipeline_dir
):
    root = tmp_path / "db"
    stored(root, pydoc_pipeline, ["a", "b"])
    source = tmp_path / "more.jsonl"
    source.write_text(json.dumps(WRITE["documents"][0]) + "\n")
    commands = {
        "ingest": ["ingest", str(source), "--pipeline", str(pydoc_pipeline_dir)],
        "delete": ["delete", "a"],
        "compact": ["compact", "--keep", "0"],
    }
    as_another = unprivileged()
    with owned_by_another(root / "c.lance"):
        done = {
            name: subprocess.run(
                [*as_another, *PROBEMBED, *args, "--db", str(root), "-c", "c"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            for name, args in commands.items()
        }
    for name, run in done.items():
        assert run.returncode == 2, (name, run.stderr)
        assert run.stderr.startswith("error: "), (name, run.stderr)
        assert refused_for_permission(run.stderr, root), (name, run.stderr)
    assert Database(root).open("c").ids() == {"a", "b"}


def test_the_service_answers_a_write_it_may_not_make_503_naming_the_collection(
    tmp_path, pydoc_pipeline, pydoc_pipeline_dir
):
    root = tmp_path / "db"
    stored(root, pydoc_pipeline, ["a", "b"])
    as_another = unprivileged()
    with (
        owned_by_another(root / "c.lance"),
        Server(root, pydoc_pipeline_dir, wrapper=as_another, create_db=False) as server,
        server.client() as http,
    ):
        answers = [
            http.post("/v1/collections/c/documents", json=WRITE),
            http.post("/v1/collections/c/delete", json=DELETE),
        ]
        found = http.post("/v1/collections/c/search", json={"query": "the text of item a"})
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["type"] == "service_unavailable"
        assert refused_for_permission(answer.json()["detail"], Path("<db>")), answer.text
    assert found.status_code == 200, found.text
    assert Database(root).open("c").ids() == {"a", "b"}


#: Run as `sh -c FULL_DISK COMMAND...` in a mount namespace of its own: `$F` becomes a 4 MB
#: file system holding collection c (ingested from `$R` with pipeline `$P`), then COMMAND
#: runs in this process; the file system is filled up (by a file taking all its room) once
#: the file `$T` exists, before COMMAND where it does already, and `$T.full` then made.
FULL_DISK = """
mount -t tmpfs -o size=4m tmpfs "$F" || exit 97
"$0" -m probembed ingest "$R" --db "$F/db" -c c --pipeline "$P" >/dev/null 2>&1 || exit 98
fill() { dd if=/dev/zero of="$F/filler" bs=64k 2>/dev/null; touch "$T.full"; }
if [ -e "$T" ]; then fill; else { while [ ! -e "$T" ]; do sleep 0.1; done; fill; } & fi
exec "$0" "$@"
"""


def full_disk(
    tmp_path: Path, pipeline_dir: Path, now: bool
) -> tuple[list[str], dict[str, str], Path]:
    """What runs a command on a disk made full (`FULL_DISK`) before it starts (`now`), or
    once the trigger file `tmp_path / "fill"` is made: its prefix, its environment and the
    database there."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: no way to give a command a small file system of its own")
    folder, first, trigger = tmp_path / "small", tmp_path / "first.jsonl", tmp_path / "fill"
    folder.mkdir()
    first.write_text("".join(json.dumps({"id": i, "text": f"item {i}"}) + "\n" for i in "ab"))
    if now:
        trigger.touch()
    tried = subprocess.run(
        ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs {folder}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if tried.returncode != 0:
        pytest.skip(f"cannot mount a file system here: {tried.stderr.strip()[:200]}")
    env = {"F": str(folder), "R": str(first), "P": str(pipeline_dir), "T": str(trigger)}
    return ["unshare", "--mount", "sh", "-c", FULL_DISK], env, folder / "db"


def refused_for_space(said: str, db: Path) -> bool:
    """Whether a message names the collection, the cause, where and what to do."""
    said = " ".join(said.split())
    return (
        f"no space left on device for collection 'c' in {db}/c.lance (" in said
        and "free space on that file system (or raise the quota), then write again" in said
        and "lance error" not in said
    )


def test_the_cli_says_a_full_disk_and_what_to_do(tmp_path, pydoc_pipeline_dir):
    prefix, env, db = full_disk(tmp_path, pydoc_pipeline_dir, now=True)
    source = tmp_path / "more.jsonl"
    source.write_text(json.dumps(WRITE["documents"][0]) + "\n")
    run = subprocess.run(
        [*prefix, *PROBEMBED, "ingest", str(source), "--db", str(db), "-c", "c"],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: ") and refused_for_space(run.stderr, db), run.stderr


def test_the_service_answers_a_write_on_a_full_disk_507(tmp_path, pydoc_pipeline_dir):
    prefix, env, db = full_disk(tmp_path, pydoc_pipeline_dir, now=False)
    log = tmp_path / "server.log"
    with (
        Server(db, pydoc_pipeline_dir, wrapper=prefix, env=env, log=log, create_db=False) as server,
        server.client() as http,
    ):
        assert http.post("/v1/collections/c/search", json={"query": "item a"}).status_code == 200
        (tmp_path / "fill").touch()  # once its searches are loaded: the disk fills
        while not (tmp_path / "fill.full").exists() and server.process.poll() is None:
            time.sleep(0.05)
        answers = [
            http.post("/v1/collections/c/documents", json=WRITE),
            http.post("/v1/collections/c/delete", json=DELETE),
        ]
        count = http.get("/v1/collections/c").json()["count"]
    for answer in answers:
        assert answer.status_code == 507, answer.text
        assert refused_for_space(answer.json()["detail"], Path("<db>")), answer.text
    assert count == 2
