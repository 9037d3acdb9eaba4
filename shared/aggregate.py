"""Sufficient statistics that merge by addition."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .errors import ParameterError


@dataclass(frozen=True, eq=False)
class Aggregate:
    """The number of reports ``n`` and a vector of sums whose layout the mechanism defines.

    Frequency oracles keep one support count per item; numeric mechanisms keep the sum
    and the sum of squares of their debiased reports. Batches, time buckets and collector
    replicas combine with ``+``, so an estimate never needs the reports themselves.
    """

    n: int
    sums: npt.NDArray[np.float64]

    def __post_init__(self) -> None:
        sums = np.asarray(self.sums, dtype=np.float64)
        if sums.ndim != 1:
            raise ParameterError(f"aggregate sums must be one-dimensional, got shape {sums.shape}")
        if int(self.n) < 0:
            raise ParameterError(f"aggregate n must be >= 0, got {self.n}")
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "sums", sums)

    @classmethod
    def zeros(cls, size: int) -> Aggregate:
        return cls(0, np.zeros(size, dtype=np.float64))

    def __add__(self, other: Aggregate) -> Aggregate:
        if not isinstance(other, Aggregate):
            return NotImplemented
        if other.sums.shape != self.sums.shape:
            raise ParameterError(
                f"cannot merge aggregates of sizes {self.sums.size} and {other.sums.size}"
            )
        return Aggregate(self.n + other.n, self.sums + other.sums)

    def __eq__(self, other: object) -> bool:  # defined here, so Python leaves it unhashable
        if not isinstance(other, Aggregate):
            return NotImplemented
        return self.n == other.n and bool(np.array_equal(self.sums, other.sums))
