"""Robust estimates (issue 26): what an estimate can claim when a fraction beta of its
reports may be forged.

The point estimates are projections onto what every honest population's estimand satisfies
(frequencies: the simplex; a mean: the bounds), so their total squared error never exceeds
the plain estimate's, honest or forged: checked campaign by campaign, an inequality that
holds exactly. The forgeries the aggregate reveals are removed as theory says (reports
supporting every item: the projection of the clean estimate, scaled by n / (n + m); the
maximal gain attack on randomized response: at most 100% over the targets together, against
beta (1 - r q) / (p - q) plain). The intervals hold for the genuine reporters with up to
floor(beta n) forged reports: they contain the union of the honest intervals over every
split a forger could make (brute force), and cover at the stated level under an attack that
makes the plain ones miss (binomial tolerance over seeded campaigns).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ldpkit.errors import ParameterError
from ldpkit.estimates import FrequencyEstimate, MeanEstimate, norm_sub
from ldpkit.intervals import support_interval
from ldpkit.mechanisms import mechanism
from ldpkit.mechanisms._bits import pack_rows

ORACLES = ("grr", "sue", "oue", "olh", "ss", "hr")
LEVEL = 0.95
CAMPAIGNS = 300
FloatArray = npt.NDArray[np.float64]


def _population(kind: str, d: int) -> FloatArray:
    if kind == "zipf":
        w = 1.0 / np.arange(1, d + 1) ** 1.1
    elif kind == "uniform":
        w = np.ones(d)
    else:  # one item at 90%
        w = np.full(d, 0.1 / (d - 1))
        w[0] = 0.9
    return w / w.sum()


def _campaign(m: Any, pop: FloatArray, n: int, rng: np.random.Generator) -> tuple[Any, FloatArray]:
    """(honest reports, the genuine fractions: what the reporters hold)."""
    values = rng.choice(pop.size, size=n, p=pop)
    return np.asarray(m.perturb(values, rng)), np.bincount(values, minlength=pop.size) / n


def _unary_rows(d: int, rows: list[npt.NDArray[np.int64]]) -> Any:
    bits = np.zeros((len(rows), d), dtype=np.bool_)
    for i, on in enumerate(rows):
        bits[i, on] = True
    return pack_rows(bits)


@pytest.mark.parametrize("name", ORACLES)
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_projection_never_increases_the_total_squared_error(name: str, epsilon: float) -> None:
    """Honest campaigns over three populations, and the same with forged reports claiming
    one item (the genuine fractions as the reference): error(robust) <= error(plain)."""
    d, n = 32, 2000
    m = mechanism(name, epsilon=epsilon, domain_size=d)
    rng = np.random.default_rng([7, int(epsilon)])
    for kind in ("zipf", "uniform", "ninety"):
        for _ in range(10):
            honest, genuine = _campaign(m, _population(kind, d), n, rng)
            forged = np.asarray(m.perturb(np.full(100, d - 1), rng))
            for reports in (honest, np.concatenate([honest, forged])):
                est = m.estimate(m.aggregate(reports))
                robust = est.robust(0.05).frequencies
                assert np.all(robust >= 0.0) and math.isclose(robust.sum(), 1.0, abs_tol=1e-9)
                plain_error = np.sum((est.frequencies - genuine) ** 2)
                assert np.sum((robust - genuine) ** 2) <= plain_error * (1 + 1e-12)


def test_the_robust_point_is_the_projection_and_needs_no_beta() -> None:
    m = mechanism("oue", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(3)
    est = m.estimate(m.aggregate(m.perturb(rng.integers(0, 4, 3000), rng)))
    for beta in (0.0, 0.01, 0.3):
        np.testing.assert_array_equal(est.robust(beta).frequencies, est.consistent())


@pytest.mark.parametrize("name", ["sue", "oue"])
def test_reports_supporting_every_item_are_removed_exactly(name: str) -> None:
    """m forged reports with every bit set add m to every count: the plain estimate becomes
    ``a f + c`` (a = n / (n + m)), every item lifted by about beta (1 - q) / (p - q); the
    simplex projection ignores the constant, so the robust estimate is the clean one's
    projection scaled by a, exactly."""
    d, n, m_forged = 256, 20_000, 202
    m = mechanism(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(11)
    honest, _ = _campaign(m, _population("zipf", d), n, rng)
    clean = m.estimate(m.aggregate(honest))
    forged = _unary_rows(d, [np.arange(d)] * m_forged)
    poisoned = m.estimate(m.aggregate(np.concatenate([honest, forged])))
    a = n / (n + m_forged)
    lift = (1.0 - a) * (1.0 - m.q) / (m.p - m.q)  # what each item gains, less its dilution
    np.testing.assert_allclose(
        poisoned.frequencies - clean.frequencies, lift - (1.0 - a) * clean.frequencies, atol=1e-12
    )
    np.testing.assert_allclose(
        poisoned.robust(0.01).frequencies, norm_sub(a * clean.frequencies), atol=1e-12
    )
    targets = np.arange(d - 10, d)
    robust_gain = np.sum((poisoned.robust(0.01).frequencies - clean.consistent())[targets])
    # The scaling moves an item by at most (1 - a) times the largest clean estimate, and the
    # projection's shift by as much.
    assert abs(robust_gain) <= 10 * 2 * (1 - a) * np.max(np.abs(clean.frequencies))
    assert np.sum((poisoned.frequencies - clean.frequencies)[targets]) > 10 * 0.9 * lift


def test_randomized_response_targets_get_at_most_all_the_mass() -> None:
    """The maximal gain attack on GRR (d = 1024, eps = 1, 1% forged, 10 targets): each
    forged report claims a target, which lifts the targets together by about
    ``beta (1 - r q) / (p - q)`` (5.9: 590%); robust, they hold at most 100% together."""
    d, n, r = 1024, 20_000, 10
    m = mechanism("grr", epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(5)
    honest, genuine = _campaign(m, _population("zipf", d), n, rng)
    targets = np.arange(d - r, d)
    count = round(0.01 * n / 0.99)
    forged = rng.choice(targets, size=count).astype(m.report_dtype)
    clean = m.estimate(m.aggregate(honest))
    poisoned = m.estimate(m.aggregate(np.concatenate([honest, forged])))
    b = count / (n + count)
    plain_gain = np.sum((poisoned.frequencies - clean.frequencies)[targets])
    # Exactly: b ((1 - r q) / (p - q) - sum of the targets' clean estimates).
    expected = b * ((1.0 - r * m.q) / (m.p - m.q) - np.sum(clean.frequencies[targets]))
    assert math.isclose(plain_gain, expected, rel_tol=1e-9)
    assert plain_gain > 5.0
    robust_gain = np.sum((poisoned.robust(0.01).frequencies - clean.consistent())[targets])
    assert robust_gain <= 1.0 - np.sum(clean.consistent()[targets]) + 1e-12
    assert plain_gain / robust_gain > 5.0
    # The genuine fractions are still within the robust intervals of the targets.
    low, high = poisoned.robust(b).ci(LEVEL)
    assert np.all((low[targets] <= genuine[targets]) & (genuine[targets] <= high[targets]))


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "ss"])
@pytest.mark.parametrize("beta", [0.01, 0.2])
def test_robust_forgery_shift_bounds_every_forged_report(name: str, beta: float) -> None:
    """Brute force at d = 4: every report the mechanism accepts (and random mixtures of
    them), forged by a share beta against point masses and spread populations, moves the
    projection of the expected estimate by at most the disclosed robust shift; unary reports
    that lower every other item move it further than the plain estimate's shift."""
    d = 4
    m = mechanism(name, epsilon=1.0, domain_size=d)
    p, q = m.p, m.q
    if name == "grr":
        supports = np.eye(d)
    else:  # every subset (subset selection: those of its k items)
        rows = np.array(list(itertools.product([0.0, 1.0], repeat=d)))
        supports = rows[rows.sum(axis=1) == m.k] if name == "ss" else rows
    rng = np.random.default_rng(29)
    forged = np.vstack([supports, rng.dirichlet(np.ones(len(supports)), 50) @ supports])
    pops = np.vstack([np.eye(d), np.full(d, 1 / d), [0.5, 0.3, 0.2, 0.0]])
    est = FrequencyEstimate(name, 1.0, 100, np.zeros(d), np.zeros(d), np.zeros(d), p, q)
    bound, plain = est.robust(beta).forgery_shift(), est.forgery_shift(beta)
    worst = max(
        float(np.max(np.abs(norm_sub((1 - beta) * f + beta * (x - q) / (p - q)) - norm_sub(f))))
        for f in pops
        for x in forged
    )
    assert worst <= bound[0] + 1e-12
    if name in ("sue", "oue"):
        assert worst > plain[0] * 1.2


