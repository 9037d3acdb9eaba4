"""Moved to :mod:`ldpkit.analyst` (the analyst needs no collector code); kept so that
``from ldpkit.collector.analyst import Analyst`` goes on working."""

from ..analyst import (
    TOKEN_ENV,
    Analyst,
    BucketEstimate,
    EstimateResult,
    ItemEstimate,
    MetricVersion,
)

__all__ = [
    "TOKEN_ENV",
    "Analyst",
    "BucketEstimate",
    "EstimateResult",
    "ItemEstimate",
    "MetricVersion",
]
