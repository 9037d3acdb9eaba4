"""Exact privacy of every categorical mechanism, and that the real sampler is that exact law.

For small domains every mechanism lists its whole output distribution
(``output_probabilities``). From it we check, exactly:

- the probabilities sum to 1 and every output is possible under every input;
- the largest ratio P(o | x) / P(o | x') is at most e^eps, and equals it (the
  mechanisms are tight);
- a report supports the true item with probability p and any other with q (what the
  estimator assumes).

Then a chi-square goodness-of-fit test (fixed seeds) checks that the vectorized
``perturb`` draws from that same distribution, so the exact checks are about the real
sampler. OLH reports carry their own hash key; its distribution is checked given the
key, for several keys, and the sampler's law of y relative to bucket(x) is tested on
reports with fresh keys.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit.mechanisms.local_hashing import OptimizedLocalHashing, bucket

EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
DOMAINS = [2, 3, 5, 8]
# Every categorical mechanism that enumerates its outputs without a hash key.
ENUMERABLE = ["rr", "grr", "sue", "oue", "ss", "hr"]
# Hash keys (a, b) for OLH, including the degenerate a = 0 (every item in one bucket).
OLH_KEYS = [
    (0x9E3779B97F4A7C15, 0x0123456789ABCDEF),
    (1, 0),
    (2**64 - 1, 2**64 - 1),
    (0xD1B54A32D192ED03, 0x8CB92BA72F3D8DD7),
    (0, 0x5555555555555555),
]
# (epsilon, d) pairs whose sampler is tested against the exact law.
SAMPLED = {(0.5, 3), (1.0, 8), (4.0, 5), (2.0, 2)}
# p-value below which a goodness-of-fit test fails (fixed seeds: deterministic).
ALPHA = 1e-4


def make(name: str, epsilon: float, d: int) -> Any:
    return ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)


def configs(epsilons: list[float], domains: list[int]) -> list[tuple[str, float, int]]:
    """(name, epsilon, d) for every enumerable mechanism; rr only at d = 2."""
    return [
        (name, eps, d)
        for name in ENUMERABLE
        for eps in epsilons
        for d in domains
        if name != "rr" or d == 2
    ]


def report_keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """One integer per report: the value itself, or a packed bitmap's bytes (little end)."""
    if reports.ndim == 1:
        return reports.astype(np.int64)
    weights = np.int64(256) ** np.arange(reports.shape[1], dtype=np.int64)
    return (reports.astype(np.int64) * weights).sum(axis=1)


def distribution_table(m: Any) -> tuple[npt.NDArray[Any], npt.NDArray[np.float64]]:
    """All outputs (the same list for every input) and P[x, output]."""
    reports, first = m.output_probabilities(0)
    rows = [first]
    for x in range(1, m.domain_size):
        other, probs = m.output_probabilities(x)
        np.testing.assert_array_equal(other, reports)
        rows.append(probs)
    return reports, np.array(rows)


