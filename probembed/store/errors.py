"""Errors of the store layer: each message names the input and what would be right."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from probembed.documents import OwnNote, Problem

#: Problems quoted in an error message; the error (and a report) keeps them all.
SHOWN_PROBLEMS = 10
#: Characters of a caller's value an error message quotes: a 480 KB filter and a model name
#: of 10,000 characters were quoted whole.
QUOTED_CHARS = 200


def quoted(value: object) -> str:
    """A caller's value as an error message quotes it: its repr, cut short past
    `QUOTED_CHARS` characters with its size said."""
    text = repr(value)
    if len(text) <= QUOTED_CHARS:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:QUOTED_CHARS]}... ({size:,} characters)"


def listed(problems: Sequence[Problem]) -> str:
    """Problems as the indented lines a message ends with: the first `SHOWN_PROBLEMS`, then
    how many more (a run of thousands of bad lines must not make a message of them all)."""
    shown = "\n  ".join(str(p) for p in problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    tail = f"\n  ... and {more} more" if more > 0 else ""
    return f"\n  {shown}{tail}"


def skipped(problems: Sequence[Problem]) -> OwnNote:
    """What a run stopped part-way had skipped before it stopped, said after what stopped it
    (its report, which would have named them, is not returned)."""
    return OwnNote(
        f"Before it stopped, it had skipped {len(problems)} bad input item(s), none of which "
        f"was written:{listed(problems)}"
    )


class StoreError(ValueError):
    """A store operation that cannot be done as asked; the message says why and what to do."""


class PipelineMismatchError(StoreError):
    """Vectors from one pipeline offered to a collection made by another."""


class CollectionNotFoundError(StoreError):
    """A collection asked for by name that the database does not hold."""

    def __init__(self, message: str, listing: str = "") -> None:
        super().__init__(message + listing)
        #: The message without the names of the collections there are (`listing`), for a
        #: caller who may not list them (a service's key without the read scope).
        self.unlisted = message


class CollectionExistsError(StoreError):
    """A collection created under a name that is already taken."""


class CollectionDroppedError(CollectionNotFoundError):
    """A write whose collection was dropped (or dropped and made again) between its commits:
    it stops rather than make a new collection of its last batches (a service answers 404,
    as for a collection dropped while any request ran)."""

    def __init__(
        self, name: str, written: int | None = None, total: int = 0, noun: str = ""
    ) -> None:
        self.name, self.written = name, written
        done = "write ran"
        if written is not None:
            done = f"ingest ran: {written} of {total} {noun} had been written before the drop"
        super().__init__(
            f"collection {name!r} was dropped while this {done}; nothing was written after it"
        )

    def during(self, written: int, total: int, noun: str = "records") -> CollectionDroppedError:
        """The error as a larger write tells it: how much of it went in before the drop."""
        return CollectionDroppedError(self.name, written, total, noun)


class NoDatabaseError(StoreError):
    """A database opened to read where there is none; `told` says how the caller makes one."""

    def __init__(
        self, where: str, why: str, target: str, remote: bool = False, after: str = ""
    ) -> None:
        self.where, self.why, self.after = where, why, after
        #: How a command line names this database: a directory, or an object-store URI.
        self.placeholder = "URI" if remote else "DIR"
        # `after`: what must happen first for `Database(target, create=True)` to work (a file
        # in its place moved away); said to a Python caller only, as a command names any DIR
        super().__init__(self.told(f"`Database({target!r}, create=True)`", after))

    def told(self, maker: str, after: str = "") -> str:
        """The message, naming what makes a database in the caller's terms (the CLI's user
        runs `probembed ingest PATH --db DIR`)."""
        return f"no database at {self.where}: {self.why} ({maker} makes one{after})"


class NotChunkedError(StoreError):
    """A search by document (group_by_doc) of a collection no chunk was ever written to."""

    def __init__(self, name: str, empty: bool) -> None:
        self.name, self.empty = name, empty
        super().__init__(self.told("`ingest_documents`"))

    def told(self, chunking: str) -> str:
        """The message, with how the caller writes documents as chunks in its own terms (an
        HTTP client sends `"chunk": true`, the CLI's user `probembed ingest --chunk`)."""
        said = f"group_by_doc needs chunked documents, but collection {self.name!r}"
        if self.empty:  # whichever kind it will hold, it holds none of them yet
            return (
                f"{said} is empty and no chunk was ever written to it; write its documents "
                f"with chunking ({chunking}) before searching by document"
            )
        return (
            f"{said} holds whole documents (no doc_id column); write them with chunking "
            f"({chunking}) into another collection, or search without group_by_doc"
        )


class EveryItemError(StoreError):
    """A delete or erasure by a filter that selects every item of a collection, refused
    unless allowed: a blank or always-true filter (`1 = 1`) does so by mistake."""

    def __init__(self, where: str, name: str, matched: int, verb: str) -> None:
        self.where, self.name, self.matched, self.verb = where, name, matched, verb
        super().__init__(self.told("allow_all=True"))

    def told(self, allow: str) -> str:
        """The message, with how the caller allows it in its own terms (an HTTP client sends
        `"all": true`)."""
        return (
            f"filter where={quoted(self.where)} selects every item of collection "
            f"{self.name!r} ({self.matched}): {self.verb[:-1]}ing them all empties it, as a "
            f"blank or always-true filter would by mistake; pass {allow} to {self.verb} them "
            "all, or drop the collection"
        )


class StoreStateError(StoreError):
    """The database's own files or storage fail, or hold what cannot be served: not the
    caller's input (a service answers it 500 and logs it, never 4xx)."""


class ReadOnlyError(StoreStateError):
    """A write asked of a database that cannot be written."""


class NotWritableError(ReadOnlyError):
    """A write the file system refused for want of permission (a collection folder of
    another user's files, where the database's own folder is writable): the operator's to
    mend, as a read-only database's (a service answers 503)."""


class StorageFullError(StoreStateError):
    """A write the file system refused for want of space or of quota: the operator's to
    free, and the same write then succeeds (a service answers 507)."""


class StorageUnavailableError(StoreStateError):
    """The database's object storage failed a call (unreachable, refused, timed out): the
    same request may succeed later (a service answers it 503 with Retry-After)."""


#: How LanceDB words an I/O failure of its object store, before the store's own words.
_LANCE_IO = "LanceError(IO): "
#: Where its Rust source locations start (one per wrapping error), at the end of such a message.
_SOURCE = re.compile(r"(?:,\s*/\S+\.rs:\d+:\d+)+\s*$")
#: The same failure as LanceDB's connect words it, in Rust's debug form (a ValueError):
#: `Invalid input, Failed to connect to namespace: IO { source: ..., location: ... }`.
_DEBUG_IO = re.compile(r"^(?:Invalid input, )?(.*?)\bIO \{ source: (.*?), location: Location \{")
#: The parts of an object_store retry error in that form worth a reader's line.
_DEBUG_PARTS = re.compile(
    r"method: (?P<method>\w+), uri: Some\((?P<uri>\S+)\),.*?elapsed: (?P<elapsed>[\d.]+\w+)"
    r".*?HttpError \{ kind: (?P<kind>\w+)"
)
#: object_store's name of the local file system, which is no object storage.
_LOCAL_STORE = "LocalFileSystem"


def storage_failure(exc: BaseException) -> str | None:
    """What the storage said, shortened to a line, when LanceDB raised an I/O failure of its
    object store (a RuntimeError or OSError whose text is `lance error: LanceError(IO): ...`,
    or the ValueError its connect raises, `... IO { source: ... }`), else None: deep in any
    read or write, it is the storage's failing, not the request's or the input's. A URL's
    credentials in it are hidden (`without_userinfo`)."""
    said = _storage_words(exc)
    return None if said is None else without_userinfo(said)


def without_userinfo(text: str) -> str:
    """Text with the user and password of any URL in it (`https://KEY:SECRET@host`) hidden:
    an endpoint may carry credentials, and a message quoting it must not."""
    return _USERINFO.sub(r"\1***@", text)


#: A URL's user and password (`scheme://user:pass@`), or a bare `user:pass@host`.
_USERINFO = re.compile(r"((?:[a-zA-Z][\w+.-]*://)|^)[^\s/@]+@(?=\S)")


def _storage_words(exc: BaseException) -> str | None:
    """`storage_failure`'s line, credentials and all."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if not isinstance(exc, (RuntimeError, OSError, ValueError)) or _LOCAL_STORE in text:
        return None
    if _LANCE_IO in text and not isinstance(exc, ValueError):
        return _SOURCE.sub("", text.rsplit(_LANCE_IO, 1)[1]).strip()  # the innermost
    found = _DEBUG_IO.search(text)
    if found is None:
        return None
    lead, inner = found.groups()
    parts = _DEBUG_PARTS.search(inner)
    if parts is None:
        return f"{lead}{inner}"
    return f"{lead}{parts['method']} {parts['uri']} in {parts['elapsed']}: {parts['kind']}"


class StorageCredentialsError(StoreStateError):
    """The database's object storage refused the credentials (access denied, an unknown key,
    a signature that does not match): the same call fails until they are mended, so it is
    no failure to retry (exit 2; a service answers 500 and logs it)."""


#: How a store refuses credentials: the AWS SDK's words (pyarrow: `AWS Error ACCESS_DENIED`,
#: `INVALID_ACCESS_KEY_ID`, `SIGNATURE_DOES_NOT_MATCH`) and S3's codes as object_store
#: quotes them (`<Code>AccessDenied</Code>`, ...), or its bare 403.
_REFUSED = re.compile(
    r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|AccessDenied|"
    r"InvalidAccessKeyId|SignatureDoesNotMatch|InvalidToken|ExpiredToken|403 Forbidden"
)
#: Where each store's credentials are set: its variables, else its storage options.
_CREDENTIALS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN for temporary ones), "
    "or the storage options aws_access_key_id and aws_secret_access_key (aws_session_token)",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS, or the storage option google_service_account",
    "az": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY, or the storage options "
    "azure_storage_account_name and azure_storage_account_key",
}


def credentials_refusal(said: str, uri: str = "") -> StorageCredentialsError | None:
    """The error for a storage call (`said`: its words) that refused the credentials, naming
    the settings that carry them for the database's store (`uri`), else None."""
    if _REFUSED.search(said) is None:
        return None
    scheme = uri.partition("://")[0].lower() if "://" in uri else "s3"
    where = f" for {uri}" if uri else ""
    return StorageCredentialsError(
        f"the object storage refused the credentials{where}: {said}; check "
        f"{_CREDENTIALS.get(scheme, _CREDENTIALS['s3'])} (storage options win over the "
        "variables); retrying with the same ones will not help"
    )


