"""The client's side of the protocol, no I/O: queued reports grouped into wire batches
(sealed v2 batches; v1 for reports queued before the upgrade),
the collector's answers read into outcomes (delivered, retry, too large, fatal), and the
served definitions parsed."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC
from typing import NamedTuple

from .._json import loads_bounded
from .._validation import shown
from ..errors import CollectorRejected, LdpkitError, ProtocolError
from ..http import HttpAnswer, error_of, transient
from ..metrics import MetricDefinition
from ..wire import (
    CONTENT_TYPE,
    ID_SIZE,
    LEGACY_CONTENT_TYPE,
    Block,
    encode_batch,
    encode_sealed_batch,
)


class OutboxRow(NamedTuple):
    """One queued report, as the outbox stores it (a named tuple: the flush path makes
    one per queued report, and a frozen dataclass cost several times more to build)."""

    seq: int
    report_id: bytes
    metric: str
    fingerprint: str
    bucket: int
    report: bytes


@dataclass(frozen=True)
class OutgoingBatch:
    """A request body and, in wire order, the outbox rows it carries. ``batch_id``: the
    id of a sealed (v2) batch, None for a v1 batch (reports queued before the upgrade,
    sent with their report ids)."""

    body: bytes
    seqs: tuple[int, ...]
    blocks: int
    report_ids: tuple[bytes, ...] = ()
    batch_id: bytes | None = None

    @property
    def content_type(self) -> str:
        return CONTENT_TYPE if self.batch_id is not None else LEGACY_CONTENT_TYPE

    @property
    def keys(self) -> tuple[tuple[int, bytes], ...]:
        """(seq, report id) of every row, in wire order."""
        return tuple(zip(self.seqs, self.report_ids, strict=True))

    @property
    def n(self) -> int:
        return len(self.seqs)

    @classmethod
    def of(
        cls, body: bytes, blocks: list[Block], rows: list[OutboxRow], batch_id: bytes | None = None
    ) -> OutgoingBatch:
        seqs, report_ids = tuple(r.seq for r in rows), tuple(r.report_id for r in rows)
        return cls(body, seqs, len(blocks), report_ids, batch_id)


def _blocks(rows: Iterable[OutboxRow], *, ids: bool) -> tuple[list[Block], list[OutboxRow]]:
    """Rows grouped per (metric, fingerprint, bucket) into wire blocks (``ids``: v1, with
    their report ids), oldest group first, and the rows in that order: the answer's
    ``rejected[].index`` counts reports through the blocks in order."""
    groups: dict[tuple[str, str, int], list[OutboxRow]] = {}
    for row in rows:
        groups.setdefault((row.metric, row.fingerprint, row.bucket), []).append(row)
    blocks: list[Block] = []
    ordered: list[OutboxRow] = []
    for (metric, fp, bucket), members in groups.items():
        block_ids = b"".join(r.report_id for r in members) if ids else b""
        if ids and len(block_ids) != ID_SIZE * len(members):
            raise ProtocolError(f"outbox row of metric {metric!r} has a malformed report id")
        reports = b"".join(r.report for r in members)
        blocks.append(Block(metric, fp, bucket, block_ids, reports, None if ids else len(members)))
        ordered.extend(members)
    return blocks, ordered


def seal_batch(rows: Iterable[OutboxRow], batch_id: bytes) -> OutgoingBatch:
    """A sealed (v2) batch of ``rows`` under ``batch_id``."""
    blocks, ordered = _blocks(rows, ids=False)
    return OutgoingBatch.of(encode_sealed_batch(batch_id, blocks), blocks, ordered, batch_id)


def build_batch(rows: Iterable[OutboxRow]) -> OutgoingBatch:
    """A v1 batch of ``rows`` (reports queued before sealed batches, with their ids)."""
    blocks, ordered = _blocks(rows, ids=True)
    return OutgoingBatch.of(encode_batch(blocks), blocks, ordered)


@dataclass(frozen=True)
class Refusal:
    seq: int
    error: str
    detail: str


@dataclass(frozen=True)
class Delivered:
    """The collector answered 200: these rows leave the outbox (``held``: of the accepted,
    those its screening holds for an admin to review: delivered all the same)."""

    accepted: int
    duplicates: int
    rejected: tuple[Refusal, ...]
    keys: tuple[tuple[int, bytes], ...]  # (seq, report id) of every row answered
    held: int = 0


@dataclass(frozen=True)
class Retry:
    """Try again later (network error, 429, 5xx, a garbled answer)."""

    reason: str
    retry_after: float | None = None


@dataclass(frozen=True)
class TooLarge:
    """413: send fewer reports per batch."""

    reason: str


@dataclass(frozen=True)
class OverCap:
    """400 ``over_device_cap``: the batch carries more reports of ``fingerprint`` (in one
    bucket) than one device may send (``cap``); nothing was stored: send them in batches of
    at most ``cap`` per version and bucket."""

    reason: str
    fingerprint: str
    cap: int


@dataclass(frozen=True)
class Fatal:
    """A 4xx that retrying will not fix (bad token, ...): keep the rows, raise."""

    error: CollectorRejected


BatchOutcome = Delivered | Retry | TooLarge | OverCap | Fatal
ROLE_HEADER = "ldpkit-token-role"
"""How the collector says what the token is (``GET /v1/metrics``): ``device`` (an ingest
token: one device's reports a batch), ``relay``, ``read`` or ``admin``."""


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, when.timestamp() - now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def classify_failure(answer: HttpAnswer, now: float) -> Retry | TooLarge | OverCap | Fatal:
    """What a non-200 answer means for the client."""
    status = answer.status
    error, detail = error_of(answer.body)
    reason = f"collector answered {status} {error}" + (f": {detail}" if detail else "")
    if transient(status):
        return Retry(reason, parse_retry_after(answer.headers.get("retry-after"), now))
    if status == 413:
        return TooLarge(reason)
    if status == 400 and error == "over_device_cap" and (cap := _over_cap(answer.body)):
        return OverCap(reason, *cap)
    return Fatal(CollectorRejected(status, error, detail))


def _over_cap(body: bytes) -> tuple[str, int] | None:
    """(version, cap) of an ``over_device_cap`` answer, or None if it does not say them."""
    try:
        data = loads_bounded(body[:65536])
    except ValueError:  # ProtocolError included
        return None
    if not isinstance(data, dict):
        return None
    fingerprint, cap = data.get("version"), data.get("cap")
    if isinstance(fingerprint, str) and type(cap) is int and cap >= 1:
        return fingerprint, cap
    return None


def _count(value: object, what: str, most: int) -> int:
    """``value`` if it is an integer (not a bool, not a float) in ``0..most``."""
    if type(value) is not int or not 0 <= value <= most:
        raise ValueError(f"{what} must be an integer in 0..{most}, got {shown(value, 40)}")
    return value


def _refusal(item: object, seqs: tuple[int, ...]) -> Refusal:
    """One ``rejected`` entry of a batch answer, naming a row of ``seqs``."""
    if not isinstance(item, dict):
        raise ValueError("a rejected entry is not an object")
    index = _count(item.get("index"), "rejected index", len(seqs) - 1)
    error, detail = item.get("error"), item.get("detail", "")
    if not isinstance(error, str) or not isinstance(detail, str):
        raise ValueError("a rejected entry's error and detail must be strings")
    return Refusal(seqs[index], error[:100], detail[:500])


def _counts(body: bytes, batch: OutgoingBatch) -> tuple[int, int, int, list[Refusal]]:
    """(accepted, duplicates, held, refusals) of a 200 answer's body; ValueError if it is
    not a batch answer within the batch's size (``held``, of the accepted, may be absent:
    collectors before issue 26)."""
    n = batch.n
    data = loads_bounded(body)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    accepted = _count(data.get("accepted"), "accepted", n)
    duplicates = _count(data.get("duplicates"), "duplicates", n)
    held = _count(data.get("held", 0), "held", accepted)
    rejected = data.get("rejected", [])
    if not isinstance(rejected, list) or len(rejected) > n:
        raise ValueError(f"rejected must be a list of at most {n} entries")
    return accepted, duplicates, held, [_refusal(item, batch.seqs) for item in rejected]


def interpret_batch_answer(batch: OutgoingBatch, answer: HttpAnswer, now: float) -> BatchOutcome:
    """Read the collector's answer to ``batch`` (``docs/protocol.md``, "The answer").

    Only a well-formed answer that accounts for every report sent (counts that are
    integers within the batch, each rejected index named once, with a string error)
    lets rows leave the outbox; anything else is retried later."""
    if answer.status != 200:
        return classify_failure(answer, now)
    n = batch.n
    try:
        accepted, duplicates, held, rejected = _counts(answer.body, batch)
    except ValueError as exc:  # ProtocolError included
        return Retry(f"collector's answer is not a valid batch answer: {exc}")
    if accepted + duplicates + len(rejected) != n or len({r.seq for r in rejected}) != len(
        rejected
    ):
        # Rows leave the outbox only when the answer accounts for every one of them.
        return Retry(
            f"collector's answer counts {accepted} accepted + {duplicates} duplicates + "
            f"{len(rejected)} rejected for a batch of {n}"
        )
    return Delivered(accepted, duplicates, tuple(rejected), batch.keys, held)


def parse_definitions(body: bytes | str) -> tuple[dict[str, MetricDefinition], list[str]]:
    """Definitions from a ``GET /v1/metrics`` body, and warnings for those skipped.

    A served definition is rebuilt with its resolved mechanism and must reproduce the
    served fingerprint; one that does not (say, a mechanism this client version lacks)
    is skipped with a warning rather than reported under the wrong version. One whose
    served constants (``derived``) are not those this client computes for it is refused
    with a warning naming them (:meth:`MetricDefinition.served_differences`).
    """
    try:
        items = loads_bounded(body)["metrics"]
        if not isinstance(items, list):
            raise TypeError("'metrics' must be a list")
    except (ValueError, TypeError, KeyError) as exc:
        raise ProtocolError(
            f"GET /v1/metrics answered something else than a metric list: {exc}"
        ) from None
    out: dict[str, MetricDefinition] = {}
    warnings: list[str] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            warnings.append(f"skipped a malformed definition: {item!r:.200}")
            continue
        name = item["name"]
        served = item.get("fingerprint")
        try:
            definition = MetricDefinition.from_served(
                name, item, served if isinstance(served, str) else None
            )
        except (LdpkitError, ImportError, KeyError, TypeError, ValueError) as exc:
            warnings.append(f"skipped metric {name!r}: {exc}")
            continue
        if served is not None and served != definition.fingerprint:
            warnings.append(
                f"skipped metric {name!r}: served fingerprint {served} but this client "
                f"computes {definition.fingerprint} (client and collector versions differ?)"
            )
            continue
        lies = definition.served_differences(item)
        if lies:
            # Verification (docs/protocol.md): a collector, or anyone in between, serving
            # other constants than the definition's own could switch the privacy off.
            warnings.append(
                f"refused metric {name!r}: its served constants are not its definition's: "
                + "; ".join(lies[:3])
                + (f" (and {len(lies) - 3} more)" if len(lies) > 3 else "")
            )
            continue
        out[name] = definition
    return out, warnings
