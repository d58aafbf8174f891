"""Move the README's long reference sections to pages under docs/, leaving a stub in each place.

    python scripts/split_readme.py

Reads README.md and writes the new README.md and one page per entry of MOVES (docs/cli.md, ...),
the same output for the same README every time, so it can be run again on the README as edited
since. Each entry moves a whole section, its heading to the next heading of its level or above,
to its page, and leaves in the README its heading and the stub written here, which says what is
there and links to it. A page holds its sections in README order, their headings raised so that
its first is the page's title (anchors do not change with the level). Every link is rewritten to
lead where it did: an `#anchor` of a moved heading becomes `docs/page.md#anchor` from the README,
`page.md#anchor` from another page (`#anchor` on its own), `../README.md#anchor` from a page to
what stayed, and a relative file link from a page is made relative to docs/. A stub's links are
written as README links (`#anchor`, `docs/page.md`) and rewritten the same way.

It refuses a README without one of the headings named here, a heading named twice, nested
moves, a link to an anchor no heading has, and pages that exist already (drop the commit that
made them before running it again). It then checks every link of README.md and docs/*.md
(scripts/doc_links.py) and exits 1 naming any that leads nowhere.
"""

from __future__ import annotations

import itertools
import posixpath
import sys
from dataclasses import dataclass
from urllib.parse import unquote

from doc_links import ROOT, Heading, broken_links, headings, is_external, relinked


@dataclass(frozen=True)
class Move:
    """A README section (its heading line as written) moved to a page under docs/."""

    heading: str
    page: str
    stub: str


MOVES = (
    Move(
        "## Command line",
        "cli.md",
        """\
`probembed` (the `cli` extra) encodes and compares texts (`encode`, `similarity`, `inspect`), fits, evaluates and tunes pipelines (`fit`, `eval`, `tune`),
writes and searches collections (`ingest`, `embed`, `search`, `collections`, `delete`, `erase`, `undo`, `drop`, `compact`, `pins`, `backup`), runs `demo` and `serve`, and lists the `models` and the `cache`.
Every command with examples, [erasing data](#erasing-data) for good, [backup and restore](#backup-and-restore), for scripts [JSON output](#json-output), [exit codes](#exit-codes) and [environment variables](#environment-variables),
[other languages](#languages), [your own model](#your-own-model), [tuning on your own data](#tune-on-your-own-data) and [Ray and object storage](#beyond-one-machine-ray-ingest-and-object-storage): [docs/cli.md](docs/cli.md).
""",  # noqa: E501 (links to long anchors)
    ),
    Move(
        "## Documents",
        "documents.md",
        """\
`probembed ingest docs/ --chunk --sync` indexes a folder of Markdown, HTML, PDF and text files: each is cut into
chunks every model reads whole, a re-run re-embeds only what changed and removes what was deleted, and
`search --group-by-doc` returns each document once. How files are read, chunked and kept in step (links,
encodings, large files, writers at once), with what chunking gains: [docs/documents.md](docs/documents.md).
""",  # noqa: E501 (links to long anchors)
    ),
    Move(
        "## Service",
        "service.md",
        """\
`probembed serve` (the `serve` extra) puts embeddings (OpenAI's `/v1/embeddings` shape: its client works),
similarity, collections and search behind HTTP, with dynamic batching, API keys, limits, Prometheus metrics
and the OpenAPI schema at `/docs`. Routes, limits, keys, errors, shutdown and disk upkeep: [docs/service.md](docs/service.md).
""",  # noqa: E501 (links to long anchors)
    ),
    Move(
        "## Upgrading",
        "upgrading.md",
        """\
What a collection, a pipeline copy or a client of an earlier release meets after an upgrade (records and
metadata, chunked documents, object storage, the HTTP service, calibrators), and how to go back to an
earlier release: [docs/upgrading.md](docs/upgrading.md).
""",  # noqa: E501 (links to long anchors)
    ),
    Move(
        "## Results",
        "results.md",
        """\
Every benchmark, its figures from a committed result file, the command that made them and what they say: [docs/results.md](docs/results.md).
In short: `make run`'s search scores 67.75 nDCG@10 on SciFact test, 72.05 with BM25 ([the `retrieval` built-in](#search-has-its-own-built-in-python-benchmarksretrievalpy--benchmarksresultsretrievaljson)); per-text uncertainty pays in the score, not as fusion weights ([quality](#quality-python-benchmarksqualitypy--benchmarksresultsqualityjson)),
and no label-free adaptation to an unseen domain met its target ([leave one dataset out](#a-domain-it-was-not-tuned-on-python-benchmarkslodopy--benchmarksresultslodojson)); `p_relevant` is calibrated ([ECE ≤ 0.02 on SciFact test](#calibrated-relevance-python-benchmarkscalibrationpy--benchmarksresultscalibrationjson));
search keeps Recall@10 ≥ 0.99 in under a quarter of a float32 mean's memory per item ([search](#search-python-benchmarkssearchpy--benchmarksresultssearchjson)).
""",  # noqa: E501 (links to long anchors)
    ),
)
README = "README.md"


@dataclass(frozen=True)
class Line:
    """A line of an output file and the README line it came from (None for a stub's lines)."""

    text: str
    origin: int | None


