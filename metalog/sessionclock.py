"""When a session expires: the controller's memory of renewals.

ZooKeeper's leader tracks its sessions' pings in memory and, when one has
been silent for its timeout, commits its close; a new leader starts every
session's timeout afresh (ZooKeeper's `SessionTrackerImpl`, Consul's
session TTL "from the time a leader is elected"). shoal does the same:

- **Renewals are not entries.** An application renews through any agent;
  the agent forwards a `Keepalive` to the controller (metalog/messages.py),
  which moves the session's deadline to `now + ttl` and answers. Nothing is
  written: renewals cost a round trip, not a commit on a majority.
- **Expiry is an entry.** Once a session's deadline has passed, the leader
  appends a `SessionEnd(expired)`; every node deletes the session's keys
  when it applies it, at that one revision. Until that entry is committed
  the session is open everywhere; after, it is ended everywhere.
- **A new controller gives every session a full TTL** from the moment it
  starts leading (and a session opened under it, from when its open is
  applied): the old controller's renewals died with it, so nobody is
  expired for a renewal the new one never saw.
- **A session being ended is ended for its client.** A renewal of a session
  whose end the leader has appended is answered "ended": its end is
  decided (if the entry is lost with the leadership, the next controller
  gives it a TTL, and then, unrenewed, it expires again).

Pure: time is passed in; one heap of (deadline, id), an entry per session
at most (a renewal moves `_deadline` only; a stale heap entry goes back in
at the new time when it comes due, as daemon/sessions.py's table does).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from shoal.kernel.contract import Address, Send
from shoal.kernel.outbox import Outbox
from shoal.metalog.events import KeepaliveDone, MetaCounters, SessionEnded
from shoal.metalog.messages import Keepalive, KeepaliveResult
from shoal.metalog.origin import Origin
from shoal.metalog.state import (
    END_EXPIRED,
    Applied,
    MetaOp,
    MetaState,
    Result,
    SessionEnd,
    SessionInfo,
    SessionOpen,
)


class SessionClock:
    """The leader's deadlines for the open sessions (module docstring)."""

    # A deliberate bug, set only by the test that shows the swarm's checker
    # catches it (tests/sim/test_meta_mutations.py): "no_grace" (a new
    # controller counts each session's TTL from long ago, not from its own
    # start: the sessions not renewed to it since expire at once),
    # "renewal_ignored" (a renewal is answered but moves no deadline) or
    # "serve_past_lease" (renewals are served after the lease has ended).
    mutation: str | None = None

    def __init__(self) -> None:
        self._deadline: dict[bytes, float] = {}
        self._ttl: dict[bytes, float] = {}
        self._heap: list[tuple[float, bytes]] = []
        self.ending: set[bytes] = set()  # expired, their end appended

    def lead(self, sessions: Iterable[SessionInfo], now: float) -> None:
        """Start leading: every open session gets a full TTL from `now`."""
        self.stop()
        for info in sessions:
            self.opened(info, now - info.ttl_ms / 1000 if self.mutation == "no_grace" else now)

    def stop(self) -> None:
        """Leadership lost: forget every deadline."""
        self._deadline, self._ttl, self._heap = {}, {}, []
        self.ending = set()

    def opened(self, info: SessionInfo, now: float) -> None:
        """Session `info` was opened (applied) while leading."""
        ttl = info.ttl_ms / 1000
        self._ttl[info.id] = ttl
        self._deadline[info.id] = now + ttl
        heapq.heappush(self._heap, (now + ttl, info.id))

    def ended(self, sid: bytes) -> None:
        """Session `sid`'s end was applied."""
        self._deadline.pop(sid, None)
        self._ttl.pop(sid, None)
        self.ending.discard(sid)

    def renew(self, sid: bytes, now: float) -> bool:
        """Renew `sid`; False when it is not open here or is being ended."""
        ttl = self._ttl.get(sid)
        if ttl is None or sid in self.ending:
            return False
        if self.mutation != "renewal_ignored":
            self._deadline[sid] = max(self._deadline[sid], now + ttl)
        return True

    def due(self, now: float) -> list[bytes]:
        """The sessions whose deadline has passed by `now` and are not yet
        being ended (the caller appends their ends: they are `ending` now)."""
        heap, out = self._heap, []
        while heap and heap[0][0] <= now:
            at, sid = heapq.heappop(heap)
            deadline = self._deadline.get(sid)
            if deadline is None or sid in self.ending:
                continue  # ended, or its end appended already
            if deadline > now:
                heapq.heappush(heap, (deadline, sid))  # renewed since
                continue
            self.ending.add(sid)
            out.append(sid)
        return out

    def next_deadline(self) -> float | None:
        """When the next session may expire (a renewed one wakes it early once)."""
        heap = self._heap
        while heap and (heap[0][1] not in self._deadline or heap[0][1] in self.ending):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def remaining(self, sid: bytes, now: float) -> float | None:
        """Seconds until `sid` expires unless renewed (None: not tracked here)."""
        deadline = self._deadline.get(sid)
        return None if deadline is None else max(0.0, deadline - now)


