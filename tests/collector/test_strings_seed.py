"""A strings metric's hash seed set in its definition (issue 29): served, fingerprinted,
and the collector decodes reports hashed with it."""

from __future__ import annotations

from pathlib import Path

from ldpkit.metrics import MetricDefinition

from .helpers import auth, estimates, make_config, post_batch
from .test_maintained import send_words, serving

SEEDED = {"kind": "strings", "max_length": 6, "k": 4, "epsilon": 4.0, "seed": 2**52 + 7}


async def test_a_seeded_strings_metric_is_served_and_decoded(database: Path) -> None:
    d = MetricDefinition.from_dict("word", SEEDED)
    async with serving(make_config(database, metrics={"word": SEEDED})) as (client, _):
        resp = await client.get("/v1/metrics/word", headers=auth("ingest"))
        served = await resp.json()
        assert served["seed"] == 2**52 + 7 and served["derived"]["seed"] == "0010000000000007"
        assert served["mechanism_params"]["seed"] == 2**52 + 7
        assert served["fingerprint"] == d.fingerprint
        status, _ = await post_batch(client, send_words(d, ["abc"] * 2000, seed=3))
        assert status == 200
        status, body = await estimates(client, "word")
        assert status == 200 and body["n"] == 2000
        assert [i["category"] for i in body["items"]][:1] == ["abc"]


async def test_rotating_the_seed_makes_a_new_version(database: Path) -> None:
    async with serving(make_config(database, metrics={"word": SEEDED})) as (client, _):
        first = MetricDefinition.from_dict("word", SEEDED).fingerprint
        rotated = {**SEEDED, "seed": 12345}
        resp = await client.put("/v1/metrics/word", json=rotated, headers=auth("admin"))
        assert resp.status in (200, 201), await resp.text()
        served = await (await client.get("/v1/metrics/word", headers=auth("ingest"))).json()
        assert served["derived"]["seed"] == "0000000000003039"
        assert served["fingerprint"] != first
        bad = {**SEEDED, "seed": -1}
        resp = await client.put("/v1/metrics/word", json=bad, headers=auth("admin"))
        assert resp.status == 400 and "seed must be an integer" in (await resp.json())["detail"]
