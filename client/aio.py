"""`AsyncClient`: the client for asyncio programs, on asyncio streams, with
answers parsed by httptools (llhttp, the parser the agent's server uses).

Same calls as `Client` (calls.py builds them), each `async`; watches are
async iterators. One connection per call, as in `Client`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, TypeVar

import httptools

from shoal.client import calls
from shoal.client.aiosession import AsyncSession
from shoal.client.endpoint import parse_endpoint, resolve_token
from shoal.client.errors import ShoalError, Unavailable
from shoal.client.meta import AsyncMetaApi
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
_READ_BYTES = 64 * 1024


class _Answer:
    """httptools' callbacks for one response: status, then body as it comes."""

    def __init__(self) -> None:
        self.headers_done = False
        self.complete = False
        self.body = bytearray()

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


class _Response:
    """One response read from a connection as it arrives."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.read_timeout_s: float | None = None  # a watch's: no ping for this long, dead
        self.answer = _Answer()
        self.parser = httptools.HttpResponseParser(self.answer)

    @property
    def status(self) -> int:
        return int(self.parser.get_status_code())

    async def more(self) -> bool:
        """Read and parse what the agent sent next; False at the end.

        Raises:
            ConnectionError: the agent closed before the answer was complete.
        """
        if self.answer.complete:
            return False
        async with asyncio.timeout(self.read_timeout_s):
            data = await self.reader.read(_READ_BYTES)
        if not data:
            raise ConnectionError("the agent closed the connection mid-answer")
        self.parser.feed_data(data)
        return True

    async def head(self) -> None:
        while not self.answer.headers_done:
            await self.more()

    async def whole(self) -> bytes:
        while await self.more():
            pass
        return bytes(self.answer.body)

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's complete lines as they arrive."""
        while True:
            body = self.answer.body
            end = body.rfind(b"\n") + 1
            if end:
                chunk = bytes(body[:end])
                del body[:end]
                for line in chunk.splitlines():
                    yield line
            if not await self.more():
                return

    def close(self) -> None:
        self.writer.close()


