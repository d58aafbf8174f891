"""Erasure: items taken out of a collection so that nothing of them is left on its disk.

A delete (`Collection.delete`) is LanceDB's: a deletion file over rows whose text and vectors
stay in their data file until a compaction rewrites that fragment (LanceDB's rewrites one only
once a tenth of its rows are deleted), in every older version until a prune (an undo reads
them back), in the full-text index until it is built again, in the search graphs saved beside
the table and in the embedding cache; and its transaction and manifest name what it deleted
(`id IN (...)`). `Collection.erase` (`CollectionErasure`) takes all of that out in one
operation, under the collection's plan and write locks, of items still there and of items
deleted before, read from the older versions that still show them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from probembed.cache import EmbeddingCache
from probembed.progress import progress_bar
from probembed.store import shared_writes
from probembed.store.errors import ErasureHeldError, StoreError, StoreStateError
from probembed.store.filters import filtered, id_conditions, id_list
from probembed.store.graph_cache import removed_graphs
from probembed.store.handle import scan
from probembed.store.pins import RUNNING, SAID, UNKNOWN, Tag, removed, tags_of
from probembed.store.readers import spelled_alike
from probembed.store.reads import REBUILT_KINDS, built
from probembed.store.rows import ERASURE_MARK
from probembed.store.threads import one_at_a_time
from probembed.store.undo import rows_of
from probembed.store.upkeep import CollectionUpkeep
from probembed.store.writes import CollectionWrites, refuse_every_item

#: What an erasure reads of the rows it erases: the id, the text (whose cache entries it
#: evicts) and where the row is stored (`_rowaddr`: its fragment in the high 32 bits, whether
#: or not the table has stable row ids, which would make `_rowid` a number of its own).
FOUND = ["id", "text", "_rowaddr"]
#: The pins an erasure will not drop unless forced: of a write that may still run.
LIVE = (RUNNING, UNKNOWN)
#: Rows one merge of `_rewritten` writes again at most: a merge holds its source in memory
#: and its time grows faster than its size (hand runs into a 100,000-row table of 384
#: dimensions, not a benchmark: 10,000 rows a merge cost little memory, 100,000 several
#: hundred MB), and a compacted fragment holds up to a million.
REWRITE_ROWS = 10_000
#: The steps an erasure's progress counts: read the rows, evict their cache entries, rewrite
#: their fragments, build the indices again, remove the older versions and the graphs.
STEPS = 5


@dataclass(frozen=True)
class Selection:
    """What an erasure takes out: these ids, every chunk of these documents, or every row a
    filter keeps (one of the three)."""

    ids: tuple[str, ...] | None = None
    documents: tuple[str, ...] | None = None
    where: str | None = None

    @property
    def what(self) -> str:
        """The erasure as a writer waiting for it names it."""
        if self.ids is not None:
            return f"erasure of {len(self.ids)} id(s)"
        if self.documents is not None:
            return f"erasure of {len(self.documents)} document(s)"
        return "erasure of the rows a filter keeps"


def selection(
    ids: Sequence[str] | None, documents: Sequence[str] | None, where: str | None
) -> Selection:
    """The one selector given, checked: each a list of strings, a filter a non-empty string."""
    given = {"ids": ids, "documents": documents, "where": where}
    named = [name for name, value in given.items() if value is not None]
    if len(named) != 1:
        said = ", ".join(named) if named else "none"
        raise StoreError(f"erase takes one of ids, documents or where; given: {said}")
    if where is not None:
        if not isinstance(where, str) or not where.strip():
            raise StoreError(f"where must be a filter (an SQL condition), not {where!r}")
        return Selection(where=where)
    name = named[0]
    listed = tuple(id_list(given[name] or (), name))
    return Selection(ids=listed) if name == "ids" else Selection(documents=listed)


@dataclass(frozen=True)
class Erasure:
    """What `Collection.erase` did, for the CLI, the service and an auditor's record."""

    collection: str
    #: Items erased (a document's chunks, each), those deleted before among them.
    erased: int
    #: Of `erased`, the items no longer in the collection's latest version (deleted before):
    #: found in older versions, their rows still in a data file under a deletion file or in
    #: an older version's files.
    erased_deleted: int
    #: The ids or documents given that the collection did not hold (none for a filter).
    not_found: tuple[str, ...]
    #: Fragments that held an erased row, rewritten without it, and the other rows they held,
    #: written again unchanged.
    fragments_rewritten: int
    rows_rewritten: int
    #: The indices built again from the rows left (the full-text index, scalar ones).
    indices_rebuilt: tuple[str, ...]
    #: Older versions removed (an undo could have put the rows back from any of them).
    versions_removed: int
    #: Tags dropped: each held a version from a prune (a stale or forced pin, one's own).
    tags_dropped: tuple[str, ...]
    #: Files of search graphs saved beside the collection, removed.
    graphs_removed: int
    #: Entries of the erased texts evicted from the embedding cache (one per model).
    cache_entries_evicted: int
    bytes_freed: int
    #: The version left, the only one; where nothing was erased (`unchanged`), the latest,
    #: every older one kept.
    version: int

    @property
    def live(self) -> int:
        """Items erased that the latest version held: what changes what a search answers."""
        return self.erased - self.erased_deleted

    @property
    def unchanged(self) -> bool:
        """Nothing given was in any version kept, so nothing was committed or removed but the
        saved graphs (every erasure that commits removes at least the version it began from)."""
        return not self.erased and not self.versions_removed

    def to_json(self) -> dict[str, Any]:
        """As `--json` and the service give it."""
        return asdict(self)

    def __str__(self) -> str:
        if self.unchanged:
            return self._said_unchanged()
        said = (
            f"{self.collection}: erased {self.erased} item(s)"
            f"{f' ({self.erased_deleted} deleted before)' if self.erased_deleted else ''}: "
            f"{self.fragments_rewritten} "
            f"fragment(s) rewritten without them ({self.rows_rewritten} other item(s) written "
            f"again unchanged), {self.versions_removed} older version(s) removed (no undo can "
            f"bring them back), {self.graphs_removed} saved graph file(s) removed, "
            f"{self.cache_entries_evicted} embedding cache entr(ies) evicted, "
            f"{self.bytes_freed:,} bytes freed"
        )
        if self.indices_rebuilt:
            said += f"; index(es) built again: {', '.join(self.indices_rebuilt)}"
        if self.tags_dropped:
            said += f"; tag(s) dropped: {', '.join(self.tags_dropped)}"
        if self.not_found:
            said += f"; {len(self.not_found)} given were not there: {self._named()}"
        return said

    def _said_unchanged(self) -> str:
        """What an erasure that found nothing says: that the undo history is still there."""
        said = f"{self.collection}: nothing erased: none of the {len(self.not_found)} given "
        said += f"is in any version kept ({self._named()})" if self.not_found else "was found"
        said += "; nothing changed (no commit, every older version and tag kept: undo works)"
        if self.graphs_removed:
            said += f"; {self.graphs_removed} saved graph file(s) removed (searches build them)"
        return said

    def _named(self) -> str:
        """The ids or documents not found, the first five of them."""
        more = ", ..." if len(self.not_found) > 5 else ""
        return ", ".join(map(repr, self.not_found[:5])) + more


