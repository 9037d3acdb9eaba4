"""A lying or broken collector cannot hurt the app (issue 11, point 15).

The real Reporter, AsyncReporter and Analyst against a loopback server (tests/client/lying.py) that
answers with deeply nested JSON, impossible counts, an answer dripped a byte at a time,
or 300 MB: every call ends within its deadline with a documented error, nothing is read
past a bound, and no report leaves the outbox without a well-formed acknowledgement
that accounts for every report sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ldpkit.analyst import Analyst
from ldpkit.client import (
    AsyncReporter,
    CollectorRejected,
    CollectorUnavailable,
    Reporter,
    RetryPolicy,
    Timeout,
)
from ldpkit.http import MAX_ANSWER_BYTES

from .conftest import theme
from .lying import LyingCollector, answer, drip, fixed, flood

ONE = RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.01)
NESTED = b"[" * 100_000 + b"]" * 100_000
QUICK = Timeout(connect=2.0, read=5.0, total=3.0)


def reporter(url: str, state_dir: Path, **kw: Any) -> Reporter:
    kw.setdefault("metrics", [theme()])
    return Reporter(url, token="t", state_dir=state_dir, background=False, retry=ONE, **kw)


def in_thread(fn: Callable[[], object]) -> object:
    """``fn()`` in a thread: its result or exception. No time limit: every scenario ends
    (a drip and a flood are finite), so a client without its bounds fails on what it
    read or waited for, not on the machine's speed."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # handed to the test
            box.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join()
    return box[0]


def test_deeply_nested_answers_are_collector_errors(tmp_path: Path) -> None:
    with LyingCollector(fixed(200, NESTED)) as lying:
        r = reporter(lying.url, tmp_path / "a")
        r.report("theme", "dark")
        with pytest.raises(CollectorUnavailable, match="nested"):
            r.flush()
        assert r.pending == 1
        r.close(flush=False)
    body = b'{"metrics": ' + NESTED + b"}"
    with LyingCollector(fixed(200, body)) as lying:
        r = Reporter(lying.url, token="t", state_dir=tmp_path / "b", background=False, retry=ONE)
        with pytest.raises(CollectorUnavailable):
            r.report("theme", "dark")  # the definitions cannot be fetched
        with pytest.raises(CollectorUnavailable):
            r.refresh_definitions()
        r.close(flush=False)


@pytest.mark.parametrize(
    "counts",
    [
        {"accepted": -1, "duplicates": 4, "rejected": []},
        {"accepted": 4, "duplicates": -1, "rejected": []},
        {"accepted": True, "duplicates": 2, "rejected": []},
        {"accepted": 3.0, "duplicates": 0, "rejected": []},
        {"accepted": 2, "duplicates": 0, "rejected": [{"index": True, "error": "x"}]},
        {"accepted": 2, "duplicates": 0, "rejected": [{"index": 0, "error": ["x"] * 9}]},
        {"accepted": 2, "duplicates": 0, "rejected": [{"index": 0}]},
        {"accepted": 0, "duplicates": 0, "rejected": "all of them"},
        {"accepted": 3, "duplicates": 0, "rejected": [], "extra": json.loads("[" * 40 + "]" * 40)},
    ],
)
def test_impossible_counts_drop_nothing(tmp_path: Path, counts: dict[str, Any]) -> None:
    """Three reports sent; an answer whose counts cannot be true (negative, booleans,
    floats, a rejected entry without a string error, nesting past the bound...) is no
    acknowledgement."""
    with LyingCollector(fixed(200, json.dumps(counts).encode())) as lying:
        r = reporter(lying.url, tmp_path, metrics=[theme(budget=3.0)])
        for value in ("dark", "light", "system"):
            r.report("theme", value)
        with pytest.raises(CollectorUnavailable):
            r.flush()
        assert r.pending == 3
        r.close(flush=False)


