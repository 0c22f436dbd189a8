"""Client sessions: liveness of the application, not only of its machine.

ZooKeeper ties an ephemeral node to the client's session, etcd a key to a
lease the client keeps alive, Consul a lock to a session bound to health
checks. Here an application opens a session on its local agent
(`POST /v1/session {"ttl_s": 10}`), keeps it alive (`PUT
/v1/session/ID/renew`, which the client library does in the background),
and attaches ephemeral keys to it (`PUT /v1/kv/<key>?session=ID`). When
the keepalives stop for `ttl_s` (the process died, hung, or lost its
agent), the session expires and the agent deletes its keys on every
replica (tombstones, which replicate as any write does); `DELETE
/v1/session/ID` does the same at once. A session may also name health
checks (daemon/health.py): when one of them turns critical, the session
ends, as Consul's do.

A session's keys are ephemeral keys of this member too (storage/store.py):
if the agent itself fails or leaves, they disappear with the member.

Sessions live in the agent's memory only: **an agent restart ends every
session** (and its start deletes the member's ephemeral keys), and a
keepalive for an unknown session gets a 404 that tells the client to open
a new one and register again. ZooKeeper's sessions survive a server
failover because the ensemble replicates them; an agent is a single process,
and pretending otherwise would keep a dead broker's registration alive.

The table is driven by the agent's loop: one timer at `next_expiry()`
calls `expire_due(now)`. Each open session has one entry in a heap of
expiries; a renewal only moves the session's `expires_at`, and when an
entry comes due for a session renewed since, it goes back in at the new
time. A renewal is O(1) and the heap never holds more than one entry per
session (pushing one per renewal grew RSS by 98 bytes per renewal:
bench/sessions.py). It reads no clock (the agent passes `now`).
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass, field

MIN_TTL_S = 1.0
MAX_TTL_S = 3600.0
MAX_SESSIONS = 100_000
MAX_SESSION_KEYS = 10_000


class SessionError(Exception):
    """A session request that cannot be served: `status` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class HeldSession:
    """One open session."""

    id: str
    name: str
    ttl_s: float
    expires_at: float
    checks: tuple[str, ...] = ()
    # key -> the HLC of the version written under this session: at the end,
    # only a key still holding that version is deleted (a later write wins).
    keys: dict[bytes, int] = field(default_factory=dict)
    renewals: int = 0

    def brief(self, now: float) -> dict[str, object]:
        """What a renewal answers: small, whatever the session holds."""
        return {"id": self.id, "ttl_s": self.ttl_s,
                "expires_in_s": round(max(0.0, self.expires_at - now), 3)}  # fmt: skip

    def to_json(self, now: float) -> dict[str, object]:
        """The session as `GET /v1/sessions` shows it."""
        return {"id": self.id, "name": self.name, "ttl_s": self.ttl_s,
                "expires_in_s": round(max(0.0, self.expires_at - now), 3),
                "checks": list(self.checks), "renewals": self.renewals,
                "keys": sorted(k.decode(errors="replace") for k in self.keys)}  # fmt: skip


class SessionTable:
    """The open sessions of one agent (module docstring)."""

    def __init__(self) -> None:
        self._open: dict[str, HeldSession] = {}
        self._due: list[tuple[float, str]] = []  # (expires_at, id), some stale
        self.opened = 0
        self.expired = 0
        self.closed = 0

    def __len__(self) -> int:
        return len(self._open)

    def open(self, ttl_s: float, name: str, checks: tuple[str, ...], now: float) -> HeldSession:
        """A new session that expires `ttl_s` from `now` unless renewed.

        Raises:
            SessionError: 400 for a TTL outside [MIN_TTL_S, MAX_TTL_S], 503
                when MAX_SESSIONS are open.
        """
        if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
            raise SessionError(400, f"ttl_s must be {MIN_TTL_S:g} to {MAX_TTL_S:g} seconds, "
                               f"not {ttl_s:g}")  # fmt: skip
        if len(self._open) >= MAX_SESSIONS:
            raise SessionError(503, f"this agent holds {MAX_SESSIONS} sessions already")
        session = HeldSession(os.urandom(8).hex(), name, ttl_s, now + ttl_s, checks)
        self._open[session.id] = session
        heapq.heappush(self._due, (session.expires_at, session.id))
        self.opened += 1
        return session

    def get(self, session_id: str) -> HeldSession:
        """The open session `session_id`.

        Raises:
            SessionError: 404, naming why (unknown, or expired).
        """
        session = self._open.get(session_id)
        if session is None:
            raise SessionError(404, f"no session {session_id[:40]!r} on this agent (it expired, "
                               "was closed, or the agent restarted): open a new one")  # fmt: skip
        return session

    def renew(self, session_id: str, now: float) -> HeldSession:
        """Push the expiry of `session_id` to `ttl_s` from `now`."""
        session = self.get(session_id)
        session.expires_at = now + session.ttl_s
        session.renewals += 1
        return session

    def attach(self, session_id: str, key: bytes, hlc: int) -> None:
        """Record that `key` was written (version `hlc`) under the session."""
        session = self.get(session_id)
        if key not in session.keys and len(session.keys) >= MAX_SESSION_KEYS:
            raise SessionError(409, f"a session holds at most {MAX_SESSION_KEYS} keys")
        session.keys[key] = hlc

    def close(self, session_id: str) -> HeldSession:
        """End `session_id` now; the caller deletes its keys."""
        session = self.get(session_id)
        del self._open[session_id]
        self.closed += 1
        return session

    def expire_due(self, now: float) -> list[HeldSession]:
        """End and return the sessions whose TTL ran out by `now`."""
        heap, due = self._due, []
        while heap and heap[0][0] <= now:
            _, session_id = heapq.heappop(heap)
            session = self._open.get(session_id)
            if session is None:
                continue  # closed since
            if session.expires_at > now:
                heapq.heappush(heap, (session.expires_at, session_id))  # renewed since
                continue
            del self._open[session_id]
            due.append(session)
        self.expired += len(due)
        return due

    def bound_to(self, check_id: str) -> list[HeldSession]:
        """End and return the sessions that named check `check_id` (it
        turned critical)."""
        bound = [s for s in self._open.values() if check_id in s.checks]
        for session in bound:
            del self._open[session.id]
        self.closed += len(bound)
        return bound

    def next_expiry(self) -> float | None:
        """When the next session expires, if any is open."""
        heap = self._due
        while heap and heap[0][1] not in self._open:
            heapq.heappop(heap)  # closed since
        return heap[0][0] if heap else None  # (a renewed session wakes the timer early once)

    def all(self) -> list[HeldSession]:
        """The open sessions, by id."""
        return [self._open[k] for k in sorted(self._open)]
