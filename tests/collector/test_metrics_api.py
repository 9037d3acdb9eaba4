"""GET/PUT /v1/metrics: ETags, versions, and old versions kept apart from new ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from ldpkit.metrics import MetricDefinition

from .helpers import (
    METRICS,
    auth,
    batch,
    block_of,
    definition,
    estimates,
    grr_reports,
    make_config,
    post_batch,
    running,
)


async def put(
    client: TestClient, name: str, body: Any, *, content_type: str = "application/json"
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = await client.put(
        f"/v1/metrics/{name}", data=data, headers={**auth("admin"), "Content-Type": content_type}
    )
    return resp.status, await resp.json()


async def test_list_serves_config_definitions(client: TestClient) -> None:
    resp = await client.get("/v1/metrics", headers=auth("ingest"))
    assert resp.status == 200
    body = await resp.json()
    served = {m["name"]: m for m in body["metrics"]}
    assert set(served) == set(METRICS)
    for name in METRICS:
        assert served[name] == definition(name).to_dict()
        # What a client rebuilds from the served form has the same fingerprint.
        again = MetricDefinition.from_dict(name, served[name])
        assert again.fingerprint == served[name]["fingerprint"]


async def test_client_parses_the_listing(client: TestClient) -> None:
    from ldpkit.client.protocol import parse_definitions

    resp = await client.get("/v1/metrics", headers=auth("ingest"))
    parsed, warnings = parse_definitions(await resp.read())
    assert warnings == []
    assert {name: d.fingerprint for name, d in parsed.items()} == {
        name: definition(name).fingerprint for name in METRICS
    }


async def test_etag_and_304(client: TestClient) -> None:
    resp = await client.get("/v1/metrics", headers=auth("read"))
    etag = resp.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"')
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = await client.get("/v1/metrics", headers={**auth("read"), "If-None-Match": header})
        assert again.status == 304, header
        assert again.headers["ETag"] == etag
        assert await again.read() == b""
    other = await client.get("/v1/metrics", headers={**auth("read"), "If-None-Match": '"stale"'})
    assert other.status == 200
    one = await client.get("/v1/metrics/theme", headers=auth("read"))
    assert one.status == 200 and (await one.json())["name"] == "theme"
    cached = await client.get(
        "/v1/metrics/theme", headers={**auth("read"), "If-None-Match": one.headers["ETag"]}
    )
    assert cached.status == 304
    # A change makes a new ETag.
    status, _ = await put(
        client, "extra", {"categories": ["p", "q"], "epsilon": 1.0, "mechanism": "grr"}
    )
    assert status == 201
    changed = await client.get("/v1/metrics", headers={**auth("read"), "If-None-Match": etag})
    assert changed.status == 200 and changed.headers["ETag"] != etag


async def test_unknown_metric_is_404(client: TestClient) -> None:
    for path in ("/v1/metrics/nothing", "/v1/metrics/nothing/versions", "/v1/estimates/nothing"):
        resp = await client.get(path, headers=auth("admin"))
        assert resp.status == 404
        assert (await resp.json())["error"] == "unknown_metric"


async def test_new_version_is_kept_apart_from_the_old(client: TestClient) -> None:
    old = definition("theme")
    await post_batch(client, batch(block_of("theme", grr_reports([0, 1, 2]))))
    # Same parameters, new description: same version.
    status, answer = await put(client, "theme", {**METRICS["theme"], "description": "UI theme"})
    assert status == 200 and answer["outcome"] == "updated"
    assert answer["definition"]["fingerprint"] == old.fingerprint
    status, answer = await put(client, "theme", {**METRICS["theme"], "description": "UI theme"})
    assert status == 200 and answer["outcome"] == "unchanged"
    # New epsilon: a new version becomes current; the old one stays known.
    new_spec = {**METRICS["theme"], "epsilon": 2.0}
    status, answer = await put(client, "theme", new_spec)
    assert status == 201 and answer["outcome"] == "new_version"
    assert answer["previous_version"] == old.fingerprint
    new_fp = answer["definition"]["fingerprint"]
    assert new_fp != old.fingerprint
    assert new_fp == MetricDefinition.from_dict("theme", new_spec).fingerprint

    resp = await client.get("/v1/metrics/theme", headers=auth("ingest"))
    assert (await resp.json())["fingerprint"] == new_fp
    resp = await client.get("/v1/metrics/theme/versions", headers=auth("read"))
    versions = await resp.json()
    assert versions["current"] == new_fp
    assert [v["fingerprint"] for v in versions["versions"]] == [old.fingerprint, new_fp]

    # Reports of both versions are accepted and never mixed.
    await post_batch(client, batch(block_of("theme", grr_reports([3] * 5), fingerprint=new_fp)))
    status, answer = await post_batch(client, batch(block_of("theme", grr_reports([1]))))
    assert answer["accepted"] == 1
    _, est = await estimates(client, "theme")
    assert (est["version"], est["n"], est["epsilon"]) == (new_fp, 5, 2.0)
    _, est = await estimates(client, "theme", version=old.fingerprint)
    assert (est["version"], est["n"], est["epsilon"]) == (old.fingerprint, 4, 1.0)

    # Going back to the old parameters makes the old version current again.
    status, answer = await put(client, "theme", {**METRICS["theme"], "description": "UI theme"})
    assert status == 200 and answer["outcome"] == "reverted"
    _, est = await estimates(client, "theme")
    assert (est["version"], est["n"]) == (old.fingerprint, 4)


async def test_versions_survive_a_restart(database: Path) -> None:
    config = make_config(database)
    async with running(config) as client:
        status, answer = await put(client, "theme", {**METRICS["theme"], "epsilon": 3.0})
        new_fp = answer["definition"]["fingerprint"]
    # The config still says epsilon 1.0: restarting applies it (a PUT by config), and
    # the API-made version stays known.
    async with running(config) as client:
        resp = await client.get("/v1/metrics/theme/versions", headers=auth("read"))
        versions = await resp.json()
        assert versions["current"] == definition("theme").fingerprint
        assert new_fp in [v["fingerprint"] for v in versions["versions"]]
        status, _ = await post_batch(
            client, batch(block_of("theme", grr_reports([1]), fingerprint=new_fp))
        )
        assert status == 200
        _, est = await estimates(client, "theme", version=new_fp)
        assert est["n"] == 1


@pytest.mark.parametrize(
    ("body", "error", "word"),
    [
        (b"{not json", "bad_request", "JSON"),
        (b"[1, 2]", "bad_request", "object"),
        ({"categories": ["a", "b"]}, "invalid_definition", "epsilon"),
        ({"categories": ["a", "b"], "epsilon": -1}, "invalid_definition", "epsilon"),
        ({"categories": ["a"], "epsilon": 1.0}, "invalid_definition", "categories"),
        ({"categories": ["a", "b"], "epsilon": 1.0, "bogus": 1}, "invalid_definition", "bogus"),
        (
            {"categories": ["a", "b"], "epsilon": 1.0, "mechanism": "nope"},
            "invalid_definition",
            "nope",
        ),
        ({"kind": "numeric", "epsilon": 1.0}, "invalid_definition", "bounds"),
        (
            {"categories": ["a", "b"], "epsilon": 1.0, "bucket": "year"},
            "invalid_definition",
            "bucket",
        ),
        ({"name": "other", "categories": ["a", "b"], "epsilon": 1.0}, "invalid_definition", "name"),
    ],
)
async def test_put_rejects_bad_definitions(
    client: TestClient, body: Any, error: str, word: str
) -> None:
    status, answer = await put(client, "newmetric", body)
    assert status == 400
    assert answer["error"] == error
    assert word in answer["detail"]


async def test_put_checks_name_and_content_type(client: TestClient) -> None:
    status, answer = await put(client, "Bad-Name", {"categories": ["a", "b"], "epsilon": 1.0})
    assert status == 400 and "name" in answer["detail"]
    status, answer = await put(
        client, "fine", b'{"categories": ["a", "b"], "epsilon": 1.0}', content_type="text/plain"
    )
    assert status == 415 and answer["error"] == "unsupported_media_type"


async def test_store_failures_answer_503_through_the_error_middleware(tmp_path: Path) -> None:
    """The service raises the store's domain error; the middleware alone makes it HTTP."""
    from ldpkit.collector.sqlite_store import SQLiteStore
    from ldpkit.errors import StoreError

    class Failing(SQLiteStore):
        broken = False  # after startup (which puts the config's metrics)

        async def put_metric(self, *args: Any, **kw: Any) -> Any:
            if self.broken:
                raise StoreError("disk full")
            return await super().put_metric(*args, **kw)

        async def retire_metric(self, *args: Any, **kw: Any) -> Any:
            if self.broken:
                raise StoreError("disk full")
            return await super().retire_metric(*args, **kw)

    config = make_config(tmp_path / "c.sqlite3")
    store = Failing(config.database)
    async with running(config, store=store) as client:
        store.broken = True
        status, body = await put(client, "fresh", {"categories": ["a", "b"], "epsilon": 1.0})
        assert (status, body["error"]) == (503, "store_unavailable")
        assert "disk full" in body["detail"]
        resp = await client.delete("/v1/metrics/theme", headers=auth("admin"))
        assert resp.status == 503 and resp.headers["Retry-After"] == str(config.retry_after)
        resp = await client.get("/v1/estimates/nosuch", headers=auth("read"))
        assert resp.status == 404 and (await resp.json())["error"] == "unknown_metric"
