"""The UTF-8 automaton (RFC 3629): which byte strings are text an honest client can send.

Used by ``prefix_sketch`` to refuse non-text values and by its decoder to prune, during
the walk, every prefix that cannot complete to valid UTF-8 of its length.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# The UTF-8 automaton (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
# States: 0 at a character boundary; 1-3 that many continuation bytes (80-BF) still due;
# 4-7 the restricted second byte of E0 (A0-BF), ED (80-9F), F0 (90-BF), F4 (80-8F); 8 rejected.
UTF8_REJECT = 8
UTF8_DUE = np.array([0, 1, 2, 3, 2, 2, 3, 3, 255], dtype=np.int64)
"""Bytes still due in each state before the next character boundary (255: never)."""


def _utf8_table() -> npt.NDArray[np.uint8]:
    table = np.full((9, 256), UTF8_REJECT, dtype=np.uint8)
    start = table[0]
    start[0x00:0x80] = 0
    start[0xC2:0xE0] = 1
    start[0xE0], start[0xED], start[0xF0], start[0xF4] = 4, 5, 6, 7
    start[0xE1:0xED] = start[0xEE:0xF0] = 2
    start[0xF1:0xF4] = 3
    for state, nxt in ((1, 0), (2, 1), (3, 2)):
        table[state, 0x80:0xC0] = nxt
    table[4, 0xA0:0xC0] = table[5, 0x80:0xA0] = 1
    table[6, 0x90:0xC0] = table[7, 0x80:0x90] = 2
    table.flags.writeable = False
    return table


UTF8_NEXT = _utf8_table()
"""``UTF8_NEXT[state, byte]``: the automaton's next state."""


def utf8_states(keys: npt.NDArray[np.uint8], upto: int) -> npt.NDArray[np.uint8]:
    """The automaton's state after bytes ``1 .. upto`` of each key (a loop over positions)."""
    state = np.zeros(keys.shape[0], dtype=np.uint8)
    for position in range(1, upto + 1):
        state = UTF8_NEXT[state, keys[:, position]]
    return state


def valid_utf8(keys: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    """Whether each key's string is valid UTF-8 (bytes past its length are zero: ASCII).
    Only keys holding a byte of 0x80 or more are run through the automaton (the length
    byte is at most 64): ASCII, most reports, costs one pass."""
    out = np.ones(keys.shape[0], dtype=bool)
    rows = np.flatnonzero(keys.max(axis=1, initial=0) >= 0x80)
    if rows.size:
        out[rows] = utf8_states(keys[rows], keys.shape[1] - 1) == 0
    return out
