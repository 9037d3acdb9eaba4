"""Helpers shared by the fuzz suites (wire decoder, HTTP ingest)."""

from __future__ import annotations

import random

# msgpack type bytes that change how what follows is read
SPECIAL_BYTES = (0xC0, 0xC1, 0xC2, 0xC3, 0xCA, 0xCB, 0xCF, 0xD3, 0xDD, 0xDF, 0xC6, 0xDB, 0xFF)


def mutate(raw: bytearray, rnd: random.Random) -> None:
    """One random edit: bit flip, byte overwrite, truncation, append, insert or delete."""
    op = rnd.choice(["flip", "byte", "special", "truncate", "append", "insert", "delete"])
    at = rnd.randrange(len(raw)) if raw else 0
    if op == "flip" and raw:
        raw[at] ^= 1 << rnd.randrange(8)
    elif op == "byte" and raw:
        raw[at] = rnd.randrange(256)
    elif op == "special" and raw:
        raw[at] = rnd.choice(SPECIAL_BYTES)
    elif op == "truncate":
        del raw[at:]
    elif op == "append":
        raw += rnd.randbytes(rnd.randint(1, 20))
    elif op == "insert":
        raw[at:at] = rnd.randbytes(rnd.randint(1, 20))
    elif op == "delete":
        del raw[at : at + rnd.randint(1, 20)]
