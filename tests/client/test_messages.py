"""What the client says when it refuses: the real cause, in the documented exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpkit.client import CollectorRejected, OutboxFull, Reporter, RetryPolicy
from ldpkit.http import HttpAnswer

from .conftest import FakeClock, FakeCollector, answer, theme

URL = "http://collector.invalid:8787"
FAST = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002)


def test_one_call_larger_than_the_outbox_says_so(state_dir: Path, clock: FakeClock) -> None:
    """A simulate() call bigger than max_outbox is the caller's mistake, not the network's:
    the message names the call's size and what to do, and blames no collector."""
    fake = FakeCollector()
    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        metrics=[theme()],
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake,
        max_outbox=100,
    ) as r:
        with pytest.raises(OutboxFull) as info:
            r.simulate("theme", ["dark"] * 250)
        message = str(info.value)
        assert "250" in message and "max_outbox=100" in message
        assert "reachable" not in message
        assert "chunks" in message or "at most 100" in message
        assert (info.value.rows, info.value.limit) == (0, 100)
        assert r.pending == 0 and fake.posts == 0

        # A full outbox that flush() would empty says that, not "is it reachable?".
        assert r.simulate("theme", ["dark"] * 80) == 80
        with pytest.raises(OutboxFull) as info:
            r.simulate("theme", ["dark"] * 30)
        message = str(info.value)
        assert "80" in message and "flush()" in message
        assert "reachable" not in message


def test_full_outbox_after_failed_deliveries_points_at_the_collector(
    state_dir: Path, clock: FakeClock
) -> None:
    fake = FakeCollector(down=True)
    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        metrics=[theme(budget=10.0)],
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake,
        max_outbox=2,
        memoize=False,
    ) as r:
        r.report("theme", "dark")
        r.report("theme", "dark")
        with pytest.raises(Exception):  # noqa: B017 - the collector is down
            r.flush()
        with pytest.raises(OutboxFull) as info:
            r.report("theme", "dark")
        message = str(info.value)
        assert "could not be delivered" in message and URL in message


class RefusingCollector(FakeCollector):
    """Answers 401 to every request, including GET /v1/metrics."""

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        self.requests.append((method, path, dict(headers)))
        return answer(401, "unauthorized")


def test_401_while_fetching_definitions_is_collector_rejected(
    state_dir: Path, clock: FakeClock
) -> None:
    """docs/client.md: CollectorRejected for 401/403; a refused token is not an outage."""
    with Reporter(
        URL,
        token="wrong",
        state_dir=state_dir,
        clock=clock,
        background=False,
        retry=FAST,
        transport=RefusingCollector(),
    ) as r:
        with pytest.raises(CollectorRejected) as info:
            r.report("theme", "dark")
        assert info.value.status == 401
        assert "definitions" in str(info.value) or "/v1/metrics" in str(info.value)


def test_budget_prints_for_a_person(state_dir: Path, clock: FakeClock) -> None:
    """print(r.budget()) shows epsilon spent/left per metric and when it renews, in UTC."""
    from .conftest import minutes

    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        metrics=[theme(), minutes(budget=2.0)],
        total_budget=3.0,
        clock=clock,
        background=False,
        transport=FakeCollector(),
    ) as r:
        r.report("theme", "dark")
        text = str(r.budget())
    lines = text.splitlines()
    assert "epsilon" in lines[0]
    theme_line = next(line for line in lines if line.split()[0] == "theme")
    assert "spent 1 of 1 per day" in theme_line and "0 left" in theme_line
    assert "renews 2025-11-22 00:00 UTC" in theme_line
    minutes_line = next(line for line in lines if line.split()[0] == "session_minutes")
    assert "spent 0 of 2 per day" in minutes_line and "2 left" in minutes_line
    total = next(line for line in lines if line.split()[0] == "total")
    assert "spent 1 of 3 per day" in total
    assert "period_start" not in text and "1763" not in text  # no raw unix seconds
