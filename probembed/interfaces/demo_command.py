"""The `make run` demo: index a corpus, ask it questions, show how sure every answer is.

With SciFact under the datasets directory it also scores the collection (nDCG@10); without
any data it indexes the Python documentation that ships with CPython and asks it questions.
"""

from __future__ import annotations

import hashlib
import platform
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from probembed.documents import Problem, Record
from probembed.interfaces.console import fail, literal, out, say
from probembed.interfaces.ingest_commands import ingest_and_report
from probembed.interfaces.search_command import print_result
from probembed.interfaces.store_options import (
    SEARCH_PIPELINE,
    FollowLinksOption,
    load_pipeline,
)
from probembed.paths import DATASETS_ENV, datasets_dir

if TYPE_CHECKING:
    from probembed.evaluation.datasets import RetrievalDataset
    from probembed.store import Collection

DEMO_QUERIES = 5
#: Hits shown per question of the built-in corpus: its passages are long, three make the point.
PYDOC_HITS = 3
#: What a Python user would ask the Python documentation.
PYTHON_QUESTIONS = (
    "How do I catch an exception?",
    "What does the with statement do?",
    "How do I give a function argument a default value?",
    "How do I format a number with two decimal places?",
    "How do I change a global variable inside a function?",
)


def demo_command(
    data: Annotated[
        Path | None,
        typer.Option(
            help="BEIR folder, JSONL file, or documents (.txt/.md/.html/.pdf, or a folder of "
            "them: cut into passages) to index. Default: "
            f"retrieval/scifact under ${DATASETS_ENV} (or ../shared/datasets), "
            "else the Python documentation that ships with Python.",
            show_default=False,
        ),
    ] = None,
    pipeline: Annotated[
        str, typer.Option(help="Built-in name or pipeline directory.")
    ] = SEARCH_PIPELINE,
    queries: Annotated[
        int, typer.Option(help="How many queries to answer (of the Python docs: at most 5).")
    ] = DEMO_QUERIES,
    topic: Annotated[
        list[str] | None,
        typer.Option(help="Index only this topic of the Python docs (repeatable; e.g. try)."),
    ] = None,
    follow_links: FollowLinksOption = False,
) -> None:
    """The main job: index a corpus, answer questions with score ± std and confidence."""
    if queries < 1:
        raise fail(f"--queries must be at least 1, got {queries}")
    if topic and data is not None:
        raise fail("--topic picks passages of the built-in Python docs; drop --data to use it")
    if data is None and not topic:
        scifact = datasets_dir() / "retrieval" / "scifact"
        data = scifact if scifact.is_dir() else None
        if data is None:
            say(f"no SciFact at {scifact} (set {DATASETS_ENV}): using the Python docs")
    if data is None:
        _pydoc_demo(load_pipeline(pipeline), topic, queries)
    else:
        _corpus_demo(data, pipeline, queries, follow_links)


def _pydoc_demo(pipe: Any, topics: Sequence[str] | None, shown: int) -> None:
    """Index the bundled Python docs (or some topics) and answer questions about Python."""
    from probembed.store import Database
    from probembed.store.pydoc_corpus import read_pydoc_topics

    try:
        records = read_pydoc_topics(topics, pipe)
    except (ValueError, ImportError) as exc:
        raise fail(str(exc)) from exc
    db = _demo_db(pipe.fingerprint)
    target = Database(db, create=True).collection(f"pydoc-{platform.python_version()}")
    say(
        f"indexing {len(records)} passages of the Python {platform.python_version()} docs "
        f"into {db} (cached: a re-run only writes what is new or changed)"
    )
    _take_settings(target, pipe)
    ingest_and_report(records, target, pipe, on_error="skip", upsert=True)
    if topics is None:  # all of them: passages an earlier release cut otherwise go
        _keep_only(target, records)
    where = _topic_filter(topics)
    for result in target.search(PYTHON_QUESTIONS[:shown], PYDOC_HITS, where=where):
        print_result(result)
    say(f'ask your own: probembed search "your question" {_where_stored(db, target)}')


def _take_settings(target: Collection, pipe: Any) -> None:
    """Give the demo's cached collection the pipeline's settings as they are now: a release
    that refits a built-in's calibrator (the same vectors) left the cache's copy behind, and
    the demo, that collection's only writer, was refused (`make run` failed after upgrade)."""
    if not target.exists:
        return
    changes = target.record_pipeline(pipe, replace=True)
    if changes:
        say(
            f"the cached index takes {pipe.name!r}'s settings of this release: {'; '.join(changes)}"
        )


def _keep_only(target: Collection, items: Sequence[Record | Problem]) -> None:
    """Remove what the demo's cached collection holds beyond the items' ids: documents gone
    from the corpus, passages an earlier release cut otherwise. A document whose line turned
    bad but still names it stays, as `--sync` keeps it; nothing goes when a bad item names no
    document (a JSON array that does not parse is one such item): any may be one kept."""
    ids = {i.id for i in items if isinstance(i, Record)}
    ids |= {i.doc_id for i in items if isinstance(i, Problem) and i.doc_id is not None}
    gone = sorted(target.ids() - ids) if target.exists else []  # a bad line still names one
    unplaced = sum(isinstance(i, Problem) and i.doc_id is None for i in items)
    if gone and unplaced:
        say(
            f"kept {len(gone)} stored item(s) the corpus no longer holds: {unplaced} bad "
            "item(s) name no document, and any of them may be one of those"
        )
    elif gone:
        target.delete_stored(gone)
        say(f"removed {len(gone)} item(s) no longer in the corpus")


