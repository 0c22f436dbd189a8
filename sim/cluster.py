"""SimCluster: many `ShoalNode`s on one virtual network, in one process.

The event loop is one heap of (true_time, seq, kind, payload); `seq` makes the
order total, so the same seed gives the same run byte for byte. Kinds:
datagram delivery, stream delivery, stream failure, port unreachable, node
deadline and fault action. After every input a node is drained exactly as
the agent drains it (persist, then send, then events) and its next deadline
re-armed; a deadline that moved is superseded by generation number, never
scanned for.

Messages travel as objects by default (fast); with `wire=True` every datagram
and frame is encoded and decoded by the real codec, and an oversized datagram
is dropped as the MTU would drop it.

A crash is an agent that died on a running host, by default: its host
answers datagrams with ICMP port unreachable and refuses streams, as a
kernel does. With `host_down`, the host is gone: datagrams vanish and
streams time out.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

from shoal.election.config import LeaseConfig
from shoal.election.events import PersistElection
from shoal.kernel import codec
from shoal.kernel.contract import EMPTY, Address, Channel, Persist, PersistIncarnation
from shoal.membership.member import Member, MemberState, NodeIdentity
from shoal.membership.profiles import SwimConfig
from shoal.metalog.core import MetaConfig
from shoal.metalog.log import PersistLog
from shoal.metalog.snapshot import PersistSnapshot, TakeSnapshot, encode_view
from shoal.node.composition import ShoalNode
from shoal.sim.clock import NodeClock
from shoal.sim.disk import FsyncLatency, SimDisk
from shoal.sim.network import LatencyMatrix, LinkProfile, SimNetwork
from shoal.storage.config import SyncConfig
from shoal.storage.store import MemoryStore

# Event kinds. Final: compiled, a constant, where a module global is a dict
# lookup at every use (several per event).
_DATAGRAM: Final = 0
_STREAM: Final = 1
_STREAM_FAILED: Final = 2
_UNREACHABLE: Final = 3
_DEADLINE: Final = 4
_ACTION: Final = 5
BYTES_SAMPLE: Final = 16
GOSSIP_PORT = 7946
# The simulated wall clock at true time 0 (2027-01-15), for HLC versions.
SIM_WALL_BASE_MS = 1_800_000_000_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the young-generation collector every 1,000,000 allocations, not 700.

    A run allocates a message per datagram and handler call, millions per
    simulated second, and nearly all of it dies young without cycles. With
    CPython's default threshold the collector ran 2,556 times in a 500-node,
    40 s run and took 12 % of its wall time; at 50,000 it ran 20 times, and
    peak memory was the same (136 MB). At 1,000,000, `shoal simulate --nodes
    1000 --duration 60` collects twice (0.3 s of CPU, 1.7 s at 50,000) and
    peaks at 322 MB (488 MB before, rows not yet shared); 3,000 formed nodes
    peak at 621 MB either way.

    `run_until` runs under it; so should a caller that runs in slices (the
    scenarios do): each time the default comes back, the next allocation
    collects every young object at once, which at 1,000 nodes was a
    collection per quarter of a simulated second.
    """
    saved = gc.get_threshold()
    gc.set_threshold(1_000_000, *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)


class SimObserver(Protocol):
    """Something that watches a run: checkers, reports, trace hashers."""

    def on_event(self, now: float, node: int, event: Any) -> None:
        """A node emitted `event` at true time `now`."""


@dataclass(slots=True)
class TrafficStats:
    """Datagrams and bytes sent, summed over all nodes."""

    datagrams: int = 0
    bytes: int = 0
    streams: int = 0
    mtu_drops: int = 0
    misread: int = 0  # deliveries holding a message type the receiver's build does not know


def sim_address(i: int, generation: int = 0) -> Address:
    """The simulated address of host `i` (a new one per `generation`)."""
    return (f"10.{generation}.{i >> 8 & 255}.{i & 255}", GOSSIP_PORT + (i >> 16))


