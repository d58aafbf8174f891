"""Documents into passages that fit every model of a pipeline: structure first, then tokens."""

from probembed.chunking.chunker import Chunk, ChunkSettings, Segment, chunk_text, stream_chunks
from probembed.chunking.structure import (
    HeadingTracker,
    Section,
    joins_next,
    last_paragraph_break,
    markdown_sections,
    plain_sections,
)

__all__ = [
    "Chunk",
    "ChunkSettings",
    "HeadingTracker",
    "Section",
    "Segment",
    "chunk_text",
    "joins_next",
    "last_paragraph_break",
    "markdown_sections",
    "plain_sections",
    "stream_chunks",
]
