"""Exact random bit vectors, built 64 bits at a time: the samplers of SUE, OUE and SS.

A report of unary encoding (SUE, OUE) or subset selection (SS) is a d-bit vector. The old
samplers drew one 32-bit uniform per bit (d / 2 words a report); these draw a few 64-bit
words per 64 bits and keep every probability an exact dyadic rational.

Lanes and words
---------------
A report's d bits ("lanes") live in ``W = ceil(d / 64)`` 64-bit words: lane j is bit
``j % 64`` of word ``j // 64``. Read as little-endian bytes this is the wire layout
(``_bits``), so nothing is repacked. All randomness is consumed as raw 64-bit words from a
:data:`WordSource` (:func:`rng_words`: in production the AES-128-CTR keystream of a
:class:`~ldpkit.randomness.KeyedGenerator`; any fixed list of
words in a test). These rules are ldpkit's own: they give the laws of the portable rules
of ``ldpkit.portable`` (docs/protocol.md), not their bytes.

The samplers (each docstring gives its rule and the order of its draws):
:func:`threshold_lanes` (lanes 1 w.p. ``count / 2**64``), :func:`dense_lanes` (w.p.
``a / 2**m``), :func:`sparse_lanes` (an exact binomial count per block, then distinct
positions), combined for unary encoding by :func:`plan_unary` and :func:`unary_lanes`;
for subset selection, :func:`change_lanes` (uniform additions up to an exact count) and
:func:`distinct_lanes`, both on :func:`_candidate_lanes` (Lemire's exact rule).

Inside a batch every step draws, for all rows of the batch in order, before the next step
starts (:func:`change_lanes` draws a block of :data:`CHANGE_BLOCK` steps at once, step-major);
the mechanisms cut large inputs into batches of at most ``2**18`` words.
"""

from __future__ import annotations

import bisect
import functools
import math
import struct
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from . import _bits

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
WordSource = Callable[[int], U64]
"""``words(count)``: the next ``count`` raw 64-bit words of the random stream, as a fresh
array the caller may overwrite (:func:`dense_lanes` works in it)."""

MAX_DENSE_BITS = 8
"""Largest m (fair words per 64 lanes) the subset planner uses for its dense start."""

MAX_SPLIT_BITS = 8
"""Largest m of a dense part beside a sparse part (:func:`plan_unary`)."""

SPARSE_BLOCKS = (64, 128, 256, 512, 1024)
"""Block sizes the unary planner considers for its sparse part."""

FULL_ROUNDS = 7
"""Rounds of :func:`threshold_lanes` that draw a word for every word of the batch; after
about 7 rounds most words still have an undecided lane (a lane is undecided after r
rounds w.p. 2**-r), so drawing for all of them is cheaper than finding the others."""

# Planner's cost model (nanoseconds per report row, measured with production's AES
# keystream words, about 1.0 ns each, on the reference machine, medians of CPU time): a
# dense word about 2.0 ns (the raw word and its share of the bit operations);
# threshold_lanes about 28.5 ns per word of lanes (7.4 words and its compaction rounds);
# a sparse block's binomial count about 50 ns; a sparse lane about 9.5 ns per draw; a
# candidate of change_lanes about 10 ns. Only the choice of plan depends on these.
_NS_PER_DENSE_WORD = 2.0
_NS_PER_THRESHOLD_WORD = 28.5
_NS_PER_CANDIDATE = 10.0
_NS_PER_SPARSE_LANE = 9.5
_NS_PER_COUNT = 50.0

MAX_SPARSE_RATE = Fraction(1, 16)
"""Largest rate the planner gives the sparse part (so a block's count stays far below
its size and its distinct draws succeed quickly)."""

BLOCK = 1024
"""Lanes per binomial count of the sparse part: a d-bit vector is cut into blocks of this
many lanes (the last may be shorter), each with its own count, which keeps the exact CDF
tables small (integers of ``64 * BLOCK`` bits)."""

_POW2 = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))  # bit j's mask (a table
# lookup: numpy's scalar << array is several times slower than a gather)


def words_per_row(lanes: int) -> int:
    return (lanes + 63) // 64


def dense_lanes(words: WordSource, rows: int, width: int, bits: int, numerator: int) -> U64:
    """``rows x width`` words whose lanes are independently 1 w.p. ``numerator / 2**bits``.

    Draws ``bits`` arrays of ``rows * width`` words (in one run; see the module docstring). The
    comparison ``u < numerator`` runs most significant bit first over all lanes at once.
    """
    shape = (rows, width)
    drawn = words(bits * rows * width).reshape((bits, *shape))
    if numerator <= 0:
        return np.zeros(shape, dtype=np.uint64)
    if numerator >= 1 << bits:
        return np.full(shape, np.uint64(0xFFFFFFFFFFFFFFFF))
    # Each round's words are overwritten in place (a word source hands out fresh arrays):
    # no temporaries. Round 0 starts the comparison without an all-ones "tied" array, and
    # the last round does not update the ties (a lane still tied has u == numerator: not
    # less).
    less: U64 | None = None  # lanes with u < numerator decided so far (None: no lane yet)
    if (numerator >> (bits - 1)) & 1:
        less = np.invert(drawn[0])  # u's first bit 0 < numerator's 1
        equal = drawn[0]  # prefix equals numerator's
    else:
        equal = np.invert(drawn[0], out=drawn[0])
    for i in range(1, bits):
        r = drawn[i]
        last = i == bits - 1
        if (numerator >> (bits - 1 - i)) & 1:
            # numerator's bit is 1: u's bit 0 decides "less"; 1 keeps the tie.
            decided = np.bitwise_and(equal, np.invert(r, out=r), out=r)
            if not last:
                equal ^= decided  # (decided lies inside equal: equal & u's bit)
            if less is None:
                less = decided
            else:
                less |= decided
        elif not last:  # numerator's bit is 0: u's bit 1 decides "greater"; 0 keeps the tie
            equal &= np.invert(r, out=r)
    assert less is not None  # 0 < numerator: some bit of it is 1
    return less


