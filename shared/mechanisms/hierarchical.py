"""The hierarchical histogram: the distribution of a number, with consistent range answers.

References
----------
G. Cormode, T. Kulkarni, D. Srivastava, "Answering range queries under local differential
privacy", PVLDB 12(10), 2019 (hierarchical histograms under LDP, one level per user).
M. Hay, V. Rastogi, G. Miklau, D. Suciu, "Boosting the accuracy of differentially private
histograms through consistency", PVLDB 3(1), 2010 (constrained inference).
T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017 (GRR and OLH, and when each is better).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from .._validation import check_bounds, check_positive
from ..aggregate import Aggregate
from ..distribution import DistributionEstimate, LevelNoise, Tree, TreeSmoother, leaf_index
from ..errors import ParameterError
from ..screening import Finding
from . import oracle_class
from ._conformance import NUMERIC_BOUNDS, case_name, chi2, prefixed
from ._portable import Derived, Words, bounded
from ._values import check_numbers
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray, Mechanism, PlanCase
from .local_hashing import REPORT_DTYPE as OLH_DTYPE
from .local_hashing import OptimizedLocalHashing
from .randomized_response import GeneralizedRR

if TYPE_CHECKING:
    from .base import LawTest, Reports

REPORT_DTYPE = np.dtype([("depth", "u1"), ("a", "<u8"), ("b", "<u8"), ("y", "<u4")])
"""One report (21 bytes, packed, little-endian): the depth reported and that depth's
oracle report. Randomized-response depths use ``y`` (the node) with ``a = b = 0``;
local-hashing depths use the whole ``(a, b, y)`` record of :mod:`.local_hashing`."""

DEFAULT_RESOLUTION = 1024
DEFAULT_BRANCHING = 4
"""Fan-out of the tree unless given (see docs/statistics.md for the measured choice)."""


def leaf_of(x: float, lo: float, hi: float, resolution: int) -> int:
    """The portable rule's leaf of a clipped value: edges ``lo + ((hi - lo) * k) / R``
    (the last: hi)."""

    def edge(k: int) -> float:
        return hi if k == resolution else lo + ((hi - lo) * k) / resolution

    k = min(max(math.floor((x - lo) / (hi - lo) * resolution), 0), resolution - 1)
    if k < resolution - 1 and x >= edge(k + 1):
        k += 1
    if x < edge(k):
        k -= 1
    return k


def _oracle_reports(oracle: FrequencyOracle, rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """One depth's reports as its oracle's: local hashing's (a, b, y), else the item y."""
    if isinstance(oracle, OptimizedLocalHashing):
        records = np.empty(rows.size, dtype=OLH_DTYPE)
        for key in ("a", "b", "y"):
            records[key] = rows[key]
        return records
    return rows["y"].astype(oracle.report_dtype)


def _put(out: npt.NDArray[Any], reports: npt.NDArray[Any], rows: Any = slice(None)) -> None:
    """Write a depth's oracle reports into ``rows`` of the records ``out``: local hashing's
    (a, b, y), else the item as y."""
    if reports.dtype.names:
        for key in ("a", "b", "y"):
            out[key][rows] = reports[key]
    else:
        out["y"][rows] = reports


def _plan_case(epsilon: float) -> PlanCase:
    lo, hi = NUMERIC_BOUNDS
    spec = {"kind": "distribution", "bounds": [lo, hi], "resolution": 64, "epsilon": epsilon}
    return PlanCase(case_name("hh", epsilon), spec, (lo, 0.123456789, hi))


