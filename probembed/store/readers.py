"""Reading documents to ingest: JSONL files, BEIR corpus folders, folders of .txt/.md files.

Readers yield a `Record` per good document and a `Problem` per bad one, each tagged with where
it came from (file:line), so the caller decides whether to skip or stop and nothing is dropped
without a word. JSON lines go through `probembed.documents`, the reader the evaluation uses too.
"""

from __future__ import annotations

import codecs
import os
import stat
import unicodedata
from collections import Counter
from collections.abc import Collection, Container, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from probembed.atomic import file_kind
from probembed.chunking import front_matter
from probembed.decoding import HEAD_BYTES, wide_unicode
from probembed.documents import Problem, Record, read_jsonl
from probembed.store.formats import READERS, Found, read_file

__all__ = [
    "CHUNKED_ONLY",
    "JSONL_SUFFIXES",
    "RECOMPOSED",
    "TEXT_SUFFIXES",
    "Link",
    "OwnFolders",
    "Problem",
    "Record",
    "Special",
    "Unread",
    "Walk",
    "document_id",
    "is_beir",
    "misnamed",
    "not_followed",
    "not_regular",
    "not_regular_files",
    "nothing_to_read",
    "read_jsonl",
    "read_records",
    "read_text_folder",
    "recomposed",
    "removed_links",
    "removed_note",
    "spelled_alike",
    "unread_files",
    "walk_folder",
]

#: File suffixes read from a folder of plain documents.
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
#: Documents only chunked ingestion reads (it extracts their text): named in a plain report.
CHUNKED_ONLY = tuple(s for s in READERS if s not in TEXT_SUFFIXES)
#: Files read as JSON lines: any other suffix would give one "malformed JSON" per line.
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", "")
#: Folders a run writes below the folder it reads (its database, its output): `walk_folder`'s
#: `own`, which every walk of that run leaves out.
OwnFolders = Collection[str | os.PathLike[str]]
#: What a BEIR folder holds besides the corpus an ingest reads: the evaluation's, not documents.
BEIR_PARTS = ("corpus.jsonl", "queries.jsonl", "qrels")


def is_beir(path: Path) -> bool:
    """A folder read as a BEIR corpus: its corpus.jsonl alone, whatever else it holds."""
    return (path / "corpus.jsonl").is_file()


def read_records(
    path: str | Path, follow_links: bool = False, own: OwnFolders = (), allow_empty: bool = False
) -> Iterator[Record | Problem]:
    """Records from a JSONL file, a BEIR folder (corpus.jsonl), a folder of .txt/.md files or
    one such file; `follow_links`: a folder's links too, `own`: the run's folders left out
    (`walk_folder`); `allow_empty`: a JSON record of an empty or blank text is a record, not
    a problem (`read_jsonl`), for chunked ingest, which counts it as a file of no text."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_file() and suffix in TEXT_SUFFIXES:  # one document, not lines of JSON
        doc_id = document_id(path, path.parent)
        return iter([misnamed(path, doc_id) or _text_file(path, doc_id)])
    if path.is_file() and suffix in CHUNKED_ONLY:
        raise ValueError(
            f"{path} is a {suffix} document, read only by chunked ingestion "
            "(`probembed ingest --chunk`, `ingest_documents`)"
        )
    if path.is_file() and suffix in JSONL_SUFFIXES:
        if not suffix:
            _refuse_unsuffixed_text(path)
        return _some_records(read_jsonl(path, allow_empty), path)
    if path.is_file():
        raise ValueError(
            f"{path}: probembed does not read {suffix} files; give JSON lines "
            f"({', '.join(JSONL_SUFFIXES[:-1])}), documents ({', '.join(READERS)}), "
            "a folder of them, or a BEIR folder"
        )
    if is_beir(path):
        corpus = path / "corpus.jsonl"
        return _some_records(read_jsonl(corpus, allow_empty), corpus)
    if path.is_dir():
        return read_text_folder(path, follow_links, own)
    odd = not_regular(path)
    if odd is not None:
        raise ValueError(odd)
    raise FileNotFoundError(
        f"no documents at {path}: expected a JSONL file, a BEIR folder with corpus.jsonl, "
        "a folder of .txt/.md files or one such file"
    )


def _refuse_unsuffixed_text(path: Path) -> None:
    """Refuse a file of no suffix (read as JSON lines) whose text opens no JSON object or
    array: a `README` or `LICENSE` was one "malformed JSON" problem per line. UTF-16 and
    UTF-32 are left to `read_jsonl`, which names them."""
    with path.open("rb") as file:
        head = file.read(HEAD_BYTES)
    start = head.removeprefix(codecs.BOM_UTF8).lstrip()
    if not start or start[:1] in (b"{", b"[") or wide_unicode(head) is not None:
        return
    raise ValueError(
        f"{path} has no suffix, so it is read as JSON lines, but it opens no JSON object "
        f"(it starts {start[:20].decode(errors='replace')!r}): a text document needs a .txt or "
        ".md name, records a .jsonl one"
    )


def _some_records(items: Iterator[Record | Problem], path: Path) -> Iterator[Record | Problem]:
    """The items of a JSONL file, or a `ValueError` naming it when it holds none: an empty
    file (a failed export, a wrong name) is most often a mistake, and a run of it ended
    "nothing stored" with exit status 0 (embed left an empty --out folder)."""
    empty = True
    for item in items:
        empty = False
        yield item
    if empty:
        raise ValueError(
            f"{path} holds no records: it is empty (or holds only blank lines); give a file "
            "of JSON lines, one record per line"
        )


def not_regular(path: Path) -> str | None:
    """What is wrong with a source that is there but is neither a folder nor a regular file
    (None: it is one, or not there): reading a named pipe waits for a writer, and "no
    documents at" sent its user looking for a missing file."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return None
    return f"{path} is not a regular file but {file_kind(mode)}: give a file, or a folder of files"


