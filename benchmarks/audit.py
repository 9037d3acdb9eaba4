"""Privacy audit of every mechanism: an empirical lower bound on the epsilon it gives.

For each mechanism and epsilon in {0.5, 1, 2, 4} (categorical: d = 4; numeric: bounds
(0, 1)) this runs :func:`ldpkit.audit.audit` and prints the claimed epsilon, the lower
bound (99% confidence unless ``--confidence``), the ratio of the two, the witnessing
pair and event, the samples per input and the seconds taken. Then the same for
deliberately broken mechanisms (marked ``BROKEN x2``): copies that perturb with twice the
epsilon they state. Correct mechanisms must pass (lower bound <= claimed); broken ones
must fail. The exit status is 1 if either expectation is missed.

Run: ``.venv/bin/python benchmarks/audit.py [--samples 200000] [--quick]
[--mechanisms grr,laplace] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ldpkit
from ldpkit.audit import AuditResult, audit
from ldpkit.mechanisms import CATEGORICAL, NUMERIC
from ldpkit.testing import mislabelled

EPSILONS = (0.5, 1.0, 2.0, 4.0)
DOMAIN = 4
BOUNDS = (0.0, 1.0)
BROKEN_FACTOR = 2.0


def make(name: str, epsilon: float) -> ldpkit.Mechanism:
    if name == "rr":
        return ldpkit.mechanism("rr", epsilon=epsilon)
    if name in CATEGORICAL:
        return ldpkit.mechanism(name, epsilon=epsilon, domain_size=DOMAIN)
    return ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS)


def fmt_input(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def row(label: str, result: AuditResult, expect_pass: bool) -> tuple[str, bool]:
    ok = result.passed == expect_pass
    verdict = "pass" if result.passed else "FAIL"
    flag = "" if ok else "  <-- unexpected"
    witness = (
        f"{fmt_input(result.witness[0])} vs {fmt_input(result.witness[1])}"
        if result.witness
        else "-"
    )
    event = result.event or "-"
    if len(event) > 48:
        event = event[:45] + "..."
    line = (
        f"{label:<18} {result.claimed_epsilon:>5g} {result.epsilon_lower_bound:>8.4f} "
        f"{result.epsilon_lower_bound / result.claimed_epsilon:>6.3f} {verdict:<5} "
        f"{witness:<10} {event:<48} {result.samples:>9,} {result.seconds:>6.2f}{flag}"
    )
    return line, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200_000, help="reports per input")
    parser.add_argument("--quick", action="store_true", help="20,000 samples, eps 1 and 4")
    parser.add_argument("--mechanisms", default="", help="comma-separated names (default all)")
    parser.add_argument("--confidence", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    samples = 20_000 if args.quick else args.samples
    epsilons = (1.0, 4.0) if args.quick else EPSILONS
    names = [n for n in args.mechanisms.split(",") if n] or ["rr", *CATEGORICAL, *NUMERIC]

    print(
        f"audit at {args.confidence:g} confidence, {samples:,} reports per input; "
        f"categorical d = {DOMAIN}, numeric bounds {BOUNDS}\n"
    )
    header = (
        f"{'mechanism':<18} {'eps':>5} {'lower':>8} {'lb/eps':>6} {'':<5} "
        f"{'witness':<10} {'event':<48} {'samples':>9} {'sec':>6}"
    )
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    unexpected = 0
    for broken in (False, True):
        for name in names:
            for eps in epsilons:
                seed = np.random.default_rng(
                    [args.seed, int(broken), sum(map(ord, name)), int(eps * 8)]
                )
                m = make(name, eps)
                label = name
                if broken:
                    m = mislabelled(m, BROKEN_FACTOR)
                    label = f"{name} BROKEN x{BROKEN_FACTOR:g}"
                result = audit(m, samples=samples, confidence=args.confidence, rng=seed)
                line, ok = row(label, result, expect_pass=not broken)
                unexpected += not ok
                print(line, flush=True)
        if not broken:
            print()
    print(
        f"\n{unexpected} unexpected verdict(s); total {time.perf_counter() - started:.1f} s. "
        "A pass is no proof of privacy; a failure proves a violation at the stated confidence."
    )
    return 1 if unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
