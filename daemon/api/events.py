"""The API's event routes: the two streams, user events and queries.

GET  /v1/events                membership and user events as newline-delimited JSON
GET  /v1/watch?topics=&prefix=&index=&run=   numbered changes (members, controller,
                               keys, events), resumable (api/changes.py)
POST /v1/event/<name>          fire a user event; the body is its payload
                               (daemon/userevents.py)
POST /v1/query/<name>?node=RE&tag=K=RE&timeout=S   ask members; the body is the
                               payload; returns when all expected answered
                               (daemon/network/queries.py)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote_to_bytes

from shoal.daemon.api.answers import HttpError, Request, Result, Stream
from shoal.daemon.api.changes import TOPICS, Ping, ResumeError
from shoal.daemon.api.port import AgentPort
from shoal.kernel.errors import WriteRefused
from shoal.storage.records import MAX_KEY_BYTES

EVENT_ROUTE = "/v1/event/"
QUERY_ROUTE = "/v1/query/"


def user_event_route(agent: AgentPort, request: Request) -> Result:
    """`POST /v1/event/NAME`: fire a user event (the body is its payload)."""
    from shoal.daemon.config import valid_event_name
    from shoal.daemon.userevents import QueueFull
    from shoal.services.delivery import MAX_PAYLOAD_BYTES

    if request.method != "POST":
        raise HttpError(405, f"no {request.method} {EVENT_ROUTE}<name>")
    name = unquote_to_bytes(request.path[len(EVENT_ROUTE) :]).decode(errors="replace")
    if not valid_event_name(name):
        raise HttpError(400, "an event name is 1 to 128 printable characters without spaces")
    if len(request.body) > MAX_PAYLOAD_BYTES:
        raise HttpError(413, f"a payload is at most {MAX_PAYLOAD_BYTES} bytes")
    try:
        ident, rec = agent.user_events.send(name, request.body)
    except QueueFull as exc:
        raise HttpError(429, str(exc)) from None
    except WriteRefused as exc:
        raise HttpError(503, str(exc)) from None
    return 200, {"id": ident, "name": name, "payload_bytes": len(request.body)}


async def query_route(agent: AgentPort, request: Request) -> Result:
    """`POST /v1/query/NAME?node=RE&tag=K=RE&timeout=S`: ask members."""
    import re

    from shoal.daemon.config import valid_event_name
    from shoal.services.queries import MAX_PAYLOAD_BYTES, MAX_TIMEOUT_S

    if request.method != "POST":
        raise HttpError(405, f"no {request.method} {QUERY_ROUTE}<name>")
    name = unquote_to_bytes(request.path[len(QUERY_ROUTE) :]).decode(errors="replace")
    if not valid_event_name(name) or name.startswith("_"):
        raise HttpError(400, "a query name is 1 to 128 printable characters without spaces, "
                        "not starting with '_' (reserved)")  # fmt: skip
    if len(request.body) > MAX_PAYLOAD_BYTES:
        raise HttpError(413, f"a payload is at most {MAX_PAYLOAD_BYTES} bytes")
    query = request.query
    try:
        timeout_s = float(query.get("timeout", ["5"])[0])
    except ValueError:
        timeout_s = -1.0
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise HttpError(400, f"timeout must be seconds above 0, at most {MAX_TIMEOUT_S:g}")
    try:
        node_text = query.get("node", [None])[0]
        node_re = re.compile(node_text) if node_text is not None else None
        tags = {}
        for item in query.get("tag", []):
            key, sep, pattern = item.partition("=")
            if not sep or not key:
                raise HttpError(400, f"tag must be KEY=REGEX, not {item[:80]!r}")
            tags[key] = re.compile(pattern)
    except re.error as exc:
        raise HttpError(400, f"a regex does not compile: {exc}") from None
    return 200, await agent.queries.run(name, request.body, node_re, tags, timeout_s)


def events_route(agent: AgentPort, request: Request) -> Result:
    """`GET /v1/events`: membership and user events as they happen."""
    watchers = agent.watchers
    watcher = watchers.open()

    async def lines() -> AsyncIterator[Any]:
        try:
            while (record := await watcher.queue.get()) is not None:
                yield record
        finally:
            watchers.close(watcher)

    return Stream(lines())


def watch_route(agent: AgentPort, request: Request) -> Result:
    """`/v1/watch`: numbered changes from `index` on (api/changes.py);
    a hello line first, a ping line every PING_S of quiet."""
    query = request.query
    topics_text = query.get("topics", [",".join(TOPICS)])[0]
    topics = frozenset(t for t in topics_text.split(",") if t)
    if not topics or not topics <= set(TOPICS):
        raise HttpError(400, f"topics must be a comma list of {', '.join(TOPICS)}")
    prefix = unquote_to_bytes(query.get("prefix", [""])[0])
    if len(prefix) > MAX_KEY_BYTES:
        raise HttpError(400, f"a prefix is at most {MAX_KEY_BYTES} bytes")
    index_text = query.get("index", [None])[0]
    if index_text is not None and not (index_text.isdigit() and len(index_text) < 19):
        raise HttpError(400, f"index must be a non-negative integer, not {index_text[:40]!r}")
    changes = agent.changes
    try:
        sub = changes.subscribe(topics, prefix, query.get("run", [None])[0],
                                None if index_text is None else int(index_text))  # fmt: skip
    except ResumeError as exc:
        raise HttpError(exc.status, str(exc), run=changes.run, index=changes.index) from None

    async def lines() -> AsyncIterator[Any]:
        try:
            yield {"type": "hello", "run": changes.run, "index": changes.index}
            while (change := await sub.queue.get()) is not None:
                if isinstance(change, Ping):
                    yield {"type": "ping", "index": changes.index}
                else:
                    yield change.line
        finally:
            changes.close(sub)

    return Stream(lines())
