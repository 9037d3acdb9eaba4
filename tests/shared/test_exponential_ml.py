"""The constrained maximum-likelihood frequencies of a finite channel (issue 30,
``estimator=ml``; ldpkit.mechanisms._profile): the estimate on the simplex at the
likelihood's maximum (KKT), observed-information standard errors equal to the inversion's
where the two estimates agree, profile intervals whose ends are where the profile
likelihood falls by chi2_1(level) / 2 (checked against an independent solver), close to
Wald's at large n, and covering at their level. Fixed seeds; tolerances from theory."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import optimize, stats

import ldpkit
from ldpkit.aggregate import Aggregate
from ldpkit.errors import ParameterError, QueryError
from ldpkit.intervals import normal_quantile
from ldpkit.kinds import Question
from ldpkit.mechanisms._profile import (
    PROFILE,
    MLFrequencies,
    fit,
    ml_frequencies,
    observed_stderr,
    profile_bounds,
    profile_z,
)
from ldpkit.mechanisms.exponential import ExponentialMechanism
from ldpkit.metrics import MetricDefinition

SPARSE = np.array([0.0, 0.01, 0.29, 0.4, 0.3])  # an absent item and a rare one


def counts_of(channel: np.ndarray, f: np.ndarray, n: int, size: int, seed: int) -> np.ndarray:
    """Output counts of ``size`` campaigns of n reports from a population f."""
    law = f @ channel
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, law / law.sum(), size=size).astype(np.float64)


def loglik(channel: np.ndarray, c: np.ndarray, f: np.ndarray) -> float:
    return float(np.sum(c * np.log(np.clip(f, 0.0, None) @ channel)))


@pytest.mark.parametrize(
    "channel",
    [
        ExponentialMechanism(epsilon=1.0, domain_size=10).channel,
        ExponentialMechanism(epsilon=4.0, score="band", band=1, domain_size=6).channel,
        ldpkit.mechanism("grr", epsilon=1.0, domain_size=6).report_channel(),
    ],
    ids=["distance-10", "band-6", "grr-6"],
)
def test_the_estimate_is_the_likelihoods_maximum_on_the_simplex(channel: np.ndarray) -> None:
    """KKT of the maximum over the simplex: with g = P (c / lam) the gradient, every
    share's g_j is at most n (the multiplier of sum f = 1: sum_j f_j g_j = n), with
    equality where f_j > 0; the estimate beats EM's likelihood and is on the simplex."""
    d = channel.shape[0]
    f = np.r_[0.0, 0.0, np.linspace(1.0, 2.0, d - 2)]
    f /= f.sum()
    for c in counts_of(channel, f, 500, 4, seed=11):
        est = fit(channel, c)
        n = c.sum()
        assert np.all(est >= 0.0) and est.sum() == pytest.approx(1.0, abs=1e-12)
        g = channel @ (c / (est @ channel))
        assert np.all(g <= n * (1 + 1e-5))
        assert np.all(np.abs(g[est > 1e-3] - n) <= 1e-5 * n)
        if channel.shape == (d, d) and d == 10:  # the core's EM, as far as it gets
            em = ExponentialMechanism(epsilon=1.0, domain_size=10).estimate_em(c, max_iter=2000)
            assert loglik(channel, c, est) >= loglik(channel, c, em.frequencies) - 1e-6


def test_the_stderr_is_the_inversions_where_both_estimates_agree() -> None:
    """When the inversion estimate is inside the simplex it is the maximum (m = d), and
    the observed information on the tangent space inverts exactly to the multinomial
    covariance through inversion: ``A (diag(lam) - lam lam^T) A^T / n`` (the inversion's
    estimate divides by n - 1)."""
    m = ExponentialMechanism(epsilon=4.0, domain_size=5)
    f = np.array([0.08, 0.12, 0.20, 0.35, 0.25])
    for c in counts_of(m.channel, f, 4000, 3, seed=12):
        inv = m.estimate(c)
        assert np.all(inv.frequencies > 0)
        est = fit(m.channel, c)
        assert est == pytest.approx(inv.frequencies, abs=1e-6)
        n = c.sum()
        expected = inv.stderr * math.sqrt((n - 1) / n)
        assert observed_stderr(m.channel, c, est) == pytest.approx(expected, rel=1e-6)


