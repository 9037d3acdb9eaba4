"""Result objects: estimates with standard errors and confidence intervals.

Modelled on scipy.stats results: the estimator returns an object, and intervals come
from ``estimate.ci(level)`` as a :class:`ConfidenceInterval` ``(low, high)``.

The estimand is always about *the users who reported*: the fraction of them holding
each item, or the mean of their values (what the mechanisms' variance formulas describe
given those values). Intervals come from the distribution of what is counted, not from a
plug-in normal (see :mod:`ldpkit.intervals`): frequencies invert a score test or, where
expected counts are small, the exact tests on each item's support count; means use the
mechanism's known noise variance (or, for Duchi's binary reports, an interval on their
proportion). Intervals are intersected with what the estimand can be ([0, 1] for a
fraction, the bounds for a mean); point estimates stay unbiased and are never clipped.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from . import ranking
from .intervals import EXACT, KNOWN_VARIANCE, SCORE, Bounds, binomial_interval, support_interval
from .intervals import normal_quantile as normal_quantile  # the estimators' modules import it
from .ranking import MostCommon, Ranks
from .screening import check_fraction

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class ConfidenceInterval(NamedTuple):
    """Lower and upper ends of a confidence interval (arrays for per-item estimates)."""

    low: FloatArray | float
    high: FloatArray | float


def norm_sub(frequencies: npt.ArrayLike) -> FloatArray:
    """Norm-Sub consistency (Wang et al., NDSS 2020): non-negative, summing to one.

    Finds the shift ``delta`` such that ``sum(max(f - delta, 0)) == 1`` and returns
    ``max(f - delta, 0)``. This is post-processing, so it costs no privacy; it is biased
    (it trades a little bias for lower error on the many near-zero items) and so is
    offered beside the unbiased estimate, never in its place.
    """
    f = np.asarray(frequencies, dtype=np.float64)
    if f.ndim != 1 or f.size == 0 or not np.all(np.isfinite(f)):
        return np.full(f.shape, np.nan)
    desc = np.sort(f)[::-1]
    cumulative = np.cumsum(desc)
    deltas = (cumulative - 1.0) / np.arange(1, f.size + 1)
    # The largest k whose k-th largest value stays positive after the shift.
    keep = np.nonzero(desc - deltas > 0)[0]
    delta = deltas[keep[-1]] if keep.size else deltas[-1]
    result: FloatArray = np.maximum(f - delta, 0.0)
    return result


@dataclass(frozen=True, eq=False)
class FrequencyEstimate:
    """Unbiased estimate of each item's frequency, from a frequency oracle.

    Attributes
    ----------
    mechanism, epsilon : the mechanism that produced the reports and its per-report epsilon.
    n : number of reports.
    frequencies : unbiased estimate of each item's fraction of the reporters (may be < 0
        or > 1).
    stderr : standard error of each fraction, from the mechanism's variance formula with
        the estimate plugged in (clipped to [0, 1] first). Intervals do not use it.
    support_counts : how many reports support each item (the sufficient statistic).
    p, q : the probability that a report supports an item its reporter holds (p) or
        does not hold (q).
    """

    mechanism: str
    epsilon: float
    n: int
    frequencies: FloatArray
    stderr: FloatArray
    support_counts: FloatArray
    p: float
    q: float
    _cache: dict[tuple[float, bool], Bounds] = field(default_factory=dict, repr=False)
    _norm_sub: list[FloatArray] = field(default_factory=list, repr=False)
    co_support: tuple[float, float] | None = None
    """``(r1, r0)``: the probability that a report supports two given items, one of them
    its reporter's (r1) or neither (r0) (:meth:`FrequencyOracle.pair_support`); None where
    it depends on the items, and :meth:`difference_variance` takes its bound (0, 0)."""

    @property
    def domain_size(self) -> int:
        return int(self.frequencies.size)

    @property
    def counts(self) -> FloatArray:
        """Estimated number of users holding each item (``frequencies * n``)."""
        return self.frequencies * self.n

    @property
    def count_stderr(self) -> FloatArray:
        return self.stderr * self.n

    def _bounds(self, level: float, simultaneous: bool) -> Bounds:
        key = (float(level), bool(simultaneous))
        if key not in self._cache:
            if self.n == 0:
                nan = np.full(self.domain_size, np.nan)
                self._cache[key] = Bounds(nan, nan.copy(), np.zeros(self.domain_size, bool))
            else:
                self._cache[key] = support_interval(
                    self.support_counts,
                    self.n,
                    self.p,
                    self.q,
                    level=level,
                    comparisons=self.domain_size if simultaneous else 1,
                )
        return self._cache[key]

    def ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        """Per-item intervals of the fractions, within [0, 1].

        With ``simultaneous=True`` each interval is made at level ``1 - (1 - level) / d``
        (Bonferroni), so that all d of them cover their truths together with probability
        at least ``level`` whatever the dependence between items.
        """
        b = self._bounds(level, simultaneous)
        return ConfidenceInterval(b.low, b.high)

    def interval_methods(
        self, level: float = 0.95, *, simultaneous: bool = False
    ) -> npt.NDArray[np.str_]:
        """Which method made each item's interval: ``"score"`` or ``"exact"``."""
        return self._bounds(level, simultaneous).methods()

    def interval_method(self, level: float = 0.95, *, simultaneous: bool = False) -> str:
        """One word for the whole estimate: ``"score"``, ``"exact"`` or ``"score+exact"``."""
        exact = self._bounds(level, simultaneous).exact
        if exact.all():
            return EXACT
        return SCORE + "+" + EXACT if exact.any() else SCORE

    def count_ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        """The same intervals for the number of reporters holding each item."""
        low, high = self.ci(level, simultaneous=simultaneous)
        return ConfidenceInterval(np.asarray(low) * self.n, np.asarray(high) * self.n)

    def forgery_shift(self, beta: float) -> FloatArray:
        """The largest change a forged fraction ``beta`` of the n reports (any reports the
        mechanism accepts) can make to each item's expected estimate, whatever the honest
        population: ``beta (1 - q) / (p - q)`` up (every forged report supports the item,
        which no honest one holds), ``beta p / (p - q)`` down (none does, every honest
        reporter holds it); per item, the larger (:func:`ldpkit.screening.part_gains`)."""
        b = check_fraction(beta)
        p, q = self.p, self.q
        return np.full(self.domain_size, b * max(1.0 - q, p) / (p - q))

    def consistent(self) -> FloatArray:
        """Norm-Sub post-processed fractions: non-negative and summing to one (biased)."""
        if not self._norm_sub:
            self._norm_sub.append(norm_sub(self.frequencies))
        return self._norm_sub[0]

    def difference_variance(self, i: IntArray, j: IntArray) -> FloatArray:
        """The variance of ``f_j - f_i`` when the two items' fractions are equal (their
        sum s taken from the estimate, within [0, 1]): per report, ``2 (q - r0) +
        s ((p - q) - (p - q)^2 - 2 (r1 - r0))``, over ``n (p - q)^2``. It falls as the
        co-support r0, r1 rises, so an oracle whose co-support depends on the items
        (local hashing, Hadamard) takes r1 = r0 = 0: randomized response's, an upper bound.
        """
        return self._difference_variance_at(
            np.clip(self.frequencies[i] + self.frequencies[j], 0.0, 1.0)
        )

    def _difference_variance_at(self, s: FloatArray) -> FloatArray:
        """:meth:`difference_variance` of two items whose fractions sum to ``s`` (linear in
        s: its least over [0, 1] is at an end)."""
        p, q = self.p, self.q
        r1, r0 = self.co_support or (0.0, 0.0)
        per_report = 2.0 * (q - r0) + s * ((p - q) - (p - q) ** 2 - 2.0 * (r1 - r0))
        return np.asarray(per_report / (max(self.n, 1) * (p - q) ** 2))

    def most_common(self, level: float = 0.95) -> MostCommon:
        """The mode and the items that could be the most common at ``level``
        (:func:`ldpkit.ranking.most_common`, pairwise tests with this oracle's covariance)."""
        return ranking.most_common(
            self.frequencies,
            self.difference_variance,
            level,
            step=self._step(),
            floor=self._variance_floor(),
        )

    def _variance_floor(self) -> float:
        """The least :meth:`difference_variance` of any two items (at s = 0 or 1)."""
        return float(np.min(self._difference_variance_at(np.array([0.0, 1.0]))))

    def ranks(self, level: float = 0.95, *, top: int = ranking.TOP) -> Ranks:
        """Rank intervals of the ``top`` items, holding together at ``level``
        (:func:`ldpkit.ranking.ranks`)."""
        return ranking.ranks(
            self.frequencies, self.difference_variance, level, top=top, step=self._step()
        )

    def _step(self) -> float:
        """Half the smallest change of a difference of two items' estimates: support
        counts move by whole reports."""
        return 0.5 / (max(self.n, 1) * (self.p - self.q))

    def robust(self, beta: float) -> RobustFrequencies:
        """What this estimate can claim when up to a fraction ``beta`` of its reports may be
        forged, screened or not (:class:`RobustFrequencies`)."""
        return RobustFrequencies(self, check_fraction(beta))


