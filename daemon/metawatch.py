"""Watches of the metadata log: every key change this agent applies, by revision.

The agent's `MetaState` records each key change it applies (metalog/state.py,
`changes`); after every flush `MetaWatches.feed` takes them, keeps them as
the watch history, and hands each to the open streams whose prefix it is
under. Changes come in revision order (entries are applied in log order)
and are never taken back (only committed entries are applied), so a stream
that resumes from the last revision it saw + 1 misses nothing and repeats
nothing, on this agent or another (every agent applies the same entries).

**History.** The changes of the revisions the log still holds
(`Log.held_from()`), at most `KEEP_CHANGES` of them: a watch from a
revision at or below `floor` (the highest revision whose changes are no
longer all kept) is refused with 410 and that revision; its client lists
again and watches from the listing's revision + 1. The floor also rises
when the state was not followed from the start: when it is replaced, or
its `changes` set back to None (a snapshot installed), the history starts
again at its revision.

A stream's queue is bounded: one that overflows is ended (its client
resumes from its last revision + 1), so a slow reader costs nothing
unbounded. Each stream line is one revision's changes under the prefix: a
line arrives whole or not at all, so a resume from the last revision + 1
never splits a revision. A quiet stream gets a `ping` line every `PING_S`
with the revision applied: every change up to it under the prefix was sent
before it, so a client may resume from there + 1 (etcd's progress notify).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from typing import Any

from shoal.metalog.state import Change, KeyState, MetaState

KEEP_CHANGES = 100_000
PING_S = 5.0
_QUEUE = 4096


class Compacted(Exception):
    """A watch from a revision whose changes are no longer all kept."""

    def __init__(self, revision: int, floor: int) -> None:
        super().__init__(f"revision {revision} is compacted: changes up to revision {floor} "
                         f"are no longer kept; list again, then watch from the listing's "
                         "revision + 1")  # fmt: skip
        self.floor = floor


class MetaStream:
    """One watch: its prefix, the first revision it wants, and a bounded
    queue of rendered lines; None in the queue ends it."""

    def __init__(self, prefix: bytes, start: int) -> None:
        self.prefix = prefix
        self.start = start
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUE)

    def offer(self, line: bytes) -> bool:
        """Queue `line`; when full, end the stream and return False."""
        try:
            self.queue.put_nowait(line)
            return True
        except asyncio.QueueFull:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)
            return False


class MetaWatches:
    """The watch history and the open streams (module docstring)."""

    def __init__(self, keep: int = KEEP_CHANGES) -> None:
        self.keep = keep
        self.history: deque[Change] = deque()
        self.floor = 0  # changes at or below this revision are not all kept
        self.revision = 0  # the revision applied at the last feed
        self._state: MetaState | None = None
        self._open: set[MetaStream] = set()
        self._ping: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Open streams."""
        return len(self._open)

    def feed(self, state: MetaState, held_from: int) -> None:
        """After a flush: take the changes `state` applied, keep them, and
        give them to the streams; forget those before `held_from`."""
        if state is not self._state or state.changes is None:  # first, or restored
            self._state = state
            state.changes = []
            self.history.clear()
            self.floor = max(self.floor, state.revision)
            self._end_behind(self.floor)
        taken = state.changes
        assert taken is not None
        if taken:
            state.changes = []
            self.history.extend(taken)
            self._publish(taken)
        self.revision = state.revision
        self._trim(held_from)

    def _trim(self, held_from: int) -> None:
        history = self.history
        floor = max(self.floor, held_from - 1)
        # Past the bound, the oldest revision goes whole (a txn's changes share one).
        while history and (history[0][0] <= floor or len(history) > self.keep):
            floor = max(floor, history.popleft()[0])
        self.floor = floor

    def _publish(self, changes: list[Change]) -> None:
        for stream in list(self._open):
            for line in _lines(changes, stream.prefix, stream.start):
                if not stream.offer(line):
                    self._open.discard(stream)
                    break

    def subscribe(self, prefix: bytes, start: int | None) -> MetaStream:
        """A stream of the changes under `prefix` from revision `start` on
        (None: after the revision applied now); kept ones first.

        Raises:
            Compacted: `start` is at or below the floor.
        """
        if start is None:
            start = self.revision + 1
        elif start <= self.floor:
            raise Compacted(start, self.floor)
        stream = MetaStream(prefix, start)
        if start <= self.revision:
            kept = [c for c in self.history if c[0] >= start]
            for line in _lines(kept, prefix, start):
                if not stream.offer(line):
                    return stream  # more than a queue's worth: it ends, the client resumes
        self._open.add(stream)
        if self._ping is None:
            self._ping = asyncio.get_running_loop().call_later(PING_S, self._ping_all)
        return stream

    def close(self, stream: MetaStream) -> None:
        """Stop feeding `stream` (its client went away)."""
        self._open.discard(stream)

    def end_all(self) -> None:
        """End every stream (the API is stopping)."""
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None
        self._end_behind(None)

    def _end_behind(self, floor: int | None) -> None:
        """End the streams that want changes at or below `floor` (None: all)."""
        for stream in list(self._open):
            if floor is None or stream.start <= floor:
                self._open.discard(stream)
                while not stream.queue.empty():
                    stream.queue.get_nowait()
                stream.queue.put_nowait(None)

    def ping_line(self) -> bytes:
        """A ping: every change up to `revision` was sent before it."""
        return b'{"type": "ping", "revision": %d}\n' % self.revision

    def _ping_all(self) -> None:
        self._ping = None
        line = self.ping_line()
        for stream in list(self._open):
            if stream.queue.empty() and not stream.offer(line):
                self._open.discard(stream)
        if self._open:
            self._ping = asyncio.get_running_loop().call_later(PING_S, self._ping_all)


def _lines(changes: list[Change], prefix: bytes, start: int) -> list[bytes]:
    """The stream lines of `changes` under `prefix` from `start` on: one per revision."""
    lines: list[bytes] = []
    revision = 0
    events: list[dict[str, Any]] = []
    for rev, key, now in changes:
        if rev < start or not key.startswith(prefix):
            continue
        if rev != revision and events:
            lines.append(_line(revision, events))
            events = []
        revision = rev
        events.append(change_json(rev, key, now))
    if events:
        lines.append(_line(revision, events))
    return lines


def _line(revision: int, events: list[dict[str, Any]]) -> bytes:
    return json.dumps({"type": "changes", "revision": revision, "events": events}).encode() + b"\n"


def change_json(revision: int, key: bytes, now: KeyState | None) -> dict[str, Any]:
    """One key change as a watch shows it: a put with the key's value and
    revisions, or a delete."""
    out: dict[str, Any] = {"type": "delete" if now is None else "put",
                           "key": key.decode(errors="replace"), "revision": revision}  # fmt: skip
    if now is not None:
        try:
            out["value"] = now.value.decode()
        except UnicodeDecodeError:
            out["value"] = None
        out["value_base64"] = base64.b64encode(now.value).decode()
        out.update(create_revision=now.create_revision, mod_revision=now.mod_revision,
                   version=now.version)  # fmt: skip
    else:
        out["mod_revision"] = revision
    return out
