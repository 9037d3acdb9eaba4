"""False listings of ``prefix_sketch``: listed strings no honest client sends, or nobody holds.

A Zipf population of made-up lowercase words of 1..16 bytes (by default 1,000 words with
Zipf(1.1) frequencies by rank: the 6th about 0.025, the regime of issue 28). Each answer
draws n fresh users, a fresh public hash family and fresh device randomness, runs the real
sampler and decoder, and counts among its listed strings those that are not valid UTF-8
(no honest client can report them: the strings kind takes text) and those that none of the
n users holds. Where the answer carries each item's evidence (``evidence_z``,
docs/statistics.md "How strong a listing is"), it also prints the evidence of the true
listings (least, 5th percentile, median) and of every false one.

Run: ``.venv/bin/python benchmarks/strings_false_listings.py [--answers 100] [--epsilon 2]
[--n 1e5] [--k 20] [--seed 1] [--words 1000] [--zipf 1.1]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpkit.mechanisms.strings import PrefixSketch, encode_strings

MAX_LENGTH = 16


def population(distinct: int, zipf: float, seed: int = 2024) -> tuple[list[bytes], np.ndarray]:
    """``distinct`` made-up lowercase words of 1..16 bytes, Zipf(``zipf``) by rank."""
    rng = np.random.default_rng(seed)
    seen: set[bytes] = set()
    while len(seen) < distinct:
        length = 1 + int(rng.binomial(MAX_LENGTH - 1, 0.4))
        seen.add((97 + rng.integers(0, 26, size=length)).astype(np.uint8).tobytes())
    words = sorted(seen)
    rng.shuffle(words)  # rank unrelated to spelling
    weights = np.arange(1, distinct + 1, dtype=np.float64) ** -zipf
    return words, weights / weights.sum()


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=100)
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--n", type=float, default=1e5)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--words", type=int, default=1000)
    parser.add_argument("--zipf", type=float, default=1.1)
    args = parser.parse_args()
    if args.answers < 1 or args.n < 1 or args.words < 1 or args.zipf <= 0:
        parser.error("--answers, --n and --words must be at least 1, --zipf above 0")
    n = int(args.n)
    words, probs = population(args.words, args.zipf)
    keys, _ = encode_strings(words, MAX_LENGTH)
    index = {w: i for i, w in enumerate(words)}
    listed = invalid = nobody = 0
    false_z: list[float] = []
    true_z: list[float] = []
    false_items: list[str] = []
    weak = {True: 0, False: 0}  # weak listings (evidence_z < find_z + 1), false and true
    times: list[float] = []
    for c in range(args.answers):
        rng = np.random.default_rng(args.seed * 100_000 + c)
        users = rng.choice(len(words), size=n, p=probs)
        held = np.bincount(users, minlength=len(words)) > 0
        m = PrefixSketch(epsilon=args.epsilon, max_length=MAX_LENGTH, k=args.k, seed=c)
        agg = m.aggregate(m._perturb(keys[users], rng))  # keys encoded once for speed
        start = time.perf_counter()
        result = m.estimate(agg)
        times.append(time.perf_counter() - start)
        for item in result.items:
            listed += 1
            i = index.get(item.value)
            false = i is None or not held[i]
            invalid += not _utf8(item.value)
            nobody += false
            z = getattr(item, "evidence_z", None)  # absent before the evidence existed
            if false:
                false_items.append(f"{item.value!r} {item.estimate:.4f}")
            if z is not None:
                (false_z if false else true_z).append(float(z))
                weak[false] += bool(item.weak(result.find_z))
    print(
        f"eps={args.epsilon:g} n={n} answers={args.answers} k={args.k} words={args.words} "
        f"zipf={args.zipf:g}: listed {listed} "
        f"({listed / args.answers:.2f} per answer); not UTF-8 {invalid}; held by nobody "
        f"{nobody} ({nobody / args.answers:.3f} per answer); median decode "
        f"{np.median(times):.2f} s"
    )
    if false_items:
        print("held by nobody:", "; ".join(false_items))
    if true_z:
        print(
            f"evidence_z of true listings: min {min(true_z):.2f}, 5th percentile "
            f"{np.percentile(true_z, 5):.2f}, median {np.median(true_z):.2f}"
        )
    if true_z:
        print(f"weak listings (evidence_z < find_z + 1): {weak[False]} true, {weak[True]} false")
    if false_z:
        print(f"evidence_z of false listings: {', '.join(f'{z:.2f}' for z in false_z)}")
    elif true_z:
        print("evidence_z of false listings: none listed")


if __name__ == "__main__":
    main()
