"""The exponential mechanism as a categorical metric's mechanism (issue 30): definitions
(checked once, fingerprinted), the answer's frequencies and mean rank (unbiased, intervals
covering at n = 2000, where the normal intervals hold; docs/statistics.md), the mean rank's
covariance for the pure oracles against simulation, ``auto`` for ordered categories, and
the audit's measured epsilon. Fixed seeds; tolerances from the variance formulas."""

from __future__ import annotations

import decimal
import math
from typing import Any

import numpy as np
import pytest

import ldpkit
from ldpkit.aggregate import Aggregate
from ldpkit.audit import audit
from ldpkit.errors import ParameterError
from ldpkit.kinds import Question
from ldpkit.mechanisms import ORDERED, choose
from ldpkit.mechanisms.base import FrequencyOracle
from ldpkit.mechanisms.exponential import ChannelFrequencies, Exponential
from ldpkit.metrics import MetricDefinition
from ldpkit.testing import mislabelled
from tests.stats import chi2_ratio_bounds

RATING = {"kind": "categorical", "categories": ["1", "2", "3", "4", "5"], "epsilon": 1.0}
TRUTH = np.array([0.08, 0.12, 0.20, 0.35, 0.25])


def define(**extra: Any) -> MetricDefinition:
    return MetricDefinition.from_dict("rating", RATING | extra)


# --- definitions --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"mechanism": "exponential"}, "needs ordered = true"),
        ({"mechanism": "exponential", "score": "distance"}, "needs ordered = true"),
        ({"mechanism": "exponential", "ordered": True, "score": "band", "band": 1}, "singular"),
        ({"mechanism": "exponential", "ordered": True, "score": "band"}, "integer band"),
        ({"mechanism": "exponential", "ordered": True, "score": "cosine"}, "score must be"),
        ({"mechanism": "exponential", "ordered": True, "band": 1}, "band is only"),
        ({"mechanism": "exponential", "scores": [[1, 0], [0, 1]]}, "not one per category"),
        ({"mechanism": "exponential", "scores": [["a"] * 5] * 5}, "rows of numbers"),
        ({"mechanism": "grr", "score": "distance"}, "takes no score"),
        ({"mechanism": "olh", "ordered": True}, "mean rank has a known variance"),
        ({"mechanism": "exponential", "ordered": "yes"}, "ordered must be true or false"),
    ],
)
def test_bad_definitions_are_refused_clearly(extra: dict[str, Any], says: str) -> None:
    with pytest.raises(ParameterError, match=says):
        define(**extra)


def test_too_many_categories_are_refused() -> None:
    with pytest.raises(ParameterError, match="at most 64 categories"):
        MetricDefinition.from_dict(
            "age",
            {"kind": "categorical", "categories": [str(i) for i in range(65)], "epsilon": 1.0,
             "mechanism": "exponential", "ordered": True},
        )  # fmt: skip


def test_the_definition_round_trips_and_fingerprints_its_score() -> None:
    d = define(mechanism="exponential", ordered=True)
    served = d.to_dict()
    assert (served["ordered"], served["score"]) == (True, "distance")
    again = MetricDefinition.from_served("rating", served, served["fingerprint"])
    assert again.fingerprint == d.fingerprint and again.served_differences(served) == []
    band = define(mechanism="exponential", ordered=True, score="band", band=2)
    matrix = define(mechanism="exponential", scores=np.eye(5).tolist())
    assert len({d.fingerprint, band.fingerprint, matrix.fingerprint}) == 3
    assert matrix.to_dict()["scores"][0] == [1.0, 0.0, 0.0, 0.0, 0.0]
    # An unordered GRR metric keeps the fingerprint it had: no new key in its parameters.
    assert set(define(mechanism="grr").parameters()) == {
        "protocol", "name", "kind", "mechanism", "epsilon", "bucket", "categories"
    }  # fmt: skip


