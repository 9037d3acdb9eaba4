"""The collector's logic between HTTP and the store: catalog, ingest, estimates.

One :class:`Collector` per app. It keeps an in-memory snapshot of the metric catalog
(reloaded from the store after a PUT or DELETE, when the store says another process
changed it (PostgreSQL LISTEN/NOTIFY), every ``catalog_refresh_seconds``, when a batch
names a version that the store has and the catalog lacks (looked up by fingerprint, one
indexed query), and at most once a second when an estimate names a metric or version it
does not know, so replicas sharing a database catch up), and the pre-serialized
``GET /v1/metrics`` bodies with their ETags. It holds nothing else another replica would
need.

Costly aggregations (see :func:`~ldpkit.collector.ingest.aggregation_seconds`) run in a
:class:`~ldpkit.collector.fairness.FairLane`, round-robin between ingest tokens, before
the store; the others in the store's writer. Blocks are screened where they are
aggregated, and each sender's window after its batch is stored
(:mod:`~ldpkit.collector.holding`).

A device token's batch may carry per metric version and bucket at most what one device's
ledger allows (``MetricDefinition.device_cap``): more is refused whole
(:class:`~ldpkit.errors.OverDeviceCap`), unless it is a retry of a batch stored before.

Background tasks: the periodic catalog reload, compaction of partial aggregates (every
``compact_seconds``), and pruning of batch ids (and v1 report ids) older than
``report_id_retention_days``, the acceptance window (hourly; the store skips work already
done that day). Batches whose bucket is older than that window, or than the store's
pruning mark (read at start and after each pruning), are refused: their ids may be gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import (
    BatchNotStored,
    OverDeviceCap,
    QueryError,
    UnknownMetric,
    UnsupportedVersion,
)
from ..metrics import MetricDefinition
from ..wire import FINGERPRINT_PATTERN, LEGACY_VERSION, Batch, Block, decode
from .admission import Admission
from .config import CollectorConfig
from .fairness import EXPENSIVE_SECONDS, FairLane
from .holding import Senders, screen_block
from .ingest import (
    BatchVerdict,
    RefusedReports,
    aggregation_seconds,
    check_batch,
    oldest_bucket,
    prune_before,
    refused_again,
    refused_as_reused,
    rejections_json,
)
from .queries import EstimateQuery, answer_body, estimate_body, with_options
from .responses import dumps, etag_of
from .results import Estimates
from .store import (
    Catalog,
    CheckedReports,
    IngestResult,
    Origin,
    PutOutcome,
    Store,
    StoreClosed,
    StoreError,
)
from .telemetry import Telemetry

log = logging.getLogger("ldpkit.collector")

REFRESH_INTERVAL = 1.0
MAX_LOOKUPS = 64  # versions looked up for one batch
MAX_UNLOADABLE = 1024
PRUNE_INTERVAL = 3600.0
COMPACT_ROWS = 20_000  # partial rows folded per compaction transaction
READY_TIMEOUT = 2.0  # seconds the store may take to answer /readyz
READY_HOLD = 10.0  # seconds /readyz answers 503 after a batch failed in the store


@dataclass(frozen=True)
class Serialized:
    body: bytes
    etag: str


def _serialized(data: object) -> Serialized:
    body = dumps(data)
    return Serialized(body, etag_of(body))


CatalogBodies = tuple[Serialized, dict[str, Serialized]]


def catalog_bodies(catalog: Catalog) -> CatalogBodies:
    """The bodies of ``GET /v1/metrics`` and of each ``GET /v1/metrics/{name}``."""
    current = sorted(catalog.current.values(), key=lambda d: d.name)
    listed = [d.to_dict() for d in current if d.name not in catalog.retired]
    return _serialized({"metrics": listed}), {
        d.name: _serialized(
            dict(d.to_dict(), retired=True) if d.name in catalog.retired else d.to_dict()
        )
        for d in current
    }


class Collector:
    def __init__(self, config: CollectorConfig, store: Store, telemetry: Telemetry) -> None:
        self.config = config
        self.store = store
        self.telemetry = telemetry
        self.catalog = Catalog()
        self.ready = False
        self.draining = False
        self.admission = Admission(config, store, telemetry)  # POST /v1/reports held
        self.store_failed_at: float | None = None  # monotonic time of the last failed batch
        self.metrics_body = _serialized({"metrics": []})
        self._metric_bodies: dict[str, Serialized] = {}
        self._fp_names: dict[str, str] = {}
        self._last_refresh = 0.0
        self._refresh_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._pruned_before: int | None = None  # ids of older buckets may be gone
        self._unloadable: set[str] = set()  # stored versions this code cannot load
        self.lane = FairLane()  # costly aggregations, round-robin between senders
        self._notified: asyncio.Task[None] | None = None
        self.senders = Senders(
            config.screen_false_alarm,
            config.screen_window_seconds,
            config.screen_senders,
            config.screen_memory_mib * 2**20,
        )
        self.estimates = Estimates(config, store, telemetry, self._every_version)

    async def start(self) -> None:
        store = self.store
        store.commit_listener = self.telemetry.on_commit
        store.catalog_listener = self._catalog_changed
        self.telemetry.queue_batches.set_function(lambda: store.pending_batches)
        await store.open()
        try:
            await self._apply_config_metrics()
            await self.refresh_catalog()
            self._pruned_before = await store.pruned_before()
        except BaseException:
            await store.close()
            raise
        self.lane.start()
        await self.estimates.start()
        self.ready = True
        self._tasks = [
            asyncio.create_task(self._refresh_loop(), name="ldpkit-catalog-refresh"),
            asyncio.create_task(self._prune_loop(), name="ldpkit-prune"),
            asyncio.create_task(self._compact_loop(), name="ldpkit-compact"),
        ]
        tokens = self.config.tokens
        for kind, configured in (
            ("ingest or relay", tokens.ingest + tokens.relay),
            ("read", tokens.read),
            ("admin", tokens.admin),
        ):
            if not configured:
                log.warning("no %s token configured: %s requests will be refused", kind, kind)

    async def _apply_config_metrics(self) -> None:
        """The config's ``[metrics]`` tables, each like a PUT (but a retired metric stays
        retired); metrics the config defined before and no longer lists are retired."""
        store = self.store
        for definition in self.config.metrics.values():
            outcome = await store.put_metric(definition, origin=Origin.CONFIG)
            if outcome is PutOutcome.RETIRED:
                log.warning(
                    "metric %s is retired; its [metrics.%s] table is ignored (remove it from "
                    "the config, or PUT the metric to take it back into service)",
                    definition.name,
                    definition.name,
                )
            elif outcome is not PutOutcome.UNCHANGED:
                log.info(
                    "metric %s from the config: %s (version %s)",
                    definition.name,
                    outcome.value,
                    definition.fingerprint,
                )
        catalog = await store.load_catalog()
        dropped = [
            name
            for name, origin in sorted(catalog.origins.items())
            if origin is Origin.CONFIG and name not in self.config.metrics
        ]
        for name in dropped:
            if await store.retire_metric(name):
                log.info(
                    "metric %s is no longer in the config: retired (its data stays "
                    "queryable; it takes no more reports)",
                    name,
                )

    async def stop(self) -> None:
        self.ready = False
        tasks = [*self._tasks, *([self._notified] if self._notified is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = []
        await self.estimates.stop()
        await self.lane.stop()
        await self.store.close()

    def _every_version(self) -> list[MetricDefinition]:
        return [d for versions in self.catalog.versions.values() for d in versions.values()]

    def _catalog_changed(self) -> None:
        """The store saw another process change the catalog: reload it soon (once)."""
        if self._notified is None or self._notified.done():
            self._notified = asyncio.create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh_catalog()
        except Exception as exc:  # keep the loop alive; the next reload may succeed
            log.warning("catalog reload failed: %s", exc)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.catalog_refresh_seconds)
            await self._refresh_quietly()

    async def _prune_loop(self) -> None:
        days = self.config.report_id_retention_days
        while True:
            try:
                await self.store.prune_report_ids(prune_before(time.time(), days))
                # After the window was raised, or pruned by a replica with a shorter one.
                self._pruned_before = await self.store.pruned_before()
            except StoreClosed:
                return
            except StoreError as exc:
                log.warning("pruning report ids failed: %s", exc)
            await asyncio.sleep(PRUNE_INTERVAL)

    async def _compact_loop(self) -> None:
        """Fold partial aggregates into the bucket aggregates, as fast as they come (a full
        round of rows goes again at once), so estimates read few of them."""
        while True:
            try:
                folded = await self.store.compact()
            except StoreClosed:
                return
            except StoreError as exc:
                log.warning("compaction failed: %s", exc)
                folded = 0
            if folded < COMPACT_ROWS:
                await asyncio.sleep(self.config.compact_seconds)

    def _set_catalog(self, catalog: Catalog, bodies: CatalogBodies) -> None:
        self.catalog = catalog
        self.metrics_body, self._metric_bodies = bodies
        self._fp_names = {
            fp: name for name, versions in catalog.versions.items() for fp in versions
        }
        self.telemetry.metric_versions.set(len(self._fp_names))

    async def refresh_catalog(self) -> None:
        async with self._refresh_lock:
            self.telemetry.catalog_reloads.inc()
            catalog = await self.store.load_catalog()
            # Serializing a 65,536-leaf definition takes a while: not on the event loop.
            loop = asyncio.get_running_loop()
            self._set_catalog(catalog, await loop.run_in_executor(None, catalog_bodies, catalog))
            self._last_refresh = time.monotonic()

    async def _maybe_refresh(self) -> bool:
        if time.monotonic() - self._last_refresh < REFRESH_INTERVAL:
            return False
        await self.refresh_catalog()
        return True

    async def _learn_versions(self, fingerprints: set[str]) -> bool:
        """Look up, by fingerprint, versions a batch names that the catalog lacks (one
        indexed query, however large the catalog): a version defined through another
        replica a moment ago is then known before its reports are refused. Reloads the
        catalog only when one is found. Whether the catalog changed."""
        wanted = sorted(
            fp
            for fp in fingerprints
            if FINGERPRINT_PATTERN.fullmatch(fp) and fp not in self._unloadable
        )[:MAX_LOOKUPS]
        if not wanted:
            return False
        self.telemetry.version_lookups.inc()
        try:
            found = await self.store.find_versions(wanted)
        except StoreError as exc:
            log.warning("looking up metric versions failed: %s", exc)
            return False
        if not found:
            return False
        await self.refresh_catalog()
        missing = {fp for fp, _, _ in found if fp not in self._fp_names}
        self._unloadable_found(missing)
        return len(missing) < len(found)

    def _unloadable_found(self, missing: set[str]) -> None:
        """Versions stored that this ldpkit cannot load: not looked up again."""
        if missing:
            if len(self._unloadable) > MAX_UNLOADABLE:
                self._unloadable.clear()
            self._unloadable.update(missing)

    def metric(self, name: str) -> Serialized:
        if (found := self._metric_bodies.get(name)) is None:
            raise UnknownMetric(f"no metric named {name[:80]!r}")
        return found

    def metric_versions(self, name: str) -> dict[str, object]:
        versions = self.catalog.versions.get(name)
        current = self.catalog.current.get(name)
        if versions is None or current is None:
            raise UnknownMetric(f"no metric named {name[:80]!r}")
        return {
            "metric": name,
            "current": current.fingerprint,
            "retired": name in self.catalog.retired,
            "versions": [dict(d.to_dict(), fingerprint=fp) for fp, d in versions.items()],
        }

    async def retire_metric(self, name: str) -> bool:
        """Retire ``name`` (``DELETE /v1/metrics/{name}``): True if retired now, False if it
        already was; 404 if there is no such metric."""
        retired = await self.store.retire_metric(name)
        await self.refresh_catalog()
        if retired is None:
            raise UnknownMetric(f"no metric named {name[:80]!r}")
        if retired:
            log.info("metric %s: retired", name)
        return retired

    async def put_metric(self, definition: MetricDefinition) -> tuple[PutOutcome, str | None]:
        previous = self.catalog.current.get(definition.name)
        outcome = await self.store.put_metric(definition)
        await self.refresh_catalog()
        log.info(
            "metric %s: %s (version %s)", definition.name, outcome.value, definition.fingerprint
        )
        return outcome, previous.fingerprint if previous is not None else None

    async def readiness(self) -> str | None:
        """None when ready for batches, else why not (``/readyz`` answers 503 with it)."""
        if not self.ready or self.draining:
            return "starting up or shutting down"
        failed = self.store_failed_at
        if failed is not None and (reason := await self._writes_fail(failed)) is not None:
            return reason
        try:
            await asyncio.wait_for(self.store.ping(), timeout=READY_TIMEOUT)
        except (StoreError, TimeoutError) as exc:
            return f"the store does not answer: {exc or type(exc).__name__}"
        if self.admission.overloaded(self.config.max_pending_bytes // 4):
            return (
                "the store is behind, or the collector holds nearly as many batches (or "
                "bytes of them) as it may"
            )
        return None

    async def _writes_fail(self, failed: float) -> str | None:
        """Batches failed in the store (a full disk, say) at ``failed``: not ready for
        READY_HOLD seconds, so a load balancer takes this replica out; then a small write
        decides (it may pass while batches still fail: the next failure holds again)."""
        if time.monotonic() - failed < READY_HOLD:
            return "the store failed to store the last batch"
        try:
            await asyncio.wait_for(self.store.probe_write(), timeout=READY_TIMEOUT)
        except (StoreError, TimeoutError) as exc:
            return f"the store fails to write: {exc or type(exc).__name__}"
        if self.store_failed_at == failed:
            self.store_failed_at = None
        return None

    async def ingest(
        self,
        body: bytes | bytearray,
        *,
        token: bytes = b"",
        charge: Callable[[int], None] | None = None,
        source: bytes = b"",
        device: bool = False,
    ) -> dict[str, object]:
        """Check, screen and store one batch; the answer of ``POST /v1/reports``. ``charge`` is
        called with the number of reports once the batch is decoded (it may raise to refuse the
        batch: nothing is stored). ``token`` (the sender's token digest) is whom costly work is
        charged to; ``source`` the keyed id of where it came from (its screening window);
        ``device``: sent with a device (ingest) token, not a relay one. Raises ProtocolError
        (UnsupportedVersion), OverDeviceCap, StoreClosed and BatchNotStored."""
        batch = self._decode(body)
        blocks = batch.blocks
        if charge is not None:
            charge(sum(b.n for b in blocks))
        checked = await self._check(blocks)
        if device:
            await self._check_cap(checked.blocks, batch.batch_id)
        alpha = self.config.screen_false_alarm if device or self.config.screen_relay else 0.0
        valid = await self._aggregate_costly(token, checked.blocks, alpha)
        if alpha:
            valid = self.senders.hold_known(source, valid)
        result = await self._store(valid, batch.batch_id, alpha) if valid else IngestResult(0, 0)
        rejected = checked.rejected
        if result.refused_before:
            rejected = rejected + refused_again(blocks, rejected, result.refused_before)
        if result.reused:
            rejected = rejected + refused_as_reused(blocks, rejected, result.reused)
        self._count(result, rejected)
        moved = await self._move_to_held(source, result.blocks) if result.blocks else 0
        self.telemetry.batch_reports.observe(checked.total)
        return {
            "accepted": result.accepted,
            "duplicates": result.duplicates,
            "held": result.held_reports + moved,
            "rejected": rejections_json(rejected),
        }

    def _decode(self, body: bytes | bytearray) -> Batch:
        cfg = self.config
        batch = decode(
            body, max_reports=cfg.max_reports_per_batch, max_blocks=cfg.max_blocks_per_batch
        )
        if batch.version == LEGACY_VERSION and not cfg.accept_v1:
            raise UnsupportedVersion(
                "wire format v1 (a report id per report) is no longer accepted by this "
                "collector: send sealed v2 batches (upgrade the ldpkit client)"
            )
        return batch

    async def _check(self, blocks: Sequence[Block]) -> BatchVerdict:
        """The batch checked against the catalog (learning what it lacks) and the window."""
        oldest = oldest_bucket(time.time(), self.config.report_id_retention_days)
        if self._pruned_before is not None:
            oldest = max(oldest, self._pruned_before)
        checked = check_batch(blocks, self.catalog, time.time(), oldest=oldest)
        if checked.unknown and await self._learn_versions(checked.unknown):
            checked = check_batch(blocks, self.catalog, time.time(), oldest=oldest)
        return checked

    def _version(self, fingerprint: str) -> MetricDefinition | None:
        name = self._fp_names.get(fingerprint)
        return None if name is None else self.catalog.versions.get(name, {}).get(fingerprint)

    async def _check_cap(self, blocks: list[CheckedReports], batch_id: bytes | None) -> None:
        """Refuse a device token's batch (OverDeviceCap) carrying more reports of one
        version and bucket than one device may queue, unless it was stored before (a retry
        counts as duplicates, even if the cap was lowered since)."""
        sent: dict[tuple[str, int], int] = {}
        for b in blocks:
            sent[b.fingerprint, b.bucket] = sent.get((b.fingerprint, b.bucket), 0) + b.n
        for (fp, bucket), n in sent.items():
            definition = self._version(fp)
            if definition is None or n <= definition.device_cap:
                continue
            if batch_id is not None and await self.store.batch_stored(batch_id):
                return
            self.telemetry.reports_refused.labels(definition.name, "over_device_cap").inc(
                sum(b.n for b in blocks)
            )
            raise OverDeviceCap(definition.name, fp, bucket, definition.device_cap, n)

    async def _aggregate_costly(
        self, token: bytes, blocks: list[CheckedReports], alpha: float
    ) -> list[CheckedReports]:
        """Blocks costly to aggregate are aggregated here (and screened at ``alpha``), in the
        sender's turn of the fair lane, not in the store's writer where every other batch
        would wait for them."""
        if sum(aggregation_seconds(b.mechanism, b.n) for b in blocks) <= EXPENSIVE_SECONDS:
            return blocks
        return await self.lane.run(token, lambda: [screen_block(b, alpha) for b in blocks])

    async def _store(
        self, blocks: list[CheckedReports], batch_id: bytes | None, alpha: float
    ) -> IngestResult:
        try:
            result = await self.store.ingest(blocks, batch_id=batch_id, screen=alpha)
        except StoreClosed:
            raise
        except StoreError as exc:
            self.store_failed_at = time.monotonic()
            raise BatchNotStored(f"batch not stored: {exc}") from None
        self.store_failed_at = None
        return result

    async def _move_to_held(self, source: bytes, stored: Sequence[CheckedReports]) -> int:
        """A new batch was stored: test its sender's windows; move what a failed one
        counted to held. How many of this batch's reports moved (its answer's ``held``)."""
        moving = self.senders.observe(source, stored)
        if not moving.moved:
            return 0
        try:
            await self.store.move_to_held(moving.moved)
        except StoreError as exc:  # they stay counted: exact either way
            self.senders.restore(source, moving.moved)
            log.warning("moving a failed sender window's reports to held failed: %s", exc)
            return 0
        self._count_held((m.fingerprint, m.hold.test, m.aggregate.n) for m in moving.moved)
        return moving.own

    def _count_held(self, held: Iterable[tuple[str, str, int]]) -> None:
        for fp, test, n in held:
            self.telemetry.reports_held.labels(self._fp_names.get(fp, "unknown"), test).inc(n)

    def _count(self, result: IngestResult, rejected: Sequence[RefusedReports]) -> None:
        t = self.telemetry
        for fp, count in result.accepted_by_fingerprint.items():
            t.reports_accepted.labels(self._fp_names.get(fp, "unknown")).inc(count)
        if result.duplicates:
            t.reports_duplicate.inc(result.duplicates)
        for r in rejected:
            t.reports_rejected.labels(r.error).inc(int(r.indexes.size))
        self._count_held(result.held)

    async def held(self, limit: int, before: int | None) -> dict[str, object]:
        """``GET /v1/admin/held``: held records, newest first, and the id to page on."""
        records = await self.store.held_records(limit, before)
        following = records[-1].id if len(records) == limit else None
        return {"held": [r.to_dict() for r in records], "before": following}

    async def release_held(self, record: int) -> dict[str, object] | None:
        """``POST /v1/admin/held/{id}/release``: count its reports, once (None: no such)."""
        released = await self.store.release_held(record)
        if released:
            log.info("held record %d released: its reports are counted", record)
        outcome = "released" if released else "unchanged"
        return None if released is None else {"outcome": outcome, "id": record}

    async def drop_held(self, record: int) -> dict[str, object] | None:
        """``DELETE /v1/admin/held/{id}``: forget its reports, unless released (outcome
        ``released``: they are counted); None: no such record."""
        dropped = await self.store.drop_held(record)
        if dropped:
            log.info("held record %d dropped", record)
        outcome = "dropped" if dropped else "released"
        return None if dropped is None else {"outcome": outcome, "id": record}

    async def senders_answer(self) -> dict[str, object]:
        """``GET /v1/admin/senders``: the sender windows and their drift (estimates: in a
        thread, as for estimates)."""
        listing = self.senders.listing()
        drifts = await asyncio.get_running_loop().run_in_executor(
            None, lambda: [distance() for _, distance in listing]
        )
        names = self._fp_names
        senders = [
            dict(entry, metric=names.get(str(entry["version"]), "unknown"), drift=found)
            for (entry, _), found in zip(listing, drifts, strict=True)
        ]
        return {"window_seconds": self.config.screen_window_seconds, "senders": senders}

    def _check_answer_size(
        self, definition: MetricDefinition, buckets: int, query: EstimateQuery
    ) -> None:
        """400 when the answer would compute more than ``max_answer_cpu_seconds`` (an
        estimator solved on the request: ``KindSpec.answer_seconds``) or hold more than
        ``max_estimate_items`` items: one per
        category (a numeric metric: one), in the total and, with ``per_bucket``, in each
        bucket. The answer's size (about 130 bytes an item) and the time to build it, on a
        thread that shares the interpreter with every other request, grow with it."""
        per_answer = definition.kind_spec.answer_items(definition, query.options)
        items = per_answer * (1 + (buckets if query.per_bucket else 0))
        limit = self.config.max_estimate_items
        if items > limit:
            raise QueryError(
                "per_bucket" if query.per_bucket else "from",
                f"per_bucket=true over {buckets} buckets of {per_answer} items each makes "
                f"{items} items, over the collector's max_estimate_items ({limit}); "
                "narrow from/to, or leave per_bucket out",
            )
        # An estimator that solves on the request (estimator=ml) is bounded by its measured
        # worst CPU time, per part: it would hold a thread of the event loop's pool.
        seconds = definition.kind_spec.answer_seconds(definition, query.options)
        parts = 1 + (buckets if query.per_bucket else 0)
        budget = self.config.max_answer_cpu_seconds
        if seconds * parts > budget:
            raise QueryError(
                "estimator",
                f"estimator={query.options.get('estimator')} over {parts} answers (the total"
                f"{' and each bucket' if query.per_bucket else ''}) takes up to "
                f"{seconds * parts:.3g} CPU seconds ({seconds:.3g} s each, measured: "
                f"docs/statistics.md), over the collector's max_answer_cpu_seconds "
                f"({budget:g}); narrow from/to, leave per_bucket out, or ask "
                "estimator=inversion",
            )

    async def estimate(self, name: str, query: EstimateQuery) -> bytes:
        """The answer to an estimates query; its time observed by the metric's kind."""
        started = time.perf_counter()
        definition, query = await self._queried(name, query)
        if definition.kind_spec.maintained:
            body = await self._maintained(definition, query)
        else:
            body = await self._computed(definition, query)
        elapsed = time.perf_counter() - started
        self.telemetry.estimate_seconds.labels(definition.kind.value).observe(elapsed)
        return body

    async def _queried(
        self, name: str, query: EstimateQuery
    ) -> tuple[MetricDefinition, EstimateQuery]:
        """The version a query asks for, and the query with its kind's options checked."""
        versions = self.catalog.versions.get(name)
        current = self.catalog.current.get(name)
        if (
            versions is None or current is None or (query.version or "") not in ("", *versions)
        ) and await self._maybe_refresh():  # defined through another replica?
            versions = self.catalog.versions.get(name)
            current = self.catalog.current.get(name)
        if versions is None or current is None:
            raise UnknownMetric(f"no metric named {name[:80]!r}")
        fp = query.version or current.fingerprint
        definition = versions.get(fp)
        if definition is None:
            raise UnknownMetric(
                f"metric {name!r} has no version {fp!r}", error="unknown_version", param="version"
            )
        return definition, with_options(definition, query)  # QueryError: 400 (middleware)

    async def _computed(self, definition: MetricDefinition, query: EstimateQuery) -> bytes:
        """The answer computed on the request from the stored aggregates (cheap kinds)."""
        fp = definition.fingerprint
        buckets = await self.store.aggregates(  # a StoreError answers 503 (middleware)
            fp, definition.mechanism_instance.stats_size, query.start, query.end
        )
        self._check_answer_size(definition, len(buckets), query)
        # A kind's parameter the estimate refuses (edges outside the bounds, an unknown
        # subtree) raises QueryError: 400 too.
        n = sum(b.aggregate.n for b in buckets)
        fresh = {"n": n, "buckets": len(buckets), "computed_at": round(time.time(), 3)}
        fresh.update(age_seconds=0.0, reports_since=0, fresh=True)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: estimate_body(definition, fp, buckets, query, fresh)
        )

    async def _maintained(self, definition: MetricDefinition, query: EstimateQuery) -> bytes:
        """The answer from the maintained estimates (:mod:`~ldpkit.collector.results`)."""
        every = await self.store.bucket_counts(definition.fingerprint)
        lo, hi = query.start, query.end
        rows = [r for r in every if (lo is None or r[0] >= lo) and (hi is None or r[0] < hi)]
        self._check_answer_size(definition, len(rows), query)
        total, parts = await self.estimates.parts(definition, rows, len(every), query)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: answer_body(definition, definition.fingerprint, total, parts, query)
        )
