"""Members: who a node is (`NodeIdentity`) and what a view knows of it (`Member`).

A `NodeIdentity` is frozen and shared: the simulator passes the same object to
every node's table, which keeps 10,000 views of 10,000 members affordable.
A `Member` is one row of a view: immutable and shared where it can be (the
same object in many views, and in the push-pulls that carry them).
"""

from __future__ import annotations

import enum

import msgspec

from shoal.kernel.contract import Address
from shoal.kernel.contract import Tags as Tags  # re-exported: importers use member.Tags
from shoal.kernel.versions import THIS_BUILD, Versions


def make_tags(tags: dict[str, str] | Tags | None) -> Tags:
    """Return tags in their canonical sorted-tuple form."""
    if not tags:
        return ()
    items = tags.items() if isinstance(tags, dict) else tags
    return tuple(sorted((str(k), str(v)) for k, v in items))


class MemberState(enum.IntEnum):
    """The SWIM states of a member, in the order a member moves through them."""

    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3

    @property
    def label(self) -> str:
        """The lower-case name shown to users (`alive`, `failed` is `dead`)."""
        return self.name.lower()


class NodeIdentity(msgspec.Struct, frozen=True):
    """Who a node is: a unique name, a persistent 16-byte id, where it listens.

    The id survives restarts (it lives in the data directory), so a node that
    comes back with a new address is recognised as itself, and another machine
    that takes the same name is recognised as someone else. `versions` is
    what it understands (kernel/versions.py): announced with it, so a peer
    it cannot talk with is refused before it is merged.
    """

    name: str
    node_id: bytes
    addr: Address
    tags: Tags = ()
    versions: Versions = THIS_BUILD

    @property
    def id_hex(self) -> str:
        """The node id as 32 hex digits, the form users see."""
        return self.node_id.hex()


class MemberView(msgspec.Struct, frozen=True):
    """A frozen snapshot of one member, as events and the API report it."""

    name: str
    node_id: bytes
    addr: Address
    tags: Tags
    incarnation: int
    state: MemberState
    versions: Versions = THIS_BUILD

    def to_json(self) -> dict[str, object]:
        """The member as the JSON object of `shoal members --json`."""
        return {
            "name": self.name,
            "node_id": self.node_id.hex(),
            "address": f"{self.addr[0]}:{self.addr[1]}",
            "status": self.state.label,
            "incarnation": self.incarnation,
            "tags": dict(self.tags),
            "versions": self.versions.to_json(),
        }


class Member(msgspec.Struct, frozen=True, gc=False):
    """One row of a membership view: immutable, replaced by `MemberTable` on
    every change, and the very record a `PushPull` carries.

    Immutable rows can be shared: the simulator's formed start gives all
    10,000 views the same 10,000 row objects, and a push-pull sends the
    table's rows as they are instead of copying each into a record. `gc=False`
    (a row holds an identity, ints and an enum member, so it can be in no
    cycle) keeps 10^8 rows out of the cycle collector's passes. Measured in
    the simulator at 1,500 formed nodes (bench/sim_scale.py): a slotted
    mutable row took 64 B plus its dict slot, 99 B per view entry; shared
    rows leave the dict slot, about 20 B.
    """

    ident: NodeIdentity
    incarnation: int
    state: MemberState

    @property
    def name(self) -> str:
        """The member's node name."""
        return self.ident.name

    def view(self) -> MemberView:
        """A frozen snapshot of this row."""
        i = self.ident
        return MemberView(i.name, i.node_id, i.addr, i.tags, self.incarnation, self.state,
                          i.versions)  # fmt: skip


class LocalState:
    """This node's own standing, shared by the roles of `SwimNode`: who it is
    (the identity changes with its tags), its incarnation, and whether it is
    leaving. The table holds the same identity and incarnation for its own
    row; this is what the roles read on their paths."""

    __slots__ = ("ident", "incarnation", "leaving", "wall_offset_ms")

    def __init__(self, ident: NodeIdentity, incarnation: int, wall_offset_ms: int = 0) -> None:
        self.ident = ident
        self.incarnation = incarnation
        self.leaving = False
        self.wall_offset_ms = wall_offset_ms  # wall clock minus monotonic `now`, in ms
