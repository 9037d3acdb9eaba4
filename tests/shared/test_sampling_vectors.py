"""The sampling test vectors of docs/protocol.md: words in, report bytes out.

Each fenced block ``json sample NAME`` in the section "Sampling test vectors" holds a
definition, its served ``derived`` parameters, values, a stream of 32-bit words and the
reports (hex) the rules of ``ldpkit.portable`` make from them. The test checks that the
served parameters are what the collector computes, that the rules turn exactly those
words into exactly those bytes, and that the reports are well-formed. Run this file as a
script to print the vectors again (after a deliberate change of the rules).
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpkit import portable
from ldpkit.metrics import MetricDefinition

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
FENCE = re.compile(r"^```json sample ([^\n`]+)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)

CASES: list[tuple[str, dict[str, Any], list[Any], list[int] | None]] = [
    (
        "grr",
        {
            "kind": "categorical",
            "categories": ["light", "dark", "system"],
            "epsilon": 1.0,
            "mechanism": "grr",
        },
        ["light", "dark", "system", "dark"],
        None,
    ),
    # Not kept, and below(2) rejects its first word (0xffffffff >= 2**32 - 2**32 mod 2 is
    # false, so use d - 1 = 5: 0xffffffff is rejected).
    (
        "grr-rejection",
        {
            "kind": "categorical",
            "categories": ["a", "b", "c", "d", "e", "f"],
            "epsilon": 1.0,
            "mechanism": "grr",
        },
        ["b"],
        [0x00000000, 0xFFFFFFFF, 0xFFFFFFFF, 0x00000007],
    ),
    (
        "rr",
        {"kind": "categorical", "categories": ["no", "yes"], "epsilon": 0.5, "mechanism": "rr"},
        ["no", "yes", "yes"],
        None,
    ),
    (
        "sue",
        {
            "kind": "categorical",
            "categories": ["a", "b", "c", "d", "e", "f", "g", "h", "i"],
            "epsilon": 2.0,
            "mechanism": "sue",
        },
        ["c", "i"],
        None,
    ),
    (
        "oue",
        {
            "kind": "categorical",
            "categories": ["a", "b", "c", "d", "e", "f", "g", "h", "i"],
            "epsilon": 2.0,
            "mechanism": "oue",
        },
        ["a", "h"],
        None,
    ),
    (
        "olh",
        {
            "kind": "categorical",
            "categories": ["light", "dark", "system", "sépia"],
            "epsilon": 1.5,
            "mechanism": "olh",
        },
        ["light", "sépia", "dark"],
        None,
    ),
    (
        "ss",
        {
            "kind": "categorical",
            "categories": [f"c{i}" for i in range(12)],
            "epsilon": 0.5,
            "mechanism": "ss",
        },
        ["c0", "c5", "c11"],
        None,
    ),
    (
        "hr",
        {
            "kind": "categorical",
            "categories": ["a", "b", "c", "d", "e"],
            "epsilon": 1.0,
            "mechanism": "hr",
        },
        ["a", "c", "e", "e"],
        None,
    ),
    (
        "duchi",
        {
            "kind": "numeric",
            "bounds": [0, 1000],
            "epsilon": 0.5,
            "mechanism": "duchi",
            "bucket": "hour",
        },
        [0, 250.5, 1000, 2000],
        None,
    ),
    (
        "piecewise",
        {"kind": "numeric", "bounds": [-3, 7], "epsilon": 2.0, "mechanism": "piecewise"},
        [-3, 0.123456789, 7, -10],
        None,
    ),
    (
        "hybrid",
        {"kind": "numeric", "bounds": [-3, 7], "epsilon": 2.0, "mechanism": "hybrid"},
        [-3, 0.123456789, 7, 5.5],
        None,
    ),
    (
        "hybrid-duchi",
        {"kind": "numeric", "bounds": [-3, 7], "epsilon": 0.5, "mechanism": "hybrid"},
        [-3, 2],
        None,
    ),
    (
        "laplace",
        {"kind": "numeric", "bounds": [0, 10], "epsilon": 1.0, "mechanism": "laplace"},
        [0, 3.3, 10],
        None,
    ),
    (
        "gaussian",
        {
            "kind": "numeric",
            "bounds": [0, 10],
            "epsilon": 1.0,
            "mechanism": "gaussian",
            "delta": 1e-6,
        },
        [0, 3.3, 10, 12],
        None,
    ),
    # t beyond 2**32 and 2 sigma2 beyond 2**64: below() over two and three words.
    (
        "gaussian-wide",
        {
            "kind": "numeric",
            "bounds": [-1, 1],
            "epsilon": 0.00005,
            "mechanism": "gaussian",
            "delta": 1e-9,
        },
        [0.5],
        None,
    ),
    (
        "hh",
        {"kind": "distribution", "bounds": [0, 100], "resolution": 16, "epsilon": 1.0},
        [0, 33.3, 99.99, 100],
        None,
    ),
    (
        "hh-olh",
        {
            "kind": "distribution",
            "bounds": [0, 1],
            "resolution": 256,
            "epsilon": 0.5,
            "mechanism": "hh",
        },
        [0.5, 0.25],
        None,
    ),
    (
        "rollup",
        {
            "kind": "hierarchy",
            "categories": ["MX/Jalisco", "MX/Sonora", "US/Texas"],
            "epsilon": 1.0,
            "mechanism": "rollup",
            "oracle": "grr",
        },
        ["MX/Sonora", "US/Texas"],
        None,
    ),
    (
        "levels",
        {
            "kind": "hierarchy",
            "categories": ["MX/Jalisco", "MX/Sonora", "US/Texas"],
            "epsilon": 1.0,
            "mechanism": "levels",
        },
        ["MX/Sonora", "US/Texas", "MX/Jalisco"],
        None,
    ),
    (
        "joint",
        {
            "kind": "table",
            "dimensions": [["type", ["Van", "Compact"]], ["origin", ["USA", "non-USA"]]],
            "epsilon": 2.0,
            "mechanism": "joint",
            "oracle": "oue",
        },
        [{"type": "Compact", "origin": "USA"}],
        None,
    ),
    (
        "joint_marginals",
        {
            "kind": "table",
            "dimensions": [["type", ["Van", "Compact"]], ["origin", ["USA", "non-USA"]]],
            "epsilon": 2.0,
            "mechanism": "joint_marginals",
        },
        [{"type": "Compact", "origin": "USA"}, {"type": "Van", "origin": "non-USA"}],
        None,
    ),
    (
        "prefix_sketch",
        {"kind": "strings", "max_length": 8, "k": 3, "epsilon": 4.0},
        # Shorter than max_length, so that the prefix levels' cut (ceil(t m / M) bytes,
        # not t) shows in the reports.
        ["abcd", "ab", "abcdefg", "xyz", "météo", "météo"],
        None,
    ),
    # A served seed other than 0: the hash keys are SplitMix64 outputs from it, so a client
    # that hashes with seed 0 (or ignores the seed) gets other buckets.
    (
        "prefix_sketch-seeded",
        {"kind": "strings", "max_length": 8, "k": 3, "epsilon": 4.0, "seed": 2**52 + 12345},
        ["abcd", "ab", "abcdefg", "xyz", "météo", "météo"],
        None,
    ),
    (
        "exponential",
        {
            "kind": "categorical",
            "categories": ["1", "2", "3", "4", "5"],
            "epsilon": 1.0,
            "mechanism": "exponential",
            "ordered": True,
        },
        ["1", "3", "5", "5", "2"],
        None,
    ),
    (
        "exponential-band",
        {
            "kind": "categorical",
            "categories": ["a", "b", "c", "d"],
            "epsilon": 2.0,
            "mechanism": "exponential",
            "ordered": True,
            "score": "band",
            "band": 1,
        },
        ["a", "d"],
        None,
    ),
    (
        "square_wave",
        {
            "kind": "distribution",
            "bounds": [-3.0, 7.0],
            "resolution": 32,
            "epsilon": 1.0,
            "mechanism": "square_wave",
        },
        [-3.0, 0.123456789, 2.5, 7.0, 12.0],
        None,
    ),
]


def _build(definition: dict[str, Any]) -> tuple[MetricDefinition, dict[str, Any]]:
    d = MetricDefinition.from_dict("m", definition)
    return d, d.to_dict()


def _input(d: MetricDefinition, value: Any) -> Any:
    """The mechanism input of a raw value (docs/protocol.md, "Values")."""
    return d.kind_spec.encode(d, value)[0]


def make_vector(
    name: str, definition: dict[str, Any], values: list[Any], words: list[int] | None
) -> dict[str, Any]:
    d, served = _build(definition)
    if words is None:
        rnd = random.Random(f"ldpkit sampling vector {name}")
        pool = [rnd.getrandbits(32) for _ in range(100_000)]
        it = iter(pool)
        taken: list[int] = []

        def take() -> int:
            w = next(it)
            taken.append(w)
            return w

        reports = b"".join(portable.perturb(served, _input(d, v), take) for v in values)
        words = taken
    else:
        reports = b"".join(
            portable.perturb(served, _input(d, v), portable.word_list(words)) for v in values
        )
    return {
        "definition": definition,
        "derived": served["derived"],
        "values": values,
        "words": " ".join(f"{w:08x}" for w in words),
        "reports": reports.hex(),
    }


def _doc_vectors() -> dict[str, dict[str, Any]]:
    text = DOC.read_text()
    section = text[text.index("## Sampling test vectors") :]
    following = section.find("\n## ", 1)  # the section ends where the next one starts
    if following != -1:
        section = section[:following]
    found: dict[str, dict[str, Any]] = {}
    for name, body in FENCE.findall(section):
        assert name not in found, f"duplicate sample vector {name}"
        found[name] = json.loads(body)
    return found


VECTORS = _doc_vectors() if "## Sampling test vectors" in DOC.read_text() else {}


def test_every_mechanism_has_a_vector() -> None:
    mechanisms = {
        MetricDefinition.from_dict("m", v["definition"]).resolved_mechanism
        for v in VECTORS.values()
    }
    assert mechanisms == set(portable.MECHANISMS)
    assert {name for name, *_ in CASES} == set(VECTORS)


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_sample_vector(name: str) -> None:
    vector = VECTORS[name]
    d, served = _build(vector["definition"])
    # The served parameters are what the document says (clients never recompute them).
    assert json.loads(json.dumps(served["derived"])) == vector["derived"]
    words = [int(w, 16) for w in vector["words"].split()]
    stream = portable.Words(portable.word_list(words))
    reports = b"".join(
        portable.perturb(served, _input(d, v), stream.word) for v in vector["values"]
    )
    assert reports.hex() == vector["reports"]
    assert stream.used == len(words), "every listed word is used, no more"
    m = d.mechanism_instance
    array = np.frombuffer(reports, dtype=m.report_dtype)
    assert len(array) == len(vector["values"])
    assert bool(np.all(m.check_reports(array)))


def test_vectors_are_what_the_rules_make() -> None:
    """Regenerating gives the document's vectors (no stale vector survives a rule change)."""
    for name, definition, values, words in CASES:
        assert make_vector(name, definition, values, words) == VECTORS[name], name


if __name__ == "__main__":  # print the vectors for docs/protocol.md
    for name, definition, values, words in CASES:
        vector = make_vector(name, definition, values, words)
        body = json.dumps(vector, ensure_ascii=False)
        sys.stdout.write(f"```json sample {name}\n{body}\n```\n\n")
