"""What a running service is allowed to do: its database, pipelines, limits and batching."""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path

from probembed.pipeline import find_pipeline
from probembed.service.auth import ApiKeys
from probembed.service.hosts import check_forwarded, host_name
from probembed.service.logs import LogSettings
from probembed.store.location import refuse_local_options
from probembed.store.upkeep import DEFAULT_KEEP

#: Hits of a search request that does not say how many.
DEFAULT_K = 10
#: Shortest body timeout: below a second, a body that a busy network delays gets 408.
MIN_BODY_TIMEOUT = 1.0
#: Longest a first request may wait for others to join its batch: a minute is already a typo.
MAX_WAIT_MS = 60_000.0


@dataclass(frozen=True)
class Limits:
    """Per-request limits: each refused with a status and a message that names the limit."""

    #: Texts (embedding inputs, documents or queries) per request, as OpenAI's 2048.
    max_inputs: int = 2048
    #: Characters per text: the models read about 256 tokens; a megabyte is a mistake.
    max_chars: int = 32_768
    #: Bytes per request body.
    max_body_bytes: int = 16 * 2**20
    #: Hits per query.
    max_k: int = 1000
    #: Hits per search request, queries × k: a full batch of queries at the default k, or
    #: 20 queries at --max-k (about 26 MB of JSON); 200 queries × k 1000 answered 251 MB.
    max_hits: int = 20_480
    #: Seconds a request may take to send its whole body (408 past it): a client that
    #: stopped half-way through held its connection and its request for ever. A 16 MiB body
    #: (--max-body-bytes) needs some 2.2 Mbit/s to arrive in a minute. 0: no timeout.
    body_timeout: float = 60.0

    def __post_init__(self) -> None:
        _check_positive(self, zero_ok=("body_timeout",))
        if 0 < self.body_timeout < MIN_BODY_TIMEOUT:
            raise ValueError(
                f"--body-timeout (body_timeout) must be at least {MIN_BODY_TIMEOUT:g} s, or 0 "
                f"for no timeout: a shorter one refuses bodies a network delays, got "
                f"{self.body_timeout!r}"
            )
        if self.max_k < DEFAULT_K:
            raise ValueError(
                f"--max-k (max_k) must be at least {DEFAULT_K}, the k of a search that gives "
                f"none, got {self.max_k}"
            )
        if self.max_hits < self.max_k:
            raise ValueError(
                f"--max-hits (max_hits) must be at least --max-k ({self.max_k}), the hits of "
                f"one query, got {self.max_hits}"
            )


@dataclass(frozen=True)
class BatchSettings:
    """How concurrent requests are coalesced into one encode call."""

    #: Texts per encode call; 1 switches batching off.
    max_batch: int = 64
    #: How long the first request of a batch waits for others to join it.
    max_wait_ms: float = 5.0
    #: Texts waiting to be encoded before new requests get 429.
    max_queue: int = 4096
    #: Encoding processes per pipeline, each encoding one batch at a time.
    workers: int = field(default_factory=lambda: default_workers())
    #: Texts per piece of a request over max_batch (or max_batch, if larger): a search sent
    #: during it waits for one piece per child (per such request), not the request; each
    #: piece is an encode call, whose fixed cost makes small pieces cost throughput.
    max_piece: int = 256

    def __post_init__(self) -> None:
        _check_positive(self, zero_ok=("max_wait_ms",))
        if self.max_wait_ms > MAX_WAIT_MS:
            raise ValueError(
                f"--max-wait-ms (max_wait_ms) must be at most {MAX_WAIT_MS:g}: a request waits "
                f"that long for others to join its batch, got {self.max_wait_ms!r}"
            )


@dataclass(frozen=True)
class UpkeepSettings:
    """When the service compacts a collection and prunes its old versions, in the background:
    every commit is a LanceDB version kept on disk until pruned."""

    #: Commits to a collection (its version's rise) after which the next pass compacts it and
    #: prunes its old versions, where `Collection.compaction_due` or `PRUNE_VERSIONS` of them
    #: are past `keep`; 0 turns upkeep off.
    every: int = 64
    #: How long a version is kept after a newer one replaced it (`store.upkeep.DEFAULT_KEEP`
    #: says why a day).
    keep: timedelta = DEFAULT_KEEP

    def __post_init__(self) -> None:
        every = self.every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(
                f"--compact-every (every) must be a whole number of commits >= 0 (0: never), "
                f"got {every!r}"
            )
        if not isinstance(self.keep, timedelta) or self.keep < timedelta(0):
            raise ValueError(f"--compact-keep (keep) must be a duration >= 0, got {self.keep!r}")


