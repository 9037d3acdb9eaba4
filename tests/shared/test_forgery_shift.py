"""The residual (issue 26): ``forgery_shift(beta)`` bounds what forged reports that pass do.

Brute force on small domains: every report the mechanism accepts (or, for local hashing,
every extreme one and a sample of the rest), each forged by a fraction beta of the reports
(alone, or two of them spread over the views), against honest populations at every single
value and spread out; the estimate's change, computed from the exact expected aggregate, never
exceeds the disclosed shift, and reaches it (within float rounding) where the bound is tight:
frequency oracles and means.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ldpkit.aggregate import Aggregate
from ldpkit.domains import Table, Tree
from ldpkit.mechanisms import mechanism
from ldpkit.mechanisms.piecewise import HALF_CELLS

N = 3e6
"""Reports in every aggregate (forged ones included): expected counts, not draws."""
BETAS = (0.01, 0.2)
TOL = 1e-9


def _forge(
    honest: npt.NDArray[Any], forged: npt.NDArray[Any], beta: float, whole: int = 0
) -> Aggregate:
    """The aggregate of N reports: ``1 - beta`` honest ones with the expected sums per report
    ``honest``, and ``beta`` forged ones with the mean sums ``forged`` (the first ``whole``
    sums, reports per part, rounded to whole numbers)."""
    sums = (1.0 - beta) * N * honest + beta * N * forged
    sums[:whole] = np.round(sums[:whole])
    return Aggregate(round(N), sums)


def _law(m: Any, values: list[Any], **keys: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """(sums of every distinct report of the values, (values, reports) probabilities)."""
    laws = [m.output_probabilities(v, **keys) for v in values]
    index: dict[bytes, int] = {}
    rows: list[npt.NDArray[Any]] = []
    for records, _ in laws:
        for r in records:
            if r.tobytes() not in index:
                index[r.tobytes()] = len(rows)
                rows.append(m.aggregate(np.asarray(r)[None]).sums)
    probs = np.zeros((len(values), len(rows)))
    for i, (records, p) in enumerate(laws):
        for r, pr in zip(records, p, strict=True):
            probs[i, index[r.tobytes()]] += pr
    return np.array(rows), probs


def _populations(size: int) -> npt.NDArray[np.float64]:
    """Every point mass, and the uniform population."""
    return np.vstack([np.eye(size), np.full((1, size), 1.0 / size)])


# --- frequency oracles --------------------------------------------------------------------


def _oracle_reports(m: Any) -> npt.NDArray[Any]:
    """Support vectors of every report the oracle accepts (local hashing: every bucket of
    the keys with a = 0, which hash every item into one bucket, and of 300 random keys)."""
    d = m.domain_size
    if m.name != "olh":
        return _law(m, list(range(d)))[0]
    rng = np.random.default_rng(1)
    keys = np.vstack([[[0, 0], [0, 2**63]], rng.integers(0, 2**63, (300, 2))])
    out = []
    for a, b in keys:
        records, _ = m.output_probabilities(0, a=int(a), b=int(b))
        out.append(np.array([[m.supports(v, r[None])[0] for v in range(d)] for r in records]))
    return np.vstack(out).astype(np.float64)


ORACLES = [
    (n, e, d) for n in ("grr", "sue", "oue", "ss", "hr", "olh") for e in (0.5, 2.0) for d in (3, 8)
]


@pytest.mark.parametrize(("name", "epsilon", "d"), [*ORACLES, ("rr", 1.0, 2)])
def test_frequency_oracle_shift_is_the_worst_case(name: str, epsilon: float, d: int) -> None:
    m = mechanism(name, epsilon=epsilon, domain_size=d)
    forged = _oracle_reports(m)
    assert forged.shape[0] >= d
    for beta in BETAS:
        disclosed = m.estimate(m.empty_aggregate()).forgery_shift(beta)
        worst = 0.0
        for f in _populations(d):
            honest = m.q + (m.p - m.q) * f  # each item's expected support per honest report
            for x in forged:
                change = m.estimate(_forge(honest, x, beta)).frequencies - f
                assert bool(np.all(np.abs(change) <= disclosed + TOL)), (f, x, change, disclosed)
                worst = max(worst, float(np.max(np.abs(change))))
        assert worst == pytest.approx(float(disclosed[0]), rel=1e-6)


# --- means --------------------------------------------------------------------------------

BOUNDS = (-3.0, 5.0)


def _ends(m: Any) -> list[int]:
    """The smallest and largest report a numeric mechanism accepts."""
    if m.name == "duchi":
        return [-1, 1]
    if m.name == "piecewise":
        return [-HALF_CELLS, HALF_CELLS]
    if m.name == "hybrid":
        top = m.bound if m.alpha > 0 else m.duchi_index
        return [-top, top]
    return [-m.noise_cap, m.grid_steps + m.noise_cap]


NUMERIC = [
    ("duchi", {}),
    ("piecewise", {}),
    ("hybrid", {}),
    ("hybrid", {"epsilon": 0.5}),
    ("laplace", {}),
    ("gaussian", {"delta": 1e-5}),
]


@pytest.mark.parametrize(("name", "options"), NUMERIC, ids=[f"{n}{o}" for n, o in NUMERIC])
def test_mean_shift_is_the_worst_case(name: str, options: dict[str, Any]) -> None:
    m = mechanism(name, **{"epsilon": 1.5, "bounds": BOUNDS, **options})
    ends = _ends(m)
    assert bool(np.all(m.check_reports(np.array(ends, dtype=m.report_dtype))))
    for beta in BETAS:
        disclosed = m.estimate(m.empty_aggregate()).forgery_shift(beta)
        worst = 0.0
        for value, end in itertools.product(BOUNDS, ends):
            t = m.to_unit(np.array([value]))[0]  # honest reports' debiased mean, exactly
            y = float(m.aggregate(np.array([end], dtype=m.report_dtype)).sums[0])
            honest, forged = np.array([t, t * t]), np.array([y, y * y])
            change = m.estimate(_forge(honest, forged, beta)).mean - value
            assert abs(change) <= disclosed * (1 + 1e-12)
            worst = max(worst, abs(change))
        assert worst == pytest.approx(disclosed, rel=1e-9)


# --- structured: trees and tables -----------------------------------------------------------

LEAVES = ("A/a", "A/b", "A/c", "B/d", "C")
CARS = {"type": ["Compact", "Large", "Van"], "origin": ["USA", "non-USA"]}
STRUCTURED = [
    ("rollup", {"tree": Tree(LEAVES), "oracle": "grr"}),
    ("rollup", {"tree": Tree(LEAVES), "oracle": "oue"}),
    ("rollup", {"tree": Tree(LEAVES), "oracle": "ss"}),
    ("levels", {"tree": Tree(LEAVES)}),
    ("levels", {"tree": Tree(LEAVES), "oracle": "sue", "weights": (0.2, 0.8)}),
    ("joint", {"table": Table(CARS), "oracle": "sue"}),
    ("joint_marginals", {"table": Table(CARS)}),
    ("joint_marginals", {"table": Table(CARS), "oracle": "ss", "weights": (0.6, 0.3, 0.1)}),
    ("split", {"table": Table(CARS), "oracle": "oue"}),
]


def _groups(estimate: Any) -> list[Any]:
    """Every group of a structured estimate: a tree's depths, or a table's cells and marginals."""
    if hasattr(estimate, "levels"):
        return list(estimate.levels)
    cells = [] if estimate.cells is None else [estimate.cells]
    return cells + list(estimate.marginals.values())


@pytest.mark.parametrize(
    ("name", "options"), STRUCTURED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(STRUCTURED)]
)
def test_structured_shift_bounds_every_forgery(name: str, options: dict[str, Any]) -> None:
    m = mechanism(name, epsilon=1.0, **options)
    size = m.tree.size if hasattr(m, "tree") else m.table.size
    sums, probs = _law(m, list(range(size)))
    rng = np.random.default_rng(3)
    pairs = rng.integers(0, sums.shape[0], (60, 2))  # two reports, spread at random
    mixed = [
        (sums[i] * w + sums[j] * (1 - w)) for (i, j), w in zip(pairs, rng.random(60), strict=True)
    ]
    candidates = [*sums, *mixed]
    for beta in BETAS:
        disclosed = np.concatenate(
            [g.forgery_shift(beta) for g in _groups(m.estimate(m.empty_aggregate()))]
        )
        worst = np.zeros_like(disclosed)
        for pi in _populations(size):
            honest = pi @ probs @ sums
            truth = _outputs(m.estimate(_forge(honest, honest, 0.0)))
            for forged in candidates:
                change = np.abs(_outputs(m.estimate(_forge(honest, forged, beta))) - truth)
                assert bool(np.all(change <= disclosed + TOL)), (pi, change - disclosed)
                worst = np.maximum(worst, change)
        if beta == BETAS[0]:  # tight: one report, all at the weakest view, nearly reaches it
            assert bool(np.all(worst >= 0.97 * disclosed)), worst / disclosed


def _outputs(estimate: Any) -> npt.NDArray[np.float64]:
    return np.concatenate([g.frequencies for g in _groups(estimate)])


# --- distributions --------------------------------------------------------------------------

LEAF_VALUES = [0.5 + i for i in range(8)]  # the middles of the leaves of [0, 8]


def _answers(estimate: Any, beta: float | None) -> dict[str, npt.NDArray[np.float64]]:
    """A distribution's answers (beta None), or their disclosed shifts."""
    hist = estimate.histogram(edges=[0, 1, 2.5, 4, 8])
    ranges = estimate.fractions([(0.3, 5.2), (2.0, 3.0)])
    cdf = estimate.cdf([1.0, 3.7, 6.0])
    mean, quantiles = estimate.mean(), estimate.quantiles([0.2, 0.5, 0.9])
    if beta is None:
        items = [hist.estimates, [r.estimate for r in (*ranges, *cdf)], [mean.mean]]
        return {
            "numbers": np.concatenate(items),
            "quantiles": np.array([q.value for q in quantiles]),
        }
    items = [hist.forgery_shift(beta), [r.forgery_shift(beta) for r in (*ranges, *cdf)]]
    shifts = np.concatenate([*items, [mean.forgery_shift(beta)]])
    return {"numbers": shifts, "quantiles": np.array([q.forgery_shift(beta) for q in quantiles])}


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_distribution_shift_bounds_every_forgery(epsilon: float) -> None:
    m = mechanism("hh", epsilon=epsilon, bounds=(0.0, 8.0), resolution=8, branching=2)
    assert set(m.depth_oracles().values()) == {"grr"}  # every report is enumerable
    sums, probs = _law(m, LEAF_VALUES, a=0, b=0)
    for beta in BETAS:
        ratio = np.zeros(10)
        for pi in _populations(8):
            honest = pi @ probs @ sums
            truth = _answers(m.estimate(_forge(honest, honest, 0.0, m.height)), None)
            for forged in sums:
                estimate = m.estimate(_forge(honest, forged, beta, m.height))
                seen, disclosed = _answers(estimate, None), _answers(estimate, beta)
                for key in seen:
                    change = np.abs(seen[key] - truth[key])
                    assert bool(np.all(change <= disclosed[key] + TOL)), key
                ratio = np.maximum(ratio, _change_ratio(seen, truth, disclosed))
        if beta == BETAS[0]:  # the numbers' bound is nearly reached; a quantile's is looser
            assert bool(np.all(ratio >= 0.97)), ratio


