"""The analyst's tools against a real collector: Python API, `ldpkit` subcommands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ldpkit.collector.analyst import Analyst
from ldpkit.errors import CollectorRejected, CollectorUnavailable, ParameterError
from ldpkit.estimates import FrequencyEstimate, MeanEstimate

from .conftest import INGEST, READ, THEMES, USERS, Populated


def ldpkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    return subprocess.run(
        [sys.executable, "-m", "ldpkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
    )


def test_python_api_estimates_cover_the_truth(populated: Populated) -> None:
    analyst = Analyst(populated.url, READ)
    result = analyst.estimates("theme", level=0.99, consistent=True)
    assert result.n == USERS and result.kind == "categorical"
    assert [i.category for i in result.items] == THEMES
    for item in result.items:
        truth = float(np.mean(populated.themes == item.category))
        assert item.low is not None and item.high is not None
        assert item.low <= truth <= item.high
    assert sum(i.consistent or 0 for i in result.items) == pytest.approx(1.0)
    numeric = analyst.estimates("session_minutes", level=0.99)
    assert numeric.low is not None and numeric.high is not None
    assert numeric.low <= float(populated.minutes.mean()) <= numeric.high


def test_results_hold_the_cores_estimate(populated: Populated) -> None:
    """One estimate shape: the analyst rebuilds the core's estimate from the served sums,
    and its intervals are the ones served (the JSON is their serialisation)."""
    analyst = Analyst(populated.url, READ)
    result = analyst.estimates("theme", level=0.9, consistent=True, per_bucket=True)
    est = result.estimate
    assert isinstance(est, FrequencyEstimate) and est.n == result.n == USERS
    low, high = est.ci(0.9)
    for k, item in enumerate(result.items):
        assert (item.estimate, item.low, item.high) == pytest.approx(
            (est.frequencies[k], low[k], high[k]), rel=1e-12
        )
        assert item.consistent == pytest.approx(est.consistent()[k], rel=1e-12)
    assert all(isinstance(b.estimate, FrequencyEstimate) for b in result.buckets)
    assert sum(b.estimate.n for b in result.buckets if b.estimate is not None) == USERS
    numeric = analyst.estimates("session_minutes", level=0.9).estimate
    assert isinstance(numeric, MeanEstimate)
    served = analyst.estimates("session_minutes", level=0.9)
    assert (numeric.mean, *numeric.ci(0.9)) == pytest.approx(
        (served.mean, served.low, served.high), rel=1e-12
    )


def test_to_pandas_and_csv(populated: Populated) -> None:
    pd = pytest.importorskip("pandas")
    result = Analyst(populated.url, READ).estimates("theme")
    frame = result.to_pandas()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.index) == THEMES
    assert frame.loc["dark", "estimate"] == pytest.approx(result.items[1].estimate)
    head = "category,estimate,stderr,low,high,forgery_shift,interval"
    assert result.to_csv().splitlines()[0] == head
    assert frame.loc["dark", "forgery_shift"] == result.items[1].forgery_shift > 0


def test_errors_say_what_to_do(populated: Populated) -> None:
    with pytest.raises(CollectorRejected, match="token"):
        Analyst(populated.url, "wrong").estimates("theme")
    with pytest.raises(CollectorRejected, match="read token"):
        Analyst(populated.url, INGEST).estimates("theme")
    with pytest.raises(CollectorRejected, match="ldpkit metrics"):
        Analyst(populated.url, READ).estimates("no_such_metric")
    with pytest.raises(CollectorUnavailable, match="ldpkit serve"):
        Analyst("http://127.0.0.1:9", READ, timeout=2).estimates("theme")
    with pytest.raises(ParameterError, match="LDPKIT_READ_TOKEN"):
        Analyst(populated.url, token="", timeout=2)
    with pytest.raises(ParameterError, match="level"):
        Analyst(populated.url, READ).estimates("theme", level=1.5)


def test_estimates_command_formats(populated: Populated, tmp_path: object) -> None:
    table = ldpkit("estimates", "theme", "--collector", populated.url, "--token", READ)
    assert table.returncode == 0, table.stderr
    assert f"theme: n={USERS}" in table.stdout and "dark" in table.stdout
    as_json = ldpkit(
        "estimates",
        "theme",
        "--format",
        "json",
        "--consistent",
        env={"LDPKIT_COLLECTOR": populated.url, "LDPKIT_READ_TOKEN": READ},
    )
    data = json.loads(as_json.stdout)
    assert data["n"] == USERS and "consistent" in data["items"][0]
    as_csv = ldpkit(
        "estimates",
        "session_minutes",
        "--collector",
        populated.url,
        "--token",
        READ,
        "--format",
        "csv",
    )
    head = "mean,clamped_mean,stderr,low,high,forgery_shift,beyond_bounds,interval"
    assert as_csv.stdout.splitlines()[0] == head
    png = f"{tmp_path}/theme.png"
    plotted = ldpkit(
        "estimates", "theme", "--collector", populated.url, "--token", READ, "--plot", png
    )
    assert plotted.returncode == 0, plotted.stderr
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"


def test_metrics_command(populated: Populated) -> None:
    out = ldpkit("metrics", "--collector", populated.url, "--token", READ)
    assert out.returncode == 0, out.stderr
    assert "theme" in out.stdout and "session_minutes" in out.stdout


def test_commands_fail_with_a_hint(populated: Populated) -> None:
    down = ldpkit("estimates", "theme", "--collector", "http://127.0.0.1:9", "--token", READ)
    assert down.returncode == 2 and "ldpkit serve" in down.stderr
    bad = ldpkit("estimates", "theme", "--collector", populated.url, "--token", "nope")
    assert bad.returncode == 2 and "401" in bad.stderr
    unknown = ldpkit("estimates", "nope", "--collector", populated.url, "--token", READ)
    assert unknown.returncode == 2 and "ldpkit metrics" in unknown.stderr
    no_token = ldpkit("estimates", "theme", "--collector", populated.url)
    assert no_token.returncode == 2 and "LDPKIT_READ_TOKEN" in no_token.stderr


def test_plan_command_matches_the_planner() -> None:
    import ldpkit as core

    out = ldpkit(
        "plan", "--epsilon", "1", "--domain-size", "16", "--n", "10000", "--half-width", "0.01"
    )
    assert out.returncode == 0, out.stderr
    expected = core.required_n("auto", epsilon=1.0, domain_size=16, half_width=0.01)
    assert f"n >= {expected.n} reports" in out.stdout
    half = core.plan("auto", epsilon=1.0, domain_size=16, n=10000).half_width
    assert f"{half:.6g}" in out.stdout
    assert "<- chosen" in out.stdout
    numeric = ldpkit("plan", "--epsilon", "2", "--bounds", "0", "240", "--n", "5000")
    assert numeric.returncode == 0 and "half-width of the mean" in numeric.stdout
    missing = ldpkit("plan", "--epsilon", "1", "--domain-size", "16")
    assert missing.returncode == 2 and "--n" in missing.stderr
