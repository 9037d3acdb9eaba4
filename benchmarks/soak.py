"""Soak test: sustained ingest into a real ``ldpkit serve`` process for a while, watching
its throughput, latency, memory and open files over time.

    .venv/bin/python benchmarks/soak.py                           # 5 minutes, 20,000 reports/s
    .venv/bin/python benchmarks/soak.py --minutes 2 --rate 0      # as fast as it goes
    .venv/bin/python benchmarks/soak.py --database postgresql://postgres@127.0.0.1/soak
    .venv/bin/python benchmarks/soak.py --minutes 10 --slow-senders 16 --unknown-rate 10

With ``--slow-senders N`` the load also has N hostile connections, each announcing a
body of ``max_body_bytes`` and sending one byte a second (the collector cuts them with
408 after ``upload_grace``; they reconnect at once), and with ``--unknown-rate R`` a
stream of R batches a second naming metrics that do not exist. Neither counts in the
legitimate figures; the verdict then also wants the legitimate batch p99 under 1 s.

The collector runs on loopback (SQLite in a temporary directory unless ``--database``,
default durability). The load generator (this process, aiohttp) keeps ``--concurrency``
sealed batches (wire v2, as the client sends them) of ``--batch`` GRR reports in flight,
each with a fresh batch id, paced to ``--rate``
reports per second (0: no pacing). A 429 is honoured (its ``Retry-After``) and counted;
any other non-200 answer or network error is an error.

Every ``--interval`` seconds one row: reports/s accepted in the interval, batch latency
p50 and p99, the collector's RSS (``VmRSS`` of /proc/PID/status, read every 0.25 s: the
lowest reading of the interval, its floor, and the highest, which includes transient
buffers of large group commits), its open descriptors (/proc/PID/fd: files, pipes...
and sockets counted apart), threads, and the size of the database's data (SQLite:
page_count x page_size; PostgreSQL: pg_database_size). At the end a verdict over the
second half of the run (the first half is warm-up):

- memory flat: the RSS floor (a leak raises it; a transient peak does not) grows, over
  the second half, by less than max(8 MiB, 5 %) beyond what the SQLite page cache may
  have grown. The SQLite store caches database pages in the collector's memory, up to
  ``sqlite_cache_mib`` (256 by default): until the database is that large, the cache
  grows with it (bounded; a leak is not), so the allowance is the growth of min(data,
  sqlite_cache_mib) in that time, times 2 for the allocator (measured 1.3-1.8).
  ``--sqlite-cache-mib 8`` leaves next to no allowance. With PostgreSQL the cache is the
  server's: the RSS itself must be flat;
- open files flat: descriptors other than sockets vary by at most 4 over the second
  half, and sockets never exceed the load's connections (``--concurrency``) plus 4
  (the number of connections in use grows with the latency, up to that);
- RSS plateau: the highest reading of the second half is at most 1.1 times the highest
  of the first half;
- no errors for the legitimate load (with hostile load: and its p99 under 1 s).

The exit code is 0 when all of them hold. ``tests/collector/test_soak.py`` runs a 15 s
version through :func:`run_soak`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldpkit import wire
from ldpkit.collector.launcher import environment_without_tokens, running_collector
from ldpkit.metrics import MetricDefinition, Period

RELAY, READ = "soak-relay", "soak-read"  # a relay: many devices' reports in a batch
CATEGORIES = [f"item{i}" for i in range(16)]
MIB = 2**20
RSS_TICK = 0.25  # seconds between RSS readings


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the start
    reports_per_s: float
    p50_ms: float
    p99_ms: float
    rss_mib: float  # the lowest reading in the interval (read every 0.25 s): the floor
    rss_peak_mib: float  # the highest (transient buffers of large group commits)
    open_files: int  # not sockets
    sockets: int
    threads: int
    database_mib: float
    throttled: int  # 429s in the interval
    errors: int  # in the interval
    slow_cut: int = 0  # hostile slow uploads cut by the collector in the interval
    unknown_sent: int = 0  # batches naming unknown metrics sent in the interval


@dataclass
class Verdict:
    rss_growth_mib: float  # fitted growth over the second half
    database_growth_mib: float
    cache_allowance_mib: float  # the database's growth if the collector caches its pages
    rss_tolerance_mib: float
    rss_slope_mib_per_min: float
    open_files_range: int
    max_sockets: int
    socket_bound: int  # the load's connections, the listening socket(s), a margin
    errors: int
    first_half_peak_mib: float = 0.0
    second_half_peak_mib: float = 0.0
    p99_ms: float = 0.0
    p99_bound_ms: float | None = None  # with hostile load: the legitimate p99 must be below

    @property
    def memory_flat(self) -> bool:
        excess = self.rss_growth_mib - self.cache_allowance_mib
        return excess <= self.rss_tolerance_mib

    @property
    def rss_plateau(self) -> bool:
        return self.second_half_peak_mib <= 1.1 * self.first_half_peak_mib

    @property
    def latency_ok(self) -> bool:
        return self.p99_bound_ms is None or self.p99_ms < self.p99_bound_ms

    @property
    def open_files_flat(self) -> bool:
        return self.open_files_range <= 4 and self.max_sockets <= self.socket_bound

    @property
    def ok(self) -> bool:
        return (
            self.memory_flat
            and self.rss_plateau
            and self.open_files_flat
            and self.latency_ok
            and self.errors == 0
        )


@dataclass
class SoakResult:
    samples: list[Sample]
    verdict: Verdict
    reports: int
    seconds: float
    p99_ms: float
    throttled: int
    errors: list[str] = field(default_factory=list)
    exit_code: int | None = None  # the collector's, after SIGTERM
    slow_cut: int = 0  # hostile slow uploads the collector cut (408 or closed)
    slow_held_open: int = 0  # of which none answered but the connection closed
    unknown_sent: int = 0
    unknown_refused: int = 0  # answered 200 with every report rejected unknown_metric
    hostile_errors: list[str] = field(default_factory=list)


# --- the collector process -------------------------------------------------------------
def proc_status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def rss_mib(pid: int) -> float:
    return int(proc_status(pid)["VmRSS"].split()[0]) * 1024 / MIB


def open_files(pid: int) -> tuple[int, int]:
    """(descriptors that are not sockets: database files, pipes, epoll...; sockets)."""
    files = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:"):
            sockets += 1
        else:
            files += 1
    return files, sockets


def database_size(database: str) -> Callable[[], float]:
    """A function answering the size of the database's data in MiB."""
    if database.startswith(("postgresql://", "postgres://")):
        import psycopg

        conn = psycopg.connect(database, autocommit=True)

        def pg() -> float:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return float(row[0]) / MIB if row else 0.0

        return pg

    def sqlite() -> float:
        # Pages of the database as committed (WAL included), not the files' sizes: the
        # WAL file is reused once it reached its checkpoint size.
        try:
            conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
        except sqlite3.Error:
            return 0.0
        try:
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (size,) = conn.execute("PRAGMA page_size").fetchone()
            return float(pages * size) / MIB
        except sqlite3.Error:
            return 0.0
        finally:
            conn.close()

    return sqlite


