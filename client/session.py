"""Theory of operation of a session the client keeps alive (daemon/sessions.py
is the agent's side; docs/client.md "Sessions").

An application opens a session on its local agent with a TTL, writes keys
under it, and renews it; when the renewals stop for the TTL (the process
died or hung), the agent ends the session and deletes its keys on every
replica. The client renews every `ttl_s / 3`, so two renewals in a row can
fail before the session is at risk:

- **Renewed** (200): the next renewal is due `ttl_s / 3` after the answer.
- **No answer, or a refusal other than 404** (the agent is restarting, a
  connection was reset): try again soon (`retry_delay`), until the TTL has
  run out since the last answer that renewed it. Past that the agent has
  surely ended the session: it is *lost*.
- **404**: the agent holds no such session (it expired, was closed, or the
  agent restarted, which ends every session): it is *lost*.

A lost session stays lost: its keys are gone (or going), and the
application must open a new session and write its keys again. It learns
so from `session.lost`, `wait_lost()`, or the `on_lost` callback.

`Keepalive` is the schedule, told the time (pure); `Session` runs it on a
daemon thread with one HTTP connection of its own, kept open between
renewals; `AsyncSession` (aiosession.py) runs it as a task. A session knows
its client only as the little it asks of it (`SessionClient`), so that the
client imports its sessions and nothing imports the client back.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Protocol, TypeVar

from shoal.client import calls
from shoal.client.endpoint import Endpoint, headers
from shoal.client.errors import NotFound, ShoalError
from shoal.client.types import MetaWritten, SessionInfo, Written

T = TypeVar("T")

RENEW_FRACTION = 1 / 3
RETRY_MIN_S = 0.1
RETRY_MAX_S = 1.0


class Keepalive:
    """When to renew a session, and when it is surely gone (module docstring).

    Args:
        ttl_s: the session's TTL, as the agent granted it.
        now: when the agent's answer opening it arrived (monotonic seconds).
    """

    def __init__(self, ttl_s: float, now: float) -> None:
        self.ttl_s = ttl_s
        self.answered_at = now

    @property
    def interval_s(self) -> float:
        """Seconds between renewals that succeed."""
        return self.ttl_s * RENEW_FRACTION

    @property
    def expires_at(self) -> float:
        """When the agent has ended the session unless a renewal reached it:
        a TTL after the last answer (the agent renewed it before answering)."""
        return self.answered_at + self.ttl_s

    def renewed(self, now: float) -> None:
        """A renewal's answer arrived at `now`."""
        self.answered_at = now

    def expired(self, now: float) -> bool:
        """True once no renewal can have kept the session."""
        return now >= self.expires_at

    def retry_delay(self, now: float) -> float:
        """Seconds to wait after a failed renewal: a quarter of what is left,
        0.1 to 1 s, so several tries fit before the session would expire."""
        return min(RETRY_MAX_S, max(RETRY_MIN_S, (self.expires_at - now) / 4))


class SessionClient(Protocol):
    """What a `Session` asks of the client that opened it (`Client`)."""

    endpoint: Endpoint  # where the keepalive connection goes
    token: str
    timeout: float  # seconds a call may take

    def send(self, call: calls.Call[T]) -> T:
        """One request and its decoded answer (ShoalError on a refusal)."""
        ...