def test_a_lying_threshold_is_found() -> None:
    d = define(mechanism="exponential", ordered=True)
    served = d.to_dict()
    served["derived"]["cumulative"][2][1] = "f" * 16
    assert d.served_differences(served) == [
        f'derived.cumulative[2][1] = "{"f" * 16}" '
        f'(computed "{d.to_dict()["derived"]["cumulative"][2][1]}")'
    ]


def test_thresholds_spend_epsilon_and_no_more() -> None:
    for eps in (0.5, 1.0, 4.0, 8.0):
        m = Exponential(epsilon=eps, domain_size=10)
        law = m.output_law()
        np.testing.assert_allclose(law, m.core.channel, rtol=1e-12, atol=1e-15)
        loss = np.max(np.log(law).max(axis=0) - np.log(law).min(axis=0))
        assert abs(loss - eps) < 1e-9


def served_loss_excess(m: Exponential) -> decimal.Decimal:
    """``ln(max / min)`` of each output's integer cell widths (the law the device really
    samples: thresholds over 2^64) less epsilon, the largest over outputs, in 60 digits."""
    ctx = decimal.Context(prec=60)
    worst = decimal.Decimal("-Infinity")
    widths = [
        [b - a for a, b in zip((0, *row), (*row, 1 << 64), strict=True)] for row in m.thresholds
    ]
    for column in zip(*widths, strict=True):
        assert min(column) > 0, "an output some input can give has width 0 in another row"
        loss = ctx.ln(ctx.divide(decimal.Decimal(max(column)), decimal.Decimal(min(column))))
        worst = max(worst, loss)
    return worst - decimal.Decimal(m.epsilon)


@pytest.mark.parametrize(
    "kw",
    [
        {"domain_size": 2},
        {"domain_size": 3},
        {"domain_size": 10},
        {"domain_size": 32},
        {"domain_size": 6, "score": "band", "band": 1},
        {
            "domain_size": 3,
            "score": "matrix",
            "scores": ((0.0, 0.3, 1.0), (0.2, 0.0, 0.5), (1.0, 0.4, 0.0)),
        },
    ],
    ids=["distance-2", "distance-3", "distance-10", "distance-32", "band-6", "matrix-3"],
)
def test_the_served_integer_law_never_spends_more_than_epsilon(kw: dict[str, Any]) -> None:
    """The device samples the integer thresholds, not the real-valued channel: rounding
    each cumulative threshold down moves a cell by up to 2^-64, which in a small cell is a
    relative change of 1e-16 or more, enough to push the loss past epsilon. The served law
    itself must stay within epsilon exactly (and within 1e-9 of it: the scale is not
    given away)."""
    for eps in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0):
        excess = served_loss_excess(Exponential(epsilon=eps, **kw))
        assert excess <= 0, f"eps {eps}: the served law spends {excess} more"
        assert excess > decimal.Decimal("-1e-9")


# --- the answer -------------------------------------------------------------------------
def campaign(d: MetricDefinition, n: int, rng: np.random.Generator) -> dict[str, Any]:
    m = d.mechanism_instance
    values = rng.choice(len(TRUTH), size=n, p=TRUTH)
    agg = m.aggregate(m.perturb(values, rng=rng))
    return {"values": values, "agg": agg, "answer": d.kind_spec.answer(d, agg, Question())}


def test_the_answer_has_score_intervals_the_mean_rank_and_shares_when_ordered() -> None:
    rng = np.random.default_rng(1)
    ordered = campaign(define(mechanism="exponential", ordered=True), 500, rng)["answer"]
    assert ordered["interval"] == "score"
    assert ordered["mean_rank"]["interval"] == "score"
    assert set(ordered["mean_rank"]) == {"estimate", "stderr", "low", "high", "interval"}
    shares = ordered["at_least"]
    assert [s["category"] for s in shares] == ["2", "3", "4", "5"]
    assert all(s["interval"] == "score" and 0 <= s["low"] <= s["high"] <= 1 for s in shares)
    plain = campaign(define(mechanism="grr"), 500, rng)["answer"]
    assert "mean_rank" not in plain and "at_least" not in plain
    grr = campaign(define(mechanism="grr", ordered=True), 500, rng)["answer"]
    assert "mean_rank" in grr and grr["at_least"][2]["interval"] == "normal"