def storage_error(exc: BaseException) -> StoreStateError | None:
    """LanceDB's I/O failure of object storage (`storage_failure`) as the store's own error: a
    refusal of the credentials (`credentials_refusal`), else the storage failing a call
    (`StorageUnavailableError`, in the storage's words); None for any other error."""
    said = storage_failure(exc)
    if said is None:
        return None
    refused = credentials_refusal(said)
    return refused or StorageUnavailableError(f"the database's storage failed: {said}")


class WriteConflictError(StoreStateError):
    """A commit that LanceDB could not reconcile with another writer's commit at the same
    time (object storage, several machines): nothing of it was stored; sent again, it may
    succeed (a service answers it 409)."""


class CollectionBusyError(WriteConflictError):
    """A write that plans over a collection's documents (chunked ingest, a sync, a delete by
    document) refused because another one held the collection past the time it would wait
    (`Collection.planning`'s `wait`): nothing of it was written (a service answers it 409)."""

    def __init__(self, name: str, what: str, holder: str, waited: float) -> None:
        self.holder = holder
        waited_for = f"after waiting {waited:g} s" if waited else "without waiting"
        super().__init__(
            f"collection {name!r} is being changed by {holder or 'another write'}: this {what} "
            f"stopped {waited_for}, before reading or writing anything; run it again once "
            "that ends"
        )


