"""Faults: the collector killed with SIGKILL while clients send; an app killed mid-flush.

``test_collector_killed_while_clients_send`` (SQLite and PostgreSQL): ``ldpkit serve``
runs on a fixed port; four client threads send all the time: two post raw batches with
known report ids and values (each holds one batch until it is acknowledged, resending it
after any failure), two run the real :class:`~ldpkit.client.Reporter` (``simulate`` +
``flush`` with retries, one state_dir each). The collector is killed with SIGKILL four
times at random moments and restarted on the same port and database. At every kill,
read straight from the database: every report a client saw acknowledged is there, and
nothing a client never sent. At the end the clients deliver what they still hold, and the
stored totals equal exactly the reports sent: the ids, the aggregates' counts and sums
(each report counted once, with its own value), the collector's estimate n.

``test_app_killed_mid_flush``: an app (a subprocess running a Reporter) queues N reports
and flushes in small batches; it is killed with SIGKILL three times while batches are
being delivered and restarted on the same state_dir; the last run finishes the flush.
The collector then holds exactly N reports.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.collector.store import unpack_sums
from ldpkit.metrics import MetricDefinition

from ..readiness import HANG_GUARD
from .helpers import READ, RELAY, THEME, batch, block_of, definition, today

COLORS = [f"color{i}" for i in range(8)]
COLOR = MetricDefinition.from_dict(
    "color", {"categories": COLORS, "epsilon": 1.0, "mechanism": "oue"}
)
CONFIG = f"""
[collector]
host = "127.0.0.1"
shutdown_timeout = 20
catalog_refresh_seconds = 2
compact_seconds = 0.05  # folding nearly all the time: kills land during compaction too

[tokens]
relay = ["{RELAY}"]  # the tests send many devices' reports
read = ["{READ}"]

[metrics.theme]
categories = {json.dumps(THEME)}
epsilon = 1.0
mechanism = "grr"

