"""The aggregate simulator of benchmarks/structured.py draws the mechanisms' exact law.

The benchmark draws each campaign's aggregate directly (10^6 users at 512 leaves would
take minutes to perturb one report at a time). Here, for a few users, the exact law of
the aggregate is computed by convolving every user's law of records (each mechanism's
``output_probabilities``, turned into aggregate sums by its own ``_sums``), and the
simulator's draws are tested against it (chi-square, fixed seeds).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from scipy import stats

from benchmarks.structured import simulate_sums
from ldpkit.domains import Table, Tree
from ldpkit.mechanisms import mechanism

ALPHA = 1e-4
DRAWS = 30_000


def exact_law(m: Any, values: list[int]) -> dict[tuple[float, ...], float]:
    """The law of the aggregate sums of users holding ``values``, by convolution."""
    law: dict[tuple[float, ...], float] = {tuple(np.zeros(m.stats_size)): 1.0}
    for x in values:
        records, probs = m.output_probabilities(x)
        contributions = [m._sums(records[i : i + 1]) for i in range(len(records))]
        nxt: dict[tuple[float, ...], float] = defaultdict(float)
        for key, p in law.items():
            base = np.array(key)
            for c, q in zip(contributions, probs, strict=True):
                nxt[tuple(base + c)] += p * q
        law = dict(nxt)
    return law


@pytest.mark.parametrize(
    ("name", "options", "epsilon", "values"),
    [
        ("rollup", {"tree": Tree(("a/x", "a/y", "b/z", "b/w")), "oracle": "grr"}, 1.0, [0, 0, 2]),
        ("rollup", {"tree": Tree(("a/x", "a/y", "b/z", "b/w")), "oracle": "oue"}, 1.0, [1, 3]),
        ("rollup", {"tree": Tree(("a", "b", "c", "d", "e")), "oracle": "ss"}, 0.5, [0, 1, 1]),
        ("rollup", {"tree": Tree(tuple("abcdef")), "oracle": "ss"}, 1.0, [0, 3, 5]),
        ("levels", {"tree": Tree(("a/x", "a/y", "b/z")), "oracle": "grr"}, 1.0, [0, 2, 2]),
        ("levels", {"tree": Tree(("a/x", "a/y", "b/z", "b/w")), "oracle": "ss"}, 2.0, [0, 3]),
        ("split", {"table": Table({"t": ["a", "b", "c"], "o": ["x", "y"]})}, 1.0, [0, 5]),
    ],
)
def test_simulated_aggregates_follow_the_exact_law(
    name: str, options: dict[str, Any], epsilon: float, values: list[int]
) -> None:
    m = mechanism(name, epsilon=epsilon, **options)
    law = exact_law(m, values)
    population = np.bincount(values, minlength=m.base_size if hasattr(m, "base_size") else 6)
    _, sums = simulate_sums(m, population, DRAWS, np.random.default_rng(3))
    keys = list(law)
    index = {k: i for i, k in enumerate(keys)}
    drawn = [index.get(tuple(row)) for row in sums]
    assert None not in drawn, "the simulator drew an impossible aggregate"
    observed = np.bincount(np.array(drawn, dtype=int), minlength=len(keys))
    expected = np.array([law[k] for k in keys]) * DRAWS
    keep = expected >= 5
    chi2 = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    rest_o, rest_e = observed[~keep].sum(), expected[~keep].sum()
    if rest_e > 0:
        chi2 += (rest_o - rest_e) ** 2 / rest_e
    dof = int(keep.sum()) + (1 if rest_e > 0 else 0) - 1
    assert stats.chi2.sf(chi2, dof) > ALPHA