class ErasureHeldError(WriteConflictError):
    """An erasure refused before it changed anything: a pin of a write that may still run
    (`pins.RUNNING`, `pins.UNKNOWN`) holds a version the erasure must remove, and dropping it
    loses that write's undo (a service answers it 409; `force` drops it)."""


class UndoConflictError(WriteConflictError):
    """A write stopped part-way (`stopped_by`: its encoder, storage, a bad file) whose undo
    (`Collection.revert`) met another writer's commit (`conflict`, which says the stopped
    write's batches are still stored): the message names both, where the conflict alone hid
    what stopped the write, and the problems the write had met in other documents
    (`problems`: those it skipped), which an error in place of its report would drop."""

    def __init__(
        self,
        stopped_by: BaseException,
        conflict: WriteConflictError,
        problems: Sequence[Problem] = (),
    ) -> None:
        self.stopped_by, self.conflict, self.problems = stopped_by, conflict, list(problems)
        said = str(stopped_by)
        super().__init__(self.told(type(stopped_by).__name__ + (f": {said}" if said else "")))

    def told(self, stopped: str) -> str:
        """The message, with what stopped the write as the caller may be told it (a service
        names a failure of its own by its log, not by its text)."""
        said = f"this write stopped part-way ({stopped}), and undoing it failed: {self.conflict}"
        return f"{said}\n{skipped(self.problems)}" if self.problems else said


