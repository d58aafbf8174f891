"""A database: a directory or an object-store URI (s3://, gs://, az://) of collections.

Each collection is one LanceDB table (`probembed.store.collection`); `Database` lists, opens,
creates and drops them and hands out one `Collection` handle per name.
`probembed.store.location` keeps the difference between a directory and object storage.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from probembed.store.collection import Collection
from probembed.store.errors import CollectionNotFoundError, ReadOnlyError, StoreError, quoted
from probembed.store.location import OWN_DIR, Location, database_target
from probembed.store.rows import read_header

if TYPE_CHECKING:
    from probembed.store.backup import Backup

DEFAULT_COLLECTION = "default"
#: The names LanceDB can use as a table, as a pattern (the service's schema states it).
COLLECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
#: That pattern in words, as every front door tells it.
COLLECTION_NAME_RULE = (
    "use letters, digits, '_', '.', '-' (starting with a letter or digit, at most 128 characters)"
)


def check_collection_name(name: object) -> None:
    """Refuse a name LanceDB cannot use as a table (checked before any database is made)."""
    if not isinstance(name, str) or not re.fullmatch(COLLECTION_NAME, name):
        raise StoreError(f"invalid collection name {quoted(name)}: {COLLECTION_NAME_RULE}")


class Database:
    """A directory (or object-store URI) of collections; reading needs it, writing creates it.

    `storage_options` (object storage only) go to LanceDB as they are: credentials, endpoint
    and region, else the standard environment variables (AWS_ACCESS_KEY_ID, ...) apply.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        create: bool = False,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.location = Location(path, storage_options)
        self.location.prepare(create)
        #: The directory (a Path), or the URI (a str) of a database on object storage.
        self.path: Path | str = self.location.path
        self._conn = self.location.connect()
        self._writable: bool | None = None
        self._handles: dict[str, Collection] = {}
        #: Tables opened on a connection that reads the latest version on every read, only
        #: to ask it: the tables rows are read from stay on the version they last opened.
        self._watch: Any = None
        self._watched: dict[str, Any] = {}

    def collections(self) -> list[str]:
        """Names of the collections with at least one commit, sorted; other LanceDB tables in
        the same database (a user's own) are not collections, and listing or serving the
        database does not fail on them."""
        names = []
        for name in self._conn.list_tables().tables:
            table = self.table(name)
            if table is not None and read_header(table.schema) is not None:
                names.append(name)
        return sorted(names)

    def table(self, name: str) -> Any:
        """The LanceDB table, or None if it has no committed version (absent or being created)."""
        try:
            return self._conn.open_table(name)
        except ValueError as exc:
            # a table whose first commit is missing (in progress, or killed) is not there yet
            if "not found" in str(exc):
                return None
            raise

    def create_table(
        self, name: str, data: pa.Table | pa.RecordBatchReader, schema: pa.Schema
    ) -> Any:
        """Create a LanceDB table with its first rows in one commit (`Collection._create`);
        LanceDB refuses it if it finds the table there (`ValueError`, "already exists")."""
        return self._conn.create_table(name, data=data, schema=schema)

    def reconnect(self) -> None:
        """A new LanceDB connection for tables opened from now on: a table dropped and made
        again by another process at a version this one has seen would read the old table's
        cached manifest and fail on its deleted files."""
        self._conn = self.location.connect()

    def latest_version(self, name: str) -> int | None:
        """A table's latest committed version in one round trip to LanceDB, where reopening
        the table and reading its version takes two; None if it cannot be read (absent)."""
        try:
            if name not in self._watched:
                if self._watch is None:
                    self._watch = self.location.connect(consistency=timedelta(0))
                self._watched[name] = self._watch.open_table(name)
            return int(self._watched[name].version)
        except (ValueError, OSError, RuntimeError):
            self._watched.pop(name, None)
            return None

    def collection(self, name: str = DEFAULT_COLLECTION) -> Collection:
        """A handle on a collection, created by its first write; one handle per name.

        The same handle for a name means its searcher stays warm however often it is asked for.
        """
        check_collection_name(name)
        if name not in self._handles:
            self._handles[name] = Collection(self, name)
        return self._handles[name]

    def open(self, name: str = DEFAULT_COLLECTION) -> Collection:
        """An existing collection, or an error listing the ones there are."""
        handle = self.collection(name)
        if not handle.exists:
            raise self.not_found(name)
        return handle

    def not_found(self, name: str) -> CollectionNotFoundError:
        """The error for a collection that is not here, listing those that are (a typo, often)."""
        known = ", ".join(self.collections()) or "none"
        return CollectionNotFoundError(
            f"no collection {name!r} in {self.path}", f"; collections: {known}"
        )

    def drop(self, name: str, locked: bool = False) -> None:
        """Delete a collection, its derived files, and everything in it. Under the collection's
        write lock (`locked`: the caller holds it, the handle's undo dropping the table it
        made, which stays the handle for the name), as every write: an ingest's commit lands
        before the drop, or finds it dropped (`Collection.add`'s `created`), never on a table
        being removed."""
        collection = self.open(name)
        self.require_writable()
        with contextlib.nullcontext() if locked else collection._writing():
            self._conn.drop_table(name)
            self.location.remove(collection.name)
        collection.close()
        if not locked:
            del self._handles[name]
        self._watched.pop(name, None)

    def backup(
        self,
        to: str | os.PathLike,
        collections: Sequence[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> list[Backup]:
        """Copy collections (every one by default) into a new database at `to`, a new or
        empty folder or object-store prefix, each at one version, while they are served and
        written (`probembed.store.backup`): the copy opens as a database of its own, with
        the same items, pipeline copy, calibration, tuning and search results, and
        `backup` of it back the other way restores it. `storage_options` are the target's
        (by default this database's, where both are on object storage). What was copied."""
        from probembed.store.backup import backed_up

        if storage_options is None and isinstance(database_target(to), str):
            storage_options = self.location.storage_options  # {} for a directory's
        return backed_up(self, to, collections, storage_options)

    def discard_unmade(self, name: str) -> None:
        """Remove what a first write of `name` that never committed left (its pipeline copy),
        so a first ingest stopped before its first commit leaves nothing of the collection.
        What another writer has put in the database stays."""
        if self.collection(name).exists:
            return
        self.location.remove(name)
        if not self.location.remote:
            with contextlib.suppress(OSError):  # only when empty: another run's files keep it
                (Path(self.path) / OWN_DIR).rmdir()

    def own_folders(self) -> list[Path]:
        """The folders this database writes, which a walk of a folder holding it leaves out
        (`readers.walk_folder`'s `own`): itself, and its own folder and tables' folders, for a
        walk of the folder it is (`ingest kb --db kb` named the tables' files as files not
        read). Each call lists the tables anew: a write's first commit makes one. None on
        object storage, which no walk reads."""
        if self.location.remote:
            return []
        names = self._conn.list_tables().tables
        tables = [cast(Path, self.location.table_folder(name)) for name in names]
        return [Path(self.path), Path(self.path) / OWN_DIR, *tables]

    def require_writable(self) -> None:
        """Fail before writing anything if the database cannot be written (probed, as root too)."""
        if self._writable is None:
            self._writable = self.location.can_write()
        if not self._writable:
            raise ReadOnlyError(f"database {self.path} is read-only: cannot write to it")

    @property
    def writable(self) -> bool:
        """Whether files can be created in the database directory."""
        try:
            self.require_writable()
        except StoreError:
            return False
        return True
