"""Forged reports against every mechanism, without and with ldpkit's defences.

An attacker with an ingest token (public in a web page) sends forged reports, a fraction
beta of all reports. On data this script generates (n honest users; categories: Zipf(1.1)
over d items; numbers: 100 * Beta(2, 5) on [0, 100]) it measures what the attacks of Cao,
Jia and Gong (USENIX Security 2021) and an adaptive one do to the estimates:

- ``rpva``, random perturbed value: each forged report a uniformly random output;
- ``ria``, random item: an honest report of a random target (numbers: of the upper bound);
- ``mga``, maximal gain: reports crafted to raise the r = 10 target items the most
  (GRR: a target; SUE/OUE: the targets' bits and l = round(p + (d-1) q - r) others, so
  the number of set bits is the honest mean; OLH: among 1,000 hash keys the one that puts
  the most targets in one bucket, and that bucket; SS: the targets and k - r others; HR:
  the column that supports the most targets among 1,000; numbers: the largest report);
- ``mga-all``: the largest gain on every item at once (SUE/OUE: every bit set; OLH: key
  a = 0, every item in one bucket; HR: column 0, which supports every item);
- ``adaptive``: maximal gain within the law the screening tests (SUE/OUE: the number of
  set bits drawn from the honest law, targets first; HR: the best nonzero column; OLH:
  uniform keys, the bucket with the most targets; numbers: honest reports of the bound).

The gain is Cao et al.'s: the sum over the targets of (estimate with the forged reports
- estimate without them); for a mean, its shift. Defences:

- ``none``: every report counted;
- ``screened``: as the collector screens (``ldpkit.screening``): every device batch (one
  report: the device cap) against the mechanism's per-report and pooled laws, and every
  sender's pooled window; a sender whose window fails has all its reports held. The
  forged reports come from ``--sources`` senders (1: one attacker's address; "botnet":
  each from its own), the honest ones from their own devices, 5% of them through 20
  shared addresses (carrier NATs: honest windows of ~250 reports).
- ``robust`` (with ``--robust``): the robust estimate (``est.robust(beta)``: frequencies
  projected onto the simplex, a mean clamped to the bounds), its gain measured against its
  own clean value; ``both``: robust after screening; ``honest MSE``: the robust estimate's
  squared error over the plain one's on the row's honest reports (``--honest-cost`` for
  seeded campaigns over populations and sizes, the ratio with its standard error).

``shift <= bound`` compares the largest change the forged reports make to one item's (or
the mean's) expected estimate with the ``forgery_shift`` each answer discloses for the
fraction beta. ``held`` is the share of honest batches held (the false-alarm rate, counted
over all honest batches of a row).

Run: ``.venv/bin/python benchmarks/poisoning.py [--n 100000] [--epsilons 1,4]
[--betas 0.001,0.01,0.05] [--mechanisms grr,oue,...] [--sources 1|botnet] [--robust]
[--seed 1]``, or ``--honest-cost [--ns 10000,100000] [--campaigns 100] [--d 1024]``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import ldpkit
from ldpkit.aggregate import Aggregate
from ldpkit.mechanisms import Mechanism
from ldpkit.mechanisms._bits import pack_rows
from ldpkit.mechanisms.local_hashing import bucket
from ldpkit.screening import DEFAULT_FALSE_ALARM

CATEGORICAL = ("grr", "sue", "oue", "olh", "ss", "hr")
NUMERIC = ("laplace", "piecewise", "hybrid", "duchi")
ATTACKS = ("rpva", "ria", "mga", "mga-all", "adaptive")
TARGETS = 10
KEY_TRIES = 1000
BOUNDS = (0.0, 100.0)
NAT_SHARE, NATS = 0.05, 20

Reports = npt.NDArray[Any]


# --- data --------------------------------------------------------------------------------
def honest_values(
    m: Mechanism, n: int, rng: np.random.Generator, population: str = "zipf"
) -> npt.NDArray[Any]:
    """n honest values: ``zipf`` (numbers: 100 Beta(2, 5)), ``uniform``, or ``ninety`` (one
    item, or the upper bound, held by 90%; the rest as ``zipf``)."""
    if m.kind == "categorical":
        d = int(getattr(m, "domain_size"))  # noqa: B009 - every categorical mechanism has it
        weights = 1.0 / np.arange(1, d + 1) ** (0.0 if population == "uniform" else 1.1)
        weights /= weights.sum()
        values = rng.choice(d, size=n, p=weights)
    else:
        spread = rng.uniform(size=n) if population == "uniform" else rng.beta(2.0, 5.0, size=n)
        values = BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * spread
    if population == "ninety":
        top = 0 if m.kind == "categorical" else BOUNDS[1]
        values[rng.random(n) < 0.9] = top
    return values


def genuine(m: Mechanism, values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """What the honest reporters hold: their fractions, or their mean."""
    if m.kind == "categorical":
        return np.bincount(values, minlength=int(getattr(m, "domain_size"))) / len(values)  # noqa: B009
    return np.array([np.mean(values)])


def targets_of(m: Mechanism, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """r items nobody much holds: drawn from the tail of the Zipf population."""
    d = int(getattr(m, "domain_size", 0))
    return np.sort(rng.choice(np.arange(d // 2, d), size=TARGETS, replace=False))


# --- forged reports ----------------------------------------------------------------------
def _bitmaps(d: int, rows: list[npt.NDArray[np.int64]]) -> Reports:
    bits = np.zeros((len(rows), d), dtype=np.bool_)
    for i, on in enumerate(rows):
        bits[i, on] = True
    return pack_rows(bits)


def _others(d: int, targets: npt.NDArray[np.int64], count: int, rng: np.random.Generator) -> Any:
    pool = np.setdiff1d(np.arange(d), targets)
    return rng.choice(pool, size=min(count, len(pool)), replace=False)


def forge_categorical(
    m: Any, attack: str, count: int, targets: npt.NDArray[np.int64], rng: np.random.Generator
) -> Reports:
    name, d = m.name, m.domain_size
    if attack == "rpva":
        return random_reports(m, count, rng)
    if attack == "ria":
        return np.asarray(m.perturb(rng.choice(targets, size=count), rng))
    if name == "grr":
        return rng.choice(targets, size=count).astype(m.report_dtype)
    if name in ("sue", "oue"):
        return _forge_unary(m, attack, count, targets, rng)
    if name == "ss":
        return _bitmaps(d, [_ss_row(m, targets, rng) for _ in range(count)])
    if name == "olh":
        return _forge_olh(m, attack, count, targets, rng)
    return _forge_hr(m, attack, count, targets, rng)


def _ss_row(m: Any, targets: npt.NDArray[np.int64], rng: np.random.Generator) -> Any:
    return np.concatenate([targets, _others(m.domain_size, targets, m.k - len(targets), rng)])


def _forge_unary(
    m: Any, attack: str, count: int, targets: npt.NDArray[np.int64], rng: np.random.Generator
) -> Reports:
    d, p, q = m.domain_size, m.p, m.q
    if attack == "mga-all":
        return _bitmaps(d, [np.arange(d)] * count)
    if attack == "mga":
        sizes = np.full(count, max(0, round(p + (d - 1) * q) - len(targets)))
    else:  # adaptive: the honest law of the number of set bits
        sizes = rng.binomial(1, p, count) + rng.binomial(d - 1, q, count) - len(targets)
    rows = []
    for size in sizes:
        if size < 0:
            rows.append(rng.choice(targets, size=len(targets) + int(size), replace=False))
        else:
            rows.append(np.concatenate([targets, _others(d, targets, int(size), rng)]))
    return _bitmaps(d, rows)


def _forge_olh(
    m: Any, attack: str, count: int, targets: npt.NDArray[np.int64], rng: np.random.Generator
) -> Reports:
    out = np.zeros(count, dtype=m.report_dtype)
    tries = 1 if attack == "adaptive" else KEY_TRIES
    for i in range(count):
        a = rng.integers(0, 2**64, size=tries, dtype=np.uint64)
        b = rng.integers(0, 2**64, size=tries, dtype=np.uint64)
        if attack == "mga-all":
            a[:] = 0
        buckets = bucket(targets[:, None], a[None, :], b[None, :], m.g)  # (r, tries)
        hits = np.stack([(buckets == y).sum(axis=0) for y in range(m.g)])  # (g, tries)
        best = np.unravel_index(int(np.argmax(hits)), hits.shape)
        out[i] = (a[best[1]], b[best[1]], best[0])
    return out


def _forge_hr(
    m: Any, attack: str, count: int, targets: npt.NDArray[np.int64], rng: np.random.Generator
) -> Reports:
    if attack == "mga-all":
        return np.zeros(count, dtype=m.report_dtype)
    columns = rng.integers(1, m.K, size=(count, KEY_TRIES))
    rows = (targets + 1).astype(np.int64)
    parity = np.bitwise_count(columns[:, :, None] & rows[None, None, :]) % 2
    best = np.argmax((parity == 0).sum(axis=2), axis=1)
    return columns[np.arange(count), best].astype(m.report_dtype)


def random_reports(m: Any, count: int, rng: np.random.Generator) -> Reports:
    """Uniformly random well-formed reports (the random perturbed-value attack)."""
    name = m.name
    if name == "grr":
        return rng.integers(0, m.domain_size, count).astype(m.report_dtype)
    if name == "duchi":
        return rng.choice(np.array([-1, 1], dtype=m.report_dtype), count)
    if name == "hr":
        return rng.integers(0, m.K, count).astype(m.report_dtype)
    if name in ("sue", "oue"):
        return pack_rows(rng.random((count, m.domain_size)) < 0.5)
    if name == "ss":
        return _bitmaps(m.domain_size, [rng.choice(m.domain_size, m.k, replace=False)
                                        for _ in range(count)])  # fmt: skip
    if name == "olh":
        out = np.zeros(count, dtype=m.report_dtype)
        out["a"] = rng.integers(0, 2**64, count, dtype=np.uint64)
        out["b"] = rng.integers(0, 2**64, count, dtype=np.uint64)
        out["y"] = rng.integers(0, m.g, count)
        return out
    lo, hi = numeric_range(m)
    return rng.integers(lo, hi + 1, count).astype(m.report_dtype)


def numeric_range(m: Any) -> tuple[int, int]:
    """The smallest and largest report the mechanism accepts."""
    name = m.name
    if name in ("laplace", "gaussian"):
        return -m.noise_cap, m.grid_steps + m.noise_cap
    if name == "duchi":
        return -1, 1
    bound = int(np.max(np.abs(m.perturb(np.full(20_000, BOUNDS[1]), np.random.default_rng(0)))))
    return -bound, bound


def forge_numeric(m: Any, attack: str, count: int, rng: np.random.Generator) -> Reports:
    if attack == "rpva":
        return random_reports(m, count, rng)
    if attack in ("ria", "adaptive"):
        return np.asarray(m.perturb(np.full(count, BOUNDS[1]), rng))
    top = numeric_range(m)[1]
    return np.full(count, top, dtype=m.report_dtype)


# --- screening, as the collector does it -----------------------------------------------------
@dataclass
class Honest:
    """A mechanism's honest reports and what screening makes of them (the same for every
    attack): which one-report batches pass, and which pass their NAT's window too."""

    reports: Reports
    kept: npt.NDArray[np.bool_]
    truth: npt.NDArray[np.float64]

    @classmethod
    def of(cls, m: Mechanism, n: int, alpha: float, rng: np.random.Generator) -> Honest:
        values = honest_values(m, n, rng)
        reports = np.asarray(m.perturb(values, rng))
        kept = batches_pass(m, reports, alpha / 2.0)
        nat = np.flatnonzero(rng.random(n) < NAT_SHARE)
        for members in np.array_split(rng.permutation(nat), NATS):
            members = members[kept[members]]
            if window_fails(m, reports[members], alpha / 2.0):
                kept[members] = False
        return cls(reports, kept, genuine(m, values))


