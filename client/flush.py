"""The delivery loop as a state machine, shared by both reporters.

:class:`FlushRun` says what to do next (send this batch, sleep this long, done) and is
told what happened, so the synchronous and the asynchronous reporter drive the same
logic with their own transport and their own way of sleeping. :func:`background_failed`
applies a failed background pass to the :class:`~ldpkit.client.policies.BackgroundSchedule`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._validation import check_count
from ..errors import (
    CollectorRejected,
    CollectorUnavailable,
)
from ..http import HttpAnswer
from ..wire import ID_SIZE
from .policies import (
    BackgroundSchedule,
    RetryPolicy,
)
from .protocol import (
    Delivered,
    Fatal,
    OutboxRow,
    OutgoingBatch,
    Retry,
    TooLarge,
    build_batch,
    interpret_batch_answer,
)
from .results import FlushResult

if TYPE_CHECKING:
    from .state import ReporterState

log = logging.getLogger("ldpkit.client")

STALE_DEFINITIONS = ("unknown_metric", "unknown_version", "retired_metric")
"""Refusals that mean the definitions changed: the reporter fetches them again."""


def background_failed(
    schedule: BackgroundSchedule, now: float, error: Exception, run: FlushRun | None
) -> None:
    """Tell ``schedule`` that a background pass raised ``error`` (while driving ``run``,
    None if it never began) and log it with the wait before the next pass."""
    if isinstance(error, CollectorUnavailable):
        retry_after = run.last_retry_after if run is not None else None
        wait = schedule.unavailable(now, retry_after)
        log.info("background flush: %s; next try in %.1fs", error, wait)
    elif isinstance(error, CollectorRejected):
        wait = schedule.rejected(now)
        log.error("background flush refused: %s; next try in %.0fs", error, wait)
    else:
        wait = schedule.failed(now)
        log.error("background flush failed; next try in %.1fs", wait, exc_info=error)


SEAL_AHEAD = 64
"""Batches sealed in one transaction (and made durable by one fsync) when none is waiting."""


@dataclass(frozen=True)
class Send:
    batch: OutgoingBatch


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Done:
    result: FlushResult


Action = Send | Sleep | Done


class FlushRun:
    """One flush: batches out, answers in, retries by the policy.

    Drive it with ``action = run.next()``: on :class:`Send` post ``action.batch.body``
    and call :meth:`answered` or :meth:`failed`; on :class:`Sleep` wait; on
    :class:`Done` stop. ``next()`` raises CollectorUnavailable once ``max_attempts``
    attempts at one batch failed, or CollectorRejected on a 4xx that retrying will not
    fix; rows are never removed except on an answer that accounts for them.
    """

    def __init__(
        self,
        state: ReporterState,
        *,
        policy: RetryPolicy,
        batch_size: int,
        max_batch_bytes: int,
        max_attempts: int,
        upto: int | None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.batch_size = check_count(batch_size, "batch_size")
        self.max_batch_bytes = max_batch_bytes
        self.max_attempts = max_attempts
        self.upto = upto
        self.failures = 0
        self.result = FlushResult()
        self.last_retry_after: float | None = None
        self.after = 0  # every row up to this seq has been answered for
        self._batch: OutgoingBatch | None = None
        self._sleep: float | None = None
        self._error: Exception | None = None

    def next(self) -> Action:
        if self._error is not None:
            raise self._error
        if self._sleep is not None:
            seconds, self._sleep = self._sleep, None
            return Sleep(seconds)
        if self._batch is None:
            state = self.state
            with state.lock:
                self._batch = self._next_batch()
                if self._batch is None:
                    remaining = state.store.outbox_rows()
                    return Done(
                        FlushResult(
                            self.result.sent,
                            self.result.duplicates,
                            self.result.rejected,
                            remaining,
                            self.result.deferred,
                        )
                    )
                # Nothing leaves the device before it (its budget spend, and a sealed
                # batch with the exact reports it holds) is fsynced.
                state.store.make_durable()
        return Send(self._batch)

    def _next_batch(self) -> OutgoingBatch | None:
        """Reports queued before sealed batches first (as v1, with their report ids, so a
        batch sent before the upgrade counts once); then a sealed batch not answered yet,
        resent byte for byte; else the next reports, sealed into new batches (up to
        SEAL_AHEAD at once: one fsync covers them all)."""
        store = self.state.store
        legacy = store.oldest(self.batch_size, after=self.after, upto=self.upto, legacy=True)
        if legacy:
            return build_batch(self._fit(legacy, ID_SIZE))
        sealed = store.sealed_batch()
        if sealed is not None:
            return sealed
        rows = store.oldest(self.batch_size * SEAL_AHEAD, after=self.after, upto=self.upto)
        if not rows:
            return None
        chunks = []
        while rows:
            chunk = self._fit(rows[: self.batch_size], 0)
            chunks.append(chunk)
            rows = rows[len(chunk) :]
        store.seal(chunks)
        return store.sealed_batch()

    def _fit(self, rows: list[OutboxRow], per_row: int) -> list[OutboxRow]:
        """The first rows whose reports (and ``per_row`` bytes each) fit in
        ``max_batch_bytes`` (one at least)."""
        size, keep = 0, 0
        for row in rows:
            size += len(row.report) + per_row
            if keep and size > self.max_batch_bytes:
                break
            keep += 1
        return rows[:keep]

    def answered(self, answer: HttpAnswer) -> None:
        batch = self._batch
        assert batch is not None, "answered() without a Send"
        now = self.state.clock()
        outcome = interpret_batch_answer(batch, answer, now)
        if isinstance(outcome, Delivered):
            kept = {r.seq for r in outcome.rejected if self.state.keep_refused(r, now)}
            with self.state.lock:
                if batch.batch_id is not None and not kept:  # the whole sealed batch
                    self.state.store.acknowledge_batch(batch.batch_id)
                else:
                    self.state.store.acknowledge(
                        [k for k in outcome.keys if k[0] not in kept], batch_id=batch.batch_id
                    )
            self.state.delivered(k[0] for k in outcome.keys if k[0] not in kept)
            for r in outcome.rejected:
                if r.seq in kept:
                    continue
                log.warning(
                    "collector rejected a report for good (dropped): %s %s", r.error, r.detail
                )
            if kept:
                log.info(
                    "collector does not know the version of %d report(s) yet (unknown_version): "
                    "kept, sent again at the next flush",
                    len(kept),
                )
            if any(r.error in STALE_DEFINITIONS for r in outcome.rejected):
                self.state.definitions_stale = True  # the background refetches them
            self.result = FlushResult(
                self.result.sent + outcome.accepted,
                self.result.duplicates + outcome.duplicates,
                self.result.rejected + len(outcome.rejected) - len(kept),
                0,
                self.result.deferred + len(kept),
            )
            self.after = max(self.after, *batch.seqs)
            self._batch = None
            self.failures = 0
            self.state.delivery_problem = None
        elif isinstance(outcome, TooLarge):
            if batch.n == 1:
                self._error = CollectorRejected(413, "too_large", outcome.reason)
            else:
                if batch.batch_id is not None:
                    # Refused whole: nothing of it was stored. (Were the limit lowered
                    # between two sends of this batch, an earlier one may have been
                    # stored: docs/protocol.md.)
                    with self.state.lock:
                        self.state.store.unseal(batch.batch_id)
                self.batch_size = max(1, batch.n // 2)
                self.max_batch_bytes = max(1, len(batch.body) // 2)
                self._batch = None
                log.info("%s; sending %d reports per batch", outcome.reason, self.batch_size)
        elif isinstance(outcome, Fatal):
            self._error = outcome.error
            self.state.delivery_problem = str(outcome.error)
        else:
            self._retry(outcome)

    def failed(self, error: BaseException) -> None:
        """The request did not get an answer (connection refused, timeout, ...)."""
        assert self._batch is not None, "failed() without a Send"
        self._retry(Retry(f"network error: {type(error).__name__}: {error}"))

    def _retry(self, retry: Retry) -> None:
        self.failures += 1
        self.last_retry_after = retry.retry_after
        if self.failures >= self.max_attempts:
            pending = self.state.pending()
            self._error = CollectorUnavailable(
                f"could not deliver to {self.state.source} after {self.failures} attempt(s): "
                f"{retry.reason}; {pending} report(s) stay queued and will be retried"
            )
            self.state.delivery_problem = retry.reason
            return
        self._sleep = self.policy.delay(self.failures, retry.retry_after)
        log.info("%s; retrying in %.2fs", retry.reason, self._sleep)
