"""Every metric kind end to end: the client reports, a real collector answers over HTTP.

Each test reports values whose truth it knows (a fixed seed), lets the reporter deliver
them to a collector served on a loopback port, and compares ``GET /v1/estimates`` with
the truth: within Z standard errors of the answer's own stderr (the estimator's variance,
sampling included), or inside the answer's interval where the interval is the claim.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit.client import Reporter, RetryPolicy
from ldpkit.errors import ParameterError

from .live import READ, RELAY, LiveCollector

Z = 4.0
"""Tolerance in standard errors: a correct estimator misses by more with probability
6e-5 per number compared."""

METRICS: dict[str, dict[str, Any]] = {
    "session_minutes": {
        "kind": "distribution",
        "bounds": [0.0, 120.0],
        "resolution": 256,
        "epsilon": 2.0,
        "mechanism": "auto",
    },
    "spend": {
        "kind": "numeric",
        "bounds": [0.0, 10.0],
        "epsilon": 1.0,
        "mechanism": "gaussian",
        "delta": 1e-6,
        "budget": 5.0,
    },
    "region": {
        "kind": "hierarchy",
        "categories": [
            "MX/Jalisco/Guadalajara",
            "MX/Jalisco/Zapopan",
            "MX/Sonora/Hermosillo",
            "MX/Sonora/Nogales",
            "MX/Yucatan/Merida",
            "MX/Yucatan/Valladolid",
        ],
        "epsilon": 2.0,
        "mechanism": "auto",
    },
    "car": {
        "kind": "table",
        "epsilon": 2.0,
        "dimensions": {
            "type": ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"],
            "origin": ["USA", "non-USA"],
        },
    },
    "search_term": {"kind": "strings", "max_length": 16, "k": 10, "epsilon": 4.0},
}

SEED_MUNICIPALITIES = [100, 200, 150, 250, 200, 100]
"""The seed's population: country 1,000 -> states 300, 400, 300 -> these."""
CARS93 = {
    "Compact": (7, 9),
    "Large": (11, 0),
    "Midsize": (10, 12),
    "Small": (7, 14),
    "Sporty": (8, 6),
    "Van": (5, 4),
}
"""The seed's Cars93 table: type -> (USA, non-USA)."""
SCALE = 40


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCollector]:
    directory = tmp_path_factory.mktemp("collector")
    collector = LiveCollector(directory, METRICS)
    collector.start()
    try:
        yield collector
    finally:
        collector.close()


def reporter(live: LiveCollector, state_dir: Path) -> Reporter:
    return Reporter(
        live.url,
        token=RELAY,
        state_dir=state_dir,
        background=False,
        max_outbox=200_000,
        retry=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.05),
    )


def within(estimate: float, truth: float, stderr: float) -> bool:
    return abs(estimate - truth) <= Z * stderr


