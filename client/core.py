"""The client's core: every decision, no I/O.

Like httpx's split between a protocol core and its transports, this module holds what
the synchronous and the asynchronous reporter share, as pure functions and small
immutable values: checking a value against its metric definition, the permanent
(memoized) randomness, budget decisions, grouping queued reports into wire batches,
reading the collector's answer, and retry decisions. It never touches the disk, the
network or the clock (time is passed in), so it is tested without either.

The storage (``storage.py``) and the two shells (``sync.py``, ``aio.py``) do the I/O;
what they share (checking their arguments, the background flush schedule) is here or in
``state.py``, so neither shell imports the other.
"""

from __future__ import annotations

import email.utils
import hmac
import math
import random
import struct
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import __version__
from .._json import loads_bounded
from .._validation import shown
from ..errors import (
    BudgetExceeded,
    CollectorRejected,
    LdpkitError,
    ParameterError,
    ProtocolError,
)
from ..metrics import MetricDefinition, MetricKind, Period
from ..wire import ID_SIZE, LEGACY_CONTENT_TYPE, Block, encode_batch

Clock = Callable[[], float]
"""Unix seconds (UTC), like :func:`time.time`; tests pass their own to move time."""

BUDGET_SLACK = 1e-9
"""Relative slack when comparing sums of epsilons (1.0 + 0.1 + ... is not exact)."""

USER_AGENT = f"ldpkit-client/{__version__}"