def test_a_dripping_answer_ends_at_the_deadline(tmp_path: Path) -> None:
    """The answer arrives a byte every 0.2 s (each recv within the read timeout): it used
    to keep flush() running as long as the collector liked. Each request now has a total
    deadline (Timeout.total)."""
    padded = json.dumps({"accepted": 1, "duplicates": 0, "rejected": [], "x": " " * 600})
    dripped = answer(200, padded.encode())  # 0.2 s a byte: over two minutes in all
    with LyingCollector(drip(dripped, 0.2)) as lying:
        r = reporter(lying.url, tmp_path, timeout=QUICK)
        r.report("theme", "dark")
        outcome = in_thread(r.flush)
        # ended by its deadline, not by the answer's end: no wall-clock bound needed
        assert lying.sent < len(dripped), "flush() waited for the whole dripped answer"
        assert isinstance(outcome, CollectorUnavailable), outcome
        assert "deadline" in str(outcome) or "timed out" in str(outcome)
        assert r.pending == 1
        outcome = in_thread(r.close)
        assert outcome is None


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_endless_answer_is_not_read_into_memory(tmp_path: Path, chunked: bool) -> None:
    with LyingCollector(flood(300 * 2**20, chunked=chunked)) as lying:
        r = reporter(lying.url, tmp_path)
        r.report("theme", "dark")
        outcome = in_thread(r.flush)
        assert isinstance(outcome, CollectorUnavailable), outcome
        assert "larger than" in str(outcome)
        assert r.pending == 1
        r.close(flush=False)
    assert lying.sent < MAX_ANSWER_BYTES + 32 * 2**20, lying.sent  # not 300 MB


# --- the asynchronous reporter -----------------------------------------------------------
def _async(url: str, state_dir: Path, **kw: Any) -> AsyncReporter:
    kw.setdefault("metrics", [theme()])
    return AsyncReporter(url, token="t", state_dir=state_dir, background=False, retry=ONE, **kw)


def test_the_async_reporter_is_bounded_too(tmp_path: Path) -> None:
    padded = json.dumps({"accepted": 1, "duplicates": 0, "rejected": [], "x": " " * 600})
    dripped = answer(200, padded.encode())
    scenarios = {
        "nested": fixed(200, NESTED),
        "counts": fixed(200, b'{"accepted": -1, "duplicates": 2, "rejected": []}'),
        "drip": drip(dripped, 0.2),
        "flood": flood(300 * 2**20),
    }
    for name, scenario in scenarios.items():
        with LyingCollector(scenario) as lying:

            async def go(url: str = lying.url, name: str = name) -> int:
                async with _async(url, tmp_path / name, timeout=QUICK) as r:
                    await r.report("theme", "dark")
                    with pytest.raises(CollectorUnavailable):
                        await r.flush()
                    sent = lying.sent  # when flush() gave up
                    assert r.pending == 1
                return sent

            sent = asyncio.run(go())
            if name == "drip":  # ended by the deadline, not by the answer's end
                assert sent < len(dripped), "flush() waited for the whole dripped answer"
            if name == "flood":
                assert lying.sent < MAX_ANSWER_BYTES + 32 * 2**20, lying.sent


# --- the analyst: the sync reporter's transport, with the same bounds ----------------------
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_analyst_reads_no_endless_answer(chunked: bool) -> None:
    with LyingCollector(flood(300 * 2**20, chunked=chunked)) as lying:
        analyst = Analyst(lying.url, "t", timeout=QUICK)
        outcome = in_thread(lambda: analyst.estimates("theme"))
        assert isinstance(outcome, CollectorUnavailable), outcome
        assert "larger than" in str(outcome)
        analyst.close()
    assert lying.sent < MAX_ANSWER_BYTES + 32 * 2**20, lying.sent  # not 300 MB


def test_the_analyst_ends_a_stalled_answer_at_the_deadline() -> None:
    """A collector that drips its answer (every read within the read timeout) or sends
    nested JSON: the Analyst raises CollectorUnavailable within Timeout.total."""
    dripped = answer(200, b'{"metric": "theme"' + b" " * 600 + b"}")
    with LyingCollector(drip(dripped, 0.2)) as lying:
        analyst = Analyst(lying.url, "t", timeout=QUICK)
        outcome = in_thread(lambda: analyst.estimates("theme"))
        assert lying.sent < len(dripped), "the Analyst waited for the whole dripped answer"
        assert isinstance(outcome, CollectorUnavailable), outcome
        assert "deadline" in str(outcome)
        analyst.close()
    with (
        LyingCollector(fixed(200, NESTED)) as lying,
        pytest.raises(CollectorUnavailable, match="nested"),
    ):
        Analyst(lying.url, "t", timeout=QUICK).estimates("theme")


def test_the_analyst_maps_error_answers_like_the_reporters() -> None:
    busy = b'{"error": "overloaded", "detail": "busy"}'
    with (
        LyingCollector(fixed(503, busy)) as lying,
        pytest.raises(CollectorUnavailable, match="503 overloaded: busy"),
    ):
        Analyst(lying.url, "t").estimates("theme")
    with LyingCollector(fixed(404, b"<html>no</html>")) as lying:
        with pytest.raises(CollectorRejected, match="ldpkit metrics") as caught:
            Analyst(lying.url, "t").estimates("theme")
        assert caught.value.status == 404
