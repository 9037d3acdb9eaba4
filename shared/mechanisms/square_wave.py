"""The square wave mechanism for a number, with EM and EMS reconstruction of its distribution.

The wave. A value ``x`` in ``[lo, hi]`` (clipped) is mapped to ``v = (x - lo) / (hi - lo)`` in
``[0, 1]``; the report ``y`` lies in ``[-b, 1 + b]`` with density ``p`` within ``b`` of ``v``
and ``q`` elsewhere, ``p = e^eps q``, ``q = 1 / (2 b e^eps + 1)`` (so ``2 b p + q = 1``). The
largest ratio of the output densities of two inputs is ``p / q = e^eps`` exactly. Li et al.
choose the half-width ``b`` that maximises the mutual information between ``v`` and ``y`` for
a uniform ``v``::

    b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))

which tends to 1/2 as eps -> 0 and to 0 as eps grows (:func:`optimal_band`).

The channel. The collector counts the reports in ``d'`` equal output buckets over
``[-b, 1 + b]`` and estimates the distribution over ``d`` equal input buckets of ``[0, 1]``.
``channel[i, j]`` is the probability of output bucket ``j`` for a value spread uniformly over
input bucket ``i``, integrated exactly (:func:`bucket_channel`; a value at a point has
:meth:`SquareWave.point_channel`). Reporting the bucket instead of ``y`` is post-processing:
no more than eps.

Reconstruction. EM (Dempster, Laird, Rubin) maximises the multinomial likelihood of the
bucket counts over the simplex: ``f <- f * (P (c / (P^T f))) / n``. It is consistent as n
grows for fixed buckets, but with ``d`` close to ``d'`` the channel (a smooth kernel) is
ill-conditioned and the maximum is noisy and spiky. EMS (Li et al., after Silverman et al.
1990) follows each EM step by a binomial smoothing ``(1, 2, 1) / 4`` of neighbouring input
buckets (the rows at the two ends renormalised: ``(2, 1) / 3``), and stops when the
log-likelihood of the n reports changes by less than ``tolerance`` nats.

Bias and variance. EMS is not the maximum of anything and not unbiased: the smoothing is a
bias it trades for variance. For a smooth population the bias is small and the variance much
lower than EM's; but the bias does not shrink with n, so at large n a population with sharp
features (an atom, a narrow mode, a step) keeps an error of the order of the smoothing's reach
(a few input buckets), and n x MSE grows with n (docs/statistics.md). Neither EM nor EMS has a
closed-form variance; :meth:`SquareWave.bootstrap` gives a parametric bootstrap (refit on
counts drawn from the fitted channel law), whose coverage benchmarks/square_wave.py measures.

Registered as ``"square_wave"`` (:class:`SquareWaveMechanism`, a distribution metric's
``mechanism = "square_wave"``): the report on the wire is the output bucket
(:data:`REPORT_DTYPE`), drawn by the portable rule of :func:`portable_bucket` from 32-bit
words (a served 64-bit threshold for "near", then a 53-bit uniform, IEEE-754 double
arithmetic); :meth:`SquareWave.perturb` draws the continuous report ``y`` from numpy's
generator. Its answers are the EMS reconstruction's, served without intervals
(:class:`SquareWaveEstimate`: none found both covers and is useful; docs/statistics.md).

Intervals measured and not served (benchmarks/square_wave_intervals.py): the unbiased channel
inversion on a grid of d input buckets is either very wide (d = d') or biased by the values'
places within its buckets; widened by a bound on that bias (:meth:`SquareWave.bucket_deviation`,
exact) it covers by construction but is 7 to 90 times as wide as the hierarchical
histogram's interval for a range on its leaves.

References
----------
Z. Li, T. Wang, M. Lopuhaä-Zwakenberg, N. Li, B. Škorić, "Estimating numerical distributions
under local differential privacy", SIGMOD 2020 (the square wave and EMS).
B. W. Silverman, M. C. Jones, J. D. Wilson, D. W. Nychka, "A smoothed EM approach to indirect
estimation problems, with particular reference to stereology and emission tomography",
JRSS B 52(2), 1990.
A. P. Dempster, N. M. Laird, D. B. Rubin, "Maximum likelihood from incomplete data via the EM
algorithm", JRSS B 1977.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import numpy.typing as npt

from .. import screening
from .._json import finite_or_none
from .._validation import check_bounds, check_epsilon, check_level
from ..distribution import REPORTERS, check_estimand
from ..errors import ParameterError, ReportError
from ..randomness import resolve_rng
from . import _bits
from ._conformance import NUMERIC_BOUNDS, case_name, chi2
from ._portable import Derived, Words, bounded, ceil64, hex64
from ._values import check_numbers
from .base import BoolArray, Mechanism, PlanCase

if TYPE_CHECKING:
    from ..aggregate import Aggregate
    from ..screening import Finding
    from .base import LawTest, Reports

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

REPORT_DTYPE = np.dtype("<u2")
"""The planned report: the output bucket, 0 .. d' - 1 (post-processing of the wave)."""
DEFAULT_BUCKETS = 1024
"""Input and output buckets unless given (the paper's default granularity)."""
MAX_BUCKETS = 4096
"""The channel is a dense d x d' matrix; EM multiplies by it twice per step."""
DEFAULT_TOLERANCE = 1e-3
"""EMS stops when the log-likelihood of all n reports changes by less than this (nats)."""
DEFAULT_MAX_ITERATIONS = 10_000
CHANNEL_BLOCK = 64
"""Rows of the channel built at once (:func:`bucket_channel`): 2 MiB temporaries at 4,096."""
_SERIES_BELOW = 1.0  # epsilon under which b is summed as a series (no cancellation)
_SERIES_TERMS = 30
_FLOOR = 1e-30


