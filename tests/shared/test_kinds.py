"""Metric definitions of every kind: what each accepts, refuses, and fingerprints."""

from __future__ import annotations

from typing import Any

import pytest

from ldpkit.errors import ParameterError
from ldpkit.kinds import KINDS, kind_spec
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
