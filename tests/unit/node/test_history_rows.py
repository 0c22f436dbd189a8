"""History rows from core events: every field in schema order, the subject,
who raised a suspicion, nothing for events the log does not keep, and the
same event names as `shoal monitor` and handlers."""

from __future__ import annotations

from shoal.election.events import ControllerElected, ControllerLost, election_fields
from shoal.membership.events import (
    MemberDied,
    MemberJoined,
    MemberLeft,
    MemberReaped,
    MemberRefuted,
    MemberSuspected,
    MemberUpdated,
    NameConflicted,
    event_fields,
)
from shoal.membership.member import MemberState, MemberView
from shoal.node.history import Observer, history_row, member_row
from shoal.storage.history import EVENTS, FIELD_NAMES

OBS = Observer("prod", "n1", "aa" * 16)
VIEW = MemberView("n2", b"\x02" * 16, ("10.0.0.2", 7946), (("rack", "r1"),), 7, MemberState.DEAD)


def test_a_row_has_every_field_and_names_who_raised_a_suspicion():
    row = history_row(OBS, 123, MemberSuspected(VIEW, "n3"))
    assert list(row) == list(FIELD_NAMES)
    assert row["event"] == "member-suspected" and row["source"] == "n3"
    assert (row["node"], row["incarnation"], row["address"]) == ("n2", 7, "10.0.0.2:7946")
    assert (row["observer"], row["cluster"], row["v"]) == ("n1", "prod", 2)
    assert row["tags"] is None  # tags only on join and update
    elected = history_row(OBS, 5, ControllerElected(9))
    assert (elected["event"], elected["node"], elected["epoch"]) == ("controller-elected", "n1", 9)
    lost = history_row(OBS, 6, ControllerLost(9, "expired"))
    assert (lost["event"], lost["source"]) == ("controller-lost", "expired")
    assert history_row(OBS, 7, NameConflicted("x", b"", b"", ("1.1.1.1", 1))) is None


def test_a_dead_row_matches_the_member_row_and_tags_ride_on_joins_only():
    """A core event's row is the member row of its kind; tags appear on a join."""
    failed = member_row(OBS, 9, "member-failed", VIEW, "n3")
    assert history_row(OBS, 9, MemberDied(VIEW, "n3")) == failed
    joined = member_row(OBS, 10, "member-joined", VIEW)
    assert joined["tags"] == {"rack": "r1"} and joined["source"] is None


def test_history_names_events_as_the_monitor_and_handlers_do():
    """One vocabulary (issue 23): a history row's `event` is the `type` that
    `shoal monitor`, watches and handlers give the same core event, and the
    controller rows are the election's event names."""
    for kind in (MemberJoined, MemberRefuted, MemberSuspected, MemberDied, MemberLeft,
                 MemberUpdated, MemberReaped):  # fmt: skip
        event = (
            kind(VIEW, "n3") if kind in (MemberSuspected, MemberDied, MemberRefuted) else kind(VIEW)
        )
        row = history_row(OBS, 1, event)
        assert row is not None and row["event"] == event_fields(event)["type"]
        assert row["event"] in EVENTS
    for event in (ControllerElected(3), ControllerLost(3, "expired")):
        row = history_row(OBS, 1, event)
        assert row is not None and row["event"] == election_fields(event)["type"]
