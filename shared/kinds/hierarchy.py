"""Hierarchy metrics (issue 16): categories in a tree (leaf paths); answered at any depth
and for any subtree."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._validation import shown
from ..errors import ParameterError, QueryError
from ._structured import Structured, focus, made, with_shifts
from .base import (
    Built,
    Definition,
    Question,
    check_categories,
    fail,
    most_common_fields,
    query_integer,
)


class Hierarchy(Structured):
    def build(self, definition: Definition) -> Built:
        from ..structured import hierarchy

        leaves = check_categories(definition)
        separator: object = definition.separator
        if separator is None:
            separator = "/"
        if not isinstance(separator, str) or not separator:
            raise fail(definition, f"separator must be a non-empty string, got {shown(separator)}")
        fields: dict[str, Any] = {"categories": leaves, "separator": separator}
        depths = focus(definition, int)
        return made(definition, hierarchy, list(leaves), depths, fields, separator=separator)

    def _domain_encode(self, definition: Definition, value: object) -> int:
        m: Any = definition.mechanism_instance
        return int(m.tree.leaf_index(value))

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if query.get("depth"):
            out["depth"] = query_integer(query["depth"], "depth")
        if query.get("subtree"):
            out["subtree"] = query["subtree"]
        return out

    def fields(self, definition: Definition, estimate: Any, q: Question) -> dict[str, Any]:
        depth = q.options.get("depth")
        try:
            if "subtree" in q.options:
                return _subtree(estimate, q.options["subtree"], depth, q)
            data = dict(
                estimate.to_dict(
                    depth, q.level, consistent=q.consistent, simultaneous=q.simultaneous
                )
            )
        except ParameterError as exc:
            raise QueryError("subtree" if "subtree" in q.options else "depth", str(exc)) from None
        group = estimate.level(data["depth"])
        with_shifts(data["items"], group, q.forgery_fraction)
        data["most_common"] = most_common_fields(group, group.keys, q.level)
        return data

    def answer_items(self, definition: Definition, options: Mapping[str, Any]) -> int:
        m: Any = definition.mechanism_instance
        return int(m.tree.size)

    def forgery_shifts(self, definition: Definition, beta: float) -> dict[str, float]:
        levels = self.empty_estimate(definition).levels
        return {
            f"a node at depth {t}": float(np.max(g.forgery_shift(beta)))
            for t, g in enumerate(levels, 1)
        }

    def describe(self, definition: Definition) -> str:
        separator = definition.separator or "/"
        depth = max(c.count(separator) + 1 for c in definition.categories or ())
        return f"{len(definition.categories or ())} leaves, {depth} levels"

    def served_fields(self, data: Mapping[str, Any], item: Callable[[Any], Any]) -> dict[str, Any]:
        return {"depth": data.get("depth"), "subtree": data.get("subtree")}

    def text(self, result: Any, table: list[str]) -> list[str]:
        where = f" under {result.subtree}" if result.subtree else ""
        return [f"depth {result.depth}{where} (every parent is the sum of its children)", *table]


def _subtree(estimate: Any, path: str, depth: int | None, q: Question) -> dict[str, Any]:
    group = estimate.subtree(path, depth)
    return {
        "mechanism": estimate.mechanism,
        "n": estimate.n,
        "depth": estimate.tree.locate(group.keys[0])[0] if len(group) else depth,
        "subtree": path,
        "interval": estimate.interval,
        "simultaneous": q.simultaneous,
        "items": with_shifts(
            group.items(q.level, consistent=q.consistent, simultaneous=q.simultaneous),
            group,
            q.forgery_fraction,
        ),
        "most_common": most_common_fields(group, group.keys, q.level),
    }


SPEC = Hierarchy("hierarchy", ("categories", "separator", "focus", "oracle"), ("depth", "subtree"))
