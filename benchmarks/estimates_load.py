"""Estimates under a decode attack (issue 27), against a real ``ldpkit serve``.

    .venv/bin/python benchmarks/estimates_load.py                 # the attack, 20 s phases
    .venv/bin/python benchmarks/estimates_load.py --costs         # decode cost by max_length, k

The collector (SQLite in a temporary directory, default budget: ``estimate_cpu_seconds``
30, ``estimate_memory_mib`` 1024, one worker) serves the largest strings definition the
budget allows (max_length 64, k 143 at epsilon 1: the kind's cost model says 30.0 CPU s),
a GRR d=16 metric (the ingest that must not slow), an OUE d=1,024 metric and a
distribution. Two phases of ``--seconds`` each, the same load in both: GRR batches as fast
as the collector takes them (``benchmarks/ingest.py``'s load generator, another process)
while a prober asks every metric's estimate and ``/healthz`` in turn.

1. baseline: no decode;
2. attack: 10 sealed batches of 100,000 honest-looking strings reports (URLs of a Zipf
   population: the walk's beam stays full, the costliest data measured) make the next
   decode of the strings metric cost its budget; the phase starts once the worker is
   computing it (``ldpkit_estimate_queue``), and a batch of 1,000 strings reports every
   second keeps new data coming (every batch used to invalidate the decode).

Printed: GRR reports/s in each phase and their ratio (>= 0.8 wanted), p50/p99 of every
metric's estimate (< 100 ms p99; each answer must carry ``as_of``) and of ``/healthz``
(< 50 ms p99), whether the decode was still running when the attack phase ended, its CPU
seconds, and the worker's peak resident memory (within ``estimate_memory_mib``).

``--costs``: the CPU seconds and peak memory of one decode in a fresh process, by
max_length and k, on 10^6 honest-looking reports (URLs, Zipf 1.3 over 5,000 strings) at
epsilon 1 (g = 4: the most rows, the costliest), beside the kind's cost model
(``ldpkit.kinds.strings.DECODE_SECONDS``); and the same for the largest tables,
hierarchies and distributions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from ingest import READ, RELAY, free_port, http, run_load

from ldpkit import wire
from ldpkit.metrics import MetricDefinition, Period

STRINGS = {"kind": "strings", "max_length": 64, "k": 143, "epsilon": 1.0}
METRICS: dict[str, dict[str, Any]] = {
    "grr16": {"categories": [f"c{i}" for i in range(16)], "mechanism": "grr", "epsilon": 1.0},
    "oue1024": {"categories": [f"i{i}" for i in range(1024)], "mechanism": "oue", "epsilon": 1.0},
    "minutes": {"kind": "distribution", "bounds": [0, 60], "resolution": 1024, "epsilon": 1.0},
    "url": STRINGS,
}


def urls(n: int, max_length: int, seed: int) -> list[str]:
    """Honest-looking strings: URLs of a Zipf(1.3) population of 5,000."""
    rng = np.random.default_rng(seed)
    pool = [f"https://example.com/page/{i}"[:max_length] for i in range(5000)]
    return [pool[i] for i in (rng.zipf(1.3, n) - 1) % len(pool)]


def strings_batch(definition: MetricDefinition, n: int, seed: int) -> bytes:
    values = definition.kind_spec.encode_many(definition, urls(n, STRINGS["max_length"], seed))
    reports = definition.mechanism_instance.perturb(values, rng=np.random.default_rng(seed))
    bucket = Period.DAY.start(time.time())
    block = wire.sealed_block(definition.name, definition.fingerprint, bucket, reports)
    return wire.encode_sealed_batch(os.urandom(wire.ID_SIZE), [block])


def post(url: str, body: bytes) -> None:
    req = urllib.request.Request(
        url + "/v1/reports",
        data=body,
        headers={"Authorization": f"Bearer {RELAY}", "Content-Type": wire.CONTENT_TYPE},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200, resp.read()


def prometheus(url: str, name: str, labels: str) -> float:
    _, body = http(url + "/metrics")
    pattern = re.compile(rf"^ldpkit_{name}\{{{labels}\}} (\S+)$", re.M)
    found = pattern.search(body.decode())
    return float(found.group(1)) if found else 0.0


class Prober(threading.Thread):
    """Asks every metric's estimate and /healthz in turn until stopped; their times."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.times: dict[str, list[float]] = {name: [] for name in [*METRICS, "healthz"]}
        self.without_as_of = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for name in METRICS:
                t = time.perf_counter()
                status, body = http(f"{self.url}/v1/estimates/{name}")
                self.times[name].append((time.perf_counter() - t) * 1000)
                if status != 200 or "as_of" not in json.loads(body):
                    self.without_as_of += 1
            t = time.perf_counter()
            http(self.url + "/healthz")
            self.times["healthz"].append((time.perf_counter() - t) * 1000)


