"""The store commands' options: their types, the option names their messages are told in, the
checks that need no store, and the openers of a database, a collection and a pipeline.

The store (LanceDB, FAISS) is imported inside each command: it costs seconds, and every other
command of the CLI would pay for it."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import platformdirs
import typer

from probembed.documents import with_notes
from probembed.interfaces.console import fail, named

if TYPE_CHECKING:
    from probembed.store import Collection, Database

#: The collection a store command uses unless told otherwise (--collection).
DEFAULT_COLLECTION = "default"
#: The built-in that indexes documents unless told otherwise: `default`'s members tuned for
#: short queries against documents (`default` is tuned for every task at once).
SEARCH_PIPELINE = "retrieval"

#: The variable `--db` falls back on.
DB_ENV = "PROBEMBED_DB"
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar=DB_ENV,
        help="Database directory, or object storage: s3://BUCKET/PREFIX (gs://, az://) "
        "\\[default: env PROBEMBED_DB, else the user data directory].",
        show_default=False,
    ),
]
StorageOption = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        help="KEY=VALUE for an object-storage --db, as LanceDB takes them (repeatable), e.g. "
        "aws_endpoint=http://127.0.0.1:9000, allow_http=true \\[default: the AWS_* / "
        "GOOGLE_* / AZURE_* environment variables].",
        show_default=False,
    ),
]
CollectionOption = Annotated[str, typer.Option("--collection", "-c", help="Collection name.")]
AddressOption = Annotated[
    str | None,
    typer.Option(
        help="With --ray: the Ray cluster to join (e.g. ray://HEAD:10001, or auto) "
        "\\[default: start Ray on this machine].",
        show_default=False,
    ),
]
#: The library's parameter names in its messages -> the options that set them; a phrase
#: where the message may also name a user's field (`no field group_by_doc`).
RAY_OPTIONS = {
    "workers must": "--workers must",
    "cpus_per_worker must": "--cpus-per-worker must",
    "gpus_per_worker must": "--gpus-per-worker must",
}
CHUNK_OPTIONS = {"max_tokens": "--chunk-tokens", "overlap_tokens": "--overlap"}
MIXING_OPTIONS = {"into another collection": "into another collection (-c NAME)"}
#: The ways out of a pipeline refused for other settings, in a command line's terms.
REPLACE_OPTIONS = {
    "collection.record_pipeline(pipeline, replace=True)": "--replace-pipeline",
    "leave the pipeline out": "leave out --pipeline",
}
SYNC_OPTIONS = {
    "Leave out sync": "Leave out --sync",
    "under a prefix of its own": "under a prefix of its own (--prefix NAME/)",
    "delete the stored documents first": (
        "delete the stored documents first (probembed delete --doc ID, or probembed drop)"
    ),
    "delete the stored records first": (
        "delete the stored records first (probembed delete ID, or probembed drop)"
    ),
}
#: How a report names the way to follow the links of a folder it did not follow.
LINK_OPTIONS = {"follow_links=True": "--follow-links"}
#: How a refused filter is named by the commands that take --where.
WHERE_OPTIONS = {"filter where=": "filter --where ", "where must be": "--where must be"}
SEARCH_OPTIONS = {
    "group_by_doc needs": "--group-by-doc needs",
    "without group_by_doc": "without --group-by-doc",
    "min_p_relevant needs": "--min-p-relevant needs",
    "without min_p_relevant": "without --min-p-relevant",
    **WHERE_OPTIONS,
}
#: How a storage error names the options that set the credentials, in a command line's terms.
STORAGE_OPTIONS = {
    "or the storage options": "or --storage-option",
    "or the storage option": "or --storage-option",
    "storage options win": "--storage-option wins",
}
OnErrorOption = Annotated[
    str, typer.Option(help="On a bad input item (a line, a record, a file): skip it or stop.")
]
ChunkTokensOption = Annotated[
    int | None, typer.Option(help="Tokens per chunk, at most \\[default: 256].")
]
#: ingest's --chunk-tokens, which says what a run given no chunk settings cuts at.
IngestChunkTokensOption = Annotated[
    int | None,
    typer.Option(
        help="Tokens per chunk, at most \\[default: 256]. Without it and --overlap, a stored "
        "document is cut at the size and overlap it was cut at before; given alone, each "
        "document keeps its own overlap (lowered under half this size)."
    ),
]
OverlapOption = Annotated[
    int | None,
    typer.Option(
        help="Tokens a chunk repeats from the last "
        "\\[default: 32, or the most under half a smaller size]."
    ),
]
#: ingest's --overlap, which says what a run given it alone cuts at.
IngestOverlapOption = Annotated[
    int | None,
    typer.Option(
        help="Tokens a chunk repeats from the last "
        "\\[default: 32, or the most under half a smaller size]. Given alone, each document "
        "keeps its own chunk size (a new one the size --chunk-tokens says)."
    ),
]
FollowLinksOption = Annotated[
    bool,
    typer.Option(
        help="Follow a folder's links out of it and to folders too (but one to a folder it "
        "is in): without it only links to files in the folder are read, and the report "
        "names the others."
    ),
]
WorkersOption = Annotated[int, typer.Option(help="With --ray: Ray actors that embed.")]
CpusOption = Annotated[float, typer.Option(help="With --ray: CPUs each actor reserves.")]
#: Exit status of a command the same command later may get through: a write that gave up
#: waiting for another (--wait ran out; nothing written), a commit that met another writer's
#: (nothing of it stored), the object storage failing a call. sysexits' EX_TEMPFAIL ("try
#: again later"), apart from a refusal to mend (2) or a failure (1): docs/cli.md "Exit codes".
BUSY_EXIT = 75
WaitOption = Annotated[
    float | None,
    typer.Option(
        "--wait",
        metavar="SECONDS",
        min=0,
        help="Seconds to wait at most while another chunked ingest, sync, delete --doc or "
        "erase of the collection runs on this machine, then exit 75 with nothing written "
        "\\[default: until it ends].",
        show_default=False,
    ),
]
GpusOption = Annotated[
    float,
    typer.Option(help="With --ray: GPUs each actor reserves (needs GPU builds of the models)."),
]


def check_source(path: Path) -> None:
    """Refuse, in one line and before a database opens or a model loads, a source that is
    `-` (stdin: "no such file or folder"), not there, neither a file nor a folder (a named
    pipe: "no documents at"), or a file that cannot be opened (typer's own check of it drew
    a box of its own words)."""
    from probembed.store.readers import not_regular

    if str(path) == "-":
        raise fail(
            "- (stdin) is not read as a source: a source is read more than once (checked "
            "whole before a model loads, then embedded; a re-run resumes from it), so write "
            "the records to a file (`> rows.jsonl`) and give its path"
        )
    try:
        path.stat()
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise fail(f"no documents at {path}: no such file or folder") from exc
        raise fail(f"cannot read {path}: {exc.strerror or exc}") from exc
    odd = not_regular(path)
    if odd is not None:
        raise fail(odd)
    if path.is_file():
        try:
            path.open("rb").close()
        except OSError as exc:
            raise fail(f"cannot read {path}: {exc.strerror or exc}") from exc


def check_run_options(
    on_error: str, ray: bool, address: str | None, workers: int, cpus: float, gpus: float
) -> str | None:
    """Refuse, naming the option, an unknown --on-error (the library's message named its
    parameter), Ray's options without --ray (they were ignored without a word), and with it
    a worker count or resource that is no valid number or an address where Ray does not
    answer: all before the input is read and a pipeline loads.

    With --ray, the address to join as probed (`ray_ingest.AnsweredAddress`: the session
    does not probe it again), None to start Ray here."""
    from probembed.store.ingest import ON_ERROR

    if on_error not in ON_ERROR:
        raise fail(f"--on-error must be {' or '.join(ON_ERROR)}, got {on_error!r}")
    if ray:
        from probembed.store.ray_ingest import joined_address, validate_workers

        try:
            validate_workers(workers, cpus, gpus)
            return joined_address(address)
        except ValueError as exc:
            raise fail(named(str(exc), RAY_OPTIONS)) from exc
    given = {"--address": address is not None, "--workers": workers != 1}
    given |= {"--cpus-per-worker": cpus != 1.0, "--gpus-per-worker": gpus != 0.0}
    for option, set_ in given.items():
        if set_:
            raise fail(f"{option} needs --ray")
    return None


def check_wait(wait: float | None, planning: bool, needs: str) -> None:
    """Refuse --wait on a command that takes no plan lock (`planning`: it does), which would
    wait for nothing: `needs` names the option that makes it one."""
    if wait is not None and not planning:
        raise fail(
            f"--wait needs {needs}: only a write that plans over the collection's documents "
            "waits for another such write"
        )


def store_refusal(exc: Exception, told: str) -> typer.Exit:
    """Print a store's refusal, told as `told` (a failure of the object storage as the
    storage's words, `storage_told`), and give the exit to raise (`exit_code`)."""
    said = storage_told(exc)
    told = named(told, STORAGE_OPTIONS) if said is None else with_notes(said, exc)
    return fail(told, exit_code(exc))


