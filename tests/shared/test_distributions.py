"""The hierarchical histogram and its answers, against theory.

Fixed seeds; tolerances from the estimator's own covariance (unbiasedness within a few
standard errors, empirical variances within chi-square bounds, 95% intervals covering
93%-97% of the time), exact enumeration for privacy, and a dense least-squares solve for
the consistent inference. Small trees (64 leaves) keep the campaigns fast; the grids over
populations, epsilons and n up to 10^6 are in benchmarks/distributions.py.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit.audit import audit
from ldpkit.distribution import DistributionEstimate, Tree, TreeSmoother, leaf_edges, leaf_index
from ldpkit.mechanisms.hierarchical import REPORT_DTYPE, HierarchicalHistogram
from ldpkit.mechanisms.local_hashing import OptimizedLocalHashing, bucket
from ldpkit.mechanisms.randomized_response import GeneralizedRR
from ldpkit.testing import mislabelled
from tests.stats import chi2_ratio_bounds

FloatArray = npt.NDArray[np.float64]
BOUNDS = (0.0, 10.0)


def make(epsilon: float = 1.0, resolution: int = 64, branching: int = 4) -> HierarchicalHistogram:
    m = ldpkit.mechanism(
        "hh", epsilon=epsilon, bounds=BOUNDS, resolution=resolution, branching=branching
    )
    assert isinstance(m, HierarchicalHistogram)
    return m


# --- populations with exactly known answers ----------------------------------------------
@dataclass
class Population:
    """A discrete population: values and their probabilities (answers are exact sums)."""

    values: FloatArray
    probs: FloatArray

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.choice(self.values, size=n, p=self.probs)

    def fraction(self, a: float, b: float) -> float:
        hi = BOUNDS[1]
        inside = (self.values >= a) & ((self.values < b) | ((b >= hi) & (self.values == hi)))
        return float(self.probs[inside].sum())

    def quantile(self, q: float) -> float:
        order = np.argsort(self.values)
        cumulative = np.cumsum(self.probs[order])
        return float(self.values[order][np.searchsorted(cumulative, q - 1e-12)])

    @property
    def mean(self) -> float:
        return float(self.values @ self.probs)

    def leaves(self, m: HierarchicalHistogram) -> FloatArray:
        idx = leaf_index(self.values, m.bounds, m.resolution)
        return np.bincount(idx, weights=self.probs, minlength=m.resolution)


def smooth_population() -> Population:
    # Leaf middles of a 64-leaf tree (no mass where a query could cut a leaf unevenly).
    mids = leaf_edges(BOUNDS, 64)[:-1] + 10.0 / 128
    w = stats.beta(2.0, 3.0).pdf(mids / 10.0)
    return Population(mids, w / w.sum())


def spiky_population() -> Population:
    """Half the users at one value, the rest spread out."""
    base = smooth_population()
    values = np.append(base.values, 3.7)
    return Population(values, np.append(0.5 * base.probs, 0.5))


def bounds_population() -> Population:
    """30% at the lower bound, 20% at the upper bound (values clipped there)."""
    base = smooth_population()
    values = np.concatenate([[0.0, 10.0], base.values])
    return Population(values, np.concatenate([[0.3, 0.2], 0.5 * base.probs]))


# --- campaigns ---------------------------------------------------------------------------
RANGES = [(0.0, 2.5), (2.5, 5.0), (1.25, 8.75), (5.0, 10.0), (0.0, 10.0 * 37 / 64), (3.75, 3.90625)]
QUANTILES = (0.5, 0.9)


@dataclass
class Campaigns:
    estimates: FloatArray  # (R, ranges)
    stderr: FloatArray
    covered: npt.NDArray[np.bool_]  # (R, ranges)
    bins_covered: npt.NDArray[np.bool_]  # (R, 16)
    quantiles_covered: npt.NDArray[np.bool_]  # (R, len(QUANTILES))
    means: FloatArray
    mean_covered: npt.NDArray[np.bool_]
    mean_halves: FloatArray  # each campaign's mean interval's half-width, less half a leaf
    mean_stderrs: FloatArray


def run(
    m: HierarchicalHistogram, pop: Population, *, campaigns: int, users: int, seed: int
) -> Campaigns:
    rng = np.random.default_rng(seed)
    reports = m.perturb(pop.draw(rng, campaigns * users), rng=rng)
    truths = np.array([pop.fraction(a, b) for a, b in RANGES])
    edges16 = np.linspace(*BOUNDS, 17)
    bin_truths = np.array([pop.fraction(a, b) for a, b in itertools.pairwise(edges16)])
    q_truths = np.array([pop.quantile(q) for q in QUANTILES])
    est, se, cov, bins, quant, means, mean_cov, halves, mean_se = ([] for _ in range(9))
    for r in range(campaigns):
        e = m.estimate(m.aggregate(reports[r * users : (r + 1) * users]))
        answers = e.fractions(RANGES)
        est.append([x.estimate for x in answers])
        se.append([x.stderr for x in answers])
        # The truths are the population's: so is the estimand.
        cis = np.array([x.ci(estimand="population") for x in answers])
        cov.append((cis[:, 0] <= truths) & (truths <= cis[:, 1]))
        low, high = e.histogram(16).ci(estimand="population")
        bins.append((low <= bin_truths) & (bin_truths <= high))
        qs = e.quantiles(QUANTILES)
        quant.append([q.low <= t <= q.high for q, t in zip(qs, q_truths, strict=True)])
        mean = e.mean()
        means.append(mean.mean)
        lo, hi = mean.ci()
        mean_cov.append(lo <= pop.mean <= hi)
        halves.append((hi - lo) / 2 - mean.half_leaf)
        mean_se.append(mean.stderr)
    return Campaigns(
        np.array(est),
        np.array(se),
        np.array(cov),
        np.array(bins),
        np.array(quant),
        np.array(means),
        np.array(mean_cov),
        np.array(halves),
        np.array(mean_se),
    )


# --- the consistent inference is the constrained least squares -------------------------
def dense_solution(tree: Tree, variances: list[float], xs: list[FloatArray]) -> FloatArray:
    """min sum_t |A_t theta - x_t|^2 / s_t subject to sum(theta) = 1, by its KKT system."""
    L = tree.resolution
    rows, obs, weights = [], [], []
    for t in range(1, tree.height + 1):
        if not math.isfinite(variances[t - 1]):
            continue
        a = np.zeros((tree.counts[t], L))
        for j in range(tree.counts[t]):
            a[j, j * tree.sizes[t] : min((j + 1) * tree.sizes[t], L)] = 1.0
        rows.append(a)
        obs.append(xs[t - 1])
        weights.append(np.full(tree.counts[t], 1.0 / variances[t - 1]))
    a, y, w = np.vstack(rows), np.concatenate(obs), np.concatenate(weights)
    kkt = np.block(
        [[2 * a.T @ (w[:, None] * a), np.ones((L, 1))], [np.ones((1, L)), np.zeros((1, 1))]]
    )
    rhs = np.concatenate([2 * a.T @ (w * y), [1.0]])
    return np.linalg.solve(kkt, rhs)[:L]


@pytest.mark.parametrize(
    ("resolution", "branching", "missing"),
    [
        (8, 2, None),
        (16, 4, None),
        (10, 3, None),
        (27, 3, 2),
        (12, 5, None),
        (7, 7, None),
        (64, 4, 1),
    ],
)
def test_smoother_is_constrained_least_squares(
    resolution: int, branching: int, missing: int | None
) -> None:
    rng = np.random.default_rng(resolution * 100 + branching)
    tree = Tree(resolution, branching)
    variances = list(rng.uniform(0.2, 3.0, tree.height))
    if missing is not None:
        variances[missing - 1] = math.inf  # a depth nobody reported (not the leaves)
    xs = [rng.normal(size=tree.counts[t]) for t in range(1, tree.height + 1)]
    smoother = TreeSmoother(tree, variances)
    leaves = smoother.forward(xs)
    np.testing.assert_allclose(leaves, dense_solution(tree, variances, xs), atol=1e-12)
    # The adjoint gives each depth's coefficients in any linear query of the leaves.
    query = rng.normal(size=(resolution, 3))
    coef = smoother.adjoint(query)
    constant = query.T @ smoother.forward(
        [np.zeros(tree.counts[t]) for t in range(1, tree.height + 1)]
    )
    linear = sum(coef[t].T @ xs[t - 1] for t in range(1, tree.height + 1))
    np.testing.assert_allclose(query.T @ leaves, linear + constant, atol=1e-12)


def test_unreported_leaves_split_uniformly() -> None:
    tree = Tree(16, 4)
    smoother = TreeSmoother(tree, [1.0, math.inf])
    leaves = smoother.forward([np.array([0.1, 0.2, 0.3, 0.4]), np.zeros(16)])
    np.testing.assert_allclose(leaves, np.repeat([0.1, 0.2, 0.3, 0.4], 4) / 4, atol=1e-15)


@pytest.mark.parametrize(("resolution", "branching"), [(64, 4), (1000, 4), (50, 3)])
def test_every_depth_equals_the_sum_of_its_children(resolution: int, branching: int) -> None:
    m = make(1.0, resolution, branching)
    rng = np.random.default_rng(3)
    agg = m.aggregate(m.perturb(rng.uniform(*BOUNDS, 20_000), rng=rng))
    counts, supports = m.split(agg)
    fractions = [
        (s / c - o.q) / (o.p - o.q) for o, c, s in zip(m.oracles, counts, supports, strict=True)
    ]
    nodes = m._smoother(counts).forward_all(fractions)
    tree = m.tree
    for t in range(tree.height):
        children = np.add.reduceat(nodes[t + 1], tree.child_starts(t))
        assert np.max(np.abs(nodes[t] - children)) <= 1e-9
    np.testing.assert_allclose(nodes[-1], m.estimate(agg).leaves, atol=0)
    assert abs(float(nodes[0][0]) - 1.0) <= 1e-12


@pytest.mark.parametrize(
    ("resolution", "branching", "epsilon", "users"),
    [
        (64, 4, 1.0, 5000),
        (1000, 4, 1.0, 20_000),
        (50, 3, 4.0, 3000),
        (16, 16, 1.0, 500),
        (27, 3, 1.0, 3),
    ],
)
def test_fast_prefix_variance_equals_the_dense_adjoint(
    resolution: int, branching: int, epsilon: float, users: int
) -> None:
    # The distribution function's variance at every leaf edge, in O(height^2) each, against
    # the generic adjoint of the prefix queries (non-full trees, a flat tree, and one with
    # unreported depths: 3 users over 3 depths).
    m = make(epsilon, resolution, branching)
    rng = np.random.default_rng(resolution)
    est = m.estimate(m.aggregate(m.perturb(rng.beta(2.0, 5.0, users) * 10.0, rng=rng)))
    edges = np.arange(resolution + 1)
    prefix = (np.arange(resolution)[:, None] < edges[None, :]).astype(np.float64)
    for estimand in ("population", "reporters"):  # the reporters' adds a sampling pass
        dense = est.variance(prefix, estimand)
        fast = est.prefix_variance(edges, estimand)
        np.testing.assert_allclose(fast, dense, rtol=0, atol=1e-12 * max(dense.max(), 1e-300))
        assert est.prefix_variance([0, resolution], estimand).tolist() == [0.0, 0.0]


def test_tree_geometry() -> None:
    t = Tree(1024, 4)
    assert (t.height, t.counts, t.sizes) == (
        5,
        (1, 4, 16, 64, 256, 1024),
        (1024, 256, 64, 16, 4, 1),
    )
    t = Tree(1000, 4)  # not a power of 4: the last node of each depth is short
    assert t.counts == (1, 4, 16, 63, 250, 1000)
    assert t.leaf_counts(1).tolist() == [256, 256, 256, 232]
    assert Tree(16, 16).height == 1  # flat
    # Leaves: a value on an edge belongs to the leaf above it; hi to the last leaf.
    edges = leaf_edges((0.0, 120.0), 1024)
    assert leaf_index(edges, (0.0, 120.0), 1024).tolist() == [*range(1024), 1023]
    assert leaf_index(np.nextafter(edges[1:], -np.inf), (0.0, 120.0), 1024).tolist() == list(
        range(1024)
    )


# --- privacy -----------------------------------------------------------------------------
OLH_KEYS = [(0x9E3779B97F4A7C15, 0x0123456789ABCDEF), (1, 0), (2**64 - 1, 2**64 - 1)]


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
@pytest.mark.parametrize(("resolution", "branching"), [(16, 4), (27, 3), (64, 4)])
def test_every_report_is_exactly_epsilon_ldp(
    epsilon: float, resolution: int, branching: int
) -> None:
    m = make(epsilon, resolution, branching)
    bound = math.exp(epsilon) * (1 + 1e-12)
    # Each depth's oracle, enumerated: every output's probability ratio is at most e^eps.
    for oracle in m.oracles:
        d = oracle.domain_size
        if isinstance(oracle, OptimizedLocalHashing):
            tables = [
                np.array([oracle.output_probabilities(x, a=a, b=b)[1] for x in range(d)])
                for a, b in OLH_KEYS
            ]
        else:
            assert isinstance(oracle, GeneralizedRR)
            tables = [np.array([oracle.output_probabilities(x)[1] for x in range(d)])]
        worst = 0.0
        for table in tables:
            np.testing.assert_allclose(table.sum(axis=1), 1.0)
            ratio = table.max(axis=0) / table.min(axis=0)
            assert ratio.max() <= bound
            worst = max(worst, float(ratio.max()))
        assert worst >= math.exp(epsilon) * (1 - 1e-12)  # tight (key (1, 0) hashes all alike)
    # The whole report, for one value per leaf: same outputs, ratios within e^eps.
    values = leaf_edges(BOUNDS, resolution)[:-1] + 1e-9
    for a, b in OLH_KEYS:
        first, _ = m.output_probabilities(values[0], a=a, b=b)
        table = []
        for v in values:
            reports, probs = m.output_probabilities(v, a=a, b=b)
            np.testing.assert_array_equal(reports, first)
            table.append(probs)
        p = np.array(table)
        np.testing.assert_allclose(p.sum(axis=1), 1.0)
        assert (p.max(axis=0) / p.min(axis=0)).max() <= bound


def test_sampler_follows_the_exact_law() -> None:
    m = make(1.0, 64, 4)  # depth 1 GRR (4 nodes), depths 2 and 3 OLH
    assert m.depth_oracles() == {1: "grr", 2: "olh", 3: "olh"}
    rng = np.random.default_rng(11)
    value = 6.1
    n = 300_000
    reports = m.perturb(np.full(n, value), rng=rng)
    # The depth is uniform and independent of the value.
    depth_counts = np.bincount(reports["depth"], minlength=4)[1:]
    assert stats.chisquare(depth_counts).pvalue > 1e-4
    leaf = int(m.leaves_of([value])[0])
    for t, oracle in enumerate(m.oracles, start=1):
        chosen = reports[reports["depth"] == t]
        node = leaf // m.tree.sizes[t]
        if isinstance(oracle, GeneralizedRR):
            observed = np.bincount(chosen["y"], minlength=oracle.domain_size)
            expected = oracle.output_probabilities(node)[1] * chosen.size
            assert np.all(chosen["a"] == 0) and np.all(chosen["b"] == 0)
        else:
            assert isinstance(oracle, OptimizedLocalHashing)
            true = bucket(node, chosen["a"], chosen["b"], oracle.g)
            hit = chosen["y"].astype(np.uint64) == true
            observed = np.array([hit.sum(), (~hit).sum()])
            expected = np.array([oracle.p, 1 - oracle.p]) * chosen.size
        assert stats.chisquare(observed, expected).pvalue > 1e-4


# --- accuracy ----------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("population", ["smooth", "bounds"])
def test_answers_are_unbiased(epsilon: float, population: str) -> None:
    pop = smooth_population() if population == "smooth" else bounds_population()
    m = make(epsilon)
    n = 400_000
    rng = np.random.default_rng(int(epsilon * 10) + len(population))
    est = m.estimate(m.aggregate(m.perturb(pop.draw(rng, n), rng=rng)))
    theory = m.expected(n, pop.leaves(m))
    for a, b in [*RANGES, (0.0, 10.0 / 64), (10.0 * 63 / 64, 10.0)]:
        got, want = est.fraction(a, b), theory.fraction(a, b)
        assert abs(got.estimate - pop.fraction(a, b)) <= 4.5 * want.stderr, (a, b)
        assert got.stderr == pytest.approx(want.stderr, rel=0.1)
    mean, want_mean = est.mean(), theory.mean()
    assert abs(mean.mean - pop.mean) <= 4.5 * want_mean.stderr
    assert mean.stderr == pytest.approx(want_mean.stderr, rel=0.1)
    assert est.leaves.sum() == pytest.approx(1.0, abs=1e-12)


def check_coverage(covered: npt.NDArray[np.bool_], low: float, high: float) -> None:
    rates = covered.mean(axis=0)
    assert low <= rates.mean() <= high, rates
    assert rates.min() >= low - 0.02, rates


def test_variance_and_coverage_over_campaigns() -> None:
    pop = smooth_population()
    m = make(1.0)
    campaigns, users = 500, 1500
    result = run(m, pop, campaigns=campaigns, users=users, seed=21)
    theory = m.expected(users, pop.leaves(m))
    want = np.array([theory.fraction(a, b).stderr for a, b in RANGES]) ** 2
    ratio = result.estimates.var(axis=0, ddof=1) / want
    lo, hi = chi2_ratio_bounds(campaigns, alpha=1e-4 / len(RANGES))
    assert np.all((lo < ratio) & (ratio < hi)), ratio
    truths = np.array([pop.fraction(a, b) for a, b in RANGES])
    bias = result.estimates.mean(axis=0) - truths
    assert np.all(np.abs(bias) <= 4.5 * np.sqrt(want / campaigns)), bias
    check_coverage(result.covered, 0.93, 0.97)
    check_coverage(result.bins_covered, 0.93, 0.97)
    assert result.quantiles_covered.mean(axis=0).min() >= 0.93
    assert result.mean_covered.mean() >= 0.93
    # The mean's coverage is bounded from beneath only (its interval adds half a leaf for
    # the values' unknown places), so pin what it is made of: the spread of the mean
    # estimates is the theory's (fresh users each campaign: the population's estimand),
    # the reported standard error is that spread, and the interval is mean +- (z se +
    # half a leaf). A 30% wider interval passed the coverage checks.
    mean_se = theory.mean(estimand="population").stderr
    ratio = result.means.var(ddof=1) / mean_se**2
    lo, hi = chi2_ratio_bounds(campaigns)
    assert lo < ratio < hi, ratio
    assert np.mean(result.mean_stderrs) == pytest.approx(theory.mean().stderr, rel=0.1)
    np.testing.assert_allclose(result.mean_halves, 1.959963984540054 * result.mean_stderrs)


@pytest.mark.parametrize(
    ("name", "epsilon", "users"),
    [("spiky", 1.0, 2000), ("bounds", 2.0, 2000), ("small_n", 1.0, 200), ("high_eps", 4.0, 1000)],
)
def test_coverage_in_hard_regimes(name: str, epsilon: float, users: int) -> None:
    pop = {"spiky": spiky_population(), "bounds": bounds_population()}.get(
        name, smooth_population()
    )
    m = make(epsilon)
    result = run(m, pop, campaigns=300, users=users, seed=len(name) * 7 + users)
    # Ranges and bins: near 95% (intervals that are wholly inside [0, 1] may sit above).
    check_coverage(result.covered, 0.93, 0.985)
    check_coverage(result.bins_covered, 0.93, 0.985)
    assert result.quantiles_covered.mean(axis=0).min() >= 0.93
    assert result.mean_covered.mean() >= 0.93


@pytest.mark.parametrize("estimand", ["reporters", "population"])
def test_quantile_intervals_end_at_leaves_the_stated_level_keeps(estimand: str) -> None:
    """The quantile's coverage is bounded from beneath only, so pin its ends: the leaves
    at either end of the interval are ones the band at the stated level keeps (``P(X <
    start) - z se <= q <= P(X < end) + z se``, z Bonferroni over the tree's depths). A
    planted z over 20 times as many depths passed every distribution test; its wider
    ends are leaves this z rejects."""
    m = make(1.0)
    pop = smooth_population()
    rng = np.random.default_rng(41)
    users, campaigns = 1500, 100
    reports = m.perturb(pop.draw(rng, users * campaigns), rng=rng)
    z = stats.norm.isf(0.05 / 2 / m.tree.height)
    ends = 0
    for r in range(campaigns):
        est = m.estimate(m.aggregate(reports[r * users : (r + 1) * users]))
        cdf, band = est.edge_band(estimand)
        for q in (0.1, *QUANTILES):
            got = est.quantile(q, 0.95, estimand=estimand)
            j, k = np.searchsorted(est.edges, [got.low, got.high])
            assert est.edges[j] == got.low and est.edges[k] == got.high and j < k
            for a in (j, k - 1):  # the first leaf and the last
                assert cdf[a] - z * band[a] <= q <= cdf[a + 1] + z * band[a + 1], (r, q, a)
            ends += k - j > 1
    assert ends > campaigns  # the intervals span several leaves: two distinct ends checked


def test_a_range_that_cuts_a_leaf_is_widened_to_stay_honest() -> None:
    # All the mass of one leaf sits at its lower end; the range starts mid-leaf and so
    # holds none of it, while "uniform within the leaf" counts half of it.
    m = make(2.0)
    edges = leaf_edges(BOUNDS, 64)
    pop = Population(np.array([edges[20] + 1e-6, 8.0]), np.array([0.6, 0.4]))
    a, b = (edges[20] + edges[21]) / 2, 9.0
    truth = pop.fraction(a, b)  # 0.4
    rng = np.random.default_rng(5)
    users, campaigns = 4000, 200
    reports = m.perturb(pop.draw(rng, users * campaigns), rng=rng)
    covered, naive = [], []
    for r in range(campaigns):
        est = m.estimate(m.aggregate(reports[r * users : (r + 1) * users]))
        got = est.fraction(a, b)
        assert got.method == "score, widened to whole leaves"
        low, high = got.ci(estimand="population")  # the truth is the population's
        covered.append(low <= truth <= high)
        naive.append(abs(got.estimate - truth) <= 1.96 * got.stderr)
    assert np.mean(covered) >= 0.95
    assert np.mean(naive) < 0.5  # the bias (0.3) is many standard errors: Wald alone fails


# --- answers, shapes and errors ----------------------------------------------------------
def test_answers_and_their_json() -> None:
    m = make(1.0, 1024)
    rng = np.random.default_rng(8)
    est = m.estimate(m.aggregate(m.perturb(rng.uniform(0.0, 10.0, 50_000), rng=rng)))
    assert isinstance(est, DistributionEstimate)
    assert est.supported_bins == (4, 16, 64, 256, 1024)
    out = est.to_dict(bins=5, quantiles=[0.5, 0.9], range_=(2.0, 4.0))
    text = json.dumps(out, allow_nan=False)
    back = json.loads(text)
    assert back["n"] == 50_000 and back["mechanism"] == "hh" and len(back["items"]) == 5
    assert set(back["items"][0]) == {"lower", "upper", "estimate", "stderr", "low", "high"}
    assert [q["q"] for q in back["quantiles"]] == [0.5, 0.9]
    assert set(back["range"]) == {"lower", "upper", "estimate", "stderr", "low", "high"}
    assert back["mean_low"] < back["mean"] < back["mean_high"]
    for item in back["items"]:
        assert 0.0 <= item["low"] <= item["high"] <= 1.0
    q = est.quantile(0.5)
    assert q.low <= q.value <= q.high and q.high - q.low < 2.0
    assert est.cdf(0.0).estimate == 0.0 and est.cdf(0.0).stderr == 0.0
    assert est.cdf(10.0).estimate == pytest.approx(1.0) and est.cdf(10.0).stderr < 1e-7
    hist = est.histogram(edges=[0.0, 1.0, 2.5, 10.0])
    assert hist.estimates.sum() == pytest.approx(1.0)
    assert not hist.aligned  # 1.0 and 2.5 are not edges of 1024 leaves over [0, 10]
    assert est.histogram(16).aligned
    # Simultaneous intervals are wider.
    assert np.all(hist.ci(simultaneous=True).low <= hist.ci().low)


def test_no_reports_and_one_report() -> None:
    m = make()
    est = m.estimate(m.empty_aggregate())
    assert est.n == 0 and math.isnan(est.mean().mean)
    out = est.to_dict(quantiles=[0.5])
    json.dumps(out, allow_nan=False)
    assert out["items"][0]["estimate"] is None and out["quantiles"][0]["value"] is None
    report = m.perturb(3.0, rng=np.random.default_rng(1))
    assert report.dtype == REPORT_DTYPE and REPORT_DTYPE.itemsize == 21
    one = m.estimate(m.aggregate(report))
    assert one.n == 1 and one.leaves.sum() == pytest.approx(1.0)  # two depths unreported


def test_bad_reports_are_named() -> None:
    m = make(1.0, 64)  # depth 1 GRR over 4 nodes, depths 2-3 OLH
    good = m.perturb(np.linspace(0.0, 10.0, 6), rng=np.random.default_rng(2))
    bad = good.copy()
    bad["depth"][0] = 0
    bad["depth"][1] = 4
    bad[2] = (1, 0, 0, 4)  # GRR node out of range
    bad[3] = (1, 5, 0, 1)  # GRR report with a hash key
    bad[4] = (3, 7, 9, m.oracles[2].g)  # OLH bucket out of range
    assert m.check_reports(good).all()
    assert m.check_reports(bad).tolist() == [False] * 5 + [True]
    with pytest.raises(ldpkit.ReportError, match="report 0 is not a valid hh report"):
        m.aggregate(bad)
    with pytest.raises(ldpkit.ReportError, match="dtype"):
        m.aggregate(np.zeros(3, dtype=np.int64))


def test_bad_values_and_parameters() -> None:
    m = make()
    with pytest.raises(ldpkit.ReportError, match="index 1"):
        m.perturb([1.0, math.nan])
    with pytest.raises(ldpkit.ReportError, match="not a number"):
        m.perturb(["x"])
    assert np.array_equal(
        m.perturb([-5.0, 50.0], rng=np.random.default_rng(0)),
        m.perturb([0.0, 10.0], rng=np.random.default_rng(0)),
    )
    for kwargs, message in [
        ({"resolution": 1}, "resolution"),
        ({"resolution": 5000}, "resolution"),
        ({"resolution": 16, "branching": 1}, "branching"),
        ({"resolution": 16, "branching": 17}, "branching"),
        ({"resolution": 16.0}, "resolution must be an integer"),
    ]:
        with pytest.raises(ldpkit.ParameterError, match=message):
            ldpkit.mechanism("hh", epsilon=1.0, bounds=BOUNDS, **kwargs)
    est = m.estimate(m.aggregate(m.perturb(np.ones(100), rng=np.random.default_rng(0))))
    for call, message in [
        (lambda: est.fraction(3.0, 3.0), "lower < upper"),
        (lambda: est.fraction(11.0, 12.0), "does not overlap"),
        (lambda: est.fraction(math.nan, 1.0), "finite"),
        (lambda: est.quantile(1.0), r"q must be in \(0, 1\)"),
        (lambda: est.histogram(0), "bins"),
        (lambda: est.histogram(edges=[1.0, 1.0]), "increase strictly"),
        (lambda: est.histogram(edges=[-1.0, 1.0]), "within the bounds"),
        (lambda: est.histogram(edges=["a", 1.0]), "edge"),
        (lambda: est.to_dict(range_=(1.0,)), "pair"),
        (lambda: m.estimate(ldpkit.Aggregate.zeros(3)), "sums"),
    ]:
        with pytest.raises(ldpkit.ParameterError, match=message):
            call()
    tampered = m.aggregate(m.perturb(np.ones(10), rng=np.random.default_rng(0)))
    tampered = ldpkit.Aggregate(11, tampered.sums)
    with pytest.raises(ldpkit.ParameterError, match="add up"):
        m.estimate(tampered)


def test_auto_and_names() -> None:
    m = ldpkit.mechanism("auto", epsilon=1.0, bounds=BOUNDS, resolution=256)
    assert m.name == "hh" and m.kind == "distribution"
    assert ldpkit.mechanism("hierarchical", epsilon=1.0, bounds=BOUNDS).name == "hh"
    choice = ldpkit.choose(epsilon=1.0, bounds=BOUNDS, resolution=256)
    assert choice.name == "hh" and choice.variances["hh"] > 0
    assert m.params() == {
        "mechanism": "hh",
        "epsilon": 1.0,
        "bounds": [0.0, 10.0],
        "resolution": 256,
        "branching": 4,
    }
    # Aggregates merge by addition and stay the size of the tree.
    rng = np.random.default_rng(0)
    a = m.aggregate(m.perturb(rng.uniform(0, 10, 1000), rng=rng))
    b = m.aggregate(m.perturb(rng.uniform(0, 10, 3000), rng=rng))
    assert (a + b).n == 4000 and (a + b).sums.size == m.stats_size == 4 + 4 + 16 + 64 + 256


def test_audit_of_the_whole_report() -> None:
    # The audit's events are (depth, supports x's node, supports x''s node): its lower
    # bound on epsilon comes close to the claim and stays under it; a mechanism that
    # perturbs with 1.5 epsilon while claiming epsilon is caught.
    m = make(1.0, 64)
    result = audit(m, samples=100_000, rng=np.random.default_rng(41))
    assert result.passed and result.epsilon_lower_bound >= 0.85
    assert "depth" in (result.event or "")
    broken = audit(mislabelled(m, 1.5), samples=100_000, rng=np.random.default_rng(42))
    assert not broken.passed
