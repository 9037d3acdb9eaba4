"""CPU seconds of one ``estimator=ml`` answer (the fit, its standard errors and the 2d
profile interval ends at one level) beside the collector's model
(``ldpkit.mechanisms._profile.ml_seconds``, which bounds a query by
``max_answer_cpu_seconds``): grr and the exponential mechanism (distance score), d in
{8, 16, 32, 64}, eps in {0.5, 1, 4, 8}, the worst over n in {200, 2000, 10^4, 10^6} and two
populations (a Dirichlet(1) law; one item at 0.97, one absent, the rest sharing 0.03: the
slowest found), seed 0, one BLAS thread.

Run: ``.venv/bin/python benchmarks/ml_cost.py`` (about 3 minutes on the 2-core machine).
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"

import time

import numpy as np

from ldpkit.aggregate import Aggregate
from ldpkit.mechanisms._profile import ml_frequencies, ml_seconds
from ldpkit.metrics import MetricDefinition


def main() -> None:
    rng = np.random.default_rng(0)
    print("mechanism     d   eps  worst CPU s  model s")
    for name in ("grr", "exponential"):
        for d in (8, 16, 32, 64):
            for eps in (0.5, 1.0, 4.0, 8.0):
                spec = {"categories": [str(i) for i in range(d)], "epsilon": eps,
                        "mechanism": name, "ordered": name == "exponential"}  # fmt: skip
                m = MetricDefinition.from_dict("m", spec).mechanism_instance
                channel = m.report_channel()
                certain = np.full(d, 0.03 / (d - 2))
                certain[:2] = 0.97, 0.0
                worst = 0.0
                for f in (rng.dirichlet(np.ones(d)), certain):
                    for n in (200, 2000, 10_000, 1_000_000):
                        counts = rng.multinomial(n, f @ channel).astype(np.float64)
                        start = time.process_time()
                        ml_frequencies(m, Aggregate(n, counts)).ci(0.95)
                        worst = max(worst, time.process_time() - start)
                print(f"{name:11s} {d:3d} {eps:5g} {worst:12.3f} {ml_seconds(d):8.3f}", flush=True)


if __name__ == "__main__":
    main()
