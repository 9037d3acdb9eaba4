"""The host's speed right now, printed beside benchmark figures.

This machine is shared and its speed swings (up to 2x within minutes): a figure under its
target may be a slow host, not slow code. The yardstick is the CPU time of one raw word of
production's AES-128-CTR keystream, about 1.0 ns on the reference machine when quiet.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from ldpkit.randomness import KeystreamWords

QUIET_NS_PER_WORD = 1.0


def ns_per_word(draw: Callable[[int], Any], words: int = 1 << 20, runs: int = 5) -> float:
    """CPU ns per raw word of ``draw(count)``: median of runs, after one warm-up call."""
    draw(1024)
    times = []
    for _ in range(runs):
        start = time.process_time()
        draw(words)
        times.append(time.process_time() - start)
    return statistics.median(times) / words * 1e9


def yardstick() -> str:
    """One line: the keystream word's cost now against the quiet reference."""
    return (
        f"host yardstick: an AES keystream word costs {ns_per_word(KeystreamWords(bytes(16))):.2f}"
        f" ns of CPU now (about {QUIET_NS_PER_WORD:.1f} on the reference machine when quiet)"
    )