def split(readme: str, moves: tuple[Move, ...]) -> dict[str, str]:
    """The new README and pages' texts, by their paths in the repository."""
    for move in moves:
        check_stub(move)
    lines = readme.split("\n")
    found = {h.line: h for h in headings(readme)}
    files = assembled(lines, found, sections(lines, found, moves))
    moved_to = destinations(files, found)
    return {name: linked(name, page, moved_to) for name, page in files.items()}


def check_stub(move: Move) -> None:
    """A stub is one to four lines and links to its page."""
    count = len(move.stub.strip().split("\n"))
    links = f"(docs/{move.page})" in move.stub or f"(docs/{move.page}#" in move.stub
    if not 1 <= count <= 4 or not links:
        raise SystemExit(
            f"the stub of {move.heading!r} must be 1-4 lines linking to docs/{move.page}"
        )


def sections(
    lines: list[str], found: dict[int, Heading], moves: tuple[Move, ...]
) -> dict[Move, range]:
    """Each move's README lines: its heading up to the next heading of its level or above."""
    spans = {}
    for move in moves:
        at = [n for n in found if lines[n].strip() == move.heading]
        if len(at) != 1:
            told = "no" if not at else f"{len(at)} (lines {', '.join(str(n + 1) for n in at)})"
            raise SystemExit(f"{README} has {told} heading {move.heading!r}: update MOVES")
        level = found[at[0]].level
        end = next((n for n in found if n > at[0] and found[n].level <= level), len(lines))
        spans[move] = range(at[0], end)
    ordered = sorted(spans.items(), key=lambda item: item[1].start)
    for (outer, span), (inner, other) in itertools.pairwise(ordered):
        if other.start < span.stop:
            raise SystemExit(f"{inner.heading!r} lies in {outer.heading!r}: move one or the other")
    return spans


def assembled(
    lines: list[str], found: dict[int, Heading], spans: dict[Move, range]
) -> dict[str, list[Line]]:
    """The README with a stub for each moved section, and each page's sections, headings raised."""
    readme: list[Line] = []
    pages: dict[str, list[Line]] = {}
    starts = {span.start: (move, span) for move, span in spans.items()}
    number = 0
    while number < len(lines):
        if number not in starts:
            readme.append(Line(lines[number], number))
            number += 1
            continue
        move, span = starts[number]
        readme += [
            Line(text, None) for text in [move.heading, "", *move.stub.strip().split("\n"), ""]
        ]
        page = pages.setdefault(f"docs/{move.page}", [])
        if page and page[-1].text.strip():
            page.append(Line("", None))
        page += [Line(lines[n], n) for n in span]
        number = span.stop
    return {README: readme, **{name: titled(page, found) for name, page in pages.items()}}


def titled(page: list[Line], found: dict[int, Heading]) -> list[Line]:
    """A page's lines, headings raised so that the first is a title (`#`), ending in a newline."""
    top = min(found[ln.origin].level for ln in page if ln.origin in found)
    lines = [
        Line(ln.text.lstrip()[top - 1 :], ln.origin) if ln.origin in found else ln for ln in page
    ]
    while not lines[-1].text.strip():
        lines.pop()
    return [*lines, Line("", None)]


def destinations(
    files: dict[str, list[Line]], found: dict[int, Heading]
) -> dict[str, tuple[str, str]]:
    """Each README anchor's file and anchor there (numbered anew where repeats moved apart)."""
    moved_to = {}
    for name, page in files.items():
        for heading in headings("\n".join(ln.text for ln in page)):
            origin = page[heading.line].origin
            if origin is not None:
                moved_to[found[origin].anchor] = (name, heading.anchor)
    return moved_to


def linked(name: str, page: list[Line], moved_to: dict[str, tuple[str, str]]) -> str:
    """A file's text with each link, written for the README, rewritten to lead there from `name`."""

    def target(destination: str, line: int) -> str:
        """Where one destination leads from this file."""
        if is_external(destination):
            return destination
        path, hashed, fragment = destination.partition("#")
        if posixpath.normpath(path or README) == README and hashed:
            fragment = unquote(fragment)
            if fragment not in moved_to:
                origin = page[line].origin
                where = f"line {origin + 1}" if origin is not None else "a stub"
                raise SystemExit(f"{README} {where} links to #{fragment}, which no heading has")
            file, anchor = moved_to[fragment]
            return f"{'' if file == name else relative(file, name)}#{anchor}"
        return relative(path, name) + hashed + fragment

    return relinked("\n".join(ln.text for ln in page), target)


def relative(path: str, name: str) -> str:
    """A path of the repository (README-relative) as a link from the file `name`."""
    folder = posixpath.dirname(name)
    if not folder or not path:
        return path
    moved = posixpath.relpath(path.partition("?")[0], folder)
    return moved + ("/" if path.endswith("/") else "") + "".join(path.partition("?")[1:])


def main() -> None:
    """Write the new README and pages, then exit 1 if any link of them leads nowhere."""
    existing = [f"docs/{m.page}" for m in MOVES if (ROOT / "docs" / m.page).exists()]
    if existing:
        raise SystemExit(
            f"{', '.join(existing)} exist already: the README was split. Drop the commit that "
            "wrote them (or delete them) and run this again on the README as it is now."
        )
    before = (ROOT / README).read_text(encoding="utf-8")
    for name, text in split(before, MOVES).items():
        (ROOT / name).write_text(text, encoding="utf-8")
        print(f"{name}: {text.count(chr(10))} lines")
    problems = broken_links(ROOT)
    print(
        "\n".join(problems) if problems else "every link of README.md and docs/*.md leads somewhere"
    )
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
