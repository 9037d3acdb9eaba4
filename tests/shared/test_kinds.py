"""Metric definitions of every kind: what each accepts, refuses, and fingerprints."""

from __future__ import annotations

from typing import Any

import pytest

from ldpkit.errors import ParameterError
from ldpkit.kinds import KINDS, Question, kind_spec
from ldpkit.metrics import MetricDefinition

DIST: dict[str, Any] = {
    "kind": "distribution",
    "bounds": [0.0, 120.0],
    "resolution": 1024,
    "epsilon": 1.0,
    "mechanism": "auto",
    "bucket": "day",
}


def test_distribution_definition_round_trips_and_resolves_auto() -> None:
    d = MetricDefinition.from_dict("session_minutes_dist", DIST)
    assert d.resolved_mechanism == "hh" and d.resolution == 1024
    served = d.to_dict()
    assert served["resolution"] == 1024 and served["report_size"] == 21
    again = MetricDefinition.from_dict("session_minutes_dist", served)
    assert again.fingerprint == d.fingerprint
    default = MetricDefinition.from_dict("x", {k: v for k, v in DIST.items() if k != "resolution"})
    assert default.resolution == 1024


def test_the_fingerprint_covers_every_kind_parameter() -> None:
    base = MetricDefinition.from_dict("m", DIST).fingerprint
    assert MetricDefinition.from_dict("m", {**DIST, "resolution": 512}).fingerprint != base
    assert MetricDefinition.from_dict("m", {**DIST, "bounds": [0, 60]}).fingerprint != base


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"resolution": 1}, "resolution must be between 2 and 4096"),
        ({"resolution": 2.5}, "resolution must be an integer"),
        ({"resolution": True}, "resolution must be an integer"),
        ({"bounds": None}, "distribution metrics need bounds"),
        ({"bounds": [5, 1]}, "bounds"),
        ({"categories": ["a", "b"]}, "distribution metrics take no categories"),
        ({"delta": 1e-6}, "distribution metrics take no delta"),
        ({"mechanism": "oue"}, "does not fit a distribution metric|oue"),
        ({"kind": "histogram"}, "kind must be one of categorical, numeric, distribution"),
    ],
)
def test_distribution_definition_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        MetricDefinition.from_dict("m", {**DIST, **change})


def test_numeric_delta_and_the_gaussian_mechanism() -> None:
    spec = {"kind": "numeric", "bounds": [0.0, 10.0], "epsilon": 1.0}
    g = MetricDefinition.from_dict("m", {**spec, "mechanism": "gaussian", "delta": 1e-6})
    assert g.resolved_mechanism == "gaussian" and g.delta == 1e-6
    assert g.to_dict()["delta"] == 1e-6
    assert MetricDefinition.from_dict("m", g.to_dict()).fingerprint == g.fingerprint
    other = MetricDefinition.from_dict("m", {**spec, "mechanism": "gaussian", "delta": 1e-7})
    assert other.fingerprint != g.fingerprint
    # auto weighs the Gaussian only when delta > 0, and never finds it better (see choose)
    assert MetricDefinition.from_dict("m", {**spec, "delta": 1e-6}).resolved_mechanism != "gaussian"
    plain = MetricDefinition.from_dict("m", spec)
    assert plain.delta == 0.0 and "delta" not in plain.to_dict()
    with pytest.raises(ParameterError, match="needs delta > 0"):
        MetricDefinition.from_dict("m", {**spec, "mechanism": "gaussian"})
    with pytest.raises(ParameterError, match="takes no delta"):
        MetricDefinition.from_dict("m", {**spec, "mechanism": "laplace", "delta": 1e-6})
    for bad in (1.0, -1e-6, "1e-6", True):
        with pytest.raises(ParameterError, match="delta"):
            MetricDefinition.from_dict("m", {**spec, "mechanism": "gaussian", "delta": bad})


def test_devices_encode_values_of_each_kind() -> None:
    d = MetricDefinition.from_dict("m", DIST)
    assert d.kind_spec.encode(d, 200.0) == (120.0, True)
    assert d.kind_spec.encode(d, 42) == (42.0, False)
    for bad in ("42", None, float("nan"), True):
        with pytest.raises(ParameterError):
            d.kind_spec.encode(d, bad)


def test_every_kind_is_registered_under_its_name() -> None:
    for name, spec in KINDS.items():
        assert kind_spec(name) is spec and spec.name == name
    with pytest.raises(ParameterError, match="kind must be one of"):
        kind_spec("nope")


