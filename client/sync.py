"""`Client`: the blocking client, on the standard library's http.client.

It opens one connection per call (the agent is local; a call costs about a
millisecond), so a `Client` may be shared between threads. Importing it
loads nothing beyond the standard library and msgspec: the `shoal` command
line uses it and starts fast.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from shoal.client import calls
from shoal.client.endpoint import headers, parse_endpoint, resolve_token
from shoal.client.errors import ShoalError, Unavailable
from shoal.client.meta import MetaApi
from shoal.client.session import Session
from shoal.client.types import (
    TOPICS,
    CheckListing,
    Controller,
    ControllerEvent,
    Event,
    EventSent,
    JoinResult,
    KeyValue,
    KvEvent,
    Member,
    MemberEvent,
    QueryResult,
    SelfInfo,
    SessionInfo,
    UserEvent,
    Written,
)
from shoal.client.watch import OPEN, SILENCE_S, WatchCursor

T = TypeVar("T")
E = TypeVar("E", bound=Event)


class Client:
    """A blocking client of one agent's API (docs/client.md).

    Args:
        addr: "ADDR:PORT" or "unix:PATH"; default $SHOAL_API_ADDR, else 127.0.0.1:7947.
        token: the API token; default the `token_file`'s, $SHOAL_API_TOKEN's, or
            the file named by $SHOAL_API_TOKEN_FILE.
        token_file: a file holding the token.
        timeout: seconds a call may take (a long poll gets its wait on top).

    Raises:
        ValueError: `addr` is malformed, or the token file is empty.
        OSError: the token file cannot be read.
    """

    def __init__(self, addr: str | None = None, token: str | None = None,
                 token_file: str | None = None, timeout: float = 15.0) -> None:  # fmt: skip
        self.endpoint = parse_endpoint(addr)
        self.token = resolve_token(token, token_file)
        self.timeout = timeout
        self.kv = KvApi(self)
        self.meta = MetaApi(self)  # the metadata log (client/meta.py)

    @property
    def base(self) -> str:
        """The agent's address, as messages name it."""
        return self.endpoint.base

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()

    def close(self) -> None:
        """Nothing stays open between calls; here for symmetry with AsyncClient."""

    # -- the API ----------------------------------------------------------------------

    def members(self, status: str | None = None, tags: Mapping[str, calls.Pattern] | None = None,
                name: calls.Pattern | None = None,
                health: str | None = None) -> list[Member]:  # fmt: skip
        """The members the agent knows, optionally only those in `status`
        (alive, suspect, dead, left) whose tags match `tags` ({KEY: REGEX},
        in full), whose name matches `name`, and whose checks' `health` is
        this (passing, warning, critical)."""
        return self.run(calls.members(status, tags, name, health))

    def self(self) -> SelfInfo:
        """This agent: its member, cluster, health and counters."""
        return self.run(calls.one(calls.self_info()))

    def join(self, addrs: Sequence[str]) -> JoinResult:
        """Join the cluster through `addrs` ("ADDR[:PORT]")."""
        return self.run(calls.one(calls.join(addrs)))

    def leave(self) -> None:
        """Leave the cluster gracefully (the agent keeps running)."""
        self.run(calls.one(calls.leave()))

    def set_tags(self, tags: Mapping[str, str]) -> dict[str, str]:
        """Set tags on this agent's member; its tags afterwards."""
        return self.run(calls.change_tags(tags, ()))

    def delete_tags(self, keys: Iterable[str]) -> dict[str, str]:
        """Delete tags from this agent's member; its tags afterwards."""
        return self.run(calls.change_tags({}, list(keys)))

    def controller(self) -> Controller:
        """The controller this agent knows, its epoch and the voters."""
        return self.run(calls.one(calls.controller()))

    def wait_controller(self, after_epoch: int | None = None, timeout: float = 30.0) -> Controller:
        """Block until a controller with an epoch above `after_epoch` is known
        (None: any controller, so it returns at once if there is one).

        Raises:
            TimeoutError: none within `timeout` seconds.
        """
        return self.run(calls.wait_controller(after_epoch, timeout))

    def force_leave(self, node: str) -> Any:
        """Remove a failed voter (any agent forwards it to the controller's)."""
        return self.run(calls.one(calls.force_leave(node)))

    def session(self, ttl: float = 10.0, name: str = "", checks: Sequence[str] = (),
                on_lost: Callable[[Session], object] | None = None) -> Session:  # fmt: skip
        """Open a session (now) that a daemon thread renews every `ttl / 3`
        seconds until it is closed; keys written with `session.put()` end
        with it (docs/client.md, "Sessions").

        Args:
            ttl: seconds the agent keeps it without a renewal (1 to 3600).
            name: a label `shoal sessions` shows.
            checks: ids of this agent's health checks: the session ends when
                one turns critical (one that is critical now: Conflict).
            on_lost: called with the session when it is lost (expired,
                closed by a check, or the agent restarted).

        Raises:
            BadRequest: a TTL out of range or an unknown check. Conflict: a
                critical check.
        """
        return Session(self, ttl, name, checks, on_lost)

    def sessions(self) -> list[SessionInfo]:
        """The sessions open on this agent."""
        return self.run(calls.sessions_listing())

    def checks(self) -> CheckListing:
        """This agent's health checks and the member's health (the worst of them)."""
        return self.run(calls.one(calls.checks_listing()))

    def check(self, check_id: str, status: str, note: str = "") -> None:
        """Report a TTL check's status: "pass", "warn" or "fail", with a note.

        Raises:
            NotFound: no TTL check `check_id` on this agent.
        """
        self.run(calls.one(calls.check_update(check_id, status, note)))

    def check_pass(self, check_id: str, note: str = "") -> None:
        """`check(check_id, "pass", note)`: the TTL check passes for another ttl_s."""
        self.check(check_id, "pass", note)

    def check_warn(self, check_id: str, note: str = "") -> None:
        """`check(check_id, "warn", note)`."""
        self.check(check_id, "warn", note)

    def check_fail(self, check_id: str, note: str = "") -> None:
        """`check(check_id, "fail", note)`: the member is critical at once."""
        self.check(check_id, "fail", note)

    def event(self, name: str, payload: bytes | str = b"") -> EventSent:
        """Fire a user event: every member runs its handlers for `name` at
        least once (docs/events.md).

        Raises:
            BadRequest: a bad name. TooLarge: a payload over 64 KiB. Busy: a full queue.
        """
        return self.run(calls.one(calls.user_event(name, payload)))

    def query(self, name: str, payload: bytes | str = b"", node: calls.Pattern | None = None,
              tags: Mapping[str, calls.Pattern] | None = None,
              timeout: float = 5.0) -> QueryResult:  # fmt: skip
        """Ask the members alive now whose name matches `node` and whose tags
        match `tags` (re.search, as the agent matches) to run their handler
        for `name`; returns when all answered, or at `timeout` seconds.

        Raises:
            re.error, ValueError: a bad pattern or timeout (nothing is sent).
        """
        return self.run(calls.one(calls.query(name, payload, node, tags, timeout)))

    def watch(self, topics: Iterable[str] = TOPICS, prefix: str = "", index: int | None = None,
              run: str | None = None) -> Watch[Event]:  # fmt: skip
        """Follow changes: MemberEvent, ControllerEvent and KvEvent (keys under
        `prefix`), and UserEvent if `topics` names "events", from `index`
        (None: from now on), resuming across dropped connections and agent
        restarts (docs/client.md)."""
        return Watch(self, WatchCursor(topics, prefix, index, run))

    def watch_events(self, index: int | None = None, run: str | None = None) -> Watch[UserEvent]:
        """Follow the user events delivered on this agent (see `watch`)."""
        return Watch(self, WatchCursor(("events",), "", index, run))

    def watch_members(self, index: int | None = None, run: str | None = None) -> Watch[MemberEvent]:
        """Follow membership changes (see `watch`)."""
        return Watch(self, WatchCursor(("members",), "", index, run))

    def watch_controller(self, index: int | None = None,
                         run: str | None = None) -> Watch[ControllerEvent]:  # fmt: skip
        """Follow election changes (see `watch`)."""
        return Watch(self, WatchCursor(("controller",), "", index, run))

    def events(self) -> Iterator[dict[str, Any]]:
        """`/v1/events` (what `shoal monitor` prints), raw, until the agent
        ends it; no resuming."""
        with self._stream("/v1/events", None) as resp:
            try:
                for line in resp:
                    if line.strip():
                        yield calls._raw(line)
            except (OSError, http.client.HTTPException) as exc:
                raise calls.unreachable(self.base, exc) from None

    def request(self, method: str, path: str, body: Any = None, wait: float = 0.0) -> Any:
        """Any route: `body` sent as JSON, the JSON answer returned; `wait`:
        seconds the agent may hold the answer (a long poll), on top of `timeout`."""
        return self.run(calls.one(calls.raw(method, path, body, wait)))

    # -- the transport ----------------------------------------------------------------

    def run(self, steps: calls.Steps[T]) -> T:
        """Drive `steps`: send each call it yields, give it each answer."""
        try:
            call = next(steps)
            while True:
                call = steps.send(self.send(call))
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            steps.close()

    def send(self, call: calls.Call[T]) -> T:
        """One request and its decoded answer.

        Raises:
            ShoalError: a refusal (its subclass by status), or Unavailable.
        """
        conn = self.endpoint.connect(self.timeout + call.wait_s)
        try:
            sent = headers(self.token, call.body)
            conn.request(call.method, call.path, body=call.body, headers=sent)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise calls.unreachable(self.base, exc, call) from None
        finally:
            conn.close()
        return calls.answer(call, resp.status, resp.reason, body)

    def _stream(self, path: str, timeout_s: float | None) -> _Opened:
        """Open a streaming GET; a refusal raises (`calls.answer`)."""
        conn = self.endpoint.connect(timeout_s)
        try:
            conn.request("GET", path, headers=headers(self.token, None))
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise calls.unreachable(self.base, exc) from None
        if resp.status >= 400:
            body = resp.read()
            conn.close()
            calls.answer(calls.stream(path), resp.status, resp.reason, body)
        return _Opened(conn, resp)


