"""The embedding cache: made on first use, safe across threads, capped, and optional."""

import contextlib
import errno
import sqlite3
import threading
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from probembed.cache import CacheStats, EmbeddingCache, disabled_advice, text_key
from probembed.gaussian import Gaussian
from probembed.interfaces.cli import app
from probembed.pipeline import Encoded, Pipeline

runner = CliRunner()
SENTENCES = [
    "A man plays a guitar.",
    "Someone is playing an instrument on stage.",
    "The stock market fell sharply on Monday.",
    "A jaguar hunts caimans in the wetlands.",
    "Mutations in BRCA1 raise cancer risk.",
    "Two dogs run across a snowy field.",
    "The recipe needs three eggs and flour.",
    "Rain is expected over the weekend.",
]


def _gaussians(n: int, dim: int, seed: int) -> Gaussian:
    rng = np.random.default_rng(seed)
    return Gaussian(rng.normal(size=(n, dim)), rng.random((n, dim)))


def _threads(work, jobs):
    """Run work(job) for each job in its own thread; returns results and any exceptions."""
    results, errors = [None] * len(jobs), []

    def run(i):
        try:
            results[i] = work(jobs[i])
        except Exception as exc:  # collected: an exception in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def test_cache_file_is_made_on_first_use_not_construction(hash_pipeline, tmp_path):
    directory = tmp_path / "cache"
    pipe = Pipeline(hash_pipeline.members, cache=EmbeddingCache(directory))
    assert not directory.exists()
    assert pipe.cache.info().entries == 0 and not directory.exists()
    pipe.encode(SENTENCES[:3])
    assert (directory / "embeddings.sqlite").is_file()
    assert pipe.cache.info().entries == 3 * len(pipe.members)


def test_a_cached_pipeline_shared_by_two_threads_matches_sequential_encodes(
    hash_pipeline, tmp_path
):
    jobs = [SENTENCES[:4], SENTENCES[4:]]
    reference = [hash_pipeline.encode(texts) for texts in jobs]
    shared = Pipeline(hash_pipeline.members, cache=EmbeddingCache(tmp_path))
    for _ in range(3):  # first round encodes and stores, later rounds read back
        results, errors = _threads(shared.encode, jobs)
        assert errors == []
        for got, want in zip(results, reference, strict=True):
            # the hash encoder's rows do not depend on the other rows: same texts, same batch
            np.testing.assert_allclose(got.gaussian.mean, want.gaussian.mean, rtol=1e-6)
            np.testing.assert_allclose(got.gaussian.var, want.gaussian.var, rtol=1e-6)


def test_minilm_hook_encoder_shared_by_two_threads_matches_sequential_encodes(default_pipeline):
    minilm = next(
        m for m in default_pipeline.members if m.encoder.name == "minilm"
    )  # the hooked one
    pipe = Pipeline([minilm], cache=False)
    jobs = [SENTENCES[:4], SENTENCES[4:] + SENTENCES[:2]]
    reference = [pipe.encode(texts) for texts in jobs]
    for _ in range(4):  # several rounds so the two threads' forward passes overlap
        results, errors = _threads(pipe.encode, jobs)
        assert errors == []
        for got, want in zip(results, reference, strict=True):
            # Same batches as the reference, so only float32 re-association can differ: the
            # issue measured <= 6.6e-7 between batch compositions. Activations mixed between
            # threads would give another text's variance, off by tens of percent.
            np.testing.assert_allclose(got.gaussian.mean, want.gaussian.mean, atol=1e-5)
            np.testing.assert_allclose(got.gaussian.var, want.gaussian.var, rtol=1e-4)


def test_cache_statistics_count_texts_found_missed_and_stored(hash_pipeline, tmp_path):
    """What a run read from the cache and what it added to it, per model key."""
    pipe = Pipeline(hash_pipeline.members, cache=EmbeddingCache(tmp_path / "cache"))
    k = len(pipe.members)
    pipe.encode(SENTENCES[:3])
    assert pipe.cache.stats == CacheStats(hits=0, misses=3 * k, stored=3 * k)
    pipe.encode(SENTENCES[:5])
    assert pipe.cache.stats == CacheStats(hits=3 * k, misses=5 * k, stored=5 * k)


