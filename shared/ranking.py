"""Which is the most common? The mode's confidence set and the top items' rank intervals.

Setting
-------
Items ``0 .. d - 1`` have unknown fractions ``mu`` and unbiased, asymptotically normal
estimates ``f``; for any two items the variance of ``f_j - f_i`` is known when
``mu_i = mu_j`` (or bounded from above): :data:`DifferenceVariance`. The estimates of a
frequency oracle are correlated (a randomized-response report supports one item, so two
items' support counts move in opposite directions), and the variance of a difference is
where that shows: ignoring it understates it, by half for two items under randomized
response.

The confidence set of the mode
------------------------------
Item i is *beaten* by item j when the one-sided test of ``mu_j <= mu_i`` rejects:

    (f_j - f_i - step) / sd_ij > c1,   c1 = z_{1 - alpha / (d - 1)},   alpha = 1 - level,

with ``sd_ij`` the standard deviation of ``f_j - f_i`` at ``mu_i = mu_j`` and ``step`` a
continuity correction (half the difference's smallest change). The set holds every item
no other item beats. The true mode m is left out only if some j beats it; every such j has
``mu_j <= mu_m``, so each test rejects with probability at most ``alpha / (d - 1)`` and,
whatever their dependence (Bonferroni), all d - 1 together with probability at most
alpha: the set holds the true mode with probability at least ``level``. An item is tested
against the leader and the ``COMPETITORS`` items of largest estimate only (beating an item
needs a larger estimate, and testing fewer pairs can only keep items in): the set is
computed in O(d), never O(d^2), and its guarantee is unchanged.

The ranks of the top items
--------------------------
Rank 1 is the most common: item i's rank is ``1 + #{j : mu_j > mu_i}``. With two-sided
tests of every pair at ``alpha / (d (d - 1))`` per side, its interval is
``[1 + #{j surely above i}, d - #{j surely below i}]`` (Mogstad, Romano, Shaikh and
Wilhelm's construction from simultaneous pairwise comparisons): on the event that no test
of the ``d (d - 1) / 2`` pairs is wrong, which has probability at least ``level``, every
item's interval holds its rank, so they hold **together**, for the top items chosen after
seeing the data as for any others.

References
----------
S. S. Gupta, "On some multiple decision (selection and ranking) rules", Technometrics 7,
1965 (a subset holding the best population at a chosen level).

M. Mogstad, J. P. Romano, A. M. Shaikh, D. Wilhelm, "Inference for ranks with applications
to mobility across neighbourhoods and academic achievement across countries", Review of
Economic Studies 91(1), 2024 (confidence sets for ranks and for the best from
pairwise differences, correlated estimates allowed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from ._validation import check_level

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DifferenceVariance = Callable[[IntArray, IntArray], FloatArray]
"""``variance(i, j)``: the variance of ``f_j - f_i`` at ``mu_i = mu_j`` (or a bound on it)
for item arrays i and j broadcast together."""

METHOD = "pairwise-bonferroni"
"""How the set and the rank intervals are made (see the module)."""
COMPETITORS = 64
"""Each item is tested against this many items of largest estimate (the leader first)."""
TOP = 5
"""How many top items get a rank interval by default."""
_CHUNK = 4096


def upper_quantile(alpha: float) -> float:
    """The standard normal's upper ``alpha`` quantile (one-sided)."""
    return -NormalDist().inv_cdf(alpha)


@dataclass(frozen=True)
class MostCommon:
    """The estimated mode and the items that could be the most common.

    Attributes
    ----------
    mode : int or None
        The item of largest estimate (None without estimates).
    set : tuple of int
        The confidence set, by decreasing estimate: it holds the true mode with
        probability at least ``level`` (the mode first).
    level : float
    method : str
        ``"pairwise-bonferroni"`` (docs/statistics.md).
    """

    mode: int | None
    set: tuple[int, ...]
    level: float
    method: str

    @property
    def certain(self) -> bool:
        """Whether the set is the mode alone."""
        return len(self.set) == 1

    def labelled(self, labels: Sequence[Any]) -> dict[str, Any]:
        """JSON-ready: ``mode`` and ``set`` as ``labels`` (categories, paths, cells)."""
        return {
            "mode": None if self.mode is None else _plain(labels[self.mode]),
            "set": [_plain(labels[i]) for i in self.set],
            "level": self.level,
            "method": self.method,
        }

    def describe(self, labels: Sequence[Any]) -> str:
        """One line: ``most common: X (or Y, Z at 95%)``."""
        mode = None if self.mode is None else labels[self.mode]
        return describe(mode, [labels[i] for i in self.set if i != self.mode], self.level)


def label(item: Any) -> str:
    """An item's name in a line: a table's cell as ``(type=Van, origin=USA)``."""
    if isinstance(item, Mapping):
        return "(" + ", ".join(f"{k}={v}" for k, v in item.items()) + ")"
    return str(item)


def describe(mode: Any, others: Sequence[Any], level: float) -> str:
    """``most common: X (or Y, Z at 95%)``, ``most common: X (alone at 95%)``, or
    ``most common: no estimate yet`` (``mode`` None)."""
    if mode is None:
        return "most common: no estimate yet"
    head = f"most common: {label(mode)}"
    if not others:
        return f"{head} (alone at {level:.0%})"
    return f"{head} (or {', '.join(label(o) for o in others)} at {level:.0%})"


