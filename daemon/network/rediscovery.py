"""Rediscovery: mDNS again when a large share of the cluster died at once (issue 42).

Theory of operation. Discovery (daemon/network/mdns.py, zeroconf) asks
for peers when it starts (four queries within ~15 s) and then only when a
cached record nears the end of its time to live (75 % of 75 min for the
service's pointer). Announcements go out at start. Whatever a cut swallowed
is not asked for again: agents that started, or came back at another
address, on the far side of a cut that lasted longer than their first
queries stay unknown on this side for up to an hour after it heals (the
reconnects of membership/reconnect.py try only the addresses this node
knew).

So when a large share of the members this node counted as up is declared
dead at once (`SHARE` of them within `WINDOW_S`, at least two, or the last
one), what follows is a cut or a mass failure, and this node announces
itself once more and asks for the service again, in rounds: at once, then
after `FIRST_GAP_S`, the gap doubling up to `MAX_GAP_S`, for as long as any
member of that burst is still not up, and for `GIVE_UP_S` at most. Members
that left are not counted: a leave is no failure.

Cost per round, per observer: one announcement and one query (multicast),
and the answers of the peers the query does not list as known (zeroconf
sends the pointers it holds fresh as known answers, so a peer it knows does
not answer). Per burst: rounds at 0, 1, 3, 7, 15, 31 s, then one every
30 s: 24 rounds in `GIVE_UP_S`, 48 datagrams of this node's own.

Pure: told the time and the view, returns whether a round is due; the
glue (daemon/network/discovery.py) polls it.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from typing import Final

# A burst: at least this share of the members counted as up (those up now
# plus the ones that died within the window) died within `WINDOW_S`.
SHARE: Final = 1 / 3
WINDOW_S: Final = 10.0
# The first gap between rounds, doubling up to the last (Serf's reconnect
# interval, the pace of the slowest other way back).
FIRST_GAP_S: Final = 1.0
MAX_GAP_S: Final = 30.0
# Rounds stop this long after the burst, whatever remains out: then the
# records' own refresh, and the operator, take over.
GIVE_UP_S: Final = 600.0
# Each gap is stretched by up to this share at random, so that the
# observers of one burst do not all ask in the same instant.
_JITTER: Final = 0.1


class Rediscovery:
    """When to announce and ask again (see the module docstring)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.burst: frozenset[str] = frozenset()  # the members that died together
        self.started_at = 0.0
        self.rounds = 0  # rounds of the current burst so far
        self._next_at = 0.0
        self._gap = FIRST_GAP_S

    def due(self, now: float, up: Collection[str], dead_since: Mapping[str, float]) -> bool:
        """Whether a round is due at `now`.

        Args:
            now: the node's monotonic time.
            up: the other members up now (alive or suspect).
            dead_since: the members declared dead (not left), with when.
        """
        if self.burst:
            if now - self.started_at >= GIVE_UP_S or all(name in up for name in self.burst):
                self.burst = frozenset()
            elif now >= self._next_at:
                self._round(now)
                return True
            return False
        recent = [name for name, at in dead_since.items() if now - at <= WINDOW_S]
        if not recent or len(recent) < SHARE * (len(up) + len(recent)):
            return False
        if len(recent) < 2 and up:
            return False  # one member's death is not a cut
        self.burst = frozenset(recent)
        self.started_at = now
        self.rounds = 0
        self._gap = FIRST_GAP_S
        self._round(now)
        return True

    def _round(self, now: float) -> None:
        self.rounds += 1
        self._next_at = now + self._gap * (1 + self._rng.uniform(0, _JITTER))
        self._gap = min(self._gap * 2, MAX_GAP_S)
