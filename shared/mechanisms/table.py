"""Contingency tables: several categorical attributes of one person, reported together.

A user's value is one cell of a :class:`~ldpkit.domains.Table` (for example type = Van,
origin = USA), encoded as a flat cell index (:meth:`Table.index`, :meth:`Table.encode`).
What each design can estimate, and at what variance (per user, n = 1; ``V(eps, d)`` is
an oracle's item variance over d items, ``f`` a fraction):

``joint`` (one oracle over the product domain)
    Every user reports their cell through one oracle over all ``d = d_1 ... d_k`` cells
    with the whole epsilon. Cells: unbiased, ``V(eps, d)`` each. Marginals: exact sums of
    cells, whose variance follows from the oracle's item covariance (see
    :mod:`ldpkit.mechanisms.hierarchy`; a marginal of s cells behaves like a node of s
    leaves). The only design here that estimates cells on its own.

``joint_marginals`` (each user reports the cell or one attribute)
    Each user reports, with the whole epsilon, either their cell (probability w_0) or
    one attribute's category (w_a) through the best oracle for that size. Least squares
    under the constraint that cells sum to the marginals combines both. Cells cost
    about ``1 / w_0`` times more variance than ``joint``; marginals of small attributes
    gain a lot when the joint domain is large. Choose it when marginals matter most.

``split`` (epsilon split across attributes)
    Every user reports every attribute, each through its own oracle with ``eps / k``
    (sequential composition). This estimates the *marginals only*: the attributes'
    reports are perturbed independently, so their joint law is the product of two
    noisy channels and a cell's fraction is not identifiable without assuming
    independence (which is what the table is meant to measure). Marginal variance
    ``V(eps / k, d_a)``: at small epsilon about ``k^2`` times ``V(eps, d_a)``. It is here
    for the comparison in docs/statistics.md and is never chosen for a table metric.

Consistent estimates (cells summing to marginals, marginals to one, nothing negative)
fit the cells to the marginals by iterative proportional fitting: the unbiased cells,
floored at a tiny positive value, are scaled to Norm-Sub marginals (see
:meth:`TableMechanism.estimate`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from ..aggregate import Aggregate
from ..domains import Table
from ..errors import ParameterError, ReportError
from ..inference import LinearViews, Quadratic, grouped_norm_sub, ipf
from ..screening import Finding, LinearShift
from ..structured_estimates import OutputArrays, SupportCounts, TableEstimate
from . import make_oracle
from ._values import in_range
from ._views import ViewSampling, _check_weights, as_reports, batch_sums, noise_model, population
from .base import BoolArray, Enumerable, FloatArray, FrequencyOracle, IntArray, Mechanism, PlanCase

SEED_FLOOR = 1e-9
"""IPF seeds: unbiased cells at or below this are raised to it (a zero cannot be scaled)."""


def _plan_case(mechanism: str) -> PlanCase:
    """The conformance plan's table (3 x 2 cells) and two of its cells."""
    dims = {"type": ["Compact", "Van", "Sporty"], "origin": ["USA", "non-USA"]}
    spec = {"kind": "table", "dimensions": dims, "epsilon": 1.5, "mechanism": mechanism}
    cells = ({"type": "Compact", "origin": "USA"}, {"type": "Sporty", "origin": "non-USA"})
    return PlanCase(mechanism.replace("_", "-"), spec, cells)


def _wide_case(mechanism: str, oracle: str) -> PlanCase:
    """A 4 x 4 table (16 cells: d a multiple of 8) with every view on ``oracle``."""
    dims = {"größe": ["S", "M", "L", "XL"], "色": ["赤", "青", "緑", "黒"]}
    spec = {"kind": "table", "dimensions": dims, "epsilon": 1.0, "mechanism": mechanism,
            "oracle": oracle}  # fmt: skip
    cells = ({"größe": "S", "色": "赤"}, {"größe": "L", "色": "青"}, {"größe": "XL", "色": "黒"})
    return PlanCase(f"{mechanism.replace('_', '-')}-{oracle}-16", spec, cells)


def _population(table: Table, fractions: npt.ArrayLike | None) -> FloatArray:
    return population(table.size, None if fractions is None else np.reshape(fractions, -1))


