"""Mechanisms, one module per family, found by name through :func:`mechanism`.

Modules are imported on first use, so a device that reports one metric loads one family.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .._validation import check_bounds, check_domain_size, check_epsilon, shown
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
}

CATEGORICAL = ("grr", "sue", "oue", "olh", "ss", "hr")
"""Candidates ``auto`` weighs for a categorical metric, in order of preference on ties."""
NUMERIC = ("laplace", "duchi", "piecewise", "hybrid")
"""Candidates ``auto`` weighs for a numeric metric."""
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
        raise ParameterError(f"mechanism name must be a string, got {shown(name)}")
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key != "auto" and key not in _REGISTRY:
        raise ParameterError(f"unknown mechanism {shown(name)}; choose one of {', '.join(NAMES)}")
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
    *, epsilon: float, domain_size: int | None = None, bounds: tuple[float, float] | None = None
) -> Choice:
    """The mechanism of smallest variance for (epsilon, domain_size) or (epsilon, bounds)."""
    if (domain_size is None) == (bounds is None):
        raise ParameterError("give exactly one of domain_size (categorical) or bounds (numeric)")
    epsilon = check_epsilon(epsilon)
    variances: dict[str, float] = {}
    if domain_size is not None:
        d = check_domain_size(domain_size)
        for name in CATEGORICAL:
            cls = mechanism_class(name)
            m = cls(epsilon=epsilon, domain_size=d)  # type: ignore[call-arg]
            assert isinstance(m, FrequencyOracle)
            variances[name] = float(m.variance(0.0))
    else:
        lo_hi = check_bounds(bounds)
        for name in NUMERIC:
            cls = mechanism_class(name)
            m = cls(epsilon=epsilon, bounds=lo_hi)  # type: ignore[call-arg]
            assert isinstance(m, NumericMechanism)
            variances[name] = m.worst_case_variance()
    best = min(variances.values())
    # First in preference order within a hair of the best (OUE and OLH tie in theory).
    chosen = next(k for k, v in variances.items() if v <= best * (1 + 1e-9))
    return Choice(chosen, variances)


def mechanism(
    name: str,
    *,
    epsilon: float,
    domain_size: int | None = None,
    bounds: tuple[float, float] | None = None,
    **options: Any,
) -> Mechanism:
    """Make a mechanism by name: ``mechanism("oue", epsilon=1.0, domain_size=64)``.

    Categorical names take ``domain_size``; numeric names take ``bounds=(lo, hi)``.
    ``"auto"`` picks the smallest-variance candidate (see :func:`choose`); the returned
    mechanism's ``name`` says which one it is.
    """
    canonical = canonical_name(name)
    if canonical == "auto":
        canonical = choose(epsilon=epsilon, domain_size=domain_size, bounds=bounds).name
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
    "CATEGORICAL",
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
