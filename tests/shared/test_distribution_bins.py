"""Histogram bins and ranges of a distribution (issue 28): score intervals with the variance
and skewness at the hypothesised fraction, for the reporting users' bins (the default) or
the population's, marginal and simultaneous.

Campaigns draw every aggregate from its exact law (benchmarks/distribution_bins.py, whose
sampler tests/shared/test_distributions.py's reports-based campaigns agree with); the
tolerances are binomial: a coverage of 0.93 would fail a check with probability at most
1e-3 per test, Bonferroni over its bins."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from benchmarks.distribution_bins import (
    BINS,
    EPSILONS,
    POPULATIONS,
    USERS,
    beta_leaves,
    reports_of,
    run_cell,
    simulate,
)
from ldpkit.distribution import check_estimand
from ldpkit.errors import ParameterError, QueryError
from ldpkit.kinds import kind_or_default
from ldpkit.mechanisms.hierarchical import HierarchicalHistogram
from tests.stats import chi2_ratio_bounds

FloatArray = npt.NDArray[np.float64]
WANTED = 0.93


def make(epsilon: float) -> HierarchicalHistogram:
    return HierarchicalHistogram(epsilon=epsilon, bounds=(0.0, 1.0), resolution=64, branching=4)


def fewest_covered(campaigns: int, comparisons: int, alpha: float = 1e-3) -> int:
    """The fewest covering campaigns out of ``campaigns`` that a coverage of 0.93 gives but
    with probability ``alpha / comparisons``."""
    return int(stats.binom.ppf(alpha / comparisons, campaigns, WANTED))


def bin_queries(e: object) -> FloatArray:
    starts = np.arange(BINS) * 4.0
    return e._range_queries(starts, starts + 4.0)  # type: ignore[attr-defined, no-any-return]


def poly(coefs: FloatArray, theta: FloatArray) -> FloatArray:
    return np.sum(coefs * theta[:, None] ** np.arange(coefs.shape[1]), axis=1)


@pytest.mark.parametrize(
    ("epsilon", "resolution", "branching"), [(1.0, 64, 4), (8.0, 64, 4), (2.0, 100, 3)]
)
def test_the_variance_at_the_truth_is_the_estimators(
    epsilon: float, resolution: int, branching: int
) -> None:
    # An estimate whose leaves are the truth: the hypothesis at the true fraction is the
    # truth itself, so the polynomial is the variance formula there (a tree whose last
    # nodes hold fewer children too).
    m = HierarchicalHistogram(
        epsilon=epsilon, bounds=(0.0, 1.0), resolution=resolution, branching=branching
    )
    truth = np.diff(stats.beta(2, 5).cdf(np.linspace(0.0, 1.0, resolution + 1)))
    e = m.expected(3000, truth / truth.sum())
    starts = np.array([0.0, 5.0, 30.0, 63.0, 90.0]) * resolution / 100
    queries = e._range_queries(np.floor(starts), np.floor(starts) + resolution // 16)
    variance, _ = e.cumulant_polynomials(queries, "population")
    np.testing.assert_allclose(poly(variance, e.leaves @ queries), e.variance(queries), rtol=1e-9)


@pytest.mark.parametrize(("epsilon", "n"), [(8.0, 300), (1.0, 3000)])
def test_the_reporters_variance_by_simulation(epsilon: float, n: int) -> None:
    # The same users every campaign: only who reports which depth, and the mechanisms, vary.
    m = make(epsilon)
    rng = np.random.Generator(np.random.Philox(key=int(epsilon) + n))
    users = rng.multinomial(n, beta_leaves())
    campaigns = 3000
    aggregates = reports_of(m, np.tile(users, (campaigns, 1)), rng)
    estimates = np.array([m.estimate(a).histogram(BINS).estimates for a in aggregates])
    truth = users.reshape(BINS, 4).sum(axis=1) / n
    e = m.estimate(aggregates[0])
    variance, _ = e.cumulant_polynomials(bin_queries(e), "reporters")
    want = poly(variance, truth)
    busy = truth * n >= 5  # bins with a few users: their variance is well estimated
    ratio = estimates.var(axis=0, ddof=1)[busy] / want[busy]
    lo, hi = chi2_ratio_bounds(campaigns, alpha=1e-3 / busy.sum())
    assert np.all((lo < ratio) & (ratio < hi)), ratio
    np.testing.assert_allclose(
        estimates.mean(axis=0), truth, atol=4.5 * np.sqrt(want.max() / campaigns)
    )
    # The reporters' variance lacks the sampling of users: below the population's.
    pop_variance, _ = e.cumulant_polynomials(bin_queries(e), "population")
    assert np.all(want[busy] < poly(pop_variance, truth)[busy])


@pytest.mark.parametrize("population", list(POPULATIONS))
@pytest.mark.parametrize("n", USERS)
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_every_bin_covers_alone_and_together(population: str, epsilon: float, n: int) -> None:
    campaigns = 400
    cell = run_cell(population, epsilon, n, campaigns, seed=int(epsilon) * 100_000 + n)
    per_bin = fewest_covered(campaigns, 2 * BINS)
    together = fewest_covered(campaigns, 2)
    for estimand in ("reporters", "population"):
        covered = np.rint(cell.per_bin[estimand] * campaigns)
        assert covered.min() >= per_bin, (estimand, cell.per_bin[estimand])
        assert round(cell.joint[estimand] * campaigns) >= together, (estimand, cell.joint)


@pytest.mark.parametrize("n", [300, 30_000])
def test_simultaneous_bins_are_bonferroni(n: int) -> None:
    """Each bin's simultaneous interval is its interval at ``1 - (1 - level) / bins``, as
    documented. Joint coverage is bounded from beneath only: intervals split over bins^2
    passed every distribution test."""
    m = make(8.0)
    _, aggregates = simulate(m, beta_leaves(), n, 5, np.random.default_rng(2029))
    for a in aggregates:
        h = m.estimate(a).histogram(BINS)
        for estimand in ("reporters", "population"):
            joint = h.ci(0.95, simultaneous=True, estimand=estimand)
            alone = h.ci(1 - 0.05 / BINS, estimand=estimand)
            np.testing.assert_allclose(joint.low, alone.low, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(joint.high, alone.high, rtol=1e-9, atol=1e-12)


def test_the_nearly_empty_bin_of_issue_28() -> None:
    # eps 8, n 300, Beta(2, 5): bin 12 holds about 1 expected user. The Wald interval
    # (estimate +- 1.96 stderr) covered it in 73% of campaigns; the score interval must
    # cover it at 95%, the reporters' and the population's.
    m = make(8.0)
    campaigns, b = 2000, 12
    leaves = beta_leaves()
    users, aggregates = simulate(m, leaves, 300, campaigns, np.random.default_rng(2028))
    population = leaves.reshape(BINS, 4).sum(axis=1)[b]
    assert 0.9 < population * 300 < 1.1
    reporters = users.reshape(campaigns, BINS, 4).sum(axis=2)[:, b] / 300
    hits = {"reporters": 0, "population": 0}
    wald = 0
    for a, own in zip(aggregates, reporters, strict=True):
        h = m.estimate(a).histogram(BINS)
        for estimand, truth in (("reporters", own), ("population", population)):
            low, high = h.ci(estimand=estimand)
            hits[estimand] += int(low[b] <= truth <= high[b])
        half = 1.96 * h.stderr[b]
        wald += int(h.estimates[b] - half <= population <= h.estimates[b] + half)
    floor = fewest_covered(campaigns, 2)
    assert hits["reporters"] >= floor and hits["population"] >= floor, hits
    assert wald / campaigns < 0.85  # the regime bites: the plug-in interval fails there


def test_the_estimand_in_answers_and_its_checks() -> None:
    m = make(8.0)
    e = m.estimate(simulate(m, beta_leaves(), 3000, 1, np.random.default_rng(3))[1][0])
    out = json.loads(json.dumps(e.to_dict(range_=(0.1, 0.35)), allow_nan=False))
    assert out["estimand"] == "reporters"
    pop = e.to_dict(range_=(0.1, 0.35), estimand="population")
    assert pop["estimand"] == "population"
    # The reporters' intervals are narrower where the sampling of users dominates.
    width = [sum(i["high"] - i["low"] for i in d["items"]) for d in (out, pop)]
    assert width[0] < 0.8 * width[1]
    r = pop["range"]
    assert r["low"] <= r["estimate"] <= r["high"]
    with pytest.raises(ParameterError, match="estimand"):
        e.to_dict(estimand="users")
    with pytest.raises(ParameterError, match="estimand"):
        e.histogram(16).ci(estimand="everyone")
    with pytest.raises(ParameterError, match="estimand"):
        check_estimand(None)
    spec = kind_or_default("distribution")
    assert spec.parse_options({"estimand": "population"}) == {"estimand": "population"}
    with pytest.raises(QueryError, match="estimand"):
        spec.parse_options({"estimand": "all"})


def test_the_text_answer_says_whose_bins() -> None:
    from ldpkit.analyst import EstimateResult

    m = make(8.0)
    e = m.estimate(simulate(m, beta_leaves(), 3000, 1, np.random.default_rng(4))[1][0])
    spec = kind_or_default("distribution")
    for estimand, whose in (
        ("reporters", "the reporting users' own values"),
        ("population", "the population the users were drawn from"),
    ):
        data = e.to_dict(estimand=estimand) | {"metric": "x", "kind": "distribution"}
        result = EstimateResult.from_json(data)
        assert result.estimand == estimand
        assert f"about {whose} (estimand {estimand})" in "\n".join(spec.text(result, []))


def test_a_range_on_leaf_edges_given_as_decimals_is_not_widened() -> None:
    """8.4 on [0, 120] with 100 leaves is leaf 7's edge, though 8.4 / 120 * 100 is
    7.000000000000001 in floating point: the range is whole leaves, not one that cuts a
    leaf (whose interval is widened to the leaves around it)."""
    m = HierarchicalHistogram(epsilon=4.0, bounds=(0.0, 120.0), resolution=100)
    values = np.random.default_rng(5).uniform(0, 120, 5000)
    e = m.estimate(m.aggregate(m.perturb(values, rng=np.random.default_rng(6))))
    decimal = e.fraction(8.4, 13.2)  # leaves 7..10
    exact = e.fraction(7 * 1.2, 11 * 1.2)
    assert decimal.method == exact.method == "score"
    assert (decimal.estimate, decimal.stderr) == pytest.approx((exact.estimate, exact.stderr))
    edges = e.histogram(edges=[0.0, 8.4, 13.2, 120.0])
    assert edges.method == "score"
