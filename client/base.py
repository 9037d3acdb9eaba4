"""What :class:`~ldpkit.client.Reporter` and :class:`~ldpkit.client.AsyncReporter` share:
their parameters (checked once), the local state they read without I/O, and every
operation (report, flush, fetch the definitions, the background loop, the last delivery)
written once as steps that yield the I/O they need (``ldpkit.client.steps``). The two
shells only perform that I/O: a thread and ``http.client``, or an asyncio task and
aiohttp.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import CollectorRejected, CollectorUnavailable, LdpkitError
from ..http import NetworkError, Timeout
from ..metrics import MetricDefinition, Period
from .flush import FlushPlan, background_failed
from .policies import BackgroundSchedule, Clock, RetryPolicy, ShellSettings
from .results import BudgetStatus, FlushResult, ReportReceipt
from .state import DEFAULT_BATCH_SIZE, DEFAULT_MAX_OUTBOX, ReporterState
from .steps import Disk, Locked, Request, Steps, Wait

log = logging.getLogger("ldpkit.client")

TransportT = TypeVar("TransportT")
Values = Sequence[object] | npt.ArrayLike
"""What ``simulate`` takes: one value per simulated device."""
Generator = np.random.Generator


class ReporterBase(Generic[TransportT]):
    """The parameters are documented on :class:`~ldpkit.client.Reporter`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        state_dir: str | os.PathLike[str],
        metrics: Iterable[MetricDefinition] | None = None,
        total_budget: float | None = None,
        total_budget_period: Period | str = Period.DAY,
        flush_interval: float = 30.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_outbox: int = DEFAULT_MAX_OUTBOX,
        timeout: Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        memoize: bool = True,
        durable_reports: bool = False,
        exclusive_state: bool = True,
        definitions_ttl: float = 3600.0,
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
        background: bool = True,
        transport: TransportT | None = None,
    ) -> None:
        self._settings = ShellSettings.of(
            url,
            token=token,
            flush_interval=flush_interval,
            batch_size=batch_size,
            timeout=timeout,
            retry=retry,
            definitions_ttl=definitions_ttl,
        )
        self._state = ReporterState(
            self._settings,
            state_dir=state_dir,
            metrics=metrics,
            total_budget=total_budget,
            total_budget_period=total_budget_period,
            max_outbox=max_outbox,
            memoize=memoize,
            durable_reports=durable_reports,
            exclusive_state=exclusive_state,
            clock=clock,
            monotonic=monotonic,
        )
        self.url = self._settings.url
        self.flush_interval = self._settings.flush_interval
        self.batch_size = self._settings.batch_size
        self.timeout = self._settings.timeout
        self.retry = self._settings.retry
        self._background = bool(background)
        self._closed = False
        try:
            self._transport: TransportT = (
                transport if transport is not None else self._http_transport()
            )
            self._open()
        except BaseException:
            self._state.close()  # the store's lock is not left to the garbage collector
            raise

    def _open(self) -> None:
        """The shell's own set-up, at the end of ``__init__`` (locks, a thread)."""

    def _http_transport(self) -> TransportT:
        raise NotImplementedError

    def budget(self) -> BudgetStatus:
        """Epsilon spent and left, per metric and in total, in the current periods."""
        self._check_open()
        return self._state.budget()

    @property
    def pending(self) -> int:
        """Reports in the outbox (queued, not yet acknowledged by the collector)."""
        return self._state.pending()

    @property
    def definitions(self) -> dict[str, MetricDefinition]:
        return self._state.definitions

    @property
    def state_dir(self) -> str:
        return str(self._state.directory)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url} state_dir={self.state_dir!r}>"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")

    def _stopping(self) -> bool:
        """Whether the shell is stopping (the background skips its definitions fetch)."""
        return False

    def _wake_flusher(self) -> None:
        """A batch is full: wake the background flusher, if there is one."""

    def _reporting(self, metric: str, value: object) -> Steps[ReportReceipt]:
        yield from self._learning(metric)
        return self._reported(metric, value)

    def _reported(self, metric: str, value: object) -> ReportReceipt:
        """:meth:`_reporting` once the metric is known (no request left to make: the shells
        call it directly then, without driving steps)."""
        receipt = self._state.report(metric, value)
        if receipt.queued and self._state.pending_seen() >= self.batch_size:
            self._wake_flusher()
        return receipt

    def _simulating(self, metric: str, values: Values, rng: Generator | None) -> Steps[int]:
        yield from self._learning(metric)
        yield from self._role_learning()
        queued: int = yield Disk(partial(self._state.simulate, metric, values, rng))
        return queued

    def _role_learning(self) -> Steps[None]:
        """Ask the collector once what the token is (``simulate`` needs a relay token):
        ``GET /v1/metrics`` says it (with metrics passed in code, only that is read)."""
        state = self._state
        if state.role_asked:
            return
        if not state.static:
            yield from self._refreshing()
            return
        try:
            answer = yield Request("GET", "/v1/metrics", None, dict(self._settings.headers))
        except NetworkError as exc:
            raise CollectorUnavailable(
                f"simulate() needs a relay token, and asking {self.url} what this token is "
                f"failed: GET /v1/metrics: {exc}"
            ) from exc
        state.learn_role(answer)

    def _learning(self, metric: str) -> Steps[None]:
        """An unknown metric: fetch the definitions (rate-limited); raise if it is still unknown."""
        state = self._state
        if not state.knows(metric) and state.unknown_refresh_due(metric, time.monotonic()):
            try:
                yield from self._refreshing()
            except (CollectorUnavailable, CollectorRejected) as exc:
                state.unknown_refresh_failed(exc)
        if not state.knows(metric):
            raise state.unknown_metric(metric)

    def _refreshing(self) -> Steps[None]:
        """``GET /v1/metrics`` (with If-None-Match), one fetch at a time; the answer cached."""
        if not self._state.static:
            yield Locked("definitions", self._fetching())

    def _fetching(self) -> Steps[None]:
        headers = {**self._settings.headers, **self._state.definitions_headers()}
        try:
            answer = yield Request("GET", "/v1/metrics", None, headers)
        except NetworkError as exc:
            raise CollectorUnavailable(
                f"simulate() needs a relay token, and asking {self.url} what this token is "
                f"failed: GET /v1/metrics: {exc}"
            ) from exc
        self._state.apply_definitions_answer(answer)

    def _flush(self, max_attempts: int | None) -> Steps[FlushResult]:
        """Send what is queued now (one flush at a time)."""
        result: FlushResult = yield Locked("send", self._flushing(max_attempts))
        return result

    def _flushing(self, max_attempts: int | None) -> Steps[FlushResult]:
        found = yield from self._state.delivery(self._plan(max_attempts, everything=False))
        return self._state.settle(found)

    def _plan(self, max_attempts: int | None, *, everything: bool) -> FlushPlan:
        attempts = max_attempts if max_attempts is not None else self.retry.max_attempts
        headers = self._settings.report_headers
        return FlushPlan(
            self.retry,
            self.batch_size,
            attempts,
            everything,
            headers,
            self.url,
            caps=self._state.device_caps(),
        )

    def _last_delivery(self) -> Steps[None]:
        """At close: one attempt to deliver what is queued."""
        if self._state.pending():
            try:
                yield from self._flush(1)
            except LdpkitError as exc:
                log.info("close: %s", exc)

    def _background_loop(self) -> Steps[None]:
        """The background flusher: every ``flush_interval``, or sooner when a batch is
        full; after a failure it waits the policy's backoff (or Retry-After) first."""
        schedule = BackgroundSchedule(
            flush_interval=self.flush_interval, retry=self.retry, now=time.monotonic()
        )
        # Fetch the definitions as soon as the reporter starts, not at the first report:
        # a device that starts online and reports only later, offline, must know them.
        yield from self._background_refresh()
        while (yield Wait(schedule.wait(time.monotonic()))):
            if not schedule.ready(time.monotonic()):
                continue  # backing off: a full batch waits for the backoff to end
            yield from self._background_refresh()
            yield Locked("send", self._background_pass(schedule))
            if schedule.prune_due(time.monotonic()):
                with contextlib.suppress(Exception):
                    yield Disk(self._state.prune)

    def _background_refresh(self) -> Steps[None]:
        if self._state.definitions_due() and not self._stopping():
            try:
                yield from self._refreshing()
            except LdpkitError as exc:
                log.info("background definitions refresh failed: %s", exc)

    def _background_pass(self, schedule: BackgroundSchedule) -> Steps[None]:
        """One flush; whatever it raises only sets when the next one starts (the outbox
        keeps everything: the background never dies)."""
        retry_after: float | None = None
        try:
            found = yield from self._state.delivery(self._plan(1, everything=True))
            retry_after = found.retry_after
            self._state.settle(found)
        except Exception as exc:
            background_failed(schedule, time.monotonic(), exc, retry_after)
        else:
            schedule.flushed(time.monotonic())
