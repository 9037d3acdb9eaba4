"""Open-domain strings: the most frequent strings, found without a list of candidates.

Prefix extension over sketches (``prefix_sketch``)
--------------------------------------------------
A string ``x`` of ``m <= M`` bytes (UTF-8 for text; ``M = max_length``) becomes its *key*,
``M + 1`` bytes: the length ``m``, then the bytes of ``x``, then zeros. Every device
reports once, to one of ``M + 1`` *sketches* chosen at random and independently of ``x``:

- sketch ``t`` in ``1 .. M`` (a *prefix level*) sees the key cut after byte
  ``c = ceil(t m / M)`` (bytes ``c + 1 ..`` zeroed): the length and the first ``c`` bytes
  of ``x`` (the ``"scaled"`` cut; the first protocol's ``"prefix"`` cut keeps ``t`` bytes,
  see :meth:`PrefixSketch.kept_bytes`), so every level works on a short string's search;
- sketch ``0`` (the *estimation* sketch) sees the whole key.

Within the sketch the device picks one of its public hash functions (*rows*) uniformly:
``R`` per prefix level, ``R_E`` (more, see below) in the estimation sketch. It hashes its (cut) key
into ``g`` buckets and sends the bucket through g-ary randomized response: optimized local
hashing (Wang et al. 2017) with a finite, public hash family, so that the collector keeps
only the count of every (sketch, row, bucket) cell: an aggregate of ``(R_E + M R) g``
sums, whatever n. The collector then walks the prefix tree level by level
(as PEM, Wang et al. 2021, but from the sketches and not from raw reports) by prefix
length: at step ``j`` it extends the kept prefixes by every byte, estimates each child
(length L, j bytes) from every level that cuts length-L strings after j bytes, pooled,
and keeps the best by z; a child whose length byte says it is complete is a *finished
string*. The finished strings that stand out, in the walk's levels and the estimation
sketch pooled (under the ``"scaled"`` cut; the walk's levels alone under the first rule),
are *found*; their frequencies, and those of any string an analyst names, come from the
estimation sketch, whose devices took no part in the walk (they join only the test of a
complete string, so the winner's curse of the search does not reach the estimates).
A found string is *listed* in the answer when the estimation sketch confirms it above
the answer's threshold (Benjamini-Hochberg at ``LIST_FDR``; docs/statistics.md), with the
evidence it was found on (``evidence_z``). Clients send text (``text=True``, the
default): the walk never extends a prefix that cannot complete to valid UTF-8 of its
length, so only strings a client could send are listed.

Collisions of the finite hash family are not re-randomized per user as in OLH: a heavy
string shifts the count of every string sharing its bucket in a row. The decoder
(:mod:`._string_decoder`) removes the heavy strings' expected contributions (a small
linear solve over them), measures the variance of what remains (the tail's collisions
plus the oracle's noise) on decoy keys that no one holds, and adds to each string the
spread its own collisions with heavy strings bring, so standard errors include both.
For one hash family the tail's collisions are a *fixed* offset per string: the
estimation sketch has more rows than a prefix level (:data:`ESTIMATION_CELLS`) so that
the intervals cover for the family a deployment uses, not only on average over families.

Hash family (protocol v1)
-------------------------
Any client must reproduce this. Arithmetic is on unsigned 64-bit integers mod 2^64.

1. The key of ``x`` is zero-padded to ``W = ceil((M + 1) / 4)`` little-endian 32-bit
   words ``w_0 .. w_{W-1}``.
2. The hash keys come from SplitMix64 seeded with ``seed``: its i-th output (i = 0, 1,
   ...) is ``mix(seed + (i + 1) * 0x9E3779B97F4A7C15)`` with ``mix(z)``: ``z ^= z >> 30;
   z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31``. For
   *global row* ``G = 0 .. R_E + M R - 1`` in order, the next output is ``b[G]`` and the
   following ``W`` are ``a[G, 0 .. W-1]``. The estimation sketch (``s = 0``) owns global
   rows ``0 .. R_E - 1``; prefix level ``s >= 1`` owns ``R_E + (s - 1) R .. R_E + s R - 1``
   (its row ``j`` is global row ``R_E + (s - 1) R + j``).
3. ``h = ((b + sum_i a_i w_i) mod 2^64) >> 32`` (vector multiply-shift, strongly
   universal from 32-bit words to 32-bit values: Thorup 2015) and the bucket is
   ``(h * g) >> 32`` (Lemire's range reduction, as in OLH).
4. Sketch ``s`` is chosen with probability ``weight_s / sum(weight)``: weight
   ``estimation_weight`` for ``s = 0`` and 1 for each prefix level; the row uniformly
   among the sketch's rows (``R_E`` for ``s = 0``, ``R`` otherwise).
   With probability ``p = e^eps / (e^eps + g - 1)`` the true bucket is reported, else one
   of the other ``g - 1`` uniformly.

Wire format
-----------
A report is one little-endian uint32, the *cell* ``G g + y`` with ``G`` the global row;
it is well-formed iff it is below ``(R_E + M R) g``. The collector's aggregate is the
count of every cell.

Privacy: ``(s, G)`` is drawn independently of ``x``, and given them ``y`` is g-ary
randomized response on a bucket of ``x``: for any two strings and any cell the
probabilities differ by a factor of at most ``p / ((1 - p) / (g - 1)) = e^eps``. So
the whole string, length included, is eps-LDP (docs/privacy.md).

References
----------
T. Wang, N. Li, S. Jha, "Locally differentially private heavy hitter identification",
IEEE TDSC 18(2), 2021 (PEM).

T. Wang, J. Blocki, N. Li, S. Jha, "Locally differentially private protocols for
frequency estimation", USENIX Security 2017 (OLH).

R. Bassily, K. Nissim, U. Stemmer, A. Thakurta, "Practical locally private heavy
hitters", NeurIPS 2017 (TreeHist); Apple Differential Privacy Team, "Learning with
privacy at scale", 2017 (count-mean sketch, sequence fragment puzzles).

M. Thorup, "High speed hashing for integers and strings", arXiv:1504.06804 (vector
multiply-shift); S. Vigna, "An experimental exploration of Marsaglia's xorshift
generators, scrambled", ACM TOMS 2016 (SplitMix64).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from numbers import Integral
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .. import screening
from ..aggregate import Aggregate
from ..errors import ParameterError, ReportError
from ..heavy_hitters import HeavyHitters, oracle_variance
from ..randomness import resolve_rng
from ..screening import Finding
from . import _bits, _portable
from ._conformance import chi2, rr_probabilities
from ._portable import Derived, Words
from ._utf8 import valid_utf8
from .base import BoolArray, FloatArray, LawTest, Mechanism, PlanCase, Reports
from .local_hashing import optimal_buckets

REPORT_DTYPE = np.dtype("<u4")
"""One report: the cell ``global_row * g + bucket``."""

MAX_LENGTH = 64
"""Longest ``max_length`` accepted: every byte is a level, so cost and noise grow with it."""
MAX_K = 1000
MAX_BUCKETS = 4096
"""Beyond eps ~ 8.3 the OLH optimum exceeds this; the oracle's noise is then negligible."""
TARGET_CELLS = 1 << 12
"""Cells ``R g`` aimed at per sketch; rows are a power of two in [MIN_ROWS, MAX_ROWS].

Decoding costs R lookups per candidate; after the heavy strings' collisions are removed
what the tail's collisions add is far below the oracle's noise already at R = 16 (the
decoder measures it), so R stays small."""
MIN_ROWS = 16
MAX_ROWS = 64
ESTIMATION_CELLS = 1 << 15
"""Cells ``R_E g`` aimed at in the estimation sketch (``R_E`` a power of two, at least 4 R).

For one hash family the collisions of the strings not removed (the tail) shift each
string's estimate by a fixed offset of variance ~ (sum of the tail's f^2) / (R_E g); at
n = 10^6 with R_E = R it reached 0.5-1.4 standard errors and some strings' 95% intervals
covered 80% for that family (docs/statistics.md). Only found strings and named ones are
estimated there, so more rows cost sums, not decoding time."""
MAX_ESTIMATION_ROWS = 2048
DEFAULT_ESTIMATION_SHARE = 0.25
"""About this fraction of devices report to the estimation sketch (see statistics.md)."""

