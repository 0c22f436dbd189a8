"""Replayer: an attacker on the LAN that records traffic and replays copies.

Theory of operation (issue 27). The attacker has no key; it captures every
datagram and stream frame on the segment and sends copies later, with the
original sender's address, to the member the original went to or to any
other. The simulator carries decoded messages, with no sealing layer, so
these copies reach the cores as if sealing did not exist: this is the
strongest replayer, and the cores' own rules (incarnations, epochs,
sequence numbers, versions) must keep every safety property against it.

**Memory.** What a host sends (`SimCluster.send_hooks`) is kept in one
bucket per second of true time, for the last `HORIZON_S`. A bucket holds at
most `per_second` captures, a uniform sample of everything sent in that
second (Vitter's algorithm R), so the memory is bounded by
`per_second * HORIZON_S` captures whatever the traffic, and old traffic is
as well represented as new.

**Replays.** A Poisson process of `rate_per_s` replays per second of true
time. Each one takes a delay window, *short* (under `STAMP_WINDOW_S`, 30 s:
inside the sealing layer's timestamp window, docs/security.md) with
probability `short_share`, else *long* (30 s to `HORIZON_S`: beyond it);
picks a second with captures in that window, a capture in it, and a
receiver: the original one with probability `own_share`, else any running
host (the original receiver and the sender included). The copy is handed
over at once (`SimCluster.deliver`); a datagram as a datagram, a stream
frame as a frame on a new stream. Copies are not lost, but they do not
cross a partition: the attacker sits on the LAN as it is.

Every random choice comes from the replayer's own `random.Random`, seeded
from the cluster's seed and `salt`: the same seed gives the same attack,
and a run with no replayer draws exactly what it drew before.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shoal.kernel.contract import Address, Channel
from shoal.sim.cluster import SimCluster

STAMP_WINDOW_S = 30.0  # `replay_window_s`, docs/security.md
HORIZON_S = 300.0  # the oldest capture kept
TRACE_LEN = 2_000  # replays kept for a report (the last ones)

Keep = Callable[[int, tuple[Any, ...]], bool]
"""Whether to capture what host `src` sends (`messages`)."""


@dataclass(frozen=True, slots=True)
class Capture:
    """One datagram or stream frame as it left host `src` at true time `at`."""

    at: float
    src: int
    to: Address
    messages: tuple[Any, ...]
    stream: bool


@dataclass(frozen=True, slots=True)
class Replay:
    """One copy of `capture` handed to host `dst` at true time `at`."""

    at: float
    capture: Capture
    dst: int

    @property
    def delay_s(self) -> float:
        """How long after the original the copy arrived."""
        return self.at - self.capture.at

    def describe(self, cluster: SimCluster) -> str:
        """One line for a report: when, what, from whom, to whom."""
        c = self.capture
        kinds = "+".join(type(m).__name__ for m in c.messages)
        return (f"t={self.at:.3f} {kinds} from {cluster.idents[c.src].name} "
                f"(sent to {c.to[0]} at t={c.at:.3f}, {self.delay_s:.3f} s earlier) "
                f"to {cluster.idents[self.dst].name}: {c.messages!r}")  # fmt: skip


class _Bucket:
    """Algorithm R over one second's captures."""

    __slots__ = ("seen", "captures")

    def __init__(self) -> None:
        self.seen = 0
        self.captures: list[Capture] = []