def test_gaussians_encoded_elsewhere_are_taken_and_stored_and_the_rest_encoded(
    hash_pipeline, tmp_path
):
    """`encoded` (a Ray actor's output) stands in for encoding what the cache lacks; a text it
    lacks too (a cache entry let go after the work was sent out) is encoded here."""
    pipe = Pipeline(hash_pipeline.members, cache=EmbeddingCache(tmp_path / "cache"))
    texts = SENTENCES[:4]
    pipe.encode_members(texts[:1])  # cached already: read from the cache, not from `encoded`
    made = hash_pipeline.encode_lacking(texts[:3], np.ones((3, len(pipe.members)), bool))
    marked = [Encoded(e.texts, Gaussian(e.gaussian.mean, 2 * e.gaussian.var)) for e in made]
    got = pipe.encode_members(texts, encoded=marked)
    want = hash_pipeline.encode_members(texts)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.mean, w.mean)
        np.testing.assert_array_equal(g.var[[0, 3]], w.var[[0, 3]])
        np.testing.assert_array_equal(g.var[1:3], 2 * w.var[1:3])
    k = len(pipe.members)
    assert pipe.cache.stats.stored == 4 * k  # the first text's, then the other three's
    again = pipe.encode_members(texts)
    np.testing.assert_array_equal(again[0].var[1:3], 2 * want[0].var[1:3])  # stored as taken


def test_unwritable_cache_directory_falls_back_to_no_cache_with_a_warning(hash_pipeline, tmp_path):
    # A directory below a regular file can never be created, even by root (unlike chmod).
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    directory = blocker / "cache"
    pipe = Pipeline(hash_pipeline.members, cache=EmbeddingCache(directory))
    with pytest.warns(RuntimeWarning, match=f"embedding cache at {directory} disabled") as said:
        fused = pipe.encode(SENTENCES)
    assert "Set $PROBEMBED_CACHE_DIR to a writable directory" in str(said[0].message)
    assert not pipe.cache.enabled
    np.testing.assert_array_equal(
        fused.gaussian.mean, hash_pipeline.encode(SENTENCES).gaussian.mean
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not on every call
        pipe.encode(SENTENCES[:2])


def _sqlite_full() -> sqlite3.Error:
    """SQLite's own error for a full disk, as a write on one raises it."""
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = sqlite3.SQLITE_FULL
    return exc


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        _sqlite_full(),
    ],
)
def test_a_cache_turned_off_by_a_full_disk_asks_for_space_not_a_writable_directory(exc):
    """A full disk was told to set $PROBEMBED_CACHE_DIR to a writable directory, which the
    one it had already was."""
    advice = disabled_advice(exc)
    assert advice.startswith("Its disk is full: free space there")
    assert "$PROBEMBED_CACHE_MAX_BYTES" in advice and "writable" not in advice
    other = disabled_advice(sqlite3.OperationalError("attempt to write a readonly database"))
    assert other == "Set $PROBEMBED_CACHE_DIR to a writable directory to cache embeddings."


def test_a_corrupted_cache_file_turns_the_cache_off_with_a_warning(hash_pipeline, tmp_path):
    cache = EmbeddingCache(tmp_path / "cache")
    pipe = Pipeline(hash_pipeline.members, cache=cache)
    pipe.encode([f"{s} {i}" for i in range(300) for s in SENTENCES[:2]])  # a few pages of rows
    pipe.cache.close()
    raw = cache.path.read_bytes()  # the schema page stays, every page of rows is garbage
    cache.path.write_bytes(raw[:4096] + b"\xff" * (len(raw) - 4096))
    fresh = Pipeline(hash_pipeline.members, cache=EmbeddingCache(tmp_path / "cache"))
    with pytest.warns(RuntimeWarning, match="embedding cache at .* disabled"):
        fused = fresh.encode(SENTENCES)
    assert not fresh.cache.enabled
    np.testing.assert_array_equal(
        fused.gaussian.mean, hash_pipeline.encode(SENTENCES).gaussian.mean
    )


