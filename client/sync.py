"""The synchronous reporter: a background flush thread and a stdlib HTTP transport.

>>> from ldpkit.client import Reporter
>>> with Reporter("http://127.0.0.1:8787", token="app-secret",
...               state_dir="~/.myapp/ldpkit") as r:          # doctest: +SKIP
...     r.report("theme", "dark")
...     r.flush()
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from types import TracebackType
from typing import Protocol, Self

from .base import Generator, ReporterBase, Values
from .policies import MAX_ANSWER_BYTES, NetworkError, Timeout, split_url
from .protocol import HttpAnswer
from .results import FlushResult, ReportReceipt
from .steps import Disk, Locked, Op, R, Request, Stepper, Steps, Wait


class AnswerTooLarge(OSError):
    """The collector's answer is larger than the client reads."""


def _read_bounded(response: http.client.HTTPResponse) -> bytes:
    """The answer's body, refused past MAX_ANSWER_BYTES (before reading it, when its
    length is announced)."""
    if response.length is not None and response.length > MAX_ANSWER_BYTES:
        raise AnswerTooLarge(
            f"the collector's answer is larger than {MAX_ANSWER_BYTES} bytes "
            f"({response.length} announced)"
        )
    data = response.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise AnswerTooLarge(f"the collector's answer is larger than {MAX_ANSWER_BYTES} bytes")
    if response.length:  # read(amt) returns short, without an error, if the socket closed
        raise http.client.IncompleteRead(data, response.length)
    if not response.isclosed():
        response.read()  # the end of a chunked body (nothing more: it is under the bound)
    return data


class SyncTransport(Protocol):
    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer: ...

    def close(self) -> None: ...


class HttpTransport:
    """Blocking HTTP/1.1 over one kept-alive connection (``http.client``)."""

    def __init__(self, url: str, timeout: Timeout, ssl_context: ssl.SSLContext | None = None):
        self.scheme, self.host, self.port, self.prefix = split_url(url)
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.scheme == "https":
            context = self.ssl_context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout.connect, context=context
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout.connect)
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(self.timeout.read_seconds)
        return conn

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        """One request and its whole answer, within ``timeout.total`` seconds (a timer
        shuts the socket down at the deadline, whatever each read waits) and at most
        MAX_ANSWER_BYTES of body; NetworkError otherwise."""
        with self._lock:
            deadline = time.monotonic() + self.timeout.total_seconds
            for attempt in range(2):
                reused = self._conn is not None
                expired = threading.Event()
                watchdog: threading.Timer | None = None
                try:
                    conn = self._conn if self._conn is not None else self._connect()
                    self._conn = conn
                    watchdog = threading.Timer(
                        max(0.0, deadline - time.monotonic()), self._expire, (conn, expired)
                    )
                    watchdog.daemon = True
                    watchdog.start()
                    conn.request(method, self.prefix + path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = _read_bounded(response)
                    if expired.is_set():
                        raise TimeoutError("the deadline passed")
                except (http.client.HTTPException, OSError) as exc:
                    self._drop()
                    if expired.is_set():
                        raise NetworkError(
                            f"no complete answer within the {self.timeout.total_seconds:g} s "
                            "deadline (Timeout.total)"
                        ) from exc
                    stale = isinstance(
                        exc,
                        http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError,
                    )
                    if reused and stale and attempt == 0:
                        continue  # the server closed an idle kept-alive connection
                    raise NetworkError(f"{type(exc).__name__}: {exc}") from exc
                finally:
                    if watchdog is not None:
                        watchdog.cancel()
                if response.will_close:
                    self._drop()
                return HttpAnswer(
                    response.status, {k.lower(): v for k, v in response.getheaders()}, data
                )
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _expire(conn: http.client.HTTPConnection, expired: threading.Event) -> None:
        """The deadline passed: end the blocked read (the request then fails)."""
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()


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
    clock : unix seconds; tests inject one to move time.
    background : run the background flush thread (False: only explicit ``flush()``).
    transport : how requests are sent (tests pass a fake); default ``http.client``.
    """

    def _http_transport(self) -> SyncTransport:
        return HttpTransport(self.url, self.timeout)

    def _open(self) -> None:
        self._locks = {"send": threading.Lock(), "definitions": threading.Lock()}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._background:
            self._thread = threading.Thread(target=self._run, name="ldpkit-flush", daemon=True)
            self._thread.start()

    # --- the app's API ----------------------------------------------------------------
    def report(self, metric: str, value: object) -> ReportReceipt:
        """Perturb ``value`` on the device and queue the report durably; returns a receipt.

        Categorical metrics take one of their category strings; numeric metrics take a
        number, clipped to the metric's bounds. Raises ParameterError for an unknown
        metric or a value of the wrong kind, BudgetExceeded when the report would
        overspend the metric's or the total budget, OutboxFull when the outbox is at its
        bound. The raw value is never stored or sent.
        """
        self._check_open()
        return self._do(self._reporting(metric, value))

    def simulate(self, metric: str, values: Values, *, rng: Generator | None = None) -> int:
        """Queue one report per value, each as a separate fresh device (for demos, load
        and statistical tests). Returns the number queued; deliver with :meth:`flush`."""
        self._check_open()
        return self._do(self._simulating(metric, values, rng))

    def flush(self, *, max_attempts: int | None = None) -> FlushResult:
        """Send what is queued now, retrying by the policy.

        Returns a :class:`FlushResult`. Raises CollectorUnavailable when a batch could not
        be delivered after ``max_attempts`` (default: the policy's) attempts, or
        CollectorRejected on a 4xx such as a bad token; the undelivered reports stay
        queued either way.
        """
        self._check_open()
        return self._do(self._flush(max_attempts))

    def refresh_definitions(self) -> None:
        """Fetch ``GET /v1/metrics`` now (with If-None-Match) and cache the answer."""
        self._check_open()
        self._do(self._refreshing())

    def close(self, *, flush: bool = True) -> None:
        """Stop the background thread, try one last delivery (one attempt, unless
        ``flush=False``), and close the store. Undelivered reports stay queued for the
        next start."""
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

    # --- I/O ----------------------------------------------------------------------------
    def _do(self, steps: Steps[R]) -> R:
        """Run ``steps`` to its end, performing each request it makes."""
        for op in (stepper := Stepper(steps)):
            with stepper.answering():
                stepper.reply = self._perform(op)
        return stepper.result

    def _perform(self, op: Op) -> object:
        if isinstance(op, Request):
            return self._transport.request(op.method, op.path, op.body, op.headers)
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
