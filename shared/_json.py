"""JSON from the network, parsed within bounds, and numbers for JSON answers.

``json.loads`` recurses once per nesting level: a body of 100,000 ``[`` raises
RecursionError (not ValueError), and with a raised recursion limit it can overflow the C
stack. :func:`loads_bounded` measures the nesting first, without recursion, and refuses
documents nested deeper than ``max_depth``, not UTF-8, or holding NaN or infinities;
every refusal is a :class:`~ldpkit.errors.ProtocolError`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import ProtocolError

MAX_DEPTH = 32
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _refuse_constant(name: str) -> Any:
    raise ProtocolError(f"{name} is not a JSON number")


def nesting_exceeds(text: str, max_depth: int) -> bool:
    """Whether ``text`` nests arrays/objects deeper than ``max_depth`` (or its brackets do
    not balance): strings are dropped, then innermost bracket pairs are removed one level
    per pass, at most ``max_depth`` passes (each linear in the text)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(max_depth):
        if not brackets:
            return False
        reduced = brackets.replace("[]", "").replace("{}", "")
        if reduced == brackets:
            return True  # unbalanced or mismatched
        brackets = reduced
    return bool(brackets)


def loads_bounded(data: bytes | bytearray | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` for untrusted input (see the module docstring)."""
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    else:
        text = data
    if nesting_exceeds(text, max_depth):
        raise ProtocolError(f"nested deeper than {max_depth} levels, or unbalanced brackets")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(str(exc)[:200]) from None


def finite_or_none(x: float) -> float | None:
    """``x`` as a JSON number: None (``null``) when it is not finite (JSON has no NaN)."""
    return float(x) if math.isfinite(x) else None
