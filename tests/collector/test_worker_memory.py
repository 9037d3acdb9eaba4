"""The estimate worker's memory budget holds for every computation, however many ran before."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np

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
