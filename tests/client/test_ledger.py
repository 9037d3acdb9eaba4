"""The budget ledger holds against clock changes, definition changes and a lost state
database (issue 11, points 13 and 14), and reports refused as ``unknown_version`` are
kept and retried (point 11). The real Reporter, a fake clock, a scripted collector.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ldpkit.client import BudgetExceeded, Reporter, RetryPolicy
from ldpkit.client.flush import UNKNOWN_VERSION_GRACE

from .conftest import FakeClock, FakeCollector, theme

URL = "http://collector.invalid:8787"
FAST = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002)
DAY, WEEK = 86400, 7 * 86400


def make(
    state_dir: Path, clock: FakeClock, fake: FakeCollector | None = None, **kw: object
) -> Reporter:
    kw.setdefault("metrics", [theme()])
    return Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake or FakeCollector(),
        **kw,  # type: ignore[arg-type]
    )


# --- 13. clock and definition changes ----------------------------------------------------
@pytest.mark.parametrize("back", [60, DAY, 3 * DAY, 400 * DAY])
def test_setting_the_clock_back_reopens_no_window(
    state_dir: Path, clock: FakeClock, back: int
) -> None:
    """The day's budget is spent; the clock set back (an hour, a day, a year) used to give
    a fresh window, its rows having been pruned or never written. The ledger's time never
    goes back: the spent window stays spent until the clock passes its end again."""
    fake = FakeCollector()
    with make(state_dir, clock, fake, memoize=False) as r:
        r.report("theme", "dark")
        r.flush()
        with pytest.raises(BudgetExceeded):
            r.report("theme", "dark")
    clock.now -= back
    with make(state_dir, clock, fake, memoize=False) as r:  # a restart prunes old rows
        with pytest.raises(BudgetExceeded):
            r.report("theme", "light")
        assert r.budget()["theme"].left == 0
    clock.now += back + DAY  # the next day, by the clock that was right
    with make(state_dir, clock, fake, memoize=False) as r:
        assert r.report("theme", "light").epsilon_spent == 1.0


def test_a_memoized_report_is_sent_once_per_bucket_whatever_the_clock(
    state_dir: Path, clock: FakeClock
) -> None:
    """Weekly memo window, daily buckets: the same value reported on day 0, then (clock
    ahead) day 2, then (clock back) day 0 and day 1 again: each bucket gets the device
    once. The memo used to remember only the latest bucket, so going back re-queued."""
    fake = FakeCollector()
    weekly = theme(budget_period="week")
    days = [0, 2, 0, 1, 0, 2, 1]
    with make(state_dir, clock, fake, metrics=[weekly]) as r:
        start = clock.now
        for day in days:
            clock.now = start + day * DAY
            r.report("theme", "dark")
            r.flush()
    per_bucket: dict[int, int] = {}
    for _, _, bucket, _ in fake.seen.values():
        per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
    assert sorted(per_bucket.values()) == [1, 1, 1], per_bucket
    assert len({report for *_, report in fake.seen.values()}) == 1  # the same report


def test_widening_the_budget_period_counts_what_was_spent(
    state_dir: Path, clock: FakeClock
) -> None:
    """1 per day, then the definition changes to 1 per week: what was spent earlier this
    week counts (it used to be forgotten: 2 epsilon in one week). Narrowing (week to day)
    counts a week's spending against today."""
    fake = FakeCollector()
    with make(state_dir, clock, fake, metrics=[theme(budget_period="day")]) as r:
        r.report("theme", "dark")
        r.flush()
    clock.advance(DAY)  # 2025-11-22, a Saturday: the same week (weeks start on Thursday)
    with make(state_dir, clock, fake, metrics=[theme(budget_period="week")]) as r:
        with pytest.raises(BudgetExceeded):
            r.report("theme", "light")
        status = r.budget()["theme"]
        assert status.spent == 1.0 and status.left == 0.0
    clock.advance(WEEK)  # the next week: one fresh report
    with make(state_dir, clock, fake, metrics=[theme(budget_period="week")]) as r:
        r.report("theme", "light")
        r.flush()
    clock.advance(DAY)
    with (
        make(state_dir, clock, fake, metrics=[theme(budget_period="day")]) as r,
        pytest.raises(BudgetExceeded),  # this week's report counts against today
    ):
        r.report("theme", "system")


