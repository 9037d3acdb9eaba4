"""Analysis: query a collector's estimates, look at them as a table, in pandas, as plots.

Run against any collector (for example one started with `ldpkit demo --serve`):
    LDPKIT_COLLECTOR=http://127.0.0.1:8787 LDPKIT_READ_TOKEN=analyst-secret \\
    .venv/bin/python examples/analysis/analysis.py --out plots/
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ldpkit.analyst import Analyst
from ldpkit.analyst.plots import plot_estimate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the PNGs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    analyst = Analyst(os.environ.get("LDPKIT_COLLECTOR", "http://127.0.0.1:8787"))
    for definition in analyst.metrics():
        result = analyst.estimates(definition.name, level=0.95, consistent=True)
        print(result.to_table(), end="\n\n")

        # pandas is optional: results turn into DataFrames when it is installed.
        try:
            frame = result.to_pandas()
        except ImportError:
            frame = None
        if frame is not None and result.kind == "categorical":
            significant = frame[frame["low"] > 0]
            print(f"categories whose interval lies above 0: {list(significant.index)}\n")

        path = args.out / f"{definition.name}.png"
        plot_estimate(result, path)  # bars with interval whiskers, or mean with interval
        print(f"wrote {path}")

        over_time = analyst.estimates(definition.name, per_bucket=True)
        plot_estimate(over_time, args.out / f"{definition.name}-over-time.png")


if __name__ == "__main__":
    main()
