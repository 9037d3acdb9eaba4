"""Forged reports against every mechanism, without and with ldpkit's defences.

An attacker with an ingest token (public in a web page) sends forged reports, a fraction
beta of all reports. On data this script generates (n honest users; categories: Zipf(1.1)
over d items; numbers and distributions: 100 * Beta(2, 5) on [0, 100]; strings: Zipf(1.1)
over 10,000 generated words) it measures what the attacks of Cao, Jia and Gong (USENIX
Security 2021) and an adaptive one do to the estimates. A distribution (``hh``, the
hierarchical histogram with d leaves) is attacked on its target range, its r = 10 top
leaves ([99.02, 100] at d = 1,024), where few values lie: each forged report draws its
depth as an honest device does, then sends that depth oracle's ``rpva`` or ``mga`` report
(below) for the depth's nodes that hold the target leaves; its gain is the change of the
range's estimated fraction. The attacks:

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

Strings (``prefix_sketch``, max_length 8, k 10, epsilon 4: their own table): 400 forged
reports and beta = 0.1% and 1% plant a made-up string, each report a sketch and row drawn
by the weights (as an honest device draws them) and the string's own cell in that row,
without noise. Printed: the string's estimate and whether the top-k lists it, plain and
screened (no robust estimate for strings: n/a).

``shift <= bound`` compares the largest change the forged reports make to one item's (or
the mean's) expected estimate with the ``forgery_shift`` each answer discloses for the
fraction beta. ``held`` is the share of honest batches held (the false-alarm rate, counted
over all honest batches of a row).

Run: ``.venv/bin/python benchmarks/poisoning.py [--n 100000] [--epsilons 1,4]
[--betas 0.001,0.01,0.05] [--mechanisms grr,oue,...,hh,prefix_sketch] [--sources 1|botnet]
[--robust] [--seed 1]``, or ``--honest-cost [--ns 10000,100000] [--campaigns 100]
[--d 1024]``. Every mechanism by default; ``--mechanisms prefix_sketch`` runs the strings
table alone (``--epsilons``, ``--betas`` and ``--d`` do not apply to it).
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
from ldpkit.distribution import leaf_edges
from ldpkit.mechanisms import Mechanism
from ldpkit.mechanisms._bits import pack_rows
from ldpkit.mechanisms.hierarchical import _put
from ldpkit.mechanisms.local_hashing import bucket
from ldpkit.screening import DEFAULT_FALSE_ALARM

CATEGORICAL = ("grr", "sue", "oue", "olh", "ss", "hr")
NUMERIC = ("laplace", "piecewise", "hybrid", "duchi")
DISTRIBUTION = ("hh",)
STRINGS = ("prefix_sketch",)
ATTACKS = ("rpva", "ria", "mga", "mga-all", "adaptive")
TARGETS = 10
KEY_TRIES = 1000
BOUNDS = (0.0, 100.0)
NAT_SHARE, NATS = 0.05, 20
STRING_BETAS = (0.001, 0.01)

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
    """What the honest reporters hold: their fractions, their share of the target range (a
    distribution), or their mean."""
    if m.kind == "categorical":
        return np.bincount(values, minlength=int(getattr(m, "domain_size"))) / len(values)  # noqa: B009
    if m.kind == "distribution":
        return np.array([np.mean(values >= target_range(m)[0])])
    return np.array([np.mean(values)])


def targets_of(m: Mechanism, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """r items nobody much holds: drawn from the tail of the Zipf population; for a
    distribution, the r top leaves (:func:`target_range`)."""
    if m.kind == "distribution":
        resolution = int(getattr(m, "resolution"))  # noqa: B009
        return np.arange(resolution - TARGETS, resolution)
    d = int(getattr(m, "domain_size", 0))
    return np.sort(rng.choice(np.arange(d // 2, d), size=TARGETS, replace=False))


def target_range(m: Any) -> tuple[float, float]:
    """A distribution's target: its r top leaves, about the top 1% of the bounds at 1,024
    leaves ([99.02, 100] on [0, 100]), where few values of 100 Beta(2, 5) lie."""
    return float(leaf_edges(m.bounds, m.resolution)[m.resolution - TARGETS]), m.bounds[1]


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


def forge_distribution(
    m: Any, attack: str, count: int, leaves: npt.NDArray[np.int64], rng: np.random.Generator
) -> Reports:
    """Forged hierarchical histogram reports: the depth drawn as an honest device draws it
    (uniform: the law screening tests), then that depth's oracle report: ``rpva`` a random
    one; ``mga`` the oracle's maximal gain report for the depth's nodes that hold the
    target leaves (GRR: one of them; OLH: among 1,000 keys the one that puts the most of
    them in one bucket)."""
    out = np.zeros(count, dtype=m.report_dtype)
    out["depth"] = rng.integers(1, m.height + 1, size=count)
    for t, oracle in enumerate(m.oracles, start=1):
        rows = np.flatnonzero(out["depth"] == t)
        if rows.size:
            nodes = np.unique(m.tree.node_of_leaf(leaves, t))
            _put(out, forge_categorical(oracle, attack, rows.size, nodes, rng), rows)
    return out


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
    sizes = sorted({*(1 << j for j in range(1, len(batches).bit_length())), len(batches)})
    return any(m.screen_aggregate(m.aggregate(batches[:k]), alpha) is not None for k in sizes)


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
    """The plain estimate, or the robust one (``est.robust(beta)``), as an array; a
    distribution's: the target range's fraction (no robust one: NaN)."""
    if m.kind == "categorical":
        return np.asarray(est.robust(beta).frequencies if robust else est.frequencies)
    if m.kind == "distribution":
        return np.array([np.nan if robust else est.fraction(*target_range(m)).estimate])
    return np.array([est.robust(beta).mean if robust else est.mean])


def disclosed(m: Any, est: Any, beta: float) -> float:
    """The largest ``forgery_shift`` an answer discloses for the targets (or the mean)."""
    if m.kind == "distribution":
        return float(est.fraction(*target_range(m)).forgery_shift(beta))
    return float(np.max(est.forgery_shift(beta)))


def run_row(m: Any, h: Honest, attack: str, beta: float, args: argparse.Namespace) -> Row:
    rng = np.random.default_rng([args.seed, int(beta * 1e6), ATTACKS.index(attack)])
    honest = h.reports
    count = max(1, round(beta * args.n / (1.0 - beta)))
    categorical = m.kind == "categorical"
    targets = targets_of(m, rng) if m.kind != "numeric" else np.zeros(1, dtype=np.int64)
    forged = forge(m, attack, count, targets, rng)
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
        expected_shift(m, forged, h.truth, b), disclosed(m, ests[0], b),
        float(np.mean(~h.kept)), float(np.mean(~forged_kept)),
    )  # fmt: skip


def forge(
    m: Any, attack: str, count: int, targets: npt.NDArray[np.int64], rng: np.random.Generator
) -> Reports:
    """``count`` forged reports of ``attack`` against ``m`` (targets: items or leaves)."""
    if m.kind == "categorical":
        return forge_categorical(m, attack, count, targets, rng)
    if m.kind == "distribution":
        return forge_distribution(m, attack, count, targets, rng)
    return forge_numeric(m, attack, count, rng)


def applies(m: Any, attack: str) -> bool:
    """Whether the table has a row of ``attack`` on ``m``: an attack on every item at once
    where one report can support them all; a distribution's random and maximal gain."""
    if m.kind == "distribution":
        return attack in ("rpva", "mga")
    return attack != "mga-all" or m.name in ("sue", "oue", "olh", "hr")


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
        elif name in DISTRIBUTION:
            out.append(ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS, resolution=d))
        elif name not in STRINGS:  # (strings: their own table)
            out.append(ldpkit.mechanism(name, epsilon=epsilon, bounds=BOUNDS))
    return out