def optimal_band(epsilon: float) -> float:
    """Li et al.'s half-width ``b`` of the wave, on the unit scale (module docstring).

    Below eps = 1 the numerator ``1 - e^eps (1 - eps) = sum_k (k - 1) eps^k / k!`` and
    ``e^eps - 1 - eps = sum_{k>=2} eps^k / k!`` are summed as series, which keeps full
    precision where the closed form cancels."""
    eps = check_epsilon(epsilon)
    if eps < _SERIES_BELOW:
        term, top, bottom = 1.0, 0.0, 0.0
        for k in range(1, _SERIES_TERMS + 1):
            term *= eps / k
            top += (k - 1) * term
            bottom += term if k >= 2 else 0.0
        return top / (2.0 * math.exp(eps) * bottom)
    e = math.exp(eps)
    return (eps * e - e + 1.0) / (2.0 * e * (e - 1.0 - eps))


def _double_ramp(s: FloatArray) -> FloatArray:
    """``max(s, 0)^2 / 2``, the second antiderivative of the unit step."""
    r = np.maximum(s, 0.0)
    return np.asarray(0.5 * r * r)


def _window_area(
    left: FloatArray, right: FloatArray, a: FloatArray, c: FloatArray, b: float
) -> FloatArray:
    """Area of ``{(v, y) : v in [left, right], y in [a, c], |y - v| <= b}``.

    ``T(t) = area{y - v <= t} = S(t + r - a) - S(t + l - a) - S(t + r - c) + S(t + l - c)``
    with ``S`` the double ramp; the window is ``T(b) - T(-b)``."""

    def below(t: float) -> FloatArray:
        return np.asarray(
            _double_ramp(t + right - a)
            - _double_ramp(t + left - a)
            - _double_ramp(t + right - c)
            + _double_ramp(t + left - c)
        )

    return np.asarray(np.clip(below(b) - below(-b), 0.0, None))


def bucket_channel(band: float, p: float, q: float, inputs: int, outputs: int) -> FloatArray:
    """``P[i, j]``: output bucket j for a value uniform over input bucket i (exact integral).

    ``P(y in [a, c] | v) = q (c - a) + (p - q) |[a, c] & [v - b, v + b]|``, averaged over
    ``v`` in ``[i / d, (i + 1) / d]``. Built :data:`CHANNEL_BLOCK` rows at a time: whole,
    the window's temporaries were five d x d' arrays (640 MiB at 4,096 buckets, for a
    128 MiB channel); each row's values are the same either way (elementwise, and each
    row's sum over its own d' entries)."""
    edges_in = np.arange(inputs + 1, dtype=np.float64) / inputs
    edges_out = -band + (1.0 + 2.0 * band) * np.arange(outputs + 1, dtype=np.float64) / outputs
    a, c = edges_out[None, :-1], edges_out[None, 1:]
    channel = np.empty((inputs, outputs))
    for start in range(0, inputs, CHANNEL_BLOCK):
        stop = min(start + CHANNEL_BLOCK, inputs)
        left, right = edges_in[start:stop, None], edges_in[start + 1 : stop + 1, None]
        width = right - left
        overlap = _window_area(left, right, a, c, band) / width
        block = q * (c - a) + (p - q) * overlap
        np.divide(block, block.sum(axis=1, keepdims=True), out=channel[start:stop])
    return channel


def smoothing_matrix(size: int) -> FloatArray:
    """The binomial smoothing of EMS as a matrix: ``(1, 2, 1) / 4`` inside, ``(2, 1) / 3`` at
    the ends (the definition :func:`smoothed` applies; tests compare the two)."""
    s = 2.0 * np.eye(size) + np.eye(size, k=1) + np.eye(size, k=-1)
    return np.asarray(s / s.sum(axis=1, keepdims=True))


def smoothed(f: FloatArray) -> FloatArray:
    """:func:`smoothing_matrix` ``@ f`` in O(d): the matrix is tridiagonal, so a d x d
    product (128 MiB and a third of an EMS step's time at 4,096 buckets) is three shifted
    sums, with the matrix's own weights (1/4, 2/4, 1/4 exact; 2/3, 1/3 at the ends)."""
    out = np.empty_like(f)
    out[1:-1] = 0.25 * f[:-2] + 0.5 * f[1:-1] + 0.25 * f[2:]
    out[0] = (2.0 / 3.0) * f[0] + (1.0 / 3.0) * f[1]
    out[-1] = (1.0 / 3.0) * f[-2] + (2.0 / 3.0) * f[-1]
    return out


@dataclass(frozen=True)
class Reconstruction:
    """A distribution over the input buckets, estimated by EM or EMS.

    Attributes
    ----------
    frequencies : the d bucket fractions (non-negative, summing to 1).
    bounds : ``(lo, hi)`` of the metric; bucket i is ``[lo + i w, lo + (i + 1) w]``.
    n : the number of reports.
    iterations : EM steps taken.
    converged : whether the stopping rule was met before the step limit.
    log_likelihood : of the counts under the channel law of ``frequencies``.
    smoothed : True for EMS, False for EM.
    last_change : the log-likelihood's change at the last step (nats; not converged: how
        far from ``tolerance`` it stopped).
    tolerance : the stopping rule's change (nats).
    """

    frequencies: FloatArray
    bounds: tuple[float, float]
    n: int
    iterations: int
    converged: bool
    log_likelihood: float
    smoothed: bool
    last_change: float = math.nan
    tolerance: float = DEFAULT_TOLERANCE

    @property
    def warning(self) -> str | None:
        """What an answer says of a reconstruction stopped at the step limit (None if it
        converged): the estimate may still be moving (docs/statistics.md measures how far)."""
        if self.converged:
            return None
        return (
            f"{'EMS' if self.smoothed else 'EM'} did not converge: stopped at its limit of "
            f"{self.iterations:,} steps with the log-likelihood still changing by "
            f"{self.last_change:.2g} nats a step (the rule: under {self.tolerance:g}); the "
            "estimate may still move (typical at a small epsilon with many buckets: ask "
            "fewer buckets, or more reports)"
        )

    def convergence(self) -> dict[str, Any]:
        """``iterations``, ``converged``, ``last_change`` and ``tolerance``, for an answer."""
        return {
            "iterations": self.iterations,
            "converged": self.converged,
            "last_change": finite_or_none(self.last_change),
            "tolerance": self.tolerance,
        }

    @property
    def edges(self) -> FloatArray:
        lo, hi = self.bounds
        d = self.frequencies.size
        return np.asarray(lo + (hi - lo) * np.arange(d + 1, dtype=np.float64) / d)

    def cdf(self, x: npt.ArrayLike) -> FloatArray:
        """The fraction at or below ``x``, linear within buckets."""
        cum = np.concatenate([[0.0], np.cumsum(self.frequencies)])
        cum[-1] = 1.0
        return np.asarray(np.interp(np.asarray(x, dtype=np.float64), self.edges, cum))

    def fraction(self, lower: npt.ArrayLike, upper: npt.ArrayLike) -> FloatArray:
        """The fraction in ``[lower, upper]`` (linear within buckets)."""
        return np.asarray(self.cdf(upper) - self.cdf(lower))

    def quantile(self, levels: npt.ArrayLike) -> FloatArray:
        """The value below which a fraction ``levels`` lies (inverse of :meth:`cdf`)."""
        lv = np.asarray(levels, dtype=np.float64)
        if np.any((lv < 0) | (lv > 1)):
            raise ParameterError("quantile levels must be in [0, 1]")
        cum = np.concatenate([[0.0], np.cumsum(self.frequencies)])
        cum[-1] = 1.0
        # The cumulative sums are non-decreasing; flat stretches take their left edge.
        k = np.clip(np.searchsorted(cum, lv, side="left"), 1, self.frequencies.size)
        lo_c, hi_c = cum[k - 1], cum[k]
        share = np.where(hi_c > lo_c, (lv - lo_c) / np.where(hi_c > lo_c, hi_c - lo_c, 1.0), 0.0)
        e = self.edges
        return np.asarray(e[k - 1] + share * (e[k] - e[k - 1]))

    @property
    def mean(self) -> float:
        mids = 0.5 * (self.edges[1:] + self.edges[:-1])
        return float(self.frequencies @ mids)