class Link(NamedTuple):
    """A link a walk did not follow, as a report names it."""

    #: Its path relative to the folder walked.
    name: str
    #: Where it leads, every link on the way resolved.
    target: str
    #: Whether it leads to a folder.
    folder: bool
    #: A folder the walk is in already (a cycle), which even `follow_links` leaves.
    loop: bool = False

    def __str__(self) -> str:
        """`name -> target`, a folder's name ending in `/`."""
        return f"{self.name}{'/' if self.folder else ''} -> {self.target}"


class Special(NamedTuple):
    """A name below a folder that is no regular file (a named pipe, a socket, a link to one),
    which no reader takes: a report names it with the files it does not read."""

    #: Its path relative to the folder walked.
    name: str
    #: What it is: "a named pipe", "a link to a socket".
    kind: str

    def __str__(self) -> str:
        """`name (kind)`."""
        return f"{self.name} ({self.kind})"


class Walk(NamedTuple):
    """What `walk_folder` found below a folder."""

    #: The regular files, sorted, each with what the walk found at its name, which every
    #: read of it must find still (`formats.open_document`).
    files: dict[Path, Found]
    problems: list[Problem]
    #: The links it did not follow (`Link`), by name.
    linked: list[Link]
    #: The names that are no regular file (`Special`), by name.
    special: list[Special]
    #: Hidden files and folders left out (a folder counted once, not what it holds).
    hidden: int = 0
    #: Files and folders left out by the `exclude` patterns (`Excluded`), counted alike.
    excluded: int = 0


