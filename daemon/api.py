"""The agent's local HTTP JSON API (aiohttp), the CLI's only way in.

    GET  /v1/members[?status=S]   the member list
    GET  /v1/self                 this node, with its counters
    POST /v1/join  {"addrs": [..]} join through addresses; per-address outcome
    POST /v1/leave                leave the cluster (the agent keeps running)
    GET  /v1/events               membership events as newline-delimited JSON

Errors are JSON too: `{"error": "..."}` with a 4xx status for a bad request.
The API listens on loopback by default; see docs/operations.md.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from daemon.config import parse_address
from daemon.errors import ConfigError
from membership.member import MemberState
from membership.output import Address

if TYPE_CHECKING:
    from daemon.agent import Agent

MAX_BODY_BYTES = 64 * 1024
_STATUSES = {s.label for s in MemberState}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason)


class ApiServer:
    """Serves the API of one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.app = web.Application(middlewares=[_json_errors], client_max_size=MAX_BODY_BYTES)
        self.app.add_routes([
            web.get("/v1/members", self.members),
            web.get("/v1/self", self.self_info),
            web.post("/v1/join", self.join),
            web.post("/v1/leave", self.leave),
            web.get("/v1/events", self.events),
        ])  # fmt: skip
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)

    async def start(self, addr: Address) -> None:
        """Listen on `addr`."""
        await self.runner.setup()
        site = web.TCPSite(self.runner, addr[0], addr[1])
        try:
            await site.start()
        except OSError as exc:
            where = f"{addr[0]}:{addr[1]}"
            raise ConfigError(f"api: cannot listen on {where}: {exc.strerror}") from None

    async def stop(self) -> None:
        """Close the listener and open streams."""
        for watcher in list(self.agent.watchers):
            watcher.queue.put_nowait(None)
        await self.runner.cleanup()

    async def members(self, request: web.Request) -> web.Response:
        status = request.query.get("status")
        if status is not None and status not in _STATUSES:
            return _error(400, f"status must be one of {', '.join(sorted(_STATUSES))}")
        views = [m.to_json() for m in self.agent.node.members()]
        if status is not None:
            views = [v for v in views if v["status"] == status]
        return web.json_response({"members": views})

    async def self_info(self, request: web.Request) -> web.Response:
        node = self.agent.node
        me = node.swim.table.me.view().to_json()
        me["cluster"] = self.agent.config.cluster
        me["health_score"] = node.swim.health.score
        me["watchers"] = len(self.agent.watchers)
        me["counters"] = {**node.counters(), **dict(self.agent.counters)}
        return web.json_response(me)

    async def join(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "body must be JSON: {\"addrs\": [\"ADDR:PORT\", ...]}")
        addrs = body.get("addrs") if isinstance(body, dict) else None
        if not isinstance(addrs, list) or not addrs or len(addrs) > 64:
            return _error(400, "addrs must be a list of 1 to 64 \"ADDR:PORT\" strings")
        try:
            parsed = [parse_address("addrs", a, 7946) for a in addrs]
        except ConfigError as exc:
            return _error(400, str(exc))
        results = await self.agent.join(parsed)
        joined = sum(1 for ok in results.values() if ok)
        return web.json_response({"joined": joined, "results": results})

    async def leave(self, request: web.Request) -> web.Response:
        self.agent.leave()
        return web.json_response({"left": True})

    async def events(self, request: web.Request) -> web.StreamResponse:
        from daemon.agent import Watcher

        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        watcher = Watcher()
        self.agent.watchers.add(watcher)
        try:
            while True:
                record = await watcher.queue.get()
                if record is None:
                    break
                await response.write(json.dumps(record).encode() + b"\n")
        except (ConnectionResetError, OSError):
            pass
        finally:
            self.agent.watchers.discard(watcher)
        return response