[metrics.color]
categories = {json.dumps(COLORS)}
epsilon = 1.0
mechanism = "oue"
"""
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
CLI = (sys.executable, "-m", "ldpkit.cli")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class CollectorProcess:
    """``ldpkit serve`` on a fixed port and database, started again after each kill."""

    def __init__(self, workdir: Path, database: str, port: int) -> None:
        self.config = workdir / "collector.toml"
        self.config.write_text(CONFIG)
        self.workdir = workdir
        self.database = database
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self.starts = 0

    def start(self) -> None:
        command = [*CLI, "serve", "--config", str(self.config), "--port", str(self.port)]
        command += ["--database", self.database, "--no-access-log"]
        proc = subprocess.Popen(
            command,
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.proc = proc
        started = threading.Event()

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                if LISTENING.search(line):
                    started.set()

        threading.Thread(target=pump, daemon=True).start()
        while not started.wait(0.05):  # readiness: its address logged, or its exit
            if proc.poll() is not None:
                raise AssertionError("collector did not start:\n" + "".join(self.log[-30:]))
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def ensure_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# --- reading the database directly (the collector may be dead) -------------------------
@dataclass
class Stored:
    ids: set[bytes]
    n: dict[str, int]  # fingerprint -> reports over all buckets
    sums: dict[str, np.ndarray]


def read_store(database: str) -> Stored:
    """Stored ids (v1 report ids and sealed batch ids) and the counts and sums of the
    aggregates plus the partial rows not folded yet."""
    if database.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(database) as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            ids = {u.bytes for (u,) in conn.execute("SELECT id FROM report_ids")}
            ids |= {u.bytes for (u,) in conn.execute("SELECT id FROM batches")}
            rows = [(fp, n, np.asarray(s)) for fp, n, s in conn.execute(
                "SELECT fingerprint, n, sums FROM aggregates")]  # fmt: skip
            partials = conn.execute("SELECT fingerprint, n, sums FROM partials").fetchall()
    else:
        conn = sqlite3.connect(database)
        try:
            conn.execute("BEGIN")
            ids = {bytes(i) for (i,) in conn.execute("SELECT id FROM report_ids")}
            ids |= {bytes(i) for (i,) in conn.execute("SELECT id FROM batches")}
            rows = [
                (fp, n, np.frombuffer(s, "<f8"))
                for fp, n, s in conn.execute("SELECT fingerprint, n, sums FROM aggregates")
            ]
            partials = conn.execute("SELECT fingerprint, n, sums FROM partials").fetchall()
        finally:
            conn.close()
    rows += [(fp, n, unpack_sums(bytes(s))) for fp, n, s in partials]
    n: dict[str, int] = {}
    sums: dict[str, np.ndarray] = {}
    for fp, count, s in rows:
        n[fp] = n.get(fp, 0) + int(count)
        sums[fp] = sums[fp] + s if fp in sums else s.astype(float)
    return Stored(ids, n, sums)


# --- clients ---------------------------------------------------------------------------
@dataclass
class RawClient:
    """Posts batches of known reports; holds one batch until it is acknowledged. Sealed
    (v2): one id per batch; else v1, an id per report."""

    url: str
    seed: int
    stop: threading.Event
    sealed: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    values: dict[bytes, list[int]] = field(default_factory=dict)  # every report, by id
    acked: set[bytes] = field(default_factory=set)
    held: list[tuple[bytes, np.ndarray]] = field(default_factory=list)
    acks: int = 0
    duplicates: int = 0  # reports of a resent batch the collector already had
    failures: int = 0
    errors: list[str] = field(default_factory=list)

    def _post(self, ids: bytes, values: np.ndarray) -> tuple[int, Any] | None:
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            d = definition("theme")
            body = (
                wire.encode_sealed_batch(
                    ids, [wire.sealed_block("theme", d.fingerprint, today(), values.astype("<u4"))]
                )
                if self.sealed
                else batch(block_of("theme", values.astype("<u4"), ids=ids))
            )
            conn.request(
                "POST",
                "/v1/reports",
                body,
                {"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE},
            )
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        except (OSError, http.client.HTTPException, ValueError):
            return None
        finally:
            conn.close()

    def step(self, rng: np.random.Generator) -> None:
        with self.lock:
            if not self.held:
                k = int(rng.integers(50, 400))
                values = rng.integers(0, len(THEME), k)
                ids = os.urandom(16 * (1 if self.sealed else k))
                for i in range(0, len(ids), 16):
                    self.values[ids[i : i + 16]] = (
                        values.tolist() if self.sealed else [int(values[i // 16])]
                    )
                self.held.append((ids, values))
            ids, values = self.held[0]
        answer = self._post(ids, values)
        if answer is None or answer[0] in (429, 503):
            self.failures += 1
            time.sleep(0.02)
            return
        status, body = answer
        if (
            status != 200
            or body["rejected"]
            or body["accepted"] + body["duplicates"] != len(values)
        ):
            self.errors.append(f"{status} {body}")
            return
        with self.lock:
            self.acked.update(ids[i : i + 16] for i in range(0, len(ids), 16))
            self.held.pop(0)
            self.acks += 1
            self.duplicates += body["duplicates"]

    def run(self) -> None:
        rng = np.random.default_rng(self.seed)
        while not self.stop.is_set() and not self.errors:
            self.step(rng)

    def drain(self, deadline: float) -> None:
        rng = np.random.default_rng(self.seed + 1000)
        while self.held and not self.errors and time.monotonic() < deadline:
            self.step(rng)


@dataclass
class ReporterClient:
    """The real client SDK: queue with simulate(), deliver with flush() and its retries."""

    url: str
    state_dir: Path
    seed: int
    stop: threading.Event
    queued: int = 0
    unavailable: int = 0
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        from ldpkit.client import CollectorUnavailable, Reporter, RetryPolicy

        rng = np.random.default_rng(self.seed)
        retry = RetryPolicy(max_attempts=2, base_delay=0.02, max_delay=0.1)
        reporter = Reporter(
            self.url,
            token=RELAY,
            state_dir=self.state_dir,
            metrics=[COLOR],
            background=False,
            batch_size=250,
            retry=retry,
            timeout=10.0,
        )
        try:
            while not self.stop.is_set():
                if reporter.pending < 2000:
                    values = rng.choice(COLORS, int(rng.integers(100, 600)))
                    self.queued += reporter.simulate("color", values, rng=rng)
                try:
                    reporter.flush()
                except CollectorUnavailable:
                    self.unavailable += 1
                    time.sleep(0.02)
            deadline = time.monotonic() + HANG_GUARD  # delivery, however slow the machine
            while reporter.pending and time.monotonic() < deadline:
                try:
                    reporter.flush()
                except CollectorUnavailable:
                    time.sleep(0.05)
            if reporter.pending:
                self.errors.append(f"{reporter.pending} reports still queued")
        except Exception as exc:  # reported by the test
            self.errors.append(repr(exc))
        finally:
            reporter.close(flush=False)


# --- the test --------------------------------------------------------------------------
KILLS = 4


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_collector_killed_while_clients_send(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        database: str = request.getfixturevalue("fresh_pg_database")
    else:
        database = str(tmp_path / "collector.sqlite3")
    collector = CollectorProcess(tmp_path, database, free_port())
    stop = threading.Event()
    raw = [RawClient(collector.url, seed, stop, sealed=seed == 1) for seed in (1, 2)]
    reporters = [
        ReporterClient(collector.url, tmp_path / f"app{i}", 10 + i, stop) for i in range(2)
    ]
    threads = [threading.Thread(target=c.run, daemon=True) for c in (*raw, *reporters)]
    rnd = random.Random(f"kills-{backend}")
    theme_fp = definition("theme").fingerprint
    theme_mech = definition("theme").mechanism_instance
    try:
        collector.start()
        for t in threads:
            t.start()
        for kill in range(KILLS):
            time.sleep(rnd.uniform(0.4, 1.2))  # clients sending, batches being committed
            collector.kill()
            time.sleep(0.3)  # answers already on the wire reach their clients
            stored = read_store(database)  # then what the clients made (it only grows)
            made: dict[bytes, list[int]] = {}
            for c in raw:
                with c.lock:
                    # Every acknowledged report survived the kill.
                    assert c.acked <= stored.ids, f"kill {kill}: acknowledged reports lost"
                    made.update(c.values)
            queued = sum(r.queued for r in reporters)
            theme = [v for i in stored.ids if i in made for v in made[i]]
            n_theme, n_color = stored.n.get(theme_fp, 0), stored.n.get(COLOR.fingerprint, 0)
            # The ids and the aggregates agree: the raw clients' stored reports are counted
            # once each, with their values; the Reporters' no more than they queued.
            assert n_theme == len(theme)
            if theme:
                expected = theme_mech.aggregate(np.array(theme, dtype="<u4")).sums
                np.testing.assert_array_equal(stored.sums[theme_fp], expected)
            assert n_color <= queued
            time.sleep(rnd.uniform(0.0, 0.3))  # clients find it down and retry
            collector.start()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=90)
        deadline = time.monotonic() + HANG_GUARD
        for c in raw:
            c.drain(deadline)
        for c in (*raw, *reporters):
            assert not c.errors, c.errors
        assert all(not c.held for c in raw)

        stored = read_store(database)
        made = {rid: v for c in raw for rid, v in c.values.items()}
        every = [v for values in made.values() for v in values]
        queued = sum(r.queued for r in reporters)
        expected_sums = theme_mech.aggregate(np.array(every, dtype="<u4")).sums
        # Exactly the reports made, each once: ids, counts and sums.
        assert stored.n[theme_fp] == len(every)
        assert stored.n[COLOR.fingerprint] == queued
        assert set(made) <= stored.ids
        np.testing.assert_array_equal(stored.sums[theme_fp], expected_sums)
        for name, n in (("theme", len(every)), ("color", queued)):
            assert _estimate_n(collector.url, name) == n
        assert collector.starts == KILLS + 1
        assert sum(c.acks for c in raw) > 2 * KILLS  # the clients did work between kills
        assert sum(c.failures for c in raw) + sum(r.unavailable for r in reporters) > 0
        assert collector.stop() == 0
        print(
            f"\n{backend}: {KILLS} SIGKILLs; raw clients {len(every):,} reports in "
            f"{sum(c.acks for c in raw)} acknowledged batches ({sum(c.failures for c in raw)} "
            f"failed attempts, {sum(c.duplicates for c in raw)} reports already stored when "
            f"resent); Reporters {queued:,} reports "
            f"({sum(r.unavailable for r in reporters)} flushes gave up); all stored once"
        )
    finally:
        stop.set()
        collector.ensure_dead()


# --- an app killed mid-flush -----------------------------------------------------------
APP = textwrap.dedent(
    """
    import sys
    from ldpkit.client import Reporter, RetryPolicy
    from ldpkit.metrics import MetricDefinition
    import numpy as np

    url, state_dir, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    color = MetricDefinition.from_dict("color", {spec!r})
    reporter = Reporter(
        url, token={token!r}, state_dir=state_dir, metrics=[color], background=False,
        batch_size=40, retry=RetryPolicy(max_attempts=50, base_delay=0.02, max_delay=0.2),
    )
    if mode == "queue":
        rng = np.random.default_rng(7)
        queued = reporter.simulate("color", rng.choice({colors!r}, n), rng=rng)
        print("queued", queued, flush=True)
    print("flushing", reporter.pending, flush=True)
    result = reporter.flush()
    print("done", reporter.pending, result.sent, result.duplicates, flush=True)
    reporter.close(flush=False)
    """
).format(
    spec={"categories": COLORS, "epsilon": 1.0, "mechanism": "oue"},
    token=RELAY,
    colors=COLORS,
)


def _estimate_n(url: str, name: str) -> int:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", f"/v1/estimates/{name}", headers={"Authorization": f"Bearer {READ}"})
        return int(json.loads(conn.getresponse().read())["n"])
    finally:
        conn.close()


def test_app_killed_mid_flush(tmp_path: Path) -> None:
    n = 8000
    collector = CollectorProcess(tmp_path, str(tmp_path / "collector.sqlite3"), free_port())
    app = tmp_path / "app.py"
    app.write_text(APP)
    state_dir = tmp_path / "state"
    try:
        collector.start()
        seen: list[int] = []
        for run, mode in enumerate(["queue", "flush", "flush"]):
            proc = subprocess.Popen(
                [sys.executable, str(app), collector.url, str(state_dir), mode, str(n)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            while not line.startswith("flushing"):
                assert line, proc.communicate()[1]
                line = proc.stdout.readline()
            # Kill it once a few more batches have been delivered: mid-flush.
            target = min(n - 400, (run + 1) * n // 4)
            while _estimate_n(collector.url, "color") < target:
                assert proc.poll() is None, "the app finished before it could be killed"
                time.sleep(0.002)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
            assert proc.returncode == -signal.SIGKILL
            seen.append(_estimate_n(collector.url, "color"))
        assert seen[0] < seen[1] < seen[2] < n  # each run delivered some, none all
        done = subprocess.run(
            [sys.executable, str(app), collector.url, str(state_dir), "flush", str(n)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        last = done.stdout.splitlines()[-1].split()
        assert last[:2] == ["done", "0"], done.stdout  # nothing left in the outbox
        stored = read_store(collector.database)
        assert _estimate_n(collector.url, "color") == n == stored.n[COLOR.fingerprint]
        assert collector.stop() == 0
        print(f"\napp killed at {seen} of {n} reports delivered; the 4th run: {last}")
    finally:
        collector.ensure_dead()
