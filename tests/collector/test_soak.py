"""A short soak (benchmarks/soak.py, 15 s): sustained ingest into a real ``ldpkit serve``
beside 16 slow senders and a stream of unknown-metric batches; its RSS and open
descriptors flat after warm-up, the slow uploads cut, no errors for the legitimate load.

The SQLite page cache is set small (``sqlite_cache_mib = 1``) so that it is full within
the warm-up: any memory growth left in the second half would be a leak, not the cache
filling up (see the verdict in benchmarks/soak.py). Latency is not asserted here (it
depends on the machine); the 10-minute figures are in docs/deployment.md.
"""

from __future__ import annotations

from benchmarks.soak import run_soak


def test_short_soak_is_flat_under_hostile_load() -> None:
    lines: list[str] = []
    result = run_soak(
        seconds=15,
        rate=10_000,
        batch=250,
        concurrency=8,
        interval=1.0,
        sqlite_cache_mib=1,
        echo=lines.append,
        slow_senders=16,
        unknown_rate=5,
    )
    table = "\n".join(lines)
    v = result.verdict
    assert result.exit_code == 0, table
    assert v.errors == 0 and not result.errors, (result.errors, table)
    assert result.throttled == 0, table  # the slow senders hold nothing others need
    assert len(result.samples) >= 14, table
    assert v.cache_allowance_mib < 1, table  # the cache was full: strict on memory
    assert v.memory_flat and v.rss_plateau, (v, table)
    assert v.open_files_flat, (v, table)
    assert all(s.threads <= 8 for s in result.samples), table
    assert result.slow_cut >= 16 and result.slow_held_open == 0, table  # each cut with a 408
    assert result.unknown_refused == result.unknown_sent > 0, (result.hostile_errors, table)
