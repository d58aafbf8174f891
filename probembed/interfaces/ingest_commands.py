"""`probembed ingest` and `probembed embed`: read documents (cut into chunks with --chunk),
embed them, and store them in a collection or write them to Parquet files.

The store (LanceDB, FAISS) is imported inside each command, as for every store command."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from probembed.documents import with_notes
from probembed.interfaces.console import (
    check_output_folder,
    err,
    fail,
    listed,
    named,
    note,
    say,
    say_what_is_cut,
)
from probembed.interfaces.store_options import (
    CHUNK_OPTIONS,
    DEFAULT_COLLECTION,
    LINK_OPTIONS,
    MIXING_OPTIONS,
    REPLACE_OPTIONS,
    SEARCH_PIPELINE,
    SYNC_OPTIONS,
    AddressOption,
    ChunkTokensOption,
    CollectionOption,
    CpusOption,
    DbOption,
    FollowLinksOption,
    GpusOption,
    IngestChunkTokensOption,
    IngestOverlapOption,
    OnErrorOption,
    OverlapOption,
    StorageOption,
    WaitOption,
    WorkersOption,
    check_run_options,
    check_source,
    check_wait,
    load_pipeline,
    open_database,
    resolve_db,
    storage_told,
    store_refusal,
)
from probembed.progress import stderr_is_terminal
from probembed.signals import Kept, Terminated

if TYPE_CHECKING:
    from probembed.chunking import ChunkSettings, GivenChunking
    from probembed.store import Collection, Database, DocumentReport, IngestReport
    from probembed.store.ingest import OnError

#: What `ingest` and `embed` read.
SOURCE_HELP = (
    "JSONL or JSON file of records, BEIR folder, folder of .txt/.md files (.html and .pdf "
    "too with --chunk), or one such file; not stdin (it is read more than once): write "
    "records to a file first."
)
#: The path `ingest` and `embed` read, checked by `check_source` (typer's check of whether it
#: can be read answered in a box of its own words).
SourceArgument = Annotated[Path, typer.Argument(help=SOURCE_HELP, readable=False)]


def ingest_and_report(
    source: Any,
    target: Collection,
    pipe: Any,
    chunk: bool = False,
    ray: dict[str, Any] | None = None,
    follow_links: bool = False,
    progress: bool = True,
    summary: bool = True,
    **options: Any,
) -> IngestReport | DocumentReport:
    """Ingest (chunked with `chunk`, at the `chunking` given in `options` or each document's
    own; on Ray, with `ray` options; a folder's links as `follow_links` says) with a progress
    bar (unless `progress` is False), then say what happened: each skipped item, and the
    summary unless `summary` is False (`--json` prints the report instead, `-q` nothing)."""
    from probembed.store import IngestReport, StoreError, ingest, ingest_documents, ingest_ray

    report: IngestReport | DocumentReport
    session: contextlib.AbstractContextManager[None]
    options |= {"follow_links": follow_links}  # each write walks a folder source alike
    try:
        if chunk:
            with_ray, session = None, contextlib.nullcontext()
            if ray is not None:
                from probembed.store.ray_ingest import ray_session

                with_ray = functools.partial(ingest_ray, **ray)
                session = ray_session(ray["address"])  # one Ray for the chunks and chunks 0
            with session:
                report = ingest_documents(
                    source,
                    target,
                    pipe,
                    progress=progress,
                    ingest_with=with_ray,
                    **options,
                )
        elif ray is not None:
            report = ingest_ray(source, target, pipe, progress=progress, **ray, **options)
        else:
            report = ingest(source, target, pipe, progress=progress, **options)
    except (StoreError, ValueError, FileNotFoundError, ImportError) as exc:
        _note_storage_failure(exc, target)
        raise store_refusal(exc, _told(exc)) from exc
    except (RuntimeError, OSError) as exc:  # LanceDB's failing calls: the front door tells them
        _note_storage_failure(exc, target)
        raise
    for problem in report.problems:
        note("skipped:", "yellow", str(problem))
    if summary:
        say(named(report.summary(), LINK_OPTIONS))
    if isinstance(report, IngestReport) and report.changed:  # an edit a re-run did not write
        say(_changed_note(report, source))
    if not chunk and isinstance(source, Path) and pipe.max_tokens is not None:
        _say_what_is_cut(source, pipe, follow_links=follow_links)
    return report


#: Ids of records a plain ingest left stored with another text or metadata that it names.
NAMED_CHANGED = 5


def _changed_note(report: IngestReport, source: Any) -> str:
    """Which ids a plain ingest found stored with another text or metadata than its source
    has, and left so (the first NAMED_CHANGED of them): --upsert writes them."""
    changed = report.changed
    named = listed(changed, NAMED_CHANGED)
    given = "the records given"
    if isinstance(source, Path):
        given = "the folder" if source.is_dir() else "the file"
    return (
        f"{len(changed):,} of {report.already_stored:,} already stored have another text or "
        f"metadata than {given}: {named}; --upsert replaces them"
    )


#: What `_say_what_is_cut` tells ingest to do about documents cut short.
CHUNK_REMEDY = "`--chunk` (`probembed ingest --chunk`) splits them into passages"


def _say_what_is_cut(
    source: Path, pipe: Any, remedy: str = CHUNK_REMEDY, follow_links: bool = False
) -> None:
    """Warn when whole documents of a source are longer than the models read (the first
    CUT_SAMPLE looked at): only their start is found."""
    from probembed.store.ingest import CUT_SAMPLE, cut_documents

    cut, seen = cut_documents(source, pipe, follow_links)
    say_what_is_cut(cut, seen, pipe, remedy, sampled=seen == CUT_SAMPLE)


def ingest_command(
    path: SourceArgument,
    db: DbOption = None,
    storage_option: StorageOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    pipeline: Annotated[
        str | None,
        typer.Option(
            help="Built-in name or pipeline directory \\[default: the one that made the "
            f"collection, else {SEARCH_PIPELINE!r}].",
            show_default=False,
        ),
    ] = None,
    replace_pipeline: Annotated[
        bool,
        typer.Option(
            help="With --pipeline: make its score, adaptation and calibrator the collection's "
            "(a tuned copy of the pipeline that made it; nothing is encoded again)."
        ),
    ] = False,
    on_error: OnErrorOption = "stop",
    batch_size: Annotated[
        int, typer.Option(help="Documents per commit (with --chunk: chunks).", min=1)
    ] = 512,
    upsert: Annotated[
        bool, typer.Option(help="Replace ids stored with another text or metadata.")
    ] = False,
    chunk: Annotated[
        bool,
        typer.Option(
            help="Cut documents into chunks every model reads whole (Markdown, HTML, PDF, text "
            "files; JSONL and BEIR records); a re-run re-embeds only changed documents."
        ),
    ] = False,
    chunk_tokens: IngestChunkTokensOption = None,
    overlap: IngestOverlapOption = None,
    sync: Annotated[
        bool,
        typer.Option(
            help="Make the collection hold what PATH holds: replace changed documents and "
            "remove those no longer in PATH (under --prefix only)."
        ),
    ] = False,
    prefix: Annotated[
        str,
        typer.Option(
            help="Put every document id under this prefix (e.g. 'api/'): several folders "
            "share a collection, and --sync removes only documents under it."
        ),
    ] = "",
    follow_links: FollowLinksOption = False,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="PATTERN",
            help="With --chunk: leave out a folder's files and subfolders this gitignore-style "
            "pattern matches, relative to the folder (e.g. 'build/', '*.tmp.md'); repeatable. "
            "With --sync a stored document it now matches is removed. A .gitignore is not "
            "read.",
            show_default=False,
        ),
    ] = None,
    wait: WaitOption = None,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray", help="Embed on Ray actors (a local Ray instance unless --address is given)."
        ),
    ] = False,
    address: AddressOption = None,
    workers: WorkersOption = 1,
    cpus_per_worker: CpusOption = 1.0,
    gpus_per_worker: GpusOption = 0.0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the report as one JSON object on stdout instead of the summary "
            "(keys as the service's write answers: added, updated, unchanged, removed, "
            "skipped, ..., collection, count; docs/cli.md: JSON output).",
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="No progress or summary on stderr: only warnings and errors."
        ),
    ] = False,
) -> None:
    """Embed documents and store them; a re-run resumes, skipping ids already stored."""
    from probembed.store import StoreError
    from probembed.store.database import check_collection_name
    from probembed.store.ingest import none_fit, read_checked
    from probembed.store.kinds import refuse_mixing

    # Every check that needs no database comes first: a refused run creates none.
    address = check_run_options(on_error, ray, address, workers, cpus_per_worker, gpus_per_worker)
    if replace_pipeline and pipeline is None:
        raise fail("--replace-pipeline needs --pipeline: the pipeline to keep for the collection")
    if upsert and (chunk or sync):
        implied = "--chunk" if chunk else "--sync"
        raise fail(f"--upsert is implied by {implied}: changed documents are replaced")
    check_wait(wait, chunk or sync, "--sync or --chunk")
    if exclude and not chunk:
        raise fail("--exclude needs --chunk: a whole-document ingest reads every file")
    # none given: each stored document is cut at its own, a new one as `Inherited` finds
    given = chunk_settings(chunk, chunk_tokens, overlap)
    check_source(path)
    try:
        check_collection_name(collection)
        where = resolve_db(db)
        made_here = isinstance(where, Path) and not where.exists()
        database = open_database(db, storage_option, create=True)
    except (StoreError, ValueError) as exc:
        raise store_refusal(exc, str(exc)) from exc
    target = database.collection(collection)
    options: dict[str, Any] = {"batch_size": batch_size, "on_error": on_error, "prefix": prefix}
    options |= {"follow_links": follow_links, "wait": wait}
    on_ray: dict[str, Any] | None = None
    if ray:
        on_ray = {"workers": workers, "address": address}
        on_ray |= {"cpus_per_worker": cpus_per_worker, "gpus_per_worker": gpus_per_worker}
    try:
        refuse_mixing(target, chunks=chunk)  # before a pipeline loads
    except StoreError as exc:
        raise store_refusal(exc, named(str(exc), MIXING_OPTIONS)) from exc
    told = not (quiet or as_json)  # the summary lines; warnings always
    options |= {"progress": not quiet, "summary": told}
    try:
        _refuse_unfit_overlap(given, target, prefix)  # before a model loads
        if not chunk and on_error == "stop":  # a model takes seconds to load: bad input
            own = database.own_folders()  # left out of the walk, as the run leaves them
            _refuse_bad_input(
                lambda: read_checked(
                    path, target, "stop", prefix, follow_links=follow_links, own=own
                )
            )
        pipe = load_pipeline(pipeline) if pipeline is not None else _own_or_default_pipeline(target)
        if replace_pipeline and target.exists:
            _replace_pipeline(target, pipe, quiet)
        _say_if_capped(given, pipe)
        if chunk:
            chunked: dict[str, Any] = {"sync": sync, "exclude": exclude or [], "chunking": given}
            report = ingest_and_report(
                path, target, pipe, chunk=True, ray=on_ray, **chunked, **options
            )
        else:
            whole = {"sync": True} if sync else {"upsert": upsert}  # sync implies upsert
            report = ingest_and_report(path, target, pipe, ray=on_ray, **whole, **options)
    except (typer.Exit, KeyboardInterrupt, Terminated) as stop:
        if not isinstance(stop, typer.Exit):
            _note_kept(stop, target)
        _discard_unmade(database, collection, where if made_here else None)
        raise
    count = target.count() if target.exists else 0
    if as_json:
        answer = {"collection": collection, "count": count} | report.to_json()
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    unmade = f"collection {collection!r} in {database.path} was not made"
    if not target.exists:  # nothing to write: no collection was made
        _discard_unmade(database, collection, where if made_here else None)
    if none_fit(report):  # as `demo` refuses it: a run that stored nothing failed
        left = unmade if not target.exists else f"{collection!r} is as it was ({count} item(s))"
        raise fail(f"nothing stored from {path}: no item was fit to store (above); {left}")
    if not target.exists:
        if told:
            say(f"nothing stored: {unmade}")
        return
    if told:
        say(f"collection {collection!r} in {database.path}: {count} item(s)")
    if report.added or report.updated:
        live = stderr_is_terminal() and not quiet  # a spinner's redraws in a log file are noise
        with err.status("building the search graph") if live else contextlib.nullcontext():
            target.searcher().warm()


def chunk_settings(
    chunk: bool, chunk_tokens: int | None, overlap: int | None
) -> GivenChunking | None:
    """The chunk settings `--chunk`, `--chunk-tokens` and `--overlap` give (None: no chunking;
    neither option: none given, each document's own), refused naming the option, before
    anything is read or a pipeline loads."""
    from probembed.chunking import GivenChunking

    if not chunk and (chunk_tokens is not None or overlap is not None):
        raise fail("--chunk-tokens and --overlap need --chunk: without it documents are whole")
    if not chunk:
        return None
    try:
        return GivenChunking(chunk_tokens, overlap)
    except ValueError as exc:
        raise fail(named(str(exc), CHUNK_OPTIONS)) from exc


def _refuse_unfit_overlap(given: GivenChunking | None, target: Collection, prefix: str) -> None:
    """Refuse an --overlap given alone that no document under `prefix` can take, naming it,
    before anything is read: it was one skipped line per document. The pipeline's limit,
    known once it loads, only lowers the sizes: ingest itself refuses what it adds."""
    from probembed.store import StoreError
    from probembed.store.chunked import in_scope, refuse_unfit_overlap

    try:
        refuse_unfit_overlap(given, in_scope(target.document_index(), prefix), None)
    except StoreError as exc:
        raise store_refusal(exc, named(str(exc), CHUNK_OPTIONS)) from exc


def _cut_afresh(given: GivenChunking) -> ChunkSettings:
    """The settings `embed` cuts every document at: the files it writes hold no document's
    own, so the defaults fill what is not given; refused naming the option."""
    from probembed.chunking import ChunkSettings

    try:
        return given.over(ChunkSettings())
    except ValueError as exc:
        raise fail(named(str(exc), CHUNK_OPTIONS)) from exc


def _say_if_capped(given: GivenChunking | None, pipe: Any) -> None:
    """Warn, once, that --chunk-tokens is more than the pipeline reads: the library caps it
    at the shortest member's limit (an --overlap given too, under half of that), and a
    person should not find out from the chunks."""
    limit = pipe.max_tokens
    size = None if given is None else given.max_tokens
    if given is None or size is None or limit is None or size <= limit:
        return
    overlap = given.overlap_tokens
    lowered = (
        f", and the overlap at {limit // 2 - 1} (under half of that)"
        if overlap is not None and overlap >= limit // 2
        else ""
    )
    note(
        "warning:",
        "yellow",
        f"--chunk-tokens {size} is more than the {limit} tokens pipeline "
        f"{pipe.name}'s shortest member reads: chunks are cut at {limit}{lowered}",
    )


def _note_kept(stop: BaseException, target: Collection) -> None:
    """Note on an ingest stopped by Ctrl-C or SIGTERM what it keeps (`signals.Kept`, said in
    place of "committed batches are kept", which told of batches never written): nothing,
    where it began no write (a model loading, the input read, the first batch encoded), else
    how many of its batches are stored; the general line where rows carry no write tags. A
    stop lets a commit LanceDB is making finish after it: a batch begun and not seen stored
    is said to be one that may land still."""
    from probembed.store import StoreError

    if not target.writes_begun:
        stop.add_note(Kept("nothing was written"))
        return
    try:
        kept = target.batches_kept(target.batches_begun)
    except (StoreError, OSError):  # what stopped it is told, not a failed look after it
        return
    if kept is None:
        return
    stop.add_note(Kept(_kept_words(target, kept)))


def _note_storage_failure(exc: BaseException, target: Collection) -> None:
    """Note on an ingest its object storage failed what it keeps (`_kept_words`, from what it
    began: the failed storage is not asked again), as the exit 75 it ends with says."""
    if storage_told(exc) is not None:
        exc.add_note(_kept_words(target))


def _kept_words(target: Collection, kept: int | None = None) -> str:
    """What an ingest stopped part-way keeps, in words: `kept` of the batches it began are
    stored (None: not read, as after its storage failed, where every batch but the one it was
    at is committed, and that one may be)."""
    begun = len(target.batches_begun)
    if not target.writes_begun:
        return "nothing was written"
    if kept is None:
        kept, landing = max(begun - 1, 0), ", and the one it was at may be too" if begun else ""
    else:
        landing = ", and one it was committing may land" if kept < begun else ""
    return f"{kept} committed batch(es) are kept{landing}; the same command resumes"


def _discard_unmade(database: Database, collection: str, made: Path | str | None) -> None:
    """Leave nothing of a collection a run never committed to: its kept files, and the
    database folder the run made (only when empty: another run's files keep it)."""
    database.discard_unmade(collection)
    if made is not None:
        with contextlib.suppress(OSError):
            Path(made).rmdir()


def _refuse_bad_input(read: Callable[[], object]) -> None:
    """Read and check the whole input before a model loads, so that bad input is refused in
    a second rather than after the load (the run reads it again: far cheaper than embedding)."""
    from probembed.store import StoreError

    try:
        read()
    except (StoreError, ValueError, FileNotFoundError) as exc:
        raise store_refusal(exc, _told(exc)) from exc


def _told(exc: Exception) -> str:
    """An error's message in a command line's terms: bad input is skipped with --on-error;
    what a run stopped part-way had skipped is in its notes."""
    from probembed.store import IngestError

    if isinstance(exc, IngestError):
        return exc.told("pass --on-error skip")
    options = SYNC_OPTIONS | REPLACE_OPTIONS | LINK_OPTIONS | CHUNK_OPTIONS
    return with_notes(named(str(exc), options), exc)


def _replace_pipeline(target: Collection, pipe: Any, quiet: bool = False) -> None:
    """Keep `pipe` as the collection's pipeline copy, saying what that changed for its readers
    (unless `quiet`)."""
    from probembed.store import StoreError

    try:
        changes = target.record_pipeline(pipe, replace=True)
    except (StoreError, ValueError) as exc:
        raise store_refusal(exc, named(str(exc), REPLACE_OPTIONS)) from exc
    if changes and not quiet:
        say(f"collection {target.name!r} now searches with {pipe.name!r}: {'; '.join(changes)}")


def _own_or_default_pipeline(target: Collection) -> Any:
    """The pipeline a collection was made with, or the built-in for documents for a new one
    (a model load long enough that a Ctrl-C often lands in it)."""
    from probembed.store import StoreError

    try:
        return target.load_pipeline() if target.exists else load_pipeline(SEARCH_PIPELINE)
    except (StoreError, ValueError) as exc:
        raise store_refusal(exc, str(exc)) from exc


def embed_command(
    path: SourceArgument,
    out: Annotated[
        Path,
        typer.Option(
            help="Directory for the Parquet files: new, empty, or one an earlier run of the same "
            "command wrote to, whose parts holding what this run would write are kept."
        ),
    ],
    pipeline: Annotated[
        str, typer.Option(help="Built-in name or pipeline directory.")
    ] = SEARCH_PIPELINE,
    on_error: OnErrorOption = "stop",
    batch_size: Annotated[
        int, typer.Option(help="Rows (documents, or chunks) per Parquet file.", min=1)
    ] = 512,
    chunk: Annotated[
        bool,
        typer.Option(
            help="Cut documents into chunks every model reads whole, as ingest --chunk cuts "
            "them (Markdown, HTML, PDF, text files; JSONL and BEIR records): a row per chunk."
        ),
    ] = False,
    chunk_tokens: ChunkTokensOption = None,
    overlap: OverlapOption = None,
    follow_links: FollowLinksOption = False,
    ray: Annotated[bool, typer.Option("--ray", help="Embed on Ray actors.")] = False,
    address: AddressOption = None,
    workers: WorkersOption = 1,
    cpus_per_worker: CpusOption = 1.0,
    gpus_per_worker: GpusOption = 0.0,
) -> None:
    """Embed documents into Parquet files (id, text, metadata, mean, var, weights, a column per
    metadata field) for another vector database; a re-run continues what a stopped one wrote."""
    from probembed.store import StoreError
    from probembed.store.embed_job import check_out, embed_to_parquet
    from probembed.store.ingest import read_checked

    # what needs no pipeline first: loading one takes seconds
    address = check_run_options(on_error, ray, address, workers, cpus_per_worker, gpus_per_worker)
    given = chunk_settings(chunk, chunk_tokens, overlap)
    settings = None if given is None else _cut_afresh(given)
    check_source(path)
    check_output_folder("--out", out)
    try:
        check_out(out)
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc
    if settings is None and on_error == "stop":  # chunks need the pipeline's tokenizers
        _refuse_bad_input(  # --out in the folder left out, as the job leaves it
            lambda: read_checked(
                path, None, "stop", clashes={}, follow_links=follow_links, own=[out]
            )
        )
    pipe = load_pipeline(pipeline)
    _say_if_capped(given, pipe)
    try:
        report = embed_to_parquet(
            path,
            out,
            pipe,
            batch_size,
            cast("OnError", on_error),  # checked by check_run_options
            ray,
            workers,
            address,
            cpus_per_worker,
            gpus_per_worker,
            progress=True,
            chunking=settings,
            follow_links=follow_links,
        )
    except (StoreError, ValueError, FileNotFoundError, ImportError) as exc:
        raise store_refusal(exc, _told(exc)) from exc
    for problem in report.problems:
        note("skipped:", "yellow", str(problem))
    say(named(report.summary(), LINK_OPTIONS))
    if report.problems and not (report.rows or report.kept_rows):  # as ingest fails it
        raise fail(f"nothing written from {path}: every item was skipped (above)")
    if settings is None and pipe.max_tokens is not None:  # chunks are cut to what it reads
        remedy = "`probembed embed --chunk` splits them into passages"
        _say_what_is_cut(path, pipe, remedy, follow_links)
