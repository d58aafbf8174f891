"""benchmarks/readme_tables.py rewrites each table in whichever file holds its markers, README.md
or a page under docs/, and its --check exits 1 while one is stale."""

import re
from pathlib import Path
from types import ModuleType

import pytest
from script_support import script_module


@pytest.fixture(scope="module")
def readme_tables() -> ModuleType:
    """The script under test, imported once for the module."""
    return script_module("benchmarks", "readme_tables")


def marked(sections: list[str], body: str = "") -> str:
    """A page holding each section's markers around `body`, between paragraphs of prose."""
    return "".join(f"Prose.\n\n<!-- {s} -->\n{body}\n<!-- /{s} -->\n\n" for s in sections)


@pytest.fixture
def checkout(readme_tables, tmp_path) -> Path:
    """A README.md holding the first table's markers and docs/results.md the others', all stale."""
    first, *others = readme_tables.SECTIONS
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(marked([first], "old"), encoding="utf-8")
    (tmp_path / "docs" / "results.md").write_text(marked(others, "old"), encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("No tables here.\n", encoding="utf-8")
    return tmp_path


def test_the_repositorys_tables_quote_the_committed_results(readme_tables):
    assert readme_tables.main(["--check"]) == 0


def test_tables_are_rewritten_in_the_file_that_holds_their_markers(readme_tables, checkout):
    assert readme_tables.main(["--check"], checkout) == 1
    assert "old" in (checkout / "docs" / "results.md").read_text(encoding="utf-8")
    assert readme_tables.main([], checkout) == 0
    assert readme_tables.main(["--check"], checkout) == 0
    source, make = readme_tables.SECTIONS["quality"]
    results = (checkout / "docs" / "results.md").read_text(encoding="utf-8")
    quality = make(readme_tables.rows_of(source))
    assert f"<!-- quality -->\n{quality}\n<!-- /quality -->" in results and "old" not in results
    first = next(iter(readme_tables.SECTIONS))
    assert "old" not in (checkout / "README.md").read_text(encoding="utf-8")
    assert f"<!-- {first} -->" not in results
    assert (checkout / "docs" / "other.md").read_text(encoding="utf-8") == "No tables here.\n"


def test_one_stale_table_on_a_page_makes_check_fail(readme_tables, checkout):
    readme_tables.main([], checkout)
    results = checkout / "docs" / "results.md"
    text = results.read_text(encoding="utf-8")
    results.write_text(text.replace("| uec |", "| uec | 0.00 |", 1), encoding="utf-8")
    assert readme_tables.main(["--check"], checkout) == 1
    assert readme_tables.main([], checkout) == 0
    assert results.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("where", ["both", "neither"])
def test_a_table_whose_markers_are_in_two_files_or_none_is_refused(readme_tables, checkout, where):
    if where == "both":
        with (checkout / "README.md").open("a", encoding="utf-8") as readme:
            readme.write(marked(["quality"]))
    else:
        results = checkout / "docs" / "results.md"
        results.write_text(results.read_text().replace("<!-- quality -->", ""), encoding="utf-8")
    found = "README.md, results.md" if where == "both" else "none of README.md and docs/*.md"
    told = f"<!-- quality --> must be in one file; it is in {found}"
    with pytest.raises(SystemExit, match=re.escape(told)):
        readme_tables.main(["--check"], checkout)
