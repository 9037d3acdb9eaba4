"""Exact random bit vectors, built 64 bits at a time: the samplers of SUE, OUE and SS.

A report of unary encoding (SUE, OUE) or subset selection (SS) is a d-bit vector. The old
samplers drew one 32-bit uniform per bit (d uniforms a report); these draw about seven
64-bit words per 64 bits and keep every probability an exact dyadic rational.

Lanes and words
---------------
A report's d bits ("lanes") live in ``W = ceil(d / 64)`` 64-bit words: lane j is bit
``j % 64`` of word ``j // 64``. Read as little-endian bytes this is the wire layout
(``_bits``), so nothing is repacked. All randomness is consumed as raw 64-bit words from a
:data:`WordSource` (``rng.bit_generator.random_raw`` in production; any fixed list of
words in a test vector). Where a word is split into two 32-bit values, the low half
comes first.

Independent lanes with probability ``count / 2**64`` (:func:`threshold_lanes`)
----------------------------------------------------------------------------
Each lane compares its own 64-bit uniform v with a bound, most significant bit first,
one bit per round, each round's bits coming from one fresh word per word of lanes. A lane
is decided at the first bit where v differs from the bound (after 2 bits on average); a
word stops drawing once its 64 lanes are decided (after about 7 rounds on average, the
maximum of 64 geometric variables). Each lane reads only its own bit of each word, so
the lanes are independent, and each is 1 with probability exactly ``count / 2**64``.

A fixed dyadic rate ``a / 2**m`` (:func:`dense_lanes`)
-----------------------------------------------------
The same comparison cut to m bits and evaluated for every lane: m words per 64 lanes.

Uniform subsets of exact size (:func:`change_lanes`)
----------------------------------------------------
Subset selection needs a set of exactly k' lanes among the d - 1 lanes other than the
true item, uniform over all such sets. Any procedure whose law is unchanged by permuting
those lanes and that stops at exactly k' lanes gives that law. It starts from
:func:`dense_lanes` (rate near k' / d), clears the true lane and the padding, and then
adds (OR) or removes (AND-NOT) uniform candidates in rounds, as many per round as the
count is off, until the count is k'. A candidate is uniform over the d lanes by Lemire's
exact rule on a 32-bit value; one that is void, repeated, already in (when adding) or the
true lane changes nothing and is made up in the next round.

Inside a batch every step draws, for all rows of the batch in order, before the next step
starts; the mechanisms cut large inputs into batches of at most ``2**18`` words.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
WordSource = Callable[[int], U64]
"""``words(count)``: the next ``count`` raw 64-bit words of the random stream."""

MAX_DENSE_BITS = 8
"""Largest m (fair words per 64 lanes) the subset planner uses for its dense start."""

FULL_ROUNDS = 7
"""Rounds of :func:`threshold_lanes` that draw a word for every word of the batch; after
about 7 rounds most words still have an undecided lane (a lane is undecided after r
rounds w.p. 2**-r), so drawing for all of them is cheaper than finding the others."""

# Planner's cost model (nanoseconds, measured on the reference machine): a dense round
# costs about one raw word (4.3 ns) plus a few word operations per 64 lanes; a candidate
# of change_lanes about 40 ns. Only the choice of m depends on these.
_NS_PER_DENSE_WORD = 5.3
_NS_PER_CANDIDATE = 40.0
# Candidates applied one slot at a time above this many per round (numpy's ufunc.at is
# slow per element but has no per-slot overhead).
_SLOT_LOOP_ABOVE = 2048

_MASK32 = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)
_SHIFT32 = np.uint64(32)


def rng_words(rng: np.random.Generator) -> WordSource:
    """The raw 64-bit words of ``rng``'s bit generator (fast, exact)."""
    raw = rng.bit_generator.random_raw

    def words(count: int) -> U64:
        return np.asarray(raw(count), dtype=np.uint64)

    return words


def words_per_row(lanes: int) -> int:
    return (lanes + 63) // 64


# --- the dense part ---------------------------------------------------------------------