def profile_value(channel: np.ndarray, c: np.ndarray, i: int, theta: float) -> float:
    """``max l(f)`` over the simplex with ``f_i = theta``, by scipy's SLSQP (independent
    of the module's barrier method), from several starts."""
    d = channel.shape[0]
    best = -math.inf
    rest = np.arange(d) != i

    def minus(g: np.ndarray) -> float:
        f = np.zeros(d)
        f[i], f[rest] = theta, g
        return -loglik(channel, c, np.clip(f, 1e-300, None))

    for seed in range(3):
        start = np.random.default_rng(seed).dirichlet(np.ones(d - 1)) * (1.0 - theta)
        r = optimize.minimize(
            minus, start, method="SLSQP", bounds=[(0.0, 1.0)] * (d - 1),
            constraints=[{"type": "eq", "fun": lambda g: g.sum() - (1.0 - theta)}],
            options={"ftol": 1e-13, "maxiter": 1000},
        )  # fmt: skip
        best = max(best, -float(r.fun))
    return best


def test_each_end_is_where_the_profile_likelihood_falls_by_half_chi2_1() -> None:
    """An end inside (0, 1) has ``l(f_hat) - l_i(end) = chi2_1(0.95) / 2 = 1.9207``; an
    end at 0 or 1 has at most that. The profile is computed by another solver; the ends
    are within 1e-6 (so the drop within 1e-6 times its slope, a few hundred here)."""
    m = ExponentialMechanism(epsilon=4.0, domain_size=5)
    c = counts_of(m.channel, SPARSE, 800, 1, seed=13)[0]
    est = fit(m.channel, c)
    top = loglik(m.channel, c, est)
    half_chi2 = stats.chi2.ppf(0.95, 1) / 2.0
    low, high = profile_bounds(m.channel, c, est, normal_quantile(0.95))
    assert np.all(low <= est) and np.all(est <= high)
    ends = 0
    for i in range(5):
        for end in (low[i], high[i]):
            drop = top - profile_value(m.channel, c, i, float(end))
            if 1e-4 < end < 1 - 1e-4:
                assert drop == pytest.approx(half_chi2, abs=2e-3), (i, end)
                ends += 1
            else:
                assert drop <= half_chi2 + 2e-3, (i, end)
    assert ends >= 6  # the test saw ends inside, not only the boundary
    assert low[0] == 0.0  # the absent item may be absent


def test_at_large_n_the_profile_interval_is_walds() -> None:
    """At n = 10^6 each end is ``f_hat -/+ z se (1 + r)`` with r of order z se / f
    (the profile's third-order term; a binomial's is z se (1 - 2f) / (3 f (1 - f))): the
    tolerance is ``z se / min(f, 1 - f)``, three times that."""
    m = ExponentialMechanism(epsilon=4.0, domain_size=5)
    f = np.array([0.08, 0.12, 0.20, 0.35, 0.25])
    c = counts_of(m.channel, f, 1_000_000, 1, seed=14)[0]
    est = fit(m.channel, c)
    se = observed_stderr(m.channel, c, est)
    z = normal_quantile(0.95)
    low, high = profile_bounds(m.channel, c, est, z)
    tolerance = z * se / np.minimum(est, 1 - est)
    assert np.all(np.abs((high - est) / (z * se) - 1.0) <= tolerance)
    assert np.all(np.abs((est - low) / (z * se) - 1.0) <= tolerance)
    assert np.all(tolerance < 0.1)  # the test is sharp: n is large


def test_profile_intervals_cover_at_their_level() -> None:
    """600 campaigns of n = 2000 at level 0.9 (d = 5, eps = 4, an absent and a rare item):
    each interior item covers within 3.7 standard errors of 0.9 (Bonferroni over the
    items at 1e-3: sqrt(0.9 0.1 / 600) = 0.012); the absent item (the likelihood ratio
    half 0, half chi2_1 at the boundary) and the rare one cover at least at that bound."""
    m = ExponentialMechanism(epsilon=4.0, domain_size=5)
    runs, level = 600, 0.9
    c = counts_of(m.channel, SPARSE, 2000, runs, seed=15)
    est = fit(m.channel, c)
    low, high = profile_bounds(m.channel, c, est, normal_quantile(level))
    cover = ((low <= SPARSE) & (high >= SPARSE)).mean(axis=0)
    half = stats.norm.ppf(1 - 1e-3 / 10) * math.sqrt(level * (1 - level) / runs)
    assert np.all(cover >= level - half), cover
    assert np.all(np.abs(cover[2:] - level) <= half), cover


