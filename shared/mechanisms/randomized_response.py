"""Randomized response: binary (Warner 1965) and k-ary / generalized (GRR).

References
----------
S. L. Warner, "Randomized response", JASA 1965.
T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017 (direct encoding / GRR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from . import _bits
from ._conformance import CATEGORIES, categorical_cases, chi2
from ._portable import Derived, Words, hex64, rr_item
from .base import BoolArray, FloatArray, FrequencyOracle, IntArray, LawTest, PlanCase, Reports

REPORT_DTYPE = np.dtype("<u4")


@dataclass(frozen=True, kw_only=True)
class GeneralizedRR(FrequencyOracle):
    """k-ary randomized response: keep the true item with probability
    ``p = e^eps / (e^eps + d - 1)``, else report one of the other d - 1 items uniformly.

    epsilon-LDP: any output has probability p or q = 1 / (e^eps + d - 1), and p / q = e^eps.
    Best for small domains (d < 3 e^eps + 2 or so). A report is one item index (uint32).

    Screening: every item is a possible report of every input (probability p or q), so no
    statistic of one report has a law free of the input and none is tested per report;
    the support counts are, pooled (:meth:`FrequencyOracle.screen_aggregate`).
    """

    name: ClassVar[str] = "grr"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases("grr")
    aggregate_cost = 1  # one counter per report: the report names one item
    report_dtype = REPORT_DTYPE

    def _support_probabilities(self) -> tuple[float, float]:
        # Written as 1 / (1 + (d - 1) e^-eps) to stay exact for large epsilon.
        d = self.domain_size
        p = 1.0 / (1.0 + (d - 1) * math.exp(-self.epsilon))
        return p, (1.0 - p) / (d - 1)

    @property
    def report_rule(self) -> str:
        return f"an item index in 0..{self.domain_size - 1}"

    def _perturb(self, values: IntArray, rng: np.random.Generator) -> npt.NDArray[np.uint32]:
        n = values.size
        # A 64-bit coin at floor(p 2^64): the rule of docs/protocol.md ("keep" threshold).
        keep = _bits.uniform_u64(rng, n) < np.uint64(self.keep_threshold)
        # Uniform over the other d - 1 items: draw from d - 1 and skip over the true one.
        other = rng.integers(0, self.domain_size - 1, size=n)
        other += other >= values
        return np.where(keep, values, other).astype(REPORT_DTYPE)

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`_perturb` of one value, in Python integers (the same words, the same bytes)."""
        draws = _bits.OneDraws(rng)
        v = int(value)
        keep = draws.u64() < self.keep_threshold
        other = draws.integers(self.domain_size - 1)
        return (v if keep else other + (other >= v)).to_bytes(4, "little")

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(reports < self.domain_size)

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.bincount(reports, minlength=self.domain_size).astype(np.float64)

    @property
    def distinct_reports(self) -> int:
        return self.domain_size

    def supports(self, value: Any, reports: npt.ArrayLike) -> BoolArray:
        return np.asarray(np.asarray(reports) == value)

    def output_probabilities(self, value: int) -> tuple[npt.NDArray[Any], FloatArray]:
        """Every possible report for ``value`` and its exact probability."""
        probs = np.full(self.domain_size, self.q)
        probs[value] = self.p
        return np.arange(self.domain_size, dtype=REPORT_DTYPE), probs

    @property
    def support_size(self) -> int:
        return 1

    def report_channel(self) -> FloatArray:
        """``q`` everywhere but ``p`` on the diagonal (a report is an item)."""
        d = self.domain_size
        return np.asarray(np.full((d, d), self.q) + (self.p - self.q) * np.eye(d))

    def pair_support(self) -> tuple[float, float]:
        """A report supports one item only."""
        return 0.0, 0.0

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {"keep": hex64(self.keep_threshold)}

    @classmethod
    def portable_item(cls, derived: Derived, d: int, x: int, words: Words) -> bytes:
        """x if ``coin(keep)``, else ``below(d - 1)`` skipping x: a uint32."""
        return rr_item(derived["keep"], d, x, words).to_bytes(4, "little")

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """Every item's count against its probability."""
        _, probs = self.output_probabilities(int(value))
        counts = np.bincount(reports.astype(np.int64), minlength=self.domain_size)
        return [("item", *chi2(counts, probs), "")]


@dataclass(frozen=True, kw_only=True)
class BinaryRR(GeneralizedRR):
    """Warner's randomized response for a yes/no value (``domain_size`` must be 2).

    Tell the truth with probability ``e^eps / (1 + e^eps)``; this is GRR with d = 2.
    """

    name: ClassVar[str] = "rr"
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = categorical_cases(
        "rr", categories=CATEGORIES[:2], inputs=(0, -1), wide=False
    )
    domain_size: int = 2

    def __post_init__(self) -> None:
        if self.domain_size != 2:
            raise ParameterError(
                f"domain_size must be 2 for binary randomized response 'rr', got "
                f"{self.domain_size!r}; use 'grr' for larger domains"
            )
        super().__post_init__()