def dense_lanes(words: WordSource, rows: int, width: int, bits: int, numerator: int) -> U64:
    """``rows x width`` words whose lanes are independently 1 w.p. ``numerator / 2**bits``.

    Draws ``bits`` arrays of ``rows * width`` words (see the module docstring). The
    comparison ``u < numerator`` runs most significant bit first over all lanes at once.
    """
    shape = (rows, width)
    if numerator <= 0:
        words(bits * rows * width)  # the rule draws them all the same
        return np.zeros(shape, dtype=np.uint64)
    if numerator >= 1 << bits:
        words(bits * rows * width)
        return np.full(shape, np.uint64(0xFFFFFFFFFFFFFFFF))
    less = np.zeros(shape, dtype=np.uint64)  # lanes with u < numerator decided so far
    equal = np.full(shape, np.uint64(0xFFFFFFFFFFFFFFFF))  # lanes whose prefix equals it
    for i in range(bits):
        r = words(rows * width).reshape(shape)
        if (numerator >> (bits - 1 - i)) & 1:
            # numerator's bit is 1: u's bit 0 decides "less"; 1 keeps the tie.
            less |= equal & ~r
            equal &= r
        else:
            equal &= ~r
    return less


def threshold_lanes(words: WordSource, rows: int, width: int, count: int) -> U64:
    """``rows x width`` words whose lanes are independently 1 w.p. exactly ``count / 2**64``.

    Lane j of a row owns a 64-bit value v, read most significant bit first from bit
    ``j % 64`` of successive words drawn for its word ``j // 64``; the lane is 1 iff
    ``v >= 2**64 - count``. The comparison stops for a lane at its first bit that
    differs from the bound, so words are drawn in rounds: in rounds 1 .. FULL_ROUNDS one
    word for every word of the batch (row-major); in later rounds one word for each word
    that still has an undecided lane, in the same order, until none is left (at most 64
    rounds; a lane equal to the bound in all 64 bits is 1).
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


# --- adding and removing uniform lanes --------------------------------------------------


def _halves(words: WordSource, count: int) -> U64:
    """``count`` 32-bit values from ``ceil(count / 2)`` words, low half first."""
    w = words((count + 1) // 2)
    out = np.empty(2 * w.size, dtype=np.uint64)
    out[0::2] = w & _MASK32
    out[1::2] = w >> _SHIFT32
    return out[:count]


def change_lanes(
    words: WordSource,
    packed: U64,
    rows: I64,
    starts: I64,
    sizes: I64,
    target: I64,
    *,
    remove: bool = False,
    forbidden: I64 | None = None,
) -> None:
    """Add (OR) or remove (AND-NOT) uniform lanes until each unit has ``target`` lanes set.

    A unit is the block of lanes ``starts[u] .. starts[u] + sizes[u] - 1`` of row
    ``rows[u]`` of ``packed`` (rows x W words, changed in place); a block starts on a word
    boundary and blocks of one row do not share a word. ``target[u]`` is the number of set
    lanes the block must end with (at least its current count when adding, at most when
    removing). Lane ``forbidden[rows[u]]`` (if given) is cleared after every round, so it
    never counts. Draws per round: for each unit still off target, in unit order, as many
    32-bit values as it is off, all from one run of words (:func:`_halves`); value v is
    lane ``(v * size) >> 32`` of the block, or void when ``(v * size) mod 2**32`` is below
    ``2**32 mod size`` (Lemire's exact rule; never void for a power-of-two size).
    """
    width = packed.shape[1]
    flat = packed.reshape(-1)
    base = rows * (64 * width) + starts  # global lane index of each block's lane 0
    sizes_u = sizes.astype(np.uint64)
    limits = np.uint64(1 << 32) % sizes_u
    same = bool(np.all(sizes == sizes[0])) if sizes.size else True
    pow2_shift = None
    if same and sizes.size and int(sizes[0]) & (int(sizes[0]) - 1) == 0:
        pow2_shift = np.uint64(32 - (int(sizes[0]).bit_length() - 1))
    forbid_lane = None if forbidden is None else rows * (64 * width) + forbidden[rows]
    have = _block_counts(packed, rows, starts, sizes)
    gap = (have - target) if remove else (target - have)
    active = np.flatnonzero(gap > 0)
    need = gap[active]
    while active.size:
        total = int(need.sum())
        values = _halves(words, total)
        owner = np.repeat(active, need)
        if pow2_shift is not None:
            lane = base[owner] + (values >> pow2_shift).astype(np.int64)
            bit = _ONE << (lane & 63).astype(np.uint64)
        else:
            t = values * sizes_u[owner]
            lane = base[owner] + (t >> _SHIFT32).astype(np.int64)
            ok = (t & _MASK32) >= limits[owner]
            bit = (_ONE << (lane & 63).astype(np.uint64)) * ok.astype(np.uint64)
        _apply(flat, lane >> 6, bit, need, remove)
        if forbid_lane is not None:
            f = forbid_lane[active]
            flat[f >> 6] &= ~(_ONE << (f & 63).astype(np.uint64))
        have = _block_counts(packed, rows[active], starts[active], sizes[active])
        gap = (have - target[active]) if remove else (target[active] - have)
        keep = gap > 0
        active, need = active[keep], gap[keep]


def _apply(flat: U64, widx: I64, bit: U64, per_unit: I64, remove: bool) -> None:
    """OR (or AND-NOT) ``bit`` into ``flat[widx]``; entries of one unit may share a word.

    The entries come unit by unit (``per_unit[i]`` for the i-th unit), and entries of
    different units never share a word. Small batches use numpy's unbuffered
    ``ufunc.at``; large ones loop over "slots" (the s-th entry of every unit at once),
    within which no two entries share a word.
    """
    if widx.size <= _SLOT_LOOP_ABOVE:
        if remove:
            np.bitwise_and.at(flat, widx, ~bit)
        else:
            np.bitwise_or.at(flat, widx, bit)
        return
    top = int(per_unit.max())
    offsets = np.cumsum(per_unit) - per_unit
    key = (top - per_unit).astype(np.int16 if top < 1 << 15 else np.int64)
    order = np.argsort(key, kind="stable")  # most entries first (radix sort for int16)
    first = offsets[order]
    # with_more[s]: units with more than s entries, a prefix of `order`.
    with_more = np.cumsum(np.bincount(key, minlength=top)[:top])
    for s in range(top):
        idx = first[: int(with_more[top - 1 - s])] + s
        w = widx[idx]
        if remove:
            flat[w] &= ~bit[idx]
        else:
            flat[w] |= bit[idx]


def _block_counts(packed: U64, rows: I64, starts: I64, sizes: I64) -> I64:
    """Set lanes in each unit's block."""
    width = packed.shape[1]
    if starts.size and int(starts.max()) == 0 and int(sizes.min()) > 64 * (width - 1):
        # One block per row: the whole row.
        return np.asarray(np.bitwise_count(packed[rows]).sum(axis=1, dtype=np.int64))
    counts = np.bitwise_count(packed).astype(np.int64)
    cum = np.concatenate([np.zeros((counts.shape[0], 1), np.int64), counts.cumsum(axis=1)], axis=1)
    return np.asarray(cum[rows, (starts + sizes + 63) >> 6] - cum[rows, starts >> 6])


# --- plans ------------------------------------------------------------------------------


def plan_subset(size: int, lanes: int) -> tuple[int, int]:
    """``(m, a)`` of the dense start for a uniform ``size``-subset of ``lanes`` lanes."""
    width = words_per_row(lanes)
    target = size / lanes
    best: tuple[float, int, int] | None = None
    for m in range(MAX_DENSE_BITS + 1):
        a = nearest_dyadic(target, m, below=False)
        rate = a / (1 << m)
        sd = math.sqrt(lanes * rate * (1.0 - rate))
        fixes = abs(size - lanes * rate) + 0.8 * sd
        # Adding accepts a candidate w.p. about 1 - target; removing, about target.
        accept = max(1.0 - target if lanes * rate <= size else target, 1e-3)
        cost = _NS_PER_DENSE_WORD * m * width + _NS_PER_CANDIDATE * fixes / accept
        if best is None or cost < best[0]:
            best = (cost, m, a)
    assert best is not None
    return best[1], best[2]


def clear_padding(packed: U64, lanes: int) -> None:
    """Clear lanes ``lanes ..`` of each row (the last word's spare bits)."""
    spare = 64 * packed.shape[1] - lanes
    if spare:
        packed[:, -1] &= np.uint64((1 << (64 - spare)) - 1)


def set_lanes(packed: U64, lanes: I64, bits: npt.NDArray[np.bool_]) -> None:
    """Set lane ``lanes[i]`` of row i to ``bits[i]``."""
    rows = np.arange(packed.shape[0])
    word = lanes >> 6
    mask = _ONE << (lanes & 63).astype(np.uint64)
    packed[rows, word] = (packed[rows, word] & ~mask) | (mask * bits.astype(np.uint64))


def to_report_bytes(packed: U64, lanes: int) -> npt.NDArray[np.uint8]:
    """Rows of words as the wire's packed bytes: ``ceil(lanes / 8)`` per row, little end."""
    nbytes = (lanes + 7) // 8
    as_bytes = np.ascontiguousarray(packed, dtype="<u8").view(np.uint8)
    return np.ascontiguousarray(as_bytes.reshape(packed.shape[0], -1)[:, :nbytes])