def batches_pass(m: Mechanism, reports: Reports, alpha: float) -> npt.NDArray[np.bool_]:
    """Whether each report, sent alone (the device cap), passes the batch laws."""
    return np.array([
        m.screen_reports(reports[i : i + 1], alpha) is None
        and m.screen_aggregate(m.aggregate(reports[i : i + 1]), alpha) is None
        for i in range(len(reports))
    ])  # fmt: skip


def window_fails(m: Mechanism, batches: Reports, alpha: float) -> bool:
    """Whether a sender's window of one-report batches fails after some batch. The
    collector tests after every batch; this tests at sizes 2, 4, 8, ... and the end,
    which finds no more than the collector does (a conservative measure of the defence)."""
    if len(batches) < 2:
        return False
    sums = np.cumsum([m.aggregate(batches[i : i + 1]).sums for i in range(len(batches))], axis=0)
    sizes = sorted({*(1 << j for j in range(1, len(batches).bit_length())), len(batches)})
    return any(m.screen_aggregate(Aggregate(k, sums[k - 1]), alpha) is not None for k in sizes)


def screened_forged(
    m: Mechanism, forged: Reports, sources: str, alpha: float
) -> npt.NDArray[np.bool_]:
    """Which forged reports are counted: each passes its batch laws, and (one source) the
    source's window never fails."""
    kept = batches_pass(m, forged, alpha / 2.0)
    if sources == "1" and window_fails(m, forged[kept], alpha / 2.0):
        kept[:] = False
    return kept


