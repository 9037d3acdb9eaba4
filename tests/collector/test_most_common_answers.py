"""``most_common`` in the estimates answer of a categorical, hierarchy and table metric, as
the analyst reads it and the CLI prints it (``EstimateResult.to_table``)."""

from __future__ import annotations

import numpy as np
from aiohttp.test_utils import TestClient

from ldpkit.analyst import EstimateResult
from ldpkit.metrics import MetricDefinition

from .helpers import estimates
from .test_kinds_api import DIST, put, send


async def test_categorical_answer_names_the_mode_and_its_set(client: TestClient) -> None:
    spec = {"kind": "categorical", "categories": ["red", "brown", "black"], "epsilon": 2.0}
    status, answer = await put(client, "hair", spec)
    assert status == 201, answer
    status, body = await estimates(client, "hair")
    assert status == 200 and body["most_common"] is None  # no reports yet
    d = MetricDefinition.from_dict("hair", answer["definition"])
    await send(client, d, np.repeat([0, 1, 2], [400, 390, 60]))  # red and brown near a tie
    status, body = await estimates(client, "hair", level=0.9)
    common = body["most_common"]
    assert common["mode"] in ("red", "brown") and common["level"] == 0.9
    assert set(common["set"]) == {"red", "brown"} and common["set"][0] == common["mode"]
    assert common["method"] == "pairwise-bonferroni"
    assert [r["rank"] for r in common["ranks"]] == [1, 2, 3]
    assert common["ranks"][2] == {"category": "black", "rank": 3, "low": 3, "high": 3}
    result = EstimateResult.from_json(body, d)
    assert result.most_common is not None and result.most_common.set == tuple(common["set"])
    assert result.estimate is not None  # the rebuilt core estimate says the same
    assert result.estimate.most_common(0.9).labelled(d.categories or ())["set"] == common["set"]
    table = result.to_table()
    other = common["set"][1]
    assert f"most common: {common['mode']} (or {other} at 90%)" in table
    assert "ranks (90%, together): " in table and "black 3 [3, 3]" in table
    status, body = await estimates(client, "hair", per_bucket="true")
    bucket = body["buckets"][0]
    assert bucket["most_common"]["mode"] in ("red", "brown")
    assert EstimateResult.from_json(body, d).buckets[0].most_common is not None


async def test_hierarchy_and_table_answers_name_the_mode(client: TestClient) -> None:
    region = {
        "kind": "hierarchy",
        "separator": ".",
        "categories": ["MX.Jalisco.Guadalajara", "MX.Jalisco.Zapopan", "MX.Sonora.Hermosillo"],
        "epsilon": 2.0,
        "mechanism": "levels",
    }
    car = {
        "kind": "table",
        "epsilon": 2.0,
        "dimensions": {"type": ["Compact", "Van"], "origin": ["USA", "non-USA"]},
    }
    for name, spec in (("region", region), ("car", car)):
        status, answer = await put(client, name, spec)
        assert status == 201, answer
    await send(
        client, MetricDefinition.from_dict("region", region), np.repeat([0, 1, 2], [1600, 200, 200])
    )
    status, body = await estimates(client, "region", depth=2)
    assert body["most_common"]["mode"] == "MX.Jalisco" and body["most_common"]["set"] == [
        "MX.Jalisco"
    ]
    status, body = await estimates(client, "region", subtree="MX.Jalisco")
    assert body["most_common"]["mode"] == "MX.Jalisco.Guadalajara"
    assert (
        EstimateResult.from_json(body).to_table().count("most common: MX.Jalisco.Guadalajara") == 1
    )
    await send(
        client,
        MetricDefinition.from_dict("car", car),
        np.repeat([0, 1, 2, 3], [100, 1500, 100, 100]),
    )
    status, body = await estimates(client, "car")
    assert status == 200 and body["most_common"]["mode"] == {"type": "Compact", "origin": "non-USA"}
    assert body["most_common"]["ranks"][0]["cell"] == {"type": "Compact", "origin": "non-USA"}
    line = "most common: (type=Compact, origin=non-USA) (alone at 95%)"
    assert line in EstimateResult.from_json(body).to_table()


async def test_distribution_answer_names_the_modal_bin(client: TestClient) -> None:
    status, answer = await put(client, "wait_dist", DIST)
    assert status == 201, answer
    d = MetricDefinition.from_dict("wait_dist", answer["definition"])
    await send(client, d, np.concatenate([np.full(3000, 40.0), np.linspace(0.0, 120.0, 1000)]))
    status, body = await estimates(client, "wait_dist", bins=4)
    assert status == 200 and body["most_common"]["mode"] == "[30, 60)"
    assert body["most_common"]["set"] == ["[30, 60)"]
    status, body = await estimates(client, "wait_dist", edges="0,33.3,120")
    assert status == 200 and body["most_common"] is None  # 33.3 cuts a leaf: biased bins
