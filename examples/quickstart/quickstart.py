"""Quickstart: what `ldpkit demo` does, as code to read.

1. Start a collector (`ldpkit serve`) on SQLite with two metrics.
2. Simulated users report through the client SDK: each value is perturbed on the
   "device" before it is queued, and only perturbed reports travel.
3. Ask the collector for estimates with 95% intervals and compare them with the truth
   (which only this script knows).

Run:  .venv/bin/python examples/quickstart/quickstart.py [--users 20000]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from ldpkit.analyst import Analyst
from ldpkit.client import Reporter
from ldpkit.collector.launcher import running_collector

CONFIG = """
[collector]
database = "collector.sqlite3"

[tokens]
ingest = ["app-secret"]
relay = ["relay-secret"]
read = ["analyst-secret"]
admin = ["admin-secret"]

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
epsilon = 1.0
mechanism = "auto"

[metrics.session_minutes]
kind = "numeric"
bounds = [0, 240]
epsilon = 1.0
mechanism = "auto"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    users = parser.parse_args().users
    rng = np.random.default_rng()

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "collector.toml").write_text(CONFIG)
        # `ldpkit serve --config collector.toml` as a child process, stopped at the end.
        with running_collector("collector.toml", cwd=tmp) as collector:
            url = collector.url
            # The population: only this script knows it.
            themes = rng.choice(["light", "dark", "system"], size=users, p=[0.3, 0.5, 0.2])
            minutes = np.clip(rng.gamma(2.0, 18.0, size=users), 0, 240)

            # An app calls r.report("theme", "dark") once per user, with the app's (device)
            # token; simulate() does the same for many users at once (each as its own fresh
            # device), so it sends with a relay token: one batch carries many devices'.
            with Reporter(url, token="relay-secret", state_dir=Path(tmp) / "device") as r:
                r.simulate("theme", themes.tolist())
                r.simulate("session_minutes", minutes.tolist())
                delivered = r.flush()
            print(f"delivered {delivered.sent} perturbed reports to {url}")

            analyst = Analyst(url, token="analyst-secret")
            theme = analyst.estimates("theme", level=0.95)
            print(theme.to_table())
            for item in theme.items:
                print(f"  truth for {item.category}: {np.mean(themes == item.category):.4f}")
            print(analyst.estimates("session_minutes").to_table())
            print(f"  truth: {minutes.mean():.4f}")


if __name__ == "__main__":
    main()