@dataclass(frozen=True, eq=False)
class RobustFrequencies:
    """Frequencies robust to a forged fraction ``beta`` of the n reports (any reports the
    mechanism accepts). The genuine reporters' fractions f lie on the simplex whatever they
    hold, and the plain estimate's expectation is ``(1 - b) f + b (x - q) / (p - q)`` for a
    forged share ``b <= beta`` supporting items at rates x; many (f, x) explain the same
    aggregate, so no fit recovers f itself. What the aggregate does reveal is what no honest
    population gives: mass beyond the simplex.

    - :attr:`frequencies` (a point estimate): the Euclidean projection of the plain
      estimate onto the simplex (Norm-Sub, as :meth:`FrequencyEstimate.consistent`; no
      beta needed). It removes what no honest population explains: a lift of every item
      (reports supporting everything) exactly, mass claimed beyond 100% (randomized
      response's targets) down to 100% in all, noise. Its total squared error against the
      genuine fractions never exceeds the plain estimate's, honest or forged (a projection
      onto a convex set holding them); it is biased (small items to 0, large ones down).
    - :meth:`ci`: intervals for each genuine fraction that hold with up to ``floor(beta n)``
      forged reports among the n: the item's honest count is then between ``C - m`` and C
      of ``n - m`` honest reports, m forged, and the union of the support-count intervals
      over that range is reached at its ends (fewer supporting reports of fewer honest ones
      for the low end, all of them for the high one) or with none forged (the plain ones).
    """

    estimate: FrequencyEstimate
    beta: float
    _cache: dict[tuple[float, bool], ConfidenceInterval] = field(default_factory=dict, repr=False)

    @property
    def frequencies(self) -> FloatArray:
        return self.estimate.consistent()

    @property
    def forged(self) -> int:
        """The most forged reports among the n the intervals allow: ``floor(beta n)``."""
        return math.floor(self.beta * self.estimate.n + 1e-9)

    def ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        """Per-item intervals for the genuine fractions, each containing the plain one."""
        key = (float(level), bool(simultaneous))
        if key not in self._cache:
            e, m = self.estimate, self.forged
            low, high = (np.asarray(b) for b in e.ci(level, simultaneous=simultaneous))
            if m > 0:
                honest = functools.partial(
                    support_interval, n=e.n - m, p=e.p, q=e.q, level=level,
                    comparisons=e.domain_size if simultaneous else 1,
                )  # fmt: skip
                low = np.minimum(low, honest(np.maximum(e.support_counts - m, 0.0)).low)
                high = np.maximum(high, honest(np.minimum(e.support_counts, e.n - m)).high)
            self._cache[key] = ConfidenceInterval(low, high)
        return self._cache[key]

    def forgery_shift(self) -> FloatArray:
        """The largest change the forged fraction can make to each robust fraction: a
        projection's shift moves with the items it keeps, so an item moves by at most its
        own rise plus the others' fall, ``beta (1 - q + p) / (p - q)``, and never beyond 1."""
        e = self.estimate
        return np.full(e.domain_size, min(1.0, self.beta * (1.0 - e.q + e.p) / (e.p - e.q)))

    def to_dict(self, level: float = 0.95, *, simultaneous: bool = False) -> dict[str, object]:
        """The robust answer: ``forgery_fraction``, ``forged_reports`` (the most the
        intervals allow), ``level``, and per item ``estimate``, ``low``, ``high`` and
        ``forgery_shift``."""
        low, high = self.ci(level, simultaneous=simultaneous)
        return {
            "forgery_fraction": self.beta,
            "forged_reports": self.forged,
            "level": float(level),
            "simultaneous": bool(simultaneous),
            "estimate": _json_floats(self.frequencies),
            "low": _json_floats(low),
            "high": _json_floats(high),
            "forgery_shift": _json_floats(self.forgery_shift()),
        }


