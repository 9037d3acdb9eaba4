"""What preparing a square wave distribution costs (EMS), beside the collector's cost model.

The estimate worker prepares a distribution metric's estimate in the background; the
collector refuses a definition whose preparation may cost more than its budget
(``estimate_cpu_seconds``, ``estimate_memory_mib``) by the kind's cost model
(``ldpkit.kinds.distribution``: ``PREPARE_4096`` for the hierarchical histogram,
``ldpkit.mechanisms.square_wave.STEP_4096`` for the square wave). EMS iterates two
products with a d x d' channel until the log-likelihood settles, so its cost grows about
as d^3 (the steps as d^2, their
number with d) and with how long it takes to settle: more at a small epsilon, with a
population that is a spike or two modes, and more reports.

Each row is one definition built and one ``kind_spec.prepare`` (EMS, then the warm quantile
and range) in a fresh process with one BLAS thread (as the worker runs it, which builds the
definition, channel and all, within its memory budget): CPU seconds of the preparation, and
the peak resident memory (``VmHWM``, which sees numpy's arrays) above the process's before the
definition was built, while building it and while preparing (the channel then held), and the
model's figures. (The peak once read after the build missed the build's own, 640 MiB at
4,096 buckets when the channel was built whole.)

``--max-steps K`` caps EMS at K steps (the memory does not depend on the number of steps:
each step allocates the same vectors; the CPU columns are then not worst cases).

Run: ``.venv/bin/python benchmarks/square_wave_cost.py`` (about 10 minutes on the 2-core
development machine, most of it 4,096 buckets; ``--resolutions 64,256,1024`` for half a
minute), or
``--grid EPSILON:POPULATION:N,...`` for other settings (populations: uniform, point,
bimodal). The table of record is docs/deployment.md, "Sizing the worker".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

# The setting (epsilon 1, uniform, n 10^5), and the costliest found at 256 and
# 1,024 buckets (epsilon 0.1 .. 4, the three populations, n 10^4 .. 10^6): EMS takes all
# its 10,000 steps at 1,024 buckets (at epsilon 0.5, a point mass: 3,504).
GRID = "1:uniform:100000,0.1:bimodal:1000000"

CHILD = r"""
import gc, json, os, sys, time
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np
from ldpkit.mechanisms import square_wave
from ldpkit.metrics import MetricDefinition
spec, population, n = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if int(sys.argv[4]):
    square_wave.DEFAULT_MAX_ITERATIONS = int(sys.argv[4])
d = MetricDefinition.from_dict("m", spec)  # for the reports only: built again, measured
m, rng = d.mechanism_instance, np.random.default_rng(0)
lo, hi = spec["bounds"]
if population == "uniform":
    values = rng.uniform(lo, hi, n)
elif population == "point":  # every user at one value: EMS's slowest to settle
    values = np.full(n, lo + 0.37 * (hi - lo))
else:  # bimodal: 0.5 N(0.25, 0.05) + 0.5 N(0.7, 0.08) of the bounds, clipped
    u = np.where(rng.random(n) < 0.5, rng.normal(0.25, 0.05, n), rng.normal(0.7, 0.08, n))
    values = lo + np.clip(u, 0.0, 1.0) * (hi - lo)
aggregate = m.aggregate(m.perturb(values, rng=rng))
del d, m, values
gc.collect()
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # the peak starts afresh at the current RSS
base = hwm()
d = MetricDefinition.from_dict("m", spec)
build = hwm() - base
open("/proc/self/clear_refs", "w").write("5")
t = time.process_time()
estimate = d.kind_spec.prepare(d, aggregate)
cpu = time.process_time() - t
cost = d.kind_spec.cost(d)
print(json.dumps({"cpu": cpu, "build": build, "peak": max(build, hwm() - base),
                  "steps": estimate.reconstruction.iterations,
                  "model_cpu": cost.cpu_seconds, "model_peak": cost.memory_bytes}))
"""


def measure(
    resolution: int, epsilon: float, population: str, n: int, max_steps: int = 0
) -> dict[str, Any]:
    spec = {
        "kind": "distribution",
        "bounds": [0.0, 100.0],
        "resolution": resolution,
        "epsilon": epsilon,
        "mechanism": "square_wave",
    }
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec), population, str(n), str(max_steps)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--resolutions", default="64,256,1024,2048,4096")
    parser.add_argument("--grid", default=GRID, help="EPSILON:POPULATION:N,...")
    parser.add_argument("--max-steps", type=int, default=0, help="cap EMS (memory only)")
    args = parser.parse_args()
    settings = [s.split(":") for s in args.grid.split(",")]
    print(f"{'buckets':>7} {'eps':>5} {'population':<10} {'n':>9} {'steps':>6} {'CPU s':>8}"
          f" {'ms/step':>8} {'model':>7} {'build MiB':>9} {'peak MiB':>9} {'model':>7}",
          flush=True)  # fmt: skip
    for resolution in map(int, args.resolutions.split(",")):
        for epsilon, population, n in settings:
            r = measure(resolution, float(epsilon), population, int(n), args.max_steps)
            print(
                f"{resolution:>7} {float(epsilon):>5g} {population:<10} {int(n):>9,}"
                f" {r['steps']:>6} {r['cpu']:>8.3f} {1000 * r['cpu'] / r['steps']:>8.3f}"
                f" {r['model_cpu']:>7.2f} {r['build'] / 2**20:>9,.0f} {r['peak'] / 2**20:>9,.0f}"
                f" {r['model_peak'] / 2**20:>7,.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
