"""Putting documents into a collection: read, check, embed and commit in batches, resumably.

The whole input is read and checked before anything is written, so `on_error="stop"` writes
nothing at all when any line is bad, and `on_error="skip"` reports every skipped line. Each
batch is one LanceDB commit; a re-run skips the ids already committed, so an interrupted
ingest resumes where it stopped and never duplicates a row.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Container, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, cast

import numpy as np
import pyarrow as pa

from probembed.documents import no_text, record_from, under_prefix
from probembed.encoders.base import is_blank
from probembed.fusion import Fused
from probembed.progress import progress_bar
from probembed.store.collection import Collection
from probembed.store.errors import (
    CollectionDroppedError,
    StorageUnavailableError,
    StoreError,
    UndoConflictError,
    listed,
    skipped,
)
from probembed.store.kinds import refuse_mixing
from probembed.store.readers import (
    RECOMPOSED,
    TEXT_SUFFIXES,
    OwnFolders,
    Problem,
    Record,
    Unread,
    composed,
    prefixed,
    read_records,
    recomposed,
    removed_links,
    removed_note,
    unread_files,
    unread_note,
)
from probembed.store.rows import (
    MAX_METADATA_DEPTH,
    Batch,
    Clashes,
    PipelineInfo,
    metadata_json,
    nests_too_deep,
    not_unicode,
    plain,
    promote_metadata,
    reserved_key,
    unusable_id,
)

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline
    from probembed.store.chunked import DocumentReport

OnError = Literal["skip", "stop"]
ON_ERROR = ("skip", "stop")
#: Documents per commit: large enough to amortise a commit, small enough to lose little.
DEFAULT_BATCH = 512
#: Up to this many ids are looked up by an `id IN (...)` filter; more read every stored id.
FILTERED_IDS = 1024
#: Stored rows taken by row id per read when many records are compared with what is stored.
TAKEN_ROWS = 4096


class IngestError(StoreError):
    """Bad input lines under on_error="stop": nothing was written; `problems` lists them all."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(self.told("pass on_error='skip' / --on-error skip"))

    def told(self, skip: str) -> str:
        """The message, with how the caller skips bad items in its own terms (an HTTP client
        sends `"on_error": "skip"`)."""
        return (
            f"{len(self.problems)} bad input item(s); nothing was written "
            f"(fix them, or {skip} to skip them):{listed(self.problems)}"
        )


@dataclass(frozen=True)
class Repeats:
    """Documents whose content another document repeats: each copy is found, and they split
    the p_relevant one would get between them (a `min_p_relevant` may drop them all), so a
    report names them rather than leaving them unsaid or dropping any."""

    #: Documents in groups of two or more with one content, some of this run's.
    count: int = 0
    #: One pair: (a document of this run, the one whose content it repeats).
    example: tuple[str, str] | None = None

    def note(self) -> str:
        """What a summary adds: nothing when no document repeats another."""
        if self.example is None:
            return ""
        later, first = self.example
        return (
            f"; {self.count} document(s) repeat another's content, e.g. {later!r} = {first!r}: "
            "both are found, and each gets a lower p_relevant than one would"
        )


def repeated(
    given: Iterable[tuple[str, object]], kept: Iterable[tuple[str, object]] = ()
) -> Repeats:
    """The documents (id, content key) of a run that share a key with another of the run
    or with a stored one (`kept`: those the run leaves stored), and one pair of them."""
    groups: dict[object, list[str]] = {}
    for doc_id, key in kept:
        groups.setdefault(key, []).append(doc_id)
    run: set[str] = set()
    for doc_id, key in given:
        groups.setdefault(key, []).append(doc_id)
        run.add(doc_id)
    shared = [ids for ids in groups.values() if len(ids) > 1 and not run.isdisjoint(ids)]
    if not shared:
        return Repeats()
    first = shared[0]
    later = next(i for i in first[1:] if i in run)
    return Repeats(sum(map(len, shared)), (later, first[0]))


