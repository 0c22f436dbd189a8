"""The agent's numbered change log, and the `/v1/watch` streams fed from it.

Every change the agent publishes (a membership event, a controller event, a
key put or deleted here, by anti-entropy, or hidden because its owner
failed) gets the next `index`, one counter for all topics, starting at 1
in each run of the agent. The last `KEEP_CHANGES` changes are kept (and at
most `KEEP_VALUE_BYTES` of values), so that a watch whose connection dropped
resumes from the last index it saw with nothing lost and nothing repeated
(etcd's revision, Kubernetes' resourceVersion). A watch from an index that
is no longer kept, or from another run (the agent restarted: its indexes
start again), is refused with 410 and the client re-lists (client/).

A stream's queue is bounded: one that overflows is ended, and its client
resumes from its last index, so a slow reader costs the agent nothing
unbounded and loses nothing.

Each change is rendered to its JSON line once, when the first stream wants
it, and shared by every stream.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from collections.abc import Callable
from typing import Any

from shoal.storage import hlc
from shoal.storage.records import Record

PING_S = 5.0  # a quiet stream gets a ping line this often
KEEP_CHANGES = 65_536
KEEP_VALUE_BYTES = 32 * 1024 * 1024
TOPICS = ("members", "controller", "kv", "events")
_QUEUE = 4096


class Change:
    """One numbered change; `line` is its JSON, built on first use."""

    __slots__ = ("index", "topic", "key", "size", "_payload", "_render", "_line")

    def __init__(self, index: int, topic: str, key: bytes, size: int,
                 payload: Any, render: Callable[[Any], dict[str, Any]]) -> None:  # fmt: skip
        self.index = index
        self.topic = topic
        self.key = key  # for kv changes, what a prefix filter matches
        self.size = size
        self._payload = payload
        self._render = render
        self._line: bytes | None = None

    @property
    def line(self) -> bytes:
        """The change as one JSON line (with its index and topic)."""
        if self._line is None:
            obj = {"index": self.index, "topic": self.topic, **self._render(self._payload)}
            self._line = json.dumps(obj).encode() + b"\n"
            self._payload = None
        return self._line


class Ping:
    """Queued to every open stream each PING_S: the stream writes a ping
    line (one timer for all streams, not a timeout per stream and event)."""


PING = Ping()


class Subscription:
    """One `/v1/watch` stream: the topics and key prefix it follows, and a
    bounded queue of changes; None in the queue ends the stream."""

    def __init__(self, topics: frozenset[str], prefix: bytes) -> None:
        self.topics = topics
        self.prefix = prefix
        self.queue: asyncio.Queue[Change | Ping | None] = asyncio.Queue(_QUEUE)

    def wants(self, change: Change) -> bool:
        """Whether this stream follows `change`."""
        return change.topic in self.topics and (
            change.topic != "kv" or change.key.startswith(self.prefix)
        )

    def offer(self, change: Change | Ping) -> bool:
        """Queue `change`; on overflow end the stream, return False."""
        return offer_or_end(self.queue, change)


def offer_or_end(queue: asyncio.Queue[Any], item: Any) -> bool:
    """Put `item` in a stream's bounded queue; when it is full, empty it
    and queue the end (None): the stream's client resumes or reconnects.
    Returns whether `item` was queued."""
    try:
        queue.put_nowait(item)
        return True
    except asyncio.QueueFull:
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)
        return False


class ResumeError(Exception):
    """A watch cannot start where it asked: `status` 410 (gone) or 400."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ChangeLog:
    """The numbered changes of one agent run (module docstring)."""

    def __init__(self, run: str, keep: int = KEEP_CHANGES,
                 keep_bytes: int = KEEP_VALUE_BYTES) -> None:  # fmt: skip
        self.run = run
        self.index = 0
        self._keep = keep
        self._keep_bytes = keep_bytes
        self._bytes = 0
        self._changes: deque[Change] = deque()
        self._open: set[Subscription] = set()
        self._ping: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Open streams."""
        return len(self._open)

    @property
    def oldest(self) -> int:
        """The first index a watch may resume after (index - 1 of the
        oldest change kept); the current index when none is kept."""
        return self._changes[0].index - 1 if self._changes else self.index

    def append(self, topic: str, payload: Any, render: Callable[[Any], dict[str, Any]],
               key: bytes = b"", size: int = 0) -> None:  # fmt: skip
        """Number a change, keep it, and give it to every stream that wants it."""
        self.index += 1
        change = Change(self.index, topic, key, size, payload, render)
        changes = self._changes
        changes.append(change)
        self._bytes += size
        while len(changes) > self._keep or (self._bytes > self._keep_bytes and len(changes) > 1):
            self._bytes -= changes.popleft().size
        for sub in list(self._open):
            if sub.wants(change) and not sub.offer(change):
                self._open.discard(sub)

    def subscribe(self, topics: frozenset[str], prefix: bytes, run: str | None,
                  after: int | None) -> Subscription:  # fmt: skip
        """A new stream, fed first with the kept changes after `after`
        (None: from now on).

        Raises:
            ResumeError: 410 for another run or an index no longer kept, 400
                for an index this run has not reached.
        """
        if run is not None and run != self.run:
            raise ResumeError(410, f"this agent restarted (run {self.run}, the watch was on "
                              f"run {run}): indexes start again; list, then watch from its "
                              "index")  # fmt: skip
        if after is not None:
            if after > self.index:
                raise ResumeError(400, f"index {after} is ahead of this agent ({self.index})")
            if after < self.oldest:
                raise ResumeError(410, f"index {after} is older than the oldest change "
                                  f"kept ({self.oldest + 1}); list, then watch from its "
                                  "index")  # fmt: skip
        sub = Subscription(topics, prefix)
        if after is not None:
            for change in self._changes:
                if change.index > after and sub.wants(change) and not sub.offer(change):
                    return sub  # more than a queue's worth: it ends, the client resumes
        self._open.add(sub)
        if self._ping is None:
            self._ping = asyncio.get_running_loop().call_later(PING_S, self._ping_all)
        return sub

    def _ping_all(self) -> None:
        self._ping = None
        for sub in list(self._open):
            if sub.queue.empty() and not sub.offer(PING):
                self._open.discard(sub)
        if self._open:
            self._ping = asyncio.get_running_loop().call_later(PING_S, self._ping_all)

    def close(self, sub: Subscription) -> None:
        """Stop feeding `sub` (its client went away)."""
        self._open.discard(sub)

    def end_all(self) -> None:
        """End every stream (the API is stopping)."""
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None
        for sub in list(self._open):
            while not sub.queue.empty():
                sub.queue.get_nowait()
            sub.queue.put_nowait(None)
        self._open.clear()


def record_json(rec: Record, writer: str | None, owner: str | None) -> dict[str, Any]:
    """A record as the API shows it, with its writer's (and, if ephemeral,
    its owner's) name when known."""
    out: dict[str, Any] = {
        "key": rec.key.decode(errors="replace"),
        "hlc": rec.hlc,
        "modified_wall_ms": hlc.physical_ms(rec.hlc),
        "writer": writer or rec.writer.hex(),
        "writer_id": rec.writer.hex(),
        "epoch": rec.epoch,
    }
    if rec.owner:
        out["ephemeral"] = True
        out["owner"] = owner or rec.owner.hex()
    if rec.value is None:
        out["deleted"] = True
    else:
        try:
            out["value"] = rec.value.decode()
        except UnicodeDecodeError:
            out["value"] = None
        out["value_base64"] = base64.b64encode(rec.value).decode()
    return out
