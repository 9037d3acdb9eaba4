"""Metric kinds: what each kind's definition holds, what a device reports, how it is answered.

Every layer reaches a kind through :func:`kind_spec` and the same few questions:

- ``build(definition)``: check the kind's own definition keys (normalizing them on the
  definition) and make its mechanism, ``auto`` resolved;
- ``encode(definition, value)`` / ``encode_many``: the mechanism's input for what an app
  passes to ``report`` (a category, a number, a leaf path, a dict of attributes, a
  string), refused on the device with a clear ParameterError;
- ``value_key(encoded)``: fixed bytes naming an encoded value (the client's memo key);
- ``parse_options(query)``: the kind's own query parameters of ``GET /v1/estimates``;
- ``answer(definition, aggregate, question)``: the kind's fields of that answer, from
  ``estimate(definition, aggregate)`` (the mechanism's result object) by ``fields``;
- ``answer_items(definition, options)``: how many items the answer holds.

The collector keeps only each mechanism's sufficient statistics (``Aggregate``), so the
store and the wire need nothing per kind. Categorical and numeric metrics keep the
collector's own fast answer path; their entries here cover definitions and encoding.
"""

from __future__ import annotations

import hashlib
import math
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._validation import check_bounds, check_delta, shown
from .aggregate import Aggregate
from .errors import ParameterError, QueryError, ReportError
from .mechanisms import Mechanism, choose
from .mechanisms import mechanism as make_mechanism

if TYPE_CHECKING:
    from .metrics import MetricDefinition

MAX_QUERY_NUMBERS = 4097
"""Most numbers one query parameter may list (edges, quantiles, candidates)."""


def _set(definition: MetricDefinition, name: str, value: object) -> None:
    object.__setattr__(definition, name, value)


def _fail(definition: MetricDefinition, message: str) -> ParameterError:
    return ParameterError(f"metric {definition.name}: {message}")


def _numbers(text: str, param: str, *, minimum: int = 1) -> list[float]:
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


