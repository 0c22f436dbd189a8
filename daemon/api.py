"""The agent's local HTTP JSON API, the CLI's only way in.

    GET  /v1/members[?status=S]    the member list
    GET  /v1/self                  this node, with its counters
    POST /v1/join  {"addrs": [..]} join through addresses; per-address outcome
    POST /v1/leave                 leave the cluster (the agent keeps running)
    GET  /v1/events                membership events as newline-delimited JSON
    PUT  /v1/kv/<key>              store the request body as the value of <key>
    GET  /v1/kv/<key>              the value and its version (404 if absent)
    DELETE /v1/kv/<key>            delete <key> (a tombstone that replicates)
    GET  /v1/kv/?prefix=&after=&limit=   list keys and values in key order

Writes return once durable on this node (group commit, see daemon/commit.py).

Errors are JSON too, `{"error": "..."}`, with a 4xx status for a bad request.
HTTP/1.1 parsing and framing are h11's (a sans-IO parser, like our cores);
this module only routes. It was aiohttp, whose import alone cost 0.35 s of
CPU per agent start: on a 2-core machine starting 20 agents that is most of
the join time the benchmark measures. The API listens on loopback by
default; see docs/operations.md.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote_to_bytes, urlsplit

import h11
import structlog

from daemon.config import parse_address
from daemon.errors import ConfigError
from membership.member import MemberState
from membership.output import Address
from storage import hlc
from storage.records import MAX_KEY_BYTES, MAX_VALUE_BYTES, Record

if TYPE_CHECKING:
    from daemon.agent import Agent

log = structlog.get_logger("shoal.api")

MAX_BODY_BYTES = 64 * 1024
KV_PREFIX = "/v1/kv/"
LIST_LIMIT_DEFAULT = 1000
LIST_LIMIT_MAX = 10_000
MAX_HEADER_BYTES = 16 * 1024
READ_TIMEOUT_S = 30.0
_STATUSES = {s.label for s in MemberState}
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
            408: b"Request Timeout", 413: b"Payload Too Large", 500: b"Internal Server Error",
            504: b"Gateway Timeout"}  # fmt: skip


class HttpError(Exception):
    """A request we answer with a 4xx/5xx JSON error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Exchange:
    """One HTTP connection: h11 state plus the stream it runs on."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

    async def next_event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            async with asyncio.timeout(READ_TIMEOUT_S):
                data = await self.reader.read(65536)
            self.conn.receive_data(data)

    async def body(self, request: h11.Request, limit: int = MAX_BODY_BYTES) -> bytes:
        length = dict(request.headers).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise HttpError(413, f"request body over {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await self.next_event()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise HttpError(413, f"request body over {limit} bytes")
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            else:
                raise HttpError(400, "malformed request body")

    def send(self, event: Any) -> None:
        data = self.conn.send(event)
        if data:
            self.writer.write(data)

    async def json(self, status: int, obj: Any, close: bool = False) -> None:
        body = json.dumps(obj).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)))]
        if close:
            headers.append((b"connection", b"close"))
        self.send(h11.Response(status_code=status, headers=headers,
                               reason=_REASONS.get(status, b"")))  # fmt: skip
        self.send(h11.Data(data=body))
        self.send(h11.EndOfMessage())
        await self.writer.drain()


class ApiServer:
    """Serves the API of one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.Task[Any]] = set()
        self._routes = {
            ("GET", "/v1/members"): self.members,
            ("GET", "/v1/self"): self.self_info,
            ("POST", "/v1/join"): self.join,
            ("POST", "/v1/leave"): self.leave,
        }

    async def start(self, addr: Address) -> None:
        """Listen on `addr`."""
        try:
            self._server = await asyncio.start_server(self._client, addr[0], addr[1])
        except OSError as exc:
            where = f"{addr[0]}:{addr[1]}"
            raise ConfigError(f"api: cannot listen on {where}: {exc.strerror}") from None

    async def stop(self) -> None:
        """Close the listener and every open connection."""
        if self._server is not None:
            self._server.close()
        for watcher in list(self.agent.watchers):
            watcher.queue.put_nowait(None)
        for task in list(self._clients):
            task.cancel()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        ex = _Exchange(reader, writer)
        try:
            while await self._one_request(ex):
                ex.conn.start_next_cycle()
        except (h11.RemoteProtocolError, TimeoutError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(task)
            writer.close()

    async def _one_request(self, ex: _Exchange) -> bool:
        """Answer one request; False when the connection is done."""
        try:
            event = await ex.next_event()
        except h11.RemoteProtocolError as exc:
            if ex.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await ex.json(exc.error_status_hint, {"error": f"bad HTTP request: {exc}"}, True)
            return False
        if not isinstance(event, h11.Request):
            return False
        method, target = event.method.decode(), urlsplit(event.target.decode())
        try:
            if target.path.startswith(KV_PREFIX):
                limit = MAX_VALUE_BYTES if method == "PUT" else MAX_BODY_BYTES
                body = await ex.body(event, limit)
                status, answer = await self.kv(method, target.path, parse_qs(target.query), body)
                await ex.json(status, answer)
                return ex.conn.our_state is h11.DONE and ex.conn.their_state is h11.DONE
            body = await ex.body(event)
            if (method, target.path) == ("GET", "/v1/events"):
                await self.events(ex)
                return False
            handler = self._routes.get((method, target.path))
            if handler is None:
                known = any(path == target.path for _, path in self._routes)
                raise HttpError(405 if known else 404, f"no {method} {target.path}")
            status, answer = await handler(parse_qs(target.query), body)
        except HttpError as exc:
            await ex.json(exc.status, {"error": str(exc)}, close=True)
            return False
        except (h11.RemoteProtocolError, TimeoutError, ConnectionError):
            raise
        except Exception as exc:  # our bug: answer, log, keep serving others
            log.exception("api handler failed", method=method, path=target.path)
            await ex.json(500, {"error": f"internal error: {type(exc).__name__}"}, close=True)
            return False
        await ex.json(status, answer)
        return ex.conn.our_state is h11.DONE and ex.conn.their_state is h11.DONE

    # -- routes --------------------------------------------------------------------

    async def members(self, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        status = query.get("status", [None])[0]
        if status is not None and status not in _STATUSES:
            raise HttpError(400, f"status must be one of {', '.join(sorted(_STATUSES))}")
        views = [m.to_json() for m in self.agent.node.members()]
        if status is not None:
            views = [v for v in views if v["status"] == status]
        return 200, {"members": views}

    async def self_info(self, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        node = self.agent.node
        me: dict[str, Any] = node.swim.table.me.view().to_json()
        me["cluster"] = self.agent.config.cluster
        me["health_score"] = node.swim.health.score
        me["watchers"] = len(self.agent.watchers)
        me["counters"] = {**node.counters(), **dict(self.agent.counters)}
        if self.agent.faults is not None:
            me["counters"]["fault_injected_drops"] = self.agent.faults.dropped
        return 200, me

    async def join(self, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        try:
            parsed_body = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise HttpError(400, 'body must be JSON: {"addrs": ["ADDR:PORT", ...]}') from None
        addrs = parsed_body.get("addrs") if isinstance(parsed_body, dict) else None
        if not isinstance(addrs, list) or not addrs or len(addrs) > 64:
            raise HttpError(400, 'addrs must be a list of 1 to 64 "ADDR:PORT" strings')
        try:
            parsed = [parse_address("addrs", a, 7946) for a in addrs]
        except ConfigError as exc:
            raise HttpError(400, str(exc)) from None
        try:
            results = await self.agent.join(parsed)
        except TimeoutError:
            raise HttpError(504, "join attempts did not finish in time") from None
        return 200, {"joined": sum(1 for ok in results.values() if ok), "results": results}

    async def leave(self, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        self.agent.leave()
        return 200, {"left": True}

    async def kv(self, method: str, path: str, query: dict[str, list[str]],
                 body: bytes) -> tuple[int, Any]:  # fmt: skip
        """The key-value routes: one key, or a listing for an empty key."""
        key = unquote_to_bytes(path[len(KV_PREFIX) :])
        if len(key) > MAX_KEY_BYTES:
            raise HttpError(400, f"a key is at most {MAX_KEY_BYTES} bytes")
        if not key:
            if method != "GET":
                raise HttpError(405 if method in ("PUT", "DELETE") else 404,
                                f"{method} needs a key: {KV_PREFIX}<key>")  # fmt: skip
            return 200, self._kv_list(query)
        if method == "GET":
            rec = self.agent.node.read(key)
            if rec is None or rec.value is None:
                raise HttpError(404, f"no key {key.decode(errors='replace')!r}")
            return 200, self._record_json(rec)
        if method not in ("PUT", "DELETE"):
            raise HttpError(405, f"no {method} {KV_PREFIX}<key>")
        try:
            rec = await self.agent.write(key, body if method == "PUT" else None)
        except OSError as exc:
            log.error("write not durable", key=key.decode(errors="replace"), error=str(exc))
            raise HttpError(500, f"the write could not be made durable: {exc}") from None
        return 200, self._record_json(rec)

    def _kv_list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        prefix = query.get("prefix", [""])[0].encode()
        after = query.get("after", [""])[0].encode()
        limit_text = query.get("limit", [str(LIST_LIMIT_DEFAULT)])[0]
        if not limit_text.isdigit() or not 0 < int(limit_text) <= LIST_LIMIT_MAX:
            raise HttpError(400, f"limit must be 1 to {LIST_LIMIT_MAX}")
        limit = int(limit_text)
        items: list[dict[str, Any]] = []
        store = self.agent.node.sync.replica.store
        more = True
        while len(items) < limit and more:
            batch = store.scan(prefix, after, limit)
            more = len(batch) == limit
            for rec in batch:
                after = rec.key
                if rec.value is not None and len(items) < limit:
                    items.append(self._record_json(rec))
        next_after = items[-1]["key"] if len(items) == limit else None
        return {"items": items, "next_after": next_after}

    def _record_json(self, rec: Record) -> dict[str, Any]:
        writer = self.agent.node.swim.table.name_of(rec.writer)
        out: dict[str, Any] = {
            "key": rec.key.decode(errors="replace"),
            "hlc": rec.hlc,
            "modified_wall_ms": hlc.physical_ms(rec.hlc),
            "writer": writer or rec.writer.hex(),
            "writer_id": rec.writer.hex(),
        }
        if rec.value is None:
            out["deleted"] = True
        else:
            try:
                out["value"] = rec.value.decode()
            except UnicodeDecodeError:
                out["value"] = None
            out["value_base64"] = base64.b64encode(rec.value).decode()
        return out

    async def events(self, ex: _Exchange) -> None:
        from daemon.agent import Watcher

        ex.send(h11.Response(status_code=200, headers=[(b"content-type", b"application/x-ndjson")]))
        await ex.writer.drain()
        watcher = Watcher()
        self.agent.watchers.add(watcher)
        try:
            while (record := await watcher.queue.get()) is not None:
                ex.send(h11.Data(data=json.dumps(record).encode() + b"\n"))
                await ex.writer.drain()
            ex.send(h11.EndOfMessage())
            await ex.writer.drain()
        finally:
            self.agent.watchers.discard(watcher)
