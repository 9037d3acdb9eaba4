"""ldpkit's Python client answering the conformance kit's device script.

:func:`device_answer` runs the plan's ``device`` steps through a real
:class:`~ldpkit.client.Reporter` (its SQLite store, budget ledger and memo) on a fresh
device, offline, its wall clock reading each step's time, then flushes into a transport
that keeps every batch body instead of sending it (docs/protocol.md, "Conformance").
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import BudgetExceeded
from ..http import HttpAnswer
from ..metrics import MetricDefinition
from ..wire import decode
from .sync import Reporter


class _Keeper:
    """A transport that keeps each batch body and answers it accepted."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> HttpAnswer:
        if method != "POST" or body is None:
            return HttpAnswer(404, {}, b'{"error": "not_found", "detail": "offline"}')
        self.bodies.append(body)
        n = sum(block.n for block in decode(body).blocks)
        answer = {"accepted": n, "duplicates": 0, "held": 0, "rejected": []}
        return HttpAnswer(200, {}, json.dumps(answer).encode())

    def close(self) -> None:
        pass


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def device_answer(
    plan: str | os.PathLike[str] | Mapping[str, Any],
    *,
    memoize: bool = True,
    definition: MetricDefinition | None = None,
) -> dict[str, Any]:
    """``{"refused": [step, ...], "batches": [hex, ...]}``: the plan's device script run by
    this client. ``memoize`` and ``definition`` (instead of the served one) exist to make
    broken devices for the kit's own tests."""
    data = plan if isinstance(plan, Mapping) else json.loads(Path(plan).read_text())
    script = data["device"]
    served = script["definition"]
    if definition is None:
        definition = MetricDefinition.from_served(served["name"], served, served["fingerprint"])
    steps = script["steps"]
    clock, keeper = _Clock(float(steps[0]["at"])), _Keeper()
    refused = []
    with tempfile.TemporaryDirectory() as tmp:
        reporter = Reporter(
            "http://conformance.invalid",
            token="conformance",
            state_dir=Path(tmp) / "device",
            metrics=[definition],
            clock=clock,
            memoize=memoize,
            background=False,
            transport=keeper,
        )
        with reporter:
            for i, step in enumerate(steps):
                clock.now = float(step["at"])
                try:
                    reporter.report(definition.name, step["value"])
                except BudgetExceeded:
                    refused.append(i)
            reporter.flush()
    return {"refused": refused, "batches": [body.hex() for body in keeper.bodies]}