def _in_fragments(fragments: Sequence[int]) -> str:
    """The filter keeping the rows of these fragments (a `_rowaddr`'s high 32 bits)."""
    return f"(_rowaddr >> 32) IN ({', '.join(map(str, fragments))})"


def _held(table: Any, fragments: Sequence[int]) -> list[int]:
    """Those of these fragments the table holds: an earlier row's may since have been
    compacted into another or wholly deleted, its data file left to older versions."""
    if not fragments:
        return []
    addresses = scan(table, ["_rowaddr"], _in_fragments(fragments)).column("_rowaddr")
    return sorted(set(pc.shift_right(addresses, 32).to_pylist()))


def _live_ids(table: Any, rows: pa.Table) -> set[str]:
    """Those of these rows' ids the table's latest version holds."""
    ids = sorted(set(rows.column("id").to_pylist()))
    return set(rows_of(table, ["id"], ids).column("id").to_pylist())


def _not_others(rows: pa.Table, found: pa.Table, live: set[str]) -> pa.Table:
    """Older versions' rows but those of another item the latest version holds (an id of
    another spelling, or a chunk id now of another document): a live item is erased only when
    chosen (`found`), its earlier rows with it."""
    chosen = set(found.column("id").to_pylist())
    keep = [
        i for i, id_ in enumerate(rows.column("id").to_pylist()) if id_ in chosen or id_ not in live
    ]
    return rows.take(pa.array(keep, pa.int64()))