class Replayer:
    """Records what a `SimCluster` carries and replays copies of it."""

    def __init__(
        self,
        cluster: SimCluster,
        rate_per_s: float,
        short_share: float = 0.5,
        own_share: float = 0.25,
        per_second: int = 8,
        keep: Keep | None = None,
        targets: Callable[[], list[int]] | None = None,
        start_at: float | None = 0.0,
        until: float = math.inf,
        salt: int = 0,
    ) -> None:
        """Start capturing now and replaying from `start_at`.

        Args:
            cluster: the run to attack.
            rate_per_s: replays per second of true time (0: capture only).
            short_share: the share of replays inside the stamp window.
            own_share: the share sent to the original receiver.
            per_second: captures kept per second of traffic.
            keep: which sends to capture (None: all of them).
            targets: the hosts copies may go to (None: every running host).
            start_at: no replay before this true time (None: until `begin`).
            until: no replay after this true time.
            salt: tells two replayers on one run apart.
        """
        if rate_per_s < 0 or not 0 <= short_share <= 1 or not 0 <= own_share <= 1:
            raise ValueError("rate_per_s >= 0, short_share and own_share in [0, 1]")
        self.cluster = cluster
        self.rate_per_s = rate_per_s
        self.short_share = short_share
        self.own_share = own_share
        self.per_second = per_second
        self.keep = keep
        self.targets = targets
        self.until = until
        self.rng = random.Random(cluster.seed * 2_654_435_761 + 27 + salt * 7_919)
        self._seconds: list[int] = []  # seconds with a bucket, oldest first
        self._buckets: dict[int, _Bucket] = {}
        self._host_of: dict[Address, int] = {}
        self.captured = 0  # sends seen (kept or not)
        self.replayed = 0
        self.missed = 0  # replay times with nothing captured in the window
        self.short = self.long = 0
        self.kinds: Counter[str] = Counter()  # message types replayed
        self.trace: deque[Replay] = deque(maxlen=TRACE_LEN)
        cluster.send_hooks.append(self._capture)
        if start_at is not None:
            self.begin(start_at)

    def begin(self, at: float) -> None:
        """Start replaying at true time `at` (once)."""
        if self.rate_per_s > 0:
            self.cluster.at(at + self.rng.expovariate(self.rate_per_s), self._replay_due)

    # -- capturing ---------------------------------------------------------------

    def _capture(self, src: int, to: Address, messages: tuple[Any, ...], channel: Channel) -> None:
        keep = self.keep
        if keep is not None and not keep(src, messages):
            return
        self.captured += 1
        now = self.cluster.now
        second = int(now)
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = _Bucket()
            self._seconds.append(second)
            self._forget_before(second - int(HORIZON_S) - 1)
        bucket.seen += 1
        capture = Capture(now, src, to, messages, channel is Channel.STREAM)
        if len(bucket.captures) < self.per_second:
            bucket.captures.append(capture)
        else:
            j = self.rng.randrange(bucket.seen)
            if j < self.per_second:
                bucket.captures[j] = capture

    def _forget_before(self, second: int) -> None:
        seconds = self._seconds
        while seconds and seconds[0] < second:
            del self._buckets[seconds.pop(0)]

    def retain(self, keep: Callable[[Capture], bool]) -> None:
        """Forget every capture but those `keep` accepts (the attacker picks
        its ammunition: say, one member's renewals)."""
        for second in list(self._seconds):
            bucket = self._buckets[second]
            bucket.captures = [c for c in bucket.captures if keep(c)]
            if not bucket.captures:
                del self._buckets[second]
                self._seconds.remove(second)

    def memory(self) -> int:
        """Captures held now (at most `per_second` x `HORIZON_S` + 1)."""
        return sum(len(b.captures) for b in self._buckets.values())

    # -- replaying ---------------------------------------------------------------

    def _replay_due(self) -> None:
        cluster = self.cluster
        now = cluster.now
        if now > self.until:
            return
        self.replay_one(now)
        cluster.at(now + self.rng.expovariate(self.rate_per_s), self._replay_due)

    def replay_one(self, now: float) -> Replay | None:
        """Pick a capture, a receiver, and hand the copy over now (None:
        nothing captured in the window drawn, or no receiver)."""
        rng = self.rng
        short = rng.random() < self.short_share
        lo, hi = (0.0, STAMP_WINDOW_S) if short else (STAMP_WINDOW_S, HORIZON_S)
        seconds = self._seconds
        first = bisect.bisect_left(seconds, math.ceil(now - hi))
        last = bisect.bisect_right(seconds, math.floor(now - lo))
        if first >= last:
            self.missed += 1
            return None
        bucket = self._buckets[seconds[rng.randrange(first, last)]]
        capture = rng.choice(bucket.captures)
        dst = self._receiver(capture)
        if dst is None:
            self.missed += 1
            return None
        replay = Replay(now, capture, dst)
        if replay.delay_s < STAMP_WINDOW_S:
            self.short += 1
        else:
            self.long += 1
        self.replayed += 1
        self.kinds.update(type(m).__name__ for m in capture.messages)
        self.trace.append(replay)
        self.cluster.deliver(dst, self.cluster.idents[capture.src].addr, capture.messages,
                             capture.stream)  # fmt: skip
        return replay

    def _receiver(self, capture: Capture) -> int | None:
        cluster = self.cluster
        hosts = self.targets() if self.targets is not None else cluster.live_hosts()
        own = self._host(capture.to)
        if own is not None and own in hosts and self.rng.random() < self.own_share:
            dst: int | None = own
        else:
            dst = self.rng.choice(hosts) if hosts else None
        if dst is None or cluster.nodes[dst] is None:
            return None
        if not cluster.net.connected(capture.src, dst):
            return None  # the copy would cross a partition
        return dst

    def _host(self, addr: Address) -> int | None:
        host = self._host_of.get(addr)
        if host is None:  # a host booted or moved since: learn its address
            self._host_of.update((ident.addr, i) for i, ident in enumerate(self.cluster.idents))
            host = self._host_of.get(addr)
        return host