REGION: dict[str, Any] = {
    "kind": "hierarchy",
    "separator": "/",
    "categories": ["MX/Jalisco/Guadalajara", "MX/Jalisco/Zapopan", "MX/Sonora/Hermosillo"],
    "epsilon": 1.0,
}
CAR: dict[str, Any] = {
    "kind": "table",
    "epsilon": 1.0,
    "dimensions": {
        "type": ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"],
        "origin": ["USA", "non-USA"],
    },
}


def test_hierarchy_and_table_definitions_round_trip_through_stored_json() -> None:
    from ldpkit.collector.store import definition_from_json, definition_json

    for name, spec in (("region", REGION), ("car", CAR)):
        d = MetricDefinition.from_dict(name, spec)
        assert d.resolved_oracle  # auto's oracle, pinned in the stored form
        stored = definition_from_json(d.fingerprint, name, definition_json(d))
        assert stored is not None and stored.fingerprint == d.fingerprint
    car = MetricDefinition.from_dict("car", CAR)
    # the stored JSON sorts object keys: the dimensions keep their order as pairs
    assert [n for n, _ in car.to_dict()["dimensions"]] == ["type", "origin"]
    swapped = dict(reversed(list(CAR["dimensions"].items())))
    assert MetricDefinition.from_dict("car", {**CAR, "dimensions": swapped}).fingerprint != (
        car.fingerprint
    )


def test_structured_definitions_choose_and_pin_their_design() -> None:
    levels = MetricDefinition.from_dict("region", {**REGION, "mechanism": "levels"})
    assert levels.resolved_mechanism == "levels" and len(levels.resolved_oracle) >= 2
    rollup = MetricDefinition.from_dict(
        "region", {**REGION, "mechanism": "rollup", "oracle": "oue"}
    )
    assert rollup.resolved_oracle == ("oue",)
    assert rollup.fingerprint != MetricDefinition.from_dict("region", REGION).fingerprint
    focused = MetricDefinition.from_dict("region", {**REGION, "focus": [2]})
    assert focused.focus == (2,)
    joint = MetricDefinition.from_dict("car", {**CAR, "mechanism": "joint", "focus": ["cells"]})
    assert joint.resolved_mechanism == "joint"


@pytest.mark.parametrize(
    ("spec", "change", "message"),
    [
        (REGION, {"separator": ""}, "separator must be a non-empty string"),
        (REGION, {"categories": ["a/b", "a"]}, "is a leaf and also the parent"),
        (REGION, {"focus": ["cells"]}, "focus must be a list of depths"),
        (REGION, {"mechanism": "joint"}, "hierarchy takes mechanism"),
        (REGION, {"dimensions": {"a": ["x", "y"]}}, "hierarchy metrics take no dimensions"),
        (CAR, {"dimensions": None}, "table metrics need dimensions"),
        (CAR, {"dimensions": {"type": ["a", "b"]}}, "at least 2"),
        (CAR, {"dimensions": {"a": ["x", "x"], "b": ["y", "z"]}}, "distinct"),
        (CAR, {"dimensions": {"a": "xy", "b": ["y", "z"]}}, "needs a list of categories"),
        (CAR, {"categories": ["a", "b"]}, "table metrics take no categories"),
        (CAR, {"oracle": 3}, "oracle must be a name"),
    ],
)
def test_structured_definition_errors(
    spec: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ParameterError, match=message):
        MetricDefinition.from_dict("m", {**spec, **change})


def test_devices_encode_leaves_and_cells() -> None:
    region = MetricDefinition.from_dict("region", REGION)
    assert region.kind_spec.encode(region, "MX/Jalisco/Zapopan") == (1, False)
    car = MetricDefinition.from_dict("car", CAR)
    assert car.kind_spec.encode(car, {"origin": "USA", "type": "Van"}) == (10, False)
    for d, bad, message in (
        (region, "MX", "an inner node"),
        (region, None, "leaf path"),
        (car, {"type": "Van", "origin": "Mars"}, "not a category of origin"),
        (car, "Van", "a table value is a mapping"),
    ):
        with pytest.raises(ParameterError, match=message):
            d.kind_spec.encode(d, bad)


TERM: dict[str, Any] = {
    "kind": "strings",
    "max_length": 16,
    "k": 20,
    "epsilon": 4.0,
    "mechanism": "auto",
    "bucket": "day",
}


