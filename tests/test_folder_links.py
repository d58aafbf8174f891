"""What a folder source's links, named pipes and unreadable files do to an ingest: a link out
of a shared folder is not read unless asked for, and bad paths get one line naming them."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from privilege_support import unprivileged
from typer.testing import CliRunner

from probembed.chunking import ChunkSettings
from probembed.interfaces.cli import app
from probembed.store import Database, ingest, ingest_documents, read_documents, read_records
from probembed.store.embed_job import embed_to_parquet
from probembed.store.readers import Link, Special
from probembed.store.streamed import STREAM_BYTES

SMALL = ChunkSettings(48, 8)
#: What a read says of a file whose name holds another file than the walk found there.
CHANGED = (
    "the file changed since its folder was listed (another file or a link is at its name "
    "now); ingest it again"
)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A shared docs folder (a space in its name) into which its owner linked a file from
    elsewhere, a hidden file of the folder itself, and one of its own pages."""
    (tmp_path / "secret.txt").write_text("The launch code is 4242 and nobody may read it.")
    root = tmp_path / "docs dir"
    (root / "sub").mkdir(parents=True)
    (root / "guide.md").write_text("# Guide\n\nInstall the tool with pip.")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[http]\n\textraheader = AUTHORIZATION: basic dG9rZW4=")
    (root / "leak.md").symlink_to(tmp_path / "secret.txt")
    (root / "sub" / "config.md").symlink_to(root / ".git" / "config")
    (root / "alias.md").symlink_to("guide.md")  # a second name for a page of the folder
    return root


def stored_ids(tmp_path: Path, source: Path, pipeline, write: str, **options) -> tuple[set, Any]:
    """The document ids one front door stores of a source, and its report."""
    name = f"{write}-{len(options)}"
    if write == "embed":
        out = tmp_path / name
        report = embed_to_parquet(source, out, pipeline, **options)
        return set(pq.read_table(out).column("id").to_pylist()), report
    collection = Database(tmp_path / "db", create=True).collection(name)
    if write == "chunks":
        report = ingest_documents(source, collection, pipeline, SMALL, **options)
        return set(collection.document_index()), report
    report = ingest(source, collection, pipeline, **options)
    return collection.ids(), report


@pytest.mark.parametrize("write", ["chunks", "records", "embed"])
def test_a_link_out_of_the_folder_is_not_read_and_the_report_says_where_it_leads(
    tmp_path, shared, pydoc_pipeline, write
):
    """`ln -s /tmp/secret.txt "docs dir/leak.md"` stored the secret for every searcher, and
    the report named only links to folders. A link to a page of the folder is read (it adds
    nothing from elsewhere: the report names the repeat); one to a hidden file is not."""
    ids, report = stored_ids(tmp_path, shared, pydoc_pipeline, write)
    assert ids == {"guide.md", "alias.md"}
    secret, config = tmp_path / "secret.txt", shared / ".git" / "config"
    assert report.unread.linked == [
        Link("leak.md", os.path.realpath(secret), folder=False),
        Link("sub/config.md", os.path.realpath(config), folder=False),
    ]
    said = report.summary()
    assert (
        f"; not followed: 2 link(s) out of the folder or to a folder, leak.md -> "
        f"{os.path.realpath(secret)}, sub/config.md -> {os.path.realpath(config)} "
        "(follow_links=True follows them; or ingest a target on its own)"
    ) in said


@pytest.mark.parametrize("write", ["chunks", "records", "embed"])
def test_follow_links_reads_every_link_and_leaves_a_loop(tmp_path, shared, pydoc_pipeline, write):
    """Asked for, links out of the folder and to folders are followed, through a followed
    folder too; a link to a folder the walk is in is not (it would never end), and is named."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "deep" / "faq.md").write_text("# FAQ\n\nLinked answers about rivers.")
    (elsewhere / "deep" / "again").symlink_to(elsewhere, target_is_directory=True)
    (shared / "ext").symlink_to(elsewhere, target_is_directory=True)
    (shared / "sub" / "loop").symlink_to(shared, target_is_directory=True)
    ids, report = stored_ids(tmp_path, shared, pydoc_pipeline, write, follow_links=True)
    assert ids == {"guide.md", "alias.md", "leak.md", "sub/config.md", "ext/deep/faq.md"}
    assert report.unread.linked == [
        Link("ext/deep/again", os.path.realpath(elsewhere), folder=True, loop=True),
        Link("sub/loop", os.path.realpath(shared), folder=True, loop=True),
    ]
    assert (
        "; not followed: 2 link(s) to a folder they are in (a loop), ext/deep/again/ -> "
    ) in report.summary()


def test_the_cli_names_links_it_left_and_follows_them_with_follow_links(
    tmp_path, shared, pydoc_pipeline_dir, monkeypatch
):
    """The walkthrough's `probembed ingest "docs dir" --chunk`: a search found the secret."""
    monkeypatch.setenv("COLUMNS", "300")
    (shared / "host.txt").symlink_to(tmp_path / "secret.txt")
    base = ["ingest", str(shared), "--chunk", "--pipeline", str(pydoc_pipeline_dir)]
    result = CliRunner().invoke(app, [*base, "--db", str(tmp_path / "db")])
    said = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert f"host.txt -> {os.path.realpath(tmp_path / 'secret.txt')}" in said
    assert "(--follow-links follows them; or ingest a target on its own)" in said
    hits = Database(tmp_path / "db").open("default").search("launch code 4242", k=10)["hits"]
    assert hits and not any("4242" in hit["text"] for hit in hits)
    followed = CliRunner().invoke(app, [*base, "--db", str(tmp_path / "all"), "--follow-links"])
    assert followed.exit_code == 0, followed.output
    stored = Database(tmp_path / "all").open("default").document_index()
    assert {"host.txt", "leak.md", "sub/config.md"} <= set(stored)
    synced = CliRunner().invoke(app, [*base, "--db", str(tmp_path / "all"), "--sync"])
    said = " ".join(synced.output.split())
    assert (  # not read, and the report says which removed documents links held
        "documents added 0, updated 0, removed 3 (3 of them from links not followed: "
        "host.txt, leak.md, sub/config.md), unchanged 2"
    ) in said