@dataclass(frozen=True, kw_only=True)
class TableMechanism(ViewSampling):
    """Base of the view-sampling table designs; ``table`` gives the attributes."""

    kind: ClassVar[str] = "table"

    table: Table

    def _check_structure(self) -> None:
        if not isinstance(self.table, Table):
            raise ParameterError(f"table must be an ldpkit.domains.Table, got {self.table!r}")

    @property
    def base_size(self) -> int:
        return self.table.size

    def _output_partitions(self) -> list[IntArray]:
        return [np.arange(self.table.size), *(self.table.labels(a) for a in self.table.names)]

    def params(self) -> dict[str, Any]:
        return {**super().params(), **self.table.params()}

    def encode(self, value: object) -> int:
        """The value ``perturb`` takes for a cell ``{attribute: category}``."""
        return self.table.index(value)

    def estimate_arrays(self, n: npt.ArrayLike, sums: npt.ArrayLike) -> OutputArrays:
        """Every output's numbers for R aggregates at once (``n`` (R,), ``sums`` (R, k)):
        the cells, then each attribute's categories, as (R, outputs) arrays."""
        n_, sizes, y, bad = self._batch(n, sums)
        x = self.engine.point(y)
        x[bad] = 0.0
        groups = self._by_output(x)
        partitions = [self.table.labels(a) for a in self.table.names]
        R = x.shape[0]
        targets = []
        for g in groups[1:]:
            rows = np.repeat(np.arange(R), g.shape[1])
            targets.append(grouped_norm_sub(g.ravel(), rows, np.ones(R)).reshape(g.shape))
        cells = ipf(np.maximum(groups[0], SEED_FLOOR), partitions, targets)
        margins = [self.engine.sum_outputs(cells)[:, self.engine.output_offsets[1] :]]
        consistent = np.concatenate([cells, *margins], axis=1)
        arrays = self._finish(n_, sizes, x, consistent, cells, bad)
        return dataclasses.replace(arrays, supports=self._supports(n, sums))

    def estimate(self, aggregate: Aggregate) -> TableEstimate:
        """Unbiased cells and marginals (adding up), with consistent ones beside.

        Consistent: each attribute's unbiased marginal is made non-negative and summing
        to one by Norm-Sub; the unbiased cells, floored at ``SEED_FLOOR``, are scaled
        to those marginals by IPF (the table nearest the cells in Kullback-Leibler
        divergence with those margins, which keeps the cells' odds ratios); the
        consistent marginals are then the sums of the consistent cells, exactly.
        With no report, or none for one of the views, every number is NaN.
        """
        agg = self._checked_aggregate(aggregate)
        arrays = self.estimate_arrays([agg.n], agg.sums[None, :])
        off = self.engine.output_offsets
        keys: list[tuple[Any, ...]] = [self.table.cells()]
        keys += [self.table.dimensions[a] for a in self.table.names]
        groups = [
            arrays.group(
                0, slice(int(off[k]), int(off[k + 1])), key, "cell" if k == 0 else "category"
            )
            for k, key in enumerate(keys)
        ]
        marginals = dict(zip(self.table.names, groups[1:], strict=True))
        return TableEstimate(self.name, self.epsilon, agg.n, self.table, groups[0], marginals)

    def variance(self, fractions: npt.ArrayLike | None = None, n: int = 1) -> dict[str, FloatArray]:
        """Variances of the cells (``"cells"``) and of each attribute's categories, for
        n users with cell ``fractions`` (default uniform), each view at its expected share."""
        pi = _population(self.table, fractions)[None, :]
        var = self.engine.variances_at(pi, self.expected_sizes(n), np.array([float(n)]))[0]
        groups = self._by_output(var)
        return {"cells": groups[0], **dict(zip(self.table.names, groups[1:], strict=True))}

    def variance_quadratic(self, fractions: npt.ArrayLike | None = None, n: int = 1) -> Quadratic:
        pi = _population(self.table, fractions)[None, :]
        sizes = self.expected_sizes(n)
        return self.engine.variance_quadratic(pi, sizes, np.array([float(n)])).row(0)


@dataclass(frozen=True, kw_only=True)
class JointTable(TableMechanism):
    """One oracle over the product domain (see module).

    Parameters
    ----------
    oracle : str
        ``"auto"`` (smallest cell variance) or one of ``grr``, ``sue``, ``oue``, ``ss``.
    """

    name: ClassVar[str] = "joint"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (
        _plan_case("joint"),
        _wide_case("joint", "sue"),
    )

    def _view_specs(self) -> list[tuple[str, IntArray]]:
        return [("cells", np.arange(self.table.size))]


