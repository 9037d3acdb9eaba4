"""Table metrics (issue 16): several categorical attributes reported together; answered
with the cells and each attribute's marginal."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np

from .._validation import shown
from . import render
from ._structured import Structured, focus, made, with_shifts
from .base import Built, Definition, Question, check_category, fail, most_common_fields


class Table(Structured):
    hidden: ClassVar[frozenset[str]] = frozenset({"category"})  # a cell reads by its attributes

    def build(self, definition: Definition) -> Built:
        from ..structured import table

        dimensions = _dimensions(definition)
        fields: dict[str, Any] = {"dimensions": tuple((n, tuple(c)) for n, c in dimensions.items())}
        return made(definition, table, dimensions, focus(definition, str), fields)

    def _domain_encode(self, definition: Definition, value: object) -> int:
        m: Any = definition.mechanism_instance
        return int(m.table.index(value))

    def fields(self, definition: Definition, estimate: Any, q: Question) -> dict[str, Any]:
        data: dict[str, Any] = estimate.to_dict(
            q.level, consistent=q.consistent, simultaneous=q.simultaneous
        )
        beta = q.forgery_fraction
        if estimate.cells is not None:
            with_shifts(data["items"], estimate.cells, beta)
            cells = estimate.cells
            data["most_common"] = most_common_fields(cells, cells.keys, q.level, "cell")
        for name, group in estimate.marginals.items():
            with_shifts(data["marginals"][name], group, beta)
        data["dimensions"] = [[n, list(c)] for n, c in definition.dimensions or ()]
        return data

    def answer_items(self, definition: Definition, options: Mapping[str, Any]) -> int:
        m: Any = definition.mechanism_instance
        return int(m.table.size + sum(m.table.shape))

    def forgery_shifts(self, definition: Definition, beta: float) -> dict[str, float]:
        e = self.empty_estimate(definition)
        groups = {f"the {name} marginal": g for name, g in e.marginals.items()}
        if e.cells is not None:
            groups = {"each cell": e.cells, **groups}
        return {what: float(np.max(g.forgery_shift(beta))) for what, g in groups.items()}

    def describe(self, definition: Definition) -> str:
        dimensions = definition.dimensions or ()
        shape = " x ".join(str(len(c)) for _, c in dimensions)
        return f"{shape} cells ({' x '.join(n for n, _ in dimensions)})"

    def served_fields(self, data: Mapping[str, Any], item: Callable[[Any], Any]) -> dict[str, Any]:
        return {
            "marginals": {
                str(name): tuple(item(i) for i in group)
                for name, group in (data.get("marginals") or {}).items()
            },
            "dimensions": tuple(
                (str(name), tuple(str(c) for c in cats))
                for name, cats in data.get("dimensions") or ()
            ),
        }

    def rows(self, part: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
        """The cells, then each marginal's items (``category`` "type=Van (marginal)", the
        other dimensions empty): the totals' and each bucket's."""
        rows = render.item_rows(part.items, columns)
        for name, group in part.marginals.items():
            for item in group:
                row = {**asdict(item), name: item.category}
                row["category"] = f"{name}={item.category} (marginal)"
                rows.append({c: row.get(c) for c in columns})
        return rows

    def index(self, dimensions: Sequence[str]) -> list[str]:
        return list(dimensions)

    def frame(self, frame: Any, dimensions: Sequence[str]) -> Any:
        return frame.drop(columns=["category"]).set_index(list(dimensions))

    def plot_over_time(self, result: Any, plt: Any) -> Any:
        """Each marginal over time as lines, then the cells as a bucket x cell heat map (not
        one line per cell)."""
        names = [n for n, _ in result.dimensions]
        fig, axes = plt.subplots(
            len(names) + 1, 1, figsize=(9, 3.2 * len(names) + 4.5), squeeze=False
        )
        for ax, name in zip(axes[:-1, 0], names, strict=True):
            render.lines_over_time(result, ax, _marginal(name))
            ax.set_title(f"marginal: {name}", fontsize="medium")
            ax.set_xticks([b.start for b in result.buckets])
            ax.set_xticklabels([render.bucket_name(b.start) for b in result.buckets])
        common = render.wrapped(render.set_line(result), fig)  # the cells' (the whole range)
        axes[0, 0].set_title(
            f"{render.title(result)}{common}\nmarginal: {names[0]}", fontsize="medium"
        )
        if any(b.items for b in result.buckets):
            render.heat_over_time(fig, axes[-1, 0], result, "cell", top_first=True)
        return fig

    def text(self, result: Any, table: list[str]) -> list[str]:
        # The cells in a table, then each marginal in its own (not as rows of the cells').
        dimensions = [n for n, _ in result.dimensions]
        every = self.columns(result.consistent, dimensions, result.robust is not None)
        cells = render.item_rows(result.items, every)
        lines = render.text_table(cells, self.hidden, dimensions) if cells else list(table)
        columns = [*render.NUMBERS, *(["consistent"] if result.consistent else [])]
        for name, group in result.marginals.items():
            lines.append("")
            lines.append(f"marginal of {name}:")
            rows = [{name: i.category, **{c: getattr(i, c) for c in columns}} for i in group]
            lines.extend(render.text_table(rows, (), dimensions))
        return lines


def _marginal(name: str) -> Callable[[Any], Any]:
    return lambda part: part.marginals.get(name, ())


def _dimensions(definition: Definition) -> dict[str, list[str]]:
    """A table's dimensions from a mapping (TOML, JSON object) or a list of [name, categories]
    pairs (the stored form: JSON objects may lose their order)."""
    out: dict[str, list[str]] = {}
    for name, cats in _pairs(definition):
        if not isinstance(name, str) or name in out:
            raise fail(definition, f"dimension names must be distinct strings, got {shown(name)}")
        if isinstance(cats, str) or not isinstance(cats, list | tuple):
            raise fail(definition, f"dimension {name!r} needs a list of categories")
        for c in cats:
            check_category(definition, c)
        out[name] = list(cats)
    return out


def _pairs(definition: Definition) -> list[tuple[Any, Any]]:
    given: object = definition.dimensions
    if isinstance(given, Mapping):
        return list(given.items())
    if isinstance(given, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 for p in given
    ):
        return [(p[0], p[1]) for p in given]
    raise fail(
        definition,
        "table metrics need dimensions: a table of attribute = [categories] (or a list of "
        f"[name, [categories]] pairs), got {shown(given)}",
    )


SPEC = Table("table", ("dimensions", "focus", "oracle"))
