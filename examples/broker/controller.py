"""The controller role: what the broker on the shoal controller's node does.

shoal elects one controller per epoch; the broker that runs beside it acts
for the whole broker cluster, and only while its agent says `is_self`:

    live brokers = keys under `brokers/` (each lives as long as its broker's
                   session) whose owner member is alive with health passing
    leaders      = assign(every partition of every topic, live brokers,
                          leaders in force now)
    write `assignment` = {"epoch": E, "leaders": ...} to the metadata log,
                         with cas = the mod revision it was read at

The write commits only through a majority of the voters, so a controller
cut off from them cannot change the assignment at all (its writes are not
applied, or unknown and then truncated). The cas makes the write a
decision on what was read: a Conflict means someone changed the
assignment meanwhile, so it reads again and computes again. An assignment
in the log written under a higher epoch than this agent's means a
successor has acted: this role then writes nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from shoal.client import AsyncClient, Conflict, ShoalError, Unknown

from .assignment import Assignment, assign
from .metadata import ASSIGNMENT, Topic, read_assignment, read_topics, ring

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
    """

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def reconcile(self, epoch: int, brokers: dict[str, BrokerInfo],
                        topics: dict[str, Topic], current: Assignment | None,
                        revision: int) -> tuple[Assignment | None, int]:  # fmt: skip
        """Write a new assignment under `epoch` if the topics, the live
        brokers or the epoch call for one.

        Args:
            epoch: the controller epoch this agent holds (`is_self` was true).
            brokers: the registered brokers.
            topics, current, revision: the topics and the assignment in the
                log, and the assignment's mod revision, just read.

        Returns:
            The assignment in the log afterwards (as far as this role
            knows), and its mod revision.
        """
        # A member's health is the worst of its checks, the broker's TTL
        # check among them: a hung broker's member turns critical on every
        # agent (gossip) while its key may still wait out the session's TTL.
        members = await self.client.members(status="alive")
        healthy = {m.name for m in members if m.health in (None, "passing")}
        live = [b.id for b in brokers.values() if b.owner in healthy]
        for _ in range(3):  # a Conflict: read again and decide again
            if not live or (current is not None and current.epoch > epoch):
                return current, revision  # nobody to lead; or a successor has written
            parts = [(t, p) for t, topic in topics.items() for p in range(topic.partitions)]
            leaders = assign(parts, live, current.leaders if current is not None else {})
            if current is not None and current.epoch == epoch and current.leaders == leaders:
                return current, revision
            wanted = Assignment(epoch, leaders)
            try:
                written = await self.client.meta.put(ASSIGNMENT, wanted.encode(), cas=revision)
            except Conflict:
                log.info("the assignment changed since it was read: reading it again")
                topics, _ = await read_topics(self.client)
                current, revision = await read_assignment(self.client)
                continue
            except Unknown as exc:  # the next refresh reads it back; its cas keeps it single
                log.warning("assignment under epoch %d: outcome unknown (%s)", epoch, exc)
                return current, revision
            except ShoalError as exc:  # NotApplied: nothing written; the next refresh retries
                log.warning("assignment under epoch %d not written: %s", epoch, exc)
                return current, revision
            log.info("assignment written under epoch %d at revision %d over %s: %s", epoch,
                     written.revision, sorted(live), _summary(leaders))  # fmt: skip
            await ring(self.client, written.revision)
            return wanted, written.revision
        return current, revision


def _summary(leaders: dict[tuple[str, int], str]) -> str:
    return " ".join(f"{t}/{p}={b}" for (t, p), b in sorted(leaders.items()))