def test_the_boundary_threshold_is_the_chi_bar_squared_quantile() -> None:
    """``profile_z`` with a share at 0: ``z^2`` solves ``P(chi2_1 > c) / 2 + P(chi2_2 > c) / 2
    = alpha`` (5.138 at 95%, scipy's quantiles as the independent check); without, chi2_1's."""
    for level, k in [(0.95, 1), (0.9, 1), (0.95, 32)]:
        alpha = (1 - level) / k
        c = profile_z(level, k, True) ** 2
        assert 0.5 * stats.chi2.sf(c, 1) + 0.5 * stats.chi2.sf(c, 2) == pytest.approx(alpha)
        assert profile_z(level, k, False) ** 2 == pytest.approx(stats.chi2.isf(alpha, 1))


def test_the_served_interval_takes_the_boundary_threshold_where_a_share_is_0() -> None:
    """MLFrequencies' ends are profile_bounds' at profile_z(boundary): a campaign whose
    estimate has a share at 0 (an absent item) takes the wider threshold, one without the
    chi2_1 one."""
    m = ExponentialMechanism(epsilon=4.0, domain_size=5)
    for f, boundary in [(SPARSE, True), (np.full(5, 0.2), False)]:
        c = counts_of(m.channel, f, 2000, 1, seed=18)[0]
        est = fit(m.channel, c)
        assert bool(np.any(est == 0.0)) is boundary
        served = MLFrequencies(
            "exponential", 4.0, 2000, est, est, c, 0.0, 0.0, channel=m.channel
        ).ci(0.95)
        ends = profile_bounds(m.channel, c, est, profile_z(0.95, 1, boundary))
        assert np.array_equal(served[0], ends[0]) and np.array_equal(served[1], ends[1])
        # Simultaneous: the same threshold Bonferroni over the d = 5 items (their joint
        # coverage is bounded from beneath only: a split over d^2 passed every test).
        together = MLFrequencies(
            "exponential", 4.0, 2000, est, est, c, 0.0, 0.0, channel=m.channel
        ).ci(0.95, simultaneous=True)
        ends = profile_bounds(m.channel, c, est, profile_z(0.95, 5, boundary))
        assert np.array_equal(together[0], ends[0]) and np.array_equal(together[1], ends[1])


