"""Distribution metrics (issue 15): a number whose answer is its distribution (a
hierarchical histogram): bins, quantiles, a range's fraction and the mean."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from itertools import pairwise
from numbers import Integral
from typing import Any, ClassVar

import numpy as np

from .._json import finite_or_none
from .._validation import shown
from ..aggregate import Aggregate
from ..distribution import ESTIMANDS, POPULATION, REPORTERS
from ..errors import ParameterError, QueryError
from ..mechanisms import choose
from . import render
from .base import (
    Built,
    Cost,
    Definition,
    KindPlan,
    PlanTarget,
    Question,
    fail,
    make,
    most_common_fields,
    query_integer,
    query_numbers,
)
from .numeric import Numbers, checked_bounds, span

DEFAULT_RESOLUTION = 1024
PREPARE_4096 = (1.5, 120.0)
"""CPU seconds and peak MiB of preparing a distribution of 4,096 leaves (the most) at worst,
measured by ``benchmarks/estimates_load.py --costs``."""


class Distribution(Numbers):
    hidden: ClassVar[frozenset[str]] = frozenset({"lower", "upper"})  # a bin reads "[a, b)"
    maintained: ClassVar[bool] = True  # a quantile's or a range's variances: about a second
    simultaneous_intervals: ClassVar[bool] = True  # all bins together (Bonferroni)

    def prepare(self, definition: Definition, aggregate: Aggregate) -> Any:
        """The estimate with what quantiles and ranges read computed (they are cached)."""
        estimate = super().prepare(definition, aggregate)
        lo, hi = estimate.bounds
        warm = Question(options={"quantiles": [0.5], "range_": (lo, hi)})
        self.fields(definition, estimate, warm)
        return estimate

    def cost(self, definition: Definition) -> Cost:
        own = definition.mechanism_instance.preparation_cost()  # (square wave: EMS's)
        if own is not None:
            return Cost(*own)
        share = (definition.resolution or DEFAULT_RESOLUTION) / 4096
        seconds, mib = PREPARE_4096
        return Cost(
            0.05 + seconds * share,
            (40.0 + mib * share) * 2**20,
            f"preparing a distribution of {definition.resolution} leaves",
        )

    def build(self, definition: Definition) -> Built:
        bounds = checked_bounds(definition)
        resolution: object = definition.resolution  # from TOML/JSON it may be anything
        if resolution is None:
            resolution = DEFAULT_RESOLUTION
        if isinstance(resolution, bool) or not isinstance(resolution, Integral):
            raise fail(definition, f"resolution must be an integer, got {shown(resolution)}")
        leaves = int(resolution)
        name = definition.mechanism
        if name == "auto":
            try:
                name = choose(epsilon=definition.epsilon, bounds=bounds, resolution=leaves).name
            except ParameterError as exc:
                raise fail(definition, str(exc)) from None
        mechanism = make(definition, name, bounds=bounds, resolution=leaves)
        return Built(mechanism, {"bounds": bounds, "resolution": leaves})

    def parse_options(self, query: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if query.get("bins"):
            out["bins"] = query_integer(query["bins"], "bins")
        if query.get("edges"):
            if "bins" in out:
                raise QueryError("edges", "give bins or edges, not both")
            out["edges"] = query_numbers(query["edges"], "edges", minimum=2)
        if query.get("quantiles"):
            out["quantiles"] = query_numbers(query["quantiles"], "quantiles")
        if query.get("range"):
            pair = query_numbers(query["range"], "range", minimum=2)
            if len(pair) != 2:
                raise QueryError("range", "expected two numbers: lower,upper")
            out["range_"] = (pair[0], pair[1])
        if query.get("estimand"):
            if query["estimand"] not in ESTIMANDS:
                raise QueryError(
                    "estimand", f"expected one of {', '.join(ESTIMANDS)}, got {query['estimand']!r}"
                )
            out["estimand"] = query["estimand"]
        return out

    def fields(self, definition: Definition, estimate: Any, q: Question) -> dict[str, Any]:
        try:
            data: dict[str, Any] = estimate.to_dict(
                q.level, simultaneous=q.simultaneous, **q.options
            )
        except ParameterError as exc:  # blame the parameter the message names first
            message = str(exc)
            named = [(message.find(p), p) for p in ("edges", "bins", "range", "q") if p in message]
            param = min(named)[1] if named else "edges"
            raise QueryError("quantiles" if param == "q" else param, message) from None
        data["interval"] = data["methods"]["items"]
        _add_shifts(estimate, data, q)
        data["most_common"] = _most_common(estimate, q)
        return data

    def answer_items(self, definition: Definition, options: Mapping[str, Any]) -> int:
        edges = options.get("edges")
        return len(edges) - 1 if edges else int(options.get("bins") or 16)

    def plan(self, definition: Definition, target: PlanTarget) -> KindPlan:
        from ..distribution_plan import plan_distribution, required_n_distribution

        assert definition.bounds is not None and definition.resolution is not None
        mechanism: Any = definition.mechanism_instance
        if not mechanism.serves_intervals:
            raise ParameterError(
                f"metric {definition.name!r}: {mechanism.name} answers have no interval "
                "(docs/statistics.md), so there is no half-width to plan; plan it with "
                'mechanism = "hh" to see what intervals n reports would give'
            )
        common: dict[str, Any] = {
            "epsilon": definition.epsilon,
            "bounds": definition.bounds,
            "resolution": definition.resolution,
            "level": target.level,
            "estimand": target.estimand,
        }
        p = target.by(
            lambda n: plan_distribution(n=n, **common),
            lambda half_width: required_n_distribution(half_width=half_width, **common),
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
            f"  range fraction (score interval, estimand {p.estimand}: about "
            f"{_WHOSE[p.estimand]}):",
            f"    {p.level:.0%} half-width <= {p.half_width:.4g} whatever the data (ends on "
            f"leaf edges; its skewness term {p.skew_widening:.2g} included)",
            f"    typical {p.typical_half_width:.4g} (values spread evenly; ends inside a "
            "leaf widen it)",
            f"  quantile {p.quantile:g}: half-width about {p.quantile_half_width:.4g} "
            f"(units of the metric, values spread evenly)",
        )
        return KindPlan(lines, p)

    def forgery_shifts(self, definition: Definition, beta: float) -> dict[str, float]:
        """The mean's, a bin's of the default 16 and a half's (quantiles: from the data)."""
        e = self.empty_estimate(definition)
        lo, hi = e.bounds
        return {
            "the mean": e.mean().forgery_shift(beta),
            "each of 16 equal bins": float(np.max(e.histogram(16).forgery_shift(beta))),
            "the fraction below the middle": e.range_shift(lo, (lo + hi) / 2, beta),
        }

    def describe(self, definition: Definition) -> str:
        return f"{span(definition)}, {definition.resolution} leaves"

    def served_fields(self, data: Mapping[str, Any], item: Callable[[Any], Any]) -> dict[str, Any]:
        level, fraction = float(data.get("level", 0.95)), data.get("forgery_fraction")
        found = data.get("range")
        bounds = data.get("bounds")
        return {
            "quantiles": tuple(
                _quantile(q, level, fraction, data.get("estimand"))
                for q in data.get("quantiles") or ()
            ),
            "range": item(found) if isinstance(found, dict) else None,
            "bounds": (float(bounds[0]), float(bounds[1])) if bounds else None,
            "estimand": data.get("estimand"),
        }

    def columns(
        self, consistent: bool, dimensions: Sequence[str], robust: bool = False
    ) -> list[str]:
        return ["category", "lower", "upper", *render.NUMBERS]

    def frame(self, frame: Any, dimensions: Sequence[str]) -> Any:
        import pandas as pd

        frame.index = pd.IntervalIndex.from_arrays(
            frame["lower"], frame["upper"], closed="left", name="bin"
        )
        return frame.drop(columns=["category"])

    def text(self, result: Any, table: list[str]) -> list[str]:
        if result.interval == NO_INTERVAL:
            return _point_text(result, table)
        pct, fmt = f"{result.level:.0%}", render.fmt
        whose = _WHOSE.get(result.estimand or "", _WHOSE[POPULATION])
        lines = [
            *table,
            f"intervals (bins, range, mean, quantiles): about {whose} "
            f"(estimand {result.estimand or 'population'})",
            "",
            f"mean {fmt(result.mean)} (stderr {fmt(result.stderr)}), {pct} interval "
            f"[{fmt(result.low)}, {fmt(result.high)}]{_shifted(result.forgery_shift)}",
        ]
        for q in result.quantiles:
            shift = q.forgery_shift(result.forgery_fraction) if result.forgery_fraction else None
            lines.append(
                f"quantile {q.q:g}: {q.value:.4g}, {pct} interval [{q.low:.4g}, {q.high:.4g}]"
                + _shifted(shift)
            )
        if result.range is not None:
            r = result.range
            lines.append(
                f"fraction in {r.category}: {fmt(r.estimate)} (stderr {fmt(r.stderr)}), "
                f"{pct} interval [{fmt(r.low)}, {fmt(r.high)}]{_shifted(r.forgery_shift)}"
            )
        return lines

    def plot(self, result: Any, plt: Any) -> Any:
        """The bins as bars on the bounds axis, whiskers at their middles, the quantiles as
        lines with their intervals shaded, the mean in the title."""
        fig, ax = plt.subplots(figsize=(8, 4))
        _bins(ax, result)
        for q in result.quantiles:
            if math.isfinite(q.low) and math.isfinite(q.high):
                ax.axvspan(q.low, q.high, color="#F58518", alpha=0.12, zorder=0)
            ax.axvline(q.value, color="#F58518", linewidth=2)
            ax.annotate(
                f"p{q.q * 100:g}",
                (q.value, 1.0),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="bottom",
                color="#F58518",
                fontsize="small",
            )
        ax.axhline(0.0, color="grey", linewidth=0.8)
        if result.bounds is not None:
            ax.set_xlim(*result.bounds)
        ax.set_xlabel(result.metric)
        ax.set_ylabel("fraction of users")
        render.set_legend(ax, result, loc="upper right", fontsize="small")
        mean = render.wrapped(render.set_line(result), fig)
        if result.mean is not None and result.low is not None and result.high is not None:
            mean = f"\nmean {result.mean:.4g} [{result.low:.4g}, {result.high:.4g}]" + mean
        elif result.mean is not None:
            mean = f"\nmean {result.mean:.4g} ({NO_INTERVAL_TEXT})" + mean
        ax.set_title(render.title(result) + mean, fontsize="medium", pad=14)  # room for "p50"
        return fig

    def plot_over_time(self, result: Any, plt: Any) -> Any:
        """The mean and the quantiles asked per bucket with their intervals, above a bucket
        x bin heat map of the bins' estimates (not one line per bin)."""
        fig, (top, bottom) = plt.subplots(
            2, 1, figsize=(9, 8.5), gridspec_kw={"height_ratios": [1, 1.3]}
        )
        _summary_over_time(top, result)
        if any(b.items for b in result.buckets):
            render.heat_over_time(fig, bottom, result, f"{result.metric} (bin)")
        top.set_xlabel("bucket start (UTC)")
        times = [b.start for b in result.buckets]
        every = max(1, len(times) // 8)  # the buckets' own starts as ticks, at most 8
        top.set_xticks(times[::every], [render.bucket_name(t) for t in times[::every]])
        for label in top.get_xticklabels():
            label.set_rotation(20)
            label.set_horizontalalignment("right")
        return fig


def _summary_over_time(ax: Any, result: Any) -> None:
    """The mean and each quantile per bucket: points on lines, whiskers and bands for their
    intervals, side by side in a bucket so that none hides another."""
    buckets = [b for b in result.buckets if b.mean is not None]
    times = [b.start for b in buckets]
    series = {"mean": [(b.mean, b.low, b.high) for b in buckets]}
    for k, q in enumerate(result.quantiles):
        series[f"p{q.q * 100:g}"] = [
            (b.quantiles[k].value, b.quantiles[k].low, b.quantiles[k].high)
            if k < len(b.quantiles)
            else (None, None, None)
            for b in buckets
        ]
    step = _step(times) * 0.05
    colours = render.palette(len(series))
    for k, ((name, rows), colour) in enumerate(zip(series.items(), colours, strict=True)):
        x = [t + (k - (len(series) - 1) / 2) * step for t in times]
        value, low, high = (render.nan([r[j] for r in rows]) for j in range(3))
        ax.plot(x, value, marker="o", color=colour, label=name, zorder=3)
        ax.vlines(x, low, high, color=colour, linewidth=1.5, zorder=2)
        if len(times) > 1:
            ax.fill_between(x, low, high, color=colour, alpha=0.12, linewidth=0)
    ax.set_ylabel(result.metric)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    what = "mean and quantiles" if result.quantiles else "mean (ask for quantiles: --quantiles)"
    ax.set_title(
        render.title(result) + f"\n{what} per bucket, {result.level:.0%} intervals",
        fontsize="medium",
    )


NO_INTERVAL = "none"
"""The answer's ``interval`` when its mechanism serves point estimates only (square wave)."""
NO_INTERVAL_TEXT = "no interval: square wave + EMS is a smoothed estimate"


def _point_text(result: Any, table: list[str]) -> list[str]:
    """The text of an answer without intervals: the point estimates and why."""
    fmt = render.fmt
    raw = result.raw if isinstance(result.raw, dict) else {}
    lines = [*table, raw.get("note") or NO_INTERVAL_TEXT, ""]  # the served note says it
    # EMS stopped at its step limit: said first, in the total or in any bucket.
    found = [raw.get("warning"), *(b.get("warning") for b in raw.get("buckets") or ())]
    warned = [w for w in found if w]
    if warned:
        more = f" (and {len(warned) - 1} more answers)" if len(warned) > 1 else ""
        lines[:0] = [f"WARNING: {warned[0]}{more}", ""]
    lines.append(f"mean {fmt(result.mean)} (no interval)")
    lines += [f"quantile {q.q:g}: {q.value:.4g} (no interval)" for q in result.quantiles]
    if result.range is not None:
        r = result.range
        lines.append(f"fraction in {r.category}: {fmt(r.estimate)} (no interval)")
    return lines


_WHOSE = {
    REPORTERS: "the reporting users' own values",
    POPULATION: "the population the users were drawn from",
}


def _step(times: Sequence[Any]) -> Any:
    """The shortest gap between buckets (a day if there is one bucket)."""
    gaps = [b - a for a, b in pairwise(times)]
    return min(gaps) if gaps else timedelta(days=1)


def _add_shifts(estimate: Any, data: dict[str, Any], q: Question) -> None:
    """Each bin's, the mean's, each quantile's and the range's ``forgery_shift`` (the
    mean's as ``mean_forgery_shift``, beside ``mean_low``/``mean_high``)."""
    beta, items = q.forgery_fraction, data["items"]
    lower, upper = (np.array([i[end] for i in items]) for end in ("lower", "upper"))
    for item, shift in zip(items, estimate.range_shift(lower, upper, beta), strict=True):
        item["forgery_shift"] = finite_or_none(float(shift))
    data["mean_forgery_shift"] = finite_or_none(estimate.mean().forgery_shift(beta))
    for quantile in data.get("quantiles", ()):
        quantile["forgery_shift"] = finite_or_none(estimate.quantile_shift(quantile["q"], beta))
    if "range" in data:
        shift = estimate.range_shift(*q.options["range_"], beta)
        data["range"]["forgery_shift"] = finite_or_none(shift)


def _shifted(shift: float | None) -> str:
    return "" if shift is None or math.isnan(shift) else f", forgery shift {shift:.4g}"


def _quantile(
    data: Mapping[str, Any], level: float, fraction: float | None, estimand: str | None
) -> Any:
    """A served quantile; its ``forgery_shift`` the served one, at the served fraction."""
    from ..distribution import QuantileEstimate

    keys = ("value", "low", "high", "forgery_shift")
    value, low, high, shift = render.nan([data.get(k) for k in keys])
    served = None if fraction is None else partial(_served_shift, shift, fraction)
    return QuantileEstimate(
        float(data["q"]), value, low, high, level, estimand=estimand or REPORTERS, _shift=served
    )


def _served_shift(shift: float, fraction: float, beta: float) -> float:
    if beta != fraction:
        raise ParameterError(
            f"this answer disclosed the forgery shift of {fraction:g} forged reports only; "
            "the estimate's quantile_shift(q, beta) gives any other (result.estimate)"
        )
    return shift


def _bins(ax: Any, result: Any) -> None:
    bins = [i for i in result.items if i.lower is not None and i.upper is not None]
    lower = [float(i.lower) for i in bins]
    width = [float(i.upper) - float(i.lower) for i in bins]
    values = [i.estimate if i.estimate is not None else 0.0 for i in bins]
    ax.bar(
        lower,
        values,
        width=width,
        align="edge",
        color=render.set_colours(result, bins),  # a mode's set dark, the other bins light
        edgecolor="white",
        label="" if render.set_line(result) else "fraction in the bin",
    )
    middles = [lo + w / 2 for lo, w in zip(lower, width, strict=True)]
    render.whiskers(ax, middles, bins, label=f"{result.level:.0%} interval")


def _most_common(estimate: Any, q: Question) -> dict[str, Any] | None:
    """The bins' ``most_common`` (:func:`most_common_fields`, each bin named ``[lo, hi)``),
    for bins on leaf edges only (a bin that cuts a leaf is read within it, and biased)."""
    bins = estimate.histogram(q.options.get("bins"), edges=q.options.get("edges"))
    if not bins.aligned:
        return None
    names = [f"[{lo:g}, {hi:g})" for lo, hi in zip(bins.lower, bins.upper, strict=True)]
    return most_common_fields(bins, names, q.level, n=estimate.n)


SPEC = Distribution(
    "distribution", ("bounds", "resolution"), ("bins", "edges", "quantiles", "range", "estimand")
)
