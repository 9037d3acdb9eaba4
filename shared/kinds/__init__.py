"""Metric kinds, one module per kind, found by name through :func:`kind_spec`.

A kind's module holds everything about it (:class:`~ldpkit.kinds.base.KindSpec`): its
definition keys and their checks, its mechanism (``auto`` resolved), the device's encoding
of a value, its query parameters and the fields of its estimates answer, its plan, and how
the analyst's API, its plots and the CLI show it. Every layer asks :func:`kind_spec`;
nothing outside a kind's module branches on its name. Modules are imported on first use,
so a device that reports one kind loads one. The collector keeps only each mechanism's
sufficient statistics (``Aggregate``): the store and the wire need nothing per kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from .._validation import shown
from ..errors import ParameterError, QueryError
from .base import Built as Built
from .base import Campaign as Campaign
from .base import Definition as Definition
from .base import KindPlan as KindPlan
from .base import KindSpec as KindSpec
from .base import PlanTarget as PlanTarget
from .base import Question as Question


class MetricKind(StrEnum):
    """The kinds: each is the module of this package of the same name."""

    CATEGORICAL = "categorical"
    NUMERIC = "numeric"
    DISTRIBUTION = "distribution"
    HIERARCHY = "hierarchy"
    TABLE = "table"
    STRINGS = "strings"


KIND_KEYS = (
    "categories",
    "ordered",
    "score",
    "band",
    "scores",
    "bounds",
    "delta",
    "resolution",
    "separator",
    "dimensions",
    "focus",
    "oracle",
    "max_length",
    "k",
    "seed",
)
"""Every kind-specific definition key (each kind takes the ones in its ``keys``)."""
KIND_DEFAULTS: dict[str, Any] = {**dict.fromkeys(KIND_KEYS), "delta": 0.0}
"""Each kind-specific key's value when a definition does not give it."""

NAMES = tuple(kind.value for kind in MetricKind)
_LOADED: dict[str, KindSpec] = {}


def kind_spec(name: object) -> KindSpec:
    """The kind registered as ``name``; ParameterError lists the kinds otherwise."""
    spec = _LOADED.get(name) if isinstance(name, str) else None
    if spec is None:
        if name not in NAMES:
            raise ParameterError(f"kind must be one of {', '.join(NAMES)}, got {shown(name)}")
        spec = register(importlib.import_module(f"{__name__}.{name}").SPEC)
    return spec


def register(spec: KindSpec) -> KindSpec:
    _LOADED[spec.name] = spec
    return spec


def __getattr__(name: str) -> dict[str, KindSpec]:
    """``KINDS``: every kind by name (their modules imported: each is imported on first use)."""
    if name != "KINDS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return {kind: kind_spec(kind) for kind in dict.fromkeys([*NAMES, *_LOADED])}


def legacy_kind(categorical: bool) -> MetricKind:
    """The kind of a definition or an answer that names none (written before kinds): a
    categorical metric's (with categories, or items) or a numeric one's."""
    return MetricKind.CATEGORICAL if categorical else MetricKind.NUMERIC


def kind_or_default(kind: str) -> KindSpec:
    """The kind ``kind``; for one this version does not know (a newer collector's answer),
    the plain :class:`KindSpec`, which renders items as a categorical answer's."""
    return kind_spec(kind) if kind in NAMES or kind in _LOADED else KindSpec(kind, ())


def query_params() -> tuple[str, ...]:
    """Every kind's own query parameters (each kind accepts only its own)."""
    return tuple(dict.fromkeys(p for name in NAMES for p in kind_spec(name).params))


def checked_options(definition: Definition, query: Mapping[str, str]) -> dict[str, Any]:
    """The kind's options of an estimates query; QueryError for another kind's parameter."""
    spec = kind_spec(definition.kind)
    others = query_params()
    for key in query:
        if key in others and key not in spec.params:
            accepted = ", ".join(spec.params) or "none"
            raise QueryError(
                key, f"not a parameter of a {spec.name} metric (its own parameters: {accepted})"
            )
    return spec.parse_options(query)