@dataclass(frozen=True)
class BootstrapInterval:
    """Parametric bootstrap of statistics of an EMS (or EM) reconstruction.

    Attributes
    ----------
    estimate : the statistics of the reconstruction from the observed counts.
    replicates : B x k, the statistics refitted on B sets of counts drawn from the channel
        law of the reconstruction (multinomial, n reports).
    level : the confidence level.
    """

    estimate: FloatArray
    replicates: FloatArray
    level: float

    def _tails(self) -> tuple[FloatArray, FloatArray]:
        alpha = 1.0 - self.level
        low = np.quantile(self.replicates, alpha / 2.0, axis=0)
        high = np.quantile(self.replicates, 1.0 - alpha / 2.0, axis=0)
        return np.asarray(low), np.asarray(high)

    @property
    def low(self) -> FloatArray:
        """Lower end of the basic interval ``2 s - q_{1 - alpha/2}`` (corrects the bias the
        refits show around the reconstruction)."""
        return np.asarray(2.0 * self.estimate - self._tails()[1])

    @property
    def high(self) -> FloatArray:
        """Upper end of the basic interval ``2 s - q_{alpha/2}``."""
        return np.asarray(2.0 * self.estimate - self._tails()[0])

    @property
    def percentile(self) -> tuple[FloatArray, FloatArray]:
        """The percentile interval ``(q_{alpha/2}, q_{1 - alpha/2})`` of the refits."""
        return self._tails()


Statistic = Callable[[Reconstruction], npt.ArrayLike]