@pytest.mark.parametrize("mechanism", ["exponential", "grr"])
def test_the_shares_are_sums_of_the_frequencies_with_their_covariance(mechanism: str) -> None:
    """The share "4 or later" is f_4 + f_5 of the same estimate, its stderr sqrt(w^T Cov w)."""
    d = define(mechanism=mechanism, ordered=True)
    m = d.mechanism_instance
    assert isinstance(m, FrequencyOracle)
    est = m.estimate(campaign(d, 800, np.random.default_rng(2))["agg"])
    shares = m.shares_at_least(est, 0.9)
    assert shares.estimate[2] == pytest.approx(est.frequencies[3:].sum(), abs=1e-12)
    w = np.array([0.0, 0.0, 0.0, 1.0, 1.0])
    cov = getattr(est, "covariance", None)
    if cov is None:  # a pure oracle's, at the Norm-Sub fractions (as its mean rank's)
        cov = m.covariance(est.consistent(), est.n)
    assert shares.stderr[2] == pytest.approx(math.sqrt(w @ cov @ w), rel=1e-9)
    together = m.shares_at_least(est, 0.9, simultaneous=True)
    assert np.all(together.low <= shares.low) and np.all(together.high >= shares.high)
    assert np.any(together.high - together.low > shares.high - shares.low)


def test_score_intervals_hold_together_at_n_200_where_normal_ones_do_not() -> None:
    """d = 10, eps = 8, n = 200 reporters (a fixed population, eight rare items held by 1%
    each): 400 campaigns; every item's simultaneous 95% interval (Bonferroni over d) holds
    its truth together at least 0.95 less 3 binomial standard deviations, and so do the
    nine shares "k or later" (measured 0.99 each; the normal intervals at the same z hold
    0.68 and 0.87 of these campaigns)."""
    cats = [str(i) for i in range(10)]
    d = MetricDefinition.from_dict(
        "age",
        {"kind": "categorical", "categories": cats, "epsilon": 8.0,
         "mechanism": "exponential", "ordered": True},
    )  # fmt: skip
    m = d.mechanism_instance
    assert isinstance(m, Exponential)
    held = np.array([2] * 8 + [80, 104])
    truth, shares_truth = held / held.sum(), np.cumsum(held[::-1])[::-1][1:] / held.sum()
    campaigns = 400
    rng = np.random.default_rng(30)
    counts = rng.multinomial(held, m.output_law(), size=(campaigns, 10)).sum(axis=1)
    items = shares = 0
    for c in counts:
        est = m.estimate(Aggregate(n=int(c.sum()), sums=c.astype(np.float64)))
        low, high = est.ci(0.95, simultaneous=True)
        items += bool(np.all((low <= truth) & (truth <= high)))
        s = m.shares_at_least(est, 0.95, simultaneous=True)
        shares += bool(np.all((s.low <= shares_truth) & (shares_truth <= s.high)))
    floor = 0.95 - 3 * math.sqrt(0.95 * 0.05 / campaigns)
    assert items / campaigns >= floor, items / campaigns
    assert shares / campaigns >= floor, shares / campaigns


