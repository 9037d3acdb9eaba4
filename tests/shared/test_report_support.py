"""Every mechanism refuses, report by report, what no honest client can send (issue 11).

A forged report outside a mechanism's output set is poisoning at no cost: Hybrid at
eps <= 0.61 accepted grid indices that only its Piecewise branch (unused there) makes,
moving the debiased value to 8.0 where honest reports reach 4.1. Here each mechanism's
``check_reports`` is compared with its exact output set: enumerated from
``output_probabilities`` (every input, every output of positive probability) where
there is one, or from the sampler's specification for the numeric ones.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import ldpkit
from ldpkit.mechanisms.local_hashing import OptimizedLocalHashing
from ldpkit.mechanisms.piecewise import HALF_CELLS, HYBRID_THRESHOLD, Hybrid


def _support(m: Any, d: int, **keys: int) -> set[bytes]:
    out: set[bytes] = set()
    for value in range(d):
        reports, probs = m.output_probabilities(value, **keys)
        out.update(r.tobytes() for r, p in zip(reports, probs, strict=True) if p > 0)
    return out


def _accepted(m: Any, candidates: npt.NDArray[Any]) -> set[bytes]:
    valid = m.check_reports(candidates)
    return {r.tobytes() for r in candidates[valid]}


@pytest.mark.parametrize(
    ("name", "d"), [("rr", 2), ("grr", 5), ("hr", 5), ("hr", 8)], ids=["rr", "grr", "hr5", "hr8"]
)
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 6.0])
def test_index_mechanisms(name: str, d: int, epsilon: float) -> None:
    m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    candidates = np.arange(0, 4 * d + 8, dtype=m.report_dtype)
    candidates = np.concatenate([candidates, np.array([2**31, 2**32 - 1], dtype=m.report_dtype)])
    assert _accepted(m, candidates) == _support(m, d)


@pytest.mark.parametrize(("name", "d"), [("sue", 5), ("oue", 5), ("oue", 8), ("ss", 6), ("ss", 9)])
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 6.0])
def test_bitmap_mechanisms(name: str, d: int, epsilon: float) -> None:
    m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    size = m.report_dtype.itemsize
    every = np.array(list(itertools.product(range(256), repeat=size)), dtype=np.uint8)
    assert _accepted(m, every.reshape(-1, size)) == _support(m, d)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_local_hashing(epsilon: float) -> None:
    m = ldpkit.mechanism("olh", epsilon=epsilon, domain_size=6)
    assert isinstance(m, OptimizedLocalHashing)
    for a, b in [(0, 0), (2**63 + 5, 12345), (2**64 - 1, 2**64 - 1)]:
        candidates = np.zeros(3 * m.g + 3, dtype=m.report_dtype)
        candidates["a"], candidates["b"] = a, b
        candidates["y"] = np.arange(candidates.size)
        assert _accepted(m, candidates) == _support(m, 6, a=a, b=b)


def test_duchi_outputs_only_two_signs() -> None:
    m = ldpkit.mechanism("duchi", epsilon=1.0, bounds=(0.0, 1.0))
    every = np.arange(-128, 128, dtype=np.int8)
    assert sorted(every[m.check_reports(every)].tolist()) == [-1, 1]


@pytest.mark.parametrize("epsilon", [0.05, 0.3, HYBRID_THRESHOLD, 0.62, 1.0, 4.0])
def test_hybrid_accepts_only_its_branches_outputs(epsilon: float) -> None:
    """At eps <= 0.61 Hybrid is Duchi's mechanism alone: its reports are the two grid
    indices +-m. Above, Piecewise's branch reaches every index up to the bound."""
    m = ldpkit.mechanism("hybrid", epsilon=epsilon, bounds=(0.0, 100.0))
    assert isinstance(m, Hybrid)
    every = np.arange(-m.bound - 3, m.bound + 4, dtype=np.int32)
    accepted = every[m.check_reports(every)]
    if epsilon <= HYBRID_THRESHOLD:
        assert accepted.tolist() == [-m.duchi_index, m.duchi_index]
    else:
        assert accepted.tolist() == list(range(-m.bound, m.bound + 1))
    # Honest reports, from every kind of input, are all accepted.
    rng = np.random.default_rng(9)
    honest = m.perturb(np.concatenate([[0.0, 50.0, 100.0], rng.uniform(0, 100, 20_000)]), rng=rng)
    assert m.check_reports(honest).all()
    if epsilon <= HYBRID_THRESHOLD:
        assert set(np.unique(honest).tolist()) == {-m.duchi_index, m.duchi_index}


def test_forged_hybrid_reports_no_longer_move_the_estimate() -> None:
    """The attack of issue 11: indices an honest Hybrid client at eps = 0.5 never sends,
    whose debiased value (8.0 in units of t) is twice what honest reports reach (4.1)."""
    m = ldpkit.mechanism("hybrid", epsilon=0.5, bounds=(-1.0, 1.0))
    assert isinstance(m, Hybrid)
    forged = np.full(4, m.bound, dtype=np.int32)
    assert m.bound * m.step > 1.9 * m.C_duchi  # the forged value is far out of reach
    assert not m.check_reports(forged).any()
    with pytest.raises(ldpkit.ReportError):
        m.aggregate(forged)


@pytest.mark.parametrize("name", ["piecewise", "laplace"])
def test_grid_mechanisms_accept_their_whole_grid(name: str) -> None:
    m = ldpkit.mechanism(name, epsilon=1.0, bounds=(0.0, 100.0))
    if name == "piecewise":
        lo, hi = -HALF_CELLS, HALF_CELLS
    else:
        lo, hi = -m.noise_cap, m.grid_steps + m.noise_cap  # type: ignore[attr-defined]
    edges = np.array([lo - 1, lo, lo + 1, 0, hi - 1, hi, hi + 1], dtype=m.report_dtype)
    assert m.check_reports(edges).tolist() == [False, True, True, True, True, True, False]