def _once_per_row(rows: pa.Table, not_at: pa.Array) -> pa.Table:
    """These rows once per address (`_rowaddr`: older versions show one row many times), but
    those at `not_at` (the latest version's found rows)."""
    seen = set(not_at.to_pylist())
    keep = []
    for at, address in enumerate(rows.column("_rowaddr").to_pylist()):
        if address not in seen:
            seen.add(address)
            keep.append(at)
    return rows.take(pa.array(keep, pa.int64()))


def _others(
    table: Any, schema: pa.Schema, fragments: Sequence[int], addresses: pa.Array
) -> Iterator[pa.Table]:
    """The rows of these fragments but those at `addresses` (the found ones), in `schema`,
    `REWRITE_ROWS` at a time: a merge holds its source whole."""
    held = _in_fragments(fragments)
    rows = table.search().select([*schema.names, "_rowaddr"]).where(held).limit(None)
    part: list[pa.RecordBatch] = []
    for batch in rows.to_batches():
        kept = batch.filter(pc.invert(pc.is_in(batch.column("_rowaddr"), addresses)))
        part.append(
            pa.RecordBatch.from_arrays([kept.column(n) for n in schema.names], schema=schema)
        )
        if sum(b.num_rows for b in part) >= REWRITE_ROWS:
            yield pa.Table.from_batches(part, schema)
            part = []
    if sum(b.num_rows for b in part):
        yield pa.Table.from_batches(part, schema)


def _held_pins(tags: Sequence[Tag], name: str) -> ErasureHeldError:
    """The refusal of an erasure while pins of writes that may still run hold versions."""
    held = "; ".join(f"{t.name} (version {t.version}: {SAID[t.state]})" for t in tags)
    return ErasureHeldError(
        f"collection {name!r} has {len(tags)} pin(s) of a write that may still run, each "
        f"holding a version the erasure must remove: {held}. Nothing was erased: wait for "
        "that write to end (it removes its pin), or erase with force (`probembed erase "
        "--force`, `force=True`) once you know it no longer runs: its undo is then lost"
    )


def _rebuilt(table: Any, name: str) -> list[Any]:
    """The table's indices, each of a kind an erasure builds again (`REBUILT_KINDS`); any
    other (a vector index of one's own) is refused before anything is erased: it holds the
    erased rows too, and cannot be built again as it was."""
    indices = list(table.list_indices())
    other = [f"{ix.name} ({ix.index_type})" for ix in indices if ix.index_type not in REBUILT_KINDS]
    if other:
        raise StoreError(
            f"collection {name!r} has index(es) erase cannot build again as they were: "
            f"{', '.join(other)}; they hold the rows to erase too. Drop them (LanceDB's "
            "Table.drop_index), erase, then build them again. Nothing was erased"
        )
    return indices


