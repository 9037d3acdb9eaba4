"""Client benchmark: latency of ``Reporter.report()`` and delivery throughput.

    .venv/bin/python benchmarks/client.py                 # everything
    .venv/bin/python benchmarks/client.py --no-delivery   # latency only
    .venv/bin/python benchmarks/client.py --against ../old -n 2000   # vs another checkout
    .venv/bin/python benchmarks/client.py --against ../old --shared  # + exclusive_state=False

Latency: every mechanism (categorical at d = 16 and d = 1024, numeric on [0, 1]), with
epsilon 1. Each call is a *fresh* report (a new hourly budget window, so the full path
runs: value check, HMAC-keyed Philox perturbation, memo lookup, budget check and spend,
outbox insert, WAL commit), measured with ``perf_counter_ns`` around ``report()``. The
background thread is off, so no flush competes with the measured calls.

Two paths, interleaved call by call so that both see the same machine load: the device's
per-value perturbation (``Mechanism.perturb_value``: Python numbers, the bit generator's
words) and, as ``vec``, the vectorised path it replaced (``perturb_checked`` of a
one-element array, what ``report()`` ran before). Both columns are given for ``report()``
and for the perturbation alone (a fresh keyed generator included, as the device makes one).

Delivery: a ``ldpkit serve`` subprocess on SQLite; N reports queued (``simulate``), then
``flush()`` timed until the collector has acknowledged every one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import cast

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _host import yardstick

from ldpkit.client import MetricDefinition, Reporter
from ldpkit.client.codec import MetricCodec, keyed_generator
from ldpkit.mechanisms import CATEGORICAL, NUMERIC

TARGET_P50_US = 200.0


class SteppingClock:
    """Moves one hour per call, so every report opens a fresh hourly window."""

    def __init__(self) -> None:
        self.now = float(int(time.time()) // 3600 * 3600)

    def __call__(self) -> float:
        self.now += 3600.0
        return self.now


def vectorised_perturb(self: MetricCodec, encoded: int | float, rng: np.random.Generator) -> bytes:
    """``MetricCodec.perturb`` before the per-value path: a one-element array through the
    mechanism's vectorised ``perturb_checked``."""
    m = self.definition.mechanism_instance
    reports = m.perturb_checked(self.spec.as_array([encoded]), rng)
    return bytes(np.ascontiguousarray(reports).tobytes())


def latency(definition: MetricDefinition, value: object, n: int) -> dict[str, float]:
    """p50/p99 of report() on the per-value and (``vec``) the vectorised path, and p50 of
    the perturbation alone on each (interleaved, so all four see the same machine load)."""
    mechanism = definition.mechanism_instance
    codec_value = definition.kind_spec.encode(definition, value)[0]
    one = definition.kind_spec.as_array([codec_value])
    per_value = MetricCodec.perturb
    times = {k: np.empty(n, dtype=np.float64) for k in ("report", "vec", "perturb", "perturb_vec")}
    with tempfile.TemporaryDirectory() as tmp:
        r = Reporter(
            "http://127.0.0.1:9",
            state_dir=tmp,
            metrics=[definition],
            clock=SteppingClock(),
            background=False,
            max_outbox=20 * n + 1000,
        )
        try:
            for _ in range(min(200, n)):
                r.report(definition.name, value)
            report = r.report
            name = definition.name
            clock = time.perf_counter_ns
            for i in range(n):
                t0 = clock()
                mechanism.perturb_value(codec_value, keyed_generator(os.urandom(16)))
                t1 = clock()
                mechanism.perturb_checked(one, keyed_generator(os.urandom(16)))
                t2 = clock()
                report(name, value)
                t3 = clock()
                MetricCodec.perturb = vectorised_perturb  # type: ignore[method-assign]
                t4 = clock()
                report(name, value)
                t5 = clock()
                MetricCodec.perturb = per_value  # type: ignore[method-assign]
                times["perturb"][i] = t1 - t0
                times["perturb_vec"][i] = t2 - t1
                times["report"][i] = t3 - t2
                times["vec"][i] = t5 - t4
        finally:
            MetricCodec.perturb = per_value  # type: ignore[method-assign]
            r.close(flush=False)
    return {
        "p50_us": float(np.percentile(times["report"], 50)) / 1e3,
        "p99_us": float(np.percentile(times["report"], 99)) / 1e3,
        "vec_p50_us": float(np.percentile(times["vec"], 50)) / 1e3,
        "perturb_p50_us": float(np.percentile(times["perturb"], 50)) / 1e3,
        "perturb_vec_p50_us": float(np.percentile(times["perturb_vec"], 50)) / 1e3,
    }


