"""`probembed search`, and the printing of its results as a table, or as lines on a narrow
terminal (the demo prints its answers so too).

The store (LanceDB, FAISS) is imported inside the command, as for every store command."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from probembed.interfaces.console import fail, literal, named, one_line, out, warnings_retold
from probembed.interfaces.inputs import Lines, read_lines
from probembed.interfaces.store_options import (
    DEFAULT_COLLECTION,
    SEARCH_OPTIONS,
    CollectionOption,
    DbOption,
    StorageOption,
    _open_collection,
    store_refusal,
)

if TYPE_CHECKING:
    from probembed.store import Hit, QueryResult

_SNIPPET = 110


def search_command(
    question: Annotated[
        list[str] | None,
        typer.Argument(
            help="One or more questions; none (or -): one per line of stdin, blank lines "
            "skipped (no result for them)."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            help="Read the questions from this file, one per line, blank lines skipped (-: stdin)."
        ),
    ] = None,
    db: DbOption = None,
    storage_option: StorageOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    k: Annotated[int, typer.Option("-k", "--k", help="Number of hits.", min=1)] = 10,
    score: Annotated[
        str | None,
        typer.Option(
            help="uec, uec-mteb, csd, kl, w2, mls, bhattacharyya or dot (alias cosine) "
            "\\[default: the score of the pipeline that made the collection]. It ranks the "
            "hits; p_relevant is still read from each hit's dot product, std, rank and gaps "
            "along that ranking, by a calibrator fitted on the pipeline's own score (so the "
            "same hits in the same order get the same p_relevant).",
        ),
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
            "pipeline with a relevance calibrator. Under another --score p_relevant is that "
            "calibrator's, fitted on the pipeline's own score: an approximation (docs/results.md).",
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
            '"p_relevant", "text", "metadata"}], "cut_at_tokens"}] (the tokens the models '
            "read of a question longer than that, else null).",
        ),
    ] = False,
) -> None:
    """Search a collection with the pipeline that made it: hits with score ± std and weights."""
    from probembed.store import NotChunkedError, QueryCutWarning, StoreError

    lines = read_lines(question, file, "questions")
    target = _open_collection(db, storage_option, collection)
    try:
        with warnings_retold(lambda told: _where_cut(told, lines)) as caught:
            # caught whatever the filters say: --json's cut_at_tokens is read from it
            warnings.simplefilter("always", QueryCutWarning)
            results = target.search(
                lines.texts,
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
        raise store_refusal(exc, named(str(exc), SEARCH_OPTIONS)) from exc
    if as_json:
        cut = [w.message for w in caught if isinstance(w.message, QueryCutWarning)]
        cuts = cut[0].cut_at_tokens(len(results)) if cut else [None] * len(results)
        answer = [{**r, "cut_at_tokens": at} for r, at in zip(results, cuts, strict=True)]
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        return
    empty = ""
    if any(not result["hits"] for result in results):  # counted only when it is asked
        empty = _why_no_hits(target.count(), where, min_p_relevant)
    for result in results:
        print_result(result, hybrid=hybrid, empty=empty)


def _where_cut(told: Warning, lines: Lines) -> str:
    """A warning as `search` shows it: of several questions, which were cut (their lines of
    the file or stdin, or the arguments) and at how many tokens, told once, where 40 lines of
    --file were "a query"."""
    from probembed.store import QueryCutWarning

    if not isinstance(told, QueryCutWarning) or len(lines.texts) < 2:
        return str(told)
    return f"{told}; cut at {told.limit} tokens: {lines.places(told.positions)}"


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
