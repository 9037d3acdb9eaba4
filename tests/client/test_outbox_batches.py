"""DeviceStore.acknowledge_batch: a whole sealed batch leaves the outbox by its id."""

from __future__ import annotations

import os
from pathlib import Path

from ldpkit.client.storage import DeviceStore


def _queue(store: DeviceStore, spent: int, unmetered: int) -> None:
    with store.transaction():
        for i in range(spent):  # spent budget: the row keeps its ledger columns
            store.add_report(
                os.urandom(16), "m", "f" * 16, 0, bytes([i]) * 4, tag=None, epsilon=0.5,
                budget_seconds=86400, window_start=0, total_seconds=86400, total_start=0,
            )  # fmt: skip
        store.add_unmetered([(os.urandom(16), "m", "f" * 16, 0, b"\1" * 4)] * unmetered)


def test_a_whole_batch_leaves_by_its_id(tmp_path: Path) -> None:
    store = DeviceStore(tmp_path)
    _queue(store, spent=3, unmetered=4)
    rows = store.oldest(100)
    store.seal([rows[:5], rows[5:]])
    first = store.sealed_batch()
    assert first is not None and first.n == 5
    # One of its rows was acknowledged meanwhile (another process): it is not counted again.
    store.acknowledge([(first.seqs[0], first.report_ids[0])])
    assert store.acknowledge_batch(first.batch_id) == 4
    second = store.sealed_batch()
    assert second is not None and second.batch_id != first.batch_id and second.n == 2
    assert store.outbox_rows() == 2
    assert store.acknowledge_batch(second.batch_id) == 2
    assert store.sealed_batch() is None and store.outbox_rows() == 0
    # The spent rows stay for the ledger (report dropped, no longer sealed); the others go.
    left = store.db.execute("SELECT count(*), count(report), count(sealed) FROM reports")
    assert left.fetchone() == (3, 0, 0)
    assert store.acknowledge_batch(first.batch_id) == 0  # answered twice: nothing left