def run_latency(n: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    cases: list[tuple[str, MetricDefinition, object]] = []
    for name in CATEGORICAL:
        for d in (16, 1024):
            cats = [f"c{i}" for i in range(d)]
            definition = MetricDefinition.categorical(
                "bench", cats, epsilon=1.0, mechanism=name, bucket="hour", budget_period="hour"
            )
            cases.append((f"{name} d={d}", definition, cats[d // 3]))
    for name in NUMERIC:
        definition = MetricDefinition.numeric(
            "bench", (0.0, 1.0), epsilon=1.0, mechanism=name, bucket="hour", budget_period="hour"
        )
        cases.append((f"{name} [0,1]", definition, 0.3))
    print(
        f"report() latency, {n} fresh reports each, microseconds (target p50 < {TARGET_P50_US:g});"
    )
    print(
        "'perturb' is the per-value perturb_value() of one value (a fresh keyed generator "
        "included), 'client' report() less it; 'vec' the vectorised path of one value, which "
        "report() ran before (p50s; p99 of report())"
    )
    print(yardstick())
    print(
        f"{'mechanism':<16}{'p50':>9}{'p99':>9}{'perturb':>9}{'client':>9}"
        f"{'p50 vec':>9}{'pert vec':>9}{'ratio':>7}"
    )
    for label, definition, value in cases:
        fig = latency(definition, value, n)
        flag = "" if fig["p50_us"] < TARGET_P50_US else "   ! over target"
        print(
            f"{label:<16}{fig['p50_us']:>9.1f}{fig['p99_us']:>9.1f}{fig['perturb_p50_us']:>9.1f}"
            f"{fig['p50_us'] - fig['perturb_p50_us']:>9.1f}{fig['vec_p50_us']:>9.1f}"
            f"{fig['perturb_vec_p50_us']:>9.1f}{fig['p50_us'] / fig['vec_p50_us']:>7.2f}{flag}",
            flush=True,
        )
        rows.append({"case": label, **fig})
    return rows


# --- against another tree ---------------------------------------------------------------
# The same measurement run by any checkout's own Python (it uses only the public Reporter
# API of every version since the client had clock= and background=), so that report() of
# this tree and of a baseline are timed by one harness, alternated case by case.
BASELINE_HARNESS = r"""
import json, sys, tempfile, time
import numpy as np
from ldpkit.client import MetricDefinition, Reporter

class SteppingClock:
    def __init__(self):
        self.now = float(int(time.time()) // 3600 * 3600)
    def __call__(self):
        self.now += 3600.0
        return self.now

n, name, domain = int(sys.argv[1]), sys.argv[2], sys.argv[3]
options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}  # more Reporter keywords
if domain == "num":
    definition = MetricDefinition.numeric(
        "bench", (0.0, 1.0), epsilon=1.0, mechanism=name, bucket="hour", budget_period="hour")
    value = 0.3
else:
    cats = [f"c{i}" for i in range(int(domain))]
    definition = MetricDefinition.categorical(
        "bench", cats, epsilon=1.0, mechanism=name, bucket="hour", budget_period="hour")
    value = cats[int(domain) // 3]
with tempfile.TemporaryDirectory() as tmp:
    r = Reporter("http://127.0.0.1:9", state_dir=tmp, metrics=[definition],
                 clock=SteppingClock(), background=False, max_outbox=2 * n + 1000, **options)
    for _ in range(200):
        r.report("bench", value)
    times = np.empty(n)
    clock, report = time.perf_counter_ns, r.report
    for i in range(n):
        t0 = clock()
        report("bench", value)
        times[i] = clock() - t0
    r.close(flush=False)
print(json.dumps(float(np.median(times)) / 1e3))
"""


def baseline_cases() -> list[tuple[str, str, str]]:
    cases = [(f"{m} d={d}", m, str(d)) for m in CATEGORICAL for d in (16, 1024)]
    return cases + [(f"{m} [0,1]", m, "num") for m in NUMERIC]


def run_against(
    baseline: Path, n: int, rounds: int, shared: bool = False, only: str | None = None
) -> list[dict[str, object]]:
    """report() p50 of this tree and of ``baseline`` (a checkout with its own .venv),
    each case run in a fresh process of each, alternated, ``rounds`` times; the median
    of each side's p50s and their ratio. ``shared``: this tree also with
    ``exclusive_state=False`` (processes may share the state_dir; the default before it
    became True), a third process per round and a third column. ``only``: the cases whose
    label contains it (all by default)."""
    this_python = sys.executable
    base_python = str(baseline / ".venv" / "bin" / "python")
    if not Path(base_python).exists():
        raise SystemExit(f"{base_python} not found: make the baseline's venv first")

    def p50(python: str, cwd: Path, name: str, domain: str, options: str = "{}") -> float:
        out = subprocess.run(
            [python, "-c", BASELINE_HARNESS, str(n), name, domain, options],
            cwd=cwd, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return float(out.stdout.strip().splitlines()[-1])

    here = Path(__file__).resolve().parent.parent
    print(f"report() p50, microseconds: this tree vs {baseline}, {n} fresh reports a run, "
          f"{rounds} alternated runs a case (medians)")  # fmt: skip
    print(yardstick())
    extra = f"{'shared':>10}{'ratio':>8}" if shared else ""
    print(f"{'mechanism':<16}{'baseline':>10}{'this':>10}{'ratio':>8}{extra}")
    rows: list[dict[str, object]] = []
    for label, name, domain in baseline_cases():
        if only is not None and only not in label:
            continue
        base, this, excl = [], [], []
        for _ in range(rounds):
            base.append(p50(base_python, baseline, name, domain))
            this.append(p50(this_python, here, name, domain))
            if shared:
                excl.append(p50(this_python, here, name, domain, '{"exclusive_state": false}'))
        b, t = float(np.median(base)), float(np.median(this))
        row: dict[str, object] = {"case": label, "baseline_p50_us": b, "p50_us": t, "ratio": t / b}
        line = f"{label:<16}{b:>10.1f}{t:>10.1f}{t / b:>8.2f}"
        if shared:
            e = float(np.median(excl))
            row |= {"shared_p50_us": e, "shared_ratio": e / b}
            line += f"{e:>10.1f}{e / b:>8.2f}"
        print(line, flush=True)
        rows.append(row)
    for key in ("ratio", "shared_ratio") if shared else ("ratio",):
        ratios = [cast(float, r[key]) for r in rows]
        print(f"{key}: median {np.median(ratios):.2f}, range {min(ratios):.2f}-"
              f"{max(ratios):.2f}, {sum(r <= 0.5 for r in ratios)} of {len(ratios)} at or "
              "under 0.5")  # fmt: skip
    return rows


# --- delivery ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_collector(
    tmp: Path, definitions: list[MetricDefinition]
) -> tuple[subprocess.Popen[bytes], str]:
    """``ldpkit serve`` with one relay token (simulate: many devices' reports) and the
    benchmark's metrics."""
    config = tmp / "collector.toml"
    lines = ["[tokens]", 'relay = ["bench-relay"]', 'read = ["bench-read"]', ""]
    for d in definitions:
        lines.append(f"[metrics.{d.name}]")
        for key, value in d.to_dict().items():
            if key in ("name", "fingerprint", "resolved_mechanism", "report_size"):
                continue
            lines.append(f"{key} = {json.dumps(value)}")
        lines.append("")
    config.write_text("\n".join(lines))
    port = free_port()
    exe = Path(sys.executable).with_name("ldpkit")
    proc = subprocess.Popen(
        [
            str(exe),
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--database",
            str(tmp / "collector.db"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"ldpkit serve exited with {proc.returncode}: {err[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/metrics", timeout=1):
                return proc, url
        except urllib.error.HTTPError:
            return proc, url  # it answers
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("ldpkit serve did not answer within 30 s")


def run_delivery(total: int, batch_size: int) -> dict[str, object] | None:
    definition = MetricDefinition.categorical(
        "theme", [f"c{i}" for i in range(16)], epsilon=1.0, mechanism="oue"
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            proc, url = start_collector(tmp, [definition])
        except (RuntimeError, FileNotFoundError) as exc:
            print(f"delivery: collector not available ({exc})")
            return None
        try:
            values = [f"c{i % 16}" for i in range(total)]
            with Reporter(
                url,
                token="bench-relay",
                state_dir=tmp / "client",
                metrics=[definition],
                background=False,
                batch_size=batch_size,
                max_outbox=total + 1,
            ) as r:
                r.simulate("theme", values)
                t0 = time.perf_counter()
                result = r.flush()
                elapsed = time.perf_counter() - t0
            rate = result.sent / elapsed
            print(
                f"delivery: {result.sent} reports in {elapsed:.2f} s = {rate:,.0f} reports/s "
                f"(batch_size {batch_size}, oue d=16, one flush, SQLite collector)"
            )
            return {"reports": result.sent, "seconds": elapsed, "reports_per_s": rate}
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3000, help="reports per latency case")
    parser.add_argument("--delivery-reports", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--no-delivery", action="store_true")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--against",
        type=Path,
        help="a baseline checkout with its own .venv: time report() there and here, "
        "alternated, and print the ratios (nothing else runs)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternated runs a case (--against)")
    parser.add_argument("--only", help="with --against: the cases whose label contains this")
    parser.add_argument(
        "--shared",
        action="store_true",
        help="with --against: also time this tree with Reporter(exclusive_state=False)",
    )
    args = parser.parse_args()
    if args.shared and args.against is None:
        parser.error("--shared compares against a baseline: give --against DIR too")
    out: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    if args.against is not None:
        out["against"] = run_against(args.against, args.n, args.rounds, args.shared, args.only)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return 0
    latency = run_latency(args.n)
    out["latency"] = latency
    if not args.no_delivery:
        out["delivery"] = run_delivery(args.delivery_reports, args.batch_size)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    slow = [str(row["case"]) for row in latency if cast(float, row["p50_us"]) >= TARGET_P50_US]
    if slow:
        print(f"\n! report() p50 at or over {TARGET_P50_US:g} us: {', '.join(slow)}")
    return 1 if slow else 0  # a missed target fails the run


if __name__ == "__main__":
    raise SystemExit(main())