def test_strings_definition_and_k_in_the_fingerprint() -> None:
    d = MetricDefinition.from_dict("search_term", TERM)
    assert d.resolved_mechanism == "prefix_sketch" and (d.max_length, d.k) == (16, 20)
    assert MetricDefinition.from_dict("search_term", d.to_dict()).fingerprint == d.fingerprint
    assert MetricDefinition.from_dict("search_term", {**TERM, "k": 10}).fingerprint != (
        d.fingerprint
    )
    assert MetricDefinition.from_dict("t", {**TERM, "max_length": 8}).fingerprint != (
        MetricDefinition.from_dict("t", TERM).fingerprint
    )
    no_k = {key: v for key, v in TERM.items() if key != "k"}
    assert MetricDefinition.from_dict("t", no_k).k == 20


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_length": None}, "strings metrics need max_length"),
        ({"max_length": 0}, "max_length must be an integer in"),
        ({"max_length": 65}, "max_length must be an integer in"),
        ({"k": 0}, "k must be an integer in"),
        ({"k": 2.5}, "k must be an integer in"),
        ({"categories": ["a", "b"]}, "strings metrics take no categories"),
        ({"mechanism": "oue"}, "not a mechanism for strings"),
    ],
)
def test_strings_definition_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        MetricDefinition.from_dict("m", {**TERM, **change})


def test_devices_encode_strings_as_utf8_within_max_length() -> None:
    d = MetricDefinition.from_dict("m", TERM)
    spec = d.kind_spec
    assert spec.encode(d, "weather") == (b"weather", False)
    assert spec.encode(d, "ñ" * 8) == (("ñ" * 8).encode(), False)  # 16 bytes: fits
    assert spec.value_key(b"ab") != spec.value_key(b"a") and len(spec.value_key(b"")) == 4
    for bad, message in (("ñ" * 9, "18 bytes"), (b"raw", "takes a string"), (None, "string")):
        with pytest.raises(ParameterError, match=message):
            spec.encode(d, bad)
    reports = d.mechanism_instance.perturb(spec.encode_many(d, ["a", "weather", ""]))
    assert reports.shape == (3,)


@pytest.mark.parametrize("n", [1, 20, 300, 1000])
def test_strings_answer_small_campaigns(n: int) -> None:
    """At a few hundred reports the heavy total's estimate could push a level's null mean
    below zero, and the decoder failed on the square root of a negative variance."""
    import numpy as np

    d = MetricDefinition.from_dict("search_term", {**TERM, "k": 10})
    rng = np.random.default_rng(n)
    words = ["weather", "news", "maps", "translate", "música"] + [f"t{i}" for i in range(195)]
    p = 1.0 / np.arange(1, 201) ** 1.1
    values = list(rng.choice(words, n, p=p / p.sum()))
    m = d.mechanism_instance
    answer = d.kind_spec.answer(d, m.aggregate(m.perturb(values, rng=rng)), Question())
    assert answer["n"] == n and 0.0 < answer["threshold"] <= 1.0
    assert all(item["category"] in words for item in answer["items"])


@pytest.mark.parametrize(
    "definition",
    [
        {"kind": "categorical", "categories": ["a", "b", "c"], "epsilon": 1.0},
        {"kind": "numeric", "bounds": [0.0, 1.0], "epsilon": 1.0},
    ],
)
def test_categorical_and_numeric_answer_through_their_kind(definition: dict[str, Any]) -> None:
    """Categorical and numeric metrics are answered by their kind like every other (the
    collector's former fast path): the fields of the core's estimate, with the sums."""
    import json

    d = MetricDefinition.from_dict("m", definition)
    m = d.mechanism_instance
    aggregate = m.aggregate(m.perturb([0, 1] if d.kind_spec.name == "categorical" else [0.5]))
    answer = d.kind_spec.answer(d, aggregate, Question(level=0.9))
    estimate = m.estimate(aggregate)
    assert answer["n"] == estimate.n == 2 - (d.kind_spec.name == "numeric")
    assert json.loads(answer["sums"]) == list(aggregate.sums)  # JSON text, spliced as is
    low = [i["low"] for i in json.loads(answer["items"])] if "items" in answer else answer["low"]
    assert low == (list(estimate.ci(0.9)[0]) if "items" in answer else estimate.ci(0.9)[0])
