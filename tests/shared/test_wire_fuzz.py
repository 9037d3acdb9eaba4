"""Property-based tests of the wire decoder: whatever the bytes, ProtocolError or a sane batch.

For every input ``decode_batch`` must either return blocks whose framing is consistent
(checked by :func:`assert_framing`), which re-encode to the same blocks, or raise
:class:`~ldpkit.errors.ProtocolError`: never another exception (the collector turns
ProtocolError into a 400 and anything else into a 500). Inputs: random bytes, valid
batches mutated (bit flips, truncation, insertion, deletion, appended bytes), wrong types
and extreme values in every field, arbitrary msgpack documents, deep nesting, oversized
containers and headers, wrong versions. Valid batches round-trip exactly.

Hypothesis runs derandomized with no example database, so CI sees the same inputs every
time. Every input given to the decoder is counted; the last test prints the total.
"""

from __future__ import annotations

import contextlib
import math
import random
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpkit.errors import ProtocolError
from ldpkit.wire import ID_SIZE, MAX_BUCKET, Block, decode_batch, encode_batch
from ldpkit.wire import LEGACY_VERSION as VERSION  # these inputs are v1 batches
from tests.fuzzing import mutate

SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
FIELDS = ("metric", "fp", "bucket", "ids", "reports")

TRIED = 0
"""Inputs given to decode_batch by this module."""


def assert_framing(blocks: list[Block], max_reports: int, max_blocks: int) -> None:
    """What a returned batch guarantees."""
    assert isinstance(blocks, list)
    assert len(blocks) <= max_blocks
    total = 0
    for b in blocks:
        assert isinstance(b, Block)
        assert type(b.metric) is str and type(b.fingerprint) is str
        assert type(b.bucket) is int and 0 <= b.bucket < MAX_BUCKET
        assert type(b.ids) is bytes and type(b.reports) is bytes
        assert len(b.ids) % ID_SIZE == 0
        n = len(b.ids) // ID_SIZE
        assert b.n == n
        if n:
            assert len(b.reports) % n == 0
        else:
            assert b.reports == b""
        total += n
    assert total <= max_reports


def check(data: Any, *, max_reports: int = 100_000, max_blocks: int = 1000) -> list[Block] | None:
    """Decode ``data``: a consistent batch (returned) or ProtocolError (None)."""
    global TRIED
    TRIED += 1
    try:
        blocks = decode_batch(data, max_reports=max_reports, max_blocks=max_blocks)
    except ProtocolError as exc:
        assert str(exc)  # says what was wrong
        return None
    assert_framing(blocks, max_reports, max_blocks)
    again = decode_batch(encode_batch(blocks), max_reports=max_reports, max_blocks=max_blocks)
    assert again == blocks
    return blocks


def pack(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


def header(kind: int, length: int) -> bytes:
    """A msgpack 32-bit-length header (array 0xdd, map 0xdf, bin 0xc6, str 0xdb, ext 0xc9)."""
    return bytes([kind]) + struct.pack(">I", length)


# --- strategies -------------------------------------------------------------------------
@st.composite
def blocks(draw: st.DrawFn) -> Block:
    n = draw(st.integers(0, 6))
    size = draw(st.integers(1, 24))
    return Block(
        metric=draw(st.text(max_size=40)),
        fingerprint=draw(
            st.one_of(st.text("0123456789abcdef", min_size=16, max_size=16), st.text(max_size=20))
        ),
        bucket=draw(
            st.one_of(st.integers(0, MAX_BUCKET - 1), st.sampled_from([0, MAX_BUCKET - 1]))
        ),
        ids=draw(st.binary(min_size=ID_SIZE * n, max_size=ID_SIZE * n)),
        reports=draw(st.binary(min_size=n * size, max_size=n * size)) if n else b"",
    )


batches = st.lists(blocks(), max_size=4)

INT64 = st.integers(-(2**63), 2**64 - 1)
weird = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.sampled_from([-1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), MAX_BUCKET, MAX_BUCKET - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1.0, 0.0, -0.0, 1e308]),
    st.text(max_size=20),
    st.binary(max_size=40),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), INT64, max_size=3),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8)),
    st.builds(msgpack.Timestamp, st.integers(0, 2**34 - 1), st.integers(0, 999_999_999)),
)

msgpack_docs = st.recursive(
    st.one_of(
        st.none(), st.booleans(), INT64, st.floats(), st.text(max_size=10), st.binary(max_size=20)
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.binary(max_size=4)), children, max_size=5
        ),
        st.dictionaries(st.sampled_from(["v", "blocks", *FIELDS]), children, max_size=6),
    ),
    max_leaves=30,
)


def as_dict(block: Block) -> dict[str, Any]:
    return {
        "metric": block.metric,
        "fp": block.fingerprint,
        "bucket": block.bucket,
        "ids": block.ids,
        "reports": block.reports,
    }


