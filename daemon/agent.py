"""Agent: the asyncio (uvloop) driver that runs a `ShoalNode` on real sockets.

Shape (aioquic's QuicConnectionProtocol): every input — a datagram, a stream
frame, an API command, the timer — becomes one `node.<input>(..., now)` call
followed by `flush()`. `flush()` drains the node until it is empty: persist
first, then send, then publish events; then it re-arms the single
`loop.call_at` timer on `node.next_deadline()`. There are no protocol
coroutines and no other timers; `asyncio.sleep` appears only in lifecycle
code (the leave grace period).

Every flush is timed: one over 50 ms is counted and logged, because a
blocking call in the loop delays every probe answer and makes peers suspect
us (python-zeroconf's blockbuster lesson).

So the election's state is not fsynced in the loop: a grant must be durable
before it is sent, and an fsync can take hundreds of milliseconds on a busy
disk, long enough for every peer to suspect us. The state is written
unsynced, the group-commit thread syncs it, and meanwhile the sends that the
election's `Persist` items release wait (in order) while SWIM's go out at
once: which sends wait is in the core's output, not chosen here by message
type (kernel/contract.py). The incarnation, persisted once per refutation,
is still synced in place.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import signal
import socket
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec.structs
import structlog

from shoal.daemon.addresses import choose_advertise
from shoal.daemon.commit import GroupCommit
from shoal.daemon.config import AgentConfig
from shoal.daemon.controller import ControllerWatch, run_handler
from shoal.daemon.keyops import KeyService
from shoal.daemon.keys import load_keyring
from shoal.daemon.systemd import Notifier
from shoal.daemon.wire import Wire
from shoal.election.events import (
    ControllerChanged,
    ControllerElected,
    ControllerLost,
    PersistElection,
    VotersChanged,
    election_fields,
)
from shoal.kernel import codec
from shoal.kernel.contract import Address, Channel, Output, PersistIncarnation, Send
from shoal.kernel.errors import ConfigError
from shoal.kernel.sealing import OVERHEAD_BYTES, KeyCommand, KeyReply
from shoal.membership.events import JoinCompleted, event_fields
from shoal.membership.member import MemberState, MemberView, NodeIdentity, Tags
from shoal.membership.messages import PushPull
from shoal.membership.profiles import SwimConfig
from shoal.membership.transport import (
    FaultInjector,
    PacketProtocol,
    open_tcp_listener,
    open_udp_socket,
    read_frame,
)
from shoal.node.composition import ShoalNode
from shoal.storage.antientropy import SyncCompleted
from shoal.storage.history import HistoryWriter, Observer, history_row, member_row
from shoal.storage.identity import DataDir
from shoal.storage.messages import SyncDigests, SyncRecords, SyncTree, SyncTreeDiff
from shoal.storage.records import Record

SLOW_FLUSH_S = 0.05
UDP_RECEIVE_BUFFER_BYTES = 2 * 1024 * 1024
_MAX_DROP_KEYS = 1024
_WATCHER_QUEUE = 1024
MAX_DISCOVERY_JOINS = 3
DISCOVERY_AFTER_JOIN_S = 5.0

if TYPE_CHECKING:  # zeroconf is loaded when discovery starts, after the join is sent
    from shoal.membership.discovery import DiscoveredPeer, Discovery, IgnoredPeer

_AGENT_COUNTERS = ("datagrams_in", "datagrams_out", "bytes_in", "bytes_out", "streams_in",
                   "streams_out", "stream_errors", "key_commands", "slow_flushes",
                   "election_sends_dropped")  # fmt: skip

log = structlog.get_logger("shoal")
# Messages that answer with a large state transfer: accepted on streams only,
# so a spoofed datagram cannot make us send one to somebody else.
_STREAM_ONLY = {PushPull, SyncTree, SyncTreeDiff, SyncDigests, SyncRecords, KeyCommand, KeyReply}
_DROP_HINTS = {
    "auth": "no installed key opens it: that node has another key (or this one does)",
    "plaintext": "that node does not encrypt: give it the cluster key",
    "encrypted": "that node encrypts and this one has no key: set encryption.key",
    "stale": "its stamp is too far from our clock: check NTP on both machines",
}
ELECTION_EVENTS = (ControllerElected, ControllerLost, ControllerChanged, VotersChanged)


class Watcher:
    """One `/v1/events` client: a bounded queue; overflow ends the stream."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(_WATCHER_QUEUE)

    def offer(self, record: dict[str, Any]) -> bool:
        """Queue `record`; on overflow, end the stream and return False."""
        try:
            self.queue.put_nowait(record)
            return True
        except asyncio.QueueFull:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)
            return False


