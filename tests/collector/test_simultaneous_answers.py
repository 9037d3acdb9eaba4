"""``simultaneous=true`` on ``GET /v1/estimates`` (issue 28): a hierarchy (the answered
depth, or a subtree), a table (the cells, each marginal), a distribution (its bins) and a
categorical metric answer
the core's simultaneous intervals of the same sums, and say so; the kinds without them
refuse the parameter by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit import wire
from ldpkit.aggregate import Aggregate
from ldpkit.metrics import MetricDefinition
from tests.harness import ThreadedCollector

from .helpers import READ, auth, batch, estimates, make_config, new_ids, running, today
from .test_disclosed_shift import ASKED, KINDS, SENDER, VALUES, send

SIMULTANEOUS = {"theme", "region", "car", "minutes"}  # categorical, hierarchy, table, bins


def bounds(items: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    return [i["low"] for i in items], [i["high"] for i in items]


def core(d: MetricDefinition, part: dict[str, Any]) -> Any:
    sums = np.asarray(part["sums"], dtype=np.float64)
    return d.mechanism_instance.estimate(Aggregate(int(part["n"]), sums))


def expected(d: MetricDefinition, part: dict[str, Any], level: float, subtree: str | None) -> Any:
    """The core's simultaneous (low, high) per group of the answer, as served."""
    est = core(d, part)
    name = d.name
    if name == "theme":
        low, high = est.ci(level, simultaneous=True)
        return {"items": (np.asarray(low).tolist(), np.asarray(high).tolist())}
    if name == "minutes":  # the default 16 bins
        low, high = est.histogram(None).ci(level, simultaneous=True)
        return {"items": (np.asarray(low).tolist(), np.asarray(high).tolist())}
    if name == "region":
        group = est.subtree(subtree) if subtree else est.level()
        low, high = group.ci(level, simultaneous=True)
        return {"items": (np.asarray(low).tolist(), np.asarray(high).tolist())}
    groups = {"items": est.cells, **{f"marginal {k}": g for k, g in est.marginals.items()}}
    out = {}
    for key, g in groups.items():
        low, high = g.ci(level, simultaneous=True)
        out[key] = (np.asarray(low).tolist(), np.asarray(high).tolist())
    return out


def served(part: dict[str, Any]) -> dict[str, Any]:
    out = {"items": bounds(part["items"])}
    for k, items in (part.get("marginals") or {}).items():
        out[f"marginal {k}"] = bounds(items)
    return out


async def test_simultaneous_answers_are_the_cores(database: Path) -> None:
    metrics = {name: {"epsilon": 2.0, **spec} for name, spec in KINDS.items()}
    async with running(make_config(database, metrics=metrics)) as client:
        for name, spec in metrics.items():
            d = MetricDefinition.from_dict(name, spec)
            asked = ASKED.get(name, {})
            if name not in SIMULTANEOUS:
                status, error = await estimates(client, name, simultaneous=True, **asked)
                assert (status, error["param"]) == (400, "simultaneous"), error
                assert "no simultaneous intervals" in error["detail"]
                status, plain = await estimates(client, name, simultaneous=False, **asked)
                assert status == 200 and plain["simultaneous"] is False
                continue
            values = d.kind_spec.encode_many(d, VALUES[name] * 500)
            await send(
                client, d, d.mechanism_instance.perturb(values, rng=np.random.default_rng(7))
            )
            subtrees = [None, d.categories[0].split("/")[0]] if name == "region" else [None]
            for subtree in subtrees:
                extra = {"subtree": subtree} if subtree else {}
                status, body = await estimates(
                    client, name, simultaneous=True, per_bucket=True, level=0.9, **extra
                )
                assert status == 200 and body["simultaneous"] is True, body
                status, plain = await estimates(client, name, level=0.9, **extra)
                assert plain["simultaneous"] is False
                for part in (body, *body["buckets"]):
                    assert served(part) == expected(d, part, 0.9, subtree), (name, subtree)
                wider = [h - lo for lo, h in zip(*bounds(body["items"]), strict=True)]
                narrower = [h - lo for lo, h in zip(*bounds(plain["items"]), strict=True)]
                assert all(w >= v - 1e-12 for w, v in zip(wider, narrower, strict=True))
                assert sum(wider) > sum(narrower)
        status, error = await estimates(client, "region", simultaneous="maybe")
        assert (status, error["param"]) == (400, "simultaneous"), error


def test_the_analyst_and_the_cli_ask_simultaneous_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Analyst.estimates(simultaneous=True)`` and ``ldpkit estimates --simultaneous``: a
    table's cells and marginals as the core's simultaneous intervals, stated in the result
    and its text; a kind without them is refused with the parameter named."""
    from ldpkit.analyst import Analyst
    from ldpkit.cli.registry import main
    from ldpkit.errors import CollectorRejected

    metrics = {k: {"epsilon": 2.0, **KINDS[k]} for k in ("car", "spend")}
    d = MetricDefinition.from_dict("car", metrics["car"])
    values = d.kind_spec.encode_many(d, VALUES["car"] * 300)
    reports = np.asarray(d.mechanism_instance.perturb(values, rng=np.random.default_rng(9)))
    with ThreadedCollector(make_config(tmp_path / "c.sqlite3", metrics=metrics)) as live:
        block = wire.Block(d.name, d.fingerprint, today(), new_ids(len(reports)), reports.tobytes())
        answer = live.request(
            "POST", "/v1/reports", batch(block), {**auth(SENDER), "Content-Type": wire.CONTENT_TYPE}
        )
        assert answer.status == 200
        analyst = Analyst(live.url, READ)
        result = analyst.estimates("car", simultaneous=True, wait=60)
        assert result.simultaneous is True and result.estimate is not None
        low, high = result.estimate.cells.ci(0.95, simultaneous=True)
        assert [i.low for i in result.items] == np.asarray(low).tolist()
        assert [i.high for i in result.items] == np.asarray(high).tolist()
        x_low, _ = result.estimate.marginal("x").ci(0.95, simultaneous=True)
        assert [i.low for i in result.marginals["x"]] == np.asarray(x_low).tolist()
        assert "95% simultaneous intervals" in result.to_table().splitlines()[0]
        plain = analyst.estimates("car", wait=60)
        assert plain.simultaneous is False and "simultaneous" not in plain.to_table()
        with pytest.raises(CollectorRejected, match="no simultaneous intervals"):
            analyst.estimates("spend", simultaneous=True)
        where = ["--collector", live.url, "--token", READ, "--wait", "60"]
        assert main(["estimates", "car", "--simultaneous", *where]) == 0
        assert "95% simultaneous intervals" in capsys.readouterr().out
