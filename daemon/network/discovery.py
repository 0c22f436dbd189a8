"""Discovery glue: multicast DNS-SD results become joins, a few at a time.

Discovery (daemon/network/mdns.py, zeroconf) reports peers; this turns
them into `node.join` calls. At most MAX_DISCOVERY_JOINS run at once and
the rest queue: push-pull and gossip bring in the others, so fifty agents
starting together do not all join each other. A peer that is a live member
already, or found while this node has left, is not joined.

With seeds, discovery is a second way in, not the first: it starts
DISCOVERY_AFTER_JOIN_S after a seed answered, or at once when one did not.
zeroconf is imported only when discovery starts.

Once started, the view is looked at every REDISCOVERY_POLL_S: when a large
share of the members died at once, discovery announces this node and asks
for the others again, in bounded rounds (daemon/network/rediscovery.py).

`JoinWaiters` answers `shoal join` (POST /v1/join): each address's outcome,
once every attempt has finished.
"""

from __future__ import annotations

import asyncio
import importlib
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from shoal.daemon.config import AgentConfig
from shoal.daemon.network.rediscovery import Rediscovery
from shoal.daemon.network.wire import Wire
from shoal.kernel.contract import Address
from shoal.kernel.errors import ConfigError
from shoal.membership.events import JoinCompleted
from shoal.membership.member import MemberState
from shoal.node.composition import ShoalNode

if TYPE_CHECKING:  # zeroconf is loaded when discovery starts, after the join is sent
    from shoal.daemon.network.mdns import DiscoveredPeer, Discovery, IgnoredPeer

MAX_DISCOVERY_JOINS = 3
DISCOVERY_AFTER_JOIN_S = 5.0
REDISCOVERY_POLL_S = 1.0
_MAX_IGNORED_KEYS = 1024
log = structlog.get_logger("shoal")


def preload(config: AgentConfig) -> None:
    """Import zeroconf on a thread now, if discovery starts at once.

    The agent opens its database meanwhile: RocksDB creating a store is
    mostly fsync, with the GIL released, so the import runs in that wait
    instead of after it: exec to first announcement of one agent alone,
    0.236 -> 0.215 s of wall time (medians of 15 paired runs, load 5 on 2
    cores), for 1 M more instructions (callgrind: 411 -> 412 M)."""
    if config.discovery and not config.join:
        threading.Thread(target=importlib.import_module, args=("shoal.daemon.network.mdns",),
                         name="import zeroconf", daemon=True).start()  # fmt: skip