@pytest.mark.parametrize(("n", "p", "q"), [(60, 0.6, 0.2), (200, 0.5, 0.27), (150, 0.9, 0.01)])
def test_intervals_contain_every_split_a_forger_could_make(n: int, p: float, q: float) -> None:
    """Brute force: with up to m forged among n, the honest count is any c in
    [C - k, min(C, n - k)] of n - k honest reports, k <= m; the robust interval is the
    union of the support-count intervals over every such (k, c): it contains each, and
    its ends are theirs (containment alone would pass any wider interval, [0, 1] too)."""
    m = 5
    counts = np.arange(n + 1, dtype=np.float64)
    est = FrequencyEstimate("x", 1.0, n, counts, counts, counts, p, q)
    for simultaneous in (False, True):
        low, high = est.robust(m / n).ci(LEVEL, simultaneous=simultaneous)
        assert est.robust(m / n).forged == m
        comparisons = n + 1 if simultaneous else 1
        union_low, union_high = np.full(n + 1, np.inf), np.full(n + 1, -np.inf)
        for k in range(m + 1):
            for shift in range(k + 1):  # the forged reports that support the item
                honest = np.clip(counts - shift, 0, n - k)
                b = support_interval(honest, n - k, p, q, level=LEVEL, comparisons=comparisons)
                union_low = np.minimum(union_low, b.low)
                union_high = np.maximum(union_high, b.high)
        np.testing.assert_allclose(low, union_low, rtol=0, atol=1e-12)
        np.testing.assert_allclose(high, union_high, rtol=0, atol=1e-12)


