"""Chunking: exact slices, within the token budget, covering every word, deterministic."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probembed.chunking import (
    FRONT_MATTER_LINES,
    ChunkSettings,
    Segment,
    chunk_text,
    front_matter,
    line_cuts,
    markdown_sections,
    plain_sections,
    stream_chunks,
)
from probembed.chunking.structure import in_code, paragraphs, trimmed
from probembed.encoders.base import is_invisible
from probembed.evaluation.chunked import chunk_corpus

WORD = re.compile(r"\S+")


def word_counter(texts):
    """Words plus 2 special tokens, like [CLS] ... [SEP]: adds up exactly over joins."""
    return [len(t.split()) + 2 for t in texts]


words = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
#: Sentence ends with the quotes and brackets that close them, which belong to the sentence.
ENDS = (".", ".)", '!"', "?\u201d", ".]", "?')")
sentence = st.tuples(st.lists(words, min_size=1, max_size=40), st.sampled_from(ENDS)).map(
    lambda parts: " ".join(parts[0]) + parts[1]
)
paragraph = st.lists(sentence, min_size=1, max_size=6).map(" ".join)
document = st.lists(paragraph, min_size=1, max_size=8).map("\n\n".join)


@given(document, st.integers(8, 64), st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_chunks_are_exact_slices_within_budget_covering_every_word(text, size, overlap):
    config = ChunkSettings(size, min(overlap, size // 2 - 1))
    chunks = chunk_text(text, plain_sections(text), word_counter, config)
    assert chunks and [c.index for c in chunks] == list(range(len(chunks)))
    covered = set()
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.tokens == word_counter([chunk.text])[0] <= size
        covered |= set(range(chunk.start, chunk.end))
    # every character but whitespace is in a chunk (closing quotes and brackets were lost)
    assert {i for i, c in enumerate(text) if not c.isspace()} <= covered
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)
    assert chunk_text(text, plain_sections(text), word_counter, config) == chunks


@given(document)
@settings(max_examples=50, deadline=None)
def test_overlap_repeats_at_most_the_overlap(text):
    config = ChunkSettings(24, 6)
    chunks = chunk_text(text, plain_sections(text), word_counter, config)
    for before, after in itertools.pairwise(chunks):
        shared = max(0, before.end - after.start)
        assert len(text[after.start : after.start + shared].split()) <= config.overlap_tokens
        assert after.end > before.end  # never a chunk of nothing but the repeated words


@given(document, st.integers(8, 40))
@settings(max_examples=100, deadline=None)
def test_crlf_line_ends_cut_where_lf_line_ends_do(text, size):
    """A file saved on Windows is chunked as the same file with LF line ends."""
    config = ChunkSettings(size, 2)
    lf = chunk_text(text, plain_sections(text), word_counter, config)
    crlf_text = text.replace("\n", "\r\n")
    crlf = chunk_text(crlf_text, plain_sections(crlf_text), word_counter, config)
    assert [c.text.split() for c in crlf] == [c.text.split() for c in lf]


def piece_counter(texts):
    """Tokens of at most 4 characters, as a subword tokenizer cuts a long word."""
    return [sum(-(-len(w) // 4) for w in t.split()) + 2 for t in texts]


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.org/" + "a-very-long-path-segment/" * 40 + " for details",
        "機械学習は" * 120 + "。短い文です。",  # unspaced CJK: one "word" until a full stop
    ],
)
def test_a_word_longer_than_the_budget_is_cut_within_it(text):
    """Every chunk fits the model, however long a single word is, and no character is lost."""
    chunks = chunk_text(text, plain_sections(text), piece_counter, ChunkSettings(16, 0))
    assert all(c.tokens == piece_counter([c.text])[0] <= 16 for c in chunks)
    assert "".join(c.text.replace(" ", "") for c in chunks) == text.replace(" ", "")


def test_cutting_a_long_word_tokenizes_it_a_bounded_number_of_times():
    """A minified line or base64 blob: each cut bisected over the whole rest of the word, so
    the text sent to the tokenizer grew with the square of its length (22.6 M characters for
    200,000). Counted, not timed."""
    sent = []

    def counting(texts):
        sent.append(sum(map(len, texts)))
        return piece_counter(texts)

    for n in (50_000, 100_000):
        sent.clear()
        text = "x" * n
        chunks = chunk_text(text, plain_sections(text), counting, ChunkSettings(256, 32))
        assert "".join(c.text for c in chunks) == text
        assert sum(sent) < 20 * n  # 16 n here at both lengths; the bisection sent 64 n at 100,000


def test_a_long_word_is_never_cut_between_a_letter_and_its_accent():
    """e + U+0301 written out, no spaces: 4 of 9 pieces began with a lone combining mark."""
    word = "e\u0301" * 30

    def per_code_point(texts):
        return [len(t) + 2 for t in texts]

    chunks = chunk_text(word, plain_sections(word), per_code_point, ChunkSettings(9, 0))
    assert "".join(c.text for c in chunks) == word and len(chunks) > 5
    assert all(c.text[0] == "e" and c.tokens <= 9 for c in chunks)


@pytest.mark.parametrize(
    ("word", "grapheme"),
    [
        ("\u0915\u093f" * 20, "\u0915\u093f"),  # Devanagari: a spacing vowel sign, combining() 0
        ("\u2764\ufe0f" * 20, "\u2764\ufe0f"),  # an emoji and its variation selector
        ("\U0001f468\u200d\U0001f469" * 10, "\U0001f468\u200d\U0001f469"),  # joined by a ZWJ
    ],
)
def test_a_long_word_is_cut_only_between_whole_characters(word, grapheme):
    """Pieces began with a dependent vowel sign, a variation selector or a joined emoji."""

    def per_code_point(texts):
        return [len(t) + 2 for t in texts]

    chunks = chunk_text(word, plain_sections(word), per_code_point, ChunkSettings(9, 0))
    assert "".join(c.text for c in chunks) == word and len(chunks) > 2
    assert all(len(c.text) % len(grapheme) == 0 and c.text.startswith(grapheme) for c in chunks)


@given(document, st.integers(8, 64), st.sampled_from(["\u200b", "\u200e", "\u2060", "\ufeff"]))
@settings(max_examples=100, deadline=None)
def test_no_chunk_is_only_invisible_characters(text, size, invisible):
    """A paragraph of zero-width spaces alone was a chunk, which ingest refused as empty
    (and with it the whole document)."""
    from probembed.encoders.base import is_blank

    parts = text.split("\n\n")
    text = f"\n\n{invisible * 3}\n\n".join(parts) + f"\n\n{invisible}"
    chunks = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(size, 0))
    assert chunks and not any(is_blank(c.text) for c in chunks)
    assert all(c.text == text[c.start : c.end] for c in chunks)
    visible = {i for i, c in enumerate(text) if not is_blank(c)}
    assert visible <= {i for c in chunks for i in range(c.start, c.end)}


def test_cjk_sentences_end_at_their_full_stops():
    text = "一二三四五六七八。" * 6
    chunks = chunk_text(text, plain_sections(text), piece_counter, ChunkSettings(8, 0))
    assert [c.text for c in chunks] == ["一二三四五六七八。" * 2] * 3  # whole sentences, packed
    quoted = "彼は「はい。」と言った。" * 3 + "最後に「終わり。」"
    chunks = chunk_text(quoted, plain_sections(quoted), piece_counter, ChunkSettings(8, 0))
    assert "".join(c.text for c in chunks) == quoted  # the closing 」 stays with its sentence


MARKDOWN = """Intro line.

