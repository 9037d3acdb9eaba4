"""``estimator=ml`` on ``GET /v1/estimates`` of a categorical metric (issue 30): the
constrained maximum-likelihood frequencies with profile intervals, as the core computes
them from the served sums, through HTTP, the Analyst (which rebuilds the same estimate)
and the CLI; refused by name for a mechanism whose reports are not counts of outputs, for
a robust query, and for another kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.aggregate import Aggregate
from ldpkit.mechanisms._profile import PROFILE, MLFrequencies, ml_frequencies
from ldpkit.metrics import MetricDefinition
from tests.harness import ThreadedCollector

from .helpers import READ, auth, batch, estimates, make_config, new_ids, running, today
from .test_disclosed_shift import SENDER, send

STARS = ["1", "2", "3", "4", "5"]
METRICS: dict[str, dict[str, Any]] = {
    "stars": {"categories": STARS, "epsilon": 2.0, "mechanism": "exponential", "ordered": True},
    "colour": {"categories": STARS, "epsilon": 2.0, "mechanism": "grr"},
    "fruit": {"categories": STARS, "epsilon": 2.0, "mechanism": "oue"},
    "spend": {"kind": "numeric", "bounds": [0.0, 100.0], "epsilon": 2.0},
}
VALUES = ["2", "3", "3", "4", "4", "4", "5", "5"] * 50


def reports(d: MetricDefinition) -> Any:
    values = d.kind_spec.encode_many(d, VALUES)
    return d.mechanism_instance.perturb(values, rng=np.random.default_rng(21))


def core(d: MetricDefinition, part: dict[str, Any]) -> MLFrequencies:
    sums = np.asarray(part["sums"], dtype=np.float64)
    return ml_frequencies(d.mechanism_instance, Aggregate(int(part["n"]), sums))


async def test_the_ml_answer_is_the_cores_and_is_refused_where_it_does_not_apply(
    database: Path,
) -> None:
    async with running(make_config(database, metrics=METRICS)) as client:
        for name in ("stars", "colour", "fruit"):
            d = MetricDefinition.from_dict(name, METRICS[name])
            await send(client, d, reports(d))
        for name in ("stars", "colour"):
            d = MetricDefinition.from_dict(name, METRICS[name])
            status, body = await estimates(
                client, name, estimator="ml", level=0.9, per_bucket=True, simultaneous=True
            )
            assert status == 200 and body["estimator"] == "ml", body
            for part in (body, *body["buckets"]):
                assert part["interval"] == PROFILE
                est = core(d, part)
                low, high = est.ci(0.9, simultaneous=True)
                assert [i["estimate"] for i in part["items"]] == est.frequencies.tolist()
                assert [i["low"] for i in part["items"]] == np.asarray(low).tolist()
                assert [i["high"] for i in part["items"]] == np.asarray(high).tolist()
                assert [i["stderr"] for i in part["items"]] == est.stderr.tolist()
            status, one = await estimates(client, name, estimator="ml", level=0.9)
            wide = [i["high"] - i["low"] for i in body["items"]]
            narrow = [i["high"] - i["low"] for i in one["items"]]
            assert all(w >= v - 1e-9 for w, v in zip(wide, narrow, strict=True))
            assert sum(wide) > sum(narrow) and one["interval"] == PROFILE
            status, plain = await estimates(client, name, estimator="inversion")
            assert status == 200 and "estimator" not in plain and plain["interval"] != PROFILE
        status, error = await estimates(client, "fruit", estimator="ml")
        assert (status, error["param"]) == (400, "estimator") and "oue" in error["detail"]
        status, error = await estimates(client, "colour", estimator="ml", robust=True)
        assert (status, error["param"]) == (400, "estimator"), error
        status, error = await estimates(client, "colour", estimator="mle")
        assert (status, error["param"]) == (400, "estimator"), error
        status, error = await estimates(client, "spend", estimator="ml")
        assert (status, error["param"]) == (400, "estimator") and "numeric" in error["detail"]


def test_the_analyst_and_the_cli_ask_the_ml_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ldpkit.analyst import Analyst
    from ldpkit.cli.registry import main

    metrics = {"stars": METRICS["stars"]}
    d = MetricDefinition.from_dict("stars", metrics["stars"])
    array = np.asarray(reports(d), dtype=d.mechanism_instance.report_dtype)
    with ThreadedCollector(make_config(tmp_path / "c.sqlite3", metrics=metrics)) as live:
        block = wire.Block(d.name, d.fingerprint, today(), new_ids(len(array)), array.tobytes())
        answer = live.request(
            "POST", "/v1/reports", batch(block), {**auth(SENDER), "Content-Type": wire.CONTENT_TYPE}
        )
        assert answer.status == 200
        analyst = Analyst(live.url, READ)
        result = analyst.estimates("stars", estimator="ml")
        assert result.estimator == "ml" and result.interval == PROFILE
        assert isinstance(result.estimate, MLFrequencies)  # rebuilt from the sums
        low, _ = result.estimate.ci(0.95)
        assert [i.low for i in result.items] == np.asarray(low).tolist()
        assert "maximum likelihood" in result.to_table().splitlines()[0]
        assert analyst.estimates("stars").estimator is None
        where = ["--collector", live.url, "--token", READ]
        assert main(["estimates", "stars", "--estimator", "ml", *where]) == 0
        assert "(profile)" in capsys.readouterr().out


async def test_an_ml_query_over_the_answer_cpu_budget_is_refused(database: Path) -> None:
    """The cost model prices ``estimator=ml`` per part (``ml_seconds``: 0.1 s at 16
    categories): under a budget of 0.15 s the total alone is answered, the total and one
    bucket (0.2 s) refused with the reason, and the inversion estimate is not priced."""
    from ldpkit.mechanisms._profile import ml_seconds

    assert 0.15 / 2 < ml_seconds(16) < 0.15
    cats = [f"c{i}" for i in range(16)]
    metrics = {"wide": {"categories": cats, "epsilon": 2.0, "mechanism": "grr"}}
    config = make_config(database, metrics=metrics, max_answer_cpu_seconds=0.15)
    async with running(config) as client:
        d = MetricDefinition.from_dict("wide", metrics["wide"])
        values = d.kind_spec.encode_many(d, cats * 20)
        await send(client, d, d.mechanism_instance.perturb(values, rng=np.random.default_rng(3)))
        status, body = await estimates(client, "wide", estimator="ml")
        assert status == 200 and body["estimator"] == "ml", body
        status, error = await estimates(client, "wide", estimator="ml", per_bucket=True)
        assert (status, error["param"]) == (400, "estimator"), error
        assert "max_answer_cpu_seconds (0.15)" in error["detail"], error
        assert "over 2 answers" in error["detail"] and "estimator=inversion" in error["detail"]
        status, body = await estimates(client, "wide", per_bucket=True)
        assert status == 200 and len(body["buckets"]) == 1, body


async def test_an_ml_query_the_estimate_cannot_serve_is_refused_for_that(database: Path) -> None:
    """A query ``estimator=ml`` cannot serve (more than MAX_ML_ITEMS categories, or reports
    that are not counts of outputs) is refused for that reason, not priced as if it could
    be: narrowing from/to would not help it."""
    from ldpkit.mechanisms._profile import MAX_ML_ITEMS, ml_seconds

    wide = [f"c{i}" for i in range(MAX_ML_ITEMS + 1)]
    metrics = {
        "wide": {"categories": wide, "epsilon": 2.0, "mechanism": "grr"},
        "fruit": METRICS["fruit"],
    }
    budget = 0.01  # under either's price, were it priced: ml_seconds is at least 0.04
    assert ml_seconds(len(STARS)) > budget
    async with running(
        make_config(database, metrics=metrics, max_answer_cpu_seconds=budget)
    ) as client:
        for name, said in (("wide", f"at most {MAX_ML_ITEMS}"), ("fruit", "grr, rr")):
            d = MetricDefinition.from_dict(name, metrics[name])
            cats = list(d.categories or ())
            values = d.kind_spec.encode_many(d, [cats[i % len(cats)] for i in range(200)])
            await send(
                client, d, d.mechanism_instance.perturb(values, rng=np.random.default_rng(5))
            )
            status, error = await estimates(client, name, estimator="ml")
            assert (status, error["param"]) == (400, "estimator"), error
            assert said in error["detail"] and "max_answer_cpu" not in error["detail"], error
