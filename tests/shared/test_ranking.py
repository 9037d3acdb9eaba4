"""The mode's confidence set and the rank intervals (ldpkit.ranking): coverage by simulation.

Each campaign's reports are drawn by the mechanism for the same reporters (the estimand is
theirs): 500 campaigns of 2,000 reports take about a second. A set
must miss the true mode at most ``1 - level`` of the time: the number of misses in 500 is
then at most the binomial's 0.999 quantile (a correct method fails one run in 1,000 at
worst; the seeds are fixed).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit.estimates import FrequencyEstimate
from ldpkit.ranking import from_covariance, from_stderr, most_common, ranks

CAMPAIGNS = 500


def _estimates(
    name: str, fractions: list[float], n: int, seed: int, epsilon: float = 1.0
) -> list[FrequencyEstimate]:
    """CAMPAIGNS estimates of ``name`` for the same reporters (their true fractions),
    each from its own reports drawn by the mechanism."""
    counts = np.round(np.asarray(fractions) * n).astype(np.int64)
    m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=counts.size)
    values = np.repeat(np.arange(counts.size), counts)
    reports = m.perturb(np.tile(values, CAMPAIGNS), rng=np.random.default_rng(seed))
    size = values.size
    return [m.estimate(m.aggregate(reports[k * size : (k + 1) * size])) for k in range(CAMPAIGNS)]


def _most_misses(level: float) -> int:
    return int(stats.binom.ppf(0.999, CAMPAIGNS, 1.0 - level))


# A true mode (item 0) that leads by little: by about 0.1 of a difference's standard error.
NEAR_TIES = [
    ("grr", [0.5005, 0.4995], 2000, 0.90),  # by one reporter; two estimates move oppositely
    ("grr", [0.105] + [0.895 / 9] * 9, 2000, 0.95),  # nine near rivals: multiplicity
    ("oue", [0.105] + [0.895 / 9] * 9, 2000, 0.95),
    ("ss", [0.105] + [0.895 / 9] * 9, 2000, 0.95),
    ("olh", [0.105] + [0.895 / 9] * 9, 2000, 0.95),  # a bound on the covariance
    ("hadamard", [0.105] + [0.895 / 9] * 9, 2000, 0.95),
]


@pytest.mark.parametrize(("name", "fractions", "n", "level"), NEAR_TIES)
def test_the_set_holds_a_true_mode_that_leads_by_little(
    name: str, fractions: list[float], n: int, level: float
) -> None:
    estimates = _estimates(name, fractions, n, seed=30)
    sets = [e.most_common(level) for e in estimates]
    misses = sum(0 not in s.set for s in sets)
    assert misses <= _most_misses(level), (misses, _most_misses(level))
    # The leader is often another item, and the set then names more than one.
    assert sum(s.mode != 0 for s in sets) > CAMPAIGNS // 10
    assert all(s.mode in s.set and s.set[0] == s.mode for s in sets)


@pytest.mark.parametrize("name", ["grr", "oue", "olh", "hadamard", "ss"])
def test_one_item_that_leads_by_far_is_the_set_alone(name: str) -> None:
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=8)
    rng = np.random.default_rng(7)
    for _ in range(20):
        values = rng.choice(8, size=5000, p=[0.44] + [0.08] * 7)
        e = m.estimate(m.aggregate(m.perturb(values, rng=rng)))
        common = e.most_common(0.95)
        assert common.mode == 0 and common.set == (0,) and common.certain
        r = e.ranks(0.95, top=1)
        assert (r.items, r.rank, r.low, r.high) == ((0,), (1,), (1,), (1,))


@pytest.mark.parametrize("name", ["grr", "oue"])
def test_rank_intervals_hold_together(name: str) -> None:
    """Five tied items after a leader: a claim that one is above another is wrong."""
    level = 0.95
    fractions = [0.3] + [0.14] * 5
    estimates = _estimates(name, fractions, 3000, seed=31)
    truth = np.array([1, 2, 2, 2, 2, 2])  # 1 + how many are strictly more common
    misses = 0
    for e in estimates:
        r = ranks(e.frequencies, e.difference_variance, level, top=6, step=e._step())
        low, high = np.empty(6, int), np.empty(6, int)
        low[list(r.items)], high[list(r.items)] = r.low, r.high
        misses += not bool(np.all((low <= truth) & (truth <= high)))
    assert misses <= _most_misses(level), (misses, _most_misses(level))


def test_ranks_and_set_without_reports() -> None:
    m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=3)
    e = m.estimate(m.empty_aggregate())
    common = e.most_common()
    assert common.mode is None and common.set == (0, 1, 2)
    assert common.describe(["a", "b", "c"]) == "most common: no estimate yet"
    assert e.ranks().items == ()


def test_describe_and_labels() -> None:
    common = most_common([0.5, 0.35, 0.15], lambda i, j: np.full(np.broadcast(i, j).shape, 0.01))
    assert common.set == (0, 1)  # one-sided at 0.05 / 2: z = 1.96 > 0.15 / 0.1; < 0.35 / 0.1
    assert common.describe(["x", "y", "z"]) == "most common: x (or y at 95%)"
    assert common.labelled(["x", "y", "z"])["set"] == ["x", "y"]
    alone = most_common([0.9, 0.1], lambda i, j: np.zeros(np.broadcast(i, j).shape))
    assert alone.describe(["x", "y"]) == "most common: x (alone at 95%)"


def test_difference_variance_is_the_oracles() -> None:
    """Simulated variance of f_1 - f_0 at equal fractions against the formula, by oracle;
    for local hashing and Hadamard the formula is a bound (randomized response's)."""
    for name in ("grr", "oue", "ss", "olh"):
        m = ldpkit.mechanism(name, epsilon=2.0, domain_size=4)
        rng = np.random.default_rng(3)
        values = np.repeat(np.arange(4), [300, 300, 200, 200])
        diffs = []
        for _ in range(400):
            e = m.estimate(m.aggregate(m.perturb(values, rng=rng)))
            diffs.append(e.frequencies[1] - e.frequencies[0])
        e0 = m.estimate(m.aggregate(m.perturb(values, rng=rng)))
        e0 = FrequencyEstimate(
            e0.mechanism,
            e0.epsilon,
            e0.n,
            np.array([0.3, 0.3, 0.2, 0.2]),
            e0.stderr,
            e0.support_counts,
            e0.p,
            e0.q,
            co_support=e0.co_support,
        )
        theory = float(e0.difference_variance(np.array(0), np.array(1)))
        sample = float(np.var(diffs, ddof=1))
        # The sample variance of 400 draws: relative sd sqrt(2 / 399), 4 of them.
        tolerance = 4 * np.sqrt(2 / 399)
        if e0.co_support is None:
            assert sample <= theory * (1 + tolerance)
        else:
            assert abs(sample / theory - 1) <= tolerance, (name, sample, theory)


@pytest.mark.parametrize("d", [3, 8])
def test_the_tests_thresholds_are_the_stated_bonferroni_quantiles(d: int) -> None:
    """Differences of known variance 2 placed just either side of the thresholds of the
    module: the set's test at z_(1 - alpha / (d - 1)), the ranks' at z_(1 - alpha / (d (d -
    1))) per side. The coverage checks above bound the set and the rank intervals from one
    side only (a set or an interval too wide passes them: thresholds at alpha / 20 did)."""
    variance = from_covariance(np.eye(d))  # every difference's variance is 2
    far = np.full(d - 2, -100.0)
    c_set = stats.norm.isf(0.05 / (d - 1))
    c_rank = stats.norm.isf(0.05 / (d * (d - 1)))
    for margin, beaten in ((0.01, True), (-0.01, False)):
        f = np.concatenate([[math.sqrt(2) * (c_set + margin), 0.0], far])
        assert most_common(f, variance, 0.95).set == ((0,) if beaten else (0, 1)), margin
        f = np.concatenate([[math.sqrt(2) * (c_rank + margin), 0.0], far])
        r = ranks(f, variance, 0.95, top=2)
        assert r.items == (0, 1) and r.low[1] == (2 if beaten else 1), (margin, r)
        assert r.high[0] == (1 if beaten else 2), (margin, r)


def test_from_covariance_and_from_stderr() -> None:
    cov = np.array([[1.0, 0.5], [0.5, 2.0]])
    v = from_covariance(cov)
    assert float(v(np.array(0), np.array(1))) == pytest.approx(2.0)
    bound = from_stderr(lambda i, j: np.sqrt(np.diag(cov))[i])
    assert float(bound(np.array(0), np.array(1))) == pytest.approx((1 + np.sqrt(2)) ** 2)


def test_a_hierarchy_levels_set_holds_its_true_mode() -> None:
    """Depth 1 of a tree, A leading B by one reporter: the set from each node's own
    variance, bounded over their covariance (GroupEstimate.difference_variance); two nodes
    reported by randomized response move exactly oppositely, where the bound is reached."""
    from ldpkit.structured import hierarchy

    m = hierarchy(["A/x", "A/y", "B/x", "B/y"], epsilon=1.0)
    values = np.repeat(np.arange(4), [501, 500, 500, 499])
    reports = m.perturb(np.tile(values, CAMPAIGNS), rng=np.random.default_rng(32))
    misses, sizes = 0, 0
    for k in range(CAMPAIGNS):
        group = m.estimate(m.aggregate(reports[k * values.size : (k + 1) * values.size])).level(1)
        common = group.most_common(0.9)
        misses += group.keys.index("A") not in common.set
        sizes += len(common.set)
    assert misses <= _most_misses(0.9), misses
    assert sizes < 2 * CAMPAIGNS  # not both every time


def test_a_histograms_set_holds_its_true_modal_bin() -> None:
    """Eight bins on leaf edges, bin 2 ahead of bin 5 by one reporter (0.19 and 0.18)."""
    m = ldpkit.mechanism("hh", epsilon=4.0, bounds=(0.0, 80.0), resolution=64)
    rng = np.random.default_rng(33)
    counts = np.round(np.array([8, 8, 19, 8, 8, 19, 16, 15]) / 101 * 2000).astype(int)
    counts[5] -= 1
    values = np.concatenate(
        [rng.uniform(10 * b, 10 * b + 10, size=c) for b, c in enumerate(counts)]
    )
    reports = m.perturb(np.tile(values, CAMPAIGNS), rng=rng)
    truth = 1 + (counts[None, :] > counts[:, None]).sum(axis=1)
    misses = rank_misses = 0
    for k in range(CAMPAIGNS):
        e = m.estimate(m.aggregate(reports[k * values.size : (k + 1) * values.size]))
        bins = e.histogram(8)
        assert bins.aligned
        misses += 2 not in bins.most_common(0.95).set
        r = bins.ranks(0.95, top=8)
        low, high = np.empty(8, int), np.empty(8, int)
        low[list(r.items)], high[list(r.items)] = r.low, r.high
        rank_misses += not bool(np.all((low <= truth) & (truth <= high)))
    assert misses <= _most_misses(0.95) and rank_misses <= _most_misses(0.95)


@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_the_floor_shortcut_changes_no_set(name: str) -> None:
    """Items within c sqrt(floor) of the leader are kept untested: the same set as testing
    every item against every rival."""
    rng = np.random.default_rng(34)
    m = ldpkit.mechanism(name, epsilon=2.0, domain_size=40)
    for n in (500, 5000, 50000):
        values = rng.choice(40, size=n, p=rng.dirichlet(np.full(40, 0.3)))
        e = m.estimate(m.aggregate(m.perturb(values, rng=rng)))
        full = most_common(e.frequencies, e.difference_variance, 0.9, step=e._step())
        assert e.most_common(0.9).set == full.set
        i, j = np.meshgrid(np.arange(40), np.arange(40))
        floor = e._variance_floor()
        assert floor <= float(np.min(e.difference_variance(i, j)))
        assert floor == pytest.approx(
            float(np.min(e._difference_variance_at(np.linspace(0, 1, 11))))
        )


def test_a_rival_below_the_leader_can_beat_an_item() -> None:
    """The leader's difference with item 2 is too noisy to tell; item 1's is not."""

    def variance(i: npt.NDArray[np.int64], j: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        noisy = (np.asarray(i) == 0) | (np.asarray(j) == 0)
        return np.where(noisy, 1.0, 1e-4)

    f = [0.5, 0.4, 0.3, 0.39]
    assert most_common(f, variance, 0.95).set == (0, 1, 3)  # 2 beaten by 1: 0.1 / 0.01
    assert most_common(f, variance, 0.95, floor=1e-4).set == (0, 1, 3)
    assert most_common(f, variance, 0.95, floor=1.0).set == (0, 1, 3, 2)  # a wrong floor
