"""Listing and watching the metadata log from a client (docs/metadata.md).

A listing (`GET /v1/meta/?prefix=P`) comes a page at a time; `list_steps`
follows the pages (`after` = the last key of the previous page) and
returns every key once, with the revision of the first page.

A watch (`GET /v1/meta/?prefix=P&watch&from=R`) is a stream of lines: a
`hello` (with `from`, the first revision the stream sends), one `changes`
line per revision (each of its key changes), and a `ping` every 5 s with
the revision the agent has applied. The cursor remembers the next revision
it wants (`next_from`: the last one delivered + 1, or a ping's + 1); on a
dropped connection the driver reconnects with `from=next_from`, and a line
of a revision below it is a copy and is dropped: nothing is lost, nothing
comes twice, across agent restarts and controller changes (revisions are
the log's, the same on every agent). A 410 raises `Compacted`: the agent no
longer keeps changes that old; list again, then watch from the listing's
revision + 1.

The listings and watches know their client only as the little they ask of
it (`MetaClient`, `AsyncMetaClient`), as sessions do (session.py): the
clients import the metadata API, and nothing of it imports a client back.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

import msgspec

from shoal.client import calls
from shoal.client.errors import IncompatibleAgent, ShoalError
from shoal.client.types import MetaValue
from shoal.client.watch import SILENCE_S, Backoff

T = TypeVar("T")


class OpenStream(Protocol):
    """A streaming answer `Client` opened: its connection and response."""

    conn: http.client.HTTPConnection
    resp: http.client.HTTPResponse


class MetaClient(Protocol):
    """What `MetaApi` and `MetaWatch` ask of the client that made them (`Client`)."""

    timeout: float  # seconds a call may take

    def run(self, steps: calls.Steps[T]) -> T:
        """Drive `steps` to their result (ShoalError on a refusal)."""
        ...

    def _stream(self, path: str, timeout_s: float | None) -> OpenStream:
        """Open a streaming GET (ShoalError on a refusal)."""
        ...


class LineStream(Protocol):
    """A streaming answer `AsyncClient` opened: its lines as they come."""

    def lines(self) -> AsyncIterator[bytes]:
        """The body's complete lines as they arrive."""
        ...

    def close(self) -> None:
        """Close its connection."""
        ...


class AsyncMetaClient(Protocol):
    """What `AsyncMetaApi` and `AsyncMetaWatch` ask of the client that made
    them (`AsyncClient`)."""

    timeout: float  # seconds a call may take

    async def run(self, steps: calls.Steps[T]) -> T:
        """Drive `steps` to their result (ShoalError on a refusal)."""
        ...

    async def _stream(self, path: str, read_timeout_s: float | None) -> LineStream:
        """Open a streaming GET, its head read (ShoalError on a refusal)."""
        ...


class MetaEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A committed change to a metadata key: `type` "put" (with the value
    and the key's revisions after it) or "delete"; `revision` the entry's."""

    type: str
    key: str
    revision: int
    value: bytes | None = msgspec.field(default=None, name="value_base64")
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0


class MetaListing(msgspec.Struct, frozen=True, kw_only=True):
    """The keys under `prefix`, in key order. `revision`: the first page's
    (each page is read at its own, never lower): watch from `revision + 1`
    and apply an event only when its `mod_revision` is above the key's."""

    prefix: str
    items: list[MetaValue]
    revision: int


class _Page(msgspec.Struct, frozen=True):
    prefix: str
    items: list[MetaValue]
    revision: int
    more: bool = False
    next_after: str = ""


class _Line(msgspec.Struct, frozen=True):
    type: str
    revision: int = 0
    events: list[MetaEvent] = []
    from_: int = msgspec.field(default=0, name="from")


def list_steps(prefix: str, stale: bool = False, page: int = 1000) -> calls.Steps[MetaListing]:
    """Every page of the keys under `prefix`."""
    items: list[MetaValue] = []
    revision: int | None = None
    after = ""
    while True:
        query: dict[str, Any] = {"prefix": prefix, "limit": page}
        if after:
            query["after"] = after
        if stale:
            query["stale"] = 1
        got: _Page = yield calls.Call("GET", "/v1/meta/?" + urlencode(query), calls.typed(_Page),
                                      needs="/v1/meta/?prefix=")  # fmt: skip
        items += got.items
        revision = got.revision if revision is None else revision
        if not got.more or not got.next_after:
            return MetaListing(prefix=prefix, items=items, revision=revision)
        after = got.next_after


class MetaCursor:
    """Where a watch is: the next revision it wants (None: from now)."""

    def __init__(self, prefix: str, from_revision: int | None = None) -> None:
        if from_revision is not None and (isinstance(from_revision, bool) or from_revision < 1):
            raise ValueError(f"from_revision must be a revision (an int >= 1): {from_revision!r}")
        self.prefix = prefix
        self.next_from = from_revision
        self._retry = Backoff()

    def path(self) -> str:
        """The request that resumes from here."""
        query: dict[str, Any] = {"prefix": self.prefix, "watch": 1}
        if self.next_from is not None:
            query["from"] = self.next_from
        return "/v1/meta/?" + urlencode(query)

    def backoff(self) -> float:
        """Seconds before the next attempt (0.1 doubling to 2; reset at a hello)."""
        return self._retry.next_s()

    def opened(self, raw: bytes) -> bool:
        """The stream's first line: True for its hello, False when the
        connection ended first.

        Raises:
            IncompatibleAgent: the first line is not a hello.
        """
        if not raw:
            return False
        if b'"hello"' not in raw:
            raise IncompatibleAgent(f"a meta watch began without its hello: {raw[:200]!r}")
        self.take(raw)
        return True

    def take(self, raw: bytes) -> list[MetaEvent]:
        """The new events on one line (none for a hello, a ping or a copy).

        Raises:
            IncompatibleAgent: the line does not parse.
        """
        if not raw.strip():
            return []
        try:
            line = msgspec.json.decode(raw, type=_Line)
        except msgspec.MsgspecError as exc:
            raise IncompatibleAgent(f"unreadable meta watch line {raw[:200]!r}: {exc}") from None
        if line.type == "hello":
            self._retry.reset()
            if self.next_from is None:
                self.next_from = line.from_
            return []
        nxt = self.next_from or 0
        if line.type == "ping":
            self.next_from = max(nxt, line.revision + 1)
            return []
        if line.type != "changes" or line.revision < nxt:
            return []  # a copy (or a line of a newer agent)
        self.next_from = line.revision + 1
        return line.events


class MetaWatch(Iterator[MetaEvent]):
    """A metadata watch: an iterator of `MetaEvent` that reconnects and
    resumes by itself; open (from now, or `from_revision`) once built.

    Raises:
        Compacted: the revision it would resume from is no longer kept.
        Unavailable: the first connection failed (later ones are retried).
    """

    def __init__(self, client: MetaClient, cursor: MetaCursor) -> None:
        self.cursor = cursor
        self._client = client
        self._conn: Any = None
        self._closed = False
        self._lines = self._follow()
        self._pending: list[MetaEvent] = []
        self._open(first=True)

    @property
    def next_from(self) -> int | None:
        """The revision a later watch resumes from (`from_revision=`)."""
        return self.cursor.next_from

    def _open(self, first: bool) -> None:
        while True:
            try:
                opened = self._client._stream(self.cursor.path(),
                                              max(self._client.timeout, SILENCE_S))  # fmt: skip
            except ShoalError as exc:
                if first or exc.status == 410 or exc.status not in (None, 503):
                    raise
                time.sleep(self.cursor.backoff())
                continue
            self._conn = opened
            try:
                if self.cursor.opened(opened.resp.readline()):
                    return
            except (OSError, http.client.HTTPException):
                pass
            opened.conn.close()
            first = False
            time.sleep(self.cursor.backoff())

    def _follow(self) -> Generator[MetaEvent, None, None]:
        while True:
            try:
                for raw in self._conn.resp:
                    yield from self.cursor.take(raw)
            except (OSError, http.client.HTTPException):
                pass  # dropped: resume
            self._conn.conn.close()
            if self._closed:
                return
            time.sleep(self.cursor.backoff())
            self._open(first=False)

    def __next__(self) -> MetaEvent:
        return next(self._lines)

    def close(self) -> None:
        """End the watch and its connection (from any thread: one blocked
        reading it sees the end)."""
        import socket

        self._closed = True
        sock = None if self._conn is None else self._conn.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self._lines.close()
        except ValueError:
            pass  # being read by another thread: it ends at the shutdown
        if self._conn is not None:
            self._conn.conn.close()

    def __enter__(self) -> MetaWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMetaWatch:
    """`MetaWatch` for asyncio: an async iterator (`async with` opens and closes it)."""

    def __init__(self, client: AsyncMetaClient, cursor: MetaCursor) -> None:
        self.cursor = cursor
        self._client = client
        self._response: Any = None
        self._events: AsyncIterator[MetaEvent] | None = None

    @property
    def next_from(self) -> int | None:
        """See `MetaWatch.next_from`."""
        return self.cursor.next_from

    async def open(self) -> AsyncMetaWatch:
        """Connect and read the hello (once)."""
        if self._events is None:
            await self._connect(first=True)
            self._events = self._follow()
        return self

    async def _connect(self, first: bool) -> None:
        while True:
            try:
                response = await self._client._stream(
                    self.cursor.path(), max(self._client.timeout, SILENCE_S)
                )
            except ShoalError as exc:
                if first or exc.status == 410 or exc.status not in (None, 503):
                    raise
                await _sleep(self.cursor.backoff())
                continue
            self._response, self._lines = response, response.lines()
            try:
                if self.cursor.opened(await anext(self._lines, b"")):
                    return
            except (OSError, TimeoutError):
                pass
            response.close()
            first = False
            await _sleep(self.cursor.backoff())

    async def _follow(self) -> AsyncIterator[MetaEvent]:
        import httptools

        while True:
            try:
                async for raw in self._lines:
                    for event in self.cursor.take(raw):
                        yield event
            except (OSError, TimeoutError, httptools.HttpParserError):
                pass
            self._response.close()
            await _sleep(self.cursor.backoff())
            await self._connect(first=False)

    def __aiter__(self) -> AsyncMetaWatch:
        return self

    async def __anext__(self) -> MetaEvent:
        await self.open()
        assert self._events is not None
        return await anext(self._events)

    async def aclose(self) -> None:
        """End the watch and its connection."""
        if self._response is not None:
            self._response.close()

    async def __aenter__(self) -> AsyncMetaWatch:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _sleep(seconds: float) -> None:
    import asyncio  # here: `import shoal.client` loads no asyncio

    await asyncio.sleep(seconds)
