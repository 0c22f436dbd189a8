"""Theory of operation of a watch that resumes (no I/O here; `Client` and
`AsyncClient` drive it).

A watch reads `GET /v1/watch`: a `hello` line (the agent's `run` and its
current `index`), then one line per change, each with an `index` that only
grows within a run, and a `ping` every 5 s. The cursor remembers the last
index it delivered and the run it came from:

- Dropped connection (EOF, reset, no ping for a while): reconnect with
  `index=<last>&run=<run>`; the agent sends every change after it. An event
  at or below the last index is a copy and is dropped, so nothing is lost
  and nothing comes twice.
- 410 Gone (the agent restarted, so indexes began again, or it no longer
  keeps changes that old): list what is there now (members, controller, the
  keys under the prefix), and yield the difference from what this watch had
  seen as events with `resync=True`: a member's current status, the current
  controller, puts for new or changed keys, deletes for keys now gone. The
  watch then continues from the listings' position. User events (topic
  `events`) cannot be listed: those delivered while the watch was away are
  not seen by it (their handlers still run, docs/events.md).

Between attempts the driver waits `backoff()`: 0.1 s, doubling to 2 s, back
to 0.1 s once a `hello` arrives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

import msgspec

from shoal.client import calls
from shoal.client.errors import IncompatibleAgent
from shoal.client.types import (
    ALL_TOPICS,
    TOPICS,
    Controller,
    ControllerEvent,
    Event,
    KeyListing,
    KvEvent,
    Member,
    MemberEvent,
    MemberListing,
    UserEvent,
)

BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 2.0
# The agent pings every 5 s: three missed pings and the connection is dead.
SILENCE_S = 15.0
_RESYNC_TRIES = 5
# What a driver's event generator yields once, when its first stream is open
# (so that `watch()` returns a watch that misses nothing made after it).
OPEN = object()
_STATUS_EVENT = {"alive": "member-alive", "suspect": "member-suspected", "dead": "member-failed",
                 "left": "member-left"}  # fmt: skip
_EVENT_TYPES: dict[str, type[Event]] = {
    "members": MemberEvent, "controller": ControllerEvent, "kv": KvEvent, "events": UserEvent,
}  # fmt: skip


class Backoff:
    """Seconds between a watch's attempts to connect: 0.1 doubling to 2,
    back to 0.1 once a stream opens (its hello)."""

    def __init__(self) -> None:
        self._delay_s = BACKOFF_MIN_S

    def next_s(self) -> float:
        """Seconds to wait before the next attempt."""
        delay_s = self._delay_s
        self._delay_s = min(delay_s * 2, BACKOFF_MAX_S)
        return delay_s

    def reset(self) -> None:
        """A stream opened: the next failure is retried soon again."""
        self._delay_s = BACKOFF_MIN_S


class WatchCursor:
    """Where a watch is in the agent's changes, and what it has seen.

    Args:
        topics: any of "members", "controller", "kv", "events".
        prefix: kv keys only under this prefix.
        index: resume after this index (None: from now on).
        run: the agent run `index` belongs to (None: whichever is running).
    """

    def __init__(self, topics: Iterable[str] = TOPICS, prefix: str = "",
                 index: int | None = None, run: str | None = None) -> None:  # fmt: skip
        self.topics = tuple(topics)
        if not self.topics or any(t not in ALL_TOPICS for t in self.topics):
            raise ValueError(f"topics are some of {', '.join(ALL_TOPICS)}: got {self.topics!r}")
        if index is not None and (isinstance(index, bool) or index < 0):
            raise ValueError(f"index must be a non-negative int: got {index!r}")
        self.prefix = prefix
        self.index = index
        self.run = run
        self.members: dict[str, MemberEvent] = {}
        self.keys: dict[str, tuple[int, int]] = {}  # key -> (hlc, epoch)
        self.controller: tuple[str | None, int | None] | None = None
        self._retry = Backoff()

    def path(self) -> str:
        """The request path that resumes from here."""
        query: dict[str, Any] = {"topics": ",".join(self.topics)}
        if self.prefix:
            query["prefix"] = self.prefix
        if self.index is not None:
            query["index"] = self.index
        if self.run is not None:
            query["run"] = self.run
        return "/v1/watch?" + urlencode(query)

    def backoff(self) -> float:
        """Seconds to wait before the next attempt (doubling, up to 2 s)."""
        return self._retry.next_s()

    def opened(self, line: bytes) -> None:
        """The stream's first line, `{"type": "hello", "run": R, "index": I}`.

        Raises:
            IncompatibleAgent: it is not a hello.
        """
        try:
            hello = msgspec.json.decode(line)
            run, index = hello["run"], hello["index"]
            if hello.get("type") != "hello" or not isinstance(run, str) \
                    or not isinstance(index, int):  # fmt: skip
                raise ValueError(line)
        except (msgspec.MsgspecError, ValueError, KeyError, TypeError, AttributeError):
            raise IncompatibleAgent(f"a watch began without its hello line: {line[:200]!r}") \
                from None  # fmt: skip
        self.run = run
        if self.index is None:
            self.index = index
        self._retry.reset()

    def event(self, line: bytes) -> Event | None:
        """The event on `line`, or None for a ping, a copy, or a topic unknown
        here (from a newer agent).

        Raises:
            IncompatibleAgent: the line does not parse.
        """
        if not line.strip():
            return None
        try:
            fields = msgspec.json.decode(line)
            cls = _EVENT_TYPES.get(fields.get("topic"))
            if cls is None:
                return None
            event: Event = msgspec.convert(fields, cls)
        except (msgspec.MsgspecError, AttributeError) as exc:
            raise IncompatibleAgent(f"unreadable watch line {line[:200]!r}: {exc}") from None
        if self.index is not None and event.index <= self.index:
            return None
        self.index = event.index
        self._remember(event)
        return event

    def _remember(self, event: Event) -> None:
        if isinstance(event, MemberEvent):
            if event.type == "member-reaped":
                self.members.pop(event.name, None)
            elif event.name and event.node_id:
                self.members[event.name] = event
        elif isinstance(event, ControllerEvent):
            if event.type in ("controller-changed", "controller-elected", "controller-lost"):
                self.controller = (event.controller, event.epoch)
        elif isinstance(event, UserEvent):
            return  # nothing to compare at a resync
        elif event.type == "delete":
            self.keys.pop(event.key, None)
        else:
            self.keys[event.key] = (event.hlc, event.epoch)

    def resync(self) -> calls.Steps[list[Event]]:
        """List what is there now; the difference from what was seen, as
        `resync=True` events, remembered as seen. Moves the cursor to the
        listings' run and (oldest) index."""
        for _ in range(_RESYNC_TRIES):
            members: MemberListing | None = None
            control: Controller | None = None
            keys: KeyListing | None = None
            if "members" in self.topics:
                members = yield calls.members_listing()
            if "controller" in self.topics:
                control = yield calls.controller()
            if "kv" in self.topics:
                keys = yield from calls.kv_listing(self.prefix)
            if members is None and control is None and keys is None:
                control = yield calls.controller()  # only user events: just the position
            listed = [x for x in (members, control, keys) if x is not None]
            runs = {x.run for x in listed}
            if len(runs) == 1:  # else the agent restarted between the listings
                break
        else:
            raise IncompatibleAgent("the agent's run changed at every listing")
        index = min(x.index for x in listed)
        events: list[Event] = []
        if members is not None:
            events += self._members_diff(members, index)
        if control is not None and "controller" in self.topics:
            events += self._controller_diff(control, index)
        if keys is not None:
            events += self._keys_diff(keys, index)
        for event in events:
            self._remember(event)
        self.run, self.index = runs.pop(), index
        return events

    def _members_diff(self, listing: MemberListing, index: int) -> list[Event]:
        events: list[Event] = []
        now = {m.name: m for m in listing.members}
        for name, member in sorted(now.items()):
            seen = self.members.get(name)
            # Events do not carry `health` (their tags do): compare without it.
            if seen is None or _sans_health(seen.member) != _sans_health(member):
                kind = _STATUS_EVENT.get(member.status, "member-updated")
                fields = msgspec.structs.asdict(member)
                del fields["voter"], fields["former_node_id"]  # the listing's, not an event's
                events.append(MemberEvent(index=index, type=kind, resync=True, **fields))
        for name in sorted(self.members.keys() - now.keys()):
            gone = self.members[name]
            events.append(msgspec.structs.replace(gone, index=index, type="member-reaped",
                                                  resync=True, at_ms=0))  # fmt: skip
        return events

    def _controller_diff(self, info: Controller, index: int) -> list[Event]:
        if self.controller == (info.controller, info.epoch):
            return []
        return [ControllerEvent(index=index, type="controller-changed", controller=info.controller,
                                epoch=info.epoch, voters=info.voters, resync=True)]  # fmt: skip

    def _keys_diff(self, listing: KeyListing, index: int) -> list[Event]:
        events: list[Event] = []
        now = {item.key: item for item in listing.items}
        for key, item in now.items():
            if self.keys.get(key) != (item.hlc, item.epoch):
                events.append(KvEvent(index=index, type="put", key=key, value=item.value,
                                      hlc=item.hlc, epoch=item.epoch, writer=item.writer,
                                      ephemeral=item.ephemeral, owner=item.owner,
                                      reason="resync", resync=True))  # fmt: skip
        for key in sorted(self.keys.keys() - now.keys()):
            events.append(KvEvent(index=index, type="delete", key=key, reason="resync",
                                  resync=True))  # fmt: skip
        return events


def _sans_health(member: Member) -> Member:
    return msgspec.structs.replace(member, health=None, voter=None, former_node_id=None)