_U32 = np.uint64(32)
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15

CUTS = ("prefix", "scaled")
"""Cut rules of the prefix levels: level t keeps ``t`` bytes of the string (``"prefix"``, the
first protocol) or ``ceil(t m / M)`` of a string of m bytes (``"scaled"``, the default)."""


def _sketch_name(k: int) -> str:
    return "the estimation sketch is chosen" if k == 0 else f"prefix level {k} is chosen"


def splitmix64(seed: int, count: int) -> npt.NDArray[np.uint64]:
    """The first ``count`` outputs of SplitMix64 seeded with ``seed`` (protocol v1)."""
    i = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed & _MASK64) + i * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return np.asarray(z ^ (z >> np.uint64(31)))


def default_rows(g: int) -> int:
    """Rows R: the power of two nearest below ``TARGET_CELLS / g``, within [16, 64]."""
    target = max(1, TARGET_CELLS // g)
    return min(MAX_ROWS, max(MIN_ROWS, 1 << (target.bit_length() - 1)))


def default_estimation_rows(g: int, rows: int) -> int:
    """``R_E``: the power of two >= ``ESTIMATION_CELLS / g``, in [4 rows, MAX_ESTIMATION_ROWS]."""
    target = 1 << max(0, math.ceil(math.log2(ESTIMATION_CELLS / g)))
    return min(MAX_ESTIMATION_ROWS, max(4 * rows, target))


def encode_strings(values: Any, max_length: int) -> tuple[npt.NDArray[np.uint8], Any]:
    """Keys ``[length, bytes..., 0...]`` (n, max_length + 1) of strings or bytes.

    ``str`` is encoded as UTF-8; ``bytes`` are taken as they are. A numpy ``U`` or ``S`` array works
    too, but numpy drops trailing NUL characters from its strings: pass a list to keep them.
    """
    array = _string_array(values)
    n = array.shape[0]
    width = max_length + 1
    if array.dtype.kind == "U":
        try:
            array = np.char.encode(array, "utf-8")
        except UnicodeEncodeError as exc:
            raise ReportError(f"a value cannot be encoded as UTF-8: {exc}") from None
    if array.dtype.kind == "S":
        return _fixed_width_keys(array, max_length), array
    if array.dtype.kind != "O":
        raise ReportError(
            f"string values must be str or bytes, got an array of dtype {array.dtype}"
        )
    encoded = _encoded(array)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    _check_lengths(lengths, max_length, array)
    keys = np.zeros((n, width), dtype=np.uint8)
    keys[:, 0] = lengths
    if n:
        flat = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        # byte j of value i goes to keys[i, 1 + j]: its offset in the joined bytes is
        # starts[i] + j, so the flat index in keys is that plus (i width + 1 - starts[i])
        starts = np.cumsum(lengths) - lengths
        shift = np.arange(n, dtype=np.int64) * width + 1 - starts
        keys.reshape(-1)[np.arange(flat.size) + np.repeat(shift, lengths)] = flat
    return keys, array


def _keys(values: Any, max_length: int) -> npt.NDArray[np.uint8]:
    """The keys of strings (:func:`encode_strings`; a function: results are pickled)."""
    return encode_strings(values, max_length)[0]


def _string_array(values: Any) -> npt.NDArray[Any]:
    """The values as a 1-D array (a string or bytes: one value)."""
    array = values
    if isinstance(values, (str, bytes, bytearray)):
        array = np.array([values], dtype=object)
    elif not isinstance(values, np.ndarray):
        array = np.array(list(values), dtype=object) if values is not None else None
    if not isinstance(array, np.ndarray) or array.ndim != 1:
        raise ReportError("string values must be a string, bytes, or a 1-D sequence of them")
    return array


def _fixed_width_keys(array: npt.NDArray[Any], max_length: int) -> npt.NDArray[np.uint8]:
    """The keys of a numpy ``S`` array (its strings end at their first trailing NUL)."""
    n = array.shape[0]
    lengths = np.char.str_len(array).astype(np.int64)
    raw = np.ascontiguousarray(array).view(np.uint8).reshape(n, array.dtype.itemsize)
    _check_lengths(lengths, max_length, array)
    keys = np.zeros((n, max_length + 1), dtype=np.uint8)
    take = min(max_length, raw.shape[1])
    keys[:, 1 : 1 + take] = raw[:, :take]
    keys[:, 0] = lengths
    return keys


def _encoded(array: npt.NDArray[Any]) -> list[bytes]:
    """The bytes of each value of an object array (str as UTF-8), or a ReportError.

    All-bytes and all-str arrays (the usual batch) are converted by C-level ``map``; anything else,
    or a str that is not valid Unicode, goes value by value, which also names the offending index.
    """
    kinds = set(map(type, array))
    if kinds <= {bytes}:
        return list(array)
    if kinds <= {str}:
        try:
            return list(map(str.encode, array))
        except UnicodeEncodeError:
            pass  # the loop below names the value
    encoded: list[bytes] = []
    for i, v in enumerate(array):
        if isinstance(v, str):
            try:
                encoded.append(v.encode("utf-8"))
            except UnicodeEncodeError as exc:
                raise ReportError(f"value at index {i} cannot be encoded as UTF-8: {exc}") from None
        elif isinstance(v, (bytes, bytearray)):
            encoded.append(bytes(v))
        else:
            raise ReportError(f"value {v!r} at index {i} is not a string (str or bytes)")
    return encoded


def _check_lengths(lengths: npt.NDArray[np.int64], max_length: int, values: Any) -> None:
    too_long = lengths > max_length
    if bool(np.any(too_long)):
        i = int(np.argmax(too_long))
        shown = values[i]
        if isinstance(shown, bytes | np.bytes_) and len(shown) > 40:
            shown = bytes(shown[:40]) + b"..."
        elif isinstance(shown, str) and len(shown) > 40:
            shown = shown[:40] + "..."
        raise ReportError(
            f"value {shown!r} at index {i} is {int(lengths[i])} bytes long (UTF-8); "
            f"this metric takes strings of at most max_length = {max_length} bytes"
        )


def key_words(keys: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """Keys as little-endian 32-bit words (zero-padded), widened to uint64."""
    n, width = keys.shape
    nwords = -(-width // 4)
    padded = np.zeros((n, nwords * 4), dtype=np.uint8)
    padded[:, :width] = keys
    return padded.view("<u4").astype(np.uint64)


@dataclass(frozen=True, kw_only=True)
class PrefixSketch(Mechanism):
    """Heavy hitters over open-domain strings: prefix extension over per-level sketches.

    See the module docstring for the design, the hash family and the wire format.

    Parameters
    ----------
    epsilon : float
        The privacy parameter of the whole report, > 0.
    max_length : int
        Longest string in bytes (UTF-8), 1 .. 64. Longer strings are refused.
    k : int
        How many heavy hitters to report (decoding only: the reports do not depend on it).
    seed : int
        Seed of the public hash family, in [0, 2^64).
    estimation_share : float
        About this fraction of devices report to the estimation sketch, in (0, 1).
    text : bool
        The strings are text (the default, as the strings kind and every client send
        them): :meth:`perturb` refuses bytes that are not valid UTF-8 and the decoder
        lists only valid UTF-8, pruning during the walk every prefix that cannot complete
        to valid UTF-8 of its length. ``False`` takes any bytes (decoding only: the
        reports do not depend on it).
    """

    name: ClassVar[str] = "prefix_sketch"
    kind: ClassVar[str] = "strings"
    report_dtype = REPORT_DTYPE
    # Strings shorter than max_length, so that the prefix levels' cut (ceil(t m / M) bytes)
    # differs from the first rule's (t bytes) at several levels: "été" (5 bytes) at 4 of 8.
    conformance_cases: ClassVar[tuple[PlanCase, ...]] = (
        PlanCase(
            "prefix-sketch",
            {"kind": "strings", "max_length": 8, "k": 5, "epsilon": 4.0},
            ("été", "ab", "x"),
        ),
        # A seed above 2^32 (a client that ignores the seed, or keeps 32 bits of it, fails).
        PlanCase(
            "prefix-sketch-seeded",
            {"kind": "strings", "max_length": 8, "k": 5, "epsilon": 4.0, "seed": 2**52 + 12345},
            ("été", "ab", "x"),
        ),
    )

    max_length: int
    k: int = 20
    seed: int = 0
    estimation_share: float = DEFAULT_ESTIMATION_SHARE
    cut: str = "scaled"
    text: bool = True
    g: int = field(init=False)
    rows: int = field(init=False)
    estimation_rows: int = field(init=False)
    estimation_weight: int = field(init=False)
    p: float = field(init=False)
    q: float = field(init=False)

    def __post_init__(self) -> None:
        self._check_epsilon()
        checks: tuple[tuple[str, object, int, int], ...] = (
            ("max_length", self.max_length, 1, MAX_LENGTH),
            ("k", self.k, 1, MAX_K),
            ("seed", self.seed, 0, _MASK64),
        )
        for label, value, lo, hi in checks:
            if (
                isinstance(value, bool)
                or not isinstance(value, Integral)
                or not lo <= int(value) <= hi
            ):
                raise ParameterError(f"{label} must be an integer in [{lo}, {hi}], got {value!r}")
            object.__setattr__(self, label, int(value))
        if not isinstance(self.text, bool):
            raise ParameterError(f"text must be True or False, got {self.text!r}")
        if self.cut not in CUTS:
            raise ParameterError(f"cut must be one of {', '.join(CUTS)}, got {self.cut!r}")
        share = self.estimation_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
            raise ParameterError(f"estimation_share must be a number in (0, 1), got {share!r}")
        g = min(MAX_BUCKETS, optimal_buckets(self.epsilon))  # OLH's optimum, g ~ e^eps + 1
        self._set(g=g, rows=default_rows(g))
        self._set(estimation_rows=default_estimation_rows(g, self.rows))
        self._set(estimation_weight=max(1, round(share * self.max_length / (1.0 - share))))
        self._set(p=1.0 / (1.0 + (g - 1) * math.exp(-self.epsilon)), q=1.0 / g)

    @property
    def sketches(self) -> int:
        """Number of sketches: the estimation sketch and one per prefix level."""
        return self.max_length + 1

    @property
    def total_rows(self) -> int:
        """Hash rows of all sketches: ``R_E`` for estimation, ``R`` per prefix level."""
        return self.estimation_rows + self.max_length * self.rows

    def rows_of(self, sketch: int) -> int:
        """Rows of ``sketch``: ``R_E`` for the estimation sketch (0), ``R`` for a level."""
        return self.estimation_rows if sketch == 0 else self.rows

    def first_row(self, sketch: int) -> int:
        """Global index of ``sketch``'s row 0 (the estimation sketch's rows come first)."""
        return 0 if sketch == 0 else self.estimation_rows + (sketch - 1) * self.rows

    def sketch_slice(self, sketch: int) -> slice:
        """``sketch``'s cells in the aggregate (rows of g cells each)."""
        start = self.first_row(sketch) * self.g
        return slice(start, start + self.rows_of(sketch) * self.g)

    @property
    def stats_size(self) -> int:
        return self.total_rows * self.g

    @property
    def report_rule(self) -> str:
        return f"a uint32 cell index below {self.stats_size}"

    @property
    def weights(self) -> npt.NDArray[np.int64]:
        """Selection weight of each sketch (index 0: estimation; t: prefix level t)."""
        w = np.ones(self.sketches, dtype=np.int64)
        w[0] = self.estimation_weight
        return w

    def share(self, sketch: int) -> float:
        """Expected fraction of devices that report to ``sketch``."""
        w = self.weights
        return float(w[sketch] / w.sum())

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "max_length": self.max_length,
            "k": self.k,
            "seed": self.seed,
            "estimation_share": self.estimation_share,
            "g": self.g,
            "rows": self.rows,
            "estimation_rows": self.estimation_rows,
            "estimation_weight": self.estimation_weight,
            # Absent for the first rule, so that its metrics keep their fingerprints; any
            # other rule changes the fingerprint, and reports of two rules never mix.
            **({} if self.cut == "prefix" else {"cut": self.cut}),
            # Absent for text (the default), so that existing metrics keep their fingerprints.
            **({} if self.text else {"text": False}),
        }

    def kept_bytes(self, sketch: Any, length: Any) -> npt.NDArray[np.int64]:
        """Bytes of a string of ``length`` bytes that ``sketch`` keeps (elementwise).

        The estimation sketch keeps all; prefix level t keeps ``min(t, length)`` bytes under
        the ``"prefix"`` rule and ``ceil(t length / M)`` under ``"scaled"``: every level then
        sees a share of the string, so each prefix length of a short string is seen by about
        ``M / length`` levels (docs/protocol.md, "Sampling").
        """
        s = np.asarray(sketch, dtype=np.int64)
        m = np.asarray(length, dtype=np.int64)
        kept = -(-(s * m) // self.max_length) if self.cut == "scaled" else np.minimum(s, m)
        return np.asarray(np.where(s == 0, m, kept))

    @cached_property
    def hash_keys(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """``(a, b)`` by global row: ``a`` of shape (total_rows, W), ``b`` (total_rows,)."""
        nwords = -(-(self.max_length + 1) // 4)
        stream = splitmix64(self.seed, self.total_rows * (nwords + 1))
        block = stream.reshape(self.total_rows, nwords + 1)
        return np.ascontiguousarray(block[:, 1:]), np.ascontiguousarray(block[:, 0])

    def sketch_keys(self, sketch: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """``(a, b)`` of ``sketch``'s rows: shapes (rows, W) and (rows,)."""
        a, b = self.hash_keys
        rows = slice(self.first_row(sketch), self.first_row(sketch) + self.rows_of(sketch))
        return a[rows], b[rows]

    def perturb(self, values: npt.ArrayLike, rng: np.random.Generator | None = None) -> Any:
        """Reports for strings: a str/bytes gives one report, a sequence an array of them."""
        generator = resolve_rng(rng)
        if isinstance(values, (str, bytes, bytearray)):
            return self._perturb(self._check_values(np.array([values], dtype=object)), generator)[0]
        if isinstance(values, np.ndarray) and values.ndim == 0:
            return self._perturb(self._check_values(values.reshape(1)), generator)[0]
        if isinstance(values, np.ndarray) and values.ndim != 1:
            raise ReportError(
                f"values must be a string or a 1-D sequence, got shape {values.shape}"
            )
        return self._perturb(self._check_values(values), generator)

    def _check_values(self, values: Any) -> npt.NDArray[Any]:
        keys, array = encode_strings(values, self.max_length)
        if self.text:
            bad = np.flatnonzero(~valid_utf8(keys))
            if bad.size:
                i = int(bad[0])
                raise ReportError(
                    f"value {array[i]!r} at index {i} is not valid UTF-8; this mechanism "
                    "takes text (text=False takes any bytes)"
                )
        return keys

    def _perturb(self, values: npt.NDArray[Any], rng: np.random.Generator) -> npt.NDArray[Any]:
        keys = values
        n = keys.shape[0]
        weights = self.weights
        slot = rng.integers(0, int(weights.sum()), size=n)
        sketch = np.searchsorted(np.cumsum(weights), slot, side="right").astype(np.int64)
        est = sketch == 0
        row = np.asarray(rng.integers(0, self.rows, size=n), dtype=np.int64)
        # The estimation sketch's rows are drawn apart (R_E of them), as uniformly.
        row[est] = rng.integers(0, self.estimation_rows, size=int(np.count_nonzero(est)))
        global_row = np.where(est, row, self.estimation_rows + (sketch - 1) * self.rows + row)
        # The length byte and the first kept_bytes bytes stay, the rest is zeroed.
        keep = self.kept_bytes(sketch, keys[:, 0])
        cut = np.where(np.arange(keys.shape[1])[None, :] <= keep[:, None], keys, 0)
        words = key_words(cut.astype(np.uint8))
        a, b = self.hash_keys
        acc = b[global_row]
        with np.errstate(over="ignore"):
            for i in range(words.shape[1]):
                acc += a[global_row, i] * words[:, i]
        true = ((acc >> _U32) * np.uint64(self.g)) >> _U32
        keep_true = _bits.uniform_u64(rng, n) < np.uint64(_bits.threshold64_floor(self.p))
        other = rng.integers(0, self.g - 1, size=n, dtype=np.uint64)
        other += other >= true
        y = np.where(keep_true, true, other).astype(np.int64)
        return np.asarray((global_row * self.g + y).astype(REPORT_DTYPE))

    def output_probabilities(self, value: str | bytes) -> FloatArray:
        """The exact probability of every report (cell) for ``value``: shape (stats_size,).

        The sketch and row are drawn independently of the value, the bucket by g-ary
        randomized response whose keep-probability is the sampler's realized one
        (``floor(p 2^64) / 2^64``), so this is the distribution ``perturb`` samples.
        """
        keys = self._check_values(np.array([value], dtype=object))
        w = self.weights
        p_sketch = w / w.sum()
        p_keep = _bits.threshold64_floor(self.p) / 2.0**64
        true = self.true_buckets(bytes(keys[0, 1 : 1 + int(keys[0, 0])]))
        probs = np.full((self.total_rows, self.g), (1.0 - p_keep) / (self.g - 1))
        probs[np.arange(self.total_rows), true] = p_keep
        for s in range(self.sketches):
            span = slice(self.first_row(s), self.first_row(s) + self.rows_of(s))
            probs[span] *= p_sketch[s] / self.rows_of(s)
        return probs.reshape(-1)

    def true_buckets(self, value: str | bytes) -> npt.NDArray[np.int64]:
        """The bucket of ``value`` (cut as each sketch cuts it) in every global row."""
        keys = self._check_values(np.array([value], dtype=object))
        out = np.empty(self.total_rows, dtype=np.int64)
        for s in range(self.sketches):
            cut = keys.copy()
            cut[:, int(self.kept_bytes(s, keys[0, 0])) + 1 :] = 0
            out[self.first_row(s) : self.first_row(s) + self.rows_of(s)] = self.buckets(
                s, key_words(cut)
            )[0]
        return out

    @cached_property
    def _row_sketch(self) -> npt.NDArray[np.int64]:
        """The sketch of every global row."""
        return np.repeat(np.arange(self.sketches), [self.rows_of(s) for s in range(self.sketches)])

    def _choices(self, cells: FloatArray) -> list[screening.Test]:
        """The sketch (by its weight) and the row (uniform within the sketch) of the reports
        counted in ``cells``, drawn whatever their strings."""
        rows = cells.reshape(self.total_rows, self.g).sum(axis=1)
        sketch = self._row_sketch
        shares = self.weights / self.weights.sum()
        row_shares = shares[sketch] / np.where(sketch == 0, self.estimation_rows, self.rows)
        return [
            partial(screening.choice_counts, np.bincount(sketch, rows), shares, name=_sketch_name),
            partial(screening.choice_counts, rows, row_shares, name=lambda k: f"row {k} is chosen"),
        ]

    def screen_reports(self, reports: npt.NDArray[Any], alpha: float) -> Finding | None:
        """The sketch and row a batch's reports chose (the bucket, g-ary randomized
        response, has no law free of the string: it is tested pooled)."""
        return screening.first_finding(alpha, self._choices(self._sums(reports)))

    def screen_aggregate(self, aggregate: Aggregate, alpha: float) -> Finding | None:
        """The sketches and rows chosen, and every cell: within a row, a bucket is reported
        with probability between ``(1 - p) / (g - 1)`` and p whatever the strings (g-ary
        randomized response), so its count among the row's reports is binomial within."""
        cells = self._checked_aggregate(aggregate).sums
        trials = np.repeat(cells.reshape(self.total_rows, self.g).sum(axis=1), self.g)
        low = (1.0 - self.p) / (self.g - 1)
        bucket = partial(
            screening.count_law,
            cells,
            trials,
            self.p,
            low,
            test="support count",
            name=self._cell_name,
        )
        return screening.first_finding(alpha, [*self._choices(cells), bucket])

    def _cell_name(self, k: int) -> str:
        return f"bucket {k % self.g} of row {k // self.g} is reported"

    def supports(self, value: str | bytes, reports: npt.ArrayLike) -> BoolArray:
        """Which reports name ``value``'s bucket in their (sketch, row)."""
        cells = self.coerce_reports(reports).astype(np.int64)
        global_row, y = np.divmod(cells, self.g)
        return np.asarray(self.true_buckets(value)[global_row] == y)

    def _valid_mask(self, reports: npt.NDArray[Any]) -> BoolArray:
        return np.asarray(reports.astype(np.uint64) < np.uint64(self.stats_size))

    def _sums(self, reports: npt.NDArray[Any]) -> FloatArray:
        return np.bincount(reports.astype(np.int64), minlength=self.stats_size).astype(np.float64)

    def accumulators(self, sketch: int, words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """``(b + sum_i a_i w_i) mod 2^64`` of each key (as words) in every row of ``sketch``."""
        a, b = self.sketch_keys(sketch)
        acc = np.repeat(b[None, :], words.shape[0], axis=0)
        used = np.flatnonzero(np.any(words != 0, axis=0))  # zero words add nothing
        with np.errstate(over="ignore"):
            for i in used:
                acc += words[:, i, None] * a[None, :, i]
        return acc

    def to_buckets(self, acc: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """``((acc >> 32) g) >> 32``, in place."""
        acc >>= _U32
        acc *= np.uint64(self.g)
        acc >>= _U32
        return acc

    def key_accumulators(self, sketch: int, keys: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
        """:meth:`accumulators` of keys (as :func:`encode_strings` makes them)."""
        return self.accumulators(sketch, key_words(keys))

    def buckets(self, sketch: int, words: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Bucket of each key (as words) in every row of ``sketch``: shape (n, rows)."""
        return self.to_buckets(self.accumulators(sketch, words)).view(np.int64)

    def estimate(self, aggregate: Aggregate) -> HeavyHitters:
        """Find the top-k strings and estimate their frequencies (see the module docstring)."""
        from ._string_decoder import decode

        agg = self._checked_aggregate(aggregate)
        found = decode(self, agg, partial(_keys, max_length=self.max_length))
        return replace(found, forgery=self.forgery())

    def forgery(self) -> screening.LinearShift:
        """How far forged reports can move a string's estimate. It reads the estimation
        sketch, ``(C_v / n_E - q) / (p - q)`` with ``C_v`` the count of the string's cells
        (one per row): a forged report supports it once or not at all, an honest one with
        probability between ``(1 - p) / (g - 1)`` and p in each row (g-ary randomized
        response; ``q = 1 / g`` only on average over hash functions), so a forged share b of
        the sketch's reports moves it by at most ``b (1 - (1 - p) / (g - 1)) / (p - q)`` up
        and ``b p / (p - q)`` down; the sketch is chosen with probability ``share(0)``.
        The heavy strings' correction is held fixed: it takes from a string's cells what
        their collisions add and gives back ``heavy_total q / (1 - q)``, equal on average
        over the rows, so a forged heavy string moves the others by its collisions' spread
        only (a ``1 / g`` share of a row, second order)."""
        p, q = self.p, self.q
        up, down = (1.0 - (1.0 - p) / (self.g - 1)) / (p - q), p / (p - q)
        return screening.LinearShift(
            np.array([[up]]), np.array([[down]]), np.array([self.share(0)])
        )

    def variance(self, frequency: float | npt.ArrayLike = 0.0, n: int = 1) -> Any:
        """Variance of a string's estimated fraction from the estimation sketch.

        The oracle's variance among the ``n * share(0)`` devices of the estimation sketch
        plus the sampling variance of their fraction around all n devices', with random
        hashing (collisions of the finite family add a little; the decoder measures it).
        """
        f = np.asarray(frequency, dtype=np.float64)
        n_e = n * self.share(0)
        var = oracle_variance(f, n_e, self.p, self.q) + f * (1 - f) * (1.0 / n_e - 1.0 / n)
        return float(var) if var.ndim == 0 else var

    def level_variance(self, frequency: float | npt.ArrayLike = 0.0, n: int = 1) -> Any:
        """Variance of a prefix's estimated fraction at one prefix level (random hashing)."""
        f = np.asarray(frequency, dtype=np.float64)
        var = oracle_variance(f, n * self.share(1), self.p, self.q)
        return float(var) if var.ndim == 0 else var

    # --- the portable rule and the conformance law -------------------------------------
    def served_constants(self) -> dict[str, Any]:
        return {
            "max_length": self.max_length,
            "rows": self.rows,
            "estimation_rows": self.estimation_rows,
            "g": self.g,
            "seed": _portable.hex64(self.seed),
            "weights": [int(x) for x in self.weights],
            "keep": _portable.hex64(_bits.threshold64_floor(self.p)),
            "cut": self.cut,
        }

    @classmethod
    def portable_report(cls, definition: Mapping[str, Any], value: Any, words: Words) -> bytes:
        """A sketch by its weight and a row in it (``below``), the string's bucket in that
        global row, then g-ary randomized response: the cell ``G g + y`` as a uint32."""
        derived = definition["derived"]
        raw = value.encode() if isinstance(value, str) else bytes(value)
        m = int(derived["max_length"])
        if len(raw) > m:
            raise ParameterError(f"a string of {len(raw)} bytes is longer than max_length {m}")
        g = int(derived["g"])
        sketch, at = cls._portable_row(derived, words)
        true = cls._portable_bucket(derived, raw, sketch, at)
        y = _portable.rr_item(derived["keep"], g, true, words)
        return (at * g + y).to_bytes(4, "little")

    @staticmethod
    def _portable_row(derived: Derived, words: Words) -> tuple[int, int]:
        """The sketch (by its weight) and the global row (uniform within the sketch)."""
        rows, rows_e = int(derived["rows"]), int(derived["estimation_rows"])
        weights = [int(x) for x in derived["weights"]]
        slot = words.below(sum(weights))
        sketch = 0
        while slot >= weights[sketch]:
            slot -= weights[sketch]
            sketch += 1
        row = words.below(rows_e if sketch == 0 else rows)
        return sketch, row if sketch == 0 else rows_e + (sketch - 1) * rows + row

    @staticmethod
    def _portable_bucket(derived: Derived, raw: bytes, sketch: int, at: int) -> int:
        """The bucket of the string's key, cut as ``sketch`` cuts it, in global row ``at``."""
        m, g = int(derived["max_length"]), int(derived["g"])
        key = bytes([len(raw)]) + raw + bytes(m - len(raw))
        # bytes 0..keep of the key are kept: ceil(t len / m) at level t ("scaled"), or t ("prefix")
        scaled = derived.get("cut", "prefix") == "scaled"
        keep = m if sketch == 0 else (-(-sketch * len(raw) // m) if scaled else sketch)
        cut = key[: keep + 1] + bytes(m - keep)
        nwords = -(-(m + 1) // 4)
        padded = cut + bytes(4 * nwords - len(cut))
        key_words = [int.from_bytes(padded[4 * i : 4 * i + 4], "little") for i in range(nwords)]
        stream = _portable.splitmix64(int(derived["seed"], 16), nwords + 1, at * (nwords + 1))
        acc = stream[0]
        for a, x in zip(stream[1:], key_words, strict=True):
            acc = (acc + a * x) % _portable.TWO64
        return ((acc >> 32) * g) >> 32

    def conformance_tests(self, reports: Reports, value: Any, derived: Derived) -> list[LawTest]:
        """cell = G g + y with G the global row (the estimation sketch's R_E rows first,
        then R per level): the sketch by its weights, the row uniform within it (the
        estimation sketch's folded onto R by R_E / R, which a client drawing only R of
        them fails), and y relative to the value's bucket in that row as g-ary RR."""
        g, rows, rows_e = self.g, self.rows, self.estimation_rows
        cell = reports.astype(np.int64)
        y, at = cell % g, cell // g
        level = at >= rows_e
        sketch = np.where(level, 1 + (at - rows_e) // rows, 0)
        row = np.where(level, (at - rows_e) % rows, at // max(1, rows_e // rows))
        raw = value.encode() if isinstance(value, str) else bytes(value)
        shift = (y - np.asarray(self.true_buckets(raw))[at]) % g
        relative = chi2(np.bincount(shift, minlength=g), rr_probabilities(g, self.p))
        return [
            ("sketch", *chi2(np.bincount(sketch, minlength=self.sketches), self.weights), ""),
            ("row", *chi2(np.bincount(row, minlength=rows), np.ones(rows)), ""),
            ("bucket vs hash", *relative, ""),
        ]
