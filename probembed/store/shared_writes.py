"""Commits that keep one row per id when writers on other machines share the collection.

A collection's write lock (`Collection._writing`) is a file lock on this machine: on object
storage, two machines ingesting the same documents both found an id absent and both appended
it (300 documents became 380 rows, and a search showed one document twice). There every new
row is written by LanceDB's `merge_insert` on `id`, which inserts only the ids it does not
find, and the table declares `id` its unenforced primary key (`rows.PRIMARY_KEY`): only then
does Lance record the ids a commit inserted and, when a commit landed meanwhile that inserted
one of them, run the merge again on the newer version rather than commit a second copy
(without the key both commits succeed and the id is stored twice, as LanceDB's issue
lance-format/lance#4585 describes). Measured in docs/architecture.md: an insert-if-absent
merge costs 2-6 times the read-then-append, so a local collection, whose lock does hold
every writer, keeps the append.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa

from probembed.store.errors import StoreError, WriteConflictError
from probembed.store.rows import PRIMARY_KEY

T = TypeVar("T")
#: How Lance words a commit it could not reconcile with another writer's.
_CONFLICTS = (
    "Incompatible transaction",
    "Too many concurrent writ",
    "ommit conflict for version",
)


def keyed(table: Any) -> None:
    """Declare `id` the table's unenforced primary key, once (one schema commit), for a
    collection made before new ones carried it in their first commit."""
    field = table.schema.field("id")
    if {key.decode() for key in field.metadata or {}} & set(PRIMARY_KEY_MARKERS):
        return
    if field.nullable:  # Lance refuses a key that may be null; probembed never made one
        raise StoreError(
            "this collection's id column accepts nulls, so LanceDB cannot key writers on "
            "it; copy the collection into a new one to write it from several machines"
        )
    committed(lambda: table.set_unenforced_primary_key("id"))


#: The field-metadata keys by which Lance recognises a primary key column (the position
#: form `set_unenforced_primary_key` writes, and the older boolean form).
PRIMARY_KEY_MARKERS = (*PRIMARY_KEY, "lance-schema:unenforced-primary-key")


def insert_absent(table: Any, data: pa.Table) -> int:
    """Insert the rows whose id the table does not hold, in one commit: if another writer
    inserted some of them meanwhile, Lance merges again on its version. How many went in."""
    result = committed(lambda: table.merge_insert("id").when_not_matched_insert_all().execute(data))
    return int(result.num_inserted_rows)


#: What a conflict means for a write whose own commit is all it does.
NOTHING_STORED = "nothing of this one was stored; run it again"


def committed(run: Callable[[], T], outcome: str = NOTHING_STORED) -> T:
    """Run a LanceDB write; a commit it could not reconcile with another writer's (Lance
    retries a merge a few times within 30 s, and never a commit made on a version replaced
    since) is a `WriteConflictError` whose message says `outcome`: by default, that nothing
    of this write was stored and it may be sent again."""
    try:
        return run()
    except (RuntimeError, OSError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        if not any(word in text for word in _CONFLICTS):
            raise
        raise WriteConflictError(
            "another writer committed to this collection at the same time and LanceDB could "
            f"not reconcile the two commits; {outcome}: {text}"
        ) from exc
