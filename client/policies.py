"""The client's policies: retries and backoff, the background schedule, the privacy
budget's decisions, and the reporter's settings, each checked once (the timeouts are
:class:`ldpkit.http.Timeout`). No I/O: time is passed in."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import __version__
from .._validation import check_count, check_seconds
from ..errors import BudgetExceeded, ParameterError
from ..http import CollectorUrl, Timeout
from ..metrics import BUDGET_SLACK, Period, window_start
from ..wire import CONTENT_TYPE
from .results import utc

Clock = Callable[[], float]
"""Unix seconds (UTC), like :func:`time.time`; tests pass their own to move time."""

USER_AGENT = f"ldpkit-client/{__version__}"


@dataclass(frozen=True)
class RetryPolicy:
    """When to try again, after a network error, a 5xx or a 429.

    The n-th consecutive failure waits a *full-jitter* exponential backoff (AWS
    architecture blog, "Exponential backoff and jitter"): a uniform draw in
    ``[0, min(max_delay, base_delay * multiplier ** (n - 1))]``. A ``Retry-After`` from
    the collector replaces the draw (capped at ``max_retry_after``). :meth:`Reporter.flush`
    makes at most ``max_attempts`` attempts per batch before it raises
    ``CollectorUnavailable``; the background flusher never gives up, it only waits.
    """

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    max_retry_after: float = 600.0

    def __post_init__(self) -> None:
        check_count(self.max_attempts, "max_attempts")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            check_seconds(getattr(self, name), name, zero=True)
        if not math.isfinite(self.multiplier) or self.multiplier < 1:
            raise ParameterError(f"multiplier must be >= 1, got {self.multiplier!r}")

    def backoff_cap(self, failures: int) -> float:
        """The upper end of the jittered wait after ``failures`` consecutive failures."""
        if failures <= 0:
            return 0.0
        exponent = min(failures - 1, 64)
        return min(self.max_delay, self.base_delay * self.multiplier**exponent)

    def delay(
        self,
        failures: int,
        retry_after: float | None = None,
        uniform: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait before the next attempt (``uniform()`` draws in [0, 1))."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return uniform() * self.backoff_cap(failures)


@dataclass(frozen=True)
class ShellSettings:
    """What a reporter (sync or async) derives from its arguments, checked once and
    passed on checked (the transports take ``collector`` as it is).

    ``headers`` go on every request (User-Agent and, with a token, the Bearer
    authorization); ``report_headers`` on ``POST /v1/reports``.
    """

    collector: CollectorUrl
    flush_interval: float
    batch_size: int
    timeout: Timeout
    retry: RetryPolicy
    headers: Mapping[str, str]
    definitions_ttl: float

    @classmethod
    def of(
        cls,
        url: str,
        *,
        token: str | None,
        flush_interval: float,
        batch_size: int,
        timeout: Timeout | float | None,
        retry: RetryPolicy | None,
        definitions_ttl: float,
    ) -> ShellSettings:
        """Check the reporter's arguments (ParameterError on the first bad one)."""
        collector = CollectorUrl.of(url)
        check_count(batch_size, "batch_size")
        interval = check_seconds(flush_interval, "flush_interval")
        coerced = Timeout.coerce(timeout)
        policy = retry if retry is not None else RetryPolicy()
        if not isinstance(policy, RetryPolicy):
            raise ParameterError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        headers = {"User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        ttl = check_seconds(definitions_ttl, "definitions_ttl")
        return cls(collector, interval, batch_size, coerced, policy, headers, ttl)

    @property
    def url(self) -> str:
        return self.collector.base

    @property
    def report_headers(self) -> dict[str, str]:
        return {**self.headers, "Content-Type": CONTENT_TYPE, "Accept": "application/json"}


MIN_BACKOFF = 0.05
"""The least backoff (seconds) of the background flusher after a jittered wait."""

PRUNE_INTERVAL = 3600.0
"""The background flusher prunes expired ledger and memo rows at most this often."""


class BackgroundSchedule:
    """When the background flusher acts; times are one monotonic clock, passed in.

    A pass is due ``flush_interval`` after the previous one ended, or sooner when the
    shell is woken (a full batch). After a failed pass none starts before the backoff
    ends, woken or not: the policy's full-jitter backoff over the consecutive failures
    (or the collector's Retry-After) after CollectorUnavailable or an unexpected error,
    ``max(retry.max_delay, flush_interval)`` after CollectorRejected (a 4xx that only
    the operator fixes). The shell loops: sleep ``wait(now)`` unless woken; if
    ``ready(now)``, flush once and report the outcome; prune when ``prune_due(now)``.
    """

    def __init__(
        self,
        *,
        flush_interval: float,
        retry: RetryPolicy,
        now: float,
        uniform: Callable[[], float] = random.random,
    ) -> None:
        self.flush_interval = flush_interval
        self.retry = retry
        self.uniform = uniform
        self.failures = 0
        self.next_due = now + flush_interval
        self.not_before = 0.0
        self.last_prune = now

    def wait(self, now: float) -> float:
        """Seconds to sleep (unless woken) before the next pass may start."""
        return max(0.0, max(self.next_due, self.not_before) - now)

    def ready(self, now: float) -> bool:
        """False while backing off: a wake-up (a full batch) waits for the backoff."""
        return now >= self.not_before

    def flushed(self, now: float) -> None:
        """The pass ended without an error."""
        self.failures = 0
        self.not_before = 0.0
        self.next_due = now + self.flush_interval

    def unavailable(self, now: float, retry_after: float | None) -> float:
        """The pass raised CollectorUnavailable; returns the seconds of backoff."""
        return self._jittered(now, retry_after)

    def rejected(self, now: float) -> float:
        """The pass raised CollectorRejected; returns the seconds of backoff."""
        self.failures += 1
        return self._back_off(now, max(self.retry.max_delay, self.flush_interval))

    def failed(self, now: float) -> float:
        """The pass raised anything else; returns the seconds of backoff."""
        return self._jittered(now, None)

    def _jittered(self, now: float, retry_after: float | None) -> float:
        self.failures += 1
        delay = self.retry.delay(self.failures, retry_after, self.uniform)
        return self._back_off(now, max(delay, MIN_BACKOFF))

    def _back_off(self, now: float, wait: float) -> float:
        self.not_before = now + wait
        self.next_due = now + self.flush_interval
        return wait

    def prune_due(self, now: float) -> bool:
        """Whether to prune now (at most every ``PRUNE_INTERVAL``); True counts as done."""
        if now - self.last_prune > PRUNE_INTERVAL:
            self.last_prune = now
            return True
        return False


def period_window(period: Period | int, now: float) -> tuple[int, int]:
    """(start, end) of the period (or length in seconds) holding ``now``, unix seconds UTC."""
    seconds = period if isinstance(period, int) else period.seconds
    start = window_start(seconds, now)
    return start, start + seconds


def fits(spent: float, needed: float, budget: float) -> bool:
    return spent + needed <= budget * (1.0 + BUDGET_SLACK) + BUDGET_SLACK


def left_of(spent: float, budget: float) -> float:
    left = budget - spent
    return 0.0 if left < budget * BUDGET_SLACK + BUDGET_SLACK else left


def _when(renews_at: int, now: float) -> str:
    stamp = utc(renews_at).strftime("%Y-%m-%d %H:%M UTC")
    hours, rest = divmod(max(0, int(renews_at - now)), 3600)
    return f"{stamp} (in {hours}h{rest // 60:02d}m)"


def budget_decision(
    *,
    metric: str,
    needed: float,
    metric_spent: float,
    metric_budget: float,
    metric_period: Period,
    total_spent: float,
    total_budget: float | None,
    total_period: Period,
    now: float,
    note: str = "",
) -> BudgetExceeded | None:
    """None when a report of ``needed`` epsilon fits both budgets, else the error to raise
    (``note`` is added to its message: why the budget counts as spent)."""
    scopes: list[tuple[str, float, float, Period]] = [
        ("metric", metric_spent, metric_budget, metric_period)
    ]
    if total_budget is not None:
        scopes.append(("total", total_spent, total_budget, total_period))
    for scope, spent, budget, period in scopes:
        if fits(spent, needed, budget):
            continue
        _, end = period_window(period, now)
        left = left_of(spent, budget)
        if scope == "metric":
            what = (
                f"privacy budget of metric {metric!r} exhausted: a report costs epsilon "
                f"{needed:g} and {left:g} of its {budget:g} per {period.value} is left"
            )
        else:
            what = (
                f"total privacy budget exhausted: a report of metric {metric!r} costs epsilon "
                f"{needed:g} and {left:g} of the total {budget:g} per {period.value} "
                f"(all metrics together) is left"
            )
        return BudgetExceeded(
            f"{what}; it renews at {_when(end, now)}" + (f" ({note})" if note else ""),
            metric=metric,
            scope=scope,
            budget=budget,
            left=left,
            needed=needed,
            renews_at=end,
        )
    return None
