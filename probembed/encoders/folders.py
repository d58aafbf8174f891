"""What identifies a local model folder: its files' names and bytes, wherever the folder lives.

A copy of a folder (`cp -r`, a container image, a git checkout, another machine) has the same
signature as the original; a changed byte changes it. Hashing a 400 MB folder's bytes takes
about half a second warm (blake2b, one core), so each file's digest is kept in the user cache
directory, keyed by the file's size, modification and change times and inode: a folder read
again is stat'ed, not read. Hidden files and folders (`.git`, `.cache`, `.gitattributes`) are
not the model and are left out, so a git checkout and a plain copy agree.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from probembed import atomic

#: Bytes per read while hashing a file.
_READ = 1 << 20
#: Sub-directory of the user cache directory that holds one digest file per model folder.
DIGESTS_DIR = "folder-digests"


def folder_signature(folder: Path) -> str:
    """Digest of the folder's file names and contents, so a copy keeps its collections."""
    files = model_files(folder)
    digests = file_digests(folder, files)
    digest = hashlib.blake2b(digest_size=16)
    for name in files:
        digest.update(name.encode() + b"\0" + bytes.fromhex(digests[name]))
    return f"dir-{digest.hexdigest()}"


def legacy_folder_signature(folder: Path) -> str:
    """The signature releases before content hashing gave a folder (names, sizes, modification
    times): only recognised, never made, so their collections stay readable while the folder
    is untouched."""
    digest = hashlib.blake2b(digest_size=8)
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = file.stat()
        digest.update(f"{file.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return f"dir-{digest.hexdigest()}"


def model_files(folder: Path) -> list[str]:
    """The folder's files as sorted relative POSIX paths, hidden files and folders left out.
    Symlinked sub-folders are followed (`rglob` left out the weights a link pointed to, so
    changed weights kept the signature), each real directory once (a link to an ancestor)."""
    found, seen = [], set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs.clear()
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        here = Path(root).relative_to(folder)
        found += [
            (here / name).as_posix()
            for name in files
            if not name.startswith(".") and (Path(root) / name).is_file()
        ]
    return sorted(found)


def file_digests(folder: Path, files: list[str]) -> dict[str, str]:
    """Each file's blake2b hex digest, read from the cache where its stat is unchanged."""
    cache = _cache_file(folder)
    kept = _read_cache(cache)
    fresh: dict[str, list] = {}
    for name in files:
        key = _stat_key(folder / name)
        entry = kept.get(name)
        fresh[name] = (
            entry if entry is not None and entry[:-1] == key else [*key, _digest(folder / name)]
        )
    if fresh != kept:
        _write_cache(cache, fresh)
    return {name: entry[-1] for name, entry in fresh.items()}


def _stat_key(path: Path) -> list[int]:
    """What changes whenever a file's bytes may have: size, mtime, ctime (which no tool sets
    back) and inode (a file replaced by rename)."""
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _digest(path: Path) -> str:
    """blake2b of a file's bytes, read in pieces."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        while piece := handle.read(_READ):
            digest.update(piece)
    return digest.hexdigest()


def _cache_file(folder: Path) -> Path:
    """Where one folder's digests are kept: named by a hash of its absolute path."""
    from probembed.cache import default_cache_dir

    key = hashlib.blake2b(str(folder.absolute()).encode(), digest_size=16).hexdigest()
    return default_cache_dir() / DIGESTS_DIR / f"{key}.json"


def _read_cache(cache: Path) -> dict[str, list]:
    """The kept digests; none when the file is missing or unreadable (they are made again)."""
    try:
        kept = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(kept, dict):
        return {}
    return {k: v for k, v in kept.items() if isinstance(v, list) and len(v) == 5}


def _write_cache(cache: Path, digests: dict[str, list]) -> None:
    """Keep the digests (replaced whole); a cache directory that cannot be written only costs
    the next load its hashing."""
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(cache, json.dumps(digests).encode())
