"""GET /v1/estimates: against simulated populations, time ranges, versions, bad queries."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from ldpkit.collector.queries import parse_time
from ldpkit.errors import QueryError
from ldpkit.metrics import Period

from .helpers import auth, batch, block_of, estimates, make_config, post_batch, running, today

USERS = 20_000
CATS = [f"c{i:02d}" for i in range(16)]
TRUTH = 1.0 / np.arange(1, 17) / np.sum(1.0 / np.arange(1, 17))  # Zipf over 16 categories
# Misses allowed among 16 per-item intervals: P(more misses) < 1% under the binomial law.
MAX_MISSES = {0.95: 3, 0.99: 1}


async def send(
    client: TestClient,
    name: str,
    reports: np.ndarray,
    *,
    bucket: int | None = None,
    size: int = 5000,
    fingerprint: str | None = None,
) -> None:
    for i in range(0, len(reports), size):
        status, answer = await post_batch(
            client,
            batch(block_of(name, reports[i : i + size], bucket=bucket, fingerprint=fingerprint)),
        )
        assert status == 200 and answer["accepted"] == len(reports[i : i + size]), answer


@pytest.mark.parametrize("mechanism", ["grr", "oue", "olh"])
async def test_categorical_population(database: Path, mechanism: str) -> None:
    metrics = {"pop": {"categories": CATS, "epsilon": 1.0, "mechanism": mechanism}}
    async with running(make_config(database, metrics=metrics)) as client:
        resp = await client.get("/v1/metrics/pop", headers=auth("read"))
        from ldpkit.metrics import MetricDefinition

        d = MetricDefinition.from_dict("pop", await resp.json())
        m = d.mechanism_instance
        rng = np.random.default_rng(2024)
        values = rng.choice(len(CATS), size=USERS, p=TRUTH)
        reports = m.perturb(values, rng=rng)
        await send(client, "pop", reports, fingerprint=d.fingerprint)
        truth = np.bincount(values, minlength=len(CATS)) / USERS
        expected = m.estimate(m.aggregate(reports))
        for level in (0.95, 0.99):
            status, est = await estimates(client, "pop", level=level, consistent=True)
            assert status == 200
            assert est["n"] == USERS and est["mechanism"] == mechanism and est["level"] == level
            assert [i["category"] for i in est["items"]] == CATS
            freq = np.array([i["estimate"] for i in est["items"]])
            low = np.array([i["low"] for i in est["items"]])
            high = np.array([i["high"] for i in est["items"]])
            # Exactly what the library computes from the same reports ...
            np.testing.assert_allclose(freq, expected.frequencies, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(
                [i["stderr"] for i in est["items"]], expected.stderr, rtol=1e-9
            )
            # ... intervals included, at the level asked (coverage alone passes any
            # interval wide enough, e.g. one at another level).
            want = expected.ci(level)
            np.testing.assert_allclose(low, want.low, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(high, want.high, rtol=1e-9, atol=1e-12)
            # ... and the intervals cover the truth (per item, so a rare miss is expected).
            misses = int(np.sum((truth < low) | (truth > high)))
            assert misses <= MAX_MISSES[level], (level, low, truth, high)
            consistent = np.array([i["consistent"] for i in est["items"]])
            assert np.all(consistent >= 0) and consistent.sum() == pytest.approx(1.0)


async def test_numeric_population(client: TestClient) -> None:
    from .helpers import definition

    m = definition("latency").mechanism_instance
    rng = np.random.default_rng(7)
    values = rng.gamma(2.0, 100.0, size=USERS).clip(0, 1000)
    reports = m.perturb(values, rng=rng)
    await send(client, "latency", reports)
    expected = m.estimate(m.aggregate(reports))
    for level in (0.95, 0.99):
        status, est = await estimates(client, "latency", level=level)
        assert status == 200 and est["n"] == USERS
        assert set(est) >= {"mean", "stderr", "low", "high"} and "items" not in est
        # Exactly what the library computes from the same reports, at the level asked ...
        want = expected.ci(level)
        served = [est["mean"], est["stderr"], est["low"], est["high"]]
        np.testing.assert_allclose(
            served, [expected.mean, expected.stderr, want.low, want.high], rtol=1e-9
        )
        # ... and the interval covers the reporters' mean.
        assert est["low"] <= values.mean() <= est["high"]


STRUCTURED = {
    "region": {
        "kind": "hierarchy",
        "categories": ["A/a", "A/b", "A/c", "A/d", "B/e", "B/f", "B/g"],
    },
    "car": {"kind": "table", "dimensions": {"x": ["0", "1", "2"], "y": ["0", "1"]}},
}
"""Populations with empty leaves and cells, so that the consistent estimates (Norm-Sub)
differ from the unbiased ones: their values are then told apart."""
STRUCTURED_VALUES: dict[str, list[Any]] = {
    "region": ["A/a"] * 5 + ["A/b"] * 3 + ["B/e"] * 2,
    "car": [{"x": "0", "y": "0"}] * 5 + [{"x": "1", "y": "1"}] * 3 + [{"x": "2", "y": "0"}] * 2,
}


async def test_hierarchy_and_table_answers_are_the_librarys(database: Path) -> None:
    """Every served number of a hierarchy (a depth, a subtree) and a table (cells and each
    marginal), consistent ones included, is what the library computes from the same reports
    (the collector's maintained estimate). Only shapes, categories and adding-up were checked
    over HTTP, and the unbiased estimates add up as well as the consistent ones: a planted
    "consistent" field serving the unbiased estimate passed every collector and client test
    of hierarchies."""
    from ldpkit.metrics import MetricDefinition

    metrics = {name: {"epsilon": 1.0, **spec} for name, spec in STRUCTURED.items()}
    async with running(make_config(database, metrics=metrics)) as client:
        for name in STRUCTURED:
            moved = 0.0
            resp = await client.get(f"/v1/metrics/{name}", headers=auth("read"))
            d = MetricDefinition.from_dict(name, await resp.json())
            m: Any = d.mechanism_instance
            values = d.kind_spec.encode_many(d, STRUCTURED_VALUES[name] * 400)
            reports = m.perturb(values, rng=np.random.default_rng(31))
            await send(client, name, reports, fingerprint=d.fingerprint)
            expected = m.estimate(m.aggregate(reports))
            if name == "region":
                asked = [({"depth": 1}, expected.level(1)), ({"depth": 2}, expected.level(2))]
                asked.append(({"subtree": "A"}, expected.subtree("A")))
            else:
                asked = [({}, expected.cells), *(({}, g) for g in expected.marginals.values())]
            for i, (query, group) in enumerate(asked):
                status, body = await estimates(client, name, consistent=True, level=0.9, **query)
                assert status == 200 and body["n"] == len(reports), body
                if name == "car":
                    items = [body["items"], *body["marginals"].values()][i]
                else:
                    items = body["items"]
                low, high = group.ci(0.9)
                served = {k: [item[k] for item in items] for k in items[0]}
                for key, want in (
                    ("estimate", group.frequencies),
                    ("stderr", group.stderr),
                    ("low", low),
                    ("high", high),
                    ("consistent", group.consistent()),
                ):
                    np.testing.assert_allclose(served[key], want, rtol=1e-9, atol=1e-12)
                moved = max(moved, float(np.max(np.abs(group.consistent() - group.frequencies))))
            # Norm-Sub moved some estimate far beyond rounding: the check tells them apart.
            assert moved > 1e-3, (name, moved)


async def test_strings_answer_is_the_librarys(database: Path) -> None:
    """A strings metric's served items and named candidates (estimates, stderrs, intervals)
    are the library's answer to the same reports at the level asked. Strings were checked
    over HTTP against the truth within a stderr at the default level only: a planted strings
    kind answering at 0.95 whatever the level passed every collector and client test."""
    from ldpkit.metrics import MetricDefinition

    spec = {"kind": "strings", "max_length": 3, "k": 3, "epsilon": 4.0}
    async with running(make_config(database, metrics={"word": spec})) as client:
        resp = await client.get("/v1/metrics/word", headers=auth("read"))
        d = MetricDefinition.from_dict("word", await resp.json())
        m: Any = d.mechanism_instance
        words = ["ab"] * 5 + ["c"] * 3 + ["xyz"] * 2
        values = d.kind_spec.encode_many(d, words * 400)
        reports = m.perturb(values, rng=np.random.default_rng(41))
        await send(client, "word", reports, fingerprint=d.fingerprint)
        named = ["ab", "zz"]
        library = m.estimate(m.aggregate(reports))
        for level in (0.9, 0.99):
            status, body = await estimates(client, "word", level=level, candidates="ab,zz")
            assert status == 200 and body["n"] == len(reports) and body["level"] == level, body
            want = library.to_dict(named, level)
            assert [i["category"] for i in body["items"]] == ["ab", "c", "xyz"]
            for group in ("items", "candidates"):
                for key in ("estimate", "stderr", "low", "high"):
                    served = [i[key] for i in body[group]]
                    expected = [i[key] for i in want[group]]
                    np.testing.assert_allclose(served, expected, rtol=1e-9, atol=1e-12)
            # Another level's intervals differ: the check can tell them apart.
            default = library.to_dict(named, 0.95)
            assert all(
                a["high"] - a["low"] != b["high"] - b["low"]
                for a, b in zip(want["items"], default["items"], strict=True)
            )


async def test_no_reports_gives_nulls(client: TestClient) -> None:
    status, est = await estimates(client, "empty", consistent=True)
    assert status == 200 and est["n"] == 0
    assert all(
        i["estimate"] is None and i["low"] is None and i["high"] is None and i["consistent"] is None
        for i in est["items"]
    )
    status, est = await estimates(client, "latency")
    assert est["n"] == 0 and est["mean"] is None and est["low"] is None and est["stderr"] is None


async def test_buckets_and_time_ranges(client: TestClient) -> None:
    day = Period.DAY.seconds
    t0 = today()
    rng = np.random.default_rng(3)
    from .helpers import definition

    m = definition("theme").mechanism_instance
    first, second = (m.perturb(rng.integers(0, 4, size), rng=rng) for size in (300, 200))
    await send(client, "theme", first, bucket=t0 - day)
    await send(client, "theme", second, bucket=t0)
    _, est = await estimates(client, "theme", per_bucket=True)
    assert est["n"] == 500
    assert [(b["bucket"], b["n"]) for b in est["buckets"]] == [(t0 - day, 300), (t0, 200)]
    # The total and each bucket are the library's estimates of their own reports (counts
    # alone passed a total summed from the wrong buckets' sums).
    for part, reports in (
        (est, np.concatenate([first, second])),
        *zip(est["buckets"], (first, second), strict=True),
    ):
        want = m.estimate(m.aggregate(reports)).frequencies
        served = [i["estimate"] for i in part["items"]]
        np.testing.assert_allclose(served, want, rtol=1e-9, atol=1e-12)
    iso_today = datetime.fromtimestamp(t0, UTC).date().isoformat()
    for start in (t0, iso_today, f"{iso_today}T00:00:00Z", f"{iso_today}T01:00:00+01:00"):
        _, est = await estimates(client, "theme", **{"from": start})
        assert (est["n"], est["from"]) == (200, t0), start
    _, est = await estimates(client, "theme", to=t0)
    assert (est["n"], est["to"]) == (300, t0)
    _, est = await estimates(client, "theme", **{"from": t0 - day, "to": t0 + 1})
    assert est["n"] == 500
    _, est = await estimates(client, "theme", **{"from": t0 + day})
    assert est["n"] == 0 and est["items"][0]["estimate"] is None


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"level": "2"}, "level"),
        ({"level": "abc"}, "level"),
        ({"level": "0"}, "level"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2025-13-40"}, "to"),
        ({"from": "2025-01-02", "to": "2025-01-01"}, "to"),
        ({"consistent": "maybe"}, "consistent"),
        ({"per_bucket": "2"}, "per_bucket"),
        ({"version": "xyz"}, "version"),
        ({"levle": "0.9"}, "levle"),
    ],
)
async def test_bad_query_parameters(client: TestClient, params: dict[str, str], param: str) -> None:
    resp = await client.get("/v1/estimates/theme", params=params, headers=auth("read"))
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "invalid_parameter"
    assert answer["param"] == param and answer["detail"].startswith(param)


async def test_repeated_parameter_and_unknown_version(client: TestClient) -> None:
    resp = await client.get("/v1/estimates/theme?level=0.9&level=0.8", headers=auth("read"))
    assert resp.status == 400 and (await resp.json())["param"] == "level"
    status, answer = await estimates(client, "theme", version="0123456789abcdef")
    assert status == 404 and answer["error"] == "unknown_version"


def test_parse_time() -> None:
    assert parse_time("1700000000", "from") == 1700000000
    assert parse_time("1700000000.2", "from") == 1700000001
    assert parse_time("2025-11-21", "from") == 1763683200
    assert parse_time("2025-11-21T00:00:00Z", "from") == 1763683200
    assert parse_time("2025-11-21T02:00:00+02:00", "from") == 1763683200
    assert parse_time("2025-11-21 00:00:00", "from") == 1763683200
    with pytest.raises(QueryError, match=r"^to: "):
        parse_time("soon", "to")
