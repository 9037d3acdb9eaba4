"""The square wave's device cases for the JS and Java clients (tests/fixtures/).

In tests/fixtures/square_wave_cases.json, each sampling case is a distribution definition
with ``mechanism = "square_wave"`` as GET /v1/metrics would serve it, its served
constants (:meth:`SquareWave.served_constants`), a fixed word list, values (some outside
the bounds) and the output buckets :meth:`SquareWave.portable_report` draws from those
words (2 little-endian bytes each, ``reports``). client/js/test/square_wave.test.js and
client/java's SquareWaveTest read the same file, so nothing is copied by hand. The
verification cases are the served ``band`` and ``near`` over a sweep of epsilons (both
sides of the series below eps = 1) that each client recomputes.

The test below fails when the fixture is not what the core gives now; regenerate with
``.venv/bin/python -m tests.shared.test_square_wave_clients``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ldpkit.mechanisms._portable import Words, splitmix64, word_list
from ldpkit.mechanisms.square_wave import SquareWave

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "square_wave_cases.json"

# (name, epsilon, bounds, resolution (= d', the output buckets), values)
_SAMPLING = [
    ("series", 0.5, (0.0, 10.0), 32, [-3.0, 0.0, 2.5, 7.123456789, 10.0, 12.0]),
    ("one", 1.0, (-5.0, 3.5), 24, [-5.0, -1.25, 0.1, 3.5, 100.0]),
    ("two", 2.0, (0.0, 1.0), 48, [0.0, 0.123456789, 0.5, 0.999, 1.0]),
    ("wide", 6.0, (18.0, 90.0), 4096, [17.0, 18.0, 33.3, 64.0, 90.0, 91.0]),
    ("small", 0.05, (-1.0, 1.0), 2, [-1.0, -0.5, 0.0, 0.5, 1.0]),
]
# Words that hit the ends: u = 0 inside the window (coin 0 < near), u = 1 - 2^-53 outside.
_EDGES = [0, 0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF]
# Outside the window (coin ffff...), u = 1/2 exactly at v = 1/2 (u < v false: above), then
# u = 1/4 - 2^-53 just below v = 1/4 (below).
_TIES = [0xFFFFFFFF, 0xFFFFFFFF, 0, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFF800, 0x3FFFFFFF]
_SWEEP = [0.01, 0.1, 0.25, 0.5, 0.9, 0.999999, 1.0, 1.000001, 1.5, 2.0, 3.0, 5.0, 8.0, 10.0, 20.0]


def _words(seed: int, count: int) -> list[int]:
    """``count`` 32-bit words: the halves of SplitMix64 outputs (low half first)."""
    out: list[int] = []
    for z in splitmix64(seed, (count + 1) // 2):
        out += [z & 0xFFFFFFFF, z >> 32]
    return out[:count]


def _sampling_case(seed: int, spec: tuple[Any, ...], first: list[int]) -> dict[str, Any]:
    name, eps, bounds, resolution, values = spec
    # d' = resolution; the core's input buckets play no part on the device (2: a small channel).
    core = SquareWave(epsilon=eps, bounds=bounds, buckets=2, output_buckets=resolution)
    words = first + _words(seed, 4 * len(values) - len(first))
    source = Words(word_list(words))
    buckets = [core.portable_report(v, source) for v in values]
    assert source.used == len(words)
    lo, hi = bounds
    mechanism_params = {
        "mechanism": "square_wave",
        "epsilon": eps,
        "bounds": [lo, hi],
        "resolution": resolution,
    }
    return {
        "name": name,
        "definition": {
            "kind": "distribution",
            "bounds": [lo, hi],
            "resolution": resolution,
            "epsilon": eps,
            "mechanism": "square_wave",
        },
        "served": _served(f"sw-{name}", eps, [lo, hi], resolution, mechanism_params, core),
        "derived": core.served_constants(),
        "values": values,
        "words": " ".join(f"{w:08x}" for w in words),
        "buckets": buckets,
        "reports": "".join(k.to_bytes(2, "little").hex() for k in buckets),
    }


def _served(
    name: str,
    eps: float,
    bounds: list[float],
    resolution: int,
    mechanism_params: dict[str, Any],
    core: SquareWave,
) -> dict[str, Any]:
    """The definition as GET /v1/metrics serves it, fingerprinted as MetricDefinition
    fingerprints a distribution metric (its parameters with ``mechanism_params``)."""
    params = {
        "protocol": 1,
        "name": name,
        "kind": "distribution",
        "mechanism": "square_wave",
        "epsilon": eps,
        "bucket": "day",
        "bounds": bounds,
        "mechanism_params": mechanism_params,
    }
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return {
        "name": name,
        "kind": "distribution",
        "resolved_mechanism": "square_wave",
        "epsilon": eps,
        "budget": 4 * eps,
        "bucket": "day",
        "budget_period": "day",
        "bounds": bounds,
        "resolution": resolution,
        "mechanism_params": mechanism_params,
        "derived": core.served_constants(),
        "fingerprint": hashlib.sha256(canonical.encode()).hexdigest()[:16],
    }


def build_cases() -> dict[str, Any]:
    """The fixture's content, from the core as it is now."""
    sampling = [_sampling_case(1000 + i, spec, _EDGES) for i, spec in enumerate(_SAMPLING)]
    ties = ("ties", 1.0, (0.0, 1.0), 1000, [0.5, 0.25])
    sampling.append(_sampling_case(0, ties, _TIES))
    sweep = []
    for eps in _SWEEP:
        served = SquareWave(epsilon=eps, bounds=(0.0, 1.0), buckets=4).served_constants()
        sweep.append({"epsilon": eps, "band": served["band"], "near": served["near"]})
    return {
        "about": "tests/shared/test_square_wave_clients.py writes this file; do not edit",
        "sampling": sampling,
        "verification": sweep,
    }


def test_fixture_is_the_cores_cases() -> None:
    assert json.loads(FIXTURE.read_text()) == build_cases(), "regenerate the fixture"


def test_cases_reach_both_ends_and_both_branches() -> None:
    """The cases exercise bucket 0 and d' - 1 and the series as well as the closed form."""
    cases = build_cases()
    assert any(0 in c["buckets"] for c in cases["sampling"])
    assert any(c["derived"]["outputs"] - 1 in c["buckets"] for c in cases["sampling"])
    eps = [v["epsilon"] for v in cases["verification"]]
    assert min(eps) < 1.0 <= max(eps)


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(build_cases(), indent=1) + "\n")
    print(f"wrote {FIXTURE}")