# --- policies -------------------------------------------------------------------------
def _seconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParameterError(f"Timeout.{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"Timeout.{name} must be finite and > 0, got {value!r}")
    return float(value)


MAX_ANSWER_BYTES = 16 * 2**20
"""The largest answer the client reads (a batch answer is a few KiB; the metric list of
a collector, whose definitions are limited in size, rarely more than a few MiB)."""

DEFAULT_TOTAL = 60.0


@dataclass(frozen=True)
class Timeout:
    """Network timeouts in seconds: ``connect`` to open a connection, ``read`` for each
    wait on the answer, ``total`` for a whole request, from connecting to the last byte
    of the answer (an answer dripped a byte at a time never trips ``read``).
    ``Timeout(5.0)`` sets connect and read; ``total`` defaults to 60 s, or connect + read
    if that is longer."""

    connect: float = 5.0
    read: float | None = None
    total: float | None = None

    def __post_init__(self) -> None:
        read = self.connect if self.read is None else self.read
        total = self.total
        if total is None:
            total = max(DEFAULT_TOTAL, _seconds(self.connect, "connect") + _seconds(read, "read"))
        for name, value in (("connect", self.connect), ("read", read), ("total", total)):
            _seconds(value, name)
        object.__setattr__(self, "connect", float(self.connect))
        object.__setattr__(self, "read", float(read))
        object.__setattr__(self, "total", float(total))

    @property
    def read_seconds(self) -> float:
        assert self.read is not None
        return self.read

    @property
    def total_seconds(self) -> float:
        assert self.total is not None
        return self.total

    @classmethod
    def coerce(cls, value: Timeout | float | None) -> Timeout:
        if value is None:
            return cls(5.0, 30.0)
        if isinstance(value, Timeout):
            return value
        return cls(value)


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
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ParameterError(f"max_attempts must be an integer, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ParameterError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("base_delay", "max_delay", "max_retry_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ParameterError(f"{name} must be a number of seconds, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ParameterError(f"{name} must be finite and >= 0, got {value!r}")
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


# --- the shells' settings and background schedule -------------------------------------
class NetworkError(OSError):
    """A request got no HTTP answer (refused, reset, timed out, DNS...)."""


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of a collector base URL."""
    if not isinstance(url, str):
        raise ParameterError(f"collector URL must be a string, got {url!r}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ParameterError(f"collector URL must be http(s)://host[:port][/prefix], got {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def check_interval(value: float, what: str) -> float:
    """``value`` as float seconds; ParameterError unless a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParameterError(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ParameterError(f"{what} must be finite and > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ShellSettings:
    """What a reporter (sync or async) derives from its arguments, checked once.

    ``headers`` go on every request (User-Agent and, with a token, the Bearer
    authorization); ``report_headers`` on ``POST /v1/reports``.
    """

    url: str
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
        split_url(url)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ParameterError(f"batch_size must be a positive integer, got {batch_size!r}")
        interval = check_interval(flush_interval, "flush_interval")
        coerced = Timeout.coerce(timeout)
        policy = retry if retry is not None else RetryPolicy()
        if not isinstance(policy, RetryPolicy):
            raise ParameterError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        headers = {"User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        ttl = check_interval(definitions_ttl, "definitions_ttl")
        return cls(url.rstrip("/"), interval, batch_size, coerced, policy, headers, ttl)

    @property
    def report_headers(self) -> dict[str, str]:
        return {**self.headers, "Content-Type": LEGACY_CONTENT_TYPE, "Accept": "application/json"}


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


# --- results --------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportReceipt:
    """What :meth:`Reporter.report` recorded (never the raw value).

    ``report`` is the perturbed report's bytes, exactly as they travel. ``memoized`` is
    true when the same value was already reported in this memo window: the report is the
    same and no budget was spent. ``queued`` is false when that identical report is
    already queued or sent for the same time bucket, so nothing new was queued
    (``report_id`` is then None). ``clipped`` says a number was clipped to the bounds.
    """

    metric: str
    fingerprint: str
    bucket: int
    report: bytes
    report_id: bytes | None
    epsilon_spent: float
    memoized: bool
    queued: bool
    clipped: bool = False


@dataclass(frozen=True)
class FlushResult:
    """What a flush delivered: ``sent`` reports newly accepted by the collector,
    ``duplicates`` it already had (retries of a delivered report), ``rejected`` it
    refused for good (dropped), and the reports ``remaining`` in the outbox after it, of
    which ``deferred`` were refused as ``unknown_version`` (a replica that has not seen
    their version yet) and are kept for the next flush."""

    sent: int = 0
    duplicates: int = 0
    rejected: int = 0
    remaining: int = 0
    deferred: int = 0

    @property
    def delivered(self) -> int:
        """Reports that left the outbox: accepted, duplicate or rejected."""
        return self.sent + self.duplicates + self.rejected

    def plus(self, other: FlushResult) -> FlushResult:
        return FlushResult(
            self.sent + other.sent,
            self.duplicates + other.duplicates,
            self.rejected + other.rejected,
            other.remaining,
            self.deferred + other.deferred,
        )


def utc(unix_seconds: float) -> datetime:
    return datetime.fromtimestamp(unix_seconds, tz=UTC)


@dataclass(frozen=True)
class MetricBudget:
    """One metric's budget in its current period (epsilon)."""

    metric: str
    budget: float
    spent: float
    left: float
    period: Period
    period_start: int
    renews_at: int  # unix seconds, UTC

    @property
    def renews_at_datetime(self) -> datetime:
        return utc(self.renews_at)


@dataclass(frozen=True)
class TotalBudget:
    """The total budget across metrics in its current period (sequential composition)."""

    budget: float
    spent: float
    left: float
    period: Period
    period_start: int
    renews_at: int

    @property
    def renews_at_datetime(self) -> datetime:
        return utc(self.renews_at)


@dataclass(frozen=True)
class StateLoss:
    """The device's ledger was lost: its database was missing, empty or unreadable when
    the reporter opened ``state_dir`` (at ``at``, unix seconds). Every budget counts as
    spent in every period that was current then, and renews when it ends. The outbox went
    with it: ``lost_reports`` undelivered reports (None: unknown). ``moved_to``: where an
    unreadable database was kept, for inspection."""

    at: int
    reason: str  # "missing", "empty" or "corrupt"
    moved_to: str | None = None
    lost_reports: int | None = None
    fresh: bool = field(default=False, compare=False)  # found at this start (not an earlier one)

    def covers(self, seconds: int, window_start: int) -> bool:
        """Whether the window of ``seconds`` from ``window_start`` was current at the loss."""
        return window_start <= self.at < window_start + seconds

    @property
    def message(self) -> str:
        when = utc(self.at).strftime("%Y-%m-%d %H:%M UTC")
        reports = (
            f"{self.lost_reports} undelivered reports"
            if self.lost_reports is not None
            else "its undelivered reports (how many is unknown)"
        )
        kept = f"; the unreadable file was kept as {self.moved_to}" if self.moved_to else ""
        return (
            f"the privacy ledger was lost ({self.reason} database, found at {when}): every "
            f"budget counts as spent until the periods current then end; the outbox and "
            f"{reports} were lost with it{kept}"
        )


@dataclass(frozen=True)
class BudgetStatus:
    """:meth:`Reporter.budget`: every known metric's budget, and the total (None when the
    reporter has no ``total_budget``). ``ledger_lost``: set while a lost ledger keeps the
    current periods closed (see :class:`StateLoss`)."""

    metrics: Mapping[str, MetricBudget]
    total: TotalBudget | None
    ledger_lost: StateLoss | None = None

    def __getitem__(self, metric: str) -> MetricBudget:
        return self.metrics[metric]

    def __contains__(self, metric: object) -> bool:
        return metric in self.metrics

    def __str__(self) -> str:
        """One line per metric (and the total): epsilon spent and left, renewal in UTC."""
        rows: list[tuple[str, MetricBudget | TotalBudget]] = list(self.metrics.items())
        if self.total is not None:
            rows.append(("total", self.total))
        if not rows:
            return "privacy budget (epsilon): no metrics known yet"
        width = max(len(name) for name, _ in rows)
        lines = ["privacy budget (epsilon) in the current periods:"]
        for name, b in rows:
            lines.append(
                f"  {name:<{width}}  spent {b.spent:g} of {b.budget:g} per {b.period.value}, "
                f"{b.left:g} left; renews {utc(b.renews_at):%Y-%m-%d %H:%M} UTC"
            )
        return "\n".join(lines)


# --- metric codecs: values in, reports out --------------------------------------------
@dataclass(frozen=True, eq=False)
class MetricCodec:
    """A definition with what the hot path needs precomputed (category index, fingerprint)."""

    definition: MetricDefinition
    fingerprint: str
    index: Mapping[str, int] = field(repr=False)
    # Plain copies of what report() reads, so the hot path touches no enum properties.
    name: str = ""
    categorical: bool = True
    epsilon: float = 0.0
    budget: float = 0.0
    bucket_seconds: int = 0
    budget_period: str = ""
    budget_seconds: int = 0

    @classmethod
    def of(cls, definition: MetricDefinition) -> MetricCodec:
        cats = definition.categories or ()
        return cls(
            definition,
            definition.fingerprint,
            {c: i for i, c in enumerate(cats)},
            name=definition.name,
            categorical=definition.kind is MetricKind.CATEGORICAL,
            epsilon=definition.epsilon,
            budget=definition.effective_budget,
            bucket_seconds=definition.bucket.seconds,
            budget_period=definition.budget_period.value,
            budget_seconds=definition.budget_period.seconds,
        )

    def encode(self, value: object) -> tuple[int | float, bool]:
        """The mechanism's input for ``value`` and whether it was clipped.

        Categorical: the category's index (ParameterError for an unknown category or a
        non-string). Numeric: the number clipped to the bounds (ParameterError for a
        non-number, NaN or infinity).
        """
        if self.categorical:
            if isinstance(value, str):
                i = self.index.get(value)
                if i is not None:
                    return i, False
            d = self.definition
            d.encode_value(value)  # raises the clear message
            raise ParameterError(f"{value!r} is not a category of metric {d.name}")  # unreachable
        d = self.definition
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise ParameterError(
                f"metric {d.name} takes a number in [{_g(d.bounds, 0)}, {_g(d.bounds, 1)}], "
                f"got {type(value).__name__} {value!r}"
            )
        x = float(value)
        if not math.isfinite(x):
            raise ParameterError(f"metric {d.name} takes a finite number, got {value!r}")
        assert d.bounds is not None
        lo, hi = d.bounds
        clipped = min(max(x, lo), hi)
        return clipped + 0.0, clipped != x  # + 0.0 folds -0.0 into 0.0

    def encode_many(self, values: Sequence[object] | npt.ArrayLike) -> npt.NDArray[Any]:
        """Vectorized :meth:`encode`: an int64 index array or a clipped float64 array."""
        d = self.definition
        if d.kind is MetricKind.CATEGORICAL:
            out = np.empty(len(values), dtype=np.int64)  # type: ignore[arg-type]
            index = self.index
            for k, v in enumerate(values):  # type: ignore[arg-type]
                i = index.get(v) if isinstance(v, str) else None
                if i is None:
                    try:
                        self.encode(v)
                    except ParameterError as exc:
                        raise ParameterError(f"value {k}: {exc}") from None
                    raise AssertionError("unreachable")  # pragma: no cover
                out[k] = i
            return out
        array = np.asarray(values)
        if array.ndim != 1 or array.dtype.kind not in "iuf":
            raise ParameterError(
                f"metric {d.name} takes a 1-D array of numbers, got {array.dtype} {array.shape}"
            )
        x = array.astype(np.float64)
        bad = ~np.isfinite(x)
        if bool(np.any(bad)):
            k = int(np.argmax(bad))
            raise ParameterError(f"value {k}: metric {d.name} takes a finite number, got {x[k]!r}")
        assert d.bounds is not None
        return np.clip(x, *d.bounds) + 0.0

    def value_key(self, encoded: int | float) -> bytes:
        """A fixed-width byte form of an encoded value (the memo key's input)."""
        if self.categorical:
            return struct.pack("<Q", int(encoded))
        return struct.pack("<d", float(encoded))

    def perturb(self, encoded: int | float, rng: np.random.Generator) -> bytes:
        """One perturbed report's bytes."""
        m = self.definition.mechanism_instance
        array = np.array([encoded], dtype=np.int64 if isinstance(encoded, int) else np.float64)
        reports = m.perturb(array, rng=rng)
        return bytes(np.ascontiguousarray(reports).tobytes())

    def perturb_many(self, encoded: npt.NDArray[Any], rng: np.random.Generator) -> list[bytes]:
        """Perturbed reports of many (independent) values, one bytes object each."""
        reports = np.ascontiguousarray(self.definition.mechanism_instance.perturb(encoded, rng=rng))
        raw = reports.tobytes()
        size = len(raw) // max(len(encoded), 1)
        return [raw[i : i + size] for i in range(0, len(raw), size)]


def _g(bounds: tuple[float, float] | None, i: int) -> str:
    return f"{bounds[i]:g}" if bounds is not None else "?"


# --- memoization ----------------------------------------------------------------------
_TAG_CONTEXT = b"ldpkit/memo-tag/v1\x00"
_RNG_CONTEXT = b"ldpkit/memo-rng/v1\x00"


def memo_message(fingerprint: str, value_key: bytes, window_start: int) -> bytes:
    """``fingerprint | value | window start``: what the memo HMACs are computed over."""
    return b"%s|%s|%d" % (fingerprint.encode("ascii"), value_key, window_start)


def memo_tag(secret: bytes, message: bytes) -> bytes:
    """The stored marker that this value was reported in this window (16 bytes).

    Domain-separated from :func:`memo_generator`'s key, so the stored tag is no help in
    recomputing the randomness (which, with the report, would let one test candidate
    values).
    """
    return hmac.digest(secret, _TAG_CONTEXT + message, "sha256")[:16]


def memo_generator(secret: bytes, message: bytes) -> np.random.Generator:
    """The permanent randomness of one (metric version, value, window): numpy's Philox
    keyed with 128 bits of HMAC-SHA256(secret, message)."""
    digest = hmac.digest(secret, _RNG_CONTEXT + message, "sha256")
    return keyed_generator(digest[:16])


_ZERO4 = np.zeros(4, dtype=np.uint64)
_local = threading.local()


def keyed_generator(key: bytes) -> np.random.Generator:
    """A generator equal to ``Generator(Philox(key=int.from_bytes(key, "little")))``.

    Building a Philox object costs about 13 microseconds, a quarter of a report's
    budget, so each thread keeps one and re-keys it (counter and buffer zeroed, exactly
    the state a new one starts in). The generator is valid until the same thread's next
    call: use it at once.
    """
    cached: tuple[np.random.Philox, np.random.Generator] | None = getattr(_local, "philox", None)
    if cached is None:
        bit_generator = np.random.Philox(key=0)
        cached = (bit_generator, np.random.Generator(bit_generator))
        _local.philox = cached
    bit_generator, generator = cached
    bit_generator.state = {
        "bit_generator": "Philox",
        "state": {"counter": _ZERO4, "key": np.frombuffer(key, dtype="<u8").copy()},
        "buffer": _ZERO4,
        "buffer_pos": 4,
        "has_uint32": 0,
        "uinteger": 0,
    }
    return generator


# --- budget ---------------------------------------------------------------------------
def period_window(period: Period | int, now: float) -> tuple[int, int]:
    """(start, end) of the period (or length in seconds) holding ``now``, unix seconds UTC."""
    seconds = period if isinstance(period, int) else period.seconds
    start = int(now // seconds) * seconds
    return start, start + seconds


def fits(spent: float, needed: float, budget: float) -> bool:
    return spent + needed <= budget * (1.0 + BUDGET_SLACK) + BUDGET_SLACK


def left_of(spent: float, budget: float) -> float:
    left = budget - spent
    return 0.0 if left < budget * BUDGET_SLACK + BUDGET_SLACK else left


def _when(renews_at: int, now: float) -> str:
    stamp = utc(renews_at).strftime("%Y-%m-%d %H:%M UTC")
    wait = max(0, int(renews_at - now))
    hours, rest = divmod(wait, 3600)
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


# --- batches --------------------------------------------------------------------------
@dataclass(frozen=True)
class OutboxRow:
    """One queued report, as the outbox stores it."""

    seq: int
    report_id: bytes
    metric: str
    fingerprint: str
    bucket: int
    report: bytes


@dataclass(frozen=True)
class Batch:
    """A request body and, in wire order, the outbox rows it carries."""

    body: bytes
    seqs: tuple[int, ...]
    blocks: int
    report_ids: tuple[bytes, ...] = ()

    @property
    def keys(self) -> tuple[tuple[int, bytes], ...]:
        """(seq, report id) of every row, in wire order."""
        return tuple(zip(self.seqs, self.report_ids, strict=True))

    @property
    def n(self) -> int:
        return len(self.seqs)


def build_batch(rows: Iterable[OutboxRow]) -> Batch:
    """Group rows per (metric, fingerprint, bucket) into wire blocks, oldest group first.

    The answer's ``rejected[].index`` counts reports through the blocks in order, so the
    batch keeps the outbox sequence numbers in that same order.
    """
    groups: dict[tuple[str, str, int], list[OutboxRow]] = {}
    for row in rows:
        groups.setdefault((row.metric, row.fingerprint, row.bucket), []).append(row)
    blocks: list[Block] = []
    seqs: list[int] = []
    report_ids: list[bytes] = []
    for (metric, fp, bucket), members in groups.items():
        ids = b"".join(r.report_id for r in members)
        reports = b"".join(r.report for r in members)
        if len(ids) != ID_SIZE * len(members):
            raise ProtocolError(f"outbox row of metric {metric!r} has a malformed report id")
        blocks.append(Block(metric, fp, bucket, ids, reports))
        seqs.extend(r.seq for r in members)
        report_ids.extend(r.report_id for r in members)
    return Batch(encode_batch(blocks), tuple(seqs), len(blocks), tuple(report_ids))


# --- answers and retry decisions ------------------------------------------------------
@dataclass(frozen=True)
class HttpAnswer:
    """A response as the transports hand it to the core (header names lower-case)."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Rejection:
    seq: int
    error: str
    detail: str


@dataclass(frozen=True)
class Delivered:
    """The collector answered 200: these rows leave the outbox."""

    accepted: int
    duplicates: int
    rejected: tuple[Rejection, ...]
    keys: tuple[tuple[int, bytes], ...]  # (seq, report id) of every row answered


@dataclass(frozen=True)
class Retry:
    """Try again later (network error, 429, 5xx, a garbled answer)."""

    reason: str
    retry_after: float | None = None


@dataclass(frozen=True)
class TooLarge:
    """413: send fewer reports per batch."""

    reason: str


@dataclass(frozen=True)
class Fatal:
    """A 4xx that retrying will not fix (bad token, ...): keep the rows, raise."""

    error: CollectorRejected


Outcome = Delivered | Retry | TooLarge | Fatal


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, when.timestamp() - now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _error_of(answer: HttpAnswer) -> tuple[str, str]:
    try:
        data = loads_bounded(answer.body[:65536])
        if isinstance(data, dict):
            error, detail = data.get("error", "error"), data.get("detail", "")
            return shown(error, 100).strip("'"), shown(detail, 500).strip("'")
    except ProtocolError:
        pass
    text = answer.body[:200].decode("utf-8", "replace")
    return "error", text


def classify_failure(answer: HttpAnswer, now: float) -> Retry | TooLarge | Fatal:
    """What a non-200 answer means for the client."""
    status = answer.status
    error, detail = _error_of(answer)
    reason = f"collector answered {status} {error}" + (f": {detail}" if detail else "")
    if status == 429 or status == 408 or status >= 500:
        return Retry(reason, parse_retry_after(answer.headers.get("retry-after"), now))
    if status == 413:
        return TooLarge(reason)
    return Fatal(CollectorRejected(status, error, detail))


def _count(value: object, what: str, most: int) -> int:
    """``value`` if it is an integer (not a bool, not a float) in ``0..most``."""
    if type(value) is not int or not 0 <= value <= most:
        raise ValueError(f"{what} must be an integer in 0..{most}, got {shown(value, 40)}")
    return value


def interpret_batch_answer(batch: Batch, answer: HttpAnswer, now: float) -> Outcome:
    """Read the collector's answer to ``batch`` (``docs/protocol.md``, "The answer").

    Only a well-formed answer that accounts for every report sent (counts that are
    integers within the batch, each rejected index named once, with a string error)
    lets rows leave the outbox; anything else is retried later."""
    if answer.status != 200:
        return classify_failure(answer, now)
    n = batch.n
    try:
        data = loads_bounded(answer.body)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        accepted = _count(data.get("accepted"), "accepted", n)
        duplicates = _count(data.get("duplicates"), "duplicates", n)
        rejected_raw = data.get("rejected", [])
        if not isinstance(rejected_raw, list) or len(rejected_raw) > n:
            raise ValueError(f"rejected must be a list of at most {n} entries")
        rejected: list[Rejection] = []
        for item in rejected_raw:
            if not isinstance(item, dict):
                raise ValueError("a rejected entry is not an object")
            index = _count(item.get("index"), "rejected index", n - 1)
            error, detail = item.get("error"), item.get("detail", "")
            if not isinstance(error, str) or not isinstance(detail, str):
                raise ValueError("a rejected entry's error and detail must be strings")
            rejected.append(Rejection(batch.seqs[index], error[:100], detail[:500]))
    except ValueError as exc:  # ProtocolError included
        return Retry(f"collector's answer is not a valid batch answer: {exc}")
    if accepted + duplicates + len(rejected) != n or len({r.seq for r in rejected}) != len(
        rejected
    ):
        # Rows leave the outbox only when the answer accounts for every one of them.
        return Retry(
            f"collector's answer counts {accepted} accepted + {duplicates} duplicates + "
            f"{len(rejected)} rejected for a batch of {n}"
        )
    return Delivered(accepted, duplicates, tuple(rejected), batch.keys)


# --- definitions ----------------------------------------------------------------------
def parse_definitions(body: bytes | str) -> tuple[dict[str, MetricDefinition], list[str]]:
    """Definitions from a ``GET /v1/metrics`` body, and warnings for those skipped.

    A served definition is rebuilt with its resolved mechanism and must reproduce the
    served fingerprint; one that does not (say, a mechanism this client version lacks)
    is skipped with a warning rather than reported under the wrong version.
    """
    try:
        data = loads_bounded(body)
        items = data["metrics"]
        if not isinstance(items, list):
            raise TypeError("'metrics' must be a list")
    except (ValueError, TypeError, KeyError) as exc:
        raise ProtocolError(
            f"GET /v1/metrics answered something else than a metric list: {exc}"
        ) from None
    out: dict[str, MetricDefinition] = {}
    warnings: list[str] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            warnings.append(f"skipped a malformed definition: {item!r:.200}")
            continue
        name = item["name"]
        spec = dict(item)
        if isinstance(spec.get("resolved_mechanism"), str):
            spec["mechanism"] = spec["resolved_mechanism"]
        try:
            definition = MetricDefinition.from_dict(name, spec)
        except (LdpkitError, ImportError, KeyError, TypeError, ValueError) as exc:
            warnings.append(f"skipped metric {name!r}: {exc}")
            continue
        served = item.get("fingerprint")
        if served is not None and served != definition.fingerprint:
            warnings.append(
                f"skipped metric {name!r}: served fingerprint {served} but this client "
                f"computes {definition.fingerprint} (client and collector versions differ?)"
            )
            continue
        out[name] = definition
    return out, warnings
