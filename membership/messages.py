"""SWIM wire messages, named as in the SWIM paper and memberlist.

All are frozen and slotted; the codec builds them only from validated fields,
so a core that receives one may trust its types (not its truth).
"""

from __future__ import annotations

import msgspec

from shoal.kernel.contract import Address
from shoal.membership.member import Member, NodeIdentity
from shoal.membership.vivaldi import Coordinate


class Ping(msgspec.Struct, frozen=True):
    """A direct probe. `target` is the name the sender believes lives here,
    so a ping that reaches a reused address is recognised and dropped.
    `source` is the sender's name (as in memberlist's ping): a receiver that
    does not know it has an incomplete view and syncs with the sender."""

    seq: int
    target: str
    source: str


class PingReq(msgspec.Struct, frozen=True):
    """Ask the receiver to probe `target` at `target_addr` for us (SWIM §3.1).
    With `nack`, the receiver answers `Nack` if the target stays silent
    (Lifeguard §IV-A), which tells us that our own link works."""

    seq: int
    target: str
    target_addr: Address
    nack: bool


class Ack(msgspec.Struct, frozen=True):
    """The answer to a `Ping`, or a relayed answer to a `PingReq`; a direct
    answer carries the answerer's wall clock in ms (0 when relayed), from
    which the prober measures its clock offset (clockskew.py), and, to a
    prober that understands it (its `seq` says so, probing.py), the
    answerer's network coordinate (vivaldi.py), from which the prober, which
    timed the round trip, updates its own. A relayed ack never carries one:
    its round trip went through the relay."""

    seq: int
    wall_ms: int = 0
    coord: Coordinate | None = None


class Nack(msgspec.Struct, frozen=True):
    """A relay heard nothing from the target of a `PingReq`."""

    seq: int


class Alive(msgspec.Struct, frozen=True):
    """`node` is alive at `incarnation`; also carries its address and tags."""

    incarnation: int
    node: NodeIdentity


class Suspect(msgspec.Struct, frozen=True):
    """`source` suspects `node` at `incarnation`. `source` is kept so that
    confirmations can be counted per independent suspector (Lifeguard §IV-B)
    and so that an operator can see who raised a suspicion."""

    incarnation: int
    node: str
    source: str


class Dead(msgspec.Struct, frozen=True):
    """`source` declares `node` dead at `incarnation`."""

    incarnation: int
    node: str
    source: str


class Leave(msgspec.Struct, frozen=True):
    """`node` leaves the cluster on purpose at `incarnation`.

    A separate message rather than memberlist's dead-from-self, so that a
    graceful leave can never be mistaken for a failure.
    """

    incarnation: int
    node: str


# One member's state inside a `PushPull`: a table row as it is (rows are
# immutable, so a push-pull shares them instead of copying the table).
MemberRecord = Member


class PushPull(msgspec.Struct, frozen=True):
    """A full-state exchange over a stream (SWIM's anti-entropy, memberlist
    push/pull). `join` marks the first exchange of a joining node; `reply`
    marks the answer, which is not answered again. `source` is the sender's
    node name, so that claims merged from its state name who made them."""

    source: str
    join: bool
    reply: bool
    members: tuple[MemberRecord, ...]

    @property
    def expects_reply(self) -> bool:
        """A request waits for the peer's answer on the same stream."""
        return not self.reply


SwimMessage = Ping | PingReq | Ack | Nack | Alive | Suspect | Dead | Leave | PushPull
