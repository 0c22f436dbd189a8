"""ClockOffsets: how far this node's wall clock is from its peers'.

Theory of operation (NTP's on-wire calculation, RFC 5905 §8, on the probes
SWIM already sends). A probe leaves at our monotonic `sent`; the target's
`Ack` carries its wall clock when it answered; the ack arrives at `now`. If
the two legs took the same time, our wall clock read `(sent + now) / 2` (in
wall terms) when theirs read the ack's stamp, so

    offset = our wall at the midpoint - their stamp

with an error of at most half the round trip. Samples with a round trip
over `MAX_RTT_S` are not taken (a queue on the path, not a clock). Each
peer's newest sample counts once; the estimate is the median over the
peers heard within `MAX_AGE_S`, so one peer with a wrong clock moves it by
nothing and this node's own wrong clock moves it by the whole offset: it is
*this node's* offset from the cluster. With an even count the middle value
nearer zero is taken, so an agent refuses writes (the caller's rule) only
when most of its peers disagree with it.

Pure: times come in as arguments.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict

MAX_RTT_S = 0.25
MAX_AGE_S = 300.0
MAX_PEERS = 64


class ClockOffsets:
    """Samples of this node's clock offset against each peer (see above)."""

    def __init__(self) -> None:
        self._samples: OrderedDict[str, tuple[float, float]] = OrderedDict()  # peer -> (ms, at)
        # The offsets of `_samples`, sorted: the median without a sort while
        # every sample is fresh, which is always, once probing runs. The
        # estimate is read every second by every node; sorting each time
        # took 2.5 % of a 1,000-node simulation.
        self._sorted: list[float] = []
        self.samples = 0

    def sample(self, peer: str, sent: float, now: float, our_wall_ms: float,
               their_wall_ms: int) -> None:  # fmt: skip
        """One probe round trip to `peer`, sent at `sent` and answered at
        `now` (monotonic s); `our_wall_ms` is our wall clock at `now`."""
        rtt = now - sent
        if rtt > MAX_RTT_S or rtt < 0 or their_wall_ms <= 0:
            return
        midpoint_ms = our_wall_ms - rtt * 500.0
        samples = self._samples
        self._unsort(samples.get(peer))
        offset = midpoint_ms - their_wall_ms
        samples[peer] = (offset, now)
        samples.move_to_end(peer)
        bisect.insort(self._sorted, offset)
        if len(samples) > MAX_PEERS:
            self._unsort(samples.popitem(last=False)[1])
        self.samples += 1

    def estimate_ms(self, now: float) -> int | None:
        """This node's offset from its peers in ms (positive: ahead), or None
        before any peer answered a probe in time."""
        samples = self._samples
        if not samples:
            return None
        oldest_at = next(iter(samples.values()))[1]  # in the order they came
        if now - oldest_at <= MAX_AGE_S:
            fresh = self._sorted
        else:
            fresh = sorted(ms for ms, at in samples.values() if now - at <= MAX_AGE_S)
        if not fresh:
            return None
        middle = len(fresh) // 2
        if len(fresh) % 2:
            return round(fresh[middle])
        low, high = fresh[middle - 1], fresh[middle]
        return round(low if abs(low) <= abs(high) else high)

    def forget(self, peer: str) -> None:
        """Drop `peer`'s sample (it left or died)."""
        self._unsort(self._samples.pop(peer, None))

    def _unsort(self, sample: tuple[float, float] | None) -> None:
        if sample is not None:
            del self._sorted[bisect.bisect_left(self._sorted, sample[0])]
