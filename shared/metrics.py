"""Metric definitions: what is collected, how it is perturbed, and its version.

A metric is a name, a kind (categorical with its categories, or numeric with bounds), a
mechanism (a name or ``"auto"``), the epsilon each report spends, and a time bucket. The
client and the collector build the same mechanism from the same definition, and the
definition's *fingerprint* names that exact parameter set: change any parameter and the
fingerprint changes, so reports made under different parameters are never mixed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from ._validation import check_epsilon, shown
from .errors import ParameterError
from .kinds import KIND_DEFAULTS, KIND_KEYS, NAMES, KindSpec, kind_spec, legacy_kind
from .kinds import MetricKind as MetricKind  # its home is ldpkit.kinds
from .kinds.base import DEFAULT_FORGERY_FRACTION, Fraction
from .mechanisms import Mechanism, canonical_name, mechanism_class

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
"""A metric name; matched against the *whole* name (``fullmatch``: ``$`` alone would let a
final newline through)."""
MAX_CATEGORY_CHARACTERS = 1 << 20
"""Size limits of a definition given to a collector (``PUT /v1/metrics``, a config file):
every app downloads every definition in ``GET /v1/metrics``. The categories' characters
together, and the description's, are checked by :func:`check_definition_size`."""
MAX_DESCRIPTION_LENGTH = 4096
BUDGET_SLACK = 1e-9
"""Relative slack when comparing sums of epsilons (1.0 + 0.1 + ... is not exact): a device's
ledger admits a report when ``spent + epsilon <= budget * (1 + BUDGET_SLACK) + BUDGET_SLACK``."""


DEFINITION_KEYS = (
    "kind",
    *KIND_KEYS,
    "epsilon",
    "mechanism",
    "bucket",
    "budget",
    "budget_period",
    "description",
    "forgery_fraction",
    "name",
    # derived keys of to_dict(), accepted back so a served definition round-trips
    "fingerprint",
    "resolved_mechanism",
    "resolved_oracle",
    "report_size",
    "derived",
    "mechanism_params",
)
"""The keys a metric definition may have (TOML table, JSON object)."""


