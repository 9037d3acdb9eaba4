"""Results of structured metrics: hierarchies (a tree of categories) and tables.

Modelled on :class:`~ldpkit.estimates.FrequencyEstimate`: fractions of the users who
reported, their standard errors, ``ci(level)`` returning a
:class:`~ldpkit.estimates.ConfidenceInterval`, and ``consistent()`` beside the unbiased
estimates. What is new:

- **Unbiased** estimates already *add up*: a parent is the exact sum of its children, a
  marginal the exact sum of its cells, because they are sums of one vector of base-cell
  estimates (see :mod:`ldpkit.inference`). They may be negative.
- **Consistent** estimates also add up, are never negative and sum to one: top-down
  Norm-Sub for trees, iterative proportional fitting to Norm-Sub marginals for tables.
  They trade a little bias for lower error and are offered beside the unbiased ones,
  never in their place. Standard errors and intervals refer to the unbiased estimates.
- **Intervals** are continuity-corrected score intervals (``interval == "score_cc"``):
  the values theta in [0, 1] whose variance V(theta), taken at theta itself, puts the
  estimate within ``z sqrt(V(theta))`` plus half the change one support count makes to
  it (see :func:`ldpkit.inference.score_interval`). They always lie in [0, 1].
- **Simultaneous intervals** (``ci(level, simultaneous=True)``) cover every estimate of a
  group together (the nodes at one depth, a subtree's children, the cells, a marginal)
  with probability at least ``level``: each of the k is made at level ``1 - (1 - level) / k``
  (Bonferroni, as :meth:`ldpkit.estimates.FrequencyEstimate.ci`). Far in the tails the
  score interval's normal shape misses the skewed count of a nearly empty cell, so an
  estimate that is one oracle item's support count (a joint table's cells, a rollup's
  leaves, each marginal of ``split``) takes the categorical interval of that count
  (:func:`ldpkit.intervals.support_interval`: skew-corrected score, or exact where the
  count's variance is small); the others (sums of several counts or views) keep the
  score interval at the Bonferroni level, and those that combine several views
  (``joint_marginals``, ``levels``) have its z Cornish-Fisher-widened on the side their
  skewness at the bound makes long (:class:`ldpkit.inference.Skew`: the estimate's third
  cumulant at the hypothesised value, summed over the users from each one's exact law:
  which view it reports and that view's oracle, every coefficient included). The
  widening only moves bounds outwards.

Every result turns into plain JSON-ready Python (``to_dict``, ``items``): floats (None
where not finite), lists, node paths as strings, cells as ``{attribute: category}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import ranking
from ._json import finite_or_none
from ._validation import check_level
from .domains import Table, Tree
from .errors import ParameterError
from .estimates import ConfidenceInterval, normal_quantile
from .inference import Quadratic, Skew, score_interval
from .intervals import support_interval
from .ranking import MostCommon, Ranks
from .screening import LinearShift

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

INTERVAL_METHOD = "score_cc"


@dataclass(frozen=True, eq=False)
class SupportCounts:
    """Which outputs are one oracle item's support count, and that count.

    ``counts`` (R, outputs) holds the count C of each output that is one (the estimate
    is then ``(C / n - q) / (p - q)``), NaN for the others; ``n`` (R,) the reports
    counted; ``p`` and ``q`` (outputs,) the oracle's support probabilities.
    """

    counts: FloatArray
    n: FloatArray
    p: FloatArray
    q: FloatArray

    def take(self, part: IntArray | slice) -> SupportCounts:
        return SupportCounts(self.counts[:, part], self.n, self.p[part], self.q[part])

    def row(self, r: int) -> SupportCounts:
        return SupportCounts(self.counts[r : r + 1], self.n[r : r + 1], self.p, self.q)


SKEW_STEPS = 4
"""Fixed-point steps of the skew-widened bounds (each moves a bound outwards only)."""


def _skew_widened(
    est: FloatArray,
    quadratic: Quadratic,
    skew: Skew,
    z: float,
    bounds: tuple[FloatArray, FloatArray],
) -> tuple[FloatArray, FloatArray]:
    """Score bounds whose z is Cornish-Fisher-widened on the side the estimate's skew
    at the bound makes long: a lower bound theta must not reject an estimate that the
    right-skewed law at theta reaches with probability alpha / 2 (z + gamma (z^2 - 1)
    / 6, gamma the skewness at theta), an upper bound likewise for left skew. Skewness
    falls as theta leaves the nearly empty end, so each step re-evaluates it at the
    last bound, which only moves outwards. Never narrower than the plain bounds."""
    low, high = bounds
    spread = (z * z - 1.0) / 6.0
    for _ in range(SKEW_STEPS):
        zs = []
        for at, sign in ((low, 1.0), (high, -1.0)):
            var = np.maximum(quadratic.at(at), 1e-300)
            gamma = sign * skew.third_cumulant(at) / var**1.5
            zs.append(z + np.maximum(np.nan_to_num(gamma), 0.0) * spread)
        low = np.minimum(low, score_interval(est, quadratic, zs[0])[0])
        high = np.maximum(high, score_interval(est, quadratic, zs[1])[1])
    return low, high


def simultaneous_bounds(
    estimates: FloatArray,
    quadratic: Quadratic,
    supports: SupportCounts | None,
    level: float,
    skew: Skew | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Intervals of k estimates (the last axis) that cover all k together with probability
    at least ``level`` (Bonferroni; see the module). ``estimates`` (R, k) or (k,)."""
    est = np.asarray(estimates, dtype=np.float64)
    k = max(int(est.shape[-1]), 1)
    z = normal_quantile(level, comparisons=k)
    low, high = score_interval(est, quadratic, z)
    if skew is not None:
        low, high = _skew_widened(est, quadratic, skew, z, (low, high))
    if supports is None:
        return low, high
    low2, high2 = np.atleast_2d(low).copy(), np.atleast_2d(high).copy()
    counted = np.isfinite(supports.counts) & np.isfinite(np.atleast_2d(est))
    counted &= (supports.n > 0)[:, None]
    for n in np.unique(supports.n[counted.any(axis=1)]):
        rows = supports.n == n
        for p, q in {(float(a), float(b)) for a, b in zip(supports.p, supports.q, strict=True)}:
            cols = (supports.p == p) & (supports.q == q)
            where = counted & rows[:, None] & cols[None, :]
            if where.any():
                b = support_interval(
                    supports.counts[where], int(n), p, q, level=level, comparisons=k
                )
                low2[where], high2[where] = b.low, b.high
    return low2.reshape(np.shape(low)), high2.reshape(np.shape(high))