def _coverage_under_attack(name: str, d: int, n: int, beta: float) -> FloatArray:
    """The plain and the robust intervals' coverage of each item's genuine fraction (2, d)
    over the campaigns, with forged reports pushing item d - 1 (held by nobody) as a
    maximal gain attack does."""
    m = mechanism(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng([13, d])
    pop = np.append(_population("zipf", d - 1), 0.0)
    count = math.floor(beta * n / (1 - beta))
    covered = np.zeros((2, d))
    for _ in range(CAMPAIGNS):
        honest, genuine = _campaign(m, pop, n, rng)
        if name == "grr":
            forged = np.full(count, d - 1, dtype=m.report_dtype)
        else:  # the target and as many other bits as an honest report sets on average
            others = round(m.p + (d - 1) * m.q) - 1
            rows = [rng.choice(d - 1, others, replace=False) for _ in range(count)]
            forged = _unary_rows(d, [np.append(row, d - 1) for row in rows])
        est = m.estimate(m.aggregate(np.concatenate([honest, forged])))
        for i, (low, high) in enumerate((est.ci(LEVEL), est.robust(beta).ci(LEVEL))):
            covered[i] += (low <= genuine) & (genuine <= high)
    return covered / CAMPAIGNS


@pytest.mark.parametrize("name", ["grr", "oue"])
def test_robust_intervals_cover_the_genuine_fractions_under_attack(name: str) -> None:
    """5% forged reports for one item: the plain intervals miss the target's genuine
    fraction (0) most of the time; the robust ones cover each item at the level at least
    (tolerance: 4 binomial standard errors over the campaigns)."""
    plain, robust = _coverage_under_attack(name, 8, 1000, 0.05)
    assert plain[-1] < 0.5
    assert np.all(robust >= LEVEL - 4 * math.sqrt(LEVEL * (1 - LEVEL) / CAMPAIGNS))


@pytest.mark.parametrize("name", ["grr", "oue"])
def test_robust_intervals_cover_honest_data_and_contain_the_plain_ones(name: str) -> None:
    d, n = 8, 1000
    m = mechanism(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(17)
    covered = 0
    for _ in range(CAMPAIGNS):
        honest, genuine = _campaign(m, _population("zipf", d), n, rng)
        est = m.estimate(m.aggregate(honest))
        (plow, phigh), (low, high) = est.ci(LEVEL), est.robust(0.01).ci(LEVEL)
        assert np.all(low <= plow) and np.all(phigh <= high)
        covered += int(np.sum((low <= genuine) & (genuine <= high)))
    assert covered / (CAMPAIGNS * d) >= LEVEL - 4 * math.sqrt(LEVEL * (1 - LEVEL) / CAMPAIGNS)


def test_robust_mean_is_clamped_and_its_interval_holds_under_attack() -> None:
    """Duchi's mean (bounds 0..100) with 5% of the reports forged at +C: the plain interval
    misses the genuine mean nearly always; the robust one, ``[(L - beta top) / (1 - beta),
    (H - beta bottom) / (1 - beta)]`` within the bounds, covers it at the level at least."""
    m = mechanism("duchi", epsilon=1.0, bounds=(0.0, 100.0))
    rng = np.random.default_rng(19)
    n, beta = 8000, 0.05
    count = math.floor(beta * n / (1 - beta))
    hits = np.zeros(2)
    for _ in range(CAMPAIGNS):
        values = 100.0 * rng.beta(2.0, 5.0, n)
        reports = np.concatenate([m.perturb(values, rng), np.ones(count, dtype=m.report_dtype)])
        est = m.estimate(m.aggregate(reports))
        robust = est.robust(beta)
        assert robust.mean == est.clamped_mean
        (plow, phigh), (low, high) = est.ci(LEVEL), robust.ci(LEVEL)
        lo, hi = est.bounds
        bottom, top = est.report_range
        assert math.isclose(low, max(lo, (plow - beta * top) / (1 - beta)), abs_tol=1e-9)
        assert math.isclose(high, min(hi, (phigh - beta * bottom) / (1 - beta)), abs_tol=1e-9)
        genuine = float(np.mean(values))
        hits += [plow <= genuine <= phigh, low <= genuine <= high]
    assert hits[0] / CAMPAIGNS < 0.1
    assert hits[1] / CAMPAIGNS >= LEVEL - 4 * math.sqrt(LEVEL * (1 - LEVEL) / CAMPAIGNS)


def test_a_robust_mean_interval_is_never_a_point_at_a_bound() -> None:
    """A mean far beyond its bounds (more forged than beta can explain): the robust
    interval still has a width, whether the plain one was collapsed onto the bound or kept."""
    est = MeanEstimate("laplace", 1.0, 1000, 5.0, 0.01, (0.0, 1.0), report_range=(-0.1, 1.1))
    low, high = est.robust(0.01).ci(LEVEL)
    assert high > low >= min(1.0, est.ci(LEVEL)[0] - 0.02)


def test_answers_are_json_and_empty_estimates_say_nothing() -> None:
    m = mechanism("grr", epsilon=2.0, domain_size=4)
    rng = np.random.default_rng(23)
    est = m.estimate(m.aggregate(m.perturb(rng.integers(0, 4, 500), rng)))
    answer = json.loads(json.dumps(est.robust(0.01).to_dict(0.9, simultaneous=True)))
    assert answer["forgery_fraction"] == 0.01 and answer["forged_reports"] == 5
    assert answer["level"] == 0.9 and answer["simultaneous"] is True
    assert len(answer["estimate"]) == len(answer["low"]) == len(answer["high"]) == 4
    empty = m.estimate(m.aggregate(m.perturb(np.zeros(0, dtype=np.int64), rng))).robust(0.01)
    assert empty.to_dict()["low"] == [None] * 4 and empty.forged == 0
    mean = mechanism("laplace", epsilon=1.0, bounds=(0.0, 1.0))
    empty_mean = mean.estimate(mean.aggregate(np.zeros(0, dtype=mean.report_dtype)))
    assert empty_mean.robust(0.01).to_dict() == {
        "forgery_fraction": 0.01, "level": 0.95, "mean": None, "low": None, "high": None,
        "forgery_shift": min(1.0, empty_mean.forgery_shift(0.01)),
    }  # fmt: skip


@pytest.mark.parametrize("beta", [-0.1, 1.0, "0.1", True])
def test_the_forged_fraction_is_checked(beta: Any) -> None:
    m = mechanism("grr", epsilon=2.0, domain_size=4)
    est = m.estimate(m.aggregate(np.zeros(3, dtype=m.report_dtype)))
    with pytest.raises(ParameterError, match="forged fraction"):
        est.robust(beta)
    mean = mechanism("laplace", epsilon=1.0, bounds=(0.0, 1.0))
    with pytest.raises(ParameterError, match="forged fraction"):
        mean.estimate(mean.aggregate(np.zeros(3, dtype=mean.report_dtype))).robust(beta)
