"""Where randomness comes from.

On a device, perturbation must be unpredictable to anyone who sees the report. By
default every call draws fresh keys from the operating system's CSPRNG
(:func:`os.urandom`) into a :class:`KeyedGenerator`: numpy's ``Generator`` over Philox (a
keyed bijection in the style of a block cipher) for numpy's distributions, and the
AES-128 keystream in counter mode for the raw 64-bit words the samplers consume
(``mechanisms._bits.rng_words``: the bit vectors of unary encoding and subset selection,
and the coins and hashes of the other categorical mechanisms). AES-CTR under a secret key
is a standard CSPRNG construction (NIST SP 800-90A's CTR_DRBG is built on it), and with
AES instructions (OpenSSL, through the ``cryptography`` package) it gives a word in about
1.0 ns where Philox takes about 4.4 (``benchmarks/mechanisms.py --word-sources``). A fresh
key per call means no state is shared between calls.

Tests and simulations pass their own seeded :class:`numpy.random.Generator` instead, so
that results are reproducible. Nothing in ldpkit uses a global random state.
"""

from __future__ import annotations

import os
import threading
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from .errors import ParameterError

KEY_SIZE = 32
"""Bytes of a :class:`KeyedGenerator`'s key: 16 for Philox, 16 for AES-128."""


class KeystreamWords:
    """Raw 64-bit words: the AES-128 keystream in counter mode (counter from zero).

    Called as ``words(count)``, it returns the next ``count`` words (little-endian, 8 keystream
    bytes each) as a new array. Safe to share between threads (a lock orders the calls).
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != 16:
            raise ParameterError("an AES-128 key is 16 bytes")
        # Imported here: 30 ms that only bulk perturbation needs.
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        self._encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
        self._zeros = bytes(1 << 16)
        self._lock = threading.Lock()

    def __call__(self, count: int) -> npt.NDArray[np.uint64]:
        if not isinstance(count, (int, np.integer)) or count < 0:
            raise ParameterError(f"count must be a non-negative integer, got {count!r}")
        nbytes = 8 * int(count)
        # update_into wants room for one block more than it writes.
        out = np.empty(int(count) + 2, dtype=np.uint64)
        with self._lock:
            if nbytes > len(self._zeros):
                self._zeros = bytes(nbytes)
            # (numpy arrays are buffers; the stubs do not say so)
            self._encryptor.update_into(
                memoryview(self._zeros)[:nbytes], cast(Any, out.view(np.uint8))
            )
        return out[: int(count)]


class KeyedGenerator(np.random.Generator):
    """numpy's ``Generator`` (Philox) plus :attr:`words`, an AES-128-CTR keystream keyed
    independently: the raw words of the bit-vector samplers (``_bits.rng_words``), while
    everything else (``random``, ``integers``, ...) draws from Philox.

    Parameters
    ----------
    key : bytes
        :data:`KEY_SIZE` bytes: the first 16 key Philox, the last 16 the keystream. Secret
        and fresh from the OS CSPRNG in production (:func:`os_generator`); fixed in
        benchmarks and tests that want a reproducible run.
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_SIZE:
            raise ParameterError(f"a KeyedGenerator key is {KEY_SIZE} bytes")
        super().__init__(np.random.Philox(key=int.from_bytes(key[:16], "little")))
        self.words = KeystreamWords(key[16:])

    def __reduce__(self) -> Any:
        raise TypeError("a KeyedGenerator cannot be pickled (its keystream state is not kept)")


def os_generator() -> np.random.Generator:
    """A new :class:`KeyedGenerator` keyed with fresh bytes from the OS CSPRNG."""
    return KeyedGenerator(os.urandom(KEY_SIZE))


def resolve_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """Return ``rng`` when given, else a fresh generator fed from the OS CSPRNG."""
    if rng is None:
        return os_generator()
    if not isinstance(rng, np.random.Generator):
        raise ParameterError(
            f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}"
        )
    return rng