def _topic_filter(topics: Sequence[str] | None) -> str | None:
    """A SQL filter keeping the given topics, so a partial run searches only what it chose."""
    if not topics:
        return None
    from probembed.store.filters import sql_list

    return f"topic IN ({sql_list(topics)})"


def _corpus_demo(data: Path, pipeline: str, queries: int, follow_links: bool = False) -> None:
    """Index a corpus on disk (a folder's links read as `follow_links` says); with BEIR test
    qrels, answer some queries and score them all."""
    from probembed.store import Database, read_records

    if not data.exists():
        raise fail(
            f"no corpus at {data}. Point the demo at your documents: "
            "`make run DATA=/path/to/corpus` (or `probembed demo --data PATH`), where PATH is a "
            "BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv), a JSONL file with "
            "id and text fields, or a folder of .txt/.md files"
        )
    from probembed.evaluation.datasets import load_retrieval

    # a BEIR set is read whole first: a line it cannot score failed after minutes of indexing
    bench = load_retrieval(data, "test") if (data / "qrels" / "test.tsv").is_file() else None
    pipe = load_pipeline(pipeline)
    db = _demo_db(pipe.fingerprint)
    documents = _documents(data)
    name = _collection_name(data) + ("-chunks" if documents else "")  # never one of both kinds
    target = Database(db, create=True).collection(name)
    say(f"indexing {data} into {db} (cached: a re-run only writes what is new or changed)")
    _take_settings(target, pipe)
    if documents:  # passages the models read whole, kept in step with the files (sync)
        ingest_and_report(
            data, target, pipe, chunk=True, follow_links=follow_links, on_error="skip", sync=True
        )
    else:
        ingest_and_report(
            data, target, pipe, follow_links=follow_links, on_error="skip", upsert=True
        )
        _keep_only(target, list(read_records(data, follow_links)))
    if not target.exists or not target.count():  # what `ingest` refuses: nothing to search
        raise fail(f"nothing indexed from {data}: every item was skipped (see above)")
    if bench is None:
        kind = "passages" if documents else "items"
        grouped = " (--group-by-doc: one hit per document)" if documents else ""
        say(
            f"{target.count()} {kind} indexed; search them with: probembed search "
            f'"your question" {_where_stored(db, target)}{grouped}'
        )
        return
    _answer_and_score(bench, target, pipe, queries)


def _where_stored(db: Path, target: Collection) -> str:
    """The --db and --collection options of a suggested command, quoted for a shell (a cache
    directory with a space in its path)."""
    return f"--db {shlex.quote(str(db))} --collection {shlex.quote(target.name)}"


def _documents(data: Path) -> bool:
    """Whether the corpus is documents to cut into passages (a folder of files, or one file
    that a document reader takes), not records (JSON lines, a BEIR corpus) already cut."""
    from probembed.store.formats import READERS
    from probembed.store.readers import is_beir

    if data.is_dir():
        return not is_beir(data)
    return data.suffix.lower() in READERS


def _answer_and_score(bench: RetrievalDataset, target: Collection, pipe: Any, shown: int) -> None:
    """Print hits for the first test queries, then nDCG@10 over all of them."""
    from probembed.evaluation.metrics import retrieval_metrics, run_from_results

    searcher = target.searcher()
    query_ids = list(bench.queries)
    for result in target.search([bench.queries[q] for q in query_ids[:shown]], k=5):
        print_result(result)
    texts = [bench.queries[q] for q in query_ids]
    fused = pipe.encode(texts, progress=True)
    summary = Table(
        title=literal(f"{bench.name}: {len(query_ids)} test queries"), title_justify="left"
    )
    for column in ("documents", "score", "search", "nDCG@10"):
        summary.add_column(column, justify="right")
    runs = [(score, False) for score in dict.fromkeys([pipe.score.name, "dot"])]
    for score, hybrid in [*runs, (pipe.score.name, True)]:  # k = 11: 10 after a self-match
        results = searcher.search_fused(fused, k=11, score=score, hybrid=hybrid, texts=texts)
        run = run_from_results(query_ids, results)
        ndcg = retrieval_metrics(bench.qrels, run, ["ndcg@10"])["ndcg@10"]
        kind = "dense + BM25 (RRF)" if hybrid else "dense"
        summary.add_row(str(target.count()), score, kind, f"{100 * ndcg:.2f}")
    out().print(summary)


def _demo_db(fingerprint: str) -> Path:
    """The demo's database under the user cache directory, one per pipeline."""
    from probembed.cache import default_cache_dir

    return default_cache_dir() / "demo" / fingerprint


def _collection_name(data: Path) -> str:
    """A valid collection name for the corpus at this path: its name, and a digest of the
    whole path, so two corpora that share a name (d1/corpus.jsonl, d2/corpus.jsonl) never
    share a collection."""
    where = data.resolve()
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", where.stem or "corpus").strip("-.") or "corpus"
    return f"{name}-{hashlib.sha256(str(where).encode()).hexdigest()[:8]}"
