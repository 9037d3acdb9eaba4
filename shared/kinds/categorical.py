"""Categorical metrics: one of a list of categories; answered with each one's fraction."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..aggregate import Aggregate
from ..errors import ParameterError, QueryError
from ..estimates import FrequencyEstimate
from ..mechanisms import FrequencyOracle, Mechanism, choose, mechanism_class
from .base import (
    Built,
    Campaign,
    Definition,
    KindSpec,
    Question,
    RawJSON,
    check_categories,
    fail,
    json_numbers,
    make,
    most_common_fields,
    refuse,
    sums_json,
)

SCORE_KEYS = ("score", "band", "scores")
"""The definition keys of a score (the exponential mechanism's): checked by the mechanism."""
ROBUST_COLUMNS = ("robust", "robust_low", "robust_high", "robust_forgery_shift")
"""A robust answer's item fields: ``est.robust(beta)``'s estimate, interval and shift."""
ESTIMATORS = ("inversion", "ml")
"""The query's ``estimator``: the mechanism's unbiased one (the default), or the
constrained maximum likelihood with profile intervals (grr, rr and exponential)."""


class Categorical(KindSpec):
    checks_values: ClassVar[bool] = True
    mechanism_params: ClassVar[bool] = False
    robust_columns: ClassVar[tuple[str, ...]] = ROBUST_COLUMNS
    simultaneous_intervals: ClassVar[bool] = True  # all items together (Bonferroni)

    def build(self, definition: Definition) -> Built:
        categories = check_categories(definition)
        d = len(categories)
        ordered = _ordered(definition)
        given = {k: v for k in SCORE_KEYS if (v := getattr(definition, k)) is not None}
        name = definition.mechanism
        if name == "auto":
            try:
                name = choose(
                    epsilon=definition.epsilon, domain_size=d, ordered=ordered, scored=given
                ).name
            except ParameterError as exc:
                raise fail(definition, str(exc)) from None
        cls = mechanism_class(name)
        # auto weighed the score with the mechanisms that take one; another it chose is
        # made without it, and the definition keeps it (as given) to weigh it again.
        own = cls.takes_score or definition.mechanism != "auto"
        try:
            fields = cls.score_fields(ordered, given if own else {})
        except ParameterError as exc:
            raise fail(definition, str(exc)) from None
        kept = fields if own else _as_given(given)
        mechanism = make(definition, name, domain_size=d, **fields)
        if ordered and _rank_variance(mechanism) is None:
            raise fail(
                definition,
                f"ordered categories need a mechanism whose mean rank has a known variance; "
                f"{name!r} has none (use grr, sue, oue, ss, hr, exponential or auto)",
            )
        normalised = {"categories": categories, "ordered": True if ordered else None}
        return Built(mechanism, normalised | dict.fromkeys(SCORE_KEYS) | kept)

    def encode(self, definition: Definition, value: object) -> tuple[Any, bool]:
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

    def encode_many(self, definition: Definition, values: Any) -> npt.NDArray[Any]:
        index = definition.category_index
        found = [index.get(v) if isinstance(v, str) else None for v in values]
        if None in found:
            refuse(self, definition, values, found.index(None))
        return np.array(found, dtype=np.int64)

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        """``estimator``: ``inversion`` (the default) or ``ml``."""
        given = query.get("estimator")
        if not given:
            return {}
        if given not in ESTIMATORS:
            raise QueryError("estimator", f"expected inversion or ml, got {given[:40]!r}")
        return {"estimator": given}

    def answer_seconds(self, definition: Definition, options: Mapping[str, Any]) -> float:
        """``estimator=ml``: the fit and its 2d profile ends (:func:`ml_seconds`); 0 where
        it cannot be served (too many items, reports not counts of outputs): the answer
        refuses it for that reason, which narrowing the query would not mend."""
        from ..mechanisms._profile import MAX_ML_ITEMS, ml_seconds

        d = len(definition.categories or ())
        if options.get("estimator") != "ml" or d > MAX_ML_ITEMS:
            return 0.0
        oracle = definition.mechanism_instance
        if not isinstance(oracle, FrequencyOracle) or oracle.report_channel() is None:
            return 0.0
        return ml_seconds(d)

    def answer(self, definition: Definition, aggregate: Aggregate, q: Question) -> dict[str, Any]:
        """The answer, its ``items`` written as JSON text directly: at d = 1024 they are
        most of it, several times faster so than dicts through ``json.dumps``. With
        ``estimator=ml`` the items are the maximum-likelihood estimate's (profile
        intervals); the mean rank, the shares, the most common and a robust answer are
        the inversion estimate's (docs/kinds/categorical.md)."""
        mechanism: Any = definition.mechanism_instance
        estimate = mechanism.estimate(aggregate)
        assert isinstance(estimate, FrequencyEstimate) and definition.categories is not None
        ml = _ml(mechanism, aggregate, q) if q.options.get("estimator") == "ml" else None
        items = ml if ml is not None else estimate  # the items' estimates
        columns = _columns(items, q)
        sim = q.simultaneous
        methods = items.interval_methods(q.level, simultaneous=sim) if items.n else None
        answer: dict[str, Any] = {
            "n": items.n,
            "sums": sums_json(aggregate),
            "interval": items.interval_method(q.level, simultaneous=sim) if items.n else None,
        }
        if ml is not None:
            answer["estimator"] = "ml"
        if definition.ordered:
            answer["mean_rank"] = mechanism.mean_rank(estimate).to_dict(q.level)
            shares = mechanism.shares_at_least(estimate, q.level, simultaneous=sim)
            answer["at_least"] = shares.labelled(definition.categories)
        if q.robust:
            robust = estimate.robust(q.forgery_fraction)
            answer["robust"] = {
                "forgery_fraction": robust.beta,
                "forged_reports": robust.forged,
                "level": q.level,
                "simultaneous": sim,
            }
            low, high = robust.ci(q.level, simultaneous=sim)
            values = (robust.frequencies, low, high, robust.forgery_shift())
            for name, value in zip(ROBUST_COLUMNS, values, strict=True):
                columns[name] = np.asarray(value, dtype=np.float64)
        answer["items"] = _items(definition.categories, columns, methods)
        answer["most_common"] = most_common_fields(estimate, definition.categories, q.level)
        return answer

    def describe(self, definition: Definition) -> str:
        plain = super().describe(definition)
        return f"{plain}, ordered" if definition.ordered else plain

    def served_fields(self, data: Mapping[str, Any], item: Callable[[Any], Any]) -> dict[str, Any]:
        """The ``mean_rank`` and ``at_least`` shares of ordered categories (absent
        otherwise)."""
        rank, shares = data.get("mean_rank"), data.get("at_least")
        fields: dict[str, Any] = {"mean_rank": dict(rank)} if isinstance(rank, Mapping) else {}
        if isinstance(shares, list):
            fields["at_least"] = tuple(dict(s) for s in shares if isinstance(s, Mapping))
        return fields

    def text(self, result: Any, table: list[str]) -> list[str]:
        """The items' table, then the mean rank and the shares "k or later" of ordered
        categories."""
        rank = getattr(result, "mean_rank", None)
        if not rank or rank.get("estimate") is None:
            return table
        return [*table, _rank_line(rank, result.level, result.n), *_share_lines(result)]

    def campaign(self, definition: Definition) -> Campaign:
        return Campaign(
            definition.resolved_mechanism,
            definition.epsilon,
            domain_size=len(definition.categories or ()),
        )


def _rank_line(rank: Mapping[str, Any], level: float, n: int) -> str:
    """``mean rank 3.410 (categories ranked ...), 95% interval [3.30, 3.52], stderr 0.057``."""
    low, high = rank.get("low"), rank.get("high")
    within = (
        "" if low is None or high is None else f", {level:.0%} interval [{low:.2f}, {high:.2f}]"
    )
    return (
        f"mean rank {rank['estimate']:.3f} (categories ranked 1 .. d in their order){within}, "
        f"stderr {rank.get('stderr') or 0:.3f}"
    )


def _share_lines(result: Any) -> list[str]:
    """``share at least 4: 0.600, 95% interval [0.55, 0.65], stderr 0.024`` per category
    but the first (``together`` when the intervals are simultaneous)."""
    together = " (together)" if getattr(result, "simultaneous", False) else ""
    lines = []
    for share in getattr(result, "at_least", None) or ():
        if share.get("estimate") is None:
            continue
        low, high = share.get("low"), share.get("high")
        within = (
            ""
            if low is None or high is None
            else f", {result.level:.0%} interval{together} [{low:.3f}, {high:.3f}]"
        )
        lines.append(
            f"share at least {share['category']}: {share['estimate']:.3f}{within}, "
            f"stderr {share.get('stderr') or 0:.3f}"
        )
    return lines


def _as_given(given: Mapping[str, Any]) -> dict[str, Any]:
    """Score keys as the definition holds them: ``scores`` as rows of floats (a choice of
    ``auto`` weighed them already, so they are numbers)."""
    rows = given.get("scores")
    if rows is None:
        return dict(given)
    return dict(given) | {"scores": tuple(tuple(float(v) for v in row) for row in rows)}


def _ordered(definition: Definition) -> bool:
    given: object = definition.ordered
    if given is not None and not isinstance(given, bool):
        raise fail(definition, f"ordered must be true or false, got {given!r}")
    return bool(given)


def _ml(mechanism: Any, aggregate: Aggregate, q: Question) -> FrequencyEstimate:
    """The maximum-likelihood estimate (QueryError where it does not apply)."""
    from ..mechanisms._profile import ml_frequencies

    if q.robust:
        raise QueryError(
            "estimator", "robust estimates are of the inversion estimate: ask one or the other"
        )
    try:
        return ml_frequencies(mechanism, aggregate)
    except ParameterError as exc:
        raise QueryError("estimator", str(exc)) from None


def _rank_variance(mechanism: Mechanism) -> float | None:
    return mechanism.rank_variance() if isinstance(mechanism, FrequencyOracle) else None


def _columns(estimate: FrequencyEstimate, q: Question) -> dict[str, npt.NDArray[np.float64]]:
    """Each item's estimate, stderr, low, high, forgery_shift and, if asked, consistent
    estimate, by their names in the answer."""
    low, high = estimate.ci(q.level, simultaneous=q.simultaneous)
    columns = {
        "estimate": estimate.frequencies,
        "stderr": estimate.stderr,
        "low": low,
        "high": high,
        "forgery_shift": estimate.forgery_shift(q.forgery_fraction),
    }
    if q.consistent:
        columns["consistent"] = estimate.consistent()
    return {k: np.asarray(c, dtype=np.float64) for k, c in columns.items()}


@functools.lru_cache(maxsize=256)
def _quoted(categories: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(json.dumps(c) for c in categories)


def _items(
    cats: tuple[str, ...],
    columns: Mapping[str, npt.NDArray[np.float64]],
    methods: npt.NDArray[np.str_] | None = None,
) -> RawJSON:
    """The ``items`` list as JSON text: each item's ``category``, then its value of each
    of the ``columns`` by name; ``methods`` names each item's interval method."""
    tails = (
        [f',"interval":"{m}"}}' for m in methods.tolist()]
        if methods is not None
        else ["}"] * len(cats)
    )
    item = '{"category":%s' + "".join(f',"{name}":%s' for name in columns) + "%s"
    cells = [_numbers(c) for c in columns.values()]
    parts = [item % values for values in zip(_quoted(cats), *cells, tails, strict=True)]
    return RawJSON("[" + ",".join(parts) + "]")


def _numbers(column: npt.NDArray[np.float64]) -> list[str]:
    """:func:`json_numbers`, written once for a column of one value (a forgery shift)."""
    if column.size and bool(np.all(column == column[0])):
        return json_numbers(column[:1]) * column.size
    return json_numbers(column)


SPEC = Categorical("categorical", ("categories", "ordered", *SCORE_KEYS), ("estimator",))
