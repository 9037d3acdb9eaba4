"""What storing each sealed batch's per-block counts costs on disk (issue 29).

    .venv/bin/python benchmarks/batch_counts.py                 # SQLite
    .venv/bin/python benchmarks/batch_counts.py --postgres postgresql://postgres@127.0.0.1/postgres

Since SQLite schema 7 (PostgreSQL migration 6) the collector keeps, beside each sealed
batch id's bitmap of the block indexes it counted, ``counts``: the reports it counted per
block index (uint32 LE), so that a replayed id claims no more duplicates than it counted.
This fills the ``batches`` table exactly as the collector does (its own schema, its own
``INSERT``, the rows made by ``block_bitmap`` and ``block_counts``) with ``--batches``
random ids of 1, 4 and 16 blocks, once with the counts and once with them NULL (the rows
stored before the migration), and prints the table's size per batch, with and without,
and the difference per report for batches of 1, 10 and 500 reports (a device's batch, a
small relay's, the default ``batch_size``). SQLite: the file after a full checkpoint and
VACUUM (the table is the only one with rows); PostgreSQL: ``pg_total_relation_size`` of
the table and its index after VACUUM, in a schema of its own dropped after.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from ldpkit.collector.sqlite_store import SCHEMA
from ldpkit.collector.store import block_bitmap, block_counts

BUCKET = 1_763_683_200
BLOCKS = (1, 4, 16)
REPORTS = (1, 10, 500)

Row = tuple[bytes, int, bytes, bytes | None]


def rows(n: int, blocks: int, reports: int, *, counts: bool) -> list[Row]:
    """``n`` batches of ``blocks`` blocks sharing ``reports`` reports, as the collector
    stores them (with or without the counts)."""
    per = [(i, reports // blocks + (i < reports % blocks)) for i in range(blocks)]
    bitmap, made = block_bitmap(i for i, _ in per), block_counts(per)
    return [(os.urandom(16), BUCKET, bitmap, made if counts else None) for _ in range(n)]


def sqlite_size(batch_rows: list[Row]) -> int:
    """Bytes of a collector SQLite file holding ``batch_rows`` in ``batches``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "collector.sqlite"
        conn = sqlite3.connect(path)
        conn.executescript(SCHEMA)
        empty = path.stat().st_size
        with conn:
            conn.executemany(
                "INSERT OR IGNORE INTO batches (id, bucket, blocks, counts) VALUES (?, ?, ?, ?)",
                batch_rows,
            )
        conn.execute("VACUUM")
        conn.close()
        return path.stat().st_size - empty


def postgres_size(url: str) -> Callable[[list[Row]], int]:
    """Bytes of the PostgreSQL ``batches`` table (migration 3's, with migration 6's column)
    and its primary key holding the rows."""
    import psycopg

    def size(batch_rows: list[Row]) -> int:
        schema = f"ldpkit_bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
            try:
                conn.execute(
                    f"CREATE TABLE {schema}.batches (id uuid PRIMARY KEY, bucket bigint NOT "
                    "NULL, blocks bytea NOT NULL, counts bytea)"
                )
                with conn.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {schema}.batches VALUES (%s, %s, %s, %s)",
                        [(uuid.UUID(bytes=r[0]), r[1], r[2], r[3]) for r in batch_rows],
                    )
                conn.execute(f"VACUUM {schema}.batches")
                got = conn.execute(f"SELECT pg_total_relation_size('{schema}.batches')").fetchone()
                return int(got[0]) if got else 0
            finally:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")

    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20_000)
    parser.add_argument("--postgres", help="a PostgreSQL URL: measure there too")
    args = parser.parse_args()
    stores: list[tuple[str, Callable[[list[Row]], int]]] = [("SQLite", sqlite_size)]
    if args.postgres:
        stores.append(("PostgreSQL", postgres_size(args.postgres)))
    n = args.batches
    print(f"{n} sealed batches; bytes of the batches table per batch, and the counts' share")
    print(
        f"{'store':<10} {'blocks':>6} {'without':>8} {'with':>8} {'extra':>6} "
        + " ".join(f"{f'/report@{r}':>12}" for r in REPORTS)
    )
    for name, size in stores:
        for blocks in BLOCKS:
            without = size(rows(n, blocks, 500, counts=False)) / n
            with_counts = size(rows(n, blocks, 500, counts=True)) / n
            extra = with_counts - without
            per = " ".join(f"{extra / r:>12.3f}" if r >= blocks else f"{'-':>12}" for r in REPORTS)
            print(f"{name:<10} {blocks:>6} {without:>8.1f} {with_counts:>8.1f} {extra:>6.1f} {per}")


if __name__ == "__main__":
    main()
