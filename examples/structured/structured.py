"""Structured categories with the core alone: a hierarchy that adds up, and a two-way table.

The product design's seed data, scaled up so the intervals are informative:

- a country of 1,000 (x scale) people in 3 states (300, 400, 300) and 6 municipalities
  (100, 200, 150, 250, 200, 100): every user reports their municipality; the estimates
  at every depth add up, and are printed beside the truth;
- the Cars93 table type x origin (Compact 7/9, Large 11/0, Midsize 10/12, Small 7/14,
  Sporty 8/6, Van 5/4, x scale): every car is reported as one cell; cells, marginals and
  consistent (non-negative, adding-up) estimates beside the truth.

About one 95% interval in twenty misses its truth: that is what 95% means (the
marginals of a table are sums of the same cells, so their misses come together).

Run:  .venv/bin/python examples/structured/structured.py [--scale 100] [--epsilon 1] [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

import ldpkit

MUNICIPALITIES = {
    "MX/Jalisco/Guadalajara": 100,
    "MX/Jalisco/Zapopan": 200,
    "MX/Sonora/Hermosillo": 150,
    "MX/Sonora/Obregon": 250,
    "MX/Yucatan/Merida": 200,
    "MX/Yucatan/Valladolid": 100,
}
CARS = {
    ("Compact", "USA"): 7,
    ("Compact", "non-USA"): 9,
    ("Large", "USA"): 11,
    ("Large", "non-USA"): 0,
    ("Midsize", "USA"): 10,
    ("Midsize", "non-USA"): 12,
    ("Small", "USA"): 7,
    ("Small", "non-USA"): 14,
    ("Sporty", "USA"): 8,
    ("Sporty", "non-USA"): 6,
    ("Van", "USA"): 5,
    ("Van", "non-USA"): 4,
}


def show(title: str, group: ldpkit.GroupEstimate, truth: np.ndarray, n: int) -> None:
    low, high = group.ci(0.95)
    print(f"\n{title}")
    print(f"  {'':<26}{'truth':>8}{'estimate':>10}{'95% interval':>20}{'consistent':>12}")
    for i, key in enumerate(group.keys):
        label = key if isinstance(key, str) else "/".join(key.values())
        print(
            f"  {label:<26}{truth[i] * n:>8.0f}{group.counts[i]:>10.0f}"
            f"{'[' + f'{low[i] * n:.0f}, {high[i] * n:.0f}' + ']':>20}"
            f"{group.consistent()[i] * n:>12.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=100)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Seeded generators make the example reproducible; a real device uses the default
    # (the OS CSPRNG), as ldpkit.client does.
    rng = np.random.default_rng(args.seed)

    # --- the hierarchy -------------------------------------------------------------------
    leaves = list(MUNICIPALITIES)
    m = ldpkit.hierarchy(leaves, epsilon=args.epsilon)  # auto: the design of least variance
    print(ldpkit.choose_hierarchy(m.tree, epsilon=args.epsilon).explain())
    people = np.repeat(
        [m.encode(leaf) for leaf in leaves], [c * args.scale for c in MUNICIPALITIES.values()]
    )
    est = m.estimate(m.aggregate(m.perturb(people, rng=rng)))
    n = est.n
    fractions = np.array(list(MUNICIPALITIES.values()), dtype=float)
    fractions /= fractions.sum()
    print(f"\nhierarchy: {n:,} reports, design {m.name}, epsilon {m.epsilon:g}")
    for depth in range(1, m.tree.depth + 1):
        truth = np.bincount(m.tree.labels[depth - 1], weights=fractions)
        show(f"depth {depth}", est.level(depth), truth, n)
    print(
        f"\nlargest |parent - sum of children|: {est.max_violation():.1e} (unbiased), "
        f"{est.max_violation(consistent=True):.1e} (consistent)"
    )

    # --- the table -----------------------------------------------------------------------
    table = ldpkit.Table(
        {
            "type": ["Compact", "Large", "Midsize", "Small", "Sporty", "Van"],
            "origin": ["USA", "non-USA"],
        }
    )
    t = ldpkit.table(table, epsilon=args.epsilon)
    cells = [t.encode({"type": ty, "origin": o}) for ty, o in CARS]
    cars = np.repeat(cells, [c * args.scale for c in CARS.values()])
    test = t.estimate(t.aggregate(t.perturb(cars, rng=np.random.default_rng(args.seed + 1))))
    truth = np.zeros(table.size)
    truth[cells] = list(CARS.values())
    truth /= truth.sum()
    print(f"\ntable: {test.n:,} reports, design {t.name}, epsilon {t.epsilon:g}")
    assert test.cells is not None
    show("cells (type/origin)", test.cells, truth, test.n)
    for name in table.names:
        marginal = np.bincount(table.labels(name), weights=truth)
        show(f"marginal {name}", test.marginal(name), marginal, test.n)
    print(
        f"\nlargest |marginal - sum of its cells|: {test.max_violation():.1e} (unbiased), "
        f"{test.max_violation(consistent=True):.1e} (consistent)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
