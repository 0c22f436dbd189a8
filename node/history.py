"""History rows from core events: what the membership history log records.

Pure: a core event (and the agent's own start) becomes one row of the log
that `storage.history.HistoryWriter` appends, in the schema it declares
(`SCHEMA_VERSION`, `FIELD_NAMES`, `EVENTS`). It sits above the cores because
it reads their events, and below both drivers, so the agent and the
simulator's churn runs write the same rows (docs/history.md).
"""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.election.events import ControllerElected, ControllerLost, VoterReplaced
from shoal.membership.events import (
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberReaped,
    MemberRefuted,
    MemberSuspected,
    MemberUpdated,
)
from shoal.membership.member import MemberView
from shoal.storage.history import FIELD_NAMES, SCHEMA_VERSION

# The names `shoal monitor`, handlers and watches use (membership/events.py;
# a test holds them equal), so a row reads as the event it records.
_MEMBER_EVENTS: dict[type, str] = {
    MemberJoined: "member-joined",
    MemberRefuted: "member-refuted",
    MemberSuspected: "member-suspected",
    MemberDied: "member-failed",
    MemberLeft: "member-left",
    MemberUpdated: "member-updated",
    MemberReaped: "member-reaped",
}
JOINED = "member-joined"


class Observer(msgspec.Struct, frozen=True):
    """Who writes the rows: the agent's identity."""

    cluster: str
    name: str
    node_id: str  # hex


def _row(observer: Observer, ts_ms: int, event: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(FIELD_NAMES)
    row.update(v=SCHEMA_VERSION, ts_ms=ts_ms, cluster=observer.cluster,
               observer=observer.name, observer_id=observer.node_id, event=event)  # fmt: skip
    row.update(fields)
    return row


def member_row(observer: Observer, ts_ms: int, event: str, member: MemberView,
               source: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A row about `member`."""
    tags = dict(member.tags) if event in ("member-joined", "member-updated") else None
    return _row(observer, ts_ms, event, node=member.name, node_id=member.node_id.hex(),
                address=f"{member.addr[0]}:{member.addr[1]}",
                incarnation=member.incarnation, source=source or None, tags=tags)  # fmt: skip


def history_row(observer: Observer, ts_ms: int, event: object) -> dict[str, Any] | None:
    """The row for a core event, or None for events the history does not keep
    (join attempts, name conflicts, voter changes, sync sessions). A voter
    back with a new data directory is kept: `node`, its new `node_id`, and
    in `source` the id the voter configuration named (the old directory's)."""
    kind = _MEMBER_EVENTS.get(type(event))
    if kind is not None:
        return member_row(observer, ts_ms, kind, event.member,  # type: ignore[attr-defined]
                          getattr(event, "source", None))  # fmt: skip
    if isinstance(event, ControllerElected | ControllerLost):
        kind = "controller-elected" if isinstance(event, ControllerElected) else "controller-lost"
        return _row(observer, ts_ms, kind, node=observer.name, node_id=observer.node_id,
                    epoch=event.epoch, source=getattr(event, "reason", None))  # fmt: skip
    if isinstance(event, VoterReplaced):  # seen by the controller: node, new id, old id
        return _row(observer, ts_ms, "voter-replaced", node=event.name,
                    node_id=event.new_id.hex(), source=event.old_id.hex())  # fmt: skip
    return None
