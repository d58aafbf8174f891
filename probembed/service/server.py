"""Running the app on uvicorn: logs on stderr (`logs`), graceful shutdown on SIGTERM.

uvicorn handles SIGTERM and SIGINT: it stops accepting connections, lets in-flight requests
finish (for at most `grace_seconds`), cancels those still running, then runs the app's
shutdown, which fails the encodes not answered yet and refuses more (a write still running
learns it at once and undoes itself) and waits for collection work to end. Every write the
service acknowledged was committed before its 200 was sent.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
import socket

import uvicorn
from threadpoolctl import threadpool_limits

from probembed.encoders.base import thread_limit
from probembed.service.app import create_app
from probembed.service.logs import configure_logging
from probembed.service.settings import ServiceSettings, is_loopback
from probembed.store.location import Location

#: File descriptors the server holds besides its connections, measured with the tests'
#: hashing pipeline: 27 at rest (the standard streams, the embedding cache's SQLite files,
#: the event loop's, LanceDB's runtime's), 8 more per encoding child (its pipes), 6 more per
#: collection written and searched (its snapshot's means and texts files, two snapshots while
#: a refresh replaces one). 16 children (4 pipelines of 4) and 120 collections take 875 of
#: them; the rest is for the files LanceDB opens while it reads, commits or compacts.
OTHER_FILES = 1024


def raise_open_files(settings: ServiceSettings) -> str | None:
    """Raise this process's soft limit on open files (its encoding children inherit it) to
    what its connections and `OTHER_FILES` need, as far as the hard limit lets it: at
    systemd's default soft limit, 1,024, 1,010 connections that never finished their headers
    took every descriptor before the default connection bound (1,024) was reached, and no
    client was answered, not even uvicorn's 503. Where the hard limit is lower, the warning
    to log: what to do, naming both numbers."""
    needed = settings.connection_limit + OTHER_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised == needed:
        return None
    fits = (hard - OTHER_FILES) // 2  # the --limit-concurrency whose connections fit
    lower = f"lower --limit-concurrency to {fits}, or " if fits >= 1 else ""
    return (
        f"open files: the server needs {needed} file descriptors ({settings.connection_limit} "
        f"connections, twice --limit-concurrency {settings.limit_concurrency}, and "
        f"{OTHER_FILES} for its children and database), but the hard limit is {hard} (its "
        f"soft limit is raised to that): {lower}raise the hard limit (ulimit -Hn, "
        "LimitNOFILE= in a systemd unit); else connections that never finish their headers "
        "can take every descriptor, and no client is answered"
    )


def keyless_hosts_warning(settings: ServiceSettings) -> str | None:
    """What a server without keys on a network address answers to, said at start: clients
    reaching it by a DNS name (a compose service, a load balancer) get 421 after an upgrade
    from a release that answered any Host."""
    if settings.keys is not None or is_loopback(settings.host):
        return None
    names = "".join(f", {name}" for name in settings.allowed_hosts)
    return (
        f"no API keys: requests are answered for the Host names localhost, its addresses{names} "
        "only; clients using another name get 421 (--allowed-host NAME adds one; /healthz "
        "and /readyz answer any)"
    )


def serve(settings: ServiceSettings) -> None:
    """Serve until SIGTERM/SIGINT."""
    configure_logging(settings.logs)
    # The encoding children have the cores; this process's numpy work is each search's few
    # small products, one search at a time per collection. A BLAS pool of a thread per core
    # would only spin between them, against the children (serve.json's server CPU seconds).
    threadpool_limits(thread_limit() or 1)
    require_database(settings)
    sock = listening_socket(settings.host, settings.port)
    settings = dataclasses.replace(settings, port=sock.getsockname()[1])  # --port 0: the one taken
    logging.getLogger("probembed.service").info(  # /healthz answers while the models load
        "listening on %s, loading pipelines %s (/readyz answers 200 once loaded)",
        *(settings.url, list(settings.pipelines)),
    )
    for warning in (keyless_hosts_warning(settings), raise_open_files(settings)):
        if warning is not None:
            logging.getLogger("probembed.service").warning(warning)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=settings.grace_seconds,  # type: ignore[arg-type]  # a float waits too
        lifespan="on",
        # uvicorn believed X-Forwarded-For from 127.0.0.1 by default: any local process
        # named another client in the access log
        proxy_headers=settings.forwarded_allow_ips is not None,
        forwarded_allow_ips=settings.forwarded_allow_ips,
        limit_concurrency=settings.connection_limit,  # requests: the gate's bound
    )
    uvicorn.Server(config).run(sockets=[sock])


def require_database(settings: ServiceSettings) -> None:
    """Refuse a `db` that names no database (NoDatabaseError) before the port or a model is
    taken, or with `create_db` one that cannot be made there (a file in its place): a mistyped
    --db was made an empty database and served healthy, with no collections, and a file as
    --db failed only after every model had loaded. On object storage a prefix with nothing
    under it is none either (a typo and a new database look alike there); the bucket must
    exist."""
    location = Location(settings.db, settings.storage_options)
    if settings.create_db:  # made once the pipelines load: a failed load leaves nothing
        location.refuse_uncreatable()
    else:
        location.prepare(create=False)


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the models load (uvicorn binds after its start-up,
    so a port in use cost the whole load before its error); OSError names the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock
