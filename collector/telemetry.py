"""Prometheus metrics of one collector app, in its own registry (served at ``/metrics``).

The registry is the app's own (several apps can run in one process, as tests do), with the
series prometheus_client's default registry would have: ``process_*`` (CPU, memory, open
files, start time), ``python_info`` and ``python_gc_*``, and ``ldpkit_build_info{version}``.

Counters are incremented once per batch (``inc(n)``), never once per report. Labels take
only bounded values: route templates, status codes, rejection codes and the names of
metrics defined in the catalog.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import __version__

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


def _standard_registry() -> CollectorRegistry:
    """A registry with what prometheus_client's default one has, and the build's version."""
    registry = CollectorRegistry(auto_describe=True)
    for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(standard)  # stateless readers of this process: shared by every app
    build = Info(
        "build", "The ldpkit version this collector runs", namespace="ldpkit", registry=None
    )
    registry.register(build)
    build.info({"version": __version__})
    return registry


class Telemetry:
    def __init__(self) -> None:
        self.registry = r = _standard_registry()
        counter = partial(Counter, namespace="ldpkit", registry=r)
        gauge = partial(Gauge, namespace="ldpkit", registry=r)
        histogram = partial(Histogram, namespace="ldpkit", registry=r)
        latency = partial(histogram, buckets=LATENCY_BUCKETS)
        self.reports_accepted = counter("reports_accepted", "Reports stored (new ids)", ["metric"])
        self.reports_duplicate = counter(
            "reports_duplicate", "Valid reports whose id was already stored"
        )
        self.reports_rejected = counter(
            "reports_rejected", "Reports refused, by error code", ["reason"]
        )
        self.reports_held = counter(
            "reports_held",
            "Reports screening held apart (not counted until an admin releases them), by "
            "metric and the test that failed (moved from the counts when a sender's window failed)",
            ["metric", "reason"],
        )
        self.reports_refused = counter(
            "reports_refused",
            "Reports of batches refused whole (over_device_cap), by metric and reason",
            ["metric", "reason"],
        )
        self.batches = counter("batches", "POST /v1/reports requests by outcome", ["outcome"])
        self.batch_seconds = latency(
            "batch_seconds", "Time to check and durably store one batch (from body read to commit)"
        )
        self.batch_reports = histogram(
            "batch_reports", "Reports per batch", buckets=(1, 10, 100, 1000, 10_000, 100_000)
        )
        self.commit_seconds = latency(
            "store_commit_seconds",
            "Duration of one store transaction (a group of batches), commit included",
        )
        self.commit_batches = histogram(
            "store_group_batches",
            "Batches committed together (group commit)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.queue_batches = gauge("store_pending_batches", "Batches waiting for their commit")
        self.bodies_receiving = gauge(
            "request_bodies_receiving", "Request bodies being received right now (uploads.py)"
        )
        self.bodies_held_bytes = gauge(
            "request_body_bytes_held",
            "Bytes of request bodies held in memory (arrived so far, or waiting for the answer)",
        )
        self.throttled = counter("throttled", "Batches answered 429 because the store is behind")
        self.requests = counter(
            "http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
        )
        self.estimate_seconds = latency(
            "estimate_seconds",
            "Time to answer an estimates query (the request; see estimate_compute_seconds for "
            "the maintained kinds' computations), by metric kind",
            ["kind"],
        )
        self._estimate_series(counter, gauge, histogram)
        self.catalog_reloads = counter(
            "catalog_reloads", "Reloads of the whole metric catalog from the store"
        )
        self.version_lookups = counter(
            "version_lookups", "Lookups of metric versions a batch named and the catalog lacked"
        )
        self.metric_versions = gauge("metric_versions", "Metric versions known to the collector")

    def _estimate_series(
        self,
        counter: Callable[..., Counter],
        gauge: Callable[..., Gauge],
        histogram: Callable[..., Histogram],
    ) -> None:
        """The maintained estimates' series (collector/results.py), by metric kind."""
        self.estimates_computed = counter(
            "estimates_computed",
            "Maintained estimates computed by this process, by metric kind and outcome (ok, "
            "or failed: over_budget, error); one per version, bucket set and data across "
            "the replicas of a store",
            ["kind", "outcome"],
        )
        self.estimate_compute_seconds = histogram(
            "estimate_compute_seconds",
            "CPU seconds of one maintained estimate's computation, by metric kind",
            ["kind"],
            buckets=(0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
        )
        self.estimate_queue = gauge(
            "estimate_queue",
            "Maintained estimates waiting for the worker or computing, by metric kind",
            ["kind"],
        )
        self.estimate_memory = gauge(
            "estimate_peak_memory_bytes",
            "Peak resident memory of the estimate worker during its last computation, by kind",
            ["kind"],
        )

    def on_commit(self, seconds: float, batches: int, reports: int) -> None:
        """Store commit listener (called from the store's thread; prometheus is thread-safe)."""
        self.commit_seconds.observe(seconds)
        if batches:
            self.commit_batches.observe(batches)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
