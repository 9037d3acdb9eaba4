"""prefix_sketch lists only text an honest client could send, each listing with its evidence.

Issue 28: strings no one holds, random bytes that are not even UTF-8, were listed as heavy
hitters. The decoder now prunes, during the walk, every prefix that cannot complete to valid
UTF-8 of its length, and every listed string carries ``evidence_z`` (the find test's tail
probability as a normal z; the answer's ``find_z`` is the least a found string has).
"""

from __future__ import annotations

import codecs
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from ldpkit.errors import ReportError
from ldpkit.heavy_hitters import WEAK_MARGIN, StringEstimate
from ldpkit.mechanisms._string_decoder import (
    _first_level_keys,
    _take_children,
    _viable,
    log_poisson_upper_tail,
    poisson_upper_tail,
    z_of_log_tail,
)
from ldpkit.mechanisms._utf8 import valid_utf8
from ldpkit.mechanisms.strings import PrefixSketch, encode_strings


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _completes(prefix: bytes, left: int) -> bool:
    """Whether some ``left`` more bytes make ``prefix`` valid UTF-8, by Python's decoder: its
    open character's continuation bytes (any second byte where only the lead is known: the
    second is the only restricted one), then ASCII."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(prefix, final=False)
    except UnicodeDecodeError:
        return False
    buffered = decoder.getstate()[0]
    if not buffered:
        return True
    due = (2 if buffered[0] < 0xE0 else 3 if buffered[0] < 0xF0 else 4) - len(buffered)
    if due > left:
        return False
    seconds = range(256) if len(buffered) == 1 else [0x80]
    pad = b"a" * (left - due)
    return any(_is_utf8(prefix + bytes([b]) + b"\x80" * (due - 1) + pad) for b in seconds)


# --- the automaton -----------------------------------------------------------------------------


def test_valid_utf8_agrees_with_python() -> None:
    rng = np.random.default_rng(5)
    values = [rng.integers(0, 256, size=int(rng.integers(0, 7))).astype(np.uint8).tobytes()]
    values += [v.tobytes() for v in rng.integers(0, 256, size=(20_000, 4)).astype(np.uint8)]
    # The edges RFC 3629 draws: overlong, surrogate, above U+10FFFF, truncated, NUL.
    values += [b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]
    values += ["é".encode(), "€".encode(), "😀".encode(), b"a\x00", b"\xef\xbf\xbf"]
    keys, _ = encode_strings(values, 6)
    expected = np.array([_is_utf8(v) for v in values])
    assert valid_utf8(keys).tolist() == expected.tolist()
    assert 0 < int(expected.sum()) < len(values)


@pytest.mark.parametrize("j", [1, 2, 3])
def test_viable_candidates_are_the_prefixes_that_complete(j: int) -> None:
    """A candidate (length L, bytes 1..j) is viable iff some L - j more bytes make it valid
    UTF-8 (checked by Python's decoder)."""
    m = PrefixSketch(epsilon=2.0, max_length=4)
    if j == 1:
        candidates = _first_level_keys(4)
        viable = _viable(m, candidates, 1)
    else:
        # Parents: every length, lead bytes of each width, valid and invalid second bytes.
        heads = [b"a", b"\xc3", b"\xe0", b"\xed", b"\xf0", b"\xf4", b"\xe2", b"\x80"]
        if j == 3:
            heads = [h + s for h in heads for s in (b"a", b"\x85", b"\x95", b"\xa5")]
        rows = [bytes([length]) + h for length in range(j, 5) for h in heads]
        parents = np.zeros((len(rows), 5), np.uint8)
        for i, row in enumerate(rows):
            parents[i, : len(row)] = list(row)
        candidates = _take_children(parents, j, np.arange(len(parents) * 256))
        viable = _viable(m, parents, j)
    assert viable is not None
    for key, ok in zip(candidates, viable, strict=True):
        length, prefix = int(key[0]), bytes(key[1 : 1 + min(j, int(key[0]))])
        assert bool(ok) == _completes(prefix, length - len(prefix)), (length, prefix)
    assert _viable(PrefixSketch(epsilon=2.0, max_length=4, text=False), candidates, 1) is None


def test_perturb_takes_only_text_unless_told() -> None:
    m = PrefixSketch(epsilon=2.0, max_length=4)
    with pytest.raises(ReportError, match="index 1 is not valid UTF-8"):
        m.perturb([b"ab", b"\xff"])
    assert m.perturb(["é", b"ab"], rng=np.random.default_rng(0)).shape == (2,)
    raw = PrefixSketch(epsilon=2.0, max_length=4, text=False)
    assert raw.perturb([b"\xff"], rng=np.random.default_rng(0)).shape == (1,)
    # Decoding only: the reports and the default's fingerprint are unchanged.
    assert "text" not in m.params() and raw.params()["text"] is False
    rng = np.random.default_rng(1)
    assert (
        m.perturb(["ab"], rng=rng).tolist()
        == raw.perturb(["ab"], rng=np.random.default_rng(1)).tolist()
    )


# --- the decoder -------------------------------------------------------------------------------

WORDS = ["ab", "é", "€", "c", "xyz"]
PLANTED = [b"\xff\x00", b"\xc3", b"a\xe2\x82"]  # not UTF-8: no honest client sends them
SHARES = [0.25, 0.15, 0.1, 0.06, 0.04, 0.12, 0.1, 0.08]
# The rest (0.1) is a tail of 200 three-letter words.


def _reports(seed: int, n: int, cut: str) -> tuple[PrefixSketch, np.ndarray, set[bytes]]:
    """Reports of a population with heavy strings that are not UTF-8 (made with
    ``text=False``, as a dishonest client would), and the strings someone holds."""
    rng = np.random.default_rng(seed)
    tail = [bytes(rng.integers(97, 123, size=3).astype(np.uint8)) for _ in range(200)]
    values = [w.encode() for w in WORDS] + PLANTED + tail
    probs = np.array(SHARES + [0.1 / len(tail)] * len(tail))
    users = rng.choice(len(values), size=n, p=probs / probs.sum())
    m = PrefixSketch(epsilon=3.0, max_length=4, k=10, seed=seed, cut=cut, text=False)
    reports = m.perturb(np.array(values, dtype=object)[users], rng=rng)
    return m, reports, {values[i] for i in np.unique(users)}


@pytest.mark.parametrize("cut", ["scaled", "prefix"])
def test_only_text_is_listed_and_each_listing_has_its_evidence(cut: str) -> None:
    for seed in (1, 2):
        raw, reports, held = _reports(seed, 20_000, cut)
        agg = raw.aggregate(reports)
        anything = raw.estimate(agg)
        # The regime is real: decoding any bytes lists the planted non-UTF-8 strings.
        assert set(PLANTED) & set(anything.strings), seed
        text = PrefixSketch(epsilon=3.0, max_length=4, k=10, seed=seed, cut=cut)
        result = text.estimate(agg)
        assert result.items and all(_is_utf8(v) for v in result.strings), result.strings
        assert {b"ab", "é".encode(), "€".encode()} <= set(result.strings)
        assert set(result.strings) <= held
        # Every listing was found: its evidence is at least the find test's cutoff, and
        # the heaviest planted words (0.25, 0.15, 0.1; 10-30 null sds apart) come in order.
        evidence = {item.value: item.evidence_z for item in result.items}
        assert all(math.isfinite(z) and z >= result.find_z - 1e-9 for z in evidence.values())
        assert evidence[b"ab"] > evidence["é".encode()] > evidence["€".encode()]
        assert result.find_z == pytest.approx(stats.norm.isf(0.1 / _tests(text)), rel=1e-9)


def _tests(m: PrefixSketch) -> float:
    from ldpkit.heavy_hitters import model_tests

    return model_tests(m)


def test_evidence_travels_with_the_answer() -> None:
    raw, reports, _ = _reports(3, 20_000, "scaled")
    m = PrefixSketch(epsilon=3.0, max_length=4, k=10, seed=3)
    result = m.estimate(raw.aggregate(reports))
    first = result.items[0]
    data = result.to_dict(candidates=[first.value, "zz"], level=0.9)
    assert data["find_z"] == result.find_z
    assert data["items"][0]["evidence_z"] == first.evidence_z  # kept at another level
    # A named string that is listed keeps its evidence; one only named has none.
    assert data["candidates"][0]["evidence_z"] == first.evidence_z
    assert data["candidates"][1]["evidence_z"] is None
    again = pickle.loads(pickle.dumps(result))  # the estimate worker pickles results
    assert again.items == result.items and again.find_z == result.find_z
    # Weak: less than WEAK_MARGIN above the cutoff; a named string is never weak.
    cutoff = result.find_z
    assert StringEstimate(b"x", 0.1, 0.01, 0.0, 0.2, cutoff + 0.5).weak(cutoff)
    assert not StringEstimate(b"x", 0.1, 0.01, 0.0, 0.2, cutoff + WEAK_MARGIN).weak(cutoff)
    assert not StringEstimate(b"x", 0.1, 0.01, 0.0, 0.2).weak(cutoff)


# --- the evidence's arithmetic -------------------------------------------------------------------


@pytest.mark.parametrize(("count", "mean"), [(5.0, 1.0), (50.0, 10.0), (20.0, 19.5), (3.5, 6.0)])
def test_log_tail_is_the_poisson_tail(count: float, mean: float) -> None:
    expected = math.log(poisson_upper_tail(count, mean))
    assert log_poisson_upper_tail(count, mean) == pytest.approx(expected, rel=1e-12)
    assert log_poisson_upper_tail(count, mean) == pytest.approx(
        float(stats.gamma.logcdf(mean, count)), rel=1e-9
    )


def test_log_tail_stays_finite_far_below_the_smallest_double() -> None:
    a, x = 3000.0, 100.0  # scipy's logcdf is -inf here
    log_p = log_poisson_upper_tail(a, x)
    # The series' terms fall by at least x / (a + 1) each: between its first term and the
    # geometric sum of that.
    first = a * math.log(x) - x - math.lgamma(a + 1.0)
    assert first <= log_p <= first - math.log(1.0 - x / (a + 1.0))
    assert log_p < -7000


@pytest.mark.parametrize("log_p", [-0.1, -10.0, -300.0, -689.0, -691.0, -5000.0])
def test_z_of_log_tail_inverts_the_normal_tail(log_p: float) -> None:
    z = z_of_log_tail(log_p)
    assert float(stats.norm.logsf(z)) == pytest.approx(log_p, rel=1e-8)


# --- through the layers: the HTTP answer, the Analyst, the terminal table -----------------------


def test_evidence_reaches_the_answer_the_analyst_and_the_table() -> None:
    import json

    from ldpkit.analyst import EstimateResult
    from ldpkit.kinds.base import Question
    from ldpkit.metrics import MetricDefinition

    spec = {"kind": "strings", "max_length": 4, "k": 10, "epsilon": 3.0}
    d = MetricDefinition.from_dict("term", spec)
    m = d.mechanism_instance
    rng = np.random.default_rng(8)
    values = list(rng.choice(["ab", "é", "€", "c", "xyz", "q"], 20_000, p=[*SHARES[:5], 0.4]))
    question = Question(options={"candidates": ["ab", "zz"]})
    answer = d.kind_spec.answer(d, m.aggregate(m.perturb(values, rng=rng)), question)
    answer = json.loads(json.dumps(answer, allow_nan=False))  # as served
    assert answer["find_z"] > 0 and answer["items"]
    assert all(item["evidence_z"] >= answer["find_z"] for item in answer["items"])
    result = EstimateResult.from_json({**answer, "metric": "term", "kind": "strings"})
    assert result.find_z == answer["find_z"]
    assert [i.evidence_z for i in result.items] == [i["evidence_z"] for i in answer["items"]]
    assert result.candidates[1].evidence_z is None  # "zz": only named
    assert result.strings()[0].evidence_z == result.items[0].evidence_z
    lines = result.to_table().splitlines()
    head = next(line for line in lines if line.startswith("category"))
    assert head.split()[-1] == "evidence_z"
    note = next(line for line in lines if line.startswith("evidence_z:"))
    assert f"found from {answer['find_z']:.2f}" in note and "(none weak)" in note
    # A weak listing is named in the note.
    answer["find_z"] = answer["items"][-1]["evidence_z"] - 0.5
    weak = EstimateResult.from_json({**answer, "metric": "term", "kind": "strings"})
    note = next(line for line in weak.to_table().splitlines() if line.startswith("evidence_z:"))
    assert f"(weak: {answer['items'][-1]['category']!r})" in note
