"""Screening at ingest: which reports to hold apart instead of counting (issue 26).

Each mechanism states laws that honest reports follow whatever their inputs
(:mod:`ldpkit.screening`); the collector tests them twice:

- **each block** of a batch (one metric version and bucket), before it is counted:
  ``screen_reports`` on its reports, then ``screen_aggregate`` on its aggregate, each at
  half the false-alarm rate ``alpha`` (:func:`screen_block`, where the block is
  aggregated anyway: the store's writer, or the fair lane for costly batches). A block
  that fails is held;
- **each sender's window**, after each of its batches is counted: per source (its keyed
  id, :mod:`ldpkit.collector.sources`) and metric version, the aggregates of what it had
  counted since the window opened (``screen_window_seconds``), one per bucket, each tested
  by ``screen_aggregate`` whenever the window's reports at least doubled since its last
  test (a window of T reports is tested about log2 T times; the k-th time each of its B
  buckets at ``alpha / (k (k + 1) B)``, so an honest window fails with probability at most
  ``alpha`` over its whole life). Buckets are tested apart because only one bucket's
  reports are independent: a memoizing device queues the same report again in each
  bucket of its memo window, byte for byte. When it
  fails, what it counted, that batch included, moves to held (a negative partial row and
  a held record per bucket, in one transaction, before the batch is answered), and the
  sender's later batches of that version are held until the window ends. A sender
  forging one report per batch is thus caught once its pooled reports break the law, and
  what it had counted leaves the estimates.

Windows hold aggregates only (no report, no address), in a bounded LRU
(``screen_senders`` windows and ``screen_memory_mib`` of sums): an evicted window starts
afresh. ``GET /v1/admin/senders`` lists them with each one's distance from the others.
"""

from __future__ import annotations

import functools
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._special import regularized_gamma
from ..aggregate import Aggregate
from ..estimates import FrequencyEstimate, MeanEstimate
from ..mechanisms import FrequencyOracle, Mechanism, NumericMechanism
from ..screening import Finding
from .store import CheckedReports, Hold, Moved

WindowKey = tuple[bytes, str]  # (sender id, fingerprint)


def screen_block(block: CheckedReports, alpha: float) -> CheckedReports:
    """``block`` with its aggregate, and held if it fails its mechanism's laws (each at
    ``alpha / 2``; ``alpha`` 0, or a block held already: not screened)."""
    mechanism = block.mechanism
    aggregate = block.aggregate or mechanism.aggregate_checked(block.reports)
    hold = block.hold
    if alpha > 0 and hold is None:
        finding = mechanism.screen_reports(block.reports, alpha / 2)
        finding = finding or mechanism.screen_aggregate(aggregate, alpha / 2)
        hold = None if finding is None else Hold(finding.test, finding.reason)
    return block.screened(aggregate, hold)


def _total(aggregates: Iterable[Aggregate]) -> Aggregate | None:
    total: Aggregate | None = None
    for aggregate in aggregates:
        total = aggregate if total is None else total + aggregate
    return total


@dataclass
class Window:
    """One sender's reports of one version: ``counted`` by bucket (what is counted and has
    not moved: ``[n, sums]``, added to in place), ``n`` their number, ``finding`` once it
    failed (its later batches are held), ``held`` what it holds since (moved, and held
    after)."""

    sender: bytes
    fingerprint: str
    mechanism: Mechanism
    opened: float
    counted: dict[int, list[Any]] = field(default_factory=dict)
    n: int = 0
    tests: int = 0
    tested_at: int = 0  # reports pooled at the last test
    finding: Finding | None = None
    held: Aggregate | None = None

    def count(self, bucket: int, aggregate: Aggregate) -> bool:
        """Add counted reports; whether they are the first of their bucket."""
        self.n += aggregate.n
        if (slot := self.counted.get(bucket)) is None:
            self.counted[bucket] = [aggregate.n, aggregate.sums.copy()]
            return True
        slot[0] += aggregate.n
        slot[1] += aggregate.sums
        return False

    def aggregates(self) -> dict[int, Aggregate]:
        return {bucket: Aggregate(n, sums) for bucket, (n, sums) in self.counted.items()}

    @property
    def floats(self) -> int:
        """The sums it keeps (``held`` and one vector per bucket counted)."""
        return self.mechanism.stats_size * (len(self.counted) + 1)

    @property
    def hold(self) -> Hold:
        """Why its reports are held, once it failed."""
        assert self.finding is not None
        return Hold(
            self.finding.test, f"its sender's window failed: {self.finding.reason}", "sender"
        )

    def holds(self, aggregate: Aggregate) -> None:
        self.held = aggregate if self.held is None else self.held + aggregate


