"""Forged reports against a real collector (issue 26): what a device token may send, what
screening holds, and what an admin does with it, with exact totals after every step.

The app runs as it is served (aiohttp's test client, a real SQLite store), screening at the
default false-alarm rate; one test runs ``ldpkit serve`` itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.collector.keys import COLLECTOR
from ldpkit.metrics import MetricDefinition
from ldpkit.screening import DEFAULT_FALSE_ALARM
from tests.harness import running_collector

from .helpers import auth, estimates, make_config, running, today, write_toml
from .hostile import counter, prometheus, request
from .hostile import post_batch as post_to


def names(d: int) -> list[str]:
    return [f"c{i}" for i in range(d)]


METRICS: dict[str, dict[str, Any]] = {
    "theme": {"categories": names(4), "epsilon": 1.0, "mechanism": "grr"},  # cap 1 a day
    "flags": {"categories": names(16), "epsilon": 1.0, "mechanism": "oue"},
    "pick": {"categories": names(32), "epsilon": 1.0, "mechanism": "grr"},
    "hourly": {"categories": names(32), "epsilon": 1.0, "mechanism": "grr", "bucket": "hour"},
    "weekly": {  # 2 fresh reports a day, 7 days a bucket: cap 14
        "categories": names(4),
        "epsilon": 0.5,
        "budget": 1.0,
        "mechanism": "grr",
        "bucket": "week",
    },
}
FORWARDED = {"source_header": "X-Forwarded-For", "trusted_proxies": ["127.0.0.1/32"]}


def definition(name: str) -> MetricDefinition:
    return MetricDefinition.from_dict(name, METRICS[name])


def sealed(name: str, reports: np.ndarray, *, batch_id: bytes | None = None) -> bytes:
    d = definition(name)
    block = wire.sealed_block(name, d.fingerprint, d.bucket.start(today()), reports)
    return wire.encode_sealed_batch(batch_id or os.urandom(16), [block])


def grr(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype="<u4")


def all_bits(n: int) -> np.ndarray:
    """``n`` OUE reports of metric flags with every bit set."""
    dtype = definition("flags").mechanism_instance.report_dtype
    return np.frombuffer(b"\xff" * (n * dtype.itemsize), dtype=dtype)


def perturbed(name: str, n: int, seed: int) -> np.ndarray:
    d = definition(name)
    rng = np.random.default_rng(seed)
    return np.asarray(d.mechanism_instance.perturb(rng.integers(0, 4, n), rng=rng))


@pytest.fixture
async def client(database: Path) -> AsyncIterator[TestClient]:
    config = make_config(
        database, metrics=METRICS, screen_false_alarm=DEFAULT_FALSE_ALARM, **FORWARDED
    )
    async with running(config) as c:
        yield c


async def post(
    client: TestClient, body: bytes, token: str = "ingest", source: str = "192.0.2.7"
) -> tuple[int, Any]:
    headers = {**auth(token), "Content-Type": wire.CONTENT_TYPE, "X-Forwarded-For": source}
    resp = await client.post("/v1/reports", data=body, headers=headers)
    return resp.status, await resp.json()


async def n_of(client: TestClient, name: str) -> int:
    status, answer = await estimates(client, name)
    assert status == 200, answer
    return int(answer["n"])


async def admin(client: TestClient, method: str, path: str) -> tuple[int, Any]:
    resp = await client.request(method, path, headers=auth("admin"))
    return resp.status, await resp.json()


async def held_records(client: TestClient) -> list[dict[str, Any]]:
    status, answer = await admin(client, "GET", "/v1/admin/held?limit=1000")
    assert status == 200, answer
    records: list[dict[str, Any]] = answer["held"]
    return records


async def counters(client: TestClient) -> str:
    return await (await client.get("/metrics")).text()


# --- the device cap -----------------------------------------------------------------------
async def test_a_device_batch_over_the_cap_is_refused_whole(client: TestClient) -> None:
    two = sealed("theme", grr([0, 1]))
    status, answer = await post(client, two)
    assert status == 400, answer
    assert answer["error"] == "over_device_cap"
    assert (answer["metric"], answer["cap"]) == ("theme", 1)
    assert "at most 1" in answer["detail"] and "relay token" in answer["detail"]
    assert await n_of(client, "theme") == 0  # nothing of it stored
    # Two blocks of one version and bucket add up.
    d = definition("theme")
    split = [wire.sealed_block("theme", d.fingerprint, today(), grr([v])) for v in (0, 1)]
    assert (await post(client, wire.encode_sealed_batch(os.urandom(16), split)))[0] == 400
    # The collector keeps serving: one device's batch, and the same batch by a relay.
    assert await post(client, sealed("theme", grr([2]))) == (
        200,
        {"accepted": 1, "duplicates": 0, "held": 0, "rejected": []},
    )
    assert (await post(client, two, token="relay"))[1]["accepted"] == 2
    assert await n_of(client, "theme") == 3
    text = await counters(client)
    assert 'ldpkit_reports_refused_total{metric="theme",reason="over_device_cap"} 4.0' in text
    assert 'ldpkit_batches_total{outcome="over_device_cap"} 2.0' in text


async def test_the_cap_is_what_one_device_may_queue_per_bucket(client: TestClient) -> None:
    """A week bucket with a day's budget of two reports: 14 fit, 15 do not."""
    assert definition("weekly").device_cap == 14
    values = list(range(4)) * 4
    assert (await post(client, sealed("weekly", grr(values[:15]))))[0] == 400
    assert (await post(client, sealed("weekly", grr(values[:14]))))[1]["accepted"] == 14


async def test_a_retry_of_a_batch_stored_before_is_a_duplicate_even_over_a_lowered_cap(
    client: TestClient,
) -> None:
    spec = dict(METRICS["theme"], budget=2.0)
    resp = await client.put("/v1/metrics/theme", json=spec, headers=auth("admin"))
    assert resp.status == 200  # the budget is no parameter of the version: same fingerprint
    body = sealed("theme", grr([0, 1]))
    assert (await post(client, body))[1]["accepted"] == 2
    resp = await client.put("/v1/metrics/theme", json=METRICS["theme"], headers=auth("admin"))
    assert resp.status == 200
    assert (await post(client, sealed("theme", grr([0, 1]))))[0] == 400  # the cap is 1 again
    assert (await post(client, body))[1] == {
        "accepted": 0,
        "duplicates": 2,
        "held": 0,
        "rejected": [],
    }
    assert await n_of(client, "theme") == 2


# --- sealed batch ids replayed with other content ------------------------------------------
def two_blocks(batch_id: bytes, first: Any, second: list[int]) -> bytes:
    """A sealed batch of metric pick: ``first`` in today's bucket, ``second`` in yesterday's."""
    fp, day = definition("pick").fingerprint, today()
    blocks = [wire.sealed_block("pick", fp, day, grr(first))]
    if second:
        blocks.append(wire.sealed_block("pick", fp, day - 86400, grr(second)))
    return wire.encode_sealed_batch(batch_id, blocks)


async def test_a_batch_id_replayed_with_other_content_claims_no_more_duplicates(
    client: TestClient,
) -> None:
    """10 reports counted under one batch id; the id replayed with 1000 (and a block more):
    the answer's duplicates are the 10 counted, the other 990 + 500 are refused as
    ``batch_reused``; the Prometheus counters say the same; nothing is counted twice."""
    batch_id = os.urandom(16)
    status, answer = await post(client, two_blocks(batch_id, perturbed("pick", 10, 1), []), "relay")
    assert (status, answer["accepted"], answer["held"]) == (200, 10, 0), answer
    before = await counters(client)
    status, answer = await post(client, two_blocks(batch_id, [2] * 1000, [3] * 500), "relay")
    assert status == 200, answer
    assert (answer["accepted"], answer["duplicates"]) == (0, 10), answer
    rejected = answer["rejected"]
    assert answer["accepted"] + answer["duplicates"] + len(rejected) == 1500
    assert {r["error"] for r in rejected} == {"batch_reused"}
    assert sorted(r["index"] for r in rejected) == list(range(10, 1500))
    assert "already used for other content" in rejected[0]["detail"]
    after = await counters(client)
    dup = "ldpkit_reports_duplicate_total"
    assert counter(after, dup) - counter(before, dup) == 10
    rejected_total = "ldpkit_reports_rejected_total"
    reused = [counter(t, rejected_total, reason="batch_reused") for t in (before, after)]
    assert reused[1] - reused[0] == 1490
    assert await n_of(client, "pick") == 10
    # A device token replaying its one counted report as 1000 (over the cap): the same.
    body = sealed("theme", grr([0]), batch_id=batch_id[::-1])
    assert (await post(client, body))[1]["accepted"] == 1
    status, answer = await post(client, sealed("theme", grr([1] * 1000), batch_id=batch_id[::-1]))
    assert (status, answer["duplicates"], len(answer["rejected"])) == (200, 1, 999), answer
    # An honest retry of the same bytes is still a duplicate, whole.
    assert (await post(client, body))[1] == {
        "accepted": 0,
        "duplicates": 1,
        "held": 0,
        "rejected": [],
    }
    assert await n_of(client, "theme") == 1


# --- the per-source rate limit ------------------------------------------------------------
async def test_device_batches_are_rate_limited_per_source(database: Path) -> None:
    config = make_config(
        database, metrics=METRICS, device_batches_per_minute=60, device_burst=3, **FORWARDED
    )
    async with running(config) as client:
        limiter = client.app[COLLECTOR].admission.sources.limiter
        now = [1000.0]
        limiter._clock = lambda: now[0]
        for _ in range(3):
            assert (await post(client, sealed("theme", grr([1]))))[0] == 200
        resp = await client.post(
            "/v1/reports",
            data=sealed("theme", grr([1])),
            headers={
                **auth("ingest"),
                "Content-Type": wire.CONTENT_TYPE,
                "X-Forwarded-For": "192.0.2.7",
            },
        )
        assert resp.status == 429 and resp.headers["Retry-After"] == "1"
        assert (await resp.json())["error"] == "source_rate_limited"
        # Another source, and any relay, are not affected; the source's bucket refills.
        assert (await post(client, sealed("theme", grr([1])), source="192.0.2.8"))[0] == 200
        assert (await post(client, sealed("theme", grr([1] * 5)), "relay"))[0] == 200
        now[0] += 1.0
        assert (await post(client, sealed("theme", grr([1]))))[0] == 200
        assert await n_of(client, "theme") == 3 + 1 + 5 + 1
        text = await counters(client)
        assert 'ldpkit_batches_total{outcome="source_rate_limited"} 1.0' in text
        assert "192.0.2.7" not in text


# --- screening: batches -------------------------------------------------------------------
async def test_all_bits_set_oue_batches_are_held_not_counted(client: TestClient) -> None:
    honest = perturbed("flags", 300, seed=1)
    assert (await post(client, sealed("flags", honest), "relay"))[1]["held"] == 0
    body = sealed("flags", all_bits(200))
    status, answer = await post(client, body, "relay", source="198.51.100.1")
    assert (status, answer["accepted"], answer["held"]) == (200, 200, 200)
    assert await n_of(client, "flags") == 300
    again = await post(client, body, "relay", source="198.51.100.1")  # a retry
    assert again[1] == {"accepted": 0, "duplicates": 200, "held": 0, "rejected": []}
    (record,) = await held_records(client)
    assert (record["metric"], record["n"], record["origin"]) == ("flags", 200, "batch")
    assert record["version"] == definition("flags").fingerprint and record["test"]
    assert record["released"] is None and record["day"] % 86400 == 0
    text = await counters(client)
    label = f'metric="flags",reason="{record["test"]}"'
    assert f"ldpkit_reports_held_total{{{label}}} 200.0" in text
    assert 'ldpkit_reports_accepted_total{metric="flags"} 300.0' in text


async def test_one_device_batch_of_all_bits_set_is_held_by_its_sender_window(
    client: TestClient,
) -> None:
    """Where one report per batch passes the batch's own laws, the sender's pooled ones
    fail (at its 32nd report at the latest: 32 of 32 reports support every item, 2^-32)."""
    answers = [(await post(client, sealed("flags", all_bits(1))))[1] for _ in range(40)]
    first_held = next(i for i, a in enumerate(answers) if a["held"])
    assert first_held < 32 and all(a["accepted"] == 1 for a in answers)
    assert [a["held"] for a in answers[first_held:]] == [1] * (40 - first_held)
    assert await n_of(client, "flags") == 0  # the counted ones moved to held
    assert sum(r["n"] for r in await held_records(client)) == 40


# --- screening: sender windows, an admin's release and drop, exact totals ------------------
async def send_mga(client: TestClient, source: str, batches: int) -> list[dict[str, Any]]:
    """The maximal gain attack on GRR, one report per device batch: every report says item 0."""
    return [
        (await post(client, sealed("pick", grr([0])), source=source))[1] for _ in range(batches)
    ]


async def test_a_forging_sender_is_held_and_what_it_counted_moves(client: TestClient) -> None:
    honest = perturbed("pick", 2000, seed=3)
    assert (await post(client, sealed("pick", honest), "relay", source="203.0.113.9"))[1] == {
        "accepted": 2000,
        "duplicates": 0,
        "held": 0,
        "rejected": [],
    }
    answers = await send_mga(client, "192.0.2.66", 20)
    first = next(i for i, a in enumerate(answers) if a["held"])
    assert first >= 1 and all(a["held"] == 0 for a in answers[:first])
    assert all(a["held"] == 1 for a in answers[first:])
    # Every forged report is held: the window's counted ones moved out of the estimate.
    assert await n_of(client, "pick") == 2000
    records = await held_records(client)
    assert sum(r["n"] for r in records) == 20 and {r["origin"] for r in records} == {"sender"}
    assert any("sender's window failed" in r["reason"] for r in records)
    text = await counters(client)
    label = f'metric="pick",reason="{records[0]["test"]}"'
    assert f"ldpkit_reports_held_total{{{label}}} 20.0" in text
    # Honest devices from other sources are still counted.
    for k in range(5):
        one = perturbed("pick", 1, seed=100 + k)
        assert (await post(client, sealed("pick", one), source=f"192.0.2.{100 + k}"))[1][
            "held"
        ] == 0
    assert await n_of(client, "pick") == 2005

    # The admin: list, release, release again, drop, with exact totals after each step.
    total = 2005 + 20
    held = {r["id"]: r["n"] for r in records}
    first_id, *others = sorted(held)
    assert await admin(client, "POST", f"/v1/admin/held/{first_id}/release") == (
        200,
        {"outcome": "released", "id": first_id},
    )
    assert await n_of(client, "pick") == 2005 + held[first_id]
    assert (await admin(client, "POST", f"/v1/admin/held/{first_id}/release"))[1]["outcome"] == (
        "unchanged"
    )
    assert await n_of(client, "pick") == 2005 + held[first_id]
    status, answer = await admin(client, "DELETE", f"/v1/admin/held/{first_id}")
    assert (status, answer["error"]) == (409, "held_released")
    dropped = 0
    for record in others:
        assert await admin(client, "DELETE", f"/v1/admin/held/{record}") == (
            200,
            {"outcome": "dropped", "id": record},
        )
        dropped += held[record]
        assert await n_of(client, "pick") == 2005 + held[first_id]
    assert dropped + held[first_id] + 2005 == total
    assert (await admin(client, "DELETE", f"/v1/admin/held/{others[0]}"))[0] == 404
    assert (await admin(client, "POST", "/v1/admin/held/999999/release"))[0] == 404
    assert [r["id"] for r in await held_records(client)] == [first_id]


async def test_a_memoized_report_repeated_in_every_hour_is_not_held(client: TestClient) -> None:
    """A memoizing device queues its day's report again in each hour bucket, byte for byte
    (docs/privacy.md): 24 copies of one report are not 24 independent reports, so a sender's
    window tests each bucket on its own (JS client's weeks test found the false alarm)."""
    d = definition("hourly")
    now = today()
    for hour in range(24):
        block = wire.sealed_block("hourly", d.fingerprint, d.bucket.start(now - 3600 * hour),
                                  grr([0]))  # fmt: skip
        status, answer = await post(client, wire.encode_sealed_batch(os.urandom(16), [block]))
        assert (status, answer["held"]) == (200, 0), (hour, answer)
    assert await held_records(client) == []
    assert await n_of(client, "hourly") == 24
    # The same reports in one bucket (a forger's, not a device's) are still held.
    answers = [
        (await post(client, sealed("hourly", grr([0])), source="192.0.2.55"))[1] for _ in range(20)
    ]
    assert answers[-1]["held"] == 1


async def test_the_senders_drift_check_names_no_address(client: TestClient) -> None:
    await post(client, sealed("pick", perturbed("pick", 3000, seed=5)), "relay", "203.0.113.9")
    await send_mga(client, "192.0.2.66", 10)
    status, answer = await admin(client, "GET", "/v1/admin/senders")
    assert status == 200
    text = json.dumps(answer)
    assert "203.0.113.9" not in text and "192.0.2.66" not in text and "127.0.0.1" not in text
    windows = {w["n"]: w for w in answer["senders"]}
    relay, forger = windows[3000], windows[10]
    assert relay["held"] is False and relay["finding"] is None
    assert forger["held"] is True and forger["finding"]["test"]
    assert len(relay["sender"]) == 16 and relay["sender"] != forger["sender"]
    drift = forger["drift"]
    assert drift["test"] == "chi-square" and drift["dof"] == 32
    assert drift["largest"]["item"] == 0 and drift["largest"]["z"] > 5
    assert drift["p_value"] < 1e-6


async def test_held_records_survive_a_restart(database: Path) -> None:
    config = make_config(database, metrics=METRICS, screen_false_alarm=DEFAULT_FALSE_ALARM)
    async with running(config) as client:
        assert (await post(client, sealed("flags", all_bits(100)), "relay"))[1]["held"] == 100
        records = await held_records(client)
    async with running(config) as client:
        assert await held_records(client) == records
        record = records[0]["id"]
        assert (await admin(client, "POST", f"/v1/admin/held/{record}/release"))[0] == 200
        assert await n_of(client, "flags") == 100


def test_against_a_real_ldpkit_serve(tmp_path: Path) -> None:
    """The default config (screening on), a device over its cap, a forged batch held,
    released by an admin, and the counters."""
    config = write_toml(tmp_path / "collector.toml", metrics=METRICS, screen_false_alarm=1e-4)
    with running_collector(config, cwd=tmp_path) as collector:
        url = collector.url
        refused = post_to(url, sealed("theme", grr([0, 1])), token="ingest")
        assert refused.status == 400 and json.loads(refused.body)["error"] == "over_device_cap"
        assert request(url, "GET", "/healthz").status == 200
        assert (
            json.loads(post_to(url, sealed("theme", grr([3])), token="ingest").body)["accepted"]
            == 1
        )
        held = json.loads(post_to(url, sealed("flags", all_bits(64)), token="relay").body)
        assert (held["accepted"], held["held"]) == (64, 64)
        listing = request(url, "GET", "/v1/admin/held", headers=auth("admin"))
        (record,) = json.loads(listing.body)["held"]
        path = f"/v1/admin/held/{record['id']}/release"
        assert request(url, "POST", path, headers=auth("admin")).status == 200
        answer = request(url, "GET", "/v1/estimates/flags", headers=auth("read"))
        assert json.loads(answer.body)["n"] == 64
        text = prometheus(url)
        assert f'ldpkit_reports_held_total{{metric="flags",reason="{record["test"]}"}} 64.0' in text
        assert 'ldpkit_reports_refused_total{metric="theme",reason="over_device_cap"} 2.0' in text


def test_a_source_is_a_keyed_id_of_its_address() -> None:
    """The peer address (an IPv6 one by its /64), or a trusted proxy's header; kept only
    as an HMAC under a key of this process."""
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    from ldpkit.collector.config import config_from_dict
    from ldpkit.collector.sources import Sources

    def source_of(sources: Sources, peer: str, **headers: str) -> bytes:
        request = make_mocked_request("POST", "/v1/reports", headers=headers)
        with mock.patch.object(type(request), "remote", new=peer):
            return sources.source(request)

    direct = Sources(config_from_dict({}, environ={}))
    a = source_of(direct, "192.0.2.1")
    assert a == source_of(direct, "192.0.2.1") and a != source_of(direct, "192.0.2.2")
    assert b"192.0.2.1" not in a and len(a) == 8
    assert a != source_of(Sources(config_from_dict({}, environ={})), "192.0.2.1")  # another key
    assert source_of(direct, "2001:db8::1") == source_of(direct, "2001:db8::ffff:2")  # a /64
    assert source_of(direct, "2001:db8::1") != source_of(direct, "2001:db8:0:1::1")
    assert source_of(direct, "192.0.2.1", **{"X-Forwarded-For": "198.51.100.3"}) == a
    proxied = Sources(config_from_dict({"collector": FORWARDED}, environ={}))
    via = source_of(proxied, "127.0.0.1", **{"X-Forwarded-For": "203.0.113.5, 198.51.100.3"})
    assert via == source_of(proxied, "198.51.100.3")  # the address the proxy appended
    # A header from a peer that is not a trusted proxy is ignored.
    assert source_of(proxied, "192.0.2.9", **{"X-Forwarded-For": "198.51.100.3"}) != via


def test_sender_windows_are_bounded() -> None:
    from ldpkit.aggregate import Aggregate
    from ldpkit.collector.holding import Senders
    from ldpkit.collector.store import CheckedReports

    d = definition("pick")
    m = d.mechanism_instance
    reports = perturbed("pick", 100, seed=9)

    def block(bucket: int) -> CheckedReports:
        return CheckedReports(d.fingerprint, bucket, m, None, reports, m.aggregate(reports))

    by_count = Senders(1e-4, 3600, max_windows=2, max_bytes=2**20)
    for sender in (b"a", b"b", b"c"):
        by_count.observe(sender, [block(0)])
    assert [e["sender"] for e, _ in by_count.listing()] == [b"b".hex(), b"c".hex()]
    # Each window keeps one sums vector per bucket (and one for what it holds).
    by_bytes = Senders(1e-4, 3600, max_windows=100, max_bytes=8 * 32 * 5)
    by_bytes.observe(b"a", [block(0), block(3600)])  # 3 vectors
    by_bytes.observe(b"b", [block(0)])  # 2 more: 5
    assert len(by_bytes.listing()) == 2
    by_bytes.observe(b"b", [block(3600)])  # 6: the least recently used goes
    assert [e["sender"] for e, _ in by_bytes.listing()] == [b"b".hex()]
    assert isinstance(block(0).aggregate, Aggregate)


async def test_a_move_that_fails_leaves_the_reports_counted(database: Path) -> None:
    """A failed window whose move to held fails: its reports stay counted (the totals are
    exact either way), and the window is tested again at its sender's next batch."""
    from ldpkit.collector.sqlite_store import SQLiteStore
    from ldpkit.errors import StoreError

    class FailingMove(SQLiteStore):
        failures = 1

        async def move_to_held(self, moved: Any) -> None:
            if self.failures:
                self.failures -= 1
                raise StoreError("disk full")
            await super().move_to_held(moved)

    config = make_config(database, metrics=METRICS, screen_false_alarm=DEFAULT_FALSE_ALARM)
    store = FailingMove(database)
    async with running(config, store=store) as client:
        sent = 0
        while store.failures:  # until the window failed and its move failed
            assert (await send_mga(client, "192.0.2.66", 1))[0] == {
                "accepted": 1,
                "duplicates": 0,
                "held": 0,
                "rejected": [],
            }
            sent += 1
            assert sent < 100
        assert await n_of(client, "pick") == sent and await held_records(client) == []
        assert (await send_mga(client, "192.0.2.66", 1))[0]["held"] == 1  # tested again
        assert await n_of(client, "pick") == 0
        assert sum(r["n"] for r in await held_records(client)) == sent + 1
