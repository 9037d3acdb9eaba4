"""``ldpkit demo``: a collector on SQLite, simulated users through the real client, estimates.

Everything runs for real: the collector is a separate ``ldpkit serve`` process on
loopback, each simulated user's value is perturbed by the client SDK before it is queued,
reports travel as msgpack over HTTP, and the estimates come back from the query API.
The printed truth is what the simulation drew; the collector never sees it.
"""

from __future__ import annotations

import contextlib
import json
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..analyst import Analyst
from ..collector.launcher import environment_without_tokens, running_collector
from ..errors import LdpkitError

RELAY, READ, ADMIN = "demo-relay", "demo-read", "demo-admin"
"""The demo's simulated users report through one relay token (many devices' reports in a
batch): a device (ingest) token's batch may carry one device's reports only."""

CONFIG = """\
[collector]
host = "127.0.0.1"
database = "{database}"

[tokens]
relay = ["{relay}"]
read = ["{read}"]
admin = ["{admin}"]

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
epsilon = 1.0
mechanism = "auto"

[metrics.country]
kind = "categorical"
categories = {countries}
epsilon = 1.0
mechanism = "auto"

[metrics.rating]
kind = "categorical"
categories = ["1", "2", "3", "4", "5"]
ordered = true
epsilon = 1.0
mechanism = "exponential"

[metrics.session_minutes]
kind = "numeric"
bounds = [0, 240]
epsilon = 1.0
mechanism = "auto"

[metrics.session_minutes_dist]
kind = "distribution"
bounds = [0, 240]
resolution = 256
epsilon = 1.0

[metrics.latency_ms]
kind = "distribution"
bounds = [0, 2000]
resolution = 64
epsilon = 1.0
mechanism = "square_wave"

[metrics.region]
kind = "hierarchy"
categories = {leaves}
epsilon = 2.0

[metrics.car]
kind = "table"
epsilon = 2.0
[metrics.car.dimensions]
type = {car_types}
origin = ["USA", "non-USA"]

[metrics.search_term]
kind = "strings"
max_length = 16
k = {strings_k}
epsilon = 4.0
"""

THEMES = (["light", "dark", "system"], [0.25, 0.55, 0.20])
RATINGS = (["1", "2", "3", "4", "5"], [0.08, 0.12, 0.20, 0.35, 0.25])
"""A 1-5 rating, by the exponential mechanism with the distance score (ordered = true)."""
COUNTRIES = [
    "us",
    "in",
    "br",
    "de",
    "fr",
    "gb",
    "jp",
    "mx",
    "ng",
    "es",
    "it",
    "ca",
    "kr",
    "au",
    "ar",
    "pl",
]

# The product design's seeds: municipalities under states under a country, and the
# Cars93 table (type x origin), as shares of the population.
REGIONS = {
    "MX/Jalisco/Guadalajara": 100,
    "MX/Jalisco/Zapopan": 200,
    "MX/Sonora/Hermosillo": 150,
    "MX/Sonora/Nogales": 250,
    "MX/Yucatan/Merida": 200,
    "MX/Yucatan/Valladolid": 100,
}
CARS93 = {
    "Compact": (7, 9),
    "Large": (11, 0),
    "Midsize": (10, 12),
    "Small": (7, 14),
    "Sporty": (8, 6),
    "Van": (5, 4),
}
SEARCHES = ["weather", "news", "maps", "translate", "música", "football", "recipes", "jobs"]
SEARCHES += [f"term-{i}" for i in range(1, 193)]
"""200 search terms, drawn Zipf(1.1): a few heavy ones and a long tail."""

WAIT = 120.0
"""Seconds the collector may take to compute the kinds it maintains off the request path
(distribution, hierarchy, table, strings) from every report sent: without a wait the
answer is its latest estimate, possibly of fewer reports (docs/protocol.md, "Freshness")."""

STRINGS_K = 10
"""The most frequent search terms the strings metric looks for (its ``k``)."""

CHUNK = 100_000
"""Users simulated per round: their reports are queued, then delivered before the next
round, so the client's outbox never holds more than ``3 * CHUNK`` and memory stays flat."""
BATCH = 20_000
"""Reports per HTTP request (the collector takes up to 100,000; phones send fewer)."""


def _say(message: str) -> None:
    print(message, flush=True)


