"""What an estimates answer discloses about forged reports (issue 26): a mean pushed beyond
its bounds says so, and every answer's ``forgery_shift`` bounds what forged reports did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from ldpkit import wire
from ldpkit.metrics import MetricDefinition

from .helpers import batch, estimates, make_config, new_ids, post_batch, running, today

LAPLACE: dict[str, Any] = {
    "kind": "numeric",
    "bounds": [0.0, 100.0],
    "epsilon": 1.0,
    "mechanism": "laplace",
}


async def send(client: TestClient, definition: MetricDefinition, reports: Any) -> None:
    array = np.ascontiguousarray(reports, dtype=definition.mechanism_instance.report_dtype)
    block = wire.Block(
        definition.name, definition.fingerprint, today(), new_ids(len(array)), array.tobytes()
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