def _reduction(gain: float, defended: float, none_left: str = "all held") -> str:
    if np.isnan(defended):
        return "n/a"
    return none_left if not defended else f"{abs(gain) / abs(defended):.3g}x"


def _g(value: float, digits: int = 4) -> str:
    """A number, or ``n/a`` where there is none (a robust estimate of a distribution)."""
    return "n/a" if np.isnan(value) else f"{value:.{digits}g}"


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
                    if not applies(m, attack):
                        continue
                    start = time.perf_counter()
                    r = run_row(m, h, attack, beta, args)
                    over = r.shift > r.bound * (1 + 1e-9)
                    failures += over
                    cells = (f" {_g(r.robust_gain):>9} {_g(r.both_gain):>9} "
                             f"{_reduction(r.gain, r.both_gain, 'to 0'):>9} {_g(mse, 3):>10}"
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


# --- strings: a made-up string planted in the top-k ------------------------------------------
PLANTED = "zforged"  # no generated word has a z
WORDS = 10_000


def words(rng: np.random.Generator) -> list[str]:
    """``WORDS`` distinct generated words of 3 to 8 letters a..y."""
    found: dict[str, None] = {}
    letters = np.array(list("abcdefghijklmnopqrstuvwxy"))
    while len(found) < WORDS:
        for size in rng.integers(3, 9, size=WORDS):
            found["".join(rng.choice(letters, size))] = None
    return list(found)[:WORDS]


def plant(m: Any, count: int, rng: np.random.Generator) -> Reports:
    """Forged reports of the made-up string: a sketch and a row drawn by the weights, as an
    honest device draws them (the law screening tests), then the string's own cell in that
    row, without the randomized response's noise."""
    sketch = rng.choice(m.sketches, size=count, p=m.weights / m.weights.sum())
    row = np.array([m.first_row(s) + rng.integers(m.rows_of(s)) for s in sketch])
    return (row * m.g + m.true_buckets(PLANTED)[row]).astype(m.report_dtype)


def sketch_batches_pass(m: Any, reports: Reports, alpha: float) -> npt.NDArray[np.bool_]:
    """Whether each report, sent alone (the device cap), passes the batch laws. The laws
    treat every cell of a sketch alike (its rows are chosen alike, every bucket has the same
    bounds), so one report of each sketch decides for all its reports."""
    starts = np.array([m.first_row(s) for s in range(m.sketches)])
    sketch = np.searchsorted(starts, reports // m.g, side="right") - 1
    verdict = np.ones(m.sketches, dtype=np.bool_)
    for s in np.unique(sketch):
        verdict[s] = batches_pass(m, reports[np.flatnonzero(sketch == s)[:1]], alpha)[0]
    return np.asarray(verdict[sketch])


def planted(m: Any, reports: Reports) -> tuple[float, str, Any]:
    """The made-up string's estimate among ``reports``, its rank in the top-k (or no), and
    the decoded answer."""
    est = m.estimate(m.aggregate(reports))
    listed = [s.decode("utf-8", "replace") for s in est.strings]
    rank = f"#{listed.index(PLANTED) + 1} of {len(listed)}" if PLANTED in listed else "no"
    return float(est.query([PLANTED])[0].estimate), rank, est


def strings_table(args: argparse.Namespace) -> int:
    """Forged reports planting a made-up string among a Zipf(1.1) population of generated
    words (prefix_sketch, max_length 8, k 10, epsilon 4): is it listed in the top-k, plain
    and screened (no robust estimate for strings); 1 if a shift exceeds the disclosed one."""
    m: Any = ldpkit.mechanism("prefix_sketch", epsilon=4.0, max_length=8, k=10)
    rng = np.random.default_rng([args.seed, 17])
    vocabulary = words(rng)
    weights = 1.0 / np.arange(1, WORDS + 1) ** 1.1
    values = np.array(vocabulary, dtype=object)[
        rng.choice(WORDS, args.n, p=weights / weights.sum())
    ]
    honest = np.asarray(m.perturb(values, rng))
    kept = sketch_batches_pass(m, honest, args.alpha / 2.0)
    nat = np.flatnonzero(rng.random(args.n) < NAT_SHARE)
    for members in np.array_split(rng.permutation(nat), NATS):
        if window_fails(m, honest[members[kept[members]]], args.alpha / 2.0):
            kept[members] = False
    clean = planted(m, honest)
    est = clean[2]
    print(f"\nstrings: prefix_sketch, max_length 8, k 10, epsilon 4, n = {args.n:,} honest users "
          f"(Zipf(1.1) over {WORDS:,} generated words), {PLANTED!r} planted by forged reports "
          f"from {args.sources} source(s); no robust estimate for strings (n/a). Without forged "
          f"reports: estimate {clean[0]:.4g}, listed {clean[1]}; the top-k lists "
          f"{len(est.items)} of {est.k}, the last at {min(est.frequencies, default=np.nan):.4g}; "
          f"threshold {est.threshold:.4g}")  # fmt: skip
    print(f"{'forged':>7} {'beta':>6} {'plain':>9} {'listed':>10} {'screened':>9} "
          f"{'listed':>10} {'robust':>6} {'shift':>8} {'bound':>8} {'held honest':>11} "
          f"{'held forged':>11}")  # fmt: skip
    failures = 0
    for count in sorted({400, *(round(b * args.n / (1.0 - b)) for b in STRING_BETAS)}):
        start = time.perf_counter()
        forged = plant(m, count, np.random.default_rng([args.seed, count]))
        forged_kept = sketch_batches_pass(m, forged, args.alpha / 2.0)
        if args.sources == "1" and window_fails(m, forged[forged_kept], args.alpha / 2.0):
            forged_kept[:] = False
        plain = planted(m, np.concatenate([honest, forged]))
        screened = planted(m, np.concatenate([honest[kept], forged[forged_kept]]))
        b = count / (count + args.n)
        alone = float(m.estimate(m.aggregate(forged)).query([PLANTED])[0].estimate)
        shift = b * (0.0 if np.isnan(alone) else alone)  # NaN: none in the estimation sketch
        bound = m.estimate(m.empty_aggregate()).forgery_shift(b)
        failures += shift > bound * (1 + 1e-9)
        print(f"{count:>7} {b:>6.2%} {plain[0]:>9.4g} {plain[1]:>10} {screened[0]:>9.4g} "
              f"{screened[1]:>10} {'n/a':>6} {shift:>8.4g} {bound:>8.4g}"
              f"{'!' if shift > bound * (1 + 1e-9) else ' '}{np.mean(~kept):>11.2e} "
              f"{np.mean(~forged_kept):>11.1%}  ({time.perf_counter() - start:.1f}s)",
              flush=True)  # fmt: skip
    return 1 if failures else 0


# --- the robust estimate's cost on honest data ------------------------------------------------
POPULATIONS = ("zipf", "uniform", "ninety")


def _honest_mse_ratio(m: Any, h: Honest) -> float:
    if m.kind == "distribution":
        return float("nan")
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
            if m.kind == "distribution":  # no robust estimate
                continue
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
    ap.add_argument(
        "--mechanisms", default=",".join(CATEGORICAL + NUMERIC + DISTRIBUTION + STRINGS)
    )
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
    if args.honest_cost:
        return honest_cost(args)
    failed = attack_table(args) if set(args.mechanisms.split(",")) - set(STRINGS) else 0
    return max(failed, strings_table(args) if set(STRINGS) & set(args.mechanisms.split(",")) else 0)


if __name__ == "__main__":
    sys.exit(main())