@dataclass(frozen=True, eq=False)
class OutputArrays:
    """Every output's numbers for R aggregates at once, as (R, outputs) arrays.

    What a structured mechanism's ``estimate_arrays`` returns (one row per aggregate:
    simulated campaigns, time buckets); ``estimate`` wraps row 0 of it into a result
    object. Outputs are in the mechanism's order (every depth of a tree from the top;
    the cells then each attribute's categories of a table).
    """

    n: FloatArray
    estimates: FloatArray
    stderr: FloatArray
    consistent: FloatArray
    quadratic: Quadratic
    forgery: LinearShift
    """How far forged reports can move each output (the same for every row)."""
    interval: str = INTERVAL_METHOD
    supports: SupportCounts | None = None
    """The outputs that are one oracle item's support count (simultaneous intervals)."""
    skew: Skew | None = None
    """Third cumulants of outputs that combine several views (simultaneous intervals)."""

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        low, high = score_interval(self.estimates, self.quadratic, normal_quantile(level))
        return ConfidenceInterval(low, high)

    def simultaneous_ci(self, part: slice, level: float = 0.95) -> ConfidenceInterval:
        """Intervals of the outputs in ``part`` (one group: a depth, the cells, a marginal)
        covering all of them together, per row, with probability at least ``level``."""
        supports = None if self.supports is None else self.supports.take(part)
        skew = None if self.skew is None else self.skew.take(part)
        low, high = simultaneous_bounds(
            self.estimates[:, part], self.quadratic.take(part), supports, level, skew
        )
        return ConfidenceInterval(low, high)

    def group(self, row: int, part: slice, keys: tuple[Any, ...], key_name: str) -> GroupEstimate:
        return GroupEstimate(
            keys,
            key_name,
            int(self.n[row]),
            self.estimates[row, part],
            self.stderr[row, part],
            self.consistent[row, part],
            self.quadratic.row(row).take(part),
            self.forgery.take(part),
            self.interval,
            None if self.supports is None else self.supports.row(row).take(part),
            None if self.skew is None else self.skew.row(row).take(part),
        )


@dataclass(frozen=True, eq=False)
class GroupEstimate:
    """Estimates of a group of categories: the nodes at one depth, the cells, a marginal.

    Attributes
    ----------
    keys : tuple
        What each estimate is about: a node path (str) or a cell (``{attribute: category}``).
    key_name : str
        ``"category"`` or ``"cell"``: the field that holds the key in :meth:`items`.
    n : int
        Number of reports.
    frequencies : ndarray
        Unbiased estimates of each category's fraction of the users (may be < 0 or > 1).
    stderr : ndarray
        Standard errors: the covariance formula at the consistent estimate (plug-in).
    forgery : LinearShift
        How far forged reports can move each estimate (:meth:`forgery_shift`).
    interval : str
        How :meth:`ci` builds intervals (``"score_cc"``, see the module).
    supports : SupportCounts or None
        The estimates that are one oracle item's support count (one row), for
        simultaneous intervals.
    skew : Skew or None
        Third cumulants of the estimates that combine several views (one row), for
        simultaneous intervals.
    """

    keys: tuple[Any, ...]
    key_name: str
    n: int
    frequencies: FloatArray
    stderr: FloatArray
    consistent_frequencies: FloatArray
    quadratic: Quadratic
    forgery: LinearShift
    interval: str = INTERVAL_METHOD
    supports: SupportCounts | None = None
    skew: Skew | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def counts(self) -> FloatArray:
        """Estimated number of users in each category (``frequencies * n``)."""
        return self.frequencies * self.n

    @property
    def count_stderr(self) -> FloatArray:
        return self.stderr * self.n

    def ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        """Per-category intervals of the fractions, within [0, 1] (see the module).

        With ``simultaneous=True`` all of this group's intervals cover their truths
        together with probability at least ``level`` (Bonferroni over ``len(self)``).
        """
        if simultaneous:
            low, high = simultaneous_bounds(
                self.frequencies, self.quadratic, self.supports, check_level(level), self.skew
            )
        else:
            low, high = score_interval(self.frequencies, self.quadratic, normal_quantile(level))
        return ConfidenceInterval(low, high)

    def count_ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        low, high = self.ci(level, simultaneous=simultaneous)
        return ConfidenceInterval(np.asarray(low) * self.n, np.asarray(high) * self.n)

    def consistent(self) -> FloatArray:
        """Non-negative estimates that add up across the structure (biased; see module)."""
        return self.consistent_frequencies

    def take(self, index: IntArray) -> GroupEstimate:
        """The estimates of the categories at ``index`` (in that order)."""
        idx = np.asarray(index, dtype=np.int64)
        return GroupEstimate(
            tuple(self.keys[i] for i in idx.tolist()),
            self.key_name,
            self.n,
            self.frequencies[idx],
            self.stderr[idx],
            self.consistent_frequencies[idx],
            self.quadratic.take(idx),
            self.forgery.take(idx),
            self.interval,
            None if self.supports is None else self.supports.take(idx),
            None if self.skew is None else self.skew.take(idx),
        )

    def difference_variance(self, i: IntArray, j: IntArray) -> FloatArray:
        """A bound on the variance of ``f_j - f_i`` when the two fractions are equal (to
        their estimates' mean, within [0, 1]): ``(sd_i + sd_j)^2`` from each one's variance
        along its own value (:class:`~ldpkit.inference.Quadratic`), whatever their
        covariance (:func:`ldpkit.ranking.from_stderr`)."""
        f, v = self.frequencies, self.quadratic

        def stderr(a: IntArray, b: IntArray) -> FloatArray:
            theta = np.clip((f[a] + f[b]) / 2.0, 0.0, 1.0)
            return np.sqrt(np.maximum(v.v0[a] + theta * (v.v1[a] + theta * v.v2[a]), 0.0))

        return ranking.from_stderr(stderr)(i, j)

    def most_common(self, level: float = 0.95) -> MostCommon:
        """The category of largest estimate and the categories that could be the most
        common at ``level`` (:func:`ldpkit.ranking.most_common`)."""
        return ranking.most_common(self.frequencies, self.difference_variance, level)

    def ranks(self, level: float = 0.95, *, top: int = ranking.TOP) -> Ranks:
        """Rank intervals of the ``top`` categories, holding together at ``level``."""
        return ranking.ranks(self.frequencies, self.difference_variance, level, top=top)

    def forgery_shift(self, beta: float) -> FloatArray:
        """The largest change a forged fraction ``beta`` of the n reports (any reports the
        mechanism accepts, spread over its views as suits them best) can make to each
        category's expected unbiased estimate, whatever the honest population: through
        the linear estimator, :class:`ldpkit.screening.LinearShift`."""
        return self.forgery.shift(beta)

    def items(
        self, level: float = 0.95, *, consistent: bool = False, simultaneous: bool = False
    ) -> list[dict[str, Any]]:
        """One JSON-ready dict per category: key, estimate, stderr, low, high (+ consistent);
        ``simultaneous``: the intervals cover the whole group together (:meth:`ci`)."""
        low, high = self.ci(level, simultaneous=simultaneous)
        rows = []
        lows, highs = np.asarray(low).tolist(), np.asarray(high).tolist()
        for i, key in enumerate(self.keys):
            row: dict[str, Any] = {
                self.key_name: dict(key) if isinstance(key, Mapping) else key,
                "estimate": finite_or_none(self.frequencies[i]),
                "stderr": finite_or_none(self.stderr[i]),
                "low": finite_or_none(lows[i]),
                "high": finite_or_none(highs[i]),
            }
            if consistent:
                row["consistent"] = finite_or_none(self.consistent_frequencies[i])
            rows.append(row)
        return rows