# --- one row ---------------------------------------------------------------------------------
@dataclass
class Row:
    mechanism: str
    epsilon: float
    beta: float
    attack: str
    gain: float
    screened_gain: float
    robust_gain: float
    both_gain: float
    shift: float
    bound: float
    honest_held: float
    forged_held: float


def point(m: Any, est: Any, robust: bool, beta: float) -> npt.NDArray[np.float64]:
    """The plain estimate, or the robust one (``est.robust(beta)``), as an array."""
    if m.kind == "categorical":
        return np.asarray(est.robust(beta).frequencies if robust else est.frequencies)
    return np.array([est.robust(beta).mean if robust else est.mean])


def run_row(m: Any, h: Honest, attack: str, beta: float, args: argparse.Namespace) -> Row:
    rng = np.random.default_rng([args.seed, int(beta * 1e6), ATTACKS.index(attack)])
    honest = h.reports
    count = max(1, round(beta * args.n / (1.0 - beta)))
    categorical = m.kind == "categorical"
    targets = targets_of(m, rng) if categorical else np.zeros(1, dtype=np.int64)
    forged = forge_categorical(m, attack, count, targets, rng) if categorical else (
        forge_numeric(m, attack, count, rng))  # fmt: skip
    forged_kept = screened_forged(m, forged, args.sources, args.alpha)
    # clean, poisoned, and what screening counts
    sets = (honest, np.concatenate([honest, forged]),
            np.concatenate([honest[h.kept], forged[forged_kept]]))  # fmt: skip
    ests = [m.estimate(m.aggregate(r)) for r in sets]
    plain = [point(m, e, False, beta) for e in ests]
    robust = [point(m, e, True, beta) for e in ests] if args.robust else [np.full(1, np.nan)] * 3
    pick = targets if categorical else slice(None)
    gains = [float(np.sum((v - base[0])[pick])) for base in (plain, robust) for v in base[1:]]
    b = count / (count + args.n)
    return Row(
        m.name, m.epsilon, beta, attack, gains[0], gains[1], gains[2], gains[3],
        expected_shift(m, forged, h.truth, b), float(np.max(ests[0].forgery_shift(b))),
        float(np.mean(~h.kept)), float(np.mean(~forged_kept)),
    )  # fmt: skip