@dataclass
class IngestReport:
    """What an ingest did: rows added (and replaced, with upsert), ids already stored, skips."""

    source: str
    added: int = 0
    already_stored: int = 0
    updated: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: With upsert: ids already stored with this very text and metadata, left as they are.
    unchanged: int = 0
    #: Without upsert: the ids already stored with another text or metadata than given, in
    #: input order, left as stored (an edit a re-run did not write: upsert replaces them).
    changed: list[str] = field(default_factory=list)
    #: Files of a folder source that no reader takes, by suffix (`readers.unread_files`).
    unread: Unread = field(default_factory=Unread)
    #: With sync: the stored ids under the prefix that the input does not hold, which the
    #: write's last step removes (`sync_removals`), and how many it removed.
    gone: list[str] = field(default_factory=list)
    removed: int = 0
    #: With sync: those of `gone` that links not followed held (`readers.removed_links`).
    removed_links: list[str] = field(default_factory=list)
    #: With sync: those of `gone` stored again under their composed ids (`readers.recomposed`).
    recomposed: list[str] = field(default_factory=list)
    #: With sync: bad items that named no record, so the sync removed nothing.
    sync_withheld: int = 0
    #: Records of this run with one text (stored rows are not compared: that reads them all).
    repeats: Repeats = field(default_factory=Repeats)

    def summary(self) -> str:
        """One line for a person."""
        replaced = f", updated {self.updated}" if self.updated else ""
        same = f", unchanged {self.unchanged}" if self.unchanged else ""
        notes = removed_note(self.removed_links) + removed_note(self.recomposed, RECOMPOSED)
        removed = f", removed {self.removed}{notes}" if self.removed else ""
        return (
            f"{self.source}: added {self.added}{replaced}{same}{removed}, already stored "
            f"{self.already_stored}, skipped {len(self.problems)} bad item(s)"
            f"{withheld_note(self.sync_withheld)}{self.repeats.note()}"
            f"{unread_note(self.unread, TEXT_SUFFIXES)}"
        )

    def to_json(self) -> dict[str, Any]:
        """As `probembed ingest --json` prints it and the service answers a write (`changed`:
        how many ids of `already_stored` hold another text or metadata than given)."""
        return written_json(self) | {
            "already_stored": self.already_stored,
            "changed": len(self.changed),
        }


def none_fit(report: IngestReport | DocumentReport) -> bool:
    """Whether a run skipped items and found none fit to store, keep or remove (every item
    bad, under `on_error="skip"`): a script must see such a run fail, into a collection
    that exists too."""
    done = report.added + report.updated + report.unchanged + report.removed
    if isinstance(report, IngestReport):
        done += report.already_stored
    else:
        done += report.relocated + report.emptied + report.empty_kept
    return bool(report.problems) and not done


def written_json(report: IngestReport | DocumentReport) -> dict[str, Any]:
    """The counts every write reports, named as the service's answers name them
    (`schemas.WriteReport`), so a script reads one write's outcome alike from the CLI's
    `--json` and from HTTP: each report's `to_json` adds its own."""
    return {
        "source": report.source,
        "added": report.added,
        "updated": report.updated,
        "unchanged": report.unchanged,
        "removed": report.removed,
        "skipped": [str(problem) for problem in report.problems],
        "sync_withheld": report.sync_withheld,
        "repeated": report.repeats.count,
        "repeated_example": report.repeats.example,
    }


def withheld_note(count: int) -> str:
    """What a report says of a sync that removed nothing: `count` bad items named no document,
    and any of them may be one still in the source."""
    if not count:
        return ""
    return (
        f"; sync removed nothing: {count} bad item(s) name no document, which may be one "
        "still there"
    )


class Embedding(Protocol):
    """How a write embeds what it commits, one batch per commit: `in_order` here, one batch
    after another; `ray_ingest.OnRay` on Ray actors, cached batches first. The write's
    steps (a sync's removal rides the last) are the same whichever embeds."""

    def __call__(
        self,
        texts: Sequence[str],
        pipeline: Pipeline,
        batch_size: int,
        starts: Sequence[int] | None = None,
        advance: Callable[[int], None] | None = None,
    ) -> Iterator[tuple[np.ndarray, Fused]]:
        """(positions in `texts`, their Gaussians) for each batch of `batch_size` starting
        at `starts` (None: every batch), each once, in any order; `advance` (None: nobody
        listens) is told the whole texts done as they are."""
        ...


def bar_label(what: str, embed_with: Embedding) -> str:
    """A progress bar's label, naming where its texts are embedded when not here (`OnRay`'s
    `where`, "ray"), so a person sees which path ran."""
    where = getattr(embed_with, "where", None)
    return f"{what} ({where})" if where else what


def in_order(
    texts: Sequence[str],
    pipeline: Pipeline,
    batch_size: int,
    starts: Sequence[int] | None = None,
    advance: Callable[[int], None] | None = None,
    encode: Callable[[list[str]], Fused] | None = None,
) -> Iterator[tuple[np.ndarray, Fused]]:
    """The `Embedding` that encodes here, each batch only when the one before is taken, so a
    killed run has encoded little it did not commit; `encode` replaces `pipeline.encode`."""
    for start in range(0, len(texts), batch_size) if starts is None else starts:
        chunk = list(texts[start : start + batch_size])
        yield np.arange(start, start + len(chunk)), _encoded(chunk, pipeline, encode, advance)


