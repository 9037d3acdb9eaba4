"""What an estimates answer discloses about forged reports (issue 26): a mean pushed beyond
its bounds says so, and every answer's ``forgery_shift`` bounds what forged reports did."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.errors import ParameterError
from ldpkit.mechanisms import mechanism
from ldpkit.metrics import MetricDefinition, Period
from tests.harness import ThreadedCollector
from tests.shared.test_forgery_shift import _ends

from .helpers import (
    METRICS,
    READ,
    TOKENS,
    auth,
    batch,
    estimates,
    make_config,
    new_ids,
    post_batch,
    running,
    today,
    write_toml,
)
from .test_metrics_api import put

SENDER = "relay" if "relay" in TOKENS else "ingest"  # a token that may send many reports
LAPLACE: dict[str, Any] = {
    "kind": "numeric",
    "bounds": [0.0, 100.0],
    "epsilon": 1.0,
    "mechanism": "laplace",
}


async def send(
    client: TestClient, definition: MetricDefinition, reports: Any, bucket: int | None = None
) -> None:
    array = np.ascontiguousarray(reports, dtype=definition.mechanism_instance.report_dtype)
    block = wire.Block(
        definition.name,
        definition.fingerprint,
        today() if bucket is None else bucket,
        new_ids(len(array)),
        array.tobytes(),
    )
    status, answer = await post_batch(client, batch(block))
    assert status == 200 and answer["accepted"] == len(array), answer


async def test_forged_laplace_reports_at_the_cap_push_the_interval_beyond_the_bounds(
    database: Path,
) -> None:
    """5% forged reports at the noise cap: the 95% interval of a mean on [0, 100] was
    ``[100, 100]``, zero-width at the bound, as if certain. Now it is the interval the reports
    give, said to lie beyond the bounds, and the disclosed shift covers what they did."""
    async with running(make_config(database, metrics={"spend": LAPLACE})) as client:
        d = MetricDefinition.from_dict("spend", LAPLACE)
        m: Any = d.mechanism_instance
        rng = np.random.default_rng(7)
        honest = m.perturb(rng.uniform(40.0, 60.0, 9500), rng=rng)
        await send(client, d, honest)
        await send(client, d, np.full(500, m.grid_steps + m.noise_cap))
        status, body = await estimates(client, "spend", forgery_fraction=0.05)
        assert status == 200 and body["n"] == 10_000
        assert body["beyond_bounds"] == "upper" and body["clamped_mean"] == 100.0
        z = 1.959963984540054
        assert (body["low"], body["high"]) == pytest.approx(
            (body["mean"] - z * body["stderr"], body["mean"] + z * body["stderr"]), rel=1e-12
        )
        assert body["low"] > 100.0 and body["high"] - body["low"] > 0.1 * body["stderr"]
        moved = body["mean"] - m.estimate(m.aggregate(honest)).mean
        assert body["forgery_fraction"] == 0.05
        assert 0 < moved <= body["forgery_shift"] == pytest.approx(0.05 * 4900.0)


# --- the disclosed shift against every forged report, through the collector's answer -------

LN3 = math.log(3.0)
"""e^epsilon = 3 (SUE: e^(epsilon / 2) = 3): every report's probability is rational, so a
multiple of their denominators' lcm of honest reports realises a population's law exactly:
the support counts any honest population has in expectation, and which the disclosed bound
is about (a drawn sample strays from them by chance, which is not forgery)."""
LEAVES = ["A/a", "A/b", "B/c", "B/d"]
SQUARE = {"x": ["0", "1"], "y": ["0", "1"]}
CATEGORIES = ["a", "b", "c", "d"]
ENUMERATED: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "grr": ({"categories": CATEGORIES, "mechanism": "grr", "epsilon": LN3}, {}),
    "oue": ({"categories": CATEGORIES, "mechanism": "oue", "epsilon": LN3}, {}),
    "sue": ({"categories": CATEGORIES, "mechanism": "sue", "epsilon": 2 * LN3}, {}),
    "ss": ({"categories": CATEGORIES, "mechanism": "ss", "epsilon": LN3}, {}),
    "hr": ({"categories": CATEGORIES, "mechanism": "hr", "epsilon": LN3}, {}),
    "rollup": (
        {"kind": "hierarchy", "categories": LEAVES, "mechanism": "rollup", "oracle": "grr"},
        {"depth": "1"},
    ),
    "levels": ({"kind": "hierarchy", "categories": LEAVES, "mechanism": "levels"}, {}),
    "joint_marginals": (
        {"kind": "table", "dimensions": SQUARE, "mechanism": "joint_marginals", "oracle": "grr"},
        {},
    ),
    "hh": (
        {"kind": "distribution", "bounds": [0.0, 8.0], "resolution": 8, "mechanism": "hh"},
        {"bins": "8", "quantiles": "0.2,0.5,0.9", "range": "0.3,5.2"},
    ),
}


def outputs(part: dict[str, Any]) -> tuple[list[float | None], list[float | None]]:
    """Every estimate of an answer (or of one of its buckets) beside its ``forgery_shift``:
    items, a table's marginals, strings' candidates, a range, a mean, then quantiles."""
    found: list[tuple[Any, Any]] = []
    groups = [part.get("items") or (), part.get("candidates") or ()]
    groups += list((part.get("marginals") or {}).values())
    for item in (i for group in groups for i in group):
        found.append((item["estimate"], item["forgery_shift"]))
    if "range" in part:
        found.append((part["range"]["estimate"], part["range"]["forgery_shift"]))
    if "mean" in part:
        found.append((part["mean"], part.get("mean_forgery_shift", part.get("forgery_shift"))))
    found += [(q["value"], q["forgery_shift"]) for q in part.get("quantiles") or ()]
    values, shifts = zip(*found, strict=True) if found else ((), ())
    return list(values), list(shifts)


def exact_reports(records: npt.NDArray[Any], probs: npt.NDArray[np.float64], n: int) -> Any:
    """n reports holding each of ``records`` in proportion ``probs`` exactly."""
    counts = probs * n
    assert np.allclose(counts, np.round(counts), rtol=0, atol=1e-6), "n realises the law"
    return np.repeat(records, np.round(counts).astype(np.int64))


def common_size(probs: Sequence[npt.NDArray[np.float64]], at_least: int) -> int:
    """The smallest multiple of the probabilities' denominators' lcm from ``at_least``."""
    denominators = [
        Fraction(float(p)).limit_denominator(10**6).denominator for ps in probs for p in ps
    ]
    step = math.lcm(*denominators)
    return step * max(1, -(-at_least // step))


async def forge_every_report(
    client: TestClient,
    d: MetricDefinition,
    populations: Sequence[Any],
    candidates: Any,
    forged: int,
    query: dict[str, str],
) -> npt.NDArray[np.float64]:
    """Bucket k < P: population k's honest reports; then one bucket per population and
    candidate: the same honest reports and ``forged`` copies of the candidate. Every estimate
    of each forged bucket moves from the honest one by at most its disclosed shift at the
    fraction forged; the largest ratio of the two, per output."""
    start = Period.HOUR.start(time.time()) - 600 * 3600
    pairs = [(p, None) for p in range(len(populations))]
    pairs += [(p, c) for p in range(len(populations)) for c in range(len(candidates))]
    for k, (p, c) in enumerate(pairs):
        extra = [] if c is None else [np.repeat(candidates[c : c + 1], forged)]
        await send(client, d, np.concatenate([populations[p], *extra]), start + 3600 * k)
    beta = forged / (len(populations[0]) + forged)
    status, body = await estimates(
        client, d.name, per_bucket=True, forgery_fraction=repr(beta), **query
    )
    assert status == 200 and body["forgery_fraction"] == beta, body
    parts = {b["bucket"]: b for b in body["buckets"]}
    worst = np.zeros(0)
    for k, (p, c) in enumerate(pairs):
        if c is None:
            continue
        seen, shifts = (np.array(o, dtype=np.float64) for o in outputs(parts[start + 3600 * k]))
        honest = np.array(outputs(parts[start + 3600 * p])[0], dtype=np.float64)
        change = np.abs(seen - honest)
        assert bool(np.all(change <= shifts * (1 + 1e-9) + 1e-12)), (p, c, change, shifts)
        worst = np.maximum(worst, change / shifts) if worst.size else change / shifts
    return worst


async def test_the_disclosed_shift_bounds_every_forged_report(database: Path) -> None:
    """Small domains (4 categories, leaves or cells; 8 leaves of a distribution): every
    report the mechanism accepts, forged by about 2% of a bucket's reports, against every
    honest population at one value."""
    metrics = {n: {"epsilon": LN3, **spec, "bucket": "hour"} for n, (spec, _) in ENUMERATED.items()}
    async with running(make_config(database, metrics=metrics)) as client:
        for name, (_, query) in ENUMERATED.items():
            d = MetricDefinition.from_dict(name, metrics[name])
            m: Any = d.mechanism_instance
            oracles = [*d.resolved_oracle, *getattr(m, "depth_oracles", dict)().values()]
            assert "olh" not in oracles  # every report is listed (no hash keys to choose)
            values = [0.5 + i for i in range(8)] if name == "hh" else range(4)
            laws = [m.output_probabilities(v) for v in values]
            distinct = {r.tobytes(): r for records, _ in laws for r in records}
            candidates = np.array(list(distinct.values()), dtype=m.report_dtype)
            n = common_size([probs for _, probs in laws], 2000)
            populations = [exact_reports(records, probs, n) for records, probs in laws]
            worst = await forge_every_report(client, d, populations, candidates, -(-n // 49), query)
            # Reached: by a frequency oracle's, a structured design's, a bin's, a range's
            # and a mean's; a quantile's is an upper bound only (docs/statistics.md).
            quantiles = len(query["quantiles"].split(",")) if "quantiles" in query else 0
            assert float(np.min(worst[: worst.size - quantiles])) >= 1 - 1e-9, (name, worst)


@pytest.mark.parametrize("name", ["laplace", "duchi", "piecewise", "hybrid"])
async def test_the_disclosed_shift_bounds_forged_numbers(database: Path, name: str) -> None:
    """A mean: honest reports whose debiased mean is the lower bound (or the upper), the
    fewest of the extreme reports that make it so; forged: either extreme report, 2%."""
    spec = {"kind": "numeric", "bounds": [0.0, 10.0], "epsilon": 1.0, "mechanism": name}
    metric = {**spec, "bucket": "hour"}
    async with running(make_config(database, metrics={"mean": metric})) as client:
        d = MetricDefinition.from_dict("mean", metric)
        m: Any = d.mechanism_instance
        ends = np.array(_ends(m), dtype=m.report_dtype)
        low, high = (float(m.aggregate(ends[i : i + 1]).sums[0]) for i in (0, 1))
        n = 50_000
        populations = []
        for target, rounding in ((-1.0, math.ceil), (1.0, math.floor)):
            tops = rounding(n * (target - low) / (high - low))  # a mean within [-1, 1]
            populations.append(np.repeat(ends, [n - tops, tops]))
        worst = await forge_every_report(client, d, populations, ends, 1000, {})
        assert float(worst[0]) >= 1 - 1e-3  # reached, but for the honest mean's rounding


# --- every kind's answer carries the fields --------------------------------------------------

KINDS: dict[str, dict[str, Any]] = {
    "theme": {"categories": CATEGORIES, "forgery_fraction": 0.05},  # from the config file
    "spend": {"kind": "numeric", "bounds": [0.0, 100.0]},
    "minutes": {"kind": "distribution", "bounds": [0.0, 60.0], "resolution": 16},
    "region": {"kind": "hierarchy", "categories": LEAVES},
    "car": {"kind": "table", "dimensions": SQUARE},
    "word": {"kind": "strings", "max_length": 3, "k": 3},
}
VALUES: dict[str, Any] = {
    "theme": ["a", "b", "b", "c"],
    "spend": [10.0, 20.0, 90.0, 40.0],
    "minutes": [5.0, 30.0, 31.0, 59.0],
    "region": LEAVES,
    "car": [{"x": "0", "y": "1"}, {"x": "1", "y": "1"}, {"x": "0", "y": "0"}, {"x": "1", "y": "0"}],
    "word": ["ab", "ab", "ab", "c"],
}
ASKED = {"minutes": {"quantiles": "0.5", "range": "10,20"}, "word": {"candidates": "ab,zz"}}


def assert_disclosed(part: dict[str, Any], empty: bool) -> None:
    """Every estimate of ``part`` has a positive ``forgery_shift``: a number even without
    reports (it does not depend on them), but a quantile's (read from the data)."""
    values, shifts = outputs(part)
    assert shifts, part
    quantiles = len(part.get("quantiles") or ())
    assert all(s is not None and s > 0 for s in shifts[: len(shifts) - quantiles]), part
    assert all((s is None) == empty for s in shifts[len(shifts) - quantiles :]), part
    assert all((v is None) == empty for v in values), part


