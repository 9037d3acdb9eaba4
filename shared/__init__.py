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

from .errors import BudgetExceeded as BudgetExceeded
from .errors import CollectorRejected as CollectorRejected
from .errors import CollectorTimedOut as CollectorTimedOut
from .errors import CollectorUnavailable as CollectorUnavailable
from .errors import ConfigError as ConfigError
from .errors import EstimatePending as EstimatePending
from .errors import LdpkitError as LdpkitError
from .errors import OutboxFull as OutboxFull
from .errors import ParameterError as ParameterError
from .errors import ProtocolError as ProtocolError
from .errors import QueryError as QueryError
from .errors import ReportError as ReportError
from .errors import StateError as StateError
from .errors import StoreClosed as StoreClosed
from .errors import StoreError as StoreError
from .errors import TransportError as TransportError
from .errors import UnknownMetric as UnknownMetric

if TYPE_CHECKING:  # the names below load on first use (__getattr__), for mypy here
    from .aggregate import Aggregate as Aggregate
    from .distribution import DistributionEstimate as DistributionEstimate
    from .distribution import DistributionMean as DistributionMean
    from .distribution import HistogramEstimate as HistogramEstimate
    from .distribution import QuantileEstimate as QuantileEstimate
    from .distribution import RangeEstimate as RangeEstimate
    from .domains import Table as Table
    from .domains import Tree as Tree
    from .estimates import ConfidenceInterval as ConfidenceInterval
    from .estimates import FrequencyEstimate as FrequencyEstimate
    from .estimates import MeanEstimate as MeanEstimate
    from .estimates import norm_sub as norm_sub
    from .heavy_hitters import HeavyHitters as HeavyHitters
    from .heavy_hitters import StringEstimate as StringEstimate
    from .heavy_hitters import StringPlan as StringPlan
    from .heavy_hitters import plan_strings as plan_strings
    from .heavy_hitters import required_n_strings as required_n_strings
    from .mechanisms import CATEGORICAL as CATEGORICAL
    from .mechanisms import DISTRIBUTION as DISTRIBUTION
    from .mechanisms import NUMERIC as NUMERIC
    from .mechanisms import Choice as Choice
    from .mechanisms import FrequencyOracle as FrequencyOracle
    from .mechanisms import Mechanism as Mechanism
    from .mechanisms import NumericMechanism as NumericMechanism
    from .mechanisms import choose as choose
    from .mechanisms import mechanism as mechanism
    from .planner import Plan as Plan
    from .planner import plan as plan
    from .planner import required_n as required_n
    from .ranking import MostCommon as MostCommon
    from .ranking import Ranks as Ranks
    from .structured import StructuredChoice as StructuredChoice
    from .structured import StructuredPlan as StructuredPlan
    from .structured import choose_hierarchy as choose_hierarchy
    from .structured import choose_table as choose_table
    from .structured import hierarchy as hierarchy
    from .structured import plan_structured as plan_structured
    from .structured import required_n_structured as required_n_structured
    from .structured import table as table
    from .structured_estimates import GroupEstimate as GroupEstimate
    from .structured_estimates import HierarchyEstimate as HierarchyEstimate
    from .structured_estimates import TableEstimate as TableEstimate


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
    "ranking": "MostCommon Ranks",
    "structured": "StructuredChoice StructuredPlan choose_hierarchy choose_table hierarchy "
    "plan_structured required_n_structured table",
    "structured_estimates": "GroupEstimate HierarchyEstimate TableEstimate",
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names.split()}

__version__ = "0.1.0"


if not TYPE_CHECKING:  # mypy reads the `X as X` imports above as the exports, and no catch-all
    _errors = [
        n for n, v in globals().items() if isinstance(v, type) and issubclass(v, LdpkitError)
    ]
    __all__ = sorted([*_errors, *_MODULE_OF, "__version__"])

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
