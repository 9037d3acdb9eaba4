"""Exact privacy and report format of the structured (hierarchy and table) mechanisms.

- The item covariance that every roll-up relies on (``noise_model``: r1, r0) is checked
  exactly against each oracle's full output distribution.
- Every report is epsilon-LDP: for small designs every possible record (view, payload)
  is listed with its exact probability and the largest ratio between any two inputs
  is at most e^eps (and reaches it).
- The real sampler draws from that exact law (chi-square, fixed seeds).
- Malformed records are refused one by one; aggregates merge by addition and have a size
  that does not depend on n.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit.domains import Table, Tree
from ldpkit.mechanisms import mechanism
from ldpkit.mechanisms._views import noise_model

ALPHA = 1e-4
SEED_LEAVES = ("MX/J/G", "MX/J/Z", "MX/S/H", "MX/S/O", "MX/Y/M", "MX/Y/V")
MIXED_LEAVES = ("MX/CDMX", "MX/J/Z", "MX/J/G", "US")
SMALL_TABLE = {"type": ["a", "b", "c"], "origin": ["x", "y"]}


def supports(name: str, d: int, reports: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """(outputs, d): which items each listed report supports."""
    if name == "grr":
        return np.eye(d, dtype=bool)[reports.astype(int)]
    return np.unpackbits(reports, axis=1, count=d, bitorder="little").astype(bool)


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "ss"])
@pytest.mark.parametrize("d", [2, 3, 5, 7])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_noise_model_is_the_exact_item_covariance(name: str, d: int, epsilon: float) -> None:
    oracle = mechanism(name, epsilon=epsilon, domain_size=d)
    nm = noise_model(oracle)  # type: ignore[arg-type]
    f = np.linspace(1.0, 2.0, d)
    f /= f.sum()
    # Exact per-user covariance of the debiased support vector, averaged over x ~ f.
    second = np.zeros((d, d))
    mean = np.zeros(d)
    for x in range(d):
        reports, probs = oracle.output_probabilities(x)  # type: ignore[attr-defined]
        s = supports(name, d, reports).astype(float)
        y = (s - oracle.q) / (oracle.p - oracle.q)  # type: ignore[attr-defined]
        ey = probs @ y
        second += f[x] * (y.T * probs) @ y
        mean += f[x] * ey
        np.testing.assert_allclose(ey, np.eye(d)[x], atol=1e-12)  # unbiased per user
        # r1 and r0 from the listed outputs.
        both = (s.T * probs) @ s
        for v in range(d):
            for w in range(d):
                if v != w:
                    want = nm.r1 if x in (v, w) else nm.r0
                    assert math.isclose(both[v, w], want, rel_tol=1e-9, abs_tol=1e-12)
    # E_x Cov(y | x) = E[y y'] - E_x[e_x e_x'] (the per-user means are the one-hot e_x).
    exact = second - np.diag(f)
    formula = np.diag(nm.delta0 + nm.delta1 * f) + nm.kappa + nm.lam * (f[:, None] + f[None, :])
    np.fill_diagonal(formula, nm.delta0 + nm.delta1 * f + nm.kappa + 2 * nm.lam * f)
    np.testing.assert_allclose(formula, exact, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["olh", "hr"])
def test_oracles_without_an_exchangeable_covariance_are_refused(name: str) -> None:
    tree = Tree(SEED_LEAVES)
    with pytest.raises(ldpkit.ParameterError, match="cannot serve a structured metric"):
        mechanism("rollup", epsilon=1.0, tree=tree, oracle=name)


def designs() -> list[tuple[str, dict[str, Any]]]:
    seed, mixed, small = Tree(SEED_LEAVES), Tree(MIXED_LEAVES), Table(SMALL_TABLE)
    out: list[tuple[str, dict[str, Any]]] = []
    for oracle in ("grr", "oue", "ss"):
        out += [
            ("rollup", {"tree": seed, "oracle": oracle}),
            ("levels", {"tree": seed, "oracle": oracle}),
            ("levels", {"tree": mixed, "oracle": oracle}),
            ("joint", {"table": small, "oracle": oracle}),
            ("joint_marginals", {"table": small, "oracle": oracle}),
            ("split", {"table": small, "oracle": oracle}),
        ]
    out.append(("levels", {"tree": seed, "weights": (0.2, 0.8)}))
    return out


def law(m: Any) -> tuple[npt.NDArray[Any], npt.NDArray[np.float64]]:
    """All records (the same list for every input) and P[value, record]."""
    records, first = m.output_probabilities(0)
    rows = [first]
    for x in range(1, m.table.size if hasattr(m, "table") else m.tree.size):
        other, probs = m.output_probabilities(x)
        np.testing.assert_array_equal(other, records)
        rows.append(probs)
    return records, np.array(rows)


@pytest.mark.parametrize(("name", "options"), designs())
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_every_report_is_exactly_epsilon_ldp(
    name: str, options: dict[str, Any], epsilon: float
) -> None:
    m = mechanism(name, epsilon=epsilon, **options)
    records, probs = law(m)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(probs > 0), "every record is possible under every input"
    worst = float(np.max(probs.max(axis=0) / probs.min(axis=0)))
    assert worst <= math.exp(epsilon) * (1 + 1e-9)
    assert worst >= math.exp(epsilon) * (1 - 1e-9), "the designs spend their whole epsilon"
    # Every listed record is well-formed, and the record size is fixed.
    assert bool(np.all(m.check_reports(records)))
    assert records.dtype == m.report_dtype


def record_keys(records: npt.NDArray[Any]) -> list[bytes]:
    return [r.tobytes() for r in records]


@pytest.mark.parametrize(
    ("name", "options", "epsilon", "value"),
    [
        ("levels", {"tree": Tree(SEED_LEAVES), "oracle": "grr"}, 1.0, 3),
        ("levels", {"tree": Tree(MIXED_LEAVES), "oracle": "oue"}, 2.0, 0),
        ("joint_marginals", {"table": Table(SMALL_TABLE), "oracle": "ss"}, 0.5, 4),
        ("split", {"table": Table(SMALL_TABLE), "oracle": "grr"}, 1.0, 5),
    ],
)
def test_sampler_draws_the_exact_law(
    name: str, options: dict[str, Any], epsilon: float, value: int
) -> None:
    m = mechanism(name, epsilon=epsilon, **options)
    records, probs = m.output_probabilities(value)  # type: ignore[attr-defined]
    index = {k: i for i, k in enumerate(record_keys(records))}
    n = 60_000
    drawn = m.perturb(np.full(n, value), rng=np.random.default_rng(17))
    observed = np.bincount([index[k] for k in record_keys(drawn)], minlength=len(probs))
    expected = probs * n
    keep = expected >= 5
    chi2 = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    rest_o, rest_e = observed[~keep].sum(), expected[~keep].sum()
    if rest_e > 0:
        chi2 += (rest_o - rest_e) ** 2 / rest_e
    dof = int(keep.sum()) + (1 if rest_e > 0 else 0) - 1
    assert stats.chi2.sf(chi2, dof) > ALPHA


def test_device_path_one_value_at_a_time() -> None:
    m = ldpkit.hierarchy(SEED_LEAVES, epsilon=1.0, mechanism="levels")
    one = m.perturb(m.encode("MX/S/O"))
    assert one.dtype == m.report_dtype and one.shape == ()
    assert bool(m.check_reports(one)[0])


@pytest.mark.parametrize("oracles", [("grr", "oue"), ("ss", "grr")])
def test_malformed_records_are_refused_one_by_one(oracles: tuple[str, str]) -> None:
    # Mixed oracles: the payload is sized for GRR's 4 bytes, so bitmap views are padded.
    m = mechanism("levels", epsilon=1.0, tree=Tree(SEED_LEAVES), oracle=oracles)
    padded = next(k for k, v in enumerate(m.views) if v.oracle.name != "grr")
    grr = next(k for k, v in enumerate(m.views) if v.oracle.name == "grr")
    good = m.perturb(np.arange(6).repeat(3), rng=np.random.default_rng(1))
    bad = good[:4].copy()
    bad["view"][0] = len(m.views)  # no such view
    bad[1] = good[np.flatnonzero(good["view"] == padded)[0]]  # a valid record ...
    bad["payload"][1, -1] = 1  # ... but for a padding byte that is not zero
    bad["view"][2] = grr
    bad["payload"][2] = 0xFF  # GRR index out of range
    bad["view"][3] = padded
    bad["payload"][3] = 0
    bad["payload"][3, 0] = 0xFF  # bits beyond the domain (unary) / wrong popcount (SS)
    reports = np.concatenate([good, bad])
    mask = m.check_reports(reports)
    assert bool(np.all(mask[: len(good)]))
    assert not bool(np.any(mask[len(good) :]))
    with pytest.raises(ldpkit.ReportError, match="not a valid levels report"):
        m.aggregate(reports)
    with pytest.raises(ldpkit.ReportError, match="dtype"):
        m.aggregate(np.zeros(3, dtype=np.uint32))
    # The valid ones alone aggregate fine.
    assert m.aggregate(reports[mask]).n == len(good)


@pytest.mark.parametrize(("name", "options"), designs()[:6])
def test_aggregates_merge_by_addition_and_do_not_grow(name: str, options: dict[str, Any]) -> None:
    m = mechanism(name, epsilon=1.0, **options)
    size = m.table.size if hasattr(m, "table") else m.tree.size
    rng = np.random.default_rng(5)
    a = m.perturb(rng.integers(0, size, 500), rng=rng)
    b = m.perturb(rng.integers(0, size, 2000), rng=rng)
    merged = m.aggregate(a) + m.aggregate(b)
    assert merged == m.aggregate(np.concatenate([a, b]))
    assert merged.sums.size == m.stats_size == m.empty_aggregate().sums.size
    assert m.aggregate(a).sums.size == m.stats_size


def test_values_are_checked() -> None:
    m = mechanism("joint", epsilon=1.0, table=Table(SMALL_TABLE))
    with pytest.raises(ldpkit.ReportError, match=r"outside 0\.\.5"):
        m.perturb(np.array([0, 6]))
    with pytest.raises(ldpkit.ReportError, match="integer"):
        m.perturb(np.array(["a"]))
    assert m.encode({"type": "c", "origin": "y"}) == 5
    with pytest.raises(ldpkit.ParameterError, match="structured"):
        mechanism("joint", epsilon=1.0, domain_size=4)