async def test_every_kind_answers_with_its_forgery_shifts(database: Path) -> None:
    metrics = {name: {"epsilon": 4.0, **spec} for name, spec in KINDS.items()}
    async with running(make_config(database, metrics=metrics)) as client:
        for name, spec in metrics.items():
            d = MetricDefinition.from_dict(name, spec)
            status, empty = await estimates(client, name, per_bucket=True, **ASKED.get(name, {}))
            assert status == 200 and empty["n"] == 0 and empty["buckets"] == []
            assert empty["forgery_fraction"] == spec.get("forgery_fraction", 0.01)
            assert_disclosed(empty, empty=True)
            values = d.kind_spec.encode_many(d, VALUES[name] * 1000)
            rng = np.random.default_rng(5)
            await send(client, d, d.mechanism_instance.perturb(values, rng=rng))
            status, body = await estimates(
                client, name, per_bucket=True, forgery_fraction=0.2, **ASKED.get(name, {})
            )
            assert status == 200 and body["n"] == 4000 and body["forgery_fraction"] == 0.2
            for part in (body, *body["buckets"]):
                assert_disclosed(part, empty=False)
            assert body.get("items", [{}])  # strings: "ab" is found
            again = await estimates(client, name, forgery_fraction=0.02, **ASKED.get(name, {}))
            # The shifts scale with the fraction: linear for every estimate but a quantile's.
            shifts = np.array(outputs(body)[1], dtype=np.float64)
            smaller = np.array(outputs(again[1])[1], dtype=np.float64)
            linear = slice(0, len(shifts) - len(body.get("quantiles") or ()))
            assert np.all(smaller[linear] < shifts[linear])