class CollectionErasure(CollectionWrites, CollectionUpkeep):
    """A collection's erasure: rows taken out so that no file of it holds them any more."""

    def erase(
        self,
        ids: Sequence[str] | None = None,
        *,
        documents: Sequence[str] | None = None,
        where: str | None = None,
        force: bool = False,
        wait: float | None = None,
        progress: bool = False,
        cache: EmbeddingCache | None = None,
        allow_all: bool = False,
    ) -> Erasure:
        """Erase these ids (each found as given, else by its composed or decomposed
        spelling), every chunk of these `documents`, or every row a `where` filter keeps (the
        filters `search` takes; one that keeps every item is refused unless `allow_all`, as
        `delete` refuses it), so that nothing of them is left in the collection's files.
        Ids and documents reach items deleted before too, and an upsert's earlier rows: read
        from the older versions (`_deleted`; a filter reads the latest version only), erased
        as the rest and counted in `Erasure.erased_deleted`; one no version left shows (all
        pruned since its delete) cannot be read, and is `not_found`:

        - their texts' entries are evicted from the embedding cache (`cache`, None: the
          default one, $PROBEMBED_CACHE_DIR; and the cache of a pipeline this handle holds),
          every model's, and the cache file rewritten without them (`EmbeddingCache.forget`);
        - every other row of the fragments that hold them is written again unchanged, then
          the rows are deleted, so those fragments leave the table (`_rewritten`: each commit
          whole), and an erasure mark committed (`_marked`);
        - its indices are built again from the rows left (`REBUILT_KINDS`; another kind is
          refused before anything is erased);
        - every tag is dropped and every older version removed (`compact` with no
          retention), so no undo can bring the rows back and no transaction or manifest
          left names them; a pin of a write that may still run refuses the erasure
          (`ErasureHeldError`, before anything is erased) unless `force`;
        - the search graphs saved beside the collection, all built before, are removed, and
          this handle's searcher closed (its snapshot files held the rows).

        Ids or documents of which no version kept shows a row change nothing (`_nothing_found`,
        `Erasure.unchanged`): no commit, no tag dropped, no version removed, so a typo costs no
        undo; only the saved graphs are removed. A filter that keeps no row does the rest all
        the same (a commit, every tag dropped, every older version removed): it is read at the
        latest version only, so it cannot tell a filter that never kept a row from its own
        erasure stopped after the deletes, whose rows only the older versions hold.

        Under the collection's plan lock (waited for as `delete_documents` waits: `wait`,
        `progress`) and write lock. Stopped part-way, the rows are either still there or
        gone, and the same erasure run again completes it: stopped before the prune, ids and
        documents find the rows (those deleted in the older versions, `_deleted`), a filter
        those not yet deleted or none, and it does the rest; stopped after the prune, no
        version shows them, and the rerun removes the saved graphs that may still hold them.
        Another process's search snapshot (a service) holds the rows until it loads the
        collection afresh. What it did is an `Erasure`."""
        chosen = selection(ids, documents, where)
        self.db.require_writable()
        self._require()  # a missing collection is refused before its lock files are made
        with self.planning(chosen.what, wait, progress):
            done = self._erase(chosen, force, progress, cache, allow_all)
        self.close()
        return done

    def check_erasure(self, where: str | None = None, allow_all: bool = False) -> None:
        """Refuse what `erase` would refuse of a filter (a blank, bad or unknown-field one, one
        that keeps every item without `allow_all`) and a missing collection, reading only, so
        a command refuses them before it asks to confirm; ids are not looked at (an erasure
        reports those not there). The erasure checks all of it again under its locks."""
        table = self._require()
        if where is None:
            return
        selection(None, None, where)
        matched = self.count(where)  # the filter check a search's and a delete's go through
        refuse_every_item(where, self.name, matched, table.count_rows(), allow_all, "erase")

    @one_at_a_time
    def _erase(
        self,
        chosen: Selection,
        force: bool,
        progress: bool,
        cache: EmbeddingCache | None,
        allow_all: bool,
    ) -> Erasure:
        """`erase` once it holds the plan lock."""
        with self._writing(), progress_bar(f"erase {self.name}", STEPS, progress) as bar:
            table = self._require()
            tags = tags_of(table.tags.list(), self._pin_locks())
            live = [t for t in tags if t.state in LIVE]
            if live and not force:
                raise _held_pins(live, self.name)
            indices = _rebuilt(table, self.name)
            found, not_found = self._selected(table, chosen)
            everything = table.count_rows()
            if chosen.where is not None:
                refuse_every_item(
                    chosen.where, self.name, found.num_rows, everything, allow_all, "erase"
                )
            earlier, not_found = self._deleted(table, chosen, found, not_found)
            rows = pa.concat_tables([found, earlier])
            bar.advance(1)
            if chosen.where is None and not rows.num_rows:
                bar.advance(STEPS - 1)
                return self._nothing_found(table, not_found)
            evicted = self._evicted([t for t in rows.column("text").to_pylist() if t], cache)
            bar.advance(1)
            start = int(table.version)
            fragments, rewritten = self._rewritten(table, rows)
            bar.advance(1)
            for index in indices:
                built(table, index.columns[0], index.index_type, index.name)
            self._marked(table)
            bar.advance(1)
            for tag in tags:
                removed(table, self._pin_locks(), tag.name)
            compaction = self._compacted(timedelta(0))
            self._check_pruned(table, start)
            graphs = removed_graphs(self.db.location.own_dir(self.name))
            bar.advance(1)
        deleted = len(set(earlier.column("id").to_pylist()) - set(found.column("id").to_pylist()))
        return Erasure(
            self.name,
            found.num_rows + deleted,
            deleted,
            tuple(not_found),
            fragments,
            rewritten,
            tuple(ix.name for ix in indices),
            compaction.versions_removed,
            tuple(t.name for t in tags),
            graphs,
            evicted,
            compaction.bytes_freed,
            compaction.version,
        )

    def _nothing_found(self, table: Any, not_found: list[str]) -> Erasure:
        """An erasure of ids or documents no version kept shows: no commit, no tag dropped,
        no version removed (a typo must not cost the undo history); only the saved graphs
        are removed, which an erasure stopped after its prune leaves holding the rows."""
        graphs = removed_graphs(self.db.location.own_dir(self.name))
        version = int(table.version)
        return Erasure(self.name, 0, 0, tuple(not_found), 0, 0, (), 0, (), graphs, 0, 0, version)

    def _selected(self, table: Any, chosen: Selection) -> tuple[pa.Table, list[str]]:
        """The rows to erase (`FOUND`), and the ids or documents given that the collection
        does not hold (a filter's none)."""
        if chosen.where is not None:
            where = chosen.where
            return filtered(lambda: scan(table, FOUND, where), where, self), []
        if chosen.documents is not None:
            found = self._documents_found(table, chosen.documents)
            spelt = sorted({s for s in found.values() if s is not None})
            rows = rows_of(table, FOUND, spelt, "doc_id")
            return rows, [d for d, s in found.items() if s is None]
        given = list(dict.fromkeys(chosen.ids or ()))
        respelled = self.respelled(given)
        wanted = {i: respelled.get(i, i) for i in given}
        rows = rows_of(table, FOUND, sorted(set(wanted.values())))
        stored = set(rows.column("id").to_pylist())
        return rows, [i for i, w in wanted.items() if w not in stored]

    def _deleted(
        self, table: Any, chosen: Selection, found: pa.Table, not_found: list[str]
    ) -> tuple[pa.Table, list[str]]:
        """The rows of the chosen ids or documents (in any spelling, `spelled_alike`) that
        older versions show and the latest does not (`FOUND`, once each): deleted before, or
        an upsert's earlier row, each still in a data file under a deletion file or in an
        older version's files; and those of `not_found` they name none of. A filter's none:
        it is read at the latest version only. Read (`_earlier`, every version kept) only where
        one is missing or the latest version hides rows under deletion files: an upsert's
        earlier row that only older versions hold goes with them, its cache entry kept."""
        column = "id" if chosen.ids is not None else "doc_id"
        given = chosen.ids if chosen.ids is not None else chosen.documents
        hidden = int(table.list_versions()[-1]["metadata"].get("total_deletion_file_rows", 1))
        if given is None or column not in table.schema.names or not (not_found or hidden):
            return found.slice(0, 0), not_found  # no row hidden, none missing: nothing to read
        spellings = sorted({s for each in given for s in spelled_alike(each)})
        rows = self._earlier(table, list(dict.fromkeys([*FOUND, column])), spellings, column)
        rows = _not_others(rows, found, _live_ids(table, rows))
        named = set(rows.column(column).to_pylist())
        left = [g for g in not_found if not named.intersection(spelled_alike(g))]
        earlier = _once_per_row(rows.select(FOUND), found.column("_rowaddr"))
        return earlier.cast(found.schema), left

    def _earlier(
        self, table: Any, columns: list[str], values: Sequence[str], column: str
    ) -> pa.Table:
        """These columns of the rows of these values of `column` in every version older than
        the table's (each checked out on a handle of its own), one version after another: a
        row shows in each version from its write to its delete, under one address. A version
        without `column` holds none of them: a collection made empty (`create`, the service's
        `POST /v1/collections`) has no `doc_id` until its first chunked write."""
        versions = sorted(int(v["version"]) for v in table.list_versions())
        parts = [rows_of(table, columns, [], column)]  # none: the columns' types
        older = self.db.table(self.name)
        for version in versions[: versions.index(int(table.version))]:
            older.checkout(version)
            if column in older.schema.names:
                parts.append(rows_of(older, columns, values, column))
        return pa.concat_tables(parts)

    def _evicted(self, texts: list[str], cache: EmbeddingCache | None) -> int:
        """Evict the erased texts from every cache of `_caches`, before anything is deleted
        (after it, nothing names them): how many entries. A cache that cannot be written or
        emptied of them stops the erasure here."""
        evicted = 0
        for each in self._caches(cache):
            try:
                evicted += each.forget(texts)
            except OSError as exc:
                raise StoreStateError(
                    f"{exc}; nothing was erased from collection {self.name!r}"
                ) from exc
        return evicted

    def _caches(self, cache: EmbeddingCache | None) -> list[EmbeddingCache]:
        """The embedding caches an erasure evicts from, once each: `cache` (None: the
        default one), and that of each pipeline this handle holds (a caller's own cache)."""
        held = [self._shares, None if self._pipeline is None else self._pipeline[0]]
        found = [cache or EmbeddingCache(), *(p.cache for p in held if p is not None)]
        caches: dict[str, EmbeddingCache] = {}
        for each in found:
            if each is not None:
                caches.setdefault(os.path.abspath(each.path), each)
        return list(caches.values())

    def _rewritten(self, table: Any, found: pa.Table) -> tuple[int, int]:
        """Write every other row of the fragments that hold the found rows again, unchanged
        (merges on id, each row updated with its own values: written to a new fragment, its
        old place deleted), then delete the found rows (`IDS_PER_CONDITION` ids a commit):
        each such fragment is then deleted whole and leaves the manifest, its data file going
        with the versions before (`_compacted`). A delete alone leaves the rows in their data
        file (LanceDB's compaction rewrites a fragment once a tenth of it is deleted, and a
        large one never). A found row deleted before is in no such merge or delete: its
        fragment, where the table still holds it (`_held`), leaves the manifest once its
        other rows are written again, and where not, only older versions hold it. Every
        commit is whole: stopped between them, every row is there once, each found one there
        (to erase again) or gone. The fragments rewritten and the rows written again."""
        ids = sorted(set(found.column("id").to_pylist()))
        if not ids:
            return 0, 0
        if self._shared:  # a schema commit before, once: the merge conflicts as upsert's do
            shared_writes.keyed(table)
        addresses = found.column("_rowaddr").combine_chunks()
        source = self.db.table(self.name)  # the rows as found, whatever is committed since
        source.checkout(int(table.version))
        fragments = _held(source, sorted({int(a) >> 32 for a in addresses.to_pylist()}))
        moved = 0
        for part in _others(source, table.schema, fragments, addresses) if fragments else ():
            merge = table.merge_insert("id").when_matched_update_all()
            moved += int(shared_writes.committed(partial(merge.execute, part)).num_updated_rows)
        for condition in id_conditions(ids):
            shared_writes.committed(partial(table.delete, condition))
        return len(fragments), moved

    def _marked(self, table: Any) -> None:
        """Commit a new erasure mark (`rows.ERASURE_MARK`): a searcher in any process loads
        the rows afresh at its next search (`Snapshot.refreshed`), and the latest version's
        transaction and manifest are this commit's, which name no row (a delete's name its
        `id IN (...)`; an erasure stopped after its deletes is run again to commit it)."""
        marked = {"path": "id", "metadata": {ERASURE_MARK: uuid.uuid4().hex}}
        shared_writes.committed(lambda: table.update_field_metadata(marked))

    def _check_pruned(self, table: Any, start: int) -> None:
        """Refuse to call an erasure done while a version from before it (`start`, the one it
        began from, and older) is left beside the latest: its files hold the rows."""
        versions = sorted(int(v["version"]) for v in table.list_versions())
        left = [v for v in versions[:-1] if v <= start]
        if left:
            raise StoreStateError(
                f"collection {self.name!r} still holds version(s) {left} from before the "
                "erasure, whose files hold the erased rows (another process tagged one "
                "meanwhile?); run the erasure again"
            )