def threshold_lanes(words: WordSource, rows: int, width: int, count: int) -> U64:
    """``rows x width`` words whose lanes are independently 1 w.p. exactly ``count / 2**64``.

    Lane j of a row owns a 64-bit value v, read most significant bit first from bit
    ``j % 64`` of successive words drawn for its word ``j // 64``; the lane is 1 iff
    ``v >= 2**64 - count``. The comparison stops for a lane at its first bit that
    differs from the bound, so words are drawn in rounds: in rounds 1 .. FULL_ROUNDS one
    word for every word of the batch (row-major); in later rounds one word for each word
    that still has an undecided lane, in the same order, until none is left (at most 64
    rounds; a lane equal to the bound in all 64 bits is 1). A lane is decided after 2 bits
    on average, a word after about 7 rounds; each lane reads only its own bit of each word,
    so the lanes are independent.
    """
    shape = (rows, width)
    if count <= 0:
        words(FULL_ROUNDS * rows * width)
        return np.zeros(shape, dtype=np.uint64)
    bound = (1 << 64) - count  # lane is 1 iff v >= bound
    n = rows * width
    greater = np.zeros(n, dtype=np.uint64)  # lanes decided 1 (v > bound) so far
    equal = np.full(n, np.uint64(0xFFFFFFFFFFFFFFFF))  # lanes whose bits so far equal the bound's
    taken = np.empty(n, dtype=np.uint64)
    for i in range(min(FULL_ROUNDS, 64)):
        r = words(n)
        _compare_round(bound, i, r, equal, greater, taken)
    index = np.flatnonzero(equal)
    eq, gt = equal[index], greater[index]
    for i in range(FULL_ROUNDS, 64):
        if index.size == 0:
            break
        r = words(index.size)
        _compare_round(bound, i, r, eq, gt, np.empty_like(r))
        alive = np.flatnonzero(eq)
        if alive.size < index.size:
            greater[index] = gt
            index, eq, gt = index[alive], eq[alive], gt[alive]
    greater[index] = gt | eq  # equal to the bound in all 64 bits: v == bound, so 1
    return greater.reshape(shape)


def _compare_round(bound: int, i: int, r: U64, equal: U64, greater: U64, taken: U64) -> None:
    """Round i (0 = most significant bit) of the lane-wise comparison ``v >= bound``."""
    if (bound >> (63 - i)) & 1:
        equal &= r  # the bound's bit is 1: v's bit 0 decides "less" (lane 0)
    else:
        np.bitwise_and(equal, r, out=taken)  # the bound's bit is 0: v's bit 1 decides "greater"
        greater |= taken
        equal ^= taken


def nearest_dyadic(target: float, bits: int, *, below: bool) -> int:
    """Numerator a of ``a / 2**bits``: the largest at most ``target`` (``below``), else nearest."""
    scaled = Fraction(target) * (1 << bits)
    value = math.floor(scaled) if below else round(scaled)
    return max(0, min(1 << bits, value))


@functools.lru_cache(maxsize=16)
def _cdf_numerators(trials: int, numerator: int) -> tuple[int, ...]:
    """``F(k) * 2**(64 trials)`` for k = 0 .. trials - 1, exactly (Python integers).

    ``F(k) = sum_{j <= k} C(n, j) c^j (2^64 - c)^(n - j) / 2^(64 n)``, the CDF of
    ``Binomial(n, c / 2**64)``; about 45 ms for n = 1024, once per (n, c).
    """
    c, rest = numerator, (1 << 64) - numerator
    term = rest**trials  # C(n, 0) c^0 rest^n
    total = 0
    out = []
    for k in range(trials):
        total += term
        out.append(total)
        term = term * (trials - k) * c // ((k + 1) * rest)  # exact: C(n, k+1) c^(k+1) ...
    return tuple(out)


@functools.lru_cache(maxsize=16)
def _prefix_list(trials: int, numerator: int) -> list[int]:
    return [int(v) for v in cdf_prefixes(trials, numerator)]


def cdf_prefixes(trials: int, numerator: int) -> U64:
    """The first 64 bits of each ``F(k)``: ``floor(2**64 F(k))``, k = 0 .. trials - 1."""
    return _count_tables(trials, numerator)[0]


@functools.lru_cache(maxsize=16)
def _count_tables(trials: int, numerator: int) -> tuple[U64, I64, npt.NDArray[np.bool_]]:
    """:func:`cdf_prefixes` (read-only), and for each value of a word's top 16 bits the
    number of prefixes below that range and whether none falls inside it (then every word
    in the range has that many prefixes below it: no search needed)."""
    shift = 64 * trials - 64
    prefixes = np.array([f >> shift for f in _cdf_numerators(trials, numerator)], np.uint64)
    prefixes.flags.writeable = False
    below = np.searchsorted(prefixes, np.arange(1 << 16, dtype=np.uint64) << np.uint64(48))
    settled = below == np.append(below[1:], trials)
    return prefixes, below.astype(np.int64), settled