class Renewing:
    """The leader's side of sessions: renewals answered, silent sessions
    ended (a part of `MetaLog`, which sets everything declared here)."""

    epoch: int | None
    commit: int
    lease_end: Callable[[], float]
    state: MetaState
    out: Outbox
    counters: MetaCounters
    _clock: SessionClock
    _noop_index: int
    _origin: Origin
    _now: float

    def _append(self, op: MetaOp, asked: tuple[str, int] | None, now: float) -> None:
        raise NotImplementedError  # MetaLog's

    # Called with each session whose end is applied here (the composing
    # node hides the session's kv keys), and the time.
    on_session_end: Callable[[bytes, float], None]

    def keepalive(self, ids: tuple[bytes, ...], now: float) -> int:
        """Renew sessions `ids` through the controller; `KeepaliveDone` follows."""
        rid = self._origin.next_id()
        if self.epoch is not None:
            self.out.event(KeepaliveDone(rid, *self._renew(ids, now)))
        else:
            self._origin.keepalive(rid, ids, now)
        return rid

    def session_remaining(self, sid: bytes) -> float | None:
        """As leader, seconds until `sid` expires unrenewed (None: not leading)."""
        if self.epoch is None:
            return None
        left = self._clock.remaining(sid, self._now)
        return None if left is None else round(left, 3)

    def _on_keepalive(self, msg: Keepalive, sender: Address, now: float) -> None:
        ok, ended = self._renew(msg.ids, now)
        self.out.send(Send(sender, (KeepaliveResult(msg.rid, ok, ended),)))

    def _renew(self, ids: tuple[bytes, ...], now: float) -> tuple[bool, tuple[bytes, ...]]:
        """Renew `ids` as leader: (served, the ids ended). Not served before
        an entry of our epoch is committed: until then the applied state may
        lack a session the last controller opened; nor once our lease has
        ended, though the election has not said so yet: a successor may
        lead, which counts no renewal of ours (the swarm found a controller
        woken from a pause answering renewals queued while it slept)."""
        past_lease = now >= self.lease_end() and SessionClock.mutation != "serve_past_lease"
        if self.epoch is None or self.commit < self._noop_index or past_lease:
            return False, ()
        self.counters.keepalives_served += 1
        renew = self._clock.renew
        return True, tuple(sid for sid in ids if not renew(sid, now))

    def _expire_sessions(self, now: float) -> None:
        """As leader, append the end of every session silent past its TTL."""
        if self.epoch is not None:
            for sid in self._clock.due(now):
                self.counters.sessions_expired += 1
                self._append(SessionEnd(sid, END_EXPIRED), None, now)

    def _session_applied(self, op: SessionOpen | SessionEnd, result: Result, now: float) -> None:
        """An open or end was applied here: the leader's deadlines follow;
        an end is reported."""
        if not isinstance(result, Applied):
            return
        if isinstance(op, SessionEnd):
            self._clock.ended(op.id)
            self.on_session_end(op.id, now)
            self.out.event(SessionEnded(op.id, op.reason, result.revision))
        elif self.epoch is not None:
            self._clock.opened(self.state.sessions[op.id], now)
