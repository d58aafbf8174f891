"""Counting a text's tokens with a Hugging Face `tokenizers` tokenizer, as chunking needs.

The encoders' own tokenizers truncate and pad; a counting copy does neither, so a chunk that
is too long shows its true length instead of the limit.
"""

from __future__ import annotations

from tokenizers import Tokenizer


def counting_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of the tokenizer that neither truncates nor pads, to count a text's tokens."""
    counter = Tokenizer.from_str(tokenizer.to_str())
    counter.no_truncation()
    counter.no_padding()
    return counter


def count_tokens(counter: Tokenizer, texts: list[str]) -> list[int]:
    """Tokens per text, [CLS] and [SEP] included, with a `counting_tokenizer`."""
    return [len(e.ids) for e in counter.encode_batch(texts)]