class Excluded:
    """Gitignore-style patterns (`pathspec`'s `GitIgnoreSpec`: `*`, `**`, `?`, `[...]`, a
    trailing `/` for folders only, a leading or inner `/` anchoring to the folder walked, `!`
    to take one back) that leave files and folders of a walk out, matched against their paths
    relative to the folder walked; a folder left out is not entered."""

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        if isinstance(patterns, str):
            raise TypeError("exclude takes a list of patterns, got one str")
        self.spec = None
        #: Each pattern that leaves out (no `!`) and has matched no path looked at yet, with
        #: its own spec: one written from the wrong folder matched nothing, without a word.
        self._idle: dict[str, Any] = {}
        if patterns:  # pathspec (the `store` extra) loaded only for patterns given
            import pathspec

            try:
                self.spec = pathspec.GitIgnoreSpec.from_lines(list(patterns))
                self._idle = {
                    p: pathspec.GitIgnoreSpec.from_lines([p])
                    for p in patterns
                    if p.strip() and not p.startswith(("!", "#"))
                }
            except (ValueError, TypeError) as exc:
                raise ValueError(f"exclude: a pattern gitignore cannot read: {exc}") from exc

    def __call__(self, relative: str, folder: bool = False) -> bool:
        """Whether this path below the folder walked (`/`-separated) is left out."""
        if self.spec is None:
            return False
        path = relative + ("/" if folder else "")
        for pattern in [p for p, spec in self._idle.items() if spec.match_file(path)]:
            del self._idle[pattern]
        return bool(self.spec.match_file(path))

    def unmatched(self) -> list[str]:
        """The patterns that matched no file or folder of the walks so far."""
        return list(self._idle)


def walk_folder(
    root: Path,
    suffixes: Collection[str] | None = None,
    follow_links: bool = False,
    exclude: Excluded | None = None,
    own: OwnFolders = (),
) -> Walk:
    """The files below root with these suffixes (None: any), sorted, hidden files and folders
    aside (an editor's or a tool's: `.obsidian/`, `.venv/`), a problem for each folder that
    cannot be listed (naming no document, so a sync removes nothing) and each link with such
    a suffix whose target is gone (naming its document, so a sync keeps it), and the links
    not followed, which a report names with their targets. By default a link is followed only
    to a file the walk reaches anyway (`_within`): one out of the folder stored a file the
    folder's owner had linked there (`leak.md -> ~/.ssh/id_rsa`) for every searcher to read,
    and a link to a folder is not followed (as git and ripgrep do not). `follow_links`
    follows every link but one to a folder the walk is in already, which would never end.
    `Path.rglob` passed over the first two and the folder links without a word, and a sync
    took what the first two held for deleted. Each file comes with what the walk found at
    its name (`Found`), which every read of it compares (`formats.open_document`): a name
    swapped for a link after the walk was read through it. A name that is no regular file
    (a named pipe, a socket, a link to one: `Special`) is kept apart for a report to name;
    it was passed over without a word, or called a link whose target is missing. `exclude`
    leaves out what its patterns match, counted (`Walk.excluded`) as hidden names are. `own`:
    folders the run writes (its database, its output), left out without a word when below
    root: a database inside the folder it ingests was read as documents not read, each run."""
    excluded = exclude or Excluded()
    written = {_identity(os.fspath(folder)) for folder in own} - {None}
    left_out = Counter[str]()
    files: dict[Path, Found] = {}
    problems: list[Problem] = []
    linked: list[Link] = []
    special: list[Special] = []
    real_root = os.path.realpath(root)
    # each folder entered: the folders (by identity) from the root down to it, a cycle's end
    chains = {os.fspath(root): frozenset([_identity(os.fspath(root))])}

    def unlisted(exc: OSError) -> None:
        where = exc.filename or root
        problems.append(Problem(str(where), f"cannot list this folder ({exc.strerror})"))

    for folder, subfolders, names in os.walk(root, onerror=unlisted, followlinks=follow_links):
        chain = chains.pop(folder, frozenset())
        entered = []
        for name in sorted(subfolders):
            sub = os.path.join(folder, name)
            why = _left_out(name, _relative(Path(sub), root), excluded, folder=True)
            if why:
                left_out[why] += 1
                continue
            if written and _identity(sub) in written:
                continue
            identity = _identity(sub) if follow_links else None
            if os.path.islink(sub) and (not follow_links or identity in chain):
                linked.append(_link(sub, root, folder=True, loop=follow_links))
                continue
            entered.append(name)
            if follow_links:
                chains[sub] = chain | {identity}
        subfolders[:] = entered
        for name in names:
            path = Path(folder, name)
            why = _left_out(name, _relative(path, root), excluded)
            left_out[why] += bool(why)
            if why or (suffixes is not None and path.suffix.lower() not in suffixes):
                continue
            doc_id = document_id(path, root)
            link, found = _look(path)
            if link and not follow_links and not _within(path, real_root, found):
                linked.append(_link(os.fspath(path), root, folder=False))
            elif isinstance(found, OSError):  # a file gone since listed is simply not there
                if link or not isinstance(found, FileNotFoundError):
                    problems.append(Problem(str(path), _unreachable(found, link), doc_id))
            elif stat.S_ISREG(found.st_mode):
                unnamed = misnamed(path, doc_id)
                if unnamed is None:
                    files[path] = Found(found.st_dev, found.st_ino, link)
                else:
                    problems.append(unnamed)
            else:  # a named pipe waits for a writer; it was passed over without a word
                kind = file_kind(found.st_mode)
                special.append(Special(doc_id, f"a link to {kind}" if link else kind))
    problems += _composed_twice(files, root)
    counts = (left_out["hidden"], left_out["excluded"])
    return Walk(dict(sorted(files.items())), problems, sorted(linked), sorted(special), *counts)