class _Stopped(Exception):
    """SIGTERM (or SIGHUP) arrived: unwind so the collector is stopped and the folder removed."""


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into :class:`_Stopped` while the demo runs (the default action
    would kill this process at once and orphan its collector and temp folder)."""

    def stop(signum: int, _frame: object) -> None:
        for sig in previous:  # a second signal must not interrupt the clean-up
            signal.signal(sig, signal.SIG_IGN)
        raise _Stopped(signal.Signals(signum).name)

    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, stop)
    except ValueError:  # not the main thread: leave the handlers alone
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Progress:
    """One line per tenth of the way (or per round when there are few), with the rate
    and the time left, so 10^6 users never look like a hang."""

    def __init__(self, users: int) -> None:
        self.users = users
        self.started = time.monotonic()
        self.next_tenth = 1

    def update(self, done: int, reports: int) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        tenth = done * 10 // self.users
        if done < self.users and tenth < self.next_tenth:
            return
        self.next_tenth = tenth + 1
        rate = reports / elapsed
        if done < self.users:
            left = elapsed * (self.users - done) / done
            when = f"about {left:.0f} s left"
        else:
            when = f"about {elapsed:.0f} s in all"
        _say(
            f"      {done:,}/{self.users:,} users sent ({done / self.users:.0%}), "
            f"{rate:,.0f} reports/s including perturbation, {when}"
        )


def run_demo(
    *, users: int = 20_000, seed: int | None = None, port: int = 0, serve: bool = False
) -> int:
    """Run the demo; SIGTERM stops it cleanly (collector stopped, temp folder removed)."""
    if users < 100:
        raise LdpkitError(f"--users must be at least 100, got {users}")
    try:
        with _stop_on_signals():
            return _run(users=users, seed=seed, port=port, serve=serve)
    except _Stopped as stopped:
        _say(f"\n{stopped}: demo stopped, its collector stopped and its temp folder removed.")
        return 0 if serve else 128 + signal.SIGTERM


def _run(*, users: int, seed: int | None, port: int, serve: bool) -> int:
    rng = np.random.default_rng(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ldpkit-demo-") as tmp:
        workdir = Path(tmp)
        config = workdir / "collector.toml"
        config.write_text(
            CONFIG.format(
                database=(workdir / "collector.sqlite3").as_posix(),
                relay=RELAY,
                read=READ,
                admin=ADMIN,
                countries=json.dumps(COUNTRIES),
                leaves=json.dumps(list(REGIONS)),
                car_types=json.dumps(list(CARS93)),
                strings_k=STRINGS_K,
            )
        )
        _say(f"[1/4] starting a collector (ldpkit serve) on SQLite in {workdir}")
        with running_collector(config, port=port, env=environment_without_tokens()) as collector:
            url = collector.url
            _say(f"      listening on {url}")
            population = _population(rng, users)
            _deliver(url, workdir, population, rng)
            _say("[4/4] estimates from the collector (it never saw a true value):\n")
            _print_estimates(Analyst(url, READ), population)
            _say(
                f"\nDone in {time.monotonic() - started:.1f} s. About 1 interval in 20 may "
                "miss the truth: that is what 95% means."
            )
            if serve:
                _say(f"\nDashboard: open {url}/ui and enter the read token {READ!r}.")
                _say(f"Or query it: ldpkit estimates theme --collector {url} --token {READ}")
                _say("The collector keeps running; press Ctrl+C to stop it.")
                with contextlib.suppress(KeyboardInterrupt):
                    collector.process.wait()
            else:
                _say(NEXT)
    return 0


NEXT = """
Next:
  ldpkit demo --serve          keep the collector running; dashboard at /ui
  ldpkit serve --config collector.toml   run a collector for real (README: Operators)
  ldpkit plan --epsilon 1 --domain-size 16 --half-width 0.01   how many users a campaign needs"""


def _population(rng: np.random.Generator, users: int) -> dict[str, np.ndarray]:
    """The simulated users' values by metric: the truth only this process knows."""
    theme = rng.choice(THEMES[0], size=users, p=THEMES[1])
    rating = rng.choice(RATINGS[0], size=users, p=RATINGS[1])
    weights = 1.0 / np.arange(1, len(COUNTRIES) + 1) ** 1.1
    country = rng.choice(COUNTRIES, size=users, p=weights / weights.sum())
    minutes = np.clip(rng.gamma(shape=2.0, scale=18.0, size=users), 0, 240)
    shares = np.array(list(REGIONS.values()), dtype=float)
    regions = rng.choice(list(REGIONS), size=users, p=shares / shares.sum())
    cells = [(t, o) for t in CARS93 for o in ("USA", "non-USA")]
    counts = np.array([c for pair in CARS93.values() for c in pair], dtype=float)
    drawn = rng.choice(len(cells), size=users, p=counts / counts.sum())
    cars = np.array([{"type": cells[i][0], "origin": cells[i][1]} for i in drawn])
    zipf = 1.0 / np.arange(1, len(SEARCHES) + 1) ** 1.1
    searches = rng.choice(SEARCHES, size=users, p=zipf / zipf.sum())
    return {
        "theme": theme,
        "country": country,
        "rating": rating,
        "session_minutes": minutes,
        "session_minutes_dist": minutes,
        "latency_ms": np.clip(rng.lognormal(mean=5.5, sigma=0.6, size=users), 0, 2000),
        "region": regions,
        "car": cars,
        "search_term": searches,
    }