def test_a_config_file_takes_the_key_and_checks_it(tmp_path: Path) -> None:
    from ldpkit.collector.config import ConfigError, load_config

    path = write_toml(
        tmp_path / "c.toml", metrics={"theme": {**METRICS["theme"], "forgery_fraction": 0.02}}
    )
    assert load_config(path, environ={}).metrics["theme"].forgery_fraction == 0.02
    write_toml(path, metrics={"theme": {**METRICS["theme"], "forgery_fraction": 0.9}})
    with pytest.raises(ConfigError, match=r"\[metrics.theme\] metric theme: forgery_fraction must"):
        load_config(path, environ={})


async def test_the_fraction_is_checked_and_a_put_changes_it_alone(client: TestClient) -> None:
    for bad in ("0", "0.6", "-0.01", "nan", "1%", ""):
        status, body = await estimates(client, "theme", forgery_fraction=bad)
        assert (status, body["param"]) == (400, "forgery_fraction"), body
        assert "(0, 0.5]" in body["detail"]
    status, body = await estimates(client, "theme")
    version, shift = body["version"], body["items"][0]["forgery_shift"]
    assert body["forgery_fraction"] == 0.01
    theme = {**METRICS["theme"], "forgery_fraction": 0.03}
    status, answer = await put(client, "theme", theme)
    assert (status, answer["outcome"]) == (200, "updated"), answer  # the same version
    assert answer["definition"]["fingerprint"] == version
    status, body = await estimates(client, "theme")
    assert body["version"] == version and body["forgery_fraction"] == 0.03
    assert body["items"][0]["forgery_shift"] == pytest.approx(3 * shift, rel=1e-12)
    status, answer = await put(client, "theme", {**theme, "forgery_fraction": 0.7})
    assert (status, answer["error"]) == (400, "invalid_definition")
    assert "forgery_fraction" in answer["detail"]


