"""The store's commands on the probembed CLI, registered in one place: ingest and embed
(`ingest_commands`), search (`search_command`), collections, delete, erase, drop, undo,
compact, pins and backup (`collection_commands`), the demo and serve; the options they share are in
`store_options`."""

from __future__ import annotations

import typer

from probembed.interfaces.collection_commands import (
    backup_command,
    collections_command,
    compact_command,
    delete_command,
    drop_command,
    erase_command,
    pins_command,
    undo_command,
)
from probembed.interfaces.ingest_commands import embed_command, ingest_command
from probembed.interfaces.search_command import search_command


def register(app: typer.Typer) -> None:
    """Add the store's commands to the probembed CLI."""
    app.command("ingest")(ingest_command)
    app.command("embed")(embed_command)
    app.command("search")(search_command)
    app.command("collections")(collections_command)
    app.command("delete")(delete_command)
    app.command("erase")(erase_command)
    app.command("drop")(drop_command)
    app.command("undo")(undo_command)
    app.command("compact")(compact_command)
    app.command("pins")(pins_command)
    app.command("backup")(backup_command)
    from probembed.interfaces.demo_command import demo_command  # it builds on ingest and search

    app.command("demo")(demo_command)
    from probembed.interfaces.serve_command import serve_command

    app.command("serve")(serve_command)