#: How LanceDB's Rust words an OS failure: "... Permission denied (os error 13)".
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
#: An absolute path in such a message: the file it failed on, or its Rust source location.
_PATH = re.compile(r'/[^\s"]+')
_RUST_SOURCE = re.compile(r"\.rs:\d+")
#: A database on object storage, where no local folder is to blame.
_URI = re.compile(r"[a-z][a-z0-9+.-]*://")


def disk_refusal(
    exc: BaseException, collection: str | None = None, folder: str | os.PathLike | None = None
) -> StoreStateError | None:
    """The error that says what the operator must mend, where the file system refused a
    write for want of permission (`NotWritableError`) or of space (`StorageFullError`), else
    None: LanceDB's raw "Permission denied (os error 13) at path ..." ended the CLI with exit
    1 and a service's write with a generic 500. It names the collection (when given), the
    file, else the collection's table `folder` (LanceDB's refused folder and full disk name
    none), the folder's owner and mode or the space left, and what to do."""
    code, path = _os_failure(exc)
    path = str(folder) if path is None and folder is not None else path
    what = "the database" if collection is None else f"collection {collection!r}"
    if code in (errno.EACCES, errno.EPERM):
        return NotWritableError(_not_writable(what, path))
    if code in (errno.ENOSPC, errno.EDQUOT):
        return StorageFullError(_full(what, path, code))
    return None


@contextlib.contextmanager
def disk_refusals(collection: str, folder: str | os.PathLike) -> Iterator[None]:
    """Raise a write's refusal by the file system as `disk_refusal` tells it (`folder`: the
    collection's table, `Location.table_folder`)."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        refused = disk_refusal(exc, collection, folder)
        if refused is None:
            raise
        raise refused from exc


def _os_failure(exc: BaseException) -> tuple[int | None, str | None]:
    """The errno and the file of an OS failure, raised by Python (an OSError with its errno)
    or worded by LanceDB (a RuntimeError or OSError whose text ends "(os error N)")."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno, None if exc.filename is None else str(exc.filename)
    found = _OS_ERROR.search(str(exc)) if isinstance(exc, (RuntimeError, OSError)) else None
    if found is None:
        return None, None
    paths = [p for p in _PATH.findall(str(exc)) if not _RUST_SOURCE.search(p)]
    path = re.sub(r"#\d+$", "", paths[0].rstrip(":,")) if paths else None
    return int(found.group(1)), path


def _not_writable(what: str, path: str | None) -> str:
    """A permission refusal in words: where, whose it is, who this process is, what to do."""
    said = f"cannot write {what}: permission denied"
    if path is None or _URI.match(path):
        return f"{said}; make the database's folders writable by this process's user"
    place = _nearest(path)
    found = place.stat()
    owner, mode = _owner(found.st_uid), stat.filemode(found.st_mode)
    table = next((p for p in (place, *place.parents) if p.suffix == ".lance"), place)
    return (
        f"{said} on {place} (owner {owner}, mode {mode}; this process runs as "
        f"{_owner(os.geteuid())}): make {table} and everything in it writable by this user "
        "(chown -R or chmod -R), or write as its owner"
    )


def _full(what: str, path: str | None, code: int) -> str:
    """A refusal for want of space in words: where, how much is left, what to do."""
    cause = "disk quota exceeded" if code == errno.EDQUOT else "no space left on device"
    said = f"{cause} for {what}"
    if path is not None and not _URI.match(path):
        said += f" in {path} ({shutil.disk_usage(_nearest(path)).free:,} bytes free there)"
    return f"{said}: free space on that file system (or raise the quota), then write again"


def _nearest(path: str) -> Path:
    """The file or folder at `path`, or its nearest parent that exists (a temporary file the
    refused write never made)."""
    place = Path(path)
    while not place.exists() and place != place.parent:
        place = place.parent
    return place


def _owner(uid: int) -> str:
    """A user id as a name and number, or the number alone where no name is known."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
