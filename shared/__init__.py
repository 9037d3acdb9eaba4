"""ldpkit: local differential privacy, from the device to the estimate.

>>> import numpy as np, ldpkit
>>> m = ldpkit.mechanism("grr", epsilon=1.0, domain_size=4)
>>> reports = m.perturb(np.array([0, 1, 2, 3]), rng=np.random.default_rng(0))
>>> est = m.estimate(m.aggregate(reports))
>>> est.n
4
"""

from .aggregate import Aggregate
from .distribution import (
    DistributionEstimate,
    DistributionMean,
    HistogramEstimate,
    QuantileEstimate,
    RangeEstimate,
)
from .domains import Table, Tree
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