def write_config(path: Path, database: str, sqlite_cache_mib: int | None) -> None:
    lines = [
        "[collector]",
        f"database = {json.dumps(database)}",
        *([f"sqlite_cache_mib = {sqlite_cache_mib}"] if sqlite_cache_mib else []),
        "",
        "[tokens]",
        f'relay = ["{RELAY}"]',
        f'read = ["{READ}"]',
        "",
        "[metrics.soak]",
        f"categories = {json.dumps(CATEGORIES)}",
        "epsilon = 1.0",
        'mechanism = "grr"',
    ]
    path.write_text("\n".join(lines) + "\n")


# --- the load --------------------------------------------------------------------------
def template(batch: int) -> tuple[bytes, int, int, Callable[[], bytes]]:
    """One sealed (wire v2) batch, the offsets of its batch id and of its reports, and a
    call giving fresh reports of the same values (each send: a fresh id and fresh reports;
    a batch sent again with a new id is no honest population, and screening holds it)."""
    d = MetricDefinition.from_dict(
        "soak", {"categories": CATEGORIES, "epsilon": 1.0, "mechanism": "grr"}
    )
    rng = np.random.default_rng(1)
    values = rng.integers(0, len(CATEGORIES), batch)
    reports = d.mechanism_instance.perturb(values, rng=rng)
    marker = os.urandom(wire.ID_SIZE)
    bucket = Period.DAY.start(time.time())
    body = wire.encode_sealed_batch(
        marker, [wire.sealed_block("soak", d.fingerprint, bucket, reports)]
    )
    fresh = lambda: d.mechanism_instance.perturb(values, rng=rng).tobytes()  # noqa: E731
    return body, body.index(marker), body.index(reports.tobytes()), fresh


