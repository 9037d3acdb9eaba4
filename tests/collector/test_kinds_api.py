"""PUT and GET of every metric kind's definition, and its estimates' shape, over HTTP."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.metrics import MetricDefinition

from .helpers import auth, batch, estimates, new_ids, post_batch, today

DIST: dict[str, Any] = {
    "kind": "distribution",
    "bounds": [0.0, 120.0],
    "resolution": 64,
    "epsilon": 1.0,
    "mechanism": "auto",
    "bucket": "day",
}


async def put(client: TestClient, name: str, body: Any) -> tuple[int, Any]:
    resp = await client.put(
        f"/v1/metrics/{name}",
        data=json.dumps(body).encode(),
        headers={**auth("admin"), "Content-Type": "application/json"},
    )
    return resp.status, await resp.json()


async def send(client: TestClient, definition: MetricDefinition, values: Any) -> None:
    reports = definition.mechanism_instance.perturb(values, rng=np.random.default_rng(1))
    block = wire.Block(
        definition.name,
        definition.fingerprint,
        today(),
        new_ids(len(reports)),
        np.ascontiguousarray(reports).tobytes(),
    )
    status, answer = await post_batch(client, batch(block))
    assert status == 200 and answer["accepted"] == len(reports), answer


async def test_put_a_distribution_and_query_it(client: TestClient) -> None:
    status, answer = await put(client, "session_minutes_dist", DIST)
    assert status == 201, answer
    served = answer["definition"]
    assert served["kind"] == "distribution" and served["resolution"] == 64
    assert served["resolved_mechanism"] == "hh"
    status, again = await put(client, "session_minutes_dist", served)  # round-trips
    assert (status, again["outcome"]) == (200, "unchanged")
    d = MetricDefinition.from_dict("session_minutes_dist", served)
    await send(client, d, np.linspace(0.0, 120.0, 4000))
    status, body = await estimates(client, "session_minutes_dist", bins=4, per_bucket=True)
    assert status == 200 and body["n"] == 4000
    assert [i["lower"] for i in body["items"]] == [0.0, 30.0, 60.0, 90.0]
    assert body["buckets"][0]["n"] == 4000 and len(body["buckets"][0]["items"]) == 4
    status, body = await estimates(client, "session_minutes_dist", bins=100_000)
    assert (status, body["param"]) == (400, "bins")


async def test_put_refuses_a_bad_distribution(client: TestClient) -> None:
    status, answer = await put(client, "bad", {**DIST, "resolution": 100_000})
    assert status == 400 and answer["error"] == "invalid_definition"
    assert "resolution" in answer["detail"]


async def test_put_a_hierarchy_and_a_table_and_query_them(client: TestClient) -> None:
    region = {
        "kind": "hierarchy",
        "separator": ".",
        "categories": ["MX.Jalisco.Guadalajara", "MX.Jalisco.Zapopan", "MX.Sonora.Hermosillo"],
        "epsilon": 1.0,
        "mechanism": "levels",
    }
    car = {
        "kind": "table",
        "epsilon": 1.0,
        "dimensions": {"type": ["Compact", "Van"], "origin": ["USA", "non-USA"]},
    }
    for name, spec in (("region", region), ("car", car)):
        status, answer = await put(client, name, spec)
        assert status == 201, answer
        status, again = await put(client, name, answer["definition"])
        assert (status, again["outcome"]) == (200, "unchanged"), again
    resp = await client.get("/v1/metrics/car", headers=auth("ingest"))
    served = await resp.json()
    assert served["dimensions"] == [["type", ["Compact", "Van"]], ["origin", ["USA", "non-USA"]]]
    r = MetricDefinition.from_dict("region", region)
    await send(client, r, np.array([0, 1, 2] * 300))
    status, body = await estimates(client, "region", depth=2, consistent=True)
    assert status == 200 and [i["category"] for i in body["items"]] == ["MX.Jalisco", "MX.Sonora"]
    assert body["mechanism"] == "levels" and body["n"] == 900
    status, body = await estimates(client, "region", subtree="MX.Jalisco")
    assert [i["category"] for i in body["items"]] == [
        "MX.Jalisco.Guadalajara",
        "MX.Jalisco.Zapopan",
    ]
    c = MetricDefinition.from_dict("car", car)
    await send(client, c, np.array([0, 1, 2, 3] * 200))
    status, body = await estimates(client, "car", consistent=True)
    assert (
        status == 200 and len(body["items"]) == 4 and set(body["marginals"]) == {"type", "origin"}
    )
    status, body = await estimates(client, "car", depth=1)
    assert (status, body["param"]) == (400, "depth")


SW_N = 100_000  # reports of the square wave test (one batch): its median's sd, 0.6 minutes


def square_wave_spread(
    d: MetricDefinition, n: int, campaigns: int = 200
) -> tuple[dict[str, float], dict[str, float]]:
    """The mean and sd over ``campaigns`` simulated campaigns (fixed seed) of what the served
    estimate (``mechanism.estimate``: EMS) says of uniform values on [0, 120): the fraction
    in [0, 60) and the median. A campaign's counts are multinomial with the channel's law of
    a report (the reports of n values drawn from the population)."""
    from ldpkit.aggregate import Aggregate

    m: Any = d.mechanism_instance
    law = np.full(m.resolution, 1.0 / m.resolution) @ m.core.channel
    rng = np.random.default_rng(30)
    rows = []
    for _ in range(campaigns):
        counts = rng.multinomial(n, law).astype(np.float64)
        data = m.estimate(Aggregate(n, counts)).to_dict(quantiles=[0.5], range_=(0.0, 60.0))
        rows.append((data["range"]["estimate"], data["quantiles"][0]["value"]))
    values = np.array(rows)
    mean, sd = values.mean(axis=0), values.std(axis=0, ddof=1)
    return {"range": mean[0], "median": mean[1]}, {"range": sd[0], "median": sd[1]}


async def test_a_square_wave_distribution_answers_without_intervals(client: TestClient) -> None:
    """mechanism = "square_wave": point answers from EMS, every interval null and said so."""
    body = {**DIST, "mechanism": "square_wave", "resolution": 32}
    status, answer = await put(client, "latency_sw", body)
    assert status == 201, answer
    served = answer["definition"]
    assert served["resolved_mechanism"] == "square_wave" and served["report_size"] == 2
    d = MetricDefinition.from_dict("latency_sw", served)
    await send(client, d, np.random.default_rng(5).uniform(0.0, 120.0, SW_N))
    question = {"bins": 4, "quantiles": "0.5", "range": "0,60"}
    status, body = await estimates(client, "latency_sw", **question)
    assert status == 200 and body["n"] == SW_N, body
    assert body["interval"] == "none" and "no interval" in body["note"]
    assert all(i["low"] is None and i["high"] is None for i in body["items"])
    assert body["mean_low"] is None and body["range"]["low"] is None
    assert body["quantiles"][0]["low"] is None and body["most_common"] is None
    # Uniform values: the fraction below 60 and the median served are where EMS puts them,
    # within 4 sd of its spread over campaigns of the same population (simulated: EMS has no
    # variance formula, and the maximum likelihood's Fisher sd, 0.14 for the fraction here,
    # is 30 times what the smoothing leaves, 0.0046); the spread's centre is the truth's.
    centre, sd = square_wave_spread(d, SW_N)
    assert abs(body["range"]["estimate"] - centre["range"]) <= 4 * sd["range"], (centre, sd)
    assert abs(body["quantiles"][0]["value"] - centre["median"]) <= 4 * sd["median"], (centre, sd)
    assert abs(centre["range"] - 0.5) <= sd["range"] and abs(centre["median"] - 60) <= sd["median"]
    # The Python API reads it and says there is no interval, rather than crash.
    from ldpkit.analyst import EstimateResult

    result = EstimateResult.from_json(body)
    text = result.to_table()
    assert "no interval: square wave + EMS is a smoothed estimate" in text, text
    # ... and plots the point estimates, its title saying there is no interval.
    from ldpkit.analyst.plots import plot_estimate

    fig = plot_estimate(result)
    assert "no interval" in fig.axes[0].get_title()
