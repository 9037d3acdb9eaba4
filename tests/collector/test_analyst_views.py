"""The analyst's result views (table, CSV, pandas) carry what the JSON carries, including
the per-bucket estimates of ``per_bucket=True``."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from ldpkit.collector.analyst import EstimateResult

DAY = 86_400
T0 = 1_763_683_200  # 2025-11-21 00:00 UTC


def _item(category: str, estimate: float) -> dict[str, Any]:
    return {
        "category": category,
        "estimate": estimate,
        "stderr": 0.01,
        "low": estimate - 0.02,
        "high": estimate + 0.02,
    }


CATEGORICAL: dict[str, Any] = {
    "metric": "theme",
    "version": "0123456789abcdef",
    "mechanism": "grr",
    "epsilon": 1.0,
    "n": 300,
    "level": 0.95,
    "consistent": False,
    "items": [_item("light", 0.3), _item("dark", 0.7)],
    "buckets": [
        {"bucket": T0, "n": 100, "items": [_item("light", 0.25), _item("dark", 0.75)]},
        {"bucket": T0 + DAY, "n": 200, "items": [_item("light", 0.32), _item("dark", 0.68)]},
    ],
}
NUMERIC: dict[str, Any] = {
    "metric": "minutes",
    "version": "0123456789abcdef",
    "mechanism": "hybrid",
    "epsilon": 1.0,
    "n": 30,
    "level": 0.95,
    "consistent": False,
    "mean": 10.0,
    "stderr": 1.0,
    "low": 8.0,
    "high": 12.0,
    "buckets": [
        {"bucket": T0, "n": 10, "mean": 9.0, "stderr": 2.0, "low": 5.0, "high": 13.0},
        {"bucket": T0 + DAY, "n": 20, "mean": 10.5, "stderr": 1.5, "low": 7.5, "high": 13.5},
    ],
}


def test_per_bucket_table_lists_every_bucket_estimate() -> None:
    table = EstimateResult.from_json(CATEGORICAL).to_table()
    assert "2025-11-21" in table and "2025-11-22" in table
    assert "0.7500" in table and "0.6800" in table  # per-bucket estimates, not only n
    numeric = EstimateResult.from_json(NUMERIC).to_table()
    assert "9.0000" in numeric and "10.5000" in numeric and "13.5000" in numeric


def test_per_bucket_csv_has_a_row_per_bucket_and_category() -> None:
    text = EstimateResult.from_json(CATEGORICAL).to_csv()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["bucket"], r["category"]) for r in rows] == [
        ("2025-11-21T00:00:00Z", "light"),
        ("2025-11-21T00:00:00Z", "dark"),
        ("2025-11-22T00:00:00Z", "light"),
        ("2025-11-22T00:00:00Z", "dark"),
    ]
    assert float(rows[1]["estimate"]) == 0.75 and rows[2]["n"] == "200"
    # The totals are still there when asked for.
    totals = list(
        csv.DictReader(io.StringIO(EstimateResult.from_json(CATEGORICAL).to_csv(per_bucket=False)))
    )
    assert [r["category"] for r in totals] == ["light", "dark"]
    numeric = list(csv.DictReader(io.StringIO(EstimateResult.from_json(NUMERIC).to_csv())))
    assert [float(r["mean"]) for r in numeric] == [9.0, 10.5]


def test_per_bucket_to_pandas() -> None:
    pd = pytest.importorskip("pandas")
    frame = EstimateResult.from_json(CATEGORICAL).to_pandas()
    assert list(frame.index.names) == ["bucket", "category"]
    when = pd.Timestamp("2025-11-22", tz="UTC")
    assert frame.loc[(when, "dark"), "estimate"] == pytest.approx(0.68)
    assert frame.loc[(when, "dark"), "n"] == 200
    totals = EstimateResult.from_json(CATEGORICAL).to_pandas(per_bucket=False)
    assert list(totals.index) == ["light", "dark"]
    numeric = EstimateResult.from_json(NUMERIC).to_pandas()
    assert list(numeric["mean"]) == [9.0, 10.5] and numeric.index.name == "bucket"


def _cell(kind: str, origin: str, estimate: float) -> dict[str, Any]:
    return {**_item("", estimate), "cell": {"type": kind, "origin": origin}} | {"category": None}


def _table_part(shift: float) -> dict[str, Any]:
    cells = [_cell(t, o, 0.25 + shift * (k - 1.5)) for k, (t, o) in enumerate(
        [("Small", "USA"), ("Small", "non-USA"), ("Van", "USA"), ("Van", "non-USA")]
    )]  # fmt: skip
    for c in cells:
        del c["category"]
    return {
        "items": cells,
        "marginals": {
            "type": [_item("Small", 0.5 - shift), _item("Van", 0.5 + shift)],
            "origin": [_item("USA", 0.5), _item("non-USA", 0.5)],
        },
        "dimensions": [["type", ["Small", "Van"]], ["origin", ["USA", "non-USA"]]],
    }


TABLE: dict[str, Any] = {
    **{k: v for k, v in CATEGORICAL.items() if k not in ("items", "buckets")},
    "metric": "car",
    "kind": "table",
    **_table_part(0.0),
    "buckets": [
        {"bucket": T0, "n": 100, **_table_part(-0.02)},
        {"bucket": T0 + DAY, "n": 200, **_table_part(0.02)},
    ],
}


def test_per_bucket_rows_of_a_table_carry_its_marginals() -> None:
    """Each bucket's cells, then its marginals (the other dimension empty), in the CSV and
    the DataFrame; the totals too."""
    result = EstimateResult.from_json(TABLE)
    assert result.buckets[1].marginals["type"][1].estimate == pytest.approx(0.52)
    rows = list(csv.DictReader(io.StringIO(result.to_csv())))
    assert len(rows) == 2 * (4 + 2 + 2)
    marginal = [r for r in rows if r["category"] == "type=Van (marginal)"]
    assert [(r["bucket"], r["type"], r["origin"]) for r in marginal] == [
        ("2025-11-21T00:00:00Z", "Van", ""),
        ("2025-11-22T00:00:00Z", "Van", ""),
    ]
    assert [float(r["estimate"]) for r in marginal] == pytest.approx([0.48, 0.52])
    assert all(r["stderr"] == "0.01" for r in rows)
    totals = list(csv.DictReader(io.StringIO(result.to_csv(per_bucket=False))))
    assert [r["category"] for r in totals][-2:] == [
        "origin=USA (marginal)",
        "origin=non-USA (marginal)",
    ]
    text = result.to_table()
    assert "marginal of type:" in text and text.count("Van") >= 4
    pd = pytest.importorskip("pandas")
    frame = result.to_pandas()
    when = pd.Timestamp("2025-11-22", tz="UTC")
    van = frame.loc[when].query("type == 'Van' and origin.isnull()", engine="python")
    assert list(van["estimate"]) == pytest.approx([0.52])