@pytest.mark.parametrize("mechanism", ["exponential", "grr", "hr"])
def test_frequencies_and_mean_rank_are_unbiased_and_cover_at_n_2000(mechanism: str) -> None:
    """300 campaigns of n = 2000 (n = 200, where normal intervals under-cover rare items,
    is the simultaneous test's above). Means within 4.5 standard errors of the truth; the
    mean rank's variance within chi-square bounds of its formula; 95% coverage within 4 binomial
    standard deviations of 0.95."""
    d = define(mechanism=mechanism, ordered=True)
    m = d.mechanism_instance
    assert isinstance(m, FrequencyOracle)
    rng = np.random.default_rng(30)
    campaigns, n = 300, 2000
    freqs, ranks, covered, rank_covered = [], [], np.zeros(5), 0
    truth_rank = float(TRUTH @ np.arange(1, 6))
    for _ in range(campaigns):
        est = m.estimate(campaign(d, n, rng)["agg"])
        low, high = est.ci(0.95)
        rank = m.mean_rank(est)
        freqs.append(est.frequencies)
        ranks.append(rank.mean)
        covered += (low <= TRUTH) & (high >= TRUTH)
        lo, hi = rank.ci(0.95)
        rank_covered += lo <= truth_rank <= hi
    cov = m.covariance(TRUTH, n)
    assert cov is not None
    se = np.sqrt(np.diag(cov) / campaigns)
    assert np.all(np.abs(np.mean(freqs, axis=0) - TRUTH) < 4.5 * se)
    w = np.arange(1.0, 6.0) - 3.0
    rank_var = float(w @ cov @ w)
    assert abs(np.mean(ranks) - truth_rank) < 4.5 * math.sqrt(rank_var / campaigns)
    lo_ratio, hi_ratio = chi2_ratio_bounds(campaigns)
    # The draws are multinomial (not a fixed population): add the inputs' own spread.
    population = float(np.arange(1, 6) ** 2 @ TRUTH - truth_rank**2) / n
    assert lo_ratio < np.var(ranks, ddof=1) / (rank_var + population) < hi_ratio
    tolerance = 4 * math.sqrt(0.95 * 0.05 / campaigns)
    assert np.all(covered / campaigns >= 0.95 - tolerance), covered / campaigns
    assert rank_covered / campaigns >= 0.95 - tolerance


def test_item_and_share_intervals_are_the_linear_score_intervals() -> None:
    """The ordered exponential's item and "k or later" intervals are the score intervals
    of their functionals (whose coverage test_exponential_ranges checks both ways), at the
    level, or Bonferroni at ``1 - (1 - level) / k`` when simultaneous. Their coverage here
    is bounded from beneath only: items at 1 - alpha / 4 (and d^2 together) passed."""
    from ldpkit.mechanisms.exponential import at_least_weights

    d = define(mechanism="exponential", ordered=True)
    m = d.mechanism_instance
    assert isinstance(m, Exponential)
    rng = np.random.default_rng(33)
    for n in (200, 2000):
        est = m.estimate(campaign(d, n, rng)["agg"])
        assert isinstance(est, ChannelFrequencies)
        items, shares = est.linear(np.eye(5)), est.linear(at_least_weights(5))
        for simultaneous, k in ((False, 1), (True, 5)):
            low, high = est.ci(0.95, simultaneous=simultaneous)
            b = items.interval(1 - 0.05 / k)
            np.testing.assert_allclose(low, b.lower, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(high, b.upper, rtol=1e-9, atol=1e-12)
        for simultaneous, k in ((False, 1), (True, 4)):
            s = m.shares_at_least(est, 0.95, simultaneous=simultaneous)
            b = shares.interval(1 - 0.05 / k)
            np.testing.assert_allclose(s.low, b.lower, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(s.high, b.upper, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "ss", "hr"])
def test_the_pure_oracles_mean_rank_variance_is_their_covariance(name: str) -> None:
    """A fixed population (each item equally often), 300 campaigns: the mean rank's
    variance against ``rank_variance`` (uniform population, one report) / n, and the
    uncentred sum ``(1 .. d) . f_hat``'s against ``covariance`` (its off-diagonal terms
    are most of it: GRR's is 28.6 with them, 125.7 without)."""
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=5)
    assert isinstance(m, FrequencyOracle)
    rng = np.random.default_rng(sum(map(ord, name)))
    values = np.tile(np.arange(5), 400)
    estimates = [m.estimate(m.aggregate(m.perturb(values, rng=rng))) for _ in range(300)]
    means = [m.mean_rank(e).mean for e in estimates]
    raw = [float(np.arange(1.0, 6.0) @ e.frequencies) for e in estimates]
    theory, cov = m.rank_variance(), m.covariance(np.full(5, 0.2))
    assert theory is not None and cov is not None
    lo_ratio, hi_ratio = chi2_ratio_bounds(300)
    assert lo_ratio < np.var(means, ddof=1) * values.size / theory < hi_ratio
    w = np.arange(1.0, 6.0)
    assert lo_ratio < np.var(raw, ddof=1) * values.size / float(w @ cov @ w) < hi_ratio


