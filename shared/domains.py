"""Structured category domains: a tree of categories, and a table of several attributes.

Both are small immutable value objects, validated once, that the structured mechanisms
and their results share. Each maps a user's value to one *base cell* (a leaf of the tree,
a cell of the table) and says how base cells group into coarser categories (the nodes at
each depth of the tree; each attribute's categories in the table). Those groupings are
*partitions* of the base cells, given as one integer label per base cell.

Trees
-----
A tree is given by its leaves as paths joined by a separator, for example
``["MX/Jalisco/Guadalajara", "MX/Jalisco/Zapopan", "MX/Sonora/Hermosillo"]``. A node at
depth ``d`` (1 = the top level; the root, depth 0, is everyone) is the path of its first
``d`` segments. Leaves may sit at different depths: a leaf shallower than the deepest one
is carried down unchanged, so it appears at every deeper depth under its own path (as if
it had a single child, itself). Every depth is then a partition of the users, and the
estimates at any depth sum to one. A leaf may not also be an inner node (``"MX/Jalisco"``
beside ``"MX/Jalisco/Zapopan"`` is refused: a user reporting it would mean two things).

Tables
------
A table is given by its dimensions, an ordered mapping of attribute name to categories,
for example ``{"type": ["Compact", "Van"], "origin": ["USA", "non-USA"]}``. A cell is one
category per attribute; cells are numbered in row-major (C) order, the first attribute
varying slowest: ``index = ravel_multi_index(per-attribute indices, shape)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import ParameterError, ReportError

IntArray = npt.NDArray[np.int64]

MAX_LEAVES = 65536
"""At most this many leaves (base cells): the bound of a categorical metric's categories."""
MAX_DEPTH = 32
"""At most this many levels below the root."""
MAX_CELLS = 65536
"""At most this many cells in a table (the product of the dimensions' sizes)."""


def _check_names(values: object, what: str, *, minimum: int) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ParameterError(f"{what} must be a list of strings, got {values!r}")
    items = tuple(values)
    for v in items:
        if not isinstance(v, str) or not v:
            raise ParameterError(f"{what} must be non-empty strings, got {v!r}")
    if len(items) < minimum:
        raise ParameterError(f"{what} must hold at least {minimum} items, got {len(items)}")
    seen: set[str] = set()
    for v in items:
        if v in seen:
            raise ParameterError(f"{what} must be distinct; {v!r} appears more than once")
        seen.add(v)
    return items


@dataclass(frozen=True, eq=False)
class Tree:
    """A tree of categories given by its leaf paths.

    Parameters
    ----------
    leaves : sequence of str
        The leaf paths, in the order that numbers them (a user's value is a leaf's index).
    separator : str
        What joins the segments of a path (default ``"/"``).

    Attributes
    ----------
    depth : int
        The depth of the deepest leaf (the number of levels below the root).
    paths : tuple of tuple of str
        ``paths[d - 1]`` lists the nodes at depth ``d``, in order of first appearance
        among the leaves.
    labels : tuple of ndarray
        ``labels[d - 1][j]`` is the index, in ``paths[d - 1]``, of leaf ``j``'s node at
        depth ``d``: the partition of the leaves at that depth.
    parents : tuple of ndarray
        ``parents[d - 1][u]`` is the index at depth ``d - 1`` of node ``u``'s parent
        (0, the root, at depth 1).
    leaf_depths : ndarray
        Each leaf's own depth (the number of its segments).
    """

    leaves: tuple[str, ...]
    separator: str = "/"
    depth: int = field(init=False)
    paths: tuple[tuple[str, ...], ...] = field(init=False, repr=False)
    labels: tuple[IntArray, ...] = field(init=False, repr=False)
    parents: tuple[IntArray, ...] = field(init=False, repr=False)
    leaf_depths: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        sep = self.separator
        if not isinstance(sep, str) or not sep:
            raise ParameterError(f"separator must be a non-empty string, got {sep!r}")
        leaves = _check_names(self.leaves, "leaves", minimum=2)
        if len(leaves) > MAX_LEAVES:
            raise ParameterError(f"a tree holds at most {MAX_LEAVES} leaves, got {len(leaves)}")
        segments = _segments(leaves, sep)
        depth = max(len(s) for s in segments)
        if depth > MAX_DEPTH:
            raise ParameterError(f"a tree is at most {MAX_DEPTH} levels deep, got {depth}")
        paths, labels, parents = _levels(segments, depth, sep)
        leaf_depths = np.array([len(s) for s in segments], dtype=np.int64)
        for array in (*labels, *parents, leaf_depths):
            array.flags.writeable = False
        object.__setattr__(self, "leaves", leaves)
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "leaf_depths", leaf_depths)

    @property
    def size(self) -> int:
        """The number of leaves (base cells)."""
        return len(self.leaves)

    def width(self, depth: int) -> int:
        """The number of nodes at ``depth``."""
        return len(self.paths[self.check_depth(depth) - 1])

    def check_depth(self, depth: object) -> int:
        if isinstance(depth, bool) or not isinstance(depth, int | np.integer):
            raise ParameterError(f"depth must be an integer, got {depth!r}")
        if not 1 <= int(depth) <= self.depth:
            raise ParameterError(f"depth must be in 1..{self.depth}, got {depth}")
        return int(depth)

    @cached_property
    def _where(self) -> dict[str, tuple[int, int]]:
        # A carried-down leaf has the same path at several depths: the shallowest wins.
        where: dict[str, tuple[int, int]] = {}
        for d, nodes in enumerate(self.paths, start=1):
            for i, path in enumerate(nodes):
                where.setdefault(path, (d, i))
        return where

    def locate(self, path: object) -> tuple[int, int]:
        """``(depth, index)`` of the node with this path (its shallowest occurrence)."""
        if not isinstance(path, str):
            raise ParameterError(f"a node path must be a string, got {path!r}")
        try:
            return self._where[path]
        except KeyError:
            raise ParameterError(f"{path!r} is not a node of the tree") from None

    def descendants(self, path: str, depth: int | None = None) -> IntArray:
        """Indices, at ``depth`` (default: one below the node), of the nodes under ``path``.

        A node's "descendants" at its own depth are the node itself; a carried-down leaf
        has itself as its only descendant at every deeper depth.
        """
        d0, i0 = self.locate(path)
        target = min(d0 + 1, self.depth) if depth is None else self.check_depth(depth)
        if target < d0:
            raise ParameterError(f"depth {target} is above {path!r} (at depth {d0})")
        members = self.labels[d0 - 1] == i0
        return np.unique(self.labels[target - 1][members])

    def leaf_index(self, value: object) -> int:
        """The index of a leaf given by its path; ReportError if it is not a leaf."""
        if not isinstance(value, str):
            raise ReportError(f"a hierarchy value is a leaf path (a string), got {value!r}")
        try:
            return self._leaf_numbers[value]
        except KeyError:
            hint = " (an inner node: report a leaf)" if value in self._where else ""
            raise ReportError(f"{value!r} is not a leaf of the tree{hint}") from None

    @cached_property
    def _leaf_numbers(self) -> dict[str, int]:
        return {leaf: j for j, leaf in enumerate(self.leaves)}

    def params(self) -> dict[str, Any]:
        return {"categories": list(self.leaves), "separator": self.separator}