# Guide

Some words.

## Install

```sh
# not a heading: inside a fence
pip install x
```

### Linux

Use apt.

## Use

Call it.
"""


def test_markdown_sections_keep_the_heading_path_and_ignore_fences():
    sections = markdown_sections(MARKDOWN)
    paths = [s.headings for s in sections]
    assert paths == [
        (),
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "Linux"),
        ("Guide", "Use"),
    ]
    assert "# not a heading" in MARKDOWN[sections[2].start : sections[2].end]
    assert sections[-1].end == len(MARKDOWN)
    chunks = chunk_text(MARKDOWN, sections, word_counter, ChunkSettings(64, 0))
    assert [c.headings for c in chunks] == paths  # each section is small: one chunk each


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("# A\n~~~md\n```py\n# no\n```\n# no\n~~~\n# B\n", [("A",), ("B",)]),
        ("# A\n````md\n```\n# no\n```\n````\n## B\n", [("A",), ("A", "B")]),
        ("\ufeff# Title\nintro\n## Part\ntext\n", [("Title",), ("Title", "Part")]),
        ("# A\r\n```\r\n# no\r\n```\r\n# B\r\n", [("A",), ("B",)]),
        ("# A\n#  \ntext\n## B\n", [("A",), ("A", "B")]),
    ],
)
def test_fences_close_only_on_their_own_kind_and_a_bom_hides_no_heading(text, paths):
    """A fence shown inside a longer or other fence stays code (CommonMark); a byte order mark
    before the first heading is looked past."""
    assert [s.headings for s in markdown_sections(text)] == paths


@pytest.mark.parametrize(
    "opening", ["```x``` starts this line as inline code.", "``` py`3 (no fence: a backtick)"]
)
def test_a_backtick_run_with_a_backtick_after_it_opens_no_fenced_block(opening):
    """CommonMark: a backtick fence's info string holds no backtick, so a line starting with
    inline code in triple backticks is text. It opened an unclosed fence: the rest of the
    document was one code block, its headings lost and cut at lines."""
    text = f"# A\n\n{opening}\n\nWords. More words.\n\n## B\n\nEnd.\n"
    sections = markdown_sections(text)
    assert [(s.headings, s.code) for s in sections] == [(("A",), ()), (("A", "B"), ())]


@pytest.mark.parametrize(
    ("text", "paths", "first"),
    [
        ("# A\n\n## B\ntext\n## C\n## D\nx\n", [("A", "B"), ("A", "D")], 0),
        ("intro\n# A\n## B\n\n### C\nx\n", [(), ("A", "B", "C")], 0),
        ("# A\n" + "word " * 300 + "\n## B\nx\n", [("A",), ("A", "B")], 0),
        ("# A\n# B\ntext\n", [("B",)], 0),
        ("### A\n# B\ntext\n# C\n", [("B",), ("C",)], 0),
    ],
)
def test_a_heading_with_nothing_under_it_joins_the_next_section(text, paths, first):
    """No chunk is a bare heading but one that ends the document: `# A` then `## B` is one
    section under A > B that starts at `# A`, and so is an empty heading followed by a sibling
    (`## C` then `## D`) or a shallower one (a sibling stayed a chunk of its heading alone)."""
    sections = markdown_sections(text)
    assert [s.headings for s in sections] == paths and sections[0].start == first
    assert "".join(text[s.start : s.end] for s in sections) == text


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        (
            "intro\n\nGuide\n=====\n\ntext\n\nInstall\n---\ntext\n",
            [(), ("Guide",), ("Guide", "Install")],
        ),
        ("# A\ntext\n\nB\n--\nx\n", [("A",), ("A", "B")]),  # after a paragraph's blank line
        ("para\n\n---\n\ntext\n", [()]),  # a thematic break
        ("line one\nline two\n===\n\nx\n", [()]),  # two lines: not taken as a title
        ("- item\n---\n\n> quote\n===\n\n    code\n---\nx\n", [()]),
        ("```\nTitle\n---\n```\nx\n", [()]),  # in a fence
        ("===\n\nx\n", [()]),
        ("---\ntitle: Page\n---\n\nBody\n===\ntext\n", [(), ("Body",)]),  # front matter
        ("# Guide\n\n#\n===\n\ntext\n", [("Guide",)]),  # `#` alone is no title to underline
    ],
)
def test_an_underlined_line_is_a_heading_and_front_matter_in_no_section(text, paths):
    """Setext headings (`Title` over `===` or `---`) open sections as `#` ones do, for a
    one-line paragraph only; a page's YAML front matter is in no section (its closing `---`
    would underline its last key)."""
    sections = markdown_sections(text)
    assert [s.headings for s in sections] == paths
    front = text.index("\n---\n", 1) + 5 if text.startswith("---\ntitle") else 0
    assert sections[0].start == front and sections[-1].end == len(text)
    assert "".join(text[s.start : s.end] for s in sections) == text[front:]


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ('---\ntitle: "A: \\"quoted\\""  # note\n---\nx', 'A: "quoted"'),
        ("---\nlayout: post\ntitle: 'It''s here'\n---\nx", "It's here"),
        ("---\ntitle: C# in a day # a comment\n---\nx", "C# in a day"),
        ("---\ntitle: >-\n  folded\n---\nx", "folded"),  # YAML's folded block scalar
        ("---\ntitle: >\n  A long title\n  on two lines\ndate: 2024-01-01\n---\nx",
         "A long title on two lines"),
        ("---\r\ntitle: >2 # a comment\r\n  One\r\n\r\n  Two\r\n---\r\nx", "One\nTwo"),
        ("---\ntitle: >\nlayout: post\n---\nx", None),  # folded, but empty
        ("---\ntitle: |\n  literal\n---\nx", None),  # a literal block: not read
        ("\ufeff---\r\ntitle: Windows\r\n...\r\nx", "Windows"),
    ],
)  # fmt: skip
def test_front_matter_gives_its_title(text, title):
    found = front_matter(text)
    assert found is not None and found.title == title and text[found.end :] == text[-1:]


@pytest.mark.parametrize(
    "text",
    [
        "---\n\nThis intro paragraph matters.\n\n---\n\n## Usage\n\nRun it.\n",
        "---\nSummary line one\n...\n\n# Title\n",
    ],
)
def test_a_rule_over_a_paragraph_is_not_front_matter(text):
    """A page opening with a thematic break lost everything up to the next one, in no chunk
    (found by a reviewer); front matter starts with a `key:` line, as Pandoc and MkDocs read it."""
    assert front_matter(text) is None
    sections = markdown_sections(text)
    assert sections[0].start == 0 and "".join(text[s.start : s.end] for s in sections) == text


def test_front_matter_must_close_within_its_bounds():
    assert front_matter("---\ntitle: x\nno closing line\n") is None
    long = "---\n" + "k: v\n" * FRONT_MATTER_LINES + "---\nx"
    assert front_matter(long) is None and markdown_sections(long)[0].start == 0
    assert front_matter("---\n" + "k: v\n" * (FRONT_MATTER_LINES - 2) + "---\nx") is not None


def test_a_closing_run_of_hashes_counts_only_after_a_space():
    """`## C#` is the heading "C#" (CommonMark), `## Go ##` is "Go"."""
    text = "# Languages\n\nintro\n\n## C#\n\ncode\n\n## Go ##\n\nmore\n"
    assert [s.headings for s in markdown_sections(text)] == [
        ("Languages",),
        ("Languages", "C#"),
        ("Languages", "Go"),
    ]


def test_a_sentence_longer_than_the_budget_is_cut_into_word_runs():
    text = " ".join(f"w{i}" for i in range(100))  # no sentence end, one paragraph
    chunks = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(12, 0))
    assert all(c.tokens <= 12 for c in chunks) and len(chunks) == 10


@pytest.mark.parametrize(
    ("size", "overlap"), [(4, 0), (32, 16), (32, -1), (True, 0), (32, 2.0), (32, True)]
)
def test_bad_settings_are_named(size, overlap):
    with pytest.raises(ValueError, match="max_tokens|overlap_tokens"):
        ChunkSettings(size, overlap)


def test_default_pipeline_chunks_fit_every_member(default_pipeline):
    text = (
        "The jaguar is the largest cat species in the Americas and the third largest in the world. "
    ) * 60
    config = ChunkSettings().capped(default_pipeline.max_tokens)
    chunks = chunk_text(text, plain_sections(text), default_pipeline.count_tokens, config)
    assert len(chunks) > 1
    for member in default_pipeline.members:
        limit = member.encoder.max_tokens or config.max_tokens
        assert max(member.encoder.count_tokens([c.text for c in chunks])) <= limit


def segments_of(text, sections, cuts):
    """The sections as stream segments, each also cut at the paragraph breaks `cuts` picks
    (none inside a fenced code block, as a stream cuts none there)."""
    breaks = iter(cuts)
    for section in sections:
        start, opens = section.start, True
        for match in re.finditer(r"\n[ \t]*\n", text[section.start : section.end]):
            end = section.start + match.end()
            if in_code(section.code, (section.start + match.start(), end)):
                continue
            if next(breaks, False):
                yield Segment(
                    start, text[start:end], section.headings, opens, code_in(section, start, end)
                )
                start, opens = end, False
        end = section.end
        yield Segment(start, text[start:end], section.headings, opens, code_in(section, start, end))


def code_in(section, start, end):
    """The section's fenced code blocks that reach into text[start:end] (`Segment.code`)."""
    return tuple(block for block in section.code if block[0] < end and block[1] > start)