@dataclass(frozen=True)
class ServiceSettings:
    """Everything `probembed serve` was started with."""

    #: A directory, or an object-store URI (s3://...) with its `storage_options`.
    db: Path | str
    #: Built-in names or pipeline directories served by /v1/embeddings; the first is the
    #: pipeline of collections created without one.
    pipelines: tuple[str, ...] = ("default",)
    host: str = "127.0.0.1"
    port: int = 8000
    keys: ApiKeys | None = None
    #: Serve without keys on an address other than loopback.
    insecure: bool = False
    limits: Limits = field(default_factory=Limits)
    batching: BatchSettings = field(default_factory=BatchSettings)
    upkeep: UpkeepSettings = field(default_factory=UpkeepSettings)
    #: Seconds in-flight requests get to finish after SIGTERM (`--graceful-timeout`); those
    #: still running then are answered 503 and their writes undone, encoding is abandoned.
    grace_seconds: float = 30.0
    #: LanceDB storage options of an object-store `db` (credentials, endpoint, region).
    storage_options: dict[str, str] = field(default_factory=dict)
    #: Make the database if `db` names none yet; without it a mistyped `db` is refused (it
    #: was made empty, and the service answered healthy with no collections).
    create_db: bool = False
    #: Host names the server answers to besides localhost, its loopback addresses and `host`
    #: (`--allowed-host`): checked without keys (DNS rebinding), and with keys once given.
    allowed_hosts: tuple[str, ...] = ()
    #: Addresses whose X-Forwarded-For and X-Forwarded-Proto are believed, comma-separated,
    #: as uvicorn takes them (`--forwarded-allow-ips`); None: those headers are ignored, so no
    #: local process names another client in the access log.
    forwarded_allow_ips: str | None = None
    #: Requests at once, the health probes aside (`--limit-concurrency`): the gate answers
    #: those past it with the service's 503 and Retry-After. Connections are bounded at
    #: `connection_limit`.
    limit_concurrency: int = 512
    #: How much is logged, and in which format (`--log-level`, `--log-format`), by the server
    #: and its encoding children alike.
    logs: LogSettings = field(default_factory=LogSettings)

    @property
    def connection_limit(self) -> int:
        """Connections at once, past which uvicorn answers 503 itself, in plain text: twice
        the requests, so a request past their bound reaches the gate for its JSON 503 and a
        probe gets in beside them. Connections that never finish their headers (no ASGI code
        sees them) count towards it but are not closed: each holds a file descriptor, which
        the database needs too, and the server raises its open-files limit above this bound
        (`server.raise_open_files`)."""
        return 2 * self.limit_concurrency

    @property
    def url(self) -> str:
        """Where the service answers, as a client writes it (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __post_init__(self) -> None:
        if not self.pipelines:
            raise ValueError("serve needs at least one pipeline (--pipeline NAME_OR_DIR)")
        for name in self.pipelines:
            find_pipeline(name)  # a wrong name fails here, not after the server is up
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ValueError(f"port must be an integer in 0..65535, got {self.port!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        grace = self.grace_seconds
        named = "--graceful-timeout (grace_seconds)"
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
            raise ValueError(f"{named} must be a number of seconds >= 0, got {grace!r}")
        if not math.isfinite(grace):
            raise ValueError(f"{named} must be finite, got {grace!r}")
        refuse_local_options(self.db, self.storage_options)  # before serving, not at load
        for name in self.allowed_hosts:
            host_name(name)  # a URL or a port given by mistake fails here
        if self.forwarded_allow_ips is not None:
            check_forwarded(self.forwarded_allow_ips)
        limit = self.limit_concurrency
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(
                f"--limit-concurrency (limit_concurrency) must be a positive integer, got {limit!r}"
            )
        if self.keys is None and not self.insecure and not is_loopback(self.host):
            raise ValueError(
                f"refusing to serve on {self.host!r} without API keys: anyone who reaches it "
                "could read and change the database. Give keys (--api-keys FILE or "
                "PROBEMBED_API_KEYS), bind to 127.0.0.1, or pass --insecure"
            )


def default_workers() -> int:
    """One encoding process per core, at most four (each holds its own copy of the models)."""
    return min(4, os.cpu_count() or 1)


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_positive(settings: Limits | BatchSettings, zero_ok: tuple[str, ...] = ()) -> None:
    """Every limit is a finite positive number (or zero, where named): a typo fails at
    start-up, named as the option that sets it (an infinite wait would hang requests and
    shutdown)."""
    for f in fields(settings):
        value = getattr(settings, f.name)
        low = 0 if f.name in zero_ok else 1e-300
        counts = f.type == "int"  # texts, bytes, hits, processes: whole numbers
        number = not isinstance(value, bool) and isinstance(value, int if counts else (int, float))
        if not (number and math.isfinite(value) and value >= low):
            sign = "non-negative" if f.name in zero_ok else "positive"
            kind = f"a {sign} integer" if counts else f"a finite {sign} number"
            option = "--" + f.name.replace("_", "-")
            raise ValueError(f"{option} ({f.name}) must be {kind}, got {value!r}")
