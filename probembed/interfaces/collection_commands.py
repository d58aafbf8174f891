"""`probembed collections`, `delete`, `erase`, `drop`, `undo`, `compact`, `pins` and `backup`:
what a database holds, taking items (for good, with erase) or a whole collection out of it,
undoing a write, freeing the disk its old versions hold, the tags that keep versions from
that, and a copy of it.

The store (LanceDB, FAISS) is imported inside each command, as for every store command."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.table import Table

from probembed.interfaces.console import ask, fail, literal, named, note, out, say
from probembed.interfaces.inputs import read_texts
from probembed.interfaces.store_options import (
    DEFAULT_COLLECTION,
    WHERE_OPTIONS,
    CollectionOption,
    DbOption,
    StorageOption,
    WaitOption,
    _open_collection,
    check_wait,
    open_database,
    storage_options,
    store_refusal,
)

if TYPE_CHECKING:
    from probembed.store import Collection

#: How delete's and erase's refusals of a filter name its options.
_FILTER_OPTIONS = {**WHERE_OPTIONS, "allow_all=True": "--all"}


def collections_command(
    db: DbOption = None,
    storage_option: StorageOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the collections of a database with their size, pipeline and, for chunked ones,
    the chunk settings their documents are cut at."""
    from probembed.store import StoreError
    from probembed.store.chunked import StoredCuts

    database = open_database(db, storage_option, create=False)
    try:
        opened = [database.open(name) for name in database.collections()]
        stats = [(c.stats(), StoredCuts.of(c)) for c in opened]
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc
    if not stats:  # a --db one folder off lists an empty table, and nothing said why
        note(
            "warning:",
            "yellow",
            f"no collections in {database.path}: an empty database, or a folder that is not "
            "one (`probembed ingest` makes a collection)",
        )
    if as_json:
        listed = [
            s.to_json() | {"chunking": None if cut is None else cut.to_json()} for s, cut in stats
        ]
        sys.stdout.write(json.dumps(listed) + "\n")
        return
    table = Table(title=literal(f"collections in {database.path}"))
    # a model a line, never cut (at 80 columns "paraphrase-l3" read "paraphrase…"), and its
    # adapted weight beside it; the chunk settings where a collection is chunked
    chunked = any(cut is not None for _, cut in stats)
    columns = ("name", "items", "dim", "bytes/item", "pipeline", "models", "adapted weights")
    for column in columns:
        table.add_column(column, no_wrap=column == "models")
    if chunked:  # folded, not cut: "64/31 (token…" hid the overlap's unit
        table.add_column("chunks cut at", overflow="fold")
    for s, cut in stats:
        size = "-" if s.bytes_per_item is None else f"{s.bytes_per_item:,.0f}"
        row = (s.name, str(s.count), str(s.dim), size, s.pipeline.name)
        models = s.pipeline.models
        adapted = s.adapted_weights
        shown = "\n".join(f"{adapted[m]:.2f}" for m in models) if adapted else "the prior"
        cells = [literal("\n".join(models)), literal(shown)]
        table.add_row(*map(literal, row), *cells, *([literal(str(cut or ""))] if chunked else []))
    out().print(table)