def storage_told(exc: BaseException) -> str | None:
    """LanceDB's I/O failure of object storage (`errors.storage_error`), said in a line as
    the service says it, or None for any other error: it was a raw Rust message ending the
    command with exit 1 (a call's) or 2 (a connect's)."""
    errors = sys.modules.get("probembed.store.errors")
    said = None if errors is None else errors.storage_error(exc)
    return None if said is None else named(str(said), STORAGE_OPTIONS)


def exit_code(exc: BaseException) -> int:
    """The status a refusal ends a command with: BUSY_EXIT where the same command later may
    get through (another write held the collection, a commit met another writer's, the object
    storage failed a call, probembed's or LanceDB's; a write whose undo met a commit as what
    stopped it), else 2: the input, the options or the database need mending first (a full or
    read-only disk too)."""
    errors = sys.modules.get("probembed.store.errors")
    if errors is None:  # the store was never imported: no error of it
        return 2
    if isinstance(exc, errors.UndoConflictError):
        return exit_code(exc.stopped_by)
    exc = errors.storage_error(exc) or exc  # LanceDB's: the storage's or the credentials'
    later = isinstance(exc, (errors.WriteConflictError, errors.StorageUnavailableError))
    return BUSY_EXIT if later else 2


def resolve_db(db: str | Path | None) -> Path | str:
    """The --db given (a directory, or an object-store URI kept as it is), else the default;
    an empty one, or an empty $PROBEMBED_DB (which click passes on as no --db), is refused."""
    from probembed.store.errors import StoreError
    from probembed.store.location import database_target

    if db is None and DB_ENV not in os.environ:  # click reads a variable set empty as unset
        return Path(platformdirs.user_data_dir("probembed")) / "db"
    given = "" if db is None else str(db)
    if not given.strip():  # Path("") is the current directory, which filled up with tables
        if os.environ.get(DB_ENV) == given:  # the variable's value, not an option's
            raise fail(
                f"{DB_ENV} is set but empty (an unset variable?): give a path or URI, or unset it"
            )
        raise fail("--db is empty (an unset variable?): give a path or URI, or leave it out")
    try:
        return database_target(given)
    except StoreError as exc:
        raise fail(f"--db: {exc}") from exc


