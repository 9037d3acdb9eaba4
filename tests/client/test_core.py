"""The client's I/O-free core: policies, codecs, memo keys, budgets, batches, answers."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ldpkit.client.codec import MemoKeys, MetricCodec, memo_generator, memo_message, memo_tag
from ldpkit.client.policies import (
    MIN_BACKOFF,
    PRUNE_INTERVAL,
    USER_AGENT,
    BackgroundSchedule,
    RetryPolicy,
    ShellSettings,
    budget_decision,
)
from ldpkit.client.protocol import (
    Delivered,
    Fatal,
    OutboxRow,
    Retry,
    TooLarge,
    build_batch,
    interpret_batch_answer,
    parse_definitions,
    parse_retry_after,
)
from ldpkit.errors import BudgetExceeded, CollectorRejected, ParameterError
from ldpkit.http import HttpAnswer, Timeout, split_url
from ldpkit.metrics import Period
from ldpkit.wire import CONTENT_TYPE, decode_batch

from .conftest import answer, minutes, theme


# --- policies ---------------------------------------------------------------------------
def test_timeout_values() -> None:
    assert Timeout(2.0) == Timeout(2.0, 2.0)
    assert Timeout.coerce(None) == Timeout(5.0, 30.0)
    assert Timeout.coerce(3) == Timeout(3.0, 3.0)
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(ParameterError):
            Timeout(bad)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        Timeout().connect = 1.0  # type: ignore[misc]


def test_retry_policy_backoff_is_full_jitter_capped() -> None:
    p = RetryPolicy(base_delay=0.5, multiplier=2.0, max_delay=3.0)
    assert [p.backoff_cap(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert p.backoff_cap(10_000) == 3.0
    assert p.delay(3, uniform=lambda: 0.0) == 0.0
    assert p.delay(3, uniform=lambda: 0.5) == 1.0
    draws = [p.delay(4) for _ in range(2000)]
    assert 0.0 <= min(draws) < 0.3 and 2.7 < max(draws) <= 3.0  # spread over [0, cap]
    # Retry-After replaces the draw, capped.
    assert p.delay(1, retry_after=7.0) == 7.0
    assert RetryPolicy(max_retry_after=5.0).delay(1, retry_after=60.0) == 5.0
    for bad in ({"max_attempts": 0}, {"base_delay": -1.0}, {"multiplier": 0.5}):
        with pytest.raises(ParameterError):
            RetryPolicy(**bad)  # type: ignore[arg-type]


def test_parse_retry_after() -> None:
    assert parse_retry_after("3", 0.0) == 3.0
    assert parse_retry_after(" 1.5 ", 0.0) == 1.5
    assert parse_retry_after(None, 0.0) is None
    assert parse_retry_after("soon", 0.0) is None
    assert parse_retry_after("-4", 0.0) == 0.0
    # HTTP date: 2015-10-21 07:28:00 GMT
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480.0 - 10) == 10.0


# --- the shells' settings and background schedule ---------------------------------------
def settings(**kw: object) -> ShellSettings:
    args: dict[str, object] = {
        "token": None,
        "flush_interval": 30.0,
        "batch_size": 500,
        "timeout": None,
        "retry": None,
        "definitions_ttl": 3600.0,
    }
    args.update(kw)
    return ShellSettings.of("http://c.example:8787/x/", **args)  # type: ignore[arg-type]


def test_shell_settings_check_and_derive() -> None:
    assert split_url("https://c.example/p/") == ("https", "c.example", 443, "/p")
    s = settings(token="t", flush_interval=5, timeout=2)
    assert s.url == "http://c.example:8787/x"
    assert (s.flush_interval, s.batch_size, s.definitions_ttl) == (5.0, 500, 3600.0)
    assert s.timeout == Timeout(2.0) and s.retry == RetryPolicy()
    assert s.headers == {"User-Agent": USER_AGENT, "Authorization": "Bearer t"}
    assert s.report_headers == {
        **s.headers,
        "Content-Type": CONTENT_TYPE,
        "Accept": "application/json",
    }
    assert settings().headers == {"User-Agent": USER_AGENT}  # no token, no Authorization
    assert settings().timeout == Timeout(5.0, 30.0)
    for bad, match in (
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"flush_interval": 0}, "flush_interval"),
        ({"flush_interval": float("inf")}, "flush_interval"),
        ({"timeout": -1}, "Timeout"),
        ({"retry": 3}, "RetryPolicy"),
        ({"definitions_ttl": "1h"}, "definitions_ttl"),
        # The first bad argument is the one reported.
        ({"batch_size": 0, "flush_interval": 0}, "batch_size"),
    ):
        with pytest.raises(ParameterError, match=match):
            settings(**bad)
    with pytest.raises(ParameterError, match="collector URL"):
        ShellSettings.of(
            "ftp://c.example",
            token=None,
            flush_interval=1.0,
            batch_size=1,
            timeout=None,
            retry=None,
            definitions_ttl=1.0,
        )


def schedule(
    now: float = 1000.0, draw: float = 0.5, interval: float = 10.0, **retry: float
) -> BackgroundSchedule:
    policy = RetryPolicy(**{"base_delay": 1.0, "max_delay": 8.0, **retry})  # type: ignore[arg-type]
    return BackgroundSchedule(flush_interval=interval, retry=policy, now=now, uniform=lambda: draw)


def test_schedule_flushes_every_interval() -> None:
    s = schedule()
    assert s.wait(1000.0) == 10.0 and s.wait(1004.0) == 6.0 and s.wait(1020.0) == 0.0
    assert s.ready(1003.0)  # woken early (a full batch): flush now
    s.flushed(1003.0)
    assert s.wait(1003.0) == 10.0 and s.failures == 0


def test_schedule_backs_off_after_unavailable_and_honours_retry_after() -> None:
    s = schedule()
    waits = [s.unavailable(1000.0 + i, None) for i in range(5)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0]  # half of min(8, 1 * 2 ** (n - 1))
    assert s.failures == 5
    assert s.not_before == 1008.0 and not s.ready(1007.9) and s.ready(1008.0)
    assert s.wait(1004.0) == 10.0  # the next regular pass is later than the backoff
    assert s.unavailable(2000.0, 30.0) == 30.0  # Retry-After replaces the draw
    assert not s.ready(2029.0) and s.wait(2000.0) == 30.0
    assert schedule(max_retry_after=5.0).unavailable(0.0, 60.0) == 5.0
    assert schedule(draw=0.0).unavailable(0.0, None) == MIN_BACKOFF  # never a busy loop
    assert schedule().unavailable(0.0, 0.0) == MIN_BACKOFF
    s.flushed(2031.0)
    assert s.failures == 0 and s.ready(2031.0) and s.wait(2031.0) == 10.0


def test_schedule_waits_long_after_rejected_and_counts_other_errors() -> None:
    s = schedule(interval=10.0, max_delay=8.0)
    assert s.rejected(0.0) == 10.0  # max(max_delay, flush_interval)
    assert schedule(interval=2.0, max_delay=8.0).rejected(0.0) == 8.0
    assert schedule(interval=0.01, max_delay=0.0).rejected(0.0) == 0.01  # no floor here
    assert s.failed(20.0) == 1.0 and s.failures == 2  # one count across kinds
    assert schedule(draw=0.0).failed(0.0) == MIN_BACKOFF


def test_schedule_prunes_hourly() -> None:
    s = schedule(now=0.0)
    assert not s.prune_due(PRUNE_INTERVAL)
    assert s.prune_due(PRUNE_INTERVAL + 1)
    assert not s.prune_due(PRUNE_INTERVAL + 2)
    assert s.prune_due(2 * PRUNE_INTERVAL + 2)


# --- values -----------------------------------------------------------------------------
def test_codec_categorical_and_errors() -> None:
    c = MetricCodec.of(theme())
    assert c.encode("dark") == (1, False)
    with pytest.raises(ParameterError, match="'blue' is not a category of metric theme"):
        c.encode("blue")
    with pytest.raises(ParameterError, match="takes one of its categories"):
        c.encode(1)
    np.testing.assert_array_equal(c.encode_many(["dark", "light"]), [1, 0])
    with pytest.raises(ParameterError, match="value 1: 'x' is not a category"):
        c.encode_many(["dark", "x"])


def test_codec_numeric_clips_and_refuses_non_numbers() -> None:
    c = MetricCodec.of(minutes())
    assert c.encode(42.5) == (42.5, False)
    assert c.encode(500) == (120.0, True)
    assert c.encode(-3) == (0.0, True)
    assert c.encode(np.float32(1.5)) == (1.5, False)
    assert c.value_key(c.encode(-0.0)[0]) == c.value_key(0.0)
    for bad in ("42", None, True, float("nan"), float("inf"), [1.0]):
        with pytest.raises(ParameterError, match="session_minutes"):
            c.encode(bad)
    np.testing.assert_array_equal(c.encode_many([1.0, 500.0, -1.0]), [1.0, 120.0, 0.0])
    with pytest.raises(ParameterError, match="value 1"):
        c.encode_many([1.0, float("nan")])


def test_perturb_gives_report_dtype_bytes() -> None:
    for d in (theme(), minutes()):
        c = MetricCodec.of(d)
        encoded, _ = c.encode("dark" if d.name == "theme" else 3.0)
        report = c.perturb(encoded, np.random.default_rng(0))
        assert len(report) == d.mechanism_instance.report_dtype.itemsize
        assert bool(
            d.mechanism_instance.check_reports(
                np.frombuffer(report, d.mechanism_instance.report_dtype)
            )[0]
        )


# --- memo -------------------------------------------------------------------------------
def test_memo_randomness_is_permanent_per_value_and_window() -> None:
    secret = os.urandom(32)
    m1 = memo_message("4e1eb7ea0ddd3f92", b"\x01", 86400)
    draws = memo_generator(secret, m1).random(4)
    np.testing.assert_array_equal(draws, memo_generator(secret, m1).random(4))
    for other in (
        memo_message("4e1eb7ea0ddd3f92", b"\x02", 86400),
        memo_message("4e1eb7ea0ddd3f92", b"\x01", 2 * 86400),
        memo_message("ffffffffffffffff", b"\x01", 86400),
    ):
        assert not np.array_equal(draws, memo_generator(secret, other).random(4))
        assert memo_tag(secret, other) != memo_tag(secret, m1)
    assert not np.array_equal(draws, memo_generator(os.urandom(32), m1).random(4))
    # The stored tag is not the generator's key.
    tag = memo_tag(secret, m1)
    assert len(tag) == 16
    key_rng = np.random.Generator(np.random.Philox(key=int.from_bytes(tag, "little")))
    assert not np.array_equal(draws, key_rng.random(4))


# --- budget -----------------------------------------------------------------------------
def decide(**kw: object) -> BudgetExceeded | None:
    args: dict[str, object] = dict(
        metric="theme",
        needed=1.0,
        metric_spent=0.0,
        metric_budget=1.0,
        metric_period=Period.DAY,
        total_spent=0.0,
        total_budget=None,
        total_period=Period.DAY,
        now=86400 * 10 + 3600,
    )
    args.update(kw)
    return budget_decision(**args)  # type: ignore[arg-type]


def test_budget_decisions() -> None:
    assert decide() is None
    assert decide(needed=0.1, metric_spent=0.9, metric_budget=1.0) is None
    # float sums: ten reports of 0.1 fit a budget of 1.0
    assert decide(needed=0.1, metric_spent=sum([0.1] * 9), metric_budget=1.0) is None
    err = decide(metric_spent=0.5)
    assert isinstance(err, BudgetExceeded)
    assert err.scope == "metric" and err.metric == "theme"
    assert err.left == 0.5 and err.needed == 1.0 and err.budget == 1.0
    assert err.renews_at == 86400 * 11
    assert "0.5 of its 1 per day is left" in str(err)
    assert "renews at 1970-01-12 00:00 UTC (in 23h00m)" in str(err)
    err = decide(total_budget=3.0, total_spent=2.5, total_period=Period.WEEK)
    assert isinstance(err, BudgetExceeded) and err.scope == "total"
    assert "0.5 of the total 3 per week" in str(err)
    assert err.renews_at is not None and err.renews_at % Period.WEEK.seconds == 0


# --- batches and answers ----------------------------------------------------------------
def rows() -> list[OutboxRow]:
    out = []
    for seq, (metric, bucket) in enumerate(
        [("theme", 0), ("minutes", 0), ("theme", 0), ("theme", 3600), ("minutes", 0)], start=10
    ):
        out.append(OutboxRow(seq, os.urandom(16), metric, "0" * 16, bucket, bytes([seq]) * 4))
    return out


def test_build_batch_groups_blocks_and_keeps_wire_order() -> None:
    rs = rows()
    batch = build_batch(rs)
    blocks = decode_batch(batch.body)
    assert [(b.metric, b.bucket, b.n) for b in blocks] == [
        ("theme", 0, 2),
        ("minutes", 0, 2),
        ("theme", 3600, 1),
    ]
    assert batch.seqs == (10, 12, 11, 14, 13)
    wire_ids = [i for b in blocks for i in b.id_list()]
    by_seq = {r.seq: r.report_id for r in rs}
    assert wire_ids == [by_seq[s] for s in batch.seqs]


def ok(
    accepted: int, duplicates: int = 0, rejected: list[dict[str, object]] | None = None
) -> HttpAnswer:
    body = {"accepted": accepted, "duplicates": duplicates, "held": 0, "rejected": rejected or []}
    return HttpAnswer(200, {}, json.dumps(body).encode())


def test_interpret_answers() -> None:
    batch = build_batch(rows())
    out = interpret_batch_answer(batch, ok(3, 1, [{"index": 1, "error": "invalid_report"}]), 0)
    assert isinstance(out, Delivered)
    assert (out.accepted, out.duplicates) == (3, 1)
    assert [r.seq for r in out.rejected] == [12] and out.rejected[0].error == "invalid_report"
    # an answer that does not account for every report keeps them all
    assert isinstance(interpret_batch_answer(batch, ok(3), 0), Retry)
    assert isinstance(interpret_batch_answer(batch, ok(4, 0, [{"index": 9}]), 0), Retry)
    assert isinstance(
        interpret_batch_answer(batch, ok(3, 0, [{"index": 1}, {"index": 1}]), 0), Retry
    )
    assert isinstance(interpret_batch_answer(batch, HttpAnswer(200, {}, b"<html>"), 0), Retry)
    r = interpret_batch_answer(batch, answer(429, "too_many", {"retry-after": "2"}), 0)
    assert isinstance(r, Retry) and r.retry_after == 2.0 and "429" in r.reason
    for status in (500, 502, 503, 504):
        r = interpret_batch_answer(batch, answer(status), 0)
        assert isinstance(r, Retry) and r.retry_after is None
    assert isinstance(interpret_batch_answer(batch, answer(413), 0), TooLarge)
    for status in (400, 401, 403, 415):
        f = interpret_batch_answer(batch, answer(status, "unauthorized"), 0)
        assert isinstance(f, Fatal) and isinstance(f.error, CollectorRejected)
        assert f.error.status == status and f.error.error == "unauthorized"


def test_held_reports_are_delivered() -> None:
    """Screening holds some of the accepted reports for an admin: they leave the outbox
    (the device cannot tell forged from honest anyway); ``held`` never exceeds
    ``accepted``, and an answer without it (an older collector) holds none."""
    batch = build_batch(rows())
    body = {"accepted": 5, "duplicates": 0, "held": 4, "rejected": []}
    out = interpret_batch_answer(batch, HttpAnswer(200, {}, json.dumps(body).encode()), 0)
    assert isinstance(out, Delivered) and (out.accepted, out.held) == (5, 4)
    body = {"accepted": 5, "duplicates": 0, "rejected": []}
    out = interpret_batch_answer(batch, HttpAnswer(200, {}, json.dumps(body).encode()), 0)
    assert isinstance(out, Delivered) and out.held == 0
    body = {"accepted": 3, "duplicates": 2, "held": 4, "rejected": []}
    assert isinstance(
        interpret_batch_answer(batch, HttpAnswer(200, {}, json.dumps(body).encode()), 0), Retry
    )


# --- definitions ------------------------------------------------------------------------
def test_parse_definitions_round_trip_and_skips_mismatches() -> None:
    served = [theme().to_dict(), minutes(budget=2.0).to_dict()]
    bad = dict(served[0], name="broken", fingerprint="0123456789abcdef")
    body = json.dumps({"metrics": [*served, bad, "junk"]})
    definitions, warnings = parse_definitions(body)
    assert sorted(definitions) == ["session_minutes", "theme"]
    assert definitions["theme"].fingerprint == served[0]["fingerprint"]
    assert definitions["session_minutes"].effective_budget == 2.0
    assert len(warnings) == 2 and any("broken" in w for w in warnings)
    with pytest.raises(Exception, match="metric list"):
        parse_definitions(b"[]")


def test_the_reporters_memo_keys_are_the_memo_functions() -> None:
    """MemoKeys (the HMAC contexts computed once per secret: what report() uses) gives the
    bytes of memo_tag and memo_generator: state dirs and their memo tags stay valid."""
    secret = os.urandom(32)
    keys = MemoKeys(secret)
    for message in (
        memo_message("4e1eb7ea0ddd3f92", bytes([v]), 86400 * w) for v in range(3) for w in (1, 2)
    ):
        assert keys.tag(message) == memo_tag(secret, message)
        draws = keys.generator(message).random(4)
        np.testing.assert_array_equal(draws, memo_generator(secret, message).random(4))