def delete_command(
    ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Ids to delete; -: one per line of stdin, blank lines skipped (an id that is "
            "`-` itself: give it on stdin).",
            show_default=False,
        ),
    ] = None,
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
    wait: WaitOption = None,
    where: Annotated[
        str | None,
        typer.Option(
            "--where",
            metavar="FILTER",
            help="Delete the items this SQL filter selects, as `search --where` reads it "
            "(e.g. \"customer = 'c-17'\"), in place of ids.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="With --where: delete even where the filter selects every item."
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object on stdout instead of the summary: collection, "
            "deleted (items; with --doc, chunks), count (left), not_found, not_found_ids.",
        ),
    ] = False,
) -> None:
    """Delete items by id (with --doc, every chunk of these documents), each found as given,
    else by its composed or decomposed Unicode spelling, or those a filter selects (--where);
    exits 1, as rm does, when some ids were not there."""
    from probembed.store import StoreError

    check_wait(wait, doc, "--doc")
    if ids == ["-"]:  # as encode and search read `-`
        ids = read_texts(ids, None, "ids", file_option=None)
    _check_delete_options(ids, where, doc, every)
    ids = ids or []
    gone: list[str] = []  # ids or documents not there
    target = _open_collection(db, storage_option, collection)
    tell = _silent if as_json else say
    try:
        if where is not None:
            removed = target.delete(where=where, allow_all=every)
            said = "" if removed else " (none matched)"
            tell(f"deleted {removed} item(s) selected by --where {where!r}{said}")
        elif doc:
            removed, gone = target.delete_documents(ids, wait, progress=True)
            missing = f"; {_not_there(gone, 'document')}" if gone else ""
            chunks = target.named_otherwise(gone, documents=True)
            if chunks:  # `delete --doc cars.md#3` deleted nothing
                chunk, document = next(iter(chunks.items()))
                missing += (
                    f" ({len(chunks)} of them are chunk ids, e.g. {chunk!r}: without --doc "
                    f"it deletes that chunk, and its document is {document!r})"
                )
            missing += _read_from_hint(target, gone, "--doc takes the stored id, not the path")
            tell(f"deleted {removed} chunk(s) of {len(set(ids)) - len(gone)} document(s){missing}")
        else:
            gone = target.absent(ids)  # as delete finds an id: as given, else NFC or NFD
            removed = target.delete(ids)
            said = f"; {_not_there(gone, 'id')}" if gone else ""
            chunked = list(target.named_otherwise(gone, documents=False))
            if chunked:  # `delete cars.md` on chunks cars.md#0, #1, ... deleted nothing
                said += (
                    f" ({len(chunked)} of them name document(s) stored as chunks, e.g. "
                    f"{chunked[0]!r}: --doc deletes a document's chunks)"
                )
            said += _read_from_hint(target, gone, "--doc with the stored id deletes its chunks")
            tell(f"deleted {removed} item(s){said}")
        if removed and target.agreement_due():
            tell("measuring the models' agreement on what is left (loads the pipeline)")
            _measure_after_delete(target, "delete")
        if as_json:
            answer = {"collection": collection, "deleted": removed, "count": target.count()}
            answer |= {"not_found": len(gone), "not_found_ids": gone}
            sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    except StoreError as exc:
        raise store_refusal(exc, named(str(exc), _FILTER_OPTIONS)) from exc
    if gone and not missing_ok:
        raise typer.Exit(1)


def _check_delete_options(ids: list[str] | None, where: str | None, doc: bool, every: bool) -> None:
    """Refuse a delete given ids and --where, neither, --where with --doc, or --all without
    --where, before the database opens."""
    if where is None and not ids:
        raise fail("give the ids to delete, or --where FILTER")
    if where is not None and ids:
        raise fail("give ids or --where, not both")
    if where is not None and doc:
        raise fail("--where selects items, not documents: leave out --doc")
    if every and where is None:
        raise fail("--all goes with --where: it lets a filter that selects every item delete them")


def _silent(message: str) -> None:
    """What `--json` says of a summary on stderr: nothing (stdout has it)."""


def _measure_after_delete(target: Collection, what: str) -> None:
    """Measure the members' agreement again, which a delete (or erase: `what`) left due: where
    the pipeline does not load here, the delete is done all the same (it needs no model) and a
    warning says why the agreement waits; it failed after its rows were gone."""
    from probembed.interfaces.cli import KNOWN_FAILURES
    from probembed.store.ingest import finish_delete

    failure = finish_delete(target, target.load_pipeline)
    if failure is None:
        return
    why = (
        str(failure)
        if isinstance(failure, KNOWN_FAILURES)
        else f"{type(failure).__name__}: {failure}"
    )
    note(
        "warning:",
        "yellow",
        f"the {what} is done, but the models' agreement is left due, to be measured by the "
        f"next write or delete that loads the pipeline, which does not load here: {why}",
    )