@given(document, st.integers(8, 48), st.integers(0, 3), st.lists(st.booleans(), max_size=60))
@settings(max_examples=200, deadline=None)
def test_streamed_segments_give_the_chunks_of_the_whole_text(text, size, overlap, cuts):
    config = ChunkSettings(size, min(overlap, size // 2 - 1))
    sections = plain_sections(text)
    whole = chunk_text(text, sections, word_counter, config)
    assert list(stream_chunks(segments_of(text, sections, cuts), word_counter, config)) == whole


@given(st.lists(st.booleans(), max_size=20))
@settings(max_examples=30, deadline=None)
def test_streamed_markdown_sections_give_the_chunks_of_the_whole_text(cuts):
    text = MARKDOWN * 3
    sections = markdown_sections(text)
    whole = chunk_text(text, sections, word_counter, ChunkSettings(8, 2))
    streamed = stream_chunks(segments_of(text, sections, cuts), word_counter, ChunkSettings(8, 2))
    assert list(streamed) == whole and len({c.headings for c in whole}) == 5


#: Where a fenced block is written: the lines before it (a list it is indented into), its
#: opening line's container markers, and what each of its later lines starts with.
CONTAINERS = [
    ("", "", ""),
    ("", "- ", "  "),
    ("", "1. ", "   "),
    ("", "10) ", "    "),
    ("", "> ", "> "),
    ("", "> * ", ">   "),
    ("", "- + ", "    "),
    ("- Step one.\n  - Sub step.\n\n", "    ", "    "),
]


@st.composite
def fenced(draw, closed=True):
    """A fenced code block with blank lines and `. ` inside (a comment, a float), ``` or ~~~,
    its closing fence at least as long; unclosed, it runs to the end of the document. It may
    sit in a list item or a quote (`CONTAINERS`): returned as the lines before it and the
    block, from its opening line's start."""
    fence = draw(st.sampled_from(["```", "~~~", "````"]))
    before, marker, prefix = draw(st.sampled_from(CONTAINERS))
    line = st.one_of(
        st.sampled_from(["", "    ", "# Read it. Parse it.", "x = 2. * y", "# no heading"]),
        st.lists(words, min_size=1, max_size=5).map(" ".join),
    )
    body = [
        prefix + text if text else prefix.rstrip()
        for text in draw(st.lists(line, min_size=1, max_size=14))
    ]
    longer = draw(st.sampled_from(["", fence[0]]))  # a closing fence may be longer
    closing = f"\n{prefix}{fence}{longer}" if closed else ""
    return before, f"{marker}{fence}py\n" + "\n".join(body) + closing


@st.composite
def markdown_with_code(draw):
    """A Markdown document of paragraphs, headings and fenced code, the code's spans (from
    the opening fence line's start to the closing fence's end, an unclosed one to the end)."""
    block = st.one_of(paragraph, fenced(), st.sampled_from(["# One", "## Two", "### Three"]))
    parts = draw(st.lists(block, min_size=1, max_size=8))
    if draw(st.booleans()):
        parts.append(draw(fenced(closed=False)))
    text, spans = "", []
    for part in parts:
        text += draw(st.sampled_from(["\n", "\n\n", "\n \n\n"])) if text else ""
        if isinstance(part, tuple):
            text += part[0]
            spans.append((len(text), len(text) + len(part[1])))
            part = part[1]
        text += part
    return text, spans


@given(markdown_with_code(), st.integers(8, 48), st.integers(0, 3), st.lists(st.booleans()))
@settings(max_examples=200, deadline=None)
def test_streamed_markdown_with_fenced_code_gives_the_chunks_of_the_whole_text(
    document, size, overlap, cuts
):
    text, _ = document
    config = ChunkSettings(size, min(overlap, size // 2 - 1))
    sections = markdown_sections(text)
    whole = chunk_text(text, sections, word_counter, config)
    assert list(stream_chunks(segments_of(text, sections, cuts), word_counter, config)) == whole


@given(markdown_with_code(), st.integers(8, 48), st.integers(20, 300))
@settings(max_examples=100, deadline=None)
def test_a_streamed_file_chunks_as_read_whole_with_code_blocks_ended_at_code_chars(
    document, size, cap
):
    """The file's own stream (`scan_file(...).segments()`, its HeadingTracker ending a long
    block at CODE_CHARS as the whole text's does) gives the chunks of the text read whole."""
    from probembed.chunking import structure
    from probembed.store import streamed

    text, _ = document
    config = ChunkSettings(size, 2)
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        patch.setattr(structure, "CODE_CHARS", cap)
        patch.setattr(streamed, "SEGMENT_CHARS", 64)  # a segment cut at most places it can be
        patch.setattr(streamed, "BLOCK_BYTES", 97)
        path = Path(folder) / "doc.md"
        path.write_bytes(text.encode("utf-8"))
        segments = streamed.scan_file(path, "doc.md").segments()
        whole = chunk_text(text, markdown_sections(text), word_counter, config)
        assert list(stream_chunks(segments, word_counter, config)) == whole


@given(markdown_with_code(), st.integers(8, 48), st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_a_fenced_block_that_fits_is_in_one_chunk_and_a_longer_one_is_cut_at_lines(
    document, size, overlap
):
    """A code block's blank lines cut it into paragraphs, so one that fit a chunk was split
    across two, and one over the budget was cut at `. ` inside a line (a comment, a float)."""
    text, spans = document
    config = ChunkSettings(size, min(overlap, size // 2 - 1))
    sections = markdown_sections(text)
    assert [block for s in sections for block in s.code] == spans
    chunks = chunk_text(text, sections, word_counter, config)
    edges = {at for c in chunks for at in (c.start, c.end)}
    for start, end in spans:
        block = text[start:end]  # less an indented fence's spaces, an unclosed one's blanks
        start, end = start + len(block) - len(block.lstrip()), start + len(block.rstrip())
        inside = [at for at in edges if start < at < end]
        if word_counter([text[start:end]])[0] <= size:
            assert inside == []
        for at in inside:  # code lines are short: every line fits the budget
            line_start = text.rfind("\n", 0, at) + 1
            line_end = text.find("\n", at) % (len(text) + 1)
            assert not text[line_start:at].strip() or not text[at:line_end].strip()


def test_a_fenced_block_with_blank_lines_is_never_split_where_it_fits():
    """The block's blank lines made two paragraphs of it, and its first half filled the
    intro's chunk; read as plain text it is cut there still."""
    code = "```python\ndef area(r):\n    return 3.14 * r * r\n\n\ndef volume(r):\n"
    code += "    return area(r) * 4. / 3\n```"
    text = f"# Shapes\n\nThe formulas below take a radius and give results.\n\n{code}\n"
    chunks = chunk_text(text, markdown_sections(text), word_counter, ChunkSettings(24, 0))
    assert [c.text for c in chunks][-1] == code and code not in chunks[0].text
    plain = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(24, 0))
    assert [c.text[-19:] for c in plain] == ["return 3.14 * r * r", code[-19:]]


def test_a_fenced_block_over_the_budget_is_cut_at_lines_not_sentence_ends():
    """A code paragraph over the budget was cut at `. ` inside its lines."""
    code = [
        "```python",
        "# Read the config file. Parse every line of it.",
        "config = read(path)",
        "keys = [k for k in config]",
        "",
        "# Scale by 2. Then round each one.",
        "scaled = [round(2. * k) for k in keys]",
        "```",
    ]
    text = "# Config\n\n" + "\n".join(code) + "\n"
    chunks = chunk_text(text, markdown_sections(text), word_counter, ChunkSettings(16, 0))
    assert len(chunks) > 2
    assert all(line in code for c in chunks for line in c.text.split("\n")[1:])
    assert {c.text.split("\n")[0] for c in chunks} <= {"# Config", *code}


def test_an_unclosed_fence_runs_to_the_end_of_the_document():
    """CommonMark: an unclosed fence is code to the end; `HeadingTracker` sees no heading in
    it, so the end of its section too."""
    text = "# Guide\n\nSetup takes a few steps on any machine.\n\n"
    text += "```sh\nmake\n\n# not a heading\n\nmake install\n"
    sections, code = markdown_sections(text), text.index("```")
    assert [(s.headings, s.code) for s in sections] == [(("Guide",), ((code, len(text)),))]
    chunks = chunk_text(text, sections, word_counter, ChunkSettings(16, 0))
    assert [c.text for c in chunks] == [text[: code - 2], text[code:].rstrip()]


def test_a_code_block_is_one_paragraph_only_up_to_code_chars(monkeypatch):
    """A fence left unclosed by mistake made the rest of the document one code block, which a
    stream held whole. Past CODE_CHARS of it, the block ends at a line start: what follows
    splits at blank lines as text does, and its `#` lines are still no headings."""
    from probembed.chunking import structure

    monkeypatch.setattr(structure, "CODE_CHARS", 64)
    text = "# Guide\n\nSetup takes a few steps.\n\n```sh\nmake\n\n# not a heading\n\n"
    text += "make all\n\n" * 12
    fence = text.index("```")
    end = text.index("\n", fence + 64) + 1  # the start of the first line 64 past the fence
    sections = markdown_sections(text)
    assert [(s.headings, s.code) for s in sections] == [(("Guide",), ((fence, end),))]
    pieces = paragraphs(text, (fence, len(text)), sections[0].code)
    first, *rest = (text[a:b] for a, b in pieces)
    assert first == text[fence:end].rstrip()
    assert rest == ["make all"] * text[end:].count("make all")
    closed = text[: fence + 40] + "\n```\n\nAfter.\n"  # a block under the cap: as before
    assert markdown_sections(closed)[0].code == ((fence, closed.index("```\n\nAfter") + 3),)


LIST_FENCES = """# Install

1. Install it:

   ```bash
   # from PyPI
   pip install x
   ```

- ```bash
  # on the marker's line
  make run
  ```

> ```python
> # quoted
> x = 1
> ```

## Next

Text.
"""


def blocks_of(text, *fences):
    """The spans of fenced blocks, each given as its opening line's start and its closing
    line (searched for after the opening)."""
    spans = []
    for opening, closing in fences:
        start = text.index(opening)
        spans.append((start, text.index(f"\n{closing}\n", start) + len(closing) + 1))
    return tuple(spans)


def test_a_fence_after_list_or_quote_markers_is_code_and_hides_its_headings():
    """A fence on a list marker's line (`- ```bash`) was no fence: its `  # comment` line
    (two spaces) opened a section inside the code; a fence after `> ` was not seen at all."""
    sections = markdown_sections(LIST_FENCES)
    assert [s.headings for s in sections] == [("Install",), ("Install", "Next")]
    expected = blocks_of(
        LIST_FENCES, ("   ```bash", "   ```"), ("- ```bash", "  ```"), ("> ```python", "> ```")
    )
    assert sections[0].code == expected
    pieces = paragraphs(LIST_FENCES, (sections[0].start, sections[0].end), sections[0].code)
    for start, end in expected:  # each block one paragraph, its markers and all
        assert trimmed(LIST_FENCES, start, end) in pieces


NESTED = """# Guide

- Set up the machine:
  - Build it from the sources, which takes a few minutes on most machines:

    ```sh
    make deps

    make all
    ```

    Then run the tests.
10. Ten steps in:

    ```
    # not a heading

    done
    ```
"""


def test_a_fence_indented_into_a_nested_list_item_is_one_block():
    """A fence indented four spaces into a nested item was no fence: its blank line cut the
    block in two, and a chunk could end between the halves."""
    sections = markdown_sections(NESTED)
    assert [s.headings for s in sections] == [("Guide",)]
    assert sections[0].code == blocks_of(
        NESTED, ("    ```sh", "    ```"), ("    ```\n    # not", "    ```")
    )
    block = NESTED[slice(*sections[0].code[0])].strip()
    for size in range(12, 40):
        chunks = chunk_text(NESTED, sections, word_counter, ChunkSettings(size, 0))
        assert any(block in c.text for c in chunks), size


@pytest.mark.parametrize(
    "text",
    [
        "# A\n\nText.\n\n    ```\n    indented code\n\n## B\n\nEnd.\n",  # no list: indented code
        "# A\n\n- item\n\n          ```\n          code in the item\n\n## B\n\nEnd.\n",
        "# A\n\n- item\n\nText.\n\n    ```\n    indented code\n\n## B\n\nEnd.\n",  # list ended
        "# A\n\n* * *\n\n    ```\n    a rule is no list item\n\n## B\n\nEnd.\n",
        "# A\n\n\t- item\n\n\t  ```\n\t  a tab is four columns: code\n\n## B\n\nEnd.\n",
        "# A\n\n- item\n-     ```\n  five spaces: code in the item\n\n## B\n\nEnd.\n",
        "# A\n\n- > ```\n  quote in a list: not read\n\n## B\n\nEnd.\n",
    ],
)
def test_a_fence_indented_four_spaces_outside_a_list_item_is_indented_code(text):
    """CommonMark: a line indented four spaces past its container's content is indented code,
    so the ``` in it opens no block (unclosed, it would hide the headings after it)."""
    sections = markdown_sections(text)
    assert [(s.headings, s.code) for s in sections] == [(("A",), ()), (("A", "B"), ())]


@pytest.mark.parametrize(
    ("text", "ends_at"),
    [
        ("# A\n\n- ```sh\n  make\n\n  # still code\n\nText after the list.\n## B\n", "Text"),
        ("# A\n\n> ```py\n> # quoted\n> x = 1\n\n## B\n\nText.\n", "\n## B"),
        ("# A\n\n> - ```py\n>   # in both\n>\n>   x = 1\n> Out of the item.\n## B\n", "> Out"),
    ],
)
def test_an_unclosed_list_or_quote_fence_ends_with_its_container(text, ends_at):
    """CommonMark ends a fenced block with the list item or quote that holds it: a line that
    does not continue it (less indented, without its `>`) ends the block, so a fence left
    unclosed in a list item does not make the rest of the document code."""
    sections = markdown_sections(text)
    start = text.rfind("\n", 0, text.index("```")) + 1
    assert [(s.headings, s.code) for s in sections] == [
        (("A",), ((start, text.index(ends_at, start)),)),
        (("A", "B"), ()),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "# A\n\n- ````sh\n  ```\n  # still code\n  ```` \n\n## B\n",  # a shorter fence
        "# A\n\n> ~~~\n> ```\n> # still code\n> ~~~\n\n## B\n",  # another character
        "# A\n\n1. ```\n   ```py\n   # still code\n    ```\n\n## B\n",  # an info string
    ],
)
def test_a_list_or_quote_fence_closes_only_on_its_own_kind(text):
    """Inside its list item or quote, a block closes as one at a line's start does: at a
    fence of its character at least as long with nothing after it, up to three columns past
    the item's content (`    ````, one past `1. `)."""
    sections = markdown_sections(text)
    block = (text.index("\n\n") + 2, text.index("\n\n## B"))
    assert [(s.headings, s.code) for s in sections] == [(("A",), (block,)), (("A", "B"), ())]


#: The commit before list and quote fences: Markdown without them chunks as it did there.
BEFORE_LIST_FENCES = "ad4c78568a6b0e5dc380180defa644383b059aa4"


def structure_before(folder):
    """`probembed/chunking/structure.py` as BEFORE_LIST_FENCES holds it, imported (or a skip
    where the checkout has no such history)."""
    root = Path(__file__).resolve().parents[1]
    show = ["git", "-C", str(root), "show", f"{BEFORE_LIST_FENCES}:probembed/chunking/structure.py"]
    try:
        source = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"no git history holding {BEFORE_LIST_FENCES}")
    path = folder / "structure_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("structure_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_markdown_without_list_or_quote_fences_is_cut_as_before(tmp_path):
    """The repository's README.md and docs/*.md: each file whose fenced blocks all open at the
    start of a line (three spaces at most, no list or quote markers) has the sections and
    code blocks, so the chunks, the code before list and quote fences gave it."""
    before = structure_before(tmp_path)
    root = Path(__file__).resolve().parents[1]
    compared = 0
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        now = [(s.headings, s.start, s.end, s.code) for s in markdown_sections(text)]
        openings = [text[start:].partition("\n")[0] for *_, code in now for start, _ in code]
        if not all(before._FENCE.match(line) for line in openings):
            continue
        then = before.markdown_sections(text)
        assert now == [(s.headings, s.start, s.end, s.code) for s in then], path.name
        compared += 1
    assert compared >= 5


def test_segments_must_follow_each_other():
    segments = [Segment(0, "one two.\n\n", (), True), Segment(12, "three.", (), False)]
    with pytest.raises(ValueError, match="segment at 12 does not follow offset 10"):
        list(stream_chunks(segments, word_counter, ChunkSettings(8, 0)))


@pytest.mark.parametrize("size, overlap", [(8, 3), (64, 31), (65, 31), (66, 32), (256, 32)])
def test_a_size_given_alone_gets_the_default_overlap_where_it_fits(size, overlap):
    """A size under 66 given without an overlap was refused for the default 32, which the
    caller never chose (the CLI's --chunk-tokens 48, the service's {"max_tokens": 8})."""
    assert ChunkSettings.sized(size) == ChunkSettings(size, overlap)
    assert ChunkSettings.sized(size, 0) == ChunkSettings(size, 0)
    with pytest.raises(ValueError, match="max_tokens must be at least 8"):
        ChunkSettings.sized(7)


def test_a_long_document_with_no_text_keeps_its_place_in_a_chunked_corpus(hash_pipeline):
    """Four hundred zero-width spaces count as 400 words but give no chunk: the document had
    no text in the corpus, and the pooled scores one column too few for the doc ids."""
    corpus = {"a": "short text", "z": "\u200b " * 400, "b": "another short text"}
    assert hash_pipeline.count_tokens([corpus["z"]])[0] > 48
    chunked = chunk_corpus(corpus, hash_pipeline, ChunkSettings(48, 8))
    assert chunked.owner.tolist() == [0, 1, 2] and chunked.texts[1] == corpus["z"]


def test_a_section_ending_in_a_combining_mark_keeps_it_and_lone_marks_are_no_chunk():
    """A text of combining marks alone is blank (nothing to embed), but the edges of a chunk
    drop only what shows nothing: "cafe\\u0301" keeps its accent, and a paragraph or word of
    lone marks is no piece of any chunk."""
    first = "Un cafe\u0301 " + " ".join(f"mot{i}" for i in range(6)) + " cafe\u0301"
    text = f"{first}\n\n\u0301\u0301\n\nLa suite du texte."
    chunks = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(8, 0))
    assert [c.text for c in chunks] == [
        "Un cafe\u0301 mot0 mot1 mot2 mot3",
        "mot4 mot5 cafe\u0301",
        "La suite du texte.",
    ]
    # a paragraph of marks alone after a full chunk was a chunk of its own, which ingest
    # refused as an empty text, and with it the whole document
    full = " ".join(f"w{i}" for i in range(14))
    text = f"{full}\n\n\u0301\u0301\n\n\u0301 \u0301"
    chunks = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(16, 0))
    assert [c.text for c in chunks] == [full]


def test_a_long_paragraph_of_lines_is_cut_at_lines_and_counted_in_bounded_calls():
    """A log or one-sentence-per-line file has no blank lines and no full stops: it was
    tokenized whole, then as one sentence, then every word in one call (a 17 MiB file: 112 s
    at 7.2 GB RSS; now 23 s at 0.84 GB, 0.14 GB over the models). Lines are now cut before words, a
    long span is counted on its start first, and no call counts more than BATCH_CHARS."""
    from probembed.chunking.chunker import BATCH_CHARS, PROBE_CHARS

    lines = [
        f"2024-05-01 12:00:{i % 60:02d} INFO worker {i % 7} handled request {i}"
        for i in range(20_000)
    ]
    text = "\n".join(lines)
    calls = []

    def counting(texts):
        calls.append([len(t) for t in texts])
        return word_counter(texts)

    chunks = chunk_text(text, plain_sections(text), counting, ChunkSettings(64, 0))
    assert all(c.text == text[c.start : c.end] for c in chunks)
    assert "\n".join(c.text for c in chunks) == text  # whole lines, none cut, none lost
    assert all(max(sizes) <= PROBE_CHARS for sizes in calls)  # the 1 MiB whole never
    assert all(sum(sizes) <= BATCH_CHARS or len(sizes) == 1 for sizes in calls)
    assert all(c.tokens <= 64 for c in chunks)


def grapheme_starts(text):
    """Where `regex`'s \\X (UAX #29's extended grapheme clusters) puts a cluster's start."""
    regex = pytest.importorskip("regex")
    return {m.start() for m in regex.finditer(r"\X", text)} | {len(text)}


SCOTLAND = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
#: What tokenizers see few tokens in (Thai and unspaced CJK are one word to a word count and
#: one [UNK] or a few to WordPiece), with clusters no cut may split and other scripts' stops.
CLUSTERS = [
    "แม่น้ำ", "ท่วม", "東京は", "大きい", "。", "e\u0301", "\u0915\u094d\u0937\u093f",
    "\U0001f1eb\U0001f1f7", SCOTLAND, "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\u1100\u1161\u11a8", "1\ufe0f\u20e3", "\u0600\u0661", "word", "।", "؟", "\u037e",
]  # fmt: skip
#: Runs of them, some far longer than a small chunk's character cap, between white space.
few_tokens = st.lists(
    st.tuples(
        st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=120).map("".join),
        st.sampled_from([" ", "\n", "\r\n", "\n\n"]),
    ),
    min_size=1,
    max_size=6,
).map(lambda parts: "".join(run + end for run, end in parts))


def split_clusters(text, chunks):
    """Chunk edges inside a grapheme cluster, between two characters that show (an edge at
    white space or an invisible character is where a chunk was trimmed, not cut)."""
    starts = grapheme_starts(text)
    edges = {at for c in chunks for at in (c.start, c.end) if 0 < at < len(text)}
    shown = [not is_invisible(c) for c in text]
    return [at for at in edges if shown[at - 1] and shown[at] and at not in starts]


@given(few_tokens, st.integers(8, 12), st.integers(0, 3), st.lists(st.booleans(), max_size=60))
@settings(max_examples=200, deadline=None)
def test_every_chunk_is_within_the_character_cap_and_splits_no_grapheme(text, size, overlap, cuts):
    """A chunk could be any length where the counter sees few tokens (one "word" of 400,000
    Thai characters was one chunk), and a long word was cut inside a flag or a tag sequence."""
    config = ChunkSettings(size, overlap)
    sections = plain_sections(text)
    chunks = chunk_text(text, sections, word_counter, config)
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert len(chunk.text) <= size * 16 and chunk.tokens <= size
    assert split_clusters(text, chunks) == []
    covered = {i for c in chunks for i in range(c.start, c.end)}
    assert {i for i, c in enumerate(text) if not is_invisible(c)} <= covered
    assert list(stream_chunks(segments_of(text, sections, cuts), word_counter, config)) == chunks


def test_a_text_the_tokenizers_see_few_tokens_in_is_cut_by_characters():
    """Thai has no spaces between words and is one [UNK] to the members' WordPiece: 400,000
    characters of it were one chunk. A chunk holds at most 16 characters a token of its size,
    and says the cap, not the budget, ended it."""
    thai = "แม่น้ำท่วมหมู่บ้านหลังฝนตกหนักสามวัน"
    text = (thai * (400_000 // len(thai) + 1))[:400_000]
    chunks = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(256, 32))
    assert max(len(c.text) for c in chunks) <= 256 * 16 == ChunkSettings().max_chars
    assert "".join(c.text for c in chunks) == text and len(chunks) == 98
    assert [c.by_chars for c in chunks] == [True] * 97 + [False]
    assert split_clusters(text, chunks) == []
    english = "The jaguar is the largest cat in the Americas. " * 400
    chunks = chunk_text(english, plain_sections(english), piece_counter, ChunkSettings(32, 4))
    assert len(chunks) > 10 and not any(c.by_chars for c in chunks)  # tokens end these


def test_overlap_repeats_at_most_its_tokens_worth_of_characters():
    """Short Chinese sentences are a word each to a word count: 32 of them repeated some
    2,500 characters of every 4,096-character chunk, which tripled the chunks."""
    text = "北京的火车站打开了一条河流。" * 3000
    chunks = chunk_text(text, plain_sections(text), word_counter, ChunkSettings(256, 32))
    shared = [before.end - after.start for before, after in itertools.pairwise(chunks)]
    assert len(chunks) > 10 and 0 < min(shared) <= max(shared) <= 32 * 16


@pytest.mark.parametrize(
    ("word", "grapheme", "size"),
    [  # sizes at which a cut by code points falls inside the cluster
        (SCOTLAND * 10, SCOTLAND, 12),  # a tag sequence: the tags are format characters
        ("\U0001f1eb\U0001f1f7" * 20, "\U0001f1eb\U0001f1f7", 11),  # a flag: two indicators
        ("\u1100\u1161\u11a8" * 20, "\u1100\u1161\u11a8", 12),  # a Hangul syllable in jamo
        ("\u0915\u094d\u0937" * 20, "\u0915\u094d\u0937", 10),  # a conjunct: KA, virama, SSA
    ],
)
def test_a_long_word_is_cut_between_flags_tag_sequences_and_syllables(word, grapheme, size):
    """Scotland's flag (a black flag and six tags) was cut in two, as were a pair of regional
    indicators, jamo and a conjunct: only marks, joiners and variation selectors were kept
    with what they follow."""

    def per_code_point(texts):
        return [len(t) + 2 for t in texts]

    chunks = chunk_text(word, plain_sections(word), per_code_point, ChunkSettings(size, 0))
    assert "".join(c.text for c in chunks) == word and len(chunks) > 2
    assert all(len(c.text) % len(grapheme) == 0 and c.text.startswith(grapheme) for c in chunks)


#: Characters the grapheme rules treat apart: marks (a virama, a spacing vowel sign),
#: joiners, regional indicators, tags, skin tones, jamo, prepended marks, controls, a
#: character this Python's Unicode does not have (a mark in later versions).
ATOMS = [
    "a", "b", " ", "\r", "\n", "\t", "\u0301", "\u0915", "\u0937", "\u094d", "\u093f", "\u0903",
    "\u200d", "\u200c", "\ufe0f", "\u20e3", "\U0001f468", "\U0001f3fb", "\u2764",
    "\U0001f1eb", "\U0001f1f7", "\U0001f3f4", "\U000e0067", "\U000e007f", "\u1100", "\u1161",
    "\u11a8", "\uac00", "\uac01", "\u0600", "\u0e01", "\u0e33", "\u200b", "\ufeff", "\u00ad",
    "\u0cf3", "\u102b", "\u0d4d", "\u0d15",
]  # fmt: skip


@given(st.lists(st.sampled_from(ATOMS), max_size=16).map("".join))
@settings(max_examples=500, deadline=None)
def test_a_grapheme_boundary_is_one_for_regex(text):
    """The rules read from unicodedata (the chunks must not depend on whether regex is
    installed) call a place a boundary only where \\X starts a cluster."""
    from probembed.chunking.graphemes import is_boundary, last_boundary

    starts = grapheme_starts(text)
    assert {i for i in range(len(text) + 1) if is_boundary(text, i)} <= starts
    for stop in range(2, len(text)):
        cut = last_boundary(text, 0, stop)
        assert 0 < cut <= stop and (cut in starts or cut == stop)


def test_grapheme_boundaries_fall_between_ordinary_characters():
    from probembed.chunking.graphemes import is_boundary, last_boundary

    flags = "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea"
    assert [is_boundary(flags, i) for i in range(1, 4)] == [False, True, False]
    assert is_boundary("ab", 1) and is_boundary("a b", 2) and not is_boundary("e\u0301", 1)
    assert last_boundary("a\r\nb", 0, 2) == 1  # never inside a CRLF
    assert last_boundary("\u0301" * 10, 0, 5) == 5  # one cluster over the range: cut anyway


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("यह पहला वाक्य है। यह दूसरा है।", ["यह पहला वाक्य है।", "यह दूसरा है।"]),
        ("शांति॥अंत", ["शांति॥", "अंत"]),  # a danda needs no space after it
        ("كيف حالك؟ أنا بخير.", ["كيف حالك؟", "أنا بخير."]),
        ("Τι κάνεις\u037e Καλά.", ["Τι κάνεις\u037e", "Καλά."]),  # the Greek question mark
        ("Τι κάνεις; Καλά.", ["Τι κάνεις;", "Καλά."]),  # as NFC writes it
        ("a; b. c", ["a; b.", "c"]),  # a semicolon after Latin ends no sentence
        ("東京は大きい｡京都は古い｡", ["東京は大きい｡", "京都は古い｡"]),  # halfwidth
        ("Ի՞նչ է սա։ Սա տուն է։", ["Ի՞նչ է սա։", "Սա տուն է։"]),  # Armenian
        ("«Oui.» Puis non.", ["«Oui.»", "Puis non."]),
    ],
)
def test_sentences_end_at_the_full_stops_of_other_scripts(text, expected):
    """The danda, the Arabic and Greek question marks, the halfwidth CJK and Armenian full
    stops ended no sentence: a long paragraph of Hindi was cut between words instead."""
    from probembed.chunking.structure import sentences

    assert [text[s:e] for s, e in sentences(text, (0, len(text)))] == expected


