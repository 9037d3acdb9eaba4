"""The portable sampling rules of docs/protocol.md: one report from a stream of words.

A client in another language cannot reproduce numpy's vectorised samplers, and need not:
what the protocol fixes is each report's *law*, and how exactly a client must realize
it. This module states that law as a procedure any language can run, one report at a
time, on a stream of uniform 32-bit words, using only integer arithmetic, IEEE-754
double ``+ - * /``, ``floor`` and comparisons (no ``exp``/``log``: every constant that
needs them is computed once here, in :func:`derived_parameters`, and served in the
metric definition under ``"derived"``). The same words in give the same report bytes
out in every language; docs/protocol.md holds test vectors made by this module, and
``tests/shared/test_protocol_vectors.py`` checks them.

ldpkit's own Python client samples the same laws with vectorised numpy code (and
different word orders): its reports have the same distribution, not the same bytes.
``ldpkit.conformance`` checks any client's reports against those laws.

Primitives (``words`` yields uint32):

- ``u64()``: ``lo + 2**32 * hi`` of the next two words (``lo`` first);
- ``coin(T)``: ``u64() < T`` for a 64-bit threshold ``T`` (served as 16 hex digits);
  true with probability exactly ``T / 2**64``;
- ``uniform()``: ``(u64() >> 11) / 2**53``, a multiple of ``2**-53`` in [0, 1);
- ``below(n)`` (``1 <= n <= 2**32``): draw a word ``w`` until ``w < 2**32 - 2**32 mod n``
  and answer ``w mod n`` (exactly uniform).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from .errors import ParameterError
from .mechanisms import Mechanism
from .mechanisms._bits import threshold64_floor

TWO32 = 1 << 32
TWO64 = 1 << 64
WordSource = Callable[[], int]
"""Yields the next uniform 32-bit word."""


def hex64(threshold: int) -> str:
    """A 64-bit threshold as served: 16 lowercase hex digits."""
    if not 0 <= threshold < TWO64:
        raise ParameterError(f"threshold {threshold} is not a 64-bit value")
    return f"{threshold:016x}"


def _ceil64(probability: float) -> int:
    """Smallest T with ``T / 2**64 >= probability`` (exact: a float times 2**64 is exact)."""
    return min(TWO64 - 1, math.ceil(probability * TWO64))


def _dyadic53(probability: float) -> int:
    """``T`` with ``coin(T)`` equal to ``uniform() < probability`` (numpy's coin)."""
    return math.ceil(probability * 2.0**53) << 11


def derived_parameters(m: Mechanism) -> dict[str, Any]:
    """What a client needs beyond the definition to sample ``m``'s reports exactly.

    Every 64-bit threshold is an exact integer (16 hex digits); floats are the doubles
    the Python implementation uses (JSON numbers round-trip them exactly).
    """
    name = m.name
    if name in ("grr", "rr"):
        return {"keep": hex64(threshold64_floor(m.p))}  # type: ignore[attr-defined]
    if name in ("sue", "oue"):
        return {
            "p": hex64(threshold64_floor(m.p)),  # type: ignore[attr-defined]
            "q": hex64(_ceil64(m.q)),  # type: ignore[attr-defined]
        }
    if name == "olh":
        return {"g": m.g, "keep": hex64(threshold64_floor(m.p))}  # type: ignore[attr-defined]
    if name == "ss":
        return {"k": m.k, "in": hex64(threshold64_floor(m.p))}  # type: ignore[attr-defined]
    if name == "hr":
        return {"K": m.K, "keep": hex64(threshold64_floor(m.p))}  # type: ignore[attr-defined]
    if name == "duchi":
        return {"flip": hex64(_dyadic53(m.flip_probability)), "scale": m.C}  # type: ignore[attr-defined]
    if name == "laplace":
        return _laplace_parameters(m)
    if name == "gaussian":
        return {
            "grid_steps": m.grid_steps,  # type: ignore[attr-defined]
            "cap": m.noise_cap,  # type: ignore[attr-defined]
            "t": m.laplace_scale,  # type: ignore[attr-defined]
            "m": m.sigma2_over_t,  # type: ignore[attr-defined]
        }
    if name == "piecewise":
        return {**_pm_parameters(m._grid), "scale": m.step}  # type: ignore[attr-defined]
    if name == "hybrid":
        out = {
            **_pm_parameters(m._grid),  # type: ignore[attr-defined]
            "pm": hex64(_dyadic53(m.alpha)),  # type: ignore[attr-defined]
            "flip": hex64(_dyadic53(duchi_flip(m.epsilon))),
            "duchi_index": m.duchi_index,  # type: ignore[attr-defined]
            "scale": m.step,  # type: ignore[attr-defined]
        }
        return out
    if name == "hh":
        return _hh_parameters(m)
    if name in VIEW_MECHANISMS:
        return _view_parameters(m)
    if name == "prefix_sketch":
        return {
            "max_length": m.max_length,  # type: ignore[attr-defined]
            "rows": m.rows,  # type: ignore[attr-defined]
            "estimation_rows": m.estimation_rows,  # type: ignore[attr-defined]
            "g": m.g,  # type: ignore[attr-defined]
            "seed": hex64(m.seed),  # type: ignore[attr-defined]
            "weights": [int(x) for x in m.weights],  # type: ignore[attr-defined]
            "keep": hex64(threshold64_floor(m.p)),  # type: ignore[attr-defined]
            "cut": m.cut,  # type: ignore[attr-defined]
        }
    raise ParameterError(f"no portable sampling rule for mechanism {name!r}")


VIEW_MECHANISMS = ("rollup", "levels", "joint", "joint_marginals")
"""View sampling: each report is one view's oracle report (``ldpkit.mechanisms._views``)."""


def _hh_parameters(m: Any) -> dict[str, Any]:
    depths = []
    for t, oracle in enumerate(m.oracles, start=1):
        depths.append(
            {
                "leaves_per_node": int(m.tree.sizes[t]),
                "nodes": int(m.tree.counts[t]),
                "oracle": oracle.name,
                **derived_parameters(oracle),
            }
        )
    return {"resolution": m.resolution, "depths": depths}


def _view_parameters(m: Any) -> dict[str, Any]:
    views = []
    cumulative = 0.0
    for k, v in enumerate(m.views):
        cumulative += v.weight
        last = k == len(m.views) - 1
        labels = np.asarray(v.labels)
        identity = labels.size == v.size and bool(np.all(labels == np.arange(labels.size)))
        views.append(
            {
                "name": v.name,
                "oracle": v.oracle.name,
                "size": v.size,
                # The view is the first whose `until` exceeds one u64 (the last: always).
                "until": hex64(TWO64 - 1 if last else min(TWO64 - 1, round(cumulative * TWO64))),
                "labels": None if identity else [int(x) for x in labels],
                **derived_parameters(v.oracle),
            }
        )
    return {"payload": int(m._payload_size), "views": views}


def duchi_flip(epsilon: float) -> float:
    from .mechanisms.duchi import duchi_constants

    return duchi_constants(epsilon)[1]


def _pm_parameters(grid: Any) -> dict[str, Any]:
    from .mechanisms._dyadic import realized_at_least

    _, outside = realized_at_least(grid.outside_probability)
    c_plus_1 = 2.0 / -math.expm1(-grid.epsilon / 2.0)
    c_minus_1 = 2.0 / math.expm1(grid.epsilon / 2.0)
    w_in, w_out = grid.widths
    return {
        "outside": hex64(_dyadic53(outside)),
        "c_plus_1": c_plus_1,
        "c_minus_1": c_minus_1,
        "step": grid.step,
        "c": grid.C / grid.step,
        "w_in": w_in,
        "w_out": w_out,
        "bound": grid.bound,
    }


def _laplace_parameters(m: Any) -> dict[str, Any]:
    return {
        "grid_steps": m.grid_steps,
        "cap": m.noise_cap,
        "digits": [hex64(t) for t in m.digit_thresholds],
        "block": hex64(m.block_threshold),
    }


# --- the rules ------------------------------------------------------------------------
class Words:
    """The primitives of the module docstring over a source of 32-bit words."""

    def __init__(self, source: WordSource) -> None:
        self._next = source
        self.used = 0

    def word(self) -> int:
        w = int(self._next())
        if not 0 <= w < TWO32:
            raise ParameterError(f"a word must be a 32-bit unsigned integer, got {w}")
        self.used += 1
        return w

    def u64(self) -> int:
        lo = self.word()
        return lo + (self.word() << 32)

    def coin(self, threshold: str) -> bool:
        return self.u64() < int(threshold, 16)

    def uniform(self) -> float:
        return (self.u64() >> 11) / 2.0**53

    def below(self, n: int) -> int:
        limit = TWO32 - TWO32 % n
        while True:
            w = self.word()
            if w < limit:
                return w % n


def word_list(words: list[int]) -> WordSource:
    """A word source over a fixed list (test vectors); running out is an error."""
    it: Iterator[int] = iter(words)

    def take() -> int:
        try:
            return next(it)
        except StopIteration:
            raise ParameterError("the word stream ran out") from None

    return take


def os_words() -> WordSource:
    """Words from the OS CSPRNG (how a device runs the rules)."""
    import os

    def take() -> int:
        return int.from_bytes(os.urandom(4), "little")

    return take


def perturb(
    definition: Mapping[str, Any], value: int | float | str | bytes, words: WordSource
) -> bytes:
    """One report's bytes for a mechanism input, following docs/protocol.md.

    ``definition`` is the served JSON object (``resolved_mechanism``, ``categories`` or
    ``bounds``, ``derived``); ``value`` is the item index (categorical) or the number
    (numeric, clipped to the bounds here).
    """
    w = Words(words)
    name = definition["resolved_mechanism"]
    p = definition["derived"]
    if name in VIEW_MECHANISMS:
        return _views(p, int(value), w)
    if name == "prefix_sketch":
        raw = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
        return _prefix_sketch(p, raw, w)
    if name in ("grr", "rr", "sue", "oue", "olh", "ss", "hr"):
        d = len(definition["categories"])
        x = int(value)
        if not 0 <= x < d:
            raise ParameterError(f"item {x} is outside 0..{d - 1}")
        return _CATEGORICAL[name](p, d, x, w)
    lo, hi = (float(b) for b in definition["bounds"])
    xv = min(max(float(value), lo), hi)
    return _NUMERIC[name](p, lo, hi, xv, w)


def _grr(p: Mapping[str, Any], d: int, x: int, w: Words) -> bytes:
    return _rr_item(p["keep"], d, x, w).to_bytes(4, "little")


def _rr_item(keep: str, d: int, x: int, w: Words) -> int:
    if w.coin(keep):
        return x
    other = w.below(d - 1)
    return other + (other >= x)


def _bitmap(bits: list[bool]) -> bytes:
    out = bytearray((len(bits) + 7) // 8)
    for j, b in enumerate(bits):
        if b:
            out[j >> 3] |= 1 << (j & 7)
    return bytes(out)


def _unary(p: Mapping[str, Any], d: int, x: int, w: Words) -> bytes:
    bits = [False] * d
    bits[x] = w.coin(p["p"])
    for j in range(d):
        if j != x:
            bits[j] = w.coin(p["q"])
    return _bitmap(bits)


def _olh(p: Mapping[str, Any], d: int, x: int, w: Words) -> bytes:
    g = int(p["g"])
    a = w.u64()
    b = w.u64()
    y = _rr_item(p["keep"], g, olh_bucket(x, a, b, g), w)
    return a.to_bytes(8, "little") + b.to_bytes(8, "little") + y.to_bytes(4, "little")


def olh_bucket(v: int, a: int, b: int, g: int) -> int:
    """``((((a v + b) mod 2**64) >> 32) * g) >> 32``."""
    h = ((a * v + b) % TWO64) >> 32
    return (h * g) >> 32


def _ss(p: Mapping[str, Any], d: int, x: int, w: Words) -> bytes:
    k = int(p["k"])
    inside = w.coin(p["in"])
    others = k - int(inside)
    # Floyd's algorithm: a uniform `others`-subset of the d - 1 items other than x,
    # numbered 0 .. d - 2 (number i is item i + (i >= x)).
    chosen: set[int] = set()
    for j in range(d - 1 - others, d - 1):
        t = w.below(j + 1)
        chosen.add(j if t in chosen else t)
    bits = [False] * d
    bits[x] = inside
    for i in chosen:
        bits[i + (i >= x)] = True
    return _bitmap(bits)


def _hr(p: Mapping[str, Any], d: int, x: int, w: Words) -> bytes:
    k = int(p["K"])
    row = x + 1
    c = w.below(k)
    keep = w.coin(p["keep"])
    inside = (row & c).bit_count() % 2 == 0
    if inside != keep:
        c ^= row & -row
    return c.to_bytes(4, "little")


def _unit(lo: float, hi: float, x: float) -> float:
    half = (hi - lo) / 2.0
    return min(max((x - lo) / half - 1.0, -1.0), 1.0)


def _duchi_sign(flip: str, t: float, w: Words) -> int:
    upper = w.uniform() < (t + 1.0) * 0.5
    return 1 if upper != w.coin(flip) else -1


def _duchi(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> bytes:
    return _duchi_sign(p["flip"], _unit(lo, hi, x), w).to_bytes(1, "little", signed=True)


def _pm_index(p: Mapping[str, Any], t: float, w: Words) -> int:
    c, w_in, w_out, step = p["c"], p["w_in"], p["w_out"], p["step"]
    outside = w.coin(p["outside"])
    u = w.uniform()
    lo = (0.5 * p["c_plus_1"] * t - 0.5 * p["c_minus_1"]) / step
    lo = min(max(lo, -c), c - w_in)
    if outside:
        along = u * w_out
        left = lo + c
        start, offset = (-c, along) if along < left else (lo + w_in, along - left)
    else:
        start, offset = lo, u * w_in
    anchor = math.floor(start)
    index = anchor + math.floor((start - anchor) + offset + w.uniform())
    bound = int(p["bound"])
    return int(min(max(index, -bound), bound))


def _piecewise(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> bytes:
    return _pm_index(p, _unit(lo, hi, x), w).to_bytes(4, "little", signed=True)


def _hybrid(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> bytes:
    t = _unit(lo, hi, x)
    if w.coin(p["pm"]):
        index = _pm_index(p, t, w)
    else:
        index = _duchi_sign(p["flip"], t, w) * int(p["duchi_index"])
    return index.to_bytes(4, "little", signed=True)


def geometric(p: Mapping[str, Any], w: Words) -> int:
    """``Pr[G = g] = (1 - a) a^g``: its binary digits, then its block count."""
    g = 0
    digits = p["digits"]
    for j, threshold in enumerate(digits):
        if w.coin(threshold):
            g += 1 << j
    while w.coin(p["block"]):
        g += 1 << len(digits)
    return g


def _on_grid(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> int:
    """x on the grid of ``grid_steps`` steps, rounded stochastically (one ``uniform()``)."""
    steps = int(p["grid_steps"])
    u = min(max((x - lo) / (hi - lo) * steps, 0.0), float(steps))
    m = math.floor(u)
    if w.uniform() < u - m:
        m += 1
    return m


def _clamped(p: Mapping[str, Any], y: int) -> bytes:
    """A noisy grid value clamped to ``-cap .. grid_steps + cap``, as an int64 report."""
    cap, steps = int(p["cap"]), int(p["grid_steps"])
    return int(min(max(y, -cap), steps + cap)).to_bytes(8, "little", signed=True)


def _laplace(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> bytes:
    m = _on_grid(p, lo, hi, x, w)
    return _clamped(p, m + geometric(p, w) - geometric(p, w))


def below_any(w: Words, n: int) -> int:
    """``below(n)`` for any ``n >= 1``: ``W`` words (the first least significant) make
    a number below ``2**(32 W) >= n``, drawn again at or above the largest multiple of
    n there (for ``n <= 2**32`` this is ``below``)."""
    count = max(1, -(-(n - 1).bit_length() // 32))
    span = 1 << (32 * count)
    limit = span - span % n
    while True:
        value = 0
        for i in range(count):
            value |= w.word() << (32 * i)
        if value < limit:
            return value % n


def bernoulli(w: Words, x: int, q: int) -> bool:
    """True with probability ``x / q`` (``0 <= x <= q``); no word when it is 0 or 1."""
    if x <= 0:
        return False
    if x >= q:
        return True
    return below_any(w, q) < x


def taylor_bernoulli(w: Words, x: int, q: int) -> bool:
    """True with probability ``exp(-x / q)`` for ``0 <= x <= q`` (Canonne, Kamath, Steinke
    2020, Algorithm 1): ``k = 1``; while ``bernoulli(x, q)`` and ``bernoulli(1, k)``:
    ``k += 1``; true iff k ends odd (``Pr[k > j] = (x / q)^j / j!``)."""
    k = 1
    while bernoulli(w, x, q) and bernoulli(w, 1, k):
        k += 1
    return k % 2 == 1


def exp_bernoulli(w: Words, x: int, q: int) -> bool:
    """True with probability ``exp(-x / q)`` for integers ``x >= 0``, ``q >= 1``:
    ``floor(x / q)`` coins of ``e^-1`` (stopping at the first false), then the coin of
    the remainder."""
    whole, rest = divmod(x, q)
    for _ in range(whole):
        if not taylor_bernoulli(w, 1, 1):
            return False
    return taylor_bernoulli(w, rest, q)


def discrete_laplace(t: int, w: Words) -> int:
    """``Pr[Z = z] ∝ exp(-|z| / t)`` (CKS Algorithm 2 with s = 1)."""
    while True:
        u = below_any(w, t)
        if not taylor_bernoulli(w, u, t):
            continue
        v = 0
        while taylor_bernoulli(w, 1, 1):
            v += 1
        x = u + t * v
        negative = below_any(w, 2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_gaussian(t: int, m: int, w: Words) -> int:
    """``Pr[Z = z] ∝ exp(-z^2 / (2 t m))`` (CKS Algorithm 3): a discrete Laplace of scale
    t, kept with probability ``exp(-(|Z| - m)^2 / (2 t m))``."""
    while True:
        z = discrete_laplace(t, w)
        b = abs(abs(z) - m)
        if exp_bernoulli(w, b * b, 2 * t * m):
            return z


def _gaussian(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> bytes:
    m = _on_grid(p, lo, hi, x, w)
    return _clamped(p, m + discrete_gaussian(int(p["t"]), int(p["m"]), w))


def _oracle(p: Mapping[str, Any], x: int, w: Words) -> bytes:
    """A nested oracle's report (its derived keys and ``oracle``, ``size``)."""
    return _CATEGORICAL[p["oracle"]](p, int(p["size"]), x, w)


def leaf_of(x: float, lo: float, hi: float, resolution: int) -> int:
    """The leaf of a clipped value: edges ``lo + ((hi - lo) * k) / R`` (the last: hi)."""

    def edge(k: int) -> float:
        return hi if k == resolution else lo + ((hi - lo) * k) / resolution

    k = min(max(math.floor((x - lo) / (hi - lo) * resolution), 0), resolution - 1)
    if k < resolution - 1 and x >= edge(k + 1):
        k += 1
    if x < edge(k):
        k -= 1
    return k


def _hh(p: Mapping[str, Any], lo: float, hi: float, x: float, w: Words) -> bytes:
    leaf = leaf_of(x, lo, hi, int(p["resolution"]))
    depths = p["depths"]
    t = w.below(len(depths))
    view = depths[t]
    node = leaf // int(view["leaves_per_node"])
    if view["oracle"] == "olh":
        body = _olh(view, int(view["nodes"]), node, w)
    else:
        body = bytes(16) + _grr(view, int(view["nodes"]), node, w)
    return bytes([t + 1]) + body


def _views(p: Mapping[str, Any], cell: int, w: Words) -> bytes:
    draw = w.u64()
    views = p["views"]
    k = next((i for i, v in enumerate(views) if draw < int(v["until"], 16)), len(views) - 1)
    view = views[k]
    item = cell if view["labels"] is None else int(view["labels"][cell])
    body = _oracle(view, item, w)
    return bytes([k]) + body + bytes(int(p["payload"]) - len(body))


def splitmix64(seed: int, count: int, first: int = 0) -> list[int]:
    """Outputs ``first .. first + count - 1`` of SplitMix64 from ``seed`` (output i alone
    depends on i, so a row's words need not compute the rows before it)."""
    out = []
    for i in range(first, first + count):
        z = (seed + (i + 1) * 0x9E3779B97F4A7C15) % TWO64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % TWO64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % TWO64
        out.append(z ^ (z >> 31))
    return out


def _prefix_sketch(p: Mapping[str, Any], raw: bytes, w: Words) -> bytes:
    m = int(p["max_length"])
    if len(raw) > m:
        raise ParameterError(f"a string of {len(raw)} bytes is longer than max_length {m}")
    rows, g, rows_e = int(p["rows"]), int(p["g"]), int(p["estimation_rows"])
    weights = [int(x) for x in p["weights"]]
    slot = w.below(sum(weights))
    sketch = 0
    while slot >= weights[sketch]:
        slot -= weights[sketch]
        sketch += 1
    row = w.below(rows_e if sketch == 0 else rows)
    at = row if sketch == 0 else rows_e + (sketch - 1) * rows + row  # the global row
    key = bytes([len(raw)]) + raw + bytes(m - len(raw))
    # bytes 0..keep of the key are kept: ceil(t len / m) at level t ("scaled"), or t ("prefix")
    scaled = p.get("cut", "prefix") == "scaled"
    keep = m if sketch == 0 else (-(-sketch * len(raw) // m) if scaled else sketch)
    cut = key[: keep + 1] + bytes(m - keep)
    nwords = -(-(m + 1) // 4)
    padded = cut + bytes(4 * nwords - len(cut))
    words = [int.from_bytes(padded[4 * i : 4 * i + 4], "little") for i in range(nwords)]
    start = at * (nwords + 1)
    stream = splitmix64(int(p["seed"], 16), nwords + 1, start)
    acc = stream[0]
    for a, x in zip(stream[1:], words, strict=True):
        acc = (acc + a * x) % TWO64
    true = ((acc >> 32) * g) >> 32
    y = _rr_item(p["keep"], g, true, w)
    return (at * g + y).to_bytes(4, "little")


_CATEGORICAL: dict[str, Callable[[Mapping[str, Any], int, int, Words], bytes]] = {
    "grr": _grr,
    "rr": _grr,
    "sue": _unary,
    "oue": _unary,
    "olh": _olh,
    "ss": _ss,
    "hr": _hr,
}
_NUMERIC: dict[str, Callable[[Mapping[str, Any], float, float, float, Words], bytes]] = {
    "duchi": _duchi,
    "piecewise": _piecewise,
    "hybrid": _hybrid,
    "laplace": _laplace,
    "gaussian": _gaussian,
    "hh": _hh,
}
MECHANISMS = (*_CATEGORICAL, *_NUMERIC, *VIEW_MECHANISMS, "prefix_sketch")
"""The mechanisms with a portable rule: every one a metric definition can resolve to."""
PORTABLE_MECHANISMS = frozenset(MECHANISMS)
"""The same, as a set (a served definition carries ``derived`` for these)."""


def perturb_many(
    definition: Mapping[str, Any], values: Any, words: WordSource | None = None
) -> bytes:
    """Reports for many values, one after the other on one word stream (OS by default)."""
    source = os_words() if words is None else words
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return b"".join(perturb(definition, v, source) for v in items)