def _integer(text: str, param: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise QueryError(param, f"expected an integer, got {text[:40]!r}") from None


@dataclass(frozen=True)
class KindSpec:
    """One metric kind (see the module doc). ``keys``: its own definition keys."""

    name: str
    keys: tuple[str, ...]
    params: tuple[str, ...] = ()
    """Its own query parameters of ``GET /v1/estimates/{name}``."""

    def build(self, definition: MetricDefinition) -> Mechanism:
        raise NotImplementedError

    def encode(self, definition: MetricDefinition, value: object) -> tuple[Any, bool]:
        """(mechanism input, whether the value was clipped)."""
        raise NotImplementedError

    def encode_many(self, definition: MetricDefinition, values: Any) -> npt.NDArray[Any]:
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
        return struct.pack("<Q", int(encoded))

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        return {}

    def estimate(self, definition: MetricDefinition, aggregate: Aggregate) -> Any:
        """The mechanism's estimate of ``aggregate`` (its result object)."""
        mechanism: Any = definition.mechanism_instance
        return mechanism.estimate(aggregate)

    def answer(
        self, definition: MetricDefinition, aggregate: Aggregate, q: Question
    ) -> dict[str, Any]:
        """The kind's fields of the answer (``interval`` None when it holds no report)."""
        data = self.fields(definition, self.estimate(definition, aggregate), q)
        if not data["n"]:
            data["interval"] = None
        return data

    def fields(self, definition: MetricDefinition, estimate: Any, q: Question) -> dict[str, Any]:
        """The answer's fields from ``estimate`` (its result object's ``to_dict``).

        Categorical and numeric metrics have none here: the collector answers them on its
        own fast path, and ``definition.mechanism_instance.estimate(aggregate)`` gives
        their result object (``.ci``, ``.to_dict``)."""
        raise ParameterError(
            f"{self.name} metrics are answered by the collector's estimate path; "
            "definition.mechanism_instance.estimate(aggregate) gives their result object"
        )

    def answer_items(self, definition: MetricDefinition, options: Mapping[str, Any]) -> int:
        return 1

    def plan(self, definition: MetricDefinition, target: PlanTarget) -> KindPlan:
        """What n reports give (``n``), or the n a target needs (``half_width``; for
        strings, the ``frequency`` to find), for this metric."""
        raise ParameterError(
            f"{self.name} metrics are planned with ldpkit.plan (domain_size or bounds)"
        )


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
    :meth:`KindSpec.parse_options`), the intervals' ``level``, and whether to add the
    ``consistent`` (Norm-Sub) estimates."""

    options: Mapping[str, Any] = field(default_factory=dict)
    level: float = 0.95
    consistent: bool = False


@dataclass(frozen=True)
class PlanTarget:
    """What a plan answers: what ``n`` reports give, or the n a ``half_width`` needs (for
    strings, the n that finds a ``frequency``), at ``level``."""

    n: int | None = None
    half_width: float | None = None
    frequency: float | None = None
    level: float = 0.95

    def check_n_or_half_width(self) -> None:
        if (self.n is None) == (self.half_width is None):
            raise ParameterError("give n (to get the half-widths) or half_width (to get n)")


def _build(definition: MetricDefinition, name: str, **options: Any) -> Mechanism:
    try:
        return make_mechanism(name, epsilon=definition.epsilon, **options)
    except ParameterError as exc:
        raise _fail(definition, str(exc)) from None


def _refuse(
    spec: KindSpec,
    definition: MetricDefinition,
    values: Any,
    k: int,
    *,
    position: int | None = None,
    only_if_bad: bool = False,
) -> None:
    """Raise :meth:`KindSpec.encode`'s message for ``values[k]``, prefixed with its
    position: one wording for a bad value, alone or in an array."""
    try:
        spec.encode(definition, values[k])
    except ParameterError as exc:
        raise ParameterError(f"value {k if position is None else position}: {exc}") from None
    if not only_if_bad:
        raise AssertionError("unreachable")  # pragma: no cover


# --- categorical and numeric --------------------------------------------------------------
class Categorical(KindSpec):
    def build(self, definition: MetricDefinition) -> Mechanism:
        definition._check_categories()
        d = len(definition.categories or ())
        name = definition.mechanism
        if name == "auto":
            name = choose(epsilon=definition.epsilon, domain_size=d).name
        return _build(definition, name, domain_size=d)

    def encode(self, definition: MetricDefinition, value: object) -> tuple[Any, bool]:
        i = definition.category_index.get(value) if isinstance(value, str) else None
        if i is not None:
            return i, False
        if not isinstance(value, str):
            raise ParameterError(
                f"metric {definition.name} takes one of its categories (a string), got {value!r}"
            )
        cats = definition.categories or ()
        raise ParameterError(
            f"{value!r} is not a category of metric {definition.name}; expected one of "
            + ", ".join(cats[:20])
            + ("..." if len(cats) > 20 else "")
        )

    def encode_many(self, definition: MetricDefinition, values: Any) -> npt.NDArray[Any]:
        index = definition.category_index
        found = [index.get(v) if isinstance(v, str) else None for v in values]
        if None in found:
            _refuse(self, definition, values, found.index(None))
        return np.array(found, dtype=np.int64)


class Numeric(KindSpec):
    def build(self, definition: MetricDefinition) -> Mechanism:
        bounds = _bounds(definition)
        try:
            delta = check_delta(definition.delta)
        except ParameterError as exc:
            raise _fail(definition, str(exc)) from None
        _set(definition, "delta", delta)
        name = definition.mechanism
        if name == "auto":
            name = choose(epsilon=definition.epsilon, bounds=bounds, delta=delta).name
        options: dict[str, Any] = {"bounds": bounds}
        if name == "gaussian":
            if delta == 0.0:
                raise _fail(definition, "mechanism 'gaussian' needs delta > 0 (e.g. delta = 1e-6)")
            options["delta"] = delta
        elif delta > 0.0 and definition.mechanism != "auto":
            raise _fail(definition, f"mechanism {name!r} is pure epsilon-LDP: it takes no delta")
        return _build(definition, name, **options)

    def encode(self, definition: MetricDefinition, value: object) -> tuple[Any, bool]:
        assert definition.bounds is not None
        lo, hi = definition.bounds
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise ParameterError(
                f"metric {definition.name} takes a number in [{lo:g}, {hi:g}], "
                f"got {type(value).__name__} {value!r}"
            )
        x = float(value)
        if not math.isfinite(x):
            raise ParameterError(f"metric {definition.name} takes a finite number, got {value!r}")
        clipped = min(max(x, lo), hi)
        return clipped + 0.0, clipped != x  # + 0.0 folds -0.0 into 0.0

    def encode_many(self, definition: MetricDefinition, values: Any) -> npt.NDArray[Any]:
        array = np.asarray(values)
        if array.ndim != 1:
            raise ParameterError(
                f"metric {definition.name} takes a 1-D array of numbers, got {array.shape}"
            )
        if array.dtype.kind not in "iuf":  # name the first value encode() refuses
            for k, v in enumerate(array.tolist()):
                _refuse(self, definition, [v], 0, position=k, only_if_bad=True)
        x = array.astype(np.float64)
        bad = ~np.isfinite(x)
        if bool(np.any(bad)):
            _refuse(self, definition, x, int(np.argmax(bad)))
        assert definition.bounds is not None
        out: npt.NDArray[Any] = np.clip(x, *definition.bounds) + 0.0
        return out

    def as_array(self, encoded: Sequence[Any]) -> npt.NDArray[Any]:
        return np.asarray(encoded, dtype=np.float64)

    def value_key(self, encoded: Any) -> bytes:
        return struct.pack("<d", float(encoded))


def _bounds(definition: MetricDefinition) -> tuple[float, float]:
    if definition.bounds is None:
        raise _fail(definition, f"{definition.kind} metrics need bounds [lo, hi]")
    try:
        bounds = check_bounds(definition.bounds)
    except ParameterError as exc:
        raise _fail(definition, str(exc)) from None
    _set(definition, "bounds", bounds)
    return bounds


# --- distribution (issue 15) ---------------------------------------------------------------
DEFAULT_RESOLUTION = 1024


class Distribution(Numeric):
    """A number whose answer is its distribution (hierarchical histogram)."""

    def build(self, definition: MetricDefinition) -> Mechanism:
        bounds = _bounds(definition)
        resolution: object = definition.resolution  # from TOML/JSON it may be anything
        if resolution is None:
            resolution = DEFAULT_RESOLUTION
        if isinstance(resolution, bool) or not isinstance(resolution, Integral):
            raise _fail(definition, f"resolution must be an integer, got {shown(resolution)}")
        _set(definition, "resolution", int(resolution))
        name = definition.mechanism
        if name == "auto":
            try:
                name = choose(
                    epsilon=definition.epsilon, bounds=bounds, resolution=int(resolution)
                ).name
            except ParameterError as exc:
                raise _fail(definition, str(exc)) from None
        return _build(definition, name, bounds=bounds, resolution=int(resolution))

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if query.get("bins"):
            out["bins"] = _integer(query["bins"], "bins")
        if query.get("edges"):
            if "bins" in out:
                raise QueryError("edges", "give bins or edges, not both")
            out["edges"] = _numbers(query["edges"], "edges", minimum=2)
        if query.get("quantiles"):
            out["quantiles"] = _numbers(query["quantiles"], "quantiles")
        if query.get("range"):
            pair = _numbers(query["range"], "range", minimum=2)
            if len(pair) != 2:
                raise QueryError("range", "expected two numbers: lower,upper")
            out["range_"] = (pair[0], pair[1])
        return out

    def fields(self, definition: MetricDefinition, estimate: Any, q: Question) -> dict[str, Any]:
        try:
            data: dict[str, Any] = estimate.to_dict(q.level, **q.options)
        except ParameterError as exc:
            param = _param_of(str(exc), ("edges", "bins", "range", "q"))
            raise QueryError("quantiles" if param == "q" else param, str(exc)) from None
        data["interval"] = data["methods"]["items"]
        return data

    def answer_items(self, definition: MetricDefinition, options: Mapping[str, Any]) -> int:
        edges = options.get("edges")
        return len(edges) - 1 if edges else int(options.get("bins") or 16)

    def plan(self, definition: MetricDefinition, target: PlanTarget) -> KindPlan:
        from .distribution_plan import plan_distribution, required_n_distribution

        target.check_n_or_half_width()
        assert definition.bounds is not None and definition.resolution is not None
        common: dict[str, Any] = {
            "epsilon": definition.epsilon,
            "bounds": definition.bounds,
            "resolution": definition.resolution,
            "level": target.level,
        }
        p = (
            plan_distribution(n=target.n, **common)
            if target.n is not None
            else required_n_distribution(half_width=target.half_width, **common)  # type: ignore[arg-type]
        )
        lo, hi = definition.bounds
        head = (
            f"{p.mechanism}, epsilon={p.epsilon:g}, n={p.n:,}"
            if target.n is not None
            else f"{p.mechanism}, epsilon={p.epsilon:g}: n >= {p.n:,} reports for a range "
            f"half-width of {target.half_width:g}"
        )
        lines = (
            f"distribution over [{lo:g}, {hi:g}], {p.resolution} leaves (fan-out {p.branching})",
            head,
            f"  range fraction: {p.level:.0%} half-width <= {p.half_width:.4g} whatever the data "
            f"(typical {p.typical_half_width:.4g}, values spread evenly)",
            f"  quantile {p.quantile:g}: half-width about {p.quantile_half_width:.4g} "
            f"(units of the metric, values spread evenly)",
        )
        return KindPlan(lines, p)


# --- hierarchy and table (issue 16) -------------------------------------------------------
def _oracle(definition: MetricDefinition) -> str | tuple[str, ...]:
    given: object = definition.oracle
    if given is None:
        return "auto"
    if isinstance(given, str):
        return given
    if isinstance(given, list | tuple) and given and all(isinstance(o, str) for o in given):
        _set(definition, "oracle", tuple(given))
        return tuple(given)
    raise _fail(definition, f"oracle must be a name or a list of names, got {shown(given)}")


def _focus(definition: MetricDefinition, item: type) -> tuple[Any, ...] | None:
    given: object = definition.focus
    if given is None:
        return None
    if (
        isinstance(given, str)
        or not isinstance(given, list | tuple)
        or not all(isinstance(f, item) and not isinstance(f, bool) for f in given)
    ):
        what = "depths (integers)" if item is int else "'cells' and dimension names"
        raise _fail(definition, f"focus must be a list of {what}, got {shown(given)}")
    _set(definition, "focus", tuple(given))
    return tuple(given)


class _Structured(KindSpec):
    """Hierarchies and tables: a value is one base cell (a leaf, a cell)."""

    def _domain_encode(self, definition: MetricDefinition, value: object) -> int:
        raise NotImplementedError

    @staticmethod
    def _made(
        definition: MetricDefinition,
        make: Callable[..., Mechanism],
        domain: object,
        focus: tuple[Any, ...] | None,
        **options: Any,
    ) -> Mechanism:
        """``make(domain, ...)`` (:func:`~ldpkit.structured.hierarchy` or ``table``) with
        the definition's epsilon, mechanism and oracle; the oracle ``auto`` resolved to is
        kept on the definition, so a stored definition rebuilds the same."""
        try:
            m = make(
                domain,
                epsilon=definition.epsilon,
                mechanism=definition.mechanism,
                oracle=_oracle(definition),
                focus=focus,
                **options,
            )
        except ParameterError as exc:
            raise _fail(definition, str(exc)) from None
        views = getattr(m, "views", ())
        _set(definition, "resolved_oracle", tuple(v.oracle.name for v in views))
        return m

    def encode(self, definition: MetricDefinition, value: object) -> tuple[Any, bool]:
        try:
            return self._domain_encode(definition, value), False
        except (ReportError, ParameterError) as exc:
            raise _fail(definition, str(exc)) from None

    def plan(self, definition: MetricDefinition, target: PlanTarget) -> KindPlan:
        from .structured import plan_structured, required_n_structured

        target.check_n_or_half_width()
        m: Any = definition.mechanism_instance
        n, half_width, level = target.n, target.half_width, target.level
        p = (
            plan_structured(m, n=n, level=level)
            if n is not None
            else required_n_structured(m, half_width=half_width, level=level)  # type: ignore[arg-type]
        )
        head = (
            f"n >= {p.n:,} reports for a {level:.0%} half-width of {half_width:g} at every target"
            if half_width is not None
            else f"{level:.0%} half-width per target after n={p.n:,} reports"
        )
        return KindPlan((head, *p.explain().splitlines()), p)


class Hierarchy(_Structured):
    """Categories in a tree (leaf paths); answers at any depth and for any subtree."""

    def build(self, definition: MetricDefinition) -> Mechanism:
        from .structured import hierarchy

        definition._check_categories()
        separator: object = definition.separator
        if separator is None:
            separator = "/"
        if not isinstance(separator, str) or not separator:
            raise _fail(definition, f"separator must be a non-empty string, got {shown(separator)}")
        _set(definition, "separator", separator)
        leaves = list(definition.categories or ())
        return self._made(
            definition, hierarchy, leaves, _focus(definition, int), separator=separator
        )

    def _domain_encode(self, definition: MetricDefinition, value: object) -> int:
        m: Any = definition.mechanism_instance
        return int(m.tree.leaf_index(value))

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if query.get("depth"):
            out["depth"] = _integer(query["depth"], "depth")
        if query.get("subtree"):
            out["subtree"] = query["subtree"]
        return out

    def fields(self, definition: MetricDefinition, estimate: Any, q: Question) -> dict[str, Any]:
        depth = q.options.get("depth")
        try:
            if "subtree" in q.options:
                path = q.options["subtree"]
                group = estimate.subtree(path, depth)
                d = estimate.tree.locate(group.keys[0])[0] if len(group) else depth
                data = {
                    "mechanism": estimate.mechanism,
                    "n": estimate.n,
                    "depth": d,
                    "subtree": path,
                    "interval": estimate.interval,
                    "items": group.items(q.level, consistent=q.consistent),
                }
            else:
                data = estimate.to_dict(depth, q.level, consistent=q.consistent)
        except ParameterError as exc:
            raise QueryError("subtree" if "subtree" in q.options else "depth", str(exc)) from None
        return dict(data)

    def answer_items(self, definition: MetricDefinition, options: Mapping[str, Any]) -> int:
        m: Any = definition.mechanism_instance
        return int(m.tree.size)


def _dimensions(definition: MetricDefinition) -> dict[str, list[str]]:
    """A table's dimensions from a mapping (TOML, JSON object) or a list of [name, categories]
    pairs (the stored form: JSON objects may lose their order)."""
    given: object = definition.dimensions
    if isinstance(given, Mapping):
        pairs = list(given.items())
    elif isinstance(given, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 for p in given
    ):
        pairs = [(p[0], p[1]) for p in given]
    else:
        raise _fail(
            definition,
            "table metrics need dimensions: a table of attribute = [categories] (or a list of "
            f"[name, [categories]] pairs), got {shown(given)}",
        )
    out: dict[str, list[str]] = {}
    for name, cats in pairs:
        if not isinstance(name, str) or name in out:
            raise _fail(definition, f"dimension names must be distinct strings, got {shown(name)}")
        if isinstance(cats, str) or not isinstance(cats, list | tuple):
            raise _fail(definition, f"dimension {name!r} needs a list of categories")
        for c in cats:
            if not isinstance(c, str) or not c or len(c) > MAX_CATEGORY_LENGTH:
                raise _fail(
                    definition,
                    f"each category must be a non-empty string of at most "
                    f"{MAX_CATEGORY_LENGTH} characters, got {shown(c)}",
                )
        out[name] = list(cats)
    _set(definition, "dimensions", tuple((n, tuple(c)) for n, c in out.items()))
    return out


MAX_CATEGORY_LENGTH = 200


class TableKind(_Structured):
    """Several categorical attributes reported together: cells and marginals."""

    def build(self, definition: MetricDefinition) -> Mechanism:
        from .structured import table

        return self._made(definition, table, _dimensions(definition), _focus(definition, str))

    def _domain_encode(self, definition: MetricDefinition, value: object) -> int:
        m: Any = definition.mechanism_instance
        return int(m.table.index(value))

    def fields(self, definition: MetricDefinition, estimate: Any, q: Question) -> dict[str, Any]:
        data: dict[str, Any] = estimate.to_dict(q.level, consistent=q.consistent)
        data["dimensions"] = [[n, list(c)] for n, c in definition.dimensions or ()]
        return data

    def answer_items(self, definition: MetricDefinition, options: Mapping[str, Any]) -> int:
        m: Any = definition.mechanism_instance
        return int(m.table.size + sum(m.table.shape))


# --- open-domain strings (issue 17) ----------------------------------------------------------
DEFAULT_K = 20
DECODED_CACHE = 32
"""Decoded answers kept (per process): decoding a strings metric takes seconds at 10^6
reports, so the next query of the same data (candidates, another level) reuses it."""


class Strings(KindSpec):
    """Any string up to ``max_length`` bytes; answers the top-k found and named candidates."""

    def __init__(self, name: str, keys: tuple[str, ...], params: tuple[str, ...]) -> None:
        super().__init__(name, keys, params)
        object.__setattr__(self, "_decoded", OrderedDict())
        object.__setattr__(self, "_lock", threading.Lock())

    def build(self, definition: MetricDefinition) -> Mechanism:
        if definition.max_length is None:
            raise _fail(definition, "strings metrics need max_length (bytes, UTF-8)")
        k: object = DEFAULT_K if definition.k is None else definition.k
        name = definition.mechanism
        m = _build(
            definition,
            "prefix_sketch" if name == "auto" else name,
            max_length=definition.max_length,
            k=k,
        )
        _set(definition, "k", k)
        return m

    def encode(self, definition: MetricDefinition, value: object) -> tuple[Any, bool]:
        if not isinstance(value, str):
            raise _fail(definition, f"takes a string, got {shown(value)}")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _fail(definition, f"{shown(value)} cannot be encoded as UTF-8: {exc}") from None
        limit = definition.max_length or 0
        if len(data) > limit:
            raise _fail(
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

    def estimate(self, definition: MetricDefinition, aggregate: Aggregate) -> Any:
        """The mechanism's answer for ``aggregate``, decoded once per distinct aggregate
        of a metric version (keyed by the fingerprint, n and a digest of the sums)."""
        key = (
            definition.fingerprint,
            aggregate.n,
            hashlib.sha256(np.ascontiguousarray(aggregate.sums).tobytes()).digest(),
        )
        cache: OrderedDict[tuple[str, int, bytes], Any] = self._decoded  # type: ignore[attr-defined]
        with self._lock:  # type: ignore[attr-defined]
            found = cache.get(key)
            if found is not None:
                cache.move_to_end(key)
                return found
        m: Any = definition.mechanism_instance
        result = m.estimate(aggregate)
        with self._lock:  # type: ignore[attr-defined]
            cache[key] = result
            while len(cache) > DECODED_CACHE:
                cache.popitem(last=False)
        return result

    def fields(self, definition: MetricDefinition, estimate: Any, q: Question) -> dict[str, Any]:
        try:
            data: dict[str, Any] = estimate.to_dict(q.options.get("candidates"), q.level)
        except ParameterError as exc:
            raise QueryError("candidates", str(exc)) from None
        data["interval"] = data.pop("interval_method")
        return data

    def answer_items(self, definition: MetricDefinition, options: Mapping[str, Any]) -> int:
        return (definition.k or DEFAULT_K) + len(options.get("candidates", ()))

    def plan(self, definition: MetricDefinition, target: PlanTarget) -> KindPlan:
        from .heavy_hitters import plan_strings, required_n_strings

        n, frequency = target.n, target.frequency
        if target.half_width is not None or (n is None) == (frequency is None):
            raise ParameterError(
                "a strings metric is planned by n (the frequency found) or by frequency "
                "(the n that finds it), not by a half-width"
            )
        common: dict[str, Any] = {
            "epsilon": definition.epsilon,
            "max_length": definition.max_length,
            "k": definition.k or DEFAULT_K,
        }
        if n is not None:
            p = plan_strings(n=n, **common)
            head = f"{p.mechanism}, epsilon={p.epsilon:g}, n={p.n:,}, k={p.k}"
        else:
            p = required_n_strings(frequency=frequency, **common)  # type: ignore[arg-type]
            head = (
                f"{p.mechanism}, epsilon={p.epsilon:g}: n >= {p.n:,} reports find a string of "
                f"{p.max_length} bytes held by {frequency:.2%} of users half the time"
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


def _param_of(message: str, names: Sequence[str]) -> str:
    """The query parameter an error message is about (the first named in it)."""
    found = [(message.find(n), n) for n in names if n in message]
    return min(found)[1] if found else names[0]


KINDS: dict[str, KindSpec] = {}


def register(spec: KindSpec) -> KindSpec:
    KINDS[spec.name] = spec
    return spec


register(Categorical("categorical", ("categories",)))
register(Numeric("numeric", ("bounds", "delta")))
register(
    Distribution("distribution", ("bounds", "resolution"), ("bins", "edges", "quantiles", "range"))
)
register(
    Hierarchy("hierarchy", ("categories", "separator", "focus", "oracle"), ("depth", "subtree"))
)
register(TableKind("table", ("dimensions", "focus", "oracle")))
register(Strings("strings", ("max_length", "k"), ("candidates",)))

KIND_KEYS = (
    "categories",
    "bounds",
    "delta",
    "resolution",
    "separator",
    "dimensions",
    "focus",
    "oracle",
    "max_length",
    "k",
)
"""Every kind-specific definition key (each kind takes the ones in its ``keys``)."""


def kind_spec(name: object) -> KindSpec:
    """The kind registered as ``name``; ParameterError lists the kinds otherwise."""
    spec = KINDS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ParameterError(f"kind must be one of {', '.join(KINDS)}, got {shown(name)}")
    return spec


def query_params() -> tuple[str, ...]:
    """Every kind's own query parameters (each kind accepts only its own)."""
    seen: dict[str, None] = {}
    for spec in KINDS.values():
        seen.update(dict.fromkeys(spec.params))
    return tuple(seen)


def checked_options(definition: MetricDefinition, query: Mapping[str, str]) -> dict[str, Any]:
    """The kind's options of an estimates query; QueryError for another kind's parameter."""
    spec = kind_spec(definition.kind.value)
    for key in query:
        if key in query_params() and key not in spec.params:
            accepted = ", ".join(spec.params) or "none"
            raise QueryError(
                key,
                f"not a parameter of a {spec.name} metric (its own parameters: {accepted})",
            )
    return spec.parse_options(query)


__all__ = [
    "KINDS",
    "KIND_KEYS",
    "KindSpec",
    "PlanTarget",
    "Question",
    "checked_options",
    "kind_spec",
    "query_params",
    "register",
]
