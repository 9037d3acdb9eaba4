"""The word-wide samplers of SUE, OUE and SS (ldpkit.mechanisms._lanes), on their own.

Exactness is checked two ways: against slow per-lane references that follow the sampling
rules written in the docstrings, word for word, on fixed word streams; and statistically
(fixed seeds): per-bit marginals against the exact probability, independence of pairs of
bits, the law of the number of set bits, and uniformity of subsets.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import ldpkit
from ldpkit.mechanisms import _bits, _lanes

ALPHA = 1e-4  # p-value below which a (deterministic, seeded) goodness-of-fit test fails


class Stream:
    """A word source over a fixed list of words that counts what it hands out."""

    def __init__(self, words: npt.NDArray[np.uint64]) -> None:
        self.words = np.asarray(words, dtype=np.uint64)
        self.used = 0

    def __call__(self, count: int) -> npt.NDArray[np.uint64]:
        out = self.words[self.used : self.used + count]
        assert out.size == count, "the sampler drew more words than the stream holds"
        self.used += count
        return out.copy()


def random_stream(seed: int, size: int = 200_000) -> Stream:
    return Stream(np.random.default_rng(seed).integers(0, 2**64, size, dtype=np.uint64))


def lane_bits(packed: npt.NDArray[np.uint64], lanes: int) -> npt.NDArray[np.bool_]:
    """(rows, lanes) booleans from rows of 64-bit words (lane j = bit j % 64 of word j // 64)."""
    j = np.arange(lanes)
    return np.asarray((packed[:, j // 64] >> (j % 64).astype(np.uint64)) & np.uint64(1), bool)


# --- references that follow the docstrings ----------------------------------------------


def reference_threshold_lanes(
    stream: Stream, rows: int, width: int, count: int
) -> npt.NDArray[np.bool_]:
    """threshold_lanes as its docstring states it, one lane at a time."""
    bound = 2**64 - count
    state = {(r, w, j): "=" for r in range(rows) for w in range(width) for j in range(64)}
    value = dict.fromkeys(state, 0)
    for i in range(64):
        cells = [(r, w) for r in range(rows) for w in range(width)]
        if i >= _lanes.FULL_ROUNDS:
            cells = [(r, w) for r, w in cells if any(state[r, w, j] == "=" for j in range(64))]
            if not cells:
                break
        drawn = stream(len(cells))
        for (r, w), word in zip(cells, drawn.tolist(), strict=True):
            for j in range(64):
                if state[r, w, j] != "=":
                    continue
                bit = (word >> j) & 1
                value[r, w, j] = 2 * value[r, w, j] + bit
                target = (bound >> (63 - i)) & 1
                if bit != target:
                    state[r, w, j] = ">" if bit > target else "<"
    out = np.zeros((rows, width * 64), dtype=bool)
    for (r, w, j), s in state.items():
        out[r, 64 * w + j] = s in (">", "=")  # all 64 bits equal: v == bound, so v >= bound
    return out


def reference_values(stream: Stream, count: int, bits: int) -> list[int]:
    """count values of ``bits`` bits, the lowest bits of each word first."""
    per_word = 64 // bits
    words = stream(-(-count // per_word)).tolist()
    return [(w >> (bits * i)) % 2**bits for w in words for i in range(per_word)][:count]


def reference_lemire(value: int, size: int, bits: int) -> int | None:
    t = value * size
    return None if t % 2**bits < 2**bits % size else t >> bits


def reference_unary(m: Any, values: list[int], stream: Stream) -> npt.NDArray[np.uint8]:
    """SUE/OUE's rule (unary and _lanes docstrings) for one batch, lane by lane."""
    d, rows = m.domain_size, len(values)
    width = -(-d // 64)
    true_words = stream(rows).tolist()
    plan = m.sampling_plan
    assert plan.probability() >= Fraction(m.q)
    if plan.kind == "threshold":
        assert plan.sparse == math.ceil(Fraction(m.q) * 2**64)
        lanes = reference_threshold_lanes(stream, rows, width, plan.sparse)[:, :d]
    else:
        dense = [stream(rows * width).reshape(rows, width) for _ in range(plan.bits)]
        u = np.zeros((rows, 64 * width), dtype=np.int64)
        for words in dense:
            u = 2 * u + lane_bits(words, 64 * width)
        lanes = (u < plan.dense)[:, :d]
        c, block = plan.sparse, min(plan.block, 64 * width)
        if c:
            sparse = np.zeros((rows, d), dtype=bool)
            sizes = [min(block, d - start) for start in range(0, d, block)]
            units = [(r, i) for r in range(rows) for i in range(len(sizes))]
            counts = {}
            for unit, word in zip(units, stream(len(units)).tolist(), strict=True):
                n = sizes[unit[1]]
                cdf = 0
                k = 0
                for j in range(n):  # K = #{k : F(k) <= U}; no ties in these streams
                    cdf += math.comb(n, j) * c**j * (2**64 - c) ** (n - j)
                    assert cdf >> (64 * n - 64) != word
                    if cdf < word << (64 * n - 64):
                        k += 1
                counts[unit] = k
            pending = [u for u in units if counts[u] > 0]
            while pending:
                draws = reference_values(stream, sum(counts[u] for u in pending), 16)
                failed = []
                for r, i in pending:
                    mine, draws = draws[: counts[r, i]], draws[counts[r, i] :]
                    pos = [reference_lemire(v, sizes[i], 16) for v in mine]
                    if None in pos or len(set(pos)) < len(pos):
                        failed.append((r, i))
                        continue
                    for p in pos:
                        assert p is not None
                        sparse[r, i * block + p] = True
                pending = failed
            lanes = lanes | sparse if plan.kind == "or" else lanes & ~sparse
    p_threshold = _bits.threshold64_floor(m.p)
    for r, x in enumerate(values):
        lanes[r, x] = true_words[r] < p_threshold
    return _bits.pack_rows(lanes)


# --- threshold_lanes --------------------------------------------------------------------

COUNTS = {
    "oue eps=1": math.ceil(1 / (math.e + 1) * 2**64),
    "sue eps=4": math.ceil(1 / (math.exp(2) + 1) * 2**64),
    "one half": 2**63,
    "tiny": 1,
    "all but one": 2**64 - 1,
    "alternating": int("10" * 32, 2),
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_threshold_lanes_matches_reference_on_fixed_words(name: str) -> None:
    count = COUNTS[name]
    fast, slow = random_stream(1), random_stream(1)
    got = _lanes.threshold_lanes(fast, 3, 2, count)
    want = reference_threshold_lanes(slow, 3, 2, count)
    np.testing.assert_array_equal(lane_bits(got, 128), want)
    assert fast.used == slow.used, "the rule fixes how many words are drawn"


def test_threshold_lanes_equal_to_bound_is_one() -> None:
    # Every lane of word 0 reads v == bound (bits of the bound, round by round); of word 1,
    # v == bound - 1 (below: 0). The bound of count = 2**64 - 5 is 5 = 0b101.
    count = 2**64 - 5
    rounds = []
    for i in range(64):
        bit = (5 >> (63 - i)) & 1
        below = ((5 - 1) >> (63 - i)) & 1
        rounds.append([0xFFFFFFFFFFFFFFFF * bit, 0xFFFFFFFFFFFFFFFF * below])
    words = Stream(np.array(rounds, dtype=np.uint64).reshape(-1))
    got = lane_bits(_lanes.threshold_lanes(words, 1, 2, count), 128)
    assert got[0, :64].all() and not got[0, 64:].any()


@pytest.mark.parametrize("name", ["oue eps=1", "sue eps=4", "one half"])
def test_threshold_lanes_marginals_and_pairs(name: str) -> None:
    count = COUNTS[name]
    q = count / 2**64
    rows, width = 40_000, 2
    rng = np.random.default_rng(7)
    bits = lane_bits(_lanes.threshold_lanes(_bits.rng_words(rng), rows, width, count), 128)
    # Each lane is 1 w.p. q: within 5 binomial standard errors (128 lanes, fixed seed).
    z = (bits.mean(axis=0) - q) / math.sqrt(q * (1 - q) / rows)
    assert np.abs(z).max() < 5, z
    # Pairs: neighbours in a word, across the word boundary, far apart, and across words
    # at the same bit. Chi-square of the 2x2 table against independence with rate q.
    expected = rows * np.array([(1 - q) ** 2, q * (1 - q), q * (1 - q), q * q])
    for a, b in [(0, 1), (62, 63), (63, 64), (0, 63), (5, 69), (17, 100)]:
        cells = 2 * bits[:, a] + bits[:, b]
        observed = np.bincount(cells.astype(np.int64), minlength=4)
        assert stats.chisquare(observed, expected).pvalue > ALPHA, (a, b, observed)


@pytest.mark.parametrize("name", ["oue eps=1", "sue eps=4"])
def test_threshold_lanes_count_is_binomial(name: str) -> None:
    count = COUNTS[name]
    q = count / 2**64
    lanes, rows = 100, 30_000
    rng = np.random.default_rng(11)
    bits = lane_bits(_lanes.threshold_lanes(_bits.rng_words(rng), rows, 2, count), 128)
    ones = bits[:, :lanes].sum(axis=1)
    expected = rows * stats.binom.pmf(np.arange(lanes + 1), lanes, q)
    keep = expected >= 5  # pool the thin tails into their neighbours
    lo, hi = np.flatnonzero(keep)[[0, -1]]
    observed = np.bincount(ones, minlength=lanes + 1).astype(float)
    obs = np.concatenate([[observed[:lo].sum()], observed[lo : hi + 1], [observed[hi + 1 :].sum()]])
    exp = np.concatenate([[expected[:lo].sum()], expected[lo : hi + 1], [expected[hi + 1 :].sum()]])
    use = exp > 0
    assert stats.chisquare(obs[use], exp[use] * obs.sum() / exp[use].sum()).pvalue > ALPHA


def test_threshold_lanes_extremes() -> None:
    rng = np.random.default_rng(3)
    tiny = _lanes.threshold_lanes(_bits.rng_words(rng), 1000, 4, 1)  # 2**-64
    assert not tiny.any()
    almost = _lanes.threshold_lanes(_bits.rng_words(rng), 1000, 4, 2**64 - 1)
    assert (almost == np.uint64(2**64 - 1)).all()


# --- dense_lanes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bits", "numerator"), [(1, 1), (2, 1), (2, 2), (3, 3), (3, 4), (4, 10), (6, 17), (8, 255)]
)
def test_dense_lanes_rate_and_draws(bits: int, numerator: int) -> None:
    stream = random_stream(5, 400_000)
    rows, width = 3000, 2
    got = lane_bits(_lanes.dense_lanes(stream, rows, width, bits, numerator), 128)
    assert stream.used == bits * rows * width
    # Reference: lane value u from the m words, most significant first.
    words = stream.words[: bits * rows * width].reshape(bits, rows, width)
    u = np.zeros((rows, 128), dtype=np.int64)
    for i in range(bits):
        u = 2 * u + lane_bits(words[i], 128)
    np.testing.assert_array_equal(got, u < numerator)


# --- change_lanes and subset selection --------------------------------------------------


@pytest.mark.parametrize("start_rate", [(0, 0), (2, 3), (1, 1)])
def test_change_lanes_gives_uniform_subsets(start_rate: tuple[int, int]) -> None:
    """From any start with at most k' others, the others form a uniform k'-subset (lane x
    is kept out of the additions by counting it as in, as subset selection does; starts
    with too many are dropped, as subset selection draws them again)."""
    d, k, x, rows = 6, 2, 4, 90_000
    rng = np.random.default_rng(sum(start_rate))
    words = _bits.rng_words(rng)
    packed = _lanes.dense_lanes(words, rows, 1, *start_rate)
    _lanes.clear_padding(packed, d)
    xs = np.full(rows, x, dtype=np.int64)
    _lanes.set_lanes(packed, xs, np.ones(rows, dtype=bool))
    packed = packed[np.bitwise_count(packed[:, 0]) <= k + 1]
    _lanes.change_lanes(words, packed, d, np.full(packed.shape[0], k + 1))
    _lanes.set_lanes(packed, xs[: packed.shape[0]], np.zeros(packed.shape[0], dtype=bool))
    bits = lane_bits(packed, d)
    assert (bits.sum(axis=1) == k).all() and not bits[:, x].any()
    codes = (bits * (1 << np.arange(d))).sum(axis=1)
    subsets = [c for c in range(1 << d) if bin(c).count("1") == k and not (c >> x) & 1]
    observed = np.array([np.count_nonzero(codes == c) for c in subsets])
    assert observed.sum() == packed.shape[0] > 5_000
    assert stats.chisquare(observed).pvalue > ALPHA, observed


def _pack16(values: list[int]) -> npt.NDArray[np.uint64]:
    """16-bit values four to a word, lowest bits first (as candidates are read)."""
    assert len(values) % 4 == 0
    groups = [values[j : j + 4] for j in range(0, len(values), 4)]
    return np.array([sum(v << (16 * i) for i, v in enumerate(g)) for g in groups], np.uint64)


@pytest.mark.parametrize(
    ("goal", "expected_lanes"), [(4, [5, 7, 9]), (8, [5, 7, 9, 11, 12, 13, 40])]
)
def test_change_lanes_steps_on_fixed_words(goal: int, expected_lanes: list[int]) -> None:
    """One candidate per step, a block of CHANGE_BLOCK steps drawn at once; one already in
    changes nothing; the rest of a block is unused once the row is done; the batch and the
    one-row path agree."""
    assert _lanes.CHANGE_BLOCK == 8
    lanes = 64  # a 16-bit value v names lane v >> 10
    start = 1 << 62
    named = [5, 5, 62, 7, 9, 11, 12, 13, 40, 40, 41, 42, 43, 44, 45, 46]  # two blocks
    stream = _pack16([lane << 10 for lane in named])
    expected = start | sum(1 << lane for lane in expected_lanes)
    packed = np.array([[start]], dtype=np.uint64)
    _lanes.change_lanes(Stream(stream), packed, lanes, np.array([goal]))
    assert int(packed[0, 0]) == expected
    row = _lanes.change_row(_lanes.WordQueue(Stream(stream), block=1), start, lanes, goal)
    assert row == expected


def _lemire_value(lane: int, size: int) -> int:
    """The smallest 16-bit value that Lemire's rule maps to ``lane`` of ``size`` (valid)."""
    floor = 2**16 % size
    v = -(-(lane * 2**16 + floor) // size)
    assert reference_lemire(v, size, 16) == lane
    return v


@pytest.mark.parametrize("tie", [None, "below", "above"])
def test_one_block_sparse_row_on_fixed_words(tie: str | None) -> None:
    """A one-block sparse row (d = 100: Lemire's rule has void values) on fixed words: the
    count (also through a tie with a CDF prefix, decided by the next word), a draw with a
    void candidate and one with a repeat both drawn again, the same words as the batch
    path. Random words almost never give a void at these sizes (36 values in 65,536) nor a
    tie (2**-64), so the comparisons with random streams do not reach these branches."""
    d, numerator = 100, 2**60
    prefixes = [int(p) for p in _lanes.cdf_prefixes(d, numerator)]
    exact = _lanes._cdf_numerators(d, numerator)
    if tie is None:
        head, count = [prefixes[2] + 1], 3  # F(0), F(1), F(2) <= U < F(3)
    else:
        digit = (exact[2] >> (64 * d - 128)) & (2**64 - 1)  # F(2)'s second word
        assert 0 < digit < 2**64 - 1
        # U's first word is F(2)'s: its second decides whether F(2) <= U.
        head = [prefixes[2], digit - 1 if tie == "below" else digit + 1]
        count = 2 if tie == "below" else 3
    void = 0  # (0 * size) mod 2**16 = 0 < 2**16 mod 100: void
    assert reference_lemire(void, d, 16) is None
    lane = [_lemire_value(j, d) for j in range(d)]
    draws = [  # one word of four 16-bit values per draw (the fourth never read)
        [void, lane[5], lane[7], lane[1]],  # a void: drawn again
        [lane[5], lane[5], lane[9], lane[2]] if count == 3 else [lane[5], lane[5], 0, 0],
        [lane[5], lane[99], lane[7], lane[3]],  # distinct: kept
    ]
    words = np.array(head + [int(_pack16(v)[0]) for v in draws], dtype=np.uint64)
    expected = sum(1 << j for j in [5, 99, 7][:count])
    queue_stream, batch_stream = Stream(words), Stream(words)
    row = _lanes.sparse_row(_lanes.WordQueue(queue_stream, block=1), d, numerator, 1024)
    batch = _lanes.sparse_lanes(batch_stream, 1, d, numerator, 1024)
    assert row == expected
    assert int(batch[0, 0]) | int(batch[0, 1]) << 64 == expected
    assert queue_stream.used == batch_stream.used == words.size


def test_change_row_draws_several_blocks_on_fixed_words() -> None:
    """Ten lanes missing at d = 100: the one-row path draws two blocks at once; a void and
    a repeat change nothing, the row is done inside the second block (its rest unused), and
    the batch path reads the same words."""
    d, void = 100, 0
    assert reference_lemire(void, d, 16) is None
    named: list[int | None] = [None, 1, 2, 2, 3, 4, 5, 6, 7, 8, None, 9, 10, 11, 12, 13]
    values = [void if j is None else _lemire_value(j, d) for j in named]
    words = _pack16(values)
    expected = sum(1 << j for j in range(1, 11))
    queue_stream, batch_stream = Stream(words), Stream(words)
    row = _lanes.change_row(_lanes.WordQueue(queue_stream, block=1), 0, d, 10)
    packed = np.zeros((1, 2), dtype=np.uint64)
    _lanes.change_lanes(batch_stream, packed, d, np.array([10]))
    assert row == expected
    assert int(packed[0, 0]) | int(packed[0, 1]) << 64 == expected
    assert queue_stream.used == batch_stream.used == words.size


def test_change_lanes_rows_share_each_block_step_major() -> None:
    """Two rows: step s of a block gives row i value ``s * 2 + i``; a row done early
    leaves its later values unused while the other goes on."""
    lanes = 64
    # step:   0       1       2       3 ...
    values = [1, 2, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]  # the first block
    values += [20, 21, 22, 23, 24, 25, 26, 27]  # the second block: row 1 alone
    packed = np.zeros((2, 1), dtype=np.uint64)
    stream = Stream(_pack16([v << 10 for v in values]))
    _lanes.change_lanes(stream, packed, lanes, np.array([2, 10]))
    assert int(packed[0, 0]) == (1 << 1) | (1 << 4)  # 1, 1 (in), 4; then 6 .. 14 unused
    row1 = (2, 3, 5, 7, 9, 11, 13, 15, 20, 21)
    assert stream.used == 6  # two blocks of 16 values, then one of 8
    assert int(packed[1, 0]) == sum(1 << v for v in row1)


@pytest.mark.parametrize(
    ("epsilon", "d"), [(1.0, 40), (0.2, 30), (6.0, 100), (1.0, 1024), (1.0, 1000)]
)
def test_ss_counts_in_a_fixed_set_are_hypergeometric(epsilon: float, d: int) -> None:
    """(1, 1024) is the production shape: 16 words a row, a dense start and additions in
    blocks; (1, 1000) the same with padding and void candidates (Lemire's rule on 1000
    lanes); the others are 30, 40 (one word, dense start) and 100 (no start)."""
    m = ldpkit.mechanism("ss", epsilon=epsilon, domain_size=d)
    rows, x = 40_000, 3
    rng = np.random.default_rng(d)
    bits = _bits.unpack_rows(m.perturb(np.full(rows, x), rng=rng), d)
    inside = bits[:, x]
    assert abs(inside.mean() - m.p) < 5 * math.sqrt(m.p * (1 - m.p) / rows)
    assert (bits.sum(axis=1) == m.k).all()  # type: ignore[attr-defined]
    # Among reports without x, the number of members in a fixed set S of 7 other items
    # is hypergeometric: k draws from d - 1 items of which 7 are in S.
    others = bits[~inside]
    s = [0, 1, 2, 10, 11, d - 2, d - 1]
    k = m.k  # type: ignore[attr-defined]
    hits = others[:, s].sum(axis=1)
    pmf = stats.hypergeom.pmf(np.arange(8), d - 1, 7, k)
    expected = len(others) * pmf
    observed = np.bincount(hits, minlength=8)
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > ALPHA
    # And every other item is a member equally often. A member count is
    # Binomial(N, pi), pi = k / (d - 1), with covariance -N pi (1 - pi) / (d - 2) between
    # items (k fixed per report): the sum of squared standardized deviations is
    # (d - 1) / (d - 2) times a chi-square with d - 2 degrees of freedom.
    counts = np.delete(others.sum(axis=0), x)
    pi, n_others = k / (d - 1), len(others)
    spread = ((counts - n_others * pi) ** 2).sum() / (n_others * pi * (1 - pi))
    assert stats.chi2.sf(spread * (d - 2) / (d - 1), d - 2) > ALPHA


# --- the mechanisms' rules on fixed words -----------------------------------------------


@pytest.mark.parametrize("name", ["sue", "oue"])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
@pytest.mark.parametrize("d", [2, 9, 64, 70])
def test_unary_follows_its_written_rule(name: str, epsilon: float, d: int) -> None:
    m: Any = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    values = [0, d - 1, d // 2]
    fast, slow = random_stream(d), random_stream(d)
    got = m.perturb_words(np.array(values), fast)
    np.testing.assert_array_equal(got, reference_unary(m, values, slow))
    assert fast.used == slow.used


SPLITS = [
    ("oue", 1.0, "or", 2, 64, 150),
    ("sue", 4.0, "and", 3, 64, 130),
    ("oue", 4.0, "or", 0, 128, 200),
    ("oue", 1.0, "and", 5, 64, 64),
]


@pytest.mark.parametrize(("name", "epsilon", "kind", "bits", "block", "d"), SPLITS)
def test_split_plans_follow_their_written_rule(
    name: str, epsilon: float, kind: str, bits: int, block: int, d: int
) -> None:
    """Plans the planner may not pick at these sizes, forced: several blocks, a short last one."""
    m: Any = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    plan = _lanes.split_plan(m.q, kind, bits, block)
    assert plan is not None and plan.sparse
    m.__dict__["sampling_plan"] = plan
    values = [0, d - 1, d // 2, 7]
    fast, slow = random_stream(d + bits), random_stream(d + bits)
    got = m.perturb_words(np.array(values), fast)
    np.testing.assert_array_equal(got, reference_unary(m, values, slow))
    assert fast.used == slow.used
    for seed in range(4):  # the device's one-value path gives the batch rule
        batch = m.perturb_words(np.array([seed]), random_stream(seed, 20_000))
        one = m.perturb_one(seed, _lanes.WordQueue(random_stream(seed, 20_000)))
        np.testing.assert_array_equal(one, batch)


@pytest.mark.parametrize(("kind", "bits", "block"), [("or", 4, 64), ("and", 3, 128)])
def test_split_plans_marginals_and_pairs(kind: str, bits: int, block: int) -> None:
    q = 0.119  # "or" at m = 4 adds 6% of lanes; "and" at m = 3 clears 5% of the dense ones
    plan = _lanes.split_plan(q, kind, bits, block)
    assert plan is not None and plan.sparse
    assert Fraction(q) <= plan.probability() < Fraction(q) + Fraction(1, 2**63)
    rate = float(plan.probability())
    rows, lanes = 40_000, 150
    rng = np.random.default_rng(bits)
    bits_ = lane_bits(_lanes.unary_lanes(_bits.rng_words(rng), rows, lanes, plan), lanes)
    z = (bits_.mean(axis=0) - rate) / math.sqrt(rate * (1 - rate) / rows)
    assert np.abs(z).max() < 5, z
    expected = rows * np.array([(1 - rate) ** 2, rate * (1 - rate), rate * (1 - rate), rate**2])
    for a, b in [(0, 1), (63, 64), (5, 130), (127, 128), (140, 149)]:
        cells = 2 * bits_[:, a] + bits_[:, b]
        observed = np.bincount(cells.astype(np.int64), minlength=4)
        assert stats.chisquare(observed, expected).pvalue > ALPHA, (a, b, observed)
    ones = bits_.sum(axis=1)  # the count of set lanes is Binomial(lanes, rate)
    z_count = (ones.mean() - lanes * rate) / math.sqrt(lanes * rate * (1 - rate) / rows)
    assert abs(z_count) < 5
    assert abs(ones.var() / (lanes * rate * (1 - rate)) - 1) < 5 * math.sqrt(2 / rows)


@pytest.mark.parametrize("name", ["sue", "oue", "ss"])
def test_same_words_same_reports(name: str) -> None:
    m = ldpkit.mechanism(name, epsilon=2.0, domain_size=1024)
    values = np.random.default_rng(1).integers(0, 1024, 50)
    first = m.perturb_words(values, random_stream(4))  # type: ignore[attr-defined]
    again = m.perturb_words(values, random_stream(4))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(first, again)
    one = m.perturb(values[0], rng=np.random.Generator(np.random.Philox(5)))
    assert one.shape == (128,) and bool(m.check_reports(one[None, :])[0])


# --- extreme parameters ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sue", "oue", "ss"])
@pytest.mark.parametrize("epsilon", [1e-9, 40.0])
def test_extreme_epsilon(name: str, epsilon: float) -> None:
    d = 64
    m = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    rows = 20_000
    rng = np.random.default_rng(2)
    values = rng.integers(0, d, rows)
    reports = m.perturb(values, rng=rng)
    assert m.check_reports(reports).all()
    bits = _bits.unpack_rows(reports, d)
    true_bit = bits[np.arange(rows), values]
    other = (bits.sum() - true_bit.sum()) / (rows * (d - 1))
    assert abs(true_bit.mean() - m.p) < 5 * math.sqrt(m.p * (1 - m.p) / rows) + 1e-12
    assert abs(other - m.q) < 5 * math.sqrt(m.q * (1 - m.q) / (rows * (d - 1))) + 1e-12


@pytest.mark.parametrize("name", ["sue", "oue", "ss"])
def test_huge_domain(name: str) -> None:
    d = 2**20 + 3  # ragged last word
    m = ldpkit.mechanism(name, epsilon=1.0, domain_size=d)
    values = np.array([0, d - 1, 12345])
    reports = m.perturb(values, rng=np.random.default_rng(6))
    assert reports.shape == (3, _bits.packed_size(d))
    assert m.check_reports(reports).all()
    counts = _bits.row_popcounts(reports)
    expected = (d - 1) * m.q + m.p  # SS: exactly k; SUE/OUE: within 6 sd of the mean
    sd = math.sqrt(d * m.q * (1 - m.q))
    assert np.all(np.abs(counts - expected) < 6 * sd + 1)


def test_realized_probabilities_round_towards_privacy() -> None:
    for eps in [1e-9, 0.3, 1.0, 4.0, 20.0]:
        for name in ["sue", "oue"]:
            m: Any = ldpkit.mechanism(name, epsilon=eps, domain_size=10)
            p_real, q_real = m.realized_probabilities
            assert p_real <= m.p and q_real >= m.q
            assert m.p - p_real < 2**-60 + m.p * 2**-52 and q_real - m.q < 2**-60 + m.q * 2**-52
            ratio = p_real * (1 - q_real) / ((1 - p_real) * q_real)
            assert ratio <= math.exp(eps) * (1 + 1e-12)


# --- exact binomial counts and distinct lanes --------------------------------------------


def binomial_counts(words: Any, trials: int, numerator: int, count: int) -> npt.NDArray[np.int64]:
    return _lanes.block_binomials(words, count, np.array([trials]), numerator)[:, 0]


@pytest.mark.parametrize(("trials", "numerator"), [(1024, 465876736539456854), (70, 2**62), (3, 1)])
def test_block_binomials_follow_the_binomial_law(trials: int, numerator: int) -> None:
    b = numerator / 2**64
    rows = 40_000
    counts = binomial_counts(
        _bits.rng_words(np.random.default_rng(trials)), trials, numerator, rows
    )
    pmf = stats.binom.pmf(np.arange(trials + 1), trials, b)
    expected = rows * pmf
    observed = np.bincount(counts, minlength=trials + 1).astype(float)
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 1e-9:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    if exp.size > 1:
        assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > ALPHA


def test_block_binomials_break_ties_exactly() -> None:
    trials, numerator = 8, 465876736539456855  # Binomial(8, about 0.025)
    exact = _lanes._cdf_numerators(trials, numerator)
    prefixes = _lanes.cdf_prefixes(trials, numerator)
    k = 3
    first = int(prefixes[k])
    digit = (exact[k] >> (64 * trials - 128)) & (2**64 - 1)
    assert 0 < digit < 2**64 - 1
    for second, want in [(digit - 1, k), (digit + 1, k + 1)]:
        stream = Stream(np.array([first, second], dtype=np.uint64))
        got = binomial_counts(stream, trials, numerator, 1)
        assert int(got[0]) == want and stream.used == 2
    # A word strictly between prefixes needs no second word.
    stream = Stream(np.array([first + 1], dtype=np.uint64))
    assert int(binomial_counts(stream, trials, numerator, 1)[0]) == k + 1


def test_block_binomials_lookup_agrees_with_a_search() -> None:
    """The top-16-bit table gives the same counts as a search of the prefixes, also for
    words next to a prefix and at the ends of the range."""
    trials, numerator = 1024, 331787012026708160
    prefixes = _lanes.cdf_prefixes(trials, numerator).astype(object)
    near = [int(p) + d for p in prefixes[::7] for d in (-1, 1) if 0 <= int(p) + d < 2**64]
    ends = [0, 1, 2**48 - 1, 2**48, 2**64 - 1]
    rand = np.random.default_rng(5).integers(0, 2**64, 20_000, dtype=np.uint64).tolist()
    exact = set(prefixes.tolist())  # a word equal to a prefix draws more words (tested above)
    words = np.array([w for w in near + ends + rand if w not in exact], dtype=np.uint64)
    got = binomial_counts(Stream(words), trials, numerator, words.size)
    want = np.searchsorted(_lanes.cdf_prefixes(trials, numerator), words, side="left")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("size", [6, 8])
def test_distinct_lanes_gives_uniform_subsets(size: int) -> None:
    rows, count = 30_000, 2
    packed = np.zeros((rows, 1), dtype=np.uint64)
    words = _bits.rng_words(np.random.default_rng(size))
    _lanes.distinct_lanes(words, packed, size, np.full(rows, count))
    bits = lane_bits(packed, 64)
    assert (bits.sum(axis=1) == count).all() and not bits[:, size:].any()
    codes = (bits[:, :size] * (1 << np.arange(size))).sum(axis=1)
    subsets = [c for c in range(1 << size) if bin(c).count("1") == count]
    observed = np.array([np.count_nonzero(codes == c) for c in subsets])
    assert stats.chisquare(observed).pvalue > ALPHA, observed


# --- the device's path: one value in Python integers ---------------------------------------


@pytest.mark.parametrize("name", ["sue", "oue", "ss"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 9.0])
@pytest.mark.parametrize("d", [2, 16, 100, 1024, 3000])
def test_one_value_path_gives_the_batch_rule(name: str, epsilon: float, d: int) -> None:
    m: Any = ldpkit.mechanism(name, epsilon=epsilon, domain_size=d)
    for seed in range(12):
        x = (seed * 7919) % d
        batch = m.perturb_words(np.array([x]), random_stream(seed, 20_000))
        one = m.perturb_one(x, _lanes.WordQueue(random_stream(seed, 20_000)))
        np.testing.assert_array_equal(one, batch)
    # And perturb() of a scalar takes that path.
    report = m.perturb(3 % d, rng=np.random.Generator(np.random.Philox(1)))
    assert bool(m.check_reports(report[None, :])[0])


@pytest.mark.parametrize(("block", "first"), [(1, None), (3, None), (256, None), (256, 2), (3, 40)])
def test_word_queue_hands_out_the_stream_in_order(block: int, first: int | None) -> None:
    """Every way of taking words (a list, one word, rows as integers, 16- and 32-bit values
    of whole words) reads the next words of the stream, across refills of any size."""
    words = np.random.default_rng(5).integers(0, 2**64, 2000, dtype=np.uint64)
    expected = [int(w) for w in words]
    queue = _lanes.WordQueue(Stream(words), block=block, first=first)
    at = 0
    for step in range(60):
        count = 1 + step % 7
        got = expected[at : at + count]
        kind = step % 5
        if kind == 0:
            assert queue.take(count) == got
        elif kind == 1:
            assert queue.take_one() == got[0]
            count = 1
        elif kind == 2:  # as rows of `width` words (one integer each), or single words
            rounds, width = (1, count) if step % 2 else (count, 1)
            rows = [got[r * width : (r + 1) * width] for r in range(rounds)]
            joined = [sum(w << (64 * i) for i, w in enumerate(row)) for row in rows]
            assert queue.take_ints(rounds, width) == joined
        else:
            bits = 16 if kind == 3 else 32
            values = count * (64 // bits) - step % (64 // bits)  # may end mid-word
            pieces = [(w >> (bits * i)) & ((1 << bits) - 1) for w in got for i in range(64 // bits)]
            assert list(queue.values(values, bits)) == pieces[:values]
            count = -(-values // (64 // bits))
        at += count
    assert queue.take_one() == expected[at]
