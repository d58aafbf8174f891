"""Deleting by a metadata filter (`Collection.delete(where=)`, `probembed delete --where`):
erasing a customer's rows took a search with `--where ... -k 1000` to find their ids."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from probembed.interfaces.cli import app
from probembed.store import Database, Record, StoreError, ingest

runner = CliRunner()


@pytest.fixture
def customers(tmp_path, hash_pipeline):
    """Collection c of nine items, three for each of customers k0, k1 and k2."""
    collection = Database(tmp_path / "db", create=True).collection("c")
    items = [Record(f"r{i}", f"order {i}", {"customer": f"k{i % 3}"}) for i in range(9)]
    ingest(items, collection, hash_pipeline)
    return collection


def test_a_filter_deletes_the_items_it_selects_and_no_other(customers):
    assert customers.delete(where="customer = 'k1'") == 3
    assert customers.ids() == {f"r{i}" for i in range(9) if i % 3 != 1}
    assert customers.delete(where="customer = 'k1'") == 0  # none left to select


@pytest.mark.parametrize("where", ["custmer = 'k1'", "customer = k1", "Customer = 'k1'", "a; b"])
def test_a_bad_filter_is_refused_as_search_refuses_it_and_deletes_nothing(customers, where):
    with pytest.raises(StoreError) as searched:
        customers.search("order", where=where)
    with pytest.raises(StoreError) as deleted:
        customers.delete(where=where)
    assert str(deleted.value) == str(searched.value)
    assert customers.count() == 9


@pytest.mark.parametrize("where", ["", "  ", "1 = 1", "customer = customer"])
def test_a_filter_selecting_every_item_is_refused_unless_allowed(customers, where):
    with pytest.raises(StoreError, match=r"selects every item .* \(9\).*allow_all=True"):
        customers.delete(where=where)
    assert customers.count() == 9
    assert customers.delete(where=where, allow_all=True) == 9
    assert customers.count() == 0


def test_ids_and_a_filter_together_or_neither_are_refused(customers):
    for arguments in ({"ids": ["r0"], "where": "customer = 'k0'"}, {}):
        with pytest.raises(StoreError, match="one of the two"):
            customers.delete(**arguments)
    assert customers.count() == 9


def delete(customers, *args: str):
    """`probembed delete` on collection c of the fixture's database."""
    db = str(customers.db.path)
    return runner.invoke(app, ["delete", "--db", db, "-c", "c", *args])


def test_the_cli_deletes_by_filter_and_says_how_many(customers):
    said = delete(customers, "--where", "customer = 'k2'")
    assert said.exit_code == 0, said.output
    assert "deleted 3 item(s) selected by --where" in said.stderr
    assert customers.ids() == {f"r{i}" for i in range(9) if i % 3 != 2}


def test_the_cli_refuses_a_filter_of_every_item_naming_all_and_takes_it_with_all(customers):
    said = delete(customers, "--where", "1 = 1")
    assert said.exit_code == 2
    assert "selects every item" in said.stderr and "pass --all to delete them all" in said.stderr
    assert customers.count() == 9
    said = delete(customers, "--where", "1 = 1", "--all")
    assert said.exit_code == 0, said.output
    assert customers.count() == 0


@pytest.mark.parametrize(
    ("command", "where", "told"),
    [
        (["delete"], "custmer = 'k1'", "invalid filter --where \"custmer = 'k1'\": no field"),
        (["erase", "--yes"], "custmer = 'k1'", "invalid filter --where \"custmer = 'k1'\": no"),
        (["delete"], "1 = 1", "filter --where '1 = 1' selects every item"),
    ],
)
def test_the_cli_names_a_refused_filter_by_its_option(customers, command, where, told):
    """delete and erase said `invalid filter where='...'` (the Python parameter), and delete
    `filter where='1 = 1' selects every item`, where search says `--where`."""
    db = ["--db", str(customers.db.path), "-c", "c"]
    said = runner.invoke(app, [*command, *db, "--where", where])
    assert said.exit_code == 2, said.output
    assert told in " ".join(said.stderr.split()) and "where=" not in said.stderr
    assert customers.count() == 9


def test_the_cli_erases_a_filter_of_every_item_only_with_all(customers):
    """`erase --where '1 = 1' --yes` erased every item for good, where delete, which undo
    takes back, refuses it without --all."""
    erase = ["erase", "--yes", "--db", str(customers.db.path), "-c", "c", "--where", "1 = 1"]
    said = runner.invoke(app, erase)
    assert said.exit_code == 2, said.output
    told = " ".join(said.stderr.split())
    assert "filter --where '1 = 1' selects every item" in told and "pass --all to erase" in told
    assert customers.count() == 9
    alone = runner.invoke(app, ["erase", "r0", "--all", "--yes", "--db", str(customers.db.path)])
    assert alone.exit_code == 2 and "--all goes with --where" in alone.stderr
    said = runner.invoke(app, [*erase, "--all"])
    assert said.exit_code == 0, said.output
    assert customers.count() == 0


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (["r0", "--where", "customer = 'k0'"], "give ids or --where, not both"),
        (["--all", "r0"], "--all goes with --where"),
        (["--doc", "--where", "customer = 'k0'"], "leave out --doc"),
        ([], "give the ids to delete, or --where FILTER"),
    ],
)
def test_the_cli_refuses_options_that_do_not_go_together(customers, args, told):
    said = delete(customers, *args)
    assert said.exit_code == 2 and told in said.stderr
    assert customers.count() == 9