@dataclass(frozen=True, eq=False)
class RobustMean:
    """A mean robust to a forged fraction ``beta`` of the n reports. The genuine mean lies
    within the bounds whatever the values, so :attr:`mean` is the plain mean clamped to
    them (the projection, as :attr:`MeanEstimate.clamped_mean`; no beta needed). The plain
    mean is ``(1 - b) m + b y`` for a forged share ``b <= beta`` of mean report y within
    the report range ``[bottom, top]``, so m lies in ``[(L - beta top) / (1 - beta),
    (H - beta bottom) / (1 - beta)]`` for the plain interval [L, H] (each end is monotone in
    b), within the bounds: :meth:`ci`."""

    estimate: MeanEstimate
    beta: float

    @property
    def mean(self) -> float:
        return self.estimate.clamped_mean

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        """The interval for the genuine reporters' mean, containing the plain one, within
        the bounds; one wholly beyond them (more than beta forged, or a miss) is kept as it
        is, never a point at a bound."""
        e, b = self.estimate, self.beta
        (lo, hi), (bottom, top) = e.bounds, e.report_range
        low, high = e.ci(level)
        if b:  # (an unknown report range gives the whole bounds)
            low, high = (low - b * top) / (1.0 - b), (high - b * bottom) / (1.0 - b)
        if low >= hi or high <= lo:
            return ConfidenceInterval(low, high)
        return ConfidenceInterval(max(low, lo), min(high, hi))

    def forgery_shift(self) -> float:
        """The largest change the forged fraction can make to the robust mean: clamping
        moves it no more than the mean, and keeps it within the bounds."""
        lo, hi = self.estimate.bounds
        return min(self.estimate.forgery_shift(self.beta), hi - lo)

    def to_dict(self, level: float = 0.95) -> dict[str, object]:
        """The robust answer: ``forgery_fraction``, ``level``, ``mean``, ``low``, ``high``,
        ``forgery_shift``."""
        low, high = self.ci(level)
        values = _json_floats(np.array([self.mean, low, high, self.forgery_shift()]))
        return {"forgery_fraction": self.beta, "level": float(level)} | dict(
            zip(("mean", "low", "high", "forgery_shift"), values, strict=True)
        )


