"""A client of the broker cluster: produce and fetch, following redirects.

It needs one or more broker addresses to start from (or the brokers a shoal
agent lists under `brokers/`, with `BrokerClient.from_agent`). A request goes
to the partition's last known leader, else to a starting address; a
`not_leader` answer names the leader's address and the request goes there.
`unavailable`, `no_such_topic` (a broker learns of a new topic within a
second) or a refused connection tries the next address, and after a full
round the client waits a little and starts over, until `timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

from shoal.client import AsyncClient

from .controller import read_brokers

__all__ = ["BrokerClient", "BrokerError"]


class BrokerError(Exception):
    """A request failed: a bad request, or no leader answered in time."""


class BrokerClient:
    """Talks to the brokers over their JSON-lines protocol.

    Args:
        bootstrap: "HOST:PORT" of some brokers.
        timeout_s: how long one produce or fetch may keep trying.
    """

    def __init__(self, bootstrap: list[str], timeout_s: float = 10.0) -> None:
        if not bootstrap:
            raise BrokerError("no broker address to start from")
        self.bootstrap = list(bootstrap)
        self.timeout_s = timeout_s
        self.leaders: dict[tuple[str, int], str] = {}  # partition -> address, from answers

    @classmethod
    async def from_agent(cls, agent: str, timeout_s: float = 10.0) -> BrokerClient:
        """A client that starts from the brokers registered in shoal."""
        async with AsyncClient(addr=agent) as shoal:
            brokers = await read_brokers(shoal)
        return cls(sorted(b.address for b in brokers.values()), timeout_s)

    async def create_topic(self, topic: str, partitions: int, token: str | None = None,
                           timeout_s: float = 5.0) -> dict[str, Any]:  # fmt: skip
        """Ask a broker to create `topic`; its answer (README.md, "The
        protocol"): `ok`, or the error `exists`, `not_applied` or `unknown`
        (ask again with the answer's `token` to learn which).

        Raises:
            BrokerError: a bad request, or no broker answered.
        """
        request = {"op": "create_topic", "topic": topic, "partitions": partitions,
                   "timeout": timeout_s, "token": token or uuid.uuid4().hex}  # fmt: skip
        last = "no broker"
        for address in self.bootstrap:
            try:
                answer = await call(address, request, timeout_s + 2.0)
            except OSError as exc:
                last = f"{address}: {exc}"
                continue  # the same token: another broker cannot create it twice
            if answer.get("error") == "bad_request":
                raise BrokerError(answer.get("detail", "bad request"))
            return answer
        raise BrokerError(f"create {topic}: no broker answered (last: {last})")

    async def produce(self, topic: str, partition: int, value: Any) -> int:
        """Append `value` to a partition of `topic`; its offset."""
        answer = await self.request({"op": "produce", "topic": topic, "partition": partition,
                                     "value": value})  # fmt: skip
        return int(answer["offset"])

    async def fetch(self, topic: str, partition: int, offset: int = 0) -> list[tuple[int, Any]]:
        """Up to 100 messages of a partition of `topic` from `offset` on, as (offset, value)."""
        answer = await self.request({"op": "fetch", "topic": topic, "partition": partition,
                                     "offset": offset})  # fmt: skip
        return [(m["offset"], m["value"]) for m in answer["messages"]]

    async def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send `request` to the partition's leader; its answer.

        Raises:
            BrokerError: a bad request, or no leader within `timeout_s`.
        """
        partition = (request["topic"], request["partition"])
        deadline = time.monotonic() + self.timeout_s
        pause_s = 0.05
        last = "no answer"
        while time.monotonic() < deadline:
            known = self.leaders.get(partition)
            todo = ([known] if known else []) + [a for a in self.bootstrap if a != known]
            tried: set[str] = set()  # two brokers with different views must not ping-pong
            while todo:
                address = todo.pop(0)
                if address in tried:
                    continue
                tried.add(address)
                try:
                    answer = await call(address, request)
                except OSError as exc:
                    last = f"{address}: {exc}"
                    continue
                if answer.get("ok"):
                    self.leaders[partition] = address
                    return answer
                if answer.get("error") == "bad_request":
                    raise BrokerError(answer.get("detail", "bad request"))
                last = f"{address}: {answer.get('error')}"
                redirect = answer.get("address")
                if answer.get("error") == "not_leader" and redirect and redirect not in tried:
                    self.leaders[partition] = redirect
                    todo = [redirect] + [a for a in todo if a != redirect]
            self.leaders.pop(partition, None)
            await asyncio.sleep(pause_s)  # a new assignment is on its way
            pause_s = min(pause_s * 2, 0.5)
        raise BrokerError(f"partition {partition[0]}/{partition[1]}: no leader answered within "
                          f"{self.timeout_s} s (last: {last})")  # fmt: skip


async def call(address: str, request: dict[str, Any], timeout_s: float = 2.0) -> dict[str, Any]:
    """One request on a new connection to one broker; its answer.

    Raises:
        OSError: the broker could not be reached or did not answer in time.
    """
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(json.dumps(request).encode() + b"\n")
                line = await reader.readline()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except TimeoutError:
        raise OSError(f"no answer within {timeout_s} s") from None
    if not line:
        raise OSError("connection closed")
    answer: dict[str, Any] = json.loads(line)
    return answer
