"""Building blocks of the categorical mechanisms, against slow references."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
import scipy.linalg
from scipy import stats

import ldpkit
from ldpkit.mechanisms import _bits, hadamard, local_hashing, subset_selection
from ldpkit.mechanisms.hadamard import HadamardResponse, fwht
from ldpkit.mechanisms.local_hashing import OptimizedLocalHashing, bucket, bucket_bounds
from ldpkit.mechanisms.subset_selection import SubsetSelection

# --- bits -------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 7, 8, 9, 16, 63, 64, 65, 100, 1024, 1030])
def test_column_counts_match_unpackbits(d: int) -> None:
    rng = np.random.default_rng(d)
    # Row counts around the 255-row lanes and the block size, plus a ragged tail.
    for n in [0, 1, 254, 255, 256, 255 * 8, 255 * 8 + 1, 5000]:
        bits = rng.random((n, d)) < rng.random(d)
        packed = _bits.pack_rows(bits)
        assert packed.shape == (n, _bits.packed_size(d))
        expected = np.unpackbits(packed, axis=1, count=d, bitorder="little").sum(axis=0)
        np.testing.assert_array_equal(_bits.column_counts(packed, d), expected)
        np.testing.assert_array_equal(_bits.row_popcounts(packed), bits.sum(axis=1))
        assert _bits.padding_is_zero(packed, d).all()
        np.testing.assert_array_equal(_bits.unpack_rows(packed, d), bits)


def test_column_counts_all_ones_do_not_overflow_lanes() -> None:
    packed = np.full((255 * 8 * 3 + 17, 16), 0xFF, dtype=np.uint8)
    np.testing.assert_array_equal(_bits.column_counts(packed, 128), np.full(128, len(packed)))


def test_column_counts_accepts_non_contiguous_rows() -> None:
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, size=(3000, 16), dtype=np.uint8)
    view = packed[::3]
    expected = np.unpackbits(view, axis=1, bitorder="little").sum(axis=0)
    np.testing.assert_array_equal(_bits.column_counts(view, 128), expected)


def test_little_bit_order() -> None:
    bits = np.zeros((1, 10), dtype=bool)
    bits[0, [0, 3, 9]] = True
    np.testing.assert_array_equal(_bits.pack_rows(bits), [[0b00001001, 0b00000010]])


def test_padding_check() -> None:
    packed = np.array([[0xFF, 0x03], [0xFF, 0x04], [0x00, 0x80]], dtype=np.uint8)
    assert _bits.padding_is_zero(packed, 10).tolist() == [True, False, False]
    assert _bits.padding_is_zero(packed, 16).tolist() == [True, True, True]


def test_thresholds_round_towards_privacy() -> None:
    for prob in [1e-30, 0.017986209962091559, 1 / 3, 0.5, 0.73, 1 - 1e-12]:
        t64 = _bits.threshold64_floor(prob)
        assert t64 <= prob * 2**64 < t64 + 2**12  # within double precision of exact
    assert _bits.threshold64_floor(0.5) == 2**63


# --- Hadamard ---------------------------------------------------------------------------


@pytest.mark.parametrize("K", [1, 2, 4, 8, 64, 1024])
def test_fwht_matches_scipy_hadamard(K: int) -> None:
    rng = np.random.default_rng(K)
    H = scipy.linalg.hadamard(K)
    ints = rng.integers(-1000, 1000, size=K)
    out = fwht(ints)
    assert out.dtype == ints.dtype
    np.testing.assert_array_equal(out, H @ ints)
    floats = rng.normal(size=K)
    np.testing.assert_allclose(fwht(floats), H @ floats, atol=1e-9)
    # The input is not modified.
    np.testing.assert_array_equal(fwht(np.eye(K, dtype=np.int64)[K - 1]), H[:, K - 1])


@pytest.mark.parametrize("bad", [np.zeros(3), np.zeros(0), np.zeros((4, 4))])
def test_fwht_rejects_bad_lengths(bad: np.ndarray) -> None:
    with pytest.raises(ldpkit.ParameterError, match="power of 2"):
        fwht(bad)


@pytest.mark.parametrize(("d", "K"), [(2, 4), (3, 4), (4, 8), (7, 8), (8, 16), (1000, 1024)])
def test_hadamard_block_size(d: int, K: int) -> None:
    m = ldpkit.mechanism("hr", epsilon=1.0, domain_size=d)
    assert isinstance(m, HadamardResponse)
    assert m.K == K


def test_hadamard_sums_match_naive_support() -> None:
    d = 37
    m = ldpkit.mechanism("hr", epsilon=1.0, domain_size=d)
    assert isinstance(m, HadamardResponse)
    rng = np.random.default_rng(3)
    reports = m.perturb(rng.integers(0, d, 5000), rng=rng)
    rows = np.arange(1, d + 1, dtype=np.uint64)[:, None]
    inside = np.bitwise_count(rows & reports.astype(np.uint64)[None, :]) % 2 == 0
    np.testing.assert_array_equal(m.aggregate(reports).sums, inside.sum(axis=1))


def test_hadamard_reports_are_on_the_drawn_side() -> None:
    m = ldpkit.mechanism("hr", epsilon=2.0, domain_size=20)
    assert isinstance(m, HadamardResponse)
    rng = np.random.default_rng(4)
    values = rng.integers(0, 20, 100_000)
    c = m.perturb(values, rng=rng).astype(np.uint64)
    inside = np.bitwise_count((values.astype(np.uint64) + np.uint64(1)) & c) % 2 == 0
    se = math.sqrt(m.p * (1 - m.p) / values.size)
    assert abs(inside.mean() - m.p) < 5 * se
    assert np.dtype("<u4") == hadamard.REPORT_DTYPE


# --- local hashing ----------------------------------------------------------------------

# The test vector printed in the local_hashing module docstring.
A, B, G = 0x9E3779B97F4A7C15, 0x0123456789ABCDEF, 5
VECTOR = [
    (0, 0x01234567, 0),
    (1, 0x9F5ABF21, 3),
    (2, 0x3D9238DA, 1),
    (3, 0xDBC9B294, 4),
    (4, 0x7A012C4D, 2),
    (5, 0x1838A607, 0),
    (1000, 0x09D6C200, 0),
    (4294967295, 0xE23647C3, 4),
]


@pytest.mark.parametrize(("v", "h", "y"), VECTOR)
def test_olh_hash_test_vector(v: int, h: int, y: int) -> None:
    # The specification, in plain Python integers ...
    assert ((A * v + B) % 2**64) >> 32 == h
    assert (h * G) >> 32 == y
    # ... and the vectorized implementation.
    assert int(bucket(v, A, B, G)[0]) == y
    assert int(bucket(np.array([v]), np.array([A], dtype=np.uint64), B, G)[0]) == y


def test_olh_test_vector_is_in_the_docstring() -> None:
    doc = local_hashing.__doc__ or ""
    for v, h, y in VECTOR:
        assert f"{v:<14d}0x{h:08X}    {y}" in doc


@pytest.mark.parametrize("g", [2, 3, 5, 7, 56, 1000, 2**32 - 1, 2**32])
def test_olh_bucket_bounds_match_integer_reference(g: int) -> None:
    ys = sorted({0, 1, g // 2, g - 2, g - 1} - {-1})
    lo, hi = bucket_bounds(np.array(ys, dtype=np.uint64), g)
    for y, low, high in zip(ys, lo.tolist(), hi.tolist(), strict=True):
        assert low == -(-y * 2**32 // g)
        assert high == -(-(y + 1) * 2**32 // g)
        # The bucket of the bounds' hash values is y.
        assert (low * g) >> 32 == y and ((high - 1) * g) >> 32 == y


def olh_naive_sums(m: OptimizedLocalHashing, reports: np.ndarray) -> np.ndarray:
    """Support counts straight from the definition (Python integers)."""
    counts = np.zeros(m.domain_size)
    for a, b, y in reports.tolist():
        for v in range(m.domain_size):
            counts[v] += ((((a * v + b) % 2**64) >> 32) * m.g) >> 32 == y
    return counts


@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_olh_chunked_aggregation_equals_naive(
    epsilon: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = ldpkit.mechanism("olh", epsilon=epsilon, domain_size=23)
    assert isinstance(m, OptimizedLocalHashing)
    rng = np.random.default_rng(9)
    reports = m.perturb(rng.integers(0, 23, 700), rng=rng)
    expected = olh_naive_sums(m, reports)
    np.testing.assert_array_equal(m.aggregate(reports).sums, expected)
    # Small chunks, with a ragged last one.
    monkeypatch.setattr(local_hashing, "_AGGREGATE_CHUNK", 64)
    np.testing.assert_array_equal(m.aggregate(reports).sums, expected)


def test_olh_perturb_uses_bucket() -> None:
    m = ldpkit.mechanism("olh", epsilon=30.0, domain_size=1000)  # p = 1 - 1e-13
    assert isinstance(m, OptimizedLocalHashing)
    values = np.arange(1000)
    reports = m.perturb(values, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(reports["y"], bucket(values, reports["a"], reports["b"], m.g))
    assert reports.dtype.itemsize == 20 and local_hashing.REPORT_DTYPE.itemsize == 20


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 1.1, 2.0, 4.0, 10.0])
def test_olh_bucket_count(epsilon: float) -> None:
    m = ldpkit.mechanism("olh", epsilon=epsilon, domain_size=8)
    assert isinstance(m, OptimizedLocalHashing)
    target = math.exp(epsilon) + 1
    assert m.g in {max(2, math.floor(target)), math.ceil(target)}
    assert m.q == 1 / m.g
    assert m.p == pytest.approx(math.exp(epsilon) / (math.exp(epsilon) + m.g - 1))
    for other in {math.floor(target), math.ceil(target)} - {m.g, 0, 1}:
        alt = local_hashing._olh_variance(epsilon, other)
        assert m.variance(0.0) <= alt * (1 + 1e-12)


def test_olh_large_epsilon_caps_buckets() -> None:
    m = ldpkit.mechanism("olh", epsilon=50.0, domain_size=8)
    assert isinstance(m, OptimizedLocalHashing)
    assert m.g == 2**32
    reports = m.perturb(np.arange(8), rng=np.random.default_rng(0))
    assert m.check_reports(reports).all()


# --- subset selection -------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "d"), [(0.5, 16), (1.0, 100), (1.0, 1024), (3.0, 50)])
def test_ss_reports_have_exactly_k_bits(epsilon: float, d: int) -> None:
    m = ldpkit.mechanism("ss", epsilon=epsilon, domain_size=d)
    assert isinstance(m, SubsetSelection)
    rng = np.random.default_rng(d)
    values = rng.integers(0, d, 4000)
    reports = m.perturb(values, rng=rng)
    assert reports.shape == (4000, _bits.packed_size(d))
    np.testing.assert_array_equal(_bits.row_popcounts(reports), m.k)
    assert m.check_reports(reports).all()
    bits = _bits.unpack_rows(reports, d)
    inside = bits[np.arange(values.size), values]
    assert abs(inside.mean() - m.p) < 5 * math.sqrt(m.p * (1 - m.p) / values.size)


@pytest.mark.parametrize("d", [2, 3, 10, 64, 1024])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 2.5, 6.0])
def test_ss_subset_size(epsilon: float, d: int) -> None:
    m = ldpkit.mechanism("ss", epsilon=epsilon, domain_size=d)
    assert isinstance(m, SubsetSelection)
    target = d / (math.exp(epsilon) + 1)
    candidates = {min(d - 1, max(1, c)) for c in (math.floor(target), math.ceil(target))}
    assert m.k in candidates
    assert m.variance(0.0) == pytest.approx(subset_selection._variance_at_zero(epsilon, d, m.k))
    for k in candidates - {m.k}:  # the other of floor and ceil, when there is one
        assert m.variance(0.0) <= subset_selection._variance_at_zero(epsilon, d, k) * (1 + 1e-12)
    k = m.k
    p = k * math.exp(epsilon) / (k * math.exp(epsilon) + d - k)
    assert m.p == pytest.approx(p, rel=1e-12)
    assert m.q == pytest.approx(p * (k - 1) / (d - 1) + (1 - p) * k / (d - 1), rel=1e-12)


def test_ss_members_besides_x_are_uniform() -> None:
    d = 12
    m = ldpkit.mechanism("ss", epsilon=0.5, domain_size=d)
    assert isinstance(m, SubsetSelection)
    assert m.k >= 3
    rng = np.random.default_rng(8)
    n = 60_000
    values = np.full(n, 4)
    bits = _bits.unpack_rows(m.perturb(values, rng=rng), d)
    others = np.delete(bits, 4, axis=1).sum(axis=0)
    expected = np.full(d - 1, others.sum() / (d - 1))
    assert stats.chisquare(others, expected).pvalue > 1e-4


# --- unary encoding ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sue", "oue"])
@pytest.mark.parametrize("d", [2, 9, 1024, 1030])
def test_unary_reports(name: str, d: int) -> None:
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(d)
    values = rng.integers(0, d, 3000)
    reports = m.perturb(values, rng=rng)
    assert reports.shape == (3000, _bits.packed_size(d)) and reports.dtype == np.uint8
    assert m.report_dtype == np.dtype((np.uint8, (_bits.packed_size(d),)))
    assert m.check_reports(reports).all()
    bits = _bits.unpack_rows(reports, d)
    true_bit = bits[np.arange(values.size), values]
    assert abs(true_bit.mean() - m.p) < 5 * math.sqrt(m.p * (1 - m.p) / values.size)
    other = (bits.sum() - true_bit.sum()) / (values.size * (d - 1))
    assert abs(other - m.q) < 5 * math.sqrt(m.q * (1 - m.q) / (values.size * (d - 1)))


def test_unary_probabilities() -> None:
    eps = 1.3
    sue = ldpkit.mechanism("sue", epsilon=eps, domain_size=5)
    oue = ldpkit.mechanism("oue", epsilon=eps, domain_size=5)
    assert isinstance(sue, ldpkit.FrequencyOracle) and isinstance(oue, ldpkit.FrequencyOracle)
    assert sue.p == pytest.approx(math.exp(eps / 2) / (math.exp(eps / 2) + 1))
    assert sue.q == pytest.approx(1 - sue.p)
    assert oue.p == 0.5 and oue.q == pytest.approx(1 / (math.exp(eps) + 1))
    assert oue.variance(0.0) == pytest.approx(4 * math.exp(eps) / (math.exp(eps) - 1) ** 2)


def test_output_probabilities_refuse_huge_enumerations() -> None:
    with pytest.raises(ldpkit.ParameterError, match="domain_size"):
        ldpkit.mechanism("oue", epsilon=1.0, domain_size=40).output_probabilities(0)  # type: ignore[attr-defined]
    with pytest.raises(ldpkit.ParameterError, match="subsets"):
        ldpkit.mechanism("ss", epsilon=0.1, domain_size=64).output_probabilities(0)  # type: ignore[attr-defined]
    with pytest.raises(ldpkit.ParameterError, match="columns"):
        ldpkit.mechanism("hr", epsilon=1.0, domain_size=70000).output_probabilities(0)  # type: ignore[attr-defined]
    olh = ldpkit.mechanism("olh", epsilon=1.0, domain_size=8)
    with pytest.raises(ldpkit.ParameterError, match="hash key a"):
        olh.output_probabilities(0, a=-1, b=0)  # type: ignore[attr-defined]
    with pytest.raises(ldpkit.ReportError, match="outside the domain"):
        olh.output_probabilities(8, a=1, b=0)  # type: ignore[attr-defined]


# --- malformed reports ------------------------------------------------------------------


def bad_report_cases() -> list[tuple[str, int, Any]]:
    """(mechanism, domain size, function making a batch whose report 2 is bad)."""

    def set_padding(m: Any, r: np.ndarray) -> np.ndarray:
        r[2, -1] |= 0x80
        return r

    def ss_extra_bit(m: Any, r: np.ndarray) -> np.ndarray:
        bits = _bits.unpack_rows(r, m.domain_size)
        bits[2, np.argmin(bits[2])] = True
        return _bits.pack_rows(bits)

    def ss_missing_bit(m: Any, r: np.ndarray) -> np.ndarray:
        bits = _bits.unpack_rows(r, m.domain_size)
        bits[2, np.argmax(bits[2])] = False
        return _bits.pack_rows(bits)

    def olh_y(m: Any, r: np.ndarray) -> np.ndarray:
        r["y"][2] = m.g
        return r

    def hr_column(m: Any, r: np.ndarray) -> np.ndarray:
        r[2] = m.K
        return r

    return [
        ("sue", 10, set_padding),
        ("oue", 13, set_padding),
        ("ss", 10, set_padding),
        ("ss", 10, ss_extra_bit),
        ("ss", 16, ss_missing_bit),
        ("olh", 10, olh_y),
        ("hr", 10, hr_column),
        ("hr", 8, hr_column),
    ]


@pytest.mark.parametrize(("name", "d", "spoil"), bad_report_cases())
def test_bad_reports_are_flagged_by_index(name: str, d: int, spoil: Any) -> None:
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=d)
    reports = m.perturb(np.arange(5) % d, rng=np.random.default_rng(0))
    assert m.check_reports(reports).all()
    bad = spoil(m, reports.copy())
    assert m.check_reports(bad).tolist() == [True, True, False, True, True]
    with pytest.raises(ldpkit.ReportError, match=rf"report 2 is not a valid {name} report"):
        m.aggregate(bad)
    # The good ones still aggregate, and the rule is in the message.
    assert m.aggregate(np.delete(bad, 2, axis=0)).n == 4
    with pytest.raises(ldpkit.ReportError, match=re.escape(m.report_rule)):
        m.aggregate(bad)


@pytest.mark.parametrize("name", ["sue", "oue", "ss"])
def test_bitmap_reports_of_wrong_dtype_or_shape(name: str) -> None:
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=10)
    good = m.perturb(np.arange(4), rng=np.random.default_rng(0))
    for wrong in [
        good.astype(np.uint16),
        good.astype(np.float64),
        np.zeros((4, 3), dtype=np.uint8),
        np.zeros((4, 1), dtype=np.uint8),
        np.zeros((2, 2, 2), dtype=np.uint8),
        good.ravel(),
    ]:
        with pytest.raises(ldpkit.ReportError, match="shape"):
            m.check_reports(wrong)
        with pytest.raises(ldpkit.ReportError):
            m.aggregate(wrong)
    # One report alone (shape (nbytes,)) is a batch of one.
    assert m.check_reports(good[0]).tolist() == [True]


def test_olh_reports_of_wrong_dtype() -> None:
    m = ldpkit.mechanism("olh", epsilon=1.0, domain_size=10)
    good = m.perturb(np.arange(4), rng=np.random.default_rng(0))
    aligned = np.dtype([("a", "<u8"), ("b", "<u8"), ("y", "<u4")], align=True)
    for wrong in [
        good["y"],
        good.astype(aligned),
        np.zeros(4, dtype=[("a", "<u8"), ("b", "<u8"), ("y", "<u8")]),
        np.zeros((4, 20), dtype=np.uint8),
    ]:
        with pytest.raises(ldpkit.ReportError, match="dtype"):
            m.check_reports(wrong)
    # Raw wire bytes view back into reports.
    back = np.frombuffer(good.tobytes(), dtype=local_hashing.REPORT_DTYPE)
    assert m.aggregate(back) == m.aggregate(good)


def test_hr_reports_of_wrong_dtype() -> None:
    m = ldpkit.mechanism("hr", epsilon=1.0, domain_size=10)
    with pytest.raises(ldpkit.ReportError, match="dtype"):
        m.check_reports(np.array([0.5, 1.0]))
    with pytest.raises(ldpkit.ReportError):
        m.check_reports(np.array([-1, 2]))
    with pytest.raises(ldpkit.ReportError, match="1-D"):
        m.check_reports(np.zeros((2, 2), dtype=np.uint32))
    assert m.check_reports(np.array([0, 15, 16], dtype=np.uint32)).tolist() == [True, True, False]
    assert m.check_reports(np.array([0, 15, 16], dtype=np.uint8)).tolist() == [True, True, False]


@pytest.mark.parametrize("d", [5, 64])
def test_subset_selection_device_path_follows_p_and_q(d: int) -> None:
    """The few-values path (a device reporting) has the same law as the batch path."""
    m = ldpkit.mechanism("ss", epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(21)
    batches = 4000
    reports = np.concatenate([m.perturb(np.full(8, 2), rng=rng) for _ in range(batches)])
    n = len(reports)
    bits = np.unpackbits(reports, axis=1, bitorder="little")[:, :d].astype(bool)
    assert np.all(bits.sum(axis=1) == m.k)  # type: ignore[attr-defined]
    p_hat = bits[:, 2].mean()
    assert abs(p_hat - m.p) < 4.5 * np.sqrt(m.p * (1 - m.p) / n)  # type: ignore[attr-defined]
    others = np.delete(bits, 2, axis=1).mean(axis=0)
    q = m.q  # type: ignore[attr-defined]
    assert np.all(np.abs(others - q) < 4.5 * np.sqrt(q * (1 - q) / n))
