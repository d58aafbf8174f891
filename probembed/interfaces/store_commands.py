"""CLI commands of the store: ingest, embed, search, collections, delete (and the demo's wiring)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from probembed.interfaces.console import (
    ask,
    fail,
    literal,
    named,
    note,
    one_line,
    out,
    say,
)
from probembed.interfaces.ingest_commands import embed_command, ingest_command
from probembed.interfaces.inputs import read_texts
from probembed.interfaces.store_options import (
    DEFAULT_COLLECTION,
    SEARCH_OPTIONS,
    CollectionOption,
    DbOption,
    StorageOption,
    _open_collection,
    open_database,
)

if TYPE_CHECKING:
    from probembed.store import Collection, Hit, QueryResult


_SNIPPET = 110


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
