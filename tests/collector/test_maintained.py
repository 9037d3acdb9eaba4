"""Maintained estimates (issue 27): computed once per data, never inside a request.

The computations a test holds run in a thread of the test (``lane`` swapped for one that
calls the worker's ``prepare`` in this process, patched to wait on an event the test
sets): what a request does while one is held is then seen, not timed. The others run in
the real worker processes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from ldpkit import wire
from ldpkit.collector import create_app
from ldpkit.collector import worker as worker_module
from ldpkit.collector.config import CollectorConfig, ConfigError, config_from_dict
from ldpkit.collector.fairness import FairLane
from ldpkit.collector.keys import COLLECTOR
from ldpkit.collector.store import Origin
from ldpkit.metrics import MetricDefinition

from .helpers import auth, estimates, make_config, new_ids, post_batch, today

WORD = {"kind": "strings", "max_length": 6, "k": 4, "epsilon": 4.0}
BIG_TABLE = {
    "kind": "table",
    "epsilon": 1.0,
    "dimensions": {"a": [f"a{i}" for i in range(1024)], "b": [f"b{i}" for i in range(64)]},
}


class Held:
    """The worker's ``prepare`` run in this process, each call counted and held at
    ``gate`` (open unless closed) after it set ``started``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.calls: list[int] = []  # the n of each computation
        self.real: Callable[[Any], Any] = worker_module.prepare

    def prepare(self, job: Any) -> Any:
        self.calls.append(job.n)
        self.started.set()
        assert self.gate.wait(timeout=600)
        return self.real(job)


@asynccontextmanager
async def serving(
    config: CollectorConfig, held: Held | None = None
) -> AsyncIterator[tuple[TestClient, Any]]:
    """The app on ``config`` (its estimate lane a thread calling ``held``'s prepare, if
    given): the client and the collector."""
    app = create_app(config)
    collector = app[COLLECTOR]
    if held is not None:
        collector.estimates.lane = FairLane()
    async with TestClient(TestServer(app)) as client:
        yield client, collector


def send_words(definition: MetricDefinition, words: list[str], seed: int) -> bytes:
    values = definition.kind_spec.encode_many(definition, words)
    reports = definition.mechanism_instance.perturb(values, rng=np.random.default_rng(seed))
    block = wire.sealed_block(definition.name, definition.fingerprint, today(), reports)
    return wire.encode_sealed_batch(new_ids(1), [block])


def computed(collector: Any, outcome: str = "ok") -> float:
    counter = collector.telemetry.estimates_computed
    return sum(
        s.value
        for metric in counter.collect()
        for s in metric.samples
        if s.name.endswith("_total") and s.labels["outcome"] == outcome
    )