def test_a_cjk_full_stop_before_a_mark_cuts_no_cluster():
    """A full stop that needs no space after it is no sentence end before a mark it carries."""
    from probembed.chunking.structure import sentences

    text = "東京。\u0301京都。"
    assert [text[s:e] for s, e in sentences(text, (0, len(text)))] == ["東京。\u0301京都。"]


long_line = st.lists(
    st.one_of(
        sentence, st.sampled_from(["東京は大きい", "\U0001f1eb\U0001f1f7" * 3, "cafe\u0301"])
    ),
    min_size=1,
    max_size=30,
).map(" ".join)
lines_document = st.lists(
    st.tuples(long_line, st.sampled_from(["\n\n", "\n", "\r\n", "\n" + " " * 90 + "\n"])),
    min_size=1,
    max_size=6,
).map(lambda parts: "".join(line + end for line, end in parts))


@given(lines_document, st.integers(8, 24), st.lists(st.booleans(), max_size=60))
@settings(max_examples=150, deadline=None)
def test_a_line_over_line_chars_is_cut_alike_read_whole_and_streamed(text, size, cuts):
    """A stream held a line whole, however long (20 MB of French on one line took 1.23 GB):
    it now gives such a line in pieces, which chunking reads as paragraph breaks read whole
    too, so a stream cut there gives the chunks of the text read whole."""
    from probembed.chunking import structure

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structure, "LINE_CHARS", 80)
        config = ChunkSettings(size, 2)
        sections = plain_sections(text)
        whole = chunk_text(text, sections, word_counter, config)
        places = iter(cuts)
        at = [c for c in line_cuts(text, 0, len(text)) if next(places, False)]
        segments = [
            Segment(a, text[a:b], (), a == 0) for a, b in itertools.pairwise([0, *at, len(text)])
        ]
        assert list(stream_chunks(segments, word_counter, config)) == whole
        assert all(c.text == text[c.start : c.end] for c in whole)
        assert split_clusters(text, whole) == []
        pieces = paragraphs(text, (0, len(text)))
        assert all(len(text[s:e].splitlines()[0]) <= 80 for s, e in pieces)


@given(
    lines_document,
    lines_document,
    st.booleans(),
    st.integers(8, 24),
    st.lists(st.booleans(), max_size=60),
)
@settings(max_examples=100, deadline=None)
def test_a_stream_cut_at_a_long_line_inside_a_fence_gives_the_chunks_read_whole(
    before, code, closed, size, cuts
):
    """A stream may cut a segment inside a fenced code block only at a long line's cut: the
    segments on either side carry the block (an open one to the segment's end), and the chunks
    are the text's read whole."""
    from probembed.chunking import structure

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structure, "LINE_CHARS", 80)
        text = f"{before}```py\n{code}" + ("```\nAfter it.\n" if closed else "")
        config = ChunkSettings(size, 2)
        (section,) = markdown_sections(text)
        assert len(section.code) == 1
        whole = chunk_text(text, [section], word_counter, config)
        places = iter(cuts)
        at = [c for c in line_cuts(text, 0, len(text)) if next(places, False)]
        bounds = list(itertools.pairwise([0, *at, len(text)]))
        segments = [Segment(a, text[a:b], (), a == 0, code_in(section, a, b)) for a, b in bounds]
        assert list(stream_chunks(segments, word_counter, config)) == whole