class KvApi:
    """`Client.kv`: the replicated key-value store."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def get(self, key: str) -> KeyValue:
        """The key's value and version.

        Raises:
            NotFound: no such key (or it was deleted).
        """
        return self._client.run(calls.one(calls.kv_get(key)))

    def put(self, key: str, value: bytes | str, fence: int | None = None,
            ephemeral: bool = False, session: str | None = None) -> Written:  # fmt: skip
        """Write `value` (text is sent as UTF-8); returns once durable on the agent.

        Args:
            fence: the controller epoch this write is made under; refused
                (Conflict) once a newer epoch is known or wrote the key.
            ephemeral: the key vanishes when this agent's member fails or leaves.
            session: the key ends with this session (`POST /v1/session`).
        """
        return self._client.run(calls.one(calls.kv_put(key, value, fence, ephemeral, session)))

    def delete(self, key: str, fence: int | None = None) -> Written:
        """Delete the key (a tombstone that replicates); `fence` as for `put`."""
        return self._client.run(calls.one(calls.kv_delete(key, fence)))

    def list(self, prefix: str = "") -> list[KeyValue]:
        """Every key under `prefix`, in key order (all pages)."""
        return self._client.run(calls.kv_list(prefix))

    def watch(self, prefix: str = "", index: int | None = None,
              run: str | None = None) -> Watch[KvEvent]:  # fmt: skip
        """Follow puts and deletes of keys under `prefix` (see `Client.watch`)."""
        return Watch(self._client, WatchCursor(("kv",), prefix, index, run))


class _Opened:
    """An open streaming response; closing it closes its connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn, self.resp = conn, resp

    def __enter__(self) -> http.client.HTTPResponse:
        return self.resp

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


