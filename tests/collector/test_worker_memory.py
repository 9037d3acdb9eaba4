"""The estimate worker's memory budget holds for every computation, however many ran before."""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pytest

from ldpkit.collector import worker
from ldpkit.collector.store import definition_json
from ldpkit.metrics import MetricDefinition

BUDGET_MIB = 64  # the least estimate_memory_mib takes


def test_what_a_worker_keeps_does_not_eat_the_next_computations_budget() -> None:
    """The worker keeps the definitions it built, and a definition keeps what its estimate
    built (a square wave's d x d channel: 8 MiB at 1,024 buckets). Kept across
    computations, that counted against every later one's budget, so estimates that each
    fit (the model says 60 MiB, under the 64 given) failed once a few had run."""
    rng = np.random.default_rng(3)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        1, mp_context=context, initializer=worker.start, initargs=(600.0, BUDGET_MIB * 2**20)
    ) as pool:
        for i in range(10):
            d = MetricDefinition.from_dict(
                f"latency{i}",
                {"kind": "distribution", "bounds": [0.0, 100.0 + i], "resolution": 1024,
                 "epsilon": 2.0, "mechanism": "square_wave"},
            )  # fmt: skip
            assert d.kind_spec.cost(d).memory_bytes <= BUDGET_MIB * 2**20
            m = d.mechanism_instance
            sums = m.aggregate(m.perturb(rng.uniform(0.0, 100.0, 20_000), rng)).sums
            job = worker.Job(d.name, d.fingerprint, definition_json(d), 20_000, sums)
            outcome = pool.submit(worker.prepare, job).result()
            assert outcome.error is None, (i, outcome.error)
            assert worker.load(outcome.result).aggregate.n == 20_000


def test_a_worker_forgets_for_what_its_definitions_hold_not_for_what_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What forgetting cannot give back (the modules a first computation imports, what the
    allocator keeps: 35 to 46 MiB over the start in a spawned worker after one square wave
    at 1,024 buckets) is not counted as the definitions'. Counted, it kept a 64 MiB worker
    over its quarter for ever: it forgot after every computation, one metric's included,
    so every estimate built its definition again. (VmData is simulated here: the
    allocator's figures are not reproducible.)"""
    mib = 2**20
    start, residue, each = 500 * mib, 40 * mib, 8 * mib  # each: a definition's channel

    def status(field: str) -> int:
        assert field in ("VmData", "VmHWM")
        return start + residue + each * len(worker._definitions)

    built: list[str] = []
    served = MetricDefinition.from_served

    def counted(name: str, data: dict[str, Any], fingerprint: str) -> MetricDefinition:
        built.append(fingerprint)
        return served(name, data, fingerprint)

    monkeypatch.setattr(worker, "_status", status)
    monkeypatch.setattr(worker, "_definitions", {})
    monkeypatch.setattr(worker, "_budget", {"cpu": math.inf, "memory": 64 * mib, "held": start})
    monkeypatch.setattr(MetricDefinition, "from_served", staticmethod(counted))
    rng = np.random.default_rng(4)

    def job(i: int) -> worker.Job:
        d = MetricDefinition.from_dict(
            f"latency{i}",
            {"kind": "distribution", "bounds": [0.0, 100.0 + i], "resolution": 16,
             "epsilon": 2.0, "mechanism": "square_wave"},
        )  # fmt: skip
        m = d.mechanism_instance
        sums = m.aggregate(m.perturb(rng.uniform(0.0, 100.0, 500), rng)).sums
        return worker.Job(d.name, d.fingerprint, definition_json(d), 500, sums)

    same = job(0)
    for _ in range(5):
        assert worker.prepare(same).error is None
    assert len(built) == 1  # one metric estimated again and again: built once
    for i in range(1, 9):  # many metrics: what they hold stays within a quarter (and one)
        assert worker.prepare(job(i)).error is None
        assert each * (len(worker._definitions) - 1) <= 16 * mib
    assert len(built) == 9
