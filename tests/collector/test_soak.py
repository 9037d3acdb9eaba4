"""A short soak (benchmarks/soak.py, 15 s): sustained ingest into a real ``ldpkit serve``
with its RSS and open descriptors flat after warm-up, and no errors.

The SQLite page cache is set small (``sqlite_cache_mib = 1``) so that it is full within
the warm-up: any memory growth left in the second half would be a leak, not the cache
filling up (see the verdict in benchmarks/soak.py). The 2-minute figures are in
docs/deployment.md.
"""

from __future__ import annotations

from benchmarks.soak import run_soak


def test_short_soak_is_flat() -> None:
    lines: list[str] = []
    result = run_soak(
        seconds=15,
        rate=10_000,
        batch=250,
        concurrency=8,
        interval=1.0,
        sqlite_cache_mib=1,
        echo=lines.append,
    )
    table = "\n".join(lines)
    v = result.verdict
    assert result.exit_code == 0, table
    assert v.errors == 0 and not result.errors, (result.errors, table)
    assert len(result.samples) >= 14, table
    assert result.reports / result.seconds > 8_000, table  # it kept up with the offered rate
    assert v.cache_allowance_mib < 1, table  # the cache was full: strict on memory
    assert v.memory_flat, (v, table)
    assert v.open_files_flat, (v, table)
    assert all(s.threads <= 8 for s in result.samples), table