class Watch(Generator[E, None, None]):
    """A watch: a generator of events that resumes by itself (watch.py).

    It is open when `watch()` returns: a watch from now sees every change
    made after that. `close()` (or leaving a `with` block) ends it and its
    connection. `index` and `run` say where it is: a later
    `watch(index=, run=)` resumes there.

    Raises:
        Unavailable: the first connection failed (later ones are retried).
        IncompatibleAgent: the agent has no /v1/watch.
    """

    def __init__(self, client: Client, cursor: WatchCursor) -> None:
        self.cursor = cursor
        self._events = _follow(client, cursor)
        self._early: list[Event] = []  # a resync before the first hello
        while (item := next(self._events)) is not OPEN:
            self._early.append(item)

    @property
    def index(self) -> int | None:
        """The index of the last event delivered (or of the listing resumed from)."""
        return self.cursor.index

    @property
    def run(self) -> str | None:
        """The agent run `index` belongs to."""
        return self.cursor.run

    def send(self, value: None) -> E:
        """Resume the watch (as `next()`); the next event."""
        event: Any = self._early.pop(0) if self._early else self._events.send(value)
        return event  # type: ignore[no-any-return]

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> E:
        """Raise `typ` inside the watch, as a generator's throw() does."""
        event: Any = self._events.throw(typ, val, tb)
        return event  # type: ignore[no-any-return]

    def close(self) -> None:
        """End the watch and close its connection."""
        self._events.close()

    def __enter__(self) -> Watch[E]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _follow(client: Client, cursor: WatchCursor) -> Generator[Any, None, None]:
    """The events of a watch, reconnecting and resyncing as watch.py says;
    OPEN once, at the first hello."""
    answered = False  # a first failure to connect raises: the address may be wrong
    is_open = False
    while True:
        try:
            opened = client._stream(cursor.path(), max(client.timeout, SILENCE_S))
        except ShoalError as exc:
            if exc.status == 410:
                try:
                    yield from client.run(cursor.resync())
                except Unavailable:
                    time.sleep(cursor.backoff())
                continue
            if answered and (exc.status is None or exc.status == 503):
                time.sleep(cursor.backoff())
                continue
            raise
        answered = True
        with opened as resp:
            try:
                first = resp.readline()
                if first:
                    cursor.opened(first)
                    if not is_open:
                        is_open = True
                        yield OPEN
                    for line in resp:
                        event = cursor.event(line)
                        if event is not None:
                            yield event
            except (OSError, http.client.HTTPException):
                pass  # dropped: resume below
        time.sleep(cursor.backoff())