def expected_shift(m: Any, forged: Reports, truth: npt.NDArray[np.float64], b: float) -> float:
    """The largest change the forged reports make to an item's (or the mean's) expected
    estimate, what ``forgery_shift`` bounds: every estimator here is the mean of per-report
    debiased values, so a forged share b moves it by ``b (forged reports' estimate - truth)``
    (without the honest reports' noise, which the estimate's interval covers)."""
    return float(np.max(np.abs(b * (point(m, m.estimate(m.aggregate(forged)), False, b) - truth))))


def mechanisms(names: list[str], epsilon: float, d: int) -> list[Mechanism]:
    out = []
    for name in names:
        if name in CATEGORICAL:
            out.append(ldpkit.mechanism(name, epsilon=epsilon, domain_size=d))
        else:
            out.append(ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS))
    return out


def _reduction(gain: float, defended: float, none_left: str = "all held") -> str:
    return none_left if not defended else f"{abs(gain) / abs(defended):.3g}x"


def attack_table(args: argparse.Namespace) -> int:
    """The gains of every attack, without and with the defences; 1 if a measured shift
    exceeds the disclosed one."""
    print(f"n = {args.n:,} honest users, d = {args.d}, forged from {args.sources} source(s), "
          f"false-alarm rate {args.alpha:g} per batch")  # fmt: skip
    extra = f" {'robust':>9} {'both':>9} {'cut both':>9} {'honest MSE':>10}" if args.robust else ""
    print(f"{'mechanism':<10} {'eps':>4} {'beta':>6} {'attack':<9} {'gain':>9} {'screened':>9} "
          f"{'reduction':>9}{extra} {'shift':>8} {'bound':>8} {'held honest':>11} "
          f"{'held forged':>11}")  # fmt: skip
    failures = 0
    for eps in (float(e) for e in args.epsilons.split(",")):
        for m in mechanisms(args.mechanisms.split(","), eps, args.d):
            rng = np.random.default_rng([args.seed, round(eps * 100)])
            h = Honest.of(m, args.n, args.alpha, rng)
            mse = _honest_mse_ratio(m, h) if args.robust else float("nan")
            for beta in (float(b) for b in args.betas.split(",")):
                for attack in args.attacks.split(","):
                    if attack == "mga-all" and m.name not in ("sue", "oue", "olh", "hr"):
                        continue
                    start = time.perf_counter()
                    r = run_row(m, h, attack, beta, args)
                    over = r.shift > r.bound * (1 + 1e-9)
                    failures += over
                    cells = (f" {r.robust_gain:>9.4g} {r.both_gain:>9.4g} "
                             f"{_reduction(r.gain, r.both_gain, 'to 0'):>9} {mse:>10.3g}"
                             if args.robust else "")  # fmt: skip
                    print(f"{r.mechanism:<10} {r.epsilon:>4g} {r.beta:>6.1%} {r.attack:<9} "
                          f"{r.gain:>9.4g} {r.screened_gain:>9.4g} "
                          f"{_reduction(r.gain, r.screened_gain):>9}{cells} "
                          f"{r.shift:>8.4g} {r.bound:>8.4g}{'!' if over else ' '}"
                          f"{r.honest_held:>11.2e} {r.forged_held:>11.1%}"
                          f"  ({time.perf_counter() - start:.1f}s)", flush=True)  # fmt: skip
    print("! : the measured shift exceeds the disclosed forgery_shift" if failures else
          "every measured shift within the disclosed forgery_shift")  # fmt: skip
    return 1 if failures else 0