class SimCluster:
    """N nodes, a network, faults on a schedule, observers."""

    def __init__(
        self,
        n: int,
        seed: int,
        config: SwimConfig,
        link: LinkProfile | None = None,
        wire: bool = False,
        count_bytes: bool = False,
        clocks: list[NodeClock] | None = None,
        sync_config: SyncConfig | None = None,
        lease_config: LeaseConfig | None = None,
        bootstrap_expect: int = 3,
        fsync: FsyncLatency | None = None,
        latency: LatencyMatrix | None = None,
        meta: MetaConfig | None = None,
    ) -> None:
        self.n = n
        self.meta = meta  # run the metadata log (metalog/) with this timing
        self.seed = seed
        self.config = config
        self.wire = wire
        self.count_bytes = count_bytes or wire
        self.now = 0.0
        # With `latency`, each pair of hosts has its own round trip (Serf's
        # shapes, sim/network.py); loss and duplication still come from `link`.
        assert latency is None or latency.n >= n, "a latency matrix for fewer hosts"
        self.net = SimNetwork(random.Random(seed * 7919 + 1), link or LinkProfile(), latency)
        self.stats = TrafficStats()
        self.observers: list[SimObserver] = []
        # Called with the host index each time a host boots (history rows).
        self.boot_hooks: list[Callable[[int], None]] = []
        self.clocks = clocks or [NodeClock() for _ in range(n)]
        # Every clock reads true time (no offset, no drift; fixed for the
        # run): local and true times are the same number, and the clock
        # conversions, two calls per event, are skipped.
        self._true_clocks = all(c.offset_s == 0.0 and c.drift == 0.0 for c in self.clocks)
        self.nodes: list[ShoalNode | None] = [None] * n
        self.idents: list[NodeIdentity] = []
        # Each host's disk: what outlives a crash, and what waits for fsync.
        self.disks = [SimDisk() for _ in range(n)]
        self.fsync = fsync  # None: every write durable at once
        self._fsync_rng = random.Random(seed * 104_729 + 3)
        # How long a snapshot takes to encode and store (the agent's thread).
        self._snapshot_rng = random.Random(seed * 104_729 + 5)
        # Called with the host index when it writes election state unsynced.
        self.write_hooks: list[Callable[[int], None]] = []
        # Called with (host index, write) for every other durable write (the
        # user-event ledger's: services/delivery.py), durable at once.
        self.persist_hooks: list[Callable[[int, Any], None]] = []
        # Called with (host index, destination, messages, channel) for everything a host sends.
        self.send_hooks: list[Callable[[int, Address, tuple[Any, ...], Channel], None]] = []
        # Each asked of everything a host sends: True drops it (a fault aimed
        # at some messages only, as a test sets it).
        self.drop_hooks: list[Callable[[int, Address, tuple[Any, ...]], bool]] = []
        self.sync_config = sync_config or SyncConfig()
        # Each node's record store: its disk, which outlives crashes.
        self.stores = [MemoryStore(self.sync_config.tree_depth) for _ in range(n)]
        self.lease_config = lease_config or LeaseConfig()
        self.bootstrap_expect = bootstrap_expect
        self._host_of: dict[Address, int] = {}
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._armed: list[float | None] = [None] * n
        self._gen = [0] * n
        self._host_down = [False] * n
        # Per host: None, or (paused, as by SIGSTOP) what waits for it to run
        # again: deliveries, timers and completed syncs, in order.
        self._paused: list[list[Callable[[], None]] | None] = [None] * n
        self.pending_boots = 0  # starts and restarts scheduled, not yet run
        self._addr_gen = [0] * n
        self._tag = codec.cluster_tag("sim")
        for i in range(n):
            rng = random.Random(seed * 1_000_003 + i)
            ident = NodeIdentity(f"node-{i:05d}", rng.randbytes(16), sim_address(i))
            self.idents.append(ident)
            self._host_of[ident.addr] = i

    # -- lifecycle -------------------------------------------------------------

    def start(self, i: int, at: float, join: list[int]) -> None:
        """Schedule host `i` to start at `at` and join through hosts `join`."""
        self.pending_boots += 1

        def action() -> None:
            self.pending_boots -= 1
            self._boot(i, join)

        self.at(at, action)

    def start_formed(self, at: float = 0.0) -> None:
        """Schedule every host to start at `at` already knowing all others.

        Formation costs N² x λ·log N handler calls (hours at 10,000 nodes);
        this skips it, for runs that measure a formed cluster. The view each
        node adopts is what a converged formation leaves: everyone alive at
        the incarnation it starts with.
        """

        def action() -> None:
            # One row per member, shared by every view (rows are immutable).
            known = {
                self.idents[i].name: Member(
                    self.idents[i], self.disks[i].incarnation + 1, MemberState.ALIVE
                )
                for i in range(self.n)
            }
            self.pending_boots -= self.n
            for i in range(self.n):
                self._boot(i, [], known)

        self.pending_boots += self.n
        self.at(at, action)

    def crash(self, i: int, at: float, host_down: bool = False) -> None:
        """Schedule the agent of host `i` to stop dead (no leave) at `at`;
        with `host_down`, the whole host (see the module docstring)."""
        self.at(at, lambda: self._halt(i, host_down))

    def restart(self, i: int, at: float, join: list[int], new_address: bool = False) -> None:
        """Schedule host `i` to come back with its persisted state."""

        def action() -> None:
            if new_address:
                self._addr_gen[i] += 1
                old = self.idents[i]
                addr = sim_address(i, self._addr_gen[i])
                self.idents[i] = NodeIdentity(old.name, old.node_id, addr, old.tags, old.versions)
                self._host_of[addr] = i
            self.pending_boots -= 1
            self._boot(i, join)

        self.pending_boots += 1
        self.at(at, action)

    def pause(self, i: int, at: float, for_s: float) -> None:
        """Schedule host `i`'s agent to stop running at `at` for `for_s` (a
        SIGSTOP, a long GC or VM pause): what arrives meanwhile waits in its
        socket buffers, its timers fire late, and what its syncs release
        leaves only when it runs on (SIGCONT) with the clock of then."""

        def stop() -> None:
            if self.nodes[i] is not None and self._paused[i] is None:
                self._paused[i] = []

        def resume() -> None:
            held, self._paused[i] = self._paused[i], None
            for action in held or ():
                action()

        self.at(at, stop)
        self.at(at + for_s, resume)

    def is_paused(self, i: int) -> bool:
        """Whether host `i`'s agent is paused (`pause`)."""
        return self._paused[i] is not None

    def leave(self, i: int, at: float) -> None:
        """Schedule a graceful leave of host `i`."""
        self.at(at, lambda: self._command(i, lambda node, now: node.leave(now)))

    def write(self, i: int, key: bytes, value: bytes | None, at: float) -> None:
        """Schedule a put (a delete, with None) of `key` on host `i`."""
        self.at(at, lambda: self._command(i, lambda node, now: node.write(key, value, now)))

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run `action` at true time `when` (a fault or a command)."""
        heapq.heappush(self._heap, (when, next(self._seq), _ACTION, action))

    def _boot(self, i: int, join: list[int], known: dict[str, Member] | None = None) -> None:
        self._host_down[i] = False
        rng = random.Random((self.seed * 1_000_003 + i) ^ (self._gen[i] << 32))
        disk = self.disks[i]
        node = ShoalNode(self.idents[i], self.config, rng, disk.incarnation, self.stores[i],
                         self.sync_config, SIM_WALL_BASE_MS, self.lease_config,
                         disk.election, self.bootstrap_expect, self.meta, disk.log,
                         disk.snapshot)  # fmt: skip
        self.nodes[i] = node
        local = self.clocks[i].local(self.now)
        if known:
            node.adopt(known)
        node.start(local)
        for hook in self.boot_hooks:
            hook(i)
        addrs = [self.idents[j].addr for j in join if j != i]
        if addrs:
            node.join(addrs, local, retry=True)
        self._flush(i)

    def _halt(self, i: int, host_down: bool = False) -> None:
        self.nodes[i] = None
        self._paused[i] = None
        self.disks[i].crash()
        self._host_down[i] = host_down
        self._gen[i] += 1
        self._armed[i] = None

    def _command(self, i: int, fn: Callable[[ShoalNode, float], object]) -> None:
        held = self._paused[i]
        if held is not None:
            held.append(lambda: self._command(i, fn))
            return
        node = self.nodes[i]
        if node is not None:
            fn(node, self.clocks[i].local(self.now))
            self._flush(i)

    # -- running -------------------------------------------------------------

    def run_until(self, until: float, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to true time `until`; stop early when `stop()`
        becomes true (checked after each event). Returns whether it stopped."""
        with fewer_collections():
            heap = self._heap
            while heap and heap[0][0] <= until:
                when, _, kind, payload = heapq.heappop(heap)
                self.now = when
                self._dispatch(kind, payload)
                if stop is not None and stop():
                    return True
            self.now = max(self.now, until)
            return False

    def _local(self, i: int) -> float:
        """Host `i`'s clock now."""
        return self.now if self._true_clocks else self.clocks[i].local(self.now)

    def _dispatch(self, kind: int, payload: Any) -> None:
        # Typed unpacking: with `Any` indices the nodes would be `Any` too,
        # and (compiled) every delivery and tick a generic method call.
        dst: int
        src_addr: Address
        now: float
        if kind != _ACTION and self._held(kind, payload):
            return
        if kind == _DATAGRAM or kind == _STREAM:
            dst, src_addr, messages = payload
            node = self.nodes[dst]
            if node is None:
                self._refuse(kind, dst, src_addr)
                return
            now = self.now if self._true_clocks else self.clocks[dst].local(self.now)
            try:
                node.receive_all(messages, src_addr, now)
            except KeyError:
                # A message type this node's build does not know (a newer
                # build's, sim/upgrade.py): the agent's codec drops such a
                # datagram whole as `unknown_type`. Free when nothing raises.
                if node.understands(messages):
                    raise
                self.stats.misread += 1
            self._flush(dst)
        elif kind == _DEADLINE:
            i: int
            gen: int
            deadline: float
            i, gen, deadline = payload
            node = self.nodes[i]
            if node is None or gen != self._gen[i]:
                return
            self._armed[i] = None
            # A drifting clock maps the deadline to true time and back with
            # rounding; never tick a hair before the deadline that fired.
            node.tick(max(self._local(i), deadline))
            self._flush(i)
        elif kind == _STREAM_FAILED or kind == _UNREACHABLE:
            src, peer = payload
            node = self.nodes[src]
            if node is not None:
                report = node.stream_failed if kind == _STREAM_FAILED else node.unreachable
                report(peer, self.clocks[src].local(self.now))
                self._flush(src)
        else:
            payload()

    def _held(self, kind: int, payload: Any) -> bool:
        """Whether the event is for a paused host: then it waits (`pause`)."""
        held = self._paused[payload[0]]  # every kind but _ACTION names its host first
        if held is None:
            return False
        held.append(lambda: self._dispatch(kind, payload))
        return True

    def _flush(self, i: int) -> None:
        node = self.nodes[i]
        assert node is not None
        while True:
            out = node.drain()
            if out is EMPTY:
                break
            for item in out.persist:
                self._persist(i, item)
            for send in out.send:
                self._transmit(i, send.to, send.messages, send.channel)
            for event in out.events:
                for obs in self.observers:
                    obs.on_event(self.now, i, event)
        deadline = node.next_deadline()
        if deadline is not None and deadline != self._armed[i]:
            self._armed[i] = deadline
            self._gen[i] += 1
            when = deadline if self._true_clocks else self.clocks[i].true(deadline)
            when = max(self.now, when)
            heapq.heappush(
                self._heap, (when, next(self._seq), _DEADLINE, (i, self._gen[i], deadline))
            )

    def _take_snapshot(self, i: int, view: TakeSnapshot) -> None:
        """Encode a snapshot as the agent's thread does, and hand it back
        to the same run of the node up to 50 ms later (entries are applied,
        snapshots installed, the node may crash meanwhile)."""
        node = self.nodes[i]
        snapshot = encode_view(view)

        def taken() -> None:
            if self.nodes[i] is node and node is not None and node.meta is not None:
                self._command(i, lambda n, now: n.meta.snapshot_taken(snapshot, now))  # type: ignore[union-attr]

        self.at(self.now + self._snapshot_rng.uniform(0.0, 0.05), taken)

    def _persist(self, i: int, item: Persist) -> None:
        """One `Persist`, as the agent handles it (sim/disk.py)."""
        disk, write = self.disks[i], item.write
        if isinstance(write, PersistIncarnation):
            disk.incarnation = write.incarnation
        elif isinstance(write, PersistElection):
            state = (write.granted_epoch, write.config)
            if self.fsync is None:
                disk.election = state
            else:
                if disk.write_election(state):
                    self._start_sync(i)
                for hook in self.write_hooks:
                    hook(i)
        elif isinstance(write, PersistLog | PersistSnapshot):
            if self.fsync is None:
                disk.write_log_synced(write)
            else:
                if disk.write_log(write):
                    self._start_sync(i)
                for hook in self.write_hooks:
                    hook(i)
        elif isinstance(write, TakeSnapshot):
            self._take_snapshot(i, write)
        elif write is not None:
            for persisted in self.persist_hooks:
                persisted(i, write)
        for send in disk.release(item.releases) if item.releases else ():
            self._transmit(i, send.to, send.messages, send.channel)

    def _start_sync(self, i: int) -> None:
        assert self.fsync is not None
        disk = self.disks[i]
        disk.start_sync()
        crashes = disk.crashes

        def done() -> None:
            if crashes != disk.crashes:
                return  # the host crashed meanwhile: that sync never completed
            held = self._paused[i]
            if held is not None:  # its sends leave when the process runs on
                held.append(done)
                return
            released, again = disk.sync_done()
            if again:
                self._start_sync(i)
            for send in released:
                self._transmit(i, send.to, send.messages, send.channel)

        self.at(self.now + self.fsync(self._fsync_rng), done)

    def _transmit(self, src: int, to: Address, messages: tuple[Any, ...], channel: Channel) -> None:
        for hook in self.send_hooks:
            hook(src, to, messages, channel)
        if any(drop(src, to, messages) for drop in self.drop_hooks):
            return
        dst = self._host_of.get(to)
        src_addr = self.idents[src].addr
        if channel is Channel.STREAM:
            self.stats.streams += 1
            if dst is None or not self.net.connected(src, dst):
                self._stream_failed_later(src_addr, to, self.config.stream_timeout_s)
                return
            if self.wire:
                messages = tuple(codec.decode_payload(codec.encode_payload(messages)))
            when = self.now + self.net.latency_s(src, dst)
            heapq.heappush(self._heap, (when, next(self._seq), _STREAM, (dst, src_addr, messages)))
            return
        self.stats.datagrams += 1
        if self.wire:
            data = codec.encode_datagram(messages, self._tag)
            size = len(data)
            messages = tuple(codec.decode_datagram(data, self._tag))
            self.stats.bytes += size
            if size > self.config.mtu_bytes:
                self.stats.mtu_drops += 1
                return
        elif self.count_bytes and self.stats.datagrams % BYTES_SAMPLE == 0:
            # Sizing every datagram costs a third of a large run; an exact
            # size of every 16th (a deterministic sample) estimates the rate.
            self.stats.bytes += codec.datagram_size(messages) * BYTES_SAMPLE
        if dst is None:
            return
        for delay in self.net.delays_s(src, dst):
            heapq.heappush(
                self._heap,
                (self.now + delay, next(self._seq), _DATAGRAM, (dst, src_addr, messages)),
            )

    def deliver(self, dst: int, src_addr: Address, messages: tuple[Any, ...], stream: bool) -> None:
        """Hand `messages` to host `dst` now as if `src_addr` sent them (sim/attacker.py)."""
        self._dispatch(_STREAM if stream else _DATAGRAM, (dst, src_addr, messages))

    def _refuse(self, kind: int, dst: int, src_addr: Address) -> None:
        """What the host of a crashed agent answers (nothing, when it is down)."""
        addr = self.idents[dst].addr
        if self._host_down[dst]:
            if kind == _STREAM:
                self._stream_failed_later(src_addr, addr, self.config.stream_timeout_s)
            return
        if kind == _STREAM:
            self._stream_failed_later(src_addr, addr)
            return
        src = self._host_of.get(src_addr)
        if src is not None and self.net.datagram_copies(dst, src):
            when = self.now + self.net.latency_s(dst, src)
            heapq.heappush(self._heap, (when, next(self._seq), _UNREACHABLE, (src, addr)))

    def _stream_failed_later(self, src_addr: Address, peer: Address, after: float = 0.001) -> None:
        src = self._host_of.get(src_addr)
        if src is not None:
            heapq.heappush(
                self._heap, (self.now + after, next(self._seq), _STREAM_FAILED, (src, peer))
            )

    # -- inspection ------------------------------------------------------------

    def live_hosts(self) -> list[int]:
        """Hosts whose node is running."""
        return [i for i, node in enumerate(self.nodes) if node is not None]