def _left_out(name: str, relative: str, exclude: Excluded, folder: bool = False) -> str:
    """Why a walk leaves a name out ('hidden', 'excluded'), or '' where it does not."""
    if name.startswith("."):
        return "hidden"
    return "excluded" if exclude(relative, folder) else ""


def document_id(file: Path, root: Path) -> str:
    """A file's document id: its path below the folder read, `/`-separated, composed (NFC).
    macOS writes a name decomposed (NFD, `e` and a combining accent) and a name typed or
    pasted is composed, so `delete --doc café.txt` and `--where "doc_id = 'café.txt'"`
    found nothing; git's `core.precomposeUnicode` composes names for the same reason."""
    return composed(_relative(file, root))


def composed(name: str) -> str:
    """A name as ids hold it, composed (NFC): a file's (`document_id`) and an ingest's
    prefix, which a name typed or pasted from macOS would otherwise join in another spelling
    (`résumé/` decomposed before a composed file name)."""
    return unicodedata.normalize("NFC", name)


def prefixed(doc_id: str, prefix: str) -> bool:
    """Whether a stored id is under an ingest's `prefix` (composed), what its sync owns: one
    an earlier release stored under the prefix as typed (decomposed) too, which the sync
    stores again composed (`recomposed`) rather than leaving a second copy beside it. An
    ASCII id is not composed again: a sync looks at every stored id."""
    return doc_id.startswith(prefix) or (
        not doc_id.isascii() and composed(doc_id).startswith(prefix)
    )


def spelled_alike(doc_id: str) -> list[str]:
    """An id as given, composed (NFC) and decomposed (NFD), each once: the spellings of one
    name that a terminal, a macOS file name and an id stored before `document_id` composed
    them may each hold."""
    forms = (doc_id, *(unicodedata.normalize(form, doc_id) for form in ("NFC", "NFD")))
    return list(dict.fromkeys(forms))


def stored_spelling(name: str, present: set[str]) -> str | None:
    """The stored id (or document) a name given names: the name itself, else its first
    spelling that is stored (`spelled_alike`), else None."""
    return next((s for s in spelled_alike(name) if s in present), None)


def misnamed(path: Path, doc_id: str) -> Problem | None:
    """The problem of a file whose name is not UTF-8 (a Latin-1 name from an old archive or
    disk), which no document id can hold, or None; it was "its id is not valid Unicode (a
    lone surrogate '\\udce9')"."""
    at = next((i for i, c in enumerate(doc_id) if "\udc80" <= c <= "\udcff"), None)
    if at is None:
        return None
    byte = ord(doc_id[at]) - 0xDC00  # the byte, as the file system's decoding escaped it
    return Problem(
        str(path),
        f"its name is not UTF-8 (byte 0x{byte:02x} at position {at} of {doc_id!r}), and a "
        "document id must be: rename it in UTF-8 (`convmv -f ENCODING -t UTF-8 --notest` "
        "renames from the encoding it is in)",
        doc_id,
    )