def block_binomials(words: WordSource, rows: int, block_sizes: I64, numerator: int) -> I64:
    """Exact ``Binomial(size, numerator / 2**64)`` counts for each row and block.

    Inversion of the exact CDF: a uniform ``U = 0.w1 w2 ...`` made of fresh words gives
    ``K = #{k < size : F(k) <= U}``. One word per (row, block), row-major, decides K
    unless it equals the first 64 bits of some F(k) (probability below
    ``(size + 1) 2**-64``); such counts then draw further words, in the same order, until
    the comparison is decided. No rounding anywhere: K is exactly binomial.
    """
    blocks = block_sizes.size
    u = words(rows * blocks).reshape(rows, blocks)
    k = np.empty((rows, blocks), dtype=np.int64)
    tied = np.zeros((rows, blocks), dtype=np.bool_)
    for size in np.unique(block_sizes).tolist():
        cols = np.flatnonzero(block_sizes == size)
        prefixes, below, settled = _count_tables(size, numerator)
        sub = u[:, cols]
        top = (sub >> np.uint64(48)).astype(np.intp)
        found = below[top]  # prefixes below u: F(k) <= U (a table lookup, mostly)
        search = ~settled[top]
        if search.any():
            found[search] = np.searchsorted(prefixes, sub[search], side="left")
        k[:, cols] = found
        tied[:, cols] = (found < size) & (prefixes[np.minimum(found, size - 1)] == sub)
    for i, j in zip(*np.nonzero(tied), strict=True):
        k[i, j] = _resolve_tie(words, int(block_sizes[j]), numerator, int(u[i, j]), int(k[i, j]))
    return k


def _resolve_tie(words: WordSource, trials: int, numerator: int, first: int, k: int) -> int:
    """K when the first word equals the 64-bit prefix of F(k) (and maybe of F(k+1), ...)."""
    exact = _cdf_numerators(trials, numerator)
    total_bits = 64 * trials
    drawn = [first]
    while k < trials and (exact[k] >> (total_bits - 64)) == first:
        level = 1  # compare U with F(k), 64 bits at a time
        while True:
            if level * 64 >= total_bits:
                below = False  # U agrees with all of F(k)'s bits: U >= F(k)
                break
            if level == len(drawn):
                drawn.append(int(words(1)[0]))
            digit = (exact[k] >> (total_bits - 64 * (level + 1))) & 0xFFFFFFFFFFFFFFFF
            if drawn[level] != digit:
                below = drawn[level] < digit
                break
            level += 1
        if below:
            return k
        k += 1
    return k