# --- the analyst's API and the CLI ------------------------------------------------------------


def test_the_analyst_and_the_cli_say_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The forged Laplace mean of the first test, read with the Python API and `ldpkit
    estimates`: the shift beside the interval, the line saying what it means, the side."""
    from ldpkit.analyst import Analyst
    from ldpkit.cli.registry import main

    d = MetricDefinition.from_dict("spend", LAPLACE)
    m: Any = d.mechanism_instance
    rng = np.random.default_rng(7)
    reports = np.concatenate(
        [
            m.perturb(rng.uniform(40.0, 60.0, 9500), rng=rng),
            np.full(500, m.grid_steps + m.noise_cap),
        ]
    )
    with ThreadedCollector(make_config(tmp_path / "c.sqlite3", metrics={"spend": LAPLACE})) as live:
        body = batch(
            wire.Block("spend", d.fingerprint, today(), new_ids(10_000), reports.tobytes())
        )
        answer = live.request(
            "POST", "/v1/reports", body, {**auth(SENDER), "Content-Type": wire.CONTENT_TYPE}
        )
        assert answer.status == 200
        analyst = Analyst(live.url, READ)
        result = analyst.estimates("spend", per_bucket=True, forgery_fraction=0.05)
        assert result.forgery_fraction == 0.05 and result.forgery_shift == pytest.approx(245.0)
        assert result.beyond_bounds == result.buckets[0].beyond_bounds == "upper"
        assert result.low is not None and result.high is not None and 100 < result.low < result.high
        assert result.rows()[0]["forgery_shift"] == pytest.approx(245.0)
        table = result.to_table().splitlines()
        assert table[1] == (
            "forgery shift: how far 5% forged reports could move each estimate, whatever they "
            "are (docs/statistics.md)"
        )
        assert table[2].split() == [
            *["mean", "clamped_mean", "stderr", "low", "high"],
            "forgery_shift",
            "beyond_bounds",
            "interval",
        ]
        assert table[4].startswith("beyond the bounds: the 95% interval lies wholly above")
        with pytest.raises(ParameterError, match="forgery_fraction"):
            analyst.estimates("spend", forgery_fraction=0.7)
        assert main(["estimates", "spend", "--collector", live.url, "--token", READ]) == 0
        out = capsys.readouterr().out
        assert "how far 1% forged reports" in out and "forged reports are the likely cause" in out
        assert (
            main(
                ["estimates", "spend", "--collector", live.url, "--token", READ, "--format", "csv"]
            )
            == 0
        )
        head, row = capsys.readouterr().out.splitlines()
        assert dict(zip(head.split(","), row.split(","), strict=True))["beyond_bounds"] == "upper"


def test_plan_shows_the_shift_a_metric_would_disclose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ldpkit.cli.registry import main

    def plan(*args: str) -> str:
        code = main(["plan", *args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    # The GRR at d = 1,024, epsilon 1: 1% forged reports move an item by 5.99.
    grr: Any = mechanism("grr", epsilon=1.0, domain_size=1024)
    expected = 0.01 * (1 - grr.q) / (grr.p - grr.q)
    out = plan("--epsilon", "1", "-d", "1024", "--mechanism", "grr", "--n", "10000")
    assert "forgery shift: how far 1% forged reports could move an estimate" in out
    assert f"  each category's fraction: {expected:.4g}" in out
    rows = json.loads(
        plan(
            "--epsilon",
            "1",
            "--bounds",
            "0",
            "10",
            "--n",
            "100",
            "--half-width",
            "1",
            "--forgery-fraction",
            "0.05",
            "--format",
            "json",
        )
    )["plans"]
    assert [r["forgery_fraction"] for r in rows] == [0.05, 0.05]
    mean = mechanism(rows[0]["mechanism"], epsilon=1.0, bounds=(0.0, 10.0))
    assert rows[0]["forgery_shift"] == pytest.approx(
        mean.estimate(mean.empty_aggregate()).forgery_shift(0.05)
    )
    kind = json.loads(
        plan("--epsilon", "1", "--leaves", "A/a,A/b,B/c", "--n", "1000", "--format", "json")
    )
    assert set(kind["forgery_shift"]) == {"a node at depth 1", "a node at depth 2"}
    code = main(["plan", "--epsilon", "1", "-d", "8", "--n", "100", "--forgery-fraction", "0.7"])
    assert (
        code == 2 and "--forgery-fraction must be a number in (0, 0.5]" in capsys.readouterr().err
    )
    metrics = {
        "spend": {**LAPLACE, "forgery_fraction": 0.05},
        "minutes": {**KINDS["minutes"], "epsilon": 1.0, "forgery_fraction": 0.02},
    }
    with ThreadedCollector(make_config(tmp_path / "c.sqlite3", metrics=metrics)) as live:
        where = ("--collector", live.url, "--token", READ)
        out = plan("--metric", "spend", "--n", "1000", *where)
        assert "how far 5% forged reports" in out and "  the mean: 245" in out  # 0.05 x 4,900
        out = plan("--metric", "minutes", "--n", "1000", *where)
        assert "how far 2% forged reports" in out and "  each of 16 equal bins: " in out
