"""Structured metrics: build, choose (``auto``) and plan hierarchies and tables.

>>> import ldpkit
>>> m = ldpkit.hierarchy(["MX/Jalisco/Guadalajara", "MX/Jalisco/Zapopan",
...                       "MX/Sonora/Hermosillo"], epsilon=1.0)
>>> m.name, m.encode("MX/Jalisco/Zapopan")
('rollup', 1)

Choosing a design
-----------------
``mechanism="auto"`` compares the candidate designs by their variance where the
operator says it matters, given as ``focus``:

- hierarchies: a list of depths (1 = the top level), default every depth with at least
  two nodes (a depth with one node is known exactly);
- tables: a list among ``"cells"`` and the dimension names (a marginal), default
  ``["cells"]``.

For each candidate and each focus target the criterion is the mean per-user variance of
the target's estimates (nodes at that depth, cells, or a marginal's categories) at the
uniform population; a candidate's score is the mean over targets of its variance divided
by the best candidate's for that target, so every target counts the same whatever its
scale, and the smallest score wins (ties go to the earlier candidate). Candidates:
``rollup`` with each of GRR, OUE and subset selection, and ``levels``; ``joint`` with each
oracle, and ``joint_marginals``. :meth:`StructuredChoice.explain` prints the table.

Planning
--------
:func:`plan_structured` gives, per target, the expected interval half-width after n
reports; :func:`required_n_structured` the n for a target half-width. By default the
figure is for the worst node of each target and the worst value of that node (its
variance along the path from the uniform population, maximized over [0, 1]); pass
``fractions`` (base-cell fractions) for a sharper plan.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._validation import check_count, check_epsilon, check_level, check_positive
from .domains import Table, Tree
from .errors import ParameterError
from .estimates import normal_quantile
from .inference import MAX_DENSE_CELLS
from .mechanisms import HIERARCHY, TABLE_DESIGNS, canonical_name, mechanism_class
from .mechanisms._views import AUTO_ORACLES, ViewSampling
from .mechanisms.hierarchy import HierarchyMechanism, LeafRollup, LevelSampling, refining_depths
from .mechanisms.table import JointMarginals, JointTable, SplitMarginals, TableMechanism

StructuredMechanism = HierarchyMechanism | TableMechanism | SplitMarginals


@dataclass(frozen=True)
class StructuredChoice:
    """What ``auto`` picked for a structured metric, and why.

    ``variances[candidate][target]`` is the mean per-user variance of the target's
    estimates at the uniform population; ``scores[candidate]`` the mean over targets of
    that variance relative to the best candidate's.
    """

    mechanism: str
    oracle: str
    focus: tuple[str, ...]
    variances: dict[str, dict[str, float]]
    scores: dict[str, float]
    chosen: str
    notes: tuple[str, ...] = ()

    def explain(self) -> str:
        targets = self.focus
        width = max(len(c) for c in self.variances) + 2
        head = f"{'candidate':<{width}}" + "".join(f"{t:>14}" for t in targets) + f"{'score':>9}"
        lines = [f"focus: {', '.join(targets)} (mean per-user variance, uniform population)", head]
        for cand, row in sorted(self.variances.items(), key=lambda kv: self.scores[kv[0]]):
            cells = "".join(f"{row[t]:>14.6g}" for t in targets)
            mark = "  <- chosen" if cand == self.chosen else ""
            lines.append(f"{cand:<{width}}{cells}{self.scores[cand]:>9.3f}{mark}")
        lines += list(self.notes)
        return "\n".join(lines)


def _choice(
    candidates: Mapping[str, StructuredMechanism],
    variances: dict[str, dict[str, float]],
    notes: list[str],
) -> StructuredChoice:
    """The candidate whose variances, each relative to the least at its target, are the
    smallest on average (the first listed of equals)."""
    targets = tuple(next(iter(variances.values())))
    best = {t: min(v[t] for v in variances.values()) for t in targets}
    scores = {
        c: float(np.mean([v[t] / best[t] if best[t] > 0 else 1.0 for t in targets]))
        for c, v in variances.items()
    }
    low = min(scores.values())
    chosen = next(c for c, s in scores.items() if s <= low * (1 + 1e-9))
    design = candidates[chosen]
    assert isinstance(design, ViewSampling)
    oracle = ",".join(v.oracle.name for v in design.views)
    return StructuredChoice(design.name, oracle, targets, variances, scores, chosen, tuple(notes))


def hierarchy_focus(tree: Tree, focus: Sequence[int] | None) -> list[int]:
    """The depths ``auto`` weighs: ``focus`` checked, or every depth with two nodes or more."""
    if focus is None:
        return [d for d in range(1, tree.depth + 1) if tree.width(d) > 1]
    given: object = focus  # from TOML/JSON it may be anything
    if isinstance(given, str) or not isinstance(given, Sequence) or not given:
        raise ParameterError(f"focus must be a non-empty list of depths, got {focus!r}")
    depths = sorted({tree.check_depth(d) for d in focus})
    for d in depths:
        if tree.width(d) < 2:
            raise ParameterError(f"depth {d} has a single node, whose fraction is 1 exactly")
    return depths


def table_focus(table: Table, focus: Sequence[str] | None) -> list[str]:
    """The targets ``auto`` weighs: ``"cells"`` and/or dimension names (default cells)."""
    if focus is None:
        return ["cells"]
    if isinstance(focus, str) or not isinstance(focus, Sequence) or not focus:
        raise ParameterError(
            f"focus must be a non-empty list of 'cells' or dimensions, got {focus!r}"
        )
    out = []
    for t in focus:
        if t != "cells":
            table.axis(t)
        if t not in out:
            out.append(t)
    return out


def choose_hierarchy(
    tree: Tree, *, epsilon: float, focus: Sequence[int] | None = None
) -> StructuredChoice:
    """The hierarchy design of least variance at the ``focus`` depths (see module)."""
    epsilon = check_epsilon(epsilon)
    depths = hierarchy_focus(tree, focus)
    candidates: dict[str, HierarchyMechanism] = {}
    for o in AUTO_ORACLES:
        candidates[f"rollup ({o})"] = LeafRollup(epsilon=epsilon, tree=tree, oracle=o)
    notes = []
    if len(refining_depths(tree)) >= 2 and tree.size <= MAX_DENSE_CELLS:
        levels = LevelSampling(epsilon=epsilon, tree=tree)
        candidates[f"levels ({','.join(v.oracle.name for v in levels.views)})"] = levels
    elif tree.size > MAX_DENSE_CELLS:
        notes.append(f"levels not weighed: more than {MAX_DENSE_CELLS} leaves")
    variances: dict[str, dict[str, float]] = {}
    for label, cand in candidates.items():
        per_depth = cand.variance()
        variances[label] = {f"depth {d}": float(np.mean(per_depth[d - 1])) for d in depths}
    return _choice(candidates, variances, notes)


def choose_table(
    table: Table, *, epsilon: float, focus: Sequence[str] | None = None
) -> StructuredChoice:
    """The table design of least variance at the ``focus`` targets (see module).

    ``split`` is listed in the notes for comparison (marginals only) but never chosen.
    """
    epsilon = check_epsilon(epsilon)
    targets = table_focus(table, focus)
    candidates: dict[str, TableMechanism] = {}
    for o in AUTO_ORACLES:
        candidates[f"joint ({o})"] = JointTable(epsilon=epsilon, table=table, oracle=o)
    notes = []
    if table.size <= MAX_DENSE_CELLS:
        mixed = JointMarginals(epsilon=epsilon, table=table)
        candidates[f"joint_marginals ({','.join(v.oracle.name for v in mixed.views)})"] = mixed
    else:
        notes.append(f"joint_marginals not weighed: more than {MAX_DENSE_CELLS} cells")
    variances: dict[str, dict[str, float]] = {}
    for label, cand in candidates.items():
        var = cand.variance()
        variances[label] = {t: float(np.mean(var[t])) for t in targets}
    split = SplitMarginals(epsilon=epsilon, table=table)
    notes.append(
        f"split ({','.join(o.name for o in split.oracles)}, epsilon/{len(table.shape)} each; "
        "marginals only, never chosen): "
        + ", ".join(f"{a} {float(np.mean(v)):.6g}" for a, v in split.variance().items())
    )
    return _choice(candidates, variances, notes)


def _design(
    domain: Tree | Table,
    mechanism: str,
    oracle: str | Sequence[str],
    focus: Sequence[Any] | None,
    extras: Mapping[str, Sequence[Any] | None],
    epsilon: float,
) -> Any:
    """The design ``mechanism`` names over a tree or a table, ``auto`` resolved by
    :func:`choose_hierarchy` or :func:`choose_table`. A kind's first design takes one oracle and
    none of the ``extras`` (the second's own parameters), the second one oracle per view."""
    tree = isinstance(domain, Tree)
    kind, names = ("hierarchy", HIERARCHY) if tree else ("table", TABLE_DESIGNS)
    name = canonical_name(mechanism)
    oracle_arg = oracle if isinstance(oracle, str) else tuple(oracle)
    if name == "auto":
        name, oracle_arg = _auto_design(domain, epsilon, focus, names)
    given = {key: tuple(value) for key, value in extras.items() if value is not None}
    if name == names[0] and given:
        raise ParameterError(f"{' and '.join(extras)} apply to the {names[1]!r} design only")
    if name not in names:
        raise ParameterError(
            f"a {kind} takes mechanism 'auto', {', '.join(map(repr, names))}; got {mechanism!r}"
        )
    where = {"tree" if tree else "table": domain}
    design: Callable[..., Any] = mechanism_class(name)
    return design(epsilon=epsilon, oracle=oracle_arg, **where, **given)


def _auto_design(
    domain: Tree | Table, epsilon: float, focus: Sequence[Any] | None, names: tuple[str, ...]
) -> tuple[str, str | tuple[str, ...]]:
    """What ``auto`` picks: the design, and its oracle (one, or one per view)."""
    tree = isinstance(domain, Tree)
    choose: Callable[..., StructuredChoice] = choose_hierarchy if tree else choose_table
    choice = choose(domain, epsilon=epsilon, focus=focus)
    oracles = tuple(choice.oracle.split(","))
    return choice.mechanism, oracles[0] if choice.mechanism == names[0] else oracles


def hierarchy(
    leaves: Tree | Sequence[str],
    *,
    epsilon: float,
    separator: str = "/",
    mechanism: str = "auto",
    oracle: str | Sequence[str] = "auto",
    focus: Sequence[int] | None = None,
    levels: Sequence[int] | None = None,
    weights: Sequence[float] | None = None,
) -> HierarchyMechanism:
    """A hierarchy mechanism over the tree whose leaves are ``leaves`` (paths).

    ``mechanism`` is ``"auto"`` (see :func:`choose_hierarchy`; ``focus`` says which depths
    matter), ``"rollup"`` or ``"levels"``; ``oracle``, ``levels`` and ``weights`` pass to
    the design (see :class:`~ldpkit.mechanisms.hierarchy.LevelSampling`).
    """
    tree = leaves if isinstance(leaves, Tree) else Tree(tuple(leaves), separator)
    extras = {"levels": levels, "weights": weights}
    built: HierarchyMechanism = _design(tree, mechanism, oracle, focus, extras, epsilon)
    return built


def table(
    dimensions: Table | Mapping[str, Sequence[str]],
    *,
    epsilon: float,
    mechanism: str = "auto",
    oracle: str | Sequence[str] = "auto",
    focus: Sequence[str] | None = None,
    weights: Sequence[float] | None = None,
) -> TableMechanism:
    """A table mechanism over ``dimensions`` (attribute name -> categories).

    ``mechanism`` is ``"auto"`` (see :func:`choose_table`; ``focus`` lists ``"cells"``
    and/or dimension names), ``"joint"`` or ``"joint_marginals"``. For the marginals-only
    comparison design build :class:`~ldpkit.mechanisms.table.SplitMarginals` directly.
    """
    if isinstance(dimensions, Table):
        tab = dimensions
    elif isinstance(dimensions, Mapping):
        tab = Table({k: tuple(v) for k, v in dimensions.items()})
    else:
        raise ParameterError(
            f"dimensions must be a mapping of name to categories, got {dimensions!r}"
        )
    built: TableMechanism = _design(tab, mechanism, oracle, focus, {"weights": weights}, epsilon)
    return built


@dataclass(frozen=True)
class PlanRow:
    """One target of a plan: the nodes at a depth, the cells, or a marginal."""

    target: str
    groups: int
    per_user_variance: float
    half_width: float


@dataclass(frozen=True)
class StructuredPlan:
    """Expected half-widths of a structured metric's intervals, per target."""

    mechanism: str
    epsilon: float
    n: int
    level: float
    assumption: str
    rows: tuple[PlanRow, ...]

    def row(self, target: str) -> PlanRow:
        for r in self.rows:
            if r.target == target:
                return r
        raise ParameterError(
            f"no target {target!r}; targets: {', '.join(r.target for r in self.rows)}"
        )

    def explain(self) -> str:
        lines = [
            f"{self.mechanism}  epsilon {self.epsilon:g}  n {self.n:,}  level {self.level:g}  "
            f"({self.assumption})",
            f"{'target':<16}{'groups':>8}{'per-user var':>16}{'half-width':>13}",
        ]
        for r in self.rows:
            lines.append(
                f"{r.target:<16}{r.groups:>8}{r.per_user_variance:>16.6g}{r.half_width:>13.4g}"
            )
        return "\n".join(lines)


def _per_user_variances(
    m: StructuredMechanism, fractions: npt.ArrayLike | None
) -> list[tuple[str, int, float]]:
    """(target, groups, worst per-user variance) for every target of ``m`` (a hierarchy's
    depths with more than one node), at its worst value or at ``fractions``."""
    if isinstance(m, HierarchyMechanism):
        per_depth = _worst_parts(m) if fractions is None else m.variance(fractions)
        return [
            (f"depth {d}", m.tree.width(d), float(np.max(var)))
            for d, var in enumerate(per_depth, start=1)
            if m.tree.width(d) > 1
        ]
    if fractions is not None:
        groups = m.variance(fractions)
    elif isinstance(m, TableMechanism):
        groups = dict(zip(["cells", *m.table.names], _worst_parts(m), strict=True))
    else:
        return _split_worst(m)
    return [(t, len(v), float(np.max(v))) for t, v in groups.items()]


def _worst_parts(m: HierarchyMechanism | TableMechanism) -> list[npt.NDArray[np.float64]]:
    """Per output partition, each group's largest variance along the path of its value."""
    worst = m.variance_quadratic().worst()
    return [worst[a:b] for a, b in itertools.pairwise(m.engine.output_offsets)]


def _split_worst(m: SplitMarginals) -> list[tuple[str, int, float]]:
    out = []
    for name, engine in zip(m.table.names, m.engines, strict=True):
        d = engine.m
        uniform = np.full((1, d), 1.0 / d)
        worst = engine.variance_quadratic(uniform, np.ones((1, 1)), np.ones(1)).worst()[0]
        out.append((name, d, float(np.max(worst))))
    return out


def plan_structured(
    m: StructuredMechanism, *, n: int, level: float = 0.95, fractions: npt.ArrayLike | None = None
) -> StructuredPlan:
    """Expected half-width of a ``level`` interval after ``n`` reports, per target.

    ``z sqrt(V / n)`` with V the per-user variance of the worst group of the target
    (see module). The score interval's half-width is close to this once the expected
    support counts are more than a few.
    """
    n = check_count(n)
    level = check_level(level)
    z = normal_quantile(level)
    rows = tuple(
        PlanRow(t, g, v, z * math.sqrt(v / n)) for t, g, v in _per_user_variances(m, fractions)
    )
    assumption = "at the given fractions"
    if fractions is None:
        assumption = "worst group, worst value of it; the rest spread uniformly"
    return StructuredPlan(m.name, m.epsilon, n, level, assumption, rows)


def required_n_structured(
    m: StructuredMechanism,
    *,
    half_width: float,
    level: float = 0.95,
    targets: Sequence[str] | None = None,
    fractions: npt.ArrayLike | None = None,
) -> StructuredPlan:
    """The smallest n whose expected half-width is at most ``half_width`` at every target
    in ``targets`` (default: all); the plan at that n, for every target."""
    half_width = check_positive(half_width, "half_width")
    level = check_level(level)
    z = normal_quantile(level)
    per_target = _per_user_variances(m, fractions)
    names = [t for t, _, _ in per_target]
    wanted = names if targets is None else list(targets)
    for t in wanted:
        if t not in names:
            raise ParameterError(f"no target {t!r}; targets: {', '.join(names)}")
    var = max(v for t, _, v in per_target if t in wanted)
    n = max(1, math.ceil(z * z * var / (half_width * half_width)))
    while z * math.sqrt(var / n) > half_width:  # a float ceil can land one short
        n += 1
    while n > 1 and z * math.sqrt(var / (n - 1)) <= half_width:
        n -= 1
    return plan_structured(m, n=n, level=level, fractions=fractions)