# --- distribution (issue 15) ----------------------------------------------------------------
@pytest.fixture(scope="module")
def minutes(live: LiveCollector, tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """30,000 skewed session lengths (exponential, mean 20, clipped at 120), delivered."""
    rng = np.random.default_rng(15)
    values = np.clip(rng.exponential(20.0, 30_000), 0.0, 120.0)
    with reporter(live, tmp_path_factory.mktemp("device")) as r:
        r.refresh_definitions()
        assert r.simulate("session_minutes", values, rng=np.random.default_rng(150)) == values.size
        receipt = r.report("session_minutes", 42.5)  # one real device's report too
        assert receipt.epsilon_spent == 2.0
        assert r.flush().remaining == 0
    return np.append(values, 42.5)


def test_distribution_histogram_matches_the_truth(live: LiveCollector, minutes: np.ndarray) -> None:
    answer = live.estimate("session_minutes", bins=8)
    assert answer["n"] == minutes.size
    assert answer["mechanism"] == "hh" and answer["interval"] == "score"
    items = answer["items"]
    assert [(i["lower"], i["upper"]) for i in items] == [
        (15.0 * k, 15.0 * (k + 1)) for k in range(8)
    ]
    truth = np.histogram(minutes, bins=8, range=(0.0, 120.0))[0] / minutes.size
    for item, t in zip(items, truth, strict=True):
        assert within(item["estimate"], t, item["stderr"]), (item, t)
        assert 0.0 <= item["low"] <= item["high"] <= 1.0  # unbiased estimates may be < 0
    assert abs(sum(i["estimate"] for i in items) - 1.0) < 1e-9  # consistent: the bins add up


def test_distribution_edges_range_quantiles_and_mean(
    live: LiveCollector, minutes: np.ndarray
) -> None:
    edges = [0.0, 5.0, 10.0, 30.0, 120.0]  # 5 and 10 cut leaves of 120/256
    answer = live.estimate(
        "session_minutes", edges=",".join(map(str, edges)), quantiles="0.5,0.9", range="5,10"
    )
    truth = np.histogram(minutes, bins=edges)[0] / minutes.size
    for item, t in zip(answer["items"], truth, strict=True):
        # A bin that cuts a leaf is biased by at most that leaf's share: its interval
        # (inner and outer runs of whole leaves) is what claims to hold the truth.
        assert item["low"] <= t <= item["high"], (item, t)
    rng = answer["range"]
    assert (rng["lower"], rng["upper"]) == (5.0, 10.0)
    assert rng["low"] <= np.mean((minutes >= 5) & (minutes < 10)) <= rng["high"]
    for q in answer["quantiles"]:
        true_q = float(np.quantile(minutes, q["q"]))
        assert q["low"] <= true_q <= q["high"], (q, true_q)
        assert q["low"] <= q["value"] <= q["high"]
    assert answer["mean_low"] <= minutes.mean() <= answer["mean_high"]
    assert within(answer["mean"], minutes.mean(), answer["mean_stderr"] + 120 / 256 / 2)


def test_distribution_query_parameters_are_checked(live: LiveCollector) -> None:
    for query, param in (
        ({"bins": "abc"}, "bins"),
        ({"bins": "0"}, "bins"),
        ({"edges": "10,5"}, "edges"),
        ({"edges": "0,500"}, "edges"),
        ({"quantiles": "1.5"}, "quantiles"),
        ({"range": "5"}, "range"),
        ({"bins": "4", "edges": "0,10"}, "edges"),
        ({"estimand": "everyone"}, "estimand"),
        ({"depth": "1"}, "depth"),  # a hierarchy's parameter
    ):
        with pytest.raises(urllib.error.HTTPError) as caught:
            live.estimate("session_minutes", **query)
        assert caught.value.code == 400, query
        body = json.loads(caught.value.read())
        assert (body["error"], body["param"]) == ("invalid_parameter", param), (query, body)


# --- the Gaussian mean (issue 15) ---------------------------------------------------------------
def test_gaussian_mean_and_its_delta_in_the_ledger(live: LiveCollector, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    values = rng.uniform(2.0, 9.0, 8_000)
    with reporter(live, tmp_path / "device") as r:
        r.refresh_definitions()
        assert r.definitions["spend"].delta == 1e-6
        r.simulate("spend", values, rng=np.random.default_rng(30))
        for v in (1.0, 4.0, 7.5):
            r.report("spend", v)
        budget = r.budget()["spend"]
        assert budget.spent == pytest.approx(3.0)
        assert budget.delta_spent == pytest.approx(3e-6)  # basic composition, beside epsilon
        assert budget.delta_budget == pytest.approx(5e-6)
        assert "delta spent 3e-06" in str(r.budget())
        assert r.flush().remaining == 0
    answer = live.estimate("spend")
    truth = np.append(values, [1.0, 4.0, 7.5])
    assert answer["mechanism"] == "gaussian" and answer["n"] == truth.size
    assert within(answer["mean"], truth.mean(), answer["stderr"])


# --- hierarchies (issue 16) --------------------------------------------------------------------
@pytest.fixture(scope="module")
def regions(live: LiveCollector, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The seed's municipalities, scaled by SCALE (40,000 users), delivered."""
    leaves = METRICS["region"]["categories"]
    values = [
        leaf for leaf, c in zip(leaves, SEED_MUNICIPALITIES, strict=True) for _ in range(c * SCALE)
    ]
    with reporter(live, tmp_path_factory.mktemp("device")) as r:
        r.refresh_definitions()
        r.simulate("region", values, rng=np.random.default_rng(16))
        with pytest.raises(ParameterError, match="an inner node: report a leaf"):
            r.report("region", "MX/Jalisco")
        assert r.flush().remaining == 0
    return values


def test_hierarchy_every_level_matches_the_truth_and_adds_up(
    live: LiveCollector, regions: list[str]
) -> None:
    n = len(regions)
    for depth in (1, 2, 3):
        # level 0.9999: the score intervals hold the truth (z = 3.9, about Z)
        answer = live.estimate("region", depth=depth, consistent="true", level=0.9999)
        assert answer["n"] == n and answer["depth"] == depth
        for item in answer["items"]:
            truth = (
                sum(v == item["category"] or v.startswith(item["category"] + "/") for v in regions)
                / n
            )
            assert within(item["estimate"], truth, item["stderr"]), (item, truth)
            assert item["low"] <= truth <= item["high"], (item, truth)
        assert sum(i["consistent"] for i in answer["items"]) == pytest.approx(1.0, abs=1e-9)
    states = {
        i["category"]: i for i in live.estimate("region", depth=2, consistent="true")["items"]
    }
    leaves = live.estimate("region", depth=3, consistent="true")["items"]
    for state, item in states.items():
        children = [leaf for leaf in leaves if leaf["category"].startswith(state + "/")]
        assert sum(c["estimate"] for c in children) == pytest.approx(item["estimate"], abs=1e-9)
        assert sum(c["consistent"] for c in children) == pytest.approx(item["consistent"], abs=1e-9)
    sub = live.estimate("region", subtree="MX/Sonora")
    assert [i["category"] for i in sub["items"]] == ["MX/Sonora/Hermosillo", "MX/Sonora/Nogales"]
    assert sub["subtree"] == "MX/Sonora" and sub["depth"] == 3
    for query, param in (
        ({"depth": "9"}, "depth"),
        ({"subtree": "XX"}, "subtree"),
        ({"bins": "4"}, "bins"),
    ):
        with pytest.raises(urllib.error.HTTPError) as caught:
            live.estimate("region", **query)
        body = json.loads(caught.value.read())
        assert (caught.value.code, body["param"]) == (400, param), body


# --- tables (issue 16) ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cars(live: LiveCollector, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """The seed's Cars93 table, 5 x SCALE users a car (18,600), and one real report, delivered."""
    values = [
        {"type": t, "origin": origin}
        for t, counts in CARS93.items()
        for origin, c in zip(("USA", "non-USA"), counts, strict=True)
        for _ in range(c * SCALE * 5)
    ]
    with reporter(live, tmp_path_factory.mktemp("device")) as r:
        r.refresh_definitions()
        r.simulate("car", values, rng=np.random.default_rng(161))
        r.report("car", {"type": "Van", "origin": "USA"})
        with pytest.raises(ParameterError, match="missing origin"):
            r.report("car", {"type": "Van"})
        assert r.flush().remaining == 0
    return [*values, {"type": "Van", "origin": "USA"}]


def test_table_cells_and_marginals_match_the_truth_and_reconcile(
    live: LiveCollector, cars: list[dict[str, str]]
) -> None:
    n = len(cars)
    answer = live.estimate("car", consistent="true")
    assert answer["n"] == n and len(answer["items"]) == 12
    assert answer["dimensions"] == [["type", list(CARS93)], ["origin", ["USA", "non-USA"]]]
    for item in answer["items"]:
        truth = sum(c == item["cell"] for c in cars) / n
        assert within(item["estimate"], truth, item["stderr"]), (item, truth)
        assert item["consistent"] >= 0.0
    for name, items in answer["marginals"].items():
        for item in items:
            truth = sum(c[name] == item["category"] for c in cars) / n
            assert within(item["estimate"], truth, item["stderr"]), (name, item, truth)
            cells = [c for c in answer["items"] if c["cell"][name] == item["category"]]
            assert sum(c["consistent"] for c in cells) == pytest.approx(
                item["consistent"], abs=1e-9
            )
            assert sum(c["estimate"] for c in cells) == pytest.approx(item["estimate"], abs=1e-9)
        assert sum(i["consistent"] for i in items) == pytest.approx(1.0, abs=1e-9)


# --- open-domain strings (issue 17) ------------------------------------------------------------
@pytest.fixture(scope="module")
def terms(live: LiveCollector, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """60,000 search terms from a Zipf(1.1) law over 2,000 words, delivered."""
    rng = np.random.default_rng(17)
    words = [f"w{i}-{'ñ' if i % 3 == 0 else 'x'}{i * 7919 % 1000}" for i in range(2000)]
    p = 1.0 / np.arange(1, 2001) ** 1.1
    values = [words[i] for i in rng.choice(2000, 60_000, p=p / p.sum())]
    with reporter(live, tmp_path_factory.mktemp("device")) as r:
        r.refresh_definitions()
        r.simulate("search_term", values, rng=np.random.default_rng(170))
        r.report("search_term", "weather")
        with pytest.raises(ParameterError, match="longer than max_length = 16"):
            r.report("search_term", "ñ" * 9)  # 18 bytes in UTF-8
        assert r.flush().remaining == 0
    return [*values, "weather"]


def test_strings_top_k_and_candidates_match_the_truth(
    live: LiveCollector, terms: list[str]
) -> None:
    n = len(terms)
    counts: dict[str, int] = {}
    for t in terms:
        counts[t] = counts.get(t, 0) + 1
    top = sorted(counts, key=lambda w: -counts[w])
    asked = urllib.parse.quote(f"{top[0]},weather,never-said", safe=",")
    answer = live.estimate("search_term", candidates=asked)
    assert answer["n"] == n and answer["k"] == 10 and answer["mechanism"] == "prefix_sketch"
    assert 0.0 < answer["threshold"] < 1.0
    found = [i["category"] for i in answer["items"]]
    # every true string at twice its length's threshold (found there with probability
    # 1/2) is found; nothing below the overall threshold can be
    by_length = answer["thresholds_by_length"]
    clear = {w for w in top[:10] if counts[w] / n > 2 * by_length[len(w.encode())]}
    assert clear and clear <= set(found), (clear, found)
    assert all(counts.get(w, 0) / n > answer["threshold"] / 2 for w in found)
    for item in answer["items"]:
        assert within(item["estimate"], counts.get(item["category"], 0) / n, item["stderr"]), item
        # each listing carries the evidence it was found on, at least the find test's cutoff
        assert item["evidence_z"] >= answer["find_z"] > 0, item
    named = {c["category"]: c for c in answer["candidates"]}
    assert named["never-said"]["evidence_z"] is None
    assert set(named) == {top[0], "weather", "never-said"}
    for word, c in named.items():
        assert within(c["estimate"], counts.get(word, 0) / n, c["stderr"]), c
    with pytest.raises(urllib.error.HTTPError) as caught:
        live.estimate("search_term", candidates="x" * 17)
    body = json.loads(caught.value.read())
    assert (caught.value.code, body["param"]) == (400, "candidates"), body


# --- the analyst's Python API and the CLI, on the same data ---------------------------------------
def cli(live: LiveCollector, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from ldpkit.cli.registry import main

    code = main(["estimates", *args, "--collector", live.url, "--token", READ, "--wait", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_analyst_returns_each_kind_as_result_objects(
    live: LiveCollector,
    minutes: np.ndarray,
    regions: list[str],
    cars: list[dict[str, str]],
    terms: list[str],
) -> None:
    from ldpkit.analyst import Analyst
    from ldpkit.distribution import QuantileEstimate
    from ldpkit.heavy_hitters import StringEstimate

    analyst = Analyst(live.url, READ)
    dist = analyst.estimates(
        "session_minutes", wait=120, bins=4, quantiles=[0.5], range_=(5.0, 10.0)
    )
    assert dist.kind == "distribution" and len(dist.items) == 4
    assert (dist.items[1].lower, dist.items[1].upper, dist.items[1].category) == (
        30,
        60,
        "[30, 60)",
    )
    (median,) = dist.quantiles
    assert isinstance(median, QuantileEstimate) and median.low <= np.median(minutes) <= median.high
    assert dist.range is not None and dist.range.category == "[5, 10)"
    assert (
        dist.low is not None and dist.high is not None and dist.low <= minutes.mean() <= dist.high
    )
    frame = dist.to_pandas()
    assert frame.index.name == "bin" and frame.index[1].left == 30.0
    tree = analyst.estimates("region", wait=120, depth=2, consistent=True)
    assert tree.depth == 2 and [i.category for i in tree.items] == [
        "MX/Jalisco",
        "MX/Sonora",
        "MX/Yucatan",
    ]
    assert list(tree.to_pandas().index) == ["MX/Jalisco", "MX/Sonora", "MX/Yucatan"]
    table = analyst.estimates("car", wait=120, consistent=True)
    assert table.items[0].cell == {"type": "Compact", "origin": "USA"}
    assert set(table.marginals) == {"type", "origin"}
    pivot = table.to_pandas()
    assert pivot.index.names == ["type", "origin"]
    assert pivot.loc[("Van", "USA"), "estimate"] == table.items[10].estimate
    found = analyst.estimates("search_term", wait=120, candidates=["weather"])
    assert found.threshold is not None and found.candidates[0].category == "weather"
    assert found.find_z is not None and found.items
    assert all(i.evidence_z is not None and i.evidence_z >= found.find_z for i in found.items)
    strings = found.strings()
    assert all(isinstance(s, StringEstimate) for s in strings)
    assert strings[-1].value == b"weather"
    assert strings[0].evidence_z == found.items[0].evidence_z


def _same(rebuilt: Any, served: Any) -> None:
    """The served JSON is the rebuilt estimate's serialisation: numbers to 1e-12 (the
    forgery shifts, which the kind adds beside them, are compared by :func:`_shifts`)."""
    if isinstance(served, dict):
        for key, value in served.items():
            if key != "forgery_shift":
                _same(rebuilt[key], value)
    elif isinstance(served, list):
        assert len(rebuilt) == len(served)
        for a, b in zip(rebuilt, served, strict=True):
            _same(a, b)
    elif isinstance(served, float):
        assert rebuilt == pytest.approx(served, rel=1e-12, abs=1e-15)
    else:
        assert rebuilt == served


@pytest.mark.usefixtures("minutes", "regions", "cars", "terms")  # each kind's reports
def test_the_analyst_rebuilds_each_kinds_core_estimate_from_the_served_sums(
    live: LiveCollector,
) -> None:
    """One estimate shape: every kind but strings carries ``sums``, and the core's estimate
    rebuilt from them answers what the collector served."""
    from ldpkit.analyst import Analyst
    from ldpkit.distribution import DistributionEstimate
    from ldpkit.structured_estimates import HierarchyEstimate, TableEstimate

    analyst = Analyst(live.url, READ)
    tree = analyst.estimates(
        "region", wait=120, depth=2, consistent=True, level=0.9, per_bucket=True
    )
    assert isinstance(tree.estimate, HierarchyEstimate) and tree.estimate.n == tree.n
    _same(tree.estimate.to_dict(2, 0.9, consistent=True)["items"], tree.raw["items"])
    assert tree.buckets and all(isinstance(b.estimate, HierarchyEstimate) for b in tree.buckets)
    assert sum(b.estimate.n for b in tree.buckets if b.estimate is not None) == tree.n
    sonora = analyst.estimates("region", wait=120, subtree="MX/Sonora", level=0.8)
    assert sonora.estimate is not None
    _same(sonora.estimate.subtree("MX/Sonora", None).items(0.8), sonora.raw["items"])
    table = analyst.estimates("car", wait=120, consistent=True, level=0.9)
    assert isinstance(table.estimate, TableEstimate)
    rebuilt = table.estimate.to_dict(0.9, consistent=True)
    _same(rebuilt["items"], table.raw["items"])
    _same(rebuilt["marginals"], table.raw["marginals"])
    options: dict[str, Any] = {"bins": 4, "quantiles": [0.5, 0.9], "range_": (5.0, 10.0)}
    dist = analyst.estimates("session_minutes", wait=120, **options)
    assert isinstance(dist.estimate, DistributionEstimate) and dist.estimand == "reporters"
    rebuilt = dist.estimate.to_dict(0.95, **options)
    for key in ("items", "quantiles", "range", "mean", "mean_low", "mean_high"):
        _same(rebuilt[key], dist.raw[key])
    population = analyst.estimates("session_minutes", wait=120, estimand="population", **options)
    assert population.estimand == population.raw["estimand"] == "population"
    assert population.estimate is not None
    rebuilt = population.estimate.to_dict(0.95, estimand="population", **options)
    for key in ("items", "range", "quantiles", "mean_stderr", "mean_low", "mean_high"):
        _same(rebuilt[key], population.raw[key])
    # The mean's interval follows the estimand too (the reporters' drops the users' sampling).
    assert dist.raw["mean_stderr"] < population.raw["mean_stderr"]
    assert all(q.estimand == "reporters" for q in dist.quantiles)
    assert all(q.estimand == "population" for q in population.quantiles)
    found = analyst.estimates("search_term", wait=120)
    assert found.estimate is None and "sums" not in found.raw  # see docs/protocol.md
    # The forgery shifts too, from the rebuilt estimates, at the answer's fraction.
    beta = 0.01
    assert tree.forgery_fraction == dist.forgery_fraction == beta
    _shifts(tree.estimate.level(2).forgery_shift(beta), tree.items)
    _shifts(table.estimate.marginal("type").forgery_shift(beta), table.marginals["type"])
    lower, upper = (np.array([getattr(i, end) for i in dist.items]) for end in ("lower", "upper"))
    _shifts(dist.estimate.range_shift(lower, upper, beta), dist.items)
    assert dist.forgery_shift == pytest.approx(dist.estimate.mean().forgery_shift(beta), rel=1e-12)
    for q in dist.quantiles:  # as served: at the answer's fraction only
        assert q.forgery_shift(beta) == pytest.approx(dist.estimate.quantile_shift(q.q, beta))
        with pytest.raises(ParameterError, match="quantile_shift"):
            q.forgery_shift(0.02)


def _shifts(rebuilt: Any, items: Any) -> None:
    assert [i.forgery_shift for i in items] == pytest.approx(list(rebuilt), rel=1e-12)


def test_cli_shows_each_kind_readably(
    live: LiveCollector,
    capsys: pytest.CaptureFixture[str],
    minutes: np.ndarray,
    regions: list[str],
    cars: list[dict[str, str]],
    terms: list[str],
) -> None:
    out = cli(
        live, capsys, "session_minutes", "--quantiles", "0.5,0.9", "--range", "5,10", "--bins", "20"
    )
    assert "[0, 6)" in out and "[114, 120)" in out
    assert "quantile 0.5:" in out and "quantile 0.9:" in out and "fraction in [5, 10):" in out
    assert out.splitlines()[1].startswith("forgery shift: how far 1% forged reports could move")
    head = ["category", "estimate", "stderr", "low", "high", "forgery_shift"]
    assert out.splitlines()[2].split() == head
    assert out.count("forgery shift ") == 4  # the mean, two quantiles, the range
    assert "about the reporting users' own values (estimand reporters)" in out
    out = cli(live, capsys, "session_minutes", "--estimand", "population")
    assert "about the population the users were drawn from (estimand population)" in out
    out = cli(live, capsys, "region", "--subtree", "MX/Sonora")
    assert "depth 3 under MX/Sonora" in out and "MX/Sonora/Nogales" in out and "Merida" not in out
    out = cli(live, capsys, "car", "--consistent")
    assert out.splitlines()[2].split()[:3] == ["type", "origin", "estimate"]
    assert "marginal of type:" in out and "marginal of origin:" in out
    out = cli(live, capsys, "search_term", "--candidates", "weather,never-said")
    assert "threshold" in out and "named candidates:" in out and "never-said" in out
    assert out.splitlines()[2].split()[-1] == "evidence_z" and "evidence_z: how far" in out
    csv_out = cli(live, capsys, "car", "--format", "csv")
    assert csv_out.splitlines()[0] == "category,type,origin,estimate,stderr,low,high,forgery_shift"
    out = cli(live, capsys, "search_term", "--forgery-fraction", "0.05")
    assert "how far 5% forged reports" in out


def test_cli_plans_each_kind(
    live: LiveCollector, capsys: pytest.CaptureFixture[str], minutes: np.ndarray
) -> None:
    from ldpkit.cli.registry import main
    from ldpkit.distribution_plan import plan_distribution

    def plan(*args: str) -> str:
        code = main(["plan", *args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    out = plan("--epsilon", "1", "--distribution", "0", "120", "--n", "100000")
    expected = plan_distribution(epsilon=1.0, bounds=(0.0, 120.0), n=100_000)
    assert f"half-width <= {expected.half_width:.4g}" in out
    assert f"estimand {expected.estimand}" in out
    assert f"skewness term {expected.skew_widening:.2g} included" in out
    out = plan(
        "--epsilon", "4", "--distribution", "0", "120", "--n", "3000", "--estimand", "population"
    )
    expected = plan_distribution(epsilon=4.0, bounds=(0.0, 120.0), n=3000, estimand="population")
    assert "estimand population: about the population the users were drawn from" in out
    assert f"typical {expected.typical_half_width:.4g}" in out
    out = plan("--epsilon", "1", "--leaves", "MX/J/G,MX/J/Z,MX/S/H", "--half-width", "0.02")
    assert "depth 3" in out and "n >= " in out
    out = plan(
        "--epsilon", "2", "--dimension", "type=A,B,C", "--dimension", "origin=X,Y", "--n", "5000"
    )
    assert "cells" in out and "origin" in out
    out = plan("--epsilon", "4", "--max-length", "16", "--frequency", "0.01", "--format", "json")
    assert json.loads(out)["plan"]["thresholds"][16] <= 0.01 + 1e-9  # found at n
    # a metric of the collector, planned with its own definition
    out = plan(
        "--metric", "session_minutes", "--n", "30000", "--collector", live.url, "--token", READ
    )
    assert "metric session_minutes, distribution, mechanism hh" in out
    assert "256 leaves" in out
    code = main(["plan", "--epsilon", "1", "--max-length", "16", "--half-width", "0.01"])
    assert code == 2 and "not by a half-width" in capsys.readouterr().err


def test_cli_lists_each_kind_with_its_domain(
    live: LiveCollector, capsys: pytest.CaptureFixture[str]
) -> None:
    from ldpkit.cli.registry import main

    assert main(["metrics", "--collector", live.url, "--token", READ]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "[0, 120], 256 leaves" in rows["session_minutes"]
    assert "[0, 10], delta 1e-06" in rows["spend"]
    assert "6 leaves, 3 levels" in rows["region"]
    assert "6 x 2 cells (type x origin)" in rows["car"]
    assert "strings <= 16 bytes, top 10" in rows["search_term"]


def test_plots_of_each_kind_and_of_negative_estimates(
    live: LiveCollector,
    tmp_path: Path,
    minutes: np.ndarray,
    regions: list[str],
    cars: list[dict[str, str]],
    terms: list[str],
) -> None:
    from ldpkit.analyst import Analyst, EstimateResult
    from ldpkit.analyst.plots import plot_estimate

    analyst = Analyst(live.url, READ)
    results = {
        "session_minutes": analyst.estimates(
            "session_minutes", wait=120, bins=16, quantiles=[0.5, 0.9]
        ),
        "region": analyst.estimates("region", wait=120, depth=3),
        "car": analyst.estimates("car", wait=120, consistent=True),
        "search_term": analyst.estimates("search_term", wait=120),
        # an unbiased estimate below its interval's clipped lower end (0) is drawn too
        "negative": EstimateResult.from_json(
            {
                "metric": "negative",
                "kind": "categorical",
                "n": 10,
                "items": [
                    {"category": "a", "estimate": -0.05, "stderr": 0.1, "low": 0.0, "high": 0.2},
                    {"category": "b", "estimate": 1.05, "stderr": 0.1, "low": 0.8, "high": 1.0},
                ],
            }
        ),
    }
    for name, result in results.items():
        path = tmp_path / f"{name}.png"
        fig = plot_estimate(result, path)
        assert path.read_bytes()[:4] == b"\x89PNG", name
        if name == "session_minutes":
            ax = fig.axes[0]
            assert len(ax.patches) >= 16  # one bar per bin (and the quantile bands)
            assert ax.get_xlim()[0] <= 0.0 and ax.get_xlim()[1] >= 120.0  # on the bounds


async def test_async_reporter_reports_every_kind(live: LiveCollector, tmp_path: Path) -> None:
    """AsyncReporter shares the codec: each kind's value is encoded, checked and sent."""
    from ldpkit.client import AsyncReporter

    before = {m: live.n(m) for m in ("session_minutes", "region", "car", "search_term", "spend")}
    async with AsyncReporter(
        live.url, token=RELAY, state_dir=tmp_path / "async", background=False
    ) as r:
        await r.refresh_definitions()
        await r.report("session_minutes", 42.5)
        await r.report("region", "MX/Yucatan/Merida")
        await r.report("car", {"type": "Small", "origin": "non-USA"})
        await r.report("search_term", "música")
        receipt = await r.report("spend", 3.0)
        assert receipt.epsilon_spent == 1.0
        with pytest.raises(ParameterError, match="not a leaf"):
            await r.report("region", "MX")
        result = await r.flush()
        assert (result.sent, result.remaining) == (5, 0)
    after = {m: live.n(m) for m in before}
    assert all(after[m] == before[m] + 1 for m in before), (before, after)