def _deliver(
    url: str, workdir: Path, population: dict[str, np.ndarray], rng: np.random.Generator
) -> None:
    """Every user's values perturbed by the client SDK and sent, ``CHUNK`` users a round."""
    from ..client import Reporter  # the demo plays the devices too

    users = len(population["theme"])
    _say(
        f"[2/4] {users:,} simulated users perturb their values on the device "
        f"({', '.join(population)})"
    )
    _say(
        f"[3/4] delivering {len(population) * users:,} reports over HTTP in batches "
        f"of {BATCH:,}, {min(users, CHUNK):,} users at a time"
    )
    sent = duplicates = rejected = 0
    progress = _Progress(users)
    with Reporter(
        url,
        token=RELAY,
        state_dir=workdir / "device",
        background=False,
        batch_size=BATCH,
        max_outbox=len(population) * CHUNK,
    ) as reporter:
        for lo in range(0, users, CHUNK):
            hi = min(users, lo + CHUNK)
            for metric, values in population.items():
                reporter.simulate(metric, values[lo:hi].tolist(), rng=rng)
            result = reporter.flush()
            sent += result.sent
            duplicates += result.duplicates
            rejected += result.rejected
            progress.update(hi, sent + duplicates + rejected)
    _say(f"      accepted {sent:,}, duplicates {duplicates}, rejected {rejected}")


def _print_estimates(analyst: Analyst, population: dict[str, np.ndarray]) -> None:
    for metric in ("theme", "country", "rating"):
        _print_categorical(analyst, metric, population[metric])
    minutes = population["session_minutes"]
    est = analyst.estimates("session_minutes", level=0.95)
    truth_mean = float(minutes.mean())
    _say(f"session_minutes: n={est.n:,}, mechanism={est.mechanism}, epsilon={est.epsilon:g}")
    _say(
        f"  truth {truth_mean:.2f}  estimate {est.mean or 0:.2f}  "
        f"95% interval [{est.low or 0:.2f}, {est.high or 0:.2f}] "
        f"{_covers(est.low, est.high, truth_mean)}"
    )
    _print_distribution(analyst, minutes)
    _print_square_wave(analyst, population["latency_ms"])
    _print_hierarchy(analyst, population["region"])
    _print_table(analyst, population["car"])
    _print_strings(analyst, population["search_term"])
    _say(OUTSIDE)


def _covers(low: float | None, high: float | None, truth: float) -> str:
    return "covers" if low is not None and high is not None and low <= truth <= high else "MISSES"


def _print_categorical(analyst: Analyst, metric: str, values: np.ndarray) -> None:
    est = analyst.estimates(metric, level=0.95)
    _say(f"{metric}: n={est.n:,}, mechanism={est.mechanism}, epsilon={est.epsilon:g}")
    _say(f"  {'category':<10} {'truth':>7} {'estimate':>9} {'95% interval':>20}")
    for item in est.items:
        truth = float(np.mean(values == item.category))
        _say(_row(item.category, truth, item.estimate, item.low, item.high, width=10))
    rank = est.mean_rank
    if rank is not None:  # ordered categories: rank 1 is the first
        order = {c.category: i + 1 for i, c in enumerate(est.items)}
        truth = float(np.mean([order[v] for v in values]))
        _say(_row("mean rank", truth, rank["estimate"], rank["low"], rank["high"], width=10))
        for share in est.at_least:  # the share at this category or later
            share_truth = float(np.mean([order[v] >= order[share["category"]] for v in values]))
            label = f">= {share['category']}"
            _say(_row(label, share_truth, share["estimate"], share["low"], share["high"], width=10))
    if est.most_common is not None:
        names, counts = np.unique(values, return_counts=True)
        truly = str(names[int(np.argmax(counts))])
        held = "holds it" if truly in est.most_common.set else "MISSES it"
        _say(f"  {est.most_common.describe()}; truly {truly}: the set {held}")
    _say("")


def _row(
    label: str,
    truth: float,
    estimate: float | None,
    low: float | None,
    high: float | None,
    *,
    width: int = 22,
    digits: int = 3,
) -> str:
    """One line: the truth, the estimate and its interval, and whether it covers the truth;
    ``*`` marks an estimate outside its own interval (see ``OUTSIDE``)."""
    f = f".{digits}f"
    value, lo, hi = estimate or 0.0, low or 0.0, high or 0.0
    mark = " *" if not lo <= value <= hi else ""
    return (
        f"  {label:<{width}} {truth:7{f}} {value:9{f}}   "
        f"[{lo:7{f}}, {hi:7{f}}] {_covers(low, high, truth)}{mark}"
    )