# --- properties -------------------------------------------------------------------------
@settings(max_examples=300, **SETTINGS)
@given(batches)
def test_valid_batches_round_trip_exactly(batch: list[Block]) -> None:
    assert check(encode_batch(batch)) == batch


@settings(max_examples=2000, **SETTINGS)
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    check(data)
    check(bytearray(data))
    check(memoryview(data))


MUTANTS = 25
"""Mutated copies of each generated batch."""


@settings(max_examples=400, **SETTINGS)
@given(batches, st.randoms(use_true_random=False))
def test_mutated_valid_batches(batch: list[Block], rnd: random.Random) -> None:
    base = encode_batch(batch)
    for _ in range(MUTANTS):
        raw = bytearray(base)
        for _ in range(rnd.randint(1, 4)):
            mutate(raw, rnd)
        check(bytes(raw))


@settings(max_examples=700, **SETTINGS)
@given(batches.filter(bool), st.data())
def test_wrong_types_and_extreme_values_in_every_field(
    batch: list[Block], data: st.DataObject
) -> None:
    doc: dict[Any, Any] = {"v": VERSION, "blocks": [as_dict(b) for b in batch]}
    target = data.draw(st.sampled_from(["v", "blocks", "extra", *FIELDS, "drop", "block"]))
    value = data.draw(weird)
    i = data.draw(st.integers(0, len(batch) - 1))
    if target in ("v", "blocks"):
        doc[target] = value
    elif target == "extra":
        doc[data.draw(st.one_of(st.text(max_size=5), st.binary(max_size=5)))] = value
    elif target == "drop":
        del doc["blocks"][i][data.draw(st.sampled_from(FIELDS))]
    elif target == "block":
        doc["blocks"][i] = value
    else:
        doc["blocks"][i][target] = value
    got = check(pack(doc))
    if got is not None:
        # Only a value of the right type (and range) can have been accepted.
        right_type = {"metric": str, "fp": str, "bucket": int, "ids": bytes, "reports": bytes}
        assert (
            target == "extra"
            or (target == "v" and type(value) is int and value == VERSION)
            or (target == "blocks" and value == [])
            or (target in right_type and type(value) is right_type[target])
        ), (target, value)
    # Strings sent as raw (old msgpack spec), and floats as float32 where they fit.
    check(msgpack.packb(doc, use_bin_type=False))
    with contextlib.suppress(OverflowError):
        check(msgpack.packb(doc, use_bin_type=True, use_single_float=True))


@settings(max_examples=600, **SETTINGS)
@given(msgpack_docs)
def test_arbitrary_msgpack_documents(doc: Any) -> None:
    check(pack(doc))
    check(pack({"v": VERSION, "blocks": [doc]}))
    check(pack({"v": VERSION, "blocks": doc}))


@settings(max_examples=200, **SETTINGS)
@given(st.integers(1, 30_000), st.sampled_from(["array", "map", "block", "field"]))
def test_deep_nesting_is_a_protocol_error(depth: int, kind: str) -> None:
    nested = _nested(depth, kind)
    if depth >= 2000:
        with pytest.raises(ProtocolError):
            decode_batch(nested)
    check(nested)


