"""Probing: SWIM's failure detector, both sides of it (SWIM §3.1, §4.3).

Theory of operation. Every probe interval (stretched by Lifeguard's local
health, §IV-A) the next member of a shuffled round-robin (`ProbeScheduler`,
SWIM §4.3) gets a `Ping`, with the queued gossip piggybacked. Then:

- an `Ack` within the probe timeout ends the round well and lowers our LHM
  score; a later one still saves the member, but says nothing of our health;
- without it, at the probe timeout, k relays get a `PingReq` asking for a
  `Nack` if they hear nothing either (Lifeguard §IV-A);
- without any ack by the end of the interval, the member is suspected
  (claims.py takes it from there), and each nack that did not come counts
  against our own health: the relays could not hear us either.

The buddy system (Lifeguard §IV-B): a ping to a suspect carries the
`Suspect`, so that it learns at once and can refute.

The other side: we answer pings with acks (piggybacking gossip), and relay
`PingReq`s as `RelayedProbe`s: a ping of our own whose ack is forwarded, or,
at the probe timeout, a `Nack`.

Network coordinates (Serf's ping delegate): a direct ack carries the
acker's Vivaldi coordinate; the prober, which timed the round trip from its
`now` at the ping to its `now` at the ack (the driver stamps `now` when the
datagram arrives), updates its own coordinate and keeps the acker's
(vivaldi.py). Relayed acks never count: their round trip went through the
relay. Mixed versions: an agent that predates coordinates refuses the ack
form that carries one (a new tag), so an ack carries it only when the ping
said the prober reads it. Ours say so by their `seq`, drawn from
[2^31, 2^32) (`COORD_SEQ_MIN`); older agents count theirs from 1, and echo
whatever `seq` they are pinged with.

Checks (ours, suspicion.py): a member that hears that another suspects a
member checks it at once, besides its own rounds: a ping carrying the
`Suspect` (so a live suspect refutes at once), the relays asked after a
quarter of the probe timeout, and the verdict (a confirmation, our own
`Suspect`) when every relay has nacked or at the end of the interval. Each
member that hears checks with the chance that makes twice the
confirmations that count check, in expectation (12 on the LAN profile), so
that a suspicion costs the same in any cluster. A live suspect answers the
checks; a dead or hung one collects a confirmation from each, within about
half a second.

Refusals (ours): when a probed member's host answers with ICMP port
unreachable (its agent crashed, the host runs on), the relays are asked at
once, and the verdict comes when they have all nacked, about a probe
interval sooner; a relayed ping that is refused is nacked at once. A
suspicion still runs its full timeout and can be refuted, so a forged or
stray report costs at most an early probe.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from shoal.kernel.contract import Address
from shoal.kernel.deadlines import Deadlines
from shoal.membership.awareness import LocalHealth
from shoal.membership.claims import LOCAL
from shoal.membership.clockskew import ClockOffsets
from shoal.membership.counters import SwimCounters
from shoal.membership.member import LocalState
from shoal.membership.messages import Ack, Nack, Ping, PingReq, Suspect
from shoal.membership.probe import ProbeRound, ProbeScheduler, RelayedProbe
from shoal.membership.profiles import SwimConfig
from shoal.membership.table import ALIVE, SUSPECT, MemberTable
from shoal.membership.vivaldi import CoordinateCache

# Sequence numbers of pings and ping-reqs from an agent that reads
# coordinates in acks (see the module docstring). 2^31 steps before they
# wrap is decades of probing, and only equality with an outstanding round
# matters; the price is 2-4 more bytes per ping and ack (a 5-byte CBOR int).
COORD_SEQ_MIN = 2**31
COORD_SEQ_END = 2**32
# A check asks its relays this far into the probe timeout: a suspect that
# answers at all answers a loopback or LAN ping within it, and the relays'
# own timeouts (the whole probe timeout) are what the verdict waits for.
_CHECK_RELAYS_AT = 0.25
# Slack in the coordinate cache above the table's size before members no
# longer in the table are dropped from it (amortised: not on every ack).
_COORD_PRUNE_SLACK = 64


class SendPacket(Protocol):
    """`Gossip.send_packet`: one datagram, gossip piggybacked if asked."""

    def __call__(self, to: Address, msgs: list[Any], piggyback: bool = False) -> None: ...


class Prober:
    """Our probe rounds, the pings we relay, and answers to others' pings."""

    def __init__(
        self,
        local: LocalState,
        table: MemberTable,
        config: SwimConfig,
        rng: random.Random,
        health: LocalHealth,
        deadlines: Deadlines,
        counters: SwimCounters,
        scheduler: ProbeScheduler,
        send_packet: SendPacket,
        suspect: Callable[[Suspect, Address, float], None],
        sync_with_stranger: Callable[[str, Address, float], None],
        suspect_heard: Callable[[str, float], None],
        reconnect_acked: Callable[[int, Address, float], bool],
        offsets: ClockOffsets,
        coordinates: CoordinateCache,
    ) -> None:
        """Share the node's state with the probing role.

        Args:
            local: this node's identity and leaving flag.
            table: the view; its live members are probed.
            config: probe interval, timeout and indirect checks.
            rng: the node's only source of randomness.
            health: Lifeguard's LHM, which scales the probe timing.
            deadlines: the node's deadline heap.
            counters: the node's counters.
            scheduler: the round-robin order of targets.
            send_packet: sends a datagram, piggybacking gossip if asked.
            suspect: applies a `Suspect` claim (the verdict on a round).
            sync_with_stranger: a member we do not know (or hold dead)
                pinged us.
            suspect_heard: a member we suspect pinged us (reconnect.py
                pings the other lost members then).
            reconnect_acked: an ack of no probe round: whether it answers
                a reconnect ping (reconnect.py), which it handles.
            offsets: this node's clock offset, sampled from direct acks.
            coordinates: this node's network coordinate and its peers',
                updated from direct acks.
        """
        self.offsets = offsets
        self.coordinates = coordinates
        self._local = local
        self._name = local.ident.name  # never changes (set_tags keeps it)
        self._table = table
        self._config = config
        self._rng = rng
        self._health = health
        self._deadlines = deadlines
        self._counters = counters
        self.scheduler = scheduler
        self._send_packet = send_packet
        self._suspect = suspect
        self._sync_with_stranger = sync_with_stranger
        self._suspect_heard = suspect_heard
        self._reconnect_acked = reconnect_acked
        self._probe: ProbeRound | None = None
        self._checks: dict[int, ProbeRound] = {}  # seq -> a check of a suspect
        self._checking: set[str] = set()  # the names of those suspects
        self._relays: dict[int, RelayedProbe] = {}
        self._seq = COORD_SEQ_MIN - 1
        self._armed = False

    # -- handlers ----------------------------------------------------------------

    def on_ping(self, msg: Ping, sender: Address, now: float) -> None:
        """Answer a ping for us with an ack, and sync with a stranger."""
        if msg.target != self._name:
            self._counters.misdirected_pings += 1
            return
        wall_ms = int(now * 1000) + self._local.wall_offset_ms
        if msg.seq >= COORD_SEQ_MIN:  # the prober reads coordinates
            ack = Ack(msg.seq, wall_ms, self.coordinates.client.coordinate)
        else:
            ack = Ack(msg.seq, wall_ms)
        source = self._table.get(msg.source)
        if source is not None and source.state is SUSPECT:
            # The buddy system, answering (ours): a suspect that pings us is
            # told, as our probe of it would tell it. After a cut heals, the
            # suspicions raised during it reach the suspects this way within
            # a probe round or two; gossip spent its retransmits in the cut.
            msgs: list[Any] = [ack, Suspect(source.incarnation, msg.source, self._name)]
            self._send_packet(sender, msgs, piggyback=True)
            self._suspect_heard(msg.source, now)
        else:
            self._send_packet(sender, [ack], piggyback=True)
        if msg.source not in self._table.live and msg.source != self._name:
            self._sync_with_stranger(msg.source, sender, now)

    def on_ping_req(self, msg: PingReq, sender: Address, now: float) -> None:
        """Ping `msg.target` on `sender`'s behalf."""
        seq = self._next_seq()
        deadline = now + self._config.probe_timeout_s
        self._relays[seq] = RelayedProbe(sender, msg.seq, msg.target_addr, deadline, msg.nack)
        self._deadlines.push(deadline, self._due_relay, seq)
        self._send_packet(msg.target_addr, [Ping(seq, msg.target, self._name)])

    def on_ack(self, msg: Ack, sender: Address, now: float) -> None:
        """An ack for a ping we relayed (forward it) or for our probe."""
        relay = self._relays.pop(msg.seq, None)
        if relay is not None:
            self._counters.acks_relayed += 1
            self._send_packet(relay.requester, [Ack(relay.requester_seq)])
            return
        check = self._checks.pop(msg.seq, None)
        if check is not None:
            self._checking.discard(check.target)
            return
        probe = self._probe
        if probe is None or probe.seq != msg.seq or probe.acked:
            if not self._reconnect_acked(msg.seq, sender, now):
                self._counters.late_acks += 1
            return
        probe.acked = True
        if now <= probe.timeout_at:  # a direct answer in time: we are healthy
            self._health.apply(-1)
        if sender != probe.target_addr:
            return  # relayed: neither the clock nor the round trip is the target's
        if msg.wall_ms:
            our_wall_ms = now * 1000 + self._local.wall_offset_ms
            self.offsets.sample(probe.target, probe.sent_at, now, our_wall_ms, msg.wall_ms)
        if msg.coord is not None:
            self._learn_coordinate(probe.target, msg, now - probe.sent_at)

    def _learn_coordinate(self, target: str, msg: Ack, rtt_s: float) -> None:
        assert msg.coord is not None
        cache = self.coordinates
        if not cache.observe(target, msg.coord, rtt_s):
            self._counters.coordinates_rejected += 1
            return
        self._counters.coordinate_samples += 1
        if len(cache) > len(self._table) + _COORD_PRUNE_SLACK:
            table = self._table
            cache.forget_unless(lambda name: table.get(name) is not None)

    def on_nack(self, msg: Nack, sender: Address, now: float) -> None:
        """A relay did not hear our probe's target either."""
        check = self._checks.get(msg.seq)
        if check is not None:
            check.nacks += 1
            if check.nacks >= check.expected_nacks:
                self._fail_check(check, now)
            return
        probe = self._probe
        if probe is not None and probe.seq == msg.seq:
            probe.nacks += 1
            if probe.refused and probe.nacks >= probe.expected_nacks and not probe.acked:
                self._fail_probe(probe, now)

    def unreachable(self, addr: Address, now: float) -> None:
        """Nothing listens at `addr` (see `SwimNode.unreachable`)."""
        self._counters.unreachable_reports += 1
        for seq, relay in list(self._relays.items()):  # a few in flight at most
            if relay.target_addr == addr:
                self._due_relay(seq, now)
        for check in list(self._checks.values()):
            if check.target_addr == addr and not check.refused:
                check.refused = True  # its relays are asked now
                self._due_check_relays(check.seq, now)
        probe = self._probe
        if probe is not None and probe.target_addr == addr:
            self._on_unreachable_probe(probe, now)
            return
        members = self._table.members
        for name in self._table.live.items():
            m = members[name]
            if m.ident.addr == addr:
                if m.state is ALIVE:  # a suspect is being dealt with already
                    self.scheduler.prioritize(name)
                return

    # -- rounds ------------------------------------------------------------------

    def arm(self, at: float) -> None:
        """Run the next probe round at `at`, unless one is armed already."""
        if not self._armed:
            self._armed = True
            self._deadlines.push(at, self._due_probe)

    def _due_probe(self, _: None, now: float) -> None:
        self._armed = False
        probe = self._probe
        if probe is not None and not probe.acked:
            self._fail_probe(probe, now)
        self._probe = None
        if self._local.leaving:
            return
        self._start_probe(now)
        self.arm(now + self._health.scale(self._config.probe_interval_s))

    def _start_probe(self, now: float) -> None:
        live = self._table.live
        name = self.scheduler.next_target(live.items(), live.__contains__)
        if name is None:
            return
        m = self._table.get(name)
        assert m is not None
        seq = self._next_seq()
        timeout_at = now + self._health.scale(self._config.probe_timeout_s)
        end_at = now + self._health.scale(self._config.probe_interval_s)
        self._probe = ProbeRound(seq, name, m.ident.addr, m.incarnation, timeout_at, end_at, now)
        self._deadlines.push(timeout_at, self._due_probe_timeout, seq)
        msgs: list[Any] = [Ping(seq, name, self._name)]
        if m.state is SUSPECT:  # Lifeguard buddy system: tell the suspect
            msgs.append(Suspect(m.incarnation, name, self._name))
        self._counters.probes_sent += 1
        self._send_packet(m.ident.addr, msgs, piggyback=True)

    def _fail_probe(self, probe: ProbeRound, now: float) -> None:
        """The verdict on a round without an ack: suspect the target."""
        self._probe = None
        self._counters.probes_failed += 1
        self._health.apply(probe.health_delta())
        self._suspect(Suspect(probe.incarnation, probe.target, self._name), LOCAL, now)

    def _due_probe_timeout(self, seq: int, now: float) -> None:
        probe = self._probe
        if probe is None or probe.seq != seq or probe.acked or probe.indirect_sent:
            return
        self._ask_relays(probe)

    def _ask_relays(self, probe: ProbeRound) -> None:
        probe.indirect_sent = True
        relays = self._table.live.sample(self._rng, self._config.indirect_checks, (probe.target,))
        req = PingReq(probe.seq, probe.target, probe.target_addr, True)
        for name in relays:
            self._send_packet(self._table.addr_of(name), [req])
        probe.expected_nacks = len(relays)
        self._counters.indirect_probes_sent += len(relays)

    def _on_unreachable_probe(self, probe: ProbeRound, now: float) -> None:
        """Our ping's target refused it: ask the relays now, not at the probe
        timeout, and give the verdict once they all nack (they get refused
        too), not at the end of the interval. A path that only we lack still
        gets its indirect acks, so this suspects no one that SWIM would not."""
        if probe.acked or probe.refused:
            return
        probe.refused = True
        self._counters.probes_refused += 1
        self._due_probe_timeout(probe.seq, now)
        if probe.nacks >= probe.expected_nacks:  # nobody to ask
            self._fail_probe(probe, now)

    # -- checks of suspects ------------------------------------------------------

    def check(self, name: str, now: float) -> None:
        """Another member suspects `name`: check it at once (see the module
        docstring), unless a check or a round of ours is at it already."""
        probe = self._probe
        if (
            self._local.leaving
            or name in self._checking
            or (probe is not None and probe.target == name and not probe.acked)
        ):
            return
        m = self._table.get(name)
        if m is None or m.state is not SUSPECT:
            return
        config = self._config
        checkers = 2 * (config.suspicion_mult - 2 + config.suspicion_fast_confirmations)
        others = len(self._table.live) - 2  # not the suspect, nor its suspector
        if others > checkers and self._rng.random() * others >= checkers:
            return
        seq = self._next_seq()
        timeout_s = self._health.scale(config.probe_timeout_s)
        end_at = now + self._health.scale(config.probe_interval_s)
        check = ProbeRound(seq, name, m.ident.addr, m.incarnation, now + timeout_s, end_at, now)
        self._checks[seq] = check
        self._checking.add(name)
        self._deadlines.push(now + timeout_s * _CHECK_RELAYS_AT, self._due_check_relays, seq)
        self._deadlines.push(end_at, self._due_check, seq)
        self._counters.suspect_checks += 1
        msgs: list[Any] = [Ping(seq, name, self._name), Suspect(m.incarnation, name, self._name)]
        self._send_packet(m.ident.addr, msgs, piggyback=True)

    def _due_check_relays(self, seq: int, now: float) -> None:
        check = self._checks.get(seq)
        if check is not None and not check.indirect_sent:
            self._ask_relays(check)
            if check.expected_nacks == 0 and check.refused:  # nobody to ask
                self._fail_check(check, now)

    def _due_check(self, seq: int, now: float) -> None:
        check = self._checks.get(seq)
        if check is not None:
            self._fail_check(check, now)

    def _fail_check(self, check: ProbeRound, now: float) -> None:
        """Nobody heard the suspect: our own suspicion confirms the others'."""
        del self._checks[check.seq]
        self._checking.discard(check.target)
        self._counters.suspect_checks_failed += 1
        self._health.apply(check.health_delta())
        self._suspect(Suspect(check.incarnation, check.target, self._name), LOCAL, now)

    def _due_relay(self, seq: int, now: float) -> None:
        relay = self._relays.pop(seq, None)
        if relay is not None and relay.nack:
            self._counters.nacks_sent += 1
            self._send_packet(relay.requester, [Nack(relay.requester_seq)])

    def _next_seq(self) -> int:
        self._seq += 1
        if self._seq >= COORD_SEQ_END:
            self._seq = COORD_SEQ_MIN
        return self._seq
