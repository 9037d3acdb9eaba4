"""Prometheus metrics of one collector app, in its own registry (served at ``/metrics``).

Counters are incremented once per batch (``inc(n)``), never once per report. Labels take
only bounded values: route templates, status codes, rejection codes and the names of
metrics defined in the catalog.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reports_accepted = Counter(
            "ldpkit_reports_accepted", "Reports stored (new ids)", ["metric"], registry=r
        )
        self.reports_duplicate = Counter(
            "ldpkit_reports_duplicate", "Valid reports whose id was already stored", registry=r
        )
        self.reports_rejected = Counter(
            "ldpkit_reports_rejected", "Reports refused, by error code", ["reason"], registry=r
        )
        self.batches = Counter(
            "ldpkit_batches", "POST /v1/reports requests by outcome", ["outcome"], registry=r
        )
        self.batch_seconds = Histogram(
            "ldpkit_batch_seconds",
            "Time to check and durably store one batch (from body read to commit)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_reports = Histogram(
            "ldpkit_batch_reports",
            "Reports per batch",
            buckets=(1, 10, 100, 1000, 10_000, 100_000),
            registry=r,
        )
        self.commit_seconds = Histogram(
            "ldpkit_store_commit_seconds",
            "Duration of one store transaction (a group of batches), commit included",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_batches = Histogram(
            "ldpkit_store_group_batches",
            "Batches committed together (group commit)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.queue_batches = Gauge(
            "ldpkit_store_pending_batches", "Batches waiting for their commit", registry=r
        )
        self.throttled = Counter(
            "ldpkit_throttled", "Batches answered 429 because the store is behind", registry=r
        )
        self.requests = Counter(
            "ldpkit_http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.estimate_seconds = Histogram(
            "ldpkit_estimate_seconds",
            "Time to answer an estimates query",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.catalog_reloads = Counter(
            "ldpkit_catalog_reloads",
            "Reloads of the whole metric catalog from the store",
            registry=r,
        )
        self.version_lookups = Counter(
            "ldpkit_version_lookups",
            "Lookups of metric versions a batch named and the catalog lacked",
            registry=r,
        )
        self.metric_versions = Gauge(
            "ldpkit_metric_versions", "Metric versions known to the collector", registry=r
        )

    def watch_queue(self, pending: Callable[[], float]) -> None:
        self.queue_batches.set_function(pending)

    def on_commit(self, seconds: float, batches: int, reports: int) -> None:
        """Store commit listener (called from the store's thread; prometheus is thread-safe)."""
        self.commit_seconds.observe(seconds)
        if batches:
            self.commit_batches.observe(batches)

    def exposition(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data
