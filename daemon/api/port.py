"""What the API and metrics read from the agent, and what they may ask of it.

Readers get a snapshot, not the agent's insides (raft's `status.go`):
`AgentStatus` holds the node's `NodeStatus` and the agent's own numbers,
built fresh by `AgentPort.status()`. The commands are the agent's public
methods; `AgentPort` names them so that the API never imports the agent
(the agent loads the API, not the other way round).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

import msgspec

from shoal.daemon.gcpauses import GcStatus
from shoal.node.status import NodeStatus

if TYPE_CHECKING:
    from shoal.daemon.api.changes import ChangeLog
    from shoal.daemon.api.watch import ControllerWatch, Watchers
    from shoal.daemon.config import AgentConfig
    from shoal.daemon.liveness import Liveness
    from shoal.daemon.logsessions import LogSessions
    from shoal.daemon.meta import MetaService
    from shoal.daemon.network.keyops import KeyService
    from shoal.daemon.network.queries import QueryService
    from shoal.daemon.userevents import UserEvents
    from shoal.kernel.contract import Address, Tags
    from shoal.membership.vivaldi import CoordinateSnapshot
    from shoal.services.queries import QueryReply
    from shoal.storage.records import Record


class DiskStatus(msgspec.Struct, frozen=True):
    """The group commit's numbers."""

    fsyncs: int
    slow_fsyncs: int
    fsync_max_s: float


class AgentStatus(msgspec.Struct, frozen=True):
    """One agent at one moment: its node, and the agent's own counters."""

    node: NodeStatus
    counters: dict[str, int]  # the agent's counters, in the order they appeared
    watchers: int  # open `/v1/events` streams
    fault_drops: int | None  # datagrams fault injection dropped (None: it is off)
    history_written: int | None  # rows on disk (None: no history log)
    disk: DiskStatus | None  # None before the data directory is open
    # Members back with a new data directory: name -> the id a voter
    # configuration named before (node/wiped.py).
    former_ids: dict[str, bytes] = {}
    gc: GcStatus | None = None  # the collector's pauses (daemon/gcpauses.py)


class AgentPort(Protocol):
    """The agent as the API sees it."""

    @property
    def config(self) -> AgentConfig:
        """The running configuration (replaced on reload)."""

    @property
    def debug_api(self) -> bool:
        """Whether test hooks are served (SHOAL_DEBUG_API=1)."""

    @property
    def watchers(self) -> Watchers:
        """The open `/v1/events` streams."""

    @property
    def queries(self) -> QueryService:
        """`shoal query`: asks members and collects their answers."""

    @property
    def user_events(self) -> UserEvents:
        """`shoal event`: sends and delivers user events."""

    @property
    def liveness(self) -> Liveness:
        """Client sessions and health checks."""

    @property
    def log_sessions(self) -> LogSessions | None:
        """Sessions in the metadata log (None: `[meta]` is off here)."""

    @property
    def changes(self) -> ChangeLog:
        """The numbered changes the `/v1/watch` streams follow."""

    @property
    def controller_watch(self) -> ControllerWatch:
        """Wakes callers waiting for the controller to change."""

    @property
    def keys(self) -> KeyService:
        """Keyring commands, here and across the cluster."""

    @property
    def meta(self) -> MetaService | None:
        """The metadata log's writes and reads (None: `[meta]` is off)."""

    def status(self) -> AgentStatus:
        """A fresh snapshot."""

    def coordinates(self) -> CoordinateSnapshot:
        """This node's network coordinate and its peers' (docs/coordinates.md)."""

    def member_name(self, node_id: bytes) -> str | None:
        """The name of the member with `node_id`, if known (a record's writer)."""

    def count(self, name: str) -> None:
        """Add one to the agent counter `name`."""

    def loop_time(self) -> float:
        """The event loop's clock (the cores' `now`)."""

    async def join(self, addrs: list[Address]) -> dict[str, bool]:
        """Join through `addrs`; each attempt's outcome."""

    def leave(self) -> None:
        """Leave the cluster, keep running."""

    def read(self, key: bytes) -> Record | None:
        """The local record of `key`."""

    def scan(self, prefix: bytes, after: bytes, limit: int) -> list[Record]:
        """Up to `limit` records under `prefix`, after key `after`, in key order."""

    def visible(self, rec: Record) -> bool:
        """Whether readers see `rec` (not an ephemeral key of a member gone)."""

    def write(self, key: bytes, value: bytes | None, fence: int | None = None,
              ephemeral: bool = False,
              session: str | None = None) -> tuple[Record, asyncio.Future[None]]:  # fmt: skip
        """Put or delete `key` (fenced, ephemeral); the future completes once
        it is durable."""

    def write_many(self, writes: list[tuple[bytes, bytes | None, int | None]],
                   ) -> tuple[list[Record], int, asyncio.Future[None]]:  # fmt: skip
        """Put or delete each (key, value, fence), pushed together: the
        records written, how many were refused, their durability's future."""

    def change_tags(self, set_tags: dict[str, str], delete: list[str]) -> Tags:
        """Set and delete this node's tags at run time (persisted)."""

    def remove_voter(self, name: str) -> bool:
        """As controller, remove voter `name`."""

    def force_leave_here(self, payload: bytes) -> QueryReply:
        """`shoal force-leave` on this agent, as controller."""
