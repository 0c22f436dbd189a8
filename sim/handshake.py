"""The first-contact handshake on a simulated LAN, with a replaying attacker.

Theory of operation. The cluster simulator (sim/cluster.py) carries decoded
messages with no sealing layer; this one carries the sealing layer's
*envelope* (sender tag, run, binding, counter) with every datagram and runs
the real pieces on both ends: each host's `ReplayWindows` (kernel/sealing.py)
accept or refuse an envelope, and its `Handshake` (services/handshake.py)
binds what it sends. Encryption is what the envelope's integrity stands
for: the attacker cannot make an envelope, only copy one.

Each host sends application datagrams (`Note`, one id each) to the others'
current addresses, every `send_every_s`; a note to an address not bound yet
waits for the hello, as in the agent. Hosts restart at new addresses (a new
run, a fresh core; the others are told the new address at once, as gossip
would tell them). The `Replayer` captures every datagram on the segment in
a bounded, uniform sample and sends copies later, with the original
sender's address, to the original receiver or to any host.

What a user would notice is recorded per note: `delivered[id]` counts how
often it reached its addressee, `misdelivered` any that reached another
host or another run. Every random choice comes from `Random`s seeded from
`seed` (the network's, the workload's, the attacker's): the same seed gives
the same run.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.kernel.codec import DecodeError
from shoal.kernel.contract import Address, Send
from shoal.kernel.sealing import UNBOUND, Envelope, ReplayWindows, binding
from shoal.kernel.versions import THIS_BUILD, Versions
from shoal.services.handshake import Handshake, Refused, Released
from shoal.sim.network import LinkProfile, SimNetwork

MEMORY = 4_000  # captures the replayer keeps (a uniform sample of all traffic)


@dataclass(frozen=True, slots=True)
class Note:
    """An application datagram: `id` is unique, `to` names the host meant
    and `run` the run it was sent to (for the check only)."""

    id: int
    to: int


@dataclass(frozen=True, slots=True)
class Packet:
    """One datagram as it crossed the segment."""

    src: Address
    dst: Address
    envelope: Envelope
    messages: tuple[Any, ...]


@dataclass(slots=True)
class Host:
    """One agent: its address, run, `ReplayWindows` and handshake core."""

    index: int
    addr: Address
    run: int
    versions: Versions
    sessions: ReplayWindows = field(init=False)
    core: Handshake = field(init=False)
    counter: int = 0
    up: bool = True
    timer_at: float | None = None
    counters: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.start(self.addr, self.run)

    @property
    def tag(self) -> bytes:
        """This host's node tag (the same across runs)."""
        return self.index.to_bytes(8, "big")

    def start(self, addr: Address, run: int) -> None:
        """Start (again) at `addr` in `run`: nothing of the last run is kept."""
        self.addr, self.run, self.counter, self.up, self.timer_at = addr, run, 0, True, None
        self.sessions = ReplayWindows(self.tag, run)
        self.core = Handshake(self.sessions, self.versions, True, self.counters)


