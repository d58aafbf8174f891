"""CLI commands of the store: ingest, search, collections, delete, and the `make run` demo."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import platformdirs
import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from probembed.store import Collection, QueryResult

#: The store (LanceDB, FAISS) is imported inside each command: it costs seconds, and every
#: other command of the CLI would pay for it.
DEFAULT_COLLECTION = "default"

#: Where the demo looks for SciFact when --data is not given: ../shared beside the repository.
DEMO_DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "retrieval" / "scifact"
DEMO_QUERIES = 5
_SNIPPET = 110
_err = Console(stderr=True)

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        envvar="PROBEMBED_DB",
        help="Database directory [default: env PROBEMBED_DB, else the user data directory].",
        show_default=False,
    ),
]
CollectionOption = Annotated[str, typer.Option("--collection", "-c", help="Collection name.")]


def resolve_db(db: Path | None) -> Path:
    """The --db given, else the user's default database directory."""
    return db if db is not None else Path(platformdirs.user_data_dir("probembed")) / "db"


def _fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error to stderr and give the exit to raise."""
    _err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code=code)


def _load_pipeline(name: str) -> Any:
    """A pipeline by name or directory, with a clean error."""
    from probembed.pipeline import Pipeline

    try:
        return Pipeline.load(name)
    except (ValueError, ImportError, OSError) as exc:
        raise _fail(str(exc)) from exc


def _open_collection(db: Path, name: str) -> Collection:
    """An existing collection of an existing database, or a clean error."""
    from probembed.store import Database, StoreError

    try:
        return Database(db).open(name)
    except StoreError as exc:
        raise _fail(str(exc)) from exc


def ingest_command(
    path: Annotated[Path, typer.Argument(help="JSONL file, BEIR folder, or folder of .txt/.md.")],
    db: DbOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    pipeline: Annotated[
        str | None,
        typer.Option(
            help="Built-in name or pipeline directory [default: the one that made the "
            "collection, else 'default'].",
            show_default=False,
        ),
    ] = None,
    on_error: Annotated[str, typer.Option(help="On a bad input line: skip it or stop.")] = "stop",
    batch_size: Annotated[int, typer.Option(help="Documents per commit.")] = 512,
    upsert: Annotated[bool, typer.Option(help="Replace ids already stored.")] = False,
) -> None:
    """Embed documents and store them; a re-run resumes, skipping ids already stored."""
    from probembed.store import Database, StoreError, ingest

    db = resolve_db(db)
    try:
        target = Database(db, create=True).collection(collection)
        if pipeline is None and target.exists:
            pipe = target.load_pipeline()
        else:
            pipe = _load_pipeline(pipeline or "default")
        report = ingest(path, target, pipe, batch_size, on_error, upsert, progress=True)  # type: ignore[arg-type]
    except (StoreError, ValueError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from exc
    for problem in report.problems:
        _err.print(f"[yellow]skipped[/] {problem}", highlight=False)
    _err.print(report.summary(), highlight=False)
    _err.print(f"collection {collection!r} in {db}: {target.count()} items")
    if report.added:
        with _err.status("building the search graph"):
            target.searcher().warm()


def search_command(
    question: Annotated[list[str], typer.Argument(help="One or more questions.")],
    db: DbOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    k: Annotated[int, typer.Option("-k", "--k", help="Number of hits.")] = 10,
    score: Annotated[
        str | None, typer.Option(help="uec, csd, kl, w2, mls, bhattacharyya or dot.")
    ] = None,
    exact: Annotated[bool, typer.Option(help="Scan every item instead of the ANN graph.")] = False,
    where: Annotated[str | None, typer.Option(help='SQL filter, e.g. "year > 2015".')] = None,
    hybrid: Annotated[bool, typer.Option(help="Fuse with BM25 by reciprocal rank.")] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON list, one result per question, even for one: "
            '[{"query", "confidence", "hits": [{"id", "score", "std", "weights", "text", '
            '"metadata"}]}].',
        ),
    ] = False,
) -> None:
    """Search a collection with the pipeline that made it: hits with score ± std and weights."""
    from probembed.store import StoreError

    target = _open_collection(resolve_db(db), collection)
    try:
        results = target.search(question, k, score, exact, where, hybrid)
    except (StoreError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        sys.stdout.write(json.dumps(results, ensure_ascii=False) + "\n")
        return
    for result in results:
        print_result(result)


def print_result(result: QueryResult, console: Console | None = None) -> None:
    """A rich table of one query's hits, titled with the query and its confidence."""
    conf = result["confidence"]
    shown = "n/a" if conf is None else f"{conf:.2f}"
    table = Table(title=f"{result['query']!r}  confidence {shown}", title_justify="left")
    for column, justify in (("#", "right"), ("id", "left"), ("score ± std", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.add_column("weights")
    table.add_column("text", overflow="fold")
    for rank, hit in enumerate(result["hits"], start=1):
        weights = " ".join(f"{m} {w:.2f}" for m, w in hit["weights"].items())
        table.add_row(
            str(rank),
            str(hit["id"]),
            f"{hit['score']:.4f} ± {hit['std']:.4f}",
            weights,
            _snippet(hit.get("text") or ""),
        )
    (console or Console()).print(table)


def _snippet(text: str) -> str:
    """The start of a text, on one line."""
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"


def collections_command(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the collections of a database with their size and pipeline."""
    from probembed.store import Database, StoreError

    db = resolve_db(db)
    try:
        database = Database(db)
        stats = [database.open(name).stats() for name in database.collections()]
    except StoreError as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        sys.stdout.write(json.dumps([s.to_json() for s in stats]) + "\n")
        return
    table = Table(title=f"collections in {db}")
    for column in ("name", "items", "dim", "bytes/item", "pipeline", "models"):
        table.add_column(column)
    for s in stats:
        row = (s.name, str(s.count), str(s.dim), f"{s.bytes_per_item:,.0f}", s.pipeline.name)
        table.add_row(*row, ", ".join(s.pipeline.models))
    Console().print(table)


def delete_command(
    ids: Annotated[list[str], typer.Argument(help="Ids to delete.")],
    db: DbOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
) -> None:
    """Delete items by id."""
    from probembed.store import StoreError

    target = _open_collection(resolve_db(db), collection)
    try:
        removed = target.delete(ids)
    except StoreError as exc:
        raise _fail(str(exc)) from exc
    missing = len(set(ids)) - removed
    _err.print(
        f"deleted {removed} item(s)" + (f"; {missing} id(s) were not there" if missing else "")
    )


def demo_command(
    data: Annotated[
        Path, typer.Option(help="BEIR folder, JSONL file, or folder of .txt/.md to index.")
    ] = DEMO_DATA,
    pipeline: Annotated[str, typer.Option(help="Built-in name or pipeline directory.")] = "default",
    queries: Annotated[int, typer.Option(help="How many test queries to answer.")] = DEMO_QUERIES,
) -> None:
    """The main job: index a corpus, answer some of its queries, score the collection."""
    from probembed.store import Database, StoreError, ingest

    if not data.exists():
        raise _fail(
            f"no corpus at {data}. Point the demo at your documents: "
            "`make run DATA=/path/to/corpus` (or `probembed demo --data PATH`), where PATH is a "
            "BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv), a JSONL file with "
            "id and text fields, or a folder of .txt/.md files",
            code=1,
        )
    pipe = _load_pipeline(pipeline)
    db = _demo_db(pipe.fingerprint)
    target = Database(db, create=True).collection(_collection_name(data))
    _err.print(f"indexing {data} into {db} (cached: a re-run only adds what is missing)")
    try:
        report = ingest(data, target, pipe, on_error="skip", progress=True)
    except (StoreError, ValueError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from exc
    for problem in report.problems:
        _err.print(f"[yellow]skipped[/] {problem}", highlight=False)
    _err.print(report.summary(), highlight=False)
    if not (data / "qrels" / "test.tsv").is_file():
        _err.print(
            f"{target.count()} items indexed; search them with: probembed search "
            f'"your question" --db {db} --collection {target.name}'
        )
        return
    _answer_and_score(data, target, pipe, queries)


def _answer_and_score(data: Path, target: Collection, pipe: Any, shown: int) -> None:
    """Print hits for the first test queries, then nDCG@10 over all of them."""
    from probembed.evaluation.datasets import load_retrieval
    from probembed.evaluation.metrics import retrieval_metrics
    from probembed.store import Searcher

    bench = load_retrieval(data, "test")
    searcher = Searcher(target, pipe)
    query_ids = list(bench.queries)
    for result in searcher.search([bench.queries[q] for q in query_ids[:shown]], k=5):
        print_result(result)
    fused = pipe.encode([bench.queries[q] for q in query_ids], progress=True)
    summary = Table(title=f"{bench.name}: {len(query_ids)} test queries", title_justify="left")
    for column in ("documents", "score", "nDCG@10"):
        summary.add_column(column, justify="right")
    for score in dict.fromkeys([pipe.score.name, "dot"]):
        results = searcher.search_fused(fused, k=10, score=score)
        ndcg = retrieval_metrics(bench.qrels, _run(query_ids, results), ["ndcg@10"])["ndcg@10"]
        summary.add_row(str(target.count()), score, f"{100 * ndcg:.2f}")
    Console().print(summary)


def _run(query_ids: Sequence[str], results: Sequence[dict[str, Any]]) -> dict:
    """Search results as the {query: {doc: score}} run the metrics read (rank order kept)."""
    return {
        q: {h["id"]: float(len(r["hits"]) - rank) for rank, h in enumerate(r["hits"])}
        for q, r in zip(query_ids, results, strict=True)
    }


def _demo_db(fingerprint: str) -> Path:
    """The demo's database under the user cache directory, one per pipeline."""
    from probembed.cache import default_cache_dir

    return default_cache_dir() / "demo" / fingerprint


def _collection_name(data: Path) -> str:
    """A valid collection name from the corpus path."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", data.resolve().stem or "corpus").strip("-.")
    return name or "corpus"


def register(app: typer.Typer) -> None:
    """Add the store's commands to the probembed CLI."""
    app.command("ingest")(ingest_command)
    app.command("search")(search_command)
    app.command("collections")(collections_command)
    app.command("delete")(delete_command)
    app.command("demo")(demo_command)
