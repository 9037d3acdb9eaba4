"""A device token carries one device's reports (issue 26): the client's batches stay within
``MetricDefinition.device_cap`` by construction, ``simulate`` asks for a relay token, and a
batch the collector refuses as over the cap is sent again within it, nothing lost."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from ldpkit.client import BudgetExceeded, CollectorRejected, Reporter, RetryPolicy
from ldpkit.client.flush import _chunks
from ldpkit.client.protocol import OutboxRow
from ldpkit.errors import ParameterError
from ldpkit.http import HttpAnswer
from ldpkit.metrics import MetricDefinition
from ldpkit.wire import decode

from .conftest import FakeClock, FakeCollector, theme
from .live import INGEST, LiveCollector

URL = "http://collector.invalid:8787"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002)
COLORS = ["red", "green", "blue"]
DEFINITIONS = [
    MetricDefinition.categorical("day", COLORS, epsilon=1.0, mechanism="grr"),  # cap 1
    MetricDefinition.categorical(  # 4 fresh a day, an hour bucket: cap 4
        "hourly", COLORS, epsilon=0.5, budget=2.0, mechanism="grr", bucket="hour"
    ),
    MetricDefinition.categorical(  # 3 a day, 7 days a bucket: cap 21
        "weekly", COLORS, epsilon=1.0, budget=3.0, mechanism="grr", bucket="week"
    ),
    MetricDefinition.numeric(  # 2 an hour, 24 hours a bucket: cap 48
        "minutes", (0.0, 60.0), epsilon=0.5, budget=1.0, mechanism="duchi", budget_period="hour"
    ),
]


@dataclass
class Recording(FakeCollector):
    """The fake collector, keeping every batch's reports per (version, bucket)."""

    batch_blocks: list[dict[tuple[str, int], int]] = field(default_factory=list)

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        if method == "POST" and body is not None and not self.down:
            counts: dict[tuple[str, int], int] = {}
            for block in decode(body).blocks:
                key = (block.fingerprint, block.bucket)
                counts[key] = counts.get(key, 0) + block.n
            self.batch_blocks.append(counts)
        return super().request(method, path, body, headers)


def test_the_caps_are_the_ledgers() -> None:
    assert [d.device_cap for d in DEFINITIONS] == [1, 4, 21, 48]


@pytest.mark.parametrize("memoize", [True, False])
def test_a_devices_batches_stay_within_the_cap(
    state_dir: Path, clock: FakeClock, memoize: bool
) -> None:
    """A device reports at random for weeks (repeated values, budgets running out, batches
    of any size): no batch, and no bucket over all batches, exceeds its version's cap."""
    rng = np.random.default_rng(26 + memoize)
    fake = Recording(definitions=DEFINITIONS, role="device")
    caps = {d.fingerprint: d.device_cap for d in DEFINITIONS}
    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake,
        memoize=memoize,
        batch_size=int(rng.integers(1, 40)),
    ) as r:
        refused = 0
        for step in range(2500):
            d = DEFINITIONS[int(rng.integers(len(DEFINITIONS)))]
            value = (
                float(rng.integers(0, 3) * 20)
                if d.name == "minutes"
                else COLORS[int(rng.integers(3))]
            )
            try:
                r.report(d.name, value)
            except BudgetExceeded:
                refused += 1
            clock.advance(float(rng.exponential(900.0)))
            if step % 97 == 0:
                r.flush()
        r.flush()
        assert r._state.token_role == "device" and r.pending == 0
    assert refused > 100 and len(fake.batch_blocks) > 20  # budgets ran out, batches were cut
    total: dict[tuple[str, int], int] = {}
    for counts in fake.batch_blocks:
        for (fp, bucket), n in counts.items():
            assert n <= caps[fp]
            total[fp, bucket] = total.get((fp, bucket), 0) + n
    assert all(n <= caps[fp] for (fp, _), n in total.items())
    assert max(n - caps[fp] for (fp, _), n in total.items()) == 0  # the caps are reached


def test_batches_are_cut_within_the_caps() -> None:
    rows = [OutboxRow(i, b"", "m", "f" if i % 3 else "g", 0, bytes(4)) for i in range(30)]
    chunks = _chunks(rows, 7, 0, 10**6, {"f": 2})
    assert sorted(r.seq for c in chunks for r in c) == list(range(30))
    for chunk in chunks:
        assert len(chunk) <= 7 and sum(r.fingerprint == "f" for r in chunk) <= 2
    assert _chunks(rows, 7, 0, 10**6, {}) == [rows[i : i + 7] for i in range(0, 30, 7)]


def over_cap(fingerprint: str, cap: int) -> HttpAnswer:
    body = {"error": "over_device_cap", "detail": "d", "version": fingerprint, "cap": cap}
    return HttpAnswer(400, {}, json.dumps(body).encode())


def test_a_batch_refused_over_the_cap_goes_again_within_it(
    state_dir: Path, clock: FakeClock
) -> None:
    """The collector's cap is lower than the definition the device knew (a budget lowered
    since): nothing was stored, so the reports go again, as many batches as needed."""
    d = theme(budget=3.0)
    fake = Recording(script=[over_cap(d.fingerprint, 1)])
    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        metrics=[d],
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake,
        memoize=False,
    ) as r:
        for _ in range(3):
            r.report("theme", "dark")
        result = r.flush()
        assert (result.sent, result.remaining) == (3, 0)
    assert [sum(c.values()) for c in fake.batch_blocks] == [3, 1, 1, 1]
    assert fake.count("theme") == 3
    # Within the cap the collector stated, a refusal again is no reason to cut further.
    fake = Recording(script=[over_cap(d.fingerprint, 1), over_cap(d.fingerprint, 1)])
    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        metrics=[d],
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake,
        memoize=False,
    ) as r:
        clock.advance(86400)
        r.report("theme", "dark")
        r.report("theme", "light")
        with pytest.raises(CollectorRejected, match="over_device_cap"):
            r.flush()
        assert r.pending == 2  # kept


def test_simulate_with_a_device_token_says_a_relay_token_is_needed(
    state_dir: Path, clock: FakeClock
) -> None:
    fake = FakeCollector(role="device")
    with Reporter(
        URL,
        token="t",
        state_dir=state_dir,
        metrics=[theme()],
        clock=clock,
        background=False,
        retry=FAST,
        transport=fake,
    ) as r:
        with pytest.raises(ParameterError, match="relay token"):
            r.simulate("theme", ["dark"] * 10)
        with pytest.raises(ParameterError, match="relay token"):
            r.simulate("theme", ["dark"])
        assert r.pending == 0
        assert [p for m, p, _ in fake.requests if m == "GET"] == ["/v1/metrics"]  # asked once


def test_a_device_token_against_a_real_collector(tmp_path: Path) -> None:
    metrics = {"color": {"categories": COLORS, "epsilon": 1.0, "mechanism": "grr"}}
    with LiveCollector(tmp_path, metrics) as live:
        with Reporter(live.url, token=INGEST, state_dir=tmp_path / "device", background=False) as r:
            r.refresh_definitions()
            assert r._state.token_role == "device"
            with pytest.raises(ParameterError, match="relay token"):
                r.simulate("color", ["red"] * 5)
            r.report("color", "red")
            assert r.flush().sent == 1
        assert live.n("color") == 1
