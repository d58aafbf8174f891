"""Check that every Markdown link of README.md and docs/*.md leads somewhere, as GitHub renders it.

    python scripts/doc_links.py    # exit 1, naming each broken link

A link to `#anchor` must name a heading of its own file, one to `path#anchor` a heading of that
file, and one to `path` a file or folder that exists (relative to the linking file). Anchors are
GitHub's: the heading's text as rendered (code spans' backticks, link syntax and emphasis
dropped), lower-cased, every character but letters, marks, digits, `_`, `-` and spaces dropped,
spaces made hyphens; a repeated anchor gets `-1`, `-2`, ... in order. Inline links, images and
reference definitions count, but not in fenced code blocks and code spans.
tests/test_doc_links.py runs this check.
"""

from __future__ import annotations

import html
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+$")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
#: An inline link's or image's destination, after the `](` that ends its text.
DESTINATION = re.compile(r"\]\(([^()\s]+)(?:[ \t]+\"[^\"]*\")?\)")
#: A link reference definition's destination: `[name]: destination` on a line of its own.
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)", re.M)
SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:|//")
IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
TAG = re.compile(r"</?[a-zA-Z][^>]*>")
EMPHASIS = re.compile(r"(?<![\w*])(\*{1,3}|_{1,3})(?=\S)(.+?)(?<=\S)\1(?![\w*])")
ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


@dataclass(frozen=True)
class Heading:
    """An ATX heading: its line (0-based), level, text as written and GitHub anchor."""

    line: int
    level: int
    text: str
    anchor: str


def fenced(lines: list[str]) -> list[bool]:
    """Per line, whether it belongs to a fenced code block (its fences included)."""
    flags, opening = [], ""
    for line in lines:
        found = FENCE.match(line)
        if not opening:
            opening = found.group(1) if found else ""
            flags.append(bool(found))
            continue
        flags.append(True)
        closes = re.fullmatch(r" {0,3}(`{3,}|~{3,})[ \t]*", line)
        if closes and closes.group(1)[0] == opening[0] and len(closes.group(1)) >= len(opening):
            opening = ""
    return flags


def heading_level_and_text(line: str) -> tuple[int, str] | None:
    """The level and text of an ATX heading line (closing #s dropped), None for another line."""
    found = ATX.fullmatch(line)
    if not found:
        return None
    return len(found.group(1)), CLOSING_HASHES.sub("", found.group(2) or "").strip()


def rendered(text: str) -> str:
    """A heading's text as GitHub renders it: code spans verbatim, inline markup dropped."""
    parts, last = [], 0
    for span in CODE_SPAN.finditer(text):
        parts += [_plain(text[last : span.start()]), span.group(2).strip()]
        last = span.end()
    return "".join([*parts, _plain(text[last:])])


def _plain(text: str) -> str:
    """Text outside code spans without images, link syntax, tags, emphasis and escapes."""
    text = LINK.sub(r"\1", IMAGE.sub("", text))
    text = TAG.sub("", text)
    while EMPHASIS.search(text):
        text = EMPHASIS.sub(r"\2", text)
    return html.unescape(ESCAPE.sub(r"\1", text))


def slug(text: str) -> str:
    """GitHub's anchor of a heading's text before its duplicates are numbered."""
    kept = (c for c in rendered(text).lower() if c in "- " or _word(c))
    return "".join(kept).replace(" ", "-")


def _word(char: str) -> bool:
    """Whether GitHub keeps a character in an anchor: a letter, mark, decimal digit or `_`."""
    category = unicodedata.category(char)
    return category[0] in "LM" or category in ("Nd", "Pc")


def headings(text: str) -> list[Heading]:
    """Every ATX heading outside fenced code, with its anchor numbered as GitHub numbers repeats."""
    lines = text.split("\n")
    seen: Counter[str] = Counter()
    found = []
    for number, (line, in_code) in enumerate(zip(lines, fenced(lines), strict=True)):
        parsed = None if in_code else heading_level_and_text(line)
        if parsed is None:
            continue
        base = slug(parsed[1])
        anchor = f"{base}-{seen[base]}" if seen[base] else base
        seen[base] += 1
        found.append(Heading(number, parsed[0], parsed[1], anchor))
    return found


def masked(text: str) -> str:
    """The text with fenced code and code spans blanked out, every offset kept."""
    lines = text.split("\n")
    blanked = [
        " " * len(line) if code else line for line, code in zip(lines, fenced(lines), strict=True)
    ]
    joined = "\n".join(blanked)
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), joined)


def destinations(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) offsets of every link's or image's destination outside code, in order."""
    plain = masked(text)
    found = [*DESTINATION.finditer(plain), *DEFINITION.finditer(plain)]
    yield from sorted(m.span(1) for m in found)


def is_external(destination: str) -> bool:
    """Whether a destination leaves the repository (a URL, mailto:, a protocol-relative link)."""
    return bool(SCHEME.match(destination))


def problem(document: Path, destination: str, anchors: Callable[[Path], set[str]]) -> str | None:
    """What is wrong with one destination of a document, None when it leads somewhere."""
    if is_external(destination):
        return None
    path, _, fragment = destination.partition("#")
    path = unquote(path.partition("?")[0])
    if path.startswith("/"):
        return "an absolute path, which GitHub reads from the site's root: make it relative"
    target = (document.parent / path).resolve() if path else document
    if not target.exists():
        return f"{path} does not exist"
    if fragment and (target.suffix != ".md" or unquote(fragment) not in anchors(target)):
        return f"no heading of {target.name} has the anchor #{fragment}"
    return None


def documents(root: Path) -> list[Path]:
    """README.md and the pages under docs/: the Markdown a reader of the repository follows."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def broken_links(root: Path) -> list[str]:
    """Every link of the documents that leads nowhere, as `file:line: destination: why`."""
    cache: dict[Path, set[str]] = {}

    def anchors(path: Path) -> set[str]:
        """The anchors of a Markdown file's headings, read once."""
        if path not in cache:
            cache[path] = {h.anchor for h in headings(path.read_text(encoding="utf-8"))}
        return cache[path]

    found = []
    for document in documents(root):
        text = document.read_text(encoding="utf-8")
        for start, end in destinations(text):
            why = problem(document, text[start:end], anchors)
            if why:
                line = text.count("\n", 0, start) + 1
                name = document.relative_to(root)
                found.append(f"{name}:{line}: {text[start:end]}: {why}")
    return found


def main() -> None:
    """Print every broken link and exit 1 if there is one."""
    found = broken_links(ROOT)
    print("\n".join(found) if found else "every link leads somewhere")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