def _change_ratio(
    seen: dict[str, Any], truth: dict[str, Any], disclosed: dict[str, Any]
) -> npt.NDArray[np.float64]:
    return np.asarray(np.abs(seen["numbers"] - truth["numbers"]) / disclosed["numbers"])


# --- strings ----------------------------------------------------------------------------------


def test_string_shift_bounds_forgeries_on_the_estimation_sketch() -> None:
    """Forged reports on a string's cells in the estimation sketch (its bucket in every row, in
    turn), or on none of them, against populations holding it, other strings, or a mix."""
    m = mechanism("prefix_sketch", epsilon=2.0, max_length=4)
    strings = ["ab", "abc", "x", "zz"]
    laws = np.array([m.output_probabilities(s) for s in strings])  # (strings, cells)
    rows = m.sketch_slice(0)
    target = m.true_buckets("ab")[: m.estimation_rows]
    on = np.zeros(m.stats_size)
    on[rows.start + np.arange(m.estimation_rows) * m.g + target] = 1.0 / m.estimation_rows
    off = np.zeros(m.stats_size)
    off[rows.start + np.arange(m.estimation_rows) * m.g + (target + 1) % m.g] = (
        1.0 / m.estimation_rows
    )
    for beta in (0.001, 0.01):
        for f in ([1, 0, 0, 0], [0, 0.5, 0.5, 0], [0.3, 0.3, 0.2, 0.2]):
            honest = np.asarray(f) @ laws
            before = m.estimate(_forge(honest, honest, 0.0)).query(["ab"])[0].estimate
            for forged in (on, off):
                answer = m.estimate(_forge(honest, forged, beta))
                change = answer.query(["ab"])[0].estimate - before
                assert abs(change) <= answer.forgery_shift(beta), (f, beta, change)