def test_a_plain_sync_names_the_removed_records_that_links_held(tmp_path, shared, pydoc_pipeline):
    """A sync removes what a link no longer followed stored (by design), and said only how
    many it removed, as if the files had been deleted."""
    (shared / "gone.md").write_text("# Gone\n\nA page deleted before the next sync.")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest(shared, collection, pydoc_pipeline, follow_links=True)
    (shared / "gone.md").unlink()
    report = ingest(shared, collection, pydoc_pipeline, sync=True)
    assert collection.ids() == {"guide.md", "alias.md"}
    assert report.removed_links == ["leak.md", "sub/config.md"]
    assert (
        ", removed 3 (2 of them from links not followed: leak.md, sub/config.md), already"
    ) in report.summary()


def test_a_named_pipe_is_named_as_one_not_as_missing(tmp_path, pydoc_pipeline):
    """`ingest fifo.md` said "no documents at fifo.md: expected ... or one such file"."""
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    said = f"{fifo} is not a regular file but a named pipe: give a file, or a folder of files"
    collection = Database(tmp_path / "db", create=True).collection("docs")
    for write in (ingest, ingest_documents):
        with pytest.raises(ValueError, match=said):
            write(fifo, collection, pydoc_pipeline)
    for args in (["ingest", str(fifo)], ["ingest", str(fifo), "--chunk"]):
        result = CliRunner().invoke(app, [*args, "--db", str(tmp_path / "cli")])
        assert result.exit_code == 2, result.output
        assert " ".join(result.output.split()) == f"error: {said}"
    embedded = CliRunner().invoke(app, ["embed", str(fifo), "--out", str(tmp_path / "out")])
    assert embedded.exit_code == 2 and said in " ".join(embedded.output.split())
    assert not (tmp_path / "cli").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("notes.md", ["ingest", "--db", "db"]),
        ("docs.jsonl", ["ingest", "--chunk", "--db", "db"]),
        ("notes.md", ["embed", "--out", "out"]),
    ],
)
def test_an_unreadable_file_is_one_error_line(tmp_path, name, args):
    """typer's own check answered in a box: "Invalid value for 'path': path ... is not
    readable", not the `error:` line with exit 2 that other bad input gets."""
    source = tmp_path / name
    source.write_text('{"id": "a", "text": "some text"}\n')
    source.chmod(0)
    done = subprocess.run(
        [*unprivileged(), sys.executable, "-m", "probembed", args[0], name, *args[1:]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    if done.returncode != 2 and "setpriv:" in done.stderr:
        pytest.skip(f"cannot drop root's read right here: {done.stderr.strip()[:200]}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"error: cannot read {name}: Permission denied"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no database, no out


def swap_for_link(path: Path, target: Path) -> None:
    """What someone who can write in a shared folder does between a walk and a read."""
    path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("reader", ["records", "documents", "scanned"])
def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(tmp_path, shared, reader):
    """The review's /tmp/rv7/links.py: the walk refused `leak.md`, but a page swapped for
    `notes.md -> secret.txt` once the walk was done was read through the link, since each
    file was opened by its name later (a reader is a generator). Plain, chunked, and a large
    file's first pass (`scanned`, `stream_bytes=0`)."""
    (shared / "notes.md").write_text("# Notes\n\nPlain notes of the folder.")
    if reader == "records":
        items = read_records(shared)
    else:
        items = read_documents(shared, 0 if reader == "scanned" else STREAM_BYTES)
    assert next(items).id == "alias.md"  # the walk is done
    swap_for_link(shared / "notes.md", tmp_path / "secret.txt")
    rest = list(items)
    assert [item.id for item in rest[:-1]] == ["guide.md"]
    refused = rest[-1]
    assert (refused.source, refused.message, refused.doc_id) == (
        str(shared / "notes.md"),
        CHANGED,
        "notes.md",  # a sync keeps its stored version: it is there, but not readable
    )


def test_a_large_file_swapped_for_a_link_between_its_passes_stores_nothing_of_it(
    tmp_path, shared, pydoc_pipeline
):
    """A large file is scanned when the folder is read and opened again when its chunks are
    written, after the other documents': swapped for a link in between, the link's target
    was read, embedded and committed batch by batch, until the end of the file showed that
    its hash had changed and the batches were undone."""
    big = shared / "big.md"
    big.write_text("# Big\n\n" + "A long page about the rivers of the plain. " * 40)
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n\n" + "The launch code is 4242 and nobody may read it. " * 40)
    encoded: list[str] = []

    def encode(texts: list[str]) -> Any:
        """The pipeline's encode, which swaps big.md once the small pages are encoding."""
        if not big.is_symlink():
            swap_for_link(big, secret)
        encoded.extend(texts)
        return pydoc_pipeline.encode(texts)

    collection = Database(tmp_path / "db", create=True).collection("docs")
    report = ingest_documents(
        shared,
        collection,
        pydoc_pipeline,
        SMALL,
        on_error="skip",
        batch_size=2,
        encode=encode,
        stream_bytes=1000,
    )
    assert big.is_symlink()  # swapped after the scan, before the second pass
    assert [(p.source, p.message) for p in report.problems] == [(str(big), CHANGED)]
    assert set(collection.document_index()) == {"guide.md", "alias.md"}
    assert encoded and not any("4242" in text for text in encoded)  # never even read


@pytest.mark.parametrize("write", ["chunks", "records", "embed"])
def test_a_named_pipe_or_socket_in_a_folder_is_named_as_not_a_regular_file(
    tmp_path, shared, pydoc_pipeline, write
):
    """A named pipe in the folder was passed over without a word, and a link to one was "a
    link whose target is missing": each is counted with the files not read, and named."""
    os.mkfifo(shared / "pipe.md")
    (shared / "sub" / "to-pipe.md").symlink_to("../pipe.md")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(os.fspath(shared / "sub" / "s.sock"))
        ids, report = stored_ids(tmp_path, shared, pydoc_pipeline, write)
    finally:
        server.close()
    assert ids == {"guide.md", "alias.md"} and not report.problems
    assert report.unread.special == [
        Special("pipe.md", "a named pipe"),
        Special("sub/s.sock", "a socket"),
        Special("sub/to-pipe.md", "a link to a named pipe"),
    ]
    assert report.unread == {".md": 2, ".sock": 1}
    assert (
        "; not regular files: 3, pipe.md (a named pipe), sub/s.sock (a socket), "
        "sub/to-pipe.md (a link to a named pipe)"
    ) in report.summary()


def test_a_folder_of_nothing_but_a_named_pipe_says_so(tmp_path, pydoc_pipeline):
    """ "holds no .txt/.md files to ingest" with a pipe.md in it sent its user looking."""
    root = tmp_path / "docs"
    root.mkdir()
    os.mkfifo(root / "pipe.md")
    collection = Database(tmp_path / "db", create=True).collection("docs")
    said = "files to ingest; not regular files: 1, pipe.md (a named pipe)"
    for write in (ingest, ingest_documents):
        with pytest.raises(FileNotFoundError, match=re.escape(said)):
            write(root, collection, pydoc_pipeline)


def test_a_file_in_a_folder_that_cannot_be_entered_is_a_problem_naming_it(tmp_path):
    """A folder of mode r-- lists its names but lets none be looked at: the walk's
    `Path.is_file` raised PermissionError out of every ingest of the folder around it."""
    root = tmp_path / "docs"
    (root / "locked").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nReadable.")
    (root / "locked" / "b.md").write_text("# B\n\nIn a folder that cannot be entered.")
    (root / "locked").chmod(0o444)
    code = (
        "import sys; from pathlib import Path; from probembed.store.readers import walk_folder; "
        "walk = walk_folder(Path(sys.argv[1])); "
        "print(list(walk.files), [(p.message, p.doc_id) for p in walk.problems])"
    )
    try:
        done = subprocess.run(
            [*unprivileged(), sys.executable, "-c", code, str(root)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        (root / "locked").chmod(0o755)
    if done.returncode != 0 and "setpriv:" in done.stderr:
        pytest.skip(f"cannot drop root's read right here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"[{root / 'a.md'!r}] [('cannot read: Permission denied', 'locked/b.md')]"
    )
