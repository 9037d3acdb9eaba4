"""What both reporters share: the core's decisions applied to the on-device store.

:class:`ReporterState` is the part of a reporter that does no network I/O: it checks and
perturbs values, keeps the budget ledger and the memo, queues reports in the outbox and
installs metric definitions. A delivery run is :mod:`ldpkit.client.flush`'s steps; the
state applies what it found (:meth:`ReporterState.settle`).
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from email.utils import parsedate_to_datetime

import numpy as np
import numpy.typing as npt

from .._validation import check_count
from ..errors import (
    BudgetExceeded,
    CollectorRejected,
    CollectorUnavailable,
    OutboxFull,
    ParameterError,
    ProtocolError,
)
from ..http import HttpAnswer
from ..metrics import MetricDefinition, Period, check_period, window_start
from ..randomness import resolve_rng
from ..wire import ID_SIZE
from .codec import MemoKeys, MetricCodec, keyed_generator, memo_message
from .flush import Flush, FlushPlan, Found
from .policies import Clock, ShellSettings, budget_decision, fits, left_of, period_window
from .protocol import ROLE_HEADER, Fatal, classify_failure, parse_definitions
from .results import BudgetStatus, FlushResult, MetricBudget, ReportReceipt, TotalBudget
from .steps import Steps
from .storage import (
    TOTAL_KEY,
    DeviceStore,
    StateError,
    delta_key,
    device_known,
    load_or_create_secret,
    prepare_state_dir,
)

log = logging.getLogger("ldpkit.client")

DEFAULT_MAX_OUTBOX = 100_000
DEFAULT_BATCH_SIZE = 500
UNKNOWN_METRIC_REFRESH = 60.0
"""An unknown metric triggers a definitions refresh at most this often (seconds)."""
MEMO_REPORTS_KEPT = 1024
"""The most memoized reports kept in memory (tag -> bytes); beyond it the cache restarts."""


class ReporterState:
    """The reporter's state and every decision on it; thread-safe (one lock)."""

    def __init__(
        self,
        settings: ShellSettings,
        *,
        state_dir: str | os.PathLike[str],
        metrics: Iterable[MetricDefinition] | None,
        total_budget: float | None,
        total_budget_period: Period | str,
        max_outbox: int,
        memoize: bool,
        durable_reports: bool,
        clock: Clock,
        exclusive_state: bool = True,
        monotonic: Clock = time.monotonic,
    ) -> None:
        self.source = settings.url
        self.clock = clock
        if not callable(monotonic):
            raise ParameterError(f"monotonic must be a callable giving seconds, got {monotonic!r}")
        self.monotonic: Clock = monotonic  # between contacts with the collector
        # (collector time, monotonic time) at the latest answer carrying a Date: see now()
        self._anchor: tuple[float, float] | None = None
        self.memoize = bool(memoize)
        self.max_outbox = check_count(max_outbox, "max_outbox")
        self.total_period = check_period(total_budget_period, "total_budget_period")
        self._total_seconds = self.total_period.seconds
        if total_budget is not None:
            if isinstance(total_budget, bool) or not isinstance(total_budget, int | float):
                raise ParameterError(f"total_budget must be a number, got {total_budget!r}")
            if not 0 < float(total_budget) < float("inf"):
                raise ParameterError(f"total_budget must be finite and > 0, got {total_budget!r}")
            total_budget = float(total_budget)
        self.total_budget = total_budget
        self.definitions_ttl = settings.definitions_ttl
        self.lock = threading.RLock()
        self.directory = prepare_state_dir(state_dir)
        known = device_known(self.directory)
        self.secret = load_or_create_secret(self.directory)
        self._memo_keys = MemoKeys(self.secret)
        # memo tag -> its report (the same bytes every time: see _perturbed), in memory
        self._memo_reports: dict[bytes, bytes] = {}
        self.store = DeviceStore(
            self.directory,
            durable_reports=durable_reports,
            exclusive=bool(exclusive_state),
            known_device=known,
            now=clock(),
        )
        try:
            self._set_up(metrics)
        except BaseException:
            self.store.close()  # (an exclusive_state store would stay locked until collected)
            raise

    def _set_up(self, metrics: Iterable[MetricDefinition] | None) -> None:
        """The rest of ``__init__``, once the store is open."""
        self._deferred: dict[int, float] = {}  # seq -> first unknown_version refusal (clock)
        loss = self.store.ledger_lost()
        if loss is not None and loss.fresh:
            log.warning("%s: %s", self.store.path, loss.message)
        self.static = metrics is not None
        self._codecs: dict[str, MetricCodec] = {}
        self.definitions_etag: str | None = None
        self.definitions_fetched_at: float | None = None
        self.definitions_stale = False  # the collector refused a metric or version
        # What the collector says the token is (ROLE_HEADER): "device" tokens' batches
        # carry one device's reports; None until it said (or if it never does: older ones).
        self.token_role: str | None = None
        self.role_asked = False
        # Why the last delivery run gave up (None once a batch is delivered): OutboxFull
        # says it, so a full outbox is blamed on the collector only when that is the cause.
        self.delivery_problem: str | None = None
        self._last_unknown_refresh = -math.inf
        if metrics is not None:
            self._install_static(metrics)
        else:
            self._load_cached_definitions()
        with self.lock:
            self.store.prune(self.clock())

    def observe_answer(self, answer: object) -> None:
        """Anchor the device's time to the collector's: every HTTP answer carries its
        ``Date`` (RFC 9110, whole seconds); the time between answers is the monotonic
        clock's, which the device's wall clock (set, wrong, corrected) does not move."""
        if not isinstance(answer, HttpAnswer):
            return
        date = answer.headers.get("date")
        if not date:
            return
        try:
            seen = parsedate_to_datetime(date).timestamp() + 0.5  # the middle of its second
        except (TypeError, ValueError, OverflowError, IndexError):
            return
        if math.isfinite(seen) and seen > 0:
            self._anchor = (seen, self.monotonic())
            with self.lock:  # the device has seen the collector's time: it prunes from now on
                self.store.saw(seen, anchored=True)

    def now(self) -> tuple[float, bool]:
        """(the time reports are placed by, whether it is the collector's): since an
        answer of the collector in this process, its time then plus the monotonic time
        elapsed since; before that (offline, a fresh process), the device's clock."""
        if self._anchor is None:
            return self.clock(), False
        seen, at = self._anchor
        return seen + max(0.0, self.monotonic() - at), True

    def _install_static(self, metrics: Iterable[MetricDefinition]) -> None:
        codecs: dict[str, MetricCodec] = {}
        for m in metrics:
            if not isinstance(m, MetricDefinition):
                raise ParameterError(
                    f"metrics must be MetricDefinition objects, got {type(m).__name__}"
                )
            if m.name in codecs:
                raise ParameterError(f"metric {m.name!r} is defined twice")
            codecs[m.name] = MetricCodec.of(m)
        self._codecs = codecs

    def _load_cached_definitions(self) -> None:
        with self.lock:
            cached = self.store.load_definitions(self.source)
        if cached is None:
            return
        etag, body, fetched_at = cached
        try:
            definitions, warnings = parse_definitions(body)
        except ProtocolError as exc:
            log.warning("ignoring the cached metric definitions: %s", exc)
            return
        self._install(definitions, warnings)
        self.definitions_etag = etag
        self.definitions_fetched_at = fetched_at

    def _install(self, definitions: dict[str, MetricDefinition], warnings: list[str]) -> None:
        for w in warnings:
            log.warning("metric definitions: %s", w)
        self._codecs = {name: MetricCodec.of(d) for name, d in definitions.items()}

    @property
    def definitions(self) -> dict[str, MetricDefinition]:
        return {name: c.definition for name, c in self._codecs.items()}

    @property
    def has_definitions(self) -> bool:
        return self.static or self.definitions_fetched_at is not None

    def knows(self, metric: str) -> bool:
        return metric in self._codecs

    def definitions_due(self) -> bool:
        if self.static:
            return False
        fetched = self.definitions_fetched_at
        return (
            fetched is None
            or self.definitions_stale
            or self.clock() - fetched >= self.definitions_ttl
        )

    def definitions_headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.definitions_etag:
            headers["If-None-Match"] = self.definitions_etag
        return headers

    def learn_role(self, answer: HttpAnswer) -> None:
        """What a ``GET /v1/metrics`` answer says the token is; raise CollectorUnavailable /
        CollectorRejected for an answer that is no success."""
        if answer.status not in (200, 304):
            outcome = classify_failure(answer, self.clock())
            if isinstance(outcome, Fatal):
                raise outcome.error
            raise CollectorUnavailable(f"GET /v1/metrics: {outcome.reason}")
        self.role_asked = True
        role = answer.headers.get(ROLE_HEADER)
        self.token_role = role if role in ("device", "relay", "read", "admin") else None

    def device_caps(self) -> dict[str, int]:
        """The most reports of a version (by fingerprint) a batch may carry per bucket:
        one device's (``MetricDefinition.device_cap``) for a device token, else none."""
        if self.token_role != "device":
            return {}
        with self.lock:
            return {c.fingerprint: c.definition.device_cap for c in self._codecs.values()}

    def apply_definitions_answer(self, answer: HttpAnswer) -> None:
        """Install (200), keep (304), or raise CollectorUnavailable / CollectorRejected."""
        now = self.clock()
        self.learn_role(answer)
        if answer.status == 304 and self.definitions_fetched_at is not None:
            with self.lock:
                self.store.touch_definitions(self.source, now)
            self.definitions_fetched_at = now
            self.definitions_stale = False
            return
        if answer.status != 200:
            outcome = classify_failure(answer, now)
            if isinstance(outcome, Fatal):
                raise outcome.error
            raise CollectorUnavailable(f"GET /v1/metrics: {outcome.reason}")
        try:
            definitions, warnings = parse_definitions(answer.body)
        except ProtocolError as exc:  # a broken (or lying) collector: keep what we have
            raise CollectorUnavailable(f"GET /v1/metrics: {exc}") from None
        etag = answer.headers.get("etag")
        with self.lock:
            self.store.save_definitions(self.source, etag, answer.body, now)
            self._install(definitions, warnings)
            self.definitions_etag = etag
            self.definitions_fetched_at = now
            self.definitions_stale = False

    def unknown_refresh_due(self, metric: str, now: float) -> bool:
        """Whether an unknown ``metric`` should fetch the definitions now: always while
        there are none, else at most every ``UNKNOWN_METRIC_REFRESH`` seconds (``now``
        on a monotonic clock; True counts as fetching). Raises for metrics passed in code.
        """
        if self.static:
            raise self.unknown_metric(metric)
        if self.has_definitions and now - self._last_unknown_refresh < UNKNOWN_METRIC_REFRESH:
            return False
        self._last_unknown_refresh = now
        return True

    def unknown_refresh_failed(self, exc: CollectorUnavailable | CollectorRejected) -> None:
        """That fetch failed: if there are no definitions yet, raise CollectorRejected for a 4xx (a
        bad token) and CollectorUnavailable otherwise; else log it (the cached ones stay)."""
        if not self.has_definitions and isinstance(exc, CollectorRejected):
            # A refused token is not an outage (docs/client.md): keep the documented type.
            raise CollectorRejected(
                exc.status,
                exc.error,
                f"{exc.detail} (fetching the metric definitions from {self.source}/v1/metrics)",
            ) from exc
        if not self.has_definitions:
            raise CollectorUnavailable(
                f"no metric definitions yet: they come from {self.source}/v1/metrics "
                f"once, then from the cache in {self.directory} ({exc})"
            ) from exc
        log.info("definitions refresh failed: %s", exc)

    def unknown_metric(self, metric: object) -> ParameterError:
        known = ", ".join(sorted(self._codecs)) or "none"
        origin = "passed in code" if self.static else f"served by {self.source}"
        return ParameterError(f"unknown metric {metric!r}; the metrics {origin} are: {known}")

    def report(self, metric: str, value: object) -> ReportReceipt:
        """Check, perturb and durably queue one value (see ``Reporter.report``)."""
        try:
            return self._report(metric, value)
        except sqlite3.Error as exc:
            raise StateError(f"cannot record the report in {self.store.path}: {exc}") from exc

    def _windows(self, c: MetricCodec, ledger_now: float) -> tuple[int, int]:
        """(metric budget window start, total budget window start) at ``ledger_now``."""
        return (
            window_start(c.budget_seconds, ledger_now),
            window_start(self._total_seconds, ledger_now),
        )

    def _perturbed(
        self, c: MetricCodec, encoded: int | float, w_start: int
    ) -> tuple[bytes | None, bytes]:
        """(memo tag or None, report) of ``encoded`` in the memo window ``w_start``."""
        if self.memoize:
            message = memo_message(c.fingerprint, c.value_key(encoded), w_start)
            tag = self._memo_keys.tag(message)
            # The tag names (version, value, window) and the report is a function of them:
            # a value reported again in its window costs one HMAC, no generator, no draw.
            report = self._memo_reports.get(tag)
            if report is None:
                report = c.perturb(encoded, self._memo_keys.generator(message))
                if len(self._memo_reports) >= MEMO_REPORTS_KEPT:
                    self._memo_reports.clear()
                self._memo_reports[tag] = report
            return tag, report
        return None, c.perturb(encoded, keyed_generator(os.urandom(16)))  # OS CSPRNG key

    def _spent(self, key: str, seconds: int, start: int, budget: float | None) -> tuple[float, str]:
        """Epsilon spent in a window, and why it counts as spent when the ledger was lost
        while the window was current (then: all of ``budget``)."""
        spent = self.store.spent(key, seconds, start)
        loss = self.store.ledger_lost()
        if budget is not None and loss is not None and loss.covers(seconds, start):
            return max(spent, budget), loss.message
        return spent, ""

    def _report(self, metric: str, value: object) -> ReportReceipt:
        c = self._codecs.get(metric)
        if c is None:
            raise self.unknown_metric(metric)
        encoded, clipped = c.encode(value)
        now, anchored = self.now()
        # The report's bucket and memo window are its time's (the collector's once known:
        # see now()), so one memoized value goes once into a bucket whatever the clock
        # did; the budget windows are the ledger's, whose time never goes back (see
        # DeviceStore.ledger_time).
        bucket = window_start(c.bucket_seconds, now)
        store = self.store
        tag, report = self._perturbed(c, encoded, window_start(c.budget_seconds, now))
        report_id = os.urandom(ID_SIZE)
        with self.lock, store.transaction():
            ledger_now = store.ledger_time(now, anchored)
            w_start, t_start = self._windows(c, ledger_now)
            queued = store.memo_buckets(tag) if tag is not None else None
            memoized = queued is not None
            if queued is not None and bucket in queued:
                # This very report is already queued (or delivered) for this bucket.
                return ReportReceipt(
                    c.name, c.fingerprint, bucket, report, None, 0.0, True, False, clipped
                )
            self._check_room(store.outbox_rows(), 1)
            spent = 0.0
            if not memoized:
                self._check_budget(c, w_start, t_start, ledger_now)
                spent = c.epsilon
            store.saw(now, anchored)
            store.add_report(
                report_id,
                c.name,
                c.fingerprint,
                bucket,
                report,
                tag=tag,
                epsilon=spent,
                delta=c.definition.delta if spent else 0.0,
                budget_seconds=c.budget_seconds,
                window_start=w_start,
                total_seconds=self._total_seconds,
                total_start=t_start,
            )
        return ReportReceipt(
            c.name, c.fingerprint, bucket, report, report_id, spent, memoized, True, clipped
        )

    def _check_budget(self, c: MetricCodec, w_start: int, t_start: int, ledger_now: float) -> None:
        """Raise BudgetExceeded unless a report of ``c`` fits its budget window starting
        at ``w_start`` and the total's at ``t_start``."""
        store = self.store
        if store.ledger_lost() is None:  # the usual case: the sums decide, nothing else read
            total = self.total_budget
            if fits(store.spent(c.name, c.budget_seconds, w_start), c.epsilon, c.budget) and (
                total is None
                or fits(store.spent(TOTAL_KEY, self._total_seconds, t_start), c.epsilon, total)
            ):
                return
        metric_spent, note = self._spent(c.name, c.budget_seconds, w_start, c.budget)
        total_spent, total_note = self._spent(
            TOTAL_KEY, self._total_seconds, t_start, self.total_budget
        )
        if fits(metric_spent, c.epsilon, c.budget) and (
            self.total_budget is None or fits(total_spent, c.epsilon, self.total_budget)
        ):
            return
        note = note or total_note
        error = self._over_budget(c.definition, metric_spent, total_spent, ledger_now, note)
        assert error is not None
        raise error

    def _over_budget(
        self, d: MetricDefinition, spent: float, total_spent: float, now: float, note: str = ""
    ) -> BudgetExceeded | None:
        """:func:`budget_decision` on a report of ``d`` (None if it fits)."""
        return budget_decision(
            metric=d.name,
            needed=d.epsilon,
            metric_spent=spent,
            metric_budget=d.effective_budget,
            metric_period=d.budget_period,
            total_spent=total_spent,
            total_budget=self.total_budget,
            total_period=self.total_period,
            now=now,
            note=note,
        )

    def _check_room(self, rows: int, adding: int) -> None:
        if rows + adding <= self.max_outbox:
            return
        spent = "nothing was recorded and no budget was spent"
        if adding > self.max_outbox:
            # The call alone is larger than the outbox: no delivery can make room for it.
            message = (
                f"this call would queue {adding} reports but the outbox holds at most "
                f"max_outbox={self.max_outbox}; {spent}. Queue at most {self.max_outbox} "
                "per call (simulate() in chunks, with flush() between them) or make the "
                "Reporter with a larger max_outbox"
            )
        else:
            message = (
                f"the outbox holds {rows} undelivered reports and its bound is max_outbox="
                f"{self.max_outbox}, so {adding} more do not fit; {spent}. "
            )
            if self.delivery_problem is not None:
                message += (
                    f"Reports could not be delivered to {self.source} lately "
                    f"({self.delivery_problem}); they stay queued and leave the outbox when "
                    "it acknowledges them"
                )
            else:
                message += (
                    "They leave the outbox when the collector acknowledges them: flush() "
                    "sends them now (the background thread does so every flush_interval)"
                )
        raise OutboxFull(message, rows=rows, limit=self.max_outbox)

    def simulate(
        self,
        metric: str,
        values: Sequence[object] | npt.ArrayLike,
        rng: np.random.Generator | None = None,
    ) -> int:
        """Queue one report for each value as if each came from its own new device.

        For demos, load tests and statistical tests: every value goes through the same
        checks, budget decision (a fresh device has spent nothing) and outbox as
        :meth:`report`, but the perturbation is vectorized and the virtual devices keep
        no ledger or memo (each reports once). Returns the number of reports queued.
        """
        codec = self._codecs.get(metric)
        if codec is None:
            raise self.unknown_metric(metric)
        if self.token_role == "device":
            raise ParameterError(
                f"simulate() queues reports as if from many devices, but {self.source} says "
                "this is a device (ingest) token, whose batches may carry one device's "
                "reports only: give simulate(), demos and load tests a relay token "
                "([tokens] relay in the collector's config, or LDPKIT_RELAY_TOKENS)"
            )
        encoded = codec.encode_many(values)
        n = len(encoded)
        if n == 0:
            return 0
        d = codec.definition
        now = self.clock()  # simulated devices (unmetered) live on the given clock
        error = self._over_budget(d, 0.0, 0.0, now)
        if error is not None:
            raise error
        reports = codec.perturb_many(encoded, resolve_rng(rng))
        ids = os.urandom(ID_SIZE * n)
        bucket = d.bucket.start(now)
        fp = codec.fingerprint
        rows = [
            (ids[i * ID_SIZE : (i + 1) * ID_SIZE], d.name, fp, bucket, reports[i]) for i in range(n)
        ]
        try:
            with self.lock, self.store.transaction():
                self._check_room(self.store.outbox_rows(), n)
                self.store.add_unmetered(rows)
        except sqlite3.Error as exc:
            raise StateError(f"cannot record the reports in {self.store.path}: {exc}") from exc
        return n

    def budget(self) -> BudgetStatus:
        metrics: dict[str, MetricBudget] = {}
        with self.lock:
            now = self.store.ledger_time(*self.now())
            for name, codec in sorted(self._codecs.items()):
                d = codec.definition
                metrics[name] = MetricBudget(
                    name,
                    d.effective_budget,
                    *self._usage(name, d.budget_period, d.effective_budget, now),
                    delta_budget=d.effective_budget / d.epsilon * d.delta,
                    epsilon=d.epsilon,
                    delta=d.delta,
                )
            total: TotalBudget | None = None
            if self.total_budget is not None:
                total = TotalBudget(
                    self.total_budget,
                    *self._usage(TOTAL_KEY, self.total_period, self.total_budget, now),
                )
            loss = self.store.ledger_lost()
            longest = max([self._total_seconds, *(c.budget_seconds for c in self._codecs.values())])
            if loss is not None and loss.at < period_window(longest, now)[0]:
                loss = None  # every period current at the loss has ended
        return BudgetStatus(metrics, total, loss)

    def _usage(
        self, key: str, period: Period, budget: float, now: float
    ) -> tuple[float, float, Period, int, int, float]:
        """The fields a budget's status shares, metric or total: spent, left, period, its
        start and end, and delta spent."""
        start, end = period_window(period, now)
        spent, _ = self._spent(key, period.seconds, start, budget)
        delta_spent = self.store.spent(delta_key(key), period.seconds, start)
        return spent, left_of(spent, budget), period, start, end, delta_spent

    def pending(self) -> int:
        with self.lock:
            return self.store.outbox_rows()

    def pending_seen(self) -> int:
        """:meth:`pending` as of this connection's latest transaction, with no statement:
        after ``report()``, the count its transaction saw and added to (whether a batch is
        full: another process's reports since are counted by the next report)."""
        return self.store.outbox_rows_seen()

    def prune(self) -> None:
        with self.lock:
            self.store.prune(*self.now())

    def close(self) -> None:
        with self.lock:
            self.store.close()

    def delivery(self, plan: FlushPlan) -> Steps[Found]:
        """A delivery run by ``plan`` (:class:`~ldpkit.client.flush.Flush`); the caller holds the
        shell's send lock from here until it applied what the run found (:meth:`settle`)."""
        return Flush(self.store, self.lock, plan, self._deferred, self.clock).steps()

    def settle(self, found: Found) -> FlushResult:
        """Apply what a delivery run found; raise what ended it early, if anything did."""
        self._deferred = found.deferred
        if found.stale_definitions:
            self.definitions_stale = True  # the background refetches them
        if found.problem is not None:
            self.delivery_problem = found.problem
        elif found.answered:
            self.delivery_problem = None
        if found.error is not None:
            raise found.error
        return found.result
