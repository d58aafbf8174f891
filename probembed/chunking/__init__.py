"""Documents into passages that fit every model of a pipeline: structure first, then tokens."""

from probembed.chunking.chunker import Chunk, ChunkSettings, chunk_text
from probembed.chunking.structure import Section, markdown_sections, plain_sections

__all__ = [
    "Chunk",
    "ChunkSettings",
    "Section",
    "chunk_text",
    "markdown_sections",
    "plain_sections",
]