def _composed_twice(files: dict[Path, Found], root: Path) -> list[Problem]:
    """A problem for, and the removal from `files` of, each file whose id (`document_id`) is
    another's: two names that differ only in how their accents are written (NFC and NFD,
    which Linux keeps apart). The file whose name is its id keeps it; the other's problem
    names its own spelling, so a sync keeps a document stored under it before ids were
    composed."""
    kept: dict[str, Path] = {}
    problems = []
    for path in sorted(files, key=lambda p: (document_id(p, root) != _relative(p, root), p)):
        doc_id = document_id(path, root)
        if doc_id in kept:
            del files[path]
            problems.append(
                Problem(
                    str(path),
                    f"its name and {str(kept[doc_id])!r}'s differ only in how their accents "
                    f"are written (Unicode NFD and NFC), and both would be stored as "
                    f"{doc_id!r}: rename one",
                    _relative(path, root),
                )
            )
        kept.setdefault(doc_id, path)
    return problems


def _relative(path: Path, root: Path) -> str:
    """A path below root as it is written on disk, `/`-separated."""
    return path.relative_to(root).as_posix()


def _look(path: Path) -> tuple[bool, os.stat_result | OSError]:
    """Whether a name is a link, and the file it names or the error looking at it: a folder
    that can be listed but not entered (mode r--) raised out of the walk."""
    try:
        link = stat.S_ISLNK(path.lstat().st_mode)
    except OSError as exc:
        return False, exc
    try:
        return link, path.stat()
    except OSError as exc:
        return link, exc


def _unreachable(exc: OSError, link: bool) -> str:
    """What a walk says of a name it cannot look at: a link's target gone, or unreadable."""
    if link and isinstance(exc, FileNotFoundError):
        return "a link whose target is missing"
    if link:
        return f"a link whose target cannot be read ({exc.strerror})"
    return f"cannot read: {exc.strerror}"


