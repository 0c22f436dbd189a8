"""What a sans-IO core hands back to its driver: one `Output` per `drain()`.

Every core (membership, election, anti-entropy) returns the same three lists so
that the agent and the simulator handle them the same way. The shape is etcd
raft's `Ready`; durability rides in the data as in raft's asynchronous
storage writes (`doc.go`): a `Persist` names the sends it releases.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

Address = tuple[str, int]
"""A peer address: (IPv4 literal or simulated host name, port)."""

Tags = tuple[tuple[str, str], ...]
"""A member's tags, sorted by key (role, rack, version...)."""


class Channel(enum.Enum):
    """How a `Send` travels: one datagram, or one frame on a reliable stream."""

    PACKET = "packet"
    STREAM = "stream"


class Send(msgspec.Struct, frozen=True):
    """Messages for one peer.

    On `Channel.PACKET` all `messages` go out in one datagram (the core packed
    them to the MTU); on `Channel.STREAM` they go out as one frame on a stream
    to `to`, and whatever the peer answers comes back through `receive()`.
    """

    to: Address
    messages: tuple[Any, ...]
    channel: Channel = Channel.PACKET


class Persist(msgspec.Struct, frozen=True):
    """One write to make durable, and the sends that may leave only after it.

    `write` is what to store (`PersistIncarnation`, the election's
    `PersistElection`), or None for a barrier: its `releases` wait until
    every write handed over before it is durable. A driver releases the
    sends of a `Persist` once that write, and every earlier one, is durable;
    never before. When the write fails, its releases are dropped (and
    counted): a promise that could not be kept is not made.
    """

    write: Any = None
    releases: tuple[Send, ...] = ()


class PersistIncarnation(msgspec.Struct, frozen=True):
    """The node's own incarnation must be durable before anyone hears it.

    A restarted node starts above the last value persisted, so it can never
    reuse an incarnation that others already hold (SWIM §4.2).
    """

    incarnation: int


class Output(msgspec.Struct, frozen=True):
    """One batch of work for the driver, to be handled in this order.

    1. `persist`: hand every `Persist` item's write to the disk, in order;
       each item's `releases` leave once that write (and all earlier ones)
       is durable.
    2. `send`: encode and transmit every `Send`, at once: these depend on
       no write that is not yet durable.
    3. `events`: publish (log line, history row, API watchers).

    The contract is in the data: a message that promises something durable
    (an election grant, a candidate's epoch) is never in `send`; the core
    puts it in the `releases` of the `Persist` it depends on, or of a
    barrier after it. So the agent (which syncs the election's writes off
    the event loop, and meanwhile lets SWIM's messages go) and the simulator
    (which models the fsync's latency and a crash before it completes)
    release exactly the same messages at the same point.
    """

    persist: tuple[Persist, ...] = ()
    send: tuple[Send, ...] = ()
    events: tuple[Any, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.persist or self.send or self.events)

    def all_sends(self) -> tuple[Send, ...]:
        """Every send of the batch, whenever it may leave: the persist
        items' releases, then `send` (for tests and traces)."""
        return tuple(s for p in self.persist for s in p.releases) + self.send


EMPTY = Output()