def test_a_text_with_a_lone_surrogate_is_keyed_like_any_other(tmp_path):
    """Encoders refuse such text, but the cache is keyed by any str and never fails on one."""
    cache = EmbeddingCache(tmp_path / "cache")
    text = "broken \ud800 surrogate"
    cache.put("m", [text], _gaussians(1, 8, 0))
    found, gaussian = cache.get("m", [text, "broken  surrogate"])
    assert found.tolist() == [True, False] and gaussian is not None
    np.testing.assert_array_equal(gaussian.mean, _gaussians(1, 8, 0).mean.astype(np.float32))
    assert text_key(text) != text_key("broken  surrogate")


def test_a_pipeline_refuses_a_lone_surrogate_by_position(hash_pipeline):
    says = r"texts\[1\] is not valid Unicode.*'\\ud800' at position 7"
    with pytest.raises(ValueError, match=says):
        hash_pipeline.encode(["fine", "broken \ud800 surrogate"])


def test_size_cap_evicts_least_recently_used_entries(tmp_path):
    probe = EmbeddingCache(tmp_path / "probe")
    probe.put("m", [f"x{i}" for i in range(50)], _gaussians(50, 384, 0))
    batch_bytes = probe.info().bytes
    cache = EmbeddingCache(tmp_path / "capped", max_bytes=int(2.5 * batch_bytes))
    batches = {name: [f"{name}{i}" for i in range(50)] for name in "abc"}
    cache.put("m", batches["a"], _gaussians(50, 384, 1))
    cache.put("m", batches["b"], _gaussians(50, 384, 2))
    assert cache.get("m", batches["a"])[0].all()  # a is now more recently used than b
    cache.put("m", batches["c"], _gaussians(50, 384, 3))  # past the cap: evict
    assert cache.info().bytes <= cache.max_bytes
    assert cache.get("m", batches["a"])[0].all()
    assert cache.get("m", batches["c"])[0].all()
    assert not cache.get("m", batches["b"])[0].all()


