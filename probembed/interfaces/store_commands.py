"""CLI commands of the store: ingest, embed, search, collections, delete (and the demo's wiring)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from probembed.interfaces.console import (
    ask,
    err,
    fail,
    literal,
    named,
    note,
    one_line,
    out,
    say,
)
from probembed.interfaces.inputs import read_texts
from probembed.interfaces.store_options import (
    CHUNK_OPTIONS,
    DEFAULT_COLLECTION,
    MIXING_OPTIONS,
    SEARCH_OPTIONS,
    SEARCH_PIPELINE,
    SYNC_OPTIONS,
    AddressOption,
    ChunkTokensOption,
    CollectionOption,
    CpusOption,
    DbOption,
    GpusOption,
    OnErrorOption,
    OverlapOption,
    StorageOption,
    WorkersOption,
    _open_collection,
    check_run_options,
    load_pipeline,
    open_database,
    resolve_db,
)

if TYPE_CHECKING:
    from probembed.chunking import ChunkSettings
    from probembed.store import (
        Collection,
        Database,
        DocumentReport,
        Hit,
        IngestReport,
        QueryResult,
    )
    from probembed.store.ingest import OnError

#: What `ingest` and `embed` read.
SOURCE_HELP = (
    "JSONL or JSON file of records, BEIR folder, folder of .txt/.md files (.html and .pdf "
    "too with ingest --chunk), or one such file."
)

_SNIPPET = 110


def ingest_and_report(
    source: Any,
    target: Collection,
    pipe: Any,
    chunking: Any = None,
    ray: dict[str, Any] | None = None,
    **options: Any,
) -> IngestReport | DocumentReport:
    """Ingest (chunked, when `chunking` is given; on Ray, with `ray` options) with a progress
    bar, then say what happened: each skipped item, one summary."""
    from probembed.store import IngestReport, StoreError, ingest, ingest_documents, ingest_ray

    report: IngestReport | DocumentReport
    session: contextlib.AbstractContextManager[None]
    try:
        if chunking is not None:
            with_ray, session = None, contextlib.nullcontext()
            if ray is not None:
                from probembed.store.ray_ingest import ray_session

                with_ray = functools.partial(ingest_ray, **ray)
                session = ray_session(ray["address"])  # one Ray for the chunks and chunks 0
            with session:
                report = ingest_documents(
                    source, target, pipe, chunking, progress=True, ingest_with=with_ray, **options
                )
        elif ray is not None:
            report = ingest_ray(source, target, pipe, progress=True, **ray, **options)
        else:
            report = ingest(source, target, pipe, progress=True, **options)
    except (StoreError, ValueError, FileNotFoundError, ImportError) as exc:
        raise fail(_told(exc)) from exc
    for problem in report.problems:
        note("skipped:", "yellow", str(problem))
    say(report.summary())
    if isinstance(report, IngestReport) and report.changed:  # an edit a re-run did not write
        say(_changed_note(report, source))
    if chunking is None and isinstance(source, Path) and pipe.max_tokens is not None:
        _say_what_is_cut(source, pipe)
    return report


#: Ids of records a plain ingest left stored with another text or metadata that it names.
NAMED_CHANGED = 5


def _changed_note(report: IngestReport, source: Any) -> str:
    """Which ids a plain ingest found stored with another text or metadata than its source
    has, and left so (the first NAMED_CHANGED of them): --upsert writes them."""
    changed = report.changed
    named = ", ".join(changed[:NAMED_CHANGED])
    more = len(changed) - NAMED_CHANGED
    if more > 0:
        named += f" and {more:,} more"
    given = "the records given"
    if isinstance(source, Path):
        given = "the folder" if source.is_dir() else "the file"
    return (
        f"{len(changed):,} of {report.already_stored:,} already stored have another text or "
        f"metadata than {given}: {named}; --upsert replaces them"
    )


#: What `_say_what_is_cut` tells ingest to do about documents cut short.
CHUNK_REMEDY = "`--chunk` (`probembed ingest --chunk`) splits them into passages"


def _say_what_is_cut(source: Path, pipe: Any, remedy: str = CHUNK_REMEDY) -> None:
    """Warn when whole documents are longer than the models read: only their start is found."""
    from probembed.store.ingest import CUT_SAMPLE, cut_documents

    cut, seen = cut_documents(source, pipe)
    if cut:
        among = f"of the first {seen:,}" if seen == CUT_SAMPLE else f"of {seen:,}"
        note(
            "cut short:",
            "yellow",
            f"{cut:,} {among} documents are longer than {pipe.name!r} reads "
            f"({pipe.max_tokens} tokens): only their start is embedded, so what comes later "
            f"is not found; {remedy}",
        )


def ingest_command(
    path: Annotated[Path, typer.Argument(help=SOURCE_HELP)],
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
    on_error: OnErrorOption = "stop",
    batch_size: Annotated[int, typer.Option(help="Documents per commit.", min=1)] = 512,
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
    chunk_tokens: ChunkTokensOption = None,
    overlap: OverlapOption = None,
    sync: Annotated[
        bool, typer.Option(help="With --chunk: remove documents no longer in PATH.")
    ] = False,
    prefix: Annotated[
        str,
        typer.Option(
            help="Put every document id under this prefix (e.g. 'api/'): several folders "
            "share a collection, and --sync removes only documents under it."
        ),
    ] = "",
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
) -> None:
    """Embed documents and store them; a re-run resumes, skipping ids already stored."""
    from probembed.store import StoreError
    from probembed.store.chunked import refuse_mixing
    from probembed.store.database import check_collection_name
    from probembed.store.ingest import read_checked

    # Every check that needs no database comes first: a refused run creates none.
    address = check_run_options(on_error, ray, address, workers, cpus_per_worker, gpus_per_worker)
    if sync and not chunk:
        raise fail("--sync needs --chunk: only chunked documents carry a content hash")
    if chunk and upsert:
        raise fail("--upsert is implied by --chunk: changed documents are replaced")
    settings = chunk_settings(chunk, chunk_tokens, overlap)
    if not path.exists():
        raise fail(f"no documents at {path}: no such file or folder")
    try:
        check_collection_name(collection)
        where = resolve_db(db)
        made_here = isinstance(where, Path) and not where.exists()
        database = open_database(db, storage_option, create=True)
    except (StoreError, ValueError) as exc:
        raise fail(str(exc)) from exc
    target = database.collection(collection)
    options: dict[str, Any] = {"batch_size": batch_size, "on_error": on_error, "prefix": prefix}
    on_ray: dict[str, Any] | None = None
    if ray:
        on_ray = {"workers": workers, "address": address}
        on_ray |= {"cpus_per_worker": cpus_per_worker, "gpus_per_worker": gpus_per_worker}
    try:
        refuse_mixing(target, chunks=settings is not None)  # before a pipeline loads
    except StoreError as exc:
        raise fail(named(str(exc), MIXING_OPTIONS)) from exc
    try:
        if settings is None and on_error == "stop":  # a model takes seconds to load: bad input
            _refuse_bad_input(lambda: read_checked(path, target, "stop", prefix))
        pipe = load_pipeline(pipeline) if pipeline is not None else _own_or_default_pipeline(target)
        _say_if_capped(chunk_tokens, settings, pipe)
        if settings is not None:
            report = ingest_and_report(path, target, pipe, settings, on_ray, sync=sync, **options)
        else:
            report = ingest_and_report(path, target, pipe, ray=on_ray, upsert=upsert, **options)
    except (typer.Exit, KeyboardInterrupt):
        _discard_unmade(database, collection, where if made_here else None)
        raise
    if not target.exists:  # nothing to write (an empty file): no collection was made
        _discard_unmade(database, collection, where if made_here else None)
        say(f"nothing stored: collection {collection!r} in {database.path} was not made")
        return
    say(f"collection {collection!r} in {database.path}: {target.count()} item(s)")
    if report.added or report.updated:
        with err.status("building the search graph"):
            target.searcher().warm()


def chunk_settings(
    chunk: bool, chunk_tokens: int | None, overlap: int | None
) -> ChunkSettings | None:
    """The chunk settings `--chunk`, `--chunk-tokens` and `--overlap` give (None: no chunking),
    refused naming the option, before anything is read or a pipeline loads."""
    from probembed.chunking import ChunkSettings

    if not chunk and (chunk_tokens is not None or overlap is not None):
        raise fail("--chunk-tokens and --overlap need --chunk: without it documents are whole")
    if not chunk:
        return None
    try:
        return ChunkSettings.sized(
            ChunkSettings.max_tokens if chunk_tokens is None else chunk_tokens, overlap
        )
    except ValueError as exc:
        raise fail(named(str(exc), CHUNK_OPTIONS)) from exc


def _say_if_capped(chunk_tokens: int | None, settings: ChunkSettings | None, pipe: Any) -> None:
    """Warn, once, that --chunk-tokens is more than the pipeline reads: the library caps it
    at the shortest member's limit (the overlap too, under half of that), and a person should
    not find out from the chunks."""
    limit = pipe.max_tokens
    if chunk_tokens is None or settings is None or limit is None or chunk_tokens <= limit:
        return
    overlap = settings.capped(limit).overlap_tokens
    lowered = (
        f", and the overlap at {overlap} (under half of that)"
        if overlap < settings.overlap_tokens
        else ""
    )
    note(
        "warning:",
        "yellow",
        f"--chunk-tokens {chunk_tokens} is more than the {limit} tokens pipeline "
        f"{pipe.name}'s shortest member reads: chunks are cut at {limit}{lowered}",
    )


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
        raise fail(_told(exc)) from exc


def _told(exc: Exception) -> str:
    """An error's message in a command line's terms: bad input is skipped with --on-error."""
    from probembed.store import IngestError

    if isinstance(exc, IngestError):
        return exc.told("pass --on-error skip")
    return named(str(exc), SYNC_OPTIONS)


def _own_or_default_pipeline(target: Collection) -> Any:
    """The pipeline a collection was made with, or the built-in for documents for a new one
    (a model load long enough that a Ctrl-C often lands in it)."""
    from probembed.store import StoreError

    try:
        return target.load_pipeline() if target.exists else load_pipeline(SEARCH_PIPELINE)
    except (StoreError, ValueError) as exc:
        raise fail(str(exc)) from exc


def embed_command(
    path: Annotated[Path, typer.Argument(help=SOURCE_HELP)],
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
    settings = chunk_settings(chunk, chunk_tokens, overlap)
    if not path.exists():
        raise fail(f"no documents at {path}: no such file or folder")
    try:
        check_out(out)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    if settings is None and on_error == "stop":  # chunks need the pipeline's tokenizers
        _refuse_bad_input(lambda: read_checked(path, None, "stop", clashes={}))
    pipe = load_pipeline(pipeline)
    _say_if_capped(chunk_tokens, settings, pipe)
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
        )
    except (StoreError, ValueError, FileNotFoundError, ImportError) as exc:
        raise fail(_told(exc)) from exc
    for problem in report.problems:
        note("skipped:", "yellow", str(problem))
    say(report.summary())
    if settings is None and pipe.max_tokens is not None:  # chunks are cut to what it reads
        _say_what_is_cut(path, pipe, "`probembed embed --chunk` splits them into passages")


def search_command(
    question: Annotated[
        list[str] | None,
        typer.Argument(help="One or more questions; none (or -): one per line of stdin."),
    ] = None,
    file: Annotated[
        Path | None, typer.Option(help="Read the questions from this file, one per line.")
    ] = None,
    db: DbOption = None,
    storage_option: StorageOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    k: Annotated[int, typer.Option("-k", "--k", help="Number of hits.", min=1)] = 10,
    score: Annotated[
        str | None,
        typer.Option(help="uec, uec-mteb, csd, kl, w2, mls, bhattacharyya or dot (alias cosine)."),
    ] = None,
    exact: Annotated[bool, typer.Option(help="Scan every item instead of the ANN graph.")] = False,
    where: Annotated[str | None, typer.Option(help='SQL filter, e.g. "year > 2015".')] = None,
    hybrid: Annotated[bool, typer.Option(help="Fuse with BM25 by reciprocal rank.")] = False,
    group_by_doc: Annotated[
        bool,
        typer.Option(
            help="Chunked collections: the best chunk per document, with a count of "
            "its other matching chunks."
        ),
    ] = False,
    min_p_relevant: Annotated[
        float | None,
        typer.Option(
            "--min-p-relevant",
            help="Drop hits whose probability of being relevant is below this (0..1); needs a "
            "pipeline with a relevance calibrator.",
            show_default=False,
            min=0.0,
            max=1.0,
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON list, one result per question, even for one: "
            '[{"query", "confidence", "hits": [{"id", "score", "std", "weights", '
            '"p_relevant", "text", "metadata"}]}].',
        ),
    ] = False,
) -> None:
    """Search a collection with the pipeline that made it: hits with score ± std and weights."""
    from probembed.store import NotChunkedError, StoreError

    questions = read_texts(question, file, "questions")
    target = _open_collection(db, storage_option, collection)
    try:
        results = target.search(
            questions,
            k,
            score,
            exact,
            where,
            hybrid,
            min_p_relevant=min_p_relevant,
            group_by_doc=group_by_doc,
        )
    except NotChunkedError as exc:  # it named the Python API's way to write chunks
        raise fail(named(exc.told("`probembed ingest --chunk`"), SEARCH_OPTIONS)) from exc
    except (StoreError, ValueError) as exc:
        raise fail(named(str(exc), SEARCH_OPTIONS)) from exc
    if as_json:
        sys.stdout.write(json.dumps(results, ensure_ascii=False) + "\n")
        return
    empty = ""
    if any(not result["hits"] for result in results):  # counted only when it is asked
        empty = _why_no_hits(target.count(), where, min_p_relevant)
    for result in results:
        print_result(result, hybrid=hybrid, empty=empty)


def _why_no_hits(count: int, where: str | None, min_p_relevant: float | None) -> str:
    """What an empty answer comes from, given the collection's count and the options (a
    threshold that emptied a result of nine rows was said to be the collection's emptiness,
    or the filter's)."""
    if count == 0:
        return "no hits: the collection is empty"
    causes = []
    if where and where.strip():
        causes.append("the filter keeps no row")
    if min_p_relevant is not None:
        causes.append(f"no hit has p_relevant >= {min_p_relevant:g}")
    return f"no hits: {', or '.join(causes)}" if causes else "no hits"


