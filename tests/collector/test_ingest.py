"""POST /v1/reports: per-report checks, dedupe, durability across restarts, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import msgpack
import numpy as np
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.collector.config import CollectorConfig
from ldpkit.collector.sqlite_store import SQLiteStore
from ldpkit.collector.store import CheckedReports, IngestResult
from ldpkit.metrics import Period

from .helpers import (
    auth,
    batch,
    block_of,
    definition,
    estimates,
    grr_reports,
    make_config,
    new_ids,
    post_batch,
    running,
    today,
    without_as_of,
)


async def test_good_batch_is_stored(client: TestClient) -> None:
    status, answer = await post_batch(client, batch(block_of("theme", grr_reports([0, 3]))))
    assert status == 200
    assert answer == {"accepted": 2, "duplicates": 0, "held": 0, "rejected": []}
    status, est = await estimates(client, "theme")
    assert status == 200 and est["n"] == 2


async def test_empty_batch(client: TestClient) -> None:
    status, answer = await post_batch(client, batch())
    assert (status, answer) == (200, {"accepted": 0, "duplicates": 0, "held": 0, "rejected": []})


async def test_mixed_batch_names_bad_reports(client: TestClient) -> None:
    theme = definition("theme")
    day = Period.DAY.seconds
    blocks = [
        block_of("theme", grr_reports([0, 1, 7, 2, 4])),  # 0..4: 7 and 4 are outside 0..3
        block_of("nope", grr_reports([0, 1])),  # 5, 6
        block_of("theme", grr_reports([1]), fingerprint="0123456789abcdef"),  # 7
        block_of("theme", grr_reports([1]), bucket=today() + 5),  # 8: not aligned
        block_of("theme", grr_reports([1]), bucket=today() + 2 * day),  # 9: too far ahead
        block_of("theme", grr_reports([1]), bucket=today() + day),  # 10: tomorrow is fine
        wire.Block("theme", theme.fingerprint, today(), new_ids(2), b"\x00" * 6),  # 11, 12
        block_of("latency", np.array([1, -1, 0, 1], dtype=np.int8)),  # 13..16: 0 is not +-1
    ]
    status, answer = await post_batch(client, batch(*blocks))
    assert status == 200
    rejected = {r["index"]: r["error"] for r in answer["rejected"]}
    assert rejected == {
        2: "invalid_report",
        4: "invalid_report",
        5: "unknown_metric",
        6: "unknown_metric",
        7: "unknown_version",
        8: "invalid_bucket",
        9: "invalid_bucket",
        11: "invalid_report",
        12: "invalid_report",
        15: "invalid_report",
    }
    assert [r["index"] for r in answer["rejected"]] == sorted(rejected)
    assert all(r["detail"] for r in answer["rejected"])
    assert answer["accepted"] == 17 - len(rejected)
    assert answer["duplicates"] == 0
    _, est = await estimates(client, "theme")
    assert est["n"] == 3 + 1  # today's three good ones + tomorrow's
    _, est = await estimates(client, "latency")
    assert est["n"] == 3


async def test_duplicates_within_and_across_batches(client: TestClient) -> None:
    ids = new_ids(3)
    same = ids[:16]
    body = batch(
        block_of("theme", grr_reports([0, 1, 2]), ids=ids),
        block_of("theme", grr_reports([3]), ids=same),  # repeats id 0 in another block
        block_of("latency", np.array([1], dtype=np.int8), ids=same),  # and in another metric
    )
    status, answer = await post_batch(client, body)
    assert status == 200
    assert (answer["accepted"], answer["duplicates"]) == (3, 2)
    # The same batch again (a retry): all duplicates, nothing counted twice.
    status, answer = await post_batch(client, body)
    assert (answer["accepted"], answer["duplicates"], answer["rejected"]) == (0, 5, [])
    # A batch repeating one id within one block.
    twice = new_ids(1) * 2
    status, answer = await post_batch(
        client, batch(block_of("theme", grr_reports([0, 0]), ids=twice))
    )
    assert (answer["accepted"], answer["duplicates"]) == (1, 1)
    _, est = await estimates(client, "theme")
    assert est["n"] == 4
    _, est = await estimates(client, "latency")
    assert est["n"] == 0


async def test_partial_retry_aggregates_only_new_reports(client: TestClient) -> None:
    theme = definition("theme")
    mech = theme.mechanism_instance
    rng = np.random.default_rng(5)
    first = mech.perturb(rng.integers(0, 4, 500), rng=rng)
    second = mech.perturb(rng.integers(0, 4, 500), rng=rng)
    ids1, ids2 = new_ids(500), new_ids(500)
    await post_batch(client, batch(block_of("theme", first, ids=ids1)))
    # Half of the old batch again, mixed with new reports.
    mixed = np.concatenate([first[:250], second])
    status, answer = await post_batch(
        client, batch(block_of("theme", mixed, ids=ids1[: 250 * 16] + ids2))
    )
    assert status == 200
    assert (answer["accepted"], answer["duplicates"]) == (500, 250)
    _, est = await estimates(client, "theme")
    expected = mech.estimate(mech.aggregate(np.concatenate([first, second])))
    assert est["n"] == 1000
    np.testing.assert_allclose(
        [i["estimate"] for i in est["items"]], expected.frequencies, rtol=1e-12
    )


async def test_restart_keeps_everything(config: CollectorConfig) -> None:
    reports = grr_reports(np.arange(40) % 4)
    ids = new_ids(40)
    async with running(config) as client:
        _, answer = await post_batch(client, batch(block_of("theme", reports, ids=ids)))
        assert answer["accepted"] == 40
        _, before = await estimates(client, "theme", consistent=True)
    async with running(config) as client:
        _, after = await estimates(client, "theme", consistent=True)
        assert without_as_of(after) == without_as_of(before)
        # The ids survived too: a retry after the restart is still a duplicate.
        _, answer = await post_batch(client, batch(block_of("theme", reports, ids=ids)))
        assert (answer["accepted"], answer["duplicates"]) == (0, 40)


async def test_malformed_bodies_are_400_json(client: TestClient) -> None:
    theme = definition("theme")
    bad_bodies = [
        b"\xc1",  # never valid msgpack
        b"not msgpack at all",
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"v": 2, "blocks": []}),
        msgpack.packb({"v": 1, "blocks": [{"metric": "theme"}]}),
        msgpack.packb({"v": 1, "blocks": [], "extra": 1}),
        msgpack.packb(
            {
                "v": 1,
                "blocks": [
                    {
                        "metric": "theme",
                        "fp": theme.fingerprint,
                        "bucket": today(),
                        "ids": b"x" * 15,
                        "reports": b"",
                    }
                ],
            }
        ),
        batch(block_of("theme", grr_reports([1]))) + b"\x00",
        b"",
    ]
    for body in bad_bodies:
        status, answer = await post_batch(client, body)
        assert status == 400, body
        assert answer["error"] == "bad_request" and answer["detail"]


async def test_too_many_reports_in_a_batch(database: Path) -> None:
    config = make_config(database, max_reports_per_batch=10)
    async with running(config) as client:
        status, answer = await post_batch(client, batch(block_of("theme", grr_reports([0] * 11))))
        assert status == 400 and "more than 10" in answer["detail"]
        status, _ = await post_batch(client, batch(block_of("theme", grr_reports([0] * 10))))
        assert status == 200


async def test_content_type_and_size_limits(database: Path) -> None:
    config = make_config(database, max_body_bytes=4096)
    async with running(config) as client:
        body = batch(block_of("theme", grr_reports([1])))
        for content_type in ("application/json", "text/plain", "application/octet-stream"):
            status, answer = await post_batch(client, body, content_type=content_type)
            assert status == 415 and answer["error"] == "unsupported_media_type"
        for content_type in ("application/msgpack", "application/x-msgpack", wire.CONTENT_TYPE):
            status, _ = await post_batch(client, body, content_type=content_type)
            assert status == 200
        big = batch(block_of("theme", grr_reports([1] * 400)))  # 400 * 20 bytes > 4096
        status, answer = await post_batch(client, big)
        assert status == 413 and answer["error"] == "payload_too_large"

        # Without Content-Length (chunked), the limit holds while streaming.
        async def chunks() -> object:
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        resp = await client.post(
            "/v1/reports",
            data=chunks(),
            headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
        )
        assert resp.status == 413
        assert (await resp.json())["error"] == "payload_too_large"


class BlockingStore(SQLiteStore):
    """A SQLite store whose ingest waits for ``release`` (to fill the queue on purpose)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = asyncio.Event()
        self.waiting = 0

    @property
    def pending_batches(self) -> int:
        return super().pending_batches + self.waiting

    async def ingest(
        self,
        blocks: Sequence[CheckedReports],
        *,
        batch_id: bytes | None = None,
        screen: float = 0.0,
    ) -> IngestResult:
        self.waiting += 1
        try:
            await self.release.wait()
        finally:
            self.waiting -= 1
        return await super().ingest(blocks, batch_id=batch_id, screen=screen)


async def test_backpressure_answers_429(database: Path) -> None:
    config = make_config(database, max_pending_batches=2, retry_after=3)
    store = BlockingStore(database)
    async with running(config, store=store) as client:
        body = lambda: batch(block_of("theme", grr_reports([1, 2])))  # noqa: E731
        first = [asyncio.create_task(post_batch(client, body())) for _ in range(2)]
        for _ in range(200):
            if store.waiting == 2:
                break
            await asyncio.sleep(0.01)
        resp = await client.post(
            "/v1/reports",
            data=body(),
            headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
        )
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "3"
        assert (await resp.json())["error"] == "too_many_requests"
        ready = await client.get("/readyz")
        assert ready.status == 503
        store.release.set()
        results = await asyncio.gather(*first)
        assert [r[0] for r in results] == [200, 200]
        status, _ = await post_batch(client, body())
        assert status == 200
        _, est = await estimates(client, "theme")
        assert est["n"] == 6


async def test_prometheus_counts(client: TestClient) -> None:
    await post_batch(client, batch(block_of("theme", grr_reports([0, 1, 9]))))
    ids = new_ids(1)
    await post_batch(client, batch(block_of("theme", grr_reports([0]), ids=ids)))
    await post_batch(client, batch(block_of("theme", grr_reports([0]), ids=ids)))
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    assert 'ldpkit_reports_accepted_total{metric="theme"} 3.0' in text
    assert "ldpkit_reports_duplicate_total 1.0" in text
    assert 'ldpkit_reports_rejected_total{reason="invalid_report"} 1.0' in text
    assert "ldpkit_batch_seconds_count 3.0" in text
    assert "ldpkit_store_commit_seconds_count" in text
    assert 'ldpkit_http_requests_total{method="POST",route="/v1/reports",status="200"} 3.0' in text


async def test_costly_batches_count_once_through_the_fair_lane(database: Path) -> None:
    """OLH at d = 1,024, 6,000 reports: over the cost threshold, so aggregated in the fair
    lane before the store. A retry, and a batch half of old reports, count each report
    once (the precomputed aggregate, less the duplicates')."""
    from ldpkit.collector.fairness import EXPENSIVE_SECONDS
    from ldpkit.collector.ingest import aggregation_seconds
    from ldpkit.collector.keys import COLLECTOR
    from ldpkit.metrics import MetricDefinition

    spec = {"categories": [f"c{i}" for i in range(1024)], "epsilon": 1.0, "mechanism": "olh"}
    olh = MetricDefinition.from_dict("wide", spec)
    mech = olh.mechanism_instance
    assert aggregation_seconds(mech, 6000) > EXPENSIVE_SECONDS
    rng = np.random.default_rng(3)
    reports = mech.perturb(rng.integers(0, 1024, 9000), rng=rng)
    ids = new_ids(9000)

    def body(lo: int, hi: int) -> bytes:
        return batch(
            wire.make_block(
                "wide", olh.fingerprint, today(), ids[16 * lo : 16 * hi], reports[lo:hi]
            )
        )

    async with running(make_config(database, metrics={"wide": spec})) as client:
        lane = client.app[COLLECTOR].lane  # type: ignore[index]
        ran: list[int] = []
        original = lane.run

        async def counting(key: bytes, job: object) -> object:
            ran.append(1)
            return await original(key, job)  # type: ignore[arg-type]

        lane.run = counting  # type: ignore[method-assign]
        assert (await post_batch(client, body(0, 6000)))[1]["accepted"] == 6000
        assert (await post_batch(client, body(0, 6000)))[1]["duplicates"] == 6000  # a retry
        answer = (await post_batch(client, body(3000, 9000)))[1]  # half old, half new
        assert (answer["accepted"], answer["duplicates"]) == (3000, 3000)
        assert len(ran) == 3
        status, est = await estimates(client, "wide")
        assert status == 200 and est["n"] == 9000
        expected = mech.estimate(mech.aggregate(reports)).frequencies  # type: ignore[attr-defined]
        got = np.array([item["estimate"] for item in est["items"]])
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


class FailingStore(SQLiteStore):
    """A SQLite store whose ingest raises ``failure`` when it is set."""

    failure: Exception | None = None

    async def ingest(
        self,
        blocks: Sequence[CheckedReports],
        *,
        batch_id: bytes | None = None,
        screen: float = 0.0,
    ) -> IngestResult:
        if self.failure is not None:
            raise self.failure
        return await super().ingest(blocks, batch_id=batch_id, screen=screen)


async def test_refused_batches_answer_and_count_by_their_error(database: Path) -> None:
    """The service raises domain errors; their answers (status, JSON, Retry-After) and the
    ``ldpkit_batches_total`` outcomes they count under."""
    from ldpkit.errors import StoreClosed, StoreError

    config = make_config(database, accept_v1=False, retry_after=7)
    store = FailingStore(database)
    sealed = wire.encode_sealed_batch(
        new_ids(1),
        [wire.sealed_block("theme", definition("theme").fingerprint, today(), grr_reports([1]))],
    )
    async with running(config, store=store) as client:
        status, answer = await post_batch(client, batch(block_of("theme", grr_reports([1]))))
        assert (status, answer) == (
            400,
            {
                "error": "unsupported_version",
                "detail": "wire format v1 (a report id per report) is no longer accepted by "
                "this collector: send sealed v2 batches (upgrade the ldpkit client)",
            },
        )
        status, answer = await post_batch(client, b"\xc1")
        assert status == 400 and answer["error"] == "bad_request"
        store.failure = StoreError("disk full")
        resp = await client.post(
            "/v1/reports",
            data=sealed,
            headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
        )
        assert resp.status == 503 and resp.headers["Retry-After"] == "7"
        assert await resp.json() == {
            "error": "store_unavailable",
            "detail": "the store failed; the batch was not stored",
        }
        ready = await client.get("/readyz")
        assert ready.status == 503
        assert (await ready.json())["detail"] == "the store failed to store the last batch"
        store.failure = StoreClosed("the store is closed")
        resp = await client.post(
            "/v1/reports",
            data=sealed,
            headers={**auth("relay"), "Content-Type": wire.CONTENT_TYPE},
        )
        assert resp.status == 503 and resp.headers["Retry-After"] == "7"
        assert await resp.json() == {
            "error": "unavailable",
            "detail": "the collector is shutting down",
        }
        store.failure = None
        assert (await post_batch(client, sealed))[0] == 200
        text = await (await client.get("/metrics")).text()
    for outcome, count in (("bad_request", 2), ("error", 2), ("ok", 1)):
        assert f'ldpkit_batches_total{{outcome="{outcome}"}} {count}.0' in text
    assert "ldpkit_batch_seconds_count 1.0" in text


async def test_prometheus_has_the_standard_series_and_estimate_times_by_kind(
    client: TestClient,
) -> None:
    """The series prometheus_client's default registry has (process, platform, gc), the
    build's version, and the time to answer an estimates query labelled by metric kind."""
    from ldpkit import __version__

    await post_batch(client, batch(block_of("theme", grr_reports([0, 1, 1]))))
    assert (await estimates(client, "theme"))[0] == 200
    assert (await estimates(client, "latency"))[0] == 200
    text = await (await client.get("/metrics")).text()
    assert f'ldpkit_build_info{{version="{__version__}"}} 1.0' in text
    for series in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info{",
        "python_gc_collections_total{",
    ):
        assert series in text, series
    assert 'ldpkit_estimate_seconds_count{kind="categorical"} 1.0' in text
    assert 'ldpkit_estimate_seconds_count{kind="numeric"} 1.0' in text
    assert "# TYPE ldpkit_estimate_compute_seconds histogram" in text