OUTSIDE = "\n".join(
    (
        "* The estimate lies outside its own interval. Each estimate is the unbiased one:",
        "  the noise the devices added is symmetric, so a share near 0 can come out below 0",
        "  (or one near 1 above 1), and only unbiased estimates add up correctly across",
        "  metrics and days. Its interval is clipped to the values the truth can take",
        "  ([0, 1] for a share), which keeps it a 95% interval for the truth, so the two",
        "  can disagree. For shares each in [0, 1] that sum to 1, ask for the consistent",
        "  ones: ldpkit estimates METRIC --consistent (Analyst.estimates(..., consistent=True)).",
    )
)


def _header(est: object, metric: str, what: str) -> None:
    n, mechanism, epsilon = (getattr(est, k) for k in ("n", "mechanism", "epsilon"))
    _say(f"{metric}: n={n:,}, mechanism={mechanism}, epsilon={epsilon:g} ({what})")
    _say(f"  {'':<22} {'truth':>7} {'estimate':>9} {'95% interval':>20}")


def _print_distribution(analyst: Analyst, minutes: np.ndarray) -> None:
    est = analyst.estimates("session_minutes_dist", bins=8, quantiles=[0.5, 0.9], wait=WAIT)
    _header(est, "session_minutes_dist", "a distribution: histogram, quantiles, mean")
    for item in est.items:
        assert item.lower is not None and item.upper is not None
        inside = (minutes >= item.lower) & (
            (minutes < item.upper) if item.upper < 240 else (minutes <= item.upper)
        )
        label = f"minutes {item.category}"
        _say(_row(label, float(inside.mean()), item.estimate, item.low, item.high))
    for q in est.quantiles:
        truth = float(np.quantile(minutes, q.q))
        _say(_row(f"quantile {q.q:g}", truth, q.value, q.low, q.high, digits=1))
    _say(_row("mean", float(minutes.mean()), est.mean, est.low, est.high, digits=1))
    _say("")


def _print_square_wave(analyst: Analyst, latency: np.ndarray) -> None:
    """The square wave's point answers: it serves no interval (docs/statistics.md)."""
    est = analyst.estimates("latency_ms", bins=4, quantiles=[0.5, 0.9], wait=WAIT)
    n, mechanism = est.n, est.mechanism
    _say(f"latency_ms: n={n:,}, mechanism={mechanism}, epsilon={est.epsilon:g} (a distribution")
    _say("  by the square wave: no interval: square wave + EMS is a smoothed estimate)")
    _say(f"  {'':<22} {'truth':>7} {'estimate':>9}")
    for q in est.quantiles:
        truth, value = float(np.quantile(latency, q.q)), q.value
        _say(f"  {f'quantile {q.q:g} (ms)':<22} {truth:7.1f} {value:9.1f}")
    _say(f"  {'mean (ms)':<22} {float(latency.mean()):7.1f} {est.mean or 0.0:9.1f}")
    _say("")


def _print_hierarchy(analyst: Analyst, regions: np.ndarray) -> None:
    for depth in (2, 3):
        est = analyst.estimates("region", depth=depth, wait=WAIT)
        what = "states: each the sum of its municipalities" if depth == 2 else "municipalities"
        _header(est, "region", f"a hierarchy, depth {depth}, {what}")
        for item in est.items:
            truth = float(np.mean([r.startswith(item.category) for r in regions]))
            _say(_row(item.category, truth, item.estimate, item.low, item.high))
        _say("")


def _print_table(analyst: Analyst, cars: np.ndarray) -> None:
    est = analyst.estimates("car", consistent=True, wait=WAIT)
    _header(est, "car", "a table, type x origin; cells reconciled with the marginals")
    for item in est.items:
        assert item.cell is not None
        truth = float(np.mean([c == item.cell for c in cars]))
        label = f"{item.cell['type']} / {item.cell['origin']}"
        _say(_row(label, truth, item.estimate, item.low, item.high))
    _say("")


def _print_strings(analyst: Analyst, searches: np.ndarray) -> None:
    asked = ["weather", "never-searched"]
    est = analyst.estimates("search_term", candidates=asked, wait=WAIT)
    found = f"{len(est.items)} found" if est.items else "none found"
    _header(
        est,
        "search_term",
        f"open-domain strings, no list given: {found} (at most k = {STRINGS_K}), "
        f"then {len(asked)} asked for by name",
    )
    for item in (
        *est.items,
        *(replace(c, category=f"{c.category} (asked)") for c in est.candidates),
    ):
        word = item.category.removesuffix(" (asked)")
        truth = float(np.mean(searches == word))
        _say(_row(item.category, truth, item.estimate, item.low, item.high))
    _say(
        f"  nothing less frequent than {est.threshold or 0:.3f} can be found at this epsilon and n"
    )
    _say("")
