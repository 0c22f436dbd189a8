"""Sessions in the metadata log, as the API serves them (issue 38).

Where the agent runs the metadata log and the cluster speaks it (feature
level 2), a session is replicated state, as ZooKeeper's and Consul's are:

- `POST /v1/session` proposes a `SessionOpen` (metalog/state.py) and
  answers once it is committed; the id (32 hex digits) is chosen here.
- `PUT /v1/session/ID/renew` goes to the controller in a `Keepalive`
  (metalog/sessionclock.py), through whichever agent the client asks, with
  the other renewals that agent took in the same pass of its loop
  (daemon/renewals.py): 200
  renewed, 404 ended (its end is committed or decided), 503 no controller
  answered (the client tries again, within its TTL).
- `DELETE /v1/session/ID` proposes its `SessionEnd`; a health check of this
  agent that turns critical ends, the same way, every session opened here
  that names it.
- The controller ends a session silent for its TTL; a new controller gives
  every session a full TTL from its start. The end deletes the session's
  metadata keys at its revision, and every agent hides the session's kv
  keys as it applies it; the controller deletes them (node/composition.py).

So an agent restart ends nothing: the application renews the same session
once the agent is back (or through another agent), within its TTL.

Without the log (`[meta]` off, or a cluster below level 2) the agent's own
table serves sessions as in 0.2.0 (daemon/sessions.py); an id names which:
16 hex digits there, 32 here.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from shoal.daemon.api.answers import HttpError
from shoal.daemon.meta import MetaService
from shoal.daemon.renewals import Renewals
from shoal.daemon.sessions import MAX_SESSIONS, MAX_TTL_S, MIN_TTL_S
from shoal.kernel.versions import META_LOG_FEATURE
from shoal.metalog.events import ProposalDone
from shoal.metalog.messages import (
    OUTCOME_COMMITTED,
    OUTCOME_NO_SESSION,
    OUTCOME_NOT_APPLIED,
    SESSION_ID_BYTES,
)
from shoal.metalog.state import END_CHECK, END_CLOSED, SessionEnd, SessionInfo, SessionOpen
from shoal.node.composition import ShoalNode

ID_CHARS = 2 * SESSION_ID_BYTES
RENEW_WAIT_S = 1.0  # a renewal waits this long for a controller to be known
_RENEW_RETRY_S = 0.05
UNKNOWN = "unknown: the controller did not answer in time; it may yet be committed"


def parse_id(text: str) -> bytes | None:
    """The id of a log session (32 hex digits), or None when `text` is not one."""
    if len(text) != ID_CHARS:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


class LogSessions:
    """The API's sessions through the metadata log (module docstring)."""

    def __init__(self, meta: MetaService, node: Callable[[], ShoalNode]) -> None:
        self._meta = meta
        self._node = node
        self.renewals = Renewals(meta, node)  # one keepalive per pass of the loop

    def active(self) -> bool:
        """Whether sessions go through the log here now."""
        node = self._node()
        return node.meta is not None and node.feature_level >= META_LOG_FEATURE

    async def settle(self) -> bool:
        """Whether a session opened now goes through the log: an agent that
        does not know the cluster's feature level yet (it has just started:
        it learns it with the controller's notice, which a restarted agent
        asks the voters for as its join shows them, and a new one hears at
        the controller's next renewal) waits up to `RENEW_WAIT_S` * 3 to
        learn it, rather than hand out a session of its own table that its
        next restart would end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 3 * RENEW_WAIT_S
        while self._node().feature_level == 0 and loop.time() < deadline:
            await asyncio.sleep(_RENEW_RETRY_S)
        return self.active()

    def holds(self, sid: bytes) -> bool:
        """Whether session `sid` is open in this agent's applied state."""
        meta = self._node().meta
        return meta is not None and sid in meta.state.sessions

    async def open(self, ttl_s: float, name: str, checks: tuple[str, ...]) -> dict[str, Any]:
        """Open a session through the log; its JSON once committed."""
        if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
            raise HttpError(400, f"ttl_s must be {MIN_TTL_S:g} to {MAX_TTL_S:g} seconds, "
                            f"not {ttl_s:g}")  # fmt: skip
        node = self._node()
        assert node.meta is not None
        if len(node.meta.state.sessions) >= MAX_SESSIONS:
            raise HttpError(503, f"the cluster holds {MAX_SESSIONS} sessions already")
        sid = os.urandom(SESSION_ID_BYTES)
        op = SessionOpen(sid, round(ttl_s * 1000), name, node.name, checks)
        done = self._settled(await self._meta.propose(op),
                             "the session may have been opened; unrenewed, it expires")  # fmt: skip
        # Applied here before the answer: the keys written next through
        # this agent find the session open.
        await self._meta.until_applied(done.revision)
        meta = self._node().meta
        held = None if meta is None else meta.state.sessions.get(sid)
        return self.to_json(held or SessionInfo(sid, op.ttl_ms, name, node.name, checks,
                                                done.revision))  # fmt: skip

    async def renew(self, sid: bytes) -> dict[str, Any]:
        """Renew `sid` at the controller: its brief JSON, 404 once it ended.

        An agent that knows no controller yet (just restarted: it asks the
        voters for the controller's notice as its join shows them, and
        learns the controller and the cluster's feature level from the
        answer, a round trip after the join; election/notices.py,
        `ask_voters`) tries again every 50 ms for up to `RENEW_WAIT_S`
        before it answers 503, rather than refusing at once: the client
        would otherwise sleep its retry delay (bench/sessions.py, restart)."""
        started = asyncio.get_running_loop().time()
        while True:
            done = await self.renewals.renew(sid)
            if done is not None and done.ok:
                break
            if done is None:
                raise HttpError(503, "not renewed: the controller did not answer in time; try "
                                "again (the session lives its TTL from its last renewal)",
                                outcome="not_applied")  # fmt: skip
            if asyncio.get_running_loop().time() - started >= RENEW_WAIT_S:
                raise HttpError(503, "not renewed: this agent knows no controller yet (it "
                                "may have just started); try again (the session lives its "
                                "TTL from its last renewal)", outcome="not_applied")  # fmt: skip
            await asyncio.sleep(_RENEW_RETRY_S)
        if sid in done.ended:
            raise HttpError(404, f"no session {sid.hex()!r}: it ended (expired, was closed, or "
                            "its check turned critical): open a new one")  # fmt: skip
        meta = self._node().meta
        held = None if meta is None else meta.state.sessions.get(sid)
        ttl_s = 0.0 if held is None else held.ttl_ms / 1000
        return {"id": sid.hex(), "ttl_s": ttl_s, "expires_in_s": ttl_s}

    async def close(self, sid: bytes, reason: int = END_CLOSED) -> dict[str, Any]:
        """End `sid` through the log; its JSON as it was."""
        held = self.get(sid)
        done = await self._meta.propose(SessionEnd(sid, reason))
        if done is not None and done.outcome == OUTCOME_NO_SESSION:
            raise HttpError(404, f"no session {sid.hex()!r}: it ended already")
        ended = self._settled(done, "the session may have been closed")
        await self._meta.until_applied(ended.revision)  # its keys are gone here too
        return held

    def end_bound_to(self, check: str) -> int:
        """A check of this agent turned critical: propose the end of every
        session opened here that names it (their outcome is not awaited:
        unknown ends are retried by the next critical report or the TTL)."""
        node = self._node()
        if node.meta is None:
            return 0
        bound = [s.id for s in node.meta.state.sessions.values()
                 if s.node == node.name and check in s.checks]  # fmt: skip
        for sid in bound:
            self._meta.submit(SessionEnd(sid, END_CHECK))
        return len(bound)

    def get(self, sid: bytes) -> dict[str, Any]:
        """`sid`'s JSON from the applied state (404: not open)."""
        meta = self._node().meta
        held = None if meta is None else meta.state.sessions.get(sid)
        if held is None:
            raise HttpError(404, f"no session {sid.hex()!r}: it ended (expired, was closed, or "
                            "its check turned critical), or never was")  # fmt: skip
        return self.to_json(held)

    def all(self, everywhere: bool = False) -> list[dict[str, Any]]:
        """The open sessions opened on this agent (`everywhere`: of the
        whole cluster), by id."""
        node = self._node()
        meta = node.meta
        if meta is None:
            return []
        held = meta.state.sessions
        return [self.to_json(held[s]) for s in sorted(held)
                if everywhere or held[s].node == node.name]  # fmt: skip

    def to_json(self, info: SessionInfo) -> dict[str, Any]:
        """A session as the API shows it: its metadata keys and this
        agent's kv keys under it; `expires_in_s` only on the controller
        (left out elsewhere: the controller alone holds the renewals)."""
        node = self._node()
        meta = node.meta
        assert meta is not None
        owned = sorted(meta.state.owned.get(info.id, ()))
        kv = [r.key for r in node.sync.replica.owned_by(info.id)]
        out = {"id": info.id.hex(), "name": info.name, "ttl_s": info.ttl_ms / 1000,
               "node": info.node, "checks": list(info.checks), "revision": info.revision,
               "meta_keys": [k.decode(errors="replace") for k in owned],
               "keys": [k.decode(errors="replace") for k in kv], "replicated": True}  # fmt: skip
        left = meta.session_remaining(info.id)
        if left is not None:
            out["expires_in_s"] = left
        return out

    @staticmethod
    def _settled(done: ProposalDone | None, unknown: str) -> ProposalDone:
        """`done` if committed, else raise the HTTP error it calls for."""
        if done is not None and done.outcome == OUTCOME_COMMITTED:
            return done
        if done is not None and done.outcome == OUTCOME_NOT_APPLIED:
            raise HttpError(503, "not applied (no controller known): safe to retry",
                            outcome="not_applied")  # fmt: skip
        raise HttpError(504, f"{UNKNOWN} ({unknown})", outcome="unknown")
