"""SwimNode: the sans-IO SWIM + Lifeguard membership core, as one façade.

Theory of operation. The node is told the time (`now`, monotonic seconds)
and fed decoded messages; it answers with an `Output` of things to persist,
datagrams or stream frames to send, and events. It never reads a clock, never
opens a socket and draws every random choice from the injected `Random`.

The work is split by role; each role module opens with its own theory of
operation and shares the node's table, outbox, deadline heap, counters,
config and `Random` (passed in, no back-references to the node):

- probing.py, `Prober` (SWIM §3.1, §4.3; Lifeguard §IV-A): probe rounds,
  ping, ping-req, ack, nack, relays, and refusals (ICMP port unreachable);
- claims.py, `Claims` (SWIM §4.2; Lifeguard §IV-B): what `Alive`,
  `Suspect`, `Dead` and `Leave` change, suspicion timers (suspicion.py
  computes their k, min and max), refutation, reaping, corrections;
- gossip.py, `Gossip` (SWIM §4.1): pacing and packing of dissemination,
  piggybacked and gossiped;
- exchange.py, `Exchange` (memberlist push-pull, Serf retry_join and
  reconnect): full-state syncs, join retries, stranger syncs.

This module keeps the core contract (`start`, `receive`, `tick`,
`next_deadline`, `drain`, `stream_failed`, `unreachable`) and the commands
(`join`, `adopt`, `leave`, `set_tags`). Leave: a `Leave` message, sent
directly to many members and gossiped; the node keeps answering pings until
its driver stops it, so nobody suspects a node that is only leaving.

State rules live in `MemberTable`; the roles decide *when* and *what to
send*. Deadlines are kept in one heap, so `tick()` costs O(work due).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from shoal.kernel.contract import Address, Output, Tags
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.membership.awareness import LocalHealth
from shoal.membership.broadcast import BroadcastQueue
from shoal.membership.claims import Claims
from shoal.membership.clockskew import ClockOffsets
from shoal.membership.counters import SwimCounters
from shoal.membership.events import MemberLeft
from shoal.membership.exchange import Exchange
from shoal.membership.gossip import Gossip
from shoal.membership.member import LocalState, Member, MemberView, NodeIdentity
from shoal.membership.messages import (
    Ack,
    Alive,
    Dead,
    Leave,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from shoal.membership.probe import ProbeScheduler
from shoal.membership.probing import Prober
from shoal.membership.profiles import SwimConfig
from shoal.membership.reconnect import Reconnects
from shoal.membership.table import LEFT, MemberTable
from shoal.membership.vivaldi import (
    Coordinate,
    CoordinateCache,
    CoordinateSnapshot,
    VivaldiConfig,
)

Handler = Callable[[Any, Address, float], None]

__all__ = ["Handler", "SwimCounters", "SwimNode"]


class SwimNode:
    """One member's SWIM protocol state machine (see the module docstring)."""

    def __init__(
        self,
        ident: NodeIdentity,
        config: SwimConfig,
        rng: random.Random,
        incarnation: int = 0,
    ) -> None:
        """Create a node that has not started yet.

        Args:
            ident: this node's name, id, advertised address and tags.
            config: timing and sizes.
            rng: the only source of randomness the node uses.
            incarnation: the last incarnation persisted by a previous run;
                `start` begins above it.
        """
        self.local = local = LocalState(ident, incarnation)
        self.config = config
        self.rng = rng
        self.table = table = MemberTable(ident, incarnation, 0.0)
        self.health = health = LocalHealth(config.awareness_max_multiplier)
        self.broadcasts = BroadcastQueue()
        self._counters = counters = SwimCounters()
        self.out = out = Outbox()
        self._deadlines = deadlines = Deadlines()
        self.gossip = Gossip(self.broadcasts, table, config, rng, deadlines, out.sends, counters)
        scheduler = ProbeScheduler(rng)
        self.offsets = ClockOffsets()
        self.coordinates = CoordinateCache(VivaldiConfig(), rng)
        self.reconnects = reconnects = Reconnects(
            local, table, config, rng, deadlines, self.gossip.send_packet, counters
        )
        self.claims = claims = Claims(
            local,
            table,
            config,
            health,
            deadlines,
            out,
            counters,
            self.gossip,
            scheduler,
            reconnects,
        )
        self.exchange = exchange = Exchange(
            local, table, config, rng, deadlines, out, counters, claims, reconnects
        )
        self.prober = prober = Prober(
            local, table, config, rng, health, deadlines, counters, scheduler,
            self.gossip.send_packet, claims.on_suspect, exchange.sync_with_stranger,
            reconnects.pinged_by_suspect,
            exchange.reconnect_acked,
            self.offsets, self.coordinates,
        )  # fmt: skip
        claims.check_suspect = prober.check
        # Dispatch by exact type: one dict lookup on the hottest path, where a
        # chain of isinstance checks costs a microsecond per message.
        self.handlers: dict[type, Handler] = {
            Alive: claims.on_alive,
            Ping: prober.on_ping,
            Ack: prober.on_ack,
            Suspect: claims.on_suspect,
            Dead: claims.on_dead,
            Leave: claims.on_leave,
            PingReq: prober.on_ping_req,
            Nack: prober.on_nack,
            PushPull: exchange.on_push_pull,
        }

    # -- this node's standing (shared with the roles through `local`) ------------

    def set_wall_offset(self, wall_offset_ms: int) -> None:
        """Wall clock minus monotonic `now`, in ms (acks carry our wall clock)."""
        self.local.wall_offset_ms = wall_offset_ms

    def clock_offset_ms(self, now: float) -> int | None:
        """This node's clock offset from its peers (clockskew.py), if measured."""
        return self.offsets.estimate_ms(now)

    def coordinate(self) -> Coordinate:
        """This node's network coordinate (vivaldi.py; Serf's `GetCoordinate`)."""
        return self.coordinates.client.coordinate

    def coordinate_of(self, name: str) -> Coordinate | None:
        """The coordinate of member `name`: our own for our name, else the
        latest one `name` sent in an ack to our direct probe (None before
        the first; Serf's `GetCachedCoordinate`)."""
        if name == self.local.ident.name:
            return self.coordinate()
        return self.coordinates.of(name)

    def probed_directly(self, name: str) -> bool:
        """Whether this node has timed a direct probe of `name` that carried
        its coordinate, the only kind of round trip Vivaldi learns from."""
        return self.coordinates.of(name) is not None

    def coordinates_known(self) -> CoordinateSnapshot:
        """Every member's coordinate this node has, its own included, as a
        snapshot for readers (the API's `/v1/coordinates` and `/v1/rtt`)."""
        known = self.coordinates.peers()
        known[self.local.ident.name] = self.coordinate()
        return CoordinateSnapshot(self.local.ident.name, known)

    @property
    def counters(self) -> SwimCounters:
        """What the core did and dropped (the claims' count of old news
        added in; see `Claims.stale_claims`)."""
        counters, claims = self._counters, self.claims
        if claims.stale_claims:
            counters.ignored_stale += claims.stale_claims
            claims.stale_claims = 0
        return counters

    @property
    def ident(self) -> NodeIdentity:
        """This node's identity (its tags change with `set_tags`)."""
        return self.local.ident

    @property
    def incarnation(self) -> int:
        """This node's current incarnation."""
        return self.local.incarnation

    @property
    def leaving(self) -> bool:
        """Whether `leave` was called (and no `join` since)."""
        return self.local.leaving

    # -- the core contract ---------------------------------------------------

    def start(self, now: float) -> None:
        """Become alive at an incarnation above any used before, and begin
        probing, syncing and reconnecting."""
        self.claims.bump_incarnation(self.local.incarnation, now)
        self.prober.arm(now + self.rng.uniform(0, self.config.probe_interval_s))
        self.exchange.start(now)

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Handle one decoded message from `sender`."""
        self.handlers[type(message)](message, sender, now)

    def heard_from(self, sender: Address, now: float) -> None:
        """A datagram or stream came from `sender`, whatever it carried.
        If a member we hold suspect or dead listens there, it is back, or a
        cut has healed, whichever core the datagram was for (the election's
        requests and notices, the sync's trees, membership's own gossip),
        so the holds learn of a heal from any of them (`Reconnects.sign`;
        the burst of pings stays membership's: see there). 60 agents, 270
        cuts (`python -m shoal.sim.cuts --nodes 60 --minority 1,20,30
        1-10`): 11 members declared failed after the heal, 14 before.

        The node calls this for every datagram while `table.lost` is not
        empty, and the sender is in it (after the messages: a refutation
        takes it out first). That test costs 6-12 ns per datagram with nobody
        lost and 22-40 ns with members lost, where `receive_all` of the
        cheapest datagrams (a late ack, an election query) takes 250-600
        ns (`bench/heard_from.py`, 2 cores, loaded)."""
        entry = self.table.lost.get(sender)
        if entry is not None:
            self.reconnects.sign(now, entry[1])

    def tick(self, now: float) -> None:
        """Do all work due at or before `now`."""
        self._deadlines.run_due(now)

    def next_deadline(self) -> float | None:
        """When `tick` should next be called, or None if never."""
        return self._deadlines.next_at()

    def drain(self) -> Output:
        """Everything produced since the last drain, in contract order."""
        return self.out.drain()

    def stream_failed(self, peer: Address, now: float) -> None:
        """A stream to `peer` could not be opened or broke before an answer."""
        self.exchange.stream_failed(peer, now)

    def unreachable(self, addr: Address, now: float) -> None:
        """Nothing listens at `addr`: its host answered a datagram of ours
        with ICMP port unreachable, which is what a crashed agent on a
        running host leaves behind. memberlist ignores this and waits out
        the probe; we use it to reach the same verdict sooner:

        - the target of our probe: the relays are asked at once, and the
          member is suspected as soon as they all nack;
        - the target of a ping we relay: the requester gets its nack now;
        - any other alive member: it is probed next.

        A suspicion still runs its full timeout and can be refuted, so a
        forged or stray report costs at most an early probe.
        """
        self.prober.unreachable(addr, now)

    # -- commands --------------------------------------------------------------

    def join(self, addrs: list[Address], now: float, retry: bool = False) -> None:
        """Contact `addrs` with a full-state exchange; rejoin after a leave.

        With `retry` (the configured seeds at start-up), failed attempts are
        repeated with exponential backoff for as long as this node knows no
        live member, so agents started in any order find each other even
        where multicast discovery cannot help (Serf's retry_join).
        """
        local = self.local
        if local.leaving:
            local.leaving = False
            self.claims.bump_incarnation(local.incarnation, now)
            self.prober.arm(now)
        self.exchange.join(addrs, retry)

    def adopt(self, members: dict[str, Member]) -> None:
        """Take the alive rows `members` (name -> row) into the view, without
        gossiping.

        The simulator's formed start, before `start`: every node already holds
        the view that formation would have given it, so there is no news to
        spread and no event to report; probing picks the members up at its
        first pass. The rows are immutable, so every view shares them.
        """
        self.table.adopt(members)

    def leave(self, now: float) -> None:
        """Leave the cluster: tell members directly and by gossip."""
        local = self.local
        if local.leaving:
            return
        local.leaving = True
        self.table.set_self(LEFT, local.incarnation, now, local.ident)
        msg = Leave(local.incarnation, local.ident.name)
        self.gossip.broadcast(local.ident.name, msg, now)
        for name in self.table.live.sample(self.rng, self.config.leave_direct_max):
            self.gossip.send_packet(self.table.addr_of(name), [msg])
        self.out.events.append(MemberLeft(self.table.me.view()))

    def set_tags(self, tags: Tags, now: float) -> None:
        """Change this node's tags and tell the cluster."""
        local = self.local
        old = local.ident
        local.ident = NodeIdentity(old.name, old.node_id, old.addr, tags, old.versions)
        self.claims.bump_incarnation(local.incarnation, now)

    def members(self) -> list[MemberView]:
        """Snapshots of every member in this node's view, itself included."""
        return [m.view() for m in self.table.all()]
