"""Documents into passages that fit every model of a pipeline: structure first, then tokens."""

from probembed.chunking.chunker import (
    CHARS_PER_TOKEN,
    Chunk,
    ChunkSettings,
    GivenChunking,
    Segment,
    chunk_text,
    stoppable,
    stream_chunks,
)
from probembed.chunking.structure import (
    FRONT_MATTER_CHARS,
    FRONT_MATTER_LINES,
    LINE_CHARS,
    FrontMatter,
    HeadingTracker,
    Section,
    front_matter,
    joins_next,
    last_paragraph_break,
    line_cuts,
    markdown_sections,
    plain_sections,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "FRONT_MATTER_CHARS",
    "FRONT_MATTER_LINES",
    "LINE_CHARS",
    "Chunk",
    "ChunkSettings",
    "FrontMatter",
    "GivenChunking",
    "HeadingTracker",
    "Section",
    "Segment",
    "chunk_text",
    "front_matter",
    "joins_next",
    "last_paragraph_break",
    "line_cuts",
    "markdown_sections",
    "plain_sections",
    "stoppable",
    "stream_chunks",
]
