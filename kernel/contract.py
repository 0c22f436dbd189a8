"""What a sans-IO core hands back to its driver: one `Output` per `drain()`.

Every core (membership, election, anti-entropy) returns the same three lists so
that the agent and the simulator handle them the same way. The shape is etcd
raft's `Ready`.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

Address = tuple[str, int]
"""A peer address: (IPv4 literal or simulated host name, port)."""


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


class PersistIncarnation(msgspec.Struct, frozen=True):
    """The node's own incarnation must be durable before anyone hears it.

    A restarted node starts above the last value persisted, so it can never
    reuse an incarnation that others already hold (SWIM §4.2).
    """

    incarnation: int


class Output(msgspec.Struct, frozen=True):
    """One batch of work for the driver, to be handled in this order.

    1. `persist`: write every item and wait until it is durable (synced).
    2. `send`: encode and transmit every `Send`.
    3. `events`: publish (log line, history row, API watchers).

    The order is the contract: a core may emit a message that promises
    something (an incarnation, an election epoch) only in the same batch as
    the `persist` item that makes the promise survive a crash, and the driver
    makes it durable before the message leaves. Nothing here is ever sent
    before the state it depends on is on disk.

    A driver may let a message go first when it depends on none of the
    batch's persist items: the agent holds only the election's messages
    while the election's state syncs off the event loop, and SWIM's go out
    at once (a slow disk must not delay probe answers; see daemon/agent.py).
    """

    persist: tuple[Any, ...] = ()
    send: tuple[Send, ...] = ()
    events: tuple[Any, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.persist or self.send or self.events)


EMPTY = Output()