def test_hadamard_covariance_is_the_enumerated_one() -> None:
    """HR's items' covariance (not two constants: it runs through the item whose row is the
    XOR of two items' rows) against the per-reporter covariance of the support indicators,
    enumerated over all K columns of each input's law, at d = 6 (K = 8) and d = 12."""
    for d in (6, 12):
        m = ldpkit.mechanism("hr", epsilon=1.0, domain_size=d)
        assert isinstance(m, FrequencyOracle)
        f = np.random.default_rng(d).dirichlet(np.ones(d))
        columns, _ = m.output_probabilities(0)
        support = np.array([m.supports(v, columns) for v in range(d)], dtype=np.float64)
        cov = np.zeros((d, d))
        for x in range(d):
            _, law = m.output_probabilities(x)
            a = support @ law
            cov += f[x] * ((support * law) @ support.T - np.outer(a, a))
        served = m.covariance(f, 1)
        assert served is not None
        assert np.max(np.abs(cov / (m.p - m.q) ** 2 - served)) < 1e-12
        assert np.max(np.abs(served - np.diag(np.diag(served)))) > 0.01  # not diagonal


# --- auto and explain ---------------------------------------------------------------------
def test_auto_weighs_ordered_categories_by_the_mean_rank() -> None:
    for d, eps in ((5, 4.0), (10, 0.5), (10, 1.0)):
        choice = choose(epsilon=eps, domain_size=d, ordered=True)
        assert set(choice.variances) == set(ORDERED)
        for name, variance in choice.variances.items():
            m = ldpkit.mechanism(name, epsilon=eps, domain_size=d)
            assert isinstance(m, FrequencyOracle)
            assert variance == m.rank_variance()
        best = min(choice.variances.values())
        assert choice.variances[choice.name] <= best * 1.05
        assert "mean rank" in choice.explain() and "ordered categories" in choice.explain()
    # At small epsilon and d = 10 the exponential mechanism's mean rank beats GRR's by far.
    small = choose(epsilon=0.5, domain_size=10, ordered=True).variances
    assert small["exponential"] < 0.6 * small["grr"]
    assert define(ordered=True).resolved_mechanism in ORDERED
    # Unordered metrics weigh what they always did.
    assert "exponential" not in choose(epsilon=1.0, domain_size=5).variances


# --- the audit ----------------------------------------------------------------------------
def test_the_audit_measures_its_epsilon() -> None:
    m = ldpkit.mechanism("exponential", epsilon=1.0, domain_size=5)
    result = audit(m, samples=200_000, rng=np.random.default_rng(5))
    assert result.passed and result.epsilon_lower_bound > 0.85, str(result)
    broken = audit(mislabelled(m, 1.6), samples=200_000, rng=np.random.default_rng(6))
    assert not broken.passed, str(broken)


def test_the_estimate_is_a_channel_estimate() -> None:
    m = ldpkit.mechanism("exponential", epsilon=1.0, domain_size=5)
    est = m.estimate(m.aggregate(m.perturb(np.arange(5).repeat(100), rng=np.random.default_rng(2))))
    assert isinstance(est, ChannelFrequencies)
    assert abs(est.frequencies.sum() - 1.0) < 1e-9
    shift = est.forgery_shift(0.01)
    assert np.all(shift > 0.01) and np.all(est.robust(0.01).ci()[0] <= est.ci()[0])
    assert np.all(est.robust(0.01).forgery_shift() == pytest.approx(np.linalg.norm(shift)))
    d = define(mechanism="exponential", ordered=True)
    agg = d.mechanism_instance.aggregate(np.arange(5).repeat(50))
    answer = d.kind_spec.answer(d, agg, Question(robust=True, simultaneous=True))
    assert answer["robust"]["forged_reports"] == 2 and '"robust_low"' in answer["items"]


