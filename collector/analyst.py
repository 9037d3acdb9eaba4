"""Moved to :mod:`ldpkit.analyst` (the analyst needs no collector code); kept so that
``from ldpkit.collector.analyst import Analyst`` goes on working."""

from ..analyst import TOKEN_ENV as TOKEN_ENV
from ..analyst import Analyst as Analyst
from ..analyst import BucketEstimate as BucketEstimate
from ..analyst import EstimateResult as EstimateResult
from ..analyst import ItemEstimate as ItemEstimate
from ..analyst import MetricVersion as MetricVersion
