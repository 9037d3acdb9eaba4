"""Maintained estimates (issue 27): computed once per data, off the request path.

A kind whose estimate costs more than O(d) (``KindSpec.maintained``: strings, hierarchies,
tables, distributions) is never estimated inside a request. For every version of such a
kind the collector keeps the prepared estimate (``KindSpec.prepare``: the decoded strings,
the consistent solution, the variances answers read) of the total and of each bucket, and
of any range a query asked for, in the store (table ``estimates``), so every replica on a
PostgreSQL database reads the same ones. Keyed by ``(fingerprint, lo, hi)``: the buckets
whose start lies in ``[lo, hi)`` (the total: every bucket; a range is named by its first
and last buckets, so two ranges over the same buckets share one estimate).

**Freshness.** Each estimate records the data it was computed from (:class:`Data`: reports
and the partial rows ever added, which grows with every change). A background task
compares it with the data now (a cheap count, no sums) every :data:`TICK` seconds and,
where reports arrived, computes again, but at most once per ``estimate_interval_seconds``
per estimate. A query answers at once from the latest estimate and says how fresh it is
(``as_of``); it may ask to ``wait`` for one computed from the data as it is now. A query
for an estimate that was never computed waits up to ``estimate_deadline_seconds`` (or its
``wait``) and is otherwise answered ``202 computing`` (:class:`EstimateComputing`).

**Once per data.** In a process, one task per estimate (single flight: concurrent queries
share it). Across processes, a claim in the store (``Store.claim_estimate``: one statement
that only one process wins, and that no process wins once the estimate of this data is
stored); the others read the result when it is stored.

**Bounded work.** Computations run in the estimate worker's processes
(:mod:`~ldpkit.collector.worker`: CPU and memory budget, lower priority), through a
:class:`~ldpkit.collector.fairness.FairLane` keyed by metric: each metric takes its turn.
One that fails (over budget) is stored as failed for its data, answered as such
(:class:`EstimateFailed`) and tried again only once new reports arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from ..errors import LdpkitError
from ..metrics import MetricDefinition
from . import worker
from .config import CollectorConfig
from .fairness import FairLane
from .group_commit import MAX_BUCKET, MIN_BUCKET
from .queries import EstimateQuery, Part, summed
from .store import Data, Store, StoredEstimate, StoreError, definition_json
from .telemetry import Telemetry

log = logging.getLogger("ldpkit.collector")
T = TypeVar("T")

Key = tuple[str, int, int]
"""(fingerprint, lo, hi): the estimate over the buckets whose start lies in [lo, hi)."""
TICK = 2.0
"""Seconds between two looks at every maintained version's data."""
POLL = 0.5
"""Seconds between two looks at an estimate another process computes."""


