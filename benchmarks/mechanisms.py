"""Throughput and accuracy of every mechanism, against the targets of the issue.

For each mechanism, epsilon in {1, 4} and (categorical) d in {16, 1024}:

- perturb rate: reports per second of ``perturb`` on n values (median of runs), with the
  production bit generator (Philox), seeded so runs are reproducible;
- aggregate + estimate: seconds to aggregate n reports and estimate (median of runs),
  and the same per report beside ``aggregate_cost`` (the counters the collector updates
  per report: the model ``choose()`` shows as the collector's cost);
- MSE / theory: the n reports are split into R campaigns; for a frequency oracle the
  mean over campaigns and items of (estimate - true fraction)^2 divided by the
  variance formula at the campaign's true fractions (Zipf-like truth, s = 1.1); for a
  numeric mechanism the mean over campaigns of the squared error of the mean against
  the population mean, divided by (E[variance(x)] + Var(x)) / users. Both should be
  close to 1 (about +-0.03 for one standard deviation here).

Targets (flagged with ``!`` when missed): aggregate + estimate of 10^6 reports under 1 s
(under 5 s for SUE, OUE and OLH at d = 1024); perturb at least 10^6 reports/s for RR,
GRR, OLH and HR; MSE / theory in [0.9, 1.1].

Run: ``.venv/bin/python benchmarks/mechanisms.py [--n 1000000] [--mechanisms grr,olh]
[--quick]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import ldpkit
from ldpkit.mechanisms import CATEGORICAL, NUMERIC, FrequencyOracle, NumericMechanism

EPSILONS = (1.0, 4.0)
DOMAINS = (16, 1024)
BOUNDS = (0.0, 1.0)
SLOW_AGGREGATE = {("sue", 1024), ("oue", 1024), ("olh", 1024)}
FAST_PERTURB = {"rr", "grr", "olh", "hr"}
# Squared errors pooled for the MSE ratio (campaigns x items for frequency oracles).
POOLED_ERRORS = 4096


@dataclass
class Row:
    name: str
    epsilon: float
    d: int | None
    perturb_rate: float
    aggregate_seconds: float
    mse_ratio: float
    notes: str = ""

    def misses(self) -> list[str]:
        out = []
        slow = (self.name, self.d) in SLOW_AGGREGATE
        limit = 5.0 if slow else 1.0
        if self.aggregate_seconds > limit:
            out.append(f"aggregate > {limit:g} s")
        if self.name in FAST_PERTURB and self.perturb_rate < 1e6:
            out.append("perturb < 1e6/s")
        if not 0.9 <= self.mse_ratio <= 1.1:
            out.append("MSE/theory outside [0.9, 1.1]")
        return out


def generator(seed: int) -> np.random.Generator:
    """The production bit generator (Philox), with a fixed key."""
    return np.random.Generator(np.random.Philox(key=seed))


def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def zipf_truth(d: int, s: float = 1.1) -> npt.NDArray[np.float64]:
    weights = np.arange(1, d + 1, dtype=np.float64) ** -s
    out: npt.NDArray[np.float64] = weights / weights.sum()
    return out


def bench_oracle(m: FrequencyOracle, n: int, runs: int, seed: int) -> Row:
    d = m.domain_size
    rng = generator(seed)
    values = rng.choice(d, size=n, p=zipf_truth(d))
    perturb_s, reports = median_time(lambda: m.perturb(values, rng=rng), runs)
    agg_s, _ = median_time(lambda: m.estimate(m.aggregate(reports)), runs)
    campaigns = max(4, math.ceil(POOLED_ERRORS / d))
    users = n // campaigns
    ratios = []
    for c in range(campaigns):
        part = slice(c * users, (c + 1) * users)
        truth = np.bincount(values[part], minlength=d) / users
        est = m.estimate(m.aggregate(reports[part]))
        ratios.append((est.frequencies - truth) ** 2 / m.variance(truth, users))
    return Row(m.name, m.epsilon, d, n / perturb_s, agg_s, float(np.mean(ratios)))


def bench_numeric(m: NumericMechanism, n: int, runs: int, seed: int) -> Row:
    rng = generator(seed)
    # Beta(2, 5) on [0, 1]: mean 2/7, variance 10/392.
    values = rng.beta(2.0, 5.0, size=n)
    perturb_s, reports = median_time(lambda: m.perturb(values, rng=rng), runs)
    agg_s, _ = median_time(lambda: m.estimate(m.aggregate(reports)), runs)
    campaigns = 2000 if n >= 200_000 else 200
    users = n // campaigns
    true_mean, true_var = 2.0 / 7.0, 10.0 / 392.0
    per_report = float(np.mean(m.variance(values))) + true_var
    errors = [
        (m.estimate(m.aggregate(reports[c * users : (c + 1) * users])).mean - true_mean) ** 2
        for c in range(campaigns)
    ]
    ratio = float(np.mean(errors)) / (per_report / users)
    return Row(m.name, m.epsilon, None, n / perturb_s, agg_s, ratio)


def load(name: str) -> bool:
    try:
        ldpkit.mechanisms.mechanism_class(name)
    except ImportError as exc:
        print(f"skipped {name}: its module does not import yet ({exc})")
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="reports per configuration")
    parser.add_argument(
        "--mechanisms",
        default=",".join(("rr", *CATEGORICAL, *NUMERIC)),
        help="comma-separated names (default: all)",
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs (median)")
    parser.add_argument("--quick", action="store_true", help="n = 100000 and one timed run")
    args = parser.parse_args(argv)
    n, runs = (min(args.n, 100_000), 1) if args.quick else (args.n, args.runs)
    names = [s.strip() for s in args.mechanisms.split(",") if s.strip()]

    print(f"n = {n:,} reports, median of {runs} run(s)\n")
    header = (
        f"{'mechanism':<10} {'eps':>4} {'d':>5} {'perturb/s':>12} {'agg+est s':>10} "
        f"{'ns/report':>9} {'counters':>8} {'MSE/theory':>10}  targets"
    )
    print(header)
    print("-" * len(header))
    rows: list[Row] = []
    for name in names:
        if not load(name):
            continue
        for epsilon in EPSILONS:
            if name in NUMERIC:
                configs: list[dict[str, Any]] = [{"bounds": BOUNDS}]
            elif name == "rr":
                configs = [{"domain_size": 2}]
            else:
                configs = [{"domain_size": d} for d in DOMAINS]
            for config in configs:
                m = ldpkit.mechanism(name, epsilon=epsilon, **config)
                seed = 1 + len(rows)
                if isinstance(m, FrequencyOracle):
                    row = bench_oracle(m, n, runs, seed)
                else:
                    assert isinstance(m, NumericMechanism)
                    row = bench_numeric(m, n, runs, seed)
                rows.append(row)
                missed = row.misses()
                d = "-" if row.d is None else str(row.d)
                print(
                    f"{row.name:<10} {row.epsilon:>4g} {d:>5} {row.perturb_rate:>12,.0f} "
                    f"{row.aggregate_seconds:>10.3f} {row.aggregate_seconds / n * 1e9:>9.0f} "
                    f"{m.aggregate_cost:>8} {row.mse_ratio:>10.3f}  "
                    + ("! " + "; ".join(missed) if missed else "ok"),
                    flush=True,
                )
    missed_rows = [r for r in rows if r.misses()]
    print(f"\n{len(rows) - len(missed_rows)} of {len(rows)} configurations meet every target")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