def support_matrix(m: Any, reports: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """S[output, v] = 1 if that report supports item v (from the mechanism's own sums)."""
    return np.array([m.aggregate(reports[i : i + 1]).sums for i in range(len(reports))])


def check_ratio(probs: npt.NDArray[np.float64], epsilon: float, *, tight: bool) -> None:
    ratio = float((probs.max(axis=0) / probs.min(axis=0)).max())
    bound = math.exp(epsilon)
    assert ratio <= bound * (1 + 1e-9), (ratio, bound)
    if tight:
        assert ratio == pytest.approx(bound, rel=1e-9)


@pytest.mark.parametrize(("name", "epsilon", "d"), configs(EPSILONS, DOMAINS))
def test_exact_privacy_and_support(name: str, epsilon: float, d: int) -> None:
    m = make(name, epsilon, d)
    reports, probs = distribution_table(m)
    assert probs.shape == (d, len(reports))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(probs > 0), "every output must be possible under every input"
    assert np.all(m.check_reports(reports)), "every listed output must be a valid report"
    assert len(np.unique(report_keys(reports))) == len(reports)
    check_ratio(probs, epsilon, tight=True)
    # P(report supports v | x) is p on the diagonal and q off it.
    support = probs @ support_matrix(m, reports)
    expected = np.where(np.eye(d, dtype=bool), m.p, m.q)
    np.testing.assert_allclose(support, expected, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("d", DOMAINS)
@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("key", OLH_KEYS, ids=lambda k: f"{k[0]:x}-{k[1]:x}")
def test_olh_exact_privacy_given_key(key: tuple[int, int], epsilon: float, d: int) -> None:
    m = ldpkit.mechanism("olh", epsilon=epsilon, domain_size=d)
    assert isinstance(m, OptimizedLocalHashing)
    a, b = key
    rows = []
    for x in range(d):
        reports, probs = m.output_probabilities(x, a=a, b=b)
        assert np.all(reports["a"] == a) and np.all(reports["b"] == b)
        np.testing.assert_array_equal(reports["y"], np.arange(m.g))
        rows.append(probs)
    table = np.array(rows)
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(table > 0)
    buckets = bucket(np.arange(d), a, b, m.g)
    # Tight exactly when two items land in different buckets under this key.
    check_ratio(table, epsilon, tight=len(np.unique(buckets)) > 1)
    # The true item is supported with probability p (other items: 0 or 1 given the key).
    support = table @ support_matrix(m, reports)
    np.testing.assert_allclose(np.diag(support), m.p, rtol=1e-12)


def chi_square(observed: npt.NDArray[Any], expected: npt.NDArray[np.float64]) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom, pooling cells expected below 5."""
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if not small.any():
        obs, exp = obs[:-1], exp[:-1]
    elif exp[-1] < 5 and len(exp) > 1:  # fold a still-small pool into the smallest cell
        i = int(np.argmin(exp[:-1]))
        obs[i] += obs[-1]
        exp[i] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    return stat, len(exp) - 1


@pytest.mark.parametrize(
    ("name", "epsilon", "d"),
    [c for c in configs([0.5, 1.0, 2.0, 4.0], [2, 3, 5, 8]) if (c[1], c[2]) in SAMPLED],
)
def test_sampler_follows_output_probabilities(name: str, epsilon: float, d: int) -> None:
    m = make(name, epsilon, d)
    reports, probs = distribution_table(m)
    keys = report_keys(reports)
    order = np.argsort(keys)
    per_value = 40_000
    rng = np.random.default_rng(1000 + d)
    values = np.repeat(np.arange(d), per_value)
    sampled = m.perturb(values, rng=rng)
    position = np.searchsorted(keys[order], report_keys(sampled))
    position = np.minimum(position, len(keys) - 1)
    assert np.all(keys[order][position] == report_keys(sampled)), "an impossible report"
    index = order[position]
    total, dof = 0.0, 0
    for x in range(d):
        observed = np.bincount(index[values == x], minlength=len(keys))
        stat, df = chi_square(observed, per_value * probs[x])
        total += stat
        dof += df
    assert stats.chi2.sf(total, dof) > ALPHA, (total, dof)


@pytest.mark.parametrize(("epsilon", "d"), [(0.5, 3), (1.0, 8), (2.0, 100), (4.0, 5)])
def test_olh_sampler_given_fresh_keys(epsilon: float, d: int) -> None:
    """y - bucket(x) (mod g) is 0 with probability p, else uniform over the g - 1 others."""
    m = ldpkit.mechanism("olh", epsilon=epsilon, domain_size=d)
    assert isinstance(m, OptimizedLocalHashing)
    g = m.g
    n = 200_000
    rng = np.random.default_rng(77)
    values = rng.integers(0, d, size=n)
    reports = m.perturb(values, rng=rng)
    true = bucket(values, reports["a"], reports["b"], g).astype(np.int64)
    shift = (reports["y"].astype(np.int64) - true) % g
    expected = n * np.array([m.p] + [(1 - m.p) / (g - 1)] * (g - 1))
    stat, dof = chi_square(np.bincount(shift, minlength=g), expected)
    assert stats.chi2.sf(stat, dof) > ALPHA, (stat, dof)
    # Keys are uniform 64-bit words: every bit of a and of b is a fair coin.
    for field in ("a", "b"):
        bits = (reports[field][:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
        ones = bits.sum(axis=0).astype(np.float64)
        z = (ones - n / 2) / math.sqrt(n / 4)
        assert np.all(np.abs(z) < 5), (field, z)


@pytest.mark.parametrize("key", OLH_KEYS[:3], ids=lambda k: f"{k[0]:x}-{k[1]:x}")
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_olh_sampler_given_fixed_key(key: tuple[int, int], epsilon: float) -> None:
    """The randomized response on y, with the key held fixed, matches the exact table."""
    d = 6
    m = ldpkit.mechanism("olh", epsilon=epsilon, domain_size=d)
    assert isinstance(m, OptimizedLocalHashing)
    a, b = key
    per_value = 30_000
    rng = np.random.default_rng(5)
    values = np.repeat(np.arange(d), per_value)
    keys_a = np.full(values.size, a, dtype=np.uint64)
    keys_b = np.full(values.size, b, dtype=np.uint64)
    reports = m._respond(values, keys_a, keys_b, rng)
    total, dof = 0.0, 0
    for x in range(d):
        _, probs = m.output_probabilities(x, a=a, b=b)
        observed = np.bincount(reports["y"][values == x], minlength=m.g)
        stat, df = chi_square(observed, per_value * probs)
        total += stat
        dof += df
    assert stats.chi2.sf(total, dof) > ALPHA, (total, dof)