def _json_floats(values: FloatArray | float) -> list[float | None]:
    """Floats for JSON, None where not finite."""
    return [v if math.isfinite(v) else None for v in np.atleast_1d(values).tolist()]


@functools.lru_cache(maxsize=1024)
def _binary_bounds(positives: int, n: int, level: float) -> tuple[float, float, bool]:
    b = binomial_interval(np.array([float(positives)]), n, level=level)
    return float(b.low[0]), float(b.high[0]), bool(b.exact[0])


@dataclass(frozen=True)
class BinaryCounts:
    """What a mean from binary reports (Duchi's ±C) needs for its interval.

    ``positives`` of the n reports are +1; each is +1 with probability
    ``1/2 + t / (2 scale)`` for a reporter at unit value t, so their proportion theta
    maps to the reporters' mean unit value as ``scale (2 theta - 1)``.
    """

    positives: int
    scale: float


@dataclass(frozen=True)
class MeanEstimate:
    """Unbiased estimate of the mean of the values of the users who reported.

    Attributes
    ----------
    mechanism, epsilon, n : as for frequencies.
    mean : the unbiased estimate (may lie outside the bounds; see :attr:`clamped_mean`).
    stderr : its standard error, from the mechanism's noise variance given the reporters'
        values (estimated from the reports, floored by the mechanism's smallest).
    bounds : the metric's bounds: the estimand lies within them.
    binary : for binary reports (Duchi), the counts behind an interval on their proportion.
    """

    mechanism: str
    epsilon: float
    n: int
    mean: float
    stderr: float
    bounds: tuple[float, float] = (-math.inf, math.inf)
    binary: BinaryCounts | None = None
    report_range: tuple[float, float] = (-math.inf, math.inf)
    """The range of one debiased report, in the metric's units (what a forgery can send)."""

    @property
    def clamped_mean(self) -> float:
        """The mean clamped to the bounds: post-processing, biased near a bound but never
        outside the range of possible values (what a poisoned or noisy estimate cannot be)."""
        lo, hi = self.bounds
        return min(max(self.mean, lo), hi) if math.isfinite(self.mean) else self.mean

    def forgery_shift(self, beta: float) -> float:
        """The largest change a forged fraction ``beta`` of the n reports (any the mechanism
        accepts) can make to the expected mean, whatever the honest population: the mean is
        ``(1 - beta) m_honest + beta m_forged`` with ``m_honest`` in the bounds and
        ``m_forged`` in :attr:`report_range`, so ``beta max(top - lo, hi - bottom)``."""
        b = check_fraction(beta)
        (lo, hi), (bottom, top) = self.bounds, self.report_range
        return b * max(top - lo, hi - bottom)

    def robust(self, beta: float) -> RobustMean:
        """The mean and interval robust to a forged fraction ``beta`` (:class:`RobustMean`)."""
        return RobustMean(self, check_fraction(beta))

    def interval_method(self, level: float = 0.95) -> str:
        """``"known-variance"``, or for binary reports ``"score"`` or ``"exact"``."""
        if self.binary is None or self.n == 0:
            return KNOWN_VARIANCE
        exact = _binary_bounds(self.binary.positives, self.n, float(level))[2]
        return EXACT if exact else SCORE

    def _reports_interval(self, level: float) -> tuple[float, float]:
        """The interval the reports give, before it meets the bounds."""
        if self.binary is not None:
            lo, hi = self.bounds
            theta_low, theta_high, _ = _binary_bounds(self.binary.positives, self.n, float(level))
            half, scale = (hi - lo) / 2.0, self.binary.scale
            low = lo + (scale * (2.0 * theta_low - 1.0) + 1.0) * half
            return low, lo + (scale * (2.0 * theta_high - 1.0) + 1.0) * half
        z = normal_quantile(level)
        return self.mean - z * self.stderr, self.mean + z * self.stderr

    def beyond_bounds(self, level: float = 0.95) -> str | None:
        """``"upper"`` (``"lower"``) when the interval the reports give lies wholly above
        (below) the bounds: no population of values within the bounds gives such reports
        but with probability about ``(1 - level) / 2`` (the interval's own miss rate on
        that side); forged reports are the likely cause (see :meth:`forgery_shift`). None
        otherwise, and without reports."""
        if self.n == 0 or not math.isfinite(self.mean):
            return None
        return self._side(*self._reports_interval(level))

    def _side(self, low: float, high: float) -> str | None:
        lo, hi = self.bounds
        return "upper" if low >= hi else "lower" if high <= lo else None

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        """Interval for the reporters' mean: the reports' interval intersected with the
        bounds (the mean lies within them). One that lies wholly beyond them (nothing is
        left, or a point at a bound) is kept as the reports give it, never zero-width:
        :meth:`beyond_bounds` says which side."""
        if self.n == 0 or not math.isfinite(self.mean):
            return ConfidenceInterval(math.nan, math.nan)
        low, high = self._reports_interval(level)
        if self._side(low, high) is None:
            lo, hi = self.bounds
            low, high = max(low, lo), min(high, hi)
        return ConfidenceInterval(low, high)


