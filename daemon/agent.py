"""Agent: the asyncio (uvloop) driver that runs a `ShoalNode` on real sockets.

Shape (aioquic's QuicConnectionProtocol): every input — a datagram, a stream
frame, an API command, the timer — becomes one `node.<input>(..., now)` call
followed by `flush()`. `flush()` drains the node until it is empty: persist
first, then send, then publish events; then it re-arms the single
`loop.call_at` timer on the earliest of `node.next_deadline()` and first
contact's (network/first_contact.py, the handshake's pure core). There are
no protocol coroutines and no other protocol timers; `asyncio.sleep`
appears only in lifecycle code (the leave grace period).

Every flush is timed: one over 50 ms is counted and logged, because a
blocking call in the loop delays every probe answer and makes peers suspect
us (python-zeroconf's blockbuster lesson).

The agent is the lifecycle and the flush; the roles are apart:
- network/: the wire, sockets and datagrams (`Network`), streams and key
  commands (`Streams`, `KeyService`), the discovery glue (`DiscoveryJoins`);
- disk/: the data directory, group commit, and the `Persister`, which holds
  the election's sends until their state is durable (its docstring);
- publisher.py: events to logs, history, handlers, STATUS, watchers;
- reload.py: SIGHUP;
- api/: the HTTP API, which reads `status()` snapshots (api/port.py).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from shoal import __version__, native
from shoal.daemon.config import AgentConfig
from shoal.daemon.disk.commit import GroupCommit, slowed
from shoal.daemon.disk.datadir import DataDir
from shoal.daemon.disk.persister import Persister
from shoal.daemon.disk.snapshots import SnapshotTaker
from shoal.daemon.gcpauses import GcPauses, settle_collector
from shoal.daemon.health import CRITICAL, HEALTH_TAG
from shoal.daemon.liveness import Liveness, tags_with_health
from shoal.daemon.logsessions import LogSessions, parse_id
from shoal.daemon.meta import LocalDelivery, MetaService, reply_to
from shoal.daemon.network.addresses import choose_advertise
from shoal.daemon.network.discovery import DiscoveryJoins, JoinWaiters
from shoal.daemon.network.discovery import preload as preload_discovery
from shoal.daemon.network.keyops import KeyService
from shoal.daemon.network.queries import QueryService
from shoal.daemon.network.sockets import Network, open_wire
from shoal.daemon.network.wire import Wire
from shoal.daemon.publisher import Publisher
from shoal.daemon.sessions import SessionError
from shoal.daemon.systemd import Notifier
from shoal.daemon.userevents import UserEvents
from shoal.kernel.contract import Address, Output, Send, Tags
from shoal.kernel.errors import ConfigError, VersionError
from shoal.kernel.sealing import KeyCommand, KeyReply
from shoal.kernel.versions import NEXT_RELEASE_STANDIN, THIS_BUILD, TWO_AHEAD_STANDIN, Versions
from shoal.membership.events import JoinCompleted
from shoal.membership.member import MemberState, MemberView, NodeIdentity, make_tags
from shoal.metalog.core import ProposalDone, ReadDone
from shoal.metalog.events import KeepaliveDone, SessionEnded
from shoal.metalog.state import END_REASONS
from shoal.node import nextrelease
from shoal.node.composition import ShoalNode
from shoal.node.features import FeatureLevelUnsupported
from shoal.node.history import JOINED, Observer, member_row
from shoal.services.checkconfig import CheckConfig
from shoal.services.checks import CheckChanged, starting_health
from shoal.services.delivery import UserEventReceived
from shoal.services.queries import QueryReply
from shoal.storage.history import HistoryWriter
from shoal.storage.records import Record

if TYPE_CHECKING:
    from shoal.daemon.api.changes import ChangeLog
    from shoal.daemon.api.port import AgentStatus
    from shoal.daemon.api.watch import ControllerWatch, Watchers
    from shoal.daemon.dns.server import DnsServer
    from shoal.membership.vivaldi import CoordinateSnapshot
    from shoal.metalog.snapshot import Snapshot

SLOW_FLUSH_S = 0.05
# answers for the API (daemon/meta.py), not news
_META_EVENTS = (ProposalDone, ReadDone, KeepaliveDone)
_AGENT_COUNTERS = ("datagrams_in", "datagrams_out", "bytes_in", "bytes_out", "streams_in",
                   "streams_out", "stream_errors", "key_commands", "slow_flushes",
                   "election_sends_dropped")  # fmt: skip

log = structlog.get_logger("shoal")


class Agent:
    """Runs one node until SIGTERM/SIGINT, then leaves gracefully."""

    def __init__(self, config: AgentConfig, flags: dict[str, Any] | None = None) -> None:
        self.config = config
        self.flags = flags  # what the config was built from: SIGHUP builds it again
        self.notifier = Notifier()
        self.debug_api = os.environ.get("SHOAL_DEBUG_API") == "1"
        # Every counter is exported from the start, at 0, so that a scraper
        # sees the series before the first datagram ("dropped_*" by reason come
        # as they happen). The roles below count into this one Counter.
        self.counters: Counter[str] = Counter(dict.fromkeys(_AGENT_COUNTERS, 0))
        self.started_wall_ms = int(time.time() * 1000)
        self.gc_pauses: GcPauses | None = None  # the collector, once running (gcpauses.py)
        # Built by `run`, in this order (each needs the ones before it).
        self.wire: Wire
        self.data_dir: DataDir | None = None
        self.run_number = 0  # this start's run (DataDir.next_run), set at start
        self.commits: GroupCommit | None = None
        self.history: HistoryWriter | None = None
        self.net: Network
        self.node: ShoalNode
        self.keys: KeyService
        self.persister: Persister
        self.snapshots: SnapshotTaker | None = None  # the metadata log's (daemon/disk/snapshots.py)
        self.discovery: DiscoveryJoins
        self.publisher: Publisher
        self.liveness: Liveness  # client sessions and health checks
        self.user_events: UserEvents  # `shoal event`
        self.queries: QueryService  # `shoal query`
        self._loop: asyncio.AbstractEventLoop
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None
        self._flush_due = False  # a flush is queued for the writes of this loop pass
        self._join_waiters = JoinWaiters()
        self._stop = asyncio.Event()
        # A setting found bad after start (discovery's interfaces): the
        # agent leaves, and `run` raises it for the one-line exit 2.
        self._failure: ConfigError | VersionError | None = None
        self._clock_off = False  # last seen: clock further than store.max_offset_ms
        self._started_as: tuple[str, Address, str]  # node id, advertised address, why
        # The metadata log's roles, with `[meta] enabled` (daemon/meta.py).
        self.meta: MetaService | None = None
        self.local: LocalDelivery | None = None
        self.log_sessions: LogSessions | None = None  # sessions in the log (logsessions.py)

    # -- lifecycle -------------------------------------------------------------

    async def run(self) -> int:
        """Start, serve until asked to stop, leave, and return the exit code."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        dns = self._bind_dns(cfg)  # before the join: a taken port is a one-line error
        await self._start(cfg)
        # The first announcement goes out before anything else is loaded:
        # five agents started together on 2 cores see each other once the
        # last one has announced, and the API server's import (10 ms of CPU)
        # would come first otherwise (docs/performance.md, "Start-up").
        await self.discovery.announced()
        self._log_started()
        from shoal.daemon.api.server import ApiServer  # loaded after the node is up and joining

        api = ApiServer(self)
        await api.start(self.net.api_sock)
        if dns is not None:
            await dns.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, self._stop.set)
        self._loop.add_signal_handler(signal.SIGHUP, self._reload)
        self.notifier.notify("READY=1", f"STATUS={self.status_text()}", f"MAINPID={os.getpid()}")
        self.gc_pauses = settle_collector()  # start-up frozen, collections timed, gc on
        self.notifier.start_watchdog(self._loop)
        await self._stop.wait()
        self.discovery.cancel()
        self.notifier.notify("STOPPING=1", "STATUS=leaving the cluster")
        await self._leave_gracefully()
        await self.discovery.stop()
        await api.stop()
        if dns is not None:
            await dns.stop()
        if self.commits is not None:
            await self.commits.close()  # no fsync may run while the database closes
        self._close()
        self.notifier.stop()
        log.info("agent stopped", node=cfg.node_name)
        if self._failure is not None:
            raise self._failure
        return 0

    def _bind_dns(self, cfg: AgentConfig) -> DnsServer | None:
        """The DNS server (daemon/dns/), its sockets bound; None when `[dns]` is off."""
        if cfg.dns.bind is None:
            return None
        from shoal.daemon.dns.server import COUNTERS, DnsServer

        self.counters.update(dict.fromkeys(COUNTERS, 0))  # exported at 0 from the start
        server = DnsServer(self, cfg.dns)
        server.bind()
        return server

    async def _start(self, cfg: AgentConfig) -> None:
        """Open the disk and the sockets, start the node, send the join."""
        advertise, why = choose_advertise(cfg.bind, cfg.advertise)
        preload_discovery(cfg)  # imports while the database opens
        self.data_dir = DataDir(cfg.data_dir, cfg.store.tree_depth, cfg.cluster)
        stored = self.data_dir.load_identity()
        self.run_number = self.data_dir.next_run()
        versions = build_versions()
        self.wire, swim_cfg = open_wire(cfg, stored.node_id, self.run_number, versions)
        engine = self.data_dir.engine
        self.commits = GroupCommit(self._loop, slowed(engine.sync, cfg.faults.fsync_delay_s))
        observer = Observer(cfg.cluster, cfg.node_name, stored.node_id.hex())
        self.history = HistoryWriter(
            Path(cfg.data_dir) / "history", cfg.history,
            on_error=lambda m: log.error("history write failed", error=m),
        )  # fmt: skip
        self.net = Network(cfg, self.wire, self.counters, self._receive, self._unreachable,
                           self._stream_failed, self._apply_key)  # fmt: skip
        await self.net.open()
        runtime_tags = self.data_dir.load_tags()
        if runtime_tags is not None:
            log.info("tags set by `shoal tags` win over the configured ones",
                     tags=dict(runtime_tags))  # fmt: skip
        tags = cfg.tags if runtime_tags is None else runtime_tags
        health = starting_health(cfg.checks)  # every check starts critical
        ident = NodeIdentity(cfg.node_name, stored.node_id, advertise,
                             tags_with_health(tags, health), versions)  # fmt: skip
        rng = random.Random(int.from_bytes(os.urandom(8), "big"))
        self.node = ShoalNode(ident, swim_cfg, rng, stored.incarnation, engine.records,
                              cfg.store, self._wall_offset_ms(), cfg.election,
                              self.data_dir.load_election(), cfg.bootstrap_expect,
                              **self._meta_parts(advertise))  # fmt: skip
        self.node.collect_changes()  # numbered for the watch streams (publisher)
        self.net.contact.rearm = self._arm  # one timer (module docstring)
        self.liveness = Liveness(self._loop, self.node, self.flush)
        self._wire_roles(observer)
        self.user_events = UserEvents(
            engine,
            self.node,
            lambda: self.config,
            self.publisher.publish_user,
            self.flush,
            self._loop,
        )
        self.queries = QueryService(self.wire, self.net.contact, lambda: self.node,
                                    lambda: self.config)  # fmt: skip
        self.net.streams.answer_query = self.queries.answer
        self.queries.internal["_force-leave"] = self.force_leave_here
        now = self._loop.time()
        self.node.start(now)
        self.liveness.configure_checks(cfg.checks)  # probes start; TTL deadlines in the node
        # The agent's own start is the first row of its history: the churn
        # job sees a restart even before any peer has noticed it.
        me = MemberView(ident.name, ident.node_id, ident.addr, ident.tags,
                        self.node.incarnation, MemberState.ALIVE)  # fmt: skip
        self.history.write(member_row(observer, int(time.time() * 1000), JOINED, me))
        if cfg.join:
            self.node.join(list(cfg.join), now, retry=True)
            self.discovery.start_after_join(advertise, stored.node_id.hex())
        self.flush()
        if not cfg.join:
            await self.discovery.start(advertise, stored.node_id.hex())
        self._started_as = (stored.node_id.hex(), advertise, why)

    def _meta_parts(self, me: Address) -> dict[str, Any]:
        """With `[meta] enabled`: the metadata log's settings and its
        entries from the data directory, for the node; the service the API
        asks, and the local delivery of what the log sends to itself."""
        settings = self.config.meta
        if not settings.enabled:
            return {}
        from shoal.metalog.core import MetaConfig

        assert self.data_dir is not None and self.commits is not None
        self.local = LocalDelivery(self._loop, me, self._receive)
        self.meta = MetaService(self._loop, lambda: self.node, self.flush,
                                settings.answer_timeout_s,
                                self.commits.hand_over_now)  # fmt: skip
        self.log_sessions = LogSessions(self.meta, lambda: self.node)
        return {
            "meta": MetaConfig(
                settings.heartbeat_s,
                settings.answer_timeout_s,
                settings.snapshot_every,
                settings.keep_entries,
                max_snapshot_bytes=settings.max_snapshot_bytes,
            ),
            "meta_log": self.data_dir.load_log(),
            "meta_snapshot": self.data_dir.load_snapshot(),
        }

    def _send(self, send: Send) -> None:
        """Send one `Send`; one to this agent itself is delivered here."""
        local = self.local
        if local is None:
            self.net.send(send)
        else:  # the log's: held, merged or split to the MTU (daemon/meta.py)
            local.route(send, self.net.send, self.node.swim.config.mtu_bytes)

    def _log_started(self) -> None:
        cfg = self.config
        node_id, advertise, why = self._started_as
        log.info("agent started", node=cfg.node_name, node_id=node_id,
                 cluster=cfg.cluster, bind=f"{cfg.bind[0]}:{cfg.bind[1]}",
                 advertise=f"{advertise[0]}:{advertise[1]}", advertise_reason=why,
                 incarnation=self.node.incarnation, profile=cfg.profile,
                 hot_path=native.describe())  # fmt: skip
        if cfg.faults.enabled:
            log.warning("fault injection is on", **vars_of(cfg.faults))

    def _wire_roles(self, observer: Observer) -> None:
        """Build the roles that need the node."""
        cfg, node = self.config, self.node
        assert self.data_dir is not None and self.commits is not None and self.history is not None
        self.keys = KeyService(self.wire, self.net.contact, cfg, node)
        self.snapshots = snapshots = SnapshotTaker(self._loop, self.data_dir.stage_snapshot,
                                       self._snapshot_taken)  # fmt: skip
        self.persister = Persister(self.data_dir, self.commits, self._send,
                                   lambda: self.net.sending, self.counters,
                                   lambda write: self.user_events.persist(write),
                                   snapshots.take)  # fmt: skip
        self.discovery = DiscoveryJoins(cfg, node, self.wire, self._discovery_join, self._fail)
        self.publisher = Publisher(lambda: self.config, node, observer, self.history,
                                   self.notifier, self._join_completed,
                                   str(self.run_number))  # fmt: skip
        self.publisher.on_feature_unsupported = self._feature_unsupported

    def _snapshot_taken(self, snapshot: Snapshot | None) -> None:
        """The snapshot thread's answer, for the metadata log (then flushed)."""
        if self.node.meta is not None:
            self.node.meta.snapshot_taken(snapshot, self._loop.time())
            self.flush()

    def _feature_unsupported(self, event: FeatureLevelUnsupported) -> None:
        """The controller announced a feature level above this build's: stop
        rather than misread what the others now send."""
        self._failure = VersionError(
            f"the cluster runs feature level {event.level}, above this build's "
            f"{event.supported} (shoal {__version__}): this agent stops rather than misread "
            "the others; run a newer release here, or before a downgrade lower the level "
            f"with `shoal features --cap {event.supported}` on a current agent "
            "(docs/operations.md, 'An upgrade')"
        )
        self._stop.set()

    def request_stop(self) -> None:
        """Ask the agent to leave and exit (as SIGTERM does)."""
        self._stop.set()

    def _fail(self, exc: ConfigError) -> None:
        self._failure = exc
        self._stop.set()

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
        self.liveness.stop()
        self.user_events.stop()
        self.net.close()
        self.net.streams.close()
        self.publisher.cancel()
        if self.history is not None:
            self.history.close()  # everything queued is on disk before exit
        if self.data_dir is not None:
            if self.snapshots is not None:
                self.snapshots.stop()
            self.data_dir.close()

    def _reload(self) -> None:
        from shoal.daemon.reload import reload

        reload(self)

    # -- inputs ----------------------------------------------------------------------

    def _receive(self, messages: list[Any], sender: Address) -> None:
        if not self.node.understands(messages):
            self.net.dropped("unexpected", sender, "a message no core takes")
            return
        if self.local is not None:
            sender = reply_to(self.node, messages, sender)
        self.node.receive_all(messages, sender, self._loop.time())
        if self.meta is not None and self.meta.flush_later(messages):
            return  # flushed at once, or with the others of this pass (daemon/meta.py)
        self.flush()

    def _unreachable(self, addr: Address) -> None:
        self.node.unreachable(addr, self._loop.time())
        self.flush()

    def _stream_failed(self, peer: Address) -> None:
        self.node.stream_failed(peer, self._loop.time())
        self.flush()

    def _apply_key(self, command: KeyCommand) -> KeyReply:
        return self.keys.apply(command)

    def _discovery_join(self, addr: Address) -> None:
        self.node.join([addr], self._loop.time())
        self.flush()

    def _on_timer(self) -> None:
        self._timer = None
        self._armed_at = None
        now = self._loop.time()
        self.net.contact.tick(now)
        self.node.set_wall_offset(self._wall_offset_ms())
        self.node.tick(now)
        self.flush()
        self._watch_clock()

    def _watch_clock(self) -> None:
        """One warning when this agent's clock goes further from its peers'
        than `store.max_offset_ms` (its writes are refused from then on),
        one line when it is back."""
        offset = self.node.clock_offset_ms(self._loop.time())
        limit = self.config.store.max_offset_ms
        off = offset is not None and abs(offset) > limit
        if off != self._clock_off:
            self._clock_off = off
            if off:
                log.warning("this agent's clock is off from its peers': writes are refused",
                            node=self.config.node_name, offset_ms=offset, limit_ms=limit,
                            hint="fix this machine's clock (NTP; docs/operations.md)")  # fmt: skip
            else:
                log.info("this agent's clock agrees with its peers' again", offset_ms=offset)

    def _wall_offset_ms(self) -> int:
        # The cores see wall time only as monotonic `now` plus this offset,
        # refreshed on every timer, so a stepped clock is noticed within a
        # tick (the HLC never goes backwards either way).
        return int(time.time() * 1000) - int(self._loop.time() * 1000)

    # -- commands (from the API) -----------------------------------------------------

    async def join(self, addrs: list[Address]) -> dict[str, bool]:
        """Join through `addrs`; wait for each attempt's outcome."""
        if self.node.leaving:
            self.discovery.readvertise()
        waiting = self._join_waiters.add(set(addrs) - {self.node.swim.ident.addr})
        self.node.join(addrs, self._loop.time())
        self.flush()
        return await waiting.results(self.config.swim.stream_timeout_s + 1)

    def leave(self) -> None:
        """Leave the cluster but keep running (a later join rejoins)."""
        self.node.leave(self._loop.time())
        self.flush()
        self.discovery.withdraw()

    def write(self, key: bytes, value: bytes | None, fence: int | None = None,
              ephemeral: bool = False,
              session: str | None = None) -> tuple[Record, asyncio.Future[None]]:  # fmt: skip
        """Put (or delete, with None) `key`: visible here and pushed to peers
        at once. Returns the record and a future that completes once it is
        durable (group commit); acknowledge the client only then, so an
        acknowledged write survives a crash of this machine. The future is
        shared by a group of writes: add callbacks, never cancel it.
        `fence` and `ephemeral`: see `ShoalNode.write`; a key written under
        `session` is ephemeral and deleted when the session ends
        (daemon/sessions.py; SessionError 404 for an unknown session)."""
        in_log = b""
        if session is not None:
            in_log = self._log_session(session)
            if not in_log:
                self.liveness.sessions.get(session)
            ephemeral = True
        self.node.set_wall_offset(self._wall_offset_ms())
        record = self.node.write(key, value, self._loop.time(), fence, ephemeral, in_log)
        if session is not None and value is not None and not in_log:
            self.liveness.sessions.attach(session, key, record.hlc)
        if not self._flush_due:
            # One flush (the pushes to peers, the change log, the timer) for
            # all the writes that arrive in one pass of the loop: 7 % fewer
            # instructions per API write than a flush per write (callgrind,
            # 32 writers; issue 25). It runs before any of them is answered
            # (that waits for their group's sync).
            self._flush_due = True
            self._loop.call_soon(self._flush_writes)
        assert self.commits is not None
        return record, self.commits.waiter()

    def write_many(self, writes: list[tuple[bytes, bytes | None, int | None]],
                   ) -> tuple[list[Record], int, asyncio.Future[None]]:  # fmt: skip
        """Put or delete each (key, value, fence) of `writes` as `write`
        would, pushed to peers together (`ShoalNode.write_many`): the records
        written, how many were refused, and the future of their durability
        (shared: never cancel it). WriteRefused: none written (the clock)."""
        self.node.set_wall_offset(self._wall_offset_ms())
        written, refused = self.node.write_many(writes, self._loop.time())
        if not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush_writes)
        assert self.commits is not None
        return written, refused, self.commits.waiter()

    def _log_session(self, session: str) -> bytes:
        """The id of `session` when it is a session of the metadata log (b"":
        one of this agent's table). SessionError 404 for a log session that
        is not open here."""
        sid = parse_id(session)
        if sid is None or self.log_sessions is None:
            return b""
        if not self.log_sessions.holds(sid):
            raise SessionError(404, f"no session {session!r} (it ended, or never was): "
                               "open a new one")  # fmt: skip
        return sid

    def _flush_writes(self) -> None:
        self._flush_due = False
        self.flush()

    def remove_voter(self, name: str) -> bool:
        """As controller, remove voter `name` (`shoal force-leave`)."""
        ok = self.node.election.remove_voter(name, self._loop.time())
        self.flush()
        return ok

    def force_leave_here(self, payload: bytes) -> QueryReply:
        """`shoal force-leave`, asked here or forwarded by another agent:
        remove a failed voter, if this agent is the controller."""
        from shoal.membership.member import MemberState

        name = payload.decode(errors="replace")
        node = self.node
        if not node.election.is_controller:
            return QueryReply(0, "error", b"", "this agent is not the controller (any more)")
        if node.state_of(name) not in (MemberState.DEAD, MemberState.LEFT):
            return QueryReply(0, "error", b"", f"{name} is not failed in the controller's view")
        if not self.remove_voter(name):
            return QueryReply(0, "error", b"", "a voter change is in progress; try again")
        return QueryReply(0, "answered", b"", "")

    def set_tags(self, tags: Tags) -> None:
        """Replace this node's tags with the configured ones (a reload),
        unless `shoal tags` set them: those win until its file is removed."""
        assert self.data_dir is not None
        if self.data_dir.load_tags() is not None:
            log.warning("tags changed in the configuration are not applied: tags set by "
                        "`shoal tags` win (remove tags.json in the data directory to use the "
                        "configured ones)")  # fmt: skip
            return
        self.node.set_tags(self.liveness.with_health(tags), self._loop.time())
        self.flush()

    def set_checks(self, checks: tuple[CheckConfig, ...]) -> None:
        """Run these health checks from now on (a reload)."""
        self.liveness.configure_checks(checks)

    def change_tags(self, set_tags: dict[str, str], delete: list[str]) -> Tags:
        """`shoal tags`: set and delete tags at run time; written to the data
        directory first, so a restart keeps them. Returns the tags now."""
        assert self.data_dir is not None
        tags = {k: v for k, v in self.node.swim.ident.tags if k != HEALTH_TAG}
        tags.update(set_tags)
        for key in delete:
            tags.pop(key, None)
        new = make_tags(tags)
        self.data_dir.save_tags(new)
        self.node.set_tags(self.liveness.with_health(new), self._loop.time())
        self.flush()
        return new

    # -- readers (the API's port, api/port.py) ---------------------------------------

    def status(self) -> AgentStatus:
        """A snapshot of the node and the agent, for the API and metrics."""
        from shoal.daemon.api.port import AgentStatus, DiskStatus
        from shoal.node.status import status

        c, faults = self.commits, self.net.faults
        node = status(self.node, self._loop.time())
        return AgentStatus(
            node=node,
            counters=dict(self.counters),
            watchers=len(self.publisher.watchers),
            fault_drops=None if faults is None else faults.dropped,
            history_written=None if self.history is None else self.history.written,
            disk=None if c is None else DiskStatus(c.syncs, c.slow_syncs, c.slowest_s),
            former_ids=self.publisher.wiped.former_ids(node.members),
            gc=None if self.gc_pauses is None else self.gc_pauses.status(),
        )

    def status_text(self) -> str:
        """systemd's STATUS line."""
        return self.publisher.status_text()

    @property
    def watchers(self) -> Watchers:
        """The open `/v1/events` streams."""
        return self.publisher.watchers

    @property
    def controller_watch(self) -> ControllerWatch:
        """Wakes API callers waiting for the controller to change."""
        return self.publisher.controller_watch

    def coordinates(self) -> CoordinateSnapshot:
        """This node's network coordinate and its peers'."""
        return self.node.swim.coordinates_known()

    def member_name(self, node_id: bytes) -> str | None:
        """The name of the member with `node_id`, if known (a record's writer)."""
        return self.node.name_of(node_id)

    def count(self, name: str) -> None:
        """Add one to the agent counter `name`."""
        self.counters[name] += 1

    def loop_time(self) -> float:
        """The event loop's clock (the cores' `now`)."""
        return self._loop.time()

    def read(self, key: bytes) -> Record | None:
        """The local record of `key` (a tombstone if it was deleted)."""
        return self.node.read(key)

    def visible(self, rec: Record) -> bool:
        """Whether readers see `rec` (not an ephemeral key of a member gone)."""
        return self.node.sync.replica.visible(rec)

    @property
    def changes(self) -> ChangeLog:
        """The numbered changes the `/v1/watch` streams follow."""
        return self.publisher.changes

    def scan(self, prefix: bytes, after: bytes, limit: int) -> list[Record]:
        """Up to `limit` local records under `prefix` after `after`, tombstones too."""
        return self.node.sync.replica.store.scan(prefix, after, limit)

    # -- output ------------------------------------------------------------------------

    def flush(self) -> None:
        """Drain the node until it is empty, then re-arm the timer."""
        started = time.perf_counter()
        while True:
            out = self.node.drain()
            if not out:
                break
            self._handle(out)
        self.publisher.publish_records(self.node.take_changes(), self.node.sync.replica.visible)
        if self.meta is not None:
            self.meta.note_applied()
        self._arm()
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_FLUSH_S:
            self.counters["slow_flushes"] += 1
            log.warning("slow flush: the event loop was blocked", ms=round(elapsed * 1000, 1))

    def _arm(self) -> None:
        """Arm the one timer on the earliest deadline: the node's, or first contact's."""
        deadline = self.node.next_deadline()
        contact = self.net.contact.next_deadline()
        if contact is not None and (deadline is None or contact < deadline):
            deadline = contact
        if deadline != self._armed_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if deadline is None else self._loop.call_at(deadline, self._on_timer)
            self._armed_at = deadline

    def _handle(self, out: Output) -> None:
        """Persist (releasing what waits on it), then send, then publish."""
        if out.persist:
            self.persister.write(out.persist)
        send = self._send
        for item in out.send:
            send(item)
        publish = self.publisher.publish
        for event in out.events:
            if type(event) in _META_EVENTS:
                assert self.meta is not None
                self.meta.done(event)
            elif type(event) is UserEventReceived:  # run its handlers (daemon/userevents.py)
                self.user_events.deliver(event.record)
            elif type(event) is SessionEnded:
                log.info("session ended", session=event.id.hex(), revision=event.revision,
                         reason=END_REASONS[event.reason])  # fmt: skip
            elif type(event) is CheckChanged:  # out of this flush: it may change the node
                self._loop.call_soon(self._check_changed, event)
            else:
                publish(event)

    def _check_changed(self, event: CheckChanged) -> None:
        """A check's status changed: the agent's sessions bound to it end if
        it is critical, and those of the log opened here, through the log."""
        self.liveness.check_changed(event)
        if event.new == CRITICAL and self.log_sessions is not None:
            self.log_sessions.end_bound_to(event.check)

    def _join_completed(self, event: JoinCompleted) -> None:
        """A join attempt finished (published): answer its waiters."""
        self._join_waiters.completed(event, self.wire.sealing)
        self.discovery.join_completed(event.addr, event.ok)


def vars_of(obj: Any) -> dict[str, Any]:
    """The fields of a struct as a dict (for log lines)."""
    return {name: getattr(obj, name) for name in obj.__struct_fields__}


def build_versions() -> Versions:
    """What this agent announces it understands: this build's versions, or,
    with `SHOAL_TEST_NEXT_RELEASE=1` (tests only: docs/operations.md), the
    stand-in for the next release and its one new message (node/nextrelease.py);
    with `=2`, a stand-in two releases ahead, which this build refuses."""
    which = os.environ.get("SHOAL_TEST_NEXT_RELEASE", "")
    if which in ("1", "2"):
        nextrelease.enable()
        return NEXT_RELEASE_STANDIN if which == "1" else TWO_AHEAD_STANDIN
    return THIS_BUILD
