"""Tree and Table: the validated value objects of structured metrics."""

from __future__ import annotations

import numpy as np
import pytest

import ldpkit
from ldpkit.domains import MAX_DEPTH, Table, Tree

SEED_LEAVES = [
    "MX/Jalisco/Guadalajara",
    "MX/Jalisco/Zapopan",
    "MX/Sonora/Hermosillo",
    "MX/Sonora/Obregon",
    "MX/Yucatan/Merida",
    "MX/Yucatan/Valladolid",
]


def test_tree_levels_labels_and_parents() -> None:
    t = Tree(tuple(SEED_LEAVES))
    assert t.depth == 3 and t.size == 6
    assert t.paths[0] == ("MX",)
    assert t.paths[1] == ("MX/Jalisco", "MX/Sonora", "MX/Yucatan")
    assert t.paths[2] == tuple(SEED_LEAVES)
    np.testing.assert_array_equal(t.labels[1], [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(t.labels[2], np.arange(6))
    np.testing.assert_array_equal(t.parents[0], [0])
    np.testing.assert_array_equal(t.parents[2], [0, 0, 1, 1, 2, 2])
    assert t.locate("MX/Sonora") == (2, 1)
    np.testing.assert_array_equal(t.descendants("MX/Sonora"), [2, 3])
    np.testing.assert_array_equal(t.descendants("MX", depth=3), np.arange(6))
    assert t.leaf_index("MX/Sonora/Obregon") == 3


def test_leaves_at_different_depths_are_carried_down() -> None:
    t = Tree(("MX/CDMX", "MX/Jalisco/Zapopan", "MX/Jalisco/Guadalajara", "US"), "/")
    assert t.depth == 3
    assert t.paths[0] == ("MX", "US")
    assert t.paths[1] == ("MX/CDMX", "MX/Jalisco", "US")
    assert t.paths[2] == ("MX/CDMX", "MX/Jalisco/Zapopan", "MX/Jalisco/Guadalajara", "US")
    # Every depth partitions the leaves; a carried leaf is its own only descendant.
    for labels in t.labels:
        assert labels.shape == (4,)
    np.testing.assert_array_equal(t.leaf_depths, [2, 3, 3, 1])
    assert t.locate("US") == (1, 1)  # the shallowest occurrence
    np.testing.assert_array_equal(t.descendants("US", depth=3), [3])


@pytest.mark.parametrize(
    ("leaves", "separator", "message"),
    [
        (["a/b"], "/", "at least 2"),
        (["a/b", "a/b"], "/", "distinct"),
        (["a//b", "a/c"], "/", "empty segment"),
        (["/a", "b"], "/", "empty segment"),
        (["a/b/", "a/c"], "/", "empty segment"),
        (["a/b", "a/b/c"], "/", "also the parent"),
        (["a", "b"], "", "separator"),
        (["a", 3], "/", "non-empty strings"),
        ("a/b", "/", "list of strings"),
        (["/".join(["x"] * (MAX_DEPTH + 1)), "y"], "/", "levels deep"),
    ],
)
def test_bad_trees_are_refused(leaves: object, separator: str, message: str) -> None:
    with pytest.raises(ldpkit.ParameterError, match=message):
        Tree(leaves, separator)  # type: ignore[arg-type]


def test_tree_lookups_say_what_is_wrong() -> None:
    t = Tree(tuple(SEED_LEAVES))
    with pytest.raises(ldpkit.ReportError, match="inner node"):
        t.leaf_index("MX/Jalisco")
    with pytest.raises(ldpkit.ReportError, match="not a leaf"):
        t.leaf_index("MX/Chiapas/Tuxtla")
    with pytest.raises(ldpkit.ReportError, match="string"):
        t.leaf_index(3)
    with pytest.raises(ldpkit.ParameterError, match="not a node"):
        t.locate("MX/Chiapas")
    with pytest.raises(ldpkit.ParameterError, match=r"depth must be in 1\.\.3"):
        t.check_depth(4)
    with pytest.raises(ldpkit.ParameterError, match="above"):
        t.descendants("MX/Sonora", depth=1)


CARS = {
    "type": ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"],
    "origin": ["USA", "non-USA"],
}


def test_table_encoding_round_trips() -> None:
    t = Table(CARS)
    assert t.shape == (6, 2) and t.size == 12 and t.names == ("type", "origin")
    i = t.index({"type": "Van", "origin": "USA"})
    assert i == 10
    assert t.index({"origin": "USA", "type": "Van"}) == i  # key order does not matter
    assert t.index(("Van", "USA")) == i
    assert t.cell(i) == {"type": "Van", "origin": "USA"}
    assert t.cells()[i] == {"type": "Van", "origin": "USA"}
    flat = t.encode({"type": np.array([5, 0, 1]), "origin": np.array([0, 1, 1])})
    np.testing.assert_array_equal(flat, [10, 1, 3])
    np.testing.assert_array_equal(t.labels("origin"), np.tile([0, 1], 6))
    np.testing.assert_array_equal(t.labels("type"), np.repeat(np.arange(6), 2))


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ({"type": "Van"}, "missing origin"),
        ({"type": "Van", "origin": "USA", "color": "red"}, "unknown color"),
        ({"type": "Truck", "origin": "USA"}, "'Truck' is not a category of type"),
        ({"type": "Van", "origin": 1}, "must be one of its categories"),
        ("Van", "mapping"),
        (("Van",), "mapping"),
    ],
)
def test_bad_cells_are_refused_clearly(cell: object, message: str) -> None:
    with pytest.raises(ldpkit.ReportError, match=message):
        Table(CARS).index(cell)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({"type": ["a", "b"]}, "at least 2"),
        ({"type": ["a", "b"], "origin": ["x"]}, "at least 2"),
        ({"type": ["a", "a"], "origin": ["x", "y"]}, "distinct"),
        (["type", "origin"], "mapping"),
        ({"a": [str(i) for i in range(300)], "b": [str(i) for i in range(300)]}, "at most"),
    ],
)
def test_bad_tables_are_refused(dims: object, message: str) -> None:
    with pytest.raises(ldpkit.ParameterError, match=message):
        Table(dims)  # type: ignore[arg-type]


def test_encode_checks_its_columns() -> None:
    t = Table(CARS)
    with pytest.raises(ldpkit.ReportError, match=r"0\.\.1"):
        t.encode({"type": np.array([0]), "origin": np.array([2])})
    with pytest.raises(ldpkit.ReportError, match="one index array per dimension"):
        t.encode({"type": np.array([0])})