@dataclass(frozen=True, kw_only=True)
class HierarchicalHistogram(Mechanism):
    """Hierarchical histogram (HH): each user reports one depth of a tree over the bounds.

    The bounds ``[lo, hi]`` are cut into ``resolution`` equal leaves, arranged in a tree
    of fan-out ``branching`` (see :mod:`ldpkit.distribution`). On the device, a value is
    clipped to the bounds and mapped to its leaf; a depth t in ``1 .. height`` is drawn
    uniformly (independently of the value), and the node at depth t holding the leaf is
    reported through that depth's frequency oracle over its ``counts[t]`` nodes: k-ary
    randomized response (GRR) or optimized local hashing (OLH), whichever has the smaller
    variance for a node of average size, ``1 / counts[t]`` (GRR on a tie: its report is
    smaller). Every report is epsilon-LDP: the depth carries no information about the
    value, and the oracle is epsilon-LDP for any node; a user sends one report.

    The collector keeps, per depth, the number of reports and the support count of each
    node (``height + nodes`` sums, whatever the number of reports), debiases each depth,
    and makes the depths consistent by least squares on the tree with the root fixed at
    1 (:class:`~ldpkit.distribution.TreeSmoother`), each depth weighted by the inverse of
    its per-node variance at the average node. The weights depend only on epsilon, the
    tree and the number of reports per depth, so the estimate is linear in the support
    counts and unbiased, and the variance of any answer follows from the per-depth
    covariances (:class:`~ldpkit.distribution.LevelNoise`).

    Parameters
    ----------
    epsilon : float
        The privacy parameter of one report, > 0.
    bounds : (float, float)
        ``(lo, hi)``; values outside are clipped to them on the device.
    resolution : int
        Number of leaves, the finest histogram supported (2 .. 4096; default 1024).
    branching : int
        Fan-out of the tree (2 .. resolution; default 4). With ``branching >= resolution``
        the tree has one depth: a flat histogram.

    Wire format
    -----------
    :data:`REPORT_DTYPE`, 21 bytes per report. A report is well-formed iff ``1 <= depth
    <= height`` and, for a GRR depth, ``y < counts[depth]`` and ``a = b = 0``; for an OLH
    depth, ``y < g`` (every hash key ``(a, b)`` is possible).
    """

    name: ClassVar[str] = "hh"
    kind: ClassVar[str] = "distribution"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (_plan_case(1.0), _plan_case(3.0))
    report_dtype = REPORT_DTYPE

    bounds: tuple[float, float]
    resolution: int = DEFAULT_RESOLUTION
    branching: int = DEFAULT_BRANCHING
    tree: Tree = field(init=False, repr=False)
    oracles: tuple[FrequencyOracle, ...] = field(init=False, repr=False)
    """The frequency oracle of each depth 1 .. height (index 0 is depth 1)."""
    _weights: tuple[float, ...] = field(init=False, repr=False)
    _limits: npt.NDArray[np.uint64] = field(init=False, repr=False)
    _hashed: npt.NDArray[np.bool_] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._check_epsilon()
        self._set(bounds=check_bounds(self.bounds))
        tree = Tree(self.resolution, self.branching)
        self._set(resolution=tree.resolution, branching=tree.branching, tree=tree)
        oracles: list[FrequencyOracle] = []
        weights: list[float] = []
        # By the depth byte: entries past the height are never valid.
        limits, hashed = np.zeros(256, dtype=np.uint64), np.zeros(256, dtype=np.bool_)
        for t in range(1, tree.height + 1):
            d = tree.counts[t]
            grr = GeneralizedRR(epsilon=self.epsilon, domain_size=d)
            olh = OptimizedLocalHashing(epsilon=self.epsilon, domain_size=d)
            f = 1.0 / d
            best: FrequencyOracle = olh if olh.variance(f) < grr.variance(f) else grr
            oracles.append(best)
            hashed[t] = best is olh
            limits[t] = olh.g if best is olh else d
            # Per-report variance of a node estimate at the average node, sampling included.
            weights.append(float(best.variance(f)) + f * (1.0 - f))
        self._set(oracles=tuple(oracles), _weights=tuple(weights), _limits=limits, _hashed=hashed)

    @property
    def height(self) -> int:
        return self.tree.height

    @property
    def stats_size(self) -> int:
        return self.tree.height + self.tree.nodes

    @property
    def report_rule(self) -> str:
        parts = [
            f"depth {t}: y < {self._limits[t]}" + ("" if self._hashed[t] else ", a = b = 0")
            for t in range(1, self.height + 1)
        ]
        return (
            f"a record (depth: u1, a: u8, b: u8, y: u4) with depth in 1..{self.height} and "
            + "; ".join(parts)
        )

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "bounds": list(self.bounds),
            "resolution": self.resolution,
            "branching": self.branching,
        }

    def auto_variance(self) -> float:
        """Variance of the fraction below the bounds' middle, for uniform values and one report."""
        lo, hi = self.bounds
        return float(self.expected(1.0).fraction(lo, (lo + hi) / 2.0).stderr ** 2)

    def depth_oracles(self) -> dict[int, str]:
        """Which oracle each depth uses, by name."""
        return {t: o.name for t, o in enumerate(self.oracles, start=1)}

    def _check_values(self, values: npt.NDArray[Any]) -> FloatArray:
        return check_numbers(values, self.bounds)

    def leaves_of(self, values: npt.ArrayLike) -> IntArray:
        """The leaf of each (checked, clipped) value."""
        x = self._check_values(np.atleast_1d(np.asarray(values)))
        return leaf_index(x, self.bounds, self.resolution)

    def _perturb(self, values: FloatArray, rng: np.random.Generator) -> npt.NDArray[Any]:
        leaf = leaf_index(values, self.bounds, self.resolution)
        n = values.size
        depth = rng.integers(1, self.height + 1, size=n, dtype=np.uint8)
        out = np.zeros(n, dtype=REPORT_DTYPE)
        out["depth"] = depth
        for t, oracle in enumerate(self.oracles, start=1):
            idx = np.flatnonzero(depth == t)
            if idx.size == 0:
                continue
            _put(out, oracle.perturb(self.tree.node_of_leaf(leaf[idx], t), rng), idx)
        return out

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        depth = reports["depth"]
        limit = self._limits[depth]
        ok = reports["y"].astype(np.uint64) < limit  # limit 0 for depths out of range
        keyless = (reports["a"] == 0) & (reports["b"] == 0)
        return np.asarray(ok & (self._hashed[depth] | keyless))

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        """Whether each report supports the node holding ``value`` at the report's depth."""
        r = np.asarray(reports)
        leaf = int(self.leaves_of([value])[0])
        depth = r["depth"].astype(np.int64)
        out = np.zeros(r.shape[0], dtype=np.bool_)
        for t, oracle in enumerate(self.oracles, start=1):
            sel = depth == t
            chosen = r[sel] if isinstance(oracle, OptimizedLocalHashing) else r[sel]["y"]
            out[sel] = oracle.supports(int(self.tree.node_of_leaf(leaf, t)), chosen)
        return out

    def report_layer(self, reports: npt.ArrayLike) -> IntArray:
        """The depth each report speaks about."""
        return np.asarray(reports)["depth"].astype(np.int64)

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        tree = self.tree
        depth = reports["depth"]
        out = [np.bincount(depth, minlength=tree.height + 1)[1 : tree.height + 1].astype(float)]
        for t, oracle in enumerate(self.oracles, start=1):
            chosen = reports[depth == t]
            if isinstance(oracle, OptimizedLocalHashing):
                out.append(oracle.aggregate(_oracle_reports(oracle, chosen)).sums)
            else:
                out.append(np.bincount(chosen["y"], minlength=tree.counts[t]).astype(float))
        return np.concatenate(out)

    def split(self, aggregate: Aggregate) -> tuple[IntArray, list[FloatArray]]:
        """Reports per depth and the support counts of each depth's nodes."""
        agg = self._checked_aggregate(aggregate)
        tree = self.tree
        counts = agg.sums[: tree.height]
        if not bool(np.all((counts >= 0) & (counts == np.floor(counts)))):
            raise ParameterError("aggregate's reports per depth must be whole numbers >= 0")
        if int(counts.sum()) != agg.n:
            raise ParameterError(
                f"aggregate's reports per depth add up to {int(counts.sum())}, not n = {agg.n}"
            )
        supports = np.split(agg.sums[tree.height :], np.cumsum(tree.counts[1:-1]))
        return counts.astype(np.int64), supports

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """The depth, uniform whatever the value; each depth's oracle law on its reports."""
        depth = reports["depth"].astype(np.int64)
        parts = [
            partial(o.screen_reports, _oracle_reports(o, reports[depth == t]))
            for t, o in enumerate(self.oracles, start=1)
        ]
        chosen = np.bincount(depth, minlength=self.height + 1)[1:]
        return screening.composed(alpha, self._part_labels, parts, chosen, self._shares)

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """The reports per depth, uniform whatever the values; each depth's support counts
        (:meth:`FrequencyOracle.screen_aggregate`) among that depth's reports."""
        counts, supports = self.split(aggregate)
        parts = [
            partial(o.screen_aggregate, Aggregate(int(c), s))
            for o, c, s in zip(self.oracles, counts, supports, strict=True)
        ]
        return screening.composed(alpha, self._part_labels, parts, counts, self._shares)

    @property
    def _part_labels(self) -> list[str]:
        return [f"depth {t}" for t in range(1, self.height + 1)]

    @property
    def _shares(self) -> FloatArray:
        return np.full(self.height, 1.0 / self.height)

    def _smoother(self, depth_counts: npt.ArrayLike) -> TreeSmoother:
        counts = np.asarray(depth_counts, dtype=np.float64)
        variances = [
            w / c if c > 0 else math.inf for w, c in zip(self._weights, counts, strict=True)
        ]
        return TreeSmoother(self.tree, variances)

    def _levels(self, depth_counts: npt.ArrayLike) -> tuple[LevelNoise, ...]:
        counts = np.asarray(depth_counts, dtype=np.float64)
        return tuple(
            LevelNoise(o.name, o.p, o.q, not isinstance(o, OptimizedLocalHashing), float(c))
            for o, c in zip(self.oracles, counts, strict=True)
        )

    def estimate(self, aggregate: Aggregate) -> DistributionEstimate:
        """The consistent distribution, with the noise model for every answer's stderr."""
        counts, supports = self.split(aggregate)
        n = int(aggregate.n)
        if n == 0:
            leaves = np.full(self.resolution, np.nan)
            smoother = self._smoother(np.ones(self.height))
        else:
            fractions = []
            for oracle, c, support in zip(self.oracles, counts, supports, strict=True):
                if c > 0:
                    fractions.append((support / c - oracle.q) / (oracle.p - oracle.q))
                else:
                    fractions.append(np.zeros(support.size))
            smoother = self._smoother(counts)
            leaves = smoother.forward(fractions).ravel()
        return self._answer(n, leaves, counts, smoother)

    def expected(self, n: float, fractions: npt.ArrayLike | None = None) -> DistributionEstimate:
        """An estimate whose answers' standard errors are those expected from n reports.

        The leaves are the true ``fractions`` (default: uniform), every depth gets its
        expected ``n / height`` reports, and the variance formulas are evaluated at the
        truth: what planning and the benchmarks compare the measured errors with.
        """
        n = check_positive(n, "n")
        if fractions is None:
            leaves = np.full(self.resolution, 1.0 / self.resolution)
        else:
            leaves = np.asarray(fractions, dtype=np.float64)
            if leaves.shape != (self.resolution,) or not bool(np.all(leaves >= 0)):
                raise ParameterError(f"fractions must be {self.resolution} numbers >= 0")
            if not math.isclose(float(leaves.sum()), 1.0, rel_tol=0, abs_tol=1e-9):
                raise ParameterError(f"fractions must sum to 1, got {float(leaves.sum())!r}")
        counts = np.full(self.height, float(n) / self.height)
        return self._answer(max(1, round(n)), leaves, counts, self._smoother(counts))

    def _answer(
        self, n: int, leaves: FloatArray, counts: npt.NDArray[Any], smoother: TreeSmoother
    ) -> DistributionEstimate:
        return DistributionEstimate(
            mechanism=self.name,
            epsilon=self.epsilon,
            n=n,
            bounds=self.bounds,
            tree=self.tree,
            leaves=leaves,
            depth_counts=tuple(round(float(c)) for c in counts),
            levels=self._levels(counts),
            smoother=smoother,
        )

    # --- exact law -------------------------------------------------------------------
    def output_probabilities(
        self, value: float, *, a: int = 0, b: int = 0
    ) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every possible report for ``value`` given the hash key ``(a, b)``, with its probability.

        The key of a local-hashing depth is uniform and independent of the value (and GRR depths
        carry ``a = b = 0``), so the privacy of the whole report is the privacy of this conditional
        law: ``P(report) = P(depth) P(y | node at depth)`` with ``P(depth) = 1 / height``.
        """
        leaf = int(self.leaves_of(np.asarray([value]))[0])
        records, probs = [], []
        for t, oracle in enumerate(self.oracles, start=1):
            node = int(self.tree.node_of_leaf(leaf, t))
            if isinstance(oracle, OptimizedLocalHashing):
                reports, p = oracle.output_probabilities(node, a=a, b=b)
            else:
                assert isinstance(oracle, GeneralizedRR)
                reports, p = oracle.output_probabilities(node)
            part = np.zeros(len(p), dtype=REPORT_DTYPE)
            part["depth"] = t
            _put(part, reports)
            records.append(part)
            probs.append(p / self.height)
        return np.concatenate(records), np.concatenate(probs)

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        """The resolution, and each depth's leaves per node, nodes, oracle and its constants."""
        depths = [
            {
                "leaves_per_node": int(self.tree.sizes[t]),
                "nodes": int(self.tree.counts[t]),
                "oracle": oracle.name,
                **oracle.served_constants(),
            }
            for t, oracle in enumerate(self.oracles, start=1)
        ]
        return {"resolution": self.resolution, "depths": depths}

    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        """The leaf of the clipped number; a depth t = ``below(height)`` + 1; the report of
        the leaf's node there by the depth's oracle, in the record (depth, a, b, y) (a GRR
        depth's item is y, with a = b = 0)."""
        lo, hi, x = bounded(definition, value)
        derived = definition["derived"]
        leaf = leaf_of(x, lo, hi, int(derived["resolution"]))
        depths = derived["depths"]
        t = words.below(len(depths))
        depth = depths[t]
        node = leaf // int(depth["leaves_per_node"])
        body = oracle_class(depth["oracle"]).portable_item(depth, int(depth["nodes"]), node, words)
        return bytes([t + 1]) + bytes(REPORT_DTYPE.itemsize - 1 - len(body)) + body

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """The depth, uniform; and given it, the depth oracle's law for the value's node."""
        leaf = int(leaf_index(np.array([float(value)]), self.bounds, self.resolution)[0])
        depth = reports["depth"].astype(np.int64)
        counts = np.bincount(depth, minlength=self.height + 1)[1:]
        out = [("depth", *chi2(counts, np.ones(self.height)), "")]
        for t, oracle in enumerate(self.oracles, start=1):
            rows = reports[depth == t]
            if len(rows) < 20:
                continue
            node = int(self.tree.node_of_leaf(np.array([leaf]), t)[0])
            own = derived["depths"][t - 1]
            law = oracle.conformance_tests(_oracle_reports(oracle, rows), node, own)
            out += prefixed(f"depth {t}", law)
        return out