async def test_a_query_answers_from_the_last_estimate_while_the_next_is_computed(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held()
    monkeypatch.setattr(worker_module, "prepare", held.prepare)
    d = MetricDefinition.from_dict("word", WORD)
    async with serving(make_config(database, metrics={"word": WORD}), held) as (client, _):
        status, first = await estimates(client, "word")  # computed, waited for
        assert status == 200 and first["n"] == 0 and first["as_of"]["fresh"]
        assert held.calls == [0]
        status, _ = await post_batch(client, send_words(d, ["abc"] * 3000, seed=1))
        assert status == 200
        held.gate.clear()
        held.started.clear()
        status, now = await estimates(client, "word", wait=0)
        # Answered from the estimate of no reports, saying so: 3000 reports came since.
        assert status == 200 and now["n"] == 0
        assert now["as_of"]["reports_since"] == 3000 and not now["as_of"]["fresh"]
        assert now["as_of"]["computed_at"] == first["as_of"]["computed_at"]
        # The query started the next computation and did not do it: it is held now.
        await asyncio.get_running_loop().run_in_executor(None, held.started.wait, 600)
        assert held.calls == [0, 3000]
        again = await estimates(client, "word", wait=0)  # answered while it is held
        assert again[0] == 200 and again[1]["n"] == 0
        waiting = asyncio.ensure_future(estimates(client, "word", wait=120))
        held.gate.set()
        status, fresh = await waiting  # wait=: the new estimate, once computed
        assert status == 200 and fresh["n"] == 3000 and fresh["as_of"]["fresh"]
        assert fresh["items"][0]["category"] == "abc"
        assert held.calls == [0, 3000]


async def test_identical_concurrent_queries_share_one_computation(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held()
    held.gate.clear()
    monkeypatch.setattr(worker_module, "prepare", held.prepare)
    async with serving(make_config(database, metrics={"word": WORD}), held) as (client, coll):
        queries = [asyncio.ensure_future(estimates(client, "word")) for _ in range(6)]
        await asyncio.get_running_loop().run_in_executor(None, held.started.wait, 600)
        assert not any(q.done() for q in queries)  # all wait for the one computation
        held.gate.set()
        answers = await asyncio.gather(*queries)
        assert {status for status, _ in answers} == {200}
        assert len({body["as_of"]["computed_at"] for _, body in answers}) == 1
        assert held.calls == [0] and computed(coll) == 1


async def test_a_query_that_will_not_wait_is_told_it_is_computing(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held()
    held.gate.clear()
    monkeypatch.setattr(worker_module, "prepare", held.prepare)
    config = make_config(database, metrics={"word": WORD}, estimate_deadline_seconds=0)
    async with serving(config, held) as (client, _):
        resp = await client.get("/v1/estimates/word", headers=auth("read"))
        body = await resp.json()
        assert resp.status == 202 and body["error"] == "computing"
        assert int(resp.headers["Retry-After"]) >= 1 and body["retry_after"] >= 1
        held.gate.set()
        assert (await estimates(client, "word"))[0] == 200


async def test_a_computation_over_the_memory_budget_fails_cleanly(database: Path) -> None:
    """A version stored before the budget was lowered (the PUT would refuse it now): its
    estimate runs out of memory in the worker, which says so, and goes on."""
    minutes = {"kind": "distribution", "bounds": [0, 60], "resolution": 16, "epsilon": 1.0}
    config = make_config(database, metrics={"minutes": minutes}, estimate_memory_mib=64)
    async with serving(config) as (client, collector):
        big = MetricDefinition.from_dict("cars", BIG_TABLE)
        await collector.store.put_metric(big, origin=Origin.API)
        await collector.refresh_catalog()
        resp = await client.get("/v1/estimates/cars?wait=120", headers=auth("read"))
        body = await resp.json()
        assert resp.status == 503 and body["error"] == "estimate_failed", body
        assert "memory budget of 64 MiB" in body["detail"]
        assert computed(collector, "over_budget") == 1
        assert (await estimates(client, "minutes"))[0] == 200  # the worker goes on


def test_a_definition_over_the_budget_is_refused_with_its_cost(tmp_path: Path) -> None:
    big = {"kind": "strings", "max_length": 64, "k": 1000, "epsilon": 1.0}
    data = {"collector": {"database": str(tmp_path / "c.db")}, "metrics": {"s": big}}
    with pytest.raises(ConfigError, match=r"up to 183 CPU seconds and 1,784 MiB"):
        config_from_dict(data, environ={})
    data["collector"]["estimate_cpu_seconds"] = 200
    data["collector"]["estimate_memory_mib"] = 2048
    assert config_from_dict(data, environ={}).metrics["s"].k == 1000


async def test_a_put_over_the_budget_is_refused_with_its_cost(client: TestClient) -> None:
    spec = {"kind": "strings", "max_length": 64, "k": 1000, "epsilon": 1.0}
    resp = await client.put("/v1/metrics/s", json=spec, headers=auth("admin"))
    body = await resp.json()
    assert resp.status == 400 and body["error"] == "invalid_definition"
    assert "max_length 64 and k 1000 takes up to 183 CPU seconds" in body["detail"]
    assert "estimate_cpu_seconds" in body["detail"]
    ok = {**spec, "k": 100}
    assert (await client.put("/v1/metrics/s", json=ok, headers=auth("admin"))).status == 201


async def test_healthz_answers_while_a_65536_cell_table_is_put(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ldpkit.collector import routes

    started, gate = threading.Event(), threading.Event()
    real = routes._definition

    def building(*args: Any) -> MetricDefinition:
        started.set()
        assert gate.wait(timeout=600)
        return real(*args)

    monkeypatch.setattr(routes, "_definition", building)
    put = asyncio.ensure_future(
        client.put("/v1/metrics/cars", json=BIG_TABLE, headers=auth("admin"))
    )
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 600)
    health = await client.get("/healthz")  # the PUT's work is under way, off the loop
    assert health.status == 200 and not put.done()
    gate.set()
    assert (await put).status == 201


@pytest.mark.postgres
async def test_two_collectors_on_one_postgresql_compute_once_per_data(pg_url: str) -> None:
    d = MetricDefinition.from_dict("word", WORD)
    config = make_config(pg_url, metrics={"word": WORD})
    async with serving(config) as (a, ca), serving(config) as (b, cb):
        first = await asyncio.gather(estimates(a, "word"), estimates(b, "word"))
        assert {body["as_of"]["computed_at"] for _, body in first} == {
            first[0][1]["as_of"]["computed_at"]
        }
        assert (await post_batch(a, send_words(d, ["abc"] * 2000, seed=2)))[0] == 200
        answers = await asyncio.gather(*(estimates(c, "word") for c in (a, b, a, b)))
        assert {body["n"] for _, body in answers} == {2000}
        assert len({body["as_of"]["computed_at"] for _, body in answers}) == 1
        assert computed(ca) + computed(cb) == 2  # no reports, then 2000: once each
