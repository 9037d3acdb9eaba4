"""Metric definitions (validation, fingerprints, round trips) and wire decode errors."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import numpy as np
import pytest

from ldpkit import wire
from ldpkit.errors import ParameterError, ProtocolError
from ldpkit.metrics import MetricDefinition, MetricKind, Period

CAT: dict[str, Any] = {"categories": ["a", "b", "c"], "epsilon": 1.0, "mechanism": "grr"}
NUM: dict[str, Any] = {"kind": "numeric", "bounds": [0, 10], "epsilon": 1.0, "mechanism": "duchi"}


# --- validation: every error names the field -------------------------------------------
@pytest.mark.parametrize(
    ("name", "spec", "words"),
    [
        ("Theme", CAT, ["metric name", "Theme"]),
        ("9lives", CAT, ["metric name"]),
        ("x" * 65, CAT, ["metric name"]),
        ("t", {**CAT, "epsilon": 0}, ["epsilon"]),
        ("t", {**CAT, "epsilon": "1"}, ["epsilon"]),
        ("t", {**CAT, "epsilon": float("nan")}, ["epsilon"]),
        ("t", {**CAT, "epsilon": True}, ["epsilon"]),
        ("t", {"categories": ["a", "b"]}, ["epsilon is required"]),
        ("t", {**CAT, "kind": "ordinal"}, ["kind"]),
        ("t", {**CAT, "categories": ["a"]}, ["categories", "2 to"]),
        ("t", {**CAT, "categories": ["a", "a"]}, ["categories", "distinct"]),
        ("t", {**CAT, "categories": ["a", ""]}, ["category"]),
        ("t", {**CAT, "categories": ["a", 3]}, ["category"]),
        ("t", {**CAT, "categories": "ab"}, ["categories"]),
        ("t", {**CAT, "bounds": [0, 1]}, ["categorical metrics take no bounds"]),
        ("t", {**NUM, "bounds": [1, 0]}, ["bounds", "lo < hi"]),
        ("t", {**NUM, "bounds": [0, float("inf")]}, ["bounds"]),
        ("t", {**NUM, "bounds": [0]}, ["bounds"]),
        ("t", {"kind": "numeric", "epsilon": 1.0}, ["bounds"]),
        ("t", {**NUM, "categories": ["a", "b"]}, ["numeric metrics take no categories"]),
        ("t", {**CAT, "mechanism": "nope"}, ["mechanism", "nope"]),
        ("t", {**CAT, "mechanism": "duchi"}, ["duchi", "is numeric"]),
        ("t", {**NUM, "mechanism": "grr"}, ["grr", "is categorical"]),
        ("t", {**CAT, "bucket": "month"}, ["bucket", "hour, day, week"]),
        ("t", {**CAT, "budget_period": "year"}, ["budget_period"]),
        ("t", {**CAT, "budget": 0.5}, ["budget", "smaller than the epsilon"]),
        ("t", {**CAT, "description": 5}, ["description"]),
        ("t", {**CAT, "colour": "red"}, ["unknown keys colour"]),
        ("t", {**CAT, "name": "u"}, ["name in body"]),
    ],
)
def test_validation_errors_name_the_field(
    name: str, spec: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ParameterError) as info:
        MetricDefinition.from_dict(name, spec)
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)


def test_from_dict_needs_a_mapping() -> None:
    with pytest.raises(ParameterError, match="table/object"):
        MetricDefinition.from_dict("t", ["a"])  # type: ignore[arg-type]


# --- fingerprints ----------------------------------------------------------------------
def _fp(name: str = "t", **changes: Any) -> str:
    base = {**CAT, **changes}
    return MetricDefinition.from_dict(name, base).fingerprint


def test_fingerprint_changes_with_every_parameter() -> None:
    base = _fp()
    variants = {
        "name": _fp("u"),
        "epsilon": _fp(epsilon=1.5),
        "categories (order)": _fp(categories=["b", "a", "c"]),
        "categories (one more)": _fp(categories=["a", "b", "c", "d"]),
        "categories (renamed)": _fp(categories=["a", "b", "z"]),
        "mechanism": _fp(mechanism="oue"),
        "bucket": _fp(bucket="hour"),
    }
    assert all(v != base for v in variants.values()), variants
    assert len(set(variants.values())) == len(variants)
    num = MetricDefinition.from_dict("t", NUM).fingerprint
    assert num != MetricDefinition.from_dict("t", {**NUM, "bounds": [0, 11]}).fingerprint
    assert num != MetricDefinition.from_dict("t", {**NUM, "mechanism": "piecewise"}).fingerprint
    assert num != base


def test_fingerprint_ignores_what_does_not_change_reports() -> None:
    base = _fp()
    assert _fp(description="words") == base
    assert _fp(budget=3.0) == base
    assert _fp(budget_period="week") == base
    assert _fp(epsilon=1) == base  # 1 and 1.0 are the same parameter
    assert MetricDefinition.from_dict("t", {**CAT, "kind": "categorical"}).fingerprint == base


def test_fingerprint_of_auto_is_the_resolved_mechanism() -> None:
    auto = MetricDefinition.from_dict("t", {**CAT, "mechanism": "auto"})
    explicit = MetricDefinition.from_dict("t", {**CAT, "mechanism": auto.resolved_mechanism})
    assert auto.fingerprint == explicit.fingerprint
    assert auto.mechanism == "auto"
    assert len(auto.fingerprint) == 16 and wire.FINGERPRINT_PATTERN.match(auto.fingerprint)


# --- round trips -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        CAT,
        NUM,
        {**CAT, "bucket": "week", "budget": 4.0, "budget_period": "week", "description": "d"},
        {**NUM, "bounds": [-5.5, 5.5], "bucket": "hour"},
        {"categories": ["x", "y"], "epsilon": 0.5},
    ],
)
def test_to_dict_from_dict_round_trip(spec: dict[str, Any]) -> None:
    d = MetricDefinition.from_dict("t", spec)
    data = d.to_dict()
    again = MetricDefinition.from_dict("t", json.loads(json.dumps(data)))
    # to_dict writes the effective budget, so an unset budget comes back explicit;
    # everything served, and the fingerprint, is the same.
    assert again.to_dict() == data
    assert again == MetricDefinition.from_dict("t", {**spec, "budget": d.effective_budget})
    assert data["fingerprint"] == d.fingerprint
    assert data["report_size"] == d.mechanism_instance.report_dtype.itemsize
    assert data["kind"] in {k.value for k in MetricKind}
    assert data["budget"] == d.effective_budget


def test_constructors_agree_with_from_dict() -> None:
    assert MetricDefinition.categorical("t", ["a", "b", "c"], epsilon=1.0, mechanism="grr") == (
        MetricDefinition.from_dict("t", CAT)
    )
    assert MetricDefinition.numeric("t", (0, 10), epsilon=1.0, mechanism="duchi") == (
        MetricDefinition.from_dict("t", NUM)
    )


def test_period_alignment() -> None:
    assert Period.DAY.start(1763683200 + 5) == 1763683200
    assert Period.HOUR.seconds == 3600 and Period.WEEK.start(0) == 0


# --- wire decode errors ----------------------------------------------------------------
FP = "4e1eb7ea0ddd3f92"


def _block(**changes: Any) -> dict[str, Any]:
    block: dict[str, Any] = {
        "metric": "t",
        "fp": FP,
        "bucket": 1763683200,
        "ids": b"\x00" * 32,
        "reports": b"\x00" * 8,
    }
    block.update(changes)
    return {k: v for k, v in block.items() if v is not None}


def _pack(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "not valid msgpack"),
        (b"\xc1", "not valid msgpack"),
        (b"\x82\xa1v", "not valid msgpack"),  # truncated
        (_pack({"v": 1, "blocks": []}) + b"\x00", "trailing bytes"),
        (_pack([1]), "msgpack map"),
        (_pack({"blocks": []}), "version None"),
        (_pack({"v": 2, "blocks": []}), "needs field 'batch'"),
        (_pack({"v": 3, "blocks": []}), "version 3"),
        (_pack({"v": True, "blocks": []}), "version True"),
        (_pack({"v": 1.0, "blocks": []}), "version 1.0"),
        (_pack({"v": 1}), "'blocks'"),
        (_pack({"v": 1, "blocks": {}}), "'blocks'"),
        (_pack({"v": 1, "blocks": [], "when": 5}), "unknown batch fields: when"),
        (_pack({"v": 1, "blocks": [3]}), "block 0: must be a map"),
        (_pack({"v": 1, "blocks": [_block(metric=None)]}), "missing field 'metric'"),
        (_pack({"v": 1, "blocks": [_block(fp=None)]}), "missing field 'fp'"),
        (_pack({"v": 1, "blocks": [_block(metric=5)]}), "'metric' must be str"),
        (_pack({"v": 1, "blocks": [_block(bucket="x")]}), "'bucket' must be int"),
        (_pack({"v": 1, "blocks": [_block(bucket=True)]}), "'bucket' must be int"),
        (_pack({"v": 1, "blocks": [_block(bucket=-1)]}), "out of range"),
        (_pack({"v": 1, "blocks": [_block(bucket=2**41)]}), "out of range"),
        (_pack({"v": 1, "blocks": [_block(ids="abc")]}), "'ids' must be bytes"),
        (_pack({"v": 1, "blocks": [_block(ids=b"\x00" * 17)]}), "not a multiple of 16"),
        (_pack({"v": 1, "blocks": [_block(reports=b"\x00" * 7)]}), "do not split into 2"),
        (_pack({"v": 1, "blocks": [_block(ids=b"", reports=b"\x00")]}), "reports without ids"),
        (_pack({"v": 1, "blocks": [_block(extra=1)]}), "block 0: unknown fields extra"),
        (_pack({"v": 1, "blocks": [_block(), _block(fp=1)]}), "block 1"),
        (_pack({"v": 1, "blocks": [{1: 2}]}), "not valid msgpack"),  # non-string key
    ],
)
def test_decode_errors(data: bytes, words: str) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_batch(data)
    assert words in str(info.value), str(info.value)


def test_decode_limits() -> None:
    many = _pack({"v": 1, "blocks": [_block(), _block()]})
    assert len(wire.decode_batch(many, max_reports=4)) == 2
    with pytest.raises(ProtocolError, match="more than 3 reports"):
        wire.decode_batch(many, max_reports=3)
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        wire.decode_batch(many, max_blocks=1)
    with pytest.raises(ProtocolError, match="must be bytes"):
        wire.decode_batch("text")  # type: ignore[arg-type]


def test_block_report_array_checks_sizes() -> None:
    block = wire.decode_batch(_pack({"v": 1, "blocks": [_block()]}))[0]
    assert block.n == 2 and len(block.id_list()) == 2
    assert block.report_array(np.dtype("<u4")).tolist() == [0, 0]
    with pytest.raises(ProtocolError, match="8 bytes of reports for 2 ids"):
        block.report_array(np.dtype("<u8"))
    with pytest.raises(ProtocolError, match="id bytes"):
        wire.make_block("t", FP, 0, b"\x00" * 16, np.zeros(2, dtype="<u4"))


# The number schema of docs/protocol.md ("Fingerprint"): which numbers of the canonical
# parameters are floats and which integers. Clients in languages whose JSON parser cannot
# tell 1.0 from 1 rebuild the canonical JSON with it, so every kind must keep to it.
SCHEMA_FLOATS = {
    "epsilon",
    "delta",
    "bounds.*",
    "scores.*.*",
    "mechanism_params.epsilon",
    "mechanism_params.bounds.*",
    "mechanism_params.views.*.weight",
    "mechanism_params.estimation_share",
}
SCHEMA_INTEGERS = {
    "protocol",
    "band",
    "mechanism_params.resolution",
    "mechanism_params.branching",
    "mechanism_params.views.*.size",
    "mechanism_params.max_length",
    "mechanism_params.k",
    "mechanism_params.seed",
    "mechanism_params.g",
    "mechanism_params.rows",
    "mechanism_params.estimation_rows",
    "mechanism_params.estimation_weight",
}


def _numbers(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every number in a JSON value, with its path (``*`` for any list index)."""
    prefix = f"{path}." if path else ""
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, prefix + k)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v, prefix + "*")]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [(path, value)]
    return []


