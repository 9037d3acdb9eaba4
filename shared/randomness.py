"""Where randomness comes from.

On a device, perturbation must be unpredictable to anyone who sees the report. By
default every call draws a fresh 128-bit key from the operating system's CSPRNG
(:func:`os.urandom`) and runs numpy's Philox counter-based generator under it. Philox is
a keyed bijection in the style of a block cipher, so its outputs reveal nothing useful
about the key, and a fresh key per call means no state is shared between reports.

Tests and simulations pass their own seeded :class:`numpy.random.Generator` instead, so
that results are reproducible. Nothing in ldpkit uses a global random state.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import ParameterError


def os_generator() -> np.random.Generator:
    """A new generator keyed with 128 fresh bits from the OS CSPRNG."""
    key = int.from_bytes(os.urandom(16), "little")
    return np.random.Generator(np.random.Philox(key=key))


def resolve_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """Return ``rng`` when given, else a fresh generator fed from the OS CSPRNG."""
    if rng is None:
        return os_generator()
    if not isinstance(rng, np.random.Generator):
        raise ParameterError(
            f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}"
        )
    return rng
