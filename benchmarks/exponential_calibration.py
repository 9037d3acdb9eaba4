"""How much epsilon the exact calibration of the exponential mechanism saves over the
textbook rule ``s = eps / (2 Δq)``, per score (docs/statistics.md, "The exponential
mechanism"). Deterministic: no sampling.

For each score and epsilon it prints ``textbook/exact``, what the textbook rule charges for
the exactly calibrated channel divided by epsilon (2 Δq s / eps), and ``textbook spends``,
the true privacy loss of the channel the textbook rule picks for epsilon.

    python benchmarks/exponential_calibration.py
"""

from __future__ import annotations

import numpy as np

from ldpkit.mechanisms.exponential import calibrate, score_matrix

EPSILONS = (0.5, 1.0, 4.0, 8.0)
SIZES = (5, 10, 32)


def main() -> None:
    scores = [(f"distance d={d}", score_matrix("distance", d)) for d in SIZES]
    scores += [
        (f"band b={b} d={d}", score_matrix("band", d, band=b)) for b in (1, 2) for d in SIZES
    ]
    rng = np.random.default_rng(0)
    scores += [(f"matrix N(0,1) {d}x{d + 2}", rng.normal(size=(d, d + 2))) for d in SIZES]
    head = " | ".join(f"ε={e:g}: textbook/exact, textbook spends" for e in EPSILONS)
    print(f"| score | {head} |")
    print("|---" * (len(EPSILONS) + 1) + "|")
    for name, q in scores:
        cells = []
        for eps in EPSILONS:
            c = calibrate(q, eps)
            cells.append(f"{c.ratio:.3f}, {c.textbook_actual:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