@dataclass
class Counters:
    accepted: int = 0
    throttled: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    error_texts: list[str] = field(default_factory=list)
    slow_cut: int = 0
    slow_closed: int = 0
    unknown_sent: int = 0
    unknown_refused: int = 0
    hostile_errors: list[str] = field(default_factory=list)


SLOW_BODY = 16 * MIB  # what a slow sender announces (the default max_body_bytes)


async def slow_sender(url: str, counters: Counters, stop_at: float) -> None:
    """A hostile upload: announce a large body, then send a byte a second; when the
    collector answers (408) or closes, start again."""
    host, _, port = url.removeprefix("http://").partition(":")
    head = (
        f"POST /v1/reports HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {RELAY}\r\n"
        f"Content-Type: {wire.CONTENT_TYPE}\r\nContent-Length: {SLOW_BODY}\r\n\r\n"
    ).encode()
    while time.perf_counter() < stop_at:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError as exc:
            counters.hostile_errors.append(f"slow sender: {exc!r}")
            await asyncio.sleep(1.0)
            continue
        try:
            writer.write(head + b"\x82")
            answered = asyncio.ensure_future(reader.read(65536))
            while time.perf_counter() < stop_at and not answered.done():
                await asyncio.wait([answered], timeout=1.0)
                if not answered.done():
                    writer.write(b"\xa1")
                    await writer.drain()
            if answered.done():
                data = answered.result()
                counters.slow_cut += 1
                if not data.startswith(b"HTTP/1.1 408"):
                    counters.slow_closed += 1
            else:
                answered.cancel()
        except OSError:
            counters.slow_cut += 1
            counters.slow_closed += 1
        finally:
            writer.close()


def unknown_batch() -> bytes:
    name = "nosuch" + os.urandom(4).hex()
    bucket = Period.DAY.start(time.time())
    block = wire.Block(name, os.urandom(8).hex(), bucket, b"", b"\0" * 4, 1)
    return wire.encode_sealed_batch(os.urandom(wire.ID_SIZE), [block])


