"""Hierarchical categories: counts that add up from leaves to the top of a tree.

A user's value is a leaf of a :class:`~ldpkit.domains.Tree` (a path such as
``"MX/Jalisco/Zapopan"``); the analyst reads fractions at any depth, with every parent
equal to the sum of its children. Two designs, both view-sampling mechanisms
(:mod:`ldpkit.mechanisms._views`) estimated by :class:`~ldpkit.inference.LinearViews`:

``rollup`` (leaf reporting with exact roll-up)
    Every user reports their leaf through one oracle over all leaves. Leaf estimates are
    the oracle's, projected to sum to one (a no-op for GRR and subset selection); a node
    is the sum of its leaves. The variance of a node of s leaves out of m is, per user,
    ``delta0 s (1 - s/m) + delta1 ((1 - s/m)^2 theta + (s/m)^2 (1 - theta))`` for its
    fraction theta (the oracle's item covariance is what makes this differ from a sum of
    item variances: GRR's and subset selection's items are negatively correlated).

``levels`` (level sampling with constrained inference)
    Every user reports one depth, chosen uniformly among the depths that refine the one
    above (a depth with one node is known exactly), through the best oracle for that
    depth's size, with the whole epsilon. Estimates combine all depths by least squares
    under the tree's sum constraints (Hay et al., VLDB 2010, with each depth weighted by
    its working variance), so upper levels gain from being reported directly through
    small-domain oracles while the leaves still add up.

Which is better depends on epsilon and on the depths that matter:
:func:`ldpkit.structured.choose_hierarchy` compares them by their variance at the
depths named in ``focus``.

References
----------
M. Hay, V. Rastogi, G. Miklau, D. Suciu, "Boosting the accuracy of differentially private
histograms through consistency", PVLDB 3(1), 2010.

G. Cormode, T. Kulkarni, D. Srivastava, "Answering range queries under local
differential privacy", PVLDB 12(10), 2019.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..aggregate import Aggregate
from ..domains import Tree
from ..errors import ParameterError
from ..inference import Quadratic, tree_consistent
from ..structured_estimates import HierarchyEstimate, OutputArrays
from ._views import ViewSampling, _check_weights, population
from .base import FloatArray, IntArray, PlanCase

_REGION = (
    "MX/Jalisco/Guadalajara",
    "MX/Jalisco/Zapopan",
    "MX/Sonora/Hermosillo",
    "US/Texas",
    "Perú",
)
"""The conformance plan's tree: leaves at depths 3, 2 and 1."""


_WIDE_REGION = tuple(
    f"{top}/{leaf}{i}" for top in ("Åland", "Bío") for leaf in "xy" for i in range(4)
)
"""The plan's wide tree: 16 leaves under two tops (d a multiple of 8 at the leaves)."""


def _plan_case(mechanism: str, oracle: str) -> PlanCase:
    spec = {
        "kind": "hierarchy",
        "categories": list(_REGION),
        "epsilon": 1.5,
        "mechanism": mechanism,
        "oracle": oracle,
    }
    return PlanCase(mechanism, spec, (_REGION[0], _REGION[3], _REGION[4]))


def _wide_case(mechanism: str, oracle: str) -> PlanCase:
    """The wide tree with every view on ``oracle`` (``ss``, ``sue``: what ``auto`` picks
    for larger hierarchies)."""
    spec = {"kind": "hierarchy", "categories": list(_WIDE_REGION), "epsilon": 1.0,
            "mechanism": mechanism, "oracle": oracle}  # fmt: skip
    values = (_WIDE_REGION[0], _WIDE_REGION[9], _WIDE_REGION[15])
    return PlanCase(f"{mechanism}-{oracle}-16", spec, values)


def refining_depths(tree: Tree) -> list[int]:
    """Depths whose partition is finer than every depth above (width >= 2, growing)."""
    depths, last = [], 1
    for d in range(1, tree.depth + 1):
        width = tree.width(d)
        if width > last:
            depths.append(d)
            last = width
    return depths