#: Terminal columns below which hits print as lines: the table's fixed columns take ~50.
NARROW = 72
#: The least width a table leaves the text before hits print as lines instead.
MIN_TEXT = 30
#: The width the weights column is counted at: longer weights wrap within it.
WEIGHTS_WIDTH = 20


def print_result(
    result: QueryResult,
    console: Console | None = None,
    hybrid: bool = False,
    empty: str = "no hits: the collection is empty",
) -> None:
    """A rich table of one query's hits, titled with the query and its confidence.

    p_relevant gets a column when the pipeline computes it. Per-hit weights get a column only
    when they differ between hits; weights every hit shares (a static prior, T = inf) are
    shown once, under the table, leaving the width to the text. A hybrid search's score is
    its reciprocal-rank fusion, in other units than the dense score's std beside it. `empty`
    is the caption of a result with no hits.
    """
    conf = result["confidence"]
    shown = "n/a" if conf is None else f"{conf:.2f}"
    hits = result["hits"]
    shared = len({tuple(h["weights"].items()) for h in hits}) == 1
    caption: Text | str | None
    caption = literal(f"weights {_weights(hits[0]['weights'])}") if hits and shared else None
    if not hits:
        caption = empty
    score_column, between = ("RRF score · dense std", " · ") if hybrid else ("score ± std", " ± ")
    console = console or out()
    calibrated = any(h.get("p_relevant") is not None for h in hits)
    room = _room_for_text(hits, console.width, len(score_column), calibrated, shared)
    if console.width < NARROW or room < MIN_TEXT:  # the other columns leave the text too little
        _print_lines(result, console, between, shown, caption)
        return
    table = Table(
        title=literal(_heading(result, shown)),
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    for column, justify in (("#", "right"), ("id", "left"), (score_column, "right")):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    if calibrated:
        table.add_column("p_relevant", justify="right", no_wrap=True)
    if hits and not shared:
        table.add_column("weights")
    table.add_column("text", overflow="fold")
    for rank, hit in enumerate(hits, start=1):
        p_relevant = [f"{hit['p_relevant']:.2f}"] if calibrated else []
        weights = [] if shared else [literal(_weights(hit["weights"]))]
        table.add_row(
            str(rank),
            literal(_hit_id(hit)),
            f"{hit['score']:.4f}{between}{hit['std']:.4f}",
            *p_relevant,
            *weights,
            literal(_snippet(hit.get("text") or "")),
        )
    console.print(table)


def _room_for_text(
    hits: list[Hit], width: int, score_header: int, calibrated: bool, shared: bool
) -> int:
    """Columns the table would leave the text: long ids (a chunked folder's `path/to/file.md#12`)
    took the width, and the table dropped the text column and cut the scores."""
    if not hits:
        return width
    cells = [len(str(len(hits))), max(len(_hit_id(h)) for h in hits), max(score_header, 15)]
    if calibrated:
        cells.append(len("p_relevant"))
    if not shared:  # the weights wrap: a few members' worth on a line
        cells.append(min(WEIGHTS_WIDTH, max(len(_weights(h["weights"])) for h in hits)))
    return width - sum(cells) - 3 * len(cells) - 4  # each column's padding and rule, the edges


def _print_lines(
    result: QueryResult, console: Console, between: str, shown: str, caption: object
) -> None:
    """The hits as lines, for a terminal too narrow for the table: rank, id, score, p_relevant
    (and weights, where they differ) on one line, the text folded below."""
    console.print(literal(_heading(result, shown)))
    for rank, hit in enumerate(result["hits"], start=1):
        p = "" if hit.get("p_relevant") is None else f"  p {hit['p_relevant']:.2f}"
        console.print(
            literal(f"{rank}. {_hit_id(hit)}  {hit['score']:.4f}{between}{hit['std']:.4f}{p}")
        )
        if caption is None:
            console.print(Padding(literal(_weights(hit["weights"])), (0, 0, 0, 3)))
        console.print(Padding(literal(_snippet(hit.get("text") or "")), (0, 0, 0, 3)))
    if caption is not None:
        console.print(caption)


def _hit_id(hit: Hit) -> str:
    """A hit's id, with how many other chunks of its document matched when grouped by
    document (the count `--group-by-doc` promises; only `--json` carried it)."""
    others = cast("int | None", hit.get("other_chunks"))  # a GroupedHit's
    shown = one_line(hit["id"])
    return f"{shown} (+{others} chunk{'s' if others > 1 else ''})" if others else shown


def _weights(weights: dict[str, float]) -> str:
    """Per-model weights on one line."""
    return " ".join(f"{m} {w:.2f}" for m, w in weights.items())


def _heading(result: QueryResult, confidence: str) -> str:
    """A result's title: the query (its start, as a hit's text: a 75,000-character query
    filled the screen) and its confidence."""
    return f"{_snippet(cast(str, result['query']))!r}  confidence {confidence}"  # searched by text


def _snippet(text: str) -> str:
    """The start of a text, on one line."""
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"


def collections_command(
    db: DbOption = None,
    storage_option: StorageOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the collections of a database with their size and pipeline."""
    from probembed.store import StoreError

    database = open_database(db, storage_option, create=False)
    try:
        stats = [database.open(name).stats() for name in database.collections()]
    except StoreError as exc:
        raise fail(str(exc)) from exc
    if not stats:  # a --db one folder off lists an empty table, and nothing said why
        note(
            "warning:",
            "yellow",
            f"no collections in {database.path}: an empty database, or a folder that is not "
            "one (`probembed ingest` makes a collection)",
        )
    if as_json:
        sys.stdout.write(json.dumps([s.to_json() for s in stats]) + "\n")
        return
    table = Table(title=literal(f"collections in {database.path}"))
    # a model a line, never cut (at 80 columns "paraphrase-l3" read "paraphrase…"), and its
    # adapted weight beside it
    for column in ("name", "items", "dim", "bytes/item", "pipeline", "models", "adapted weights"):
        table.add_column(column, no_wrap=column == "models")
    for s in stats:
        size = "-" if s.bytes_per_item is None else f"{s.bytes_per_item:,.0f}"
        row = (s.name, str(s.count), str(s.dim), size, s.pipeline.name)
        models = s.pipeline.models
        adapted = s.adapted_weights
        shown = "\n".join(f"{adapted[m]:.2f}" for m in models) if adapted else "the prior"
        table.add_row(*map(literal, row), literal("\n".join(models)), literal(shown))
    out().print(table)


def delete_command(
    ids: Annotated[list[str], typer.Argument(help="Ids to delete.")],
    db: DbOption = None,
    storage_option: StorageOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    doc: Annotated[
        bool,
        typer.Option(
            "--doc", help="The ids are documents of a chunked collection: delete their chunks."
        ),
    ] = False,
    missing_ok: Annotated[
        bool, typer.Option("--missing-ok", help="Exit 0 when some ids were not there.")
    ] = False,
) -> None:
    """Delete items by id (with --doc, every chunk of these documents); exits 1, as rm does,
    when some were not there."""
    from probembed.store import StoreError
    from probembed.store.ingest import finish

    target = _open_collection(db, storage_option, collection)
    try:
        if doc:
            removed, gone = target.delete_documents(ids)
            missing = f"; {_not_there(gone, 'document')}" if gone else ""
            chunks = target.named_otherwise(gone, documents=True)
            if chunks:  # `delete --doc cars.md#3` deleted nothing
                chunk, document = next(iter(chunks.items()))
                missing += (
                    f" ({len(chunks)} of them are chunk ids, e.g. {chunk!r}: without --doc "
                    f"it deletes that chunk, and its document is {document!r})"
                )
            missing += _read_from_hint(target, gone, "--doc takes the stored id, not the path")
            say(f"deleted {removed} chunk(s) of {len(set(ids)) - len(gone)} document(s){missing}")
        else:
            present = target.existing(ids)
            removed = target.delete(ids)
            gone = [i for i in dict.fromkeys(ids) if i not in present]
            said = f"; {_not_there(gone, 'id')}" if gone else ""
            chunked = list(target.named_otherwise(gone, documents=False))
            if chunked:  # `delete cars.md` on chunks cars.md#0, #1, ... deleted nothing
                said += (
                    f" ({len(chunked)} of them name document(s) stored as chunks, e.g. "
                    f"{chunked[0]!r}: --doc deletes a document's chunks)"
                )
            said += _read_from_hint(target, gone, "--doc with the stored id deletes its chunks")
            say(f"deleted {removed} item(s){said}")
        if removed and target.agreement_due():
            say("measuring the models' agreement on what is left (loads the pipeline)")
            finish(target, None)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    if gone and not missing_ok:
        raise typer.Exit(1)


def _read_from_hint(target: Collection, gone: list[str], remedy: str) -> str:
    """A hint for the ids a delete did not find that are the path of a file chunked ingest
    stored (as given or from here, through links too), naming the document it is stored as:
    a folder's ids are relative to the folder ingested. Only a hint: nothing is deleted by
    path."""
    spellings = {given: {os.path.abspath(given), os.path.realpath(given)} for given in gone}
    if not spellings:
        return ""
    read_from = target.documents_read_from(sorted(set().union(*spellings.values())))
    stored = {
        given: sorted({doc for name in names for doc in read_from.get(name, [])})
        for given, names in spellings.items()
    }
    stored = {given: docs for given, docs in stored.items() if docs}
    if not stored:
        return ""
    given, docs = next(iter(stored.items()))
    return (
        f" ({len(stored)} of them are paths of files stored as documents, e.g. {given!r} is "
        f"document {', '.join(map(repr, docs))}: {remedy})"
    )


def _not_there(gone: list[str], kind: str) -> str:
    """The ids a delete did not find, the first few named."""
    named = ", ".join(map(repr, gone[:5])) + (", ..." if len(gone) > 5 else "")
    return f"{len(gone)} {kind}(s) were not there: {named}"


def drop_command(
    collection: Annotated[str, typer.Argument(help="The collection to delete.")],
    db: DbOption = None,
    storage_option: StorageOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Drop without asking.")] = False,
) -> None:
    """Delete a collection with everything in it: its items, kept pipeline copy and graphs."""
    from probembed.store import StoreError

    database = open_database(db, storage_option, create=False)
    try:
        count = database.open(collection).count()
        asked = f"drop collection {collection!r} in {database.path} and its {count} item(s)?"
        if not yes and not ask(asked):
            say("nothing dropped")
            raise typer.Exit(1)
        database.drop(collection)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    say(f"dropped collection {collection!r} ({count} item(s))")


def register(app: typer.Typer) -> None:
    """Add the store's commands to the probembed CLI."""
    app.command("ingest")(ingest_command)
    app.command("embed")(embed_command)
    app.command("search")(search_command)
    app.command("collections")(collections_command)
    app.command("delete")(delete_command)
    app.command("drop")(drop_command)
    from probembed.interfaces.demo_command import demo_command  # it builds on this module

    app.command("demo")(demo_command)
    from probembed.interfaces.serve_command import serve_command

    app.command("serve")(serve_command)
