"""Clients that wait honestly (issue 27): the Analyst and `ldpkit estimates` against a
collector that stalls, one that answers slowly, one that answers ``202 computing``, and a
real one whose maintained estimates are older than its data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit.analyst import Analyst, EstimateResult
from ldpkit.client import Reporter
from ldpkit.collector.launcher import environment_without_tokens, running_collector
from ldpkit.errors import CollectorTimedOut, CollectorUnavailable, EstimatePending
from ldpkit.http import Timeout
from tests.readiness import HANG_GUARD, wait_until

from .conftest import READ, RELAY, stale_config

ANSWER = {
    "metric": "theme",
    "kind": "categorical",
    "version": "0123456789abcdef",
    "mechanism": "grr",
    "epsilon": 1.0,
    "n": 10,
    "level": 0.95,
    "items": [{"category": "dark", "estimate": 0.5, "stderr": 0.1, "low": 0.3, "high": 0.7}],
}


def ldpkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    return subprocess.run(
        [sys.executable, "-m", "ldpkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,  # a hang, not a slow machine: some calls --wait 120
        env={**clean, **(env or {})},
    )


@pytest.fixture
def stalled() -> Iterator[str]:
    """A collector that accepts connections and reads requests but never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    done.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


class Scripted(ThreadingHTTPServer):
    """Answers each GET with the next of ``script`` (status, headers, body, delay event);
    ``paths`` records what was asked."""

    def __init__(self, script: list[tuple[int, dict[str, str], dict[str, Any]]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.paths: list[str] = []
        self.release = threading.Event()
        self.delay_first = False


class _Handler(BaseHTTPRequestHandler):
    server: Scripted

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        if self.server.delay_first and len(self.server.paths) == 1:
            self.server.release.wait(30)
        status, headers, body = self.server.script[
            min(len(self.server.paths), len(self.server.script)) - 1
        ]
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json"}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def scripted(script: list[tuple[int, dict[str, str], dict[str, Any]]]) -> Scripted:
    server = Scripted(script)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_stalled_collector_is_said_to_be_slow_not_gone(stalled: str) -> None:
    """The read timeout's message: the collector is there and did not answer in time,
    with the timeout that ran out; --timeout and $LDPKIT_TIMEOUT set it."""
    out = ldpkit("estimates", "theme", "--collector", stalled, "--token", READ, "--timeout", "1")
    assert out.returncode != 0
    assert "did not answer in time" in out.stderr and "1 s read timeout" in out.stderr
    assert "is `ldpkit serve` running" not in out.stderr
    assert "--timeout" in out.stderr  # what to do about it
    env = {"LDPKIT_TIMEOUT": "1.5"}
    out = ldpkit("estimates", "theme", "--collector", stalled, "--token", READ, env=env)
    assert out.returncode != 0 and "1.5 s read timeout" in out.stderr
    with pytest.raises(CollectorTimedOut) as caught:
        Analyst(stalled, READ, timeout=Timeout(5.0, 0.5)).estimates("theme")
    assert caught.value.seconds == 0.5


def test_a_collector_that_is_not_there_is_said_to_be_unreachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}"
    out = ldpkit("estimates", "theme", "--collector", url, "--token", READ, "--timeout", "5")
    assert out.returncode != 0
    assert "cannot reach the collector" in out.stderr and "did not answer in time" not in out.stderr
    with pytest.raises(CollectorUnavailable) as caught:
        Analyst(url, READ).estimates("theme")
    assert not isinstance(caught.value, CollectorTimedOut)


def test_bad_timeouts_are_refused_with_the_flag_named() -> None:
    for flag in ("0", "-1", "soon", "inf"):
        out = ldpkit("estimates", "theme", "--token", READ, "--timeout", flag)
        assert out.returncode == 2 and "--timeout takes a number of seconds" in out.stderr
    out = ldpkit("estimates", "theme", "--token", READ, env={"LDPKIT_TIMEOUT": "x"})
    assert out.returncode == 2 and "$LDPKIT_TIMEOUT" in out.stderr


def test_a_slow_answer_within_the_timeout_is_read() -> None:
    server = scripted([(200, {}, ANSWER)])
    server.delay_first = True
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        timer = threading.Timer(1.0, server.release.set)
        timer.start()
        out = ldpkit("estimates", "theme", "--collector", url, "--token", READ, "--timeout", "60")
        assert out.returncode == 0, out.stderr
        assert "dark" in out.stdout
    finally:
        server.shutdown()


def test_computing_is_asked_again_while_the_wait_lasts() -> None:
    computing = (
        202,
        {"Retry-After": "1"},
        {"error": "computing", "detail": "ask again in 1 s", "retry_after": 1},
    )
    fresh = {
        **ANSWER,
        "as_of": {
            "n": 10,
            "buckets": 1,
            "computed_at": 1_763_715_600.0,
            "age_seconds": 0.5,
            "reports_since": 0,
            "fresh": True,
        },
    }
    server = scripted([computing, computing, (200, {}, fresh)])
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        result = Analyst(url, READ).estimates("theme", wait=60)
        assert len(server.paths) == 3 and all("wait=" in p for p in server.paths)
        assert result.as_of is not None and result.as_of.fresh and result.as_of.n == 10
        assert "fresh" in result.to_table().splitlines()[-1]
        server.paths.clear()
        server.script = [computing]
        with pytest.raises(EstimatePending) as caught:
            Analyst(url, READ).estimates("theme")  # no wait: one question, one answer
        assert caught.value.retry_after == 1 and len(server.paths) == 1
        assert "wait=" not in server.paths[0]
    finally:
        server.shutdown()


def test_a_stale_maintained_estimate_says_so_and_wait_gets_the_fresh_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "collector.toml").write_text(stale_config("latency", 100.0, 32))
    env = environment_without_tokens()
    rng = np.random.default_rng(2027)
    with running_collector("collector.toml", cwd=tmp_path, env=env) as collector:
        analyst = Analyst(collector.url, READ, timeout=30)
        with Reporter(
            collector.url, token=RELAY, state_dir=tmp_path / "device", background=False
        ) as r:
            r.refresh_definitions()
            r.simulate("latency", rng.uniform(0, 100, 500), rng=rng)
            assert r.flush().remaining == 0
            first = analyst.estimates("latency", wait=120)
            assert first.as_of is not None and first.as_of.fresh and first.n == 500
            sent, answers = 500, list[EstimateResult]()

            def stale_answer() -> bool:
                """40 more reports, then an answer: the latest estimate, stale, unless
                STALE_INTERVAL passed since the last computation first (a slow machine:
                the collector computed again; then once more)."""
                nonlocal sent
                r.simulate("latency", rng.uniform(0, 100, 40), rng=rng)
                assert r.flush().remaining == 0
                sent += 40
                answers.append(analyst.estimates("latency"))
                as_of = answers[-1].as_of
                assert as_of is not None and as_of.n + as_of.reports_since == sent
                return not as_of.fresh

            wait_until(stale_answer, "an answer older than its data")
        stale, was = answers[-1], sent - 40
        assert stale.as_of is not None and not stale.as_of.fresh
        assert (stale.n, stale.as_of.n, stale.as_of.reports_since) == (was, was, 40)
        line = stale.to_table().splitlines()[-1]
        assert f"computed from {was} reports; 40 received since" in line and "wait=" in line
        out = ldpkit(
            "estimates", "latency", "--collector", collector.url, "--token", READ,
            "--wait", "120", "--timeout", "30",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert f"n={sent}" in out.stdout and f"computed from {sent} reports: fresh" in out.stdout
