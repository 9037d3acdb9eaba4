"""Helpers for collector tests: configs, batches, requests."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.collector.config import CollectorConfig, config_from_dict
from ldpkit.metrics import MetricDefinition, Period
from tests.harness import running as running  # the one harness (tests/harness.py)

INGEST = "ingest-token-0001"  # a device token: one device's reports
RELAY = "relay-token-0001"  # many devices' reports: what these tests send
READ = "read-token-0001"
ADMIN = "admin-token-0001"
TOKENS = {"ingest": INGEST, "read": READ, "admin": ADMIN, "relay": RELAY}
THEME = ["light", "dark", "system", "high-contrast"]

METRICS: dict[str, dict[str, Any]] = {
    "theme": {"categories": THEME, "epsilon": 1.0, "mechanism": "grr"},
    "latency": {"kind": "numeric", "bounds": [0.0, 1000.0], "epsilon": 1.0, "mechanism": "duchi"},
    "empty": {"categories": ["a", "b", "c"], "epsilon": 2.0, "mechanism": "grr"},
}


def make_config(
    database: Path | str, *, metrics: dict[str, Any] | None = None, **collector: Any
) -> CollectorConfig:
    """The test config. Screening is off unless ``screen_false_alarm`` is given: most tests
    send made-up reports (item indexes, not perturbed values) that no honest population
    sends; tests/collector/test_forgery.py screens with the defaults."""
    collector.setdefault("screen_false_alarm", 0)
    # Maintained estimates (strings, hierarchies, tables, distributions): the first is
    # waited for however busy the machine (readiness, not a time bound).
    collector.setdefault("estimate_deadline_seconds", 600)
    collector.setdefault("estimate_interval_seconds", 0)
    data = {
        "collector": {"database": str(database), **collector},
        "tokens": {kind: [token] for kind, token in TOKENS.items()},
        "metrics": METRICS if metrics is None else metrics,
    }
    return config_from_dict(data, source="<test>", environ={})


def auth(kind: str | None) -> dict[str, str]:
    if kind is None:
        return {}
    token = TOKENS.get(kind, kind)
    return {"Authorization": f"Bearer {token}"}


def definition(name: str) -> MetricDefinition:
    return MetricDefinition.from_dict(name, METRICS[name])


def today(period: Period = Period.DAY) -> int:
    return period.start(time.time())


def new_ids(n: int) -> bytes:
    return os.urandom(wire.ID_SIZE * n)


def block_of(
    name: str,
    reports: np.ndarray,
    *,
    ids: bytes | None = None,
    bucket: int | None = None,
    fingerprint: str | None = None,
) -> wire.Block:
    d = definition(name) if name in METRICS else None
    fp = fingerprint or (d.fingerprint if d is not None else "0" * 16)
    array = np.ascontiguousarray(reports)
    if ids is None:
        ids = new_ids(len(array))
    return wire.Block(name, fp, today() if bucket is None else bucket, ids, array.tobytes())


def batch(*blocks: wire.Block) -> bytes:
    return wire.encode_batch(list(blocks))


def grr_reports(values: list[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype="<u4")


async def post_batch(
    client: TestClient,
    body: bytes,
    *,
    token: str | None = "relay",
    content_type: str = wire.CONTENT_TYPE,
) -> tuple[int, Any]:
    headers = {**auth(token), "Content-Type": content_type}
    resp = await client.post("/v1/reports", data=body, headers=headers)
    return resp.status, await resp.json()


async def estimates(client: TestClient, name: str, **params: Any) -> tuple[int, Any]:
    """``GET /v1/estimates/{name}``; a maintained estimate computed from the data as it is
    (``wait``, unless given: readiness, it answers once computed)."""
    params.setdefault("wait", 120)
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    resp = await client.get(f"/v1/estimates/{name}", params=query, headers=auth("read"))
    return resp.status, await resp.json()


def without_as_of(answer: Any) -> Any:
    """An estimates answer (parsed, or its bytes) without ``as_of`` (when each part was
    computed: it differs between two replicas and two queries), in the total and buckets."""
    data = json.loads(answer) if isinstance(answer, bytes | str) else answer
    out = {k: v for k, v in data.items() if k != "as_of"}
    if "buckets" in out:
        out["buckets"] = [without_as_of(b) for b in out["buckets"]]
    return out


def toml_value(value: Any) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are valid TOML."""
    return json.dumps(value)


def write_toml(
    path: Path,
    *,
    metrics: dict[str, Any] | None = None,
    database: str = "c.sqlite3",
    **collector: Any,
) -> Path:
    """A collector TOML file for ``ldpkit serve`` (the test tokens; ``metrics`` tables)."""
    lines = ["[collector]", f"database = {toml_value(database)}"]
    lines += [f"{key} = {toml_value(value)}" for key, value in collector.items()]
    lines += ["", "[tokens]"]
    lines += [f"{kind} = [{toml_value(token)}]" for kind, token in TOKENS.items()]
    for name, spec in (METRICS if metrics is None else metrics).items():
        lines += ["", f"[metrics.{name}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in spec.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