class HandshakeSim:
    """Hosts, the lossy segment between them, and a workload of notes.

    Args:
        n: hosts.
        seed: every random choice derives from it.
        profile: the segment's loss and latency.
        send_every_s: each host sends one note this often (to a random host).
        versions: per host index, what it understands (THIS_BUILD otherwise).
    """

    def __init__(self, n: int, seed: int, profile: LinkProfile, send_every_s: float = 0.2,
                 versions: dict[int, Versions] | None = None) -> None:  # fmt: skip
        self.now = 0.0
        self.net = SimNetwork(random.Random(f"{seed}-net"), profile)
        self.rng = random.Random(f"{seed}-load")
        self.send_every_s = send_every_s
        self._ports = itertools.count(7946)
        versions = versions or {}
        self.hosts = [Host(i, ("10.0.0.1", next(self._ports)), 1, versions.get(i, THIS_BUILD))
                      for i in range(n)]  # fmt: skip
        self.at: dict[Address, int] = {h.addr: h.index for h in self.hosts}
        self._bindings = {h.index: {binding(h.tag, h.run)} for h in self.hosts}  # every run's
        self._heap: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self.sent: dict[int, tuple[int, float]] = {}  # note id -> (addressee, sent at)
        self.origin: dict[int, int] = {}  # note id -> its sender
        self.delivered: Counter[int] = Counter()
        self.misdelivered: list[tuple[int, int]] = []  # (note id, host it reached)
        # Datagrams sent to an address bound to another host than the one
        # there (any run of the right host is only stale, not wrong; nobody
        # there is a lost datagram).
        self.misbound = 0
        self.logged: list[tuple[int, int]] = []  # (host, peer) refusals logged
        self.dropped: Counter[str] = Counter()  # envelopes the ReplayWindows refused, by reason
        self.taps: list[Callable[[Packet], None]] = []  # see every datagram sent
        for h in self.hosts:
            self.at_time(self.rng.uniform(0, send_every_s), self._send_note, h.index)

    # -- the event loop ----------------------------------------------------------

    def at_time(self, at: float, handler: Callable[[Any], None], arg: Any) -> None:
        """Run `handler(arg)` at true time `at`."""
        heapq.heappush(self._heap, (at, next(self._seq), handler, arg))

    def run_until(self, until: float) -> None:
        """Process every event up to true time `until`."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            at, _, handler, arg = heapq.heappop(heap)
            self.now = at
            handler(arg)
        self.now = until

    # -- hosts ---------------------------------------------------------------------

    def restart(self, index: int, new_address: bool = True) -> None:
        """Crash host `index` and start it again at once, in a new run, at a
        new address (or its own); the others learn the address at once."""
        host = self.hosts[index]
        addr = ("10.0.0.1", next(self._ports)) if new_address else host.addr
        del self.at[host.addr]
        host.start(addr, host.run + 1)
        self.at[addr] = index
        self._bindings[index].add(binding(host.tag, host.run))

    def binding_of(self, index: int) -> bytes:
        """What a packet to host `index` in its current run must carry."""
        host = self.hosts[index]
        return binding(host.tag, host.run)

    def _send_note(self, index: int) -> None:
        host = self.hosts[index]
        self.at_time(self.now + self.send_every_s, self._send_note, index)
        if not host.up:
            return
        dst = self.rng.randrange(len(self.hosts) - 1)
        dst += dst >= index
        note = Note(next(self._ids), dst)
        self.sent[note.id] = (dst, self.now)
        self.origin[note.id] = index
        self._send(host, Send(self.hosts[dst].addr, (note,)))

    def _send(self, host: Host, send: Send) -> None:
        to = host.core.to(send.to)
        if to is None:
            host.core.hold(send, self.now)
        else:
            self.transmit(host, send.to, to, send.messages)
        self._flush(host)

    def transmit(self, host: Host, dst: Address, to: bytes, messages: tuple[Any, ...]) -> None:
        """Seal (an envelope) and put one datagram on the segment."""
        host.counter += 1
        there = self.at.get(dst)
        if to != UNBOUND and there is not None and to not in self._bindings[there]:
            self.misbound += 1
        packet = Packet(host.addr, dst, Envelope(host.tag, host.run, to, host.counter), messages)
        for tap in self.taps:
            tap(packet)
        self.carry(packet, self.at.get(host.addr, -1))

    def carry(self, packet: Packet, src: int) -> None:
        """Deliver `packet` as the segment does (lost, late or twice)."""
        dst = self.at.get(packet.dst)
        if dst is None:
            return  # nobody listens there now
        for delay in self.net.delays_s(max(src, 0), dst):
            self.at_time(self.now + delay, self._arrive, (dst, packet))

    def _arrive(self, arg: tuple[int, Packet]) -> None:
        index, packet = arg
        host = self.hosts[index]
        if not host.up or host.addr != packet.dst:
            return
        try:
            host.sessions.check(packet.envelope)
        except DecodeError as exc:
            self.dropped[exc.reason] += 1
            if exc.reason == "misdirected":
                host.core.misdirected(packet.src, self.now)
                self._flush(host)
            return
        if not host.core.receive(packet.envelope.sender, packet.messages, packet.src, self.now):
            for msg in packet.messages:
                if type(msg) is Note:
                    if msg.to == index:
                        self.delivered[msg.id] += 1
                    else:
                        self.misdelivered.append((msg.id, index))
        self._flush(host)

    def _tick(self, index: int) -> None:
        host = self.hosts[index]
        host.timer_at = None
        host.core.tick(self.now)
        self._flush(host)

    def _flush(self, host: Host) -> None:
        out = host.core.drain()
        for sealed in out.send:
            self.transmit(host, sealed.to, sealed.binding, (sealed.message,))
        for event in out.events:
            if type(event) is Released:
                for send in event.sends:
                    self.transmit(host, send.to, event.binding, send.messages)
            elif type(event) is Refused and event.first:
                self.logged.append((host.index, self.at.get(event.address, -1)))
        at = host.core.next_deadline()
        if at is not None and at != host.timer_at:
            host.timer_at = at
            self.at_time(at, self._tick, host.index)


class Replayer:
    """Copies datagrams it saw to any host, later, from their original sender.

    Args:
        sim: the segment to listen on and replay into.
        rate_per_s: replays per second of true time (a Poisson process).
        seed: the attacker's own randomness.
        own_share: the share of copies sent to the original receiver.
    """

    def __init__(self, sim: HandshakeSim, rate_per_s: float, seed: int,
                 own_share: float = 0.5) -> None:  # fmt: skip
        self.sim = sim
        self.rate_per_s = rate_per_s
        self.rng = random.Random(f"{seed}-replay")
        self.own_share = own_share
        self.memory: list[Packet] = []
        self.seen = 0
        self.replayed: Counter[str] = Counter()  # by the first message's type
        sim.taps.append(self._capture)
        sim.at_time(self.rng.expovariate(rate_per_s), self._replay, None)

    def _capture(self, packet: Packet) -> None:
        self.seen += 1
        if len(self.memory) < MEMORY:
            self.memory.append(packet)
            return
        slot = self.rng.randrange(self.seen)  # Vitter's algorithm R
        if slot < MEMORY:
            self.memory[slot] = packet

    def _replay(self, _: None) -> None:
        sim = self.sim
        sim.at_time(sim.now + self.rng.expovariate(self.rate_per_s), self._replay, None)
        if not self.memory:
            return
        packet = self.rng.choice(self.memory)
        if self.rng.random() >= self.own_share:
            packet = Packet(packet.src, self.rng.choice(sim.hosts).addr, packet.envelope,
                            packet.messages)  # fmt: skip
        self.replayed[type(packet.messages[0]).__name__] += 1
        sim.carry(packet, sim.at.get(packet.src, -1))
