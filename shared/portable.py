"""The portable sampling rules of docs/protocol.md: one report from a stream of words.

A client in another language cannot reproduce numpy's vectorised samplers, and need not:
the protocol fixes each report's *law* and a procedure any language can run to realize it
exactly, one report at a time on uniform 32-bit words (``ldpkit.mechanisms._portable``),
with the constants that need ``exp``/``log`` served in the definition (``"derived"``).
Each mechanism states its own (:meth:`~ldpkit.mechanisms.Mechanism.served_constants`,
:meth:`~ldpkit.mechanisms.Mechanism.portable_report`); this module runs them. The same
words give the same bytes in every language: docs/protocol.md holds vectors made here
(``tests/shared/test_sampling_vectors.py``). ldpkit's own client samples the same laws
with numpy (same distribution, not the same bytes); ``ldpkit.conformance`` checks any
client's reports against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import ParameterError
from .mechanisms import REGISTERED, Mechanism, mechanism_class
from .mechanisms._portable import (
    TWO32,
    TWO64,
    Words,
    WordSource,
    discrete_gaussian,
    discrete_laplace,
    hex64,
    os_words,
    splitmix64,
    word_list,
)


def derived_parameters(m: Mechanism) -> dict[str, Any]:
    """What a client needs beyond the definition to sample ``m``'s reports exactly
    (:meth:`~ldpkit.mechanisms.Mechanism.served_constants`)."""
    derived = m.served_constants()
    if derived is None:
        raise ParameterError(f"no portable sampling rule for mechanism {m.name!r}")
    return derived


def perturb(definition: Mapping[str, Any], value: Any, words: WordSource) -> bytes:
    """One report's bytes for a mechanism input, following docs/protocol.md.

    ``definition`` is the served JSON object (``resolved_mechanism``, ``categories`` or
    ``bounds``, ``derived``); ``value`` is the item index (categorical) or the number
    (numeric, clipped to the bounds here), the cell index or the string.
    """
    cls = mechanism_class(definition["resolved_mechanism"])
    return cls.portable_report(definition, value, Words(words))


def perturb_many(
    definition: Mapping[str, Any], values: Any, words: WordSource | None = None
) -> bytes:
    """Reports for many values, one after the other on one word stream (OS by default)."""
    source = os_words() if words is None else words
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return b"".join(perturb(definition, v, source) for v in items)


def __getattr__(name: str) -> Any:
    # MECHANISMS, every mechanism with a portable rule in registry order, is found on use:
    # listing them loads every mechanism module.
    if name != "MECHANISMS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    base = Mechanism.served_constants  # a mechanism that overrides it has a portable rule
    return tuple(n for n in REGISTERED if mechanism_class(n).served_constants is not base)


__all__ = [
    "TWO32",
    "TWO64",
    "WordSource",
    "Words",
    "derived_parameters",
    "discrete_gaussian",
    "discrete_laplace",
    "hex64",
    "os_words",
    "perturb",
    "perturb_many",
    "splitmix64",
    "word_list",
]