@dataclass(frozen=True)
class MeanRank:
    """The reporters' mean rank of ordered categories (the first is rank 1, the last d),
    unbiased, with its standard error ``sqrt(w^T Cov w)`` from the frequencies'
    covariance. Its interval is normal (``estimate -/+ z stderr``), within [1, d].

    Attributes
    ----------
    mean : the estimate (may lie outside [1, d]).
    stderr : its standard error.
    n : the number of reports.
    ranks : d, the number of categories.
    """

    mean: float
    stderr: float
    n: int
    ranks: int
    method: ClassVar[str] = "normal"
    """The interval's method, as the answer's ``interval`` names it."""

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        if self.n == 0 or not math.isfinite(self.mean):
            return ConfidenceInterval(math.nan, math.nan)
        half = normal_quantile(level) * self.stderr
        low = min(max(self.mean - half, 1.0), float(self.ranks))
        return ConfidenceInterval(low, min(max(self.mean + half, 1.0), float(self.ranks)))

    def to_dict(self, level: float = 0.95) -> dict[str, object]:
        """``estimate``, ``stderr``, ``low``, ``high``, ``interval`` (:attr:`method`)."""
        low, high = self.ci(level)
        values = _json_floats(np.array([self.mean, self.stderr, low, high]))
        return dict(zip(("estimate", "stderr", "low", "high"), values, strict=True)) | {
            "interval": self.method
        }