def storage_options(pairs: list[str] | None) -> dict[str, str]:
    """--storage-option KEY=VALUE pairs as a dict, or a clean error."""
    from probembed.store.location import parse_storage_options

    try:
        return parse_storage_options(pairs)
    except ValueError as exc:
        raise fail(f"--storage-option: {exc}") from exc


def open_database(db: str | Path | None, options: list[str] | None, create: bool) -> Database:
    """The database of --db and --storage-option, or a clean error."""
    from probembed.store import Database, NoDatabaseError, StoreError

    try:
        return Database(resolve_db(db), create=create, storage_options=storage_options(options))
    except NoDatabaseError as exc:  # it named the Python API's way to make one
        raise fail(exc.told(f"`probembed ingest PATH --db {exc.placeholder}`")) from exc
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc


def load_pipeline(name: str) -> Any:
    """A pipeline by name or directory, with a clean error."""
    from probembed.pipeline import Pipeline

    try:
        return Pipeline.load(name)
    except (ValueError, ImportError, OSError) as exc:
        raise fail(str(exc)) from exc


def _open_collection(db: str | None, options: list[str] | None, name: str) -> Collection:
    """An existing collection of an existing database, or a clean error."""
    from probembed.store import StoreError

    try:
        return open_database(db, options, create=False).open(name)
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc
