"""The synchronous reporter: a background flush thread and the blocking HTTP transport of
:mod:`ldpkit.http` (``http.client``).

>>> from ldpkit.client import Reporter
>>> with Reporter("http://127.0.0.1:8787", token="app-secret",
...               state_dir="~/.myapp/ldpkit") as r:          # doctest: +SKIP
...     r.report("theme", "dark")
...     r.flush()
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Protocol, Self

from ..http import HttpAnswer, HttpTransport, NetworkError, split_url
from .base import Generator, ReporterBase, Values
from .results import FlushResult, ReportReceipt
from .steps import Disk, Locked, Op, R, Request, Stepper, Steps, Wait


class SyncTransport(Protocol):
    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer: ...

    def close(self) -> None: ...


class Reporter(ReporterBase[SyncTransport]):
    """Report values under local differential privacy to an ldpkit collector.

    Parameters
    ----------
    url : the collector's base URL, e.g. ``"http://127.0.0.1:8787"``.
    token : the ingest token (sent as ``Authorization: Bearer``).
    state_dir : where the outbox, budget ledger, memo and definitions cache live
        (``~`` expanded, created with mode 0700). One directory per device/app.
    metrics : definitions in code; if None (default) they come from ``GET /v1/metrics``
        and are cached in ``state_dir``; the background thread fetches them at start, so
        the app works offline after its first start online.
    total_budget, total_budget_period : an epsilon cap across all metrics per period
        (sequential composition); None for no total cap.
    flush_interval : seconds between background flushes; a flush also starts as soon as
        ``batch_size`` reports are queued.
    batch_size : reports per request.
    max_outbox : the most undelivered reports kept; beyond it ``report`` raises
        :class:`~ldpkit.errors.OutboxFull` (nothing is ever dropped silently).
    timeout, retry : :class:`Timeout` and :class:`RetryPolicy`.
    memoize : permanent randomized response (see ``docs/client.md``); True by default.
    durable_reports : fsync every report (slower) instead of before each send.
    exclusive_state : True (default): this reporter is the only one on ``state_dir``
        while it is open (the usual app): SQLite keeps its lock until ``close()``, which
        makes ``report()`` about 5 us cheaper; another reporter opening the same
        ``state_dir`` fails with :class:`~ldpkit.errors.StateError`. False: processes may
        share it (every reporter on it passes False).
    clock : unix seconds; tests inject one to move time.
    monotonic : seconds on a clock that only goes forward (default ``time.monotonic``):
        between two answers of the collector a report's time is the latest answer's
        ``Date`` plus this clock's time elapsed since (docs/client.md, "Device time").
        An app whose platform keeps a better one (a boot-time clock that counts sleep)
        passes it; tests inject one.
    background : run the background flush thread (False: only explicit ``flush()``).
    transport : how requests are sent (tests pass a fake); default ``http.client``.
    """

    def _http_transport(self) -> SyncTransport:
        return HttpTransport(self._settings.collector, self.timeout)

    def _open(self) -> None:
        self._locks = {"send": threading.Lock(), "definitions": threading.Lock()}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._background:
            self._thread = threading.Thread(target=self._run, name="ldpkit-flush", daemon=True)
            self._thread.start()

    def report(self, metric: str, value: object) -> ReportReceipt:
        """Perturb ``value`` on the device and queue the report durably; returns a receipt.

        Categorical metrics take one of their category strings; numeric metrics take a number,
        clipped to the metric's bounds. Raises ParameterError for an unknown metric or a value of
        the wrong kind, BudgetExceeded when the report would overspend the metric's or the total
        budget, OutboxFull when the outbox is at its bound. The raw value is never stored or sent.
        """
        self._check_open()
        if self._state.knows(metric):  # nothing to fetch: no steps to drive
            return self._reported(metric, value)
        return self._do(self._reporting(metric, value))

    def simulate(self, metric: str, values: Values, *, rng: Generator | None = None) -> int:
        """Queue one report per value, each as a separate fresh device (for demos, load
        and statistical tests). Returns the number queued; deliver with :meth:`flush`."""
        self._check_open()
        return self._do(self._simulating(metric, values, rng))

    def flush(self, *, max_attempts: int | None = None) -> FlushResult:
        """Send what is queued now, retrying by the policy.

        Returns a :class:`FlushResult`. Raises CollectorUnavailable when a batch could not be
        delivered after ``max_attempts`` (default: the policy's) attempts, or CollectorRejected on a
        4xx such as a bad token; the undelivered reports stay queued either way.
        """
        self._check_open()
        return self._do(self._flush(max_attempts))

    def refresh_definitions(self) -> None:
        """Fetch ``GET /v1/metrics`` now (with If-None-Match) and cache the answer."""
        self._check_open()
        self._do(self._refreshing())

    def close(self, *, flush: bool = True) -> None:
        """Stop the background thread, try one last delivery (one attempt, unless ``flush=False``),
        and close the store. Undelivered reports stay queued for the next start."""
        if self._closed:
            return
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if flush:
                self._do(self._last_delivery())
        finally:
            self._closed = True
            self._transport.close()
            self._state.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _do(self, steps: Steps[R]) -> R:
        """Run ``steps`` to its end, performing each request it makes."""
        for op in (stepper := Stepper(steps)):
            with stepper.answering():
                stepper.reply = self._perform(op)
        return stepper.result

    def _perform(self, op: Op) -> object:
        if isinstance(op, Request):
            answer = self._transport.request(op.method, op.path, op.body, op.headers)
            self._state.observe_answer(answer)  # the collector's time
            return answer
        if isinstance(op, Disk):
            return op.call()
        if isinstance(op, Locked):
            with self._locks[op.lock]:
                return self._do(op.steps)
        if isinstance(op, Wait):
            self._wake.wait(timeout=op.seconds)
            self._wake.clear()
            return not self._stop.is_set()
        time.sleep(op.seconds)
        return None

    def _stopping(self) -> bool:
        return self._stop.is_set()

    def _wake_flusher(self) -> None:
        if self._thread is not None:
            self._wake.set()

    def _run(self) -> None:
        """The background thread (:meth:`ReporterBase._background_loop`)."""
        self._do(self._background_loop())


__all__ = ["HttpTransport", "NetworkError", "Reporter", "SyncTransport", "split_url"]