def _nested(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"\x91" * depth + b"\xc0"
    if kind == "map":
        return b"\x81\xa1a" * depth + b"\xc0"
    inner = b"\x91" * depth + b"\x90"
    if kind == "block":
        return b"\x82\xa1v\x01\xa6blocks\x91" + inner
    return b"\x82\xa1v\x01\xa6blocks\x91\x81\xa6metric" + inner


@settings(max_examples=300, **SETTINGS)
@given(st.sampled_from([0xDD, 0xDF, 0xC6, 0xDB, 0xC9, 0xDC, 0xDE]), st.integers(0, 2**32 - 1))
def test_oversized_headers(kind: int, length: int) -> None:
    if kind in (0xDC, 0xDE):
        raw = bytes([kind]) + struct.pack(">H", length & 0xFFFF)
    else:
        raw = header(kind, length)
    check(raw)
    check(raw + b"\x00" * 64)
    check(b"\x82\xa1v\x01\xa6blocks" + raw)
    check(b"\x82\xa1v\x01\xa6blocks\x91\x81\xa3ids" + raw + b"\x00" * 32)


@settings(max_examples=300, **SETTINGS)
@given(weird)
def test_wrong_versions(version: Any) -> None:
    result = check(pack({"v": version, "blocks": []}))
    if type(version) is not int or version != VERSION:
        assert result is None
    else:
        assert result == []


# --- explicit edge cases ----------------------------------------------------------------
@pytest.mark.parametrize("depth", [10_000, 100_000, 1_000_000])
@pytest.mark.parametrize("kind", ["array", "map", "block", "field"])
def test_very_deep_nesting(depth: int, kind: str) -> None:
    with pytest.raises(ProtocolError):
        decode_batch(_nested(depth, kind))
    check(_nested(depth, kind))


def test_limits_are_enforced() -> None:
    one = Block("m", "0" * 16, 0, b"\x01" * ID_SIZE, b"\x02")
    assert check(encode_batch([one] * 1000)) is not None
    assert check(encode_batch([one] * 1001)) is None  # more than max_blocks
    ten = Block("m", "0" * 16, 0, b"\x01" * ID_SIZE * 10, b"\x02" * 10)
    assert check(encode_batch([ten]), max_reports=10) is not None
    assert check(encode_batch([ten, one]), max_reports=10) is None
    assert check(encode_batch([Block("x" * 1024, "f", 0, b"", b"")])) is not None
    assert check(encode_batch([Block("x" * 1025, "f", 0, b"", b"")])) is None
    assert check(encode_batch([Block("é" * 513, "f", 0, b"", b"")])) is None  # 1026 bytes
    many_keys = {"v": VERSION, "blocks": [], **{f"k{i}": i for i in range(15)}}
    assert check(pack(many_keys)) is None  # unknown fields
    too_many_keys = {**many_keys, "k15": 15}
    assert check(pack(too_many_keys)) is None  # 17 keys: over max_map_len
    assert check(pack({"v": VERSION, "blocks": [list(range(1001))]})) is None
    big_bin = header(0xC6, 2**32 - 1) + b"\x00" * 100  # claims 4 GiB, has 100 bytes
    assert check(b"\x82\xa1v\x01\xa6blocks\x91\x85\xa3ids" + big_bin) is None


def test_bucket_range_and_framing_errors() -> None:
    def doc(**fields: Any) -> bytes:
        block = {"metric": "m", "fp": "0" * 16, "bucket": 0, "ids": b"", "reports": b""}
        return pack({"v": VERSION, "blocks": [{**block, **fields}]})

    assert check(doc(bucket=MAX_BUCKET - 1)) is not None
    for bad in (MAX_BUCKET, -1, 2**64 - 1, -(2**63), 1.0, math.nan, True, "0", None):
        assert check(doc(bucket=bad)) is None
    assert check(doc(ids=b"\x00" * 15)) is None  # not a multiple of 16
    assert check(doc(ids=b"\x00" * 32, reports=b"\x00" * 3)) is None  # 3 bytes for 2 reports
    assert check(doc(ids=b"", reports=b"\x00")) is None  # reports without ids
    assert check(doc(ids="x" * 16)) is None  # str, not bin
    assert check(doc(metric=b"m")) is None  # bin, not str


def test_not_bytes_and_odd_buffers() -> None:
    valid = encode_batch([Block("m", "0" * 16, 0, b"\x01" * ID_SIZE, b"\x02\x03")])
    for obj in ("text", None, 12, [1], {"v": 1}):
        assert check(obj) is None
    assert check(bytearray(valid)) is not None
    assert check(memoryview(valid)) is not None
    assert check(memoryview(valid + valid)[: len(valid)]) is not None
    doubled = bytes(x for pair in zip(valid, valid, strict=True) for x in pair)
    assert check(memoryview(doubled)[::2]) == check(valid)  # strided view of the same bytes
    assert len(valid) % 4 == 0
    # Views of 4-byte items once raised BufferError; they are read as their raw bytes.
    assert check(memoryview(valid).cast("I")) == check(valid)
    assert check(memoryview(valid + b"\x00" * 4).cast("I")) is None  # trailing bytes
    assert check(memoryview(valid).cast("c")) == check(valid)
    two_d = memoryview(valid).cast("B", shape=[len(valid) // 4, 4])
    assert check(two_d) == check(valid)


def test_version_must_be_the_integer_1() -> None:
    assert check(pack({"v": 1, "blocks": []})) == []
    # 1.0 == 1 and True == 1 in Python, but neither is the integer 1 on the wire.
    for version in (1.0, True, 1.0000001, "1", b"1", 2, 0, -1, None, [1]):
        assert check(pack({"v": version, "blocks": []})) is None
    assert check(msgpack.packb({"v": 1.0, "blocks": []}, use_single_float=True)) is None
    assert check(pack({"blocks": []})) is None


def test_zz_count_inputs(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in the module: how many inputs the decoder was given (run with -s to see), at
    least 100 for each property test of the module that ran (each asks for 200 or more
    examples): fewer means hypothesis's settings no longer fuzz."""
    with capsys.disabled():
        print(f"\nwire fuzz: {TRIED:,} inputs given to decode_batch")
    fuzzers = [
        item
        for item in request.session.items
        if getattr(item, "module", None) is request.module
        and hasattr(getattr(item, "obj", None), "hypothesis")
    ]
    assert 100 * len(fuzzers) <= TRIED, (TRIED, len(fuzzers))
