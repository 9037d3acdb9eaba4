"""The conformance kit's device script: does a client keep the budget ledger and memoize?

A batch made for a plan cannot show a device's state (its reports are each fresh, as many
as the plan asks). So the plan also holds a script (:func:`ldpkit.conformance.device_script`):
one definition and the values one device reports under it, at given times of its clock,
through the client's **real** reporter (its store, its ledger, its memo), offline, then
delivered. The client answers which steps its reporter refused for the budget and the
batch bodies it sent; :func:`device_problems` compares them with what a conforming device
does (docs/protocol.md, "What a client keeps on the device"):

- **the ledger**: a fresh report only while ``spent + epsilon <= budget`` in its budget
  window; the steps beyond are refused, and no budget window's reports hold more different
  reports than the budget allows;
- **the memo**: within a memo window (the budget window) a repeated value is accepted,
  spends nothing and gives the same report (the same bytes in every bucket it is queued
  for), queued at most once per bucket; a new window gives it a fresh report.

Each problem names which of the two is missing: ``LEDGER: ...`` or ``MEMO: ...``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ParameterError, ProtocolError
from .metrics import BUDGET_SLACK, MetricDefinition
from .wire import Block, decode


@dataclass(frozen=True)
class Step:
    """One report the script asks for: at unix time ``at``, of ``value``."""

    at: int
    value: Any


@dataclass
class Expected:
    """What a conforming device does with a script."""

    refused: set[int] = field(default_factory=set)
    """The steps refused for the budget."""
    root: dict[int, int] = field(default_factory=dict)
    """Each accepted step's fresh report: the step that made it (itself, or the first of its
    value in its memo window)."""
    queued: dict[int, list[int]] = field(default_factory=dict)
    """Per bucket, the fresh reports queued for it (as their steps), in step order."""
    fresh: int = 0
    """The fresh reports one budget window allows."""


def expected(definition: MetricDefinition, steps: Sequence[Step]) -> Expected:
    """The ledger and memo rules of docs/protocol.md run on ``steps``."""
    period, width = definition.budget_period.seconds, definition.bucket.seconds
    budget = definition.effective_budget * (1.0 + BUDGET_SLACK) + BUDGET_SLACK
    out = Expected(fresh=math.floor(budget / definition.epsilon * (1.0 + BUDGET_SLACK)))
    spent: dict[int, int] = {}
    memo: dict[tuple[str, int], tuple[int, set[int]]] = {}
    for i, step in enumerate(steps):
        window, bucket = step.at // period * period, step.at // width * width
        key = (json.dumps(step.value), window)
        if key in memo:
            root, buckets = memo[key]
            out.root[i] = root
            if bucket not in buckets:
                buckets.add(bucket)
                out.queued.setdefault(bucket, []).append(root)
            continue
        if spent.get(window, 0) + 1 > out.fresh:
            out.refused.add(i)
            continue
        spent[window] = spent.get(window, 0) + 1
        memo[key] = (i, {bucket})
        out.root[i] = i
        out.queued.setdefault(bucket, []).append(i)
    return out


@dataclass(frozen=True)
class Answer:
    """A client's answer to the script: the steps refused, the batch bodies sent."""

    refused: frozenset[int]
    batches: tuple[bytes, ...]

    @classmethod
    def of(cls, given: Mapping[str, Any] | str | os.PathLike[str]) -> Answer:
        """From ``{"refused": [...], "batches": [hex, ...]}`` or the path of its JSON."""
        try:
            data = given if isinstance(given, Mapping) else json.loads(Path(given).read_text())
            refused = frozenset(int(i) for i in data["refused"])
            batches = tuple(bytes.fromhex(b) for b in data["batches"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ParameterError(
                f'the device answer is not {{"refused": [step, ...], "batches": [hex, ...]}}: {exc}'
            ) from None
        return cls(refused, batches)


def device_problems(
    script: Mapping[str, Any], given: Mapping[str, Any] | str | os.PathLike[str] | None
) -> list[str]:
    """What the client's answer to the plan's device script shows wrong (empty: it keeps
    the ledger and memoizes as docs/protocol.md says)."""
    if given is None:
        return ["no answer to the plan's `device` script (check --device FILE)"]
    try:
        answer = Answer.of(given)
    except ParameterError as exc:
        return [str(exc)]
    served = script["definition"]
    definition = MetricDefinition.from_dict(served["name"], served)
    steps = [Step(int(s["at"]), s["value"]) for s in script["steps"]]
    model = expected(definition, steps)
    refusals = _refusals(model, answer.refused, steps)
    by_bucket, framing = _reports(definition, answer.batches)
    if framing:
        return refusals + framing
    if refusals:  # the buckets cannot hold what the model queues: say what the steps showed
        return refusals + _ledger(definition, model, by_bucket)
    return _memo(model, by_bucket) or _ledger(definition, model, by_bucket)


def _said(i: int, steps: Sequence[Step]) -> str:
    return f"step {i} ({json.dumps(steps[i].value, ensure_ascii=False)} at {steps[i].at})"


def _refusals(model: Expected, refused: frozenset[int], steps: Sequence[Step]) -> list[str]:
    """Each step refused or accepted unlike a conforming device, named."""
    out: list[str] = []
    for i in sorted(model.refused ^ refused):
        if i in model.refused:
            out.append(
                f"LEDGER: {_said(i, steps)} was accepted beyond the budget: its window allows "
                f"{model.fresh} fresh reports, spent before it"
            )
        elif model.root[i] != i:
            out.append(
                f"MEMO: {_said(i, steps)} was refused: it repeats {_said(model.root[i], steps)} "
                "in the same memo window, so it gives the same report and spends nothing"
            )
        elif any(p.startswith("MEMO") for p in out):
            out.append(
                f"MEMO: {_said(i, steps)} was refused within the budget: the budget went to "
                "repeated values, which cost nothing when memoized"
            )
        else:
            out.append(f"LEDGER: {_said(i, steps)} was refused within the budget")
    return out


def _reports(
    definition: MetricDefinition, batches: Sequence[bytes]
) -> tuple[dict[int, list[bytes]], list[str]]:
    """The device metric's reports per bucket, from the batches in order."""
    size = definition.mechanism_instance.report_dtype.itemsize
    found: dict[int, list[bytes]] = {}
    for k, body in enumerate(batches):
        try:
            blocks: list[Block] = decode(body).blocks
        except ProtocolError as exc:
            return {}, [f"device batch {k} does not decode: {exc}"]
        for block in blocks:
            if (block.metric, block.fingerprint) != (definition.name, definition.fingerprint):
                return {}, [f"device batch {k}: a block of {block.metric} {block.fingerprint}"]
            reports = found.setdefault(block.bucket, [])
            reports.extend(block.reports[j : j + size] for j in range(0, len(block.reports), size))
    return found, []


def _ledger(
    definition: MetricDefinition, model: Expected, by_bucket: Mapping[int, list[bytes]]
) -> list[str]:
    """Budget windows holding more different reports than the budget allows."""
    period = definition.budget_period.seconds
    windows: dict[int, set[bytes]] = {}
    for bucket, reports in by_bucket.items():
        windows.setdefault(bucket // period * period, set()).update(reports)
    return [
        f"LEDGER: the budget window starting {w} holds {len(made)} different reports; its "
        f"budget allows {model.fresh}"
        for w, made in sorted(windows.items())
        if len(made) > model.fresh
    ]


def _memo(model: Expected, by_bucket: Mapping[int, list[bytes]]) -> list[str]:
    """Buckets holding other reports than a memoizing device queues for them: a repeat
    queued twice into one bucket, or with other bytes than its first report."""
    out = []
    made: dict[int, bytes] = {}  # a fresh report's step -> its bytes
    for bucket in sorted(set(model.queued) | set(by_bucket)):
        want, got = model.queued.get(bucket, []), by_bucket.get(bucket, [])
        if len(got) != len(want):
            out.append(
                f"MEMO: bucket {bucket} holds {len(got)} reports; a device that memoizes queues "
                f"{len(want)} (a repeated value once per bucket)"
            )
            continue
        repeats = sorted(made[r] for r in want if r in made)
        if sorted(b for b in got if b in made.values()) != repeats:
            out.append(
                f"MEMO: bucket {bucket}: a repeated value's report is not the same bytes as "
                "its first (memoized reports repeat exactly)"
            )
            continue
        new = iter(b for b in got if b not in made.values())
        made.update({r: next(new) for r in want if r not in made})
    return out