@dataclass(frozen=True)
class Ranks:
    """Rank intervals of the top items (rank 1: the most common), holding together.

    Attributes
    ----------
    items : tuple of int
        The top items by estimate.
    rank : tuple of int
        Each one's estimated rank, ``1 + #{j : f_j > f_i}``.
    low, high : tuple of int
        Each one's interval of ranks; all of them (and those of any other items) hold
        their true ranks together with probability at least ``level``.
    level : float
    method : str
    """

    items: tuple[int, ...]
    rank: tuple[int, ...]
    low: tuple[int, ...]
    high: tuple[int, ...]
    level: float
    method: str

    def labelled(self, labels: Sequence[Any], key: str = "category") -> list[dict[str, Any]]:
        """JSON-ready: one ``{key, rank, low, high}`` per top item."""
        rows = zip(self.items, self.rank, self.low, self.high, strict=True)
        return [{key: _plain(labels[i]), "rank": r, "low": lo, "high": hi} for i, r, lo, hi in rows]


def _plain(label: Any) -> Any:
    """A label for JSON: a mapping (a table's cell) as a dict."""
    if isinstance(label, str):  # the common case, and a cheap test
        return label
    return dict(label) if isinstance(label, Mapping) else label


def _z(f: FloatArray, i: IntArray, j: IntArray, variance: DifferenceVariance, step: float) -> Any:
    """``(f_j - f_i - step) / sd_ij``; +inf (-inf) where sd is 0 and the difference
    positive (negative), NaN (never significant) where both are 0."""
    diff = f[j] - f[i] - step
    sd = np.sqrt(np.maximum(variance(i, j), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, diff / np.where(sd > 0, sd, 1.0), np.sign(diff) * np.inf)


def _estimates(estimates: npt.ArrayLike) -> FloatArray | None:
    f = np.asarray(estimates, dtype=np.float64)
    if f.ndim != 1 or f.size == 0 or not np.all(np.isfinite(f)):
        return None
    return f


def most_common(
    estimates: npt.ArrayLike,
    variance: DifferenceVariance,
    level: float = 0.95,
    *,
    step: float = 0.0,
    floor: float = 0.0,
) -> MostCommon:
    """The mode of ``estimates`` and its confidence set at ``level`` (see the module).

    Parameters
    ----------
    estimates : array of d unbiased estimates (not all finite: no mode, every item in).
    variance : :data:`DifferenceVariance`.
    level : the probability that the set holds the true mode, at least.
    step : continuity correction: half the smallest change of a difference.
    floor : a lower bound on every difference's variance (0: none known); an item within
        ``c sqrt(floor)`` of the leader cannot be beaten and is not tested further.
    """
    level = check_level(level)
    f = _estimates(estimates)
    if f is None:
        size = np.asarray(estimates).size
        return MostCommon(None, tuple(range(size)), level, METHOD)
    order = np.argsort(-f, kind="stable")
    d = f.size
    if d == 1:
        return MostCommon(0, (0,), level, METHOD)
    c = upper_quantile((1.0 - level) / (d - 1))
    beaten = np.asarray(_z(f, np.arange(d), order[:1], variance, step) > c)  # by the leader
    beatable = f[order[0]] - f - step > c * np.sqrt(max(floor, 0.0))
    rest, rivals = np.flatnonzero(~beaten & beatable), order[1:COMPETITORS][None, :]
    for start in range(0, rest.size, _CHUNK):
        items = rest[start : start + _CHUNK]
        beaten[items] = np.any(_z(f, items[:, None], rivals, variance, step) > c, axis=1)
    kept = tuple(order[~beaten[order]].tolist())
    return MostCommon(int(order[0]), kept, level, METHOD)


def ranks(
    estimates: npt.ArrayLike,
    variance: DifferenceVariance,
    level: float = 0.95,
    *,
    top: int = TOP,
    step: float = 0.0,
) -> Ranks:
    """Rank intervals of the ``top`` items of largest estimate, holding together with
    every other item's at ``level`` (see the module); none without finite estimates."""
    level = check_level(level)
    f = _estimates(estimates)
    if f is None:
        return Ranks((), (), (), (), level, METHOD)
    d = f.size
    k = max(0, min(int(top), d))
    best = np.argpartition(-f, k - 1)[:k] if 0 < k < d else np.arange(d)[:k]
    items = best[np.lexsort((best, -f[best]))][:, None]  # by estimate, then index
    pairs = max(d * (d - 1) // 2, 1)
    c = upper_quantile((1.0 - level) / (2.0 * pairs))
    everyone = np.arange(d)[None, :]
    above = np.sum(_z(f, items, everyone, variance, step) > c, axis=1)
    below = np.sum(_z(f, everyone, items, variance, step) > c, axis=1)
    rank = 1 + np.sum(f[None, :] > f[items], axis=1)
    return Ranks(
        tuple(int(i) for i in items[:, 0]),
        tuple(int(r) for r in rank),
        tuple(int(1 + a) for a in above),
        tuple(int(d - b) for b in below),
        level,
        METHOD,
    )


def from_covariance(covariance: npt.ArrayLike) -> DifferenceVariance:
    """:data:`DifferenceVariance` of estimates with this (d, d) covariance matrix:
    ``S_ii + S_jj - 2 S_ij`` (a plug-in; the channel inversion of the exponential
    mechanism has one)."""
    s = np.asarray(covariance, dtype=np.float64)
    diag = np.diag(s)

    def variance(i: IntArray, j: IntArray) -> FloatArray:
        return np.asarray(diag[i] + diag[j] - 2.0 * s[i, j])

    return variance


def from_stderr(stderr: Callable[[IntArray, IntArray], FloatArray]) -> DifferenceVariance:
    """A bound when only each estimate's own error is known: ``(sd_i + sd_j)^2``, the
    variance of the difference at correlation -1 (Cauchy-Schwarz), whatever the joint law.
    ``stderr(i, j)`` gives item i's standard deviation at ``mu_i = mu_j``."""

    def variance(i: IntArray, j: IntArray) -> FloatArray:
        return np.asarray((stderr(i, j) + stderr(j, i)) ** 2)

    return variance