class EstimateComputing(LdpkitError):
    """The estimate a query needs was never computed; it is being computed now."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"the estimate is being computed (it takes a while for this kind): ask again in "
            f"{retry_after} s, or give wait=SECONDS"
        )
        self.retry_after = retry_after


class EstimateFailed(LdpkitError):
    """The estimate of the data as it was last computed failed (over the worker's budget)."""


@dataclass(frozen=True)
class Result:
    """A maintained estimate in memory: the data it was computed from, when (unix
    seconds), and the prepared estimate or why there is none."""

    data: Data
    computed_at: float
    prepared: worker.Prepared | None
    error: str | None
    size: int  # bytes of its pickle: what the cache bounds


def key_of(fingerprint: str, rows: Sequence[tuple[int, int, int]], every: int) -> Key:
    """The key of the buckets ``rows`` (bucket, n, parts) of a version with ``every``
    buckets in all: the total's when they are all of them, else their first and last."""
    if len(rows) == every:
        return (fingerprint, MIN_BUCKET, MAX_BUCKET)
    if not rows:
        return (fingerprint, 0, 0)
    return (fingerprint, rows[0][0], rows[-1][0] + 1)


def as_of(result: Result, now: Data) -> dict[str, Any]:
    """How fresh ``result`` is, for an answer: the data it was computed from, when, and
    the reports received since (``now``: the data as it is)."""
    return {
        "n": result.data.n,
        "buckets": result.data.buckets,
        "computed_at": round(result.computed_at, 3),
        "age_seconds": round(max(0.0, time.time() - result.computed_at), 3),
        "reports_since": now.n - result.data.n,
        "fresh": result.data == now,
    }


class ResultCache:
    """Prepared estimates in memory, the least recently used dropped past ``limit`` bytes
    (of their pickles): they stay in the store."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[Key, Result] = OrderedDict()
        self._bytes = 0

    def get(self, key: Key) -> Result | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: Key, result: Result) -> None:
        old = self._items.get(key)
        if old is not None and old.data.parts > result.data.parts:
            return  # a newer one is here already
        self.discard(key)
        self._items[key] = result
        self._bytes += result.size
        while self._bytes > self.limit and len(self._items) > 1:
            _, dropped = self._items.popitem(last=False)
            self._bytes -= dropped.size

    def discard(self, key: Key) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.size


def process_pool(config: CollectorConfig) -> Callable[[], Executor]:
    """A factory of the worker's process pool (spawned: nothing of the collector's
    threads or connections is inherited)."""
    memory = config.estimate_memory_mib * 2**20
    return partial(
        ProcessPoolExecutor,
        config.estimate_workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=worker.start,
        initargs=(config.estimate_cpu_seconds, memory),
    )


class Estimates:
    """The maintained estimates of one collector process (see the module)."""

    def __init__(
        self,
        config: CollectorConfig,
        store: Store,
        telemetry: Telemetry,
        versions: Callable[[], Iterable[MetricDefinition]],
    ) -> None:
        self.config = config
        self.store = store
        self.telemetry = telemetry
        self._versions = versions
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.lane = FairLane(process_pool(config), config.estimate_workers)
        self.cache = ResultCache(config.estimate_cache_mib * 2**20)
        self._flights: dict[Key, asyncio.Task[None]] = {}
        self._loads: dict[Key, asyncio.Task[Result | None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.lane.start()
        self._task = asyncio.create_task(self._maintain(), name="ldpkit-estimates")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._flights.values(), *self._loads.values()) if t]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        processes = list((getattr(self.lane.executor, "_processes", None) or {}).values())
        await self.lane.stop(wait=False)
        for process in processes:  # a decode may run for minutes: not waited for
            process.terminate()

    # --- queries ---------------------------------------------------------------------
    async def parts(
        self,
        definition: MetricDefinition,
        rows: Sequence[tuple[int, int, int]],
        every: int,
        query: EstimateQuery,
    ) -> tuple[Part, list[tuple[int, Part]]]:
        """The answer's parts of a query on ``definition`` over its buckets ``rows`` (of
        ``every``): the total and, with ``per_bucket``, each bucket's, from the maintained
        estimates. Raises EstimateComputing or EstimateFailed."""
        fp = definition.fingerprint
        wanted = [(key_of(fp, rows, every), Data.of(rows))]
        if query.per_bucket:
            wanted += [(key_of(fp, [r], every), Data.of([r])) for r in rows]
        deadline = query.wait or self.config.estimate_deadline_seconds
        found = await asyncio.gather(
            *(self._result(definition, key, data, query.wait, deadline) for key, data in wanted)
        )
        parts = []
        for (_, data), result in zip(wanted, found, strict=True):
            if result is None:
                raise EstimateComputing(max(1, round(self.config.estimate_deadline_seconds)))
            if result.prepared is None:
                raise EstimateFailed(
                    f"metric {definition.name}: its estimate from {result.data.n} reports "
                    f"failed: {result.error}; it is tried again once more reports arrive"
                )
            prepared = result.prepared
            parts.append(Part(prepared.aggregate, prepared.estimate, as_of(result, data)))
        buckets = zip(rows, parts[1:], strict=True) if query.per_bucket else ()
        return parts[0], [(r[0], p) for r, p in buckets]

    async def _result(
        self, definition: MetricDefinition, key: Key, data: Data, wait: float, deadline: float
    ) -> Result | None:
        """The latest estimate of ``key`` (``data``: the data now); a newer one is asked
        for if it is not from ``data``, and waited for up to ``wait`` (``deadline`` when
        there is none yet)."""
        result = self.cache.get(key) or await self._load(key)
        if result is not None and result.data == data:
            return result
        loop = asyncio.get_running_loop()
        end = loop.time() + (deadline if result is None else wait)
        while True:
            # The flight under way may be of older data (begun before these reports came):
            # once it lands, the next one brings the estimate up to ``data``.
            flight = self._refresh(definition, key)
            left = end - loop.time()
            if left <= 0:
                return result
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(flight), left)
            result = self.cache.get(key) or result
            if result is not None and _covers(result.data, data):
                return result
            if flight.done():
                await asyncio.sleep(min(POLL, max(0.0, end - loop.time())))

    async def _load(self, key: Key) -> Result | None:
        """The stored estimate of ``key`` into the cache (one read at a time per key)."""
        task = _single(self._loads, key, self._read)
        return await asyncio.shield(task)

    async def _read(self, key: Key) -> Result | None:
        stored = await self.store.estimate_result(*key)
        return None if stored is None else await self._remember(key, stored)

    async def _remember(self, key: Key, stored: StoredEstimate) -> Result | None:
        """``stored`` (its result read) in the cache; the newest there."""
        if stored.data is None:
            return None
        blob = stored.result
        prepared = None
        if blob is not None:
            prepared = await asyncio.get_running_loop().run_in_executor(None, worker.load, blob)
        result = Result(stored.data, stored.computed_at, prepared, stored.error, len(blob or b""))
        self.cache.put(key, result)
        return self.cache.get(key)

    # --- computing -------------------------------------------------------------------
    def _refresh(self, definition: MetricDefinition, key: Key) -> asyncio.Task[None]:
        """The task that brings ``key`` up to date (one per key)."""
        return _single(self._flights, key, lambda k: self._flight(definition, k))

    async def _flight(self, definition: MetricDefinition, key: Key) -> None:
        try:
            while not await self._step(definition, key):
                pass
        except StoreError as exc:
            log.warning("estimate of %s %s: %s", definition.name, key[1:], exc)

    async def _step(self, definition: MetricDefinition, key: Key) -> bool:
        """One look at ``key``: True once its estimate is from the data now (computed
        here, or by another process), else after a pause (another process computes, or
        the interval since the last computation has not passed)."""
        fp, lo, hi = key
        rows = [r for r in await self.store.bucket_counts(fp) if lo <= r[0] < hi]
        data = Data.of(rows)
        states = await self.store.estimate_states(fp)
        state = next((s for s in states if (s.lo, s.hi) == (lo, hi)), None)
        now = time.time()
        if state is not None and _covers(state.data, data):
            cached = self.cache.get(key)
            if cached is None or not _covers(cached.data, data):
                await self._read(key)
            return True
        wait = _pause(state, now, self.config.estimate_interval_seconds)
        if wait > 0:
            await asyncio.sleep(wait)
            return False
        until = now + 4 * self.config.estimate_cpu_seconds + 60  # queue and pickling too
        if not await self.store.claim_estimate(fp, lo, hi, data, self.owner, until):
            await asyncio.sleep(POLL)
            return False
        await self._compute(definition, key)
        return True

    async def _compute(self, definition: MetricDefinition, key: Key) -> None:
        """Compute ``key``'s estimate in the worker (its turn in the metric's queue) from
        the aggregates now, and store it (releasing the claim)."""
        fp, lo, hi = key
        m = definition.mechanism_instance
        buckets = await self.store.aggregates(fp, m.stats_size, lo, hi)
        total = summed(buckets, m)
        data = Data(total.n, sum(b.parts for b in buckets), len(buckets))
        job = worker.Job(definition.name, fp, definition_json(definition), total.n, total.sums)
        kind = definition.kind.value
        t = self.telemetry
        t.estimate_queue.labels(kind).inc()
        try:
            outcome = await self.lane.run(definition.name, partial(worker.prepare, job))
        except Exception as exc:  # the worker died (killed, out of memory)
            outcome = worker.Outcome(None, f"the estimate worker failed: {exc}", 0.0, 0)
        finally:
            t.estimate_queue.labels(kind).dec()
        error = outcome.error or ""
        label = "ok" if not error else "over_budget" if "budget" in error else "error"
        t.estimates_computed.labels(kind, label).inc()
        t.estimate_compute_seconds.labels(kind).observe(outcome.cpu_seconds)
        t.estimate_memory.labels(kind).set(outcome.peak_bytes)
        if outcome.error is not None:
            log.warning("estimate of metric %s failed: %s", definition.name, outcome.error)
        stored = StoredEstimate(
            lo, hi, data, time.time(), outcome.cpu_seconds, outcome.error, None, outcome.result
        )
        await self.store.save_estimate(fp, stored, self.owner)
        await self._remember(key, stored)

    async def _maintain(self) -> None:
        """Every TICK seconds: refresh every maintained estimate whose data changed (the
        total and each bucket of every maintained version)."""
        while True:
            for definition in [d for d in self._versions() if d.kind_spec.maintained]:
                try:
                    await self._look(definition)
                except StoreError as exc:
                    log.warning("maintained estimates of %s: %s", definition.name, exc)
            await asyncio.sleep(TICK)

    async def _look(self, definition: MetricDefinition) -> None:
        fp = definition.fingerprint
        rows = await self.store.bucket_counts(fp)
        states = {(s.lo, s.hi): s.data for s in await self.store.estimate_states(fp)}
        wanted = [(key_of(fp, rows, len(rows)), rows)]
        wanted += [(key_of(fp, [r], len(rows)), [r]) for r in rows]
        for key, part in wanted:
            if key not in self._flights and not _covers(states.get(key[1:]), Data.of(part)):
                self._refresh(definition, key)


def _covers(found: Data | None, data: Data) -> bool:
    """Whether an estimate computed from ``found`` is from ``data`` or newer data."""
    return found is not None and (found == data or found.parts > data.parts)


def _single(
    tasks: dict[Key, asyncio.Task[T]], key: Key, start: Callable[[Key], Awaitable[T]]
) -> asyncio.Task[T]:
    """The task of ``key`` in ``tasks``, started by ``start(key)`` if there is none (one
    at a time per key: concurrent callers share it)."""
    task = tasks.get(key)
    if task is None or task.done():
        task = tasks[key] = asyncio.ensure_future(start(key))
        task.add_done_callback(lambda done: tasks.pop(key) if tasks.get(key) is done else None)
    return task


def _pause(state: StoredEstimate | None, now: float, interval: float) -> float:
    """Seconds to wait before computing again: while another process's claim holds (a
    look every POLL), or until ``interval`` has passed since the last computation."""
    if state is None:
        return 0.0
    if state.claimed_until is not None and state.claimed_until > now:
        return POLL
    if state.data is None or state.data.n == 0:  # nothing was computed: nothing to spare
        return 0.0
    return max(0.0, min(POLL * 4, state.computed_at + interval - now))
