"""Values in, reports out: a metric's codec (check a value, perturb it) and the
permanent (memoized) randomness. No I/O."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..kinds import KindSpec
from ..metrics import MetricDefinition


@dataclass(frozen=True, eq=False)
class MetricCodec:
    """A definition with what the hot path needs precomputed (its kind, its fingerprint)."""

    definition: MetricDefinition
    fingerprint: str
    spec: KindSpec = field(repr=False)
    # Plain copies of what report() reads, so the hot path touches no enum properties.
    name: str = ""
    checked: bool = True  # the kind's KindSpec.checks_values: the mechanism need not again
    epsilon: float = 0.0
    budget: float = 0.0
    bucket_seconds: int = 0
    budget_seconds: int = 0

    @classmethod
    def of(cls, definition: MetricDefinition) -> MetricCodec:
        return cls(
            definition,
            definition.fingerprint,
            definition.kind_spec,
            name=definition.name,
            checked=definition.kind_spec.checks_values,
            epsilon=definition.epsilon,
            budget=definition.effective_budget,
            bucket_seconds=definition.bucket.seconds,
            budget_seconds=definition.budget_period.seconds,
        )

    def encode(self, value: object) -> tuple[int | float, bool]:
        """The mechanism's input for ``value`` and whether it was clipped: the device's one
        check of a value, by its kind (:meth:`ldpkit.kinds.KindSpec.encode`)."""
        return self.spec.encode(self.definition, value)

    def encode_many(self, values: Sequence[object] | npt.ArrayLike) -> npt.NDArray[Any]:
        """Vectorized :meth:`encode` (a bad value is named by its message and position)."""
        return self.spec.encode_many(self.definition, values)

    def value_key(self, encoded: int | float) -> bytes:
        """A fixed-width byte form of an encoded value (the memo key's input)."""
        return self.spec.value_key(encoded)

    def perturb(self, encoded: int | float, rng: np.random.Generator) -> bytes:
        """One perturbed report's bytes."""
        m = self.definition.mechanism_instance
        if self.checked:  # the mechanism's per-value path (the vectorised one's bytes)
            return m.perturb_value(encoded, rng)
        reports = m.perturb(self.spec.as_array([encoded]), rng=rng)
        return bytes(np.ascontiguousarray(reports).tobytes())

    def perturb_many(self, encoded: npt.NDArray[Any], rng: np.random.Generator) -> list[bytes]:
        """Perturbed reports of many (independent) values, one bytes object each."""
        m = self.definition.mechanism_instance
        perturbed = m.perturb_checked(encoded, rng) if self.checked else m.perturb(encoded, rng=rng)
        raw = np.ascontiguousarray(perturbed).tobytes()
        size = len(raw) // max(len(encoded), 1)
        return [raw[i : i + size] for i in range(0, len(raw), size)]


_TAG_CONTEXT = b"ldpkit/memo-tag/v1\x00"
_RNG_CONTEXT = b"ldpkit/memo-rng/v1\x00"


def memo_message(fingerprint: str, value_key: bytes, window_start: int) -> bytes:
    """``fingerprint | value | window start``: what the memo HMACs are computed over."""
    return b"%s|%s|%d" % (fingerprint.encode("ascii"), value_key, window_start)


def memo_tag(secret: bytes, message: bytes) -> bytes:
    """The stored marker that this value was reported in this window (16 bytes).

    Domain-separated from :func:`memo_generator`'s key, so the stored tag is no help in recomputing
    the randomness (which, with the report, would let one test candidate values).
    """
    return hmac.digest(secret, _TAG_CONTEXT + message, "sha256")[:16]


def memo_generator(secret: bytes, message: bytes) -> np.random.Generator:
    """The permanent randomness of one (metric version, value, window): numpy's Philox
    keyed with 128 bits of HMAC-SHA256(secret, message)."""
    return keyed_generator(hmac.digest(secret, _RNG_CONTEXT + message, "sha256")[:16])


class MemoKeys:
    """:func:`memo_tag` and :func:`memo_generator` under one device secret, the same bytes
    at less cost: the HMAC of the secret and each context is computed once, and each
    report's HMACs continue a copy of it (``report()`` makes two per fresh report)."""

    __slots__ = ("_rng", "_tag")

    def __init__(self, secret: bytes) -> None:
        self._tag = hmac.new(secret, _TAG_CONTEXT, "sha256")
        self._rng = hmac.new(secret, _RNG_CONTEXT, "sha256")

    def tag(self, message: bytes) -> bytes:
        """:func:`memo_tag` of ``message``."""
        h = self._tag.copy()
        h.update(message)
        return h.digest()[:16]

    def generator(self, message: bytes) -> np.random.Generator:
        """:func:`memo_generator` of ``message`` (valid until this thread's next one)."""
        h = self._rng.copy()
        h.update(message)
        return keyed_generator(h.digest()[:16])


_local = threading.local()


def keyed_generator(key: bytes) -> np.random.Generator:
    """A generator equal to ``Generator(Philox(key=int.from_bytes(key, "little")))``.

    Building a Philox object costs about 13 microseconds, a quarter of a report's budget, so each
    thread keeps one and re-keys it (counter and buffer zeroed, exactly the state a new one starts
    in). The generator is valid until the same thread's next call: use it at once.
    """
    cached: tuple[np.random.Philox, np.random.Generator] | None = getattr(_local, "philox", None)
    if cached is None:
        bit_generator = np.random.Philox(key=0)
        cached = (bit_generator, np.random.Generator(bit_generator))
        _local.philox = cached
    if len(key) != 16:
        raise ValueError(f"a Philox key is 16 bytes, got {len(key)}")
    bit_generator, generator = cached
    # Python integers in lists: the state setter converts them in half the time it takes
    # to copy numpy arrays in (3 microseconds a report).
    state: Any = {  # numpy types it as arrays; it converts lists of integers alike
        "bit_generator": "Philox",
        "state": {
            "counter": [0, 0, 0, 0],
            "key": [int.from_bytes(key[:8], "little"), int.from_bytes(key[8:16], "little")],
        },
        "buffer": [0, 0, 0, 0],
        "buffer_pos": 4,
        "has_uint32": 0,
        "uinteger": 0,
    }
    bit_generator.state = state
    return generator