def sparse_lanes(words: WordSource, rows: int, lanes: int, numerator: int, block: int) -> U64:
    """``rows x ceil(lanes / 64)`` words whose lanes are independently 1 w.p. ``numerator / 2**64``.

    The lanes are cut into blocks of ``block`` lanes (a multiple of 64, or all the lanes if
    fewer; the last block may be shorter). Each (row, block), row-major, gets an exact
    binomial count K (:func:`block_binomials`) and then K distinct uniform lanes: in each
    round every block not yet done draws its K candidates (blocks in order, from one run
    of values, :func:`_candidate_bits`), keeps them iff all are valid and distinct, and otherwise
    draws all K again in the next round. (Independent lanes of rate b are, in law, a
    ``Binomial(size, b)`` count per block and a uniform subset of the block of that size.)
    """
    width = words_per_row(lanes)
    block = min(block, 64 * width)
    blocks = -(-lanes // block)
    unit_width = block // 64
    sizes = np.minimum(block, lanes - block * np.arange(blocks, dtype=np.int64))
    counts = block_binomials(words, rows, sizes, numerator).reshape(-1)
    packed = np.zeros((rows * blocks, unit_width), dtype=np.uint64)
    flat = packed.reshape(-1)
    pending = np.flatnonzero(counts)
    ragged = bool(sizes[-1] != block)
    first = True
    while pending.size:
        need = counts[pending]
        owner = np.repeat(pending.astype(np.int32), need)  # (int32: less memory traffic)
        lane, valid = _candidate_lanes(words, sizes, owner % blocks if ragged else owner)
        bit = np.left_shift(_ones(owner.size), lane & 63)
        if valid is not None:
            bit *= valid
        # Distinct bits add like OR; a repeat carries and a void adds nothing, so a block
        # holds K set lanes iff its K draws were valid and distinct.
        np.add.at(flat, owner * np.int32(unit_width) + (lane >> 6).astype(np.int32), bit)
        if first:  # every block drew: count them all without gathering
            pending = np.flatnonzero(_bits.row_popcounts(packed) != counts)
            first = False
        else:
            pending = pending[_bits.row_popcounts(packed[pending]) != need]
        packed[pending] = 0
    return packed.reshape(rows, blocks * unit_width)[:, :width]


def unary_lanes(words: WordSource, rows: int, lanes: int, plan: UnaryPlan) -> U64:
    """``rows x ceil(lanes / 64)`` words, lanes independently 1 w.p. ``plan.probability()``.

    "threshold": :func:`threshold_lanes`. "or": :func:`dense_lanes` (rate ``a / 2**m``),
    then :func:`sparse_lanes` (rate ``c / 2**64``), ORed. "and": the same, the sparse
    lanes cleared from the dense ones. Bits beyond ``lanes`` are left as drawn.
    """
    width = words_per_row(lanes)
    if plan.kind == "threshold":
        return threshold_lanes(words, rows, width, plan.sparse)
    packed = dense_lanes(words, rows, width, plan.bits, plan.dense)
    if plan.sparse:
        sparse = sparse_lanes(words, rows, lanes, plan.sparse, plan.block)
        if plan.kind == "or":
            packed |= sparse
        else:
            packed &= ~sparse
    return packed


def distinct_lanes(
    words: WordSource, packed: U64, lanes: int, counts: I64, *, forbidden: I64 | None = None
) -> None:
    """Set ``counts[i]`` distinct uniform lanes among lanes ``0 .. lanes - 1`` of each row i
    (the rows start empty).

    In each round, every row not yet done draws ``counts[i]`` values (rows in order, from
    one run of words; :func:`_candidate_lanes`), maps them to lanes by Lemire's rule, and
    keeps them iff all are valid and distinct; otherwise it clears its row and draws all
    of them again in the next round. The kept tuple is uniform over tuples of distinct
    lanes, so the set is a uniform ``counts[i]``-subset. With ``forbidden``, a draw that
    includes lane ``forbidden[i]`` fails too: the set is then uniform among those without it.
    """
    width = packed.shape[1]
    flat = packed.reshape(-1)
    pending = np.flatnonzero(counts > 0)
    while pending.size:
        need = counts[pending]
        owner = np.repeat(pending, need)
        offset, bit = _candidate_bits(words, lanes, owner)
        offset += owner * width
        # Adding distinct bits is OR-ing them; a repeat carries, a void adds nothing, so
        # a row holds counts[i] bits iff its draws were valid and distinct.
        np.add.at(flat, offset, bit)
        bad = _bits.row_popcounts(packed[pending]) != need
        if forbidden is not None:
            f = forbidden[pending]
            bad |= (packed[pending, f >> 6] & _POW2[f & 63]) != 0
        pending = pending[bad]
        packed[pending] = 0


SMALL_BLOCK = 1 << 16
"""Blocks of at most this many lanes draw 16-bit candidate values, larger ones 32-bit."""


def value_bits(sizes: I64) -> int:
    """Bits of one candidate value for blocks of these sizes: 16 if all fit, else 32."""
    return 16 if not sizes.size or int(sizes.max()) <= SMALL_BLOCK else 32


def _candidate_lanes(words: WordSource, sizes: I64 | int, owner: Any) -> tuple[Any, Any]:
    """One uniform candidate lane for each entry of ``owner`` (a unit, ``sizes[owner]`` lanes;
    ``sizes`` may be one int for all).

    Draws ``owner.size`` values of :func:`value_bits` bits (lowest bits of each word first,
    one run of words). A b-bit value v is lane ``(v * size) >> b`` of its unit's block
    (Lemire's exact rule), or void when ``(v * size) mod 2**b < 2**b mod size`` (never for
    a power-of-two size). Returns the lanes (an unsigned array) and which are valid (a
    boolean array, None when all are).
    """
    if isinstance(sizes, int):
        size, bits = sizes, 16 if sizes <= SMALL_BLOCK else 32
    else:
        bits = value_bits(sizes)
        size = int(sizes[0]) if sizes.size and int(sizes.min()) == int(sizes.max()) else 0
    n = owner.size
    per_word = 64 // bits
    drawn = words((n + per_word - 1) // per_word)
    v: Any = np.ascontiguousarray(drawn, dtype="<u8").view("<u2" if bits == 16 else "<u4")[:n]
    if size and size & (size - 1) == 0:  # power of two: a shift, never void
        return v >> (bits - (size.bit_length() - 1)), None
    wide = np.uint32 if bits == 16 else np.uint64
    s: Any = wide(size) if size else np.asarray(sizes).astype(wide)[owner]
    t = v.astype(wide) * s
    valid = (t & wide((1 << bits) - 1)) >= wide(1 << bits) % s
    return t >> wide(bits), valid


def _candidate_bits(words: WordSource, sizes: I64 | int, owner: I64) -> tuple[I64, U64]:
    """:func:`_candidate_lanes` as each lane's word within its block and its bit (0: void)."""
    lane, valid = _candidate_lanes(words, sizes, owner)
    bit = np.left_shift(_ones(owner.size), lane & 63)  # (a shift of ones beats a lookup)
    if valid is not None:
        bit *= valid
    return (lane >> 6).astype(np.int64), bit


_ONES = np.ones(1 << 16, dtype=np.uint64)


def _ones(count: int) -> U64:
    global _ONES
    if _ONES.size < count:
        _ONES = np.ones(2 * count, dtype=np.uint64)
    return _ONES[:count]


CHANGE_BLOCK = 8
"""Steps of :func:`change_lanes` drawn at once: the rows still short draw this many
candidates each (step-major), and the rows done are dropped after each such block."""


def change_lanes(
    words: WordSource, packed: U64, lanes: int, target: I64, *, have: I64 | None = None
) -> None:
    """OR in uniform lanes until row i has ``target[i]`` lanes set (at least its count).

    ``packed`` is rows x W words (changed in place) of ``lanes`` lanes each; ``have`` is
    each row's count of set lanes if the caller knows it. The rows still short draw, in
    blocks of :data:`CHANGE_BLOCK` steps, one candidate each per step: a block's values
    are drawn at once, step-major (step s, row i is value ``s * A + i`` of the block, A
    the rows drawing; :func:`_candidate_lanes`, one run of values). A void candidate, one
    already in, and any candidate of a row already done change nothing. (To keep a lane
    out, set it first, so that it counts as in, and clear it after.) After each block the
    rows done stop drawing. With one candidate per row a step touches each word at most
    once, so it is a plain gather and scatter: no ``ufunc.at``, no repeats.
    """
    width = packed.shape[1]
    flat = packed.reshape(-1)
    short = target - (_bits.row_popcounts(packed) if have is None else have)
    active = np.flatnonzero(short > 0)
    # The narrowest type that holds every gap: the steps below are a few passes over it.
    most = int(short.max(initial=0))
    gap = short[active].astype(np.uint8 if most < 256 else np.uint16 if most < 65536 else np.int64)
    base = active * width
    # Every block reuses the first block's buffers (fresh large arrays cost page faults).
    room = CHANGE_BLOCK * active.size
    offset_buffer = np.empty(room, dtype=np.int64)
    bit_buffer = np.empty(room, dtype=np.uint64)
    position: Any = None  # (the candidates' dtype: uint16 up to 65536 lanes)
    current_buffer = np.empty(active.size, dtype=np.uint64)
    changed_buffer = np.empty(active.size, dtype=np.uint64)
    flag_buffer = np.empty(active.size, dtype=np.bool_)
    while active.size:
        count = active.size
        size = CHANGE_BLOCK * count
        lane, valid = _candidate_lanes(words, lanes, offset_buffer[:size])
        if lane.dtype == np.uint64:  # (32-bit values: lanes < 2**32; uint64 + int64 is float)
            lane = lane.view(np.int64)
        if position is None:
            position = np.empty(room, dtype=lane.dtype)
        part = position[:size]
        np.right_shift(lane, 6, out=part)
        offsets = offset_buffer[:size].reshape(CHANGE_BLOCK, count)
        np.add(part.reshape(CHANGE_BLOCK, count), base, out=offsets)
        np.bitwise_and(lane, 63, out=part)
        bits = bit_buffer[:size]
        shift = part.view(np.uint64) if part.dtype == np.int64 else part
        np.left_shift(_ones(size), shift, out=bits, casting="unsafe")
        if valid is not None:
            bits *= valid
        bits = bits.reshape(CHANGE_BLOCK, count)
        current, changed = current_buffer[:count], changed_buffer[:count]
        flag = flag_buffer[:count]
        for step in range(CHANGE_BLOCK):
            offset = offsets[step]
            np.take(flat, offset, out=current, mode="clip")  # (in range: faster than [])
            np.greater(gap, 0, out=flag)
            np.multiply(bits[step], flag, out=changed)
            changed |= current
            flat[offset] = changed
            np.not_equal(changed, current, out=flag)
            np.subtract(gap, flag, out=gap, casting="unsafe")
        keep = np.flatnonzero(gap)
        active, gap, base = active[keep], gap[keep], base[keep]


class UnaryPlan(NamedTuple):
    """How :func:`unary_lanes` draws lanes that are 1 w.p. q (see its docstring)."""

    kind: str  # "threshold", "or" or "and"
    bits: int  # m: fair words per 64 lanes of the dense part ("or", "and")
    dense: int  # a: the dense part's rate is a / 2**m
    sparse: int  # c: the threshold's or the sparse part's rate is c / 2**64
    block: int  # lanes per binomial count of the sparse part

    def probability(self) -> Fraction:
        """The realized probability q' of a lane, exactly."""
        rate = Fraction(self.sparse, 1 << 64)
        if self.kind == "threshold":
            return rate
        dense = Fraction(self.dense, 1 << self.bits)
        return dense + (1 - dense) * rate if self.kind == "or" else dense * (1 - rate)


def split_plan(probability: float, kind: str, bits: int, block: int) -> UnaryPlan | None:
    """The "or" or "and" plan with an m-bit dense part (None if its sparse rate would
    exceed :data:`MAX_SPARSE_RATE` or the dense part is empty for "and")."""
    q = Fraction(probability)
    if kind == "or":
        a = math.floor(q * (1 << bits))
        dense = Fraction(a, 1 << bits)
        rest = (q - dense) / (1 - dense)
        c = math.ceil(rest * (1 << 64))
    else:
        a = math.ceil(q * (1 << bits))
        if a == 0:
            return None
        dense = Fraction(a, 1 << bits)
        rest = 1 - q / dense
        c = math.floor(rest * (1 << 64))
    return None if rest > MAX_SPARSE_RATE else UnaryPlan(kind, bits, a, c, block)


def plan_unary(probability: float, lanes: int) -> UnaryPlan:
    """The cheapest exact plan (by the cost model above) for lanes 1 w.p. ``probability``.

    Every plan realizes ``q'`` with ``q <= q' < q + 2**-64``: the threshold ``c =
    ceil(2**64 q)``; "or" with ``a = floor(2**m q)`` and ``c = ceil(2**64 (q - A) / (1 -
    A))``, ``A = a / 2**m``; "and" with ``a = ceil(2**m q)`` and ``c = floor(2**64 (1 - q /
    A))``. Every bit of each part reads its own randomness and the parts are independent,
    so the lanes are too. The choice changes the draws, never the law beyond that.
    """
    q = Fraction(probability)
    width = words_per_row(lanes)
    lazy_count = min((1 << 64) - 1, math.ceil(q * (1 << 64)))
    best_cost = _NS_PER_THRESHOLD_WORD * width
    best = UnaryPlan("threshold", 0, 0, lazy_count, BLOCK)
    if q <= 0 or q >= 1:
        return best
    for m in range(MAX_SPLIT_BITS + 1):
        for kind in ("or", "and"):
            plan = split_plan(probability, kind, m, BLOCK)
            if plan is None:
                continue
            rate = plan.sparse / 2.0**64
            for size in SPARSE_BLOCKS:
                block = min(size, 64 * width)
                cost = _NS_PER_DENSE_WORD * m * width
                if plan.sparse:
                    per_block = block * rate
                    # A block draws all its lanes again unless they are distinct: about
                    # e^(K^2 / 2 size) tries.
                    tries = math.exp(min(per_block * per_block / (2 * block), 50.0))
                    blocks = -(-lanes // block)
                    cost += blocks * (_NS_PER_COUNT + _NS_PER_SPARSE_LANE * per_block * tries)
                if cost < best_cost:
                    best_cost, best = cost, plan._replace(block=block)
                if not plan.sparse:
                    break
    return best


class SubsetPlan(NamedTuple):
    """How subset selection draws its dense start (see :func:`plan_subset`)."""

    bits: int  # m: fair words per 64 lanes
    dense: int  # a: each lane of the start is set w.p. a / 2**m; 0: no start
    window: int  # G: a start is kept iff it lacks between 0 and G lanes


def plan_subset(size: int, lanes: int) -> SubsetPlan:
    """The dense start for a uniform ``size``-subset of ``lanes`` lanes.

    The start's rate ``a / 2**m`` is at most ``size / lanes``; the remaining lanes are
    added uniformly, one per row per step. A start that overshoots is drawn again, and so
    is one that lacks more than G lanes, ``G = ceil(size - mean + sd)`` of its count: the
    longest run of addition steps, which every row of a batch waits for, about halves,
    for about one start in six drawn again. ``a = 0`` means no start: all lanes drawn at
    once until distinct.
    """
    width = words_per_row(lanes)
    target = size / lanes
    cost = _NS_PER_SPARSE_LANE * size * math.exp(min(size * size / (2 * lanes), 50.0))
    best = (cost, SubsetPlan(0, 0, lanes))
    for m in range(1, MAX_DENSE_BITS + 1):
        a = nearest_dyadic(target, m, below=True)
        if a == 0:
            continue
        rate = a / (1 << m)
        mean, sd = lanes * rate, math.sqrt(lanes * rate * (1.0 - rate))
        if sd == 0.0:
            continue
        overshoot = 0.5 * math.erfc((size + 0.5 - mean) / (sd * math.sqrt(2.0)))
        if overshoot > 0.5:
            continue
        dense = _NS_PER_DENSE_WORD * m * width / (1.0 - overshoot)
        adds = (size - mean + 0.8 * sd) / max(1.0 - target, 1e-3)
        cost = dense + _NS_PER_CANDIDATE * adds
        if cost < best[0]:
            best = (cost, SubsetPlan(m, a, max(1, math.ceil(size - mean + sd))))
    return best[1]


def clear_padding(packed: U64, lanes: int) -> None:
    """Clear lanes ``lanes ..`` of each row (the last word's spare bits)."""
    spare = 64 * packed.shape[1] - lanes
    if spare:
        packed[:, -1] &= np.uint64((1 << (64 - spare)) - 1)


def set_lanes(packed: U64, lanes: I64, bits: npt.NDArray[np.bool_]) -> None:
    """Set lane ``lanes[i]`` of row i to ``bits[i]`` (``packed``: C-contiguous rows, as
    every sampler here makes them; a flat view of anything else would be a copy)."""
    if not packed.flags.c_contiguous:
        raise ValueError("set_lanes changes rows in place: they must be C-contiguous")
    flat = packed.reshape(-1)
    index = np.arange(0, flat.size, packed.shape[1]) + (lanes >> 6)
    mask = _POW2[lanes & 63]
    flat[index] = (flat[index] & ~mask) | (mask * bits)


def report_bytes_view(packed: U64, lanes: int) -> npt.NDArray[np.uint8]:
    """Rows of words as the wire's packed bytes, ``ceil(lanes / 8)`` per row, little end:
    a view of ``packed`` where it can be (copy it, or assign it into a buffer)."""
    nbytes = (lanes + 7) // 8
    as_bytes = np.ascontiguousarray(packed, dtype="<u8").view(np.uint8)
    return as_bytes.reshape(packed.shape[0], -1)[:, :nbytes]


# The same rules as above for a batch of one report: a device perturbs one value per call,
# where a dozen numpy calls per round would cost more than the arithmetic. Tests check that
# both paths give the same report from the same words.


class WordQueue:
    """Hands out a word source's words one run at a time, fetching ``block`` at once.

    The words are kept as their little-endian bytes: a run of them is one Python integer
    (:meth:`take_ints`, word i at bits 64 i ..) or a run of 16- or 32-bit values (:meth:`values`)
    with no list of Python integers in between. Words fetched but not handed out are
    discarded with the queue (a device uses a fresh generator for every report, so reading
    ahead changes nothing it sends).
    """

    __slots__ = ("_block", "_block_after", "_buffer", "_next", "_words")

    def __init__(self, words: WordSource, block: int = 256, first: int | None = None) -> None:
        self._words = words
        self._block = block if first is None else first  # the first fetch (see one_row_queue)
        self._buffer = b""
        self._next = 0  # byte offset of the next word
        self._block_after = block

    def _advance(self, count: int) -> int:
        """Make ``count`` words available; their byte offset (consumed)."""
        start = self._next
        stop = start + 8 * count
        if stop > len(self._buffer):
            rest = self._buffer[start:]
            more = self._words(max(self._block, count - len(rest) // 8))
            self._block = self._block_after
            self._buffer = rest + more.astype("<u8", copy=False).tobytes()
            start, stop = 0, 8 * count
        self._next = stop
        return start

    def take(self, count: int) -> list[int]:
        """The next ``count`` words."""
        start = self._advance(count)  # (first: it may replace the buffer)
        return list(struct.unpack_from(f"<{count}Q", self._buffer, start))

    def take_one(self) -> int:
        """The next word."""
        start = self._advance(1)
        return int.from_bytes(self._buffer[start : start + 8], "little")

    def take_ints(self, rounds: int, width: int) -> list[int]:
        """The next ``rounds`` runs of ``width`` words, each as one integer (word i of a
        run at bits 64 i .. 64 i + 63)."""
        start = self._advance(rounds * width)
        buffer, size = self._buffer, 8 * width
        if width == 1:
            return list(struct.unpack_from(f"<{rounds}Q", buffer, start))
        return [
            int.from_bytes(buffer[at : at + size], "little")
            for at in range(start, start + rounds * size, size)
        ]

    def values(self, count: int, bits: int) -> tuple[int, ...]:
        """``count`` values of ``bits`` (16 or 32) bits from the next whole words, lowest
        bits of each word first (the words' little-endian 16- or 32-bit pieces)."""
        per_word = 64 // bits
        start = self._advance((count + per_word - 1) // per_word)
        return struct.unpack_from(f"<{count}{'H' if bits == 16 else 'I'}", self._buffer, start)

    def source(self, count: int) -> U64:
        """This queue as a :data:`WordSource`."""
        return np.array(self.take(count), dtype=np.uint64)


def _join(words: list[int]) -> int:
    """Words as one integer, word i at bits 64 i .. 64 i + 63."""
    return int.from_bytes(struct.pack(f"<{len(words)}Q", *words), "little")


def _split(value: int, width: int) -> list[int]:
    return list(struct.unpack(f"<{width}Q", value.to_bytes(8 * width, "little")))


def threshold_row(queue: WordQueue, width: int, count: int) -> int:
    """:func:`threshold_lanes` for one row (the full rounds on the row as one integer)."""
    if count <= 0:
        queue.take(FULL_ROUNDS * width)
        return 0
    bound = (1 << 64) - count
    greater, equal = 0, (1 << (64 * width)) - 1
    for i, r in enumerate(queue.take_ints(FULL_ROUNDS, width)):
        if (bound >> (63 - i)) & 1:
            equal &= r
        else:
            taken = equal & r
            greater |= taken
            equal ^= taken
    if width == 1:  # (one word of lanes: the rounds below without the lists)
        for i in range(FULL_ROUNDS, 64):
            if not equal:
                break
            r = queue.take_one()
            if (bound >> (63 - i)) & 1:
                equal &= r
            else:
                taken = equal & r
                greater |= taken
                equal ^= taken
        return greater | equal
    more = _split(greater, width)
    eq = _split(equal, width)
    for i in range(FULL_ROUNDS, 64):
        live = [w for w in range(width) if eq[w]]
        if not live:
            break
        one = (bound >> (63 - i)) & 1
        for w, r in zip(live, queue.take(len(live)), strict=True):
            if one:
                eq[w] &= r
            else:
                taken = eq[w] & r
                more[w] |= taken
                eq[w] ^= taken
    return _join([g | e for g, e in zip(more, eq, strict=True)])


def dense_row(queue: WordQueue, width: int, bits: int, numerator: int) -> int:
    """:func:`dense_lanes` for one row (as one integer, lane j = bit j)."""
    if numerator <= 0 or numerator >= 1 << bits:
        queue.take(bits * width)
        return 0 if numerator <= 0 else (1 << (64 * width)) - 1
    whole = (1 << (64 * width)) - 1
    less, equal = 0, whole
    for i, r in enumerate(queue.take_ints(bits, width)):
        if (numerator >> (bits - 1 - i)) & 1:
            less |= equal & ~r & whole
            equal &= r
        else:
            equal &= ~r & whole
    return less


def _row_values(queue: WordQueue, count: int, bits: int) -> list[int]:
    """:func:`_candidate_lanes`'s ``count`` values of ``bits`` bits, lowest bits first."""
    return list(queue.values(count, bits))


def _row_lemire(values: list[int], size: int, bits: int) -> list[int | None]:
    """Lemire's rule on ``values`` for a block of ``size`` lanes (None: void)."""
    if size & (size - 1) == 0:  # power of two: a shift, never void
        shift = bits - (size.bit_length() - 1)
        return list(map(shift.__rrshift__, values))  # v >> shift, looped in C
    low, floor = (1 << bits) - 1, (1 << bits) % size
    return [None if (v * size) & low < floor else (v * size) >> bits for v in values]


def _row_lanes(queue: WordQueue, count: int, size: int) -> list[int | None]:
    """:func:`_candidate_lanes` for ``count`` candidates over one block of ``size`` lanes."""
    bits = 16 if size <= SMALL_BLOCK else 32
    return _row_lemire(_row_values(queue, count, bits), size, bits)


def _one_block_sparse_row(queue: WordQueue, lanes: int, numerator: int) -> int:
    """:func:`sparse_row` when the row is one block (every categorical domain up to the
    block size): the same words in the same order, without the per-block lists (a
    device's report at d = 1,024 spends a third of its perturbation there)."""
    u = queue.take_one()
    prefixes = _prefix_list(lanes, numerator)
    count = bisect.bisect_left(prefixes, u)
    if count < lanes and prefixes[count] == u:
        count = _resolve_tie(queue.source, lanes, numerator, u, count)
    if not count:
        return 0
    bits = 16 if lanes <= SMALL_BLOCK else 32
    while True:
        picked = _row_lemire(list(queue.values(count, bits)), lanes, bits)
        if None not in picked and len(set(picked)) == count:
            return sum(1 << lane for lane in picked if lane is not None)  # distinct lanes


def sparse_row(queue: WordQueue, lanes: int, numerator: int, block: int) -> int:
    """:func:`sparse_lanes` for one row (as one integer, lane j = bit j)."""
    width = words_per_row(lanes)
    block = min(block, 64 * width)
    if lanes <= block:
        return _one_block_sparse_row(queue, lanes, numerator)
    sizes = [min(block, lanes - start) for start in range(0, lanes, block)]
    counts = []
    for size, u in zip(sizes, queue.take(len(sizes)), strict=True):
        prefixes = _prefix_list(size, numerator)
        k = bisect.bisect_left(prefixes, u)
        if k < size and prefixes[k] == u:
            k = _resolve_tie(queue.source, size, numerator, u, k)
        counts.append(k)
    row = 0  # the row as one integer, lane j = bit j
    bits = 16 if max(sizes) <= SMALL_BLOCK else 32
    pending = [b for b, k in enumerate(counts) if k > 0]
    while pending:
        values = _row_values(queue, sum(counts[b] for b in pending), bits)
        failed = []
        at = 0
        for b in pending:
            mine = _row_lemire(values[at : at + counts[b]], sizes[b], bits)
            at += counts[b]
            if None in mine or len(set(mine)) < len(mine):
                failed.append(b)
                continue
            for lane in mine:
                assert lane is not None
                row |= 1 << (b * block + lane)
        pending = failed
    return row


def unary_row(queue: WordQueue, lanes: int, plan: UnaryPlan) -> int:
    """:func:`unary_lanes` for one row (as one integer, lane j = bit j)."""
    width = words_per_row(lanes)
    if plan.kind == "threshold":
        return threshold_row(queue, width, plan.sparse)
    row = dense_row(queue, width, plan.bits, plan.dense)
    if plan.sparse:
        sparse = sparse_row(queue, lanes, plan.sparse, plan.block)
        row = row | sparse if plan.kind == "or" else row & ~sparse
    return row


def distinct_row(queue: WordQueue, row: int, lanes: int, count: int, forbidden: int) -> int:
    """:func:`distinct_lanes` for one row with one block of all ``lanes`` lanes: ``row``
    with the lanes set."""
    while count:
        picked = _row_lanes(queue, count, lanes)
        if None in picked or forbidden in picked or len(set(picked)) < count:
            continue
        for lane in picked:
            assert lane is not None
            row |= 1 << lane
        break
    return row


def change_row(queue: WordQueue, row: int, lanes: int, target: int) -> int:
    """:func:`change_lanes` for one row (the same report from the same words: a block's
    values drawn at once, those after the row is done unused): ``row`` with the lanes
    added."""
    have = row.bit_count()
    while have < target:
        # As many blocks at once as the lanes missing would take if no candidate were void
        # or repeated: the same values, in order, as that many draws of one block (a block
        # is whole words), and the words after the row is done are never used.
        blocks = -(-(target - have) // CHANGE_BLOCK)
        for lane in _row_lanes(queue, blocks * CHANGE_BLOCK, lanes):
            if lane is None:
                continue
            mask = 1 << lane
            if not row & mask:
                row |= mask
                have += 1
                if have == target:
                    break
    return row


def finish_row(row: int, lanes: int, lane: int, bit: bool) -> npt.NDArray[np.uint8]:
    """Clear the padding, set ``lane`` to ``bit``, and return the report's bytes (1 x n)."""
    data = finish_row_bytes(row, lanes, lane, bit)
    return np.frombuffer(data, dtype=np.uint8).reshape(1, -1).copy()


def finish_row_bytes(row: int, lanes: int, lane: int, bit: bool) -> bytes:
    """:func:`finish_row`'s report, as the bytes that travel (``row``: lane j = bit j)."""
    row &= ((1 << lanes) - 1) ^ (1 << lane)  # the padding and the lane cleared
    return (row | (int(bit) << lane)).to_bytes((lanes + 7) // 8, "little")


class OneRow:
    """The one-value path of a bitmap mechanism whose report is one row of lanes: the
    class gives ``_one_row(value, queue)`` (the row, its lanes, the value's lane and its
    bit, before :func:`finish_row`), this gives the report from it."""

    domain_size: int  # the lanes (the mechanism's field)

    def _one_row(self, value: int, queue: WordQueue) -> tuple[int, int, int, bool]:
        raise NotImplementedError

    def perturb_one(self, value: int, queue: WordQueue) -> npt.NDArray[np.uint8]:
        """``perturb_words`` for a single value (same words, same report), faster."""
        return finish_row(*self._one_row(value, queue))

    def perturb_value(self, value: Any, rng: np.random.Generator) -> bytes:
        """:meth:`perturb_one`'s report as bytes (words in blocks, Python integers)."""
        return finish_row_bytes(*self._one_row(int(value), self.one_row_queue(rng)))

    def one_row_queue(self, rng: np.random.Generator) -> WordQueue:
        """A queue of ``rng``'s words for one report, whose first fetch holds what most
        reports take (about 8 words a word of lanes: 10 at d = 16, 100 at d = 1024; a fetch
        costs about a microsecond whatever its size up to a few hundred words)."""
        return WordQueue(_bits.rng_words(rng), first=8 * words_per_row(self.domain_size) + 24)