def test_every_kind_keeps_to_the_fingerprint_number_schema() -> None:
    from ldpkit import conformance

    specs = list(conformance.make_plan(200)["metrics"])
    specs.append(
        MetricDefinition.from_dict(
            "wide", {"kind": "distribution", "bounds": [1, 2], "resolution": 1024, "epsilon": 2}
        ).to_dict()
    )
    specs.append(
        MetricDefinition.from_dict(
            "focus",
            {"kind": "strings", "max_length": 12, "k": 1, "epsilon": 3, "mechanism": "auto"},
        ).to_dict()
    )
    for served in specs:
        d = MetricDefinition.from_dict(served["name"], served)
        params = d.parameters()
        if "mechanism_params" in params:  # served as such, so that clients can check it
            assert served["mechanism_params"] == params["mechanism_params"]
        for path, number in _numbers(params):
            if path in SCHEMA_FLOATS:
                assert isinstance(number, float), (served["name"], path)
            else:
                assert path in SCHEMA_INTEGERS and isinstance(number, int), (served["name"], path)


def test_a_strings_definition_sets_its_hash_seed() -> None:
    """A deployment rotates the seed by a new version; the default keeps old fingerprints."""
    base = {"kind": "strings", "max_length": 8, "epsilon": 4.0}
    default = MetricDefinition.from_dict("s", base)
    assert MetricDefinition.from_dict("s", {**base, "seed": 0}).fingerprint == default.fingerprint
    assert "seed" not in default.to_dict()
    rotated = MetricDefinition.from_dict("s", {**base, "seed": 2**52 + 1})
    served = rotated.to_dict()
    assert rotated.fingerprint != default.fingerprint
    assert served["seed"] == 2**52 + 1 and served["derived"]["seed"] == "0010000000000001"
    assert (
        MetricDefinition.from_served("s", served, served["fingerprint"]).fingerprint
        == rotated.fingerprint
    )
    for bad in (-1, 2**53, 1.5, True, "7"):
        with pytest.raises(ParameterError, match=r"seed must be an integer in \[0, 2\^53\)"):
            MetricDefinition.from_dict("s", {**base, "seed": bad})
    with pytest.raises(ParameterError, match="categorical metrics take no seed"):
        MetricDefinition.from_dict("c", {"categories": ["a", "b"], "epsilon": 1.0, "seed": 1})
