"""What hierarchies and tables (issue 16) share: a value is one base cell (a leaf, a
cell), the mechanism a structured design with its oracles, the plan per target."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from .._json import finite_or_none
from .._validation import shown
from ..errors import ParameterError, ReportError
from ..mechanisms import Mechanism
from .base import Built, Cost, Definition, KindPlan, KindSpec, PlanTarget, fail

PREPARE_65536 = (2.0, 560.0)
"""CPU seconds and peak MiB of preparing the estimate of 65,536 cells at worst (a 1024 x 64
table; hierarchies cost less), measured by ``benchmarks/estimates_load.py --costs``."""


class Structured(KindSpec):
    item_intervals: ClassVar[bool] = False
    simultaneous_intervals: ClassVar[bool] = True  # per depth, subtree, the cells, a marginal
    maintained: ClassVar[bool] = True  # a consistent solution over up to 65,536 cells

    def cost(self, definition: Definition) -> Cost:
        cells = definition.mechanism_instance.stats_size
        seconds, mib = PREPARE_65536
        share = cells / 65536
        return Cost(
            0.1 + seconds * share,
            (40.0 + mib * share) * 2**20,
            f"preparing the estimate of a {self.name} of {cells} cells",
        )

    def _domain_encode(self, definition: Definition, value: object) -> int:
        raise NotImplementedError

    def encode(self, definition: Definition, value: object) -> tuple[Any, bool]:
        try:
            return self._domain_encode(definition, value), False
        except (ReportError, ParameterError) as exc:
            raise fail(definition, str(exc)) from None

    def plan(self, definition: Definition, target: PlanTarget) -> KindPlan:
        from ..structured import plan_structured, required_n_structured

        m: Any = definition.mechanism_instance
        level = target.level
        p = target.by(
            lambda n: plan_structured(m, n=n, level=level),
            lambda half_width: required_n_structured(m, half_width=half_width, level=level),
        )
        head = (
            f"n >= {p.n:,} reports for a {level:.0%} half-width of {target.half_width:g} at "
            "every target"
            if target.half_width is not None
            else f"{level:.0%} half-width per target after n={p.n:,} reports"
        )
        return KindPlan((head, *p.explain().splitlines()), p)


def with_shifts(items: list[dict[str, Any]], group: Any, beta: float) -> list[dict[str, Any]]:
    """``items`` (a ``GroupEstimate``'s, in its order), each with its ``forgery_shift``."""
    for item, shift in zip(items, group.forgery_shift(beta).tolist(), strict=True):
        item["forgery_shift"] = finite_or_none(shift)
    return items


def made(
    definition: Definition,
    make: Callable[..., Mechanism],
    domain: object,
    focus: tuple[Any, ...] | None,
    fields: dict[str, Any],
    **options: Any,
) -> Built:
    """``make(domain, ...)`` (:func:`~ldpkit.structured.hierarchy` or ``table``) with the
    definition's epsilon, mechanism and oracle; the oracles ``auto`` resolved to are kept
    on the definition (``resolved_oracle``), so a stored definition rebuilds the same."""
    oracle = _oracle(definition)
    try:
        m = make(
            domain,
            epsilon=definition.epsilon,
            mechanism=definition.mechanism,
            oracle=oracle,
            focus=focus,
            **options,
        )
    except ParameterError as exc:
        raise fail(definition, str(exc)) from None
    fields["resolved_oracle"] = tuple(v.oracle.name for v in getattr(m, "views", ()))
    if focus is not None:
        fields["focus"] = focus
    if isinstance(oracle, tuple):
        fields["oracle"] = oracle
    return Built(m, fields)


def _oracle(definition: Definition) -> str | tuple[str, ...]:
    given: object = definition.oracle
    if given is None:
        return "auto"
    if isinstance(given, str):
        return given
    if isinstance(given, list | tuple) and given and all(isinstance(o, str) for o in given):
        return tuple(given)
    raise fail(definition, f"oracle must be a name or a list of names, got {shown(given)}")


def focus(definition: Definition, item: type) -> tuple[Any, ...] | None:
    given: object = definition.focus
    if given is None:
        return None
    if (
        isinstance(given, str)
        or not isinstance(given, list | tuple)
        or not all(isinstance(f, item) and not isinstance(f, bool) for f in given)
    ):
        what = "depths (integers)" if item is int else "'cells' and dimension names"
        raise fail(definition, f"focus must be a list of {what}, got {shown(given)}")
    return tuple(given)
