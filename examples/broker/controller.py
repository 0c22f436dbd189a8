"""The controller role: what the broker on the shoal controller's node does.

shoal elects one controller per epoch; the broker that runs beside it acts
for the whole broker cluster, and only while its agent says `is_self`:

    live brokers = keys under `brokers/` (each lives as long as its broker's
                   session) whose owner member is alive with health passing
    leaders      = assign(partitions, live brokers, leaders in force now)
    write `assignment` = {"epoch": E, "leaders": ...} with fence=E

The fence makes the write safe against a deposed controller: an agent that
knows a higher epoch, or a key already written under one, answers 409
Conflict, and the write is never stored. A Conflict means "you are no
longer the controller": this role stops acting until its agent reports
itself controller under a higher epoch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from shoal.client import AsyncClient, Conflict

from .assignment import Assignment, assign

__all__ = ["BrokerInfo", "PartitionController", "read_brokers"]

log = logging.getLogger("broker.controller")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One registered broker: the value of `brokers/<id>` (with the session
    it was written under) and the member that owns the key."""

    id: str
    host: str
    port: int
    owner: str | None
    session: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


async def read_brokers(client: AsyncClient) -> dict[str, BrokerInfo]:
    """The registered brokers, by id (values that do not parse are skipped)."""
    found: dict[str, BrokerInfo] = {}
    for kv in await client.kv.list(prefix="brokers/"):
        try:
            doc = json.loads(kv.value)
            session = doc.get("session")
            info = BrokerInfo(str(doc["id"]), str(doc["host"]), int(doc["port"]), kv.owner,
                              str(session) if session is not None else None)  # fmt: skip
        except (TypeError, KeyError, ValueError):
            continue
        found[info.id] = info
    return found


class PartitionController:
    """Writes the partition assignment while this node is the controller.

    Args:
        client: the client of this broker's own agent.
        partitions: how many partitions the cluster has.
    """

    def __init__(self, client: AsyncClient, partitions: int) -> None:
        self.client = client
        self.partitions = partitions
        # The highest epoch at which a fenced write was refused: never act
        # under it (or below it) again.
        self.deposed_epoch = 0

    async def reconcile(self, epoch: int, brokers: dict[str, BrokerInfo],
                        current: Assignment | None) -> Assignment | None:  # fmt: skip
        """Write a new assignment under `epoch` if the live brokers or the
        epoch call for one.

        Args:
            epoch: the controller epoch this agent holds (`is_self` was true).
            brokers: the registered brokers.
            current: the assignment in force, as this agent reads it.

        Returns:
            The assignment written, or None when nothing was written.
        """
        if epoch <= self.deposed_epoch:
            return None
        # A member's health is the worst of its checks, the broker's TTL
        # check among them: a hung broker's member turns critical on every
        # agent (gossip) while its key may still wait out the session's TTL.
        members = await self.client.members(status="alive")
        healthy = {m.name for m in members if m.health in (None, "passing")}
        live = [b.id for b in brokers.values() if b.owner in healthy]
        if not live:
            return None
        previous = current.leaders if current is not None else {}
        leaders = assign(self.partitions, live, previous)
        if current is not None and current.epoch == epoch and current.leaders == leaders:
            return None
        wanted = Assignment(epoch, leaders)
        try:
            await self.client.kv.put("assignment", wanted.encode(), fence=epoch)
        except Conflict as exc:
            self.deposed_epoch = max(epoch, self.deposed_epoch)
            log.warning("deposed: the assignment under epoch %d was refused (%s); "
                        "no longer acting as controller", epoch, exc)  # fmt: skip
            return None
        log.info("assignment written under epoch %d over %s: %s", epoch, sorted(live),
                 _summary(leaders))  # fmt: skip
        return wanted


def _summary(leaders: dict[int, str]) -> str:
    return " ".join(f"{p}={b}" for p, b in sorted(leaders.items()))