def window_start(seconds: int, unix_seconds: float) -> int:
    """Start of the window of ``seconds`` holding ``unix_seconds``: windows are aligned to
    the epoch, UTC (weeks start on Thursday 1970-01-01). The one place periods, report
    buckets and budget windows are computed."""
    return int(unix_seconds // seconds) * seconds


class Period(StrEnum):
    """A span of time: report buckets and privacy-budget periods are aligned to these (UTC)."""

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"

    @property
    def seconds(self) -> int:
        return {"hour": 3600, "day": 86400, "week": 7 * 86400}[self.value]

    def start(self, unix_seconds: float) -> int:
        """Start of the period holding ``unix_seconds`` (see :func:`window_start`)."""
        return window_start(self.seconds, unix_seconds)


def check_period(value: object, what: str) -> Period:
    """``value`` as a :class:`Period`; ParameterError naming ``what`` and the choices."""
    try:
        return Period(value if isinstance(value, str) else "")
    except ValueError:
        choices = ", ".join(p.value for p in Period)
        raise ParameterError(f"{what} must be one of {choices}, got {shown(value)}") from None


def check_forgery_fraction(value: object) -> Fraction:
    """The forged fraction of the reports an answer discloses its shift for: a number in
    (0, 0.5] (half the reports forged or more, nothing is left to estimate)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 0.5:
        raise ParameterError(f"forgery_fraction must be a number in (0, 0.5], got {shown(value)}")
    return Fraction(float(value))


def check_definition_size(definition: MetricDefinition) -> MetricDefinition:
    """Raise ParameterError if ``definition`` is larger than a collector accepts: a description over
    ``MAX_DESCRIPTION_LENGTH`` characters or categories over ``MAX_CATEGORY_CHARACTERS`` characters
    in all (the kinds bound each category's length and their number: ``ldpkit.kinds.base``). Applied
    to new definitions only (PUT, config files), so versions stored before these limits load."""
    if len(definition.description) > MAX_DESCRIPTION_LENGTH:
        raise ParameterError(
            f"metric {definition.name}: description must be at most {MAX_DESCRIPTION_LENGTH} "
            f"characters, got {len(definition.description)}"
        )
    total = sum(map(len, definition.categories or ()))
    total += sum(len(n) + sum(map(len, c)) for n, c in definition.dimensions or ())
    if total > MAX_CATEGORY_CHARACTERS:
        raise ParameterError(
            f"metric {definition.name}: categories must hold at most "
            f"{MAX_CATEGORY_CHARACTERS} characters in all (every app downloads them), "
            f"got {total}"
        )
    return definition


@dataclass(frozen=True, kw_only=True)
class MetricDefinition:
    """One metric. Build it with :meth:`categorical`, :meth:`numeric` or :meth:`from_dict`.

    ``budget`` is the epsilon a device may spend on this metric per ``budget_period``
    (default: one fresh report per period, ``budget = epsilon``); the client enforces it.
    """

    name: str
    kind: MetricKind
    epsilon: float
    mechanism: str = "auto"
    categories: tuple[str, ...] | None = None
    ordered: bool | None = None
    """Categorical metrics: ``True`` when the categories are listed in order (ratings,
    brackets): answers add the mean rank, and ``auto`` weighs the mechanisms by it."""
    score: str | None = None
    """Categorical metrics by ``exponential``: ``"distance"`` (the default when ordered),
    ``"band"`` (with ``band``) or ``"matrix"`` (with ``scores``)."""
    band: int | None = None
    """Categorical metrics by ``exponential`` with ``score = "band"``: the band's half-width."""
    scores: tuple[tuple[float, ...], ...] | None = None
    """Categorical metrics by ``exponential``: a d x m score matrix (inputs x outputs)."""
    bounds: tuple[float, float] | None = None
    delta: float = 0.0
    """Numeric metrics: the delta of one report, 0 (pure epsilon-LDP) unless the
    mechanism is (epsilon, delta)-LDP (``gaussian``); ``auto`` weighs those only when
    delta > 0. The client's ledger spends it per report beside epsilon."""
    resolution: int | None = None
    """Distribution metrics: leaves of the finest histogram (default 1024)."""
    separator: str | None = None
    """Hierarchy metrics: what joins a leaf path's segments (default ``"/"``); the leaf
    paths are ``categories``."""
    dimensions: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    """Table metrics: (attribute, categories) pairs in order (a mapping is accepted)."""
    focus: tuple[Any, ...] | None = None
    """Hierarchy and table metrics: what ``auto`` weighs (depths; ``"cells"`` and
    dimension names); default every depth / the cells."""
    oracle: str | tuple[str, ...] | None = None
    """Hierarchy and table metrics: the frequency oracle of each view (default ``auto``)."""
    resolved_oracle: tuple[str, ...] = field(init=False, default=(), compare=False)
    max_length: int | None = None
    """Strings metrics: the longest string, in bytes (UTF-8); longer ones are refused on
    the device."""
    k: int | None = None
    """Strings metrics: how many heavy hitters to find (default 20)."""
    seed: int | None = None
    """Strings metrics: the seed of the public hash family, an integer in [0, 2^53)
    (default 0). A deployment rotates it by defining a new version: the fingerprint changes
    and reports under two seeds are never mixed."""
    bucket: Period = Period.DAY
    budget: float | None = None
    budget_period: Period = Period.DAY
    description: str = ""
    forgery_fraction: float | None = None
    """The fraction of forged reports an estimates answer discloses the shift for
    (``forgery_shift``; default 0.01). It changes no report's meaning: not in the
    fingerprint."""
    _mechanism: Mechanism = field(init=False, repr=False, compare=False)

    def encode_value(self, value: object) -> Any:
        """What a device gives the mechanism for ``value``: its kind's one check and
        encoding (:meth:`ldpkit.kinds.KindSpec.encode`; a number is clipped)."""
        return self.kind_spec.encode(self, value)[0]

    @cached_property
    def category_index(self) -> dict[str, int]:
        """Each category's index (the value a device reports); empty for other kinds."""
        return {c: i for i, c in enumerate(self.categories or ())}

    @property
    def kind_spec(self) -> KindSpec:
        """The kind's entry in :mod:`ldpkit.kinds`: its encoding and its answers."""
        return kind_spec(self.kind.value)

    def __post_init__(self) -> None:
        kind = self._check_common()
        spec = kind_spec(kind.value)
        for key in KIND_KEYS:
            if key not in spec.keys and getattr(self, key) != KIND_DEFAULTS[key]:
                raise ParameterError(f"metric {self.name}: {kind.value} metrics take no {key}")
        object.__setattr__(self, "mechanism", self._checked(canonical_name, self.mechanism))
        built = spec.build(self)
        if built.mechanism.kind != kind.value:
            raise ParameterError(
                f"metric {self.name}: mechanism {built.mechanism.name!r} does not fit a "
                f"{kind.value} metric"
            )
        for key, value in built.fields.items():  # what the kind normalised
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_mechanism", built.mechanism)

    def _check_common(self) -> MetricKind:
        """Check (and normalise) the fields every kind has; the kind."""
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise ParameterError(
                f"metric name must match {NAME_PATTERN.pattern} (lowercase, <= 64 chars), "
                f"got {shown(self.name, 80)}"
            )
        try:
            kind = MetricKind(self.kind)
        except ValueError:
            raise ParameterError(
                f"metric {self.name}: kind must be one of {', '.join(NAMES)}, "
                f"got {shown(self.kind)}"
            ) from None
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "epsilon", self._checked(check_epsilon, self.epsilon))
        for period in ("bucket", "budget_period"):
            checked = check_period(getattr(self, period), f"metric {self.name}: {period}")
            object.__setattr__(self, period, checked)
        if self.budget is not None:
            object.__setattr__(self, "budget", self._checked_budget(self.budget))
        if not isinstance(self.description, str):
            raise ParameterError(f"metric {self.name}: description must be a string")
        if self.forgery_fraction is not None:
            fraction = self._checked(check_forgery_fraction, self.forgery_fraction)
            object.__setattr__(self, "forgery_fraction", fraction)
        return kind

    def _checked_budget(self, given: object) -> float:
        budget: float = self._checked(check_epsilon, given, what="budget")
        if budget < self.epsilon:
            raise ParameterError(
                f"metric {self.name}: budget ({budget:g}) is smaller than the epsilon of "
                f"one report ({self.epsilon:g})"
            )
        return budget

    def _checked(self, check: Any, value: object, what: str = "") -> Any:
        try:
            return check(value)
        except ParameterError as exc:
            message = f"{what}: {exc}" if what else str(exc)
            raise ParameterError(f"metric {self.name}: {message}") from None

    @classmethod
    def categorical(
        cls, name: str, categories: list[str] | tuple[str, ...], *, epsilon: float, **kw: Any
    ) -> MetricDefinition:
        return cls(
            name=name,
            kind=MetricKind.CATEGORICAL,
            categories=tuple(categories),
            epsilon=epsilon,
            **kw,
        )

    @classmethod
    def numeric(
        cls, name: str, bounds: tuple[float, float], *, epsilon: float, **kw: Any
    ) -> MetricDefinition:
        return cls(name=name, kind=MetricKind.NUMERIC, bounds=bounds, epsilon=epsilon, **kw)

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> MetricDefinition:
        """From a TOML table or JSON object (the keys of :meth:`to_dict`, less derived ones)."""
        _check_keys(name, data)
        cats = data.get("categories")
        kind_keys = {
            k: data[k] for k in KIND_KEYS if k not in ("categories", "bounds") if k in data
        }
        return cls(
            name=name,
            kind=data.get("kind", legacy_kind(cats is not None)),
            epsilon=data["epsilon"],
            mechanism=data.get("mechanism", "auto"),
            categories=_tuple(cats),
            bounds=_tuple(data.get("bounds")),
            **kind_keys,
            bucket=data.get("bucket", "day"),
            budget=data.get("budget"),
            budget_period=data.get("budget_period", "day"),
            description=data.get("description", ""),
            forgery_fraction=data.get("forgery_fraction"),
        )

    @classmethod
    def from_served(
        cls, name: str, data: dict[str, Any], fingerprint: str | None = None
    ) -> MetricDefinition:
        """A definition as a collector serves or stores it (:meth:`to_dict`), rebuilt.

        ``"auto"`` may resolve differently in another ldpkit version: when the rebuilt
        definition does not reproduce ``fingerprint`` (or none is given), the served
        ``resolved_mechanism`` is pinned, so both sides perturb and estimate with the
        same mechanism. The caller compares fingerprints: what to do about a mismatch
        (skip it, keep it under the old one) is its own."""
        definition = cls.from_dict(name, data)
        pinned = data.get("resolved_mechanism")
        if isinstance(pinned, str) and definition.fingerprint != fingerprint:
            spec = dict(data, mechanism=pinned)
            if data.get("resolved_oracle"):  # hierarchies and tables: their oracles too
                spec["oracle"] = data["resolved_oracle"]
            if not mechanism_class(pinned).takes_score:  # a score auto weighed, not its own
                for key in ("score", "band", "scores"):
                    spec.pop(key, None)
            definition = cls.from_dict(name, spec)
        return definition

    def served_differences(self, served: Mapping[str, Any]) -> list[str]:
        """The served constants that are not this definition's own: each as
        ``"derived.<path> = <served> (computed <ours>)"``; empty when all agree.

        Verification (docs/protocol.md): a client recomputes every constant a served
        definition carries and refuses the definition if any differs, so that a collector,
        or anyone between it and the device, cannot weaken a report's privacy by serving
        other thresholds. This client computes every constant exactly as the collector
        does: thresholds, integers and strings must be equal, floats within a relative
        :data:`VERIFY_TOLERANCE`."""
        ours = self.to_dict()
        found: list[str] = []
        for key in ("resolved_mechanism", "report_size"):
            if key in served and served[key] != ours[key]:
                found.append(f"{key} = {served[key]!r} (computed {ours[key]!r})")
        _differences("derived", served.get("derived"), ours.get("derived"), found)
        return found

    @property
    def mechanism_instance(self) -> Mechanism:
        """The mechanism both sides build from this definition."""
        return self._mechanism

    @property
    def resolved_mechanism(self) -> str:
        return self._mechanism.name

    @property
    def effective_budget(self) -> float:
        return self.budget if self.budget is not None else self.epsilon

    @property
    def device_cap(self) -> int:
        """The most reports of this version one device's ledger lets it queue for one bucket:
        fresh reports within a budget window (``budget / epsilon``, with the ledger's slack),
        times the budget windows a bucket spans (a memoized repeat is queued at most once
        per bucket and memo window, and memo windows are budget windows)."""
        budget = self.effective_budget * (1.0 + BUDGET_SLACK) + BUDGET_SLACK
        fresh = math.floor(budget / self.epsilon * (1.0 + BUDGET_SLACK))
        return fresh * max(1, self.bucket.seconds // self.budget_period.seconds)

    @property
    def effective_forgery_fraction(self) -> Fraction:
        """:attr:`forgery_fraction`, or the default (0.01) when the definition gives none."""
        given = self.forgery_fraction
        return DEFAULT_FORGERY_FRACTION if given is None else Fraction(given)

    def parameters(self) -> dict[str, Any]:
        """Everything that changes what a report means (the fingerprint's input)."""
        params: dict[str, Any] = {
            "protocol": 1,
            "name": self.name,
            "kind": self.kind.value,
            "mechanism": self.resolved_mechanism,
            "epsilon": self.epsilon,
            "bucket": self.bucket.value,
        }
        # Dimensions as pairs: their order numbers the cells, and the canonical JSON sorts
        # object keys.
        for key in (
            "categories",
            "ordered",
            "score",
            "band",
            "scores",
            "bounds",
            "delta",
            "dimensions",
        ):
            if getattr(self, key) != KIND_DEFAULTS[key]:
                params[key] = _plain(getattr(self, key))
        if self.kind_spec.mechanism_params:
            # Everything the mechanism was built with (resolution, tree, oracles, k, ...).
            params["mechanism_params"] = self._mechanism.params()
        return params

    @cached_property
    def fingerprint(self) -> str:
        """16 hex digits: SHA-256 of the canonical JSON of :meth:`parameters`."""
        canonical = json.dumps(self.parameters(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as served by ``GET /v1/metrics``."""
        data: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind.value,
            "mechanism": self.mechanism,
            "resolved_mechanism": self.resolved_mechanism,
            "epsilon": self.epsilon,
            "bucket": self.bucket.value,
            "budget": self.effective_budget,
            "budget_period": self.budget_period.value,
            "fingerprint": self.fingerprint,
            "report_size": self._mechanism.report_dtype.itemsize,
        }
        derived = self._mechanism.served_constants()
        if derived is not None:
            data["derived"] = derived
        if self.kind_spec.mechanism_params:
            # The fingerprint's own input, so that a client can check the fingerprint.
            data["mechanism_params"] = self._mechanism.params()
        # The kind's keys it was given, in KIND_KEYS order (no kind has both an oracle and
        # max_length or k, so resolved_oracle still follows oracle).
        unset = {
            **KIND_DEFAULTS,
            "resolved_oracle": (),
            "description": "",
            "forgery_fraction": None,
        }
        for key, default in unset.items():
            value = getattr(self, key)
            if value != default:
                data[key] = _plain(value)
        return data


VERIFY_TOLERANCE = 1e-9
"""Relative slack between a served float constant and the client's own (docs/protocol.md,
"Verification")."""


def _differences(path: str, served: Any, ours: Any, found: list[str]) -> None:
    """Append to ``found`` every leaf of ``served`` that is not ``ours``'s (see
    :meth:`MetricDefinition.served_differences`)."""
    if isinstance(ours, dict) and isinstance(served, dict):
        for key in sorted(set(ours) | set(served)):
            _differences(f"{path}.{key}", served.get(key), ours.get(key), found)
    elif isinstance(ours, list) and isinstance(served, list) and len(ours) == len(served):
        for i, (s, o) in enumerate(zip(served, ours, strict=True)):
            _differences(f"{path}[{i}]", s, o, found)
    elif not _same(served, ours):
        found.append(f"{path} = {json.dumps(served)} (computed {json.dumps(ours)})")


def _same(served: Any, ours: Any) -> bool:
    if isinstance(ours, float) and isinstance(served, int | float) and not isinstance(served, bool):
        return abs(served - ours) <= VERIFY_TOLERANCE * max(abs(ours), 1e-300)
    return type(served) is type(ours) and served == ours


def _plain(value: Any) -> Any:
    """A definition's field as JSON: tuples, nested ones too, as lists (``dimensions`` stay
    pairs: a stored JSON object would be key-sorted)."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _tuple(value: Any) -> Any:
    """A list (TOML, JSON) as a tuple, as a definition holds it; anything else as given."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _check_keys(name: str, data: object) -> None:
    if not isinstance(data, dict):
        raise ParameterError(f"metric {name}: definition must be a table/object")
    unknown = sorted(set(data) - set(DEFINITION_KEYS))
    if unknown:
        raise ParameterError(f"metric {name}: unknown keys {', '.join(unknown)}")
    if "name" in data and data["name"] != name:
        raise ParameterError(f"metric {name}: name in body {shown(data['name'])} differs")
    if "epsilon" not in data:
        raise ParameterError(f"metric {name}: epsilon is required")
