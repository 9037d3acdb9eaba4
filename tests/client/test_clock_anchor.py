"""Device time anchored to the collector's (issue 29, part 4): a device whose clock runs
400 days ahead, reports, and comes back puts no second report of one metric into a real
bucket of a real collector beyond its budget, fresh or memoized."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldpkit.client import BudgetExceeded, Reporter
from ldpkit.metrics import MetricDefinition

from .live import INGEST, LiveCollector

DAY = 86400
AHEAD = 400 * DAY
COLORS = ["red", "green", "blue"]
SPEC = {"categories": COLORS, "epsilon": 1.0, "mechanism": "grr"}  # 1 a day, day buckets


class Clock:
    """The device's wall clock: real time plus an error the test sets."""

    def __init__(self) -> None:
        self.error = 0.0

    def __call__(self) -> float:
        return time.time() + self.error


def reporter(url: str, state_dir: Path, clock: Clock, *, static: bool, memoize: bool) -> Reporter:
    metrics = [MetricDefinition.from_dict("color", SPEC)] if static else None
    return Reporter(
        url,
        token=INGEST,
        state_dir=state_dir,
        metrics=metrics,
        clock=clock,
        memoize=memoize,
        background=False,
    )


@pytest.mark.parametrize("memoize", [False, True])
def test_a_clock_400_days_ahead_and_back_reports_once_per_real_day(
    tmp_path: Path, memoize: bool
) -> None:
    with LiveCollector(tmp_path, {"color": SPEC}) as live:
        device, clock = tmp_path / "device", Clock()
        with reporter(live.url, device, clock, static=False, memoize=memoize) as r:
            r.report("color", "red")
            assert r.flush().sent == 1
        # The clock runs ahead. A process that has heard from the collector keeps its
        # time: today's budget is spent.
        clock.error = AHEAD
        with reporter(live.url, device, clock, static=False, memoize=memoize) as r:
            r.refresh_definitions()
            with pytest.raises(BudgetExceeded) if not memoize else nothing_new(r):
                r.report("color", "red")
            r.flush()
        # One that has not (definitions given in code, offline) goes by the device's
        # clock: a report 400 days ahead, which the collector refuses when it arrives.
        with reporter(live.url, device, clock, static=True, memoize=memoize) as r:
            r.report("color", "red")
            r.flush()
            r._state.prune()  # what the background flusher does hourly
        # The clock comes back: once the collector's time is known, today is spent, and
        # a memoized value is not queued again for today's bucket.
        clock.error = 0.0
        for static in (False, True):
            with reporter(live.url, device, clock, static=static, memoize=memoize) as r:
                r.refresh_definitions() if not static else r.flush()
                with pytest.raises(BudgetExceeded) if not memoize else nothing_new(r):
                    r.report("color", "red")
                r.flush()
        assert live.n("color") == 1


@contextlib.contextmanager
def nothing_new(r: Reporter) -> Iterator[None]:
    """The memoized value is reported again without a new report queued."""
    before = r.pending
    yield
    assert r.pending == before


async def test_the_async_reporter_anchors_to_the_collector_too(tmp_path: Path) -> None:
    """A device clock 400 days ahead: once the collector answered, reports go into the
    collector's day (today's budget, today's bucket), not the device's."""
    from ldpkit.client import AsyncReporter

    with LiveCollector(tmp_path, {"color": SPEC}) as live:
        clock = Clock()
        clock.error = AHEAD
        async with AsyncReporter(
            live.url, token=INGEST, state_dir=tmp_path / "device", clock=clock, background=False
        ) as r:
            await r.refresh_definitions()
            before = time.time() // DAY * DAY
            receipt = await r.report("color", "red")
            assert receipt.bucket in (before, time.time() // DAY * DAY)  # the collector's day
            with pytest.raises(BudgetExceeded):
                await r.report("color", "green")
            assert (await r.flush()).sent == 1
            assert r.budget()["color"].left == 0
        assert live.n("color") == 1


def test_the_collector_time_seen_with_a_batch_answer_alone_guards_the_prune(
    tmp_path: Path,
) -> None:
    """The device's only contact was a batch's answer (definitions given in code); then,
    offline, its clock runs 400 days ahead and a new process prunes and reports: the rows
    of the real day stay, and once back the day is still spent."""
    with LiveCollector(tmp_path, {"color": SPEC}) as live:
        device, clock = tmp_path / "device", Clock()
        with reporter(live.url, device, clock, static=True, memoize=False) as r:
            r.report("color", "red")  # offline so far: the device's (right) clock
            assert r.flush().sent == 1  # the answer carries the collector's time
        clock.error = AHEAD
        with reporter("http://127.0.0.1:9", device, clock, static=True, memoize=False) as r:
            r._state.prune()  # offline, 400 days ahead: what the background does hourly
            r.report("color", "green")  # a window 400 days ahead, never delivered
        clock.error = 0.0
        with reporter(live.url, device, clock, static=False, memoize=False) as r:
            r.refresh_definitions()
            with pytest.raises(BudgetExceeded):
                r.report("color", "blue")
        assert live.n("color") == 1


def test_the_reporters_monotonic_clock_is_an_option(tmp_path: Path) -> None:
    """``monotonic=`` (public, as in the JS client): between answers a report's time is the
    collector's ``Date`` plus that clock's elapsed time, whatever the wall clock says."""
    from email.utils import formatdate

    from ldpkit.http import HttpAnswer

    from .conftest import FakeClock, FakeCollector

    served = 1_763_683_200 + 3600  # 2025-11-21 01:00 UTC, the collector's time
    definition = MetricDefinition.from_dict("color", SPEC)

    class Dated(FakeCollector):
        def request(
            self, method: str, path: str, body: bytes | None, headers: dict[str, str]
        ) -> HttpAnswer:
            got = super().request(method, path, body, headers)
            return HttpAnswer(
                got.status, {**got.headers, "date": formatdate(served, usegmt=True)}, got.body
            )

    wall, ticks = FakeClock(served + AHEAD), FakeClock(1000.0)
    fake = Dated(definitions=[definition])
    with Reporter(
        "http://collector.test",
        token="t",
        state_dir=tmp_path / "d",
        clock=wall,
        monotonic=ticks,
        background=False,
        transport=fake,
    ) as r:
        r.refresh_definitions()
        assert r.report("color", "red").bucket == served // DAY * DAY
        with pytest.raises(BudgetExceeded):
            r.report("color", "green")
        ticks.advance(DAY)  # a day on the monotonic clock: the next real day's budget
        assert r.report("color", "blue").bucket == served // DAY * DAY + DAY
    with pytest.raises(Exception, match="monotonic"):
        Reporter("http://collector.test", state_dir=tmp_path / "e", monotonic=3.0)
