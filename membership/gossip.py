"""Gossip: when to disseminate, to whom, and how much fits (SWIM §4.1).

Theory of operation. Every state change is pushed into the `BroadcastQueue`
(transmit-limited, invalidating; see broadcast.py) and leaves it two ways:

- piggybacked on the probe traffic (pings, acks) that flows anyway: SWIM
  §4.1's "infection-style" dissemination at no extra datagram;
- gossiped: every gossip interval, while there is news, to `gossip_nodes`
  random members (memberlist's gossip()), the dead of the last
  `gossip_to_dead_s` included so that a falsely declared node learns it
  must refute. Each update is sent about λ·log N times (`retransmit_limit`).

Pacing (ours): fresh news does not wait for the next tick. It goes out at
once, or a quarter interval after the last gossip datagram if that was more
recent: in a quiet cluster news spreads at network latency (100 simulated
nodes: 0.25 s), and under a stream of news a hop costs a quarter interval.
A superseded tick is left in the deadline heap and ignored when it fires.

Packing: a datagram carries as many updates as fit the MTU after its own
messages and the envelope (`_DATAGRAM_OVERHEAD_BYTES`).
"""

from __future__ import annotations

import random
from typing import Any, Final

from shoal.kernel import codec
from shoal.kernel.contract import Address, Send
from shoal.kernel.deadlines import Deadlines
from shoal.membership.broadcast import BroadcastQueue
from shoal.membership.counters import SwimCounters
from shoal.membership.profiles import SwimConfig
from shoal.membership.table import IndexedSet, MemberTable

# Room a datagram needs besides piggybacked updates: header, CBOR list head.
_DATAGRAM_OVERHEAD_BYTES: Final = codec.HEADER_BYTES + 5
# Ours: news that arrives while gossip is paced goes out this share of the
# gossip interval after the last gossip datagram (see the module docstring).
_FRESH_SHARE: Final = 0.25


class Gossip:
    """Paces and packs the dissemination of one node's broadcast queue."""

    __slots__ = (
        "broadcasts",
        "recent_dead",
        "_table",
        "_config",
        "_rng",
        "_deadlines",
        "_send",
        "_counters",
        "_gossip_at",
        "_gossiped_at",
        "_limit_of",
    )

    def __init__(
        self,
        broadcasts: BroadcastQueue,
        table: MemberTable,
        config: SwimConfig,
        rng: random.Random,
        deadlines: Deadlines,
        sends: list[Send],
        counters: SwimCounters,
    ) -> None:
        """Gossip from `broadcasts` to members of `table`.

        Args:
            broadcasts: the queue of updates to spread.
            table: whom to gossip to (its live members).
            config: gossip interval, fan-out, MTU, retransmit limit.
            rng: the node's only source of randomness.
            deadlines: the node's deadline heap, for gossip ticks.
            sends: the node's outbox list of sends.
            counters: the node's counters.
        """
        self.broadcasts = broadcasts
        # Dead (and left) members still gossiped to, for gossip_to_dead_s.
        self.recent_dead = IndexedSet()
        self._table = table
        self._config = config
        self._rng = rng
        self._deadlines = deadlines
        self._send = sends
        self._counters = counters
        self._gossip_at: float | None = None  # the pending gossip tick
        self._gossiped_at = -1.0
        # Live members -> retransmit limit, the last one asked (the config's
        # method runs interpreted; asked per datagram, it changes rarely).
        self._limit_of = (-1, 0)

    def broadcast(self, key: str, msg: Any, now: float) -> None:
        """Queue `msg` (an update about member `key`) and pace a gossip tick."""
        self.broadcasts.push(key, msg, codec.encoded_size(msg))
        at = self._gossip_at
        soon = max(now, self._gossiped_at + self._config.gossip_interval_s * _FRESH_SHARE)
        if at is None or at > soon:
            self._gossip_at = soon
            self._deadlines.push(soon, self._due_gossip, soon)

    def send_packet(self, to: Address, msgs: list[Any], piggyback: bool = False) -> None:
        """Send `msgs` to `to` in one datagram; with `piggyback`, fill the
        rest of it with queued updates."""
        if piggyback and len(self.broadcasts):
            used = sum(codec.encoded_size(m, True) for m in msgs)
            budget = self._config.mtu_bytes - _DATAGRAM_OVERHEAD_BYTES - used
            msgs = msgs + self.broadcasts.take(budget, self._limit(self._table.num_live()))
        self._send.append(Send(to, tuple(msgs)))

    def _limit(self, n: int) -> int:
        """`config.retransmit_limit(n)`, remembered for the last `n`."""
        last_n, limit = self._limit_of
        if n != last_n:
            limit = self._config.retransmit_limit(n)
            self._limit_of = (n, limit)
        return limit

    def _due_gossip(self, at: float, now: float) -> None:
        if at != self._gossip_at:
            return  # superseded by an earlier tick for fresh news
        table, config = self._table, self._config
        live, dead = table.live, self.recent_dead
        pool = len(live) + len(dead)
        limit = self._limit(table.num_live())
        budget = config.mtu_bytes - _DATAGRAM_OVERHEAD_BYTES
        for i in self._rng.sample(range(pool), min(config.gossip_nodes, pool)):
            name = live.items()[i] if i < len(live) else dead.items()[i - len(live)]
            msgs = self.broadcasts.take(budget, limit)
            if not msgs:
                break
            self._counters.gossip_datagrams += 1
            self._gossiped_at = now
            self._send.append(Send(table.addr_of(name), tuple(msgs)))
        if len(self.broadcasts) and pool:
            self._gossip_at = at = now + config.gossip_interval_s
            self._deadlines.push(at, self._due_gossip, at)
        else:
            self._gossip_at = None

    def gossip_to_dead(self, name: str, down_at: float) -> None:
        """Keep gossiping to `name`, which went down at `down_at`, for
        gossip_to_dead_s (memberlist GossipToTheDeadTime)."""
        self.recent_dead.add(name)
        expire_at = down_at + self._config.gossip_to_dead_s
        self._deadlines.push(expire_at, self._due_gossip_expire, (name, down_at))

    def _due_gossip_expire(self, arg: tuple[str, float], now: float) -> None:
        name, down_at = arg
        if name not in self._table.members or self._table.down_at(name) == down_at:
            self.recent_dead.discard(name)