def _segments(leaves: tuple[str, ...], sep: str) -> list[list[str]]:
    """Each leaf's path segments; no segment empty, no leaf the parent of another."""
    segments = []
    for leaf in leaves:
        parts = leaf.split(sep)
        if any(not s for s in parts):
            raise ParameterError(
                f"leaf {leaf!r} has an empty segment (a separator {sep!r} at its start or "
                "end, or two in a row)"
            )
        segments.append(parts)
    leaf_set = set(leaves)
    for parts in segments:
        for d in range(1, len(parts)):
            prefix = sep.join(parts[:d])
            if prefix in leaf_set:
                raise ParameterError(
                    f"{prefix!r} is a leaf and also the parent of {sep.join(parts)!r}; a "
                    "category is either a leaf or a group of leaves"
                )
    return segments


def _levels(
    segments: list[list[str]], depth: int, sep: str
) -> tuple[tuple[tuple[str, ...], ...], tuple[IntArray, ...], tuple[IntArray, ...]]:
    """Per depth 1 .. ``depth``: the nodes' paths, each leaf's node, each node's parent."""
    paths: list[tuple[str, ...]] = []
    labels: list[IntArray] = []
    parents: list[IntArray] = []
    previous = np.zeros(len(segments), dtype=np.int64)
    for d in range(1, depth + 1):
        index: dict[str, int] = {}
        label = np.empty(len(segments), dtype=np.int64)
        for j, parts in enumerate(segments):
            path = sep.join(parts[: min(d, len(parts))])
            label[j] = index.setdefault(path, len(index))
        parent = np.zeros(len(index), dtype=np.int64)
        parent[label] = previous
        paths.append(tuple(index))
        labels.append(label)
        parents.append(parent)
        previous = label
    return tuple(paths), tuple(labels), tuple(parents)


