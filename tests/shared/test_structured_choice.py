"""``auto`` for hierarchies and tables, and the structured planner."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ldpkit
from ldpkit.estimates import normal_quantile
from ldpkit.mechanisms import mechanism

BIG = [f"r{a}/s{b}/t{c}" for a in range(8) for b in range(8) for c in range(8)]
CARS = {
    "type": ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"],
    "origin": ["USA", "non-USA"],
}


def test_auto_hierarchy_follows_the_focus() -> None:
    tree = ldpkit.Tree(tuple(BIG))
    for epsilon in (0.5, 1.0, 4.0):
        # Upper levels reported directly through small-domain oracles win there ...
        top = ldpkit.choose_hierarchy(tree, epsilon=epsilon, focus=[1])
        assert top.mechanism == "levels"
        # ... and every user reporting the leaves wins at the leaves.
        leaves = ldpkit.choose_hierarchy(tree, epsilon=epsilon, focus=[3])
        assert leaves.mechanism == "rollup"
        for choice in (top, leaves):
            best = min(choice.scores.values())
            assert choice.scores[choice.chosen] == best
            assert "<- chosen" in choice.explain()
    m = ldpkit.hierarchy(tree, epsilon=1.0, focus=[3])
    assert m.name == "rollup" and m.views[0].oracle.name == "ss"


def test_auto_table_follows_the_focus() -> None:
    table = ldpkit.Table(CARS)
    cells = ldpkit.choose_table(table, epsilon=1.0)
    assert cells.focus == ("cells",) and cells.mechanism == "joint"
    origin = ldpkit.choose_table(table, epsilon=1.0, focus=["origin"])
    assert origin.mechanism == "joint_marginals"
    assert "split" in origin.explain()  # shown for comparison, never chosen
    m = ldpkit.table(CARS, epsilon=1.0, focus=["origin"])
    assert m.name == "joint_marginals"


@pytest.mark.parametrize(
    ("focus", "message"),
    [([1], "single node"), ([4], "depth must be in"), ("1", "list of depths"), ([], "list")],
)
def test_bad_hierarchy_focus_is_refused(focus: object, message: str) -> None:
    tree = ldpkit.Tree(("MX/J/G", "MX/J/Z", "MX/S/H"))
    with pytest.raises(ldpkit.ParameterError, match=message):
        ldpkit.choose_hierarchy(tree, epsilon=1.0, focus=focus)  # type: ignore[arg-type]


def test_bad_table_focus_and_designs_are_refused() -> None:
    with pytest.raises(ldpkit.ParameterError, match="not a dimension"):
        ldpkit.table(CARS, epsilon=1.0, focus=["color"])
    with pytest.raises(ldpkit.ParameterError, match="a table takes mechanism"):
        ldpkit.table(CARS, epsilon=1.0, mechanism="split")
    with pytest.raises(ldpkit.ParameterError, match="a hierarchy takes"):
        ldpkit.hierarchy(BIG, epsilon=1.0, mechanism="joint")
    with pytest.raises(ldpkit.ParameterError, match="levels"):
        ldpkit.hierarchy(BIG, epsilon=1.0, mechanism="rollup", weights=[1, 2, 3])
    with pytest.raises(ldpkit.ParameterError, match="weights apply to the 'joint_marginals'"):
        ldpkit.table(CARS, epsilon=1.0, mechanism="joint", weights=[1, 2])


def test_level_options() -> None:
    tree = ldpkit.Tree(tuple(BIG))
    m = ldpkit.hierarchy(tree, epsilon=1.0, mechanism="levels", levels=[1, 3], weights=[1, 3])
    assert [v.name for v in m.views] == ["depth 1", "depth 3"]
    assert [v.weight for v in m.views] == [0.25, 0.75]
    with pytest.raises(ldpkit.ParameterError, match="separates every leaf"):
        ldpkit.hierarchy(tree, epsilon=1.0, mechanism="levels", levels=[1, 2])
    with pytest.raises(ldpkit.ParameterError, match="weights must hold 3"):
        ldpkit.hierarchy(tree, epsilon=1.0, mechanism="levels", weights=[1, 2])


@pytest.mark.parametrize(
    "build",
    [
        lambda: ldpkit.hierarchy(BIG, epsilon=1.0, mechanism="levels"),
        lambda: ldpkit.hierarchy(BIG, epsilon=2.0, mechanism="rollup"),
        lambda: ldpkit.table(CARS, epsilon=1.0, mechanism="joint_marginals"),
        lambda: mechanism("split", epsilon=1.0, table=ldpkit.Table(CARS)),
    ],
)
def test_plan_and_required_n_agree(build: object) -> None:
    m = build()  # type: ignore[operator]
    plan = ldpkit.plan_structured(m, n=20_000)
    z = normal_quantile(0.95)
    for row in plan.rows:
        assert row.half_width == pytest.approx(z * math.sqrt(row.per_user_variance / 20_000))
    for target_width in (0.02, 0.005):
        needed = ldpkit.required_n_structured(m, half_width=target_width)
        assert max(r.half_width for r in needed.rows) <= target_width
        fewer = ldpkit.plan_structured(m, n=needed.n - 1)
        assert max(r.half_width for r in fewer.rows) > target_width
    assert "half-width" in plan.explain()


def test_plan_worst_case_bounds_the_uniform_and_given_populations() -> None:
    m = ldpkit.hierarchy(BIG, epsilon=1.0, mechanism="levels")
    worst = ldpkit.plan_structured(m, n=10_000)
    uniform = ldpkit.plan_structured(m, n=10_000, fractions=np.full(512, 1 / 512))
    skewed = np.arange(1, 513, dtype=float) ** -1.1
    given = ldpkit.plan_structured(m, n=10_000, fractions=skewed / skewed.sum())
    for w, u, g in zip(worst.rows, uniform.rows, given.rows, strict=True):
        assert w.half_width >= u.half_width * (1 - 1e-12)
        assert w.half_width >= g.half_width * (1 - 1e-12)
    one = ldpkit.required_n_structured(m, half_width=0.01, targets=["depth 1"])
    assert one.row("depth 1").half_width <= 0.01 < one.row("depth 3").half_width
    with pytest.raises(ldpkit.ParameterError, match="no target"):
        ldpkit.required_n_structured(m, half_width=0.01, targets=["cells"])
