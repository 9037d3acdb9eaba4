"""The client against a real collector (``create_app``, SQLite) on a loopback port."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.client import (
    AsyncReporter,
    CollectorUnavailable,
    MetricDefinition,
    Reporter,
    RetryPolicy,
    Timeout,
)
from ldpkit.client.protocol import OutboxRow, build_batch
from ldpkit.client.sync import HttpTransport
from ldpkit.http import HttpAnswer, NetworkError

from ..readiness import async_wait_until, wait_until
from .live import RELAY, LiveCollector

THEME = ["light", "dark", "system", "sepia", "solarized", "nord", "dracula", "mono"]
TRUTH = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
METRICS: dict[str, dict[str, Any]] = {
    "theme": {"categories": THEME, "epsilon": 1.0, "mechanism": "auto"},
    "minutes": {"bounds": [0.0, 120.0], "epsilon": 1.0, "mechanism": "auto"},
    "clicks": {"bounds": [0.0, 100.0], "epsilon": 0.5, "mechanism": "duchi", "budget": 50.0},
    "tick": {"categories": ["a", "b", "c"], "epsilon": 0.1, "mechanism": "grr", "budget": 50.0},
}
FAST = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.05)
FAST_TIMEOUT = Timeout(5.0)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCollector]:
    collector = LiveCollector(tmp_path / "collector", METRICS)
    (tmp_path / "collector").mkdir()
    collector.start()
    try:
        yield collector
    finally:
        collector.close()


def reporter(live: LiveCollector, state_dir: Path, **kw: Any) -> Reporter:
    kw.setdefault("background", False)
    kw.setdefault("retry", FAST)
    return Reporter(live.url, token=RELAY, state_dir=state_dir, **kw)


def definition(name: str) -> MetricDefinition:
    return MetricDefinition.from_dict(name, METRICS[name])


def test_definitions_come_from_the_collector(live: LiveCollector, state_dir: Path) -> None:
    with reporter(live, state_dir) as r:
        r.refresh_definitions()
        assert sorted(r.definitions) == sorted(METRICS)
        served = r.definitions["theme"]
        assert served.fingerprint == definition("theme").fingerprint
        assert served.resolved_mechanism == definition("theme").resolved_mechanism
        r.refresh_definitions()  # answered 304 from the ETag; the cache stays


def _wait_for(condition: Any) -> None:
    wait_until(condition, "the background thread's work")


def test_definitions_are_fetched_at_start_so_reports_work_offline_later(
    live: LiveCollector, state_dir: Path
) -> None:
    """Issue 14 point 12: start online, report nothing, go offline, then report."""
    with reporter(live, state_dir, background=True, flush_interval=3600.0) as r:
        _wait_for(lambda: "theme" in r.definitions)  # fetched by the background thread
        live.stop()
        receipt = r.report("theme", "dark")
        assert receipt.queued and r.pending == 1
        live.start()
    assert live.n("theme") == 1  # close() delivered it once the collector was back


async def test_async_definitions_are_fetched_at_start(live: LiveCollector, state_dir: Path) -> None:
    async with AsyncReporter(
        live.url, token=RELAY, state_dir=state_dir, retry=FAST, flush_interval=3600.0
    ) as r:
        await async_wait_until(lambda: "theme" in r.definitions, "the definitions fetched")
        live.stop()
        receipt = await r.report("theme", "dark")
        assert receipt.queued and r.pending == 1


def test_collector_down_then_up_delivered_exactly_once(
    live: LiveCollector, state_dir: Path
) -> None:
    with reporter(live, state_dir) as r:
        r.refresh_definitions()  # cached: the app works offline from now on
        live.stop()
        r.report("theme", "dark")
        r.report("minutes", 42.5)
        for v in range(30):
            r.report("clicks", float(v))
        assert r.simulate("tick", ["a", "b"] * 50) == 100
        with pytest.raises(CollectorUnavailable, match="132 report"):
            r.flush()
        assert r.pending == 132
        live.start()
        result = r.flush()
        assert (result.sent, result.duplicates, result.rejected, result.remaining) == (132, 0, 0, 0)
        assert r.flush().sent == 0
    assert [live.n(m) for m in ("theme", "minutes", "clicks", "tick")] == [1, 1, 30, 100]


def test_background_flush_delivers_once_the_collector_is_back(
    live: LiveCollector, state_dir: Path
) -> None:
    r = reporter(live, state_dir, background=True, flush_interval=0.1, batch_size=10)
    try:
        r.refresh_definitions()
        live.stop()
        for v in range(25):
            r.report("clicks", float(v))
        time.sleep(0.5)  # the background thread fails and backs off; nothing is lost
        assert r.pending == 25
        live.start()
        wait_until(lambda: r.pending == 0, "the outbox delivered once the collector is back")
    finally:
        r.close()
    assert live.n("clicks") == 25


class Crash(BaseException):
    """The app dies (not an exception the reporter handles)."""


class CrashingTransport(HttpTransport):
    """Delivers POSTs to the real collector, and dies after the answer of POST ``at``."""

    def __init__(self, url: str, at: int) -> None:
        super().__init__(url, FAST_TIMEOUT)
        self.at = at
        self.posts = 0

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        answer = super().request(method, path, body, headers)
        if method == "POST":
            self.posts += 1
            if self.posts == self.at:
                raise Crash("killed after the collector stored the batch")
        return answer


def test_restart_half_way_loses_nothing_and_sends_nothing_twice(
    live: LiveCollector, state_dir: Path
) -> None:
    # Two reporters open at once stand for two processes (the first one's never closed):
    # they share the state_dir.
    a = reporter(
        live,
        state_dir,
        batch_size=10,
        transport=CrashingTransport(live.url, at=3),
        exclusive_state=False,
    )
    a.refresh_definitions()
    for v in range(20):
        a.report("clicks", float(v))
    a.simulate("tick", ["c"] * 95)
    with pytest.raises(Crash):
        a.flush()  # batches 1 and 2 acknowledged; batch 3 stored, its answer lost
    # the app is gone: no close(). A new process opens the same state_dir.
    with reporter(live, state_dir, batch_size=10, exclusive_state=False) as b:
        assert b.pending == 115 - 20
        assert b.budget()["clicks"].spent == pytest.approx(20 * 0.5)  # the ledger survived
        result = b.flush()
        assert (result.sent, result.duplicates, result.remaining) == (85, 10, 0)
    assert live.n("clicks") + live.n("tick") == 115


@pytest.mark.parametrize("exclusive", [False, True], ids=["shared", "exclusive_state"])
def test_hard_kill_after_report_returned_keeps_the_report(
    live: LiveCollector, state_dir: Path, exclusive: bool
) -> None:
    """report() returned => the report is in the WAL, even if the process dies at once
    (exclusive_state too: its WAL index lived in the dead process's memory only)."""
    script = textwrap.dedent(
        f"""
        import os
        from ldpkit.client import MetricDefinition, Reporter
        spec = {METRICS["clicks"]!r}
        r = Reporter("http://127.0.0.1:9", state_dir={str(state_dir)!r}, background=False,
                     metrics=[MetricDefinition.from_dict("clicks", spec)],
                     exclusive_state={exclusive!r})
        for v in range(40):
            r.report("clicks", float(v))
        os._exit(0)  # no close, no flush, no atexit
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    with reporter(live, state_dir, metrics=[definition("clicks")]) as r:
        assert r.pending == 40
        assert r.budget()["clicks"].spent == pytest.approx(20.0)
        assert r.flush().sent == 40
    assert live.n("clicks") == 40


def test_reports_of_a_version_the_collector_does_not_know_are_kept(
    live: LiveCollector, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """unknown_version: a replica may not know a version defined a moment ago elsewhere,
    so the report is kept and sent again (for UNKNOWN_VERSION_GRACE), not dropped."""
    stale = MetricDefinition.from_dict("tick", {**METRICS["tick"], "epsilon": 0.2})
    with reporter(live, state_dir, metrics=[stale, definition("clicks")]) as r:
        r.report("tick", "a")
        r.report("clicks", 3.0)
        with caplog.at_level(logging.INFO, logger="ldpkit.client"):
            result = r.flush()
        assert (result.sent, result.rejected, result.deferred, result.remaining) == (1, 0, 1, 1)
    assert "unknown_version" in caplog.text
    assert live.n("clicks") == 1 and live.n("tick") == 0


def test_eight_threads_report_concurrently_while_flushing(
    live: LiveCollector, state_dir: Path
) -> None:
    per_thread = 50
    r = reporter(
        live, state_dir, background=True, flush_interval=0.05, batch_size=37, memoize=False
    )
    errors: list[BaseException] = []
    try:
        r.refresh_definitions()
        barrier = threading.Barrier(8)

        def work(k: int) -> None:
            try:
                barrier.wait()
                for i in range(per_thread):
                    r.report("tick", "abc"[(i + k) % 3])
            except BaseException as exc:  # pragma: no cover - asserted below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        r.flush()
        assert not errors and r.pending == 0
        assert r.budget()["tick"].spent == pytest.approx(8 * per_thread * 0.1)
    finally:
        r.close()
    assert live.n("tick") == 8 * per_thread


async def test_async_reporter_against_the_collector(live: LiveCollector, state_dir: Path) -> None:
    async with AsyncReporter(live.url, token=RELAY, state_dir=state_dir, retry=FAST) as r:
        await r.report("theme", "sepia")
        await r.report("minutes", 12.0)
        assert await r.simulate("tick", ["b"] * 40) == 40
        result = await r.flush()
        assert (result.sent, result.remaining) == (42, 0)
    assert (live.n("theme"), live.n("minutes"), live.n("tick")) == (1, 1, 40)


def test_estimates_from_20000_simulated_users_cover_the_truth(
    live: LiveCollector, state_dir: Path
) -> None:
    """20,000 users with a known distribution report through the client (each a fresh
    device, vectorized), the real collector estimates: 99% intervals cover the truth."""
    users = 20_000
    rng = np.random.default_rng(20251121)
    themes = rng.choice(len(THEME), size=users, p=TRUTH)
    minutes = np.clip(rng.gamma(shape=4.0, scale=8.0, size=users), 0.0, 150.0)  # some clipped
    with reporter(live, state_dir, batch_size=5000, max_outbox=2 * users) as r:
        assert r.simulate("theme", [THEME[i] for i in themes], rng=rng) == users
        assert r.simulate("minutes", minutes, rng=rng) == users
        assert r.flush().sent == 2 * users
    # the estimand: this population's own fractions and mean (values clipped to the bounds)
    fractions = np.bincount(themes, minlength=len(THEME)) / users
    mean = float(np.clip(minutes, 0.0, 120.0).mean())

    est = live.estimate("theme", level=0.99)
    assert est["n"] == users and est["mechanism"] == definition("theme").resolved_mechanism
    for item, truth in zip(est["items"], fractions, strict=True):
        assert item["low"] <= truth <= item["high"], (item, truth)
    assert max(i["high"] - i["low"] for i in est["items"]) < 0.1  # informative intervals
    num = live.estimate("minutes", level=0.99)
    assert num["n"] == users
    assert num["low"] <= mean <= num["high"], (num, mean)
    assert num["high"] - num["low"] < 10.0


def _as_left_by_schema_2(state_dir: Path) -> None:
    """The state database as an app of the previous release (per-report ids, v1) left it."""
    db = sqlite3.connect(state_dir / "client.sqlite3")
    db.executescript(
        "DROP INDEX reports_sealed; DROP INDEX reports_legacy; DROP TABLE batches;"
        "ALTER TABLE reports DROP COLUMN sealed;"
        "ALTER TABLE reports DROP COLUMN legacy; PRAGMA user_version = 2;"
    )
    db.close()


def test_an_upgrade_delivers_undelivered_v1_reports_exactly_once(
    live: LiveCollector, state_dir: Path
) -> None:
    before = reporter(live, state_dir)
    before.refresh_definitions()
    for v in range(30):
        before.report("clicks", float(v))
    before.simulate("tick", ["a"] * 50)
    live.stop()  # nothing delivered before the upgrade (but the batch below)
    with contextlib.suppress(CollectorUnavailable):
        before.close()
    live.start()
    _as_left_by_schema_2(state_dir)
    # The old app sent its first 25 reports as a v1 batch; the answer was lost.
    db = sqlite3.connect(state_dir / "client.sqlite3")
    rows = [
        OutboxRow(int(s), bytes(i), m, f, int(b), bytes(r))
        for s, i, m, f, b, r in db.execute(
            "SELECT seq, report_id, metric, fingerprint, bucket, report FROM reports "
            "WHERE report IS NOT NULL ORDER BY seq LIMIT 25"
        )
    ]
    db.close()
    sent = build_batch(rows)
    request = urllib.request.Request(
        f"{live.url}/v1/reports",
        data=sent.body,
        headers={"Authorization": f"Bearer {RELAY}", "Content-Type": wire.LEGACY_CONTENT_TYPE},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["accepted"] == 25
    with reporter(live, state_dir, batch_size=20) as after:
        assert after.pending == 80
        result = after.flush()
        assert (result.sent, result.duplicates, result.remaining) == (55, 25, 0)
        assert live.n("clicks") + live.n("tick") == 80
        # Reports made after the upgrade go in sealed batches.
        after.simulate("tick", ["b"] * 7)
        assert after.flush().sent == 7
    assert live.n("tick") == 57
    db = sqlite3.connect(state_dir / "client.sqlite3")
    assert db.execute("SELECT count(*) FROM batches").fetchone()[0] == 0
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    db.close()


def test_a_sealed_batch_is_resent_byte_for_byte(live: LiveCollector, state_dir: Path) -> None:
    bodies: list[bytes] = []

    class Recording(HttpTransport):
        def request(
            self, method: str, path: str, body: bytes | None, headers: dict[str, str]
        ) -> HttpAnswer:
            if path == "/v1/reports" and body is not None:
                bodies.append(body)
                assert headers["Content-Type"] == wire.CONTENT_TYPE
                if len(bodies) == 1:  # stored, answer lost
                    super().request(method, path, body, headers)
                    raise NetworkError("connection reset")
            return super().request(method, path, body, headers)

    with reporter(live, state_dir, transport=Recording(live.url, FAST_TIMEOUT)) as app:
        app.refresh_definitions()
        app.simulate("tick", ["c"] * 12)
        result = app.flush()
    assert (result.sent, result.duplicates) == (0, 12)
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    batch = wire.decode(bodies[0])
    assert batch.version == 2 and batch.batch_id is not None and batch.n == 12
    assert all(b.ids == b"" for b in batch.blocks)  # no per-report ids on the wire
    assert live.n("tick") == 12
