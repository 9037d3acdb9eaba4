"""``robust=true`` on ``GET /v1/estimates`` (issue 26): every kind answers it, a categorical
or numeric answer carries the core's ``est.robust(beta)`` computed from the same sums, and
a maximal gain attack on randomized response that lifts a target past 100% is brought
back within it, its genuine fraction inside the robust interval."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.aggregate import Aggregate
from ldpkit.estimates import FrequencyEstimate, MeanEstimate
from ldpkit.intervals import support_interval
from ldpkit.metrics import MetricDefinition
from ldpkit.screening import DEFAULT_FALSE_ALARM
from tests.harness import ThreadedCollector

from .helpers import (
    READ,
    auth,
    batch,
    estimates,
    make_config,
    new_ids,
    running,
    today,
    without_as_of,
)
from .test_disclosed_shift import ASKED, KINDS, SENDER, VALUES, send

ROBUST_KINDS = ("theme", "spend")  # categorical and numeric; the others have none


def core_estimate(d: MetricDefinition, part: dict[str, Any]) -> Any:
    """The core's estimate of an answer's (or a bucket's) served sufficient statistics."""
    sums = np.asarray(part["sums"], dtype=np.float64)
    return d.mechanism_instance.estimate(Aggregate(int(part["n"]), sums))


def served_robust(part: dict[str, Any]) -> dict[str, Any]:
    """A categorical answer's robust fields in the shape of ``RobustFrequencies.to_dict``."""
    items = part["items"]
    served = dict(part["robust"])
    for key, name in (("estimate", "robust"), ("low", "robust_low"), ("high", "robust_high")):
        served[key] = [i[name] for i in items]
    served["forgery_shift"] = [i["robust_forgery_shift"] for i in items]
    return served


ROBUST_FIELDS = {"robust", "robust_note", "robust_low", "robust_high", "robust_forgery_shift"}


def without_robust(data: Any) -> Any:
    """An answer without its robust fields (at any depth: buckets, items)."""
    if isinstance(data, dict):
        return {k: without_robust(v) for k, v in data.items() if k not in ROBUST_FIELDS}
    if isinstance(data, list):
        return [without_robust(v) for v in data]
    return data


def assert_core_robust(d: MetricDefinition, part: dict[str, Any], level: float) -> None:
    """``part``'s robust answer is the core's, to the last bit, at the answer's fraction."""
    estimate = core_estimate(d, part)
    beta = part["robust"]["forgery_fraction"]
    if isinstance(estimate, FrequencyEstimate):
        assert served_robust(part) == estimate.robust(beta).to_dict(level)
    else:
        assert isinstance(estimate, MeanEstimate)
        assert part["robust"] == estimate.robust(beta).to_dict(level)


async def test_every_kind_answers_robust_queries(database: Path) -> None:
    metrics = {name: {"epsilon": 4.0, **spec} for name, spec in KINDS.items()}
    async with running(make_config(database, metrics=metrics)) as client:
        for name, spec in metrics.items():
            d = MetricDefinition.from_dict(name, spec)
            asked = ASKED.get(name, {})
            status, empty = await estimates(client, name, robust=True, **asked)
            assert status == 200 and empty["n"] == 0, empty
            values = d.kind_spec.encode_many(d, VALUES[name] * 1000)
            rng = np.random.default_rng(11)
            await send(client, d, d.mechanism_instance.perturb(values, rng=rng))
            status, body = await estimates(
                client, name, robust=True, per_bucket=True, level=0.9, **asked
            )
            assert status == 200 and body["n"] == 4000 and len(body["buckets"]) == 1, body
            status, plain = await estimates(client, name, per_bucket=True, level=0.9, **asked)
            assert "robust" not in plain and "robust_note" not in plain
            for part in (empty, body, *body["buckets"]):
                if name not in ROBUST_KINDS:
                    assert part["robust"] is None, part
                    assert f"no robust estimate for a {spec.get('kind')} metric" in str(
                        body["robust_note"]
                    )
                    continue
                level = 0.95 if part is empty else 0.9
                assert part["robust"]["forgery_fraction"] == spec.get("forgery_fraction", 0.01)
                assert part["robust"]["level"] == level
                assert_core_robust(d, part, level)
            assert without_as_of(without_robust(body)) == without_as_of(plain)  # beside plain
        status, error = await estimates(client, "theme", robust="maybe")
        assert (status, error["param"]) == (400, "robust"), error
        assert "expected true or false" in error["detail"]


async def test_the_robust_values_are_the_cores_at_the_asked_fraction(database: Path) -> None:
    """Per bucket (each from its own reports), with the query's ``forgery_fraction``; the
    most forged reports the intervals allow is floor(beta n) of each part's n."""
    metrics = {"theme": {"epsilon": 1.0, **KINDS["theme"], "mechanism": "oue"}}
    async with running(make_config(database, metrics=metrics)) as client:
        d = MetricDefinition.from_dict("theme", metrics["theme"])
        m: Any = d.mechanism_instance
        rng = np.random.default_rng(3)
        sizes = (700, 3001)
        for k, size in enumerate(sizes):
            values = rng.choice(4, size=size, p=[0.6, 0.3, 0.1, 0.0])
            await send(client, d, m.perturb(values, rng=rng), today() - 86_400 * k)
        status, body = await estimates(
            client, "theme", robust=True, per_bucket=True, forgery_fraction=0.03, level=0.99
        )
        assert status == 200 and body["n"] == sum(sizes), body
        for part in (body, *body["buckets"]):
            assert part["robust"]["forged_reports"] == math.floor(0.03 * part["n"] + 1e-9)
            assert part["robust"]["simultaneous"] is False
            assert_core_robust(d, part, 0.99)
            robust = [i["robust"] for i in part["items"]]
            assert min(robust) >= 0.0 and sum(robust) == pytest.approx(1.0, abs=1e-12)
            for i in part["items"]:  # the robust interval contains the plain one
                assert i["robust_low"] <= i["low"] <= i["high"] <= i["robust_high"]


# --- the attack through a real collector ---------------------------------------------------

D, TARGET, HONEST, FORGED, LEVEL = 1024, 1000, 9900, 100, 0.999
ATTACKED = {
    "pick": {
        "categories": [f"c{i}" for i in range(D)],
        "epsilon": 1.0,
        "mechanism": "grr",
        "bucket": "day",
    }
}


async def test_a_maximal_gain_attack_past_100_percent_is_brought_within_it(
    database: Path,
) -> None:
    """GRR at d = 1,024, epsilon = 1 (the issue's first bullet): 1% of the reports forged,
    each claiming one target (maximal gain), sent with a relay token whose batches are not
    screened (``screen_relay = false``; screened, the pooled law holds this batch). The
    plain estimate of the target is about 6 (beta (1 - q) / (p - q) = 5.98 above its
    genuine fraction, stderr 0.19); the robust one is at most 1, and its interval is the
    honest reports' own: with m = floor(beta n) = 100 forged, all supporting the target,
    C - m is exactly the honest support count of n - m = 9,900 honest reports, so it misses
    the genuine fraction only as often as the honest interval does: asked at level 0.999
    (with this seed the target's honest count, 17 against 9.65 expected, lies beyond the
    95% interval's reach: honest chance, 2% of the time, not forgery)."""
    config = make_config(
        database, metrics=ATTACKED, screen_false_alarm=DEFAULT_FALSE_ALARM, screen_relay=False
    )
    async with running(config) as client:
        d = MetricDefinition.from_dict("pick", ATTACKED["pick"])
        m: Any = d.mechanism_instance
        rng = np.random.default_rng(26)
        weights = 1.0 / np.arange(1, D + 1) ** 1.1  # Zipf: the target is in the tail
        values = rng.choice(D, size=HONEST, p=weights / weights.sum())
        honest = np.asarray(m.perturb(values, rng=rng))
        forged = np.full(FORGED, TARGET, dtype=m.report_dtype)
        await send(client, d, np.concatenate([honest, forged]))
        status, body = await estimates(client, "pick", robust=True, level=LEVEL)
        assert status == 200 and body["n"] == HONEST + FORGED and body["forgery_fraction"] == 0.01
        assert body["robust"]["forged_reports"] == FORGED
        item = body["items"][TARGET]
        genuine = float(np.mean(values == TARGET))
        shift = 0.01 * (1 - m.q) / (m.p - m.q)
        stderr = math.sqrt(m.q * (1 - m.q) / (HONEST + FORGED)) / (m.p - m.q)
        assert item["estimate"] > 1.0 and abs(item["estimate"] - genuine - shift) < 5 * stderr
        assert not item["low"] <= genuine <= item["high"]  # the plain interval misses it
        assert 0.0 <= item["robust"] <= 1.0
        robust = [i["robust"] for i in body["items"]]
        assert sum(robust) == pytest.approx(1.0, abs=1e-12)
        assert item["robust_low"] <= genuine <= item["robust_high"]
        count = float(np.sum(honest == TARGET))
        alone = support_interval(np.array([count]), HONEST, m.p, m.q, level=LEVEL)
        assert item["robust_low"] == min(item["low"], float(alone.low[0]))
        assert_core_robust(d, body, LEVEL)


def test_the_analyst_and_the_cli_show_the_robust_estimates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The attacked target, and a mean and a distribution, read with the Python API (fields,
    table, CSV, pandas) and ``ldpkit estimates --robust``."""
    from ldpkit.analyst import Analyst
    from ldpkit.cli.registry import main

    metrics = {
        **ATTACKED,
        "spend": {"kind": "numeric", "bounds": [0.0, 100.0], "epsilon": 1.0},
        "minutes": {**KINDS["minutes"], "epsilon": 1.0},
    }
    d = MetricDefinition.from_dict("pick", ATTACKED["pick"])
    m: Any = d.mechanism_instance
    rng = np.random.default_rng(5)
    reports = np.concatenate(
        [m.perturb(rng.integers(0, 10, 990), rng=rng), np.full(10, TARGET, m.report_dtype)]
    )
    spend = MetricDefinition.from_dict("spend", metrics["spend"])
    numbers = spend.mechanism_instance.perturb(rng.uniform(20, 30, 1000), rng=rng)
    with ThreadedCollector(make_config(tmp_path / "c.sqlite3", metrics=metrics)) as live:
        blocks = [
            wire.Block(x.name, x.fingerprint, today(), new_ids(len(r)), r.tobytes())
            for x, r in ((d, reports), (spend, np.asarray(numbers)))
        ]
        answer = live.request(
            "POST",
            "/v1/reports",
            batch(*blocks),
            {**auth(SENDER), "Content-Type": wire.CONTENT_TYPE},
        )
        assert answer.status == 200
        analyst = Analyst(live.url, READ)
        result = analyst.estimates("pick", robust=True, per_bucket=True)
        assert result.robust == {
            "forgery_fraction": 0.01,
            "forged_reports": 10,
            "level": 0.95,
            "simultaneous": False,
        }
        assert result.estimate is not None
        core = result.estimate.robust(0.01)
        target = result.items[TARGET]
        assert target.estimate is not None and target.estimate > 1.0
        assert target.robust == core.frequencies[TARGET] and target.robust <= 1.0
        assert (target.robust_low, target.robust_high) == tuple(c[TARGET] for c in core.ci())
        assert target.robust_forgery_shift == core.forgery_shift()[TARGET]
        assert result.buckets[0].items[TARGET].robust == target.robust
        lines = result.to_table().splitlines()
        assert lines[2] == (
            "robust: the estimate projected onto what every honest population satisfies, its "
            "interval for the genuine reporters if up to 1% (10 of the 1000) of the reports "
            "are forged (docs/statistics.md)"
        )
        robust_columns = ["robust", "robust_low", "robust_high", "robust_forgery_shift"]
        assert lines[3].split()[5:] == ["forgery_shift", *robust_columns, "interval"]
        frame = result.to_pandas(per_bucket=False)
        assert list(frame.columns[-5:]) == [*robust_columns, "interval"]
        assert frame.loc[f"c{TARGET}", "robust"] == target.robust
        rows = list(csv_rows(result.to_csv()))
        assert float(rows[TARGET]["robust_high"]) == target.robust_high
        plain = analyst.estimates("pick")
        assert plain.robust is None and "robust" not in plain.to_csv().splitlines()[0]

        mean = analyst.estimates("spend", robust=True, forgery_fraction=0.05)
        assert mean.estimate is not None and isinstance(mean.estimate, MeanEstimate)
        served = mean.estimate.robust(0.05).to_dict()
        assert mean.robust == served
        assert (mean.robust_mean, mean.robust_low, mean.robust_high) == (
            served["mean"],
            served["low"],
            served["high"],
        )
        assert mean.rows()[0]["robust_forgery_shift"] == served["forgery_shift"]
        assert "robust_mean" in mean.to_table() and "up to 5% of the reports" in mean.to_table()

        histogram = analyst.estimates("minutes", robust=True)
        assert histogram.robust is None and histogram.robust_note is not None
        assert "robust: no robust estimate for a distribution metric" in histogram.to_table()

        where = ["--collector", live.url, "--token", READ]
        assert main(["estimates", "pick", "--robust", *where]) == 0
        out = capsys.readouterr().out
        assert "robust: the estimate projected onto" in out and "robust_forgery_shift" in out
        assert main(["estimates", "spend", "--robust", "--format", "csv", *where]) == 0
        head, row = capsys.readouterr().out.splitlines()
        assert float(dict(zip(head.split(","), row.split(","), strict=True))["robust_mean"]) == (
            mean.estimate.robust(0.01).mean
        )


def csv_rows(text: str) -> Any:
    import csv
    import io

    return csv.DictReader(io.StringIO(text))
