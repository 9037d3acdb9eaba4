"""Numeric metrics: a number in bounds; answered with its mean. :class:`Numbers` is what
every kind of a number shares (distributions too): the device's check and encoding."""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._json import finite_or_none
from .._validation import check_bounds, check_delta
from ..aggregate import Aggregate
from ..errors import ParameterError
from ..estimates import MeanEstimate
from ..mechanisms import APPROXIMATE, choose
from . import render
from .base import Built, Campaign, Definition, KindSpec, Question, fail, make, refuse, sums_json


class Numbers(KindSpec):
    """A number, clipped to the definition's bounds on the device."""

    checks_values: ClassVar[bool] = True

    def encode(self, definition: Definition, value: object) -> tuple[Any, bool]:
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

    def encode_many(self, definition: Definition, values: Any) -> npt.NDArray[Any]:
        array = np.asarray(values)
        if array.ndim != 1:
            raise ParameterError(
                f"metric {definition.name} takes a 1-D array of numbers, got {array.shape}"
            )
        if array.dtype.kind not in "iuf":  # encode() names the first value it refuses
            return super().encode_many(definition, array.tolist())
        x = array.astype(np.float64)
        bad = ~np.isfinite(x)
        if bool(np.any(bad)):
            refuse(self, definition, x, int(np.argmax(bad)))
        assert definition.bounds is not None
        return np.clip(x, *definition.bounds) + 0.0

    def as_array(self, encoded: Sequence[Any]) -> npt.NDArray[Any]:
        return np.asarray(encoded, dtype=np.float64)

    def value_key(self, encoded: Any) -> bytes:
        return struct.pack("<d", float(encoded))


def checked_bounds(definition: Definition) -> tuple[float, float]:
    if definition.bounds is None:
        raise fail(definition, f"{definition.kind} metrics need bounds [lo, hi]")
    try:
        return check_bounds(definition.bounds)
    except ParameterError as exc:
        raise fail(definition, str(exc)) from None


def span(definition: Definition) -> str:
    assert definition.bounds is not None
    return f"[{definition.bounds[0]:g}, {definition.bounds[1]:g}]"


class Numeric(Numbers):
    mechanism_params: ClassVar[bool] = False
    robust_columns: ClassVar[tuple[str, ...]] = (
        "robust_mean",
        "robust_low",
        "robust_high",
        "robust_forgery_shift",
    )
    """A robust answer's ``robust`` (``est.robust(beta).to_dict(level)``), as columns."""

    def build(self, definition: Definition) -> Built:
        bounds = checked_bounds(definition)
        try:
            delta = check_delta(definition.delta)
        except ParameterError as exc:
            raise fail(definition, str(exc)) from None
        name = definition.mechanism
        if name == "auto":
            name = choose(epsilon=definition.epsilon, bounds=bounds, delta=delta).name
        options: dict[str, Any] = {"bounds": bounds}
        if name in APPROXIMATE:  # (epsilon, delta)-LDP
            if delta == 0.0:
                raise fail(definition, f"mechanism {name!r} needs delta > 0 (e.g. delta = 1e-6)")
            options["delta"] = delta
        elif delta > 0.0 and definition.mechanism != "auto":
            raise fail(definition, f"mechanism {name!r} is pure epsilon-LDP: it takes no delta")
        return Built(make(definition, name, **options), {"bounds": bounds, "delta": delta})

    def answer(self, definition: Definition, aggregate: Aggregate, q: Question) -> dict[str, Any]:
        mechanism: Any = definition.mechanism_instance
        estimate = mechanism.estimate(aggregate)
        assert isinstance(estimate, MeanEstimate)
        low, high = estimate.ci(q.level)
        robust = estimate.robust(q.forgery_fraction).to_dict(q.level) if q.robust else None
        return {
            "n": estimate.n,
            "sums": sums_json(aggregate),
            "interval": estimate.interval_method(q.level) if estimate.n else None,
            "mean": finite_or_none(estimate.mean),
            "clamped_mean": finite_or_none(estimate.clamped_mean),
            "stderr": finite_or_none(estimate.stderr),
            "low": finite_or_none(float(low)),
            "high": finite_or_none(float(high)),
            "forgery_shift": finite_or_none(estimate.forgery_shift(q.forgery_fraction)),
            "beyond_bounds": estimate.beyond_bounds(q.level),
            **({"robust": robust} if q.robust else {}),
        }

    def answer_items(self, definition: Definition, options: Mapping[str, Any]) -> int:
        return 1

    def forgery_shifts(self, definition: Definition, beta: float) -> dict[str, float]:
        return {"the mean": self.empty_estimate(definition).forgery_shift(beta)}

    def campaign(self, definition: Definition) -> Campaign:
        return Campaign(definition.resolved_mechanism, definition.epsilon, bounds=definition.bounds)

    def describe(self, definition: Definition) -> str:
        return span(definition) + (f", delta {definition.delta:g}" if definition.delta else "")

    def columns(
        self, consistent: bool, dimensions: Sequence[str], robust: bool = False
    ) -> list[str]:
        shift = ["forgery_shift", "beyond_bounds"]
        robust_ = self.robust_columns if robust else ()
        return ["mean", "clamped_mean", "stderr", "low", "high", *shift, *robust_, "interval"]

    def rows(self, part: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
        return [{c: getattr(part, c) for c in columns}]

    def index(self, dimensions: Sequence[str]) -> list[str]:
        return []

    def text(self, result: Any, table: list[str]) -> list[str]:
        side = result.beyond_bounds
        return table if side is None else [*table, beyond_bounds_sentence(side, result.level)]

    def plot(self, result: Any, plt: Any) -> Any:
        """The mean as a point with its interval."""
        fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(result.items) + 2), 4))
        if result.mean is not None:
            low = result.mean - (result.low if result.low is not None else result.mean)
            high = (result.high if result.high is not None else result.mean) - result.mean
            ax.errorbar(
                [result.metric],
                [result.mean],
                yerr=[[low], [high]],
                fmt="o",
                capsize=6,
                color="#4C78A8",
            )
        ax.set_ylabel("mean")
        ax.set_title(render.title(result), fontsize="medium")
        return fig

    def plot_over_time(self, result: Any, plt: Any) -> Any:
        fig, ax = plt.subplots(figsize=(8, 4))
        times = [b.start for b in result.buckets]
        ax.plot(times, render.nan([b.mean for b in result.buckets]), marker="o", label="mean")
        ax.fill_between(
            times,
            render.nan([b.low for b in result.buckets]),
            render.nan([b.high for b in result.buckets]),
            alpha=0.2,
        )
        ax.set_ylabel("mean")
        render.time_axis(fig, ax, result)
        return fig


def beyond_bounds_sentence(side: str, level: float) -> str:
    """What an interval wholly beyond the bounds (``side``: ``"upper"``, ``"lower"``) means."""
    where = "above" if side == "upper" else "below"
    return (
        f"beyond the bounds: the {level:.0%} interval lies wholly {where} the metric's bounds; "
        "no population of values within them gives such reports but by chance (probability "
        f"about {(1 - level) / 2:.2g}): forged reports are the likely cause"
    )


SPEC = Numeric("numeric", ("bounds", "delta"))
