"""``ldpkit demo``: a collector on SQLite, simulated users through the real client, estimates.

Everything runs for real: the collector is a separate ``ldpkit serve`` process on
loopback, each simulated user's value is perturbed by the client SDK before it is queued,
reports travel as msgpack over HTTP, and the estimates come back from the query API.
The printed truth is what the simulation drew; the collector never sees it.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import LdpkitError
from .analyst import Analyst
from .launcher import environment_without_tokens, running_collector

INGEST, READ, ADMIN = "demo-ingest", "demo-read", "demo-admin"

CONFIG = """\
[collector]
host = "127.0.0.1"
database = "{database}"

[tokens]
ingest = ["{ingest}"]
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

[metrics.session_minutes]
kind = "numeric"
bounds = [0, 240]
epsilon = 1.0
mechanism = "auto"
"""

THEMES = (["light", "dark", "system"], [0.25, 0.55, 0.20])
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


def _say(message: str) -> None:
    print(message, flush=True)


def run_demo(
    *, users: int = 20_000, seed: int | None = None, port: int = 0, serve: bool = False
) -> int:
    from ..client import Reporter  # the demo plays the devices too

    if users < 100:
        raise LdpkitError(f"--users must be at least 100, got {users}")
    rng = np.random.default_rng(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ldpkit-demo-") as tmp:
        workdir = Path(tmp)
        config = workdir / "collector.toml"
        config.write_text(
            CONFIG.format(
                database=(workdir / "collector.sqlite3").as_posix(),
                ingest=INGEST,
                read=READ,
                admin=ADMIN,
                countries=str(COUNTRIES).replace("'", '"'),
            )
        )
        _say(f"[1/4] starting a collector (ldpkit serve) on SQLite in {workdir}")
        with running_collector(config, port=port, env=environment_without_tokens()) as collector:
            url = collector.url
            _say(f"      listening on {url}")

            # The simulated population: the truth only this process knows.
            theme_values = rng.choice(THEMES[0], size=users, p=THEMES[1])
            weights = 1.0 / np.arange(1, len(COUNTRIES) + 1) ** 1.1
            country_values = rng.choice(COUNTRIES, size=users, p=weights / weights.sum())
            minutes = np.clip(rng.gamma(shape=2.0, scale=18.0, size=users), 0, 240)

            _say(
                f"[2/4] {users:,} simulated users perturb their values on the device "
                "(theme, country, session_minutes)"
            )
            with Reporter(
                url, token=INGEST, state_dir=workdir / "device", background=False
            ) as reporter:
                t0 = time.monotonic()
                queued = 0
                for metric, values in (
                    ("theme", theme_values),
                    ("country", country_values),
                    ("session_minutes", minutes),
                ):
                    queued += reporter.simulate(metric, values.tolist(), rng=rng)
                    _say(f"      {metric}: {users:,} perturbed reports queued")
                _say(f"[3/4] delivering {queued:,} reports over HTTP in batches")
                result = reporter.flush()
                elapsed = time.monotonic() - t0
                _say(
                    f"      accepted {result.sent:,}, duplicates {result.duplicates}, "
                    f"rejected {result.rejected} ({queued / max(elapsed, 1e-9):,.0f} reports/s "
                    "including perturbation)"
                )

            _say("[4/4] estimates from the collector (it never saw a true value):\n")
            analyst = Analyst(url, READ)
            for metric, values in (("theme", theme_values), ("country", country_values)):
                _print_categorical(analyst, metric, values)
            est = analyst.estimates("session_minutes", level=0.95)
            truth_mean = float(minutes.mean())
            _say(
                f"session_minutes: n={est.n:,}, mechanism={est.mechanism}, epsilon={est.epsilon:g}"
            )
            _say(
                f"  truth {truth_mean:.2f}  estimate {est.mean or 0:.2f}  "
                f"95% interval [{est.low or 0:.2f}, {est.high or 0:.2f}] "
                f"{_covers(est.low, est.high, truth_mean)}"
            )
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
                _say("\nNext:")
                _say("  ldpkit demo --serve          keep the collector running; dashboard at /ui")
                _say(
                    "  ldpkit serve --config collector.toml   run a collector for real "
                    "(README: Operators)"
                )
                _say(
                    "  ldpkit plan --epsilon 1 --domain-size 16 --half-width 0.01   "
                    "how many users a campaign needs"
                )
    return 0


def _covers(low: float | None, high: float | None, truth: float) -> str:
    return "covers" if low is not None and high is not None and low <= truth <= high else "MISSES"


def _print_categorical(analyst: Analyst, metric: str, values: np.ndarray) -> None:
    est = analyst.estimates(metric, level=0.95)
    _say(f"{metric}: n={est.n:,}, mechanism={est.mechanism}, epsilon={est.epsilon:g}")
    _say(f"  {'category':<10} {'truth':>7} {'estimate':>9} {'95% interval':>20}")
    for item in est.items:
        truth = float(np.mean(values == item.category))
        _say(
            f"  {item.category:<10} {truth:7.3f} {item.estimate or 0:9.3f} "
            f"  [{item.low or 0:7.3f}, {item.high or 0:7.3f}] "
            f"{_covers(item.low, item.high, truth)}"
        )
    _say("")
