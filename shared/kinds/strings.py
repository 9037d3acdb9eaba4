"""Strings metrics (issue 17): any string up to ``max_length`` bytes; answered with the
top-k strings found and named candidates."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._json import finite_or_none
from .._validation import shown
from ..errors import ParameterError, QueryError
from . import render
from .base import (
    MAX_QUERY_NUMBERS,
    Built,
    Cost,
    Definition,
    KindPlan,
    KindSpec,
    PlanTarget,
    Question,
    fail,
    make,
)

DEFAULT_K = 20
MAX_SEED = 1 << 53
DECODE_SECONDS = (1.0, 0.05, 0.0007)
"""CPU seconds of one decode at worst, ``a + max_length (b + c beam)`` with ``beam`` the
walk's width (``max(64, 4 k)``): fitted above the decodes measured by
``benchmarks/estimates_load.py --costs`` (docs/deployment.md, "Sizing the estimate worker")."""
DECODE_MIB = (80.0, 1.0, 0.41)
"""Peak memory (MiB) of one decode at worst, ``a + b max_length + c beam``, measured so."""


@dataclass(frozen=True)
class Strings(KindSpec):
    serves_sums: ClassVar[bool] = False  # its sketches hold 10^5 and more counts
    item_intervals: ClassVar[bool] = False
    audit_inputs: ClassVar[tuple[Any, ...]] = ("", "a", "b")  # any max_length; lengths 0 and 1
    maintained: ClassVar[bool] = True  # a decode takes seconds to minutes

    def build(self, definition: Definition) -> Built:
        if definition.max_length is None:
            raise fail(definition, "strings metrics need max_length (bytes, UTF-8)")
        k: object = DEFAULT_K if definition.k is None else definition.k
        name = definition.mechanism
        seed: object = definition.seed
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED
        ):
            # 2^53: a JSON number every language reads exactly
            raise fail(definition, f"seed must be an integer in [0, 2^53), got {shown(seed)}")
        m = make(
            definition,
            "prefix_sketch" if name == "auto" else name,
            max_length=definition.max_length,
            k=k,
            **({} if seed is None else {"seed": seed}),
        )
        return Built(m, {"k": k})

    def encode(self, definition: Definition, value: object) -> tuple[Any, bool]:
        if not isinstance(value, str):
            raise fail(definition, f"takes a string, got {shown(value)}")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise fail(definition, f"{shown(value)} cannot be encoded as UTF-8: {exc}") from None
        limit = definition.max_length or 0
        if len(data) > limit:
            raise fail(
                definition,
                f"{shown(value)} is {len(data)} bytes in UTF-8, longer than max_length = "
                f"{limit}; nothing was recorded",
            )
        return data, False

    def as_array(self, encoded: Sequence[Any]) -> npt.NDArray[Any]:
        out = np.empty(len(encoded), dtype=object)
        out[:] = list(encoded)
        return out

    def value_key(self, encoded: Any) -> bytes:
        return struct.pack("<I", len(encoded)) + bytes(encoded)

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        if not query.get("candidates"):
            return {}
        names = query["candidates"].split(",")
        if len(names) > MAX_QUERY_NUMBERS:
            raise QueryError("candidates", f"at most {MAX_QUERY_NUMBERS} strings")
        return {"candidates": names}

    def cost(self, definition: Definition) -> Cost:
        from ..heavy_hitters import beam_width

        length, k = definition.max_length or 0, definition.k or DEFAULT_K
        beam = beam_width(k)
        a, b, c = DECODE_SECONDS
        m0, m1, m2 = DECODE_MIB
        return Cost(
            a + length * (b + c * beam),
            (m0 + m1 * length + m2 * beam) * 2**20,
            f"decoding a strings metric of max_length {length} and k {k}",
        )

    def fields(self, definition: Definition, estimate: Any, q: Question) -> dict[str, Any]:
        try:
            data: dict[str, Any] = estimate.to_dict(q.options.get("candidates"), q.level)
        except ParameterError as exc:
            raise QueryError("candidates", str(exc)) from None
        data["interval"] = data.pop("interval_method")
        shift = finite_or_none(estimate.forgery_shift(q.forgery_fraction))
        for item in (*data["items"], *data.get("candidates", ())):
            item["forgery_shift"] = shift  # the same for every string
        return data

    def answer_items(self, definition: Definition, options: Mapping[str, Any]) -> int:
        return (definition.k or DEFAULT_K) + len(options.get("candidates", ()))

    def plan(self, definition: Definition, target: PlanTarget) -> KindPlan:
        from ..heavy_hitters import plan_strings, required_n_strings

        n, frequency, by_n = target.n, target.frequency, target.half_width is None
        common: dict[str, Any] = {
            "epsilon": definition.epsilon,
            "max_length": definition.max_length,
            "k": definition.k or DEFAULT_K,
        }
        if by_n and n is not None and frequency is None:
            p = plan_strings(n=n, **common)
            head = f"{p.mechanism}, epsilon={p.epsilon:g}, n={p.n:,}, k={p.k}"
        elif by_n and frequency is not None and n is None:
            p = required_n_strings(frequency=frequency, **common)
            head = (
                f"{p.mechanism}, epsilon={p.epsilon:g}: n >= {p.n:,} reports find a string of "
                f"{p.max_length} bytes held by {frequency:.2%} of users half the time"
            )
        else:
            raise ParameterError(
                "a strings metric is planned by n (the frequency found) or by frequency "
                "(the n that finds it), not by a half-width"
            )
        by_length = ", ".join(
            f"{length} bytes {t:.3%}" for length, t in enumerate(p.thresholds) if length
        )
        lines = (
            head,
            f"  found with probability {p.probability:g} from a frequency of {p.threshold:.3%} "
            f"(the most favourable length); {p.max_length_threshold:.3%} at {p.max_length} bytes",
            f"  by length: {by_length}",
        )
        return KindPlan(lines, p)

    def forgery_shifts(self, definition: Definition, beta: float) -> dict[str, float]:
        return {"each string's fraction": self.empty_estimate(definition).forgery_shift(beta)}

    def describe(self, definition: Definition) -> str:
        return f"strings <= {definition.max_length} bytes, top {definition.k}"

    def columns(
        self, consistent: bool, dimensions: Sequence[str], robust: bool = False
    ) -> list[str]:
        """The items' columns and each listed string's evidence (``evidence_z``)."""
        return [*super().columns(consistent, dimensions, robust), "evidence_z"]

    def served_fields(self, data: Mapping[str, Any], item: Callable[[Any], Any]) -> dict[str, Any]:
        return {
            "threshold": data.get("threshold"),
            "find_z": data.get("find_z"),
            "candidates": tuple(item(i) for i in data.get("candidates") or ()),
        }

    def text(self, result: Any, table: list[str]) -> list[str]:
        lines = [
            *table,
            "",
            f"threshold {render.fmt(result.threshold)}: no string less frequent than this can "
            f"be found at epsilon={result.epsilon:g} and n={result.n}"
            + ("" if result.items else " (nothing stood out: it does not mean nothing is popular)"),
            *_evidence_lines(result),
        ]
        if result.candidates:
            lines.append("named candidates:")
            columns = self.columns(result.consistent, ())
            lines.extend(render.text_table(render.item_rows(result.candidates, columns)))
        return lines


def _evidence_lines(result: Any) -> list[str]:
    """What ``evidence_z`` means, and the weak listings by name (docs/statistics.md)."""
    from ..heavy_hitters import WEAK_MARGIN

    find_z = result.find_z
    if find_z is None or not result.items:
        return []
    weak = [
        i.category
        for i in result.items
        if i.evidence_z is not None and i.evidence_z < find_z + WEAK_MARGIN
    ]
    return [
        f"evidence_z: how far each string's support stood above 'nobody holds it', as a normal "
        f"z; found from {find_z:.2f}, weak below {find_z + WEAK_MARGIN:.2f}"
        + (f" (weak: {', '.join(repr(w) for w in weak)})" if weak else " (none weak)"),
    ]


SPEC = Strings("strings", ("max_length", "k", "seed"), ("candidates",))
