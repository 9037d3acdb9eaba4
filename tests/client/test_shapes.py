"""One shape for the Python and JS clients: the cases of tests/fixtures/client_shapes.json,
which client/js/test/shapes.test.js reads too (the JS client's names are these in
camelCase, docs/client.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ldpkit.client import MetricDefinition, Reporter

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "client_shapes.json"
CASES: dict[str, Any] = json.loads(FIXTURE.read_text())


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
