"""``ldpkit serve`` as a real process: HTTP, SIGTERM with batches in flight, data kept."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ldpkit import wire
from tests.harness import running_collector

from .helpers import ADMIN, READ, THEME, batch, block_of, definition

ENV_RELAY = "relay-from-env-42"  # the tests send many devices' reports
CONFIG = f"""
[collector]
database = "data/collector.sqlite3"
shutdown_timeout = 20

[tokens]
read = ["{READ}"]
admin = ["{ADMIN}"]

[metrics.theme]
categories = {json.dumps(THEME)}
epsilon = 1.0
mechanism = "grr"
"""


@contextmanager
def serve(tmp_path: Path, *command: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    config = tmp_path / "collector.toml"
    config.write_text(CONFIG)
    (tmp_path / "data").mkdir(exist_ok=True)  # serve refuses to create a missing folder
    env = {**os.environ, "LDPKIT_RELAY_TOKENS": ENV_RELAY}
    with running_collector(config, cwd=tmp_path, env=env, command=command) as collector:
        yield collector.process, collector.url


def request(
    url: str, method: str = "GET", body: bytes | None = None, token: str = READ
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = wire.CONTENT_TYPE
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post(url: str, ids: bytes, values: np.ndarray) -> int | None:
    """Accepted count, or None if the collector did not answer (then nothing is promised)."""
    try:
        status, answer = request(
            url + "/v1/reports", "POST", batch(block_of("theme", values, ids=ids)), ENV_RELAY
        )
    except OSError:
        return None
    assert status == 200, answer
    return int(answer["accepted"])


def test_serve_and_sigterm_keeps_every_acknowledged_report(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    sent: list[tuple[bytes, int | None]] = []
    with serve(tmp_path, sys.executable, "-m", "ldpkit.cli") as (proc, url):
        assert request(url + "/healthz")[0] == 200
        assert request(url + "/readyz")[0] == 200
        status, listing = request(url + "/v1/metrics", token=ENV_RELAY)
        assert (
            status == 200
            and listing["metrics"][0]["fingerprint"] == definition("theme").fingerprint
        )
        first = os.urandom(16 * 100)
        assert post(url, first, rng.integers(0, 4, 100).astype("<u4")) == 100
        sent.append((first, 100))

        # Batches in flight while SIGTERM arrives.
        payloads = [
            (os.urandom(16 * 2000), rng.integers(0, 4, 2000).astype("<u4")) for _ in range(24)
        ]
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(post, url, ids, values) for ids, values in payloads]
            futures[0].result()
            proc.send_signal(signal.SIGTERM)
            answers = [f.result() for f in futures]
        sent.extend((ids, a) for (ids, _), a in zip(payloads, answers, strict=True))
        assert proc.wait(timeout=30) == 0
        assert sum(a is not None for a in answers) >= 1

    conn = sqlite3.connect(tmp_path / "data" / "collector.sqlite3")
    try:
        stored = {row[0] for row in conn.execute("SELECT id FROM report_ids")}
        (n,) = conn.execute(
            "SELECT (SELECT COALESCE(SUM(n), 0) FROM aggregates) "
            "+ (SELECT COALESCE(SUM(n), 0) FROM partials)"
        ).fetchone()
    finally:
        conn.close()
    acknowledged = [ids for ids, accepted in sent if accepted is not None]
    for ids in acknowledged:  # every report the collector acknowledged is durable
        assert all(ids[i : i + 16] in stored for i in range(0, len(ids), 16))
    assert n == len(stored) >= sum(len(ids) // 16 for ids in acknowledged)

    # The console script, on the same database: everything is still there.
    script = Path(sys.executable).with_name("ldpkit")
    with serve(tmp_path, str(script)) as (proc, url):
        status, est = request(url + "/v1/estimates/theme")
        assert status == 200 and est["n"] == n
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0


def metric_value(url: str, name: str) -> float:
    """One unlabelled series of the collector's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=20) as resp:
        text = resp.read().decode()
    (value,) = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


def test_a_body_half_sent_when_sigterm_comes_is_read_and_kept(tmp_path: Path) -> None:
    """aiohttp's graceful stop drops every byte a connection receives after it begins, so a
    batch whose head came before SIGTERM and its body after waited out ``upload_grace``
    and was answered 408 "the body arrived slower than..." (CI saw it). It is read and
    acknowledged, and stored."""
    config = tmp_path / "collector.toml"
    config.write_text(CONFIG.replace("shutdown_timeout = 20", "shutdown_timeout = 60"))
    (tmp_path / "data").mkdir()
    env = {**os.environ, "LDPKIT_RELAY_TOKENS": ENV_RELAY}
    ids = os.urandom(16 * 500)
    body = batch(block_of("theme", np.arange(500, dtype="<u4") % 4, ids=ids))
    head = (
        "POST /v1/reports HTTP/1.1\r\nHost: collector\r\n"
        f"Authorization: Bearer {ENV_RELAY}\r\nContent-Type: {wire.CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with running_collector(config, cwd=tmp_path, env=env) as collector:
        host, port = collector.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(head + body[: len(body) // 2])
            while metric_value(collector.url, "ldpkit_request_bodies_receiving") < 1:
                time.sleep(0.01)  # until the collector is reading this body
            collector.process.send_signal(signal.SIGTERM)
            while not any("SIGTERM received" in line for line in collector.log):
                time.sleep(0.01)
            sock.sendall(body[len(body) // 2 :])
            answer = sock.makefile("rb").read()  # the collector closes after answering
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line.split()[1] == b"200", answer
        assert json.loads(rest.partition(b"\r\n\r\n")[2])["accepted"] == 500
        assert collector.process.wait(timeout=60) == 0
    conn = sqlite3.connect(tmp_path / "data" / "collector.sqlite3")
    try:
        stored = {row[0] for row in conn.execute("SELECT id FROM report_ids")}
    finally:
        conn.close()
    assert all(ids[i : i + 16] in stored for i in range(0, len(ids), 16))


def test_cli_usage_and_errors(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "ldpkit.collector"]
    out = subprocess.run([*cli, "--help"], capture_output=True, text=True, check=True)
    assert "serve" in out.stdout
    out = subprocess.run(
        [*cli, "serve", "--config", str(tmp_path / "missing.toml")], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "cannot read config file" in out.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[collector]\nport = 'x'\n")
    out = subprocess.run([*cli, "serve", "--config", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2 and "[collector] port" in out.stderr and str(bad) in out.stderr


def test_subcommand_table_is_extensible() -> None:
    from ldpkit import cli

    calls: list[int] = []

    @cli.command("probe-test", "a test subcommand", lambda p: p.add_argument("--n", type=int))
    def probe(args: Any) -> int:
        calls.append(args.n)
        return 3

    try:
        assert cli.main(["probe-test", "--n", "7"]) == 3
        assert calls == [7]
    finally:
        del cli.COMMANDS["probe-test"]
