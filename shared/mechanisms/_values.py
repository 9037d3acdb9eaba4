"""Checks on true values before they are perturbed: numbers (one place for every mechanism
of numbers, :class:`~ldpkit.mechanisms.base.NumericMechanism` and the distribution ones)
and item or cell indices."""

from __future__ import annotations

from numbers import Real
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ReportError


def check_numbers(values: npt.NDArray[Any], bounds: tuple[float, float]) -> npt.NDArray[np.float64]:
    """Finite numbers as float64, clipped to ``bounds``; ReportError names the first bad one."""
    if values.dtype.kind == "O":
        is_number = np.fromiter(
            (isinstance(v, Real) and not isinstance(v, bool) for v in values),
            dtype=bool,
            count=values.size,
        )
        if not bool(np.all(is_number)):
            i = int(np.argmin(is_number))
            raise ReportError(f"value {values[i]!r} at index {i} is not a number")
        values = values.astype(np.float64)
    if values.dtype.kind not in "iuf":
        where = f"value {values[0]!r} at index 0 is not a number: " if values.size else ""
        raise ReportError(f"{where}numeric values must be numbers, got dtype {values.dtype}")
    x = values.astype(np.float64)
    bad = ~np.isfinite(x)
    if bool(np.any(bad)):
        i = int(np.argmax(bad))
        raise ReportError(f"value {x[i]!r} at index {i} is not a finite number")
    lo, hi = bounds
    return np.asarray(np.clip(x, lo, hi))


def whole_floats(values: npt.NDArray[Any]) -> bool:
    """Are ``values`` floats, every one a whole number (as an empty float array is)?"""
    finite = values.dtype.kind == "f" and bool(np.all(np.isfinite(values)))
    return finite and bool(np.all(values == np.floor(values)))


def in_range(values: npt.NDArray[Any], size: int, domain: str = "") -> npt.NDArray[np.int64]:
    """Integer ``values`` as int64 if all lie in ``0 .. size - 1``; ReportError names the first
    that does not."""
    bad = (values < 0) | (values >= size)
    if bool(np.any(bad)):
        i = int(np.argmax(bad))
        raise ReportError(f"value {values[i]!r} at index {i} is outside {domain}0..{size - 1}")
    return values.astype(np.int64, copy=False)
