"""How reports become discrete cells, the audit's events being unions of cells.

What a report says about an input comes from the mechanism itself: the reports when they
are few enough to list (:attr:`~ldpkit.mechanisms.Mechanism.distinct_reports`), else
whether each report supports x and x' (:meth:`~ldpkit.mechanisms.Mechanism.supports`),
per layer for mechanisms whose reports each describe one layer (a tree's depth,
:meth:`~ldpkit.mechanisms.Mechanism.report_layer`); numbers are cut into quantile bins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..mechanisms import Mechanism

IDENTITY_CELLS = 1024
"""A report is its own cell when the mechanism has at most this many different reports."""


@dataclass
class Partition:
    """How one pair's reports become integer cells, and how to describe a set of cells."""

    keys: Callable[[npt.NDArray[Any]], npt.NDArray[np.int64]]
    describe: Callable[[npt.NDArray[np.int64]], str]
    ordered: bool = False
    """Cells are intervals in increasing order: events are runs of adjacent cells."""


def list_description(
    cells: npt.NDArray[np.int64], show: Callable[[int], str], noun: str = "report"
) -> str:
    values = sorted(int(c) for c in cells)
    if len(values) == 1:
        return f"{noun} == {show(values[0])}"
    shown = ", ".join(show(v) for v in values[:4])
    more = f", ... ({len(values)} outputs)" if len(values) > 4 else ""
    return f"{noun} in {{{shown}{more}}}"


def _flag_partition(
    flags: Callable[[npt.NDArray[Any]], tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]],
    what: tuple[str, str],
) -> Partition:
    """Cells from two yes/no properties of a report (one about x, one about x')."""

    def keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        first, second = flags(reports)
        return first.astype(np.int64) + 2 * second.astype(np.int64)

    def describe(cells: npt.NDArray[np.int64]) -> str:
        names = []
        for c in sorted(int(v) for v in cells):
            a = what[0] if c & 1 else f"not {what[0]}"
            b = what[1] if c & 2 else f"not {what[1]}"
            names.append(f"({a} and {b})")
        return " or ".join(names)

    return Partition(keys, describe)


def _bitmap_keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    weights = np.int64(256) ** np.arange(reports.shape[1], dtype=np.int64)
    keys: npt.NDArray[np.int64] = (reports.astype(np.int64) * weights).sum(axis=1)
    return keys


def default_partition(mechanism: Mechanism, x: Any, y: Any) -> Partition | None:
    """The cells for a pair (x, y) of a mechanism with discrete reports, from what the
    mechanism says about its reports; None if it says nothing (the caller falls back to
    the reports' bytes)."""
    count = mechanism.distinct_reports
    if count is not None and count <= IDENTITY_CELLS:
        dtype = mechanism.report_dtype
        if dtype.subdtype is None:  # one number per report: the report is the cell
            return Partition(
                lambda r: np.asarray(r).astype(np.int64), lambda cells: list_description(cells, str)
            )
        bits = 8 * dtype.itemsize  # a bitmap: shown as its bits

        def show(key: int) -> str:
            return "".join("1" if key >> j & 1 else "0" for j in range(bits))

        return Partition(_bitmap_keys, lambda cells: list_description(cells, show, "bits"))
    kind = type(mechanism)
    if kind.supports is Mechanism.supports:  # says nothing about single inputs
        return None
    flags = _flag_partition(
        lambda r: (mechanism.supports(x, r), mechanism.supports(y, r)),
        (f"supports {x!r}", f"supports {y!r}"),
    )
    return flags if kind.report_layer is Mechanism.report_layer else _layered(mechanism, flags)


def _layered(mechanism: Mechanism, flags: Partition) -> Partition:
    """Flags per layer: cell ``4 layer + flags`` (a report speaks about one layer)."""

    def keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        layer = mechanism.report_layer(reports)
        assert layer is not None
        return 4 * layer + flags.keys(reports)

    def describe(cells: npt.NDArray[np.int64]) -> str:
        return " or ".join(
            f"(depth {c // 4}: {flags.describe(np.array([c % 4]))})"
            for c in sorted(int(v) for v in cells)
        )

    return Partition(keys, describe)


def generic_keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Report identity for any dtype, as small integers (unique rows of the raw bytes)."""
    raw = np.ascontiguousarray(reports)
    rows = raw.reshape(raw.shape[0], -1).view(np.uint8).reshape(raw.shape[0], -1)
    if rows.shape[1] <= 7:
        return _bitmap_keys(rows)
    raise ParameterError(
        "reports wider than 7 bytes need an events= function mapping them to cells"
    )


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def binned_partition(
    values: Callable[[npt.NDArray[Any]], npt.NDArray[np.float64]],
    pooled: npt.NDArray[np.float64],
    bins: int,
    noun: str,
) -> Partition:
    """Quantile bins of ``values`` fitted on ``pooled``; repeated values get their own cell."""
    quantiles = np.quantile(pooled, np.linspace(0.0, 1.0, bins + 1)[1:-1])
    unique, counts = np.unique(quantiles, return_counts=True)
    atoms = unique[counts > 1]
    edges = np.unique(np.concatenate([unique, np.nextafter(atoms, np.inf)]))
    atom_set = {float(a) for a in atoms}

    def keys(reports: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        return np.searchsorted(edges, values(reports), side="right").astype(np.int64)

    def describe(cells: npt.NDArray[np.int64]) -> str:
        # Cell i holds edges[i - 1] <= v < edges[i]; merge runs of adjacent cells.
        parts: list[str] = []
        ordered = sorted(int(c) for c in cells)
        start = prev = ordered[0]
        for c in [*ordered[1:], None]:
            if c is not None and c == prev + 1:
                prev = c
                continue
            left = float(edges[start - 1]) if start > 0 else -math.inf
            right = float(edges[prev]) if prev < len(edges) else math.inf
            if start == prev and left in atom_set:
                parts.append(f"{{{_fmt(left)}}}")
            else:
                parts.append(f"[{_fmt(left)}, {_fmt(right)})")
            if c is not None:
                start = prev = c
        more = f" or ... ({len(parts)} pieces)" if len(parts) > 3 else ""
        return f"{noun} in {' or '.join(parts[:3])}{more}"

    return Partition(keys, describe, ordered=True)
