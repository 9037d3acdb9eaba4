"""One shape for the Python and JS clients: the cases of tests/fixtures/client_shapes.json,
which client/js/test/shapes.test.js reads too (the JS client's names are these in
camelCase, docs/client.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ldpkit.client import MetricDefinition, Reporter, RetryPolicy
from ldpkit.errors import LdpkitError
from ldpkit.http import HttpAnswer

from .conftest import FakeCollector

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "client_shapes.json"
CASES: dict[str, Any] = json.loads(FIXTURE.read_text())
FAST = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002)


def served(data: dict[str, Any]) -> MetricDefinition:
    definition = MetricDefinition.from_served(data["name"], data, data["fingerprint"])
    # The fixture's definitions are what this version serves (else both suites test a stale
    # shape): the same fingerprint and derived constants.
    assert definition.to_dict() == data, f"{data['name']}: regenerate the fixture"
    return definition


@pytest.mark.parametrize("case", CASES["budget"], ids=lambda c: c["name"])
def test_budget_shape(case: dict[str, Any], tmp_path: Path) -> None:
    clock = float(case["clock"])
    with Reporter(
        "http://127.0.0.1:9",
        state_dir=tmp_path,
        metrics=[served(d) for d in case["definitions"]],
        clock=lambda: clock,
        background=False,
        total_budget=case["total_budget"],
        total_budget_period=case["total_period"],
    ) as r:
        for metric, value in case["reports"]:
            r.report(metric, value)
        assert r.budget().to_dict() == case["budget"]
        r.close(flush=False)


@pytest.mark.parametrize("case", CASES["errors"], ids=lambda c: c["name"])
def test_error_shape(case: dict[str, Any], tmp_path: Path) -> None:
    """The error each client raises: its class, the facts its message states (the same
    regular expressions for both clients) and its fields."""
    definitions = [served(d) for d in CASES["budget"][0]["definitions"]]
    clock = float(CASES["budget"][0]["clock"])
    answer = case.get("answer")
    fake = FakeCollector(definitions=definitions)
    if answer is not None:
        fake.script = [HttpAnswer(answer["status"], {}, answer["body"].encode())]
    r = Reporter(
        "http://127.0.0.1:9",
        token="t",
        state_dir=tmp_path,
        metrics=definitions,
        clock=lambda: clock,
        background=False,
        total_budget=CASES["budget"][0]["total_budget"],
        total_budget_period=CASES["budget"][0]["total_period"],
        transport=fake,
        retry=FAST,
    )
    try:
        for metric, value in case["reports"]:
            r.report(metric, value)
        with pytest.raises(LdpkitError) as caught:
            if answer is None:
                r.report(*case["report"])
            else:
                r.flush()
    finally:
        r.close(flush=False)
    error = caught.value
    assert type(error).__name__ == case["python"], error
    for fact in case["facts"]:
        assert re.search(fact, str(error)), (fact, str(error))
    for name, value in case["fields"].items():
        assert getattr(error, name) == value, (name, error)


@pytest.mark.parametrize("case", CASES["flush"], ids=lambda c: c["name"])
def test_flush_shape(case: dict[str, Any], tmp_path: Path) -> None:
    """What flush() answers when the collector answers the one batch so."""
    base = CASES["budget"][0]
    definitions = [served(d) for d in base["definitions"]]
    fake = FakeCollector(definitions=definitions)
    fake.script = [HttpAnswer(200, {}, json.dumps(case["answer"]).encode())]
    clock = float(base["clock"])
    r = Reporter(
        "http://127.0.0.1:9",
        token="t",
        state_dir=tmp_path,
        metrics=definitions,
        clock=lambda: clock,
        background=False,
        transport=fake,
        retry=FAST,
    )
    try:
        for metric, value in case["reports"]:
            r.report(metric, value)
        assert r.flush().to_dict() == case["flush"]
        assert fake.posts == 1
    finally:
        r.close(flush=False)