@dataclass
class Moving:
    """What a batch's sender windows move to held (``moved``), and how many of the batch's
    own counted reports are among them (``own``)."""

    moved: list[Moved] = field(default_factory=list)
    own: int = 0


class Senders:
    """The sender windows of one collector process (see the module docstring)."""

    def __init__(
        self,
        alpha: float,
        window_seconds: float,
        max_windows: int,
        max_bytes: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.alpha = alpha
        self.window_seconds = window_seconds
        self.max_windows = max_windows
        self.max_floats = max_bytes // 8
        self._clock = clock
        self._windows: OrderedDict[WindowKey, Window] = OrderedDict()
        self._floats = 0  # the sums the windows keep

    @property
    def enabled(self) -> bool:
        return self.alpha > 0 and self.window_seconds > 0

    def _window(self, key: WindowKey, mechanism: Mechanism | None) -> Window | None:
        """The sender's current window of a version, made the most recently used (a new
        one, given its ``mechanism``, when there is none or it ended; else None)."""
        now = self._clock()
        window = self._windows.pop(key, None)
        if window is not None and now - window.opened >= self.window_seconds:
            self._floats -= window.floats
            window = None
        if window is None and mechanism is not None:
            window = Window(key[0], key[1], mechanism, now)
            self._floats += window.floats
        if window is not None:
            self._windows[key] = window
        return window

    def hold_known(self, sender: bytes, blocks: list[CheckedReports]) -> list[CheckedReports]:
        """Before they are stored: a sender's blocks of a version whose window failed are
        held (the rest go on as they are)."""
        if not self.enabled:
            return blocks
        out = []
        for block in blocks:
            window = self._window((sender, block.fingerprint), None)
            if window is not None and window.finding is not None and block.hold is None:
                block = block.screened(block.aggregate, window.hold)
            out.append(block)
        return out

    def observe(self, sender: bytes, stored: Sequence[CheckedReports]) -> Moving:
        """After a new batch was stored (``stored``: its blocks, aggregated and screened):
        add what it counted to its sender's windows and test them; what to move to held."""
        out = Moving()
        if not self.enabled:
            return out
        touched: dict[str, tuple[Window, int]] = {}  # by version: its window, reports
        for block in stored:
            key = (sender, block.fingerprint)
            if block.aggregate is None:
                continue
            if block.hold is not None:  # held by its window before it was stored
                window = self._window(key, None) if block.hold.origin == "sender" else None
                if window is not None:
                    window.holds(block.aggregate)
                continue
            window, n = touched.get(block.fingerprint) or (self._window(key, block.mechanism), 0)
            assert window is not None
            if window.count(block.bucket, block.aggregate):
                self._floats += window.mechanism.stats_size
            touched[block.fingerprint] = (window, n + block.n)
        for window, n in touched.values():
            if window.finding is not None or self._fails(window):
                out.moved += self._take(window)
                out.own += n
        while len(self._windows) > self.max_windows or self._floats > self.max_floats:
            self._floats -= self._windows.popitem(last=False)[1].floats
        return out

    def _fails(self, window: Window) -> bool:
        """Test a window whose reports doubled since its last test; whether it fails."""
        if window.n == 0 or window.n < 2 * window.tested_at:
            return False
        window.tests += 1
        window.tested_at = window.n
        k = window.tests
        # Each bucket on its own: a device queues a memoized report again in every bucket
        # of its memo window, byte for byte, so only one bucket's reports are independent.
        alpha = self.alpha / (k * (k + 1) * len(window.counted))
        for aggregate in window.aggregates().values():
            window.finding = window.mechanism.screen_aggregate(aggregate, alpha)
            if window.finding is not None:
                return True
        return False

    def _take(self, window: Window) -> list[Moved]:
        """What a failed window counted, to move to held: taken out of it now, so that no
        other batch moves it too (:meth:`restore` puts it back if the move fails)."""
        hold = window.hold
        moved = [Moved(window.fingerprint, b, agg, hold) for b, agg in window.aggregates().items()]
        for m in moved:
            window.holds(m.aggregate)
        self._floats -= window.mechanism.stats_size * len(window.counted)
        window.counted, window.n = {}, 0
        return moved

    def restore(self, sender: bytes, moved: Sequence[Moved]) -> None:
        """A move failed: those reports stay counted. Back in their windows, which are
        tested again at their next batch."""
        for m in moved:
            if (window := self._windows.get((sender, m.fingerprint))) is None:
                continue
            window.finding = window.held = None
            window.tested_at = 0
            if window.count(m.bucket, m.aggregate):
                self._floats += window.mechanism.stats_size

    def listing(self) -> list[tuple[dict[str, Any], Callable[[], dict[str, Any] | None]]]:
        """Every window (``GET /v1/admin/senders``): its sender's keyed id, version, reports
        and verdict, and a call that gives its distance from the other windows of its
        version (:func:`drift`: estimates, to run off the event loop; on copies)."""
        totals = {key: _total(w.aggregates().values()) for key, w in self._windows.items()}
        pooled: dict[str, Aggregate] = {}
        for (_, fp), total in totals.items():
            if total is not None:
                pooled[fp] = total if fp not in pooled else pooled[fp] + total
        now = self._clock()
        return [
            _describe(w, totals[key], pooled.get(w.fingerprint), now)
            for key, w in self._windows.items()
        ]


def _describe(
    window: Window, counted: Aggregate | None, pooled: Aggregate | None, now: float
) -> tuple[dict[str, Any], Callable[[], dict[str, Any] | None]]:
    """A window as listed: ``n`` its reports (held ones once it failed); and the call that
    gives their distance from the other windows' counted reports of the version."""
    own = window.held if window.finding is not None else counted
    rest = pooled
    if counted is not None and pooled is not None:
        rest = Aggregate(pooled.n - counted.n, pooled.sums - counted.sums)
    entry = {
        "sender": window.sender.hex(),
        "version": window.fingerprint,
        "n": 0 if own is None else own.n,
        "age_seconds": round(now - window.opened, 1),
        "held": window.finding is not None,
        "finding": None if window.finding is None else window.finding.to_dict(),
    }
    copies = [None if a is None else Aggregate(a.n, a.sums.copy()) for a in (own, rest)]
    return entry, functools.partial(drift, window.mechanism, *copies)


def drift(
    mechanism: Mechanism, own: Aggregate | None, rest: Aggregate | None
) -> dict[str, Any] | None:
    """How far a window's estimate lies from the rest's, in standard errors: per item a z
    statistic and their chi-square (dof: the items) for frequencies, a z for a mean; None
    for other estimates, or when either side has no report."""
    if own is None or rest is None or own.n == 0 or rest.n == 0:
        return None
    if not isinstance(mechanism, FrequencyOracle | NumericMechanism):
        return None  # their estimates are no vector of values with standard errors
    mine, theirs = mechanism.estimate(own), mechanism.estimate(rest)
    if isinstance(mine, FrequencyEstimate) and isinstance(theirs, FrequencyEstimate):
        z = (mine.frequencies - theirs.frequencies) / np.sqrt(mine.stderr**2 + theirs.stderr**2)
        z = np.nan_to_num(z)
        chi2 = float(np.sum(z * z))
        top = int(np.argmax(np.abs(z)))
        return {
            "test": "chi-square",
            "statistic": chi2,
            "dof": int(z.size),
            "p_value": regularized_gamma(z.size / 2, chi2 / 2)[1],
            "largest": {"item": top, "z": float(z[top])},
        }
    if isinstance(mine, MeanEstimate) and isinstance(theirs, MeanEstimate):
        z1 = (mine.mean - theirs.mean) / math.hypot(mine.stderr, theirs.stderr)
        return {"test": "z", "statistic": z1, "p_value": math.erfc(abs(z1) / math.sqrt(2))}
    return None