class Agent:
    """Runs one node until SIGTERM/SIGINT, then leaves gracefully."""

    def __init__(self, config: AgentConfig, flags: dict[str, Any] | None = None) -> None:
        self.config = config
        self.flags = flags  # what the config was built from: SIGHUP builds it again
        self.notifier = Notifier()
        self.debug_api = os.environ.get("SHOAL_DEBUG_API") == "1"
        self._status = ""
        self.wire = Wire(config.cluster, None)
        self.keys = KeyService(self)
        # Every counter is exported from the start, at 0, so that a scraper
        # sees the series before the first datagram ("dropped_*" by reason come
        # as they happen).
        self.counters: Counter[str] = Counter(dict.fromkeys(_AGENT_COUNTERS, 0))
        self.watchers: set[Watcher] = set()
        self.node: ShoalNode
        self.started_wall_ms = int(time.time() * 1000)
        self._loop: asyncio.AbstractEventLoop
        self._udp: asyncio.DatagramTransport | None = None
        self._packets: PacketProtocol | None = None
        self._api_sock: socket.socket  # bound in _open_sockets, served by the API
        self._inbound: dict[Address, asyncio.StreamWriter] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None
        self._drop_seen: set[tuple[str, str]] = set()
        self._join_waiters: list[tuple[set[Address], dict[str, bool], asyncio.Future[None]]] = []
        self._stop = asyncio.Event()
        self.data_dir: DataDir | None = None
        self.commits: GroupCommit | None = None
        self.discovery: Discovery | None = None
        self.faults: FaultInjector | None = None
        self._discovery_joins: set[Address] = set()
        # With seeds: what discovery starts with, once the join has answered.
        self._discovery_args: tuple[Address, str] | None = None
        self._discovery_task: asyncio.Task[None] | None = None
        # A setting found bad after start (discovery's interfaces): the
        # agent leaves, and `run` raises it for the one-line exit 2.
        self._failure: ConfigError | None = None
        self._discovery_queue: deque[DiscoveredPeer] = deque(maxlen=256)
        self._ignored_seen: set[tuple[str, str]] = set()
        self.controller_watch = ControllerWatch()
        self.history: HistoryWriter | None = None
        self.observer: Observer
        # Election messages waiting for their state to be durable (see the
        # module docstring), and the sync they wait for.
        self._held: list[Send] = []
        self._held_for: asyncio.Future[None] | None = None

    # -- lifecycle -------------------------------------------------------------

    async def run(self) -> int:
        """Start, serve until asked to stop, leave, and return the exit code."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        advertise, why = choose_advertise(cfg.bind, cfg.advertise)
        self.data_dir = DataDir(cfg.data_dir, cfg.store.tree_depth)
        stored = self.data_dir.load_identity()
        swim_cfg = self._open_wire()
        engine = self.data_dir.engine
        self.commits = GroupCommit(self._loop, _slowed(engine.sync, cfg.faults.fsync_delay_s))
        self.observer = Observer(cfg.cluster, cfg.node_name, stored.node_id.hex())
        self.history = HistoryWriter(
            Path(cfg.data_dir) / "history", cfg.history,
            on_error=lambda m: log.error("history write failed", error=m),
        )  # fmt: skip
        await self._open_sockets()
        ident = NodeIdentity(cfg.node_name, stored.node_id, advertise, cfg.tags)
        rng = random.Random(int.from_bytes(os.urandom(8), "big"))
        self.node = ShoalNode(ident, swim_cfg, rng, stored.incarnation, engine.records,
                              cfg.store, self._wall_offset_ms(), cfg.election,
                              self.data_dir.load_election(), cfg.bootstrap_expect)  # fmt: skip
        now = self._loop.time()
        self.node.start(now)
        # The agent's own start is the first row of its history: the churn
        # job sees a restart even before any peer has noticed it.
        me = MemberView(ident.name, ident.node_id, ident.addr, ident.tags,
                        self.node.swim.incarnation, MemberState.ALIVE)  # fmt: skip
        self.history.write(member_row(self.observer, int(time.time() * 1000), "join", me))
        if cfg.join:
            self.node.join(list(cfg.join), now, retry=True)
            self._discovery_args = (advertise, stored.node_id.hex())
        self.flush()
        if not cfg.join:
            await self._start_discovery(advertise, stored.node_id.hex())
        log.info("agent started", node=cfg.node_name, node_id=stored.node_id.hex(),
                 cluster=cfg.cluster, bind=f"{cfg.bind[0]}:{cfg.bind[1]}",
                 advertise=f"{advertise[0]}:{advertise[1]}", advertise_reason=why,
                 incarnation=self.node.swim.incarnation, profile=cfg.profile)  # fmt: skip
        if cfg.faults.enabled:
            log.warning("fault injection is on", **vars_of(cfg.faults))
        from shoal.daemon.api import ApiServer  # loaded after the node is up and joining

        api = ApiServer(self)
        await api.start(self._api_sock)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, self._stop.set)
        self._loop.add_signal_handler(signal.SIGHUP, self._reload)
        self.notifier.notify("READY=1", f"STATUS={self._status_text()}", f"MAINPID={os.getpid()}")
        gc.freeze()  # what start-up built lives as long as the agent: never scan it
        gc.enable()  # (`shoal agent` starts with the collector off)
        self.notifier.start_watchdog(self._loop)
        await self._stop.wait()
        if self._discovery_task is not None:
            self._discovery_task.cancel()
        self.notifier.notify("STOPPING=1", "STATUS=leaving the cluster")
        await self._leave_gracefully()
        if self.discovery is not None:
            await self.discovery.stop()
        await api.stop()
        if self.commits is not None:
            await self.commits.close()  # no fsync may run while the database closes
        self._close()
        self.notifier.stop()
        log.info("agent stopped", node=cfg.node_name)
        if self._failure is not None:
            raise self._failure
        return 0

    def _open_wire(self) -> SwimConfig:
        """Load the keyring (if any) into the wire; the SWIM config with the
        MTU budget left after sealing."""
        cfg = self.config
        enc = cfg.encryption
        ring = load_keyring(enc, cfg.data_dir, cfg.cluster)
        self.wire = Wire(cfg.cluster, ring, verify_incoming=enc.verify_incoming,
                         verify_outgoing=enc.verify_outgoing,
                         replay_window_s=enc.replay_window_s)  # fmt: skip
        if ring is None:
            log.warning("encryption is off: anyone on this network can join and gossip "
                        "(see docs/security.md)")  # fmt: skip
            return cfg.swim
        if not (enc.verify_incoming and enc.verify_outgoing):
            log.warning("encryption migration mode: plaintext is still "
                        + ("accepted" if not enc.verify_incoming else "sent"),
                        verify_incoming=enc.verify_incoming,
                        verify_outgoing=enc.verify_outgoing)  # fmt: skip
        return msgspec.structs.replace(cfg.swim, mtu_bytes=cfg.swim.mtu_bytes - OVERHEAD_BYTES)

    def request_stop(self) -> None:
        """Ask the agent to leave and exit (as SIGTERM does)."""
        self._stop.set()

    async def _open_sockets(self) -> None:
        cfg = self.config
        handler = self._on_datagram
        if cfg.faults.enabled:
            f = cfg.faults
            self.faults = FaultInjector(self._loop, f.drop, f.duplicate, f.delay_s, f.seed)
            handler = self.faults.wrap(handler)
        try:
            sock = open_udp_socket(cfg.bind[0], cfg.bind[1])
            self._packets = PacketProtocol(handler, sock, self._on_unreachable)
            self._udp, _ = await self._loop.create_datagram_endpoint(
                lambda: self._packets, sock=sock
            )
            _grow_receive_buffer(self._udp)
            self._server = await asyncio.start_server(
                self._on_stream, sock=open_tcp_listener(cfg.bind[0], cfg.bind[1]))
        except OSError as exc:
            raise ConfigError(f"bind: cannot listen on {cfg.bind[0]}:{cfg.bind[1]}: "
                              f"{exc.strerror}") from None  # fmt: skip
        # The API's address is taken here too, before the join: an agent
        # whose API cannot listen must fail before anybody has heard of it
        # (serving starts later, once the node is up).
        try:
            self._api_sock = open_tcp_listener(cfg.api[0], cfg.api[1])
        except OSError as exc:
            raise ConfigError(f"api: cannot listen on {cfg.api[0]}:{cfg.api[1]}: "
                              f"{exc.strerror}") from None  # fmt: skip

    async def _leave_gracefully(self) -> None:
        node = self.node
        node.leave(self._loop.time())
        self.flush()
        deadline = self._loop.time() + self.config.leave_timeout_s
        # Keep answering pings until the leave has been gossiped out, so that
        # nobody suspects us while the news spreads (an agent alone has
        # nobody to tell, and exits at once).
        swim = node.swim
        while (self._loop.time() < deadline and swim.broadcasts.pending(node.name)
               and len(swim.table.live)):  # fmt: skip
            await asyncio.sleep(0.05)

    def _close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._udp is not None:
            self._udp.close()
        self._server.close()
        for task in self._tasks:
            task.cancel()
        if self.history is not None:
            self.history.close()  # everything queued is on disk before exit
        if self.data_dir is not None:
            self.data_dir.close()

    # -- discovery ---------------------------------------------------------------------

    def _discovery_after_join(self, ok: bool) -> None:
        """With seeds, discovery is a second way in, not the first: it starts
        DISCOVERY_AFTER_JOIN_S after a seed answered, or at once when one did
        not. Its start (zeroconf's import, sockets, a burst of mDNS between
        every pair of new agents) then stays out of the first second, when
        agents started together need their CPU for joining: 20 agents on 2
        cores all saw all in 2.2-2.9 s with it at start, 1.9 s with it off."""
        if self._discovery_args is None or self._discovery_task is not None:
            return
        delay = DISCOVERY_AFTER_JOIN_S if ok else 0.0
        self._discovery_task = self._loop.create_task(self._start_discovery_later(delay))

    async def _start_discovery_later(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        assert self._discovery_args is not None
        try:
            await self._start_discovery(*self._discovery_args)
        except ConfigError as exc:
            log.error("discovery failed", error=str(exc))
            self._failure = exc
            self._stop.set()

    async def _start_discovery(self, advertise: Address, node_id_hex: str) -> None:
        cfg = self.config
        if not cfg.discovery:
            return
        from shoal.membership.discovery import Discovery, Sealing

        interfaces = list(cfg.discovery_interfaces) or [advertise[0]]
        self.discovery = Discovery(
            interfaces,
            advertise,
            cfg.node_name,
            node_id_hex,
            cfg.cluster,
            self._on_discovered,
            cfg.discovery_service,
            Sealing(self.wire.keyring is not None, self.wire.sealing or self.wire.requires_key,
                    self.wire.requires_key),
            known=self._is_member_label,
        )
        try:
            await self.discovery.start()
        except OSError as exc:
            raise ConfigError(
                f"discovery_interfaces: cannot use {', '.join(interfaces)} for "
                f"multicast: {exc.strerror}"
            ) from None
        log.info("discovery started", interfaces=interfaces, service=cfg.discovery_service)

    def _is_member_label(self, label: str) -> bool:
        """Whether a discovery label is a live member's (no need to resolve it)."""
        from shoal.membership.discovery import service_label

        members = self.node.swim.table.members
        for name in self.node.swim.table.live.items():
            ident = members[name].ident
            if service_label(ident.name, ident.node_id.hex()) == label:
                log.debug("discovered peer, a member already", label=label)
                return True
        return False

    def _on_discovered(self, found: DiscoveredPeer | IgnoredPeer) -> None:
        from shoal.membership.discovery import IgnoredPeer

        if isinstance(found, IgnoredPeer):
            key = (found.name, found.reason)
            if found.reason != "ourselves" and key not in self._ignored_seen:
                if len(self._ignored_seen) < _MAX_DROP_KEYS:
                    self._ignored_seen.add(key)
                level = log.warning if found.reason.startswith("encryption") else log.info
                level("discovered peer ignored", peer=found.name, reason=found.reason)
            return
        if self.node.swim.leaving:
            # A node that left stays out until told to join again.
            log.debug("discovered peer not joined: this node has left", peer=found.name)
            return
        if self._is_live_member(found):
            log.debug("discovered peer is already a member", peer=found.name)
            return
        if found.addr in self._discovery_joins:
            return
        if len(self._discovery_joins) >= MAX_DISCOVERY_JOINS:
            # Join a few; push-pull and gossip bring in the rest, so fifty
            # agents starting together do not all join each other.
            self._discovery_queue.append(found)
            return
        self._discovery_joins.add(found.addr)
        log.info("discovered peer, joining", peer=found.name,
                 address=f"{found.addr[0]}:{found.addr[1]}")  # fmt: skip
        self.node.join([found.addr], self._loop.time())
        self.flush()

    def _is_live_member(self, peer: DiscoveredPeer) -> bool:
        m = self.node.swim.table.get(peer.name)
        return m is not None and m.state in (MemberState.ALIVE, MemberState.SUSPECT)

    def _discovery_join_done(self, addr: Address) -> None:
        if addr not in self._discovery_joins:
            return
        self._discovery_joins.discard(addr)
        while self._discovery_queue:
            peer = self._discovery_queue.popleft()
            if not self._is_live_member(peer):
                self._on_discovered(peer)
                return

    # -- inputs ----------------------------------------------------------------------

    def _on_datagram(self, data: bytes, addr: Address) -> None:
        self.counters["datagrams_in"] += 1
        self.counters["bytes_in"] += len(data)
        try:
            messages = self.wire.decode(data).messages
        except codec.DecodeError as exc:
            self._dropped(exc.reason, addr, str(exc))
            return
        if any(type(msg) in _STREAM_ONLY for msg in messages):
            self._dropped("stream_only_datagram", addr)  # state exchanges only over streams
            return
        self.node.receive_all(messages, addr, self._loop.time())
        self.flush()

    def _on_unreachable(self, addr: Address) -> None:
        self.node.unreachable(addr, self._loop.time())
        self.flush()

    async def _on_stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_info = writer.get_extra_info("peername")
        peer: Address = (str(peer_info[0]), int(peer_info[1]))
        self.counters["streams_in"] += 1
        try:
            body = await read_frame(reader, self.config.swim.stream_timeout_s)
            if body is not None:
                received = self.wire.decode(body)
                messages = received.messages
                if any(isinstance(m, KeyCommand) for m in messages):
                    self._on_key_command(received.sealed, messages, writer, peer)
                    await writer.drain()
                    return
                self._inbound[peer] = writer
                self.node.receive_all(messages, peer, self._loop.time())
                self.flush()
                await writer.drain()
        except codec.DecodeError as exc:
            self._dropped(exc.reason, peer, str(exc))
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            self.counters["stream_errors"] += 1
        finally:
            self._inbound.pop(peer, None)
            writer.close()

    def _on_key_command(self, sealed: bool, messages: list[Any], writer: asyncio.StreamWriter,
                        peer: Address) -> None:  # fmt: skip
        # Only a member holding a key may change keyrings: never plaintext,
        # even while a migration accepts plaintext gossip.
        if not sealed or len(messages) != 1:
            self._dropped("key_command_refused", peer, "plaintext or mixed key command")
            return
        self.counters["key_commands"] += 1
        writer.write(self.wire.frame([self.keys.apply(messages[0])]))

    async def _stream_out(self, send: Send) -> None:
        timeout_s = self.config.swim.stream_timeout_s
        expects_reply = any(getattr(m, "expects_reply", False) for m in send.messages)
        self.counters["streams_out"] += 1
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(*send.to)
            try:
                writer.write(self.wire.frame(send.messages))
                await writer.drain()
                if expects_reply:
                    body = await read_frame(reader, timeout_s)
                    if body is None:
                        raise ConnectionResetError("closed without a reply")
                    messages = self.wire.decode(body).messages
                    self.node.receive_all(messages, send.to, self._loop.time())
                    self.flush()
            finally:
                writer.close()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, codec.DecodeError):
            self.counters["stream_errors"] += 1
            self.node.stream_failed(send.to, self._loop.time())
            self.flush()

    def _on_timer(self) -> None:
        self._timer = None
        self._armed_at = None
        self.node.sync.set_wall_offset(self._wall_offset_ms())
        self.node.tick(self._loop.time())
        self.flush()

    def _wall_offset_ms(self) -> int:
        # The cores see wall time only as monotonic `now` plus this offset,
        # refreshed on every timer, so a stepped clock is noticed within a
        # tick (the HLC never goes backwards either way).
        return int(time.time() * 1000) - int(self._loop.time() * 1000)

    # -- commands (from the API) -----------------------------------------------------

    async def join(self, addrs: list[Address]) -> dict[str, bool]:
        """Join through `addrs`; wait for each attempt's outcome."""
        if self.discovery is not None and self.node.swim.leaving:
            self.discovery.readvertise()
        fut: asyncio.Future[None] = self._loop.create_future()
        results: dict[str, bool] = {}
        pending = set(addrs) - {self.node.swim.ident.addr}
        if pending:
            self._join_waiters.append((pending, results, fut))
        self.node.join(addrs, self._loop.time())
        self.flush()
        if pending:
            await asyncio.wait_for(fut, self.config.swim.stream_timeout_s + 1)
        return results

    def leave(self) -> None:
        """Leave the cluster but keep running (a later join rejoins)."""
        self.node.leave(self._loop.time())
        self.flush()
        if self.discovery is not None:
            self.discovery.withdraw()

    def write(self, key: bytes, value: bytes | None) -> tuple[Record, asyncio.Future[None]]:
        """Put (or delete, with None) `key`: visible here and pushed to peers
        at once. Returns the record and a future that completes once it is
        durable (group commit); acknowledge the client only then, so an
        acknowledged write survives a crash of this machine. The future is
        shared by a group of writes: add callbacks, never cancel it."""
        self.node.sync.set_wall_offset(self._wall_offset_ms())
        record = self.node.write(key, value, self._loop.time())
        self.flush()
        assert self.commits is not None
        return record, self.commits.waiter()

    def loop_time(self) -> float:
        """The event loop's clock (the cores' `now`)."""
        return self._loop.time()

    def remove_voter(self, name: str) -> bool:
        """As controller, remove voter `name` (`shoal force-leave`)."""
        ok = self.node.election.remove_voter(name, self._loop.time())
        self.flush()
        return ok

    def set_tags(self, tags: Tags) -> None:
        """Replace this node's tags."""
        self.node.set_tags(tags, self._loop.time())
        self.flush()

    # -- output ------------------------------------------------------------------------

    def flush(self) -> None:
        """Drain the node until it is empty, then re-arm the timer."""
        started = time.perf_counter()
        while True:
            out = self.node.drain()
            if not out:
                break
            self._handle(out)
        deadline = self.node.next_deadline()
        if deadline != self._armed_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if deadline is None else self._loop.call_at(deadline, self._on_timer)
            self._armed_at = deadline
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_FLUSH_S:
            self.counters["slow_flushes"] += 1
            log.warning("slow flush: the event loop was blocked", ms=round(elapsed * 1000, 1))

    def _handle(self, out: Output) -> None:
        for item in out.persist:
            write = item.write
            if isinstance(write, PersistIncarnation):
                assert self.data_dir is not None
                self.data_dir.save_incarnation(write.incarnation)  # synced in place
            elif isinstance(write, PersistElection):
                assert self.data_dir is not None
                self.data_dir.save_election(write.granted_epoch, write.config, sync=False)
                self._hold_for_sync()
            if item.releases:
                if self._held_for is not None:
                    self._held.extend(item.releases)  # after the pending sync, in order
                else:
                    for send in item.releases:
                        self._send(send)
        for send in out.send:
            self._send(send)
        for event in out.events:
            self._publish(event)

    def _hold_for_sync(self) -> None:
        """Hold released sends until the sync of what was just written."""
        assert self.commits is not None
        fut = self.commits.waiter()
        if fut is not self._held_for:
            self._held_for = fut
            fut.add_done_callback(self._release_election)

    def _release_election(self, fut: asyncio.Future[None]) -> None:
        if fut is not self._held_for:
            return  # a later write waits for a later sync
        held, self._held, self._held_for = self._held, [], None
        if fut.cancelled() or fut.exception() is not None:
            self.counters["election_sends_dropped"] += len(held)
            log.error("election state could not be made durable: its messages are not sent",
                      messages=len(held))  # fmt: skip
            return
        if self._udp is None or self._udp.is_closing():
            return  # shutting down
        for send in held:
            self._send(send)

    def _send(self, send: Send) -> None:
        if send.channel is Channel.STREAM:
            writer = self._inbound.get(send.to)
            if writer is not None:
                writer.write(self.wire.frame(send.messages))
                return
            task = self._loop.create_task(self._stream_out(send))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        data = self.wire.datagram(send.messages)
        assert self._packets is not None
        self._packets.send(data, send.to)
        self.counters["datagrams_out"] += 1
        self.counters["bytes_out"] += len(data)

    def _publish(self, event: Any) -> None:
        if isinstance(event, SyncCompleted):
            self._log_sync(event)
            return
        if isinstance(event, ELECTION_EVENTS):
            record = election_fields(event)
            self.controller_watch.changed(event, self.node)
        else:
            record = event_fields(event)
        record["at_ms"] = int(time.time() * 1000)
        record["observer"] = self.config.node_name
        row = history_row(self.observer, record["at_ms"], event)
        if row is not None and self.history is not None:
            self.history.write(row)
        kind = str(record.pop("type"))
        log.info(kind, **record)
        record["type"] = kind
        self._run_event_handlers(kind, record)
        self._update_status()
        for watcher in list(self.watchers):
            if not watcher.offer(record):
                self.watchers.discard(watcher)
        if isinstance(event, JoinCompleted):
            self._resolve_join(event)
            self._discovery_join_done(event.addr)
            self._discovery_after_join(event.ok)

    def _run_event_handlers(self, kind: str, record: dict[str, Any]) -> None:
        handlers = list(self.config.event_handlers)
        if self.config.controller_handler:  # shorthand for the two controller events
            command = self.config.controller_handler
            handlers += [("controller-elected", command), ("controller-lost", command)]
        for event_filter, command in handlers:
            if event_filter not in ("", kind):
                continue
            me = self.config.node_name
            env = {"SHOAL_EVENT": kind, "SHOAL_SELF_NAME": me, "SHOAL_NODE": me}
            for key in ("name", "address", "status", "incarnation", "controller", "epoch"):
                if key in record:
                    env[f"SHOAL_{key.upper()}"] = str(record[key])
            self._spawn(run_handler(command, env, dict(record)))

    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- systemd ------------------------------------------------------------------------

    def _status_text(self) -> str:
        table = self.node.swim.table
        known = self.node.election.known
        controller = f"controller {known[0]} (epoch {known[1]})" if known else "no controller"
        return f"{len(table.live) + 1}/{len(table)} members alive, {controller}"

    def _update_status(self) -> None:
        if self.notifier.enabled:
            text = self._status_text()
            if text != self._status:
                self._status = text
                self.notifier.notify(f"STATUS={text}")

    def _reload(self) -> None:
        """SIGHUP: read the configuration again; apply what can change now."""
        from shoal.daemon import config as config_mod
        from shoal.daemon import logging as shoal_logging

        self.notifier.notify("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")
        try:
            new = config_mod.load(self.flags or {"node_name": self.config.node_name})
        except ConfigError as exc:
            log.error("reload failed; keeping the running configuration", error=str(exc))
            self.notifier.notify("READY=1", f"STATUS=reload failed: {exc}")
            return
        old = self.config
        live = {"tags", "log_level", "log_format", "controller_handler", "event_handlers",
                "history"}
        restart = [f for f in old.__struct_fields__
                   if f not in live and getattr(old, f) != getattr(new, f)]  # fmt: skip
        if restart:
            log.warning("changed settings need a restart to apply", settings=restart)
        changes = {f: getattr(new, f) for f in live if getattr(old, f) != getattr(new, f)}
        self.config = msgspec.structs.replace(old, **changes)
        if "tags" in changes:
            self.set_tags(new.tags)
        if "history" in changes and self.history is not None:
            self.history.reconfigure(new.history)
        if "log_level" in changes or "log_format" in changes:
            shoal_logging.configure(new.log_level, new.log_format)
        log.info("configuration reloaded", applied=sorted(changes), need_restart=restart)
        self.notifier.notify("READY=1", f"STATUS={self._status_text()}")

    def _log_sync(self, event: SyncCompleted) -> None:
        peer = f"{event.peer[0]}:{event.peer[1]}"
        if not event.ok:
            log.info("anti-entropy session failed", peer=peer)
        elif event.sent or event.received:
            log.info("anti-entropy repaired records", peer=peer, sent=event.sent,
                     received=event.received, rounds=event.rounds)  # fmt: skip
        else:
            log.debug("anti-entropy: in sync", peer=peer)

    def _resolve_join(self, event: JoinCompleted) -> None:
        if not event.ok:
            hint = ("a peer that answers others but not us does not hold our primary key"
                    if self.wire.sealing else "if that cluster encrypts, this agent needs "
                    "its key (encryption.key or --encrypt)")  # fmt: skip
            log.warning("join failed: no answer", peer=f"{event.addr[0]}:{event.addr[1]}",
                        hint=hint)  # fmt: skip
        for pending, results, fut in list(self._join_waiters):
            if event.addr in pending:
                pending.discard(event.addr)
                results[f"{event.addr[0]}:{event.addr[1]}"] = event.ok
                if not pending:
                    self._join_waiters.remove((pending, results, fut))
                    if not fut.done():
                        fut.set_result(None)

    def _dropped(self, reason: str, addr: Address, detail: str = "") -> None:
        """Count a rejected packet; log the first per (reason, host) at info
        (a key or clock problem at warning, with what to check)."""
        self.counters["dropped_" + reason] += 1
        key = (reason, addr[0])
        if key not in self._drop_seen and len(self._drop_seen) < _MAX_DROP_KEYS:
            self._drop_seen.add(key)
            hint = _DROP_HINTS.get(reason)
            (log.warning if hint else log.info)(
                "dropped a packet", reason=reason, peer=f"{addr[0]}:{addr[1]}", detail=detail,
                **({"hint": hint} if hint else {}))  # fmt: skip
        else:
            log.debug("dropped a packet", reason=reason, peer=f"{addr[0]}:{addr[1]}")


def _grow_receive_buffer(transport: asyncio.BaseTransport) -> None:
    # A burst (a mass join, a flood of garbage) must not overflow the socket
    # before the loop reads it: memberlist asks for 2 MB for the same reason.
    # The kernel caps the value at net.core.rmem_max; best effort.
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER_BYTES)
        except OSError:
            pass


def _slowed(sync: Callable[[], None], delay_s: float) -> Callable[[], None]:
    """`sync`, then a pause of `delay_s` (fault injection: a slow disk)."""
    if not delay_s:
        return sync

    def slow_sync() -> None:
        sync()
        time.sleep(delay_s)  # on the group-commit thread, never the loop

    return slow_sync


def vars_of(obj: Any) -> dict[str, Any]:
    """The fields of a struct as a dict (for log lines)."""
    return {name: getattr(obj, name) for name in obj.__struct_fields__}