def phase(url: str, args: argparse.Namespace, trickle: MetricDefinition | None) -> dict[str, Any]:
    prober = Prober(url)
    prober.start()
    stop = threading.Event()

    def drip() -> None:  # new strings data every second
        seed = 1000
        while trickle is not None and not stop.wait(1.0):
            seed += 1
            post(url, strings_batch(trickle, 1000, seed))

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    load = run_load(url, "grr16", METRICS["grr16"], args)
    stop.set()
    prober.stop.set()
    prober.join()
    dripper.join()
    return {"rate": load["accepted"] / load["elapsed"], "prober": prober}


def worker_peak(server: subprocess.Popen[bytes]) -> int:
    """The largest VmHWM of the collector's child processes (the estimate workers)."""
    peak = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if re.search(rf"^PPid:\s+{server.pid}$", text, re.M):
            found = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
            peak = max(peak, int(found.group(1)) * 1024 if found else 0)
    return peak


def attack(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="ldpkit-estimates-") as tmp:
        work = Path(tmp)
        lines = ["[collector]", 'database = "c.sqlite3"', "", "[tokens]"]
        lines += [f'relay = ["{RELAY}"]', f'read = ["{READ}"]']
        for name, spec in METRICS.items():
            lines += ["", f"[metrics.{name}]", *(f"{k} = {json.dumps(v)}" for k, v in spec.items())]
        (work / "c.toml").write_text("\n".join(lines) + "\n")
        port = free_port()
        command = [sys.executable, "-m", "ldpkit.cli", "--log-level", "WARNING", "serve"]
        command += ["--config", "c.toml", "--port", str(port), "--no-access-log"]
        server = subprocess.Popen(command, cwd=work)
        url = f"http://127.0.0.1:{port}"
        try:
            return measure(url, server, args)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)


