"""Collector ingest benchmark: a real ``ldpkit serve`` process and a separate load generator.

    .venv/bin/python benchmarks/ingest.py                      # every scenario, 8 s each
    .venv/bin/python benchmarks/ingest.py --seconds 3 --scenarios grr16
    .venv/bin/python benchmarks/ingest.py --database postgresql://user@127.0.0.1/ldpkit
    .venv/bin/python benchmarks/ingest.py --database postgresql://... --collectors 2

The collector runs on loopback (a free port, SQLite in a temporary directory unless
``--database`` says otherwise) with its default durability (WAL, ``synchronous=FULL``).
The load generator is another process, sending with a relay token (many devices'
reports in a batch): it encodes a few batches of ``--batch`` reports per scenario up front
(sealed v2 batches) and, for each request, writes a fresh random batch id into a copy of
one (so every batch is new) and fresh reports: the same values perturbed again, or, for
bitmap reports (costly to perturb), the template's reports with their items permuted by
whole bytes (honest reports of permuted values). A replayed batch is no honest population
(screening holds its sender once its reports pool enough: issue 26), fresh ones are.
Keeps ``--concurrency`` requests in flight with aiohttp.
With ``--collectors N``, N collector processes share the database (replicas, as behind a
load balancer) and the load generator spreads its connections over them round-robin.

Printed: accepted reports/s, p50/p99 batch latency, the collector's CPU seconds per
million reports (independent of other load on the machine, unlike the rate) and the
reports screening held, per scenario (GRR d=16, OUE d=1024, OLH d=1024, a numeric
mechanism; a scenario whose mechanism module is missing is skipped), then the p50 time of
``GET /v1/estimates`` on the d=1024 metric once it holds ``--estimate-reports`` reports
(topped up first if needed), then the first scenario once more on the now larger
report-id table (ingest slows down as that table grows).

Latency is mostly queueing: with the collector saturated, a batch waits for the group
commit in progress and then its own (Little's law: p50 ~ in-flight / throughput), so fewer
batches in flight give lower latency and lower throughput.

Targets on a 2-core machine, load generator included: >= 100,000 reports/s for GRR with
durable commits, estimates p50 < 5 ms (issue 27), beside the same client's ``/healthz``
in the same run (HTTP alone: the yardstick).

``--minutes M`` (issue 13): GRR d=16 then OUE d=1024, each unpaced for M minutes on a
fresh database, printed minute by minute (the last minute must keep >= 0.9x the first),
with the collectors' CPU seconds per million reports (per minute: independent of other
load on the machine, unlike the rate), per collector process and, on SQLite, the
database size per million reports (compaction running; ``--compact-seconds 3600`` shows
it without compaction). ``--scenarios grr16`` (or ``oue1024``) runs only that one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldpkit import wire
from ldpkit.metrics import MetricDefinition, Period

RELAY, READ, ADMIN = "bench-relay", "bench-read", "bench-admin"  # a relay: many devices' reports
TARGET_GRR = 100_000
TARGET_ESTIMATE_MS = 5.0  # issue 27: through HTTP, at n >= 10^6


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    spec: dict[str, Any]


SCENARIOS = [
    Scenario("grr16", "GRR d=16", {"categories": 16, "mechanism": "grr"}),
    Scenario("oue1024", "OUE d=1024", {"categories": 1024, "mechanism": "oue"}),
    Scenario("olh1024", "OLH d=1024", {"categories": 1024, "mechanism": "olh"}),
    Scenario("piecewise", "Piecewise [0,100]", {"bounds": [0.0, 100.0], "mechanism": "piecewise"}),
]
ESTIMATE_CANDIDATES = ("oue1024", "olh1024", "grr1024")


def metric_spec(s: Scenario) -> dict[str, Any]:
    spec: dict[str, Any] = {"epsilon": 1.0, "mechanism": s.spec["mechanism"]}
    if "categories" in s.spec:
        spec["categories"] = [f"item{i}" for i in range(s.spec["categories"])]
    else:
        spec["kind"] = "numeric"
        spec["bounds"] = s.spec["bounds"]
    return spec


def available(s: Scenario) -> bool:
    try:
        MetricDefinition.from_dict(s.key, metric_spec(s))
    except (ImportError, ValueError) as exc:
        print(f"skipping {s.label}: {exc}", file=sys.stderr)
        return False
    return True


def toml_value(v: Any) -> str:
    return json.dumps(v)


def write_config(path: Path, scenarios: list[Scenario], compact_seconds: float = 1.0) -> None:
    lines = [
        "[collector]",
        'database = "collector.sqlite3"',
        f"compact_seconds = {compact_seconds}",
        "",
        "[tokens]",
        f'relay = ["{RELAY}"]',
        f'read = ["{READ}"]',
        f'admin = ["{ADMIN}"]',
    ]
    for s in scenarios:
        lines += ["", f"[metrics.{s.key}]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in metric_spec(s).items()]
    path.write_text("\n".join(lines) + "\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http(url: str, token: str = READ) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# --- the load generator (its own process) ----------------------------------------------
@dataclass(frozen=True)
class Template:
    """One encoded sealed batch: where its batch id and its reports lie (both rewritten
    per request), and how to make fresh reports of its population."""

    body: bytes
    id_at: int
    reports_at: int
    fresh: Any  # (np.random.Generator) -> bytes, as many as the template's reports


def template(name: str, spec: dict[str, Any], batch: int, seed: int) -> Template:
    d = MetricDefinition.from_dict(name, spec)
    m = d.mechanism_instance
    rng = np.random.default_rng(seed)
    if d.categories is not None:
        values = rng.zipf(1.3, batch) % len(d.categories)
    else:
        assert d.bounds is not None
        values = rng.uniform(*d.bounds, batch)
    reports = m.perturb(values, rng=rng)
    marker = os.urandom(wire.ID_SIZE)
    body = wire.encode_sealed_batch(
        marker,
        [wire.sealed_block(name, d.fingerprint, Period.DAY.start(time.time()), reports)],
    )
    if m.report_dtype.subdtype is None:
        fresh = lambda g: m.perturb(values, rng=g).tobytes()  # noqa: E731
    else:  # a bitmap: permute whole bytes of items (a trailing partial byte stays)
        bits = np.frombuffer(reports.tobytes(), np.uint8).reshape(batch, -1)
        whole = len(d.categories or ()) // 8

        def fresh(g: np.random.Generator) -> bytes:
            order = np.concatenate([g.permutation(whole), np.arange(whole, bits.shape[1])])
            return bits[:, order].tobytes()

    return Template(body, body.index(marker), body.index(reports.tobytes()), fresh)


async def _load(
    url: str,
    name: str,
    spec: dict[str, Any],
    batch: int,
    concurrency: int,
    seconds: float,
    reports: int,
) -> dict[str, Any]:
    import aiohttp

    templates = [template(name, spec, batch, seed) for seed in range(16)]
    fresh_rng = np.random.default_rng()
    id_bytes = wire.ID_SIZE
    latencies: list[float] = []
    accepted = 0
    held = 0
    other = 0
    throttled = 0
    sent = 0
    limit_batches = -(-reports // batch) if reports else None
    headers = {"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE}
    stop_at = 0.0

    urls = url.split(",")  # several collectors: each worker keeps to one

    async def worker(session: aiohttp.ClientSession, k: int) -> None:
        nonlocal accepted, held, other, sent, throttled
        target = urls[k % len(urls)]
        i = k
        while time.perf_counter() < stop_at:
            if limit_batches is not None:
                if sent >= limit_batches:
                    return
                sent += 1
            t = templates[i % len(templates)]
            i += 1
            body = bytearray(t.body)
            body[t.id_at : t.id_at + id_bytes] = os.urandom(id_bytes)
            reports = t.fresh(fresh_rng)
            body[t.reports_at : t.reports_at + len(reports)] = reports
            t0 = time.perf_counter()
            post = session.post(target + "/v1/reports", data=bytes(body), headers=headers)
            async with post as resp:
                payload = await resp.read()
                if resp.status == 429:
                    throttled += 1
                    await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                    continue
                if resp.status != 200:
                    raise RuntimeError(f"collector answered {resp.status}: {payload[:200]!r}")
            latencies.append(time.perf_counter() - t0)
            answer = json.loads(payload)
            accepted += answer["accepted"]
            held += answer.get("held", 0)
            other += answer["duplicates"] + len(answer["rejected"])

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm up (connections, the collector's first commits), then measure.
        stop_at = time.perf_counter() + 0.5
        saved = limit_batches
        limit_batches = None
        await asyncio.gather(*(worker(session, k) for k in range(concurrency)))
        limit_batches = saved
        latencies.clear()
        accepted = held = other = throttled = 0
        started = time.perf_counter()
        stop_at = started + (seconds if not reports else 3600.0)
        await asyncio.gather(*(worker(session, k) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {
        "accepted": accepted,
        "held": held,
        "other": other,
        "throttled": throttled,
        "elapsed": elapsed,
        "latencies": latencies,
    }


def load_process(conn: Any, *args: Any) -> None:
    try:
        conn.send(asyncio.run(_load(*args)))
    except BaseException as exc:
        conn.send({"error": repr(exc)})
    finally:
        conn.close()


def run_load(
    url: str, name: str, spec: dict[str, Any], args: argparse.Namespace, *, reports: int = 0
) -> dict[str, Any]:
    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("spawn").Process(
        target=load_process,
        args=(child, url, name, spec, args.batch, args.concurrency, args.seconds, reports),
    )
    proc.start()
    child.close()
    result: dict[str, Any] = parent.recv()
    proc.join()
    if "error" in result:
        raise RuntimeError(f"load generator failed: {result['error']}")
    return result


# --- the benchmark ---------------------------------------------------------------------
class LockSampler:
    """Samples PostgreSQL every 0.1 s during the run: lock requests not granted (by
    relation and mode) and sessions waiting on a lock, to show that nothing serializes
    the collectors' transactions."""

    def __init__(self, url: str) -> None:
        import threading

        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.samples = 0
        self.waiting: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            rows = self.conn.execute(
                "SELECT coalesce(l.relation::regclass::text, l.locktype), l.mode, "
                "left(a.query, 50) "
                "FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE NOT l.granted AND a.datname = current_database()"
            ).fetchall()
            self.samples += 1
            for what, mode, query in rows:
                key = f"{what} {mode} ({query})"
                self.waiting[key] = self.waiting.get(key, 0) + 1

    def finish(self) -> str:
        self.stop.set()
        self.thread.join()
        self.conn.close()
        waits = ", ".join(f"{k}: {v}" for k, v in sorted(self.waiting.items())) or "none"
        return f"pg_locks sampled {self.samples} times: lock requests waiting: {waits}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """CPU seconds of every process named postgres on this machine (a local server: its
    backends, WAL writer, checkpointer; other clients of the server count too)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            if "(postgres)" in text:
                total += cpu_seconds(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return total


def minutes(
    args: argparse.Namespace,
    urls: list[str],
    servers: list[subprocess.Popen[bytes]],
    specs: dict[str, dict[str, Any]],
    workdir: Path,
) -> int:
    """GRR d=16 and OUE d=1024 (those of them chosen), each for ``args.minutes`` one-minute runs."""
    ok = True
    total = 0
    slice_args = argparse.Namespace(**{**vars(args), "seconds": min(60.0, args.minutes * 60)})
    db = workdir / "collector.sqlite3"
    print(f"\n{len(servers)} collector(s), batches of {args.batch}, {args.concurrency} in flight")
    sampler = LockSampler(args.database) if (args.database or "").startswith("postgres") else None
    for key in [k for k in ("grr16", "oue1024") if k in specs]:  # as --scenarios allows
        rates = []
        cpu0 = [cpu_seconds(s.pid) for s in servers]
        pg0 = postgres_cpu_seconds() if sampler is not None else 0.0
        n0 = total
        for minute in range(max(1, round(args.minutes))):
            cpu_slice = sum(cpu_seconds(s.pid) for s in servers)
            r = run_load(",".join(urls), key, specs[key], slice_args)
            cpu_slice = sum(cpu_seconds(s.pid) for s in servers) - cpu_slice
            rate = r["accepted"] / r["elapsed"]
            total += r["accepted"]
            rates.append(rate)
            lat = np.array(r["latencies"]) * 1000
            size = ""
            if db.exists():
                files = sum(p.stat().st_size for p in workdir.glob("collector.sqlite3*"))
                size = f"  db+wal {files / 2**20:,.0f} MiB ({files / total:.1f} B/report)"
            print(
                f"{key:<8} minute {minute + 1:>2}: {rate:>10,.0f} reports/s  "
                f"p50 {np.percentile(lat, 50):6.1f} ms  total {total:>12,}  "
                f"CPU {cpu_slice / max(1, r['accepted']) * 1e6:.2f} s/M{size}",
                flush=True,
            )
        used = [cpu_seconds(s.pid) - c for s, c in zip(servers, cpu0, strict=True)]
        per_million = ", ".join(f"{u / max(1, total - n0) * 1e6:.1f}" for u in used)
        ratio = rates[-1] / rates[0]
        pg = ""
        if sampler is not None:
            pg = f"; PostgreSQL {(postgres_cpu_seconds() - pg0) / (total - n0) * 1e6:.1f}"
        print(
            f"{key}: last/first minute {ratio:.2f}; CPU s per million reports per collector: "
            f"{per_million}{pg}"
        )
        ok &= ratio >= 0.9
    if sampler is not None:
        print(sampler.finish())
    if db.exists():
        time.sleep(min(2 * args.compact_seconds + 1, 5))  # the last compaction
        import sqlite3

        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        pages, free, page = (
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
        batches, partials = (
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("batches", "partials")
        )
        conn.close()
        used_bytes = (pages - free) * page
        print(
            f"SQLite pages in use: {used_bytes / 2**20:,.1f} MiB for {total:,} reports = "
            f"{used_bytes / total * 1e6 / 2**20:,.2f} MiB per million; {batches:,} batch ids, "
            f"{partials:,} partial rows not folded"
        )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per scenario")
    parser.add_argument(
        "--reports", type=int, default=0, help="send this many reports per scenario instead"
    )
    parser.add_argument(
        "--database", help="SQLite path or postgresql:// URL (default: temp SQLite)"
    )
    parser.add_argument(
        "--collectors", type=int, default=1, help="collector processes sharing the database"
    )
    parser.add_argument("--batch", type=int, default=1000, help="reports per batch")
    parser.add_argument("--concurrency", type=int, default=64, help="batches in flight")
    parser.add_argument("--estimate-reports", type=int, default=1_000_000)
    parser.add_argument(
        "--no-repeat-first",
        dest="repeat_first",
        action="store_false",
        help="do not run the first scenario again at the end (on the larger id table)",
    )
    parser.add_argument("--estimate-queries", type=int, default=200)
    parser.add_argument(
        "--minutes", type=float, default=0, help="per-minute runs of GRR and OUE (issue 13)"
    )
    parser.add_argument(
        "--compact-seconds", type=float, default=1.0, help="the collectors' compact_seconds"
    )
    parser.add_argument(
        "--scenarios", default=",".join(s.key for s in SCENARIOS), help="comma-separated subset"
    )
    args = parser.parse_args()

    wanted = set(args.scenarios.split(","))
    scenarios = [s for s in SCENARIOS if s.key in wanted and available(s)]
    estimate_metric = next(
        (k for k in ESTIMATE_CANDIDATES if k in {s.key for s in scenarios}), None
    )
    extra = []
    if estimate_metric is None and args.estimate_reports:
        extra = [Scenario("grr1024", "GRR d=1024", {"categories": 1024, "mechanism": "grr"})]
        estimate_metric = "grr1024"

    with tempfile.TemporaryDirectory(prefix="ldpkit-bench-") as tmp:
        workdir = Path(tmp)
        config = workdir / "collector.toml"
        write_config(config, scenarios + extra, args.compact_seconds)
        ports = [free_port() for _ in range(args.collectors)]
        command = [
            sys.executable,
            "-m",
            "ldpkit.cli",
            "--log-level",
            "WARNING",
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--no-access-log",
        ]
        if args.database:
            command += ["--database", args.database]
        servers = [subprocess.Popen([*command, "--port", str(port)], cwd=workdir) for port in ports]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        url = urls[0]  # estimates (any replica answers the same)
        try:
            for u in urls:
                for _ in range(200):
                    try:
                        if http(u + "/readyz")[0] == 200:
                            break
                    except OSError:
                        pass
                    time.sleep(0.05)
                else:
                    raise RuntimeError("the collector did not become ready")
            specs = {s.key: metric_spec(s) for s in scenarios + extra}
            if args.minutes:
                return minutes(args, urls, servers, specs, workdir)
            counts: dict[str, int] = {}
            rows = []
            stored = 0  # report ids in the store so far
            for s in scenarios:
                cpu = sum(cpu_seconds(server.pid) for server in servers)
                r = run_load(",".join(urls), s.key, specs[s.key], args, reports=args.reports)
                cpu = sum(cpu_seconds(server.pid) for server in servers) - cpu
                r["cpu_per_million"] = cpu / max(1, r["accepted"]) * 1e6
                lat = np.array(r["latencies"]) * 1000
                rate = r["accepted"] / r["elapsed"]
                counts[s.key] = r["accepted"]
                stored += r["accepted"]
                rows.append((s.label, rate, np.percentile(lat, 50), np.percentile(lat, 99), r))
            # Estimates on d=1024 after enough reports.
            est_line = None
            if estimate_metric is not None and args.estimate_reports:
                status, body = http(f"{url}/v1/estimates/{estimate_metric}")
                have = json.loads(body)["n"]
                if have < args.estimate_reports:
                    topped = run_load(
                        ",".join(urls),
                        estimate_metric,
                        specs[estimate_metric],
                        args,
                        reports=args.estimate_reports - have,
                    )
                    stored += topped["accepted"]
                status, body = http(f"{url}/v1/estimates/{estimate_metric}")
                n = json.loads(body)["n"]
                times, floor = [], []
                for i in range(args.estimate_queries + 10):
                    query = "?consistent=true" if i % 2 else ""
                    t0 = time.perf_counter()
                    status, body = http(f"{url}/v1/estimates/{estimate_metric}{query}")
                    t1 = time.perf_counter()
                    http(f"{url}/healthz")  # the yardstick: the same client, an empty answer
                    if i >= 10:
                        times.append((t1 - t0) * 1000)
                        floor.append((time.perf_counter() - t1) * 1000)
                    assert status == 200, body
                est_line = (
                    estimate_metric,
                    n,
                    np.percentile(times, 50),
                    np.percentile(times, 99),
                    len(body),
                    np.percentile(floor, 50),
                )
            # The first scenario again, now that the id table is larger: ingest slows
            # down as it grows (random keys touch more B-tree pages per commit).
            if args.repeat_first and scenarios and not args.reports:
                s = scenarios[0]
                label = f"{s.label} again"
                before = stored
                r = run_load(",".join(urls), s.key, specs[s.key], args)
                lat = np.array(r["latencies"]) * 1000
                stored += r["accepted"]
                r["label_note"] = f"(started with {before:,} ids stored)"
                rows.append(
                    (
                        label,
                        r["accepted"] / r["elapsed"],
                        np.percentile(lat, 50),
                        np.percentile(lat, 99),
                        r,
                    )
                )
        finally:
            for server in servers:
                server.send_signal(signal.SIGTERM)
            codes = [server.wait(timeout=60) for server in servers]
            code = max(codes, key=abs)

    cpus = os.cpu_count()
    print()
    print(f"ldpkit collector ingest benchmark ({cpus} CPUs, load generator on the same machine)")
    amount = f"{args.reports} reports" if args.reports else f"{args.seconds:g} s"
    database = args.database or "SQLite (temp dir), WAL, synchronous=FULL"
    print(
        f"batches of {args.batch} reports, {args.concurrency} in flight, "
        f"{amount} per scenario, database: {database}"
    )
    if args.collectors > 1:
        print(f"{args.collectors} collector processes on that database, load spread over them")
    print()
    head = ("scenario", "reports/s", "p50 ms", "p99 ms", "accepted", "429s", "CPU s/M", "held")
    print(
        f"{head[0]:<20} {head[1]:>11} {head[2]:>8} {head[3]:>8} {head[4]:>10} {head[5]:>6}"
        f" {head[6]:>8} {head[7]:>6}"
    )
    for label, rate, p50, p99, r in rows:
        accepted, throttled = r["accepted"], r["throttled"]
        note = r.get("label_note", "")
        cpu = f"{r['cpu_per_million']:.2f}" if "cpu_per_million" in r else "-"
        print(
            f"{label:<20} {rate:>11,.0f} {p50:>8.1f} {p99:>8.1f} {accepted:>10,} {throttled:>6}"
            f" {cpu:>8} {r['held']:>6}  {note}".rstrip()
        )
    if est_line is not None:
        name, n, p50, p99, size, healthz = est_line
        print()
        print(
            f"estimates {name} (d=1024, n={n:,}): p50 {p50:.1f} ms, p99 {p99:.1f} ms "
            f"({size:,} byte answers; half with consistent=true); the same client's GET "
            f"/healthz in the same run (the yardstick: HTTP alone): p50 {healthz:.1f} ms"
        )
    print(f"collector exit code(s) after SIGTERM: {', '.join(map(str, codes))}")
    ok = True
    grr = next((r for r in rows if r[0].startswith("GRR d=16")), None)
    if grr is not None and grr[1] < TARGET_GRR:
        print(f"below target: GRR {grr[1]:,.0f} reports/s < {TARGET_GRR:,}")
        ok = False
    if est_line is not None and est_line[2] > TARGET_ESTIMATE_MS:
        print(f"below target: estimates p50 {est_line[2]:.1f} ms > {TARGET_ESTIMATE_MS} ms")
        ok = False
    return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    importlib.import_module("aiohttp")
    sys.exit(main())