@dataclass(frozen=True)
class SharesAtLeast:
    """Ordered categories: the share of reporters at each category or a later one, for
    every category but the first (whose share is 1): "4 stars or more" on a 1-5 rating.
    Unbiased (sums of the unbiased frequencies), with standard errors and intervals at
    one ``level`` (within [0, 1]); ``simultaneous`` when all d - 1 hold together
    (Bonferroni).

    Attributes
    ----------
    start : (d - 1,) each share's first category, as 0-based ranks 1 .. d - 1.
    estimate, stderr, low, high : (d - 1,) each share's estimate, standard error, bounds.
    level : the intervals' level.
    simultaneous : whether the intervals hold together.
    interval : the method, ``"normal"`` (estimate -/+ z stderr) or ``"score"``.
    """

    start: IntArray
    estimate: FloatArray
    stderr: FloatArray
    low: FloatArray
    high: FloatArray
    level: float
    simultaneous: bool
    interval: str

    def labelled(self, categories: tuple[str, ...]) -> list[dict[str, object]]:
        """The answer's ``at_least``: ``{category, estimate, stderr, low, high, interval}``
        per share, ``category`` its first category (None for what is not finite)."""
        columns = [_json_floats(c) for c in (self.estimate, self.stderr, self.low, self.high)]
        return [
            {"category": categories[int(k)]}
            | dict(zip(("estimate", "stderr", "low", "high"), row, strict=True))
            | {"interval": self.interval}
            for k, *row in zip(self.start.tolist(), *columns, strict=True)
        ]


def at_least_weights(d: int) -> FloatArray:
    """The (d - 1) x d weights of the shares "category k or later", k = 1 .. d - 1."""
    return np.asarray(np.triu(np.ones((d, d)))[1:], dtype=np.float64)
