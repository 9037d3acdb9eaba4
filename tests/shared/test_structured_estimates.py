"""Statistics of hierarchies and tables, against theory (fixed seeds).

The populations are the product design's seeds: the hierarchy country 1,000 -> states
300, 400, 300 -> municipalities 100, 200, 150, 250, 200, 100, and the Cars93 table
type x origin (Compact 7/9, Large 11/0, Midsize 10/12, Small 7/14, Sporty 8/6, Van 5/4),
scaled. The estimand is the fraction among the users who reported, so each campaign
re-perturbs the same population. Tolerances come from the covariance formula
(:mod:`ldpkit.inference`): mean errors within a few standard errors, empirical variances
within chi-square bounds of the formula, 95% intervals covering at least 93% at every
node and cell, including a zero cell (Large/non-USA), few users and epsilon 8.
Slower grids are in benchmarks/structured.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import ldpkit
from ldpkit.domains import Table, Tree
from ldpkit.estimates import norm_sub
from ldpkit.inference import (
    LinearViews,
    Quadratic,
    grouped_norm_sub,
    ipf,
    score_interval,
    tree_consistent,
)
from ldpkit.mechanisms import mechanism
from ldpkit.mechanisms._views import noise_model
from tests.stats import chi2_ratio_bounds

SEED_LEAVES = (
    "MX/Jalisco/Guadalajara",
    "MX/Jalisco/Zapopan",
    "MX/Sonora/Hermosillo",
    "MX/Sonora/Obregon",
    "MX/Yucatan/Merida",
    "MX/Yucatan/Valladolid",
)
SEED_COUNTS = np.array([100, 200, 150, 250, 200, 100])
CARS = {
    "type": ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"],
    "origin": ["USA", "non-USA"],
}
CARS_COUNTS = np.array([[7, 9], [11, 0], [10, 12], [7, 14], [8, 6], [5, 4]]).reshape(-1)
ZERO_CELL = 3  # Large / non-USA
VIOLATION = 1e-9


def truth_of(m: Any, counts: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Every output's true fraction (the engine's output order)."""
    pi = (counts / counts.sum()).astype(np.float64)
    return np.asarray(m.engine.sum_outputs(pi[None, :])[0])


def flat(est: Any) -> list[ldpkit.GroupEstimate]:
    if isinstance(est, ldpkit.HierarchyEstimate):
        return list(est.levels)
    return [est.cells, *est.marginals.values()]


@dataclass
class Runs:
    errors: npt.NDArray[np.float64]
    formula: npt.NDArray[np.float64]
    covered: npt.NDArray[np.bool_]
    worst_violation: float