@pytest.mark.slow
def test_a_near_certain_item_covers_at_the_level() -> None:
    """One item at 0.97, one absent, 30 at 0.001 (d = 32, distance score, eps = 8, n = 200,
    where the chi2_1 threshold covered the near-certain item 0.897). The profile interval
    holds 0.97 iff the likelihood ratio ``l(f_hat) - max {l(f) : f_0 = 0.97}`` is at most
    ``z^2 / 2`` (the profile is concave): the constrained maximum is the fit of the channel
    ``0.97 P_0 + 0.03 P_j`` (j >= 1: the rest's share spread as g on the simplex), so 1000
    campaigns cost two fits each, not 64 interval ends (the ends are checked against an
    independent solver above). With the served threshold it covers at least
    0.95 - 3.09 sd (one-sided 1e-3, sd = sqrt(0.95 0.05 / 1000) = 0.0069: 0.929)."""
    d, runs = 32, 1000
    m = ExponentialMechanism(epsilon=8.0, domain_size=d)
    f = np.full(d, 0.03 / (d - 2))
    f[0], f[1] = 0.97, 0.0
    c = counts_of(m.channel, f, 200, runs, seed=31)
    pinned = 0.97 * m.channel[0] + 0.03 * m.channel[1:]
    est = np.vstack([fit(m.channel, c[k : k + 50]) for k in range(0, runs, 50)])
    rest = np.vstack([fit(pinned, c[k : k + 50]) for k in range(0, runs, 50)])

    def ll(p: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.where(c > 0, c * np.log(x @ p), 0.0).sum(axis=1)

    ratio = ll(m.channel, est) - ll(pinned, rest)
    assert np.all(ratio >= -1e-6)  # the fit is the maximum
    boundary = np.any(est == 0.0, axis=1)
    z = np.where(boundary, profile_z(0.95, 1, True), profile_z(0.95, 1, False))
    cover = float(np.mean(ratio <= z**2 / 2))
    assert cover >= 0.95 - stats.norm.isf(1e-3) * math.sqrt(0.95 * 0.05 / runs), cover


# --- served: the categorical query's estimator=ml -----------------------------------------
RATING = {"kind": "categorical", "categories": ["1", "2", "3", "4", "5"], "epsilon": 2.0}


def answer(extra: dict[str, Any], **question: Any) -> tuple[MetricDefinition, Aggregate, Any]:
    d = MetricDefinition.from_dict("rating", RATING | extra)
    rng = np.random.default_rng(16)
    values = rng.choice(5, size=400, p=[0.0, 0.1, 0.2, 0.3, 0.4])
    agg = d.mechanism_instance.aggregate(d.mechanism_instance.perturb(values, rng=rng))
    return d, agg, d.kind_spec.answer(d, agg, Question(**question))


@pytest.mark.parametrize(
    "extra", [{"mechanism": "exponential", "ordered": True}, {"mechanism": "grr"}]
)
def test_the_answer_serves_the_ml_estimate_with_profile_intervals(extra: dict[str, Any]) -> None:
    import json

    d, agg, served = answer(extra, options={"estimator": "ml"}, level=0.9)
    assert served["interval"] == PROFILE and served["estimator"] == "ml"
    items = json.loads(served["items"])
    est = ml_frequencies(d.mechanism_instance, agg)
    assert isinstance(est, MLFrequencies)
    low, high = est.ci(0.9)
    assert [i["estimate"] for i in items] == pytest.approx(est.frequencies.tolist())
    assert [i["low"] for i in items] == pytest.approx(np.asarray(low).tolist())
    assert [i["high"] for i in items] == pytest.approx(np.asarray(high).tolist())
    assert {i["interval"] for i in items} == {PROFILE}
    assert sum(i["estimate"] for i in items) == pytest.approx(1.0)
    _, _, plain = answer(extra, level=0.9)
    assert "estimator" not in plain and plain["interval"] != PROFILE


def test_the_ml_estimate_is_refused_where_it_does_not_apply() -> None:
    with pytest.raises(QueryError, match="grr, rr, exponential") as exc:
        answer({"mechanism": "oue"}, options={"estimator": "ml"})
    assert exc.value.param == "estimator"
    with pytest.raises(QueryError, match="robust"):
        answer({"mechanism": "grr"}, options={"estimator": "ml"}, robust=True)
    with pytest.raises(QueryError, match="inversion or ml"):
        MetricDefinition.from_dict("rating", RATING).kind_spec.parse_options({"estimator": "em"})
    big = ldpkit.mechanism("grr", epsilon=1.0, domain_size=65)
    with pytest.raises(ParameterError, match="at most 64"):
        ml_frequencies(big, big.aggregate(np.arange(65, dtype=np.uint32)))


@pytest.mark.parametrize("bad", [[np.nan, 1.0, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [np.inf, 0, 0, 0]])
def test_counts_that_are_not_counts_are_refused_by_name(bad: list[float]) -> None:
    """NaN or negative counts made the barrier's first gap d / n NaN or negative, and its
    stages never reached the last one (a hang): they are refused instead."""
    grr = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    with pytest.raises(ParameterError, match="counts"):
        ml_frequencies(grr, Aggregate(2, np.array(bad)))
    with pytest.raises(ParameterError, match="counts"):
        fit(grr.report_channel(), np.array(bad))


def test_an_aggregate_whose_counts_are_not_its_n_is_refused() -> None:
    """The likelihood is of n reports, one output each: counts summing to another n (an
    aggregate put together wrongly) would give intervals for the wrong n."""
    grr = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
    with pytest.raises(ParameterError, match=r"add up to 10, not its n = 12"):
        ml_frequencies(grr, Aggregate(12, np.array([4.0, 3.0, 2.0, 1.0])))
    assert ml_frequencies(grr, Aggregate(10, np.array([4.0, 3.0, 2.0, 1.0]))).n == 10


@pytest.mark.parametrize("name", ["exponential", "grr"])
def test_what_is_the_inversions_is_refused_by_the_ml_estimate(name: str) -> None:
    """most_common, ranks, difference_variance and robust were inherited: the randomized-
    response formula with the channel's largest and smallest entry as p and q (many times
    too small for the exponential channel, ChannelFrequencies says) and support-count
    intervals on output counts. The answer takes them from the inversion estimate; the core
    object refuses them by name instead of answering wrongly."""
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=6)
    agg = m.aggregate(m.perturb(np.arange(600) % 6, rng=np.random.default_rng(8)))
    est = ml_frequencies(m, agg)
    calls = [
        lambda: est.most_common(0.95),
        lambda: est.ranks(0.95),
        lambda: est.difference_variance(np.array([0]), np.array([1])),
        lambda: est.robust(0.01),
    ]
    for call in calls:
        with pytest.raises(ParameterError, match="inversion"):
            call()
    assert est.consistent() is est.frequencies  # on the simplex already: itself
