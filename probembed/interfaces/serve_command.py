"""`probembed serve`: the HTTP service, parsed here and run by probembed.service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from probembed.interfaces.console import fail
from probembed.interfaces.store_options import (
    DbOption,
    StorageOption,
    resolve_db,
    storage_options,
    store_refusal,
)


def serve_command(
    db: DbOption = None,
    storage_option: StorageOption = None,
    create_db: Annotated[
        bool,
        typer.Option(
            "--create-db",
            help="Make the database if --db names none yet (an empty object-storage prefix "
            "is none); without it such a --db is refused, as a typo would serve an empty one. "
            "The default location is made when missing.",
        ),
    ] = False,
    pipeline: Annotated[
        list[str] | None,
        typer.Option(
            help="Built-in name or pipeline directory to serve (repeatable) \\[default: default].",
            show_default=False,
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port to bind (0: any free port).", min=0, max=65535)
    ] = 8000,
    api_keys: Annotated[
        Path | None,
        typer.Option(
            "--api-keys",
            help="File of 'KEY \\[read,write,metrics]' lines \\[default: env PROBEMBED_API_KEYS, "
            "which holds those lines themselves, ';'-separated; else none].",
            show_default=False,
        ),
    ] = None,
    insecure: Annotated[
        bool, typer.Option(help="Allow serving without keys on a non-loopback address.")
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name clients reach the server by, besides localhost, loopback "
            "addresses and --host (repeatable; with API keys, given names make the Host "
            "checked too). Without keys other names get 421: a web page can point its own "
            "name at this machine (DNS rebinding).",
            show_default=False,
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Proxies (addresses or networks, comma-separated, or '*') whose "
            "X-Forwarded-For and X-Forwarded-Proto are believed \\[default: none: ignored].",
            show_default=False,
        ),
    ] = None,
    limit_concurrency: Annotated[
        int,
        typer.Option(
            help="Requests at once, health probes aside; beyond, 503 with Retry-After "
            "(connections: twice as many)."
        ),
    ] = 512,
    max_batch: Annotated[int, typer.Option(help="Texts per encode call (1: no batching).")] = 64,
    max_wait_ms: Annotated[
        float, typer.Option(help="How long a batch waits for more requests.")
    ] = 5.0,
    max_queue: Annotated[int, typer.Option(help="Texts queued before 429.")] = 4096,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Encoding processes per pipeline \\[default: one per core, at most 4].",
            show_default=False,
        ),
    ] = None,
    max_piece: Annotated[
        int,
        typer.Option(
            help="Texts per piece of a request over --max-batch (or --max-batch, if larger): "
            "a search sent meanwhile waits for one piece per process (per such request), not "
            "the request; smaller pieces cost a large request throughput."
        ),
    ] = 256,
    max_inputs: Annotated[int, typer.Option(help="Texts per request.")] = 2048,
    max_chars: Annotated[int, typer.Option(help="Characters per text.")] = 32_768,
    max_body_bytes: Annotated[int, typer.Option(help="Bytes per request body.")] = 16 * 2**20,
    body_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a request may take to send its whole body (408), at least 1 "
            "(0: no timeout)."
        ),
    ] = 60.0,
    max_k: Annotated[int, typer.Option(help="Hits per query.")] = 1000,
    max_hits: Annotated[
        int, typer.Option(help="Hits per search request: queries × k (at least --max-k).")
    ] = 20_480,
    graceful_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds in-flight requests get to finish after SIGTERM; those still running "
            "then get a 503, their writes undone, and the encoding they wait for is abandoned.",
            min=0,
        ),
    ] = 30.0,
    compact_every: Annotated[
        int,
        typer.Option(
            help="Compact a collection and prune its old versions in the background after "
            "this many commits to it, where 16 small fragments piled up or 256 versions are "
            "past --compact-keep (0: never)."
        ),
    ] = 64,
    compact_keep: Annotated[
        str,
        typer.Option(
            help="Keep a version this long after a newer one replaced it (90s, 30m, 12h, 1d): "
            "a reader or a running write's undo may still read it."
        ),
    ] = "1d",
    log_level: Annotated[
        str,
        typer.Option(
            help="debug, info (each request's access line), warning or error: the server's "
            "and its encoding processes' lines at or above it (others' at warning or above)."
        ),
    ] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            help="text (time, logger, level, message; access lines JSON) or json (every line "
            "a JSON object, for a log shipper)."
        ),
    ] = "text",
) -> None:
    """Serve embeddings (OpenAI-compatible), collections and search over HTTP."""
    from probembed.service import BatchSettings, Limits, ServiceSettings, load_keys
    from probembed.service.logs import LogSettings
    from probembed.service.settings import UpkeepSettings, default_workers
    from probembed.store.errors import NoDatabaseError, StoreError
    from probembed.store.upkeep import parse_duration

    if workers is None:
        workers = default_workers()
    try:
        settings = ServiceSettings(
            db=resolve_db(db),
            storage_options=storage_options(storage_option),
            pipelines=tuple(pipeline or ["default"]),
            host=host,
            port=port,
            keys=load_keys(api_keys),
            insecure=insecure,
            limits=Limits(max_inputs, max_chars, max_body_bytes, max_k, max_hits, body_timeout),
            batching=BatchSettings(max_batch, max_wait_ms, max_queue, workers, max_piece),
            upkeep=UpkeepSettings(compact_every, parse_duration(compact_keep, "--compact-keep")),
            grace_seconds=graceful_timeout,
            create_db=create_db or db is None,  # no typo in a location nobody typed
            allowed_hosts=tuple(allowed_host or ()),
            forwarded_allow_ips=forwarded_allow_ips,
            limit_concurrency=limit_concurrency,
            logs=LogSettings(log_level.lower(), log_format.lower()),
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    from probembed.service import serve  # the app and the store: none for a refused option

    try:
        serve(settings)
    except NoDatabaseError as exc:  # the database and the port: checked before any model loads
        raise fail(exc.told("--create-db", exc.after)) from exc
    except (StoreError, OSError) as exc:
        raise store_refusal(exc, str(exc)) from exc
