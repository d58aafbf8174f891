"""What a collection an earlier release wrote holds, made from one this release wrote."""

from __future__ import annotations

from pathlib import Path


def as_an_earlier_release_wrote(db: Path | str, name: str, where: str = "chunk = 0") -> None:
    """Take the settings off the chunks 0 `where` selects (`DIGEST+N@SIZE:OVERLAP` to
    `DIGEST+N`), as a release before they were recorded wrote them."""
    import lancedb

    table = lancedb.connect(db).open_table(name)
    for mark in table.search().where(where).select(["id", "doc_hash"]).to_list():
        older = mark["doc_hash"].partition("@")[0]
        table.update(where=f"id = '{mark['id']}'", values={"doc_hash": older})
