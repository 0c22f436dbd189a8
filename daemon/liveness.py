"""The application's liveness on this agent: its sessions and health checks.

Glue between the session table (daemon/sessions.py), the check runner
(daemon/health.py) and the node: a session that expires or closes deletes
its keys; a check that turns critical ends the sessions bound to it; the
member's health goes out in gossip as the tag `shoal:health`. One timer
(`loop.call_at`) fires at the next session expiry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from shoal.daemon.health import CRITICAL, HEALTH_TAG, HealthChecks
from shoal.daemon.sessions import HeldSession, SessionTable
from shoal.kernel.contract import Tags
from shoal.kernel.errors import ShoalError
from shoal.membership.member import make_tags
from shoal.node.composition import ShoalNode
from shoal.services.checkconfig import CheckConfig
from shoal.services.checks import CheckChanged

log = structlog.get_logger("shoal")


class Liveness:
    """Sessions and checks of one agent (module docstring).

    Args:
        loop: the agent's event loop.
        node: the agent's node (its platform core holds the checks' machines).
        flush: the agent's flush, after changing the node.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, node: ShoalNode,
                 flush: Callable[[], None]) -> None:  # fmt: skip
        self._loop = loop
        self._node = node
        self._flush = flush
        self.sessions = SessionTable()
        self.checks = HealthChecks(node.services.checks, flush)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    def with_health(self, tags: Tags) -> Tags:
        """`tags` with this member's health tag (none without checks)."""
        return tags_with_health(tags, self.checks.health)

    # -- sessions -------------------------------------------------------------------

    def open_session(self, ttl_s: float, name: str, checks: tuple[str, ...]) -> HeldSession:
        """Open a session (SessionError for a bad TTL or too many)."""
        session = self.sessions.open(ttl_s, name, checks, self._loop.time())
        self._arm()
        return session

    def renew(self, session_id: str) -> HeldSession:
        """Keep `session_id` alive for another TTL (SessionError 404 if gone)."""
        session = self.sessions.renew(session_id, self._loop.time())
        self._arm()
        return session

    def close(self, session_id: str) -> HeldSession:
        """End `session_id` now and delete its keys."""
        session = self.sessions.close(session_id)
        self._end(session, "closed")
        return session

    def _arm(self) -> None:
        at = self.sessions.next_expiry()
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = None if at is None else self._loop.call_at(at, self._due)

    def _due(self) -> None:
        self._timer = self._timer_at = None
        for session in self.sessions.expire_due(self._loop.time()):
            self._end(session, "expired")
        self._arm()

    def _end(self, session: HeldSession, why: str) -> None:
        """Delete the keys still holding the version written under `session`."""
        node = self._node
        deleted = 0
        now = self._loop.time()
        for key, stamp in session.keys.items():
            rec = node.read(key)
            if rec is not None and rec.value is not None and rec.hlc == stamp:
                try:
                    node.expire(rec, now)
                    deleted += 1
                except ShoalError as exc:  # a clock refusal: the member's own end covers it
                    log.warning("a session key could not be deleted", key=key.decode(
                        errors="replace"), error=str(exc))  # fmt: skip
        self._flush()
        log.info(f"session {why}", session=session.id, name=session.name, keys=deleted)

    # -- checks ---------------------------------------------------------------------

    def configure_checks(self, checks: tuple[CheckConfig, ...]) -> None:
        """Run exactly `checks` (start and reload), then say the health."""
        self.checks.configure(checks)
        self._publish_health()

    def check_changed(self, event: CheckChanged) -> None:
        """A check's status changed (out of the node's drain): log it, end
        the sessions bound to a check gone critical, say the health."""
        log.info("check changed", check=event.check, status=event.new, previous=event.old,
                 output=event.output)  # fmt: skip
        if event.new == CRITICAL:
            for session in self.sessions.bound_to(event.check):
                self._end(session, f"ended: check {event.check} is critical")
            self._arm()
        self._publish_health()

    def _publish_health(self) -> None:
        node = self._node
        tags = self.with_health(node.swim.ident.tags)
        if tags != node.swim.ident.tags:
            node.set_tags(tags, self._loop.time())
            self._flush()

    def stop(self) -> None:
        """Stop the checks and the timer (the agent is exiting)."""
        self.checks.stop()
        if self._timer is not None:
            self._timer.cancel()


def tags_with_health(tags: Tags, health: str | None) -> Tags:
    """`tags` with the health tag `health` (none when None: no checks)."""
    out = {k: v for k, v in tags if k != HEALTH_TAG}
    if health is not None:
        out[HEALTH_TAG] = health
    return make_tags(out)