def erase_command(
    ids: Annotated[
        list[str] | None,
        typer.Argument(help="Ids to erase (with --doc, documents).", show_default=False),
    ] = None,
    db: DbOption = None,
    storage_option: StorageOption = None,
    collection: CollectionOption = DEFAULT_COLLECTION,
    doc: Annotated[
        bool,
        typer.Option("--doc", help="The ids are documents of a chunked collection: every chunk."),
    ] = False,
    where: Annotated[
        str | None,
        typer.Option(
            help="Erase every item this filter keeps, as search --where takes it, e.g. "
            "\"customer = 'T9000'\".",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Drop a pin of a write that may still run (`probembed pins` lists them): "
            "that write can then not be undone.",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Erase without asking.")] = False,
    missing_ok: Annotated[
        bool, typer.Option("--missing-ok", help="Exit 0 when some ids were not there.")
    ] = False,
    wait: WaitOption = None,
    every: Annotated[
        bool,
        typer.Option("--all", help="With --where: erase even where the filter keeps every item."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Erase items for good (a right-to-be-forgotten request): their rows, every older
    version of the collection (no undo brings them back), their entries in the text index,
    the saved search graphs and the embedding cache.

    Ids (and --doc documents) deleted before are erased too, read from the older versions
    kept; exits 1, as delete does, when some ids were in no version (where none was in any,
    nothing changes: undo still works)."""
    from probembed.store import StoreError

    if where is not None and (ids or doc):
        raise fail("give ids (or --doc documents) or --where, not both")
    if where is None and not ids:
        raise fail("name the ids to erase (with --doc, documents), or give --where")
    if every and where is None:
        raise fail("--all goes with --where: it lets a filter that keeps every item erase them")
    target = _open_collection(db, storage_option, collection)
    chosen = f"--where {where!r}" if where is not None else f"{len(ids or [])} {_kind(doc)}"
    asked = (
        f"erase {chosen} from collection {collection!r} for good (every older version is "
        "removed: no undo)?"
    )
    try:
        if not yes:  # a filter the erasure refuses is refused before the question, not after
            target.check_erasure(where, allow_all=every)
            if not ask(asked):
                say("nothing erased")
                raise typer.Exit(1)
        done = target.erase(
            None if doc or where is not None else ids,
            documents=ids if doc else None,
            where=where,
            force=force,
            wait=wait,
            progress=True,
            allow_all=every,
        )
        if done.live and target.agreement_due():
            say("measuring the models' agreement on what is left (loads the pipeline)")
            _measure_after_delete(target, "erasure")
    except StoreError as exc:
        raise store_refusal(exc, named(str(exc), _FILTER_OPTIONS)) from exc
    if as_json:
        sys.stdout.write(json.dumps(done.to_json()) + "\n")
    else:
        say(str(done))
    if done.not_found and not missing_ok:
        raise typer.Exit(1)


def _kind(documents: bool) -> str:
    """What the ids name, as the erase's question says it."""
    return "document(s)" if documents else "id(s)"


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
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object on stdout instead of the summary: collection, "
            "deleted (its items), count (0).",
        ),
    ] = False,
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
        raise store_refusal(exc, str(exc)) from exc
    if as_json:  # as the service's DELETE of a collection answers
        answer = {"collection": collection, "deleted": count, "count": 0}
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    else:
        say(f"dropped collection {collection!r} ({count} item(s))")


def undo_command(
    collection: CollectionOption = DEFAULT_COLLECTION,
    db: DbOption = None,
    storage_option: StorageOption = None,
    to: Annotated[
        int | None,
        typer.Option(
            "--to",
            help="Undo every write after this version (`probembed collections --json` gives "
            "the latest), not only the last one.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Undo a collection's last write (the last commit that changed items: a batch of an
    ingest, a delete, an undo), putting its items back as they were; items another writer
    has changed since are left as they are. Undoing an undo puts the write back."""
    from probembed.store import StoreError

    target = _open_collection(db, storage_option, collection)
    try:
        done = target.undo(to)
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc
    if as_json:
        sys.stdout.write(json.dumps(done.to_json()) + "\n")
    else:
        say(str(done))


def compact_command(
    collection: Annotated[
        str | None,
        typer.Option("--collection", "-c", help="Collection to compact.", show_default=False),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Compact every collection.")] = False,
    db: DbOption = None,
    storage_option: StorageOption = None,
    keep: Annotated[
        str,
        typer.Option(
            help="Keep versions replaced less than this long ago (90s, 30m, 12h, 1d; 0: only "
            "the latest): a reader or a running write's undo may still read them.",
        ),
    ] = "1d",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """Compact collections and remove their old versions, printing what was freed."""
    from probembed.store import StoreError
    from probembed.store.upkeep import parse_duration

    if (collection is not None) == every:
        raise fail("name one collection (-c NAME) or pass --all")
    try:
        retention = parse_duration(keep)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    database = open_database(db, storage_option, create=False)
    try:
        names = database.collections() if every else [cast(str, collection)]
        for name in names:
            done = database.open(name).compact(retention)
            if as_json:
                sys.stdout.write(json.dumps(done.to_json()) + "\n")
            else:
                say(str(done))
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc


def pins_command(
    collection: CollectionOption = DEFAULT_COLLECTION,
    db: DbOption = None,
    storage_option: StorageOption = None,
    drop: Annotated[
        list[str] | None,
        typer.Option(
            "--drop",
            help="Remove this tag (repeatable): a stale pin or a tag of your own; a pin whose "
            "write may still run only with --force.",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Drop a pin whose write may still run (on this machine, or one that cannot "
            "be told: another machine's, an earlier release's): that write can then not be "
            "undone once a compaction prunes the version the pin held.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List a collection's tags (the pins a write that may be undone keeps its start version
    with, and tags of your own), each with what it is; --drop removes one."""
    from probembed.store import StoreError
    from probembed.store.pins import SAID

    target = _open_collection(db, storage_option, collection)
    try:
        if drop:
            for name in dict.fromkeys(drop):
                tag = target.drop_tag(name, force)
                said = {"dropped": tag.to_json()}
                if not as_json:
                    say(f"dropped tag {tag.name!r} (version {tag.version}): {SAID[tag.state]}")
                else:
                    sys.stdout.write(json.dumps(said) + "\n")
            return
        tags = target.tags()
    except StoreError as exc:
        raise store_refusal(exc, str(exc)) from exc
    if as_json:
        for tag in tags:
            sys.stdout.write(json.dumps(tag.to_json()) + "\n")
        return
    if not tags:
        say(f"collection {collection!r} has no tags: nothing holds its versions from a prune")
        return
    table = Table(title=literal(f"tags of collection {collection!r}"))
    for column in ("tag", "version", "made (UTC)", "what it is"):
        table.add_column(column, overflow="fold")
    for tag in tags:
        made = "-" if tag.made is None else tag.made.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(literal(tag.name), str(tag.version), made, literal(SAID[tag.state]))
    out().print(table)


def backup_command(
    to: Annotated[
        str,
        typer.Argument(
            help="The new database: a new or empty folder, or an object-store prefix "
            "(s3://BUCKET/PREFIX).",
            show_default=False,
        ),
    ],
    db: DbOption = None,
    storage_option: StorageOption = None,
    collection: Annotated[
        list[str] | None,
        typer.Option(
            "--collection",
            "-c",
            help="A collection to copy (repeatable) \\[default: every one].",
            show_default=False,
        ),
    ] = None,
    to_storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--to-storage-option",
            help="KEY=VALUE for an object-storage TO (repeatable) \\[default: --storage-option's "
            "where --db is on object storage too, else the environment variables].",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """Copy a database's collections, each at one version, into a new database at TO while
    they are served and written: it opens as a database of its own (--db TO), and a backup of
    it back into a new place restores it."""
    from probembed.store import StoreError

    options = None if to_storage_option is None else storage_options(to_storage_option)
    database = open_database(db, storage_option, create=False)
    try:
        done = database.backup(to, collection, options)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    for copied in done:
        if as_json:
            sys.stdout.write(json.dumps(copied.to_json()) + "\n")
        else:
            say(f"{copied} copied to {to}")