class Session:
    """A session on the agent, renewed by a daemon thread until closed.

    Open one with `Client.session()`; use it as a context manager (leaving
    the block closes it, and the agent deletes its keys at once).

    Attributes:
        id: the session's id (`shoal sessions` lists it).
        ttl_s: its TTL.
        reason: why it was lost ("" while it is not).
        on_lost: called with the session, in the keepalive thread, when it is lost.
    """

    def __init__(self, client: SessionClient, ttl: float = 10.0, name: str = "",
                 checks: Sequence[str] = (),
                 on_lost: Callable[[Session], object] | None = None) -> None:  # fmt: skip
        self._client = client
        info = client.send(calls.session_open(ttl, name, checks))
        self.id = info.id
        self.ttl_s = info.ttl_s
        self.name = name
        self.on_lost = on_lost
        self.reason = ""
        self._keepalive = Keepalive(info.ttl_s, time.monotonic())
        self._lost = threading.Event()
        self._losing = threading.Lock()
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"shoal-session-{self.id[:8]}",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    @property
    def lost(self) -> bool:
        """True once the agent no longer holds the session (`reason` says why)."""
        return self._lost.is_set()

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the session is lost, or `timeout` seconds; whether it is."""
        return self._lost.wait(timeout)

    def put(self, key: str, value: bytes | str) -> Written:
        """Write `key` under this session: it is deleted when the session ends.

        Raises:
            NotFound: the session is gone (it is then `lost`).
        """
        try:
            return self._client.send(calls.kv_put(key, value, session=self.id))
        except NotFound as exc:
            self._lose(f"the agent no longer holds the session: {exc.message}")
            raise

    def meta_put(self, key: str, value: bytes | str, cas: int | None = None) -> MetaWritten:
        """Write metadata key `key` under this session (`cas` as for
        `client.meta.put`): deleted, at one revision, when the session ends.

        Raises:
            NotFound: the session has ended (it is then `lost`).
        """
        try:
            return self._client.send(calls.meta_put(key, value, cas, session=self.id))
        except NotFound as exc:
            self._lose(f"the session has ended: {exc.message}")
            raise

    def info(self) -> SessionInfo:
        """The session as the agent holds it now (NotFound once it is gone)."""
        return self._client.send(calls.session_info(self.id))

    def close(self) -> None:
        """Stop renewing and end the session on the agent, which deletes its
        keys at once. Closing a lost or closed session does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
        if not self.lost:
            try:
                self._client.send(calls.session_close(self.id))
            except NotFound:
                pass  # expired meanwhile: its keys are gone all the same

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()

    def __repr__(self) -> str:
        state = f"lost: {self.reason}" if self.lost else "open"
        return f"<Session {self.id} ttl={self.ttl_s:g}s {state}>"

    # -- the keepalive thread -------------------------------------------------------

    def _run(self) -> None:
        keepalive = self._keepalive
        delay_s = keepalive.interval_s
        last_error = ""
        try:
            while not self._stop.wait(delay_s):
                try:
                    self._renew()
                except NotFound as exc:
                    self._lose(f"the agent no longer holds the session: {exc.message}")
                    return
                except ShoalError as exc:
                    now = time.monotonic()
                    last_error = exc.message
                    if keepalive.expired(now):
                        self._lose(f"no renewal reached the agent within the TTL "
                                   f"({self.ttl_s:g} s; last: {last_error}): it has ended "
                                   "the session")  # fmt: skip
                        return
                    delay_s = keepalive.retry_delay(now)
                    continue
                keepalive.renewed(time.monotonic())
                delay_s = keepalive.interval_s
        finally:
            if self._conn is not None:
                self._conn.close()

    def _renew(self) -> None:
        """One renewal on this session's own connection (kept open). One
        that gets no answer on the connection kept from the last renewal is
        sent again at once on a new one: the agent closed it as it
        restarted, and a retry delay would spend up to a second of the TTL
        after the agent is back (bench/sessions.py, restart). A renewal
        sent twice renews twice: nothing else.

        Raises:
            ShoalError: NotFound when the session is gone, Unavailable without an answer.
        """
        self._renew_on(kept=True)

    def _renew_on(self, kept: bool) -> None:
        """`_renew`; with `kept`, again on a new connection if the kept one fails."""
        client = self._client
        call = calls.session_renew(self.id)
        if self._conn is None:
            kept = False
            # A renewal that hangs must not outlast the retries the TTL leaves room for.
            timeout_s = min(client.timeout, max(1.0, self._keepalive.interval_s))
            self._conn = client.endpoint.connect(timeout_s)
        try:
            sent = headers(client.token, call.body)
            self._conn.request(call.method, call.path, body=call.body, headers=sent)
            resp = self._conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()
            self._conn = None
            if kept and not isinstance(exc, TimeoutError):
                return self._renew_on(kept=False)
            raise calls.unreachable(client.endpoint.base, exc) from None
        if resp.will_close:
            self._conn.close()
            self._conn = None
        calls.answer(call, resp.status, resp.reason, body)

    def _lose(self, reason: str) -> None:
        with self._losing:  # put() and the keepalive thread may both find it gone
            if self._lost.is_set():
                return
            self.reason = reason
            self._lost.set()
        if self.on_lost is not None:
            self.on_lost(self)
