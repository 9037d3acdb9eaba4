"""Helpers for testing code built on ldpkit: a deliberately broken mechanism, to show that
a privacy check (:func:`ldpkit.audit.audit`, or your own) can fail."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from .mechanisms import Mechanism

M = TypeVar("M", bound=Mechanism)

__all__ = ["mislabelled"]


def mislabelled(mechanism: M, factor: float) -> M:
    """A copy of ``mechanism`` that perturbs with ``factor * epsilon`` but states ``epsilon``.

    Every derived constant (p, q, the noise scale, ...) comes from the larger epsilon,
    while the ``epsilon`` attribute, the claim under test, keeps the original value: an
    audit of it should fail once ``factor`` is large enough for its sample.
    """
    real = dataclasses.replace(mechanism, epsilon=mechanism.epsilon * factor)
    object.__setattr__(real, "epsilon", mechanism.epsilon)
    return real
