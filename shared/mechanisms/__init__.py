"""Mechanisms, one module per family, found by name through :func:`mechanism`.

Modules are imported on first use, so a device that reports one metric loads one family.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .._validation import check_bounds, check_domain_size, check_epsilon
from ..errors import ParameterError
from .base import FrequencyOracle, Mechanism, NumericMechanism

# canonical name -> (module, class)
_REGISTRY: dict[str, tuple[str, str]] = {
    "rr": ("randomized_response", "BinaryRR"),
    "grr": ("randomized_response", "GeneralizedRR"),
    "sue": ("unary", "SymmetricUnaryEncoding"),
    "oue": ("unary", "OptimizedUnaryEncoding"),
    "olh": ("local_hashing", "OptimizedLocalHashing"),
    "ss": ("subset_selection", "SubsetSelection"),
    "hr": ("hadamard", "HadamardResponse"),
    "laplace": ("laplace", "LocalLaplace"),
    "duchi": ("duchi", "Duchi"),
    "piecewise": ("piecewise", "Piecewise"),
    "hybrid": ("piecewise", "Hybrid"),
    "gaussian": ("gaussian", "LocalGaussian"),
    "hh": ("hierarchical", "HierarchicalHistogram"),
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
    "hierarchical": "hh",
    "hierarchical_histogram": "hh",
}

CATEGORICAL = ("grr", "sue", "oue", "olh", "ss", "hr")
"""Candidates ``auto`` weighs for a categorical metric, in order of preference on ties."""
NUMERIC = ("laplace", "duchi", "piecewise", "hybrid")
"""Candidates ``auto`` weighs for a numeric metric (pure epsilon-LDP)."""
APPROXIMATE = ("gaussian",)
"""(epsilon, delta)-LDP numeric candidates: weighed only when delta > 0 is allowed."""
DISTRIBUTION = ("hh",)
"""Candidates ``auto`` weighs for a distribution metric (bounds and a resolution)."""
NAMES = (*_REGISTRY, "auto")


def mechanism_class(name: str) -> type[Mechanism]:
    """The class registered under ``name`` (canonical or alias)."""
    canonical = canonical_name(name)
    if canonical == "auto":
        raise ParameterError("'auto' is not a class; call mechanism('auto', ...) or choose()")
    module_name, class_name = _REGISTRY[canonical]
    module = importlib.import_module(f"{__name__}.{module_name}")
    cls: type[Mechanism] = getattr(module, class_name)
    return cls


def canonical_name(name: object) -> str:
    if not isinstance(name, str):
        raise ParameterError(f"mechanism name must be a string, got {name!r}")
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key != "auto" and key not in _REGISTRY:
        raise ParameterError(f"unknown mechanism {name!r}; choose one of {', '.join(NAMES)}")
    return key


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked and the variance of every candidate, so it can be explained.

    For categorical metrics ``variances`` holds each candidate's variance of one item's
    estimated fraction at frequency 0 with n = 1 (divide by n for n users); for numeric
    ones, the worst-case per-report variance over the bounds in the metric's units.
    """

    name: str
    variances: dict[str, float]

    def explain(self) -> str:
        rows = sorted(self.variances.items(), key=lambda kv: kv[1])
        lines = [
            f"{name:<10} {var:.6g}{'  <- chosen' if name == self.name else ''}"
            for name, var in rows
        ]
        return "\n".join(lines)