@dataclass(frozen=True, eq=False)
class Table:
    """The product domain of several categorical attributes.

    Parameters
    ----------
    dimensions : mapping of str to sequence of str
        Attribute name -> its categories, in order (at least two attributes, each with
        at least two distinct categories).
    """

    dimensions: Mapping[str, tuple[str, ...]]
    shape: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        dims = self.dimensions
        if not isinstance(dims, Mapping):
            raise ParameterError(
                f"dimensions must be a mapping of attribute name to categories, got {dims!r}"
            )
        names = _check_names(list(dims), "dimension names", minimum=2)
        checked = {
            name: _check_names(dims[name], f"categories of dimension {name!r}", minimum=2)
            for name in names
        }
        shape = tuple(len(c) for c in checked.values())
        cells = int(np.prod(shape, dtype=np.int64))
        if cells > MAX_CELLS:
            raise ParameterError(f"a table holds at most {MAX_CELLS} cells, got {cells}")
        object.__setattr__(self, "dimensions", checked)
        object.__setattr__(self, "shape", shape)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.dimensions)

    @cached_property
    def size(self) -> int:
        """The number of cells (base cells)."""
        return int(np.prod(self.shape, dtype=np.int64))

    def axis(self, name: object) -> int:
        """The position of an attribute."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ParameterError(
                f"{name!r} is not a dimension; the dimensions are {', '.join(self.names)}"
            ) from None

    def labels(self, name: str) -> IntArray:
        """For every cell, the index of its category of attribute ``name`` (a partition)."""
        return np.unravel_index(np.arange(self.size), self.shape)[self.axis(name)].astype(np.int64)

    def index(self, cell: object) -> int:
        """The flat index of a cell given as ``{name: category}`` or a tuple of categories.

        Raises ReportError naming what is wrong (a missing or unknown attribute, a
        category that is not one of its attribute's).
        """
        indices = tuple(
            self._category_index(name, value)
            for name, value in zip(self.names, self._cell_values(cell), strict=True)
        )
        return int(np.ravel_multi_index(indices, self.shape))

    def _cell_values(self, cell: object) -> list[Any]:
        """A cell's category per attribute, in the attributes' order."""
        if isinstance(cell, tuple | list) and len(cell) == len(self.shape):
            return list(cell)
        if not isinstance(cell, Mapping):
            raise ReportError(
                f"a table value is a mapping {{attribute: category}} over "
                f"{', '.join(self.names)}, got {cell!r}"
            )
        self._check_attributes(cell)
        return [cell[a] for a in self.names]

    def _check_attributes(self, cell: Mapping[Any, Any]) -> None:
        missing = [a for a in self.names if a not in cell]
        extra = [str(a) for a in cell if a not in self.dimensions]
        if missing or extra:
            parts = [
                f"{what} {', '.join(v)}"
                for what, v in (("missing", missing), ("unknown", extra))
                if v
            ]
            raise ReportError(
                f"a table value needs one category for each of {', '.join(self.names)} "
                f"({'; '.join(parts)})"
            )

    def _category_index(self, name: str, value: object) -> int:
        categories = self.dimensions[name]
        if not isinstance(value, str):
            raise ReportError(f"{name} must be one of its categories (a string), got {value!r}")
        try:
            return categories.index(value)
        except ValueError:
            raise ReportError(
                f"{value!r} is not a category of {name}; expected one of "
                f"{', '.join(categories[:20])}" + ("..." if len(categories) > 20 else "")
            ) from None

    def encode(self, columns: Mapping[str, npt.ArrayLike]) -> IntArray:
        """Flat cell indices from per-attribute category indices (vectorized).

        ``columns[name]`` holds, for every user, the index of their category of ``name``.
        """
        if not isinstance(columns, Mapping) or set(columns) != set(self.names):
            raise ReportError(f"encode needs one index array per dimension: {self.names}")
        arrays = []
        for name, size in zip(self.names, self.shape, strict=True):
            a = np.asarray(columns[name])
            if a.dtype.kind not in "iu":
                raise ReportError(f"indices of {name} must be integers, got dtype {a.dtype}")
            if a.size and (a.min() < 0 or a.max() >= size):
                raise ReportError(f"indices of {name} must lie in 0..{size - 1}")
            arrays.append(a.astype(np.int64))
        return np.ravel_multi_index(tuple(arrays), self.shape).astype(np.int64)

    def cell(self, index: int) -> dict[str, str]:
        """The cell with flat ``index`` as ``{attribute: category}``."""
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise ParameterError(f"a cell index must be an integer, got {index!r}")
        if not 0 <= int(index) < self.size:
            raise ParameterError(f"cell index must be in 0..{self.size - 1}, got {index}")
        per = np.unravel_index(int(index), self.shape)
        return {
            name: self.dimensions[name][int(i)] for name, i in zip(self.names, per, strict=True)
        }

    def cells(self) -> tuple[dict[str, str], ...]:
        """Every cell as ``{attribute: category}``, in flat order (shared: do not modify)."""
        return self._cells

    @cached_property
    def _cells(self) -> tuple[dict[str, str], ...]:
        grids = np.unravel_index(np.arange(self.size), self.shape)
        columns = [
            [self.dimensions[name][i] for i in grid.tolist()]
            for name, grid in zip(self.names, grids, strict=True)
        ]
        return tuple(dict(zip(self.names, row, strict=True)) for row in zip(*columns, strict=True))

    def params(self) -> dict[str, Any]:
        return {"dimensions": {name: list(c) for name, c in self.dimensions.items()}}
