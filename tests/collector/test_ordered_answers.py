"""Ordered categories by the exponential mechanism, through the real app: the answer's
score intervals, ``mean_rank`` and ``at_least`` shares ("4 stars or more"), as the analyst
reads them (``EstimateResult.share_at_least``) and the CLI prints them (``to_table``)."""

from __future__ import annotations

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from ldpkit.analyst import EstimateResult
from ldpkit.errors import ParameterError
from ldpkit.metrics import MetricDefinition

from .helpers import estimates
from .test_kinds_api import put, send

RATING = {
    "kind": "categorical",
    "categories": ["1", "2", "3", "4", "5"],
    "epsilon": 4.0,
    "mechanism": "exponential",
    "ordered": True,
}


async def test_a_rating_answers_its_shares_at_least_each_category(client: TestClient) -> None:
    status, answer = await put(client, "rating", RATING)
    assert status == 201, answer
    status, body = await estimates(client, "rating")
    assert status == 200 and [s["estimate"] for s in body["at_least"]] == [None] * 4
    d = MetricDefinition.from_dict("rating", answer["definition"])
    held = np.repeat([0, 1, 2, 3, 4], [100, 100, 200, 400, 200])  # "4 or more": 0.6
    await send(client, d, held)
    status, body = await estimates(client, "rating", level=0.9)
    assert status == 200 and body["interval"] == "score"
    assert body["mean_rank"]["interval"] == "score"
    shares = body["at_least"]
    assert [s["category"] for s in shares] == ["2", "3", "4", "5"]
    four = shares[2]
    assert four["interval"] == "score" and four["low"] <= four["estimate"] <= four["high"]
    items = {i["category"]: i["estimate"] for i in body["items"]}
    assert four["estimate"] == pytest.approx(items["4"] + items["5"], abs=1e-9)
    # 0.6 within 4.5 standard errors (sqrt(w^T Cov w), served beside it)
    assert abs(four["estimate"] - 0.6) < 4.5 * four["stderr"]
    status, together = await estimates(client, "rating", level=0.9, simultaneous="true")
    wide = together["at_least"][2]
    assert wide["low"] <= four["low"] and wide["high"] >= four["high"]
    result = EstimateResult.from_json(body, d)
    assert result.share_at_least("4") == four
    assert result.share_at_least("1")["estimate"] == 1.0
    with pytest.raises(ParameterError, match="not a category"):
        result.share_at_least("6")
    table = result.to_table()
    assert f"share at least 4: {four['estimate']:.3f}, 90% interval [{four['low']:.3f}" in table
    assert "interval (together)" in EstimateResult.from_json(together, d).to_table()


async def test_unordered_categories_have_no_shares(client: TestClient) -> None:
    spec = {"kind": "categorical", "categories": ["red", "brown"], "epsilon": 2.0}
    status, answer = await put(client, "hair", spec)
    assert status == 201, answer
    d = MetricDefinition.from_dict("hair", answer["definition"])
    await send(client, d, np.repeat([0, 1], [300, 100]))
    status, body = await estimates(client, "hair")
    assert status == 200 and "at_least" not in body
    with pytest.raises(ParameterError, match="ordered categories only"):
        EstimateResult.from_json(body, d).share_at_least("red")
