"""The resuming watch's bookkeeping (client/watch.py), without an agent:
copies dropped by index, pings skipped, and the difference yielded after a
410 as resync events."""

import json

import pytest

from shoal.client.errors import IncompatibleAgent
from shoal.client.types import (
    Controller,
    ControllerEvent,
    KeyListing,
    KeyValue,
    KvEvent,
    Member,
    MemberEvent,
    MemberListing,
)
from shoal.client.watch import BACKOFF_MAX_S, BACKOFF_MIN_S, WatchCursor


def line(**fields) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def member_line(index, name, status="alive", kind="member-joined", incarnation=1):
    return line(
        index=index,
        topic="members",
        type=kind,
        name=name,
        node_id="ab",
        address="127.0.0.1:7946",
        status=status,
        incarnation=incarnation,
        tags={},
    )


def put_line(index, key, value=b"v", hlc=1):
    import base64

    return line(
        index=index,
        topic="kv",
        type="put",
        key=key,
        hlc=hlc,
        epoch=0,
        value_base64=base64.b64encode(value).decode(),
        reason="write",
    )


def drive(steps, answer):
    try:
        call = next(steps)
        while True:
            call = steps.send(answer(call))
    except StopIteration as done:
        return done.value


def test_the_path_resumes_from_the_last_index_and_run():
    cursor = WatchCursor(("members", "kv"), "p/", None, None)
    assert cursor.path() == "/v1/watch?topics=members%2Ckv&prefix=p%2F"
    cursor.opened(line(type="hello", run="r1", index=40))
    assert cursor.path().endswith("&index=40&run=r1")


def test_a_watch_from_now_starts_at_the_hello_index_and_one_given_keeps_its_own():
    fresh = WatchCursor()
    fresh.opened(line(type="hello", run="r1", index=40))
    assert (fresh.index, fresh.run) == (40, "r1")
    resumed = WatchCursor(index=12)
    resumed.opened(line(type="hello", run="r1", index=40))
    assert resumed.index == 12


def test_copies_below_the_last_index_are_dropped_and_pings_skipped():
    """Nothing repeated: after a reconnect the agent may resend what was seen."""
    cursor = WatchCursor(index=0)
    first = cursor.event(member_line(1, "a"))
    assert isinstance(first, MemberEvent) and (first.index, first.name) == (1, "a")
    assert cursor.event(member_line(1, "a")) is None
    assert cursor.event(line(type="ping", index=1)) is None
    assert cursor.event(b"\n") is None
    assert cursor.event(line(index=2, topic="future-topic", type="x")) is None
    event = cursor.event(put_line(3, "k", b"\x00"))
    assert isinstance(event, KvEvent) and event.value == b"\x00" and cursor.index == 3


def test_lines_that_do_not_parse_say_the_agent_is_incompatible():
    cursor = WatchCursor()
    with pytest.raises(IncompatibleAgent, match="hello"):
        cursor.opened(b'{"type": "ping", "index": 1}\n')
    with pytest.raises(IncompatibleAgent):
        cursor.event(b"not json\n")


def test_bad_topics_or_index_are_refused_before_connecting():
    with pytest.raises(ValueError):
        WatchCursor(("members", "nodes"))
    with pytest.raises(ValueError):
        WatchCursor(index=-1)


def test_backoff_doubles_to_two_seconds_and_resets_on_a_hello():
    cursor = WatchCursor()
    delays = [cursor.backoff() for _ in range(7)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    cursor.opened(line(type="hello", run="r", index=0))
    assert cursor.backoff() == BACKOFF_MIN_S and BACKOFF_MAX_S == 2.0


def _member(name, status="alive", incarnation=1):
    # Listings say `health`; events do not: no resync event for that alone.
    return Member(name=name, node_id="ab", address="127.0.0.1:7946", status=status,
                  incarnation=incarnation, tags={}, health="passing")  # fmt: skip


def test_a_resync_yields_only_what_changed_while_the_watch_was_away():
    """After a 410, members and keys are listed again; the difference comes
    as resync=True events and the watch continues from the listing."""
    cursor = WatchCursor(index=0, run="r1")
    for raw in (member_line(1, "a"), member_line(2, "b"), member_line(3, "c"),
                put_line(4, "k/same", hlc=10), put_line(5, "k/changed", hlc=11),
                put_line(6, "k/gone", hlc=12),
                line(index=7, topic="controller", type="controller-changed", controller="a",
                     epoch=1)):  # fmt: skip
        assert cursor.event(raw) is not None
    listings = {
        "/v1/members": MemberListing(members=[_member("a"), _member("b", "dead", 2),
                                              _member("d")], index=3, run="r2"),
        "/v1/controller": Controller(controller="b", epoch=2, index=3, run="r2"),
        "/v1/kv/": KeyListing(items=[KeyValue(key="k/same", hlc=10),
                                     KeyValue(key="k/changed", value=b"new", hlc=20),
                                     KeyValue(key="k/new", hlc=21)], index=2, run="r2"),
    }  # fmt: skip
    events = drive(cursor.resync(), lambda call: listings[call.path.partition("?")[0]])
    shown = [(type(e).__name__, e.type, getattr(e, "name", None) or getattr(e, "key", None)
              or getattr(e, "controller", None)) for e in events]  # fmt: skip
    assert shown == [
        ("MemberEvent", "member-failed", "b"), ("MemberEvent", "member-alive", "d"),
        ("MemberEvent", "member-reaped", "c"), ("ControllerEvent", "controller-changed", "b"),
        ("KvEvent", "put", "k/changed"), ("KvEvent", "put", "k/new"),
        ("KvEvent", "delete", "k/gone"),
    ]  # fmt: skip
    assert all(e.resync and e.index == 2 for e in events)
    assert events[4].value == b"new"
    assert (cursor.run, cursor.index) == ("r2", 2)  # the oldest listing's position
    again = drive(cursor.resync(), lambda call: listings[call.path.partition("?")[0]])
    assert again == []  # all seen now


def test_a_resync_lists_again_when_the_agent_restarts_between_listings():
    cursor = WatchCursor(("members", "controller"))
    runs = iter(["r1", "r2", "r2", "r2"])

    def answer(call):
        run = next(runs)
        if call.path.startswith("/v1/members"):
            return MemberListing(members=[], index=1, run=run)
        return Controller(controller=None, epoch=None, index=1, run=run)

    events = drive(cursor.resync(), answer)
    assert cursor.run == "r2"
    assert [type(e) for e in events] == [ControllerEvent]  # never seen one: says so
