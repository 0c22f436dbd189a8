"""SwimNode: the sans-IO SWIM + Lifeguard membership core.

Theory of operation. The node is told the time (`now`, monotonic seconds)
and fed decoded messages; it answers with an `Output` of things to persist,
datagrams or stream frames to send, and events. It never reads a clock, never
opens a socket and draws every random choice from the injected `Random`.

- Failure detection (SWIM §3.1, §4.3): every probe interval, the next member
  of a shuffled round-robin gets a `Ping`; without an `Ack` within the probe
  timeout, k relays get a `PingReq` (with nack, Lifeguard §IV-A); without any
  ack by the end of the interval the member becomes SUSPECT.
- Refused probes (ours): when the host of a probed member answers with
  ICMP port unreachable (its agent crashed, the host runs on), the relays
  are asked at once and the verdict comes when they have all nacked, about
  a probe interval sooner; see `unreachable`.
- Suspicion (SWIM §4.2, Lifeguard §IV-B): a `SuspicionTimer` starts long and
  shrinks with independent confirmations; at its deadline the member is
  declared DEAD. A suspect that hears of it raises its incarnation and
  broadcasts `Alive` (refutation). The buddy system sends the suspicion along
  with every ping to a suspect, so it learns at once.
- Local health (Lifeguard §IV-A): `LocalHealth` stretches our probe interval
  and timeout when our own probes fail in ways that point at us.
- Dissemination (SWIM §4.1): state changes go into a `BroadcastQueue` and are
  piggybacked on pings and acks, and gossiped to `gossip_nodes` random members
  every gossip interval while there is news; each update is sent about
  λ·log N times. Fresh news goes out at once, or a quarter interval after
  the last gossip datagram if that was more recent, not at the next tick: in
  a quiet cluster news spreads at network latency (100 simulated nodes:
  0.25 s), and under a stream of news a hop costs a quarter interval.
- Anti-entropy: a periodic `PushPull` of the full table over a stream with
  one random member, and with the seeds on join. Dead members are contacted
  again every reconnect interval, which heals partitions. A ping from a
  member we do not know, or hold dead, starts a sync with the prober (at
  most one per probe interval): our view is missing what it knows.
- Join (ours, besides memberlist's push-pull with the seeds): once a join is
  answered, the node sends its `Alive` directly to the members it learned,
  so a newcomer is known everywhere a round trip later; see `_announce_alive`.
- Corrections (ours): a stale `Suspect` or `Dead` (older than the `Alive` we
  hold) is answered with that `Alive`, to its sender only; see `_correct`.
- Leave: a `Leave` message, sent directly to many members and gossiped; the
  node keeps answering pings until its driver stops it, so nobody suspects a
  node that is only leaving.

State rules live in `MemberTable`; this module decides *when* and *what to
send*. Deadlines are kept in one heap, so `tick()` costs O(work due).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from shoal.kernel import codec
from shoal.kernel.contract import Address, Channel, Output, PersistIncarnation, Send
from shoal.kernel.counters import Counters
from shoal.kernel.deadlines import Deadlines
from shoal.kernel.outbox import Outbox
from shoal.membership.awareness import LocalHealth
from shoal.membership.broadcast import BroadcastQueue
from shoal.membership.events import (
    JoinCompleted,
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberReaped,
    MemberRefuted,
    MemberSuspected,
    MemberUpdated,
    NameConflicted,
)
from shoal.membership.member import Member, MemberState, MemberView, NodeIdentity, Tags
from shoal.membership.messages import (
    Ack,
    Alive,
    Dead,
    Leave,
    MemberRecord,
    Nack,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from shoal.membership.probe import ProbeRound, ProbeScheduler, RelayedProbe
from shoal.membership.profiles import SwimConfig
from shoal.membership.suspicion import SuspicionTimer
from shoal.membership.table import (
    ALIVE,
    DEAD,
    LEFT,
    SUSPECT,
    Ignored,
    IndexedSet,
    MemberTable,
    Transition,
)

# Room a datagram needs besides piggybacked updates: header, CBOR list head.
_DATAGRAM_OVERHEAD_BYTES = codec.HEADER_BYTES + 5
_MAX_CONFLICT_REPORTS = 1024
# Retrying the configured seeds: 1 s, doubling to 30 s (Serf retry_interval 30 s).
_REJOIN_FIRST_S = 1.0
_REJOIN_MAX_S = 30.0
# Ours: news that arrives while gossip is paced goes out this share of the
# gossip interval after the last gossip datagram (see the module docstring).
_FRESH_SHARE = 0.25
# Corrections (see _correct) per probe round, at most.
_MAX_CORRECTIONS = 64
_COUNTER_OF = {reason: "ignored_" + reason.value for reason in Ignored}
# The "sender" of claims the node makes to itself (merges, its own verdicts).
_LOCAL: Address = ("", 0)
Handler = Callable[[Any, Address, float], None]


class SwimCounters(Counters):
    """Counts of what the core did and dropped; exported as metrics."""

    probes_sent: int = 0
    probes_failed: int = 0
    indirect_probes_sent: int = 0
    acks_relayed: int = 0
    nacks_sent: int = 0
    suspicions_raised: int = 0
    refutations: int = 0
    deaths_declared: int = 0
    push_pulls_sent: int = 0
    stranger_syncs: int = 0  # of which: with a prober we did not know
    unreachable_reports: int = 0  # ICMP port unreachable for our datagrams
    probes_refused: int = 0  # of which: for the target of our probe
    stream_failures: int = 0
    gossip_datagrams: int = 0
    ignored_stale: int = 0
    ignored_unknown: int = 0
    ignored_name_conflict: int = 0
    ignored_ghost: int = 0
    ignored_already: int = 0
    misdirected_pings: int = 0
    late_acks: int = 0
    corrections_sent: int = 0  # our newer Alive, to a sender of a stale Suspect/Dead


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
        self.ident = ident
        self.config = config
        self.rng = rng
        self.incarnation = incarnation
        self.table = MemberTable(ident, incarnation, 0.0)
        self.health = LocalHealth(config.awareness_max_multiplier)
        self.broadcasts = BroadcastQueue()
        self.counters = SwimCounters()
        self.leaving = False
        self._scheduler = ProbeScheduler(rng)
        self._probe: ProbeRound | None = None
        self._relays: dict[int, RelayedProbe] = {}
        self._suspicions: dict[str, SuspicionTimer] = {}
        self._dead = IndexedSet()  # dead (not left) members, for reconnects
        self._recent_dead = IndexedSet()  # still gossiped to (gossip_to_dead_s)
        self._joining: set[Address] = set()
        self._seeds: list[Address] = []
        self._rejoin_armed = False
        self._rejoin_backoff_s = _REJOIN_FIRST_S
        self._conflicts: set[tuple[str, bytes]] = set()
        self._deadlines = Deadlines()
        self._seq = 0
        self._gossip_at: float | None = None  # the pending gossip tick
        self._gossiped_at = -1.0
        self._announce_join = False  # a join() has not been answered yet
        self._corrected: set[tuple[Address, str]] = set()  # this probe round
        # Members told directly that we are alive, at incarnation _told_at.
        self._told: set[str] = set()
        self._told_at = -1
        self._probe_armed = False
        self._stranger_sync_after = 0.0
        self.out = Outbox()
        # Aliases of the outbox's lists, for the hot paths (drain empties
        # them in place).
        self._send = self.out.sends
        self._events = self.out.events
        # Dispatch by exact type: one dict lookup on the hottest path, where a
        # chain of isinstance checks costs a microsecond per message.
        self.handlers: dict[type, Handler] = {
            Alive: self._on_alive,
            Ping: self._on_ping,
            Ack: self._on_ack,
            Suspect: self._on_suspect,
            Dead: self._on_dead,
            Leave: self._on_leave,
            PingReq: self._on_ping_req,
            Nack: self._on_nack,
            PushPull: self._on_push_pull,
        }
        self._members = self.table.members

    # -- the core contract ---------------------------------------------------

    def start(self, now: float) -> None:
        """Become alive at an incarnation above any used before, and begin
        probing, syncing and reconnecting."""
        self._bump_incarnation(self.incarnation, now)
        cfg = self.config
        self._arm_probe(now + self.rng.uniform(0, cfg.probe_interval_s))
        # Staggered over the interval for the size known at start: one
        # member for an agent, the whole cluster for a formed simulation.
        first = self.rng.uniform(0, cfg.push_pull_scaled_s(self.table.num_live()))
        self._deadlines.push(now + first, self._due_push_pull)
        self._deadlines.push(now + cfg.reconnect_interval_s, self._due_reconnect)

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Handle one decoded message from `sender`."""
        self.handlers[type(message)](message, sender, now)

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
        self.counters.stream_failures += 1
        if peer in self._joining:
            self._joining.discard(peer)
            self._events.append(JoinCompleted(peer, False))
            if peer in self._seeds and not self._rejoin_armed:
                self._rejoin_armed = True
                self._deadlines.push(now + self._rejoin_backoff_s, self._due_rejoin)
                self._rejoin_backoff_s = min(self._rejoin_backoff_s * 2, _REJOIN_MAX_S)

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
        self.counters.unreachable_reports += 1
        for seq, relay in list(self._relays.items()):  # a few in flight at most
            if relay.target_addr == addr:
                self._due_relay(seq, now)
        probe = self._probe
        if probe is not None and probe.target_addr == addr:
            self._on_unreachable_probe(probe, now)
            return
        for name in self.table.live.items():
            m = self._members[name]
            if m.ident.addr == addr:
                if m.state is ALIVE:  # a suspect is being dealt with already
                    self._scheduler.prioritize(name)
                return

    def _due_rejoin(self, _: None, now: float) -> None:
        self._rejoin_armed = False
        if self.leaving or len(self.table.live) > 0:
            self._rejoin_backoff_s = _REJOIN_FIRST_S
            return
        for addr in self._seeds:
            if addr not in self._joining:
                self._joining.add(addr)
                self._stream_push_pull(addr, join=True)

    # -- commands --------------------------------------------------------------

    def join(self, addrs: list[Address], now: float, retry: bool = False) -> None:
        """Contact `addrs` with a full-state exchange; rejoin after a leave.

        With `retry` (the configured seeds at start-up), failed attempts are
        repeated with exponential backoff for as long as this node knows no
        live member, so agents started in any order find each other even
        where multicast discovery cannot help (Serf's retry_join).
        """
        if self.leaving:
            self.leaving = False
            self._bump_incarnation(self.incarnation, now)
            self._arm_probe(now)
        if retry:
            self._seeds = [a for a in addrs if a != self.ident.addr]
        self._announce_join = True
        for addr in addrs:
            if addr == self.ident.addr:
                continue
            self._joining.add(addr)
            self._stream_push_pull(addr, join=True)

    def adopt(self, members: list[tuple[NodeIdentity, int]], now: float) -> None:
        """Take `members` (identity, incarnation) as alive without gossiping.

        The simulator's formed start, before `start`: every node already holds
        the view that formation would have given it, so there is no news to
        spread and no event to report; probing picks the members up at its
        first pass.
        """
        for ident, inc in members:
            if ident.name != self.ident.name:
                self.table.apply_alive(ident, inc, now)

    def leave(self, now: float) -> None:
        """Leave the cluster: tell members directly and by gossip."""
        if self.leaving:
            return
        self.leaving = True
        self.table.set_self(LEFT, self.incarnation, now, self.ident)
        msg = Leave(self.incarnation, self.ident.name)
        self._broadcast(self.ident.name, msg, now)
        for name in self.table.live.sample(self.rng, self.config.leave_direct_max):
            self._send_packet(self.table.get(name).ident.addr, [msg])  # type: ignore[union-attr]
        self._events.append(MemberLeft(self.table.me.view()))

    def set_tags(self, tags: Tags, now: float) -> None:
        """Change this node's tags and tell the cluster."""
        self.ident = NodeIdentity(self.ident.name, self.ident.node_id, self.ident.addr, tags)
        self._bump_incarnation(self.incarnation, now)

    def members(self) -> list[MemberView]:
        """Snapshots of every member in this node's view, itself included."""
        return [m.view() for m in self.table.all()]

    # -- handlers: probing -------------------------------------------------------

    def _on_ping(self, msg: Ping, sender: Address, now: float) -> None:
        if msg.target != self.ident.name:
            self.counters.misdirected_pings += 1
            return
        self._send_packet(sender, [Ack(msg.seq)], piggyback=True)
        if msg.source not in self.table.live and msg.source != self.ident.name:
            self._sync_with_stranger(sender, now)

    def _sync_with_stranger(self, sender: Address, now: float) -> None:
        """A member we do not know (or hold dead or left) probes us, so our view misses
        what it knows: a node that joined in the same instant as many others
        got its seed's table before they were in it, and gossip may have used
        up its retransmits before reaching it. Sync with the prober at once
        instead of waiting up to a push-pull interval (30 s). At most one such
        sync per probe interval."""
        if self.leaving or now < self._stranger_sync_after:
            return
        self._stranger_sync_after = now + self.config.probe_interval_s
        self.counters.stranger_syncs += 1
        self._stream_push_pull(sender, join=False)

    def _on_ping_req(self, msg: PingReq, sender: Address, now: float) -> None:
        seq = self._next_seq()
        deadline = now + self.config.probe_timeout_s
        self._relays[seq] = RelayedProbe(sender, msg.seq, msg.target_addr, deadline, msg.nack)
        self._deadlines.push(deadline, self._due_relay, seq)
        self._send_packet(msg.target_addr, [Ping(seq, msg.target, self.ident.name)])

    def _on_ack(self, msg: Ack, sender: Address, now: float) -> None:
        relay = self._relays.pop(msg.seq, None)
        if relay is not None:
            self.counters.acks_relayed += 1
            self._send_packet(relay.requester, [Ack(relay.requester_seq)])
            return
        probe = self._probe
        if probe is None or probe.seq != msg.seq or probe.acked:
            self.counters.late_acks += 1
            return
        probe.acked = True
        if now <= probe.timeout_at:  # a direct answer in time: we are healthy
            self.health.apply(-1)

    def _on_nack(self, msg: Nack, sender: Address, now: float) -> None:
        probe = self._probe
        if probe is not None and probe.seq == msg.seq:
            probe.nacks += 1
            if probe.refused and probe.nacks >= probe.expected_nacks and not probe.acked:
                self._fail_probe(probe, now)

    def _due_probe(self, _: None, now: float) -> None:
        self._probe_armed = False
        self._corrected.clear()
        probe = self._probe
        if probe is not None and not probe.acked:
            self._fail_probe(probe, now)
        self._probe = None
        if self.leaving:
            return
        self._start_probe(now)
        self._arm_probe(now + self.health.scale(self.config.probe_interval_s))

    def _start_probe(self, now: float) -> None:
        live = self.table.live
        name = self._scheduler.next_target(live.items(), live.__contains__)
        if name is None:
            return
        m = self.table.get(name)
        assert m is not None
        seq = self._next_seq()
        timeout_at = now + self.health.scale(self.config.probe_timeout_s)
        end_at = now + self.health.scale(self.config.probe_interval_s)
        self._probe = ProbeRound(seq, name, m.ident.addr, m.incarnation, timeout_at, end_at)
        self._deadlines.push(timeout_at, self._due_probe_timeout, seq)
        msgs: list[Any] = [Ping(seq, name, self.ident.name)]
        if m.state is SUSPECT:  # Lifeguard buddy system: tell the suspect
            msgs.append(Suspect(m.incarnation, name, self.ident.name))
        self.counters.probes_sent += 1
        self._send_packet(m.ident.addr, msgs, piggyback=True)

    def _fail_probe(self, probe: ProbeRound, now: float) -> None:
        """The verdict on a round without an ack: suspect the target."""
        self._probe = None
        self.counters.probes_failed += 1
        self.health.apply(probe.health_delta())
        self._on_suspect(Suspect(probe.incarnation, probe.target, self.ident.name), _LOCAL, now)

    def _due_probe_timeout(self, seq: int, now: float) -> None:
        probe = self._probe
        if probe is None or probe.seq != seq or probe.acked or probe.indirect_sent:
            return
        probe.indirect_sent = True
        relays = self.table.live.sample(self.rng, self.config.indirect_checks, (probe.target,))
        req = PingReq(seq, probe.target, probe.target_addr, True)
        for name in relays:
            relay = self.table.get(name)
            assert relay is not None
            self._send_packet(relay.ident.addr, [req])
        probe.expected_nacks = len(relays)
        self.counters.indirect_probes_sent += len(relays)

    def _on_unreachable_probe(self, probe: ProbeRound, now: float) -> None:
        """Our ping's target refused it: ask the relays now, not at the probe
        timeout, and give the verdict once they all nack (they get refused
        too), not at the end of the interval. A path that only we lack still
        gets its indirect acks, so this suspects no one that SWIM would not."""
        if probe.acked or probe.refused:
            return
        probe.refused = True
        self.counters.probes_refused += 1
        self._due_probe_timeout(probe.seq, now)
        if probe.nacks >= probe.expected_nacks:  # nobody to ask
            self._fail_probe(probe, now)

    def _due_relay(self, seq: int, now: float) -> None:
        relay = self._relays.pop(seq, None)
        if relay is not None and relay.nack:
            self.counters.nacks_sent += 1
            self._send_packet(relay.requester, [Nack(relay.requester_seq)])

    # -- handlers: state claims ----------------------------------------------------

    def _on_alive(self, msg: Alive, sender: Address, now: float) -> None:
        node = msg.node
        if node.name == self.ident.name:
            if node.node_id != self.ident.node_id:
                self._report_conflict(self.ident.node_id, node)
            elif msg.incarnation > self.incarnation and not self.leaving:
                self._refute(msg.incarnation, now, "")  # we restarted; they remember more
            return
        known = self._members.get(node.name)
        if known is not None and known.incarnation >= msg.incarnation:
            if known.ident.node_id == node.node_id:  # the common case: old news
                self.counters.ignored_stale += 1
                return
        result = self.table.apply_alive(node, msg.incarnation, now)
        if isinstance(result, Ignored):
            if result is Ignored.NAME_CONFLICT:
                known = self.table.get(node.name)
                assert known is not None
                self._report_conflict(known.ident.node_id, node)
            self._count(result)
            return
        m = self.table.get(node.name)
        assert m is not None
        self._suspicions.pop(node.name, None)
        if result is Transition.JOINED:
            self._dead.discard(node.name)
            self._recent_dead.discard(node.name)
            self._scheduler.insert(node.name)
            self._events.append(MemberJoined(m.view()))
        elif result is Transition.REFUTED:
            self._events.append(MemberRefuted(m.view()))
        elif result is Transition.UPDATED:
            self._events.append(MemberUpdated(m.view()))
        self._broadcast(node.name, msg, now)

    def _on_suspect(self, msg: Suspect, sender: Address, now: float) -> None:
        if msg.node == self.ident.name:
            if msg.incarnation >= self.incarnation and not self.leaving:
                self._refute(msg.incarnation, now, msg.source)
            else:
                self._correct(msg.node, msg.incarnation, sender)
            return
        result = self.table.apply_suspect(msg.node, msg.incarnation, now)
        if result is Transition.SUSPECTED:
            m = self.table.get(msg.node)
            assert m is not None
            n = self.table.num_live()
            k = self.config.suspicion_mult - 2
            k = 0 if n - 2 < k else k
            min_s = self.config.suspicion_min_s(n)
            max_s = min_s * self.config.suspicion_max_timeout_mult
            timer = SuspicionTimer(now, k, min_s, max_s, msg.source)
            self._suspicions[msg.node] = timer
            self._deadlines.push(timer.deadline_at, self._due_suspicion, msg.node)
            if msg.source == self.ident.name:
                self.counters.suspicions_raised += 1
            self._events.append(MemberSuspected(m.view(), msg.source))
            self._broadcast(msg.node, msg, now)
            return
        if result is Ignored.ALREADY:
            timer = self._suspicions.get(msg.node)
            if timer is not None and timer.confirm(msg.source):
                self._deadlines.push(timer.deadline_at, self._due_suspicion, msg.node)
                self._broadcast(msg.node, msg, now)  # others count confirmations too
            return
        assert isinstance(result, Ignored)
        self._count(result)
        if result is Ignored.STALE:
            self._correct(msg.node, msg.incarnation, sender)

    def _on_dead(self, msg: Dead, sender: Address, now: float) -> None:
        if msg.node == self.ident.name:
            if msg.incarnation >= self.incarnation and not self.leaving:
                self._refute(msg.incarnation, now, msg.source)
            else:
                self._correct(msg.node, msg.incarnation, sender)
            return
        result = self.table.apply_dead(msg.node, msg.incarnation, now, left=False)
        if isinstance(result, Ignored):
            self._count(result)
            if result is Ignored.STALE:
                self._correct(msg.node, msg.incarnation, sender)
            return
        m = self._member_down(msg.node, now)
        self._dead.add(msg.node)
        if msg.source == self.ident.name:
            self.counters.deaths_declared += 1
        self._events.append(MemberDied(m.view(), msg.source))
        self._broadcast(msg.node, msg, now)

    def _on_leave(self, msg: Leave, sender: Address, now: float) -> None:
        if msg.node == self.ident.name:
            if msg.incarnation >= self.incarnation and not self.leaving:
                self._refute(msg.incarnation, now, msg.node)
            return
        result = self.table.apply_dead(msg.node, msg.incarnation, now, left=True)
        if isinstance(result, Ignored):
            self._count(result)
            return
        m = self._member_down(msg.node, now)
        self._dead.discard(msg.node)
        self._events.append(MemberLeft(m.view()))
        self._broadcast(msg.node, msg, now)

    def _member_down(self, name: str, now: float) -> Member:
        m = self.table.get(name)
        assert m is not None
        self._suspicions.pop(name, None)
        self._recent_dead.add(name)
        expire_at = now + self.config.gossip_to_dead_s
        self._deadlines.push(expire_at, self._due_gossip_expire, (name, now))
        reap_s = self.config.left_reap_s if m.state is LEFT else self.config.dead_reap_s
        self._deadlines.push(now + reap_s, self._due_reap, (name, now))
        return m

    def _due_suspicion(self, name: str, now: float) -> None:
        timer = self._suspicions.get(name)
        if timer is None or timer.deadline_at > now:
            return  # refuted, or a confirmation moved the deadline
        m = self.table.get(name)
        if m is not None and m.state is SUSPECT:
            self._on_dead(Dead(m.incarnation, name, self.ident.name), _LOCAL, now)

    def _correct(self, name: str, claimed: int, sender: Address) -> None:
        """`sender` spreads a suspicion (or death) of `name` older than the
        refutation we hold: send it that `Alive`, directly.

        Ours; memberlist drops the stale claim. But its sender missed the
        refutation (each update reaches a member only by chance, about λ·log N
        sends in all), and without this it learns of it from a push-pull or a
        ping of the member it suspects, after its suspicion has expired and it
        has declared a live member dead: in the simulator (60 nodes, 5 % loss)
        one node held a refuted suspicion for 44 s, then reported the member
        failed. Each (sender, member) pair is corrected at most once per probe
        round, so a refutation racing its suspicion costs at most one datagram
        per stale claim received.
        """
        if sender == _LOCAL or self.leaving or len(self._corrected) >= _MAX_CORRECTIONS:
            return
        m = self.table.get(name)
        if m is None or m.state is not ALIVE or m.incarnation <= claimed:
            return
        key = (sender, name)
        if key in self._corrected:
            return
        self._corrected.add(key)
        self.counters.corrections_sent += 1
        self._send.append(Send(sender, (Alive(m.incarnation, m.ident),)))

    def _refute(self, claimed: int, now: float, source: str) -> None:
        """Someone says we are suspect, dead or gone: outbid the claim."""
        self.counters.refutations += 1
        self.health.apply(1)
        self._bump_incarnation(max(self.incarnation, claimed), now)
        self._events.append(MemberRefuted(self.table.me.view(), source))

    def _bump_incarnation(self, above: int, now: float) -> None:
        self.incarnation = above + 1
        self.out.persist(PersistIncarnation(self.incarnation))
        self.table.set_self(MemberState.ALIVE, self.incarnation, now, self.ident)
        self._broadcast(self.ident.name, Alive(self.incarnation, self.ident), now)

    def _report_conflict(self, known_id: bytes, claim: NodeIdentity) -> None:
        key = (claim.name, claim.node_id)
        if key in self._conflicts or len(self._conflicts) >= _MAX_CONFLICT_REPORTS:
            return
        self._conflicts.add(key)
        self._events.append(NameConflicted(claim.name, known_id, claim.node_id, claim.addr))

    # -- anti-entropy, reconnects, reaping -------------------------------------------

    def _on_push_pull(self, msg: PushPull, sender: Address, now: float) -> None:
        for rec in msg.members:
            self._merge(rec, msg.source, now)
        if not msg.reply:
            self._send.append(Send(sender, (self._push_pull_msg(False, True),), Channel.STREAM))
        elif sender in self._joining:
            self._joining.discard(sender)
            self._events.append(JoinCompleted(sender, True))
            if self._announce_join:
                self._announce_join = False
                self._announce_alive(msg.source)

    def _announce_alive(self, seed: str) -> None:
        """Tell the members a join just taught us that we are alive, directly.

        Gossip alone leaves a tail: each update is sent about λ·log N times to
        random members, so now and then a member hears of a newcomer only from
        its next push-pull, 30 s later; and when many nodes join at once, the
        last of them reached every member 0.25 s (p90) after its start in the
        simulator, and 5 ms with this. The seed's table is a snapshot taken in
        the order joins reach it, so of any two newcomers one is in the other's
        snapshot and hears from it here. Each member is told once per
        incarnation, so joining through several peers (discovery does) does not
        repeat it; beyond `join_direct_max` members, gossip carries the rest.
        """
        live = self.table.live
        if self._told_at != self.incarnation:
            self._told_at = self.incarnation
            self._told = set()
        # (forgetting members that are gone keeps the set within the table)
        self._told = told = {name for name in self._told if name in live}
        told.add(seed)  # it has just merged our state
        fresh = [name for name in live.items() if name not in told]
        msg = Alive(self.incarnation, self.ident)
        for name in self.rng.sample(fresh, min(len(fresh), self.config.join_direct_max)):
            told.add(name)
            self._send.append(Send(self._addr_of(name), (msg,)))

    def _merge(self, rec: MemberRecord, source: str, now: float) -> None:
        # memberlist mergeState: a remote "dead" is only a suspicion here,
        # so that one node's stale view cannot kill a member outright.
        node, inc, state = rec.node, rec.incarnation, rec.state
        if state is ALIVE:
            self._on_alive(Alive(inc, node), _LOCAL, now)
        elif state is LEFT:
            self._on_leave(Leave(inc, node.name), _LOCAL, now)
        else:
            self._on_suspect(Suspect(inc, node.name, source), _LOCAL, now)

    def _push_pull_msg(self, join: bool, reply: bool) -> PushPull:
        records = tuple([MemberRecord(m.ident, m.incarnation, m.state) for m in self.table.all()])
        return PushPull(self.ident.name, join, reply, records)

    def _stream_push_pull(self, addr: Address, join: bool) -> None:
        self.counters.push_pulls_sent += 1
        self._send.append(Send(addr, (self._push_pull_msg(join, False),), Channel.STREAM))

    def _due_push_pull(self, _: None, now: float) -> None:
        n = self.table.num_live()
        self._deadlines.push(now + self.config.push_pull_scaled_s(n), self._due_push_pull)
        if self.leaving:
            return
        for name in self.table.live.sample(self.rng, 1):
            self._stream_push_pull(self._addr_of(name), join=False)

    def _due_reconnect(self, _: None, now: float) -> None:
        self._deadlines.push(now + self.config.reconnect_interval_s, self._due_reconnect)
        if self.leaving:
            return
        for name in self._dead.sample(self.rng, 1):
            self._stream_push_pull(self._addr_of(name), join=False)

    def _due_gossip_expire(self, arg: tuple[str, float], now: float) -> None:
        name, down_at = arg
        m = self.table.get(name)
        if m is None or m.changed_at == down_at:
            self._recent_dead.discard(name)

    def _due_reap(self, arg: tuple[str, float], now: float) -> None:
        name, down_at = arg
        m = self.table.get(name)
        if m is None or m.changed_at != down_at or m.state not in (DEAD, LEFT):
            return
        self.table.reap(name)
        self._dead.discard(name)
        self._recent_dead.discard(name)
        self._events.append(MemberReaped(m.view()))
        reap_s = self.config.left_reap_s if m.state is LEFT else self.config.dead_reap_s
        self._deadlines.push(now + reap_s, self._due_tombstone, (name, m.ident.node_id))

    def _due_tombstone(self, arg: tuple[str, bytes], now: float) -> None:
        self.table.forget_tombstone(*arg)

    # -- gossip ----------------------------------------------------------------------

    def _broadcast(self, key: str, msg: Any, now: float) -> None:
        self.broadcasts.push(key, msg, codec.encoded_size(msg))
        at = self._gossip_at
        soon = max(now, self._gossiped_at + self.config.gossip_interval_s * _FRESH_SHARE)
        if at is None or at > soon:
            self._gossip_at = soon
            self._deadlines.push(soon, self._due_gossip, soon)

    def _due_gossip(self, at: float, now: float) -> None:
        if at != self._gossip_at:
            return  # superseded by an earlier tick for fresh news
        live, dead = self.table.live, self._recent_dead
        pool = len(live) + len(dead)
        limit = self.config.retransmit_limit(self.table.num_live())
        budget = self.config.mtu_bytes - _DATAGRAM_OVERHEAD_BYTES
        for i in self.rng.sample(range(pool), min(self.config.gossip_nodes, pool)):
            name = live.items()[i] if i < len(live) else dead.items()[i - len(live)]
            msgs = self.broadcasts.take(budget, limit)
            if not msgs:
                break
            self.counters.gossip_datagrams += 1
            self._gossiped_at = now
            self._send.append(Send(self._addr_of(name), tuple(msgs)))
        if len(self.broadcasts) and pool:
            self._gossip_at = at = now + self.config.gossip_interval_s
            self._deadlines.push(at, self._due_gossip, at)
        else:
            self._gossip_at = None

    def _send_packet(self, to: Address, msgs: list[Any], piggyback: bool = False) -> None:
        if piggyback and len(self.broadcasts):
            used = sum(codec.encoded_size(m) for m in msgs)
            budget = self.config.mtu_bytes - _DATAGRAM_OVERHEAD_BYTES - used
            limit = self.config.retransmit_limit(self.table.num_live())
            msgs = msgs + self.broadcasts.take(budget, limit)
        self._send.append(Send(to, tuple(msgs)))

    # -- small helpers -------------------------------------------------------------

    def _addr_of(self, name: str) -> Address:
        m = self.table.get(name)
        assert m is not None
        return m.ident.addr

    def _count(self, reason: Ignored) -> None:
        name = _COUNTER_OF[reason]
        setattr(self.counters, name, getattr(self.counters, name) + 1)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _arm_probe(self, at: float) -> None:
        if not self._probe_armed:
            self._probe_armed = True
            self._deadlines.push(at, self._due_probe)

