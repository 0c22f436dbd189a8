"""Membership events, in the past tense. The core emits them; the driver logs
them, writes them to the history log and streams them to API watchers."""

from __future__ import annotations

import msgspec

from shoal.kernel.contract import Address
from shoal.kernel.versions import Versions
from shoal.membership.member import MemberView


class MemberJoined(msgspec.Struct, frozen=True):
    """A member became alive: new, or back after being dead or gone."""

    member: MemberView


class MemberUpdated(msgspec.Struct, frozen=True):
    """An alive member changed its address or tags."""

    member: MemberView


class MemberSuspected(msgspec.Struct, frozen=True):
    """`source` suspects `member` (the node that raised the suspicion)."""

    member: MemberView
    source: str


class MemberRefuted(msgspec.Struct, frozen=True):
    """A suspicion about `member` was refuted. When `member` is this node,
    `source` names who suspected it."""

    member: MemberView
    source: str = ""


class MemberDied(msgspec.Struct, frozen=True):
    """`member` was declared dead; `source` is the node that declared it."""

    member: MemberView
    source: str


class MemberLeft(msgspec.Struct, frozen=True):
    """`member` left the cluster on purpose."""

    member: MemberView


class MemberReaped(msgspec.Struct, frozen=True):
    """A dead or departed member was forgotten after its reap timeout."""

    member: MemberView


class NameConflicted(msgspec.Struct, frozen=True):
    """Another node claims our name, or a name held by a live member.

    Reported once per (name, claimed id); the claim is refused.
    """

    name: str
    known_id: bytes
    claimed_id: bytes
    claimed_addr: Address


class MemberRefused(msgspec.Struct, frozen=True):
    """A member announced versions this node cannot talk with (no overlap
    in `protocols`): it is not merged, never counts toward a quorum and
    never holds the lease (kernel/versions.py). Reported once per member
    and versions."""

    name: str
    addr: Address
    theirs: Versions
    mine: Versions
    protocols: tuple[str, ...]


class JoinCompleted(msgspec.Struct, frozen=True):
    """A join attempt through `addr` finished; `ok` if the peer answered."""

    addr: Address
    ok: bool


SwimEvent = (
    MemberJoined
    | MemberUpdated
    | MemberSuspected
    | MemberRefuted
    | MemberDied
    | MemberLeft
    | MemberReaped
    | NameConflicted
    | MemberRefused
    | JoinCompleted
)


_TYPE_NAMES: dict[type, str] = {
    MemberJoined: "member-joined",
    MemberUpdated: "member-updated",
    MemberSuspected: "member-suspected",
    MemberRefuted: "member-refuted",
    MemberDied: "member-failed",
    MemberLeft: "member-left",
    MemberReaped: "member-reaped",
    NameConflicted: "name-conflict",
    MemberRefused: "member-refused",
    JoinCompleted: "join-completed",
}


def event_fields(event: object) -> dict[str, object]:
    """An event as a flat JSON object: `type`, then the member's fields.

    `member-failed` is Serf's word for a member declared dead; `source` names
    the node that raised a suspicion or declared a death.
    """
    out: dict[str, object] = {"type": _TYPE_NAMES[type(event)]}
    member = getattr(event, "member", None)
    if isinstance(member, MemberView):
        out.update(member.to_json())
    source = getattr(event, "source", None)
    if source:
        out["source"] = source
    if isinstance(event, NameConflicted):
        out.update(
            name=event.name,
            known_id=event.known_id.hex(),
            claimed_id=event.claimed_id.hex(),
            address=f"{event.claimed_addr[0]}:{event.claimed_addr[1]}",
        )
    elif isinstance(event, MemberRefused):
        out.update(
            name=event.name,
            address=f"{event.addr[0]}:{event.addr[1]}",
            theirs=event.theirs.describe(),
            mine=event.mine.describe(),
            protocols=list(event.protocols),
        )
    elif isinstance(event, JoinCompleted):
        out.update(address=f"{event.addr[0]}:{event.addr[1]}", ok=event.ok)
    return out
