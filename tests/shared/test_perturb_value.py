"""The per-value path (``Mechanism.perturb_value``, the device's report) against the
vectorised one: for the same generator, the same words, so the same bytes.

Both paths start from generators with the same key, so any difference in the words drawn
(their number, order, or how they are turned into coins, doubles and bounded integers) or in
the arithmetic shows as different bytes. The law of the vectorised path is tested elsewhere
(tests/shared/test_sampling_vectors.py, test_frequency_oracles.py, test_numeric_mechanisms.py);
equal bytes for equal words carry it over. Every registered mechanism is covered: those
with a per-value path here, the rest by asserting they use the base's fallback (which *is*
the vectorised path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ldpkit.mechanisms import CATEGORICAL, REGISTERED, Mechanism, mechanism
from ldpkit.mechanisms._bits import OneDraws, rng_words
from ldpkit.randomness import KeyedGenerator

# (name, options): domain sizes on both sides of a 64-bit word and of a byte, epsilons that
# make GRR/OLH's integers() span < 2**32 and hybrid's PM branch live or dead.
CATEGORICAL_CASES = [
    (name, eps, d)
    for name in (*CATEGORICAL, "rr")
    for eps in (0.5, 4.0)
    for d in ((2,) if name == "rr" else (3, 16, 65, 1024))
] + [("exponential", eps, d) for eps in (0.5, 4.0) for d in (3, 16, 64)]
NUMERIC_CASES = [
    (name, eps, bounds)
    for name in ("laplace", "duchi", "piecewise", "hybrid", "gaussian")
    for eps in (0.3, 1.0, 5.0)
    for bounds in ((0.0, 1.0), (-40.0, 7.5))
]
SEEDS = range(60)


def philox(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=seed * 7919 + 1))


def keyed(seed: int) -> np.random.Generator:
    return KeyedGenerator(seed.to_bytes(4, "little") * 8)


GENERATORS: list[Callable[[int], np.random.Generator]] = [philox, keyed]


def vectorised(m: Mechanism, value: Any, rng: np.random.Generator) -> bytes:
    words_path = getattr(m, "perturb_words", None)
    if words_path is not None:  # bitmaps: perturb_checked of one value takes the one-row path
        reports = words_path(np.asarray([value], dtype=np.int64), rng_words(rng))
    else:
        reports = m.perturb_checked(np.asarray([value]), rng)
    return bytes(np.ascontiguousarray(reports).tobytes())


def overrides(m: Mechanism) -> bool:
    return type(m).perturb_value is not Mechanism.perturb_value


@pytest.mark.parametrize("make", GENERATORS, ids=["philox", "keyed"])
@pytest.mark.parametrize(("name", "eps", "d"), CATEGORICAL_CASES)
def test_categorical_bytes_equal(
    make: Callable[[int], np.random.Generator], name: str, eps: float, d: int
) -> None:
    m = mechanism(name, epsilon=eps, domain_size=d)
    assert overrides(m), f"{name} has no per-value path"
    for seed in SEEDS:
        value = (seed * 31) % d
        assert m.perturb_value(value, make(seed)) == vectorised(m, value, make(seed)), (seed, value)


@pytest.mark.parametrize("make", GENERATORS, ids=["philox", "keyed"])
@pytest.mark.parametrize(("name", "eps", "bounds"), NUMERIC_CASES)
def test_numeric_bytes_equal(
    make: Callable[[int], np.random.Generator],
    name: str,
    eps: float,
    bounds: tuple[float, float],
) -> None:
    options = {"delta": 1e-6} if name == "gaussian" else {}
    m = mechanism(name, epsilon=eps, bounds=bounds, **options)
    lo, hi = bounds
    for seed in SEEDS:
        value = lo + (hi - lo) * ((seed * 0.618034) % 1.0)
        if seed % 10 == 0:
            value = lo if seed % 20 == 0 else hi
        got = m.perturb_value(value, make(seed))
        assert got == vectorised(m, value, make(seed)), (seed, value)


def test_the_rest_fall_back_to_the_vectorised_path() -> None:
    """A mechanism missing from the cases above must not carry its own per-value path
    (whose bytes nothing here would check)."""
    tested = {name for name, _, _ in CATEGORICAL_CASES} | {name for name, _, _ in NUMERIC_CASES}
    tested |= {"square_wave"}  # test_square_wave_bytes_equal
    per_value = {"grr", "rr", "sue", "oue", "olh", "ss", "hr", "duchi", "piecewise", "hybrid"}
    per_value |= {"laplace", "exponential", "square_wave"}
    assert per_value <= tested
    from ldpkit.mechanisms import mechanism_class

    for name in REGISTERED:
        own = mechanism_class(name).perturb_value is not Mechanism.perturb_value
        assert not own or name in tested, f"{name}'s per-value path is not tested"
        assert own == (name in per_value), name


@pytest.mark.parametrize("make", GENERATORS, ids=["philox", "keyed"])
@pytest.mark.parametrize(("eps", "resolution"), [(0.3, 16), (1.0, 64), (5.0, 1024)])
def test_square_wave_bytes_equal(
    make: Callable[[int], np.random.Generator], eps: float, resolution: int
) -> None:
    lo, hi = -40.0, 7.5
    m = mechanism("square_wave", epsilon=eps, bounds=(lo, hi), resolution=resolution)
    for seed in SEEDS:
        value = lo + (hi - lo) * ((seed * 0.618034) % 1.0)
        if seed % 10 == 0:
            value = lo - 1.0 if seed % 20 == 0 else hi + 3.0  # clipped
        assert m.perturb_value(value, make(seed)) == vectorised(m, value, make(seed)), seed


@pytest.mark.parametrize(
    "high",
    [1, 2, 3, 5, 7, 1000, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, 3 * 2**40 + 17, 2**63 + 5, 2**64],
)
def test_integers_are_numpys(high: int) -> None:
    """``OneDraws.integers`` is ``Generator.integers(0, high)`` (Lemire, 32-bit halves)
    draw after draw, for bounds on both sides of 2**32 (interleaved with 64-bit draws,
    which must not disturb the buffered half)."""
    for seed in range(40):
        mine = OneDraws(philox(seed))
        theirs = philox(seed)
        for i in range(6):
            if i == 3:
                assert mine.u64() == int(theirs.bit_generator.random_raw())
            dtype = np.uint64 if high > 2**63 else np.int64
            want = int(theirs.integers(0, high, dtype=dtype))
            assert mine.integers(high) == want, (seed, i)


def test_random_is_numpys() -> None:
    mine, theirs = OneDraws(philox(3)), philox(3)
    assert [mine.random() for _ in range(50)] == theirs.random(50).tolist()
