"""Property-based tests of the collector's HTTP API: bad input never makes a 5xx.

One real collector app (SQLite store) serves this whole module on a loopback port; the
properties send it, through real HTTP:

- ``POST /v1/reports``: mixed batches of valid and invalid reports (bad payload values,
  unknown metrics, wrong fingerprints, bad buckets, wrong report sizes, ids repeated in
  the batch and across batches), checked against a model: the answer names exactly the
  invalid reports, accepts exactly the valid reports whose id is new (first occurrence
  wins) and the stored aggregates grow by exactly those; random bytes; mutated batches;
  wrong types and extreme values (NaN, infinities, huge and negative numbers) in every
  field; arbitrary msgpack documents; deep nesting; truncated and oversized bodies (with
  and without Content-Length); wrong content types;
- ``PUT /v1/metrics/{name}``: random JSON, definition-shaped objects with wrong values,
  random names;
- ``GET /v1/estimates/{name}`` (and other GET routes): random query parameters.

Every answer must be below 500 and every error a JSON ``{"error", "detail"}`` object;
after every example the store's invariant holds (the sum of the aggregates' counts
equals the number of stored report ids: nothing counted twice or lost between them) and
the process still answers. Hypothesis runs derandomized with no example database, so
every run sends the same inputs; the last test prints how many requests were sent.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpkit import wire
from ldpkit.metrics import DEFINITION_KEYS, MetricDefinition, Period
from tests.fuzzing import mutate
from tests.harness import Answer, ThreadedCollector

from .helpers import ADMIN, READ, RELAY, make_config

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
MAX_BODY = 65_536
MAX_REPORTS = 2_000
MAX_BLOCKS = 64

SPECS: dict[str, dict[str, Any]] = {
    "cat": {"categories": [f"c{i}" for i in range(5)], "epsilon": 1.0, "mechanism": "grr"},
    "bits": {"categories": [f"b{i}" for i in range(12)], "epsilon": 1.0, "mechanism": "oue"},
    "olh": {"categories": [f"o{i}" for i in range(30)], "epsilon": 1.0, "mechanism": "olh"},
    "num": {
        "kind": "numeric",
        "bounds": [0.0, 10.0],
        "epsilon": 1.0,
        "mechanism": "duchi",
        "bucket": "hour",
    },
    "pw": {"kind": "numeric", "bounds": [0.0, 100.0], "epsilon": 2.0, "mechanism": "piecewise"},
    "put-target": {"categories": ["x", "y"], "epsilon": 1.0, "mechanism": "grr"},
}
NAMES = ("cat", "bits", "olh", "num", "pw")
DEFS = {name: MetricDefinition.from_dict(name, SPECS[name]) for name in NAMES}
BATCH_TYPES = (wire.CONTENT_TYPE, "application/msgpack", "application/x-msgpack")


def valid_mask(name: str, reports: np.ndarray) -> np.ndarray:
    """Which reports are valid, by the rules of docs/protocol.md (not the mechanism's code)."""
    if name == "cat":
        return reports < 5
    if name == "bits":
        return (reports[:, 1] & 0xF0) == 0  # 12 bits in 2 bytes: 4 padding bits
    if name == "olh":
        return reports["y"] < 4  # g = 4 at epsilon 1
    if name == "num":
        return (reports == 1) | (reports == -1)
    if name == "pw":
        return np.abs(reports.astype(np.int64)) <= 524288
    raise AssertionError(name)


def invalid_reports(name: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` reports of the right size that break the rule."""
    dtype = DEFS[name].mechanism_instance.report_dtype
    out = np.zeros(count, dtype=dtype)
    if name == "cat":
        out[:] = rng.integers(5, 2**32, count, dtype=np.uint64).astype(np.uint32)
    elif name == "bits":
        out[:, 0] = rng.integers(0, 256, count)
        out[:, 1] = rng.integers(0, 16, count) | (1 << rng.integers(4, 8, count))
    elif name == "olh":
        out["a"] = rng.integers(0, 2**63, count)
        out["b"] = rng.integers(0, 2**63, count)
        out["y"] = rng.integers(4, 2**32, count, dtype=np.uint64).astype(np.uint32)
    elif name == "num":
        choices = np.array([v for v in range(-128, 128) if v not in (-1, 1)], dtype=np.int8)
        out[:] = rng.choice(choices, count)
    elif name == "pw":
        magnitude = rng.integers(524289, 2**31 - 1, count)
        out[:] = np.where(rng.random(count) < 0.5, -magnitude, magnitude)
    assert not valid_mask(name, out).any()
    return out


def valid_reports(name: str, count: int, rng: np.random.Generator) -> np.ndarray:
    d = DEFS[name]
    m = d.mechanism_instance
    if d.categories is not None:
        values: Any = rng.integers(0, len(d.categories), count)
    else:
        assert d.bounds is not None
        values = rng.uniform(*d.bounds, count)
    reports = np.asarray(m.perturb(values, rng=rng))
    assert valid_mask(name, reports).all()
    return reports


# --- the server ------------------------------------------------------------------------
@dataclass
class Fuzzed:
    served: ThreadedCollector
    db: sqlite3.Connection
    batches: int = 0


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "collector.sqlite3"
    config = make_config(
        path,
        metrics=SPECS,
        synchronous="normal",
        max_body_bytes=MAX_BODY,
        max_reports_per_batch=MAX_REPORTS,
        max_blocks_per_batch=MAX_BLOCKS,
    )
    with ThreadedCollector(config) as served:
        db = sqlite3.connect(path)
        try:
            yield Fuzzed(served, db)
        finally:
            db.close()
    REQUESTS.append(served.requests)


REQUESTS: list[int] = []


def check_error(answer: Answer) -> Any:
    """Below 500, and an error is a JSON object naming it."""
    assert answer.status < 500, (answer.status, answer.body[:300])
    if answer.status >= 400:
        assert answer.headers.get("content-type", "").startswith("application/json")
        error = json.loads(answer.body)
        assert isinstance(error["error"], str) and isinstance(error["detail"], str)
        return error
    if answer.body and answer.headers.get("content-type", "").startswith("application/json"):
        return json.loads(answer.body, parse_constant=_no_constants)
    return None


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} in a JSON answer")


def check_store(f: Fuzzed) -> None:
    """The aggregates count exactly the stored ids; the collector still answers."""
    ((ids,),) = f.db.execute("SELECT COUNT(*) FROM report_ids").fetchall()
    ((n,),) = f.db.execute(  # ingest appends partial rows; compaction folds them
        "SELECT (SELECT COALESCE(SUM(n), 0) FROM aggregates) "
        "+ (SELECT COALESCE(SUM(n), 0) FROM partials)"
    ).fetchall()
    assert ids == n
    assert f.served.request("GET", "/healthz").status == 200


def post(f: Fuzzed, body: bytes, content_type: str | None = wire.CONTENT_TYPE, **kw: Any) -> Any:
    headers = {"Authorization": f"Bearer {RELAY}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    answer = f.served.request("POST", "/v1/reports", body, headers, **kw)
    data = check_error(answer)
    if answer.status == 200:
        assert set(data) == {"accepted", "duplicates", "held", "rejected"}
    else:
        assert answer.status in (400, 413, 415), answer
    return answer.status, data


# --- mixed batches against a model -----------------------------------------------------
KINDS = ("valid", "valid", "valid", "mixed", "unknown_metric", "wrong_fp", "bad_bucket", "size")


@dataclass
class PlannedBlock:
    block: wire.Block
    name: str
    kind: str
    reports: np.ndarray | None  # the decoded reports, when the block names a known version
    expected_error: str | None  # for every report of the block, if the block is refused


@st.composite
def planned_block(draw: st.DrawFn, earlier_ids: list[bytes]) -> PlannedBlock:
    name = draw(st.sampled_from(NAMES))
    d = DEFS[name]
    m = d.mechanism_instance
    period = d.bucket
    kind = draw(st.sampled_from(KINDS))
    n = draw(st.integers(0, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ids = b""
    for _ in range(n):
        mode = rng.random()
        if earlier_ids and mode < 0.15:  # an id from earlier in the batch
            ids += earlier_ids[int(rng.integers(len(earlier_ids)))]
        elif mode < 0.35:  # one of 64 ids: these recur across batches too
            ids += int(rng.integers(64)).to_bytes(16, "big")
        else:
            ids += rng.bytes(16)
    earlier_ids.extend(ids[i : i + 16] for i in range(0, len(ids), 16))
    start = period.start(time.time())
    bucket = start - draw(st.integers(0, 3)) * period.seconds
    if draw(st.booleans()):
        bucket = start + period.seconds  # one bucket ahead is accepted
    reports = valid_reports(name, n, rng)
    metric, fp, error = name, d.fingerprint, None
    if kind == "mixed" and n:
        bad = rng.random(n) < 0.5
        reports[bad] = invalid_reports(name, int(bad.sum()), rng)
    elif kind == "unknown_metric":
        metric = draw(st.sampled_from(["nope", "Cat", "cat ", "x" * 64, ""]))
        error = "unknown_metric"
    elif kind == "wrong_fp":
        fp = draw(st.one_of(st.text("0123456789abcdef", min_size=16, max_size=16), st.text()))
        if fp == d.fingerprint:
            fp = "0" * 16
        error = "unknown_version"
    elif kind == "bad_bucket":
        how = draw(st.sampled_from(["unaligned", "future", "old"]))
        if how == "unaligned":
            bucket = start + draw(st.integers(1, period.seconds - 1))
        elif how == "future":
            bucket = start + draw(st.integers(3, 1000)) * period.seconds
        else:
            periods = draw(st.integers(31 * Period.DAY.seconds // period.seconds, 10**4))
            bucket = start - periods * period.seconds
        error = "invalid_bucket"
    raw = reports.tobytes()
    if kind == "size" and n:
        raw = bytes(n * (m.report_dtype.itemsize + 1))
        error = "invalid_report"
        reports = None
    block = wire.Block(metric, fp, bucket, ids, raw if n else b"")
    return PlannedBlock(block, name, kind, None if error else reports, error)


@st.composite
def planned_batch(draw: st.DrawFn) -> list[PlannedBlock]:
    earlier: list[bytes] = []
    return draw(st.lists(planned_block(earlier), max_size=6))


def expected_outcome(
    plan: list[PlannedBlock], stored: set[bytes]
) -> tuple[dict[int, str], int, int, dict[tuple[str, int], np.ndarray]]:
    """(rejected index -> code, accepted, duplicates, accepted reports by (name, bucket))."""
    rejected: dict[int, str] = {}
    seen = set(stored)
    accepted = duplicates = 0
    rows: dict[tuple[str, int], list[np.ndarray]] = {}
    index = 0
    for p in plan:
        n = p.block.n
        if p.expected_error is not None:
            rejected.update((index + i, p.expected_error) for i in range(n))
        elif n:
            assert p.reports is not None
            ok = valid_mask(p.name, p.reports)
            for i in range(n):
                if not ok[i]:
                    rejected[index + i] = "invalid_report"
                    continue
                rid = p.block.ids[16 * i : 16 * i + 16]
                if rid in seen:
                    duplicates += 1
                else:
                    seen.add(rid)
                    accepted += 1
                    rows.setdefault((p.name, p.block.bucket), []).append(p.reports[i : i + 1])
        index += n
    return rejected, accepted, duplicates, {k: np.concatenate(v) for k, v in rows.items()}


def stored_among(f: Fuzzed, ids: set[bytes]) -> set[bytes]:
    if not ids:
        return set()
    marks = ",".join("?" * len(ids))
    rows = f.db.execute(f"SELECT id FROM report_ids WHERE id IN ({marks})", list(ids))
    return {bytes(r[0]) for r in rows}


def aggregate_of(f: Fuzzed, name: str, bucket: int) -> tuple[int, np.ndarray]:
    d = DEFS[name]
    m = d.mechanism_instance
    found = f.served.call(
        f.served.collector.store.aggregates(d.fingerprint, m.stats_size, bucket, bucket + 1)
    )
    if not found:
        return 0, np.zeros(m.stats_size)
    (one,) = found
    return one.aggregate.n, np.asarray(one.aggregate.sums, dtype=float)


@settings(max_examples=300, **SETTINGS)
@given(plan=planned_batch(), content_type=st.sampled_from(BATCH_TYPES))
def test_mixed_batches_store_exactly_the_valid_new_reports(
    fuzzed: Fuzzed, plan: list[PlannedBlock], content_type: str
) -> None:
    f = fuzzed
    ids = {p.block.ids[i : i + 16] for p in plan for i in range(0, len(p.block.ids), 16)}
    rejected, accepted, duplicates, rows = expected_outcome(plan, stored_among(f, ids))
    before = {key: aggregate_of(f, *key) for key in rows}
    status, answer = post(f, wire.encode_batch([p.block for p in plan]), content_type)
    assert status == 200, answer
    assert {r["index"]: r["error"] for r in answer["rejected"]} == rejected
    assert [r["index"] for r in answer["rejected"]] == sorted(rejected)
    assert (answer["accepted"], answer["duplicates"]) == (accepted, duplicates)
    for (name, bucket), reports in rows.items():
        n0, sums0 = before[(name, bucket)]
        n1, sums1 = aggregate_of(f, name, bucket)
        delta = DEFS[name].mechanism_instance.aggregate(reports)
        assert n1 - n0 == delta.n == len(reports)
        np.testing.assert_allclose(sums1 - sums0, np.asarray(delta.sums), rtol=1e-9, atol=1e-9)
    check_store(f)


# --- malformed bodies ------------------------------------------------------------------
def encoded(plan: list[PlannedBlock]) -> bytes:
    return wire.encode_batch([p.block for p in plan])


@settings(max_examples=700, **SETTINGS)
@given(st.binary(max_size=3000))
def test_random_bytes(fuzzed: Fuzzed, data: bytes) -> None:
    status, answer = post(fuzzed, data)
    assert status in (200, 400)
    if status == 200:
        assert answer["accepted"] == 0 or data[:1] in (b"\x82", b"\x81", b"\xde", b"\xdf")


@settings(max_examples=100, **SETTINGS)
@given(planned_batch(), st.randoms(use_true_random=False))
def test_mutated_batches(fuzzed: Fuzzed, plan: list[PlannedBlock], rnd: random.Random) -> None:
    base = encoded(plan)
    for _ in range(8):
        raw = bytearray(base)
        for _ in range(rnd.randint(1, 4)):
            mutate(raw, rnd)
        post(fuzzed, bytes(raw))
    check_store(fuzzed)


@settings(max_examples=200, **SETTINGS)
@given(planned_batch(), st.data())
def test_truncated_bodies_are_refused_whole(
    fuzzed: Fuzzed, plan: list[PlannedBlock], data: st.DataObject
) -> None:
    body = encoded(plan)
    cut = data.draw(st.integers(0, len(body) - 1))
    ids = {p.block.ids[i : i + 16] for p in plan for i in range(0, len(p.block.ids), 16)}
    before = stored_among(fuzzed, ids)
    status, answer = post(fuzzed, body[:cut])
    assert status == 400 and answer["error"] == "bad_request"
    assert stored_among(fuzzed, ids) == before  # nothing of it stored


INT64 = st.integers(-(2**63), 2**64 - 1)
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.sampled_from([-1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), wire.MAX_BUCKET]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324]),
    st.text(max_size=20),
    st.binary(max_size=40),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), INT64, max_size=3),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8)),
)
FIELDS = ("metric", "fp", "bucket", "ids", "reports")


@settings(max_examples=350, **SETTINGS)
@given(planned_batch().filter(bool), st.data())
def test_wrong_types_and_extreme_values(
    fuzzed: Fuzzed, plan: list[PlannedBlock], data: st.DataObject
) -> None:
    blocks = [
        {
            "metric": p.block.metric,
            "fp": p.block.fingerprint,
            "bucket": p.block.bucket,
            "ids": p.block.ids,
            "reports": p.block.reports,
        }
        for p in plan
    ]
    doc: dict[Any, Any] = {"v": 1, "blocks": blocks}
    target = data.draw(st.sampled_from(["v", "blocks", "extra", "block", *FIELDS]))
    value = data.draw(WEIRD)
    i = data.draw(st.integers(0, len(blocks) - 1))
    if target in ("v", "blocks"):
        doc[target] = value
    elif target == "extra":
        doc[data.draw(st.text(max_size=5))] = value
    elif target == "block":
        blocks[i] = value
    else:
        blocks[i][target] = value
    post(fuzzed, msgpack.packb(doc, use_bin_type=True))
    post(fuzzed, msgpack.packb(doc, use_bin_type=False))
    with contextlib.suppress(OverflowError):
        post(fuzzed, msgpack.packb(doc, use_bin_type=True, use_single_float=True))
    check_store(fuzzed)


MSGPACK_DOCS = st.recursive(
    st.one_of(st.none(), st.booleans(), INT64, st.floats(), st.text(max_size=10), st.binary()),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=8), st.binary(max_size=4)), children),
        st.dictionaries(st.sampled_from(["v", "blocks", *FIELDS]), children, max_size=6),
    ),
    max_leaves=30,
)


@settings(max_examples=250, **SETTINGS)
@given(MSGPACK_DOCS)
def test_arbitrary_msgpack_documents(fuzzed: Fuzzed, doc: Any) -> None:
    for wrapped in (doc, {"v": 1, "blocks": [doc]}, {"v": 1, "blocks": doc}):
        status, _ = post(fuzzed, msgpack.packb(wrapped, use_bin_type=True))
        assert status in (200, 400)


@settings(max_examples=60, **SETTINGS)
@given(st.integers(1, 60_000), st.sampled_from(["array", "map", "block", "field"]))
def test_deep_nesting(fuzzed: Fuzzed, depth: int, kind: str) -> None:
    if kind == "array":
        body = b"\x91" * depth + b"\xc0"
    elif kind == "map":
        body = b"\x81\xa1a" * (depth // 3) + b"\xc0"
    else:
        inner = b"\x91" * depth + b"\x90"
        head = b"\x82\xa1v\x01\xa6blocks\x91"
        body = head + (inner if kind == "block" else b"\x81\xa6metric" + inner)
    status, _ = post(fuzzed, body)
    assert status == 400 if len(body) <= MAX_BODY else status == 413


@settings(max_examples=60, **SETTINGS)
@given(st.integers(MAX_BODY + 1, 4 * MAX_BODY), st.booleans())
def test_oversized_bodies(fuzzed: Fuzzed, size: int, chunked: bool) -> None:
    body = (b"\x82\xa1v\x01\xa6blocks\x90" + b"\x00" * size)[:size]
    status, answer = post(fuzzed, body, chunked=chunked)
    assert status == 413 and answer["error"] == "payload_too_large"


MIME_PARTS = st.sampled_from(
    [
        *BATCH_TYPES,
        "application/json",
        "application/octet-stream",
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "APPLICATION/MSGPACK",
        "application/msgpack; charset=utf-8",
        "application/vnd.ldpkit.v2+msgpack",
        "application/msgpack, text/plain",
        "",
        ";",
        "/",
        "*/*",
    ]
)
TOKEN_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E)


@settings(max_examples=300, **SETTINGS)
@given(st.one_of(MIME_PARTS, st.text(TOKEN_CHARS, max_size=40), st.none()))
def test_content_types(fuzzed: Fuzzed, content_type: str | None) -> None:
    body = wire.encode_batch([])
    status, answer = post(fuzzed, body, content_type)
    mime = (content_type or "").split(";")[0].strip().lower()
    if content_type in BATCH_TYPES:
        assert status == 200
    if status == 200:
        assert mime in BATCH_TYPES
    else:
        assert status == 415 and answer["error"] == "unsupported_media_type"


def test_broken_http_framing(fuzzed: Fuzzed) -> None:
    """Content-Length shorter or longer than the body, bad chunks, a dropped connection:
    the collector answers 400 (or waits for the rest) and keeps serving."""
    port = fuzzed.served.port
    body = wire.encode_batch([])
    head = (
        f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {RELAY}\r\n"
        f"Content-Type: {wire.CONTENT_TYPE}\r\n"
    )
    cases = [
        head + f"Content-Length: {len(body) - 3}\r\n\r\n",  # short: the rest is a bad request
        head + f"Content-Length: {len(body) + 50}\r\n\r\n",  # long: then the client leaves
        head + "Content-Length: -1\r\n\r\n",
        head + "Content-Length: 99999999999999999999999\r\n\r\n",
        head + "Transfer-Encoding: chunked\r\n\r\n5\r\n",
        head + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
        head + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
    ]
    for raw in cases:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3) as sock:
            sock.sendall(raw.encode() + body)
            with contextlib.suppress(TimeoutError, ConnectionError):
                reply = sock.recv(65536)
                if reply:
                    status = int(reply.split(b" ", 2)[1])
                    assert status < 500, reply[:300]
        fuzzed.served.requests += 1
    check_store(fuzzed)


# --- PUT /v1/metrics/{name} ------------------------------------------------------------
JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
JSON_DOCS = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=6), st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
MECHANISM_NAMES = (
    *("auto", "grr", "rr", "sue", "oue", "olh", "ss", "hr"),
    *("laplace", "duchi", "piecewise", "hybrid", "GRR", "nope"),
)
GOOD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.sampled_from(["categorical", "numeric", "Categorical", "other"]),
    "categories": st.lists(st.text(max_size=6), max_size=40),
    "bounds": st.lists(st.one_of(st.floats(), st.integers(-(2**70), 2**70)), max_size=3),
    "epsilon": st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([1e-300, 1e-9, 0.01, 1.0, 20.0, 700.0, 1e300]),
        st.integers(-5, 2**70),
    ),
    "mechanism": st.sampled_from(MECHANISM_NAMES),
    "bucket": st.sampled_from(["hour", "day", "week", "month", ""]),
    "budget": st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-3, 2**70)),
    "budget_period": st.sampled_from(["hour", "day", "week", "year"]),
    "description": st.text(max_size=30),
}


@st.composite
def definition_like(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(DEFINITION_KEYS), max_size=8, unique=True))
    out: dict[str, Any] = {}
    for key in keys:
        good = GOOD_VALUES.get(key)
        out[key] = draw(good if good is not None and draw(st.booleans()) else JSON_DOCS)
    if draw(st.booleans()):
        out.setdefault("epsilon", draw(GOOD_VALUES["epsilon"]))
        out.setdefault("categories", draw(GOOD_VALUES["categories"]))
    return out


PUT_NAMES = st.one_of(
    st.from_regex(r"\Ap-[a-z0-9_.-]{0,10}\Z"),
    st.sampled_from(["put-target", "A", "x" * 65, "1abc", "a b", "..", "a%2Fb"]),
    st.text(max_size=12),
)


@settings(max_examples=300, **SETTINGS)
@given(
    PUT_NAMES,
    st.one_of(definition_like(), JSON_DOCS),
    st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain"]),
    st.booleans(),
)
def test_put_metrics_random_json(
    fuzzed: Fuzzed, name: str, doc: Any, content_type: str, allow_nan: bool
) -> None:
    try:
        body = json.dumps(doc, allow_nan=allow_nan).encode()
    except ValueError:
        body = json.dumps(doc).encode()  # NaN/Infinity tokens: Python's json reads them
    path = "/v1/metrics/" + urllib.parse.quote(name, safe="")
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": content_type}
    answer = fuzzed.served.request("PUT", path, body, headers)
    data = check_error(answer)
    assert answer.status in (200, 201, 400, 404, 405, 415), answer
    if answer.status in (200, 201):
        assert data["definition"]["name"] == name
        got = fuzzed.served.request("GET", path, None, {"Authorization": f"Bearer {READ}"})
        assert got.status == 200
        assert json.loads(got.body)["fingerprint"] == data["definition"]["fingerprint"]
    elif answer.status == 400:
        assert data["error"] in ("bad_request", "invalid_definition")


@pytest.mark.parametrize("epsilon", [5.1e-158, 1e-300, 5e-324, 1e-10])
@pytest.mark.parametrize("mechanism", ["auto", "grr", "oue", "olh", "hr", "ss"])
def test_tiny_epsilon_is_an_invalid_definition(
    fuzzed: Fuzzed, epsilon: float, mechanism: str
) -> None:
    """Found by test_put_metrics_random_json: exp(epsilon) rounded to 1, p == q, and the
    definition's variance divided by zero (a 500). Frequency oracles now refuse epsilon
    below 1e-9, as the numeric mechanisms did."""
    body = json.dumps({"categories": ["a", "b", "c"], "epsilon": epsilon, "mechanism": mechanism})
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    answer = fuzzed.served.request("PUT", "/v1/metrics/tiny", body.encode(), headers)
    data = check_error(answer)
    assert answer.status == 400 and data["error"] == "invalid_definition"
    assert "at least 1e-09" in data["detail"]


# --- query parameters ------------------------------------------------------------------
PARAM_NAMES = st.one_of(
    st.sampled_from(["from", "to", "level", "consistent", "version", "per_bucket"]),
    st.text(max_size=8),
)
PARAM_VALUES = st.one_of(
    st.text(max_size=30),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "0", "1", "0.95", "true", "yes", "", "-0"]),
    st.sampled_from(["2025-11-21", "2025-11-21T10:00:00Z", "2025-02-30", "9999-12-31T23:59:59"]),
    st.sampled_from(["0001-01-01", "2025-11-21T10:00:00+14:00", "2025-11-21 10:00", "T"]),
    st.text("0123456789abcdef", min_size=16, max_size=16),
)


@settings(max_examples=700, **SETTINGS)
@given(
    st.sampled_from([*NAMES, "put-target", "nope", "", "a/b", "x" * 100]),
    st.lists(st.tuples(PARAM_NAMES, PARAM_VALUES), max_size=5),
    st.booleans(),
)
def test_estimates_random_query_parameters(
    fuzzed: Fuzzed, name: str, params: list[tuple[str, str]], raw: bool
) -> None:
    if raw:  # unencoded, as a sloppy client might send it (only what HTTP allows)
        query = "&".join(
            f"{urllib.parse.quote(k, safe='=&%;+')}={urllib.parse.quote(v, safe='=&%;+:')}"
            for k, v in params
        )
    else:
        query = urllib.parse.urlencode(params)
    path = f"/v1/estimates/{urllib.parse.quote(name, safe='/')}?{query}"
    answer = fuzzed.served.request("GET", path, None, {"Authorization": f"Bearer {READ}"})
    data = check_error(answer)
    assert answer.status in (200, 400, 404), answer
    if answer.status == 400:
        assert data["error"] == "invalid_parameter" and isinstance(data["param"], str)
    elif answer.status == 200:
        assert data["metric"] == name and data["n"] >= 0
        assert 0 < data["level"] < 1


@settings(max_examples=150, **SETTINGS)
@given(
    st.sampled_from(["/v1/metrics", "/v1/metrics/cat", "/v1/metrics/cat/versions", "/healthz"]),
    st.lists(st.tuples(PARAM_NAMES, PARAM_VALUES), max_size=4),
)
def test_other_routes_ignore_query_parameters(
    fuzzed: Fuzzed, path: str, params: list[tuple[str, str]]
) -> None:
    url = f"{path}?{urllib.parse.urlencode(params)}"
    answer = fuzzed.served.request("GET", url, None, {"Authorization": f"Bearer {READ}"})
    check_error(answer)
    assert answer.status == 200


def test_zz_estimates_agree_and_count_inputs(
    fuzzed: Fuzzed, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in the module: the estimates' n agree with the store; how many requests."""
    f = fuzzed
    for name in NAMES:
        d = DEFS[name]
        ((n,),) = f.db.execute(
            "SELECT (SELECT COALESCE(SUM(n), 0) FROM aggregates WHERE fingerprint = ?) "
            "+ (SELECT COALESCE(SUM(n), 0) FROM partials WHERE fingerprint = ?)",
            (d.fingerprint, d.fingerprint),
        ).fetchall()
        answer = f.served.request(
            "GET", f"/v1/estimates/{name}", None, {"Authorization": f"Bearer {READ}"}
        )
        assert answer.status == 200 and json.loads(answer.body)["n"] == n
    check_store(f)
    stored = f.db.execute("SELECT COUNT(*) FROM report_ids").fetchone()[0]
    with capsys.disabled():
        print(f"\nHTTP fuzz: {f.served.requests:,} requests sent; {stored:,} reports stored")
    assert f.served.requests >= 5000