class AsyncClient:
    """An asyncio client of one agent's API: `Client`'s methods, as coroutines.

    Args: as `Client`'s.
    """

    def __init__(self, addr: str | None = None, token: str | None = None,
                 token_file: str | None = None, timeout: float = 15.0) -> None:  # fmt: skip
        self.endpoint = parse_endpoint(addr)
        self.token = resolve_token(token, token_file)
        self.timeout = timeout
        self.kv = AsyncKvApi(self)
        self.meta = AsyncMetaApi(self)  # the metadata log (client/meta.py)

    @property
    def base(self) -> str:
        """The agent's address, as messages name it."""
        return self.endpoint.base

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await self.close()

    async def close(self) -> None:
        """Nothing stays open between calls; here for `async with`."""

    # -- the API (docstrings: Client's) -------------------------------------------------

    async def members(self, status: str | None = None,
                      tags: Mapping[str, calls.Pattern] | None = None,
                      name: calls.Pattern | None = None,
                      health: str | None = None) -> list[Member]:  # fmt: skip
        """See `Client.members`."""
        return await self.run(calls.members(status, tags, name, health))

    async def self(self) -> SelfInfo:
        """See `Client.self`."""
        return await self.run(calls.one(calls.self_info()))

    async def join(self, addrs: Sequence[str]) -> JoinResult:
        """See `Client.join`."""
        return await self.run(calls.one(calls.join(addrs)))

    async def leave(self) -> None:
        """See `Client.leave`."""
        await self.run(calls.one(calls.leave()))

    async def set_tags(self, tags: Mapping[str, str]) -> dict[str, str]:
        """See `Client.set_tags`."""
        return await self.run(calls.change_tags(tags, ()))

    async def delete_tags(self, keys: Iterable[str]) -> dict[str, str]:
        """See `Client.delete_tags`."""
        return await self.run(calls.change_tags({}, list(keys)))

    async def controller(self) -> Controller:
        """See `Client.controller`."""
        return await self.run(calls.one(calls.controller()))

    async def wait_controller(self, after_epoch: int | None = None,
                              timeout: float = 30.0) -> Controller:  # fmt: skip
        """See `Client.wait_controller`."""
        return await self.run(calls.wait_controller(after_epoch, timeout))

    async def force_leave(self, node: str) -> Any:
        """See `Client.force_leave`."""
        return await self.run(calls.one(calls.force_leave(node)))

    def session(self, ttl: float = 10.0, name: str = "", checks: Sequence[str] = (),
                on_lost: Callable[[AsyncSession], object] | None = None,
                ) -> AsyncSession:  # fmt: skip
        """See `Client.session`; it opens at `async with` (or `await s.open()`)
        and a task renews it."""
        return AsyncSession(self, ttl, name, checks, on_lost)

    async def sessions(self) -> list[SessionInfo]:
        """See `Client.sessions`."""
        return await self.run(calls.sessions_listing())

    async def checks(self) -> CheckListing:
        """See `Client.checks`."""
        return await self.run(calls.one(calls.checks_listing()))

    async def check(self, check_id: str, status: str, note: str = "") -> None:
        """See `Client.check`."""
        await self.run(calls.one(calls.check_update(check_id, status, note)))

    async def check_pass(self, check_id: str, note: str = "") -> None:
        """See `Client.check_pass`."""
        await self.check(check_id, "pass", note)

    async def check_warn(self, check_id: str, note: str = "") -> None:
        """See `Client.check_warn`."""
        await self.check(check_id, "warn", note)

    async def check_fail(self, check_id: str, note: str = "") -> None:
        """See `Client.check_fail`."""
        await self.check(check_id, "fail", note)

    async def event(self, name: str, payload: bytes | str = b"") -> EventSent:
        """See `Client.event`."""
        return await self.run(calls.one(calls.user_event(name, payload)))

    async def query(self, name: str, payload: bytes | str = b"",
                    node: calls.Pattern | None = None,
                    tags: Mapping[str, calls.Pattern] | None = None,
                    timeout: float = 5.0) -> QueryResult:  # fmt: skip
        """See `Client.query`."""
        return await self.run(calls.one(calls.query(name, payload, node, tags, timeout)))

    def watch(self, topics: Iterable[str] = TOPICS, prefix: str = "", index: int | None = None,
              run: str | None = None) -> AsyncWatch[Event]:  # fmt: skip
        """See `Client.watch`; an async iterator (`async with` closes it)."""
        return AsyncWatch(self, WatchCursor(topics, prefix, index, run))

    def watch_events(self, index: int | None = None,
                     run: str | None = None) -> AsyncWatch[UserEvent]:  # fmt: skip
        """See `Client.watch_events`."""
        return AsyncWatch(self, WatchCursor(("events",), "", index, run))

    def watch_members(self, index: int | None = None,
                      run: str | None = None) -> AsyncWatch[MemberEvent]:  # fmt: skip
        """See `Client.watch_members`."""
        return AsyncWatch(self, WatchCursor(("members",), "", index, run))

    def watch_controller(self, index: int | None = None,
                         run: str | None = None) -> AsyncWatch[ControllerEvent]:  # fmt: skip
        """See `Client.watch_controller`."""
        return AsyncWatch(self, WatchCursor(("controller",), "", index, run))

    async def request(self, method: str, path: str, body: Any = None, wait: float = 0.0) -> Any:
        """See `Client.request`."""
        return await self.run(calls.one(calls.raw(method, path, body, wait)))

    # -- the transport ----------------------------------------------------------------

    async def run(self, steps: calls.Steps[T]) -> T:
        """Drive `steps`: send each call it yields, give it each answer."""
        try:
            call = next(steps)
            while True:
                call = steps.send(await self.send(call))
        except StopIteration as done:
            result: T = done.value
            return result
        finally:
            steps.close()

    async def send(self, call: calls.Call[T]) -> T:
        """One request and its decoded answer (see `Client.send`)."""
        try:
            async with asyncio.timeout(self.timeout + call.wait_s):
                response = await self.open(call.method, call.path, call.body)
                try:
                    body = await response.whole()
                finally:
                    response.close()
        except (OSError, TimeoutError, httptools.HttpParserError) as exc:
            raise calls.unreachable(self.base, exc, call) from None
        return calls.answer(call, response.status, "", body)

    async def _stream(self, path: str, read_timeout_s: float | None) -> _Response:
        """Open a streaming GET, its head read; a refusal raises (`calls.answer`).

        Args:
            read_timeout_s: no line for this long, and the stream is dead.
        """
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.open("GET", path)
                if response.status < 400:
                    response.read_timeout_s = read_timeout_s
                    return response
                try:
                    body = await response.whole()
                finally:
                    response.close()
        except (OSError, TimeoutError, httptools.HttpParserError) as exc:
            raise calls.unreachable(self.base, exc) from None
        calls.answer(calls.stream(path), response.status, "", body)
        raise AssertionError("unreachable: answer() raises for a status >= 400")

    async def open(self, method: str, path: str, body: bytes | None = None) -> _Response:
        """Send a request; the response, its head read.

        Raises:
            OSError, TimeoutError, httptools.HttpParserError: no (readable) answer.
        """
        if self.endpoint.path:
            reader, writer = await asyncio.open_unix_connection(self.endpoint.path)
            host = "localhost"
        else:
            reader, writer = await asyncio.open_connection(self.endpoint.host, self.endpoint.port)
            host = f"{self.endpoint.host}:{self.endpoint.port}"
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        response = _Response(reader, writer)
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
            await writer.drain()
            await response.head()
        except BaseException:
            response.close()
            raise
        return response