def ingest(
    source: str | Path | Iterable[Record | Problem | Mapping[str, Any]],
    collection: Collection,
    pipeline: Pipeline | str | os.PathLike | None = None,
    batch_size: int = DEFAULT_BATCH,
    on_error: OnError = "stop",
    upsert: bool = False,
    progress: bool = False,
    on_commit: Callable[[int], None] | None = None,
    encode: Callable[[list[str]], Fused] | None = None,
    prefix: str = "",
    columns: Mapping[str, pa.DataType] | None = None,
    advance: Callable[[int], None] | None = None,
    sync: bool = False,
    created: str | None = None,
    follow_links: bool = False,
    embed_with: Embedding | None = None,
    wait: float | None = None,
) -> IngestReport:
    """Embed and store documents from a path (JSONL, BEIR folder, .txt/.md folder) or items
    given in Python: `Record`s, or dicts read as JSON lines are (`{"id", "text", "title"?,
    ...metadata}`).

    `pipeline` is a `Pipeline`, a built-in name or a saved directory; left out, the
    collection's own. Ids already in the collection are skipped (resume), or replaced when
    `upsert` is set.
    `on_commit` is called with the number of rows written so far (added or replaced) after
    each committed batch.
    `encode` replaces `pipeline.encode` (the service sends texts through its batcher); it must
    give what `pipeline.encode` gives.
    `prefix` is put before every id read (`docs/` makes a folder's `README.md`
    `docs/README.md`): two sources in one collection keep apart. It is composed (NFC) as a
    file name's id is, so a prefix typed decomposed (macOS) gives ids of one spelling.
    `columns`: column types a larger write this one is part of decided (`Checked.columns`;
    chunked ingest's parts).
    `advance` is told the texts encoded as they are (a larger write's own bar, as chunked
    ingest keeps one over its parts); `progress` shows this call's own bar instead.
    `sync` (implies `upsert`) also removes the stored ids under `prefix` that the input does
    not hold, with the last batch (`sync_removals` says what it refuses and when it removes
    nothing; `Collection.upsert` how many commits that takes); a sync that fails part-way
    puts back what it wrote (`undo`).
    `created`: the creation token of the collection a larger write this one is part of wrote
    to (chunked ingest's parts), else the collection's when the call starts; a commit that
    finds it dropped (or made again) stops with `CollectionDroppedError`, never making a new
    collection of the rest.
    A folder's links are followed only to files in it, unless `follow_links`
    (`readers.walk_folder`).
    `embed_with` embeds the batches instead of `in_order` with `encode` (`ingest_ray` passes
    `ray_ingest.OnRay`); everything else, a sync's removal and undo too, is this function's.
    A sync holds the collection from its look at the stored ids to its last commit (and
    undo) against every other write that plans over its documents on this machine
    (`Collection.planning`: another sync, a chunked ingest, a delete by document); `wait`:
    seconds to wait for one at most (None: until it ends), said as it lasts with `progress`.
    """
    validate_options(batch_size, on_error)
    if encode is not None and embed_with is not None:
        raise ValueError("pass encode or embed_with, not both: embed_with does the encoding")
    embed_with = embed_with or functools.partial(in_order, encode=encode)
    pipeline = writing_pipeline(collection, pipeline)
    info = PipelineInfo.of(pipeline)
    upsert = upsert or sync
    created = created or creation(collection)
    planned_over = f"sync of {source_label(source)}"
    planning = collection.planning(planned_over, wait, progress) if sync else None
    with planning or contextlib.nullcontext():
        report, todo, found = prepare(
            source, collection, pipeline, on_error, upsert, prefix, sync, follow_links
        )
        planned = {**found, **(columns or {})}
        version = collection.version if collection.exists else None  # what a failed sync undoes to
        touched = set(report.gone)  # ids a sync wrote or removed: a failure puts them back
        ours: set[int] = set()  # the write tags of its rows: what it puts back (`undo`)
        steps = -(-len(todo) // batch_size) or int(bool(report.gone))  # a removal alone: one step
        with (
            progress_bar(
                bar_label(f"ingest {collection.name}", embed_with),
                len(todo),
                progress and bool(todo),
            ) as bar,
            collection.pinned(version if sync else None),  # what its undo reads, kept from a prune
        ):
            told = advance or (bar.advance if progress else None)
            embedded = _steps(todo, pipeline, batch_size, embed_with, told, bool(report.gone))
            step = 0
            try:
                with contextlib.closing(embedded):  # a Ray session ends before an undo starts
                    for step, (index, fused) in enumerate(embedded, 1):
                        chunk = [todo[i] for i in index]
                        touched.update(r.id for r in chunk)
                        created = commit(
                            collection,
                            info,
                            chunk,
                            fused,
                            upsert,
                            report,
                            planned,
                            report.gone if step == steps else (),  # a sync's removal: the last
                            created,
                            ours,
                        )
                        if on_commit is not None:
                            on_commit(report.added + report.updated)
                if report.gone and step < steps:  # an embedding that merged batches: remove now
                    gone = report.gone
                    commit(collection, info, [], None, upsert, report, planned, gone, created, ours)
            except CollectionDroppedError as exc:  # nothing of this write is there to undo
                raise exc.during(report.added + report.updated, len(todo)) from None
            except Exception as exc:
                if sync:
                    undo(collection, version, touched, exc, report.problems, ours)
                raise
    finish(collection, pipeline)
    return report


def _steps(
    todo: Sequence[Record],
    pipeline: Pipeline,
    batch_size: int,
    embed_with: Embedding,
    told: Callable[[int], None] | None,
    removes: bool,
) -> Generator[tuple[np.ndarray, Fused | None], None, None]:
    """Each commit's records (positions in `todo`) and their Gaussians, in the order
    `embed_with` gives the batches; a sync that writes nothing removes in one step of none.
    Closed, it closes the embedding (`yield from`): a Ray session ends then, not later."""
    if todo:
        yield from embed_with([r.text for r in todo], pipeline, batch_size, advance=told)
    elif removes:
        yield np.arange(0), None


def _encoded(
    texts: list[str],
    pipeline: Pipeline,
    encode: Callable[[list[str]], Fused] | None,
    told: Callable[[int], None] | None,
) -> Fused:
    """A batch's texts fused, telling the bar (if any) as they are."""
    if encode is None:  # the bar moves as the members encode pieces of the batch
        return pipeline.encode(texts, advance=told)
    fused = encode(texts)
    if told is not None:
        told(len(texts))
    return fused


def creation(collection: Collection) -> str | None:
    """The collection's creation token, None when it is not there: what a write's later
    commits expect to find (`Collection.add`'s `created`)."""
    return collection.created if collection.exists else None


def writing_pipeline(
    collection: Collection, pipeline: Pipeline | str | os.PathLike | None
) -> Pipeline:
    """The pipeline a write or a delete works with: the one given, else the collection's own
    (one front door: who has a collection need not pass its pipeline again). One given is
    refused, before anything is read, unless it makes the collection's vectors with the
    settings its kept copy has (`Collection.check_settings`)."""
    from probembed.pipeline import as_pipeline

    if pipeline is not None:
        resolved = as_pipeline(pipeline)
        collection.check_pipeline(PipelineInfo.of(resolved))  # before anything is written
        collection.check_settings(resolved)
        return resolved
    if not collection.exists:
        raise StoreError(
            f"collection {collection.name!r} in {collection.db.path} holds nothing yet: pass "
            "the pipeline to write it with (a Pipeline, a built-in name such as 'retrieval', "
            "or a saved directory)"
        )
    return collection.load_pipeline()


def prepare(
    source: str | Path | Iterable[Record | Problem | Mapping[str, Any]],
    collection: Collection,
    pipeline: Any,
    on_error: OnError,
    upsert: bool,
    prefix: str = "",
    sync: bool = False,
    follow_links: bool = False,
) -> tuple[IngestReport, list[Record], dict[str, pa.DataType]]:
    """Everything before the first commit: read and check all input, decide what a `sync`
    removes (the report's `gone`, or the refusal), keep the pipeline copy.

    Returns the report so far, the records still to write (those whose ids are not stored
    yet, and with `upsert` also those stored with another text or metadata: a re-run of an
    unchanged corpus writes nothing) and the column types the check found (`Checked.columns`),
    which every commit of the write takes. Shared by local and Ray ingest, so both refuse the
    same. Every id read is put under `prefix`, composed (`readers.composed`); a folder's
    links are read as `follow_links` says, and the collection's database left out when it
    is in the folder (`readers.walk_folder`).
    """
    info = PipelineInfo.of(pipeline)
    collection.db.require_writable()
    collection.check_pipeline(info)
    label = source_label(source)
    prefix = composed(prefix)  # as file names are: one spelling in every id
    # a database in the folder it ingests holds no documents (items given: no folder)
    own = collection.db.own_folders() if isinstance(source, (str, Path)) else []
    records, problems, columns = read_checked(
        source, collection, on_error, prefix, follow_links=follow_links, own=own
    )
    refuse_mixing(collection, [r.metadata for r in records])  # before anything is kept
    named = [p.doc_id for p in problems if p.doc_id is not None]
    report = IngestReport(label, problems=kept_stored(problems, collection.existing(named)))
    report.repeats = repeated((r.id, r.text) for r in records)
    if sync:  # refused before anything is written, the pipeline copy too
        report.gone, report.sync_withheld = sync_removals(
            collection, source, records, problems, prefix
        )
    collection.record_pipeline(pipeline)
    if isinstance(source, (str, Path)):
        report.unread = unread_files(source, TEXT_SUFFIXES, follow_links, own=own)
        report.removed_links = removed_links(report.gone, report.unread.linked, prefix)
    report.recomposed = recomposed(report.gone, {r.id for r in records})
    as_given = stored_as_given(collection, records)
    if upsert:
        todo = [r for r in records if not as_given.get(r.id, False)]
        report.unchanged = len(records) - len(todo)
    else:
        todo = [r for r in records if r.id not in as_given]
        report.already_stored = len(records) - len(todo)
        report.changed = [r.id for r in records if as_given.get(r.id) is False]
    return report, todo, columns


def source_label(source: Any) -> str:
    """How a write names its input to a person: the path, else "records"."""
    return str(source) if isinstance(source, (str, Path)) else "records"


def kept_stored(problems: Sequence[Problem], stored: Container[str]) -> list[Problem]:
    """The problems, each of a document that is stored saying that its stored version stays
    (a sync removes it not): a report said only "skipped" of a file there but unreadable."""
    return [
        replace(p, message=f"{p.message} (kept the stored version)") if p.doc_id in stored else p
        for p in problems
    ]


def sync_removals(
    collection: Collection,
    source: Any,
    records: Sequence[Record],
    problems: Sequence[Problem],
    prefix: str = "",
) -> tuple[list[str], int]:
    """What a sync of these records removes: the stored ids under `prefix` they do not hold
    (a bad item that names its record keeps it), and the bad items that name none, any of
    which may be a stored record still there: then nothing is removed. Refused as chunked
    ingest refuses (`refuse_sync`): a sync that keeps none, and one file given alone."""
    refuse_mixing(collection, chunks=False)
    unplaced = sum(p.doc_id is None for p in problems)
    if unplaced:
        return [], unplaced
    seen = {r.id for r in records} | {cast(str, p.doc_id) for p in problems}
    scope, gone = 0, []
    for batch in collection.batches([]):  # a batch of ids at a time, not every one at once
        under = [i for i in batch.column("id").to_pylist() if prefixed(i, prefix)]
        scope += len(under)
        gone += [i for i in under if i not in seen]
    gone.sort()
    path = Path(source) if isinstance(source, (str, Path)) else None
    alone = path is not None and path.is_file() and path.suffix.lower() in TEXT_SUFFIXES
    folder = path is not None and path.is_dir()
    again = set(recomposed(gone, seen))  # stored again under their composed ids, not removed
    removed = [i for i in gone if i not in again]
    refuse_sync(collection, removed, scope, prefix, alone=alone, folder=folder, noun="record")
    return gone, 0


def refuse_sync(
    collection: Collection,
    gone: Sequence[str],
    scope: int,
    prefix: str,
    *,
    alone: bool = False,
    folder: bool = False,
    noun: str = "document",
    emptied: int = 0,
) -> None:
    """Refuse a sync that would remove all `scope` stored documents under `prefix` and keep
    none (its input names none of them: an empty file, a subfolder, a typo in a path; or its
    files hold no text any more, `emptied` of `gone`: a cloud drive's placeholders, a tool
    that truncated them), or, given one file (`alone`), every other one: "sync the file I
    changed" emptied the collection but for it. `folder`: the input is a folder, whose ids
    the refusal explains."""
    if gone and len(gone) == scope:
        why, own = "", ""
        if emptied:
            why = (
                f" ({emptied} of them are files with no text in them now: placeholders not "
                "yet downloaded, or files a tool truncated?)"
            )
        elif folder:
            why = (
                " (a folder's document ids are paths relative to the folder given, so a "
                "subfolder or a parent names them otherwise; a folder holding a corpus.jsonl "
                "is read by that corpus alone)"
            )
            own = "" if prefix else ", or sync this folder under a prefix of its own"
        under = f" under prefix {prefix!r}" if prefix else ""
        raise StoreError(
            f"sync would remove all {scope} {noun}(s){under} of collection "
            f"{collection.name!r} and keep none: the input "
            f"{'holds text for' if emptied else 'names'} none of them{why}. "
            f"Leave out sync, or use another collection{own}, or delete the stored "
            f"{noun}s first"
        )
    if gone and alone:
        raise StoreError(
            f"sync with one file would remove the {len(gone)} other {noun}(s) of "
            f"collection {collection.name!r} (e.g. {gone[0]!r}): a sync makes the "
            "collection hold what its input holds. Ingest the file without sync, or sync "
            "the folder it is in"
        )


def undo(
    collection: Collection,
    start: int | None,
    touched: set[str],
    stop: Exception,
    problems: Sequence[Problem],
    ours: set[int] | None = None,
) -> None:
    """Put what a stopped run wrote back as it was at `start` (`Collection.revert`: rows
    another writer wrote since, told from the run's by its write tags `ours` when given, stay
    theirs), and keep the other documents' problems it had met, which its report would have
    listed: as a note of what stopped the run (PEP 678, its class and message as they were: a
    service answers by the class), or, when the undo meets another writer's commit, in an
    `UndoConflictError` naming what stopped the run once; an undo that fails otherwise (a
    full disk) raises what stopped the run, noted with that and what the run left
    (`undo.undoing`); a full disk's is a `StorageFullError` saying what to do
    (`errors.disk_refusals`). A step whose own put-back met a conflict (an upsert's
    removal: `_removed`) stopped the run with an `UndoConflictError`:
    what stopped that step is then what stopped the run, whose undo puts the step back too;
    done, that is raised, not a conflict saying the batches are still stored. A run whose
    collection was dropped under it has nothing to undo: a collection of the name there now
    is another one."""
    stopped = stop.stopped_by if isinstance(stop, UndoConflictError) else stop
    try:
        if not isinstance(stopped, CollectionDroppedError):
            collection.revert(start, touched, stopped_by=stopped, ours=ours)
    except UndoConflictError as undone:
        raise UndoConflictError(stopped, undone.conflict, problems) from undone.conflict
    finally:  # an undo that failed otherwise raises `stopped`, noted with its failure
        if problems:
            stopped.add_note(skipped(problems))
    if stopped is not stop:
        raise stopped from None  # undone whole: the step's conflict no longer holds


def read_checked(
    source: str | Path | Iterable[Record | Problem | Mapping[str, Any]],
    collection: Collection | None,
    on_error: OnError,
    prefix: str = "",
    clashes: Clashes | None = None,
    follow_links: bool = False,
    own: OwnFolders = (),
) -> Checked:
    """The whole input read, its ids put under `prefix` (composed, as `prepare` puts them),
    and checked against the collection's metadata columns (None: against none): this needs
    no model, so a caller can refuse bad input before it loads one. Under on_error="stop"
    any problem raises `IngestError`. Given `clashes`, a metadata type clash keeps the field
    out of the columns and names it there, not a problem (`promote_metadata`).
    `follow_links`, `own`: `read_records`'s."""
    if isinstance(source, (str, Path)):
        read = read_records(source, follow_links, own)
    else:
        read = _given(source)
    items = [under_prefix(item, composed(prefix)) for item in read]
    checked = check_records(items, columns_to_check(collection, items), clashes)
    if checked.problems and on_error == "stop":
        raise IngestError(checked.problems)
    return checked


def _given(items: Iterable[Record | Problem | Mapping[str, Any]]) -> Iterator[Record | Problem]:
    """Items given in Python: Records as they are (a problem names one by its id, or by its
    own source), a dict read as a JSON line is once its numpy and date values are made plain
    (a pandas row's) and named `records[i]`, anything else a problem naming what it is."""
    if isinstance(items, Mapping):
        raise TypeError("ingest takes a path or a list of records or dicts, got one dict")
    for i, item in enumerate(items):
        if isinstance(item, (Record, Problem)):
            yield item
        elif isinstance(item, Mapping):
            yield record_from(plain(item), f"records[{i}]")
        else:
            yield Problem(
                f"records[{i}]",
                f"expected a Record or a dict with 'id' and 'text', got {type(item).__name__}",
            )


def stored_as_given(collection: Collection, records: Sequence[Record]) -> dict[str, bool]:
    """For each of these records whose id is stored, whether it is stored with the very text
    and metadata given (as a write stores metadata: `metadata_json`), by id; ids not stored
    are left out. An upsert leaves the same ones alone (writing the same row again, the
    pipeline being the collection's, would leave a dead row in every searcher's snapshot and
    make each graph grow); a write without upsert names the others, which it left as stored.

    Only these records' rows are read, never the rest of a collection: up to FILTERED_IDS by
    one `id IN (...)` read, more by one read of every stored id (`Collection.located`) and
    takes of their id, text and metadata by row id, TAKEN_ROWS at a time."""
    given = {r.id: r for r in records}
    if not given:
        return {}
    if len(given) <= FILTERED_IDS:
        batches: Iterable[pa.RecordBatch | pa.Table] = collection.batches(
            ["text", "metadata"], list(given)
        )
    else:
        version, located = collection.located(list(given))
        rows = list(located.values())
        batches = (
            collection.take(rows[start : start + TAKEN_ROWS], _COMPARED, version)
            for start in range(0, len(rows), TAKEN_ROWS)
        )
    found: dict[str, bool] = {}
    for batch in batches:
        columns = (batch.column(name).to_pylist() for name in _COMPARED)
        for doc_id, text, metadata in zip(*columns, strict=True):
            record = given[doc_id]
            found[doc_id] = text == record.text and metadata == metadata_json(
                doc_id, record.metadata
            )
    return found


#: The columns `stored_as_given` compares.
_COMPARED = ("id", "text", "metadata")


#: Documents `cut_documents` reads: enough to say how common long ones are, at little cost.
CUT_SAMPLE = 2_000


def cut_documents(source: str | Path, pipeline: Any, follow_links: bool = False) -> tuple[int, int]:
    """(documents some member reads only the start of, documents looked at): the first
    CUT_SAMPLE of the source, read as the ingest read it (`follow_links`), so a plain ingest
    can say how much of a corpus it cuts short. Records ingest refuses (a blank text, a lone
    surrogate) are not looked at: it skipped them."""
    texts = [
        item.text
        for item in itertools.islice(read_records(source, follow_links), CUT_SAMPLE)
        if isinstance(item, Record) and _check(item, {}, {}, ()) is None
    ]
    return (int(pipeline.cut(texts).sum()), len(texts)) if texts else (0, 0)


def commit(
    collection: Collection,
    info: PipelineInfo,
    chunk: Sequence[Record],
    fused: Fused | None,
    upsert: bool,
    report: IngestReport,
    columns: Mapping[str, pa.DataType] | None = None,
    remove: Sequence[str] = (),
    created: str | None = None,
    ours: set[int] | None = None,
) -> str | None:
    """Store one embedded chunk in one commit and count it in the report. An id another
    writer stored since it was read counts as already stored (it was embedded unlocked), and
    as changed when that writer stored another text or metadata.
    `columns`: what the whole write decided (`Checked.columns`), when it takes commits.
    `remove` (with `upsert`: a sync's `gone`) is deleted with it (`Collection.upsert`: a
    commit more per `IDS_PER_CONDITION` ids, put back with the chunk if one fails), so a
    sync's removal never lands without its last write; with no chunk (`fused` None) it is
    the whole write.
    `created`: the creation token the write's earlier commits found (None: none yet), which
    this one must find (`CollectionDroppedError`); returns the token the write holds now.
    `ours` is given the write tag of an upsert's rows (`Batch.tag`): what its undo takes
    for its own."""
    if fused is None:
        report.removed += collection.delete_stored(remove, created) if remove else 0
        return created
    texts, metadata = [r.text for r in chunk], [r.metadata for r in chunk]
    batch = Batch([r.id for r in chunk], texts, metadata, fused, info, columns or {})
    if upsert:
        if ours is not None:  # before the commit: an undo of it takes its rows for its own
            ours.add(batch.tag)
        inserted, updated, removed = collection.upsert(batch, remove, created)
        report.removed += removed
    else:
        inserted, updated = collection.add(batch, skip_stored=True, created=created), 0
        report.already_stored += len(chunk) - inserted
        if inserted < len(chunk):  # the rows this write stored are as given
            as_given = stored_as_given(collection, chunk)
            report.changed += [r.id for r in chunk if as_given.get(r.id) is False]
    report.added += inserted
    report.updated += updated
    return created or collection.created  # the table its first commit made


def finish(
    collection: Collection,
    pipeline: Pipeline | str | os.PathLike | Callable[[], Pipeline] | None,
    compact: bool = True,
) -> None:
    """After the last commit (of a write or a delete): compact when fragments piled up,
    measure agreement again when enough rows changed. Also when this run wrote nothing: a run
    killed after its last commit left them undone, and its re-run finds every id stored.
    `pipeline` may be a function giving it, called only when a measurement is due: a delete
    needs no model, and its caller (the service) loads the collection's in its own way."""
    if not collection.exists:
        return
    if compact and collection.compaction_due():
        collection.optimize()
    if collection.agreement_due():
        given = pipeline() if callable(pipeline) else pipeline
        collection.record_agreement(writing_pipeline(collection, given))


class _NotLoaded(Exception):
    """The pipeline a delete's `finish` asked for did not load (its cause says why)."""


def finish_delete(collection: Collection, load: Callable[[], Pipeline]) -> BaseException | None:
    """The end of a delete (`finish`), which needs no model: `load` gives the collection's
    pipeline only once the members' agreement is due, and where it fails (with anything but
    a storage failure: a custom encoder may raise anything) the delete stands and the
    agreement stays due (`agreement_due` reads what changed since the last measurement) for
    the next write or delete that loads it; a large delete answered 500 (the service) or
    failed (the CLI) after its rows were gone. Returns the load's failure, else None."""

    def loaded() -> Pipeline:
        try:
            return load()
        except StorageUnavailableError:
            raise
        except Exception as exc:
            raise _NotLoaded from exc

    try:
        finish(collection, loaded)
    except _NotLoaded as unloaded:
        return unloaded.__cause__
    return None


def remove(
    collection: Collection,
    ids: Sequence[str],
    pipeline: Pipeline | str | os.PathLike | None = None,
) -> int:
    """Delete these ids in one commit, then what the end of a write does (`finish`): once
    enough of the corpus went, the models' agreement is measured again (with `pipeline`,
    else the collection's own, loaded only then). How many were there."""
    if pipeline is not None:  # a wrong one is refused before the rows go
        pipeline = writing_pipeline(collection, pipeline)
    removed = collection.delete(ids)
    if removed:
        finish(collection, pipeline)
    return removed


def columns_to_check(
    collection: Collection | None, items: Sequence[Record | Problem]
) -> dict[str, pa.DataType]:
    """What `check_records` checks these items against: the collection's columns, and the
    fields its rows keep in the JSON only (`Collection.column_types`)."""
    if collection is None:
        return {}
    return collection.column_types(i.metadata for i in items if isinstance(i, Record))


class Checked(NamedTuple):
    """Input split by `check_records`, with the column types its metadata checked against."""

    records: list[Record]
    problems: list[Problem]
    #: The type of every metadata field over the whole input from the collection's columns
    #: on: a write's first commit makes each column, and a field whose early rows hold whole
    #: numbers and later ones fractions must be made a float column then (a stored column
    #: cannot widen, and a later commit would fail).
    columns: dict[str, pa.DataType]


def check_records(
    items: Iterable[Record | Problem],
    columns: dict[str, pa.DataType],
    clashes: Clashes | None = None,
) -> Checked:
    """Split input into good records and problems: duplicates, empty texts, type clashes
    (given `clashes`, a field that clashes is kept out of the columns: `promote_metadata`)."""
    records: list[Record] = []
    problems: list[Problem] = []
    first_seen: dict[str, str] = {}
    types = dict(columns)
    for item in items:
        problem = (
            item if isinstance(item, Problem) else _check(item, first_seen, types, columns, clashes)
        )
        if problem is None:
            record = cast(Record, item)  # no Problem: a Problem is its own problem
            first_seen[record.id] = record.source
            records.append(record)
        else:
            problems.append(problem)
    return Checked(records, problems, types)


def _check(
    record: Record,
    first_seen: dict[str, str],
    types: dict[str, Any],
    stored: Container[str],
    clashes: Clashes | None = None,
) -> Problem | None:
    """The problem with one record, or None; one with a usable id names its record, which a
    sync then keeps (`sync_removals`)."""
    where = record.source or f"id {record.id!r}"
    unusable = unusable_id(record.id)
    if unusable is not None:  # refused here, not mid-write
        return Problem(where, unusable)
    problem = _record_problem(record, where, first_seen, types, stored, clashes)
    return None if problem is None else replace(problem, doc_id=record.id)


def _record_problem(
    record: Record,
    where: str,
    first_seen: dict[str, str],
    types: dict[str, Any],
    stored: Container[str],
    clashes: Clashes | None,
) -> Problem | None:
    """`_check`'s look at a record whose id is usable."""
    if not isinstance(record.text, str) or is_blank(record.text):
        return Problem(where, no_text(record.id))
    if record.id in first_seen:
        first = first_seen[record.id]
        said = f"first at {first}" if first else "given twice"
        return Problem(where, f"duplicate id {record.id!r} ({said})")
    if nests_too_deep(record.metadata):  # before anything that walks it recursively
        return Problem(
            where,
            f"document {record.id!r}: metadata nests lists or objects more than "
            f"{MAX_METADATA_DEPTH} levels deep",
        )
    unencodable = not_unicode(record.id, record.text, record.metadata)
    if unencodable is not None:
        return Problem(where, f"document {record.id!r}: {unencodable}")
    keys = [key for key in record.metadata if not isinstance(key, str)]
    if keys:  # JSON would store 1 as "1" without a word
        return Problem(
            where, f"document {record.id!r}: metadata keys must be strings, got {keys[0]!r}"
        )
    reserved = reserved_key(record.metadata)
    if reserved is not None:
        return Problem(where, f"document {record.id!r}: {reserved}")
    trial = dict(types)
    try:
        metadata_json(record.id, record.metadata)  # stored as JSON: refuse what JSON cannot hold
        promote_metadata(record.id, record.metadata, trial, stored, clashes)
    except StoreError as exc:
        return Problem(where, str(exc))
    types.update(trial)
    return None


def validate_options(batch_size: int, on_error: str) -> None:
    """Reject a non-positive batch size or an unknown error policy."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
