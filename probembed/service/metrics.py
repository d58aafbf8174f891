"""The service's Prometheus metrics, in a registry of its own (one per app, so tests can
run several servers in one process without clashing names), with the process's own (memory,
CPU, open files) and without the `_created` series."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

#: Request latency buckets (seconds): a cached embedding answers in milliseconds, a large
#: ingest takes seconds.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


class Metrics:
    """Requests by route and status, in flight, latency, encode batches, queue depth, encoding
    children replaced, collection sizes, background compactions, and the process's resources."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # resident memory, CPU seconds, open fds
        self.in_flight = Gauge(
            "probembed_requests_in_flight",
            "HTTP requests received and not yet answered.",
            registry=self.registry,
        )
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
        self.respawned = Counter(
            "probembed_encoder_respawns",
            "Encoding child processes that died (killed, crashed) and were replaced.",
            ["pipeline"],
            registry=self.registry,
        )
        self.items = Gauge(
            "probembed_collection_items",
            "Items stored per collection.",
            ["collection"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The text exposition format of every metric, without the `_created` series: a
        timestamp per label set that doubled the scrape and that no alert reads
        (`disable_created_metrics` would change every registry of the process)."""
        return generate_latest(_WithoutCreated(self.registry))


class _WithoutCreated:
    """A registry's metrics without their `_created` samples."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        """Each metric as collected, less its `_created` samples."""
        for metric in self.registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric
