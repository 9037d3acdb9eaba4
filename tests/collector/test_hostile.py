"""Hostile networks and hostile clients against a real ``ldpkit serve`` (issue 11).

Each test is an attack as a hostile party would try it on loopback, with what the
collector must do instead of what it did: slow or half-sent requests are cut and
release what they held, compressed bodies cannot inflate past the memory bound, one
estimate cannot produce an unbounded answer, tokens are never echoed, bad input is a
400 (never a 500), definitions have size limits, and ``/readyz`` tells a load balancer
when every batch fails. Every wait is bounded; nothing depends on the machine's speed
except generous upper bounds (tens of seconds for things that take one).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from ldpkit import wire
from ldpkit.collector.config import CollectorConfig
from ldpkit.collector.launcher import RunningCollector, running_collector
from ldpkit.metrics import Period

from ..readiness import wait_until
from .helpers import (
    ADMIN,
    INGEST,
    METRICS,
    READ,
    auth,
    batch,
    block_of,
    grr_reports,
    write_toml,
)
from .hostile import Raw, counter, head, post_batch, prometheus, request

MAX_BODY = 1 << 20
HOSTILE = {
    "header_timeout": 1,
    "upload_grace": 1,
    "min_upload_rate": 4096,
    "max_body_bytes": MAX_BODY,
    "max_pending_bytes": 8 * MAX_BODY,
    "max_estimate_items": 10_000,
    "catalog_refresh_seconds": 3600,
}
WIDE = [f"c{i}" for i in range(4096)]
SERVED_METRICS: dict[str, Any] = {
    **METRICS,
    "wide": {"categories": WIDE, "epsilon": 1.0, "mechanism": "grr"},
}
JSON_TYPE = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCollector]:
    """One collector for the module, with short timeouts and small limits, access log on."""
    directory = tmp_path_factory.mktemp("hostile")
    config = write_toml(directory / "collector.toml", metrics=SERVED_METRICS, **HOSTILE)
    with running_collector(config, cwd=directory, env=_env(), access_log=True) as c:
        yield c


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}


def _good_batch(n: int = 3) -> bytes:
    return batch(block_of("theme", grr_reports(np.arange(n) % 4)))


def _log(c: RunningCollector) -> str:
    return "".join(c.log)


# --- 1. slow senders ---------------------------------------------------------------------
def test_defaults_are_safe() -> None:
    config = CollectorConfig()
    assert config.header_timeout == 30
    assert config.upload_grace == 10 and config.min_upload_rate == 4096
    assert config.max_estimate_items == 250_000


def test_half_sent_headers_are_closed(hostile: RunningCollector) -> None:
    """300 connections that never finish their request head are closed after
    ``header_timeout`` (1 s here), and the collector keeps answering meanwhile."""
    conns = [Raw(hostile.url) for _ in range(300)]
    try:
        for i, conn in enumerate(conns):
            conn.send(
                b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + str(i).encode()
            )
        assert post_batch(hostile.url, _good_batch()).status == 200
        closed = [conn.closed_within(30.0) for conn in conns]
        assert all(closed), f"{closed.count(False)} of 300 half-open connections still open"
    finally:
        for conn in conns:
            conn.close()
    assert post_batch(hostile.url, _good_batch()).status == 200


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_slow_uploads_hold_nothing_and_are_cut(hostile: RunningCollector, chunked: bool) -> None:
    """16 senders announce the largest body and send a byte now and then. They used to
    hold max_pending_bytes between them (everyone else: 429). Now a body holds only what
    has arrived, so legitimate batches go through at once, and a body slower than
    ``min_upload_rate`` after ``upload_grace`` is answered 408 and its connection closed."""
    headers = {**auth("relay"), "Content-Type": wire.CONTENT_TYPE}
    if chunked:
        headers["Transfer-Encoding"] = "chunked"
    else:
        headers["Content-Length"] = str(MAX_BODY)
    slow = [Raw(hostile.url) for _ in range(16)]
    try:
        for conn in slow:
            conn.send(
                head("POST", "/v1/reports", headers) + (b"1\r\n\x82\r\n" if chunked else b"\x82")
            )
        time.sleep(0.2)  # the collector has admitted all of them
        statuses = [post_batch(hostile.url, _good_batch()).status for _ in range(5)]
        assert statuses == [200] * 5
        for conn in slow:  # a byte now and then: far below the minimum rate
            conn.send(b"1\r\n\xa1\r\n" if chunked else b"\xa1")
        for conn in slow:
            answer = conn.answer(timeout=30.0)
            assert answer is not None and answer.status == 408, answer
            assert answer.json()["error"] == "request_timeout"
            assert conn.closed_within(30.0)
    finally:
        for conn in slow:
            conn.close()
    text = prometheus(hostile.url)
    assert counter(text, "ldpkit_http_requests_total", status="408") >= 16
    assert post_batch(hostile.url, _good_batch()).status == 200


# --- 2. compressed bodies ----------------------------------------------------------------
def _high_water_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_compressed_bodies_cannot_inflate_past_the_memory_bound(
    hostile: RunningCollector,
) -> None:
    """gzip bodies of a few KiB that inflate to almost ``max_body_bytes`` each, sent by 40
    connections that then stall before their last bytes: they used to be admitted at
    their compressed size and inflated side by side (2.27 GB on a default config). Now
    compressed bodies are refused (415, reports are random bytes and do not compress)
    before they are inflated, and the connection is closed."""
    bomb = gzip.compress(b"\x00" * (MAX_BODY - 1024), compresslevel=9)
    headers = {
        **auth("relay"),
        "Content-Type": wire.CONTENT_TYPE,
        "Content-Encoding": "gzip",
        "Content-Length": str(len(bomb)),
    }
    assert post_batch(hostile.url, _good_batch()).status == 200
    before = _high_water_mib(hostile.process.pid)
    conns = [Raw(hostile.url) for _ in range(40)]
    try:
        for conn in conns:
            conn.send(head("POST", "/v1/reports", headers) + bomb[:-8])
        for conn in conns:
            answer = conn.answer(timeout=30.0)
            assert answer is not None and answer.status == 415, answer
            assert "Content-Encoding" in answer.json()["detail"]
            assert conn.closed_within(30.0)
    finally:
        for conn in conns:
            conn.close()
    growth = _high_water_mib(hostile.process.pid) - before
    assert growth < 16, f"the collector's peak memory grew {growth:.0f} MiB"


# --- 3. estimates of unbounded size ------------------------------------------------------
def test_estimates_answer_size_is_bounded(hostile: RunningCollector) -> None:
    """``per_bucket=true`` over many buckets of a wide metric made answers of 849 MB.
    Answers are capped at ``max_estimate_items`` (categories x (1 + buckets)): beyond,
    a 400 saying how to narrow the query."""
    day = Period.DAY.seconds
    today = Period.DAY.start(time.time())
    blocks = [
        wire.Block("wide", _fp("wide"), today - k * day, os.urandom(16), np.uint32(k).tobytes())
        for k in range(3)
    ]
    assert post_batch(hostile.url, batch(*blocks)).json()["accepted"] == 3
    read = auth("read")
    whole = request(hostile.url, "GET", "/v1/estimates/wide", headers=read)
    assert whole.status == 200 and len(whole.json()["items"]) == 4096
    refused = request(hostile.url, "GET", "/v1/estimates/wide?per_bucket=true", headers=read)
    assert refused.status == 400, refused.body[:200]
    answer = refused.json()
    assert answer["error"] == "invalid_parameter" and answer["param"] == "per_bucket"
    assert "max_estimate_items" in answer["detail"] and "16384" in answer["detail"]
    narrow = f"/v1/estimates/wide?per_bucket=true&from={today}&to={today + day}"
    answer = request(hostile.url, "GET", narrow, headers=read)  # 4096 x (1 + 1) items
    assert answer.status == 200 and len(answer.json()["buckets"]) == 1


def _fp(name: str) -> str:
    from ldpkit.metrics import MetricDefinition

    return MetricDefinition.from_dict(name, SERVED_METRICS[name]).fingerprint


# --- 6. tokens echoed or logged ----------------------------------------------------------
def test_parser_errors_are_json_and_never_quote_a_header(hostile: RunningCollector) -> None:
    token = "secret-token-in-a-bad-header"
    start = b"GET /v1/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
    for raw in (
        start + b"\x00\r\n\r\n",  # a NUL after the token
        start + b"x" * 9000 + b"\r\n\r\n",  # a header longer than 8,190 bytes
        start + b"\r\nX-Pad: " + b"y" * 9000 + b"\r\n\r\n",
        b"GET /v1/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token.encode()
        + b"\r\nContent-Length: x\r\n\r\n",
    ):
        conn = Raw(hostile.url)
        try:
            conn.send(raw)
            answer = conn.answer(timeout=30.0)
        finally:
            conn.close()
        assert answer is not None and 400 <= answer.status < 500, answer
        assert answer.headers["content-type"].startswith("application/json"), answer
        data = answer.json()
        assert set(data) == {"error", "detail"}
        assert token.encode() not in answer.body and b"Bearer" not in answer.body
    assert token not in _log(hostile)


def test_a_token_in_the_query_is_not_logged(hostile: RunningCollector) -> None:
    for path in (f"/v1/metrics?access_token={INGEST}", f"/v1/estimates/theme?access_token={READ}"):
        answer = request(hostile.url, "GET", path)
        assert answer.status in (400, 401), answer
        assert INGEST.encode() not in answer.body and READ.encode() not in answer.body
    request(hostile.url, "GET", "/healthz")  # the access log is written after the answer
    lines = ('"GET /v1/metrics', '"GET /v1/estimates/theme', '"GET /healthz')
    wait_until(lambda: all(line in _log(hostile) for line in lines), "the access log lines")
    text = _log(hostile)
    assert '"GET /v1/metrics' in text  # the access log is on
    assert INGEST not in text and READ not in text and ADMIN not in text


# --- 7. 500s where a 400 is due ----------------------------------------------------------
def _put(c: RunningCollector, name: str, body: bytes) -> Any:
    return request(c.url, "PUT", f"/v1/metrics/{name}", body, {**auth("admin"), **JSON_TYPE})


@pytest.mark.parametrize(
    "body",
    [
        b'{"categories": ["a", "b"], "epsilon": 1' + b"0" * 400 + b"}",
        b'{"kind": "numeric", "bounds": [0, 1' + b"0" * 400 + b'], "epsilon": 1}',
        b'{"categories": ["a", "b"], "epsilon": 1, "budget": 1' + b"0" * 400 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"categories": ' + b"[" * 5000 + b"]" * 5000 + b', "epsilon": 1}',
        b'{"categories": [["a"], {"b": 1}], "epsilon": 1}',
        b'{"categories": ["a", "b"], "epsilon": 1e999}',
    ],
    ids=[
        "epsilon-10e400",
        "bounds-10e400",
        "budget-10e400",
        "nested",
        "nested-categories",
        "category-types",
        "epsilon-inf",
    ],
)
def test_bad_definitions_are_400s(hostile: RunningCollector, body: bytes) -> None:
    answer = _put(hostile, "bad", body)
    assert answer.status == 400, answer
    assert answer.json()["error"] in ("invalid_definition", "bad_request")
    assert len(answer.body) < 2000


@pytest.mark.parametrize("level", ["0.9999999999999999", "0.99999999999999999", "nan", "1e999"])
def test_extreme_levels_are_400s(hostile: RunningCollector, level: str) -> None:
    answer = request(hostile.url, "GET", f"/v1/estimates/theme?level={level}", headers=auth("read"))
    assert answer.status == 400, answer
    assert answer.json()["param"] == "level"


def test_a_client_that_disconnects_mid_upload_is_no_500(hostile: RunningCollector) -> None:
    logged = len(hostile.log)
    before = prometheus(hostile.url)
    headers = {**auth("relay"), "Content-Type": wire.CONTENT_TYPE, "Content-Length": "100000"}
    for _ in range(5):
        conn = Raw(hostile.url)
        conn.send(head("POST", "/v1/reports", headers) + _good_batch()[:20])
        time.sleep(0.05)
        conn.close()

    def counted() -> bool:
        nonlocal text, gone
        text = prometheus(hostile.url)
        gone = counter(text, "ldpkit_http_requests_total", status="499") - counter(
            before, "ldpkit_http_requests_total", status="499"
        )
        return gone >= 5 or counter(text, "ldpkit_http_requests_total", status="500") > 0

    text, gone = "", 0.0
    wait_until(counted, "the 5 cut uploads counted", interval=0.1)
    assert counter(text, "ldpkit_http_requests_total", status="500") == 0
    assert gone == 5
    text = "".join(hostile.log[logged:])
    assert "Traceback" not in text and " ERROR " not in text, text


# --- 8. accepted that should not be ------------------------------------------------------
def test_duplicate_msgpack_keys_are_refused(hostile: RunningCollector) -> None:
    good = {
        "metric": "theme",
        "fp": _fp("theme"),
        "bucket": int(Period.DAY.start(time.time())),
        "ids": os.urandom(16),
        "reports": np.uint32(1).tobytes(),
    }
    # A map with "blocks" twice: the first holds a valid block, the second is empty.
    body = b"\x83" + msgpack.packb("v") + msgpack.packb(1)
    body += msgpack.packb("blocks") + msgpack.packb([good], use_bin_type=True)
    body += msgpack.packb("blocks") + msgpack.packb([])
    answer = post_batch(hostile.url, body)
    assert answer.status == 400 and "duplicate" in answer.json()["detail"], answer
    inner = dict(good)
    block = b"\x86" + b"".join(
        msgpack.packb(k) + msgpack.packb(v, use_bin_type=True) for k, v in inner.items()
    )
    block += msgpack.packb("metric") + msgpack.packb("empty")
    body = (
        b"\x82" + msgpack.packb("v") + msgpack.packb(1) + msgpack.packb("blocks") + b"\x91" + block
    )
    answer = post_batch(hostile.url, body)
    assert answer.status == 400 and "duplicate" in answer.json()["detail"], answer


@pytest.mark.parametrize("name", ["a%0A", "a%0D", "a%00", "A", "a%20b"])
def test_metric_names_are_checked_whole(hostile: RunningCollector, name: str) -> None:
    body = json.dumps({"categories": ["x", "y"], "epsilon": 1.0}).encode()
    answer = _put(hostile, name, body)
    assert answer.status == 400, answer
    listing = request(hostile.url, "GET", "/v1/metrics", headers=auth("read")).json()
    assert all(d["name"].isprintable() and "\n" not in d["name"] for d in listing["metrics"])


@pytest.mark.parametrize(
    ("spec", "status", "words"),
    [
        (
            {"categories": ["x", "y"], "epsilon": 1.0, "description": "d" * 10_000_000},
            413,
            "max_definition_bytes",
        ),
        (
            {"categories": ["x", "y"], "epsilon": 1.0, "description": "d" * 100_000},
            400,
            "description",
        ),
        ({"categories": [f"{i:0200d}" for i in range(8192)], "epsilon": 1.0}, 400, "categories"),
        ({"kind": "numeric", "bounds": [-1e308, 1e308], "epsilon": 1.0}, 400, "bounds"),
    ],
    ids=["10MB-description", "long-description", "huge-categories", "bounds-1e308"],
)
def test_definitions_have_size_limits(
    hostile: RunningCollector, spec: dict[str, Any], status: int, words: str
) -> None:
    answer = _put(hostile, "big", json.dumps(spec).encode())
    assert answer.status == status, answer.body[:300]
    assert words in answer.json()["detail"]


# --- 12. readiness -----------------------------------------------------------------------
def test_readyz_says_not_ready_while_every_batch_fails(tmp_path: Path) -> None:
    """A full disk (here: a file size limit on the collector process) makes every batch
    fail with 503: /readyz must say so, so a load balancer stops sending there."""
    config = write_toml(tmp_path / "collector.toml", catalog_refresh_seconds=3600)
    limit = 1 << 20  # bytes any file of the process may grow to
    launcher = (
        "import resource, runpy, sys;"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}));"
        "sys.argv = ['ldpkit', *sys.argv[1:]];"
        "runpy.run_module('ldpkit.cli', run_name='__main__')"
    )
    command = (sys.executable, "-c", launcher)
    with running_collector(config, cwd=tmp_path, env=_env(), command=command) as c:
        assert request(c.url, "GET", "/readyz").status == 200
        statuses = []
        for _ in range(100):  # 100 x 2,000 reports: 3 MB of ids, over the limit
            body = batch(block_of("theme", grr_reports(np.arange(2000) % 4)))
            statuses.append(post_batch(c.url, body).status)
            if statuses[-1] == 503:
                break
        assert statuses[-1] == 503, statuses
        ready = request(c.url, "GET", "/readyz")
        assert ready.status == 503, ready
        assert ready.json()["error"] == "not_ready" and "store" in ready.json()["detail"]
        # Still failing: still not ready. A checkpoint can reset the WAL and let one more
        # batch in before the database file itself is full, so post until the next failure.
        again = []
        for _ in range(100):
            body = batch(block_of("theme", grr_reports(np.arange(2000) % 4)))
            again.append(post_batch(c.url, body).status)
            if again[-1] == 503:
                break
        assert again[-1] == 503, again
        assert request(c.url, "GET", "/readyz").status == 503


# --- 4. one sender delays everyone -------------------------------------------------------
HUGE = [f"c{i}" for i in range(65536)]
COSTLY_METRICS: dict[str, Any] = {
    **METRICS,
    "huge": {"categories": HUGE, "epsilon": 1.0, "mechanism": "olh"},
}


@pytest.fixture(scope="module")
def costly(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCollector]:
    """A collector with an OLH metric at d = 65,536 (an operator's choice)."""
    directory = tmp_path_factory.mktemp("costly")
    config = write_toml(
        directory / "collector.toml", metrics=COSTLY_METRICS, catalog_refresh_seconds=3600
    )
    with running_collector(config, cwd=directory, env=_env()) as c:
        yield c


def test_a_costly_sender_delays_only_itself(costly: RunningCollector) -> None:
    """Two senders post OLH batches at d = 65,536 (seconds of aggregation each); meanwhile
    another client posts small batches one after the other. Those used to wait for the
    costly aggregations in the store's single writer (none was answered before the first
    costly batch); now they go through meanwhile (at least 5, allowing for a loaded
    machine: a small batch takes milliseconds, a costly one seconds)."""
    from ldpkit.metrics import MetricDefinition

    huge = MetricDefinition.from_dict("huge", COSTLY_METRICS["huge"])
    rng = np.random.default_rng(4)
    n = 30_000
    reports = huge.mechanism_instance.perturb(rng.integers(0, 65536, n), rng=rng)
    done: list[tuple[str, float]] = []
    lock = threading.Lock()

    def costly_sender(token_kind: str) -> None:
        block = wire.make_block(
            "huge",
            huge.fingerprint,
            Period.DAY.start(time.time()),
            os.urandom(16 * n),
            reports,
        )
        answer = post_batch(costly.url, batch(block), token_kind)
        assert answer.status == 200 and answer.json()["accepted"] == n, answer
        with lock:
            done.append(("costly", time.monotonic()))

    threads = [threading.Thread(target=costly_sender, args=("relay",)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # both uploaded and being aggregated
    for _ in range(20):
        assert post_batch(costly.url, _good_batch()).status == 200
        with lock:
            done.append(("cheap", time.monotonic()))
    for t in threads:
        t.join(timeout=300)
    order = [kind for kind, _ in sorted(done, key=lambda x: x[1])]
    assert order.count("costly") == 2
    assert order[:5] == ["cheap"] * 5, order


def test_unknown_names_cost_an_indexed_lookup_not_a_catalog_reload(
    costly: RunningCollector,
) -> None:
    """A batch naming an unknown metric (or version) used to reload the whole catalog (at
    most once a second: 25% of a core for one tiny batch a second with a large catalog).
    Now the named versions are looked up in the store by fingerprint."""
    before = prometheus(costly.url)
    for k in range(5):
        block = wire.Block(f"nope{k}", os.urandom(8).hex(), Period.DAY.start(time.time()),
                           os.urandom(16), np.uint32(0).tobytes())  # fmt: skip
        answer = post_batch(costly.url, batch(block)).json()
        assert answer["rejected"][0]["error"] == "unknown_metric"
        time.sleep(1.05)  # past the old once-a-second throttle
    after = prometheus(costly.url)
    assert (
        counter(after, "ldpkit_version_lookups_total")
        - counter(before, "ldpkit_version_lookups_total")
        == 5
    )
    reloads = counter(after, "ldpkit_catalog_reloads_total")
    assert reloads == counter(before, "ldpkit_catalog_reloads_total") and reloads >= 1


# --- 10. retiring a metric ---------------------------------------------------------------
def test_a_metric_can_be_retired(tmp_path: Path) -> None:
    """DELETE retires a metric (admin): apps stop seeing it, its reports are refused with
    ``retired_metric``, its data stays queryable. A metric the config defined and no
    longer lists is retired at the next start; one defined through the API is not."""
    old = {"categories": ["p", "q"], "epsilon": 1.0, "mechanism": "grr"}
    first = {**METRICS, "old": old}
    config = write_toml(tmp_path / "collector.toml", metrics=first)
    listed = lambda url: {  # noqa: E731
        d["name"]
        for d in request(url, "GET", "/v1/metrics", headers=auth("read")).json()["metrics"]
    }
    old_fp = _fp_of("old", old)
    with running_collector(config, cwd=tmp_path, env=_env()) as c:
        made = _put(c, "api-made", json.dumps({"categories": ["x", "y"], "epsilon": 1}).encode())
        assert made.status == 201
        assert post_batch(c.url, _good_batch(5)).json()["accepted"] == 5
        assert post_batch(c.url, _block_batch("old", old_fp)).json()["accepted"] == 1
        delete = request(c.url, "DELETE", "/v1/metrics/theme", headers=auth("admin"))
        assert delete.status == 200 and delete.json() == {"outcome": "retired", "metric": "theme"}
        assert "theme" not in listed(c.url) and {"old", "api-made"} <= listed(c.url)
        one = request(c.url, "GET", "/v1/metrics/theme", headers=auth("read")).json()
        assert one["retired"] is True
        answer = post_batch(c.url, _good_batch(3)).json()
        assert answer["accepted"] == 0 and {r["error"] for r in answer["rejected"]} == {
            "retired_metric"
        }
        estimate = request(c.url, "GET", "/v1/estimates/theme", headers=auth("read"))
        assert estimate.status == 200 and estimate.json()["n"] == 5
        again = request(c.url, "DELETE", "/v1/metrics/theme", headers=auth("admin")).json()
        assert again["outcome"] == "unchanged"
        assert request(c.url, "DELETE", "/v1/metrics/nothing", headers=auth("admin")).status == 404
        assert request(c.url, "DELETE", "/v1/metrics/old", headers=auth("ingest")).status == 403
    # The config no longer lists "old": retired at start. "api-made" stays.
    write_toml(tmp_path / "collector.toml", metrics=METRICS)
    with running_collector(config, cwd=tmp_path, env=_env()) as c:
        assert listed(c.url) == {"latency", "empty", "api-made"}
        answer = post_batch(c.url, _block_batch("old", old_fp)).json()
        assert answer["rejected"][0]["error"] == "retired_metric"
        assert request(c.url, "GET", "/v1/estimates/old", headers=auth("read")).json()["n"] == 1
        # theme is still in the config, but stays retired until an admin PUTs it.
        assert "theme" not in listed(c.url)
        assert "metric theme is retired" in _log(c)
        body = json.dumps(METRICS["theme"]).encode()
        restored = _put(c, "theme", body)
        assert restored.status == 200 and restored.json()["outcome"] == "restored"
        assert post_batch(c.url, _good_batch(2)).json()["accepted"] == 2


def _fp_of(name: str, spec: dict[str, Any]) -> str:
    from ldpkit.metrics import MetricDefinition

    return MetricDefinition.from_dict(name, spec).fingerprint


def _block_batch(name: str, fp: str) -> bytes:
    block = wire.Block(
        name, fp, Period.DAY.start(time.time()), os.urandom(16), np.uint32(1).tobytes()
    )
    return batch(block)
