"""Every link of README.md and docs/*.md leads to a file that exists and a heading it names."""

from types import ModuleType

import pytest
from script_support import ROOT, script_module


@pytest.fixture(scope="module")
def doc_links() -> ModuleType:
    """The script under test, imported once for the module."""
    return script_module("scripts", "doc_links")


def test_every_link_of_the_readme_and_docs_leads_somewhere(doc_links):
    assert doc_links.broken_links(ROOT) == []


def test_a_link_to_a_missing_file_or_heading_is_named(doc_links, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Top\n\n[a](#top) [b](#gone) [c](docs/page.md#one) [d](docs/missing.md)\n"
        "[e](docs/page.md#two) [f](https://example.com/#x) [g](docs/)\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "page.md").write_text(
        "# One\n\n[back](../README.md#top) [h](../README.md#nope) [i](#one-1)\n\n"
        "```sh\n# not a heading\n[not a link](#nowhere)\n```\n\n"
        "`[code](#nowhere)` [j](/README.md) [k](../README.md#not-a-heading)\n",
        encoding="utf-8",
    )
    assert doc_links.broken_links(tmp_path) == [
        "README.md:3: #gone: no heading of README.md has the anchor #gone",
        "README.md:3: docs/missing.md: docs/missing.md does not exist",
        "README.md:4: docs/page.md#two: no heading of page.md has the anchor #two",
        "docs/page.md:3: ../README.md#nope: no heading of README.md has the anchor #nope",
        "docs/page.md:3: #one-1: no heading of page.md has the anchor #one-1",
        "docs/page.md:10: /README.md: an absolute path, which GitHub reads from the site's root: "
        "make it relative",
        "docs/page.md:10: ../README.md#not-a-heading: no heading of README.md has the anchor "
        "#not-a-heading",
    ]


def test_anchors_are_githubs_and_repeats_are_numbered(doc_links):
    text = (
        "# What `make run` does\n"
        "### Search: `python benchmarks/search.py` → `benchmarks/results/search.json`\n"
        "## A\n"
        "## A ##\n"
        "```\n## A\n```\n"
        "##### Do short texts come out more uncertain? (`probembed inspect`)\n"
        "#### A\n"
        "## Ünïcode & *emphasis* [a link](x.md) 😄\n"
        "#not-a-heading\n"
        "    ## indented code, not a heading\n"
        "## `u_cv` and snake_case \\*escaped\\*\n"
    )
    assert [(h.level, h.anchor) for h in doc_links.headings(text)] == [
        (1, "what-make-run-does"),
        (3, "search-python-benchmarkssearchpy--benchmarksresultssearchjson"),
        (2, "a"),
        (2, "a-1"),
        (5, "do-short-texts-come-out-more-uncertain-probembed-inspect"),
        (4, "a-2"),
        (2, "ünïcode--emphasis-a-link-"),
        (2, "u_cv-and-snake_case-escaped"),
    ]
