"""Mechanisms, one module per family, found by name through :func:`mechanism`.

Modules are imported on first use, so a device that reports one metric loads one family.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._validation import check_bounds, check_delta, check_domain_size, check_epsilon, shown
from ..errors import ParameterError
from .base import FrequencyOracle as FrequencyOracle
from .base import Mechanism as Mechanism
from .base import NumericMechanism as NumericMechanism

# canonical name -> (module, class), in the order of the conformance plan
_REGISTRY: dict[str, tuple[str, str]] = {
    "grr": ("randomized_response", "GeneralizedRR"),
    "rr": ("randomized_response", "BinaryRR"),
    "sue": ("unary", "SymmetricUnaryEncoding"),
    "oue": ("unary", "OptimizedUnaryEncoding"),
    "olh": ("local_hashing", "OptimizedLocalHashing"),
    "ss": ("subset_selection", "SubsetSelection"),
    "hr": ("hadamard", "HadamardResponse"),
    "duchi": ("duchi", "Duchi"),
    "piecewise": ("piecewise", "Piecewise"),
    "hybrid": ("piecewise", "Hybrid"),
    "laplace": ("laplace", "LocalLaplace"),
    "gaussian": ("gaussian", "LocalGaussian"),
    "hh": ("hierarchical", "HierarchicalHistogram"),
    "rollup": ("hierarchy", "LeafRollup"),
    "levels": ("hierarchy", "LevelSampling"),
    "joint": ("table", "JointTable"),
    "joint_marginals": ("table", "JointMarginals"),
    "split": ("table", "SplitMarginals"),
    "prefix_sketch": ("strings", "PrefixSketch"),
    "exponential": ("exponential", "Exponential"),
    "square_wave": ("square_wave", "SquareWaveMechanism"),
}

ALIASES: dict[str, str] = {
    "krr": "grr",
    "kary": "grr",
    "direct": "grr",
    "rappor": "sue",
    "basic_rappor": "sue",
    "lh": "olh",
    "subset": "ss",
    "hadamard": "hr",
    "pm": "piecewise",
    "hm": "hybrid",
    "pxs": "prefix_sketch",
    "hierarchical": "hh",
    "hierarchical_histogram": "hh",
}

CATEGORICAL = ("grr", "sue", "oue", "olh", "ss", "hr")
"""Candidates ``auto`` weighs for a categorical metric, in order of preference on ties."""
ORDERED = ("grr", "sue", "oue", "ss", "hr", "exponential")
"""Candidates ``auto`` weighs for ordered categories (``ordered = true``), by the variance
of the mean rank: the oracles whose items' covariance is known, and the exponential
mechanism (with the definition's score, distance by default)."""
SCORED = ("exponential",)
"""Mechanisms that take a definition's score (``score``, ``band``, ``scores``)."""
NUMERIC = ("laplace", "duchi", "piecewise", "hybrid")
"""Candidates ``auto`` weighs for a numeric metric (pure epsilon-LDP)."""
APPROXIMATE = ("gaussian",)
"""(epsilon, delta)-LDP numeric candidates: weighed only when delta > 0 is allowed."""
DISTRIBUTION = ("hh",)
"""Candidates ``auto`` weighs for a distribution metric (bounds and a resolution)."""
NOT_WEIGHED_DISTRIBUTION = {
    "square_wave": "its EMS estimate is smoothed (biased) with no interval that covers "
    "(the bootstrap's coverage is 35-97% at 95%), and auto keeps answers with intervals; "
    'ask for it with mechanism = "square_wave"',
}
"""Distribution mechanisms ``auto`` does not weigh, and why (:meth:`Choice.explain`)."""
STRINGS = ("prefix_sketch",)
"""Mechanisms for open-domain strings (``max_length``); ``auto`` takes the first."""
HIERARCHY = ("rollup", "levels")
"""Designs for a hierarchy (``tree=``); ``ldpkit.structured.choose_hierarchy`` weighs them."""
TABLE_DESIGNS = ("joint", "joint_marginals")
"""Designs a table metric may use; ``ldpkit.structured.choose_table`` weighs them."""
TABLE = (*TABLE_DESIGNS, "split")
"""Designs for a table (``table=``); ``split`` estimates marginals only."""
STRUCTURED_ORACLES = ("grr", "sue", "oue", "ss")
"""Oracles a view of a hierarchy or a table may use (their items' covariance is
exchangeable and derived: :meth:`FrequencyOracle.pair_support`)."""
AUTO_ORACLES = ("grr", "oue", "ss")
"""Candidates for a view's oracle under ``"auto"`` (SUE is never better than OUE)."""
REGISTERED = tuple(_REGISTRY)
"""Every mechanism's canonical name, in registration order."""
NAMES = (*REGISTERED, "auto")


def mechanism_class(name: str) -> type[Mechanism]:
    """The class registered under ``name`` (canonical or alias)."""
    canonical = canonical_name(name)
    if canonical == "auto":
        raise ParameterError("'auto' is not a class; call mechanism('auto', ...) or choose()")
    module_name, class_name = _REGISTRY[canonical]
    cls: type[Mechanism] = getattr(importlib.import_module(f"{__name__}.{module_name}"), class_name)
    return cls


def oracle_class(name: str) -> type[FrequencyOracle]:
    """The frequency oracle registered under ``name`` (a nested oracle's, served by name)."""
    cls = mechanism_class(name)
    if not issubclass(cls, FrequencyOracle):
        raise ParameterError(f"{name!r} is not a frequency oracle")
    return cls


def make_oracle(name: str, epsilon: float, size: int) -> FrequencyOracle:
    """The oracle ``name`` (or the best of :data:`AUTO_ORACLES` for ``"auto"``) over
    ``size`` items, for a view of a structured metric.

    ``"auto"`` takes the smallest variance of an item at frequency 0, the rule of
    :func:`choose`, among the oracles whose covariance is known.
    """
    key = canonical_name(name)
    if key == "auto":
        candidates = [oracle_class(c)(epsilon=epsilon, domain_size=size) for c in AUTO_ORACLES]
        variances = [c.auto_variance() for c in candidates]
        best = min(variances)
        return next(c for c, v in zip(candidates, variances, strict=True) if v <= best * (1 + 1e-9))
    if key not in STRUCTURED_ORACLES:
        raise ParameterError(
            f"oracle {name!r} cannot serve a structured metric; use one of "
            f"{', '.join(STRUCTURED_ORACLES)} or 'auto'"
        )
    return oracle_class(key)(epsilon=epsilon, domain_size=size)


def canonical_name(name: object) -> str:
    if not isinstance(name, str):
        raise ParameterError(f"mechanism name must be a string, got {shown(name)}")
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key != "auto" and key not in _REGISTRY:
        raise ParameterError(f"unknown mechanism {shown(name)}; choose one of {', '.join(NAMES)}")
    return key


AUTO_VARIANCE_TOLERANCE = 0.05
"""``auto`` treats candidates within this fraction of the lowest variance as equally
accurate and takes the smallest report among them: 5% more variance costs 5% more
users (2.5% wider intervals) for the same campaign, while reports can differ six-fold
in size (subset selection's d/8 bytes against OLH's 20 at d = 1024)."""


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked, and what it weighed for every candidate, so it can be explained.

    For categorical metrics ``variances`` holds each candidate's variance of one item's
    estimated fraction at frequency 0 with n = 1 (divide by n for n users); for numeric
    ones, the worst-case per-report variance over the bounds in the metric's units.
    ``report_bytes`` is each candidate's report size on the wire and ``collector_cost``
    the counters the collector updates per report when it aggregates (see
    :attr:`FrequencyOracle.aggregate_cost`).
    """

    name: str
    variances: dict[str, float]
    report_bytes: dict[str, int] = field(default_factory=dict)
    collector_cost: dict[str, int] = field(default_factory=dict)
    epsilon: float | None = None
    domain_size: int | None = None
    bounds: tuple[float, float] | None = None
    tolerance: float = AUTO_VARIANCE_TOLERANCE
    unit: str | None = None
    """What the variances are of, when not the default of the metric's kind (ordered
    categories: the mean rank's)."""
    not_weighed: dict[str, str] = field(default_factory=dict)
    """Mechanisms of the metric's kind that were not weighed, and why."""

    def explain(self) -> str:
        """A table of the candidates, lowest variance first, with the rule that picked."""
        best = min(self.variances.values())
        what, unit = self._scope()
        eps = f"epsilon={self.epsilon:g}" if self.epsilon is not None else ""
        lines = [
            f"auto for {', '.join(x for x in (eps, what) if x)}: the smallest report",
            f"among the candidates within {self.tolerance:.0%} of the lowest variance",
            f"  {'mechanism':<10} {'variance':>10} {'vs best':>8} {'bytes/report':>13} "
            f"{'collector counters/report':>26}",
        ]
        for name, var in sorted(self.variances.items(), key=lambda kv: kv[1]):
            lines.append(self._row(name, var, best))
        lines.append(f"  variance: {unit}")
        lines.append("  collector counters/report: updated by the collector per report as it")
        lines.append("    aggregates (a model of its work; benchmarks/mechanisms.py times it)")
        lines += [f"  not weighed: {name}: {why}" for name, why in self.not_weighed.items()]
        return "\n".join(lines)

    def _scope(self) -> tuple[str, str]:
        """What the candidates were weighed for, and the unit of their variances."""
        if self.domain_size is not None and self.unit is not None:
            return f"d={self.domain_size} ordered categories", self.unit
        if self.domain_size is not None:
            return (
                f"d={self.domain_size} categories",
                "of one item's fraction at frequency 0, per report (divide by n)",
            )
        if self.bounds is not None:
            return (
                f"bounds [{self.bounds[0]:g}, {self.bounds[1]:g}]",
                "worst case of the mean, per report, in the metric's units squared",
            )
        return "", "variance per report"

    def _row(self, name: str, variance: float, best: float) -> str:
        size = self.report_bytes.get(name)
        cost = self.collector_cost.get(name)
        return (
            f"  {name:<10} {variance:>10.5g} {variance / best:>7.3f}x "
            f"{'-' if size is None else size:>13} {'-' if cost is None else cost:>26}"
            + ("  <- chosen" if name == self.name else "")
        )


def choose(
    *,
    epsilon: float,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    resolution: int | None = None,
    delta: float = 0.0,
    ordered: bool = False,
    scored: Mapping[str, Any] | None = None,
) -> Choice:
    """The mechanism ``auto`` resolves to for (epsilon, domain_size) or (epsilon, bounds).

    For ordered categories (``ordered``) the candidates are :data:`ORDERED`, weighed by
    the variance of the mean rank (a uniform population, one report); a definition's
    score keys (``scored``: ``score``, ``band``, ``scores``) go to the mechanisms of
    :data:`SCORED`, which are weighed beside :data:`CATEGORICAL` for unordered ones.

    Among the candidates whose variance is within :data:`AUTO_VARIANCE_TOLERANCE` of the
    lowest, the one with the smallest report; among equal sizes the lower variance, then
    the lower collector cost, then the order of :data:`CATEGORICAL` / :data:`NUMERIC`.

    With ``resolution`` (and bounds) the metric is a distribution: the candidates are
    :data:`DISTRIBUTION`, compared by the variance of the fraction below the middle of
    the bounds for uniform values and n = 1. A numeric metric weighs the
    (epsilon, delta) mechanisms of :data:`APPROXIMATE` only when ``delta > 0``.
    """
    if (domain_size is None) == (bounds is None):
        raise ParameterError("give exactly one of domain_size (categorical) or bounds (numeric)")
    epsilon = check_epsilon(epsilon)
    if domain_size is not None:
        if resolution is not None:
            raise ParameterError("resolution is for distribution metrics (with bounds)")
        d = check_domain_size(domain_size)
        if ordered or scored:
            return _scored_choice(epsilon, d, ordered, scored or {})
        return _choice(_made(CATEGORICAL, epsilon, domain_size=d), epsilon, d, None)
    lo_hi = check_bounds(bounds)
    if resolution is not None:
        made = _made(DISTRIBUTION, epsilon, bounds=lo_hi, resolution=resolution)
        chosen = _choice(made, epsilon, None, lo_hi)
        return replace(chosen, not_weighed=dict(NOT_WEIGHED_DISTRIBUTION))
    approximate = check_delta(delta) > 0
    made = _made(NUMERIC, epsilon, bounds=lo_hi)
    if approximate:
        made.update(_made(APPROXIMATE, epsilon, bounds=lo_hi, delta=delta))
    return _choice(made, epsilon, None, lo_hi)


def _scored_choice(epsilon: float, d: int, ordered: bool, scored: Mapping[str, Any]) -> Choice:
    """:func:`choose` for ordered categories, or with a score (see there)."""
    names = ORDERED if ordered else (*CATEGORICAL, *SCORED)
    made: dict[str, Mechanism] = {}
    for name in names:
        cls = oracle_class(name)
        fields = cls.score_fields(ordered, scored) if name in SCORED else {}
        made[name] = cls(epsilon=epsilon, domain_size=d, **fields)
    if not ordered:
        return _choice(made, epsilon, d, None)
    variances = {}
    for name, m in made.items():
        assert isinstance(m, FrequencyOracle)  # ORDERED holds oracles with a rank variance
        v = m.rank_variance()
        assert v is not None
        variances[name] = v
    return _choice(made, epsilon, d, None, variances, RANK_UNIT)


RANK_UNIT = "of the mean rank (ranks 1..d) for a uniform population, per report (divide by n)"


def _made(names: tuple[str, ...], epsilon: float, **options: Any) -> dict[str, Mechanism]:
    return {name: mechanism_class(name)(epsilon=epsilon, **options) for name in names}


def _choice(
    candidates: dict[str, Mechanism],
    epsilon: float,
    d: int | None,
    lo_hi: tuple[float, float] | None,
    variances: dict[str, float] | None = None,
    unit: str | None = None,
) -> Choice:
    """The rule of :func:`choose` over the candidates made, in order of preference
    (``variances``: what to weigh them by, default their :meth:`Mechanism.auto_variance`)."""
    if variances is None:
        variances = {name: m.auto_variance() for name, m in candidates.items()}
    sizes = {name: m.report_dtype.itemsize for name, m in candidates.items()}
    costs = {name: m.aggregate_cost for name, m in candidates.items()}
    best = min(variances.values())
    # Ties in theory (OUE and OLH, HM and Duchi at small epsilon) differ by rounding only.
    near = [k for k, v in variances.items() if v <= best * (1 + AUTO_VARIANCE_TOLERANCE)]
    order = {k: i for i, k in enumerate(variances)}
    chosen = min(near, key=lambda k: (sizes[k], round(variances[k] / best, 9), costs[k], order[k]))
    return Choice(chosen, variances, sizes, costs, epsilon, d, lo_hi, unit=unit)


def mechanism(
    name: str,
    *,
    epsilon: float,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    max_length: int | None = None,
    **options: Any,
) -> Mechanism:
    """Make a mechanism by name: ``mechanism("oue", epsilon=1.0, domain_size=64)``.

    Categorical names take ``domain_size``; numeric names take ``bounds=(lo, hi)``; distribution
    names take ``bounds`` and ``resolution`` (and optionally ``branching``); ``"gaussian"`` takes
    ``delta``; string mechanisms take ``max_length`` (bytes).
    ``"auto"`` picks the smallest report among the lowest-variance candidates (see :func:`choose`):
    a distribution when ``resolution`` is given, and an (epsilon, delta) mechanism only when
    ``delta`` > 0 is given; the returned mechanism's ``name`` says which one it is.
    """
    canonical = canonical_name(name)
    if max_length is not None or canonical in STRINGS:
        if domain_size is not None or bounds is not None or max_length is None:
            raise ParameterError(
                "string mechanisms take max_length (bytes), not domain_size or bounds"
            )
        return _string_mechanism(canonical, epsilon, max_length, options)
    if canonical == "auto":
        canonical = _auto(epsilon, domain_size, bounds, options)
    cls = mechanism_class(canonical)
    if canonical in HIERARCHY or canonical in TABLE:
        _check_structured(canonical, domain_size, bounds)
        return cls(epsilon=epsilon, **options)
    if issubclass(cls, FrequencyOracle):
        size = _domain_size(canonical, domain_size, bounds)
        return cls(epsilon=epsilon, domain_size=size, **options)
    numeric: dict[str, Any] = {"bounds": _bounds(canonical, domain_size, bounds)}
    return cls(epsilon=epsilon, **numeric, **options)


def _string_mechanism(
    canonical: str, epsilon: float, max_length: int, options: dict[str, Any]
) -> Mechanism:
    canonical = STRINGS[0] if canonical == "auto" else canonical
    if canonical not in STRINGS:
        raise ParameterError(f"{canonical!r} is not a mechanism for strings")
    return _made((canonical,), epsilon, max_length=max_length, **options)[canonical]


def _check_structured(canonical: str, domain_size: object, bounds: object) -> None:
    if domain_size is not None or bounds is not None:
        what = "tree=" if canonical in HIERARCHY else "table="
        raise ParameterError(f"{canonical!r} is structured: give {what}, not domain_size/bounds")


def _auto(
    epsilon: float,
    domain_size: int | None,
    bounds: tuple[float, float] | None,
    options: dict[str, Any],
) -> str:
    """What ``auto`` resolves to; a delta the chosen mechanism takes not leaves ``options``."""
    resolution = options.get("resolution")
    delta = options.get("delta", 0.0)
    name = choose(
        epsilon=epsilon, domain_size=domain_size, bounds=bounds, resolution=resolution, delta=delta
    ).name
    if name not in APPROXIMATE:
        options.pop("delta", None)
    return name


def _domain_size(canonical: str, domain_size: int | None, bounds: object) -> int:
    if bounds is not None:
        raise ParameterError(f"{canonical!r} is categorical: give domain_size, not bounds")
    if domain_size is not None:
        return domain_size
    if canonical == "rr":
        return 2
    raise ParameterError(f"{canonical!r} needs domain_size (number of categories)")


def _bounds(canonical: str, domain_size: object, bounds: object) -> object:
    if domain_size is not None:
        raise ParameterError(f"{canonical!r} is numeric: give bounds=(lo, hi), not domain_size")
    if bounds is None:
        raise ParameterError(f"{canonical!r} needs bounds=(lo, hi)")
    return bounds
