"""Failure detection rounds (SWIM §3.1, §4.3; Lifeguard §IV-A).

`ProbeScheduler` picks probe targets by round-robin over a shuffled list of
members (SWIM §4.3): every live member is probed once per pass, so the worst
case detection time is bounded, unlike uniform random choice. A member that
joins mid-pass is inserted at a random place in the rest of the pass, as
memberlist does.

`ProbeRound` is one probe: a direct `Ping`, then after `probe_timeout` the
indirect `PingReq`s through k relays, then at the end of the probe interval
the verdict. Ours: when the target's host answers the ping with "port
unreachable" (`refused`), the relays are asked at once, and the verdict
comes as soon as every relay has nacked. `RelayedProbe` is the other side:
a ping we send on behalf of a `PingReq`, answered with a forwarded `Ack`
or, on timeout or refusal, a `Nack`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from shoal.kernel.contract import Address


class ProbeScheduler:
    """Shuffled round-robin over the names of members to probe."""

    __slots__ = ("_order", "_index", "_rng")

    def __init__(self, rng: random.Random) -> None:
        self._order: list[str] = []
        self._index = 0
        self._rng = rng

    def next_target(self, candidates: list[str], is_probeable: Callable[[str], bool]) -> str | None:
        """The next member to probe, or None if there is nobody.

        Args:
            candidates: names to shuffle when a pass ends (the live set).
            is_probeable: whether a name is still worth probing now.
        """
        for _ in range(2):
            while self._index < len(self._order):
                name = self._order[self._index]
                self._index += 1
                if is_probeable(name):
                    return name
            self._order = list(candidates)
            self._rng.shuffle(self._order)
            self._index = 0
        return None

    def prioritize(self, name: str) -> None:
        """Probe `name` next: the network said nothing listens at its address."""
        try:
            del self._order[self._order.index(name, self._index)]
        except ValueError:
            pass  # probed already in this pass, or new: probe it once more
        self._order.insert(self._index, name)

    def insert(self, name: str) -> None:
        """Probe a new member within the current pass, at a random place."""
        # random() rather than randint(): a mass join inserts N names on
        # every node, and randint costs ten times as much.
        span = len(self._order) - self._index + 1
        position = self._index + int(self._rng.random() * span)
        self._order.insert(position, name)


class ProbeRound:
    """One outstanding probe of `target` by this node."""

    __slots__ = (
        "seq",
        "target",
        "target_addr",
        "incarnation",
        "timeout_at",
        "end_at",
        "acked",
        "expected_nacks",
        "nacks",
        "indirect_sent",
        "refused",
        "sent_at",
    )

    def __init__(
        self,
        seq: int,
        target: str,
        target_addr: Address,
        incarnation: int,
        timeout_at: float,
        end_at: float,
        sent_at: float = 0.0,
    ) -> None:
        self.seq = seq
        self.sent_at = sent_at
        self.target = target
        self.target_addr = target_addr
        self.incarnation = incarnation
        self.timeout_at = timeout_at
        self.end_at = end_at
        self.acked = False
        self.expected_nacks = 0
        self.nacks = 0
        self.indirect_sent = False
        self.refused = False  # the target's host said nothing listens there

    def health_delta(self) -> int:
        """Lifeguard's LHM change for a round that ended without an ack.

        Missing nacks mean the relays could not hear us either, which points
        at our own trouble; with no relay to ask, any failure counts once.
        """
        if self.expected_nacks > 0:
            return max(0, self.expected_nacks - self.nacks)
        return 1


class RelayedProbe:
    """A ping we sent on behalf of someone's `PingReq`."""

    __slots__ = ("requester", "requester_seq", "target_addr", "deadline_at", "nack")

    def __init__(
        self,
        requester: Address,
        requester_seq: int,
        target_addr: Address,
        deadline_at: float,
        nack: bool,
    ) -> None:
        self.requester = requester
        self.target_addr = target_addr
        self.requester_seq = requester_seq
        self.deadline_at = deadline_at
        self.nack = nack