def measure(url: str, server: subprocess.Popen[bytes], args: argparse.Namespace) -> int:
    for _ in range(600):
        try:
            if http(url + "/readyz")[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    for name in METRICS:  # every first estimate computed (the worker started)
        assert http(f"{url}/v1/estimates/{name}?wait=120")[0] == 200
    base = phase(url, args, None)
    d = MetricDefinition.from_dict("url", STRINGS)
    print("posting 10 batches of 100,000 strings reports ...", flush=True)
    for seed in range(10):
        post(url, strings_batch(d, 100_000, seed))
    while prometheus(url, "estimate_queue", 'kind="strings"') < 1:
        time.sleep(0.1)
    computed = prometheus(url, "estimates_computed_total", 'kind="strings",outcome="ok"')
    hit = phase(url, args, d)
    running = prometheus(url, "estimate_queue", 'kind="strings"') >= 1
    while prometheus(url, "estimates_computed_total", 'kind="strings",outcome="ok"') == computed:
        time.sleep(0.5)
    cpu = prometheus(url, "estimate_compute_seconds_sum", 'kind="strings"')
    peak = worker_peak(server)
    return report(base, hit, running, cpu, peak)


def report(base: dict[str, Any], hit: dict[str, Any], running: bool, cpu: float, peak: int) -> int:
    ratio = hit["rate"] / base["rate"]
    print(f"\nstrings metric: {STRINGS} (the largest the default budget allows)")
    print(f"GRR d=16 ingest: {base['rate']:,.0f} reports/s without a decode, {hit['rate']:,.0f}")
    print(f"  during it: {ratio:.2f} of the rate (>= 0.80 wanted)")
    ok = ratio >= 0.8
    print(
        f"{'':<10} {'baseline p50/p99 ms':>20} {'during the decode p50/p99 ms':>30} {'queries':>8}"
    )
    for name in [*METRICS, "healthz"]:
        a, b = (np.array(p["prober"].times[name]) for p in (base, hit))
        bound = 50 if name == "healthz" else 100
        ok &= bool(np.percentile(b, 99) < bound)
        print(
            f"{name:<10} {np.percentile(a, 50):>9.1f} / {np.percentile(a, 99):>7.1f} "
            f"{np.percentile(b, 50):>17.1f} / {np.percentile(b, 99):>8.1f} {b.size:>8}"
            f"  (< {bound} ms p99)"
        )
    missing = base["prober"].without_as_of + hit["prober"].without_as_of
    print(f"answers without as_of (or not 200): {missing}")
    print(f"the decode was still running when the phase ended: {running}")
    print(f"strings decodes' CPU seconds so far (every computation): {cpu:.1f}")
    print(f"estimate worker's peak resident memory: {peak / 2**20:,.0f} MiB (budget 1,024 MiB)")
    ok &= missing == 0 and running and peak < 1024 * 2**20
    return 0 if ok else 1


COSTS_CHILD = r"""
import json, sys, time
import numpy as np
from ldpkit.aggregate import Aggregate
from ldpkit.metrics import MetricDefinition
spec, path, n = json.loads(sys.stdin.read()), sys.argv[1], int(sys.argv[2])
d = MetricDefinition.from_dict("m", spec)
m, rng = d.mechanism_instance, np.random.default_rng(0)
if path:  # strings: the aggregate of honest-looking reports
    agg = Aggregate(n, np.load(path))
elif "bounds" in spec:  # a distribution: uniform values, perturbed
    agg = m.aggregate(m.perturb(rng.uniform(*spec["bounds"], n), rng=rng))
else:  # a design's counts: as many per cell as n spread evenly gives
    agg = Aggregate(n, rng.poisson(n / m.stats_size, m.stats_size).astype(float))
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")
base = hwm()
t = time.process_time()
d.kind_spec.prepare(d, agg)
cost = d.kind_spec.cost(d)
print(json.dumps({"cpu": time.process_time() - t, "peak": hwm() - base,
                  "model_cpu": cost.cpu_seconds, "model_peak": cost.memory_bytes}))
"""


def strings_sums(spec: dict[str, Any], n: int, cache: Path) -> Path:
    path = cache / f"strings_{spec['max_length']}_{spec['epsilon']}_{n}.npy"
    if not path.exists():
        d = MetricDefinition.from_dict("m", spec)
        m = d.mechanism_instance
        total = np.zeros(m.stats_size)
        for start in range(0, n, 200_000):
            size = min(200_000, n - start)
            values = d.kind_spec.encode_many(d, urls(size, spec["max_length"], start))
            total += m.aggregate(m.perturb(values, rng=np.random.default_rng(start))).sums
        np.save(path, total)
    return path


def costs(args: argparse.Namespace) -> int:
    cache = Path(tempfile.gettempdir())
    rows: list[tuple[str, dict[str, Any], str, int]] = []
    for pair in args.grid.split(","):
        length, k = map(int, pair.split("x"))
        spec = {"kind": "strings", "max_length": length, "k": k, "epsilon": 1.0}
        rows.append((f"strings max_length {length}, k {k}", spec, "", args.n))
    dims = {"a": [f"a{i}" for i in range(1024)], "b": [f"b{i}" for i in range(64)]}
    leaves = [f"r{i // 4096}/m{i // 64 % 64}/l{i % 64}" for i in range(65536)]
    table = {"kind": "table", "epsilon": 1.0, "dimensions": dims}
    hierarchy = {"kind": "hierarchy", "epsilon": 1.0, "categories": leaves}
    dist = {"kind": "distribution", "epsilon": 1.0, "bounds": [0, 100], "resolution": 4096}
    rows.append(("table 1024 x 64", table, "-", 200_000))
    rows.append(("hierarchy 65,536 leaves (3 levels)", hierarchy, "-", 200_000))
    rows.append(("distribution 4,096 leaves", dist, "-", 200_000))
    print(f"{'definition':<34} {'CPU s':>7} {'model':>7} {'peak MiB':>9} {'model':>7}")
    for label, spec, path, n in rows:
        sums = "" if path else str(strings_sums(spec, n, cache))
        out = subprocess.run(
            [sys.executable, "-c", COSTS_CHILD, sums, str(n)],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        print(
            f"{label:<34} {r['cpu']:>7.1f} {r['model_cpu']:>7.1f} {r['peak'] / 2**20:>9,.0f}"
            f" {r['model_peak'] / 2**20:>7,.0f}",
            flush=True,
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--batch", type=int, default=1000, help="GRR reports per batch")
    parser.add_argument("--concurrency", type=int, default=16, help="GRR batches in flight")
    parser.add_argument("--costs", action="store_true", help="decode costs instead")
    parser.add_argument("--grid", default="64x20,64x100,64x143,64x250,32x100,16x100")
    parser.add_argument("--n", type=int, default=1_000_000, help="strings reports (--costs)")
    args = parser.parse_args()
    return costs(args) if args.costs else attack(args)


if __name__ == "__main__":
    sys.exit(main())