# --- the robust estimate's cost on honest data ------------------------------------------------
POPULATIONS = ("zipf", "uniform", "ninety")


def _honest_mse_ratio(m: Any, h: Honest) -> float:
    est = m.estimate(m.aggregate(h.reports))
    errors = [np.sum((point(m, est, robust, 0.01) - h.truth) ** 2) for robust in (True, False)]
    return float(errors[0] / errors[1])


def ratio_of_means(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> tuple[float, float]:
    """``mean(a) / mean(b)`` and its standard error (the delta method, paired campaigns)."""
    ma, mb, k = float(np.mean(a)), float(np.mean(b)), len(a)
    r = ma / mb
    cov = np.cov(a, b)
    rel = cov[0, 0] / ma**2 + cov[1, 1] / mb**2 - 2.0 * cov[0, 1] / (ma * mb)
    return r, abs(r) * float(np.sqrt(max(rel, 0.0) / k))


def campaign_errors(
    m: Any, population: str, n: int, args: argparse.Namespace
) -> npt.NDArray[np.float64]:
    """(plain, robust) squared errors of ``args.campaigns`` seeded honest campaigns."""
    errors = np.zeros((2, args.campaigns))
    for i in range(args.campaigns):
        rng = np.random.default_rng([args.seed, round(m.epsilon * 100), n, i])
        values = honest_values(m, n, rng, population)
        est, truth = m.estimate(m.aggregate(m.perturb(values, rng))), genuine(m, values)
        for j, robust in enumerate((False, True)):
            errors[j, i] = np.sum((point(m, est, robust, 0.01) - truth) ** 2)
    return errors


def honest_cost(args: argparse.Namespace) -> int:
    """The robust estimate's MSE over the plain one's on honest data: seeded campaigns per
    mechanism, epsilon, population and n (errors against what the reporters hold); 1 if a
    ratio exceeds 1.05."""
    print(f"robust / plain MSE on honest data, d = {args.d}, {args.campaigns} campaigns each: "
          f"squared errors summed over the items, their means and ratio (+- its standard "
          f"error)")  # fmt: skip
    print(f"{'mechanism':<10} {'eps':>4} {'population':<10} {'n':>7} {'plain MSE':>10} "
          f"{'robust MSE':>10} {'ratio':>7} {'+-':>6}")  # fmt: skip
    worst = 0.0
    for eps in (float(e) for e in args.epsilons.split(",")):
        for m in mechanisms(args.mechanisms.split(","), eps, args.d):
            for pop, n in itertools.product(POPULATIONS, (int(v) for v in args.ns.split(","))):
                plain, robust = campaign_errors(m, pop, n, args)
                ratio, se = ratio_of_means(robust, plain)
                worst = max(worst, ratio)
                print(f"{m.name:<10} {eps:>4g} {pop:<10} {n:>7} {np.mean(plain):>10.3g} "
                      f"{np.mean(robust):>10.3g} {ratio:>7.3f} {se:>6.3f}", flush=True)  # fmt: skip
    print(f"largest ratio {worst:.3f}")
    return 0 if worst <= 1.05 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--epsilons", default="1,4")
    ap.add_argument("--betas", default="0.001,0.01,0.05")
    ap.add_argument("--mechanisms", default=",".join(CATEGORICAL + NUMERIC))
    ap.add_argument("--attacks", default=",".join(ATTACKS))
    ap.add_argument("--sources", choices=("1", "botnet"), default="1")
    ap.add_argument("--alpha", type=float, default=DEFAULT_FALSE_ALARM)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--robust", action="store_true", help="add the robust estimate's columns")
    ap.add_argument("--honest-cost", action="store_true",
                    help="measure the robust estimate's MSE on honest data instead")  # fmt: skip
    ap.add_argument("--ns", default="10000,100000", help="honest-cost: the campaigns' sizes")
    ap.add_argument("--campaigns", type=int, default=100, help="honest-cost: per row")
    args = ap.parse_args(argv)
    return honest_cost(args) if args.honest_cost else attack_table(args)


if __name__ == "__main__":
    sys.exit(main())
