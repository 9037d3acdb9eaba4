"""How fast ``ldpkit serve`` refuses what it cannot use: the timing targets the tests no
longer hold (tests check the cause; a test's wall-clock bound fails on a busy machine).

    .venv/bin/python benchmarks/startup_refusals.py

Printed, each the median of 5 runs: seconds until ``serve`` exits 2 for a PostgreSQL
database that does not exist (target < 10 s: one connection by the start-up check, not
the store's pool retrying for its 15 s ``connect_timeout``) and for a SQLite path in a
missing folder (the yardstick: the interpreter's start-up and the imports). Needs the
PostgreSQL server of the tests at 127.0.0.1:5432 for the first figure.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

POSTGRES = "postgresql://postgres@127.0.0.1:5432/ldpkit_no_such_database_bench"


def refusal_seconds(database: str, runs: int = 5) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPKIT_")}
    times, last = [], ""
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            started = time.monotonic()
            out = subprocess.run(
                [sys.executable, "-P", "-m", "ldpkit.cli", "serve", "--database", database],
                capture_output=True,
                text=True,
                cwd=tmp,
                env=env,
            )
            times.append(time.monotonic() - started)
            last = f"exit {out.returncode}: {' '.join(out.stderr.split())[-90:]}"
    return statistics.median(times), last


def main() -> None:
    for label, database in (
        ("postgres database that does not exist", POSTGRES),
        ("sqlite in a missing folder (yardstick)", "no/such/folder/c.sqlite3"),
    ):
        seconds, last = refusal_seconds(database)
        print(f"{label:<42} {seconds:6.2f} s   ({last})")


if __name__ == "__main__":
    main()
