"""scripts/split_readme.py moves whole README sections to pages under docs/, leaves each a stub
and rewrites every link to lead where it did."""

import re
from types import ModuleType

import pytest
from script_support import script_module

README = """\
# Tool

Intro: [B](#b-section), [its notes](#notes-1), [code](docs/architecture.md).

## A

Stays: [x](#x-detail), [notes](#notes).

### Notes

Of A.

## B section

Moved: [A](#a), [x](#x-detail), ![plot](benchmarks/plot.png),
[folder](benchmarks/), [C](#c), [page](docs/architecture.md#pieces), [web](https://example.com/#a).

```sh
# a comment, not a heading
[not a link](#a)
```

### X detail

#### Notes

Of B.

## C

To the page of B: [B](#b-section).

## D

Last.
"""

STUB_B = "B is on [its page](docs/b.md), [x](#x-detail) too."
STUB_C = "C went to [B's page](docs/b.md#c)."


@pytest.fixture(scope="module")
def split_readme() -> ModuleType:
    """The script under test, imported once for the module."""
    return script_module("scripts", "split_readme")


def moves(split_readme: ModuleType, *extra: tuple[str, str, str]) -> tuple:
    """B and C moved to docs/b.md, and any extra (heading, page, stub)."""
    pairs = [("## B section", "b.md", STUB_B), ("## C", "b.md", STUB_C), *extra]
    return tuple(split_readme.Move(*pair) for pair in pairs)


def test_sections_move_with_their_links_rewritten_and_a_stub_left(split_readme):
    files = split_readme.split(README, moves(split_readme))
    assert (
        files["README.md"]
        == """\
# Tool

Intro: [B](docs/b.md#b-section), [its notes](docs/b.md#notes), [code](docs/architecture.md).

## A

Stays: [x](docs/b.md#x-detail), [notes](#notes).

### Notes

Of A.

## B section

B is on [its page](docs/b.md), [x](docs/b.md#x-detail) too.

## C

C went to [B's page](docs/b.md#c).

## D

Last.
"""
    )
    assert (
        files["docs/b.md"]
        == """\
# B section

Moved: [A](../README.md#a), [x](#x-detail), ![plot](../benchmarks/plot.png),
[folder](../benchmarks/), [C](#c), [page](architecture.md#pieces), [web](https://example.com/#a).

```sh
# a comment, not a heading
[not a link](#a)
```

## X detail

### Notes

Of B.

# C

To the page of B: [B](#b-section).
"""
    )


def test_a_link_between_pages_names_the_other_page(split_readme):
    extra = ("## D", "d.md", "D is on [its page](docs/d.md).")
    readme = README.replace("Last.", "Last: [B](#b-section), [A](#a).")
    files = split_readme.split(readme, moves(split_readme, extra))
    assert files["docs/d.md"] == "# D\n\nLast: [B](b.md#b-section), [A](../README.md#a).\n"
    assert files["README.md"].endswith("## D\n\nD is on [its page](docs/d.md).\n")


@pytest.mark.parametrize(
    ("change", "extra", "told"),
    [
        (("## B", "## Bee"), (), "README.md has no heading '## B section': update MOVES"),
        (("## D", "## C"), (), "README.md has 2 (lines 29, 33) heading '## C': update MOVES"),
        (("[notes](#notes)", "[notes](#gone)"), (), "README.md line 7 links to #gone, which no"),
        (
            ("", ""),
            (("### X detail", "x.md", "[X](docs/x.md)"),),
            "'### X detail' lies in '## B section': move one or the other",
        ),
    ],
)
def test_a_readme_it_cannot_split_as_told_is_refused(split_readme, change, extra, told):
    with pytest.raises(SystemExit, match=re.escape(told)):
        split_readme.split(README.replace(*change), moves(split_readme, *extra))


def test_a_stub_must_be_short_and_link_its_page(split_readme):
    long_stub = ("## D", "d.md", "[D](docs/d.md)\n2\n3\n4\n5")
    unlinked = ("## D", "d.md", "D moved.")
    for extra in (long_stub, unlinked):
        with pytest.raises(SystemExit, match="must be 1-4 lines linking to docs/d.md"):
            split_readme.split(README, moves(split_readme, extra))
