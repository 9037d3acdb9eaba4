"""What every metric kind answers (:class:`KindSpec`) and what the kinds share.

A kind reads a definition through :class:`Definition` (``ldpkit.metrics.MetricDefinition``
satisfies it; the kinds do not import it) and never writes it: :meth:`KindSpec.build`
returns the fields it normalised with the mechanism (:class:`Built`), and the definition
sets them on itself while it is constructed.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NewType, NoReturn, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from .._validation import shown
from ..aggregate import Aggregate
from ..errors import ParameterError, QueryError
from ..mechanisms import Mechanism
from ..mechanisms import mechanism as make_mechanism
from . import render

MAX_QUERY_NUMBERS = 4097
"""Most numbers one query parameter may list (edges, quantiles, candidates)."""
MAX_CATEGORIES = 65536
MAX_CATEGORY_LENGTH = 200

P = TypeVar("P")
Level = NewType("Level", float)
"""An interval level in (0, 1), checked where it was given (a query's ``level``): the
kinds, and the estimators they pass it to, are given it checked."""
Fraction = NewType("Fraction", float)
"""A forged fraction of the reports in (0, 0.5], checked where it was given (a definition's
``forgery_fraction``, a query's): what an answer's ``forgery_shift`` assumes."""
DEFAULT_FORGERY_FRACTION = Fraction(0.01)


class Definition(Protocol):
    """What a kind reads of a metric definition (``MetricDefinition`` satisfies it)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def mechanism(self) -> str: ...
    @property
    def categories(self) -> tuple[str, ...] | None: ...
    @property
    def ordered(self) -> bool | None: ...
    @property
    def score(self) -> str | None: ...
    @property
    def band(self) -> int | None: ...
    @property
    def scores(self) -> Any: ...
    @property
    def bounds(self) -> tuple[float, float] | None: ...
    @property
    def delta(self) -> float: ...
    @property
    def resolution(self) -> int | None: ...
    @property
    def separator(self) -> str | None: ...
    @property
    def dimensions(self) -> tuple[tuple[str, tuple[str, ...]], ...] | None: ...
    @property
    def focus(self) -> tuple[Any, ...] | None: ...
    @property
    def oracle(self) -> str | tuple[str, ...] | None: ...
    @property
    def max_length(self) -> int | None: ...
    @property
    def k(self) -> int | None: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def category_index(self) -> dict[str, int]: ...
    @property
    def mechanism_instance(self) -> Mechanism: ...
    @property
    def resolved_mechanism(self) -> str: ...


@dataclass(frozen=True)
class Built:
    """A definition's mechanism, and the kind's fields it normalised on the way (a list
    of categories as a tuple, a default resolution, ...): the definition sets them."""

    mechanism: Mechanism
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Campaign:
    """What :func:`ldpkit.plan` plans for a metric: a mechanism over a number of categories
    (``domain_size``) or ``bounds``."""

    mechanism: str
    epsilon: float
    domain_size: int | None = None
    bounds: tuple[float, float] | None = None


@dataclass(frozen=True)
class KindPlan:
    """A plan of one metric: ``lines`` to read, ``plan`` the planner's own result object."""

    lines: tuple[str, ...]
    plan: Any

    def explain(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Question:
    """What an estimates query asks of a kind: its own ``options`` (from
    :meth:`KindSpec.parse_options`), the intervals' ``level``, whether to add the
    ``consistent`` estimates, the ``forgery_fraction`` each ``forgery_shift`` is for,
    whether to add the estimates ``robust`` to that fraction of forged reports, and
    whether the intervals are ``simultaneous`` (all of a group's together at ``level``;
    only asked of a kind whose :attr:`KindSpec.simultaneous_intervals` is true)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    level: Level = Level(0.95)
    consistent: bool = False
    forgery_fraction: Fraction = DEFAULT_FORGERY_FRACTION
    robust: bool = False
    simultaneous: bool = False


@dataclass(frozen=True)
class PlanTarget:
    """What a plan answers: what ``n`` reports give, or the n a ``half_width`` needs (for
    strings, the n that finds a ``frequency``), at ``level``."""

    n: int | None = None
    half_width: float | None = None
    frequency: float | None = None
    level: float = 0.95
    estimand: str = "reporters"
    """Whose values the intervals are about, where a kind offers a choice (a distribution:
    ``"reporters"`` or ``"population"``); other kinds' are the reporters'."""

    def by(self, for_n: Callable[[int], P], for_half_width: Callable[[float], P]) -> P:
        """``for_n(n)`` or ``for_half_width(half_width)``: exactly one must be given."""
        if self.n is not None and self.half_width is None:
            return for_n(self.n)
        if self.half_width is not None and self.n is None:
            return for_half_width(self.half_width)
        raise ParameterError("give n (to get the half-widths) or half_width (to get n)")


@dataclass(frozen=True)
class Cost:
    """What preparing a maintained estimate (:meth:`KindSpec.prepare`) costs at worst, as
    measured (docs/deployment.md): CPU seconds, peak memory in bytes, and ``what`` (the
    definition's parameters that drive it, for a message)."""

    cpu_seconds: float
    memory_bytes: float
    what: str


class RawJSON(str):
    """Text that is already JSON (spliced into an answer as is)."""


def json_numbers(values: npt.NDArray[np.float64]) -> list[str]:
    """Each value as JSON (its shortest round-trip form), null if not finite. orjson writes
    the array (the collector's dependency: answers are made there only), 8 times faster
    than ``float.__repr__`` per value, which was most of an answer's time at d = 1,024."""
    import orjson

    if not values.size:
        return []
    array = np.ascontiguousarray(values, dtype=np.float64)
    return orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode().split(",")


def sums_json(aggregate: Aggregate) -> RawJSON:
    return RawJSON("[" + ",".join(json_numbers(np.asarray(aggregate.sums, dtype=np.float64))) + "]")


@dataclass(frozen=True)
class KindSpec:
    """One metric kind. ``keys``: its own definition keys; ``params``: its own query
    parameters of ``GET /v1/estimates/{name}``. The defaults answer and render items
    (categories, nodes, cells, strings, bins), as a categorical metric does."""

    name: str
    keys: tuple[str, ...]
    params: tuple[str, ...] = ()

    checks_values: ClassVar[bool] = False
    """Whether :meth:`encode` checks a value completely (the mechanism need not again)."""
    mechanism_params: ClassVar[bool] = True
    """Whether the fingerprint and the served definition hold the mechanism's own
    parameters (everything it was built with, beyond the definition's keys)."""
    serves_sums: ClassVar[bool] = True
    """Whether an answer holds the sufficient statistics (``sums``)."""
    audit_inputs: ClassVar[tuple[Any, ...]] = ()
    """Values :func:`ldpkit.audit.audit` compares by default, where the mechanism's
    domain or bounds do not give them."""
    hidden: ClassVar[frozenset[str]] = frozenset()
    """Columns a terminal table leaves out (an item is named once there)."""
    item_intervals: ClassVar[bool] = True
    """Whether a row names how its interval was made (an ``interval`` column)."""
    robust_columns: ClassVar[tuple[str, ...]] = ()
    """The columns of a robust answer's rows (none: the kind has no robust estimate)."""
    simultaneous_intervals: ClassVar[bool] = False
    """Whether an answer offers intervals that cover a whole group of items together
    (query ``simultaneous=true``; the answer's ``simultaneous`` says which it holds)."""
    maintained: ClassVar[bool] = False
    """Whether the collector keeps this kind's estimates computed (issue 27): prepared in a
    worker process in the background whenever reports arrived, never inside a request;
    for kinds whose estimate costs more than O(d) (a decode, a consistent solution). The
    others are computed for each query."""

    def build(self, definition: Definition) -> Built:
        """Check the kind's own definition keys and make its mechanism, ``auto`` resolved."""
        raise NotImplementedError

    def encode(self, definition: Definition, value: object) -> tuple[Any, bool]:
        """(mechanism input, whether the value was clipped); ParameterError otherwise."""
        raise NotImplementedError

    def encode_many(self, definition: Definition, values: Any) -> npt.NDArray[Any]:
        """The mechanism inputs of many values (ParameterError names the first bad one)."""
        out = []
        for i, v in enumerate(values):
            try:
                out.append(self.encode(definition, v)[0])
            except ParameterError as exc:
                raise ParameterError(f"value {i}: {exc}") from None
        return self.as_array(out)

    def as_array(self, encoded: Sequence[Any]) -> npt.NDArray[Any]:
        """Encoded values as the array ``perturb`` takes."""
        return np.asarray(encoded, dtype=np.int64)

    def value_key(self, encoded: Any) -> bytes:
        """Fixed bytes naming an encoded value (the client's memo key)."""
        return struct.pack("<Q", int(encoded))

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        """The kind's own parameters of an estimates query."""
        return {}

    def estimate(self, definition: Definition, aggregate: Aggregate) -> Any:
        """The mechanism's estimate of ``aggregate`` (its result object)."""
        mechanism: Any = definition.mechanism_instance
        return mechanism.estimate(aggregate)

    def prepare(self, definition: Definition, aggregate: Aggregate) -> Any:
        """The estimate of ``aggregate`` with what an answer computes on first use computed
        (its cached parts: a consistent solution, variances), so that any query is answered
        from it cheaply (:meth:`answer_with`): what the collector keeps of a maintained kind."""
        estimate = self.estimate(definition, aggregate)
        for consistent in (False, True):
            self.fields(definition, estimate, Question(consistent=consistent))
        return estimate

    def cost(self, definition: Definition) -> Cost:
        """What :meth:`prepare` costs at worst, for a maintained kind (measured; the
        collector refuses a definition over its budget)."""
        return Cost(0.0, 0.0, "")

    def answer(self, definition: Definition, aggregate: Aggregate, q: Question) -> dict[str, Any]:
        """The kind's fields of an estimates answer: ``n``, ``interval`` (None without
        reports), the estimate's fields and the ``sums`` if the kind serves them (the
        analyst rebuilds the core's estimate from them)."""
        return self.answer_with(definition, aggregate, self.estimate(definition, aggregate), q)

    def answer_with(
        self, definition: Definition, aggregate: Aggregate, estimate: Any, q: Question
    ) -> dict[str, Any]:
        """:meth:`answer` from ``estimate``, the estimate of ``aggregate`` (prepared)."""
        data = self.fields(definition, estimate, q)
        if not data["n"]:
            data["interval"] = None
        for key in ("mechanism", "epsilon", "level"):  # the answer's own fields say these
            data.pop(key, None)
        if self.serves_sums:
            data["sums"] = sums_json(aggregate)
        if q.robust:
            data |= self.no_robust()
        return data

    def no_robust(self) -> dict[str, Any]:
        """What a robust query's answer says for a kind without a robust estimate."""
        return {
            "robust": None,
            "robust_note": f"no robust estimate for a {self.name} metric: each forgery_shift "
            "bounds how far the forged fraction could move its estimate (docs/statistics.md)",
        }

    def fields(self, definition: Definition, estimate: Any, q: Question) -> dict[str, Any]:
        """The answer's fields from ``estimate`` (its result object's ``to_dict``)."""
        raise NotImplementedError

    def answer_items(self, definition: Definition, options: Mapping[str, Any]) -> int:
        """How many items an answer holds (the collector bounds an answer's size)."""
        return len(definition.categories or ())

    def answer_seconds(self, definition: Definition, options: Mapping[str, Any]) -> float:
        """CPU seconds one part of an answer (the total, or a bucket) computes on the
        request beyond reading its items, at worst (measured): the collector refuses a
        query over its ``max_answer_cpu_seconds``. 0: an answer is O(items)."""
        return 0.0

    def campaign(self, definition: Definition) -> Campaign | None:
        """What :func:`ldpkit.plan` plans for this metric; None when :meth:`plan` does."""
        return None

    def plan(self, definition: Definition, target: PlanTarget) -> KindPlan:
        """What n reports give (``n``), or the n a target needs (``half_width``; for
        strings, the ``frequency`` to find), for this metric."""
        raise ParameterError(
            f"{self.name} metrics are planned with ldpkit.plan (domain_size or bounds)"
        )

    def forgery_shifts(self, definition: Definition, beta: float) -> dict[str, float]:
        """What this metric's answers would disclose as ``forgery_shift`` at a forged
        fraction ``beta``, before any report (the plan): the largest, by what it is about.
        It does not depend on the reports (a distribution's, barely: its depths' counts)."""
        return {
            "each item's fraction": float(
                np.max(self.empty_estimate(definition).forgery_shift(beta))
            )
        }

    def empty_estimate(self, definition: Definition) -> Any:
        """The estimate of no reports."""
        mechanism: Any = definition.mechanism_instance
        return self.estimate(definition, mechanism.empty_aggregate())

    # buckets: ``part``), ldpkit.analyst.plots and the CLI ------------------------------
    def describe(self, definition: Definition) -> str:
        """What a metric's values are, in a few words (``ldpkit metrics``)."""
        return f"{len(definition.categories or ())} categories"

    def served_fields(self, data: Mapping[str, Any], item: Callable[[Any], Any]) -> dict[str, Any]:
        """This kind's result fields from the answer ``data`` (``item`` reads one of its items)."""
        return {}

    def columns(
        self, consistent: bool, dimensions: Sequence[str], robust: bool = False
    ) -> list[str]:
        """The columns of a result's rows (CSV, pandas, the terminal table)."""
        consistent_ = ["consistent"] if consistent else []
        robust_ = self.robust_columns if robust else ()
        interval = ["interval"] if self.item_intervals else []
        return ["category", *dimensions, *render.NUMBERS, *consistent_, *robust_, *interval]

    def rows(self, part: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
        """One row per item of ``part``."""
        return render.item_rows(part.items, columns)

    def index(self, dimensions: Sequence[str]) -> list[str]:
        """The columns that name a row in a pandas DataFrame (after ``bucket``)."""
        return ["category"]

    def frame(self, frame: Any, dimensions: Sequence[str]) -> Any:
        """The totals' pandas DataFrame, indexed by what a row is about (if anything)."""
        index = self.index(dimensions)
        return frame.set_index(index) if index else frame

    def text(self, result: Any, table: list[str]) -> list[str]:
        """The terminal lines of ``result`` around its items' ``table``."""
        return table

    def plot(self, result: Any, plt: Any) -> Any:
        """A matplotlib figure of ``result`` (``plt``: matplotlib.pyplot)."""
        return render.bars(result, plt)

    def plot_over_time(self, result: Any, plt: Any) -> Any:
        """A matplotlib figure of the estimates of each bucket of ``result``."""
        fig, ax = plt.subplots(figsize=(8, 4))
        render.lines_over_time(result, ax)
        render.time_axis(fig, ax, result)
        return fig


def most_common_fields(
    estimate: Any,
    keys: Sequence[Any],
    level: float,
    key: str = "category",
    *,
    n: int | None = None,
) -> dict[str, Any] | None:
    """An answer's ``most_common``: the ``mode`` and the ``set`` of the items (named by
    ``keys``) that could be the most common at ``level``, its ``method``, and the top
    items' ``ranks`` (``{key, rank, low, high}``, holding together at ``level``) of an
    estimate with ``most_common`` and ``ranks`` (:mod:`ldpkit.ranking`); None without
    reports (``n``, default ``estimate.n``)."""
    if not (estimate.n if n is None else n):
        return None
    fields: dict[str, Any] = estimate.most_common(level).labelled(keys)
    fields["ranks"] = estimate.ranks(level).labelled(keys, key)
    return fields


def fail(definition: Definition, message: str) -> ParameterError:
    return ParameterError(f"metric {definition.name}: {message}")


def make(definition: Definition, name: str, **options: Any) -> Mechanism:
    """The mechanism ``name`` at the definition's epsilon (its errors name the metric)."""
    try:
        return make_mechanism(name, epsilon=definition.epsilon, **options)
    except ParameterError as exc:
        raise fail(definition, str(exc)) from None


def refuse(spec: KindSpec, definition: Definition, values: Any, k: int) -> NoReturn:
    """Raise :meth:`KindSpec.encode`'s message for the bad ``values[k]``, prefixed with its
    position, as :meth:`KindSpec.encode_many` words it."""
    try:
        spec.encode(definition, values[k])
    except ParameterError as exc:
        raise ParameterError(f"value {k}: {exc}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def check_category(definition: Definition, category: object) -> None:
    if not isinstance(category, str) or not category or len(category) > MAX_CATEGORY_LENGTH:
        raise fail(
            definition,
            f"each category must be a non-empty string of at most {MAX_CATEGORY_LENGTH} "
            f"characters, got {shown(category)}",
        )


def check_categories(definition: Definition) -> tuple[str, ...]:
    """The definition's categories (categorical metrics, a hierarchy's leaves), checked."""
    given: object = definition.categories  # from TOML/JSON it may be anything
    if given is None or isinstance(given, str) or not isinstance(given, list | tuple):
        raise fail(definition, "categorical metrics need a list of categories")
    cats = tuple(given)
    if len(cats) < 2 or len(cats) > MAX_CATEGORIES:
        raise fail(definition, f"categories must hold 2 to {MAX_CATEGORIES} items, got {len(cats)}")
    for c in cats:
        check_category(definition, c)
    if len(set(cats)) != len(cats):
        raise fail(definition, "categories must be distinct")
    return cats


def query_numbers(text: str, param: str, *, minimum: int = 1) -> list[float]:
    """Numbers separated by commas, a query parameter's (QueryError names ``param``)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > MAX_QUERY_NUMBERS:
        raise QueryError(param, f"at most {MAX_QUERY_NUMBERS} numbers")
    out = []
    for p in parts:
        try:
            x = float(p)
        except ValueError:
            raise QueryError(
                param, f"expected numbers separated by commas, got {p[:40]!r}"
            ) from None
        if not math.isfinite(x):
            raise QueryError(param, f"expected finite numbers, got {p[:40]!r}")
        out.append(x)
    if len(out) < minimum:
        raise QueryError(param, f"expected at least {minimum} numbers")
    return out


def query_integer(text: str, param: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise QueryError(param, f"expected an integer, got {text[:40]!r}") from None