def choose(
    *,
    epsilon: float,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    resolution: int | None = None,
    delta: float = 0.0,
) -> Choice:
    """The mechanism of smallest variance for (epsilon, domain_size) or (epsilon, bounds).

    With ``resolution`` (and bounds) the metric is a distribution: the candidates are
    :data:`DISTRIBUTION`, compared by the variance of the fraction below the middle of
    the bounds for uniform values and n = 1. A numeric metric weighs the
    (epsilon, delta) mechanisms of :data:`APPROXIMATE` only when ``delta > 0``.
    """
    if (domain_size is None) == (bounds is None):
        raise ParameterError("give exactly one of domain_size (categorical) or bounds (numeric)")
    epsilon = check_epsilon(epsilon)
    variances: dict[str, float] = {}
    if domain_size is not None:
        if resolution is not None:
            raise ParameterError("resolution is for distribution metrics (with bounds)")
        d = check_domain_size(domain_size)
        for name in CATEGORICAL:
            cls = mechanism_class(name)
            m = cls(epsilon=epsilon, domain_size=d)  # type: ignore[call-arg]
            assert isinstance(m, FrequencyOracle)
            variances[name] = float(m.variance(0.0))
    elif resolution is not None:
        lo_hi = check_bounds(bounds)
        for name in DISTRIBUTION:
            cls = mechanism_class(name)
            m = cls(epsilon=epsilon, bounds=lo_hi, resolution=resolution)  # type: ignore[call-arg]
            middle = (lo_hi[0] + lo_hi[1]) / 2.0
            variances[name] = m.expected(1.0).fraction(lo_hi[0], middle).stderr ** 2  # type: ignore[attr-defined]
    else:
        lo_hi = check_bounds(bounds)
        approximate = _check_allowed_delta(delta) > 0
        for name in NUMERIC + (APPROXIMATE if approximate else ()):
            cls = mechanism_class(name)
            extra = {"delta": delta} if name in APPROXIMATE else {}
            m = cls(epsilon=epsilon, bounds=lo_hi, **extra)  # type: ignore[call-arg]
            assert isinstance(m, NumericMechanism)
            variances[name] = m.worst_case_variance()
    best = min(variances.values())
    # First in preference order within a hair of the best (OUE and OLH tie in theory).
    chosen = next(k for k, v in variances.items() if v <= best * (1 + 1e-9))
    return Choice(chosen, variances)


def _check_allowed_delta(delta: object) -> float:
    """The delta a metric allows: 0 (pure epsilon-LDP) or a number in (0, 1)."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise ParameterError(f"delta must be a number, got {delta!r}")
    value = float(delta)
    if value == 0.0:
        return 0.0
    if not 0.0 < value < 1.0:
        raise ParameterError(f"delta must be 0 or in (0, 1), got {delta!r}")
    return value


def mechanism(
    name: str,
    *,
    epsilon: float,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    **options: Any,
) -> Mechanism:
    """Make a mechanism by name: ``mechanism("oue", epsilon=1.0, domain_size=64)``.

    Categorical names take ``domain_size``; numeric names take ``bounds=(lo, hi)``;
    distribution names take ``bounds`` and ``resolution`` (and optionally ``branching``);
    ``"gaussian"`` takes ``delta``. ``"auto"`` picks the smallest-variance candidate (see
    :func:`choose`): a distribution when ``resolution`` is given, and an (epsilon,
    delta) mechanism only when ``delta`` > 0 is given; the returned mechanism's ``name``
    says which one it is.
    """
    canonical = canonical_name(name)
    if canonical == "auto":
        resolution = options.get("resolution")
        delta = options.get("delta", 0.0)
        canonical = choose(
            epsilon=epsilon,
            domain_size=domain_size,
            bounds=bounds,
            resolution=resolution,
            delta=delta,
        ).name
        if canonical not in APPROXIMATE:
            options.pop("delta", None)
    cls = mechanism_class(canonical)
    if issubclass(cls, FrequencyOracle):
        if bounds is not None:
            raise ParameterError(f"{canonical!r} is categorical: give domain_size, not bounds")
        if domain_size is None:
            if canonical == "rr":
                domain_size = 2
            else:
                raise ParameterError(f"{canonical!r} needs domain_size (number of categories)")
        return cls(epsilon=epsilon, domain_size=domain_size, **options)
    if domain_size is not None:
        raise ParameterError(f"{canonical!r} is numeric: give bounds=(lo, hi), not domain_size")
    if bounds is None:
        raise ParameterError(f"{canonical!r} needs bounds=(lo, hi)")
    return cls(epsilon=epsilon, bounds=bounds, **options)  # type: ignore[call-arg]


__all__ = [
    "ALIASES",
    "APPROXIMATE",
    "CATEGORICAL",
    "DISTRIBUTION",
    "NAMES",
    "NUMERIC",
    "Choice",
    "FrequencyOracle",
    "Mechanism",
    "NumericMechanism",
    "canonical_name",
    "choose",
    "mechanism",
    "mechanism_class",
]