class DiscoveryJoins:
    """Runs discovery for one agent and throttles the joins it asks for."""

    def __init__(self, config: AgentConfig, node: ShoalNode, wire: Wire,
                 join: Callable[[Address], None],
                 fail: Callable[[ConfigError], None]) -> None:  # fmt: skip
        """Args:
        config: `discovery`, `discovery_interfaces`, `discovery_service`...
        node: read for who is a live member already, and whether it left.
        wire: whether this agent seals, and requires sealing (advertised).
        join: joins one discovered address (and flushes).
        fail: a setting turned out bad after start: the agent must stop.
        """
        self._config = config
        self._node = node
        self._wire = wire
        self._join = join
        self._fail = fail
        self.discovery: Discovery | None = None
        self._joins: set[Address] = set()
        self._queue: deque[DiscoveredPeer] = deque(maxlen=256)
        self._ignored_seen: set[tuple[str, str]] = set()
        # With seeds: what discovery starts with, once the join has answered.
        self._later: tuple[Address, str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._rediscovery = Rediscovery(random.Random())
        self._watch: asyncio.Task[None] | None = None

    def start_after_join(self, advertise: Address, node_id_hex: str) -> None:
        """With seeds: start once the first join attempt has answered."""
        self._later = (advertise, node_id_hex)

    def join_completed(self, addr: Address, ok: bool) -> None:
        """A join attempt finished: let a queued peer in; maybe start discovery.

        Starting it after the join keeps its start (zeroconf's import,
        sockets, a burst of mDNS between every pair of new agents) out of the
        first second, when agents started together need their CPU for
        joining: 20 agents on 2 cores all saw all in 2.2-2.9 s with it at
        start, 1.9 s with it off."""
        self._join_done(addr)
        if self._later is None or self._task is not None:
            return
        delay = DISCOVERY_AFTER_JOIN_S if ok else 0.0
        self._task = asyncio.get_running_loop().create_task(self._start_later(delay))

    async def start(self, advertise: Address, node_id_hex: str) -> None:
        """Register this node and browse for others (if discovery is on).

        Raises:
            ConfigError: the discovery interfaces cannot do multicast.
        """
        cfg = self._config
        if not cfg.discovery:
            return
        from shoal.daemon.network.mdns import Discovery, Sealing

        interfaces = list(cfg.discovery_interfaces) or [advertise[0]]
        wire = self._wire
        self.discovery = Discovery(
            interfaces, advertise, cfg.node_name, node_id_hex, cfg.cluster, self._on_discovered,
            cfg.discovery_service,
            Sealing(wire.keyring is not None, wire.sealing or wire.requires_key,
                    wire.requires_key),
            known=self._is_member_label,
        )  # fmt: skip
        try:
            await self.discovery.start()
        except OSError as exc:
            raise ConfigError(
                f"discovery_interfaces: cannot use {', '.join(interfaces)} for "
                f"multicast: {exc.strerror}"
            ) from None
        log.info("discovery started", interfaces=interfaces, service=cfg.discovery_service)
        self._watch = asyncio.get_running_loop().create_task(self._watch_view())

    async def announced(self, timeout_s: float = 1.0) -> None:
        """Return once discovery's first announcement is out (at once when
        discovery is off or not started yet; at `timeout_s` at the latest)."""
        if self.discovery is None:
            return
        try:
            await asyncio.wait_for(self.discovery.announced.wait(), timeout_s)
        except TimeoutError:
            log.debug("discovery's first announcement not out yet", after_s=timeout_s)

    def cancel(self) -> None:
        """Cancel a start still waiting (the agent is stopping)."""
        if self._task is not None:
            self._task.cancel()
        if self._watch is not None:
            self._watch.cancel()

    async def stop(self) -> None:
        """Unregister and stop browsing."""
        if self._watch is not None:
            self._watch.cancel()
        if self.discovery is not None:
            await self.discovery.stop()

    def readvertise(self) -> None:
        """Announce this node again (a join after a leave)."""
        if self.discovery is not None:
            self.discovery.readvertise()

    def withdraw(self) -> None:
        """Stop announcing this node (it left)."""
        if self.discovery is not None:
            self.discovery.withdraw()

    async def _start_later(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        assert self._later is not None
        try:
            await self.start(*self._later)
        except ConfigError as exc:
            log.error("discovery failed", error=str(exc))
            self._fail(exc)

    async def _watch_view(self) -> None:
        """Announce and ask again when a large share of the members died at once."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(REDISCOVERY_POLL_S)
            self.watch_once(loop.time())

    def watch_once(self, now: float) -> None:
        """One look at the view (see `_watch_view`)."""
        table = self._node.swim.table
        dead_since: dict[str, float] = {}
        for m in table.members.values():
            if m.state is MemberState.DEAD:
                at = table.down_at(m.ident.name)
                if at is not None:
                    dead_since[m.ident.name] = at
        rediscovery = self._rediscovery
        if not rediscovery.due(now, set(self._node.peers_up()), dead_since) or self._node.leaving:
            return
        if rediscovery.rounds == 1:
            log.info("many members failed at once: announcing and asking again",
                     failed=sorted(rediscovery.burst))  # fmt: skip
        else:
            log.debug("rediscovery round", round=rediscovery.rounds)
        if self.discovery is not None:
            self.discovery.refresh()

    def _is_member_label(self, label: str) -> bool:
        """Whether a discovery label is a live member's (no need to resolve it)."""
        from shoal.daemon.network.mdns import service_label

        for name in self._node.peers_up():
            ident = self._node.identity_of(name)
            if ident is not None and service_label(ident.name, ident.node_id.hex()) == label:
                log.debug("discovered peer, a member already", label=label)
                return True
        return False

    def _on_discovered(self, found: DiscoveredPeer | IgnoredPeer) -> None:
        from shoal.daemon.network.mdns import IgnoredPeer

        if isinstance(found, IgnoredPeer):
            key = (found.name, found.reason)
            if found.reason != "ourselves" and key not in self._ignored_seen:
                if len(self._ignored_seen) < _MAX_IGNORED_KEYS:
                    self._ignored_seen.add(key)
                level = log.warning if found.reason.startswith("encryption") else log.info
                level("discovered peer ignored", peer=found.name, reason=found.reason)
            return
        if self._node.leaving:
            # A node that left stays out until told to join again.
            log.debug("discovered peer not joined: this node has left", peer=found.name)
            return
        if self._is_live_member(found):
            log.debug("discovered peer is already a member", peer=found.name)
            return
        if found.addr in self._joins:
            return
        if len(self._joins) >= MAX_DISCOVERY_JOINS:
            # Join a few; push-pull and gossip bring in the rest, so fifty
            # agents starting together do not all join each other.
            self._queue.append(found)
            return
        self._joins.add(found.addr)
        log.info("discovered peer, joining", peer=found.name,
                 address=f"{found.addr[0]}:{found.addr[1]}")  # fmt: skip
        self._join(found.addr)

    def _is_live_member(self, peer: DiscoveredPeer) -> bool:
        return self._node.state_of(peer.name) in (MemberState.ALIVE, MemberState.SUSPECT)

    def _join_done(self, addr: Address) -> None:
        if addr not in self._joins:
            return
        self._joins.discard(addr)
        while self._queue:
            peer = self._queue.popleft()
            if not self._is_live_member(peer):
                self._on_discovered(peer)
                return


class JoinWaiter:
    """One `join` command: the addresses it still waits for, and their outcomes."""

    def __init__(self, pending: set[Address]) -> None:
        self.pending = pending
        self.outcomes: dict[str, bool] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def results(self, timeout_s: float) -> dict[str, bool]:
        """Each address's outcome ("ADDR:PORT" -> joined), once all finished.

        Raises:
            TimeoutError: not all attempts finished within `timeout_s`.
        """
        if self.pending:
            await asyncio.wait_for(self.done, timeout_s)
        return self.outcomes


class JoinWaiters:
    """The `join` commands waiting for their attempts' outcomes."""

    def __init__(self) -> None:
        self._waiting: list[JoinWaiter] = []

    def add(self, pending: set[Address]) -> JoinWaiter:
        """Wait for the attempts to `pending` (none: already answered)."""
        waiter = JoinWaiter(pending)
        if pending:
            self._waiting.append(waiter)
        return waiter

    def completed(self, event: JoinCompleted, sealing: bool) -> None:
        """A join attempt finished: log a failure, answer its waiters."""
        if not event.ok:
            hint = ("a peer that answers others but not us does not hold our primary key"
                    if sealing else "if that cluster encrypts, this agent needs "
                    "its key (encryption.key or --encrypt)")  # fmt: skip
            log.warning("join failed: no answer", peer=f"{event.addr[0]}:{event.addr[1]}",
                        hint=hint)  # fmt: skip
        for waiter in list(self._waiting):
            if event.addr in waiter.pending:
                waiter.pending.discard(event.addr)
                waiter.outcomes[f"{event.addr[0]}:{event.addr[1]}"] = event.ok
                if not waiter.pending:
                    self._waiting.remove(waiter)
                    if not waiter.done.done():
                        waiter.done.set_result(None)
