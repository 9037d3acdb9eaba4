"""Result objects: estimates with standard errors and confidence intervals.

Modelled on scipy.stats results: the estimator returns an object, and intervals come
from ``estimate.ci(level)`` as a :class:`ConfidenceInterval` ``(low, high)``.

Intervals are Wald intervals, ``estimate ± z · stderr`` with ``z`` the normal quantile.
Each estimate is a sum of n independent per-user terms, so by the central limit theorem
the interval covers the truth with about the nominal probability once n is a few hundred
(the tests check 93%-97% coverage at 95% over 1000 simulated campaigns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ._validation import check_level

FloatArray = npt.NDArray[np.float64]


class ConfidenceInterval(NamedTuple):
    """Lower and upper ends of a confidence interval (arrays for per-item estimates)."""

    low: FloatArray | float
    high: FloatArray | float


def normal_quantile(level: float, *, comparisons: int = 1) -> float:
    """Two-sided normal quantile for ``level``, Bonferroni-corrected over ``comparisons``."""
    level = check_level(level)
    alpha = (1.0 - level) / comparisons
    return NormalDist().inv_cdf(1.0 - alpha / 2.0)


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
    k = np.arange(1, f.size + 1)
    deltas = (cumulative - 1.0) / k
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
    frequencies : unbiased estimate of each item's fraction of users (may be < 0 or > 1).
    stderr : standard error of each fraction, from the mechanism's variance formula with
        the estimate plugged in (clipped to [0, 1] first).
    """

    mechanism: str
    epsilon: float
    n: int
    frequencies: FloatArray
    stderr: FloatArray
    _cache: dict[str, FloatArray] = field(default_factory=dict, repr=False)

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

    def ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        """Per-item intervals of the fractions.

        With ``simultaneous=True`` the intervals are Bonferroni-corrected so that all
        ``domain_size`` of them cover their truths together with probability >= level.
        """
        z = normal_quantile(level, comparisons=self.domain_size if simultaneous else 1)
        half = z * self.stderr
        return ConfidenceInterval(self.frequencies - half, self.frequencies + half)

    def count_ci(self, level: float = 0.95, *, simultaneous: bool = False) -> ConfidenceInterval:
        low, high = self.ci(level, simultaneous=simultaneous)
        return ConfidenceInterval(np.asarray(low) * self.n, np.asarray(high) * self.n)

    def consistent(self) -> FloatArray:
        """Norm-Sub post-processed fractions: non-negative and summing to one (biased)."""
        if "norm_sub" not in self._cache:
            self._cache["norm_sub"] = norm_sub(self.frequencies)
        return self._cache["norm_sub"]


@dataclass(frozen=True)
class MeanEstimate:
    """Unbiased estimate of the mean of a numeric value over the users who reported.

    ``stderr`` is the sample standard deviation of the debiased reports over ``sqrt(n)``:
    it accounts for the mechanism's noise and for the spread of the true values alike.
    """

    mechanism: str
    epsilon: float
    n: int
    mean: float
    stderr: float

    def ci(self, level: float = 0.95) -> ConfidenceInterval:
        z = normal_quantile(level)
        return ConfidenceInterval(self.mean - z * self.stderr, self.mean + z * self.stderr)