@dataclass(frozen=True, eq=False)
class HierarchyEstimate:
    """Estimates at every depth of a tree of categories.

    ``level(depth)`` gives the nodes at a depth (1 = top level; default the leaves'
    depth), ``subtree(path, depth)`` the nodes under a node, ``node(path)`` one node.
    Within every result a parent equals the sum of its children exactly, for the
    unbiased and for the consistent estimates alike.
    """

    mechanism: str
    epsilon: float
    n: int
    tree: Tree
    levels: tuple[GroupEstimate, ...]
    interval: str = INTERVAL_METHOD

    def level(self, depth: int | None = None) -> GroupEstimate:
        d = self.tree.depth if depth is None else self.tree.check_depth(depth)
        return self.levels[d - 1]

    def subtree(self, path: str, depth: int | None = None) -> GroupEstimate:
        """The nodes under ``path`` at ``depth`` (default: its children)."""
        members = self.tree.descendants(path, depth)
        d = self.tree.locate(path)[0] if depth is None else self.tree.check_depth(depth)
        if depth is None:
            d = min(d + 1, self.tree.depth)
        return self.levels[d - 1].take(members)

    def node(self, path: str) -> GroupEstimate:
        d, i = self.tree.locate(path)
        return self.levels[d - 1].take(np.array([i]))

    def to_dict(
        self,
        depth: int | None = None,
        level: float = 0.95,
        *,
        consistent: bool = False,
        simultaneous: bool = False,
    ) -> dict[str, Any]:
        """The fields of ``GET /v1/estimates/{name}?depth=D`` (without metric metadata);
        ``simultaneous``: the depth's intervals cover all its nodes together."""
        d = self.tree.depth if depth is None else self.tree.check_depth(depth)
        group = self.level(d)
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "n": self.n,
            "depth": d,
            "interval": self.interval,
            "simultaneous": bool(simultaneous),
            "items": group.items(level, consistent=consistent, simultaneous=simultaneous),
        }

    def max_violation(self, *, consistent: bool = False) -> float:
        """Largest |parent - sum of its children| over the tree (the top level against 1)."""
        worst = 0.0
        above = np.array([1.0])
        for d, group in enumerate(self.levels):
            values = group.consistent() if consistent else group.frequencies
            sums = np.bincount(self.tree.parents[d], weights=values, minlength=above.size)
            worst = max(worst, float(np.max(np.abs(sums - above))))
            above = values
        return worst


@dataclass(frozen=True, eq=False)
class TableEstimate:
    """Estimates of the cells of a table and of each attribute's marginal.

    ``cells`` is None for a design that cannot estimate cells (``split``: each
    attribute reported on its own answers the marginals only).
    """

    mechanism: str
    epsilon: float
    n: int
    table: Table
    cells: GroupEstimate | None
    marginals: Mapping[str, GroupEstimate]
    interval: str = INTERVAL_METHOD

    def marginal(self, name: str) -> GroupEstimate:
        self.table.axis(name)
        return self.marginals[name]

    def grid(self, *, consistent: bool = False) -> FloatArray:
        """The cell estimates as an array of the table's shape (rows: first attribute)."""
        if self.cells is None:
            raise ParameterError(f"{self.mechanism!r} estimates marginals only, not cells")
        values = self.cells.consistent() if consistent else self.cells.frequencies
        return values.reshape(self.table.shape)

    def to_dict(
        self, level: float = 0.95, *, consistent: bool = False, simultaneous: bool = False
    ) -> dict[str, Any]:
        """The fields of ``GET /v1/estimates/{name}`` for a table (without metadata);
        ``simultaneous``: the cells' intervals cover all cells together, and each
        marginal's all its categories together (each group at ``level``)."""
        asked = {"consistent": consistent, "simultaneous": simultaneous}
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "n": self.n,
            "interval": self.interval,
            "simultaneous": bool(simultaneous),
            "items": [] if self.cells is None else self.cells.items(level, **asked),
            "marginals": {
                name: group.items(level, **asked) for name, group in self.marginals.items()
            },
        }

    def max_violation(self, *, consistent: bool = False) -> float:
        """Largest gap between a marginal and the sum of its cells, or a marginal's total and 1."""
        worst = 0.0
        for name, group in self.marginals.items():
            values = group.consistent() if consistent else group.frequencies
            worst = max(worst, abs(float(values.sum()) - 1.0))
            if self.cells is not None:
                cells = self.cells.consistent() if consistent else self.cells.frequencies
                sums = np.bincount(self.table.labels(name), weights=cells, minlength=len(group))
                worst = max(worst, float(np.max(np.abs(sums - values))))
        return worst