class AsyncKvApi:
    """`AsyncClient.kv`: `KvApi`'s calls, as coroutines."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def get(self, key: str) -> KeyValue:
        """See `KvApi.get`."""
        return await self._client.run(calls.one(calls.kv_get(key)))

    async def put(self, key: str, value: bytes | str, fence: int | None = None,
                  ephemeral: bool = False, session: str | None = None) -> Written:  # fmt: skip
        """See `KvApi.put`."""
        put = calls.kv_put(key, value, fence, ephemeral, session)
        return await self._client.run(calls.one(put))

    async def delete(self, key: str, fence: int | None = None) -> Written:
        """See `KvApi.delete`."""
        return await self._client.run(calls.one(calls.kv_delete(key, fence)))

    async def list(self, prefix: str = "") -> list[KeyValue]:
        """See `KvApi.list`."""
        return await self._client.run(calls.kv_list(prefix))

    def watch(self, prefix: str = "", index: int | None = None,
              run: str | None = None) -> AsyncWatch[KvEvent]:  # fmt: skip
        """See `KvApi.watch`."""
        return AsyncWatch(self._client, WatchCursor(("kv",), prefix, index, run))


class AsyncWatch(Generic[E]):
    """A watch as an async iterator; `aclose()` or leaving `async with` ends it.

    It opens at `async with` (or `await watch.open()`), else at the first
    `anext`: a watch from now sees every change made after that.
    """

    def __init__(self, client: AsyncClient, cursor: WatchCursor) -> None:
        self.cursor = cursor
        self._events = _follow(client, cursor)
        self._early: list[Event] | None = None  # None: not open yet

    async def open(self) -> AsyncWatch[E]:
        """Connect and read the agent's hello (once).

        Raises:
            Unavailable: the first connection failed. IncompatibleAgent: no /v1/watch.
        """
        if self._early is None:
            self._early = []
            while (item := await self._events.__anext__()) is not OPEN:
                self._early.append(item)
        return self

    @property
    def index(self) -> int | None:
        """See `Watch.index`."""
        return self.cursor.index

    @property
    def run(self) -> str | None:
        """See `Watch.run`."""
        return self.cursor.run

    def __aiter__(self) -> AsyncWatch[E]:
        return self

    async def __anext__(self) -> E:
        if self._early is None:
            await self.open()
        assert self._early is not None
        event: Any = self._early.pop(0) if self._early else await self._events.__anext__()
        return event  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """End the watch and close its connection."""
        await self._events.aclose()

    close = aclose

    async def __aenter__(self) -> AsyncWatch[E]:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _follow(client: AsyncClient, cursor: WatchCursor) -> AsyncGenerator[Any, None]:
    """The events of a watch; the same course as the blocking one (sync.py)."""
    answered = False
    is_open = False
    while True:
        try:
            response = await client._stream(cursor.path(), max(client.timeout, SILENCE_S))
        except ShoalError as exc:
            if exc.status == 410:
                try:
                    for made_up in await client.run(cursor.resync()):
                        yield made_up
                except Unavailable:
                    await asyncio.sleep(cursor.backoff())
                continue
            if answered and (exc.status is None or exc.status == 503):
                await asyncio.sleep(cursor.backoff())
                continue
            raise
        answered = True
        try:
            # No timeout scope around a yield: it would cancel the consumer.
            lines = response.lines()
            first = await anext(lines, b"")
            if first:
                cursor.opened(first)
                if not is_open:
                    is_open = True
                    yield OPEN
                async for line in lines:
                    event = cursor.event(line)
                    if event is not None:
                        yield event
        except (OSError, TimeoutError, httptools.HttpParserError):
            pass  # dropped: resume below
        finally:
            response.close()
        await asyncio.sleep(cursor.backoff())