def _identity(path: str) -> tuple[int, int] | None:
    """A folder's device and inode, which every path to it shares (None: it cannot be read)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _link(path: str, root: Path, folder: bool, loop: bool = False) -> Link:
    """A link not followed, named relative to the root walked."""
    name = _relative(Path(path), root)
    return Link(name, os.path.realpath(path), folder, loop)


def _within(link: Path, real_root: str, found: os.stat_result | OSError) -> bool:
    """Whether a link leads to a file the walk reaches itself, so following it adds nothing
    from elsewhere: below the root and through no hidden name (a checkout's `.git/config`
    can hold a token; `..` starts with a dot too), and the file `found` through it is that
    file (a link pointed elsewhere between the two looks is not followed)."""
    real = os.path.realpath(link)
    relative = os.path.relpath(real, real_root)
    if any(part.startswith(".") for part in Path(relative).parts):
        return False
    if isinstance(found, OSError):  # its target gone: a problem naming its document
        return True
    try:
        there = os.lstat(real)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (found.st_dev, found.st_ino)


def read_text_folder(
    root: Path, follow_links: bool = False, own: OwnFolders = ()
) -> Iterator[Record | Problem]:
    """One record per .txt/.md file below root, id = path relative to root (`follow_links`:
    through any link, `own`: the run's folders left out, `walk_folder`). PDF and HTML files
    are left to chunked ingestion: the report names them (`unread_files`), and they stop
    nothing, as a problem did with on_error="stop"."""
    walk = walk_folder(root, TEXT_SUFFIXES, follow_links, own=own)
    if not walk.files and not walk.problems:
        raise nothing_to_read(root, TEXT_SUFFIXES, follow_links, own=own)
    yield from walk.problems
    for file, found in walk.files.items():
        yield _text_file(file, document_id(file, root), found)


def _text_file(file: Path, doc_id: str, found: Found | None = None) -> Record | Problem:
    """One .txt/.md file as a record with this id, or the problem reading it: read as chunked
    ingestion reads it, so a binary, UTF-16 or blank file is refused alike (binary bytes were
    stored as text here); `found`: what the folder's walk found there (`read_file`)."""
    document = read_file(file, doc_id, found)
    if isinstance(document, Problem):
        return document
    text = document.text.removeprefix("\ufeff")
    front = front_matter(text) if document.markdown else None
    if front is None:
        return Record(doc_id, text.strip(), {}, str(file))
    # the YAML is no text to embed (it took the start each member reads), unless it is all
    # the page holds; its title is kept, as chunked ingest keeps it
    body = text[front.end :].strip() or text.strip()
    return Record(doc_id, body, {"title": front.title} if front.title else {}, str(file))


class Unread(dict[str, int]):
    """Files a run left out, counted by suffix, whether that is because the folder is a
    BEIR folder (read by its corpus alone), decided when the run read it, the links it
    did not follow (`Link`), and the names among those counted that are no regular file
    (`Special`)."""

    def __init__(
        self,
        counts: dict[str, int] | None = None,
        beir: bool = False,
        linked: Collection[Link] = (),
        special: Collection[Special] = (),
        hidden: int = 0,
        excluded: int = 0,
    ) -> None:
        super().__init__(counts or {})
        self.beir = beir
        self.linked = list(linked)
        self.special = list(special)
        #: Hidden files and folders, and those the run's `exclude` patterns matched, left out.
        self.hidden = hidden
        self.excluded = excluded


def unread_files(
    source: str | Path,
    reads: Collection[str] = tuple(READERS),
    follow_links: bool = False,
    exclude: Excluded | None = None,
    own: OwnFolders = (),
) -> Unread:
    """Files below a folder source that a run reading these suffixes leaves out, counted by
    suffix (hidden ones aside; none for a file): a .docx among Markdown files is not ingested,
    nor a PDF by a plain ingest, nor a Markdown file beside a BEIR folder's corpus.jsonl, and
    a report says so; and the links the run did not follow (`walk_folder`), but one to a file
    it would not read anyway, which is counted with those, as is every name that is no
    regular file (`Special`), whatever its suffix; and how many hidden names and names the
    run's `exclude` matched it left out; the run's `own` folders (`walk_folder`) are none of
    these."""
    folder = Path(source)
    if not folder.is_dir():
        return Unread()
    walk = walk_folder(folder, follow_links=follow_links, exclude=exclude, own=own)
    linked = [x for x in walk.linked if x.folder or Path(x.name).suffix.lower() in reads]
    found = [p.relative_to(folder) for p in walk.files]
    found += [Path(x.name) for x in walk.linked if x not in linked]
    beir = is_beir(folder)
    if beir:  # its corpus is read; anything but the BEIR parts is not
        left = [p for p in found if p.parts[0] not in BEIR_PARTS]
    else:
        left = [p for p in found if p.suffix.lower() not in reads]
    left += [Path(x.name) for x in walk.special]
    counts = dict(sorted(Counter(p.suffix.lower() or p.name for p in left).items()))
    return Unread(counts, beir, [] if beir else linked, walk.special, walk.hidden, walk.excluded)


def unread_note(
    unread: Unread,
    reads: Collection[str] = tuple(READERS),
    chunking: str = "chunked ingestion (--chunk)",
) -> str:
    """The words a report's summary ends with for the files `unread_files` found ('' if none);
    `chunking` names what reads the files only chunked ingestion does, for this command."""
    return _not_read(unread, reads, chunking) + _left_out_note(unread)


def _left_out_note(unread: Unread) -> str:
    """What a summary says of the hidden and excluded names a walk left out ('' if none):
    hidden ones were left out without a word."""
    parts = [f"{unread.hidden} hidden"] if unread.hidden else []
    parts += [f"{unread.excluded} excluded (--exclude)"] if unread.excluded else []
    return f"; left out: {', '.join(parts)} file(s) or folder(s)" if parts else ""


def _not_read(unread: Unread, reads: Collection[str], chunking: str) -> str:
    """`unread_note`'s words for the files not read and the links not followed."""
    links = not_followed(unread.linked)
    if not unread:
        return links
    kinds = ", ".join(f"{suffix} ({count})" for suffix, count in unread.items())
    special = not_regular_files(unread.special)
    if unread.beir:
        return (
            f"; not read: {sum(unread.values())} file(s), {kinds} (a folder with a "
            f"corpus.jsonl is a BEIR folder: only its corpus is read){special}"
        )
    chunked = [s for s in CHUNKED_ONLY if s not in reads]
    also = f"; {chunking} also {', '.join(chunked)}" if chunked else ""
    return (
        f"; not read: {sum(unread.values())} file(s), {kinds} (this run reads "
        f"{', '.join(reads)}{also}){special}{links}"
    )


def not_regular_files(special: Sequence[Special]) -> str:
    """The words a report or error says of the names no reader takes, each with what it is
    ('' if none): a named pipe was passed over without a word."""
    if not special:
        return ""
    named = ", ".join(map(str, special[:3])) + (", ..." if len(special) > 3 else "")
    return f"; not regular files: {len(special)}, {named}"


def nothing_to_read(
    root: Path,
    reads: Collection[str],
    follow_links: bool = False,
    exclude: Excluded | None = None,
    own: OwnFolders = (),
) -> FileNotFoundError:
    """The error of a folder holding no file of the kinds a run `reads`, saying what its walk
    found instead: files only chunked ingestion reads, files of other kinds, names that are
    no regular file, links not followed, hidden and excluded names. A folder of `.docx` files
    or of hidden notes alone was only "holds no .txt/.md/.markdown files to ingest"."""
    walk = walk_folder(root, None, follow_links, exclude, own)
    found = Counter(p.suffix.lower() or p.name for p in walk.files)
    chunked = sorted(s for s in found if s in CHUNKED_ONLY and s not in reads)
    hint = f"; its {'/'.join(chunked)} files are read by `probembed ingest --chunk`"
    others = {s: n for s, n in sorted(found.items()) if s not in chunked}
    kinds = ", ".join(f"{suffix} ({count})" for suffix, count in others.items())
    held = f"; it holds {sum(others.values())} file(s) of no kind read: {kinds}"
    unread = Unread(hidden=walk.hidden, excluded=walk.excluded)
    return FileNotFoundError(
        f"{root} holds no {'/'.join(reads)} files to ingest{hint if chunked else ''}"
        f"{held if others else ''}{not_regular_files(walk.special)}{not_followed(walk.linked)}"
        f"{_left_out_note(unread)}"
    )


def removed_links(gone: Iterable[str], linked: Sequence[Link], prefix: str = "") -> list[str]:
    """The documents a sync removes (ids under `prefix`) that a link it did not follow held,
    or one below a link to a folder: removed by design (a link out of the folder is no longer
    read), but a report that names them tells them from files deleted."""
    files = {x.name for x in linked if not x.folder}
    folders = tuple(f"{x.name}/" for x in linked if x.folder)
    return [
        doc
        for doc in gone
        if (name := doc.removeprefix(prefix)) in files or name.startswith(folders)
    ]


def recomposed(gone: Iterable[str], seen: Container[str]) -> list[str]:
    """The documents a sync removes (`gone`) that its input (`seen`) holds under their
    composed id (`document_id`): stored by a release that kept a file's name as macOS wrote
    it (NFD), or an ingest's prefix as typed. Each is stored again, not deleted: a report
    names them, and a sync that keeps none of the others is not refused for them."""
    return [doc for doc in gone if (nfc := composed(doc)) in seen and nfc != doc]


def removed_note(removed: Sequence[str], why: str = "from links not followed") -> str:
    """What a sync's report adds to its count of removed documents for some of them, and
    `why` they went: those `removed_links` or `recomposed` found ('' if none)."""
    if not removed:
        return ""
    named = ", ".join(removed[:3]) + (", ..." if len(removed) > 3 else "")
    return f" ({len(removed)} of them {why}: {named})"


#: What a report says of the documents `recomposed` found.
RECOMPOSED = "stored again under their composed (NFC) ids"


def not_followed(linked: Sequence[Link]) -> str:
    """The words a report or error ends with for the links a run did not follow, each with
    where it leads ('' if none): a link out of the folder was read without a word."""
    if not linked:
        return ""
    named = ", ".join(map(str, linked[:3])) + (", ..." if len(linked) > 3 else "")
    if all(x.loop for x in linked):
        return f"; not followed: {len(linked)} link(s) to a folder they are in (a loop), {named}"
    return (
        f"; not followed: {len(linked)} link(s) out of the folder or to a folder, {named} "
        "(follow_links=True follows them; or ingest a target on its own)"
    )
