"""ShoalNode: the pure composition of shoal's protocol cores.

Both drivers use this one class: the asyncio `Agent` with real sockets and
the simulator with a virtual network. If they wired the cores differently,
the simulator would test a different program, so all routing between cores
happens here and nowhere else. This module must stay sans-IO (the boundary
test checks it): it never reads a clock, opens a socket or logs.

Today it holds the membership core; the election and anti-entropy cores plug
in at the marked places, fed by the membership events routed below.
"""

from __future__ import annotations

import random
from typing import Any

from membership.member import MemberView, NodeIdentity, Tags
from membership.output import Address, Output
from membership.profiles import SwimConfig
from membership.swim import SwimNode


class ShoalNode:
    """All of one agent's protocol state, driven by receive/tick/drain."""

    def __init__(
        self,
        ident: NodeIdentity,
        swim_config: SwimConfig,
        rng: random.Random,
        incarnation: int = 0,
    ) -> None:
        """Compose the cores for one node.

        Args:
            ident: the node's name, persistent id, advertised address, tags.
            swim_config: membership timing.
            rng: the node's only randomness; each core gets its own stream
                derived from it, so adding a core does not shift the others.
            incarnation: last incarnation persisted by a previous run.
        """
        self.swim = SwimNode(ident, swim_config, random.Random(rng.getrandbits(64)), incarnation)
        # Message type -> the handler of the core it belongs to: one lookup
        # per message on the hottest path, in the agent and the simulator.
        self._routes = dict(self.swim.handlers)

    @property
    def name(self) -> str:
        """This node's name."""
        return self.swim.ident.name

    # -- the core contract -----------------------------------------------------

    def start(self, now: float) -> None:
        """Begin: raise the incarnation and start the periodic work."""
        self.swim.start(now)

    def receive(self, message: Any, sender: Address, now: float) -> None:
        """Route one decoded message to the core it belongs to."""
        self._routes[type(message)](message, sender, now)

    def receive_all(self, messages: Any, sender: Address, now: float) -> None:
        """`receive` for each message of one datagram or frame, in order."""
        routes = self._routes
        for message in messages:
            routes[type(message)](message, sender, now)

    def tick(self, now: float) -> None:
        """Run whatever is due in any core."""
        self.swim.tick(now)

    def next_deadline(self) -> float | None:
        """The earliest deadline of all cores."""
        return self.swim.next_deadline()

    def drain(self) -> Output:
        """One batch from all cores, persist before send before events."""
        return self.swim.drain()

    def stream_failed(self, peer: Address, now: float) -> None:
        """A stream to `peer` failed; tell the core that opened it."""
        self.swim.stream_failed(peer, now)

    # -- commands ----------------------------------------------------------------

    def join(self, addrs: list[Address], now: float, retry: bool = False) -> None:
        """Join the cluster through `addrs` (or rejoin after a leave); with
        `retry`, keep trying them while no member is known."""
        self.swim.join(addrs, now, retry)

    def leave(self, now: float) -> None:
        """Leave the cluster gracefully."""
        self.swim.leave(now)

    def set_tags(self, tags: Tags, now: float) -> None:
        """Replace this node's tags."""
        self.swim.set_tags(tags, now)

    def members(self) -> list[MemberView]:
        """This node's view of the cluster."""
        return self.swim.members()

    def counters(self) -> dict[str, int]:
        """Every core's counters, prefixed by core."""
        return {f"swim_{k}": v for k, v in self.swim.counters.as_dict().items()}
