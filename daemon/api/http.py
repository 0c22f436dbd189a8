"""A small HTTP/1.1 server for the agent's API: httptools (llhttp, the
parser of Node.js and uvicorn) on an asyncio Protocol.

Why not h11 any more: the key-value API must take tens of thousands of
writes per second on one core (issue: 32 writers at five times sqlite's
synced rate). h11 is pure Python and cost about 150 us per request;
parsing in C and writing the response as one preformatted byte string costs
a few microseconds. The server does only what the API needs:

- keep-alive, one request at a time per connection (answered in order);
- a body limit chosen per request from its path (`body_limit`), checked
  against Content-Length and while reading; an oversized body is read and
  discarded (up to `DISCARD_MAX_BYTES`), so the client gets its 413 instead
  of a reset;
- a header-size limit, and a deadline for a request to arrive in full
  (slow clients get a 408 and are closed) or for an idle connection;
- JSON answers, and chunked newline-delimited JSON streams.

What a handler returns, and the rendering of answers, are in api/answers.py.
Raising `HttpError` answers with its status and `{"error": message}`; any
other exception is a bug: logged, answered with 500, connection kept safe.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import structlog

from shoal.daemon.api.answers import (
    REASONS,
    Deferred,
    Handler,
    HttpError,
    Raw,
    Request,
    Stream,
    body_response,
    json_response,
)

log = structlog.get_logger("shoal.api")

MAX_HEADER_BYTES = 16 * 1024
DISCARD_MAX_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 120.0
_METHODS = {m.encode(): m for m in ("GET", "PUT", "POST", "DELETE", "HEAD")}


class DeferredGroups:
    """The connections waiting on each shared future, answered by one
    callback per future: a callback per connection cost a loop handle each
    (32 per group commit), and the write answers come out in one go."""

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Future[Any], list[tuple[HttpProtocol, Deferred, bool]]] = {}

    def add(self, conn: HttpProtocol, deferred: Deferred, keep_alive: bool) -> None:
        """Answer `deferred` on `conn` when its future completes."""
        fut = deferred.future
        waiting = self._waiting.get(fut)
        if waiting is None:
            self._waiting[fut] = [(conn, deferred, keep_alive)]
            fut.add_done_callback(self._done)
        else:
            waiting.append((conn, deferred, keep_alive))

    def _done(self, fut: asyncio.Future[Any]) -> None:
        error = fut.exception() if not fut.cancelled() else asyncio.CancelledError()
        for conn, deferred, keep_alive in self._waiting.pop(fut):
            conn.answer_deferred(deferred, keep_alive, error)


# httptools is imported by the first connection, not with this module: an
# agent's start serves no request, and the import cost it about 6 ms of CPU
# (60 ms of a 2-core machine's time when 20 agents start together).
httptools: Any = None


def _httptools() -> Any:
    global httptools
    if httptools is None:
        import httptools as module

        httptools = module
    return httptools


class HttpProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, handler: Handler, body_limit: Callable[[str, str], int],
                 connections: set[HttpProtocol], groups: DeferredGroups) -> None:  # fmt: skip
        self._handler = handler
        self._body_limit = body_limit
        self._connections = connections
        self._groups = groups
        self._loop = asyncio.get_running_loop()
        self._parser = _httptools().HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._queue: deque[tuple[Request | HttpError, bool]] = deque()
        self._busy = False
        self._closing = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline_at = 0.0
        self._task: asyncio.Task[Any] | None = None
        self._reset_message()

    # -- asyncio.Protocol --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport
        self._connections.add(self)
        self._deadline_at = self._loop.time() + IDLE_TIMEOUT_S
        self._timer = self._loop.call_at(self._deadline_at, self._check_deadline)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(HttpError(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, HttpError):
                self._fail(cause)
            else:
                self._fail(HttpError(400, f"bad HTTP request: {exc}"))

    # -- httptools callbacks -------------------------------------------------------

    def _reset_message(self) -> None:
        self._url = b""
        self._header_bytes = 0
        self._content_length: int | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._limit = 0
        self._rejected: HttpError | None = None
        self._in_message = False
        self._authorization = ""

    def on_message_begin(self) -> None:
        self._reset_message()
        self._in_message = True
        self._deadline_at = self._loop.time() + REQUEST_TIMEOUT_S

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_header(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        # Called for every header of every request: the length test spares
        # the lower-casing of the others (two of three in a write).
        size = len(name)
        self._header_bytes += size + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise HttpError(431, f"request head over {MAX_HEADER_BYTES} bytes")
        if size == 14 and name.lower() == b"content-length" and value.isdigit():
            self._content_length = int(value)
        elif size == 13 and name.lower() == b"authorization":
            self._authorization = value.decode("latin-1")

    def _count_header(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_HEADER_BYTES:
            raise HttpError(431, f"request head over {MAX_HEADER_BYTES} bytes")

    def on_headers_complete(self) -> None:
        url = httptools.parse_url(self._url)
        method = self._parser.get_method()
        self._method = _METHODS.get(method) or method.decode()
        self._path = url.path.decode("latin-1")
        query = url.query
        self._query = query.decode("latin-1") if query else ""
        self._limit = self._body_limit(self._method, self._path)
        if self._content_length is not None and self._content_length > self._limit:
            self._rejected = HttpError(413, f"request body over {self._limit} bytes")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > DISCARD_MAX_BYTES and self._size > self._limit:
            raise HttpError(413, f"request body over {self._limit} bytes")
        if self._size > self._limit:
            self._rejected = HttpError(413, f"request body over {self._limit} bytes")
        if self._rejected is None:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        keep_alive = self._parser.should_keep_alive()
        if self._rejected is not None:
            self._queue.append((self._rejected, False))
        else:
            try:
                # keep_blank_values: a bare flag (`?stale`, `?watch`) is present,
                # with the value "" (parse_qs drops it otherwise).
                query = (parse_qs(self._query, keep_blank_values=True, max_num_fields=64)
                         if self._query else {})  # fmt: skip
            except ValueError:
                query = {}
            request = Request(
                self._method, self._path, query, b"".join(self._body), self._authorization
            )
            self._queue.append((request, keep_alive))
        self._deadline_at = self._loop.time() + IDLE_TIMEOUT_S
        if not self._busy:
            self._next()

    # -- answering -------------------------------------------------------------------

    def _next(self) -> None:
        while self._queue and not self._closing:
            item, keep_alive = self._queue.popleft()
            if isinstance(item, HttpError):
                self._fail(item)
                return
            try:
                result = self._handler(item)
            except HttpError as exc:
                self._write(json_response(exc.status, exc.body(), keep_alive))
                continue
            except Exception:
                self._bug(item)
                return
            if isinstance(result, Raw):
                self._write(_raw_response(result))
                continue
            if isinstance(result, tuple):
                self._write(json_response(result[0], result[1], keep_alive))
                if not keep_alive:
                    self._close()
                    return
                continue
            self._busy = True
            if isinstance(result, Deferred):
                self._groups.add(self, result, keep_alive)
                return
            self._task = self._loop.create_task(self._finish(item, result, keep_alive))
            return

    async def _finish(self, request: Request, result: Any, keep_alive: bool) -> None:
        try:
            answer = await result if not isinstance(result, Stream) else result
            if isinstance(answer, Stream):
                await self._stream(answer)
                return
            if isinstance(answer, Raw):  # awaited: a backup (api/snapshot.py)
                self._write(_raw_response(answer))
            else:
                self._write(json_response(answer[0], answer[1], keep_alive))
        except HttpError as exc:
            self._write(json_response(exc.status, exc.body(), keep_alive))
        except asyncio.CancelledError:
            raise
        except Exception:
            self._bug(request)
            return
        self._busy = False
        self._task = None
        if not keep_alive:
            self._close()
        else:
            self._deadline_at = self._loop.time() + IDLE_TIMEOUT_S
            self._next()

    def answer_deferred(self, result: Deferred, keep_alive: bool,
                        error: BaseException | None) -> None:  # fmt: skip
        """Send the answer `result` waited for (a 500 if its future failed)."""
        if self._closing:
            return
        if error is None:
            self._write(body_response(result.status, result.body, keep_alive))
        else:
            msg = f"the write could not be made durable: {error}"
            self._write(json_response(500, {"error": msg}, keep_alive))
        self._busy = False
        if not keep_alive:
            self._close()
        else:
            self._deadline_at = self._loop.time() + IDLE_TIMEOUT_S
            if self._queue:
                self._next()

    async def _stream(self, stream: Stream) -> None:
        self._write(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n"
                    b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
        if self._timer is not None:
            self._timer.cancel()
        async for item in stream.lines:
            if self._closing:
                return
            line = item if isinstance(item, bytes) else json.dumps(item).encode() + b"\n"
            self._write(b"%x\r\n%s\r\n" % (len(line), line))
        self._write(b"0\r\n\r\n")
        self._close()

    def _bug(self, request: Request) -> None:
        log.exception("api handler failed", method=request.method, path=request.path)
        self._write(json_response(500, {"error": "internal error"}, keep_alive=False))
        self._close()

    def _fail(self, exc: HttpError) -> None:
        self._write(json_response(exc.status, exc.body(), keep_alive=False))
        self._close()

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._closing:
            self._transport.write(data)

    def _close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    def _check_deadline(self) -> None:
        # One timer per connection, moved only when it fires: re-arming a
        # timer on every request cost more than parsing the request.
        now = self._loop.time()
        if self._busy or now < self._deadline_at:
            self._timer = self._loop.call_at(max(self._deadline_at, now + 1.0),
                                             self._check_deadline)  # fmt: skip
            return
        self._timer = None
        if self._in_message:
            self._fail(HttpError(408, "request not received in time"))
        else:
            self._close()


class HttpServer:
    """Serves `handler` on one TCP address."""

    def __init__(self, handler: Handler, body_limit: Callable[[str, str], int]) -> None:
        self._handler = handler
        self._body_limit = body_limit
        self._servers: list[asyncio.base_events.Server] = []
        self.connections: set[HttpProtocol] = set()
        self._groups = DeferredGroups()

    async def start(self, sock: socket.socket) -> None:
        """Listen on `sock`, a bound TCP socket (`open_tcp_listener`)."""
        loop = asyncio.get_running_loop()
        self._servers.append(await loop.create_server(self._protocol, sock=sock))

    async def start_unix(self, path: str, mode: int = 0o660) -> None:
        """Also listen on a unix socket at `path` with file mode `mode`
        (a stale socket file from a crash is replaced). Raises OSError."""
        loop = asyncio.get_running_loop()
        if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)
        old_umask = os.umask(0o777 & ~mode)  # never world-accessible, not even briefly
        try:
            self._servers.append(await loop.create_unix_server(self._protocol, path))
        finally:
            os.umask(old_umask)
        os.chmod(path, mode)

    def _protocol(self) -> HttpProtocol:
        return HttpProtocol(self._handler, self._body_limit, self.connections, self._groups)

    def close(self) -> None:
        """Stop listening and drop every connection."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn._close()


def _raw_response(result: Raw) -> bytes:
    """A complete HTTP/1.1 response of a non-JSON answer."""
    head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (
        result.status, REASONS.get(result.status, b""),
        result.content_type.encode(), len(result.body))  # fmt: skip
    return head + result.body