def test_cache_max_bytes_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBEMBED_CACHE_MAX_BYTES", "12345")
    assert EmbeddingCache(tmp_path).max_bytes == 12345
    monkeypatch.setenv("PROBEMBED_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match=r"\$PROBEMBED_CACHE_MAX_BYTES must be a whole number"):
        EmbeddingCache(tmp_path)


def _old_format_cache(path):
    """A cache file as the previous release wrote it (no `used`, no `label`), holding one entry."""
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE gaussians (model TEXT, text BLOB, dim INTEGER,"
        " mean BLOB, var BLOB, PRIMARY KEY (model, text))"
    )
    g = _gaussians(1, 4, 0)
    old.execute(
        "INSERT INTO gaussians VALUES (?, ?, ?, ?, ?)",
        ("m", text_key("old"), 4, g.mean[0].tobytes(), g.var[0].tobytes()),
    )
    old.commit()
    old.close()
    return g


def test_a_cache_file_of_the_previous_format_is_read_and_migrated(tmp_path):
    g = _old_format_cache(tmp_path / "embeddings.sqlite")
    cache = EmbeddingCache(tmp_path)
    found, hits = cache.get("m", ["old"])
    assert found.tolist() == [True]
    np.testing.assert_array_equal(hits.mean, g.mean)
    cache.put("m", ["new"], _gaussians(1, 4, 1), label="toy (laplace)")
    assert cache.info().entries == 2


def test_cli_cache_info_and_clear(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(directory))
    result = runner.invoke(app, ["cache", "info"])
    assert result.exit_code == 0, result.output
    assert "0 entries" in result.output and not directory.exists()
    cache = EmbeddingCache(directory)
    cache.put("fp-a", ["one", "two", "three"], _gaussians(3, 8, 0), label="minilm (laplace)")
    cache.put("fp-b", ["one"], _gaussians(1, 8, 1), label="wordllama (laplace)")
    cache.close()
    result = runner.invoke(app, ["cache", "info"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())  # table cells, borders dropped
    assert str(directory / "embeddings.sqlite") in "".join(result.output.split())
    assert "4 entries" in text
    assert "minilm (laplace) fp-a 3 192" in text  # 3 rows x 8 dims x 4 bytes x (mean, var)
    assert "wordllama (laplace) fp-b 1 64" in text
    result = runner.invoke(app, ["cache", "clear"])
    assert result.exit_code == 0, result.output
    assert "removed 4 entries" in result.output
    assert EmbeddingCache(directory).info().entries == 0


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_clearing_a_damaged_cache_deletes_the_file_and_the_cache_works_again(
    tmp_path, monkeypatch, damage
):
    """`cache clear` failed on the file it is there to clear, and every run warned until the
    user deleted it by hand."""
    directory = tmp_path / "cache"
    cache = EmbeddingCache(directory)
    cache.put("m", [f"text {i}" for i in range(400)], _gaussians(400, 64, 0))
    cache.close()
    raw = cache.path.read_bytes()
    bad = b"not a database, " * 64 if damage == "garbage" else raw[:4096] + b"\xff" * 8192
    cache.path.write_bytes(bad)
    monkeypatch.setenv("PROBEMBED_CACHE_DIR", str(directory))
    result = runner.invoke(app, ["cache", "clear"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "it was damaged" in said and "warning: embedding cache at" in said  # one line each
    fresh = EmbeddingCache(directory)
    fresh.put("m", ["again"], _gaussians(1, 8, 0))
    assert fresh.enabled and fresh.info().entries == 1


def test_cache_info_reads_an_old_file_without_migrating_it(tmp_path):
    path = tmp_path / "embeddings.sqlite"
    _old_format_cache(path)
    info = EmbeddingCache(tmp_path).info()
    assert info.entries == 1 and info.models[0].label is None
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(gaussians)")}
    assert "used" not in columns  # asking changed nothing


def test_a_damaged_cache_row_is_encoded_again_and_overwritten(hash_pipeline, tmp_path):
    cache = EmbeddingCache(tmp_path / "cache")
    pipe = Pipeline(hash_pipeline.members, cache=cache)
    expected = pipe.encode(SENTENCES[:3]).gaussian.mean
    model = pipe.members[0].fingerprint
    cache.close()
    with sqlite3.connect(cache.path) as db:  # one row cut short, one of another width
        db.execute(
            "UPDATE gaussians SET mean=substr(mean, 1, 8) WHERE text=?", (text_key(SENTENCES[0]),)
        )
        db.execute("UPDATE gaussians SET dim=dim + 1 WHERE text=?", (text_key(SENTENCES[1]),))
    found, _ = cache.get(model, SENTENCES[:3])
    assert found.tolist() == [False, False, True]
    np.testing.assert_array_equal(pipe.encode(SENTENCES[:3]).gaussian.mean, expected)
    assert cache.get(model, SENTENCES[:3])[0].all()  # the two rows were written again


@pytest.mark.parametrize("column", ["mean", "var"])
def test_a_cache_row_of_non_finite_or_negative_values_is_a_miss(hash_pipeline, tmp_path, column):
    """Bytes of the right length that decode to NaN (or a negative variance) are damage too."""
    cache = EmbeddingCache(tmp_path / "cache")
    pipe = Pipeline(hash_pipeline.members, cache=cache)
    expected = pipe.encode(SENTENCES[:3])
    model = pipe.members[0].fingerprint
    cache.close()
    dim = pipe.members[0].encoder.dim  # the right length: only the values are damaged
    nan, negative = np.full(dim, np.nan, np.float32), np.full(dim, -1.0, np.float32)
    with sqlite3.connect(cache.path) as db:
        db.execute(f"UPDATE gaussians SET {column}=? WHERE model=? AND text=?",
                   (nan.tobytes(), model, text_key(SENTENCES[0])))  # fmt: skip
        if column == "var":
            db.execute("UPDATE gaussians SET var=? WHERE model=? AND text=?",
                       (negative.tobytes(), model, text_key(SENTENCES[2])))  # fmt: skip
    found, gaussian = cache.get(model, SENTENCES[:3])
    assert found.tolist() == [False, True, column == "mean"]
    assert gaussian is not None and len(gaussian) == found.sum()
    again = pipe.encode(SENTENCES[:3])
    np.testing.assert_array_equal(again.gaussian.mean, expected.gaussian.mean)
    np.testing.assert_array_equal(again.gaussian.var, expected.gaussian.var)
    assert cache.get(model, SENTENCES[:3])[0].all()  # written again


def test_the_write_ahead_log_is_cut_back_once_no_other_process_reads_it(tmp_path):
    """Another process in the middle of a read keeps SQLite from resetting the log, which
    grows past the cap; once it is done, the next writes reset it to _WAL_LIMIT at most."""
    from probembed.cache import _WAL_LIMIT

    cache = EmbeddingCache(tmp_path, max_bytes=2 * 1024**2)
    cache.put("m", ["first"], _gaussians(1, 384, 0))
    wal = cache.path.with_name(cache.path.name + "-wal")
    other = sqlite3.connect(cache.path, isolation_level=None)
    other.execute("BEGIN")
    other.execute("SELECT COUNT(*) FROM gaussians").fetchone()  # holds its snapshot
    for step in range(60):  # 60 x 64 rows of 3 kB: about 12 MB through the log
        cache.put("m", [f"s{step} t{i}" for i in range(64)], _gaussians(64, 384, step))
    assert wal.stat().st_size > 2 * _WAL_LIMIT  # nothing could be reset under the snapshot
    other.execute("COMMIT")
    other.close()
    cache.put("m", ["after"], _gaussians(1, 384, 1))  # copies the whole log into the file
    cache.put("m", ["after, again"], _gaussians(1, 384, 2))  # resets the log and cuts it back
    assert wal.stat().st_size <= _WAL_LIMIT
    assert cache.info().bytes <= cache.max_bytes


def test_a_few_rows_wait_in_the_log_and_a_megabyte_is_copied_into_the_file(tmp_path):
    """A checkpoint syncs the file to disk: a put of a few rows (a service's request) leaves
    them in the log, read from there as ever; once a megabyte has come, the log is copied."""
    cache = EmbeddingCache(tmp_path)

    def rows_in_the_file() -> int:
        """Rows the database file itself holds, the log aside."""
        uri = f"file:{cache.path}?immutable=1"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            try:
                return db.execute("SELECT COUNT(*) FROM gaussians").fetchone()[0]
            except sqlite3.OperationalError:  # not even the table is copied yet
                return 0

    cache.put("m", ["one"], _gaussians(1, 384, 0))
    assert cache.get("m", ["one"])[0].all() and rows_in_the_file() == 0
    for step in range(6):  # 6 x 64 rows of 3 kB: past the megabyte
        cache.put("m", [f"s{step} t{i}" for i in range(64)], _gaussians(64, 384, step))
    assert rows_in_the_file() == 1 + 6 * 64


def _files_holding(directory, needle: bytes) -> list:
    """The cache's files (the database, its log) whose bytes hold `needle`."""
    return sorted(p.name for p in directory.iterdir() if needle in p.read_bytes())


def test_forgetting_texts_leaves_no_byte_of_them_in_the_file_or_its_log(tmp_path):
    """An erasure's eviction: a delete leaves the rows in freed pages and in the write-ahead
    log, and an entry evicted earlier (the cap) in a free page as well."""
    directory = tmp_path / "cache"
    cache = EmbeddingCache(directory, max_bytes=64 * 1024)
    secret = "Jane Roe of 12 Elm Street asked to be forgotten"
    first = _gaussians(1, 64, 0)
    cache.put("fp-a", [secret], first)
    cache.put("fp-a", [f"filler {i}" for i in range(400)], _gaussians(400, 64, 1))
    assert not cache.get("fp-a", [secret])[0].any()  # evicted by the cap, its page freed
    again = _gaussians(1, 64, 2)
    cache.put("fp-a", [secret, *SENTENCES[:2]], Gaussian.concat([again, _gaussians(2, 64, 3)]))
    cache.put("fp-b", [secret], _gaussians(1, 64, 4))
    needles = [text_key(secret), first.mean[0].tobytes(), again.mean[0].tobytes()]
    assert all(_files_holding(directory, n) for n in needles)

    assert cache.forget([secret, "never cached"]) == 2

    assert [n for n in needles if _files_holding(directory, n)] == []
    assert not cache.get("fp-a", [secret])[0].any() and not cache.get("fp-b", [secret])[0].any()
    assert cache.get("fp-a", SENTENCES[:2])[0].all()


def test_clearing_leaves_no_entry_in_the_log(tmp_path):
    """`cache clear` emptied the table and the file, and left the entries' pages in the log."""
    directory = tmp_path / "cache"
    cache = EmbeddingCache(directory)
    cache.put("m", SENTENCES, _gaussians(len(SENTENCES), 64, 0))
    assert cache.clear() == len(SENTENCES)
    assert [s for s in SENTENCES if _files_holding(directory, text_key(s))] == []