@dataclass(frozen=True, kw_only=True)
class SquareWave:
    """The square wave mechanism over ``bounds``, with EM and EMS reconstruction.

    Parameters
    ----------
    epsilon : float
        The privacy parameter of one report, > 0 (``p / q = e^eps``).
    bounds : (float, float)
        ``(lo, hi)``; values outside are clipped to them on the device.
    buckets : int
        d, the input buckets of the reconstruction (2 .. 4096; default 1024).
    output_buckets : int, optional
        d', the buckets the reports are counted in (2 .. 4096; default ``buckets``).

    Attributes (derived once)
    -------------------------
    band : b on the unit scale; p, q : the densities within and beyond b;
    channel : the d x d' bucket channel (:func:`bucket_channel`), built on first use.

    Examples
    --------
    >>> sw = SquareWave(epsilon=1.0, bounds=(0.0, 10.0), buckets=64)
    >>> abs(sw.privacy_loss() - 1.0) < 1e-12
    True
    """

    epsilon: float
    bounds: tuple[float, float]
    buckets: int = DEFAULT_BUCKETS
    output_buckets: int | None = None
    band: float = field(init=False)
    p: float = field(init=False)
    q: float = field(init=False)

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        d = _check_buckets(self.buckets, "buckets")
        m = (
            d
            if self.output_buckets is None
            else _check_buckets(self.output_buckets, "output_buckets")
        )
        b = optimal_band(eps)
        q = 1.0 / (2.0 * b * math.exp(eps) + 1.0)
        p = q * math.exp(eps)
        derived: dict[str, Any] = {
            "epsilon": eps,
            "bounds": check_bounds(self.bounds),
            "buckets": d,
            "output_buckets": m,
            "band": b,
            "p": p,
            "q": q,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @functools.cached_property
    def channel(self) -> FloatArray:
        """The d x d' bucket channel (:func:`bucket_channel`), built on first use: only
        the estimate needs it (128 MiB at 4,096 buckets), never a device or a collector
        that only checks and counts reports."""
        return bucket_channel(self.band, self.p, self.q, self.buckets, self.outputs)

    @property
    def outputs(self) -> int:
        """d', the number of output buckets."""
        return int(cast(int, self.output_buckets))

    # --- privacy --------------------------------------------------------------------
    def density(self, value: npt.ArrayLike, output: npt.ArrayLike) -> FloatArray:
        """The output density at ``output`` (unit scale, ``[-b, 1 + b]``) for ``value`` (the
        metric's units): ``p`` within b, ``q`` elsewhere in the domain, 0 outside it."""
        v = self.unit(np.atleast_1d(np.asarray(value)))
        y = np.asarray(output, dtype=np.float64)
        inside = (y >= -self.band) & (y <= 1.0 + self.band)
        near = np.abs(y - v.reshape(v.shape + (1,) * y.ndim)) <= self.band
        return np.asarray(np.where(inside, np.where(near, self.p, self.q), 0.0))

    def privacy_loss(self) -> float:
        """``log(p / q)``: the largest log-ratio of the output densities of two inputs."""
        return math.log(self.p / self.q)

    # --- the device -----------------------------------------------------------------
    def unit(self, values: npt.NDArray[Any]) -> FloatArray:
        """Checked values, clipped to the bounds, on the unit scale ``[0, 1]``."""
        lo, hi = self.bounds
        x = check_numbers(values, self.bounds)
        return np.asarray(np.clip((x - lo) / (hi - lo), 0.0, 1.0))

    def perturb(self, values: npt.ArrayLike, rng: np.random.Generator | None = None) -> FloatArray:
        """Reports ``y`` in ``[-b, 1 + b]`` (unit scale) of the values; ``rng`` defaults to a
        generator fed by the OS CSPRNG (:func:`ldpkit.randomness.resolve_rng`).

        With probability ``2 b p``, ``y`` is uniform on ``[v - b, v + b]``; else uniform on
        the rest of the domain, ``[-b, v - b)`` and ``(v + b, 1 + b]`` (total length 1): a
        uniform ``w`` in ``[0, 1)`` goes to ``-b + w`` below ``v``, to ``w + b`` above."""
        array = np.asarray(values)
        v = self.unit(array.reshape(-1))
        gen = resolve_rng(rng)
        near = gen.random(v.size) < 2.0 * self.band * self.p
        u = gen.random(v.size)
        b = self.band
        far = np.where(u < v, -b + u, u + b)
        y = np.where(near, v - b + 2.0 * b * u, far)
        return np.asarray(y.reshape(array.shape))

    def output_bucket(self, reports: npt.ArrayLike) -> IntArray:
        """The output bucket of each report (``[-b, 1 + b]`` cut in d' equal buckets)."""
        y = np.asarray(reports, dtype=np.float64).reshape(-1)
        b = self.band
        bad = ~np.isfinite(y) | (y < -b) | (y > 1.0 + b)
        if bool(np.any(bad)):
            i = int(np.argmax(bad))
            raise ReportError(f"report {i} ({y[i]!r}) is outside [-b, 1 + b] = [{-b}, {1 + b}]")
        k = np.floor((y + b) / (1.0 + 2.0 * b) * self.outputs).astype(np.int64)
        return np.asarray(np.clip(k, 0, self.outputs - 1))

    def counts(self, reports: npt.ArrayLike) -> FloatArray:
        """How many reports fall in each output bucket."""
        k = self.output_bucket(reports)
        return np.bincount(k, minlength=self.outputs).astype(np.float64)

    def served_constants(self) -> dict[str, Any]:
        """What a device needs for :meth:`portable_report`: the half-width ``band`` (a
        double), the threshold ``near`` of ``coin`` for the window (``ceil(2 b p 2^64)``, so
        the window's probability is high by less than 2^-64) and the output buckets."""
        return {
            "band": self.band,
            "near": hex64(ceil64(2.0 * self.band * self.p)),
            "outputs": self.outputs,
        }

    def portable_report(self, value: float, words: Words) -> int:
        """The output bucket of one value by the portable rule (docs/protocol.md's
        primitives): ``v = (clip(x) - lo) / (hi - lo)``; ``near = coin(near)``;
        ``u = uniform()``; ``y = v - b + 2 b u`` if near, else ``-b + u`` if ``u < v``, else
        ``u + b``; the bucket ``floor((y + b) / (1 + 2 b) * d')``, at most ``d' - 1``."""
        lo, hi = self.bounds
        x = float(check_numbers(np.asarray([value]), self.bounds)[0])
        return portable_bucket(lo, hi, x, self.served_constants(), words)

    def point_channel(self, values: npt.ArrayLike) -> FloatArray:
        """Rows: the law of the output bucket for each value at a point (metric units)."""
        v = self.unit(np.atleast_1d(np.asarray(values)))[:, None]
        b, m = self.band, self.outputs
        edges = -b + (1.0 + 2.0 * b) * np.arange(m + 1, dtype=np.float64) / m
        a, c = edges[None, :-1], edges[None, 1:]
        overlap = np.clip(np.minimum(c, v + b) - np.maximum(a, v - b), 0.0, None)
        return np.asarray(self.q * (c - a) + (self.p - self.q) * overlap)

    def corners(self) -> FloatArray:
        """The unit values where the point channel's rows bend: each output bucket ``[a, c]``
        overlaps the window ``[v - b, v + b]`` over a length piecewise linear in ``v`` with
        corners at ``a - b, a + b, c - b, c + b``; with 0 and 1, sorted and unique."""
        b, m = self.band, self.outputs
        edges = -b + (1.0 + 2.0 * b) * np.arange(m + 1, dtype=np.float64) / m
        corners = np.concatenate([[0.0, 1.0], edges - b, edges + b])
        return np.unique(np.clip(corners, 0.0, 1.0))

    def bucket_deviation(
        self, weights: npt.ArrayLike, lower: float, upper: float, inputs: int
    ) -> FloatArray:
        """How far a linear estimate of the share in ``[lower, upper)`` can be from the truth
        for values in each of ``inputs`` equal buckets of the bounds, exactly.

        The estimate ``weights . c / n`` (``c`` the output-bucket counts) has expectation
        ``w(x) = weights . point_channel(x)`` for a user at ``x``, so its bias for a
        population ``F`` is ``integral (w(x) - 1[lower <= x < upper]) dF(x)``, at most
        ``sum_k m_k e_k`` with ``m_k`` the mass in bucket k and ``e_k`` (returned) the
        largest ``|w(x) - 1[lower <= x < upper]|`` over the bucket (closed: a bound).
        ``w`` is piecewise linear with its bends at :meth:`corners` and the indicator
        steps at ``lower`` and ``upper``, so the largest deviation is at one of those
        points, the bucket's edges, or a step's either side: all evaluated, none missed.
        """
        g = np.asarray(weights, dtype=np.float64)
        if g.shape != (self.outputs,):
            raise ParameterError(f"weights must have {self.outputs} entries, got {g.shape}")
        d = _check_buckets(inputs, "inputs")
        if not float(lower) <= float(upper):  # (NaN fails too)
            raise ParameterError(f"the range needs lower <= upper, got [{lower!r}, {upper!r})")
        lo, hi = self.bounds
        steps = np.clip((np.asarray([lower, upper], dtype=np.float64) - lo) / (hi - lo), 0, 1)
        grid = np.arange(d + 1, dtype=np.float64) / d
        x = np.unique(np.concatenate([self.corners(), grid, steps]))
        w = self.point_channel(lo + (hi - lo) * x) @ g
        # As the answers read a range: ``upper >= hi`` holds hi; a bound's end is no step.
        inside = ((x >= steps[0]) & ((x < steps[1]) | (steps[1] >= 1.0))).astype(np.float64)
        dev = np.abs(w - inside)
        at_step = ((x == steps[0]) & (steps[0] > 0.0)) | ((x == steps[1]) & (steps[1] < 1.0))
        dev = np.where(at_step, np.maximum(np.abs(w), np.abs(w - 1.0)), dev)
        # Each point bounds the buckets whose closure holds it (one, or two at an edge).
        # (A point within rounding of an edge counts for both neighbours: never fewer.)
        right = np.minimum(np.floor(x * d + 1e-9).astype(np.int64), d - 1)
        left = np.maximum(np.ceil(x * d - 1e-9).astype(np.int64) - 1, 0)
        out = np.zeros(d)
        np.maximum.at(out, right, dev)
        np.maximum.at(out, left, dev)
        return out

    # --- the collector --------------------------------------------------------------
    def _checked_counts(self, counts: npt.ArrayLike) -> tuple[FloatArray, int]:
        c = np.asarray(counts, dtype=np.float64)
        if c.shape != (self.outputs,):
            raise ParameterError(f"counts must have {self.outputs} entries, got {c.shape}")
        if not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ParameterError("counts must be finite numbers >= 0")
        # Whole numbers from reports; any weights (the mean counts of a law) are accepted.
        total = float(c.sum())
        if total < 1.0:
            raise ParameterError("an estimate needs at least one report")
        return c, round(total)

    def estimate_ems(
        self,
        counts: npt.ArrayLike,
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        max_iterations: int | None = None,
    ) -> Reconstruction:
        """EMS: EM steps each followed by the binomial smoothing, from the uniform
        distribution, until the log-likelihood changes by less than ``tolerance`` nats or
        ``max_iterations`` steps (default :data:`DEFAULT_MAX_ITERATIONS`) are taken; the
        reconstruction says which (``converged``, ``warning``)."""
        return self._iterate(counts, True, tolerance, max_iterations)

    def estimate_em(
        self,
        counts: npt.ArrayLike,
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        max_iterations: int | None = None,
    ) -> Reconstruction:
        """EM without smoothing (the constrained maximum likelihood, approached slowly
        when the channel is ill-conditioned); the same start and stopping rule as EMS."""
        return self._iterate(counts, False, tolerance, max_iterations)

    def _iterate(
        self, counts: npt.ArrayLike, smooth: bool, tolerance: float, max_iterations: int | None
    ) -> Reconstruction:
        c, n = self._checked_counts(counts)
        if max_iterations is None:  # read here: a test lowers it to meet the limit cheaply
            max_iterations = DEFAULT_MAX_ITERATIONS
        steps_ok = isinstance(max_iterations, int) and not isinstance(max_iterations, bool)
        if not (tolerance > 0 and steps_ok and max_iterations >= 1):
            raise ParameterError("tolerance must be > 0 and max_iterations an integer >= 1")
        seen = c > 0  # outputs never seen add nothing to the likelihood
        # (the usual case, every output seen: the channel itself, not a copy of all of it)
        p, cs = (self.channel, c) if seen.all() else (self.channel[:, seen], c[seen])
        f = np.full(self.buckets, 1.0 / self.buckets)
        last, change, converged, steps = -math.inf, math.inf, False, 0
        while steps < max_iterations:
            steps += 1
            f = f * (p @ (cs / (f @ p)))
            if smooth:
                f = smoothed(f)
            # A floor far below any answer's precision keeps EM out of subnormal floats
            # (20 to 50 times slower) where the population has no mass.
            f = np.maximum(f, _FLOOR)
            f /= f.sum()
            loglik = float(cs @ np.log(f @ p))
            change, last = abs(loglik - last), loglik
            if change < tolerance:
                converged = True
                break
        # (at least one step ran: ``last`` is the final f's, no second d x d' product)
        return Reconstruction(f, self.bounds, n, steps, converged, last, smooth, change, tolerance)

    def expected_counts(self, frequencies: npt.ArrayLike, n: int) -> FloatArray:
        """``n P^T f``: the mean counts of n reports from bucket fractions ``f``."""
        f = np.asarray(frequencies, dtype=np.float64)
        if f.shape != (self.buckets,) or np.any(f < 0) or abs(float(f.sum()) - 1.0) > 1e-9:
            raise ParameterError(f"frequencies must be {self.buckets} fractions summing to 1")
        return np.asarray(n * (f @ self.channel))

    def bootstrap(
        self,
        counts: npt.ArrayLike,
        statistic: Statistic,
        *,
        replicates: int = 200,
        level: float = 0.95,
        smooth: bool = True,
        rng: np.random.Generator | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
    ) -> BootstrapInterval:
        """Parametric bootstrap of ``statistic`` (a function of a :class:`Reconstruction`
        returning numbers): refit on ``replicates`` sets of n counts drawn from the channel
        law of the reconstruction. The basic interval (``low``/``high``) moves by the bias
        the refits show; see benchmarks/square_wave.py for its measured coverage."""
        if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 20:
            raise ParameterError(f"replicates must be an integer >= 20, got {replicates!r}")
        if not 0.0 < level < 1.0:
            raise ParameterError(f"level must be in (0, 1), got {level!r}")
        fit = self._iterate(counts, smooth, tolerance, None)
        law = fit.frequencies @ self.channel
        gen = resolve_rng(rng)
        estimate = np.atleast_1d(np.asarray(statistic(fit), dtype=np.float64))
        rows = []
        for _ in range(replicates):
            draw = gen.multinomial(fit.n, law / law.sum()).astype(np.float64)
            refit = self._iterate(draw, smooth, tolerance, None)
            rows.append(np.atleast_1d(np.asarray(statistic(refit), dtype=np.float64)))
        return BootstrapInterval(estimate, np.vstack(rows), level)


def _check_buckets(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    if not 2 <= int(value) <= MAX_BUCKETS:
        raise ParameterError(f"{name} must be in 2 .. {MAX_BUCKETS}, got {value}")
    return int(value)


# --- the portable rule (docs/protocol.md) ---------------------------------------------


def bucket_of(v: float, near: bool, u: float, band: float, outputs: int) -> int:
    """The output bucket of the unit value ``v`` given the coin ``near`` and the uniform
    ``u``: ``y = v - b + 2 b u`` if near, else ``-b + u`` if ``u < v``, else ``u + b``;
    the bucket ``floor((y + b) / (1 + 2 b) * d')``, within ``0 .. d' - 1``."""
    b = band
    y = v - b + 2.0 * b * u if near else (-b + u if u < v else u + b)
    return min(max(math.floor((y + b) / (1.0 + 2.0 * b) * outputs), 0), outputs - 1)


def portable_bucket(lo: float, hi: float, x: float, derived: Derived, words: Words) -> int:
    """The portable rule of one clipped number ``x``: ``v = (x - lo) / (hi - lo)``;
    ``near = coin(near)``; ``u = uniform()``; then :func:`bucket_of` with the served
    ``band`` and ``outputs``."""
    x = min(max(x, lo), hi)
    v = (x - lo) / (hi - lo)
    near = words.coin(derived["near"])
    u = words.uniform()
    return bucket_of(v, near, u, float(derived["band"]), int(derived["outputs"]))


def _plan_case(epsilon: float) -> PlanCase:
    lo, hi = NUMERIC_BOUNDS
    spec = {
        "kind": "distribution",
        "bounds": [lo, hi],
        "resolution": 32,
        "epsilon": epsilon,
        "mechanism": "square_wave",
    }
    return PlanCase(case_name("square_wave", epsilon), spec, (lo, 0.123456789, 2.5, hi))


_TWO_53 = 2.0**-53


STEP_4096 = (0.032, 320.0)
"""CPU seconds of one EMS step and the peak MiB of building and preparing a square wave
distribution of 4,096 buckets (the most), measured by ``benchmarks/square_wave_cost.py``:
28.4 ms at most, and 269 MiB at most above the process before the build (the 128 MiB
channel held and EMS's copy of its seen columns, 2 x 8 d d' bytes, when some output
bucket was not seen; all seen, no copy): 320 is those 256 and
a quarter more (19% above the measured), for margin. Memory grows as d d', so d^2. A
step costs d x d' products, so d^2, and at least :data:`STEP_OVERHEAD`; EMS stops after
at most :data:`DEFAULT_MAX_ITERATIONS` steps (at a small epsilon with two modes it takes
them all), so preparing costs at worst that many steps: not the hierarchical histogram's
figures, which grow as d and are 48 times less at 1,024."""
STEP_OVERHEAD = 6e-5
"""CPU seconds of an EMS step whatever d (numpy's calls: 28 to 53 us at 64 buckets, measured)."""


@dataclass(frozen=True, kw_only=True)
class SquareWaveMechanism(Mechanism):
    """The square wave as a distribution metric's mechanism (``mechanism = "square_wave"``).

    A report is the output bucket (u2) of the wave's output ``y`` on ``[-b, 1 + b]`` cut in
    ``d'`` equal buckets (:class:`SquareWave`), drawn by :func:`portable_bucket` from the
    served ``band``, ``near`` and ``outputs``. The collector keeps the d' bucket counts and
    reconstructs the distribution over ``resolution`` equal input buckets by EMS
    (:class:`SquareWaveEstimate`, point estimates without intervals).

    Parameters
    ----------
    epsilon : float
        The privacy parameter of one report (``p / q = e^eps``).
    bounds : (float, float)
        ``(lo, hi)``; values outside are clipped to them on the device.
    resolution : int
        d, the input buckets of the reconstruction (2 .. 4096; default 1024).
    output_buckets : int, optional
        d', the output buckets: ``resolution`` (the default, the only value a definition
        has; the fingerprint does not carry another).

    Wire format
    -----------
    :data:`REPORT_DTYPE` (2 bytes): well-formed iff ``y < d'``.
    """

    name: ClassVar[str] = "square_wave"
    kind: ClassVar[str] = "distribution"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (_plan_case(1.0), _plan_case(3.0))
    report_dtype = REPORT_DTYPE
    aggregate_cost = 1  # one counter per report: its bucket
    serves_intervals: ClassVar[bool] = False

    bounds: tuple[float, float]
    resolution: int = DEFAULT_BUCKETS
    output_buckets: int | None = None
    core: SquareWave = field(init=False, repr=False, compare=False)
    _near: int = field(init=False, repr=False, compare=False)

    def preparation_cost(self) -> tuple[float, float, str]:
        """EMS's worst case: :data:`DEFAULT_MAX_ITERATIONS` steps of :data:`STEP_4096`
        scaled as d^2, and the peak memory of building the definition (the channel) and
        preparing it, scaled as d^2 (the collector's cost model; not the histogram's
        figures)."""
        share = self.resolution / 4096
        step, mib = STEP_4096
        return (
            0.05 + DEFAULT_MAX_ITERATIONS * (STEP_OVERHEAD + step * share**2),
            (40.0 + mib * share**2) * 2**20,
            f"preparing a square wave distribution of {self.resolution} buckets "
            f"(EMS: up to {DEFAULT_MAX_ITERATIONS:,} steps)",
        )

    def __post_init__(self) -> None:
        self._check_epsilon()
        if self.output_buckets not in (None, self.resolution):
            raise ParameterError(
                "a square wave metric counts its reports in `resolution` buckets: "
                f"output_buckets must be {self.resolution} or absent, got {self.output_buckets!r}"
            )
        core = SquareWave(
            epsilon=self.epsilon,
            bounds=self.bounds,
            buckets=self.resolution,
            output_buckets=self.output_buckets,
        )
        near = int(core.served_constants()["near"], 16)
        self._set(
            bounds=core.bounds,
            resolution=core.buckets,
            output_buckets=core.outputs,
            core=core,
            _near=near,
        )

    @property
    def outputs(self) -> int:
        """d', the number of output buckets (and of counters)."""
        return self.core.outputs

    @property
    def stats_size(self) -> int:
        return self.outputs

    @property
    def report_rule(self) -> str:
        return f"an output bucket in 0..{self.outputs - 1}"

    @property
    def distinct_reports(self) -> int:
        return self.outputs

    def params(self) -> dict[str, Any]:
        """A definition's d' is its ``resolution`` (``output_buckets`` is for the core and
        benchmarks): the fingerprint's ``mechanism_params`` keep the keys of ``hh``'s, in
        the schema every client knows; ``outputs`` is served in ``derived``."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "bounds": list(self.bounds),
            "resolution": self.resolution,
        }

    def auto_variance(self) -> float:
        """Not weighed by ``auto`` (no interval; see ``ldpkit.mechanisms.UNWEIGHED``)."""
        return math.inf

    def _check_values(self, values: npt.NDArray[Any]) -> FloatArray:
        return check_numbers(values, self.bounds)

    # --- the device -------------------------------------------------------------------
    def _perturb(self, values: FloatArray, rng: np.random.Generator) -> npt.NDArray[Any]:
        """Two 64-bit words a report, as :meth:`perturb_value`: the coin, then the uniform."""
        n = values.size
        words = _bits.uniform_u64(rng, 2 * n).reshape(n, 2)
        near = words[:, 0] < np.uint64(self._near)
        u = (words[:, 1] >> np.uint64(11)).astype(np.float64) * _TWO_53
        v = self.core.unit(values)
        b, m = self.core.band, self.outputs
        y = np.where(near, v - b + 2.0 * b * u, np.where(u < v, -b + u, u + b))
        k = np.floor((y + b) / (1.0 + 2.0 * b) * m)
        return np.clip(k, 0, m - 1).astype(REPORT_DTYPE)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value: the same words, the same bucket."""
        draws = _bits.OneDraws(rng)
        near = draws.u64() < self._near
        u = (draws.u64() >> 11) * _TWO_53
        lo, hi = self.bounds
        x = min(max(float(value), lo), hi)
        k = bucket_of((x - lo) / (hi - lo), near, u, self.core.band, self.outputs)
        return k.to_bytes(2, "little")

    # --- reports and the collector ----------------------------------------------------
    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(reports < self.outputs)

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.bincount(reports, minlength=self.outputs).astype(np.float64)

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        """A report supports the bucket holding the value's own position (the centre of
        its window): the audit's event."""
        v = float(self.core.unit(np.asarray([value]))[0])
        b = self.core.band
        centre = bucket_of(v, True, 0.5, b, self.outputs)
        return np.asarray(np.asarray(reports) == centre)

    def output_probabilities(self, value: float) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every possible report (bucket) for ``value`` and its exact probability."""
        return np.arange(self.outputs, dtype=REPORT_DTYPE), self.core.point_channel([value])[0]

    def bucket_ranges(self) -> tuple[FloatArray, FloatArray]:
        """Each output bucket's smallest and largest probability over all values: the
        window's overlap with a bucket is piecewise linear in the value, with its corners
        at ``a - b, a + b, c - b, c + b`` (the bucket ``[a, c]``) and the bounds' ends."""
        v = self.core.corners()
        lo, hi = self.bounds
        law = self.core.point_channel(lo + (hi - lo) * v)
        return np.asarray(law.min(axis=0)), np.asarray(law.max(axis=0))

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """Each bucket's count among n honest reports is Bin(n, s) with s between the
        bucket's smallest and largest probability over the values (:meth:`bucket_ranges`),
        whatever the population."""
        agg = self._checked_aggregate(aggregate)
        low, high = self.bucket_ranges()
        return screening.count_law(
            agg.sums, agg.n, high, low, alpha, "bucket count", lambda k: f"output bucket {k}"
        )

    def estimate(self, aggregate: Aggregate) -> SquareWaveEstimate:
        """The EMS reconstruction of the bucket counts (no interval: see the estimate)."""
        agg = self._checked_aggregate(aggregate)
        fit = self.core.estimate_ems(agg.sums) if agg.n >= 1 else None
        return SquareWaveEstimate(
            mechanism=self.name,
            epsilon=self.epsilon,
            n=int(agg.n),
            bounds=self.bounds,
            resolution=self.resolution,
            reconstruction=fit,
        )

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        """``band`` (a double), ``near`` (``ceil(2 b p 2^64)``, 16 hex digits), ``outputs``."""
        return self.core.served_constants()

    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        """:func:`portable_bucket` of the clipped number, as 2 little-endian bytes."""
        lo, hi, x = bounded(definition, value)
        return portable_bucket(lo, hi, x, definition["derived"], words).to_bytes(2, "little")

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Every output bucket's count against the point channel's law for the value."""
        counts = np.bincount(reports.astype(np.int64), minlength=self.outputs)
        return [("bucket", *chi2(counts, self.core.point_channel([float(value)])[0]), "")]


NO_INTERVAL = "none"
NO_INTERVAL_NOTE = (
    "no interval: square wave + EMS is a smoothed estimate (biased, no closed-form "
    "variance; its bootstrap does not cover), so only point estimates are served"
)


@dataclass(frozen=True)
class _Unbounded:
    """An answer's forgery shift: not known for the (nonlinear) EMS reconstruction."""

    value: float = math.nan

    def forgery_shift(self, beta: float) -> Any:
        return math.nan


@dataclass(frozen=True)
class SquareWaveBins:
    """Fractions in consecutive bins (point estimates, no interval)."""

    edges: FloatArray
    estimates: FloatArray
    aligned: bool = False  # no interval: no "most common" set either

    @property
    def lower(self) -> FloatArray:
        return self.edges[:-1]

    @property
    def upper(self) -> FloatArray:
        return self.edges[1:]

    def forgery_shift(self, beta: float) -> FloatArray:
        return np.full(self.estimates.size, math.nan)


@dataclass(frozen=True)
class SquareWaveMean:
    """The reconstruction's mean (bucket middles), without an interval."""

    mean: float
    stderr: float = math.nan
    method: str = NO_INTERVAL

    def forgery_shift(self, beta: float) -> float:
        return math.nan

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        return math.nan, math.nan


@dataclass(frozen=True, kw_only=True)
class SquareWaveEstimate:
    """A distribution estimated by the square wave and EMS: point answers only.

    Bins, ranges and quantiles read the reconstruction's distribution function (linear
    within buckets), the mean places each bucket's mass at its middle. EMS trades a bias
    for variance and has no closed-form variance; its parametric bootstrap covers 35-97%
    at 95% (benchmarks/square_wave.py), so no interval is served: ``low``/``high`` are
    None, the methods ``"none"``, and :data:`NO_INTERVAL_NOTE` says why.
    """

    mechanism: str
    epsilon: float
    n: int
    bounds: tuple[float, float]
    resolution: int
    reconstruction: Reconstruction | None

    def _cdf(self, x: npt.ArrayLike) -> FloatArray:
        if self.reconstruction is None:
            return np.full(np.shape(x), math.nan)
        return self.reconstruction.cdf(x)

    def histogram(
        self, bins: int | None = None, *, edges: Sequence[float] | None = None
    ) -> SquareWaveBins:
        """Fractions in ``bins`` equal bins (default 16) or between ``edges``."""
        e = _bin_edges(self.bounds, bins, edges)
        return SquareWaveBins(e, np.diff(self._cdf(e)))

    def fraction(self, lower: float, upper: float) -> float:
        return float(self._cdf(upper) - self._cdf(lower))

    def quantile_value(self, q: float) -> float:
        if not 0.0 <= float(q) <= 1.0:
            raise ParameterError(f"q must be in [0, 1], got {q!r}")
        if self.reconstruction is None:
            return math.nan
        return float(self.reconstruction.quantile(float(q)))

    def mean(self, *, estimand: str = REPORTERS) -> SquareWaveMean:
        check_estimand(estimand)
        return SquareWaveMean(math.nan if self.reconstruction is None else self.reconstruction.mean)

    def range_shift(self, lower: npt.ArrayLike, upper: npt.ArrayLike, beta: float) -> Any:
        """Not known (EMS is nonlinear in the counts): NaN."""
        return math.nan if np.ndim(lower) == 0 else np.full(np.shape(lower), math.nan)

    def quantile_shift(self, q: float, beta: float) -> float:
        return math.nan

    def to_dict(
        self,
        level: float = 0.95,
        *,
        bins: int | None = None,
        edges: Sequence[float] | None = None,
        quantiles: Sequence[float] = (),
        range_: tuple[float, float] | None = None,
        estimand: str = REPORTERS,
        simultaneous: bool = False,
    ) -> dict[str, Any]:
        """The keys of :meth:`ldpkit.distribution.DistributionEstimate.to_dict`, with every
        ``stderr``, ``low`` and ``high`` None, every method ``"none"`` and a ``note``; with
        reports, ``convergence`` (:meth:`Reconstruction.convergence`) and, if EMS stopped at
        its step limit, a ``warning``."""
        hist = self.histogram(bins, edges=edges)
        none = {"stderr": None, "low": None, "high": None}
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "n": self.n,
            "level": check_level(level),
            "estimand": check_estimand(estimand),
            "bounds": [self.bounds[0], self.bounds[1]],
            "resolution": self.resolution,
            "simultaneous": bool(simultaneous),
            "items": [
                {"lower": float(a), "upper": float(b), "estimate": finite_or_none(float(f))} | none
                for a, b, f in zip(hist.lower, hist.upper, hist.estimates, strict=True)
            ],
            "mean": finite_or_none(self.mean().mean),
            "mean_stderr": None,
            "mean_low": None,
            "mean_high": None,
            "methods": {"items": NO_INTERVAL, "mean": NO_INTERVAL},
            "note": NO_INTERVAL_NOTE,
        }
        fit = self.reconstruction
        if fit is not None:  # an answer says whether EMS converged, and warns if not
            out["convergence"] = fit.convergence()
            if fit.warning is not None:
                out["warning"] = fit.warning
        if quantiles:
            out["quantiles"] = [
                {"q": float(q), "value": finite_or_none(self.quantile_value(q)), "low": None,
                 "high": None}
                for q in quantiles
            ]  # fmt: skip
            out["methods"]["quantiles"] = NO_INTERVAL
        if range_ is not None:
            lower, upper = _pair(range_)
            share = finite_or_none(self.fraction(lower, upper))
            out["range"] = {"lower": lower, "upper": upper, "estimate": share} | none
            out["methods"]["range"] = NO_INTERVAL
        return out


def _pair(range_: Any) -> tuple[float, float]:
    try:
        lower, upper = range_
        return float(lower), float(upper)
    except (TypeError, ValueError):
        raise ParameterError(f"range must be a pair (lower, upper), got {range_!r}") from None


def _bin_edges(
    bounds: tuple[float, float], bins: int | None, edges: Sequence[float] | None
) -> FloatArray:
    lo, hi = bounds
    if edges is not None:
        e = np.asarray(edges, dtype=np.float64)
        if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
            raise ParameterError("edges must be at least two increasing finite numbers")
        return e
    k = 16 if bins is None else bins
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= MAX_BUCKETS:
        raise ParameterError(f"bins must be an integer in 1 .. {MAX_BUCKETS}, got {k!r}")
    return np.asarray(lo + (hi - lo) * np.arange(k + 1, dtype=np.float64) / k)