def test_the_item_variance_is_the_covariance_diagonal_and_plans_normal_intervals() -> None:
    m = Exponential(epsilon=1.0, domain_size=6)
    for f in (0.0, 0.3, 1.0):
        for i in range(6):
            pop = np.full(6, (1.0 - f) / 5)
            pop[i] = f
            assert np.diag(m.covariance(pop, 7))[i] <= m.variance(f, 7) * (1 + 1e-9)
    worst = max(
        float(np.diag(m.covariance(np.where(np.arange(6) == i, 0.3, 0.14)))[i]) for i in range(6)
    )
    assert m.variance(0.3) == pytest.approx(worst, rel=1e-9)
    plan = ldpkit.plan("exponential", epsilon=1.0, domain_size=6, n=10_000, frequency=0.3)
    assert plan.interval == "score"  # the answer's, planned at the normal half-width
    assert plan.half_width == pytest.approx(1.959964 * math.sqrt(worst / 10_000), rel=1e-5)


def test_auto_keeps_a_score_it_weighed_but_did_not_choose() -> None:
    """d = 5 at epsilon 4: auto weighs the distance score and takes SS; the definition
    keeps the score (served, fingerprinted), rebuilds the same, and a pinned SS drops it."""
    d = MetricDefinition.from_dict(
        "r", RATING | {"epsilon": 4.0, "ordered": True, "score": "distance"}
    )
    assert d.resolved_mechanism == "ss" and d.score == "distance"
    served = d.to_dict()
    assert MetricDefinition.from_served("r", served, d.fingerprint).fingerprint == d.fingerprint
    pinned = MetricDefinition.from_served("r", served, "0" * 16)
    assert (pinned.mechanism, pinned.score) == ("ss", None)
    chosen = define(mechanism="auto", ordered=True, epsilon=0.5, categories=list("abcdefghij"))
    assert (chosen.resolved_mechanism, chosen.score) == ("ss", None)
    exp = define(mechanism="exponential", ordered=True)
    assert exp.score == "distance"


def test_the_most_common_set_holds_the_mode_with_the_channels_covariance() -> None:
    """A 1-5 rating whose mode (0.35) leads the next (0.25) by little, eps = 1, n = 2000
    reporters, 200 campaigns: the 95% set holds the true mode at least 0.95 less 3
    binomial standard deviations (measured 0.985; with the randomized-response difference
    variance of p and q it held 0.745). At eps = 8, n = 20000 the mode is alone."""
    d = define(mechanism="exponential", ordered=True, epsilon=1.0)
    m = d.mechanism_instance
    assert isinstance(m, Exponential)
    campaigns, held = 200, np.round(TRUTH * 2000).astype(int)
    rng = np.random.default_rng(7)
    counts = rng.multinomial(held, m.output_law(), size=(campaigns, 5)).sum(axis=1)
    holds = 0
    for c in counts:
        est = m.estimate(Aggregate(n=int(c.sum()), sums=c.astype(np.float64)))
        holds += 3 in np.atleast_1d(est.most_common(0.95).set).tolist()
    assert holds / campaigns >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / campaigns), holds / campaigns
    sharp = define(mechanism="exponential", ordered=True, epsilon=8.0).mechanism_instance
    assert isinstance(sharp, Exponential)
    c = rng.multinomial(np.round(TRUTH * 20000).astype(int), sharp.output_law()).sum(axis=0)
    est = sharp.estimate(Aggregate(n=int(c.sum()), sums=c.astype(np.float64)))
    assert np.atleast_1d(est.most_common(0.95).set).tolist() == [3]