@dataclass(frozen=True, kw_only=True)
class JointMarginals(TableMechanism):
    """Each user reports the cell or one attribute, with least squares (see module).

    Parameters
    ----------
    weights : sequence of float, optional
        Probability of reporting the cell, then each attribute (default uniform).
    oracle : str or sequence of str
        One name for every view, or one per view (cells first); default ``"auto"``.
    """

    name: ClassVar[str] = "joint_marginals"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (
        _plan_case("joint_marginals"),
        _wide_case("joint_marginals", "ss"),
    )

    weights: tuple[float, ...] | None = None

    def _view_specs(self) -> list[tuple[str, IntArray]]:
        specs: list[tuple[str, IntArray]] = [("cells", np.arange(self.table.size))]
        return specs + [(a, self.table.labels(a)) for a in self.table.names]

    def _weights(self, count: int) -> tuple[float, ...]:
        weights = _check_weights(self.weights, count)
        self._set(weights=weights)
        return weights


@dataclass(frozen=True, kw_only=True)
class SplitMarginals(Mechanism):
    """Every attribute reported through its own oracle with ``epsilon / k`` (see module).

    Estimates the marginals only (``TableEstimate.cells`` is None).

    Wire format: the packed record of the attributes' oracle reports, in dimension
    order, each as its raw bytes (``payload: u1[sum of sizes]``).
    """

    name: ClassVar[str] = "split"
    kind: ClassVar[str] = "table"
    report_rule = "one valid report per attribute's oracle, packed in dimension order"

    table: Table
    oracle: str | tuple[str, ...] = "auto"
    oracles: tuple[FrequencyOracle, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._check_epsilon()
        if not isinstance(self.table, Table):
            raise ParameterError(f"table must be an ldpkit.domains.Table, got {self.table!r}")
        k = len(self.table.shape)
        names = (self.oracle,) * k if isinstance(self.oracle, str) else tuple(self.oracle)
        if len(names) != k:
            raise ParameterError(f"oracle must be a name or a list of {k} names")
        share = self.epsilon / k
        oracles = tuple(
            make_oracle(o, share, d) for o, d in zip(names, self.table.shape, strict=True)
        )
        self._set(oracles=oracles)

    @cached_property
    def _offsets(self) -> IntArray:
        sizes = [o.report_dtype.itemsize for o in self.oracles]
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @cached_property
    def engines(self) -> tuple[LinearViews, ...]:
        # One view, the attribute's categories, which are also the outputs.
        views = [(np.arange(o.domain_size), noise_model(o)) for o in self.oracles]
        return tuple(LinearViews(len(ids), [ids], [1.0], [noise], [ids]) for ids, noise in views)

    @property
    def report_dtype(self) -> np.dtype[Any]:
        return np.dtype([("payload", "u1", (int(self._offsets[-1]),))])

    @property
    def stats_size(self) -> int:
        return sum(o.domain_size for o in self.oracles)

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "oracles": [o.name for o in self.oracles],
            **self.table.params(),
        }

    def encode(self, value: object) -> int:
        return self.table.index(value)

    def _check_values(self, values: npt.NDArray[Any]) -> IntArray:
        if values.dtype.kind not in "iu":
            raise ReportError(
                f"table values must be integer cell indices, got dtype {values.dtype}"
            )
        return in_range(values, self.table.size)

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[Any]:
        out = np.zeros(values.size, dtype=self.report_dtype)
        per = np.unravel_index(values, self.table.shape)
        for a, o in enumerate(self.oracles):
            lo, hi = int(self._offsets[a]), int(self._offsets[a + 1])
            reports = np.ascontiguousarray(o.perturb(per[a].astype(np.int64), rng=rng))
            out["payload"][:, lo:hi] = reports.view(np.uint8).reshape(values.size, hi - lo)
        return out

    def _part(self, a: int, payload: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        lo, hi = int(self._offsets[a]), int(self._offsets[a + 1])
        return as_reports(payload[:, lo:hi], self.oracles[a].report_dtype)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        valid = np.ones(reports.shape[0], dtype=np.bool_)
        for a, o in enumerate(self.oracles):
            valid &= o.check_reports(self._part(a, reports["payload"]))
        return valid

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.concatenate(
            [o._sums(self._part(a, reports["payload"])) for a, o in enumerate(self.oracles)]
        )

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """Every report carries every attribute's: each attribute's oracle law on its part."""
        parts = [
            partial(o.screen_reports, self._part(a, reports["payload"]))
            for a, o in enumerate(self.oracles)
        ]
        return screening.composed(alpha, self.table.names, parts)

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """Each attribute's support counts among all n reports."""
        agg = self._checked_aggregate(aggregate)
        ends = np.cumsum([0, *(o.domain_size for o in self.oracles)])
        parts = [
            partial(o.screen_aggregate, Aggregate(agg.n, agg.sums[ends[a] : ends[a + 1]]))
            for a, o in enumerate(self.oracles)
        ]
        return screening.composed(alpha, self.table.names, parts)

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every report for cell ``value`` (the product of the attributes' outputs)."""
        x = int(self._check_values(np.asarray([value]))[0])
        per = np.unravel_index(x, self.table.shape)
        records = np.zeros(1, dtype=self.report_dtype)
        probs = np.ones(1)
        for a, o in enumerate(self.oracles):
            assert isinstance(o, Enumerable)  # every structured oracle lists its reports
            reports, p = o.output_probabilities(int(per[a]))
            raw = np.ascontiguousarray(reports).view(np.uint8).reshape(len(p), -1)
            lo, hi = int(self._offsets[a]), int(self._offsets[a + 1])
            records = np.repeat(records, len(p))
            records["payload"][:, lo:hi] = np.tile(raw, (len(probs), 1))
            probs = np.outer(probs, p).reshape(-1)
        return records, probs

    def estimate_arrays(self, n: npt.ArrayLike, sums: npt.ArrayLike) -> OutputArrays:
        """Each attribute's categories for R aggregates at once, side by side."""
        counts_n, table = batch_sums(n, sums, self.stats_size)
        bad = counts_n <= 0
        safe = np.where(bad, 1.0, counts_n)[:, None]
        columns = []
        at = 0
        R = counts_n.size
        for o, engine in zip(self.oracles, self.engines, strict=True):
            d = o.domain_size
            x = engine.point(engine.debias(table[:, at : at + d], safe))
            at += d
            flat = grouped_norm_sub(x.ravel(), np.repeat(np.arange(R), d), np.ones(R))
            cons = flat.reshape(x.shape)
            at_truth = np.where(bad[:, None], 1.0 / d, cons)
            quad = engine.variance_quadratic(at_truth, safe, safe[:, 0])
            se = np.sqrt(np.maximum(quad.at(cons), 0.0))
            assert quad.correction is not None
            columns.append((x, se, cons, quad.v0, quad.v1, quad.v2, quad.correction))
        x, se, cons, v0, v1, v2, corr = map(np.hstack, zip(*columns, strict=True))
        nan = np.where(bad[:, None], np.nan, 1.0)
        quad = Quadratic(v0 * nan, v1 * nan, v2 * nan, corr * nan)
        shifts = [engine.forgery for engine in self.engines]  # every report carries each part
        up, down = (np.concatenate([getattr(s, side) for s in shifts]) for side in ("up", "down"))
        forgery = LinearShift(up, down, np.ones(1))
        p = np.concatenate([np.full(o.domain_size, o.p) for o in self.oracles])
        q = np.concatenate([np.full(o.domain_size, o.q) for o in self.oracles])
        supports = SupportCounts(table * nan, counts_n, p, q)  # each category is one count
        arrays = (counts_n, x * nan, se * nan, cons * nan, quad, forgery)
        return OutputArrays(*arrays, supports=supports)

    def estimate(self, aggregate: Aggregate) -> TableEstimate:
        """Unbiased marginals with intervals; consistent ones by Norm-Sub. No cells."""
        agg = self._checked_aggregate(aggregate)
        arrays = self.estimate_arrays([agg.n], agg.sums[None, :])
        marginals = {}
        at = 0
        for name, o in zip(self.table.names, self.oracles, strict=True):
            part = slice(at, at + o.domain_size)
            at += o.domain_size
            marginals[name] = arrays.group(0, part, self.table.dimensions[name], "category")
        return TableEstimate(self.name, self.epsilon, agg.n, self.table, None, marginals)

    def variance(self, fractions: npt.ArrayLike | None = None, n: int = 1) -> dict[str, FloatArray]:
        """Variances of each attribute's categories for n users with cell ``fractions``."""
        pi = _population(self.table, fractions).reshape(self.table.shape)
        out = {}
        for a, (name, engine) in enumerate(zip(self.table.names, self.engines, strict=True)):
            axes = tuple(i for i in range(len(self.table.shape)) if i != a)
            marginal = pi.sum(axis=axes)[None, :]
            var = engine.variances_at(marginal, np.array([[float(n)]]), np.array([float(n)]))
            out[name] = var[0]
        return out