@dataclass(frozen=True, kw_only=True)
class HierarchyMechanism(ViewSampling):
    """Base of the hierarchy designs; ``tree`` gives the categories (see Tree)."""

    kind: ClassVar[str] = "hierarchy"

    tree: Tree

    def _check_structure(self) -> None:
        if not isinstance(self.tree, Tree):
            raise ParameterError(f"tree must be an ldpkit.domains.Tree, got {self.tree!r}")

    @property
    def base_size(self) -> int:
        return self.tree.size

    def _output_partitions(self) -> list[IntArray]:
        return list(self.tree.labels)

    def params(self) -> dict[str, Any]:
        return {**super().params(), **self.tree.params()}

    def encode(self, value: object) -> int:
        """The value ``perturb`` takes for a leaf path: the leaf's index."""
        return self.tree.leaf_index(value)

    def estimate_arrays(self, n: npt.ArrayLike, sums: npt.ArrayLike) -> OutputArrays:
        """Every node's numbers for R aggregates at once (``n`` (R,), ``sums`` (R, k)).

        The same computation as :meth:`estimate`, as (R, nodes) arrays with the depths
        side by side from the top: for simulations, benchmarks and time buckets.
        """
        n_, sizes, y, bad = self._batch(n, sums)
        x = self.engine.point(y)
        x[bad] = 0.0
        consistent = np.concatenate(tree_consistent(self._by_output(x), self.tree.parents), axis=1)
        leaves = self.engine.base_of(consistent, self.tree.depth - 1)
        arrays = self._finish(n_, sizes, x, consistent, leaves, bad)
        return dataclasses.replace(arrays, supports=self._supports(n, sums))

    def estimate(self, aggregate: Aggregate) -> HierarchyEstimate:
        """Unbiased (and adding-up) estimates at every depth, with consistent ones beside.

        Standard errors come from the estimator's covariance at the consistent estimate;
        intervals are continuity-corrected score intervals (see :mod:`ldpkit.inference`).
        With no report, or none for one of the reported depths, every number is NaN.
        """
        agg = self._checked_aggregate(aggregate)
        arrays = self.estimate_arrays([agg.n], agg.sums[None, :])
        off = self.engine.output_offsets
        groups = tuple(
            arrays.group(0, slice(int(off[d]), int(off[d + 1])), self.tree.paths[d], "category")
            for d in range(self.tree.depth)
        )
        return HierarchyEstimate(self.name, self.epsilon, agg.n, self.tree, groups)

    def variance(self, fractions: npt.ArrayLike | None = None, n: int = 1) -> list[FloatArray]:
        """Per depth, each node's variance for n users with leaf ``fractions``.

        ``fractions`` defaults to the uniform population; each view is taken to hold
        its expected share of the n users. With ``n = 1`` the figures are per user.
        """
        pi = population(self.tree.size, fractions)[None, :]
        var = self.engine.variances_at(pi, self.expected_sizes(n), np.array([float(n)]))
        return self._by_output(var[0])

    def variance_quadratic(self, fractions: npt.ArrayLike | None = None, n: int = 1) -> Quadratic:
        """Each node's variance along the path of its own value (see LinearViews)."""
        pi = population(self.tree.size, fractions)[None, :]
        quad = self.engine.variance_quadratic(pi, self.expected_sizes(n), np.array([float(n)]))
        return quad.row(0)


@dataclass(frozen=True, kw_only=True)
class LeafRollup(HierarchyMechanism):
    """Leaf reporting with exact roll-up: one oracle over the leaves (see module).

    Parameters
    ----------
    oracle : str
        ``"auto"`` (the smallest variance at frequency 0 over the leaves), ``"grr"``,
        ``"sue"``, ``"oue"`` or ``"ss"``.
    """

    name: ClassVar[str] = "rollup"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (
        _plan_case("rollup", "oue"),
        _wide_case("rollup", "ss"),
    )

    def _view_specs(self) -> list[tuple[str, IntArray]]:
        d = self.tree.depth
        return [(f"depth {d}", self.tree.labels[d - 1])]


@dataclass(frozen=True, kw_only=True)
class LevelSampling(HierarchyMechanism):
    """Level sampling with constrained inference (see module).

    Parameters
    ----------
    levels : sequence of int, optional
        The depths users report (default: every depth finer than the ones above, see
        :func:`refining_depths`). The leaves' depth must be one of them.
    weights : sequence of float, optional
        The probability of each reported depth (default uniform: for the tree
        8 -> 64 -> 512 with every depth counted equally, no weights on a 0.05 grid beat
        it by more than 0.1% at eps 0.5, 1 and 4; see docs/statistics.md).
    oracle : str or sequence of str
        Per reported depth, or one for all (default ``"auto"``: the best for each
        depth's size).
    """

    name: ClassVar[str] = "levels"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (
        _plan_case("levels", "auto"),
        _wide_case("levels", "sue"),
    )

    levels: tuple[int, ...] | None = None
    weights: tuple[float, ...] | None = None

    def _view_specs(self) -> list[tuple[str, IntArray]]:
        depths = refining_depths(self.tree) if self.levels is None else self._given_levels()
        self._set(levels=tuple(depths))
        return [(f"depth {d}", self.tree.labels[d - 1]) for d in depths]

    def _given_levels(self) -> list[int]:
        given: object = self.levels  # from TOML/JSON it may be anything
        if isinstance(given, str) or not isinstance(given, Sequence):
            raise ParameterError(f"levels must be a list of depths, got {self.levels!r}")
        depths = sorted({self.tree.check_depth(d) for d in given})
        widths = [self.tree.width(d) for d in depths]
        if widths[-1] != self.tree.size:
            raise ParameterError(
                "levels must include a depth that separates every leaf (the leaves' depth)"
            )
        if any(w < 2 for w in widths) or len(set(widths)) != len(widths):
            raise ParameterError(
                f"levels must be depths with at least 2 nodes and distinct partitions; "
                f"the default is {refining_depths(self.tree)}"
            )
        return depths

    def _weights(self, count: int) -> tuple[float, ...]:
        weights = _check_weights(self.weights, count)
        self._set(weights=weights)
        return weights
