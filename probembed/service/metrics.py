"""The service's Prometheus metrics, in a registry of its own (one per app, so tests can
run several servers in one process without clashing names)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Request latency buckets (seconds): a cached embedding answers in milliseconds, a large
#: ingest takes seconds.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


class Metrics:
    """Requests by route and status, latency, encode batches, queue depth, collection sizes,
    background compactions."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "probembed_requests_total",
            "HTTP requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "probembed_request_duration_seconds",
            "Time from request received to response sent, by route template.",
            ["method", "route"],
            buckets=_LATENCY,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "probembed_encode_batch_texts",
            "Texts per encode call after dynamic batching.",
            ["pipeline"],
            buckets=_SIZES,
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "probembed_encode_batch_seconds",
            "Time of one encode call.",
            ["pipeline"],
            buckets=_LATENCY,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "probembed_encode_queue_texts",
            "Texts waiting for or in an encode call.",
            ["pipeline"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "probembed_encode_rejected_total",
            "Requests refused with 429 because the encode queue was full.",
            ["pipeline"],
            registry=self.registry,
        )
        self.compactions = Counter(
            "probembed_compactions_total",
            "Background upkeeps of a collection (compact, prune old versions), by outcome.",
            ["collection", "outcome"],
            registry=self.registry,
        )
        self.freed_bytes = Counter(
            "probembed_compaction_freed_bytes_total",
            "Bytes of old versions the background upkeep removed, per collection.",
            ["collection"],
            registry=self.registry,
        )
        self.items = Gauge(
            "probembed_collection_items",
            "Items stored per collection.",
            ["collection"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)