async def _soak(
    url: str,
    pid: int,
    database: str,
    *,
    seconds: float,
    rate: float,
    batch: int,
    concurrency: int,
    interval: float,
    cache_mib: float,
    echo: Callable[[str], None],
    slow_senders: int = 0,
    unknown_rate: float = 0.0,
) -> SoakResult:
    import aiohttp

    body_t, offset, reports_at, fresh = template(batch)
    id_bytes = wire.ID_SIZE
    headers = {"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE}
    counters = Counters()
    started = time.perf_counter()
    stop_at = started + seconds
    next_due = started
    gap = batch / rate if rate > 0 else 0.0
    size_of = database_size(database)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_due
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                return
            if gap:
                due, next_due = next_due, max(next_due, now - 1.0) + gap
                if due > now:
                    await asyncio.sleep(due - now)
            body = bytearray(body_t)
            body[offset : offset + id_bytes] = os.urandom(id_bytes)
            reports = fresh()
            body[reports_at : reports_at + len(reports)] = reports
            t0 = time.perf_counter()
            try:
                async with session.post(url + "/v1/reports", data=bytes(body)) as resp:
                    payload = await resp.read()
                    status = resp.status
                    retry = resp.headers.get("Retry-After", "1")
            except (aiohttp.ClientError, OSError) as exc:
                counters.errors += 1
                counters.error_texts.append(repr(exc))
                await asyncio.sleep(0.1)
                continue
            if status == 429:
                counters.throttled += 1
                await asyncio.sleep(float(retry))
                continue
            if status != 200:
                counters.errors += 1
                counters.error_texts.append(f"{status}: {payload[:200]!r}")
                continue
            counters.latencies.append(time.perf_counter() - t0)
            counters.accepted += json.loads(payload)["accepted"]

    async def unknown_stream(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < stop_at:
            await asyncio.sleep(1.0 / unknown_rate)
            counters.unknown_sent += 1
            try:
                async with session.post(url + "/v1/reports", data=unknown_batch()) as resp:
                    payload = await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, OSError) as exc:
                counters.hostile_errors.append(f"unknown batch: {exc!r}")
                continue
            rejected = json.loads(payload).get("rejected", []) if status == 200 else []
            if status == 200 and [r["error"] for r in rejected] == ["unknown_metric"]:
                counters.unknown_refused += 1
            else:
                counters.hostile_errors.append(f"unknown batch: {status} {payload[:200]!r}")

    samples: list[Sample] = []
    all_latencies: list[float] = []

    async def sampler() -> None:
        last_t, last_accepted, last_throttled, last_errors = started, 0, 0, 0
        last_cut, last_unknown = 0, 0
        hostile = slow_senders or unknown_rate
        echo(
            f"{'t s':>6} {'reports/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'RSS MiB':>8} {'peak':>6} "
            f"{'files':>5} {'sockets':>7} {'threads':>7} {'db MiB':>7} {'429s':>5} "
            f"{'errors':>6}" + (f" {'cut':>5} {'unknown':>7}" if hostile else "")
        )
        while True:
            readings = []
            while (left := last_t + interval - time.perf_counter()) > 0:
                readings.append(rss_mib(pid))
                await asyncio.sleep(min(RSS_TICK, left))
            readings.append(rss_mib(pid))
            now = time.perf_counter()
            lat = np.array(counters.latencies) * 1000
            all_latencies.extend(counters.latencies)
            counters.latencies = []
            status = proc_status(pid)
            files, sockets = open_files(pid)
            sample = Sample(
                t=now - started,
                reports_per_s=(counters.accepted - last_accepted) / (now - last_t),
                p50_ms=float(np.percentile(lat, 50)) if lat.size else float("nan"),
                p99_ms=float(np.percentile(lat, 99)) if lat.size else float("nan"),
                rss_mib=min(readings),
                rss_peak_mib=max(readings),
                open_files=files,
                sockets=sockets,
                threads=int(status["Threads"]),
                database_mib=size_of(),
                throttled=counters.throttled - last_throttled,
                errors=counters.errors - last_errors,
                slow_cut=counters.slow_cut - last_cut,
                unknown_sent=counters.unknown_sent - last_unknown,
            )
            samples.append(sample)
            echo(
                f"{sample.t:>6.0f} {sample.reports_per_s:>10,.0f} {sample.p50_ms:>7.1f} "
                f"{sample.p99_ms:>7.1f} {sample.rss_mib:>8.1f} {sample.rss_peak_mib:>6.1f} "
                f"{sample.open_files:>5} "
                f"{sample.sockets:>7} {sample.threads:>7} {sample.database_mib:>7.1f} "
                f"{sample.throttled:>5} "
                f"{sample.errors:>6}"
                + (f" {sample.slow_cut:>5} {sample.unknown_sent:>7}" if hostile else "")
            )
            last_t, last_accepted = now, counters.accepted
            last_throttled, last_errors = counters.throttled, counters.errors
            last_cut, last_unknown = counters.slow_cut, counters.unknown_sent
            if now >= stop_at:
                return

    connector = aiohttp.TCPConnector(limit=concurrency)
    extra = aiohttp.TCPConnector(limit=4)
    async with (
        aiohttp.ClientSession(connector=connector, headers=headers) as session,
        aiohttp.ClientSession(connector=extra, headers=headers) as side,
    ):
        watch = asyncio.create_task(sampler())
        attacks = [slow_sender(url, counters, stop_at) for _ in range(slow_senders)]
        if unknown_rate > 0:
            attacks.append(unknown_stream(side))
        await asyncio.gather(*(worker(session) for _ in range(concurrency)), *attacks)
        await watch
    elapsed = time.perf_counter() - started
    p99 = float(np.percentile(np.array(all_latencies) * 1000, 99)) if all_latencies else 0.0
    sockets = concurrency + slow_senders + (4 if unknown_rate > 0 else 0) + 4
    verdict = judge(samples, counters.errors, cache_mib=cache_mib, socket_bound=sockets)
    verdict.p99_ms = p99
    verdict.p99_bound_ms = 1000.0 if slow_senders or unknown_rate else None
    return SoakResult(
        samples=samples,
        verdict=verdict,
        reports=counters.accepted,
        seconds=elapsed,
        p99_ms=p99,
        throttled=counters.throttled,
        errors=counters.error_texts[:20],
        slow_cut=counters.slow_cut,
        slow_held_open=counters.slow_closed,
        unknown_sent=counters.unknown_sent,
        unknown_refused=counters.unknown_refused,
        hostile_errors=counters.hostile_errors[:20],
    )


CACHE_OVERHEAD = 2.0
"""RSS per MiB of database pages in the SQLite page cache, as a bound. Measured: SQLite's
own count of its memory (sqlite3_memory_used) equals the data cached, and the RSS grows
1.3-1.8 times as much while the cache fills (the allocator: buffers of each commit freed
between long-lived cache pages). With a full cache (sqlite_cache_mib = 8) the floor is
flat."""


def judge(samples: list[Sample], errors: int, *, cache_mib: float, socket_bound: int) -> Verdict:
    """The verdict over the second half of ``samples`` (see the module docstring).
    ``cache_mib``: how much of the database the collector may cache in its memory (the
    SQLite page cache; 0 for PostgreSQL). The cache holds at most min(data, cache_mib), so
    the RSS may grow by that growth (times CACHE_OVERHEAD) and no more."""
    half = samples[len(samples) // 2 :] if len(samples) >= 4 else samples
    t = np.array([s.t for s in half])
    rss = np.array([s.rss_mib for s in half])
    db = np.array([s.database_mib for s in half])
    if len(half) >= 2 and t[-1] > t[0]:
        slope = float(np.polyfit(t, rss, 1)[0])
        db_slope, db_start = (float(x) for x in np.polyfit(t - t[0], db, 1))
        span = float(t[-1] - t[0])
    else:
        slope = db_slope = span = db_start = 0.0
    db_end = db_start + db_slope * span

    def cached(data_mib: float) -> float:
        return min(max(data_mib, 0.0), cache_mib)

    files = [s.open_files for s in half]
    first = samples[: len(samples) // 2] or samples
    return Verdict(
        rss_growth_mib=slope * span,
        database_growth_mib=db_slope * span,
        cache_allowance_mib=CACHE_OVERHEAD * max(0.0, cached(db_end) - cached(db_start)),
        rss_tolerance_mib=max(8.0, 0.05 * float(np.median(rss)) if rss.size else 8.0),
        rss_slope_mib_per_min=slope * 60,
        open_files_range=max(files) - min(files) if files else 0,
        max_sockets=max((s.sockets for s in samples), default=0),
        socket_bound=socket_bound,
        errors=errors,
        first_half_peak_mib=max((s.rss_peak_mib for s in first), default=0.0),
        second_half_peak_mib=max((s.rss_peak_mib for s in half), default=0.0),
    )


def run_soak(
    *,
    seconds: float,
    database: str | None = None,
    rate: float = 20_000,
    batch: int = 500,
    concurrency: int = 16,
    interval: float = 10.0,
    sqlite_cache_mib: int | None = None,
    echo: Callable[[str], None] = print,
    slow_senders: int = 0,
    unknown_rate: float = 0.0,
) -> SoakResult:
    """Start a collector, soak it, stop it (SIGTERM); the samples and the verdict."""
    with tempfile.TemporaryDirectory(prefix="ldpkit-soak-") as tmp:
        workdir = Path(tmp)
        db = database or str(workdir / "collector.sqlite3")
        config = workdir / "collector.toml"
        write_config(config, db, sqlite_cache_mib)
        postgres = db.startswith(("postgresql://", "postgres://"))
        cache_mib = 0.0 if postgres else float(sqlite_cache_mib or 256)
        with running_collector(config, cwd=workdir, env=environment_without_tokens()) as c:
            result = asyncio.run(
                _soak(
                    c.url,
                    c.process.pid,
                    db,
                    seconds=seconds,
                    rate=rate,
                    batch=batch,
                    concurrency=concurrency,
                    interval=interval,
                    cache_mib=cache_mib,
                    echo=echo,
                    slow_senders=slow_senders,
                    unknown_rate=unknown_rate,
                )
            )
            process = c.process
        result.exit_code = process.returncode
    return result


def report(result: SoakResult, args: Any, echo: Callable[[str], None] = print) -> None:
    v = result.verdict
    first, last = result.samples[0], result.samples[-1]
    echo("")
    echo(
        f"{result.reports:,} reports in {result.seconds:.0f} s: "
        f"{result.reports / result.seconds:,.0f} reports/s (target "
        f"{args.rate:,.0f}/s, {'unpaced' if not args.rate else 'paced'}), batch p99 "
        f"{result.p99_ms:.1f} ms, {result.throttled} answers 429"
    )
    cache = (
        f", of which up to {v.cache_allowance_mib:.1f} MiB may be the SQLite page cache "
        "(it grows with the data up to sqlite_cache_mib)"
        if v.cache_allowance_mib
        else ""
    )
    peak = max(s.rss_peak_mib for s in result.samples)
    echo(
        f"RSS floor {first.rss_mib:.1f} -> {last.rss_mib:.1f} MiB (peak {peak:.1f}); second half: "
        f"{v.rss_growth_mib:+.1f} MiB ({v.rss_slope_mib_per_min:+.2f} MiB/min) while the "
        f"database's data grew {v.database_growth_mib:+.1f} MiB{cache}; tolerance "
        f"{v.rss_tolerance_mib:.1f} MiB: memory {'FLAT' if v.memory_flat else 'GROWING'}"
    )
    echo(
        f"open files (not sockets) {first.open_files} -> {last.open_files} (range "
        f"{v.open_files_range} in the second half), sockets at most {v.max_sockets} (bound "
        f"{v.socket_bound}: the load's connections + 4): "
        f"{'FLAT' if v.open_files_flat else 'GROWING'}"
    )
    echo(
        f"RSS peak: first half {v.first_half_peak_mib:.1f} MiB, second half "
        f"{v.second_half_peak_mib:.1f} MiB (at most 1.1x): "
        f"{'PLATEAU' if v.rss_plateau else 'GROWING'}"
    )
    if v.p99_bound_ms is not None:
        echo(
            f"hostile load: {result.slow_cut} slow uploads cut ({result.slow_held_open} without "
            f"a 408), {result.unknown_sent} unknown-metric batches ({result.unknown_refused} "
            f"refused as unknown_metric), {len(result.hostile_errors)} other outcomes"
            + (f" (first: {result.hostile_errors[0]})" if result.hostile_errors else "")
        )
        echo(
            f"legitimate batch p99 {v.p99_ms:.1f} ms (bound {v.p99_bound_ms:.0f} ms): "
            f"{'OK' if v.latency_ok else 'TOO SLOW'}"
        )
    echo(f"errors: {v.errors}" + (f" (first: {result.errors[0]})" if result.errors else ""))
    echo(f"collector exit code after SIGTERM: {result.exit_code}")
    echo(f"verdict: {'OK' if v.ok and result.exit_code == 0 else 'FAIL'}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="duration (default 5)")
    parser.add_argument("--database", help="SQLite path or postgresql:// URL (default: temp)")
    parser.add_argument(
        "--rate", type=float, default=20_000, help="reports/s to offer; 0: as fast as it goes"
    )
    parser.add_argument("--batch", type=int, default=500, help="reports per batch (500)")
    parser.add_argument("--concurrency", type=int, default=16, help="batches in flight (16)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds per row (10)")
    parser.add_argument(
        "--sqlite-cache-mib", type=int, help="the collector's sqlite_cache_mib (default 256)"
    )
    parser.add_argument(
        "--slow-senders", type=int, default=0, help="hostile slow uploads alongside (0)"
    )
    parser.add_argument(
        "--unknown-rate",
        type=float,
        default=0.0,
        help="batches a second naming unknown metrics, alongside (0)",
    )
    args = parser.parse_args()
    print(
        f"soak: {args.minutes:g} min, {args.rate:,.0f} reports/s offered "
        f"({args.batch} per batch, {args.concurrency} in flight), database: "
        f"{args.database or 'SQLite (temp dir), WAL, synchronous=FULL'}"
        + (f", sqlite_cache_mib = {args.sqlite_cache_mib}" if args.sqlite_cache_mib else "")
        + (f", {args.slow_senders} slow senders" if args.slow_senders else "")
        + (f", {args.unknown_rate:g} unknown-metric batches/s" if args.unknown_rate else "")
        + f", {os.cpu_count()} CPUs"
    )
    result = run_soak(
        seconds=args.minutes * 60,
        database=args.database,
        rate=args.rate,
        batch=args.batch,
        concurrency=args.concurrency,
        interval=args.interval,
        sqlite_cache_mib=args.sqlite_cache_mib,
        slow_senders=args.slow_senders,
        unknown_rate=args.unknown_rate,
    )
    report(result, args)
    return 0 if result.verdict.ok and result.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
