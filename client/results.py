"""What the app gets back: report receipts, flush results, the budget's status, and
what was lost with a state directory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..metrics import Period


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
class Refused:
    """One report the collector refused in a flush: its metric, the error code and detail."""

    metric: str
    error: str
    detail: str


@dataclass(frozen=True)
class FlushResult:
    """What a flush delivered: ``sent`` reports newly accepted by the collector (``held``
    of them held by its screening for an admin's review: delivered all the same),
    ``duplicates`` it already had (retries of a delivered report), ``rejected`` it
    refused for good (dropped), and the reports ``remaining`` in the outbox after it, of
    which ``deferred`` were refused as ``unknown_version`` (a replica that has not seen
    their version yet) and are kept for the next flush. ``refusals``: every refusal,
    dropped or kept, in the order answered."""

    sent: int = 0
    duplicates: int = 0
    rejected: int = 0
    remaining: int = 0
    deferred: int = 0
    held: int = 0
    refusals: tuple[Refused, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the JS client's ``flush()`` answer in snake_case (docs/client.md)."""
        return {
            "sent": self.sent,
            "duplicates": self.duplicates,
            "held": self.held,
            "rejected": self.rejected,
            "remaining": self.remaining,
            "deferred": self.deferred,
            "refusals": [
                {"metric": r.metric, "error": r.error, "detail": r.detail} for r in self.refusals
            ],
        }

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
            self.held + other.held,
            self.refusals + other.refusals,
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
    delta_spent: float = 0.0
    """Delta spent in the period (reports of (epsilon, delta) mechanisms, basic
    composition): each such report spends the metric's delta beside its epsilon."""
    delta_budget: float = 0.0
    """The delta the epsilon budget allows in a period: (budget / epsilon) reports of
    delta each (0 for pure epsilon-LDP metrics)."""
    epsilon: float = 0.0
    """The epsilon one report spends."""
    delta: float = 0.0
    """The delta one report spends (0 for pure epsilon-LDP metrics)."""

    @property
    def renews_at_datetime(self) -> datetime:
        return utc(self.renews_at)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, the JS client's ``MetricBudget`` in snake_case (docs/client.md)."""
        return {
            "metric": self.metric,
            "epsilon": self.epsilon,
            "budget": self.budget,
            "spent": self.spent,
            "left": self.left,
            "period": self.period.value,
            "period_start": self.period_start,
            "renews_at": self.renews_at,
            "delta": self.delta,
            "delta_spent": self.delta_spent,
            "delta_budget": self.delta_budget,
        }


@dataclass(frozen=True)
class TotalBudget:
    """The total budget across metrics in its current period (sequential composition)."""

    budget: float
    spent: float
    left: float
    period: Period
    period_start: int
    renews_at: int
    delta_spent: float = 0.0
    """Delta spent in the period across metrics (basic composition)."""

    @property
    def renews_at_datetime(self) -> datetime:
        return utc(self.renews_at)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, the JS client's ``total`` in snake_case (docs/client.md)."""
        return {
            "budget": self.budget,
            "spent": self.spent,
            "left": self.left,
            "period": self.period.value,
            "period_start": self.period_start,
            "renews_at": self.renews_at,
            "delta_spent": self.delta_spent,
        }


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

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the JS client's ``budget()`` in snake_case (docs/client.md), with
        ``ledger_lost`` the loss's message (or None)."""
        return {
            "metrics": {name: b.to_dict() for name, b in self.metrics.items()},
            "total": None if self.total is None else self.total.to_dict(),
            "ledger_lost": None if self.ledger_lost is None else self.ledger_lost.message,
        }

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
                + (f"; delta spent {b.delta_spent:g}" if b.delta_spent else "")
            )
        return "\n".join(lines)