def test_the_total_budget_period_changing_counts_too(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    metrics = [theme(budget=5.0)]
    with make(state_dir, clock, fake, metrics=metrics, total_budget=1.0) as r:
        r.report("theme", "dark")
        r.flush()
    clock.advance(DAY)
    with make(
        state_dir, clock, fake, metrics=metrics, total_budget=1.0, total_budget_period="week"
    ) as r:
        with pytest.raises(BudgetExceeded) as info:
            r.report("theme", "light")
        assert info.value.scope == "total"


# --- 14. a lost or corrupt state database ------------------------------------------------
def _lose(state_dir: Path, how: str) -> None:
    db = state_dir / "client.sqlite3"
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if how == "missing":
        db.unlink()
    elif how == "empty":
        db.write_bytes(b"")
    else:
        db.write_bytes(os.urandom(4096))


@pytest.mark.parametrize("how", ["missing", "empty", "corrupt"])
def test_a_lost_ledger_fails_closed_until_the_next_period(
    state_dir: Path, clock: FakeClock, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeCollector()
    with make(state_dir, clock, fake, metrics=[theme(budget=2.0)], memoize=False) as r:
        r.report("theme", "dark")
        r.flush()
        r.report("theme", "light")  # queued, not delivered
    _lose(state_dir, how)
    caplog.set_level(logging.WARNING, logger="ldpkit.client")
    with make(state_dir, clock, fake, metrics=[theme(budget=2.0)], memoize=False) as r:
        status = r.budget()
        assert status.ledger_lost is not None and status.ledger_lost.reason == how
        assert status["theme"].left == 0.0 and status["theme"].spent == 2.0
        with pytest.raises(BudgetExceeded, match="lost"):
            r.report("theme", "dark")
        assert r.pending == 0
    text = caplog.text
    assert "ledger" in text and "spent" in text and "outbox" in text
    if how == "corrupt":
        assert status.ledger_lost.moved_to is not None
        assert Path(status.ledger_lost.moved_to).exists()
    with (
        make(state_dir, clock, fake, metrics=[theme(budget=2.0)], memoize=False) as r,
        pytest.raises(BudgetExceeded),  # a restart in the same period: still closed
    ):
        r.report("theme", "dark")
    clock.advance(DAY)
    with make(state_dir, clock, fake, metrics=[theme(budget=2.0)], memoize=False) as r:
        assert r.report("theme", "dark").epsilon_spent == 1.0  # the next period
        assert r.budget()["theme"].left == 1.0


def test_a_first_start_is_not_a_loss(state_dir: Path, clock: FakeClock) -> None:
    with make(state_dir, clock) as r:
        assert r.budget().ledger_lost is None
        r.report("theme", "dark")
    with make(state_dir, clock) as r:
        assert r.budget().ledger_lost is None


# --- 11. unknown_version: kept and retried -----------------------------------------------
def test_reports_refused_as_unknown_version_are_kept_and_retried(
    state_dir: Path, clock: FakeClock
) -> None:
    """A replica that has not seen a version yet refuses it as unknown_version: the
    client used to drop those reports for good. It keeps them and sends them again at
    the next flush, for UNKNOWN_VERSION_GRACE; then drops them (a version that never
    shows up)."""
    refusing = [True]
    fake = FakeCollector(reject=lambda metric, report: "unknown_version" if refusing[0] else None)
    with make(state_dir, clock, fake, metrics=[theme(budget=5.0)], memoize=False) as r:
        r.report("theme", "dark")
        result = r.flush()
        assert result.deferred == 1 and result.rejected == 0 and r.pending == 1
        refusing[0] = False
        result = r.flush()
        assert result.sent == 1 and r.pending == 0
        refusing[0] = True
        r.report("theme", "light")
        r.flush()
        clock.advance(UNKNOWN_VERSION_GRACE - 1)
        assert r.flush().deferred == 1 and r.pending == 1
        clock.advance(2)
        result = r.flush()
        assert result.rejected == 1 and r.pending == 0  # given up on


def test_reports_of_a_retired_metric_are_dropped(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(reject=lambda metric, report: "retired_metric")
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        assert r.flush().rejected == 1 and r.pending == 0
