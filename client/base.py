"""What :class:`~ldpkit.client.Reporter` and :class:`~ldpkit.client.AsyncReporter` share:
their parameters (checked once), the local state they read without I/O, and the small
decisions around each call. The two shells add only their I/O: a thread and
``http.client``, or an asyncio task and aiohttp.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import CollectorRejected, CollectorUnavailable, LdpkitError
from ..metrics import MetricDefinition, Period
from .flush import FlushRun, background_failed
from .policies import BackgroundSchedule, Clock, RetryPolicy, ShellSettings, Timeout
from .results import BudgetStatus, ReportReceipt
from .state import DEFAULT_BATCH_SIZE, DEFAULT_MAX_OUTBOX, ReporterState

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
        definitions_ttl: float = 3600.0,
        clock: Clock = time.time,
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
            clock=clock,
        )
        self.url = self._settings.url
        self.flush_interval = self._settings.flush_interval
        self.batch_size = self._settings.batch_size
        self.timeout = self._settings.timeout
        self.retry = self._settings.retry
        self._background = bool(background)
        self._transport: TransportT = transport if transport is not None else self._http_transport()
        self._closed = False
        self._open()

    def _open(self) -> None:
        """The shell's own set-up, at the end of ``__init__`` (locks, a thread)."""

    def _http_transport(self) -> TransportT:
        raise NotImplementedError

    # --- local state: no I/O, the same in both shells -----------------------------------
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

    # --- the decisions around each call -------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")

    def _must_learn(self, metric: str) -> bool:
        """An unknown metric: whether to fetch the definitions now (rate-limited)."""
        state = self._state
        return not state.knows(metric) and state.unknown_refresh_due(metric, time.monotonic())

    def _learned(self, metric: str, error: CollectorUnavailable | CollectorRejected | None) -> None:
        """After the fetch (``error`` if it failed): raise unless ``metric`` is known now."""
        if error is not None:
            self._state.unknown_refresh_failed(error)
        if not self._state.knows(metric):
            raise self._state.unknown_metric(metric)

    def _queued(self, receipt: ReportReceipt) -> bool:
        """Whether this report filled a batch (wake the background flusher)."""
        return receipt.queued and self._state.pending() >= self.batch_size

    def _definitions_request(self) -> dict[str, str]:
        return {**self._settings.headers, **self._state.definitions_headers()}

    def _begin_flush(self, *, max_attempts: int | None, everything: bool) -> FlushRun:
        return self._state.begin_flush(
            policy=self.retry,
            batch_size=self.batch_size,
            max_attempts=max_attempts,
            everything=everything,
        )

    def _schedule(self, now: float) -> BackgroundSchedule:
        return BackgroundSchedule(flush_interval=self.flush_interval, retry=self.retry, now=now)

    @staticmethod
    def _pass_ended(
        schedule: BackgroundSchedule, now: float, error: Exception | None, run: FlushRun | None
    ) -> None:
        """A background pass ended (``error`` if it raised): when the next one may start."""
        if error is None:
            schedule.flushed(now)
        else:
            background_failed(schedule, now, error, run)

    @staticmethod
    def _refresh_failed(error: LdpkitError) -> None:
        log.info("background definitions refresh failed: %s", error)
