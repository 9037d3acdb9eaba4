"""The reporter against its store and a scripted in-memory collector (no network)."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit.client import (
    BudgetExceeded,
    CollectorRejected,
    CollectorUnavailable,
    MetricDefinition,
    OutboxFull,
    ParameterError,
    Reporter,
    RetryPolicy,
    StateError,
)
from ldpkit.client.policies import BackgroundSchedule
from ldpkit.http import NetworkError

from .conftest import FakeClock, FakeCollector, answer, minutes, theme

URL = "http://collector.invalid:8787"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002)


def make(
    state_dir: Path, clock: FakeClock, fake: FakeCollector | None = None, **kw: object
) -> Reporter:
    kw.setdefault("metrics", [theme(), minutes(budget=2.0)])
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


def outbox(state_dir: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(state_dir / "client.sqlite3")
    try:
        return db.execute(
            "SELECT report_id, metric, fingerprint, bucket, report FROM reports "
            "WHERE report IS NOT NULL"
        ).fetchall()
    finally:
        db.close()


# --- storage ----------------------------------------------------------------------------
def test_state_dir_is_private_and_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with make(Path("~/app/ldpkit"), clock) as r:
        r.report("theme", "dark")
        directory = tmp_path / "app" / "ldpkit"
        assert r.state_dir == str(directory)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        key = directory / "device.key"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
        assert stat.S_IMODE((directory / "client.sqlite3").stat().st_mode) == 0o600
        secret = key.read_bytes()
    with make(Path("~/app/ldpkit"), clock):
        assert key.read_bytes() == secret  # created once


def test_only_the_perturbed_report_is_stored(state_dir: Path, clock: FakeClock) -> None:
    with make(state_dir, clock, FakeCollector(down=True)) as r:
        receipt = r.report("theme", "system")
        r.report("session_minutes", 42.5)
    rows = outbox(state_dir)
    assert len(rows) == 2
    report_id, metric, fp, bucket, report = rows[0]
    assert (metric, fp, report, report_id) == (
        "theme",
        theme().fingerprint,
        receipt.report,
        receipt.report_id,
    )
    assert len(report_id) == 16  # type: ignore[arg-type]
    assert bucket == 86400 * int(clock.now // 86400)  # the bucket start, not the time
    raw = b"".join((state_dir / f).read_bytes() for f in os.listdir(state_dir) if "sqlite" in f)
    assert b"system" not in raw and b"42.5" not in raw
    assert str(int(clock.now)).encode() not in raw


# --- values -----------------------------------------------------------------------------
def test_bad_values_are_refused_with_clear_messages(state_dir: Path, clock: FakeClock) -> None:
    with make(state_dir, clock) as r:
        with pytest.raises(
            ParameterError,
            match=r"'blue' is not a category of metric theme; expected one of light, dark, system",
        ):
            r.report("theme", "blue")
        with pytest.raises(ParameterError, match="takes one of its categories"):
            r.report("theme", 2)
        with pytest.raises(
            ParameterError, match=r"session_minutes takes a number in \[0, 120\], got str"
        ):
            r.report("session_minutes", "42")
        with pytest.raises(ParameterError, match="finite"):
            r.report("session_minutes", float("inf"))
        with pytest.raises(
            ParameterError, match=r"unknown metric 'colour'.*session_minutes, theme"
        ):
            r.report("colour", "red")
        assert r.pending == 0 and r.budget()["theme"].spent == 0
        receipt = r.report("session_minutes", 1e9)  # clipped to the bounds, documented
        assert receipt.clipped and receipt.queued


# --- budget -----------------------------------------------------------------------------
def test_budget_exhaustion_and_renewal(state_dir: Path, clock: FakeClock) -> None:
    with make(state_dir, clock) as r:
        r.report("session_minutes", 10.0)  # 0.5 of 2.0
        r.report("session_minutes", 20.0)
        r.report("session_minutes", 30.0)
        r.report("session_minutes", 40.0)
        with pytest.raises(BudgetExceeded) as info:
            r.report("session_minutes", 50.0)
        err = info.value
        assert (err.metric, err.scope, err.left, err.needed) == (
            "session_minutes",
            "metric",
            0.0,
            0.5,
        )
        next_day = 86400 * (int(clock.now // 86400) + 1)
        assert err.renews_at == next_day
        assert "renews at 2025-11-22 00:00 UTC (in 20h59m)" in str(err)
        b = r.budget()["session_minutes"]
        assert (b.spent, b.left, b.renews_at) == (2.0, 0.0, next_day)
        assert r.pending == 4
    # the ledger survives a restart
    with make(state_dir, clock) as r:
        with pytest.raises(BudgetExceeded):
            r.report("session_minutes", 50.0)
        clock.now = next_day + 1  # the period renews
        assert r.budget()["session_minutes"].left == 2.0
        assert r.report("session_minutes", 50.0).epsilon_spent == 0.5


def test_total_budget_across_metrics(state_dir: Path, clock: FakeClock) -> None:
    metrics = [theme(budget=5.0), minutes(budget=5.0)]
    with make(state_dir, clock, metrics=metrics, total_budget=2.0) as r:
        r.report("theme", "dark")
        r.report("session_minutes", 1.0)
        with pytest.raises(BudgetExceeded) as info:
            r.report("theme", "light")
        assert info.value.scope == "total" and info.value.left == 0.5
        assert "total privacy budget exhausted" in str(info.value)
        r.report("session_minutes", 2.0)  # 0.5 still fits
        status = r.budget()
        assert status.total is not None and status.total.spent == 2.0 and status.total.left == 0.0
        assert status["theme"].spent == 1.0 and status["session_minutes"].spent == 1.0


# --- memoization ------------------------------------------------------------------------
def test_memoization_within_and_across_windows(state_dir: Path, clock: FakeClock) -> None:
    hourly = theme(bucket="hour", budget=1.0)
    with make(state_dir, clock, metrics=[hourly]) as r:
        first = r.report("theme", "dark")
        again = r.report("theme", "dark")  # same bucket: nothing new queued
        assert first.queued and first.epsilon_spent == 1.0 and not first.memoized
        assert again.memoized and not again.queued and again.report == first.report
        assert again.epsilon_spent == 0.0
        clock.advance(3600)  # next hour, same day: same report again, fresh id, no budget
        later = r.report("theme", "dark")
        assert later.queued and later.memoized and later.report == first.report
        assert later.report_id != first.report_id and later.bucket == first.bucket + 3600
        assert r.budget()["theme"].spent == 1.0
        with pytest.raises(BudgetExceeded):
            r.report("theme", "light")  # a different value is a fresh report
        assert r.pending == 2
    # after a restart the memo still holds (same device secret)
    with make(state_dir, clock, metrics=[hourly]) as r:
        assert r.report("theme", "dark").report == first.report
    # a new window is fresh randomness: over 120 days every report shows up (the device
    # secret is the OS's: an item missing all 120 days has odds 2 x 0.79^120 = 8e-13)
    seen = set()
    with make(state_dir, clock, metrics=[hourly]) as r:
        for _ in range(120):
            clock.advance(86400)
            receipt = r.report("theme", "dark")
            assert receipt.epsilon_spent == 1.0 and not receipt.memoized
            seen.add(receipt.report)
    assert len(seen) == 3  # grr over 3 categories at epsilon 1: every item shows up


def test_a_value_reported_again_in_its_window_draws_nothing(
    state_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memo window's report is kept in memory by its tag: reported again, no generator
    is keyed and nothing is drawn, and the bytes are the memo functions' (a new window and
    another value are drawn afresh)."""
    from ldpkit.client.codec import MetricCodec, memo_generator, memo_message

    hourly = theme(bucket="hour", budget=5.0)
    with make(state_dir, clock, metrics=[hourly]) as r:
        draws: list[int] = []
        real = MetricCodec.perturb

        def counted(self: MetricCodec, encoded: int | float, rng: np.random.Generator) -> bytes:
            draws.append(1)
            return real(self, encoded, rng)

        monkeypatch.setattr(MetricCodec, "perturb", counted)
        first = r.report("theme", "dark")
        clock.advance(3600)  # next bucket, same memo window (a day)
        again = r.report("theme", "dark")
        assert again.queued and again.memoized and again.report == first.report
        assert len(draws) == 1
        codec = MetricCodec.of(hourly)
        window = (int(clock()) // 86400) * 86400
        message = memo_message(codec.fingerprint, codec.value_key(codec.encode("dark")[0]), window)
        assert first.report == real(
            codec, codec.encode("dark")[0], memo_generator(r._state.secret, message)
        )
        r.report("theme", "light")
        clock.advance(86400)
        r.report("theme", "dark")
        assert len(draws) == 3


def test_memoize_off_spends_every_time(state_dir: Path, clock: FakeClock) -> None:
    with make(state_dir, clock, memoize=False, metrics=[theme(budget=3.0)]) as r:
        for _ in range(3):
            assert r.report("theme", "dark").epsilon_spent == 1.0
        with pytest.raises(BudgetExceeded):
            r.report("theme", "dark")


def test_memoized_reports_follow_the_mechanism() -> None:
    """Across many devices (secrets), memoized reports have the mechanism's distribution."""
    from ldpkit.client.codec import MetricCodec, memo_generator, memo_message

    codec = MetricCodec.of(theme())
    n = 6000
    secrets = np.random.default_rng(208)  # device secrets, seeded: a fixed verdict
    message = memo_message(codec.fingerprint, b"\x01", 0)
    reports = np.array(
        [
            np.frombuffer(codec.perturb(1, memo_generator(secrets.bytes(32), message)), "<u4")[0]
            for _ in range(n)
        ]
    )
    p = theme().mechanism_instance.p  # type: ignore[attr-defined]
    kept = float(np.mean(reports == 1))
    assert abs(kept - p) < 4.5 * np.sqrt(p * (1 - p) / n)


# --- outbox bound -----------------------------------------------------------------------
def test_outbox_full_raises_and_spends_nothing(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    metrics = [theme(budget=10.0)]
    with make(state_dir, clock, fake, metrics=metrics, max_outbox=3, memoize=False) as r:
        assert r.simulate("theme", []) == 0  # asks the collector what the token is, once
        fake.down = True
        for _ in range(3):
            r.report("theme", "dark")
        with pytest.raises(OutboxFull, match="max_outbox=3") as info:
            r.report("theme", "dark")
        assert (info.value.rows, info.value.limit) == (3, 3)
        assert r.budget()["theme"].spent == 3.0
        with pytest.raises(OutboxFull):
            r.simulate("theme", ["dark"])
        fake.down = False
        assert r.flush().sent == 3
        r.report("theme", "dark")


# --- concurrency ------------------------------------------------------------------------
def test_concurrent_reports_from_eight_threads(state_dir: Path, clock: FakeClock) -> None:
    per_thread = 150
    fake = FakeCollector()
    metrics = [theme(epsilon=0.05, budget=50.0), minutes(epsilon=0.05, budget=50.0)]
    errors: list[BaseException] = []
    with make(state_dir, clock, fake, metrics=metrics, memoize=False, batch_size=97) as r:
        start = threading.Barrier(8)

        def work(k: int) -> None:
            try:
                start.wait()
                for i in range(per_thread):
                    if i % 2:
                        r.report("theme", ["light", "dark", "system"][(i + k) % 3])
                    else:
                        r.report("session_minutes", float(i))
                    if i % 50 == 0:
                        r.flush()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        r.flush()
        assert r.pending == 0
        status = r.budget()
        assert status["theme"].spent == pytest.approx(8 * per_thread / 2 * 0.05)
        assert status["session_minutes"].spent == pytest.approx(8 * per_thread / 2 * 0.05)
    assert len(fake.seen) == 8 * per_thread  # every report delivered once


# --- delivery ---------------------------------------------------------------------------
def test_flush_delivers_and_counts(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    with make(state_dir, clock, fake, batch_size=2) as r:
        r.report("theme", "dark")
        r.report("session_minutes", 3.0)
        r.report("session_minutes", 4.0)
        result = r.flush()
        assert (result.sent, result.duplicates, result.rejected, result.remaining) == (3, 0, 0, 0)
        assert fake.posts == 2  # two batches of at most 2
        assert fake.requests[0][2]["Authorization"] == "Bearer t"
        assert fake.requests[0][2]["Content-Type"] == "application/vnd.ldpkit.v2+msgpack"
        assert r.flush().sent == 0 and fake.posts == 2  # nothing queued: no request


def test_collector_down_keeps_everything_then_delivers_once(
    state_dir: Path, clock: FakeClock
) -> None:
    fake = FakeCollector(down=True)
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        r.report("session_minutes", 3.0)
        with pytest.raises(CollectorUnavailable, match=r"after 3 attempt.*2 report.s. stay queued"):
            r.flush()
        assert r.pending == 2
        fake.down = False
        assert r.flush().sent == 2
        assert r.pending == 0 and len(fake.seen) == 2


def test_lost_answer_is_retried_and_counted_once(state_dir: Path, clock: FakeClock) -> None:
    """The collector stored the batch but the answer was lost: the retry is a duplicate."""
    fake = FakeCollector()
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        original = fake.request

        def lose_answer(method: str, path: str, body: bytes | None, headers: dict[str, str]):  # type: ignore[no-untyped-def]
            original(method, path, body, headers)
            fake.request = original  # type: ignore[method-assign]
            raise NetworkError("read timed out")

        fake.request = lose_answer  # type: ignore[method-assign]
        result = r.flush()
        assert (result.sent, result.duplicates) == (0, 1)
        assert len(fake.seen) == 1 and r.pending == 0


def test_server_errors_and_429_are_retried(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(script=[answer(503), answer(500), "ok"])
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        assert r.flush().sent == 1 and fake.posts == 3
    fake = FakeCollector(script=[answer(429, headers={"retry-after": "0.2"})])
    with make(state_dir.with_name("b"), clock, fake) as r:
        r.report("theme", "dark")
        t0 = time.monotonic()
        assert r.flush().sent == 1
        assert time.monotonic() - t0 >= 0.2  # Retry-After honoured, not the tiny backoff


def test_a_background_pass_backs_off_by_the_retry_after(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(script=[answer(429, headers={"retry-after": "7"})])
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        schedule = BackgroundSchedule(flush_interval=30.0, retry=FAST, now=0.0)
        before = time.monotonic()
        r._do(r._background_pass(schedule))  # one attempt: the 429, then it gives up
        after = time.monotonic()
        assert schedule.failures == 1 and r.pending == 1
        # 7 s from the moment of the 429, whenever within the pass that was (no tolerance
        # that a slow machine could exceed)
        assert before + 7.0 <= schedule.not_before <= after + 7.0
        r._do(r._background_pass(schedule))
        assert schedule.failures == 0 and r.pending == 0 and len(fake.seen) == 1


def test_client_errors_are_not_retried_and_keep_rows(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(script=[answer(401, "unauthorized")])
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        with pytest.raises(CollectorRejected) as info:
            r.flush()
        assert info.value.status == 401 and fake.posts == 1
        assert r.pending == 1
        assert r.flush().sent == 1


def test_rejected_reports_are_dropped_and_logged(
    state_dir: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeCollector(
        reject=lambda metric, report: "invalid_report" if metric == "theme" else None
    )
    with make(state_dir, clock, fake) as r:
        r.report("theme", "dark")
        r.report("session_minutes", 1.0)
        with caplog.at_level(logging.WARNING, logger="ldpkit.client"):
            result = r.flush()
        assert (result.sent, result.rejected, result.remaining) == (1, 1, 0)
        assert "invalid_report" in caplog.text


def test_413_halves_the_batch(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(script=[answer(413, "too_large")])
    with make(state_dir, clock, fake, metrics=[theme(budget=50.0)], memoize=False) as r:
        for _ in range(10):
            r.report("theme", "dark")
        assert r.flush().sent == 10
        assert fake.posts == 3  # refused 10, then 5 + 5


def test_close_tries_one_last_delivery(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(down=True)
    r = make(state_dir, clock, fake)
    r.report("theme", "dark")
    r.close()  # collector down: one attempt, no exception, the row stays
    assert fake.posts == 0 and len(outbox(state_dir)) == 1
    with pytest.raises(RuntimeError, match="closed"):
        r.report("theme", "dark")
    fake.down = False
    r2 = make(state_dir, clock, fake)
    r2.close()
    assert len(fake.seen) == 1 and outbox(state_dir) == []


def test_background_thread_flushes_on_batch_size(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    r = Reporter(
        URL,
        state_dir=state_dir,
        metrics=[theme(budget=50.0)],
        memoize=False,
        clock=clock,
        transport=fake,
        batch_size=5,
        flush_interval=3600,
        retry=FAST,
    )
    try:
        for _ in range(5):
            r.report("theme", "dark")
        for _ in range(200):
            if len(fake.seen) == 5:
                break
            threading.Event().wait(0.01)
        assert len(fake.seen) == 5 and r.pending == 0
    finally:
        r.close()


# --- definitions from the collector -----------------------------------------------------
def test_definitions_fetched_cached_and_revalidated(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(definitions=[theme(), minutes()])
    with make(state_dir, clock, fake, metrics=None) as r:
        assert r.report("theme", "dark").queued
        assert sorted(r.definitions) == ["session_minutes", "theme"]
        assert [q[:2] for q in fake.requests] == [("GET", "/v1/metrics")]
    fake.down = True  # offline after the first fetch: the cache answers
    with make(state_dir, clock, fake, metrics=None) as r:
        assert r.report("session_minutes", 3.0).queued
    fake.down = False
    with make(state_dir, clock, fake, metrics=None) as r:
        r.refresh_definitions()
        assert fake.requests[-1][2]["If-None-Match"] == '"v1"'  # answered 304
        assert "theme" in r.definitions
        with pytest.raises(ParameterError, match=r"unknown metric 'colour'.*served by"):
            r.report("colour", "red")


def test_no_definitions_and_no_collector(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector(down=True)
    with (
        make(state_dir, clock, fake, metrics=None) as r,
        pytest.raises(CollectorUnavailable, match="no metric definitions yet"),
    ):
        r.report("theme", "dark")


def test_constructor_checks(state_dir: Path, clock: FakeClock) -> None:
    """Each refusal after the database opened closes it: otherwise the next reporter on
    the state_dir would find it locked (exclusive_state, the default)."""
    with pytest.raises(ParameterError, match="URL"):
        Reporter("ftp://x", state_dir=state_dir)
    with pytest.raises(ParameterError, match="batch_size"):
        Reporter(URL, state_dir=state_dir, batch_size=0)
    with pytest.raises(ParameterError, match="defined twice"):
        make(state_dir, clock, metrics=[theme(), theme()])
    with pytest.raises(ParameterError, match="total_budget"):
        make(state_dir, clock, total_budget=-1)
    with pytest.raises(ParameterError, match="MetricDefinition"):
        make(state_dir, clock, metrics=[{"name": "x"}])


def test_simulate_many_devices(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    with make(state_dir, clock, fake, batch_size=1000) as r:
        values = np.random.default_rng(1).choice(["light", "dark", "system"], size=3000)
        assert r.simulate("theme", list(values)) == 3000
        assert r.simulate("session_minutes", np.linspace(-10, 200, 500)) == 500
        assert r.budget()["theme"].spent == 0  # virtual devices, not this one
        assert r.flush().sent == 3500
    assert fake.count("theme") == 3000


def test_metric_definition_type_is_reexported() -> None:
    assert MetricDefinition is theme().__class__


# --- store internals ----------------------------------------------------------------------
def test_keyed_generator_equals_a_fresh_philox() -> None:
    from ldpkit.client.codec import keyed_generator

    for _ in range(20):
        key = os.urandom(16)
        fresh = np.random.Generator(np.random.Philox(key=int.from_bytes(key, "little")))
        expected = (fresh.random(3), fresh.integers(0, 1000, 5), fresh.standard_normal(2))
        g = keyed_generator(key)
        got = (g.random(3), g.integers(0, 1000, 5), g.standard_normal(2))
        for a, b in zip(expected, got, strict=True):
            np.testing.assert_array_equal(a, b)


def test_two_reporters_on_one_state_dir_share_the_ledger(state_dir: Path, clock: FakeClock) -> None:
    """exclusive_state=False: each keeps caches; a commit by the other connection
    invalidates them."""
    down = FakeCollector(down=True)
    metrics = [minutes(budget=1.0)]
    with (
        make(state_dir, clock, down, metrics=metrics, exclusive_state=False) as a,
        make(state_dir, clock, down, metrics=metrics, exclusive_state=False) as b,
    ):
        a.report("session_minutes", 1.0)
        assert b.budget()["session_minutes"].spent == 0.5
        b.report("session_minutes", 2.0)
        with pytest.raises(BudgetExceeded):
            a.report("session_minutes", 3.0)
        assert a.report("session_minutes", 2.0).memoized  # b's memo tag, same secret
        assert a.pending == b.pending == 2
        fake = FakeCollector()
        a._transport = fake  # type: ignore[assignment]
        assert a.flush().sent == 2
        assert b.pending == 0


def test_one_fsync_per_flush_and_pruning(state_dir: Path, clock: FakeClock) -> None:
    fake = FakeCollector()
    metrics = [theme(epsilon=0.5, budget=50.0, bucket="hour", budget_period="hour")]
    with make(state_dir, clock, fake, metrics=metrics, memoize=False, batch_size=3) as r:
        for _ in range(10):
            r.report("theme", "dark")
        r.simulate("theme", ["light"] * 5)

        def syncs() -> int:
            return int(
                r._state.store.db.execute("SELECT value FROM meta WHERE key='syncs'").fetchone()[0]
            )

        before = syncs()
        assert r.flush().sent == 15 and fake.posts == 5
        assert syncs() == before + 1
        db = r._state.store.db
        # delivered: simulated rows are gone, the device's own keep their ledger columns
        assert db.execute("SELECT count(*), count(report) FROM reports").fetchone() == (10, 0)
        clock.advance(3600)  # the metric's hour ended, the total's day did not
        r._state.prune()
        assert db.execute("SELECT count(*) FROM reports").fetchone() == (10,)
        clock.advance(86400)  # both ended; kept a week more (a period may be widened)
        r._state.prune()
        assert db.execute("SELECT count(*) FROM reports").fetchone() == (10,)
        assert r.budget()["theme"].spent == 0.0
        clock.advance(7 * 86400)
        r._state.prune()
        assert db.execute("SELECT count(*) FROM reports").fetchone() == (0,)


def test_a_report_is_one_transaction_of_four_statements(state_dir: Path, clock: FakeClock) -> None:
    """exclusive_state=False: BEGIN IMMEDIATE, the cache check (data_version), one INSERT,
    COMMIT; no statement after the commit (the outbox count that wakes the flusher is the
    one the transaction saw). A commit by another connection is still noticed by the next
    report."""
    metrics = [theme(budget=50.0)]
    down = FakeCollector(down=True)
    shared = {"metrics": metrics, "memoize": False, "exclusive_state": False}
    with make(state_dir, clock, down, **shared) as r:
        r.report("theme", "dark")
        db = r._state.store.db
        seen: list[str] = []
        db.set_trace_callback(seen.append)
        r.report("theme", "dark")
        db.set_trace_callback(None)
        assert [s.split(" ", 1)[0] for s in seen] == ["BEGIN", "PRAGMA", "INSERT", "COMMIT"]
        assert seen[1] == "PRAGMA data_version"
        with make(state_dir, clock, down, **shared) as other:
            other.report("theme", "light")
        r.report("theme", "dark")
        assert r.pending == 4 and r.budget()["theme"].spent == pytest.approx(4.0)


def test_an_exclusive_report_is_three_statements(state_dir: Path, clock: FakeClock) -> None:
    """The default (exclusive_state): no other connection can commit while this one holds
    the lock, so the caches are read on the first transaction only. A refused report
    (over budget) rolls back a transaction that changed nothing, so it reloads nothing
    either: an app reporting past its budget pays two statements a call, not a read of
    the whole outbox."""
    down = FakeCollector(down=True)
    with make(state_dir, clock, down, metrics=[theme(budget=2.0)], memoize=False) as r:
        r.report("theme", "dark")  # the first transaction reads the caches
        db = r._state.store.db
        seen: list[str] = []
        db.set_trace_callback(seen.append)
        r.report("theme", "dark")
        assert [s.split(" ", 1)[0] for s in seen] == ["BEGIN", "INSERT", "COMMIT"]
        for value in ("dark", "light"):
            seen.clear()
            with pytest.raises(BudgetExceeded):
                r.report("theme", value)
            assert [s.split(" ", 1)[0] for s in seen] == ["BEGIN", "ROLLBACK"]
        db.set_trace_callback(None)
        assert r.pending == 2 and r.budget()["theme"].spent == pytest.approx(2.0)


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive_state", "shared"])
def test_a_rollback_after_the_caches_changed_reloads_them(
    state_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, exclusive: bool
) -> None:
    """A transaction that failed after the caches took its row (here: right after the
    INSERT) is rolled back, and the caches with it: the next report reads them again."""
    down = FakeCollector(down=True)
    options = {"metrics": [theme(budget=3.0)], "memoize": False, "exclusive_state": exclusive}
    with make(state_dir, clock, down, **options) as r:
        r.report("theme", "dark")
        store = r._state.store
        queue = store.add_report

        def add_then_fail(*args: Any, **kw: Any) -> None:
            queue(*args, **kw)
            raise sqlite3.OperationalError("disk I/O error")  # after the caches changed

        monkeypatch.setattr(store, "add_report", add_then_fail)
        with pytest.raises(StateError, match="disk I/O error"):
            r.report("theme", "light")
        monkeypatch.undo()
        assert r.pending == 1 and r.budget()["theme"].spent == pytest.approx(1.0)
        r.report("theme", "light")
        r.report("theme", "dark")
        with pytest.raises(BudgetExceeded):  # the failed report spent nothing
            r.report("theme", "dark")
        assert r.pending == 3


OPEN_EXCLUSIVELY = """
import sys
from ldpkit.client import Reporter
Reporter("http://127.0.0.1:9", state_dir=sys.argv[1], metrics=[], background=False)
"""


def test_exclusive_state_keeps_the_lock_until_closed(state_dir: Path, clock: FakeClock) -> None:
    """exclusive_state (the default): SQLite's lock is held while the reporter is open (its
    WAL index in the process's memory, no -shm file), so a second reporter on the same
    state_dir is refused by name; once closed, the state (ledger, outbox) is all there,
    for a reporter that shares it too."""
    metrics = [minutes(budget=1.0)]
    down = FakeCollector(down=True)
    with make(state_dir, clock, down, metrics=metrics) as a:
        a.report("session_minutes", 1.0)
        a.report("session_minutes", 2.0)
        assert not (state_dir / "client.sqlite3-shm").exists()
        other = subprocess.run(  # another process: SQLite's file lock, not its own table
            [sys.executable, "-c", OPEN_EXCLUSIVELY, str(state_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "StateError" in other.stderr and "exclusive_state=False" in other.stderr
        with pytest.raises(BudgetExceeded):
            a.report("session_minutes", 3.0)
    with make(state_dir, clock, down, metrics=metrics, exclusive_state=False) as b:
        assert b.pending == 2
        assert b.budget()["session_minutes"].spent == pytest.approx(1.0)
        with pytest.raises(BudgetExceeded):
            b.report("session_minutes", 3.0)
