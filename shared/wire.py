"""Wire format: perturbed reports in msgpack, column by column.

One encoder and one decoder for client and collector alike. The format is specified,
with byte-level test vectors, in ``docs/protocol.md``; this module is its reference
implementation. A v2 (*sealed*) batch is a msgpack map::

    {"v": 2,
     "batch": <bin 16>,                  # random 128-bit batch id, drawn when first sent
     "blocks": [                         # one block per (metric, fingerprint, bucket)
        {"metric": "theme",              # metric name
         "fp": "4e1eb7ea0ddd3f92",       # fingerprint of the metric's parameters (16 hex)
         "bucket": 1763683200,           # start of the report's time bucket, unix seconds UTC
         "n": 2,                         # number of reports
         "reports": <bin size*n>},       # n reports, rows of the mechanism's report dtype
        ...]}

The client resends a sealed batch byte for byte until it is answered; the collector
counts each batch id once. Version 1 (deprecated, still decoded) has no batch id and
instead one random 16-byte id per report: ``"ids": <bin 16*n>`` in place of ``"n"``.

Reports are the raw little-endian bytes of a numpy array of the mechanism's
``report_dtype`` (``reports.tobytes()``), so a block decodes with one ``np.frombuffer``
and no Python loop per report. A batch carries no user or device id, no raw value and no
timestamp finer than the metric's bucket.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt

from .errors import ProtocolError

VERSION = 2
LEGACY_VERSION = 1  # per-report ids; decoded for clients not yet upgraded
VERSIONS = (LEGACY_VERSION, VERSION)
ID_SIZE = 16  # a v1 report id, a v2 batch id
CONTENT_TYPE = "application/vnd.ldpkit.v2+msgpack"
LEGACY_CONTENT_TYPE = "application/vnd.ldpkit.v1+msgpack"
FINGERPRINT_PATTERN = re.compile(r"^[0-9a-f]{16}$")
MAX_BUCKET = 2**40  # far beyond any real date; keeps bucket arithmetic in int64


@dataclass(frozen=True)
class Block:
    """The reports of one metric version and one time bucket."""

    metric: str
    fingerprint: str
    bucket: int
    ids: bytes  # v1 only: a 16-byte id per report; empty in a sealed (v2) block
    reports: bytes
    count: int | None = None  # v2: the number of reports (v1: given by ``ids``)

    @property
    def n(self) -> int:
        return self.count if self.count is not None else len(self.ids) // ID_SIZE

    def report_array(self, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """The reports as a numpy array of ``dtype``; ProtocolError if the sizes disagree."""
        if len(self.reports) != self.n * dtype.itemsize:
            raise ProtocolError(
                f"block {self.metric!r}: {len(self.reports)} bytes of reports for {self.n} ids, "
                f"expected {self.n * dtype.itemsize} ({dtype.itemsize} per report)"
            )
        return np.frombuffer(self.reports, dtype=dtype)

    def id_list(self) -> list[bytes]:  # v1
        """The report ids, 16 bytes each."""
        ids = self.ids
        return [ids[i : i + ID_SIZE] for i in range(0, len(ids), ID_SIZE)]


@dataclass(frozen=True)
class Batch:
    """A decoded batch: its version, its batch id (v2; None in v1) and its blocks."""

    version: int
    batch_id: bytes | None
    blocks: list[Block]

    @property
    def n(self) -> int:
        return sum(b.n for b in self.blocks)


def sealed_block(metric: str, fingerprint: str, bucket: int, reports: npt.NDArray[Any]) -> Block:
    """A v2 block from a report array."""
    array = np.ascontiguousarray(reports)
    return Block(metric, fingerprint, int(bucket), b"", array.tobytes(), len(array))


def encode_sealed_batch(batch_id: bytes, blocks: Sequence[Block]) -> bytes:
    """The msgpack bytes of a v2 batch (``batch_id``: 16 random bytes)."""
    if len(batch_id) != ID_SIZE:
        raise ProtocolError(f"a batch id is {ID_SIZE} bytes, got {len(batch_id)}")
    return _pack({"v": VERSION, "batch": bytes(batch_id)}, blocks, "n")


def make_block(
    metric: str, fingerprint: str, bucket: int, ids: bytes, reports: npt.NDArray[Any]
) -> Block:
    """A v1 block from a report array; ``ids`` holds 16 bytes per report."""
    array = np.ascontiguousarray(reports)
    if len(ids) != ID_SIZE * len(array):
        raise ProtocolError(
            f"{len(array)} reports need {ID_SIZE * len(array)} id bytes, got {len(ids)}"
        )
    return Block(metric, fingerprint, int(bucket), bytes(ids), array.tobytes())


def encode_batch(blocks: Sequence[Block]) -> bytes:
    """The msgpack bytes of a v1 batch (deprecated: per-report ids)."""
    return _pack({"v": LEGACY_VERSION}, blocks, "ids")


def _pack(head: dict[str, Any], blocks: Sequence[Block], own: str) -> bytes:
    """msgpack of ``head`` and the blocks; ``own`` is the version's own field ("n" or
    "ids"), fourth in each block (the key order is part of the bytes)."""
    rows = [
        {
            "metric": b.metric,
            "fp": b.fingerprint,
            "bucket": b.bucket,
            own: getattr(b, own),
            "reports": b.reports,
        }
        for b in blocks
    ]
    packed: bytes = msgpack.packb({**head, "blocks": rows}, use_bin_type=True)
    return packed


def _field(block: dict[Any, Any], key: str, kind: type, index: int) -> Any:
    if key not in block:
        raise ProtocolError(f"block {index}: missing field {key!r}")
    value = block[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProtocolError(
            f"block {index}: field {key!r} must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _unique_map(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A msgpack map as a dict, refusing a key given twice (the last would silently win)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[Any] = set()
        for key, _ in pairs:
            if key in seen:
                raise ProtocolError(f"duplicate key {str(key)[:40]!r} in a msgpack map")
            seen.add(key)
    return out


def decode_batch(
    data: bytes | bytearray | memoryview, *, max_reports: int = 100_000, max_blocks: int = 1000
) -> list[Block]:
    """The blocks of a v1 or v2 batch (see :func:`decode`)."""
    return decode(data, max_reports=max_reports, max_blocks=max_blocks).blocks


def decode(
    data: bytes | bytearray | memoryview, *, max_reports: int = 100_000, max_blocks: int = 1000
) -> Batch:
    """Decode and check the framing of a batch (not the reports' contents).

    Raises ProtocolError, saying what was wrong, for anything that is not a v1 or v2
    batch (a map holding a key twice included).
    """
    version, batch_id, blocks_raw = _head(_unpack(data, max_blocks))
    sealed = version == VERSION
    blocks: list[Block] = []
    total = 0
    for i, raw in enumerate(blocks_raw):
        block = _block(raw, i, sealed, max_reports)
        total += block.n
        if total > max_reports:
            raise ProtocolError(f"batch holds more than {max_reports} reports")
        blocks.append(block)
    return Batch(version, batch_id, blocks)


def _unpack(data: bytes | bytearray | memoryview, max_blocks: int) -> Any:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ProtocolError(f"a batch must be bytes, got {type(data).__name__}")
    if isinstance(data, memoryview) and data.itemsize != 1:
        data = data.tobytes()  # msgpack refuses views of multi-byte items (BufferError)
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_array_len=max_blocks,
            max_map_len=16,
            max_str_len=1024,
            object_pairs_hook=_unique_map,
        )
    except msgpack.ExtraData:
        raise ProtocolError("trailing bytes after the msgpack batch") from None
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise ProtocolError(f"body is not valid msgpack: {exc}") from None


def _head(obj: Any) -> tuple[int, bytes | None, list[Any]]:
    """A batch map's version, batch id (v2) and raw blocks."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"a batch must be a msgpack map, got {type(obj).__name__}")
    version = obj.get("v")
    if type(version) is not int or version not in VERSIONS:  # not True, not 1.0
        raise ProtocolError(
            f"unsupported protocol version {version!r}; this collector speaks v2 (and v1)"
        )
    sealed = version == VERSION
    blocks_raw = obj.get("blocks")
    if not isinstance(blocks_raw, list):
        raise ProtocolError("field 'blocks' must be an array of blocks")
    if unknown := _unknown(obj, _BATCH_FIELDS[sealed]):
        raise ProtocolError(f"unknown batch fields: {unknown}")
    if not sealed:
        return version, None, blocks_raw
    batch_id = obj.get("batch")
    if not isinstance(batch_id, bytes) or len(batch_id) != ID_SIZE:
        raise ProtocolError(f"a v2 batch needs field 'batch': its {ID_SIZE}-byte batch id")
    return version, batch_id, blocks_raw


def _block(raw: Any, i: int, sealed: bool, max_reports: int) -> Block:
    """Block ``i`` of a v2 (``sealed``) or v1 batch."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"block {i}: must be a map, got {type(raw).__name__}")
    if unknown := _unknown(raw, _BLOCK_FIELDS[sealed]):
        raise ProtocolError(f"block {i}: unknown fields {unknown}")
    metric = _field(raw, "metric", str, i)
    fp = _field(raw, "fp", str, i)
    bucket = _field(raw, "bucket", int, i)
    reports = _field(raw, "reports", bytes, i)
    if not 0 <= bucket < MAX_BUCKET:
        raise ProtocolError(f"block {i}: bucket {bucket} is out of range")
    if sealed:
        ids, count = b"", _count(raw, i, max_reports)
        n = count
    else:
        ids, count = _ids(raw, i), None
        n = len(ids) // ID_SIZE
    if n and len(reports) % n:
        raise ProtocolError(
            f"block {i}: {len(reports)} bytes of reports do not split into {n} equal reports"
        )
    if not n and reports:
        raise ProtocolError(f"block {i}: reports without {'a count' if sealed else 'ids'}")
    return Block(metric, fp, bucket, ids, reports, count)


# A map's fields by whether the batch is sealed (v2): the batch's, a block's.
_BATCH_FIELDS = {True: frozenset(("v", "batch", "blocks")), False: frozenset(("v", "blocks"))}
_BLOCK_FIELDS = {
    sealed: frozenset(("metric", "fp", "bucket", "n" if sealed else "ids", "reports"))
    for sealed in (True, False)
}


def _unknown(fields: dict[Any, Any], known: frozenset[str]) -> str:
    """The fields of a map not in ``known``, sorted and joined ("" if none)."""
    extra = fields.keys() - known
    return ", ".join(sorted(str(k) for k in extra)) if extra else ""


def _count(raw: dict[Any, Any], i: int, max_reports: int) -> int:  # v2
    n: int = _field(raw, "n", int, i)
    if not 0 <= n <= max_reports:
        raise ProtocolError(f"block {i}: n = {n} is out of range")
    return n


def _ids(raw: dict[Any, Any], i: int) -> bytes:  # v1
    ids: bytes = _field(raw, "ids", bytes, i)
    if len(ids) % ID_SIZE:
        raise ProtocolError(f"block {i}: ids length {len(ids)} is not a multiple of {ID_SIZE}")
    return ids
