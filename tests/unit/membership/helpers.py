"""Drive a few SwimNodes directly, in the style of h11's ConnectionPair."""

from __future__ import annotations

import random
from typing import Any

from shoal.kernel.contract import Address, Channel
from shoal.membership.member import NodeIdentity
from shoal.membership.profiles import SwimConfig
from shoal.membership.swim import SwimNode

CONFIG = SwimConfig()


def ident(i: int, port: int = 7946, node_id: bytes | None = None) -> NodeIdentity:
    """Identity of test node `i`."""
    return NodeIdentity(f"n{i}", node_id or bytes([i]) * 16, (f"10.0.0.{i}", port))


class Net:
    """A handful of nodes that deliver to each other instantly (or not)."""

    def __init__(self, n: int, config: SwimConfig = CONFIG, seed: int = 1) -> None:
        self.nodes: dict[Address, SwimNode] = {}
        self.down: set[Address] = set()
        # Agents that crashed on a running host: their host answers every
        # datagram with ICMP port unreachable. A (sender, receiver) pair
        # refuses only on that path (a host firewall, say).
        self.refused: set[Address | tuple[Address, Address]] = set()
        self.events: list[tuple[str, Any]] = []
        self.timed: list[tuple[float, str, Any]] = []  # events and datagram messages
        self.persisted: dict[str, int] = {}
        for i in range(1, n + 1):
            self.add(SwimNode(ident(i), config, random.Random(seed * 100 + i)))

    def add(self, node: SwimNode) -> SwimNode:
        self.nodes[node.ident.addr] = node
        return node

    def node(self, i: int) -> SwimNode:
        return next(n for n in self.nodes.values() if n.ident.name == f"n{i}")

    def deliver_all(self, now: float, max_rounds: int = 50) -> None:
        """Drain every node and deliver everything, until quiet."""
        for _ in range(max_rounds):
            moved = False
            for addr, node in list(self.nodes.items()):
                if addr in self.down:
                    node.drain()
                    continue
                out = node.drain()
                for p in out.persist:
                    self.persisted[node.ident.name] = p.write.incarnation
                self.events += [(node.ident.name, e) for e in out.events]
                self.timed += [(now, node.ident.name, e) for e in out.events]
                for send in out.all_sends():
                    moved = True
                    if send.channel is not Channel.STREAM:
                        self.timed += [(now, node.ident.name, (send.to, m)) for m in send.messages]
                    if send.to in self.refused or (addr, send.to) in self.refused:
                        if send.channel is Channel.STREAM:
                            node.stream_failed(send.to, now)
                        else:
                            node.unreachable(send.to, now)
                        continue
                    peer = self.nodes.get(send.to)
                    if peer is None or send.to in self.down:
                        if send.channel is Channel.STREAM:
                            node.stream_failed(send.to, now)
                        continue
                    for msg in send.messages:
                        peer.receive(msg, addr, now)
            if not moved:
                return
        raise AssertionError("still chattering after max_rounds")

    def run(self, start: float, end: float, step: float = 0.05) -> float:
        """Tick every node from `start` to `end`, delivering as we go."""
        now = start
        while now < end:
            now = round(now + step, 6)
            for addr, node in self.nodes.items():
                if addr not in self.down:
                    node.tick(now)
            self.deliver_all(now)
        return now

    def state_of(self, observer: int, subject: int) -> str | None:
        m = self.node(observer).table.get(f"n{subject}")
        return None if m is None else m.state.label

    def of_type(self, kind: type) -> list[tuple[str, Any]]:
        return [(who, e) for who, e in self.events if isinstance(e, kind)]

    def form(self, now: float = 0.0) -> None:
        """Start all nodes; all join n1."""
        seed_addr = self.node(1).ident.addr
        for node in self.nodes.values():
            node.start(now)
            if node.ident.addr != seed_addr:
                node.join([seed_addr], now)
        self.deliver_all(now)
