"""ldpkit: local differential privacy, from the device to the estimate.

>>> import numpy as np, ldpkit
>>> m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
>>> reports = m.perturb(np.array([0, 1, 2, 3]), rng=np.random.default_rng(0))
>>> est = m.estimate(m.aggregate(reports))
>>> est.n
4
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    BudgetExceeded,
    CollectorRejected,
    CollectorUnavailable,
    ConfigError,
    LdpkitError,
    OutboxFull,
    ParameterError,
    ProtocolError,
    QueryError,
    ReportError,
    StateError,
    StoreClosed,
    StoreError,
    TransportError,
    UnknownMetric,
)

if TYPE_CHECKING:  # the names below load on first use (__getattr__), for mypy here
    from .aggregate import Aggregate
    from .distribution import (
        DistributionEstimate,
        DistributionMean,
        HistogramEstimate,
        QuantileEstimate,
        RangeEstimate,
    )
    from .domains import Table, Tree
    from .estimates import ConfidenceInterval, FrequencyEstimate, MeanEstimate, norm_sub
    from .heavy_hitters import (
        HeavyHitters,
        StringEstimate,
        StringPlan,
        plan_strings,
        required_n_strings,
    )
    from .mechanisms import (
        CATEGORICAL,
        DISTRIBUTION,
        NUMERIC,
        Choice,
        FrequencyOracle,
        Mechanism,
        NumericMechanism,
        choose,
        mechanism,
    )
    from .planner import Plan, plan, required_n
    from .structured import (
        StructuredChoice,
        StructuredPlan,
        choose_hierarchy,
        choose_table,
        hierarchy,
        plan_structured,
        required_n_structured,
        table,
    )
    from .structured_estimates import GroupEstimate, HierarchyEstimate, TableEstimate


# Public names by module (space-separated), loaded on first use: `import ldpkit` loads
# only ldpkit.errors, so a device or a script pays for the mechanisms, distributions,
# structured designs and strings decoding it uses, not for all of them.
_LAZY = {
    "aggregate": "Aggregate",
    "distribution": "DistributionEstimate DistributionMean HistogramEstimate QuantileEstimate "
    "RangeEstimate",
    "domains": "Table Tree",
    "estimates": "ConfidenceInterval FrequencyEstimate MeanEstimate norm_sub",
    "heavy_hitters": "HeavyHitters StringEstimate StringPlan plan_strings required_n_strings",
    "mechanisms": "CATEGORICAL DISTRIBUTION NUMERIC Choice FrequencyOracle Mechanism "
    "NumericMechanism choose mechanism",
    "planner": "Plan plan required_n",
    "structured": "StructuredChoice StructuredPlan choose_hierarchy choose_table hierarchy "
    "plan_structured required_n_structured table",
    "structured_estimates": "GroupEstimate HierarchyEstimate TableEstimate",
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names.split()}

__version__ = "0.1.0"

__all__ = [
    "CATEGORICAL",
    "DISTRIBUTION",
    "NUMERIC",
    "Aggregate",
    "BudgetExceeded",
    "Choice",
    "CollectorRejected",
    "CollectorUnavailable",
    "ConfidenceInterval",
    "ConfigError",
    "DistributionEstimate",
    "DistributionMean",
    "FrequencyEstimate",
    "FrequencyOracle",
    "GroupEstimate",
    "HeavyHitters",
    "HierarchyEstimate",
    "HistogramEstimate",
    "LdpkitError",
    "MeanEstimate",
    "Mechanism",
    "NumericMechanism",
    "OutboxFull",
    "ParameterError",
    "Plan",
    "ProtocolError",
    "QuantileEstimate",
    "QueryError",
    "RangeEstimate",
    "ReportError",
    "StateError",
    "StoreClosed",
    "StoreError",
    "StringEstimate",
    "StringPlan",
    "StructuredChoice",
    "StructuredPlan",
    "Table",
    "TableEstimate",
    "TransportError",
    "Tree",
    "UnknownMetric",
    "__version__",
    "choose",
    "choose_hierarchy",
    "choose_table",
    "hierarchy",
    "mechanism",
    "norm_sub",
    "plan",
    "plan_strings",
    "plan_structured",
    "required_n",
    "required_n_strings",
    "required_n_structured",
    "table",
]


if not TYPE_CHECKING:  # mypy reads the imports above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        """A public name's module, or a submodule, imported on first use (PEP 562)."""
        module = _MODULE_OF.get(name)
        if module is not None:
            value = getattr(importlib.import_module(f".{module}", __name__), name)
        elif name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        else:  # `import ldpkit; ldpkit.mechanisms.X` worked when this module loaded it
            try:
                value = importlib.import_module(f".{name}", __name__)
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{name}":
                    raise
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        globals()[name] = value  # the next lookup finds it without this function
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
