"""Values in, reports out: a metric's codec (check a value, perturb it) and the
permanent (memoized) randomness. No I/O."""

from __future__ import annotations

import hmac
import math
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import (
    ParameterError,
)
from ..metrics import MetricDefinition, MetricKind


# --- metric codecs: values in, reports out --------------------------------------------
@dataclass(frozen=True, eq=False)
class MetricCodec:
    """A definition with what the hot path needs precomputed (category index, fingerprint)."""

    definition: MetricDefinition
    fingerprint: str
    index: Mapping[str, int] = field(repr=False)
    # Plain copies of what report() reads, so the hot path touches no enum properties.
    name: str = ""
    categorical: bool = True
    epsilon: float = 0.0
    budget: float = 0.0
    bucket_seconds: int = 0
    budget_period: str = ""
    budget_seconds: int = 0

    @classmethod
    def of(cls, definition: MetricDefinition) -> MetricCodec:
        cats = definition.categories or ()
        return cls(
            definition,
            definition.fingerprint,
            {c: i for i, c in enumerate(cats)},
            name=definition.name,
            categorical=definition.kind is MetricKind.CATEGORICAL,
            epsilon=definition.epsilon,
            budget=definition.effective_budget,
            bucket_seconds=definition.bucket.seconds,
            budget_period=definition.budget_period.value,
            budget_seconds=definition.budget_period.seconds,
        )

    def encode(self, value: object) -> tuple[int | float, bool]:
        """The mechanism's input for ``value`` and whether it was clipped.

        Categorical: the category's index (ParameterError for an unknown category or a
        non-string). Numeric and distribution: the number clipped to the bounds
        (ParameterError for a non-number, NaN or infinity). Other kinds: what
        :mod:`ldpkit.kinds` makes of the value (a leaf's index, a cell's, a string's bytes).
        """
        if self.categorical:
            if isinstance(value, str):
                i = self.index.get(value)
                if i is not None:
                    return i, False
            d = self.definition
            d.encode_value(value)  # raises the clear message
            raise ParameterError(f"{value!r} is not a category of metric {d.name}")  # unreachable
        d = self.definition
        if d.bounds is None:  # a leaf, a dict of attributes, a string: the kind encodes it
            encoded: tuple[int | float, bool] = d.kind_spec.encode(d, value)
            return encoded
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise ParameterError(
                f"metric {d.name} takes a number in [{_g(d.bounds, 0)}, {_g(d.bounds, 1)}], "
                f"got {type(value).__name__} {value!r}"
            )
        x = float(value)
        if not math.isfinite(x):
            raise ParameterError(f"metric {d.name} takes a finite number, got {value!r}")
        assert d.bounds is not None
        lo, hi = d.bounds
        clipped = min(max(x, lo), hi)
        return clipped + 0.0, clipped != x  # + 0.0 folds -0.0 into 0.0

    def encode_many(self, values: Sequence[object] | npt.ArrayLike) -> npt.NDArray[Any]:
        """Vectorized :meth:`encode`: an int64 index array or a clipped float64 array."""
        d = self.definition
        if d.kind is MetricKind.CATEGORICAL:
            out = np.empty(len(values), dtype=np.int64)  # type: ignore[arg-type]
            index = self.index
            for k, v in enumerate(values):  # type: ignore[arg-type]
                i = index.get(v) if isinstance(v, str) else None
                if i is None:
                    try:
                        self.encode(v)
                    except ParameterError as exc:
                        raise ParameterError(f"value {k}: {exc}") from None
                    raise AssertionError("unreachable")  # pragma: no cover
                out[k] = i
            return out
        if d.bounds is None:
            return d.kind_spec.encode_many(d, values)
        array = np.asarray(values)
        if array.ndim != 1 or array.dtype.kind not in "iuf":
            raise ParameterError(
                f"metric {d.name} takes a 1-D array of numbers, got {array.dtype} {array.shape}"
            )
        x = array.astype(np.float64)
        bad = ~np.isfinite(x)
        if bool(np.any(bad)):
            k = int(np.argmax(bad))
            raise ParameterError(f"value {k}: metric {d.name} takes a finite number, got {x[k]!r}")
        assert d.bounds is not None
        return np.clip(x, *d.bounds) + 0.0

    def value_key(self, encoded: int | float) -> bytes:
        """A fixed-width byte form of an encoded value (the memo key's input)."""
        if self.categorical:
            return struct.pack("<Q", int(encoded))
        return self.definition.kind_spec.value_key(encoded)

    def perturb(self, encoded: int | float, rng: np.random.Generator) -> bytes:
        """One perturbed report's bytes."""
        m = self.definition.mechanism_instance
        array = self.definition.kind_spec.as_array([encoded])
        reports = m.perturb(array, rng=rng)
        return bytes(np.ascontiguousarray(reports).tobytes())

    def perturb_many(self, encoded: npt.NDArray[Any], rng: np.random.Generator) -> list[bytes]:
        """Perturbed reports of many (independent) values, one bytes object each."""
        reports = np.ascontiguousarray(self.definition.mechanism_instance.perturb(encoded, rng=rng))
        raw = reports.tobytes()
        size = len(raw) // max(len(encoded), 1)
        return [raw[i : i + size] for i in range(0, len(raw), size)]


def _g(bounds: tuple[float, float] | None, i: int) -> str:
    return f"{bounds[i]:g}" if bounds is not None else "?"


# --- memoization ----------------------------------------------------------------------
_TAG_CONTEXT = b"ldpkit/memo-tag/v1\x00"
_RNG_CONTEXT = b"ldpkit/memo-rng/v1\x00"


def memo_message(fingerprint: str, value_key: bytes, window_start: int) -> bytes:
    """``fingerprint | value | window start``: what the memo HMACs are computed over."""
    return b"%s|%s|%d" % (fingerprint.encode("ascii"), value_key, window_start)


def memo_tag(secret: bytes, message: bytes) -> bytes:
    """The stored marker that this value was reported in this window (16 bytes).

    Domain-separated from :func:`memo_generator`'s key, so the stored tag is no help in
    recomputing the randomness (which, with the report, would let one test candidate
    values).
    """
    return hmac.digest(secret, _TAG_CONTEXT + message, "sha256")[:16]


def memo_generator(secret: bytes, message: bytes) -> np.random.Generator:
    """The permanent randomness of one (metric version, value, window): numpy's Philox
    keyed with 128 bits of HMAC-SHA256(secret, message)."""
    digest = hmac.digest(secret, _RNG_CONTEXT + message, "sha256")
    return keyed_generator(digest[:16])


_ZERO4 = np.zeros(4, dtype=np.uint64)
_local = threading.local()


def keyed_generator(key: bytes) -> np.random.Generator:
    """A generator equal to ``Generator(Philox(key=int.from_bytes(key, "little")))``.

    Building a Philox object costs about 13 microseconds, a quarter of a report's
    budget, so each thread keeps one and re-keys it (counter and buffer zeroed, exactly
    the state a new one starts in). The generator is valid until the same thread's next
    call: use it at once.
    """
    cached: tuple[np.random.Philox, np.random.Generator] | None = getattr(_local, "philox", None)
    if cached is None:
        bit_generator = np.random.Philox(key=0)
        cached = (bit_generator, np.random.Generator(bit_generator))
        _local.philox = cached
    bit_generator, generator = cached
    bit_generator.state = {
        "bit_generator": "Philox",
        "state": {"counter": _ZERO4, "key": np.frombuffer(key, dtype="<u8").copy()},
        "buffer": _ZERO4,
        "buffer_pos": 4,
        "has_uint32": 0,
        "uinteger": 0,
    }
    return generator