def campaigns(m: Any, counts: npt.NDArray[np.int64], runs: int, seed: int) -> Runs:
    """``runs`` campaigns over the same population, perturbed in one vectorized call and
    estimated together (``estimate_arrays``, the computation behind ``estimate``)."""
    values = np.repeat(np.arange(counts.size), counts)
    n = values.size
    reports = m.perturb(np.tile(values, runs), rng=np.random.default_rng(seed))
    sums = np.array([m.aggregate(reports[r * n : (r + 1) * n]).sums for r in range(runs)])
    arrays = m.estimate_arrays(np.full(runs, n), sums)
    truth = truth_of(m, counts)
    low, high = arrays.ci(0.95)
    sizes, _ = m.engine.split(sums)
    pi = np.tile(counts / n, (runs, 1))
    formula = m.engine.variances_at(pi, sizes, np.full(runs, float(n)))
    # Exact consistency, row by row, through the result objects of a few campaigns.
    worst = 0.0
    for r in range(0, runs, max(1, runs // 20)):
        est = m.estimate(ldpkit.Aggregate(n, sums[r]))
        worst = max(worst, est.max_violation(), est.max_violation(consistent=True))
        for g in flat(est):
            assert np.all(g.consistent() >= 0)
    assert np.all((low >= 0) & (high <= 1))
    return Runs(arrays.estimates - truth, formula, (low <= truth) & (truth <= high), worst)


def seed_tree_design(name: str, **options: Any) -> Any:
    return mechanism(name, tree=Tree(SEED_LEAVES), **options)


def cars_design(name: str, **options: Any) -> Any:
    return mechanism(name, table=Table(CARS), **options)


@pytest.mark.parametrize(
    ("build", "name", "options"),
    [
        (seed_tree_design, "rollup", {"oracle": "grr", "epsilon": 1.0}),
        (seed_tree_design, "rollup", {"oracle": "oue", "epsilon": 1.0}),
        (seed_tree_design, "levels", {"epsilon": 0.5}),
        # High epsilon: the variance of sampling each level's users dominates the noise.
        (seed_tree_design, "levels", {"epsilon": 4.0}),
        (cars_design, "joint", {"epsilon": 1.0}),
        (cars_design, "joint_marginals", {"epsilon": 2.0}),
        (cars_design, "joint_marginals", {"epsilon": 6.0}),
    ],
)
def test_variance_matches_the_formula_and_intervals_cover(
    build: Any, name: str, options: dict[str, Any]
) -> None:
    m = build(name, **options)
    counts = SEED_COUNTS * 2 if hasattr(m, "tree") else CARS_COUNTS * 20
    runs = 1000
    result = campaigns(m, counts, runs, seed=23)
    live = result.formula.mean(axis=0) > 0  # the top node (everyone) is known exactly
    assert np.all(np.abs(result.errors[:, ~live]) < 1e-12)
    errors = result.errors[:, live]
    formula = result.formula[:, live]
    # Unbiased: each mean error within 5 standard errors of zero.
    assert np.all(np.abs(errors.mean(axis=0)) < 5 * np.sqrt(formula.mean(axis=0) / runs))
    # Variance: empirical against the formula at the campaign's own view sizes.
    lo, hi = chi2_ratio_bounds(runs, alpha=1e-4 / live.sum())
    ratio = (errors**2).mean(axis=0) / formula.mean(axis=0)
    assert np.all((ratio > lo) & (ratio < hi)), ratio
    coverage = result.covered[:, live].mean(axis=0)
    assert np.all(coverage >= 0.93), coverage
    assert coverage.mean() <= 0.975, coverage
    assert result.worst_violation <= VIOLATION


@pytest.mark.parametrize(
    ("build", "name", "epsilon", "counts"),
    [
        # Few users and high epsilon: the estimate lives on a coarse lattice.
        (cars_design, "joint", 8.0, CARS_COUNTS),
        (cars_design, "joint_marginals", 8.0, CARS_COUNTS),
        (cars_design, "joint", 4.0, CARS_COUNTS),
        (cars_design, "joint", 0.5, CARS_COUNTS),
        (seed_tree_design, "rollup", 8.0, SEED_COUNTS // 5),
        (seed_tree_design, "levels", 8.0, SEED_COUNTS // 5),
        (seed_tree_design, "levels", 4.0, SEED_COUNTS // 5),
    ],
)
def test_intervals_hold_where_they_are_hardest(
    build: Any, name: str, epsilon: float, counts: npt.NDArray[np.int64]
) -> None:
    m = build(name, epsilon=epsilon)
    result = campaigns(m, counts, 1000, seed=31)
    coverage = result.covered.mean(axis=0)
    # Every cell, the empty one (ZERO_CELL, Large / non-USA: nobody) included.
    assert np.all(coverage >= 0.93), coverage
    assert result.worst_violation <= VIOLATION


@pytest.mark.parametrize("name", ["rollup", "levels"])
def test_seed_hierarchy_truth_beside_estimate(name: str) -> None:
    m = ldpkit.hierarchy(SEED_LEAVES, epsilon=1.0, mechanism=name)
    counts = SEED_COUNTS * 100
    values = np.repeat(np.arange(6), counts)
    est = m.estimate(m.aggregate(m.perturb(values, rng=np.random.default_rng(3))))
    truth = np.split(truth_of(m, counts), np.cumsum([m.tree.width(d) for d in (1, 2)]))
    for d in (1, 2, 3):
        level = est.level(d)
        assert level.keys == m.tree.paths[d - 1]
        np.testing.assert_array_less(
            np.abs(level.frequencies - truth[d - 1]), 4.5 * level.stderr + 1e-12
        )
        low, high = level.ci()
        assert np.all((low <= level.frequencies + 1e-12) & (level.frequencies <= high + 1e-12))
    assert est.level(1).frequencies[0] == pytest.approx(1.0, abs=1e-12)
    assert est.level(1).stderr[0] == 0.0
    assert est.max_violation() <= VIOLATION and est.max_violation(consistent=True) <= VIOLATION
    sonora = est.subtree("MX/Sonora")
    assert sonora.keys == ("MX/Sonora/Hermosillo", "MX/Sonora/Obregon")
    assert sonora.frequencies.sum() == pytest.approx(est.node("MX/Sonora").frequencies[0])


def test_cars93_truth_beside_estimate() -> None:
    m = ldpkit.table(CARS, epsilon=1.0)
    counts = CARS_COUNTS * 100
    values = np.repeat(np.arange(12), counts)
    est = m.estimate(m.aggregate(m.perturb(values, rng=np.random.default_rng(4))))
    truth = truth_of(m, counts)
    x = np.concatenate([g.frequencies for g in flat(est)])
    se = np.concatenate([g.stderr for g in flat(est)])
    np.testing.assert_array_less(np.abs(x - truth), 4.5 * se)
    assert est.cells is not None
    grid = est.grid()
    np.testing.assert_allclose(grid.sum(axis=1), est.marginal("type").frequencies, atol=1e-12)
    np.testing.assert_allclose(grid.sum(axis=0), est.marginal("origin").frequencies, atol=1e-12)
    consistent = est.grid(consistent=True)
    assert np.all(consistent >= 0) and consistent.sum() == pytest.approx(1.0, abs=1e-12)
    assert est.max_violation(consistent=True) <= VIOLATION


def _onto_simplex(v: npt.NDArray[np.float64], total: float) -> npt.NDArray[np.float64]:
    """Norm-Sub by its definition, written out here: ``max(v - d, 0)`` with the one ``d``
    that makes it sum to ``total`` (the Euclidean projection onto that simplex)."""
    if total <= 0:
        return np.zeros_like(v)
    top = np.sort(v)[::-1]
    shifts = (np.cumsum(top) - total) / np.arange(1, v.size + 1)
    kept = int(np.flatnonzero(top - shifts > 0)[-1])
    return np.asarray(np.maximum(v - shifts[kept], 0.0))


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (seed_tree_design, "rollup"),
        (seed_tree_design, "levels"),
        (cars_design, "joint"),
        (cars_design, "joint_marginals"),
        (cars_design, "split"),
    ],
)
def test_consistent_estimates_are_the_documented_projections(build: Any, name: str) -> None:
    """A hierarchy's consistent depths are Norm-Sub from the top down (the top level onto
    the simplex, each group of siblings onto its parent's consistent value); a table's
    consistent marginals are its unbiased marginals under Norm-Sub, to IPF's tolerance.
    Consistency was checked as adding up and non-negative only, which other reconciliations
    also are: a planted IPF of one pass (max_iterations=1: the type marginal 0.004-0.015
    off its Norm-Sub), and a planted bottom-up hierarchy (leaves by Norm-Sub, parents their
    sums), each passed every structured test."""
    m = build(name, epsilon=1.0)
    counts = SEED_COUNTS // 5 if hasattr(m, "tree") else CARS_COUNTS * 5
    values = np.repeat(np.arange(counts.size), counts)
    moved = 0.0
    for seed in range(5):
        est = m.estimate(m.aggregate(m.perturb(values, rng=np.random.default_rng(seed))))
        if isinstance(est, ldpkit.HierarchyEstimate):
            above = np.array([1.0])
            for d, group in enumerate(est.levels):
                parents = m.tree.parents[d]
                want = np.zeros(len(group))
                for p in range(above.size):
                    sel = parents == p
                    want[sel] = _onto_simplex(group.frequencies[sel], float(above[p]))
                np.testing.assert_allclose(group.consistent(), want, atol=1e-12)
                moved = max(moved, float(np.max(np.abs(want - group.frequencies))))
                above = want
        else:
            for group in est.marginals.values():
                want = _onto_simplex(group.frequencies, 1.0)
                np.testing.assert_allclose(group.consistent(), want, atol=1e-9)
                moved = max(moved, float(np.max(np.abs(want - group.frequencies))))
    assert moved > 1e-3  # Norm-Sub moved something: the projections were put to the test


def test_split_estimates_marginals_only() -> None:
    m = mechanism("split", epsilon=1.0, table=Table(CARS))
    counts = CARS_COUNTS * 100
    values = np.repeat(np.arange(12), counts)
    est = m.estimate(m.aggregate(m.perturb(values, rng=np.random.default_rng(5))))
    assert est.cells is None
    with pytest.raises(ldpkit.ParameterError, match="marginals only"):
        est.grid()
    origin = est.marginal("origin")
    truth = np.array([48, 45]) / 93
    np.testing.assert_array_less(np.abs(origin.frequencies - truth), 4.5 * origin.stderr)
    assert json.loads(json.dumps(est.to_dict()))["items"] == []


@pytest.mark.parametrize("name", ["rollup", "levels"])
def test_nothing_to_estimate_gives_nan_not_a_guess(name: str) -> None:
    m = ldpkit.hierarchy(SEED_LEAVES, epsilon=1.0, mechanism=name)
    est = m.estimate(m.empty_aggregate())
    assert est.n == 0 and np.all(np.isnan(est.level().frequencies))
    answer = est.to_dict(consistent=True)
    assert answer["items"][0]["estimate"] is None and answer["items"][0]["low"] is None
    json.dumps(answer)  # no NaN reaches JSON
    one = m.estimate(m.aggregate(m.perturb(np.array([2]), rng=np.random.default_rng(0))))
    if name == "levels":  # one report cannot reach every view
        assert np.all(np.isnan(one.level().frequencies))
    else:
        low, high = one.level().ci()
        assert np.all((low >= 0) & (high <= 1))


def test_largest_epsilon_stays_finite() -> None:
    for m in (
        ldpkit.hierarchy(SEED_LEAVES, epsilon=50.0, mechanism="levels"),
        ldpkit.table(CARS, epsilon=50.0),
    ):
        size = m.base_size
        est = m.estimate(m.aggregate(m.perturb(np.arange(size).repeat(10))))
        for g in flat(est):
            assert np.all(np.isfinite(g.frequencies)) and np.all(np.isfinite(g.stderr))
        assert est.max_violation() <= VIOLATION


def test_json_shapes_of_the_interface() -> None:
    m = ldpkit.table(CARS, epsilon=1.0)
    est = m.estimate(m.aggregate(m.perturb(np.arange(12).repeat(50), rng=np.random.default_rng(1))))
    answer = json.loads(json.dumps(est.to_dict(level=0.9, consistent=True)))
    assert answer["items"][10]["cell"] == {"type": "Van", "origin": "USA"}
    assert set(answer["items"][0]) == {"cell", "estimate", "stderr", "low", "high", "consistent"}
    assert [i["category"] for i in answer["marginals"]["origin"]] == ["USA", "non-USA"]
    assert answer["interval"] == "score_cc"
    h = ldpkit.hierarchy(SEED_LEAVES, epsilon=1.0)
    hest = h.estimate(h.aggregate(h.perturb(np.arange(6).repeat(50))))
    answer = json.loads(json.dumps(hest.to_dict(depth=2)))
    assert [i["category"] for i in answer["items"]] == ["MX/Jalisco", "MX/Sonora", "MX/Yucatan"]
    assert set(answer["items"][0]) == {"category", "estimate", "stderr", "low", "high"}


# --- the engine's pieces --------------------------------------------------------------
def test_single_view_closed_form_equals_the_dense_path() -> None:
    tree = Tree(SEED_LEAVES)
    for name in ("grr", "oue", "ss"):
        oracle = mechanism(name, epsilon=1.0, domain_size=6)
        args = (6, [tree.labels[2]], [1.0], [noise_model(oracle)], list(tree.labels))  # type: ignore[arg-type]
        closed, dense = LinearViews(*args), LinearViews(*args)
        dense.single = False
        y = np.random.default_rng(0).normal(size=(3, 6)) / 6 + 1 / 6
        np.testing.assert_allclose(closed.point(y), dense.point(y), atol=1e-12)
        pi = np.tile(SEED_COUNTS / SEED_COUNTS.sum(), (3, 1))
        sizes, n = np.array([[1000.0], [50.0], [3.0]]), np.array([1000.0, 50.0, 3.0])
        a = closed.variance_quadratic(pi, sizes, n)
        b = dense.variance_quadratic(pi, sizes, n)
        for part in ("v0", "v1", "v2", "correction"):
            np.testing.assert_allclose(getattr(a, part), getattr(b, part), atol=1e-12)


def test_variance_along_the_path_passes_through_the_population() -> None:
    m = seed_tree_design("levels", epsilon=1.0)
    pi = (SEED_COUNTS / SEED_COUNTS.sum())[None, :]
    sizes, n = m.expected_sizes(5000), np.array([5000.0])
    quad = m.engine.variance_quadratic(pi, sizes, n)
    theta = m.engine.sum_outputs(pi)
    np.testing.assert_allclose(quad.at(theta), m.engine.variances_at(pi, sizes, n), rtol=1e-9)


def test_score_interval_edges() -> None:
    est = np.array([0.3, -0.2, 1.3, 0.0, np.nan])
    quad = Quadratic(
        np.full(5, 1e-4), np.zeros(5), np.zeros(5), np.array([0.0, 0.0, 0.0, 0.01, 0.0])
    )
    low, high = score_interval(est, quad, 1.96)
    assert low[0] < 0.3 < high[0]
    assert (low[1], high[1]) == (0.0, 0.0)  # far below every possible value
    assert (low[2], high[2]) == (1.0, 1.0)
    assert low[3] == 0.0 and high[3] > 0.01
    assert np.isnan(low[4]) and np.isnan(high[4])
    wide = score_interval(np.array([0.5]), Quadratic(*(np.array([1.0]),) * 3), 1.96)
    assert (wide[0][0], wide[1][0]) == (0.0, 1.0)  # too few reports to bound anything


def test_grouped_norm_sub_is_norm_sub_per_group() -> None:
    rng = np.random.default_rng(9)
    values = rng.normal(0.1, 0.2, size=40)
    groups = rng.integers(0, 5, size=40)
    targets = np.array([0.4, 0.0, 0.3, 0.2, 0.1])
    out = grouped_norm_sub(values, groups, targets)
    assert np.all(out >= 0)
    np.testing.assert_allclose(np.bincount(groups, weights=out), targets, atol=1e-15)
    for g in range(5):
        if targets[g] > 0:
            sel = groups == g
            np.testing.assert_allclose(
                out[sel], norm_sub(values[sel] / targets[g]) * targets[g], atol=1e-12
            )
    levels = tree_consistent(
        [np.array([0.7, 0.35]), np.array([0.5, 0.3, -0.1])],
        [
            np.array([0, 0]),
            np.array([0, 0, 1]),
        ],
    )
    assert levels[0].sum() == 1.0 and levels[1][2] == levels[0][1]


def test_ipf_fits_the_margins() -> None:
    table = Table(CARS)
    rng = np.random.default_rng(2)
    seed = rng.uniform(0.01, 0.2, size=12)
    seed[ZERO_CELL] = 1e-9
    targets = [
        np.array([0.17, 0.1, 0.24, 0.22, 0.15, 0.12]),
        np.array([0.52, 0.48]),
    ]
    cells = ipf(seed, [table.labels("type"), table.labels("origin")], targets)
    for name, t in zip(table.names, targets, strict=True):
        np.testing.assert_allclose(np.bincount(table.labels(name), weights=cells), t, atol=1e-10)
    assert np.all(cells > 0) and cells[ZERO_CELL] < 1e-6
