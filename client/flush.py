"""Delivery as steps (:mod:`ldpkit.client.steps`), shared by both reporters.

:class:`Flush` sends what is queued, batch after batch, retrying by the policy, and
returns what it found (:class:`Found`); it writes nothing into the reporter's state, the
reporter applies what it found (``ReporterState.settle``). :func:`background_failed`
applies a failed background pass to the :class:`~ldpkit.client.policies.BackgroundSchedule`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from .. import wire
from ..errors import CollectorRejected, CollectorUnavailable
from ..http import NetworkError
from ..wire import ID_SIZE
from .policies import BackgroundSchedule, Clock, RetryPolicy
from .protocol import (
    Delivered,
    Fatal,
    OutboxRow,
    OutgoingBatch,
    OverCap,
    Refusal,
    Retry,
    TooLarge,
    build_batch,
    interpret_batch_answer,
)
from .results import FlushResult, Refused
from .steps import Disk, Request, Sleep, Steps
from .storage import DeviceStore

log = logging.getLogger("ldpkit.client")
T = TypeVar("T")

DEFAULT_MAX_BATCH_BYTES = 1_000_000
SEAL_AHEAD = 64
"""Batches sealed in one transaction (and made durable by one fsync) when none is waiting."""
STALE_DEFINITIONS = ("unknown_metric", "unknown_version", "retired_metric")
"""Refusals that mean the definitions changed: the reporter fetches them again."""
UNKNOWN_VERSION_GRACE = 600.0
"""Reports refused as ``unknown_version`` are kept and sent again for this long (seconds
since the first refusal): a replica may not know a version defined a moment ago on
another one. Past it they are dropped, as other refusals are."""


def background_failed(
    schedule: BackgroundSchedule, now: float, error: Exception, retry_after: float | None
) -> None:
    """Tell ``schedule`` that a background pass raised ``error`` (``retry_after``: the collector's
    on the pass's last failed attempt) and log it with the wait before the next pass."""
    if isinstance(error, CollectorUnavailable):
        wait = schedule.unavailable(now, retry_after)
        log.info("background flush: %s; next try in %.1fs", error, wait)
    elif isinstance(error, CollectorRejected):
        wait = schedule.rejected(now)
        log.error("background flush refused: %s; next try in %.0fs", error, wait)
    else:
        wait = schedule.failed(now)
        log.error("background flush failed; next try in %.1fs", wait, exc_info=error)


@dataclass(frozen=True)
class FlushPlan:
    """What one flush is asked to do: ``everything`` queued, also while it runs, or only
    what is queued when it starts; ``source`` names the collector in messages; ``caps``:
    the most reports of a version (by fingerprint) one batch may carry per bucket (a
    device token's: ``MetricDefinition.device_cap``)."""

    policy: RetryPolicy
    batch_size: int
    max_attempts: int
    everything: bool
    headers: Mapping[str, str]
    source: str
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    caps: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Found:
    """What a flush found, filled in as it goes, for the reporter to apply.

    ``deferred``: seq -> first ``unknown_version`` refusal (clock) of the reports kept,
    after the flush; ``answered``: a batch was answered for (any delivery problem is
    over); ``problem``: why it gave up; ``retry_after``: the last failed attempt's;
    ``error``: what ended it early, raised by the reporter once the rest is applied.
    """

    deferred: dict[int, float]
    result: FlushResult = field(default_factory=FlushResult)
    answered: bool = False
    problem: str | None = None
    stale_definitions: bool = False
    retry_after: float | None = None
    error: Exception | None = None


def _fit(rows: list[OutboxRow], per_row: int, max_bytes: int) -> list[OutboxRow]:
    """The first rows whose reports (and ``per_row`` bytes each) fit ``max_bytes`` (at least 1)."""
    size, keep = 0, 0
    for row in rows:
        size += len(row.report) + per_row
        if keep and size > max_bytes:
            break
        keep += 1
    return rows[:keep]


def _capped(rows: list[OutboxRow], caps: Mapping[str, int]) -> list[list[OutboxRow]]:
    """``rows`` in rounds, each holding at most ``caps[fingerprint]`` rows of a version and
    bucket (a version without a cap: all in the first round), each round in seq order. A
    device's outbox holds no more than its cap of a bucket (its ledger), so there is one
    round; more (a cap lowered since, a clock set back) go in later batches."""
    rounds: list[list[OutboxRow]] = []
    seen: dict[tuple[str, int], int] = {}
    for row in rows:
        key = (row.fingerprint, row.bucket)
        k = seen.get(key, 0)
        seen[key] = k + 1
        cap = caps.get(row.fingerprint)
        at = 0 if cap is None else k // cap
        while len(rounds) <= at:
            rounds.append([])
        rounds[at].append(row)
    return rounds


def _chunks(
    rows: list[OutboxRow], size: int, per_row: int, max_bytes: int, caps: Mapping[str, int]
) -> list[list[OutboxRow]]:
    """``rows`` cut into batches of at most ``size`` rows and ``max_bytes`` (see :func:`_fit`),
    none carrying more of a version and bucket than ``caps`` allow (see :func:`_capped`)."""
    chunks = []
    for members in _capped(rows, caps) if caps else [rows]:
        while members:
            chunk = _fit(members[:size], per_row, max_bytes)
            chunks.append(chunk)
            members = members[len(chunk) :]
    return chunks


def _kept(refusal: Refusal, now: float, first_refused: dict[int, float]) -> bool:
    """Whether to keep a report the collector refused: ``unknown_version`` within
    UNKNOWN_VERSION_GRACE of its first refusal (a replica that has not seen a version
    defined a moment ago elsewhere); every other refusal is final."""
    if refusal.error != "unknown_version":
        return False
    first = first_refused.setdefault(refusal.seq, now)
    if now - first < UNKNOWN_VERSION_GRACE:
        return True
    del first_refused[refusal.seq]
    return False


def _refusals(batch: OutgoingBatch, rejected: tuple[Refusal, ...]) -> tuple[Refused, ...]:
    """The refusals of a batch's answer with their metrics (read from the batch's blocks,
    which carry the rows in wire order)."""
    if not rejected:
        return ()
    metrics = [b.metric for b in wire.decode(batch.body).blocks for _ in range(b.n)]
    index = {seq: i for i, seq in enumerate(batch.seqs)}
    return tuple(Refused(metrics[index[r.seq]], r.error, r.detail) for r in rejected)


def _log_refusals(rejected: tuple[Refusal, ...], kept: set[int]) -> None:
    for r in rejected:
        if r.seq not in kept:
            log.warning("collector rejected a report for good (dropped): %s %s", r.error, r.detail)
    if kept:
        log.info(
            "collector does not know the version of %d report(s) yet (unknown_version): "
            "kept, sent again at the next flush",
            len(kept),
        )


class Flush:
    """One flush by ``plan``: batches out, answers in, retries by the policy. Its
    :meth:`steps` return what it found (``deferred``: the reporter's kept refusals, see
    :class:`Found`); its disk work holds ``lock`` (the store is shared with ``report()``).

    It ends early (``Found.error``) with CollectorUnavailable once ``max_attempts``
    attempts at one batch failed, or CollectorRejected on a 4xx that retrying will not
    fix; rows never leave the outbox but on an answer that accounts for them.
    """

    def __init__(
        self,
        store: DeviceStore,
        lock: threading.RLock,
        plan: FlushPlan,
        deferred: Mapping[int, float],
        clock: Clock,
    ) -> None:
        self.store, self.lock, self.plan, self.clock = store, lock, plan, clock
        self.found = Found(dict(deferred))
        self.batch_size = plan.batch_size
        self.max_batch_bytes = plan.max_batch_bytes
        self.caps = dict(plan.caps)
        self.upto: int | None = None
        self.after = 0  # every row up to this seq has been answered for
        self.failures = 0

    def steps(self) -> Steps[Found]:
        try:
            if not self.plan.everything:
                self.upto = yield Disk(partial(self._locked, self.store.max_seq))
            while isinstance(batch := (yield Disk(self._next_batch)), OutgoingBatch):
                yield from self._send(batch)
            self.found.result = self.found.result.plus(FlushResult(remaining=batch))
        except Exception as exc:  # the reporter raises it once it applied the rest
            self.found.error = exc
        return self.found

    def _locked(self, call: Callable[..., T], *args: object) -> T:
        with self.lock:
            return call(*args)

    def _next_batch(self) -> OutgoingBatch | int:
        """The next batch to send, made durable, or (none left) the reports still queued."""
        with self.lock:
            batch = self._unsent()
            if batch is None:
                return self.store.outbox_rows()
            # Nothing leaves the device before it (its budget spend, and a sealed
            # batch with the exact reports it holds) is fsynced.
            self.store.make_durable()
            return batch

    def _unsent(self) -> OutgoingBatch | None:
        """Reports queued before sealed batches first (as v1, with their report ids, so a
        batch sent before the upgrade counts once); then a sealed batch not answered yet,
        resent byte for byte; else the next reports, sealed into new batches (up to
        SEAL_AHEAD at once: one fsync covers them all)."""
        store, size, after, upto = self.store, self.batch_size, self.after, self.upto
        legacy = store.oldest(size, after=after, upto=upto, legacy=True)
        if legacy:
            return build_batch(_chunks(legacy, size, ID_SIZE, self.max_batch_bytes, self.caps)[0])
        sealed = store.sealed_batch()
        if sealed is not None:
            return sealed
        rows = store.oldest(size * SEAL_AHEAD, after=after, upto=upto)
        if not rows:
            return None
        store.seal(_chunks(rows, size, 0, self.max_batch_bytes, self.caps))
        return store.sealed_batch()

    def _send(self, batch: OutgoingBatch) -> Steps[None]:
        """Send ``batch`` until it is answered for or split (413); raise to give up."""
        headers = {**self.plan.headers, "Content-Type": batch.content_type}
        while True:
            try:
                answer = yield Request("POST", "/v1/reports", batch.body, headers)
            except NetworkError as exc:
                failure = Retry(f"network error: {type(exc).__name__}: {exc}")
            else:
                now = self.clock()
                outcome = interpret_batch_answer(batch, answer, now)
                if isinstance(outcome, Delivered):
                    yield from self._delivered(batch, outcome, now)
                    return
                if isinstance(outcome, TooLarge):
                    yield from self._too_large(batch, outcome)
                    return
                if isinstance(outcome, OverCap):
                    yield from self._over_cap(batch, outcome)
                    return
                if isinstance(outcome, Fatal):
                    self.found.problem = str(outcome.error)
                    raise outcome.error
                failure = outcome
            yield from self._back_off(failure)

    def _delivered(self, batch: OutgoingBatch, outcome: Delivered, now: float) -> Steps[None]:
        found = self.found
        kept = {r.seq for r in outcome.rejected if _kept(r, now, found.deferred)}
        yield Disk(partial(self._acknowledge, batch.batch_id, outcome.keys, kept))
        if found.deferred:  # these rows left the outbox: forget their refusals
            for seq, _ in outcome.keys:
                if seq not in kept:
                    found.deferred.pop(seq, None)
        _log_refusals(outcome.rejected, kept)
        if outcome.held:
            log.info("the collector holds %d of these reports for review (delivered)", outcome.held)
        if any(r.error in STALE_DEFINITIONS for r in outcome.rejected):
            found.stale_definitions = True  # the background refetches them
        refused = len(outcome.rejected) - len(kept)
        answer = FlushResult(
            outcome.accepted,
            outcome.duplicates,
            refused,
            0,
            len(kept),
            outcome.held,
            _refusals(batch, outcome.rejected),
        )
        found.result = found.result.plus(answer)
        found.answered = True
        self.after = max(self.after, *batch.seqs)
        self.failures = 0

    def _acknowledge(
        self, batch_id: bytes | None, keys: tuple[tuple[int, bytes], ...], kept: set[int]
    ) -> None:
        with self.lock:
            if batch_id is not None and not kept:  # the whole sealed batch
                self.store.acknowledge_batch(batch_id)
            else:
                self.store.acknowledge([k for k in keys if k[0] not in kept], batch_id=batch_id)

    def _too_large(self, batch: OutgoingBatch, outcome: TooLarge) -> Steps[None]:
        if batch.n == 1:
            raise CollectorRejected(413, "too_large", outcome.reason)
        if batch.batch_id is not None:
            # Refused whole: nothing of it was stored. (Were the limit lowered between two
            # sends of this batch, an earlier one may have been stored: docs/protocol.md.)
            yield Disk(partial(self._locked, self.store.unseal, batch.batch_id))
        self.batch_size = max(1, batch.n // 2)
        self.max_batch_bytes = max(1, len(batch.body) // 2)
        log.info("%s; sending %d reports per batch", outcome.reason, self.batch_size)

    def _over_cap(self, batch: OutgoingBatch, outcome: OverCap) -> Steps[None]:
        """Refused whole for carrying more of a version than one device may send (a device
        token; nothing was stored): its reports go again in batches within the cap the
        collector stated. Raise if batches were within that cap already."""
        known = self.caps.get(outcome.fingerprint)
        if known is not None and known <= outcome.cap:
            raise CollectorRejected(400, "over_device_cap", outcome.reason)
        if batch.batch_id is not None:
            yield Disk(partial(self._locked, self.store.unseal, batch.batch_id))
        self.caps[outcome.fingerprint] = outcome.cap
        log.info("%s; sending at most %d per batch", outcome.reason, outcome.cap)

    def _back_off(self, retry: Retry) -> Steps[None]:
        """An attempt failed: wait the policy's delay (or Retry-After) before the next one,
        or give up once ``max_attempts`` failed."""
        self.failures += 1
        self.found.retry_after = retry.retry_after
        if self.failures >= self.plan.max_attempts:
            pending = yield Disk(partial(self._locked, self.store.outbox_rows))
            self.found.problem = retry.reason
            raise CollectorUnavailable(
                f"could not deliver to {self.plan.source} after {self.failures} attempt(s): "
                f"{retry.reason}; {pending} report(s) stay queued and will be retried"
            )
        delay = self.plan.policy.delay(self.failures, retry.retry_after)
        log.info("%s; retrying in %.2fs", retry.reason, delay)
        yield Sleep(delay)
